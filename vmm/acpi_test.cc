// acpi_test.cc: the ACPI tables read back as a guest's parser would (checksums, pointers, FADT fields,
// MADT entries) and the PM block's registers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/status_macros.h"
#include "base/testing/status_matchers.h"
#include "pmu/testing/fake_memory.h"
#include "vmm/acpi_pm.h"
#include "vmm/acpi_tables.h"

namespace vbts::vmm {
namespace {

using ::vbts::testing::FakePhysMemory;

class AcpiTablesTest : public ::testing::Test {
 protected:
  void SetUp() override { VBTS_ASSERT_OK(WriteAcpiTables(ram_)); }
  uint64_t R(uint64_t gpa, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | ram_.bytes().at(gpa + i);
    return v;
  }
  std::string S(uint64_t gpa, int n) { return std::string(ram_.bytes().begin() + gpa, ram_.bytes().begin() + gpa + n); }
  uint8_t Sum(uint64_t gpa, uint64_t n) {
    uint8_t s = 0;
    for (uint64_t i = 0; i < n; i++) s = static_cast<uint8_t>(s + ram_.bytes()[gpa + i]);
    return s;
  }
  // A table at `gpa` with signature `sig`, checksummed over its length.
  void ExpectTable(uint64_t gpa, const std::string& sig) {
    EXPECT_EQ(S(gpa, 4), sig);
    EXPECT_EQ(Sum(gpa, R(gpa + 4, 4)), 0) << sig;
    EXPECT_EQ(S(gpa + 10, 6), "VBTS  ");
  }
  FakePhysMemory ram_{0x200000};
};

TEST_F(AcpiTablesTest, RsdpPointsAtRsdtAndXsdtWithValidChecksums) {
  const uint64_t rsdp = 0xF0000;  // 16-byte aligned in the BIOS area both Linux and kvm-unit-tests scan
  EXPECT_EQ(S(rsdp, 8), "RSD PTR ");
  EXPECT_EQ(Sum(rsdp, 20), 0);
  EXPECT_EQ(Sum(rsdp, 36), 0);
  EXPECT_EQ(R(rsdp + 15, 1), 2u);
  EXPECT_EQ(R(rsdp + 20, 4), 36u);
  const uint64_t rsdt = R(rsdp + 16, 4), xsdt = R(rsdp + 24, 8);
  ExpectTable(rsdt, "RSDT");
  ExpectTable(xsdt, "XSDT");
  EXPECT_EQ(R(rsdt + 4, 4), 48u);  // three entries
  EXPECT_EQ(R(xsdt + 4, 4), 60u);
  EXPECT_EQ(R(rsdt + 36, 4), R(xsdt + 36, 8));
  EXPECT_EQ(R(rsdt + 40, 4), R(xsdt + 44, 8));
  EXPECT_EQ(R(rsdt + 44, 4), R(xsdt + 52, 8));
  ExpectTable(R(xsdt + 36, 8), "FACP");
  ExpectTable(R(xsdt + 44, 8), "APIC");
  ExpectTable(R(xsdt + 52, 8), "HPET");
}

TEST_F(AcpiTablesTest, HpetTableNamesTheTimerBlock) {
  // IA-PC HPET spec 1.0a 3.2.4: 56 bytes; the block ID is GCAP_ID's low half
  // (vendor 8086H, LEG_RT_CAP, COUNT_SIZE_CAP, 3 timers, revision 1: the
  // block vmm/hpet.h models); the base a memory-space GAS at 0xFED00000.
  const uint64_t hpet = R(R(0xF0000 + 24, 8) + 52, 8);
  EXPECT_EQ(R(hpet + 4, 4), 56u);
  EXPECT_EQ(R(hpet + 8, 1), 1u);
  EXPECT_EQ(R(hpet + 36, 4), 0x8086A201u);
  EXPECT_EQ(R(hpet + 40, 4), 0u);  // space 0 (memory), width, offset, access size
  EXPECT_EQ(R(hpet + 44, 8), 0xFED00000u);
  EXPECT_EQ(R(hpet + 52, 1), 0u);  // HPET number
  EXPECT_EQ(R(hpet + 53, 2), 0u);  // minimum periodic tick
  EXPECT_EQ(R(hpet + 55, 1), 0u);  // no page protection
}

TEST_F(AcpiTablesTest, FadtDescribesThePmBlockAndTheResetLine) {
  const uint64_t fadt = R(R(0xF0000 + 24, 8) + 36, 8);
  EXPECT_EQ(R(fadt + 4, 4), 244u);
  const uint64_t facs = R(fadt + 36, 4), dsdt = R(fadt + 40, 4);
  EXPECT_EQ(R(fadt + 132, 8), facs);
  EXPECT_EQ(R(fadt + 140, 8), dsdt);
  EXPECT_EQ(facs % 64, 0u);
  EXPECT_EQ(S(facs, 4), "FACS");
  EXPECT_EQ(R(facs + 4, 4), 64u);
  ExpectTable(dsdt, "DSDT");
  // \_S5 = Package {0, 0, 0, 0}: the SLP_TYP the PM block powers off on (QEMU's).
  EXPECT_EQ(R(dsdt + 4, 4), 48u);
  EXPECT_EQ(S(dsdt + 36, 12), std::string("\x08_S5_\x12\x06\x04\x00\x00\x00\x00", 12));
  EXPECT_EQ(R(fadt + 46, 2), 9u);        // SCI_INT
  EXPECT_EQ(R(fadt + 48, 4), 0u);        // no SMI_CMD: ACPI mode from reset
  EXPECT_EQ(R(fadt + 56, 4), 0x600u);    // PM1a_EVT_BLK
  EXPECT_EQ(R(fadt + 64, 4), 0x604u);    // PM1a_CNT_BLK
  EXPECT_EQ(R(fadt + 76, 4), 0x608u);    // PM_TMR_BLK
  EXPECT_EQ(R(fadt + 88, 4), 0x04000204u);  // PM1_EVT_LEN 4, PM1_CNT_LEN 2, PM2 0, PM_TMR_LEN 4
  EXPECT_EQ(R(fadt + 108, 1), 0x32u);    // CENTURY (vmm/cmos_rtc.h)
  EXPECT_EQ(R(fadt + 109, 2), 0x5u);     // legacy devices, no VGA, no 8042
  EXPECT_EQ(R(fadt + 112, 4), 0x435u);   // WBINVD, PROC_C1, PWR_BUTTON, SLP_BUTTON, RESET_REG_SUP
  EXPECT_EQ(R(fadt + 116, 4), 0x01000801u);  // RESET_REG: system I/O, 8 bits, byte access
  EXPECT_EQ(R(fadt + 120, 8), 0x64u);
  EXPECT_EQ(R(fadt + 128, 1), 0xFEu);
  EXPECT_EQ(R(fadt + 208 + 4, 8), 0x608u);  // X_PM_TMR_BLK
}

TEST_F(AcpiTablesTest, MadtHasOneCpuTheIoApicTheSciOverrideAndLint1Nmi) {
  const uint64_t madt = R(R(0xF0000 + 24, 8) + 44, 8);
  EXPECT_EQ(R(madt + 4, 4), 44u + 8 + 12 + 10 + 6);
  EXPECT_EQ(R(madt + 36, 4), 0xFEE00000u);
  EXPECT_EQ(R(madt + 40, 4), 1u);  // PCAT_COMPAT
  const uint64_t e = madt + 44;
  EXPECT_EQ(R(e, 8), 0x0000000100000800ull);         // type 0, length 8, UID 0, APIC ID 0, enabled
  EXPECT_EQ(R(e + 8, 4), 0x00000C01u);               // type 1, length 12, I/O APIC ID 0
  EXPECT_EQ(R(e + 12, 4), 0xFEC00000u);
  EXPECT_EQ(R(e + 16, 4), 0u);                       // GSI base
  EXPECT_EQ(R(e + 20, 4), 0x09000A02u);              // type 2, length 10, ISA, IRQ 9
  EXPECT_EQ(R(e + 24, 4), 9u);                       // -> GSI 9
  EXPECT_EQ(R(e + 28, 2), 0x000Du);                  // active high, level
  EXPECT_EQ(R(e + 30, 6), 0x010000FF0604ull);        // type 4, length 6, all CPUs, LINT1
}

class AcpiDeviceTablesTest : public AcpiTablesTest {
 protected:
  void SetUp() override { VBTS_ASSERT_OK(WriteAcpiTables(ram_, AcpiOptions{.dmar = true, .pci_root = true})); }
};

TEST_F(AcpiDeviceTablesTest, DmarDescribesTheRemappingUnitAndTheIoapicScope) {
  const uint64_t xsdt = R(0xF0000 + 24, 8);
  EXPECT_EQ(R(xsdt + 4, 4), 36u + 5 * 8);  // FADT, MADT, HPET, DMAR, SSDT
  const uint64_t rsdt = R(0xF0000 + 16, 4);
  EXPECT_EQ(R(rsdt + 4, 4), 36u + 5 * 4);
  const uint64_t dmar = R(xsdt + 60, 8);
  EXPECT_EQ(R(rsdt + 48, 4), dmar);
  ExpectTable(dmar, "DMAR");
  // VT-d spec 8.1: 48-byte header then one 24-byte DRHD: 72 bytes.
  EXPECT_EQ(R(dmar + 4, 4), 72u);
  EXPECT_EQ(R(dmar + 36, 1), 38u);    // host address width 39 - 1
  EXPECT_EQ(R(dmar + 37, 1), 0x1u);   // INTR_REMAP; not X2APIC_OPT_OUT (the unit has EIM)
  // DRHD (8.3): type 0, length 24, INCLUDE_PCI_ALL, segment 0, base.
  EXPECT_EQ(R(dmar + 48, 8), 0x0000'0001'0018'0000ull);
  EXPECT_EQ(R(dmar + 56, 8), 0xFED90000u);
  // Device scope (8.3.1): I/O APIC (3), length 8, enumeration ID 0, bus FFH, path 00.0.
  EXPECT_EQ(R(dmar + 64, 8), 0x0000'FF00'0000'0803ull);
}

TEST_F(AcpiDeviceTablesTest, SsdtHoldsThePciRootInAml) {
  const uint64_t ssdt = R(R(0xF0000 + 24, 8) + 68, 8);
  ExpectTable(ssdt, "SSDT");
  // Scope (\_SB) { Device (PCI0) { Name (_HID, EisaId ("PNP0A03")) ...: a
  // one-byte PkgLength for the scope would not hold the 76-byte _CRS, so it
  // is two bytes (ACPI 6.4 20.2.4): 0x40 | (n & 0xF), n >> 4.
  const uint64_t aml = ssdt + 36;
  const uint64_t n = R(ssdt + 4, 4) - 36;  // the scope, all of the AML
  EXPECT_EQ(R(aml, 1), 0x10u);                                         // ScopeOp
  EXPECT_EQ(R(aml + 1, 1), 0x40u | ((n - 1) & 0xF));                   // its PkgLength
  EXPECT_EQ(R(aml + 2, 1), (n - 1) >> 4);
  EXPECT_EQ(S(aml + 3, 5), "\\_SB_");
  EXPECT_EQ(R(aml + 8, 2), 0x825Bu);                                   // DeviceOp
  EXPECT_EQ(S(aml + 12, 4), "PCI0");
  EXPECT_EQ(S(aml + 16, 5), "\x08_HID");
  EXPECT_EQ(R(aml + 21, 5), 0x030AD0410Cull);                           // DWordConst EisaId ("PNP0A03")
  // _CRS's memory window: C0000000-FEBFFFFF, length 3EC00000H.
  const std::string all = S(aml, static_cast<int>(n));
  const size_t mem = all.find(std::string("\x87\x17\x00\x00\x0C\x01", 6));
  ASSERT_NE(mem, std::string::npos);
  EXPECT_EQ(R(aml + mem + 10, 4), 0xC0000000u);
  EXPECT_EQ(R(aml + mem + 14, 4), 0xFEBFFFFFu);
  EXPECT_EQ(R(aml + mem + 22, 4), 0x3EC00000u);
  EXPECT_EQ(R(aml + n - 2, 2), 0x0079u);  // the end tag closes the template
}

TEST(AcpiTablesSmallRamTest, NoTablesWithoutRamThere) {
  FakePhysMemory ram(0x80000);
  VBTS_EXPECT_OK(WriteAcpiTables(ram));
}

TEST(AcpiPmTest, TimerRunsAt3579545HzAndWrapsAt24Bits) {
  uint64_t ns = 1000000000;  // 1 s: 3 579 545 ticks
  AcpiPm pm([&ns] { return ns; });
  uint8_t b[4];
  pm.Read(8, absl::MakeSpan(b, 4));
  EXPECT_EQ(b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24), 3579545);
  ns = 5000000000ull;  // 17 897 725 ticks = 0x11118FD: 24 bits keep 0x1118FD
  EXPECT_EQ(pm.Timer(), 0x1118FDu);
}

TEST(AcpiPmTest, SciEnReadsSetS3SuspendsAndS5PowersOff) {
  AcpiPm pm([] { return uint64_t{0}; });
  uint8_t b[2];
  pm.Read(4, absl::MakeSpan(b, 2));
  EXPECT_EQ(b[0], 1);  // SCI_EN
  auto cnt = [&pm](uint16_t v) {
    const uint8_t w[2] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8)};
    pm.Write(4, absl::MakeConstSpan(w, 2));
  };
  cnt((3u << 10) | (1u << 13));  // SLP_TYP 3: nothing vbts knows
  EXPECT_FALSE(pm.power_off_requested());
  EXPECT_FALSE(pm.TakeSuspend());
  EXPECT_EQ(pm.ignored_sleep_type(), 3);
  cnt(0x2400);  // SLP_EN | SLP_TYP 1: S3, as kvm-unit-tests s3 writes it
  EXPECT_TRUE(pm.TakeSuspend());
  EXPECT_FALSE(pm.TakeSuspend());  // taken once
  pm.Woke();
  pm.Read(0, absl::MakeSpan(b, 2));
  EXPECT_EQ(b[1] & 0x80, 0x80);  // WAK_STS
  const uint8_t clear[2] = {0, 0x80};
  pm.Write(0, absl::MakeConstSpan(clear, 2));
  pm.Read(0, absl::MakeSpan(b, 2));
  EXPECT_EQ(b[1] & 0x80, 0);
  cnt(1u << 13);  // SLP_TYP 0: soft-off
  EXPECT_TRUE(pm.power_off_requested());
  pm.Read(4, absl::MakeSpan(b, 2));
  EXPECT_EQ(b[0] | (b[1] << 8), 1);  // SLP_EN reads 0
}

TEST(AcpiPmTest, TheRtcAlarmRaisesTheSciWithRtcEn) {
  // RTC_STS and RTC_EN are bit 10 of PM1_STS and PM1_EN (ACPI 6.4 4.8.4.1):
  // the SCI is up while both are set.
  AcpiPm pm([] { return uint64_t{0}; });
  std::vector<bool> sci;
  pm.SetSci([&sci](bool level) { sci.push_back(level); });
  auto write16 = [&pm](uint16_t offset, uint16_t v) {
    const uint8_t w[2] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8)};
    pm.Write(offset, absl::MakeConstSpan(w, 2));
  };
  auto read16 = [&pm](uint16_t offset) {
    uint8_t b[2];
    pm.Read(offset, absl::MakeSpan(b, 2));
    return b[0] | (b[1] << 8);
  };
  pm.RtcAlarm();  // RTC_EN clear: the status only
  EXPECT_EQ(read16(0) & 0x400, 0x400);
  EXPECT_TRUE(sci.empty());
  write16(2, 0x400);  // RTC_EN with the status set: the SCI
  EXPECT_EQ(sci, std::vector<bool>{true});
  write16(0, 0x400);  // write 1 to clear: down
  EXPECT_EQ(sci, (std::vector<bool>{true, false}));
  EXPECT_EQ(read16(0) & 0x400, 0);
  pm.RtcAlarm();
  EXPECT_EQ(sci, (std::vector<bool>{true, false, true}));
  write16(2, 0);  // the enable dropped: down, the status stays
  EXPECT_EQ(sci, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(read16(0) & 0x400, 0x400);
}

}  // namespace
}  // namespace vbts::vmm
