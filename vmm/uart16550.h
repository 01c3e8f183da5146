// uart16550.h: a 16550A UART (COM1 at 0x3F8) as a polling or interrupt-driven guest driver sees it; output goes to a byte sink.
#ifndef VBTS_VMM_UART16550_H_
#define VBTS_VMM_UART16550_H_

#include <cstdint>
#include <deque>
#include <functional>

#include "vmm/pio_bus.h"

namespace vbts::vmm {

// Register model (offsets from the base port), following the 16550A
// datasheet and QEMU hw/char/serial.c:
//   0  RBR (read) / THR (write); DLL when LCR.DLAB (bit 7) is set
//   1  IER, low 4 bits writable; DLM when LCR.DLAB is set
//   2  IIR (read) / FCR (write). IIR = interrupt id | 0xC0 when FIFOs are
//      enabled: 0x01 none pending, 0x06 line status, 0x04 received data,
//      0x02 THR empty, 0x00 modem status. Reading IIR while it reports 0x02
//      clears that THRE interrupt (until the next THR write or an IER.THRI
//      0->1 transition, which re-arms it while THR is empty, as QEMU does).
//      FCR bits kept: 0 (enable), 3 (DMA mode), 6-7 (trigger level); bits 1/2
//      clear the receive/transmit FIFO; changing bit 0 clears both.
//   3  LCR, all 8 bits
//   4  MCR, low 5 bits; bit 4 = loopback
//   5  LSR: 0x60 (THRE|TEMT) always, since output is written at once; bit 0
//      DR while received data is pending; bit 1 OE after an overrun (cleared
//      by reading LSR). Writes ignored.
//   6  MSR: 0xB0 (DCD|DSR|CTS) normally; in loopback the MCR outputs feed
//      back (DTR->DSR bit 5, RTS->CTS bit 4, OUT1->RI bit 6, OUT2->DCD bit 7).
//      Writes ignored.
//   7  SCR scratch, all 8 bits
// Reset values (QEMU serial_reset): IER 0, IIR 0x01, LCR 0, MCR 0x08 (OUT2),
// LSR 0x60, MSR 0xB0, SCR 0, divisor 0x000C (9600 baud).
// In loopback a THR write is received back into RBR/the FIFO instead of
// reaching the sink, and host input (Receive) is dropped. The receive FIFO
// holds 16 bytes. The character-timeout interrupt (which needs a clock) is
// not modelled. As in QEMU, MCR.OUT2 does not gate InterruptPending() nor
// the IRQ line (SetIrq).
// An access wider than 1 byte is handled as consecutive 1-byte accesses.
class Uart16550 : public PioDevice {
 public:
  static constexpr uint16_t kCom1Port = 0x3F8;
  static constexpr uint16_t kSize = 8;
  static constexpr uint32_t kCom1Irq = 4;  // ISA line
  static constexpr size_t kFifoSize = 16;

  explicit Uart16550(std::function<void(uint8_t)> sink);

  void Read(uint16_t offset, absl::Span<uint8_t> data) override;
  void Write(uint16_t offset, absl::Span<const uint8_t> data) override;

  // Host-side input (e.g. stdin), as if received on the serial line.
  void Receive(uint8_t byte);

  // True when the IRQ line (IRQ 4 for COM1) would be asserted: IIR bit 0 clear.
  bool InterruptPending() const { return (iir_ & 0x01) == 0; }
  // The IRQ line: called with InterruptPending() whenever it changes (QEMU's
  // serial_update_irq drives the line from IIR the same way).
  void SetIrq(std::function<void(bool)> irq) { irq_ = std::move(irq); }

  uint16_t divisor() const { return divisor_; }

 private:
  uint8_t ReadByte(uint16_t offset);
  void WriteByte(uint16_t offset, uint8_t value);
  void ReceiveInternal(uint8_t byte);
  void UpdateIir();
  bool FifoEnabled() const { return (fcr_ & 0x01) != 0; }
  size_t TriggerLevel() const;

  std::function<void(uint8_t)> sink_;
  std::function<void(bool)> irq_;
  bool irq_level_ = false;
  uint8_t rbr_ = 0;
  std::deque<uint8_t> rx_fifo_;
  uint8_t ier_ = 0;
  uint8_t iir_ = 0x01;
  uint8_t fcr_ = 0;
  uint8_t lcr_ = 0;
  uint8_t mcr_ = 0x08;
  uint8_t lsr_ = 0x60;
  uint8_t msr_ = 0xB0;
  uint8_t scr_ = 0;
  uint16_t divisor_ = 0x000C;
  bool thr_ipending_ = false;
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_UART16550_H_
