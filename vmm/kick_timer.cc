// kick_timer.cc: SIGALRM + setitimer(ITIMER_REAL).
#include "vmm/kick_timer.h"

#include <signal.h>
#include <sys/time.h>

#include <atomic>
#include <cerrno>

namespace vbts::vmm {
namespace {
std::atomic<kvm_run*> g_run{nullptr};

void OnAlarm(int) {
  kvm_run* run = g_run.load(std::memory_order_relaxed);
  if (run) run->immediate_exit = 1;
}
}  // namespace

absl::Status KickTimer::Start(kvm_run* run, int period_ms) {
  g_run.store(run);
  struct sigaction sa = {};
  sa.sa_handler = OnAlarm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: KVM_RUN must return EINTR
  if (sigaction(SIGALRM, &sa, nullptr) != 0) return absl::ErrnoToStatus(errno, "sigaction(SIGALRM) failed");
  itimerval it = {};
  it.it_interval.tv_sec = period_ms / 1000;
  it.it_interval.tv_usec = (period_ms % 1000) * 1000;
  it.it_value = it.it_interval;
  if (setitimer(ITIMER_REAL, &it, nullptr) != 0) return absl::ErrnoToStatus(errno, "setitimer(ITIMER_REAL) failed");
  return absl::OkStatus();
}

void KickTimer::Stop() {
  itimerval it = {};
  setitimer(ITIMER_REAL, &it, nullptr);
  g_run.store(nullptr);
}

}  // namespace vbts::vmm
