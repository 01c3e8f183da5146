// host_probe.h: measures what this host's KVM can do (vcpu/host_facts.h) by
// reading /sys and /proc, asking KVM_CHECK_EXTENSION, and running tiny probe
// guests (hand-assembled machine code) in one throw-away VM. See
// docs/host-support.md for every probe and what vbts does with its result.
#ifndef VBTS_VMM_HOST_PROBE_H_
#define VBTS_VMM_HOST_PROBE_H_

#include <string>

#include "absl/status/statusor.h"
#include "pmu/passthrough.h"
#include "vcpu/host_facts.h"
#include "vmm/kvm_vm.h"

namespace vbts::vmm {

using vcpu::HostFacts;
using vcpu::HostKind;
using vcpu::ProbeOutcome;
using vcpu::ProbeResult;

struct ProbeOptions {
  // Each probe guest is stopped after this much wall time or this many
  // KVM_RUN returns, so a strange host cannot hang vbts.
  int per_probe_timeout_ms = 100;
  int max_exits_per_probe = 64;
  // Where to look for loaded modules, kvm parameters and cpuinfo (tests).
  std::string sys_module_dir = "/sys/module";
  std::string proc_cpuinfo = "/proc/cpuinfo";
  std::string perf_cpu_dir = "/sys/bus/event_source/devices/cpu";
};

// The facts `--vpmu=passthrough` decides on (pmu/passthrough.h).
pmu::HostPmu HostPmuOf(const vcpu::HostFacts& f);

// Reads the host's facts and runs the probe guests (about 10-30 ms). Fails
// only when KVM cannot create the probe VM at all; a probe that misbehaves is
// a result, not an error.
absl::StatusOr<HostFacts> ProbeHost(const Kvm& kvm, const ProbeOptions& options = {});

// Which KVM flavour runs the guests, from the loaded vendor module (only one
// can be loaded) and the CPU's vmx/svm flags. `evidence` names what decided.
HostKind DetectHostKind(bool kvm_intel, bool kvm_amd, bool kvm_pvm, bool flag_vmx, bool flag_svm,
                        std::string* evidence);

}  // namespace vbts::vmm

#endif  // VBTS_VMM_HOST_PROBE_H_
