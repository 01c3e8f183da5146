// pci_host.h: PCI configuration mechanism #1 (ports 0xCF8-0xCFF) with one host
// bridge, the way a PC guest finds out that it has a PCI bus.
#ifndef VBTS_VMM_PCI_HOST_H_
#define VBTS_VMM_PCI_HOST_H_

#include <array>
#include <cstdint>
#include <optional>

#include "vmm/pci_function.h"
#include "vmm/pio_bus.h"

namespace vbts::vmm {

// PCI Local Bus Specification 3.0, 3.2.2.3.2 (configuration mechanism #1):
// a 32-bit write to CONFIG_ADDRESS (0xCF8) latches enable (bit 31), bus
// (23:16), device (15:11), function (10:8) and register (7:2); an access of
// any size to CONFIG_DATA (0xCFC-0xCFF) then reaches that function's
// configuration space at register + (port - 0xCFC). Byte and word accesses
// to 0xCF8-0xCFB are not configuration cycles (Linux's probe writes a byte
// to 0xCFB and expects the latched address to stay). Without the enable bit,
// or for any function but 00:00.0, reads return all ones (no device answers)
// and writes go nowhere.
//
// 00:00.0 is a host bridge with QEMU's i440FX identity (what `qemu -kernel`
// guests see): vendor 8086H, device 1237H, revision 02H, class 060000H
// (bridge, host), header type 00H; every other register reads 0 and writes
// are ignored (vbts has no PAM or SMRAM to steer, and no device behind the
// bridge). Linux's type-1 probe (arch/x86/pci/direct.c, pci_sanity_check
// looks for a host bridge on bus 0) then finds PCI instead of "PCI: Fatal:
// No config space access function found".
//
// Other functions on bus 0 are the devices --device adds (Attach); their
// configuration spaces are theirs (vmm/pci_function.h).
class PciHost : public PioDevice {
 public:
  static constexpr uint16_t kPort = 0xCF8;
  static constexpr uint16_t kSize = 8;
  static constexpr uint32_t kEnable = 1u << 31;

  PciHost();
  void Read(uint16_t offset, absl::Span<uint8_t> data) override;
  void Write(uint16_t offset, absl::Span<const uint8_t> data) override;

  uint32_t config_address() const { return address_; }
  // The configuration register a CONFIG_DATA access at `offset` (4-7)
  // reaches: CONFIG_ADDRESS's register, plus the port's offset in the
  // dword, plus CONFIG_ADDRESS bits 1:0 as QEMU adds them
  // (hw/pci/pci_host.c: config_reg | (addr & 3)); kvm-unit-tests'
  // pci_config_read*/write* put a register's low bits there and access
  // 0xCFC.
  uint32_t Register(uint16_t offset) const { return ((address_ & 0xFC) | low_bits_) + (offset - 4u); }
  // Puts `function` at device:function `devfn` of bus 0 (not 0: the bridge).
  void Attach(uint8_t devfn, PciFunction* function) { functions_[devfn] = function; }

 private:
  // The configuration space byte at `reg` of the function CONFIG_ADDRESS
  // names (0xFF where no function answers).
  uint8_t ConfigByte(uint32_t reg) const;
  // The device:function of bus 0 CONFIG_ADDRESS names with its enable bit
  // set; nothing for another bus or without the enable bit.
  std::optional<uint8_t> Devfn() const;
  // The attached function CONFIG_ADDRESS names, if any (not the bridge).
  PciFunction* Addressed() const;

  uint32_t address_ = 0;
  uint32_t low_bits_ = 0;  // CONFIG_ADDRESS bits 1:0 as written (they read 0)
  std::array<uint8_t, 256> bridge_{};
  std::array<PciFunction*, 256> functions_{};
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_PCI_HOST_H_
