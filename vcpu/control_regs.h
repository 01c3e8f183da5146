// control_regs.h: which MOV to CR0, CR4 and CR8 raise #GP(0) on the modelled
// CPU (SDM vol. 3A 2.5 "Control Registers", vol. 2B "MOV - Move to/from
// Control Registers"), for the TCG engine, whose QEMU 5.0 takes every value
// (kvm-unit-tests' idt_test, la57, xsave, pcid and access tests write values
// hardware refuses).  Pure logic.
#ifndef VBTS_VCPU_CONTROL_REGS_H_
#define VBTS_VCPU_CONTROL_REGS_H_

#include <cstdint>

#include "vcpu/completer.h"

namespace vbts::vcpu {

// The CR4 bits software may set on a CPU with these CPUID answers: the bits
// the SDM defines whose feature flag the CPU reports (VME/PVI with VME, TSD
// with TSC, DE, PSE, PAE, MCE, PGE, PCE, OSFXSR with FXSR, OSXMMEXCPT with
// SSE, UMIP, LA57, VMXE with VMX, SMXE with SMX, FSGSBASE, PCIDE with PCID,
// OSXSAVE with XSAVE, KL, SMEP, SMAP, PKE with PKU, CET with CET_SS, PKS).
uint64_t Cr4ValidBits(const CpuidFn& cpuid);

// The state a MOV to a control register is checked against.
struct ControlState {
  uint64_t cr0 = 0, cr3 = 0, cr4 = 0, efer = 0;
  bool cs64 = false;  // executing in 64-bit mode (IA-32e, CS.L = 1)
};

// True when MOV to CR4 of `value` raises #GP(0): a bit outside `valid`;
// clearing PAE or changing LA57 while IA-32e mode is active; setting PCIDE
// outside IA-32e mode or while CR3[11:0] is not 0; setting CET while CR0.WP is
// clear.
bool Cr4WriteFaults(uint64_t value, uint64_t valid, const ControlState& s);
// True when MOV to CR0 of `value` raises #GP(0): bits 63:32 set; NW without
// CD; PG without PE; PG set with EFER.LME and CR4.PAE clear; PG cleared in
// 64-bit mode; WP cleared while CR4.CET is set.
bool Cr0WriteFaults(uint64_t value, const ControlState& s);
// True when MOV to CR8 of `value` raises #GP(0): bits 63:4 are reserved.
inline bool Cr8WriteFaults(uint64_t value) { return (value >> 4) != 0; }

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_CONTROL_REGS_H_
