// host_probe_kvmtest.cc: ProbeHost on the real /dev/kvm. On a PVM host the
// facts measured in docs/host-support.md (and shared/kvm-host-facts.md) must
// come out; on VT-x/SVM hosts everything vbts probes works natively.
#include "vmm/host_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/testing/status_matchers.h"

namespace vbts::vmm {
namespace {

using ::testing::HasSubstr;
using vcpu::Tristate;

class HostProbeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::access("/dev/kvm", R_OK | W_OK) != 0) return;
    absl::StatusOr<Kvm> kvm = Kvm::Open();
    if (!kvm.ok()) return;
    absl::StatusOr<HostFacts> f = ProbeHost(*kvm);
    status_ = new absl::Status(f.status());
    if (f.ok()) facts_ = new HostFacts(*f);
  }
  void SetUp() override {
    if (status_ == nullptr) GTEST_SKIP() << "/dev/kvm is not usable here";
    ASSERT_THAT(*status_, testing::IsOk());
  }
  static const HostFacts& F() { return *facts_; }
  static absl::Status* status_;
  static HostFacts* facts_;
};
absl::Status* HostProbeTest::status_ = nullptr;
HostFacts* HostProbeTest::facts_ = nullptr;

TEST_F(HostProbeTest, BasicFactsOnAnyHost) {
  EXPECT_EQ(F().api_version, 12);
  EXPECT_FALSE(F().cpu_vendor.empty());
  EXPECT_FALSE(F().kind_evidence.empty());
  EXPECT_NE(F().kind, HostKind::kUnknown) << F().kind_evidence;
  EXPECT_GT(F().cap_set_guest_debug, 0);
  // Every vbts host single-steps emulated or hardware-virtualised ring 0.
  EXPECT_EQ(F().step_pm32_cpl0.outcome, ProbeOutcome::kWorks) << F().step_pm32_cpl0.detail;
  EXPECT_EQ(F().step_lm64_cpl0.outcome, ProbeOutcome::kWorks) << F().step_lm64_cpl0.detail;
  // No probe may fail to set up or hang.
  for (const ProbeResult* r : {&F().step_pm32_cpl0, &F().step_pm32_cpl3, &F().step_lm64_cpl0, &F().step_lm64_cpl3,
                               &F().iret_pm32, &F().int_pm32_cpl0, &F().int_pm32_cpl3, &F().cpuid_leaf1,
                               &F().cpuid_lm64_cpl3, &F().far_ret_outer_pm32, &F().hlt_step, &F().paging32,
                               &F().hw_bp_rf_pm32, &F().hw_bp_lm64_cpl3, &F().data_bp_pm32}) {
    EXPECT_NE(r->outcome, ProbeOutcome::kProbeError) << r->detail;
    EXPECT_NE(r->outcome, ProbeOutcome::kTimeout) << r->detail;
    EXPECT_NE(r->outcome, ProbeOutcome::kNotTested) << r->detail;
  }
  std::printf("ProbeHost: %.2f ms, %d KVM_RUN returns\n", F().probe_ms, F().probe_exits);
  EXPECT_LT(F().probe_ms, 500.0);
}

TEST_F(HostProbeTest, PvmHostMatchesMeasuredFacts) {
  if (F().kind != HostKind::kPvm) GTEST_SKIP() << "not a PVM host: " << F().kind_evidence;
  const HostFacts& f = F();
  EXPECT_EQ(f.step_pm32_cpl3.outcome, ProbeOutcome::kWorks) << f.step_pm32_cpl3.detail;
  EXPECT_EQ(f.step_lm64_cpl3.outcome, ProbeOutcome::kNotIntercepted) << f.step_lm64_cpl3.detail;
  EXPECT_EQ(f.iret_pm32.outcome, ProbeOutcome::kInternalError) << f.iret_pm32.detail;
  EXPECT_EQ(f.int_pm32_cpl0.outcome, ProbeOutcome::kInternalError) << f.int_pm32_cpl0.detail;
  EXPECT_EQ(f.int_pm32_cpl3.outcome, ProbeOutcome::kGuestUd) << f.int_pm32_cpl3.detail;
  EXPECT_EQ(f.cpuid_leaf1.outcome, ProbeOutcome::kDiffers) << f.cpuid_leaf1.detail;
  EXPECT_EQ(f.cpuid1_edx_set & (1u << 21), 1u << 21);
  EXPECT_EQ(f.cpuid1_edx_seen & (1u << 21), 0u) << "DS (CPUID.1:EDX[21]) should be dropped";
  // CPUID in native 64-bit ring 3 runs on the host CPU: an Intel host has
  // CPUID faulting, so KVM sees it and answers with the CPUID vbts set
  // (measured on family 6 model 0xA7, 2026-11-23); the AMD host vbts was
  // first measured on has none, and the guest reads the host's values.
  EXPECT_EQ(f.cpuid_lm64_cpl3.outcome,
            f.cpu_vendor == "GenuineIntel" ? ProbeOutcome::kWorks : ProbeOutcome::kNotIntercepted)
      << f.cpu_vendor << ": " << f.cpuid_lm64_cpl3.detail;
  EXPECT_EQ(f.far_ret_outer_pm32.outcome, ProbeOutcome::kInternalError) << f.far_ret_outer_pm32.detail;
  EXPECT_EQ(f.hlt_step.outcome, ProbeOutcome::kDiffers) << f.hlt_step.detail;
  EXPECT_EQ(f.paging32.outcome, ProbeOutcome::kGuestFault) << f.paging32.detail;
  EXPECT_THAT(f.paging32.detail, HasSubstr("#GP"));
  EXPECT_EQ(f.hw_bp_rf_pm32.outcome, ProbeOutcome::kDiffers) << f.hw_bp_rf_pm32.detail;
  EXPECT_EQ(f.hw_bp_lm64_cpl3.outcome, ProbeOutcome::kNotIntercepted) << f.hw_bp_lm64_cpl3.detail;
  EXPECT_EQ(f.data_bp_pm32.outcome, ProbeOutcome::kDiffers) << f.data_bp_pm32.detail;
  EXPECT_THAT(f.data_bp_pm32.detail, HasSubstr("without the breakpoint"));
  // What vbts does about it.
  EXPECT_TRUE(f.needs_cpuid_completion);
  EXPECT_TRUE(f.needs_int_completion_cpl0);
  EXPECT_TRUE(f.needs_int_completion_cpl3);
  EXPECT_TRUE(f.needs_iret_completion);
  EXPECT_TRUE(f.needs_far_ret_completion);
  EXPECT_TRUE(f.needs_supervision);
  EXPECT_TRUE(f.native_user_needs_tf_trick);
  EXPECT_TRUE(f.needs_hlt_emulation);
  EXPECT_TRUE(f.breakpoints_need_step_over);
  EXPECT_TRUE(f.paging32_unsupported);
  EXPECT_TRUE(f.emulate_data_breakpoints);
  // The PVM hosts measured so far have kvm.enable_pmu=N (and the AMD one no
  // Intel LBRs), so KVM cannot virtualise LBRs.
  EXPECT_FALSE(f.lbr_virtualization);
  EXPECT_FALSE(f.lbr_reason.empty());
}

TEST_F(HostProbeTest, HardwareVirtualisationHostRunsEverything) {
  if (F().kind != HostKind::kVmx && F().kind != HostKind::kSvm)
    GTEST_SKIP() << "not a VT-x/SVM host: " << F().kind_evidence;
  const HostFacts& f = F();
  for (const ProbeResult* r : {&f.step_pm32_cpl3, &f.step_lm64_cpl3, &f.iret_pm32, &f.int_pm32_cpl0,
                               &f.int_pm32_cpl3, &f.cpuid_leaf1, &f.cpuid_lm64_cpl3, &f.far_ret_outer_pm32,
                               &f.hlt_step, &f.paging32, &f.hw_bp_rf_pm32, &f.hw_bp_lm64_cpl3})
    EXPECT_EQ(r->outcome, ProbeOutcome::kWorks) << r->detail;
  EXPECT_FALSE(f.needs_supervision);
  EXPECT_FALSE(f.native_user_needs_tf_trick);
  EXPECT_FALSE(f.needs_iret_completion);
  EXPECT_FALSE(f.needs_int_completion_cpl0);
  EXPECT_FALSE(f.needs_int_completion_cpl3);
  EXPECT_FALSE(f.needs_cpuid_completion);
}

TEST_F(HostProbeTest, RepeatableAndDoesNotLeakSignals) {
  absl::StatusOr<Kvm> kvm = Kvm::Open();
  ASSERT_THAT(kvm, testing::IsOk());
  for (int i = 0; i < 3; i++) {
    absl::StatusOr<HostFacts> again = ProbeHost(*kvm);
    ASSERT_THAT(again, testing::IsOk());
    EXPECT_EQ(again->iret_pm32.outcome, F().iret_pm32.outcome);
    EXPECT_EQ(again->int_pm32_cpl3.outcome, F().int_pm32_cpl3.outcome);
    EXPECT_EQ(again->hlt_step.outcome, F().hlt_step.outcome);
    EXPECT_EQ(again->needs_supervision, F().needs_supervision);
  }
  // The watchdog timer is gone: sleeping a while must not kill the process
  // (an unhandled real-time signal would).
  ::usleep(20000);
}

TEST_F(HostProbeTest, TinyTimeoutsEndProbesInsteadOfHanging) {
  absl::StatusOr<Kvm> kvm = Kvm::Open();
  ASSERT_THAT(kvm, testing::IsOk());
  ProbeOptions o;
  o.max_exits_per_probe = 1;  // every stepping probe needs more than one exit
  absl::StatusOr<HostFacts> f = ProbeHost(*kvm, o);
  ASSERT_THAT(f, testing::IsOk());
  EXPECT_EQ(f->step_pm32_cpl0.outcome, ProbeOutcome::kTimeout) << f->step_pm32_cpl0.detail;
}

}  // namespace
}  // namespace vbts::vmm
