// acpi_pm.h: the ACPI fixed-hardware registers the FADT points at
// (vmm/acpi_tables.h): PM1a event and control blocks and the PM timer.
#ifndef VBTS_VMM_ACPI_PM_H_
#define VBTS_VMM_ACPI_PM_H_

#include <cstdint>
#include <functional>
#include <utility>

#include "vmm/pio_bus.h"

namespace vbts::vmm {

// Ports kAcpiPmBase + (ACPI 6.4 4.8):
//   0-1  PM1_STS: write 1 to clear; TMR_STS (bit 0) is set when the timer's
//        bit 23 toggles (computed when read), RTC_STS (bit 10) when the RTC's
//        alarm fires with its interrupt enabled (RtcAlarm: ICH's "RTC_STS is
//        set by hardware when the RTC generates an alarm"), WAK_STS (bit 15)
//        on the wake from S3
//   2-3  PM1_EN: read/write; RTC_EN (bit 10) with RTC_STS raises the SCI
//        (SetSci: level, held until the status is cleared or the enable
//        dropped; the MADT makes IRQ 9 level, active high); TMR_EN raises none
//   4-5  PM1_CNT: SCI_EN (bit 0) reads 1 (no SMI command port: ACPI mode
//        from reset); SLP_TYP (12:10) read/write; writing SLP_EN (bit 13,
//        reads 0) with SLP_TYP = kAcpiS5SlpTyp requests soft-off (S5, the
//        DSDT's \_S5): the run ends (status 0, docs/cli.md); with
//        kAcpiS3SlpTyp, suspend to RAM (S3: TakeSuspend, then Woke sets
//        PM1_STS.WAK_STS, bit 15); other sleep types change nothing
//   8-11 PM_TMR: 24-bit count of a 3.579545 MHz clock (ACPI's PM timer),
//        from the guest's time (`ns`), read-only
// Other offsets read 0; accesses of any size are taken byte by byte.
class AcpiPm : public PioDevice {
 public:
  static constexpr uint16_t kSize = 12;
  static constexpr uint64_t kTimerHz = 3579545;

  explicit AcpiPm(std::function<uint64_t()> ns);

  void Read(uint16_t offset, absl::Span<uint8_t> data) override;
  void Write(uint16_t offset, absl::Span<const uint8_t> data) override;

  bool power_off_requested() const { return power_off_; }
  // An S3 request since the last call (the machine suspends, vmm/machine.cc).
  bool TakeSuspend() { return std::exchange(suspend_, false); }
  bool suspend_requested() const { return suspend_; }
  // The machine woke from S3: WAK_STS.
  void Woke() { sts_ |= 1u << 15; }
  // The SCI's level, reported at each change.
  void SetSci(std::function<void(bool)> sci) { sci_ = std::move(sci); }
  // The RTC's alarm fired (with AIE): RTC_STS.
  void RtcAlarm();
  // The other sleep types the guest asked for (nothing happened), for a warning.
  int ignored_sleep_type() const { return ignored_slp_typ_; }

  uint32_t Timer() const;  // the 24-bit PM timer now

 private:
  std::function<uint64_t()> ns_;
  uint16_t sts_ = 0, en_ = 0, cnt_ = 1;  // SCI_EN
  bool power_off_ = false;
  bool suspend_ = false;
  int ignored_slp_typ_ = -1;
  uint32_t last_timer_ = 0;  // for TMR_STS
  std::function<void(bool)> sci_;
  bool sci_level_ = false;
  void UpdateSci();
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_ACPI_PM_H_
