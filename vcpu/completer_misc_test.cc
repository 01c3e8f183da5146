// completer_misc_test.cc: far CALL/JMP, SYSCALL/SYSRET, SYSENTER/SYSEXIT,
// CPUID and not-mine completion.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "vcpu/completer.h"
#include "vcpu/completer_test_util.h"

namespace vbts::vcpu::testing {
namespace {

using ::testing::HasSubstr;
using ::vbts::testing::StatusIs;

class FarTest : public CompleterTest {};

TEST_F(FarTest, Pm32DirectCall) {
  CpuState st = Pm32(0);
  // call 0x0008:0x00005000 (9A id iw, 7 bytes): next EIP = 0x107.
  Completion c = Run(st, {0x9a, 0x00, 0x50, 0x00, 0x00, 0x08, 0x00});
  ASSERT_TRUE(c.retired()) << c.ToString();
  EXPECT_EQ(Read32(0x8ffc), kCode32K);  // CS pushed first, zero-padded
  EXPECT_EQ(Read32(0x8ff8), 0x107u);
  EXPECT_EQ(st.gpr[kRsp], 0x8ff8u);
  EXPECT_EQ(st.rip, 0x5000u);
  EXPECT_EQ(c.transfer.kind, TransferKind::kFarCall);
  EXPECT_EQ(c.transfer.to, 0x5000u);
}

TEST_F(FarTest, ConformingTargetKeepsCpl) {
  CpuState st = Pm32(3);
  // jmp 0x0038:0x00006000 from CPL 3 into conforming DPL-0 code.
  Completion c = Run(st, {0xea, 0x00, 0x60, 0x00, 0x00, 0x38, 0x00});
  ASSERT_TRUE(c.retired());
  EXPECT_EQ(st.cs.selector, kConfK | 3);
  EXPECT_EQ(st.cpl(), 3);
  EXPECT_EQ(st.rip, 0x6000u);
  EXPECT_EQ(st.gpr[kRsp], kUserStack);  // JMP pushes nothing
  EXPECT_EQ(c.transfer.kind, TransferKind::kFarJmp);
}

TEST_F(FarTest, Pm32Faults) {
  // Non-conforming DPL 3 from CPL 0 (RPL 3 > CPL 0): #GP(0x18).
  ExpectFault(Pm32(0), {0xea, 0, 0x10, 0, 0, 0x1b, 0}, kVecGp, 0x18);
  // Non-conforming DPL 0 from CPL 3: #GP(0x08).
  ExpectFault(Pm32(3), {0xea, 0, 0x10, 0, 0, 0x08, 0}, kVecGp, 0x08);
  // Null selector: #GP(0).
  ExpectFault(Pm32(0), {0xea, 0, 0x10, 0, 0, 0, 0}, kVecGp, 0);
  // Data segment: #GP(0x10).
  ExpectFault(Pm32(0), {0xea, 0, 0x10, 0, 0, 0x10, 0}, kVecGp, 0x10);
  // Not present: #NP(0x50).
  ExpectFault(Pm32(0), {0xea, 0, 0x10, 0, 0, 0x50, 0}, kVecNp, 0x50);
  // Busy TSS is not a valid JMP target: #GP(0x40).
  ExpectFault(Pm32(0), {0xea, 0, 0x10, 0, 0, 0x40, 0}, kVecGp, 0x40);
  // Push below the stack segment's limit: #SS(0).
  CpuState st = Pm32(0);
  st.ss = Seg(kData32K);
  st.ss.limit = 0x8ff9;
  ExpectFault(st, {0x9a, 0, 0x50, 0, 0, 0x08, 0}, kVecSs, 0);
}

TEST_F(FarTest, GatesRefused) {
  CpuState st = Pm32(3);
  EXPECT_THAT(TryRun(st, {0x9a, 0, 0, 0, 0, 0x6b, 0}),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("call gate 0x006b")));
  Put(15, MakeSystemDescriptor(kTss32Available, kTss, 0x67));
  EXPECT_THAT(TryRun(st, {0xea, 0, 0, 0, 0, 0x78, 0}),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("task switch")));
  EXPECT_EQ(st, Pm32(3));
}

TEST_F(FarTest, Lm64IndirectJmpM16_64) {
  CpuState st = Lm64(0);
  st.gpr[kRax] = 0x4000;
  const uint64_t target = 0xffff800000001000ull;
  Write64(0x4000, target);
  Write16(0x4008, kCode64K);
  // jmp far [rax] with REX.W: 48 FF 28 (m16:64: offset then selector).
  Completion c = Run(st, {0x48, 0xff, 0x28});
  ASSERT_TRUE(c.retired()) << c.ToString();
  EXPECT_EQ(st.rip, target);
  EXPECT_EQ(st.cs.selector, kCode64K);
  EXPECT_EQ(c.transfer.to, target);
}

TEST_F(FarTest, Lm64IndirectCallToCompat) {
  CpuState st = Lm64(0);
  st.gpr[kRbx] = 0x4000;
  Write32(0x4000, 0x5000);
  Write16(0x4004, kCode32K);
  // call far [rbx] (FF 1B), m16:32: pushes CS then RIP as 4-byte slots.
  Completion c = Run(st, {0xff, 0x1b});
  ASSERT_TRUE(c.retired()) << c.ToString();
  EXPECT_EQ(Read32(0x8ffc), kCode64K);
  EXPECT_EQ(Read32(0x8ff8), 0x102u);
  EXPECT_EQ(st.gpr[kRsp], 0x8ff8u);
  EXPECT_EQ(st.mode(), CpuMode::kCompat32);
  EXPECT_EQ(st.rip, 0x5000u);
}

TEST_F(FarTest, Lm64MemoryOperandFaults) {
  CpuState st = Lm64(0);
  st.gpr[kRax] = 0x0000800000000000ull;
  ExpectFault(st, {0x48, 0xff, 0x28}, kVecGp, 0);  // non-canonical operand
  // Unmapped operand: #PF, read, not present: error 0 at CPL 0, 4 (U) at CPL 3.
  st.gpr[kRax] = 0x80000000ull;
  ExpectFault(st, {0x48, 0xff, 0x28}, kVecPf, 0, 0x80000000ull);
  CpuState u = Lm64(3);
  u.gpr[kRax] = 0x80000000ull;
  ExpectFault(u, {0x48, 0xff, 0x28}, kVecPf, 4, 0x80000000ull);
  // Target with L=1 and D=1: #GP(0x70).
  st.gpr[kRax] = 0x4000;
  Write64(0x4000, 0x1000);
  Write16(0x4008, kCodeLD);
  ExpectFault(st, {0x48, 0xff, 0x28}, kVecGp, 0x70);
}

class SysTest : public CompleterTest {};

TEST_F(SysTest, Syscall) {
  CpuState st = Lm64(3);
  st.star = 0x0023001000000000ull;  // SYSCALL CS = 0x10, SYSRET base = 0x23
  st.lstar = 0xffffffff81000000ull;
  st.sfmask = 0x47700;  // TF|IF|DF|IOPL|NT|AC
  st.rflags = 0x346;    // TF|IF|ZF|PF|bit1
  Completion c = Run(st, {0x0f, 0x05});
  ASSERT_TRUE(c.retired()) << c.ToString();
  EXPECT_EQ(st.gpr[kRcx], 0x102u);
  EXPECT_EQ(st.gpr[kR11], 0x346u);
  EXPECT_EQ(st.rflags, 0x46u);  // 0x346 & ~0x47700
  EXPECT_EQ(st.rip, 0xffffffff81000000ull);
  EXPECT_EQ(st.cs, FlatSegment(0x10, 0xb, 0, false, true));
  EXPECT_EQ(st.ss, FlatSegment(0x18, 0x3, 0, true, false));
  EXPECT_EQ(st.cs.limit, 0xffffffffu);
  EXPECT_EQ(st.cpl(), 0);
  EXPECT_EQ(c.transfer.kind, TransferKind::kSyscall);
  EXPECT_EQ(c.transfer.old_cpl, 3);
  // #UD when EFER.SCE=0 and outside 64-bit mode.
  st = Lm64(3);
  st.efer &= ~kEferSce;
  ExpectFault(st, {0x0f, 0x05}, kVecUd, std::nullopt);
  ExpectFault(Compat32(3), {0x0f, 0x05}, kVecUd, std::nullopt);
}

TEST_F(SysTest, Sysret) {
  CpuState st = Lm64(0);
  st.star = 0x0023001000000000ull;
  st.gpr[kRcx] = 0x401000;
  st.gpr[kR11] = 0x10346;  // RF set: cleared by the 0x3C7FD7 mask
  Completion c = Run(st, {0x48, 0x0f, 0x07});
  ASSERT_TRUE(c.retired());
  EXPECT_EQ(st.rip, 0x401000u);
  EXPECT_EQ(st.rflags, 0x346u);
  EXPECT_EQ(st.cs, FlatSegment(0x33, 0xb, 3, false, true));  // 0x23+16 | 3
  EXPECT_EQ(st.ss, FlatSegment(0x2b, 0x3, 3, true, false));  // 0x23+8 | 3
  EXPECT_EQ(st.mode(), CpuMode::kLong64);
  // Without REX.W: compatibility mode, RIP = ECX, CS = 0x23.
  st = Lm64(0);
  st.star = 0x0023001000000000ull;
  st.gpr[kRcx] = 0xdead00001000ull;
  ASSERT_TRUE(Run(st, {0x0f, 0x07}).retired());
  EXPECT_EQ(st.rip, 0x1000u);
  EXPECT_EQ(st.cs, FlatSegment(0x23, 0xb, 3, true, false));
  EXPECT_EQ(st.mode(), CpuMode::kCompat32);
  // #GP(0) at CPL 3 or with a non-canonical RCX.
  ExpectFault(Lm64(3), {0x48, 0x0f, 0x07}, kVecGp, 0);
  st = Lm64(0);
  st.gpr[kRcx] = 0x0000800000000000ull;
  ExpectFault(st, {0x48, 0x0f, 0x07}, kVecGp, 0);
}

TEST_F(SysTest, SysenterSysexitPm32) {
  CpuState st = Pm32(3);
  st.sysenter_cs = kCode32K;
  st.sysenter_esp = 0x9000;
  st.sysenter_eip = 0x5000;
  Completion c = Run(st, {0x0f, 0x34});
  ASSERT_TRUE(c.retired());
  EXPECT_EQ(st.cs, FlatSegment(0x08, 0xb, 0, true, false));
  EXPECT_EQ(st.ss, FlatSegment(0x10, 0x3, 0, true, false));
  EXPECT_EQ(st.gpr[kRsp], 0x9000u);
  EXPECT_EQ(st.rip, 0x5000u);
  EXPECT_EQ(st.rflags, 0x2u);  // IF cleared
  EXPECT_EQ(c.transfer.kind, TransferKind::kSysenter);

  st.gpr[kRcx] = 0x7000;
  st.gpr[kRdx] = 0x401000;
  Completion x = Run(st, {0x0f, 0x35});
  ASSERT_TRUE(x.retired());
  EXPECT_EQ(st.cs, FlatSegment(0x1b, 0xb, 3, true, false));  // 0x08+16 | 3
  EXPECT_EQ(st.ss, FlatSegment(0x23, 0x3, 3, true, false));
  EXPECT_EQ(st.gpr[kRsp], 0x7000u);
  EXPECT_EQ(st.rip, 0x401000u);
  EXPECT_EQ(x.transfer.new_cpl, 3);
}

TEST_F(SysTest, SysexitTo64AndFaults) {
  CpuState st = Lm64(0);
  st.sysenter_cs = kCode32K;
  st.gpr[kRcx] = 0x7000;
  st.gpr[kRdx] = 0x401000;
  ASSERT_TRUE(Run(st, {0x48, 0x0f, 0x35}).retired());
  EXPECT_EQ(st.cs, FlatSegment(0x2b, 0xb, 3, false, true));  // 0x08+32 | 3
  EXPECT_EQ(st.ss, FlatSegment(0x33, 0x3, 3, true, false));
  EXPECT_EQ(st.mode(), CpuMode::kLong64);
  // SYSENTER_CS[15:2] = 0: #GP(0); SYSEXIT at CPL 3: #GP(0).
  ExpectFault(Pm32(3), {0x0f, 0x34}, kVecGp, 0);
  CpuState u = Pm32(3);
  u.sysenter_cs = kCode32K;
  ExpectFault(u, {0x0f, 0x35}, kVecGp, 0);
}

TEST_F(SysTest, Cpuid) {
  CpuState st = Lm64(3);
  st.gpr[kRax] = 0xffffffff00000001ull;
  st.gpr[kRcx] = 0xffffffff00000007ull;
  Completion c = Run(st, {0x0f, 0xa2});
  ASSERT_TRUE(c.retired());
  // cpuid_ returns {leaf+1, subleaf+2, "ntel", "ineI"}; 64-bit mode zero-extends.
  EXPECT_EQ(st.gpr[kRax], 2u);
  EXPECT_EQ(st.gpr[kRbx], 9u);
  EXPECT_EQ(st.gpr[kRcx], 0x6c65746eu);
  EXPECT_EQ(st.gpr[kRdx], 0x49656e69u);
  EXPECT_EQ(st.rip, 0x102u);
  EXPECT_EQ(c.transfer.kind, TransferKind::kCpuid);
  EXPECT_EQ(c.transfer.to, 0x102u);
  // Outside 64-bit mode the upper halves are left alone.
  CpuState p = Pm32(0);
  p.gpr[kRbx] = 0xaaaaaaaa00000000ull;
  ASSERT_TRUE(Run(p, {0x0f, 0xa2}).retired());
  EXPECT_EQ(p.gpr[kRbx], 0xaaaaaaaa00000002ull);
}

TEST_F(SysTest, RfClearedOnCompletion) {
  CpuState st = Pm32(0);
  st.rflags |= kRflagsRf;
  ASSERT_TRUE(Run(st, {0x0f, 0xa2}).retired());
  EXPECT_EQ(st.rflags & kRflagsRf, 0u);
}

TEST_F(SysTest, NotMine) {
  CpuState st = Lm64(0);
  Completion c = Run(st, {0x90});
  EXPECT_EQ(c.result, Completion::Result::kNotMine);
  EXPECT_EQ(st, Lm64(0));
  EXPECT_EQ(c.ToString(), "not mine");
}

}  // namespace
}  // namespace vbts::vcpu::testing
