// fw_cfg_test.cc: the fw_cfg I/O interface as kvm-unit-tests and SeaBIOS drive it.
#include "vmm/fw_cfg.h"

#include <gtest/gtest.h>

#include <string>

#include "base/status_macros.h"

namespace vbts::vmm {
namespace {

class FwCfgTest : public ::testing::Test {
 protected:
  FwCfgTest() : cfg_(256ull << 20, 1) {
    VBTS_CHECK(bus_.Register(FwCfg::kPort, FwCfg::kSize, &cfg_, "fw_cfg").ok());
  }
  void Select(uint16_t key) {
    uint8_t b[2] = {static_cast<uint8_t>(key), static_cast<uint8_t>(key >> 8)};
    VBTS_CHECK(bus_.Dispatch(0x510, 2, true, absl::MakeSpan(b)).ok());
  }
  uint8_t In8(uint16_t port = 0x511) {
    uint8_t b = 0xAA;
    VBTS_CHECK(bus_.Dispatch(port, 1, false, absl::MakeSpan(&b, 1)).ok());
    return b;
  }
  // kvm-unit-tests' fwcfg_get_u: select, then `bytes` byte reads, little-endian.
  uint64_t Get(uint16_t key, int bytes) {
    Select(key);
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= uint64_t{In8()} << (8 * i);
    return v;
  }
  FwCfg cfg_;
  PioBus bus_;
};

TEST_F(FwCfgTest, SignatureAndId) {
  Select(FwCfg::kSignature);
  std::string sig;
  for (int i = 0; i < 4; i++) sig += static_cast<char>(In8());
  EXPECT_EQ(sig, "QEMU");
  EXPECT_EQ(Get(FwCfg::kId, 4), 1u);  // traditional interface, no DMA bit
}

TEST_F(FwCfgTest, MachineEntries) {
  EXPECT_EQ(Get(FwCfg::kNbCpus, 2), 1u);
  EXPECT_EQ(Get(FwCfg::kMaxCpus, 2), 1u);
  EXPECT_EQ(Get(FwCfg::kRamSize, 8), 256ull << 20);
  EXPECT_EQ(Get(FwCfg::kNoGraphic, 2), 1u);
  EXPECT_EQ(Get(FwCfg::kUuid, 8), 0u);
  EXPECT_EQ(Get(FwCfg::kFileDir, 4), 0u);
}

TEST_F(FwCfgTest, AbsentEntriesReadZeroNotAllOnes) {
  // kvm-unit-tests' MAX_RAM key (0x11), an unused key, x86 local and invalid keys.
  for (uint16_t key : {0x11, 0x06, 0x3F, 0x8000, 0x8002, 0xFFFF}) EXPECT_EQ(Get(key, 8), 0u) << key;
}

TEST_F(FwCfgTest, ReadsPastTheEndReadZero) {
  Select(FwCfg::kNbCpus);
  EXPECT_EQ(In8(), 1);
  EXPECT_EQ(In8(), 0);
  EXPECT_EQ(In8(), 0);  // beyond the 2-byte entry
  EXPECT_EQ(In8(), 0);
}

TEST_F(FwCfgTest, SelectRewinds) {
  Select(FwCfg::kSignature);
  EXPECT_EQ(In8(), 'Q');
  EXPECT_EQ(In8(), 'E');
  Select(FwCfg::kSignature);
  EXPECT_EQ(In8(), 'Q');
}

TEST_F(FwCfgTest, AccessSizeDecidesNotPort) {
  // QEMU's combined region: a byte read at 0x510 also reads data.
  Select(FwCfg::kSignature);
  EXPECT_EQ(In8(0x510), 'Q');
  EXPECT_EQ(In8(0x511), 'E');
  // A byte write (legacy data write) neither selects nor rewinds.
  uint8_t b = FwCfg::kNbCpus;
  ASSERT_TRUE(bus_.Dispatch(0x510, 1, true, absl::MakeSpan(&b, 1)).ok());
  EXPECT_EQ(In8(), 'M');
}

TEST_F(FwCfgTest, BeforeAnySelectionReadsZero) { EXPECT_EQ(In8(), 0); }

TEST_F(FwCfgTest, WideReadsAreRefusedAsZero) {
  Select(FwCfg::kSignature);
  uint8_t w[2] = {0xAA, 0xAA};
  ASSERT_TRUE(bus_.Dispatch(0x510, 2, false, absl::MakeSpan(w)).ok());
  EXPECT_EQ(w[0], 0);
  EXPECT_EQ(w[1], 0);
  EXPECT_EQ(In8(), 'Q');  // and the position did not move
}

}  // namespace
}  // namespace vbts::vmm
