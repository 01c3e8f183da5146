// intel_iommu_test.cc: the VT-d unit's registers, DMA and interrupt
// remapping. Every expected value follows from the VT-d spec's layouts as
// vmm/intel_iommu.h cites them: CAP/ECAP fields, GCMD/GSTS bits, root and
// context entries, second-level entries, IRTEs, fault recording.
#include "vmm/intel_iommu.h"

#include <gtest/gtest.h>

#include <vector>

#include "pmu/testing/fake_memory.h"

namespace vbts::vmm {
namespace {

constexpr uint32_t kGcmd = 0x18, kGsts = 0x1C, kRtaddr = 0x20, kFsts = 0x34, kFectl = 0x38, kFedata = 0x3C,
                   kFeaddr = 0x40, kIqh = 0x80, kIqt = 0x88, kIqa = 0x90, kIcs = 0x9C, kIrta = 0xB8, kFrcd = 0x220;
constexpr uint32_t kTe = 1u << 31, kSrtp = 1u << 30, kQie = 1u << 26, kIre = 1u << 25, kSirtp = 1u << 24,
                   kCfi = 1u << 23;
// Guest memory layout of the tests.
constexpr uint64_t kRoot = 0x1000, kContext = 0x2000, kL3 = 0x3000, kL2 = 0x4000, kL1 = 0x5000, kIrt = 0x6000,
                   kQueue = 0x7000, kStatus = 0x8000;
constexpr uint16_t kSid = 0x0118;  // bus 1, device 3, function 0

class IntelIommuTest : public ::testing::Test {
 protected:
  IntelIommuTest() : iommu_(ram_, [this](const MsiMessage& m) { events_.push_back(m); }) {}

  void Put64(uint64_t at, uint64_t v) { ASSERT_TRUE(ram_.WriteLe<uint64_t>(Gpa(at), v).ok()); }
  uint32_t Get32(uint64_t at) { return *ram_.ReadLe<uint32_t>(Gpa(at)); }
  void Command(uint32_t bit) {
    // As software must (VT-d spec 10.4.4): the status with one bit changed,
    // one-shot bits (SRTP, SIRTP) left out.
    const uint32_t status = static_cast<uint32_t>(iommu_.MmioRead(kGsts, 4)) & ~(kSrtp | kSirtp);
    iommu_.MmioWrite(kGcmd, 4, status | bit);
  }
  void ClearCommand(uint32_t bit) {
    const uint32_t status = static_cast<uint32_t>(iommu_.MmioRead(kGsts, 4)) & ~(kSrtp | kSirtp);
    iommu_.MmioWrite(kGcmd, 4, status & ~bit);
  }
  // Root entry for bus 1 -> context table; context entry devfn 0x18 with
  // the given low qword flags (P set unless `flags` says otherwise), AW 1
  // (3 levels) -> L3 -> L2 -> L1; L1[5] maps IOVA 0x5000 to 0x9000 (R/W
  // as `pte_rw`).
  void MapOnePage(uint64_t ctx_low_flags = 1, uint64_t pte_rw = 3) {
    Put64(kRoot + 16 * 1, kContext | 1);
    Put64(kContext + 16 * 0x18, kL3 | ctx_low_flags);
    Put64(kContext + 16 * 0x18 + 8, 1 | (7ull << 8));  // AW 1, DID 7
    Put64(kL3, kL2 | 3);
    Put64(kL2, kL1 | 3);
    Put64(kL1 + 8 * 5, 0x9000 | pte_rw);
    iommu_.MmioWrite(kRtaddr, 8, kRoot);
    Command(kSrtp);
    Command(kTe);
  }

  testing::FakePhysMemory ram_{0x100000};
  std::vector<MsiMessage> events_;
  IntelIommu iommu_;
};

TEST_F(IntelIommuTest, CapabilitiesAsDocumented) {
  EXPECT_EQ(iommu_.MmioRead(0x00, 4), 0x10u);  // version 1.0
  // ND 6 | SAGAW 0x6 << 8 | MGAW 47 << 16 | FRO 0x22 << 24 | SLLPS 3 << 34.
  EXPECT_EQ(iommu_.MmioRead(0x08, 8), 0x0000000C222F0606ull);
  EXPECT_EQ(iommu_.MmioRead(0x0C, 4), 0x0000000Cu);  // the upper half alone
  // C | QI | IR | EIM | PT | IRO 0xF << 8 | MHMV 0xF << 20.
  EXPECT_EQ(iommu_.MmioRead(0x10, 8), 0x0000000000F00F5Bull);
  // Reset: nothing enabled, no fault, both event interrupts masked.
  EXPECT_EQ(iommu_.MmioRead(kGsts, 4), 0u);
  EXPECT_EQ(iommu_.MmioRead(kFsts, 4), 0u);
  EXPECT_EQ(iommu_.MmioRead(kFectl, 4), 0x80000000u);
  // Unaligned and 1- or 2-byte accesses: nothing.
  EXPECT_EQ(iommu_.MmioRead(0x09, 4), 0u);
  EXPECT_EQ(iommu_.MmioRead(0x08, 2), 0u);
}

TEST_F(IntelIommuTest, GlobalCommandsShowInTheStatus) {
  iommu_.MmioWrite(kRtaddr, 8, kRoot | 0xFFF);  // bits 11:0 are not kept
  EXPECT_EQ(iommu_.MmioRead(kRtaddr, 8), kRoot);
  Command(kSrtp);
  EXPECT_EQ(iommu_.MmioRead(kGsts, 4), kSrtp);  // RTPS stays set
  EXPECT_EQ(iommu_.MmioRead(kGcmd, 4), 0u);     // GCMD reads 0
  Command(kQie);
  Command(kIre);
  Command(kSirtp);
  Command(kCfi);
  Command(kTe);
  EXPECT_EQ(iommu_.MmioRead(kGsts, 4), kTe | kSrtp | kQie | kIre | kSirtp | kCfi);
  EXPECT_TRUE(iommu_.translation_enabled());
  EXPECT_TRUE(iommu_.remapping_enabled());
  ClearCommand(kTe);
  ClearCommand(kIre);
  EXPECT_EQ(iommu_.MmioRead(kGsts, 4), kSrtp | kQie | kSirtp | kCfi);
}

TEST_F(IntelIommuTest, WithoutTranslationDmaGoesWhereItIsAddressed) {
  EXPECT_EQ(iommu_.TranslateDma(kSid, 0x12345, true), 0x12345u);
}

TEST_F(IntelIommuTest, ThreeLevelWalkTranslatesAPage) {
  MapOnePage();
  EXPECT_EQ(iommu_.TranslateDma(kSid, 0x5ABC, /*write=*/true), 0x9ABCu);
  EXPECT_EQ(iommu_.TranslateDma(kSid, 0x5000, /*write=*/false), 0x9000u);
  EXPECT_EQ(iommu_.MmioRead(kFsts, 4), 0u);
}

TEST_F(IntelIommuTest, SuperpagesAtLevelTwoAndThree) {
  MapOnePage();
  Put64(kL2 + 8 * 1, 0x00400000 | (1 << 7) | 3);  // IOVA 2 MiB..4 MiB -> 4 MiB, a 2-MiB page
  EXPECT_EQ(iommu_.TranslateDma(kSid, 0x00212345, false), 0x00412345u);
  Put64(kL3 + 8 * 1, 0x80000000ull | (1 << 7) | 3);  // IOVA 1 GiB.. -> 2 GiB, a 1-GiB page
  EXPECT_EQ(iommu_.TranslateDma(kSid, 0x40012345, false), 0x80012345u);
}

TEST_F(IntelIommuTest, PassThroughContextUsesTheAddressItself) {
  MapOnePage(/*ctx_low_flags=*/1 | (2 << 2));  // TT 2
  EXPECT_EQ(iommu_.TranslateDma(kSid, 0xABC000, true), 0xABC000u);
}

TEST_F(IntelIommuTest, AFaultIsRecordedWithItsReasonAndSignalled) {
  MapOnePage(1, /*pte_rw=*/1);  // read only
  iommu_.MmioWrite(kFedata, 4, 0x41);
  iommu_.MmioWrite(kFeaddr, 4, 0xFEE00000);
  iommu_.MmioWrite(kFectl, 4, 0);  // unmask the fault event
  EXPECT_EQ(iommu_.TranslateDma(kSid, 0x5010, /*write=*/true), std::nullopt);
  // FSTS.PPF; the record: FI = the page, SID, reason 5 (write), T = 0
  // (a write), F.
  EXPECT_EQ(iommu_.MmioRead(kFsts, 4), 0x2u);
  EXPECT_EQ(iommu_.MmioRead(kFrcd, 8), 0x5000u);
  EXPECT_EQ(iommu_.MmioRead(kFrcd + 8, 8), (1ull << 63) | (0x05ull << 32) | kSid);
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0], (MsiMessage{0xFEE00000, 0x41}));
  // A second fault while F is set overflows (PFO); F cleared (W1C) ends PPF.
  EXPECT_EQ(iommu_.TranslateDma(kSid, 0x7000, false), std::nullopt);  // L1[7] not present: a read fault
  EXPECT_EQ(iommu_.MmioRead(kFsts, 4), 0x3u);
  iommu_.MmioWrite(kFrcd + 12, 4, 0x80000000);
  iommu_.MmioWrite(kFsts, 4, 0x1);
  EXPECT_EQ(iommu_.MmioRead(kFsts, 4), 0u);
  // Now the read fault is recorded: reason 6, T = 1.
  EXPECT_EQ(iommu_.TranslateDma(kSid, 0x7000, false), std::nullopt);
  EXPECT_EQ(iommu_.MmioRead(kFrcd + 8, 8), (1ull << 63) | (1ull << 62) | (0x06ull << 32) | kSid);
}

TEST_F(IntelIommuTest, FaultReasonsOfTheWalk) {
  MapOnePage();
  const auto reason = [&](uint16_t sid, uint64_t iova) {
    iommu_.MmioWrite(kFrcd + 12, 4, 0x80000000);  // clear the last record
    EXPECT_EQ(iommu_.TranslateDma(sid, iova, false), std::nullopt);
    return static_cast<int>((iommu_.MmioRead(kFrcd + 8, 8) >> 32) & 0xFF);
  };
  EXPECT_EQ(reason(0x0218, 0x5000), 0x01);              // bus 2: root entry not present
  EXPECT_EQ(reason(0x0120, 0x5000), 0x02);              // devfn 0x20: context entry not present
  EXPECT_EQ(reason(kSid, 1ull << 39), 0x04);            // beyond the 39-bit width
  Put64(kContext + 16 * 0x18 + 8, 3);                   // AW 3: not in SAGAW
  EXPECT_EQ(reason(kSid, 0x5000), 0x03);
  Put64(kContext + 16 * 0x18 + 8, 1 | (1ull << 40));    // a reserved bit
  EXPECT_EQ(reason(kSid, 0x5000), 0x0B);
  Put64(kContext + 16 * 0x18 + 8, 1);
  Put64(kContext + 16 * 0x18, kL3 | 1 | (1 << 2));      // TT 1: device TLB, not supported
  EXPECT_EQ(reason(kSid, 0x5000), 0x0D);
  Put64(kRoot + 16 * 1 + 8, 1);                         // root entry's upper half is reserved
  EXPECT_EQ(reason(kSid, 0x5000), 0x0A);
  // FPD in the context entry: the request fails, nothing is recorded.
  Put64(kRoot + 16 * 1 + 8, 0);
  Put64(kContext + 16 * 0x18, kL3 | 1 | 2);
  iommu_.MmioWrite(kFrcd + 12, 4, 0x80000000);
  EXPECT_EQ(iommu_.TranslateDma(kSid, 0x6000, false), std::nullopt);
  EXPECT_EQ(iommu_.MmioRead(kFsts, 4), 0u);
}

TEST_F(IntelIommuTest, InvalidationWaitWritesItsStatusAndSignals) {
  iommu_.MmioWrite(kIqa, 8, kQueue);  // QS 0: 256 descriptors
  Command(kQie);
  iommu_.MmioWrite(0xA4, 4, 0x42);        // IEDATA
  iommu_.MmioWrite(0xA8, 4, 0xFEE00000);  // IEADDR
  iommu_.MmioWrite(0xA0, 4, 0);           // unmask
  // An IOTLB invalidation (type 2), then a wait (type 5) with SW and IF:
  // status data 0xCAFE to kStatus.
  Put64(kQueue, 2 | (1 << 4));
  Put64(kQueue + 16, 5 | (1 << 4) | (1 << 5) | (0xCAFEull << 32));
  Put64(kQueue + 24, kStatus);
  iommu_.MmioWrite(kIqt, 8, 32);
  EXPECT_EQ(iommu_.MmioRead(kIqh, 8), 32u);
  EXPECT_EQ(Get32(kStatus), 0xCAFEu);
  EXPECT_EQ(iommu_.MmioRead(kIcs, 4), 1u);
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0], (MsiMessage{0xFEE00000, 0x42}));
  iommu_.MmioWrite(kIcs, 4, 1);  // IWC is write-1-to-clear
  EXPECT_EQ(iommu_.MmioRead(kIcs, 4), 0u);
  // An unsupported descriptor (type 3, device TLB): IQE, IQH stays there.
  Put64(kQueue + 32, 3);
  iommu_.MmioWrite(kIqt, 8, 48);
  EXPECT_EQ(iommu_.MmioRead(kIqh, 8), 32u);
  EXPECT_EQ(iommu_.MmioRead(kFsts, 4), 0x10u);
  // QI cannot be turned off until the queue is empty.
  ClearCommand(kQie);
  EXPECT_EQ(iommu_.MmioRead(kGsts, 4) & kQie, kQie);
}

class InterruptRemapTest : public IntelIommuTest {
 protected:
  void SetUp() override {
    iommu_.MmioWrite(kIrta, 8, kIrt | 3);  // 2^(3+1) = 16 entries
    Command(kSirtp);
    Command(kIre);
  }
  // IRTE `i`: present, vector, delivery mode, trigger, destination (xAPIC
  // bits 47:40), SID/SQ/SVT.
  void Irte(uint32_t i, uint64_t low, uint64_t high) {
    Put64(kIrt + 16 * i, low);
    Put64(kIrt + 16 * i + 8, high);
  }
  static MsiMessage Remappable(uint32_t handle, bool shv = false, uint32_t data = 0) {
    return MsiMessage{0xFEE00000ull | (handle & 0x7FFF) << 5 | 1u << 4 | (shv ? 1u << 3 : 0) | (handle >> 15) << 2,
                      data};
  }
};

TEST_F(InterruptRemapTest, AnIrteBecomesACompatibilityMessage) {
  // Vector 0xEE, lowest priority (DLM 1), level (TM), logical (DM),
  // destination 0x03, SID kSid with full validation (SVT 1).
  Irte(2, 1 | (1 << 2) | (1 << 4) | (1 << 5) | (0xEEull << 16) | (0x03ull << 40), kSid | (1ull << 18));
  std::optional<MsiMessage> m = iommu_.RemapInterrupt(kSid, Remappable(2));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->address, 0xFEE03004u);        // destination 3, logical
  EXPECT_EQ(m->data, 0xEEu | 1 << 8 | 1 << 15);  // lowest priority, level
  EXPECT_FALSE(m->x2apic_dest);  // 8 bits: FFH would be the broadcast
  // The same through SHV: handle 0 + subhandle 2.
  EXPECT_EQ(iommu_.RemapInterrupt(kSid, Remappable(0, true, 2)), m);
  // The I/O APIC's requests carry no source-id: not validated.
  EXPECT_EQ(iommu_.RemapInterrupt(std::nullopt, Remappable(2)), m);
}

TEST_F(InterruptRemapTest, X2apicModeTakesAll32DestinationBits) {
  // IRTA.EIME: DST is a 32-bit x2APIC ID (here logical cluster 2, member
  // bit 5: 0x00020020); its bits 7:0 go to address bits 19:12, 31:8 to
  // address bits 63:40.
  iommu_.MmioWrite(kIrta, 8, kIrt | (1 << 11) | 3);
  Command(kSirtp);
  EXPECT_EQ(iommu_.MmioRead(kIrta, 8), kIrt | (1 << 11) | 3);
  Irte(1, 1 | (1 << 2) | (0x40ull << 16) | (0x00020020ull << 32), 0);
  std::optional<MsiMessage> m = iommu_.RemapInterrupt(kSid, Remappable(1));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->address, 0xFEE20004ull | (0x000200ull << 40));
  EXPECT_EQ(m->data, 0x40u);
  EXPECT_TRUE(m->x2apic_dest);
  // x2APIC ID FFH is one APIC, not the 8-bit broadcast: the message says so.
  Irte(3, 1 | (0x41ull << 16) | (0xFFull << 32), 0);
  m = iommu_.RemapInterrupt(kSid, Remappable(3));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->address, 0xFEEFF000u);
  EXPECT_TRUE(m->x2apic_dest);
  EXPECT_EQ(MsiTarget::Of(*m)->dest, 0xFFu);
  // In x2APIC mode compatibility-format requests are blocked even with CFI.
  Command(kCfi);
  EXPECT_EQ(iommu_.RemapInterrupt(kSid, MsiMessage{0xFEE00000, 0x30}), std::nullopt);
  EXPECT_EQ((iommu_.MmioRead(kFrcd + 8, 8) >> 32) & 0xFF, 0x25u);
}

TEST_F(InterruptRemapTest, FaultsOfInterruptRemapping) {
  Irte(1, 1 | (0x30ull << 16), kSid | (1ull << 18));
  const auto reason = [&](std::optional<uint16_t> sid, const MsiMessage& req) {
    iommu_.MmioWrite(kFrcd + 12, 4, 0x80000000);
    EXPECT_EQ(iommu_.RemapInterrupt(sid, req), std::nullopt);
    return static_cast<int>((iommu_.MmioRead(kFrcd + 8, 8) >> 32) & 0xFF);
  };
  EXPECT_EQ(reason(0x0119, Remappable(1)), 0x26);             // function 1 != the IRTE's SID
  EXPECT_EQ(reason(kSid, Remappable(16)), 0x21);              // beyond 16 entries
  EXPECT_EQ(reason(kSid, Remappable(3)), 0x22);               // not present
  EXPECT_EQ(reason(kSid, Remappable(0, true, 0x10001)), 0x20);  // SHV with data[31:16] set
  EXPECT_EQ(reason(kSid, MsiMessage{0xFEE00000, 0x30}), 0x25);  // compatibility format, CFIS clear
  EXPECT_EQ((iommu_.MmioRead(kFrcd, 8) >> 48), 0u);                // FI 63:48 holds the index (0 here)
  Irte(4, 1 | (1 << 15), 0);                                  // IM: posted, not supported
  EXPECT_EQ(reason(kSid, Remappable(4)), 0x24);
  EXPECT_EQ(iommu_.MmioRead(kFrcd, 8) >> 48, 4u);
  // SQ 3 compares bus and device only; SVT 2 checks the bus range.
  Irte(5, 1 | (0x31ull << 16), kSid | (3ull << 16) | (1ull << 18));
  EXPECT_TRUE(iommu_.RemapInterrupt(0x011F, Remappable(5)).has_value());
  Irte(6, 1 | (0x32ull << 16), 0x0102 | (2ull << 18));  // buses 1..2
  EXPECT_TRUE(iommu_.RemapInterrupt(0x0218, Remappable(6)).has_value());
  EXPECT_EQ(reason(0x0318, Remappable(6)), 0x26);
  // With CFI, compatibility-format requests pass unchanged.
  Command(kCfi);
  EXPECT_EQ(iommu_.RemapInterrupt(kSid, MsiMessage{0xFEE00000, 0x30}), (MsiMessage{0xFEE00000, 0x30}));
}

}  // namespace
}  // namespace vbts::vmm
