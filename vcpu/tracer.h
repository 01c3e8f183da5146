// tracer.h: the branch-tracing engine.  It watches every instruction
// boundary of a stepped guest (through the supervisor's StepObserver hook),
// works out what each instruction did — fell through, took a branch of which
// kind, or was interrupted by an exception/interrupt the host KVM delivered —
// and feeds those control transfers in program order to the virtual PMU
// (pmu/vpmu.h), which writes the guest's BTS records and LBRs.  When the
// virtual PMU asks for a PMI, the tracer raises it through the guest LAPIC's
// LVT performance-counter entry.  docs/tracing.md explains the inference.
#ifndef VBTS_VCPU_TRACER_H_
#define VBTS_VCPU_TRACER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "pmu/branch.h"
#include "pmu/vpmu.h"
#include "vcpu/block_end.h"
#include "vcpu/decoder.h"
#include "vcpu/vcpu_control.h"
#include "vcpu/data_breakpoints.h"
#include "vcpu/step_observer.h"

namespace vbts::vcpu {

struct TracerStats {
  uint64_t boundaries = 0;      // instruction boundaries observed
  uint64_t instructions = 0;    // retired instructions reported
  uint64_t events = 0;          // exception/interrupt deliveries recognised
  uint64_t lost = 0;            // boundaries the tracer could not explain (resynchronised)
  uint64_t pmis_sent = 0;       // PMIs raised through LVTPC
  uint64_t pmis_masked = 0;     // PMIs not raised: LVTPC masked
  uint64_t single_steps = 0;    // the guest's own single-step traps delivered
  uint64_t data_breakpoints = 0;  // the guest's own data-breakpoint traps vbts raised
};

inline pmu::ExecMode ExecModeOf(const CpuState& st) {
  switch (st.mode()) {
    case CpuMode::kReal:
    case CpuMode::kVirtual8086: return pmu::ExecMode::kReal;
    case CpuMode::kProtected16:
    case CpuMode::kCompat16: return pmu::ExecMode::kProt16;
    case CpuMode::kProtected32:
    case CpuMode::kCompat32: return pmu::ExecMode::kProt32;
    case CpuMode::kLong64: return pmu::ExecMode::kLong64;
  }
  return pmu::ExecMode::kProt32;
}

class Tracer : public StepObserver {
 public:
  // `send_msi(vector)`: fixed-delivery interrupt to the vCPU's LAPIC.
  Tracer(VcpuControl& vcpu, PhysMemory& mem, pmu::VirtualPmu& pmu, std::function<absl::Status(uint8_t)> send_msi);

  // The vCPU moved to another engine (vmm/ switching between KVM and TCG):
  // its controls, how a PMI is sent, and who raises data breakpoints.  The
  // next boundary starts afresh; events in flight stay in flight (the LAPIC
  // state moved with the vCPU).
  void Rebind(VcpuControl& vcpu, std::function<absl::Status(uint8_t)> send_msi, bool emulate_data_bps);

  bool WantsEveryInstruction() const override;
  // While the supervisor steps every instruction anyway (--exact-cpuid, too
  // many CPUID sites) the tracer follows every boundary, so that the guest's
  // own TF keeps working with tracing off.
  void SetConsecutive(bool consecutive) override { consecutive_ = consecutive; }
  bool EventPending() const override { return pmi_deliverable_ || db_in_flight_; }
  absl::Status AtBoundary(CpuState& st, bool& dirty) override;
  absl::Status Retired(const CpuState& before, const ControlTransfer& t, CpuState& after, bool& dirty) override;

  // A guest WRMSR of a virtual-PMU MSR (KVM exited for it; RIP is still at
  // the WRMSR) has just taken effect without #GP: the WRMSR retires under the
  // configuration it leaves — the instruction that enables a counter is
  // counted by it, the one that disables it is not, a counter it writes
  // counts it on top of the written value (docs/pmu-model.md, "The WRMSR
  // itself"). Reported whether or not the guest was stepped before it.
  absl::Status AfterMsrWrite();
  // --vpmu=passthrough (pmu lbr_in_kernel): gives the host KVM the DEBUGCTL
  // bits it must hold (VirtualPmu::KernelDebugCtl) when they changed — after
  // every WRMSR of a virtual-PMU MSR and every observed transfer (a PMI's
  // freeze, an emulated #DB clear LBR) — and, before the guest reads
  // DEBUGCTL, tells the virtual PMU what the hardware did to them.
  absl::Status SyncKernelDebugCtl();
  absl::Status ReadKernelDebugCtl();
  // Every transfer the tracer reports, in order (for `vbts record`).
  // The sink returns false when it wants no more transfers; the tracer then
  // stops calling it and no longer asks for stepping on its behalf.
  // `every_instruction`: the sink wants the not-taken instructions too
  // (--insns), which block-level observation does not report one by one.
  void SetSink(std::function<bool(const pmu::Branch&)> sink, bool every_instruction = false) {
    sink_ = std::move(sink);
    sink_active_ = static_cast<bool>(sink_);
    sink_every_insn_ = every_instruction;
  }

  // --- Block-level observation (the TCG engine; docs/tracing.md) ---
  // The engine may let instructions run unreported between two boundaries
  // it reports, as long as they ran one after another inside one translated
  // block (none of them a transfer of control): the tracer counts them in
  // bulk and classifies a block's last instruction when the next block
  // starts, from its decoding and where the guest went.  Allowed while
  // nothing needs each instruction: the guest's TF, data breakpoints, an
  // armed PEBS assist, a pending #DB or PMI, a sink wanting every
  // instruction.
  bool BulkAllowed() const;
  // BulkAllowed() as the last BulkBoundary that returned OK left it.
  bool BulkAfterBoundary() const { return bulk_after_boundary_; }
  // How many instructions may go unreported before the next report: the
  // next one after them may overflow a counter (VirtualPmu::SequentialLimit).
  uint64_t BulkLimit() const;
  // In bulk mode, instructions may also run unreported past block
  // boundaries (at one CPL) when BulkCountsAcrossBlocks or BulkBlockEnds.
  // Counting: nothing observed tells a branch from another instruction
  // (VirtualPmu::BranchAgnostic) and no sink wants transfers.
  bool BulkCountsAcrossBlocks() const;
  // Block ends kept: the LBRs are all that tells branches apart
  // (VirtualPmu::LbrOnly), or nothing does but a sink that wants transfers,
  // not every instruction (`vbts record`, --branches, GDB's branch trace);
  // then the engine keeps the block ends it passes (TcgCpu::SkipSequential's
  // `block_ends`), and the next Bulk* call reports each as BulkBoundary would
  // have at it.
  bool BulkBlockEnds() const;
  // A boundary in bulk mode, before the instruction at `st`: since the last
  // reported boundary `skipped` more instructions started unreported, and
  // `last` (linear) is the one before this boundary; `block_start`: a
  // translated block started here, so `last` may have been a branch.
  // `st` needs only what TcgCpu::GetCodeState fills (the tracer reads the
  // whole state itself when it leaves bulk mode).
  // `code_generation`: while its `paging` part (TcgCpu::PagingGeneration) is
  // unchanged, a linear address of code maps where it mapped before, so a
  // decoding made then is still good if the bytes are; while its `bytes`
  // part (TcgCpu::CodeBytesGeneration) is unchanged too, they are.
  // `ends`: the block ends passed since the last reported boundary (all
  // before `last`); `skipped` counts their instructions too.
  absl::Status BulkBoundary(CpuState& st, uint64_t skipped, uint64_t last, bool block_start,
                            CodeGenerations code_generation, const BlockEnds& ends = {});
  // An event is about to be delivered in bulk mode (`st`: the state before
  // delivery; `soft_linear`: the INT n/INT3/INTO that raised it).  The tracer
  // accounts for what ran and goes back to following every boundary: the
  // next boundary (the handler) is reported through AtBoundary.
  absl::Status BulkEvent(const CpuState& st, uint64_t skipped, uint64_t last, std::optional<uint64_t> soft_linear,
                         CodeGenerations code_generation, const BlockEnds& ends = {});
  // Before the virtual PMU is read or written by the instruction at `last`
  // (RDMSR, WRMSR, RDPMC), in bulk mode: counts what ran before it.
  absl::Status BulkFlush(const CpuState& st, uint64_t skipped, uint64_t last, CodeGenerations code_generation,
                         const BlockEnds& ends = {});
  // The host does not raise the guest's own data breakpoints while it is
  // stepped (HostFacts::emulate_data_breakpoints): the tracer does.
  void SetEmulateDataBreakpoints(bool on) { emulate_data_bps_ = on; }
  // Wants every instruction even with nothing traced, so that each is
  // counted (stats().instructions): the guest clock of --clock=instructions
  // (vmm/machine.h).  TCG engine only: under KVM it would step the guest.
  void SetObserveAlways(bool on) { observe_always_ = on; }
  // The engine reports each access that hits one of the guest's data
  // breakpoints itself, while the instruction runs (TCG:
  // TcgCpu::SetGuestDataHitHook, through EngineDataHits), so that blocks run
  // unobserved between hits; otherwise the tracer derives every
  // instruction's accesses from its operands.
  void SetEngineReportsDataBreakpoints(bool on) {
    engine_data_bps_ = on;
    engine_hits_ = 0;
  }
  bool engine_reports_data_breakpoints() const { return engine_data_bps_; }
  // DR6 B0-B3 of the breakpoints an access of the running instruction hit:
  // raised after it retires (dropped if it faults), at the next boundary.
  void EngineDataHits(uint32_t hits) { engine_hits_ |= hits; }
  // The engine reports the guest's data accesses itself through ObserveDataAccess
  // (TCG); otherwise the tracer derives them from each instruction's
  // operands while the virtual PMU wants them (LLC events).
  void SetEngineReportsDataAccesses(bool on) { data_access_hook_ = on; }
  // One data access of the guest at physical `pa`, by code at `cpl`, for
  // the virtual PMU's cache events and data sources; a PMI it causes is
  // raised at the next boundary (`due`: one is due now).  `owner`: whose
  // access it is (pmu/access_owner.h); `needs_instruction`: it was not
  // taken, its instruction must be run alone.
  AccessVerdict ObserveDataAccess(uint64_t pa, uint32_t size, uint8_t cpl, bool write,
                                  pmu::AccessOwner owner = pmu::AccessOwner::kObserved) {
    using Kind = pmu::VirtualPmu::DataAccessKind;
    const pmu::PmuEffects fx = pmu_.ObserveDataAccess(pa, size, cpl, write ? Kind::kStore : Kind::kLoad, owner);
    if (fx.pmi) pmi_due_ = true;
    return {pmi_due_, fx.needs_instruction};
  }
  void RefreshGuestBreakpoints() {
    guest_bp_.reset();
    if (emulate_data_bps_) ReadGuestBreakpoints();
  }
  std::vector<std::string> TakeWarnings();
  const TracerStats& stats() const { return stats_; }

 private:
  // The instruction boundary the guest was last seen at, with what vbts
  // predicted about the instruction there.
  struct Boundary {
    uint64_t rip = 0;
    uint64_t lin = 0;
    uint64_t rsp = 0;
    uint16_t cs = 0;
    uint8_t cpl = 0;
    pmu::ExecMode mode = pmu::ExecMode::kProt32;
    bool ia32e = false;
    bool tf = false;
    bool decoded = false;
    DecodeMode dmode;  // to decode the instruction here (and the rest of its block)
    DecodedInsn insn;
    uint64_t fallthrough = 0;                 // RIP after the instruction without a branch
    std::optional<uint64_t> predicted_target;  // RIP a direct/register/RET branch goes to
    // EFLAGS.TF the instruction loads (POPF, IRET), read before it runs.
    std::optional<bool> tf_after;
    bool emitted = false;  // already reported as retired (AfterMsrWrite)
    // Data accesses of the instruction (only while the guest has data
    // breakpoints and the host does not raise them, or while the virtual
    // PMU counts them and the engine does not report them itself).
    std::vector<DataAccess> accesses;
    bool count_accesses = false;  // feed `accesses` to the virtual PMU when the instruction retires
    pmu::PagingRegs paging;       // ... translated with the paging in force
    // What the retired-load and -store events see of the instruction
    // (pmu::Branch::mem, load_la, store_la), while a counter counts them.
    uint8_t mem = 0;
    uint64_t load_la = 0, store_la = 0;
    // The registers as the instruction began, while the virtual PMU wants
    // them (VirtualPmu::WantsRegsBefore: NetBurst PEBS records).
    bool has_regs = false;
    uint64_t regs_rflags = 0;
    uint64_t regs_gpr[16] = {};
  };
  // Copies p's memory operands (Boundary::mem...) into `b`, the report of p's
  // retirement.
  static void CopyMemory(const Boundary& p, pmu::Branch& b) {
    b.mem = p.mem;
    b.load_la = p.load_la;
    b.store_la = p.store_la;
  }
  Boundary Capture(const CpuState& st);
  // Reports `ends` (BulkBoundary's) in order, as BulkBoundary at each would
  // have; leaves prev_ at the last one's target and `skipped` at the
  // instructions that ran after it.
  absl::Status ReportBlockEnds(const BlockEnds& ends, const CpuState& st, uint64_t& skipped);
  // `n` instructions that ran one after another from p on (p's CPL and mode),
  // counted in bulk; while the retired-load and -store events count, each is
  // decoded (the block-end cache) for whether it reads and writes memory.
  // `st`: the state now, for the paging they were fetched through.
  void CountSkipped(uint64_t n, const Boundary& p, const CpuState& st, CodeGenerations code_generation);
  // Bit 0: `insn` reads memory, bit 1: it writes memory (its data operands as
  // decoded: explicit, stack slots, string elements; Boundary::mem's rule).
  static uint8_t MemKinds(const DecodedInsn& insn) {
    uint8_t k = 0;
    for (int i = 0; i < insn.data_count; i++) k |= (insn.data[i].read ? 1 : 0) | (insn.data[i].write ? 2 : 0);
    if (k && Untaggable(insn)) k |= pmu::kMemUntaggable;
    return k;
  }
  // A locked or I/O memory access (pmu::Branch::mem bit 2): LOCK, XCHG with
  // memory (locked without the prefix, SDM vol. 2B XCHG), INS and OUTS.
  static bool Untaggable(const DecodedInsn& insn) {
    if (insn.lock) return true;
    const std::string& m = insn.mnemonic;
    return m == "xchg" || m == "insb" || m == "insw" || m == "insd" || m == "outsb" || m == "outsw" || m == "outsd";
  }
  // The boundary without decoding (bulk mode), written over `b`.
  void Light(const CpuState& st, Boundary& b) const;
  // Bulk mode: the instruction at `last`, in the block of `p`, ran and the
  // guest is now at `st`: reports it as the branch (or not) it was.
  absl::Status ResolveBlockEnd(const Boundary& p, uint64_t last, const CpuState& st, CodeGenerations code_generation);
  // ... the transfer it was, or nothing: one iteration of a REP string
  // instruction (`rep_iteration`), or an end it cannot explain (warned).
  // `memory`: the loads and stores it made are wanted (CountsMemoryInstructions).
  std::optional<pmu::Branch> ClassifyBlockEnd(const Boundary& p, uint64_t last, const CpuState& st,
                                              CodeGenerations code_generation, bool memory, bool& rep_iteration);
  // The decoding of `last` (in p's block), from insn_cache_ when its bytes
  // and the code generation are unchanged; null when it cannot be decoded
  // (`error` says why).
  const DecodedInsn* BlockEndInsn(const Boundary& p, uint64_t last, const CpuState& st, CodeGenerations code_generation,
                                  absl::Status& error);
  // What AtBoundary and BulkBoundary do at every boundary after resolving.
  absl::Status BoundaryEvents(const CpuState& st);
  // Explains how the guest got from prev_ to `st` and reports it.
  absl::Status Resolve(const Boundary& p, const CpuState& st);
  // Tries to explain `st` as an event delivered at `p` (before its
  // instruction retired) or, with `after_retire`, right after it retired; a
  // host-run INT n at `p` is recognised the same way.
  absl::StatusOr<bool> ResolveEvent(const Boundary& p, const CpuState& st, bool after_retire);
  // Reports one transfer to the sink and the virtual PMU, and keeps the
  // guest's TF: `tf_after` is what the instruction loaded into TF, if anything.
  // `of`: the boundary the instruction began at, when it is not prev_
  // (its registers for a NetBurst PEBS record).
  absl::Status Emit(const pmu::Branch& b, const CpuState& paging_of, std::optional<bool> tf_after,
                    const Boundary* of = nullptr);
  absl::Status RaisePmi();
  // Delivers the guest's own debug trap at this boundary: #DB with DR6.BS
  // (single-step) and/or DR6.Bn (data breakpoints hit by the last instruction).
  absl::Status RaiseDebugTrap();
  // At a boundary: raises the guest's due debug traps, unless a MOV SS
  // shadow holds them, and merges held ones into a #DB just delivered.
  absl::Status DebugTrapsAtBoundary(const CpuState& st);
  // The instruction at `p` retired: its data breakpoint hits, and whether it
  // changed the guest's debug registers.
  void NoteRetired(const Boundary& p);
  void ReadGuestBreakpoints();  // guest_bp_ from KVM_GET_DEBUGREGS
  // Makes EFLAGS.TF in an event frame the host (or vbts) pushed equal to the
  // guest's own TF: while vbts steps the guest, the host's view of TF is
  // vbts's single-step flag, not the guest's.
  absl::Status PatchFrameTf(const CpuState& st, uint64_t eflags_la, bool tf);
  void Warn(std::string w);

  VcpuControl* vcpu_;
  PhysMemory& mem_;
  pmu::VirtualPmu& pmu_;
  std::function<absl::Status(uint8_t)> send_msi_;
  std::function<bool(const pmu::Branch&)> sink_;
  bool sink_active_ = false;
  bool sink_every_insn_ = false;
  bool bulk_after_boundary_ = false;  // BulkAfterBoundary
  std::optional<Boundary> prev_;
  bool pmi_due_ = false;
  bool emulate_data_bps_ = false;
  bool observe_always_ = false;  // SetObserveAlways
  std::optional<GuestBreakpoints> guest_bp_;  // cached guest DR0-3/DR7 (emulate_data_bps_)
  uint32_t data_hits_ = 0;                    // DR6 B0-B3 due at the next boundary
  bool engine_data_bps_ = false;              // SetEngineReportsDataBreakpoints
  uint32_t engine_hits_ = 0;                  // EngineDataHits of the running instruction
  // In bulk mode, the engine's hits of the instruction at `last`, which
  // retired: due now (or after the MOV SS shadow, if it loaded SS).
  void TakeEngineHits(const Boundary& p, uint64_t last, const CpuState& st, CodeGenerations code_generation);
  std::optional<uint64_t> kernel_debugctl_;  // last DEBUGCTL given to the host KVM (passthrough)
  bool step_trap_due_ = false;  // the guest's single-step trap is due at this boundary
  bool data_access_hook_ = false;  // SetEngineReportsDataAccesses
  bool ss_shadow_ = false;      // the instruction that just retired loaded SS (MOV SS/POP SS shadow)
  bool db_delivered_ = false;   // the transfer just reported is a #DB delivery
  bool db_in_flight_ = false;   // a #DB vbts injected, not yet seen delivered
  bool guest_tf_ = false;       // the guest's own EFLAGS.TF (KVM hides it while stepping)
  bool fresh_ = false;          // prev_ was set by Retired(), not yet seen by AtBoundary
  bool consecutive_ = false;    // this boundary follows the previous one by a single step
  std::optional<uint8_t> pmi_in_flight_;  // vector of a PMI raised but not yet seen delivered
  bool pmi_deliverable_ = false;          // ... and the guest can take it at this boundary
  // Decodings of blocks' last instructions (bulk mode): direct-mapped by
  // linear address, each checked against its bytes in RAM when used.
  struct CachedInsn {
    uint64_t lin = ~0ull;
    uint64_t generation = 0;        // CodeGenerations::paging when `gpa` was found
    uint64_t bytes_generation = 0;  // CodeGenerations::bytes when the bytes last matched
    uint64_t gpa = 0;  // the instruction's bytes (within one page)
    DecodeMode dmode;
    bool user = false;
    DecodedInsn insn;
  };
  std::vector<CachedInsn> insn_cache_;
  // The loads and stores among `n` instructions from `lin` counted in bulk
  // (CountSkipped, while memory events count): direct-mapped by `lin`, good
  // while neither code generation has changed since (each instruction's
  // decoding was good then, BlockEndInsn).
  struct CachedRun {
    uint64_t lin = ~0ull;
    uint64_t n = 0;
    CodeGenerations generations;
    DecodeMode dmode;
    bool user = false;
    uint32_t loads = 0, stores = 0;
  };
  std::vector<CachedRun> run_cache_;
  // Translations of the virtual PMU's stores (BTS and PEBS records, DS
  // fields), each checked against the page tables when used.
  pmu::TranslationCache store_translations_;
  pmu::GuestRegs pebs_regs_;    // Emit's registers for a PEBS record
  pmu::GuestRegs pebs_before_;  // ... and those before the instruction (NetBurst)
  DecodedInsn uncached_insn_;
  std::vector<std::string> warnings_;
  std::set<std::string> warned_;  // every warning once per run
  TracerStats stats_;
};

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_TRACER_H_
