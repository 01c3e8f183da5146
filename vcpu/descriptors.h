// descriptors.h: parsing and building of GDT/LDT/IDT descriptors and TSS
// stack fields (SDM vol. 3A 3.4.5, 3.5, 6.11, 6.14.1, 7.2.1, 7.7).
#ifndef VBTS_VCPU_DESCRIPTORS_H_
#define VBTS_VCPU_DESCRIPTORS_H_

#include <cstdint>

#include "vcpu/cpu_state.h"

namespace vbts::vcpu {

// Selector fields (SDM 3.4.2).
constexpr uint16_t SelectorIndex(uint16_t sel) { return sel >> 3; }
constexpr bool SelectorTi(uint16_t sel) { return (sel & 4) != 0; }  // 1 = LDT
constexpr int SelectorRpl(uint16_t sel) { return sel & 3; }
constexpr bool SelectorIsNull(uint16_t sel) { return (sel & 0xfffc) == 0; }

// System-segment and gate types (SDM 3.5, table 3-2).  In IA-32e mode types
// 9/0xB are 64-bit TSSs, 0xC a 64-bit call gate and 0xE/0xF 64-bit
// interrupt/trap gates; 1, 3, 4, 6, 7 are invalid there.
enum SystemType : uint8_t {
  kTss16Available = 0x1,
  kLdtType = 0x2,
  kTss16Busy = 0x3,
  kCallGate16 = 0x4,
  kTaskGate = 0x5,
  kIntGate16 = 0x6,
  kTrapGate16 = 0x7,
  kTss32Available = 0x9,
  kTss32Busy = 0xb,
  kCallGate32 = 0xc,
  kIntGate32 = 0xe,
  kTrapGate32 = 0xf,
};

// Code/data type bits (SDM 3.4.5.1, table 3-1).
inline constexpr uint8_t kTypeAccessed = 0x1;
inline constexpr uint8_t kTypeWritable = 0x2;   // data
inline constexpr uint8_t kTypeReadable = 0x2;   // code
inline constexpr uint8_t kTypeExpandDown = 0x4; // data
inline constexpr uint8_t kTypeConforming = 0x4; // code
inline constexpr uint8_t kTypeCode = 0x8;

// One descriptor as it sits in a table: `lo` is the first 8 bytes; `hi` the
// next 8 for 16-byte system descriptors and gates in IA-32e mode.
struct Descriptor {
  uint64_t lo = 0;
  uint64_t hi = 0;

  uint32_t base32() const {
    return static_cast<uint32_t>(((lo >> 16) & 0xffffff) | (((lo >> 56) & 0xff) << 24));
  }
  // Base of a 16-byte system descriptor (TSS/LDT) in IA-32e mode (SDM 7.2.3).
  uint64_t base64() const { return base32() | ((hi & 0xffffffffull) << 32); }
  uint32_t raw_limit() const { return static_cast<uint32_t>((lo & 0xffff) | (((lo >> 48) & 0xf) << 16)); }
  // Byte-granular limit: with G=1 the 20-bit limit is in 4-KiB units and the
  // low 12 bits read as ones (SDM 3.4.5).
  uint32_t limit() const { return g() ? (raw_limit() << 12) | 0xfff : raw_limit(); }
  uint8_t type() const { return (lo >> 40) & 0xf; }
  bool s() const { return (lo >> 44) & 1; }
  uint8_t dpl() const { return (lo >> 45) & 3; }
  bool present() const { return (lo >> 47) & 1; }
  bool avl() const { return (lo >> 52) & 1; }
  bool l() const { return (lo >> 53) & 1; }
  bool db() const { return (lo >> 54) & 1; }
  bool g() const { return (lo >> 55) & 1; }

  bool is_code() const { return s() && (type() & kTypeCode); }
  bool is_data() const { return s() && !(type() & kTypeCode); }
  bool conforming() const { return is_code() && (type() & kTypeConforming); }
  bool writable_data() const { return is_data() && (type() & kTypeWritable); }
  bool accessed() const { return s() && (type() & kTypeAccessed); }

  // Gate fields (SDM 5.8.3, 6.11, 6.14.1).
  uint16_t gate_selector() const { return static_cast<uint16_t>(lo >> 16); }
  uint8_t gate_ist() const { return (lo >> 32) & 7; }
  uint64_t gate_offset(bool ia32e) const {
    uint64_t off = (lo & 0xffff) | (((lo >> 48) & 0xffff) << 16);
    if (ia32e) off |= (hi & 0xffffffffull) << 32;
    return off;
  }
  // Bits 12:8 of the upper dword of a 16-byte descriptor must be zero
  // (SDM figure 5-9, 7-4).
  uint8_t upper_type() const { return (hi >> 40) & 0x1f; }
};

// Builders (used by tests and by anyone writing tables).
Descriptor MakeSegmentDescriptor(uint32_t base, uint32_t raw_limit, uint8_t type, bool s, int dpl, bool present,
                                 bool db, bool l, bool g, bool avl = false);
// Flat 4-GiB code/data descriptors, the usual OS layout.
Descriptor MakeCode32(int dpl, bool conforming = false);
Descriptor MakeCode64(int dpl, bool conforming = false);
Descriptor MakeData32(int dpl);  // writable, accessed clear
// Interrupt/trap/call/task gate; `hi` filled for IA-32e 16-byte gates.
Descriptor MakeGate(uint8_t type, uint16_t selector, uint64_t offset, int dpl, bool present = true, int ist = 0);
// TSS / LDT system descriptor (16 bytes in IA-32e mode).
Descriptor MakeSystemDescriptor(uint8_t type, uint64_t base, uint32_t raw_limit, int dpl = 0, bool present = true);

// The hidden part a segment register gets when `d` is loaded with `selector`
// (SDM 3.4.3), as KVM's struct kvm_segment represents it: byte-granular
// limit, type including the accessed bit the load sets (SDM 3.4.5.1).
Segment SegmentFromDescriptor(const Descriptor& d, uint16_t selector);
// A flat segment of the fixed shape SYSCALL/SYSRET/SYSENTER/SYSEXIT load
// (base 0, limit 0xFFFFF with G=1, P=1, S=1; SDM vol. 2 SYSCALL pseudo-code).
Segment FlatSegment(uint16_t selector, uint8_t type, int dpl, bool db, bool l);
// The segment register content after a null selector load or invalidation
// (SDM 3.4.2: "unusable"); `rpl` stays in the selector, and for SS in 64-bit
// mode DPL carries the new CPL (SDM 5.2.1: CPL tracked in SS.DPL by VMX/KVM).
Segment NullSegment(uint16_t selector, int dpl = 0);

// TSS stack fields.  32-bit TSS (SDM 7.2.1, figure 7-2): ESPn at 4+8n, SSn at
// 8+8n.  64-bit TSS (SDM 7.7, figure 7-11): RSPn at 4+8n, ISTn at 0x24+8(n-1).
constexpr uint32_t Tss32EspOffset(int ring) { return 4 + 8 * ring; }
constexpr uint32_t Tss32SsOffset(int ring) { return 8 + 8 * ring; }
constexpr uint32_t Tss64RspOffset(int ring) { return 4 + 8 * ring; }
constexpr uint32_t Tss64IstOffset(int ist) { return 0x24 + 8 * (ist - 1); }

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_DESCRIPTORS_H_
