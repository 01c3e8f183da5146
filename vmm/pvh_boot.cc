// pvh_boot.cc: writes hvm_start_info (version 1), its memory map, module list and command lines.
#include "vmm/pvh_boot.h"

#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "vmm/boot_bytes.h"

namespace vbts::vmm {

absl::StatusOr<PvhBootInfo> WritePvhStartInfo(PhysMemory& ram, std::string_view append, uint64_t base,
                                              uint64_t kernel_end, const std::vector<LoadedModule>& modules,
                                              uint64_t rsdp) {
  if (ram.size() < kMultibootMinRam)
    return absl::InvalidArgumentError(
        absl::StrFormat("PVH start info: guest RAM size 0x%x is below the 0x100000 (1 MiB) minimum", ram.size()));
  if (base + kPvhPageSize > ram.size() || base + kPvhPageSize > (uint64_t{1} << 32))
    return absl::InvalidArgumentError(absl::StrFormat("no room for the PVH start info page at 0x%x", base));
  VBTS_RETURN_IF_ERROR(CheckNoNul("PVH start info", "the --append text", append));
  if (append.size() + 1 > kPvhPageSize - kPvhCmdlineOffset)
    return absl::InvalidArgumentError(
        absl::StrFormat("PVH start info: the --append text is %u bytes, limit %u", append.size(),
                        kPvhPageSize - kPvhCmdlineOffset - 1));
  std::vector<uint8_t> page(kPvhPageSize, 0);

  // The memory map (hvm_memmap_table_entry: addr, size, type, reserved).
  const std::vector<BootMemoryRegion> map = BootMemoryMap(ram.size());
  for (size_t i = 0; i < map.size(); i++) {
    const size_t e = kPvhMemmapOffset + 24 * i;
    PutLe(page, e, map[i].base, 8);
    PutLe(page, e + 8, map[i].length, 8);
    PutLe(page, e + 16, map[i].type, 4);
  }

  // Module list (hvm_modlist_entry: paddr, size, cmdline_paddr, reserved),
  // then the modules' command lines.
  uint64_t strings = kPvhModlistOffset + 32 * modules.size();
  for (const LoadedModule& m : modules) {
    VBTS_RETURN_IF_ERROR(CheckNoNul("PVH start info", "a module command line", m.cmdline));
    strings += m.cmdline.size() + 1;
  }
  if (strings > kPvhCmdlineOffset)
    return absl::InvalidArgumentError(absl::StrFormat(
        "PVH start info: %u modules and their command lines need 0x%x bytes; the page has room for 0x%x",
        modules.size(), strings - kPvhModlistOffset, kPvhCmdlineOffset - kPvhModlistOffset));
  PvhBootInfo out;
  VBTS_ASSIGN_OR_RETURN(out.modules, LayOutModules(ram.size(), kernel_end, modules));
  uint64_t s = kPvhModlistOffset + 32 * modules.size();
  for (size_t i = 0; i < modules.size(); i++) {
    const size_t e = kPvhModlistOffset + 32 * i;
    PutLe(page, e, out.modules[i].start, 8);
    PutLe(page, e + 8, out.modules[i].size(), 8);
    PutLe(page, e + 16, base + s, 8);
    std::memcpy(page.data() + s, modules[i].cmdline.data(), modules[i].cmdline.size());
    s += modules[i].cmdline.size() + 1;
  }
  std::memcpy(page.data() + kPvhCmdlineOffset, append.data(), append.size());

  // hvm_start_info: magic, version, flags, nr_modules, modlist_paddr,
  // cmdline_paddr, rsdp_paddr, memmap_paddr, memmap_entries, reserved.
  PutLe(page, 0, kPvhStartInfoMagic, 4);
  PutLe(page, 4, kPvhStartInfoVersion, 4);
  PutLe(page, 8, 0, 4);
  PutLe(page, 12, static_cast<uint32_t>(modules.size()), 4);
  PutLe(page, 16, modules.empty() ? 0 : base + kPvhModlistOffset, 8);
  PutLe(page, 24, base + kPvhCmdlineOffset, 8);
  PutLe(page, 32, rsdp, 8);
  PutLe(page, 40, base + kPvhMemmapOffset, 8);
  PutLe(page, 48, static_cast<uint32_t>(map.size()), 4);

  VBTS_RETURN_IF_ERROR(ram.Write(Gpa(base), page));
  VBTS_RETURN_IF_ERROR(WriteModules(ram, out.modules, modules));
  out.start_info_gpa = static_cast<uint32_t>(base);
  out.reserved.push_back(GpaRange{base, base + kPvhPageSize, "PVH start info"});
  for (const GpaRange& r : out.modules) out.reserved.push_back(r);
  return out;
}

}  // namespace vbts::vmm
