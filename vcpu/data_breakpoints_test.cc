// data_breakpoints_test.cc: data accesses of decoded instructions and the
// DR7 matching rules (SDM vol. 3B 17.2.4-17.2.5), with hand-computed
// addresses.
#include "vcpu/data_breakpoints.h"

#include <gtest/gtest.h>

#include "vcpu/descriptors.h"

namespace vbts::vcpu {
namespace {

CpuState Pm32() {
  CpuState st;
  st.cr0 = 0x11;
  st.cs = FlatSegment(0x08, 0xB, 0, true, false);
  st.ds = st.es = st.ss = st.fs = st.gs = FlatSegment(0x10, 0x3, 0, true, false);
  st.rip = 0x1000;
  st.gpr[kRsp] = 0x7000;
  st.gpr[kRbx] = 0x2000;
  st.gpr[kRsi] = 0x3000;
  st.gpr[kRdi] = 0x4000;
  return st;
}

CpuState Lm64() {
  CpuState st = Pm32();
  st.cr0 = 0x80000011;
  st.cr4 = 0x20;
  st.efer = 0x500;
  st.cs = FlatSegment(0x28, 0xB, 0, false, true);
  st.ds.base = 0x5000;  // ignored in 64-bit mode
  st.fs.base = 0x10000;
  st.gpr[kRsp] = 0xFFFFFFFF80007000ull;
  return st;
}

std::vector<DataAccess> Of(std::vector<uint8_t> bytes, const CpuState& st) {
  absl::StatusOr<DecodedInsn> d = DecodeBytes(bytes, DecodeModeOf(st));
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? DataAccessesOf(*d, st) : std::vector<DataAccess>{};
}

TEST(DataAccessesTest, ExplicitStackAndStringOperands32) {
  const CpuState st = Pm32();
  // mov [ebx+8], eax: write dword at 0x2008.
  auto a = Of({0x89, 0x43, 0x08}, st);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].linear, 0x2008u);
  EXPECT_EQ(a[0].size, 4u);
  EXPECT_TRUE(a[0].write);
  EXPECT_FALSE(a[0].read);
  // push eax: write at ESP-4 = 0x6FFC.
  a = Of({0x50}, st);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].linear, 0x6FFCu);
  EXPECT_TRUE(a[0].write);
  // call rel32: the return address at 0x6FFC.
  a = Of({0xE8, 0, 0, 0, 0}, st);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].linear, 0x6FFCu);
  // ret / pop eax: read at ESP = 0x7000.
  a = Of({0xC3}, st);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].linear, 0x7000u);
  EXPECT_TRUE(a[0].read);
  // push dword [ebx]: reads 0x2000, writes 0x6FFC.
  a = Of({0xFF, 0x33}, st);
  ASSERT_EQ(a.size(), 2u);
  // movsb: reads [esi] = 0x3000, writes [edi] = 0x4000, one byte each.
  a = Of({0xA4}, st);
  ASSERT_EQ(a.size(), 2u);
  bool saw_read = false, saw_write = false;
  for (const DataAccess& x : a) {
    EXPECT_EQ(x.size, 1u);
    if (x.read) saw_read = x.linear == 0x3000;
    if (x.write) saw_write = x.linear == 0x4000;
  }
  EXPECT_TRUE(saw_read && saw_write);
  // lea eax, [ebx+8]: no access.
  EXPECT_TRUE(Of({0x8D, 0x43, 0x08}, st).empty());
}

TEST(DataAccessesTest, SixtyFourBitIgnoresDsBaseButNotFs) {
  const CpuState st = Lm64();
  // mov [rbx], al: 0x2000 (DS base ignored).
  auto a = Of({0x88, 0x03}, st);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].linear, 0x2000u);
  // mov eax, fs:[rbx]: 0x10000 + 0x2000.
  a = Of({0x64, 0x8B, 0x03}, st);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].linear, 0x12000u);
  EXPECT_TRUE(a[0].read);
  // push rax: 8 bytes at RSP-8 in the high half.
  a = Of({0x50}, st);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].linear, 0xFFFFFFFF80006FF8ull);
  EXPECT_EQ(a[0].size, 8u);
  // mov [rip+0x10], eax at 0x1000, length 6: 0x1016.
  a = Of({0x89, 0x05, 0x10, 0, 0, 0}, st);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].linear, 0x1016u);
}

TEST(DataBreakpointHitsTest, Dr7RulesLengthsAndAlignment) {
  GuestBreakpoints bp;
  bp.dr = {0x2000, 0x2006, 0x3001, 0x4000};
  // DR0: L0, RW=01 (write), LEN=11 (4). DR1: G1, RW=11, LEN=01 (2). DR2: L2, RW=11, LEN=00 (1).
  // DR3: L3, RW=00 (execute): never a data hit.
  bp.dr7 = 0x1 | (0x1u << 16) | (0x3u << 18) | (0x2 << 2) | (0x3u << 20) | (0x1u << 22) | (0x1 << 4) |
           (0x3u << 24) | (0x1 << 6);
  EXPECT_TRUE(bp.AnyData());
  // Write of 1 byte at 0x2003: DR0 [0x2000,0x2004) hit.
  EXPECT_EQ(DataBreakpointHits(bp, {{0x2003, 1, false, true}}), 0x1u);
  // Read there: DR0 is write-only, no hit.
  EXPECT_EQ(DataBreakpointHits(bp, {{0x2003, 1, true, false}}), 0x0u);
  // Dword read at 0x2004: DR1 [0x2006,0x2008) overlaps [0x2004,0x2008).
  EXPECT_EQ(DataBreakpointHits(bp, {{0x2004, 4, true, false}}), 0x2u);
  // Byte write at 0x3001: DR2 exact.
  EXPECT_EQ(DataBreakpointHits(bp, {{0x3001, 1, false, true}}), 0x4u);
  EXPECT_EQ(DataBreakpointHits(bp, {{0x3002, 1, false, true}}), 0x0u);
  // Execute breakpoint DR3 never matches data; a qword write over 0x1FFC..0x2003 hits DR0 only.
  EXPECT_EQ(DataBreakpointHits(bp, {{0x4000, 4, false, true}}), 0x0u);
  EXPECT_EQ(DataBreakpointHits(bp, {{0x1FFC, 8, false, true}}), 0x1u);
  // LEN=10 (8 bytes) aligns DR0 down: 0x2005 → [0x2000, 0x2008).
  GuestBreakpoints q;
  q.dr = {0x2005, 0, 0, 0};
  q.dr7 = 0x1 | (0x3u << 16) | (0x2u << 18);
  EXPECT_EQ(DataBreakpointHits(q, {{0x2000, 1, true, false}}), 0x1u);
  EXPECT_EQ(DataBreakpointHits(q, {{0x2008, 1, true, false}}), 0x0u);
  // Not enabled (L0=G0=0): nothing.
  q.dr7 &= ~3ull;
  EXPECT_FALSE(q.AnyData());
  EXPECT_EQ(DataBreakpointHits(q, {{0x2000, 1, true, false}}), 0x0u);
}


TEST(DataBreakpointHitsTest, AnyDataIsTheDr7RuleForEveryEnableAndRwCombination) {
  // AnyData computes the rule with bit operations: a breakpoint i counts when
  // L_i or G_i (DR7 bits 2i, 2i+1) is set and its R/W field (bits 16+4i,
  // 17+4i) is 01 or 11 (SDM vol. 3B 17.2.4).  Every combination of the 8
  // enable bits and the four R/W fields, against the rule written out; the
  // LEN fields and GD/LE/GE bits set, which must not matter.
  for (uint32_t enables = 0; enables < 256; enables++) {
    for (uint32_t rws = 0; rws < 256; rws++) {
      GuestBreakpoints bp;
      bp.dr7 = enables | (0x3ull << 8) | (1ull << 13);
      bool expect = false;
      for (int i = 0; i < 4; i++) {
        const uint64_t rw = (rws >> (2 * i)) & 3;
        bp.dr7 |= (rw << (16 + 4 * i)) | (0x3ull << (18 + 4 * i));
        if (((enables >> (2 * i)) & 3) && (rw == 1 || rw == 3)) expect = true;
      }
      ASSERT_EQ(bp.AnyData(), expect) << std::hex << bp.dr7;
    }
  }
}

}  // namespace
}  // namespace vbts::vcpu
