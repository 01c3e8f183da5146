// pc_testdev.h: the parts of QEMU's `-device pc-testdev` that test kernels
// (kvm-unit-tests) use to check instruction emulation: a 4-byte I/O register
// at port 0xE0 and a 64 KiB MMIO window at 0xFF000000 that reads back what
// was written (the window is served by the run loop's MMIO exits, Machine).
#ifndef VBTS_VMM_PC_TESTDEV_H_
#define VBTS_VMM_PC_TESTDEV_H_

#include <cstdint>

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

}  // namespace vbts::vmm

#endif  // VBTS_VMM_PC_TESTDEV_H_
