// feature_msrs_test.cc: speculation-control MSRs absent and present.
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

}  // namespace
}  // namespace vbts::pmu
