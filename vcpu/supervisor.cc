// supervisor.cc: the supervision policy (free run with guards, or
// single-stepping), on-demand completion, the #UD guard, CPUID guards, HLT
// under single-step, and the TF trick for native 64-bit user code.
#include "vcpu/supervisor.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include <Zydis/Zydis.h>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "vcpu/descriptors.h"
#include "vcpu/guards.h"

namespace vbts::vcpu {
namespace {

constexpr int kDebugRegisters = 4;
// DR7: Ln (bit 2n) enables breakpoint n; RWn/LENn = 0: execute, 1 byte.
// GE (bit 9, recommended) and bit 10 (reads as 1).
constexpr uint64_t kDr7Fixed = (1u << 9) | (1u << 10);
constexpr uint64_t kDr7L3 = 1u << 6;  // DR3 enabled; RW3/LEN3 = 0: execute
// A completed instruction may land on another that needs completion (an INT
// whose handler starts with IRET); a guest cannot make vbts loop forever.
constexpr int kMaxChainedCompletions = 64;

bool IsHlt(const DecodedInsn& insn) { return insn.length == 1 && insn.bytes[0] == 0xF4; }

// ENDBR64 (F3 0F 1E FA) and ENDBR32 (F3 0F 1E FB): NOPs for a CPU without
// CET, which is every vbts model (no CPUID.7.EDX[20], CR4.CET cannot be set).
bool IsEndbr(const DecodedInsn& insn) {
  return insn.length == 4 && insn.bytes[0] == 0xF3 && insn.bytes[1] == 0x0F && insn.bytes[2] == 0x1E &&
         (insn.bytes[3] == 0xFA || insn.bytes[3] == 0xFB);
}

bool IsSoftwareInterrupt(const DecodedInsn& insn) {
  return insn.kind == InsnKind::kIntN || insn.kind == InsnKind::kInt3 || insn.kind == InsnKind::kInto ||
         insn.kind == InsnKind::kInt1;
}

// Instructions vbts performs itself when it stops in front of one on a host
// that needs supervision: each is one the host's emulator either fails on or
// gets wrong without telling the VMM (docs/completion.md has the table).
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

const char* SupervisorModeName(Supervisor::Mode m) {
  switch (m) {
    case Supervisor::Mode::kFree: return "free run";
    case Supervisor::Mode::kGuarded: return "free run with guards";
    case Supervisor::Mode::kStepping: return "single-stepping";
  }
  return "?";
}

std::vector<uint64_t> FindCpuidSites(const uint8_t* code, size_t size, uint64_t base) {
  std::vector<uint64_t> sites;
  for (size_t i = 0; i + 1 < size; i++)
    if (code[i] == 0x0F && code[i + 1] == 0xA2) sites.push_back(base + i);
  return sites;
}

std::vector<uint64_t> FindMovDr7Sites(const uint8_t* code, size_t size, uint64_t base) {
  std::vector<uint64_t> sites;
  for (size_t i = 0; i + 2 < size; i++)
    if (code[i] == 0x0F && code[i + 1] == 0x23 && code[i + 2] >= 0xF8) sites.push_back(base + i);
  return sites;
}

std::vector<uint64_t> ConfirmInstructionStarts(const uint8_t* code, size_t size, uint64_t base,
                                               const std::vector<uint64_t>& sites) {
  std::vector<bool> start32(size, false), start64(size, false);
  for (auto [mode, width, starts] : {std::tuple{ZYDIS_MACHINE_MODE_LEGACY_32, ZYDIS_STACK_WIDTH_32, &start32},
                                     std::tuple{ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64, &start64}}) {
    ZydisDecoder dec;
    if (ZYAN_FAILED(ZydisDecoderInit(&dec, mode, width))) return {};
    ZydisDecodedInstruction zi;
    for (size_t i = 0; i < size;) {
      (*starts)[i] = true;
      if (ZYAN_FAILED(ZydisDecoderDecodeInstruction(&dec, nullptr, code + i, size - i, &zi))) {
        i++;
        continue;
      }
      i += zi.length;
    }
  }
  std::vector<uint64_t> out;
  for (uint64_t site : sites)
    if (site >= base && site - base < size && (start32[site - base] || start64[site - base])) out.push_back(site);
  return out;
}

std::string ExceptionRecord::Describe() const {
  static const char* kNames[32] = {"#DE", "#DB", "NMI", "#BP", "#OF", "#BR", "#UD", "#NM", "#DF", "#MF(9)",
                                   "#TS", "#NP", "#SS", "#GP", "#PF", "#15", "#MF", "#AC", "#MC", "#XM",
                                   "#VE", "#CP"};
  std::string name = vector < 32 && kNames[vector] ? kNames[vector] : absl::StrFormat("vector %u", vector);
  if (error_code) return absl::StrFormat("%s(0x%x) at RIP 0x%x", name, *error_code, rip);
  return absl::StrFormat("%s at RIP 0x%x", name, rip);
}

Supervisor::Supervisor(KvmVcpu& vcpu, PhysMemory& mem, const pmu::CpuModel& model, const HostFacts& facts,
                       SupervisorOptions options)
    : vcpu_(vcpu), mem_(mem), model_(model), facts_(facts), options_(std::move(options)) {
  if (!facts_.needs_supervision) return;
  // Guards are KVM hardware breakpoints in code KVM emulates.
  const bool breakpoints = (facts_.guest_debug_flags & KVM_GUESTDBG_USE_HW_BP) &&
                           (facts_.hw_bp_rf_pm32.outcome == ProbeOutcome::kWorks ||
                            facts_.hw_bp_rf_pm32.outcome == ProbeOutcome::kDiffers);
  if (!breakpoints) {
    stepping_reason_ = "this host's KVM hardware breakpoints do not work, so vbts cannot guard the guest";
    return;
  }
  std::vector<uint64_t> sites;
  if (facts_.needs_cpuid_completion) {
    if (options_.exact_cpuid) {
      stepping_reason_ = "--exact-cpuid";
      return;
    }
    sites = options_.cpuid_sites;
  }
  const size_t cpuid_count = sites.size();
  if (facts_.emulate_data_breakpoints)
    sites.insert(sites.end(), options_.movdr7_sites.begin(), options_.movdr7_sites.end());
  std::sort(sites.begin(), sites.end());
  sites.erase(std::unique(sites.begin(), sites.end()), sites.end());
  const size_t free_registers = kDebugRegisters - (facts_.needs_ud_guard ? 1 : 0);
  if (sites.size() > free_registers && facts_.needs_ud_guard) {
    // Code guards: patch the confirmed sites, keep breakpoints for the rest.
    std::vector<uint64_t> rest = sites;
    std::vector<CodePatch> patches;
    for (const SupervisorOptions::PatchableSite& p : options_.patchable) {
      bool wanted = false;
      for (uint64_t la : p.linear) wanted |= std::binary_search(sites.begin(), sites.end(), la);
      if (!wanted) continue;
      CodePatch cp;
      cp.gpa = p.gpa;
      if (!mem_.Read(Gpa(p.gpa), absl::MakeSpan(cp.original, 2)).ok()) continue;
      patches.push_back(cp);
      for (uint64_t la : p.linear) rest.erase(std::remove(rest.begin(), rest.end(), la), rest.end());
    }
    if (rest.size() <= free_registers) {
      patches_ = std::move(patches);
      sites = std::move(rest);
    }
  }
  if (sites.size() > free_registers) {
    stepping_reason_ =
        sites.size() == cpuid_count
            ? absl::StrFormat("the image has %u CPUID instructions, more than the %u debug registers left to guard "
                              "them",
                              sites.size(), free_registers)
            : absl::StrFormat("the image has %u CPUID and MOV-to-DR7 instructions, more than the %u debug "
                              "registers left to guard them",
                              sites.size(), free_registers);
    return;
  }
  cpuid_sites_ = std::move(sites);
}

std::string Supervisor::Statistics() const {
  std::string s = absl::StrFormat("supervisor: %s", SupervisorModeName(mode_));
  if (!stepping_reason_.empty()) absl::StrAppend(&s, " (", stepping_reason_, ")");
  absl::StrAppendFormat(&s,
                        "; %u steps (%u native user steps), %u guard stops (%u INT #UDs undone, %u #UDs passed, "
                        "%u CPUIDs at guarded sites, %u step-overs), %u instructions completed, %u internal errors, "
                        "%u faults injected, %u halts",
                        stats_.steps, stats_.user_steps, stats_.guard_stops, stats_.ud_undone, stats_.ud_passed,
                        stats_.cpuid_guarded, stats_.step_overs, stats_.completed, stats_.internal_errors,
                        stats_.faults_injected, stats_.halts);
  if (stats_.endbr_completed) absl::StrAppendFormat(&s, ", %u ENDBRs retired by vbts", stats_.endbr_completed);
  if (stats_.step_traps) absl::StrAppendFormat(&s, ", %u single-step traps after completions", stats_.step_traps);
  if (stats_.icebp_fixed) absl::StrAppendFormat(&s, ", %u ICEBP #DBs made trap-like", stats_.icebp_fixed);
  if (stats_.movss_db_held)
    absl::StrAppendFormat(&s, ", %u single-step #DBs held across MOV SS", stats_.movss_db_held);
  if (!patches_.empty())
    absl::StrAppendFormat(&s, "; %u code guards (%u dropped), %u code-guard stops", patches_.size(),
                          patches_.size() - code_guard_sites().size(), stats_.code_guard_stops);
  s += "\n";
  return s;
}

std::vector<uint64_t> Supervisor::code_guard_sites() const {
  std::vector<uint64_t> r;
  for (const CodePatch& p : patches_)
    if (!p.dropped) r.push_back(p.gpa);
  return r;
}

std::optional<uint64_t> Supervisor::PcGpa(const CpuState& st) {
  absl::StatusOr<pmu::Translation> t = pmu::Translate(st.paging_regs(), mem_, Gva(st.pc_linear()),
                                                      pmu::Access{.user = st.cpl() == 3, .fetch = true},
                                                      /*set_accessed_dirty=*/false);
  if (!t.ok() || !t->fault.ok()) return std::nullopt;
  return t->gpa.value;
}

Supervisor::CodePatch* Supervisor::PatchAt(std::optional<uint64_t> gpa) {
  if (!gpa) return nullptr;
  for (CodePatch& p : patches_)
    if (p.gpa == *gpa && !p.dropped) return &p;
  return nullptr;
}

absl::Status Supervisor::ApplyPatches(std::optional<uint64_t> skip_gpa) {
  static constexpr uint8_t kUd2[2] = {0x0F, 0x0B};
  for (CodePatch& p : patches_) {
    if (p.dropped || p.applied || (skip_gpa && *skip_gpa == p.gpa)) continue;
    uint8_t now[2];
    VBTS_RETURN_IF_ERROR(mem_.Read(Gpa(p.gpa), absl::MakeSpan(now)));
    if (std::memcmp(now, p.original, 2) != 0) {
      p.dropped = true;  // the guest wrote other code there
      continue;
    }
    VBTS_RETURN_IF_ERROR(mem_.Write(Gpa(p.gpa), absl::MakeConstSpan(kUd2)));
    p.applied = true;
  }
  return absl::OkStatus();
}

absl::Status Supervisor::RemovePatch(CodePatch& p) {
  if (!p.applied) return absl::OkStatus();
  uint8_t now[2];
  VBTS_RETURN_IF_ERROR(mem_.Read(Gpa(p.gpa), absl::MakeSpan(now)));
  p.applied = false;
  if (now[0] != 0x0F || now[1] != 0x0B) {
    p.dropped = true;  // overwritten by the guest: its bytes stay
    return absl::OkStatus();
  }
  return mem_.Write(Gpa(p.gpa), absl::MakeConstSpan(p.original, 2));
}

absl::Status Supervisor::RemovePatches() {
  for (CodePatch& p : patches_) VBTS_RETURN_IF_ERROR(RemovePatch(p));
  return absl::OkStatus();
}

absl::Status Supervisor::SetDebug(uint32_t control, const std::array<uint64_t, 4>& dr, uint64_t dr7) {
  if (control == debug_control_ && dr == debug_dr_ && dr7 == debug_dr7_) return absl::OkStatus();
  std::array<uint64_t, 8> regs = {dr[0], dr[1], dr[2], dr[3], 0, 0, 0, dr7};
  VBTS_RETURN_IF_ERROR(vcpu_.SetGuestDebug(control, regs));
  debug_control_ = control;
  debug_dr_ = dr;
  debug_dr7_ = dr7;
  return absl::OkStatus();
}

bool Supervisor::CompleteAtStop(const DecodedInsn& insn) const {
  return HostFailsInvisibly() && SupervisedCompletion(insn);
}

bool Supervisor::WantsStepping() const {
  return ObserverWantsSteps() || steps_requested_ || !stepping_reason_.empty() || patches_wait_for_idt_;
}

int Supervisor::GuardAddresses(const CpuState& st, std::array<uint64_t, 4>& addrs) {
  int n = 0;
  ud_entry_.reset();
  if (facts_.needs_ud_guard) {
    // Recomputed at every stop and exit: the guest may have changed IDTR or
    // IDT[6] since (docs/completion.md says what that leaves open).
    absl::StatusOr<uint64_t> entry = HandlerEntry(st, mem_, kVecUd);
    if (entry.ok()) {
      ud_entry_ = *entry;
      addrs[n++] = *entry;
    }
  }
  for (uint64_t site : cpuid_sites_)
    if (n < kDebugRegisters) addrs[n++] = site;
  db_entry_.reset();
  if (facts_.needs_ud_guard && n < kDebugRegisters) {
    absl::StatusOr<uint64_t> entry = HandlerEntry(st, mem_, kVecDb);
    if (entry.ok() && std::find(addrs.begin(), addrs.begin() + n, *entry) == addrs.begin() + n) {
      db_entry_ = *entry;
      addrs[n++] = *entry;
    }
  }
  return n;
}

bool Supervisor::NextRunSteps(const CpuState& st) {
  if (WantsStepping()) return true;
  if (!HostFailsInvisibly()) return false;
  std::array<uint64_t, 4> addrs{};
  const int n = GuardAddresses(st, addrs);
  return std::find(addrs.begin(), addrs.begin() + n, st.pc_linear()) != addrs.begin() + n;
}

absl::StatusOr<Supervisor::Verdict> Supervisor::Arm(CpuState& st, bool& dirty, bool at_boundary,
                                                    bool exception_pending, bool may_step_over) {
  std::array<uint64_t, 4> addrs{};
  int n = -1;  // guard addresses, computed once per Arm
  if (!patches_.empty()) {
    // Code guards need the guest's #UD handler; without one the guest is
    // stepped (every CPUID completed at its stop) until it has one.
    n = GuardAddresses(st, addrs);
    patches_wait_for_idt_ = !ud_entry_.has_value();
    if (WantsStepping()) VBTS_RETURN_IF_ERROR(RemovePatches());
  }
  if (WantsStepping()) {
    mode_ = Mode::kStepping;
    step_over_ = false;
    ud_entry_.reset();
    if (exception_pending || !at_boundary) {
      // The next stop is in an exception handler (ring 0), or the state may
      // not be written now: plain single-step; the TF trick waits.
      tf_trick_handler_.reset();
      VBTS_RETURN_IF_ERROR(SetDebug(KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP, {}, 0));
      return Verdict{};
    }
    return PrepareStep(st, dirty);
  }
  tf_trick_handler_.reset();
  free_run_ = true;  // the stops of a free run are not consecutive instructions
  if (!HostFailsInvisibly()) {
    mode_ = Mode::kFree;
    step_over_ = false;
    VBTS_RETURN_IF_ERROR(SetDebug(0, {}, 0));
    return Verdict{};
  }
  mode_ = Mode::kGuarded;
  if (n < 0) n = GuardAddresses(st, addrs);
  const std::optional<uint64_t> pc_gpa = patches_.empty() ? std::nullopt : PcGpa(st);
  bool on_guard = std::find(addrs.begin(), addrs.begin() + n, st.pc_linear()) != addrs.begin() + n;
  std::optional<uint64_t> skip;
  if (CodePatch* p = PatchAt(pc_gpa); p && at_boundary && may_step_over) {
    // The guest stopped in front of a code-guarded site (its #UD was taken
    // back): step its own bytes once, then guard it again. Elsewhere (an
    // I/O exit or a kick right before it) the patch stays and fires.
    VBTS_RETURN_IF_ERROR(RemovePatch(*p));
    on_guard = true;
    skip = pc_gpa;
  }
  VBTS_RETURN_IF_ERROR(ApplyPatches(skip));
  if (at_boundary && may_step_over && on_guard) {
    // KVM ignores RFLAGS.RF for its own breakpoints in emulated code: the
    // breakpoint would fire again at once. Step the one instruction with all
    // breakpoints off (and interrupts held back, so that it is this
    // instruction that runs), then re-arm at that stop.
    step_over_ = true;
    stats_.step_overs++;
    uint32_t control = KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP;
    if (facts_.guest_debug_flags & KVM_GUESTDBG_BLOCKIRQ) control |= KVM_GUESTDBG_BLOCKIRQ;
    VBTS_RETURN_IF_ERROR(SetDebug(control, {}, 0));
    return Verdict{};
  }
  step_over_ = false;
  uint64_t dr7 = kDr7Fixed;
  for (int i = 0; i < n; i++) dr7 |= 1ull << (2 * i);
  VBTS_RETURN_IF_ERROR(n ? SetDebug(KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_USE_HW_BP, addrs, dr7) : SetDebug(0, {}, 0));
  return Verdict{};
}

absl::StatusOr<Supervisor::Verdict> Supervisor::Start() {
  VBTS_ASSIGN_OR_RETURN(CpuState st, vcpu_.GetState());
  return Boundary(st, /*dirty=*/false, /*reported=*/false);
}

absl::StatusOr<Supervisor::Verdict> Supervisor::OnDebug() {
  const bool stepped = mode_ == Mode::kStepping || step_over_;
  if (stepped) {
    stats_.steps++;
  } else {
    stats_.guard_stops++;
  }
  step_over_ = false;
  reported_rip_.reset();
  VBTS_ASSIGN_OR_RETURN(CpuState st, vcpu_.GetState());
  last_stop_pc_ = st.pc_linear();
  bool dirty = false;
  if (mode_ == Mode::kStepping && tf_trick_handler_ && st.pc_linear() == *tf_trick_handler_) {
    // One native user instruction ran and its single-step #DB was delivered to
    // the guest's #DB handler, where vbts's breakpoint stopped it before the
    // handler's first instruction. Take the delivery back so that the guest
    // continues as if it had only been stepped.
    absl::StatusOr<CpuState> user = UndoDelivery(st, mem_);
    if (user.ok() && user->cpl() == 3 && !guest_tf_) {
      st = *user;
      st.rflags &= ~kRflagsTf;
      stats_.user_steps++;
      dirty = true;
    } else {
      // A #DB that is the guest's own (kernel-mode, or the guest had TF set):
      // let its handler run. Drop the breakpoint; stepping continues.
      tf_trick_handler_.reset();
      VBTS_RETURN_IF_ERROR(SetDebug(KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP, {}, 0));
    }
  }
  if (mode_ == Mode::kGuarded && ud_entry_ && st.pc_linear() == *ud_entry_) {
    VBTS_RETURN_IF_ERROR(UdGuard(st, dirty));
  } else if (mode_ == Mode::kGuarded && db_entry_ && st.pc_linear() == *db_entry_) {
    VBTS_ASSIGN_OR_RETURN(bool redelivered, DbGuard(st, dirty));
    if (redelivered) return Verdict{};
  }
  return Boundary(st, dirty, /*reported=*/false);
}

absl::Status Supervisor::UdGuard(CpuState& st, bool& dirty) {
  // The guest is at its #UD handler's first instruction. If the frame says
  // the #UD came from an INT n/INT3/INTO/INT1, it is the host's: no processor
  // raises #UD for those (INTO in 64-bit mode and LOCK INT do not decode as
  // such), so take the delivery back; Boundary() then completes the INT.
  absl::StatusOr<CpuState> before = UndoDelivery(st, mem_);
  if (before.ok() && !patches_.empty()) {
    CodePatch* p = PatchAt(PcGpa(*before));
    uint8_t now[2] = {0, 0};
    if (p && p->applied && mem_.Read(Gpa(p->gpa), absl::MakeSpan(now)).ok() && now[0] == 0x0F && now[1] == 0x0B) {
      // The #UD of a code guard: back to the site, with its own bytes.
      VBTS_RETURN_IF_ERROR(RemovePatch(*p));
      st = *before;
      dirty = true;
      stats_.code_guard_stops++;
      return absl::OkStatus();
    }
  }
  if (before.ok()) {
    absl::StatusOr<DecodedInsn> insn = DecodeCurrent(*before, mem_);
    if (insn.ok() && IsSoftwareInterrupt(*insn) && !insn->lock) {
      st = *before;
      dirty = true;
      stats_.ud_undone++;
      return absl::OkStatus();
    }
  }
  stats_.ud_passed++;  // a genuine #UD (or a jump to the handler): the guest's handler runs
  return absl::OkStatus();
}

absl::StatusOr<bool> Supervisor::DbGuard(CpuState& st, bool& dirty) {
  absl::StatusOr<CpuState> before = UndoDelivery(st, mem_);
  if (!before.ok()) return false;
  VBTS_ASSIGN_OR_RETURN(kvm_debugregs d, vcpu_.GetDebugRegs());
  constexpr uint64_t kDr6Bs = 1u << 14;
  if ((d.dr6 & kDr6Bs) && (before->rflags & kRflagsTf) && before->cpl() == 0 && before->rip >= 2) {
    // A single-step #DB right after MOV SS, r (8E /2, register form: the
    // two bytes before the frame's RIP are 8E D0-D7). Hardware holds it for
    // one more instruction (SDM 6.8.3, MOV SS blocking); this host's ring-0
    // emulator delivers it at once (kvm-unit-tests debug.c). Take the
    // delivery back: with TF still set, the host traps after the next one.
    uint8_t prev[2] = {0, 0};
    pmu::LinearMemory lin(mem_, before->paging_regs());
    absl::StatusOr<pmu::AccessFault> f =
        lin.Read(Gva(before->pc_linear() - 2), absl::MakeSpan(prev), pmu::Access{.implicit = true});
    if (f.ok() && f->ok() && prev[0] == 0x8E && (prev[1] & 0xF8) == 0xD0) {
      st = *before;
      dirty = true;
      // This #DB did not happen: its DR6.BS goes too (the one hardware
      // reports comes with the trap after the next instruction).
      d.dr6 &= ~kDr6Bs;
      VBTS_RETURN_IF_ERROR(vcpu_.SetDebugRegs(d));
      stats_.movss_db_held++;
      return false;
    }
  }
  absl::StatusOr<DecodedInsn> insn = DecodeCurrent(*before, mem_);
  if (!insn.ok() || insn->kind != InsnKind::kInt1) return false;
  // B0-B3, BD, BS, BT: a #DB with any of these has a cause of its own (a
  // breakpoint on the F1, a single-step trap landing on it, ...) and its RIP
  // is right. ICEBP reports none of them.
  constexpr uint64_t kDr6Causes = 0xF | (1u << 13) | (1u << 14) | (1u << 15);
  if (d.dr6 & kDr6Causes) return false;
  // Measured here (kvm-unit-tests debug.flat, ICEBP in native 64-bit ring 3):
  // the frame's RIP is the F1 itself, so the handler's IRET runs it again and
  // again. Hardware delivers ICEBP's #DB as a trap, after the instruction.
  st = *before;
  st.rip += insn->length;
  dirty = true;
  stats_.icebp_fixed++;
  VBTS_RETURN_IF_ERROR(DeliverDebugTrap(st, dirty, /*dr6_bits=*/0));
  return true;
}

absl::StatusOr<Supervisor::Verdict> Supervisor::OnInternalError() {
  stats_.internal_errors++;
  const kvm_run* run = vcpu_.run();
  VBTS_ASSIGN_OR_RETURN(CpuState st, vcpu_.GetState());
  const bool reported = reported_rip_ && *reported_rip_ == st.pc_linear();
  reported_rip_.reset();
  step_over_ = false;
  if (run->internal.suberror != KVM_INTERNAL_ERROR_EMULATION) {
    return Verdict{Verdict::kUnsupported,
                   absl::StrFormat("KVM internal error (suberror %u) at %s", run->internal.suberror, st.Describe())};
  }
  bool dirty = false;
  if (observer_ && !reported) {
    const uint64_t pc = st.pc_linear();
    observer_->SetConsecutive(mode_ == Mode::kStepping && !free_run_);
    VBTS_RETURN_IF_ERROR(observer_->AtBoundary(st, dirty));
    free_run_ = false;
    // The observer moved the guest (delivered a trap): the failed
    // instruction is no longer next.
    if (st.pc_linear() != pc) return Boundary(st, dirty, /*reported=*/true);
  }
  absl::StatusOr<DecodedInsn> insn = DecodeCurrent(st, mem_);
  if (!insn.ok()) {
    return Verdict{Verdict::kUnsupported,
                   absl::StrFormat("KVM could not execute the instruction at %s, and vbts cannot decode it: %s",
                                   st.Describe(), insn.status().message())};
  }
  const CpuState before_insn = st;
  VBTS_ASSIGN_OR_RETURN(Outcome o, Perform(st, dirty, *insn, /*must=*/true));
  switch (o.kind) {
    case Outcome::kStop:
    case Outcome::kNotMine:
      return Verdict{Verdict::kUnsupported, o.message};
    case Outcome::kFault: {
      VBTS_ASSIGN_OR_RETURN(Verdict v, Arm(st, dirty, /*at_boundary=*/true, /*exception_pending=*/true));
      if (v.kind != Verdict::kResume) return v;
      VBTS_RETURN_IF_ERROR(InjectFault(st, dirty, o.fault));
      return Verdict{};
    }
    case Outcome::kRetired: {
      VBTS_ASSIGN_OR_RETURN(bool trapped, StepTrapAfterCompletion(before_insn, *insn, st, dirty));
      if (trapped) return Verdict{};
      break;
    }
  }
  return Boundary(st, dirty, /*reported=*/false);
}

absl::StatusOr<Supervisor::Verdict> Supervisor::OnOtherExit(bool interrupted) {
  reported_rip_.reset();
  // Nothing to re-evaluate on a host that needs no supervision and with no
  // observer; a step-over in flight ends at its own stop.
  if (step_over_ || (!HostFailsInvisibly() && !observer_ && mode_ == Mode::kFree)) return Verdict{};
  // A TF-trick step is in flight (RFLAGS.TF is vbts's, not the guest's): its
  // stop comes after the one native instruction; decide there.
  if (tf_trick_handler_) return Verdict{};
  VBTS_ASSIGN_OR_RETURN(CpuState st, vcpu_.GetState());
  bool dirty = false;
  // No step-over here: a guest that is about to execute a guarded
  // instruction has not hit the breakpoint yet, and must (OnDebug handles it).
  VBTS_ASSIGN_OR_RETURN(Verdict v, Arm(st, dirty, /*at_boundary=*/interrupted, /*exception_pending=*/false,
                                       /*may_step_over=*/false));
  if (v.kind != Verdict::kResume) return v;
  if (dirty) VBTS_RETURN_IF_ERROR(vcpu_.SetState(st));
  if (mode_ == Mode::kStepping && !tf_trick_handler_ && st.pc_linear() != last_stop_pc_) {
    // Measured on this host: at a port-I/O exit of a stepped guest RIP is
    // already past the IN/OUT, and on re-entry KVM runs the next instruction
    // without a single-step stop, so it would escape supervision and the
    // tracer. A breakpoint (DR3) on it stops the guest before it runs
    // (breakpoints fire before the instruction in emulated code; native
    // 64-bit ring-3 code does no port I/O). Where RIP has not moved
    // (VT-x/SVM, MSR exits) KVM's own step stop follows and nothing is done.
    // The next stop re-arms (Boundary -> Arm), which removes it; a kick of
    // the timer before the guest ran again arms it anew (RIP still moved).
    VBTS_RETURN_IF_ERROR(SetDebug(debug_control_ | KVM_GUESTDBG_USE_HW_BP, {0, 0, 0, st.pc_linear()},
                                  debug_dr7_ | kDr7Fixed | kDr7L3));
    stats_.post_io_breakpoints++;
  }
  return v;
}

absl::StatusOr<Supervisor::Outcome> Supervisor::Perform(CpuState& st, bool& dirty, const DecodedInsn& insn,
                                                        bool must) {
  if (NeedsMsrs(insn)) VBTS_RETURN_IF_ERROR(vcpu_.ReadSystemMsrs(&st));
  const uint64_t cr4 = st.cr4;
  CpuidFn cpuid = [this, cr4](uint32_t leaf, uint32_t subleaf) {
    constexpr uint32_t kMsrApicBase = 0x1B;
    absl::StatusOr<uint64_t> base = leaf == 1 ? vcpu_.GetMsr(kMsrApicBase) : absl::StatusOr<uint64_t>(0);
    // (If KVM cannot tell, the APIC counts as enabled, as at reset.)
    pmu::CpuidResult r = model_.CpuidInState(leaf, subleaf, base.ok() ? *base : (1u << 11), cr4);
    return CpuidResult{r.eax, r.ebx, r.ecx, r.edx};
  };
  const CpuState before = st;
  absl::StatusOr<Completion> c = Complete(st, mem_, insn, cpuid);
  if (!c.ok()) {
    return Outcome{Outcome::kStop, {},
                   absl::StrFormat("`%s` at %s: %s", insn.mnemonic, before.Describe(), c.status().message())};
  }
  switch (c->result) {
    case Completion::Result::kRetired:
      stats_.completed++;
      if (insn.kind == InsnKind::kCpuid && mode_ == Mode::kGuarded) stats_.cpuid_guarded++;
      dirty = true;
      if (observer_) VBTS_RETURN_IF_ERROR(observer_->Retired(before, c->transfer, st, dirty));
      return Outcome{Outcome::kRetired};
    case Completion::Result::kFault:
      return Outcome{Outcome::kFault, c->fault};
    case Completion::Result::kNotMine:
      break;
  }
  if (!must) return Outcome{};
  return Outcome{Outcome::kStop, {},
                 absl::StrFormat("this host's KVM cannot execute `%s` at %s, and vbts does not complete it",
                                 insn.mnemonic, st.Describe())};
}

absl::StatusOr<bool> Supervisor::StepTrapAfterCompletion(const CpuState& before, const DecodedInsn& insn,
                                                         CpuState& st, bool& dirty) {
  if (!(before.rflags & kRflagsTf) || ObserverWantsSteps() || mode_ == Mode::kStepping) return false;
  // INT n/INT3/INTO/INT1 clear TF on the way into the handler and owe no trap
  // (SDM 6.12.1); SYSCALL's RFLAGS mask decides for itself.
  if (IsSoftwareInterrupt(insn) || insn.kind == InsnKind::kSyscall) return false;
  VBTS_RETURN_IF_ERROR(DeliverDebugTrap(st, dirty, /*dr6_bits=*/1u << 14));  // BS
  stats_.step_traps++;
  return true;
}

absl::Status Supervisor::DeliverDebugTrap(CpuState& st, bool& dirty, uint64_t dr6_bits) {
  // With an exception pending Arm only chooses the debug controls (plain
  // single-step or guards); it never stops the run.
  VBTS_ASSIGN_OR_RETURN(Verdict v, Arm(st, dirty, /*at_boundary=*/true, /*exception_pending=*/true));
  (void)v;
  if (dirty) VBTS_RETURN_IF_ERROR(vcpu_.SetState(st));
  dirty = false;
  if (dr6_bits) {
    VBTS_ASSIGN_OR_RETURN(kvm_debugregs d, vcpu_.GetDebugRegs());
    d.dr6 |= dr6_bits;
    VBTS_RETURN_IF_ERROR(vcpu_.SetDebugRegs(d));
  }
  return vcpu_.InjectException(kVecDb, std::nullopt);
}

absl::Status Supervisor::ReportRetiredInPlace(const CpuState& before, CpuState& st, bool& dirty) {
  if (!observer_) return absl::OkStatus();
  ControlTransfer t;  // no transfer: the instruction fell through
  t.from = before.pc_linear();
  t.to = st.pc_linear();
  t.old_cpl = t.new_cpl = before.cpl();
  return observer_->Retired(before, t, st, dirty);
}

absl::Status Supervisor::InjectFault(CpuState& st, bool& dirty, const GuestFault& fault) {
  if (fault.vector == kVecPf) {  // #PF reports its linear address in CR2 (SDM 4.7)
    st.cr2 = fault.cr2;
    dirty = true;
  }
  if (dirty) VBTS_RETURN_IF_ERROR(vcpu_.SetState(st));
  dirty = false;
  VBTS_RETURN_IF_ERROR(vcpu_.InjectException(fault.vector, fault.error_code));
  stats_.faults_injected++;
  last_exception_ = ExceptionRecord{fault.vector, fault.error_code, st.rip};
  return absl::OkStatus();
}

absl::StatusOr<Supervisor::Verdict> Supervisor::Boundary(CpuState& st, bool dirty, bool reported) {
  bool st_reported = reported;
  for (int i = 0; i < kMaxChainedCompletions; i++) {
    if (observer_ && !st_reported) {
      observer_->SetConsecutive(mode_ == Mode::kStepping && !free_run_);
      VBTS_RETURN_IF_ERROR(observer_->AtBoundary(st, dirty));
      free_run_ = false;
    }
    st_reported = true;
    // An interrupt or trap the observer raised comes before the instruction
    // at RIP: let KVM deliver it instead of performing that instruction.
    if (observer_ && observer_->EventPending()) break;
    if (!HostFailsInvisibly() && !WantsStepping()) break;  // plain KVM: nothing to look at
    absl::StatusOr<DecodedInsn> insn = DecodeCurrent(st, mem_);
    if (!insn.ok()) break;  // KVM itself will fault on the fetch
    if (IsHlt(*insn) && NextRunSteps(st)) {
      // kvm-host-facts: under single-step KVM runs straight past HLT. Do what
      // HLT does: advance RIP, leave no interrupt shadow, and halt the vCPU
      // in the kernel until an interrupt wakes it (or report IF=0 for good).
      if (!(st.rflags & kRflagsIf)) {
        if (dirty) VBTS_RETURN_IF_ERROR(vcpu_.SetState(st));
        return Verdict{Verdict::kHaltedIfClear, ""};
      }
      const CpuState before = st;
      st.rip += insn->length;
      st.interrupt_shadow = false;
      dirty = true;
      stats_.halts++;
      VBTS_RETURN_IF_ERROR(ReportRetiredInPlace(before, st, dirty));
      VBTS_ASSIGN_OR_RETURN(Verdict v, Arm(st, dirty, /*at_boundary=*/true, /*exception_pending=*/false));
      if (v.kind != Verdict::kResume) return v;
      if (dirty) VBTS_RETURN_IF_ERROR(vcpu_.SetState(st));
      VBTS_RETURN_IF_ERROR(vcpu_.SetMpState(KVM_MP_STATE_HALTED));
      return Verdict{};
    }
    if (IsEndbr(*insn) && NextRunSteps(st)) {
      // Measured on the PVM hosts: one single-step over ENDBR64 also runs the
      // next instruction, so the observer would miss a boundary (and a
      // branch, a counted instruction, a breakpoint there). vbts retires the
      // NOP itself and stops in front of the next instruction.
      const CpuState before = st;
      st.rip += insn->length;
      dirty = true;
      stats_.endbr_completed++;
      VBTS_RETURN_IF_ERROR(ReportRetiredInPlace(before, st, dirty));
      VBTS_ASSIGN_OR_RETURN(bool trapped, StepTrapAfterCompletion(before, *insn, st, dirty));
      if (trapped) return Verdict{};
      st_reported = false;
      continue;
    }
    if (!CompleteAtStop(*insn)) break;
    const CpuState before_insn = st;
    VBTS_ASSIGN_OR_RETURN(Outcome o, Perform(st, dirty, *insn, /*must=*/false));
    if (o.kind == Outcome::kStop) {
      if (dirty) VBTS_RETURN_IF_ERROR(vcpu_.SetState(st));
      return Verdict{Verdict::kUnsupported, o.message};
    }
    if (o.kind == Outcome::kFault) {
      VBTS_ASSIGN_OR_RETURN(Verdict v, Arm(st, dirty, /*at_boundary=*/true, /*exception_pending=*/true));
      if (v.kind != Verdict::kResume) return v;
      VBTS_RETURN_IF_ERROR(InjectFault(st, dirty, o.fault));
      return Verdict{};
    }
    if (o.kind == Outcome::kNotMine) break;
    VBTS_ASSIGN_OR_RETURN(bool trapped, StepTrapAfterCompletion(before_insn, *insn, st, dirty));
    if (trapped) return Verdict{};
    st_reported = false;  // retired: the guest is at a new boundary
  }
  VBTS_ASSIGN_OR_RETURN(Verdict v, Arm(st, dirty, /*at_boundary=*/true, /*exception_pending=*/false));
  if (v.kind != Verdict::kResume) return v;
  if (dirty) VBTS_RETURN_IF_ERROR(vcpu_.SetState(st));
  if (st_reported && (mode_ == Mode::kStepping || step_over_)) reported_rip_ = st.pc_linear();
  return v;
}

absl::StatusOr<Supervisor::Verdict> Supervisor::PrepareStep(CpuState& st, bool& dirty) {
  const bool native_user = st.mode() == CpuMode::kLong64 && st.cpl() == 3 && facts_.native_user_needs_tf_trick;
  if (!native_user) {
    tf_trick_handler_.reset();
    VBTS_RETURN_IF_ERROR(SetDebug(KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP, {}, 0));
    return Verdict{};
  }
  // kvm-host-facts (a): KVM does not intercept single-step traps of native
  // 64-bit CPL3 code, so the guest's own #DB handler receives them. vbts sets
  // TF and puts a hardware breakpoint on that handler's entry (which runs
  // emulated, where breakpoints fire before the instruction), then takes the
  // delivery back in OnDebug.
  absl::StatusOr<uint64_t> handler = HandlerEntry(st, mem_, kVecDb);
  if (!handler.ok()) {
    return Verdict{Verdict::kUnsupported,
                   absl::StrFormat("cannot single-step 64-bit ring-3 code at %s on this host: vbts steps it through "
                                   "the guest's #DB gate, which is unusable (%s)",
                                   st.Describe(), handler.status().message())};
  }
  guest_tf_ = (st.rflags & kRflagsTf) != 0;
  if (!guest_tf_) {
    st.rflags |= kRflagsTf;
    dirty = true;
  }
  tf_trick_handler_ = *handler;
  VBTS_RETURN_IF_ERROR(SetDebug(KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP | KVM_GUESTDBG_USE_HW_BP,
                                {*handler, 0, 0, 0}, kDr7Fixed | 1));
  return Verdict{};
}

}  // namespace vbts::vcpu
