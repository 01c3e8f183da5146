// access_owner.h: whose a data access is, as an engine reports it to the
// virtual PMU (pmu/vpmu.h, VirtualPmu::ObserveDataAccess): shared by the
// PMU and the TCG engine that reports the accesses (vcpu/tcg_cpu.h), so
// that neither translates the other's.  docs/tcg-engine.md, "Load latency
// with one hook a block".
#ifndef VBTS_PMU_ACCESS_OWNER_H_
#define VBTS_PMU_ACCESS_OWNER_H_

#include <cstdint>

namespace vbts::pmu {

// - kObserved: an instruction that is observed alone (Observe follows for
//   it, and no CountSequential comes between): its loads give its data
//   source and latency.
// - kInBulk: an instruction the engine may count in bulk, or observe as the
//   last of a block without having reported it alone.  A load that would
//   count for the load-latency event (its modelled latency above the
//   threshold, a load-latency counter counting at its CPL) changes nothing
//   then and returns PmuEffects::needs_instruction: the engine runs the
//   instruction alone and reports the access again as kObserved.  Any other
//   access counts as it would for kObserved, but gives no data source (these
//   instructions are never a PEBS assist's: WantsRegs stops bulk counting,
//   but for an assist armed for the load-latency event alone).
// - kCountNow: an instruction counted in bulk that the engine cannot run
//   alone: a load above the threshold counts for the load-latency event at
//   once, as if its instruction retired now.
enum class AccessOwner : uint8_t { kObserved, kInBulk, kCountNow };

}  // namespace vbts::pmu

#endif  // VBTS_PMU_ACCESS_OWNER_H_
