// supervisor.cc: stepping policy, on-demand completion, HLT under single-step,
// and the TF trick for native 64-bit user code.
#include "vcpu/supervisor.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "pmu/paging.h"
#include "pmu/status_macros.h"
#include "vcpu/completer.h"
#include "vcpu/decoder.h"
#include "vcpu/descriptors.h"

namespace vbts::vcpu {
namespace {

constexpr uint8_t kVectorDb = 1;
// DR7: L0 (bit 0), GE (bit 9, recommended), bit 10 reads as 1; RW0/LEN0 = 0: execute.
constexpr uint64_t kDr7ExecBp0 = (1u << 0) | (1u << 9) | (1u << 10);
constexpr uint64_t kDr6B0 = 1u << 0;
// DR7.L3 (bit 6), RW3/LEN3 (bits 28-31) = 0: execute.
constexpr uint64_t kDr7ExecBp3 = (1u << 6) | (1u << 9) | (1u << 10);
// A completed instruction may land on another that needs completion (an INT
// whose handler starts with IRET); a guest cannot make vbts loop forever.
constexpr int kMaxChainedCompletions = 64;

bool IsHlt(const DecodedInsn& insn) { return insn.length == 1 && insn.bytes[0] == 0xF4; }

// Reads `n` bytes at linear address `la` as the kernel would (implicit supervisor access).
absl::StatusOr<uint64_t> ReadLinear64(const CpuState& st, PhysMemory& mem, uint64_t la) {
  pmu::LinearMemory lin(mem, st.paging_regs());
  uint8_t b[8];
  pmu::Access acc;
  acc.implicit = true;
  VBTS_ASSIGN_OR_RETURN(pmu::AccessFault f, lin.Read(Gva(la), absl::MakeSpan(b), acc));
  if (!f.ok()) return absl::FailedPreconditionError(absl::StrFormat("linear address 0x%x is not mapped", la));
  uint64_t v;
  std::memcpy(&v, b, 8);
  return v;
}

// The code/stack segment a GDT selector names (for unwinding a #DB frame).
absl::StatusOr<Segment> LoadGdtSegment(const CpuState& st, PhysMemory& mem, uint16_t sel) {
  if (SelectorIsNull(sel) || SelectorTi(sel) || SelectorIndex(sel) * 8u + 7 > st.gdtr.limit)
    return absl::FailedPreconditionError(absl::StrFormat("selector 0x%x is not in the GDT", sel));
  Descriptor d;
  VBTS_ASSIGN_OR_RETURN(d.lo, ReadLinear64(st, mem, st.gdtr.base + SelectorIndex(sel) * 8u));
  return SegmentFromDescriptor(d, sel);
}

// Entry point of the 64-bit interrupt/trap gate for `vector` (SDM 6.14.1).
absl::StatusOr<uint64_t> InterruptGateTarget(const CpuState& st, PhysMemory& mem, uint8_t vector) {
  if (vector * 16u + 15 > st.idtr.limit)
    return absl::FailedPreconditionError(absl::StrFormat("IDT limit 0x%x excludes vector %u", st.idtr.limit, vector));
  VBTS_ASSIGN_OR_RETURN(uint64_t lo, ReadLinear64(st, mem, st.idtr.base + vector * 16u));
  VBTS_ASSIGN_OR_RETURN(uint64_t hi, ReadLinear64(st, mem, st.idtr.base + vector * 16u + 8));
  const unsigned type = (lo >> 40) & 0xF;
  if (!((lo >> 47) & 1) || (type != 0xE && type != 0xF))
    return absl::FailedPreconditionError(absl::StrFormat("vector %u is not a present interrupt/trap gate", vector));
  return (lo & 0xFFFF) | ((lo >> 32) & 0xFFFF0000ull) | ((hi & 0xFFFFFFFFull) << 32);
}

// Instructions vbts performs itself while stepping a guest on a host that
// needs supervision: each is one the host's emulator either fails on or gets
// wrong without telling the VMM (docs/completion.md has the table).
bool SupervisedCompletion(const DecodedInsn& insn) {
  switch (insn.kind) {
    case InsnKind::kCpuid:
    case InsnKind::kIntN:
    case InsnKind::kInt3:
    case InsnKind::kInto:
    case InsnKind::kInt1:
    case InsnKind::kIret:
    case InsnKind::kRetFar:
    case InsnKind::kSyscall:
      return true;
    default:
      return false;
  }
}

bool NeedsMsrs(const DecodedInsn& insn) {
  return insn.kind == InsnKind::kSyscall || insn.kind == InsnKind::kSysret || insn.kind == InsnKind::kSysenter ||
         insn.kind == InsnKind::kSysexit;
}

}  // namespace

std::string ExceptionRecord::Describe() const {
  static const char* kNames[32] = {"#DE", "#DB", "NMI", "#BP", "#OF", "#BR", "#UD", "#NM", "#DF", "#MF(9)",
                                   "#TS", "#NP", "#SS", "#GP", "#PF", "#15", "#MF", "#AC", "#MC", "#XM",
                                   "#VE", "#CP"};
  std::string name = vector < 32 && kNames[vector] ? kNames[vector] : absl::StrFormat("vector %u", vector);
  if (error_code) return absl::StrFormat("%s(0x%x) at RIP 0x%x", name, *error_code, rip);
  return absl::StrFormat("%s at RIP 0x%x", name, rip);
}

Supervisor::Supervisor(KvmVcpu& vcpu, PhysMemory& mem, const pmu::CpuModel& model, const HostFacts& facts)
    : vcpu_(vcpu), mem_(mem), model_(model), facts_(facts), stepping_(facts.needs_supervised_stepping) {}

std::string Supervisor::Statistics() const {
  return absl::StrFormat(
      "supervisor: %s; %u steps (%u native user steps), %u instructions completed, %u internal errors, "
      "%u faults injected, %u halts\n",
      stepping_ ? "single-stepping (this host needs it)" : "not stepping", stats_.steps, stats_.user_steps,
      stats_.completed, stats_.internal_errors, stats_.faults_injected, stats_.halts);
}

absl::Status Supervisor::SetDebug(uint32_t control, uint64_t dr0, uint64_t dr7) {
  const uint64_t dr3 = post_exit_bp_.value_or(0);
  if (control == debug_control_ && dr0 == debug_dr0_ && dr7 == debug_dr7_ && dr3 == debug_dr3_)
    return absl::OkStatus();
  std::array<uint64_t, 8> dr = {dr0, 0, 0, dr3, 0, 0, 0, dr7};
  uint32_t kvm_control = control;
  if (post_exit_bp_ && (control & KVM_GUESTDBG_ENABLE)) {
    dr[7] |= kDr7ExecBp3;
    kvm_control |= KVM_GUESTDBG_USE_HW_BP;
  }
  VBTS_RETURN_IF_ERROR(vcpu_.SetGuestDebug(kvm_control, dr));
  debug_control_ = control;
  debug_dr0_ = dr0;
  debug_dr3_ = dr3;
  debug_dr7_ = dr7;
  return absl::OkStatus();
}

absl::Status Supervisor::AfterDeviceExit() {
  if (!ShouldStep()) return absl::OkStatus();
  // Measured on this host: at a port-I/O exit of a stepped guest RIP is
  // already past the IN/OUT, and on re-entry KVM runs the next instruction
  // without a single-step stop, so it would escape supervision (a CPUID there
  // would return the host's leaf 1) and tracing.  A hardware breakpoint on it
  // stops the guest before it runs (breakpoints fire before the instruction
  // in emulated code; native 64-bit ring-3 code does no port I/O).  Where
  // RIP still points at the I/O instruction (VT-x/SVM), KVM's own step stop
  // follows it and nothing is needed.
  VBTS_ASSIGN_OR_RETURN(kvm_regs regs, vcpu_.GetRegs());
  if (regs.rip == last_stop_rip_) return absl::OkStatus();
  VBTS_ASSIGN_OR_RETURN(CpuState st, vcpu_.GetState());
  post_exit_bp_ = st.pc_linear();
  return SetDebug(debug_control_, debug_dr0_, debug_dr7_);
}

absl::Status Supervisor::Refresh() {
  if (ShouldStep() && !(debug_control_ & KVM_GUESTDBG_SINGLESTEP))
    return SetDebug(KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP, 0, 0);
  return absl::OkStatus();
}

absl::StatusOr<Supervisor::Verdict> Supervisor::Start() {
  if (!ShouldStep()) return Verdict{};
  VBTS_RETURN_IF_ERROR(SetDebug(KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP, 0, 0));
  VBTS_ASSIGN_OR_RETURN(CpuState st, vcpu_.GetState());
  last_stop_rip_ = st.rip;
  bool dirty = false;
  if (observer_) VBTS_RETURN_IF_ERROR(observer_->AtBoundary(st, dirty));
  return Supervise(st, dirty);
}

absl::StatusOr<Supervisor::Verdict> Supervisor::OnDebug() {
  stats_.steps++;
  const kvm_debug_exit_arch& d = vcpu_.run()->debug.arch;
  VBTS_ASSIGN_OR_RETURN(CpuState st, vcpu_.GetState());
  bool dirty = false;
  last_stop_rip_ = st.rip;
  if (post_exit_bp_) {
    // Whatever stopped the guest (the post-exit breakpoint, or a step), the
    // instruction after the I/O is now under supervision again.
    post_exit_bp_.reset();
    VBTS_RETURN_IF_ERROR(SetDebug(debug_control_, debug_dr0_, debug_dr7_));
  }
  if (tf_trick_handler_ && d.exception == kVectorDb && (d.dr6 & kDr6B0) && st.rip == *tf_trick_handler_) {
    // One native user instruction ran and its single-step #DB was delivered to
    // the guest's #DB handler, where vbts's breakpoint stopped it before the
    // handler's first instruction. Unwind the 64-bit frame (RIP, CS, RFLAGS,
    // RSP, SS; SDM 6.14.2) so the guest continues as if it had only stepped.
    uint64_t frame[5];
    bool ok = true;
    for (int i = 0; i < 5 && ok; i++) {
      absl::StatusOr<uint64_t> v = ReadLinear64(st, mem_, st.gpr[kRsp] + 8 * i);
      if (v.ok()) frame[i] = *v; else ok = false;
    }
    if (ok && (frame[1] & 3) == 3 && !guest_tf_) {
      absl::StatusOr<Segment> cs = LoadGdtSegment(st, mem_, static_cast<uint16_t>(frame[1]));
      absl::StatusOr<Segment> ss = LoadGdtSegment(st, mem_, static_cast<uint16_t>(frame[4]));
      if (cs.ok() && ss.ok()) {
        st.rip = frame[0];
        st.cs = *cs;
        st.rflags = frame[2] & ~kRflagsTf;
        st.gpr[kRsp] = frame[3];
        st.ss = *ss;
        stats_.user_steps++;
        dirty = true;
      }
    }
    if (!dirty) {
      // A #DB that is the guest's own (kernel-mode, or the guest had TF set):
      // let its handler run. Drop the breakpoint; stepping continues.
      tf_trick_handler_.reset();
      VBTS_RETURN_IF_ERROR(SetDebug(KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP, 0, 0));
    }
  }
  if (observer_) VBTS_RETURN_IF_ERROR(observer_->AtBoundary(st, dirty));
  return Supervise(st, dirty);
}

absl::StatusOr<Supervisor::Verdict> Supervisor::OnInternalError() {
  stats_.internal_errors++;
  const kvm_run* run = vcpu_.run();
  VBTS_ASSIGN_OR_RETURN(CpuState st, vcpu_.GetState());
  if (run->internal.suberror != KVM_INTERNAL_ERROR_EMULATION) {
    return Verdict{Verdict::kUnsupported,
                   absl::StrFormat("KVM internal error (suberror %u) at %s", run->internal.suberror, st.Describe())};
  }
  bool dirty = false;
  if (observer_) VBTS_RETURN_IF_ERROR(observer_->AtBoundary(st, dirty));
  VBTS_ASSIGN_OR_RETURN(std::optional<Verdict> v, CompleteAt(st, dirty, /*must=*/true));
  if (v) return *v;
  return Supervise(st, dirty);
}

absl::StatusOr<std::optional<Supervisor::Verdict>> Supervisor::CompleteAt(CpuState& st, bool& dirty, bool must) {
  absl::StatusOr<DecodedInsn> insn = DecodeCurrent(st, mem_);
  if (!insn.ok()) {
    if (!must) return std::optional<Verdict>();  // KVM itself will fault on the fetch
    return std::optional<Verdict>(Verdict{
        Verdict::kUnsupported, absl::StrFormat("KVM could not execute the instruction at %s, and vbts cannot "
                                               "decode it: %s",
                                               st.Describe(), insn.status().message())});
  }
  if (!must && !SupervisedCompletion(*insn)) return std::optional<Verdict>();
  if (NeedsMsrs(*insn)) VBTS_RETURN_IF_ERROR(vcpu_.ReadSystemMsrs(&st));
  CpuidFn cpuid = [this](uint32_t leaf, uint32_t subleaf) {
    pmu::CpuidResult r = model_.Cpuid(leaf, subleaf, 0);
    return CpuidResult{r.eax, r.ebx, r.ecx, r.edx};
  };
  const CpuState before = st;
  absl::StatusOr<Completion> c = Complete(st, mem_, *insn, cpuid);
  if (!c.ok()) {
    return std::optional<Verdict>(Verdict{
        Verdict::kUnsupported, absl::StrFormat("`%s` at %s: %s", insn->mnemonic, st.Describe(), c.status().message())});
  }
  switch (c->result) {
    case Completion::Result::kRetired:
      stats_.completed++;
      dirty = true;
      if (observer_) VBTS_RETURN_IF_ERROR(observer_->Retired(before, c->transfer, st, dirty));
      return std::optional<Verdict>();
    case Completion::Result::kFault: {
      if (dirty) {
        VBTS_RETURN_IF_ERROR(vcpu_.SetState(st));
        dirty = false;
      }
      if (c->fault.vector == 14) {  // #PF reports its linear address in CR2 (SDM 4.7)
        st.cr2 = c->fault.cr2;
        VBTS_RETURN_IF_ERROR(vcpu_.SetState(st));
      }
      VBTS_RETURN_IF_ERROR(vcpu_.InjectException(c->fault.vector, c->fault.error_code));
      stats_.faults_injected++;
      last_exception_ = ExceptionRecord{c->fault.vector, c->fault.error_code, st.rip};
      return std::optional<Verdict>(Verdict{});
    }
    case Completion::Result::kNotMine:
      if (!must) return std::optional<Verdict>();
      return std::optional<Verdict>(Verdict{
          Verdict::kUnsupported,
          absl::StrFormat("this host's KVM cannot execute `%s` at %s, and vbts does not complete it", insn->mnemonic,
                          st.Describe())});
  }
  return std::optional<Verdict>();
}

absl::StatusOr<Supervisor::Verdict> Supervisor::Supervise(CpuState& st, bool dirty) {
  if (ShouldStep()) {
    for (int i = 0; i < kMaxChainedCompletions; i++) {
      // An interrupt vbts raised comes before the instruction at RIP: let KVM
      // deliver it instead of performing that instruction.
      if (observer_ && observer_->EventPending()) break;
      absl::StatusOr<DecodedInsn> insn = DecodeCurrent(st, mem_);
      if (insn.ok() && IsHlt(*insn)) {
        // kvm-host-facts: under single-step KVM runs straight past HLT. Do what
        // HLT does: advance RIP, leave no interrupt shadow, and halt the vCPU
        // in the kernel until an interrupt wakes it (or report IF=0 for good).
        if (!(st.rflags & kRflagsIf)) return Verdict{Verdict::kHaltedIfClear, ""};
        const CpuState before = st;
        st.rip += insn->length;
        st.interrupt_shadow = false;
        if (observer_) {
          ControlTransfer none;
          none.from = before.pc_linear();
          none.to = st.pc_linear();
          none.old_cpl = none.new_cpl = st.cpl();
          VBTS_RETURN_IF_ERROR(observer_->Retired(before, none, st, dirty));
        }
        VBTS_RETURN_IF_ERROR(vcpu_.SetState(st));
        VBTS_RETURN_IF_ERROR(vcpu_.SetMpState(KVM_MP_STATE_HALTED));
        stats_.halts++;
        return Verdict{};
      }
      uint64_t before = stats_.completed;
      VBTS_ASSIGN_OR_RETURN(std::optional<Verdict> v, CompleteAt(st, dirty, /*must=*/false));
      if (v) return *v;
      if (stats_.completed == before) break;
    }
    VBTS_ASSIGN_OR_RETURN(Verdict v, PrepareStep(st, dirty));
    if (v.kind != Verdict::kResume) return v;
  } else if (debug_control_ != 0) {
    VBTS_RETURN_IF_ERROR(SetDebug(0, 0, 0));  // tracing ended on a host that needs no stepping
  }
  if (dirty) VBTS_RETURN_IF_ERROR(vcpu_.SetState(st));
  return Verdict{};
}

absl::StatusOr<Supervisor::Verdict> Supervisor::PrepareStep(CpuState& st, bool& dirty) {
  const bool native_user = st.mode() == CpuMode::kLong64 && st.cpl() == 3 && facts_.native_user_needs_tf_trick;
  if (!native_user) {
    tf_trick_handler_.reset();
    VBTS_RETURN_IF_ERROR(SetDebug(KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP, 0, 0));
    return Verdict{};
  }
  // kvm-host-facts (a): KVM does not intercept single-step traps of native
  // 64-bit CPL3 code, so the guest's own #DB handler receives them. vbts sets
  // TF and puts a hardware breakpoint on that handler's entry (which runs
  // emulated, where breakpoints fire before the instruction), then unwinds
  // the frame in OnDebug.
  absl::StatusOr<uint64_t> handler = InterruptGateTarget(st, mem_, kVectorDb);
  if (!handler.ok()) {
    return Verdict{Verdict::kUnsupported,
                   absl::StrFormat("cannot supervise 64-bit ring-3 code at %s on this host: vbts steps it through "
                                   "the guest's #DB gate, which is unusable (%s)",
                                   st.Describe(), handler.status().message())};
  }
  guest_tf_ = (st.rflags & kRflagsTf) != 0;
  if (!guest_tf_) {
    st.rflags |= kRflagsTf;
    dirty = true;
  }
  tf_trick_handler_ = *handler;
  VBTS_RETURN_IF_ERROR(SetDebug(KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP | KVM_GUESTDBG_USE_HW_BP, *handler,
                                kDr7ExecBp0));
  return Verdict{};
}

}  // namespace vbts::vcpu
