// guards.h: the pure logic behind the supervisor's free-run guards
// (docs/completion.md, "Free-running with guards"): where the handler of an
// IDT vector starts, and how to take back an exception delivery that the host
// made instead of running an instruction (this PVM host delivers #UD for INT
// n/INT3/INTO in ring 3 instead of the interrupt).  No /dev/kvm: unit-tested
// in guards_test.cc with the completer's test machine.
#ifndef VBTS_VCPU_GUARDS_H_
#define VBTS_VCPU_GUARDS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "pmu/phys_memory.h"
#include "vcpu/cpu_state.h"

namespace vbts::vcpu {

// The code or data segment selector `sel` names in the GDT or LDT, as a
// segment-register load caches it (vcpu/descriptors.h SegmentFromDescriptor;
// the accessed bit shows set, as KVM reports it).  A conforming code segment
// gets DPL = RPL (the CPL it runs at; KVM keeps CPL in CS.DPL).
// FailedPrecondition for a null selector, one beyond the table limit, a
// system descriptor or a descriptor that is not present.
absl::StatusOr<Segment> ReadSegment(const CpuState& st, PhysMemory& mem, uint16_t sel);

// Where IDT[vector] leads in protected or IA-32e mode (SDM 6.11 figure 6-2,
// 6.14.1 figure 6-8).
struct GateTarget {
  Segment cs;           // the gate's code segment
  uint64_t offset = 0;  // RIP at the handler's first instruction
  uint64_t linear = 0;  // CS.base + offset (offset alone in 64-bit mode)
  bool ia32e = false;   // a 16-byte gate read in IA-32e mode
};
// FailedPrecondition (with the reason) in real mode, for a vector beyond the
// IDT limit, and for anything but a present 32-bit (or, in IA-32e mode,
// 64-bit) interrupt or trap gate whose selector names a present code segment.
absl::StatusOr<GateTarget> FindGateTarget(const CpuState& st, PhysMemory& mem, uint8_t vector);
// Linear address of the handler's first instruction: FindGateTarget().linear.
absl::StatusOr<uint64_t> HandlerEntry(const CpuState& st, PhysMemory& mem, uint8_t vector);

// Exceptions that push an error code (SDM 6.13, table 6-1).
bool VectorHasErrorCode(uint8_t vector);

// `st` is at the first instruction of the handler of an exception without an
// error code (such as #UD) that has just been delivered through a 32-bit gate
// (protected mode) or a 64-bit gate (IA-32e mode): no handler instruction has
// run.  Returns the state before the delivery, read back from the frame
// (SDM 6.12.1 figure 6-4, 6.14.2 figure 6-9): RIP, CS, RFLAGS with RF clear
// (a fault's frame has RF set; SDM 17.3.1.1), and RSP/SS from the frame when
// it holds them (IA-32e mode always; protected mode on a privilege change),
// otherwise RSP above the 3-slot frame.  CS/SS caches are reloaded from the
// GDT/LDT; a null SS in IA-32e mode becomes NullSegment(sel, CPL).  Guest
// memory is not changed (the frame bytes stay below the handler's RSP).
// FailedPrecondition when the frame cannot be read or names segments that
// cannot have been in use (not code / not present), or RFLAGS.VM is set
// (virtual-8086 frames are not undone).
absl::StatusOr<CpuState> UndoDelivery(const CpuState& st, PhysMemory& mem);

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_GUARDS_H_
