// host_facts.cc: names of the HostFacts enums and the policy vbts derives
// from the probe results.
#include "vcpu/host_facts.h"

namespace vbts::vcpu {

const char* HostKindName(HostKind k) {
  switch (k) {
    case HostKind::kVmx: return "VT-x (kvm_intel)";
    case HostKind::kSvm: return "SVM (kvm_amd)";
    case HostKind::kPvm: return "PVM (kvm_pvm)";
    case HostKind::kUnknown: break;
  }
  return "unknown";
}

const char* ProbeOutcomeName(ProbeOutcome o) {
  switch (o) {
    case ProbeOutcome::kNotTested: return "not tested";
    case ProbeOutcome::kWorks: return "works";
    case ProbeOutcome::kInternalError: return "INTERNAL ERROR";
    case ProbeOutcome::kGuestUd: return "GUEST #UD";
    case ProbeOutcome::kGuestFault: return "GUEST FAULT";
    case ProbeOutcome::kNotIntercepted: return "NOT INTERCEPTED";
    case ProbeOutcome::kDiffers: return "DIFFERS";
    case ProbeOutcome::kShutdown: return "SHUTDOWN";
    case ProbeOutcome::kTimeout: return "TIMEOUT";
    case ProbeOutcome::kProbeError: return "probe error";
  }
  return "?";
}

namespace {
// A probe that ran and did not behave: anything but works / not tested / setup failure.
bool Misbehaves(const ProbeResult& r) {
  return r.outcome != ProbeOutcome::kWorks && r.outcome != ProbeOutcome::kNotTested &&
         r.outcome != ProbeOutcome::kProbeError;
}
}  // namespace

void DeriveHostPolicy(HostFacts& f) {
  f.needs_cpuid_completion = f.cpuid_leaf1.outcome == ProbeOutcome::kDiffers;
  f.needs_int_completion_cpl0 = Misbehaves(f.int_pm32_cpl0);
  f.needs_int_completion_cpl3 = Misbehaves(f.int_pm32_cpl3);
  f.needs_iret_completion = Misbehaves(f.iret_pm32);
  f.needs_far_ret_completion = Misbehaves(f.far_ret_outer_pm32);
  // Failures KVM reports (internal errors) are completed on demand; a guest
  // #UD for INT n or a silently rewritten CPUID are invisible to the VMM: the
  // Supervisor guards the free-running guest with breakpoints (on the #UD
  // handler, on CPUID sites) or single-steps it.
  const bool invisible_int = f.int_pm32_cpl3.outcome == ProbeOutcome::kGuestUd ||
                             f.int_pm32_cpl3.outcome == ProbeOutcome::kGuestFault ||
                             f.int_pm32_cpl0.outcome == ProbeOutcome::kGuestUd ||
                             f.int_pm32_cpl0.outcome == ProbeOutcome::kGuestFault;
  f.needs_ud_guard = invisible_int;
  f.needs_supervision = invisible_int || f.needs_cpuid_completion;
  f.native_user_needs_tf_trick = Misbehaves(f.step_lm64_cpl3);
  f.needs_hlt_emulation = f.hlt_step.outcome == ProbeOutcome::kDiffers;
  f.breakpoints_need_step_over = f.hw_bp_rf_pm32.outcome == ProbeOutcome::kDiffers;
  f.emulate_data_breakpoints = f.data_bp_pm32.outcome == ProbeOutcome::kDiffers;
  f.paging32_unsupported = Misbehaves(f.paging32);
}

}  // namespace vbts::vcpu
