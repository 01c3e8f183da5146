// pci_edu.cc: see pci_edu.h.
#include "vmm/pci_edu.h"

namespace vbts::vmm {
namespace {

constexpr uint32_t kRegId = 0x00, kRegLiveness = 0x04, kRegFactorial = 0x08, kRegStatus = 0x20,
                   kRegIrqStatus = 0x24, kRegIrqRaise = 0x60, kRegIrqAck = 0x64, kRegDmaSrc = 0x80,
                   kRegDmaDst = 0x88, kRegDmaCount = 0x90, kRegDmaCmd = 0x98;
constexpr uint32_t kId = 0x010000ED;
constexpr uint32_t kStatusComputing = 1u << 0, kStatusIrqFactorial = 1u << 7;
constexpr uint64_t kDmaStart = 1u << 0, kDmaToRam = 1u << 1, kDmaIrq = 1u << 2;
constexpr uint8_t kMsiCapability = 0x40;

bool SizeAllowed(uint64_t offset, int size) { return offset < 0x80 ? size == 4 : size == 4 || size == 8; }

}  // namespace

PciEdu::PciEdu(PciPlatform& platform, uint16_t requester, uint32_t bar, uint8_t line)
    : PciFunction(0x1234, 0x11E8, 0x10, 0x00FF00), platform_(platform), requester_(requester) {
  DefineMemoryBar(0, kBarSize, bar);
  DefineInterrupt(/*pin=INTA#*/ 1, line);
  AddMsiCapability(kMsiCapability);
}

uint64_t PciEdu::MmioRead(uint64_t offset, int size) {
  if (!SizeAllowed(offset, size)) return ~0ull;
  const uint64_t v = Register(offset);
  return size == 4 ? v & 0xFFFFFFFFu : v;
}

uint64_t PciEdu::Register(uint64_t offset) const {
  switch (offset) {
    case kRegId: return kId;
    case kRegLiveness: return liveness_;
    case kRegFactorial: return factorial_;
    case kRegStatus: return status_;
    case kRegIrqStatus: return irq_status_;
    case kRegDmaSrc: return dma_src_;
    case kRegDmaDst: return dma_dst_;
    case kRegDmaCount: return dma_count_;
    case kRegDmaCmd: return dma_cmd_;
    default: return ~0ull;
  }
}

void PciEdu::MmioWrite(uint64_t offset, int size, uint64_t value) {
  if (!SizeAllowed(offset, size)) return;
  if (size == 4) value &= 0xFFFFFFFFu;
  const uint32_t v32 = static_cast<uint32_t>(value);
  switch (offset) {
    case kRegLiveness:
      liveness_ = ~v32;
      break;
    case kRegFactorial: {
      if (status_ & kStatusComputing) break;  // (never: it completes at once)
      uint32_t f = 1;
      for (uint32_t i = 2; i <= v32 && f != 0; i++) f *= i;  // 0 once 2^32 divides it
      factorial_ = f;
      if (status_ & kStatusIrqFactorial) Raise(kIrqFactorial);
      break;
    }
    case kRegStatus:
      status_ = (status_ & ~kStatusIrqFactorial) | (v32 & kStatusIrqFactorial);
      break;
    case kRegIrqRaise:
      Raise(v32);
      break;
    case kRegIrqAck:
      Lower(v32);
      break;
    case kRegDmaSrc:
    case kRegDmaDst:
    case kRegDmaCount:
    case kRegDmaCmd:
      if (dma_cmd_ & kDmaStart) break;  // (never: a transfer completes at once)
      if (offset == kRegDmaSrc) dma_src_ = value;
      if (offset == kRegDmaDst) dma_dst_ = value;
      if (offset == kRegDmaCount) dma_count_ = value;
      if (offset == kRegDmaCmd && (value & kDmaStart)) {
        dma_cmd_ = value;
        RunDma();
      }
      break;
    default:
      break;
  }
}

void PciEdu::RunDma() {
  const bool to_ram = (dma_cmd_ & kDmaToRam) != 0;
  const uint64_t at = to_ram ? dma_src_ : dma_dst_;  // in the buffer
  // The device addresses 28 bits (QEMU's default dma_mask): higher bits
  // of the RAM-side address are dropped.
  const uint64_t ram = (to_ram ? dma_dst_ : dma_src_) & kDmaMask;
  const bool fits = at >= kBufferAddress && dma_count_ <= kBufferSize && at - kBufferAddress <= kBufferSize - dma_count_;
  if (!fits || !bus_master()) {
    dma_errors_++;
  } else if (dma_count_ != 0) {
    uint8_t* buf = buffer_.data() + (at - kBufferAddress);
    const absl::Status st = to_ram ? platform_.DmaWrite(requester_, ram, absl::MakeConstSpan(buf, dma_count_))
                                   : platform_.DmaRead(requester_, ram, absl::MakeSpan(buf, dma_count_));
    if (!st.ok()) dma_errors_++;
  }
  dma_cmd_ &= ~kDmaStart;
  if (dma_cmd_ & kDmaIrq) Raise(kIrqDma);
}

void PciEdu::Raise(uint32_t bits) {
  irq_status_ |= bits;
  if (irq_status_ == 0) return;
  if (std::optional<MsiMessage> msi = Msi()) {
    platform_.SignalMsi(requester_, *msi);
    return;
  }
  UpdateIntx();
}

void PciEdu::Lower(uint32_t bits) {
  irq_status_ &= ~bits;
  UpdateIntx();
}

void PciEdu::UpdateIntx() {
  // INTA# is asserted while an interrupt is pending, MSI is off and the
  // command register does not disable INTx (PCI 3.0 6.2.2, 6.8).
  const bool level = irq_status_ != 0 && !Msi() && !intx_disabled();
  if (level == intx_) return;
  intx_ = level;
  platform_.SetIntx(requester_, ConfigByte(0x3C), level);
}

void PciEdu::ConfigWritten(uint32_t reg, uint32_t len) {
  // Enabling MSI or disabling INTx takes the line down; the reverse brings
  // a pending interrupt back to it.
  UpdateIntx();
}

}  // namespace vbts::vmm
