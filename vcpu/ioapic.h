// ioapic.h: a model of one I/O APIC (Intel 82093AA datasheet; the register
// layout KVM's in-kernel IOAPIC uses), for the stretches the guest runs in
// the TCG engine, when KVM's in-kernel irqchip is not running.  The machine
// forwards MMIO accesses to its page (0xFEC00000), drives its input pins
// (pc-testdev's IRQ lines), passes it the LAPIC's EOI broadcasts, and moves
// its state to and from KVM in the layout of `struct kvm_ioapic_state`
// (KVM_GET_IRQCHIP / KVM_SET_IRQCHIP).  Pure logic: no /dev/kvm.
//
// Registers (datasheet 3.1, 3.2): IOREGSEL at offset 00H (8 bits), IOWIN at
// 10H; through IOWIN: ID (00H, bits 27:24 writable), version (01H, read only:
// 00170011H, 24 pins, version 11H), arbitration ID (02H, read only, the ID
// bits), and the 24 redirection entries at 10H + 2n (low) and 11H + 2n
// (high).  Writable entry bits: vector, delivery mode, destination mode,
// polarity, trigger mode, mask, destination (bits 63:56); delivery status
// and Remote IRR are read only.
//
// Pins and delivery follow KVM's model (arch/x86/kvm/ioapic.c), which is
// what KVM's IOAPIC does for the same guest:
//  - An edge-triggered pin delivers on a rising edge of its line; a
//    level-triggered pin delivers while its line is high and its Remote IRR
//    is clear, and sets Remote IRR when the LAPIC accepts the interrupt.
//  - IRR bit n is the pin's pending request: a masked edge that arrived
//    (dropped when the line falls, as KVM does), or a high level line.
//  - The LAPIC's EOI of a level-triggered vector clears Remote IRR of every
//    level entry with that vector; a line still high delivers again.
//  - Writing an entry keeps Remote IRR (cleared if the entry is now edge
//    triggered, which Linux relies on); unmasking a level entry whose line is
//    high delivers.
//  - The polarity bit is stored but not applied: pins take logical levels
//    (1 = asserted), as KVM's do.
//  - Fixed and lowest-priority entries go to the delivery sink with their
//    destination; NMI entries to the NMI sink; ExtINT (there is no 8259),
//    SMI, INIT and reserved modes are dropped.
#ifndef VBTS_VCPU_IOAPIC_H_
#define VBTS_VCPU_IOAPIC_H_

#include <array>
#include <cstdint>
#include <functional>
#include <utility>

namespace vbts::vcpu {

inline constexpr uint64_t kIoapicDefaultBase = 0xFEC00000;
inline constexpr int kIoapicPins = 24;

// The fields of struct kvm_ioapic_state that the model uses.
struct IoapicState {
  uint64_t base_address = kIoapicDefaultBase;
  uint32_t ioregsel = 0;
  uint32_t id = 0;   // the ID (bits 3:0 of KVM's field: ID register bits 27:24)
  uint32_t irr = 0;  // pending requests, one bit per pin
  std::array<uint64_t, kIoapicPins> redirtbl{};
};

class Ioapic {
 public:
  // An interrupt for the LAPICs: fixed or lowest priority.  Returns whether
  // a LAPIC accepted it (a level entry's Remote IRR is set only then).
  struct Delivery {
    uint8_t vector = 0;
    bool level = false;    // trigger mode
    uint8_t dest = 0;      // destination field
    bool logical = false;  // destination mode
  };
  using DeliverFn = std::function<bool(const Delivery&)>;
  using NmiFn = std::function<void(uint8_t dest, bool logical)>;

  Ioapic(DeliverFn deliver, NmiFn nmi);

  // An interrupt remapping unit (vmm/intel_iommu.h) between the I/O APIC
  // and the LAPICs: while set, every request of a fixed, lowest-priority or
  // NMI entry goes to it as the whole redirection entry instead (the
  // remappable format's interrupt index is in bits 63:48 and 11); it
  // returns whether a LAPIC accepted the interrupt.
  using RemapFn = std::function<bool(uint64_t entry)>;
  void SetRemapper(RemapFn remap) { remap_ = std::move(remap); }

  // Reset (datasheet 3.2.4): every entry masked, everything else 0.
  void Reset();

  // 32-bit accesses at `offset` in the I/O APIC's page: 00H IOREGSEL, 10H
  // IOWIN; other offsets read 0 and ignore writes.
  uint32_t Read(uint32_t offset) const;
  void Write(uint32_t offset, uint32_t value);

  // The level of input pin `pin` (pins >= 24 are ignored).
  void SetLine(uint32_t pin, bool level);

  // The LAPIC broadcast the EOI of level-triggered `vector`.
  void Eoi(uint8_t vector);

  IoapicState GetState() const;
  uint64_t base_address() const { return s_.base_address; }
  // Takes the state as KVM_GET_IRQCHIP gives it (read-only entry bits
  // included); the line levels of level pins are taken from IRR.
  void SetState(const IoapicState& s);

 private:
  uint32_t ReadIndirect(uint32_t reg) const;
  void WriteIndirect(uint32_t reg, uint32_t value);
  // Delivers pin's request if its entry lets it.
  void Service(int pin);

  DeliverFn deliver_;
  NmiFn nmi_;
  RemapFn remap_;
  IoapicState s_;
};

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_IOAPIC_H_
