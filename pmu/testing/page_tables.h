// page_tables.h: builds 4-level (IA-32e) page tables in a FakePhysMemory for
// unit tests (SDM vol. 3A 4.5), allocating table pages from a bump pointer.
#ifndef VBTS_PMU_TESTING_PAGE_TABLES_H_
#define VBTS_PMU_TESTING_PAGE_TABLES_H_

#include <cstdint>

#include "pmu/testing/fake_memory.h"

namespace vbts::testing {

// Entry flag bits for Map*(); P is always added.
inline constexpr uint64_t kPtW = 1ull << 1;
inline constexpr uint64_t kPtU = 1ull << 2;
inline constexpr uint64_t kPtA = 1ull << 5;
inline constexpr uint64_t kPtD = 1ull << 6;
inline constexpr uint64_t kPtPs = 1ull << 7;
inline constexpr uint64_t kPtXd = 1ull << 63;

class PageTables4 {
 public:
  // Tables are allocated from [table_area, ...) in `mem`; the PML4 is the
  // first page there (use pml4() as CR3).
  PageTables4(FakePhysMemory& mem, uint64_t table_area) : mem_(mem), next_(table_area) { pml4_ = Alloc(); }
  uint64_t pml4() const { return pml4_; }

  // Maps one page of 4 KiB (level 1), 2 MiB (level 2) or 1 GiB (level 3).
  // Intermediate entries get P|W|U plus `upper_flags` so that the leaf's
  // flags decide the access rights unless a test says otherwise.
  void Map(uint64_t la, uint64_t pa, uint64_t leaf_flags, int level = 1, uint64_t upper_flags = 0) {
    uint64_t table = pml4_;
    for (int l = 4; l > level; --l) {
      uint64_t slot = table + ((la >> (12 + 9 * (l - 1))) & 0x1ff) * 8;
      uint64_t e = Get(slot);
      if (!(e & 1)) {
        e = Alloc() | 1 | kPtW | kPtU | upper_flags;
        Set(slot, e);
      }
      table = e & 0x000ffffffffff000ull;
    }
    uint64_t slot = table + ((la >> (12 + 9 * (level - 1))) & 0x1ff) * 8;
    Set(slot, pa | 1 | leaf_flags | (level > 1 ? kPtPs : 0));
  }
  // Address of the entry at `level` that maps `la` (after Map()).
  uint64_t EntryAddr(uint64_t la, int level) const {
    uint64_t table = pml4_;
    for (int l = 4;; --l) {
      uint64_t slot = table + ((la >> (12 + 9 * (l - 1))) & 0x1ff) * 8;
      if (l == level) return slot;
      table = Get(slot) & 0x000ffffffffff000ull;
    }
  }
  uint64_t Get(uint64_t gpa) const {
    uint64_t v;
    std::memcpy(&v, mem_.bytes().data() + gpa, 8);
    return v;
  }
  void Set(uint64_t gpa, uint64_t v) { std::memcpy(mem_.bytes().data() + gpa, &v, 8); }

 private:
  uint64_t Alloc() {
    uint64_t p = next_;
    next_ += 4096;
    std::memset(mem_.bytes().data() + p, 0, 4096);
    return p;
  }
  FakePhysMemory& mem_;
  uint64_t next_;
  uint64_t pml4_;
};

}  // namespace vbts::testing

#endif  // VBTS_PMU_TESTING_PAGE_TABLES_H_
