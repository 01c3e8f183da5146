#include "vcpu/control_regs.h"

#include "vcpu/cpu_state.h"

namespace vbts::vcpu {
namespace {

constexpr uint64_t Bit(int n) { return uint64_t{1} << n; }
// (kCr0Pe/Wp/Pg, kCr4Pae, kEferLme/Lma: vcpu/cpu_state.h)
constexpr uint64_t kCr4Pcide = Bit(17), kCr4La57 = Bit(12), kCr4Cet = Bit(23);
constexpr uint64_t kCr0Nw = Bit(29), kCr0Cd = Bit(30);

}  // namespace

uint64_t Cr4ValidBits(const CpuidFn& cpuid) {
  const CpuidResult max = cpuid(0, 0);
  const CpuidResult l1 = cpuid(1, 0);
  const CpuidResult l7 = max.eax >= 7 ? cpuid(7, 0) : CpuidResult{};
  uint64_t v = Bit(8);  // PCE
  const auto when = [&v](bool has, uint64_t bits) {
    if (has) v |= bits;
  };
  when(l1.edx & Bit(1), Bit(0) | Bit(1));  // VME, PVI
  when(l1.edx & Bit(4), Bit(2));           // TSD
  when(l1.edx & Bit(2), Bit(3));           // DE
  when(l1.edx & Bit(3), Bit(4));           // PSE
  when(l1.edx & Bit(6), Bit(5));           // PAE
  when(l1.edx & Bit(7), Bit(6));           // MCE
  when(l1.edx & Bit(13), Bit(7));          // PGE
  when(l1.edx & Bit(24), Bit(9));          // OSFXSR
  when(l1.edx & Bit(25), Bit(10));         // OSXMMEXCPT
  when(l7.ecx & Bit(2), Bit(11));          // UMIP
  when(l7.ecx & Bit(16), Bit(12));         // LA57
  when(l1.ecx & Bit(5), Bit(13));          // VMXE
  when(l1.ecx & Bit(6), Bit(14));          // SMXE
  when(l7.ebx & Bit(0), Bit(16));          // FSGSBASE
  when(l1.ecx & Bit(17), Bit(17));         // PCIDE
  when(l1.ecx & Bit(26), Bit(18));         // OSXSAVE
  when(l7.ecx & Bit(23), Bit(19));         // KL
  when(l7.ebx & Bit(7), Bit(20));          // SMEP
  when(l7.ebx & Bit(20), Bit(21));         // SMAP
  when(l7.ecx & Bit(3), Bit(22));          // PKE
  when(l7.ecx & Bit(7), Bit(23));          // CET
  when(l7.ecx & Bit(31), Bit(24));         // PKS
  return v;
}

bool Cr4WriteFaults(uint64_t value, uint64_t valid, const ControlState& s) {
  if (value & ~valid) return true;
  const bool lma = (s.efer & kEferLma) != 0;
  if (lma && !(value & kCr4Pae)) return true;
  if (lma && ((value ^ s.cr4) & kCr4La57)) return true;
  if ((value & kCr4Pcide) && !(s.cr4 & kCr4Pcide) && (!lma || (s.cr3 & 0xFFF))) return true;
  if ((value & kCr4Cet) && !(s.cr0 & kCr0Wp)) return true;
  return false;
}

bool Cr0WriteFaults(uint64_t value, const ControlState& s) {
  if (value >> 32) return true;
  if ((value & kCr0Nw) && !(value & kCr0Cd)) return true;
  if ((value & kCr0Pg) && !(value & kCr0Pe)) return true;
  if ((value & kCr0Pg) && !(s.cr0 & kCr0Pg) && (s.efer & kEferLme) && !(s.cr4 & kCr4Pae)) return true;
  if (!(value & kCr0Pg) && s.cs64) return true;
  if (!(value & kCr0Wp) && (s.cr4 & kCr4Cet)) return true;
  return false;
}

}  // namespace vbts::vcpu
