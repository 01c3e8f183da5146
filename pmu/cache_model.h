// cache_model.h: the data caches behind the architectural "LLC Reference"
// (event 2EH, umask 4FH) and "LLC Misses" (2EH, 41H) events (SDM vol. 3B
// 18.2.1.2, table 18-1): a model of two levels of one CPU's cache hierarchy,
// the largest private level (the "inner" cache: L2 on the Core i7 and Xeon
// models, L1D where the L2 is the last level) and the last-level cache.  Each
// level is set-associative with 64-byte lines and LRU replacement, its
// geometry the modelled CPU's (pmu/cpu_model.cc says where each number comes
// from).  An access that misses the inner level is an LLC reference; one that
// also misses the LLC is an LLC miss.  Both levels are filled on a miss.
// The spatial ("adjacent line") prefetcher of these CPUs is modelled: a miss
// also fills the other line of its 128-byte aligned pair (Intel 64 and IA-32
// Architectures Optimization Reference Manual, "Hardware prefetching": the
// L2 spatial prefetcher; NetBurst's and Core Duo's 128-byte sectored L2), and
// that fill is not counted (SDM vol. 3B table 18-1: the LLC events "may
// exclude cache line fills due to other hardware-prefetchers").
//
// Deliberate simplifications (docs/pmu-model.md, "LLC references and
// misses"): the levels are indexed by physical address modulo the number of
// sets (no slice hashing), neither is inclusive of the other, there are no
// prefetchers, no instruction fetches and no page walks, CLFLUSH and WBINVD
// evict nothing (QEMU's TCG does not report them, and both engines must
// count alike), and the model sees only the accesses made while some counter
// counts an LLC event.  Pure
// logic; no aborts on any input.
#ifndef VBTS_PMU_CACHE_MODEL_H_
#define VBTS_PMU_CACHE_MODEL_H_

#include <cstdint>
#include <cstdlib>
#include <memory>

namespace vbts::pmu {

inline constexpr uint32_t kCacheLineBytes = 64;

struct CacheLevelGeometry {
  uint32_t sets = 0;  // 0: the level does not exist
  uint32_t ways = 0;
  uint64_t bytes() const { return uint64_t{sets} * ways * kCacheLineBytes; }
};

// Where the spatial prefetcher puts the other line of a missed pair.
enum class PairPrefetch : uint8_t { kNone, kLlc, kInnerAndLlc };

struct CacheGeometry {
  CacheLevelGeometry inner;  // the largest private level below the LLC
  CacheLevelGeometry llc;
  PairPrefetch pair = PairPrefetch::kNone;
};

class CacheModel {
 public:
  explicit CacheModel(const CacheGeometry& geometry);

  struct Outcome {
    bool llc_reference = false;  // missed the inner level
    bool llc_miss = false;       // ... and the LLC
  };
  // One access to the line that holds physical address `pa`.
  Outcome Access(uint64_t pa);
  // What Access(pa) would return now, changing nothing (no use, no fill).
  Outcome Probe(uint64_t pa) const;

 private:
  struct Level {
    CacheLevelGeometry g;
    // sets * ways entries, from calloc at the first access: the pages of a
    // large LLC stay untouched (and unbacked) until a set in them is used.
    struct Way {
      uint64_t tag;    // line number + 1; 0 = invalid
      uint64_t stamp;  // last use, for LRU; 0 = never
    };
    struct Free {
      void operator()(Way* p) const { std::free(p); }
    };
    std::unique_ptr<Way[], Free> ways;
    uint64_t clock = 0;
    uint64_t last_tag = 0;  // the line of the last Touch + 1 (0: none)
    // True on a hit; on a miss the least recently used way of the set (an
    // invalid one first) takes the line.  False without storage (a failed
    // allocation leaves the level missing every access).
    bool Touch(uint64_t line);
    bool Holds(uint64_t line) const;
  };
  Level inner_, llc_;
  PairPrefetch pair_ = PairPrefetch::kNone;
};

}  // namespace vbts::pmu

#endif  // VBTS_PMU_CACHE_MODEL_H_
