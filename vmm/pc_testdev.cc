// pc_testdev.cc: QEMU pc-testdev's I/O register.
#include "vmm/pc_testdev.h"

namespace vbts::vmm {

void TestdevIo::Read(uint16_t offset, absl::Span<uint8_t> data) {
  for (size_t i = 0; i < data.size(); i++) data[i] = offset + i < kSize ? reg_[offset + i] : 0;
}

void TestdevIo::Write(uint16_t offset, absl::Span<const uint8_t> data) {
  for (size_t i = 0; i < data.size(); i++)
    if (offset + i < kSize) reg_[offset + i] = data[i];
}

void TestdevIrq::Read(uint16_t offset, absl::Span<uint8_t> data) {
  for (uint8_t& b : data) b = 0;
}

void TestdevIrq::Write(uint16_t offset, absl::Span<const uint8_t> data) {
  bool level = false;
  for (uint8_t b : data) level = level || b != 0;
  if (offset < kSize) set_line_(offset, level);
}

}  // namespace vbts::vmm
