// paging.h: linear → guest-physical translation through the guest's own page
// tables (no paging, 32-bit, PAE, 4-level IA-32e; SDM vol. 3A ch. 4), with the
// exact #PF error code and Accessed/Dirty updates, plus LinearMemory for
// multi-byte accesses that may cross pages.
//
// Modelling choices (see docs/completion.md, "Paging"):
//  - Supervisor/user semantics follow SDM 4.6: `Access::user` is true only for
//    an explicit access made at CPL 3; implicit supervisor accesses (GDT, IDT,
//    TSS, stacks reached by a privilege change) pass user=false and
//    implicit=true.  CR0.WP, EFER.NXE, CR4.SMEP and CR4.SMAP are honoured;
//    protection keys and CET shadow stacks are not modelled (PK/SS error-code
//    bits are never set); 5-level paging (CR4.LA57) is refused with
//    Unimplemented.
//  - PAE PDPTEs are re-read from memory on every walk instead of being cached
//    at MOV CR3; a reserved bit in one gives #PF(RSVD) rather than the #GP that
//    hardware raises at the MOV CR3.
//  - Accessed and Dirty flags (SDM 4.8) are written only when a translation
//    succeeds: A in every paging-structure entry used, D in the entry that maps
//    the page on a write.  A failing walk leaves memory untouched.
//  - A paging-structure entry outside guest RAM is not a guest fault but an
//    OutOfRange status from PhysMemory, passed through unchanged.
#ifndef VBTS_PMU_PAGING_H_
#define VBTS_PMU_PAGING_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pmu/phys_memory.h"
#include "pmu/types.h"

namespace vbts::pmu {

// The control registers that select and configure paging (SDM 4.1).
struct PagingRegs {
  uint64_t cr0 = 0;
  uint64_t cr3 = 0;
  uint64_t cr4 = 0;
  uint64_t efer = 0;
  // Physical-address width (CPUID 80000008H:EAX[7:0]); entry bits at or above
  // it are reserved (SDM 4.1.4).  52 means "no such reserved bits".
  int maxphyaddr = 52;
  // RFLAGS.AC, consulted by SMAP for explicit supervisor accesses (SDM 4.6).
  bool rflags_ac = false;
  bool operator==(const PagingRegs&) const = default;
};

// Paging mode chosen by CR0.PG, CR4.PAE and EFER.LME (SDM 4.1.1, table 4-1).
enum class PagingMode { kNone, k32Bit, kPae, k4Level };
PagingMode PagingModeOf(const PagingRegs& regs);

// What kind of access is being translated.
struct Access {
  bool write = false;
  bool user = false;      // explicit access at CPL 3 (SDM 4.6 "user-mode access")
  bool fetch = false;     // instruction fetch
  bool implicit = false;  // implicit supervisor access (descriptor tables, TSS)
  bool operator==(const Access&) const = default;
};

// #PF error-code bits (SDM 4.7, figure 4-12).
inline constexpr uint32_t kPfPresent = 1u << 0;
inline constexpr uint32_t kPfWrite = 1u << 1;
inline constexpr uint32_t kPfUser = 1u << 2;
inline constexpr uint32_t kPfRsvd = 1u << 3;
inline constexpr uint32_t kPfFetch = 1u << 4;

// Why a linear access cannot complete, as the guest would see it.
struct AccessFault {
  enum class Kind { kNone, kPageFault, kNonCanonical };
  Kind kind = Kind::kNone;
  uint32_t error_code = 0;  // #PF error code (kPageFault only)
  uint64_t address = 0;     // CR2 for #PF; the offending address otherwise
  bool ok() const { return kind == Kind::kNone; }
  bool operator==(const AccessFault&) const = default;
};

struct Translation {
  AccessFault fault;      // kind == kNone when the translation succeeded
  Gpa gpa;                // valid when fault.ok()
  uint64_t page_size = 0;  // 4 KiB, 2 MiB, 4 MiB, 1 GiB; 2^32 without paging
  // Without set_accessed_dirty: an accessed or dirty flag the access would set is clear.
  bool ad_pending = false;
};

// True if `la` is canonical for a `width`-bit linear address space (SDM 3.3.7.1).
bool IsCanonical(uint64_t la, int width = 48);

// The paging-structure entries a successful walk read, with the values they
// hold after it (accessed and dirty flags it set included).
struct WalkRecord {
  int count = 0;
  Gpa addr[4];
  uint64_t value[4] = {};
  int entry_bytes = 8;  // 4 under 32-bit paging
};

// Translates one linear address.  With set_accessed_dirty the A/D flags are
// updated on success as SDM 4.8 describes; pass false to probe.  The returned
// status is not OK only for a host-side problem (paging structure outside RAM,
// unsupported 5-level paging).  `record`, if given, receives the entries a
// successful walk used.
absl::StatusOr<Translation> Translate(const PagingRegs& regs, PhysMemory& mem, Gva la, Access access,
                                      bool set_accessed_dirty = true, WalkRecord* record = nullptr);

// Successful single-page translations of LinearMemory's reads and writes,
// kept between accesses (the virtual PMU's BTS and PEBS stores go to the
// same DS area and buffer pages again and again).  An entry is used only
// while the paging registers and the access are the same and every
// paging-structure entry its walk read still holds the value the walk left
// in it (read again at each use): then a new walk would read the same
// entries, find their accessed and dirty flags already set and end at the
// same page, so the cache changes no result and no guest memory — a guest
// that edits its page tables (or clears an A/D flag), loads CR3 or turns
// paging on or off is seen at the next access.
class TranslationCache {
 public:
  void Clear() { entries_ = {}; }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  friend class LinearMemory;
  struct Entry {
    bool valid = false;
    uint64_t page = 0;  // linear address >> 12 (after the 32-bit wrap)
    Access access;
    PagingRegs regs;
    uint64_t gpa_page = 0;  // where that 4-KiB page is
    WalkRecord walk;
  };
  // The physical page of linear page `page`, if an entry still holds.
  // `count`: whether the lookup counts as a hit or miss (LinearMemory's
  // direct path counts only the hits it uses).
  const Entry* Find(const PagingRegs& regs, uint64_t page, Access access, const PhysMemory& mem, bool count = true);
  void Insert(const PagingRegs& regs, uint64_t page, Access access, uint64_t gpa_page, const WalkRecord& walk);

  static constexpr int kEntries = 4;
  std::array<Entry, kEntries> entries_{};
  int next_ = 0;  // round-robin replacement
  uint64_t hits_ = 0, misses_ = 0;
};

// Byte-granular reads and writes at linear addresses, splitting at page
// boundaries.  Every page is translated (and checked) before any byte is
// written, so a faulting write changes nothing; nor does one whose bytes map
// partly outside RAM (OutOfRange, nothing written).  Without paging, addresses
// wrap at 4 GiB (SDM 4.1: no paging means linear = physical, 32 bits).
class LinearMemory {
 public:
  // `cache`, if given, keeps translations of single-page reads and writes
  // between LinearMemory objects (TranslationCache; Probe does not use it).
  LinearMemory(PhysMemory& mem, const PagingRegs& regs, TranslationCache* cache = nullptr)
      : mem_(mem), regs_(regs), cache_(cache) {}

  const PagingRegs& regs() const { return regs_; }
  PhysMemory& phys() { return mem_; }

  absl::StatusOr<AccessFault> Read(Gva la, absl::Span<uint8_t> out, Access access);
  absl::StatusOr<AccessFault> Write(Gva la, absl::Span<const uint8_t> data, Access access);
  // The host bytes of [la, la+len) when Read or Write there would be one
  // plain copy and nothing else: within one 4-KiB page, with paging off or a
  // translation cached for this access (a hit: its accessed and dirty flags
  // are set already), in RAM, and where PhysMemory::Direct allows it (for a
  // write, `access.write` set). Else nullptr: Read and Write then also find
  // faults, set flags and report errors. Read and Write try it first.
  uint8_t* DirectPointer(Gva la, uint64_t len, Access access);
  // Checks that [la, la+len) could be accessed, touching nothing.
  absl::StatusOr<AccessFault> Probe(Gva la, uint64_t len, Access access);
  // Probe, and where the bytes are: page-bounded chunks, each in RAM.
  struct PhysChunk {
    Gpa gpa;
    uint64_t offset = 0;  // into [la, la+len)
    uint64_t len = 0;
  };
  absl::StatusOr<AccessFault> Locate(Gva la, uint64_t len, Access access, std::vector<PhysChunk>& out);
  // Sets the accessed (and, for a write, dirty) flags an access of [la,
  // la+len) sets in the paging structures, touching no byte of it.
  absl::StatusOr<AccessFault> MarkAccessedDirty(Gva la, uint64_t len, Access access);

 private:
  // Calls fn(gpa, offset, chunk_len) for each page-bounded chunk after all of
  // them translated successfully.
  // OutOfRange unless bytes [off, off+n) of the access, at `gpa`, lie in RAM.
  absl::Status ChunkInRam(Gva la, uint64_t len, uint64_t off, uint64_t n, Gpa gpa) const {
    return RangeWithin(gpa.value, n, mem_.size()) ? absl::OkStatus() : ChunkOutsideRam(la, len, off, n, gpa);
  }
  absl::Status ChunkOutsideRam(Gva la, uint64_t len, uint64_t off, uint64_t n, Gpa gpa) const;
  template <typename Fn>
  absl::StatusOr<AccessFault> ForEachChunk(Gva la, uint64_t len, Access access, bool set_ad, Fn fn);

  PhysMemory& mem_;
  PagingRegs regs_;
  TranslationCache* cache_;
};

}  // namespace vbts::pmu

#endif  // VBTS_PMU_PAGING_H_
