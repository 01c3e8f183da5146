#include "vcpu/ioapic.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace vbts::vcpu {
namespace {

// Entry fields (82093AA datasheet 3.2.4).
constexpr uint32_t kLevel = 1u << 15, kMasked = 1u << 16, kRemoteIrr = 1u << 14, kLogical = 1u << 11;

class IoapicTest : public ::testing::Test {
 protected:
  IoapicTest()
      : io_([this](const Ioapic::Delivery& d) {
              delivered_.push_back(d);
              return accept_;
            },
            [this](uint8_t dest, bool logical) { nmis_.push_back(dest); }) {}

  uint32_t Reg(uint32_t reg) {
    io_.Write(0x00, reg);
    return io_.Read(0x10);
  }
  void SetReg(uint32_t reg, uint32_t value) {
    io_.Write(0x00, reg);
    io_.Write(0x10, value);
  }
  void SetEntry(int pin, uint32_t low, uint32_t high = 0) {
    SetReg(0x11 + 2 * pin, high);
    SetReg(0x10 + 2 * pin, low);
  }
  uint32_t EntryLow(int pin) { return Reg(0x10 + 2 * pin); }

  Ioapic io_;
  std::vector<Ioapic::Delivery> delivered_;
  std::vector<uint8_t> nmis_;
  bool accept_ = true;
};

TEST_F(IoapicTest, ResetAndIdentificationRegisters) {
  // Version: 24 entries (max index 23 in bits 23:16), version 11H.
  EXPECT_EQ(Reg(0x01), 0x00170011u);
  SetReg(0x01, 0xFFFFFFFF);
  EXPECT_EQ(Reg(0x01), 0x00170011u);  // read only
  // ID: only bits 27:24 are writable (kvm-unit-tests ioapic.c "id register
  // only bits [24:27] writable").
  EXPECT_EQ(Reg(0x00), 0u);
  SetReg(0x00, 0xFFFFFFFF);
  EXPECT_EQ(Reg(0x00), 0x0F000000u);
  // Arbitration ID follows the ID and is read only.
  EXPECT_EQ(Reg(0x02), 0x0F000000u);
  SetReg(0x02, 0);
  EXPECT_EQ(Reg(0x02), 0x0F000000u);
  // Every entry masked after reset; IOREGSEL reads back its 8 bits.
  for (int pin = 0; pin < kIoapicPins; pin++) EXPECT_EQ(EntryLow(pin), kMasked) << pin;
  io_.Write(0x00, 0x1234);
  EXPECT_EQ(io_.Read(0x00), 0x34u);
  // Registers past the last entry and offsets other than 00H/10H read 0.
  EXPECT_EQ(Reg(0x10 + 2 * kIoapicPins), 0u);
  EXPECT_EQ(io_.Read(0x20), 0u);
  EXPECT_EQ(io_.Read(0x04), 0u);
}

TEST_F(IoapicTest, EdgeEntryDeliversOnRisingEdgesOnly) {
  SetEntry(14, 0x76, 0x01000000);
  io_.SetLine(14, true);
  ASSERT_EQ(delivered_.size(), 1u);
  EXPECT_EQ(delivered_[0].vector, 0x76);
  EXPECT_FALSE(delivered_[0].level);
  EXPECT_EQ(delivered_[0].dest, 1);
  EXPECT_FALSE(delivered_[0].logical);
  io_.SetLine(14, true);  // still high: no edge
  EXPECT_EQ(delivered_.size(), 1u);
  io_.SetLine(14, false);
  io_.SetLine(14, true);
  EXPECT_EQ(delivered_.size(), 2u);
  EXPECT_EQ(EntryLow(14) & kRemoteIrr, 0u);  // edge entries have no Remote IRR
}

TEST_F(IoapicTest, LevelEntryHoldsRemoteIrrUntilEoi) {
  SetEntry(14, 0x77 | kLevel | kLogical, 0xFF000000);
  io_.SetLine(14, true);
  ASSERT_EQ(delivered_.size(), 1u);
  EXPECT_TRUE(delivered_[0].level);
  EXPECT_TRUE(delivered_[0].logical);
  EXPECT_EQ(delivered_[0].dest, 0xFF);
  EXPECT_EQ(EntryLow(14) & kRemoteIrr, kRemoteIrr);
  io_.SetLine(14, true);  // Remote IRR set: nothing new
  EXPECT_EQ(delivered_.size(), 1u);
  // EOI with the line still high: delivered again ("sequential level interrupts").
  io_.Eoi(0x77);
  EXPECT_EQ(delivered_.size(), 2u);
  // Line low, then EOI: Remote IRR clears, nothing is delivered.
  io_.SetLine(14, false);
  io_.Eoi(0x77);
  EXPECT_EQ(delivered_.size(), 2u);
  EXPECT_EQ(EntryLow(14) & kRemoteIrr, 0u);
  // An EOI for another vector changes nothing.
  io_.SetLine(14, true);
  io_.Eoi(0x78);
  EXPECT_EQ(delivered_.size(), 3u);
  EXPECT_EQ(EntryLow(14) & kRemoteIrr, kRemoteIrr);
}

TEST_F(IoapicTest, UnmaskingALevelEntryWithItsLineHighDelivers) {
  // kvm-unit-tests "masked level interrupt" / "unmasked level interrupt".
  SetEntry(14, 0x82 | kLevel | kMasked);
  io_.SetLine(14, true);
  EXPECT_TRUE(delivered_.empty());
  SetEntry(14, 0x82 | kLevel);
  ASSERT_EQ(delivered_.size(), 1u);
  EXPECT_EQ(delivered_[0].vector, 0x82);
  // "retriggered level interrupts with mask": masked in the handler, EOI
  // (no delivery while masked), unmasked with the line still high.
  SetEntry(14, 0x82 | kLevel | kMasked);
  io_.Eoi(0x82);
  EXPECT_EQ(delivered_.size(), 1u);
  SetEntry(14, 0x82 | kLevel);
  EXPECT_EQ(delivered_.size(), 2u);
}

TEST_F(IoapicTest, AMaskedEdgeIsLostAsInKvm) {
  SetEntry(14, 0x81 | kMasked);
  io_.SetLine(14, true);
  io_.SetLine(14, false);
  SetEntry(14, 0x81);
  EXPECT_TRUE(delivered_.empty());
  io_.SetLine(14, true);
  EXPECT_EQ(delivered_.size(), 1u);
}

TEST_F(IoapicTest, ReadOnlyEntryBitsAndEdgeModeClearingRemoteIrr) {
  SetEntry(3, 0x40 | kLevel);
  io_.SetLine(3, true);
  ASSERT_EQ(EntryLow(3) & kRemoteIrr, kRemoteIrr);
  // Rewriting the low half with bits 12 (delivery status), 14 (Remote IRR)
  // and 18-31 (reserved) set stores only the writable bits (vector 40H,
  // polarity, level) and keeps Remote IRR: 0xA040 | 0x4000.
  SetReg(0x10 + 2 * 3, 0xFFFC7040 | kLevel);
  EXPECT_EQ(EntryLow(3), 0xE040u);
  // The high half holds only the destination (bits 63:56) and the extended
  // destination ID (55:48); 47:32 are reserved.
  SetReg(0x11 + 2 * 3, 0xAB12FFFF);
  EXPECT_EQ(Reg(0x11 + 2 * 3), 0xAB120000u);
  // Edge trigger mode: Remote IRR goes.
  SetReg(0x10 + 2 * 3, 0x40);
  EXPECT_EQ(EntryLow(3), 0x40u);
}

TEST_F(IoapicTest, ARemapperTakesFixedLowestAndNmiEntriesWhole) {
  std::vector<uint64_t> remapped;
  bool accept = true;
  io_.SetRemapper([&](uint64_t e) {
    remapped.push_back(e);
    return accept;
  });
  // Remappable format (VT-d spec 5.1.5.1): index 1 in bits 63:49, format
  // bit 48, vector 0xED, edge. The entry reaches the remapper as written.
  SetEntry(11, 0xED, 0x00030000);
  io_.SetLine(11, true);
  ASSERT_EQ(remapped.size(), 1u);
  EXPECT_EQ(remapped[0], 0x00030000000000EDull);
  EXPECT_TRUE(delivered_.empty());
  // Level triggered and accepted: Remote IRR is set as for a direct delivery.
  SetEntry(12, 0x40 | kLevel, 0x00050000);
  io_.SetLine(12, true);
  EXPECT_EQ(EntryLow(12) & kRemoteIrr, kRemoteIrr);
  // Refused: no Remote IRR.
  accept = false;
  SetEntry(13, 0x41 | kLevel, 0x00070000);
  io_.SetLine(13, true);
  EXPECT_EQ(EntryLow(13) & kRemoteIrr, 0u);
  // NMI (delivery mode 4) goes to the remapper too; ExtINT (7) does not.
  SetEntry(14, 0x400);
  io_.SetLine(14, true);
  SetEntry(15, 0x700);
  io_.SetLine(15, true);
  EXPECT_EQ(remapped.size(), 4u);
  EXPECT_TRUE(nmis_.empty());
}

TEST_F(IoapicTest, RefusedDeliveryLeavesRemoteIrrClear) {
  accept_ = false;  // e.g. the LAPIC is software disabled
  SetEntry(5, 0x50 | kLevel);
  io_.SetLine(5, true);
  EXPECT_EQ(delivered_.size(), 1u);
  EXPECT_EQ(EntryLow(5) & kRemoteIrr, 0u);
}

TEST_F(IoapicTest, NmiAndUnmodelledDeliveryModes) {
  SetEntry(2, (4u << 8), 0x03000000);  // NMI
  io_.SetLine(2, true);
  ASSERT_EQ(nmis_.size(), 1u);
  EXPECT_EQ(nmis_[0], 3);
  EXPECT_TRUE(delivered_.empty());
  for (uint32_t mode : {2u, 5u, 7u}) {  // SMI, INIT, ExtINT: dropped
    SetEntry(6, 0x30 | (mode << 8));
    io_.SetLine(6, false);
    io_.SetLine(6, true);
  }
  EXPECT_TRUE(delivered_.empty());
  EXPECT_EQ(nmis_.size(), 1u);
  // Pins beyond the 24th are ignored.
  io_.SetLine(24, true);
  io_.SetLine(1000, true);
  EXPECT_EQ(io_.GetState().irr, 1u << 2 | 1u << 6);
}

TEST_F(IoapicTest, StateRoundTrips) {
  SetReg(0x00, 0x05000000);
  SetEntry(14, 0x77 | kLevel, 0x02000000);
  io_.SetLine(14, true);
  io_.Write(0x00, 0x1D);
  const IoapicState s = io_.GetState();
  EXPECT_EQ(s.id, 5u);
  EXPECT_EQ(s.irr, 1u << 14);
  EXPECT_EQ(s.ioregsel, 0x1Du);
  EXPECT_EQ(s.redirtbl[14], (uint64_t{0x02} << 56) | 0x77 | kLevel | kRemoteIrr);
  Ioapic other(nullptr, nullptr);
  other.SetState(s);
  const IoapicState t = other.GetState();
  EXPECT_EQ(t.id, s.id);
  EXPECT_EQ(t.irr, s.irr);
  EXPECT_EQ(t.ioregsel, s.ioregsel);
  EXPECT_EQ(t.redirtbl, s.redirtbl);
  EXPECT_EQ(t.base_address, kIoapicDefaultBase);
  // Out-of-range fields from KVM are cut to the model's.
  IoapicState wide = s;
  wide.id = 0xFF;
  wide.ioregsel = 0x1FF;
  wide.irr = 0xFFFFFFFF;
  other.SetState(wide);
  EXPECT_EQ(other.GetState().id, 0xFu);
  EXPECT_EQ(other.GetState().ioregsel, 0xFFu);
  EXPECT_EQ(other.GetState().irr, 0xFFFFFFu);
}

}  // namespace
}  // namespace vbts::vcpu
