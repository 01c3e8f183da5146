// pio_bus_test.cc: unit tests for PioBus registration, dispatch, boundary splitting and unclaimed-port counts.
#include "vmm/pio_bus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "base/status_macros.h"
#include "base/testing/status_matchers.h"

namespace vbts::vmm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::vbts::testing::StatusIs;

// Records every access; reads return offset+0x10+i.
class RecordingDevice : public PioDevice {
 public:
  struct Access {
    bool write;
    uint16_t offset;
    std::vector<uint8_t> bytes;
    bool operator==(const Access&) const = default;
  };
  void Read(uint16_t offset, absl::Span<uint8_t> data) override {
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(0x10 + offset + i);
    log.push_back({false, offset, std::vector<uint8_t>(data.begin(), data.end())});
  }
  void Write(uint16_t offset, absl::Span<const uint8_t> data) override {
    log.push_back({true, offset, std::vector<uint8_t>(data.begin(), data.end())});
  }
  std::vector<Access> log;
};

TEST(PioBusTest, RejectsOverlapNamingBothDevices) {
  PioBus bus;
  RecordingDevice a, b;
  VBTS_ASSERT_OK(bus.Register(0x3F8, 8, &a, "com1"));
  EXPECT_THAT(bus.Register(0x3FF, 2, &b, "probe"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "pio: device \"probe\" ports [0x03ff, 0x0401) overlap device \"com1\" "
                       "ports [0x03f8, 0x0400)"));
  VBTS_EXPECT_OK(bus.Register(0x400, 1, &b, "adjacent"));
  VBTS_EXPECT_OK(bus.Register(0x3F7, 1, &b, "below"));
}

TEST(PioBusTest, RejectsZeroLengthNullAndWrap) {
  PioBus bus;
  RecordingDevice a;
  EXPECT_THAT(bus.Register(0x80, 0, &a, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "pio: device \"x\" at port 0x0080 has length 0, must be >= 1"));
  EXPECT_THAT(bus.Register(0x80, 1, nullptr, "y"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is null")));
  EXPECT_THAT(bus.Register(0xFFFF, 2, &a, "z"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "pio: device \"z\" ports [0xffff, 0x10001) pass the last port 0xffff"));
  VBTS_EXPECT_OK(bus.Register(0xFFFF, 1, &a, "last"));
}

TEST(PioBusTest, DispatchesWholeAccessWithOffset) {
  PioBus bus;
  RecordingDevice dev;
  VBTS_ASSERT_OK(bus.Register(0x100, 8, &dev, "dev"));
  std::array<uint8_t, 4> buf{};
  VBTS_ASSERT_OK(bus.Dispatch(0x102, 4, false, absl::MakeSpan(buf)));
  EXPECT_THAT(buf, ElementsAre(0x12, 0x13, 0x14, 0x15));
  std::array<uint8_t, 2> w{0xAB, 0xCD};
  VBTS_ASSERT_OK(bus.Dispatch(0x106, 2, true, absl::MakeSpan(w)));
  ASSERT_EQ(dev.log.size(), 2u);
  EXPECT_EQ(dev.log[1], (RecordingDevice::Access{true, 6, {0xAB, 0xCD}}));
  EXPECT_TRUE(bus.unclaimed_ports().empty());
  EXPECT_EQ(bus.DeviceAt(0x107), "dev");
  EXPECT_EQ(bus.DeviceAt(0x108), std::nullopt);
}

TEST(PioBusTest, UnclaimedReadsAllOnesAndCountsPerPort) {
  PioBus bus;
  std::array<uint8_t, 4> buf{};
  VBTS_ASSERT_OK(bus.Dispatch(0x80, 4, false, absl::MakeSpan(buf), 0x1000));
  EXPECT_THAT(buf, ElementsAre(0xFF, 0xFF, 0xFF, 0xFF));
  std::array<uint8_t, 1> b{0x55};
  VBTS_ASSERT_OK(bus.Dispatch(0x80, 1, true, absl::MakeSpan(b), 0x2000));
  VBTS_ASSERT_OK(bus.Dispatch(0x80, 1, true, absl::MakeSpan(b)));
  VBTS_ASSERT_OK(bus.Dispatch(0x61, 1, false, absl::MakeSpan(b)));
  EXPECT_EQ(b[0], 0xFF);
  EXPECT_THAT(bus.unclaimed_ports(),
              ElementsAre(UnclaimedPort{0x61, 1, 0, std::nullopt},
                          UnclaimedPort{0x80, 1, 2, 0x1000}));
}

TEST(PioBusTest, BoundarySpanningAccessIsSplitIntoBytes) {
  PioBus bus;
  RecordingDevice a, b;
  VBTS_ASSERT_OK(bus.Register(0x200, 2, &a, "a"));
  VBTS_ASSERT_OK(bus.Register(0x203, 1, &b, "b"));
  std::array<uint8_t, 4> buf{};
  VBTS_ASSERT_OK(bus.Dispatch(0x201, 4, false, absl::MakeSpan(buf)));
  // 0x201 -> a offset 1, 0x202 unclaimed, 0x203 -> b offset 0, 0x204 unclaimed.
  EXPECT_THAT(buf, ElementsAre(0x11, 0xFF, 0x10, 0xFF));
  EXPECT_EQ(a.log, (std::vector<RecordingDevice::Access>{{false, 1, {0x11}}}));
  EXPECT_EQ(b.log, (std::vector<RecordingDevice::Access>{{false, 0, {0x10}}}));
  EXPECT_THAT(bus.unclaimed_ports(),
              ElementsAre(UnclaimedPort{0x202, 1, 0, std::nullopt},
                          UnclaimedPort{0x204, 1, 0, std::nullopt}));
}

TEST(PioBusTest, AccessPastPortFfffReadsOnesForMissingBytes) {
  PioBus bus;
  RecordingDevice a;
  VBTS_ASSERT_OK(bus.Register(0xFFFF, 1, &a, "last"));
  std::array<uint8_t, 2> buf{};
  VBTS_ASSERT_OK(bus.Dispatch(0xFFFF, 2, false, absl::MakeSpan(buf)));
  EXPECT_THAT(buf, ElementsAre(0x10, 0xFF));
  EXPECT_THAT(bus.unclaimed_ports(), ElementsAre(UnclaimedPort{0xFFFF, 1, 0, std::nullopt}));
}

TEST(PioBusTest, RejectsBadSizes) {
  PioBus bus;
  std::array<uint8_t, 4> buf{};
  EXPECT_THAT(bus.Dispatch(0x80, 3, false, absl::MakeSpan(buf).subspan(0, 3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "pio: access at port 0x0080 has size 3, must be 1, 2 or 4"));
  EXPECT_THAT(bus.Dispatch(0x80, 2, false, absl::MakeSpan(buf)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "pio: access at port 0x0080 has size 2 but a 4-byte buffer"));
  EXPECT_TRUE(bus.unclaimed_ports().empty());
}

TEST(PioBusTest, TracksAtMost64UnclaimedPorts) {
  PioBus bus;
  std::array<uint8_t, 1> b{};
  for (uint16_t p = 0; p < 70; ++p) VBTS_ASSERT_OK(bus.Dispatch(p, 1, false, absl::MakeSpan(b)));
  EXPECT_EQ(bus.unclaimed_ports().size(), 64u);
  EXPECT_EQ(bus.untracked_unclaimed_accesses(), 6u);
}

}  // namespace
}  // namespace vbts::vmm
