// linux_boot.cc: the bzImage setup header, boot_params, the command line and the initrd.
#include "vmm/linux_boot.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "vmm/boot_bytes.h"

namespace vbts::vmm {

uint64_t LinuxSetupHeader::RunStart() const {
  const uint64_t align = std::max<uint64_t>(kernel_alignment, 1);
  const uint64_t aligned = relocatable ? (kLinuxLoadAddress + align - 1) / align * align : kLinuxLoadAddress;
  return std::max(aligned, pref_address);
}

absl::StatusOr<std::optional<LinuxSetupHeader>> ParseLinuxSetupHeader(absl::Span<const uint8_t> file,
                                                                      std::string_view file_name) {
  if (file.size() < 0x206 || GetLe(file, 0x202, 4) != kLinuxHeaderMagic || GetLe(file, 0x1FE, 2) != 0xAA55)
    return std::nullopt;
  LinuxSetupHeader h;
  h.header_end = 0x202 + uint64_t{file[0x201]};
  if (file.size() < 0x208) return BadImage(file_name, "Linux setup header: the file ends before its version (0x206)");
  h.version = static_cast<uint16_t>(GetLe(file, 0x206, 2));
  if (h.version < kLinuxMinVersion)
    return BadImage(file_name,
               "Linux boot protocol %u.%02u is older than 2.10 (Linux 2.6.31), the first with init_size, which vbts "
               "needs",
               h.version >> 8, h.version & 0xFF);
  if (h.header_end < 0x264 || h.header_end > file.size())
    return BadImage(file_name, "Linux setup header: it ends at 0x%x (0x202 + the byte at 0x201), %s", h.header_end,
               h.header_end < 0x264 ? "before protocol 2.10's fields end (0x264)"
                                    : absl::StrFormat("beyond the file's 0x%x bytes", file.size()));
  const uint64_t setup_sects = file[0x1F1] == 0 ? 4 : file[0x1F1];  // 0 means 4 (boot.rst)
  h.setup_size = (setup_sects + 1) * 512;
  if (h.setup_size >= file.size())
    return BadImage(file_name, "Linux setup header: %u setup sectors + the boot sector (0x%x bytes) leave no protected-mode "
               "kernel in the file's 0x%x bytes", setup_sects, h.setup_size, file.size());
  h.loadflags = file[0x211];
  if (!(h.loadflags & kLoadflagsLoadedHigh))
    return BadImage(file_name, "a zImage (loadflags 0x%02x: LOADED_HIGH clear, loaded at 0x10000): vbts boots bzImages only",
               h.loadflags);
  h.initrd_addr_max = static_cast<uint32_t>(GetLe(file, 0x22C, 4));
  h.kernel_alignment = static_cast<uint32_t>(GetLe(file, 0x230, 4));
  h.relocatable = file[0x234] != 0;
  h.cmdline_size = static_cast<uint32_t>(GetLe(file, 0x238, 4));
  h.pref_address = GetLe(file, 0x258, 8);
  h.init_size = static_cast<uint32_t>(GetLe(file, 0x260, 4));
  if (h.relocatable && (h.kernel_alignment == 0 || (h.kernel_alignment & (h.kernel_alignment - 1)) != 0))
    return BadImage(file_name, "Linux setup header: kernel_alignment 0x%x is not a power of two", h.kernel_alignment);
  return h;
}

absl::StatusOr<LinuxBootInfo> WriteLinuxBootParams(PhysMemory& ram, absl::Span<const uint8_t> file,
                                                   const LinuxSetupHeader& header, std::string_view append,
                                                   uint64_t base, const std::vector<LoadedModule>& modules,
                                                   uint64_t rsdp) {
  // (A pref_address near 2^64 must not wrap the end round to below RAM's.)
  const uint64_t run_end =
      header.RunStart() > ram.size() ? ~uint64_t{0} : header.RunStart() + header.init_size;
  if (run_end > ram.size())
    return absl::InvalidArgumentError(absl::StrFormat(
        "Linux boot: the kernel runs in [0x%x, 0x%x) (init_size 0x%x from 0x%x) and guest RAM ends at 0x%x: give it "
        "--mem of at least %u MiB",
        header.RunStart(), run_end, header.init_size, header.RunStart(), ram.size(), (run_end + 0xFFFFF) >> 20));
  // boot_params and the command line: two pages below the load address.
  const uint64_t cmdline = base + kBootParamsSize;
  if (cmdline + kBootParamsSize > kLinuxLoadAddress)
    return absl::InvalidArgumentError(
        absl::StrFormat("Linux boot: no room for boot_params and the command line at 0x%x", base));
  VBTS_RETURN_IF_ERROR(CheckNoNul("Linux boot", "the --append text", append));
  const uint64_t cmdline_max = std::min<uint64_t>(header.cmdline_size, kBootParamsSize - 1);
  if (append.size() > cmdline_max)
    return absl::InvalidArgumentError(absl::StrFormat(
        "Linux boot: the --append text is %u bytes; this kernel takes at most %u (cmdline_size)", append.size(),
        cmdline_max));
  for (const LoadedModule& m : modules)
    if (m.cmdline.find(' ') != std::string::npos)
      return absl::InvalidArgumentError(
          absl::StrFormat("Linux boot: an initrd takes no arguments (--initrd=\"%s\")", m.cmdline));
  // Several files make one initrd, each from a 4-byte boundary (zeros
  // between), as GRUB's `initrd A B` loads them: Linux unpacks one cpio
  // archive after another and skips the zeros (init/initramfs.c).
  std::vector<uint8_t> initrd;
  for (const LoadedModule& m : modules) {
    initrd.resize((initrd.size() + 3) & ~size_t{3}, 0);
    initrd.insert(initrd.end(), m.data.begin(), m.data.end());
  }

  LinuxBootInfo out;
  out.boot_params_gpa = static_cast<uint32_t>(base);
  if (!modules.empty()) {
    // As high as it fits below initrd_addr_max, 4 GiB and the end of RAM,
    // page-aligned (QEMU's x86_load_linux); above the kernel's run area.
    const uint64_t size = initrd.size();
    const uint64_t ceiling =
        std::min({ram.size(), uint64_t{header.initrd_addr_max} + 1, uint64_t{1} << 32});
    const uint64_t start = size <= ceiling ? (ceiling - size) & ~uint64_t{0xFFF} : 0;
    if (size > ceiling || start < run_end)
      return absl::ResourceExhaustedError(absl::StrFormat(
          "Linux boot: the initrd (0x%x bytes) does not fit between the kernel's run area (to 0x%x) and 0x%x "
          "(RAM, initrd_addr_max, 4 GiB)",
          size, run_end, ceiling));
    out.initrd = GpaRange{start, start + size, "initrd"};
  }

  std::vector<uint8_t> bp(kBootParamsSize, 0);
  // The setup header as the file has it (boot.rst, "32-bit boot protocol").
  std::memcpy(bp.data() + kBpSetupHeader, file.data() + kBpSetupHeader, header.header_end - kBpSetupHeader);
  bp[kBpTypeOfLoader] = kTypeOfLoaderUndefined;
  PutLe(bp, kBpCode32Start, kLinuxLoadAddress, 4);
  PutLe(bp, kBpCmdLinePtr, cmdline, 4);
  if (out.initrd) {
    PutLe(bp, kBpRamdiskImage, out.initrd->start, 4);
    PutLe(bp, kBpRamdiskSize, out.initrd->size(), 4);
  }
  if (header.version >= 0x020E) PutLe(bp, kBpAcpiRsdpAddr, rsdp, 8);
  const std::vector<BootMemoryRegion> map = BootMemoryMap(ram.size());
  bp[kBpE820Entries] = static_cast<uint8_t>(map.size());
  for (size_t i = 0; i < map.size(); i++) {
    const size_t e = kBpE820Table + 20 * i;
    PutLe(bp, e, map[i].base, 8);
    PutLe(bp, e + 8, map[i].length, 8);
    PutLe(bp, e + 16, map[i].type, 4);
  }
  std::vector<uint8_t> line(kBootParamsSize, 0);
  std::memcpy(line.data(), append.data(), append.size());

  VBTS_RETURN_IF_ERROR(ram.Write(Gpa(base), bp));
  VBTS_RETURN_IF_ERROR(ram.Write(Gpa(cmdline), line));
  out.reserved.push_back(GpaRange{base, base + kBootParamsSize, "boot_params"});
  out.reserved.push_back(GpaRange{cmdline, cmdline + kBootParamsSize, "Linux command line"});
  if (out.initrd) {
    VBTS_RETURN_IF_ERROR(ram.Write(Gpa(out.initrd->start), initrd));
    out.reserved.push_back(*out.initrd);
  }
  return out;
}

}  // namespace vbts::vmm
