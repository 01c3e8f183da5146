// registers_test.cc: the register layouts and descriptions (gdb/registers.h).
// Offsets in the comments are byte offsets in the `g` packet (twice that in
// hex digits), from the description order (see GPacketSizes).
#include "gdb/registers.h"

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_format.h"
#include "base/testing/status_matchers.h"

namespace vbts::gdb {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;
using ::testing::StartsWith;
using vbts::testing::StatusIs;

// Little-endian hex of the low `bytes` bytes of v.
std::string Le(uint64_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; i++) s += absl::StrFormat("%02x", (v >> (8 * i)) & 0xff);
  return s;
}

void SetSt(vcpu::FpuState& f, int i, uint64_t mantissa, uint16_t sign_exp) {
  std::memcpy(f.st[i], &mantissa, 8);
  f.st[i][8] = static_cast<uint8_t>(sign_exp);
  f.st[i][9] = static_cast<uint8_t>(sign_exp >> 8);
}

Registers Sample() {
  Registers r;
  for (int i = 0; i < 16; i++) r.st.gpr[i] = 0x1111111111111111ull * (i + 1) ^ 0x0102030405060708ull;
  r.st.gpr[vcpu::kRax] = 0x1122334455667788ull;
  r.st.gpr[vcpu::kRbx] = 0xbbull;
  r.st.rip = 0xdeadbeefull;
  r.st.rflags = 0x246;
  r.st.cs.selector = 0x10;
  r.st.cs.base = 0x1234;
  r.st.ss.selector = 0x18;
  r.st.fs.base = 0x7000;
  r.st.gs.base = 0x8000;
  r.st.kernel_gs_base = 0x9000;
  r.st.cr0 = 0x80000011;
  r.st.cr3 = 0x1000;
  r.st.cr8 = 2;
  r.st.efer = 0x500;
  for (int i = 0; i < 16; i++)
    for (int b = 0; b < 16; b++) r.fpu.xmm[i][b] = static_cast<uint8_t>(i * 16 + b);
  r.fpu.mxcsr = 0x1f80;
  return r;
}

TEST(Registers, CountsAndNumbers) {
  EXPECT_EQ(RegisterCount(Arch::kX86_64), 66);  // 40 core + 17 sse + 2 segments + 7 system
  EXPECT_EQ(RegisterCount(Arch::kI386), 48);    // 32 core + 9 sse + 2 segments + 5 system
  EXPECT_THAT(RegisterNumber(Arch::kX86_64, "rax"), Optional(0));
  EXPECT_THAT(RegisterNumber(Arch::kX86_64, "rbx"), Optional(1));
  EXPECT_THAT(RegisterNumber(Arch::kX86_64, "rip"), Optional(16));
  EXPECT_THAT(RegisterNumber(Arch::kX86_64, "eflags"), Optional(17));
  EXPECT_THAT(RegisterNumber(Arch::kX86_64, "st0"), Optional(24));
  EXPECT_THAT(RegisterNumber(Arch::kX86_64, "ftag"), Optional(34));
  EXPECT_THAT(RegisterNumber(Arch::kX86_64, "xmm0"), Optional(40));
  EXPECT_THAT(RegisterNumber(Arch::kX86_64, "mxcsr"), Optional(56));
  EXPECT_THAT(RegisterNumber(Arch::kX86_64, "fs_base"), Optional(57));
  EXPECT_THAT(RegisterNumber(Arch::kX86_64, "k_gs_base"), Optional(59));
  EXPECT_THAT(RegisterNumber(Arch::kX86_64, "cr3"), Optional(62));
  EXPECT_THAT(RegisterNumber(Arch::kX86_64, "efer"), Optional(65));
  EXPECT_THAT(RegisterNumber(Arch::kI386, "ecx"), Optional(1));
  EXPECT_THAT(RegisterNumber(Arch::kI386, "eip"), Optional(8));
  EXPECT_THAT(RegisterNumber(Arch::kI386, "xmm7"), Optional(39));
  EXPECT_THAT(RegisterNumber(Arch::kI386, "cr0"), Optional(43));
  EXPECT_THAT(RegisterNumber(Arch::kI386, "efer"), Optional(47));
  EXPECT_EQ(RegisterNumber(Arch::kI386, "cr8"), std::nullopt);
  EXPECT_EQ(RegisterNumber(Arch::kI386, "rax"), std::nullopt);
  EXPECT_EQ(RegisterNumber(Arch::kX86_64, "xmm16"), std::nullopt);
}

TEST(Registers, GPacketSizes) {
  // x86-64 core: 16 GPRs * 8 = 128, rip -> 136, eflags + 6 selectors * 4
  // -> 164 (cs at 140), st0-7 * 10 -> 244, 8 x87 control * 4 -> 276; sse:
  // xmm0-15 * 16 -> 532, mxcsr -> 536; segments 2 * 8 -> 552; system 7 * 8
  // -> 608 bytes.  i386: 8 * 4 = 32, eip -> 36, eflags + selectors -> 64,
  // st -> 144, control -> 176, xmm0-7 -> 304, mxcsr -> 308, fs/gs_base ->
  // 316, 5 system * 4 -> 336.  (GDB 13.1's `maint print remote-registers`
  // on these descriptions shows the same g/G offsets.)
  Registers r;
  EXPECT_EQ(EncodeRegisters(Arch::kX86_64, r).size(), 2u * 608);
  EXPECT_EQ(EncodeRegisters(Arch::kI386, r).size(), 2u * 336);
}

TEST(Registers, TargetXml) {
  const std::string x = TargetXml(Arch::kX86_64);
  EXPECT_THAT(x, StartsWith("<?xml version=\"1.0\"?><!DOCTYPE target SYSTEM \"gdb-target.dtd\">"
                            "<target version=\"1.0\"><architecture>i386:x86-64</architecture>"
                            "<osabi>none</osabi><feature name=\"org.gnu.gdb.i386.core\">"));
  EXPECT_THAT(x, HasSubstr("<reg name=\"rsp\" bitsize=\"64\" type=\"data_ptr\"/>"));
  EXPECT_THAT(x, HasSubstr("<reg name=\"rip\" bitsize=\"64\" type=\"code_ptr\"/>"));
  EXPECT_THAT(x, HasSubstr("<reg name=\"eflags\" bitsize=\"32\" type=\"i386_eflags\"/>"));
  EXPECT_THAT(x, HasSubstr("<reg name=\"st7\" bitsize=\"80\" type=\"i387_ext\"/>"));
  EXPECT_THAT(x, HasSubstr("<reg name=\"fop\" bitsize=\"32\" type=\"int\" group=\"float\"/>"));
  EXPECT_THAT(x, HasSubstr("<union id=\"vec128\">"));
  EXPECT_THAT(x, HasSubstr("<reg name=\"xmm15\" bitsize=\"128\" type=\"vec128\"/>"));
  EXPECT_THAT(x, HasSubstr("<reg name=\"mxcsr\" bitsize=\"32\" type=\"i386_mxcsr\" group=\"vector\"/>"));
  EXPECT_THAT(x, HasSubstr("<feature name=\"org.gnu.gdb.i386.segments\"><reg name=\"fs_base\" bitsize=\"64\""));
  EXPECT_THAT(x, HasSubstr("<feature name=\"org.vbts.x86.system\"><reg name=\"k_gs_base\" bitsize=\"64\" "
                           "type=\"int\" group=\"system\"/>"));
  EXPECT_THAT(x, HasSubstr("<reg name=\"efer\" bitsize=\"64\" type=\"int\" group=\"system\"/></feature></target>"));

  const std::string y = TargetXml(Arch::kI386);
  EXPECT_THAT(y, StartsWith("<?xml version=\"1.0\"?><!DOCTYPE target SYSTEM \"gdb-target.dtd\">"
                            "<target version=\"1.0\"><architecture>i386</architecture>"));
  EXPECT_THAT(y, HasSubstr("<reg name=\"eax\" bitsize=\"32\" type=\"int32\"/><reg name=\"ecx\""));
  EXPECT_THAT(y, HasSubstr("<reg name=\"fs_base\" bitsize=\"32\" type=\"int\"/>"));
  EXPECT_THAT(y, HasSubstr("<reg name=\"efer\" bitsize=\"32\" type=\"int\" group=\"system\"/>"));
  EXPECT_THAT(y, ::testing::Not(HasSubstr("xmm8")));
  EXPECT_THAT(y, ::testing::Not(HasSubstr("cr8")));
}

TEST(Registers, X86_64Layout) {
  const Registers r = Sample();
  const std::string g = EncodeRegisters(Arch::kX86_64, r);
  EXPECT_EQ(g.substr(0, 16), "8877665544332211");     // rax
  EXPECT_EQ(g.substr(16, 16), Le(0xbb, 8));           // rbx (gpr[kRbx], GDB's second)
  EXPECT_EQ(g.substr(2 * 128, 16), Le(0xdeadbeef, 8));  // rip at 128
  EXPECT_EQ(g.substr(2 * 136, 8), "46020000");        // eflags at 136
  EXPECT_EQ(g.substr(2 * 140, 8), "10000000");        // cs: the selector only
  EXPECT_EQ(g.substr(2 * 144, 8), "18000000");        // ss
  EXPECT_EQ(g.substr(2 * 276, 32), "000102030405060708090a0b0c0d0e0f");  // xmm0 at 276
  EXPECT_EQ(g.substr(2 * 532, 8), "801f0000");                           // mxcsr at 532
  EXPECT_EQ(g.substr(2 * 536, 16), Le(0x7000, 8));                       // fs_base
  EXPECT_EQ(g.substr(2 * 544, 16), Le(0x8000, 8));                       // gs_base
  EXPECT_EQ(g.substr(2 * 552, 16), Le(0x9000, 8));                       // k_gs_base
  EXPECT_EQ(g.substr(2 * 560, 16), Le(0x80000011, 8));                   // cr0
  EXPECT_EQ(g.substr(2 * 592, 16), Le(2, 8));                            // cr8
  EXPECT_EQ(g.substr(2 * 600, 16), Le(0x500, 8));                        // efer
  EXPECT_THAT(EncodeRegister(Arch::kX86_64, 16, r), Optional(Le(0xdeadbeef, 8)));
  EXPECT_THAT(EncodeRegister(Arch::kX86_64, 2, r), Optional(Le(r.st.gpr[vcpu::kRcx], 8)));
  EXPECT_EQ(EncodeRegister(Arch::kX86_64, 66, r), std::nullopt);
  EXPECT_EQ(EncodeRegister(Arch::kX86_64, -1, r), std::nullopt);
}

TEST(Registers, I386IsLow32BitsAndZeroExtendsWrites) {
  Registers r = Sample();
  const std::string g = EncodeRegisters(Arch::kI386, r);
  EXPECT_EQ(g.substr(0, 8), "88776655");  // eax = low half of rax
  EXPECT_EQ(g.substr(2 * 12, 8), "bb000000");  // ebx is fourth in 32bit-core.xml
  EXPECT_EQ(g.substr(2 * 32, 8), "efbeadde");  // eip at 32
  VBTS_ASSERT_OK(DecodeRegister(Arch::kI386, 0, "78563412", r));
  EXPECT_EQ(r.st.gpr[vcpu::kRax], 0x12345678u);  // upper half cleared
  VBTS_ASSERT_OK(DecodeRegister(Arch::kI386, 8, "00001000", r));
  EXPECT_EQ(r.st.rip, 0x100000u);
  VBTS_ASSERT_OK(DecodeRegister(Arch::kI386, 43, "01000000", r));
  EXPECT_EQ(r.st.cr0, 1u);
  VBTS_ASSERT_OK(DecodeRegister(Arch::kI386, 47, "00050000", r));
  EXPECT_EQ(r.st.efer, 0x500u);
}

TEST(Registers, SegmentWriteChangesOnlyTheSelector) {
  Registers r = Sample();
  const vcpu::Segment before = r.st.cs;
  VBTS_ASSERT_OK(DecodeRegister(Arch::kX86_64, *RegisterNumber(Arch::kX86_64, "cs"), "2b000000", r));
  EXPECT_EQ(r.st.cs.selector, 0x2b);
  EXPECT_EQ(r.st.cs.base, before.base);
  EXPECT_EQ(r.st.cs.limit, before.limit);
}

TEST(Registers, X87TagWord) {
  Registers r;
  // TOP = 6 (fsw bits 13:11 = 110b -> fsw 0x3000); ST(0) is physical 6,
  // ST(1) physical 7; both non-empty (ftw 0xc0).  ST(0) = 1.0 (exponent
  // 0x3fff, integer bit set): valid, tag 0.  ST(1) = +0.0: tag 1.
  // Physical 0-5 empty (tag 3): bits 11:0 = 0xfff; 13:12 = 0; 15:14 = 01.
  // Full tag word 0x4fff, as a 32-bit register "ff4f0000".
  r.fpu.fsw = 0x3000;
  r.fpu.ftw = 0xc0;
  SetSt(r.fpu, 0, 0x8000000000000000ull, 0x3fff);
  SetSt(r.fpu, 1, 0, 0);
  const int ftag = *RegisterNumber(Arch::kX86_64, "ftag");
  EXPECT_THAT(EncodeRegister(Arch::kX86_64, ftag, r), Optional(std::string("ff4f0000")));
  EXPECT_THAT(EncodeRegister(Arch::kX86_64, *RegisterNumber(Arch::kX86_64, "fstat"), r),
              Optional(std::string("00300000")));
  EXPECT_THAT(EncodeRegister(Arch::kX86_64, *RegisterNumber(Arch::kX86_64, "fctrl"), r),
              Optional(std::string("7f030000")));  // reset FCW 0x37f
  // st0 is ST(0)'s 10 bytes: mantissa LE then sign/exponent 3fff.
  EXPECT_THAT(EncodeRegister(Arch::kX86_64, 24, r), Optional(std::string("0000000000000080ff3f")));

  // Specials, TOP = 0 so ST(i) is physical i, all non-empty: ST(0) +inf
  // (exponent 7fff) tag 2; ST(1) denormal (exponent 0, mantissa 1) tag 2;
  // ST(2) unnormal (exponent 1, integer bit clear) tag 2; ST(3) 1.0 tag 0;
  // ST(4) zero tag 1; ST(5-7) are all-zero bytes = +0.0: tag 1.
  // Tag word (2 bits per physical register, 7..0): 01 01 01 01 00 10 10 10
  // = 0101 0101 0010 1010 = 0x552a.
  Registers s;
  s.fpu.ftw = 0xff;
  SetSt(s.fpu, 0, 0x8000000000000000ull, 0x7fff);
  SetSt(s.fpu, 1, 1, 0);
  SetSt(s.fpu, 2, 0x4000000000000000ull, 1);
  SetSt(s.fpu, 3, 0x8000000000000000ull, 0x3fff);
  EXPECT_THAT(EncodeRegister(Arch::kX86_64, ftag, s), Optional(std::string("2a550000")));
  // Empty everything: 0xffff.
  s.fpu.ftw = 0;
  EXPECT_THAT(EncodeRegister(Arch::kX86_64, ftag, s), Optional(std::string("ffff0000")));

  // Writing the full tag word keeps "empty or not" per physical register:
  // 0x4fff -> physical 6 and 7 non-empty -> ftw 0xc0.
  VBTS_ASSERT_OK(DecodeRegister(Arch::kX86_64, ftag, "ff4f0000", s));
  EXPECT_EQ(s.fpu.ftw, 0xc0);
  VBTS_ASSERT_OK(DecodeRegister(Arch::kX86_64, ftag, "00000000", s));
  EXPECT_EQ(s.fpu.ftw, 0xff);
}

TEST(Registers, UnkeptX87RegistersReadZeroAndIgnoreWrites) {
  Registers r = Sample();
  const Registers before = r;
  for (const char* name : {"fiseg", "fioff", "foseg", "fooff", "fop"}) {
    const int n = *RegisterNumber(Arch::kX86_64, name);
    EXPECT_THAT(EncodeRegister(Arch::kX86_64, n, r), Optional(std::string("00000000"))) << name;
    VBTS_ASSERT_OK(DecodeRegister(Arch::kX86_64, n, "12345678", r));
  }
  EXPECT_EQ(r.st, before.st);
  EXPECT_EQ(r.fpu, before.fpu);
}

TEST(Registers, RoundTrip) {
  for (Arch a : {Arch::kX86_64, Arch::kI386}) {
    const Registers r = Sample();
    const std::string g = EncodeRegisters(a, r);
    Registers back;
    VBTS_ASSERT_OK(DecodeRegisters(a, g, back));
    EXPECT_EQ(EncodeRegisters(a, back), g);
  }
  // Every register on its own, too.
  const Registers r = Sample();
  Registers back;
  for (int n = 0; n < RegisterCount(Arch::kX86_64); n++)
    VBTS_ASSERT_OK(DecodeRegister(Arch::kX86_64, n, *EncodeRegister(Arch::kX86_64, n, r), back));
  EXPECT_EQ(EncodeRegisters(Arch::kX86_64, back), EncodeRegisters(Arch::kX86_64, r));
}

TEST(Registers, DecodeErrors) {
  Registers r = Sample();
  const Registers before = r;
  const std::string g = EncodeRegisters(Arch::kX86_64, r);
  EXPECT_THAT(DecodeRegisters(Arch::kX86_64, g.substr(2), r),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1214 hex digits")));
  EXPECT_THAT(DecodeRegisters(Arch::kX86_64, g + "00", r),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("wants 1216")));
  std::string bad = g;
  bad[5] = 'x';
  EXPECT_THAT(DecodeRegisters(Arch::kX86_64, bad, r),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not hex")));
  EXPECT_EQ(r.st, before.st);  // failures leave the registers alone
  EXPECT_THAT(DecodeRegister(Arch::kX86_64, 16, "0011", r),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("register rip: 4 hex digits, wants 16")));
  EXPECT_THAT(DecodeRegister(Arch::kX86_64, 16, "00112233445566zz", r),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rip: value is not hex")));
  EXPECT_THAT(DecodeRegister(Arch::kI386, 48, "00000000", r),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no register 48")));
  EXPECT_THAT(DecodeRegister(Arch::kI386, -1, "00000000", r),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no register -1")));
  EXPECT_EQ(r.st, before.st);
}

}  // namespace
}  // namespace vbts::gdb
