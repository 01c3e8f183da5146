// pic8259.cc: see pic8259.h.
#include "vcpu/pic8259.h"

namespace vbts::vcpu {
namespace {

constexpr int kMaster = 0, kSlave = 1;
constexpr int kCascadeInput = 2;

}  // namespace

Pic8259::Pic8259() { Reset(); }

void Pic8259::Reset() {
  chip_[kMaster] = chip_[kSlave] = PicChipState{};
  chip_[kMaster].elcr_mask = 0xF8;
  chip_[kSlave].elcr_mask = 0xDE;
}

void Pic8259::InitReset(int c) {
  // What ICW1 resets (QEMU pic_init_reset, KVM kvm_pic_reset): everything
  // but the ELCR (and its mask) goes back to its power-up value; IRR keeps
  // only level-triggered requests.
  PicChipState& s = chip_[c];
  PicChipState fresh;
  fresh.irr = s.irr & s.elcr;
  fresh.elcr = s.elcr;
  fresh.elcr_mask = s.elcr_mask;
  s = fresh;
}

int Pic8259::Priority(const PicChipState& s, uint8_t mask) {
  // 0 is the highest priority: input (priority_add) & 7.  8: none.
  if (mask == 0) return 8;
  int p = 0;
  while (!(mask & (1u << ((p + s.priority_add) & 7)))) p++;
  return p;
}

int Pic8259::Irq(int c) const {
  const PicChipState& s = chip_[c];
  const int p = Priority(s, s.irr & ~s.imr);
  if (p == 8) return -1;
  // In service: in special mask mode masked inputs do not block; in special
  // fully nested mode the master lets the slave interrupt its own service.
  uint8_t in_service = s.isr;
  if (s.special_mask) in_service &= ~s.imr;
  if (s.special_fully_nested_mode && c == kMaster) in_service &= ~(1u << kCascadeInput);
  const int current = Priority(s, in_service);
  return p < current ? (p + s.priority_add) & 7 : -1;
}

void Pic8259::SetChipLine(int c, int irq, bool level) {
  PicChipState& s = chip_[c];
  const uint8_t bit = 1u << irq;
  if (s.elcr & bit) {  // level triggered: requested while high
    if (level) {
      s.irr |= bit;
      s.last_irr |= bit;
    } else {
      s.irr &= ~bit;
      s.last_irr &= ~bit;
    }
  } else {  // edge triggered: a rising edge latches a request
    if (level) {
      if (!(s.last_irr & bit)) s.irr |= bit;
      s.last_irr |= bit;
    } else {
      s.last_irr &= ~bit;
    }
  }
}

void Pic8259::Update() { SetChipLine(kMaster, kCascadeInput, Irq(kSlave) >= 0); }

void Pic8259::SetLine(uint32_t irq, bool level) {
  if (irq >= 16) return;
  SetChipLine(irq < 8 ? kMaster : kSlave, static_cast<int>(irq & 7), level);
  Update();
}

bool Pic8259::Output() const { return Irq(kMaster) >= 0; }

void Pic8259::IntAck(int c, int irq) {
  PicChipState& s = chip_[c];
  if (s.auto_eoi) {
    if (s.rotate_on_auto_eoi) s.priority_add = (irq + 1) & 7;
  } else {
    s.isr |= 1u << irq;
  }
  // An edge request is consumed; a level one stays while its line is high.
  if (!(s.elcr & (1u << irq))) s.irr &= ~(1u << irq);
}

uint8_t Pic8259::Acknowledge() {
  uint8_t vector;
  const int irq = Irq(kMaster);
  if (irq < 0) {
    vector = chip_[kMaster].irq_base + 7;  // spurious IRQ 7
  } else {
    IntAck(kMaster, irq);
    if (irq == kCascadeInput) {
      int irq2 = Irq(kSlave);
      if (irq2 >= 0) IntAck(kSlave, irq2);
      else irq2 = 7;  // spurious IRQ 15
      vector = chip_[kSlave].irq_base + irq2;
    } else {
      vector = chip_[kMaster].irq_base + irq;
    }
  }
  Update();
  return vector;
}

void Pic8259::WriteCommand(int c, uint8_t value) {
  PicChipState& s = chip_[c];
  if (value & 0x10) {  // ICW1
    InitReset(c);
    s.init_state = 1;
    s.init4 = value & 1;
    s.single_mode = (value >> 1) & 1;
    Update();
    return;
  }
  if (value & 0x08) {  // OCW3
    if (value & 0x04) s.poll = 1;
    if (value & 0x02) s.read_reg_select = value & 1;
    if (value & 0x40) s.special_mask = (value >> 5) & 1;
    Update();
    return;
  }
  // OCW2
  switch (value >> 5) {
    case 0:  // rotate in automatic EOI mode: clear
    case 4:  // set
      s.rotate_on_auto_eoi = value >> 7;
      break;
    case 1:    // non-specific EOI
    case 5: {  // rotate on non-specific EOI
      const int p = Priority(s, s.isr);
      if (p != 8) {
        const int irq = (p + s.priority_add) & 7;
        s.isr &= ~(1u << irq);
        if ((value >> 5) == 5) s.priority_add = (irq + 1) & 7;
      }
      break;
    }
    case 3:  // specific EOI
      s.isr &= ~(1u << (value & 7));
      break;
    case 6:  // set priority: input value & 7 lowest
      s.priority_add = (value + 1) & 7;
      break;
    case 7:  // rotate on specific EOI
      s.isr &= ~(1u << (value & 7));
      s.priority_add = (value + 1) & 7;
      break;
    default:  // 2: no operation
      break;
  }
  Update();
}

void Pic8259::WriteData(int c, uint8_t value) {
  PicChipState& s = chip_[c];
  switch (s.init_state) {
    case 0:  // OCW1
      s.imr = value;
      Update();
      return;
    case 1:  // ICW2: the vector base (bits 7:3)
      s.irq_base = value & 0xF8;
      s.init_state = s.single_mode ? (s.init4 ? 3 : 0) : 2;
      return;
    case 2:  // ICW3: the cascade wiring (fixed on a PC)
      s.init_state = s.init4 ? 3 : 0;
      return;
    default:  // ICW4
      s.special_fully_nested_mode = (value >> 4) & 1;
      s.auto_eoi = (value >> 1) & 1;
      s.init_state = 0;
      return;
  }
}

uint8_t Pic8259::Read(uint16_t port) {
  switch (port) {
    case kElcrMaster: return chip_[kMaster].elcr;
    case kElcrSlave: return chip_[kSlave].elcr;
    case kMasterCommand: case kMasterData: case kSlaveCommand: case kSlaveData: break;
    default: return 0xFF;
  }
  const int c = (port & 0x80) ? kSlave : kMaster;
  PicChipState& s = chip_[c];
  if (s.poll) {
    // Poll mode (OCW3 P): the read is the acknowledge, without a vector.
    s.poll = 0;
    const int irq = Irq(c);
    if (irq < 0) return 0;
    IntAck(c, irq);
    Update();
    return static_cast<uint8_t>(0x80 | irq);
  }
  if (port & 1) return s.imr;
  return s.read_reg_select ? s.isr : s.irr;
}

void Pic8259::Write(uint16_t port, uint8_t value) {
  switch (port) {
    case kMasterCommand: return WriteCommand(kMaster, value);
    case kMasterData: return WriteData(kMaster, value);
    case kSlaveCommand: return WriteCommand(kSlave, value);
    case kSlaveData: return WriteData(kSlave, value);
    case kElcrMaster:
      chip_[kMaster].elcr = value & chip_[kMaster].elcr_mask;
      return;
    case kElcrSlave:
      chip_[kSlave].elcr = value & chip_[kSlave].elcr_mask;
      return;
    default:
      return;
  }
}

void Pic8259::SetState(const PicChipState& master, const PicChipState& slave) {
  chip_[kMaster] = master;
  chip_[kSlave] = slave;
  for (PicChipState& s : chip_) s.init_state &= 3;
  Update();
}

}  // namespace vbts::vcpu
