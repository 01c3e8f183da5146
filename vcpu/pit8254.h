// pit8254.h: the PC's 8254 programmable interval timer (Intel 8254
// datasheet; PC wiring: channel 0's output on ISA IRQ 0, channel 1 unused,
// channel 2's gate and output on port 61H) for the stretches the guest runs
// in the TCG engine.  The rules are QEMU's and KVM's (hw/timer/i8254*.c,
// arch/x86/kvm/i8254.c), which agree: ports 40H-42H (counters) and 43H
// (control word, counter latch, read-back), modes 0-5 (6 and 7 are 2 and
// 3), LSB/MSB/word access, latched counts and status; BCD is stored but
// counts are binary (as in both).  The input clock is 1.193182 MHz of the
// caller's time (the TCG engine's guest clock, vcpu/guest_clock.h).  The
// state moves to and from KVM's in-kernel PIT in the fields of
// `struct kvm_pit_channel_state` (KVM_GET/SET_PIT2).  Pure logic.
//
// Interrupts: channel 0 raises IRQ 0 on each rising edge of its output: in
// modes 2 and 3 once a period, in mode 0 at the terminal count, in modes 1,
// 4 and 5 at the end of the count.  Advance(now) reports how many edges
// passed since the last call (the caller pulses IRQ 0 once if any: like a
// LAPIC timer, periods missed between two calls coalesce), and
// NextEdgeNs(now) when the next one is due, for the caller's run loop.
#ifndef VBTS_VCPU_PIT8254_H_
#define VBTS_VCPU_PIT8254_H_

#include <array>
#include <cstdint>
#include <optional>

namespace vbts::vcpu {

inline constexpr uint64_t kPitHz = 1'193'182;

// One channel, the fields of struct kvm_pit_channel_state (count_load_time
// in the caller's nanoseconds).
struct PitChannelState {
  uint32_t count = 0x10000;  // 1..65536
  uint16_t latched_count = 0;
  uint8_t count_latched = 0;  // 0, or the access mode the latch is read in
  uint8_t status_latched = 0;
  uint8_t status = 0;
  uint8_t read_state = 0;
  uint8_t write_state = 0;
  uint8_t write_latch = 0;
  uint8_t rw_mode = 0;
  uint8_t mode = 0;
  uint8_t bcd = 0;
  uint8_t gate = 0;
  int64_t count_load_time = 0;
};

class Pit8254 {
 public:
  static constexpr uint16_t kPortBase = 0x40;  // 40H-43H
  static constexpr uint16_t kPortB = 0x61;     // system control port B

  Pit8254();
  // Power-up: every channel in mode 0 with count 65536 loaded at time 0 not
  // yet programmed (no interrupts until a control word and count are
  // written); gates high but channel 2's (port 61H bit 0).
  void Reset();

  // Byte accesses at `now_ns`: 40H-43H and 61H; other ports read FFH.
  uint8_t Read(uint16_t port, uint64_t now_ns);
  void Write(uint16_t port, uint8_t value, uint64_t now_ns);

  // Channel 0's rising edges in (last call, now_ns]; see above.
  uint64_t Advance(uint64_t now_ns);
  // When channel 0's next rising edge is due (>= now_ns + 1), if any.
  std::optional<uint64_t> NextEdgeNs(uint64_t now_ns) const;

  // Channel i's output at `now_ns` (port 61H bit 5 shows channel 2's).
  bool Out(int i, uint64_t now_ns) const;

  std::array<PitChannelState, 3> GetState() const { return ch_; }
  // Takes KVM's state; `speaker` is port 61H bit 1 (data enable).
  void SetState(const std::array<PitChannelState, 3>& ch, uint64_t now_ns);
  bool speaker_data_on() const { return speaker_; }
  void set_speaker_data_on(bool on) { speaker_ = on; }

 private:
  // Input clocks since channel i's count was loaded.
  uint64_t Elapsed(int i, uint64_t now_ns) const;
  uint16_t Count(int i, uint64_t now_ns) const;
  // Rising edges of channel 0's output within the first `d` clocks.
  uint64_t EdgesWithin(uint64_t d) const;
  void LoadCount(int i, uint32_t value, uint64_t now_ns);
  void LatchCount(int i, uint64_t now_ns);
  void SetGate(int i, bool high, uint64_t now_ns);

  std::array<PitChannelState, 3> ch_;
  bool programmed0_ = false;  // channel 0 has a count: it can interrupt
  uint64_t edges_seen_ = 0;   // channel 0's edges reported since its load
  bool speaker_ = false;
  uint8_t refresh_ = 0;  // port 61H bit 4
};

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_PIT8254_H_
