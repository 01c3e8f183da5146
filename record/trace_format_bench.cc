// trace_format_bench.cc: encoder and decoder throughput of the trace file
// (docs/benchmarks.md).  The stream is a recording of branchy_pm32 when
// VBTS_BENCH_TRACE names one (vbts record -o), else a synthetic mix.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>

#include "record/trace_format.h"

namespace vbts::record::trace {
namespace {

std::vector<Record> Stream() {
  if (const char* path = std::getenv("VBTS_BENCH_TRACE")) {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    absl::StatusOr<ParsedTrace> t = ParseTrace(bytes);
    if (t.ok() && !t->records.empty()) return t->records;
  }
  std::mt19937 rng(1);
  std::vector<Record> v;
  for (int i = 0; i < 100000; i++) {
    Record r;
    r.kind = pmu::BranchKind::kJcc;
    r.from = 0x100000 + rng() % 0x2000;
    r.to = 0x100000 + rng() % 0x2000;
    v.push_back(r);
  }
  return v;
}

void BM_Encode(benchmark::State& state) {
  const std::vector<Record> recs = Stream();
  uint64_t bytes = 0;
  for (auto _ : state) {
    Writer w([&bytes](absl::Span<const uint8_t> b) {
      bytes += b.size();
      return absl::OkStatus();
    });
    for (const Record& r : recs) benchmark::DoNotOptimize(w.Add(r));
    benchmark::DoNotOptimize(w.Finish({}));
  }
  state.SetItemsProcessed(state.iterations() * recs.size());
  state.counters["bytes/record"] = static_cast<double>(bytes) / (state.iterations() * recs.size());
}
BENCHMARK(BM_Encode);

void BM_Decode(benchmark::State& state) {
  const std::vector<Record> recs = Stream();
  std::string file;
  Writer w([&file](absl::Span<const uint8_t> b) {
    file.append(reinterpret_cast<const char*>(b.data()), b.size());
    return absl::OkStatus();
  });
  (void)w.WriteHeader(Header{});
  for (const Record& r : recs) (void)w.Add(r);
  (void)w.Finish({});
  for (auto _ : state) benchmark::DoNotOptimize(ParseTrace(file));
  state.SetItemsProcessed(state.iterations() * recs.size());
}
BENCHMARK(BM_Decode);

}  // namespace
}  // namespace vbts::record::trace

BENCHMARK_MAIN();
