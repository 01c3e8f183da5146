// passthrough_test.cc: which hosts can give a guest their LBRs through KVM,
// and the guest model vbts then builds (pmu/passthrough.h). Expected values
// come from the SDM's per-family LBR tables, as cited in passthrough.cc.
#include "pmu/passthrough.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pmu/vpmu.h"
#include "pmu/testing/fake_memory.h"

namespace vbts::pmu {
namespace {

using ::testing::HasSubstr;

// An Intel host KVM can virtualise LBRs on; `eax` is its CPUID.1:EAX.
HostPmu IntelHost(uint32_t eax, uint64_t perf_caps) {
  HostPmu h;
  h.vendor = "GenuineIntel";
  h.cpuid1_eax = eax;
  h.enable_pmu = true;
  h.perf_capabilities_known = true;
  h.perf_capabilities = perf_caps;
  return h;
}

TEST(PassthroughTest, DisplayFamilyAndModel) {
  // 0x000A0671: extended model A, model 7 → 0xA7 (Rocket Lake); 0x00B00F21: family F + ext 0x0B = 0x1A.
  EXPECT_EQ(DisplayFamily(0x000A0671), 6u);
  EXPECT_EQ(DisplayModel(0x000A0671), 0xA7u);
  EXPECT_EQ(DisplayFamily(0x00B00F21), 0x1Au);
  EXPECT_EQ(DisplayModel(0x00B00F21), 0x02u);
  EXPECT_EQ(DisplayModel(0x000206C2), 0x2Cu);
}

TEST(PassthroughTest, WestmereHostHasSixteenLbrsAt680) {
  // Westmere-EP 06_2CH, PERF_CAPABILITIES 0x11C3: LBR format 3 (no LBR_INFO).
  absl::StatusOr<LbrModel> l = HostLbrGeometry(IntelHost(0x000206C2, 0x11C3));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->entries, 16);
  EXPECT_EQ(l->from_base, 0x680u);
  EXPECT_EQ(l->to_base, 0x6C0u);
  EXPECT_EQ(l->info_base, 0u);
  EXPECT_EQ(l->tos, 0x1C9u);
  EXPECT_EQ(l->format, 3);
  EXPECT_TRUE(l->select);
}

TEST(PassthroughTest, SkylakeAndRocketLakeHostsHaveThirtyTwoWithInfo) {
  // Skylake-SP 06_55H and Rocket Lake 06_A7H, LBR format 5 → MSR_LBR_INFO_0 at DC0H.
  for (uint32_t eax : {0x00050654u, 0x000A0671u}) {
    absl::StatusOr<LbrModel> l = HostLbrGeometry(IntelHost(eax, 0x33C5));
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->entries, 32);
    EXPECT_EQ(l->info_base, 0xDC0u);
    EXPECT_EQ(l->format, 5);
  }
}

TEST(PassthroughTest, Core2AndAtomHostsUseMsr40) {
  absl::StatusOr<LbrModel> core2 = HostLbrGeometry(IntelHost(0x00010676, 0x0));  // format 0: refused
  EXPECT_FALSE(core2.ok());
  core2 = HostLbrGeometry(IntelHost(0x00010676, 0x1));  // Penryn 06_17H, format 1
  ASSERT_TRUE(core2.ok()) << core2.status();
  EXPECT_EQ(core2->entries, 4);
  EXPECT_EQ(core2->from_base, 0x40u);
  EXPECT_EQ(core2->to_base, 0x60u);
  EXPECT_FALSE(core2->select);
  absl::StatusOr<LbrModel> slm = HostLbrGeometry(IntelHost(0x00030678, 0x3));  // Silvermont 06_37H
  ASSERT_TRUE(slm.ok()) << slm.status();
  EXPECT_EQ(slm->entries, 8);
  EXPECT_EQ(slm->from_base, 0x40u);
}

TEST(PassthroughTest, RefusalsNameTheReason) {
  HostPmu amd = IntelHost(0x00B00F21, 0);
  amd.vendor = "AuthenticAMD";
  EXPECT_THAT(std::string(HostLbrGeometry(amd).status().message()), HasSubstr("AuthenticAMD"));
  HostPmu off = IntelHost(0x000A0671, 0x33C5);
  off.enable_pmu = false;
  EXPECT_THAT(std::string(HostLbrGeometry(off).status().message()), HasSubstr("kvm.enable_pmu=N"));
  HostPmu unknown_caps = IntelHost(0x000A0671, 0);
  unknown_caps.perf_capabilities_known = false;
  EXPECT_THAT(std::string(HostLbrGeometry(unknown_caps).status().message()), HasSubstr("PERF_CAPABILITIES"));
  // This CI host on 2026-11-23: Intel 06_A7H with enable_pmu=N and PERF_CAPABILITIES 0.
  HostPmu ci = IntelHost(0x000A0671, 0);
  ci.enable_pmu = false;
  EXPECT_FALSE(HostLbrGeometry(ci).ok());
  // Sapphire Rapids 06_8FH: architectural LBRs, format 3FH.
  EXPECT_THAT(std::string(HostLbrGeometry(IntelHost(0x000806F8, 0x3F)).status().message()),
              HasSubstr("architectural LBRs"));
  // A family-6 model vbts has no table entry for.
  EXPECT_THAT(std::string(HostLbrGeometry(IntelHost(0x000B06A2, 0x5)).status().message()),
              HasSubstr("06_BAH"));
  // perf disagrees with the table: refuse rather than guess.
  HostPmu odd = IntelHost(0x000206C2, 0x11C3);
  odd.perf_lbr_entries = 32;
  EXPECT_THAT(std::string(HostLbrGeometry(odd).status().message()), HasSubstr("perf found 32"));
  odd.perf_lbr_entries = 16;
  EXPECT_TRUE(HostLbrGeometry(odd).ok());
}

TEST(PassthroughTest, GuestModelTakesTheHostSignatureAndLbrs) {
  const CpuModel& westmere = *FindCpuModel("westmere");
  const HostPmu host = IntelHost(0x000A0671, 0x33C5);  // Rocket Lake, format 5, PEBS format 3, full-width
  absl::StatusOr<CpuModel> m = PassthroughModel(westmere, host);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->Cpuid(1, 0).eax, 0x000A0671u);
  // Everything but leaf 1 EAX stays the model's (DS, DTES64, leaf 0AH).
  EXPECT_EQ(m->Cpuid(1, 0).edx, westmere.Cpuid(1, 0).edx);
  EXPECT_EQ(m->Cpuid(1, 0).ecx, westmere.Cpuid(1, 0).ecx);
  EXPECT_EQ(m->Cpuid(0xA, 0), westmere.Cpuid(0xA, 0));
  EXPECT_EQ(m->pmu.lbr.entries, 32);
  EXPECT_EQ(m->pmu.lbr.info_base, 0xDC0u);
  // Westmere's 0x11C3 with the LBR format replaced by the host's 5: 0x11C5.
  EXPECT_EQ(m->pmu.perf_capabilities, 0x11C5u);
  EXPECT_EQ(KernelPerfCapabilities(host), 0x5u);
  EXPECT_TRUE(m->pmu.ds);
  EXPECT_EQ(m->pmu.debugctl_valid, westmere.pmu.debugctl_valid);
  // core-duo has no PDCM: KVM would not take a PERF_CAPABILITIES value.
  EXPECT_FALSE(PassthroughModel(*FindCpuModel("core-duo"), host).ok());
}

// The virtual PMU with the LBRs in the kernel.
class SplitVpmuTest : public ::testing::Test {
 protected:
  SplitVpmuTest()
      : model_(*PassthroughModel(*FindCpuModel("westmere"), IntelHost(0x000206C2, 0x11C3))),
        pmu_(model_, VirtualPmuOptions{.lbr_in_kernel = true}),
        mem_(1 << 20),
        lin_(mem_, PagingRegs{}) {}
  static bool In(const std::vector<MsrRange>& r, uint32_t msr) {
    for (const MsrRange& x : r)
      if (msr >= x.first && msr <= x.last) return true;
    return false;
  }
  Branch Jmp() {
    Branch b;
    b.kind = BranchKind::kJmp;
    b.from = 0x1000;
    b.to = 0x2000;
    b.branch_insn = true;
    return b;
  }
  CpuModel model_;
  VirtualPmu pmu_;
  testing::FakePhysMemory mem_;
  LinearMemory lin_;
};

TEST_F(SplitVpmuTest, LbrMsrsAreTheKernelsEverythingElseStaysIntercepted) {
  const std::vector<MsrRange> r = pmu_.InterceptedMsrs();
  for (uint32_t msr : {0x40u, 0x1C8u, 0x1C9u, 0x1DDu, 0x1DEu, 0x680u, 0x6C0u, 0xDC0u}) {
    EXPECT_FALSE(In(r, msr)) << std::hex << msr;
    EXPECT_FALSE(pmu_.Owns(msr)) << std::hex << msr;
  }
  for (uint32_t msr : {0xC1u, 0x186u, 0x1A0u, 0x1D9u, 0x309u, 0x345u, 0x38Du, 0x38Fu, 0x390u, 0x3F1u, 0x600u})
    EXPECT_TRUE(In(r, msr)) << std::hex << msr;
  VirtualPmu emulated(model_);
  EXPECT_TRUE(emulated.Owns(0x680));
  EXPECT_EQ(emulated.KernelDebugCtl(), 0u);
}

TEST_F(SplitVpmuTest, DebugCtlLbrBitsGoToTheKernelAndNeedNoStepping) {
  ASSERT_FALSE(pmu_.WriteMsr(0x1D9, 0x801).gp);  // LBR | FREEZE_LBRS_ON_PMI
  EXPECT_EQ(pmu_.KernelDebugCtl(), 0x801u);
  EXPECT_EQ(pmu_.ReadMsr(0x1D9).value, 0x801u);
  EXPECT_FALSE(pmu_.NeedsObservation());  // the hardware records LBRs: nothing to step
  ASSERT_FALSE(pmu_.WriteMsr(0x1D9, 0x803).gp);  // + BTF: emulated by vbts, not sent to the kernel
  EXPECT_EQ(pmu_.KernelDebugCtl(), 0x801u);
  EXPECT_TRUE(pmu_.NeedsObservation());
  ASSERT_TRUE(pmu_.Observe(Jmp(), lin_, false).ok());
  EXPECT_EQ(pmu_.stats().lbr_pushes, 0u);
}

TEST_F(SplitVpmuTest, LegacyFreezeOnAVbtsPmiStopsTheKernelsLbrs) {
  // PMC0 counts instructions with INT from 2^48-1: the next instruction overflows → PMI;
  // FREEZE_LBRS_ON_PMI on a v3 model clears DEBUGCTL.LBR (SDM 17.4.7).
  ASSERT_FALSE(pmu_.WriteMsr(0x1D9, 0x801).gp);
  ASSERT_FALSE(pmu_.WriteMsr(0x38F, 1).gp);
  ASSERT_FALSE(pmu_.WriteMsr(0xC1, 0xFFFFFFFF).gp);  // sign-extended to 48 bits: 2^48-1
  ASSERT_FALSE(pmu_.WriteMsr(0x186, 0x5300C0 | (1u << 20)).gp);
  absl::StatusOr<PmuEffects> fx = pmu_.Observe(Jmp(), lin_, false);
  ASSERT_TRUE(fx.ok());
  EXPECT_TRUE(fx->pmi);
  EXPECT_EQ(pmu_.KernelDebugCtl(), 0x800u);
  EXPECT_EQ(pmu_.ReadMsr(0x1D9).value, 0x800u);
}

TEST_F(SplitVpmuTest, HardwareClearOfLbrIsSeenByTheGuest) {
  ASSERT_FALSE(pmu_.WriteMsr(0x1D9, 0x1).gp);
  pmu_.NoteKernelDebugCtl(0x1);  // still on
  EXPECT_EQ(pmu_.ReadMsr(0x1D9).value, 0x1u);
  pmu_.NoteKernelDebugCtl(0x0);  // the CPU delivered #DB in the guest and cleared it (SDM 17.4.2)
  EXPECT_EQ(pmu_.ReadMsr(0x1D9).value, 0x0u);
  EXPECT_EQ(pmu_.KernelDebugCtl(), 0x0u);
}

TEST(SplitVpmuV4Test, V4FreezeHoldsTheKernelsLbrOffUntilStatusIsCleared) {
  const CpuModel model = *PassthroughModel(*FindCpuModel("skylake"), IntelHost(0x000506E3, 0x33C5));
  VirtualPmu pmu(model, VirtualPmuOptions{.lbr_in_kernel = true});
  testing::FakePhysMemory mem(1 << 20);
  LinearMemory lin(mem, PagingRegs{});
  ASSERT_FALSE(pmu.WriteMsr(0x1D9, 0x801).gp);
  ASSERT_FALSE(pmu.WriteMsr(0x38F, 1).gp);
  ASSERT_FALSE(pmu.WriteMsr(0x4C1, 0xFFFFFFFFFFFFull).gp);  // full-width write: 2^48-1
  ASSERT_FALSE(pmu.WriteMsr(0x186, 0x5300C0 | (1u << 20)).gp);
  Branch b;
  b.kind = BranchKind::kNone;
  b.from = 0x1000;
  absl::StatusOr<PmuEffects> fx = pmu.Observe(b, lin, false);
  ASSERT_TRUE(fx.ok());
  EXPECT_TRUE(fx->pmi);
  // v4: DEBUGCTL.LBR stays set for the guest; GLOBAL_STATUS.LBR_FRZ (bit 58) set; the kernel's LBR is off.
  EXPECT_EQ(pmu.ReadMsr(0x1D9).value, 0x801u);
  EXPECT_NE(pmu.ReadMsr(0x38E).value & (1ull << 58), 0u);
  EXPECT_EQ(pmu.KernelDebugCtl(), 0x800u);
  pmu.NoteKernelDebugCtl(0x800);  // vbts's own freeze: not a hardware clear
  EXPECT_EQ(pmu.ReadMsr(0x1D9).value, 0x801u);
  ASSERT_FALSE(pmu.WriteMsr(0x390, 1ull << 58).gp);  // OVF_CTRL clears LBR_FRZ
  EXPECT_EQ(pmu.KernelDebugCtl(), 0x801u);
}

}  // namespace
}  // namespace vbts::pmu
