// completer_return_test.cc: IRET and far RET completion (pm32, pm16 operand
// size, lm64, compat, real mode), EFLAGS rules and return-path faults.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "vcpu/completer.h"
#include "vcpu/completer_test_util.h"

namespace vbts::vcpu::testing {
namespace {

using ::testing::HasSubstr;
using ::vbts::testing::StatusIs;

constexpr std::initializer_list<uint8_t> kIretd = {0xcf};
constexpr std::initializer_list<uint8_t> kIretq = {0x48, 0xcf};

class IretTest : public CompleterTest {};

TEST_F(IretTest, Pm32SamePrivilege) {
  CpuState st = Pm32(0);
  st.gpr[kRsp] = 0x8ff4;
  st.nmi_masked = true;
  Frame(0x8ff4, {0x1234, kCode32K, 0x246}, 4);
  Completion c = Run(st, kIretd);
  ASSERT_TRUE(c.retired()) << c.ToString();
  EXPECT_EQ(st.rip, 0x1234u);
  EXPECT_EQ(st.gpr[kRsp], 0x9000u);
  EXPECT_EQ(st.rflags, 0x246u);
  EXPECT_EQ(st.cs.selector, kCode32K);
  EXPECT_FALSE(st.nmi_masked);  // IRET unblocks NMIs
  EXPECT_EQ(c.transfer.kind, TransferKind::kIret);
  EXPECT_EQ(c.transfer.from, 0x100u);
  EXPECT_EQ(c.transfer.to, 0x1234u);
}

TEST_F(IretTest, Pm32ToOuterPrivilegeNullsKernelDataSegments) {
  CpuState st = Pm32(0);
  st.fs = Seg(kData32U);  // DPL 3: survives
  st.gs = Seg(kConfK);    // conforming code: survives whatever its DPL
  st.gpr[kRsp] = 0x8fec;
  Frame(0x8fec, {0x401000, kCode32U, 0x202, kUserStack, kData32U}, 4);
  Completion c = Run(st, kIretd);
  ASSERT_TRUE(c.retired()) << c.ToString();
  EXPECT_EQ(st.rip, 0x401000u);
  EXPECT_EQ(st.cs, SegmentFromDescriptor(MakeCode32(3), kCode32U));
  EXPECT_EQ(st.ss, SegmentFromDescriptor(MakeData32(3), kData32U));
  EXPECT_EQ(st.gpr[kRsp], kUserStack);
  EXPECT_EQ(st.cpl(), 3);
  // DS/ES held DPL-0 data (0x10): DPL 0 < new CPL 3 → null (SDM IRET).
  EXPECT_EQ(st.ds, NullSegment(0));
  EXPECT_EQ(st.es, NullSegment(0));
  EXPECT_EQ(st.fs.selector, kData32U);
  EXPECT_EQ(st.gs.selector, kConfK);
  EXPECT_TRUE(Accessed(3));  // CS and SS descriptors marked accessed
  EXPECT_TRUE(Accessed(4));
  EXPECT_EQ(c.transfer.old_cpl, 0);
  EXPECT_EQ(c.transfer.new_cpl, 3);
}

TEST_F(IretTest, ToSixteenBitStackKeepsUpperEspBits) {
  CpuState st = Pm32(0);
  st.gpr[kRsp] = 0x10fec;
  Frame(0x10fec, {0x401000, kCode32U, 0x202, 0x12345678, kData16U}, 4);
  ASSERT_TRUE(Run(st, kIretd).retired());
  // After the pops ESP = 0x11000; SS.B=0 so only SP is loaded:
  // 0x11000 & 0xffff0000 | 0x5678 = 0x15678.
  EXPECT_EQ(st.gpr[kRsp], 0x15678u);
  EXPECT_FALSE(st.ss.db);
}

TEST_F(IretTest, EflagsRulesAtCpl3) {
  CpuState st = Pm32(3);
  // Popped: CF | IOPL=3 | AC, IF=0.  At CPL 3 > IOPL 0 neither IF nor IOPL
  // may change; CF and AC do: 0x202 | 0x1 | 0x40000 = 0x40203.
  Frame(kUserStack, {0x2000, kCode32U, 0x43001}, 4);
  ASSERT_TRUE(Run(st, kIretd).retired());
  EXPECT_EQ(st.rflags, 0x40203u);
}

TEST_F(IretTest, EflagsRulesAtCpl0) {
  CpuState st = Pm32(0);
  // Popped: CF | IOPL=3 | VIF | VIP, IF=0; all load at CPL 0:
  // 0x3000|0x80000|0x100000|0x1 = 0x183001, plus fixed bit 1 = 0x183003.
  Frame(kKernelStack, {0x2000, kCode32K, 0x183001}, 4);
  ASSERT_TRUE(Run(st, kIretd).retired());
  EXPECT_EQ(st.rflags, 0x183003u);
}

TEST_F(IretTest, SixteenBitOperandSize) {
  CpuState st = Pm32(0);
  st.rflags = 0x40202;  // AC set: a 16-bit IRET leaves EFLAGS[31:16] alone
  st.gpr[kRsp] = 0x8ffa;
  Frame(0x8ffa, {0x1234, kCode32K, 0x0046}, 2);
  ASSERT_TRUE(Run(st, {0x66, 0xcf}).retired());
  EXPECT_EQ(st.rip, 0x1234u);
  EXPECT_EQ(st.gpr[kRsp], 0x9000u);
  EXPECT_EQ(st.rflags, 0x40046u);
}

TEST_F(IretTest, Pm32Faults) {
  auto with_frame = [&](int cpl, std::initializer_list<uint64_t> f) {
    CpuState st = Pm32(cpl);
    Frame(st.gpr[kRsp], f, 4);
    return st;
  };
  ExpectFault(with_frame(0, {0x1000, 0, 0x202}), kIretd, kVecGp, 0);              // null CS
  ExpectFault(with_frame(0, {0x1000, 0x1f8, 0x202}), kIretd, kVecGp, 0x1f8);      // beyond GDT limit
  ExpectFault(with_frame(0, {0x1000, kData32K, 0x202}), kIretd, kVecGp, 0x10);    // not code
  ExpectFault(with_frame(3, {0x1000, kCode32K, 0x202}), kIretd, kVecGp, 0x08);    // RPL 0 < CPL 3
  ExpectFault(with_frame(0, {0x1000, 0x18, 0x202}), kIretd, kVecGp, 0x18);        // DPL 3 != RPL 0
  ExpectFault(with_frame(0, {0x1000, kCodeNp, 0x202}), kIretd, kVecNp, 0x50);     // not present
  // Outer returns: SS checks.
  ExpectFault(with_frame(0, {0x1000, kCode32U, 0x202, kUserStack, 0}), kIretd, kVecGp, 0);
  ExpectFault(with_frame(0, {0x1000, kCode32U, 0x202, kUserStack, 0x20}), kIretd, kVecGp, 0x20);  // RPL 0
  ExpectFault(with_frame(0, {0x1000, kCode32U, 0x202, kUserStack, kCode32U}), kIretd, kVecGp, 0x18);
  ExpectFault(with_frame(0, {0x1000, kCode32U, 0x202, kUserStack, kDataNpU}), kIretd, kVecSs, 0x58);
  // EIP 0x2000 beyond a 4-KiB code segment: #GP(0).
  Put(15, MakeSegmentDescriptor(0, 0xfff, 0xa, true, 0, true, true, false, false));
  ExpectFault(with_frame(0, {0x2000, 0x78, 0x202}), kIretd, kVecGp, 0);
  // Frame beyond the SS limit: #SS(0).
  CpuState st = Pm32(0);
  st.ss.limit = 0x8ff8;
  ExpectFault(st, kIretd, kVecSs, 0);
}

TEST_F(IretTest, NestedTaskAndVirtual8086Refused) {
  CpuState st = Pm32(0);
  st.rflags |= kRflagsNt;
  EXPECT_THAT(TryRun(st, kIretd), StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("task return")));
  st = Pm32(0);
  Frame(kKernelStack, {0x1000, 0x8, 0x20202}, 4);  // VM=1 popped at CPL 0
  EXPECT_THAT(TryRun(st, kIretd), StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("virtual-8086")));
  // In IA-32e mode NT=1 is #GP(0).
  st = Lm64(0);
  st.rflags |= kRflagsNt;
  ExpectFault(st, kIretq, kVecGp, 0);
}

TEST_F(IretTest, Lm64IretqToUser64) {
  CpuState st = Lm64(0);
  st.gpr[kRsp] = 0x8fd8;
  Frame(0x8fd8, {0x401000, kCode64U, 0x202, kUserStack, kData32U}, 8);
  Completion c = Run(st, kIretq);
  ASSERT_TRUE(c.retired()) << c.ToString();
  EXPECT_EQ(st.rip, 0x401000u);
  EXPECT_EQ(st.cs, SegmentFromDescriptor(MakeCode64(3), kCode64U));
  EXPECT_EQ(st.ss.selector, kData32U);
  EXPECT_EQ(st.gpr[kRsp], kUserStack);
  EXPECT_EQ(st.mode(), CpuMode::kLong64);
  EXPECT_EQ(st.cpl(), 3);
  EXPECT_EQ(st.ds, NullSegment(0));
  EXPECT_EQ(c.transfer.new_cpl, 3);
}

TEST_F(IretTest, Lm64IretqToCompat) {
  CpuState st = Lm64(0);
  Frame(kKernelStack, {0x401000, kCode32U, 0x202, kUserStack, kData32U}, 8);
  ASSERT_TRUE(Run(st, kIretq).retired());
  EXPECT_EQ(st.mode(), CpuMode::kCompat32);
  EXPECT_EQ(st.rip, 0x401000u);
  // RIP above 4 GiB is beyond the compat CS limit: #GP(0).
  st = Lm64(0);
  Frame(kKernelStack, {0x100000000ull, kCode32U, 0x202, kUserStack, kData32U}, 8);
  ExpectFault(st, kIretq, kVecGp, 0);
}

TEST_F(IretTest, Lm64SamePrivilegePopsSsRspAndAllowsNullSs) {
  CpuState st = Lm64(0);
  Frame(kKernelStack, {0x2000, kCode64K, 0x2, 0x8800, 0}, 8);
  ASSERT_TRUE(Run(st, kIretq).retired());
  EXPECT_EQ(st.gpr[kRsp], 0x8800u);
  EXPECT_EQ(st.ss, NullSegment(0, 0));
  EXPECT_EQ(st.rflags, 0x2u);
  // IRETD in 64-bit mode pops 4-byte slots, SS:ESP included.
  st = Lm64(0);
  Frame(kKernelStack, {0x2000, kCode64K, 0x2, 0x8800, kData32K}, 4);
  ASSERT_TRUE(Run(st, kIretd).retired());
  EXPECT_EQ(st.gpr[kRsp], 0x8800u);
  EXPECT_EQ(st.ss.selector, kData32K);
}

TEST_F(IretTest, Lm64Faults) {
  CpuState st = Lm64(0);
  // Null SS returning to CPL 3: #GP(0).
  Frame(kKernelStack, {0x401000, kCode64U, 0x202, kUserStack, 0}, 8);
  ExpectFault(st, kIretq, kVecGp, 0);
  // Non-canonical RIP: #GP(0).
  Frame(kKernelStack, {0x0000800000000000ull, kCode64U, 0x202, kUserStack, kData32U}, 8);
  ExpectFault(st, kIretq, kVecGp, 0);
  // CS with L=1 and D=1: #GP(0x70).
  Frame(kKernelStack, {0x1000, kCodeLD, 0x202, kUserStack, kData32K}, 8);
  ExpectFault(st, kIretq, kVecGp, 0x70);
}

TEST_F(IretTest, Lm64ReadOnlyGdtFaultsOnAccessedBitWrite) {
  // Make the 2-MiB page holding the GDT read-only (PDE[0] at PD 0x202000)
  // with CR0.WP=1.  Loading SS 0x10 (accessed bit clear) must write the GDT:
  // #PF(P|W = 0x3), CR2 = 0x1000 + 2*8 + 5 = 0x1015.
  Write64(0x202000, Read64(0x202000) & ~2ull);
  CpuState st = Lm64(0);
  st.cr0 |= kCr0Wp;
  Frame(kKernelStack, {0x2000, kCode64K, 0x2, 0x8800, kData32K}, 8);
  ExpectFault(st, kIretq, kVecPf, 0x3, 0x1015);
}

TEST_F(IretTest, RealMode) {
  CpuState st = Real();
  st.gpr[kRsp] = 0x6ffa;
  st.nmi_masked = true;
  Frame(0x6ffa, {0x1234, 0xf000, 0x0002}, 2);
  ASSERT_TRUE(Run(st, kIretd).retired());
  EXPECT_EQ(st.cs.base, 0xf0000u);
  EXPECT_EQ(st.rip, 0x1234u);
  EXPECT_EQ(st.rflags, 0x2u);
  EXPECT_EQ(st.gpr[kRsp], 0x7000u);
  EXPECT_FALSE(st.nmi_masked);
}

class RetFarTest : public CompleterTest {};

TEST_F(RetFarTest, Pm32SamePrivilege) {
  CpuState st = Pm32(0);
  st.gpr[kRsp] = 0x8ff8;
  Frame(0x8ff8, {0x2000, kCode32K}, 4);
  Completion c = Run(st, {0xcb});
  ASSERT_TRUE(c.retired());
  EXPECT_EQ(st.rip, 0x2000u);
  EXPECT_EQ(st.gpr[kRsp], 0x9000u);
  EXPECT_EQ(c.transfer.kind, TransferKind::kFarRet);
}

TEST_F(RetFarTest, Pm32ToOuterPrivilegeWithImmediate) {
  CpuState st = Pm32(0);
  st.gpr[kRsp] = 0x8fe8;
  // EIP @8fe8, CS @8fec, 8 bytes of parameters @8ff0, ESP @8ff8, SS @8ffc.
  Frame(0x8fe8, {0x401000, kCode32U, 0xaaaa, 0xbbbb, kUserStack, kData32U}, 4);
  ASSERT_TRUE(Run(st, {0xca, 0x08, 0x00}).retired());
  EXPECT_EQ(st.rip, 0x401000u);
  EXPECT_EQ(st.cs.selector, kCode32U);
  EXPECT_EQ(st.ss.selector, kData32U);
  EXPECT_EQ(st.gpr[kRsp], kUserStack + 8);  // caller's parameters released too
  EXPECT_EQ(st.cpl(), 3);
  EXPECT_EQ(st.ds, NullSegment(0));
}

TEST_F(RetFarTest, SixteenBitOperandSize) {
  CpuState st = Pm32(0);
  st.gpr[kRsp] = 0x8ffc;
  Frame(0x8ffc, {0x1234, kCode32K}, 2);
  ASSERT_TRUE(Run(st, {0x66, 0xcb}).retired());
  EXPECT_EQ(st.rip, 0x1234u);
  EXPECT_EQ(st.gpr[kRsp], 0x9000u);
}

TEST_F(RetFarTest, Lm64RetfqToUser64AndCompat) {
  CpuState st = Lm64(0);
  Frame(kKernelStack, {0x401000, kCode64U, kUserStack, kData32U}, 8);
  Completion c = Run(st, {0x48, 0xcb});
  ASSERT_TRUE(c.retired()) << c.ToString();
  EXPECT_EQ(st.rip, 0x401000u);
  EXPECT_EQ(st.mode(), CpuMode::kLong64);
  EXPECT_EQ(st.cpl(), 3);
  EXPECT_EQ(st.gpr[kRsp], kUserStack);
  // RETF (32-bit) to compatibility mode at CPL 3.
  st = Lm64(0);
  Frame(kKernelStack, {0x401000, kCode32U, kUserStack, kData32U}, 4);
  ASSERT_TRUE(Run(st, {0xcb}).retired());
  EXPECT_EQ(st.mode(), CpuMode::kCompat32);
  EXPECT_EQ(st.gpr[kRsp], kUserStack);
}

TEST_F(RetFarTest, Faults) {
  CpuState st = Lm64(0);
  Frame(kKernelStack, {0x0000800000000000ull, kCode64U, kUserStack, kData32U}, 8);
  ExpectFault(st, {0x48, 0xcb}, kVecGp, 0);  // non-canonical RIP
  Frame(kKernelStack, {0x401000, kCode64U, kUserStack, 0}, 8);
  ExpectFault(st, {0x48, 0xcb}, kVecGp, 0);  // null SS to CPL 3
  Frame(kKernelStack, {0x401000, kCode64U, kUserStack, kCode32U}, 8);
  ExpectFault(st, {0x48, 0xcb}, kVecGp, 0x18);  // SS not writable data
  CpuState p = Pm32(3);
  Frame(kUserStack, {0x1000, kCode32K}, 4);
  ExpectFault(p, {0xcb}, kVecGp, 0x08);  // return to an inner level
}

TEST_F(RetFarTest, RealMode) {
  CpuState st = Real();
  st.gpr[kRsp] = 0x6ffc;
  Frame(0x6ffc, {0x0010, 0x1000}, 2);
  ASSERT_TRUE(Run(st, {0xca, 0x04, 0x00}).retired());
  EXPECT_EQ(st.cs.base, 0x10000u);
  EXPECT_EQ(st.rip, 0x10u);
  EXPECT_EQ(st.gpr[kRsp], 0x7004u);
}

}  // namespace
}  // namespace vbts::vcpu::testing
