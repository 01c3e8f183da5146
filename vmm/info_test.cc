// info_test.cc: `vbts info` formatting from synthetic HostFacts (no /dev/kvm),
// host-kind detection and the policy derived from probe results.
#include "vmm/info.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vmm/host_probe.h"

namespace vbts::vmm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using vcpu::ProbeOutcome;
using vcpu::ProbeResult;
using vcpu::Tristate;

ProbeResult R(ProbeOutcome o, const char* d) { return ProbeResult{o, d}; }

// This project's CI host as measured (docs/host-support.md).
HostFacts PvmFacts() {
  HostFacts f;
  f.api_version = 12;
  f.kernel_release = "6.18.44";
  f.cpu_vendor = "AuthenticAMD";
  f.cpu_family = 0x1A;
  f.cpu_model = 0x2;
  f.cpu_stepping = 1;
  f.cpu_name = "AMD EPYC";
  f.cpu_flag_hypervisor = true;
  f.kind = HostKind::kPvm;
  f.kind_evidence = "module kvm_pvm; cpu flags: no vmx, no svm, hypervisor";
  f.cap_user_space_msr = f.cap_msr_filter = f.cap_set_guest_debug = 1;
  f.guest_debug_flags = 0x1F0003;
  f.sync_regs_mask = 7;
  f.sync_regs = true;
  f.cap_irqchip = f.cap_signal_msi = f.cap_vcpu_events = 1;
  f.enable_pmu = Tristate::kNo;
  f.perf_capabilities_known = true;
  f.lbr_reason = "host CPU is AuthenticAMD; kvm.enable_pmu=N";
  f.step_pm32_cpl0 = f.step_pm32_cpl3 = f.step_lm64_cpl0 = R(ProbeOutcome::kWorks, "3 stops");
  f.step_lm64_cpl3 = R(ProbeOutcome::kNotIntercepted, "guest #DB");
  f.iret_pm32 = R(ProbeOutcome::kInternalError, "IE at iret");
  f.int_pm32_cpl0 = R(ProbeOutcome::kInternalError, "IE at int");
  f.int_pm32_cpl3 = R(ProbeOutcome::kGuestUd, "guest #UD");
  f.cpuid_leaf1 = R(ProbeOutcome::kDiffers, "DS dropped");
  f.cpuid_lm64_cpl3 = R(ProbeOutcome::kNotIntercepted, "host values");
  f.far_ret_outer_pm32 = R(ProbeOutcome::kInternalError, "IE at retf");
  f.hlt_step = R(ProbeOutcome::kDiffers, "fell through");
  f.paging32 = R(ProbeOutcome::kGuestFault, "#GP");
  f.hw_bp_rf_pm32 = R(ProbeOutcome::kDiffers, "RF ignored");
  f.hw_bp_lm64_cpl3 = R(ProbeOutcome::kNotIntercepted, "never fired");
  f.probe_ms = 5.9;
  f.probe_exits = 29;
  vcpu::DeriveHostPolicy(f);
  return f;
}

HostFacts VmxFacts() {
  HostFacts f = PvmFacts();
  f.kind = HostKind::kVmx;
  f.cpu_vendor = "GenuineIntel";
  f.cpu_flag_vmx = true;
  for (ProbeResult* r : {&f.step_lm64_cpl3, &f.iret_pm32, &f.int_pm32_cpl0, &f.int_pm32_cpl3, &f.cpuid_leaf1,
                         &f.cpuid_lm64_cpl3, &f.far_ret_outer_pm32, &f.hlt_step, &f.paging32, &f.hw_bp_rf_pm32,
                         &f.hw_bp_lm64_cpl3})
    *r = R(ProbeOutcome::kWorks, "fine");
  f.enable_pmu = Tristate::kYes;
  f.perf_capabilities = 0x32C5;
  f.lbr_virtualization = true;
  f.lbr_reason = "Intel host, kvm.enable_pmu=Y, PERF_CAPABILITIES LBR format 5";
  vcpu::DeriveHostPolicy(f);
  return f;
}

// The value column of every "  label  value" row starts at the same place.
TEST(FormatHostInfoTest, RowsAreAligned) {
  for (bool verbose : {false, true}) {
    const std::string text = FormatHostInfo(PvmFacts(), verbose);
    int rows = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (line.empty() || line[0] != ' ') continue;  // section titles, blank lines
      rows++;
      ASSERT_GE(line.size(), 34u) << line;
      EXPECT_EQ(line.substr(0, 2), "  ") << line;
      EXPECT_NE(line[33], ' ') << "value not at column 34: " << line;
      EXPECT_EQ(line[32], ' ') << "label too long: " << line;
    }
    EXPECT_GT(rows, 35);
  }
}

TEST(FormatHostInfoTest, SectionsInOrder) {
  const std::string text = FormatHostInfo(PvmFacts());
  const std::vector<std::string> sections = {"KVM\n", "Host CPU\n", "Capabilities\n", "In-kernel PMU / LBR\n",
                                             "Guest single-step and breakpoints", "Instructions",
                                             "What vbts does on this host\n"};
  size_t at = 0;
  for (const std::string& s : sections) {
    size_t pos = text.find(s, at);
    ASSERT_NE(pos, std::string::npos) << s;
    at = pos;
  }
}

TEST(FormatHostInfoTest, PvmHostShowsFailuresAndCompletion) {
  const std::string text = FormatHostInfo(PvmFacts());
  EXPECT_THAT(text, HasSubstr("PVM (kvm_pvm)  [module kvm_pvm; cpu flags: no vmx, no svm, hypervisor]"));
  EXPECT_THAT(text, HasSubstr("0x1f0003 (ENABLE SINGLESTEP USE_SW_BP USE_HW_BP INJECT_DB INJECT_BP BLOCKIRQ)"));
  EXPECT_THAT(text, HasSubstr("SYNC_REGS                      yes (regs sregs events)"));
  EXPECT_THAT(text, HasSubstr("kvm.enable_pmu                 N"));
  EXPECT_THAT(text, HasSubstr("IRETD pm32 CPL0                INTERNAL ERROR   IE at iret"));
  EXPECT_THAT(text, HasSubstr("INT 0x30 pm32 CPL3 (DPL3 gate) GUEST #UD        guest #UD"));
  EXPECT_THAT(text, HasSubstr("single-step lm64 CPL3          NOT INTERCEPTED  guest #DB"));
  EXPECT_THAT(text, HasSubstr("supervision                    yes: INT n at CPL3 becomes a guest fault, CPUID is "
                              "rewritten; the guest runs free, guarded by KVM hardware breakpoints"));
  EXPECT_THAT(text, HasSubstr("INT n #UD guard                yes: breakpoint on the guest's #UD handler"));
  EXPECT_THAT(text, HasSubstr("TF trick"));
  EXPECT_THAT(text, HasSubstr("32-bit paging                  unsupported"));
  EXPECT_THAT(text, HasSubstr("probe time                     5.9 ms (29 KVM_RUN returns)"));
  EXPECT_THAT(text, Not(HasSubstr("Raw values")));
  EXPECT_THAT(FormatHostInfo(PvmFacts(), true), HasSubstr("Raw values"));
}

TEST(FormatHostInfoTest, GuestTimeShowsTheTscAndWhatLinuxReadsFromLeaf15H) {
  // The AMD EPYC host of 2026-11-27: 2 596 122 kHz.  The closest ratio with
  // EBX <= 0xFFFFFFFF / 1 000 000 = 4294 over the 1 GHz crystal is 3079/1186
  // (pmu::BestRatio; CpuModel.TscFrequencyLeavesGiveTheTscOverTheLapicCrystal),
  // and Linux's 32-bit 1 000 000 * 3079 / 1186 truncates to 2 596 121.
  HostFacts f = PvmFacts();
  f.vcpu_tsc_khz = 2596122;
  const std::string text = FormatHostInfo(f);
  EXPECT_THAT(text, HasSubstr("vCPU TSC (KVM_GET_TSC_KHZ)     2596122 kHz, in both engines"));
  EXPECT_THAT(text, HasSubstr("CPUID 15H                      skylake, icelake-server: EBX/EAX = 3079/1186 over a "
                              "1000000000 Hz crystal (the LAPIC timer's clock), from which Linux computes 2596121 kHz"));
  f.vcpu_tsc_khz = 0;
  EXPECT_THAT(FormatHostInfo(f), HasSubstr("vCPU TSC (KVM_GET_TSC_KHZ)     not reported"));
}

TEST(FormatHostInfoTest, PvmHostRefusesPassthroughWithTheReason) {
  EXPECT_THAT(FormatHostInfo(PvmFacts()),
              HasSubstr("passthrough                    unavailable: host CPU is AuthenticAMD; kvm.enable_pmu=N"));
}

TEST(FormatHostInfoTest, VmxHostNeedsNothing) {
  const std::string text = FormatHostInfo(VmxFacts());
  EXPECT_THAT(text, HasSubstr("supervision                    no: guests run at KVM speed"));
  EXPECT_THAT(text, HasSubstr("INT n #UD guard                no"));
  EXPECT_THAT(text, HasSubstr("IRET completion                no"));
  EXPECT_THAT(text, HasSubstr("native 64-bit user code        stepped by KVM"));
  EXPECT_THAT(text, HasSubstr("in-kernel LBR virtualisation   yes: Intel host"));
  EXPECT_THAT(text, HasSubstr("passthrough                    available: the guest's LBR stack is the host's"));
  EXPECT_THAT(text, Not(HasSubstr("INTERNAL ERROR")));
}

TEST(FormatCpuModelTest, WestmereDecoded) {
  const pmu::CpuModel* m = pmu::FindCpuModel("westmere");
  ASSERT_NE(m, nullptr);
  const std::string text = FormatCpuModel(*m);
  EXPECT_THAT(text, HasSubstr("GenuineIntel, 0xb"));
  EXPECT_THAT(text, HasSubstr("0x6 / 0x2c / 2"));
  EXPECT_THAT(text, HasSubstr("DS=1 DTES64=1 DS-CPL=1 PDCM=1"));
  EXPECT_THAT(text, HasSubstr("PEBS                           record format 1 (0xB0-byte records)"));
  EXPECT_THAT(text, ::testing::ContainsRegex("perfmon version +3\n"));
  EXPECT_THAT(text, HasSubstr("4 x 48 bits, 7 events"));
  EXPECT_THAT(text, HasSubstr("3 x 48 bits"));
  EXPECT_THAT(text, HasSubstr("LM=1 NX=1 SYSCALL=1"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("NetBurst counters")));
}

TEST(FormatCpuModelTest, Pentium4ShowsNetBurstCounters) {
  const pmu::CpuModel* m = pmu::FindCpuModel("pentium4");
  ASSERT_NE(m, nullptr);
  const std::string text = FormatCpuModel(*m);
  EXPECT_THAT(text, HasSubstr("no architectural perfmon"));
  EXPECT_THAT(text, HasSubstr("NetBurst counters              18 x 40 bits (300H-311H)"));
  EXPECT_THAT(text, HasSubstr("IA32_MISC_ENABLE               0x81\n"));
  EXPECT_THAT(text, HasSubstr("PEBS                           NetBurst: MSR_IQ_COUNTER4 with MSR_PEBS_ENABLE bit 25"));
}

TEST(DetectHostKindTest, ModulesDecide) {
  std::string ev;
  EXPECT_EQ(DetectHostKind(false, false, true, false, false, &ev), HostKind::kPvm);
  EXPECT_EQ(ev, "module kvm_pvm; cpu flags: no vmx, no svm");
  EXPECT_EQ(DetectHostKind(true, false, false, true, false, &ev), HostKind::kVmx);
  EXPECT_EQ(ev, "module kvm_intel; cpu flags: vmx, no svm");
  EXPECT_EQ(DetectHostKind(false, true, false, false, true, &ev), HostKind::kSvm);
  EXPECT_EQ(DetectHostKind(false, false, false, true, false, &ev), HostKind::kUnknown);
  EXPECT_THAT(ev, HasSubstr("no KVM vendor module loaded"));
}

TEST(DeriveHostPolicyTest, PvmNeedsEverything) {
  const HostFacts f = PvmFacts();
  EXPECT_TRUE(f.needs_cpuid_completion);
  EXPECT_TRUE(f.needs_int_completion_cpl0);
  EXPECT_TRUE(f.needs_int_completion_cpl3);
  EXPECT_TRUE(f.needs_iret_completion);
  EXPECT_TRUE(f.needs_far_ret_completion);
  EXPECT_TRUE(f.needs_supervision);
  EXPECT_TRUE(f.needs_ud_guard);
  EXPECT_TRUE(f.native_user_needs_tf_trick);
  EXPECT_TRUE(f.needs_hlt_emulation);
  EXPECT_TRUE(f.breakpoints_need_step_over);
  EXPECT_TRUE(f.paging32_unsupported);
}

TEST(DeriveHostPolicyTest, InternalErrorsAloneDoNotNeedStepping) {
  HostFacts f = VmxFacts();
  f.iret_pm32 = R(ProbeOutcome::kInternalError, "IE");
  f.int_pm32_cpl3 = R(ProbeOutcome::kInternalError, "IE");
  vcpu::DeriveHostPolicy(f);
  EXPECT_TRUE(f.needs_iret_completion);
  EXPECT_TRUE(f.needs_int_completion_cpl3);
  EXPECT_FALSE(f.needs_supervision);  // KVM reports them: complete on demand
  EXPECT_FALSE(f.needs_ud_guard);
  f.cpuid_leaf1 = R(ProbeOutcome::kDiffers, "rewritten");
  vcpu::DeriveHostPolicy(f);
  EXPECT_TRUE(f.needs_supervision);
  EXPECT_FALSE(f.needs_ud_guard);  // only CPUID: no #UD guard
}

TEST(DeriveHostPolicyTest, UntestedProbesNeedNothing) {
  HostFacts f;
  vcpu::DeriveHostPolicy(f);
  EXPECT_FALSE(f.needs_supervision);
  EXPECT_FALSE(f.native_user_needs_tf_trick);
  EXPECT_FALSE(f.needs_iret_completion);
}

}  // namespace
}  // namespace vbts::vmm
