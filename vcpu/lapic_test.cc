// lapic_test.cc: the local xAPIC model against the rules of SDM vol. 3A
// chapter 10, register by register, with exact values.
#include "vcpu/lapic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "base/testing/status_matchers.h"

namespace vbts::vcpu {
namespace {

using ::testing::HasSubstr;
using ::vbts::testing::StatusIs;

using Page = std::array<uint8_t, kLapicStateSize>;

uint32_t PageReg(const Page& p, uint32_t offset) {
  return uint32_t(p[offset]) | uint32_t(p[offset + 1]) << 8 | uint32_t(p[offset + 2]) << 16 |
         uint32_t(p[offset + 3]) << 24;
}

void SetPageReg(Page& p, uint32_t offset, uint32_t v) {
  for (int i = 0; i < 4; i++) p[offset + i] = uint8_t(v >> (8 * i));
}

// An APIC after reset with SVR = 1FFH: software enabled, spurious vector FFH.
Lapic Enabled(LapicConfig config = {}) {
  absl::StatusOr<Lapic> l = Lapic::Create(config);
  EXPECT_THAT(l, ::vbts::testing::IsOk());
  Lapic lapic = l.value_or(Lapic());
  lapic.Write(kApicRegSvr, 0x1FF, 0);
  return lapic;
}

// The IRR/ISR/TMR register holding `vector` and the bit it sets there
// (SDM 10.8.4: vector v is bit v%32 of the register at base + 10H*(v/32)).
uint32_t VecReg(uint32_t base, uint8_t vector) { return base + 0x10 * (vector / 32); }
uint32_t VecBit(uint8_t vector) { return 1u << (vector % 32); }

TEST(LapicTest, ResetValues) {
  // SDM 10.4.7.1: after power-up/RESET IRR, ISR, TMR, ICR, LDR, TPR, the timer
  // counts and DCR are 0, DFR is all 1s, LVT entries are 0 except the mask
  // bit, SVR is 000000FFH; the ID register holds the initial APIC ID in bits
  // 31:24 (10.4.6); the version register is 00050014H (10.4.8: version 14H,
  // max LVT entry 5).
  absl::StatusOr<Lapic> l = Lapic::Create({.apic_id = 3});
  ASSERT_THAT(l, ::vbts::testing::IsOk());
  Lapic& lapic = *l;
  EXPECT_EQ(lapic.Read(kApicRegId, 0), 0x03000000u);
  EXPECT_EQ(lapic.Read(kApicRegVersion, 0), 0x00050014u);
  EXPECT_EQ(lapic.Read(kApicRegTpr, 0), 0u);
  EXPECT_EQ(lapic.Read(kApicRegApr, 0), 0u);
  EXPECT_EQ(lapic.Read(kApicRegPpr, 0), 0u);
  EXPECT_EQ(lapic.Read(kApicRegEoi, 0), 0u);
  EXPECT_EQ(lapic.Read(kApicRegRrd, 0), 0u);
  EXPECT_EQ(lapic.Read(kApicRegLdr, 0), 0u);
  EXPECT_EQ(lapic.Read(kApicRegDfr, 0), 0xFFFFFFFFu);
  EXPECT_EQ(lapic.Read(kApicRegSvr, 0), 0x000000FFu);
  EXPECT_FALSE(lapic.software_enabled());
  for (uint32_t i = 0; i < 8; i++) {
    EXPECT_EQ(lapic.Read(kApicRegIsr + 0x10 * i, 0), 0u) << i;
    EXPECT_EQ(lapic.Read(kApicRegTmr + 0x10 * i, 0), 0u) << i;
    EXPECT_EQ(lapic.Read(kApicRegIrr + 0x10 * i, 0), 0u) << i;
  }
  EXPECT_EQ(lapic.Read(kApicRegEsr, 0), 0u);
  EXPECT_EQ(lapic.Read(kApicRegLvtCmci, 0), 0u);  // max LVT entry 5: no CMCI entry
  EXPECT_EQ(lapic.Read(kApicRegIcrLow, 0), 0u);
  EXPECT_EQ(lapic.Read(kApicRegIcrHigh, 0), 0u);
  for (uint32_t off = kApicRegLvtTimer; off <= kApicRegLvtError; off += 0x10)
    EXPECT_EQ(lapic.Read(off, 0), 0x00010000u) << std::hex << off;
  EXPECT_EQ(lapic.Read(kApicRegTimerInitialCount, 0), 0u);
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 0), 0u);
  EXPECT_EQ(lapic.Read(kApicRegTimerDivide, 0), 0u);
  EXPECT_EQ(lapic.NextDeadline(), std::nullopt);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  EXPECT_FALSE(lapic.TakeNmi());
  // With max LVT entry 6 the CMCI entry exists and resets masked (10.5.1).
  absl::StatusOr<Lapic> cmci = Lapic::Create({.version = 0x00060014});
  ASSERT_THAT(cmci, ::vbts::testing::IsOk());
  EXPECT_EQ(cmci->Read(kApicRegLvtCmci, 0), 0x00010000u);
  EXPECT_EQ(cmci->Read(kApicRegVersion, 0), 0x00060014u);
}

TEST(LapicTest, CreateRejectsBadConfig) {
  EXPECT_THAT(Lapic::Create({.version = 0x80050014}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reserved bits 0x80000000")));
  EXPECT_THAT(Lapic::Create({.version = 0x00050001}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version byte 0x01")));
  EXPECT_THAT(Lapic::Create({.version = 0x00030014}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max LVT entry 3")));
  EXPECT_THAT(Lapic::Create({.bus_hz = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bus clock 0 Hz")));
  EXPECT_THAT(Lapic::Create({.version = 0x01060015, .bus_hz = 100'000'000}), ::vbts::testing::IsOk());
}

TEST(LapicTest, ReservedBitsReadZeroAndReadOnlyRegistersIgnoreWrites) {
  Lapic lapic = Enabled();
  // Every writable register written with all ones reads back its defined
  // bits only (figures 10-7 to 10-14, 10-23).
  struct Case {
    uint32_t offset;
    uint32_t expected;
  };
  const Case kCases[] = {
      {kApicRegId, 0xFF000000},          // 10.4.6: ID in 31:24
      {kApicRegTpr, 0x000000FF},         // 10.8.3.1
      {kApicRegLdr, 0xFF000000},         // 10.6.2.2, figure 10-13
      {kApicRegDfr, 0xFFFFFFFF},         // figure 10-14: model 31:28, 27:0 read as 1s
      {kApicRegSvr, 0x000003FF},         // figure 10-23: vector, enable, focus; bit 12 needs version bit 24
      {kApicRegIcrHigh, 0xFF000000},     // figure 10-12: destination 63:56
      {kApicRegLvtTimer, 0x000300FF},    // figure 10-8: vector, mask, bit 17; bit 18 (TSC deadline) reserved
      {kApicRegLvtThermal, 0x000107FF},  // vector, delivery mode, mask; status bit 12 reads 0
      {kApicRegLvtPerf, 0x000107FF},
      {kApicRegLvtLint0, 0x0001A7FF},    // + polarity 13, trigger 15; Remote IRR 14 read only
      {kApicRegLvtLint1, 0x0001A7FF},
      {kApicRegLvtError, 0x000100FF},    // vector, mask
      {kApicRegTimerInitialCount, 0xFFFFFFFF},
      {kApicRegTimerDivide, 0x0000000B},  // figure 10-10: bits 0, 1, 3
  };
  for (const Case& c : kCases) {
    lapic.Write(c.offset, 0xFFFFFFFF, 0);
    EXPECT_EQ(lapic.Read(c.offset, 0), c.expected) << std::hex << c.offset;
  }
  // DFR bits 27:0 stay ones when written with zeros: cluster model = 0FFFFFFFH.
  lapic.Write(kApicRegDfr, 0, 0);
  EXPECT_EQ(lapic.Read(kApicRegDfr, 0), 0x0FFFFFFFu);
  // ICR low: FFFFFFFFH is "all excluding self" with a reserved delivery mode,
  // so nothing is sent; it reads back without bits 12 (status, idle), 13, 16, 17, 20-31.
  lapic.Write(kApicRegIcrLow, 0xFFFFFFFF, 0);
  EXPECT_EQ(lapic.Read(kApicRegIcrLow, 0), 0x000CCFFFu);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  // No CMCI entry with the default version: 2F0H is reserved.
  lapic.Write(kApicRegLvtCmci, 0xFFFFFFFF, 0);
  EXPECT_EQ(lapic.Read(kApicRegLvtCmci, 0), 0u);
  // Read-only registers ignore writes: version (10.4.8), APR, PPR, RRD, ISR,
  // TMR, IRR (10.8.4), current count (10.5.4), EOI reads 0.
  lapic.Write(kApicRegTpr, 0, 0);
  for (uint32_t off : {kApicRegVersion, kApicRegApr, kApicRegPpr, kApicRegRrd, kApicRegTimerCurrentCount})
    lapic.Write(off, 0xFFFFFFFF, 0);
  for (uint32_t i = 0; i < 8; i++) {
    lapic.Write(kApicRegIsr + 0x10 * i, 0xFFFFFFFF, 0);
    lapic.Write(kApicRegTmr + 0x10 * i, 0xFFFFFFFF, 0);
    lapic.Write(kApicRegIrr + 0x10 * i, 0xFFFFFFFF, 0);
    EXPECT_EQ(lapic.Read(kApicRegIsr + 0x10 * i, 0), 0u);
    EXPECT_EQ(lapic.Read(kApicRegTmr + 0x10 * i, 0), 0u);
    EXPECT_EQ(lapic.Read(kApicRegIrr + 0x10 * i, 0), 0u);
  }
  EXPECT_EQ(lapic.Read(kApicRegVersion, 0), 0x00050014u);
  EXPECT_EQ(lapic.Read(kApicRegApr, 0), 0u);
  EXPECT_EQ(lapic.Read(kApicRegPpr, 0), 0u);
  EXPECT_EQ(lapic.Read(kApicRegRrd, 0), 0u);
  EXPECT_EQ(lapic.Read(kApicRegEoi, 0), 0u);
  // The count written at 380H is the current count at the same instant.
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 0), 0xFFFFFFFFu);
  // Not a register: inside a register's 16-byte slot, reserved slots, past the page.
  for (uint32_t off : {0x00u, 0x10u, 0x24u, 0x40u, 0x70u, 0x284u, 0x290u, 0x2E0u, 0x3A0u, 0x3D0u, 0x3F0u,
                       0x400u, 0xFFCu, 0x1000u, 0xFFFFFFF0u}) {
    lapic.Write(off, 0xFFFFFFFF, 0);
    EXPECT_EQ(lapic.Read(off, 0), 0u) << std::hex << off;
  }
  // SVR bit 12 (EOI-broadcast suppression) is writable when version bit 24
  // is set (10.4.8, 10.9); LVT CMCI exists with max LVT entry 6.
  Lapic full = Enabled({.version = 0x01060014});
  full.Write(kApicRegSvr, 0xFFFFFFFF, 0);
  EXPECT_EQ(full.Read(kApicRegSvr, 0), 0x000013FFu);
  full.Write(kApicRegLvtCmci, 0xFFFFFFFF, 0);
  EXPECT_EQ(full.Read(kApicRegLvtCmci, 0), 0x000107FFu);
}

TEST(LapicTest, TprAndPprDecidePending) {
  Lapic lapic = Enabled();
  lapic.Raise(0x45);  // priority class 4
  // SDM 10.8.3.1: with nothing in service PPR = TPR; 10.8.4: an interrupt is
  // dispatched only if its class (vector[7:4]) is above PPR[7:4].
  lapic.Write(kApicRegTpr, 0x40, 0);
  EXPECT_EQ(lapic.Read(kApicRegPpr, 0), 0x40u);
  EXPECT_EQ(lapic.Pending(), std::nullopt);  // class 4 is not above class 4
  lapic.Write(kApicRegTpr, 0x4F, 0);
  EXPECT_EQ(lapic.Pending(), std::nullopt);  // the sub-class does not matter
  lapic.Write(kApicRegTpr, 0x3F, 0);
  EXPECT_EQ(lapic.Pending(), 0x45);          // class 4 > class 3
  lapic.Write(kApicRegTpr, 0x00, 0);
  EXPECT_EQ(lapic.Pending(), 0x45);
  // The highest IRR vector is the candidate.
  lapic.Raise(0x44);
  lapic.Raise(0xA0);
  EXPECT_EQ(lapic.Pending(), 0xA0);
  lapic.Write(kApicRegTpr, 0xA0, 0);
  EXPECT_EQ(lapic.Pending(), std::nullopt);  // 0xA0 blocked, so are 0x45 and 0x44
  lapic.Write(kApicRegTpr, 0x90, 0);
  EXPECT_EQ(lapic.Pending(), 0xA0);
  // IRR holds the three vectors: 44H and 45H are bits 4 and 5 of 220H
  // (vectors 64-95), A0H is bit 0 of 250H (vectors 160-191).
  EXPECT_EQ(lapic.Read(kApicRegIrr + 0x20, 0), 0x00000030u);
  EXPECT_EQ(lapic.Read(kApicRegIrr + 0x50, 0), 0x00000001u);
  // A software-disabled APIC presents nothing (10.4.7.2): IRR is held.
  lapic.Write(kApicRegSvr, 0xFF, 0);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  EXPECT_EQ(lapic.Read(kApicRegIrr + 0x50, 0), 0x00000001u);
  lapic.Write(kApicRegSvr, 0x1FF, 0);
  EXPECT_EQ(lapic.Pending(), 0xA0);
}

TEST(LapicTest, AcknowledgeAndEoiNest) {
  Lapic lapic = Enabled();
  lapic.Raise(0x31);
  // 10.8.4: acknowledging moves the vector from IRR to ISR.
  EXPECT_EQ(lapic.Acknowledge(), 0x31);
  EXPECT_EQ(lapic.Read(VecReg(kApicRegIsr, 0x31), 0), VecBit(0x31));
  EXPECT_EQ(lapic.Read(VecReg(kApicRegIrr, 0x31), 0), 0u);
  // 10.8.3.1: PPR = ISRV[7:4]:0 = 30H when TPR (0) is lower.
  EXPECT_EQ(lapic.Read(kApicRegPpr, 0), 0x30u);
  // Same class as the one in service: blocked until its EOI.
  lapic.Raise(0x32);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  // A higher class nests.
  lapic.Raise(0x61);
  EXPECT_EQ(lapic.Pending(), 0x61);
  EXPECT_EQ(lapic.Acknowledge(), 0x61);
  EXPECT_EQ(lapic.Read(kApicRegPpr, 0), 0x60u);
  EXPECT_EQ(lapic.Read(VecReg(kApicRegIsr, 0x31), 0), VecBit(0x31));
  EXPECT_EQ(lapic.Read(VecReg(kApicRegIsr, 0x61), 0), VecBit(0x61));
  // PPR keeps TPR's sub-class when TPR's class is at least ISRV's.
  lapic.Write(kApicRegTpr, 0x65, 0);
  EXPECT_EQ(lapic.Read(kApicRegPpr, 0), 0x65u);
  lapic.Write(kApicRegTpr, 0x25, 0);
  EXPECT_EQ(lapic.Read(kApicRegPpr, 0), 0x60u);
  lapic.Write(kApicRegTpr, 0, 0);
  // Nothing deliverable: the spurious vector SVR[7:0] = FFH, ISR untouched (10.9).
  EXPECT_EQ(lapic.Acknowledge(), 0xFF);
  EXPECT_EQ(lapic.Read(VecReg(kApicRegIsr, 0x31), 0), VecBit(0x31));
  // 10.8.5: EOI clears the highest ISR bit: 0x61 first.
  lapic.Write(kApicRegEoi, 0, 0);
  EXPECT_EQ(lapic.Read(VecReg(kApicRegIsr, 0x61), 0), 0u);
  EXPECT_EQ(lapic.Read(VecReg(kApicRegIsr, 0x31), 0), VecBit(0x31));
  EXPECT_EQ(lapic.Read(kApicRegPpr, 0), 0x30u);
  EXPECT_EQ(lapic.Pending(), std::nullopt);  // 0x32 still blocked by 0x31
  lapic.Write(kApicRegEoi, 0, 0);
  EXPECT_EQ(lapic.Read(VecReg(kApicRegIsr, 0x31), 0), 0u);
  EXPECT_EQ(lapic.Read(kApicRegPpr, 0), 0u);
  EXPECT_EQ(lapic.Pending(), 0x32);
  EXPECT_EQ(lapic.Acknowledge(), 0x32);
  lapic.Write(kApicRegEoi, 0, 0);
  // An EOI with nothing in service changes nothing.
  lapic.Write(kApicRegEoi, 0, 0);
  for (uint32_t i = 0; i < 8; i++) EXPECT_EQ(lapic.Read(kApicRegIsr + 0x10 * i, 0), 0u);
}

TEST(LapicTest, LevelTriggeredInterruptsSetTmrAndBroadcastTheirEoi) {
  Lapic lapic = Enabled({.apic_id = 2});
  std::vector<uint8_t> eois;
  lapic.SetLevelEoiListener([&](uint8_t v) { eois.push_back(v); });
  // SDM 10.8.4: level sets the TMR bit, edge clears it (vector 79H: TMR
  // register 3 = 0x1B0, bit 25).
  EXPECT_TRUE(lapic.Raise(0x79, /*level=*/true));
  EXPECT_EQ(lapic.Read(kApicRegTmr + 0x30, 0), 1u << 25);
  EXPECT_EQ(lapic.Acknowledge(), 0x79);
  lapic.Write(kApicRegEoi, 0, 0);
  EXPECT_EQ(eois, std::vector<uint8_t>{0x79});  // 10.8.5: broadcast to the I/O APICs
  // An edge-triggered interrupt of the same vector clears TMR; its EOI is not broadcast.
  EXPECT_TRUE(lapic.Raise(0x79));
  EXPECT_EQ(lapic.Read(kApicRegTmr + 0x30, 0), 0u);
  EXPECT_EQ(lapic.Acknowledge(), 0x79);
  lapic.Write(kApicRegEoi, 0, 0);
  EXPECT_EQ(eois.size(), 1u);
  // SVR bit 12 (offered with version bit 24) suppresses the broadcast.
  Lapic suppress = Enabled({.version = 0x01050014});
  suppress.SetLevelEoiListener([&](uint8_t v) { eois.push_back(v); });
  suppress.Write(kApicRegSvr, 0x11FF, 0);
  suppress.Raise(0x50, true);
  suppress.Acknowledge();
  suppress.Write(kApicRegEoi, 0, 0);
  EXPECT_EQ(eois.size(), 1u);
  // A software-disabled APIC refuses the interrupt.
  Lapic off;
  EXPECT_FALSE(off.Raise(0x50, true));
  // Destinations: physical ID 2, broadcast FFH; logical flat with LDR bit 1.
  EXPECT_TRUE(lapic.Accepts(2, false));
  EXPECT_FALSE(lapic.Accepts(1, false));
  EXPECT_TRUE(lapic.Accepts(0xFF, false));
  lapic.Write(kApicRegLdr, 0x02000000, 0);
  EXPECT_TRUE(lapic.Accepts(0x03, true));
  EXPECT_FALSE(lapic.Accepts(0x04, true));
}

TEST(LapicTest, SelfIpiThroughIcr) {
  Lapic lapic = Enabled({.apic_id = 3});
  auto irr_has = [&](uint8_t v) { return (lapic.Read(VecReg(kApicRegIrr, v), 0) & VecBit(v)) != 0; };
  // 10.6.1: shorthand 01 (self), fixed delivery, vector 50H.
  lapic.Write(kApicRegIcrLow, 0x00040050, 0);
  EXPECT_TRUE(irr_has(0x50));
  EXPECT_EQ(lapic.Read(kApicRegIcrLow, 0), 0x00040050u);  // delivery status (bit 12) idle
  // Shorthand 10 (all including self) reaches this APIC; 11 (all excluding self) reaches nobody.
  lapic.Write(kApicRegIcrLow, 0x00080051, 0);
  EXPECT_TRUE(irr_has(0x51));
  lapic.Write(kApicRegIcrLow, 0x000C0052, 0);
  EXPECT_FALSE(irr_has(0x52));
  // 10.6.2.1 physical destination: own ID 3 matches, 4 does not, FFH broadcasts.
  lapic.Write(kApicRegIcrHigh, 0x03000000, 0);
  lapic.Write(kApicRegIcrLow, 0x00000053, 0);
  EXPECT_TRUE(irr_has(0x53));
  lapic.Write(kApicRegIcrHigh, 0x04000000, 0);
  lapic.Write(kApicRegIcrLow, 0x00000054, 0);
  EXPECT_FALSE(irr_has(0x54));
  lapic.Write(kApicRegIcrHigh, 0xFF000000, 0);
  lapic.Write(kApicRegIcrLow, 0x00000055, 0);
  EXPECT_TRUE(irr_has(0x55));
  // 10.6.2.2 logical, flat model (DFR = FFFFFFFFH): a common LDR bit matches.
  lapic.Write(kApicRegLdr, 0x05000000, 0);
  lapic.Write(kApicRegIcrHigh, 0x04000000, 0);
  lapic.Write(kApicRegIcrLow, 0x00000856, 0);  // bit 11: logical
  EXPECT_TRUE(irr_has(0x56));
  lapic.Write(kApicRegIcrHigh, 0x0A000000, 0);
  lapic.Write(kApicRegIcrLow, 0x00000857, 0);
  EXPECT_FALSE(irr_has(0x57));
  // Cluster model (DFR = 0FFFFFFFH): LDR 21H is cluster 2, member bit 0.
  lapic.Write(kApicRegDfr, 0x0FFFFFFF, 0);
  lapic.Write(kApicRegLdr, 0x21000000, 0);
  lapic.Write(kApicRegIcrHigh, 0x23000000, 0);
  lapic.Write(kApicRegIcrLow, 0x00000858, 0);
  EXPECT_TRUE(irr_has(0x58));
  lapic.Write(kApicRegIcrHigh, 0x13000000, 0);  // cluster 1
  lapic.Write(kApicRegIcrLow, 0x00000859, 0);
  EXPECT_FALSE(irr_has(0x59));
  // Lowest priority (001) to a destination including this APIC: it is the only candidate (10.6.2.4).
  lapic.Write(kApicRegIcrHigh, 0x21000000, 0);
  lapic.Write(kApicRegIcrLow, 0x0000095A, 0);
  EXPECT_TRUE(irr_has(0x5A));
  // NMI (100) bypasses IRR (10.8.4 note) and is reported once by TakeNmi.
  lapic.Write(kApicRegIcrLow, 0x00040400, 0);
  EXPECT_TRUE(lapic.TakeNmi());
  EXPECT_FALSE(lapic.TakeNmi());
  // NMI to all excluding self: not for us.
  lapic.Write(kApicRegIcrLow, 0x000C0400, 0);
  EXPECT_FALSE(lapic.TakeNmi());
  // SMI (010), INIT (101), SIPI (110) are not modelled: no IRR bit, no NMI.
  lapic.Write(kApicRegIcrLow, 0x00040200, 0);
  lapic.Write(kApicRegIcrLow, 0x00040500, 0);
  lapic.Write(kApicRegIcrLow, 0x00040660, 0);
  EXPECT_FALSE(irr_has(0x60));
  EXPECT_FALSE(lapic.TakeNmi());
  // The self IPIs are ordinary fixed interrupts: highest first.
  EXPECT_EQ(lapic.Acknowledge(), 0x5A);
}

TEST(LapicTest, IllegalVectorSetsEsr) {
  Lapic lapic = Enabled();
  // SDM 10.5.3 bit 6: an interrupt with vector 0-15 is not delivered and
  // never sets IRR.
  lapic.Raise(0x0F);
  EXPECT_EQ(lapic.Read(kApicRegIrr, 0), 0u);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  // The error shows in ESR only after a write to ESR; a second write clears it.
  EXPECT_EQ(lapic.Read(kApicRegEsr, 0), 0u);
  lapic.Write(kApicRegEsr, 0, 0);
  EXPECT_EQ(lapic.Read(kApicRegEsr, 0), 0x40u);
  lapic.Write(kApicRegEsr, 0, 0);
  EXPECT_EQ(lapic.Read(kApicRegEsr, 0), 0u);
  // A self IPI with vector 5: bit 5 (send illegal vector, from the ICR write)
  // and bit 6 (received illegal vector).
  lapic.Write(kApicRegIcrLow, 0x00040005, 0);
  lapic.Write(kApicRegEsr, 0, 0);
  EXPECT_EQ(lapic.Read(kApicRegEsr, 0), 0x60u);
  EXPECT_EQ(lapic.Read(kApicRegIrr, 0), 0u);
  // An IPI with vector 5 to nobody: bit 5 only.
  lapic.Write(kApicRegIcrLow, 0x000C0005, 0);
  lapic.Write(kApicRegEsr, 0, 0);
  EXPECT_EQ(lapic.Read(kApicRegEsr, 0), 0x20u);
  // With LVT error unmasked (vector FEH) an error also raises FEH.
  lapic.Write(kApicRegLvtError, 0xFE, 0);
  lapic.Raise(0x01);
  EXPECT_EQ(lapic.Pending(), 0xFE);
  EXPECT_EQ(lapic.Read(kApicRegIrr + 0x70, 0), 0x40000000u);
  // A one-shot timer whose LVT vector is illegal (8) reports it the same way.
  lapic.Write(kApicRegEsr, 0, 0);
  lapic.Write(kApicRegLvtTimer, 0x08, 0);
  lapic.Write(kApicRegTimerDivide, 0xB, 0);  // divide by 1
  lapic.Write(kApicRegTimerInitialCount, 10, 0);
  lapic.Advance(10);
  lapic.Write(kApicRegEsr, 0, 10);
  EXPECT_EQ(lapic.Read(kApicRegEsr, 10), 0x40u);
  EXPECT_EQ(lapic.Read(kApicRegIrr, 10), 0u);
}

TEST(LapicTest, SoftwareDisableForcesLvtMasks) {
  Lapic lapic = Enabled();
  lapic.Write(kApicRegLvtPerf, 0x000000F0, 0);
  lapic.Write(kApicRegLvtTimer, 0x00020040, 0);
  EXPECT_EQ(lapic.Read(kApicRegLvtPerf, 0), 0x000000F0u);
  lapic.Raise(0x80);
  // SDM 10.4.7.2: clearing SVR bit 8 sets every LVT mask bit ...
  lapic.Write(kApicRegSvr, 0x0FF, 0);
  EXPECT_EQ(lapic.Read(kApicRegLvtPerf, 0), 0x000100F0u);
  EXPECT_EQ(lapic.Read(kApicRegLvtTimer, 0), 0x00030040u);
  for (uint32_t off = kApicRegLvtTimer; off <= kApicRegLvtError; off += 0x10)
    EXPECT_NE(lapic.Read(off, 0) & kApicLvtMasked, 0u) << std::hex << off;
  // ... attempts to clear them are ignored, the other fields are written.
  lapic.Write(kApicRegLvtPerf, 0x000004F1, 0);
  EXPECT_EQ(lapic.Read(kApicRegLvtPerf, 0), 0x000104F1u);
  // IRR is held but nothing is presented; new fixed interrupts are dropped
  // (as KVM does); NMIs are still accepted.
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  lapic.Raise(0x90);
  // 80H and 90H share register 240H (bits 0 and 16): only 80H is there.
  EXPECT_EQ(lapic.Read(VecReg(kApicRegIrr, 0x90), 0), VecBit(0x80));
  lapic.Write(kApicRegIcrLow, 0x00040400, 0);
  EXPECT_TRUE(lapic.TakeNmi());
  // A masked timer raises nothing and has no deadline.
  lapic.Write(kApicRegTimerInitialCount, 100, 0);
  EXPECT_EQ(lapic.NextDeadline(), std::nullopt);
  lapic.Advance(1000);
  // Re-enabling presents the held vector; the masks stay until rewritten.
  lapic.Write(kApicRegSvr, 0x1FF, 1000);
  EXPECT_EQ(lapic.Pending(), 0x80);
  EXPECT_EQ(lapic.Read(kApicRegLvtPerf, 1000), 0x000104F1u);
  lapic.Write(kApicRegLvtPerf, 0x000004F1, 1000);
  EXPECT_EQ(lapic.Read(kApicRegLvtPerf, 1000), 0x000004F1u);
}

TEST(LapicTest, OneShotTimer) {
  Lapic lapic = Enabled();
  lapic.Write(kApicRegLvtTimer, 0x40, 0);     // one-shot, vector 40H
  lapic.Write(kApicRegTimerDivide, 0x1, 0);   // figure 10-10: 0001 = divide by 4
  lapic.Write(kApicRegTimerInitialCount, 1000, 100);
  // 1 GHz bus / 4: one count every 4 ns; 1000 counts = 4000 ns after 100.
  EXPECT_EQ(lapic.NextDeadline(), 4100u);
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 100), 1000u);
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 103), 1000u);  // a count lasts 4 ns
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 104), 999u);
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 1100), 750u);
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 4099), 1u);
  lapic.Advance(4099);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  // SDM 10.5.4: at 0 the interrupt is raised and the count stays 0.
  lapic.Advance(4100);
  EXPECT_EQ(lapic.Pending(), 0x40);
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 4100), 0u);
  EXPECT_EQ(lapic.Read(kApicRegTimerInitialCount, 4100), 1000u);
  EXPECT_EQ(lapic.NextDeadline(), std::nullopt);
  EXPECT_EQ(lapic.Acknowledge(), 0x40);
  lapic.Write(kApicRegEoi, 0, 4200);
  lapic.Advance(1'000'000'000);
  EXPECT_EQ(lapic.Pending(), std::nullopt);  // fired exactly once
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 1'000'000'000), 0u);
  // A new initial count restarts it; writing 0 stops it.
  lapic.Write(kApicRegTimerInitialCount, 5, 2'000'000'000);
  EXPECT_EQ(lapic.NextDeadline(), 2'000'000'020u);
  lapic.Write(kApicRegTimerInitialCount, 0, 2'000'000'010);
  EXPECT_EQ(lapic.NextDeadline(), std::nullopt);
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 2'000'000'010), 0u);
  lapic.Advance(3'000'000'000);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
}

TEST(LapicTest, PeriodicTimerFiresOncePerPeriod) {
  Lapic lapic = Enabled();
  lapic.Write(kApicRegLvtTimer, 0x00020041, 0);  // periodic (bit 17), vector 41H
  lapic.Write(kApicRegTimerDivide, 0xB, 0);      // 1011 = divide by 1
  lapic.Write(kApicRegTimerInitialCount, 100, 0);
  // SDM 10.5.4: reloads from the initial count at each 0; period 100 ns.
  for (uint64_t k = 1; k <= 5; k++) {
    EXPECT_EQ(lapic.NextDeadline(), k * 100) << k;
    lapic.Advance(k * 100 - 1);
    EXPECT_EQ(lapic.Pending(), std::nullopt) << k;
    EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, k * 100 - 1), 1u) << k;
    lapic.Advance(k * 100);
    EXPECT_EQ(lapic.Pending(), 0x41) << k;
    EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, k * 100), 100u) << k;
    EXPECT_EQ(lapic.Acknowledge(), 0x41);
    lapic.Write(kApicRegEoi, 0, k * 100);
  }
  // Masking stops the interrupts (and the deadline), not the counting.
  lapic.Write(kApicRegLvtTimer, 0x00030041, 520);
  EXPECT_EQ(lapic.NextDeadline(), std::nullopt);
  lapic.Advance(750);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 750), 50u);
  // Unmasking does not deliver the periods that passed while masked.
  lapic.Write(kApicRegLvtTimer, 0x00020041, 750);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  EXPECT_EQ(lapic.NextDeadline(), 800u);
}

TEST(LapicTest, PeriodicTimerCatchesUpManyPeriodsAtOnce) {
  Lapic lapic = Enabled();
  lapic.Write(kApicRegLvtTimer, 0x00020041, 0);
  lapic.Write(kApicRegTimerDivide, 0x0, 0);  // divide by 2
  lapic.Write(kApicRegTimerInitialCount, 100, 0);  // period 100 × 2 = 200 ns
  // 1000 periods and 37 ns later: IRR has one bit per vector, so one interrupt.
  lapic.Advance(1000 * 200 + 37);
  EXPECT_EQ(lapic.Read(VecReg(kApicRegIrr, 0x41), 200037), VecBit(0x41));
  EXPECT_EQ(lapic.Acknowledge(), 0x41);
  lapic.Write(kApicRegEoi, 0, 200037);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  // Phase kept: 37 ns into the period is 18 counts (2 ns each), so 100 - 18.
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 200037), 82u);
  EXPECT_EQ(lapic.NextDeadline(), 1001u * 200);
  lapic.Advance(1001 * 200 - 1);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  lapic.Advance(1001 * 200);
  EXPECT_EQ(lapic.Pending(), 0x41);
  // A very long gap costs no more than a short one.
  lapic.Advance(uint64_t{1} << 62);
  EXPECT_EQ(lapic.NextDeadline(), (uint64_t{1} << 62) / 200 * 200 + 200);
}

TEST(LapicTest, DivideConfigurationEncodings) {
  // SDM figure 10-10: DCR bits 3,1:0.
  struct Case {
    uint32_t dcr;
    uint64_t divide;
  };
  const Case kCases[] = {
      {0x0, 2},  {0x1, 4},  {0x2, 8},   {0x3, 16}, {0x8, 32}, {0x9, 64}, {0xA, 128}, {0xB, 1},
      {0x4, 2},  // bit 2 is reserved: 0x4 reads 0 and divides by 2
      {0xF, 1},
  };
  for (const Case& c : kCases) {
    Lapic lapic = Enabled();
    lapic.Write(kApicRegLvtTimer, 0x40, 0);
    lapic.Write(kApicRegTimerDivide, c.dcr, 0);
    EXPECT_EQ(lapic.Read(kApicRegTimerDivide, 0), c.dcr & 0xB) << c.dcr;
    lapic.Write(kApicRegTimerInitialCount, 10, 1000);
    EXPECT_EQ(lapic.NextDeadline(), 1000 + 10 * c.divide) << c.dcr;
    EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 1000 + c.divide), 9u) << c.dcr;
  }
}

TEST(LapicTest, DivideAndModeChangesContinueTheCount) {
  Lapic lapic = Enabled();
  lapic.Write(kApicRegLvtTimer, 0x40, 0);
  lapic.Write(kApicRegTimerDivide, 0xB, 0);  // divide by 1
  lapic.Write(kApicRegTimerInitialCount, 100, 0);
  // 40 counts done at t = 40; from there the remaining 60 count at divide by 4.
  lapic.Write(kApicRegTimerDivide, 0x1, 40);
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 40), 60u);
  EXPECT_EQ(lapic.NextDeadline(), 40u + 60 * 4);
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 44), 59u);
  // 10.5.4: a mode change does not restart the timer: the countdown in
  // progress ends at 280, then reloads because the mode is now periodic.
  lapic.Write(kApicRegLvtTimer, 0x00020040, 100);
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 100), 45u);
  EXPECT_EQ(lapic.NextDeadline(), 280u);
  lapic.Advance(280);
  EXPECT_EQ(lapic.Pending(), 0x40);
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 280), 100u);
  EXPECT_EQ(lapic.NextDeadline(), 280u + 400);
  // TSC-deadline mode (10) is not available: bit 18 is dropped, leaving one-shot.
  lapic.Write(kApicRegLvtTimer, 0x00040040, 300);
  EXPECT_EQ(lapic.Read(kApicRegLvtTimer, 300), 0x00000040u);
  // A divide change in the middle of a tick restarts the remaining count at
  // the write: 100 ns into a 128 ns tick, 5 counts at divide by 1 end at 105,
  // not in the past.
  Lapic slow = Enabled();
  slow.Write(kApicRegLvtTimer, 0x40, 0);
  slow.Write(kApicRegTimerDivide, 0xA, 0);  // divide by 128
  slow.Write(kApicRegTimerInitialCount, 5, 0);
  slow.Write(kApicRegTimerDivide, 0xB, 100);
  EXPECT_EQ(slow.Read(kApicRegTimerCurrentCount, 100), 5u);
  EXPECT_EQ(slow.NextDeadline(), 105u);
}

TEST(LapicTest, TscDeadlineModeArmsFiresAndDisarms) {
  // SDM 10.5.4.1 on a CPU with CPUID.1:ECX.TSC_Deadline = 1: LVT timer mode
  // 10b; IA32_TSC_DEADLINE arms the timer with a TSC value (the caller
  // passes its time, here TSC 5000 -> 500 ns), the interrupt comes when the
  // time reaches it, and the MSR then reads 0.
  Lapic lapic = Enabled({.tsc_deadline = true});
  lapic.Write(kApicRegLvtTimer, 0x000400EF, 0);  // mode 10b, vector EFH
  EXPECT_EQ(lapic.Read(kApicRegLvtTimer, 0), 0x000400EFu);
  EXPECT_TRUE(lapic.tsc_deadline_mode());
  EXPECT_EQ(lapic.ReadTscDeadline(0), 0u);
  EXPECT_EQ(lapic.NextDeadline(), std::nullopt);
  lapic.WriteTscDeadline(5000, 500, 10);
  EXPECT_EQ(lapic.ReadTscDeadline(499), 5000u);
  EXPECT_EQ(lapic.NextDeadline(), 500u);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  lapic.Advance(500);
  EXPECT_EQ(lapic.Pending(), 0xEF);
  EXPECT_EQ(lapic.ReadTscDeadline(500), 0u);
  EXPECT_EQ(lapic.NextDeadline(), std::nullopt);
  EXPECT_EQ(lapic.Acknowledge(), 0xEF);
  lapic.Write(kApicRegEoi, 0, 500);
  // In this mode the initial count ignores writes and the current count reads 0.
  lapic.Write(kApicRegTimerInitialCount, 100, 600);
  EXPECT_EQ(lapic.Read(kApicRegTimerInitialCount, 600), 0u);
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 600), 0u);
  // A deadline already passed fires at the write (kvm-unit-tests apic.c writes
  // the TSC it just read and expects the interrupt by the next instruction).
  lapic.WriteTscDeadline(7000, 650, 700);
  EXPECT_EQ(lapic.Pending(), 0xEF);
  EXPECT_EQ(lapic.ReadTscDeadline(700), 0u);
  EXPECT_EQ(lapic.Acknowledge(), 0xEF);
  lapic.Write(kApicRegEoi, 0, 700);
  // 0 disarms; masked, the deadline passes without an interrupt but disarms
  // (KVM's kvm_apic_inject_pending_timer_irqs clears the deadline after the
  // LVT delivery, which the mask suppresses; the SDM's "disarms itself" has
  // no exception for a masked entry).
  lapic.WriteTscDeadline(9000, 900, 700);
  lapic.WriteTscDeadline(0, 0, 710);
  EXPECT_EQ(lapic.NextDeadline(), std::nullopt);
  lapic.Advance(2000);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  lapic.Write(kApicRegLvtTimer, 0x000500EF, 2000);  // masked
  lapic.WriteTscDeadline(30000, 3000, 2000);
  EXPECT_EQ(lapic.NextDeadline(), std::nullopt);  // no interrupt will come
  EXPECT_EQ(lapic.ReadTscDeadline(2999), 30000u);
  EXPECT_EQ(lapic.ReadTscDeadline(3000), 0u);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  // Leaving the mode disarms; outside it the MSR reads 0 and ignores writes.
  lapic.Write(kApicRegLvtTimer, 0x000400EF, 3000);
  lapic.WriteTscDeadline(50000, 5000, 3000);
  lapic.Write(kApicRegLvtTimer, 0x000000EF, 3100);  // one-shot
  EXPECT_FALSE(lapic.tsc_deadline_mode());
  EXPECT_EQ(lapic.ReadTscDeadline(3100), 0u);
  lapic.WriteTscDeadline(60000, 6000, 3100);
  EXPECT_EQ(lapic.NextDeadline(), std::nullopt);
  lapic.Advance(10000);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  // Entering the mode stops a one-shot countdown and clears its initial count (KVM).
  lapic.Write(kApicRegTimerInitialCount, 1000, 10000);
  EXPECT_EQ(lapic.NextDeadline(), 12000u);  // DCR 0: divide by 2, 1000 counts = 2000 ns
  lapic.Write(kApicRegLvtTimer, 0x000400EF, 10100);
  EXPECT_EQ(lapic.Read(kApicRegTimerInitialCount, 10100), 0u);
  EXPECT_EQ(lapic.NextDeadline(), std::nullopt);
  lapic.Advance(20000);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  // The register page holds no deadline, and SetState of a page in the same
  // mode keeps it armed, as KVM_SET_LAPIC does: vbts's PMI delivery rewrites
  // the page to set the LVTPC mask (vcpu/tracer.cc), and until 2026-11-26 that
  // disarmed the deadline and Linux's next timer interrupt never came.
  lapic.WriteTscDeadline(90000, 30000, 20000);
  uint8_t page[kLapicStateSize];
  lapic.GetState(page, 20000);
  lapic.SetState(page, 20000);
  EXPECT_TRUE(lapic.tsc_deadline_mode());
  EXPECT_EQ(lapic.ReadTscDeadline(29999), 90000u);
  EXPECT_EQ(lapic.armed_tsc_deadline(), 90000u);
  EXPECT_EQ(lapic.NextDeadline(), 30000u);
  lapic.Advance(30000);
  EXPECT_EQ(lapic.Pending(), 0xEF);
  EXPECT_EQ(lapic.Acknowledge(), 0xEF);
  lapic.Write(kApicRegEoi, 0, 30000);
  // A page in another timer mode disarms it (one-shot at 320H here).
  lapic.WriteTscDeadline(95000, 35000, 30000);
  lapic.GetState(page, 30000);
  page[kApicRegLvtTimer + 2] = 0x00;  // mode 00b
  lapic.SetState(page, 30000);
  EXPECT_FALSE(lapic.tsc_deadline_mode());
  page[kApicRegLvtTimer + 2] = 0x04;  // back to 10b: still disarmed
  lapic.SetState(page, 30000);
  EXPECT_TRUE(lapic.tsc_deadline_mode());
  EXPECT_EQ(lapic.ReadTscDeadline(30000), 0u);
  EXPECT_EQ(lapic.armed_tsc_deadline(), 0u);
  EXPECT_EQ(lapic.NextDeadline(), std::nullopt);
}

// The two widths of destination at an APIC in x2APIC mode (ID 23H): an
// 8-bit one (an I/O APIC entry, a compatibility-format MSI) keeps FFH as the
// broadcast, as KVM's kvm_apic_mda converts it; a 32-bit one (an IPI, an MSI
// remapped in x2APIC format) broadcasts only with FFFFFFFFH (SDM 10.12.9).
TEST(LapicTest, X2apicModeDestinationWidths) {
  Lapic lapic = Enabled({.apic_id = 0x23, .x2apic = true});
  lapic.SetX2apicMode(true);
  ASSERT_TRUE(lapic.x2apic_mode());
  EXPECT_TRUE(lapic.Accepts(0xFF, false));
  EXPECT_TRUE(lapic.Accepts(0x23, false));
  EXPECT_FALSE(lapic.Accepts(0x22, false));
  EXPECT_FALSE(lapic.AcceptsWide(0xFF, false));
  EXPECT_TRUE(lapic.AcceptsWide(0x23, false));
  EXPECT_TRUE(lapic.AcceptsWide(0xFFFFFFFF, false));
  EXPECT_FALSE(lapic.AcceptsWide(0x100023, false));
}

TEST(LapicTest, X2apicModeRegistersAsMsrs) {
  // SDM 10.12 on a CPU with CPUID.1:ECX.x2APIC = 1, APIC ID 0x23 (cluster 2,
  // member bit 3).
  Lapic lapic = Enabled({.apic_id = 0x23, .x2apic = true});
  uint64_t v = 0;
  // Outside x2APIC mode the MSRs do not exist.
  EXPECT_FALSE(lapic.ReadX2apicMsr(0x802, v, 0));
  EXPECT_FALSE(lapic.WriteX2apicMsr(0x808, 0, 0));
  lapic.SetX2apicMode(true);
  ASSERT_TRUE(lapic.x2apic_mode());
  ASSERT_TRUE(lapic.ReadX2apicMsr(0x802, v, 0));
  EXPECT_EQ(v, 0x23u);  // 10.12.9: the 32-bit x2APIC ID
  ASSERT_TRUE(lapic.ReadX2apicMsr(0x80D, v, 0));
  EXPECT_EQ(v, (2u << 16) | (1u << 3));  // 10.12.10.2: ID[19:4] << 16 | 1 << ID[3:0]
  ASSERT_TRUE(lapic.ReadX2apicMsr(0x803, v, 0));
  EXPECT_EQ(v, 0x00050014u);
  // Table 10-6: read only, write only, absent; bits 63:32 reserved.
  EXPECT_FALSE(lapic.WriteX2apicMsr(0x802, 0, 0));         // ID
  EXPECT_FALSE(lapic.WriteX2apicMsr(0x80D, 0, 0));         // LDR
  EXPECT_FALSE(lapic.ReadX2apicMsr(0x80B, v, 0));          // EOI
  EXPECT_FALSE(lapic.ReadX2apicMsr(0x83F, v, 0));          // SELF IPI
  EXPECT_FALSE(lapic.ReadX2apicMsr(0x80E, v, 0));          // DFR: none in x2APIC mode
  EXPECT_FALSE(lapic.ReadX2apicMsr(0x831, v, 0));          // ICR high: part of 830H
  EXPECT_FALSE(lapic.WriteX2apicMsr(0x808, 1ull << 32, 0));  // TPR with bit 32
  EXPECT_FALSE(lapic.WriteX2apicMsr(0x80B, 1, 0));         // EOI of a non-zero value
  EXPECT_FALSE(lapic.WriteX2apicMsr(0x828, 1, 0));         // ESR of a non-zero value
  EXPECT_FALSE(lapic.WriteX2apicMsr(0x83F, 0x100, 0));     // SELF IPI bits 31:8 (10.12.1.3)
  EXPECT_TRUE(lapic.WriteX2apicMsr(0x808, 0x20, 0));
  EXPECT_EQ(lapic.Read(kApicRegTpr, 0), 0x20u);
  // SELF IPI: a fixed interrupt to this APIC.
  EXPECT_TRUE(lapic.WriteX2apicMsr(0x83F, 0x51, 0));
  EXPECT_EQ(lapic.Pending(), 0x51);
  EXPECT_EQ(lapic.Acknowledge(), 0x51);
  EXPECT_TRUE(lapic.WriteX2apicMsr(0x80B, 0, 0));
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  // The 64-bit ICR: physical destination 0x23 reaches this APIC, 0x24 does
  // not; logical cluster 2 with bit 3 does; FFFFFFFFH is a broadcast.
  EXPECT_TRUE(lapic.WriteX2apicMsr(0x830, (0x24ull << 32) | 0x61, 0));
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  EXPECT_TRUE(lapic.WriteX2apicMsr(0x830, (0x23ull << 32) | 0x62, 0));
  EXPECT_EQ(lapic.Pending(), 0x62);
  ASSERT_TRUE(lapic.ReadX2apicMsr(0x830, v, 0));
  EXPECT_EQ(v, (0x23ull << 32) | 0x62);
  EXPECT_TRUE(lapic.WriteX2apicMsr(0x830, (((2ull << 16) | (1 << 3)) << 32) | 0x800 | 0x63, 0));  // logical
  EXPECT_TRUE(lapic.WriteX2apicMsr(0x830, (0xFFFFFFFFull << 32) | 0x64, 0));
  EXPECT_EQ(lapic.Read(VecReg(kApicRegIrr, 0x63), 0) & VecBit(0x63), VecBit(0x63));
  EXPECT_EQ(lapic.Read(VecReg(kApicRegIrr, 0x64), 0) & VecBit(0x64), VecBit(0x64));
  // The page keeps KVM's layout: ID << 24, the derived LDR, ICR destination at 310H.
  Page page{};
  lapic.GetState(page.data(), 0);
  EXPECT_EQ(PageReg(page, kApicRegId), 0x23000000u);
  EXPECT_EQ(PageReg(page, kApicRegLdr), (2u << 16) | (1u << 3));
  EXPECT_EQ(PageReg(page, kApicRegIcrHigh), 0xFFFFFFFFu);
  // Leaving x2APIC mode: the xAPIC ID again, the MSRs gone.
  lapic.SetX2apicMode(false);
  EXPECT_EQ(lapic.Read(kApicRegId, 0), 0x23000000u);
  EXPECT_FALSE(lapic.ReadX2apicMsr(0x802, v, 0));
  // Without x2APIC support the mode cannot be entered.
  Lapic plain = Enabled();
  plain.SetX2apicMode(true);
  EXPECT_FALSE(plain.x2apic_mode());
}

TEST(LapicTest, BusFrequencyScalesTheTimer) {
  // SDM 10.5.4: the timer counts bus clocks divided by DCR.  At 100 MHz a
  // clock is 10 ns: 10 counts at divide by 1 take 100 ns.
  Lapic slow = Enabled({.bus_hz = 100'000'000});
  slow.Write(kApicRegLvtTimer, 0x40, 0);
  slow.Write(kApicRegTimerDivide, 0xB, 0);
  slow.Write(kApicRegTimerInitialCount, 10, 0);
  EXPECT_EQ(slow.NextDeadline(), 100u);
  EXPECT_EQ(slow.Read(kApicRegTimerCurrentCount, 15), 9u);
  // At 3 GHz a clock is 1/3 ns: 10 clocks end at 3.33 ns, i.e. the first
  // whole nanosecond at or after it is 4; at 3 ns 9 clocks have passed.
  Lapic fast = Enabled({.bus_hz = 3'000'000'000});
  fast.Write(kApicRegLvtTimer, 0x40, 0);
  fast.Write(kApicRegTimerDivide, 0xB, 0);
  fast.Write(kApicRegTimerInitialCount, 10, 0);
  EXPECT_EQ(fast.NextDeadline(), 4u);
  EXPECT_EQ(fast.Read(kApicRegTimerCurrentCount, 3), 1u);
  EXPECT_EQ(fast.Pending(), std::nullopt);
  fast.Advance(4);
  EXPECT_EQ(fast.Pending(), 0x40);
}

// A page with every register holding a non-reset value consistent with the
// model's rules, for a model with CMCI and EOI-broadcast suppression.
Page FullPage() {
  Page p{};
  SetPageReg(p, kApicRegId, 0x05000000);
  SetPageReg(p, kApicRegVersion, 0x01060014);
  SetPageReg(p, kApicRegTpr, 0x25);
  SetPageReg(p, kApicRegPpr, 0xE0);  // ISRV = E8H (ISR word 7 bit 8), class E > TPR class 2
  SetPageReg(p, kApicRegLdr, 0x12000000);
  SetPageReg(p, kApicRegDfr, 0x0FFFFFFF);
  SetPageReg(p, kApicRegSvr, 0x000013EF);
  for (uint32_t i = 0; i < 8; i++) {
    SetPageReg(p, kApicRegIsr + 0x10 * i, i == 7 ? 0x00000100 : 0x01000000u >> i);
    SetPageReg(p, kApicRegTmr + 0x10 * i, 0x00100000u << (i % 3));
    SetPageReg(p, kApicRegIrr + 0x10 * i, 0xA5A50000u | (i == 0 ? 0 : 0x5A5Au));
  }
  SetPageReg(p, kApicRegEsr, 0x00000040);
  SetPageReg(p, kApicRegLvtCmci, 0x000102F1);
  SetPageReg(p, kApicRegIcrLow, 0x000444F3);
  SetPageReg(p, kApicRegIcrHigh, 0x7F000000);
  SetPageReg(p, kApicRegLvtTimer, 0x00020032);
  SetPageReg(p, kApicRegLvtThermal, 0x000104F3);
  SetPageReg(p, kApicRegLvtPerf, 0x000000F4);
  SetPageReg(p, kApicRegLvtLint0, 0x0000E7F5);  // trigger, Remote IRR, polarity, ExtINT
  SetPageReg(p, kApicRegLvtLint1, 0x00010400);
  SetPageReg(p, kApicRegLvtError, 0x000000F6);
  SetPageReg(p, kApicRegTimerInitialCount, 0x00100000);
  SetPageReg(p, kApicRegTimerCurrentCount, 0x00012345);
  SetPageReg(p, kApicRegTimerDivide, 0x9);  // divide by 64
  return p;
}

TEST(LapicTest, StateRoundTripIsExact) {
  const Page page = FullPage();
  absl::StatusOr<Lapic> l = Lapic::Create({.version = 0x01060014});
  ASSERT_THAT(l, ::vbts::testing::IsOk());
  Lapic& lapic = *l;
  lapic.SetState(page.data(), 5000);
  Page out;
  out.fill(0xCC);
  lapic.GetState(out.data(), 5000);
  for (uint32_t off = 0; off < kLapicStateSize; off += 4)
    EXPECT_EQ(PageReg(out, off), PageReg(page, off)) << std::hex << "offset 0x" << off;
  // The registers read through MMIO are the page's.
  EXPECT_EQ(lapic.Read(kApicRegSvr, 5000), 0x000013EFu);
  EXPECT_EQ(lapic.Read(kApicRegPpr, 5000), 0xE0u);
  EXPECT_EQ(lapic.Read(kApicRegLvtLint0, 5000), 0x0000E7F5u);
  // Remote IRR is read only for the guest: a write keeps it.
  lapic.Write(kApicRegLvtLint0, 0x0000A7F5, 5000);
  EXPECT_EQ(lapic.Read(kApicRegLvtLint0, 5000), 0x0000E7F5u);
  lapic.Write(kApicRegLvtLint0, 0x0000E7F5, 5000);
  // Later, the exported current count has counted down: 640 ns at 64 ns per
  // count is 10 counts.
  lapic.GetState(out.data(), 5640);
  EXPECT_EQ(PageReg(out, kApicRegTimerCurrentCount), 0x00012345u - 10);
  // A default-version model has no CMCI entry and its own version.
  Lapic plain;
  plain.SetState(page.data(), 0);
  plain.GetState(out.data(), 0);
  EXPECT_EQ(PageReg(out, kApicRegLvtCmci), 0u);
  EXPECT_EQ(PageReg(out, kApicRegVersion), 0x00050014u);
  EXPECT_EQ(PageReg(out, kApicRegSvr), 0x000003EFu);  // no bit 12 without version bit 24
}

TEST(LapicTest, SetStateRestartsTimerFromCurrentCount) {
  Page page{};
  SetPageReg(page, kApicRegSvr, 0x1FF);
  SetPageReg(page, kApicRegLvtTimer, 0x00020042);  // periodic, vector 42H
  SetPageReg(page, kApicRegTimerDivide, 0xB);      // divide by 1
  SetPageReg(page, kApicRegTimerInitialCount, 1000);
  SetPageReg(page, kApicRegTimerCurrentCount, 300);
  Lapic lapic;
  lapic.SetState(page.data(), 5000);
  // 300 counts left, then full periods of 1000.
  EXPECT_EQ(lapic.NextDeadline(), 5300u);
  lapic.Advance(5300);
  EXPECT_EQ(lapic.Pending(), 0x42);
  EXPECT_EQ(lapic.NextDeadline(), 6300u);
  // GetState reports expirations up to its time without changing the model.
  Page out{};
  Lapic copy = lapic;
  EXPECT_EQ(copy.Acknowledge(), 0x42);
  copy.Write(kApicRegEoi, 0, 5300);
  copy.GetState(out.data(), 6300);
  EXPECT_EQ(PageReg(out, VecReg(kApicRegIrr, 0x42)), VecBit(0x42));
  EXPECT_EQ(PageReg(out, kApicRegTimerCurrentCount), 1000u);
  EXPECT_EQ(copy.Pending(), std::nullopt);
  // One-shot with current count 0: already expired, nothing to arm.
  SetPageReg(page, kApicRegLvtTimer, 0x00000042);
  SetPageReg(page, kApicRegTimerCurrentCount, 0);
  lapic.SetState(page.data(), 7000);
  EXPECT_EQ(lapic.NextDeadline(), std::nullopt);
  EXPECT_EQ(lapic.Read(kApicRegTimerCurrentCount, 7000), 0u);
  // Periodic with current count 0: a full period from now.
  SetPageReg(page, kApicRegLvtTimer, 0x00020042);
  lapic.SetState(page.data(), 7000);
  EXPECT_EQ(lapic.NextDeadline(), 8000u);
  // Software disabled in the page: the LVT entries are taken as they are
  // (KVM's reset state has LINT0 = 700H, ExtINT unmasked, with SVR = FFH),
  // and the disabled APIC drops the timer's interrupt when it expires.
  SetPageReg(page, kApicRegSvr, 0xFF);
  SetPageReg(page, kApicRegLvtLint0, 0x700);
  lapic.SetState(page.data(), 7000);
  EXPECT_EQ(lapic.Read(kApicRegLvtTimer, 7000), 0x00020042u);
  EXPECT_EQ(lapic.lvt_lint0(), 0x700u);
  EXPECT_EQ(lapic.NextDeadline(), 8000u);
  lapic.Advance(8000);
  EXPECT_EQ(lapic.Pending(), std::nullopt);
  // A write to SVR that disables it again forces the masks (10.4.7.2).
  lapic.Write(kApicRegSvr, 0xFF, 8000);
  EXPECT_EQ(lapic.lvt_lint0(), 0x10700u);
}

// Readable bits of every register of the default model (0 for everything
// else), from the figures cited in ReservedBitsReadZeroAndReadOnlyRegistersIgnoreWrites.
uint32_t ReadableMask(uint32_t off) {
  if (off >= kApicRegIsr && off < kApicRegIsr + 0x180) return off % 0x80 == 0 ? 0xFFFF0000 : 0xFFFFFFFF;
  switch (off) {
    case kApicRegId: case kApicRegLdr: case kApicRegIcrHigh: return 0xFF000000;
    case kApicRegVersion: return 0x00050014;
    case kApicRegTpr: case kApicRegPpr: case kApicRegEsr: return 0xFF;
    case kApicRegDfr: return 0xFFFFFFFF;
    case kApicRegSvr: return 0x3FF;
    case kApicRegIcrLow: return 0x000CCFFF;
    case kApicRegLvtTimer: return 0x000300FF;
    case kApicRegLvtThermal: case kApicRegLvtPerf: return 0x000107FF;
    case kApicRegLvtLint0: case kApicRegLvtLint1: return 0x0001E7FF;
    case kApicRegLvtError: return 0x000100FF;
    case kApicRegTimerInitialCount: case kApicRegTimerCurrentCount: return 0xFFFFFFFF;
    case kApicRegTimerDivide: return 0xB;
    default: return 0;
  }
}

TEST(LapicTest, RandomWritesToEveryOffset) {
  std::mt19937 rng(20240611);
  // Start from an imported page with ISR, TMR and IRR bits set.
  Page page{};
  SetPageReg(page, kApicRegSvr, 0x1FF);
  SetPageReg(page, kApicRegTpr, 0x10);
  SetPageReg(page, VecReg(kApicRegIsr, 0x31), VecBit(0x31));
  SetPageReg(page, VecReg(kApicRegTmr, 0x31), VecBit(0x31));
  SetPageReg(page, VecReg(kApicRegIrr, 0x52), VecBit(0x52));
  Lapic lapic;
  lapic.SetState(page.data(), 0);
  // Phase 1: time stands still; everything but EOI and the ICR low word
  // (which change ISR and IRR by design).  ISR, TMR, IRR, version, APR, RRD
  // must not move and PPR must follow TPR and ISRV = 31H (10.8.3.1).
  for (int n = 0; n < 16 * 0x400; n++) {
    const uint32_t off = (n % 0x400) * 4;  // every offset 0..FFCH, 16 times
    if (off == kApicRegEoi || off == kApicRegIcrLow) continue;
    lapic.Write(off, uint32_t(rng()), 0);
    ASSERT_EQ(lapic.Read(VecReg(kApicRegIsr, 0x31), 0), VecBit(0x31)) << std::hex << off;
    ASSERT_EQ(lapic.Read(VecReg(kApicRegTmr, 0x31), 0), VecBit(0x31)) << std::hex << off;
    ASSERT_EQ(lapic.Read(VecReg(kApicRegIrr, 0x52), 0), VecBit(0x52)) << std::hex << off;
    ASSERT_EQ(lapic.Read(kApicRegVersion, 0), 0x00050014u);
    ASSERT_EQ(lapic.Read(kApicRegApr, 0), 0u);
    ASSERT_EQ(lapic.Read(kApicRegRrd, 0), 0u);
    const uint32_t tpr = lapic.Read(kApicRegTpr, 0);
    ASSERT_EQ(lapic.Read(kApicRegPpr, 0), (tpr >> 4) >= 3 ? tpr : 0x30u) << tpr;
  }
  // Phase 2: anything goes, at any offset (aligned or not, in or past the
  // page), interleaved with interrupts, acknowledges and time steps.  The
  // model stays defined: reserved bits read 0, vectors 0-15 never appear in
  // IRR/ISR, read-only registers keep their values, and the exported page is
  // a fixed point of SetState/GetState.
  uint64_t now = 0;
  // Values of every magnitude, so that small timer counts (which expire
  // within the run) are as common as large ones.
  auto value = [&] { return uint32_t(rng()) >> (rng() % 32); };
  // The registers with side effects, written more often than the rest.
  const uint32_t kHot[] = {kApicRegSvr, kApicRegTpr, kApicRegEoi, kApicRegEsr, kApicRegIcrLow, kApicRegIcrHigh,
                           kApicRegLvtTimer, kApicRegLvtError, kApicRegTimerInitialCount, kApicRegTimerDivide};
  int expirations = 0;
  for (int n = 0; n < 200000; n++) {
    switch (rng() % 8) {
      case 0: lapic.Raise(uint8_t(rng())); break;
      case 1: lapic.Acknowledge(); break;
      case 2: {
        const std::optional<uint64_t> deadline = lapic.NextDeadline();
        now += value() % 5000;
        if (deadline.has_value() && *deadline <= now) expirations++;
        lapic.Advance(now);
        break;
      }
      case 3: lapic.Write(rng(), value(), now); break;
      case 4: lapic.Read(rng(), now); break;
      case 5: lapic.Write(kHot[rng() % std::size(kHot)], value(), now); break;
      default: lapic.Write((rng() % 0x1000) & ~3u, value(), now); break;
    }
    if (std::optional<uint64_t> d = lapic.NextDeadline(); d.has_value()) {
      ASSERT_GT(*d, now);
    }
    if (n % 1000 != 0) continue;
    for (uint32_t off = 0; off < 0x1000; off += 4)
      ASSERT_EQ(lapic.Read(off, now) & ~ReadableMask(off), 0u) << std::hex << off;
    ASSERT_EQ(lapic.Read(kApicRegVersion, now), 0x00050014u);
    ASSERT_EQ(lapic.Read(kApicRegEoi, now), 0u);
    Page a, b;
    lapic.GetState(a.data(), now);
    // The one page that does not come back: a stopped timer (one-shot that
    // expired, then switched to periodic) exports count 0, which SetState
    // reads, as KVM_SET_LAPIC does, as a periodic timer at a full period.
    if ((PageReg(a, kApicRegLvtTimer) & kApicLvtTimerPeriodic) && PageReg(a, kApicRegTimerInitialCount) != 0 &&
        PageReg(a, kApicRegTimerCurrentCount) == 0)
      continue;
    Lapic copy;
    copy.SetState(a.data(), now);
    copy.GetState(b.data(), now);
    ASSERT_EQ(a, b) << n;
  }
  // The run did exercise the timer (a property of this seed, not of the model).
  EXPECT_GT(expirations, 100);
}

}  // namespace
}  // namespace vbts::vcpu
