// pic8259.h: the PC's two cascaded 8259A programmable interrupt controllers
// (Intel 8259A datasheet; the PC/AT wiring: master at ports 20H/21H, slave
// at A0H/A1H on master input 2, edge/level control registers at 4D0H/4D1H),
// for the stretches the guest runs in the TCG engine, when KVM's in-kernel
// PIC is not running.  The rules are KVM's and QEMU's (arch/x86/kvm/i8259.c,
// hw/intc/i8259.c), which agree with each other; the state moves to and from
// KVM in the fields of `struct kvm_pic_state` (KVM_GET/SET_IRQCHIP).  Pure
// logic: no /dev/kvm.
//
// Modelled: ICW1-ICW4 initialisation (single or cascade, ICW4 or not, the
// vector base in ICW2, special fully nested and automatic EOI in ICW4), the
// IMR (OCW1), non-specific, specific and rotating EOIs and priority rotation
// (OCW2), reading IRR or ISR and poll mode (OCW3), special mask mode, edge
// and level inputs per the ELCR, and the spurious IRQ 7 / IRQ 15 when a
// request vanishes before the acknowledge.  Not modelled (as in KVM): the
// ICW1 level-triggered bit (the ELCR decides), buffered mode, 8080 call
// addresses.
#ifndef VBTS_VCPU_PIC8259_H_
#define VBTS_VCPU_PIC8259_H_

#include <cstdint>

namespace vbts::vcpu {

// One chip, the fields of struct kvm_pic_state.
struct PicChipState {
  uint8_t last_irr = 0;  // input levels seen (edge detection)
  uint8_t irr = 0;
  uint8_t imr = 0;
  uint8_t isr = 0;
  uint8_t priority_add = 0;  // the lowest-priority input is priority_add - 1
  uint8_t irq_base = 0;
  uint8_t read_reg_select = 0;  // OCW3 RR/RIS: 0 IRR, 1 ISR
  uint8_t poll = 0;
  uint8_t special_mask = 0;
  uint8_t init_state = 0;  // 0 ready, 1 ICW2 next, 2 ICW3 next, 3 ICW4 next
  uint8_t auto_eoi = 0;
  uint8_t rotate_on_auto_eoi = 0;
  uint8_t special_fully_nested_mode = 0;
  uint8_t init4 = 0;  // ICW4 expected
  uint8_t elcr = 0;   // level-triggered inputs
  uint8_t elcr_mask = 0;
  uint8_t single_mode = 0;  // not in kvm_pic_state (KVM assumes cascade)
};

class Pic8259 {
 public:
  static constexpr uint16_t kMasterCommand = 0x20, kMasterData = 0x21;
  static constexpr uint16_t kSlaveCommand = 0xA0, kSlaveData = 0xA1;
  static constexpr uint16_t kElcrMaster = 0x4D0, kElcrSlave = 0x4D1;

  Pic8259();
  // Power-up: both chips in their reset state, ELCR masks F8H (master: IRQ
  // 0-2 are edge only) and DEH (slave: IRQ 8 and 13).
  void Reset();

  // ISA interrupt line `irq` (0-15; others ignored) at `level`.
  void SetLine(uint32_t irq, bool level);
  // The master's INT output: an unmasked request with priority above the
  // one in service.
  bool Output() const;
  // INTA: the vector of the highest-priority request (IRR -> ISR unless
  // automatic EOI), or the spurious vector of IRQ 7 (or 15) when none.
  uint8_t Acknowledge();

  // Byte accesses to the six ports above; any other port reads FFH and
  // ignores writes.
  uint8_t Read(uint16_t port);
  void Write(uint16_t port, uint8_t value);

  PicChipState master() const { return chip_[0]; }
  PicChipState slave() const { return chip_[1]; }
  void SetState(const PicChipState& master, const PicChipState& slave);

 private:
  static int Priority(const PicChipState& c, uint8_t mask);
  // The input chip `c` would present (0-7), or -1.
  int Irq(int c) const;
  void SetChipLine(int c, int irq, bool level);
  void Update();  // the slave's output drives master input 2
  void IntAck(int c, int irq);
  void WriteCommand(int c, uint8_t value);
  void WriteData(int c, uint8_t value);
  void InitReset(int c);

  PicChipState chip_[2];
};

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_PIC8259_H_
