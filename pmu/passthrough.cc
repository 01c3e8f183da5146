// passthrough.cc: host LBR geometry and the guest model of
// `--vpmu=passthrough` (pmu/passthrough.h, docs/pmu-model.md).
#include "pmu/passthrough.h"

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace vbts::pmu {
namespace {

constexpr uint64_t kLbrFormatMask = 0x3F;
// PERF_CAPABILITIES[5:0] = 3FH: the CPU has architectural LBRs (CPUID leaf
// 1CH, MSRs 14xxH; SDM vol. 3B ch. 18 "Architectural Last Branch Records")
// instead of the model-specific stack.  KVM virtualises only the latter.
constexpr uint64_t kLbrFormatArch = 0x3F;
// Formats 5 and up keep the cycle count and flags in MSR_LBR_INFO_x (DC0H+).
constexpr uint64_t kLbrFormatInfo = 5;

struct Family {
  const char* name;
  std::initializer_list<uint32_t> models;  // display models (family 6)
  int entries;
  uint32_t from_base, to_base;
  bool select;  // MSR_LBR_SELECT (1C8H)
};

// LBR stack per microarchitecture: SDM vol. 3B table 17-4 ("LBR Stack Size
// and TOS Pointer Range") and sections 17.5 (Core 2, Atom: MSR_LASTBRANCH_n
// FROM/TO at 40H/60H), 17.6/17.7 (Silvermont, Goldmont), 17.9 (Nehalem …
// Broadwell: 680H/6C0H, 16 entries), 17.10–17.12 (Skylake and later client
// and server cores, Goldmont: 32 entries), 17.8.2? (Knights Landing: 8 at
// 680H).  Cores with architectural LBRs are refused by their format, above.
const Family kFamilies[] = {
    {"Core 2", {0x0F, 0x16, 0x17, 0x1D}, 4, 0x40, 0x60, false},
    {"Atom (Bonnell, Saltwell)", {0x1C, 0x26, 0x27, 0x35, 0x36}, 8, 0x40, 0x60, false},
    {"Atom (Silvermont, Airmont)", {0x37, 0x4A, 0x4C, 0x4D, 0x5A, 0x5D}, 8, 0x40, 0x60, true},
    {"Nehalem, Westmere", {0x1A, 0x1E, 0x1F, 0x2E, 0x25, 0x2C, 0x2F}, 16, 0x680, 0x6C0, true},
    {"Sandy Bridge … Broadwell",
     {0x2A, 0x2D, 0x3A, 0x3E, 0x3C, 0x3F, 0x45, 0x46, 0x3D, 0x47, 0x4F, 0x56},
     16, 0x680, 0x6C0, true},
    {"Knights Landing, Knights Mill", {0x57, 0x85}, 8, 0x680, 0x6C0, true},
    {"Goldmont, Goldmont Plus", {0x5C, 0x5F, 0x7A}, 32, 0x680, 0x6C0, true},
    {"Skylake … Rocket Lake, Ice Lake, Tiger Lake",
     {0x4E, 0x5E, 0x55, 0x8E, 0x9E, 0xA5, 0xA6, 0x66, 0x7D, 0x7E, 0x6A, 0x6C, 0x8C, 0x8D, 0xA7, 0xA8},
     32, 0x680, 0x6C0, true},
};

}  // namespace

uint32_t DisplayFamily(uint32_t eax) {
  const uint32_t family = (eax >> 8) & 0xF;
  return family == 0xF ? family + ((eax >> 20) & 0xFF) : family;
}

uint32_t DisplayModel(uint32_t eax) {
  const uint32_t family = (eax >> 8) & 0xF, model = (eax >> 4) & 0xF;
  return (family == 6 || family == 0xF) ? model | (((eax >> 16) & 0xF) << 4) : model;
}

absl::StatusOr<LbrModel> HostLbrGeometry(const HostPmu& host) {
  const uint32_t family = DisplayFamily(host.cpuid1_eax), model = DisplayModel(host.cpuid1_eax);
  if (host.vendor != "GenuineIntel")
    return absl::FailedPreconditionError(absl::StrFormat(
        "host CPU is %s (KVM virtualises LBRs only on Intel)", host.vendor.empty() ? "unknown" : host.vendor));
  if (!host.enable_pmu) return absl::FailedPreconditionError("kvm.enable_pmu=N");
  if (!host.perf_capabilities_known)
    return absl::FailedPreconditionError("KVM reports no PERF_CAPABILITIES (0x345) feature MSR");
  const uint64_t format = host.perf_capabilities & kLbrFormatMask;
  if (format == kLbrFormatArch)
    return absl::FailedPreconditionError(
        "the host has architectural LBRs (PERF_CAPABILITIES[5:0]=3FH), which KVM does not virtualise");
  if (format == 0)
    return absl::FailedPreconditionError(
        absl::StrFormat("PERF_CAPABILITIES=0x%x has LBR format 0", host.perf_capabilities));
  if (family != 6)
    return absl::FailedPreconditionError(absl::StrFormat("host family 0x%x: no known LBR stack", family));
  for (const Family& f : kFamilies) {
    for (uint32_t m : f.models) {
      if (m != model) continue;
      if (host.perf_lbr_entries && host.perf_lbr_entries != f.entries)
        return absl::FailedPreconditionError(absl::StrFormat(
            "host 06_%02XH (%s) should have %d LBRs but perf found %d", model, f.name, f.entries,
            host.perf_lbr_entries));
      LbrModel l;
      l.entries = f.entries;
      l.from_base = f.from_base;
      l.to_base = f.to_base;
      l.info_base = format >= kLbrFormatInfo ? 0xDC0 : 0;
      l.tos = 0x1C9;
      l.format = static_cast<int>(format);
      l.packed = false;
      l.select = f.select;
      return l;
    }
  }
  return absl::FailedPreconditionError(
      absl::StrFormat("vbts does not know the LBR stack of host model 06_%02XH", model));
}

absl::StatusOr<CpuModel> PassthroughModel(const CpuModel& base, const HostPmu& host) {
  absl::StatusOr<LbrModel> lbr = HostLbrGeometry(host);
  if (!lbr.ok()) return lbr.status();
  if (base.pmu.perfmon_version < 1 || !base.pmu.pdcm)
    return absl::FailedPreconditionError(absl::StrFormat(
        "--cpu=%s has no IA32_PERF_CAPABILITIES (PDCM) or no architectural perfmon; KVM virtualises LBRs "
        "only for guests with both",
        base.name));
  CpuModel m = base;
  m.name = base.name + "+host-lbr";
  m.description = absl::StrFormat("%s, with the host's LBR stack (%d entries, format %d; host signature %08XH)",
                                  base.description, lbr->entries, lbr->format, host.cpuid1_eax);
  for (CpuidLeaf& l : m.leaves)
    if (l.function == 1) l.eax = host.cpuid1_eax;  // KVM: guest model must be the host's
  m.pmu.lbr = *lbr;
  m.pmu.perf_capabilities = (base.pmu.perf_capabilities & ~kLbrFormatMask) | static_cast<uint64_t>(lbr->format);
  return m;
}

uint64_t KernelPerfCapabilities(const HostPmu& host) { return host.perf_capabilities & kLbrFormatMask; }

}  // namespace vbts::pmu
