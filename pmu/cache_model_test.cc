#include "pmu/cache_model.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace vbts::pmu {
namespace {

// 2 sets x 2 ways inner (256 bytes), 4 sets x 2 ways LLC (512 bytes): small
// enough to reason about line by line.  Line n maps to inner set n % 2 and
// LLC set n % 4.
constexpr CacheGeometry kTiny{{2, 2}, {4, 2}};
constexpr uint64_t kLine = kCacheLineBytes;

struct Counts {
  int refs = 0, misses = 0;
  bool operator==(const Counts&) const = default;
};
// One access to each of lines 0 .. n-1, in order, twice.
Counts SweepTwice(CacheModel& c, uint64_t n) {
  Counts k;
  for (int pass = 0; pass < 2; pass++)
    for (uint64_t line = 0; line < n; line++) {
      const CacheModel::Outcome o = c.Access(line * kLine);
      k.refs += o.llc_reference;
      k.misses += o.llc_miss;
    }
  return k;
}

TEST(CacheModelTest, FirstAccessMissesBothLevelsSecondHits) {
  CacheModel c(kTiny);
  CacheModel::Outcome o = c.Access(0x1000);
  EXPECT_TRUE(o.llc_reference);
  EXPECT_TRUE(o.llc_miss);
  o = c.Access(0x1000 + kLine - 1);  // same line
  EXPECT_FALSE(o.llc_reference);
  EXPECT_FALSE(o.llc_miss);
}

TEST(CacheModelTest, InnerEvictionIsAnLlcHit) {
  CacheModel c(kTiny);
  // Lines 0, 2, 4 share inner set 0 (2 ways): the third evicts line 0 there.
  // In the LLC, lines 0 and 4 share set 0 (2 ways), line 2 is in set 2:
  // line 0 is still in the LLC.
  for (uint64_t n : {0, 2, 4}) EXPECT_TRUE(c.Access(n * kLine).llc_miss);
  const CacheModel::Outcome o = c.Access(0);
  EXPECT_TRUE(o.llc_reference);
  EXPECT_FALSE(o.llc_miss);
}

// Probe tells what Access would return and changes nothing: after the same
// sequence as InnerEvictionIsAnLlcHit, line 0 probes as an LLC hit (inner
// set 0 holds lines 2 and 4) as many times as asked, and probing line 6
// (a miss everywhere) neither fills it nor evicts line 2 from inner set 0
// (which an Access of 6 would, 2 being the LRU way there then).
TEST(CacheModelTest, ProbeTellsTheOutcomeWithoutChangingTheCaches) {
  CacheModel c(kTiny);
  const CacheModel::Outcome cold = c.Probe(0);
  EXPECT_TRUE(cold.llc_reference);
  EXPECT_TRUE(cold.llc_miss);  // nothing allocated yet
  for (uint64_t n : {0, 2, 4}) c.Access(n * kLine);
  for (int i = 0; i < 3; i++) {
    const CacheModel::Outcome o = c.Probe(0);
    EXPECT_TRUE(o.llc_reference);
    EXPECT_FALSE(o.llc_miss);
  }
  EXPECT_TRUE(c.Probe(6 * kLine).llc_miss);
  EXPECT_TRUE(c.Probe(6 * kLine).llc_miss);
  EXPECT_FALSE(c.Probe(2 * kLine).llc_reference);
  EXPECT_FALSE(c.Access(2 * kLine).llc_reference);
}

TEST(CacheModelTest, LeastRecentlyUsedWayIsReplaced) {
  CacheModel c(kTiny);
  // Inner set 0: lines 0 and 2; touching 0 again makes 2 the LRU way, so
  // line 4 replaces 2 and line 0 still hits.
  c.Access(0);
  c.Access(2 * kLine);
  c.Access(0);
  c.Access(4 * kLine);
  EXPECT_FALSE(c.Access(0).llc_reference);
  EXPECT_TRUE(c.Access(2 * kLine).llc_reference);
}

TEST(CacheModelTest, CyclicSweepLargerThanTheLlcAlwaysMisses) {
  // 16 lines through a 8-line LLC, twice: with LRU every access misses,
  // the pattern of kvm-unit-tests pmu.flat's loop over 64 MB.
  CacheModel c(kTiny);
  EXPECT_EQ(SweepTwice(c, 16), (Counts{32, 32}));
}

TEST(CacheModelTest, NonPowerOfTwoSetsAndHighAddresses) {
  // 3 sets: lines 0, 3 and 6 share set 0 of a 2-way level.
  CacheModel c({{3, 2}, {3, 2}});
  c.Access(0);
  c.Access(3 * kLine);
  c.Access(6 * kLine);  // evicts line 0 from both levels
  EXPECT_TRUE(c.Access(0).llc_miss);
  EXPECT_TRUE(c.Access(~0ull).llc_miss);  // the last line of the address space
  EXPECT_FALSE(c.Access(~0ull - 1).llc_reference);
}

TEST(CacheModelTest, SpatialPrefetcherFillsTheOtherLineOfThePair) {
  // Lines 6 and 7 form a 128-byte pair: a miss on 6 brings 7 into both
  // levels (not counted), so 7 hits; 8's pair is 9, not 7.
  CacheModel c({{2, 2}, {4, 2}, PairPrefetch::kInnerAndLlc});
  EXPECT_TRUE(c.Access(6 * kLine).llc_miss);
  EXPECT_FALSE(c.Access(7 * kLine).llc_reference);
  EXPECT_TRUE(c.Access(8 * kLine).llc_miss);
  EXPECT_FALSE(c.Access(9 * kLine).llc_reference);
  // Into the LLC only (an L2 that is itself the LLC, behind an L1D): the
  // pair's other line is an LLC reference that hits.
  CacheModel l({{2, 2}, {4, 2}, PairPrefetch::kLlc});
  EXPECT_TRUE(l.Access(6 * kLine).llc_miss);
  const CacheModel::Outcome o = l.Access(7 * kLine);
  EXPECT_TRUE(o.llc_reference);
  EXPECT_FALSE(o.llc_miss);
}

TEST(CacheModelTest, StreamingSweepMissesEveryOtherLine) {
  // kvm-unit-tests pmu.flat's loop: one load per line over 16 lines through
  // an 8-line LLC, twice.  The spatial prefetcher halves the misses.
  CacheModel c({{2, 2}, {4, 2}, PairPrefetch::kInnerAndLlc});
  EXPECT_EQ(SweepTwice(c, 16), (Counts{16, 16}));
}

TEST(CacheModelTest, WithoutAnInnerLevelEveryAccessReferencesTheLlc) {
  CacheModel c({{0, 0}, {4, 2}});
  EXPECT_TRUE(c.Access(0).llc_miss);
  const CacheModel::Outcome o = c.Access(0);
  EXPECT_TRUE(o.llc_reference);
  EXPECT_FALSE(o.llc_miss);
}

}  // namespace
}  // namespace vbts::pmu
