// cpu_state.h: the architectural vCPU state vbts reasons about, independent of
// KVM's structs (vcpu/kvm_vcpu.cc converts). Pure data plus mode/CPL helpers;
// the completion engine (vcpu/completer.h) works on it with no /dev/kvm.
#ifndef VBTS_VCPU_CPU_STATE_H_
#define VBTS_VCPU_CPU_STATE_H_

#include <cstdint>
#include <string>

#include "pmu/paging.h"

namespace vbts::vcpu {

// A segment register's visible selector and hidden descriptor cache
// (SDM vol. 3A 3.4.3). `type` is the 4-bit descriptor type; `s` = 1 for
// code/data, 0 for system descriptors (TSS, LDT, gates).
struct Segment {
  uint64_t base = 0;
  uint32_t limit = 0;  // byte-granular (already scaled by G)
  uint16_t selector = 0;
  uint8_t type = 0;
  uint8_t dpl = 0;
  bool s = false;
  bool present = false;
  bool db = false;  // D/B: default operand size 32 / big stack
  bool l = false;   // 64-bit code segment
  bool g = false;
  bool avl = false;
  bool unusable = false;  // null selector loaded (VMX "unusable")
  bool operator==(const Segment&) const = default;
};

struct DescriptorTable {
  uint64_t base = 0;
  uint16_t limit = 0;
  bool operator==(const DescriptorTable&) const = default;
};

enum Gpr : int {
  kRax, kRcx, kRdx, kRbx, kRsp, kRbp, kRsi, kRdi,
  kR8, kR9, kR10, kR11, kR12, kR13, kR14, kR15,
};

// Execution mode as the SDM names them (vol. 3A 2.2).
enum class CpuMode { kReal, kVirtual8086, kProtected16, kProtected32, kCompat16, kCompat32, kLong64 };
const char* CpuModeName(CpuMode m);

// CR0/CR4/EFER/RFLAGS bits used across vcpu/ (SDM vol. 3A 2.5, 2.2.1, 2.3).
inline constexpr uint64_t kCr0Pe = 1ull << 0;
inline constexpr uint64_t kCr0Wp = 1ull << 16;
inline constexpr uint64_t kCr0Pg = 1ull << 31;
inline constexpr uint64_t kCr4Pse = 1ull << 4;
inline constexpr uint64_t kCr4Pae = 1ull << 5;
inline constexpr uint64_t kCr4Smep = 1ull << 20;
inline constexpr uint64_t kCr4Smap = 1ull << 21;
inline constexpr uint64_t kEferSce = 1ull << 0;
inline constexpr uint64_t kEferLme = 1ull << 8;
inline constexpr uint64_t kEferLma = 1ull << 10;
inline constexpr uint64_t kEferNxe = 1ull << 11;
inline constexpr uint64_t kRflagsCf = 1ull << 0;
inline constexpr uint64_t kRflagsFixed1 = 1ull << 1;
inline constexpr uint64_t kRflagsTf = 1ull << 8;
inline constexpr uint64_t kRflagsIf = 1ull << 9;
inline constexpr uint64_t kRflagsDf = 1ull << 10;
inline constexpr uint64_t kRflagsOf = 1ull << 11;
inline constexpr uint64_t kRflagsIopl = 3ull << 12;
inline constexpr uint64_t kRflagsNt = 1ull << 14;
inline constexpr uint64_t kRflagsRf = 1ull << 16;
inline constexpr uint64_t kRflagsVm = 1ull << 17;
inline constexpr uint64_t kRflagsAc = 1ull << 18;
inline constexpr uint64_t kRflagsVif = 1ull << 19;
inline constexpr uint64_t kRflagsVip = 1ull << 20;
inline constexpr uint64_t kRflagsId = 1ull << 21;

struct CpuState {
  uint64_t gpr[16] = {};
  uint64_t rip = 0;
  uint64_t rflags = kRflagsFixed1;
  Segment es, cs, ss, ds, fs, gs;
  Segment tr, ldtr;
  DescriptorTable gdtr, idtr;
  uint64_t cr0 = 0, cr2 = 0, cr3 = 0, cr4 = 0, cr8 = 0, efer = 0;
  // MSRs the completion engine needs (SYSCALL/SYSENTER, SWAPGS).
  uint64_t star = 0, lstar = 0, cstar = 0, sfmask = 0, kernel_gs_base = 0;
  uint64_t sysenter_cs = 0, sysenter_esp = 0, sysenter_eip = 0;
  // Interrupt shadow and NMI blocking (KVM_GET_VCPU_EVENTS).
  bool interrupt_shadow = false;
  bool nmi_masked = false;
  // CPUID 80000008H:EAX[7:0]; page-table bits at or above it are reserved.
  uint8_t maxphyaddr = 52;

  bool operator==(const CpuState&) const = default;

  // (mode, cpl and pc_linear are inline: the TCG engine's tracer asks for
  // them several times at every reported block.)
  CpuMode mode() const {
    if (!(cr0 & kCr0Pe)) return CpuMode::kReal;
    if (long_mode_active()) {
      if (cs.l) return CpuMode::kLong64;
      return cs.db ? CpuMode::kCompat32 : CpuMode::kCompat16;
    }
    if (rflags & kRflagsVm) return CpuMode::kVirtual8086;
    return cs.db ? CpuMode::kProtected32 : CpuMode::kProtected16;
  }
  // Current privilege level: CS.DPL in protected/long mode (SDM 5.5; KVM keeps
  // CPL in SS.DPL/CS.DPL), 0 in real mode, 3 in virtual-8086 mode.
  int cpl() const {
    if (!(cr0 & kCr0Pe)) return 0;
    if (!long_mode_active() && (rflags & kRflagsVm)) return 3;
    return cs.dpl;
  }
  bool long_mode_active() const { return (efer & kEferLma) != 0; }
  bool paging() const { return (cr0 & kCr0Pg) != 0; }
  // Linear address of CS:RIP.
  uint64_t pc_linear() const {
    if (long_mode_active() && cs.l && (cr0 & kCr0Pe)) return rip;
    return (cs.base + rip) & 0xffffffffull;
  }
  // The registers a page walk needs (pmu/paging.h).
  pmu::PagingRegs paging_regs() const {
    return pmu::PagingRegs{cr0, cr3, cr4, efer, maxphyaddr, (rflags & kRflagsAc) != 0};
  }
  std::string Describe() const;  // "pm32 CPL0 CS:EIP=0008:00101234"
  std::string Dump() const;      // multi-line register dump (for -v)
};

// The x87 and SSE registers, as FXSAVE (and KVM_GET_FPU) lay them out: what
// moves with the vCPU between the engines besides CpuState.
struct FpuState {
  uint8_t st[8][16] = {};  // ST(0)..ST(7), stack order: 80-bit values in the low 10 bytes
  uint16_t fcw = 0x37F;    // control word (reset value, SDM vol. 1 8.1.5)
  uint16_t fsw = 0;        // status word (TOP in bits 13:11)
  uint8_t ftw = 0;         // abridged tag word: bit i set = physical register i not empty
  uint8_t xmm[16][16] = {};
  uint32_t mxcsr = 0x1F80;
  bool operator==(const FpuState&) const = default;
};

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_CPU_STATE_H_
