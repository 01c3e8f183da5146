// reset_line_test.cc: which 8042 commands pull the CPU reset (QEMU's decoding).
#include "vmm/reset_line.h"

#include <gtest/gtest.h>

namespace vbts::vmm {
namespace {

TEST(ResetLineTest, PulseCommandsWithBit0ClearReset) {
  ResetLine line;
  uint8_t b = 0;
  line.Read(0, absl::MakeSpan(&b, 1));
  EXPECT_EQ(b, 0xFF);  // no controller behind the port
  for (uint8_t cmd : {0x20, 0xAD, 0xD1, 0xFF, 0xF1, 0xEE}) {
    line.Write(0, absl::MakeConstSpan(&cmd, 1));
    EXPECT_FALSE(line.reset_command()) << int{cmd};  // not a pulse of bit 0
  }
  const uint8_t fe = 0xFE;
  line.Write(0, absl::MakeConstSpan(&fe, 1));
  EXPECT_EQ(line.reset_command(), 0xFE);
  const uint8_t f0 = 0xF0;  // pulses bits 3:0, the reset among them; the first request stays
  line.Write(0, absl::MakeConstSpan(&f0, 1));
  EXPECT_EQ(line.reset_command(), 0xFE);
  ResetLine other;
  other.Write(0, absl::MakeConstSpan(&f0, 1));
  EXPECT_EQ(other.reset_command(), 0xF0);
}

}  // namespace
}  // namespace vbts::vmm
