// loader.cc: Multiboot v1 header search, a.out-kludge and ELF32 load planning, validation, then writes to guest RAM.
#include "vmm/loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "base/status_macros.h"

namespace vbts::vmm {
namespace {

constexpr uint32_t kElf32HeaderSize = 52;
constexpr uint32_t kElf32PhdrSize = 32;
constexpr uint32_t kPtLoad = 1;
constexpr uint32_t kPfX = 1;
constexpr uint16_t kEtExec = 2;
constexpr uint16_t kEm386 = 3;
constexpr uint16_t kEmX8664 = 62;

uint32_t Le32(absl::Span<const uint8_t> b, uint64_t off) {
  return uint32_t{b[off]} | (uint32_t{b[off + 1]} << 8) | (uint32_t{b[off + 2]} << 16) |
         (uint32_t{b[off + 3]} << 24);
}
uint16_t Le16(absl::Span<const uint8_t> b, uint64_t off) {
  return static_cast<uint16_t>(b[off] | (b[off + 1] << 8));
}

template <typename... Args>
absl::Status Bad(std::string_view file_name, const absl::FormatSpec<Args...>& format,
                 const Args&... args) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %s", file_name, absl::StrFormat(format, args...)));
}

// One contiguous piece of the image: file bytes [file_offset, +filesz) go to
// gpa, then zeroes up to gpa + memsz.
struct Segment {
  uint64_t gpa = 0;
  uint64_t file_offset = 0;
  uint64_t filesz = 0;
  uint64_t memsz = 0;
  std::string name;  // "phdr[2]" or "a.out kludge"
  std::string what;  // field description for messages
  bool executable = true;  // ELF PF_X; the a.out kludge image is one segment, code included
  uint64_t vaddr = 0;      // ELF p_vaddr (a.out: = gpa)
};

struct Plan {
  std::vector<Segment> segments;
  uint32_t entry = 0;
  std::string entry_field;
};

struct Header {
  uint32_t offset;
  uint32_t flags;
};

absl::StatusOr<Header> FindHeader(absl::Span<const uint8_t> file, std::string_view name) {
  std::optional<Header> first_bad;
  uint32_t bad_checksum = 0;
  for (uint64_t off = 0; off < kMultibootSearchEnd && off + 12 <= file.size(); off += 4) {
    if (Le32(file, off) != kMultibootHeaderMagic) continue;
    const uint32_t flags = Le32(file, off + 4);
    const uint32_t checksum = Le32(file, off + 8);
    if (static_cast<uint32_t>(kMultibootHeaderMagic + flags + checksum) == 0) {
      return Header{static_cast<uint32_t>(off), flags};
    }
    if (!first_bad.has_value()) {
      first_bad = Header{static_cast<uint32_t>(off), flags};
      bad_checksum = checksum;
    }
  }
  if (first_bad.has_value()) {
    const uint32_t sum = kMultibootHeaderMagic + first_bad->flags + bad_checksum;
    return Bad(name,
               "Multiboot header at offset 0x%x has a bad checksum: magic 0x1BADB002 + flags "
               "0x%08x + checksum 0x%08x = 0x%08x (mod 2^32), must be 0",
               first_bad->offset, first_bad->flags, bad_checksum, sum);
  }
  return Bad(name,
             "no Multiboot v1 header: magic 0x1BADB002 not found at any 4-byte aligned offset "
             "below 0x%x (file is %u bytes)",
             kMultibootSearchEnd, file.size());
}

absl::StatusOr<Plan> PlanAout(absl::Span<const uint8_t> file, std::string_view name,
                              const Header& h) {
  const uint64_t fields_end = uint64_t{h.offset} + 32;
  if (fields_end > file.size()) {
    return Bad(name,
               "Multiboot header at offset 0x%x sets flag bit 16 (address fields) but the file "
               "ends at 0x%x, before the address fields end at 0x%x",
               h.offset, file.size(), fields_end);
  }
  const uint32_t header_addr = Le32(file, h.offset + 12);
  const uint32_t load_addr = Le32(file, h.offset + 16);
  const uint32_t load_end_addr = Le32(file, h.offset + 20);
  const uint32_t bss_end_addr = Le32(file, h.offset + 24);
  const uint32_t entry_addr = Le32(file, h.offset + 28);
  if (header_addr < load_addr) {
    return Bad(name, "a.out kludge: header_addr 0x%08x is below load_addr 0x%08x", header_addr,
               load_addr);
  }
  if (header_addr - load_addr > h.offset) {
    return Bad(name,
               "a.out kludge: header_addr 0x%08x - load_addr 0x%08x = 0x%x exceeds the "
               "header's file offset 0x%x",
               header_addr, load_addr, header_addr - load_addr, h.offset);
  }
  const uint64_t text_offset = h.offset - (header_addr - load_addr);
  uint64_t load_size;
  if (load_end_addr != 0) {
    if (load_end_addr < load_addr) {
      return Bad(name, "a.out kludge: load_end_addr 0x%08x is below load_addr 0x%08x",
                 load_end_addr, load_addr);
    }
    load_size = load_end_addr - load_addr;
    if (text_offset + load_size > file.size()) {
      return Bad(name,
                 "a.out kludge: load_end_addr 0x%08x needs file bytes [0x%x, 0x%x) but the "
                 "file is only 0x%x bytes",
                 load_end_addr, text_offset, text_offset + load_size, file.size());
    }
  } else {
    load_size = file.size() - text_offset;
  }
  uint64_t mem_size = load_size;
  if (bss_end_addr != 0) {
    if (bss_end_addr < load_addr + load_size) {
      return Bad(name,
                 "a.out kludge: bss_end_addr 0x%08x is below the end of the loaded data 0x%x "
                 "(load_addr + load size)",
                 bss_end_addr, load_addr + load_size);
    }
    mem_size = bss_end_addr - load_addr;
  }
  if (mem_size == 0) {
    return Bad(name,
               "a.out kludge: nothing to load (load_addr 0x%08x, load_end_addr 0x%08x, "
               "bss_end_addr 0x%08x)",
               load_addr, load_end_addr, bss_end_addr);
  }
  Plan plan;
  plan.segments.push_back(Segment{load_addr, text_offset, load_size, mem_size, "a.out kludge",
                                  absl::StrFormat("a.out kludge load_addr 0x%08x", load_addr),
                                  /*executable=*/true, load_addr});
  plan.entry = entry_addr;
  plan.entry_field = "entry_addr";
  return plan;
}

absl::StatusOr<Plan> PlanElf(absl::Span<const uint8_t> file, std::string_view name,
                             const Header& h) {
  if (file.size() < 4 || file[0] != 0x7F || file[1] != 'E' || file[2] != 'L' || file[3] != 'F') {
    return Bad(name,
               "not an ELF file (e_ident[0..3] is not 7f 45 4c 46) and Multiboot header flags "
               "0x%08x lack bit 16 (address fields), so there is nothing to load",
               h.flags);
  }
  if (file.size() < 16) {
    return Bad(name, "ELF header truncated: file is %u bytes, e_ident needs 16", file.size());
  }
  if (file[4] == 2) {
    return Bad(name,
               "e_ident[EI_CLASS] = 2 (ELFCLASS64): ELF64 images are not Multiboot v1; QEMU "
               "refuses them too (\"Cannot load x86-64 image, give a 32bit one.\")");
  }
  if (file[4] != 1) {
    return Bad(name, "e_ident[EI_CLASS] = %u, expected 1 (ELFCLASS32)", file[4]);
  }
  if (file.size() < kElf32HeaderSize) {
    return Bad(name, "ELF header truncated: file is %u bytes, an ELF32 header needs %u",
               file.size(), kElf32HeaderSize);
  }
  if (file[5] != 1) {
    return Bad(name, "e_ident[EI_DATA] = %u, expected 1 (ELFDATA2LSB, little endian)", file[5]);
  }
  const uint16_t e_type = Le16(file, 16);
  if (e_type != kEtExec) {
    return Bad(name, "e_type = %u, expected 2 (ET_EXEC)", e_type);
  }
  const uint16_t e_machine = Le16(file, 18);
  if (e_machine != kEm386) {
    return Bad(name, "e_machine = %u%s, expected 3 (EM_386)", e_machine,
               e_machine == kEmX8664 ? " (EM_X86_64)" : "");
  }
  const uint32_t e_entry = Le32(file, 24);
  const uint32_t e_phoff = Le32(file, 28);
  const uint16_t e_phentsize = Le16(file, 42);
  const uint16_t e_phnum = Le16(file, 44);
  if (e_phnum == 0) {
    return Bad(name, "e_phnum = 0: no program headers, nothing to load");
  }
  if (e_phentsize != kElf32PhdrSize) {
    return Bad(name, "e_phentsize = %u, expected %u (sizeof(Elf32_Phdr))", e_phentsize,
               kElf32PhdrSize);
  }
  const uint64_t ph_end = uint64_t{e_phoff} + uint64_t{e_phnum} * kElf32PhdrSize;
  if (ph_end > file.size()) {
    return Bad(name,
               "program headers [0x%x, 0x%x) (e_phoff + e_phnum * 32) extend past the end of the "
               "file (0x%x bytes)",
               e_phoff, ph_end, file.size());
  }
  Plan plan;
  plan.entry = e_entry;
  plan.entry_field = "e_entry";
  bool translated = false;
  for (uint32_t i = 0; i < e_phnum; ++i) {
    const uint64_t ph = e_phoff + uint64_t{i} * kElf32PhdrSize;
    const uint32_t p_type = Le32(file, ph);
    const uint32_t p_offset = Le32(file, ph + 4);
    const uint32_t p_vaddr = Le32(file, ph + 8);
    const uint32_t p_paddr = Le32(file, ph + 12);
    const uint32_t p_filesz = Le32(file, ph + 16);
    const uint32_t p_memsz = Le32(file, ph + 20);
    const uint32_t p_flags = Le32(file, ph + 24);
    if (p_type != kPtLoad || p_memsz == 0) continue;
    if (p_filesz > p_memsz) {
      return Bad(name, "phdr[%u].p_filesz 0x%x exceeds p_memsz 0x%x", i, p_filesz, p_memsz);
    }
    const uint64_t data_end = uint64_t{p_offset} + p_filesz;
    if (data_end > file.size()) {
      return Bad(name,
                 "phdr[%u] file bytes [0x%x, 0x%x) (p_offset + p_filesz) extend past the end of "
                 "the file (0x%x bytes)",
                 i, p_offset, data_end, file.size());
    }
    plan.segments.push_back(Segment{p_paddr, p_offset, p_filesz, p_memsz,
                                    absl::StrFormat("phdr[%u]", i),
                                    absl::StrFormat("phdr[%u].p_paddr 0x%08x", i, p_paddr),
                                    (p_flags & kPfX) != 0, p_vaddr});
    // QEMU's load_elf: e_entry is virtual; translate it through the first
    // executable segment whose file-backed virtual range holds it.
    if (!translated && (p_flags & kPfX) && p_vaddr != p_paddr && e_entry >= p_vaddr &&
        uint64_t{e_entry} < uint64_t{p_vaddr} + p_filesz) {
      plan.entry = e_entry - p_vaddr + p_paddr;
      plan.entry_field = absl::StrFormat("e_entry 0x%08x translated through phdr[%u]", e_entry, i);
      translated = true;
    }
  }
  if (plan.segments.empty()) {
    return Bad(name, "no PT_LOAD program header with p_memsz > 0 among the %u program headers",
               e_phnum);
  }
  return plan;
}

absl::Status Validate(const Plan& plan, std::string_view name, uint64_t ram_size,
                      const LoaderLimits& limits) {
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    const uint64_t end = s.gpa + s.memsz;
    if (!RangeWithin(s.gpa, s.memsz, ram_size)) {
      return Bad(name, "%s: load range [0x%x, 0x%x) is outside of guest RAM [0, 0x%x)", s.what,
                 s.gpa, end, ram_size);
    }
    for (const GpaRange& r : limits.reserved) {
      if (r.Overlaps(s.gpa, end)) {
        return Bad(name, "%s: load range [0x%x, 0x%x) overlaps reserved \"%s\" [0x%x, 0x%x)",
                   s.what, s.gpa, end, r.name, r.start, r.end);
      }
    }
    for (size_t j = 0; j < i; ++j) {
      const Segment& o = plan.segments[j];
      if (s.gpa < o.gpa + o.memsz && o.gpa < end) {
        return Bad(name, "%s: load range [0x%x, 0x%x) overlaps %s load range [0x%x, 0x%x)",
                   s.what, s.gpa, end, o.name, o.gpa, o.gpa + o.memsz);
      }
    }
  }
  for (const Segment& s : plan.segments) {
    if (plan.entry >= s.gpa && plan.entry < s.gpa + s.memsz) return absl::OkStatus();
  }
  std::vector<std::string> ranges;
  for (const Segment& s : plan.segments) {
    ranges.push_back(absl::StrFormat("[0x%x, 0x%x)", s.gpa, s.gpa + s.memsz));
  }
  return Bad(name, "entry point 0x%08x (%s) is not inside any loaded range: %s", plan.entry,
             plan.entry_field, absl::StrJoin(ranges, ", "));
}

absl::Status WriteSegments(const Plan& plan, absl::Span<const uint8_t> file, PhysMemory& ram) {
  static constexpr uint8_t kZeros[4096] = {};
  for (const Segment& s : plan.segments) {
    VBTS_RETURN_IF_ERROR(ram.Write(Gpa(s.gpa), file.subspan(s.file_offset, s.filesz)));
    uint64_t gpa = s.gpa + s.filesz;
    const uint64_t end = s.gpa + s.memsz;
    while (gpa < end) {
      const uint64_t n = std::min<uint64_t>(sizeof(kZeros), end - gpa);
      VBTS_RETURN_IF_ERROR(ram.Write(Gpa(gpa), absl::MakeConstSpan(kZeros, n)));
      gpa += n;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadedImage> LoadMultibootImage(absl::Span<const uint8_t> file,
                                               std::string_view file_name, PhysMemory& ram,
                                               const LoaderLimits& limits) {
  VBTS_ASSIGN_OR_RETURN(const Header header, FindHeader(file, file_name));
  LoadedImage image;
  image.header_flags = header.flags;
  image.header_offset = header.offset;
  const uint32_t unsupported =
      header.flags & 0xFFFFu & ~(kMultibootPageAlign | kMultibootMemoryInfo | kMultibootVideoMode);
  if (unsupported != 0) {
    return Bad(file_name,
               "Multiboot header flags 0x%08x require unsupported bits 0x%04x (a boot loader "
               "must refuse unknown bits 0-15; vbts supports bits 0, 1 and 2)",
               header.flags, unsupported);
  }
  if (header.flags & kMultibootVideoMode) {
    image.warnings.push_back(absl::StrFormat(
        "%s: Multiboot header flags 0x%08x request a video mode (bit 2); ignored, as QEMU does",
        file_name, header.flags));
  }
  Plan plan;
  if (header.flags & kMultibootAoutKludge) {
    image.format = ImageFormat::kAoutKludge;
    VBTS_ASSIGN_OR_RETURN(plan, PlanAout(file, file_name, header));
  } else {
    image.format = ImageFormat::kElf32;
    VBTS_ASSIGN_OR_RETURN(plan, PlanElf(file, file_name, header));
  }
  VBTS_RETURN_IF_ERROR(Validate(plan, file_name, ram.size(), limits));
  VBTS_RETURN_IF_ERROR(WriteSegments(plan, file, ram));
  image.entry = plan.entry;
  for (const Segment& s : plan.segments) {
    image.ranges.push_back(GpaRange{s.gpa, s.gpa + s.memsz, s.name});
    if (s.executable && s.filesz > 0) image.code.push_back(CodeRange{s.gpa, s.vaddr, s.filesz});
  }
  return image;
}

absl::StatusOr<std::vector<uint8_t>> ReadImageFile(const std::string& path) {
  return ReadWholeFile(path, "kernel image", kMaxImageFileSize);
}

}  // namespace vbts::vmm
