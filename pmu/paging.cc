// paging.cc: guest page-table walks (SDM vol. 3A 4.3–4.8) and LinearMemory.
#include "pmu/paging.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace vbts::pmu {
namespace {

constexpr uint64_t kCr0Pg = 1ull << 31;
constexpr uint64_t kCr0Wp = 1ull << 16;
constexpr uint64_t kCr4Pse = 1ull << 4;
constexpr uint64_t kCr4Pae = 1ull << 5;
constexpr uint64_t kCr4La57 = 1ull << 12;
constexpr uint64_t kCr4Smep = 1ull << 20;
constexpr uint64_t kCr4Smap = 1ull << 21;
constexpr uint64_t kEferLme = 1ull << 8;
constexpr uint64_t kEferNxe = 1ull << 11;

// Paging-structure entry bits (SDM 4.3–4.5, tables 4-4 … 4-20).
constexpr uint64_t kPteP = 1ull << 0;
constexpr uint64_t kPteRw = 1ull << 1;
constexpr uint64_t kPteUs = 1ull << 2;
constexpr uint64_t kPteA = 1ull << 5;
constexpr uint64_t kPteD = 1ull << 6;
constexpr uint64_t kPtePs = 1ull << 7;
constexpr uint64_t kPteXd = 1ull << 63;

// Bits [hi:lo] set.
constexpr uint64_t Bits(int hi, int lo) {
  return ((hi >= 63) ? ~0ull : ((1ull << (hi + 1)) - 1)) & ~((1ull << lo) - 1);
}

// One paging-structure entry used by a walk, remembered so A/D can be set
// after the walk succeeded.
struct UsedEntry {
  Gpa addr;
  uint64_t value;
  bool has_accessed_flag;  // PAE PDPTEs have none (bit 5 is reserved)
};

AccessFault MakePf(uint64_t la, uint32_t bits) {
  AccessFault f;
  f.kind = AccessFault::Kind::kPageFault;
  f.error_code = bits;
  f.address = la;
  return f;
}

}  // namespace

PagingMode PagingModeOf(const PagingRegs& regs) {
  if (!(regs.cr0 & kCr0Pg)) return PagingMode::kNone;
  if (!(regs.cr4 & kCr4Pae)) return PagingMode::k32Bit;
  if (regs.efer & kEferLme) return PagingMode::k4Level;
  return PagingMode::kPae;
}

bool IsCanonical(uint64_t la, int width) {
  int64_t s = static_cast<int64_t>(la << (64 - width)) >> (64 - width);
  return static_cast<uint64_t>(s) == la;
}

absl::StatusOr<Translation> Translate(const PagingRegs& regs, PhysMemory& mem, Gva gva, Access access,
                                      bool set_accessed_dirty, WalkRecord* record) {
  Translation t;
  const uint64_t la = gva.value;
  const PagingMode mode = PagingModeOf(regs);
  if (record != nullptr) record->count = 0;
  if (mode == PagingMode::kNone) {
    // SDM 4.1: without paging the linear address is the physical address;
    // linear addresses are 32 bits wide outside IA-32e mode.
    t.gpa = Gpa(la & 0xffffffffull);
    t.page_size = 1ull << 32;
    return t;
  }
  if (mode == PagingMode::k4Level && (regs.cr4 & kCr4La57))
    return absl::UnimplementedError("paging: 5-level paging (CR4.LA57=1) is not supported");
  if (mode == PagingMode::k4Level && !IsCanonical(la)) {
    t.fault.kind = AccessFault::Kind::kNonCanonical;
    t.fault.address = la;
    return t;
  }

  const bool nxe = (regs.efer & kEferNxe) && mode != PagingMode::k32Bit;
  const int m = std::clamp(regs.maxphyaddr, 32, 52);
  // Physical-address bits at or above MAXPHYADDR are reserved (SDM 4.4.2, 4.5.4).
  const uint64_t rsvd_phys = Bits(51, m);
  const uint64_t rsvd_xd = nxe ? 0 : kPteXd;

  // Fault bits that describe the access itself (SDM 4.7).
  uint32_t access_bits = 0;
  if (access.write) access_bits |= kPfWrite;
  if (access.user) access_bits |= kPfUser;
  if (access.fetch && ((regs.cr4 & kCr4Smep) || nxe)) access_bits |= kPfFetch;

  absl::InlinedVector<UsedEntry, 4> used;  // at most 4 levels
  bool rw = true, us = true, xd = false;
  uint64_t pa = 0;

  auto present_or_fault = [&](uint64_t e) { return (e & kPteP) != 0; };

  if (mode == PagingMode::k32Bit) {
    // SDM 4.3: 10/10/12 split, 4-byte entries; PSE 4-MiB pages.
    Gpa pde_addr((regs.cr3 & 0xfffff000ull) + ((la >> 22) & 0x3ff) * 4);
    VBTS_ASSIGN_OR_RETURN(uint32_t pde, mem.ReadLe<uint32_t>(pde_addr));
    if (!present_or_fault(pde)) {
      t.fault = MakePf(la, access_bits);
      return t;
    }
    used.push_back({pde_addr, pde, true});
    rw &= (pde & kPteRw) != 0;
    us &= (pde & kPteUs) != 0;
    if ((pde & kPtePs) && (regs.cr4 & kCr4Pse)) {
      // PSE-36 (SDM table 4-4): PDE bits 20:13 hold PA bits 39:32; bits
      // 21:(13+min(M,40)-32) are reserved.
      const int hi_bits = std::min(m, 40) - 32;
      const uint64_t rsvd = Bits(21, 13 + hi_bits);
      if (pde & rsvd) {
        t.fault = MakePf(la, access_bits | kPfPresent | kPfRsvd);
        return t;
      }
      uint64_t high = hi_bits > 0 ? (pde >> 13) & ((1ull << hi_bits) - 1) : 0;
      pa = (high << 32) | (pde & 0xffc00000ull) | (la & 0x3fffff);
      t.page_size = 4ull << 20;
    } else {
      Gpa pte_addr((pde & 0xfffff000ull) + ((la >> 12) & 0x3ff) * 4);
      VBTS_ASSIGN_OR_RETURN(uint32_t pte, mem.ReadLe<uint32_t>(pte_addr));
      if (!present_or_fault(pte)) {
        t.fault = MakePf(la, access_bits);
        return t;
      }
      used.push_back({pte_addr, pte, true});
      rw &= (pte & kPteRw) != 0;
      us &= (pte & kPteUs) != 0;
      pa = (pte & 0xfffff000ull) | (la & 0xfff);
      t.page_size = 4096;
    }
  } else {
    // PAE (SDM 4.4) and 4-level (SDM 4.5): 9 bits per level, 8-byte entries.
    int level;
    uint64_t table;
    if (mode == PagingMode::kPae) {
      // PDPTE registers (SDM 4.4.1), re-read here on every walk.
      Gpa pdpte_addr((regs.cr3 & 0xffffffe0ull) + ((la >> 30) & 3) * 8);
      VBTS_ASSIGN_OR_RETURN(uint64_t pdpte, mem.ReadLe<uint64_t>(pdpte_addr));
      if (!present_or_fault(pdpte)) {
        t.fault = MakePf(la, access_bits);
        return t;
      }
      // Table 4-8: bits 2:1, 8:5, 63:MAXPHYADDR are reserved.
      if (pdpte & (rsvd_phys | Bits(63, 52) | Bits(2, 1) | Bits(8, 5))) {
        t.fault = MakePf(la, access_bits | kPfPresent | kPfRsvd);
        return t;
      }
      used.push_back({pdpte_addr, pdpte, false});
      table = pdpte & Bits(51, 12);
      level = 2;
    } else {
      table = regs.cr3 & Bits(51, 12);
      level = 4;
    }
    for (;; --level) {
      const int shift = 12 + 9 * (level - 1);
      Gpa addr((table & Bits(51, 12)) + ((la >> shift) & 0x1ff) * 8);
      VBTS_ASSIGN_OR_RETURN(uint64_t e, mem.ReadLe<uint64_t>(addr));
      if (!present_or_fault(e)) {
        t.fault = MakePf(la, access_bits);
        return t;
      }
      const bool leaf = level == 1 || ((e & kPtePs) && (level == 2 || level == 3));
      uint64_t rsvd = rsvd_phys | rsvd_xd;
      if (level == 4 && mode == PagingMode::k4Level) rsvd |= kPtePs;  // PML4E.PS is reserved
      if (leaf && level == 3) rsvd |= Bits(29, 13);                   // 1-GiB page, table 4-16
      if (leaf && level == 2) rsvd |= Bits(20, 13);                   // 2-MiB page, table 4-18
      if (e & rsvd) {
        t.fault = MakePf(la, access_bits | kPfPresent | kPfRsvd);
        return t;
      }
      used.push_back({addr, e, true});
      rw &= (e & kPteRw) != 0;
      us &= (e & kPteUs) != 0;
      xd |= nxe && (e & kPteXd);
      if (leaf) {
        const uint64_t page_mask = (1ull << shift) - 1;
        pa = (e & Bits(51, 12) & ~page_mask) | (la & page_mask);
        t.page_size = 1ull << shift;
        break;
      }
      table = e;
    }
  }

  // Access rights (SDM 4.6).  `us` / `rw` are the AND over all levels, `xd`
  // the OR.
  bool denied = false;
  if (access.user) {
    denied |= !us;
    denied |= access.write && !rw;
    denied |= access.fetch && xd;
  } else {
    const bool smap_applies = (regs.cr4 & kCr4Smap) && us && !access.fetch && (access.implicit || !regs.rflags_ac);
    denied |= access.write && !rw && (regs.cr0 & kCr0Wp);
    denied |= smap_applies;
    denied |= access.fetch && xd;
    denied |= access.fetch && us && (regs.cr4 & kCr4Smep);
  }
  if (denied) {
    t.fault = MakePf(la, access_bits | kPfPresent);
    return t;
  }

  // SDM 4.8: A in every entry used; D in the entry that maps the page.
  for (size_t i = 0; i < used.size(); ++i) {
    UsedEntry& u = used[i];
    uint8_t low = static_cast<uint8_t>(u.value);
    uint8_t want = low;
    if (u.has_accessed_flag) want |= kPteA;
    if (i + 1 == used.size() && access.write) want |= kPteD;
    if (want == low) continue;
    if (!set_accessed_dirty) {
      t.ad_pending = true;
      break;
    }
    VBTS_RETURN_IF_ERROR(mem.WriteLe<uint8_t>(u.addr, want));
    u.value = (u.value & ~0xffull) | want;
  }
  if (record != nullptr && !t.ad_pending) {
    record->count = static_cast<int>(used.size());
    record->entry_bytes = mode == PagingMode::k32Bit ? 4 : 8;
    for (size_t i = 0; i < used.size(); ++i) {
      record->addr[i] = used[i].addr;
      record->value[i] = used[i].value;
    }
  }
  t.gpa = Gpa(pa);
  return t;
}

const TranslationCache::Entry* TranslationCache::Find(const PagingRegs& regs, uint64_t page, Access access,
                                                      const PhysMemory& mem, bool count) {
  for (Entry& e : entries_) {
    if (!e.valid || e.page != page || !(e.access == access) || !(e.regs == regs)) continue;
    // The walk would read these entries again: unchanged, it ends where it did.
    for (int i = 0; i < e.walk.count; i++) {
      uint8_t b[8] = {};
      uint64_t v = 0;
      const uint8_t* p = mem.Direct(e.walk.addr[i], e.walk.entry_bytes, /*write=*/false);
      const bool read = p ? (std::memcpy(b, p, e.walk.entry_bytes), true)
                          : mem.Read(e.walk.addr[i], absl::MakeSpan(b, e.walk.entry_bytes)).ok();
      const bool same = read && (std::memcpy(&v, b, sizeof v), v == e.walk.value[i]);
      if (!same) {
        e.valid = false;
        misses_ += count;
        return nullptr;
      }
    }
    hits_ += count;
    return &e;
  }
  misses_ += count;
  return nullptr;
}

void TranslationCache::Insert(const PagingRegs& regs, uint64_t page, Access access, uint64_t gpa_page,
                              const WalkRecord& walk) {
  Entry* slot = nullptr;
  for (Entry& e : entries_) {
    if (!e.valid) {
      slot = &e;
      break;
    }
  }
  if (slot == nullptr) {
    slot = &entries_[next_];
    next_ = (next_ + 1) % kEntries;
  }
  *slot = Entry{true, page, access, regs, gpa_page, walk};
}

template <typename Fn>
absl::StatusOr<AccessFault> LinearMemory::ForEachChunk(Gva la, uint64_t len, Access access, bool set_ad,
                                                        Fn fn) {
  struct Chunk {
    Gpa gpa;
    uint64_t offset, len;
  };
  const PagingMode mode = PagingModeOf(regs_);
  const bool wrap32 = mode != PagingMode::k4Level;
  if (len > 0 && (la.value & 0xfff) + len <= 4096) {
    // Within one page (BTS and PEBS records, DS fields): one walk, and a
    // second only to set accessed/dirty flags that are clear.
    const Gva addr(wrap32 ? (la.value & 0xffffffffull) : la.value);
    if (mode == PagingMode::kNone) {
      // Linear = physical (SDM 4.1): nothing to walk or cache.
      VBTS_RETURN_IF_ERROR(ChunkInRam(la, len, 0, len, Gpa(addr.value)));
      VBTS_RETURN_IF_ERROR(fn(Gpa(addr.value), 0, len));
      return AccessFault{};
    }
    const bool cached = cache_ != nullptr && set_ad;
    if (cached) {
      if (const TranslationCache::Entry* e = cache_->Find(regs_, addr.value >> 12, access, mem_)) {
        VBTS_RETURN_IF_ERROR(fn(Gpa(e->gpa_page | (addr.value & 0xfff)), 0, len));
        return AccessFault{};
      }
    }
    WalkRecord walk;
    WalkRecord* record = cached ? &walk : nullptr;
    VBTS_ASSIGN_OR_RETURN(Translation t,
                          Translate(regs_, mem_, addr, access, /*set_accessed_dirty=*/false, record));
    if (!t.fault.ok()) return t.fault;
    if (set_ad && t.ad_pending) {
      VBTS_ASSIGN_OR_RETURN(t, Translate(regs_, mem_, addr, access, /*set_accessed_dirty=*/true, record));
      if (!t.fault.ok())  // cannot happen: the same walk just succeeded
        return absl::InternalError(absl::StrFormat("paging: walk of 0x%x changed under us", addr.value));
    }
    // In RAM, as every chunk below must be (Probe and Locate promise it).
    VBTS_RETURN_IF_ERROR(ChunkInRam(la, len, 0, len, t.gpa));
    if (cached) cache_->Insert(regs_, addr.value >> 12, access, t.gpa.value & ~0xfffull, walk);
    VBTS_RETURN_IF_ERROR(fn(t.gpa, 0, len));
    return AccessFault{};
  }
  absl::InlinedVector<Chunk, 2> chunks;
  bool ad_pending = false;
  uint64_t off = 0;
  while (off < len) {
    uint64_t addr = la.value + off;
    if (wrap32) addr &= 0xffffffffull;
    VBTS_ASSIGN_OR_RETURN(Translation t, Translate(regs_, mem_, Gva(addr), access, /*set_accessed_dirty=*/false));
    if (!t.fault.ok()) return t.fault;
    // Stop each chunk at a 4-KiB boundary whatever the page size, so the
    // 32-bit wrap and page-size corner cases need no special handling.
    uint64_t n = std::min<uint64_t>(len - off, 4096 - (addr & 0xfff));
    // Every chunk must lie in RAM before any is touched: a record straddling
    // the end of RAM (or a page mapped beyond it) is refused as a whole, not
    // written up to the end of RAM (docs/pmu-model.md, "Stores that do not
    // land in RAM").
    VBTS_RETURN_IF_ERROR(ChunkInRam(la, len, off, n, t.gpa));
    chunks.push_back({t.gpa, off, n});
    ad_pending |= t.ad_pending;
    off += n;
  }
  if (set_ad && ad_pending) {  // walk again to set them, now that every chunk is known to be accessible
    for (const Chunk& c : chunks) {
      uint64_t addr = la.value + c.offset;
      if (wrap32) addr &= 0xffffffffull;
      VBTS_ASSIGN_OR_RETURN(Translation t, Translate(regs_, mem_, Gva(addr), access, /*set_accessed_dirty=*/true));
      if (!t.fault.ok())  // cannot happen: the same walk just succeeded
        return absl::InternalError(absl::StrFormat("paging: walk of 0x%x changed under us", addr));
    }
  }
  for (const Chunk& c : chunks) VBTS_RETURN_IF_ERROR(fn(c.gpa, c.offset, c.len));
  return AccessFault{};
}

uint8_t* LinearMemory::DirectPointer(Gva la, uint64_t len, Access access) {
  if (len == 0 || (la.value & 0xfff) + len > 4096) return nullptr;
  const PagingMode mode = PagingModeOf(regs_);
  const uint64_t addr = mode != PagingMode::k4Level ? (la.value & 0xffffffffull) : la.value;
  uint64_t gpa = addr;
  if (mode != PagingMode::kNone) {
    if (cache_ == nullptr) return nullptr;
    const TranslationCache::Entry* e = cache_->Find(regs_, addr >> 12, access, mem_, /*count=*/false);
    if (e == nullptr) return nullptr;  // (a miss: the walk of Read or Write inserts it)
    gpa = e->gpa_page | (addr & 0xfff);
  }
  if (!RangeWithin(gpa, len, mem_.size())) return nullptr;
  uint8_t* p = mem_.Direct(Gpa(gpa), len, access.write);
  if (p != nullptr && mode != PagingMode::kNone) cache_->hits_++;
  return p;
}

absl::StatusOr<AccessFault> LinearMemory::Read(Gva la, absl::Span<uint8_t> out, Access access) {
  if (const uint8_t* p = DirectPointer(la, out.size(), access)) {
    std::memcpy(out.data(), p, out.size());
    return AccessFault{};
  }
  return ForEachChunk(la, out.size(), access, /*set_ad=*/true, [&](Gpa gpa, uint64_t off, uint64_t n) {
    return mem_.Read(gpa, out.subspan(off, n));
  });
}

absl::StatusOr<AccessFault> LinearMemory::Write(Gva la, absl::Span<const uint8_t> data, Access access) {
  access.write = true;
  if (uint8_t* p = DirectPointer(la, data.size(), access)) {
    std::memcpy(p, data.data(), data.size());
    return AccessFault{};
  }
  return ForEachChunk(la, data.size(), access, /*set_ad=*/true, [&](Gpa gpa, uint64_t off, uint64_t n) {
    return mem_.Write(gpa, data.subspan(off, n));
  });
}

absl::StatusOr<AccessFault> LinearMemory::Probe(Gva la, uint64_t len, Access access) {
  return ForEachChunk(la, len, access, /*set_ad=*/false,
                      [](Gpa, uint64_t, uint64_t) { return absl::OkStatus(); });
}

absl::Status LinearMemory::ChunkOutsideRam(Gva la, uint64_t len, uint64_t off, uint64_t n, Gpa gpa) const {
  return absl::OutOfRangeError(
      absl::StrFormat("access of %u bytes at linear 0x%x: bytes [0x%x, 0x%x) map to GPA 0x%x, outside RAM (0x%x bytes)",
                      len, la.value, off, off + n, gpa.value, mem_.size()));
}

absl::StatusOr<AccessFault> LinearMemory::Locate(Gva la, uint64_t len, Access access, std::vector<PhysChunk>& out) {
  out.clear();
  return ForEachChunk(la, len, access, /*set_ad=*/false, [&out](Gpa gpa, uint64_t off, uint64_t n) {
    out.push_back(PhysChunk{gpa, off, n});
    return absl::OkStatus();
  });
}

absl::StatusOr<AccessFault> LinearMemory::MarkAccessedDirty(Gva la, uint64_t len, Access access) {
  return ForEachChunk(la, len, access, /*set_ad=*/true, [](Gpa, uint64_t, uint64_t) { return absl::OkStatus(); });
}

}  // namespace vbts::pmu
