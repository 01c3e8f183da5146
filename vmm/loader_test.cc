// loader_test.cc: unit tests for the Multiboot v1 loader (ELF32 and a.out kludge) and ReadImageFile, one per bad-image case.
#include "vmm/loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "pmu/testing/fake_memory.h"
#include "base/testing/status_matchers.h"

namespace vbts::vmm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::vbts::testing::FakePhysMemory;
using ::vbts::testing::StatusIs;

constexpr uint64_t kRamSize = 0x200000;  // 2 MiB
constexpr uint32_t kMbFlags = 0x00000003;

void Put32(std::vector<uint8_t>& v, size_t off, uint32_t x) {
  if (v.size() < off + 4) v.resize(off + 4);
  for (int i = 0; i < 4; ++i) v[off + i] = static_cast<uint8_t>(x >> (8 * i));
}
void Put16(std::vector<uint8_t>& v, size_t off, uint16_t x) {
  if (v.size() < off + 2) v.resize(off + 2);
  v[off] = static_cast<uint8_t>(x);
  v[off + 1] = static_cast<uint8_t>(x >> 8);
}
void PutHeader(std::vector<uint8_t>& v, size_t off, uint32_t flags) {
  Put32(v, off, kMultibootHeaderMagic);
  Put32(v, off + 4, flags);
  Put32(v, off + 8, 0u - kMultibootHeaderMagic - flags);
}
void PutAout(std::vector<uint8_t>& v, size_t off, uint32_t header_addr, uint32_t load_addr,
             uint32_t load_end, uint32_t bss_end, uint32_t entry) {
  Put32(v, off + 12, header_addr);
  Put32(v, off + 16, load_addr);
  Put32(v, off + 20, load_end);
  Put32(v, off + 24, bss_end);
  Put32(v, off + 28, entry);
}

struct Phdr {
  uint32_t type = 1;
  uint32_t offset = 0;
  uint32_t vaddr = 0;
  uint32_t paddr = 0;
  uint32_t filesz = 0;
  uint32_t memsz = 0;
  uint32_t flags = 5;  // R+X
};

// ELF32 i386 ET_EXEC: header at 0, phdrs at 52, Multiboot header at 0x1000,
// file padded to `file_size` with bytes (offset & 0xFF) after 0x100C.
std::vector<uint8_t> MakeElf(uint32_t entry, const std::vector<Phdr>& phdrs,
                             size_t file_size = 0x1100, uint32_t mb_flags = kMbFlags) {
  std::vector<uint8_t> v(file_size, 0);
  for (size_t i = 0x100C; i < file_size; ++i) v[i] = static_cast<uint8_t>(i);
  const uint8_t ident[] = {0x7F, 'E', 'L', 'F', 1, 1, 1};
  std::copy(std::begin(ident), std::end(ident), v.begin());
  Put16(v, 16, 2);   // ET_EXEC
  Put16(v, 18, 3);   // EM_386
  Put32(v, 20, 1);
  Put32(v, 24, entry);
  Put32(v, 28, 52);  // e_phoff
  Put16(v, 40, 52);
  Put16(v, 42, 32);
  Put16(v, 44, static_cast<uint16_t>(phdrs.size()));
  for (size_t i = 0; i < phdrs.size(); ++i) {
    const size_t o = 52 + 32 * i;
    const Phdr& p = phdrs[i];
    Put32(v, o, p.type);
    Put32(v, o + 4, p.offset);
    Put32(v, o + 8, p.vaddr);
    Put32(v, o + 12, p.paddr);
    Put32(v, o + 16, p.filesz);
    Put32(v, o + 20, p.memsz);
    Put32(v, o + 24, p.flags);
  }
  PutHeader(v, 0x1000, mb_flags);
  return v;
}

// The standard good ELF: one segment, file [0x1000, 0x1100) -> 0x100000,
// memsz 0x200 (0x100 bytes of bss), entry just after the Multiboot header.
std::vector<uint8_t> GoodElf() {
  return MakeElf(0x10000C, {Phdr{1, 0x1000, 0x100000, 0x100000, 0x100, 0x200, 5}});
}

// a.out kludge: file header at offset 0x40, text from file offset 0 loaded at
// 0x100000 (header_addr 0x100040), load_end 0x100100, bss_end 0x100180.
std::vector<uint8_t> GoodAout(uint32_t load_end = 0x100100, uint32_t bss_end = 0x100180,
                              size_t file_size = 0x180) {
  std::vector<uint8_t> v(file_size);
  for (size_t i = 0; i < file_size; ++i) v[i] = static_cast<uint8_t>(i);
  PutHeader(v, 0x40, kMbFlags | kMultibootAoutKludge);
  PutAout(v, 0x40, 0x100040, 0x100000, load_end, bss_end, 0x100060);
  return v;
}

class LoaderTest : public ::testing::Test {
 protected:
  LoaderTest() : ram_(kRamSize) { std::fill(ram_.bytes().begin(), ram_.bytes().end(), 0xCC); }
  absl::StatusOr<LoadedImage> Load(const std::vector<uint8_t>& file) {
    return LoadMultibootImage(file, "k.elf", ram_, limits_);
  }
  void ExpectRamUntouched() {
    for (size_t i = 0; i < ram_.bytes().size(); ++i) {
      ASSERT_EQ(ram_.bytes()[i], 0xCC) << "at 0x" << std::hex << i;
    }
  }
  FakePhysMemory ram_;
  LoaderLimits limits_;
};

TEST_F(LoaderTest, LoadsElfSegmentAtPaddrAndZeroesBss) {
  const auto file = GoodElf();
  VBTS_ASSERT_OK_AND_ASSIGN(LoadedImage img, Load(file));
  EXPECT_EQ(img.entry, 0x10000Cu);
  EXPECT_EQ(img.format, ImageFormat::kElf32);
  EXPECT_EQ(img.header_flags, kMbFlags);
  EXPECT_EQ(img.header_offset, 0x1000u);
  EXPECT_THAT(img.ranges, ElementsAre(GpaRange{0x100000, 0x100200, "phdr[0]"}));
  // p_flags 5 = R|X: the 0x100 file-backed bytes are code (bss is not).
  EXPECT_THAT(img.code, ElementsAre(CodeRange{0x100000, 0x100000, 0x100}));
  EXPECT_TRUE(img.warnings.empty());
  for (size_t i = 0; i < 0x100; ++i) ASSERT_EQ(ram_.bytes()[0x100000 + i], file[0x1000 + i]);
  for (size_t i = 0x100; i < 0x200; ++i) ASSERT_EQ(ram_.bytes()[0x100000 + i], 0) << i;
  EXPECT_EQ(ram_.bytes()[0xFFFFF], 0xCC);
  EXPECT_EQ(ram_.bytes()[0x100200], 0xCC);
}

TEST_F(LoaderTest, TranslatesElfEntryFromVaddrToPaddrLikeQemu) {
  const auto file =
      MakeElf(0xC010000C, {Phdr{1, 0x1000, 0xC0100000, 0x100000, 0x100, 0x100, 5}});
  VBTS_ASSERT_OK_AND_ASSIGN(LoadedImage img, Load(file));
  EXPECT_EQ(img.entry, 0x10000Cu);
  // Code at p_paddr 0x100000, linked for p_vaddr 0xC0100000.
  EXPECT_THAT(img.code, ElementsAre(CodeRange{0x100000, 0xC0100000, 0x100}));
}

TEST_F(LoaderTest, EntryNotTranslatedThroughNonExecutableSegment) {
  const auto file =
      MakeElf(0xC010000C, {Phdr{1, 0x1000, 0xC0100000, 0x100000, 0x100, 0x100, 6}});
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: entry point 0xc010000c (e_entry) is not inside any "
                                   "loaded range: [0x100000, 0x100100)"));
}

TEST_F(LoaderTest, SkipsNonLoadAndZeroSizeSegments) {
  const auto file = MakeElf(0x10000C, {Phdr{4, 0x1000, 0, 0, 0x10, 0x10, 4},
                                       Phdr{1, 0x1000, 0x180000, 0x180000, 0, 0, 4},
                                       Phdr{1, 0x1000, 0x100000, 0x100000, 0x80, 0x80, 5},
                                       Phdr{1, 0x1080, 0x101000, 0x101000, 0x80, 0x1000, 6}});
  VBTS_ASSERT_OK_AND_ASSIGN(LoadedImage img, Load(file));
  EXPECT_THAT(img.ranges, ElementsAre(GpaRange{0x100000, 0x100080, "phdr[2]"},
                                      GpaRange{0x101000, 0x102000, "phdr[3]"}));
  // Only phdr[2] has PF_X (flags 5); phdr[3] (flags 6 = R|W) is data.
  EXPECT_THAT(img.code, ElementsAre(CodeRange{0x100000, 0x100000, 0x80}));
  EXPECT_EQ(ram_.bytes()[0x101000], 0x80);
  EXPECT_EQ(ram_.bytes()[0x101080], 0);
  EXPECT_EQ(ram_.bytes()[0x101FFF], 0);
}

TEST_F(LoaderTest, LoadsAoutKludgeWithBss) {
  const auto file = GoodAout();
  VBTS_ASSERT_OK_AND_ASSIGN(LoadedImage img, Load(file));
  EXPECT_EQ(img.format, ImageFormat::kAoutKludge);
  EXPECT_EQ(img.entry, 0x100060u);
  EXPECT_EQ(img.header_offset, 0x40u);
  EXPECT_THAT(img.ranges, ElementsAre(GpaRange{0x100000, 0x100180, "a.out kludge"}));
  // The whole file-backed a.out image counts as code: [load_addr, load_end) = 0x100 bytes.
  EXPECT_THAT(img.code, ElementsAre(CodeRange{0x100000, 0x100000, 0x100}));
  for (size_t i = 0; i < 0x100; ++i) ASSERT_EQ(ram_.bytes()[0x100000 + i], file[i]) << i;
  for (size_t i = 0x100; i < 0x180; ++i) ASSERT_EQ(ram_.bytes()[0x100000 + i], 0) << i;
  EXPECT_EQ(ram_.bytes()[0x100180], 0xCC);
}

TEST_F(LoaderTest, AoutLoadEndZeroLoadsToEndOfFileAndBssEndZeroMeansNoBss) {
  const auto file = GoodAout(0, 0, 0x150);
  VBTS_ASSERT_OK_AND_ASSIGN(LoadedImage img, Load(file));
  EXPECT_THAT(img.ranges, ElementsAre(GpaRange{0x100000, 0x100150, "a.out kludge"}));
  EXPECT_EQ(ram_.bytes()[0x10014F], 0x4F);
  EXPECT_EQ(ram_.bytes()[0x100150], 0xCC);
}

TEST_F(LoaderTest, AoutTextStartsBeforeHeaderOffset) {
  // Header at file offset 0x1000 with header_addr - load_addr = 0x10: the
  // text starts at file offset 0xFF0.
  std::vector<uint8_t> v(0x1100);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i >> 4);
  PutHeader(v, 0x1000, kMultibootAoutKludge);
  PutAout(v, 0x1000, 0x100010, 0x100000, 0x100020, 0, 0x100010);
  VBTS_ASSERT_OK_AND_ASSIGN(LoadedImage img, Load(v));
  EXPECT_THAT(img.ranges, ElementsAre(GpaRange{0x100000, 0x100020, "a.out kludge"}));
  EXPECT_EQ(ram_.bytes()[0x100000], 0xFF);  // file[0xFF0]
  EXPECT_EQ(ram_.bytes()[0x100010], 0x02);  // magic 0x1BADB002, low byte
}

TEST_F(LoaderTest, AddressFieldsPreferredOverElfWhenBit16Set) {
  // A valid ELF whose Multiboot header also sets bit 16: QEMU loads the raw
  // bytes by the address fields and ignores the program headers.
  auto file = MakeElf(0x10000C, {Phdr{1, 0x1000, 0x100000, 0x100000, 0x100, 0x200, 5}}, 0x1100,
                      kMbFlags | kMultibootAoutKludge);
  PutAout(file, 0x1000, 0x150000, 0x150000, 0x150040, 0, 0x150020);
  VBTS_ASSERT_OK_AND_ASSIGN(LoadedImage img, Load(file));
  EXPECT_EQ(img.format, ImageFormat::kAoutKludge);
  EXPECT_EQ(img.entry, 0x150020u);
  EXPECT_THAT(img.ranges, ElementsAre(GpaRange{0x150000, 0x150040, "a.out kludge"}));
  EXPECT_EQ(ram_.bytes()[0x100000], 0xCC);
}

TEST_F(LoaderTest, VideoModeFlagAcceptedWithWarningLikeQemu) {
  const auto file = MakeElf(0x10000C, {Phdr{1, 0x1000, 0x100000, 0x100000, 0x100, 0x100, 5}},
                            0x1100, kMbFlags | kMultibootVideoMode);
  VBTS_ASSERT_OK_AND_ASSIGN(LoadedImage img, Load(file));
  EXPECT_THAT(img.warnings,
              ElementsAre("k.elf: Multiboot header flags 0x00000007 request a video mode (bit "
                          "2); ignored, as QEMU does"));
}

TEST_F(LoaderTest, FindsHeaderAtLastQemuOffset8140) {
  std::vector<uint8_t> v(8140 + 32);
  PutHeader(v, 8140, kMultibootAoutKludge);
  PutAout(v, 8140, 0x100000 + 8140, 0x100000, 0, 0, 0x100000);
  VBTS_EXPECT_OK(Load(v));
}

// --- Rejections (docs/bad-images.md) ---

TEST_F(LoaderTest, RejectsFileWithoutHeader) {
  std::vector<uint8_t> v(0x3000, 0x90);
  EXPECT_THAT(Load(v), StatusIs(absl::StatusCode::kInvalidArgument,
                                "k.elf: no Multiboot v1 header: magic 0x1BADB002 not found at any "
                                "4-byte aligned offset below 0x1fd0 (file is 12288 bytes)"));
  ExpectRamUntouched();
}

TEST_F(LoaderTest, RejectsHeaderBeyondSearchWindow) {
  std::vector<uint8_t> v(8144 + 32);
  PutHeader(v, 8144, kMultibootAoutKludge);
  EXPECT_THAT(Load(v), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("no Multiboot v1 header")));
}

TEST_F(LoaderTest, RejectsUnalignedHeader) {
  std::vector<uint8_t> v(0x100);
  PutHeader(v, 0x22, kMultibootAoutKludge);
  EXPECT_THAT(Load(v), StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("no Multiboot v1 header")));
}

TEST_F(LoaderTest, RejectsBadChecksumShowingSum) {
  auto file = GoodElf();
  Put32(file, 0x1008, 0);
  EXPECT_THAT(Load(file),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "k.elf: Multiboot header at offset 0x1000 has a bad checksum: magic "
                       "0x1BADB002 + flags 0x00000003 + checksum 0x00000000 = 0x1badb005 (mod "
                       "2^32), must be 0"));
  ExpectRamUntouched();
}

TEST_F(LoaderTest, RejectsUnsupportedRequiredFlags) {
  const auto file = MakeElf(0x10000C, {Phdr{1, 0x1000, 0x100000, 0x100000, 0x100, 0x100, 5}},
                            0x1100, 0x0000000B);
  EXPECT_THAT(Load(file),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "k.elf: Multiboot header flags 0x0000000b require unsupported bits 0x0008 "
                       "(a boot loader must refuse unknown bits 0-15; vbts supports bits 0, 1 "
                       "and 2)"));
}

TEST_F(LoaderTest, RejectsAoutFieldsTruncated) {
  std::vector<uint8_t> v(0x50);
  PutHeader(v, 0x40, kMultibootAoutKludge);
  v.resize(0x4C);
  EXPECT_THAT(Load(v), StatusIs(absl::StatusCode::kInvalidArgument,
                                "k.elf: Multiboot header at offset 0x40 sets flag bit 16 (address "
                                "fields) but the file ends at 0x4c, before the address fields end "
                                "at 0x60"));
}

TEST_F(LoaderTest, RejectsAoutHeaderAddrBelowLoadAddr) {
  auto v = GoodAout();
  PutAout(v, 0x40, 0xFFFFF, 0x100000, 0x100100, 0, 0x100060);
  EXPECT_THAT(Load(v), StatusIs(absl::StatusCode::kInvalidArgument,
                                "k.elf: a.out kludge: header_addr 0x000fffff is below load_addr "
                                "0x00100000"));
}

TEST_F(LoaderTest, RejectsAoutHeaderAddrBeyondFileOffset) {
  auto v = GoodAout();
  PutAout(v, 0x40, 0x100080, 0x100000, 0x100100, 0, 0x100060);
  EXPECT_THAT(Load(v), StatusIs(absl::StatusCode::kInvalidArgument,
                                "k.elf: a.out kludge: header_addr 0x00100080 - load_addr "
                                "0x00100000 = 0x80 exceeds the header's file offset 0x40"));
}

TEST_F(LoaderTest, RejectsAoutLoadEndBelowLoadAddr) {
  auto v = GoodAout();
  PutAout(v, 0x40, 0x100040, 0x100000, 0xFFFF0, 0, 0x100060);
  EXPECT_THAT(Load(v), StatusIs(absl::StatusCode::kInvalidArgument,
                                "k.elf: a.out kludge: load_end_addr 0x000ffff0 is below load_addr "
                                "0x00100000"));
}

TEST_F(LoaderTest, RejectsAoutLoadEndPastEndOfFile) {
  auto v = GoodAout();
  PutAout(v, 0x40, 0x100040, 0x100000, 0x100200, 0, 0x100060);
  EXPECT_THAT(Load(v), StatusIs(absl::StatusCode::kInvalidArgument,
                                "k.elf: a.out kludge: load_end_addr 0x00100200 needs file bytes "
                                "[0x0, 0x200) but the file is only 0x180 bytes"));
  ExpectRamUntouched();
}

TEST_F(LoaderTest, RejectsAoutBssEndBelowLoadEnd) {
  auto v = GoodAout();
  PutAout(v, 0x40, 0x100040, 0x100000, 0x100100, 0x1000F0, 0x100060);
  EXPECT_THAT(Load(v), StatusIs(absl::StatusCode::kInvalidArgument,
                                "k.elf: a.out kludge: bss_end_addr 0x001000f0 is below the end of "
                                "the loaded data 0x100100 (load_addr + load size)"));
}

TEST_F(LoaderTest, RejectsAoutNothingToLoad) {
  auto v = GoodAout();
  PutAout(v, 0x40, 0x100040, 0x100000, 0x100000, 0, 0x100000);
  EXPECT_THAT(Load(v), StatusIs(absl::StatusCode::kInvalidArgument,
                                "k.elf: a.out kludge: nothing to load (load_addr 0x00100000, "
                                "load_end_addr 0x00100000, bss_end_addr 0x00000000)"));
}

TEST_F(LoaderTest, RejectsNonElfWithoutAddressFields) {
  std::vector<uint8_t> v(0x100);
  PutHeader(v, 0x10, kMbFlags);
  EXPECT_THAT(Load(v), StatusIs(absl::StatusCode::kInvalidArgument,
                                "k.elf: not an ELF file (e_ident[0..3] is not 7f 45 4c 46) and "
                                "Multiboot header flags 0x00000003 lack bit 16 (address fields), "
                                "so there is nothing to load"));
}

TEST_F(LoaderTest, RejectsElf64) {
  auto file = GoodElf();
  file[4] = 2;
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: e_ident[EI_CLASS] = 2 (ELFCLASS64): ELF64 images are "
                                   "not Multiboot v1; QEMU refuses them too (\"Cannot load x86-64 "
                                   "image, give a 32bit one.\")"));
}

TEST_F(LoaderTest, RejectsUnknownElfClass) {
  auto file = GoodElf();
  file[4] = 3;
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: e_ident[EI_CLASS] = 3, expected 1 (ELFCLASS32)"));
}

TEST_F(LoaderTest, RejectsTruncatedElfHeader) {
  std::vector<uint8_t> v = {0x7F, 'E', 'L', 'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  PutHeader(v, 16, kMbFlags);
  EXPECT_THAT(Load(v), StatusIs(absl::StatusCode::kInvalidArgument,
                                "k.elf: ELF header truncated: file is 28 bytes, an ELF32 header "
                                "needs 52"));
}

TEST_F(LoaderTest, RejectsBigEndianElf) {
  auto file = GoodElf();
  file[5] = 2;
  EXPECT_THAT(Load(file),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "k.elf: e_ident[EI_DATA] = 2, expected 1 (ELFDATA2LSB, little endian)"));
}

TEST_F(LoaderTest, RejectsNonExecutableElfType) {
  auto file = GoodElf();
  Put16(file, 16, 3);
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: e_type = 3, expected 2 (ET_EXEC)"));
}

TEST_F(LoaderTest, RejectsWrongMachine) {
  auto file = GoodElf();
  Put16(file, 18, 62);
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: e_machine = 62 (EM_X86_64), expected 3 (EM_386)"));
  Put16(file, 18, 40);
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: e_machine = 40, expected 3 (EM_386)"));
}

TEST_F(LoaderTest, RejectsElfWithoutProgramHeaders) {
  const auto file = MakeElf(0x10000C, {});
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: e_phnum = 0: no program headers, nothing to load"));
}

TEST_F(LoaderTest, RejectsBadPhentsize) {
  auto file = GoodElf();
  Put16(file, 42, 56);
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: e_phentsize = 56, expected 32 (sizeof(Elf32_Phdr))"));
}

TEST_F(LoaderTest, RejectsProgramHeadersPastEndOfFile) {
  auto file = GoodElf();
  Put32(file, 28, 0x10F0);
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: program headers [0x10f0, 0x1110) (e_phoff + e_phnum * "
                                   "32) extend past the end of the file (0x1100 bytes)"));
}

TEST_F(LoaderTest, RejectsFileszAboveMemsz) {
  const auto file = MakeElf(0x10000C, {Phdr{1, 0x1000, 0x100000, 0x100000, 0x100, 0x80, 5}});
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: phdr[0].p_filesz 0x100 exceeds p_memsz 0x80"));
}

TEST_F(LoaderTest, RejectsSegmentDataPastEndOfFile) {
  const auto file = MakeElf(0x10000C, {Phdr{1, 0x1000, 0x100000, 0x100000, 0x200, 0x200, 5}});
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: phdr[0] file bytes [0x1000, 0x1200) (p_offset + "
                                   "p_filesz) extend past the end of the file (0x1100 bytes)"));
  ExpectRamUntouched();
}

TEST_F(LoaderTest, RejectsElfWithoutLoadableSegments) {
  const auto file = MakeElf(0x10000C, {Phdr{4, 0x1000, 0, 0, 0x10, 0x10, 4},
                                       Phdr{1, 0x1000, 0x100000, 0x100000, 0, 0, 5}});
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: no PT_LOAD program header with p_memsz > 0 among the 2 "
                                   "program headers"));
}

TEST_F(LoaderTest, RejectsSegmentOutsideRam) {
  const auto file = MakeElf(0x1FFF0C, {Phdr{1, 0x1000, 0x1FFF00, 0x1FFF00, 0x100, 0x200, 5}});
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: phdr[0].p_paddr 0x001fff00: load range [0x1fff00, "
                                   "0x200100) is outside of guest RAM [0, 0x200000)"));
  ExpectRamUntouched();
}

TEST_F(LoaderTest, RejectsSegmentWrappingPast4GiB) {
  const auto file =
      MakeElf(0xFFFFF00C, {Phdr{1, 0x1000, 0xFFFFF000, 0xFFFFF000, 0x100, 0x2000, 5}});
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: phdr[0].p_paddr 0xfffff000: load range [0xfffff000, "
                                   "0x100001000) is outside of guest RAM [0, 0x200000)"));
}

TEST_F(LoaderTest, RejectsAoutOutsideRam) {
  auto v = GoodAout();
  PutAout(v, 0x40, 0x1FFF40, 0x1FFF00, 0x200000, 0x200080, 0x1FFF60);
  EXPECT_THAT(Load(v), StatusIs(absl::StatusCode::kInvalidArgument,
                                "k.elf: a.out kludge load_addr 0x001fff00: load range [0x1fff00, "
                                "0x200080) is outside of guest RAM [0, 0x200000)"));
}

TEST_F(LoaderTest, RejectsSegmentOverlappingReservedRange) {
  limits_.reserved.push_back(GpaRange{0x9000, 0xA000, "multiboot info"});
  const auto file = MakeElf(0x800C, {Phdr{1, 0x1000, 0x8000, 0x8000, 0x100, 0x1001, 5}});
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: phdr[0].p_paddr 0x00008000: load range [0x8000, "
                                   "0x9001) overlaps reserved \"multiboot info\" [0x9000, 0xa000)"));
  ExpectRamUntouched();
}

TEST_F(LoaderTest, AcceptsSegmentEndingAtReservedRange) {
  limits_.reserved.push_back(GpaRange{0x9000, 0xA000, "multiboot info"});
  const auto file = MakeElf(0x800C, {Phdr{1, 0x1000, 0x8000, 0x8000, 0x100, 0x1000, 5}});
  VBTS_EXPECT_OK(Load(file));
}

TEST_F(LoaderTest, RejectsOverlappingSegments) {
  const auto file = MakeElf(0x10000C, {Phdr{1, 0x1000, 0x100000, 0x100000, 0x80, 0x1000, 5},
                                       Phdr{1, 0x1080, 0x100800, 0x100800, 0x80, 0x80, 6}});
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: phdr[1].p_paddr 0x00100800: load range [0x100800, "
                                   "0x100880) overlaps phdr[0] load range [0x100000, 0x101000)"));
  ExpectRamUntouched();
}

TEST_F(LoaderTest, RejectsEntryOutsideLoadedRanges) {
  const auto file = MakeElf(0x180000, {Phdr{1, 0x1000, 0x100000, 0x100000, 0x80, 0x80, 5},
                                       Phdr{1, 0x1080, 0x101000, 0x101000, 0x80, 0x100, 6}});
  EXPECT_THAT(Load(file), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "k.elf: entry point 0x00180000 (e_entry) is not inside any "
                                   "loaded range: [0x100000, 0x100080), [0x101000, 0x101100)"));
  ExpectRamUntouched();
}

TEST_F(LoaderTest, RejectsAoutEntryOutsideLoadedRange) {
  auto v = GoodAout();
  PutAout(v, 0x40, 0x100040, 0x100000, 0x100100, 0x100180, 0x100180);
  EXPECT_THAT(Load(v), StatusIs(absl::StatusCode::kInvalidArgument,
                                "k.elf: entry point 0x00100180 (entry_addr) is not inside any "
                                "loaded range: [0x100000, 0x100180)"));
}

// --- ReadImageFile ---

class ReadImageFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vbts_loader_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const auto& f : created_) unlink(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string MakeFile(const std::string& name, const std::string& content, off_t size = -1) {
    const std::string path = dir_ + "/" + name;
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
    if (size >= 0) {
      EXPECT_EQ(ftruncate(fd, size), 0);
    }
    close(fd);
    created_.push_back(path);
    return path;
  }
  std::string dir_;
  std::vector<std::string> created_;
};

TEST_F(ReadImageFileTest, ReadsWholeFile) {
  const std::string path = MakeFile("k.bin", std::string("\x01\x02\x03", 3));
  VBTS_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> data, ReadImageFile(path));
  EXPECT_THAT(data, ElementsAre(1, 2, 3));
}

TEST_F(ReadImageFileTest, MissingFileIsNotFound) {
  const std::string path = dir_ + "/missing.elf";
  EXPECT_THAT(ReadImageFile(path),
              StatusIs(absl::StatusCode::kNotFound,
                       path + ": cannot open kernel image: No such file or directory"));
}

TEST_F(ReadImageFileTest, DirectoryRejected) {
  EXPECT_THAT(ReadImageFile(dir_), StatusIs(absl::StatusCode::kInvalidArgument,
                                            dir_ + ": is a directory, not a kernel image file"));
}

TEST_F(ReadImageFileTest, EmptyFileRejected) {
  const std::string path = MakeFile("empty.elf", "");
  EXPECT_THAT(ReadImageFile(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                            path + ": kernel image is empty (0 bytes)"));
}

TEST_F(ReadImageFileTest, FileOver1GiBRejected) {
  const std::string path = MakeFile("huge.elf", "", (off_t{1} << 30) + 1);  // sparse
  EXPECT_THAT(ReadImageFile(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       path + ": kernel image is 1073741825 bytes, larger than the 1 GiB "
                              "(1073741824 bytes) limit"));
}


// --- PVH (LoadKernelImage) ---

void Put64(std::vector<uint8_t>& v, size_t off, uint64_t x) {
  Put32(v, off, static_cast<uint32_t>(x));
  Put32(v, off + 4, static_cast<uint32_t>(x >> 32));
}

// An ELF64 x86-64 ET_EXEC laid out like Linux's vmlinux, in small: a code
// segment linked at 0xffffffff81100000 and loaded at p_paddr 0x100000 (file
// [0x1000, 0x1100), memsz 0x200), a PT_NOTE at file 0x200 holding an
// unrelated note (Xen type 6, "linux") and then XEN_ELFNOTE_PHYS32_ENTRY
// with the 8-byte value `entry`; no Multiboot header.
std::vector<uint8_t> MakePvhElf64(uint64_t entry, uint32_t desc_size = 8) {
  std::vector<uint8_t> v(0x1100, 0);
  for (size_t i = 0x1000; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 7);
  const uint8_t ident[] = {0x7F, 'E', 'L', 'F', 2, 1, 1};
  std::copy(std::begin(ident), std::end(ident), v.begin());
  Put16(v, 16, 2);    // ET_EXEC
  Put16(v, 18, 62);   // EM_X86_64
  Put64(v, 24, 0x1000000);  // e_entry: Linux's is startup_64's physical address, not used by PVH
  Put64(v, 32, 64);   // e_phoff
  Put16(v, 54, 56);   // e_phentsize
  Put16(v, 56, 2);    // e_phnum
  // phdr[0]: PT_LOAD R+X
  Put32(v, 64, 1);
  Put32(v, 68, 5);
  Put64(v, 72, 0x1000);
  Put64(v, 80, 0xffffffff81100000ull);
  Put64(v, 88, 0x100000);
  Put64(v, 96, 0x100);
  Put64(v, 104, 0x200);
  // phdr[1]: PT_NOTE
  size_t n = 0x200;
  auto note = [&](uint32_t type, const char* desc, uint32_t size) {
    Put32(v, n, 4);
    Put32(v, n + 4, size);
    Put32(v, n + 8, type);
    std::memcpy(&v[n + 12], "Xen", 4);
    std::memcpy(&v[n + 16], desc, size);
    n += 16 + ((size + 3) & ~3u);
  };
  note(6, "linux", 6);
  uint8_t value[8];
  for (int i = 0; i < 8; i++) value[i] = static_cast<uint8_t>(entry >> (8 * i));
  note(18, reinterpret_cast<const char*>(value), desc_size);
  Put32(v, 120, 4);
  Put64(v, 128, 0x200);
  Put64(v, 152, n - 0x200);
  Put64(v, 160, n - 0x200);
  return v;
}

TEST_F(LoaderTest, LoadsAnElf64KernelByItsPvhNote) {
  const auto file = MakePvhElf64(0x100040);
  VBTS_ASSERT_OK_AND_ASSIGN(LoadedImage img, LoadKernelImage(file, "vmlinux", ram_, limits_));
  EXPECT_EQ(img.boot, BootProtocol::kPvh);
  EXPECT_EQ(img.format, ImageFormat::kElf64);
  EXPECT_EQ(img.entry, 0x100040u);  // the note's value, not e_entry
  EXPECT_THAT(img.ranges, ElementsAre(GpaRange{0x100000, 0x100200, "phdr[0]"}));
  EXPECT_THAT(img.code, ElementsAre(CodeRange{0x100000, 0xffffffff81100000ull, 0x100}));
  for (size_t i = 0; i < 0x100; ++i) ASSERT_EQ(ram_.bytes()[0x100000 + i], file[0x1000 + i]);
  for (size_t i = 0x100; i < 0x200; ++i) ASSERT_EQ(ram_.bytes()[0x100000 + i], 0) << i;
}

TEST_F(LoaderTest, AMultibootHeaderComesBeforeThePvhNote) {
  // QEMU's order: Multiboot first. A Multiboot ELF32 loads as before.
  VBTS_ASSERT_OK_AND_ASSIGN(LoadedImage img, LoadKernelImage(GoodElf(), "k.elf", ram_, limits_));
  EXPECT_EQ(img.boot, BootProtocol::kMultiboot);
  EXPECT_EQ(img.entry, 0x10000Cu);
}

TEST_F(LoaderTest, RejectsAFileWithNeitherMultibootHeaderNorPvhNote) {
  auto file = MakePvhElf64(0x100040);
  Put32(file, 0x200 + 20 + 8, 17);  // the second note's type: 18 -> 17
  EXPECT_THAT(LoadKernelImage(file, "vmlinux", ram_, limits_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "vmlinux: no Multiboot v1 header: magic 0x1BADB002 not found at any 4-byte aligned offset "
                       "below 0x1fd0 (file is 4352 bytes); nor is it an ELF kernel with a PVH entry note (Xen ELF "
                       "note 18, XEN_ELFNOTE_PHYS32_ENTRY)"));
  ExpectRamUntouched();
}

TEST_F(LoaderTest, NotesEndWithTheirSegment) {
  // The PT_NOTE segment is the file's last 0x16 bytes: one note (Xen, type
  // 6) whose 6-byte value ends the file before its padding. Found by
  // loader_fuzz (2026-11-28): the offset after the padded value passed the
  // segment's end, `end - off` wrapped, and the search read the next note's
  // header 2 bytes beyond the file (the sanitizer build's heap-buffer-overflow;
  // fuzz/corpus/loader/pvh-note-past-the-end). Now the search ends there: no
  // PVH entry.
  auto file = MakePvhElf64(0x100040);
  std::vector<uint8_t> note(file.begin() + 0x200, file.begin() + 0x216);
  file.insert(file.end(), note.begin(), note.end());
  Put64(file, 128, file.size() - 0x16);  // phdr[1].p_offset
  Put64(file, 152, 0x16);                // phdr[1].p_filesz
  std::vector<uint8_t> exact(file);      // (its buffer ends where the file does)
  EXPECT_THAT(LoadKernelImage(exact, "vmlinux", ram_, limits_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nor is it an ELF kernel with a PVH entry note")));
  ExpectRamUntouched();
}

TEST_F(LoaderTest, RejectsPvhEntriesThatCannotBeEntered) {
  EXPECT_THAT(LoadKernelImage(MakePvhElf64(0x100040, 2), "vmlinux", ram_, limits_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "vmlinux: PVH entry note (Xen, type 18) has a 2-byte value, expected 4 or 8"));
  EXPECT_THAT(LoadKernelImage(MakePvhElf64(0x100000100040ull), "vmlinux", ram_, limits_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "vmlinux: PVH entry point 0x100000100040 (Xen note type 18) is above 4 GiB; the entry "
                       "runs in 32-bit mode"));
  EXPECT_THAT(LoadKernelImage(MakePvhElf64(0x300000), "vmlinux", ram_, limits_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "vmlinux: entry point 0x00300000 (PVH entry note) is not inside any loaded range: "
                       "[0x100000, 0x100200)"));
  ExpectRamUntouched();
}

}  // namespace
}  // namespace vbts::vmm
