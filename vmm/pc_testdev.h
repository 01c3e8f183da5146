// pc_testdev.h: the parts of QEMU's `-device pc-testdev` that test kernels
// (kvm-unit-tests) use to check instruction emulation: a 4-byte I/O register
// at port 0xE0 and a 64 KiB MMIO window at 0xFF000000 that reads back what
// was written (the window is served by the run loop's MMIO exits, Machine).
#ifndef VBTS_VMM_PC_TESTDEV_H_
#define VBTS_VMM_PC_TESTDEV_H_

#include <cstdint>
#include <functional>

#include "vmm/pio_bus.h"

namespace vbts::vmm {

// Ports 0xE0-0xE3 ("testdev io"): one 32-bit register, little-endian; a write
// of any size stores its bytes at port-0xE0 onwards, a read returns them. So
// `rep outsb` to 0xE0 leaves the last byte for `inb 0xE0`.
class TestdevIo : public PioDevice {
 public:
  static constexpr uint16_t kPort = 0xE0;
  static constexpr uint16_t kSize = 4;
  void Read(uint16_t offset, absl::Span<uint8_t> data) override;
  void Write(uint16_t offset, absl::Span<const uint8_t> data) override;

 private:
  uint8_t reg_[4] = {0, 0, 0, 0};
};

// Ports 0x2000-0x2017 ("testdev irq"): a write to port 0x2000+n sets ISA
// interrupt line n to (value != 0), i.e. drives IOAPIC pin n (kvm-unit-tests'
// ioapic.c raises edge and level interrupts this way). Reads return 0.
class TestdevIrq : public PioDevice {
 public:
  static constexpr uint16_t kPort = 0x2000;
  static constexpr uint16_t kSize = 24;
  explicit TestdevIrq(std::function<void(uint32_t line, bool level)> set_line) : set_line_(std::move(set_line)) {}
  void Read(uint16_t offset, absl::Span<uint8_t> data) override;
  void Write(uint16_t offset, absl::Span<const uint8_t> data) override;

 private:
  std::function<void(uint32_t, bool)> set_line_;
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_PC_TESTDEV_H_
