// pvh_boot.h: the start-of-day information of the PVH boot ABI (Xen's
// hvm_start_info, version 1), with which QEMU, Firecracker and Xen enter an
// ELF kernel such as Linux's vmlinux at its XEN_ELFNOTE_PHYS32_ENTRY.
#ifndef VBTS_VMM_PVH_BOOT_H_
#define VBTS_VMM_PVH_BOOT_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pmu/phys_memory.h"
#include "vmm/gpa_range.h"
#include "vmm/multiboot_info.h"

namespace vbts::vmm {

// Xen's public/arch-x86/hvm/start_info.h.
inline constexpr uint32_t kPvhStartInfoMagic = 0x336ec578;
inline constexpr uint32_t kPvhStartInfoVersion = 1;  // with the memory map: Linux needs it outside Xen

// Layout of the one page vbts writes (the same page as the Multiboot info,
// MultibootInfoPage; offsets from its start):
//   +0x000  hvm_start_info (56 bytes)
//   +0x040  memory map, 3 entries of 24 bytes (addr, size, type, reserved) with E820 types
//   +0x100  module list, 32 bytes per module (paddr, size, cmdline_paddr, reserved),
//           then the modules' NUL-terminated command lines, up to +0x800
//   +0x800  the kernel command line, NUL-terminated, at most 2 KiB (Linux's COMMAND_LINE_SIZE)
inline constexpr uint64_t kPvhMemmapOffset = 0x40;
inline constexpr uint64_t kPvhModlistOffset = 0x100;
inline constexpr uint64_t kPvhCmdlineOffset = 0x800;
inline constexpr uint64_t kPvhPageSize = 0x1000;

struct PvhBootInfo {
  uint32_t start_info_gpa = 0;            // EBX at entry
  std::vector<GpaRange> modules;          // each module's bytes
  std::vector<GpaRange> reserved;         // everything written
};

// Writes hvm_start_info at `base` for a guest with ram.size() bytes of RAM
// from GPA 0: magic, version 1, flags 0, the command line (`append` as given,
// as QEMU passes -append to a PVH kernel), the memory map (usable
// [0, 0xA0000), reserved [0xA0000, 1 MiB), usable [1 MiB, RAM)), the RSDP's
// address `rsdp` (vmm/acpi_tables.h; 0: none, the guest searches the BIOS
// area) and the modules: each at the next
// page boundary from `kernel_end`, as WriteMultibootModules places them
// (Linux takes the first module as its initrd).
// InvalidArgument (nothing written) for RAM below 1 MiB, a command line of
// 2 KiB or more, module command lines that do not fit in the page or a NUL
// in any string; ResourceExhausted when the modules do not fit in RAM below
// 4 GiB.
absl::StatusOr<PvhBootInfo> WritePvhStartInfo(PhysMemory& ram, std::string_view append, uint64_t base,
                                              uint64_t kernel_end, const std::vector<LoadedModule>& modules,
                                              uint64_t rsdp = 0);

}  // namespace vbts::vmm

#endif  // VBTS_VMM_PVH_BOOT_H_
