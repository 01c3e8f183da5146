// info.cc: formatting of HostFacts and CPU models for `vbts info`.
#include "vmm/info.h"

#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "pmu/cpu_model.h"
#include "vcpu/descriptors.h"
#include "vcpu/lapic.h"
#include "vcpu/tcg_cpu.h"
#include "vmm/host_probe.h"
#include "vmm/sandbox.h"
#include "vmm/kvm_vm.h"

namespace vbts::vmm {
namespace {

using vcpu::ProbeOutcome;
using vcpu::ProbeResult;
using vcpu::Tristate;

constexpr int kLabelWidth = 30;
constexpr int kOutcomeWidth = 16;
constexpr int kExitVbtsError = 116;

void Section(std::string& out, const char* title) {
  if (!out.empty()) out += "\n";
  absl::StrAppend(&out, title, "\n");
}

void Row(std::string& out, const std::string& label, const std::string& value) {
  absl::StrAppendFormat(&out, "  %-*s %s\n", kLabelWidth, label, value);
}

void ProbeRow(std::string& out, const std::string& label, const ProbeResult& r) {
  Row(out, label, absl::StrFormat("%-*s %s", kOutcomeWidth, vcpu::ProbeOutcomeName(r.outcome), r.detail));
}

std::string YesNo(bool b) { return b ? "yes" : "no"; }

std::string Cap(int v) { return v > 0 ? (v == 1 ? "yes" : absl::StrFormat("yes (%d)", v)) : "no"; }

std::string GuestDebugFlags(uint32_t f) {
  static const struct {
    uint32_t bit;
    const char* name;
  } kBits[] = {{0x1, "ENABLE"},       {0x2, "SINGLESTEP"}, {0x10000, "USE_SW_BP"}, {0x20000, "USE_HW_BP"},
               {0x40000, "INJECT_DB"}, {0x80000, "INJECT_BP"}, {0x100000, "BLOCKIRQ"}};
  std::vector<std::string> names;
  for (const auto& b : kBits)
    if (f & b.bit) names.push_back(b.name);
  return absl::StrFormat("0x%x (%s)", f, names.empty() ? "none" : absl::StrJoin(names, " "));
}

std::string SyncRegs(uint32_t m) {
  std::vector<std::string> names;
  if (m & KVM_SYNC_X86_REGS) names.push_back("regs");
  if (m & KVM_SYNC_X86_SREGS) names.push_back("sregs");
  if (m & KVM_SYNC_X86_EVENTS) names.push_back("events");
  if (names.empty()) return "no";
  return absl::StrFormat("yes (%s)", absl::StrJoin(names, " "));
}

const char* TristateName(Tristate t) {
  switch (t) {
    case Tristate::kYes: return "Y";
    case Tristate::kNo: return "N";
    case Tristate::kAbsent: break;
  }
  return "absent";
}

// "yes: why" / "no" for one completion path.
std::string Need(bool needed, const std::string& how) { return needed ? absl::StrCat("yes: ", how) : "no"; }

}  // namespace

std::string FormatHostInfo(const vcpu::HostFacts& f, bool verbose) {
  std::string out;
  Section(out, "KVM");
  Row(out, "API version", absl::StrCat(f.api_version));
  Row(out, "kernel", f.kernel_release.empty() ? "?" : f.kernel_release);
  Row(out, "host kind", absl::StrCat(vcpu::HostKindName(f.kind), "  [", f.kind_evidence, "]"));

  Section(out, "Host CPU");
  Row(out, "vendor", f.cpu_vendor.empty() ? "?" : f.cpu_vendor);
  Row(out, "family / model / stepping",
      absl::StrFormat("0x%x / 0x%x / %u", f.cpu_family, f.cpu_model, f.cpu_stepping));
  Row(out, "name", f.cpu_name.empty() ? "?" : f.cpu_name);

  Section(out, "Capabilities");
  Row(out, "X86_USER_SPACE_MSR", Cap(f.cap_user_space_msr));
  Row(out, "X86_MSR_FILTER", Cap(f.cap_msr_filter));
  Row(out, "SET_GUEST_DEBUG",
      f.cap_set_guest_debug > 0 ? absl::StrCat("yes, flags ", GuestDebugFlags(f.guest_debug_flags)) : "no");
  Row(out, "SYNC_REGS", SyncRegs(f.sync_regs_mask));
  Row(out, "IRQCHIP", Cap(f.cap_irqchip));
  Row(out, "SIGNAL_MSI", Cap(f.cap_signal_msi));
  Row(out, "VCPU_EVENTS", Cap(f.cap_vcpu_events));
  Row(out, "EXIT_ON_EMULATION_FAILURE", Cap(f.cap_exit_on_emulation_failure));
  Row(out, "TSC_DEADLINE_TIMER", Cap(f.cap_tsc_deadline_timer));

  Section(out, "Guest time (docs/cpu-models.md, \"TSC frequency leaves\")");
  if (f.vcpu_tsc_khz == 0) {
    Row(out, "vCPU TSC (KVM_GET_TSC_KHZ)", "not reported: CPUID 15H/16H stay 0; the TCG engine's TSC runs at 1 GHz");
  } else {
    Row(out, "vCPU TSC (KVM_GET_TSC_KHZ)", absl::StrFormat("%u kHz, in both engines", f.vcpu_tsc_khz));
    // What a model with leaf 15H (skylake, icelake-server) enumerates, and
    // the frequency Linux computes from it (32-bit, truncating).
    const uint64_t crystal_hz = vcpu::LapicConfig{}.bus_hz;
    const pmu::CpuidResult l15 = pmu::FindCpuModel("skylake")->WithTscFrequency(f.vcpu_tsc_khz, crystal_hz).Cpuid(0x15, 0);
    if (l15.eax != 0 && l15.ebx != 0) {
      const uint32_t linux_khz = static_cast<uint32_t>(static_cast<uint32_t>(l15.ecx / 1000) * l15.ebx) / l15.eax;
      Row(out, "CPUID 15H",
          absl::StrFormat("skylake, icelake-server: EBX/EAX = %u/%u over a %u Hz crystal (the LAPIC timer's "
                          "clock), from which Linux computes %u kHz",
                          l15.ebx, l15.eax, l15.ecx, linux_khz));
    }
  }

  Section(out, "In-kernel PMU / LBR");
  Row(out, "kvm.enable_pmu", TristateName(f.enable_pmu));
  Row(out, "PERF_CAPABILITIES (0x345)",
      f.perf_capabilities_known
          ? absl::StrFormat("0x%x (LBR format %u)", f.perf_capabilities, unsigned(f.perf_capabilities & 0x3F))
          : "not reported by KVM");
  Row(out, "in-kernel LBR virtualisation", absl::StrCat(YesNo(f.lbr_virtualization), ": ", f.lbr_reason));

  Section(out, "Guest single-step and breakpoints (probe guests)");
  ProbeRow(out, "single-step pm32 CPL0", f.step_pm32_cpl0);
  ProbeRow(out, "single-step pm32 CPL3", f.step_pm32_cpl3);
  ProbeRow(out, "single-step lm64 CPL0", f.step_lm64_cpl0);
  ProbeRow(out, "single-step lm64 CPL3", f.step_lm64_cpl3);
  ProbeRow(out, "HLT, IF=1, single-stepped", f.hlt_step);
  ProbeRow(out, "hw breakpoint pm32 CPL0 + RF", f.hw_bp_rf_pm32);
  ProbeRow(out, "hw breakpoint lm64 CPL3", f.hw_bp_lm64_cpl3);
  ProbeRow(out, "guest data bp pm32, stepped", f.data_bp_pm32);

  Section(out, "Instructions (probe guests)");
  ProbeRow(out, "IRETD pm32 CPL0", f.iret_pm32);
  ProbeRow(out, "INT 0x30 pm32 CPL0", f.int_pm32_cpl0);
  ProbeRow(out, "INT 0x30 pm32 CPL3 (DPL3 gate)", f.int_pm32_cpl3);
  ProbeRow(out, "RETF CPL0 -> CPL3 pm32", f.far_ret_outer_pm32);
  ProbeRow(out, "CPUID.1 (DS set) pm32 CPL0", f.cpuid_leaf1);
  ProbeRow(out, "CPUID.1 lm64 CPL3", f.cpuid_lm64_cpl3);
  ProbeRow(out, "32-bit paging (PSE)", f.paging32);

  Section(out, "What vbts does on this host");
  std::vector<std::string> why;
  if (f.int_pm32_cpl3.outcome == ProbeOutcome::kGuestUd || f.int_pm32_cpl3.outcome == ProbeOutcome::kGuestFault)
    why.push_back("INT n at CPL3 becomes a guest fault");
  if (f.needs_cpuid_completion) why.push_back("CPUID is rewritten");
  Row(out, "supervision",
      f.needs_supervision
          ? absl::StrCat("yes: ", absl::StrJoin(why, ", "),
                         "; the guest runs free, guarded by KVM hardware breakpoints (docs/completion.md)")
          : "no: guests run at KVM speed");
  Row(out, "INT n #UD guard",
      Need(f.needs_ud_guard, "breakpoint on the guest's #UD handler; a #UD for INT n is taken back and completed"));
  Row(out, "CPUID completion",
      Need(f.needs_cpuid_completion,
           "vbts answers CPUID from the CPU model at guarded CPUID sites of the image, or everywhere when stepping "
           "(--exact-cpuid)"));
  Row(out, "INT n completion, CPL0", Need(f.needs_int_completion_cpl0, "on KVM_EXIT_INTERNAL_ERROR"));
  Row(out, "INT n completion, CPL3",
      Need(f.needs_int_completion_cpl3, f.needs_ud_guard ? "at the #UD guard, or at the step stop before it"
                                                          : "on KVM_EXIT_INTERNAL_ERROR"));
  Row(out, "IRET completion", Need(f.needs_iret_completion, "on KVM_EXIT_INTERNAL_ERROR"));
  Row(out, "far RET completion", Need(f.needs_far_ret_completion, "on KVM_EXIT_INTERNAL_ERROR"));
  Row(out, "HLT while stepping", Need(f.needs_hlt_emulation, "vbts halts the vCPU itself (KVM_SET_MP_STATE)"));
  Row(out, "native 64-bit user code",
      f.native_user_needs_tf_trick ? "runs natively; when single-stepped: TF trick (TF + hw breakpoint on the guest's "
                                     "#DB handler)"
                                   : "stepped by KVM like other code");
  Row(out, "resuming at a breakpoint",
      f.breakpoints_need_step_over ? "remove it, step once, re-insert (RF ignored)" : "RFLAGS.RF");
  Row(out, "guest data breakpoints",
      f.emulate_data_breakpoints ? "while tracing steps the guest: vbts computes each instruction's data accesses and "
                                   "raises the #DB; on the TCG engine its memory hooks report each hit (docs/tracing.md)"
                                 : "the host raises them; on the TCG engine vbts does, from its memory hooks' hits "
                                   "(docs/tracing.md)");
  Row(out, "32-bit paging",
      f.paging32_unsupported ? "unsupported by KVM: such guests end with status 118 under --engine=kvm; "
                               "--engine=tcg runs them (docs/tcg-engine.md)"
                             : "supported");

  Row(out, "probe time", absl::StrFormat("%.1f ms (%d KVM_RUN returns)", f.probe_ms, f.probe_exits));

  Section(out, "Branch tracing for guests (--vpmu)");
  Row(out, "emulated (default)",
      f.cap_user_space_msr
          ? "available: DS/BTS, LBR, BTF, counters and PMIs emulated by single-stepping the guest while any of them "
            "is on (docs/pmu-model.md); MSRs through a KVM MSR filter"
          : "unavailable: KVM cannot send MSR accesses to user space (no KVM_CAP_X86_USER_SPACE_MSR)");
  Row(out, "passthrough",
      f.lbr_virtualization
          ? absl::StrCat("available: the guest's LBR stack is the host's, kept by KVM (", f.lbr_reason,
                         "; guest CPUID model = the host's); DS/BTS, BTF and counters emulated as above")
          : absl::StrCat("unavailable: ", f.lbr_reason));

  if (verbose) {
    Section(out, "Raw values");
    Row(out, "KVM_CAP_X86_USER_SPACE_MSR", absl::StrCat(f.cap_user_space_msr));
    Row(out, "KVM_CAP_SET_GUEST_DEBUG2", absl::StrFormat("0x%x", f.guest_debug_flags));
    Row(out, "KVM_CAP_SYNC_REGS", absl::StrFormat("0x%x", f.sync_regs_mask));
    Row(out, "CPUID.1:EDX set / seen", absl::StrFormat("0x%08x / 0x%08x", f.cpuid1_edx_set, f.cpuid1_edx_seen));
    Row(out, "vmx / svm / hypervisor flags",
        absl::StrCat(YesNo(f.cpu_flag_vmx), " / ", YesNo(f.cpu_flag_svm), " / ", YesNo(f.cpu_flag_hypervisor)));
  }
  return out;
}

std::string FormatCpuModel(const pmu::CpuModel& m) {
  std::string out;
  Section(out, absl::StrCat("CPU model ", m.name, ": ", m.description).c_str());
  const pmu::CpuidResult l0 = m.Cpuid(0, 0), l1 = m.Cpuid(1, 0), la = m.Cpuid(0xA, 0), le = m.Cpuid(0x80000001, 0);
  char vendor[13] = {};
  for (int i = 0; i < 4; i++) {
    vendor[i] = static_cast<char>(l0.ebx >> (8 * i));
    vendor[4 + i] = static_cast<char>(l0.edx >> (8 * i));
    vendor[8 + i] = static_cast<char>(l0.ecx >> (8 * i));
  }
  auto regs = [](const pmu::CpuidResult& r) {
    return absl::StrFormat("eax=%08x ebx=%08x ecx=%08x edx=%08x", r.eax, r.ebx, r.ecx, r.edx);
  };
  Row(out, "leaf 0", regs(l0));
  Row(out, "  vendor, max basic leaf", absl::StrFormat("%s, 0x%x", vendor, l0.eax));
  Row(out, "leaf 1", regs(l1));
  const uint32_t fam = (l1.eax >> 8) & 0xF, mod = (l1.eax >> 4) & 0xF;
  const uint32_t dfam = fam == 0xF ? fam + ((l1.eax >> 20) & 0xFF) : fam;
  const uint32_t dmod = (fam == 0x6 || fam == 0xF) ? (((l1.eax >> 16) & 0xF) << 4) | mod : mod;
  Row(out, "  family / model / stepping", absl::StrFormat("0x%x / 0x%x / %u", dfam, dmod, l1.eax & 0xF));
  Row(out, "  microcode revision", absl::StrFormat("0x%x (IA32_BIOS_SIGN_ID[63:32])", m.microcode_revision));
  Row(out, "  DS DTES64 DS-CPL PDCM",
      absl::StrFormat("DS=%d DTES64=%d DS-CPL=%d PDCM=%d", (l1.edx & pmu::kCpuid1EdxDs) ? 1 : 0,
                      (l1.ecx & pmu::kCpuid1EcxDtes64) ? 1 : 0, (l1.ecx & pmu::kCpuid1EcxDsCpl) ? 1 : 0,
                      (l1.ecx & pmu::kCpuid1EcxPdcm) ? 1 : 0));
  if (l0.eax < 0xA) {
    // Leaf 0AH beyond the maximum returns the highest basic leaf's data
    // (SDM vol. 2A, CPUID): software must not read it as perfmon.
    Row(out, "leaf 0xA", absl::StrFormat("beyond the maximum basic leaf 0x%x: no architectural perfmon", l0.eax));
  } else {
    Row(out, "leaf 0xA", regs(la));
    Row(out, "  perfmon version", absl::StrCat(la.eax & 0xFF));
    Row(out, "  GP counters x width",
        absl::StrFormat("%u x %u bits, %u events (unavailable mask 0x%x)", (la.eax >> 8) & 0xFF,
                        (la.eax >> 16) & 0xFF, (la.eax >> 24) & 0xFF, la.ebx));
    Row(out, "  fixed counters x width", absl::StrFormat("%u x %u bits", la.edx & 0x1F, (la.edx >> 5) & 0xFF));
  }
  Row(out, "leaf 0x80000001", regs(le));
  Row(out, "  extended features",
      absl::StrFormat("LM=%d NX=%d SYSCALL=%d RDTSCP=%d 1G=%d LAHF=%d", (le.edx >> 29) & 1, (le.edx >> 20) & 1,
                      (le.edx >> 11) & 1, (le.edx >> 27) & 1, (le.edx >> 26) & 1, le.ecx & 1));
  // What the virtual PMU implements for the model (docs/pmu-model.md).
  const pmu::PmuModel& p = m.pmu;
  Section(out, absl::StrCat("Virtual PMU of ", m.name).c_str());
  Row(out, "DS save area", !p.ds ? "none" : p.dtes64 ? "64-bit format (DTES64)" : "32-bit format (64-bit only in IA-32e mode)");
  Row(out, "IA32_PERF_CAPABILITIES", p.pdcm ? absl::StrFormat("0x%x (LBR format %u)", p.perf_capabilities,
                                                               p.perf_capabilities & 0x3F)
                                            : std::string("none (#GP)"));
  Row(out, "IA32_MISC_ENABLE", absl::StrFormat("0x%x", p.misc_enable));
  const unsigned pebs_format = (p.perf_capabilities >> 8) & 0xF;
  Row(out, "PEBS",
      p.ds && p.pdcm && !(p.misc_enable & (1u << 12)) && pebs_format
          ? (pebs_format >= 4
                 ? absl::StrFormat("record format %u (adaptive%s: basic group 0x20 bytes + PEBS_DATA_CFG groups), "
                                   "PMC0-%d and fixed 0-%d, trap-like",
                                   pebs_format, (p.perf_capabilities & pmu::kPerfCapPebsBaseline) ? ", baseline" : "",
                                   p.gp_counters - 1, p.fixed_counters - 1)
                 : absl::StrFormat("record format %u (%s-byte records), PMC0-3, trap-like", pebs_format,
                                   pebs_format >= 3 ? "0xC8" : "0xB0"))
      : p.netburst_perfmon && p.ds && !(p.misc_enable & (1u << 12))
          ? std::string("NetBurst: MSR_IQ_COUNTER4 with MSR_PEBS_ENABLE bit 25, 40-byte records (32-bit DS), "
                        "fault-like (the registers the instruction began with)")
          : std::string("none"));
  if (p.netburst_debugctl)
    Row(out, "MSR_DEBUGCTLA writable bits",
        absl::StrFormat("0x%x (NetBurst layout: LBR 0, BTF 1, TR 2, BTS 3, BTINT 4, BTS_OFF_OS 5, BTS_OFF_USR 6)",
                        p.debugctl_valid));
  else
    Row(out, "IA32_DEBUGCTL writable bits", absl::StrFormat("0x%x", p.debugctl_valid));
  if (p.netburst_perfmon)
    Row(out, "NetBurst counters",
        "18 x 40 bits (300H-311H), CCCRs 360H-371H, 43 ESCRs in 3A0H-3E1H; counted: instr_retired (CRU_ESCR0/1), "
        "branch_retired, front_end_event of uop_type's tagged loads and stores, replay_event of L1D/L2-missing and "
        "split loads and split stores (CRU_ESCR2/3); RDPMC 0-17, bit 31 fast read");
  Row(out, "LBR stack",
      p.lbr.entries == 0 ? std::string("none")
      : p.lbr.packed     ? absl::StrFormat("%d entries, MSR_LASTBRANCH_n at 0x%x (FROM 31:0, TO 63:32), TOS 0x%x",
                                           p.lbr.entries, p.lbr.from_base, p.lbr.tos)
                         : absl::StrFormat("%d entries, FROM 0x%x, TO 0x%x%s, TOS 0x%x%s", p.lbr.entries,
                                           p.lbr.from_base, p.lbr.to_base,
                                           p.lbr.info_base ? absl::StrFormat(", INFO 0x%x", p.lbr.info_base) : "",
                                           p.lbr.tos, p.lbr.select ? ", LBR_SELECT" : ""));
  const auto level = [](const pmu::CacheLevelGeometry& g) {
    const uint64_t kib = g.bytes() / 1024;
    return kib % 1024 ? absl::StrFormat("%u KB %u-way", kib, g.ways) : absl::StrFormat("%u MB %u-way", kib / 1024, g.ways);
  };
  Row(out, "caches (LLC events)",
      absl::StrFormat("inner %s, LLC %s, 64-byte lines, pair prefetch into %s (docs/pmu-model.md)", level(p.cache.inner),
                      level(p.cache.llc),
                      p.cache.pair == pmu::PairPrefetch::kInnerAndLlc ? "both"
                      : p.cache.pair == pmu::PairPrefetch::kLlc       ? "the LLC"
                                                                      : "none"));
  std::string mem;
  if (p.mem_loads_event)
    mem = absl::StrFormat("retired loads/stores %04XH/%04XH, L1D.REPLACEMENT 0151H (L1D %s)", p.mem_loads_event,
                          p.mem_stores_event, level(p.l1d));
  if (p.load_latency_event)
    absl::StrAppendFormat(&mem, "; load latency %04XH with MSR_PEBS_LD_LAT_THRESHOLD", p.load_latency_event);
  if (p.offcore != pmu::PmuModel::OffcoreLayout::kNone)
    absl::StrAppendFormat(&mem, "; OFFCORE_RESPONSE 01B7H/01BBH (%s layout)",
                          p.offcore == pmu::PmuModel::OffcoreLayout::kNehalem ? "Nehalem" : "Skylake");
  Row(out, "memory events", mem.empty() ? std::string("none") : mem + " (docs/pmu-model.md)");
  return out;
}

// The TCG engine on a 32-bit loop of 2 M instructions (mov ecx, 1000000;
// L: dec ecx; jnz L; hlt), without and with a hook on every instruction:
// instructions per second, each from one run.
class NoDevices : public vcpu::TcgDevices {
 public:
  uint32_t PortIn(uint16_t, int) override { return 0; }
  void PortOut(uint16_t, int, uint32_t) override {}
  uint64_t MmioRead(uint64_t, int) override { return 0; }
  void MmioWrite(uint64_t, int, uint64_t) override {}
  Msr ReadMsr(uint32_t, uint64_t&) override { return Msr::kGp; }
  Msr WriteMsr(uint32_t, uint64_t) override { return Msr::kGp; }
  vcpu::CpuidResult Cpuid(uint32_t, uint32_t) override { return {}; }
};

absl::StatusOr<std::pair<double, double>> MeasureTcg() {
  constexpr size_t kRam = 2 << 20;
  void* ram = mmap(nullptr, kRam, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ram == MAP_FAILED) return absl::ResourceExhaustedError("no memory for the TCG measurement");
  NoDevices devices;
  absl::StatusOr<std::unique_ptr<vcpu::TcgCpu>> cpu =
      vcpu::TcgCpu::Create({static_cast<uint8_t*>(ram), kRam, vcpu::TcgCpu::UnicornModelFor("westmere"), &devices});
  if (!cpu.ok()) {
    munmap(ram, kRam);
    return cpu.status();
  }
  const uint8_t code[] = {0xb9, 0x40, 0x42, 0x0f, 0x00, 0x49, 0x75, 0xfd, 0xf4};
  std::memcpy(static_cast<uint8_t*>(ram) + 0x1000, code, sizeof code);
  vcpu::CpuState st;
  st.cr0 = vcpu::kCr0Pe;
  st.cs = vcpu::FlatSegment(0x08, 0xB, 0, /*db=*/true, /*l=*/false);
  st.ds = st.es = st.fs = st.gs = st.ss = vcpu::FlatSegment(0x10, 0x3, 0, true, false);
  st.tr.type = 0xB;
  st.tr.present = true;
  st.tr.limit = 0x67;
  st.ldtr.unusable = true;
  st.rip = 0x1000;
  st.gpr[vcpu::kRsp] = 0x8000;
  double rates[2] = {0, 0};
  absl::Status status;
  for (int hooked = 0; hooked < 2 && status.ok(); hooked++) {
    uint64_t calls = 0;
    (*cpu)->SetInstructionHook(hooked ? std::function<void(uint64_t)>([&calls](uint64_t) { calls++; }) : nullptr);
    status = (*cpu)->SetState(st);
    if (!status.ok()) break;
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<vcpu::TcgStop> stop = (*cpu)->Run(10'000'000);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!stop.ok()) status = stop.status();
    else if (stop->kind != vcpu::TcgStop::kHalted) status = absl::InternalError("the measurement loop did not halt");
    else rates[hooked] = 2'000'002 / s;
  }
  cpu->reset();
  munmap(ram, kRam);
  if (!status.ok()) return status;
  return std::make_pair(rates[0], rates[1]);
}

int RunInfo(bool verbose, const std::string& cpu_model) {
  const pmu::CpuModel* model = nullptr;
  if (!cpu_model.empty()) {
    model = pmu::FindCpuModel(cpu_model);
    if (model == nullptr) {
      std::fprintf(stderr, "vbts: --cpu=%s: unknown CPU model (known: %s)\n", cpu_model.c_str(),
                   pmu::CpuModelNames().c_str());
      return kExitVbtsError;
    }
  }
  absl::StatusOr<Kvm> kvm = Kvm::Open();
  if (!kvm.ok()) {
    std::fprintf(stderr, "vbts: %s\n", std::string(kvm.status().message()).c_str());
    return kExitVbtsError;
  }
  absl::StatusOr<HostFacts> facts = ProbeHost(*kvm);
  if (!facts.ok()) {
    std::fprintf(stderr, "vbts: probing the host's KVM failed: %s\n", std::string(facts.status().message()).c_str());
    return kExitVbtsError;
  }
  std::string text = FormatHostInfo(*facts, verbose);
  Section(text, "Execution engines (--engine, docs/tcg-engine.md)");
  Row(text, "kvm", "the host's KVM; a traced guest is single-stepped: one KVM exit per instruction");
  if (absl::StatusOr<std::pair<double, double>> r = MeasureTcg(); r.ok()) {
    Row(text, "tcg",
        absl::StrFormat("QEMU's TCG in-process (libunicorn 2.0.1): %.0f M instructions/s on a tight loop, "
                        "%.0f M/s with a hook on every instruction; traced, ~0.2-0.35 us per translated block "
                        "(docs/benchmarks.md)",
                        r->first / 1e6, r->second / 1e6));
  } else {
    Row(text, "tcg", absl::StrCat("unavailable: ", r.status().message()));
  }
  Row(text, "kvm-tcg", "kvm, moving the vCPU to tcg while the guest traces itself (BTS, LBR, counters...) or a GDB client needs it");
  Row(text, "auto (default)",
      facts->kind == vcpu::HostKind::kPvm
          ? "tcg on this host (PVM: its KVM emulates guest ring 0 and 32-bit code, which tcg outruns)"
          : "tcg for a run traced from its start (record, --branches, --insns); kvm-tcg otherwise");
  Section(text, "Hardening (docs/security.md)");
  Row(text, "syscall filter",
      absl::StrFormat("seccomp-bpf (libseccomp %s) on every thread of `vbts run`/`record` after setup, "
                      "--sandbox=off to run without; %d calls allowed: %s; any other ends vbts with status 116",
                      SandboxLibraryVersion(), SandboxAllowedCalls().size(),
                      absl::StrJoin(SandboxAllowedCalls(), " ")));
  Row(text, "gdbstub",
      "--gdb listens on 127.0.0.1 unless given another address; one client; its stops are the TCG engine's, "
      "with kvm-tcg the guest runs on KVM while the client sets nothing (docs/gdb.md)");
  if (model != nullptr) {
    absl::StrAppend(&text, "\n", FormatCpuModel(*model));
    if (facts->needs_cpuid_completion)
      Row(text, "on this host",
          "KVM_SET_CPUID2 alone would not show these values (see CPUID.1 above); vbts answers CPUID itself where "
          "it can see it (docs/completion.md)");
  }
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace vbts::vmm
