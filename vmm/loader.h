// loader.h: loads kernel images (Multiboot v1 ELF32 or a.out kludge; PVH ELF32/ELF64) into guest RAM the way QEMU's `-kernel` does.
#ifndef VBTS_VMM_LOADER_H_
#define VBTS_VMM_LOADER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "base/file.h"
#include "absl/types/span.h"
#include "pmu/phys_memory.h"
#include "vmm/gpa_range.h"
#include "vmm/linux_boot.h"

namespace vbts::vmm {

inline constexpr uint32_t kMultibootHeaderMagic = 0x1BADB002;
// The header must start at a 4-byte aligned offset below this (QEMU scans
// offsets 0, 4, ..., 8140: "the latest entry may be 8192 - 48").
inline constexpr uint32_t kMultibootSearchEnd = 8192 - 48;
// Header flag bits.
inline constexpr uint32_t kMultibootPageAlign = 1u << 0;
inline constexpr uint32_t kMultibootMemoryInfo = 1u << 1;
inline constexpr uint32_t kMultibootVideoMode = 1u << 2;
inline constexpr uint32_t kMultibootAoutKludge = 1u << 16;

enum class ImageFormat { kElf32, kAoutKludge, kElf64, kBzImage };
// How the kernel is entered (vmm/machine.cc, SetBootState): Multiboot v1
// (EAX magic, EBX info), PVH (EBX hvm_start_info, vmm/pvh_boot.h) or Linux's
// 32-bit boot protocol (ESI boot_params, vmm/linux_boot.h).
enum class BootProtocol { kMultiboot, kPvh, kLinux };

// The file-backed bytes of an executable segment: at guest-physical `gpa`,
// linked to run at `vaddr` (ELF p_vaddr; equal to gpa for the a.out kludge).
struct CodeRange {
  uint64_t gpa = 0;
  uint64_t vaddr = 0;
  uint64_t size = 0;
  bool operator==(const CodeRange&) const = default;
};

struct LoadedImage {
  uint32_t entry = 0;              // EIP to start at (physical).
  std::vector<GpaRange> ranges;    // What was written, incl. zeroed bss, in file order.
  std::vector<CodeRange> code;     // Executable segments (ELF PF_X; the whole a.out-kludge image).
  uint32_t header_flags = 0;       // Multiboot header flags.
  uint32_t header_offset = 0;      // File offset of the Multiboot header.
  ImageFormat format = ImageFormat::kElf32;
  BootProtocol boot = BootProtocol::kMultiboot;
  std::vector<std::string> warnings;  // e.g. the video-mode request QEMU ignores.
  std::optional<LinuxSetupHeader> linux_header;  // kLinux: what boot_params is made from
};

struct LoaderLimits {
  // GPA ranges the image must not touch (Multiboot info, command line, ...).
  std::vector<GpaRange> reserved;
};

// Finds the Multiboot v1 header in `file` and loads the image into `ram`.
//
// Format selection follows QEMU hw/i386/multiboot.c: if header flag bit 16
// (address fields) is set the a.out-kludge fields are used even when the file
// is ELF; otherwise the file must be an ELF32 i386 ET_EXEC image, loaded by its
// PT_LOAD program headers at p_paddr (as QEMU's load_elf does): p_filesz bytes
// from p_offset, then p_memsz - p_filesz zero bytes. PT_LOAD entries with
// p_memsz 0 are skipped (QEMU ignores them too). The entry point is e_entry,
// except that, like QEMU, if e_entry lies in [p_vaddr, p_vaddr + p_filesz) of
// an executable (PF_X) segment whose p_vaddr != p_paddr, it is translated to
// e_entry - p_vaddr + p_paddr.
//
// a.out kludge: the file bytes from offset header_offset - (header_addr -
// load_addr) go to load_addr, up to load_end_addr (0: to end of file); then
// zeroes up to bss_end_addr (0: no bss). Entry is entry_addr.
//
// Flags: bit 2 (video mode) is accepted with a warning, as QEMU does ("multiboot
// knows VBE. we don't."); bits 0 and 1 are satisfiable; any other bit in 0-15
// is rejected as the Multiboot spec requires (QEMU silently ignores them).
//
// Every check happens before the first write to `ram`; errors are
// InvalidArgument and start with "<file_name>: ". See docs/bad-images.md.
absl::StatusOr<LoadedImage> LoadMultibootImage(absl::Span<const uint8_t> file,
                                               std::string_view file_name, PhysMemory& ram,
                                               const LoaderLimits& limits);

// Loads a kernel as QEMU's -kernel does.  A file with Linux's setup header
// (a bzImage, vmm/linux_boot.h) gets its protected-mode kernel, the bytes
// after the real-mode setup, at 1 MiB, entered there with boot = kLinux
// (nothing of it is executable code to scan: it is compressed).  Otherwise
// a Multiboot v1 image (LoadMultibootImage) if the first 8 KiB hold a
// valid Multiboot header; otherwise an ELF32 (EM_386) or ELF64 (EM_X86_64)
// ET_EXEC file with a PVH entry note (Xen ELF note XEN_ELFNOTE_PHYS32_ENTRY,
// 18: Linux's vmlinux with CONFIG_PVH, as QEMU's pvh_load_elfboot), loaded by
// its PT_LOAD headers at p_paddr, entered at the note's physical address with
// boot = kPvh. A file that is neither fails with LoadMultibootImage's reason
// and says that no PVH note was found either. docs/guest-abi.md.
absl::StatusOr<LoadedImage> LoadKernelImage(absl::Span<const uint8_t> file, std::string_view file_name,
                                            PhysMemory& ram, const LoaderLimits& limits);

// Reads a whole kernel image. NotFound if missing, InvalidArgument if a
// directory, empty or larger than kMaxImageFileSize, other errno failures as
// the matching status (message names the path and strerror).
absl::StatusOr<std::vector<uint8_t>> ReadImageFile(const std::string& path);

}  // namespace vbts::vmm

#endif  // VBTS_VMM_LOADER_H_
