#include "vmm/firmware_mtrrs.h"

#include <gtest/gtest.h>

#include <map>

namespace vbts::vmm {
namespace {

std::map<uint32_t, uint64_t> AsMap(const std::vector<vcpu::MsrValue>& v) {
  std::map<uint32_t, uint64_t> m;
  for (const vcpu::MsrValue& x : v) m[x.index] = x.value;
  return m;
}

TEST(FirmwareMtrrsTest, SeaBiosLayoutForA39BitModel) {
  // SDM vol. 3A 11.11.2-11.11.3: MTRRdefType E (11) and FE (10), default
  // type WB (6) = 0xC06; each fixed-range MSR holds 8 type bytes; the
  // variable range [3 GiB, 4 GiB) is base 0xC0000000 type UC (0) and mask
  // ~(1 GiB - 1) within 39 address bits = 0x7FC0000000, with V (11).
  const std::vector<vcpu::MsrValue> v = FirmwareMtrrs(39);
  const std::map<uint32_t, uint64_t> m = AsMap(v);
  EXPECT_EQ(v.back().index, 0x2FFu);  // enabled last, once the ranges are set
  EXPECT_EQ(m.at(0x2FF), 0xC06u);
  EXPECT_EQ(m.at(0x250), 0x0606060606060606u);
  EXPECT_EQ(m.at(0x258), 0x0606060606060606u);
  EXPECT_EQ(m.at(0x259), 0u);
  for (uint32_t i = 0x268; i <= 0x26F; i++) EXPECT_EQ(m.at(i), 0x0606060606060606u) << i;
  EXPECT_EQ(m.at(0x200), 0xC0000000u);
  EXPECT_EQ(m.at(0x201), 0x7FC0000800u);
  EXPECT_EQ(v.size(), 14u);
}

TEST(FirmwareMtrrsTest, MaskFollowsThePhysicalAddressWidth) {
  // 36 bits (core-duo, pentium4): 0xFC0000000 | V; 46 bits (icelake-server).
  EXPECT_EQ(AsMap(FirmwareMtrrs(36)).at(0x201), 0xFC0000800u);
  EXPECT_EQ(AsMap(FirmwareMtrrs(46)).at(0x201), 0x3FFFC0000800u);
}

}  // namespace
}  // namespace vbts::vmm
