// GuestOutput (vmm/guest_output.h): COM1's bytes into a pipe that is read,
// and into one that nobody reads, with and without the run's deadline.
#include "vmm/guest_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <thread>

#include <gtest/gtest.h>

namespace vbts {
namespace {

class Pipe {
 public:
  Pipe() { EXPECT_EQ(::pipe2(fds_, O_CLOEXEC), 0); }
  ~Pipe() {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  int read_end() const { return fds_[0]; }
  int write_end() const { return fds_[1]; }
  // Everything in the pipe now (the read end made non-blocking).
  size_t Drain() {
    EXPECT_EQ(::fcntl(fds_[0], F_SETFL, O_NONBLOCK), 0);
    size_t total = 0;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds_[0], buf, sizeof buf)) > 0;) total += static_cast<size_t>(n);
    return total;
  }

 private:
  int fds_[2] = {-1, -1};
};

TEST(GuestOutputTest, AReaderGetsEveryByteInOrder) {
  // 200 000 bytes (three times a default pipe's 64 KiB, so the writer waits
  // for the reader) with a deadline an hour away: all of them arrive, in order.
  constexpr size_t kBytes = 200'000;
  Pipe p;
  GuestOutput out(p.write_end());
  out.SetDeadline(MonotonicNs() + 3600'000'000'000ull);
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    while (got.size() < kBytes) {
      const ssize_t n = ::read(p.read_end(), buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
  });
  for (size_t i = 0; i < kBytes; i++) out.Write(static_cast<uint8_t>('a' + i % 26));
  reader.join();
  EXPECT_FALSE(out.dropped());
  ASSERT_EQ(got.size(), kBytes);
  for (size_t i = 0; i < kBytes; i++) ASSERT_EQ(got[i], static_cast<char>('a' + i % 26)) << i;
}

TEST(GuestOutputTest, AnUnreadPipeHoldsTheWriterNoLongerThanTheDeadline) {
  // A pipe nobody reads fills up (F_GETPIPE_SZ bytes at most); the byte that
  // does not fit waits until the deadline, half a second away, and is
  // dropped, with every byte after it.  Written: as many bytes as fitted,
  // at most the pipe's size; nothing after the drop.  (No bound on how long
  // it took beyond returning: the test's ctest timeout catches a hang.)
  Pipe p;
  const int capacity = ::fcntl(p.write_end(), F_GETPIPE_SZ);
  ASSERT_GT(capacity, 0);
  GuestOutput out(p.write_end());
  const uint64_t deadline = MonotonicNs() + 500'000'000;
  out.SetDeadline(deadline);
  size_t written = 0;
  while (!out.dropped() && written <= static_cast<size_t>(capacity)) {
    out.Write('x');
    if (!out.dropped()) written++;
  }
  EXPECT_TRUE(out.dropped());
  EXPECT_GE(MonotonicNs(), deadline);  // it gave up at the deadline, not before
  EXPECT_LE(written, static_cast<size_t>(capacity));
  out.Write('y');  // dropped at once: the pipe is still full
  EXPECT_TRUE(out.dropped());
  EXPECT_EQ(p.Drain(), written);
  // The run then ends with the timeout line that says so.
  EXPECT_EQ(TimeoutMessage(2, out.dropped()),
            "vbts: guest timed out after 2 s (its COM1 output was not being read from then on: dropped)");
}

TEST(GuestOutputTest, WithoutADeadlineOrWithTheReaderBackNothingIsDropped) {
  Pipe p;
  GuestOutput out(p.write_end());  // no --timeout: plain writes
  for (char c : std::string("hello\n")) out.Write(static_cast<uint8_t>(c));
  EXPECT_FALSE(out.dropped());
  EXPECT_EQ(p.Drain(), 6u);
  EXPECT_EQ(TimeoutMessage(0.5, false), "vbts: guest timed out after 0.5 s");
}

TEST(GuestOutputTest, TimeADebuggerHeldTheGuestMovesTheDeadline) {
  // A deadline already passed, moved an hour on: a byte into an empty pipe
  // is written.  (Without the extension it would be dropped: the deadline
  // is checked before each write that has a deadline.)
  Pipe p;
  GuestOutput out(p.write_end());
  out.SetDeadline(MonotonicNs() - 1);
  out.ExtendDeadline(3600'000'000'000ull);
  out.Write('z');
  EXPECT_FALSE(out.dropped());
  EXPECT_EQ(p.Drain(), 1u);
  GuestOutput late(p.write_end());
  late.SetDeadline(MonotonicNs() - 1);
  late.Write('z');
  EXPECT_TRUE(late.dropped());
  EXPECT_EQ(p.Drain(), 0u);
}

}  // namespace
}  // namespace vbts
