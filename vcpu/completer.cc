// completer.cc: the instruction-completion engine; each Do*() follows the
// "Operation" pseudo-code of its instruction in SDM vol. 2 and the
// protection rules of SDM vol. 3A ch. 5 (privilege), 6 (interrupts) and 7
// (TSS).
#include "vcpu/completer.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "pmu/paging.h"
#include "base/bits.h"
#include "base/status_macros.h"
#include "vcpu/descriptors.h"

namespace vbts::vcpu {

const char* TransferKindName(TransferKind k) {
  switch (k) {
    case TransferKind::kNone: return "none";
    case TransferKind::kInt: return "int";
    case TransferKind::kIret: return "iret";
    case TransferKind::kFarCall: return "far_call";
    case TransferKind::kFarJmp: return "far_jmp";
    case TransferKind::kFarRet: return "far_ret";
    case TransferKind::kSyscall: return "syscall";
    case TransferKind::kSysret: return "sysret";
    case TransferKind::kSysenter: return "sysenter";
    case TransferKind::kSysexit: return "sysexit";
    case TransferKind::kCpuid: return "cpuid";
  }
  return "?";
}

std::string Completion::ToString() const {
  switch (result) {
    case Result::kRetired:
      return absl::StrFormat("retired %s 0x%x -> 0x%x CPL%d->%d", TransferKindName(transfer.kind), transfer.from,
                             transfer.to, transfer.old_cpl, transfer.new_cpl);
    case Result::kFault:
      if (fault.error_code)
        return absl::StrFormat("fault vector %d error 0x%x cr2 0x%x", fault.vector, *fault.error_code, fault.cr2);
      return absl::StrFormat("fault vector %d", fault.vector);
    case Result::kNotMine:
      return "not mine";
  }
  return "?";
}

namespace {

// RFLAGS bits IRET may load (SDM vol. 2 IRET: "EFLAGS (CF, PF, AF, ZF, SF,
// TF, DF, OF, NT) ← tempEFLAGS").
constexpr uint64_t kIretBasicFlags = 0x1 | 0x4 | 0x10 | 0x40 | 0x80 | kRflagsTf | kRflagsDf | kRflagsOf | kRflagsNt;

bool IsDataOrNonConformingCode(const Segment& s) {
  return s.s && ((s.type & kTypeCode) == 0 || (s.type & kTypeConforming) == 0);
}

// The error code format of SDM vol. 3A 6.13, figure 6-6.
uint32_t SelErr(uint16_t sel, uint32_t ext = 0) { return (sel & 0xfffcu) | ext; }
uint32_t IdtErr(uint8_t vector, uint32_t ext) { return vector * 8u + 2u + ext; }

// How a failed segment-level check on an access is reported.
struct FaultSpec {
  uint8_t vector;
  uint32_t error;
};

// A stack being pushed or popped: the SS it lives in, the stack pointer, its
// width (16/32: segment limits apply; 64: 64-bit mode, canonical checks) and
// the fault a limit/canonical violation raises.
struct Stack {
  Segment seg;
  uint64_t sp = 0;
  int width = 32;
  FaultSpec fault{kVecSs, 0};
  bool user = false;
};

// Writes a stack pointer of `width` bits: a 16-bit stack only changes SP.
void SetSp(CpuState& s, uint64_t v, int width) {
  if (width == 16)
    s.gpr[kRsp] = (s.gpr[kRsp] & ~0xffffull) | (v & 0xffff);
  else
    s.gpr[kRsp] = v & LowBits(width);
}

class Engine {
 public:
  Engine(CpuState& st, PhysMemory& mem, const DecodedInsn& insn, const CpuidFn& cpuid)
      : st_(st), old_(st), ns_(st), lm_(mem, st.paging_regs()), insn_(insn), cpuid_(cpuid) {}

  absl::StatusOr<Completion> Run();

 private:
  // --- outcome plumbing -------------------------------------------------
  // Records a guest fault and returns a sentinel status that unwinds to Run().
  absl::Status Raise(uint8_t vector, std::optional<uint32_t> error, uint64_t cr2 = 0) {
    // Real-address mode exceptions push no error code (SDM 3A 20.1.4).
    if (old_.mode() == CpuMode::kReal) error.reset();
    fault_ = GuestFault{vector, error, cr2};
    return absl::AbortedError("vbts: guest fault");
  }
  absl::Status Gp(uint32_t error) { return Raise(kVecGp, error); }
  absl::Status Raise(FaultSpec f) { return Raise(f.vector, f.error); }
  absl::Status Unimpl(const std::string& what) {
    return absl::UnimplementedError(absl::StrFormat("%s at %s: %s is not supported", insn_.mnemonic,
                                                    old_.Describe(), what));
  }

  // --- memory -----------------------------------------------------------
  absl::Status CheckAccess(const pmu::AccessFault& f, FaultSpec noncanonical) {
    switch (f.kind) {
      case pmu::AccessFault::Kind::kNone: return absl::OkStatus();
      case pmu::AccessFault::Kind::kPageFault: return Raise(kVecPf, f.error_code, f.address);
      case pmu::AccessFault::Kind::kNonCanonical: return Raise(noncanonical);
    }
    return absl::OkStatus();
  }
  absl::Status ReadLinear(uint64_t la, void* out, size_t n, pmu::Access acc, FaultSpec nc) {
    VBTS_ASSIGN_OR_RETURN(pmu::AccessFault f,
                          lm_.Read(Gva(la), absl::MakeSpan(static_cast<uint8_t*>(out), n), acc));
    return CheckAccess(f, nc);
  }
  // Checks a write now and performs it at commit time, at the physical
  // addresses it translated to now: a frame whose first bytes land in the
  // paging structures does not move the rest (the translations are the
  // instruction's, as a TLB would hold them), and the commit cannot fail
  // half-way (every chunk is in RAM).
  absl::Status QueueWrite(uint64_t la, uint64_t value, size_t n, pmu::Access acc, FaultSpec nc) {
    acc.write = true;
    PendingWrite w{la, {}, acc, {}};
    VBTS_ASSIGN_OR_RETURN(pmu::AccessFault f, lm_.Locate(Gva(la), n, acc, w.chunks));
    VBTS_RETURN_IF_ERROR(CheckAccess(f, nc));
    w.bytes.resize(n);
    std::memcpy(w.bytes.data(), &value, n);
    writes_.push_back(std::move(w));
    return absl::OkStatus();
  }
  absl::Status CommitWrites() {
    // The accessed/dirty flags first (they change no translation), then the
    // bytes where the probes put them.
    for (const PendingWrite& w : writes_) {
      VBTS_ASSIGN_OR_RETURN(pmu::AccessFault f, lm_.MarkAccessedDirty(Gva(w.la), w.bytes.size(), w.access));
      if (!f.ok())
        return absl::InternalError(absl::StrFormat("write at 0x%x faulted after a successful probe", w.la));
    }
    for (const PendingWrite& w : writes_)
      for (const pmu::LinearMemory::PhysChunk& c : w.chunks)
        VBTS_RETURN_IF_ERROR(lm_.phys().Write(c.gpa, absl::MakeConstSpan(w.bytes).subspan(c.offset, c.len)));
    return absl::OkStatus();
  }
  static constexpr pmu::Access kImplicit{.implicit = true};

  // Linear address of stack offset `sp`, with the segment-limit (SDM 5.3) or
  // canonical (SDM 3.3.7.1) check for an n-byte access.
  absl::StatusOr<uint64_t> StackAddress(const Stack& s, uint64_t sp, size_t n) {
    if (s.width == 64) {
      if (!pmu::IsCanonical(sp) || !pmu::IsCanonical(sp + n - 1)) return Raise(s.fault);
      return sp;
    }
    VBTS_RETURN_IF_ERROR(CheckLimit(s.seg, sp, n, s.fault));
    return (s.seg.base + sp) & 0xffffffffull;
  }
  absl::Status CheckLimit(const Segment& seg, uint64_t off, size_t n, FaultSpec f) {
    if (seg.unusable && old_.mode() != CpuMode::kReal) return Raise(f);
    const uint64_t last = off + n - 1;
    if ((seg.type & (kTypeCode | kTypeExpandDown)) == kTypeExpandDown && seg.s) {
      // Expand-down data segment (SDM 3.4.5.1): valid offsets are limit+1 ..
      // 0xFFFF or 0xFFFFFFFF.
      const uint64_t top = seg.db ? 0xffffffffull : 0xffffull;
      if (off <= seg.limit || last > top) return Raise(f);
    } else if (last > seg.limit) {
      return Raise(f);
    }
    return absl::OkStatus();
  }
  absl::Status Push(Stack& s, uint64_t value, size_t n) {
    uint64_t sp = (s.sp - n) & LowBits(s.width);
    VBTS_ASSIGN_OR_RETURN(uint64_t la, StackAddress(s, sp, n));
    VBTS_RETURN_IF_ERROR(QueueWrite(la, value, n, {.user = s.user}, s.fault));
    s.sp = sp;
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> Pop(Stack& s, size_t n) {
    VBTS_ASSIGN_OR_RETURN(uint64_t la, StackAddress(s, s.sp & LowBits(s.width), n));
    uint64_t v = 0;
    VBTS_RETURN_IF_ERROR(ReadLinear(la, &v, n, {.user = s.user}, s.fault));
    s.sp = (s.sp + n) & LowBits(s.width);
    return v;
  }
  Stack CurrentStack() const {
    Stack s;
    s.seg = old_.ss;
    s.sp = old_.gpr[kRsp];
    s.width = old_.mode() == CpuMode::kLong64 ? 64 : old_.ss.db ? 32 : 16;
    s.sp &= LowBits(s.width);
    s.fault = {kVecSs, 0};
    s.user = old_.cpl() == 3;
    return s;
  }

  // --- descriptor tables ------------------------------------------------
  // Reads the 8-byte descriptor `sel` names from the GDT or LDT; nullopt when
  // it lies beyond the table limit (SDM 3.5.1).
  absl::StatusOr<std::optional<Descriptor>> ReadDescriptor(uint16_t sel) {
    uint64_t base;
    uint32_t limit;
    if (SelectorTi(sel)) {
      if (old_.ldtr.unusable || SelectorIsNull(old_.ldtr.selector)) return std::nullopt;
      base = old_.ldtr.base;
      limit = old_.ldtr.limit;
    } else {
      base = old_.gdtr.base;
      limit = old_.gdtr.limit;
    }
    const uint64_t off = SelectorIndex(sel) * 8ull;
    if (off + 7 > limit) return std::nullopt;
    Descriptor d;
    VBTS_RETURN_IF_ERROR(ReadLinear(base + off, &d.lo, 8, kImplicit, {kVecGp, 0}));
    return d;
  }
  // Hardware sets the accessed bit of a code/data descriptor it loads, with a
  // locked supervisor write to the table (SDM 3.4.5.1, 4.6 "implicit").
  absl::Status MarkAccessed(uint16_t sel, const Descriptor& d) {
    if (!d.s() || d.accessed()) return absl::OkStatus();
    const uint64_t base = SelectorTi(sel) ? old_.ldtr.base : old_.gdtr.base;
    const uint64_t la = base + SelectorIndex(sel) * 8ull + 5;
    return QueueWrite(la, ((d.lo >> 40) & 0xff) | kTypeAccessed, 1, kImplicit, {kVecGp, 0});
  }

  // The return-CS checks shared by IRET and far RET (SDM vol. 2 IRET
  // "PROTECTED-MODE-RETURN", RET "far return ... protected mode").
  absl::StatusOr<Descriptor> CheckReturnCs(uint16_t cs) {
    const int cpl = old_.cpl();
    if (SelectorIsNull(cs)) return Gp(0);
    VBTS_ASSIGN_OR_RETURN(std::optional<Descriptor> d, ReadDescriptor(cs));
    if (!d) return Gp(SelErr(cs));
    const int rpl = SelectorRpl(cs);
    if (!d->is_code()) return Gp(SelErr(cs));
    if (rpl < cpl) return Gp(SelErr(cs));
    if (d->conforming() && d->dpl() > rpl) return Gp(SelErr(cs));
    if (!d->conforming() && d->dpl() != rpl) return Gp(SelErr(cs));
    if (old_.long_mode_active() && d->l() && d->db()) return Gp(SelErr(cs));
    if (!d->present()) return Raise(kVecNp, SelErr(cs));
    return *d;
  }
  // The SS checks of a return to `rpl` (SDM IRET "RETURN-TO-OUTER-PRIVILEGE-
  // LEVEL", RET "RETURN-TO-OUTER-PRIVILEGE-LEVEL").  A null SS is allowed only
  // when returning to 64-bit mode at CPL < 3 (SDM 5.8.3, 6.14.3).
  absl::StatusOr<Segment> LoadReturnSs(uint16_t ss, int rpl, bool target64) {
    if (SelectorIsNull(ss)) {
      if (target64 && rpl != 3) return NullSegment(ss, rpl);
      return Gp(0);
    }
    VBTS_ASSIGN_OR_RETURN(std::optional<Descriptor> d, ReadDescriptor(ss));
    if (!d) return Gp(SelErr(ss));
    if (SelectorRpl(ss) != rpl || !d->writable_data() || d->dpl() != rpl) return Gp(SelErr(ss));
    if (!d->present()) return Raise(kVecSs, SelErr(ss));
    VBTS_RETURN_IF_ERROR(MarkAccessed(ss, *d));
    return SegmentFromDescriptor(*d, ss);
  }
  // Instruction-pointer check for a new CS (SDM: "IF tempEIP is not within
  // code segment limit" / "is non-canonical THEN #GP(0)").
  absl::Status CheckIp(uint64_t ip, bool target64, uint32_t limit, uint32_t error = 0) {
    if (target64 ? !pmu::IsCanonical(ip) : ip > limit) return Gp(error);
    return absl::OkStatus();
  }
  // "FOR each SegReg in (ES, FS, GS, and DS) ... set segment register to null"
  // on a return to an outer level (SDM IRET, RET).
  void NullInvalidDataSegments(int new_cpl) {
    for (Segment* s : {&ns_.es, &ns_.ds, &ns_.fs, &ns_.gs}) {
      if (s->unusable || SelectorIsNull(s->selector)) continue;
      if (IsDataOrNonConformingCode(*s) && s->dpl < new_cpl) *s = NullSegment(0);
    }
  }

  uint64_t NextRip() const {
    const uint64_t next = old_.rip + insn_.length;
    if (old_.mode() == CpuMode::kLong64) return next;
    return next & (old_.cs.db ? 0xffffffffull : 0xffffull);
  }
  bool Real() const { return old_.mode() == CpuMode::kReal; }
  bool V86() const { return old_.mode() == CpuMode::kVirtual8086; }
  // Real-mode segment load: selector and base only (SDM 20.1.1).
  static void LoadRealSegment(Segment& s, uint16_t sel) {
    s.selector = sel;
    s.base = static_cast<uint64_t>(sel) << 4;
  }

  // --- instructions -----------------------------------------------------
  absl::Status DoInt(uint8_t vector, bool software, uint32_t ext);
  absl::Status DoRealInt(uint8_t vector);
  absl::Status DoIret();
  absl::Status DoRealIret();
  absl::Status DoRetFar();
  absl::Status DoFarCallJmp(bool call);
  absl::Status DoSyscall();
  absl::Status DoSysret();
  absl::Status DoSysenter();
  absl::Status DoSysexit();
  absl::Status DoCpuid();
  absl::StatusOr<uint64_t> MemOperandAddress(const MemOperand& m, size_t n);

  struct PendingWrite {
    uint64_t la;
    std::vector<uint8_t> bytes;
    pmu::Access access;
    std::vector<pmu::LinearMemory::PhysChunk> chunks;  // where the probe found the bytes
  };

  CpuState& st_;
  const CpuState old_;
  CpuState ns_;
  pmu::LinearMemory lm_;
  const DecodedInsn& insn_;
  const CpuidFn& cpuid_;
  std::vector<PendingWrite> writes_;
  std::optional<GuestFault> fault_;
  TransferKind kind_ = TransferKind::kNone;
  uint8_t vector_ = 0;
};

absl::StatusOr<Completion> Engine::Run() {
  absl::Status s;
  const int ext_int1 = 1;  // INT1 is delivered like a hardware #DB: EXT=1 (SDM 6.13)
  switch (insn_.kind) {
    case InsnKind::kIntN: s = DoInt(static_cast<uint8_t>(insn_.imm), true, 0); break;
    case InsnKind::kInt3: s = DoInt(kVecBp, true, 0); break;
    case InsnKind::kInto:
      if (old_.rflags & kRflagsOf) {
        s = DoInt(kVecOf, true, 0);
      } else {  // INTO with OF=0 is a no-op
        ns_.rip = NextRip();
      }
      break;
    case InsnKind::kInt1: s = DoInt(kVecDb, false, ext_int1); break;
    case InsnKind::kIret: s = DoIret(); break;
    case InsnKind::kRetFar: s = DoRetFar(); break;
    case InsnKind::kCallFar: s = DoFarCallJmp(true); break;
    case InsnKind::kJmpFar: s = DoFarCallJmp(false); break;
    case InsnKind::kSyscall: s = DoSyscall(); break;
    case InsnKind::kSysret: s = DoSysret(); break;
    case InsnKind::kSysenter: s = DoSysenter(); break;
    case InsnKind::kSysexit: s = DoSysexit(); break;
    case InsnKind::kCpuid: s = DoCpuid(); break;
    case InsnKind::kOther: return Completion{};
  }
  Completion c;
  if (fault_) {
    c.result = Completion::Result::kFault;
    c.fault = *fault_;
    return c;
  }
  VBTS_RETURN_IF_ERROR(s);
  VBTS_RETURN_IF_ERROR(CommitWrites());
  // Every instruction but IRET clears RF when it completes (SDM 3A 17.3.1.1);
  // the instruction also ends any STI/MOV SS interrupt shadow.
  if (insn_.kind != InsnKind::kIret) ns_.rflags &= ~kRflagsRf;
  ns_.rflags |= kRflagsFixed1;
  ns_.interrupt_shadow = false;
  c.result = Completion::Result::kRetired;
  c.transfer.kind = kind_;
  c.transfer.vector = vector_;
  c.transfer.from = old_.pc_linear();
  c.transfer.to = ns_.pc_linear();
  c.transfer.old_cpl = old_.cpl();
  c.transfer.new_cpl = ns_.cpl();
  st_ = ns_;
  return c;
}

// INT n / INT3 / INTO / INT1 in protected and IA-32e mode: SDM vol. 2 "INT n/
// INTO/INT3/INT1" Operation (PROTECTED-MODE, TRAP-OR-INTERRUPT-GATE,
// INTER-/INTRA-PRIVILEGE-LEVEL-INTERRUPT) and SDM 3A 6.12, 6.14.
absl::Status Engine::DoInt(uint8_t vector, bool software, uint32_t ext) {
  kind_ = TransferKind::kInt;
  vector_ = vector;
  if (Real()) return DoRealInt(vector);
  if (V86()) return Unimpl("an interrupt in virtual-8086 mode");
  const int cpl = old_.cpl();
  const bool ia32e = old_.long_mode_active();
  const uint32_t idt_err = IdtErr(vector, ext);

  // IDT lookup (SDM 6.10, 6.14.1): 8-byte gates, 16 bytes in IA-32e mode.
  const uint64_t size = ia32e ? 16 : 8;
  if (vector * size + size - 1 > old_.idtr.limit) return Gp(idt_err);
  uint64_t raw[2] = {0, 0};
  VBTS_RETURN_IF_ERROR(ReadLinear(old_.idtr.base + vector * size, raw, size, kImplicit, {kVecGp, 0}));
  const Descriptor gate{raw[0], raw[1]};
  const uint8_t type = gate.type();
  const bool valid = !gate.s() && (ia32e ? (type == kIntGate32 || type == kTrapGate32)
                                         : (type == kTaskGate || type == kIntGate16 || type == kTrapGate16 ||
                                            type == kIntGate32 || type == kTrapGate32));
  if (!valid) return Gp(idt_err);
  // Gate DPL is checked for software interrupts only, and with EXT=0.
  if (software && gate.dpl() < cpl) return Gp(IdtErr(vector, 0));
  if (!gate.present()) return Raise(kVecNp, idt_err);
  if (type == kTaskGate) return Unimpl(absl::StrFormat("task gate for vector 0x%x", vector));
  if (type == kIntGate16 || type == kTrapGate16) return Unimpl(absl::StrFormat("16-bit gate for vector 0x%x", vector));

  // Target code segment (TRAP-OR-INTERRUPT-GATE).
  const uint16_t sel = gate.gate_selector();
  const uint64_t offset = gate.gate_offset(ia32e);
  if (SelectorIsNull(sel)) return Gp(ext);
  VBTS_ASSIGN_OR_RETURN(std::optional<Descriptor> cs, ReadDescriptor(sel));
  if (!cs) return Gp(SelErr(sel, ext));
  if (!cs->is_code() || cs->dpl() > cpl) return Gp(SelErr(sel, ext));
  if (!cs->present()) return Raise(kVecNp, SelErr(sel, ext));
  if (ia32e && !(cs->l() && !cs->db())) return Gp(SelErr(sel, ext));
  const bool outer = !cs->conforming() && cs->dpl() < cpl;
  const int new_cpl = outer ? cs->dpl() : cpl;
  const int ist = ia32e ? gate.gate_ist() : 0;

  // TSS reads are implicit supervisor accesses (SDM 4.6).
  auto tss_read = [&](uint32_t off, size_t n) -> absl::StatusOr<uint64_t> {
    if (off + n - 1 > old_.tr.limit) return Raise(kVecTs, SelErr(old_.tr.selector, ext));
    uint64_t v = 0;
    VBTS_RETURN_IF_ERROR(ReadLinear(old_.tr.base + off, &v, n, kImplicit, {kVecGp, 0}));
    return v;
  };

  Stack stack;
  stack.user = new_cpl == 3;
  stack.fault = {kVecSs, ext};
  if (outer && !ia32e) {
    // 32-bit TSS: ESPn/SSn (SDM 7.2.1).  A 16-bit TSS is refused.
    if (old_.tr.type != kTss32Busy && old_.tr.type != kTss32Available)
      return Unimpl(absl::StrFormat("interrupt stack switch through a TSS of type %d", old_.tr.type));
    // The pseudo-code checks (DPL << 3) + 4 + 5 against the TSS limit.
    if (Tss32EspOffset(new_cpl) + 5 > old_.tr.limit) return Raise(kVecTs, SelErr(old_.tr.selector, ext));
    VBTS_ASSIGN_OR_RETURN(uint64_t esp, tss_read(Tss32EspOffset(new_cpl), 4));
    VBTS_ASSIGN_OR_RETURN(uint64_t ss_raw, tss_read(Tss32SsOffset(new_cpl), 2));
    const uint16_t ss = static_cast<uint16_t>(ss_raw);
    if (SelectorIsNull(ss)) return Raise(kVecTs, ext);
    VBTS_ASSIGN_OR_RETURN(std::optional<Descriptor> ssd, ReadDescriptor(ss));
    if (!ssd || SelectorRpl(ss) != new_cpl) return Raise(kVecTs, SelErr(ss, ext));
    if (ssd->dpl() != new_cpl || !ssd->writable_data()) return Raise(kVecTs, SelErr(ss, ext));
    if (!ssd->present()) return Raise(kVecSs, SelErr(ss, ext));
    VBTS_RETURN_IF_ERROR(MarkAccessed(ss, *ssd));
    stack.seg = SegmentFromDescriptor(*ssd, ss);
    stack.width = ssd->db() ? 32 : 16;
    stack.sp = esp & LowBits(stack.width);
    stack.fault = {kVecSs, SelErr(ss, ext)};
  } else if (ia32e) {
    // 64-bit TSS: RSPn or ISTn (SDM 6.14.4, 6.14.5); SS becomes a null
    // selector with RPL = new CPL; RSP is aligned down to 16 (SDM 6.14.2).
    uint64_t rsp = old_.gpr[kRsp];
    if (outer || ist != 0) {
      const uint32_t off = ist ? Tss64IstOffset(ist) : Tss64RspOffset(new_cpl);
      VBTS_ASSIGN_OR_RETURN(rsp, tss_read(off, 8));
    }
    stack.seg = outer ? NullSegment(static_cast<uint16_t>(new_cpl), new_cpl) : old_.ss;
    stack.width = 64;
    stack.sp = rsp & ~0xfull;
  } else {
    stack = CurrentStack();
    stack.fault = {kVecSs, ext};
  }

  // Frame (SDM 6.12.1 figure 6-4, 6.14.2 figure 6-9): no error code for
  // software interrupts; the saved EIP is that of the next instruction.
  const size_t n = ia32e ? 8 : 4;
  if (outer || ia32e) {
    VBTS_RETURN_IF_ERROR(Push(stack, old_.ss.selector, n));
    VBTS_RETURN_IF_ERROR(Push(stack, old_.gpr[kRsp], n));
  }
  VBTS_RETURN_IF_ERROR(Push(stack, old_.rflags, n));
  VBTS_RETURN_IF_ERROR(Push(stack, old_.cs.selector, n));
  VBTS_RETURN_IF_ERROR(Push(stack, NextRip(), n));
  VBTS_RETURN_IF_ERROR(CheckIp(offset, ia32e, cs->limit(), ext));
  VBTS_RETURN_IF_ERROR(MarkAccessed(sel, *cs));

  ns_.cs = SegmentFromDescriptor(*cs, static_cast<uint16_t>((sel & 0xfffc) | new_cpl));
  ns_.cs.dpl = cs->conforming() ? static_cast<uint8_t>(cpl) : cs->dpl();
  ns_.rip = offset;
  ns_.ss = stack.seg;
  SetSp(ns_, stack.sp, stack.width);
  if (type == kIntGate32) ns_.rflags &= ~kRflagsIf;  // interrupt gate (SDM 6.12.1.3)
  ns_.rflags &= ~(kRflagsTf | kRflagsNt | kRflagsRf | kRflagsVm);
  return absl::OkStatus();
}

// Real-address-mode INT (SDM vol. 2 INT "REAL-ADDRESS-MODE", SDM 3A 20.1.4).
absl::Status Engine::DoRealInt(uint8_t vector) {
  if (vector * 4ull + 3 > old_.idtr.limit) return Gp(0);
  uint32_t ivt = 0;
  VBTS_RETURN_IF_ERROR(ReadLinear(old_.idtr.base + vector * 4ull, &ivt, 4, kImplicit, {kVecGp, 0}));
  Stack stack = CurrentStack();
  VBTS_RETURN_IF_ERROR(Push(stack, old_.rflags & 0xffff, 2));
  VBTS_RETURN_IF_ERROR(Push(stack, old_.cs.selector, 2));
  VBTS_RETURN_IF_ERROR(Push(stack, NextRip() & 0xffff, 2));
  ns_.rflags &= ~(kRflagsIf | kRflagsTf | kRflagsAc);
  LoadRealSegment(ns_.cs, static_cast<uint16_t>(ivt >> 16));
  ns_.rip = ivt & 0xffff;
  SetSp(ns_, stack.sp, stack.width);
  return absl::OkStatus();
}

// IRET/IRETD/IRETQ: SDM vol. 2 IRET Operation; SDM 3A 6.12.1, 6.14.3.
absl::Status Engine::DoIret() {
  kind_ = TransferKind::kIret;
  if (Real()) return DoRealIret();
  if (V86()) return Unimpl("IRET in virtual-8086 mode");
  const bool ia32e = old_.long_mode_active();
  if (old_.rflags & kRflagsNt) {
    if (ia32e) return Gp(0);  // task return is #GP(0) in IA-32e mode
    return Unimpl("task return (IRET with EFLAGS.NT=1)");
  }
  const int cpl = old_.cpl();
  const size_t n = insn_.operand_size / 8;
  Stack stack = CurrentStack();
  VBTS_ASSIGN_OR_RETURN(uint64_t temp_ip, Pop(stack, n));
  VBTS_ASSIGN_OR_RETURN(uint64_t temp_cs64, Pop(stack, n));
  VBTS_ASSIGN_OR_RETURN(uint64_t temp_flags, Pop(stack, n));
  const uint16_t temp_cs = static_cast<uint16_t>(temp_cs64);
  if (!ia32e && (temp_flags & kRflagsVm) && n == 4 && cpl == 0) return Unimpl("IRET to virtual-8086 mode");

  VBTS_ASSIGN_OR_RETURN(Descriptor cs, CheckReturnCs(temp_cs));
  const int rpl = SelectorRpl(temp_cs);
  const bool target64 = ia32e && cs.l();
  const bool outer = rpl > cpl;
  const bool pop_ss = outer || old_.mode() == CpuMode::kLong64;
  uint64_t temp_sp = 0;
  Segment new_ss;
  if (pop_ss) {
    VBTS_ASSIGN_OR_RETURN(temp_sp, Pop(stack, n));
    VBTS_ASSIGN_OR_RETURN(uint64_t temp_ss, Pop(stack, n));
    VBTS_ASSIGN_OR_RETURN(new_ss, LoadReturnSs(static_cast<uint16_t>(temp_ss), rpl, target64));
  }
  if (n == 2) temp_ip &= 0xffff;
  VBTS_RETURN_IF_ERROR(CheckIp(temp_ip, target64, cs.limit()));
  VBTS_RETURN_IF_ERROR(MarkAccessed(temp_cs, cs));

  // EFLAGS update rules, evaluated with the old CPL and IOPL.
  uint64_t mask = kIretBasicFlags;
  if (n >= 4) mask |= kRflagsRf | kRflagsAc | kRflagsId;
  const int iopl = static_cast<int>((old_.rflags & kRflagsIopl) >> 12);
  if (cpl <= iopl) mask |= kRflagsIf;
  if (cpl == 0) {
    mask |= kRflagsIopl;
    if (n >= 4) mask |= kRflagsVif | kRflagsVip;
  }
  if (n == 2) mask &= 0xffff;
  ns_.rflags = ((old_.rflags & ~mask) | (temp_flags & mask)) | kRflagsFixed1;

  ns_.rip = temp_ip;
  ns_.cs = SegmentFromDescriptor(cs, temp_cs);
  ns_.cs.dpl = static_cast<uint8_t>(rpl);  // CPL ← RPL (also for conforming CS)
  if (pop_ss) {
    ns_.ss = new_ss;
    if (!target64 && !new_ss.db && !new_ss.unusable) {
      // Returning to a 16-bit stack loads only SP; ESP[31:16] keep the
      // inner stack's value (the "espfix" behaviour of real processors).
      ns_.gpr[kRsp] = ((stack.sp & 0xffff0000ull) | (temp_sp & 0xffff));
    } else {
      ns_.gpr[kRsp] = temp_sp & LowBits(static_cast<int>(n * 8));
    }
  } else {
    SetSp(ns_, stack.sp, stack.width);
  }
  if (outer) NullInvalidDataSegments(rpl);
  ns_.nmi_masked = false;  // IRET ends NMI blocking (SDM 3A 6.7.1)
  return absl::OkStatus();
}

// Real-address-mode IRET (SDM vol. 2 IRET "REAL-ADDRESS-MODE").
absl::Status Engine::DoRealIret() {
  const size_t n = insn_.operand_size / 8;
  Stack stack = CurrentStack();
  VBTS_ASSIGN_OR_RETURN(uint64_t ip, Pop(stack, n));
  VBTS_ASSIGN_OR_RETURN(uint64_t cs, Pop(stack, n));
  VBTS_ASSIGN_OR_RETURN(uint64_t flags, Pop(stack, n));
  if (ip > old_.cs.limit) return Gp(0);
  if (n == 4)
    ns_.rflags = (flags & 0x257fd5) | (old_.rflags & 0x1a0000);
  else
    ns_.rflags = (old_.rflags & ~0xffffull) | (flags & 0xffff);
  LoadRealSegment(ns_.cs, static_cast<uint16_t>(cs));
  ns_.rip = ip;
  SetSp(ns_, stack.sp, stack.width);
  ns_.nmi_masked = false;
  return absl::OkStatus();
}

// Far RET (CB, CA iw): SDM vol. 2 RET Operation, far-return paths.
absl::Status Engine::DoRetFar() {
  kind_ = TransferKind::kFarRet;
  if (V86()) return Unimpl("far RET in virtual-8086 mode");
  const size_t n = insn_.operand_size / 8;
  const uint64_t imm = insn_.has_imm ? (insn_.imm & 0xffff) : 0;
  Stack stack = CurrentStack();
  VBTS_ASSIGN_OR_RETURN(uint64_t temp_ip, Pop(stack, n));
  VBTS_ASSIGN_OR_RETURN(uint64_t temp_cs64, Pop(stack, n));
  const uint16_t temp_cs = static_cast<uint16_t>(temp_cs64);
  if (n == 2) temp_ip &= 0xffff;
  if (Real()) {
    if (temp_ip > old_.cs.limit) return Gp(0);
    LoadRealSegment(ns_.cs, temp_cs);
    ns_.rip = temp_ip;
    SetSp(ns_, stack.sp + imm, stack.width);
    return absl::OkStatus();
  }
  const int cpl = old_.cpl();
  const bool ia32e = old_.long_mode_active();
  VBTS_ASSIGN_OR_RETURN(Descriptor cs, CheckReturnCs(temp_cs));
  const int rpl = SelectorRpl(temp_cs);
  const bool target64 = ia32e && cs.l();
  if (!target64) temp_ip &= 0xffffffffull;  // 0xFFFFFFFF mask; the limit check follows
  if (rpl <= cpl) {
    // RETURN-TO-SAME-PRIVILEGE-LEVEL.
    VBTS_RETURN_IF_ERROR(CheckIp(temp_ip, target64, cs.limit()));
    VBTS_RETURN_IF_ERROR(MarkAccessed(temp_cs, cs));
    ns_.cs = SegmentFromDescriptor(cs, temp_cs);
    ns_.cs.dpl = static_cast<uint8_t>(cpl);
    ns_.rip = temp_ip;
    SetSp(ns_, stack.sp + imm, stack.width);
    return absl::OkStatus();
  }
  // RETURN-TO-OUTER-PRIVILEGE-LEVEL: release the callee's parameters, pop
  // SS:ESP, then release the caller's.
  stack.sp = (stack.sp + imm) & LowBits(stack.width);
  VBTS_ASSIGN_OR_RETURN(uint64_t temp_sp, Pop(stack, n));
  VBTS_ASSIGN_OR_RETURN(uint64_t temp_ss64, Pop(stack, n));
  const uint16_t temp_ss = static_cast<uint16_t>(temp_ss64);
  VBTS_ASSIGN_OR_RETURN(Segment new_ss, LoadReturnSs(temp_ss, rpl, target64));
  VBTS_RETURN_IF_ERROR(CheckIp(temp_ip, target64, cs.limit()));
  VBTS_RETURN_IF_ERROR(MarkAccessed(temp_cs, cs));
  ns_.cs = SegmentFromDescriptor(cs, temp_cs);
  ns_.cs.dpl = static_cast<uint8_t>(rpl);
  ns_.rip = temp_ip;
  ns_.ss = new_ss;
  const int new_width = target64 ? 64 : new_ss.db ? 32 : 16;
  ns_.gpr[kRsp] = temp_sp & LowBits(static_cast<int>(n * 8));
  SetSp(ns_, (ns_.gpr[kRsp] + imm), new_width);
  NullInvalidDataSegments(rpl);
  return absl::OkStatus();
}

// Effective → linear address of an explicit memory operand with the segment
// checks of SDM 3A 5.3 (limit) / 3.3.7.1 (canonical): #GP(0), or #SS(0) for
// SS-relative operands.
absl::StatusOr<uint64_t> Engine::MemOperandAddress(const MemOperand& m, size_t n) {
  const uint64_t amask = LowBits(insn_.address_size);
  uint64_t ea = static_cast<uint64_t>(m.disp);
  if (m.base == kRipBase)
    ea += NextRip();
  else if (m.base >= 0)
    ea += old_.gpr[m.base] & amask;
  if (m.index >= 0) ea += (old_.gpr[m.index] & amask) * m.scale;
  ea &= amask;
  const Segment* segs[] = {&old_.es, &old_.cs, &old_.ss, &old_.ds, &old_.fs, &old_.gs};
  const Segment& seg = *segs[static_cast<int>(m.seg)];
  const FaultSpec f = m.seg == SegReg::kSs ? FaultSpec{kVecSs, 0} : FaultSpec{kVecGp, 0};
  if (old_.mode() == CpuMode::kLong64) {
    const uint64_t la = (m.seg == SegReg::kFs || m.seg == SegReg::kGs) ? ea + seg.base : ea;
    if (!pmu::IsCanonical(la) || !pmu::IsCanonical(la + n - 1)) return Raise(f);
    return la;
  }
  VBTS_RETURN_IF_ERROR(CheckLimit(seg, ea, n, f));
  return (seg.base + ea) & 0xffffffffull;
}

// Far CALL / far JMP to a code segment: SDM vol. 2 CALL and JMP Operation
// ("far call/jump ... protected mode", CONFORMING-/NONCONFORMING-CODE-SEGMENT).
absl::Status Engine::DoFarCallJmp(bool call) {
  kind_ = call ? TransferKind::kFarCall : TransferKind::kFarJmp;
  if (V86()) return Unimpl("far CALL/JMP in virtual-8086 mode");
  const size_t n = insn_.operand_size / 8;
  uint16_t sel;
  uint64_t offset;
  if (insn_.has_far_ptr) {
    sel = insn_.far_selector;
    offset = insn_.far_offset;
  } else if (insn_.has_mem) {
    VBTS_ASSIGN_OR_RETURN(uint64_t la, MemOperandAddress(insn_.mem, n + 2));
    const FaultSpec f = insn_.mem.seg == SegReg::kSs ? FaultSpec{kVecSs, 0} : FaultSpec{kVecGp, 0};
    const pmu::Access acc{.user = old_.cpl() == 3};
    offset = 0;
    uint16_t s16 = 0;
    VBTS_RETURN_IF_ERROR(ReadLinear(la, &offset, n, acc, f));
    VBTS_RETURN_IF_ERROR(ReadLinear(old_.mode() == CpuMode::kLong64 ? la + n : ((la + n) & 0xffffffffull), &s16,
                                    2, acc, f));
    sel = s16;
  } else {
    return absl::InternalError("far CALL/JMP without a pointer or memory operand");
  }
  if (n == 2) offset &= 0xffff;

  Stack stack = CurrentStack();
  if (Real()) {
    if (call) {
      VBTS_RETURN_IF_ERROR(Push(stack, old_.cs.selector, n));
      VBTS_RETURN_IF_ERROR(Push(stack, NextRip(), n));
    }
    if (offset > old_.cs.limit) return Gp(0);
    LoadRealSegment(ns_.cs, sel);
    ns_.rip = offset;
    SetSp(ns_, stack.sp, stack.width);
    return absl::OkStatus();
  }

  const int cpl = old_.cpl();
  const bool ia32e = old_.long_mode_active();
  if (SelectorIsNull(sel)) return Gp(0);
  VBTS_ASSIGN_OR_RETURN(std::optional<Descriptor> d, ReadDescriptor(sel));
  if (!d) return Gp(SelErr(sel));
  if (!d->s()) {
    const uint8_t t = d->type();
    const bool gate_ok = ia32e ? t == kCallGate32
                               : (t == kCallGate16 || t == kCallGate32 || t == kTaskGate || t == kTss16Available ||
                                  t == kTss32Available);
    if (!gate_ok) return Gp(SelErr(sel));
    if (t == kCallGate16 || t == kCallGate32) return Unimpl(absl::StrFormat("call gate 0x%04x", sel));
    if (t == kTaskGate) return Unimpl(absl::StrFormat("task gate 0x%04x", sel));
    return Unimpl(absl::StrFormat("task switch to TSS 0x%04x", sel));
  }
  if (!d->is_code()) return Gp(SelErr(sel));
  if (ia32e && d->l() && d->db()) return Gp(SelErr(sel));
  if (d->conforming()) {
    if (d->dpl() > cpl) return Gp(SelErr(sel));
  } else if (SelectorRpl(sel) > cpl || d->dpl() != cpl) {
    return Gp(SelErr(sel));
  }
  if (!d->present()) return Raise(kVecNp, SelErr(sel));
  const bool target64 = ia32e && d->l();
  if (!target64) offset &= 0xffffffffull;
  if (call) {
    VBTS_RETURN_IF_ERROR(Push(stack, old_.cs.selector, n));
    VBTS_RETURN_IF_ERROR(Push(stack, NextRip(), n));
  }
  VBTS_RETURN_IF_ERROR(CheckIp(offset, target64, d->limit()));
  VBTS_RETURN_IF_ERROR(MarkAccessed(sel, *d));
  // CS.RPL ← CPL; CPL does not change (a conforming segment keeps the CPL).
  ns_.cs = SegmentFromDescriptor(*d, static_cast<uint16_t>((sel & 0xfffc) | cpl));
  ns_.cs.dpl = static_cast<uint8_t>(cpl);
  ns_.rip = offset;
  SetSp(ns_, stack.sp, stack.width);
  return absl::OkStatus();
}

// SYSCALL: SDM vol. 2 SYSCALL Operation (64-bit mode only on Intel).
absl::Status Engine::DoSyscall() {
  kind_ = TransferKind::kSyscall;
  if (old_.mode() != CpuMode::kLong64 || !(old_.efer & kEferSce)) return Raise(kVecUd, std::nullopt);
  ns_.gpr[kRcx] = NextRip();
  ns_.gpr[kR11] = old_.rflags;
  ns_.rip = old_.lstar;
  ns_.rflags = old_.rflags & ~old_.sfmask;
  const uint16_t cs = static_cast<uint16_t>((old_.star >> 32) & 0xfffc);
  ns_.cs = FlatSegment(cs, kTypeCode | kTypeReadable | kTypeAccessed, 0, /*db=*/false, /*l=*/true);
  ns_.ss = FlatSegment(static_cast<uint16_t>(cs + 8), kTypeWritable | kTypeAccessed, 0, /*db=*/true, /*l=*/false);
  return absl::OkStatus();
}

// SYSRET: SDM vol. 2 SYSRET Operation.
absl::Status Engine::DoSysret() {
  kind_ = TransferKind::kSysret;
  if (old_.mode() != CpuMode::kLong64 || !(old_.efer & kEferSce)) return Raise(kVecUd, std::nullopt);
  if (old_.cpl() != 0) return Gp(0);
  const bool to64 = insn_.rex_w;
  if (to64 && !pmu::IsCanonical(old_.gpr[kRcx])) return Gp(0);
  ns_.rip = to64 ? old_.gpr[kRcx] : (old_.gpr[kRcx] & 0xffffffffull);
  ns_.rflags = (old_.gpr[kR11] & 0x3c7fd7) | kRflagsFixed1;
  const uint16_t base = static_cast<uint16_t>(old_.star >> 48);
  const uint16_t cs = static_cast<uint16_t>((to64 ? base + 16 : base) | 3);
  ns_.cs = FlatSegment(cs, kTypeCode | kTypeReadable | kTypeAccessed, 3, /*db=*/!to64, /*l=*/to64);
  ns_.ss = FlatSegment(static_cast<uint16_t>((base + 8) | 3), kTypeWritable | kTypeAccessed, 3, true, false);
  return absl::OkStatus();
}

// SYSENTER: SDM vol. 2 SYSENTER Operation.
absl::Status Engine::DoSysenter() {
  kind_ = TransferKind::kSysenter;
  if (V86()) return Unimpl("SYSENTER in virtual-8086 mode");
  if (Real() || (old_.sysenter_cs & 0xfffc) == 0) return Gp(0);
  const bool ia32e = old_.long_mode_active();
  ns_.rflags &= ~(kRflagsVm | kRflagsIf | kRflagsRf);
  ns_.gpr[kRsp] = ia32e ? old_.sysenter_esp : (old_.sysenter_esp & 0xffffffffull);
  ns_.rip = ia32e ? old_.sysenter_eip : (old_.sysenter_eip & 0xffffffffull);
  const uint16_t cs = static_cast<uint16_t>(old_.sysenter_cs & 0xfffc);
  ns_.cs = FlatSegment(cs, kTypeCode | kTypeReadable | kTypeAccessed, 0, /*db=*/!ia32e, /*l=*/ia32e);
  ns_.ss = FlatSegment(static_cast<uint16_t>(cs + 8), kTypeWritable | kTypeAccessed, 0, true, false);
  return absl::OkStatus();
}

// SYSEXIT: SDM vol. 2 SYSEXIT Operation.
absl::Status Engine::DoSysexit() {
  kind_ = TransferKind::kSysexit;
  if (V86()) return Unimpl("SYSEXIT in virtual-8086 mode");
  if (Real() || (old_.sysenter_cs & 0xfffc) == 0 || old_.cpl() != 0) return Gp(0);
  const bool to64 = insn_.rex_w;
  if (to64 && (!pmu::IsCanonical(old_.gpr[kRcx]) || !pmu::IsCanonical(old_.gpr[kRdx]))) return Gp(0);
  ns_.gpr[kRsp] = to64 ? old_.gpr[kRcx] : (old_.gpr[kRcx] & 0xffffffffull);
  ns_.rip = to64 ? old_.gpr[kRdx] : (old_.gpr[kRdx] & 0xffffffffull);
  const uint16_t cs = static_cast<uint16_t>((old_.sysenter_cs + (to64 ? 32 : 16)) | 3);
  ns_.cs = FlatSegment(cs, kTypeCode | kTypeReadable | kTypeAccessed, 3, /*db=*/!to64, /*l=*/to64);
  ns_.ss = FlatSegment(static_cast<uint16_t>(cs + 8), kTypeWritable | kTypeAccessed, 3, true, false);
  return absl::OkStatus();
}

// CPUID: SDM vol. 2 CPUID.  In 64-bit mode the 32-bit results zero-extend
// (SDM 3A 3.4.1.1); elsewhere the upper halves are left alone.
absl::Status Engine::DoCpuid() {
  kind_ = TransferKind::kCpuid;
  if (!cpuid_) return absl::FailedPreconditionError("CPUID completion needs a CpuidFn");
  CpuidResult r = cpuid_(static_cast<uint32_t>(old_.gpr[kRax]), static_cast<uint32_t>(old_.gpr[kRcx]));
  const bool m64 = old_.mode() == CpuMode::kLong64;
  auto put = [&](int reg, uint32_t v) {
    ns_.gpr[reg] = m64 ? v : ((old_.gpr[reg] & ~0xffffffffull) | v);
  };
  put(kRax, r.eax);
  put(kRbx, r.ebx);
  put(kRcx, r.ecx);
  put(kRdx, r.edx);
  ns_.rip = NextRip();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Completion> Complete(CpuState& st, PhysMemory& mem, const DecodedInsn& insn, const CpuidFn& cpuid) {
  Engine e(st, mem, insn, cpuid);
  return e.Run();
}

}  // namespace vbts::vcpu
