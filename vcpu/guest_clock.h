// guest_clock.h: the guest's time while the TCG engine runs it — one clock
// from which its TSC (RDTSC, RDTSCP, RDMSR IA32_TSC, adaptive PEBS's TSC
// field) and its LAPIC timer both derive (docs/tcg-engine.md, "Guest time").
//
// The clock counts ticks at the TSC's frequency and advances in one of two
// ways, chosen by the machine:
//  - kHost: with the host's monotonic time (tsc_hz ticks a host second), as
//    a guest's TSC does under KVM.  While the guest runs untraced.
//  - kInstructions: one tick per retired instruction.  While vbts observes
//    every instruction (tracing, counting), which is when the virtual PMU's
//    cycle events count: it counts core and reference cycles one per
//    instruction (docs/pmu-model.md), so on this clock the guest's TSC, its
//    LAPIC timer and its cycle counters agree as they do on hardware,
//    however slowly the host runs the guest.  kvm-unit-tests' pmu.c measures
//    exactly that agreement (its reference-cycles range is scaled by the
//    reference-cycles-to-TSC ratio of a 10^9-iteration loop).
// Changing the source keeps the clock's value: it never jumps or runs
// backwards.  The TSC is the ticks plus an offset that the guest's WRMSR of
// IA32_TSC sets (SDM vol. 3B 17.17: a write sets the counter; the LAPIC
// timer is unaffected, so the ticks are not).
//
// Pure logic: every call takes the current host time and instruction count.
#ifndef VBTS_VCPU_GUEST_CLOCK_H_
#define VBTS_VCPU_GUEST_CLOCK_H_

#include <cstdint>

namespace vbts::vcpu {

class GuestClock {
 public:
  enum class Source { kHost, kInstructions };
  // Where the two sources stand now: CLOCK_MONOTONIC nanoseconds, and the
  // number of instructions retired so far as the machine counts them (only
  // read while the source is kInstructions).
  struct Now {
    uint64_t host_ns = 0;
    uint64_t retired = 0;
  };

  // `tsc_hz`: the TSC's frequency (a value of 0 is taken as 1 GHz).  The
  // clock starts at tick 0 with source kHost at `now`.
  GuestClock(uint64_t tsc_hz, Now now);

  // Ticks since the start: monotonic.
  uint64_t Ticks(Now now) const;
  // The guest's TSC.
  uint64_t Tsc(Now now) const { return Ticks(now) + tsc_offset_; }
  // The LAPIC's time: nanoseconds of ticks, floor(ticks * 10^9 / hz).
  uint64_t Ns(Now now) const { return NsOfTicks(Ticks(now)); }

  // Continues from the present value with `source`.
  void SetSource(Source source, Now now);
  // WRMSR IA32_TSC (or the TSC KVM's vCPU had at a move between engines):
  // the TSC reads `tsc` now; the ticks go on unchanged.
  void SetTsc(uint64_t tsc, Now now) { tsc_offset_ = tsc - Ticks(now); }
  // Idle time: a halted guest on instruction time waits for its LAPIC timer
  // by moving the clock to its deadline at once.  Never moves backwards.
  void SkipToNs(uint64_t ns, Now now);

  // Conversions.  TicksOfNs rounds up: the first tick at or after `ns`, so
  // that NsOfTicks(TicksOfNs(ns)) >= ns.  Both saturate at UINT64_MAX.
  uint64_t NsOfTicks(uint64_t ticks) const;
  uint64_t TicksOfNs(uint64_t ns) const;

  Source source() const { return source_; }
  uint64_t hz() const { return hz_; }

 private:
  uint64_t hz_;
  Source source_ = Source::kHost;
  // The ticks at the last rebase, and where the source stood then.
  uint64_t base_ticks_ = 0;
  Now base_;
  uint64_t tsc_offset_ = 0;
};

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_GUEST_CLOCK_H_
