// step_observer.h: how the supervisor (vcpu/supervisor.h), which decides when
// the guest is single-stepped and completes what the host cannot run, lets
// the branch-tracing engine (vcpu/tracer.h) see every instruction boundary.
#ifndef VBTS_VCPU_STEP_OBSERVER_H_
#define VBTS_VCPU_STEP_OBSERVER_H_

#include "absl/status/status.h"
#include "vcpu/completer.h"
#include "vcpu/cpu_state.h"

namespace vbts::vcpu {

class StepObserver {
 public:
  virtual ~StepObserver() = default;

  // True while the observer needs a stop at every instruction boundary (the
  // supervisor then single-steps the guest even where the host would not
  // need it).  Re-read by the supervisor at every stop and exit.
  virtual bool WantsEveryInstruction() const = 0;

  // Called before AtBoundary: whether the guest was single-stepped into
  // this boundary from the previous one the observer saw (false after a free
  // run, whose stops are not consecutive instructions).
  virtual void SetConsecutive(bool consecutive) { (void)consecutive; }

  // True when the observer has just raised an interrupt (a PMI) that the
  // host will deliver at this boundary: the supervisor must then let KVM run
  // (the interrupt comes before the instruction at RIP) instead of
  // completing that instruction itself.
  virtual bool EventPending() const { return false; }

  // The guest stopped at an instruction boundary after KVM ran it (a
  // single-step stop, or any other exit while stepping), before the
  // supervisor looks at the instruction at st.rip.  `st` is the full state
  // (regs, sregs, EFER/paging); the observer may change it (e.g. to deliver
  // a trap) and then sets `dirty`.
  virtual absl::Status AtBoundary(CpuState& st, bool& dirty) = 0;

  // The supervisor itself retired the instruction at `before.rip` (a
  // completed INT n/IRET/far transfer/CPUID, or an HLT it performed), leaving
  // the guest at `after`.  Called in program order between AtBoundary calls.
  virtual absl::Status Retired(const CpuState& before, const ControlTransfer& t,
                               CpuState& after, bool& dirty) = 0;
};

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_STEP_OBSERVER_H_
