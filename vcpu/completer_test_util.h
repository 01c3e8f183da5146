// completer_test_util.h: a tiny machine for completer tests: GDT, IDT, TSS,
// stacks and (for lm64) identity page tables in a FakePhysMemory, plus
// CpuStates for pm32/lm64/compat/real mode at CPL 0 and 3.
#ifndef VBTS_VCPU_COMPLETER_TEST_UTIL_H_
#define VBTS_VCPU_COMPLETER_TEST_UTIL_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "pmu/testing/fake_memory.h"
#include "pmu/testing/page_tables.h"
#include "base/testing/status_matchers.h"
#include "vcpu/completer.h"
#include "vcpu/decoder.h"
#include "vcpu/descriptors.h"

namespace vbts::vcpu::testing {

// Memory map (all guest-physical = linear; lm64 maps 0..4 MiB 1:1).
inline constexpr uint64_t kGdt = 0x1000;
inline constexpr uint16_t kGdtLimit = 0xff;  // 32 descriptors
inline constexpr uint64_t kIdt = 0x2000;
inline constexpr uint64_t kTss = 0x3000;    // 32-bit TSS (pm32)
inline constexpr uint64_t kTss64 = 0x3400;  // 64-bit TSS (lm64, compat)
inline constexpr uint64_t kPageTables = 0x200000;
inline constexpr uint64_t kKernelStack = 0x9000;  // TSS ESP0/RSP0
inline constexpr uint64_t kIstStack = 0xa000;     // TSS IST1
inline constexpr uint64_t kUserStack = 0x7000;
inline constexpr uint64_t kCodeRip = 0x100;

// GDT layout (selector = index * 8 | RPL).
inline constexpr uint16_t kCode32K = 0x08;   // 1: flat 32-bit code, DPL0
inline constexpr uint16_t kData32K = 0x10;   // 2: flat data, DPL0
inline constexpr uint16_t kCode32U = 0x1b;   // 3: flat 32-bit code, DPL3
inline constexpr uint16_t kData32U = 0x23;   // 4: flat data, DPL3
inline constexpr uint16_t kCode64K = 0x28;   // 5: 64-bit code, DPL0
inline constexpr uint16_t kCode64U = 0x33;   // 6: 64-bit code, DPL3
inline constexpr uint16_t kConfK = 0x38;     // 7: conforming 32-bit code, DPL0
inline constexpr uint16_t kTssSel = 0x40;    // 8: 32-bit TSS at kTss
inline constexpr uint16_t kCodeNp = 0x50;    // 10: 32-bit code DPL0, not present
inline constexpr uint16_t kDataNpU = 0x5b;   // 11: data DPL3, not present
inline constexpr uint16_t kData16U = 0x63;   // 12: 16-bit (B=0) data, DPL3
inline constexpr uint16_t kCallGate = 0x68;  // 13: 32-bit call gate
inline constexpr uint16_t kCodeLD = 0x70;    // 14: code with L=1 and D=1 (invalid in IA-32e)
inline constexpr uint16_t kTss64Sel = 0x80;  // 16-17: 64-bit TSS at kTss64

inline constexpr uint64_t kEflagsIf = 0x202;

class CompleterTest : public ::testing::Test {
 public:
  CompleterTest() : mem_(4 << 20) {
    Put(1, MakeCode32(0));
    Put(2, MakeData32(0));
    Put(3, MakeCode32(3));
    Put(4, MakeData32(3));
    Put(5, MakeCode64(0));
    Put(6, MakeCode64(3));
    Put(7, MakeCode32(0, /*conforming=*/true));
    Put(10, MakeSegmentDescriptor(0, 0xfffff, 0xa, true, 0, /*present=*/false, true, false, true));
    Put(11, MakeSegmentDescriptor(0, 0xfffff, 0x2, true, 3, /*present=*/false, true, false, true));
    Put(12, MakeSegmentDescriptor(0, 0xffff, 0x2, true, 3, true, /*db=*/false, false, false));
    Put(13, MakeGate(kCallGate32, kCode32K, 0x5000, 3));
    Put(14, MakeSegmentDescriptor(0, 0xfffff, 0xa, true, 0, true, /*db=*/true, /*l=*/true, true));
    Put(8, MakeSystemDescriptor(kTss32Busy, kTss, 0x67));
    Write32(kTss + 4, kKernelStack);  // ESP0
    Write16(kTss + 8, kData32K);      // SS0
    Put16(16, MakeSystemDescriptor(kTss32Busy, kTss64, 0x67));
    Write64(kTss64 + 4, kKernelStack);  // RSP0
    Write64(kTss64 + 0x24, kIstStack);  // IST1
    ::vbts::testing::PageTables4 pt(mem_, kPageTables);
    pt.Map(0, 0, ::vbts::testing::kPtW | ::vbts::testing::kPtU, /*level=*/2);
    pt.Map(0x200000, 0x200000, ::vbts::testing::kPtW | ::vbts::testing::kPtU, /*level=*/2);
    cr3_ = pt.pml4();
  }

  bool Accessed(int index) { return (Get(index).lo >> 40) & 1; }

  // --- memory helpers ---
  void Put(int index, const Descriptor& d) { Write64(kGdt + index * 8, d.lo); }
  void Put16(int index, const Descriptor& d) {
    Write64(kGdt + index * 8, d.lo);
    Write64(kGdt + index * 8 + 8, d.hi);
  }
  Descriptor Get(int index) { return Descriptor{Read64(kGdt + index * 8), 0}; }
  Segment Seg(uint16_t sel) { return SegmentFromDescriptor(Get(sel >> 3), sel); }
  void Gate32(int vec, const Descriptor& g) { Write64(kIdt + vec * 8, g.lo); }
  void Gate64(int vec, const Descriptor& g) {
    Write64(kIdt + vec * 16, g.lo);
    Write64(kIdt + vec * 16 + 8, g.hi);
  }
  void Write16(uint64_t a, uint16_t v) { std::memcpy(mem_.bytes().data() + a, &v, 2); }
  void Write32(uint64_t a, uint32_t v) { std::memcpy(mem_.bytes().data() + a, &v, 4); }
  void Write64(uint64_t a, uint64_t v) { std::memcpy(mem_.bytes().data() + a, &v, 8); }
  uint16_t Read16(uint64_t a) { uint16_t v; std::memcpy(&v, mem_.bytes().data() + a, 2); return v; }
  uint32_t Read32(uint64_t a) { uint32_t v; std::memcpy(&v, mem_.bytes().data() + a, 4); return v; }
  uint64_t Read64(uint64_t a) { uint64_t v; std::memcpy(&v, mem_.bytes().data() + a, 8); return v; }
  // Writes values of `size` bytes upward from `addr` (a stack frame, lowest first).
  void Frame(uint64_t addr, std::initializer_list<uint64_t> vals, size_t size) {
    for (uint64_t v : vals) {
      std::memcpy(mem_.bytes().data() + addr, &v, size);
      addr += size;
    }
  }

  // --- CPU states ---
  CpuState Pm32(int cpl) {
    CpuState st;
    st.cr0 = kCr0Pe;
    st.gdtr = {kGdt, kGdtLimit};
    st.idtr = {kIdt, 256 * 8 - 1};
    st.tr = SegmentFromDescriptor(Get(8), kTssSel);
    st.tr.type = kTss32Busy;
    st.cs = Seg(cpl ? kCode32U : kCode32K);
    st.ss = Seg(cpl ? kData32U : kData32K);
    st.ds = st.es = st.fs = st.gs = st.ss;
    st.rip = kCodeRip;
    st.gpr[kRsp] = cpl ? kUserStack : kKernelStack;
    st.rflags = kEflagsIf;
    return st;
  }
  CpuState Lm64(int cpl) {
    CpuState st;
    st.cr0 = kCr0Pe | kCr0Pg;
    st.cr4 = kCr4Pae;
    st.efer = kEferLme | kEferLma | kEferSce;
    st.cr3 = cr3_;
    st.gdtr = {kGdt, kGdtLimit};
    st.idtr = {kIdt, 256 * 16 - 1};
    st.tr = SegmentFromDescriptor(Get(16), kTss64Sel);
    st.tr.type = kTss32Busy;  // 64-bit busy TSS (same type value)
    st.cs = Seg(cpl ? kCode64U : kCode64K);
    st.ss = Seg(cpl ? kData32U : kData32K);
    st.ds = st.es = st.ss;
    st.fs = st.gs = NullSegment(0);
    st.rip = kCodeRip;
    st.gpr[kRsp] = cpl ? kUserStack : kKernelStack;
    st.rflags = kEflagsIf;
    return st;
  }
  CpuState Compat32(int cpl) {
    CpuState st = Lm64(cpl);
    st.cs = Seg(cpl ? kCode32U : kCode32K);
    return st;
  }
  CpuState Real() {
    CpuState st;
    st.cs.limit = st.ss.limit = st.ds.limit = 0xffff;
    st.cs.present = st.ss.present = true;
    st.cs.s = st.ss.s = true;
    st.cs.type = 0xb;
    st.ss.type = 0x3;
    st.idtr = {0, 0x3ff};
    st.rip = kCodeRip;
    st.gpr[kRsp] = kUserStack;
    st.rflags = kEflagsIf;
    return st;
  }

  // Decodes `bytes` in st's mode and completes it; fails the test on a
  // non-OK status.
  Completion Run(CpuState& st, std::vector<uint8_t> bytes) {
    auto insn = DecodeBytes(bytes, DecodeModeOf(st));
    EXPECT_THAT(insn, ::vbts::testing::IsOk());
    if (!insn.ok()) return Completion{};
    auto c = Complete(st, mem_, *insn, cpuid_);
    EXPECT_THAT(c, ::vbts::testing::IsOk());
    return c.value_or(Completion{});
  }
  absl::StatusOr<Completion> TryRun(CpuState& st, std::vector<uint8_t> bytes) {
    auto insn = DecodeBytes(bytes, DecodeModeOf(st));
    if (!insn.ok()) return insn.status();
    return Complete(st, mem_, *insn, cpuid_);
  }
  // Runs, expects a fault with `vector`/`error`, and that neither the state
  // nor memory changed (except A/D flags in the page tables, which walks that
  // succeeded before the fault may set, as on hardware).
  void ExpectFault(CpuState st, std::vector<uint8_t> bytes, uint8_t vector, std::optional<uint32_t> error,
                   uint64_t cr2 = 0) {
    const CpuState before = st;
    const std::vector<uint8_t> mem_before = mem_.bytes();
    Completion c = Run(st, bytes);
    ASSERT_TRUE(c.faulted()) << c.ToString();
    EXPECT_EQ(c.fault.vector, vector) << c.ToString();
    EXPECT_EQ(c.fault.error_code, error) << c.ToString();
    EXPECT_EQ(c.fault.cr2, cr2);
    EXPECT_TRUE(st == before) << "state changed:\n" << st.Dump() << "was:\n" << before.Dump();
    std::vector<uint8_t> now = mem_.bytes();
    std::vector<uint8_t> was = mem_before;
    std::fill(now.begin() + kPageTables, now.begin() + kPageTables + 0x10000, 0);
    std::fill(was.begin() + kPageTables, was.begin() + kPageTables + 0x10000, 0);
    EXPECT_TRUE(now == was) << "memory changed";
  }

  ::vbts::testing::FakePhysMemory mem_;
  uint64_t cr3_ = 0;
  CpuidFn cpuid_ = [](uint32_t leaf, uint32_t subleaf) {
    return CpuidResult{leaf + 1, subleaf + 2, 0x6c65746e, 0x49656e69};
  };
};

}  // namespace vbts::vcpu::testing

#endif  // VBTS_VCPU_COMPLETER_TEST_UTIL_H_
