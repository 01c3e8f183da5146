// cpu_model_test.cc: CPUID values of the built-in models.
#include "pmu/cpu_model.h"

#include <gtest/gtest.h>

#include <cstring>

namespace vbts::pmu {
namespace {

TEST(CpuModel, WestmereIsDefaultAndGenuineIntel) {
  const CpuModel& m = CpuModels().front();
  EXPECT_EQ(m.name, "westmere");
  CpuidResult r = m.Cpuid(0, 0);
  char vendor[13] = {};
  std::memcpy(vendor, &r.ebx, 4);
  std::memcpy(vendor + 4, &r.edx, 4);
  std::memcpy(vendor + 8, &r.ecx, 4);
  EXPECT_STREQ(vendor, "GenuineIntel");
  EXPECT_EQ(r.eax, 0xBu);
}

TEST(CpuModel, WestmereLeaf1AdvertisesDebugStore) {
  CpuidResult r = FindCpuModel("westmere")->Cpuid(1, 0, /*apic_id=*/0);
  // Family 6, model 0x2C = (ext model 2 << 16) | (model 0xC << 4) | (family 6 << 8) | stepping 2.
  EXPECT_EQ(r.eax, 0x000206C2u);
  EXPECT_NE(r.edx & kCpuid1EdxDs, 0u);
  EXPECT_NE(r.ecx & kCpuid1EcxDtes64, 0u);
  EXPECT_NE(r.ecx & kCpuid1EcxDsCpl, 0u);
  EXPECT_NE(r.ecx & kCpuid1EcxPdcm, 0u);
}

TEST(CpuModel, OutOfRangeLeavesFollowIntelRule) {
  const CpuModel* m = FindCpuModel("westmere");
  // 0x20 > max basic 0xB and 0x80000009 > max extended: both return leaf 0xB's data (subleaf 0).
  EXPECT_EQ(m->Cpuid(0x20, 0), m->Cpuid(0xB, 0));
  EXPECT_EQ(m->Cpuid(0x80000009, 0), m->Cpuid(0xB, 0));
  // Leaf 3 is within range but not listed: zeros.
  EXPECT_EQ(m->Cpuid(3, 0), CpuidResult{});
}

TEST(CpuModel, ApicIdIsReported) {
  EXPECT_EQ(FindCpuModel("westmere")->Cpuid(1, 0, 5).ebx >> 24, 5u);
}

TEST(CpuModel, UnknownNameIsNull) { EXPECT_EQ(FindCpuModel("pentium"), nullptr); }

}  // namespace
}  // namespace vbts::pmu
