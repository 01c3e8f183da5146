// Unit tests of the virtual PMU against hand-derived values. Addresses are
// guest-physical = linear (paging off), in a 1 MiB fake RAM.
#include "pmu/vpmu.h"

#include <gtest/gtest.h>

#include "pmu/testing/fake_memory.h"
#include "base/testing/status_matchers.h"

namespace vbts::pmu {
namespace {

constexpr uint64_t kDsArea = 0x1000, kBuf = 0x2000;
constexpr uint64_t kTrBts = (1u << 6) | (1u << 7), kBtint = 1u << 8, kOffOs = 1u << 9, kOffUsr = 1u << 10;
constexpr uint64_t kLbr = 1u << 0, kBtf = 1u << 1, kFreezeLbrs = 1u << 11, kFreezePerfmon = 1u << 12;

class VpmuTest : public ::testing::Test {
 protected:
  explicit VpmuTest(const char* model = "westmere")
      : model_(*FindCpuModel(model)), pmu_(model_), mem_(1 << 20), lin_(mem_, PagingRegs{}) {}

  void Wr(uint32_t msr, uint64_t v) { ASSERT_FALSE(pmu_.WriteMsr(msr, v).gp) << std::hex << msr; }
  uint64_t Rd(uint32_t msr) {
    MsrResult r = pmu_.ReadMsr(msr);
    EXPECT_FALSE(r.gp) << std::hex << msr;
    return r.value;
  }
  uint64_t Mem64(uint64_t a) {
    absl::StatusOr<uint64_t> v = mem_.ReadLe<uint64_t>(Gpa(a));
    EXPECT_TRUE(v.ok()) << v.status();
    return v.value_or(0);
  }
  uint32_t Mem32(uint64_t a) {
    absl::StatusOr<uint32_t> v = mem_.ReadLe<uint32_t>(Gpa(a));
    EXPECT_TRUE(v.ok()) << v.status();
    return v.value_or(0);
  }
  // DS management area, 64-bit format: base, index, max, threshold.
  void Ds64(uint64_t base, uint64_t index, uint64_t max, uint64_t thr) {
    ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea), base).ok());
    ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea + 8), index).ok());
    ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea + 16), max).ok());
    ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea + 24), thr).ok());
    Wr(0x600, kDsArea);
  }
  static Branch Jmp(uint64_t from, uint64_t to, uint8_t cpl = 0, BranchKind k = BranchKind::kJmp) {
    Branch b;
    b.kind = k;
    b.from = from;
    b.to = to;
    b.cpl_from = b.cpl_to = cpl;
    b.branch_insn = k != BranchKind::kNone;
    return b;
  }
  PmuEffects Obs(const Branch& b, bool tf = false) {
    absl::StatusOr<PmuEffects> fx = pmu_.Observe(b, lin_, tf);
    EXPECT_TRUE(fx.ok()) << fx.status();
    return fx.ok() ? *fx : PmuEffects{};
  }
  // A successful ring-0 WRMSR at `at` (2 bytes) as the engine reports it:
  // the write takes effect, then the instruction retires (Machine::HandleMsr,
  // Tracer::AfterMsrWrite) - under the configuration it leaves.
  PmuEffects Wrmsr(uint32_t msr, uint64_t v, uint64_t at = 0x500) {
    Wr(msr, v);
    return Obs(Jmp(at, at + 2, 0, BranchKind::kNone));
  }

  const CpuModel& model_;
  VirtualPmu pmu_;
  testing::FakePhysMemory mem_;
  LinearMemory lin_;
};

TEST_F(VpmuTest, MsrRulesWestmere) {
  // Reserved DEBUGCTL bits (2-5, 13+) #GP; the valid ones read back (SDM 17.4.1).
  EXPECT_TRUE(pmu_.WriteMsr(0x1D9, 1u << 2).gp);
  EXPECT_TRUE(pmu_.WriteMsr(0x1D9, 1u << 13).gp);
  Wr(0x1D9, 0x1FC3);
  EXPECT_EQ(Rd(0x1D9), 0x1FC3u);
  // DS_AREA must be canonical.
  EXPECT_TRUE(pmu_.WriteMsr(0x600, 0x0000800000000000ull).gp);
  Wr(0x600, 0xFFFF800000001000ull);
  EXPECT_EQ(Rd(0x600), 0xFFFF800000001000ull);
  // PERF_CAPABILITIES read-only; MISC_ENABLE: perfmon available, BTS/PEBS available.
  EXPECT_EQ(Rd(0x345), 0x11C3u);
  EXPECT_TRUE(pmu_.WriteMsr(0x345, 0).gp);
  EXPECT_EQ(Rd(0x1A0) & ((1u << 7) | (1u << 11) | (1u << 12)), 1u << 7);
  // MISC_ENABLE as kvm-unit-tests' msr.c writes it: 0x400c50809 with bits 7,
  // 11, 12 kept from the read value (0x81): the R/W bits 0, 3, 16, 18, 22,
  // 23, 34 read back, 7 stays 1, 11 stays 0.
  Wr(0x1A0, 0x400c50089ull);
  EXPECT_EQ(Rd(0x1A0), 0x400c50089ull);
  // Read-only bits keep their value (11 written 1 reads 0); reserved bit 1 #GPs.
  Wr(0x1A0, 0x801);
  EXPECT_EQ(Rd(0x1A0), 0x81u);
  EXPECT_TRUE(pmu_.WriteMsr(0x1A0, 0x83).gp);
  EXPECT_TRUE(pmu_.WriteMsr(0x1A0, 1ull << 35).gp);
  // 16 LBRs: FROM_15 at 0x68F exists, 0x690 does not; TOS R/W, 0..15.
  EXPECT_FALSE(pmu_.ReadMsr(0x68F).gp);
  EXPECT_TRUE(pmu_.ReadMsr(0x690).gp);
  Wr(0x1C9, 15);
  EXPECT_EQ(Rd(0x1C9), 15u);
  Wr(0x1C9, 0);
  EXPECT_EQ(Rd(0x1C9), 0u);
  EXPECT_TRUE(pmu_.WriteMsr(0x1C9, 16).gp);
  // 4 GP counters (0xC1-0xC4), 3 fixed; no LBR_INFO and no full-width writes on Westmere.
  EXPECT_FALSE(pmu_.ReadMsr(0xC4).gp);
  EXPECT_TRUE(pmu_.ReadMsr(0xC5).gp);
  EXPECT_TRUE(pmu_.ReadMsr(0xDC0).gp);
  EXPECT_TRUE(pmu_.WriteMsr(0x4C1, 1).gp);
  // PMC writes sign-extend bit 31 to the 48-bit width (SDM 18.2.6).
  Wr(0xC1, 0xFFFFFFF8);
  EXPECT_EQ(Rd(0xC1), 0xFFFFFFFFFFF8ull);
  Wr(0xC1, 0x7FFFFFFF);
  EXPECT_EQ(Rd(0xC1), 0x7FFFFFFFu);
  // GLOBAL_STATUS read-only; GLOBAL_CTRL reserved bits #GP.
  EXPECT_TRUE(pmu_.WriteMsr(0x38E, 0).gp);
  EXPECT_TRUE(pmu_.WriteMsr(0x38F, 1ull << 4).gp);
  Wr(0x38F, 0x70000000Full);
  // PEBS_ENABLE accepted (inert).
  Wr(0x3F1, 1);
  // Every owned MSR is intercepted.
  EXPECT_TRUE(pmu_.Owns(0x1D9));
  EXPECT_TRUE(pmu_.Owns(0x40));
  EXPECT_FALSE(pmu_.Owns(0x10));
}

TEST_F(VpmuTest, CircularBtsWrapsAtTheMaximum) {
  // Book exp. 14-9: 10 records of 24 bytes, 11 jumps: records 0-9 take jumps
  // 1-10, the index reaches max and returns to base, jump 11 overwrites
  // record 0, index = base + 24.
  Ds64(kBuf, kBuf, kBuf + 240, kBuf + 240);
  Wr(0x1D9, kTrBts);
  EXPECT_TRUE(pmu_.NeedsObservation());
  for (int k = 1; k <= 11; k++) {
    PmuEffects fx = Obs(Jmp(0x100000 + 2 * k, 0x100002 + 2 * k));
    EXPECT_FALSE(fx.pmi);
  }
  EXPECT_EQ(Mem64(kDsArea + 8), kBuf + 24);
  EXPECT_EQ(Mem64(kBuf), 0x100000u + 22);     // jump 11
  EXPECT_EQ(Mem64(kBuf + 8), 0x100002u + 22);
  EXPECT_EQ(Mem64(kBuf + 16), 0u);             // flags: predicted bit 4 clear
  EXPECT_EQ(Mem64(kBuf + 24), 0x100000u + 4);  // jump 2
  EXPECT_EQ(pmu_.stats().bts_records, 11u);
  // Not-taken instructions are not recorded.
  Obs(Jmp(0x5000, 0x5002, 0, BranchKind::kNone));
  EXPECT_EQ(Mem64(kDsArea + 8), kBuf + 24);
}

TEST_F(VpmuTest, CachedBtsStoresSeeTheGuestsDsAndPageTableWrites) {
  // The engine's stores keep their translations between records
  // (TranslationCache): a guest write to the DS area or to its page tables
  // between two records is seen by the second.  32-bit paging: CR3 = 0x10000,
  // PDE 0 -> PT 0x11000; PTE 1 maps LA 0x1000 (the DS area) to 0x1000, PTE 2
  // maps LA 0x2000 (the buffer) to 0x2000.
  auto put32 = [&](uint64_t a, uint32_t v) { ASSERT_TRUE(mem_.WriteLe<uint32_t>(Gpa(a), v).ok()); };
  put32(0x10000, 0x11000 | 0x3);
  put32(0x11000 + 1 * 4, 0x1000 | 0x3);
  put32(0x11000 + 2 * 4, 0x2000 | 0x3);
  const PagingRegs paging{.cr0 = 1 | (1ull << 31), .cr3 = 0x10000};
  TranslationCache cache;
  auto obs = [&](const Branch& b) {
    LinearMemory lin(mem_, paging, &cache);  // one per record, as the tracer makes them
    absl::StatusOr<PmuEffects> fx = pmu_.Observe(b, lin, false);
    EXPECT_TRUE(fx.ok()) << fx.status();
  };
  Ds64(kBuf, kBuf, kBuf + 240, kBuf + 240);
  Wr(0x1D9, kTrBts);
  obs(Jmp(0x100000, 0x100010));
  obs(Jmp(0x100020, 0x100030));
  EXPECT_EQ(Mem64(kBuf + 24), 0x100020u);
  EXPECT_EQ(Mem64(kDsArea + 8), kBuf + 48);
  EXPECT_GT(cache.hits(), 0u);  // the second record reused the first one's translations
  // The guest moves the index back to record 0 (a store of its own).
  ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea + 8), kBuf).ok());
  obs(Jmp(0x100040, 0x100050));
  EXPECT_EQ(Mem64(kBuf), 0x100040u);
  EXPECT_EQ(Mem64(kDsArea + 8), kBuf + 24);
  // The guest maps the buffer's page elsewhere (no INVLPG: vbts re-walks
  // whenever a table entry changed): the next record lands at 0x5000 + 24.
  put32(0x11000 + 2 * 4, 0x5000 | 0x3);
  obs(Jmp(0x100060, 0x100070));
  EXPECT_EQ(Mem64(0x5000 + 24), 0x100060u);
  EXPECT_EQ(Mem64(0x5000 + 32), 0x100070u);
  EXPECT_EQ(Mem64(kBuf + 24), 0x100020u);  // the old page's record 1 is still the second jump's
  EXPECT_EQ(Mem64(kDsArea + 8), kBuf + 48);
  EXPECT_EQ(Mem32(0x11000 + 2 * 4), 0x5000u | 0x3 | 0x20 | 0x40);  // accessed and dirty set
  EXPECT_EQ(pmu_.stats().bts_records, 4u);
}

TEST_F(VpmuTest, InterruptModeThresholdRules) {
  // BTINT=1, 4 records, threshold = max: the 4th record reaches it -> PMI; a
  // full buffer stores nothing more and interrupts at every branch.
  Ds64(kBuf, kBuf, kBuf + 96, kBuf + 96);
  Wr(0x1D9, kTrBts | kBtint);
  for (int k = 1; k <= 3; k++) EXPECT_FALSE(Obs(Jmp(0x100, 0x200)).pmi) << k;
  EXPECT_TRUE(Obs(Jmp(0x100, 0x200)).pmi);
  EXPECT_EQ(Mem64(kDsArea + 8), kBuf + 96);
  EXPECT_TRUE(Obs(Jmp(0x300, 0x400)).pmi);  // full: not stored, interrupts again
  EXPECT_EQ(Mem64(kDsArea + 8), kBuf + 96);
  EXPECT_EQ(pmu_.stats().bts_records, 4u);

  // Threshold one record above max: no PMI while filling, then one at every branch.
  Ds64(kBuf, kBuf, kBuf + 96, kBuf + 120);
  for (int k = 1; k <= 4; k++) EXPECT_FALSE(Obs(Jmp(0x100, 0x200)).pmi) << k;
  EXPECT_TRUE(Obs(Jmp(0x100, 0x200)).pmi);
  EXPECT_TRUE(Obs(Jmp(0x100, 0x200)).pmi);
  // Two records above max: never.
  Ds64(kBuf, kBuf, kBuf + 96, kBuf + 144);
  for (int k = 1; k <= 8; k++) EXPECT_FALSE(Obs(Jmp(0x100, 0x200)).pmi) << k;
}

TEST_F(VpmuTest, FullBufferAtTheTopOfTheAddressSpaceDoesNotWrap) {
  // Interrupt mode, index = max in the last 24 bytes of the 64-bit space
  // (guest-tests/tiny/hostile_bts_index.asm): index + 24 lies beyond 2^64, not
  // at a small address, so the buffer is full (nothing stored, no warning)
  // and the end of the record reaches the threshold (= max): a PMI.
  const uint64_t top = 0xFFFFFFFFFFFFFFE8ull;
  Ds64(0xFFFFFFFFFFFFFF00ull, top, top, top);
  Wr(0x1D9, kTrBts | kBtint);
  EXPECT_TRUE(Obs(Jmp(0x100, 0x200)).pmi);
  EXPECT_EQ(Mem64(kDsArea + 8), top);
  EXPECT_EQ(pmu_.stats().bts_records, 0u);
  EXPECT_EQ(pmu_.stats().bts_dropped, 0u);
  EXPECT_TRUE(pmu_.TakeWarnings().empty());
  // Threshold 2^64 - 1 is below index + 24 = 2^64: reached as well.
  Ds64(0xFFFFFFFFFFFFFF00ull, top, top, ~0ull);
  EXPECT_TRUE(Obs(Jmp(0x100, 0x200)).pmi);
}

TEST_F(VpmuTest, CircularModeThresholdBelowMaxInterruptsOncePerPass) {
  // Book 6.5.6: circular mode, 4 records, threshold after record 2.
  Ds64(kBuf, kBuf, kBuf + 96, kBuf + 48);
  Wr(0x1D9, kTrBts);
  std::vector<bool> pmis;
  for (int k = 1; k <= 8; k++) pmis.push_back(Obs(Jmp(0x100, 0x200)).pmi);
  EXPECT_EQ(pmis, (std::vector<bool>{false, true, false, false, false, true, false, false}));
}

TEST_F(VpmuTest, CplQualifiedBtsUsesTheTargetCpl) {
  // Book exp. 14-11 / SDM table 17-6: BTS_OFF_OS drops branches into ring 0
  // (the INT from ring 3), keeps the IRET back to ring 3.
  Ds64(kBuf, kBuf, kBuf + 240, kBuf + 240);
  Wr(0x1D9, kTrBts | kOffOs);
  Branch intn = Jmp(0x401000, 0x100500, 3, BranchKind::kSoftInt);
  intn.cpl_to = 0;
  Obs(intn);
  Obs(Jmp(0x100500, 0x100600, 0));  // ring-0 jump: dropped
  Branch iret = Jmp(0x100700, 0x401002, 0, BranchKind::kIret);
  iret.cpl_to = 3;
  Obs(iret);
  EXPECT_EQ(Mem64(kDsArea + 8), kBuf + 24);
  EXPECT_EQ(Mem64(kBuf), 0x100700u);
  EXPECT_EQ(Mem64(kBuf + 8), 0x401002u);
  // BTS_OFF_USR: the reverse.
  Wr(0x1D9, kTrBts | kOffUsr);
  Obs(iret);
  EXPECT_EQ(Mem64(kDsArea + 8), kBuf + 24);
  Obs(intn);
  EXPECT_EQ(Mem64(kDsArea + 8), kBuf + 48);
}

TEST_F(VpmuTest, BadDsProgrammingDropsRecordsWithAWarning) {
  Wr(0x1D9, kTrBts);
  // DS area outside RAM (1 MiB fake).
  Wr(0x600, 0x200000);
  Obs(Jmp(1, 2));
  EXPECT_EQ(pmu_.stats().bts_dropped, 1u);
  // Index outside [base, max].
  Ds64(kBuf, kBuf + 1000, kBuf + 240, kBuf + 240);
  Obs(Jmp(1, 2));
  // max < base + one record.
  Ds64(kBuf, kBuf, kBuf + 23, kBuf + 23);
  Obs(Jmp(1, 2));
  // Buffer outside RAM.
  Ds64(0xFFFF0, 0xFFFF0, 0xFFFF0 + 240, 0);
  Obs(Jmp(1, 2));
  EXPECT_EQ(pmu_.stats().bts_dropped, 4u);
  EXPECT_EQ(pmu_.stats().bts_records, 0u);
  std::vector<std::string> w = pmu_.TakeWarnings();
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0], "BTS: the DS save area at 0x200000 (IA32_DS_AREA) cannot be read (not in guest RAM); branch records are dropped");
  EXPECT_EQ(w[1], "BTS: index 0x23e8 is outside [base 0x2000, maximum 0x20f0]; branch records are dropped");
  // The same problem again is not repeated.
  Ds64(kBuf, kBuf + 1000, kBuf + 240, kBuf + 240);
  Obs(Jmp(1, 2));
  EXPECT_TRUE(pmu_.TakeWarnings().empty());
}

TEST_F(VpmuTest, LbrStackWrapsAndSkipsDebugExceptions) {
  Wr(0x1D9, kLbr);
  for (int k = 0; k < 18; k++) Obs(Jmp(0x1000 + k, 0x2000 + k));
  // 18 pushes into 16 entries: TOS = 18 mod 16 = 2, entry 2 = push 18 (k = 17).
  EXPECT_EQ(Rd(0x1C9), 2u);
  EXPECT_EQ(Rd(0x680 + 2), 0x1000u + 17);
  EXPECT_EQ(Rd(0x6C0 + 2), 0x2000u + 17);
  EXPECT_EQ(Rd(0x680 + 3), 0x1000u + 2);  // oldest surviving: push 3 (k = 2)
  // An interrupt is pushed and sets LER to the last branch before it.
  Branch irq = Jmp(0x1100, 0x9000, 0, BranchKind::kInterrupt);
  Obs(irq);
  EXPECT_EQ(Rd(0x1C9), 3u);
  EXPECT_EQ(Rd(0x1DD), 0x1000u + 17);
  EXPECT_EQ(Rd(0x1DE), 0x2000u + 17);
  // #DB is not pushed and clears DEBUGCTL.LBR and BTF (SDM 17.4.2).
  Wr(0x1D9, kLbr | kBtf);
  Branch db = Jmp(0x1200, 0x9100, 0, BranchKind::kException);
  db.vector = 1;
  Obs(db);
  EXPECT_EQ(Rd(0x1C9), 3u);
  EXPECT_EQ(Rd(0x1D9), 0u);
  Obs(Jmp(0x1300, 0x1400));
  EXPECT_EQ(Rd(0x1C9), 3u);  // LBR off now
}

TEST_F(VpmuTest, LbrSelectFilters) {
  Wr(0x1D9, kLbr);
  Wr(0x1C8, (1u << 2) | (1u << 1));  // no JCC, nothing outside ring 0
  Obs(Jmp(1, 2, 0, BranchKind::kJcc));
  Obs(Jmp(3, 4, 3, BranchKind::kJmp));
  EXPECT_EQ(pmu_.stats().lbr_pushes, 0u);
  Obs(Jmp(5, 6, 0, BranchKind::kCall));
  EXPECT_EQ(pmu_.stats().lbr_pushes, 1u);
  EXPECT_EQ(Rd(0x680 + Rd(0x1C9)), 5u);
  Wr(0x1C8, 1u << 8);  // FAR_BRANCH filtered
  Obs(Jmp(7, 8, 0, BranchKind::kIret));
  EXPECT_EQ(pmu_.stats().lbr_pushes, 1u);
  EXPECT_TRUE(pmu_.WriteMsr(0x1C8, 1u << 9).gp);  // EN_CALLSTACK: Haswell and later only
}

class LbrSkylakeTest : public VpmuTest {
 protected:
  LbrSkylakeTest() : VpmuTest("skylake") {}
};

TEST_F(LbrSkylakeTest, CallStackModePopsOnReturn) {
  // SDM 17.9 (Haswell and later): with MSR_LBR_SELECT.EN_CALLSTACK (bit 9)
  // and the filter it requires (JCC, NEAR_IND_JMP, NEAR_REL_JMP and
  // FAR_BRANCH suppressed; calls and returns kept) the LBRs are a call
  // stack: a call pushes, a return takes the last record off (cleared:
  // Linux reads down from TOS until a zero entry), so the stack holds
  // exactly the calls not yet returned from. The value is what Linux writes
  // for `perf record --call-graph lbr` in user mode: CPL_EQ_0 plus the
  // above, 0x3C5 (arch/x86/events/intel/lbr.c, hsw_lbr_sel_map).
  Wr(0x1D9, kLbr);
  Wr(0x1C8, 0x3C5);
  Obs(Jmp(0x100, 0x1000, 3, BranchKind::kCall));   // main -> a
  Obs(Jmp(0x1010, 0x1020, 3, BranchKind::kJcc));   // filtered
  Obs(Jmp(0x1030, 0x2000, 3, BranchKind::kCall));  // a -> b
  Obs(Jmp(0x2010, 0x3000, 3, BranchKind::kIndCall));  // b -> leaf
  Obs(Jmp(0x3010, 0x2015, 3, BranchKind::kRet));   // leaf returns: popped
  Obs(Jmp(0x2020, 0x9000, 0, BranchKind::kCall));  // ring 0: CPL_EQ_0 filters it
  Obs(Jmp(0x9010, 0x2025, 0, BranchKind::kRet));   // likewise, no pop
  // Pushes main->a (TOS 1), a->b (2), b->leaf (3); the return pops 3.
  EXPECT_EQ(Rd(0x1C9), 2u);
  EXPECT_EQ(Rd(0x680 + 1), 0x100u);
  EXPECT_EQ(Rd(0x6C0 + 1), 0x1000u);
  EXPECT_EQ(Rd(0x680 + 2), 0x1030u);
  EXPECT_EQ(Rd(0x6C0 + 2), 0x2000u);
  EXPECT_EQ(Rd(0x680 + 3), 0u);
  EXPECT_EQ(Rd(0x6C0 + 3), 0u);
  EXPECT_EQ(pmu_.stats().lbr_pushes, 3u);
  EXPECT_EQ(pmu_.stats().lbr_pops, 1u);
  // Two more returns empty the stack and wrap TOS below entry 0 (2 -> 1 -> 0).
  Obs(Jmp(0x2030, 0x1035, 3, BranchKind::kRet));
  Obs(Jmp(0x1040, 0x105, 3, BranchKind::kRet));
  EXPECT_EQ(Rd(0x1C9), 0u);
  EXPECT_EQ(Rd(0x680 + 1), 0u);
  EXPECT_EQ(Rd(0x680 + 2), 0u);
  // Without EN_CALLSTACK a return is recorded like any branch.
  Wr(0x1C8, 0x1C5);
  Obs(Jmp(0x110, 0x120, 3, BranchKind::kRet));
  EXPECT_EQ(Rd(0x1C9), 1u);
  EXPECT_EQ(Rd(0x680 + 1), 0x110u);
}

TEST_F(VpmuTest, CounterOverflowAtTheExactInstruction) {
  // Book exp. 14-10 (Westmere): PMC0 = 0xFFFFFFFF - 7 (sign-extended to 48
  // bits: -8) counts instructions (event C0H, USR|OS|INT|EN). The WRMSR of
  // GLOBAL_CTRL that enables it is the 1st counted instruction (-7), jumps
  // 1..6 count to -1, jump 7 - the 8th counted instruction - wraps it: the
  // PMI comes before the 8th jump, as the book observed.
  Wr(0xC1, 0xFFFFFFFFu - 7);
  EXPECT_EQ(Rd(0xC1), 0xFFFFFFFFFFF8ull);
  Wr(0x186, 0xC0 | (1u << 16) | (1u << 17) | (1u << 20) | (1u << 22));
  EXPECT_FALSE(Wrmsr(0x38F, 1).pmi);  // GLOBAL_CTRL: PMC0
  EXPECT_EQ(Rd(0xC1), 0xFFFFFFFFFFF9ull);
  for (int k = 1; k <= 6; k++) EXPECT_FALSE(Obs(Jmp(k, k + 1)).pmi) << k;
  EXPECT_EQ(Rd(0xC1), 0xFFFFFFFFFFFFull);
  EXPECT_EQ(Rd(0x38E), 0u);
  EXPECT_TRUE(Obs(Jmp(7, 8)).pmi);
  EXPECT_EQ(Rd(0xC1), 0u);
  EXPECT_EQ(Rd(0x38E), 1u);
  Wr(0x390, 1);  // OVF_CTRL clears it
  EXPECT_EQ(Rd(0x38E), 0u);
  // Event deliveries are not instructions.
  Obs(Jmp(1, 2, 0, BranchKind::kInterrupt));
  EXPECT_EQ(Rd(0xC1), 0u);
}

TEST_F(VpmuTest, LlcEventsCountDataAccessesThroughTheModelsCaches) {
  // Westmere: 256 KB 8-way L2 (512 sets), 12 MB 16-way L3 (12288 sets).
  // PMC0 counts LLC references (2EH/4FH), PMC1 LLC misses (2EH/41H), PMC2
  // instructions, all OS|USR|EN; GLOBAL_CTRL enables the three.
  constexpr uint64_t kEn = (1u << 16) | (1u << 17) | (1u << 22);
  EXPECT_FALSE(pmu_.WantsDataAccesses());
  Wr(0x186, 0x4F2E | kEn);
  Wr(0x187, 0x412E | kEn);
  Wr(0x188, 0xC0 | kEn);
  EXPECT_FALSE(pmu_.WantsDataAccesses());  // GLOBAL_CTRL still 0
  Wr(0x38F, 7);
  EXPECT_TRUE(pmu_.WantsDataAccesses());
  // A load from a new line misses both levels; the same line again hits L2.
  pmu_.ObserveDataAccess(0x10000, 8, 0);
  pmu_.ObserveDataAccess(0x10008, 8, 3);
  EXPECT_EQ(Rd(0xC1), 1u);
  EXPECT_EQ(Rd(0xC2), 1u);
  // The miss also brought in the other line of its 128-byte pair (the
  // spatial prefetcher, not counted): an access that crosses into it hits.
  pmu_.ObserveDataAccess(0x1003C, 8, 0);
  EXPECT_EQ(Rd(0xC1), 1u);
  EXPECT_EQ(Rd(0xC2), 1u);
  // Eight more lines 32 KB apart share the L2 set of line 0x400 (512 sets of
  // 64 bytes: 32 KB a way): 9 lines in 8 ways evict 0x400 from L2; in the
  // 12288-set L3 they use distinct sets, so 0x400 is still there: a
  // reference, not a miss.
  for (uint64_t k = 1; k <= 8; k++) pmu_.ObserveDataAccess(0x10000 + k * 0x8000, 4, 0);
  EXPECT_EQ(Rd(0xC1), 9u);
  EXPECT_EQ(Rd(0xC2), 9u);
  pmu_.ObserveDataAccess(0x10000, 4, 0);
  EXPECT_EQ(Rd(0xC1), 10u);
  EXPECT_EQ(Rd(0xC2), 9u);
  // A new line: both count again.
  pmu_.ObserveDataAccess(0x80000, 4, 0);
  EXPECT_EQ(Rd(0xC1), 11u);
  EXPECT_EQ(Rd(0xC2), 10u);
  // Data accesses are not instructions.
  EXPECT_EQ(Rd(0xC3), 0u);
  // OS only: a ring-3 access is not counted.
  Wr(0x186, 0x4F2E | (1u << 17) | (1u << 22));
  pmu_.ObserveDataAccess(0x90000, 4, 3);
  EXPECT_EQ(Rd(0xC1), 11u);
  EXPECT_EQ(Rd(0xC2), 11u);
  // Overflow: PMC1 at 2^48 - 1 with INT set wraps on the next miss.
  Wr(0x187, 0x412E | kEn | (1u << 20));
  Wr(0xC2, 0xFFFFFFFF);  // sign-extended: 2^48 - 1
  EXPECT_TRUE(pmu_.ObserveDataAccess(0xA0000, 4, 0).pmi);
  EXPECT_EQ(Rd(0xC2), 0u);
  EXPECT_EQ(Rd(0x38E), 2u);
  Wr(0x38F, 4);  // only the instructions counter: no data accesses wanted
  EXPECT_FALSE(pmu_.WantsDataAccesses());
}

// L1D.REPLACEMENT (51H/01H): one per line an access brings into the model's
// L1D (Westmere: 32 KB 8-way, 64 sets of 64-byte lines, 4 KB a way; no
// prefetcher), docs/pmu-model.md "L1D replacements".
TEST_F(VpmuTest, L1dReplacementCountsLinesBroughtIntoTheL1d) {
  constexpr uint64_t kEn = (1u << 16) | (1u << 17) | (1u << 22);
  Wr(0x186, 0x0151 | kEn);
  Wr(0x38F, 1);
  EXPECT_TRUE(pmu_.WantsDataAccesses());
  pmu_.ObserveDataAccess(0x10000, 8, 0);  // a new line
  pmu_.ObserveDataAccess(0x10008, 8, 3);  // the same line: a hit
  EXPECT_EQ(Rd(0xC1), 1u);
  pmu_.ObserveDataAccess(0x1003C, 8, 0);  // crosses into the next line: its fill (no adjacent-line prefetch)
  EXPECT_EQ(Rd(0xC1), 2u);
  // Eight more lines 4 KB apart share line 0x400's set: the ninth evicts it
  // (LRU), so line 0x400 is replaced again; the latest one still hits.
  for (uint64_t k = 1; k <= 8; k++) pmu_.ObserveDataAccess(0x10000 + k * 0x1000, 4, 0);
  EXPECT_EQ(Rd(0xC1), 10u);
  pmu_.ObserveDataAccess(0x10000, 4, 0);
  EXPECT_EQ(Rd(0xC1), 11u);
  pmu_.ObserveDataAccess(0x18000, 4, 0);
  EXPECT_EQ(Rd(0xC1), 11u);
  // The LLC events' caches are not fed while only L1D.REPLACEMENT counts:
  // LLC references start from a cold model.
  Wr(0x187, 0x4F2E | kEn);
  Wr(0x38F, 3);
  pmu_.ObserveDataAccess(0x10000, 4, 0);  // in the L1D; a miss in the (cold) L2
  EXPECT_EQ(Rd(0xC1), 11u);
  EXPECT_EQ(Rd(0xC2), 1u);
  // CMASK: vbts counts nothing for the event.
  Wr(0x186, 0x0151 | kEn | (1ull << 24));
  pmu_.ObserveDataAccess(0x200000, 4, 0);
  EXPECT_EQ(Rd(0xC1), 11u);
}

TEST(VpmuModels, L1dReplacementOnlyWhereTheModelHasAnL1d) {
  testing::FakePhysMemory mem(1 << 20);
  for (const char* name : {"core-duo", "skylake", "icelake-server"}) {
    VirtualPmu p(*FindCpuModel(name));
    ASSERT_FALSE(p.WriteMsr(0x186, 0x0151 | (1u << 17) | (1u << 22)).gp) << name;
    (void)p.WriteMsr(0x38F, 1);  // core-duo (perfmon v1) has no GLOBAL_CTRL: EN alone enables
    p.ObserveDataAccess(0x1000, 4, 0);
    EXPECT_EQ(p.ReadMsr(0xC1).value, std::string(name) == "core-duo" ? 0u : 1u) << name;
  }
}

TEST_F(VpmuTest, SequentialCountingStopsBeforeTheOverflowingInstruction) {
  // Nothing counts: no limit.
  EXPECT_EQ(pmu_.SequentialLimit(0), UINT64_MAX);
  // PMC0: instructions at ring 0 only (OS), from 2^48 - 10 (Westmere GP
  // counters are 48 bits wide): 9 increments reach 2^48 - 1, the 10th wraps.
  // PMC1: branch instructions (C4H), which a non-branch does not count.
  // Fixed counter 0 (instructions) at ring 3 only, from 2^48 - 100.
  Wr(0xC1, 0xFFFFFFFFu - 9);
  Wr(0x186, 0xC0 | (1u << 17) | (1u << 20) | (1u << 22));
  Wr(0x187, 0xC4 | (1u << 16) | (1u << 17) | (1u << 22));
  Wr(0x309, 0xFFFFFFFFFFFFull - 99);
  Wr(0x38D, 0x2);     // fixed counter 0: USR
  Wr(0x38F, 0x100000003ull);  // GLOBAL_CTRL: PMC0, PMC1, FIXED0
  EXPECT_EQ(pmu_.SequentialLimit(0), 9u);   // PMC0
  EXPECT_EQ(pmu_.SequentialLimit(3), 99u);  // FIXED0
  pmu_.CountSequential(9, 0);
  EXPECT_EQ(Rd(0xC1), 0xFFFFFFFFFFFFull);
  EXPECT_EQ(Rd(0xC2), 0u);
  EXPECT_EQ(Rd(0x309), 0xFFFFFFFFFFFFull - 99);
  EXPECT_EQ(Rd(0x38E), 0u);
  EXPECT_EQ(pmu_.SequentialLimit(0), 0u);
  // The 10th is observed one by one: it wraps PMC0 and asks for the PMI.
  EXPECT_TRUE(Obs(Jmp(0x100, 0x102, 0, BranchKind::kNone)).pmi);
  EXPECT_EQ(Rd(0xC1), 0u);
  EXPECT_EQ(Rd(0x38E), 1u);
  pmu_.CountSequential(40, 3);
  EXPECT_EQ(Rd(0x309), 0xFFFFFFFFFFFFull - 59);
  EXPECT_EQ(Rd(0xC1), 0u);  // OS only
  EXPECT_EQ(pmu_.stats().instructions, 50u);
}

TEST_F(VpmuTest, CounterMaskComparesTheEventsOfOneInstruction) {
  // SDM 18.2.1.1: with CMASK != 0 a counter counts the cycles in which the
  // event occurred >= CMASK times (INV: fewer).  vbts's cycle is one
  // instruction, with 0 or 1 occurrences: over 3 non-branch instructions and
  // 1 jump, PMC0 (C0H, CMASK 2) counts 0, PMC1 (C0H, CMASK 1) 4, PMC2 (C4H,
  // CMASK 1, INV: cycles without a branch) 3, PMC3 (C0H, CMASK 2, INV) 4.
  constexpr uint64_t kBase = (1u << 16) | (1u << 17) | (1u << 22), kInv = 1u << 23;
  Wr(0x186, 0xC0 | kBase | (2ull << 24));
  Wr(0x187, 0xC0 | kBase | (1ull << 24));
  Wr(0x188, 0xC4 | kBase | kInv | (1ull << 24));
  Wr(0x189, 0xC0 | kBase | kInv | (2ull << 24));
  Wr(0x38F, 0xF);
  for (int i = 0; i < 3; i++) Obs(Jmp(0x100 + i, 0x101 + i, 0, BranchKind::kNone));
  Obs(Jmp(0x103, 0x200));
  EXPECT_EQ(Rd(0xC1), 0u);
  EXPECT_EQ(Rd(0xC2), 4u);
  EXPECT_EQ(Rd(0xC3), 3u);
  EXPECT_EQ(Rd(0xC4), 4u);
}

TEST_F(VpmuTest, SequentialCountingEqualsOneByOne) {
  // The same 1000 instructions counted in bulk and one by one leave the same
  // counters (cycles 3CH and instructions C0H both count 1 per instruction).
  VirtualPmu other(model_);
  for (VirtualPmu* p : {&pmu_, &other}) {
    ASSERT_FALSE(p->WriteMsr(0xC1, 5).gp);
    ASSERT_FALSE(p->WriteMsr(0x186, 0x3C | (3u << 16) | (1u << 22)).gp);
    ASSERT_FALSE(p->WriteMsr(0x38D, 0x333).gp);
    ASSERT_FALSE(p->WriteMsr(0x38F, 0x700000001ull).gp);
  }
  pmu_.CountSequential(1000, 3);
  for (int i = 0; i < 1000; i++) {
    absl::StatusOr<PmuEffects> fx = other.Observe(Jmp(0x100 + i, 0x101 + i, 3, BranchKind::kNone), lin_, false);
    ASSERT_TRUE(fx.ok());
  }
  for (uint32_t msr : {0xC1u, 0x309u, 0x30Au, 0x30Bu, 0x38Eu}) EXPECT_EQ(Rd(msr), other.ReadMsr(msr).value) << msr;
  EXPECT_EQ(Rd(0xC1), 1005u);
}

TEST_F(VpmuTest, WrmsrCountsUnderTheConfigurationItLeaves) {
  // PMC0 instructions (OS), PMC1 branch instructions (OS), fixed counters 0
  // (instructions) and 1 (core cycles: 1 per instruction in vbts), OS only.
  Wr(0x186, 0xC0 | (1u << 17) | (1u << 22));
  Wr(0x187, 0xC4 | (1u << 17) | (1u << 22));
  Wr(0x38D, 0x11);
  // GLOBAL_CTRL 0 -> all four: the WRMSR counts 1 on the instruction and cycle
  // counters; it is no branch (PMC1 stays 0).
  Wrmsr(0x38F, 0x3 | (0x3ull << 32));
  EXPECT_EQ(Rd(0xC1), 1u);
  EXPECT_EQ(Rd(0xC2), 0u);
  EXPECT_EQ(Rd(0x309), 1u);
  EXPECT_EQ(Rd(0x30A), 1u);
  // PERFEVTSEL EN: clearing it is not counted, setting it is (GLOBAL_CTRL set).
  Wrmsr(0x186, 0xC0 | (1u << 17));
  EXPECT_EQ(Rd(0xC1), 1u);
  EXPECT_EQ(Rd(0x309), 2u);  // fixed 0 counts the WRMSR: still enabled
  Wrmsr(0x186, 0xC0 | (1u << 17) | (1u << 22));
  EXPECT_EQ(Rd(0xC1), 2u);
  EXPECT_EQ(Rd(0x309), 3u);
  // Only USR: the ring-0 WRMSR that enables it is not counted.
  Wrmsr(0x186, 0xC0 | (1u << 16) | (1u << 22));
  EXPECT_EQ(Rd(0xC1), 2u);
  Wr(0x186, 0xC0 | (1u << 17) | (1u << 22));
  // Writing a counting counter: the WRMSR counts on top of the value it wrote.
  Wrmsr(0xC1, 100);
  EXPECT_EQ(Rd(0xC1), 101u);
  Wrmsr(0x309, 200);
  EXPECT_EQ(Rd(0x309), 201u);
  EXPECT_EQ(Rd(0xC1), 102u);
  // Fixed-counter control: the write that clears fixed 0's OS bit is not counted by it.
  Wrmsr(0x38D, 0x10);
  EXPECT_EQ(Rd(0x309), 201u);
  // GLOBAL_CTRL -> 0: not counted by anything.
  Wrmsr(0x38F, 0);
  // PMC0: 102 + the FIXED_CTR_CTRL WRMSR (PMC0 on) = 103, nothing for the last one.
  EXPECT_EQ(Rd(0xC1), 103u);
  // Fixed 1 (cycles, OS throughout) counted every WRMSR but the last: GLOBAL_CTRL
  // on, 3 x PERFEVTSEL0, PMC0, FIXED_CTR0, FIXED_CTR_CTRL = 7.
  EXPECT_EQ(Rd(0x30A), 7u);
  EXPECT_EQ(Rd(0xC2), 0u);  // no WRMSR is a branch instruction
}

TEST_F(VpmuTest, WrmsrThatWrapsACounterIsTheOverflowingInstruction) {
  // PMC0 = -1 with INT and FREEZE_PERFMON_ON_PMI: the enabling WRMSR wraps it,
  // requests the PMI after itself, and the freeze (v3) clears GLOBAL_CTRL at once.
  // With LBR and BTS on, the WRMSR adds no record: it is not a branch.
  Ds64(kBuf, kBuf, kBuf + 24 * 4, kBuf + 24 * 4);
  Wr(0xC1, 0xFFFFFFFF);
  Wr(0x186, 0xC0 | (1u << 17) | (1u << 20) | (1u << 22));
  Wr(0x1D9, kLbr | kTrBts | kFreezePerfmon);
  EXPECT_TRUE(Wrmsr(0x38F, 1).pmi);
  EXPECT_EQ(Rd(0xC1), 0u);
  EXPECT_EQ(Rd(0x38E), 1u);
  EXPECT_EQ(Rd(0x38F), 0u);
  EXPECT_EQ(pmu_.stats().lbr_pushes, 0u);
  EXPECT_EQ(pmu_.stats().bts_records, 0u);
  EXPECT_EQ(Mem64(kDsArea + 8), kBuf);
  // A counting counter written with all ones: its WRMSR wraps it.
  Wr(0x390, 1);
  Wr(0x1D9, 0);
  Wr(0x38F, 1);
  EXPECT_TRUE(Wrmsr(0xC1, 0xFFFFFFFF).pmi);
  EXPECT_EQ(Rd(0xC1), 0u);
  EXPECT_EQ(Rd(0x38E), 1u);
}

TEST_F(VpmuTest, BranchCounterCountsTakenAndNotTakenBranchesByRing) {
  // C4H counts branch instructions, taken or not; OS only: ring 3 ignored.
  Wr(0x186, 0xC4 | (1u << 17) | (1u << 22));
  Wr(0x38F, 1);
  Branch not_taken = Jmp(1, 3, 0, BranchKind::kNone);
  not_taken.branch_insn = true;
  Obs(not_taken);
  Obs(Jmp(1, 9, 0, BranchKind::kJcc));
  Obs(Jmp(1, 2, 0, BranchKind::kNone));  // not a branch
  Obs(Jmp(1, 9, 3, BranchKind::kJmp));   // ring 3
  EXPECT_EQ(Rd(0xC1), 2u);
  // Without GLOBAL_CTRL the counter stops (arch perfmon v2+).
  Wr(0x38F, 0);
  Obs(Jmp(1, 9, 0, BranchKind::kJcc));
  EXPECT_EQ(Rd(0xC1), 2u);
  // Fixed counter 0 (instructions), OS|USR|PMI.
  Wr(0x38D, 0xB);
  Wr(0x38F, 1ull << 32);
  Obs(Jmp(1, 2, 3, BranchKind::kNone));
  EXPECT_EQ(Rd(0x309), 1u);
}

// One retired instruction of each branch kind at CPL 0, in this order: a
// not-taken Jcc (kind none, a branch instruction), taken Jcc, JMP, JMP r/m,
// CALL, CALL r/m, RET, far CALL, SYSCALL, IRET, INT n.
void ObserveEachBranchKind(VirtualPmu& pmu, LinearMemory& lin) {
  uint64_t at = 0x100;
  for (BranchKind k : {BranchKind::kNone, BranchKind::kJcc, BranchKind::kJmp, BranchKind::kIndJmp,
                       BranchKind::kCall, BranchKind::kIndCall, BranchKind::kRet, BranchKind::kFarCall,
                       BranchKind::kSyscall, BranchKind::kIret, BranchKind::kSoftInt}) {
    Branch b;
    b.kind = k;
    b.from = at;
    b.to = at + 0x40;
    b.branch_insn = true;
    ASSERT_TRUE(pmu.Observe(b, lin, false).ok());
    at += 0x80;
  }
}

// BR_INST_RETIRED's umasks (docs/pmu-model.md, "Branch events"): one
// instruction of each kind, ring 0, counted by PMC0 with OS|USR|EN and the
// umask.  Expected counts by hand from the kinds' classes: not-taken Jcc
// (cond), taken Jcc (cond, near taken), JMP (near taken), JMP r/m (near
// taken, indirect), CALL (near taken, near call), CALL r/m (near taken, near
// call, indirect), RET (near taken, near return), far CALL, SYSCALL, IRET,
// INT n (far), and one non-branch instruction: 11 branch instructions.
TEST(VpmuModels, BranchUmasksCountTheirClassesPerModel) {
  struct Case {
    const char* model;
    uint8_t umask;
    uint64_t expected;
  };
  const Case cases[] = {
      // westmere: conditional 01H, near_call 02H, all_branches 04H; 08H and 20H are not its umasks.
      {"westmere", 0x00, 11}, {"westmere", 0x01, 2}, {"westmere", 0x02, 2}, {"westmere", 0x04, 11},
      {"westmere", 0x08, 0}, {"westmere", 0x20, 0},
      // skylake: + near_return 08H, not_taken 10H, near_taken 20H, far_branch 40H; no 80H.
      {"skylake", 0x00, 11}, {"skylake", 0x01, 2}, {"skylake", 0x02, 2}, {"skylake", 0x04, 11},
      {"skylake", 0x08, 1}, {"skylake", 0x10, 1}, {"skylake", 0x20, 6}, {"skylake", 0x40, 4}, {"skylake", 0x80, 0},
      // icelake-server: 01H is cond_taken, 11H cond, 80H indirect; no 04H.
      {"icelake-server", 0x00, 11}, {"icelake-server", 0x01, 1}, {"icelake-server", 0x02, 2},
      {"icelake-server", 0x04, 0}, {"icelake-server", 0x08, 1}, {"icelake-server", 0x10, 1},
      {"icelake-server", 0x11, 2}, {"icelake-server", 0x20, 6}, {"icelake-server", 0x40, 4},
      {"icelake-server", 0x80, 2},
      // core-duo: only the architectural 00H.
      {"core-duo", 0x00, 11}, {"core-duo", 0x02, 0},
  };
  testing::FakePhysMemory mem(1 << 20);
  LinearMemory lin(mem, PagingRegs{});
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.model) + " umask " + std::to_string(c.umask));
    VirtualPmu pmu(*FindCpuModel(c.model));
    ASSERT_FALSE(pmu.WriteMsr(0x186, 0xC4 | (uint64_t{c.umask} << 8) | (3u << 16) | (1u << 22)).gp);
    if (FindCpuModel(c.model)->pmu.perfmon_version >= 2) {
      ASSERT_FALSE(pmu.WriteMsr(0x38F, 1).gp);
    }
    ObserveEachBranchKind(pmu, lin);
    Branch plain;
    plain.from = 0x2000;
    plain.to = 0x2002;
    ASSERT_TRUE(pmu.Observe(plain, lin, false).ok());
    EXPECT_EQ(pmu.ReadMsr(0xC1).value, c.expected);
    // A umask that tells branches apart is not branch-agnostic (the engines
    // then report every block end).
    if (c.umask != 0 && c.expected != 11) {
      EXPECT_FALSE(pmu.BranchAgnostic());
    }
  }
}

// core-duo's BR_TAKEN_RETIRED (C9H, the P6 family's event): the same eleven
// branch instructions, of which every one but the not-taken Jcc transferred
// control: 10. On westmere C9H is none of the events vbts models: 0.
TEST(VpmuModels, P6TakenBranchesEventOnCoreDuo) {
  testing::FakePhysMemory mem(1 << 20);
  LinearMemory lin(mem, PagingRegs{});
  for (const auto& [model, expected] : {std::pair{"core-duo", 10u}, {"westmere", 0u}}) {
    SCOPED_TRACE(model);
    VirtualPmu pmu(*FindCpuModel(model));
    ASSERT_FALSE(pmu.WriteMsr(0x186, 0xC9 | (3u << 16) | (1u << 22)).gp);
    if (FindCpuModel(model)->pmu.perfmon_version >= 2) {
      ASSERT_FALSE(pmu.WriteMsr(0x38F, 1).gp);
    }
    ObserveEachBranchKind(pmu, lin);
    EXPECT_EQ(pmu.ReadMsr(0xC1).value, expected);
  }
}

TEST_F(VpmuTest, FreezeOnPmiLegacy) {
  // Westmere (v3): FREEZE_LBRS_ON_PMI clears DEBUGCTL.LBR, FREEZE_PERFMON_ON_PMI
  // clears GLOBAL_CTRL when a PMI is requested.
  Wr(0xC1, 0xFFFFFFFF);
  Wr(0x186, 0xC0 | (1u << 17) | (1u << 20) | (1u << 22));
  Wr(0x38F, 1);
  Wr(0x1D9, kLbr | kFreezeLbrs | kFreezePerfmon);
  EXPECT_TRUE(Obs(Jmp(1, 2)).pmi);
  EXPECT_EQ(Rd(0x1D9), kFreezeLbrs | kFreezePerfmon);
  EXPECT_EQ(Rd(0x38F), 0u);
}

TEST_F(VpmuTest, BtfTrapsOnlyAfterTakenBranches) {
  EXPECT_TRUE(Obs(Jmp(1, 2, 0, BranchKind::kNone), /*tf=*/true).single_step_trap);
  EXPECT_FALSE(Obs(Jmp(1, 2, 0, BranchKind::kNone), /*tf=*/false).single_step_trap);
  Wr(0x1D9, kBtf);
  EXPECT_FALSE(Obs(Jmp(1, 2, 0, BranchKind::kNone), true).single_step_trap);
  EXPECT_TRUE(Obs(Jmp(1, 9, 0, BranchKind::kJcc), true).single_step_trap);
}

// PEBS on Westmere (record format 1, 0xB0 bytes; SDM 18.6.1.1, table 18-23).
// PMC0 counts instructions from 2^48 - 2 without INT: the 2nd instruction
// overflows it (arms PEBS), the 3rd is the PEBS event: a record with the
// registers after it and RIP = its successor, PMC0 reloaded from the DS
// area's reset value, status bit 0 cleared, and the index reaching the
// threshold (one record) raises the PMI with GLOBAL_STATUS.OvfBuffer.
class PebsTest : public VpmuTest {
 protected:
  explicit PebsTest(const char* model = "westmere") : VpmuTest(model) {}
  static constexpr uint64_t kPebs = 0x3000;
  void SetUpPebs(uint64_t records_room, uint64_t threshold_records, uint64_t reset) {
    Ds64(kBuf, kBuf, kBuf + 24 * 4, kBuf + 24 * 4 + 24);  // BTS unused
    ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea + 0x20), kPebs).ok());
    ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea + 0x28), kPebs).ok());
    ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea + 0x30), kPebs + records_room).ok());
    ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea + 0x38), kPebs + threshold_records).ok());
    ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea + 0x40), reset).ok());
    Wr(0x3F1, 1);
    Wr(0xC1, 0xFFFFFFFE);  // sign-extended: 2^48 - 2
    Wr(0x186, 0xC0 | (1u << 16) | (1u << 17) | (1u << 22));
    Wr(0x38F, 1);
  }
  PmuEffects ObsRegs(const Branch& b, const GuestRegs& r) {
    absl::StatusOr<PmuEffects> fx = pmu_.Observe(b, lin_, false, &r);
    EXPECT_TRUE(fx.ok()) << fx.status();
    return fx.ok() ? *fx : PmuEffects{};
  }
};

TEST_F(PebsTest, RecordAfterTheInstructionFollowingTheOverflow) {
  SetUpPebs(0xB0 * 4, 0xB0, 0xFFFFFFFFFFF0ull);
  GuestRegs r;
  r.rflags = 0x246;
  for (int i = 0; i < 16; i++) r.gpr[i] = 0x1111111100000000ull | (0x10 + i);  // RAX=0x..10, RCX=0x..11, ...
  EXPECT_FALSE(pmu_.WantsRegs());
  EXPECT_FALSE(Obs(Jmp(0x100, 0x102, 0, BranchKind::kNone)).pmi);  // -> 2^48 - 1
  EXPECT_FALSE(Obs(Jmp(0x102, 0x104, 0, BranchKind::kNone)).pmi);  // -> 0: overflow, armed
  EXPECT_TRUE(pmu_.WantsRegs());
  EXPECT_EQ(pmu_.SequentialLimit(0), 0u);  // the assist needs the next instruction's registers
  EXPECT_EQ(Rd(0x38E), 1u);  // PMC0 overflow status until the assist
  const PmuEffects fx = ObsRegs(Jmp(0x104, 0x200, 0, BranchKind::kJmp), r);  // the PEBS event
  EXPECT_TRUE(fx.pmi);
  EXPECT_FALSE(pmu_.WantsRegs());
  EXPECT_EQ(Mem64(kDsArea + 0x28), kPebs + 0xB0);
  // 32-bit mode (ia32e false): 32-bit values, R8-R15 zero.
  EXPECT_EQ(Mem64(kPebs + 0x00), 0x246u);
  EXPECT_EQ(Mem64(kPebs + 0x08), 0x200u);       // the instruction after the jump: its target
  EXPECT_EQ(Mem64(kPebs + 0x10), 0x10u);        // RAX (gpr 0)
  EXPECT_EQ(Mem64(kPebs + 0x18), 0x13u);        // RBX (gpr 3)
  EXPECT_EQ(Mem64(kPebs + 0x20), 0x11u);        // RCX
  EXPECT_EQ(Mem64(kPebs + 0x28), 0x12u);        // RDX
  EXPECT_EQ(Mem64(kPebs + 0x30), 0x16u);        // RSI
  EXPECT_EQ(Mem64(kPebs + 0x38), 0x17u);        // RDI
  EXPECT_EQ(Mem64(kPebs + 0x40), 0x15u);        // RBP
  EXPECT_EQ(Mem64(kPebs + 0x48), 0x14u);        // RSP
  EXPECT_EQ(Mem64(kPebs + 0x50), 0u);           // R8: not in IA-32e mode
  EXPECT_EQ(Mem64(kPebs + 0x90), 1u);           // GLOBAL_STATUS before the assist: PMC0 overflowed
  // After: overflow status cleared, OvfBuffer set (index reached the threshold), PMC0 = reset.
  EXPECT_EQ(Rd(0x38E), 1ull << 62);
  EXPECT_EQ(Rd(0xC1), 0xFFFFFFFFFFF0ull);
  EXPECT_EQ(pmu_.stats().pebs_records, 1u);
}

TEST_F(PebsTest, LongModeRecordHasFullRegistersAndAFullBufferSkipsTheAssist) {
  SetUpPebs(0xB0, 0xB0 * 2, 0xFFFFFFFFFFFEull);  // room for one record; threshold beyond it
  GuestRegs r;
  for (int i = 0; i < 16; i++) r.gpr[i] = 0xFFFF800000000000ull + i;
  Branch b = Jmp(0xFFFFFFF810000000ull, 0xFFFFFFF810000002ull, 0, BranchKind::kNone);
  b.ia32e = true;
  Obs(b);
  Obs(b);  // overflow
  EXPECT_FALSE(ObsRegs(b, r).pmi);  // record 1: index = base + 0xB0 < threshold: no PMI
  EXPECT_EQ(Mem64(kPebs + 0x08), 0xFFFFFFF810000002ull);
  EXPECT_EQ(Mem64(kPebs + 0x50), 0xFFFF800000000008ull);  // R8
  EXPECT_EQ(Mem64(kPebs + 0x88), 0xFFFF80000000000Full);  // R15
  // Reloaded to 2^48 - 2: two more instructions overflow it again, the next is an event,
  // but the buffer is full (index + 0xB0 > maximum): the assist is skipped entirely.
  Obs(b);
  Obs(b);
  EXPECT_TRUE(pmu_.WantsRegs());
  EXPECT_FALSE(ObsRegs(b, r).pmi);
  EXPECT_EQ(Mem64(kDsArea + 0x28), kPebs + 0xB0);
  EXPECT_EQ(pmu_.stats().pebs_dropped, 1u);
  EXPECT_EQ(Rd(0x38E) & 1, 1u);  // overflow status stays: no assist cleared it
  EXPECT_EQ(pmu_.TakeWarnings().size(), 1u);
}

TEST_F(PebsTest, PebsEnableReservedBitsFault) {
  EXPECT_TRUE(pmu_.WriteMsr(0x3F1, 1u << 4).gp);   // only PMC0-3
  EXPECT_FALSE(pmu_.WriteMsr(0x3F1, 0xFull | (0xFull << 32)).gp);  // PEBS + load latency on PMC0-3
}

class PebsSkylakeTest : public PebsTest {
 protected:
  PebsSkylakeTest() : PebsTest("skylake") {}
};

// --- Load latency and data source (docs/pmu-model.md, "Load latency and
// data source"). The engines report each data access before the
// instruction's Observe; LoadAt() does both for a one-load instruction at CPL 0.
using Kind = VirtualPmu::DataAccessKind;
PmuEffects LoadAt(VirtualPmu& pmu, LinearMemory& lin, uint64_t pa, uint64_t pc, const GuestRegs* r = nullptr) {
  pmu.ObserveDataAccess(pa, 4, 0, Kind::kLoad);
  Branch b;
  b.kind = BranchKind::kNone;
  b.from = pc;
  b.to = pc + 3;
  b.mem = 1;
  b.load_la = 0xC0000000u + pa;  // a linear address != the physical one
  absl::StatusOr<PmuEffects> fx = pmu.Observe(b, lin, false, r);
  EXPECT_TRUE(fx.ok()) << fx.status();
  return fx.ok() ? *fx : PmuEffects{};
}

TEST_F(PebsTest, LoadLatencyThresholdMsr) {
  // MSR_PEBS_LD_LAT_THRESHOLD (3F6H): bits 15:0 R/W, the rest reserved (SDM vol. 4).
  EXPECT_EQ(Rd(0x3F6), 0u);
  Wr(0x3F6, 0xFFFF);
  EXPECT_EQ(Rd(0x3F6), 0xFFFFu);
  EXPECT_TRUE(pmu_.WriteMsr(0x3F6, 0x10000).gp);
  EXPECT_EQ(Rd(0x3F6), 0xFFFFu);
}

TEST_F(PebsTest, LoadLatencyCountsLoadsSlowerThanTheThreshold) {
  // PMC0 counts MEM_INST_RETIRED.LATENCY_ABOVE_THRESHOLD (0BH/10H) with threshold 11: of the
  // model's latencies (L1D 4, L2 12, L3 44, DRAM 200 cycles) all but L1D hits count.
  Wr(0x186, 0x100B | (1u << 16) | (1u << 17) | (1u << 22));
  Wr(0xC1, 0);
  Wr(0x3F6, 11);
  Wr(0x38F, 1);
  EXPECT_TRUE(pmu_.WantsDataAccesses());
  EXPECT_TRUE(pmu_.CountsMemoryInstructions());
  LoadAt(pmu_, lin_, 0x100000, 0x100);  // cold: DRAM (its pair 0x100040 comes into L2 and L3)
  EXPECT_EQ(Rd(0xC1), 1u);
  LoadAt(pmu_, lin_, 0x100000, 0x100);  // L1D hit: 4 <= 11
  EXPECT_EQ(Rd(0xC1), 1u);
  LoadAt(pmu_, lin_, 0x100040, 0x100);  // the pair: L1D miss, L2 hit (12)
  EXPECT_EQ(Rd(0xC1), 2u);
  // Eight more lines 32 KB apart share 0x100000's L1D set (64 sets) and L2 set (512 sets,
  // 8 ways): it leaves both, but stays in the 16-way L3 -> an L3 hit (44).
  for (uint64_t k = 1; k <= 8; k++) LoadAt(pmu_, lin_, 0x100000 + k * 0x8000, 0x100);  // 8 x DRAM
  EXPECT_EQ(Rd(0xC1), 10u);
  LoadAt(pmu_, lin_, 0x100000, 0x100);
  EXPECT_EQ(Rd(0xC1), 11u);
  // A store, and an instruction without memory operands, are not this event's.
  pmu_.ObserveDataAccess(0x900000, 4, 0, Kind::kStore);
  Branch store = Jmp(0x200, 0x203, 0, BranchKind::kNone);
  store.mem = 2;
  store.store_la = 0x900000;
  Obs(store);
  Obs(Jmp(0x203, 0x205, 0, BranchKind::kNone));
  EXPECT_EQ(Rd(0xC1), 11u);
  // The threshold compares with the slowest of an instruction's loads: a 200-cycle load is
  // not counted at threshold 200, and counted at 199.
  Wr(0x3F6, 200);
  LoadAt(pmu_, lin_, 0xA00000, 0x100);
  EXPECT_EQ(Rd(0xC1), 11u);
  Wr(0x3F6, 199);
  LoadAt(pmu_, lin_, 0xB00000, 0x100);
  EXPECT_EQ(Rd(0xC1), 12u);
}

TEST_F(PebsTest, ALoadInBulkAboveTheThresholdAsksForItsInstructionAndChangesNothing) {
  // PMC0 counts the load-latency event at threshold 11 (L2 hits and slower
  // count, as above), PMC1 LLC references (2EH/4FH), both at CPL 0.
  using Owner = VirtualPmu::AccessOwner;
  Wr(0x186, 0x100B | (1u << 17) | (1u << 22));
  Wr(0x187, 0x4F2E | (1u << 17) | (1u << 22));
  Wr(0x3F6, 11);
  Wr(0x38F, 3);
  // Cold, in bulk: the load would come from DRAM (200 > 11): not taken, no
  // LLC reference counted, no line filled (asked twice, the same answer).
  for (int i = 0; i < 2; i++) {
    const PmuEffects fx = pmu_.ObserveDataAccess(0x100000, 4, 0, Kind::kLoad, Owner::kInBulk);
    EXPECT_TRUE(fx.needs_instruction);
    EXPECT_EQ(Rd(0xC2), 0u);
  }
  // A store in bulk is taken (the event counts loads only): its line
  // 0x200000 is filled, one LLC reference.
  EXPECT_FALSE(pmu_.ObserveDataAccess(0x200000, 4, 0, Kind::kStore, Owner::kInBulk).needs_instruction);
  EXPECT_EQ(Rd(0xC2), 1u);
  // At CPL 3 PMC0 does not count (OS only): the load is taken in bulk, an
  // LLC reference is not counted either (PMC1 is OS only too).
  EXPECT_FALSE(pmu_.ObserveDataAccess(0x300000, 4, 3, Kind::kLoad, Owner::kInBulk).needs_instruction);
  EXPECT_EQ(Rd(0xC2), 1u);
  // Run alone, the load is taken: one more LLC reference, and its
  // instruction counts for the event.
  EXPECT_FALSE(pmu_.ObserveDataAccess(0x100000, 4, 0, Kind::kLoad, Owner::kObserved).needs_instruction);
  Branch b = Jmp(0x100, 0x103, 0, BranchKind::kNone);
  b.mem = 1;
  Obs(b);
  EXPECT_EQ(Rd(0xC1), 1u);
  EXPECT_EQ(Rd(0xC2), 2u);
  // Now an L1D hit (4 <= 11): taken in bulk; counted in bulk, nothing for PMC0.
  EXPECT_FALSE(pmu_.ObserveDataAccess(0x100000, 4, 0, Kind::kLoad, Owner::kInBulk).needs_instruction);
  pmu_.CountSequential(1, 0, 1, 0);
  EXPECT_EQ(Rd(0xC1), 1u);
  // An instruction observed after loads taken in bulk does not inherit
  // their latency: 0x400000 (DRAM) counted now, kCountNow, adds 1 at once;
  // the instruction observed next (the block's last, no load of its own
  // above the threshold) adds nothing.
  EXPECT_FALSE(pmu_.ObserveDataAccess(0x400000, 4, 0, Kind::kLoad, Owner::kCountNow).needs_instruction);
  EXPECT_EQ(Rd(0xC1), 2u);
  Obs(b);
  EXPECT_EQ(Rd(0xC1), 2u);
  // kCountNow below the threshold (the L1D hit again) counts nothing.
  pmu_.ObserveDataAccess(0x400000, 4, 0, Kind::kLoad, Owner::kCountNow);
  EXPECT_EQ(Rd(0xC1), 2u);
}

TEST_F(PebsTest, ACountNowLoadThatWrapsTheCounterRequestsThePmi) {
  // PMC0 with INT, one below its wrap: a load counted at the access (its
  // instruction not found) overflows it there.
  using Owner = VirtualPmu::AccessOwner;
  Wr(0x186, 0x100B | (1u << 16) | (1u << 17) | (1u << 20) | (1u << 22));
  Wr(0xC1, 0xFFFFFFFF);  // sign-extended: 2^48 - 1
  Wr(0x3F6, 30);
  Wr(0x38F, 1);
  const PmuEffects fx = pmu_.ObserveDataAccess(0x100000, 4, 0, Kind::kLoad, Owner::kCountNow);
  EXPECT_TRUE(fx.pmi);
  EXPECT_EQ(Rd(0xC1), 0u);
  EXPECT_EQ(Rd(0x38E) & 1, 1u);  // IA32_PERF_GLOBAL_STATUS.OVF_PMC0
}

TEST_F(PebsTest, LoadLatencyRecordHoldsAddressSourceAndLatency) {
  // Format 1 (Westmere) fills 98H, A0H, A8H for load-latency records (SDM 18.8.1.2). PMC0
  // counts the event from 2^48 - 1 at threshold 30 (Linux's `perf mem` default), PEBS on it.
  SetUpPebs(0xB0 * 4, 0xB0 * 4, 0xFFFFFFFFFFFFull);
  Wr(0x38F, 0);
  Wr(0x186, 0x100B | (1u << 16) | (1u << 17) | (1u << 22));
  Wr(0xC1, 0xFFFFFFFF);  // sign-extended: 2^48 - 1
  Wr(0x3F1, 1 | (1ull << 32));  // PEBS and LL_EN on PMC0
  Wr(0x3F6, 30);
  Wr(0x38F, 1);
  GuestRegs r;
  LoadAt(pmu_, lin_, 0x200000, 0x100);  // DRAM: counted, wraps PMC0: armed
  EXPECT_TRUE(pmu_.WantsRegs());
  LoadAt(pmu_, lin_, 0x200000, 0x103, &r);  // L1D hit (4): not an event, no assist
  EXPECT_EQ(Mem64(kDsArea + 0x28), kPebs);
  LoadAt(pmu_, lin_, 0x300000, 0x106, &r);  // DRAM: the assist
  EXPECT_EQ(Mem64(kDsArea + 0x28), kPebs + 0xB0);
  EXPECT_EQ(Mem64(kPebs + 0x08), 0x109u);          // RIP: after the load
  EXPECT_EQ(Mem64(kPebs + 0x98), 0xC0300000u);     // data linear address
  EXPECT_EQ(Mem64(kPebs + 0xA0), 0x0Cu);           // L3 miss, local DRAM, exclusive (Westmere's encoding)
  EXPECT_EQ(Mem64(kPebs + 0xA8), 200u);            // latency
  // A record for INST_RETIRED on format 1 leaves the three fields 0.
  Wr(0x38F, 0);
  Wr(0x186, 0xC0 | (1u << 16) | (1u << 17) | (1u << 22));
  Wr(0xC1, 0xFFFFFFFF);
  Wr(0x38F, 1);
  LoadAt(pmu_, lin_, 0x400000, 0x200);  // wraps
  LoadAt(pmu_, lin_, 0x500000, 0x203, &r);
  EXPECT_EQ(Mem64(kDsArea + 0x28), kPebs + 2 * 0xB0);
  EXPECT_EQ(Mem64(kPebs + 0xB0 + 0x98), 0u);
  EXPECT_EQ(Mem64(kPebs + 0xB0 + 0xA0), 0u);
  EXPECT_EQ(Mem64(kPebs + 0xB0 + 0xA8), 0u);
}

TEST_F(PebsTest, AnAssistArmedForLoadLatencyAloneLeavesOtherInstructionsToBulk) {
  // PMC0 counts the load-latency event with PEBS (as above), PMC1
  // INST_RETIRED (USR, OS, EN). Once PMC0's wrap arms the assist, its next
  // event is an instruction with a load above the threshold, which the
  // engine observes alone: the others may be counted in bulk, up to PMC1's
  // room (2^48 - 102, 2^48 - 101 after the load: 100 increments to 2^48 - 1,
  // the 101st wraps it). With PEBS
  // on PMC1 too and PMC1 armed, every instruction is needed: 0.
  SetUpPebs(0xB0 * 4, 0xB0 * 4, 0xFFFFFFFFFFFFull);
  Wr(0x38F, 0);
  Wr(0x186, 0x100B | (1u << 16) | (1u << 17) | (1u << 22));
  Wr(0x187, 0xC0 | (1u << 16) | (1u << 17) | (1u << 22));
  Wr(0xC1, 0xFFFFFFFF);  // sign-extended: 2^48 - 1
  Wr(0xC2, 0xFFFFFFFF - 101);  // sign-extended: 2^48 - 102
  Wr(0x3F1, 1 | (1ull << 32));
  Wr(0x3F6, 30);
  Wr(0x38F, 3);
  EXPECT_FALSE(pmu_.ArmedOnlyForLoadLatency());
  LoadAt(pmu_, lin_, 0x200000, 0x100);  // DRAM: wraps PMC0, armed; PMC1 counts it
  EXPECT_TRUE(pmu_.WantsRegs());
  EXPECT_TRUE(pmu_.ArmedOnlyForLoadLatency());
  EXPECT_EQ(pmu_.SequentialLimit(0), 100u);
  pmu_.CountSequential(1, 0);
  EXPECT_EQ(pmu_.SequentialLimit(0), 99u);
  // PMC1 with PEBS too, wrapped: armed for INST_RETIRED.
  Wr(0x38F, 0);
  Wr(0xC2, 0xFFFFFFFF);
  Wr(0x3F1, 3 | (1ull << 32));
  Wr(0x38F, 3);
  pmu_.CountSequential(0, 0);
  Obs(Jmp(0x300, 0x302, 0, BranchKind::kNone));  // wraps PMC1 (no load: PMC0 stays armed)
  EXPECT_TRUE(pmu_.WantsRegs());
  EXPECT_FALSE(pmu_.ArmedOnlyForLoadLatency());
  EXPECT_EQ(pmu_.SequentialLimit(0), 0u);
}

TEST_F(VpmuTest, DataSourceNeedsNoCacheModelWhenNothingAsksForIt) {
  // PEBS on INST_RETIRED alone: no counter cares where data comes from.
  Wr(0x186, 0xC0 | (1u << 16) | (1u << 22));
  Wr(0x3F1, 1);
  Wr(0x38F, 1);
  EXPECT_FALSE(pmu_.WantsDataAccesses());
  // Retired stores counted without PEBS: neither.
  Wr(0x187, 0x020B | (1u << 16) | (1u << 22));
  Wr(0x38F, 3);
  EXPECT_FALSE(pmu_.WantsDataAccesses());
  // With PEBS on that counter, a record's L1D-hit bit needs the L1D model.
  Wr(0x3F1, 3);
  EXPECT_TRUE(pmu_.WantsDataAccesses());
}


// --- Adaptive PEBS, record format 4 (icelake-server). SDM vol. 3B 18.9.2
// "Adaptive PEBS": MSR_PEBS_DATA_CFG (3F2H) selects record groups after the
// basic group; the record is adaptive for counters whose Adaptive_Record bit
// is set (PERFEVTSELx bit 34, IA32_FIXED_CTR_CTRL bit 32+4i); PEBS on all
// 8 GP counters and on the fixed counters (IA32_PEBS_ENABLE bit 32+i); DS
// reset values of PMC0-7 at 40H-78H, FIXED_CTR0-3 at 80H-98H.
class PebsIcelakeTest : public PebsTest {
 protected:
  PebsIcelakeTest() : PebsTest("icelake-server") {}
  // The PEBS fields of the DS area (BTS unused): base = index = kPebs.
  void PebsDs(uint64_t room, uint64_t threshold) {
    Ds64(kBuf, kBuf, kBuf + 24 * 4, kBuf + 24 * 4 + 24);
    ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea + 0x20), kPebs).ok());
    ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea + 0x28), kPebs).ok());
    ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea + 0x30), kPebs + room).ok());
    ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea + 0x38), kPebs + threshold).ok());
  }
  void Reset(int offset, uint64_t v) { ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kDsArea + offset), v).ok()); }
  static constexpr uint64_t kEn = (1u << 16) | (1u << 17) | (1u << 22), kAdaptive = 1ull << 34, kGprsCfg = 2;
};

TEST_F(PebsIcelakeTest, MsrRules) {
  // MSR_PEBS_DATA_CFG: MemInfo 0, GPRs 1, XMMs 2, LBRs 3, LBR entries - 1 in
  // 31:24 (SDM 18.9.2.3); every other bit reserved.
  Wr(0x3F2, 0xFF00000Full);
  EXPECT_EQ(Rd(0x3F2), 0xFF00000Full);
  EXPECT_TRUE(pmu_.WriteMsr(0x3F2, 1u << 4).gp);
  EXPECT_TRUE(pmu_.WriteMsr(0x3F2, 1u << 23).gp);
  EXPECT_TRUE(pmu_.WriteMsr(0x3F2, 1ull << 32).gp);
  // IA32_PEBS_ENABLE: PMC0-7 (bits 7:0) and FIXED_CTR0-3 (bits 35:32).
  Wr(0x3F1, 0xFF | (0xFull << 32));
  EXPECT_TRUE(pmu_.WriteMsr(0x3F1, 1u << 8).gp);
  EXPECT_TRUE(pmu_.WriteMsr(0x3F1, 1ull << 36).gp);
  // Adaptive_Record: PERFEVTSELx bit 34 (the only upper bit), FIXED_CTR_CTRL bits 32, 36, 40, 44.
  Wr(0x186 + 7, 0xC0 | kEn | kAdaptive);
  EXPECT_TRUE(pmu_.WriteMsr(0x186, 1ull << 35).gp);
  Wr(0x38D, 0xBBBB | (1ull << 32) | (1ull << 36) | (1ull << 40) | (1ull << 44));
  EXPECT_TRUE(pmu_.WriteMsr(0x38D, 1ull << 33).gp);
  EXPECT_TRUE(pmu_.WriteMsr(0x38D, 1ull << 16).gp);  // no fixed counter 4
  // 8 GP and 4 fixed counters: PMC7 (C8H, A_PMC7 4C8H) and FIXED_CTR3 (30CH) exist.
  Wr(0x4C8, 0xFFFFFFFFFFFFull);
  EXPECT_EQ(Rd(0xC8), 0xFFFFFFFFFFFFull);
  Wr(0x30C, 5);
  EXPECT_EQ(pmu_.ReadPmc((1u << 30) | 3).value, 5u);
  EXPECT_TRUE(pmu_.ReadPmc(8).gp);
  // Architectural event 7, TOPDOWN.SLOTS (A4H/01H; SDM 18.2.1.2 table 18-1, CPUID.0AH:EAX[31:24]
  // = 8): vbts counts it as its fixed counter 3, one per instruction.
  Wr(0x38F, 0);
  Wr(0x4C1, 0);
  Wr(0x186, 0xA4 | (0x01 << 8) | kEn);
  Wr(0x38F, 1);
  Obs(Jmp(0x100, 0x102, 0, BranchKind::kNone));
  Obs(Jmp(0x102, 0x200, 3, BranchKind::kJmp));
  EXPECT_EQ(Rd(0xC1), 2u);
}

TEST(VpmuModels, PebsDataCfgOnlyWithTheBaselineBit) {
  // Skylake (format 3, no PEBS_BASELINE): 3F2H, PERFEVTSEL bit 34 and the
  // fixed counters' PEBS bits do not exist.
  VirtualPmu p(*FindCpuModel("skylake"));
  EXPECT_TRUE(p.ReadMsr(0x3F2).gp);
  EXPECT_TRUE(p.WriteMsr(0x3F2, 0).gp);
  EXPECT_TRUE(p.WriteMsr(0x186, 1ull << 34).gp);
  EXPECT_TRUE(p.WriteMsr(0x38D, 1ull << 32).gp);
  EXPECT_TRUE(p.WriteMsr(0x3F1, 1ull << 4).gp);
  EXPECT_TRUE(p.Owns(0x3F2));
}

// Every group, on PMC5 (a counter beyond the PMC0-3 of formats 1-3), in
// IA-32e mode, with 2 LBR entries (DATA_CFG[31:24] = 1). Record size
// (SDM 18.9.2.3): basic 20H + memory info 20H + GPRs 90H + XMMs 100H +
// 2 x 18H LBR entries = 200H. Offsets: basic 0, memory info 20H, GPRs 40H
// (RFLAGS 40H, RIP 48H, RAX 50H ... R15 C8H), XMM0 D0H ... XMM15 1C0H,
// LBR entries 1D0H and 1E8H.
TEST_F(PebsIcelakeTest, AdaptiveRecordWithEveryGroup) {
  PebsDs(0x1000, 0x200);  // threshold: one record
  Reset(0x40 + 8 * 5, 0xFFFFFFFFFF00ull);
  Wr(0x3F2, 0x0100000F);
  Wr(0x1D9, kLbr);
  Wr(0x3F1, 1u << 5);
  Wr(0x4C1 + 5, 0xFFFFFFFFFFFEull);  // 2^48 - 2 (full-width write)
  Wr(0x186 + 5, 0xC0 | kEn | kAdaptive);
  Wr(0x38F, 1u << 5);
  GuestRegs r;
  r.rflags = 0x202;
  r.tsc = 0x123456789ull;
  for (int i = 0; i < 16; i++) r.gpr[i] = 0xFFFF800000000000ull + i;
  for (int x = 0; x < 16; x++)
    for (int j = 0; j < 16; j++) r.xmm[x][j] = static_cast<uint8_t>(16 * x + j);
  auto jmp = [](uint64_t from, uint64_t to) {
    Branch b = Jmp(from, to);
    b.ia32e = true;
    return b;
  };
  Obs(jmp(0x100, 0x110));  // PMC5 -> 2^48 - 1; LBR: (100, 110)
  Obs(jmp(0x110, 0x120));  // -> 0: overflow, armed; LBR: (110, 120)
  EXPECT_TRUE(pmu_.WantsXmm());
  // The PEBS event: its own branch (120 -> 130) is in the LBRs before the assist.
  EXPECT_TRUE(ObsRegs(jmp(0x120, 0x130), r).pmi);
  EXPECT_EQ(Mem64(kDsArea + 0x28), kPebs + 0x200);
  EXPECT_EQ(Mem64(kPebs + 0x00), (0x200ull << 48) | 0x0100000F);  // size 200H, format = DATA_CFG
  EXPECT_EQ(Mem64(kPebs + 0x08), 0x120u);                          // eventing IP
  EXPECT_EQ(Mem64(kPebs + 0x10), 1u << 5);                         // applicable counters: PMC5
  EXPECT_EQ(Mem64(kPebs + 0x18), 0x123456789u);                    // TSC
  for (int o = 0x20; o < 0x40; o += 8) EXPECT_EQ(Mem64(kPebs + o), 0u) << o;  // memory info: 0
  EXPECT_EQ(Mem64(kPebs + 0x40), 0x202u);                          // RFLAGS
  EXPECT_EQ(Mem64(kPebs + 0x48), 0x130u);                          // RIP: the next instruction
  EXPECT_EQ(Mem64(kPebs + 0x50), 0xFFFF800000000000ull);           // RAX
  EXPECT_EQ(Mem64(kPebs + 0x58), 0xFFFF800000000001ull);           // RCX (encoding order)
  EXPECT_EQ(Mem64(kPebs + 0x70), 0xFFFF800000000004ull);           // RSP
  EXPECT_EQ(Mem64(kPebs + 0xC8), 0xFFFF80000000000Full);           // R15
  EXPECT_EQ(Mem64(kPebs + 0xD0), 0x0706050403020100ull);           // XMM0 low
  EXPECT_EQ(Mem64(kPebs + 0xD8), 0x0F0E0D0C0B0A0908ull);           // XMM0 high
  EXPECT_EQ(Mem64(kPebs + 0x1C8), 0xFFFEFDFCFBFAF9F8ull);          // XMM15 high
  EXPECT_EQ(Mem64(kPebs + 0x1D0), 0x120u);                         // LBR entry 0: the latest branch
  EXPECT_EQ(Mem64(kPebs + 0x1D8), 0x130u);
  EXPECT_EQ(Mem64(kPebs + 0x1E0), 0u);                             // LBR_INFO: 0 (docs/pmu-model.md)
  EXPECT_EQ(Mem64(kPebs + 0x1E8), 0x110u);                         // entry 1
  EXPECT_EQ(Mem64(kPebs + 0x1F0), 0x120u);
  EXPECT_EQ(Rd(0x38E), 1ull << 62);                                // OvfBuffer; PMC5's bit cleared
  EXPECT_EQ(Rd(0xC1 + 5), 0xFFFFFFFFFF00ull);                      // reloaded from 68H
}

// Adaptive PEBS's memory info group: its first quadword is the access's
// address for the retired-load and -store events (SDM 18.9.2.3), 0 for the
// others; data source, latency and TSX information stay 0.
TEST_F(PebsIcelakeTest, MemoryInfoGroupHoldsTheLoadAddress) {
  PebsDs(0x1000, 0x40);  // threshold: one record of 20H + 20H bytes
  Wr(0x3F2, 1);          // MemInfo
  Wr(0x3F1, 1);
  Wr(0xC1, 0xFFFFFFFFFFFFull);  // one load to the overflow
  Wr(0x186, 0x81D0 | kEn | kAdaptive);
  Wr(0x38F, 1);
  Branch load = Jmp(0x100, 0x104, 3, BranchKind::kNone);
  load.mem = 1;
  load.load_la = 0xFFFF800000001234ull;
  load.ia32e = true;
  Obs(load);  // -> 0: armed
  Branch next = load;
  next.from = 0x104;
  next.to = 0x108;
  next.load_la = 0x00007FFF00000040ull;
  GuestRegs r;
  EXPECT_TRUE(ObsRegs(next, r).pmi);
  EXPECT_EQ(Mem64(kPebs + 0x00), (0x40ull << 48) | 1);
  EXPECT_EQ(Mem64(kPebs + 0x08), 0x104u);
  EXPECT_EQ(Mem64(kPebs + 0x20), 0x00007FFF00000040ull);  // memory access address
  EXPECT_EQ(Mem64(kPebs + 0x28), 0u);  // data source: ALL_LOADS records carry none
  EXPECT_EQ(Mem64(kPebs + 0x30), 0u);  // latency: load-latency records only
  EXPECT_EQ(Mem64(kPebs + 0x38), 0u);  // TSX: none
}

TEST_F(PebsIcelakeTest, MemoryInfoGroupOfALoadLatencyRecord) {
  // Perfmon v5: the load-latency event needs no LL_EN bit (Linux sets none on v5). An L3 hit:
  // a line evicted from L1D (64 sets, 12 ways) and L2 (1024 sets, 20 ways) by 20 lines 64 KB
  // apart, kept in the 12-way L3 of 81920 sets, where those lines fall in other sets.
  PebsDs(0x1000, 0x1000);
  Wr(0x3F2, 1);  // MemInfo
  Wr(0x3F1, 1);
  Wr(0x3F6, 30);
  Wr(0xC1, 0);
  Wr(0x186, 0x01CD | kEn | kAdaptive);
  Wr(0x38F, 1);
  for (uint64_t k = 0; k <= 20; k++) LoadAt(pmu_, lin_, 0x1000000 + k * 0x10000, 0x100);  // 21 x DRAM
  EXPECT_EQ(Rd(0xC1), 21u);
  Wr(0xC1, 0xFFFFFFFFFFFFull);
  LoadAt(pmu_, lin_, 0x3000000, 0x100);  // DRAM: wraps, armed
  GuestRegs r;
  LoadAt(pmu_, lin_, 0x1000000, 0x200, &r);
  ASSERT_EQ(Mem64(kDsArea + 0x28), kPebs + 0x40);
  const uint64_t rec = kPebs;
  EXPECT_EQ(Mem64(rec + 0x08), 0x200u);
  EXPECT_EQ(Mem64(rec + 0x20), 0xC1000000u);  // address
  EXPECT_EQ(Mem64(rec + 0x28), 0x04u);        // data source: L3 hit
  EXPECT_EQ(Mem64(rec + 0x30), 44u);          // latency
}

// A counter without its Adaptive_Record bit writes the basic group alone
// (20H bytes, record format 0) whatever DATA_CFG says; fixed counter 0 with
// PEBS (PEBS_ENABLE bit 32) reloads from DS 80H.
TEST_F(PebsIcelakeTest, FixedCounterWithoutAdaptiveBitWritesTheBasicGroup) {
  PebsDs(0x1000, 0x40);  // threshold: two basic records
  Reset(0x80, 0xFFFFFFFFFFFEull);
  Wr(0x3F2, 0xF);
  Wr(0x3F1, 1ull << 32);
  Wr(0x309, 0xFFFFFFFFFFFEull);
  Wr(0x38D, 0x3);  // OS|USR, no PMI, no Adaptive_Record
  Wr(0x38F, 1ull << 32);
  GuestRegs r;
  r.tsc = 77;
  EXPECT_FALSE(pmu_.WantsXmm());
  Obs(Jmp(0x100, 0x102, 0, BranchKind::kNone));  // -> 2^48 - 1
  Obs(Jmp(0x102, 0x104, 0, BranchKind::kNone));  // -> 0: overflow, armed
  EXPECT_TRUE(pmu_.WantsRegs());
  EXPECT_FALSE(ObsRegs(Jmp(0x104, 0x106, 0, BranchKind::kNone), r).pmi);  // record 1 at 0; index 20H < 40H
  EXPECT_EQ(Mem64(kPebs + 0x00), 0x20ull << 48);
  EXPECT_EQ(Mem64(kPebs + 0x08), 0x104u);
  EXPECT_EQ(Mem64(kPebs + 0x10), 1ull << 32);
  EXPECT_EQ(Mem64(kPebs + 0x18), 77u);
  EXPECT_EQ(Rd(0x309), 0xFFFFFFFFFFFEull);        // reloaded from 80H
  Obs(Jmp(0x106, 0x108, 0, BranchKind::kNone));  // -> 2^48 - 1
  Obs(Jmp(0x108, 0x10A, 0, BranchKind::kNone));  // overflow, armed
  EXPECT_TRUE(ObsRegs(Jmp(0x10A, 0x10C, 0, BranchKind::kNone), r).pmi);  // record 2: index 40H = threshold
  EXPECT_EQ(Mem64(kPebs + 0x28), 0x10Au);
  EXPECT_EQ(Mem64(kDsArea + 0x28), kPebs + 0x40);
}

// Two counters armed at the same instruction give one record naming both;
// it is adaptive because one of them (FIXED_CTR1, bit 36) asks for it. In
// 32-bit mode the GPR group has 32-bit values and R8-R15 = 0: size 20H + 90H = B0H.
TEST_F(PebsIcelakeTest, OneRecordForTwoCountersThirtyTwoBitGprs) {
  PebsDs(0x1000, 0x1000);
  Wr(0x3F2, kGprsCfg);
  Wr(0x3F1, 1u | (1ull << 33));
  Wr(0x4C1, 0xFFFFFFFFFFFFull);
  Wr(0x186, 0xC0 | kEn);  // PMC0: instructions, no Adaptive_Record
  Wr(0x30A, 0xFFFFFFFFFFFFull);
  Wr(0x38D, 0x30 | (1ull << 36));  // FIXED_CTR1 OS|USR, Adaptive_Record
  Wr(0x38F, 1u | (1ull << 33));
  GuestRegs r;
  r.rflags = 0x1000000246ull;
  for (int i = 0; i < 16; i++) r.gpr[i] = 0xAAAA000000000000ull | (0x40 + i);
  Obs(Jmp(0x100, 0x102, 0, BranchKind::kNone));  // both wrap: armed
  EXPECT_EQ(Rd(0x38E), 1u | (1ull << 33));
  EXPECT_FALSE(ObsRegs(Jmp(0x102, 0x104, 0, BranchKind::kNone), r).pmi);
  EXPECT_EQ(Mem64(kDsArea + 0x28), kPebs + 0xB0);
  EXPECT_EQ(Mem64(kPebs + 0x00), (0xB0ull << 48) | kGprsCfg);
  EXPECT_EQ(Mem64(kPebs + 0x10), 1u | (1ull << 33));
  EXPECT_EQ(Mem64(kPebs + 0x20), 0x246u);  // RFLAGS, 32 bits
  EXPECT_EQ(Mem64(kPebs + 0x28), 0x104u);  // RIP
  EXPECT_EQ(Mem64(kPebs + 0x30), 0x40u);   // RAX, 32 bits
  EXPECT_EQ(Mem64(kPebs + 0x68), 0x47u);   // RDI
  EXPECT_EQ(Mem64(kPebs + 0x70), 0u);      // R8: not in IA-32e mode
  EXPECT_EQ(Rd(0x38E), 0u);                // both overflow bits cleared by the assist
}

TEST_F(PebsSkylakeTest, FormatThreeAddsEventingIpAndApplicableCounters) {
  // Skylake: PERF_CAPABILITIES[11:8] = 3: 0xC8-byte records (SDM table 18-55;
  // Linux's struct pebs_record_skl, "same as HSW, plus TSC"), 90H = the
  // counters that caused the record, B0H = EventingIP (the instruction that
  // caused it), B8H = TX abort information (0: no TSX), C0H = the TSC.
  SetUpPebs(0xC8 * 2, 0xC8, 0);
  GuestRegs r;
  r.tsc = 0x123456789aull;
  ASSERT_TRUE(mem_.WriteLe<uint64_t>(Gpa(kPebs + 0xB8), 0xdead).ok());
  Obs(Jmp(0x100, 0x102, 0, BranchKind::kNone));
  Obs(Jmp(0x102, 0x104, 0, BranchKind::kNone));
  EXPECT_TRUE(ObsRegs(Jmp(0x104, 0x300, 0, BranchKind::kCall), r).pmi);
  EXPECT_EQ(Mem64(kDsArea + 0x28), kPebs + 0xC8);
  EXPECT_EQ(Mem64(kPebs + 0x08), 0x300u);
  EXPECT_EQ(Mem64(kPebs + 0x90), 1u);
  EXPECT_EQ(Mem64(kPebs + 0xB0), 0x104u);
  EXPECT_EQ(Mem64(kPebs + 0xB8), 0u);
  EXPECT_EQ(Mem64(kPebs + 0xC0), 0x123456789aull);
  EXPECT_EQ(Rd(0xC1), 0u);  // reset value 0
}

// Retired loads and stores (docs/pmu-model.md, "Retired loads and stores"):
// the model's events count the instructions whose Branch::mem says they read
// (bit 0) or write (bit 1) memory, once each; on Skylake D0H umask 81H/82H.
TEST_F(PebsSkylakeTest, RetiredLoadAndStoreEventsCountInstructionsWithThoseAccesses) {
  constexpr uint64_t kEn = (1u << 16) | (1u << 17) | (1u << 22);
  Wr(0x186, 0x81D0 | kEn);  // PMC0: ALL_LOADS
  Wr(0x187, 0x82D0 | kEn);  // PMC1: ALL_STORES
  Wr(0x188, 0x010B | kEn);  // PMC2: Westmere's LOADS, not an event of this model
  Wr(0x189, 0x81D0 | kEn | (1ull << 24));  // PMC3: CMASK 1: vbts counts nothing
  Wr(0x38F, 0xF);
  EXPECT_TRUE(pmu_.CountsMemoryInstructions());
  // Counted in bulk too, inside a block (not across: BranchAgnostic), with the loads and
  // stores the observer decodes: as many instructions as the counters take before they wrap.
  EXPECT_EQ(pmu_.SequentialLimit(0), (1ull << 48) - 1);
  EXPECT_FALSE(pmu_.BranchAgnostic());
  Branch plain = Jmp(0x100, 0x103, 0, BranchKind::kNone);
  Branch load = plain, store = plain, both = plain;
  load.mem = 1;
  store.mem = 2;
  both.mem = 3;  // ADD [m], r or MOVS: one load and one store instruction
  Obs(plain);
  Obs(load);
  Obs(store);
  Obs(both);
  Obs(load);
  EXPECT_EQ(Rd(0xC1), 3u);
  EXPECT_EQ(Rd(0xC2), 2u);
  EXPECT_EQ(Rd(0xC3), 0u);
  EXPECT_EQ(Rd(0xC4), 0u);
  // In bulk: 10 instructions, 4 of them load and 3 store.
  pmu_.CountSequential(10, 0, 4, 3);
  EXPECT_EQ(Rd(0xC1), 7u);
  EXPECT_EQ(Rd(0xC2), 5u);
  EXPECT_EQ(Rd(0xC3), 0u);
  // A counter 5 from its wrap limits a run to 4 instructions (each may load).
  Wr(0xC2, (1ull << 48) - 5);
  EXPECT_EQ(pmu_.SequentialLimit(0), 4u);
  // The load-latency event does not limit a run: no instruction counted in
  // bulk counts for it (a load that would have made its instruction run
  // alone: AccessOwner::kInBulk), so PMC1 still allows 4.
  Wr(0x189, 0x01CD | kEn);  // PMC3: MEM_TRANS_RETIRED.LOAD_LATENCY
  EXPECT_TRUE(pmu_.CountsLoadLatency());
  EXPECT_EQ(pmu_.SequentialLimit(0), 4u);
  Wr(0x38F, 0);
  EXPECT_FALSE(pmu_.CountsMemoryInstructions());
}

TEST(VpmuModels, RetiredLoadAndStoreEventsPerModel) {
  // Westmere: 0BH umask 01H/02H (MEM_INST_RETIRED.LOADS/STORES).
  VirtualPmu w(*FindCpuModel("westmere"));
  testing::FakePhysMemory mem(1 << 20);
  LinearMemory lin(mem, PagingRegs{});
  ASSERT_FALSE(w.WriteMsr(0x186, 0x020B | (1u << 16) | (1u << 22)).gp);  // STORES, ring 3 only
  ASSERT_FALSE(w.WriteMsr(0x38F, 1).gp);
  Branch store;
  store.from = 0x100;
  store.to = 0x102;
  store.mem = 2;
  store.cpl_from = store.cpl_to = 0;
  ASSERT_TRUE(w.Observe(store, lin, false).ok());  // ring 0: not counted
  store.cpl_from = store.cpl_to = 3;
  ASSERT_TRUE(w.Observe(store, lin, false).ok());
  EXPECT_EQ(w.ReadMsr(0xC1).value, 1u);
  // Core Duo has no such event vbts counts.
  VirtualPmu c(*FindCpuModel("core-duo"));
  ASSERT_FALSE(c.WriteMsr(0x186, 0x020B | (1u << 16) | (1u << 22)).gp);
  EXPECT_FALSE(c.CountsMemoryInstructions());
}

// A PEBS record of ALL_STORES holds the store's linear address at 98H
// (format 3, DataLA), of ALL_LOADS the load's.
TEST_F(PebsSkylakeTest, RetiredStoreRecordHoldsTheDataLinearAddress) {
  SetUpPebs(0xC8 * 4, 0xC8 * 3, 0xFFFFFFFFFFFEull);  // PMC0 counts INST_RETIRED; replaced below
  Wr(0x38F, 0);
  Wr(0x186, 0x82D0 | (1u << 16) | (1u << 17) | (1u << 22));  // ALL_STORES
  Wr(0xC1, 0xFFFFFFFFFFFEull);
  Wr(0x38F, 1);
  GuestRegs r;
  Branch store = Jmp(0x100, 0x104, 0, BranchKind::kNone);
  store.mem = 2;
  store.store_la = 0x5008;
  Branch load = Jmp(0x104, 0x107, 0, BranchKind::kNone);
  load.mem = 1;
  load.load_la = 0x6000;
  Obs(store);  // -> 2^48 - 1
  Obs(load);   // not a store: no count
  Obs(store);  // -> 0: overflow, armed
  EXPECT_TRUE(pmu_.WantsRegs());
  Obs(load);   // a load is not this counter's event: no assist
  EXPECT_EQ(Mem64(kDsArea + 0x28), kPebs);
  Branch rmw = store;
  rmw.from = 0x200;
  rmw.to = 0x203;
  rmw.mem = 3;
  rmw.load_la = rmw.store_la = 0x7010;
  // The next store: the assist. Its operand is read, then written (as the engines report a
  // read-modify-write access): the load brings the line into the L1D, so the store hits it.
  pmu_.ObserveDataAccess(0x7010, 4, 0, VirtualPmu::DataAccessKind::kLoad);
  pmu_.ObserveDataAccess(0x7010, 4, 0, VirtualPmu::DataAccessKind::kStore);
  ObsRegs(rmw, r);
  EXPECT_EQ(Mem64(kDsArea + 0x28), kPebs + 0xC8);
  EXPECT_EQ(Mem64(kPebs + 0x98), 0x7010u);  // data linear address
  EXPECT_EQ(Mem64(kPebs + 0xA0), 1u);       // data source bit 0: the store hit the L1D
  EXPECT_EQ(Mem64(kPebs + 0xA8), 0u);       // latency: load-latency records only
  EXPECT_EQ(Mem64(kPebs + 0xB0), 0x200u);   // EventingIP
  // Wrapped again (reset 2^48 - 2: two stores), then a store to a cold line: bit 0 clear.
  for (uint64_t k = 0; k < 2; k++) {
    pmu_.ObserveDataAccess(0x7010, 4, 0, VirtualPmu::DataAccessKind::kStore);
    Obs(store);
  }
  pmu_.ObserveDataAccess(0x9000, 4, 0, VirtualPmu::DataAccessKind::kStore);
  store.store_la = 0x9000;
  ObsRegs(store, r);
  EXPECT_EQ(Mem64(kDsArea + 0x28), kPebs + 2 * 0xC8);
  EXPECT_EQ(Mem64(kPebs + 0xC8 + 0x98), 0x9000u);
  EXPECT_EQ(Mem64(kPebs + 0xC8 + 0xA0), 0u);  // an L1D miss
}

TEST_F(PebsSkylakeTest, LoadLatencyRecordHoldsSkylakesDramEncoding) {
  // MEM_TRANS_RETIRED.LOAD_LATENCY (CDH/01H), format 3: DRAM is 0AH (Skylake's encoding).
  SetUpPebs(0xC8 * 4, 0xC8 * 4, 0xFFFFFFFFFFFFull);
  Wr(0x38F, 0);
  Wr(0x186, 0x01CD | (1u << 16) | (1u << 17) | (1u << 22));
  Wr(0xC1, 0xFFFFFFFFFFFFull);
  Wr(0x3F1, 1 | (1ull << 32));
  Wr(0x3F6, 3);  // the minimum: every load counts (L1D 4 > 3)
  Wr(0x38F, 1);
  GuestRegs r;
  LoadAt(pmu_, lin_, 0x200000, 0x100);  // wraps
  LoadAt(pmu_, lin_, 0x200000, 0x103, &r);  // L1D hit: an event at threshold 3: the assist
  EXPECT_EQ(Mem64(kPebs + 0x98), 0xC0200000u);
  EXPECT_EQ(Mem64(kPebs + 0xA0), 0x01u);  // L1D hit
  EXPECT_EQ(Mem64(kPebs + 0xA8), 4u);
  LoadAt(pmu_, lin_, 0x300000, 0x106, &r);  // reset 2^48 - 1: wraps again
  LoadAt(pmu_, lin_, 0x400000, 0x109, &r);
  EXPECT_EQ(Mem64(kPebs + 0xC8 + 0xA0), 0x0Au);
  EXPECT_EQ(Mem64(kPebs + 0xC8 + 0xA8), 200u);
  EXPECT_EQ(Mem64(kPebs + 0xC8 + 0xB0), 0x109u);  // EventingIP
}

TEST_F(PebsSkylakeTest, WrmsrIsAPebsEventOnlyWhenItLeavesTheCounterCounting) {
  // PMC0 from 2^48 - 2, reset 2^48 - 1, room and threshold 4 records (no PMI).
  SetUpPebs(0xC8 * 4, 0xC8 * 4, 0xFFFFFFFFFFFFull);
  GuestRegs r;
  r.gpr[0] = 0xAA;
  Wrmsr(0x38F, 0, 0x500);  // disables PMC0: not counted, 2^48 - 2
  EXPECT_EQ(Rd(0xC1), 0xFFFFFFFFFFFEull);
  Wrmsr(0x38F, 1, 0x510);  // enables it: counted, 2^48 - 1
  EXPECT_EQ(Rd(0xC1), 0xFFFFFFFFFFFFull);
  Obs(Jmp(0x520, 0x522, 0, BranchKind::kNone));  // wraps: armed
  EXPECT_TRUE(pmu_.WantsRegs());
  // The next event is a WRMSR (of PMC1): the assist follows it, EventingIP = the WRMSR.
  Wr(0xC2, 5);
  EXPECT_FALSE(ObsRegs(Jmp(0x530, 0x532, 0, BranchKind::kNone), r).pmi);
  EXPECT_EQ(Mem64(kDsArea + 0x28), kPebs + 0xC8);
  EXPECT_EQ(Mem64(kPebs + 0x08), 0x532u);  // RIP: the instruction after the WRMSR
  EXPECT_EQ(Mem64(kPebs + 0x10), 0xAAu);
  EXPECT_EQ(Mem64(kPebs + 0xB0), 0x530u);  // EventingIP: the WRMSR
  EXPECT_EQ(Rd(0xC1), 0xFFFFFFFFFFFFull);  // reloaded
  // Armed again by the next instruction; the WRMSR that then disables PMC0 is no
  // event: no record, PEBS stays armed, the overflow bit stays.
  Obs(Jmp(0x540, 0x542, 0, BranchKind::kNone));
  EXPECT_TRUE(pmu_.WantsRegs());
  Wr(0x38F, 0);
  EXPECT_FALSE(ObsRegs(Jmp(0x550, 0x552, 0, BranchKind::kNone), r).pmi);
  EXPECT_EQ(Mem64(kDsArea + 0x28), kPebs + 0xC8);
  EXPECT_TRUE(pmu_.WantsRegs());
  EXPECT_EQ(Rd(0x38E), 1u);
  EXPECT_EQ(Rd(0xC1), 0u);
  EXPECT_EQ(pmu_.stats().pebs_records, 1u);
}

TEST_F(PebsSkylakeTest, WrmsrThatUnfreezesTheCountersIsCounted) {
  // Perfmon v4: a PMI with FREEZE_PERFMON_ON_PMI sets GLOBAL_STATUS.CTR_FRZ (bit 59).
  // Here the enabling WRMSR itself wraps PMC0 (-1) and freezes the counters; the
  // WRMSR of GLOBAL_STATUS_RESET (390H) that clears CTR_FRZ leaves them counting:
  // it is counted.
  Wr(0xC1, 0xFFFFFFFF);
  Wr(0x186, 0xC0 | (1u << 17) | (1u << 20) | (1u << 22));
  Wr(0x1D9, kFreezePerfmon);
  EXPECT_TRUE(Wrmsr(0x38F, 1).pmi);
  EXPECT_EQ(Rd(0x38E), 1u | (1ull << 59));
  Obs(Jmp(0x502, 0x504, 0, BranchKind::kNone));  // frozen: not counted
  EXPECT_EQ(Rd(0xC1), 0u);
  Wrmsr(0x390, 1u | (1ull << 59), 0x504);
  EXPECT_EQ(Rd(0x38E), 0u);
  EXPECT_EQ(Rd(0xC1), 1u);
}

class CoreDuoTest : public VpmuTest {
 protected:
  CoreDuoTest() : VpmuTest("core-duo") {}
};

// --- Offcore responses (docs/pmu-model.md, "Offcore responses"): OFFCORE_RESPONSE_0/1
// count the demand requests that miss the model's L2, filtered by MSR_OFFCORE_RSP_0/1.
TEST_F(PebsSkylakeTest, OffcoreResponseCountsDemandRequestsThatLeaveTheCore) {
  using Kind = VirtualPmu::DataAccessKind;
  // Linux's LLC-loads and LLC-load-misses (skl_hw_cache_extra_regs): DMND_DATA_RD with
  // ANY_RESPONSE and any snoop; DMND_DATA_RD with the L3-miss suppliers, SUPPLIER_NONE, any snoop.
  const uint64_t kAccess = 0x3FC0010001ull, kMiss = 0x3FFC020001ull;
  EXPECT_TRUE(pmu_.WriteMsr(0x1A6, 1ull << 12).gp);  // reserved (Linux's mask 0x3FFFFF8FFF)
  Wr(0x1A6, kAccess);
  Wr(0x1A7, kMiss);
  EXPECT_EQ(Rd(0x1A6), kAccess);
  Wr(0x186, 0x01B7 | (1u << 16) | (1u << 17) | (1u << 22));
  Wr(0x187, 0x01BB | (1u << 16) | (1u << 17) | (1u << 22));
  Wr(0x38F, 3);
  EXPECT_TRUE(pmu_.WantsDataAccesses());
  auto load = [&](uint64_t pa) { pmu_.ObserveDataAccess(pa, 4, 0, Kind::kLoad); };
  load(0x100000);  // cold: misses L2 and L3
  EXPECT_EQ(Rd(0xC1), 1u);
  EXPECT_EQ(Rd(0xC2), 1u);
  load(0x100000);  // in the L2 (and L1D): stays in the core
  load(0x100040);  // its pair, prefetched into the L2
  pmu_.ObserveDataAccess(0x900000, 4, 0, Kind::kStore);  // an RFO, not a demand data read
  EXPECT_EQ(Rd(0xC1), 1u);
  EXPECT_EQ(Rd(0xC2), 1u);
  // Four lines 64 KB apart share 0x100000's set of the 4-way L2 (1024 sets) and push it
  // out; the 16-way L3 (8192 sets) keeps it: an L3 hit, an access and not a miss.
  for (uint64_t k = 1; k <= 4; k++) load(0x100000 + k * 0x10000);
  EXPECT_EQ(Rd(0xC1), 5u);
  EXPECT_EQ(Rd(0xC2), 5u);
  load(0x100000);
  EXPECT_EQ(Rd(0xC1), 6u);
  EXPECT_EQ(Rd(0xC2), 5u);
  // DMND_RFO with ANY_RESPONSE counts the store that leaves the core.
  Wr(0x1A7, (1ull << 1) | (1ull << 16));
  pmu_.ObserveDataAccess(0xA00000, 4, 0, Kind::kStore);
  EXPECT_EQ(Rd(0xC2), 6u);
  // Without ANY_RESPONSE, a supplier and a snoop must both match: L3_HIT_E alone does not.
  Wr(0x1A6, 1 | (1ull << 19));
  for (uint64_t k = 1; k <= 4; k++) load(0x200000 + k * 0x10000);
  load(0x200000 + 0x10000);  // still in the L2: no request
  EXPECT_EQ(Rd(0xC1), 6u);
}

TEST_F(PebsTest, OffcoreResponseWestmereLayout) {
  // Nehalem/Westmere (SDM 30.6.1.3 in Linux's citation): response bits 15:8; an L3 hit is
  // UNCORE_HIT (8), a miss LOCAL_DRAM (14).
  using Kind = VirtualPmu::DataAccessKind;
  Wr(0x1A6, 0x0101);  // DMND_DATA_RD, UNCORE_HIT: L3 hits only
  Wr(0x1A7, 0x4001);  // DMND_DATA_RD, LOCAL_DRAM: L3 misses only
  EXPECT_TRUE(pmu_.WriteMsr(0x1A6, 1ull << 16).gp);
  Wr(0x186, 0x01B7 | (1u << 17) | (1u << 22));  // OS: the accesses below are at CPL 0
  Wr(0x187, 0x01BB | (1u << 17) | (1u << 22));
  Wr(0x38F, 3);
  // Westmere's L2: 512 sets, 8 ways: nine lines 32 KB apart evict the first; its L3 keeps it.
  for (uint64_t k = 0; k <= 8; k++) pmu_.ObserveDataAccess(0x100000 + k * 0x8000, 4, 0, Kind::kLoad);
  EXPECT_EQ(Rd(0xC1), 0u);
  EXPECT_EQ(Rd(0xC2), 9u);
  pmu_.ObserveDataAccess(0x100000, 4, 0, Kind::kLoad);
  EXPECT_EQ(Rd(0xC1), 1u);
  EXPECT_EQ(Rd(0xC2), 9u);
}

TEST_F(CoreDuoTest, NoLoadLatencyFacility) {
  EXPECT_TRUE(pmu_.ReadMsr(0x3F6).gp);
  EXPECT_TRUE(pmu_.WriteMsr(0x3F6, 3).gp);
  EXPECT_TRUE(pmu_.ReadMsr(0x1A6).gp);  // nor offcore responses
  EXPECT_TRUE(pmu_.WriteMsr(0x1A7, 1).gp);
}

TEST_F(CoreDuoTest, ThirtyTwoBitDsFormatAndPackedLbrs) {
  // No DTES64: 4-byte fields, 12-byte records (SDM 17.4.9.2, figure 17-5).
  ASSERT_TRUE(mem_.WriteLe<uint32_t>(Gpa(kDsArea), kBuf).ok());
  ASSERT_TRUE(mem_.WriteLe<uint32_t>(Gpa(kDsArea + 4), kBuf).ok());
  ASSERT_TRUE(mem_.WriteLe<uint32_t>(Gpa(kDsArea + 8), kBuf + 36).ok());
  ASSERT_TRUE(mem_.WriteLe<uint32_t>(Gpa(kDsArea + 12), kBuf + 36).ok());
  Wr(0x600, kDsArea);
  Wr(0x1D9, kTrBts | kLbr);
  Obs(Jmp(0x1111, 0x2222));
  Obs(Jmp(0x3333, 0x4444));
  EXPECT_EQ(Mem32(kDsArea + 4), kBuf + 24);
  EXPECT_EQ(Mem32(kBuf + 12), 0x3333u);
  EXPECT_EQ(Mem32(kBuf + 16), 0x4444u);
  EXPECT_EQ(Mem32(kBuf + 20), 0u);
  // MSR_LASTBRANCH_n at 40H: TO in 63:32, FROM in 31:0; 8 entries.
  EXPECT_EQ(Rd(0x1C9), 2u);
  EXPECT_EQ(Rd(0x40 + 2), 0x0000444400003333ull);
  // No PERF_CAPABILITIES (no PDCM), no freeze bits, perfmon v1: no GLOBAL_CTRL.
  EXPECT_TRUE(pmu_.ReadMsr(0x345).gp);
  EXPECT_TRUE(pmu_.WriteMsr(0x1D9, kFreezeLbrs).gp);
  EXPECT_TRUE(pmu_.ReadMsr(0x38F).gp);
  EXPECT_TRUE(pmu_.ReadMsr(0x680).gp);
}

class Pentium4Test : public VpmuTest {
 protected:
  Pentium4Test() : VpmuTest("pentium4") {}
};

// MSR_DEBUGCTLA (SDM vol. 3B 17.12.1, figure 17-22): LBR 0, BTF 1, TR 2,
// BTS 3, BTINT 4, BTS_OFF_OS 5, BTS_OFF_USR 6; everything above is reserved.
TEST_F(Pentium4Test, DebugCtlaHasNetBurstLayout) {
  constexpr uint64_t kTrA = 1u << 2, kBtsA = 1u << 3, kBtintA = 1u << 4, kOffOsA = 1u << 5;
  ASSERT_TRUE(mem_.WriteLe<uint32_t>(Gpa(kDsArea), kBuf).ok());
  ASSERT_TRUE(mem_.WriteLe<uint32_t>(Gpa(kDsArea + 4), kBuf).ok());
  ASSERT_TRUE(mem_.WriteLe<uint32_t>(Gpa(kDsArea + 8), kBuf + 36).ok());
  ASSERT_TRUE(mem_.WriteLe<uint32_t>(Gpa(kDsArea + 12), kBuf + 24).ok());  // threshold: 2 records
  Wr(0x600, kDsArea);
  Wr(0x1D9, kTrA | kBtsA | kBtintA | kLbr);
  EXPECT_EQ(Rd(0x1D9), kTrA | kBtsA | kBtintA | kLbr);  // reads back in its own layout
  // Core's TR|BTS (bits 6, 7) and the freeze bits are reserved here: #GP.
  EXPECT_TRUE(pmu_.WriteMsr(0x1D9, kTrBts).gp);
  EXPECT_TRUE(pmu_.WriteMsr(0x1D9, kFreezeLbrs).gp);
  // BTS in interrupt mode with 12-byte records: two jumps reach the
  // threshold (base + 24) with the second record: one PMI.
  EXPECT_FALSE(Obs(Jmp(0x1111, 0x2222)).pmi);
  EXPECT_TRUE(Obs(Jmp(0x3333, 0x4444)).pmi);
  EXPECT_EQ(Mem32(kDsArea + 4), kBuf + 24);
  EXPECT_EQ(Mem32(kBuf + 12), 0x3333u);
  EXPECT_EQ(Mem32(kBuf + 16), 0x4444u);
  // LBRs: 16 entries at 680H/6C0H, TOS at 1DAH (not 1C9H).
  EXPECT_EQ(Rd(0x1DA), 2u);
  EXPECT_EQ(Rd(0x680 + 2), 0x3333u);
  EXPECT_EQ(Rd(0x6C0 + 2), 0x4444u);
  EXPECT_TRUE(pmu_.ReadMsr(0x1C9).gp);
  // BTS_OFF_OS: a transfer into ring 0 is not stored (DS-CPL, 17.12.1).
  Wr(0x1D9, kTrA | kBtsA | kOffOsA);
  EXPECT_EQ(Rd(0x1D9), kTrA | kBtsA | kOffOsA);
  // No architectural perfmon and no PERF_CAPABILITIES.
  EXPECT_TRUE(pmu_.ReadMsr(0xC1).gp);
  EXPECT_TRUE(pmu_.ReadMsr(0x345).gp);
}

TEST_F(Pentium4Test, LerIsAt1D7And1D8) {
  Wr(0x1D9, kLbr);
  Obs(Jmp(0x1000, 0x2000));
  Obs(Jmp(0x2000, 0x9000, 0, BranchKind::kInterrupt));
  EXPECT_EQ(Rd(0x1D7), 0x1000u);  // the last branch before the interrupt
  EXPECT_EQ(Rd(0x1D8), 0x2000u);
  EXPECT_TRUE(pmu_.WriteMsr(0x1D7, 0).gp);  // read-only
}

TEST(VpmuModelsTest, WithoutPmuHidesEverything) {
  CpuModel m = FindCpuModel("westmere")->WithoutPmu();
  EXPECT_EQ(m.Cpuid(1, 0).edx & kCpuid1EdxDs, 0u);
  EXPECT_EQ(m.Cpuid(1, 0).ecx & (kCpuid1EcxDtes64 | kCpuid1EcxDsCpl | kCpuid1EcxPdcm), 0u);
  EXPECT_EQ(m.Cpuid(0xA, 0), CpuidResult{});
  VirtualPmu p(m);
  EXPECT_TRUE(p.WriteMsr(0x1D9, 1).gp);
  EXPECT_TRUE(p.ReadMsr(0x600).gp);
  EXPECT_TRUE(p.ReadMsr(0xC1).gp);
  MsrResult misc = p.ReadMsr(0x1A0);
  EXPECT_FALSE(misc.gp);
  EXPECT_EQ(misc.value & ((1u << 7) | (1u << 11) | (1u << 12)), (1u << 11) | (1u << 12));
}

TEST(VpmuModelsTest, SkylakeGeometry) {
  VirtualPmu p(*FindCpuModel("skylake"));
  EXPECT_FALSE(p.ReadMsr(0x69F).gp);  // FROM_31
  EXPECT_FALSE(p.ReadMsr(0xDDF).gp);  // LBR_INFO_31
  EXPECT_FALSE(p.WriteMsr(0x4C1, 0xFFFFFFFFFFFFull).gp);  // full-width write (PERF_CAPABILITIES[13])
  EXPECT_EQ(p.ReadMsr(0xC1).value, 0xFFFFFFFFFFFFull);
  EXPECT_EQ(FindCpuModel("skylake")->Cpuid(0xA, 0).eax & 0xFF, 4u);
}

TEST(VpmuModelsTest, RdpmcReadsTheCountersTheModelHas) {
  // SDM vol. 2B RDPMC: ECX[30] = 1 selects fixed counter ECX[29:0], else a
  // general-purpose counter; an index beyond CPUID.0AH's counts is #GP.
  // Westmere (pmu/cpu_model.cc): 4 general-purpose, 3 fixed counters.
  VirtualPmu p(*FindCpuModel("westmere"));
  ASSERT_FALSE(p.WriteMsr(0xC3, 0x1234).gp);   // PMC2
  ASSERT_FALSE(p.WriteMsr(0x30A, 0x5678).gp);  // FIXED_CTR1
  EXPECT_EQ(p.ReadPmc(2).value, 0x1234u);
  EXPECT_FALSE(p.ReadPmc(2).gp);
  EXPECT_EQ(p.ReadPmc((1u << 30) | 1).value, 0x5678u);
  EXPECT_TRUE(p.ReadPmc(4).gp);
  EXPECT_TRUE(p.ReadPmc((1u << 30) | 3).gp);
  EXPECT_TRUE(p.ReadPmc(64).gp);
  EXPECT_TRUE(p.ReadPmc(1u << 31).gp);
}

// What may start counting (the engine then keeps its code hook lingering:
// Machine::WriteMsr).  Linux 6.1's boot on skylake writes, in this order,
// PMC3 = 0xFFFF (check_hw_exists), the LBR MSRs = 0, DEBUGCTL = 0x4000,
// DS_AREA, GLOBAL_CTRL = 0 and GLOBAL_CTRL = 0x70000000F (all enabled, no
// event select on): none of them arms a counter.
TEST(VpmuCounting, OnlyArmingWritesMayStartCounting) {
  VirtualPmu p(*FindCpuModel("skylake"));
  const auto write = [&](uint32_t msr, uint64_t v) {
    EXPECT_FALSE(p.WriteMsr(msr, v).gp) << std::hex << msr;
    return p.MayStartCounting(msr, v);
  };
  EXPECT_FALSE(write(0x4C4, 0xFFFF));               // a counter's value
  EXPECT_FALSE(write(0x680, 0));                    // LBR FROM 0
  EXPECT_FALSE(write(0x1D9, 0x4000));               // DEBUGCTL.FREEZE_WHILE_SMM
  EXPECT_FALSE(write(0x600, 0xFFFFFE000001B000));   // DS_AREA
  EXPECT_FALSE(write(0x38F, 0));
  EXPECT_TRUE(p.DisablesAll(0x38F, 0));             // perf's disable
  EXPECT_FALSE(p.DisablesAll(0x38F, 1));
  EXPECT_FALSE(write(0x38F, 0x70000000F));          // enables counters whose selects are off
  EXPECT_FALSE(write(0x186, 0xC0));                 // INST_RETIRED without EN
  EXPECT_TRUE(write(0x186, 0xC0 | (1u << 22)));     // ... with EN: armed (and GLOBAL_CTRL has bit 0: counts)
  EXPECT_TRUE(write(0xC1, 5));                      // anything while a counter counts
  EXPECT_FALSE(write(0x38F, 0));                    // disabled: nothing counts after it
  EXPECT_TRUE(p.DisablesAll(0x38F, 0));
  EXPECT_FALSE(write(0xC1, 0));                     // a value while nothing counts
  EXPECT_TRUE(write(0x38D, 0xB));                   // FIXED_CTR_CTRL: fixed counter 0 (OS, USR, PMI)
  // Core Duo (architectural perfmon v1: no GLOBAL_CTRL): only its selects arm.
  VirtualPmu c(*FindCpuModel("core-duo"));
  EXPECT_TRUE(c.MayStartCounting(0x186, 1u << 22));
  EXPECT_FALSE(c.DisablesAll(0x38F, 0));
  // NetBurst: a CCCR with its enable bit (12); its disable is per CCCR.
  VirtualPmu nb(*FindCpuModel("pentium4"));
  EXPECT_TRUE(nb.MayStartCounting(0x360, 1u << 12));
  EXPECT_FALSE(nb.MayStartCounting(0x360, 0));
  EXPECT_FALSE(nb.DisablesAll(0x38F, 0));
}

}  // namespace
}  // namespace vbts::pmu
