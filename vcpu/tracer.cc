// tracer.cc: inferring control transfers from single-step stops.
//
// At each boundary the tracer decodes the instruction about to run and
// predicts where it can go: its fall-through, the target of a direct branch,
// the register or stack slot of an indirect JMP/CALL or RET.  At the next
// boundary it checks the guest against that prediction.  When the guest is
// somewhere else, the host delivered an exception or interrupt; on this host
// the first stop after a delivery is after the handler's first instruction
// (kvm-host-facts.md), so the tracer looks for the IDT vector whose handler's
// first instruction leads exactly there and whose stack frame returns to the
// instruction that was interrupted or faulted.  Instructions the supervisor
// performs itself arrive through Retired() with their exact transfer.
#include "vcpu/tracer.h"

#include <x86intrin.h>

#include <cstring>
#include <set>

#include "absl/strings/str_format.h"
#include "pmu/paging.h"
#include "base/status_macros.h"
#include "vcpu/guards.h"

namespace vbts::vcpu {
namespace {

constexpr uint32_t kLvtPcOffset = 0x340;
constexpr uint32_t kLvtMask = 1u << 16;
constexpr uint32_t kDeliveryFixed = 0, kDeliveryNmi = 4;
constexpr int kMaxWarnings = 32;

uint64_t IpMask(pmu::ExecMode m, int operand_size) {
  if (m == pmu::ExecMode::kLong64) return operand_size == 16 ? 0xFFFF : ~0ull;
  return operand_size == 16 ? 0xFFFF : 0xFFFFFFFFull;
}

// The IP after `insn` at `rip` when it does not branch.
uint64_t FallthroughOf(pmu::ExecMode m, uint64_t rip, const DecodedInsn& insn) {
  uint64_t f = (rip + insn.length) & (m == pmu::ExecMode::kLong64 ? ~0ull : 0xFFFFFFFFull);
  if (m == pmu::ExecMode::kProt16 || m == pmu::ExecMode::kReal) f &= 0xFFFF;
  return f;
}

absl::StatusOr<std::optional<uint64_t>> ReadStack(const CpuState& st, PhysMemory& mem, uint64_t la, int bytes) {
  pmu::LinearMemory lin(mem, st.paging_regs());
  uint8_t b[8] = {};
  pmu::Access acc;
  acc.user = st.cpl() == 3;
  VBTS_ASSIGN_OR_RETURN(pmu::AccessFault f, lin.Read(Gva(la), absl::MakeSpan(b, bytes), acc));
  if (!f.ok()) return std::optional<uint64_t>();
  uint64_t v = 0;
  std::memcpy(&v, b, bytes);
  return std::optional<uint64_t>(v);
}

pmu::BranchKind KindOfCompleted(TransferKind k) {
  switch (k) {
    case TransferKind::kInt: return pmu::BranchKind::kSoftInt;
    case TransferKind::kIret: return pmu::BranchKind::kIret;
    case TransferKind::kFarCall: return pmu::BranchKind::kFarCall;
    case TransferKind::kFarJmp: return pmu::BranchKind::kFarJmp;
    case TransferKind::kFarRet: return pmu::BranchKind::kFarRet;
    case TransferKind::kSyscall: return pmu::BranchKind::kSyscall;
    case TransferKind::kSysret: return pmu::BranchKind::kSysret;
    case TransferKind::kSysenter: return pmu::BranchKind::kSysenter;
    case TransferKind::kSysexit: return pmu::BranchKind::kSysexit;
    case TransferKind::kNone:
    case TransferKind::kCpuid: return pmu::BranchKind::kNone;
  }
  return pmu::BranchKind::kNone;
}

int SoftIntVector(const DecodedInsn& insn) {
  switch (insn.kind) {
    case InsnKind::kIntN: return static_cast<int>(insn.imm & 0xFF);
    case InsnKind::kInt3: return 3;
    case InsnKind::kInto: return 4;
    case InsnKind::kInt1: return 1;
    default: return -1;
  }
}

}  // namespace

Tracer::Tracer(VcpuControl& vcpu, PhysMemory& mem, pmu::VirtualPmu& pmu, std::function<absl::Status(uint8_t)> send_msi)
    : vcpu_(&vcpu), mem_(mem), pmu_(pmu), send_msi_(std::move(send_msi)) {}

void Tracer::Rebind(VcpuControl& vcpu, std::function<absl::Status(uint8_t)> send_msi, bool emulate_data_bps) {
  vcpu_ = &vcpu;
  send_msi_ = std::move(send_msi);
  emulate_data_bps_ = emulate_data_bps;
  data_access_hook_ = false;
  SetEngineReportsDataBreakpoints(false);
  prev_.reset();
  store_translations_.Clear();
  guest_bp_.reset();
  if (emulate_data_bps_) ReadGuestBreakpoints();  // they moved with the vCPU
  kernel_debugctl_.reset();
}

bool Tracer::WantsEveryInstruction() const {
  return observe_always_ || pmu_.NeedsObservation() || sink_active_ || pmi_due_ || pmi_in_flight_.has_value() || guest_tf_ ||
         db_in_flight_ || (guest_bp_ && guest_bp_->AnyData());
}

void Tracer::ReadGuestBreakpoints() {
  absl::StatusOr<kvm_debugregs> d = vcpu_->GetDebugRegs();
  GuestBreakpoints g;
  if (d.ok()) {
    for (int i = 0; i < 4; i++) g.dr[i] = d->db[i];
    g.dr7 = d->dr7;
  }
  guest_bp_ = g;
}

void Tracer::Warn(std::string w) {
  if (warned_.size() >= kMaxWarnings || !warned_.insert(w).second) return;
  warnings_.push_back(std::move(w));
}

std::vector<std::string> Tracer::TakeWarnings() {
  std::vector<std::string> w = pmu_.TakeWarnings();
  for (std::string& s : warnings_) w.push_back(std::move(s));
  warnings_.clear();
  return w;
}

Tracer::Boundary Tracer::Capture(const CpuState& st) {
  Boundary b;
  Light(st, b);
  if (pmu_.WantsRegsBefore()) {
    b.has_regs = true;
    b.regs_rflags = st.rflags;
    std::memcpy(b.regs_gpr, st.gpr, sizeof b.regs_gpr);
  }
  absl::StatusOr<DecodedInsn> insn = DecodeCurrent(st, mem_);
  if (!insn.ok()) return b;  // the fetch faults: the next stop is the #PF/#GP handler
  b.decoded = true;
  b.insn = *insn;
  if (emulate_data_bps_ && !engine_data_bps_) {
    if (!guest_bp_) ReadGuestBreakpoints();
    if (guest_bp_->AnyData()) b.accesses = DataAccessesOf(b.insn, st);
  }
  if (pmu_.WantsDataAccesses() && !data_access_hook_) {
    // LLC events count data accesses (VirtualPmu::ObserveDataAccess); the
    // TCG engine reports them itself (ObserveDataAccess).
    if (b.accesses.empty()) b.accesses = DataAccessesOf(b.insn, st);
    b.paging = st.paging_regs();
    b.count_accesses = true;
  }
  if (pmu_.CountsMemoryInstructions()) {
    // The retired-load and -store events (docs/pmu-model.md, "Retired loads
    // and stores"): the instruction's memory operands as decoded.
    if (b.accesses.empty()) b.accesses = DataAccessesOf(b.insn, st);
    for (const DataAccess& a : b.accesses) {
      if (a.read && !(b.mem & 1)) {
        b.mem |= 1;
        b.load_la = a.linear;
      }
      if (a.write && !(b.mem & 2)) {
        b.mem |= 2;
        b.store_la = a.linear;
      }
    }
    if (b.mem && Untaggable(b.insn)) b.mem |= pmu::kMemUntaggable;
  }
  const uint64_t mask = IpMask(b.mode, b.insn.operand_size);
  b.fallthrough = FallthroughOf(b.mode, st.rip, b.insn);
  using pmu::BranchKind;
  if (b.insn.has_rel) {
    b.predicted_target = (b.fallthrough + static_cast<uint64_t>(b.insn.rel)) & mask;
  } else if (b.insn.target_reg >= 0 && b.insn.target_reg < 16 &&
             (b.insn.branch == BranchKind::kIndJmp || b.insn.branch == BranchKind::kIndCall)) {
    b.predicted_target = st.gpr[b.insn.target_reg] & mask;
  }
  if (b.insn.zydis_mnemonic != 0 && (b.insn.mnemonic == "popf" || b.insn.mnemonic == "popfd" ||
                                     b.insn.mnemonic == "popfq")) {
    const uint64_t sp = b.mode == pmu::ExecMode::kLong64 ? st.gpr[kRsp]
                        : st.ss.db                      ? (st.gpr[kRsp] & 0xFFFFFFFFull)
                                                        : (st.gpr[kRsp] & 0xFFFF);
    absl::StatusOr<std::optional<uint64_t>> v = ReadStack(st, mem_, st.ss.base + sp, 2);
    if (v.ok() && *v) b.tf_after = (**v & kRflagsTf) != 0;
  } else if (b.insn.branch == BranchKind::kIret) {
    const int w = b.insn.operand_size / 8;
    const uint64_t sp = b.mode == pmu::ExecMode::kLong64 ? st.gpr[kRsp]
                        : st.ss.db                      ? (st.gpr[kRsp] & 0xFFFFFFFFull)
                                                        : (st.gpr[kRsp] & 0xFFFF);
    absl::StatusOr<std::optional<uint64_t>> v = ReadStack(st, mem_, st.ss.base + sp + 2 * w, 2);
    if (v.ok() && *v) b.tf_after = (**v & kRflagsTf) != 0;
  }
  if (b.insn.branch == BranchKind::kRet) {
    const int width = b.insn.operand_size / 8;
    const uint64_t sp = b.insn.stack_width == 64 ? st.gpr[kRsp]
                        : b.insn.stack_width == 32 ? (st.gpr[kRsp] & 0xFFFFFFFFull)
                                                   : (st.gpr[kRsp] & 0xFFFF);
    absl::StatusOr<std::optional<uint64_t>> v = ReadStack(st, mem_, st.ss.base + sp, width);
    if (v.ok() && *v) b.predicted_target = **v & mask;
  }
  return b;
}

absl::Status Tracer::Emit(const pmu::Branch& b, const CpuState& paging_of, std::optional<bool> tf_after,
                          const Boundary* of) {
  if (sink_active_) sink_active_ = sink_(b);
  const bool event = pmu::IsEventDelivery(b.kind);
  if (event) stats_.events++; else stats_.instructions++;
  // The guest's TF as the instruction started (SDM 17.3.1.4: the trap follows
  // an instruction that began with TF=1; one that sets TF is not trapped).
  const bool tf_before = guest_tf_;
  pmu::LinearMemory lin(mem_, paging_of.paging_regs(), &store_translations_);
  // (A member, not a local std::optional: GCC zeroes the optional's 400
  // bytes on every call, 7 % of an LBR-only run.)
  const pmu::GuestRegs* after = nullptr;
  if (!event && pmu_.WantsRegs()) {
    // A PEBS record will hold the registers the instruction left.
    pmu::GuestRegs* regs = &pebs_regs_;
    *regs = pmu::GuestRegs{};
    regs->rflags = paging_of.rflags;
    for (int i = 0; i < 16; i++) regs->gpr[i] = paging_of.gpr[i];
    // Adaptive PEBS's basic group holds the TSC: the guest's IA32_TSC at this
    // stop (KVM), or the host's TSC, which is the TCG engine's guest TSC
    // (docs/tcg-engine.md); docs/pmu-model.md.
    absl::StatusOr<uint64_t> tsc = vcpu_->GetMsr(0x10);
    regs->tsc = tsc.ok() ? *tsc : __rdtsc();
    if (pmu_.WantsXmm()) {
      VBTS_ASSIGN_OR_RETURN(FpuState f, vcpu_->GetFpu());
      std::memcpy(regs->xmm, f.xmm, sizeof regs->xmm);
    }
    after = regs;
  }
  const pmu::GuestRegs* before = nullptr;
  if (!event && pmu_.WantsRegsBefore()) {
    // A NetBurst PEBS record holds the registers the instruction began with.
    if (!of && prev_ && prev_->lin == b.from) of = &*prev_;
    if (of && of->has_regs) {
      pebs_before_.rflags = of->regs_rflags;
      std::memcpy(pebs_before_.gpr, of->regs_gpr, sizeof pebs_before_.gpr);
      before = &pebs_before_;
    }
  }
  VBTS_ASSIGN_OR_RETURN(pmu::PmuEffects fx, pmu_.Observe(b, lin, event ? false : tf_before, after, before));
  if (fx.pmi) pmi_due_ = true;
  if (pmu_.lbr_in_kernel()) VBTS_RETURN_IF_ERROR(SyncKernelDebugCtl());
  if (event || b.kind == pmu::BranchKind::kSoftInt) {
    // A #DB delivered here (an exception, or ICEBP's) takes the
    // data-breakpoint hits a MOV SS shadow held (DebugTrapsAtBoundary); any
    // other delivery ends the shadow: the held #DB follows at the handler's
    // first instruction.
    const bool icebp = b.kind == pmu::BranchKind::kSoftInt && prev_ && prev_->decoded && prev_->lin == b.from &&
                       prev_->insn.opcode == 0xF1;
    db_delivered_ = (b.kind == pmu::BranchKind::kException && b.vector == 1) || icebp;
    ss_shadow_ = false;
    // The engine's hits of an instruction that faulted (it did not retire),
    // or of INT n (its frame is the delivery's): none.
    engine_hits_ = 0;
  }
  if (event || b.kind == pmu::BranchKind::kSoftInt) {
    // Delivery through a gate clears TF (SDM 6.12.1); no trap follows it.
    guest_tf_ = false;
    step_trap_due_ = false;
  } else {
    if (tf_after) guest_tf_ = *tf_after;
    if (fx.single_step_trap) step_trap_due_ = true;
  }
  return absl::OkStatus();
}

absl::Status Tracer::SyncKernelDebugCtl() {
  if (!pmu_.lbr_in_kernel()) return absl::OkStatus();
  const uint64_t v = pmu_.KernelDebugCtl();
  if (kernel_debugctl_ == v) return absl::OkStatus();
  constexpr uint32_t kMsrDebugCtl = 0x1D9;
  const MsrValue m{kMsrDebugCtl, v};
  VBTS_RETURN_IF_ERROR(vcpu_->SetMsrs(absl::MakeConstSpan(&m, 1)));
  kernel_debugctl_ = v;
  return absl::OkStatus();
}

absl::Status Tracer::ReadKernelDebugCtl() {
  if (!pmu_.lbr_in_kernel()) return absl::OkStatus();
  VBTS_ASSIGN_OR_RETURN(uint64_t v, vcpu_->GetMsr(0x1D9));
  pmu_.NoteKernelDebugCtl(v);
  kernel_debugctl_ = v;
  return SyncKernelDebugCtl();
}

absl::Status Tracer::PatchFrameTf(const CpuState& st, uint64_t eflags_la, bool tf) {
  pmu::LinearMemory lin(mem_, st.paging_regs());
  pmu::Access acc;
  acc.implicit = true;
  uint8_t b[2];
  VBTS_ASSIGN_OR_RETURN(pmu::AccessFault f, lin.Read(Gva(eflags_la), absl::MakeSpan(b), acc));
  if (!f.ok()) return absl::OkStatus();
  const uint8_t old = b[1];
  b[1] = tf ? (b[1] | (kRflagsTf >> 8)) : (b[1] & ~(kRflagsTf >> 8));
  if (b[1] == old) return absl::OkStatus();
  VBTS_ASSIGN_OR_RETURN(f, lin.Write(Gva(eflags_la), absl::MakeConstSpan(b), acc));
  return absl::OkStatus();
}

void Tracer::NoteRetired(const Boundary& p) {
  ss_shadow_ = p.decoded && p.insn.loads_ss;
  if (p.count_accesses && pmu_.WantsDataAccesses()) {
    for (const DataAccess& a : p.accesses) {
      absl::StatusOr<pmu::Translation> t =
          pmu::Translate(p.paging, mem_, Gva(a.linear), pmu::Access{}, /*set_accessed_dirty=*/false);
      if (!t.ok() || !t->fault.ok()) continue;  // the instruction faulted there; it did not retire
      if (t->gpa.value >= mem_.size()) continue;  // MMIO is not cached
      // A read-modify-write operand is a load, then a store (as QEMU's TCG
      // reports it).
      if (a.read) ObserveDataAccess(t->gpa.value, a.size, p.cpl, /*write=*/false);
      if (a.write) ObserveDataAccess(t->gpa.value, a.size, p.cpl, /*write=*/true);
    }
  }
  if (!emulate_data_bps_) return;
  if (engine_data_bps_) data_hits_ |= std::exchange(engine_hits_, 0);
  else if (guest_bp_ && !p.accesses.empty()) data_hits_ |= DataBreakpointHits(*guest_bp_, p.accesses);
  if (p.decoded && p.insn.writes_dr) guest_bp_.reset();  // read again at the next boundary
}

absl::Status Tracer::DebugTrapsAtBoundary(const CpuState& st) {
  // Data-breakpoint hits of the instruction before a #DB delivery that the
  // MOV SS shadow held (below) join that #DB: one delivery reports both in
  // DR6 (SDM vol. 3A 6.8.3; kvm-unit-tests debug.flat "MOV SS + watchpoint
  // + ICEBP" asserts a single handler invocation).
  if (data_hits_ && db_delivered_) {
    VBTS_ASSIGN_OR_RETURN(kvm_debugregs d, vcpu_->GetDebugRegs());
    d.dr6 |= data_hits_;
    stats_.data_breakpoints++;
    data_hits_ = 0;
    VBTS_RETURN_IF_ERROR(vcpu_->SetDebugRegs(d));
  }
  db_delivered_ = false;
  // A data breakpoint hit by MOV SS or POP SS is held until the instruction
  // in its shadow has run (SDM vol. 3A 6.8.3: debug exceptions are inhibited
  // across the instruction boundary after the SS load).  Before INT n, INT3
  // or INTO it is raised at once instead (docs/tracing.md): hardware
  // delivers it at the handler's first instruction, after the software
  // interrupt; both handlers run either way.
  // A single-step trap after MOV SS or POP SS is held the same way: the
  // instruction in the shadow runs, and one #DB (DR6.BS) follows it (SDM
  // vol. 3A 6.8.3; kvm-unit-tests debug.flat "Single-step #DB w/ MOVSS
  // blocking": the first #DB comes two instructions after TF is set). If
  // that instruction delivers an event instead, the held trap is dropped
  // with its TF (Emit).
  if (step_trap_due_ && ss_shadow_) return absl::OkStatus();
  if (data_hits_ && ss_shadow_) {
    absl::StatusOr<DecodedInsn> next = DecodeCurrent(st, mem_);
    const bool soft_int = next.ok() && next->branch == pmu::BranchKind::kSoftInt && next->opcode != 0xF1;
    if (!soft_int) return absl::OkStatus();
  }
  if (step_trap_due_ || data_hits_) VBTS_RETURN_IF_ERROR(RaiseDebugTrap());
  return absl::OkStatus();
}

absl::Status Tracer::RaiseDebugTrap() {
  // DR6.BS reports a single-step trap, DR6.B0-B3 the data breakpoints that
  // matched (SDM 17.2.3); one #DB reports both. The guest clears them.
  VBTS_ASSIGN_OR_RETURN(kvm_debugregs d, vcpu_->GetDebugRegs());
  if (step_trap_due_) d.dr6 |= 1u << 14;
  d.dr6 |= data_hits_;
  if (step_trap_due_) stats_.single_steps++;
  if (data_hits_) stats_.data_breakpoints++;
  step_trap_due_ = false;
  data_hits_ = 0;
  VBTS_RETURN_IF_ERROR(vcpu_->SetDebugRegs(d));
  VBTS_RETURN_IF_ERROR(vcpu_->InjectException(1, std::nullopt));
  db_in_flight_ = true;
  return absl::OkStatus();
}

absl::Status Tracer::RaisePmi() {
  pmi_due_ = false;
  VBTS_ASSIGN_OR_RETURN(kvm_lapic_state lapic, vcpu_->GetLapic());
  uint32_t lvt;
  std::memcpy(&lvt, lapic.regs + kLvtPcOffset, 4);
  if (lvt & kLvtMask) {
    stats_.pmis_masked++;
    return absl::OkStatus();
  }
  const uint32_t mode = (lvt >> 8) & 7;
  const uint8_t vector = lvt & 0xFF;
  if (mode != kDeliveryFixed && mode != kDeliveryNmi) {
    Warn(absl::StrFormat("LVT performance-counter entry 0x%08x uses delivery mode %u; vbts delivers only fixed and "
                         "NMI PMIs, this one is dropped",
                         lvt, mode));
    return absl::OkStatus();
  }
  // Intel processors set the LVTPC mask when they deliver a PMI (SDM 10.5.1
  // note on LVT performance counter); the guest's handler unmasks it.  The
  // LAPIC state must be written before the interrupt is sent
  // (kvm-host-facts.md (b)).
  lvt |= kLvtMask;
  std::memcpy(lapic.regs + kLvtPcOffset, &lvt, 4);
  VBTS_RETURN_IF_ERROR(vcpu_->SetLapic(lapic));
  if (mode == kDeliveryNmi) {
    VBTS_RETURN_IF_ERROR(vcpu_->Nmi());
    pmi_in_flight_ = 2;
  } else {
    VBTS_RETURN_IF_ERROR(send_msi_(vector));
    pmi_in_flight_ = vector;
  }
  stats_.pmis_sent++;
  return absl::OkStatus();
}

absl::StatusOr<bool> Tracer::ResolveEvent(const Boundary& p, const CpuState& st, bool after_retire) {
  // Candidate vectors: the PMI vbts raised first, then every gate.
  std::vector<int> order;
  if (db_in_flight_) order.push_back(1);
  if (pmi_in_flight_) order.push_back(*pmi_in_flight_);
  const int count = st.long_mode_active() ? (st.idtr.limit + 1) / 16 : (st.idtr.limit + 1) / 8;
  for (int v = 0; v < count && v < 256; v++)
    if ((!pmi_in_flight_ || v != *pmi_in_flight_) && (!db_in_flight_ || v != 1)) order.push_back(v);
  const uint64_t st_rip = st.rip;
  for (int v : order) {
    absl::StatusOr<GateTarget> e = FindGateTarget(st, mem_, static_cast<uint8_t>(v));
    if (!e.ok()) continue;
    if (e->cs.selector != st.cs.selector) continue;  // the handler's first instruction did not change CS
    absl::StatusOr<DecodedInsn> h1 = DecodeAt(st, mem_, Gva(e->linear));
    if (!h1.ok()) continue;
    const pmu::ExecMode hmode = ExecModeOf(st);
    const uint64_t mask = IpMask(hmode, h1->operand_size);
    const uint64_t h1_next = (e->offset + h1->length) & mask;
    uint64_t h1_to = 0;
    int h1_push = 0;  // bytes the first instruction pushed
    // VT-x/SVM stop at the handler's entry; this host only after its first
    // instruction (kvm-host-facts.md). Both are recognised.
    const bool at_entry = st_rip == e->offset;
    if (!at_entry) {
      const int w = hmode == pmu::ExecMode::kLong64 ? 8 : h1->operand_size / 8;
      if (h1->branch == pmu::BranchKind::kNone) {
        h1_to = h1_next;
        if (h1->zydis_mnemonic != 0 && h1->mnemonic == "push") h1_push = w;
      } else if (h1->has_rel && (h1->branch == pmu::BranchKind::kJmp || h1->branch == pmu::BranchKind::kCall ||
                                 h1->branch == pmu::BranchKind::kJcc)) {
        h1_to = (h1_next + static_cast<uint64_t>(h1->rel)) & mask;
        if (h1->branch == pmu::BranchKind::kCall) h1_push = w;
        if (h1->branch == pmu::BranchKind::kJcc && st_rip == h1_next) h1_to = h1_next;
      } else {
        continue;
      }
      if (h1_to != st_rip) continue;
    }
    // The frame: [error code,] RIP, CS, RFLAGS[, RSP, SS] (SDM 6.12.1, 6.14.2).
    const int fw = e->ia32e ? 8 : 4;
    const uint64_t frame = st.ss.base + ((st.gpr[kRsp] + h1_push) & (st.ss.db || e->ia32e ? ~0ull : 0xFFFF)) +
                           (v < 32 && VectorHasErrorCode(static_cast<uint8_t>(v)) ? fw : 0);
    absl::StatusOr<std::optional<uint64_t>> saved_rip = ReadStack(st, mem_, frame, fw);
    absl::StatusOr<std::optional<uint64_t>> saved_cs = ReadStack(st, mem_, frame + fw, 2);
    if (!saved_rip.ok() || !*saved_rip || !saved_cs.ok() || !*saved_cs) continue;
    if ((**saved_cs & 0xFFFF) != p.cs && !(p.decoded && p.insn.branch != pmu::BranchKind::kNone)) continue;
    const uint64_t ret = **saved_rip;
    pmu::BranchKind ev = v == 2 ? pmu::BranchKind::kNmi
                         : v < 32 ? pmu::BranchKind::kException
                                  : pmu::BranchKind::kInterrupt;
    if (pmi_in_flight_ && v == *pmi_in_flight_) ev = v == 2 ? pmu::BranchKind::kNmi : pmu::BranchKind::kInterrupt;
    uint64_t from_lin;
    uint8_t from_cpl = p.cpl;
    pmu::ExecMode from_mode = p.mode;
    const uint16_t saved_sel = static_cast<uint16_t>(**saved_cs & 0xFFFF);
    if (p.decoded && p.insn.branch == pmu::BranchKind::kSoftInt && ret == p.fallthrough && saved_sel == p.cs &&
        v == SoftIntVector(p.insn)) {
      // The host ran INT n/INT3/INTO/INT1 itself: one transfer to the handler
      // (VT-x/SVM; on this host vbts performs them and reports them through
      // Retired()).
      ev = pmu::BranchKind::kSoftInt;
      from_lin = p.lin;
    } else if (ret == p.rip && saved_sel == p.cs) {
      // Delivered before the instruction at p retired (a fault, or an
      // interrupt taken at that boundary).
      from_lin = p.lin;
    } else if (after_retire && p.decoded &&
               (ret == p.fallthrough || (p.predicted_target && ret == *p.predicted_target) ||
                (p.insn.branch != pmu::BranchKind::kNone && !p.predicted_target))) {
      // p retired (to `ret`), then the event was taken before the next one.
      pmu::Branch b;
      if (p.predicted_target && ret == *p.predicted_target && p.insn.branch != pmu::BranchKind::kNone)
        b.kind = p.insn.branch;
      else if (ret == p.fallthrough)
        b.kind = pmu::BranchKind::kNone;
      else
        b.kind = p.insn.branch;
      b.from = p.lin;
      b.to = p.lin - p.rip + ret;
      b.cpl_from = b.cpl_to = p.cpl;
      b.mode_from = b.mode_to = p.mode;
      b.ia32e = p.ia32e;
      b.branch_insn = p.insn.branch != pmu::BranchKind::kNone;
      CopyMemory(p, b);
      NoteRetired(p);
      VBTS_RETURN_IF_ERROR(Emit(b, st, p.tf_after));
      from_lin = b.to;
    } else {
      continue;
    }
    pmu::Branch evb;
    evb.kind = ev;
    evb.from = from_lin;
    evb.to = e->linear;
    evb.cpl_from = from_cpl;
    evb.cpl_to = static_cast<uint8_t>(st.cpl());
    evb.mode_from = from_mode;
    evb.mode_to = hmode;
    evb.vector = static_cast<uint8_t>(v);
    evb.ia32e = st.long_mode_active();
    if (pmi_in_flight_ && v == *pmi_in_flight_) pmi_in_flight_.reset();
    if (v == 1) db_in_flight_ = false;
    // The host pushed EFLAGS with its own view of TF (vbts's single-step
    // flag may leak into it, the guest's own TF may be missing): the frame
    // gets the guest's TF.
    VBTS_RETURN_IF_ERROR(PatchFrameTf(st, frame + 2 * fw, guest_tf_));
    VBTS_RETURN_IF_ERROR(Emit(evb, st, std::nullopt));
    if (!at_entry) {
      // The handler's first instruction, which the host already ran.
      pmu::Branch hb;
      hb.kind = h1_to == h1_next ? pmu::BranchKind::kNone : h1->branch;
      hb.from = e->linear;
      hb.to = st.pc_linear();
      hb.cpl_from = hb.cpl_to = static_cast<uint8_t>(st.cpl());
      hb.mode_from = hb.mode_to = hmode;
      hb.ia32e = st.long_mode_active();
      hb.branch_insn = h1->branch != pmu::BranchKind::kNone;
      VBTS_RETURN_IF_ERROR(Emit(hb, st, std::nullopt));
    }
    return true;
  }
  return false;
}

absl::Status Tracer::AfterMsrWrite() {
  // KVM advances RIP past the WRMSR only when vbts re-enters the guest: the
  // guest is still at it.
  VBTS_ASSIGN_OR_RETURN(CpuState st, vcpu_->GetState());
  const bool stepped_here =
      prev_ && prev_->decoded && prev_->lin == st.pc_linear() && prev_->cs == st.cs.selector;
  if (stepped_here && prev_->emitted) return absl::OkStatus();
  // Not stepped up to here (a free run): the WRMSR matters only if what it
  // enabled observes instructions (a counter it enabled counts it).
  if (!stepped_here && !WantsEveryInstruction()) return absl::OkStatus();
  Boundary p = stepped_here ? *prev_ : Capture(st);
  if (!p.decoded || p.insn.mnemonic != "wrmsr") return absl::OkStatus();
  pmu::Branch b;
  b.kind = pmu::BranchKind::kNone;  // not a branch: BTS and LBRs are untouched
  b.from = p.lin;
  b.to = p.lin - p.rip + p.fallthrough;
  b.cpl_from = b.cpl_to = p.cpl;
  b.mode_from = b.mode_to = p.mode;
  b.ia32e = p.ia32e;
  // The registers are those after the WRMSR (it changes none but RIP), for
  // a PEBS record whose event it is.
  VBTS_RETURN_IF_ERROR(Emit(b, st, p.tf_after, &p));
  p.emitted = true;
  prev_ = std::move(p);  // the next boundary finds it retired to its fall-through
  return absl::OkStatus();
}

absl::Status Tracer::Resolve(const Boundary& p, const CpuState& st) {
  using pmu::BranchKind;
  const bool same_cs = st.cs.selector == p.cs && st.cpl() == p.cpl;
  const uint64_t rip = st.rip;
  if (p.emitted && same_cs && rip == p.fallthrough) return absl::OkStatus();
  if (!p.decoded) {
    // The fetch at p faulted: the only way on is an exception delivery.
    VBTS_ASSIGN_OR_RETURN(bool ev, ResolveEvent(p, st, /*after_retire=*/false));
    if (!ev) {
      stats_.lost++;
      Warn(absl::StrFormat("tracer: cannot explain how the guest got from 0x%x to %s", p.lin, st.Describe()));
    }
    return absl::OkStatus();
  }
  const BranchKind k = p.insn.branch;
  std::optional<BranchKind> retired;  // kind of the transfer if explained without an event
  switch (k) {
    case BranchKind::kNone:
      if (same_cs && rip == p.fallthrough) retired = BranchKind::kNone;
      break;
    case BranchKind::kJcc:
      if (same_cs && p.predicted_target && rip == *p.predicted_target) retired = BranchKind::kJcc;
      else if (same_cs && rip == p.fallthrough) retired = BranchKind::kNone;
      break;
    case BranchKind::kJmp:
    case BranchKind::kCall:
    case BranchKind::kRet:
      if (same_cs && p.predicted_target && rip == *p.predicted_target) retired = k;
      break;
    case BranchKind::kIndJmp:
    case BranchKind::kIndCall:
      if (same_cs && p.predicted_target) {
        if (rip == *p.predicted_target) retired = k;
      } else if (same_cs) {
        // Memory operand: the stack pointer tells a plain JMP/CALL from an
        // event delivery (which pushes at least three slots).
        const uint64_t w = p.insn.operand_size / 8;
        const uint64_t expect = k == BranchKind::kIndCall ? p.rsp - w : p.rsp;
        if (st.gpr[kRsp] == expect) retired = k;
      }
      break;
    default: {
      // Far transfers, IRET, INT n, SYSCALL/SYSENTER/...: run by the host
      // (the supervisor reports those it performs itself through Retired).
      // They may fault, and a host-run INT n lands after its handler's first
      // instruction: both are recognised like events.
      VBTS_ASSIGN_OR_RETURN(bool ev, ResolveEvent(p, st, /*after_retire=*/false));
      if (ev) return absl::OkStatus();
      if (k != BranchKind::kSoftInt) retired = k;
      break;
    }
  }
  if (retired) {
    NoteRetired(p);
    pmu::Branch b;
    b.kind = *retired;
    b.from = p.lin;
    b.to = st.pc_linear();
    b.cpl_from = p.cpl;
    b.cpl_to = static_cast<uint8_t>(st.cpl());
    b.mode_from = p.mode;
    b.mode_to = ExecModeOf(st);
    b.ia32e = st.long_mode_active();
    b.branch_insn = k != BranchKind::kNone;
    CopyMemory(p, b);
    if (*retired == BranchKind::kSoftInt) b.vector = static_cast<uint8_t>(p.insn.imm);
    return Emit(b, st, p.tf_after);
  }
  VBTS_ASSIGN_OR_RETURN(bool ev, ResolveEvent(p, st, /*after_retire=*/true));
  if (!ev) {
    stats_.lost++;
    Warn(absl::StrFormat("tracer: cannot explain how `%s` at 0x%x led to %s; records may be missing there",
                         p.insn.mnemonic, p.lin, st.Describe()));
  }
  return absl::OkStatus();
}

absl::Status Tracer::AtBoundary(CpuState& st, bool& /*dirty*/) {
  const bool fresh = fresh_;
  fresh_ = false;
  if (fresh && prev_ && st.pc_linear() == prev_->lin && st.cs.selector == prev_->cs) {
    // The boundary Retired() just reported (the supervisor performed the
    // instruction before it and looks at the new one): nothing ran since.
  } else {
    if (!consecutive_) {
      prev_.reset();  // after a free run: nothing to explain
      engine_hits_ = 0;  // (none can come from an unobserved instruction)
      // The guest may have changed its debug registers meanwhile (at a
      // guarded MOV to DR7, say): a data breakpoint makes the tracer step it.
      guest_bp_.reset();
      if (emulate_data_bps_) ReadGuestBreakpoints();
    }
    if (!WantsEveryInstruction() && !consecutive_) {
      pmi_deliverable_ = false;
      return absl::OkStatus();
    }
    stats_.boundaries++;
    if (prev_) {
      const Boundary& p = *prev_;
      // A REP string instruction stops at its own RIP until it retires; and
      // a stop where nothing moved (same CS:RIP and RSP, and the instruction
      // is not a branch to itself) retired nothing: the host stopped twice.
      // (A PMI raised and not yet taken, say while IF=0 or in an NMI
      // handler, does not stop a REP string instruction's iterations.)
      if (st.rip == p.rip && st.cs.selector == p.cs && p.decoded && !db_in_flight_ &&
          (p.insn.rep_string || !pmi_in_flight_)) {
        const bool self_loop = p.predicted_target && *p.predicted_target == p.rip;
        if (p.insn.rep_string || (!self_loop && st.gpr[kRsp] == p.rsp)) {
          stats_.boundaries--;
          if (p.insn.rep_string && (!p.accesses.empty() || engine_hits_)) {
            // One iteration ran: a data breakpoint traps after the
            // iteration that hit it (SDM 17.3.1.2); the next iteration's
            // elements follow from the registers now.
            NoteRetired(p);
            if (!prev_->accesses.empty()) prev_->accesses = DataAccessesOf(p.insn, st);
            if (data_hits_) VBTS_RETURN_IF_ERROR(RaiseDebugTrap());
          }
          return absl::OkStatus();
        }
      }
      VBTS_RETURN_IF_ERROR(Resolve(p, st));
    }
  }
  VBTS_RETURN_IF_ERROR(BoundaryEvents(st));
  prev_ = Capture(st);
  return absl::OkStatus();
}

absl::Status Tracer::BoundaryEvents(const CpuState& st) {
  VBTS_RETURN_IF_ERROR(DebugTrapsAtBoundary(st));
  if (pmi_due_) VBTS_RETURN_IF_ERROR(RaisePmi());
  pmi_deliverable_ = pmi_in_flight_.has_value() && (st.rflags & kRflagsIf) && !st.interrupt_shadow;
  return absl::OkStatus();
}

// --- Block-level observation (docs/tracing.md "Block-level observation").

bool Tracer::BulkAllowed() const {
  return !sink_every_insn_ && !guest_tf_ && !step_trap_due_ && !data_hits_ && !db_in_flight_ && !pmi_due_ &&
         !(emulate_data_bps_ && !engine_data_bps_ && (!guest_bp_ || guest_bp_->AnyData())) &&
         (!pmu_.WantsRegs() || (data_access_hook_ && pmu_.ArmedOnlyForLoadLatency())) && !pmu_.NeedsEachInstruction() &&
         !pmu_.lbr_in_kernel() && (data_access_hook_ || !pmu_.CountsLoadLatency());
}

bool Tracer::BulkCountsAcrossBlocks() const { return !sink_active_ && pmu_.BranchAgnostic(); }
// A sink (`vbts record`, --branches, GDB's branch trace) sees the kept ends
// in order too; it keeps no state of the guest's beyond each transfer.
bool Tracer::BulkBlockEnds() const {
  return !sink_every_insn_ && (pmu_.LbrOnly() || (sink_active_ && pmu_.BranchAgnostic()));
}

absl::Status Tracer::ReportBlockEnds(const BlockEnds& ends, const CpuState& st, uint64_t& skipped) {
  if (ends.size == 0 || !prev_) return absl::OkStatus();
  // At each end the guest ran at the CPL, mode, CS and TF of when the ends
  // began to be kept, fetching through the paging of then (BlockEnds); `st`
  // may be past a change of them (an IRET to ring 3 ended the run).
  CpuState at = st;
  at.cr0 = ends.cr0;
  at.cr3 = ends.cr3;
  at.cr4 = ends.cr4;
  at.efer = ends.efer;
  at.cs = ends.cs;
  at.rflags = ends.rflags;
  const bool long64 = at.mode() == CpuMode::kLong64;
  // Nothing is due at these boundaries: no PMI (no counter overflows within
  // the engine's limit), no single-step trap (TF is clear), no data
  // breakpoint (none while skipping).  A PMI a data access raised while
  // skipping belongs to the boundary after that access, after every end
  // (the engine stops skipping at the next instruction): BulkBoundary takes
  // it.  The instructions in between are counted at once: the counters
  // count branches as other instructions and none overflows within the
  // limit, so the sum is the same in any order (VirtualPmu::LbrOnly,
  // BranchAgnostic).
  const Boundary first = *prev_;
  // Ends kept for a sink alone (the counters count branches as any other
  // instruction): once the sink wants no more, the rest are counted only.
  const bool for_sink_alone = !pmu_.LbrOnly();
  // For the LBRs alone, each end goes to the LBR stack directly and is
  // counted with the instructions between them: Emit's other work (a sink,
  // PEBS registers, TF, a PMI) has nothing to do here (VirtualPmu::LbrOnly).
  // For a sink alone, likewise to the sink: the virtual PMU then only counts
  // (VirtualPmu::BranchAgnostic: no LBR, BTS or PEBS; counters that count a
  // branch as any instruction).
  const bool lbr_alone = !for_sink_alone && !sink_active_;
  uint64_t before = 0, sequential = 0;
  for (size_t i = 0; i < ends.size; i++) {
    const BlockEnd& e = ends.data[i];
    const uint64_t n = i == 0 ? e.skipped : e.skipped - before - 1;
    before = e.skipped;
    sequential += n;
    Boundary& p = *prev_;
    at.rip = long64 ? e.to : (e.to - at.cs.base) & 0xFFFFFFFFull;
    const bool reported = p.emitted && n == 0 && p.lin == e.from;  // (AfterMsrWrite reported it)
    if (for_sink_alone && !sink_active_) {
      if (!reported) sequential++;
    } else {
      stats_.boundaries++;
      if (reported) {
      } else if (lbr_alone || for_sink_alone) {
        bool rep_iteration = false;
        // (LbrOnly, BranchAgnostic: no memory events)
        if (std::optional<pmu::Branch> b =
                ClassifyBlockEnd(p, e.from, at, ends.generations, /*memory=*/false, rep_iteration)) {
          if (lbr_alone) pmu_.ObserveKeptBranch(*b);
          else sink_active_ = sink_(*b);
          sequential++;
        } else if (rep_iteration) {
          stats_.boundaries--;
        }
      } else {
        VBTS_RETURN_IF_ERROR(ResolveBlockEnd(p, e.from, at, ends.generations));
      }
    }
    if (i == 0) {
      Light(at, p);
    } else {
      // Light at the same CPL, mode, CS and TF: only where it is changes.
      p.decoded = p.emitted = false;
      p.rip = at.rip;
      p.lin = e.to;
    }
  }
  CountSkipped(sequential, first, at, ends.generations);
  skipped -= before + 1;
  return absl::OkStatus();
}

void Tracer::CountSkipped(uint64_t n, const Boundary& p, const CpuState& st, CodeGenerations code_generation) {
  uint64_t loads = 0, stores = 0;
  if (n != 0 && pmu_.CountsMemoryInstructions()) {
    // Bulk mode stays inside one block while these events count
    // (VirtualPmu::BranchAgnostic): the instructions lie one after another.
    constexpr size_t kRuns = 1024;
    if (run_cache_.empty()) run_cache_.resize(kRuns);
    CachedRun& c = run_cache_[(p.lin ^ (p.lin >> 10)) & (kRuns - 1)];
    const bool user = p.cpl == 3;
    const bool cached = c.lin == p.lin && c.n == n && c.user == user && c.dmode.mode == p.dmode.mode &&
                        c.dmode.stack_width == p.dmode.stack_width &&
                        c.generations.paging == code_generation.paging && c.generations.bytes == code_generation.bytes;
    if (cached) {
      loads = c.loads;
      stores = c.stores;
    } else {
      uint64_t at = p.lin;
      bool whole = true;
      for (uint64_t k = 0; k < n; k++) {
        absl::Status error;
        const DecodedInsn* insn = BlockEndInsn(p, at, st, code_generation, error);
        if (insn == nullptr) {
          stats_.lost++;
          Warn(absl::StrFormat("tracer: cannot decode the instruction at 0x%x counted in bulk: %s; its loads and "
                               "stores are not counted",
                               at, error.message()));
          whole = false;
          break;
        }
        const uint8_t m = MemKinds(*insn);
        loads += m & 1;
        stores += (m >> 1) & 1;
        at += insn->length;
      }
      if (whole)
        c = {p.lin, n, code_generation, p.dmode, user, static_cast<uint32_t>(loads), static_cast<uint32_t>(stores)};
    }
  }
  pmu_.CountSequential(n, p.cpl, loads, stores);
  stats_.instructions += n;
}

uint64_t Tracer::BulkLimit() const { return prev_ ? pmu_.SequentialLimit(prev_->cpl) : 0; }

void Tracer::Light(const CpuState& st, Boundary& b) const {
  b.decoded = b.emitted = b.has_regs = false;
  b.predicted_target.reset();
  b.tf_after.reset();
  b.accesses.clear();
  b.mem = 0;
  b.load_la = b.store_la = 0;
  b.rip = st.rip;
  b.lin = st.pc_linear();
  b.rsp = st.gpr[kRsp];
  b.cs = st.cs.selector;
  b.cpl = static_cast<uint8_t>(st.cpl());
  b.mode = ExecModeOf(st);
  b.ia32e = st.long_mode_active();
  b.tf = (st.rflags & kRflagsTf) != 0;
  b.dmode = DecodeModeOf(st);
}

const DecodedInsn* Tracer::BlockEndInsn(const Boundary& p, uint64_t last, const CpuState& st,
                                        CodeGenerations code_generation, absl::Status& error) {
  constexpr size_t kEntries = 4096;
  if (insn_cache_.empty()) insn_cache_.resize(kEntries);
  const bool user = p.cpl == 3;
  CachedInsn& e = insn_cache_[(last ^ (last >> 12)) & (kEntries - 1)];
  auto where = [&](uint64_t length) -> std::optional<uint64_t> {
    if ((last & 0xFFF) + length > 0x1000) return std::nullopt;  // on two pages: not cached
    absl::StatusOr<pmu::Translation> t = pmu::Translate(st.paging_regs(), mem_, Gva(last),
                                                        pmu::Access{.user = user, .fetch = true},
                                                        /*set_accessed_dirty=*/false);
    if (!t.ok() || !t->fault.ok()) return std::nullopt;
    return t->gpa.value;
  };
  if (e.lin == last && e.user == user && e.dmode.mode == p.dmode.mode && e.dmode.stack_width == p.dmode.stack_width) {
    if (e.generation != code_generation.paging) {
      std::optional<uint64_t> gpa = where(e.insn.length);
      e.generation = code_generation.paging;
      e.bytes_generation = ~code_generation.bytes;  // compare them below
      if (gpa) e.gpa = *gpa;
      else e.lin = ~0ull;
    }
    // Same mapping and no store to translated code since the bytes last
    // matched: they still do (TcgCpu::CodeBytesGeneration).
    if (e.lin == last && e.bytes_generation == code_generation.bytes) return &e.insn;
    uint8_t now[15];
    if (e.lin == last && mem_.Read(Gpa(e.gpa), absl::MakeSpan(now, e.insn.length)).ok() &&
        std::memcmp(now, e.insn.bytes, e.insn.length) == 0) {
      e.bytes_generation = code_generation.bytes;
      return &e.insn;
    }
  }
  // `last` ran in p's block: p's CPL and mode; decoded under the paging in
  // force now (QEMU fetched it through the same TLB unless a flush came
  // between, which only a MOV to CR3/CR0/CR4 or INVLPG ending the block does).
  absl::StatusOr<DecodedInsn> d = DecodeAt(st.paging_regs(), user, p.dmode, mem_, Gva(last));
  if (!d.ok()) {
    error = d.status();
    return nullptr;
  }
  if (std::optional<uint64_t> gpa = where(d->length)) {
    e.lin = last;
    e.generation = code_generation.paging;
    e.bytes_generation = code_generation.bytes;
    e.gpa = *gpa;
    e.dmode = p.dmode;
    e.user = user;
    e.insn = *std::move(d);
    return &e.insn;
  }
  uncached_insn_ = *std::move(d);
  return &uncached_insn_;
}

absl::Status Tracer::ResolveBlockEnd(const Boundary& p, uint64_t last, const CpuState& st, CodeGenerations code_generation) {
  bool rep_iteration = false;
  std::optional<pmu::Branch> b =
      ClassifyBlockEnd(p, last, st, code_generation, pmu_.CountsMemoryInstructions(), rep_iteration);
  if (rep_iteration) stats_.boundaries--;  // one iteration of a REP string: no boundary (as in AtBoundary)
  if (!b) return absl::OkStatus();
  // Captured whole (an armed assist, BulkBoundary): the operands' addresses.
  if (p.decoded && p.lin == last && b->mem) CopyMemory(p, *b);
  // An IRET, POPF or SYSRET may have loaded the guest's TF: the engine keeps
  // it in RFLAGS (vbts raises the traps).
  return Emit(*b, st, (st.rflags & kRflagsTf) != 0);
}

// (Inlined into its two callers: a call per block end was 2-3 % of a traced
// run of two-instruction blocks.)
[[gnu::always_inline]] inline std::optional<pmu::Branch> Tracer::ClassifyBlockEnd(const Boundary& p, uint64_t last, const CpuState& st,
                                                    CodeGenerations code_generation, bool memory,
                                                    bool& rep_iteration) {
  using pmu::BranchKind;
  absl::Status error;
  const DecodedInsn* found =
      p.decoded && p.lin == last ? &p.insn : BlockEndInsn(p, last, st, code_generation, error);
  if (found == nullptr) {
    stats_.lost++;
    Warn(absl::StrFormat("tracer: cannot decode the instruction at 0x%x that led to %s: %s", last, st.Describe(),
                         error.message()));
    return std::nullopt;
  }
  const DecodedInsn& insn = *found;
  const uint64_t rip = last - (p.lin - p.rip);
  const uint64_t fallthrough = FallthroughOf(p.mode, rip, insn);
  const bool same_cs = st.cs.selector == p.cs && st.cpl() == p.cpl;
  const BranchKind k = insn.branch;
  std::optional<BranchKind> retired;
  switch (k) {
    case BranchKind::kNone:
      if (same_cs && st.rip == rip && insn.rep_string) {
        rep_iteration = true;
        return std::nullopt;
      }
      if (same_cs && st.rip == fallthrough) retired = BranchKind::kNone;
      break;
    case BranchKind::kJcc:
    case BranchKind::kJmp:
    case BranchKind::kCall: {
      const uint64_t target = (fallthrough + static_cast<uint64_t>(insn.rel)) & IpMask(p.mode, insn.operand_size);
      // A Jcc whose target is its fall-through counts as taken, as in
      // Resolve (the prediction is checked first).
      if (same_cs && insn.has_rel && st.rip == target) retired = k;
      else if (same_cs && k == BranchKind::kJcc && st.rip == fallthrough) retired = BranchKind::kNone;
      break;
    }
    case BranchKind::kRet:
    case BranchKind::kIndJmp:
    case BranchKind::kIndCall:
      if (same_cs) retired = k;
      break;
    case BranchKind::kSoftInt:
      // INT n and INT3 always reach the event hook; INTO that did not trap
      // falls through.
      if (same_cs && st.rip == fallthrough) retired = BranchKind::kNone;
      break;
    default:  // far transfers, IRET, SYSCALL/SYSRET/SYSENTER/SYSEXIT
      retired = k;
      break;
  }
  if (!retired) {
    stats_.lost++;
    Warn(absl::StrFormat("tracer: cannot explain how `%s` at 0x%x led to %s; records may be missing there",
                         insn.mnemonic, last, st.Describe()));
    return std::nullopt;
  }
  pmu::Branch b;
  b.kind = *retired;
  b.from = last;
  b.to = st.pc_linear();
  b.cpl_from = p.cpl;
  b.cpl_to = static_cast<uint8_t>(st.cpl());
  b.mode_from = p.mode;
  b.mode_to = ExecModeOf(st);
  b.ia32e = st.long_mode_active();
  b.branch_insn = k != BranchKind::kNone && k != BranchKind::kSoftInt;
  if (memory) b.mem = MemKinds(insn);
  return b;
}

absl::Status Tracer::BulkBoundary(CpuState& code_state, uint64_t skipped, uint64_t last, bool block_start,
                                  CodeGenerations code_generation, const BlockEnds& ends) {
  VBTS_RETURN_IF_ERROR(ReportBlockEnds(ends, code_state, skipped));
  stats_.boundaries++;
  // A PEBS assist armed for the load-latency event alone (BulkAllowed): the
  // instruction before this boundary may make the record, which holds the
  // registers it left, and the boundary's instruction is captured whole
  // (its operands' addresses: the record's data address) in case it is the
  // one (run alone for its load, docs/tcg-engine.md).
  std::optional<CpuState> full;
  if (pmu_.WantsRegs() || pmu_.WantsRegsBefore()) {
    VBTS_ASSIGN_OR_RETURN(full, vcpu_->GetState());
  }
  CpuState& st = full ? *full : code_state;
  if (prev_) {
    const Boundary& p = *prev_;  // replaced only below
    // p and the skipped instructions before `last`: one after another.
    CountSkipped(skipped, p, st, code_generation);
    if (p.emitted && skipped == 0 && p.lin == last) {
      // AfterMsrWrite reported it.
    } else if (!block_start) {
      // In the middle of a block: `last` did not transfer control.
      pmu::Branch b;
      b.kind = pmu::BranchKind::kNone;
      b.from = last;
      b.to = st.pc_linear();
      b.cpl_from = b.cpl_to = p.cpl;
      b.mode_from = b.mode_to = p.mode;
      b.ia32e = p.ia32e;
      if (p.decoded && p.lin == last) {
        CopyMemory(p, b);
      } else if (pmu_.CountsMemoryInstructions()) {
        absl::Status error;
        if (const DecodedInsn* insn = BlockEndInsn(p, last, st, code_generation, error)) b.mem = MemKinds(*insn);
      }
      VBTS_RETURN_IF_ERROR(Emit(b, st, std::nullopt));
    } else {
      VBTS_RETURN_IF_ERROR(ResolveBlockEnd(p, last, st, code_generation));
    }
    if (engine_hits_) TakeEngineHits(*prev_, last, st, code_generation);
  }
  VBTS_RETURN_IF_ERROR(BoundaryEvents(st));
  if (emulate_data_bps_ && !guest_bp_) ReadGuestBreakpoints();
  bulk_after_boundary_ = BulkAllowed();
  if (bulk_after_boundary_ && !pmu_.WantsRegs() && !pmu_.WantsRegsBefore()) {
    if (!prev_) prev_ = Boundary{};
    Light(st, *prev_);
    return absl::OkStatus();
  }
  // Leaving bulk mode (the next boundary is resolved one instruction at a
  // time), or an assist armed as above: from the whole state.
  if (!full) {
    VBTS_ASSIGN_OR_RETURN(full, vcpu_->GetState());
  }
  prev_ = Capture(*full);
  return absl::OkStatus();
}

absl::Status Tracer::BulkEvent(const CpuState& st, uint64_t skipped, uint64_t last,
                               std::optional<uint64_t> soft_linear, CodeGenerations code_generation,
                               const BlockEnds& ends) {
  VBTS_RETURN_IF_ERROR(ReportBlockEnds(ends, st, skipped));
  if (prev_) {
    const Boundary& p = *prev_;  // replaced only below
    CountSkipped(skipped, p, st, code_generation);
    if (soft_linear) {
      // `last` is the INT n/INT3/INTO: resolved at the handler, as a
      // host-run INT n is (Resolve), from the state before it.
      CpuState before = st;
      before.rip = *soft_linear - (st.pc_linear() - st.rip);
      prev_ = Capture(before);
      return absl::OkStatus();
    }
    // A fault at `last`, or an interrupt taken before it, leaves the guest
    // there: it did not run.  Otherwise it ended its block (a fault at the
    // next block's first fetch).
    if (st.pc_linear() != last && !(p.emitted && skipped == 0 && p.lin == last))
      VBTS_RETURN_IF_ERROR(ResolveBlockEnd(p, last, st, code_generation));
    // The engine's hits: of `last` if it retired (the #DB follows at the
    // handler's first instruction), else of an instruction that faulted.
    if (engine_hits_ && st.pc_linear() != last) TakeEngineHits(*prev_, last, st, code_generation);
  }
  engine_hits_ = 0;
  prev_ = Capture(st);
  return absl::OkStatus();
}

void Tracer::TakeEngineHits(const Boundary& p, uint64_t last, const CpuState& st, CodeGenerations code_generation) {
  data_hits_ |= std::exchange(engine_hits_, 0);
  // A hit by MOV SS or POP SS waits for the instruction in its shadow
  // (DebugTrapsAtBoundary).
  absl::Status error;
  const DecodedInsn* insn = BlockEndInsn(p, last, st, code_generation, error);
  ss_shadow_ = insn != nullptr && insn->loads_ss;
}

absl::Status Tracer::BulkFlush(const CpuState& st, uint64_t skipped, uint64_t last, CodeGenerations code_generation,
                               const BlockEnds& ends) {
  VBTS_RETURN_IF_ERROR(ReportBlockEnds(ends, st, skipped));
  if (!prev_ || skipped == 0) return absl::OkStatus();
  Boundary& p = *prev_;
  CountSkipped(skipped, p, st, code_generation);
  // `last` is in p's block: it becomes the last reported boundary.
  p.rip = last - (p.lin - p.rip);
  p.lin = last;
  p.decoded = p.emitted = false;
  return absl::OkStatus();
}

absl::Status Tracer::Retired(const CpuState& before, const ControlTransfer& t, CpuState& after, bool& /*dirty*/) {
  if (!WantsEveryInstruction() && !consecutive_ && !prev_) return absl::OkStatus();
  pmu::Branch b;
  b.kind = KindOfCompleted(t.kind);
  b.from = before.pc_linear();
  b.to = after.pc_linear();
  b.cpl_from = static_cast<uint8_t>(before.cpl());
  b.cpl_to = static_cast<uint8_t>(after.cpl());
  b.mode_from = ExecModeOf(before);
  b.mode_to = ExecModeOf(after);
  b.ia32e = after.long_mode_active();
  b.vector = t.vector;
  b.branch_insn = b.kind != pmu::BranchKind::kNone;
  std::optional<bool> tf_after;
  if (t.kind == TransferKind::kIret) tf_after = (after.rflags & kRflagsTf) != 0;
  if (prev_ && prev_->lin == b.from) CopyMemory(*prev_, b);
  if (prev_ && prev_->lin == b.from && t.kind != TransferKind::kInt) NoteRetired(*prev_);
  if (t.kind == TransferKind::kInt) {
    // vbts pushed the frame from KVM's view of EFLAGS, which hides the
    // guest's TF while it is stepped: the frame gets the guest's TF.
    const int w = after.long_mode_active() ? 8 : (after.cs.db ? 4 : 2);
    VBTS_RETURN_IF_ERROR(PatchFrameTf(after, after.ss.base + after.gpr[kRsp] + 2 * w, guest_tf_));
  }
  VBTS_RETURN_IF_ERROR(Emit(b, after, tf_after));
  VBTS_RETURN_IF_ERROR(DebugTrapsAtBoundary(after));
  if (pmi_due_) VBTS_RETURN_IF_ERROR(RaisePmi());
  pmi_deliverable_ = pmi_in_flight_.has_value() && (after.rflags & kRflagsIf) && !after.interrupt_shadow;
  prev_ = Capture(after);
  fresh_ = true;
  return absl::OkStatus();
}

}  // namespace vbts::vcpu
