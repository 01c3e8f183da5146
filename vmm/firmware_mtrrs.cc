#include "vmm/firmware_mtrrs.h"

namespace vbts::vmm {
namespace {

constexpr uint64_t kUc = 0x00, kWb = 0x06;
constexpr uint64_t kAllWb = 0x0606060606060606ull;  // eight fixed ranges, one type byte each
constexpr uint64_t kMtrrEnable = 1u << 11, kFixedEnable = 1u << 10;
constexpr uint64_t kMaskValid = 1u << 11;
constexpr uint64_t kMmioBase = 0xC0000000, kMmioSize = 0x40000000;  // [3 GiB, 4 GiB)

}  // namespace

std::vector<vcpu::MsrValue> FirmwareMtrrs(int maxphyaddr) {
  std::vector<vcpu::MsrValue> m;
  m.push_back({kMsrMtrrFix64k00000, kAllWb});  // 0x00000-0x7FFFF
  m.push_back({kMsrMtrrFix16k80000, kAllWb});  // 0x80000-0x9FFFF
  m.push_back({kMsrMtrrFix16kA0000, 0});       // 0xA0000-0xBFFFF: UC (all type bytes 0)
  for (uint32_t i = 0; i < 8; i++) m.push_back({kMsrMtrrFix4kC0000 + i, kAllWb});  // 0xC0000-0xFFFFF
  const uint64_t phys = maxphyaddr >= 64 ? ~0ull : (1ull << maxphyaddr) - 1;
  m.push_back({kMsrMtrrPhysBase0, kMmioBase | kUc});
  m.push_back({kMsrMtrrPhysMask0, (~(kMmioSize - 1) & phys & ~0xFFFull) | kMaskValid});
  m.push_back({kMsrMtrrDefType, kMtrrEnable | kFixedEnable | kWb});
  return m;
}

}  // namespace vbts::vmm
