// linux_boot.h: Linux's own x86 boot protocol for a bzImage (the vmlinuz a
// distribution ships; Documentation/arch/x86/boot.rst in Linux), entered at
// its 32-bit entry as QEMU's -kernel, GRUB and kvmtool can: the setup header,
// the boot_params ("zero page") with its E820 map, the command line and the
// initrd.  docs/guest-abi.md, "Linux bzImage kernels".
#ifndef VBTS_VMM_LINUX_BOOT_H_
#define VBTS_VMM_LINUX_BOOT_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pmu/phys_memory.h"
#include "vmm/gpa_range.h"
#include "vmm/multiboot_info.h"

namespace vbts::vmm {

inline constexpr uint32_t kLinuxHeaderMagic = 0x53726448;  // "HdrS" at 0x202
inline constexpr uint16_t kLinuxMinVersion = 0x020A;       // 2.10: init_size, pref_address (Linux 2.6.31)
// The protected-mode kernel goes where a bzImage is loaded (LOADED_HIGH):
// the default code32_start, 1 MiB.
inline constexpr uint64_t kLinuxLoadAddress = 0x100000;
// GDT selectors the 32-bit boot protocol requires (__BOOT_CS, __BOOT_DS).
inline constexpr uint16_t kLinuxBootCs = 0x10, kLinuxBootDs = 0x18;

// boot_params offsets (arch/x86/include/uapi/asm/bootparam.h).
inline constexpr uint64_t kBpAcpiRsdpAddr = 0x070;  // u64, protocol 2.14+
inline constexpr uint64_t kBpE820Entries = 0x1E8;   // u8
inline constexpr uint64_t kBpSetupHeader = 0x1F1;   // struct setup_header
inline constexpr uint64_t kBpTypeOfLoader = 0x210;  // u8
inline constexpr uint64_t kBpLoadflags = 0x211;     // u8
inline constexpr uint64_t kBpCode32Start = 0x214;   // u32
inline constexpr uint64_t kBpRamdiskImage = 0x218;  // u32
inline constexpr uint64_t kBpRamdiskSize = 0x21C;   // u32
inline constexpr uint64_t kBpCmdLinePtr = 0x228;    // u32
inline constexpr uint64_t kBpE820Table = 0x2D0;     // 20-byte entries: addr, size (u64), type (u32)
inline constexpr uint64_t kBootParamsSize = 0x1000;
inline constexpr uint8_t kLoadflagsLoadedHigh = 0x01;
inline constexpr uint8_t kTypeOfLoaderUndefined = 0xFF;  // boot.rst: "0xFF - undefined"

// What vbts reads of the setup header.
struct LinuxSetupHeader {
  uint16_t version = 0;          // 0x206: protocol, e.g. 0x020F for 2.15
  uint64_t setup_size = 0;       // (setup_sects + 1) * 512: the real-mode part, boot sector included
  uint64_t header_end = 0;       // 0x202 + the byte at 0x201: the header's last byte + 1
  uint8_t loadflags = 0;         // 0x211
  uint32_t initrd_addr_max = 0;  // 0x22C: the initrd's highest byte
  uint32_t kernel_alignment = 0; // 0x230
  bool relocatable = false;      // 0x234
  uint32_t cmdline_size = 0;     // 0x238: without the NUL
  uint64_t pref_address = 0;     // 0x258
  uint32_t init_size = 0;        // 0x260: memory the kernel needs from where it runs
  // Where the kernel decompresses and runs: the load address aligned up to
  // kernel_alignment, not below pref_address (head_64.S, LOAD_PHYSICAL_ADDR).
  uint64_t RunStart() const;
};

// nullopt when `file` has no setup header ("HdrS" at 0x202 and boot_flag
// 0xAA55 at 0x1FE): not a Linux kernel image.  InvalidArgument, starting
// with "<file_name>: ", for a setup header vbts cannot boot: a protocol older
// than 2.10, a zImage (LOADED_HIGH clear), a header or real-mode part the
// file does not hold, no protected-mode kernel after it.
absl::StatusOr<std::optional<LinuxSetupHeader>> ParseLinuxSetupHeader(absl::Span<const uint8_t> file,
                                                                      std::string_view file_name);

struct LinuxBootInfo {
  uint32_t boot_params_gpa = 0;   // ESI at entry
  std::optional<GpaRange> initrd;
  std::vector<GpaRange> reserved;  // everything written
};

// Writes boot_params at `base` (one page) for the kernel in `file`: the
// file's setup header with type_of_loader 0xFF (undefined), code32_start
// 1 MiB, cmd_line_ptr (the command line, `append` as given, on the page
// after boot_params), ramdisk_image/size, acpi_rsdp_addr `rsdp` (protocol
// 2.14+; 0: the guest searches the BIOS area) and the E820 map of
// BootMemoryMap; and the initrd at the top of RAM below initrd_addr_max and
// 4 GiB, page-aligned, as QEMU places it: the `modules` (files without
// arguments) one after another, each from a 4-byte boundary, as GRUB loads
// several.  InvalidArgument (nothing written) for RAM that ends before the
// kernel's run area does (RunStart + init_size), a command line longer than
// cmdline_size or holding a NUL, or a module with arguments;
// ResourceExhausted when the initrd does not fit between the run area and
// its ceiling.
absl::StatusOr<LinuxBootInfo> WriteLinuxBootParams(PhysMemory& ram, absl::Span<const uint8_t> file,
                                                   const LinuxSetupHeader& header, std::string_view append,
                                                   uint64_t base, const std::vector<LoadedModule>& modules,
                                                   uint64_t rsdp = 0);

}  // namespace vbts::vmm

#endif  // VBTS_VMM_LINUX_BOOT_H_
