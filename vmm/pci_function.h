// pci_function.h: one PCI function's type-0 configuration space, the base of
// every device vbts puts on its PCI bus (vmm/pci_host.h).
#ifndef VBTS_VMM_PCI_FUNCTION_H_
#define VBTS_VMM_PCI_FUNCTION_H_

#include <array>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace vbts::vmm {

// An MSI message: the address (bits 31:20 are FEEH) and data a function
// writes to signal an interrupt (PCI 3.0 6.8; SDM vol. 3A 10.11).
struct MsiMessage {
  uint64_t address = 0;
  uint32_t data = 0;
  // Set by interrupt remapping in x2APIC mode (IRTA.EIME): the destination is
  // 32 bits wide, bits 31:8 in address bits 63:40, and FFH is an x2APIC ID.
  // Clear for every other message: an 8-bit destination, FFH a broadcast.
  bool x2apic_dest = false;
  bool operator==(const MsiMessage&) const = default;
};

// Whom an MSI names (SDM vol. 3A 10.11.1): the destination ID in address
// bits 19:12, plus bits 31:8 from address bits 63:40 when x2apic_dest, and
// the destination mode in bit 2. No interrupt (nullopt) unless address bits
// 31:20 are FEEH and, for an 8-bit destination, bits 63:32 are zero (such a
// write goes to memory above 4 GiB, not to an APIC).
struct MsiTarget {
  uint32_t dest = 0;
  bool logical = false;
  static std::optional<MsiTarget> Of(const MsiMessage& m) {
    if (((m.address >> 20) & 0xFFF) != 0xFEE) return std::nullopt;
    if (!m.x2apic_dest && (m.address >> 32)) return std::nullopt;
    const uint32_t high = m.x2apic_dest ? static_cast<uint32_t>(m.address >> 40) << 8 : 0;
    return MsiTarget{static_cast<uint32_t>((m.address >> 12) & 0xFF) | high, ((m.address >> 2) & 1) != 0};
  }
};

// What a function's bus-master accesses and interrupts reach: the machine,
// which takes DMA through the IOMMU (if any) to RAM, INTx to the interrupt
// controllers' input line, MSI through interrupt remapping to the LAPIC.
// `requester` is the function's requester ID (bus << 8 | devfn).
class PciPlatform {
 public:
  virtual ~PciPlatform() = default;
  // A failed access (no RAM there, an IOMMU fault) is an error; a read
  // then leaves `out` as it was.
  virtual absl::Status DmaRead(uint16_t requester, uint64_t address, absl::Span<uint8_t> out) = 0;
  virtual absl::Status DmaWrite(uint16_t requester, uint64_t address, absl::Span<const uint8_t> data) = 0;
  virtual void SetIntx(uint16_t requester, uint8_t line, bool level) = 0;
  virtual void SignalMsi(uint16_t requester, const MsiMessage& message) = 0;
};

// The 256-byte configuration space (PCI Local Bus Specification 3.0, 6.1)
// with, per byte, the bits software may write. Reads return the bytes as
// kept; writes change only writable bits. Registers are little-endian. The
// status register is read only: no function here signals an error, so its
// write-1-to-clear bits are never set.
//
// Common rules every function here follows (PCI 3.0 6.2):
//  - Command (04H): I/O space (bit 0), memory space (1), bus master (2) and
//    INTx disable (10) are writable, the rest reads 0.
//  - A memory BAR of size 2^n (n >= 4) keeps its low n bits at 0, so that
//    writing all ones and reading back gives the size (6.2.5.1); a BAR
//    decodes only while the command's memory-space bit is set.
//  - Interrupt line (3CH) is writable (firmware's routing note); interrupt
//    pin (3DH) reads the pin the function uses.
//  - MSI (6.8.1): a capability with a 64-bit address and one vector;
//    the enable bit of message control and the address and data registers
//    are writable; while MSI is enabled the function does not assert INTx.
class PciFunction {
 public:
  virtual ~PciFunction() = default;

  uint8_t ConfigByte(uint32_t reg) const { return config_[reg & 0xFF]; }
  // A configuration write of data.size() bytes at `reg` (one dword at most,
  // not crossing it).
  void WriteConfig(uint32_t reg, absl::Span<const uint8_t> data);

  uint16_t command() const { return Get16(0x04); }
  bool memory_enabled() const { return (command() & kCommandMemory) != 0; }
  bool bus_master() const { return (command() & kCommandMaster) != 0; }
  bool intx_disabled() const { return (command() & kCommandIntxDisable) != 0; }
  // Memory BAR `n`'s base while the function decodes memory; nothing otherwise.
  std::optional<uint64_t> MemoryBar(int n) const;
  uint32_t BarSize(int n) const { return bar_size_[n]; }
  // The MSI message while MSI is enabled.
  std::optional<MsiMessage> Msi() const;

  static constexpr uint16_t kCommandIo = 1u << 0, kCommandMemory = 1u << 1, kCommandMaster = 1u << 2,
                            kCommandIntxDisable = 1u << 10;

 protected:
  PciFunction(uint16_t vendor, uint16_t device, uint8_t revision, uint32_t class_code);

  uint16_t Get16(uint32_t reg) const { return static_cast<uint16_t>(config_[reg] | config_[reg + 1] << 8); }
  uint32_t Get32(uint32_t reg) const { return Get16(reg) | static_cast<uint32_t>(Get16(reg + 2)) << 16; }
  void Put16(uint32_t reg, uint16_t v);
  void Put32(uint32_t reg, uint32_t v);
  // Declares BAR `n` a 32-bit non-prefetchable memory BAR of `size` bytes
  // (a power of two >= 16) at `base` (what firmware assigned).
  void DefineMemoryBar(int n, uint32_t size, uint32_t base);
  // The interrupt pin (1 = INTA#) and the line firmware routed it to.
  void DefineInterrupt(uint8_t pin, uint8_t line);
  // Adds an MSI capability (64-bit address, one vector) at `offset`,
  // linked first in the capability list.
  void AddMsiCapability(uint8_t offset);
  // After a write that changed writable bits of [reg, reg + len).
  virtual void ConfigWritten(uint32_t reg, uint32_t len) {}

 private:
  std::array<uint8_t, 256> config_{};
  std::array<uint8_t, 256> writable_{};
  std::array<uint32_t, 6> bar_size_{};
  uint8_t msi_ = 0;  // the MSI capability's offset, 0 for none
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_PCI_FUNCTION_H_
