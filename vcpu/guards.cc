// guards.cc: handler entries and undoing an exception delivery (guards.h).
#include "vcpu/guards.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "pmu/paging.h"
#include "base/status_macros.h"
#include "vcpu/descriptors.h"

namespace vbts::vcpu {
namespace {

// Reads guest memory at a linear address the way the processor's implicit
// supervisor accesses would see it, but without setting Accessed/Dirty
// flags: vbts looking at the IDT or a stack must leave no trace.
absl::Status Peek(const CpuState& st, PhysMemory& mem, uint64_t la, void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  const pmu::Access acc{.implicit = true};
  while (n > 0) {
    VBTS_ASSIGN_OR_RETURN(pmu::Translation t, pmu::Translate(st.paging_regs(), mem, Gva(la), acc,
                                                             /*set_accessed_dirty=*/false));
    if (!t.fault.ok())
      return absl::FailedPreconditionError(absl::StrFormat("linear address 0x%x is not mapped", la));
    const uint64_t in_page = t.page_size - (la & (t.page_size - 1));
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, in_page));
    VBTS_RETURN_IF_ERROR(mem.Read(t.gpa, absl::MakeSpan(p, chunk)));
    p += chunk;
    la += chunk;
    n -= chunk;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Peek64(const CpuState& st, PhysMemory& mem, uint64_t la) {
  uint64_t v = 0;
  VBTS_RETURN_IF_ERROR(Peek(st, mem, la, &v, 8));
  return v;
}

absl::StatusOr<uint32_t> Peek32(const CpuState& st, PhysMemory& mem, uint64_t la) {
  uint32_t v = 0;
  VBTS_RETURN_IF_ERROR(Peek(st, mem, la, &v, 4));
  return v;
}

absl::StatusOr<Descriptor> PeekDescriptor(const CpuState& st, PhysMemory& mem, uint16_t sel) {
  if (SelectorIsNull(sel)) return absl::FailedPreconditionError("null selector");
  uint64_t base;
  uint32_t limit;
  if (SelectorTi(sel)) {
    if (st.ldtr.unusable || SelectorIsNull(st.ldtr.selector))
      return absl::FailedPreconditionError(absl::StrFormat("selector 0x%x names the LDT, and there is none", sel));
    base = st.ldtr.base;
    limit = st.ldtr.limit;
  } else {
    base = st.gdtr.base;
    limit = st.gdtr.limit;
  }
  const uint64_t off = SelectorIndex(sel) * 8ull;
  if (off + 7 > limit)
    return absl::FailedPreconditionError(absl::StrFormat("selector 0x%x is beyond the table limit 0x%x", sel, limit));
  Descriptor d;
  VBTS_ASSIGN_OR_RETURN(d.lo, Peek64(st, mem, base + off));
  return d;
}

}  // namespace

absl::StatusOr<Segment> ReadSegment(const CpuState& st, PhysMemory& mem, uint16_t sel) {
  VBTS_ASSIGN_OR_RETURN(Descriptor d, PeekDescriptor(st, mem, sel));
  if (!d.s()) return absl::FailedPreconditionError(absl::StrFormat("selector 0x%x names a system descriptor", sel));
  if (!d.present()) return absl::FailedPreconditionError(absl::StrFormat("selector 0x%x is not present", sel));
  Segment s = SegmentFromDescriptor(d, sel);
  if (d.conforming()) s.dpl = static_cast<uint8_t>(SelectorRpl(sel));
  return s;
}

bool VectorHasErrorCode(uint8_t v) {
  return v == 8 || (v >= 10 && v <= 14) || v == 17 || v == 21 || v == 29 || v == 30;
}

absl::StatusOr<uint64_t> HandlerEntry(const CpuState& st, PhysMemory& mem, uint8_t vector) {
  VBTS_ASSIGN_OR_RETURN(GateTarget t, FindGateTarget(st, mem, vector));
  return t.linear;
}

absl::StatusOr<GateTarget> FindGateTarget(const CpuState& st, PhysMemory& mem, uint8_t vector) {
  if (!(st.cr0 & kCr0Pe)) return absl::FailedPreconditionError("real mode: no IDT gates");
  const bool ia32e = st.long_mode_active();
  const uint32_t size = ia32e ? 16 : 8;
  if (vector * size + size - 1 > st.idtr.limit)
    return absl::FailedPreconditionError(
        absl::StrFormat("IDT limit 0x%x excludes vector %u", st.idtr.limit, vector));
  Descriptor gate;
  VBTS_ASSIGN_OR_RETURN(gate.lo, Peek64(st, mem, st.idtr.base + vector * size));
  if (ia32e) {
    VBTS_ASSIGN_OR_RETURN(gate.hi, Peek64(st, mem, st.idtr.base + vector * size + 8));
  }
  if (gate.s() || (gate.type() != kIntGate32 && gate.type() != kTrapGate32))
    return absl::FailedPreconditionError(absl::StrFormat(
        "IDT[%u] has type 0x%x, not a %s interrupt or trap gate", vector, gate.type(), ia32e ? "64-bit" : "32-bit"));
  if (!gate.present()) return absl::FailedPreconditionError(absl::StrFormat("IDT[%u] is not present", vector));
  VBTS_ASSIGN_OR_RETURN(Segment cs, ReadSegment(st, mem, gate.gate_selector()));
  if (!(cs.type & kTypeCode))
    return absl::FailedPreconditionError(
        absl::StrFormat("IDT[%u] selector 0x%x is not a code segment", vector, gate.gate_selector()));
  GateTarget t;
  t.cs = cs;
  t.offset = gate.gate_offset(ia32e);
  t.ia32e = ia32e;
  t.linear = ia32e ? t.offset : ((cs.base + t.offset) & 0xffffffffull);  // 64-bit code: base 0
  return t;
}

absl::StatusOr<CpuState> UndoDelivery(const CpuState& st, PhysMemory& mem) {
  CpuState before = st;
  uint64_t rip, rflags;
  uint16_t cs_sel;
  if (st.long_mode_active()) {
    // 64-bit frame (figure 6-9): RIP, CS, RFLAGS, RSP, SS, 8 bytes each.
    uint64_t f[5];
    VBTS_RETURN_IF_ERROR(Peek(st, mem, st.gpr[kRsp], f, sizeof f));
    rip = f[0];
    cs_sel = static_cast<uint16_t>(f[1]);
    rflags = f[2];
    before.gpr[kRsp] = f[3];
    const uint16_t ss_sel = static_cast<uint16_t>(f[4]);
    if (SelectorIsNull(ss_sel)) {
      before.ss = NullSegment(ss_sel, SelectorRpl(cs_sel));
    } else {
      VBTS_ASSIGN_OR_RETURN(before.ss, ReadSegment(st, mem, ss_sel));
    }
  } else {
    if (!(st.cr0 & kCr0Pe)) return absl::FailedPreconditionError("real mode: no protected-mode frame");
    // 32-bit frame (figure 6-4): EIP, CS, EFLAGS [, ESP, SS on a privilege change].
    const uint64_t sp_mask = st.ss.db ? 0xffffffffull : 0xffffull;
    const uint64_t sp = st.gpr[kRsp] & sp_mask;
    auto slot = [&](int i) { return (st.ss.base + ((sp + 4 * i) & sp_mask)) & 0xffffffffull; };
    uint32_t eip, cs32, eflags;
    VBTS_ASSIGN_OR_RETURN(eip, Peek32(st, mem, slot(0)));
    VBTS_ASSIGN_OR_RETURN(cs32, Peek32(st, mem, slot(1)));
    VBTS_ASSIGN_OR_RETURN(eflags, Peek32(st, mem, slot(2)));
    rip = eip;
    cs_sel = static_cast<uint16_t>(cs32);
    rflags = eflags;
    if (SelectorRpl(cs_sel) > st.cpl()) {
      uint32_t esp, ss32;
      VBTS_ASSIGN_OR_RETURN(esp, Peek32(st, mem, slot(3)));
      VBTS_ASSIGN_OR_RETURN(ss32, Peek32(st, mem, slot(4)));
      before.gpr[kRsp] = esp;
      VBTS_ASSIGN_OR_RETURN(before.ss, ReadSegment(st, mem, static_cast<uint16_t>(ss32)));
      if (before.ss.type & kTypeCode)
        return absl::FailedPreconditionError(absl::StrFormat("frame SS 0x%x is a code segment", ss32));
    } else {
      before.gpr[kRsp] = (st.gpr[kRsp] & ~sp_mask) | ((sp + 12) & sp_mask);
    }
  }
  if (rflags & kRflagsVm) return absl::FailedPreconditionError("the frame is from virtual-8086 mode");
  VBTS_ASSIGN_OR_RETURN(before.cs, ReadSegment(st, mem, cs_sel));
  if (!(before.cs.type & kTypeCode))
    return absl::FailedPreconditionError(absl::StrFormat("frame CS 0x%x is not a code segment", cs_sel));
  before.rip = rip;
  before.rflags = (rflags & ~kRflagsRf) | kRflagsFixed1;
  return before;
}

}  // namespace vbts::vcpu
