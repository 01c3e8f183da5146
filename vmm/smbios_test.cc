// smbios_test.cc: the SMBIOS tables read back as Linux's dmi_scan reads them:
// the entry point's anchors and checksums at a 16-byte boundary in
// 0xF0000-0xFFFFF, then each structure by its length and string set.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "base/testing/status_matchers.h"
#include "pmu/testing/fake_memory.h"
#include "vmm/smbios_tables.h"

namespace vbts::vmm {
namespace {

using ::vbts::testing::FakePhysMemory;

struct Parsed {
  uint8_t type = 0;
  std::vector<uint8_t> formatted;
  std::vector<std::string> strings;
  std::string Str(size_t at) const {
    const uint8_t n = formatted.at(at);
    return n == 0 ? "" : strings.at(n - 1);
  }
};

class SmbiosTest : public ::testing::Test {
 protected:
  uint64_t R(uint64_t gpa, int n) const { return ram_.Le(gpa, n); }
  uint8_t Sum(uint64_t gpa, uint64_t n) const {
    uint8_t s = 0;
    for (uint64_t i = 0; i < n; i++) s = static_cast<uint8_t>(s + ram_.Le(gpa + i, 1));
    return s;
  }
  // Walks the structure table as dmi_decode_table does.
  std::vector<Parsed> Walk(uint64_t at, uint64_t length, int count) const {
    std::vector<Parsed> out;
    const uint64_t end = at + length;
    for (int i = 0; i < count && at + 4 <= end; i++) {
      Parsed p;
      p.type = static_cast<uint8_t>(R(at, 1));
      const uint8_t len = static_cast<uint8_t>(R(at + 1, 1));
      for (uint8_t k = 0; k < len; k++) p.formatted.push_back(static_cast<uint8_t>(R(at + k, 1)));
      uint64_t s = at + len;
      std::string cur;
      while (!(R(s, 1) == 0 && R(s + 1, 1) == 0)) {
        if (R(s, 1) == 0) {
          p.strings.push_back(cur);
          cur.clear();
        } else {
          cur.push_back(static_cast<char>(R(s, 1)));
        }
        s++;
      }
      if (!cur.empty()) p.strings.push_back(cur);
      at = s + 2;
      out.push_back(p);
    }
    EXPECT_EQ(at, end) << "the structures fill the table exactly";
    return out;
  }
  FakePhysMemory ram_{0x200000};
};

TEST_F(SmbiosTest, LinuxFindsTheEntryPointAndEveryStructure) {
  const SmbiosInfo info{"0.1.0", "skylake", "vbts virtual Intel(R) Core(TM) i7-6700", 0x000506E3, 0xBFEBFBFF, true};
  VBTS_ASSERT_OK(WriteSmbiosTables(ram_, info));
  // The 32-bit entry point (SMBIOS 5.2.1) on a 16-byte boundary in the area Linux scans.
  ASSERT_EQ(kSmbiosGpa % 16, 0u);
  ASSERT_GE(kSmbiosGpa, 0xF0000u);
  const uint64_t ep = kSmbiosGpa;
  EXPECT_EQ(R(ep, 4), 0x5F4D535Fu);               // "_SM_"
  EXPECT_EQ(R(ep + 5, 1), 0x1Fu);                 // entry point length
  EXPECT_EQ(Sum(ep, 0x1F), 0);                    // checksum over it all
  EXPECT_EQ(R(ep + 6, 1), 2u);                    // version 2.8
  EXPECT_EQ(R(ep + 7, 1), 8u);
  EXPECT_EQ(R(ep + 0x10, 4), 0x494D445Fu);        // "_DMI"
  EXPECT_EQ(R(ep + 0x14, 1), uint64_t{'_'});
  EXPECT_EQ(Sum(ep + 0x10, 0x0F), 0);             // the intermediate checksum
  EXPECT_EQ(R(ep + 0x1E, 1), 0x28u);              // BCD revision
  const uint64_t table = R(ep + 0x18, 4), length = R(ep + 0x16, 2);
  const int count = static_cast<int>(R(ep + 0x1C, 2));
  EXPECT_EQ(table, kSmbiosGpa + 0x20);
  EXPECT_EQ(count, 4);
  std::vector<Parsed> s = Walk(table, length, count);
  ASSERT_EQ(s.size(), 4u);
  // The largest structure, as the entry point says.
  size_t largest = 0;
  for (const Parsed& p : s) {
    size_t n = p.formatted.size() + (p.strings.empty() ? 2 : 1);  // the set's end: one NUL more (two with none)
    for (const std::string& str : p.strings) n += str.size() + 1;
    largest = std::max(largest, n);
  }
  EXPECT_EQ(R(ep + 8, 2), largest);
  // Type 0: Linux's "BIOS 0.1.0 11/28/2026".
  EXPECT_EQ(s[0].type, 0);
  EXPECT_EQ(s[0].formatted.size(), 0x18u);
  EXPECT_EQ(s[0].Str(0x04), "vbts");
  EXPECT_EQ(s[0].Str(0x05), "0.1.0");
  EXPECT_EQ(s[0].Str(0x08), "11/28/2026");
  EXPECT_EQ(s[0].formatted[0x13], 1u << 4);  // a virtual machine
  EXPECT_EQ(s[0].formatted[0x14], 0u);       // release 0.1: the version's major.minor
  EXPECT_EQ(s[0].formatted[0x15], 1u);
  // Type 1: Linux's "DMI: vbts vbts virtual PC".
  EXPECT_EQ(s[1].type, 1);
  EXPECT_EQ(s[1].Str(0x04), "vbts");
  EXPECT_EQ(s[1].Str(0x05), "vbts virtual PC");
  EXPECT_EQ(s[1].Str(0x06), "0.1.0");
  EXPECT_EQ(s[1].Str(0x07), "");  // no serial number
  EXPECT_EQ(s[1].Str(0x19), "skylake");
  EXPECT_EQ(s[1].formatted[0x18], 6u);
  // Type 4: CPUID.1 as the processor ID, the brand string as its version.
  EXPECT_EQ(s[2].type, 4);
  EXPECT_EQ(s[2].formatted.size(), 0x2Au);
  EXPECT_EQ(s[2].Str(0x07), "GenuineIntel");
  EXPECT_EQ(s[2].Str(0x10), "vbts virtual Intel(R) Core(TM) i7-6700");
  uint64_t id = 0;
  for (int i = 7; i >= 0; i--) id = (id << 8) | s[2].formatted[0x08 + i];
  EXPECT_EQ(id, 0xBFEBFBFF000506E3ull);
  EXPECT_EQ(s[2].formatted[0x18], 0x41u);
  EXPECT_EQ(s[2].formatted[0x26], 1u << 2);  // 64-bit capable
  // Type 127 ends it, with handles 0-3 in order.
  EXPECT_EQ(s[3].type, 127);
  for (int i = 0; i < 4; i++) EXPECT_EQ(s[i].formatted[2] | (s[i].formatted[3] << 8), i);
}

TEST_F(SmbiosTest, NoTablesWhereRamEndsBeforeTheirPage) {
  FakePhysMemory small(kSmbiosGpa + kSmbiosSize - 1);
  VBTS_ASSERT_OK(WriteSmbiosTables(small, SmbiosInfo{"0.1.0", "westmere", "x", 0, 0, false}));
  for (uint64_t i = 0; i < 4; i++) EXPECT_EQ(small.Le(kSmbiosGpa + i, 1), 0u);
}

}  // namespace
}  // namespace vbts::vmm
