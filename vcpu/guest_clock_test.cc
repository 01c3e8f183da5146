#include "vcpu/guest_clock.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace vbts::vcpu {
namespace {

using Now = GuestClock::Now;
using Source = GuestClock::Source;

// A 2.5 GHz TSC: 5 ticks every 2 ns of host time.
constexpr uint64_t kHz = 2'500'000'000;

TEST(GuestClockTest, HostSourceTicksAtTheTscFrequency) {
  GuestClock c(kHz, Now{1000, 0});
  EXPECT_EQ(c.Ticks(Now{1000, 0}), 0u);
  EXPECT_EQ(c.Ticks(Now{1002, 0}), 5u);  // 2 ns * 2.5 ticks/ns
  EXPECT_EQ(c.Ticks(Now{1003, 0}), 7u);  // floor(7.5)
  // One host second: 2.5 G ticks, and retired instructions do not matter.
  EXPECT_EQ(c.Ticks(Now{1000 + 1'000'000'000, 12345}), kHz);
  // An earlier host time than the start reads the start.
  EXPECT_EQ(c.Ticks(Now{10, 0}), 0u);
}

TEST(GuestClockTest, InstructionSourceTicksOncePerRetiredInstruction) {
  GuestClock c(kHz, Now{0, 0});
  c.SetSource(Source::kInstructions, Now{400, 100});  // 1000 ticks so far
  EXPECT_EQ(c.Ticks(Now{400, 100}), 1000u);
  // Host time passing changes nothing; 10^9 instructions are 10^9 ticks.
  EXPECT_EQ(c.Ticks(Now{5'000'000'000, 100}), 1000u);
  EXPECT_EQ(c.Ticks(Now{400, 100 + 1'000'000'000}), 1000u + 1'000'000'000);
  // The LAPIC's nanoseconds: 1000 ticks at 2.5 GHz are 400 ns.
  EXPECT_EQ(c.Ns(Now{400, 100}), 400u);
}

TEST(GuestClockTest, SwitchingSourcesKeepsTheValue) {
  GuestClock c(kHz, Now{0, 0});
  c.SetSource(Source::kInstructions, Now{2, 50});    // 5 ticks
  c.SetSource(Source::kHost, Now{1'000'000, 80});    // + 30 instructions = 35
  EXPECT_EQ(c.Ticks(Now{1'000'000, 80}), 35u);
  EXPECT_EQ(c.Ticks(Now{1'000'004, 0}), 45u);        // + 4 ns = 10 ticks
  c.SetSource(Source::kInstructions, Now{1'000'004, 7});
  EXPECT_EQ(c.Ticks(Now{9'999'999, 7}), 45u);
  // A retired count below the base (a caller's stale sample) reads the base.
  EXPECT_EQ(c.Ticks(Now{0, 3}), 45u);
}

TEST(GuestClockTest, TscWritesMoveTheTscButNotTheTicks) {
  GuestClock c(kHz, Now{0, 0});
  c.SetSource(Source::kInstructions, Now{0, 0});
  c.SetTsc(1'000'000, Now{0, 10});
  EXPECT_EQ(c.Tsc(Now{0, 10}), 1'000'000u);
  EXPECT_EQ(c.Tsc(Now{0, 15}), 1'000'005u);
  EXPECT_EQ(c.Ticks(Now{0, 15}), 15u);
  // A write of a smaller value moves the TSC back (SDM: a write sets the
  // counter); the ticks, and so the LAPIC's time, go on.
  c.SetTsc(3, Now{0, 20});
  EXPECT_EQ(c.Tsc(Now{0, 20}), 3u);
  EXPECT_EQ(c.Ticks(Now{0, 20}), 20u);
}

TEST(GuestClockTest, SkipToNsMovesForwardOnly) {
  GuestClock c(kHz, Now{0, 0});
  c.SetSource(Source::kInstructions, Now{0, 0});
  // 1 µs later: 2500 ticks.
  c.SkipToNs(1000, Now{0, 40});
  EXPECT_EQ(c.Ticks(Now{0, 40}), 2500u);
  EXPECT_EQ(c.Ticks(Now{0, 41}), 2501u);
  EXPECT_EQ(c.Ns(Now{0, 40}), 1000u);
  // Already past: nothing changes.
  c.SkipToNs(10, Now{0, 41});
  EXPECT_EQ(c.Ticks(Now{0, 41}), 2501u);
}

TEST(GuestClockTest, ConversionsRoundSoThatADeadlineIsReached) {
  GuestClock c(3'000'000'000 / 7, Now{0, 0});  // 428 571 428 Hz: no whole ticks per ns
  for (uint64_t ns : {0ull, 1ull, 2ull, 3ull, 7ull, 1000ull, 123'456'789ull}) {
    const uint64_t t = c.TicksOfNs(ns);
    EXPECT_GE(c.NsOfTicks(t), ns) << ns;
    if (t > 0) {
      EXPECT_LT(c.NsOfTicks(t - 1), ns) << ns;  // and it is the first such tick
    }
  }
  // Results that do not fit saturate: ticks of a slow clock are longer than
  // a nanosecond, those of a fast one shorter.
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(c.NsOfTicks(kMax), kMax);
  EXPECT_EQ(GuestClock(kHz, Now{}).TicksOfNs(kMax), kMax);
}

TEST(GuestClockTest, ZeroFrequencyIsOneGigahertz) {
  GuestClock c(0, Now{0, 0});
  EXPECT_EQ(c.hz(), 1'000'000'000u);
  EXPECT_EQ(c.Ticks(Now{1234, 0}), 1234u);
}

}  // namespace
}  // namespace vbts::vcpu
