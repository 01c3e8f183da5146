// ioapic.cc: see ioapic.h.
#include "vcpu/ioapic.h"

#include <utility>

namespace vbts::vcpu {
namespace {

constexpr uint32_t kRegSel = 0x00, kWindow = 0x10;  // MMIO offsets
constexpr uint32_t kRegId = 0x00, kRegVersion = 0x01, kRegArb = 0x02, kRegRedir0 = 0x10;
// 24 pins (maximum redirection entry 23 in bits 23:16), version 11H.
constexpr uint32_t kVersion = ((kIoapicPins - 1) << 16) | 0x11;

// Redirection entry bits (datasheet 3.2.4).
constexpr uint64_t kVector = 0xFF;
constexpr int kDeliveryShift = 8;
constexpr uint64_t kDestLogical = 1ull << 11;
constexpr uint64_t kRemoteIrr = 1ull << 14;
constexpr uint64_t kLevel = 1ull << 15;
constexpr uint64_t kMasked = 1ull << 16;
// Writable: vector, delivery mode, destination mode, polarity, trigger
// mode, mask (low half); destination and extended destination ID (high
// half: bits 63:48, ICH9 datasheet 13.5.7; the remappable format's
// interrupt index, VT-d spec 5.1.5.1).
constexpr uint64_t kLowWritable = 0x1AFFF;
constexpr uint64_t kHighWritable = 0xFFFF0000;

constexpr uint32_t kDeliveryFixed = 0, kDeliveryLowest = 1, kDeliveryNmi = 4;

}  // namespace

Ioapic::Ioapic(DeliverFn deliver, NmiFn nmi) : deliver_(std::move(deliver)), nmi_(std::move(nmi)) { Reset(); }

void Ioapic::Reset() {
  const uint64_t base = s_.base_address;
  s_ = IoapicState{};
  s_.base_address = base;
  for (uint64_t& e : s_.redirtbl) e = kMasked;
}

uint32_t Ioapic::Read(uint32_t offset) const {
  switch (offset) {
    case kRegSel: return s_.ioregsel;
    case kWindow: return ReadIndirect(s_.ioregsel);
    default: return 0;
  }
}

void Ioapic::Write(uint32_t offset, uint32_t value) {
  switch (offset) {
    case kRegSel: s_.ioregsel = value & 0xFF; return;
    case kWindow: WriteIndirect(s_.ioregsel, value); return;
    default: return;
  }
}

uint32_t Ioapic::ReadIndirect(uint32_t reg) const {
  switch (reg) {
    case kRegId:
    case kRegArb:  // the arbitration ID is loaded from the ID (datasheet 3.2.3)
      return (s_.id & 0xF) << 24;
    case kRegVersion:
      return kVersion;
    default:
      break;
  }
  if (reg < kRegRedir0 || reg >= kRegRedir0 + 2 * kIoapicPins) return 0;
  const uint64_t e = s_.redirtbl[(reg - kRegRedir0) / 2];
  return (reg & 1) ? static_cast<uint32_t>(e >> 32) : static_cast<uint32_t>(e);
}

void Ioapic::WriteIndirect(uint32_t reg, uint32_t value) {
  if (reg == kRegId) {
    s_.id = (value >> 24) & 0xF;
    return;
  }
  if (reg < kRegRedir0 || reg >= kRegRedir0 + 2 * kIoapicPins) return;  // version, arbitration: read only
  const int pin = static_cast<int>((reg - kRegRedir0) / 2);
  uint64_t& e = s_.redirtbl[pin];
  if (reg & 1) {
    e = (e & 0xFFFFFFFFull) | ((static_cast<uint64_t>(value) << 32) & (kHighWritable << 32));
  } else {
    // Delivery status and Remote IRR are read only (kept); an entry that is
    // now edge triggered has no Remote IRR (KVM: Linux relies on it).
    const uint64_t kept = e & ((kHighWritable << 32) | kRemoteIrr);
    e = kept | (value & kLowWritable);
    if (!(e & kLevel)) e &= ~kRemoteIrr;
  }
  // A level entry whose line is high delivers once unmasked (Service checks
  // the mask and Remote IRR).
  if ((e & kLevel) && (s_.irr & (1u << pin))) Service(pin);
}

void Ioapic::SetLine(uint32_t pin, bool level) {
  if (pin >= static_cast<uint32_t>(kIoapicPins)) return;
  const uint32_t bit = 1u << pin;
  if (!level) {
    s_.irr &= ~bit;
    return;
  }
  const uint32_t old = s_.irr;
  s_.irr |= bit;
  // An edge pin delivers on the rising edge only; a level pin whenever its
  // entry lets it (Service checks the mask and Remote IRR).
  if (!(s_.redirtbl[pin] & kLevel) && old == s_.irr) return;
  Service(static_cast<int>(pin));
}

void Ioapic::Service(int pin) {
  uint64_t& e = s_.redirtbl[pin];
  const bool level = (e & kLevel) != 0;
  if ((e & kMasked) || (level && (e & kRemoteIrr))) return;
  const uint8_t dest = static_cast<uint8_t>(e >> 56);
  const bool logical = (e & kDestLogical) != 0;
  bool accepted = false;
  const uint64_t mode = (e >> kDeliveryShift) & 7;
  if (remap_ && (mode == kDeliveryFixed || mode == kDeliveryLowest || mode == kDeliveryNmi)) {
    if (remap_(e) && level) e |= kRemoteIrr;
    return;
  }
  switch (mode) {
    case kDeliveryFixed:
    case kDeliveryLowest:
      accepted = deliver_ && deliver_(Delivery{static_cast<uint8_t>(e & kVector), level, dest, logical});
      break;
    case kDeliveryNmi:
      if (nmi_) nmi_(dest, logical);
      accepted = true;
      break;
    default:  // SMI, INIT, ExtINT (no 8259 in the model), reserved
      return;
  }
  if (accepted && level) e |= kRemoteIrr;
}

void Ioapic::Eoi(uint8_t vector) {
  for (int pin = 0; pin < kIoapicPins; pin++) {
    uint64_t& e = s_.redirtbl[pin];
    if ((e & kVector) != vector || !(e & kLevel)) continue;
    e &= ~kRemoteIrr;
    if (s_.irr & (1u << pin)) Service(pin);
  }
}

IoapicState Ioapic::GetState() const { return s_; }

void Ioapic::SetState(const IoapicState& s) {
  s_ = s;
  s_.ioregsel &= 0xFF;
  s_.id &= 0xF;
  s_.irr &= (1u << kIoapicPins) - 1;
}

}  // namespace vbts::vcpu
