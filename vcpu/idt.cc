// idt.cc: IDT gate lookup (SDM vol. 3A 6.11, 6.14.1).
#include "vcpu/idt.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "pmu/paging.h"
#include "pmu/status_macros.h"
#include "vcpu/descriptors.h"

namespace vbts::vcpu {
namespace {

absl::StatusOr<uint64_t> ReadSystem64(const CpuState& st, PhysMemory& mem, uint64_t la) {
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

}  // namespace

bool VectorHasErrorCode(uint8_t v) {
  return v == 8 || (v >= 10 && v <= 14) || v == 17 || v == 21 || v == 29 || v == 30;
}

absl::StatusOr<HandlerEntry> FindHandlerEntry(const CpuState& st, PhysMemory& mem, uint8_t vector) {
  if (!(st.cr0 & kCr0Pe)) return absl::FailedPreconditionError("real mode has no IDT gates");
  HandlerEntry e;
  e.ia32e = st.long_mode_active();
  const uint32_t size = e.ia32e ? 16 : 8;
  if (uint64_t{vector} * size + size - 1 > st.idtr.limit)
    return absl::FailedPreconditionError(absl::StrFormat("IDT limit 0x%x excludes vector %u", st.idtr.limit, vector));
  Descriptor gate;
  VBTS_ASSIGN_OR_RETURN(gate.lo, ReadSystem64(st, mem, st.idtr.base + uint64_t{vector} * size));
  if (e.ia32e) {
    VBTS_ASSIGN_OR_RETURN(gate.hi, ReadSystem64(st, mem, st.idtr.base + uint64_t{vector} * size + 8));
  }
  e.gate_type = gate.type();
  if (gate.s() || !gate.present() || (e.gate_type != kIntGate32 && e.gate_type != kTrapGate32))
    return absl::FailedPreconditionError(
        absl::StrFormat("vector %u is not a present 32/64-bit interrupt or trap gate", vector));
  const uint16_t sel = gate.gate_selector();
  if (SelectorIsNull(sel)) return absl::FailedPreconditionError(absl::StrFormat("vector %u: null selector", vector));
  const uint64_t table = SelectorTi(sel) ? st.ldtr.base : st.gdtr.base;
  const uint32_t limit = SelectorTi(sel) ? st.ldtr.limit : st.gdtr.limit;
  if (SelectorIndex(sel) * 8u + 7 > limit)
    return absl::FailedPreconditionError(absl::StrFormat("vector %u: selector 0x%x outside its table", vector, sel));
  Descriptor cs;
  VBTS_ASSIGN_OR_RETURN(cs.lo, ReadSystem64(st, mem, table + SelectorIndex(sel) * 8u));
  if (!cs.is_code()) return absl::FailedPreconditionError(absl::StrFormat("vector %u: 0x%x is no code segment", vector, sel));
  e.cs = SegmentFromDescriptor(cs, sel);
  e.offset = gate.gate_offset(e.ia32e);
  e.linear = (e.ia32e && e.cs.l) ? e.offset : ((e.cs.base + e.offset) & 0xFFFFFFFFull);
  return e;
}

}  // namespace vbts::vcpu
