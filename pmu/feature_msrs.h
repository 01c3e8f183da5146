// feature_msrs.h: MSRs whose answer is the CPU model's and that the host KVM
// would otherwise answer itself: the speculation-control MSRs, which exist
// only when the model's CPUID says so (SDM vol. 4 table 2-2;
// CPUID.(EAX=7,ECX=0):EDX), and the microcode revision (IA32_BIOS_SIGN_ID).
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
// IA32_FEATURE_CONTROL (3AH): no model has VMX, SMX, SGX or LMCE in its
//   CPUID, so bit 0 (Lock) is the one writable bit; it reads 0 at reset (vbts
//   is the firmware, and as SeaBIOS on such a CPU it leaves the MSR alone).
//   Once locked every WRMSR #GPs (SDM vol. 4 table 2-2; vol. 3C 23.7), as do
//   other bits. Linux locks it at boot (init_ia32_feat_ctl); KVM here
//   refused that write, which Linux reported with a call trace.
// IA32_BIOS_SIGN_ID (8BH): reads CpuModel::microcode_revision in bits 63:32
// (31:0 reserved, 0); a write (software preloads 0 before CPUID.01H, SDM vol.
// 3A 9.11.7.1, which then loads the revision) is taken and changes nothing:
// the read after it is the revision, as after that CPUID. KVM answers its
// own default (revision 1) otherwise, which Linux reports as a firmware bug.
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
  uint64_t bios_sign_id_ = 0;
  uint64_t feature_control_ = 0;
};

}  // namespace vbts::pmu

#endif  // VBTS_PMU_FEATURE_MSRS_H_
