// multiboot_info.cc: lays out and writes the Multiboot v1 information structure, memory map and strings.
#include "vmm/multiboot_info.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "vmm/boot_bytes.h"

#ifndef VBTS_VERSION
#define VBTS_VERSION "0.0.0"
#endif

namespace vbts::vmm {
namespace {

constexpr char kBootLoaderName[] = "vbts " VBTS_VERSION;
constexpr uint64_t kOneMib = 0x100000;
constexpr uint64_t kFourGib = uint64_t{1} << 32;
static_assert(sizeof(kBootLoaderName) <= kMultibootCmdlineGpa - kMultibootLoaderNameGpa);

}  // namespace

std::vector<GpaRange> MultibootInfoReservedRanges(uint64_t base) {
  return {GpaRange{base, base + (kMultibootInfoEnd - kMultibootInfoGpa), "multiboot info"}};
}

uint64_t MultibootInfoPage(const std::vector<GpaRange>& image) {
  const auto overlaps = [&image](uint64_t base) {
    for (const GpaRange& r : image)
      if (r.start < base + 0x1000 && base < r.end) return true;
    return false;
  };
  if (!overlaps(kMultibootInfoGpa)) return kMultibootInfoGpa;
  uint64_t end = 0;
  for (const GpaRange& r : image) end = std::max(end, r.end);
  return (end + 0xFFF) & ~uint64_t{0xFFF};
}

absl::StatusOr<MultibootInfo> WriteMultibootInfo(PhysMemory& ram,
                                                 std::string_view kernel_file_name,
                                                 std::string_view append, uint64_t base) {
  const uint64_t ram_size = ram.size();
  if (ram_size < kMultibootMinRam) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "multiboot info: guest RAM size 0x%x is below the 0x%x (1 MiB) minimum", ram_size,
        kMultibootMinRam));
  }
  VBTS_RETURN_IF_ERROR(CheckNoNul("multiboot info", "kernel file name", kernel_file_name));
  VBTS_RETURN_IF_ERROR(CheckNoNul("multiboot info", "--append text", append));
  std::string cmdline = absl::StrFormat("%s %s", kernel_file_name, append);
  if (cmdline.size() + 1 > kMultibootCmdlineMax) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "multiboot info: command line \"<kernel file name> <--append text>\" is %u bytes, "
        "limit %u (room at [0x%x, 0x%x) for it and its NUL)",
        cmdline.size(), kMultibootCmdlineMax - 1, kMultibootCmdlineGpa, kMultibootInfoEnd));
  }

  std::vector<uint8_t> page(kMultibootInfoEnd - kMultibootInfoGpa, 0);
  auto at = [](uint64_t gpa) { return static_cast<size_t>(gpa - kMultibootInfoGpa); };

  // Memory map.
  size_t mmap_length = 0;
  for (const BootMemoryRegion& r : BootMemoryMap(ram_size)) {
    const size_t e = at(kMultibootMmapGpa) + mmap_length;
    PutLe(page, e, 20, 4);  // size of the entry after this field
    PutLe(page, e + 4, r.base, 8);
    PutLe(page, e + 12, r.length, 8);
    PutLe(page, e + 20, r.type, 4);
    mmap_length += 24;
  }

  std::memcpy(page.data() + at(kMultibootLoaderNameGpa), kBootLoaderName,
              sizeof(kBootLoaderName));
  std::memcpy(page.data() + at(kMultibootCmdlineGpa), cmdline.data(), cmdline.size());

  const uint64_t upper_end = std::min(ram_size, kFourGib);
  const size_t mbi = at(kMultibootInfoGpa);
  PutLe(page, mbi + 0, kMultibootInfoFlags, 4);
  PutLe(page, mbi + 4, kMultibootMemLowerKib, 4);
  PutLe(page, mbi + 8, static_cast<uint32_t>((upper_end - kOneMib) / 1024), 4);
  PutLe(page, mbi + 16, static_cast<uint32_t>(kMultibootCmdlineGpa), 4);
  PutLe(page, mbi + 44, static_cast<uint32_t>(mmap_length), 4);
  PutLe(page, mbi + 48, static_cast<uint32_t>(kMultibootMmapGpa), 4);
  PutLe(page, mbi + 64, static_cast<uint32_t>(kMultibootLoaderNameGpa), 4);

  // The layout above is at 0x9000; elsewhere every pointer moves with it.
  const uint64_t delta = base - kMultibootInfoGpa;
  if (delta) {
    for (size_t field : {mbi + 16, mbi + 48, mbi + 64}) {
      uint32_t v;
      std::memcpy(&v, page.data() + field, 4);
      PutLe(page, field, static_cast<uint32_t>(v + delta), 4);
    }
  }
  if (base + page.size() > ram_size || base + page.size() > (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "no room for the Multiboot information page at 0x%x (the image covers 0x9000 and RAM ends at 0x%x)", base,
        ram_size));
  }
  VBTS_RETURN_IF_ERROR(ram.Write(Gpa(base), page));
  return MultibootInfo{static_cast<uint32_t>(base), MultibootInfoReservedRanges(base)};
}

absl::StatusOr<std::vector<ModuleSpec>> ParseInitrd(std::string_view text) {
  std::vector<ModuleSpec> out;
  std::string cur;
  auto finish = [&]() -> absl::Status {
    const size_t space = cur.find(' ');
    ModuleSpec m{cur.substr(0, space), cur};
    if (m.path.empty())
      return absl::InvalidArgumentError(absl::StrFormat(
          "--initrd: module %u has no file name (modules are \"FILE [ARGS]\", separated by ',')", out.size() + 1));
    out.push_back(std::move(m));
    cur.clear();
    return absl::OkStatus();
  };
  for (size_t i = 0; i < text.size(); i++) {
    if (text[i] != ',') {
      cur += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      cur += ',';
      i++;
    } else {
      VBTS_RETURN_IF_ERROR(finish());
    }
  }
  VBTS_RETURN_IF_ERROR(finish());
  return out;
}

std::vector<BootMemoryRegion> BootMemoryMap(uint64_t ram_size) {
  std::vector<BootMemoryRegion> map = {{0, 0xA0000, kMmapAvailable}, {0xA0000, kOneMib - 0xA0000, kMmapReserved}};
  if (ram_size > kOneMib) map.push_back({kOneMib, ram_size - kOneMib, kMmapAvailable});
  return map;
}

absl::StatusOr<std::vector<GpaRange>> LayOutModules(uint64_t ram_size, uint64_t first_gpa,
                                                    const std::vector<LoadedModule>& modules) {
  constexpr uint64_t kPage = 0x1000;
  const uint64_t limit = std::min(ram_size, kFourGib);
  std::vector<GpaRange> out;
  uint64_t gpa = (first_gpa + kPage - 1) & ~(kPage - 1);
  for (const LoadedModule& m : modules) {
    if (gpa > limit || m.data.size() > limit - gpa)
      return absl::ResourceExhaustedError(absl::StrFormat(
          "--initrd: module \"%s\" (%u bytes) does not fit in guest RAM: it would end at 0x%x, RAM%s ends at 0x%x "
          "(give more --mem)",
          m.cmdline, m.data.size(), gpa + m.data.size(), limit < ram_size ? " below 4 GiB" : "", limit));
    out.push_back(GpaRange{gpa, gpa + m.data.size(), "module " + m.cmdline});
    gpa = (gpa + m.data.size() + kPage - 1) & ~(kPage - 1);
  }
  return out;
}

absl::Status WriteModules(PhysMemory& ram, const std::vector<GpaRange>& where,
                          const std::vector<LoadedModule>& modules) {
  for (size_t i = 0; i < modules.size(); i++) VBTS_RETURN_IF_ERROR(ram.Write(Gpa(where[i].start), modules[i].data));
  return absl::OkStatus();
}

absl::StatusOr<ModuleLayout> WriteMultibootModules(PhysMemory& ram, uint64_t info_gpa, uint64_t kernel_end,
                                                   const std::vector<LoadedModule>& modules) {
  ModuleLayout layout;
  if (modules.empty()) return layout;
  constexpr uint64_t kPage = 0x1000;
  auto align = [](uint64_t v) { return (v + kPage - 1) & ~(kPage - 1); };
  // The table and command lines, then the modules.
  std::vector<uint8_t> table(16 * modules.size());
  uint64_t strings = 0;
  for (const LoadedModule& m : modules) {
    VBTS_RETURN_IF_ERROR(CheckNoNul("multiboot info", "module command line", m.cmdline));
    strings += m.cmdline.size() + 1;
  }
  layout.table_gpa = align(kernel_end);
  const uint64_t strings_gpa = layout.table_gpa + table.size();
  VBTS_ASSIGN_OR_RETURN(layout.modules, LayOutModules(ram.size(), align(strings_gpa + strings), modules));
  std::vector<uint8_t> block(align(strings_gpa + strings) - layout.table_gpa, 0);
  uint64_t s = strings_gpa;
  for (size_t i = 0; i < modules.size(); i++) {
    PutLe(block, 16 * i + 0, static_cast<uint32_t>(layout.modules[i].start), 4);
    PutLe(block, 16 * i + 4, static_cast<uint32_t>(layout.modules[i].end), 4);
    PutLe(block, 16 * i + 8, static_cast<uint32_t>(s), 4);
    std::memcpy(block.data() + (s - layout.table_gpa), modules[i].cmdline.data(), modules[i].cmdline.size());
    s += modules[i].cmdline.size() + 1;
  }
  VBTS_RETURN_IF_ERROR(ram.Write(Gpa(layout.table_gpa), block));
  layout.reserved.push_back(GpaRange{layout.table_gpa, layout.table_gpa + block.size(), "multiboot module table"});
  VBTS_RETURN_IF_ERROR(WriteModules(ram, layout.modules, modules));
  for (const GpaRange& r : layout.modules) layout.reserved.push_back(r);
  VBTS_ASSIGN_OR_RETURN(uint32_t flags, ram.ReadLe<uint32_t>(Gpa(info_gpa)));
  VBTS_RETURN_IF_ERROR(ram.WriteLe<uint32_t>(Gpa(info_gpa), flags | kMultibootInfoMods));
  VBTS_RETURN_IF_ERROR(ram.WriteLe<uint32_t>(Gpa(info_gpa + 20), static_cast<uint32_t>(modules.size())));
  VBTS_RETURN_IF_ERROR(ram.WriteLe<uint32_t>(Gpa(info_gpa + 24), static_cast<uint32_t>(layout.table_gpa)));
  return layout;
}

}  // namespace vbts::vmm
