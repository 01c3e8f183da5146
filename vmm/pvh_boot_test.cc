// pvh_boot_test.cc: reads back hvm_start_info (version 1), its memory map, module list and command lines.
#include "vmm/pvh_boot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "base/status_macros.h"
#include "base/testing/status_matchers.h"
#include "pmu/testing/fake_memory.h"

namespace vbts::vmm {
namespace {

using ::testing::ElementsAre;
using ::vbts::testing::FakePhysMemory;
using ::vbts::testing::StatusIs;


TEST(PvhBootTest, StartInfoAsXensStartInfoHDescribesIt) {
  FakePhysMemory ram(0x400000);  // 4 MiB
  std::vector<LoadedModule> modules = {{"initrd.cpio", {1, 2, 3}}, {"second x=1", std::vector<uint8_t>(0x1001, 9)}};
  // The kernel ends at 0x212345: the modules start at the next page, each page-aligned.
  VBTS_ASSERT_OK_AND_ASSIGN(PvhBootInfo info,
                            WritePvhStartInfo(ram, "console=ttyS0 panic=-1", 0x9000, 0x212345, modules));
  EXPECT_EQ(info.start_info_gpa, 0x9000u);
  EXPECT_THAT(info.modules, ElementsAre(GpaRange{0x213000, 0x213003, "module initrd.cpio"},
                                        GpaRange{0x214000, 0x215001, "module second x=1"}));
  // hvm_start_info (public/arch-x86/hvm/start_info.h).
  EXPECT_EQ(ram.Le(0x9000, 4), 0x336ec578u);  // magic
  EXPECT_EQ(ram.Le(0x9004, 4), 1u);           // version
  EXPECT_EQ(ram.Le(0x9008, 4), 0u);           // flags
  EXPECT_EQ(ram.Le(0x900c, 4), 2u);           // nr_modules
  EXPECT_EQ(ram.Le(0x9010, 8), 0x9100u);      // modlist_paddr
  EXPECT_EQ(ram.Le(0x9018, 8), 0x9800u);      // cmdline_paddr
  EXPECT_EQ(ram.Le(0x9020, 8), 0u);           // rsdp_paddr: none
  EXPECT_EQ(ram.Le(0x9028, 8), 0x9040u);      // memmap_paddr
  EXPECT_EQ(ram.Le(0x9030, 4), 3u);           // memmap_entries
  EXPECT_EQ(ram.CString(0x9800), "console=ttyS0 panic=-1");  // -append as given, as QEMU passes it
  // Memory map: addr, size, type (E820), reserved.
  const uint64_t map[3][3] = {{0, 0xA0000, 1}, {0xA0000, 0x60000, 2}, {0x100000, 0x300000, 1}};
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(ram.Le(0x9040 + 24 * i, 8), map[i][0]) << i;
    EXPECT_EQ(ram.Le(0x9048 + 24 * i, 8), map[i][1]) << i;
    EXPECT_EQ(ram.Le(0x9050 + 24 * i, 4), map[i][2]) << i;
  }
  // Module list: paddr, size, cmdline_paddr; the strings after the list (2 x 32 bytes).
  EXPECT_EQ(ram.Le(0x9100, 8), 0x213000u);
  EXPECT_EQ(ram.Le(0x9108, 8), 3u);
  EXPECT_EQ(ram.Le(0x9110, 8), 0x9140u);
  EXPECT_EQ(ram.Le(0x9120, 8), 0x214000u);
  EXPECT_EQ(ram.Le(0x9128, 8), 0x1001u);
  EXPECT_EQ(ram.Le(0x9130, 8), 0x9140u + 12);  // after "initrd.cpio\0"
  EXPECT_EQ(ram.CString(0x9140), "initrd.cpio");
  EXPECT_EQ(ram.CString(0x914c), "second x=1");
  EXPECT_EQ(ram.bytes()[0x213000], 1);
  EXPECT_EQ(ram.bytes()[0x215000], 9);
}

TEST(PvhBootTest, NoModulesMeansNoList) {
  FakePhysMemory ram(0x200000);
  VBTS_ASSERT_OK_AND_ASSIGN(PvhBootInfo info, WritePvhStartInfo(ram, "", 0x9000, 0x180000, {}));
  EXPECT_TRUE(info.modules.empty());
  EXPECT_EQ(ram.Le(0x900c, 4), 0u);
  EXPECT_EQ(ram.Le(0x9010, 8), 0u);
  EXPECT_EQ(ram.CString(0x9800), "");
}

TEST(PvhBootTest, RefusesWhatDoesNotFitAndWritesNothing) {
  FakePhysMemory ram(0x200000);
  EXPECT_THAT(WritePvhStartInfo(ram, std::string(2048, 'a'), 0x9000, 0x180000, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "PVH start info: the --append text is 2048 bytes, limit 2047"));
  EXPECT_THAT(WritePvhStartInfo(ram, "x", 0x9000, 0x180000, {{"big", std::vector<uint8_t>(0x80001)}}),
              StatusIs(absl::StatusCode::kResourceExhausted, ::testing::HasSubstr("does not fit in guest RAM")));
  EXPECT_THAT(WritePvhStartInfo(ram, std::string("a\0b", 3), 0x9000, 0x180000, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "PVH start info: the --append text contains a NUL byte at offset 1; the command line is a C "
                       "string"));
  for (uint8_t b : ram.bytes()) ASSERT_EQ(b, 0);
}

}  // namespace
}  // namespace vbts::vmm
