// intel_iommu.h: an Intel VT-d remapping unit (`--device=intel-iommu`): DMA
// remapping through second-level tables and interrupt remapping, as
// kvm-unit-tests' intel_iommu test and an OS's VT-d driver program it.
#ifndef VBTS_VMM_INTEL_IOMMU_H_
#define VBTS_VMM_INTEL_IOMMU_H_

#include <cstdint>
#include <functional>
#include <optional>

#include "pmu/phys_memory.h"
#include "vmm/pci_function.h"

namespace vbts::vmm {

// Intel Virtualization Technology for Directed I/O, Architecture
// Specification (the "VT-d spec"; chapter numbers of revision 3.x). One
// remapping unit with its registers at kBase (QEMU's Q35 address, where
// kvm-unit-tests looks; vbts has no ACPI DMAR table, so an OS that looks for
// the unit through ACPI does not find it).
//
// What the unit has (CAP and ECAP, 10.4.2-10.4.3):
//  - version 1.0; 64 K domain IDs; second-level tables of 3 levels (39-bit
//    guest address width) and 4 levels (48-bit); 2-MiB and 1-GiB
//    superpages; one fault recording register at 220H; the IOTLB registers
//    at F0H; coherent table walks (ECAP.C); queued invalidation,
//    interrupt remapping (xAPIC format, and x2APIC format with EIM) and
//    pass-through.
//  - Legacy-mode root and context tables (3.4.2-3.4.3; no scalable mode,
//    no PASIDs, no device TLBs, no first-level tables, no protected memory
//    regions, no advanced fault logging, no posted interrupts).
//  - Nothing is cached: every request walks the tables as they are in RAM
//    now. Invalidations (register-based and queued) therefore complete at
//    once; a wait descriptor writes its status and signals as asked.
//
// Registers: 4- and 8-byte aligned accesses; offsets with no register read
// 0 and ignore writes; read-only fields ignore writes. GCMD takes one
// command per write as software must issue them (10.4.4) and GSTS shows the
// result at once.
//
// DMA remapping (3.4, 3.6-3.7): with translation enabled a request of
// requester ID (bus << 8 | devfn) is translated through root entry `bus`,
// context entry `devfn` and the second-level table the context entry names
// (TT 0: multi-level; TT 2: pass-through). R and W are ANDed over the
// levels. A failing translation records a fault (7.1-7.3: reasons 1-0DH,
// the one fault recording register, FSTS, the fault event interrupt) unless
// the context entry's FPD suppresses it, and the request is aborted.
//
// Interrupt remapping (5.1): with IRE set, a request in remappable format
// (address bit 4) is looked up in the interrupt remapping table latched by
// SIRTP: handle = address[19:5] | address[2] << 15, plus data[15:0] when
// SHV; its IRTE gives vector, delivery mode, trigger mode, destination mode
// and the destination: DST bits 15:8 (xAPIC), or all 32 bits with IRTA.EIME
// (x2APIC; the message then carries bits 31:8 in address bits 63:40, as the
// upper address registers hold them). Compatibility-format requests pass
// only while CFIS is set and EIME clear (5.1.2.1). Faults 20H-26H are recorded as above unless
// the IRTE's FPD says not; the interrupt is then dropped. Source-id
// validation (SVT 1 and 2) applies to requests that carry a requester ID
// (PCI functions); the I/O APIC's carry none (no DMAR device scope gives it
// one), as in QEMU.
class IntelIommu {
 public:
  static constexpr uint64_t kBase = 0xFED90000;
  static constexpr uint64_t kSize = 0x1000;

  // `ram`: where tables are read and wait-descriptor status written;
  // `event`: the fault and invalidation-completion event interrupts (not
  // remapped: 5.1.5).
  IntelIommu(PhysMemory& ram, std::function<void(const MsiMessage&)> event);

  // Register accesses at `offset` in the unit's page.
  uint64_t MmioRead(uint64_t offset, int size) const;
  void MmioWrite(uint64_t offset, int size, uint64_t value);

  // The address `requester`'s access to `address` reaches (the address
  // itself with translation off); nothing when the tables refuse it (the
  // fault is recorded).
  std::optional<uint64_t> TranslateDma(uint16_t requester, uint64_t address, bool write);
  // The compatibility-format message an interrupt request becomes (itself
  // with interrupt remapping off); nothing when it is blocked (the fault is
  // recorded). `requester`: the PCI function's ID, nothing for the I/O APIC.
  std::optional<MsiMessage> RemapInterrupt(std::optional<uint16_t> requester, const MsiMessage& request);

  bool translation_enabled() const { return te_; }
  bool remapping_enabled() const { return ire_; }

  // Fault reasons (VT-d spec 7.1.3, appendix "Fault reasons").
  enum Reason : uint8_t {
    kRootNotPresent = 0x01,
    kContextNotPresent = 0x02,
    kContextInvalid = 0x03,
    kBeyondAgaw = 0x04,
    kWrite = 0x05,
    kRead = 0x06,
    kPagingEntryInvalid = 0x07,
    kRootTableInvalid = 0x08,
    kContextTableInvalid = 0x09,
    kRootReserved = 0x0A,
    kContextReserved = 0x0B,
    kPagingReserved = 0x0C,
    kContextType = 0x0D,
    kIrRequestReserved = 0x20,
    kIrIndexBeyondSize = 0x21,
    kIrEntryNotPresent = 0x22,
    kIrTableInvalid = 0x23,
    kIrEntryReserved = 0x24,
    kIrCompatBlocked = 0x25,
    kIrSourceId = 0x26,
  };

 private:
  // The registers of an event interrupt (7.3, 5.1.5; 10.4.10-13 for
  // faults, 10.4.22-25 for invalidation completion): control (IM bit 31,
  // reset 1; IP bit 30), data, address and upper address.
  struct EventRegs {
    uint32_t control = 1u << 31, data = 0, addr = 0, upper = 0;
    uint64_t ControlSlot() const { return control | static_cast<uint64_t>(data) << 32; }
    uint64_t AddressSlot() const { return addr | static_cast<uint64_t>(upper) << 32; }
  };
  void Gcmd(uint32_t cmd);
  void ProcessQueue();
  void RecordFault(uint16_t source, uint64_t address, Reason reason, bool read);
  // Sets the event's IP and sends it unless masked.
  void Event(EventRegs& ev);
  // A write of the control/data slot or the address slot of `ev` (its low
  // and/or high dword): an unmasking with IP set sends the event.
  void WriteEventControl(EventRegs& ev, bool low, bool high, uint32_t lo32, uint32_t hi32);
  static void WriteEventAddress(EventRegs& ev, bool low, bool high, uint32_t lo32, uint32_t hi32);
  // No fault left to report (FSTS's write-1-to-clear bits and the fault
  // record's F all clear): the fault event's IP clears (7.3.1).
  void MaybeClearFaultPending();
  std::optional<uint64_t> Translate(uint16_t requester, uint64_t address, bool write, Reason& reason, bool& fpd);
  std::optional<MsiMessage> Remap(std::optional<uint16_t> requester, const MsiMessage& request, Reason& reason,
                                  bool& fpd);

  PhysMemory& ram_;
  std::function<void(const MsiMessage&)> event_;
  // Global state (GSTS) and the latched table pointers.
  bool te_ = false, qie_ = false, ire_ = false, cfi_ = false, rtps_ = false, irtps_ = false;
  uint64_t root_ = 0, irt_ = 0;  // latched by SRTP, SIRTP
  // Registers as software wrote them.
  uint64_t rtaddr_ = 0, ccmd_ = 0, iva_ = 0, iotlb_ = 0, iqt_ = 0, iqa_ = 0, irta_ = 0;
  uint64_t iqh_ = 0;
  uint32_t fsts_ = 0, ics_ = 0;
  EventRegs fault_event_, inv_event_;
  uint64_t frcd_lo_ = 0, frcd_hi_ = 0;  // the fault recording register
};

// A bus master's access (DMA) of requester ID `requester` to the bytes at
// `address`: split at 4-KiB pages, each page translated by `iommu` (none:
// the address itself) and read from or written to `ram`. The first page the
// unit refuses (its fault is recorded) or `ram` does not hold ends the
// access with an error; the pages before it are done.
absl::Status IommuDmaRead(IntelIommu* iommu, PhysMemory& ram, uint16_t requester, uint64_t address,
                          absl::Span<uint8_t> out);
absl::Status IommuDmaWrite(IntelIommu* iommu, PhysMemory& ram, uint16_t requester, uint64_t address,
                           absl::Span<const uint8_t> data);

}  // namespace vbts::vmm

#endif  // VBTS_VMM_INTEL_IOMMU_H_
