// supervisor.h: makes guests behave architecturally on hosts whose KVM cannot
// run some instructions (see docs/completion.md and vbts info). Where the host
// hides such failures from the VMM (a guest #UD for INT n at CPL3, CPUID leaf 1
// rewritten), the supervisor single-steps the guest, decodes the instruction
// at each stop and performs the ones the host cannot run with the completion
// engine (vcpu/completer.h); where KVM reports them (KVM_EXIT_INTERNAL_ERROR)
// it completes them on demand. On hosts that need none of this (VT-x/SVM) it
// never steps: the guest runs at plain KVM speed.
#ifndef VBTS_VCPU_SUPERVISOR_H_
#define VBTS_VCPU_SUPERVISOR_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "pmu/cpu_model.h"
#include "pmu/phys_memory.h"
#include "vcpu/cpu_state.h"
#include "vcpu/host_facts.h"
#include "vcpu/kvm_vcpu.h"
#include "vcpu/step_observer.h"

namespace vbts::vcpu {

// An exception vbts raised in the guest (a fault of a completed instruction).
struct ExceptionRecord {
  uint8_t vector = 0;
  std::optional<uint32_t> error_code;
  uint64_t rip = 0;
  std::string Describe() const;  // "#GP(0x202) at RIP 0x101234"
};

struct SupervisorStats {
  uint64_t steps = 0;          // single-step stops handled
  uint64_t user_steps = 0;     // native 64-bit CPL3 instructions stepped with the TF trick
  uint64_t completed = 0;      // instructions completed by vbts
  uint64_t internal_errors = 0;
  uint64_t faults_injected = 0;
  uint64_t halts = 0;          // HLTs performed for the stepped guest
};

class Supervisor {
 public:
  struct Verdict {
    enum Kind { kResume, kHaltedIfClear, kUnsupported } kind = kResume;
    std::string message;  // for kUnsupported: what, where
  };

  Supervisor(KvmVcpu& vcpu, PhysMemory& mem, const pmu::CpuModel& model, const HostFacts& facts);

  // Whether this host makes vbts single-step guests (HostFacts decides).
  bool stepping() const { return stepping_; }
  // The tracing engine; it is told about every instruction boundary while it
  // wants them, and the guest is single-stepped while it does.
  void SetObserver(StepObserver* observer) { observer_ = observer; }
  // Call after vbts changed guest-visible state outside a stop (an MSR write
  // that may have turned tracing on): starts stepping if now needed.
  absl::Status Refresh();
  // Call after handling a port-I/O or MMIO exit, before resuming.
  absl::Status AfterDeviceExit();
  // Call once the boot state is set, before the first KVM_RUN: checks the
  // first instruction and turns on single-stepping where needed.
  absl::StatusOr<Verdict> Start();
  // KVM_EXIT_DEBUG (a single-step stop or vbts's own breakpoint).
  absl::StatusOr<Verdict> OnDebug();
  // KVM_EXIT_INTERNAL_ERROR: the host's instruction emulator gave up.
  absl::StatusOr<Verdict> OnInternalError();

  const std::optional<ExceptionRecord>& last_exception() const { return last_exception_; }
  const SupervisorStats& stats() const { return stats_; }
  std::string Statistics() const;

 private:
  // At an instruction boundary: completes every instruction at RIP that the
  // host cannot run (looping, as a completed INT lands on a handler whose
  // first instruction may need it too), then prepares the next step.
  absl::StatusOr<Verdict> Supervise(CpuState& st, bool dirty);
  // Arms or disarms the TF trick for native 64-bit CPL3 code and writes the
  // guest debug controls when they change.
  absl::StatusOr<Verdict> PrepareStep(CpuState& st, bool& dirty);
  absl::Status SetDebug(uint32_t control, uint64_t dr0, uint64_t dr7);
  // Decodes the instruction at RIP and completes it if the policy says so
  // (`must`: on an internal error, where anything not completed ends the run).
  // Returns a verdict only when the run must stop or a fault was injected.
  absl::StatusOr<std::optional<Verdict>> CompleteAt(CpuState& st, bool& dirty, bool must);

  bool ShouldStep() const { return stepping_ || (observer_ && observer_->WantsEveryInstruction()); }

  KvmVcpu& vcpu_;
  StepObserver* observer_ = nullptr;
  PhysMemory& mem_;
  const pmu::CpuModel& model_;
  HostFacts facts_;
  bool stepping_ = false;
  uint32_t debug_control_ = 0;
  uint64_t debug_dr0_ = 0, debug_dr3_ = 0, debug_dr7_ = 0;
  // DR3 breakpoint on the instruction after a device exit (AfterDeviceExit).
  std::optional<uint64_t> post_exit_bp_;
  uint64_t last_stop_rip_ = ~0ull;  // RIP at the last single-step stop
  // TF trick state: the #DB handler entry vbts put its breakpoint on, and
  // whether the guest itself had TF set when vbts set it.
  std::optional<uint64_t> tf_trick_handler_;
  bool guest_tf_ = false;
  std::optional<ExceptionRecord> last_exception_;
  SupervisorStats stats_;
};

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_SUPERVISOR_H_
