// stop_signals_test.cc: the first stop signal is noted, a second one ends the
// process as its default action would (each case in a forked child, so that
// the test process keeps its own handlers).
#include "vmm/stop_signals.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace vbts::vmm {
namespace {

// Runs `body` in a child; returns its wait status.
template <typename F>
int StopSignalChild(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) _exit(body());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(StopSignalsTest, TheFirstSignalIsNotedAndTheRunGoesOn) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    const int status = StopSignalChild([sig] {
      if (!InstallStopSignals().ok() || PendingStopSignal() != 0) return 1;
      ::raise(sig);
      // Still here, with the signal noted for the run loop.
      return PendingStopSignal() == sig ? 0 : 2;
    });
    ASSERT_TRUE(WIFEXITED(status)) << sig;
    EXPECT_EQ(WEXITSTATUS(status), 0) << sig;
  }
}

TEST(StopSignalsTest, ASecondSignalEndsTheProcessAsByDefault) {
  const int status = StopSignalChild([] {
    if (!InstallStopSignals().ok()) return 1;
    ::raise(SIGINT);
    ::raise(SIGTERM);  // before the run loop looked: the user insists
    return 3;          // not reached
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(StopSignalsTest, AnIgnoredSignalStaysIgnored) {
  // nohup vbts ...: SIGHUP is ignored before vbts starts, and stays so.
  const int status = StopSignalChild([] {
    ::signal(SIGHUP, SIG_IGN);
    if (!InstallStopSignals().ok()) return 1;
    ::raise(SIGHUP);
    if (PendingStopSignal() != 0) return 2;
    ::raise(SIGTERM);  // the others are still vbts's
    return PendingStopSignal() == SIGTERM ? 0 : 3;
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(StopSignalsTest, Messages) {
  EXPECT_EQ(StopSignalMessage(SIGINT), "vbts: stopped by SIGINT (Ctrl-C); the run ended cleanly");
  EXPECT_EQ(StopSignalMessage(SIGTERM), "vbts: stopped by SIGTERM; the run ended cleanly");
  EXPECT_EQ(StopSignalMessage(SIGHUP), "vbts: stopped by SIGHUP; the run ended cleanly");
}

}  // namespace
}  // namespace vbts::vmm
