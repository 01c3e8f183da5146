// pci_host.cc: configuration mechanism #1 and the host bridge's registers.
#include "vmm/pci_host.h"

namespace vbts::vmm {

PciHost::PciHost() {
  const auto put16 = [&](int off, uint16_t v) {
    bridge_[off] = static_cast<uint8_t>(v);
    bridge_[off + 1] = static_cast<uint8_t>(v >> 8);
  };
  put16(0x00, 0x8086);  // vendor: Intel
  put16(0x02, 0x1237);  // device: 82441FX (i440FX PMC)
  bridge_[0x08] = 0x02;  // revision
  bridge_[0x0B] = 0x06;  // class: bridge; subclass 0x0A = 0 (host), prog-if 0x09 = 0
  bridge_[0x0E] = 0x00;  // header type 0, single function
}

std::optional<uint8_t> PciHost::Devfn() const {
  if (!(address_ & kEnable) || ((address_ >> 16) & 0xFF) != 0) return std::nullopt;
  return static_cast<uint8_t>(address_ >> 8);
}

PciFunction* PciHost::Addressed() const {
  std::optional<uint8_t> devfn = Devfn();
  return devfn ? functions_[*devfn] : nullptr;
}

uint8_t PciHost::ConfigByte(uint32_t reg) const {
  if (Devfn() == 0) return bridge_[reg & 0xFF];
  const PciFunction* f = Addressed();
  return f ? f->ConfigByte(reg) : 0xFF;
}

void PciHost::Read(uint16_t offset, absl::Span<uint8_t> data) {
  if (offset < 4) {
    // CONFIG_ADDRESS reads back as latched (a dword read); narrower reads
    // are no configuration access: nothing answers.
    for (size_t i = 0; i < data.size(); i++)
      data[i] = data.size() == 4 && offset == 0 ? static_cast<uint8_t>(address_ >> (8 * i)) : 0xFF;
    return;
  }
  const uint32_t reg = Register(offset);
  for (size_t i = 0; i < data.size(); i++) data[i] = ConfigByte(reg + static_cast<uint32_t>(i));
}

void PciHost::Write(uint16_t offset, absl::Span<const uint8_t> data) {
  if (offset == 0 && data.size() == 4) {
    // Bits 1:0 are reserved and read as 0 (PCI 3.0 3.2.2.3.2), as are
    // 30:24 on QEMU's host bridges.
    const uint32_t v = data[0] | (data[1] << 8) | (data[2] << 16) | (uint32_t{data[3]} << 24);
    address_ = v & 0x80FFFFFCu;
    low_bits_ = v & 3;
  }
  // Configuration writes reach an attached function; the bridge's
  // registers are read-only here.
  if (offset >= 4) {
    if (PciFunction* f = Addressed()) f->WriteConfig(Register(offset), data);
  }
}

}  // namespace vbts::vmm
