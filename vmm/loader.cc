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
#include "absl/strings/strip.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "vmm/boot_bytes.h"
#include "vmm/linux_boot.h"

namespace vbts::vmm {
namespace {

constexpr uint32_t kElf32HeaderSize = 52;
constexpr uint32_t kElf32PhdrSize = 32;
constexpr uint32_t kPtLoad = 1;
constexpr uint32_t kPfX = 1;
constexpr uint16_t kEtExec = 2;
constexpr uint16_t kEm386 = 3;
constexpr uint16_t kEmX8664 = 62;

uint32_t Le32(absl::Span<const uint8_t> b, uint64_t off) { return static_cast<uint32_t>(GetLe(b, off, 4)); }
uint64_t Le64(absl::Span<const uint8_t> b, uint64_t off) { return GetLe(b, off, 8); }
uint16_t Le16(absl::Span<const uint8_t> b, uint64_t off) { return static_cast<uint16_t>(GetLe(b, off, 2)); }

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
    return BadImage(name,
               "Multiboot header at offset 0x%x has a bad checksum: magic 0x1BADB002 + flags "
               "0x%08x + checksum 0x%08x = 0x%08x (mod 2^32), must be 0",
               first_bad->offset, first_bad->flags, bad_checksum, sum);
  }
  return BadImage(name,
             "no Multiboot v1 header: magic 0x1BADB002 not found at any 4-byte aligned offset "
             "below 0x%x (file is %u bytes)",
             kMultibootSearchEnd, file.size());
}

absl::StatusOr<Plan> PlanAout(absl::Span<const uint8_t> file, std::string_view name,
                              const Header& h) {
  const uint64_t fields_end = uint64_t{h.offset} + 32;
  if (fields_end > file.size()) {
    return BadImage(name,
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
    return BadImage(name, "a.out kludge: header_addr 0x%08x is below load_addr 0x%08x", header_addr,
               load_addr);
  }
  if (header_addr - load_addr > h.offset) {
    return BadImage(name,
               "a.out kludge: header_addr 0x%08x - load_addr 0x%08x = 0x%x exceeds the "
               "header's file offset 0x%x",
               header_addr, load_addr, header_addr - load_addr, h.offset);
  }
  const uint64_t text_offset = h.offset - (header_addr - load_addr);
  uint64_t load_size;
  if (load_end_addr != 0) {
    if (load_end_addr < load_addr) {
      return BadImage(name, "a.out kludge: load_end_addr 0x%08x is below load_addr 0x%08x",
                 load_end_addr, load_addr);
    }
    load_size = load_end_addr - load_addr;
    if (text_offset + load_size > file.size()) {
      return BadImage(name,
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
      return BadImage(name,
                 "a.out kludge: bss_end_addr 0x%08x is below the end of the loaded data 0x%x "
                 "(load_addr + load size)",
                 bss_end_addr, load_addr + load_size);
    }
    mem_size = bss_end_addr - load_addr;
  }
  if (mem_size == 0) {
    return BadImage(name,
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

// One program header of an ELF32 or ELF64 file (fields widened to 64 bits).
struct ElfPhdr {
  uint32_t type = 0;
  uint32_t flags = 0;
  uint64_t offset = 0;
  uint64_t vaddr = 0;
  uint64_t paddr = 0;
  uint64_t filesz = 0;
  uint64_t memsz = 0;
};

// The caller has checked that the header lies inside the file.
ElfPhdr ReadPhdr(absl::Span<const uint8_t> file, bool is64, uint64_t ph) {
  ElfPhdr p;
  p.type = Le32(file, ph);
  if (is64) {  // Elf64_Phdr: type, flags, offset, vaddr, paddr, filesz, memsz, align
    p.flags = Le32(file, ph + 4);
    p.offset = Le64(file, ph + 8);
    p.vaddr = Le64(file, ph + 16);
    p.paddr = Le64(file, ph + 24);
    p.filesz = Le64(file, ph + 32);
    p.memsz = Le64(file, ph + 40);
  } else {  // Elf32_Phdr: type, offset, vaddr, paddr, filesz, memsz, flags, align
    p.offset = Le32(file, ph + 4);
    p.vaddr = Le32(file, ph + 8);
    p.paddr = Le32(file, ph + 12);
    p.filesz = Le32(file, ph + 16);
    p.memsz = Le32(file, ph + 20);
    p.flags = Le32(file, ph + 24);
  }
  return p;
}

// Adds PT_LOAD header `p` (number i) to the plan: p_filesz bytes from
// p_offset to p_paddr, zeroes up to p_memsz. Other types and empty segments
// are skipped (false), as QEMU's load_elf skips them.
absl::StatusOr<bool> AddLoadSegment(Plan& plan, absl::Span<const uint8_t> file, std::string_view name,
                                    const ElfPhdr& p, uint32_t i) {
  if (p.type != kPtLoad || p.memsz == 0) return false;
  if (p.filesz > p.memsz) {
    return BadImage(name, "phdr[%u].p_filesz 0x%x exceeds p_memsz 0x%x", i, p.filesz, p.memsz);
  }
  if (p.offset > file.size() || p.filesz > file.size() - p.offset) {
    return BadImage(name,
               "phdr[%u] file bytes [0x%x, 0x%x) (p_offset + p_filesz) extend past the end of "
               "the file (0x%x bytes)",
               i, p.offset, p.offset + p.filesz, file.size());
  }
  plan.segments.push_back(Segment{p.paddr, p.offset, p.filesz, p.memsz, absl::StrFormat("phdr[%u]", i),
                                  absl::StrFormat("phdr[%u].p_paddr 0x%08x", i, p.paddr),
                                  (p.flags & kPfX) != 0, p.vaddr});
  return true;
}

absl::StatusOr<Plan> PlanElf(absl::Span<const uint8_t> file, std::string_view name,
                             const Header& h) {
  if (file.size() < 4 || file[0] != 0x7F || file[1] != 'E' || file[2] != 'L' || file[3] != 'F') {
    return BadImage(name,
               "not an ELF file (e_ident[0..3] is not 7f 45 4c 46) and Multiboot header flags "
               "0x%08x lack bit 16 (address fields), so there is nothing to load",
               h.flags);
  }
  if (file.size() < 16) {
    return BadImage(name, "ELF header truncated: file is %u bytes, e_ident needs 16", file.size());
  }
  if (file[4] == 2) {
    return BadImage(name,
               "e_ident[EI_CLASS] = 2 (ELFCLASS64): ELF64 images are not Multiboot v1; QEMU "
               "refuses them too (\"Cannot load x86-64 image, give a 32bit one.\")");
  }
  if (file[4] != 1) {
    return BadImage(name, "e_ident[EI_CLASS] = %u, expected 1 (ELFCLASS32)", file[4]);
  }
  if (file.size() < kElf32HeaderSize) {
    return BadImage(name, "ELF header truncated: file is %u bytes, an ELF32 header needs %u",
               file.size(), kElf32HeaderSize);
  }
  if (file[5] != 1) {
    return BadImage(name, "e_ident[EI_DATA] = %u, expected 1 (ELFDATA2LSB, little endian)", file[5]);
  }
  const uint16_t e_type = Le16(file, 16);
  if (e_type != kEtExec) {
    return BadImage(name, "e_type = %u, expected 2 (ET_EXEC)", e_type);
  }
  const uint16_t e_machine = Le16(file, 18);
  if (e_machine != kEm386) {
    return BadImage(name, "e_machine = %u%s, expected 3 (EM_386)", e_machine,
               e_machine == kEmX8664 ? " (EM_X86_64)" : "");
  }
  const uint32_t e_entry = Le32(file, 24);
  const uint32_t e_phoff = Le32(file, 28);
  const uint16_t e_phentsize = Le16(file, 42);
  const uint16_t e_phnum = Le16(file, 44);
  if (e_phnum == 0) {
    return BadImage(name, "e_phnum = 0: no program headers, nothing to load");
  }
  if (e_phentsize != kElf32PhdrSize) {
    return BadImage(name, "e_phentsize = %u, expected %u (sizeof(Elf32_Phdr))", e_phentsize,
               kElf32PhdrSize);
  }
  const uint64_t ph_end = uint64_t{e_phoff} + uint64_t{e_phnum} * kElf32PhdrSize;
  if (ph_end > file.size()) {
    return BadImage(name,
               "program headers [0x%x, 0x%x) (e_phoff + e_phnum * 32) extend past the end of the "
               "file (0x%x bytes)",
               e_phoff, ph_end, file.size());
  }
  Plan plan;
  plan.entry = e_entry;
  plan.entry_field = "e_entry";
  bool translated = false;
  for (uint32_t i = 0; i < e_phnum; ++i) {
    const ElfPhdr p = ReadPhdr(file, /*is64=*/false, e_phoff + uint64_t{i} * kElf32PhdrSize);
    VBTS_ASSIGN_OR_RETURN(const bool loaded, AddLoadSegment(plan, file, name, p, i));
    // QEMU's load_elf: e_entry is virtual; translate it through the first
    // executable segment whose file-backed virtual range holds it.
    if (loaded && !translated && (p.flags & kPfX) && p.vaddr != p.paddr && e_entry >= p.vaddr &&
        uint64_t{e_entry} < p.vaddr + p.filesz) {
      plan.entry = static_cast<uint32_t>(e_entry - p.vaddr + p.paddr);
      plan.entry_field = absl::StrFormat("e_entry 0x%08x translated through phdr[%u]", e_entry, i);
      translated = true;
    }
  }
  if (plan.segments.empty()) {
    return BadImage(name, "no PT_LOAD program header with p_memsz > 0 among the %u program headers",
               e_phnum);
  }
  return plan;
}

// The PVH entry of an ELF kernel (Xen's "x86/HVM direct boot ABI", the one
// QEMU's -kernel and Firecracker use for Linux's vmlinux): a note named
// "Xen" of type XEN_ELFNOTE_PHYS32_ENTRY (18) in a PT_NOTE segment, whose
// 4- or 8-byte value is the physical address of the 32-bit entry point.
// Returns nullopt for a file that is not an ELF32/ELF64 x86 executable or
// has no such note; an error for a note that is there but unusable.
absl::StatusOr<std::optional<Plan>> PlanPvh(absl::Span<const uint8_t> file, std::string_view name) {
  constexpr uint32_t kPtNote = 4;
  constexpr uint32_t kXenElfnotePhys32Entry = 18;
  if (file.size() < 64 || file[0] != 0x7F || file[1] != 'E' || file[2] != 'L' || file[3] != 'F' || file[5] != 1 ||
      (file[4] != 1 && file[4] != 2))
    return std::nullopt;
  const bool is64 = file[4] == 2;
  const uint16_t e_machine = Le16(file, 18);
  if (Le16(file, 16) != kEtExec || e_machine != (is64 ? kEmX8664 : kEm386)) return std::nullopt;
  const uint64_t e_phoff = is64 ? Le64(file, 32) : Le32(file, 28);
  const uint16_t e_phentsize = Le16(file, is64 ? 54 : 42);
  const uint16_t e_phnum = Le16(file, is64 ? 56 : 44);
  const uint64_t phdr_size = is64 ? 56 : kElf32PhdrSize;
  if (e_phentsize != phdr_size || e_phoff > file.size() || e_phnum * phdr_size > file.size() - e_phoff)
    return std::nullopt;
  std::vector<ElfPhdr> phdrs;
  for (uint32_t i = 0; i < e_phnum; ++i) phdrs.push_back(ReadPhdr(file, is64, e_phoff + i * phdr_size));
  std::optional<uint64_t> entry;
  for (const ElfPhdr& p : phdrs) {
    if (p.type != kPtNote || p.offset > file.size() || p.filesz > file.size() - p.offset) continue;
    uint64_t off = p.offset;
    const uint64_t end = p.offset + p.filesz;
    // (A note's padded value may end past the segment: `off` then passes
    // `end`, and the segment has no more notes.)
    while (!entry && off <= end && end - off >= 12) {
      const uint64_t namesz = Le32(file, off), descsz = Le32(file, off + 4);
      const uint32_t type = Le32(file, off + 8);
      const uint64_t name_off = off + 12;
      const uint64_t desc_off = name_off + ((namesz + 3) & ~uint64_t{3});
      if (desc_off > end || descsz > end - desc_off) break;  // a truncated note ends the segment
      if (type == kXenElfnotePhys32Entry && namesz == 4 && std::memcmp(&file[name_off], "Xen", 4) == 0) {
        if (descsz != 4 && descsz != 8)
          return BadImage(name, "PVH entry note (Xen, type 18) has a %u-byte value, expected 4 or 8", descsz);
        entry = descsz == 4 ? Le32(file, desc_off) : Le64(file, desc_off);
      }
      off = desc_off + ((descsz + 3) & ~uint64_t{3});
    }
  }
  if (!entry) return std::nullopt;
  if (*entry > 0xFFFFFFFFu)
    return BadImage(name, "PVH entry point 0x%x (Xen note type 18) is above 4 GiB; the entry runs in 32-bit mode",
               *entry);
  Plan plan;
  plan.entry = static_cast<uint32_t>(*entry);
  plan.entry_field = "PVH entry note";
  for (uint32_t i = 0; i < e_phnum; ++i) VBTS_RETURN_IF_ERROR(AddLoadSegment(plan, file, name, phdrs[i], i).status());
  if (plan.segments.empty())
    return BadImage(name, "no PT_LOAD program header with p_memsz > 0 among the %u program headers", e_phnum);
  return plan;
}

absl::Status Validate(const Plan& plan, std::string_view name, uint64_t ram_size,
                      const LoaderLimits& limits) {
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    const uint64_t end = s.gpa + s.memsz;
    if (!RangeWithin(s.gpa, s.memsz, ram_size)) {
      return BadImage(name, "%s: load range [0x%x, 0x%x) is outside of guest RAM [0, 0x%x)", s.what,
                 s.gpa, end, ram_size);
    }
    for (const GpaRange& r : limits.reserved) {
      if (r.Overlaps(s.gpa, end)) {
        return BadImage(name, "%s: load range [0x%x, 0x%x) overlaps reserved \"%s\" [0x%x, 0x%x)",
                   s.what, s.gpa, end, r.name, r.start, r.end);
      }
    }
    for (size_t j = 0; j < i; ++j) {
      const Segment& o = plan.segments[j];
      if (s.gpa < o.gpa + o.memsz && o.gpa < end) {
        return BadImage(name, "%s: load range [0x%x, 0x%x) overlaps %s load range [0x%x, 0x%x)",
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
  return BadImage(name, "entry point 0x%08x (%s) is not inside any loaded range: %s", plan.entry,
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

// Validates the plan, writes it and describes what was written.
absl::Status Place(const Plan& plan, absl::Span<const uint8_t> file, std::string_view file_name, PhysMemory& ram,
                   const LoaderLimits& limits, LoadedImage& image) {
  VBTS_RETURN_IF_ERROR(Validate(plan, file_name, ram.size(), limits));
  VBTS_RETURN_IF_ERROR(WriteSegments(plan, file, ram));
  image.entry = plan.entry;
  for (const Segment& s : plan.segments) {
    image.ranges.push_back(GpaRange{s.gpa, s.gpa + s.memsz, s.name});
    if (s.executable && s.filesz > 0) image.code.push_back(CodeRange{s.gpa, s.vaddr, s.filesz});
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadedImage> LoadKernelImage(absl::Span<const uint8_t> file, std::string_view file_name,
                                            PhysMemory& ram, const LoaderLimits& limits) {
  // QEMU's x86_load_linux looks for Linux's setup header first.
  VBTS_ASSIGN_OR_RETURN(std::optional<LinuxSetupHeader> linux_header, ParseLinuxSetupHeader(file, file_name));
  if (linux_header) {
    Plan plan;
    Segment s;
    s.gpa = kLinuxLoadAddress;
    s.file_offset = linux_header->setup_size;
    s.filesz = s.memsz = file.size() - linux_header->setup_size;
    s.name = "protected-mode kernel";
    s.what = "the bzImage's protected-mode kernel";
    s.executable = false;  // compressed: no code to scan for CPUID sites
    s.vaddr = s.gpa;
    plan.segments.push_back(s);
    plan.entry = static_cast<uint32_t>(kLinuxLoadAddress);
    plan.entry_field = "code32_start";
    LoadedImage image;
    image.boot = BootProtocol::kLinux;
    image.format = ImageFormat::kBzImage;
    image.linux_header = linux_header;
    VBTS_RETURN_IF_ERROR(Place(plan, file, file_name, ram, limits, image));
    return image;
  }
  absl::StatusOr<LoadedImage> multiboot = LoadMultibootImage(file, file_name, ram, limits);
  if (multiboot.ok() || FindHeader(file, file_name).ok()) return multiboot;
  // No (valid) Multiboot header: QEMU's -kernel then tries the PVH note.
  VBTS_ASSIGN_OR_RETURN(std::optional<Plan> pvh, PlanPvh(file, file_name));
  if (!pvh) {
    return BadImage(file_name, "%s; nor is it an ELF kernel with a PVH entry note (Xen ELF note 18, XEN_ELFNOTE_PHYS32_ENTRY)",
               absl::StripPrefix(multiboot.status().message(), std::string(file_name) + ": "));
  }
  LoadedImage image;
  image.boot = BootProtocol::kPvh;
  image.format = file[4] == 2 ? ImageFormat::kElf64 : ImageFormat::kElf32;
  VBTS_RETURN_IF_ERROR(Place(*pvh, file, file_name, ram, limits, image));
  return image;
}

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
    return BadImage(file_name,
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
  VBTS_RETURN_IF_ERROR(Place(plan, file, file_name, ram, limits, image));
  return image;
}

absl::StatusOr<std::vector<uint8_t>> ReadImageFile(const std::string& path) {
  return ReadWholeFile(path, "kernel image", kMaxImageFileSize);
}

}  // namespace vbts::vmm
