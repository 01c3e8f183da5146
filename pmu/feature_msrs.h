// feature_msrs.h: MSRs that exist only when the CPU model's CPUID says so and
// that the host KVM would otherwise answer from the host's features: the
// speculation-control MSRs (SDM vol. 4 table 2-2; CPUID.(EAX=7,ECX=0):EDX).
#ifndef VBTS_PMU_FEATURE_MSRS_H_
#define VBTS_PMU_FEATURE_MSRS_H_

#include <cstdint>
#include <vector>

#include "pmu/cpu_model.h"
#include "pmu/vpmu.h"

namespace vbts::pmu {

// IA32_SPEC_CTRL (48H): present with CPUID.7.EDX[26] (IBRS/IBPB); R/W bits
//   IBRS (0), STIBP (1, with EDX[27]), SSBD (2, with EDX[31]); others #GP.
// IA32_PRED_CMD (49H): write-only; present with EDX[26]; bit 0 (IBPB) may
//   be written, other bits #GP; RDMSR always #GP.
// IA32_FLUSH_CMD (10BH): write-only; present with EDX[28] (L1D_FLUSH); bit 0
//   may be written; RDMSR always #GP.
// Absent: every access #GPs, as kvm-unit-tests' msr.c expects on a CPU
// without the feature. None of vbts's models (Westmere, Core Duo, Skylake
// at launch) has them, so all three #GP there.
class FeatureMsrs {
 public:
  explicit FeatureMsrs(const CpuModel& model);
  static std::vector<MsrRange> Intercepted();
  static bool Owns(uint32_t msr);
  MsrResult Read(uint32_t msr) const;
  MsrResult Write(uint32_t msr, uint64_t value);

 private:
  bool spec_ctrl_ = false, stibp_ = false, ssbd_ = false, flush_l1d_ = false;
  uint64_t spec_ctrl_value_ = 0;
};

}  // namespace vbts::pmu

#endif  // VBTS_PMU_FEATURE_MSRS_H_
