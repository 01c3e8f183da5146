// idt.h: where the guest's IDT sends an interrupt or exception vector, read
// the way the processor reads it (SDM vol. 3A 6.10–6.11, 6.14.1): for the
// tracer, which must recognise a handler the host KVM delivered to, and for
// the supervisor's guards on handler entries.
#ifndef VBTS_VCPU_IDT_H_
#define VBTS_VCPU_IDT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "pmu/phys_memory.h"
#include "vcpu/cpu_state.h"

namespace vbts::vcpu {

struct HandlerEntry {
  Segment cs;            // the gate's code segment, from the GDT/LDT
  uint64_t offset = 0;   // RIP at the handler's first instruction
  uint64_t linear = 0;   // CS.base + offset (offset alone in 64-bit mode)
  uint8_t gate_type = 0; // 0xE interrupt gate, 0xF trap gate (32-bit or 64-bit)
  bool ia32e = false;    // 16-byte gate read in IA-32e mode
};

// The handler entry of `vector` in the current IDT, or FailedPrecondition
// naming why there is none (outside the IDT limit, not present, a task or
// 16-bit gate, a selector outside the GDT, memory not readable).  Protected
// and IA-32e mode only.
absl::StatusOr<HandlerEntry> FindHandlerEntry(const CpuState& st, PhysMemory& mem, uint8_t vector);

// Exceptions that push an error code (SDM 6.13, table 6-1).
bool VectorHasErrorCode(uint8_t vector);

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_IDT_H_
