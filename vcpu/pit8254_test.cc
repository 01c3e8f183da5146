#include "vcpu/pit8254.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace vbts::vcpu {
namespace {

// Nanoseconds of `clocks` input clocks at 1.193182 MHz, rounded up.
uint64_t Ns(uint64_t clocks) { return (clocks * 1'000'000'000 + kPitHz - 1) / kPitHz; }

// Channel `ch`: control word (LSB then MSB, `mode`), then the count.
void Program(Pit8254& p, int ch, int mode, uint16_t count, uint64_t now) {
  p.Write(0x43, static_cast<uint8_t>((ch << 6) | (3 << 4) | (mode << 1)), now);
  p.Write(0x40 + ch, static_cast<uint8_t>(count), now);
  p.Write(0x40 + ch, static_cast<uint8_t>(count >> 8), now);
}

TEST(Pit8254Test, NothingCountsBeforeItIsProgrammed) {
  Pit8254 p;
  EXPECT_EQ(p.Advance(10'000'000'000), 0u);
  EXPECT_EQ(p.NextEdgeNs(0), std::nullopt);
  EXPECT_EQ(p.Read(0x43, 0), 0xFF);  // write only
  EXPECT_EQ(p.Read(0x44, 0), 0xFF);
}

TEST(Pit8254Test, RateGeneratorInterruptsOncePerPeriod) {
  // Mode 2, count 11932: 100 Hz (the period is 11932 / 1.193182 MHz = 10.0001 ms).
  Pit8254 p;
  Program(p, 0, 2, 11932, 1000);
  EXPECT_EQ(p.NextEdgeNs(1000), 1000 + Ns(11932));
  EXPECT_EQ(p.Advance(1000 + Ns(11932) - 1), 0u);
  EXPECT_EQ(p.Advance(1000 + Ns(11932)), 1u);
  EXPECT_EQ(p.NextEdgeNs(1000 + Ns(11932)), 1000 + Ns(2 * 11932));
  // Ten periods later at once: ten edges, reported together.
  EXPECT_EQ(p.Advance(1000 + Ns(11 * 11932)), 10u);
  // The count runs down from 11932 and reloads.
  EXPECT_EQ(p.Read(0x40, 1000 + Ns(11 * 11932 + 100)) | p.Read(0x40, 1000 + Ns(11 * 11932 + 100)) << 8, 11932 - 100);
}

TEST(Pit8254Test, ModeZeroInterruptsOnceAtTheTerminalCount) {
  Pit8254 p;
  Program(p, 0, 0, 1000, 0);
  EXPECT_FALSE(p.Out(0, Ns(999)));
  EXPECT_EQ(p.Advance(Ns(999)), 0u);
  EXPECT_EQ(p.Advance(Ns(1000)), 1u);
  EXPECT_TRUE(p.Out(0, Ns(1000)));
  EXPECT_EQ(p.NextEdgeNs(Ns(1000)), std::nullopt);
  EXPECT_EQ(p.Advance(Ns(100000)), 0u);
  // A new count starts it again.
  p.Write(0x40, 0x10, Ns(100000));
  p.Write(0x40, 0x00, Ns(100000));
  EXPECT_EQ(p.NextEdgeNs(Ns(100000)), Ns(100000) + Ns(16));
}

TEST(Pit8254Test, AControlWordStopsChannelZeroUntilItsCount) {
  Pit8254 p;
  Program(p, 0, 2, 100, 0);
  p.Write(0x43, 0x34, Ns(50));  // channel 0, LSB/MSB, mode 2: no count yet
  EXPECT_EQ(p.Advance(Ns(1000)), 0u);
  EXPECT_EQ(p.NextEdgeNs(Ns(1000)), std::nullopt);
}

TEST(Pit8254Test, LatchesAndReadBack) {
  Pit8254 p;
  Program(p, 2, 0, 0x1234, 0);
  // Counter latch: the count at the latch, whenever it is read.
  p.Write(0x43, 0x80, Ns(0x34));  // channel 2, latch
  EXPECT_EQ(p.Read(0x42, Ns(0x200)), 0x00);
  EXPECT_EQ(p.Read(0x42, Ns(0x200)), 0x12);
  // Read-back of channel 2's status (bit 4 = 0) and count (bit 5 = 0):
  // status first: output low (mode 0 before the terminal count), LSB/MSB
  // (3 << 4), mode 0, binary.
  p.Write(0x43, 0xC8, Ns(0x1000));
  EXPECT_EQ(p.Read(0x42, Ns(0x1000)), 0x30);
  EXPECT_EQ(p.Read(0x42, Ns(0x1200)), 0x34);  // 0x1234 - 0x1000, latched
  EXPECT_EQ(p.Read(0x42, Ns(0x1200)), 0x02);
  // Mode 6 is mode 2, 7 is 3.
  p.Write(0x43, 0x1C, 0);  // channel 0, LSB only, mode 6
  p.Write(0x43, 0xE2, 0);  // read-back status of channel 0
  EXPECT_EQ(p.Read(0x40, 0) & 0x3F, (1 << 4) | (2 << 1));
}

TEST(Pit8254Test, PortBGatesChannelTwoAndShowsItsOutput) {
  // Linux's PIT calibration: gate low, mode 0 count on channel 2, gate
  // high, poll port 61H bit 5.
  Pit8254 p;
  p.Write(0x61, 0x00, 0);
  Program(p, 2, 0, 0xFFFF, 0);
  p.Write(0x61, 0x01, 0);
  EXPECT_EQ(p.Read(0x61, Ns(100)) & 0x21, 0x01);
  EXPECT_EQ(p.Read(0x61, Ns(0xFFFF)) & 0x21, 0x21);
  // Bit 4 toggles at every read; bit 1 is the speaker enable.
  const uint8_t a = p.Read(0x61, 0), b = p.Read(0x61, 0);
  EXPECT_EQ((a ^ b) & 0x10, 0x10);
  p.Write(0x61, 0x03, 0);
  EXPECT_EQ(p.Read(0x61, 0) & 0x02, 0x02);
  EXPECT_TRUE(p.speaker_data_on());
  // Mode 2 restarts on a rising gate.
  Program(p, 2, 2, 100, 0);
  p.Write(0x61, 0x00, Ns(50));
  p.Write(0x61, 0x01, Ns(50));
  p.Write(0x43, 0x80, Ns(60));
  EXPECT_EQ(p.Read(0x42, Ns(60)) | p.Read(0x42, Ns(60)) << 8, 90);
}

TEST(Pit8254Test, StateMovesWithoutReplayingOldEdges) {
  Pit8254 p;
  Program(p, 0, 3, 1000, 0);
  std::array<PitChannelState, 3> s = p.GetState();
  EXPECT_EQ(s[0].mode, 3);
  EXPECT_EQ(s[0].count, 1000u);
  Pit8254 q;
  q.SetState(s, Ns(5500));
  // Five periods passed before the move: only the sixth is new.
  EXPECT_EQ(q.Advance(Ns(5500)), 0u);
  EXPECT_EQ(q.NextEdgeNs(Ns(5500)), Ns(6000));
  EXPECT_EQ(q.Advance(Ns(6000)), 1u);
  // A load time before the clock's 0 (KVM's, converted): still counted from it.
  std::array<PitChannelState, 3> early = s;
  early[0].count_load_time = -static_cast<int64_t>(Ns(500));
  q.SetState(early, 0);
  EXPECT_EQ(q.NextEdgeNs(0), Ns(1000) - Ns(500));
  // KVM's unprogrammed channels (mode FFH) stay silent.
  std::array<PitChannelState, 3> k{};
  for (auto& c : k) c.mode = 0xFF;
  q.SetState(k, 0);
  EXPECT_EQ(q.NextEdgeNs(0), std::nullopt);
}

}  // namespace
}  // namespace vbts::vcpu
