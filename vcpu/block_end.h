// block_end.h: a translated-block boundary the TCG engine passed without
// reporting it to its observer (TcgCpu::SkipSequential's `block_ends`),
// which the tracer reports later, in order (Tracer::BulkBoundary).
#ifndef VBTS_VCPU_BLOCK_END_H_
#define VBTS_VCPU_BLOCK_END_H_

#include <cstddef>
#include <cstdint>

#include "vcpu/cpu_state.h"

namespace vbts::vcpu {

// The TCG engine's counters of what may have changed under cached decodings
// of its code (Tracer::BulkBoundary).
struct CodeGenerations {
  uint64_t paging = 0;
  uint64_t bytes = 0;
};

// What a data access the engine reports made due (Tracer::ObserveDataAccess,
// TcgCpu::SetDataAccessHook): `due`, something at the boundary after its
// instruction (a PMI); `needs_instruction`, the access was not taken, its
// instruction must be run alone (pmu::AccessOwner::kInBulk).  Bits: it is
// returned on every access, built in a register.
struct AccessVerdict {
  bool due : 1 = false;
  bool needs_instruction : 1 = false;
};

struct BlockEnd {
  uint64_t from = 0;     // linear address of the block's last instruction
  uint64_t to = 0;       // linear address of the next block's first one
  uint64_t skipped = 0;  // instructions skipped when the next block started (it not included)
};

// The block ends passed in one run of skipped instructions, and the state
// they ran in, as the run began (the engine keeps ends only while none of it
// changes): the code generations, the paging registers, CS and RFLAGS (for
// CPL, mode and TF).  The state when they are reported may differ: the run
// ends at the first block start where it does.
struct BlockEnds {
  const BlockEnd* data = nullptr;
  size_t size = 0;
  CodeGenerations generations;
  uint64_t cr0 = 0, cr3 = 0, cr4 = 0, efer = 0;
  Segment cs;
  uint64_t rflags = 0;
};

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_BLOCK_END_H_
