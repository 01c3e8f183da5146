// pit8254.cc: see pit8254.h.
#include "vcpu/pit8254.h"

#include "absl/numeric/int128.h"
#include "base/bits.h"

namespace vbts::vcpu {
namespace {

// Access states (QEMU's and KVM's RW_STATE_*).
constexpr uint8_t kLsb = 1, kMsb = 2, kWord0 = 3, kWord1 = 4;
constexpr uint8_t kUnprogrammed = 0xFF;  // KVM's reset mode: no output

}  // namespace

Pit8254::Pit8254() { Reset(); }

void Pit8254::Reset() {
  for (int i = 0; i < 3; i++) {
    ch_[i] = PitChannelState{};
    ch_[i].mode = kUnprogrammed;
    ch_[i].gate = i != 2;
  }
  programmed0_ = false;
  edges_seen_ = 0;
  speaker_ = false;
}

uint64_t Pit8254::Elapsed(int i, uint64_t now_ns) const {
  const int64_t load = ch_[i].count_load_time;
  if (static_cast<int64_t>(now_ns) <= load) return 0;
  return absl::Uint128Low64(absl::uint128(static_cast<uint64_t>(static_cast<int64_t>(now_ns) - load)) * kPitHz /
                            kNsPerSecond);
}

uint16_t Pit8254::Count(int i, uint64_t now_ns) const {
  const PitChannelState& c = ch_[i];
  const uint64_t d = Elapsed(i, now_ns);
  switch (c.mode) {
    case 0: case 1: case 4: case 5: return static_cast<uint16_t>((c.count - d) & 0xFFFF);
    case 3: return static_cast<uint16_t>(c.count - ((2 * d) % c.count));
    default: return static_cast<uint16_t>(c.count - (d % c.count));
  }
}

bool Pit8254::Out(int i, uint64_t now_ns) const {
  const PitChannelState& c = ch_[i];
  const uint64_t d = Elapsed(i, now_ns);
  switch (c.mode) {
    case 0: return d >= c.count;
    case 1: return d < c.count;
    case 2: return d % c.count == 0 && d != 0;
    case 3: return d % c.count < ((c.count + 1) >> 1);
    case 4: case 5: return d == c.count;
    default: return false;
  }
}

uint64_t Pit8254::EdgesWithin(uint64_t d) const {
  const PitChannelState& c = ch_[0];
  switch (c.mode) {
    case 0: case 4: case 5: return d >= c.count ? 1 : 0;  // one rise at the terminal count
    case 2: case 3: return d / c.count;                      // one a period
    default: return 0;                                        // mode 1: low at the end
  }
}

uint64_t Pit8254::Advance(uint64_t now_ns) {
  if (!programmed0_) return 0;
  const uint64_t total = EdgesWithin(Elapsed(0, now_ns));
  if (total <= edges_seen_) return 0;
  const uint64_t fresh = total - edges_seen_;
  edges_seen_ = total;
  return fresh;
}

std::optional<uint64_t> Pit8254::NextEdgeNs(uint64_t now_ns) const {
  if (!programmed0_) return std::nullopt;
  const PitChannelState& c = ch_[0];
  uint64_t clock;  // the input clock of the next edge after those reported
  switch (c.mode) {
    case 0: case 4: case 5:
      if (edges_seen_ >= 1) return std::nullopt;
      clock = c.count;
      break;
    case 2: case 3:
      clock = (edges_seen_ + 1) * static_cast<uint64_t>(c.count);
      break;
    default:
      return std::nullopt;
  }
  const absl::uint128 ns = (absl::uint128(clock) * kNsPerSecond + kPitHz - 1) / kPitHz;
  // The load time may lie before the clock's 0 (moved from KVM): signed.
  const absl::int128 at = absl::int128(c.count_load_time) + absl::int128(ns);
  if (at <= absl::int128(now_ns)) return now_ns + 1;
  return at > absl::int128(UINT64_MAX) ? UINT64_MAX : static_cast<uint64_t>(at);
}

void Pit8254::LoadCount(int i, uint32_t value, uint64_t now_ns) {
  ch_[i].count = value == 0 ? 0x10000 : value;
  ch_[i].count_load_time = static_cast<int64_t>(now_ns);
  if (i == 0) {
    programmed0_ = ch_[0].mode <= 5;
    edges_seen_ = 0;
  }
}

void Pit8254::LatchCount(int i, uint64_t now_ns) {
  PitChannelState& c = ch_[i];
  if (c.count_latched) return;
  c.latched_count = Count(i, now_ns);
  c.count_latched = c.rw_mode;
}

void Pit8254::SetGate(int i, bool high, uint64_t now_ns) {
  PitChannelState& c = ch_[i];
  // Modes 1, 2, 3 and 5 restart on a rising gate; modes 0 and 4 are not
  // paused by a low gate (QEMU and KVM: "just disable/enable counting" XXX).
  if (!c.gate && high && (c.mode == 1 || c.mode == 2 || c.mode == 3 || c.mode == 5)) {
    c.count_load_time = static_cast<int64_t>(now_ns);
    if (i == 0) edges_seen_ = 0;
  }
  c.gate = high;
}

uint8_t Pit8254::Read(uint16_t port, uint64_t now_ns) {
  if (port == kPortB) {
    // Port 61H: gate 2, speaker data, the refresh toggle (bit 4, flipping
    // at each read, as QEMU's), channel 2's output (bit 5).
    static_assert(kPortB == 0x61);
    refresh_ ^= 0x10;
    return static_cast<uint8_t>(ch_[2].gate | (speaker_ ? 2 : 0) | refresh_ | (Out(2, now_ns) ? 0x20 : 0));
  }
  if (port < kPortBase || port > kPortBase + 2) return 0xFF;  // 43H is write only
  const int i = port - kPortBase;
  PitChannelState& c = ch_[i];
  if (c.status_latched) {
    c.status_latched = 0;
    return c.status;
  }
  if (c.count_latched) {
    switch (c.count_latched) {
      case kMsb:
        c.count_latched = 0;
        return static_cast<uint8_t>(c.latched_count >> 8);
      case kWord0:
        c.count_latched = kMsb;
        return static_cast<uint8_t>(c.latched_count);
      default:  // kLsb
        c.count_latched = 0;
        return static_cast<uint8_t>(c.latched_count);
    }
  }
  const uint16_t count = Count(i, now_ns);
  switch (c.read_state) {
    case kMsb:
      return static_cast<uint8_t>(count >> 8);
    case kWord0:
      c.read_state = kWord1;
      return static_cast<uint8_t>(count);
    case kWord1:
      c.read_state = kWord0;
      return static_cast<uint8_t>(count >> 8);
    default:  // kLsb (and an unprogrammed channel)
      return static_cast<uint8_t>(count);
  }
}

void Pit8254::Write(uint16_t port, uint8_t value, uint64_t now_ns) {
  if (port == kPortB) {
    SetGate(2, value & 1, now_ns);
    speaker_ = (value & 2) != 0;
    return;
  }
  if (port == kPortBase + 3) {
    const int channel = value >> 6;
    if (channel == 3) {  // read-back: bit 5 = 0 latches counts, bit 4 = 0 statuses
      for (int i = 0; i < 3; i++) {
        if (!(value & (2 << i))) continue;
        if (!(value & 0x20)) LatchCount(i, now_ns);
        PitChannelState& c = ch_[i];
        if (!(value & 0x10) && !c.status_latched) {
          c.status = static_cast<uint8_t>((Out(i, now_ns) ? 0x80 : 0) | (c.rw_mode << 4) | ((c.mode & 7) << 1) | c.bcd);
          c.status_latched = 1;
        }
      }
      return;
    }
    PitChannelState& c = ch_[channel];
    const uint8_t access = (value >> 4) & 3;
    if (access == 0) {  // counter latch
      LatchCount(channel, now_ns);
      return;
    }
    c.rw_mode = access;
    c.read_state = access;
    c.write_state = access;
    c.mode = (value >> 1) & 7;
    if (c.mode > 5) c.mode -= 4;  // 110B, 111B: modes 2 and 3
    c.bcd = value & 1;
    // A control word stops channel 0's interrupts until its count is written
    // (the 8254 waits for the count; QEMU and KVM go on with the old one).
    if (channel == 0) programmed0_ = false;
    return;
  }
  if (port < kPortBase || port > kPortBase + 2) return;
  const int i = port - kPortBase;
  PitChannelState& c = ch_[i];
  switch (c.write_state) {
    case kMsb:
      LoadCount(i, static_cast<uint32_t>(value) << 8, now_ns);
      return;
    case kWord0:
      c.write_latch = value;
      c.write_state = kWord1;
      return;
    case kWord1:
      LoadCount(i, c.write_latch | (static_cast<uint32_t>(value) << 8), now_ns);
      c.write_state = kWord0;
      return;
    case kLsb:
      LoadCount(i, value, now_ns);
      return;
    default:  // no control word yet
      return;
  }
}

void Pit8254::SetState(const std::array<PitChannelState, 3>& ch, uint64_t now_ns) {
  ch_ = ch;
  for (PitChannelState& c : ch_) {
    if (c.count == 0 || c.count > 0x10000) c.count = 0x10000;
    if (c.mode != kUnprogrammed && c.mode > 5) c.mode = kUnprogrammed;
  }
  programmed0_ = ch_[0].mode <= 5;
  // Edges before the move were KVM's: the next one counts from now.
  edges_seen_ = programmed0_ ? EdgesWithin(Elapsed(0, now_ns)) : 0;
}

}  // namespace vbts::vcpu
