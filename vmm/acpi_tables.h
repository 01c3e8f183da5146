// acpi_tables.h: the ACPI tables vbts's PC describes itself with (RSDP, RSDT,
// XSDT, FADT, FACS, DSDT, MADT, HPET; DMAR and SSDT with --device), in the BIOS area where firmware puts them.
#ifndef VBTS_VMM_ACPI_TABLES_H_
#define VBTS_VMM_ACPI_TABLES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "pmu/phys_memory.h"
#include "vmm/gpa_range.h"

namespace vbts::vmm {

// Where: one page at 0xF0000, inside both the BIOS area Linux scans for the
// RSDP (0xE0000-0xFFFFF, ACPI 6.4 5.2.5.1) and kvm-unit-tests' narrower scan
// (0xF0000-0xFFFFF, lib/x86/acpi.c); the memory map reports the area reserved.
inline constexpr uint64_t kAcpiTablesGpa = 0xF0000;
inline constexpr uint64_t kAcpiTablesSize = 0x1000;

// The ACPI power-management block the FADT points at (vmm/acpi_pm.h), at
// QEMU ICH9's ports: PM1a event block 0x600 (4 bytes), PM1a control 0x604
// (2 bytes), PM timer 0x608 (4 bytes, 24-bit). SCI on ISA IRQ 9.
inline constexpr uint16_t kAcpiPmBase = 0x600;
inline constexpr uint16_t kAcpiPm1aEvt = kAcpiPmBase, kAcpiPm1aCnt = kAcpiPmBase + 4, kAcpiPmTmr = kAcpiPmBase + 8;
inline constexpr uint8_t kAcpiSciIrq = 9;
// SLP_TYP values as QEMU's PM (hw/acpi/core.c acpi_pm1_cnt_write), which
// kvm-unit-tests' s3 writes without reading a DSDT: 0 soft-off (the DSDT's
// \_S5), 1 suspend to RAM (not in the DSDT: vbts wakes only by the RTC alarm).
inline constexpr uint8_t kAcpiS5SlpTyp = 0;
inline constexpr uint8_t kAcpiS3SlpTyp = 1;
// The FACS's place, for the waking vector of an S3 resume.
inline constexpr uint64_t kAcpiFacsGpa = kAcpiTablesGpa + 0x40;

// Writes the tables at kAcpiTablesGpa (docs/guest-abi.md, "ACPI"):
//  +000H RSDP (revision 2: RSDT and XSDT addresses, both checksums)
//  +040H FACS (64 bytes, 64-byte aligned)
//  +080H DSDT: only Name (_S5, Package {0, 0, 0, 0})
//  +100H FADT (revision 3, 244 bytes): the PM block above, no SMI command
//        port (the machine is in ACPI mode from reset), century register 32H,
//        IAPC_BOOT_ARCH legacy devices and no VGA and no 8042 (vbts has only
//        its reset line), RESET_REG = port 0x64 value 0xFE (that reset line),
//        flags WBINVD, PROC_C1, PWR_BUTTON and SLP_BUTTON (none), RESET_REG_SUP
//  +200H MADT: the local APIC at 0xFEE00000 (PCAT_COMPAT: 8259s present), one
//        processor (UID 0, APIC ID 0), the I/O APIC (ID 0 at 0xFEC00000, GSI
//        base 0), the SCI's override (IRQ 9 -> GSI 9, level, active high), LINT1
//        as NMI. ISA IRQs 0-15 are GSIs 0-15 (KVM's default routing, which
//        vbts's own controllers follow): no other override.
//  +280H RSDT, +2C0H XSDT: FADT, MADT and HPET (then the DMAR, then the SSDT).
//  +320H DMAR, with `dmar` (--device=intel-iommu; Intel VT-d spec 8.1-8.3):
//        host address width 39 bits, INTR_REMAP (not X2APIC_OPT_OUT: the
//        unit remaps in x2APIC format too); one DRHD for segment 0 with
//        INCLUDE_PCI_ALL at IntelIommu::kBase, whose device scope names the
//        I/O APIC (enumeration ID 0) at source-id kIoapicSourceId.
//  +380H SSDT, with `pci_root` (a PCI device from --device): the host
//        bridge as ACPI's PCI root, \_SB.PCI0 (_HID PNP0A03, _UID 0, _CRS:
//        buses 00-FF, I/O 0000-0CF7 and 0D00-FFFF, memory C0000000-FEBFFFFF
//        (above the largest RAM, below the I/O APIC), so that an OS scans bus
//        0 and finds the devices and their BARs in a window. No _PRT: INTx is
//        not routed through ACPI.
//  +800H HPET (IA-PC HPET spec 1.0a 3.2.4): the timer block at
//        Hpet::kBase (vmm/hpet.h), its ID 8086A201H, HPET number 0.
inline constexpr uint16_t kIoapicSourceId = 0xFF00;  // bus FFH, device 0, function 0 (QEMU's Q35 choice)
struct AcpiOptions {
  bool dmar = false;
  bool pci_root = false;
};
absl::Status WriteAcpiTables(PhysMemory& ram, AcpiOptions options = {});

}  // namespace vbts::vmm

#endif  // VBTS_VMM_ACPI_TABLES_H_
