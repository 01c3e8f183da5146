// symbol_elf_test.cc: the ELF symbol file of a System.map, read back field by
// field (gABI offsets) and by vbts's own ELF reader.
#include "record/symbol_elf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/status_macros.h"
#include "base/testing/status_matchers.h"

namespace vbts::record {
namespace {

using ::vbts::testing::StatusIs;

uint64_t ReadLe(const std::vector<uint8_t>& b, uint64_t off, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = (v << 8) | b.at(off + i);
  return v;
}

// Three functions: a global at 0x1000 (to 0x1100, where a local starts), the
// local (to 0x1180, where data begins), a global at 0x2000 (the last one: no
// end, size 0).
constexpr char kMap[] =
    "ffffffff81001000 T alpha\n"
    "ffffffff81001100 t beta\n"
    "ffffffff81001180 D data\n"
    "ffffffff81002000 T gamma\n";

TEST(SymbolElfTest, WritesWhatGdbAndVbtsRead) {
  VBTS_ASSERT_OK_AND_ASSIGN(SymbolTable map, SymbolTable::FromSystemMap(kMap, "m"));
  VBTS_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> f, SymbolElf(map));
  // ELF64, little-endian, ET_EXEC, EM_X86_64, no program headers, 5 sections.
  EXPECT_EQ(ReadLe(f, 0, 4), 0x464C457Fu);
  EXPECT_EQ(f[4], 2);
  EXPECT_EQ(f[5], 1);
  EXPECT_EQ(ReadLe(f, 16, 2), 2u);
  EXPECT_EQ(ReadLe(f, 18, 2), 62u);
  EXPECT_EQ(ReadLe(f, 56, 2), 0u);
  EXPECT_EQ(ReadLe(f, 60, 2), 5u);
  const uint64_t shoff = ReadLe(f, 40, 8);
  // .text: NOBITS, ALLOC|EXECINSTR, from alpha to gamma + 1 (gamma has no size).
  const uint64_t text = shoff + 64;
  EXPECT_EQ(ReadLe(f, text + 4, 4), 8u);
  EXPECT_EQ(ReadLe(f, text + 8, 8), 6u);
  EXPECT_EQ(ReadLe(f, text + 16, 8), 0xffffffff81001000u);
  EXPECT_EQ(ReadLe(f, text + 32, 8), 0x1001u);
  // .symtab: the null symbol, the local (beta), then the globals; sh_info 2.
  const uint64_t symtab = shoff + 2 * 64;
  EXPECT_EQ(ReadLe(f, symtab + 4, 4), 2u);
  EXPECT_EQ(ReadLe(f, symtab + 40, 4), 3u);  // sh_link: .strtab
  EXPECT_EQ(ReadLe(f, symtab + 44, 4), 2u);  // sh_info: the first global
  const uint64_t syms = ReadLe(f, symtab + 24, 8);
  EXPECT_EQ(ReadLe(f, symtab + 32, 8), 4 * 24u);
  const uint64_t beta = syms + 24;
  EXPECT_EQ(f[beta + 4], 0x02);  // STB_LOCAL, STT_FUNC
  EXPECT_EQ(ReadLe(f, beta + 6, 2), 1u);
  EXPECT_EQ(ReadLe(f, beta + 8, 8), 0xffffffff81001100u);
  EXPECT_EQ(ReadLe(f, beta + 16, 8), 0x80u);  // to the data symbol
  const uint64_t alpha = syms + 2 * 24;
  EXPECT_EQ(f[alpha + 4], 0x12);  // STB_GLOBAL, STT_FUNC
  EXPECT_EQ(ReadLe(f, alpha + 16, 8), 0x100u);

  VBTS_ASSERT_OK_AND_ASSIGN(SymbolTable back, SymbolTable::FromElf(f, "back"));
  EXPECT_EQ(back.size(), 3u);
  EXPECT_EQ(back.Describe(0xffffffff81001010), "alpha+0x10");
  EXPECT_EQ(back.Describe(0xffffffff81001100), "beta");
  EXPECT_EQ(back.Describe(0xffffffff81001180), "0xffffffff81001180");  // past beta's size
  EXPECT_EQ(back.Describe(0xffffffff81002000), "gamma");
}

TEST(SymbolElfTest, AnEmptyTableIsRefused) {
  EXPECT_THAT(SymbolElf(SymbolTable()), StatusIs(absl::StatusCode::kInvalidArgument, "no symbols to write"));
}

}  // namespace
}  // namespace vbts::record
