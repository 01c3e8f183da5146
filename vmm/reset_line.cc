// reset_line.cc: decodes 8042 pulse-output-port commands into a reset request.
#include "vmm/reset_line.h"

#include <algorithm>

namespace vbts::vmm {

void ResetLine::Read(uint16_t offset, absl::Span<uint8_t> data) {
  std::fill(data.begin(), data.end(), uint8_t{0xFF});
}

void ResetLine::Write(uint16_t offset, absl::Span<const uint8_t> data) {
  if (data.empty() || command_) return;
  const uint8_t v = data[0];
  if ((v & 0xF0) == 0xF0 && !(v & 1)) command_ = v;
}

}  // namespace vbts::vmm
