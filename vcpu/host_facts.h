// host_facts.h: what this host's KVM can and cannot do for vbts, as measured
// at start-up by vmm/host_probe.h with tiny probe guests (docs/host-support.md).
// Plain data, so vcpu/ (the Supervisor) can act on it without vmm/ headers.
#ifndef VBTS_VCPU_HOST_FACTS_H_
#define VBTS_VCPU_HOST_FACTS_H_

#include <cstdint>
#include <string>

namespace vbts::vcpu {

// Which KVM vendor module runs the guests.
enum class HostKind { kUnknown, kVmx, kSvm, kPvm };
const char* HostKindName(HostKind k);  // "VT-x (kvm_intel)", ...

// How one probe guest fared.
enum class ProbeOutcome {
  kNotTested,       // skipped (prerequisite missing, or an earlier probe broke the VM)
  kWorks,           // as on bare metal / as the KVM API promises
  kInternalError,   // KVM_EXIT_INTERNAL_ERROR: KVM's emulator gave up (the VMM sees it)
  kGuestUd,         // the guest received #UD instead (the VMM never sees it)
  kGuestFault,      // the guest received another exception (see detail)
  kNotIntercepted,  // KVM never reported the event to the VMM (native execution)
  kDiffers,         // it ran, but not as asked (CPUID rewritten, HLT fell through, RF ignored)
  kShutdown,        // KVM_EXIT_SHUTDOWN (triple fault)
  kTimeout,         // the probe's time or exit limit fired
  kProbeError,      // an ioctl failed while setting the probe up (see detail)
};
const char* ProbeOutcomeName(ProbeOutcome o);  // "works", "internal error", ...

struct ProbeResult {
  ProbeOutcome outcome = ProbeOutcome::kNotTested;
  std::string detail;  // one line: what was seen
  bool works() const { return outcome == ProbeOutcome::kWorks; }
};

// /sys/module/kvm/parameters/enable_pmu.
enum class Tristate { kAbsent, kYes, kNo };

struct HostFacts {
  // --- KVM ---
  int api_version = 0;
  std::string kernel_release;  // uname -r

  // --- host CPU (the cpuid instruction run by vbts, and /proc/cpuinfo) ---
  std::string cpu_vendor;  // "GenuineIntel", "AuthenticAMD"
  uint32_t cpu_family = 0, cpu_model = 0, cpu_stepping = 0;  // display family/model
  uint32_t cpu_signature = 0;  // CPUID.1:EAX
  std::string cpu_name;    // /proc/cpuinfo "model name", else the CPUID brand string
  bool cpu_flag_vmx = false, cpu_flag_svm = false, cpu_flag_hypervisor = false;
  HostKind kind = HostKind::kUnknown;
  std::string kind_evidence;  // "module kvm_pvm; cpu flags: no vmx, no svm, hypervisor"

  // --- capabilities (KVM_CHECK_EXTENSION on /dev/kvm; 0 = absent) ---
  int cap_user_space_msr = 0;      // KVM_CAP_X86_USER_SPACE_MSR
  int cap_msr_filter = 0;          // KVM_CAP_X86_MSR_FILTER
  int cap_set_guest_debug = 0;     // KVM_CAP_SET_GUEST_DEBUG
  uint32_t guest_debug_flags = 0;  // KVM_CAP_SET_GUEST_DEBUG2: supported KVM_GUESTDBG_* bits
  uint32_t sync_regs_mask = 0;     // KVM_CAP_SYNC_REGS: KVM_SYNC_X86_* bits
  bool sync_regs = false;          // regs, sregs and events all syncable (KvmVcpu's sync mode)
  int cap_irqchip = 0;             // KVM_CAP_IRQCHIP
  int cap_signal_msi = 0;          // KVM_CAP_SIGNAL_MSI
  int cap_vcpu_events = 0;         // KVM_CAP_VCPU_EVENTS
  int cap_exit_on_emulation_failure = 0;  // KVM_CAP_EXIT_ON_EMULATION_FAILURE
  // KVM_CAP_TSC_DEADLINE_TIMER: the in-kernel LAPIC's TSC-deadline mode, which
  // the KVM engine relies on for the models that have it (skylake,
  // icelake-server; docs/tcg-engine.md).
  int cap_tsc_deadline_timer = 0;
  // KVM_GET_TSC_KHZ of a vCPU: the rate of the guest's TSC in both engines,
  // and what CPUID 15H/16H enumerate (pmu::CpuModel::WithTscFrequency); 0 if
  // KVM does not say.
  uint64_t vcpu_tsc_khz = 0;

  // --- in-kernel PMU ---
  Tristate enable_pmu = Tristate::kAbsent;
  bool perf_capabilities_known = false;  // MSR 0x345 is a feature MSR KVM reported
  uint64_t perf_capabilities = 0;        // its value (KVM_GET_MSRS on /dev/kvm)
  int perf_lbr_entries = 0;              // /sys/bus/event_source/devices/cpu/caps/branches (0: absent)
  bool lbr_virtualization = false;       // KVM could virtualise LBRs itself (pmu::HostLbrGeometry)
  std::string lbr_reason;                // why (not): the geometry, or the refusal

  // --- probe guests (pm32 = 32-bit protected mode, paging off; lm64 = long mode) ---
  ProbeResult step_pm32_cpl0;     // (a) KVM single-step: one KVM_EXIT_DEBUG per instruction
  ProbeResult step_pm32_cpl3;
  ProbeResult step_lm64_cpl0;
  ProbeResult step_lm64_cpl3;     // (b) kNotIntercepted: the guest gets #DB (native user mode)
  ProbeResult iret_pm32;          // (c) 32-bit IRET at CPL0 (same privilege)
  ProbeResult int_pm32_cpl0;      // (d) INT 0x30 at CPL0
  ProbeResult int_pm32_cpl3;      // (e) INT 0x30 at CPL3 through a DPL3 gate
  ProbeResult cpuid_leaf1;        // (f) CPUID.1 as set with KVM_SET_CPUID2 (pm32 CPL0)
  uint32_t cpuid1_edx_set = 0, cpuid1_edx_seen = 0;
  ProbeResult cpuid_lm64_cpl3;    // CPUID.1:EAX at native CPL3: kNotIntercepted = host values
  ProbeResult far_ret_outer_pm32; // (g) RETF from CPL0 to CPL3
  ProbeResult hlt_step;           // (h) HLT, IF=1, single-step: kDiffers = fell through
  ProbeResult paging32;           // (i) guest sets CR0.PG with EFER.LME=0 (4 MiB PSE page)
  ProbeResult hw_bp_rf_pm32;      // (j) DR0 exec breakpoint, resumed with RFLAGS.RF=1
  ProbeResult hw_bp_lm64_cpl3;    // DR0 exec breakpoint in native user code
  ProbeResult data_bp_pm32;       // the guest's own DR0 write breakpoint while single-stepped (pm32 CPL0)
  double probe_ms = 0;            // wall time of the probe guests (VM creation included)
  int probe_exits = 0;            // KVM_RUN returns during probing

  // --- what vbts does about it (derived by DeriveHostPolicy) ---
  bool needs_cpuid_completion = false;      // CPUID results differ from KVM_SET_CPUID2
  bool needs_int_completion_cpl0 = false;   // INT n at CPL0 ends in an internal error
  bool needs_int_completion_cpl3 = false;   // INT n at CPL3 does not reach the gate
  bool needs_iret_completion = false;       // 32-bit IRET ends in an internal error
  bool needs_far_ret_completion = false;    // RETF to an outer CPL ends in an internal error
  bool needs_supervision = false;           // some failure is invisible to the VMM: guard (or step) the guest
  bool needs_ud_guard = false;              // INT n becomes a guest fault: breakpoint on the #UD handler
  bool native_user_needs_tf_trick = false;  // lm64 CPL3 is not single-stepped by KVM
  bool needs_hlt_emulation = false;         // stepped HLT falls through: vbts parks the vCPU
  bool breakpoints_need_step_over = false;  // RF ignored: remove, step once, re-insert
  // The guest does not get its own data-breakpoint #DB while vbts steps it:
  // the tracer computes the data accesses and raises it (docs/tracing.md).
  bool emulate_data_breakpoints = false;
  bool paging32_unsupported = false;        // guests using 32-bit paging cannot run
};

// Fills the derived booleans from the probe results.
void DeriveHostPolicy(HostFacts& f);

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_HOST_FACTS_H_
