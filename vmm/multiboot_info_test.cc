// multiboot_info_test.cc: unit tests reading back every Multiboot v1 info field at its spec 0.6.96 §3.3 offset.
#include "vmm/multiboot_info.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "pmu/testing/fake_memory.h"
#include "base/testing/status_matchers.h"

namespace vbts::vmm {
namespace {

using ::testing::ElementsAre;
using ::vbts::testing::FakePhysMemory;
using ::vbts::testing::StatusIs;

uint32_t R32(FakePhysMemory& m, uint64_t gpa) { return static_cast<uint32_t>(m.Le(gpa, 4)); }
uint64_t R64(FakePhysMemory& m, uint64_t gpa) { return m.Le(gpa, 8); }

// RAM whose size() is large but which only stores the first MiB.
class BigRam : public PhysMemory {
 public:
  explicit BigRam(uint64_t size) : size_(size), low_(0x100000) {}
  uint64_t size() const override { return size_; }
  absl::Status Read(Gpa gpa, absl::Span<uint8_t> out) const override { return low_.Read(gpa, out); }
  absl::Status Write(Gpa gpa, absl::Span<const uint8_t> data) override {
    return low_.Write(gpa, data);
  }
  uint64_t size_;
  FakePhysMemory low_;
};

TEST(MultibootInfoTest, PageIs0x9000UnlessTheImageCoversIt) {
  EXPECT_EQ(MultibootInfoPage({GpaRange{0x100000, 0x180000, "text"}}), 0x9000u);
  EXPECT_EQ(MultibootInfoPage({GpaRange{0x8000, 0x9000, "text"}}), 0x9000u);  // ends where the page starts
  // kvm-unit-tests realmode.flat: [0x8000, 0xA86C) and [0xB000, 0xDA30).
  EXPECT_EQ(MultibootInfoPage({GpaRange{0x8000, 0xA86C, "text"}, GpaRange{0xB000, 0xDA30, "data"}}), 0xE000u);
  EXPECT_EQ(MultibootInfoPage({GpaRange{0x9FFF, 0xA000, "x"}}), 0xA000u);
}

TEST(MultibootInfoTest, RelocatedPageMovesEveryPointer) {
  FakePhysMemory ram(64 << 20);
  VBTS_ASSERT_OK_AND_ASSIGN(MultibootInfo mi, WriteMultibootInfo(ram, "k", "a", 0xE000));
  EXPECT_EQ(mi.info_gpa, 0xE000u);
  EXPECT_THAT(mi.reserved, ElementsAre(GpaRange{0xE000, 0xF000, "multiboot info"}));
  EXPECT_EQ(R32(ram, 0x9000), 0u);          // nothing at the usual place
  EXPECT_EQ(R32(ram, 0xE000), 0x245u);      // flags
  EXPECT_EQ(R32(ram, 0xE000 + 16), 0xE200u);  // cmdline
  EXPECT_EQ(R32(ram, 0xE000 + 48), 0xE080u);  // mmap_addr
  EXPECT_EQ(R32(ram, 0xE000 + 64), 0xE100u);  // boot_loader_name
  EXPECT_EQ(R32(ram, 0xE200), 0x0061206bu);   // the command line "k a" and its NUL (little-endian)
  // A page that would end beyond RAM is refused, nothing written.
  FakePhysMemory small(1 << 20);
  EXPECT_THAT(WriteMultibootInfo(small, "k", "", (1 << 20) - 0x800),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("no room")));
}

TEST(MultibootInfoTest, EveryFieldAtSpecOffset) {
  FakePhysMemory ram(64 << 20);
  std::fill(ram.bytes().begin(), ram.bytes().end(), 0xCC);
  VBTS_ASSERT_OK_AND_ASSIGN(MultibootInfo mi,
                            WriteMultibootInfo(ram, "guest-tests/hello.elf", "verbose=1 x"));
  EXPECT_EQ(mi.info_gpa, 0x9000u);
  EXPECT_THAT(mi.reserved, ElementsAre(GpaRange{0x9000, 0xA000, "multiboot info"}));
  const uint64_t b = 0x9000;
  EXPECT_EQ(R32(ram, b + 0), 0x00000245u);   // flags: MEM|CMDLINE|MMAP|BOOT_LOADER_NAME
  EXPECT_EQ(R32(ram, b + 4), 640u);          // mem_lower
  EXPECT_EQ(R32(ram, b + 8), 64512u);        // mem_upper = (64 MiB - 1 MiB) / 1 KiB
  EXPECT_EQ(R32(ram, b + 12), 0u);           // boot_device (flag 1 clear)
  EXPECT_EQ(R32(ram, b + 16), 0x9200u);      // cmdline
  EXPECT_EQ(R32(ram, b + 20), 0u);           // mods_count
  EXPECT_EQ(R32(ram, b + 24), 0u);           // mods_addr
  for (uint64_t off = 28; off < 44; off += 4) EXPECT_EQ(R32(ram, b + off), 0u) << off;  // syms
  EXPECT_EQ(R32(ram, b + 44), 72u);          // mmap_length: 3 entries x 24
  EXPECT_EQ(R32(ram, b + 48), 0x9080u);      // mmap_addr
  EXPECT_EQ(R32(ram, b + 52), 0u);           // drives_length
  EXPECT_EQ(R32(ram, b + 56), 0u);           // drives_addr
  EXPECT_EQ(R32(ram, b + 60), 0u);           // config_table
  EXPECT_EQ(R32(ram, b + 64), 0x9100u);      // boot_loader_name
  EXPECT_EQ(R32(ram, b + 68), 0u);           // apm_table
  for (uint64_t off = 72; off < 0x80; off += 4) EXPECT_EQ(R32(ram, b + off), 0u) << off;  // vbe

  // Memory map entries: size, base_addr, length, type.
  EXPECT_EQ(R32(ram, 0x9080), 20u);
  EXPECT_EQ(R64(ram, 0x9084), 0x0u);
  EXPECT_EQ(R64(ram, 0x908C), 0xA0000u);
  EXPECT_EQ(R32(ram, 0x9094), 1u);
  EXPECT_EQ(R32(ram, 0x9098), 20u);
  EXPECT_EQ(R64(ram, 0x909C), 0xA0000u);
  EXPECT_EQ(R64(ram, 0x90A4), 0x60000u);
  EXPECT_EQ(R32(ram, 0x90AC), 2u);
  EXPECT_EQ(R32(ram, 0x90B0), 20u);
  EXPECT_EQ(R64(ram, 0x90B4), 0x100000u);
  EXPECT_EQ(R64(ram, 0x90BC), 0x3F00000u);
  EXPECT_EQ(R32(ram, 0x90C4), 1u);
  EXPECT_EQ(R32(ram, 0x90C8), 0u);           // zero after the map

  EXPECT_EQ(ram.CString(0x9100), "vbts " VBTS_VERSION);
  EXPECT_EQ(ram.CString(0x9200), "guest-tests/hello.elf verbose=1 x");
  // Nothing outside the page was touched.
  EXPECT_EQ(ram.bytes()[0x8FFF], 0xCC);
  EXPECT_EQ(ram.bytes()[0xA000], 0xCC);
}

TEST(MultibootInfoTest, BootLoaderNameIsVbtsVersion) {
  FakePhysMemory ram(1 << 20);
  VBTS_ASSERT_OK(WriteMultibootInfo(ram, "k", ""));
  EXPECT_EQ(ram.CString(0x9100), "vbts 0.1.0");
}

TEST(MultibootInfoTest, EmptyAppendKeepsQemuTrailingSpace) {
  FakePhysMemory ram(2 << 20);
  VBTS_ASSERT_OK(WriteMultibootInfo(ram, "/tmp/k.elf", ""));
  EXPECT_EQ(ram.CString(0x9200), "/tmp/k.elf ");
}

TEST(MultibootInfoTest, OneMibRamHasNoUpperMemory) {
  FakePhysMemory ram(1 << 20);
  VBTS_ASSERT_OK(WriteMultibootInfo(ram, "k", ""));
  EXPECT_EQ(R32(ram, 0x9008), 0u);           // mem_upper
  EXPECT_EQ(R32(ram, 0x902C), 48u);          // two map entries
  EXPECT_EQ(R32(ram, 0x90B0), 0u);
}

TEST(MultibootInfoTest, MemUpperCountsOnlyBelow4GiB) {
  BigRam ram(uint64_t{6} << 30);
  VBTS_ASSERT_OK(WriteMultibootInfo(ram, "k", ""));
  EXPECT_EQ(R32(ram.low_, 0x9008), 4193280u);  // (4 GiB - 1 MiB) / 1 KiB
  EXPECT_EQ(R64(ram.low_, 0x90BC), (uint64_t{6} << 30) - 0x100000);
}

TEST(MultibootInfoTest, AcceptsLongestCommandLine) {
  FakePhysMemory ram(1 << 20);
  const std::string append(kMultibootCmdlineMax - 3, 'a');  // "k " + append + NUL = 0xE00
  VBTS_ASSERT_OK(WriteMultibootInfo(ram, "k", append));
  EXPECT_EQ(ram.CString(0x9200).size(), 0xDFFu);
  EXPECT_EQ(ram.bytes()[0x9FFF], 0);
}

TEST(MultibootInfoTest, RejectsTooLongCommandLine) {
  FakePhysMemory ram(1 << 20);
  const std::string append(kMultibootCmdlineMax - 2, 'a');
  EXPECT_THAT(WriteMultibootInfo(ram, "k", append),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "multiboot info: command line \"<kernel file name> <--append text>\" is "
                       "3584 bytes, limit 3583 (room at [0x9200, 0xa000) for it and its NUL)"));
  EXPECT_EQ(R32(ram, 0x9000), 0u);  // nothing written
}

TEST(MultibootInfoTest, RejectsRamBelow1MiB) {
  FakePhysMemory ram(0xFFFFF);
  EXPECT_THAT(WriteMultibootInfo(ram, "k", ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "multiboot info: guest RAM size 0xfffff is below the 0x100000 (1 MiB) "
                       "minimum"));
}

TEST(MultibootInfoTest, RejectsNulInAppend) {
  FakePhysMemory ram(1 << 20);
  EXPECT_THAT(WriteMultibootInfo(ram, "k", std::string_view("a\0b", 3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "multiboot info: --append text contains a NUL byte at offset 1; the "
                       "command line is a C string"));
}

// --- Modules (--initrd) ---

TEST(MultibootModulesTest, ParseInitrdAsQemu) {
  VBTS_ASSERT_OK_AND_ASSIGN(std::vector<ModuleSpec> m, ParseInitrd("env.txt NR_CPUS=1,b,,c x,d"));
  EXPECT_THAT(m, ElementsAre(ModuleSpec{"env.txt", "env.txt NR_CPUS=1"}, ModuleSpec{"b,c", "b,c x"},
                             ModuleSpec{"d", "d"}));
  EXPECT_TRUE(ParseInitrd("a,,").ok());
  EXPECT_THAT(ParseInitrd("a,"), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("module 2")));
  EXPECT_THAT(ParseInitrd(" x"), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("no file name")));
}

TEST(MultibootModulesTest, LayoutAfterKernelPageAligned) {
  FakePhysMemory ram(8 << 20);
  VBTS_ASSERT_OK_AND_ASSIGN(MultibootInfo mi, WriteMultibootInfo(ram, "k", ""));
  const std::vector<LoadedModule> mods = {{"env NR_CPUS=1", {'N', 'R', '\n'}}, {"second", std::vector<uint8_t>(0x1001, 7)}};
  // Kernel ends at 0x123456: table at 0x124000 (2 x 16 bytes), strings after
  // it ("env NR_CPUS=1\0" at 0x124020, "second\0" at 0x12402E); modules at
  // the next page boundaries: 0x125000 (3 bytes), 0x126000 (0x1001 bytes).
  VBTS_ASSERT_OK_AND_ASSIGN(ModuleLayout l, WriteMultibootModules(ram, mi.info_gpa, 0x123456, mods));
  EXPECT_EQ(l.table_gpa, 0x124000u);
  EXPECT_EQ(R32(ram, mi.info_gpa) & kMultibootInfoMods, kMultibootInfoMods);
  EXPECT_EQ(R32(ram, mi.info_gpa + 20), 2u);        // mods_count
  EXPECT_EQ(R32(ram, mi.info_gpa + 24), 0x124000u);  // mods_addr
  EXPECT_EQ(R32(ram, 0x124000), 0x125000u);
  EXPECT_EQ(R32(ram, 0x124004), 0x125003u);  // mod_end is exclusive
  EXPECT_EQ(ram.CString(R32(ram, 0x124008)), "env NR_CPUS=1");
  EXPECT_EQ(R32(ram, 0x12400C), 0u);
  EXPECT_EQ(R32(ram, 0x124010), 0x126000u);
  EXPECT_EQ(R32(ram, 0x124014), 0x127001u);
  EXPECT_EQ(ram.CString(R32(ram, 0x124018)), "second");
  EXPECT_EQ(R32(ram, 0x124018), 0x12402Eu);
  EXPECT_EQ(ram.bytes()[0x125000], 'N');
  EXPECT_EQ(ram.bytes()[0x127000], 7);
}

TEST(MultibootModulesTest, NoModulesWritesNothing) {
  FakePhysMemory ram(8 << 20);
  VBTS_ASSERT_OK_AND_ASSIGN(MultibootInfo mi, WriteMultibootInfo(ram, "k", ""));
  VBTS_ASSERT_OK_AND_ASSIGN(ModuleLayout l, WriteMultibootModules(ram, mi.info_gpa, 0x200000, {}));
  EXPECT_TRUE(l.modules.empty());
  EXPECT_EQ(R32(ram, mi.info_gpa) & kMultibootInfoMods, 0u);
}

TEST(MultibootModulesTest, ModuleBeyondRamIsAClearError) {
  FakePhysMemory ram(2 << 20);
  VBTS_ASSERT_OK_AND_ASSIGN(MultibootInfo mi, WriteMultibootInfo(ram, "k", ""));
  EXPECT_THAT(WriteMultibootModules(ram, mi.info_gpa, 0x180000, {{"big", std::vector<uint8_t>(0x80000)}}),
              StatusIs(absl::StatusCode::kResourceExhausted, ::testing::HasSubstr("does not fit in guest RAM")));
  EXPECT_EQ(R32(ram, mi.info_gpa + 20), 0u);  // nothing patched
}

}  // namespace
}  // namespace vbts::vmm
