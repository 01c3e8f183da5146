// paging_test.cc: page walks over hand-built tables: translation, #PF error
// codes (SDM vol. 3A 4.7), A/D updates (SDM 4.8) and LinearMemory splitting.
#include "pmu/paging.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pmu/testing/fake_memory.h"
#include "pmu/testing/page_tables.h"
#include "base/testing/status_matchers.h"

namespace vbts::pmu {
namespace {

using ::vbts::testing::FakePhysMemory;
using ::vbts::testing::kPtA;
using ::vbts::testing::kPtD;
using ::vbts::testing::kPtU;
using ::vbts::testing::kPtW;
using ::vbts::testing::kPtXd;
using ::vbts::testing::PageTables4;

constexpr uint64_t kPg = 1ull << 31, kWp = 1ull << 16, kPe = 1;
constexpr uint64_t kPae = 1ull << 5, kPse = 1ull << 4, kSmep = 1ull << 20, kSmap = 1ull << 21;
constexpr uint64_t kLme = 1ull << 8, kLma = 1ull << 10, kNxe = 1ull << 11;

class Paging4Test : public ::testing::Test {
 protected:
  Paging4Test() : mem_(16 << 20), pt_(mem_, 0x100000) {
    regs_.cr0 = kPe | kPg | kWp;
    regs_.cr4 = kPae;
    regs_.efer = kLme | kLma | kNxe;
    regs_.cr3 = pt_.pml4();
  }
  Translation Xlate(uint64_t la, Access a = {}) {
    auto t = Translate(regs_, mem_, Gva(la), a);
    EXPECT_THAT(t, ::vbts::testing::IsOk());
    return t.value_or(Translation{});
  }
  FakePhysMemory mem_;
  PageTables4 pt_;
  PagingRegs regs_;
};

TEST(PagingModeTest, SelectedByCr0Cr4Efer) {
  EXPECT_EQ(PagingModeOf({.cr0 = kPe}), PagingMode::kNone);
  EXPECT_EQ(PagingModeOf({.cr0 = kPe | kPg}), PagingMode::k32Bit);
  EXPECT_EQ(PagingModeOf({.cr0 = kPe | kPg, .cr4 = kPae}), PagingMode::kPae);
  EXPECT_EQ(PagingModeOf({.cr0 = kPe | kPg, .cr4 = kPae, .efer = kLme | kLma}), PagingMode::k4Level);
}

TEST(PagingTest, NoPagingIsIdentityWrappingAt4G) {
  FakePhysMemory mem(4096);
  PagingRegs regs{.cr0 = kPe};
  auto t = Translate(regs, mem, Gva(0x1'0000'1234ull), {});
  VBTS_ASSERT_OK(t);
  EXPECT_TRUE(t->fault.ok());
  EXPECT_EQ(t->gpa, Gpa(0x1234));
}

TEST(PagingTest, CanonicalCheck) {
  EXPECT_TRUE(IsCanonical(0x00007fffffffffffull));
  EXPECT_TRUE(IsCanonical(0xffff800000000000ull));
  EXPECT_FALSE(IsCanonical(0x0000800000000000ull));
  EXPECT_FALSE(IsCanonical(0xfff0000000000000ull));
}

TEST_F(Paging4Test, FourKPageTranslatesAndSetsAccessedThenDirty) {
  pt_.Map(0x7000'1000, 0x5000, kPtW);
  Translation t = Xlate(0x7000'1234);
  ASSERT_TRUE(t.fault.ok());
  EXPECT_EQ(t.gpa, Gpa(0x5234));
  EXPECT_EQ(t.page_size, 4096u);
  for (int level = 1; level <= 4; ++level) {
    uint64_t e = pt_.Get(pt_.EntryAddr(0x7000'1000, level));
    EXPECT_TRUE(e & kPtA) << "level " << level;
    EXPECT_FALSE(e & kPtD) << "level " << level;
  }
  Xlate(0x7000'1234, {.write = true});
  EXPECT_TRUE(pt_.Get(pt_.EntryAddr(0x7000'1000, 1)) & kPtD);
  // D is set only in the entry that maps the page (SDM 4.8).
  EXPECT_FALSE(pt_.Get(pt_.EntryAddr(0x7000'1000, 2)) & kPtD);
}

TEST_F(Paging4Test, ProbeDoesNotSetAccessed) {
  pt_.Map(0x2000, 0x5000, kPtW);
  auto t = Translate(regs_, mem_, Gva(0x2000), {}, /*set_accessed_dirty=*/false);
  VBTS_ASSERT_OK(t);
  EXPECT_FALSE(pt_.Get(pt_.EntryAddr(0x2000, 1)) & kPtA);
}

TEST_F(Paging4Test, LargePages) {
  pt_.Map(0x4000'0000, 0x20'0000, kPtW, /*level=*/2);            // 2 MiB
  pt_.Map(0xffff'8000'4000'0000ull, 0x4000'0000, kPtW, /*level=*/3);  // 1 GiB
  Translation t2 = Xlate(0x4012'3456);
  EXPECT_EQ(t2.gpa, Gpa(0x32'3456));
  EXPECT_EQ(t2.page_size, 2u << 20);
  Translation t1 = Xlate(0xffff'8000'4abc'def0ull);
  EXPECT_EQ(t1.gpa, Gpa(0x4abc'def0));
  EXPECT_EQ(t1.page_size, 1u << 30);
}

TEST_F(Paging4Test, NonCanonicalReportedSeparately) {
  Translation t = Xlate(0x0000'8000'0000'0000ull);
  EXPECT_EQ(t.fault.kind, AccessFault::Kind::kNonCanonical);
  EXPECT_EQ(t.fault.address, 0x0000'8000'0000'0000ull);
}

struct PfCase {
  const char* name;
  uint64_t leaf_flags;
  Access access;
  uint64_t cr0_clear, cr4_set;
  bool rflags_ac;
  uint32_t error_code;  // ~0u: access allowed
};

void PrintTo(const PfCase& c, std::ostream* os) { *os << c.name; }

class PfTest : public Paging4Test, public ::testing::WithParamInterface<PfCase> {};

TEST_P(PfTest, ErrorCode) {
  const PfCase& c = GetParam();
  pt_.Map(0x40'0000, 0x5000, c.leaf_flags);
  regs_.cr0 &= ~c.cr0_clear;
  regs_.cr4 |= c.cr4_set;
  regs_.rflags_ac = c.rflags_ac;
  Translation t = Xlate(0x40'0123, c.access);
  if (c.error_code == ~0u) {
    EXPECT_TRUE(t.fault.ok()) << "error code " << t.fault.error_code;
    return;
  }
  ASSERT_EQ(t.fault.kind, AccessFault::Kind::kPageFault);
  EXPECT_EQ(t.fault.error_code, c.error_code);
  EXPECT_EQ(t.fault.address, 0x40'0123u);  // CR2 = the faulting linear address
  // A faulting walk sets no A flag.
  EXPECT_FALSE(pt_.Get(pt_.EntryAddr(0x40'0000, 4)) & kPtA);
}

// Error code bits (SDM 4.7): P=1 W=2 U=4 RSVD=8 I/D=0x10.
INSTANTIATE_TEST_SUITE_P(
    Rights, PfTest,
    ::testing::Values(
        PfCase{"SupReadRo", 0, {}, 0, 0, false, ~0u},
        PfCase{"SupWriteRoWp", 0, {.write = true}, 0, 0, false, 0x3},
        PfCase{"SupWriteRoNoWp", 0, {.write = true}, kWp, 0, false, ~0u},
        PfCase{"UserReadSup", kPtW, {.user = true}, 0, 0, false, 0x5},
        PfCase{"UserWriteRo", kPtU, {.write = true, .user = true}, 0, 0, false, 0x7},
        PfCase{"UserWriteRw", kPtU | kPtW, {.write = true, .user = true}, 0, 0, false, ~0u},
        PfCase{"FetchNx", kPtW | kPtXd, {.fetch = true}, 0, 0, false, 0x11},
        PfCase{"UserFetchNx", kPtU | kPtXd, {.user = true, .fetch = true}, 0, 0, false, 0x15},
        PfCase{"ReadNxOk", kPtXd, {}, 0, 0, false, ~0u},
        PfCase{"SmepSupFetchUser", kPtU, {.fetch = true}, 0, kSmep, false, 0x11},
        PfCase{"NoSmepSupFetchUser", kPtU, {.fetch = true}, 0, 0, false, ~0u},
        PfCase{"SmapSupReadUser", kPtU, {}, 0, kSmap, false, 0x1},
        PfCase{"SmapAcAllows", kPtU, {}, 0, kSmap, true, ~0u},
        PfCase{"SmapImplicitIgnoresAc", kPtU, {.implicit = true}, 0, kSmap, true, 0x1}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(Paging4Test, NotPresentErrorCodes) {
  // Nothing mapped at 0x8000'0000: PML4E present (from another mapping)?  No:
  // an empty PML4 gives P=0 at the top level.
  Translation r = Xlate(0x8000'0000);
  EXPECT_EQ(r.fault.kind, AccessFault::Kind::kPageFault);
  EXPECT_EQ(r.fault.error_code, 0u);
  Translation w = Xlate(0x8000'0000, {.write = true, .user = true});
  EXPECT_EQ(w.fault.error_code, 0x6u);  // W|U, P=0
  // I/D is reported for fetches because EFER.NXE=1 (SDM 4.7).
  Translation f = Xlate(0x8000'0000, {.fetch = true});
  EXPECT_EQ(f.fault.error_code, 0x10u);
  regs_.efer &= ~kNxe;
  Translation f2 = Xlate(0x8000'0000, {.fetch = true});
  EXPECT_EQ(f2.fault.error_code, 0x0u);
}

TEST_F(Paging4Test, ReservedBits) {
  regs_.maxphyaddr = 40;
  pt_.Map(0x1000, 0x5000 | (1ull << 45), kPtW);  // PA bit 45 >= MAXPHYADDR
  EXPECT_EQ(Xlate(0x1000).fault.error_code, 0x9u);  // P|RSVD
  // XD set while EFER.NXE=0 is reserved too.
  pt_.Map(0x2000, 0x5000, kPtW | kPtXd);
  regs_.efer &= ~kNxe;
  EXPECT_EQ(Xlate(0x2000, {.write = true}).fault.error_code, 0xbu);  // P|W|RSVD
  // 2-MiB page with bit 13 set (bits 20:13 reserved, table 4-18).
  pt_.Map(0x4000'0000, 0x20'0000 | (1ull << 13), kPtW, 2);
  EXPECT_EQ(Xlate(0x4000'0000).fault.error_code, 0x9u);
}

TEST(Paging32Test, FourKAndFourMPages) {
  FakePhysMemory mem(8 << 20);
  auto put32 = [&](uint64_t a, uint32_t v) { std::memcpy(mem.bytes().data() + a, &v, 4); };
  // CR3 = 0x10000; PDE[1] -> PT at 0x11000; PTE[2] -> 0x7000 (LA 0x00402000).
  put32(0x10000 + 1 * 4, 0x11000 | 0x7);
  put32(0x11000 + 2 * 4, 0x7000 | 0x3);
  // PDE[2] = 4 MiB page at 0x400000 (LA 0x00800000).
  put32(0x10000 + 2 * 4, 0x400000 | 0x83);
  PagingRegs regs{.cr0 = kPe | kPg | kWp, .cr3 = 0x10000, .cr4 = kPse};
  auto t = Translate(regs, mem, Gva(0x00402abc), {.write = true});
  VBTS_ASSERT_OK(t);
  EXPECT_EQ(t->gpa, Gpa(0x7abc));
  uint32_t pte;
  std::memcpy(&pte, mem.bytes().data() + 0x11008, 4);
  EXPECT_EQ(pte, 0x7000u | 0x3 | 0x20 | 0x40);  // A and D set
  auto big = Translate(regs, mem, Gva(0x00812345), {});
  VBTS_ASSERT_OK(big);
  EXPECT_EQ(big->gpa, Gpa(0x412345));
  EXPECT_EQ(big->page_size, 4u << 20);
  // User access to the supervisor 4-MiB page: P|U = 5.
  auto u = Translate(regs, mem, Gva(0x00812345), {.user = true});
  VBTS_ASSERT_OK(u);
  EXPECT_EQ(u->fault.error_code, 0x5u);
  // No I/D bit in 32-bit paging without SMEP.
  auto f = Translate(regs, mem, Gva(0x00c00000), {.fetch = true});
  VBTS_ASSERT_OK(f);
  EXPECT_EQ(f->fault.error_code, 0x0u);
}

TEST(PagingPaeTest, FourKAndTwoMPages) {
  FakePhysMemory mem(8 << 20);
  auto put64 = [&](uint64_t a, uint64_t v) { std::memcpy(mem.bytes().data() + a, &v, 8); };
  // CR3 = 0x10020 (32-byte aligned); PDPTE[1] -> PD 0x11000.
  put64(0x10020 + 1 * 8, 0x11000 | 1);
  // LA 0x40201000: PDPTE 1, PDE 1 -> PT 0x12000, PTE 1 -> 0x9000.
  put64(0x11000 + 1 * 8, 0x12000 | 0x7);
  put64(0x12000 + 1 * 8, 0x9000 | 0x7);
  // LA 0x40400000: PDE 2 = 2 MiB page at 0x600000.
  put64(0x11000 + 2 * 8, 0x600000 | 0x83);
  PagingRegs regs{.cr0 = kPe | kPg, .cr3 = 0x10020, .cr4 = kPae};
  auto t = Translate(regs, mem, Gva(0x40201abc), {});
  VBTS_ASSERT_OK(t);
  EXPECT_EQ(t->gpa, Gpa(0x9abc));
  // PDPTEs have no A flag: untouched.
  uint64_t pdpte;
  std::memcpy(&pdpte, mem.bytes().data() + 0x10028, 8);
  EXPECT_EQ(pdpte, 0x11001u);
  auto big = Translate(regs, mem, Gva(0x40456789), {});
  VBTS_ASSERT_OK(big);
  EXPECT_EQ(big->gpa, Gpa(0x656789));
  // PDPTE[0] not present.
  auto np = Translate(regs, mem, Gva(0x1000), {.write = true});
  VBTS_ASSERT_OK(np);
  EXPECT_EQ(np->fault.error_code, 0x2u);
}

TEST_F(Paging4Test, PageTableOutsideRamIsHostError) {
  pt_.Map(0x1000, 0x5000, kPtW);
  pt_.Set(pt_.EntryAddr(0x1000, 2), 0x7000'0000ull | 0x7);  // PT beyond 16 MiB
  EXPECT_THAT(Translate(regs_, mem_, Gva(0x1000), {}),
              ::vbts::testing::StatusIs(absl::StatusCode::kOutOfRange, ::testing::HasSubstr("outside RAM")));
}

TEST_F(Paging4Test, ProbeAndLocateRefuseAPageMappedBeyondRam) {
  // A single-page access (the one-walk path) to a page mapped beyond the 16 MiB
  // of RAM: Probe and Locate say OutOfRange, as Write would, so that a caller
  // that probes before it writes (the completion engine) never writes half
  // of what it checked (completer_fuzz finding, fuzz/corpus/completer/int-frame-over-page-tables).
  pt_.Map(0x1000, 0x7000'0000ull, kPtW);
  LinearMemory lm(mem_, regs_);
  EXPECT_THAT(lm.Probe(Gva(0x1004), 4, {.write = true}),
              ::vbts::testing::StatusIs(absl::StatusCode::kOutOfRange, ::testing::HasSubstr("outside RAM")));
  std::vector<LinearMemory::PhysChunk> chunks;
  EXPECT_THAT(lm.Locate(Gva(0x1004), 4, {.write = true}, chunks),
              ::vbts::testing::StatusIs(absl::StatusCode::kOutOfRange, ::testing::HasSubstr("outside RAM")));
  // A page in RAM: one chunk at its GPA.
  pt_.Map(0x2000, 0x5000, kPtW);
  pt_.Map(0x3000, 0x9000, kPtW);
  auto f = lm.Locate(Gva(0x2ffe), 4, {.write = true}, chunks);
  VBTS_ASSERT_OK(f);
  EXPECT_TRUE(f->ok());
  ASSERT_EQ(chunks.size(), 2u);  // two bytes in each page
  EXPECT_EQ(chunks[0].gpa.value, 0x5ffeu);
  EXPECT_EQ(chunks[0].len, 2u);
  EXPECT_EQ(chunks[1].gpa.value, 0x9000u);
  EXPECT_EQ(chunks[1].offset, 2u);
  EXPECT_EQ(chunks[1].len, 2u);
}

TEST_F(Paging4Test, LinearMemoryCrossesPages) {
  pt_.Map(0x1000, 0x8000, kPtW);
  pt_.Map(0x2000, 0x3000, kPtW);
  LinearMemory lm(mem_, regs_);
  const uint8_t data[4] = {1, 2, 3, 4};
  auto w = lm.Write(Gva(0x1ffe), data, {});
  VBTS_ASSERT_OK(w);
  EXPECT_TRUE(w->ok());
  EXPECT_EQ(mem_.bytes()[0x8ffe], 1);
  EXPECT_EQ(mem_.bytes()[0x8fff], 2);
  EXPECT_EQ(mem_.bytes()[0x3000], 3);
  EXPECT_EQ(mem_.bytes()[0x3001], 4);
  uint8_t back[4] = {};
  auto r = lm.Read(Gva(0x1ffe), absl::MakeSpan(back), {});
  VBTS_ASSERT_OK(r);
  EXPECT_EQ(back[3], 4);
}

TEST_F(Paging4Test, LinearMemoryWriteFaultOnSecondPageWritesNothing) {
  pt_.Map(0x1000, 0x8000, kPtW);
  pt_.Map(0x2000, 0x3000, 0);  // read-only, CR0.WP=1
  LinearMemory lm(mem_, regs_);
  const uint8_t data[4] = {1, 2, 3, 4};
  auto w = lm.Write(Gva(0x1ffe), data, {});
  VBTS_ASSERT_OK(w);
  EXPECT_EQ(w->kind, AccessFault::Kind::kPageFault);
  EXPECT_EQ(w->error_code, 0x3u);
  EXPECT_EQ(w->address, 0x2000u);  // CR2 is the first byte of the failing page
  EXPECT_EQ(mem_.bytes()[0x8ffe], 0);
  EXPECT_FALSE(pt_.Get(pt_.EntryAddr(0x1000, 1)) & kPtD);
}

// A record straddling the end of RAM (found by guest-tests/tiny/hostile_ds_ram.asm: the
// first page's bytes used to be written before the second was refused).
TEST(LinearMemoryTest, WriteStraddlingTheEndOfRamWritesNothing) {
  FakePhysMemory mem(0x2000);
  LinearMemory lm(mem, {.cr0 = kPe});
  const uint8_t data[24] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24};
  EXPECT_THAT(lm.Write(Gva(0x2000 - 12), data, {}),
              ::vbts::testing::StatusIs(absl::StatusCode::kOutOfRange, ::testing::HasSubstr("outside RAM")));
  for (uint64_t a = 0x2000 - 12; a < 0x2000; a++) EXPECT_EQ(mem.bytes()[a], 0) << a;
  uint8_t back[24];
  EXPECT_THAT(lm.Read(Gva(0x2000 - 12), absl::MakeSpan(back), {}),
              ::vbts::testing::StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
}

TEST_F(Paging4Test, WriteWhoseSecondPageMapsOutsideRamWritesNothing) {
  pt_.Map(0x1000, 0x8000, kPtW);
  pt_.Map(0x2000, 0x7000'0000ull, kPtW);  // a page beyond the 16 MiB of RAM
  LinearMemory lm(mem_, regs_);
  const uint8_t data[4] = {1, 2, 3, 4};
  EXPECT_THAT(lm.Write(Gva(0x1ffe), data, {}), ::vbts::testing::StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
  EXPECT_EQ(mem_.bytes()[0x8ffe], 0);
  EXPECT_EQ(mem_.bytes()[0x8fff], 0);
}

TEST(LinearMemoryTest, NoPagingWrapsAt4G) {
  FakePhysMemory mem(0x2000);
  LinearMemory lm(mem, {.cr0 = kPe});
  const uint8_t data[2] = {0xaa, 0xbb};
  auto w = lm.Write(Gva(0x1'0000'0ffeull), data, {});
  VBTS_ASSERT_OK(w);
  EXPECT_EQ(mem.bytes()[0xffe], 0xaa);
  EXPECT_EQ(mem.bytes()[0xfff], 0xbb);
  EXPECT_THAT(lm.Write(Gva(0x1fff), data, {}), ::vbts::testing::StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
}


// TranslationCache: what a cached LinearMemory reads and writes is what an
// uncached one would, whatever the guest does to its paging between two
// accesses.
TEST_F(Paging4Test, CachedStoresSeeAPageTableChangeBetweenTwoStores) {
  pt_.Map(0x7000'1000, 0x5000, kPtW);
  TranslationCache cache;
  const uint8_t a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  {
    LinearMemory lm(mem_, regs_, &cache);
    auto w = lm.Write(Gva(0x7000'1010), a, {.implicit = true});
    VBTS_ASSERT_OK(w);
    EXPECT_TRUE(w->ok());
  }
  EXPECT_EQ(mem_.bytes()[0x5010], 1);
  EXPECT_EQ(cache.misses(), 1u);
  // The guest remaps the page (no INVLPG): the next store lands on the new one.
  pt_.Set(pt_.EntryAddr(0x7000'1000, 1), 0x6000 | 1 | kPtW);
  {
    LinearMemory lm(mem_, regs_, &cache);
    auto w = lm.Write(Gva(0x7000'1010), b, {.implicit = true});
    VBTS_ASSERT_OK(w);
    EXPECT_TRUE(w->ok());
  }
  EXPECT_EQ(mem_.bytes()[0x6010], 5);
  EXPECT_EQ(mem_.bytes()[0x5010], 1);  // the old page keeps the first store
  EXPECT_EQ(pt_.Get(pt_.EntryAddr(0x7000'1000, 1)), 0x6000u | 1 | kPtW | kPtA | kPtD);
  EXPECT_EQ(cache.hits(), 0u);
  EXPECT_EQ(cache.misses(), 2u);
  // Unchanged tables: the third store uses the cached translation.
  LinearMemory lm(mem_, regs_, &cache);
  auto w = lm.Write(Gva(0x7000'1014), a, {.implicit = true});
  VBTS_ASSERT_OK(w);
  EXPECT_EQ(mem_.bytes()[0x6014], 1);
  EXPECT_EQ(cache.hits(), 1u);
  // The guest makes the page read-only (CR0.WP=1): the store faults as an
  // uncached one does, and writes nothing.
  pt_.Set(pt_.EntryAddr(0x7000'1000, 1), 0x6000 | 1 | kPtA | kPtD);
  auto f = lm.Write(Gva(0x7000'1018), a, {.implicit = true});
  VBTS_ASSERT_OK(f);
  EXPECT_EQ(f->kind, AccessFault::Kind::kPageFault);
  EXPECT_EQ(f->error_code, 0x3u);  // present, write
  EXPECT_EQ(f->address, 0x7000'1018u);
  EXPECT_EQ(mem_.bytes()[0x6018], 0);
}

TEST_F(Paging4Test, CachedStoresSetAccessedAndDirtyTheGuestCleared) {
  pt_.Map(0x7000'1000, 0x5000, kPtW);
  TranslationCache cache;
  LinearMemory lm(mem_, regs_, &cache);
  const uint8_t a[4] = {1, 2, 3, 4};
  VBTS_ASSERT_OK(lm.Write(Gva(0x7000'1000), a, {}));
  VBTS_ASSERT_OK(lm.Write(Gva(0x7000'1004), a, {}));
  EXPECT_EQ(cache.hits(), 1u);
  // The guest clears D in the PTE and A in the PML4E: the next store sets both
  // again (SDM 4.8), as a walk does.
  pt_.Set(pt_.EntryAddr(0x7000'1000, 1), pt_.Get(pt_.EntryAddr(0x7000'1000, 1)) & ~kPtD);
  pt_.Set(pt_.EntryAddr(0x7000'1000, 4), pt_.Get(pt_.EntryAddr(0x7000'1000, 4)) & ~kPtA);
  VBTS_ASSERT_OK(lm.Write(Gva(0x7000'1008), a, {}));
  EXPECT_TRUE(pt_.Get(pt_.EntryAddr(0x7000'1000, 1)) & kPtD);
  EXPECT_TRUE(pt_.Get(pt_.EntryAddr(0x7000'1000, 4)) & kPtA);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 2u);
  // A read after writes is an access of its own (no D needed), cached apart.
  uint8_t back[4] = {};
  VBTS_ASSERT_OK(lm.Read(Gva(0x7000'1008), absl::MakeSpan(back), {}));
  EXPECT_EQ(back[3], 4);
  EXPECT_EQ(cache.misses(), 3u);
}

// LinearMemory::DirectPointer: the host bytes only where Read or Write would
// be one plain copy (paging off, or a cached translation whose walk still
// holds; one page; in RAM; Direct allows it), nullptr everywhere else.
TEST_F(Paging4Test, DirectPointerOnlyWhereAnAccessIsOnePlainCopy) {
  mem_.EnableDirect(/*refused_write_page=*/0x6);
  pt_.Map(0x7000'1000, 0x5000, kPtW);
  pt_.Map(0x7000'2000, 0x6000, kPtW);
  TranslationCache cache;
  LinearMemory lm(mem_, regs_, &cache);
  const Access write{.write = true, .implicit = true};
  // Nothing cached yet: the walk of Write (it sets A and D) comes first.
  EXPECT_EQ(lm.DirectPointer(Gva(0x7000'1010), 4, write), nullptr);
  const uint8_t a[4] = {1, 2, 3, 4};
  VBTS_ASSERT_OK(lm.Write(Gva(0x7000'1010), a, {.implicit = true}));
  EXPECT_EQ(cache.misses(), 1u);
  EXPECT_EQ(cache.hits(), 0u);
  // Cached: physical 0x5014 in the fake's bytes; the hit is counted once.
  EXPECT_EQ(lm.DirectPointer(Gva(0x7000'1014), 4, write), mem_.bytes().data() + 0x5014);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 1u);
  // Across the page's end: never.
  EXPECT_EQ(lm.DirectPointer(Gva(0x7000'1ffe), 4, write), nullptr);
  // A read is another access, cached apart.
  EXPECT_EQ(lm.DirectPointer(Gva(0x7000'1014), 4, Access{.implicit = true}), nullptr);
  // The guest remaps the page: the cached entry no longer holds.
  pt_.Set(pt_.EntryAddr(0x7000'1000, 1), 0x8000 | 1 | kPtW | kPtA | kPtD);
  EXPECT_EQ(lm.DirectPointer(Gva(0x7000'1014), 4, write), nullptr);
  VBTS_ASSERT_OK(lm.Write(Gva(0x7000'1014), a, {.implicit = true}));
  EXPECT_EQ(mem_.bytes()[0x8014], 1);
  EXPECT_EQ(lm.DirectPointer(Gva(0x7000'1014), 4, write), mem_.bytes().data() + 0x8014);
  // Physical page 6 refuses direct writes (translated code there): Write
  // still stores, through PhysMemory::Write.
  VBTS_ASSERT_OK(lm.Write(Gva(0x7000'2020), a, {.implicit = true}));
  EXPECT_EQ(lm.DirectPointer(Gva(0x7000'2020), 4, write), nullptr);
  VBTS_ASSERT_OK(lm.Write(Gva(0x7000'2020), a, {.implicit = true}));
  EXPECT_EQ(mem_.bytes()[0x6023], 4);
  // Paging off (no cache needed): linear = physical, wrapping at 4 GiB; not
  // beyond RAM's end (16 MiB here).
  LinearMemory flat(mem_, {.cr0 = kPe});
  EXPECT_EQ(flat.DirectPointer(Gva(0x1'0000'0ffeull), 2, write), mem_.bytes().data() + 0xffe);
  EXPECT_EQ(flat.DirectPointer(Gva((16 << 20) - 1), 1, write), mem_.bytes().data() + (16 << 20) - 1);
  EXPECT_EQ(flat.DirectPointer(Gva(16 << 20), 1, write), nullptr);
  EXPECT_EQ(flat.DirectPointer(Gva(0x1000), 0, write), nullptr);
}

TEST(LinearMemoryTest, CachedStoresFollowCr3AndPagingOnOrOff) {
  FakePhysMemory mem(8 << 20);
  auto put32 = [&](uint64_t a, uint32_t v) { std::memcpy(mem.bytes().data() + a, &v, 4); };
  // Two 32-bit page directories mapping LA 0x00400000 (PDE 1) to different pages.
  put32(0x10000 + 1 * 4, 0x11000 | 0x3);
  put32(0x11000, 0x7000 | 0x3);
  put32(0x20000 + 1 * 4, 0x21000 | 0x3);
  put32(0x21000, 0x8000 | 0x3);
  TranslationCache cache;
  const uint8_t a[1] = {0xa1}, b[1] = {0xb2}, c[1] = {0xc3};
  PagingRegs regs{.cr0 = kPe | kPg | kWp, .cr3 = 0x10000};
  VBTS_ASSERT_OK(LinearMemory(mem, regs, &cache).Write(Gva(0x00400010), a, {}));
  regs.cr3 = 0x20000;  // MOV CR3
  VBTS_ASSERT_OK(LinearMemory(mem, regs, &cache).Write(Gva(0x00400010), b, {}));
  regs.cr0 = kPe;  // paging off: linear = physical
  VBTS_ASSERT_OK(LinearMemory(mem, regs, &cache).Write(Gva(0x00400010), c, {}));
  EXPECT_EQ(mem.bytes()[0x7010], 0xa1);
  EXPECT_EQ(mem.bytes()[0x8010], 0xb2);
  EXPECT_EQ(mem.bytes()[0x400010], 0xc3);
  EXPECT_EQ(cache.hits(), 0u);
  EXPECT_EQ(cache.misses(), 2u);  // without paging there is nothing to translate or cache
  // Back to the first directory: its translation is still cached and still good.
  regs = {.cr0 = kPe | kPg | kWp, .cr3 = 0x10000};
  VBTS_ASSERT_OK(LinearMemory(mem, regs, &cache).Write(Gva(0x00400011), a, {}));
  EXPECT_EQ(mem.bytes()[0x7011], 0xa1);
  EXPECT_EQ(cache.hits(), 1u);
  // A store through the cache to a page table (with paging off, at its
  // physical address) is seen by the next access with paging on.
  regs.cr0 = kPe;
  const uint8_t pte[4] = {0x03, 0x90, 0x00, 0x00};  // 0x9000 | P | W
  VBTS_ASSERT_OK(LinearMemory(mem, regs, &cache).Write(Gva(0x11000), pte, {}));
  regs.cr0 = kPe | kPg | kWp;
  VBTS_ASSERT_OK(LinearMemory(mem, regs, &cache).Write(Gva(0x00400012), b, {}));
  EXPECT_EQ(mem.bytes()[0x9012], 0xb2);
  EXPECT_EQ(mem.bytes()[0x7012], 0);
}

TEST(LinearMemoryTest, AccessesWithoutPagingBypassTheCacheAndMatchUncachedOnes) {
  FakePhysMemory mem(0x3000);
  TranslationCache cache;
  LinearMemory lm(mem, {.cr0 = kPe}, &cache);
  const uint8_t data[2] = {0xaa, 0xbb};
  for (int i = 0; i < 3; i++) {
    auto w = lm.Write(Gva(0x1'0000'0ffeull), data, {});  // wraps at 4 GiB
    VBTS_ASSERT_OK(w);
    EXPECT_TRUE(w->ok());
  }
  EXPECT_EQ(mem.bytes()[0xffe], 0xaa);
  EXPECT_EQ(mem.bytes()[0xfff], 0xbb);
  EXPECT_EQ(cache.hits() + cache.misses(), 0u);  // linear = physical: the cache is not consulted
  // Outside RAM stays a host-side error, cached or not.
  EXPECT_THAT(lm.Write(Gva(0x3fff), data, {}), ::vbts::testing::StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
  EXPECT_THAT(lm.Write(Gva(0x3ffe), data, {}), ::vbts::testing::StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
  EXPECT_THAT(lm.Write(Gva(0x3ffe), data, {}), ::vbts::testing::StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
}

}  // namespace
}  // namespace vbts::pmu
