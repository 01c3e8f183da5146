// multiboot_info.h: builds the Multiboot v1 information structure (spec 0.6.96 §3.3) that EBX points to at kernel entry.
#ifndef VBTS_VMM_MULTIBOOT_INFO_H_
#define VBTS_VMM_MULTIBOOT_INFO_H_

#include <cstdint>
#include <string>
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
// BOOT_LOADER_NAME (9), and MODS (3) when there are modules (--initrd;
// WriteMultibootModules). QEMU additionally sets BOOT_DEVICE (1, 0x8000ffff)
// and sets MODS also with a count of 0; vbts has no boot disk.
inline constexpr uint32_t kMultibootInfoFlags = (1u << 0) | (1u << 2) | (1u << 6) | (1u << 9);
inline constexpr uint32_t kMultibootInfoMods = 1u << 3;

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

// The ranges WriteMultibootInfo writes at `base`: {[base, base + 4 KiB)
// "multiboot info"}.
std::vector<GpaRange> MultibootInfoReservedRanges(uint64_t base = kMultibootInfoGpa);

// Where the information page goes for an image loaded at `image`: 0x9000,
// unless the image covers part of [0x9000, 0xA000) (kvm-unit-tests'
// realmode.flat loads at 0x8000); then the first page after the image's
// highest byte.  QEMU writes its info at 0x9000 and then the image over it,
// leaving EBX pointing at the image's bytes; vbts keeps both intact.
uint64_t MultibootInfoPage(const std::vector<GpaRange>& image);

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
// `base`: the page (MultibootInfoPage), 0x9000 by default; the layout above
// moves with it.  InvalidArgument also when the page does not fit in RAM
// below 4 GiB.
absl::StatusOr<MultibootInfo> WriteMultibootInfo(PhysMemory& ram,
                                                 std::string_view kernel_file_name,
                                                 std::string_view append,
                                                 uint64_t base = kMultibootInfoGpa);

// One Multiboot module (`vbts run --initrd`): its command line as the guest
// sees it ("FILE ARGS", the text given for it) and the path it is read from.
struct ModuleSpec {
  std::string path;
  std::string cmdline;
  bool operator==(const ModuleSpec&) const = default;
};

// Parses --initrd text the way QEMU parses -initrd for a Multiboot kernel:
// modules are separated by ',' (",," is a literal comma), each module's
// command line is its whole text and its file name the text before the
// first space. InvalidArgument for an empty module or file name.
absl::StatusOr<std::vector<ModuleSpec>> ParseInitrd(std::string_view text);

struct LoadedModule {
  std::string cmdline;
  std::vector<uint8_t> data;
};

// The guest's RAM as both boot protocols describe it (Multiboot mmap, PVH
// memmap; types as E820: 1 available, 2 reserved): available [0, 0xA0000),
// reserved [0xA0000, 1 MiB) (VGA window and BIOS ROM area by PC convention,
// although vbts backs it with RAM), available [1 MiB, ram_size) if any.
inline constexpr uint32_t kMmapAvailable = 1;
inline constexpr uint32_t kMmapReserved = 2;
struct BootMemoryRegion {
  uint64_t base = 0, length = 0;
  uint32_t type = 0;
};
std::vector<BootMemoryRegion> BootMemoryMap(uint64_t ram_size);

// Where modules go, for both protocols: each at the next page boundary from
// `first_gpa`, in order, named "module <cmdline>". ResourceExhausted if one
// would end beyond RAM or 4 GiB.
absl::StatusOr<std::vector<GpaRange>> LayOutModules(uint64_t ram_size, uint64_t first_gpa,
                                                    const std::vector<LoadedModule>& modules);
// Copies each module's bytes to its range from LayOutModules.
absl::Status WriteModules(PhysMemory& ram, const std::vector<GpaRange>& where,
                          const std::vector<LoadedModule>& modules);

// Where WriteMultibootModules put the modules (for tests and -v).
struct ModuleLayout {
  uint64_t table_gpa = 0;                 // mods_addr
  std::vector<GpaRange> modules;          // [mod_start, mod_end) of each
  std::vector<GpaRange> reserved;         // everything written
};

// Writes `modules` as QEMU's Multiboot loader does (hw/i386/multiboot.c):
// from the first page boundary at or after `kernel_end` (the end of the
// loaded image, bss included), one page-aligned block with the module table
// (16 bytes each: mod_start, mod_end (exclusive), cmdline address, 0) and the
// NUL-terminated command lines, then each module's bytes at the next page
// boundary. Patches the info structure at `info_gpa`: flags |= MODS,
// mods_count, mods_addr. ResourceExhausted (nothing written) if the modules
// do not fit below the end of RAM and 4 GiB; InvalidArgument for a command
// line with a NUL byte. No modules: nothing is written.
absl::StatusOr<ModuleLayout> WriteMultibootModules(PhysMemory& ram, uint64_t info_gpa, uint64_t kernel_end,
                                                   const std::vector<LoadedModule>& modules);

}  // namespace vbts::vmm

#endif  // VBTS_VMM_MULTIBOOT_INFO_H_
