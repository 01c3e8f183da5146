// lapic.cc: the local xAPIC model (see lapic.h).  Section numbers are those of
// the Intel SDM vol. 3A chapter 10, "Advanced Programmable Interrupt
// Controller (APIC)".
#include "vcpu/lapic.h"

#include <array>
#include <bit>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/bits.h"

namespace vbts::vcpu {
namespace {

constexpr uint64_t kMaxBusHz = 1'000'000'000'000;  // keeps the timer's 128-bit products bounded

// Writable bits of each register (SDM figures 10-7 to 10-14, 10-23).
constexpr uint32_t kIdMask = 0xFF000000;    // 10.4.6: xAPIC ID in bits 31:24
constexpr uint32_t kTprMask = 0xFF;         // 10.8.3.1
constexpr uint32_t kLdrMask = 0xFF000000;   // 10.6.2.2, figure 10-13
constexpr uint32_t kDfrModel = 0xF0000000;  // 10.6.2.2, figure 10-14: bits 27:0 reserved, read as 1s
constexpr uint32_t kDfrReservedOnes = 0x0FFFFFFF;
constexpr uint32_t kSvrBase = 0x3FF;        // 10.9, figure 10-23: vector, enable, focus checking
constexpr uint32_t kSvrEoiSuppression = 1u << 12;
constexpr uint32_t kVersionEoiSuppression = 1u << 24;  // 10.4.8, figure 10-7
constexpr uint32_t kEsrMask = 0xFF;         // 10.5.3, figure 10-9
constexpr uint32_t kIcrLowMask = 0x000CCFFF;   // 10.6.1, figure 10-12 (no bit 12, 13, 16, 17, 20..31)
constexpr uint32_t kIcrHighMask = 0xFF000000;  // destination field, bits 63:56 of the ICR
constexpr uint32_t kDcrMask = 0xB;             // 10.5.4, figure 10-10: bits 0, 1, 3
constexpr uint32_t kLvtResetValue = kApicLvtMasked;  // 10.4.7.1

// Writable bits of each LVT entry (10.5.1, figure 10-8).  Delivery status
// (bit 12) always reads 0 here.  The timer has no delivery mode (always
// fixed) and, without TSC-deadline support, only bit 17 of its mode field
// (10.5.4.1).  Only LINT0/LINT1 have polarity (13), Remote IRR (14, read
// only) and trigger mode (15).  The error entry has only vector and mask.
constexpr std::array<uint32_t, 7> kLvtMask = {
    0x000107FF,  // CMCI: vector, delivery mode, mask
    0x000300FF,  // timer: vector, mask, periodic
    0x000107FF,  // thermal
    0x000107FF,  // performance counters
    0x0001A7FF,  // LINT0: + polarity, trigger mode
    0x0001A7FF,  // LINT1
    0x000100FF,  // error
};

// ICR fields (10.6.1).
constexpr uint32_t kIcrDeliveryFixed = 0, kIcrDeliveryLowest = 1, kIcrDeliveryNmi = 4;
constexpr uint32_t kIcrDestLogical = 1u << 11;
constexpr uint32_t kShorthandNone = 0, kShorthandSelf = 1, kShorthandAllIncludingSelf = 2;

uint32_t Load32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

void Store32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
  p[2] = uint8_t(v >> 16);
  p[3] = uint8_t(v >> 24);
}

// Highest set bit of a 256-bit IRR/ISR/TMR image, or -1.
int HighestVector(const std::array<uint32_t, 8>& bits) {
  for (int i = 7; i >= 0; i--)
    if (bits[i] != 0) return i * 32 + 31 - std::countl_zero(bits[i]);
  return -1;
}

void SetBit(std::array<uint32_t, 8>& bits, uint8_t v) { bits[v / 32] |= 1u << (v % 32); }
void ClearBit(std::array<uint32_t, 8>& bits, uint8_t v) { bits[v / 32] &= ~(1u << (v % 32)); }
bool TestBit(const std::array<uint32_t, 8>& bits, uint8_t v) { return (bits[v / 32] >> (v % 32)) & 1; }

// Offset of LVT entry `index` (CMCI at 2F0H, the others from 320H on).
uint32_t LvtOffset(int index) { return index == 0 ? kApicRegLvtCmci : kApicRegLvtTimer + 0x10 * (index - 1); }

uint64_t SaturatingAdd(uint64_t a, absl::uint128 b) {
  absl::uint128 sum = absl::uint128(a) + b;
  return sum > std::numeric_limits<uint64_t>::max() ? std::numeric_limits<uint64_t>::max()
                                                   : absl::Uint128Low64(sum);
}

}  // namespace

absl::StatusOr<Lapic> Lapic::Create(const LapicConfig& config) {
  const uint32_t v = config.version;
  const uint32_t max_lvt = (v >> 16) & 0xFF;
  if ((v & ~(0xFFu | 0xFF0000u | kVersionEoiSuppression)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("LAPIC version 0x%08x sets reserved bits 0x%08x (SDM 10.4.8: only 7:0, 23:16 and 24 "
                        "are defined)",
                        v, v & ~(0xFFu | 0xFF0000u | kVersionEoiSuppression)));
  }
  if ((v & 0xF0) != 0x10) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "LAPIC version 0x%08x: version byte 0x%02x is not an integrated APIC (10H..1FH)", v, v & 0xFF));
  }
  if (max_lvt != 5 && max_lvt != 6) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "LAPIC version 0x%08x: max LVT entry %u, the model implements 5 (no CMCI) or 6 (with CMCI)", v, max_lvt));
  }
  if (config.bus_hz == 0 || config.bus_hz > kMaxBusHz) {
    return absl::InvalidArgumentError(
        absl::StrFormat("LAPIC bus clock %u Hz outside 1..%u Hz", config.bus_hz, kMaxBusHz));
  }
  return Lapic(config);
}

Lapic::Lapic() : Lapic(LapicConfig{}) {}

Lapic::Lapic(const LapicConfig& config) : config_(config) { Reset(); }

void Lapic::Reset() {
  // 10.4.7.1: power-up or RESET.
  id_ = uint32_t(config_.apic_id) << 24;
  tpr_ = ldr_ = 0;
  dfr_ = 0xFFFFFFFF;
  svr_ = 0xFF;
  esr_ = esr_pending_ = 0;
  icr_low_ = icr_high_ = 0;
  lvt_.fill(kLvtResetValue);
  if (!has_cmci()) lvt_[kLvtCmci] = 0;  // not implemented: reads 0
  initial_count_ = dcr_ = 0;
  isr_.fill(0);
  tmr_.fill(0);
  irr_.fill(0);
  nmi_pending_ = false;
  x2apic_mode_ = false;
  counting_ = false;
  arm_ns_ = 0;
  first_count_ = 0;
  expirations_ = 0;
  tsc_deadline_ = 0;
}

uint64_t Lapic::ReadTscDeadline(uint64_t now_ns) {
  Advance(now_ns);
  return tsc_deadline_mode() ? tsc_deadline_ : 0;
}

void Lapic::WriteTscDeadline(uint64_t tsc, uint64_t deadline_ns, uint64_t now_ns) {
  Advance(now_ns);
  if (!tsc_deadline_mode()) return;  // 10.5.4.1: ignored in the other modes
  tsc_deadline_ = tsc;
  deadline_ns_ = deadline_ns;
  Advance(last_now_ns_);  // a deadline already passed fires now
}

uint32_t Lapic::svr_mask() const {
  // 10.9: bit 12 (suppress EOI broadcasts) exists only when the version
  // register's bit 24 says so.
  return kSvrBase | ((config_.version & kVersionEoiSuppression) ? kSvrEoiSuppression : 0);
}

uint8_t Lapic::Ppr() const {
  // 10.8.3.1: PPR = TPR if TPR[7:4] >= ISRV[7:4], else ISRV[7:4]:0, where
  // ISRV is the highest in-service vector (0 if none).
  const int isrv_signed = HighestVector(isr_);
  const uint32_t isrv = isrv_signed < 0 ? 0 : uint32_t(isrv_signed);
  if ((tpr_ >> 4) >= (isrv >> 4)) return uint8_t(tpr_);
  return uint8_t(isrv & 0xF0);
}

uint32_t Lapic::Peek(uint32_t offset, uint64_t now_ns) const {
  if ((offset & 0xF) != 0 || offset >= kLapicStateSize) return 0;
  if (offset >= kApicRegIsr && offset < kApicRegIsr + 0x80) return isr_[(offset - kApicRegIsr) / 0x10];
  if (offset >= kApicRegTmr && offset < kApicRegTmr + 0x80) return tmr_[(offset - kApicRegTmr) / 0x10];
  if (offset >= kApicRegIrr && offset < kApicRegIrr + 0x80) return irr_[(offset - kApicRegIrr) / 0x10];
  if (offset >= kApicRegLvtTimer && offset <= kApicRegLvtError)
    return lvt_[kLvtTimer + (offset - kApicRegLvtTimer) / 0x10];
  switch (offset) {
    case kApicRegId: return id_;
    case kApicRegVersion: return config_.version;  // 10.4.8: read only
    case kApicRegTpr: return tpr_;
    case kApicRegPpr: return Ppr();
    case kApicRegLdr: return ldr_;
    case kApicRegDfr: return dfr_;
    case kApicRegSvr: return svr_;
    case kApicRegEsr: return esr_;
    case kApicRegLvtCmci: return lvt_[kLvtCmci];  // 0 when not implemented
    case kApicRegIcrLow: return icr_low_;
    case kApicRegIcrHigh: return icr_high_;
    case kApicRegTimerInitialCount: return initial_count_;
    case kApicRegTimerCurrentCount: return CurrentCount(now_ns);
    case kApicRegTimerDivide: return dcr_;
    // APR and RRD (P6-era arbitration and remote read, table 10-1; KVM
    // reads them as 0 too), EOI (write only, 10.8.5) and reserved offsets
    // read 0.
    default: return 0;
  }
}

uint32_t Lapic::Read(uint32_t offset, uint64_t now_ns) {
  Advance(now_ns);
  return Peek(offset, last_now_ns_);
}

uint32_t Lapic::LvtMask(int index) const {
  // With TSC-deadline support the timer's mode field is bits 18:17 (10.5.4.1).
  if (index == kLvtTimer && config_.tsc_deadline) return kLvtMask[index] | kApicLvtTimerModeMask;
  return kLvtMask[index];
}

void Lapic::WriteLvt(int index, uint32_t value) {
  uint32_t v = value & LvtMask(index);
  if (index == kLvtLint0 || index == kLvtLint1) v |= lvt_[index] & kApicLvtRemoteIrr;  // read only
  // 10.4.7.2: while software disabled the mask bits are set and attempts to
  // clear them are ignored.
  if (!software_enabled()) v |= kApicLvtMasked;
  lvt_[index] = v;
}

void Lapic::Write(uint32_t offset, uint32_t value, uint64_t now_ns) {
  Advance(now_ns);
  const uint64_t now = last_now_ns_;
  if ((offset & 0xF) != 0 || offset >= kLapicStateSize) return;
  switch (offset) {
    case kApicRegId:
      // 10.4.6: software may change the APIC ID on some processors; KVM lets it.
      id_ = value & kIdMask;
      return;
    case kApicRegTpr:
      tpr_ = value & kTprMask;
      return;
    case kApicRegEoi:
      Eoi();
      return;
    case kApicRegLdr:
      ldr_ = value & kLdrMask;
      return;
    case kApicRegDfr:
      dfr_ = (value & kDfrModel) | kDfrReservedOnes;
      return;
    case kApicRegSvr:
      svr_ = value & svr_mask();
      if (!software_enabled()) {
        // 10.4.7.2: software disabling sets every LVT mask bit.
        for (int i = 0; i < kLvtCount; i++)
          if (i != kLvtCmci || has_cmci()) lvt_[i] |= kApicLvtMasked;
      }
      return;
    case kApicRegEsr:
      // 10.5.3: a write (of any value) clears the errors logged so far and
      // loads the ESR with the errors detected since the previous write.
      esr_ = esr_pending_;
      esr_pending_ = 0;
      return;
    case kApicRegLvtCmci:
      if (has_cmci()) WriteLvt(kLvtCmci, value);
      return;
    case kApicRegIcrLow:
      // 10.6.1: writing the low doubleword sends the IPI.
      icr_low_ = value & kIcrLowMask;
      SendIpi();
      return;
    case kApicRegIcrHigh:
      icr_high_ = value & kIcrHighMask;
      return;
    case kApicRegLvtTimer:
      // 10.5.4: changing the mode does not restart the timer; the running
      // countdown ends under the new mode.  Re-base the countdown at the
      // last tick boundary so that ticks already counted keep the old mode's
      // meaning.
      if (const bool deadline = (value & LvtMask(kLvtTimer) & kApicLvtTimerModeMask) == kApicLvtTimerTscDeadline;
          deadline != tsc_deadline_mode()) {
        // Into or out of TSC-deadline mode: KVM stops the timer, clearing
        // the initial count, and disarms the deadline.
        counting_ = false;
        initial_count_ = first_count_ = 0;
        expirations_ = 0;
        tsc_deadline_ = 0;
      } else if (counting_ && ((lvt_[kLvtTimer] ^ value) & kApicLvtTimerModeMask)) {
        Rebase(now, /*keep_phase=*/true);
      }
      WriteLvt(kLvtTimer, value);
      return;
    case kApicRegLvtThermal:
    case kApicRegLvtPerf:
    case kApicRegLvtLint0:
    case kApicRegLvtLint1:
    case kApicRegLvtError:
      WriteLvt(kLvtTimer + int((offset - kApicRegLvtTimer) / 0x10), value);
      return;
    case kApicRegTimerInitialCount:
      // 10.5.4: a write copies the initial count into the current count and
      // starts counting down; writing 0 stops the timer.  Ignored in
      // TSC-deadline mode (10.5.4.1).
      if (tsc_deadline_mode()) return;
      initial_count_ = value;
      counting_ = value != 0;
      arm_ns_ = now;
      first_count_ = value;
      expirations_ = 0;
      return;
    case kApicRegTimerDivide:
      // 10.5.4 does not say what a divide change does to a count in
      // progress; like KVM, the remaining count continues at the new rate.
      if (counting_) Rebase(now, /*keep_phase=*/false);
      dcr_ = value & kDcrMask;
      return;
    default:
      // Version, APR, PPR, RRD, ISR, TMR, IRR, current count: read only.
      // Reserved offsets: ignored.
      return;
  }
}

bool Lapic::AcceptFixed(uint8_t vector, bool level) {
  // 10.8.4: the vector's IRR bit is set; the TMR bit is set for a
  // level-triggered interrupt and cleared for an edge-triggered one.
  // 10.4.7.2 does not say whether a software-disabled APIC accepts fixed
  // interrupts; KVM drops them.
  if (!software_enabled()) return false;
  SetBit(irr_, vector);
  if (level) SetBit(tmr_, vector);
  else ClearBit(tmr_, vector);
  return true;
}

void Lapic::LogError(uint32_t bits) {
  // 10.5.3: errors are collected whatever the LVT error mask; an unmasked LVT
  // error entry raises its vector.  That delivery is itself checked for an
  // illegal vector, without a second error interrupt.
  esr_pending_ |= bits;
  const uint32_t lvt = lvt_[kLvtError];
  if (lvt & kApicLvtMasked) return;
  const uint8_t vector = uint8_t(lvt);
  if (vector < 16) {
    esr_pending_ |= kApicEsrReceiveIllegalVector;
    return;
  }
  AcceptFixed(vector);
}

bool Lapic::Raise(uint8_t vector, bool level) {
  // 10.5.3 (ESR bit 6) and 10.5.2: vectors 0-15 are never set in IRR.
  if (vector < 16) {
    LogError(kApicEsrReceiveIllegalVector);
    return false;
  }
  return AcceptFixed(vector, level);
}

std::optional<uint8_t> Lapic::Pending() const {
  if (!software_enabled()) return std::nullopt;
  const int v = HighestVector(irr_);
  // 10.8.3.1: only interrupts whose priority class is above PPR[7:4] reach
  // the processor.  The highest IRR vector has the highest class, so when it
  // is blocked every other one is too.
  if (v < 0 || (v >> 4) <= (Ppr() >> 4)) return std::nullopt;
  return uint8_t(v);
}

uint8_t Lapic::Acknowledge() {
  const std::optional<uint8_t> v = Pending();
  // 10.9: an interrupt that became masked before the acknowledge yields the
  // spurious vector, with no ISR bit set.
  if (!v) return uint8_t(svr_);
  ClearBit(irr_, *v);
  SetBit(isr_, *v);
  return *v;
}

void Lapic::Eoi() {
  // 10.8.5: an EOI clears the highest-priority ISR bit; for a vector whose
  // TMR bit is set (level triggered) it is broadcast to the I/O APICs,
  // unless SVR bit 12 suppresses the broadcast.
  const int v = HighestVector(isr_);
  if (v < 0) return;
  ClearBit(isr_, uint8_t(v));
  if (TestBit(tmr_, uint8_t(v)) && !(svr_ & kSvrEoiSuppression) && level_eoi_) level_eoi_(uint8_t(v));
}

bool Lapic::TakeNmi() {
  const bool nmi = nmi_pending_;
  nmi_pending_ = false;
  return nmi;
}

uint32_t Lapic::X2apicLdr() const {
  const uint32_t id = config_.apic_id;
  return ((id >> 4) << 16) | (1u << (id & 0xF));
}

bool Lapic::MatchesX2apicDestination(uint32_t dest, bool logical) const {
  if (dest == 0xFFFFFFFF) return true;
  if (!logical) return dest == config_.apic_id;  // 10.12.9: the 32-bit x2APIC ID
  // 10.12.10.2: cluster in bits 31:16, one bit per member in 15:0.
  const uint32_t ldr = X2apicLdr();
  return (dest >> 16) == (ldr >> 16) && (dest & ldr & 0xFFFF) != 0;
}

void Lapic::SetX2apicMode(bool on) {
  if (!config_.x2apic || on == x2apic_mode_) return;
  x2apic_mode_ = on;
  id_ = uint32_t(config_.apic_id) << 24;
  ldr_ = on ? X2apicLdr() : 0;
  icr_high_ = 0;
}

bool Lapic::ReadX2apicMsr(uint32_t msr, uint64_t& value, uint64_t now_ns) {
  if (!x2apic_mode_ || msr < 0x800 || msr > 0x8FF) return false;
  const uint32_t offset = (msr - 0x800) << 4;
  Advance(now_ns);
  const uint64_t now = last_now_ns_;
  if ((offset >= kApicRegIsr && offset < kApicRegIrr + 0x80) ||
      (offset >= kApicRegLvtTimer && offset <= kApicRegLvtError)) {
    value = Peek(offset, now);
    return true;
  }
  switch (offset) {
    case kApicRegId:
      value = config_.apic_id;
      return true;
    case kApicRegIcrLow:
      value = uint64_t(icr_high_) << 32 | icr_low_;
      return true;
    case kApicRegLvtCmci:
      if (!has_cmci()) return false;
      [[fallthrough]];
    case kApicRegVersion: case kApicRegTpr: case kApicRegPpr: case kApicRegLdr: case kApicRegSvr:
    case kApicRegEsr: case kApicRegTimerInitialCount: case kApicRegTimerCurrentCount: case kApicRegTimerDivide:
      value = Peek(offset, now);
      return true;
    default:  // EOI and SELF IPI (write only), DFR, ICR high, APR, RRD, reserved
      return false;
  }
}

bool Lapic::WriteX2apicMsr(uint32_t msr, uint64_t value, uint64_t now_ns) {
  if (!x2apic_mode_ || msr < 0x800 || msr > 0x8FF) return false;
  const uint32_t offset = (msr - 0x800) << 4;
  if (offset == kApicRegIcrLow) {
    // 10.12.9: one 64-bit write; bits 13, 16-17 and 20-31 of the low half
    // are reserved (no delivery status: bit 12 reserved too).
    Advance(now_ns);
    icr_low_ = uint32_t(value) & kIcrLowMask;
    icr_high_ = uint32_t(value >> 32);
    SendIpi();
    return true;
  }
  if (value >> 32) return false;  // 10.12.1.2: bits 63:32 reserved
  const uint32_t v = uint32_t(value);
  switch (offset) {
    case kApicRegEoi:
    case kApicRegEsr:
      if (v != 0) return false;  // 10.12.1.2: a non-zero write raises #GP
      Write(offset, 0, now_ns);
      return true;
    case 0x3F0: {  // SELF IPI (10.12.11): a fixed, edge-triggered interrupt to this APIC
      if (v & ~0xFFu) return false;  // 10.12.1.3: bits 31:8 reserved (kvm-unit-tests msr.c)
      Advance(now_ns);
      const uint8_t vector = uint8_t(v);
      if (vector < 16) LogError(kApicEsrSendIllegalVector);
      Raise(vector);
      return true;
    }
    case kApicRegLvtCmci:
      if (!has_cmci()) return false;
      [[fallthrough]];
    case kApicRegTpr: case kApicRegSvr: case kApicRegLvtTimer: case kApicRegLvtThermal: case kApicRegLvtPerf:
    case kApicRegLvtLint0: case kApicRegLvtLint1: case kApicRegLvtError: case kApicRegTimerInitialCount:
    case kApicRegTimerDivide:
      Write(offset, v, now_ns);
      return true;
    default:  // read only (ID, version, PPR, LDR, ISR, TMR, IRR, current count) or no register
      return false;
  }
}

bool Lapic::MatchesDestination(uint8_t dest, bool logical) const {
  // 10.6.2.1 / 10.6.2.2: a destination of FFH is a broadcast in either mode.
  if (dest == 0xFF) return true;
  // An 8-bit destination (an I/O APIC entry's) at an APIC in x2APIC mode: its
  // ID as an x2APIC destination, FFH still a broadcast (as KVM converts it).
  if (x2apic_mode_) return MatchesX2apicDestination(dest, logical);
  if (!logical) return dest == uint8_t(id_ >> 24);  // 10.6.2.1: physical
  const uint8_t ldr = uint8_t(ldr_ >> 24);
  switch (dfr_ >> 28) {
    case 0xF:  // 10.6.2.2 flat model: any common bit
      return (ldr & dest) != 0;
    case 0x0:  // cluster model: same cluster (bits 7:4), a common member bit (3:0)
      return (ldr >> 4) == (dest >> 4) && (ldr & dest & 0xF) != 0;
    default:  // an undefined model matches nothing
      return false;
  }
}

void Lapic::SendIpi() {
  const uint8_t vector = uint8_t(icr_low_);
  const uint32_t delivery = (icr_low_ >> 8) & 7;
  const uint32_t shorthand = (icr_low_ >> 18) & 3;
  bool to_self;
  switch (shorthand) {
    case kShorthandSelf:
    case kShorthandAllIncludingSelf:
      to_self = true;
      break;
    case kShorthandNone:
      to_self = x2apic_mode_ ? MatchesX2apicDestination(icr_high_, (icr_low_ & kIcrDestLogical) != 0)
                             : MatchesDestination(uint8_t(icr_high_ >> 24), (icr_low_ & kIcrDestLogical) != 0);
      break;
    default:  // all excluding self: there is no other processor
      to_self = false;
      break;
  }
  switch (delivery) {
    case kIcrDeliveryFixed:
    case kIcrDeliveryLowest:  // 10.6.2.4: the only candidate is this processor
      // 10.5.3 bit 5: the sender flags an illegal vector; a copy it receives
      // itself is flagged again (bit 6) by Raise.
      if (vector < 16) LogError(kApicEsrSendIllegalVector);
      if (to_self) Raise(vector);
      return;
    case kIcrDeliveryNmi:
      // 10.4.7.2: accepted even while software disabled.
      if (to_self) nmi_pending_ = true;
      return;
    default:
      // SMI, INIT, SIPI and the reserved modes are not modelled.
      return;
  }
}

uint32_t Lapic::divide() const {
  // 10.5.4, figure 10-10: bits 3,1:0 = 000 → 2, 001 → 4, ..., 110 → 128, 111 → 1.
  const uint32_t code = ((dcr_ >> 1) & 4) | (dcr_ & 3);
  return 1u << ((code + 1) & 7);
}

absl::uint128 Lapic::TicksAt(uint64_t now_ns) const {
  // Bus clocks elapsed since the countdown started, then one tick every
  // `divide()` clocks.  (2^64 ns × 1 THz < 2^104: no overflow.)
  if (now_ns <= arm_ns_) return 0;
  const absl::uint128 clocks = absl::uint128(now_ns - arm_ns_) * config_.bus_hz / kNsPerSecond;
  return clocks / divide();
}

absl::uint128 Lapic::NsForTicks(absl::uint128 ticks) const {
  // The first nanosecond (after arm_ns_) at which TicksAt reaches `ticks`:
  // ceil(ticks × divide × 1e9 / bus_hz).
  const absl::uint128 scaled = ticks * divide() * kNsPerSecond;
  return (scaled + config_.bus_hz - 1) / config_.bus_hz;
}

uint32_t Lapic::CurrentCount(uint64_t now_ns) const {
  if (!counting_) return 0;
  const absl::uint128 ticks = TicksAt(now_ns);
  if (ticks < first_count_) return first_count_ - absl::Uint128Low64(ticks);
  if (!periodic()) return 0;  // one-shot: stays 0
  // Periodic: reloaded from the initial count at each expiration.
  return initial_count_ - absl::Uint128Low64((ticks - first_count_) % initial_count_);
}

void Lapic::Rebase(uint64_t now_ns, bool keep_phase) {
  // Restarts the countdown from the count it has at `now_ns`.  With
  // `keep_phase` it restarts at the last tick boundary at or before `now_ns`
  // (same divider: the next expiration does not move); without, at `now_ns`,
  // dropping the part of a tick already elapsed (the divider changes, and a
  // partial old tick has no meaning at the new rate).  Callers have run
  // Advance(now_ns), so a one-shot countdown that is still counting has not
  // reached 0.
  const absl::uint128 ticks = TicksAt(now_ns);
  const uint32_t count = CurrentCount(now_ns);
  arm_ns_ = keep_phase ? SaturatingAdd(arm_ns_, NsForTicks(ticks)) : now_ns;
  first_count_ = count;
  expirations_ = 0;
  if (count == 0) counting_ = false;  // defensive: a one-shot at 0 has stopped
}

void Lapic::Advance(uint64_t now_ns) {
  if (now_ns < last_now_ns_) now_ns = last_now_ns_;
  last_now_ns_ = now_ns;
  if (tsc_deadline_ != 0 && now_ns >= deadline_ns_) {
    // 10.5.4.1: the deadline passed: one interrupt, and the timer disarms.
    tsc_deadline_ = 0;
    if (!(lvt_[kLvtTimer] & kApicLvtMasked)) Raise(uint8_t(lvt_[kLvtTimer]));
  }
  if (!counting_) return;
  const absl::uint128 ticks = TicksAt(now_ns);
  if (ticks < first_count_) return;
  const bool masked = (lvt_[kLvtTimer] & kApicLvtMasked) != 0;
  const uint8_t vector = uint8_t(lvt_[kLvtTimer]);
  if (!periodic()) {
    // 10.5.4 one-shot: one interrupt when the count reaches 0, where it stays.
    counting_ = false;
    if (!masked) Raise(vector);
    return;
  }
  // Periodic: expirations at first_count_, first_count_ + N, ... ticks.
  const absl::uint128 total = 1 + (ticks - first_count_) / initial_count_;
  if (total > expirations_) {
    expirations_ = total;
    if (!masked) Raise(vector);
  }
}

std::optional<uint64_t> Lapic::NextDeadline() const {
  if (lvt_[kLvtTimer] & kApicLvtMasked) return std::nullopt;
  if (tsc_deadline_ != 0) return deadline_ns_;
  if (!counting_) return std::nullopt;
  // The (expirations_ + 1)-th expiration; a counting one-shot has none yet.
  const absl::uint128 ticks = absl::uint128(first_count_) + expirations_ * initial_count_;
  return SaturatingAdd(arm_ns_, NsForTicks(ticks));
}

void Lapic::SetState(const uint8_t regs[kLapicStateSize], uint64_t now_ns) {
  auto reg = [&](uint32_t offset) { return Load32(regs + offset); };
  const bool was_deadline_mode = tsc_deadline_mode();
  last_now_ns_ = now_ns;
  id_ = reg(kApicRegId) & kIdMask;
  tpr_ = reg(kApicRegTpr) & kTprMask;
  // In x2APIC mode the logical ID follows from the ID (KVM recomputes it).
  ldr_ = x2apic_mode_ ? X2apicLdr() : reg(kApicRegLdr) & kLdrMask;
  dfr_ = (reg(kApicRegDfr) & kDfrModel) | kDfrReservedOnes;
  svr_ = reg(kApicRegSvr) & svr_mask();
  esr_ = reg(kApicRegEsr) & kEsrMask;
  esr_pending_ = 0;
  icr_low_ = reg(kApicRegIcrLow) & kIcrLowMask;
  icr_high_ = reg(kApicRegIcrHigh) & (x2apic_mode_ ? 0xFFFFFFFFu : kIcrHighMask);
  for (int i = 0; i < 8; i++) {
    // Bits for vectors 0-15 are reserved (10.8.4).
    const uint32_t valid = i == 0 ? 0xFFFF0000 : 0xFFFFFFFF;
    isr_[i] = reg(kApicRegIsr + 0x10 * i) & valid;
    tmr_[i] = reg(kApicRegTmr + 0x10 * i) & valid;
    irr_[i] = reg(kApicRegIrr + 0x10 * i) & valid;
  }
  for (int i = 0; i < kLvtCount; i++) {
    if (i == kLvtCmci && !has_cmci()) {
      lvt_[i] = 0;
      continue;
    }
    uint32_t mask = LvtMask(i);
    if (i == kLvtLint0 || i == kLvtLint1) mask |= kApicLvtRemoteIrr;
    lvt_[i] = reg(LvtOffset(i)) & mask;
    // Taken as is, also while software disabled: KVM's reset state is SVR
    // disabled with LINT0 in ExtINT mode unmasked (the virtual wire a BIOS
    // sets up), through which the 8259's interrupts arrive.  Writes keep
    // SDM 10.4.7.2's rule (masks forced while disabled).
  }
  initial_count_ = reg(kApicRegTimerInitialCount);
  dcr_ = reg(kApicRegTimerDivide) & kDcrMask;
  // The countdown restarts from the exported current count, as KVM_SET_LAPIC
  // does with the count KVM_GET_LAPIC stored at 390H.
  const uint32_t current = reg(kApicRegTimerCurrentCount);
  arm_ns_ = now_ns;
  expirations_ = 0;
  // The page holds no TSC deadline (an MSR): an armed one stays armed while
  // the timer stays in TSC-deadline mode, as KVM_SET_LAPIC keeps
  // lapic_timer.tscdeadline and restarts the timer from it; entering or
  // leaving the mode disarms it, as a write of the LVT timer entry does.
  if (!was_deadline_mode || !tsc_deadline_mode()) tsc_deadline_ = 0;
  if (tsc_deadline_mode()) initial_count_ = 0;
  counting_ = initial_count_ != 0 && (current != 0 || periodic());
  first_count_ = counting_ ? (current != 0 ? current : initial_count_) : 0;
}

void Lapic::GetState(uint8_t regs[kLapicStateSize], uint64_t now_ns) const {
  Lapic at_now = *this;
  at_now.Advance(now_ns);
  std::memset(regs, 0, kLapicStateSize);
  for (uint32_t offset = 0; offset < kLapicStateSize; offset += 0x10)
    Store32(regs + offset, at_now.Peek(offset, at_now.last_now_ns_));
}

}  // namespace vbts::vcpu
