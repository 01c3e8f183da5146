// symbols_test.cc: symbol tables (record/symbols.h) on synthetic ELF32 and
// ELF64 files built here field by field (gABI layouts), on malformed ones, and
// on System.map texts.
#include "record/symbols.h"

#include <cstdio>
#include <fstream>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/status_macros.h"
#include "base/testing/status_matchers.h"
#include "base/testing/elf_builder.h"

namespace vbts::record {
namespace {

using ::testing::HasSubstr;
using ::vbts::testing::StatusIs;
using ::vbts::testing::kSyms;
using ::vbts::testing::MakeElf;
using ::vbts::testing::Put;

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

// A System.map in small, as `nm -n vmlinux` prints it (Debian ships one
// beside each kernel): text symbols T/t, a weak W, data D/d/B/R in between,
// an absolute A; and two lines as /proc/kallsyms has them (a module's
// "\t[module]" suffix; address 0 where the reader may not see addresses).
constexpr char kSystemMap[] =
    "0000000000000000 A VDSO32_vsyscall\n"
    "ffffffff81000000 T _stext\n"
    "ffffffff81000000 T startup_64\n"
    "ffffffff81000070 t secondary_startup_64\n"
    "ffffffff81001000 T do_one_initcall\n"
    "ffffffff81001200 W arch_cpu_idle\n"
    "ffffffff81001300 R some_rodata\n"
    "ffffffff82000000 D init_task\n"
    "ffffffff83000000 t usb_probe\t[usbcore]\n"
    "0000000000000000 t hidden\t[mod]\n"
    "ffffffff83000100 b a_bss\n";

TEST(Symbols, ReadsASystemMap) {
  VBTS_ASSERT_OK_AND_ASSIGN(SymbolTable t, SymbolTable::FromSystemMap(kSystemMap, "System.map"));
  EXPECT_EQ(t.size(), 6u);  // T/t/W: _stext, startup_64, secondary_startup_64, do_one_initcall, arch_cpu_idle, usb_probe
  // Two names at one address: the shorter of the global functions ("Better").
  EXPECT_EQ(t.Describe(0xffffffff81000000), "_stext");
  EXPECT_EQ(t.Describe(0xffffffff81000010), "_stext+0x10");
  EXPECT_EQ(t.Describe(0xffffffff810000a0), "secondary_startup_64+0x30");
  EXPECT_EQ(t.Describe(0xffffffff810012ff), "arch_cpu_idle+0xff");
  // Past the last code symbol before data: the data symbol bounds it.
  EXPECT_EQ(t.Describe(0xffffffff81001300), "0xffffffff81001300");
  EXPECT_EQ(t.Describe(0xffffffff83000004), "usb_probe+0x4");
  EXPECT_EQ(t.Describe(0xffffffff83000100), "0xffffffff83000100");
  // --range=do_one_initcall: to the next symbol of any kind.
  VBTS_ASSERT_OK_AND_ASSIGN(trace::AddressRange r, ParseRange("do_one_initcall", &t));
  EXPECT_EQ(r.start, 0xffffffff81001000u);
  EXPECT_EQ(r.end, 0xffffffff81001200u);
}

TEST(Symbols, RefusesTextThatIsNotASystemMap) {
  EXPECT_THAT(SymbolTable::FromSystemMap("ffffffff81000000 T ok\nhello world\n", "m"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "m: line 2 is not `ADDRESS TYPE NAME`: neither an ELF file nor a System.map or /proc/kallsyms "
                       "text"));
  EXPECT_THAT(SymbolTable::FromSystemMap("0000000000000000 T a\n0000000000000000 t b\n", "kallsyms"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "kallsyms: every address is 0 (/proc/kallsyms read without CAP_SYSLOG?)"));
  EXPECT_THAT(SymbolTable::FromSystemMap("ffffffff82000000 D init_task\n", "m"),
              StatusIs(absl::StatusCode::kInvalidArgument, "m: no code symbols (types T, t, W, w)"));
  EXPECT_THAT(SymbolTable::FromSystemMap("ffffffff82000000 T \n", "m"),
              StatusIs(absl::StatusCode::kInvalidArgument, "m: line 1 has no symbol name"));
  // Every truncation of a good map: parsed or refused, never a crash.
  const std::string good = kSystemMap;
  for (size_t n = 0; n <= good.size(); n++) (void)SymbolTable::FromSystemMap(good.substr(0, n), "cut");
}

TEST(Symbols, SeveralFilesAsOneTable) {
  // A guest kernel's System.map and a program's ELF file (kSyms at 0x100000).
  const std::string dir = ::testing::TempDir();
  const std::string map = dir + "/vbts-symbols-test.map", elf = dir + "/vbts-symbols-test.elf";
  {
    std::ofstream(map) << kSystemMap;
    const std::vector<uint8_t> bytes = MakeElf(true, kSyms);
    std::ofstream(elf, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
  }
  VBTS_ASSERT_OK_AND_ASSIGN(SymbolTable t, SymbolTable::LoadAll({map, elf}));
  EXPECT_EQ(t.size(), 12u);  // 6 code symbols of the map, 6 of the ELF file
  EXPECT_EQ(t.Describe(0xffffffff810000a0), "secondary_startup_64+0x30");
  EXPECT_EQ(t.Describe(0x100045), "helper+0x5");
  EXPECT_FALSE(t.BytesAt(0x100040, 4).empty());  // the ELF file's segment is kept
  EXPECT_THAT(SymbolTable::LoadAll({map, dir + "/vbts-no-such-file"}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("vbts-no-such-file: cannot open")));
  std::remove(map.c_str());
  std::remove(elf.c_str());
}

}  // namespace
}  // namespace vbts::record
