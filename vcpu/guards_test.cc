// guards_test.cc: HandlerEntry, UndoDelivery and FindCpuidSites on the
// completer's test machine (GDT/IDT/TSS/stacks in fake memory).
//
// UndoDelivery is checked as the inverse of a delivery: the host's #UD for
// an INT n is simulated by completing `int 6` at the INT's address (the
// completer pushes exactly the frame a #UD delivery pushes through the same
// gate) and then turning the frame into a fault's: its EIP points at the
// instruction (not after it) and its EFLAGS image has RF set (SDM 17.3.1.1).
#include "vcpu/guards.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vcpu/completer_test_util.h"
#include "vcpu/supervisor.h"

namespace vbts::vcpu::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::vbts::testing::StatusIs;

std::string Show(uint64_t v) { return absl::StrFormat("0x%x", v); }
std::string Show(const CpuState& st) { return absl::StrCat("\n", st.Dump()); }

MATCHER_P(IsOkAndHolds, value, "") {
  if (!arg.ok()) {
    *result_listener << "status " << arg.status();
    return false;
  }
  if (!(*arg == value)) {
    *result_listener << "holds " << Show(*arg) << "\nexpected " << Show(value);
    return false;
  }
  return true;
}

constexpr uint16_t kCodeBased = 0x78;  // GDT index 15: 32-bit code, DPL0, base 0x10000
constexpr uint64_t kRfBit = 1ull << 16;

class GuardsTest : public CompleterTest {
 protected:
  GuardsTest() { Put(15, MakeSegmentDescriptor(0x10000, 0xfffff, 0xa, true, 0, true, true, false, true)); }

  // `st` executes `int 0x40` at its RIP; the host delivers #UD through
  // IDT[6] instead. Returns the state at the #UD handler's first
  // instruction, with the fault's frame.
  CpuState DeliverUd(const CpuState& st) {
    CpuState d = st;
    Completion c = Run(d, {0xcd, 0x06});
    EXPECT_TRUE(c.retired()) << c.ToString();
    const bool ia32e = st.long_mode_active();
    const uint64_t frame = d.gpr[kRsp];
    if (ia32e) {
      Write64(frame, st.rip);                         // RIP of the faulting instruction
      Write64(frame + 16, Read64(frame + 16) | kRfBit);  // RFLAGS image with RF
    } else {
      Write32(frame, static_cast<uint32_t>(st.rip));
      Write32(frame + 8, Read32(frame + 8) | static_cast<uint32_t>(kRfBit));
    }
    return d;
  }
};

TEST_F(GuardsTest, HandlerEntryPm32AddsTheCodeSegmentBase) {
  CpuState st = Pm32(0);
  Gate32(6, MakeGate(kIntGate32, kCode32K, 0x5000, 0));
  EXPECT_THAT(HandlerEntry(st, mem_, 6), IsOkAndHolds(0x5000u));
  Gate32(6, MakeGate(kTrapGate32, kCodeBased, 0x5000, 0));
  EXPECT_THAT(HandlerEntry(st, mem_, 6), IsOkAndHolds(0x15000u));  // base 0x10000 + offset 0x5000
}

TEST_F(GuardsTest, HandlerEntryLm64UsesTheWholeOffsetAndTouchesNothing) {
  CpuState st = Lm64(3);
  Gate64(6, MakeGate(kIntGate32, kCode64K, 0x123456789aull, 0));
  const std::vector<uint8_t> before = mem_.bytes();
  EXPECT_THAT(HandlerEntry(st, mem_, 6), IsOkAndHolds(0x123456789aull));
  EXPECT_TRUE(mem_.bytes() == before) << "reading the IDT must not set Accessed flags";
}

TEST_F(GuardsTest, HandlerEntryRefusesWhatIsNotAUsableGate) {
  CpuState st = Pm32(0);
  Gate32(6, MakeGate(kIntGate32, kCode32K, 0x5000, 0, /*present=*/false));
  EXPECT_THAT(HandlerEntry(st, mem_, 6), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not present")));
  Gate32(6, MakeGate(kTaskGate, kTssSel, 0, 0));
  EXPECT_THAT(HandlerEntry(st, mem_, 6), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("type 0x5")));
  Gate32(6, MakeGate(kIntGate16, kCode32K, 0x5000, 0));
  EXPECT_THAT(HandlerEntry(st, mem_, 6), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("type 0x6")));
  Gate32(6, MakeGate(kIntGate32, kData32K, 0x5000, 0));
  EXPECT_THAT(HandlerEntry(st, mem_, 6),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a code segment")));
  Gate32(6, MakeGate(kIntGate32, kCodeNp, 0x5000, 0));
  EXPECT_THAT(HandlerEntry(st, mem_, 6), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not present")));
  st.idtr.limit = 6 * 8 + 6;  // one byte short of the gate
  Gate32(6, MakeGate(kIntGate32, kCode32K, 0x5000, 0));
  EXPECT_THAT(HandlerEntry(st, mem_, 6), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("IDT limit")));
  EXPECT_THAT(HandlerEntry(Real(), mem_, 6), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("real mode")));
}

TEST_F(GuardsTest, UndoPm32Cpl3DeliveryWithStackSwitch) {
  CpuState st = Pm32(3);
  Gate32(6, MakeGate(kIntGate32, kCode32K, 0x5000, 3));
  CpuState d = DeliverUd(st);
  ASSERT_EQ(d.cpl(), 0);
  ASSERT_EQ(d.gpr[kRsp], kKernelStack - 20u);  // SS, ESP, EFLAGS, CS, EIP on the TSS stack
  EXPECT_THAT(UndoDelivery(d, mem_), IsOkAndHolds(st));
}

TEST_F(GuardsTest, UndoPm32Cpl0DeliveryWithoutStackSwitch) {
  CpuState st = Pm32(0);
  Gate32(6, MakeGate(kIntGate32, kCode32K, 0x5000, 0));
  CpuState d = DeliverUd(st);
  ASSERT_EQ(d.gpr[kRsp], kKernelStack - 12u);  // EFLAGS, CS, EIP only
  EXPECT_THAT(UndoDelivery(d, mem_), IsOkAndHolds(st));
}

TEST_F(GuardsTest, UndoPm32DeliveryKeepsTheUpperHalfOfA16BitStackPointer) {
  CpuState st = Pm32(0);
  st.ss = Seg(kData16U);
  st.ss.dpl = 0;
  st.ss.selector = kData32K;  // only B=0 matters here
  st.gpr[kRsp] = 0xabcd0000u | 0x8000u;
  Gate32(6, MakeGate(kIntGate32, kCode32K, 0x5000, 0));
  // The delivery pushed at SS:SP 0x7ff4..0x7fff (SP wraps within 16 bits).
  CpuState d = st;
  d.gpr[kRsp] = 0xabcd0000u | 0x7ff4u;
  d.cs = Seg(kCode32K);
  d.rip = 0x5000;
  d.rflags = 0x2;
  Frame(0x7ff4, {kCodeRip, kCode32K, 0x202 | kRfBit}, 4);
  EXPECT_THAT(UndoDelivery(d, mem_), IsOkAndHolds(st));
}

TEST_F(GuardsTest, UndoLm64Cpl3Delivery) {
  CpuState st = Lm64(3);
  Gate64(6, MakeGate(kIntGate32, kCode64K, 0x5000, 3));
  CpuState d = DeliverUd(st);
  ASSERT_EQ(d.gpr[kRsp], kKernelStack - 40u);  // 5 slots on TSS.RSP0
  EXPECT_THAT(UndoDelivery(d, mem_), IsOkAndHolds(st));
}

TEST_F(GuardsTest, UndoLm64Cpl0DeliveryOnAnIstStackWithNullSs) {
  CpuState st = Lm64(0);
  st.ss = NullSegment(0, 0);  // 64-bit ring 0 may run with a null SS
  st.gpr[kRsp] = kKernelStack - 0x108;
  Gate64(6, MakeGate(kIntGate32, kCode64K, 0x5000, 0, true, /*ist=*/1));
  CpuState d = DeliverUd(st);
  ASSERT_EQ(d.gpr[kRsp], kIstStack - 40u);
  EXPECT_THAT(UndoDelivery(d, mem_), IsOkAndHolds(st));
}

TEST_F(GuardsTest, UndoCompatModeCpl3Delivery) {
  CpuState st = Compat32(3);
  Gate64(6, MakeGate(kIntGate32, kCode64K, 0x5000, 3));
  CpuState d = DeliverUd(st);
  EXPECT_THAT(UndoDelivery(d, mem_), IsOkAndHolds(st));
}

TEST_F(GuardsTest, UndoRefusesFramesThatCannotBeADelivery) {
  CpuState st = Pm32(3);
  Gate32(6, MakeGate(kIntGate32, kCode32K, 0x5000, 3));
  CpuState d = DeliverUd(st);
  const uint64_t frame = d.gpr[kRsp];
  Write32(frame + 4, kData32U);  // CS slot names a data segment
  EXPECT_THAT(UndoDelivery(d, mem_),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a code segment")));
  Write32(frame + 4, kCode32U);
  Write32(frame + 8, 0x20202);  // EFLAGS.VM: a virtual-8086 frame
  EXPECT_THAT(UndoDelivery(d, mem_), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("virtual-8086")));
  CpuState lm = Lm64(0);
  lm.gpr[kRsp] = 0x40000000;  // beyond the 4 MiB identity map
  EXPECT_THAT(UndoDelivery(lm, mem_), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not mapped")));
}

TEST(FindCpuidSitesTest, FindsEveryOpcodePair) {
  // 90 | 0f a2 | 0f | 0f a2 | 0f: sites at offsets 1 and 4; the trailing 0f is no CPUID.
  const uint8_t code[] = {0x90, 0x0f, 0xa2, 0x0f, 0x0f, 0xa2, 0x0f};
  EXPECT_THAT(FindCpuidSites(code, sizeof code, 0x1000), ElementsAre(0x1001u, 0x1004u));
  EXPECT_TRUE(FindCpuidSites(code, 1, 0x1000).empty());
}

}  // namespace
}  // namespace vbts::vcpu::testing

namespace vbts::vcpu {
namespace {

using ::testing::ElementsAre;

TEST(ConfirmInstructionStartsTest, OnlyDecodedInstructionStartsQualify) {
  // 0x1000: mov eax, 0x0FA20FA2 (B8 A2 0F A2 0F: a 0F A2 pair inside the
  //         immediate at 0x1002 - no instruction starts there)
  // 0x1005: cpuid (0F A2)            <- a start in 32- and 64-bit decoding
  // 0x1007: mov ecx, 7 (B9 07 00 00 00)
  // 0x100C: cpuid                    <- a start
  const uint8_t code[] = {0xB8, 0xA2, 0x0F, 0xA2, 0x0F, 0x0F, 0xA2, 0xB9, 0x07, 0x00,
                          0x00, 0x00, 0x0F, 0xA2};
  const std::vector<uint64_t> sites = FindCpuidSites(code, sizeof code, 0x1000);
  EXPECT_THAT(sites, ElementsAre(0x1002u, 0x1005u, 0x100Cu));
  EXPECT_THAT(ConfirmInstructionStarts(code, sizeof code, 0x1000, sites), ElementsAre(0x1005u, 0x100Cu));
}

TEST(ConfirmInstructionStartsTest, SitesOutsideTheCodeAreNotConfirmed) {
  const uint8_t code[] = {0x0F, 0xA2};
  EXPECT_THAT(ConfirmInstructionStarts(code, sizeof code, 0x1000, {0x1000, 0x0FFF, 0x1002}), ElementsAre(0x1000u));
}

}  // namespace
}  // namespace vbts::vcpu
