// kick_timer.cc: SIGALRM + setitimer(ITIMER_REAL).
#include "vmm/kick_timer.h"

#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

namespace vbts::vmm {
namespace {
std::atomic<kvm_run*> g_run{nullptr};
int g_period_ms = 0;

// The periodic kick, its first one `first_us` from now.
int Arm(int period_ms, uint64_t first_us) {
  itimerval it = {};
  it.it_interval.tv_sec = period_ms / 1000;
  it.it_interval.tv_usec = (period_ms % 1000) * 1000;
  it.it_value.tv_sec = static_cast<time_t>(first_us / 1'000'000);
  it.it_value.tv_usec = static_cast<suseconds_t>(first_us % 1'000'000);
  return setitimer(ITIMER_REAL, &it, nullptr);
}

void OnAlarm(int) {
  kvm_run* run = g_run.load(std::memory_order_relaxed);
  if (run) run->immediate_exit = 1;
}
}  // namespace

absl::Status KickTimer::Start(kvm_run* run, int period_ms) {
  g_run.store(run);
  g_period_ms = period_ms;
  struct sigaction sa = {};
  sa.sa_handler = OnAlarm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: KVM_RUN must return EINTR
  if (sigaction(SIGALRM, &sa, nullptr) != 0) return absl::ErrnoToStatus(errno, "sigaction(SIGALRM) failed");
  if (Arm(period_ms, static_cast<uint64_t>(period_ms) * 1000) != 0)
    return absl::ErrnoToStatus(errno, "setitimer(ITIMER_REAL) failed");
  return absl::OkStatus();
}

void KickTimer::KickIn(uint64_t ns) {
  if (g_period_ms <= 0) return;
  const uint64_t period_ns = static_cast<uint64_t>(g_period_ms) * 1'000'000;
  Arm(g_period_ms, std::max<uint64_t>(std::min(ns, period_ns) / 1000, 1));
}

void KickTimer::Stop() {
  itimerval it = {};
  setitimer(ITIMER_REAL, &it, nullptr);
  g_run.store(nullptr);
  g_period_ms = 0;
}

}  // namespace vbts::vmm
