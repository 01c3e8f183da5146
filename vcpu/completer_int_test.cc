// completer_int_test.cc: INT n / INT3 / INTO / INT1 completion in pm32, lm64
// and real mode, same and outer privilege, and every gate/segment/stack fault.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "vcpu/completer.h"
#include "vcpu/completer_test_util.h"

namespace vbts::vcpu::testing {
namespace {

using ::testing::HasSubstr;
using ::vbts::testing::StatusIs;

constexpr std::initializer_list<uint8_t> kInt30 = {0xcd, 0x30};

class IntTest : public CompleterTest {};

TEST_F(IntTest, Pm32SamePrivilegeInterruptGate) {
  CpuState st = Pm32(0);
  Gate32(0x30, MakeGate(kIntGate32, kCode32K, 0x5000, 0));
  Completion c = Run(st, kInt30);
  ASSERT_TRUE(c.retired()) << c.ToString();
  // Frame on the current stack (SDM 6.12.1 figure 6-4, no privilege change):
  // EFLAGS @8ffc, CS @8ff8, EIP of the next instruction (0x100+2) @8ff4.
  EXPECT_EQ(Read32(0x8ffc), 0x202u);
  EXPECT_EQ(Read32(0x8ff8), kCode32K);
  EXPECT_EQ(Read32(0x8ff4), 0x102u);
  EXPECT_EQ(st.gpr[kRsp], 0x8ff4u);
  EXPECT_EQ(st.rip, 0x5000u);
  EXPECT_EQ(st.cs.selector, kCode32K);
  EXPECT_EQ(st.rflags, 0x2u);  // interrupt gate clears IF
  EXPECT_EQ(st.ss.selector, kData32K);
  EXPECT_TRUE(Accessed(1));  // CS descriptor accessed bit set in the GDT
  EXPECT_EQ(c.transfer.kind, TransferKind::kInt);
  EXPECT_EQ(c.transfer.vector, 0x30);
  EXPECT_EQ(c.transfer.from, 0x100u);
  EXPECT_EQ(c.transfer.to, 0x5000u);
  EXPECT_EQ(c.transfer.old_cpl, 0);
  EXPECT_EQ(c.transfer.new_cpl, 0);
}

TEST_F(IntTest, Pm32OuterPrivilegeTrapGateSwitchesToTssStack) {
  CpuState st = Pm32(3);
  Gate32(0x80, MakeGate(kTrapGate32, kCode32K, 0x6000, 3));
  Completion c = Run(st, {0xcd, 0x80});
  ASSERT_TRUE(c.retired()) << c.ToString();
  // New stack = TSS SS0:ESP0 = 0x10:0x9000.  Frame (figure 6-4, with
  // privilege change): SS @8ffc, ESP @8ff8, EFLAGS @8ff4, CS @8ff0, EIP @8fec.
  EXPECT_EQ(Read32(0x8ffc), kData32U);
  EXPECT_EQ(Read32(0x8ff8), kUserStack);
  EXPECT_EQ(Read32(0x8ff4), 0x202u);
  EXPECT_EQ(Read32(0x8ff0), kCode32U);
  EXPECT_EQ(Read32(0x8fec), 0x102u);
  EXPECT_EQ(st.gpr[kRsp], 0x8fecu);
  EXPECT_EQ(st.ss, SegmentFromDescriptor(MakeData32(0), kData32K));
  EXPECT_EQ(st.cs, SegmentFromDescriptor(MakeCode32(0), kCode32K));
  EXPECT_EQ(st.rip, 0x6000u);
  EXPECT_EQ(st.rflags, 0x202u);  // trap gate keeps IF
  EXPECT_EQ(st.cpl(), 0);
  EXPECT_EQ(st.ds.selector, kData32U);  // data segments untouched
  EXPECT_TRUE(Accessed(2));       // SS0 descriptor marked accessed
  EXPECT_EQ(c.transfer.old_cpl, 3);
  EXPECT_EQ(c.transfer.new_cpl, 0);
}

TEST_F(IntTest, Pm32ConformingTargetStaysAtCpl3) {
  CpuState st = Pm32(3);
  Gate32(0x31, MakeGate(kIntGate32, kConfK, 0x7000, 3));
  Completion c = Run(st, {0xcd, 0x31});
  ASSERT_TRUE(c.retired());
  // Same privilege: frame on the user stack 0x7000: EFLAGS, CS, EIP.
  EXPECT_EQ(Read32(0x6ffc), 0x202u);
  EXPECT_EQ(Read32(0x6ff8), kCode32U);
  EXPECT_EQ(Read32(0x6ff4), 0x102u);
  EXPECT_EQ(st.cs.selector, kConfK | 3);  // RPL ← CPL
  EXPECT_EQ(st.cpl(), 3);
  EXPECT_EQ(st.ss.selector, kData32U);
}

TEST_F(IntTest, Int3AndIntoAndInt1) {
  CpuState st = Pm32(3);
  Gate32(3, MakeGate(kTrapGate32, kCode32K, 0x3000, 3));
  Completion c = Run(st, {0xcc});
  ASSERT_TRUE(c.retired());
  EXPECT_EQ(c.transfer.vector, 3);
  EXPECT_EQ(Read32(0x8fec), 0x101u);  // INT3 is one byte

  // INTO with OF=0 does nothing but advance EIP.
  st = Pm32(3);
  Completion n = Run(st, {0xce});
  ASSERT_TRUE(n.retired());
  EXPECT_EQ(n.transfer.kind, TransferKind::kNone);
  EXPECT_EQ(st.rip, 0x101u);
  // INTO with OF=1 raises vector 4 through its gate.
  st = Pm32(3);
  st.rflags |= kRflagsOf;
  Gate32(4, MakeGate(kTrapGate32, kCode32K, 0x4000, 3));
  Completion o = Run(st, {0xce});
  ASSERT_TRUE(o.retired());
  EXPECT_EQ(o.transfer.vector, 4);
  EXPECT_EQ(st.rip, 0x4000u);

  // INT1 ignores the gate DPL (not a software interrupt for DPL purposes).
  st = Pm32(3);
  Gate32(1, MakeGate(kIntGate32, kCode32K, 0x1000, 0));
  Completion i1 = Run(st, {0xf1});
  ASSERT_TRUE(i1.retired());
  EXPECT_EQ(i1.transfer.vector, 1);
  EXPECT_EQ(st.rip, 0x1000u);
}

TEST_F(IntTest, Pm32GateFaults) {
  // Gate DPL 0 < CPL 3: #GP(0x30*8+2 = 0x182), EXT=0.
  Gate32(0x30, MakeGate(kIntGate32, kCode32K, 0x5000, 0));
  ExpectFault(Pm32(3), kInt30, kVecGp, 0x182);
  // INT3 likewise: #GP(3*8+2 = 0x1a).
  Gate32(3, MakeGate(kIntGate32, kCode32K, 0x5000, 0));
  ExpectFault(Pm32(3), {0xcc}, kVecGp, 0x1a);
  // IDT limit 0x186 < 0x30*8+7: #GP(0x182).
  CpuState st = Pm32(0);
  st.idtr.limit = 0x30 * 8 + 6;
  ExpectFault(st, kInt30, kVecGp, 0x182);
  // Not a gate (a TSS descriptor in the IDT): #GP(0x182).
  Gate32(0x30, MakeSystemDescriptor(kTss32Available, kTss, 0x67));
  ExpectFault(Pm32(0), kInt30, kVecGp, 0x182);
  // Gate not present: #NP(0x182).
  Gate32(0x30, MakeGate(kIntGate32, kCode32K, 0x5000, 3, /*present=*/false));
  ExpectFault(Pm32(3), kInt30, kVecNp, 0x182);
  // INT1 through a not-present gate: EXT=1, #NP(1*8+2+1 = 0xb).
  Gate32(1, MakeGate(kIntGate32, kCode32K, 0x5000, 3, /*present=*/false));
  ExpectFault(Pm32(3), {0xf1}, kVecNp, 0xb);
}

TEST_F(IntTest, Pm32TargetCodeSegmentFaults) {
  // Null selector: #GP(0).
  Gate32(0x30, MakeGate(kIntGate32, 0, 0x5000, 3));
  ExpectFault(Pm32(3), kInt30, kVecGp, 0);
  // Selector 0x100 beyond the GDT limit 0x7f: #GP(0x100).
  Gate32(0x30, MakeGate(kIntGate32, 0x100, 0x5000, 3));
  ExpectFault(Pm32(3), kInt30, kVecGp, 0x100);
  // Data segment: #GP(0x10).
  Gate32(0x30, MakeGate(kIntGate32, kData32K, 0x5000, 3));
  ExpectFault(Pm32(3), kInt30, kVecGp, 0x10);
  // Code DPL 3 > CPL 0: #GP(0x18).
  Gate32(0x30, MakeGate(kIntGate32, kCode32U, 0x5000, 0));
  ExpectFault(Pm32(0), kInt30, kVecGp, 0x18);
  // Not present: #NP(0x50).
  Gate32(0x30, MakeGate(kIntGate32, kCodeNp, 0x5000, 3));
  ExpectFault(Pm32(3), kInt30, kVecNp, 0x50);
  // EIP 0x2000 beyond a 4-KiB code limit: #GP(0).
  Put(15, MakeSegmentDescriptor(0, 0xfff, 0xa, true, 0, true, true, false, false));
  Gate32(0x30, MakeGate(kIntGate32, 0x78, 0x2000, 0));
  ExpectFault(Pm32(0), kInt30, kVecGp, 0);
}

TEST_F(IntTest, Pm32TssStackFaults) {
  Gate32(0x80, MakeGate(kTrapGate32, kCode32K, 0x6000, 3));
  // SS0 null: #TS(0).
  Write16(kTss + 8, 0);
  ExpectFault(Pm32(3), {0xcd, 0x80}, kVecTs, 0);
  // SS0 RPL 3 != new CPL 0: #TS(0x20).
  Write16(kTss + 8, kData32U);
  ExpectFault(Pm32(3), {0xcd, 0x80}, kVecTs, 0x20);
  // SS0 is a code segment: #TS(0x08).
  Write16(kTss + 8, kCode32K);
  ExpectFault(Pm32(3), {0xcd, 0x80}, kVecTs, 0x08);
  // TSS limit 8 < 4+5: #TS(TSS selector 0x40).
  Write16(kTss + 8, kData32K);
  CpuState st = Pm32(3);
  st.tr.limit = 8;
  ExpectFault(st, {0xcd, 0x80}, kVecTs, 0x40);
  // ESP0 = 2: the first push wraps to 0xfffffffe and crosses the 4-GiB limit
  // of SS0: #SS(0x10).
  Write32(kTss + 4, 2);
  ExpectFault(Pm32(3), {0xcd, 0x80}, kVecSs, 0x10);
}

TEST_F(IntTest, Pm32RefusesTaskAnd16BitGates) {
  Gate32(0x30, MakeGate(kTaskGate, kTssSel, 0, 3));
  CpuState st = Pm32(3);
  EXPECT_THAT(TryRun(st, kInt30), StatusIs(absl::StatusCode::kUnimplemented,
                                           HasSubstr("int at pm32 CPL3 CS:EIP=001b:00000100: task gate")));
  Gate32(0x30, MakeGate(kIntGate16, kCode32K, 0x5000, 3));
  EXPECT_THAT(TryRun(st, kInt30), StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("16-bit gate")));
  EXPECT_EQ(st, Pm32(3));
}

TEST_F(IntTest, Lm64OuterPrivilegePushesSsRspAndUsesNullSs) {
  CpuState st = Lm64(3);
  const uint64_t handler = 0xffffffff81000000ull;
  Gate64(3, MakeGate(kIntGate32, kCode64K, handler, 3));
  // The handler address is not mapped, but nothing fetches it.
  Completion c = Run(st, {0xcc});
  ASSERT_TRUE(c.retired()) << c.ToString();
  // RSP0 = 0x9000 (already 16-aligned).  Frame (SDM 6.14.2 figure 6-9), 8
  // bytes each: SS @8ff8, RSP @8ff0, RFLAGS @8fe8, CS @8fe0, RIP @8fd8.
  EXPECT_EQ(Read64(0x8ff8), kData32U);
  EXPECT_EQ(Read64(0x8ff0), kUserStack);
  EXPECT_EQ(Read64(0x8fe8), 0x202u);
  EXPECT_EQ(Read64(0x8fe0), kCode64U);
  EXPECT_EQ(Read64(0x8fd8), 0x101u);
  EXPECT_EQ(st.gpr[kRsp], 0x8fd8u);
  EXPECT_EQ(st.rip, handler);
  EXPECT_EQ(st.cs.selector, kCode64K);
  EXPECT_TRUE(st.cs.l);
  EXPECT_EQ(st.ss, NullSegment(0, 0));  // SS ← NULL with RPL = new CPL
  EXPECT_EQ(st.rflags, 0x2u);
  EXPECT_EQ(st.mode(), CpuMode::kLong64);
  EXPECT_EQ(c.transfer.to, handler);
  EXPECT_EQ(c.transfer.new_cpl, 0);
}

TEST_F(IntTest, Lm64SamePrivilegeAlignsStack) {
  CpuState st = Lm64(0);
  st.gpr[kRsp] = 0x8ff8;  // aligned down to 0x8ff0 before the pushes
  Gate64(0x30, MakeGate(kTrapGate32, kCode64K, 0x5000, 0));
  Completion c = Run(st, kInt30);
  ASSERT_TRUE(c.retired());
  EXPECT_EQ(Read64(0x8fe8), kData32K);  // old SS
  EXPECT_EQ(Read64(0x8fe0), 0x8ff8u);   // old RSP, unaligned
  EXPECT_EQ(Read64(0x8fd8), 0x202u);
  EXPECT_EQ(Read64(0x8fd0), kCode64K);
  EXPECT_EQ(Read64(0x8fc8), 0x102u);
  EXPECT_EQ(st.gpr[kRsp], 0x8fc8u);
  EXPECT_EQ(st.ss.selector, kData32K);  // unchanged
  EXPECT_EQ(st.rflags, 0x202u);
}

TEST_F(IntTest, Lm64IstStack) {
  CpuState st = Lm64(0);
  Gate64(0x30, MakeGate(kIntGate32, kCode64K, 0x5000, 0, true, /*ist=*/1));
  Completion c = Run(st, kInt30);
  ASSERT_TRUE(c.retired());
  // IST1 = 0xa000 (TSS offset 0x24): SS @9ff8, RSP @9ff0, … RIP @9fd8.
  EXPECT_EQ(Read64(0x9ff0), 0x9000u);  // old RSP
  EXPECT_EQ(st.gpr[kRsp], 0x9fd8u);
}

TEST_F(IntTest, Lm64Faults) {
  // Target is 32-bit code: #GP(0x08).
  Gate64(0x30, MakeGate(kIntGate32, kCode32K, 0x5000, 3));
  ExpectFault(Lm64(3), kInt30, kVecGp, 0x08);
  // Target has L=1 and D=1: #GP(0x70).
  Gate64(0x30, MakeGate(kIntGate32, kCodeLD, 0x5000, 3));
  ExpectFault(Lm64(3), kInt30, kVecGp, 0x70);
  // 16-bit interrupt gate type is invalid in IA-32e mode: #GP(0x182).
  Gate64(0x30, MakeGate(kIntGate16, kCode64K, 0x5000, 3));
  ExpectFault(Lm64(3), kInt30, kVecGp, 0x182);
  // IDT limit: 16-byte entries, 0x30*16+15 = 0x30f > 0x30e: #GP(0x182).
  CpuState st = Lm64(3);
  st.idtr.limit = 0x30e;
  ExpectFault(st, kInt30, kVecGp, 0x182);
  // Non-canonical handler: #GP(0).
  Gate64(0x30, MakeGate(kIntGate32, kCode64K, 0x0000800000000000ull, 3));
  ExpectFault(Lm64(3), kInt30, kVecGp, 0);
  // IST1 beyond a TSS limit of 0x20: #TS(TSS selector 0x80).
  Gate64(0x30, MakeGate(kIntGate32, kCode64K, 0x5000, 3, true, 1));
  st = Lm64(3);
  st.tr.limit = 0x20;
  ExpectFault(st, kInt30, kVecTs, 0x80);
  // Non-canonical RSP0: #SS(0).
  Gate64(0x30, MakeGate(kIntGate32, kCode64K, 0x5000, 3));
  Write64(kTss64 + 4, 0x0000800000000010ull);
  ExpectFault(Lm64(3), kInt30, kVecSs, 0);
}

TEST_F(IntTest, Lm64StackPushPageFault) {
  Gate64(0x30, MakeGate(kIntGate32, kCode64K, 0x5000, 3));
  // RSP0 = 0x80000000: the first push at 0x7ffffff8 hits an unmapped PDPTE.
  // #PF error = W (bit 1), supervisor, not present = 0x2; CR2 = 0x7ffffff8.
  Write64(kTss64 + 4, 0x80000000ull);
  ExpectFault(Lm64(3), kInt30, kVecPf, 0x2, 0x7ffffff8);
}

TEST_F(IntTest, RealModeUsesIvt) {
  CpuState st = Real();
  Write32(0x10 * 4, 0xf0001234);  // IVT[0x10] = f000:1234
  Completion c = Run(st, {0xcd, 0x10});
  ASSERT_TRUE(c.retired());
  // FLAGS @6ffe, CS @6ffc, IP (0x102) @6ffa (SDM vol. 2 INT, REAL-ADDRESS-MODE).
  EXPECT_EQ(Read16(0x6ffe), 0x202);
  EXPECT_EQ(Read16(0x6ffc), 0);
  EXPECT_EQ(Read16(0x6ffa), 0x102);
  EXPECT_EQ(st.gpr[kRsp], 0x6ffau);
  EXPECT_EQ(st.cs.selector, 0xf000);
  EXPECT_EQ(st.cs.base, 0xf0000u);
  EXPECT_EQ(st.rip, 0x1234u);
  EXPECT_EQ(st.rflags, 0x2u);
  EXPECT_EQ(c.transfer.to, 0xf1234u);
  // Vector beyond the IVT limit: #GP without an error code.
  st = Real();
  st.idtr.limit = 0x3f;
  ExpectFault(st, {0xcd, 0x10}, kVecGp, std::nullopt);
}

TEST_F(IntTest, VirtualModeRefused) {
  CpuState st = Pm32(3);
  st.rflags |= kRflagsVm;
  EXPECT_THAT(TryRun(st, kInt30), StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("virtual-8086")));
}

}  // namespace
}  // namespace vbts::vcpu::testing
