// cmos_rtc_test.cc: the MC146818 registers as Linux's mc146818_get_time/set_time use them.
#include "vmm/cmos_rtc.h"

#include <gtest/gtest.h>

#include <vector>

namespace vbts::vmm {
namespace {

// 2026-11-26 05:43:21 UTC, a Thursday: 1795671801 seconds since the epoch
// (date -u -d '2026-11-26 05:43:21' +%s).
constexpr int64_t kNow = 1795671801;
constexpr int64_t kNs = 1000000000;

class CmosRtcTest : public ::testing::Test {
 protected:
  uint8_t Rd(uint8_t reg) {
    Out(0, reg);
    uint8_t v = 0;
    rtc_.Read(1, absl::MakeSpan(&v, 1));
    return v;
  }
  void Wr(uint8_t reg, uint8_t v) {
    Out(0, reg);
    Out(1, v);
  }
  void Out(uint16_t port, uint8_t v) { rtc_.Write(port, absl::MakeConstSpan(&v, 1)); }
  int64_t now_ = kNow * kNs;  // nanoseconds
  CmosRtc rtc_{[this] { return now_; }};
};

TEST_F(CmosRtcTest, ReadsTheHostClockInBcdAnd24HourFormLikeQemu) {
  EXPECT_EQ(Rd(0x0A), 0x26);  // UIP clear: Linux reads the time at once
  EXPECT_EQ(Rd(0x0B), 0x02);  // 24-hour, BCD
  EXPECT_EQ(Rd(0x0D), 0x80);  // valid RAM and time
  EXPECT_EQ(Rd(0x00), 0x21);
  EXPECT_EQ(Rd(0x02), 0x43);
  EXPECT_EQ(Rd(0x04), 0x05);
  EXPECT_EQ(Rd(0x06), 0x05);  // Thursday: 1 = Sunday
  EXPECT_EQ(Rd(0x07), 0x26);
  EXPECT_EQ(Rd(0x08), 0x11);
  EXPECT_EQ(Rd(0x09), 0x26);
  EXPECT_EQ(Rd(0x32), 0x20);  // century
  now_ += 39 * kNs;  // 05:44:00
  EXPECT_EQ(Rd(0x00), 0x00);
  EXPECT_EQ(Rd(0x02), 0x44);
}

TEST_F(CmosRtcTest, BinaryAnd12HourForms) {
  Wr(0x0B, 0x04);  // binary, 12-hour
  now_ += 12 * 3600 * kNs;  // 17:43:21
  EXPECT_EQ(Rd(0x00), 21);
  EXPECT_EQ(Rd(0x04), 0x80 | 5);  // 5 PM
  EXPECT_EQ(Rd(0x09), 26);
}

TEST_F(CmosRtcTest, TheGuestSetsTheClockUnderSetAndItRunsOnFromThere) {
  // Linux's mc146818_set_time: SET, the fields, clear SET.
  Wr(0x0B, 0x82);
  now_ += 100 * kNs;  // frozen while SET
  EXPECT_EQ(Rd(0x00), 0x21);
  Wr(0x09, 0x30);  // 2030
  Wr(0x08, 0x01);
  Wr(0x07, 0x02);
  Wr(0x04, 0x03);
  Wr(0x02, 0x04);
  Wr(0x00, 0x05);
  Wr(0x0B, 0x02);  // run
  EXPECT_EQ(Rd(0x00), 0x05);
  now_ += 10 * kNs;
  EXPECT_EQ(Rd(0x00), 0x15);
  EXPECT_EQ(Rd(0x02), 0x04);
  EXPECT_EQ(Rd(0x04), 0x03);
  EXPECT_EQ(Rd(0x07), 0x02);
  EXPECT_EQ(Rd(0x08), 0x01);
  EXPECT_EQ(Rd(0x09), 0x30);
  EXPECT_EQ(Rd(0x06), 0x04);  // 2030-01-02 is a Wednesday
}

TEST_F(CmosRtcTest, LeapDaysAndCenturies) {
  // Set 2000-02-29 23:59:59 (binary form) and let one second pass:
  // 2000-03-01 00:00:00, a Wednesday (date -u -d 2000-03-01 +%A).
  Wr(0x0B, 0x86);
  Wr(0x32, 20);
  Wr(0x09, 0);
  Wr(0x08, 2);
  Wr(0x07, 29);
  Wr(0x04, 23);
  Wr(0x02, 59);
  Wr(0x00, 59);
  Wr(0x0B, 0x06);
  now_ += kNs;
  EXPECT_EQ(Rd(0x00), 0);
  EXPECT_EQ(Rd(0x04), 0);
  EXPECT_EQ(Rd(0x07), 1);
  EXPECT_EQ(Rd(0x08), 3);
  EXPECT_EQ(Rd(0x09), 0);
  EXPECT_EQ(Rd(0x32), 20);
  EXPECT_EQ(Rd(0x06), 4);
  now_ -= 2 * 86400 * kNs;  // two days back through the leap day: 2000-02-28 00:00:00, a Monday
  EXPECT_EQ(Rd(0x07), 28);
  EXPECT_EQ(Rd(0x08), 2);
  EXPECT_EQ(Rd(0x06), 2);
}

TEST_F(CmosRtcTest, UpdateInProgressInTheLast244MicrosecondsOfEachSecond) {
  // kvm-unit-tests s3 waits for UIP to rise and then fall, as firmware does
  // before it reads or programs the clock.
  EXPECT_EQ(Rd(0x0A) & 0x80, 0);
  now_ += kNs - 244141;  // 244 141 ns before the next second: UIP
  EXPECT_EQ(Rd(0x0A) & 0x80, 0x80);
  now_ -= 1;
  EXPECT_EQ(Rd(0x0A) & 0x80, 0);
  now_ += 244142;  // the second has begun
  EXPECT_EQ(Rd(0x0A) & 0x80, 0);
}

TEST_F(CmosRtcTest, RegisterCAndTheAlarmThatWakesFromS3) {
  EXPECT_EQ(Rd(0x0C), 0x00);
  EXPECT_FALSE(rtc_.NsToAlarm());  // no AIE
  Wr(0x01, 0xC0);  // any second, any minute, any hour: every second
  Wr(0x03, 0xC0);
  Wr(0x05, 0xC0);
  Wr(0x0B, 0x22);  // AIE, 24-hour, BCD
  now_ += kNs / 4;
  ASSERT_TRUE(rtc_.NsToAlarm());
  EXPECT_EQ(*rtc_.NsToAlarm(), kNs * 3 / 4);  // the next second starts in 750 ms
  EXPECT_EQ(Rd(0x0C), 0x40);  // no second has ended yet; PF: 256 periods of 976.5625 us have
  now_ += kNs;
  EXPECT_EQ(Rd(0x0C), 0xF0);  // IRQF, PF (the reset rate's periods, PIE or not), AF, UF
  EXPECT_EQ(Rd(0x0C), 0x00);  // cleared by the read
  // An alarm at 05:45:00 (now 05:43:22.25): 97.75 s away.
  Wr(0x01, 0x00);
  Wr(0x03, 0x45);
  Wr(0x05, 0x05);
  EXPECT_EQ(*rtc_.NsToAlarm(), 97 * kNs + 3 * kNs / 4);
  now_ += 10 * kNs;
  EXPECT_EQ(Rd(0x0C), 0x50);  // PF and UF: PIE and UIE clear, so no IRQF
}

TEST_F(CmosRtcTest, PeriodicInterruptAtTheResetRateOf1024Hz) {
  // Register A 26H: the 32.768 kHz divider, rate 6: a period of 2^5 = 32
  // cycles, 976 562.5 ns; the test's clock starts on a second, where the
  // periods are aligned, so the first ends at 976 563 ns (rounded up).
  std::vector<bool> irq;
  rtc_.SetIrq([&irq](bool level) { irq.push_back(level); });
  EXPECT_FALSE(rtc_.NsToNextInterrupt());  // no enable
  Wr(0x0B, 0x42);                          // PIE, 24-hour
  EXPECT_EQ(rtc_.NsToNextInterrupt(), 976563);
  now_ += 976562;
  rtc_.Advance();
  EXPECT_TRUE(irq.empty());
  now_ += 1;
  rtc_.Advance();
  EXPECT_EQ(irq, std::vector<bool>{true});
  EXPECT_FALSE(rtc_.NsToNextInterrupt());  // IRQ 8 up until C is read
  EXPECT_EQ(Rd(0x0C), 0xC0);              // IRQF, PF
  EXPECT_EQ(irq, (std::vector<bool>{true, false}));
  EXPECT_EQ(rtc_.NsToNextInterrupt(), 976562);  // the second period ends at 1 953 125 ns
  // Rate 15: 2^14 cycles, 500 ms; rate 0: none.
  Wr(0x0A, 0x2F);
  EXPECT_EQ(rtc_.NsToNextInterrupt(), kNs / 2 - 976563);
  Wr(0x0A, 0x20);
  EXPECT_FALSE(rtc_.NsToNextInterrupt());
  // A divider other than 010 stops the time base.
  Wr(0x0A, 0x66);
  EXPECT_FALSE(rtc_.NsToNextInterrupt());
}

TEST_F(CmosRtcTest, UpdateEndedInterruptEachSecondAndNoneWhileSet) {
  std::vector<bool> irq;
  rtc_.SetIrq([&irq](bool level) { irq.push_back(level); });
  Wr(0x0A, 0x20);  // no periodic flag in the way
  Wr(0x0B, 0x12);  // UIE
  EXPECT_EQ(rtc_.NsToNextInterrupt(), kNs);
  now_ += kNs;
  rtc_.Advance();
  EXPECT_EQ(irq, std::vector<bool>{true});
  EXPECT_EQ(Rd(0x0C), 0x90);  // IRQF, UF
  // Under SET no update happens: no UF, no interrupt to wait for.
  Wr(0x0B, 0x92);
  EXPECT_FALSE(rtc_.NsToNextInterrupt());
  now_ += 3 * kNs;
  rtc_.Advance();
  EXPECT_EQ(Rd(0x0C), 0x00);
  // Clearing SET with the update enabled: the next second's end.
  Wr(0x0B, 0x12);
  now_ += kNs;
  rtc_.Advance();
  EXPECT_EQ(irq, (std::vector<bool>{true, false, true}));
}

TEST_F(CmosRtcTest, EnablingAFlagAlreadySetRaisesIrq8) {
  std::vector<bool> irq;
  rtc_.SetIrq([&irq](bool level) { irq.push_back(level); });
  now_ += 2 * kNs;  // UF (and PF) set, nothing enabled
  rtc_.Advance();
  EXPECT_TRUE(irq.empty());
  Wr(0x0B, 0x12);  // UIE: IRQF at once
  EXPECT_EQ(irq, std::vector<bool>{true});
  Wr(0x0B, 0x02);  // and down again without it
  EXPECT_EQ(irq, (std::vector<bool>{true, false}));
  EXPECT_EQ(Rd(0x0C), 0x50);
}

TEST_F(CmosRtcTest, AnAlarmWithAieSignalsTheChipsetsAlarmEvent) {
  int events = 0;
  rtc_.SetAlarmEvent([&events] { events++; });
  Wr(0x01, 0xC0);  // every second
  Wr(0x03, 0xC0);
  Wr(0x05, 0xC0);
  now_ += kNs;
  rtc_.Advance();
  EXPECT_EQ(events, 0);  // AIE clear: AF, no event
  Wr(0x0B, 0x22);        // AIE
  now_ += kNs;
  rtc_.Advance();
  EXPECT_EQ(events, 1);
  rtc_.Advance();  // nothing new
  EXPECT_EQ(events, 1);
}

TEST_F(CmosRtcTest, CmosRamAndReadOnlyRegisters) {
  Wr(0x40, 0x5A);
  EXPECT_EQ(Rd(0x40), 0x5A);
  Out(0, 0x80 | 0x40);  // NMI-mask bit in the index: same register
  uint8_t v = 0;
  rtc_.Read(1, absl::MakeSpan(&v, 1));
  EXPECT_EQ(v, 0x5A);
  Wr(0x0A, 0xA6);
  EXPECT_EQ(Rd(0x0A), 0x26);  // UIP is not writable
  Wr(0x0C, 0xFF);
  Wr(0x0D, 0x00);
  EXPECT_EQ(Rd(0x0C), 0x00);
  EXPECT_EQ(Rd(0x0D), 0x80);
}

}  // namespace
}  // namespace vbts::vmm
