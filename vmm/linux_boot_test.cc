// linux_boot_test.cc: the bzImage setup header as vbts reads it, and boot_params, the command
// line and the initrd as it writes them (offsets: Linux's Documentation/arch/x86/boot.rst and
// arch/x86/include/uapi/asm/bootparam.h).
#include "vmm/linux_boot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "base/status_macros.h"
#include "base/testing/status_matchers.h"
#include "pmu/testing/fake_memory.h"
#include "vmm/loader.h"

namespace vbts::vmm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;
using ::vbts::testing::FakePhysMemory;
using ::vbts::testing::StatusIs;

void PutField(std::vector<uint8_t>& v, size_t off, uint64_t x, int n) {
  for (int i = 0; i < n; i++) v[off + i] = static_cast<uint8_t>(x >> (8 * i));
}

// A bzImage in small, with the fields of Debian 12's 6.1 kernel where they
// matter: 2 setup sectors (boot sector + 2 = 0x600 bytes), protocol 2.15,
// header up to 0x26C, LOADED_HIGH, initrd_addr_max 0x7FFFFFFF, relocatable
// with 2 MiB alignment, cmdline_size 2047, pref_address 16 MiB, init_size
// `init_size`; then 0x200 bytes of protected-mode kernel (i * 5).
std::vector<uint8_t> MakeBzImage(uint32_t init_size = 0x400000) {
  std::vector<uint8_t> v(0x800, 0);
  v[0x1F1] = 2;
  PutField(v, 0x1FE, 0xAA55, 2);
  v[0x200] = 0xEB;
  v[0x201] = 0x6A;  // header end 0x26C
  PutField(v, 0x202, kLinuxHeaderMagic, 4);
  PutField(v, 0x206, 0x020F, 2);
  v[0x211] = 0x01;
  PutField(v, 0x214, 0x100000, 4);
  PutField(v, 0x22C, 0x7FFFFFFF, 4);
  PutField(v, 0x230, 0x200000, 4);
  v[0x234] = 1;
  PutField(v, 0x238, 2047, 4);
  PutField(v, 0x258, 0x1000000, 8);
  PutField(v, 0x260, init_size, 4);
  PutField(v, 0x268, 0x1234, 4);  // kernel_info_offset: copied like the rest of the header
  for (size_t i = 0x600; i < v.size(); i++) v[i] = static_cast<uint8_t>(i * 5);
  return v;
}

TEST(LinuxBootTest, ReadsTheSetupHeader) {
  VBTS_ASSERT_OK_AND_ASSIGN(std::optional<LinuxSetupHeader> h, ParseLinuxSetupHeader(MakeBzImage(), "vmlinuz"));
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->version, 0x020Fu);
  EXPECT_EQ(h->setup_size, 0x600u);
  EXPECT_EQ(h->header_end, 0x26Cu);
  EXPECT_EQ(h->initrd_addr_max, 0x7FFFFFFFu);
  EXPECT_EQ(h->cmdline_size, 2047u);
  // 1 MiB aligned up to 2 MiB, but not below pref_address (16 MiB): where
  // head_64.S decompresses.
  EXPECT_EQ(h->RunStart(), 0x1000000u);
}

TEST(LinuxBootTest, RunStartOfAKernelThatRunsWhereItIsLoaded) {
  LinuxSetupHeader h;
  h.kernel_alignment = 0x200000;
  h.pref_address = 0x100000;
  EXPECT_EQ(h.RunStart(), 0x100000u);  // not relocatable: the load address
  h.relocatable = true;
  EXPECT_EQ(h.RunStart(), 0x200000u);  // aligned up
}

TEST(LinuxBootTest, AFileWithoutTheHeaderIsNotALinuxKernel) {
  auto not_linux = [](const std::vector<uint8_t>& v) {
    absl::StatusOr<std::optional<LinuxSetupHeader>> h = ParseLinuxSetupHeader(v, "k");
    return h.ok() && !h->has_value();
  };
  std::vector<uint8_t> v = MakeBzImage();
  v[0x202] = 'h';
  EXPECT_TRUE(not_linux(v));
  v = MakeBzImage();
  PutField(v, 0x1FE, 0, 2);  // no boot_flag
  EXPECT_TRUE(not_linux(v));
  EXPECT_TRUE(not_linux(std::vector<uint8_t>(0x100, 0)));
  EXPECT_TRUE(not_linux(MakeBzImage()) == false);
}

TEST(LinuxBootTest, RejectsKernelsItCannotBoot) {
  std::vector<uint8_t> v = MakeBzImage();
  PutField(v, 0x206, 0x0209, 2);
  EXPECT_THAT(ParseLinuxSetupHeader(v, "old"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "old: Linux boot protocol 2.09 is older than 2.10 (Linux 2.6.31), the first with init_size, "
                       "which vbts needs"));
  v = MakeBzImage();
  v[0x211] = 0;
  EXPECT_THAT(ParseLinuxSetupHeader(v, "z"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "z: a zImage (loadflags 0x00: LOADED_HIGH clear, loaded at 0x10000): vbts boots bzImages only"));
  v = MakeBzImage();
  v[0x201] = 0x50;  // header ends at 0x252
  EXPECT_THAT(ParseLinuxSetupHeader(v, "short"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "short: Linux setup header: it ends at 0x252 (0x202 + the byte at 0x201), before protocol "
                       "2.10's fields end (0x264)"));
  v = MakeBzImage();
  v[0x1F1] = 3;  // 4 sectors = 0x800 bytes: the whole file
  EXPECT_THAT(ParseLinuxSetupHeader(v, "k"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "k: Linux setup header: 3 setup sectors + the boot sector (0x800 bytes) leave no "
                       "protected-mode kernel in the file's 0x800 bytes"));
  v = MakeBzImage();
  PutField(v, 0x230, 0x300000, 4);
  EXPECT_THAT(ParseLinuxSetupHeader(v, "k"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "k: Linux setup header: kernel_alignment 0x300000 is not a power of two"));
  v = MakeBzImage();
  v.resize(0x260);  // the header ends beyond the file
  EXPECT_THAT(ParseLinuxSetupHeader(v, "k"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "k: Linux setup header: it ends at 0x26c (0x202 + the byte at 0x201), beyond the file's 0x260 "
                       "bytes"));
}

TEST(LinuxBootTest, WritesBootParamsTheCommandLineAndTheInitrd) {
  const std::vector<uint8_t> file = MakeBzImage();
  VBTS_ASSERT_OK_AND_ASSIGN(std::optional<LinuxSetupHeader> h, ParseLinuxSetupHeader(file, "vmlinuz"));
  FakePhysMemory ram(0x2000000);  // 32 MiB: the run area [16 MiB, 20 MiB) fits
  const std::vector<LoadedModule> initrd = {{"initrd.cpio", std::vector<uint8_t>(0x1801, 7)}};
  VBTS_ASSERT_OK_AND_ASSIGN(LinuxBootInfo info,
                            WriteLinuxBootParams(ram, file, *h, "console=ttyS0 panic=-1", 0x9000, initrd, 0xF0000));
  EXPECT_EQ(info.boot_params_gpa, 0x9000u);
  // Top of RAM, page-aligned: (0x2000000 - 0x1801) & ~0xFFF.
  EXPECT_THAT(info.initrd, Optional(GpaRange{0x1FFE000, 0x1FFF801, "initrd"}));
  EXPECT_THAT(info.reserved, ElementsAre(GpaRange{0x9000, 0xA000, "boot_params"},
                                         GpaRange{0xA000, 0xB000, "Linux command line"},
                                         GpaRange{0x1FFE000, 0x1FFF801, "initrd"}));
  // The setup header as the file has it, then the boot loader's fields.
  for (uint64_t off = 0x1F1; off < 0x26C; off++) {
    if (off == 0x210 || (off >= 0x218 && off < 0x220) || (off >= 0x228 && off < 0x22C)) continue;
    ASSERT_EQ(ram.Le(0x9000 + off, 1), file[off]) << std::hex << off;
  }
  EXPECT_EQ(ram.Le(0x9000 + 0x26C, 1), 0u);           // nothing beyond the header
  EXPECT_EQ(ram.Le(0x9000 + 0x210, 1), 0xFFu);        // type_of_loader: undefined
  EXPECT_EQ(ram.Le(0x9000 + 0x214, 4), 0x100000u);    // code32_start
  EXPECT_EQ(ram.Le(0x9000 + 0x218, 4), 0x1FFE000u);   // ramdisk_image
  EXPECT_EQ(ram.Le(0x9000 + 0x21C, 4), 0x1801u);      // ramdisk_size
  EXPECT_EQ(ram.Le(0x9000 + 0x228, 4), 0xA000u);      // cmd_line_ptr
  EXPECT_EQ(ram.Le(0x9000 + 0x070, 8), 0xF0000u);     // acpi_rsdp_addr
  EXPECT_EQ(ram.CString(0xA000), "console=ttyS0 panic=-1");
  // E820 (20-byte entries): usable, reserved, usable.
  EXPECT_EQ(ram.Le(0x9000 + 0x1E8, 1), 3u);
  const uint64_t want[3][3] = {{0, 0xA0000, 1}, {0xA0000, 0x60000, 2}, {0x100000, 0x1F00000, 1}};
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(ram.Le(0x9000 + 0x2D0 + 20 * i, 8), want[i][0]) << i;
    EXPECT_EQ(ram.Le(0x9000 + 0x2D0 + 20 * i + 8, 8), want[i][1]) << i;
    EXPECT_EQ(ram.Le(0x9000 + 0x2D0 + 20 * i + 16, 4), want[i][2]) << i;
  }
  EXPECT_EQ(ram.Le(0x1FFE000, 1), 7u);
  EXPECT_EQ(ram.Le(0x1FFF800, 1), 7u);
}

TEST(LinuxBootTest, AnOlderProtocolGetsNoRsdpAddress) {
  std::vector<uint8_t> file = MakeBzImage();
  PutField(file, 0x206, 0x020D, 2);  // 2.13: acpi_rsdp_addr came with 2.14
  VBTS_ASSERT_OK_AND_ASSIGN(std::optional<LinuxSetupHeader> h, ParseLinuxSetupHeader(file, "k"));
  FakePhysMemory ram(0x2000000);
  VBTS_ASSERT_OK(WriteLinuxBootParams(ram, file, *h, "", 0x9000, {}, 0xF0000).status());
  EXPECT_EQ(ram.Le(0x9000 + 0x070, 8), 0u);
  EXPECT_EQ(ram.Le(0x9000 + 0x218, 8), 0u);  // no initrd
}

TEST(LinuxBootTest, RefusesWhatTheKernelCannotTake) {
  const std::vector<uint8_t> file = MakeBzImage();
  VBTS_ASSERT_OK_AND_ASSIGN(std::optional<LinuxSetupHeader> h, ParseLinuxSetupHeader(file, "k"));
  FakePhysMemory small(0x1200000);  // 18 MiB: the run area needs 20
  EXPECT_THAT(WriteLinuxBootParams(small, file, *h, "", 0x9000, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Linux boot: the kernel runs in [0x1000000, 0x1400000) (init_size 0x400000 from 0x1000000) "
                       "and guest RAM ends at 0x1200000: give it --mem of at least 20 MiB"));
  FakePhysMemory ram(0x2000000);
  // A pref_address that would wrap RunStart + init_size past 2^64.
  LinuxSetupHeader wraps = *h;
  wraps.pref_address = ~uint64_t{0} - 0x1000;
  EXPECT_THAT(WriteLinuxBootParams(ram, file, wraps, "", 0x9000, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("and guest RAM ends at 0x2000000")));
  EXPECT_THAT(WriteLinuxBootParams(ram, file, *h, std::string(2048, 'x'), 0x9000, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Linux boot: the --append text is 2048 bytes; this kernel takes at most 2047 (cmdline_size)"));
  EXPECT_THAT(WriteLinuxBootParams(ram, file, *h, "", 0x9000, {{"b.cpio", {2}}, {"a.cpio x=1", {1}}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "Linux boot: an initrd takes no arguments (--initrd=\"a.cpio x=1\")"));
  // 12 MiB of initrd end RAM at 32 MiB exactly from the run area's end (20
  // MiB); one byte more starts a page lower, inside it.
  EXPECT_THAT(WriteLinuxBootParams(ram, file, *h, "", 0x9000, {{"big", std::vector<uint8_t>(0xC00001, 1)}}),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "Linux boot: the initrd (0xc00001 bytes) does not fit between the kernel's run area (to "
                       "0x1400000) and 0x2000000 (RAM, initrd_addr_max, 4 GiB)"));
  for (uint64_t a = 0; a < ram.size(); a += 0x1000) ASSERT_EQ(ram.Le(a, 8), 0u) << "written at " << std::hex << a;
  VBTS_ASSERT_OK_AND_ASSIGN(LinuxBootInfo exact, WriteLinuxBootParams(ram, file, *h, "", 0x9000,
                                                                      {{"big", std::vector<uint8_t>(0xC00000, 1)}}));
  EXPECT_THAT(exact.initrd, Optional(GpaRange{0x1400000, 0x2000000, "initrd"}));
}

TEST(LinuxBootTest, SeveralFilesMakeOneInitrdOnFourByteBoundaries) {
  // 5 + 3 + 4 bytes: the second file from offset 8, the third from 12
  // (zeros in between), 16 bytes in all at (0x2000000 - 16) & ~0xFFF.
  const std::vector<uint8_t> file = MakeBzImage();
  VBTS_ASSERT_OK_AND_ASSIGN(std::optional<LinuxSetupHeader> h, ParseLinuxSetupHeader(file, "k"));
  FakePhysMemory ram(0x2000000);
  const std::vector<LoadedModule> files = {
      {"a.cpio", {1, 1, 1, 1, 1}}, {"b.cpio", {2, 2, 2}}, {"c.cpio", {3, 3, 3, 3}}};
  VBTS_ASSERT_OK_AND_ASSIGN(LinuxBootInfo info, WriteLinuxBootParams(ram, file, *h, "", 0x9000, files));
  EXPECT_THAT(info.initrd, Optional(GpaRange{0x1FFF000, 0x1FFF010, "initrd"}));
  EXPECT_EQ(ram.Le(0x9000 + 0x21C, 4), 16u);
  const uint8_t want[16] = {1, 1, 1, 1, 1, 0, 0, 0, 2, 2, 2, 0, 3, 3, 3, 3};
  for (int i = 0; i < 16; i++) EXPECT_EQ(ram.Le(0x1FFF000 + i, 1), want[i]) << i;
}

TEST(LinuxBootTest, TheLoaderPutsTheProtectedModeKernelAtOneMiB) {
  const std::vector<uint8_t> file = MakeBzImage();
  FakePhysMemory ram(0x2000000);
  VBTS_ASSERT_OK_AND_ASSIGN(LoadedImage img, LoadKernelImage(file, "vmlinuz", ram, LoaderLimits{}));
  EXPECT_EQ(img.boot, BootProtocol::kLinux);
  EXPECT_EQ(img.format, ImageFormat::kBzImage);
  EXPECT_EQ(img.entry, 0x100000u);
  EXPECT_THAT(img.ranges, ElementsAre(GpaRange{0x100000, 0x100200, "protected-mode kernel"}));
  EXPECT_TRUE(img.code.empty());  // compressed
  ASSERT_TRUE(img.linux_header.has_value());
  EXPECT_EQ(img.linux_header->setup_size, 0x600u);
  for (uint64_t i = 0; i < 0x200; i++) ASSERT_EQ(ram.Le(0x100000 + i, 1), file[0x600 + i]) << i;
  EXPECT_EQ(ram.Le(0xFFFF8, 8), 0u);  // the setup part stays in the file
}

}  // namespace
}  // namespace vbts::vmm
