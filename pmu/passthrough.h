// passthrough.h: `--vpmu=passthrough`: the guest's LBR stack is the host
// CPU's, virtualised by the host KVM (Intel hosts with kvm.enable_pmu=Y and
// legacy LBRs), while the debug store, BTS, BTF and the counters stay
// vbts's emulation (KVM never lets a guest enable BTS: docs/pmu-model.md,
// "Passthrough").  This file decides, from facts about the host, whether
// that is possible and which guest CPU model it needs: KVM virtualises
// LBRs only for a guest whose CPUID model is the host's and whose
// IA32_PERF_CAPABILITIES LBR format is the host's, and the guest must then
// see the host's LBR geometry (how many entries, at which MSRs).  Pure
// logic, tested without KVM.
#ifndef VBTS_PMU_PASSTHROUGH_H_
#define VBTS_PMU_PASSTHROUGH_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "pmu/cpu_model.h"

namespace vbts::pmu {

// What vbts knows about the host's branch-recording hardware and KVM.
struct HostPmu {
  std::string vendor;            // CPUID.0 vendor string of the host CPU
  uint32_t cpuid1_eax = 0;       // host CPUID.1:EAX (signature)
  bool enable_pmu = false;       // kvm.enable_pmu=Y
  bool perf_capabilities_known = false;  // KVM reports IA32_PERF_CAPABILITIES as a feature MSR
  uint64_t perf_capabilities = 0;        // its value
  // LBR entries perf found on the host (/sys/bus/event_source/devices/cpu/caps/branches); 0 = unknown.
  int perf_lbr_entries = 0;
};

// Display family and model of a CPUID.1:EAX signature (SDM vol. 2A, CPUID,
// "Processor Version Information").
uint32_t DisplayFamily(uint32_t cpuid1_eax);
uint32_t DisplayModel(uint32_t cpuid1_eax);

// The LBR geometry of an Intel family-6 host (SDM vol. 3B 17.5–17.13 and
// vol. 4 per-family MSR tables): entries, FROM/TO/INFO bases, LBR_SELECT;
// the format is the host's PERF_CAPABILITIES[5:0].  An error says why KVM
// cannot virtualise this host's LBRs or why vbts does not know them.
absl::StatusOr<LbrModel> HostLbrGeometry(const HostPmu& host);

// The guest model for `--vpmu=passthrough --cpu=base`: `base` with the
// host's signature in CPUID.1:EAX, the host's LBR geometry and LBR format;
// everything else (DS, BTS format, counters, DEBUGCTL bits) as `base`.
absl::StatusOr<CpuModel> PassthroughModel(const CpuModel& base, const HostPmu& host);

// The IA32_PERF_CAPABILITIES value vbts gives the host KVM (KVM_SET_MSRS,
// host-initiated) so that it virtualises LBRs: the host's LBR format and
// nothing else (KVM refuses bits the host lacks; the guest reads the
// model's value from vbts, never this one).
uint64_t KernelPerfCapabilities(const HostPmu& host);

}  // namespace vbts::pmu

#endif  // VBTS_PMU_PASSTHROUGH_H_
