// lapic.h: a model of one local xAPIC (SDM vol. 3A chapter 10), for the
// stretches the guest runs in the TCG engine (vcpu/tcg_cpu.h), when KVM's
// in-kernel LAPIC is not running.  The machine forwards the guest's MMIO
// accesses to the APIC page to Read/Write, asks Pending/Acknowledge at
// instruction boundaries, and moves the state to and from KVM with
// GetState/SetState in the layout of `struct kvm_lapic_state` (KVM_GET_LAPIC /
// KVM_SET_LAPIC).  Pure logic: no /dev/kvm, no clock (every call that depends
// on time takes the current time), no aborts on any guest input.
//
// Scope and deliberate simplifications:
//  - xAPIC mode, and x2APIC mode (SDM 10.12) when LapicConfig::x2apic says the
//    CPU has it (CPUID.1:ECX.x2APIC[bit 21]): the registers as MSRs 800H-8FFH
//    (ReadX2apicMsr/WriteX2apicMsr), the 32-bit x2APIC ID and the logical ID
//    derived from it (read only), the 64-bit ICR with a 32-bit destination,
//    SELF IPI.  IA32_APIC_BASE itself (base address, global enable, EXTD and
//    its transitions, SDM 10.4.4 and 10.12.5) belongs to the caller, which
//    tells the model the mode (SetX2apicMode).
//  - One CPU.  An IPI is delivered to this APIC when its destination includes
//    it (SDM 10.6.2); nothing else exists, so "all excluding self" delivers
//    nothing.  Fixed and lowest-priority IPIs become Raise(vector); NMI IPIs
//    are latched for TakeNmi(); SMI, INIT, SIPI and the reserved delivery modes
//    are ignored.  Like KVM, an NMI sent with the "self" shorthand is delivered
//    although SDM table 10-3 lists only fixed delivery as valid with it.
//  - Raise takes the trigger mode: a level-triggered interrupt (from the I/O
//    APIC, vcpu/ioapic.h) sets the vector's TMR bit, an edge-triggered one
//    clears it (SDM 10.8.4).  An EOI of a vector whose TMR bit is set is
//    broadcast to the listener SetLevelEoiListener installs (the machine's
//    I/O APIC), unless SVR bit 12 suppresses it.  LVT LINT0/LINT1 have no
//    input pins here; their Remote IRR bit is only carried through
//    SetState/GetState.
//  - The LVT timer supports one-shot and periodic mode, and TSC-deadline mode
//    when LapicConfig::tsc_deadline says the CPU has it (CPUID.1:ECX
//    .TSC_Deadline[bit 24]; SDM 10.5.4.1); without it timer-mode bit 18 is
//    reserved and reads 0.  The deadline is the caller's TSC value, which
//    it also converts to the model's nanoseconds when it writes it
//    (WriteTscDeadline): a later change of the TSC (WRMSR IA32_TSC) does not
//    move an armed deadline, as under KVM, which converts at the write too.
//    The reserved mode 11b runs the countdown as one-shot (KVM keeps such a
//    timer running and does not reload it).
//  - ESR bit 7 (illegal register address) is never set: accesses to reserved
//    offsets read 0 and ignore writes, as KVM does.
//  - Delivery status (bit 12 of the ICR and of every LVT entry) always reads 0
//    (idle): delivery is instantaneous.
//  - Only the timer and error LVT entries raise interrupts by themselves.  The
//    performance-counter entry (340H) is a plain register: the virtual PMU's
//    caller reads it, sets its mask bit when it delivers a PMI (SDM figure
//    10-8 note) and calls Raise(vector) for fixed delivery, or injects the NMI
//    itself, as vcpu/tracer.cc does against KVM's page.  Thermal, CMCI and
//    LINT0/LINT1 have no sources in the model.
//  - A write to the divide configuration during a countdown keeps the
//    remaining count (as KVM does) and restarts it at the write, dropping the
//    part of a tick already elapsed; the SDM does not define this case.
#ifndef VBTS_VCPU_LAPIC_H_
#define VBTS_VCPU_LAPIC_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

#include "absl/numeric/int128.h"
#include "absl/status/statusor.h"

namespace vbts::vcpu {

// Default physical base of the APIC page (IA32_APIC_BASE reset value, SDM
// 10.4.4) and the page's size.
inline constexpr uint64_t kLapicDefaultBase = 0xFEE00000;
inline constexpr uint32_t kLapicPageSize = 0x1000;
// sizeof(kvm_lapic_state::regs): the xAPIC register page up to 0x3FF.
inline constexpr size_t kLapicStateSize = 1024;

// Register offsets within the APIC page (SDM table 10-1).
inline constexpr uint32_t kApicRegId = 0x20;
inline constexpr uint32_t kApicRegVersion = 0x30;
inline constexpr uint32_t kApicRegTpr = 0x80;
inline constexpr uint32_t kApicRegApr = 0x90;
inline constexpr uint32_t kApicRegPpr = 0xA0;
inline constexpr uint32_t kApicRegEoi = 0xB0;
inline constexpr uint32_t kApicRegRrd = 0xC0;
inline constexpr uint32_t kApicRegLdr = 0xD0;
inline constexpr uint32_t kApicRegDfr = 0xE0;
inline constexpr uint32_t kApicRegSvr = 0xF0;
inline constexpr uint32_t kApicRegIsr = 0x100;  // 8 registers, 0x100..0x170
inline constexpr uint32_t kApicRegTmr = 0x180;  // 8 registers, 0x180..0x1F0
inline constexpr uint32_t kApicRegIrr = 0x200;  // 8 registers, 0x200..0x270
inline constexpr uint32_t kApicRegEsr = 0x280;
inline constexpr uint32_t kApicRegLvtCmci = 0x2F0;
inline constexpr uint32_t kApicRegIcrLow = 0x300;
inline constexpr uint32_t kApicRegIcrHigh = 0x310;
inline constexpr uint32_t kApicRegLvtTimer = 0x320;
inline constexpr uint32_t kApicRegLvtThermal = 0x330;
inline constexpr uint32_t kApicRegLvtPerf = 0x340;
inline constexpr uint32_t kApicRegLvtLint0 = 0x350;
inline constexpr uint32_t kApicRegLvtLint1 = 0x360;
inline constexpr uint32_t kApicRegLvtError = 0x370;
inline constexpr uint32_t kApicRegTimerInitialCount = 0x380;
inline constexpr uint32_t kApicRegTimerCurrentCount = 0x390;
inline constexpr uint32_t kApicRegTimerDivide = 0x3E0;

// Register bits.
inline constexpr uint32_t kApicSvrEnable = 1u << 8;           // SDM 10.9, figure 10-23
inline constexpr uint32_t kApicLvtMasked = 1u << 16;          // SDM 10.5.1, figure 10-8
inline constexpr uint32_t kApicLvtTimerPeriodic = 1u << 17;   // SDM 10.5.4.1
inline constexpr uint32_t kApicLvtTimerTscDeadline = 2u << 17;  // mode field 18:17 = 10b
inline constexpr uint32_t kApicLvtTimerModeMask = 3u << 17;
inline constexpr uint32_t kApicLvtRemoteIrr = 1u << 14;       // LINT0/LINT1 only
inline constexpr uint32_t kApicEsrSendIllegalVector = 1u << 5;     // SDM 10.5.3
inline constexpr uint32_t kApicEsrReceiveIllegalVector = 1u << 6;  // SDM 10.5.3

struct LapicConfig {
  // Initial APIC ID (ID register bits 31:24 after reset, SDM 10.4.6).
  uint8_t apic_id = 0;
  // Version register (SDM 10.4.8, figure 10-7): version 14H, max LVT entry 5
  // (6 entries: timer, thermal, performance, LINT0, LINT1, error; no CMCI),
  // which is what KVM reports for a guest without MCG_CAP.MCG_CMCI_P.  A max
  // LVT entry of 6 adds LVT CMCI (02F0H); bit 24 makes SVR bit 12 (EOI
  // broadcast suppression) writable.
  uint32_t version = 0x00050014;
  // Bus clock feeding the timer before the divide configuration (SDM 10.5.4).
  // The default 1 GHz makes one count one nanosecond at divide-by-1, the
  // figure docs/guest-abi.md promises guests (KVM's APIC bus is 1 GHz too).
  uint64_t bus_hz = 1'000'000'000;
  // TSC-deadline mode (CPUID.1:ECX[24]): LVT timer mode 10b and
  // IA32_TSC_DEADLINE (6E0H), SDM 10.5.4.1.
  bool tsc_deadline = false;
  // x2APIC mode (CPUID.1:ECX[21]), SDM 10.12.
  bool x2apic = false;
};

class Lapic {
 public:
  // Rejects a version with reserved bits (anything outside 7:0, 23:16, 24), a
  // version byte outside 10H..1FH (integrated APIC), a max LVT entry other than
  // 5 or 6, and a bus clock of 0 or above 1 THz.
  static absl::StatusOr<Lapic> Create(const LapicConfig& config);
  // The default configuration, LapicConfig{}.
  Lapic();

  // Power-up/RESET state (SDM 10.4.7.1): IRR, ISR, TMR, ICR, LDR, TPR, the
  // timer counts and the divide configuration 0; DFR all ones; every LVT entry
  // masked (00010000H); SVR 000000FFH (software disabled); ID = apic_id << 24.
  // Also drops a pending NMI and latched errors.
  void Reset();

  // A 4-byte access at `offset` within the APIC page, at time `now_ns`.  The
  // caller passes aligned 4-byte accesses only (splitting or rejecting other
  // sizes is the MMIO layer's job).  Registers sit at multiples of 10H up to
  // 3F0H; any other offset, including offsets at or beyond the page size,
  // reads 0 and ignores writes.  Reserved bits read 0 and ignore writes;
  // read-only registers ignore writes; EOI reads 0.  Every call first runs
  // Advance(now_ns), so its effects are those of the register at `now_ns`.
  uint32_t Read(uint32_t offset, uint64_t now_ns);
  void Write(uint32_t offset, uint32_t value, uint64_t now_ns);

  // A fixed-delivery interrupt arriving at this APIC (from an IPI, an LVT
  // entry or the caller, e.g. an MSI or the I/O APIC): sets the vector's IRR
  // bit, and its TMR bit to `level` (SDM 10.8.4).  Vectors 0-15 are illegal:
  // ESR "received illegal vector" is latched and the interrupt dropped (SDM
  // 10.5.3).  While the APIC is software disabled the interrupt is dropped,
  // as KVM does.  True if the interrupt was accepted.
  bool Raise(uint8_t vector, bool level = false);

  // Whether a destination (an IPI's or an I/O APIC entry's) names this APIC:
  // physical mode (SDM 10.6.2.1) or logical, flat or cluster model (10.6.2.2);
  // FFH is a broadcast in both.
  bool Accepts(uint8_t dest, bool logical) const { return MatchesDestination(dest, logical); }
  // A 32-bit destination (an MSI's through x2APIC interrupt remapping): the
  // x2APIC rules in x2APIC mode, its low 8 bits otherwise.
  bool AcceptsWide(uint32_t dest, bool logical) const {
    return x2apic_mode_ ? MatchesX2apicDestination(dest, logical) : MatchesDestination(uint8_t(dest), logical);
  }

  // Called with the vector of each EOI of a level-triggered interrupt
  // (SDM 10.8.5: the EOI broadcast to the I/O APICs).
  void SetLevelEoiListener(std::function<void(uint8_t vector)> listener) { level_eoi_ = std::move(listener); }

  // The vector the APIC would present to the processor now: the highest IRR
  // vector whose priority class (vector[7:4]) is above the processor-priority
  // class PPR[7:4] (SDM 10.8.3.1, 10.8.4), if the APIC is software enabled.
  // The processor's own gating (RFLAGS.IF, interrupt shadow) is the caller's.
  std::optional<uint8_t> Pending() const;

  // The processor takes the interrupt: moves the Pending() vector from IRR to
  // ISR and returns it (SDM 10.8.4).  With nothing pending it returns the
  // spurious vector SVR[7:0] and changes nothing (SDM 10.9).
  uint8_t Acknowledge();

  // True if an ICR write delivered an NMI to this APIC since the last call
  // (NMIs bypass IRR/ISR, SDM 10.8.4 note; several before a call count as
  // one).  The caller injects it.
  bool TakeNmi();

  // Processes timer expirations up to `now_ns` (SDM 10.5.4): a one-shot timer
  // raises the LVT timer vector once and stops at count 0; a periodic timer
  // re-arms from the initial count.  Any number of elapsed periods is handled
  // in constant time and raises the vector once (IRR holds one bit per
  // vector).  Nothing is raised while the LVT timer entry is masked.  Time
  // never runs backwards: an earlier `now_ns` than already seen is treated as
  // the latest one seen.
  void Advance(uint64_t now_ns);

  // When the next timer expiration that raises an interrupt is due, or
  // nullopt when none is (timer stopped, one-shot expired, or LVT timer
  // masked).  The caller's run loop calls Advance at (or after) that time.
  // Saturates at UINT64_MAX.
  std::optional<uint64_t> NextDeadline() const;

  // Import/export in the layout of kvm_lapic_state.regs: register R at
  // regs[R], 32-bit little-endian.  SetState takes every writable register
  // (reserved bits dropped), IRR/ISR/TMR, ESR, the LINT Remote IRR bits and
  // the timer: with a non-zero initial count the countdown restarts at
  // `now_ns` from the current count at 390H (what KVM_GET_LAPIC stores there);
  // a current count of 0 means a full period in periodic mode and an expired
  // timer in one-shot mode.  An armed TSC deadline (not in the page) stays
  // armed if the timer was and stays in TSC-deadline mode (KVM_SET_LAPIC
  // keeps it too); otherwise it is disarmed.  It ignores the version (fixed at construction),
  // APR, PPR and RRD (computed), takes the LVT entries as they are even while
  // software disabled (KVM's reset state is SVR disabled with LINT0 in ExtINT
  // mode unmasked: the virtual wire; SDM 10.4.7.2's forced masks apply to
  // writes) and clears errors not yet latched into ESR.  A pending NMI is not part of the page and is kept.
  // GetState writes the state as of `now_ns` (expirations up to then
  // included, without changing this object): every register at its offset,
  // the current count at 390H, PPR at 0A0H, zeros elsewhere.  For a page that
  // obeys these rules, GetState(SetState(page, t), t) == page byte for byte.
  // Caveat in the KVM direction: KVM_SET_LAPIC restarts a one-shot timer
  // whose current count is 0 and initial count is not (Linux
  // set_target_expiration(): at once on current kernels, one period later on
  // older ones), so an expired one-shot timer moved to KVM fires once more.
  void SetState(const uint8_t regs[kLapicStateSize], uint64_t now_ns);
  void GetState(uint8_t regs[kLapicStateSize], uint64_t now_ns) const;

  // IA32_TSC_DEADLINE (SDM 10.5.4.1), for a configuration with tsc_deadline.
  // Outside TSC-deadline mode it reads 0 and writes are ignored; in it a
  // write of 0 disarms the timer, any other value arms it for `deadline_ns`
  // (the caller's conversion of that TSC value to this model's time; a time
  // at or before `now_ns` fires at once).  The timer interrupt (if the LVT
  // entry is unmasked) comes when the time reaches it, and the MSR then
  // reads 0 again (disarmed, also when masked).  Leaving or entering
  // TSC-deadline mode through the LVT timer entry disarms it and stops a
  // countdown, clearing the initial count (KVM); in the mode the initial
  // count ignores writes and the current count reads 0.
  uint64_t ReadTscDeadline(uint64_t now_ns);
  void WriteTscDeadline(uint64_t tsc, uint64_t deadline_ns, uint64_t now_ns);
  // The armed deadline's TSC value (0: none), as of the last time the
  // model advanced: what ReadTscDeadline reads, without advancing (for a
  // debugger's look, which must not change the guest's state).
  uint64_t armed_tsc_deadline() const { return tsc_deadline_mode() ? tsc_deadline_ : 0; }
  bool tsc_deadline_mode() const {
    return config_.tsc_deadline && (lvt_[kLvtTimer] & kApicLvtTimerModeMask) == kApicLvtTimerTscDeadline;
  }

  // x2APIC mode on or off, as IA32_APIC_BASE.EXTD (the caller checks the
  // transitions, SDM 10.12.5).  Entering it gives the APIC its x2APIC ID
  // (apic_id, read only) and the logical ID derived from it (10.12.10.2:
  // cluster ID[19:4] in LDR[31:16], bit ID[3:0] of LDR[15:0]); leaving it
  // (only through the disabled state) gives back the xAPIC ID apic_id << 24,
  // as KVM does.  Ignored without LapicConfig::x2apic.
  void SetX2apicMode(bool on);
  bool x2apic_mode() const { return x2apic_mode_; }
  // RDMSR/WRMSR of MSR 800H + (offset >> 4) in x2APIC mode (10.12.1.2, table
  // 10-6); false means #GP: outside x2APIC mode, an MSR with no register
  // (DFR, ICR high, APR, RRD, reserved), a read of a write-only register (EOI,
  // SELF IPI), a write of a read-only one (ID, version, PPR, LDR, ISR, TMR,
  // IRR, current count), a write with bits 63:32 set (but the ICR), a
  // non-zero write to EOI or ESR (table 10-6), SELF IPI bits 31:8 set
  // (10.12.1.3).  Other reserved bits in the low half are dropped, as in
  // xAPIC mode and as KVM does (10.12.1.3 would #GP them; KVM also takes a
  // non-zero EOI write).  The ICR is one 64-bit register whose
  // write sends the IPI; SELF IPI (83FH) sends a fixed interrupt to this APIC
  // with the vector in bits 7:0.  Page-layout state (GetState/SetState) keeps
  // KVM's convention in x2APIC mode: ID apic_id << 24 at 20H, the logical ID
  // at 0D0H, the ICR's destination (bits 63:32) at 310H.
  bool ReadX2apicMsr(uint32_t msr, uint64_t& value, uint64_t now_ns);
  bool WriteX2apicMsr(uint32_t msr, uint64_t value, uint64_t now_ns);

  bool software_enabled() const { return (svr_ & kApicSvrEnable) != 0; }
  // LVT LINT0 (350H): in ExtINT mode and unmasked it passes the 8259's INTR
  // to the processor (SDM 10.5.1; virtual wire mode).
  uint32_t lvt_lint0() const { return lvt_[kLvtLint0]; }
  const LapicConfig& config() const { return config_; }

 private:
  // LVT entries, in the order of their offsets (CMCI at 2F0H, then 320H..370H).
  enum LvtIndex : int { kLvtCmci, kLvtTimer, kLvtThermal, kLvtPerf, kLvtLint0, kLvtLint1, kLvtError, kLvtCount };

  explicit Lapic(const LapicConfig& config);

  bool has_cmci() const { return ((config_.version >> 16) & 0xFF) >= 6; }
  uint32_t svr_mask() const;
  // Register value at `offset` with no side effects (the timer as of `now_ns`).
  uint32_t Peek(uint32_t offset, uint64_t now_ns) const;
  void WriteLvt(int index, uint32_t value);
  uint8_t Ppr() const;
  bool AcceptFixed(uint8_t vector, bool level = false);
  void LogError(uint32_t bits);
  void Eoi();
  void SendIpi();
  bool MatchesDestination(uint8_t dest, bool logical) const;
  // x2APIC destinations (10.12.9, 10.12.10.2): 32 bits, FFFFFFFFH a broadcast.
  bool MatchesX2apicDestination(uint32_t dest, bool logical) const;
  uint32_t X2apicLdr() const;

  // Timer arithmetic (SDM 10.5.4).
  uint32_t divide() const;
  absl::uint128 TicksAt(uint64_t now_ns) const;  // timer ticks since arm_ns_
  absl::uint128 NsForTicks(absl::uint128 ticks) const;
  uint32_t CurrentCount(uint64_t now_ns) const;
  bool periodic() const { return (lvt_[kLvtTimer] & kApicLvtTimerModeMask) == kApicLvtTimerPeriodic; }
  uint32_t LvtMask(int index) const;
  void Rebase(uint64_t now_ns, bool keep_phase);

  LapicConfig config_;
  uint32_t id_ = 0, tpr_ = 0, ldr_ = 0, dfr_ = 0, svr_ = 0;
  uint32_t esr_ = 0;          // the ESR the guest reads
  uint32_t esr_pending_ = 0;  // errors detected since the last ESR write
  uint32_t icr_low_ = 0, icr_high_ = 0;
  std::array<uint32_t, kLvtCount> lvt_{};
  uint32_t initial_count_ = 0, dcr_ = 0;
  std::array<uint32_t, 8> isr_{}, tmr_{}, irr_{};
  bool nmi_pending_ = false;
  bool x2apic_mode_ = false;

  // The countdown: `first_count_` counts from `arm_ns_`, then (periodic)
  // reloads of `initial_count_`; `expirations_` of them have been processed.
  bool counting_ = false;
  uint64_t arm_ns_ = 0;
  uint32_t first_count_ = 0;
  absl::uint128 expirations_ = 0;
  uint64_t last_now_ns_ = 0;
  // TSC-deadline mode: the MSR's value (0: disarmed) and when it fires.
  uint64_t tsc_deadline_ = 0;
  uint64_t deadline_ns_ = 0;

  std::function<void(uint8_t)> level_eoi_;
};

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_LAPIC_H_
