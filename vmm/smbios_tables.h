// smbios_tables.h: the SMBIOS (DMI) tables vbts's PC identifies itself with,
// in the BIOS area where firmware puts them (DMTF SMBIOS 2.8: the 32-bit
// entry point and structure types 0, 1, 4 and 127).  Linux reads them at boot
// ("DMI: vbts vbts virtual PC/..."; /sys/class/dmi/id; dmidecode); without
// them it says "DMI not present or invalid".  docs/guest-abi.md, "SMBIOS".
#ifndef VBTS_VMM_SMBIOS_TABLES_H_
#define VBTS_VMM_SMBIOS_TABLES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "pmu/phys_memory.h"

namespace vbts::vmm {

// One page after the ACPI tables' (vmm/acpi_tables.h), inside the area
// Linux scans for the entry point's anchor on 16-byte boundaries
// (0xF0000-0xFFFFF, dmi_scan_machine) and that the memory map reports reserved.
inline constexpr uint64_t kSmbiosGpa = 0xF1000;
inline constexpr uint64_t kSmbiosSize = 0x1000;

struct SmbiosInfo {
  std::string vbts_version;  // BIOS version and system version
  std::string cpu_model;     // `--cpu` (the system's SKU)
  std::string cpu_brand;     // the processor's version string (CPUID 80000002H-80000004H)
  uint32_t cpuid1_eax = 0;   // processor ID: CPUID.1 EAX (signature) and EDX (features)
  uint32_t cpuid1_edx = 0;
  bool long_mode = false;    // processor characteristics: 64-bit capable
};

// Writes the tables at kSmbiosGpa (nothing when RAM ends before the page):
//  +00H entry point (31 bytes, "_SM_" ... "_DMI_", version 2.8, both checksums)
//  +20H structure table, handles 0-3:
//    type 0 BIOS: vendor "vbts", version vbts_version, release date
//         "11/28/2026" (fixed, as QEMU's is: the date this layout was written),
//         starting segment E800H, 64 KB, characteristics "not supported" (bit 3),
//         extension byte 2 "virtual machine" (bit 4), release 0.1 as the version
//    type 1 system: manufacturer "vbts", product "vbts virtual PC", version
//         vbts_version, no serial number, UUID all zero (none set), wake-up
//         "power switch", SKU cpu_model, family "vbts"
//    type 4 processor: socket "CPU 0", central processor, family "other",
//         manufacturer "GenuineIntel", ID cpuid1_eax/edx, version cpu_brand,
//         speeds unknown (0), populated and enabled, 1 core and 1 thread,
//         characteristics 64-bit capable (bit 2) with long_mode
//    type 127 end of table
absl::Status WriteSmbiosTables(PhysMemory& ram, const SmbiosInfo& info);

}  // namespace vbts::vmm

#endif  // VBTS_VMM_SMBIOS_TABLES_H_
