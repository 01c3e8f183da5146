// info.h: `vbts info`: the host's KVM facts (vmm/host_probe.h) as a readable
// table, and a CPU model's CPUID leaves decoded. See docs/host-support.md.
#ifndef VBTS_VMM_INFO_H_
#define VBTS_VMM_INFO_H_

#include <string>

#include "pmu/cpu_model.h"
#include "vcpu/host_facts.h"

namespace vbts::vmm {

// Sections: KVM, host CPU, capabilities, in-kernel PMU/LBR, guest single-step
// and breakpoints per mode, instructions, and what vbts does on this host.
// `verbose` adds raw values (capability numbers, CPUID words, probe counts).
std::string FormatHostInfo(const vcpu::HostFacts& facts, bool verbose = false);

// CPUID leaves 0, 1, 0xA and 0x80000001 of `model`, decoded: vendor,
// family/model/stepping, DS/DTES64/DS-CPL/PDCM, perfmon version, counters and
// widths, and the extended feature bits vbts guests use.
std::string FormatCpuModel(const pmu::CpuModel& model);

// `vbts info [--cpu=MODEL] [-v]`: opens /dev/kvm, probes, prints the table
// (and the model's CPUID when `cpu_model` is not empty) to stdout and returns
// 0. On failure prints one line to stderr and returns 116 (no /dev/kvm, an
// ioctl failed, unknown model).
int RunInfo(bool verbose, const std::string& cpu_model);

}  // namespace vbts::vmm

#endif  // VBTS_VMM_INFO_H_
