// symbol_elf.cc: the ELF64 symbol file (System V gABI: ELF header, section
// headers, Elf64_Sym; x86-64 psABI: EM_X86_64).
#include "record/symbol_elf.h"

#include <algorithm>
#include <string>

namespace vbts::record {
namespace {

constexpr uint32_t kOutSymtab = 2, kOutStrtab = 3, kOutNobits = 8;
constexpr uint64_t kOutAlloc = 2, kOutExecinstr = 4;
constexpr uint8_t kOutFunc = 2, kOutLocal = 0, kOutGlobal = 1;

void PutOut(std::vector<uint8_t>& b, uint64_t v, int n) {
  for (int i = 0; i < n; i++) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> SymbolElf(const SymbolTable& table) {
  const std::vector<Symbol>& all = table.symbols();
  if (all.empty()) return absl::InvalidArgumentError("no symbols to write");
  // Locals, then globals (sh_info: the first global).
  std::vector<const Symbol*> order;
  for (const Symbol& s : all)
    if (!s.global) order.push_back(&s);
  const size_t first_global = order.size() + 1;  // after the null symbol
  for (const Symbol& s : all)
    if (s.global) order.push_back(&s);
  uint64_t lo = ~0ull, hi = 0;
  std::string strtab(1, '\0');
  std::vector<uint8_t> symtab(24, 0);  // the null symbol
  for (const Symbol* s : order) {
    const trace::AddressRange r = table.Extent(*s);
    const uint64_t size = r.end > r.start && r.end != ~0ull ? r.end - r.start : 0;
    lo = std::min(lo, s->addr);
    hi = std::max(hi, s->addr + std::max<uint64_t>(size, 1));
    PutOut(symtab, strtab.size(), 4);  // st_name
    symtab.push_back(static_cast<uint8_t>(((s->global ? kOutGlobal : kOutLocal) << 4) | kOutFunc));  // st_info
    symtab.push_back(0);            // st_other: default visibility
    PutOut(symtab, 1, 2);              // st_shndx: .text
    PutOut(symtab, s->addr, 8);        // st_value
    PutOut(symtab, size, 8);           // st_size
    strtab += s->name;
    strtab.push_back('\0');
  }
  const std::string shstrtab = std::string("\0.text\0.symtab\0.strtab\0.shstrtab\0", 33);
  // Layout: ELF header (64), .symtab, .strtab, .shstrtab, section headers (5 x 64).
  const uint64_t symtab_off = 64, strtab_off = symtab_off + symtab.size();
  const uint64_t shstrtab_off = strtab_off + strtab.size();
  const uint64_t shoff = (shstrtab_off + shstrtab.size() + 7) & ~7ull;
  std::vector<uint8_t> f;
  const uint8_t ident[16] = {0x7F, 'E', 'L', 'F', 2 /*ELFCLASS64*/, 1 /*LSB*/, 1 /*EV_CURRENT*/};
  f.insert(f.end(), ident, ident + 16);
  PutOut(f, 2, 2);         // e_type: ET_EXEC
  PutOut(f, 62, 2);        // e_machine: EM_X86_64
  PutOut(f, 1, 4);         // e_version
  PutOut(f, 0, 8);         // e_entry
  PutOut(f, 0, 8);         // e_phoff: none
  PutOut(f, shoff, 8);     // e_shoff
  PutOut(f, 0, 4);         // e_flags
  PutOut(f, 64, 2);        // e_ehsize
  PutOut(f, 56, 2);        // e_phentsize
  PutOut(f, 0, 2);         // e_phnum
  PutOut(f, 64, 2);        // e_shentsize
  PutOut(f, 5, 2);         // e_shnum
  PutOut(f, 4, 2);         // e_shstrndx
  f.insert(f.end(), symtab.begin(), symtab.end());
  f.insert(f.end(), strtab.begin(), strtab.end());
  f.insert(f.end(), shstrtab.begin(), shstrtab.end());
  f.resize(shoff, 0);
  auto section = [&f](uint32_t name, uint32_t type, uint64_t flags, uint64_t addr, uint64_t off, uint64_t size,
                      uint32_t link, uint32_t info, uint64_t align, uint64_t entsize) {
    PutOut(f, name, 4);
    PutOut(f, type, 4);
    PutOut(f, flags, 8);
    PutOut(f, addr, 8);
    PutOut(f, off, 8);
    PutOut(f, size, 8);
    PutOut(f, link, 4);
    PutOut(f, info, 4);
    PutOut(f, align, 8);
    PutOut(f, entsize, 8);
  };
  section(0, 0, 0, 0, 0, 0, 0, 0, 0, 0);                                                   // null
  section(1, kOutNobits, kOutAlloc | kOutExecinstr, lo, shoff, hi - lo, 0, 0, 16, 0);       // .text
  section(7, kOutSymtab, 0, 0, symtab_off, symtab.size(), 3, first_global, 8, 24);        // .symtab
  section(15, kOutStrtab, 0, 0, strtab_off, strtab.size(), 0, 0, 1, 0);                   // .strtab
  section(23, kOutStrtab, 0, 0, shstrtab_off, shstrtab.size(), 0, 0, 1, 0);               // .shstrtab
  return f;
}

}  // namespace vbts::record
