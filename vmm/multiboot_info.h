// multiboot_info.h: builds the Multiboot v1 information structure (spec 0.6.96 §3.3) that EBX points to at kernel entry.
#ifndef VBTS_VMM_MULTIBOOT_INFO_H_
#define VBTS_VMM_MULTIBOOT_INFO_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pmu/phys_memory.h"
#include "vmm/gpa_range.h"

namespace vbts::vmm {

// Fixed guest-physical layout, one 4 KiB page [0x9000, 0xA000): above the
// BIOS data area [0, 0x500), below the EBDA/VGA hole at 0x9FC00/0xA0000, and
// at the address QEMU uses for its info area (QEMU: e820 map at 0x9000, info
// struct at 0x9500; its command line strings go after the kernel instead).
//   0x9000  multiboot_info (88 bytes; rest of the 128-byte slot zeroed)
//   0x9080  memory map, 3 entries of 24 bytes (size=20, base, length, type)
//   0x9100  boot loader name, "vbts <version>\0" (at most 256 bytes)
//   0x9200  command line, NUL-terminated, at most kMultibootCmdlineMax bytes
inline constexpr uint64_t kMultibootInfoGpa = 0x9000;
inline constexpr uint64_t kMultibootMmapGpa = 0x9080;
inline constexpr uint64_t kMultibootLoaderNameGpa = 0x9100;
inline constexpr uint64_t kMultibootCmdlineGpa = 0x9200;
inline constexpr uint64_t kMultibootInfoEnd = 0xA000;
inline constexpr uint64_t kMultibootCmdlineMax = kMultibootInfoEnd - kMultibootCmdlineGpa;  // incl. NUL

// multiboot_info.flags bits set: MEM (0), CMDLINE (2), MMAP (6),
// BOOT_LOADER_NAME (9). QEMU additionally sets BOOT_DEVICE (1, 0x8000ffff)
// and MODS (3, count 0); vbts has no boot disk and no modules.
inline constexpr uint32_t kMultibootInfoFlags = (1u << 0) | (1u << 2) | (1u << 6) | (1u << 9);

// mem_lower in KiB. vbts has no BIOS and hence no EBDA, so all 640 KiB of
// conventional memory are reported (QEMU + SeaBIOS report 639: SeaBIOS keeps
// its EBDA at 0x9FC00).
inline constexpr uint32_t kMultibootMemLowerKib = 640;

// The smallest RAM the info structure can describe: the low 640 KiB and the
// start of upper memory at 1 MiB.
inline constexpr uint64_t kMultibootMinRam = 0x100000;

struct MultibootInfo {
  uint32_t info_gpa = 0;            // value for EBX at entry (EAX = 0x2BADB002)
  std::vector<GpaRange> reserved;   // GPA ranges the info occupies
};

// The ranges WriteMultibootInfo writes; pass these to LoaderLimits::reserved
// before loading the kernel. Always {[0x9000, 0xA000) "multiboot info"}.
std::vector<GpaRange> MultibootInfoReservedRanges();

// Writes the information structure for a guest with ram.size() bytes of RAM
// from GPA 0 (contiguous: vbts has no PCI hole).
//  - mem_lower = 640, mem_upper = (min(ram, 4 GiB) - 1 MiB) / 1024: like the
//    QEMU option ROM, the KiB of contiguous available RAM from 1 MiB, counting
//    only what lies below 4 GiB. (QEMU's pc machine stops below-4G RAM at the
//    PCI hole, at most 3.5 GiB, and SeaBIOS reserves a little at its top.)
//  - memory map: available [0, 0xA0000), reserved [0xA0000, 0x100000) (VGA
//    window and BIOS ROM area by PC convention, although vbts backs it with
//    RAM), available [0x100000, ram).
//  - cmdline: "<kernel_file_name> <append>", exactly QEMU's "%s %s" (so an
//    empty append leaves a trailing space). kernel_file_name is the path as
//    given on the command line.
//  - boot_loader_name: "vbts " VBTS_VERSION.
// InvalidArgument if RAM is smaller than 1 MiB, the command line (with its
// NUL) exceeds kMultibootCmdlineMax, or either string contains a NUL byte.
// Nothing is written then.
absl::StatusOr<MultibootInfo> WriteMultibootInfo(PhysMemory& ram,
                                                 std::string_view kernel_file_name,
                                                 std::string_view append);

}  // namespace vbts::vmm

#endif  // VBTS_VMM_MULTIBOOT_INFO_H_
