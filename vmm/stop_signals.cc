// stop_signals.cc: the stop signals' handler and the flag the run loops read.
#include "vmm/stop_signals.h"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace vbts::vmm {
namespace {

std::atomic<int> g_stop_signal{0};

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

void OnStopSignal(int sig) {
  int none = 0;
  if (g_stop_signal.compare_exchange_strong(none, sig)) return;
  // A second one: the user insists (or the first is stuck). Both calls are
  // async-signal-safe.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

absl::Status InstallStopSignals() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  for (int sig : kStopSignals) {
    // A signal the caller ignores stays ignored (nohup's SIGHUP, a
    // background job's SIGINT): vbts does not take it back.
    struct sigaction old;
    if (::sigaction(sig, nullptr, &old) != 0)
      return absl::ErrnoToStatus(errno, absl::StrFormat("sigaction(%s)", ::strsignal(sig)));
    if (old.sa_handler == SIG_IGN) continue;
    if (::sigaction(sig, &sa, nullptr) != 0)
      return absl::ErrnoToStatus(errno, absl::StrFormat("sigaction(%s)", ::strsignal(sig)));
  }
  return absl::OkStatus();
}

int PendingStopSignal() { return g_stop_signal.load(std::memory_order_relaxed); }

std::string StopSignalMessage(int signal) {
  const char* name = signal == SIGINT ? "SIGINT (Ctrl-C)" : signal == SIGTERM ? "SIGTERM" : signal == SIGHUP ? "SIGHUP" : "a signal";
  return absl::StrFormat("vbts: stopped by %s; the run ended cleanly", name);
}

}  // namespace vbts::vmm
