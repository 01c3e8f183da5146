// acpi_pm.cc: PM1 status/enable/control and the 3.579545 MHz PM timer.
#include "vmm/acpi_pm.h"

#include <utility>

#include "vmm/acpi_tables.h"

namespace vbts::vmm {
namespace {
constexpr uint16_t kTmrSts = 1u << 0;
constexpr uint16_t kRtcSts = 1u << 10;  // RTC_STS and RTC_EN
constexpr uint16_t kSciEn = 1u << 0;
constexpr uint16_t kSlpEn = 1u << 13;
}  // namespace

AcpiPm::AcpiPm(std::function<uint64_t()> ns) : ns_(std::move(ns)) {}

uint32_t AcpiPm::Timer() const {
  const unsigned __int128 ticks = static_cast<unsigned __int128>(ns_()) * kTimerHz / 1000000000u;
  return static_cast<uint32_t>(ticks) & 0xFFFFFF;
}

void AcpiPm::Read(uint16_t offset, absl::Span<uint8_t> data) {
  uint32_t timer = 0;
  if (offset + data.size() > 8) timer = Timer();
  if (offset < 2) {
    // TMR_STS: the timer's most significant bit changed since the last look.
    const uint32_t now = Timer();
    if ((now ^ last_timer_) & 0x800000) sts_ |= kTmrSts;
    last_timer_ = now;
  }
  for (size_t i = 0; i < data.size(); i++) {
    const unsigned o = offset + i;
    uint8_t v = 0;
    if (o < 2) v = static_cast<uint8_t>(sts_ >> (8 * o));
    else if (o < 4) v = static_cast<uint8_t>(en_ >> (8 * (o - 2)));
    else if (o < 6) v = static_cast<uint8_t>((cnt_ & ~kSlpEn) >> (8 * (o - 4)));
    else if (o >= 8 && o < 12) v = static_cast<uint8_t>(timer >> (8 * (o - 8)));
    data[i] = v;
  }
}

void AcpiPm::RtcAlarm() {
  sts_ |= kRtcSts;
  UpdateSci();
}

void AcpiPm::UpdateSci() {
  const bool level = (sts_ & en_ & kRtcSts) != 0;
  if (level == sci_level_) return;
  sci_level_ = level;
  if (sci_) sci_(level);
}

void AcpiPm::Write(uint16_t offset, absl::Span<const uint8_t> data) {
  uint16_t cnt = cnt_;
  bool cnt_written = false;
  for (size_t i = 0; i < data.size(); i++) {
    const unsigned o = offset + i;
    const uint16_t b = data[i];
    if (o < 2) sts_ &= static_cast<uint16_t>(~(b << (8 * o)));  // write 1 to clear
    else if (o < 4) en_ = static_cast<uint16_t>((en_ & ~(0xFF << (8 * (o - 2)))) | (b << (8 * (o - 2))));
    else if (o < 6) {
      cnt = static_cast<uint16_t>((cnt & ~(0xFF << (8 * (o - 4)))) | (b << (8 * (o - 4))));
      cnt_written = true;
    }
  }
  UpdateSci();
  if (!cnt_written) return;
  cnt_ = static_cast<uint16_t>((cnt & ~kSlpEn) | kSciEn);
  if (cnt & kSlpEn) {
    const int slp_typ = (cnt >> 10) & 7;
    if (slp_typ == kAcpiS5SlpTyp) power_off_ = true;
    else if (slp_typ == kAcpiS3SlpTyp) suspend_ = true;
    else ignored_slp_typ_ = slp_typ;
  }
}

}  // namespace vbts::vmm
