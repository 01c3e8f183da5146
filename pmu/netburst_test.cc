// Unit tests of NetBurst's performance counters on the `pentium4` model
// (SDM vol. 3B, "Performance Monitoring (Processors Based on Intel NetBurst
// Microarchitecture)"; docs/pmu-model.md, "NetBurst performance counters").
// Each expected value is derived in the comment above it.
#include <gtest/gtest.h>

#include <random>

#include "pmu/netburst.h"
#include "pmu/testing/fake_memory.h"
#include "pmu/vpmu.h"

namespace vbts::pmu {
namespace {

// MSRs (the table of performance counter MSRs and their CCCRs and ESCRs).
constexpr uint32_t kIqCounter0 = 0x30C, kIqCounter2 = 0x30E;  // counters 12, 14
constexpr uint32_t kIqCccr0 = 0x36C, kIqCccr2 = 0x36E;
constexpr uint32_t kCruEscr0 = 0x3B8, kCruEscr1 = 0x3B9, kCruEscr2 = 0x3CC;
constexpr uint64_t kMask40 = (1ull << 40) - 1;

// ESCR: event select 30:25, event mask 24:9, T0_OS 3, T0_USR 2.
constexpr uint64_t Escr(uint64_t event, uint64_t mask, bool os, bool usr) {
  return (event << 25) | (mask << 9) | (os ? 8 : 0) | (usr ? 4 : 0);
}
// CCCR: Enable 12, ESCR select 15:13, active thread 17:16 = 11B, OVF_PMI 26.
constexpr uint64_t Cccr(uint64_t select, bool pmi = false) {
  return (1ull << 12) | (select << 13) | (3ull << 16) | (pmi ? (1ull << 26) : 0);
}
constexpr uint64_t kOvf = 1ull << 31;

// instr_retired (02H) with NBOGUSNTAG at CPL 0: 0x04000000 | 0x200 | 0x8 = 0x04000208.
constexpr uint64_t kInstrOs = Escr(0x02, 1, true, false);
static_assert(kInstrOs == 0x04000208);
// IQ_CCCR with CRU_ESCR0/1 (select 4) and OVF_PMI: 0x1000 | 0x8000 | 0x30000 | 0x4000000 = 0x04039000.
static_assert(Cccr(4, true) == 0x04039000);

class NetBurstTest : public ::testing::Test {
 protected:
  NetBurstTest() : pmu_(*FindCpuModel("pentium4")), mem_(1 << 16), lin_(mem_, PagingRegs{}) {}

  void Wr(uint32_t msr, uint64_t v) { ASSERT_FALSE(pmu_.WriteMsr(msr, v).gp) << std::hex << msr; }
  uint64_t Rd(uint32_t msr) {
    MsrResult r = pmu_.ReadMsr(msr);
    EXPECT_FALSE(r.gp) << std::hex << msr;
    return r.value;
  }
  static Branch Insn(uint8_t cpl = 0, BranchKind k = BranchKind::kNone, bool branch = false) {
    Branch b;
    b.kind = k;
    b.from = 0x1000;
    b.to = 0x1002;
    b.cpl_from = b.cpl_to = cpl;
    b.branch_insn = branch || k != BranchKind::kNone;
    return b;
  }
  static Branch NotTakenJcc(uint8_t cpl = 0) { return Insn(cpl, BranchKind::kNone, true); }
  bool Obs(const Branch& b) {  // true: a PMI is requested
    absl::StatusOr<PmuEffects> fx = pmu_.Observe(b, lin_, false);
    EXPECT_TRUE(fx.ok()) << fx.status();
    return fx.ok() && fx->pmi;
  }

  VirtualPmu pmu_;
  testing::FakePhysMemory mem_;
  LinearMemory lin_;
};

TEST_F(NetBurstTest, EveryMsrOfTheFacilityReadsAndWritesAsTheSdmSays) {
  // 18 counters (300H-311H) and 18 CCCRs (360H-371H), 0 after reset.
  for (uint32_t i = 0; i < 18; i++) {
    EXPECT_EQ(Rd(0x300 + i), 0u);
    EXPECT_EQ(Rd(0x360 + i), 0u);
  }
  // 43 ESCRs in 3A0H-3E1H on 0F_03H: 3A0H-3B9H (26), RAT0/1, SSU0 (3BCH-3BEH),
  // MS/TBPU/TC 0/1 (3C0H-3C5H), IX, ALF, CRU2/3 (3C8H-3CDH), CRU4/5 (3E0H-3E1H):
  // 26 + 3 + 6 + 6 + 2 = 43; the other 23 addresses of the 66 (3BAH, 3BBH: IQ_ESCR0/1
  // of models 01H-02H only; 3BFH, 3C6H, 3C7H, 3CEH-3DFH) #GP.
  int present = 0;
  for (uint32_t msr = 0x3A0; msr <= 0x3E1; msr++) {
    const bool has = netburst::FindEscr(msr) != nullptr;
    present += has;
    EXPECT_EQ(pmu_.ReadMsr(msr).gp, !has) << std::hex << msr;
    EXPECT_EQ(pmu_.WriteMsr(msr, 0).gp, !has) << std::hex << msr;
  }
  EXPECT_EQ(present, 43);
  for (uint32_t msr : {0x3BAu, 0x3BBu, 0x3BFu, 0x3C6u, 0x3C7u, 0x3CEu, 0x3DFu}) EXPECT_TRUE(pmu_.ReadMsr(msr).gp);
  // ESCR: bits 30:2 read back; 1:0 (T1 flags, no HT), 31, 63:32 reserved: #GP.
  Wr(kCruEscr0, 0x7FFFFFFC);
  EXPECT_EQ(Rd(kCruEscr0), 0x7FFFFFFCu);
  for (uint64_t bad : {1ull, 2ull, 1ull << 31, 1ull << 32}) EXPECT_TRUE(pmu_.WriteMsr(kCruEscr0, bad).gp) << bad;
  EXPECT_EQ(Rd(kCruEscr0), 0x7FFFFFFCu);
  // CCCR: bits 12-26, 30, 31 read back (0xC7FFF000); 11:0, 29:27, 63:32 reserved;
  // bit 11 (extended cascading) on the IQ CCCRs only.
  Wr(0x360, 0xC7FFF000);
  EXPECT_EQ(Rd(0x360), 0xC7FFF000u);
  for (uint64_t bad : {1ull, 1ull << 11, 1ull << 27, 1ull << 28, 1ull << 29, 1ull << 32})
    EXPECT_TRUE(pmu_.WriteMsr(0x360, bad).gp) << bad;
  Wr(kIqCccr0, 1ull << 11);
  EXPECT_EQ(Rd(kIqCccr0), 1ull << 11);
  // Counters are 40 bits: EDX:EAX = FFFFFFFFH:FFFFFFF6H (-10) keeps bits 39:0 = FF_FFFF_FFF6H.
  Wr(kIqCounter0, 0xFFFFFFFFFFFFFFF6ull);
  EXPECT_EQ(Rd(kIqCounter0), 0xFFFFFFFFF6ull);
  // No architectural counters on this model.
  EXPECT_TRUE(pmu_.ReadMsr(0xC1).gp);
  EXPECT_TRUE(pmu_.ReadMsr(0x38F).gp);
}

TEST(NetBurstModelsTest, OtherModelsGpOnNetBurstMsrs) {
  for (const char* name : {"westmere", "core-duo", "skylake", "icelake-server"}) {
    VirtualPmu p(*FindCpuModel(name));
    // Intercepted on every model: the answer is vbts's on both engines.
    for (uint32_t msr : {0x300u, 0x308u, 0x30Fu, 0x311u, 0x360u, 0x36Cu, 0x371u, 0x3A0u, 0x3B8u, 0x3CCu, 0x3E1u}) {
      EXPECT_TRUE(p.Owns(msr)) << name << " " << std::hex << msr;
      EXPECT_TRUE(p.ReadMsr(msr).gp) << name << " " << std::hex << msr;
      EXPECT_TRUE(p.WriteMsr(msr, 0).gp) << name << " " << std::hex << msr;
    }
  }
  // 309H-30BH are westmere's fixed counters, not NetBurst's FLAME counters.
  VirtualPmu w(*FindCpuModel("westmere"));
  EXPECT_FALSE(w.WriteMsr(0x309, 5).gp);
  EXPECT_EQ(w.ReadMsr(0x309).value, 5u);
  // --vpmu=off hides the NetBurst counters too.
  const CpuModel p4_off = FindCpuModel("pentium4")->WithoutPmu();  // VirtualPmu keeps a reference to its model
  VirtualPmu off(p4_off);
  EXPECT_TRUE(off.ReadMsr(0x30C).gp);
  EXPECT_TRUE(off.WriteMsr(kCruEscr0, 0).gp);
}

TEST_F(NetBurstTest, InstrRetiredOverflowsAtZeroAndInterruptsOnTheNextEvent) {
  // IQ_COUNTER0 from -3 counts instr_retired at CPL 0 with OVF_PMI.
  Wr(kCruEscr0, kInstrOs);
  Wr(kIqCounter0, kMask40 - 2);  // -3
  EXPECT_FALSE(pmu_.NeedsObservation());
  Wr(kIqCccr0, Cccr(4, true));
  EXPECT_TRUE(pmu_.NeedsObservation());
  // Instructions 1, 2: -2, -1.  Instruction 3 wraps to 0: OVF set, no PMI yet
  // ("the PMI is generated on the next event count after the counter has overflowed").
  EXPECT_FALSE(Obs(Insn()));
  EXPECT_FALSE(Obs(Insn()));
  EXPECT_FALSE(Obs(Insn()));
  EXPECT_EQ(Rd(kIqCounter0), 0u);
  EXPECT_EQ(Rd(kIqCccr0), Cccr(4, true) | kOvf);
  // Instructions at CPL 3 are not counted (T0_USR clear): no event, no PMI.
  EXPECT_FALSE(Obs(Insn(3)));
  EXPECT_EQ(Rd(kIqCounter0), 0u);
  // Instruction 4 (the next event): counter 1 and the PMI.
  EXPECT_TRUE(Obs(Insn()));
  EXPECT_EQ(Rd(kIqCounter0), 1u);
  // OVF is sticky: still set; no further PMI until the next overflow.
  EXPECT_FALSE(Obs(Insn()));
  EXPECT_EQ(Rd(kIqCounter0), 2u);
  EXPECT_NE(Rd(kIqCccr0) & kOvf, 0u);
  Wr(kIqCccr0, Cccr(4, true));  // software clears OVF
  EXPECT_EQ(Rd(kIqCccr0) & kOvf, 0u);
  // Event deliveries are not instructions.
  Obs(Insn(0, BranchKind::kInterrupt));
  EXPECT_EQ(Rd(kIqCounter0), 2u);
}

TEST_F(NetBurstTest, PmiNeedsOvfPmiAndAReloadCancelsThePendingOne) {
  Wr(kCruEscr0, kInstrOs);
  Wr(kIqCounter0, kMask40);  // -1
  Wr(kIqCccr0, Cccr(4, false));
  EXPECT_FALSE(Obs(Insn()));  // wraps: OVF
  EXPECT_FALSE(Obs(Insn()));  // next event: OVF_PMI clear, no PMI
  EXPECT_EQ(Rd(kIqCccr0), Cccr(4, false) | kOvf);
  Wr(kIqCccr0, Cccr(4, true));
  Wr(kIqCounter0, kMask40);
  EXPECT_FALSE(Obs(Insn()));     // wraps
  Wr(kIqCounter0, kMask40 - 1);  // reloaded (-2) before the next event: nothing pending
  EXPECT_FALSE(Obs(Insn()));     // -1
  EXPECT_FALSE(Obs(Insn()));     // wraps again
  EXPECT_TRUE(Obs(Insn()));      // next event: PMI
}

TEST_F(NetBurstTest, InstrRetiredMasksPrivilegeAndCounterRouting) {
  // USR only: CPL 3 counts, CPL 0 does not.
  Wr(kCruEscr0, Escr(0x02, 1, false, true));
  Wr(kIqCccr0, Cccr(4));
  Obs(Insn(3));
  Obs(Insn(0));
  Obs(Insn(3));
  EXPECT_EQ(Rd(kIqCounter0), 2u);
  // NBOGUSTAG / BOGUSNTAG / BOGUSTAG alone: nothing is tagged or bogus under vbts: 0.
  Wr(kIqCounter0, 0);
  Wr(kCruEscr0, Escr(0x02, 0xE, true, true));
  Obs(Insn(0));
  Obs(Insn(3));
  EXPECT_EQ(Rd(kIqCounter0), 0u);
  // The ESCR select must name an ESCR of this counter: CRU_ESCR1 feeds 14, 15, 17,
  // so counter 12 with select 4 takes CRU_ESCR0 (now 0: no CPL flag, nothing).
  Wr(kCruEscr0, 0);
  Wr(kCruEscr1, kInstrOs);
  Obs(Insn());
  EXPECT_EQ(Rd(kIqCounter0), 0u);
  Wr(kIqCccr2, Cccr(4));  // counter 14 takes CRU_ESCR1
  Obs(Insn());
  EXPECT_EQ(Rd(kIqCounter2), 1u);
  // Select 0 (MSR_IQ_ESCR0/1, absent on model 03H) and 7 (no IQ ESCR): no events.
  Wr(kCruEscr0, kInstrOs);
  Wr(kIqCccr0, Cccr(0));
  Obs(Insn());
  Wr(kIqCccr0, Cccr(7));
  Obs(Insn());
  EXPECT_EQ(Rd(kIqCounter0), 0u);
  // Active-thread bits 17:16 other than 11B: the counter does not count.
  Wr(kIqCccr0, Cccr(4) & ~(1ull << 17));
  Obs(Insn());
  EXPECT_EQ(Rd(kIqCounter0), 0u);
  // instr_retired on a BPU counter's ESCR (MSR_BPU_ESCR0, select 0, counter 0):
  // event 02H there is another event, which vbts does not count.
  Wr(0x3B2, kInstrOs);
  Wr(0x360, Cccr(0));
  Obs(Insn());
  EXPECT_EQ(Rd(0x300), 0u);
}

TEST_F(NetBurstTest, BranchRetiredCountsBranchesByDirectionAllPredicted) {
  // branch_retired (06H) on CRU_ESCR2 (select 5, counters 12, 13, 16).
  // Workload: taken JMP, not-taken Jcc, plain, taken Jcc, plain.
  auto run = [&](uint64_t mask) {
    Wr(kIqCounter0, 0);
    Wr(kCruEscr2, Escr(0x06, mask, true, false));
    Wr(kIqCccr0, Cccr(5));
    Obs(Insn(0, BranchKind::kJmp));
    Obs(NotTakenJcc());
    Obs(Insn());
    Obs(Insn(0, BranchKind::kJcc));
    Obs(Insn());
    return Rd(kIqCounter0);
  };
  EXPECT_EQ(run(0x5), 3u);  // MMNP | MMTP: every branch (2 taken + 1 not taken)
  EXPECT_EQ(run(0x4), 2u);  // MMTP: the taken ones
  EXPECT_EQ(run(0x1), 1u);  // MMNP: the not-taken Jcc
  EXPECT_EQ(run(0xA), 0u);  // MMNM | MMTM: vbts mispredicts nothing
  EXPECT_EQ(run(0xF), 3u);
  // Branches tell apart: no bulk counting across them.
  EXPECT_FALSE(pmu_.BranchAgnostic());
  Wr(kIqCccr0, 0);
  Wr(kCruEscr0, kInstrOs);
  Wr(kIqCccr0, Cccr(4));
  EXPECT_TRUE(pmu_.BranchAgnostic());  // instr_retired counts branches as any instruction
}

TEST_F(NetBurstTest, CompareComplementThresholdEdgeAndForceOvf) {
  Wr(kCruEscr2, Escr(0x06, 0x5, true, false));  // branch_retired, both directions, OS
  const uint64_t compare = 1ull << 18, complement = 1ull << 19, edge = 1ull << 24, force = 1ull << 25;
  // Workload per run: branch, branch, plain, branch (events per instruction 1, 1, 0, 1).
  auto run = [&](uint64_t extra) {
    Wr(kIqCounter0, 0);
    Wr(kIqCccr0, Cccr(5) | extra);
    bool pmi = false;
    pmi |= Obs(Insn(0, BranchKind::kJmp));
    pmi |= Obs(Insn(0, BranchKind::kJmp));
    pmi |= Obs(Insn());
    pmi |= Obs(Insn(0, BranchKind::kJmp));
    EXPECT_FALSE(pmi);
    return Rd(kIqCounter0);
  };
  EXPECT_EQ(run(compare), 3u);                            // events > 0: 1, 1, 0, 1
  EXPECT_EQ(run(compare | (1ull << 20)), 0u);             // events > 1: never
  EXPECT_EQ(run(compare | complement), 1u);               // events <= 0: the plain one
  EXPECT_EQ(run(compare | complement | (1ull << 20)), 4u);  // events <= 1: all
  EXPECT_EQ(run(compare | edge), 2u);                     // rising edges of (events > 0): 1st and 4th
  EXPECT_EQ(run(edge), 3u);                               // Edge without Compare: not active
  // FORCE_OVF: every increment overflows (OVF); the PMI comes with the next event.
  Wr(kIqCounter0, 0);
  Wr(kIqCccr0, Cccr(5, true) | force);
  EXPECT_FALSE(Obs(Insn(0, BranchKind::kJmp)));  // 1, OVF
  EXPECT_NE(Rd(kIqCccr0) & kOvf, 0u);
  EXPECT_FALSE(Obs(Insn()));                    // no event
  EXPECT_TRUE(Obs(Insn(0, BranchKind::kJmp)));  // 2: the PMI of the first overflow
  EXPECT_EQ(Rd(kIqCounter0), 2u);
}

TEST_F(NetBurstTest, CascadeEnablesTheAlternateCounterOnOverflow) {
  // Counter 12 counts instr_retired from -2; counter 14 (its alternate, 12 XOR 2)
  // has CASCADE set and Enable clear, and takes CRU_ESCR1 (instr_retired too).
  Wr(kCruEscr0, kInstrOs);
  Wr(kCruEscr1, kInstrOs);
  Wr(kIqCounter0, kMask40 - 1);
  Wr(kIqCccr0, Cccr(4));
  const uint64_t cascade = 1ull << 30;
  Wr(kIqCccr2, (Cccr(4) & ~(1ull << 12)) | cascade);
  Obs(Insn());  // counter 12: -1
  Obs(Insn());  // counter 12 wraps to 0: counter 14 enabled from the next instruction
  EXPECT_EQ(Rd(kIqCccr2), Cccr(4) | cascade);
  EXPECT_EQ(Rd(kIqCounter2), 0u);
  Obs(Insn());
  Obs(Insn());
  Obs(Insn());
  EXPECT_EQ(Rd(kIqCounter2), 3u);
  EXPECT_EQ(Rd(kIqCounter0), 3u);
}

TEST_F(NetBurstTest, RdpmcTakesTheCounterIndexAndFastRead) {
  // SDM vol. 2B RDPMC: ECX[30:0] = index 0-17 on 0F_03H without L3; ECX[31]
  // = fast read: bits 31:0 in EAX, EDX = 0.
  Wr(kIqCounter0, 0xAB12345678ull);
  EXPECT_EQ(pmu_.ReadPmc(12).value, 0xAB12345678ull);
  EXPECT_FALSE(pmu_.ReadPmc(12).gp);
  EXPECT_EQ(pmu_.ReadPmc(0x8000000Cu).value, 0x12345678ull);
  EXPECT_FALSE(pmu_.ReadPmc(0x8000000Cu).gp);
  EXPECT_FALSE(pmu_.ReadPmc(17).gp);
  EXPECT_TRUE(pmu_.ReadPmc(18).gp);
  EXPECT_TRUE(pmu_.ReadPmc(0x40000000u).gp);  // no fixed counters: index 40000000H
  EXPECT_TRUE(pmu_.ReadPmc(0x80000012u).gp);
}

TEST_F(NetBurstTest, BulkCountingStopsBeforeTheOverflowAndThePendingPmi) {
  Wr(kCruEscr0, Escr(0x02, 1, true, true));
  Wr(kIqCounter0, kMask40 - 9);  // -10: 9 increments to all ones, the 10th wraps
  Wr(kIqCccr0, Cccr(4, true));
  EXPECT_EQ(pmu_.SequentialLimit(0), 9u);
  pmu_.CountSequential(9, 0);
  EXPECT_EQ(Rd(kIqCounter0), kMask40);
  EXPECT_EQ(pmu_.SequentialLimit(3), 0u);
  EXPECT_FALSE(Obs(Insn(3)));  // wraps: OVF, PMI pending
  EXPECT_EQ(pmu_.SequentialLimit(0), 0u);  // the next event needs its exact instruction
  EXPECT_TRUE(Obs(Insn()));
  EXPECT_EQ(pmu_.SequentialLimit(0), kMask40 - 1);  // counter 1
  pmu_.CountSequential(100, 0);
  EXPECT_EQ(Rd(kIqCounter0), 101u);
  // Edge: a run of plain instructions counts once.
  Wr(kIqCccr0, Cccr(4) | (1ull << 18) | (1ull << 24));
  EXPECT_EQ(pmu_.SequentialLimit(0), UINT64_MAX);
  pmu_.CountSequential(50, 0);
  EXPECT_EQ(Rd(kIqCounter0), 102u);
  // An enabled counter of an event vbts does not count needs no observation.
  Wr(kIqCccr0, 0);
  Wr(0x3B2, kInstrOs);
  Wr(0x360, Cccr(0));
  EXPECT_FALSE(pmu_.NeedsObservation());
  EXPECT_EQ(pmu_.SequentialLimit(0), UINT64_MAX);
}

// Bulk counting (CountSequential, up to SequentialLimit) must leave every
// counter and CCCR exactly as that many Observe calls of plain instructions
// would, without the PMI those calls never request within the limit.
// Random programming of the IQ counters (fixed seed: deterministic).
TEST(NetBurstBulkTest, CountSequentialEqualsObservingEachInstruction) {
  const CpuModel& model = *FindCpuModel("pentium4");
  std::mt19937_64 rng(14);
  testing::FakePhysMemory mem(1 << 12);
  LinearMemory lin(mem, PagingRegs{});
  for (int round = 0; round < 300; round++) {
    VirtualPmu bulk(model), each(model);
    auto both = [&](uint32_t msr, uint64_t v) {
      ASSERT_EQ(bulk.WriteMsr(msr, v).gp, each.WriteMsr(msr, v).gp);
    };
    for (uint32_t escr : {0x3B8u, 0x3B9u, 0x3CCu, 0x3CDu}) {
      const uint64_t event = (rng() & 1) ? 0x02 : 0x06;
      both(escr, (event << 25) | ((rng() & 0xF) << 9) | (rng() & 0xC));
    }
    for (int c = 12; c < 18; c++) {
      // Enable, select 4 or 5, active thread 11B, and random Compare,
      // Complement, Threshold 0/1, Edge, FORCE_OVF, OVF_PMI.
      uint64_t cccr = (1ull << 12) | ((4 + (rng() & 1)) << 13) | (3ull << 16);
      cccr |= rng() & ((1ull << 18) | (1ull << 19) | (1ull << 20) | (1ull << 24) | (1ull << 26));
      if (rng() % 8 == 0) cccr |= 1ull << 25;
      both(0x300 + c, kMask40 - rng() % 40);
      both(0x360 + c, cccr);
    }
    for (int run = 0; run < 6; run++) {
      const uint8_t cpl = (rng() & 1) ? 0 : 3;
      const uint64_t n = std::min<uint64_t>(bulk.SequentialLimit(cpl), rng() % 30);
      ASSERT_EQ(n <= bulk.SequentialLimit(cpl), true);
      bulk.CountSequential(n, cpl);
      Branch plain;
      plain.cpl_from = plain.cpl_to = cpl;
      for (uint64_t i = 0; i < n; i++) {
        absl::StatusOr<PmuEffects> fx = each.Observe(plain, lin, false);
        ASSERT_TRUE(fx.ok());
        ASSERT_FALSE(fx->pmi) << "round " << round << " run " << run << " insn " << i;
      }
      for (uint32_t msr = 0x30C; msr <= 0x311; msr++) {
        ASSERT_EQ(bulk.ReadMsr(msr).value, each.ReadMsr(msr).value) << "round " << round << std::hex << " " << msr;
        ASSERT_EQ(bulk.ReadMsr(msr + 0x60).value, each.ReadMsr(msr + 0x60).value) << "round " << round;
      }
      // Then one observed instruction on both, which may overflow or interrupt.
      absl::StatusOr<PmuEffects> a = bulk.Observe(plain, lin, false), b = each.Observe(plain, lin, false);
      ASSERT_TRUE(a.ok() && b.ok());
      ASSERT_EQ(a->pmi, b->pmi);
    }
  }
}


// ---- NetBurst PEBS (docs/pmu-model.md, "NetBurst PEBS").
constexpr uint32_t kIqCounter4 = 0x310, kIqCccr4 = 0x370, kRatEscr0 = 0x3BC, kRatEscr1 = 0x3BD, kCruEscr3 = 0x3CD;
constexpr uint32_t kPebsEnable = 0x3F1, kPebsMatrixVert = 0x3F2;
// uop_type (02H) with TAGLOADS (mask bit 1) / TAGSTORES (bit 2); front_end_event (08H) NBOGUS (bit 0).
constexpr uint64_t kTagLoadsOs = Escr(0x02, 2, true, false), kTagStoresOs = Escr(0x02, 4, true, false);
constexpr uint64_t kFrontEndOs = Escr(0x08, 1, true, false), kFrontEndBogusOs = Escr(0x08, 2, true, false);
static_assert(kTagLoadsOs == 0x04000408 && kFrontEndOs == 0x10000208);
constexpr uint64_t kMyThrUopTag = (1ull << 25) | (1ull << 24);

Branch MemInsn(uint8_t mem, BranchKind k = BranchKind::kNone, uint8_t cpl = 0) {
  Branch b;
  b.kind = k;
  b.from = 0x1000;
  b.to = 0x1003;
  b.cpl_from = b.cpl_to = cpl;
  b.branch_insn = k != BranchKind::kNone;
  b.mem = mem;
  return b;
}

TEST_F(NetBurstTest, FrontEndEventCountsTheLoadAndStoreMicroOpsTheRatEscrsTag) {
  // RAT_ESCR0 tags loads and RAT_ESCR1 stores, both at CPL 0; counter 14 (IQ_COUNTER2)
  // counts front_end_event NBOGUS through CRU_ESCR3 (CCCR select 5).
  Wr(kRatEscr0, kTagLoadsOs);
  Wr(kRatEscr1, kTagStoresOs);
  Wr(kCruEscr3, kFrontEndOs);
  Wr(kIqCccr2, Cccr(5));
  EXPECT_TRUE(pmu_.CountsMemoryInstructions());  // the engine must fill Branch::mem
  EXPECT_EQ(pmu_.SequentialLimit(0), 0u);       // ... for every instruction
  EXPECT_FALSE(pmu_.BranchAgnostic());
  // +1 load, +1 store, +2 load and store (ADD [m], r: two µops), +0 none;
  // +0 locked (mem bit 2), +0 RET's load, +0 a far CALL's stores, +1 a near CALL's store;
  // +0 at CPL 3 (the RAT ESCRs tag at T0_OS only; the CRU ESCR counts at CPL 0 only).
  for (const Branch& b : {MemInsn(1), MemInsn(2), MemInsn(3), MemInsn(0), MemInsn(3 | kMemUntaggable),
                          MemInsn(1, BranchKind::kRet), MemInsn(2, BranchKind::kFarCall), MemInsn(2, BranchKind::kCall),
                          MemInsn(3, BranchKind::kNone, 3)})
    EXPECT_FALSE(Obs(b));
  EXPECT_EQ(Rd(kIqCounter2), 1u + 1 + 2 + 1);
  // Tagging stops with the RAT ESCR's event: loads only now (RAT_ESCR1 cleared): ADD [m], r = 1.
  Wr(kRatEscr1, 0);
  Obs(MemInsn(3));
  EXPECT_EQ(Rd(kIqCounter2), 6u);
  // BOGUS alone counts nothing: vbts executes nothing speculatively.
  Wr(kCruEscr3, kFrontEndBogusOs);
  Obs(MemInsn(3));
  EXPECT_EQ(Rd(kIqCounter2), 6u);
}

TEST_F(NetBurstTest, InstrRetiredTellsTaggedInstructionsFromTheOthers) {
  // RAT_ESCR0 tags loads at CPL 0; IQ_COUNTER0 (12) counts instr_retired NBOGUSTAG through
  // CRU_ESCR0, IQ_COUNTER2 (14) NBOGUSNTAG through CRU_ESCR1 (both CCCR select 4).
  Wr(kRatEscr0, kTagLoadsOs);
  Wr(kCruEscr0, Escr(0x02, 2, true, false));
  Wr(kCruEscr1, kInstrOs);
  Wr(kIqCccr0, Cccr(4));
  Wr(kIqCccr2, Cccr(4));
  EXPECT_EQ(pmu_.SequentialLimit(0), 0u);  // which instructions are tagged needs each one
  // A load (tagged), a store (not: TAGLOADS only), a plain instruction, a locked load
  // (not taggable): tagged 1, untagged 3.
  for (const Branch& b : {MemInsn(1), MemInsn(2), MemInsn(0), MemInsn(1 | kMemUntaggable)}) Obs(b);
  EXPECT_EQ(Rd(kIqCounter0), 1u);
  EXPECT_EQ(Rd(kIqCounter2), 3u);
  // Without tagging every instruction is untagged again, and counted in bulk.
  Wr(kRatEscr0, 0);
  EXPECT_GT(pmu_.SequentialLimit(0), 0u);
  Obs(MemInsn(1));
  EXPECT_EQ(Rd(kIqCounter0), 1u);
  EXPECT_EQ(Rd(kIqCounter2), 4u);
}

class NetBurstPebsTest : public NetBurstTest {
 protected:
  // DS (32-bit format) at 2000H: PEBS base 3000H, index 3000H, absolute maximum 30A0H (four
  // 40-byte records), threshold 3050H (the second record), counter reset -2 (FF_FFFF_FFFEH).
  static constexpr uint64_t kDs = 0x2000, kBuf = 0x3000;
  void SetUpDs(uint64_t max = kBuf + 4 * 40) {
    Put(kDs + 0x10, kBuf, 4);
    Put(kDs + 0x14, kBuf, 4);
    Put(kDs + 0x18, max, 4);
    Put(kDs + 0x1C, kBuf + 2 * 40, 4);
    Put(kDs + 0x20, kMask40 - 1, 8);
    Wr(0x600, kDs);
    Wr(kRatEscr0, kTagLoadsOs);
    Wr(kCruEscr2, kFrontEndOs);
    Wr(kIqCounter4, kMask40);  // -1: the next tagged load overflows it
    Wr(kPebsEnable, kMyThrUopTag);
    Wr(kIqCccr4, Cccr(5));
  }
  void Put(uint64_t gpa, uint64_t v, int n) {
    for (int i = 0; i < n; i++) mem_.bytes()[gpa + i] = static_cast<uint8_t>(v >> (8 * i));
  }
  absl::StatusOr<PmuEffects> Load(const GuestRegs* before) {
    GuestRegs after;  // what the instruction left: never in a NetBurst record
    after.rflags = 0x893;
    for (uint64_t& g : after.gpr) g = 0xDEAD;
    return pmu_.Observe(MemInsn(1), lin_, false, &after, before);
  }
  GuestRegs Before() const {
    GuestRegs r;
    r.rflags = 0x246;
    for (int i = 0; i < 16; i++) r.gpr[i] = 0x100 + i;  // RAX=100H, RCX=101H, RDX=102H, RBX=103H, RSP=104H, ...
    return r;
  }
};

TEST_F(NetBurstPebsTest, AnOverflowingTaggedLoadWritesTheRegistersItBeganWith) {
  SetUpDs();
  EXPECT_TRUE(pmu_.WantsRegsBefore());
  const GuestRegs before = Before();
  absl::StatusOr<PmuEffects> fx = Load(&before);
  ASSERT_TRUE(fx.ok()) << fx.status();
  EXPECT_FALSE(fx->pmi);  // index 3028H < threshold 3050H; no OVF_PMI
  // The record: EFLAGS, linear IP (the load), EAX, EBX, ECX, EDX, ESI, EDI, EBP, ESP
  // (gpr order RAX RCX RDX RBX RSP RBP RSI RDI: 100H, 103H, 101H, 102H, 106H, 107H, 105H, 104H).
  const uint64_t want[10] = {0x246, 0x1000, 0x100, 0x103, 0x101, 0x102, 0x106, 0x107, 0x105, 0x104};
  for (int i = 0; i < 10; i++) EXPECT_EQ(mem_.Le(kBuf + 4 * i, 4), want[i]) << "field " << i;
  EXPECT_EQ(mem_.Le(kBuf + 40, 4), 0u);           // nothing beyond 40 bytes
  EXPECT_EQ(mem_.Le(kDs + 0x14, 4), kBuf + 40);   // index
  EXPECT_EQ(Rd(kIqCounter4), kMask40 - 1);        // reloaded from the DS counter reset (-2)
  EXPECT_EQ(Rd(kIqCccr4), Cccr(5) | kOvf);        // it overflowed: OVF
  EXPECT_EQ(pmu_.stats().pebs_records, 1u);
  // -2: the second load makes it -1, the third overflows: record 2 at 3028H brings the
  // index to 3050H, the threshold: PMI.
  fx = Load(&before);
  ASSERT_TRUE(fx.ok());
  EXPECT_FALSE(fx->pmi);
  EXPECT_EQ(Rd(kIqCounter4), kMask40);
  fx = Load(&before);
  ASSERT_TRUE(fx.ok());
  EXPECT_TRUE(fx->pmi);
  EXPECT_EQ(mem_.Le(kDs + 0x14, 4), kBuf + 80);
  EXPECT_EQ(mem_.Le(kBuf + 40 + 4, 4), 0x1000u);
}

TEST_F(NetBurstPebsTest, PebsNeedsMyThreadAndTheIqCounter4) {
  SetUpDs();
  // Without ENABLE_PEBS_MY_THR (UOP_TAG alone): the counter wraps, no record.
  Wr(kPebsEnable, 1ull << 24);
  EXPECT_FALSE(pmu_.WantsRegsBefore());
  ASSERT_TRUE(Load(nullptr).ok());
  EXPECT_EQ(Rd(kIqCounter4), 0u);
  EXPECT_EQ(mem_.Le(kDs + 0x14, 4), kBuf);
  // The same event on IQ_COUNTER0 (counter 12, also fed by CRU_ESCR2) with PEBS on: no record.
  Wr(kIqCccr4, 0);
  Wr(kPebsEnable, kMyThrUopTag);
  Wr(kIqCounter0, kMask40);
  Wr(kIqCccr0, Cccr(5));
  EXPECT_FALSE(pmu_.WantsRegsBefore());
  ASSERT_TRUE(Load(nullptr).ok());
  EXPECT_EQ(Rd(kIqCounter0), 0u);
  EXPECT_EQ(pmu_.stats().pebs_records, 0u);
}

TEST_F(NetBurstPebsTest, AFullBufferOrUnknownRegistersDropTheRecord) {
  // Absolute maximum 3020H: no room for one 40-byte record.
  SetUpDs(kBuf + 0x20);
  const GuestRegs before = Before();
  ASSERT_TRUE(Load(&before).ok());
  EXPECT_EQ(pmu_.stats().pebs_records, 0u);
  EXPECT_EQ(pmu_.stats().pebs_dropped, 1u);
  EXPECT_EQ(mem_.Le(kDs + 0x14, 4), kBuf);
  // The engine did not capture the registers (a vbts bug): dropped with a warning, no crash.
  Put(kDs + 0x18, kBuf + 4 * 40, 4);
  Wr(kIqCounter4, kMask40);
  ASSERT_TRUE(Load(nullptr).ok());
  EXPECT_EQ(pmu_.stats().pebs_dropped, 2u);
  EXPECT_FALSE(pmu_.TakeWarnings().empty());
}

TEST_F(NetBurstTest, PebsMsrsAndMiscEnable) {
  // IA32_MISC_ENABLE: 81H (fast strings, perfmon available; BTS and PEBS available).
  EXPECT_EQ(Rd(0x1A0), 0x81u);
  // MSR_PEBS_ENABLE: 12:0, 15-16, 24 (UOP_TAG), 25 (MY_THR); 26 (OTH_THR, HT only) and the rest #GP.
  Wr(kPebsEnable, 0x1FFF | (3ull << 15) | kMyThrUopTag);
  EXPECT_EQ(Rd(kPebsEnable), 0x03019FFFu);
  for (uint64_t bad : {1ull << 13, 1ull << 17, 1ull << 23, 1ull << 26, 1ull << 32})
    EXPECT_TRUE(pmu_.WriteMsr(kPebsEnable, bad).gp) << std::hex << bad;
  // MSR_PEBS_MATRIX_VERT: bits 0, 1 and 4.
  Wr(kPebsMatrixVert, 0x13);
  EXPECT_EQ(Rd(kPebsMatrixVert), 0x13u);
  for (uint64_t bad : {1ull << 2, 1ull << 3, 1ull << 5}) EXPECT_TRUE(pmu_.WriteMsr(kPebsMatrixVert, bad).gp);
}

TEST_F(NetBurstTest, ReplayEventCountsTheLoadsThatMissedTheModelsCaches) {
  // replay_event (09H) NBOGUS at CPL 0 on counter 14 (CRU_ESCR3, select 5); loads (VERT bit 0).
  Wr(kCruEscr3, Escr(0x09, 1, true, false));
  Wr(kIqCccr2, Cccr(5));
  Wr(kPebsMatrixVert, 1);
  // Without UOP_TAG (bit 24) nothing is tagged: no data accesses wanted, nothing counted.
  Wr(kPebsEnable, 1);  // 1stL_cache_load_miss_retired's metric bit alone
  EXPECT_FALSE(pmu_.WantsDataAccesses());
  EXPECT_TRUE(pmu_.NeedsEachInstruction());
  auto load = [&](uint64_t pa, uint32_t size, uint8_t mem = 1) {
    pmu_.ObserveDataAccess(pa, size, 0, VirtualPmu::DataAccessKind::kLoad);
    Obs(MemInsn(mem));
  };
  load(0x8000, 4);
  EXPECT_EQ(Rd(kIqCounter2), 0u);
  Wr(kPebsEnable, 1 | (1ull << 24));
  EXPECT_TRUE(pmu_.WantsDataAccesses());
  // The model's L1D (8 KB, 4-way: 32 sets) and L2 (512 KB) saw no access while nothing
  // wanted them (the load above was not reported to them), so 8000H misses now (+1), then
  // hits (+0); 8040H misses the L1D (+1; the L2 has it: below); a locked load that misses
  // (8080H) is not taggable (+0).
  load(0x8000, 4);
  load(0x8004, 4);
  load(0x8040, 4);
  load(0x8080, 4, 1 | kMemUntaggable);
  EXPECT_EQ(Rd(kIqCounter2), 2u);
  // 2ndL_cache_load_miss_retired (bit 1): the L2 missed.  A miss also fills the other line
  // of its 128-byte pair into the L2 (the model's spatial prefetcher, PairPrefetch::kLlc):
  // C000H misses both (+1); C040H, its partner, misses the L1D but hits the L2 (+0).
  Wr(kPebsEnable, 2 | (1ull << 24));
  load(0xC000, 4);
  load(0xC040, 4);
  EXPECT_EQ(Rd(kIqCounter2), 3u);
  // Split loads and stores (bit 10): only with load_port_replay / store_port_replay SPLIT_LD/ST
  // on a SAAT ESCR (3AFH, 3AEH) and the µop kind in MATRIX_VERT.
  Wr(kPebsEnable, (1ull << 10) | (1ull << 24));
  load(0x9000 + 62, 4);  // two lines, but no SAAT ESCR: +0
  EXPECT_EQ(Rd(kIqCounter2), 3u);
  Wr(0x3AF, Escr(0x04, 2, true, false));  // load_port_replay, SPLIT_LD
  Wr(0x3AE, Escr(0x05, 2, true, false));  // store_port_replay, SPLIT_ST
  load(0x9100 + 62, 4);                   // +1
  load(0x9200, 8);                        // within a line: +0
  pmu_.ObserveDataAccess(0x9300 + 60, 8, 0, VirtualPmu::DataAccessKind::kStore);
  Obs(MemInsn(2));                        // a split store, but VERT has loads only: +0
  Wr(kPebsMatrixVert, 3);
  pmu_.ObserveDataAccess(0x9400 + 63, 2, 0, VirtualPmu::DataAccessKind::kLoad);
  pmu_.ObserveDataAccess(0x9400 + 63, 2, 0, VirtualPmu::DataAccessKind::kStore);
  Obs(MemInsn(3));                        // ADD [m], r over two lines: a load and a store µop, +2
  EXPECT_EQ(Rd(kIqCounter2), 6u);
}

}  // namespace
}  // namespace vbts::pmu
