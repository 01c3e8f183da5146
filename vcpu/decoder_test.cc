// decoder_test.cc: literal byte sequences through the Zydis wrapper, per mode.
#include "vcpu/decoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "pmu/testing/fake_memory.h"
#include "pmu/testing/page_tables.h"
#include "base/testing/status_matchers.h"

namespace vbts::vcpu {
namespace {

using ::testing::HasSubstr;
using ::vbts::testing::StatusIs;

constexpr DecodeMode kPm32{CpuMode::kProtected32, 32};
constexpr DecodeMode kPm16{CpuMode::kProtected16, 16};
constexpr DecodeMode kLm64{CpuMode::kLong64, 64};
constexpr DecodeMode kCompat32{CpuMode::kCompat32, 32};
constexpr DecodeMode kReal{CpuMode::kReal, 16};

DecodedInsn Decode(std::vector<uint8_t> b, DecodeMode m) {
  auto d = DecodeBytes(b, m);
  EXPECT_THAT(d, ::vbts::testing::IsOk());
  return d.value_or(DecodedInsn{});
}

TEST(DecoderTest, IntFamily) {
  DecodedInsn i = Decode({0xcd, 0x30}, kPm32);
  EXPECT_EQ(i.kind, InsnKind::kIntN);
  EXPECT_EQ(i.length, 2);
  EXPECT_TRUE(i.has_imm);
  EXPECT_EQ(i.imm, 0x30u);
  EXPECT_EQ(Decode({0xcc}, kLm64).kind, InsnKind::kInt3);
  EXPECT_EQ(Decode({0xce}, kPm32).kind, InsnKind::kInto);
  EXPECT_EQ(Decode({0xf1}, kLm64).kind, InsnKind::kInt1);
  // INTO is invalid in 64-bit mode (SDM vol. 2 INTO: "#UD in 64-bit mode").
  EXPECT_THAT(DecodeBytes(std::vector<uint8_t>{0xce}, kLm64),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot decode ce in lm64")));
}

// MOV SS and POP SS open the shadow that holds debug exceptions (SDM vol. 3A
// 6.8.3); loads of other segment registers and stores of SS do not.
TEST(DecoderTest, SsLoads) {
  EXPECT_TRUE(Decode({0x8e, 0xd0}, kPm32).loads_ss);        // mov ss, eax
  EXPECT_TRUE(Decode({0x8e, 0x15, 0, 0, 0, 0}, kPm32).loads_ss);  // mov ss, [disp32]
  EXPECT_TRUE(Decode({0x8e, 0x14, 0x25, 0, 0, 0, 0}, kLm64).loads_ss);  // mov ss, [disp32] (64-bit, SIB)
  EXPECT_TRUE(Decode({0x17}, kPm32).loads_ss);              // pop ss
  EXPECT_TRUE(Decode({0x17}, kReal).loads_ss);
  EXPECT_FALSE(Decode({0x8e, 0xd8}, kPm32).loads_ss);       // mov ds, eax
  EXPECT_FALSE(Decode({0x8c, 0xd0}, kPm32).loads_ss);       // mov eax, ss
  EXPECT_FALSE(Decode({0x1f}, kPm32).loads_ss);             // pop ds
  EXPECT_FALSE(Decode({0xf1}, kPm32).loads_ss);             // icebp
}

// Instructions whose memory operand names no data access: the multi-byte NOP
// ("will not issue a memory operation", SDM vol. 2B NOP) and the prefetch
// hints ("merely a hint and does not affect program behavior", PREFETCHh,
// PREFETCHW), which a data breakpoint or a retired-load event would make
// visible. Linux's paravirt patching leaves `nopl (%rax)` right after
// `mov %cr2,%rax` in its page-fault entry: counted as a read, a watchpoint on
// the faulting address re-raised #DB forever (perf test 23.3).
TEST(DecoderTest, NopsAndPrefetchesAccessNoData) {
  EXPECT_EQ(Decode({0x0f, 0x1f, 0x00}, kLm64).data_count, 0);              // nopl (%rax)
  EXPECT_EQ(Decode({0x0f, 0x1f, 0x44, 0x00, 0x00}, kLm64).data_count, 0);  // nopl 0x0(%rax,%rax,1)
  EXPECT_EQ(Decode({0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00}, kPm32).data_count, 0);  // nopw
  EXPECT_EQ(Decode({0x0f, 0x18, 0x08}, kLm64).data_count, 0);              // prefetcht0 (%rax)
  EXPECT_EQ(Decode({0x0f, 0x18, 0x00}, kLm64).data_count, 0);              // prefetchnta (%rax)
  EXPECT_EQ(Decode({0x0f, 0x0d, 0x08}, kLm64).data_count, 0);              // prefetchw (%rax)
  // An ordinary load and store still have theirs.
  EXPECT_EQ(Decode({0x48, 0x8b, 0x00}, kLm64).data_count, 1);              // mov (%rax),%rax
  EXPECT_EQ(Decode({0x48, 0x89, 0x00}, kLm64).data_count, 1);              // mov %rax,(%rax)
}

// Legacy SSE instructions with a 128-bit memory operand need it 16-byte
// aligned (#GP(0) otherwise), except the explicitly unaligned ones (SDM vol.
// 2A 2.5, exception types 1, 2, 4; the instructions' own pages).
TEST(DecoderTest, SseAlignment) {
  EXPECT_TRUE(Decode({0x0f, 0x29, 0x00}, kPm32).sse_aligned_m128);              // movaps [eax], xmm0
  EXPECT_TRUE(Decode({0x0f, 0x28, 0x06}, kLm64).sse_aligned_m128);              // movaps xmm0, [rsi]
  EXPECT_TRUE(Decode({0x66, 0x0f, 0x6f, 0x00}, kPm32).sse_aligned_m128);        // movdqa xmm0, [eax]
  EXPECT_TRUE(Decode({0x66, 0x0f, 0xfe, 0x00}, kLm64).sse_aligned_m128);        // paddd xmm0, [rax]
  EXPECT_TRUE(Decode({0x0f, 0x58, 0x00}, kReal).sse_aligned_m128);              // addps xmm0, [bx+si]
  EXPECT_TRUE(Decode({0x66, 0x0f, 0x38, 0x00, 0x00}, kLm64).sse_aligned_m128);  // pshufb xmm0, [rax] (SSSE3)
  EXPECT_TRUE(Decode({0x66, 0x0f, 0x38, 0x17, 0x00}, kLm64).sse_aligned_m128);  // ptest xmm0, [rax] (SSE4.1)
  EXPECT_TRUE(Decode({0x66, 0x0f, 0x38, 0x2a, 0x00}, kLm64).sse_aligned_m128);  // movntdqa xmm0, [rax]
  EXPECT_TRUE(Decode({0x66, 0x0f, 0x38, 0xdc, 0x00}, kLm64).sse_aligned_m128);  // aesenc xmm0, [rax]
  EXPECT_TRUE(Decode({0x0f, 0x2b, 0x00}, kLm64).sse_aligned_m128);              // movntps [rax], xmm0
  EXPECT_FALSE(Decode({0x0f, 0x11, 0x00}, kPm32).sse_aligned_m128);             // movups [eax], xmm0
  EXPECT_FALSE(Decode({0x66, 0x0f, 0x10, 0x00}, kPm32).sse_aligned_m128);       // movupd xmm0, [eax]
  EXPECT_FALSE(Decode({0xf3, 0x0f, 0x6f, 0x00}, kLm64).sse_aligned_m128);       // movdqu xmm0, [rax]
  EXPECT_FALSE(Decode({0xf2, 0x0f, 0xf0, 0x00}, kLm64).sse_aligned_m128);       // lddqu xmm0, [rax]
  EXPECT_FALSE(Decode({0x66, 0x0f, 0x3a, 0x63, 0x00, 0x00}, kLm64).sse_aligned_m128);  // pcmpistri xmm0, [rax], 0
  EXPECT_FALSE(Decode({0x66, 0x0f, 0xf7, 0xc1}, kLm64).sse_aligned_m128);       // maskmovdqu xmm0, xmm1
  EXPECT_FALSE(Decode({0x0f, 0x28, 0xc1}, kPm32).sse_aligned_m128);             // movaps xmm0, xmm1
  EXPECT_FALSE(Decode({0xf3, 0x0f, 0x58, 0x00}, kPm32).sse_aligned_m128);       // addss xmm0, [eax] (m32)
  EXPECT_FALSE(Decode({0x0f, 0x12, 0x00}, kPm32).sse_aligned_m128);             // movlps xmm0, [eax] (m64)
  EXPECT_FALSE(Decode({0x0f, 0x6f, 0x00}, kPm32).sse_aligned_m128);             // movq mm0, [eax] (MMX)
  EXPECT_FALSE(Decode({0xc5, 0xf8, 0x28, 0x00}, kLm64).sse_aligned_m128);       // vmovaps xmm0, [rax] (VEX-encoded: not legacy SSE)
  EXPECT_FALSE(Decode({0x0f, 0xae, 0x00}, kLm64).sse_aligned_m128);             // fxsave [rax] (its own check)
  EXPECT_FALSE(Decode({0x48, 0x0f, 0xc7, 0x08}, kLm64).sse_aligned_m128);       // cmpxchg16b [rax] (its own check)
}

TEST(DecoderTest, IretOperandSizes) {
  DecodedInsn d = Decode({0xcf}, kPm32);
  EXPECT_EQ(d.kind, InsnKind::kIret);
  EXPECT_EQ(d.operand_size, 32);
  EXPECT_EQ(d.mnemonic, "iretd");
  DecodedInsn w = Decode({0x66, 0xcf}, kPm32);
  EXPECT_EQ(w.operand_size, 16);
  EXPECT_TRUE(w.opsize_prefix);
  EXPECT_EQ(w.length, 2);
  EXPECT_EQ(Decode({0xcf}, kPm16).operand_size, 16);
  EXPECT_EQ(Decode({0x66, 0xcf}, kPm16).operand_size, 32);
  DecodedInsn q = Decode({0x48, 0xcf}, kLm64);
  EXPECT_EQ(q.operand_size, 64);
  EXPECT_TRUE(q.rex_w);
  EXPECT_EQ(q.mnemonic, "iretq");
  EXPECT_EQ(Decode({0xcf}, kLm64).operand_size, 32);  // IRETD in 64-bit mode
  EXPECT_EQ(Decode({0xcf}, kCompat32).operand_size, 32);
  EXPECT_EQ(Decode({0xcf}, kReal).operand_size, 16);
}

TEST(DecoderTest, FarReturn) {
  DecodedInsn r = Decode({0xcb}, kPm32);
  EXPECT_EQ(r.kind, InsnKind::kRetFar);
  EXPECT_FALSE(r.has_imm);
  DecodedInsn ri = Decode({0xca, 0x08, 0x00}, kPm32);
  EXPECT_EQ(ri.kind, InsnKind::kRetFar);
  EXPECT_EQ(ri.imm, 8u);
  EXPECT_EQ(ri.length, 3);
  DecodedInsn q = Decode({0x48, 0xcb}, kLm64);
  EXPECT_EQ(q.kind, InsnKind::kRetFar);
  EXPECT_EQ(q.operand_size, 64);
  EXPECT_EQ(Decode({0xcb}, kLm64).operand_size, 32);
  // Near RET is not ours.
  EXPECT_EQ(Decode({0xc3}, kLm64).kind, InsnKind::kOther);
}

TEST(DecoderTest, FarCallJmpDirect) {
  // call 0x0010:0x00401000 (9A id iw).
  DecodedInsn c = Decode({0x9a, 0x00, 0x10, 0x40, 0x00, 0x10, 0x00}, kPm32);
  EXPECT_EQ(c.kind, InsnKind::kCallFar);
  EXPECT_TRUE(c.has_far_ptr);
  EXPECT_EQ(c.far_selector, 0x10);
  EXPECT_EQ(c.far_offset, 0x401000u);
  EXPECT_EQ(c.length, 7);
  // jmp 0x0008:0x1234 in 16-bit code (EA iw iw).
  DecodedInsn j = Decode({0xea, 0x34, 0x12, 0x08, 0x00}, kPm16);
  EXPECT_EQ(j.kind, InsnKind::kJmpFar);
  EXPECT_EQ(j.far_offset, 0x1234u);
  EXPECT_EQ(j.far_selector, 0x8);
  EXPECT_EQ(j.operand_size, 16);
}

TEST(DecoderTest, FarCallJmpIndirect) {
  // call far [rax+8] with REX.W: 48 FF 58 08 → m16:64.
  DecodedInsn c = Decode({0x48, 0xff, 0x58, 0x08}, kLm64);
  EXPECT_EQ(c.kind, InsnKind::kCallFar);
  ASSERT_TRUE(c.has_mem);
  EXPECT_EQ(c.mem.base, kRax);
  EXPECT_EQ(c.mem.index, -1);
  EXPECT_EQ(c.mem.disp, 8);
  EXPECT_EQ(c.mem.seg, SegReg::kDs);
  EXPECT_EQ(c.operand_size, 64);
  // jmp far [ebp+esi*4-4] (FF 6C B5 FC): SS is the default segment with EBP.
  DecodedInsn j = Decode({0xff, 0x6c, 0xb5, 0xfc}, kPm32);
  EXPECT_EQ(j.kind, InsnKind::kJmpFar);
  EXPECT_EQ(j.mem.seg, SegReg::kSs);
  EXPECT_EQ(j.mem.base, kRbp);
  EXPECT_EQ(j.mem.index, kRsi);
  EXPECT_EQ(j.mem.scale, 4);
  EXPECT_EQ(j.mem.disp, -4);
  EXPECT_EQ(j.mem.size_bits, 48);
  // jmp far [rip+0x10]: FF 2D 10 00 00 00.
  DecodedInsn r = Decode({0xff, 0x2d, 0x10, 0, 0, 0}, kLm64);
  EXPECT_EQ(r.mem.base, kRipBase);
  EXPECT_EQ(r.mem.disp, 0x10);
  // Near indirect call is not ours.
  EXPECT_EQ(Decode({0xff, 0xd0}, kLm64).kind, InsnKind::kOther);
}

TEST(DecoderTest, SystemCalls) {
  EXPECT_EQ(Decode({0x0f, 0x05}, kLm64).kind, InsnKind::kSyscall);
  DecodedInsn sr = Decode({0x48, 0x0f, 0x07}, kLm64);
  EXPECT_EQ(sr.kind, InsnKind::kSysret);
  EXPECT_TRUE(sr.rex_w);
  EXPECT_FALSE(Decode({0x0f, 0x07}, kLm64).rex_w);
  EXPECT_EQ(Decode({0x0f, 0x34}, kPm32).kind, InsnKind::kSysenter);
  EXPECT_EQ(Decode({0x0f, 0x35}, kPm32).kind, InsnKind::kSysexit);
  EXPECT_EQ(Decode({0x0f, 0xa2}, kPm32).kind, InsnKind::kCpuid);
}

TEST(DecoderTest, StopsAtMaximumLengthAndRejectsTruncated) {
  // 15 bytes given, an ordinary instruction uses 1.
  std::vector<uint8_t> b(20, 0x90);
  EXPECT_EQ(Decode(b, kLm64).length, 1);
  EXPECT_THAT(DecodeBytes(std::vector<uint8_t>{0xcd}, kPm32),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot decode cd")));
}

TEST(DecoderTest, DecodeAtReadsThroughPagingAndStopsAtUnmappedPage) {
  ::vbts::testing::FakePhysMemory mem(4 << 20);
  ::vbts::testing::PageTables4 pt(mem, 0x100000);
  pt.Map(0x400000, 0x8000, ::vbts::testing::kPtW);  // next page 0x401000 unmapped
  CpuState st;
  st.cr0 = kCr0Pe | kCr0Pg;
  st.cr4 = kCr4Pae;
  st.efer = kEferLme | kEferLma;
  st.cr3 = pt.pml4();
  st.cs.l = true;
  st.rip = 0x400ffe;
  mem.bytes()[0x8ffe] = 0x48;
  mem.bytes()[0x8fff] = 0xcf;
  auto d = DecodeCurrent(st, mem);
  VBTS_ASSERT_OK(d);
  EXPECT_EQ(d->kind, InsnKind::kIret);
  EXPECT_EQ(d->operand_size, 64);
  // One readable byte of a two-byte instruction: decode error.
  st.rip = 0x400fff;
  mem.bytes()[0x8fff] = 0xcd;
  EXPECT_THAT(DecodeCurrent(st, mem), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot decode cd")));
  // Nothing readable: the fetch fault is named.
  st.rip = 0x401000;
  EXPECT_THAT(DecodeCurrent(st, mem),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("instruction fetch at 0x401000 faults (#PF")));
}

}  // namespace
}  // namespace vbts::vcpu
