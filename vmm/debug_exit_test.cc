// debug_exit_test.cc: unit tests for the isa-debug-exit device's exit status arithmetic (QEMU-compatible).
#include "vmm/debug_exit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/testing/status_matchers.h"

namespace vbts::vmm {
namespace {

using ::testing::ElementsAre;

struct Case {
  uint32_t value;
  uint8_t size;
  int status;
  uint64_t full;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << absl::StrFormat("{value 0x%X, size %u}", c.value, c.size);
}

class DebugExitStatusTest : public ::testing::TestWithParam<Case> {};

TEST_P(DebugExitStatusTest, StatusIsValueShiftedOrOneTruncatedTo8Bits) {
  const Case c = GetParam();
  PioBus bus;
  DebugExit dev;
  VBTS_ASSERT_OK(bus.Register(DebugExit::kPort, DebugExit::kSize, &dev, "isa-debug-exit"));
  EXPECT_FALSE(dev.exit_requested());
  EXPECT_EQ(dev.exit_status(), std::nullopt);
  std::array<uint8_t, 4> bytes{static_cast<uint8_t>(c.value), static_cast<uint8_t>(c.value >> 8),
                               static_cast<uint8_t>(c.value >> 16),
                               static_cast<uint8_t>(c.value >> 24)};
  VBTS_ASSERT_OK(bus.Dispatch(0xF4, c.size, true, absl::MakeSpan(bytes).subspan(0, c.size)));
  EXPECT_TRUE(dev.exit_requested());
  EXPECT_EQ(dev.written_value(), c.value);
  EXPECT_EQ(dev.exit_status(), c.status);
  EXPECT_EQ(dev.full_exit_code(), c.full);
}

INSTANTIATE_TEST_SUITE_P(
    Values, DebugExitStatusTest,
    ::testing::Values(Case{0x00, 1, 0x01, 0x1}, Case{0x01, 1, 0x03, 0x3},
                      Case{0x7F, 1, 0xFF, 0xFF}, Case{0x80, 1, 0x01, 0x101},
                      Case{0x31, 1, 0x63, 0x63}, Case{0x1234, 2, 0x69, 0x2469},
                      Case{0xFFFFFFFF, 4, 0xFF, 0x1FFFFFFFF}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrFormat("Value0x%X_Size%u", info.param.value, info.param.size);
    });

TEST(DebugExitTest, WriteAtNonZeroOffsetAlsoExits) {
  DebugExit dev;
  const uint8_t v = 0x10;
  dev.Write(2, absl::MakeConstSpan(&v, 1));
  EXPECT_EQ(dev.written_value(), 0x10u);
  EXPECT_EQ(dev.exit_status(), 0x21);
}

TEST(DebugExitTest, FirstWriteWins) {
  DebugExit dev;
  const uint8_t a = 1, b = 2;
  dev.Write(0, absl::MakeConstSpan(&a, 1));
  dev.Write(0, absl::MakeConstSpan(&b, 1));
  EXPECT_EQ(dev.exit_status(), 3);
}

TEST(DebugExitTest, ReadsReturnZeroAndDoNotExit) {
  DebugExit dev;
  std::array<uint8_t, 4> buf{0xAA, 0xAA, 0xAA, 0xAA};
  dev.Read(0, absl::MakeSpan(buf));
  EXPECT_THAT(buf, ElementsAre(0, 0, 0, 0));
  EXPECT_FALSE(dev.exit_requested());
}

}  // namespace
}  // namespace vbts::vmm
