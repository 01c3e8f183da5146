// cmos_rtc.h: the PC's MC146818 real-time clock and CMOS RAM at ports 0x70/0x71,
// as QEMU's mc146818rtc presents it to a guest that reads the time of day.
#ifndef VBTS_VMM_CMOS_RTC_H_
#define VBTS_VMM_CMOS_RTC_H_

#include <cstdint>
#include <ctime>
#include <functional>
#include <optional>

#include "vmm/pio_bus.h"

namespace vbts::vmm {

// Port 0x70 selects a register (bits 6:0; bit 7 is the NMI mask, kept and
// otherwise ignored: vbts has no NMI sources behind it), port 0x71 reads or
// writes it (MC146818A datasheet; QEMU hw/rtc/mc146818rtc.c):
//   00H-09H  seconds, alarm seconds, minutes, alarm minutes, hours, alarm
//            hours, day of week (1 = Sunday), day of month, month, year (2 digits)
//            in BCD unless register B's DM (bit 2) is set, hours in 24-hour
//            form unless B's 24/12 (bit 1) is clear (then 1-12, bit 7 = PM)
//   0AH      A: divider and rate, R/W except UIP (bit 7), which reads 1 in the
//            last 244 us of each second (8 cycles of 32.768 kHz before the
//            update, as QEMU's rtc_update_in_progress); the rate (bits 3:0)
//            sets the periodic interrupt's period with the 32.768 kHz divider
//            (bits 6:4 = 010): 0 none, 1 and 2 3.90625 and 7.8125 ms, 3-15
//            2^(rate-1) cycles (122.07 us to 500 ms; 6, the reset value, 976.5625 us)
//   0BH      B: R/W; SET (bit 7) freezes the time for the guest to write it;
//            clearing SET starts the clock from what was written
//   0CH      C: interrupt flags, cleared by the read: UF (bit 4) when a second
//            has ended since the last read, AF (bit 5) when one of those seconds
//            matched the alarm (01H/03H/05H; C0H-FFH in a field: any value), PF
//            (bit 6) when a period of the periodic interrupt ended (with or
//            without its enable, as the datasheet sets it), IRQF (bit 7) when a
//            flag is set whose enable (B bits 6, 5, 4: PIE, AIE, UIE) is. IRQ 8
//            (SetIrq) is high while IRQF is set, from the event (Advance, or a
//            write of B enabling a set flag) until the read of C, as QEMU's
//            rtc_irq; the alarm also wakes the machine from S3 (vmm/acpi_pm.h).
//            While SET is on no update happens: no UF or AF
//   0DH      D: VRT (bit 7, valid RAM and time) always set, read-only
//   32H      century in BCD/binary as the other fields (the ACPI FADT's usual
//            century register, QEMU's too)
//   others   CMOS RAM, R/W, zero at reset
// Reset state as QEMU's: A = 26H (32.768 kHz, 1024 Hz), B = 02H (24-hour, BCD),
// the time of the host clock (QEMU's default `-rtc base=utc`).
// The clock is `now` (nanoseconds since the epoch, UTC: CLOCK_REALTIME) plus
// the offset the guest set, in whole seconds; `now` is injectable for tests.
class CmosRtc : public PioDevice {
 public:
  static constexpr uint16_t kPort = 0x70;
  static constexpr uint16_t kSize = 2;

  explicit CmosRtc(std::function<int64_t()> now_ns = nullptr);

  void Read(uint16_t offset, absl::Span<uint8_t> data) override;
  void Write(uint16_t offset, absl::Span<const uint8_t> data) override;

  // With the alarm interrupt enabled (register B bit 5): how many
  // nanoseconds from now until the start of the next second that matches the
  // alarm (at most a day ahead); nullopt without AIE or while SET.
  std::optional<int64_t> NsToAlarm() const;

  // IRQ 8's level (IRQF), reported at each change.
  void SetIrq(std::function<void(bool)> irq) { irq_ = std::move(irq); }
  // Called when an alarm fires with AIE set (the chipset's RTC_STS, vmm/acpi_pm.h).
  void SetAlarmEvent(std::function<void()> alarm) { alarm_ = std::move(alarm); }
  // Takes the flags of the events up to now; raises IRQ 8 for an enabled one.
  void Advance();
  // Nanoseconds from now until the next event whose interrupt is enabled
  // (PIE, UIE, AIE), if any: the machine's run loop wakes the guest then.
  std::optional<int64_t> NsToNextInterrupt() const;

 private:
  uint8_t ReadReg(uint8_t reg);
  uint8_t ReadTimeField(uint8_t reg, const std::tm& tm) const;
  void WriteReg(uint8_t reg, uint8_t value);
  int64_t NowNs() const;
  int64_t HostSeconds() const;  // NowNs in whole seconds
  int64_t Now() const;          // the guest's clock, whole seconds
  bool AlarmMatches(int64_t t) const;
  // Adds the flags of the events since the last call to pending_.
  void Accumulate();
  // IRQ 8 as IRQF says now.
  void UpdateIrq();
  uint8_t Encode(int v) const;   // binary or BCD per register B
  int Decode(uint8_t v) const;
  std::tm Time() const;          // the guest's time of day (frozen while SET)

  std::function<int64_t()> now_;
  int64_t offset_ = 0;          // guest time - host time, seconds
  uint8_t index_ = 0;
  uint8_t ram_[128] = {};
  std::tm frozen_{};            // the time being written while SET
  int64_t flags_seen_ = 0;      // the guest second UF and AF were last taken at
  int64_t periods_seen_ = 0;    // the host ns the periodic flag was last taken at
  uint8_t pending_ = 0;         // UF, AF, PF since the last read of C
  bool irq_level_ = false;
  std::function<void(bool)> irq_;
  std::function<void()> alarm_;
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_CMOS_RTC_H_
