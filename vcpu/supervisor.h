// supervisor.h: makes guests behave architecturally on hosts whose KVM cannot
// run some instructions (docs/completion.md, "Supervision", and vbts info).
//
// Failures KVM reports (KVM_EXIT_INTERNAL_ERROR) are completed on demand
// with the completion engine (vcpu/completer.h).  Failures the host hides
// from the VMM (this PVM host: INT n/INT3/INTO in ring 3 become a guest #UD;
// CPUID leaf 1 is rewritten) are caught while the guest runs free, with KVM
// hardware execution breakpoints ("guards"):
//  - the #UD guard sits on the entry of the guest's #UD handler; when it
//    fires for an INT n/INT3/INTO, the supervisor takes the #UD delivery back
//    and completes the INT instead;
//  - CPUID guards sit on the CPUID instructions of the loaded image (at most
//    the debug registers left over; with more sites, or with exact_cpuid, the
//    supervisor single-steps the whole guest and answers every CPUID).
// The supervisor single-steps every instruction while its StepObserver (the
// branch-tracing engine) asks for it.  On hosts that need none of this
// (VT-x/SVM) nothing is armed and nothing is stepped.
#ifndef VBTS_VCPU_SUPERVISOR_H_
#define VBTS_VCPU_SUPERVISOR_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pmu/cpu_model.h"
#include "pmu/phys_memory.h"
#include "vcpu/completer.h"
#include "vcpu/cpu_state.h"
#include "vcpu/decoder.h"
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

struct SupervisorOptions {
  // Single-step the whole guest on hosts that rewrite CPUID, so that every
  // CPUID (also in native 64-bit ring 3 and outside the image) answers from
  // the CPU model (`vbts run --exact-cpuid`).
  bool exact_cpuid = false;
  // Linear addresses of the CPUID instructions in the loaded image (found by
  // vmm/ with FindCpuidSites); guarded while the guest runs free.
  std::vector<uint64_t> cpuid_sites;
  // Linear addresses of the image's MOV-to-DR7 instructions (FindMovDr7Sites):
  // on a host that does not raise the guest's data breakpoints
  // (HostFacts::emulate_data_breakpoints) they are guarded too, so that the
  // observer sees the guest enable one and steps it (docs/tracing.md).
  std::vector<uint64_t> movdr7_sites;
  // Sites of the two lists above that may be patched in guest memory when
  // they outnumber the free debug registers (code guards): the physical
  // address of the instruction and the linear addresses it is known at
  // (those in cpuid_sites/movdr7_sites). Only instruction boundaries the
  // loader confirmed by decoding (ConfirmInstructionStarts) belong here.
  struct PatchableSite {
    uint64_t gpa = 0;
    std::vector<uint64_t> linear;
  };
  std::vector<PatchableSite> patchable;
};

struct SupervisorStats {
  uint64_t steps = 0;          // single-step stops handled (whole-guest stepping and step-overs)
  uint64_t user_steps = 0;     // native 64-bit CPL3 instructions stepped with the TF trick
  uint64_t completed = 0;      // instructions completed by vbts
  uint64_t internal_errors = 0;
  uint64_t faults_injected = 0;
  uint64_t halts = 0;          // HLTs performed for the stepped guest
  uint64_t guard_stops = 0;    // free-run stops at a guard (breakpoint hits)
  uint64_t ud_undone = 0;      // host #UDs for INT n/INT3/INTO taken back and completed
  uint64_t ud_passed = 0;      // #UDs left to the guest's handler (genuine)
  uint64_t cpuid_guarded = 0;  // CPUIDs answered at a guarded site
  uint64_t step_overs = 0;     // single steps past a guard the guest's instruction sat on
  uint64_t post_io_breakpoints = 0;  // breakpoints after a device exit while stepping (docs/tracing.md)
  uint64_t endbr_completed = 0;      // ENDBR64/ENDBR32 retired by vbts while stepping (host steps two)
  uint64_t step_traps = 0;           // single-step #DBs owed after a completed instruction (guest TF)
  uint64_t code_guard_stops = 0;     // #UDs of a code guard (UD2 patched over a site) taken back
  uint64_t icebp_fixed = 0;
  uint64_t movss_db_held = 0;        // single-step #DBs the host delivered inside a MOV SS shadow, taken back          // ICEBP #DBs the host delivered fault-like, redelivered trap-like
};

class Supervisor {
 public:
  struct Verdict {
    enum Kind { kResume, kHaltedIfClear, kUnsupported } kind = kResume;
    std::string message;  // for kUnsupported: what, where
  };
  // How the guest runs until the next stop.
  enum class Mode {
    kFree,      // plain KVM, nothing armed (VT-x/SVM hosts)
    kGuarded,   // free run with the guards armed
    kStepping,  // every instruction single-stepped (observer, --exact-cpuid, too many CPUID sites)
  };

  Supervisor(KvmVcpu& vcpu, PhysMemory& mem, const pmu::CpuModel& model, const HostFacts& facts,
             SupervisorOptions options = {});

  // The branch-tracing engine; nullptr for none.  Consulted at every stop and exit.
  void SetObserver(StepObserver* observer) { observer_ = observer; }

  Mode mode() const { return mode_; }
  // Stepping every instruction with nothing of vbts's in the guest's state
  // or memory (no code guard written, no TF of vbts's, no step-over): the
  // state KVM holds is the guest's own, and may move to another engine.
  bool SteppingPlainly() const { return mode_ == Mode::kStepping && Plain(); }
  // Nothing of vbts's in the guest's state or memory, in any mode (guards
  // in debug registers are KVM's, not the guest's): at a boundary the vCPU
  // may move to another engine.
  bool Plain() const {
    return !tf_trick_handler_ && !step_over_ &&
           std::none_of(patches_.begin(), patches_.end(), [](const CodePatch& p) { return p.applied; });
  }
  // Someone other than the observer (the debugger, docs/gdb.md) needs the
  // guest to reach a plain boundary: step it, as for an observer, from the
  // next arming on.
  void RequestSteps(bool on) { steps_requested_ = on; }
  // Why the whole guest is stepped without an observer asking for it ("" if it is not).
  const std::string& stepping_reason() const { return stepping_reason_; }
  // The CPUID sites that get a breakpoint (empty when the guest is stepped).
  const std::vector<uint64_t>& guarded_cpuid_sites() const { return cpuid_sites_; }
  // Physical addresses of the sites guarded by a code patch (UD2 over the
  // instruction's first two bytes while the guest runs free).
  std::vector<uint64_t> code_guard_sites() const;

  // Call once the boot state is set, before the first KVM_RUN.
  absl::StatusOr<Verdict> Start();
  // KVM_EXIT_DEBUG: a single-step stop or one of vbts's breakpoints.
  absl::StatusOr<Verdict> OnDebug();
  // KVM_EXIT_INTERNAL_ERROR: the host's instruction emulator gave up.
  absl::StatusOr<Verdict> OnInternalError();
  // Every other exit, after the machine handled it (I/O, MMIO, ...), and a
  // KVM_RUN interrupted by the kick timer (`interrupted`).  Re-evaluates the
  // mode and re-arms the guards (the guest may have changed its IDT).  After
  // an I/O or MMIO exit the instruction is still pending in KVM, so nothing
  // is completed and no register is written here.
  absl::StatusOr<Verdict> OnOtherExit(bool interrupted);

  const std::optional<ExceptionRecord>& last_exception() const { return last_exception_; }
  const SupervisorStats& stats() const { return stats_; }
  std::string Statistics() const;

 private:
  // Result of trying to complete one instruction.
  struct Outcome {
    enum Kind { kNotMine, kRetired, kFault, kStop } kind = kNotMine;
    GuestFault fault;     // kFault
    std::string message;  // kStop
  };

  // At an instruction boundary the supervisor stopped at: reports it to the
  // observer (unless `reported`), completes every instruction at RIP that the
  // host cannot run (looping: a completed INT lands on a handler whose first
  // instruction may need it too), emulates a HLT that is about to be
  // stepped, then arms the next run.
  absl::StatusOr<Verdict> Boundary(CpuState& st, bool dirty, bool reported);
  // The #UD guard fired: if the #UD is the host's answer to an INT n/INT3/
  // INTO, takes the delivery back (st is then at the INT, which Boundary()
  // completes); otherwise leaves `st` at the handler.
  absl::Status UdGuard(CpuState& st, bool& dirty);
  // Completes `insn` at `st` (must: on an internal error, where anything not
  // completed is unsupported).  Tells the observer about a retirement.
  absl::StatusOr<Outcome> Perform(CpuState& st, bool& dirty, const DecodedInsn& insn, bool must);
  // After vbts completed an instruction that began with the guest's own
  // RFLAGS.TF set, while no observer follows every instruction (the tracer
  // raises these itself while it steps): the single-step trap it owes, a
  // #DB with DR6.BS (SDM 17.3.1.4). Returns whether one was injected.
  absl::StatusOr<bool> StepTrapAfterCompletion(const CpuState& before, const DecodedInsn& insn, CpuState& st,
                                               bool& dirty);
  // Arms for an exception delivery, writes the state, ORs `dr6_bits` into
  // the guest's DR6 and injects #DB (a trap: RIP is already past the cause).
  absl::Status DeliverDebugTrap(CpuState& st, bool& dirty, uint64_t dr6_bits);
  // Tells the observer that vbts retired the instruction at before.rip
  // without a control transfer (HLT, ENDBR), leaving the guest at `st`.
  absl::Status ReportRetiredInPlace(const CpuState& before, CpuState& st, bool& dirty);
  // Writes the state and injects the fault of a completed instruction.
  absl::Status InjectFault(CpuState& st, bool& dirty, const GuestFault& fault);
  // Chooses the mode and writes the guest debug controls for the next run.
  // `at_boundary`: the guest is at an instruction boundary and its state may
  // be written (not after an I/O or MMIO exit); `exception_pending`: the
  // next run starts by delivering an exception vbts injected;
  // `may_step_over`: the instruction at RIP was looked at, so a guard there
  // is stepped over instead of being left to fire.
  absl::StatusOr<Verdict> Arm(CpuState& st, bool& dirty, bool at_boundary, bool exception_pending,
                              bool may_step_over = true);
  // Arms or disarms the TF trick for native 64-bit CPL3 code while stepping.
  absl::StatusOr<Verdict> PrepareStep(CpuState& st, bool& dirty);
  absl::Status SetDebug(uint32_t control, const std::array<uint64_t, 4>& dr, uint64_t dr7);
  // The #DB guard fired (the guest's #DB handler entry): an ICEBP (INT1)
  // whose #DB this host delivered fault-like (frame RIP at the F1, DR6 with
  // no cause) is redelivered trap-like, as hardware does (SDM 17.3.1.4 / vol. 2 INT1).
  absl::StatusOr<bool> DbGuard(CpuState& st, bool& dirty);
  // The addresses the guards sit on for `st` (the #UD handler entry first,
  // then the CPUID sites, then the #DB handler entry if a register is left);
  // sets ud_entry_ and db_entry_.  Returns how many.
  int GuardAddresses(const CpuState& st, std::array<uint64_t, 4>& addrs);
  // Whether the next run from `st` single-steps (stepping, or a step-over).
  bool NextRunSteps(const CpuState& st);
  bool WantsStepping() const;
  bool ObserverWantsSteps() const { return observer_ && observer_->WantsEveryInstruction(); }
  bool HostFailsInvisibly() const { return facts_.needs_supervision; }
  // Code guards (docs/completion.md, "Guards"): UD2 written over a site's
  // first two bytes; its #UD reaches the #UD guard, which takes the delivery
  // back and puts the original bytes back until the guest is past the site.
  struct CodePatch {
    uint64_t gpa = 0;
    uint8_t original[2] = {0, 0};
    bool applied = false;
    bool dropped = false;  // the guest rewrote the bytes: no longer guarded
  };
  // Writes UD2 over every site but the one at `skip_gpa`.
  absl::Status ApplyPatches(std::optional<uint64_t> skip_gpa);
  // Puts the original bytes back everywhere (stepping; no usable #UD handler).
  absl::Status RemovePatches();
  absl::Status RemovePatch(CodePatch& p);
  // The physical address of the instruction at st's RIP, if it is mapped.
  std::optional<uint64_t> PcGpa(const CpuState& st);
  CodePatch* PatchAt(std::optional<uint64_t> gpa);
  // Code guards are in use but the guest has no usable #UD handler yet:
  // step it (completing every CPUID) until it has one.
  bool patches_wait_for_idt_ = false;
  bool steps_requested_ = false;  // RequestSteps
  std::vector<CodePatch> patches_;
  // The instructions this host gets wrong without telling the VMM, which
  // vbts completes whenever it stops in front of one.
  bool CompleteAtStop(const DecodedInsn& insn) const;

  KvmVcpu& vcpu_;
  PhysMemory& mem_;
  const pmu::CpuModel& model_;
  HostFacts facts_;
  SupervisorOptions options_;
  StepObserver* observer_ = nullptr;
  std::vector<uint64_t> cpuid_sites_;  // armed in kGuarded mode
  std::string stepping_reason_;        // non-empty: step the whole guest
  Mode mode_ = Mode::kFree;
  // Guest debug controls as last written.
  uint32_t debug_control_ = 0;
  std::array<uint64_t, 4> debug_dr_{};
  uint64_t debug_dr7_ = 0;
  // kGuarded: the #UD handler entry the #UD guard sits on.
  std::optional<uint64_t> ud_entry_;
  // kGuarded: the #DB handler entry, when a debug register is free for it.
  std::optional<uint64_t> db_entry_;
  // kGuarded: the next run single-steps one instruction that sits on a guard.
  bool step_over_ = false;
  // The boundary last reported to the observer, when the guest was resumed
  // from it by single-stepping (an internal error there is the same boundary).
  std::optional<uint64_t> reported_rip_;
  uint64_t last_stop_pc_ = ~0ull;
  // The guest ran free since the last boundary reported to the observer.
  bool free_run_ = true;  // linear RIP at the last KVM_EXIT_DEBUG
  // TF trick state: the #DB handler entry vbts put its breakpoint on, and
  // whether the guest itself had TF set when vbts set it.
  std::optional<uint64_t> tf_trick_handler_;
  bool guest_tf_ = false;
  std::optional<ExceptionRecord> last_exception_;
  SupervisorStats stats_;
};

const char* SupervisorModeName(Supervisor::Mode m);

// Linear addresses of the CPUID instructions (bytes 0F A2) in `code`, an
// executable segment loaded at linear address `base`.  A match that is not an
// instruction boundary costs a guard but can never fire: a breakpoint fires
// only where an instruction starts, and if one starts there it is a CPUID.
std::vector<uint64_t> FindCpuidSites(const uint8_t* code, size_t size, uint64_t base);
// The same for MOV DR7, r32/r64 (0F 23 /r with ModRM mod = 11, reg = 7: F8H-FFH).
std::vector<uint64_t> FindMovDr7Sites(const uint8_t* code, size_t size, uint64_t base);

// The subset of `sites` (linear addresses in [base, base+size)) where an
// instruction starts when `code` is decoded linearly from its first byte,
// in 32-bit or in 64-bit mode (the loader cannot know which code is which).
// Only such sites may carry a code guard: a byte pattern inside another
// instruction or in data must never be patched. Undecodable bytes are
// skipped one at a time, so the sweep resynchronises after data.
std::vector<uint64_t> ConfirmInstructionStarts(const uint8_t* code, size_t size, uint64_t base,
                                               const std::vector<uint64_t>& sites);

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_SUPERVISOR_H_
