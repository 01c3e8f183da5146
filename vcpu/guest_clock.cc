#include "vcpu/guest_clock.h"

#include <limits>

#include "base/bits.h"

#include "absl/numeric/int128.h"

namespace vbts::vcpu {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

uint64_t Saturate(absl::uint128 v) { return v > kMax ? kMax : static_cast<uint64_t>(v); }

}  // namespace

GuestClock::GuestClock(uint64_t tsc_hz, Now now) : hz_(tsc_hz ? tsc_hz : kNsPerSecond), base_(now) {}

uint64_t GuestClock::Ticks(Now now) const {
  uint64_t elapsed = 0;
  if (source_ == Source::kInstructions) {
    elapsed = now.retired > base_.retired ? now.retired - base_.retired : 0;
  } else if (now.host_ns > base_.host_ns) {
    elapsed = Saturate(absl::uint128(now.host_ns - base_.host_ns) * hz_ / kNsPerSecond);
  }
  return elapsed > kMax - base_ticks_ ? kMax : base_ticks_ + elapsed;
}

void GuestClock::SetSource(Source source, Now now) {
  base_ticks_ = Ticks(now);
  base_ = now;
  source_ = source;
}

void GuestClock::SkipToNs(uint64_t ns, Now now) {
  const uint64_t target = TicksOfNs(ns);
  const uint64_t at = Ticks(now);
  base_ticks_ = target > at ? target : at;
  base_ = now;
}

uint64_t GuestClock::NsOfTicks(uint64_t ticks) const {
  return Saturate(absl::uint128(ticks) * kNsPerSecond / hz_);
}

uint64_t GuestClock::TicksOfNs(uint64_t ns) const {
  return Saturate((absl::uint128(ns) * hz_ + (kNsPerSecond - 1)) / kNsPerSecond);
}

}  // namespace vbts::vcpu
