// pc_testdev_test.cc: the testdev I/O register as kvm-unit-tests' emulator.c uses it.
#include "vmm/pc_testdev.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "base/status_macros.h"

namespace vbts::vmm {
namespace {

TEST(TestdevIoTest, RepOutsbLeavesTheLastByte) {
  TestdevIo dev;
  PioBus bus;
  ASSERT_TRUE(bus.Register(TestdevIo::kPort, TestdevIo::kSize, &dev, "pc-testdev").ok());
  for (char c : std::string("abcdefghijklmnop")) {  // rep outsb, port 0xE0
    uint8_t b = static_cast<uint8_t>(c);
    ASSERT_TRUE(bus.Dispatch(0xE0, 1, true, absl::MakeSpan(&b, 1)).ok());
  }
  uint8_t r = 0;
  ASSERT_TRUE(bus.Dispatch(0xE0, 1, false, absl::MakeSpan(&r, 1)).ok());
  EXPECT_EQ(r, 'p');
  // A 32-bit write and byte reads at each port.
  uint8_t w[4] = {0x11, 0x22, 0x33, 0x44};
  ASSERT_TRUE(bus.Dispatch(0xE0, 4, true, absl::MakeSpan(w)).ok());
  ASSERT_TRUE(bus.Dispatch(0xE2, 1, false, absl::MakeSpan(&r, 1)).ok());
  EXPECT_EQ(r, 0x33);
}

TEST(TestdevIrqTest, PortNumberIsTheLineAndAnyNonzeroValueRaisesIt) {
  std::vector<std::pair<uint32_t, bool>> calls;
  TestdevIrq dev([&](uint32_t line, bool level) { calls.push_back({line, level}); });
  PioBus bus;
  ASSERT_TRUE(bus.Register(TestdevIrq::kPort, TestdevIrq::kSize, &dev, "pc-testdev irq").ok());
  uint8_t one = 1, zero = 0, two = 2;
  ASSERT_TRUE(bus.Dispatch(0x200E, 1, true, absl::MakeSpan(&one, 1)).ok());
  ASSERT_TRUE(bus.Dispatch(0x200E, 1, true, absl::MakeSpan(&zero, 1)).ok());
  ASSERT_TRUE(bus.Dispatch(0x2017, 1, true, absl::MakeSpan(&two, 1)).ok());
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0], (std::pair<uint32_t, bool>{14, true}));
  EXPECT_EQ(calls[1], (std::pair<uint32_t, bool>{14, false}));
  EXPECT_EQ(calls[2], (std::pair<uint32_t, bool>{23, true}));
}

}  // namespace
}  // namespace vbts::vmm
