// pci_edu_test.cc: the edu device's configuration space and registers
// (values from vmm/pci_edu.h: QEMU's hw/misc/edu.c and docs/specs/edu.rst;
// PCI 3.0 for the configuration rules of vmm/pci_function.h).
#include "vmm/pci_edu.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "vmm/pci_host.h"

namespace vbts::vmm {
namespace {

class FakePlatform : public PciPlatform {
 public:
  absl::Status DmaRead(uint16_t requester, uint64_t address, absl::Span<uint8_t> out) override {
    reads.push_back(address);
    if (address + out.size() > ram.size()) return absl::OutOfRangeError("no RAM");
    std::memcpy(out.data(), ram.data() + address, out.size());
    return absl::OkStatus();
  }
  absl::Status DmaWrite(uint16_t requester, uint64_t address, absl::Span<const uint8_t> data) override {
    if (address + data.size() > ram.size()) return absl::OutOfRangeError("no RAM");
    std::memcpy(ram.data() + address, data.data(), data.size());
    return absl::OkStatus();
  }
  void SetIntx(uint16_t requester, uint8_t line, bool level) override { intx.push_back({line, level}); }
  void SignalMsi(uint16_t requester, const MsiMessage& m) override { msis.push_back(m); }

  std::vector<uint8_t> ram = std::vector<uint8_t>(0x10000, 0);
  std::vector<uint64_t> reads;
  std::vector<std::pair<uint8_t, bool>> intx;
  std::vector<MsiMessage> msis;
};

class PciEduTest : public ::testing::Test {
 protected:
  PciEduTest() { host_.Attach(0x18, &edu_); }
  uint32_t Config(uint32_t reg, int size = 4) {
    Out(0xCF8, 4, 0x80001800 | (reg & 0xFC));
    return In(0xCFC + (reg & 3), size);
  }
  void SetConfig(uint32_t reg, int size, uint32_t v) {
    Out(0xCF8, 4, 0x80001800 | (reg & 0xFC));
    Out(static_cast<uint16_t>(0xCFC + (reg & 3)), size, v);
  }
  uint32_t In(uint16_t port, int size) {
    uint8_t b[4] = {};
    host_.Read(static_cast<uint16_t>(port - PciHost::kPort), absl::MakeSpan(b, size));
    uint32_t v = 0;
    std::memcpy(&v, b, size);
    return v;
  }
  void Out(uint16_t port, int size, uint32_t v) {
    uint8_t b[4];
    std::memcpy(b, &v, 4);
    host_.Write(static_cast<uint16_t>(port - PciHost::kPort), absl::MakeConstSpan(b, size));
  }

  FakePlatform platform_;
  PciEdu edu_{platform_, 0x18, 0xFE000000, 11};
  PciHost host_;
};

TEST_F(PciEduTest, ConfigurationSpaceAsQemuHasIt) {
  EXPECT_EQ(Config(0x00), 0x11E81234u);  // device 11E8H, vendor 1234H
  EXPECT_EQ(Config(0x08), 0x00FF0010u);  // class 00H, subclass FFH, prog-if 00H, revision 10H
  EXPECT_EQ(Config(0x06, 2), 0x0010u);   // status: capability list
  EXPECT_EQ(Config(0x34, 1), 0x40u);     // the MSI capability
  EXPECT_EQ(Config(0x40), 0x00800005u);  // ID 05H, no next, control: 64-bit, one vector, disabled
  EXPECT_EQ(Config(0x3C, 2), 0x010Bu);   // pin INTA#, line 11
  EXPECT_EQ(Config(0x10), 0xFE000000u);  // BAR0: 32-bit memory
  // Sizing BAR0: all ones read back as the 1-MiB mask.
  SetConfig(0x10, 4, 0xFFFFFFFF);
  EXPECT_EQ(Config(0x10), 0xFFF00000u);
  SetConfig(0x10, 4, 0xFE100000);
  EXPECT_EQ(Config(0x10), 0xFE100000u);
  EXPECT_EQ(edu_.MemoryBar(0), std::nullopt);  // memory decoding still off
  // Command: I/O, memory, master, INTx disable are writable; the rest not.
  SetConfig(0x04, 2, 0xFFFF);
  EXPECT_EQ(Config(0x04, 2), 0x0407u);
  EXPECT_EQ(edu_.MemoryBar(0), 0xFE100000u);
  // The register offset in CONFIG_ADDRESS bits 1:0, as kvm-unit-tests
  // gives it: 0x80001802 then a word at 0xCFC reads the device ID.
  Out(0xCF8, 4, 0x80001802);
  EXPECT_EQ(In(0xCFC, 2), 0x11E8u);
  EXPECT_EQ(In(0xCF8, 4), 0x80001800u);  // bits 1:0 still read 0
}

TEST_F(PciEduTest, RegistersAsQemuHasThem) {
  EXPECT_EQ(edu_.MmioRead(0x00, 4), 0x010000EDu);
  edu_.MmioWrite(0x04, 4, 0x12345678);
  EXPECT_EQ(edu_.MmioRead(0x04, 4), 0xEDCBA987u);  // NOT of what was written
  edu_.MmioWrite(0x08, 4, 10);
  EXPECT_EQ(edu_.MmioRead(0x08, 4), 3628800u);  // 10!
  edu_.MmioWrite(0x08, 4, 13);
  EXPECT_EQ(edu_.MmioRead(0x08, 4), 1932053504u);  // 13! mod 2^32 = 6227020800 - 4294967296
  EXPECT_EQ(edu_.MmioRead(0x20, 4), 0u);  // not computing
  // Below 80H only 4-byte accesses; unknown offsets read all ones.
  EXPECT_EQ(edu_.MmioRead(0x00, 8), ~0ull);
  EXPECT_EQ(edu_.MmioRead(0x00, 2), ~0ull);
  EXPECT_EQ(edu_.MmioRead(0x30, 4), 0xFFFFFFFFu);
  edu_.MmioWrite(0x80, 8, 0x1122334455667788);
  EXPECT_EQ(edu_.MmioRead(0x80, 8), 0x1122334455667788u);
  EXPECT_EQ(edu_.MmioRead(0x80, 4), 0x55667788u);
}

TEST_F(PciEduTest, DmaBothWaysAndItsInterrupt) {
  SetConfig(0x04, 2, PciFunction::kCommandMemory | PciFunction::kCommandMaster);
  platform_.ram[0x1000] = 0xAB;
  platform_.ram[0x1001] = 0xCD;
  // RAM 0x1000 -> buffer offset 8, then buffer offset 8 -> RAM 0x2004, raising 0x100.
  edu_.MmioWrite(0x80, 8, 0x1000);
  edu_.MmioWrite(0x88, 8, PciEdu::kBufferAddress + 8);
  edu_.MmioWrite(0x90, 8, 2);
  edu_.MmioWrite(0x98, 4, 1);
  EXPECT_EQ(edu_.MmioRead(0x98, 4), 0u);  // done: the start bit is clear
  edu_.MmioWrite(0x80, 8, PciEdu::kBufferAddress + 8);
  edu_.MmioWrite(0x88, 8, 0x2004);
  edu_.MmioWrite(0x98, 4, 1 | 2 | 4);
  EXPECT_EQ(platform_.ram[0x2004], 0xABu);
  EXPECT_EQ(platform_.ram[0x2005], 0xCDu);
  EXPECT_EQ(edu_.irq_status(), PciEdu::kIrqDma);
  ASSERT_EQ(platform_.intx.size(), 1u);
  EXPECT_EQ(platform_.intx[0], (std::pair<uint8_t, bool>{11, true}));
  edu_.MmioWrite(0x64, 4, PciEdu::kIrqDma);  // acknowledge: the line drops
  ASSERT_EQ(platform_.intx.size(), 2u);
  EXPECT_EQ(platform_.intx[1], (std::pair<uint8_t, bool>{11, false}));
  // Outside the buffer: nothing moves, the transfer completes.
  edu_.MmioWrite(0x80, 8, PciEdu::kBufferAddress + 4095);
  edu_.MmioWrite(0x88, 8, 0x3000);
  edu_.MmioWrite(0x90, 8, 2);
  edu_.MmioWrite(0x98, 4, 1 | 2);
  EXPECT_EQ(platform_.ram[0x3000], 0u);
  EXPECT_EQ(edu_.dma_errors(), 1u);
  // The RAM-side address keeps 28 bits.
  edu_.MmioWrite(0x80, 8, 0x10001000);
  edu_.MmioWrite(0x88, 8, PciEdu::kBufferAddress);
  edu_.MmioWrite(0x90, 8, 1);
  edu_.MmioWrite(0x98, 4, 1);
  EXPECT_EQ(platform_.reads.back(), 0x1000u);
  // Bus mastering off: the transfer moves nothing.
  SetConfig(0x04, 2, PciFunction::kCommandMemory);
  edu_.MmioWrite(0x98, 4, 1);
  EXPECT_EQ(platform_.reads.size(), 2u);
  EXPECT_EQ(edu_.dma_errors(), 2u);
}

TEST_F(PciEduTest, MsiReplacesIntx) {
  // 64-bit MSI: address FEE00050H, data 0; enable.
  SetConfig(0x44, 4, 0xFEE00050);
  SetConfig(0x48, 4, 0);
  SetConfig(0x4C, 2, 0x0031);
  SetConfig(0x42, 2, 1);
  EXPECT_EQ(Config(0x40), 0x00810005u);
  edu_.MmioWrite(0x60, 4, 0x8);
  ASSERT_EQ(platform_.msis.size(), 1u);
  EXPECT_EQ(platform_.msis[0], (MsiMessage{0xFEE00050, 0x31}));
  EXPECT_TRUE(platform_.intx.empty());
  // A raise of 0 with a bit still pending signals again (QEMU).
  edu_.MmioWrite(0x60, 4, 0);
  EXPECT_EQ(platform_.msis.size(), 2u);
  // MSI off: the pending interrupt goes to INTx; INTx disable takes it away.
  SetConfig(0x42, 2, 0);
  ASSERT_EQ(platform_.intx.size(), 1u);
  EXPECT_TRUE(platform_.intx[0].second);
  SetConfig(0x04, 2, PciFunction::kCommandIntxDisable);
  ASSERT_EQ(platform_.intx.size(), 2u);
  EXPECT_FALSE(platform_.intx[1].second);
}

TEST_F(PciEduTest, FactorialInterruptWhenAsked) {
  edu_.MmioWrite(0x20, 4, 0x81);  // bit 0 is read only
  EXPECT_EQ(edu_.MmioRead(0x20, 4), 0x80u);
  edu_.MmioWrite(0x08, 4, 5);
  EXPECT_EQ(edu_.MmioRead(0x08, 4), 120u);
  EXPECT_EQ(edu_.MmioRead(0x24, 4), PciEdu::kIrqFactorial);
}

// MsiTarget (vmm/pci_function.h): the destination an MSI names, SDM vol. 3A
// 10.11.1 (address FEEH:dest:..:DM:..), x2APIC bits from address 63:40.
TEST(MsiTargetTest, DestinationOfEachKindOfMessage) {
  // The edu's message above: FEE00050H = destination 0, physical.
  std::optional<MsiTarget> t = MsiTarget::Of(MsiMessage{0xFEE00050, 0x31});
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->dest, 0u);
  EXPECT_FALSE(t->logical);
  // 8-bit broadcast FFH, logical (bit 2): stays FFH, for Lapic::Accepts.
  t = MsiTarget::Of(MsiMessage{0xFEEFF004, 0x31});
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->dest, 0xFFu);
  EXPECT_TRUE(t->logical);
  // Upper address bits in an 8-bit message: a write above 4 GiB, no interrupt.
  EXPECT_FALSE(MsiTarget::Of(MsiMessage{0x1'FEE0'0000ull, 0x31}).has_value());
  // Not FEEH: no interrupt.
  EXPECT_FALSE(MsiTarget::Of(MsiMessage{0xFED00000, 0x31}).has_value());
  // x2APIC format: 0x00020020 = bits 7:0 20H in 19:12, bits 31:8 200H in 63:40.
  t = MsiTarget::Of(MsiMessage{0xFEE20004ull | 0x200ull << 40, 0x40, /*x2apic_dest=*/true});
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->dest, 0x00020020u);
  EXPECT_TRUE(t->logical);
}

}  // namespace
}  // namespace vbts::vmm
