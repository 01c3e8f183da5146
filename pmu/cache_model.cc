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
  // of ways in all, and most runs never count an LLC event.  calloc, not a
  // zero-filled vector: a fresh large block is the kernel's zero pages, so
  // only the sets a run uses cost memory (and a fuzz input that builds
  // Ice Lake's 60 MB of tags touches a few pages of them).
  if (!ways) {
    ways.reset(static_cast<Way*>(std::calloc(uint64_t{g.sets} * g.ways, sizeof(Way))));
    if (!ways) return false;
  }
  const uint64_t tag = line + 1;
  // The line the last Touch left most recently used in its set: using it
  // again changes no set's order (LRU compares stamps within a set).
  if (tag == last_tag) return true;
  last_tag = tag;
  Way* set = &ways[(line % g.sets) * g.ways];
  Way* victim = set;
  for (Way* w = set; w < set + g.ways; w++) {
    if (w->tag == tag) {
      w->stamp = ++clock;
      return true;
    }
    if (w->stamp < victim->stamp) victim = w;  // an invalid way has stamp 0
  }
  victim->tag = tag;
  victim->stamp = ++clock;
  return false;
}

bool CacheModel::Level::Holds(uint64_t line) const {
  if (!ways || g.sets == 0 || g.ways == 0) return false;
  if (line + 1 == last_tag) return true;
  const Way* set = &ways[(line % g.sets) * g.ways];
  for (const Way* w = set; w < set + g.ways; w++)
    if (w->tag == line + 1) return true;
  return false;
}

CacheModel::Outcome CacheModel::Probe(uint64_t pa) const {
  const uint64_t line = pa / kCacheLineBytes;
  Outcome o;
  if (inner_.Holds(line)) return o;
  o.llc_reference = true;
  o.llc_miss = !llc_.Holds(line);
  return o;
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
