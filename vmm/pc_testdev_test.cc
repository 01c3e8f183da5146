// pc_testdev_test.cc: the testdev I/O register as kvm-unit-tests' emulator.c uses it.
#include "vmm/pc_testdev.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace vbts::vmm
