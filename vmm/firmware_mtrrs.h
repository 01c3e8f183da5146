// firmware_mtrrs.h: the memory-type ranges a PC's firmware programs before it
// starts a kernel (SDM vol. 3A 11.11), which vbts, booting kernels directly,
// programs in its place: as SeaBIOS does for QEMU — fixed ranges write-back
// except the legacy video hole 0xA0000-0xBFFFF (uncacheable), one variable
// range making [3 GiB, 4 GiB), where the LAPIC, the I/O APIC and
// pc-testdev's window lie, uncacheable, and MTRRs enabled with write-back as
// the default type. vbts's RAM ends at or below 3 GiB (--mem's maximum), so
// the default covers all of it. KVM keeps them for both engines (the TCG
// engine reads and writes MTRRs through the idle KVM vCPU); the guest may
// reprogram them. Without them Linux reports "CPU MTRRs all blank -
// virtualized system" and leaves PAT unprogrammed ("MTRRs disabled,
// skipping PAT initialization too").
#ifndef VBTS_VMM_FIRMWARE_MTRRS_H_
#define VBTS_VMM_FIRMWARE_MTRRS_H_

#include <cstdint>
#include <vector>

#include "vcpu/vcpu_control.h"

namespace vbts::vmm {

inline constexpr uint32_t kMsrMtrrPhysBase0 = 0x200, kMsrMtrrPhysMask0 = 0x201;
inline constexpr uint32_t kMsrMtrrFix64k00000 = 0x250, kMsrMtrrFix16k80000 = 0x258, kMsrMtrrFix16kA0000 = 0x259;
inline constexpr uint32_t kMsrMtrrFix4kC0000 = 0x268;  // .. 0x26F (F8000)
inline constexpr uint32_t kMsrMtrrDefType = 0x2FF;

// The MSR values, in the order firmware writes them (MTRRdefType last).
// `maxphyaddr`: the CPU model's physical-address width (CPUID.80000008H:
// EAX[7:0]; 36 without that leaf), which bounds the variable range's mask.
std::vector<vcpu::MsrValue> FirmwareMtrrs(int maxphyaddr);

}  // namespace vbts::vmm

#endif  // VBTS_VMM_FIRMWARE_MTRRS_H_
