// intel_iommu.cc: see intel_iommu.h.
#include "vmm/intel_iommu.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace vbts::vmm {
namespace {

// Register offsets (VT-d spec 10.4).
constexpr uint32_t kVer = 0x00, kCap = 0x08, kEcap = 0x10, kGcmd = 0x18, kRtaddr = 0x20, kCcmd = 0x28,
                   kFstsSlot = 0x30, kFectlSlot = 0x38, kFeaddrSlot = 0x40, kIqh = 0x80, kIqt = 0x88, kIqa = 0x90,
                   kIcsSlot = 0x98, kIectlSlot = 0xA0, kIeaddrSlot = 0xA8, kIrta = 0xB8, kIva = 0xF0, kIotlb = 0xF8,
                   kFrcdLo = 0x220, kFrcdHi = 0x228;

// CAP (10.4.2): ND = 6 (64 K domains), SAGAW = 39- and 48-bit, MGAW = 47,
// FRO = 22H (220H / 16), SLLPS = 2 MiB and 1 GiB, NFR = 0 (one register).
constexpr uint64_t kCapValue = 6ull | (0x6ull << 8) | (47ull << 16) | (0x22ull << 24) | (0x3ull << 34);
// ECAP (10.4.3): C, QI, IR, EIM, PT, IRO = FH (F0H / 16), MHMV = FH.
constexpr uint64_t kEcapC = 1ull << 0, kEcapQi = 1ull << 1, kEcapIr = 1ull << 3, kEcapEim = 1ull << 4,
                   kEcapPt = 1ull << 6;
constexpr uint64_t kEcapValue = kEcapC | kEcapQi | kEcapIr | kEcapEim | kEcapPt | (0xFull << 8) | (0xFull << 20);
constexpr uint64_t kIrtaEime = 1ull << 11;
constexpr uint32_t kVersion = 0x10;

// GCMD/GSTS bits (10.4.4-10.4.5).
constexpr uint32_t kTe = 1u << 31, kSrtp = 1u << 30, kQie = 1u << 26, kIre = 1u << 25, kSirtp = 1u << 24,
                   kCfi = 1u << 23;
// FSTS (10.4.9): PFO, PPF, IQE, ICE, ITE; the first and the last three are
// write-1-to-clear, PPF follows the fault recording register.
constexpr uint32_t kPfo = 1u << 0, kPpf = 1u << 1, kIqe = 1u << 4, kIce = 1u << 5, kIte = 1u << 6;
constexpr uint32_t kFstsW1c = kPfo | kIqe | kIce | kIte;
// Event control registers (FECTL, IECTL): interrupt mask and pending.
constexpr uint32_t kIm = 1u << 31, kIp = 1u << 30;
constexpr uint64_t kPageMask = ~0xFFFull;
constexpr uint64_t kAddr52 = 0x000FFFFFFFFFF000ull;  // table and page addresses (bits 51:12)

// Invalidation descriptors (6.5.2).
constexpr uint64_t kDescContext = 1, kDescIotlb = 2, kDescIec = 4, kDescWait = 5;
constexpr uint64_t kWaitIf = 1u << 4, kWaitSw = 1u << 5;

}  // namespace

IntelIommu::IntelIommu(PhysMemory& ram, std::function<void(const MsiMessage&)> event)
    : ram_(ram), event_(std::move(event)) {}

uint64_t IntelIommu::MmioRead(uint64_t offset, int size) const {
  if (!((size == 4 && offset % 4 == 0) || (size == 8 && offset % 8 == 0)) || offset >= kSize) return 0;
  const uint32_t gsts = (te_ ? kTe : 0) | (rtps_ ? kSrtp : 0) | (qie_ ? kQie : 0) | (ire_ ? kIre : 0) |
                        (irtps_ ? kSirtp : 0) | (cfi_ ? kCfi : 0);
  const uint32_t fsts = fsts_ | ((frcd_hi_ >> 63) ? kPpf : 0);
  uint64_t slot = 0;
  switch (offset & ~7u) {
    case kVer: slot = kVersion; break;
    case kCap: slot = kCapValue; break;
    case kEcap: slot = kEcapValue; break;
    case kGcmd: slot = static_cast<uint64_t>(gsts) << 32; break;  // GCMD reads 0
    case kRtaddr: slot = rtaddr_; break;
    case kCcmd: slot = ccmd_; break;
    case kFstsSlot: slot = static_cast<uint64_t>(fsts) << 32; break;
    case kFectlSlot: slot = fault_event_.ControlSlot(); break;
    case kFeaddrSlot: slot = fault_event_.AddressSlot(); break;
    case kIqh: slot = iqh_; break;
    case kIqt: slot = iqt_; break;
    case kIqa: slot = iqa_; break;
    case kIcsSlot: slot = static_cast<uint64_t>(ics_) << 32; break;
    case kIectlSlot: slot = inv_event_.ControlSlot(); break;
    case kIeaddrSlot: slot = inv_event_.AddressSlot(); break;
    case kIrta: slot = irta_; break;
    case kIva: slot = iva_; break;
    case kIotlb: slot = iotlb_; break;
    case kFrcdLo: slot = frcd_lo_; break;
    case kFrcdHi: slot = frcd_hi_; break;
    default: break;
  }
  return size == 8 ? slot : (slot >> (8 * (offset & 4))) & 0xFFFFFFFFu;
}

void IntelIommu::MmioWrite(uint64_t offset, int size, uint64_t value) {
  if (!((size == 4 && offset % 4 == 0) || (size == 8 && offset % 8 == 0)) || offset >= kSize) return;
  const int shift = 8 * (offset & 4);
  const uint64_t mask = size == 8 ? ~0ull : 0xFFFFFFFFull << shift;
  const uint64_t v = (size == 8 ? value : (value & 0xFFFFFFFFu) << shift) & mask;
  const bool low = (mask & 0xFFFFFFFFu) != 0, high = (mask >> 32) != 0;
  const uint32_t lo32 = static_cast<uint32_t>(v), hi32 = static_cast<uint32_t>(v >> 32);
  const auto merge = [&](uint64_t& reg, uint64_t writable) { reg = (reg & ~(mask & writable)) | (v & writable); };
  switch (offset & ~7u) {
    case kGcmd:
      if (low) Gcmd(lo32);
      break;
    case kRtaddr:
      merge(rtaddr_, kPageMask);
      break;
    case kCcmd:
      // Context-cache invalidation (10.4.7): nothing is cached, so it is
      // done at once: ICC clears, CAIG = CIRG.
      merge(ccmd_, ~0ull);
      if (ccmd_ >> 63) ccmd_ = (ccmd_ & ~((1ull << 63) | (3ull << 59))) | (((ccmd_ >> 61) & 3) << 59);
      break;
    case kFstsSlot:
      if (high) fsts_ &= ~(hi32 & kFstsW1c);
      MaybeClearFaultPending();
      break;
    case kFectlSlot:
      WriteEventControl(fault_event_, low, high, lo32, hi32);
      break;
    case kFeaddrSlot:
      WriteEventAddress(fault_event_, low, high, lo32, hi32);
      break;
    case kIqt:
      merge(iqt_, 0x7FFF0);
      if (qie_) ProcessQueue();
      break;
    case kIqa:
      merge(iqa_, kPageMask | 7);
      break;
    case kIcsSlot:
      if (high && (hi32 & 1)) {
        ics_ &= ~1u;
        inv_event_.control &= ~kIp;
      }
      break;
    case kIectlSlot:
      WriteEventControl(inv_event_, low, high, lo32, hi32);
      break;
    case kIeaddrSlot:
      WriteEventAddress(inv_event_, low, high, lo32, hi32);
      break;
    case kIrta:
      // Address, EIME (x2APIC destinations: ECAP.EIM) and size.
      merge(irta_, kPageMask | kIrtaEime | 0xF);
      break;
    case kIva:
      merge(iva_, ~0ull);
      break;
    case kIotlb:
      // IOTLB invalidation (10.4.8.1): done at once, IVT clears, IAIG = IIRG.
      merge(iotlb_, ~0ull);
      if (iotlb_ >> 63) iotlb_ = (iotlb_ & ~((1ull << 63) | (3ull << 57))) | (((iotlb_ >> 60) & 3) << 57);
      break;
    case kFrcdHi:
      // F (bit 127) is write-1-to-clear; the rest is read only.
      if (high && (hi32 >> 31)) {
        frcd_hi_ &= ~(1ull << 63);
        MaybeClearFaultPending();
      }
      break;
    default:
      break;  // read-only or no register
  }
}

void IntelIommu::Gcmd(uint32_t cmd) {
  // Software writes the status it wants with one field changed (10.4.4);
  // each field is applied as written.
  te_ = (cmd & kTe) != 0;
  if (cmd & kSrtp) {
    root_ = rtaddr_ & kPageMask;
    rtps_ = true;
  }
  if ((cmd & kQie) && !qie_) {
    qie_ = true;  // IQH is 0 here (reset, or QI disabled last)
    ProcessQueue();
  } else if (!(cmd & kQie) && qie_ && iqh_ == iqt_) {
    qie_ = false;  // only once the queue is empty
    iqh_ = 0;
  }
  ire_ = (cmd & kIre) != 0;
  if (cmd & kSirtp) {
    irt_ = irta_;
    irtps_ = true;
  }
  cfi_ = (cmd & kCfi) != 0;
}

void IntelIommu::ProcessQueue() {
  const uint64_t entries = 1ull << ((iqa_ & 7) + 8);  // 2^(QS+8) 128-bit descriptors
  const uint64_t base = iqa_ & kPageMask;
  for (uint64_t n = 0; n < entries && iqh_ != iqt_ && !(fsts_ & kIqe); n++) {
    absl::StatusOr<uint64_t> lo = ram_.ReadLe<uint64_t>(Gpa(base + iqh_));
    absl::StatusOr<uint64_t> hi = ram_.ReadLe<uint64_t>(Gpa(base + iqh_ + 8));
    bool ok = lo.ok() && hi.ok() && iqt_ < entries * 16;
    if (ok) {
      switch (*lo & 0xF) {
        case kDescContext:
        case kDescIotlb:
        case kDescIec:
          break;  // nothing cached: complete
        case kDescWait:
          if (*lo & kWaitSw) ok = ram_.WriteLe<uint32_t>(Gpa(*hi & ~3ull), static_cast<uint32_t>(*lo >> 32)).ok();
          if (ok && (*lo & kWaitIf)) {
            ics_ |= 1;
            Event(inv_event_);
          }
          break;
        default:
          ok = false;  // device-TLB and PASID descriptors: not supported
          break;
      }
    }
    if (!ok) {
      // Invalidation queue error (6.5.2.10): IQH stays at the descriptor.
      fsts_ |= kIqe;
      Event(fault_event_);
      return;
    }
    iqh_ = (iqh_ + 16) % (entries * 16);
  }
}

void IntelIommu::Event(EventRegs& ev) {
  // 7.3, 5.1.5: IP is set; unless masked the message goes out and IP clears.
  ev.control |= kIp;
  if (ev.control & kIm) return;
  ev.control &= ~kIp;
  if (event_) event_(MsiMessage{ev.AddressSlot(), ev.data});
}

void IntelIommu::WriteEventControl(EventRegs& ev, bool low, bool high, uint32_t lo32, uint32_t hi32) {
  if (low) {
    ev.control = (ev.control & kIp) | (lo32 & kIm);  // IP is read only
    if (!(ev.control & kIm) && (ev.control & kIp)) Event(ev);
  }
  if (high) ev.data = hi32 & 0xFFFF;
}

void IntelIommu::WriteEventAddress(EventRegs& ev, bool low, bool high, uint32_t lo32, uint32_t hi32) {
  if (low) ev.addr = lo32 & ~3u;
  if (high) ev.upper = hi32 & ~0xFFu;  // x2APIC destination bits 31:8 (EIM)
}

void IntelIommu::MaybeClearFaultPending() {
  if (!(fsts_ & kFstsW1c) && !(frcd_hi_ >> 63)) fault_event_.control &= ~kIp;
}

void IntelIommu::RecordFault(uint16_t source, uint64_t address, Reason reason, bool read) {
  // Primary fault logging (7.2.1) into the one fault recording register:
  // FI, SID, FR, T (1: read) and F; a fault while F is set overflows (PFO).
  if (frcd_hi_ >> 63) {
    fsts_ |= kPfo;
  } else {
    frcd_lo_ = address & kPageMask;
    frcd_hi_ = source | static_cast<uint64_t>(reason) << 32 | (read ? 1ull << 62 : 0) | 1ull << 63;
  }
  Event(fault_event_);
}

std::optional<uint64_t> IntelIommu::TranslateDma(uint16_t requester, uint64_t address, bool write) {
  Reason reason = kRootNotPresent;
  bool fpd = false;
  std::optional<uint64_t> out = Translate(requester, address, write, reason, fpd);
  if (!out && !fpd) RecordFault(requester, address, reason, !write);
  return out;
}

std::optional<uint64_t> IntelIommu::Translate(uint16_t requester, uint64_t address, bool write, Reason& reason,
                                              bool& fpd) {
  if (!te_) return address;
  // Root entry (9.1): present bit 0, context table 63:12; the rest reserved.
  absl::StatusOr<uint64_t> root_lo = ram_.ReadLe<uint64_t>(Gpa(root_ + 16ull * (requester >> 8)));
  absl::StatusOr<uint64_t> root_hi = ram_.ReadLe<uint64_t>(Gpa(root_ + 16ull * (requester >> 8) + 8));
  if (!root_lo.ok() || !root_hi.ok()) return reason = kRootTableInvalid, std::nullopt;
  if (!(*root_lo & 1)) return reason = kRootNotPresent, std::nullopt;
  if ((*root_lo & 0xFFE) || *root_hi || (*root_lo & ~kAddr52 & kPageMask)) return reason = kRootReserved, std::nullopt;
  // Context entry (9.3): P, FPD, TT 3:2, second-level table 63:12; AW 66:64,
  // DID 87:72.
  const uint64_t ctx = (*root_lo & kAddr52) + 16ull * (requester & 0xFF);
  absl::StatusOr<uint64_t> ctx_lo = ram_.ReadLe<uint64_t>(Gpa(ctx));
  absl::StatusOr<uint64_t> ctx_hi = ram_.ReadLe<uint64_t>(Gpa(ctx + 8));
  if (!ctx_lo.ok() || !ctx_hi.ok()) return reason = kContextTableInvalid, std::nullopt;
  if (!(*ctx_lo & 1)) return reason = kContextNotPresent, std::nullopt;
  fpd = (*ctx_lo & 2) != 0;
  if ((*ctx_lo & 0xFF0) || (*ctx_hi & ~0xFFFF7Full) || (*ctx_lo & ~kAddr52 & kPageMask))
    return reason = kContextReserved, std::nullopt;
  const uint64_t tt = (*ctx_lo >> 2) & 3;
  if (tt == 2) return address;  // pass-through (ECAP.PT)
  if (tt != 0) return reason = kContextType, std::nullopt;  // device TLBs: ECAP.DT is clear
  const uint64_t aw = *ctx_hi & 7;
  if (aw != 1 && aw != 2) return reason = kContextInvalid, std::nullopt;  // not in SAGAW
  const int levels = aw == 1 ? 3 : 4;
  if (address >> (12 + 9 * levels)) return reason = kBeyondAgaw, std::nullopt;
  // Second-level walk (3.6, 9.8): R and W at every level.
  uint64_t table = *ctx_lo & kAddr52;
  for (int level = levels; level >= 1; level--) {
    const int shift = 12 + 9 * (level - 1);
    absl::StatusOr<uint64_t> pte = ram_.ReadLe<uint64_t>(Gpa(table + 8 * ((address >> shift) & 0x1FF)));
    if (!pte.ok()) return reason = kPagingEntryInvalid, std::nullopt;
    if (write ? !(*pte & 2) : !(*pte & 1)) return reason = write ? kWrite : kRead, std::nullopt;
    const bool super = level > 1 && (*pte & (1u << 7));
    if (super && level > 3) return reason = kPagingReserved, std::nullopt;  // no 512-GiB pages
    if (level == 1 || super) {
      const uint64_t page = (1ull << shift) - 1;
      return ((*pte & kAddr52) & ~page) | (address & page);
    }
    table = *pte & kAddr52;
  }
  return reason = kPagingEntryInvalid, std::nullopt;  // (not reached)
}

std::optional<MsiMessage> IntelIommu::RemapInterrupt(std::optional<uint16_t> requester, const MsiMessage& request) {
  Reason reason = kIrRequestReserved;
  bool fpd = false;
  std::optional<MsiMessage> out = Remap(requester, request, reason, fpd);
  if (!out && !fpd) {
    // Interrupt faults record the interrupt index in FI bits 63:48.
    const uint64_t index = ((request.address >> 5) & 0x7FFF) | ((request.address >> 2) & 1) << 15;
    RecordFault(requester.value_or(0), index << 48, reason, /*read=*/false);
  }
  return out;
}

std::optional<MsiMessage> IntelIommu::Remap(std::optional<uint16_t> requester, const MsiMessage& request,
                                            Reason& reason, bool& fpd) {
  if (!ire_) return request;
  const bool eime = (irt_ & kIrtaEime) != 0;
  if (!(request.address & (1u << 4))) {
    // Compatibility format: only while CFIS is set, and never in x2APIC
    // mode (5.1.2.1: EIME blocks them whatever CFI says).
    if (cfi_ && !eime) return request;
    return reason = kIrCompatBlocked, std::nullopt;
  }
  uint32_t index = static_cast<uint32_t>(((request.address >> 5) & 0x7FFF) | ((request.address >> 2) & 1) << 15);
  if (request.address & (1u << 3)) {  // SHV: plus the subhandle; data[31:16] reserved
    if (request.data >> 16) return reason = kIrRequestReserved, std::nullopt;
    index += request.data & 0xFFFF;
  }
  if (index >= (2u << (irt_ & 0xF))) return reason = kIrIndexBeyondSize, std::nullopt;
  // IRTE (9.10): P 0, FPD 1, DM 2, RH 3, TM 4, DLM 7:5, IM 15, V 23:16,
  // DST 63:32 (xAPIC: 47:40); SID 79:64, SQ 81:80, SVT 83:82.
  const uint64_t at = (irt_ & kPageMask) + 16ull * index;
  absl::StatusOr<uint64_t> lo = ram_.ReadLe<uint64_t>(Gpa(at));
  absl::StatusOr<uint64_t> hi = ram_.ReadLe<uint64_t>(Gpa(at + 8));
  if (!lo.ok() || !hi.ok()) return reason = kIrTableInvalid, std::nullopt;
  if (!(*lo & 1)) return reason = kIrEntryNotPresent, std::nullopt;
  fpd = (*lo & 2) != 0;
  // Reserved: 14:12, IM (posted), 31:24, 127:84; in xAPIC mode also DST
  // outside 47:40 (x2APIC mode: all 32 bits are the destination).
  const uint64_t dst_reserved = eime ? 0 : 0xFFFF'00FF'0000'0000ull;
  if ((*lo & 0xFF00'F000ull) || (*lo & dst_reserved) || (*hi >> 20)) return reason = kIrEntryReserved, std::nullopt;
  const uint64_t svt = (*hi >> 18) & 3, sq = (*hi >> 16) & 3, sid = *hi & 0xFFFF;
  if (svt == 3) return reason = kIrEntryReserved, std::nullopt;
  if (requester && svt == 1) {
    static constexpr uint16_t kSqMask[4] = {0xFFFF, 0xFFFB, 0xFFF9, 0xFFF8};  // which function bits compare
    if ((*requester & kSqMask[sq]) != (sid & kSqMask[sq])) return reason = kIrSourceId, std::nullopt;
  } else if (requester && svt == 2) {
    const uint16_t bus = *requester >> 8;  // between SID[15:8] and SID[7:0]
    if (bus < (sid >> 8) || bus > (sid & 0xFF)) return reason = kIrSourceId, std::nullopt;
  }
  // The destination: 8 bits (xAPIC) in address bits 19:12; an x2APIC one's
  // bits 31:8 in address bits 63:40 (the upper address, as FEUADDR holds
  // them).
  const uint64_t dest = eime ? (*lo >> 32) : (*lo >> 40) & 0xFF;
  const uint64_t address = 0xFEE00000ull | (dest & 0xFF) << 12 | (dest >> 8) << 40 | ((*lo >> 3) & 1) << 3 |
                           ((*lo >> 2) & 1) << 2;
  const uint32_t data = static_cast<uint32_t>(((*lo >> 16) & 0xFF) | ((*lo >> 5) & 7) << 8 | ((*lo >> 4) & 1) << 15);
  return MsiMessage{address, data, eime};
}

namespace {

// IommuDmaRead/IommuDmaWrite: `access(gpa, offset, n)` for each page.
template <typename Access>
absl::Status Dma(IntelIommu* iommu, uint16_t requester, uint64_t address, uint64_t len, bool write, Access access) {
  for (uint64_t done = 0; done < len;) {
    const uint64_t at = address + done;
    const uint64_t n = std::min(len - done, 0x1000 - (at & 0xFFF));
    std::optional<uint64_t> gpa = iommu ? iommu->TranslateDma(requester, at, write) : at;
    if (!gpa)
      return absl::PermissionDeniedError(absl::StrFormat("DMA %s 0x%x: IOMMU fault", write ? "write" : "read", at));
    VBTS_RETURN_IF_ERROR(access(*gpa, done, n));
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status IommuDmaRead(IntelIommu* iommu, PhysMemory& ram, uint16_t requester, uint64_t address,
                          absl::Span<uint8_t> out) {
  return Dma(iommu, requester, address, out.size(), /*write=*/false, [&](uint64_t gpa, uint64_t offset, uint64_t n) {
    return ram.Read(Gpa(gpa), out.subspan(offset, n));
  });
}

absl::Status IommuDmaWrite(IntelIommu* iommu, PhysMemory& ram, uint16_t requester, uint64_t address,
                           absl::Span<const uint8_t> data) {
  return Dma(iommu, requester, address, data.size(), /*write=*/true, [&](uint64_t gpa, uint64_t offset, uint64_t n) {
    return ram.Write(Gpa(gpa), data.subspan(offset, n));
  });
}

}  // namespace vbts::vmm
