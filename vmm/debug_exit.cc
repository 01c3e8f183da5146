// debug_exit.cc: records the guest's isa-debug-exit request and derives QEMU's exit status from it.
#include "vmm/debug_exit.h"

#include <algorithm>

namespace vbts::vmm {

void DebugExit::Read(uint16_t offset, absl::Span<uint8_t> data) {
  std::fill(data.begin(), data.end(), uint8_t{0});
}

void DebugExit::Write(uint16_t offset, absl::Span<const uint8_t> data) {
  if (value_.has_value()) return;
  uint32_t v = 0;
  for (size_t i = 0; i < data.size() && i < 4; ++i) v |= uint32_t{data[i]} << (8 * i);
  value_ = v;
}

std::optional<uint64_t> DebugExit::full_exit_code() const {
  if (!value_.has_value()) return std::nullopt;
  return (uint64_t{*value_} << 1) | 1;
}

std::optional<int> DebugExit::exit_status() const {
  if (!value_.has_value()) return std::nullopt;
  return static_cast<int>(*full_exit_code() & 0xFF);
}

}  // namespace vbts::vmm
