// Cost of the virtual PMU per observed instruction, for the budget of
// docs/benchmarks.md: vbts's own work per stepped instruction should add at
// most 20% to one KVM single-step (~6.5 µs on this host), i.e. ~1.3 µs.
#include <benchmark/benchmark.h>

#include "pmu/testing/fake_memory.h"
#include "pmu/vpmu.h"

namespace vbts::pmu {
namespace {

// A mix like the guest-tests: 70% non-branches, 20% taken jumps, 10% not-taken Jcc.
Branch Nth(int i) {
  Branch b;
  b.from = 0x100000 + (i & 0xFFF) * 3;
  b.to = b.from + 2;
  const int r = i % 10;
  b.kind = r < 7 ? BranchKind::kNone : r < 9 ? BranchKind::kJmp : BranchKind::kNone;
  b.branch_insn = r >= 7;
  if (b.kind == BranchKind::kJmp) b.to = 0x100000 + ((i * 7) & 0xFFF);
  return b;
}

void Setup(VirtualPmu& p, testing::FakePhysMemory& mem, uint64_t debugctl, bool counters) {
  // DS area at 0x1000, a 4096-record circular BTS buffer at 0x10000.
  (void)mem.WriteLe<uint64_t>(Gpa(0x1000), 0x10000);
  (void)mem.WriteLe<uint64_t>(Gpa(0x1008), 0x10000);
  (void)mem.WriteLe<uint64_t>(Gpa(0x1010), 0x10000 + 4096 * 24);
  (void)mem.WriteLe<uint64_t>(Gpa(0x1018), 0x10000 + 4096 * 24);
  p.WriteMsr(0x600, 0x1000);
  p.WriteMsr(0x1D9, debugctl);
  if (counters) {
    p.WriteMsr(0x186, 0xC0 | (3u << 16) | (1u << 22));
    p.WriteMsr(0x187, 0xC4 | (3u << 16) | (1u << 22));
    p.WriteMsr(0x38F, 3);
  }
}

void BM_Observe(benchmark::State& state) {
  const uint64_t debugctl = state.range(0);
  testing::FakePhysMemory mem(1 << 20);
  VirtualPmu p(*FindCpuModel("westmere"));
  Setup(p, mem, debugctl, state.range(1) != 0);
  LinearMemory lin(mem, PagingRegs{});
  int i = 0;
  for (auto _ : state) {
    absl::StatusOr<PmuEffects> fx = p.Observe(Nth(i++), lin, false);
    benchmark::DoNotOptimize(fx);
  }
  state.SetItemsProcessed(state.iterations());
}
// Args: DEBUGCTL, counters on. 0xC0 = TR|BTS, 0xC1 = + LBR.
BENCHMARK(BM_Observe)->Args({0, 0})->Args({0, 1})->Args({0xC0, 0})->Args({0xC1, 1});

}  // namespace
}  // namespace vbts::pmu
