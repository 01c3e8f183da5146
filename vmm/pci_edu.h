// pci_edu.h: QEMU's "edu" educational PCI device (`--device=edu`), the DMA
// and interrupt source kvm-unit-tests' intel_iommu test drives.
#ifndef VBTS_VMM_PCI_EDU_H_
#define VBTS_VMM_PCI_EDU_H_

#include <array>
#include <cstdint>

#include "vmm/pci_function.h"

namespace vbts::vmm {

// The device as QEMU 7.2 has it (hw/misc/edu.c, docs/specs/edu.rst):
//  - Configuration: vendor 1234H, device 11E8H, revision 10H, class 00FF00H
//    ("unclassified"), BAR0 a 1 MiB 32-bit memory BAR, INTA#, one MSI
//    vector with a 64-bit address (capability at 40H).
//  - BAR0 registers; below 80H only 4-byte accesses, from 80H 4 or 8 bytes;
//    other sizes and unknown offsets read all ones and ignore writes:
//      00H identification 010000EDH (major 1, minor 0, 0EDH)
//      04H liveness: reads the bitwise NOT of the last value written
//      08H factorial: a write (ignored while computing) computes the
//          factorial modulo 2^32 into the register; with status bit 7 set
//          it then raises interrupt-status bit 0
//      20H status: bit 0 computing (read only), bit 7 interrupt after the
//          factorial
//      24H interrupt status (read only); 60H raise: ORs the value in and
//          asserts the interrupt; 64H acknowledge: clears the bits written
//          and deasserts INTx once none is left
//      80H DMA source, 88H destination, 90H count, 98H command: bit 0
//          start, bit 1 direction (0: from RAM to the device's buffer, 1:
//          from the buffer to RAM), bit 2 raise interrupt-status bit 8 when
//          done. Registers do not change while a transfer runs.
//    The 4 KiB buffer sits at device address 40000H; the RAM-side address
//    keeps its low 28 bits (QEMU's default DMA mask).
//  - The interrupt is MSI when the guest enabled MSI (one message per
//    raise), otherwise INTx on the line the configuration space names.
//
// Where vbts differs from QEMU, deliberately:
//  - The factorial and the DMA complete at the register write (QEMU: a
//    thread, and a 100-ms timer for DMA); software polls the status bit or
//    the command's start bit, which read as done at once.
//  - A transfer that does not fit in the buffer moves nothing (QEMU stops
//    the whole VM: hw_error). It completes like any other: the start bit
//    clears and bit 2 raises its interrupt.
//  - As in QEMU, a transfer while bus mastering is off (PCI 3.0 6.2.2: the
//    function may not master the bus) or whose bus access fails (no RAM
//    there, an IOMMU fault) completes with whatever was moved; dma_errors()
//    counts them.
class PciEdu : public PciFunction {
 public:
  static constexpr uint32_t kBarSize = 1u << 20;
  static constexpr uint64_t kBufferAddress = 0x40000, kBufferSize = 4096;
  static constexpr uint32_t kIrqFactorial = 0x1, kIrqDma = 0x100;
  static constexpr uint64_t kDmaMask = (1ull << 28) - 1;

  // `requester`: bus << 8 | devfn; `bar`: where firmware put BAR0; `line`:
  // the interrupt line INTA# is routed to.
  PciEdu(PciPlatform& platform, uint16_t requester, uint32_t bar, uint8_t line);

  uint64_t MmioRead(uint64_t offset, int size);
  void MmioWrite(uint64_t offset, int size, uint64_t value);

  uint16_t requester() const { return requester_; }
  uint32_t irq_status() const { return irq_status_; }
  uint64_t dma_errors() const { return dma_errors_; }

 private:
  void ConfigWritten(uint32_t reg, uint32_t len) override;
  uint64_t Register(uint64_t offset) const;
  void Raise(uint32_t bits);
  void Lower(uint32_t bits);
  void UpdateIntx();
  void RunDma();

  PciPlatform& platform_;
  const uint16_t requester_;
  uint32_t liveness_ = 0;
  uint32_t factorial_ = 0;
  uint32_t status_ = 0;
  uint32_t irq_status_ = 0;
  uint64_t dma_src_ = 0, dma_dst_ = 0, dma_count_ = 0, dma_cmd_ = 0;
  bool intx_ = false;  // INTA# as last driven
  uint64_t dma_errors_ = 0;
  std::array<uint8_t, kBufferSize> buffer_{};
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_PCI_EDU_H_
