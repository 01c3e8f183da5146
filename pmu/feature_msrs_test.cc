// feature_msrs_test.cc: speculation-control MSRs absent and present; the microcode revision.
#include "pmu/feature_msrs.h"

#include <gtest/gtest.h>

namespace vbts::pmu {
namespace {

TEST(FeatureMsrsTest, AbsentOnEveryModelAllAccessesGp) {
  // No model has CPUID.7.EDX[26]/[28]: kvm-unit-tests' msr.c then expects #GP
  // for RDMSR/WRMSR(SPEC_CTRL, 0), WRMSR(PRED_CMD, 0/1), WRMSR(FLUSH_CMD, 0/1).
  for (const CpuModel& m : CpuModels()) {
    FeatureMsrs f(m);
    EXPECT_TRUE(f.Read(0x48).gp) << m.name;
    EXPECT_TRUE(f.Write(0x48, 0).gp) << m.name;
    EXPECT_TRUE(f.Write(0x49, 0).gp) << m.name;
    EXPECT_TRUE(f.Write(0x49, 1).gp) << m.name;
    EXPECT_TRUE(f.Write(0x10B, 0).gp) << m.name;
    EXPECT_TRUE(f.Write(0x10B, 1).gp) << m.name;
  }
}

TEST(FeatureMsrsTest, PresentWhenCpuidSaysSo) {
  CpuModel m = CpuModels().front();
  m.leaves.push_back({7, 0, true, 0, 0, 0, (1u << 26) | (1u << 28)});  // IBRS/IBPB, L1D_FLUSH; no STIBP/SSBD
  for (CpuidLeaf& l : m.leaves)
    if (l.function == 0 && l.eax < 7) l.eax = 7;
  FeatureMsrs f(m);
  EXPECT_FALSE(f.Write(0x48, 1).gp);
  EXPECT_EQ(f.Read(0x48).value, 1u);
  EXPECT_TRUE(f.Write(0x48, 2).gp);  // STIBP absent
  EXPECT_TRUE(f.Read(0x49).gp);      // write-only
  EXPECT_FALSE(f.Write(0x49, 1).gp);
  EXPECT_TRUE(f.Write(0x49, 2).gp);
  EXPECT_FALSE(f.Write(0x10B, 1).gp);
  EXPECT_TRUE(f.Read(0x10B).gp);
}

TEST(FeatureMsrsTest, BiosSignIdReadsTheModelsMicrocodeRevisionAfterAnyWrite) {
  // IA32_BIOS_SIGN_ID: bits 63:32 the revision of the model's latest public
  // microcode file (intel-ucode/06-5e-03 and 06-2c-02 begin with revisions
  // 0xF0 and 0x1F), bits 31:0 zero. Linux preloads 0 and runs CPUID.01H
  // before it reads (SDM vol. 3A 9.11.7.1): the write is taken, the read is
  // the revision. 0xF0 >= 0xB2, the revision from which Linux trusts the
  // TSC-deadline timer on 06_5EH (arch/x86/kernel/apic/apic.c).
  FeatureMsrs skylake(*FindCpuModel("skylake"));
  EXPECT_FALSE(skylake.Write(0x8B, 0).gp);
  EXPECT_EQ(skylake.Read(0x8B).value, 0xF0ull << 32);
  EXPECT_FALSE(skylake.Read(0x8B).gp);
  FeatureMsrs westmere(*FindCpuModel("westmere"));
  EXPECT_EQ(westmere.Read(0x8B).value, 0x1Full << 32);
  EXPECT_FALSE(westmere.Write(0x8B, 0x1234).gp);
  EXPECT_EQ(westmere.Read(0x8B).value, 0x1Full << 32);
  for (const CpuModel& m : CpuModels()) EXPECT_NE(m.microcode_revision, 0u) << m.name;
}

TEST(FeatureMsrsTest, FeatureControlLocksOnceWithNoOtherBit) {
  // No model has VMX, SMX, SGX or LMCE: of IA32_FEATURE_CONTROL only the
  // Lock bit (0) is writable. Reset value 0; Linux writes 1 (locked, nothing
  // enabled); after that every write #GPs until reset (SDM vol. 4 table 2-2).
  for (const CpuModel& m : CpuModels()) {
    FeatureMsrs f(m);
    EXPECT_EQ(f.Read(0x3A).value, 0u) << m.name;
    EXPECT_TRUE(f.Write(0x3A, 1u << 2).gp) << m.name;  // VMX outside SMX: no VMX
    EXPECT_TRUE(f.Write(0x3A, 1u << 20).gp) << m.name;  // LMCE
    EXPECT_FALSE(f.Write(0x3A, 0).gp) << m.name;
    EXPECT_FALSE(f.Write(0x3A, 1).gp) << m.name;
    EXPECT_EQ(f.Read(0x3A).value, 1u) << m.name;
    EXPECT_TRUE(f.Write(0x3A, 1).gp) << m.name;
    EXPECT_TRUE(f.Write(0x3A, 0).gp) << m.name;
    EXPECT_EQ(f.Read(0x3A).value, 1u) << m.name;
  }
}

}  // namespace
}  // namespace vbts::pmu
