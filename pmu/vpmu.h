// vpmu.h: the virtual PMU: the guest-visible model of Intel's debug store
// (DS save area, BTS), last-branch records (LBR, LER), BTF, the
// architectural performance counters and NetBurst's ESCR/CCCR counters
// (pmu/netburst.h), as pure logic.  The stepping engine in
// vcpu/ feeds it every retired instruction and event delivery (pmu/branch.h)
// and routes the guest's RDMSR/WRMSR of the MSRs it owns here; the virtual
// PMU writes BTS records through the guest's paging and says when a PMI or a
// BTF single-step trap is due.  Everything guest-visible is decided here and
// documented in docs/pmu-model.md with its SDM section.
#ifndef VBTS_PMU_VPMU_H_
#define VBTS_PMU_VPMU_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pmu/access_owner.h"
#include "pmu/branch.h"
#include "pmu/cpu_model.h"
#include "pmu/paging.h"

namespace vbts::pmu {

// Result of a guest RDMSR/WRMSR of an MSR the virtual PMU owns.
struct MsrResult {
  bool gp = false;     // the instruction raises #GP(0) (reserved bits, MSR absent in the model, ...)
  uint64_t value = 0;  // RDMSR: the value read
};

// An inclusive range of MSR indices the virtual PMU owns; the VMM must make
// the host KVM exit to user space for every access in it.
struct MsrRange {
  uint32_t first = 0;
  uint32_t last = 0;
};

// What the engine must do at the instruction boundary after Observe().
struct PmuEffects {
  // A PMI is requested (counter overflow, BTS threshold, ...): deliver it
  // through the guest LAPIC's LVT performance-counter entry before the next
  // instruction (SDM 17.4.9.3, 18.2 / book exp. 14-10).
  // (One bit each: the effects of a data access are returned on every
  // access, and one byte is built in a register.)
  bool pmi : 1 = false;
  // A single-step trap is due (guest EFLAGS.TF set; with DEBUGCTL.BTF only
  // after taken branches, SDM 17.4.3): deliver #DB with DR6.BS.
  bool single_step_trap : 1 = false;
  // ObserveDataAccess with AccessOwner::kInBulk only: the access was not
  // taken; its instruction must be run alone (a load-latency event).
  bool needs_instruction : 1 = false;
};

// The guest's general registers after an instruction retired, for PEBS
// records (SDM 18.6.1.1, table 18-23: the machine state after the
// instruction that caused the PEBS assist).
struct GuestRegs {
  uint64_t rflags = 0;
  uint64_t gpr[16] = {};  // x86 encoding order: RAX, RCX, RDX, RBX, RSP, RBP, RSI, RDI, R8-R15
  // The TSC of format 3's C0H field and adaptive PEBS's basic group (the
  // guest's time-stamp counter as the engine reads it at the stop after the
  // instruction, docs/pmu-model.md); XMM0-15 for format 4's XMM group,
  // needed while WantsXmm().
  uint64_t tsc = 0;
  uint8_t xmm[16][16] = {};
};

// Counts for `vbts run -v` and benchmarks.
struct PmuStats {
  uint64_t instructions = 0;     // retired instructions observed
  uint64_t branches = 0;         // taken transfers observed (incl. events)
  uint64_t bts_records = 0;      // BTS records written
  uint64_t bts_dropped = 0;      // records not written because the guest's DS programming was bad
  uint64_t lbr_pushes = 0;
  uint64_t lbr_pops = 0;  // records a return took off the LBR call stack (SDM 17.9)
  uint64_t pmis = 0;             // PMIs requested
  uint64_t pebs_records = 0;     // PEBS records written
  uint64_t pebs_dropped = 0;     // PEBS assists skipped (bad DS programming, full buffer)
};

struct VirtualPmuOptions {
  // `--vpmu=passthrough`: the host KVM keeps the LBR stack (FROM/TO/INFO,
  // TOS, LBR_SELECT, LER) and DEBUGCTL's LBR and FREEZE_LBRS_ON_PMI bits
  // in the real registers; the virtual PMU neither owns those MSRs nor
  // records branches in LBRs, and tells the engine which DEBUGCTL bits
  // the host must hold (KernelDebugCtl).  Everything else stays emulated.
  bool lbr_in_kernel = false;
};

class VirtualPmu {
 public:
  explicit VirtualPmu(const CpuModel& model, VirtualPmuOptions options = {});
  ~VirtualPmu();
  VirtualPmu(const VirtualPmu&) = delete;
  VirtualPmu& operator=(const VirtualPmu&) = delete;

  // Every MSR the model's PMU/debug features define (present or not in this
  // model: absent ones must still be intercepted so that the guest gets #GP
  // as on hardware instead of the host KVM's own answer).
  std::vector<MsrRange> InterceptedMsrs() const;
  bool Owns(uint32_t msr) const;

  MsrResult ReadMsr(uint32_t msr) const;
  // RDPMC with ECX = `ecx` (SDM vol. 2B RDPMC): bit 30 selects the fixed
  // counters, bits 29:0 the index; a counter the model does not have is
  // #GP.  On NetBurst (no architectural perfmon) ECX[30:0] is the counter
  // index 0-17 and bit 31 the fast read (bits 31:0, EDX = 0).  (The
  // CPL/CR4.PCE check is the CPU's.)
  MsrResult ReadPmc(uint32_t ecx) const;
  // The engine reports a WRMSR that succeeds as retired (Observe) after
  // WriteMsr: it counts under the configuration it leaves
  // (docs/pmu-model.md, "The WRMSR itself").
  MsrResult WriteMsr(uint32_t msr, uint64_t value);

  // True while some guest-visible state needs every instruction observed
  // (BTS, LBR or BTF enabled in DEBUGCTL, an enabled counter).  With this
  // false, Observe() would change nothing and the engine may stop stepping.
  bool NeedsObservation() const;
  // After WriteMsr(msr, value): whether counting may be about to start, so
  // that the guest's clock should count instructions from now on (the
  // engine keeps its code hook lingering, docs/tcg-engine.md, "Guest
  // time"): a counter counts, or the write armed one (an event select with
  // EN, a non-zero FIXED_CTR_CTRL, a NetBurst CCCR with its enable bit).
  // Not for writes that arm nothing: LBR, DS area, DEBUGCTL, counter values,
  // a GLOBAL_CTRL that enables counters whose event selects are off (Linux's
  // boot writes all of these), nor for DisablesAll's write.
  bool MayStartCounting(uint32_t msr, uint64_t value) const;
  // GLOBAL_CTRL = 0 on an architectural-perfmon v2+ CPU: how Linux's perf
  // disables the PMU before it programs the counters of a task it is about to
  // count, and also once while it boots, when it counts nothing after.
  bool DisablesAll(uint32_t msr, uint64_t value) const;

  // One retired instruction or event delivery, in program order.  `mem` is
  // the guest's linear memory with the paging in force when the record is
  // written; `guest_tf` is the guest's own EFLAGS.TF before the instruction.
  // Errors are host-side failures only; bad guest programming is handled as
  // docs/pmu-model.md says and reported through TakeWarnings().
  // `after`: the registers once the instruction retired; needed only while
  // WantsRegs() (a PEBS assist is armed), may be null otherwise.  `before`:
  // the registers as the instruction began (rflags and gpr only); needed
  // only while WantsRegsBefore() (NetBurst PEBS), may be null otherwise.
  absl::StatusOr<PmuEffects> Observe(const Branch& b, LinearMemory& mem, bool guest_tf,
                                     const GuestRegs* after = nullptr, const GuestRegs* before = nullptr);
  // LLC Reference (event 2EH, umask 4FH) and LLC Misses (2EH, 41H) count
  // data accesses, not instructions (pmu/cache_model.h): while some enabled
  // counter counts one, the engine reports every data access with its
  // physical address.  ObserveDataAccess runs the access through the
  // model's caches and counts it; a counter that overflows requests a PMI,
  // which the engine delivers at the next instruction boundary it observes.
  // The load-latency event and the data source of PEBS records (docs/pmu-
  // model.md, "Load latency and data source") need to know which accesses
  // load and which store: an instruction's accesses are reported before the
  // instruction's Observe, a read-modify-write one as a load, then a store.
  enum class DataAccessKind : uint8_t { kLoad, kStore };
  // Whose access it is (pmu/access_owner.h).
  using AccessOwner = pmu::AccessOwner;
  bool WantsDataAccesses() const;
  PmuEffects ObserveDataAccess(uint64_t pa, uint32_t size, uint8_t cpl, DataAccessKind kind = DataAccessKind::kLoad,
                               AccessOwner owner = AccessOwner::kObserved);
  // A PEBS-enabled counter has overflowed: the next instruction it counts
  // writes a PEBS record, which needs that instruction's resulting registers.
  bool WantsRegs() const;
  // ... and every such counter counts the load-latency event: the next
  // instruction it counts is one with a load above the threshold, which an
  // engine counting in bulk observes alone (AccessOwner::kInBulk), so the
  // others may still be counted in bulk (SequentialLimit).
  bool ArmedOnlyForLoadLatency() const;
  // ... and the XMM registers too (an adaptive PEBS record with the XMM group
  // may follow).
  bool WantsXmm() const;
  // NetBurst PEBS is on (MSR_PEBS_ENABLE.ENABLE_PEBS_MY_THR, MSR_IQ_COUNTER4
  // counting front_end_event): any instruction that overflows the counter
  // writes a record of the registers it began with, so every observed
  // instruction needs them (Observe's `before`), and none is counted in
  // bulk (SequentialLimit is 0 while a front_end_event counter counts).
  bool WantsRegsBefore() const;
  // True while a count depends on what each instruction is, which operands
  // it has and what its data accesses met (NetBurst's tagged µops: the
  // front end's and replay tagging): the engine observes every instruction
  // (no bulk), fills Branch::mem and reports the data accesses it wants
  // (WantsDataAccesses) as AccessOwner::kObserved.  WantsRegsBefore
  // implies it.
  bool NeedsEachInstruction() const;

  // Counting in bulk (block-level observation, docs/tracing.md): instructions
  // that retire one after another at CPL `cpl`, none of them a branch
  // instruction and none transferring control, change nothing but the
  // counters that count them.  SequentialLimit is how many such instructions
  // CountSequential may take at once without any counter overflowing (an
  // overflow needs the exact instruction: Observe); UINT64_MAX when nothing
  // counts them; 0 while a PEBS assist is armed (it needs every
  // instruction's registers), unless only for the load-latency event
  // (ArmedOnlyForLoadLatency).  Instructions counted in bulk never count for
  // the load-latency event (their loads were reported kInBulk: one that
  // would have made its instruction run alone).
  uint64_t SequentialLimit(uint8_t cpl) const;
  // Counts `n` <= SequentialLimit(cpl) such instructions, as n calls of
  // Observe with kNone non-branch transfers would; `loads` and `stores` of
  // them read and write memory (Branch::mem bits 0 and 1, for the
  // retired-load and -store events: CountsMemoryInstructions).
  void CountSequential(uint64_t n, uint8_t cpl, uint64_t loads = 0, uint64_t stores = 0);
  // A branch that ended a block while only the LBRs tell branches apart
  // (LbrOnly): it goes to the LBR stack as Observe would put it there; the
  // instruction itself is counted with CountSequential.
  void ObserveKeptBranch(const Branch& b);
  // True when nothing observed tells branches from other instructions: no
  // LBR, BTS or BTF, no counter of branch instructions.  Then any
  // instructions at one CPL, branches included, may be counted in bulk.
  bool BranchAgnostic() const;
  // True when the LBRs are all that tells branches apart: DEBUGCTL.LBR
  // emulated here (not in the host's LBRs), no BTF, no BTS, no PEBS assist
  // armed, no retired-load/-store event, and every enabled counter counts
  // a branch as any other instruction (BranchAgnostic's counters).  Then an
  // observer may collect many block ends and report them later, in order,
  // with the instructions between them counted in one CountSequential
  // (no counter overflows before SequentialLimit): the LBRs and counters end
  // as if each had been reported at once (docs/tcg-engine.md, "Kept block
  // ends").
  bool LbrOnly() const;
  // True while a counter counts the model's retired-load or retired-store
  // event (PmuModel::mem_loads_event/mem_stores_event) or the load-latency
  // event: the observer then reports every instruction it observes with
  // Branch::mem and its addresses filled, and gives CountSequential the
  // loads and stores among the instructions it counts in bulk.
  bool CountsMemoryInstructions() const;
  // True while the load-latency event counts: it needs each load's data
  // source at its instruction, so an instruction whose load counts must be
  // observed alone: instructions are counted in bulk only where the engine
  // reports each access as it happens, kInBulk (AccessOwner).
  bool CountsLoadLatency() const;

  // Diagnostics about bad guest programming (each distinct one once per run),
  // for the VMM to print on stderr; clears the list.
  std::vector<std::string> TakeWarnings();

  const PmuStats& stats() const;

  // --- lbr_in_kernel only (no effect otherwise) ---
  bool lbr_in_kernel() const;
  // The IA32_DEBUGCTL value the host KVM must hold for the guest: the
  // guest's LBR and FREEZE_LBRS_ON_PMI bits, with LBR off while a v4
  // PERF_GLOBAL_STATUS.LBR_FRZ set by a vbts PMI freezes the stack (SDM
  // 17.4.7); 0 when !lbr_in_kernel.  The engine writes it to KVM whenever
  // it changes (a WRMSR, a PMI's freeze, an emulated #DB).
  uint64_t KernelDebugCtl() const;
  // The DEBUGCTL value read back from the host KVM before the guest reads
  // DEBUGCTL: the hardware clears LBR itself when it delivers #DB or
  // freezes on a PMI of its own; the guest must see that.
  void NoteKernelDebugCtl(uint64_t kernel_value);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace vbts::pmu

#endif  // VBTS_PMU_VPMU_H_
