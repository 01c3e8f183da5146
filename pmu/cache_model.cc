#include "pmu/cache_model.h"

namespace vbts::pmu {

CacheModel::CacheModel(const CacheGeometry& geometry) {
  inner_.g = geometry.inner;
  llc_.g = geometry.llc;
  pair_ = geometry.pair;
}

bool CacheModel::Level::Touch(uint64_t line) {
  if (g.sets == 0 || g.ways == 0) return false;
  // Allocated at the first access: the LLC of a server model has millions
  // of ways in all, and most runs never count an LLC event.
  if (tags.empty()) {
    tags.assign(uint64_t{g.sets} * g.ways, 0);
    stamp.assign(tags.size(), 0);
  }
  const uint64_t base = (line % g.sets) * g.ways;
  const uint64_t tag = line + 1;
  uint64_t victim = base;
  for (uint64_t w = base; w < base + g.ways; w++) {
    if (tags[w] == tag) {
      stamp[w] = ++clock;
      return true;
    }
    if (stamp[w] < stamp[victim]) victim = w;  // an invalid way has stamp 0
  }
  tags[victim] = tag;
  stamp[victim] = ++clock;
  return false;
}

CacheModel::Outcome CacheModel::Access(uint64_t pa) {
  const uint64_t line = pa / kCacheLineBytes;
  Outcome o;
  if (inner_.Touch(line)) return o;
  o.llc_reference = true;
  o.llc_miss = !llc_.Touch(line);
  // The spatial prefetcher fills the other line of the 128-byte pair.
  if (pair_ == PairPrefetch::kInnerAndLlc) inner_.Touch(line ^ 1);
  if (pair_ != PairPrefetch::kNone) llc_.Touch(line ^ 1);
  return o;
}

}  // namespace vbts::pmu
