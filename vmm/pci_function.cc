// pci_function.cc: see pci_function.h.
#include "vmm/pci_function.h"

namespace vbts::vmm {
namespace {

constexpr uint32_t kCfgCommand = 0x04, kCfgStatus = 0x06, kCfgBar0 = 0x10, kCfgCapabilities = 0x34,
                   kCfgInterruptLine = 0x3C, kCfgInterruptPin = 0x3D;
constexpr uint16_t kStatusCapabilityList = 1u << 4;
constexpr uint8_t kCapabilityMsi = 0x05;
constexpr uint16_t kMsiEnable = 1u << 0, kMsi64Bit = 1u << 7;

}  // namespace

PciFunction::PciFunction(uint16_t vendor, uint16_t device, uint8_t revision, uint32_t class_code) {
  Put16(0x00, vendor);
  Put16(0x02, device);
  Put32(0x08, class_code << 8 | revision);
  Put16(kCfgCommand, 0);
  writable_[kCfgCommand] = kCommandIo | kCommandMemory | kCommandMaster;
  writable_[kCfgCommand + 1] = kCommandIntxDisable >> 8;
}

void PciFunction::Put16(uint32_t reg, uint16_t v) {
  config_[reg] = static_cast<uint8_t>(v);
  config_[reg + 1] = static_cast<uint8_t>(v >> 8);
}

void PciFunction::Put32(uint32_t reg, uint32_t v) {
  Put16(reg, static_cast<uint16_t>(v));
  Put16(reg + 2, static_cast<uint16_t>(v >> 16));
}

void PciFunction::DefineMemoryBar(int n, uint32_t size, uint32_t base) {
  const uint32_t reg = kCfgBar0 + 4 * static_cast<uint32_t>(n);
  bar_size_[n] = size;
  // Type 00 (32-bit), not prefetchable: bits 3:0 read 0; the base bits
  // below the size read 0 too.
  const uint32_t mask = ~(size - 1);
  Put32(reg, base & mask);
  for (int i = 0; i < 4; i++) writable_[reg + i] = static_cast<uint8_t>(mask >> (8 * i));
}

void PciFunction::DefineInterrupt(uint8_t pin, uint8_t line) {
  config_[kCfgInterruptPin] = pin;
  config_[kCfgInterruptLine] = line;
  writable_[kCfgInterruptLine] = 0xFF;
}

void PciFunction::AddMsiCapability(uint8_t offset) {
  msi_ = offset;
  config_[offset] = kCapabilityMsi;
  config_[offset + 1] = config_[kCfgCapabilities];  // the next capability
  config_[kCfgCapabilities] = offset;
  Put16(kCfgStatus, Get16(kCfgStatus) | kStatusCapabilityList);
  // Message control: 64-bit capable, one vector requested (bits 3:1 = 0)
  // and allowed (bits 6:4 are writable but one vector is all there is).
  Put16(offset + 2, kMsi64Bit);
  writable_[offset + 2] = kMsiEnable;
  // Message address (dword aligned), upper address, data (16 bits).
  writable_[offset + 4] = 0xFC;
  for (uint32_t i = 5; i < 12; i++) writable_[offset + i] = 0xFF;
  writable_[offset + 12] = writable_[offset + 13] = 0xFF;
}

void PciFunction::WriteConfig(uint32_t reg, absl::Span<const uint8_t> data) {
  reg &= 0xFF;
  bool changed = false;
  for (size_t i = 0; i < data.size() && reg + i < config_.size(); i++) {
    uint8_t& b = config_[reg + i];
    const uint8_t next = static_cast<uint8_t>((b & ~writable_[reg + i]) | (data[i] & writable_[reg + i]));
    changed |= next != b;
    b = next;
  }
  if (changed) ConfigWritten(reg, static_cast<uint32_t>(data.size()));
}

std::optional<uint64_t> PciFunction::MemoryBar(int n) const {
  if (!memory_enabled() || bar_size_[n] == 0) return std::nullopt;
  return Get32(kCfgBar0 + 4 * static_cast<uint32_t>(n)) & ~0xFu;
}

std::optional<MsiMessage> PciFunction::Msi() const {
  if (msi_ == 0 || !(Get16(msi_ + 2) & kMsiEnable)) return std::nullopt;
  return MsiMessage{Get32(msi_ + 4) | static_cast<uint64_t>(Get32(msi_ + 8)) << 32, Get16(msi_ + 12)};
}

}  // namespace vbts::vmm
