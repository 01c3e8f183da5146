// data_breakpoints.cc: see data_breakpoints.h.
#include "vcpu/data_breakpoints.h"

#include "base/bits.h"

namespace vbts::vcpu {

std::vector<DataAccess> DataAccessesOf(const DecodedInsn& insn, const CpuState& st) {
  std::vector<DataAccess> out;
  const bool long64 = st.mode() == CpuMode::kLong64;
  const uint64_t amask = LowBits(insn.address_size);
  const uint64_t smask = LowBits(insn.stack_width ? insn.stack_width : (long64 ? 64 : st.ss.db ? 32 : 16));
  const Segment* segs[] = {&st.es, &st.cs, &st.ss, &st.ds, &st.fs, &st.gs};
  for (int i = 0; i < insn.data_count; i++) {
    const DataOperand& o = insn.data[i];
    const uint32_t size = o.mem.size_bits / 8 ? o.mem.size_bits / 8 : 1;
    uint64_t ea;
    if (o.mem.base == kRsp && o.mem.index < 0 && o.mem.disp == 0 && (o.push || o.mem.seg == SegReg::kSs)) {
      // Stack slot: the stack width, not the address size, applies (SDM 3A 6.2).
      ea = st.gpr[kRsp] & smask;
      if (o.push) ea = (ea - size) & smask;
    } else {
      ea = static_cast<uint64_t>(o.mem.disp);
      if (o.mem.base == kRipBase)
        ea += st.rip + insn.length;
      else if (o.mem.base >= 0)
        ea += st.gpr[o.mem.base] & amask;
      if (o.mem.index >= 0) ea += (st.gpr[o.mem.index] & amask) * o.mem.scale;
      ea &= amask;
    }
    const Segment& seg = *segs[static_cast<int>(o.mem.seg)];
    uint64_t la;
    if (long64)
      la = (o.mem.seg == SegReg::kFs || o.mem.seg == SegReg::kGs) ? ea + seg.base : ea;
    else
      la = (seg.base + ea) & 0xFFFFFFFFull;
    out.push_back({la, size, o.read, o.write});
  }
  return out;
}


uint32_t DataBreakpointHits(const GuestBreakpoints& bp, absl::Span<const DataAccess> accesses) {
  uint32_t hits = 0;
  for (int i = 0; i < 4; i++) {
    if (!bp.IsData(i)) continue;
    for (const DataAccess& a : accesses) {
      if (bp.Matches(i, a)) {
        hits |= 1u << i;
        break;
      }
    }
  }
  return hits;
}

}  // namespace vbts::vcpu
