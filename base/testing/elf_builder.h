// elf_builder.h: synthetic ELF32/ELF64 files for unit tests, built field by
// field from the gABI layouts (ELF header, program header, section headers,
// symbol table entries).
#ifndef VBTS_BASE_TESTING_ELF_BUILDER_H_
#define VBTS_BASE_TESTING_ELF_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace vbts::testing {

struct TestSym {
  std::string name;
  uint64_t value, size;
  uint8_t info;    // (bind << 4) | type
  uint16_t shndx;  // 1 = .text, 0xfff1 = ABS
};

inline void Put(std::vector<uint8_t>& f, size_t off, uint64_t v, int bytes) {
  if (f.size() < off + bytes) f.resize(off + bytes);
  for (int i = 0; i < bytes; i++) f[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

// An ELF file: PT_LOAD of .text (0x100 bytes at 0x100000, file offset
// 0x100: `text`, padded with NOPs, or bytes 0x00, 0x01, ... 0xff when
// empty), sections null, .text, .symtab, .strtab, .data (not executable,
// 0x100200..0x100300, alloc).
inline std::vector<uint8_t> MakeElf(bool is64, const std::vector<TestSym>& syms, std::vector<uint8_t> text = {}) {
  std::vector<uint8_t> f(0x100, 0);
  f[0] = 0x7f, f[1] = 'E', f[2] = 'L', f[3] = 'F', f[4] = is64 ? 2 : 1, f[5] = 1, f[6] = 1;
  const int ph = is64 ? 56 : 32, sh = is64 ? 64 : 40, se = is64 ? 24 : 16;
  // text bytes
  if (text.empty())
    for (int i = 0; i < 0x100; i++) text.push_back(static_cast<uint8_t>(i));
  text.resize(0x100, 0x90);
  f.insert(f.end(), text.begin(), text.end());
  // strtab
  std::vector<uint8_t> str = {0};
  std::vector<uint32_t> name_off;
  for (const TestSym& s : syms) {
    name_off.push_back(static_cast<uint32_t>(str.size()));
    str.insert(str.end(), s.name.begin(), s.name.end());
    str.push_back(0);
  }
  const size_t strtab_off = f.size();
  f.insert(f.end(), str.begin(), str.end());
  while (f.size() % 8) f.push_back(0);
  const size_t symtab_off = f.size();
  f.resize(f.size() + se * (syms.size() + 1), 0);
  for (size_t i = 0; i < syms.size(); i++) {
    const size_t e = symtab_off + se * (i + 1);
    const TestSym& s = syms[i];
    Put(f, e, name_off[i], 4);
    if (is64) {
      Put(f, e + 4, s.info, 1), Put(f, e + 6, s.shndx, 2), Put(f, e + 8, s.value, 8), Put(f, e + 16, s.size, 8);
    } else {
      Put(f, e + 4, s.value, 4), Put(f, e + 8, s.size, 4), Put(f, e + 12, s.info, 1), Put(f, e + 14, s.shndx, 2);
    }
  }
  const size_t phoff = f.size();
  f.resize(f.size() + ph, 0);
  Put(f, phoff, 1, 4);  // PT_LOAD
  if (is64) {
    Put(f, phoff + 8, 0x100, 8), Put(f, phoff + 16, 0x100000, 8), Put(f, phoff + 24, 0x100000, 8);
    Put(f, phoff + 32, 0x100, 8), Put(f, phoff + 40, 0x100, 8);
  } else {
    Put(f, phoff + 4, 0x100, 4), Put(f, phoff + 8, 0x100000, 4), Put(f, phoff + 12, 0x100000, 4);
    Put(f, phoff + 16, 0x100, 4), Put(f, phoff + 20, 0x100, 4);
  }
  const size_t shoff = f.size();
  f.resize(f.size() + sh * 5, 0);
  auto sec = [&](int i, uint32_t type, uint64_t flags, uint64_t addr, uint64_t off, uint64_t size, uint32_t link,
                 uint64_t entsize) {
    const size_t s = shoff + sh * i;
    Put(f, s + 4, type, 4);
    if (is64) {
      Put(f, s + 8, flags, 8), Put(f, s + 16, addr, 8), Put(f, s + 24, off, 8), Put(f, s + 32, size, 8);
      Put(f, s + 40, link, 4), Put(f, s + 56, entsize, 8);
    } else {
      Put(f, s + 8, flags, 4), Put(f, s + 12, addr, 4), Put(f, s + 16, off, 4), Put(f, s + 20, size, 4);
      Put(f, s + 24, link, 4), Put(f, s + 36, entsize, 4);
    }
  };
  sec(1, 1, 6, 0x100000, 0x100, 0x100, 0, 0);                               // .text PROGBITS ALLOC|EXEC
  sec(2, 2, 0, 0, symtab_off, se * (syms.size() + 1), 3, se);                // .symtab -> .strtab
  sec(3, 3, 0, 0, strtab_off, str.size(), 0, 0);                             // .strtab
  sec(4, 1, 3, 0x100200, 0, 0x100, 0, 0);                                    // .data ALLOC|WRITE
  if (is64) {
    Put(f, 16, 2, 2), Put(f, 18, 62, 2), Put(f, 32, phoff, 8), Put(f, 40, shoff, 8);
    Put(f, 54, ph, 2), Put(f, 56, 1, 2), Put(f, 58, sh, 2), Put(f, 60, 5, 2);
  } else {
    Put(f, 16, 2, 2), Put(f, 18, 3, 2), Put(f, 28, phoff, 4), Put(f, 32, shoff, 4);
    Put(f, 42, ph, 2), Put(f, 44, 1, 2), Put(f, 46, sh, 2), Put(f, 48, 5, 2);
  }
  return f;
}

inline const std::vector<TestSym> kSyms = {
    {"_start", 0x100000, 0, 0x10, 1},          // global NOTYPE label
    {"_start.loop", 0x100010, 0, 0x00, 1},     // its NASM local label
    {"rt_image_start", 0x100000, 0, 0x00, 1},  // a second name at 0x100000 (local)
    {"helper", 0x100040, 0x20, 0x12, 1},       // global FUNC, sized
    {"tail", 0x100080, 0, 0x00, 1},
    {"LIMIT", 0x1234, 0, 0x00, 0xfff1},        // ABS constant: not a code symbol
    {"buffer", 0x100200, 0x10, 0x11, 4},       // OBJECT: skipped
    {"data_label", 0x100280, 0, 0x00, 4},      // NOTYPE in .data (alloc): kept
};

}  // namespace vbts::testing

#endif  // VBTS_BASE_TESTING_ELF_BUILDER_H_
