// hpet.cc: the HPET's registers, counter and comparators (vmm/hpet.h).
#include "vmm/hpet.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace vbts::vmm {
namespace {

constexpr uint64_t kLow32 = 0xFFFFFFFFull;
constexpr uint64_t kCaps = (uint64_t{Hpet::kPeriodFs} << 32) | Hpet::kBlockId;
constexpr uint64_t kTimerCaps = Hpet::kTnPeriodicCap | Hpet::kTnSizeCap | (uint64_t{Hpet::kRouteCap} << 32);
constexpr uint64_t kTimerWritable =
    Hpet::kTnLevel | Hpet::kTnIntEnable | Hpet::kTnPeriodic | Hpet::kTnValSet | Hpet::kTn32Bit | Hpet::kTnRouteMask;

}  // namespace

Hpet::Hpet(SetLine set_line) : set_line_(std::move(set_line)) { Reset(); }

void Hpet::Reset() {
  for (Timer& t : timers_) {
    if (t.asserted) set_line_(t.asserted_line, false);
    t = Timer{};
  }
  config_ = status_ = counter_ = enable_ns_ = processed_ = 0;
}

uint64_t Hpet::Counter(uint64_t now_ns) const {
  if (!enabled() || now_ns <= enable_ns_) return counter_;
  return counter_ + (now_ns - enable_ns_) / kTickNs;
}

void Hpet::Rebase(uint64_t old_now_ns, uint64_t new_now_ns) {
  if (!enabled()) return;
  counter_ = Counter(old_now_ns);
  enable_ns_ = new_now_ns;
}

std::optional<Hpet::Line> Hpet::Route(int n) const {
  if (legacy() && n < 2) return Line{.isa = true, .n = kLegacyLine[n]};
  const uint32_t r = static_cast<uint32_t>((timers_[n].config & kTnRouteMask) >> kTnRouteShift);
  if (!((kRouteCap >> r) & 1)) return std::nullopt;
  return Line{.isa = false, .n = r};
}

bool Hpet::Match(Timer& t, uint64_t from, uint64_t elapsed) {
  const std::optional<uint64_t> first = TicksToMatch(t, from);
  if (!first || *first > elapsed) return false;
  if (t.config & kTnPeriodic) {
    // Past every match in the elapsed ticks: the comparator (its low half in
    // 32-bit mode, where the high half stays 0) plus the periods, modulo its
    // width.
    const uint64_t width = (t.config & kTn32Bit) ? kLow32 : ~0ull;
    const uint64_t p = t.period & width;
    if (p) t.cmp = ((t.cmp & width) + (1 + (elapsed - *first) / p) * p) & width;
  }
  return true;
}

std::optional<uint64_t> Hpet::TicksToMatch(const Timer& t, uint64_t from) {
  if (t.config & kTn32Bit) {
    // Only the low halves compare: the first match is 1 to 2^32 ticks on.
    uint64_t first = ((t.cmp & kLow32) - from) & kLow32;
    if (first == 0) first = kLow32 + 1;
    // One-shot: the low half's wrap to 0 interrupts too (the spec).
    if (!(t.config & kTnPeriodic)) first = std::min(first, kLow32 + 1 - (from & kLow32));
    return first;
  }
  const uint64_t first = t.cmp - from;
  if (first == 0) return std::nullopt;
  return first;  // behind the counter: after it wraps at 2^64
}

void Hpet::Fire(int n) {
  Timer& t = timers_[n];
  if (t.config & kTnLevel) {
    // Set even with the interrupt disabled (the spec, Tn_INT_ENB_CNF: the
    // timer "will still operate and generate appropriate status bits").
    status_ |= uint64_t{1} << n;
    return;
  }
  if (!(t.config & kTnIntEnable)) return;
  if (std::optional<Line> line = Route(n)) {
    set_line_(*line, true);
    set_line_(*line, false);
  }
}

void Hpet::SyncLevels() {
  for (int n = 0; n < kTimers; n++) {
    Timer& t = timers_[n];
    std::optional<Line> want;
    if ((t.config & kTnLevel) && (t.config & kTnIntEnable) && ((status_ >> n) & 1) && enabled()) want = Route(n);
    if (t.asserted && (!want || *want != t.asserted_line)) {
      set_line_(t.asserted_line, false);
      t.asserted = false;
    }
    if (want && !t.asserted) {
      set_line_(*want, true);
      t.asserted = true;
      t.asserted_line = *want;
    }
  }
}

void Hpet::Advance(uint64_t now_ns) {
  if (!enabled()) return;
  // The counter moves forward only (the caller's clock is monotonic, and
  // Rebase keeps it so), modulo 2^64 when it wraps.
  const uint64_t to = Counter(now_ns);
  const uint64_t elapsed = to - processed_;
  if (elapsed == 0 || elapsed > (~0ull >> 1)) return;
  const uint64_t from = std::exchange(processed_, to);
  for (int n = 0; n < kTimers; n++)
    if (Match(timers_[n], from, elapsed)) Fire(n);
  SyncLevels();
}

std::optional<uint64_t> Hpet::NextInterruptNs() const {
  if (!enabled()) return std::nullopt;
  std::optional<uint64_t> best;
  for (int n = 0; n < kTimers; n++) {
    const Timer& t = timers_[n];
    // A level already set, or no interrupt to raise: its matches can wait
    // for the next access (Advance catches them up).
    if (!(t.config & kTnIntEnable) || !Route(n)) continue;
    if ((t.config & kTnLevel) && ((status_ >> n) & 1)) continue;
    const std::optional<uint64_t> ahead = TicksToMatch(t, processed_);
    if (!ahead) continue;
    // Ticks since the counter started (at counter_): processed_ lies there
    // or after; past 2^64 ticks the interrupt is too far to announce.
    const uint64_t done = processed_ - counter_;
    if (*ahead > ~0ull - done) continue;
    const uint64_t ticks = done + *ahead;
    if (ticks > (std::numeric_limits<uint64_t>::max() - enable_ns_) / kTickNs) continue;
    const uint64_t at = enable_ns_ + ticks * kTickNs;
    if (!best || at < *best) best = at;
  }
  return best;
}

std::optional<Hpet::TimerRegister> Hpet::TimerRegisterAt(uint64_t reg) {
  if (reg < kTimer0 || reg >= kTimer0 + kTimers * kTimerStride) return std::nullopt;
  return TimerRegister{static_cast<int>((reg - kTimer0) / kTimerStride), (reg - kTimer0) % kTimerStride};
}

uint64_t Hpet::Register(uint64_t reg, uint64_t now_ns) const {
  switch (reg) {
    case kCapId:
      return kCaps;
    case kConfig:
      return config_;
    case kIntStatus:
      return status_;
    case kCounter:
      return Counter(now_ns);
    default:
      break;
  }
  const std::optional<TimerRegister> tr = TimerRegisterAt(reg);
  if (!tr) return 0;
  const Timer& t = timers_[tr->n];
  switch (tr->field) {
    case 0x00:
      return t.config | kTimerCaps;
    case 0x08:
      return t.cmp;
    case 0x10:
      return t.fsb;
    default:
      return 0;
  }
}

void Hpet::SetRegister(uint64_t reg, uint64_t value, uint64_t mask, uint64_t now_ns) {
  const auto merge = [&](uint64_t old, uint64_t writable) { return (old & ~(mask & writable)) | (value & mask & writable); };
  switch (reg) {
    case kConfig: {
      const uint64_t c = merge(config_, kEnable | kLegacy);
      if ((c & kEnable) && !enabled()) {
        enable_ns_ = now_ns;  // on from the value it stopped at
        processed_ = counter_;
      } else if (!(c & kEnable) && enabled()) {
        counter_ = processed_ = Counter(now_ns);
      }
      config_ = c;
      SyncLevels();
      return;
    }
    case kIntStatus:
      status_ &= ~(value & mask & ((uint64_t{1} << kTimers) - 1));
      SyncLevels();
      return;
    case kCounter:
      if (!enabled()) counter_ = processed_ = merge(counter_, ~0ull);
      return;
    default:
      break;
  }
  const std::optional<TimerRegister> tr = TimerRegisterAt(reg);
  if (!tr) return;
  const int n = tr->n;
  Timer& t = timers_[n];
  switch (tr->field) {
    case 0x00: {
      const uint64_t c = merge(t.config, kTimerWritable);
      if (!(c & kTnLevel)) status_ &= ~(uint64_t{1} << n);  // edge: the bit means nothing
      if ((c & kTn32Bit) && !(t.config & kTn32Bit)) {
        t.cmp &= kLow32;
        t.period &= kLow32;
      }
      t.config = c;
      SyncLevels();
      return;
    }
    case 0x08: {
      const uint64_t m = (t.config & kTn32Bit) ? mask & kLow32 : mask;
      if (!(t.config & kTnPeriodic) || (t.config & kTnValSet)) t.cmp = (t.cmp & ~m) | (value & m);
      if (t.config & kTnPeriodic) t.period = (t.period & ~m) | (value & m);
      t.config &= ~kTnValSet;
      return;
    }
    case 0x10:
      t.fsb = merge(t.fsb, ~0ull);
      return;
    default:
      return;
  }
}

namespace {
// The bits of its 8-byte register an access of `size` bytes at `offset`
// covers, from the offset's byte up to the register's end.
uint64_t AccessBits(uint64_t offset, int size) {
  const int n = std::clamp(size, 1, static_cast<int>(8 - (offset & 7)));
  return n == 8 ? ~0ull : (uint64_t{1} << (8 * n)) - 1;
}
}  // namespace

uint64_t Hpet::Read(uint64_t offset, int size, uint64_t now_ns) {
  Advance(now_ns);  // a periodic comparator shows where it stands
  const uint64_t byte = offset & 7;
  return (Register(offset - byte, now_ns) >> (8 * byte)) & AccessBits(offset, size);
}

void Hpet::Write(uint64_t offset, int size, uint64_t value, uint64_t now_ns) {
  Advance(now_ns);  // the matches so far under the old settings
  const uint64_t byte = offset & 7;
  SetRegister(offset - byte, value << (8 * byte), AccessBits(offset, size) << (8 * byte), now_ns);
}

}  // namespace vbts::vmm
