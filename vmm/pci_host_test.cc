// pci_host_test.cc: configuration mechanism #1 and the host bridge (values
// from vmm/pci_host.h: QEMU's i440FX identity; the PCI 3.0 access rules).
#include "vmm/pci_host.h"

#include <gtest/gtest.h>

#include <cstring>

namespace vbts::vmm {
namespace {

uint32_t In(PciHost& h, uint16_t port, int size) {
  uint8_t b[4] = {};
  h.Read(static_cast<uint16_t>(port - PciHost::kPort), absl::MakeSpan(b, size));
  uint32_t v = 0;
  std::memcpy(&v, b, size);
  return v;
}
void Out(PciHost& h, uint16_t port, int size, uint32_t v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  h.Write(static_cast<uint16_t>(port - PciHost::kPort), absl::MakeConstSpan(b, size));
}

TEST(PciHostTest, TheHostBridgeAnswersAt0000) {
  PciHost h;
  Out(h, 0xCF8, 4, 0x80000000);
  EXPECT_EQ(In(h, 0xCF8, 4), 0x80000000u);
  EXPECT_EQ(In(h, 0xCFC, 4), 0x12378086u);  // device 1237H, vendor 8086H
  EXPECT_EQ(In(h, 0xCFC, 2), 0x8086u);
  EXPECT_EQ(In(h, 0xCFE, 2), 0x1237u);       // register 2 through port 0xCFE
  Out(h, 0xCF8, 4, 0x80000008);
  EXPECT_EQ(In(h, 0xCFC, 4), 0x06000002u);  // class 06H, subclass 00H, prog-if 00H, revision 02H
  EXPECT_EQ(In(h, 0xCFF, 1), 0x06u);
  Out(h, 0xCF8, 4, 0x8000000C);
  EXPECT_EQ(In(h, 0xCFE, 1), 0x00u);  // header type 0
  Out(h, 0xCF8, 4, 0x80000004);
  Out(h, 0xCFC, 4, 0x00000007);       // the bridge's registers are read-only
  EXPECT_EQ(In(h, 0xCFC, 4), 0u);
}

TEST(PciHostTest, NoOtherFunctionAnswersAndNothingWithoutEnable) {
  PciHost h;
  for (uint32_t a : {0x80000800u /* 00:01.0 */, 0x80000100u /* 00:00.1 */, 0x80010000u /* 01:00.0 */,
                     0x00000000u /* enable clear */}) {
    Out(h, 0xCF8, 4, a);
    EXPECT_EQ(In(h, 0xCFC, 4), 0xFFFFFFFFu) << std::hex << a;
    EXPECT_EQ(In(h, 0xCFD, 1), 0xFFu) << std::hex << a;
  }
}

TEST(PciHostTest, OnlyDwordAccessesReachConfigAddress) {
  // Linux's type-1 probe (arch/x86/pci/direct.c): outb(0x01, 0xCFB), then
  // the dword at 0xCF8 must read back what was latched.
  PciHost h;
  Out(h, 0xCF8, 4, 0x80000000);
  Out(h, 0xCFB, 1, 0x01);
  Out(h, 0xCF8, 2, 0x1234);
  EXPECT_EQ(In(h, 0xCF8, 4), 0x80000000u);
  EXPECT_EQ(In(h, 0xCF8, 1), 0xFFu);
  Out(h, 0xCF8, 4, 0xFFFFFFFF);  // reserved bits 30:24 and 1:0 read 0
  EXPECT_EQ(In(h, 0xCF8, 4), 0x80FFFFFCu);
}

}  // namespace
}  // namespace vbts::vmm
