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

// icelake-server: Xeon Platinum 8380.  CPUID.1:EAX = extended model 6 [19:16],
// family 6 [11:8], model 0AH [7:4], stepping 6 -> 0x000606A6 (SDM vol. 2A
// CPUID figure 3-6; vol. 4 table 2-1 "06_6AH").
TEST(CpuModel, IcelakeServerSignatureAndPerfmonV5) {
  const CpuModel* m = FindCpuModel("icelake-server");
  ASSERT_NE(m, nullptr);
  CpuidResult r1 = m->Cpuid(1, 0);
  EXPECT_EQ(r1.eax, 0x000606A6u);
  EXPECT_NE(r1.edx & kCpuid1EdxDs, 0u);
  EXPECT_NE(r1.ecx & kCpuid1EcxDtes64, 0u);
  EXPECT_NE(r1.ecx & kCpuid1EcxPdcm, 0u);
  // Leaf 0AH (SDM vol. 2A; vol. 3B 18.2): EAX[7:0] version 5, [15:8] 8 GP
  // counters, [23:16] width 48, [31:24] EBX vector length 8; EDX[4:0] 4 fixed
  // counters, [12:5] width 48, bit 15 AnyThread deprecated; ECX (v5) the
  // fixed-counter bitmap, counters 0-3.
  CpuidResult ra = m->Cpuid(0xA, 0);
  EXPECT_EQ(ra.eax & 0xFF, 5u);
  EXPECT_EQ((ra.eax >> 8) & 0xFF, 8u);
  EXPECT_EQ((ra.eax >> 16) & 0xFF, 48u);
  EXPECT_EQ(ra.eax >> 24, 8u);
  EXPECT_EQ(ra.ebx, 0u);
  EXPECT_EQ(ra.ecx, 0xFu);
  EXPECT_EQ(ra.edx & 0x1F, 4u);
  EXPECT_EQ((ra.edx >> 5) & 0xFF, 48u);
  EXPECT_EQ((ra.edx >> 15) & 1, 1u);
  EXPECT_EQ(m->pmu.perfmon_version, 5);
  EXPECT_EQ(m->pmu.gp_counters, 8);
  EXPECT_EQ(m->pmu.fixed_counters, 4);
}

TEST(CpuModel, IcelakeServerPerfCapabilities) {
  const PmuModel& p = FindCpuModel("icelake-server")->pmu;
  // SDM 17.4.8.1 / 18.9.2: [5:0] LBR format 5, bit 6 PEBS trap, bit 7 PEBS
  // arch regs, [11:8] PEBS record format 4, bit 12 freeze while SMM, bit 13
  // full-width writes, bit 14 PEBS_BASELINE: 5 + 0x40 + 0x80 + 0x400 +
  // 0x1000 + 0x2000 + 0x4000 = 0x74C5.
  EXPECT_EQ(p.perf_capabilities, 0x74C5u);
  EXPECT_EQ(p.perf_capabilities & 0x3F, 5u);
  EXPECT_EQ((p.perf_capabilities >> 8) & 0xF, 4u);
  EXPECT_NE(p.perf_capabilities & kPerfCapPebsBaseline, 0u);
  EXPECT_EQ(p.misc_enable & (1ull << 12), 0u);  // PEBS available
  // 32 legacy LBRs (17.13 / vol. 4 Ice Lake table): FROM 680H, TO 6C0H, INFO DC0H, TOS 1C9H, LBR_SELECT.
  EXPECT_EQ(p.lbr.entries, 32);
  EXPECT_EQ(p.lbr.from_base, 0x680u);
  EXPECT_EQ(p.lbr.to_base, 0x6C0u);
  EXPECT_EQ(p.lbr.info_base, 0xDC0u);
  EXPECT_EQ(p.lbr.tos, 0x1C9u);
  EXPECT_TRUE(p.lbr.select);
  EXPECT_EQ(p.debugctl_valid, 0x5FC3u);
}

TEST(CpuModel, UnknownNameIsNull) { EXPECT_EQ(FindCpuModel("pentium"), nullptr); }

TEST(CpuModel, TscFrequencyLeavesGiveTheTscOverTheLapicCrystal) {
  // Leaf 15H: TSC = crystal (ECX Hz) * EBX / EAX, the crystal the LAPIC
  // timer's 1 GHz clock; Linux computes crystal_khz * EBX in 32 bits, so
  // EBX <= 0xFFFFFFFF / 1 000 000 = 4294.  16H: base = maximum = the TSC's
  // MHz, bus 100.  2 100 000 kHz = 21/10 of 1 000 000 kHz, exactly.
  constexpr uint64_t kGhz = 1'000'000'000;
  const CpuModel sky = FindCpuModel("skylake")->WithTscFrequency(2100000, kGhz);
  EXPECT_EQ(sky.Cpuid(0x15, 0), (CpuidResult{10, 21, 1'000'000'000, 0}));
  EXPECT_EQ(sky.Cpuid(0x16, 0), (CpuidResult{2100, 2100, 100, 0}));
  // 2 095 987 kHz (gcd with 10^6: 1) does not fit; the closest ratio with a
  // numerator up to 4294, found by trying every numerator (each with the two
  // denominators around it), is 3865/1844: Linux reads 10^6 * 3865 / 1844 =
  // 2 095 986 kHz (7e-9 off).  The AMD EPYC host of 2026-11-27 gave its vCPUs
  // 2 596 122 kHz: 3079/1186, read as 2 596 121 kHz.  The exact ratio over the
  // 24 MHz crystal vbts enumerated before, 1298061/12000, made Linux's product
  // wrap: "tsc: Detected 448.638 MHz processor", and its clocksource watchdog
  // then found the TSC 5.8 times faster than the ACPI PM timer.
  const CpuModel odd = FindCpuModel("icelake-server")->WithTscFrequency(2095987, kGhz);
  EXPECT_EQ(odd.Cpuid(0x15, 0), (CpuidResult{1844, 3865, 1'000'000'000, 0}));
  EXPECT_EQ(odd.Cpuid(0x16, 0).eax, 2096u);
  EXPECT_EQ(FindCpuModel("skylake")->WithTscFrequency(2596122, kGhz).Cpuid(0x15, 0),
            (CpuidResult{1186, 3079, 1'000'000'000, 0}));
  // Below leaf 15H (westmere: maximum 0BH), or no frequency or crystal: unchanged.
  const CpuModel* w = FindCpuModel("westmere");
  EXPECT_EQ(w->WithTscFrequency(2100000, kGhz).leaves.size(), w->leaves.size());
  EXPECT_EQ(FindCpuModel("skylake")->WithTscFrequency(0, kGhz).Cpuid(0x15, 0), (CpuidResult{}));
  EXPECT_EQ(FindCpuModel("skylake")->WithTscFrequency(2100000, 999).Cpuid(0x15, 0), (CpuidResult{}));
}

TEST(BestRatio, ExactInLowestTermsWhenTheNumeratorFits) {
  EXPECT_EQ(BestRatio(2100000, 1000000, 4294), (Ratio{21, 10}));
  EXPECT_EQ(BestRatio(7, 7, 1), (Ratio{1, 1}));
  EXPECT_EQ(BestRatio(3, 9, 1), (Ratio{1, 3}));
}

TEST(BestRatio, BeyondTheBoundTheNumeratorIsTheBound) {
  // 1000/1 with numerators up to 5: 5/1 is the closest.
  EXPECT_EQ(BestRatio(1000, 1, 5), (Ratio{5, 1}));
}

TEST(BestRatio, MatchesAnExhaustiveSearch) {
  // Every p/q with p, q up to 40 and bounds 1..10 against the closest
  // fraction found by trying every numerator n <= bound with every
  // denominator 1..401 (the closest one's is at most 10 * 40 + 1).
  for (uint64_t p = 1; p <= 40; ++p) {
    for (uint64_t q = 1; q <= 40; ++q) {
      for (uint64_t bound = 1; bound <= 10; ++bound) {
        Ratio want{0, 1};
        // |n/d - p/q| compared as |n*q - p*d| / (d*q).
        auto err_num = [&](Ratio r) {
          const int64_t e = static_cast<int64_t>(r.numerator * q) - static_cast<int64_t>(p * r.denominator);
          return static_cast<uint64_t>(e < 0 ? -e : e);
        };
        bool have = false;
        for (uint64_t n = 1; n <= bound; ++n) {
          for (uint64_t d = 1; d <= 401; ++d) {
            const Ratio r{n, d};
            if (!have || err_num(r) * want.denominator < err_num(want) * r.denominator) {
              want = r;
              have = true;
            }
          }
        }
        const Ratio got = BestRatio(p, q, bound);
        // Equal error is what matters (a tie may pick either side).
        EXPECT_EQ(err_num(got) * want.denominator, err_num(want) * got.denominator)
            << p << "/" << q << " bound " << bound << ": got " << got.numerator << "/" << got.denominator
            << ", want " << want.numerator << "/" << want.denominator;
      }
    }
  }
}

}  // namespace
}  // namespace vbts::pmu
