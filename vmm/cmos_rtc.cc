// cmos_rtc.cc: MC146818 time registers computed from the host clock plus the guest's offset; CMOS RAM.
#include "vmm/cmos_rtc.h"

#include <time.h>

#include <algorithm>
#include <ctime>
#include <utility>

namespace vbts::vmm {
namespace {

constexpr uint8_t kRegA = 0x0A, kRegB = 0x0B, kRegC = 0x0C, kRegD = 0x0D, kCentury = 0x32;
constexpr uint8_t kBSet = 0x80, kBPie = 0x40, kBAie = 0x20, kBUie = 0x10, kBBinary = 0x04, kB24h = 0x02;
constexpr uint8_t kAUip = 0x80;
constexpr uint8_t kCIrqf = 0x80, kCPf = 0x40, kCAf = 0x20, kCUf = 0x10;
constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kTimeBaseHz = 32768;

// Cycles of the 32.768 kHz time base in `ns` (>= 0), and the first
// nanosecond at which `cycles` of them have passed.
int64_t CyclesIn(int64_t ns) { return ns / kSecond * kTimeBaseHz + ns % kSecond * kTimeBaseHz / kSecond; }
int64_t NsOfCycles(int64_t cycles) {
  return cycles / kTimeBaseHz * kSecond + (cycles % kTimeBaseHz * kSecond + kTimeBaseHz - 1) / kTimeBaseHz;
}

// The periodic interrupt's period in cycles of the time base (register A:
// rate select in bits 3:0, the 32.768 kHz divider 010 in bits 6:4); 0: none.
int64_t PeriodCycles(uint8_t a) {
  if (((a >> 4) & 7) != 2) return 0;
  const int rs = a & 0xF;
  if (rs == 0) return 0;
  return rs <= 2 ? int64_t{1} << (rs + 6) : int64_t{1} << (rs - 1);
}

// IRQF: a flag in `c` (register C's PF, AF, UF) whose enable is on in `b`
// (register B's PIE, AIE, UIE: the same bit positions).
static_assert(kBPie == kCPf && kBAie == kCAf && kBUie == kCUf, "MC146818A: each enable above its flag");
bool Irqf(uint8_t c, uint8_t b) { return (c & b & (kCPf | kCAf | kCUf)) != 0; }
// 8 cycles of the 32.768 kHz time base before each update (MC146818A
// datasheet: UIP rises 244 us before the update cycle; QEMU's UIP_HOLD_LENGTH).
constexpr int64_t kUipNs = 244141;

// Days since 1970-01-01 of a proleptic Gregorian date and back (the civil
// calendar algorithms of H. Hinnant, "chrono-Compatible Low-Level Date
// Algorithms"). vbts computes them itself: glibc's gmtime_r and timegm read
// the time-zone file on first use, an openat the syscall filter forbids once
// the guest runs.
bool IsTimeField(uint8_t reg) {
  return reg == 0x00 || reg == 0x02 || reg == 0x04 || (reg >= 0x06 && reg <= 0x09) || reg == kCentury;
}

// Nanoseconds since the start of the second `ns` lies in.
int64_t IntoSecond(int64_t ns) { return ((ns % 1000000000) + 1000000000) % 1000000000; }

int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

std::tm CivilFromSeconds(int64_t t) {
  int64_t days = t / 86400, secs = t % 86400;
  if (secs < 0) {
    secs += 86400;
    days--;
  }
  const int64_t z = days + 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  const int m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  std::tm tm{};
  tm.tm_year = static_cast<int>(yoe + era * 400 + (m <= 2)) - 1900;
  tm.tm_mon = m - 1;
  tm.tm_mday = d;
  tm.tm_hour = static_cast<int>(secs / 3600);
  tm.tm_min = static_cast<int>(secs / 60 % 60);
  tm.tm_sec = static_cast<int>(secs % 60);
  tm.tm_wday = static_cast<int>((days % 7 + 11) % 7);  // 1970-01-01 was a Thursday (4)
  return tm;
}

int64_t SecondsFromCivil(const std::tm& tm) {
  return DaysFromCivil(tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday) * 86400 + tm.tm_hour * 3600 + tm.tm_min * 60 +
         tm.tm_sec;
}

}  // namespace

CmosRtc::CmosRtc(std::function<int64_t()> now_ns) : now_(std::move(now_ns)) {
  ram_[kRegA] = 0x26;
  ram_[kRegB] = kB24h;
  ram_[kRegD] = 0x80;
  flags_seen_ = Now();
  periods_seen_ = NowNs();
}

int64_t CmosRtc::NowNs() const {
  if (now_) return now_();
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

int64_t CmosRtc::HostSeconds() const {
  const int64_t ns = NowNs();
  return ns >= 0 ? ns / 1000000000 : (ns - 999999999) / 1000000000;
}

int64_t CmosRtc::Now() const { return HostSeconds() + offset_; }

bool CmosRtc::AlarmMatches(int64_t t) const {
  const std::tm tm = CivilFromSeconds(t);
  const auto field = [this](uint8_t reg, int value) {
    const uint8_t a = ram_[reg];
    return (a & 0xC0) == 0xC0 || Decode(a) == value;  // C0H-FFH: "don't care"
  };
  int hour = tm.tm_hour;
  if (!(ram_[kRegB] & kB24h)) {  // 12-hour alarm: 1-12 with bit 7 = PM
    const uint8_t a = ram_[0x05];
    if ((a & 0xC0) != 0xC0) {
      const int h = Decode(a & 0x7F) % 12 + ((a & 0x80) ? 12 : 0);
      return field(0x01, tm.tm_sec) && field(0x03, tm.tm_min) && h == hour;
    }
  }
  return field(0x01, tm.tm_sec) && field(0x03, tm.tm_min) && field(0x05, hour);
}

std::optional<int64_t> CmosRtc::NsToAlarm() const {
  if (!(ram_[kRegB] & kBAie) || (ram_[kRegB] & kBSet)) return std::nullopt;
  const int64_t ns = NowNs();
  const int64_t into_second = IntoSecond(ns);
  const int64_t now = Now();
  for (int64_t t = now + 1; t <= now + 86400; t++)
    if (AlarmMatches(t)) return (t - now) * 1000000000 - into_second;
  return std::nullopt;
}

void CmosRtc::Accumulate() {
  // UF and AF: the seconds that ended since they were last taken (no update
  // while SET); PF: a period that ended, PIE or not (MC146818A datasheet).
  const int64_t now = Now();
  if (!(ram_[kRegB] & kBSet) && now > flags_seen_) {
    pending_ |= kCUf;
    for (int64_t t = std::max(flags_seen_ + 1, now - 86400); t <= now; t++)
      if (AlarmMatches(t)) {
        pending_ |= kCAf;
        if ((ram_[kRegB] & kBAie) && alarm_) alarm_();
        break;
      }
  }
  flags_seen_ = now;
  const int64_t ns = NowNs();
  if (const int64_t p = PeriodCycles(ram_[kRegA]); p && ns > periods_seen_ && periods_seen_ >= 0 &&
                                                     CyclesIn(ns) / p > CyclesIn(periods_seen_) / p)
    pending_ |= kCPf;
  periods_seen_ = ns;
}

void CmosRtc::UpdateIrq() {
  const bool level = Irqf(pending_, ram_[kRegB]);
  if (level == irq_level_) return;
  irq_level_ = level;
  if (irq_) irq_(level);
}

void CmosRtc::Advance() {
  Accumulate();
  UpdateIrq();
}

std::optional<int64_t> CmosRtc::NsToNextInterrupt() const {
  const uint8_t b = ram_[kRegB];
  if (irq_level_) return std::nullopt;  // IRQ 8 is up until C is read
  std::optional<int64_t> next;
  const auto take = [&next](int64_t ns) {
    if (!next || ns < *next) next = ns;
  };
  const int64_t ns = NowNs();
  if (const int64_t p = PeriodCycles(ram_[kRegA]); p && (b & kBPie) && ns >= 0)
    take(NsOfCycles((CyclesIn(ns) / p + 1) * p) - ns);
  if ((b & kBUie) && !(b & kBSet)) take(kSecond - IntoSecond(ns));
  if (std::optional<int64_t> alarm = NsToAlarm()) take(*alarm);
  return next;
}

uint8_t CmosRtc::Encode(int v) const {
  if (ram_[kRegB] & kBBinary) return static_cast<uint8_t>(v);
  return static_cast<uint8_t>(((v / 10) << 4) | (v % 10));
}

int CmosRtc::Decode(uint8_t v) const {
  if (ram_[kRegB] & kBBinary) return v;
  return (v >> 4) * 10 + (v & 0xF);
}

std::tm CmosRtc::Time() const {
  if (ram_[kRegB] & kBSet) return frozen_;
  return CivilFromSeconds(Now());
}

uint8_t CmosRtc::ReadTimeField(uint8_t reg, const std::tm& tm) const {
  switch (reg) {
    case 0x00: return Encode(tm.tm_sec);
    case 0x02: return Encode(tm.tm_min);
    case 0x04: {
      if (ram_[kRegB] & kB24h) return Encode(tm.tm_hour);
      const int h12 = tm.tm_hour % 12 == 0 ? 12 : tm.tm_hour % 12;
      return static_cast<uint8_t>(Encode(h12) | (tm.tm_hour >= 12 ? 0x80 : 0));
    }
    case 0x06: return Encode(tm.tm_wday + 1);
    case 0x07: return Encode(tm.tm_mday);
    case 0x08: return Encode(tm.tm_mon + 1);
    case 0x09: return Encode((tm.tm_year + 1900) % 100);
    default: return Encode((tm.tm_year + 1900) / 100);  // kCentury
  }
}

uint8_t CmosRtc::ReadReg(uint8_t reg) {
  if (IsTimeField(reg)) return ReadTimeField(reg, Time());
  switch (reg) {
    case kRegA:
      return static_cast<uint8_t>((ram_[kRegA] & ~kAUip) | (IntoSecond(NowNs()) >= 1000000000 - kUipNs ? kAUip : 0));
    case kRegC: {
      // The flags since the last read; the read clears them and IRQ 8.
      Accumulate();
      uint8_t c = std::exchange(pending_, 0);
      if (Irqf(c, ram_[kRegB])) c |= kCIrqf;
      UpdateIrq();
      return c;
    }
    default: return ram_[reg];
  }
}

void CmosRtc::WriteReg(uint8_t reg, uint8_t value) {
  switch (reg) {
    case 0x00: frozen_.tm_sec = Decode(value); break;
    case 0x02: frozen_.tm_min = Decode(value); break;
    case 0x04:
      if (ram_[kRegB] & kB24h) {
        frozen_.tm_hour = Decode(value);
      } else {
        const int h = Decode(value & 0x7F) % 12;
        frozen_.tm_hour = h + ((value & 0x80) ? 12 : 0);
      }
      break;
    case 0x06: frozen_.tm_wday = Decode(value) - 1; break;
    case 0x07: frozen_.tm_mday = Decode(value); break;
    case 0x08: frozen_.tm_mon = Decode(value) - 1; break;
    case 0x09: frozen_.tm_year = (frozen_.tm_year + 1900) / 100 * 100 + Decode(value) - 1900; break;
    case kCentury: frozen_.tm_year = Decode(value) * 100 + (frozen_.tm_year + 1900) % 100 - 1900; break;
    case kRegA:
      Accumulate();  // the periods so far at the old rate
      ram_[kRegA] = value & ~kAUip;
      return;
    case kRegB: {
      Accumulate();
      const bool was_set = ram_[kRegB] & kBSet;
      if (!was_set && (value & kBSet)) frozen_ = Time();  // freeze what the guest sees
      ram_[kRegB] = value;
      if (was_set && !(value & kBSet)) {
        offset_ = SecondsFromCivil(frozen_) - HostSeconds();  // the clock runs on from what was written
        flags_seen_ = Now();  // no update for the seconds the clock moved by
      }
      UpdateIrq();  // an enable of a flag already set raises IRQ 8 (IRQF)
      return;
    }
    case kRegC:
    case kRegD:
      return;  // read-only
    default:
      ram_[reg] = value;
      return;
  }
  // A time field written outside SET takes effect at once, as the datasheet's
  // update cycle would copy it (QEMU does the same).
  if (!(ram_[kRegB] & kBSet)) {
    offset_ = SecondsFromCivil(frozen_) - HostSeconds();
    flags_seen_ = Now();
  }
}

void CmosRtc::Read(uint16_t offset, absl::Span<uint8_t> data) {
  for (uint8_t& b : data) b = offset == 0 ? 0xFF : ReadReg(index_ & 0x7F);  // the index port reads as an empty bus
}

void CmosRtc::Write(uint16_t offset, absl::Span<const uint8_t> data) {
  for (uint8_t b : data) {
    if (offset == 0) {
      index_ = b;
      continue;
    }
    const uint8_t reg = index_ & 0x7F;
    if (IsTimeField(reg) && !(ram_[kRegB] & kBSet)) frozen_ = Time();  // change one field of the running clock
    WriteReg(reg, b);
  }
}

}  // namespace vbts::vmm
