#include "vmm/guest_output.h"

#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_format.h"

namespace vbts {

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

void GuestOutput::Write(uint8_t c) {
  if (dropped_) return;
  for (;;) {
    if (deadline_ns_) {
      // Wait for room (in slices of at most 1 s) no later than the deadline.
      const uint64_t now = MonotonicNs();
      if (now >= deadline_ns_) {
        dropped_ = true;
        return;
      }
      pollfd p{fd_, POLLOUT, 0};
      const int ms = static_cast<int>(std::min<uint64_t>((deadline_ns_ - now) / 1'000'000 + 1, 1000));
      const int r = ::poll(&p, 1, ms);
      if (r == 0 || (r < 0 && errno == EINTR)) continue;
    }
    if (::write(fd_, &c, 1) >= 0 || errno != EINTR) return;
  }
}

std::string TimeoutMessage(double timeout_seconds, bool output_dropped) {
  return absl::StrFormat("vbts: guest timed out after %g s%s", timeout_seconds,
                         output_dropped ? " (its COM1 output was not being read from then on: dropped)" : "");
}

}  // namespace vbts
