// guest_output.h: where the guest's COM1 bytes go (Machine::WriteGuestOutput).
//
// Unbuffered: each byte reaches the output descriptor as the guest writes it,
// and vbts keeps none of them, so a guest that floods COM1 costs no memory;
// a write waits while the reader is slow.  With a deadline (the run's
// --timeout) it waits no longer than that: a reader that stopped reading must
// not keep the run past it (guest-tests/tiny/hostile_com1_flood.asm).  From
// then on the output is dropped, and the run ends with the timeout, saying so
// (TimeoutMessage).
#ifndef VBTS_VMM_GUEST_OUTPUT_H_
#define VBTS_VMM_GUEST_OUTPUT_H_

#include <cstdint>
#include <string>

namespace vbts {

class GuestOutput {
 public:
  explicit GuestOutput(int fd) : fd_(fd) {}

  // CLOCK_MONOTONIC nanoseconds (MonotonicNs); 0: none, a write may wait
  // for ever.
  void SetDeadline(uint64_t deadline_ns) { deadline_ns_ = deadline_ns; }
  // Time the run did not count (a debugger held the guest stopped).
  void ExtendDeadline(uint64_t ns) {
    if (deadline_ns_) deadline_ns_ += ns;
  }
  // Writes one byte: returns once it is written, the descriptor failed, or
  // the deadline passed with the reader still not reading (then this and
  // every later byte is dropped).
  void Write(uint8_t c);
  // The deadline passed while a write waited: the output was dropped.
  bool dropped() const { return dropped_; }

 private:
  int fd_;
  uint64_t deadline_ns_ = 0;
  bool dropped_ = false;
};

uint64_t MonotonicNs();

// vbts's line for a run that ended at --timeout.
std::string TimeoutMessage(double timeout_seconds, bool output_dropped);

}  // namespace vbts

#endif  // VBTS_VMM_GUEST_OUTPUT_H_
