// kick_timer.h: a periodic SIGALRM that forces KVM_RUN back to user space
// (kvm_run.immediate_exit), so the run loop can enforce --timeout and notice a
// vCPU halted in the kernel with interrupts disabled, even when the guest
// makes no exits of its own.
#ifndef VBTS_VMM_KICK_TIMER_H_
#define VBTS_VMM_KICK_TIMER_H_

#include <cstdint>

#include "vcpu/kvm_uapi.h"

#include "absl/status/status.h"

namespace vbts::vmm {

class KickTimer {
 public:
  // Arms a `period_ms` periodic timer that kicks `run` (one per process).
  static absl::Status Start(kvm_run* run, int period_ms);
  // The next kick comes `ns` from now if that is sooner than the period
  // (a device's timer, vmm/hpet.h), then periodically again.
  static void KickIn(uint64_t ns);
  static void Stop();
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_KICK_TIMER_H_
