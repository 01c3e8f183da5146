// data_breakpoints.h: the guest's own data breakpoints (DR0-DR3 with DR7
// R/W = 01 write or 11 read/write; SDM vol. 3B 17.2.4-17.2.5, 17.3.1.2),
// for hosts that do not raise them while vbts single-steps the guest (this
// PVM host: probe `guest data bp pm32, stepped`), and on the TCG engine. The
// tracer computes the data accesses of each instruction before it runs (or,
// on the TCG engine, is told of each access that hits one:
// TcgCpu::SetGuestDataHitHook) and, once it retired, raises #DB (a trap) with
// DR6.Bn for every breakpoint an access touched.
#ifndef VBTS_VCPU_DATA_BREAKPOINTS_H_
#define VBTS_VCPU_DATA_BREAKPOINTS_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

#include "vcpu/cpu_state.h"
#include "vcpu/decoder.h"

namespace vbts::vcpu {

struct DataAccess {
  uint64_t linear = 0;
  uint32_t size = 0;  // bytes
  bool read = false;
  bool write = false;
};

// The data accesses `insn` makes when it runs from state `st` (registers
// before the instruction): explicit and implicit memory operands and stack
// slots, at their linear addresses (segment base + effective address; in
// 64-bit mode only FS/GS bases). One element of a string instruction.
std::vector<DataAccess> DataAccessesOf(const DecodedInsn& insn, const CpuState& st);

// The guest's debug registers, as far as data breakpoints go.
struct GuestBreakpoints {
  std::array<uint64_t, 4> dr{};
  uint64_t dr7 = 0;
  // True if some breakpoint is enabled (L or G) with R/W 01 or 11 (bit 0 of
  // R/W set).  (Inline: the tracer asks at every boundary it reports.)
  bool AnyData() const {
    const uint64_t enabled = (dr7 | (dr7 >> 1)) & 0x55;  // L or G of breakpoint i at bit 2i
    const uint64_t at4 = (enabled & 1) | ((enabled & 4) << 2) | ((enabled & 16) << 4) | ((enabled & 64) << 6);
    return (at4 & (dr7 >> 16) & 0x1111) != 0;  // ... and bit 0 of its R/W at bit 4i
  }
  // Breakpoint i is a data breakpoint: enabled (L or G) with R/W 01
  // (writes) or 11 (reads and writes) (SDM 17.2.4).
  bool IsData(int i) const { return ((dr7 >> (2 * i)) & 3) != 0 && ((dr7 >> (16 + 4 * i)) & 1) != 0; }
  // Its bytes [Start(i), Start(i) + Length(i)): LEN 00/01/11/10 = 1/2/4/8
  // bytes, the address aligned down to its length (SDM 17.2.5).
  uint64_t Length(int i) const {
    static constexpr uint64_t kLenBytes[4] = {1, 2, 8, 4};
    return kLenBytes[(dr7 >> (18 + 4 * i)) & 3];
  }
  uint64_t Start(int i) const { return dr[i] & ~(Length(i) - 1); }
  // Data breakpoint i (IsData) matches access `a`: R/W 01 only writes.
  bool Matches(int i, const DataAccess& a) const {
    if (!a.read && !a.write) return false;
    if (((dr7 >> (16 + 4 * i)) & 3) == 1 && !a.write) return false;
    const uint64_t lo = Start(i);
    return a.linear < lo + Length(i) && a.linear + a.size > lo;
  }
};

// DR6 B0-B3 bits of the enabled data breakpoints `accesses` touch
// (GuestBreakpoints::IsData, Matches).
uint32_t DataBreakpointHits(const GuestBreakpoints& bp, absl::Span<const DataAccess> accesses);

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_DATA_BREAKPOINTS_H_
