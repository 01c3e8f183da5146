// hpet_test.cc: the HPET's registers, counter, comparators and interrupt
// lines (vmm/hpet.h). Times are the caller's nanoseconds; the counter ticks
// every 10 ns, so a counter value c is reached c * 10 ns after the enable.
#include "vmm/hpet.h"

#include <gtest/gtest.h>

#include <vector>

namespace vbts::vmm {
namespace {

struct Edge {
  Hpet::Line line;
  bool level;
  bool operator==(const Edge&) const = default;
};

constexpr Hpet::Line Isa(uint32_t n) { return {.isa = true, .n = n}; }
constexpr Hpet::Line Gsi(uint32_t n) { return {.isa = false, .n = n}; }

class HpetTest : public ::testing::Test {
 protected:
  uint64_t Rd(uint64_t off, int size = 8) { return hpet_.Read(off, size, now_); }
  void Wr(uint64_t off, uint64_t v, int size = 8) { hpet_.Write(off, size, v, now_); }
  static uint64_t T(int n, uint64_t reg) { return Hpet::kTimer0 + n * Hpet::kTimerStride + reg; }
  std::vector<Edge> Take() { return std::exchange(edges_, {}); }
  std::vector<Edge> Pulse(Hpet::Line l) { return {{l, true}, {l, false}}; }

  uint64_t now_ = 0;
  std::vector<Edge> edges_;
  Hpet hpet_{[this](Hpet::Line l, bool level) { edges_.push_back({l, level}); }};
};

TEST_F(HpetTest, CapabilitiesAreQemusBlockAt100MHz) {
  // REV_ID 1, NUM_TIM_CAP 2 (three timers) at bits 12:8, COUNT_SIZE_CAP (13),
  // LEG_RT_CAP (15), vendor 8086H; period 10 ns = 10^7 fs = 0x989680.
  EXPECT_EQ(Rd(Hpet::kCapId), 0x009896808086A201ull);
  EXPECT_EQ(Rd(Hpet::kCapId + 4, 4), 0x00989680u);
  EXPECT_EQ(Rd(Hpet::kCapId + 1, 1), 0xA2u);
  // Each timer: periodic and 64-bit capable (bits 4, 5), routes 16-23.
  for (int n = 0; n < 3; n++) EXPECT_EQ(Rd(T(n, 0)), 0x00FF000000000030ull) << n;
  // Comparators reset to all ones; other offsets read 0.
  EXPECT_EQ(Rd(T(2, 8)), ~0ull);
  EXPECT_EQ(Rd(0x0F8), 0u);
  EXPECT_EQ(Rd(0x3F8), 0u);
  // Only ENABLE_CNF and LEG_RT_CNF are writable in GEN_CONF.
  Wr(Hpet::kConfig, ~0ull);
  EXPECT_EQ(Rd(Hpet::kConfig), 3u);
}

TEST_F(HpetTest, CounterRunsWhileEnabledAndHoldsWhileHalted) {
  now_ = 1000;
  EXPECT_EQ(Rd(Hpet::kCounter), 0u);
  Wr(Hpet::kConfig, Hpet::kEnable);
  now_ = 1000 + 12'345;  // 1234 ticks and 5 ns
  EXPECT_EQ(Rd(Hpet::kCounter), 1234u);
  now_ = 21'000;
  Wr(Hpet::kConfig, 0);
  EXPECT_EQ(Rd(Hpet::kCounter), 2000u);
  now_ = 50'000;
  EXPECT_EQ(Rd(Hpet::kCounter), 2000u);
  Wr(Hpet::kConfig, Hpet::kEnable);
  now_ = 50'100;
  EXPECT_EQ(Rd(Hpet::kCounter), 2010u);
  EXPECT_EQ(Rd(Hpet::kCounter + 4, 4), 0u);
}

TEST_F(HpetTest, TheCounterIsWritableOnlyWhileHalted) {
  Wr(Hpet::kCounter, 0x12345678, 4);
  Wr(Hpet::kCounter + 4, 0x9, 4);
  EXPECT_EQ(Rd(Hpet::kCounter), 0x912345678ull);
  Wr(Hpet::kConfig, Hpet::kEnable);
  now_ = 100;
  Wr(Hpet::kCounter, 0);  // dropped: it runs
  EXPECT_EQ(Rd(Hpet::kCounter), 0x912345678ull + 10);
}

TEST_F(HpetTest, AOneShotComparatorPulsesItsRouteOnceWhenReached) {
  Wr(T(0, 0), Hpet::kTnIntEnable | (20u << Hpet::kTnRouteShift));
  Wr(T(0, 8), 100);
  EXPECT_EQ(hpet_.NextInterruptNs(), std::nullopt);  // halted
  Wr(Hpet::kConfig, Hpet::kEnable);
  EXPECT_EQ(hpet_.NextInterruptNs(), 1000u);
  hpet_.Advance(999);
  EXPECT_TRUE(Take().empty());
  hpet_.Advance(1000);
  EXPECT_EQ(Take(), Pulse(Gsi(20)));
  hpet_.Advance(1'000'000);
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(hpet_.NextInterruptNs(), std::nullopt);  // 64-bit: the next match is after 2^64 ticks
  EXPECT_EQ(Rd(Hpet::kIntStatus), 0u);                        // edge-triggered: no status
}

TEST_F(HpetTest, AComparatorWrittenBehindTheCounterWaitsForTheWrap) {
  // The spec's rule (a match is the counter reaching the value); QEMU would
  // fire one tick later.
  Wr(Hpet::kConfig, Hpet::kEnable);
  now_ = 10'000;  // counter 1000
  Wr(T(0, 0), Hpet::kTnIntEnable | (16u << Hpet::kTnRouteShift));
  Wr(T(0, 8), 500);
  EXPECT_EQ(hpet_.NextInterruptNs(), std::nullopt);
  hpet_.Advance(1'000'000'000);
  EXPECT_TRUE(Take().empty());
}

TEST_F(HpetTest, LinuxsPeriodicSetupSetsTheComparatorThenThePeriod) {
  // hpet_set_periodic: PERIODIC | VAL_SET | 32-bit mode, the first expiry,
  // then the period (VAL_SET was cleared by the first write), each a 32-bit
  // write.
  Wr(T(0, 0), Hpet::kTnIntEnable | Hpet::kTnPeriodic | Hpet::kTnValSet | Hpet::kTn32Bit);
  Wr(T(0, 8), 100, 4);
  EXPECT_EQ(Rd(T(0, 0)) & Hpet::kTnValSet, 0u);
  Wr(T(0, 8), 50, 4);
  EXPECT_EQ(Rd(T(0, 8)), 100u);
  Wr(Hpet::kConfig, Hpet::kEnable | Hpet::kLegacy);
  EXPECT_TRUE(hpet_.legacy());
  hpet_.Advance(1000);  // counter 100: the first match
  EXPECT_EQ(Take(), Pulse(Isa(0)));
  EXPECT_EQ(Rd(T(0, 8)), 150u);
  // Counter 349: matches at 150, 200, 250 and 300 coalesce into one pulse.
  now_ = 3490;
  hpet_.Advance(now_);
  EXPECT_EQ(Take(), Pulse(Isa(0)));
  EXPECT_EQ(Rd(T(0, 8)), 350u);
  EXPECT_EQ(hpet_.NextInterruptNs(), 3500u);
}

TEST_F(HpetTest, LegacyReplacementPutsTimersZeroAndOneOnIsaLinesZeroAndEight) {
  for (int n = 0; n < 3; n++) {
    Wr(T(n, 0), Hpet::kTnIntEnable | (17u << Hpet::kTnRouteShift));
    Wr(T(n, 8), 10 * (n + 1));
  }
  Wr(Hpet::kConfig, Hpet::kEnable | Hpet::kLegacy);
  hpet_.Advance(1000);
  std::vector<Edge> want = Pulse(Isa(0));
  for (Edge e : Pulse(Isa(8))) want.push_back(e);
  for (Edge e : Pulse(Gsi(17))) want.push_back(e);
  EXPECT_EQ(Take(), want);
}

TEST_F(HpetTest, AOneShot32BitTimerFiresAtTheWrapAndAtItsMatch) {
  Wr(Hpet::kCounter, 0xFFFFFF00);
  Wr(T(2, 0), Hpet::kTnIntEnable | Hpet::kTn32Bit | (23u << Hpet::kTnRouteShift));
  EXPECT_EQ(Rd(T(2, 8)), 0xFFFFFFFFu);  // 32-bit mode keeps the low half
  Wr(T(2, 8), 0x1'00000010);            // the high half is dropped
  EXPECT_EQ(Rd(T(2, 8)), 0x10u);
  Wr(Hpet::kConfig, Hpet::kEnable);
  // The low half wraps after 0x100 ticks (2560 ns), matches 0x10 after 0x110.
  EXPECT_EQ(hpet_.NextInterruptNs(), 2560u);
  hpet_.Advance(2560);
  EXPECT_EQ(Take(), Pulse(Gsi(23)));
  EXPECT_EQ(hpet_.NextInterruptNs(), 2720u);
  hpet_.Advance(2720);
  EXPECT_EQ(Take(), Pulse(Gsi(23)));
}

TEST_F(HpetTest, TheCounterWrapsAt2To64AndMatchesOnTheOtherSide) {
  // Found by hpet_fuzz: with the counter 0x100 ticks before 2^64, a
  // comparator at 0x10 is 0x110 ticks (2720 ns) away, and after the wrap the
  // matches go on.
  Wr(Hpet::kCounter, ~0ull - 0xFF);
  Wr(T(0, 0), Hpet::kTnIntEnable | Hpet::kTnPeriodic | Hpet::kTnValSet | (21u << Hpet::kTnRouteShift));
  Wr(T(0, 8), 0x10);
  Wr(T(0, 8), 0x100);  // the period
  Wr(Hpet::kConfig, Hpet::kEnable);
  EXPECT_EQ(hpet_.NextInterruptNs(), 2720u);
  hpet_.Advance(2719);
  EXPECT_TRUE(Take().empty());
  hpet_.Advance(2720);
  EXPECT_EQ(Take(), Pulse(Gsi(21)));
  EXPECT_EQ(Rd(T(0, 8)), 0x110u);
  EXPECT_EQ(hpet_.NextInterruptNs(), 5280u);
  hpet_.Advance(5280);
  EXPECT_EQ(Take(), Pulse(Gsi(21)));
}

TEST_F(HpetTest, ALevelTimerHoldsItsLineUntilTheStatusBitIsCleared) {
  Wr(T(1, 0), Hpet::kTnLevel | (18u << Hpet::kTnRouteShift));  // interrupt disabled
  Wr(T(1, 8), 10);
  Wr(Hpet::kConfig, Hpet::kEnable);
  hpet_.Advance(100);
  EXPECT_EQ(Rd(Hpet::kIntStatus), 2u);  // set, though no interrupt is enabled
  EXPECT_TRUE(Take().empty());
  Wr(T(1, 0), Hpet::kTnLevel | Hpet::kTnIntEnable | (18u << Hpet::kTnRouteShift));
  EXPECT_EQ(Take(), (std::vector<Edge>{{Gsi(18), true}}));
  Wr(Hpet::kIntStatus, 1);  // another timer's bit: nothing
  EXPECT_TRUE(Take().empty());
  Wr(Hpet::kIntStatus, 2);
  EXPECT_EQ(Take(), (std::vector<Edge>{{Gsi(18), false}}));
  EXPECT_EQ(Rd(Hpet::kIntStatus), 0u);
}

TEST_F(HpetTest, LegacyModeMovesAHeldLevel) {
  Wr(T(0, 0), Hpet::kTnLevel | Hpet::kTnIntEnable | (16u << Hpet::kTnRouteShift));
  Wr(T(0, 8), 1);
  Wr(Hpet::kConfig, Hpet::kEnable);
  hpet_.Advance(10);
  EXPECT_EQ(Take(), (std::vector<Edge>{{Gsi(16), true}}));
  Wr(Hpet::kConfig, Hpet::kEnable | Hpet::kLegacy);
  EXPECT_EQ(Take(), (std::vector<Edge>{{Gsi(16), false}, {Isa(0), true}}));
  Wr(Hpet::kConfig, 0);  // halted: the line drops, the status stays
  EXPECT_EQ(Take(), (std::vector<Edge>{{Isa(0), false}}));
  EXPECT_EQ(Rd(Hpet::kIntStatus), 1u);
  Wr(T(0, 0), Hpet::kTnIntEnable);  // edge: the status bit goes
  EXPECT_EQ(Rd(Hpet::kIntStatus), 0u);
}

TEST_F(HpetTest, ARouteOutsideTheCapabilityDeliversNothing) {
  Wr(T(0, 0), Hpet::kTnIntEnable | (3u << Hpet::kTnRouteShift));
  Wr(T(0, 8), 1);
  Wr(Hpet::kConfig, Hpet::kEnable);
  EXPECT_EQ(hpet_.NextInterruptNs(), std::nullopt);
  hpet_.Advance(100);
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ((Rd(T(0, 0)) >> Hpet::kTnRouteShift) & 0x1F, 3u);  // stored as written
}

TEST_F(HpetTest, RebaseKeepsTheCounterAcrossAChangeOfClocks) {
  now_ = 1000;
  Wr(Hpet::kConfig, Hpet::kEnable);
  hpet_.Rebase(11'000, 500);  // counter 1000 at the change
  EXPECT_EQ(hpet_.Read(Hpet::kCounter, 8, 1500), 1100u);
}

}  // namespace
}  // namespace vbts::vmm
