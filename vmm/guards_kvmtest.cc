// guards_kvmtest.cc: the supervisor's policy on the real host, with the guest
// images guest-tests/tiny/guards_{pm32,lm64}.asm (see their headers for what
// each step does):
//  - on a host that hides failures (HostFacts.needs_supervision, this PVM
//    host) the guest runs free with guards: ring-3 INT3/INTO/INT n are host
//    #UDs taken back at the #UD guard, genuine #UDs reach the guest, the
//    image's CPUIDs answer from the model, a CPUID outside the image gets
//    KVM's answer and a native 64-bit ring-3 CPUID the host CPU's (the
//    documented rule, docs/completion.md "CPUID");
//  - --exact-cpuid single-steps and answers every CPUID from the model;
//  - a StepObserver sees boundaries and retirements in program order, and
//    stepping starts at the first stop after it asks for it.
// On VT-x/SVM hosts nothing is guarded or stepped and KVM answers CPUID.
#include <cpuid.h>
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "pmu/cpu_model.h"
#include "base/testing/status_matchers.h"
#include "vmm/host_probe.h"
#include "vmm/machine.h"

namespace vbts::vmm {
namespace {

using ::testing::HasSubstr;
using vcpu::Supervisor;

constexpr uint32_t kDs = 1u << 21;  // CPUID.1:EDX.DS

class GuardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "no /dev/kvm";
    absl::StatusOr<Kvm> kvm = Kvm::Open();
    ASSERT_THAT(kvm, testing::IsOk());
    kvm_.emplace(std::move(*kvm));
    absl::StatusOr<vcpu::HostFacts> facts = ProbeHost(*kvm_);
    ASSERT_THAT(facts, testing::IsOk());
    facts_ = *facts;
    const pmu::CpuModel* model = pmu::FindCpuModel("westmere");
    ASSERT_NE(model, nullptr);
    model_edx_ = model->Cpuid(1, 0, 0).edx;  // 0x07abfbff: DS set
    ASSERT_TRUE(model_edx_ & kDs);
  }

  // Runs guest-tests image `name`; fills output_ and stats_/mode_.
  RunResult RunImage(const std::string& name, bool exact_cpuid = false, vcpu::StepObserver* observer = nullptr) {
    int pipefd[2];
    EXPECT_EQ(pipe2(pipefd, O_NONBLOCK), 0);
    MachineConfig config;
    config.image_path = std::string(VBTS_GUEST_IMAGE_DIR) + "/" + name;
    config.timeout_seconds = 30;
    config.engine = "kvm";  // the supervisor's guards are the KVM engine's
    config.output_fd = pipefd[1];
    config.exact_cpuid = exact_cpuid;
    RunResult r;
    absl::StatusOr<std::unique_ptr<Machine>> m = Machine::Create(config, *kvm_, facts_);
    EXPECT_THAT(m, testing::IsOk());
    if (m.ok()) {
      if (observer) (*m)->SetObserver(observer);
      r = (*m)->Run();
      stats_ = (*m)->supervisor().stats();
      mode_ = (*m)->supervisor().mode();
      code_guards_ = (*m)->supervisor().code_guard_sites().size();
    }
    close(pipefd[1]);
    output_.clear();
    char buf[4096];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof buf)) > 0) output_.append(buf, n);
    close(pipefd[0]);
    return r;
  }

  // Runs `code` as an a.out-kludge Multiboot image loaded at 1 MiB (as vmm/machine_kvmtest.cc).
  RunResult RunCode(const std::vector<uint8_t>& code) {
    const uint32_t magic = 0x1BADB002, flags = 1u << 16, load = 0x100000;
    const uint32_t hdr[8] = {magic, flags, 0u - magic - flags, load, load, 0, 0, load + 32};
    std::vector<uint8_t> img(reinterpret_cast<const uint8_t*>(hdr), reinterpret_cast<const uint8_t*>(hdr) + 32);
    img.insert(img.end(), code.begin(), code.end());
    char path[] = "/tmp/vbts-guards-test-XXXXXX";
    int fd = mkstemp(path);
    EXPECT_EQ(write(fd, img.data(), img.size()), static_cast<ssize_t>(img.size()));
    close(fd);
    MachineConfig config;
    config.image_path = path;
    config.timeout_seconds = 30;
    config.engine = "kvm";  // the supervisor's guards are the KVM engine's
    RunResult r;
    absl::StatusOr<std::unique_ptr<Machine>> m = Machine::Create(config, *kvm_, facts_);
    EXPECT_THAT(m, testing::IsOk());
    if (m.ok()) {
      r = (*m)->Run();
      stats_ = (*m)->supervisor().stats();
      mode_ = (*m)->supervisor().mode();
      reason_ = (*m)->supervisor().stepping_reason();
      code_guards_ = (*m)->supervisor().code_guard_sites().size();
    }
    unlink(path);
    return r;
  }

  // `n` CPUIDs of leaf 1 at CPL0 (pm32, boot state); the guest exits with 1 if
  // every one reported DS (CPUID.1:EDX[21]), else 0.
  static std::vector<uint8_t> CpuidDsCode(int n) {
    std::vector<uint8_t> c = {0xBE, 0x00, 0x00, 0x20, 0x00};  // mov esi, 1 << 21
    for (int i = 0; i < n; i++) {
      const uint8_t one[] = {0xB8, 0x01, 0, 0, 0,  // mov eax, 1
                             0x31, 0xC9,           // xor ecx, ecx
                             0x0F, 0xA2,           // cpuid
                             0x21, 0xD6};          // and esi, edx
      c.insert(c.end(), one, one + sizeof one);
    }
    const uint8_t tail[] = {0xC1, 0xEE, 0x15,  // shr esi, 21
                            0x89, 0xF0,        // mov eax, esi
                            0xE7, 0xF4};       // out 0xf4, eax
    c.insert(c.end(), tail, tail + sizeof tail);
    return c;
  }

  // The value the guest printed as "guards: <what> leaf1 edx=0x........".
  uint32_t Edx(const std::string& what) {
    const std::string key = "guards: " + what + " leaf1 edx=0x";
    size_t at = output_.find(key);
    EXPECT_NE(at, std::string::npos) << key << " missing from:\n" << output_;
    uint32_t v = 0;
    if (at != std::string::npos) {
      EXPECT_TRUE(absl::SimpleHexAtoi(output_.substr(at + key.size(), 8), &v));
    }
    return v;
  }

  std::optional<Kvm> kvm_;
  vcpu::HostFacts facts_;
  uint32_t model_edx_ = 0;
  std::string output_;
  vcpu::SupervisorStats stats_;
  Supervisor::Mode mode_ = Supervisor::Mode::kFree;
  std::string reason_;
  size_t code_guards_ = 0;
};

TEST_F(GuardsTest, AsManyCpuidSitesAsFreeDebugRegistersAreGuarded) {
  const int free_registers = facts_.needs_ud_guard ? 3 : 4;
  RunResult r = RunCode(CpuidDsCode(free_registers));
  EXPECT_EQ(r.exit_status, 3) << r.message;  // (1 << 1) | 1: every CPUID showed the model's DS
  if (!facts_.needs_cpuid_completion) return;
  EXPECT_EQ(mode_, Supervisor::Mode::kGuarded);
  EXPECT_EQ(stats_.cpuid_guarded, static_cast<uint64_t>(free_registers));
  EXPECT_EQ(stats_.steps, 0u);
}

TEST_F(GuardsTest, MoreCpuidSitesThanDebugRegistersWithoutAnIdtAreStepped) {
  // Code guards need the guest's #UD handler; this guest has no IDT, so the
  // supervisor steps it and completes every CPUID.
  const int free_registers = facts_.needs_ud_guard ? 3 : 4;
  RunResult r = RunCode(CpuidDsCode(free_registers + 1));
  EXPECT_EQ(r.exit_status, 3) << r.message;  // still exact: stepped
  if (!facts_.needs_cpuid_completion) return;
  EXPECT_EQ(mode_, Supervisor::Mode::kStepping);
  if (facts_.needs_ud_guard) {
    EXPECT_EQ(reason_, "");  // not stepped for good: only until the guest has a #UD handler
    EXPECT_EQ(code_guards_, static_cast<size_t>(free_registers + 1));
  }
  EXPECT_GT(stats_.steps, 0u);
}

TEST_F(GuardsTest, MoreCpuidSitesThanDebugRegistersGetCodeGuards) {
  RunResult r = RunImage("guards_many_pm32.elf");
  ASSERT_EQ(r.exit_status, 1) << r.message << output_;
  EXPECT_THAT(output_, HasSubstr("SUMMARY: 5 tests, 0 unexpected failures"));
  if (!facts_.needs_cpuid_completion || !facts_.needs_ud_guard) return;
  // Seven sites, more than the 3 free registers: each is patched, each of
  // its executions is one code-guard stop answered from the model.
  EXPECT_EQ(mode_, Supervisor::Mode::kGuarded);
  EXPECT_GE(code_guards_, 7u);
  EXPECT_EQ(stats_.code_guard_stops, stats_.cpuid_guarded);
  EXPECT_GE(stats_.code_guard_stops, 7u);
  EXPECT_EQ(stats_.ud_passed, 1u);  // the genuine UD2
}

TEST_F(GuardsTest, Pm32RunsFreeAndKeepsIntsGenuineUdsAndImageCpuidsExact) {
  RunResult r = RunImage("guards_pm32.elf");
  ASSERT_EQ(r.exit_status, 1) << r.message << output_;  // guest verdict PASS: (0 << 1) | 1
  EXPECT_THAT(output_, HasSubstr("SUMMARY: 12 tests, 0 unexpected failures"));
  EXPECT_EQ(Edx("cpl0"), model_edx_);
  EXPECT_EQ(Edx("cpl3"), model_edx_);
  if (!facts_.needs_supervision) {
    EXPECT_EQ(mode_, Supervisor::Mode::kFree);
    EXPECT_EQ(stats_.steps + stats_.guard_stops, 0u);
    return;
  }
  EXPECT_EQ(mode_, Supervisor::Mode::kGuarded);
  if (facts_.needs_ud_guard) {
    EXPECT_EQ(stats_.ud_undone, 3u);  // ring-3 int3, into, int 0x41
    EXPECT_EQ(stats_.ud_passed, 2u);  // ud2 at ring 0 and ring 3
  }
  if (facts_.needs_cpuid_completion) {
    EXPECT_EQ(stats_.cpuid_guarded, 2u);  // the two CPUIDs of the image
    // The copy is no image site: KVM answers, and this host drops DS (the
    // value the host probe saw, whatever was set).
    EXPECT_EQ(Edx("copy"), facts_.cpuid1_edx_seen);
    EXPECT_FALSE(Edx("copy") & kDs);
  }
  // Each guard stop at a #UD passed on needs one step-over; nothing else is stepped.
  EXPECT_EQ(stats_.steps, stats_.step_overs);
  EXPECT_LE(stats_.steps, 4u);
}

TEST_F(GuardsTest, Pm32ExactCpuidStepsAndAnswersEveryCpuid) {
  RunResult r = RunImage("guards_pm32.elf", /*exact_cpuid=*/true);
  ASSERT_EQ(r.exit_status, 1) << r.message << output_;
  EXPECT_EQ(Edx("cpl0"), model_edx_);
  EXPECT_EQ(Edx("cpl3"), model_edx_);
  EXPECT_EQ(Edx("copy"), model_edx_);
  if (facts_.needs_cpuid_completion) {
    EXPECT_EQ(mode_, Supervisor::Mode::kStepping);
    EXPECT_GT(stats_.steps, 10000u);  // the runtime's setup and the test: 15 441 stops when measured
    EXPECT_EQ(stats_.guard_stops, 0u);
  }
}

TEST_F(GuardsTest, Lm64NativeRing3CpuidIsTheHostsUnlessExact) {
  RunResult r = RunImage("guards_lm64.elf");
  ASSERT_EQ(r.exit_status, 1) << r.message << output_;
  EXPECT_THAT(output_, HasSubstr("SUMMARY: 12 tests, 0 unexpected failures"));
  EXPECT_EQ(Edx("cpl0"), model_edx_);
  if (facts_.needs_cpuid_completion && facts_.cpuid_lm64_cpl3.outcome == vcpu::ProbeOutcome::kNotIntercepted) {
    unsigned a, b, c, d;
    ASSERT_TRUE(__get_cpuid(1, &a, &b, &c, &d));
    EXPECT_EQ(Edx("cpl3"), d);  // the host CPU's own leaf 1: the documented exception
    if (facts_.needs_ud_guard) {  // int 0x40, int 0x41 (int3 is native #BP)
      EXPECT_EQ(stats_.ud_undone, 2u);
    }
  } else {
    EXPECT_EQ(Edx("cpl3"), model_edx_);
  }
  r = RunImage("guards_lm64.elf", /*exact_cpuid=*/true);
  ASSERT_EQ(r.exit_status, 1) << r.message << output_;
  EXPECT_EQ(Edx("cpl3"), model_edx_);
  if (facts_.needs_cpuid_completion && facts_.native_user_needs_tf_trick) {
    EXPECT_GT(stats_.user_steps, 0u);
  }
}

// A StepObserver that records what the supervisor tells it and checks the
// program order contract of vcpu/step_observer.h: Retired(before) follows an
// AtBoundary at before's RIP.
class RecordingObserver : public vcpu::StepObserver {
 public:
  enum class Policy { kNever, kAlways, kAfterFirstRetired };
  explicit RecordingObserver(Policy p) : policy_(p) {}
  bool WantsEveryInstruction() const override {
    return policy_ == Policy::kAlways || (policy_ == Policy::kAfterFirstRetired && !retired_.empty());
  }
  absl::Status AtBoundary(vcpu::CpuState& st, bool& dirty) override {
    boundaries_++;
    last_boundary_ = st.pc_linear();
    return absl::OkStatus();
  }
  absl::Status Retired(const vcpu::CpuState& before, const vcpu::ControlTransfer& t, vcpu::CpuState& after,
                       bool& dirty) override {
    if (!last_boundary_ || *last_boundary_ != before.pc_linear())
      order_errors_.push_back(absl::StrFormat("Retired at 0x%x without AtBoundary there", before.pc_linear()));
    if (t.from != before.pc_linear() || t.to != after.pc_linear())
      order_errors_.push_back(absl::StrFormat("transfer 0x%x->0x%x vs states 0x%x->0x%x", t.from, t.to,
                                              before.pc_linear(), after.pc_linear()));
    retired_.push_back(t.kind);
    last_boundary_.reset();
    return absl::OkStatus();
  }
  int Count(vcpu::TransferKind k) const { return std::count(retired_.begin(), retired_.end(), k); }

  Policy policy_;
  uint64_t boundaries_ = 0;
  std::optional<uint64_t> last_boundary_;
  std::vector<vcpu::TransferKind> retired_;
  std::vector<std::string> order_errors_;
};

TEST_F(GuardsTest, ObserverThatNeverStepsSeesTheSupervisorsOwnRetirements) {
  RecordingObserver obs(RecordingObserver::Policy::kNever);
  RunResult r = RunImage("guards_pm32.elf", false, &obs);
  ASSERT_EQ(r.exit_status, 1) << r.message << output_;
  EXPECT_THAT(obs.order_errors_, ::testing::IsEmpty());
  if (!facts_.needs_supervision) return;
  EXPECT_EQ(mode_, Supervisor::Mode::kGuarded);
  if (facts_.needs_cpuid_completion) {  // the guarded sites
    EXPECT_EQ(obs.Count(vcpu::TransferKind::kCpuid), 2);
  }
  if (facts_.needs_ud_guard) {  // int3, into, int 0x41
    EXPECT_GE(obs.Count(vcpu::TransferKind::kInt), 3);
  }
  EXPECT_EQ(obs.retired_.size(), stats_.completed);
}

TEST_F(GuardsTest, ObserverThatAlwaysStepsSeesEveryBoundaryInOrder) {
  RecordingObserver obs(RecordingObserver::Policy::kAlways);
  RunResult r = RunImage("guards_pm32.elf", false, &obs);
  ASSERT_EQ(r.exit_status, 1) << r.message << output_;
  EXPECT_THAT(obs.order_errors_, ::testing::IsEmpty());
  EXPECT_EQ(mode_, Supervisor::Mode::kStepping);
  EXPECT_GT(stats_.steps, 10000u);  // 15 441 stops when measured (see above)
  EXPECT_GE(obs.boundaries_, stats_.steps);  // every stop, plus boundaries after completions
  if (facts_.needs_cpuid_completion) {
    EXPECT_EQ(obs.Count(vcpu::TransferKind::kCpuid), 3);  // every CPUID, the copy included
    EXPECT_EQ(Edx("copy"), model_edx_);
  }
}

TEST_F(GuardsTest, ObserverStepsFromTheStopWhereItAsks) {
  // The guest's first supervisor retirement on this host is the guarded CPL0
  // CPUID; from then on the observer wants every instruction, so the copy's
  // CPUID (no image site) is stepped and answered from the model.
  RecordingObserver obs(RecordingObserver::Policy::kAfterFirstRetired);
  RunResult r = RunImage("guards_pm32.elf", false, &obs);
  ASSERT_EQ(r.exit_status, 1) << r.message << output_;
  EXPECT_THAT(obs.order_errors_, ::testing::IsEmpty());
  if (!facts_.needs_cpuid_completion) return;
  ASSERT_FALSE(obs.retired_.empty());
  EXPECT_EQ(obs.retired_[0], vcpu::TransferKind::kCpuid);
  EXPECT_EQ(mode_, Supervisor::Mode::kStepping);
  EXPECT_EQ(Edx("copy"), model_edx_);
}

TEST_F(GuardsTest, SteppedHltIsRetiredForTheObserver) {
  RecordingObserver obs(RecordingObserver::Policy::kAlways);
  RunResult r = RunImage("lapic_timer.elf", false, &obs);
  ASSERT_EQ(r.exit_status, 1) << r.message << output_;
  EXPECT_THAT(obs.order_errors_, ::testing::IsEmpty());
  EXPECT_THAT(output_, HasSubstr("PASS: frame EIP = after_hlt"));
  if (facts_.needs_hlt_emulation) {
    EXPECT_GE(stats_.halts, 1u);
    EXPECT_GE(obs.Count(vcpu::TransferKind::kNone), 1);  // the HLT
  }
}

}  // namespace
}  // namespace vbts::vmm
