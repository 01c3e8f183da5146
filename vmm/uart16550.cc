// uart16550.cc: 16550A register semantics (DLAB, FIFO, IIR priorities, loopback).
#include "vmm/uart16550.h"

#include <utility>

namespace vbts::vmm {
namespace {

constexpr uint8_t kLcrDlab = 0x80;
constexpr uint8_t kMcrLoop = 0x10;
constexpr uint8_t kLsrDr = 0x01;
constexpr uint8_t kLsrOe = 0x02;
constexpr uint8_t kLsrBi = 0x10;
constexpr uint8_t kLsrThre = 0x20;
constexpr uint8_t kLsrErrors = 0x1E;  // OE | PE | FE | BI
constexpr uint8_t kIerRdi = 0x01;
constexpr uint8_t kIerThri = 0x02;
constexpr uint8_t kIerRlsi = 0x04;
constexpr uint8_t kIerMsi = 0x08;
constexpr uint8_t kFcrEnable = 0x01;
constexpr uint8_t kFcrClearRx = 0x02;
constexpr uint8_t kFcrClearTx = 0x04;
constexpr uint8_t kFcrKeptBits = 0xC9;

}  // namespace

Uart16550::Uart16550(std::function<void(uint8_t)> sink) : sink_(std::move(sink)) {}

size_t Uart16550::TriggerLevel() const {
  switch (fcr_ & 0xC0) {
    case 0x00: return 1;
    case 0x40: return 4;
    case 0x80: return 8;
    default: return 14;
  }
}

void Uart16550::UpdateIir() {
  uint8_t id = 0x01;
  if ((ier_ & kIerRlsi) && (lsr_ & kLsrErrors)) {
    id = 0x06;
  } else if ((ier_ & kIerRdi) && (lsr_ & kLsrDr) &&
             (!FifoEnabled() || rx_fifo_.size() >= TriggerLevel())) {
    id = 0x04;
  } else if ((ier_ & kIerThri) && thr_ipending_) {
    id = 0x02;
  } else if ((ier_ & kIerMsi) && !(mcr_ & kMcrLoop) && (msr_ & 0x0F)) {
    id = 0x00;
  }
  iir_ = static_cast<uint8_t>(id | (FifoEnabled() ? 0xC0 : 0x00));
  if (InterruptPending() != irq_level_) {
    irq_level_ = InterruptPending();
    if (irq_) irq_(irq_level_);
  }
}

void Uart16550::ReceiveInternal(uint8_t byte) {
  if (FifoEnabled()) {
    if (rx_fifo_.size() >= kFifoSize) {
      lsr_ |= kLsrOe;
    } else {
      rx_fifo_.push_back(byte);
    }
  } else {
    if (lsr_ & kLsrDr) lsr_ |= kLsrOe;
    rbr_ = byte;
  }
  lsr_ |= kLsrDr;
  UpdateIir();
}

void Uart16550::Receive(uint8_t byte) {
  if (mcr_ & kMcrLoop) return;
  ReceiveInternal(byte);
}

uint8_t Uart16550::ReadByte(uint16_t offset) {
  switch (offset) {
    case 0:
      if (lcr_ & kLcrDlab) return static_cast<uint8_t>(divisor_ & 0xFF);
      {
        uint8_t v;
        if (FifoEnabled()) {
          v = 0;
          if (!rx_fifo_.empty()) {
            v = rx_fifo_.front();
            rx_fifo_.pop_front();
          }
          if (rx_fifo_.empty()) lsr_ &= static_cast<uint8_t>(~(kLsrDr | kLsrBi));
        } else {
          v = rbr_;
          lsr_ &= static_cast<uint8_t>(~(kLsrDr | kLsrBi));
        }
        UpdateIir();
        return v;
      }
    case 1:
      return (lcr_ & kLcrDlab) ? static_cast<uint8_t>(divisor_ >> 8) : ier_;
    case 2: {
      const uint8_t v = iir_;
      if ((v & 0x0F) == 0x02) {
        thr_ipending_ = false;
        UpdateIir();
      }
      return v;
    }
    case 3:
      return lcr_;
    case 4:
      return mcr_;
    case 5: {
      const uint8_t v = lsr_;
      if (lsr_ & (kLsrBi | kLsrOe)) {
        lsr_ &= static_cast<uint8_t>(~(kLsrBi | kLsrOe));
        UpdateIir();
      }
      return v;
    }
    case 6:
      if (mcr_ & kMcrLoop) {
        return static_cast<uint8_t>(((mcr_ & 0x0C) << 4) | ((mcr_ & 0x02) << 3) |
                                    ((mcr_ & 0x01) << 5));
      }
      return msr_;
    case 7:
      return scr_;
    default:
      return 0xFF;
  }
}

void Uart16550::WriteByte(uint16_t offset, uint8_t value) {
  switch (offset) {
    case 0:
      if (lcr_ & kLcrDlab) {
        divisor_ = static_cast<uint16_t>((divisor_ & 0xFF00) | value);
        return;
      }
      // Transmission completes at once: THRE/TEMT never drop, and the THRE
      // interrupt re-arms right away (QEMU serial_xmit sets thr_ipending).
      if (mcr_ & kMcrLoop) {
        ReceiveInternal(value);
      } else if (sink_) {
        sink_(value);
      }
      thr_ipending_ = true;
      UpdateIir();
      return;
    case 1: {
      if (lcr_ & kLcrDlab) {
        divisor_ = static_cast<uint16_t>((divisor_ & 0x00FF) | (uint16_t{value} << 8));
        return;
      }
      const uint8_t changed = (ier_ ^ value) & 0x0F;
      ier_ = value & 0x0F;
      if (changed & kIerThri) thr_ipending_ = (ier_ & kIerThri) && (lsr_ & kLsrThre);
      UpdateIir();
      return;
    }
    case 2: {
      uint8_t v = value;
      if ((v ^ fcr_) & kFcrEnable) v |= kFcrClearRx | kFcrClearTx;
      if (v & kFcrClearRx) {
        rx_fifo_.clear();
        lsr_ &= static_cast<uint8_t>(~(kLsrDr | kLsrBi));
      }
      if (v & kFcrClearTx) thr_ipending_ = true;  // empty transmitter: THRE
      fcr_ = v & kFcrKeptBits;
      UpdateIir();
      return;
    }
    case 3:
      lcr_ = value;
      return;
    case 4:
      mcr_ = value & 0x1F;
      UpdateIir();
      return;
    case 7:
      scr_ = value;
      return;
    default:  // LSR, MSR: read-only.
      return;
  }
}

void Uart16550::Read(uint16_t offset, absl::Span<uint8_t> data) {
  for (size_t i = 0; i < data.size(); ++i) {
    const size_t off = offset + i;
    data[i] = off < kSize ? ReadByte(static_cast<uint16_t>(off)) : 0xFF;
  }
}

void Uart16550::Write(uint16_t offset, absl::Span<const uint8_t> data) {
  for (size_t i = 0; i < data.size(); ++i) {
    const size_t off = offset + i;
    if (off < kSize) WriteByte(static_cast<uint16_t>(off), data[i]);
  }
}

}  // namespace vbts::vmm
