#include "vcpu/control_regs.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace vbts::vcpu {
namespace {

constexpr uint64_t Bit(int n) { return uint64_t{1} << n; }

// A Westmere-like CPU: leaf 1 EDX VME DE PSE TSC PAE MCE PGE FXSR SSE, ECX
// PCID clear, XSAVE clear, no VMX; leaf 7 absent (max leaf 0xB, zeros).
CpuidResult Westmere(uint32_t leaf, uint32_t) {
  if (leaf == 0) return {0xB, 0, 0, 0};
  if (leaf == 1)
    return {0x206C2, 0, 0x0298A217 & ~(Bit(5) | Bit(17) | Bit(26)),
            static_cast<uint32_t>(Bit(1) | Bit(2) | Bit(3) | Bit(4) | Bit(6) | Bit(7) | Bit(13) | Bit(24) | Bit(25))};
  return {};
}
// ... and one with PCID, XSAVE, FSGSBASE, SMEP, SMAP, LA57.
CpuidResult Newer(uint32_t leaf, uint32_t sub) {
  CpuidResult r = Westmere(leaf, sub);
  if (leaf == 1) r.ecx |= Bit(17) | Bit(26);
  if (leaf == 7 && sub == 0) r = {0, static_cast<uint32_t>(Bit(0) | Bit(7) | Bit(20)), static_cast<uint32_t>(Bit(16)), 0};
  return r;
}

TEST(ControlRegsTest, Cr4ValidBitsFollowCpuid) {
  // VME, PVI, TSD, DE, PSE, PAE, MCE, PGE, PCE, OSFXSR, OSXMMEXCPT.
  EXPECT_EQ(Cr4ValidBits(Westmere), 0x7FFull);
  // + LA57 (12), FSGSBASE (16), PCIDE (17), OSXSAVE (18), SMEP (20), SMAP (21).
  EXPECT_EQ(Cr4ValidBits(Newer), 0x7FFull | Bit(12) | Bit(16) | Bit(17) | Bit(18) | Bit(20) | Bit(21));
}

TEST(ControlRegsTest, Cr4WritesThatFault) {
  const uint64_t v = Cr4ValidBits(Westmere);
  ControlState pm32;  // protected mode, paging off
  EXPECT_FALSE(Cr4WriteFaults(Bit(5) | Bit(9), v, pm32));
  EXPECT_TRUE(Cr4WriteFaults(0xFFFFFFFF, v, pm32));  // kvm-unit-tests idt_test's #GP
  EXPECT_TRUE(Cr4WriteFaults(Bit(18), v, pm32));      // OSXSAVE without XSAVE
  EXPECT_TRUE(Cr4WriteFaults(Bit(15), v, pm32));      // reserved
  ControlState lm;
  lm.cr0 = Bit(0) | Bit(31);
  lm.cr4 = Bit(5);
  lm.efer = Bit(8) | Bit(10);
  lm.cs64 = true;
  const uint64_t n = Cr4ValidBits(Newer);
  EXPECT_TRUE(Cr4WriteFaults(0, n, lm));                   // clearing PAE in IA-32e mode
  EXPECT_TRUE(Cr4WriteFaults(Bit(5) | Bit(12), n, lm));    // LA57 changed in IA-32e mode
  EXPECT_FALSE(Cr4WriteFaults(Bit(5) | Bit(17), n, lm));   // PCIDE with CR3[11:0] = 0
  lm.cr3 = 0x1001;
  EXPECT_TRUE(Cr4WriteFaults(Bit(5) | Bit(17), n, lm));    // ... not with PCID bits in CR3
  lm.cr4 |= Bit(17);
  EXPECT_FALSE(Cr4WriteFaults(Bit(5) | Bit(17), n, lm));   // already set: no change
  pm32.cr4 = 0;
  EXPECT_TRUE(Cr4WriteFaults(Bit(17), n, pm32));           // PCIDE outside IA-32e mode
  EXPECT_FALSE(Cr4WriteFaults(Bit(12), n, pm32));          // LA57 outside IA-32e mode
}

TEST(ControlRegsTest, Cr0WritesThatFault) {
  ControlState s;
  EXPECT_FALSE(Cr0WriteFaults(Bit(0) | Bit(31), s));
  EXPECT_TRUE(Cr0WriteFaults(Bit(31), s));                 // PG without PE
  EXPECT_TRUE(Cr0WriteFaults(Bit(0) | Bit(29), s));        // NW without CD
  EXPECT_FALSE(Cr0WriteFaults(Bit(0) | Bit(29) | Bit(30), s));
  EXPECT_TRUE(Cr0WriteFaults(Bit(32) | Bit(0), s));        // bits 63:32
  s.efer = Bit(8);                                         // LME, PAE clear
  EXPECT_TRUE(Cr0WriteFaults(Bit(0) | Bit(31), s));
  s.cr4 = Bit(5);
  EXPECT_FALSE(Cr0WriteFaults(Bit(0) | Bit(31), s));
  s.cr0 = Bit(0) | Bit(31);
  s.cs64 = true;
  EXPECT_TRUE(Cr0WriteFaults(Bit(0), s));                  // PG cleared in 64-bit mode
  s.cs64 = false;
  EXPECT_FALSE(Cr0WriteFaults(Bit(0), s));                 // ... allowed in compatibility mode
}

TEST(ControlRegsTest, Cr8ReservedBits) {
  EXPECT_FALSE(Cr8WriteFaults(0xF));
  EXPECT_TRUE(Cr8WriteFaults(0x10));
}

}  // namespace
}  // namespace vbts::vcpu
