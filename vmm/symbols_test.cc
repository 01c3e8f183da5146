// symbols_test.cc: ELF symbol tables (vmm/symbols.h) on synthetic ELF32 and
// ELF64 files built here field by field (gABI layouts), and on malformed ones.
#include "vmm/symbols.h"

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pmu/status_macros.h"
#include "pmu/testing/status_matchers.h"

namespace vbts::vmm {
namespace {

using ::testing::HasSubstr;
using ::vbts::testing::StatusIs;

struct TestSym {
  std::string name;
  uint64_t value, size;
  uint8_t info;    // (bind << 4) | type
  uint16_t shndx;  // 1 = .text, 0xfff1 = ABS
};

void Put(std::vector<uint8_t>& f, size_t off, uint64_t v, int bytes) {
  if (f.size() < off + bytes) f.resize(off + bytes);
  for (int i = 0; i < bytes; i++) f[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

// An ELF file: PT_LOAD of .text (0x100 bytes 0x90.. at 0x100000, file offset
// 0x100), sections null, .text, .symtab, .strtab, .data (not executable,
// 0x100200..0x100300, alloc).
std::vector<uint8_t> MakeElf(bool is64, const std::vector<TestSym>& syms) {
  std::vector<uint8_t> f(0x100, 0);
  f[0] = 0x7f, f[1] = 'E', f[2] = 'L', f[3] = 'F', f[4] = is64 ? 2 : 1, f[5] = 1, f[6] = 1;
  const int ph = is64 ? 56 : 32, sh = is64 ? 64 : 40, se = is64 ? 24 : 16;
  // text bytes
  for (int i = 0; i < 0x100; i++) f.push_back(static_cast<uint8_t>(i));
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

const std::vector<TestSym> kSyms = {
    {"_start", 0x100000, 0, 0x10, 1},          // global NOTYPE label
    {"_start.loop", 0x100010, 0, 0x00, 1},     // its NASM local label
    {"rt_image_start", 0x100000, 0, 0x00, 1},  // a second name at 0x100000 (local)
    {"helper", 0x100040, 0x20, 0x12, 1},       // global FUNC, sized
    {"tail", 0x100080, 0, 0x00, 1},
    {"LIMIT", 0x1234, 0, 0x00, 0xfff1},        // ABS constant: not a code symbol
    {"buffer", 0x100200, 0x10, 0x11, 4},       // OBJECT: skipped
    {"data_label", 0x100280, 0, 0x00, 4},      // NOTYPE in .data (alloc): kept
};

class SymbolsTest : public ::testing::TestWithParam<bool> {};

TEST_P(SymbolsTest, DescribesAddresses) {
  VBTS_ASSERT_OK_AND_ASSIGN(SymbolTable t, SymbolTable::FromElf(MakeElf(GetParam(), kSyms), "t.elf"));
  EXPECT_EQ(t.size(), 6u);  // all but LIMIT and buffer
  EXPECT_EQ(t.Describe(0x100000), "_start");           // global beats local at one address
  EXPECT_EQ(t.Describe(0x100005), "_start+0x5");
  EXPECT_EQ(t.Describe(0x100012), "_start.loop+0x2");
  EXPECT_EQ(t.FunctionOf(0x100012), "_start");
  EXPECT_EQ(t.Describe(0x100040), "helper");
  EXPECT_EQ(t.Describe(0x10005f), "helper+0x1f");
  EXPECT_EQ(t.Describe(0x100060), "0x100060");          // past helper's size, before tail
  EXPECT_EQ(t.Describe(0x1000ff), "tail+0x7f");
  EXPECT_EQ(t.Describe(0x100100), "0x100100");          // past the end of .text
  EXPECT_EQ(t.Describe(0xfffff), "0xfffff");
  EXPECT_EQ(t.Describe(0x100290), "data_label+0x10");
}

TEST_P(SymbolsTest, RangesFromSymbolsAndNumbers) {
  VBTS_ASSERT_OK_AND_ASSIGN(SymbolTable t, SymbolTable::FromElf(MakeElf(GetParam(), kSyms), "t.elf"));
  using R = trace::AddressRange;
  // _start's extent skips its own local label and stops at helper.
  EXPECT_THAT(ParseRange("_start", &t), ::vbts::testing::IsOk());
  EXPECT_EQ(*ParseRange("_start", &t), (R{0x100000, 0x100040}));
  EXPECT_EQ(*ParseRange("helper", &t), (R{0x100040, 0x100060}));
  EXPECT_EQ(*ParseRange("tail", &t), (R{0x100080, 0x100100}));  // to the end of .text
  EXPECT_EQ(*ParseRange("0x100000:0x100010", &t), (R{0x100000, 0x100010}));
  EXPECT_EQ(*ParseRange("1048576:helper+0x8", &t), (R{0x100000, 0x100048}));
  EXPECT_EQ(*ParseRange("helper:tail", &t), (R{0x100040, 0x100080}));
  EXPECT_THAT(ParseRange("nosuch", &t), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no symbol 'nosuch'")));
  EXPECT_THAT(ParseRange("tail:helper", &t), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty range")));
  EXPECT_THAT(ParseRange("0x10:zz+q", &t), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad offset")));
  EXPECT_THAT(ParseRange("_start", nullptr), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--symbols")));
  EXPECT_EQ(*ParseRange("0x10:0x20", nullptr), (R{0x10, 0x20}));
}

TEST_P(SymbolsTest, LoadableBytes) {
  VBTS_ASSERT_OK_AND_ASSIGN(SymbolTable t, SymbolTable::FromElf(MakeElf(GetParam(), kSyms), "t.elf"));
  absl::Span<const uint8_t> b = t.BytesAt(0x100010, 4);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0], 0x10);
  EXPECT_EQ(b[3], 0x13);
  EXPECT_EQ(t.BytesAt(0x1000fe, 15).size(), 2u);  // cut at the segment's end
  EXPECT_TRUE(t.BytesAt(0x100100, 15).empty());
}

INSTANTIATE_TEST_SUITE_P(Elf32And64, SymbolsTest, ::testing::Bool());

TEST(Symbols, RefusesNonElf) {
  std::vector<uint8_t> junk(100, 'x');
  EXPECT_THAT(SymbolTable::FromElf(junk, "j"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("j: not an ELF")));
  EXPECT_THAT(SymbolTable::Load("/nonexistent/x.elf"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("cannot open")));
}

TEST(Symbols, MalformedFilesNeverCrash) {
  // Every truncation and many single-byte changes: parsed or refused with a
  // status, never out-of-bounds (the test runs under the normal build; ASan
  // builds catch any stray read).
  for (bool is64 : {false, true}) {
    const std::vector<uint8_t> good = MakeElf(is64, kSyms);
    for (size_t n = 0; n < good.size(); n++) {
      absl::StatusOr<SymbolTable> t = SymbolTable::FromElf(absl::MakeConstSpan(good).subspan(0, n), "cut");
      if (t.ok()) t->Describe(0x100010);
    }
    std::mt19937 rng(is64 ? 7 : 8);
    for (int i = 0; i < 5000; i++) {
      std::vector<uint8_t> bad = good;
      bad[rng() % bad.size()] = static_cast<uint8_t>(rng());
      absl::StatusOr<SymbolTable> t = SymbolTable::FromElf(bad, "bad");
      if (t.ok()) {
        t->Describe(0x100010);
        t->BytesAt(0x100000, 15);
      }
    }
  }
}

TEST(Symbols, NamesTheBrokenField) {
  std::vector<uint8_t> f = MakeElf(false, kSyms);
  // Point the symbol table (section 2's sh_offset) past the end of the file.
  const uint32_t shoff = f[32] | f[33] << 8 | f[34] << 16 | f[35] << 24;
  Put(f, shoff + 40 * 2 + 16, 0xFFFFFF, 4);
  EXPECT_THAT(SymbolTable::FromElf(f, "x.elf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x.elf: symbol table outside the file")));
}

}  // namespace
}  // namespace vbts::vmm
