// tcg_cpu.h: vbts's second execution engine, one x86 vCPU on QEMU's TCG
// through libunicorn (docs/tcg-engine.md).
//
// The engine runs on the same guest RAM as the KVM vCPU (mapped, not copied)
// and takes and gives its whole state as a CpuState, so the machine (vmm/)
// can move a guest between the two.  Inside the engine the machine stays
// whole: paging of every kind (including the 32-bit paging this host's KVM
// cannot run), exceptions and INT n delivered through the guest's IDT with
// their frames, error codes, CR2 and stack switches (QEMU's own delivery),
// HLT, and triple faults.  What belongs to the machine comes back to it
// through TcgDevices: port I/O, MMIO outside RAM, CPUID, and every MSR that
// is not plain CPU state.  Pure of /dev/kvm.
#ifndef VBTS_VCPU_TCG_CPU_H_
#define VBTS_VCPU_TCG_CPU_H_

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "vcpu/block_end.h"
#include "vcpu/completer.h"
#include "pmu/access_owner.h"
#include "pmu/paging.h"
#include "vcpu/cpu_state.h"
#include "vcpu/data_breakpoints.h"
#include "vcpu/decoder.h"
#include "vcpu/descriptors.h"

struct uc_struct;

namespace vbts::vcpu {

namespace uabi {
struct EnvPrefix;
}

// What the engine asks of the machine.  Called on the engine's thread while
// Run() executes guest code; a callback may call TcgCpu::RequestStop().
class TcgDevices {
 public:
  virtual ~TcgDevices() = default;
  virtual uint32_t PortIn(uint16_t port, int size) = 0;
  virtual void PortOut(uint16_t port, int size, uint32_t value) = 0;
  // True once the guest asked a device to end the run (the debug exit, a
  // reset, ACPI soft-off or sleep): the engine stops right after the OUT.
  virtual bool GuestEndsRun() { return false; }
  // Guest-physical accesses outside RAM (below 4 GiB).
  virtual uint64_t MmioRead(uint64_t gpa, int size) = 0;
  virtual void MmioWrite(uint64_t gpa, int size, uint64_t value) = 0;
  // kCpu: the engine's own CPU MSRs (TcgCpu::OwnsMsr) take the access, or #GP.
  enum class Msr { kDone, kGp, kCpu };
  virtual Msr ReadMsr(uint32_t index, uint64_t& value) = 0;
  virtual Msr WriteMsr(uint32_t index, uint64_t value) = 0;
  virtual CpuidResult Cpuid(uint32_t leaf, uint32_t subleaf) = 0;
  // RDPMC (ECX) after the CPL/CR4.PCE check: kDone with the value, or kGp.
  virtual Msr ReadPmc(uint32_t ecx, uint64_t& value) { return Msr::kGp; }
  // The interrupt controller (the machine's LAPIC): the vector the CPU takes
  // now that it accepts an external interrupt (moving it to in-service),
  // nothing if none is deliverable any more; and whether one is pending.
  virtual std::optional<uint8_t> AcknowledgeInterrupt() { return std::nullopt; }
  virtual bool InterruptPending() { return false; }
  // The guest wrote a debug register (MOV to DRn retired).
  virtual void DebugRegistersWritten() {}
  // CR8, the LAPIC's task priority: CR8[3:0] is TPR[7:4] (SDM vol. 3A
  // 10.8.6.1); a write sets TPR[3:0] to 0.  Without an interrupt controller
  // (the default), CR8 is a plain register.
  virtual std::optional<uint64_t> ReadCr8() { return std::nullopt; }
  virtual bool WriteCr8(uint64_t value) { return false; }
  // The guest's TSC for RDTSC, RDTSCP and RDMSR IA32_TSC (after QEMU's
  // CR4.TSD check), and a WRMSR of IA32_TSC.  Without a clock of the
  // machine's (the default) the TSC is QEMU's (the host's) and writes are
  // ignored.
  virtual std::optional<uint64_t> ReadTsc() { return std::nullopt; }
  virtual void WriteTsc(uint64_t value) {}
};

// Why Run() returned.
struct TcgStop {
  enum Kind {
    kRequested,    // RequestStop() (a device, a hook, another thread)
    kHalted,       // HLT retired; RIP is after it
    kTripleFault,  // a fault while delivering a double fault
    kTimeout,      // the time limit passed
  } kind = kRequested;
};

struct TcgStats {
  uint64_t runs = 0;        // Run() calls
  uint64_t exceptions = 0;  // exceptions and INT n delivered through the IDT
  uint64_t port_io = 0, mmio = 0, msr = 0, cpuid = 0, halts = 0;
  uint64_t unassigned_walks = 0;  // pages vbts's walk could not translate where QEMU's did (mapped to nothing)
  uint64_t icebp = 0;  // ICEBPs delivered as #DB (QEMU 5.0 raises #UD)
  // Task switches into a conforming code segment whose DPL is below the CS
  // selector's RPL, which QEMU 5.0 refuses with #TS (TcgCpu::ArmTaskSwitch).
  uint64_t task_conforming_cs = 0;
  uint64_t interrupts = 0, nmis = 0, injected = 0;  // external interrupts, NMIs, queued exceptions delivered
  uint64_t breakpoints = 0;  // the guest's instruction breakpoints raised
  uint64_t completed = 0;    // SYSCALL/SYSENTER performed by vbts's completion engine
  uint64_t code_invalidations = 0;  // InvalidateCodeBytes calls that reached a page holding translations
  // TLB write entries for RAM pages without code made plain (stores skip
  // QEMU's look for translated code), and pages where code appeared, whose
  // entries look again (docs/tcg-engine.md, "The guest's stores").
  uint64_t plain_store_entries = 0, store_checks_restored = 0;
  // OUTs after which the block was left at once (a stop or an interrupt the
  // write asked for, TcgCallbacks::AfterOut).
  uint64_t outs_left = 0;
  // Likewise after a store to a device (TcgCallbacks::AfterStore).
  uint64_t stores_left = 0;
  // Instructions QEMU ran again from a new block after a store into their
  // own (TcgCallbacks::Restarted).
  uint64_t restarts = 0;
  // Instructions run again alone after a watched access inside a block (a
  // debugger's watchpoint, the guest's data breakpoint), and hits whose
  // instruction QEMU could not find, which stop at the block's end
  // (TcgCallbacks::RunAloneUnlessSeen).
  uint64_t access_reruns = 0, access_stops_at_block_end = 0;
  // Of those reruns, the ones for an access the data-access hook said made
  // something due (a PMI of the LLC events), and the accesses their
  // instructions had reported before, not reported again.
  // An asynchronous stop between the two (the instruction's accesses are
  // then reported again) counts in alone_skips_dropped.
  uint64_t due_reruns = 0, accesses_not_reported_again = 0, alone_skips_dropped = 0;
  // Loads the data-access hook said need their own instruction (load
  // latency, AccessOwner): instructions run again alone for one, the
  // boundaries after one reported while the code hook skipped, and the
  // loads whose instruction QEMU could not find (counted at the access).
  uint64_t latency_reruns = 0, latency_unskips = 0, latency_counted_at_access = 0;
  // Page walks the data-access hook made (CachedTranslation's misses).
  uint64_t data_walks = 0;
  // The debugger's breakpoints as QEMU's own: the times the set inserted
  // changed, and the stops at them (TcgCpu::SyncDebugBreakpoints).
  uint64_t qemu_breakpoint_syncs = 0, qemu_breakpoint_stops = 0;
  // The debugger's watchpoints changed (QEMU's TLB emptied for its watch
  // flags: TcgCpu::SetDebugWatchpoints).
  uint64_t debug_watch_syncs = 0;
  // Instructions translated as UD2 for vbts to perform (SMSW r32 outside
  // 64-bit mode, LGDT/LIDT in 64-bit mode), and those performed.
  uint64_t substituted = 0, performed = 0;
  // Legacy SSE instructions translated with the 16-byte alignment check of
  // their m128 operand, and the #GP(0)s it raised (docs/tcg-engine.md).
  uint64_t alignment_checks = 0, alignment_faults = 0;
  // #GP(0)s QEMU raised for non-canonical SS-based addresses, delivered as #SS(0).
  uint64_t stack_faults = 0;
  // #GP(0)s at a non-canonical fetch moved to the JMP/CALL/RET that went there.
  uint64_t branch_faults = 0;
  // The catch-all code hook compiled into the translations (each costs a
  // retranslation of all code), and removed after lingering unused.
  uint64_t code_hook_adds = 0, code_hook_removals = 0;
  // Likewise the data-access hook (SetDataAccessHook), which lingers too.
  uint64_t data_hook_adds = 0, data_hook_removals = 0;
  // The guest's data breakpoints (SetGuestDataHitHook): hits (an access
  // that touches two breakpoints counts twice), and the times their ranges
  // changed with DR0-DR7 (each empties QEMU's TLB).
  uint64_t guest_data_hits = 0, guest_watch_syncs = 0;
  // The guest's instruction breakpoints: the times QEMU's set of them was
  // remade (each retranslates all code), and their debug exits where no #DB
  // was due (the instruction then runs with RF set).
  uint64_t guest_exec_hook_syncs = 0, guest_exec_passes = 0;
  // #DB traps after a REP string instruction's last iteration delivered with
  // the next instruction's EIP (QEMU stops at it once more, count 0).
  uint64_t finished_rep_traps = 0;
  // The code buffer emptied before a run (Config::code_reclaim_bytes).
  uint64_t code_reclaims = 0;
  // One hook a block (Config::hook_per_block): blocks run with the code hook
  // at their first instruction only; switches into and out of that mode (each
  // leaves QEMU's block); and the times the instruction QEMU was at inside
  // such a block had to be found (an event, a PMU access, a store to code).
  uint64_t hookless_blocks = 0, hookless_enters = 0, hookless_leaves = 0, hookless_settles = 0;
  // Their per-block records dropped with all translations (a million kept at most).
  uint64_t hookless_record_drops = 0;
  uint64_t hookless_lookups = 0;  // blocks found by QEMU's search (tcg_tb_lookup), not in the cache
  // One call a block (Config::count_call): blocks counted by vbts's own call
  // at their start, with no Unicorn hook; switches into and out of that mode.
  uint64_t count_call_blocks = 0, count_call_enters = 0, count_call_leaves = 0;
  // Runs without the block hook (nothing observed: stops and interrupts
  // through QEMU's exit request at the next block start), and the times the
  // block hook was compiled into the translations and taken out of them.
  uint64_t runs_without_block_hook = 0, block_hook_adds = 0, block_hook_removals = 0;
};

class TcgCpu {
 public:
  struct Config {
    uint8_t* ram = nullptr;  // guest-physical 0 .. ram_bytes, page-aligned
    uint64_t ram_bytes = 0;
    // QEMU's CPU model (UC_CPU_X86_*): the instruction set TCG decodes and
    // the CR4 bits it accepts.  CPUID answers come from TcgDevices::Cpuid.
    int uc_cpu_model = 0;
    TcgDevices* devices = nullptr;
    // How long the catch-all code hook stays installed, unused, after the
    // last user let it go (SyncCodeHook).
    std::chrono::milliseconds code_hook_linger{100};
    // When QEMU's translated code reaches this size, Run empties the code
    // buffer before it starts (ReclaimCode).  Translations vbts invalidates
    // (FlushCode: every switch of what is observed) stay in the buffer, and
    // a buffer that fills while the guest runs is flushed from inside QEMU's
    // translator, which Unicorn 2.0.1 survives only sometimes (a crash in
    // tb_set_jmp_target; docs/tcg-engine.md, "The code buffer").  Unicorn's
    // buffer holds 1 GiB.
    uint64_t code_reclaim_bytes = 512ull << 20;
    // While the observer lets whole blocks run unreported (SkipSequential),
    // run translations that call the code hook at their first instruction
    // only, instead of before every instruction (docs/tcg-engine.md, "One
    // hook a block"). False: the hook before every instruction throughout
    // (for comparisons).
    bool hook_per_block = true;
    // ... the per-block records it keeps for that at most; past them a run's
    // start drops them with all translations.
    size_t hook_per_block_records = size_t{1} << 20;
    // ... and while only counters count (skipping across blocks with no ends
    // kept, nothing watched), translations with no Unicorn hook that call
    // vbts once at their start to count the whole block (docs/tcg-engine.md,
    // "One call a block"). False: one hook a block there too.
    bool count_call = true;
    // While no Unicorn code or memory hook exists, run without the block hook
    // too: a stop, a time limit or an interrupt then ends QEMU's block
    // through its own exit request, which it checks at every block start
    // (docs/tcg-engine.md, "Runs without the block hook").  False: the block
    // hook throughout (for comparisons).
    bool drop_block_hook = true;
  };
  // Fails with a clear message when the library is not the one
  // unicorn_abi.h pins, or a self-check of what vbts relies on fails.
  static absl::StatusOr<std::unique_ptr<TcgCpu>> Create(const Config& config);
  ~TcgCpu();
  TcgCpu(const TcgCpu&) = delete;
  TcgCpu& operator=(const TcgCpu&) = delete;

  absl::Status SetState(const CpuState& st);
  // With `with_msrs` also the SYSCALL/SYSENTER/SWAPGS MSRs (slower: read
  // through QEMU's RDMSR); usable from the instruction hook.
  CpuState GetState(bool with_msrs = true);
  // The x87/SSE registers (QEMU keeps x87 registers by physical number and
  // an empty/full tag each; the conversion follows FXSAVE's layout).
  FpuState GetFpu();
  void SetFpu(const FpuState& f);
  // What block-level observation needs at each block, cheaply: RSP, RIP,
  // CS and SS, CR0/CR3/CR4, EFER, the interrupt shadow and RFLAGS with its
  // system flags (TF, IF, VM...; the arithmetic flags are not computed).
  // The other fields of `st` are left as they were.
  // (Segments are converted only when they changed since the last call with
  // the same `st`, whose CS and SS the caller must leave as they were.)
  void GetCodeState(CpuState& st);

  // Runs guest code from the current state until a stop; timeout_us 0: none.
  absl::StatusOr<TcgStop> Run(uint64_t timeout_us = 0);
  // Ends Run() at the next translation-block boundary.
  void RequestStop();
  // From inside a run with a time limit: ends it no later than `from_now`
  // after this call (a guest timer armed during the run expires before the
  // limit it started with).  Nothing outside a run or in one without limit.
  void LimitRun(std::chrono::nanoseconds from_now);

  // Events, delivered through the guest's IDT at the next instruction
  // boundary where the architecture allows them (QEMU's checks: RFLAGS.IF
  // and the STI/MOV SS shadow for interrupts, NMI blocking until IRET).
  // Called between runs or from a callback during one; from the instruction
  // hook they come before the instruction it reports.
  // TcgDevices::InterruptPending() turned true (the LAPIC has one).
  void InterruptPending();
  void QueueNmi();
  bool NmiPending() const;
  // An NMI or a queued exception waits for delivery (both stay with the engine).
  bool EventPending() const { return pending_exception_.has_value() || NmiPending(); }
  // An exception as if the next instruction raised it (a #DB vbts emulates).
  void QueueException(uint8_t vector, std::optional<uint32_t> error_code);

  // The guest's debug registers DR0-DR3, DR6, DR7 (kvm_debugregs order:
  // db[4], dr6, dr7).  QEMU keeps them; vbts's tracer raises data
  // breakpoints (docs/tcg-engine.md).
  void GetDebugRegs(uint64_t db[4], uint64_t& dr6, uint64_t& dr7);
  void SetDebugRegs(const uint64_t db[4], uint64_t dr6, uint64_t dr7);

  // Called before every instruction (linear address of CS:RIP) while set;
  // costs about a factor of two in speed.  Set between runs only.
  void SetInstructionHook(std::function<void(uint64_t linear)> hook);
  // Decides now, between runs, what Run() would decide at its start: whether
  // a code hook no longer used goes (SyncCodeHook, Config::code_hook_linger).
  // The next Run() keeps that decision, so that the caller can choose the
  // guest's clock for the whole run from CodeHookLingering().
  void SyncHooks();
  // The catch-all code hook is installed but used by nothing (lingering):
  // QEMU still calls it before every instruction, and it counts them
  // (lingering_retired) at no further cost.  The machine keeps the guest's
  // time on instructions meanwhile (docs/tcg-engine.md, "Guest time").
  bool CodeHookLingering() const { return code_hook_ != 0 && !CodeHookActive(); }
  // Guest activity after which tracing often starts (a write of a PMU MSR:
  // Linux's perf disables the PMU, programs the counters, then enables
  // them): the code hook lingers from now, installed if it was not (at the
  // next run's start: true, and the caller ends the run so that it is), so
  // that the clock is on instructions already while the kernel programs the
  // counters of a process it is about to count.
  bool KeepCodeHookLingering();
  // Instructions started under the lingering hook since the engine was made.
  uint64_t lingering_retired() const { return lingering_retired_; }
  // While the hook lingers, end the run before the instruction at which
  // lingering_retired() reaches `count` (the LAPIC timer's deadline on
  // instruction time); nullopt: no such stop.
  void SetLingeringStopAt(std::optional<uint64_t> count) { lingering_stop_at_ = count; }
  // Block-level observation (docs/tcg-engine.md "Block-level tracing").
  // Called from the instruction hook: the following instructions of the
  // same translated block start without the hook, at most `limit` of them.
  // The hook is called again at the first instruction after a block
  // boundary (a block ends at every transfer of control, so none of the
  // skipped instructions is a branch), at the limit, or before an event or
  // a stop is taken there.  Events delivered while skipping are announced
  // to the event hook first.
  // `across_blocks`: also past block boundaries at the same CPL (the
  // observer counts instructions without telling branches apart); a REP
  // string instruction's iterations are one instruction.
  // `block_ends`: with `across_blocks`, each block boundary passed is kept
  // (BlockEnd, at most kMaxBlockEnds; then the hook is called at the next
  // one), for an observer that needs every block end but nothing at it
  // (LBRs alone, a recording: Tracer::BulkBlockEnds).  Skipping also ends at
  // a block start after the paging or translated code changed (the kept
  // ends are decoded later, under the paging of then) or SS's size or CS's
  // base did.
  void SkipSequential(uint64_t limit, bool across_blocks = false, bool block_ends = false);
  static constexpr size_t kMaxBlockEnds = 1024;
  // Called before a guest store into a page that holds translated code
  // lands, while block ends are kept: the observer takes them (TakeSkipped)
  // while the bytes they were decoded from are still those that ran.
  void SetBeforeCodeStoreHook(std::function<void()> hook) { before_code_store_ = std::move(hook); }
  // `retaddr`: the store's return address in translated code (0: unknown).
  void BeforeCodeStore(uintptr_t retaddr);
  // How many started unreported since the last TakeSkipped, without taking
  // them (from a callback: the instruction there included).
  uint64_t skipped() const;
  struct Skipped {
    uint64_t count = 0;   // instructions that started unreported since the last TakeSkipped
    uint64_t last = 0;    // linear address of the last instruction that started before now
    bool block_start = false;  // (from the hook) this instruction follows a block boundary
    // The block boundaries passed (SkipSequential's `block_ends`), oldest
    // first; valid until skipping starts again.
    BlockEnds ends;
  };
  // What started since the last TakeSkipped; ends skipping.  From the
  // instruction hook `last` is the instruction before the hooked one; from
  // the event hook or a callback (RDMSR, ...) it is the instruction there
  // (it has started, and may not run: a fault, an interrupt before it).
  Skipped TakeSkipped() {
    SettleOpenBlock();
    Skipped s{skipped_, last_start_, hook_block_start_, {}};
    if (block_ends_n_ > 0) {
      s.ends = skip_ends_;
      s.ends.data = block_ends_.data();
      s.ends.size = block_ends_n_;
      block_ends_n_ = 0;
    }
    skipped_ = 0;
    skipping_ = false;
    // The rest of a block running with one hook (docs/tcg-engine.md, "One
    // hook a block") runs on: it counts as started again, to be reported at
    // the next boundary.
    if (open_ != nullptr) PretendFrom(open_idx_);
    return s;
  }
  bool skipping() const { return skipping_; }
  // Called before QEMU delivers an exception, INT n, interrupt or NMI (once
  // per delivery, not for a fault during it), so that an observer that let
  // instructions run unreported can account for them first:
  // `soft_linear` is the INT n/INT3/INTO that raised it (it has run).
  void SetEventHook(std::function<void(std::optional<uint64_t> soft_linear)> hook) { event_hook_ = std::move(hook); }

  // True: the guest's single-step traps (RFLAGS.TF) are raised by vbts
  // (its tracer emulates them, with DEBUGCTL.BTF), not by QEMU.
  void SetOwnSingleStep(bool own) { own_single_step_ = own; }

  // --- A debugger's stops (the gdbstub, docs/gdb.md) ---
  // Guest memory is never patched: the engine checks before each instruction
  // while any of these is set, so the guest cannot see them.
  struct DebugWatch {
    uint64_t addr = 0, len = 1;  // linear
    bool read = false, write = false;
  };
  struct DebugStop {
    enum Kind { kNone, kBreakpoint, kStep, kWatch } kind = kNone;
    uint64_t address = 0;  // kBreakpoint: the instruction; kWatch: the watched address accessed
    bool write = false;    // kWatch: the access was a write
  };
  // Run() ends before the instruction at any of these linear addresses,
  // except at the first instruction of a run that starts there (the one a
  // debugger resumes from).  Between runs.
  void SetDebugBreakpoints(std::vector<uint64_t> linear);
  // Run() ends at the boundary after one instruction (a fault or an event
  // delivered instead: at the handler's first instruction).  A step's run
  // must have no time limit: a run cut short would step again when resumed.
  void SetDebugStep(bool step);
  // Run() ends after an instruction that read or wrote [addr, addr+len)
  // (QEMU's watch flags on the pages they overlap: TcgCallbacks::WatchedPage).
  void SetDebugWatchpoints(std::vector<DebugWatch> watches);

  // Called for every data access to guest RAM by instructions (not those of
  // event delivery), with its guest-physical address,
  // size and the CPL, while set (the virtual PMU's LLC events).  Every
  // memory access then leaves QEMU's fast path.  Set between runs only.
  // It returns true when the access made something due at the boundary
  // after its instruction (a PMI): the run ends there, and an instruction
  // in a block run with one hook is run again alone for it, its accesses
  // already reported not reported again (docs/tcg-engine.md, "Watched
  // accesses").
  //
  // `owner` says whose access it is (pmu/access_owner.h): kObserved
  // while every instruction is reported, and in a block an instruction runs
  // alone in; kInBulk in a block run with one hook or while instructions go
  // unreported (block-level observation).  An answer of needs_instruction
  // (a load-latency event, which must be counted at its own instruction)
  // means the access was not taken: with one hook a block the instruction
  // is abandoned and run again alone, where the access comes again as
  // kObserved; while the code hook skips, the access is taken again as
  // kObserved and the boundary after its instruction is reported; where the
  // instruction cannot be found (as in RunAloneUnlessSeen), kCountNow.
  using AccessOwner = pmu::AccessOwner;
  using AccessVerdict = vcpu::AccessVerdict;
  using DataAccessHook =
      std::function<AccessVerdict(uint64_t pa, uint32_t size, uint8_t cpl, bool write, AccessOwner owner)>;
  void SetDataAccessHook(DataAccessHook hook);
  bool has_data_access_hook() const { return static_cast<bool>(data_access_hook_); }

  // The guest's own data breakpoints (DR0-DR3 with DR7 R/W 01 or 11) at
  // block speed: while set, every data access by the guest's instructions
  // (not those of an event delivery) that touches an enabled one calls
  // `hook` with the DR6 bits B0-B3 it matched (DataBreakpointHits) during
  // the instruction, and the boundary after it is reported to the
  // instruction hook (blocks keep one hook while any is enabled: the hit's
  // instruction runs again alone).  The enabled ranges are QEMU's watch
  // flags in the TLB entries of their pages (only those accesses leave the
  // fast path); they follow DR0-DR7 at once (SyncGuestWatches).  Set between
  // runs only.
  using GuestDataHitHook = std::function<void(uint32_t dr6_hits)>;
  void SetGuestDataHitHook(GuestDataHitHook hook);
  bool has_guest_data_hit_hook() const { return static_cast<bool>(guest_data_hit_hook_); }
  // Why the last Run() ended for the debugger (kNone: another reason).
  DebugStop debug_stop() const { return debug_stop_; }
  // Drops the translations that hold any of the bytes [gpa, gpa+len) (and no
  // others): for stores vbts makes on the guest's behalf, such as BTS records
  // and a debugger's writes.
  void InvalidateCodeBytes(uint64_t gpa, uint64_t len);
  // Whether a page of [gpa, gpa+len) (len > 0, gpa in RAM) may hold bytes of
  // a translation: if not, a store there has nothing to invalidate.
  bool MayHoldCodeIn(uint64_t gpa, uint64_t len) const {
    const uint64_t last = (std::min<uint64_t>(config_.ram_bytes, gpa + len) - 1) >> 12;
    for (uint64_t page = gpa >> 12; page <= last; page++)
      if (MayHoldCode(page)) return true;
    return false;
  }

  // Guest memory changed behind the engine's back (the loader, the KVM
  // engine): drops every translation.
  void FlushCode();
  // The code buffer emptied when it holds Config::code_reclaim_bytes, at
  // the start of Run: outside QEMU's execution loop.
  void ReclaimCode();
  // Installs the data-access hook QEMU calls, or removes it once unused for
  // Config::code_hook_linger.
  void SyncDataHook();
  // An unused hook stays for Config::code_hook_linger: true while it should,
  // starting the idle time at the first call (`idle_since`).
  bool Lingers(std::optional<std::chrono::steady_clock::time_point>& idle_since) const;

  // QEMU's CPU model (UC_CPU_X86_*) closest to a vbts CPU model (pmu/cpu_model.h).
  static int UnicornModelFor(const std::string& vbts_model);
  // The CPU MSRs the engine itself implements (TcgDevices::Msr::kCpu).
  static bool OwnsMsr(uint32_t index);
  // A WRMSR of one of them that the architecture refuses with #GP
  // (non-canonical bases, reserved EFER/TSC_AUX bits, invalid PAT types).
  static bool CpuMsrWriteFaults(uint32_t index, uint64_t value);
  uint64_t cr4() const;
  // Changes whenever QEMU flushes its TLB (MOV to CR0/CR3/CR4, INVLPG, ...):
  // while it stays the same, a linear address of code maps to the same
  // physical address as QEMU's own translations do.
  static uint64_t PagingGeneration();
  // Host nanoseconds spent translating guest code so far, and invalidating
  // or emptying translations (adding or removing a hook, FlushCode,
  // ReclaimCode), by every engine: work of the code cache that a CPU does
  // not do, which the guest clock leaves out of host time.
  static uint64_t TranslationNs();
  // Changes whenever a store may have changed bytes QEMU translated (every
  // such store reaches QEMU's invalidation: the guest's through the TLB
  // entries of pages with code, vbts's through InvalidateCodeBytes), and
  // whenever code is translated in a page that had none.  While it is
  // unchanged, the bytes of an instruction that ran from a translation are
  // the bytes it ran with.
  static uint64_t CodeBytesGeneration();
  const TcgStats& stats() const { return stats_; }

 private:
  explicit TcgCpu(const Config& config);
  absl::Status Init();
  absl::Status SelfCheck();
  // QEMU's CPUID feature words from the machine's CPUID (TcgDevices::Cpuid).
  void SetFeatureWords();
  uint64_t mmio_base() const;
  // Reads guest memory at a linear address through the guest's paging (32
  // bits wide outside IA-32e mode), as a supervisor read.
  absl::StatusOr<pmu::AccessFault> ReadLinear(uint64_t linear, absl::Span<uint8_t> out);
  // One byte of guest code at a linear address (false if it cannot be read).
  bool ReadCode(uint64_t linear, uint8_t& byte);
  // Up to 15 bytes at `linear` (as many as are readable) and their decoding.
  absl::StatusOr<DecodedInsn> DecodeCode(uint64_t linear, DecodeMode mode, uint8_t (&bytes)[15], size_t& n);
  // Instructions QEMU 5.0 gets wrong inline (docs/tcg-engine.md): how the
  // instruction at linear `pc` is to be translated (its bytes read once,
  // through QEMU's fetch, within pc's page): as it is, as UD2 for vbts to
  // perform at the #UD (CompleteSubstituted), or with the 16-byte alignment
  // check of its m128 operand (DecodedInsn::sse_aligned_m128).
  enum class TranslateAs { kAsIs, kSubstitute, kAlign16 };
  TranslateAs LookBeforeTranslation(uint64_t pc);
  bool CompleteSubstituted();
  // At a #GP(0) QEMU raised in 64-bit mode: the instruction's non-canonical
  // data addresses are all SS-based (then it is #SS(0)).
  bool NonCanonicalStackAccess();
  // At a #GP(0) QEMU raised fetching a non-canonical RIP: the frame is the
  // near JMP/CALL/RET's that went there, with its stack change taken back.
  void FaultAtTheBranch();
  // Delivers `vector` through the IDT in place of the exception QEMU raised
  // (a fault: RF set in its frame; else a trap).
  void DeliverInstead(int vector, bool fault);
  // Task switches (docs/tcg-engine.md, "Task switches"): QEMU 5.0 loads the
  // new task's CS only if the descriptor's DPL equals the selector's RPL,
  // conforming or not; the hardware takes a conforming code segment with DPL
  // <= RPL (kvm-unit-tests taskswitch2; KVM's emulator since Linux commit
  // 9a4cfb27f723). Before QEMU performs a switch to the TSS `tss_selector`
  // (a far JMP/CALL to a TSS or task gate, IRET with NT, a task gate in the
  // IDT), ArmTaskSwitch notes the new task's CS selector; QEMU's read of that
  // descriptor's upper word then sees DPL = RPL when it is a conforming one
  // with DPL < RPL (TaskCsDescriptor): the CS it loads holds the new CPL as
  // its DPL, vbts's convention for a conforming CS (GetState).
  void ArmTaskSwitch(uint16_t tss_selector);
  void ArmFarTransfer(uint16_t selector);  // JMP/CALL to `selector`: a TSS or a task gate
  void ArmTaskGate(int vector);            // a delivery of `vector`: its IDT gate
  uint32_t TaskCsDescriptor(uint64_t linear, uint32_t high_word);
  // The 8-byte descriptor at `offset` in the table (GDT, LDT, IDT) at
  // linear `base` with `limit`, through the guest's paging; none beyond the
  // limit or where the read faults.
  std::optional<Descriptor> TableDescriptor(uint64_t base, uint32_t limit, uint32_t offset);
  bool TasksSwitch() const;
  struct BlockSpan {  // a translated block: its first linear address and its bytes
    uint64_t start = 0;
    uint32_t size = 0;
  };
  BlockSpan current_block_;  // the last translated block that started (Unicorn's block hook)
  // QEMU's env->dr[0..7] (16 bytes after env->error_code).
  uint64_t* dr() const;
  // The registers for a walk that only translates (QEMU's own walk checked
  // the access): supervisor, SMEP and SMAP off.
  pmu::PagingRegs WalkRegs() const;
  void Kick();
  void Watch();  // the watcher thread: ends runs at their time limit
  [[noreturn]] void Boundary(uint64_t linear);
  // The guest's instruction breakpoints (DR7), checked before each
  // instruction by the instruction hook while any is enabled.
  void UpdateBreakpoints();
  void CheckInstructionBreakpoints(uint64_t linear);
  // Installs the Unicorn code hook while the instruction hook or an
  // instruction breakpoint needs it (between runs).  A hook no longer
  // needed stays, unused (TcgCallbacks::Code returns at once), until it has
  // been unused for Config::code_hook_linger: adding or removing it retranslates all
  // code (milliseconds, and the hot code again after), and a guest whose
  // tracing turns off and on again soon after — Linux's perf disables its
  // counters in every PMI and at every context switch — would pay that
  // each time.
  // Returns whether it changed the hook (and so retranslated everything).
  bool SyncCodeHook();
  // The hook is installed and in use (not lingering).
  bool CodeHookActive() const { return code_hook_ != 0 && (insn_hook_ || exec_bp_mask_ != 0 || debug_code_); }
  // uc_hook_del without its side effects on the guest: Unicorn 2.0.1
  // invalidates each region the hook was translated into by translating the
  // region's *linear* address through the guest's current page tables
  // (uc_invalidate_tb -> get_page_addr_code); where that page is no longer
  // mapped, QEMU raises a #PF into the void, which writes CR2, the error
  // code and QEMU's exception-in-flight (old_exception, so the guest's next
  // #PF became a #DF and the one after a triple fault). DeleteHook puts them
  // back; vbts invalidates the translations itself (FlushCode).
  void DeleteHook(size_t hook);  // a uc_hook
  // A queued event could be taken at the current boundary.
  bool Deliverable() const;
  bool IsRepString(uint64_t linear);
  // How many prefix bytes the instruction at `linear` starts with; `rep`:
  // whether one of them is REP/REPNE (F3/F2).
  // `rep`: an F2/F3 prefix is among them; `addr_size`: a 67 prefix.
  uint64_t PrefixBytes(uint64_t linear, bool* rep = nullptr, bool* addr_size = nullptr);
  // The length of the instruction at `linear` if it is a REP string
  // instruction whose count register is 0, else 0.
  uint64_t FinishedRepLength(uint64_t linear);
  // An event is about to be delivered: the event hook, while skipping.
  void AnnounceEvent(std::optional<uint64_t> soft_linear);
  friend struct TcgCallbacks;

  Config config_;
  uc_struct* uc_ = nullptr;
  void* cpu_ = nullptr;               // QEMU's CPUState
  uabi::EnvPrefix* env_ = nullptr;    // QEMU's CPUX86State
  size_t code_hook_ = 0;
  // The block hook (TcgCallbacks::Block), while a run needs it (NeedsBlockHook).
  size_t block_hook_ = 0;
  // A code hook was deleted since the last run ended: Unicorn keeps it in
  // its list (to_delete) until the end of the next run, and while a code hook
  // is listed QEMU leaves EIP stale at an exit it takes at a block start.
  bool code_hook_deleted_ = false;
  // The current run has no code hook listed and no block hook: stops and
  // kicks ask QEMU to leave at its next block start (cpu_exit); the watcher
  // thread reads it.
  std::atomic<bool> exit_at_block_start_{false};
  bool NeedsBlockHook() const;
  void SyncBlockHook();  // between runs
  void DeleteCodeHook(size_t hook);  // DeleteHook, noting code_hook_deleted_
  // The translated block the last branch left through QEMU's search for its
  // target (helper_lookup_tb_ptr): the branch FaultAtTheBranch looks for,
  // while no block hook reports blocks.  {0, 0}: not known.
  BlockSpan LastLookupBlock() const;
  uint64_t lingering_retired_ = 0;
  std::optional<uint64_t> lingering_stop_at_;
  bool hooks_synced_ = false;  // SyncHooks() decided for the next Run()
  bool linger_requested_ = false;  // KeepCodeHookLingering() without a hook
  // Since when the installed code hook has been unused (lingering), if it is.
  std::optional<std::chrono::steady_clock::time_point> code_hook_idle_since_;
  void* cpu_class_ = nullptr;       // QEMU's CPUClass of cpu_ (found by SelfCheck)
  size_t error_code_offset_ = 0;  // of env->error_code (found by SelfCheck)
  bool stop_requested_ = false;
  bool halted_ = false;
  bool triple_fault_ = false;
  int delivering_ = -1;         // the vector QEMU is delivering (-1: none)
  bool delivering_soft_ = false;  // ... raised by INT n/INT3/INTO
  uint64_t soft_start_ = 0;     // EIP of the last INT n/INT3/INTO
  std::optional<std::pair<uint8_t, std::optional<uint32_t>>> pending_exception_;
  uint64_t pending_rep_skip_ = 0;  // QueueException: a #DB after a REP's last iteration, its length
  bool in_code_hook_ = false;   // insn_hook_ is running
  // A store insn_hook_ made (InvalidateCodeBytes) changed the block being
  // run at or after the reported instruction: the block is left there and
  // re-entered at reenter_at_ without a second report.
  bool HitsBlockAhead(uint64_t gpa, uint64_t end);
  static constexpr uint64_t kNoReentry = ~0ull;
  uint64_t hook_linear_ = 0;  // the instruction insn_hook_ reports
  bool code_changed_in_hook_ = false;
  uint64_t reenter_at_ = kNoReentry;
  struct {
    bool valid = false;
    uint64_t linear_page = 0, generation = 0, cr3 = 0;
    uint64_t phys[2] = {};  // the physical pages of linear_page and the next (~0: not mapped)
  } block_pages_;
  bool deliver_now_ = false;    // an event waits for the next boundary the instruction hook reports
  bool first_hook_of_run_ = false;
  bool block_start_at_run_ = false;  // the last run ended at a block start (after its last report)
  bool allow_delivery_ = false;  // the instruction hook let QEMU take the event now
  bool observed_valid_ = false;
  uint64_t last_observed_ = 0;  // the last address the instruction hook reported
  bool own_single_step_ = false;
  uint8_t exec_bp_mask_ = 0;  // DR0-DR3 enabled as instruction breakpoints
  // ... those the code hook must check before every instruction: none where
  // QEMU has them as its own breakpoints (guest_exec_addrs_), which end a
  // block before them with a debug exit (TcgCallbacks::GuestExecExit), also
  // while the tracer's hook runs once a block.
  uint8_t exec_bp_hook_mask_ = 0;
  void UpdateExecBpHookMask();
  // The guest's instruction breakpoints as QEMU's own (BP_CPU) at their
  // linear addresses (sorted, unique; those of breakpoints enabled before
  // stay, up to kMaxGuestExecHooks), so that only those instructions leave
  // QEMU's code while no catch-all code hook runs (TcgCallbacks::GuestExecExit).
  std::vector<uint64_t> guest_exec_addrs_;
  std::vector<uint64_t> GuestExecAddrs() const;  // what DR0-DR3 and exec_bp_mask_ ask for
  bool GuestExecHooked(const std::vector<uint64_t>& want) const;  // ... all are inserted
  void SyncGuestExecHooks();  // between runs
  static constexpr size_t kMaxGuestExecHooks = 64;
  // The watcher thread and the current run's time limit (steady clock ns, 0: none).
  std::thread watcher_;
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  uint64_t watch_deadline_ = 0;
  static constexpr uint64_t kRestopNs = 20'000;  // Watch: a lost stop is made again after this
  bool watch_quit_ = false;
  std::atomic<bool> time_up_{false};
  std::atomic<bool> kick_{false};  // the next block start leaves QEMU's block
  bool timed_out_ = false;
  std::function<void(uint64_t)> insn_hook_;
  std::function<void(std::optional<uint64_t>)> event_hook_;
  // Block-level observation (SkipSequential).
  // GetCodeState's last destination and the CS and SS it was given.
  const CpuState* code_state_of_ = nullptr;
  struct SegRaw {
    uint64_t base = 0;
    uint32_t selector = 0, limit = 0, flags = 0;
  } code_state_cs_, code_state_ss_;
  bool skipping_ = false;
  // A load of the instruction running needs its instruction (AccessOwner):
  // the next boundary is reported, not skipped.
  bool unskip_next_ = false;
  bool skip_across_ = false;
  uint32_t skip_hflags_ = 0;  // privilege, mode and TF when skipping began (across blocks)
  uint64_t skip_cs_ = 0;
  // SkipSequential's `block_ends`: the ends kept, and what must not change
  // while they are (the paging and code generations, SS's size).
  bool skip_block_ends_ = false;
  std::vector<BlockEnd> block_ends_;
  std::function<void()> before_code_store_;
  size_t block_ends_n_ = 0;
  BlockEnds skip_ends_;  // generations and paging registers as the ends began to be kept
  uint32_t skip_ss32_ = 0;
  // Whether the instruction at rep_probe_.linear (under CR3 rep_probe_.cr3)
  // is a REP string instruction (IsRepString's one-entry cache).
  struct {
    uint64_t linear = ~0ull, cr3 = 0;
    bool rep = false;
  } rep_probe_;
  uint64_t skip_limit_ = 0;
  uint64_t skipped_ = 0;
  uint64_t last_start_ = 0;       // linear address of the last instruction that started
  // ... it started unreported (counted in skipped_), after prev_start_.
  bool last_start_skipped_ = false;
  uint64_t prev_start_ = 0;
  bool block_start_ = false;      // a block started since the last instruction hook
  bool hook_block_start_ = false;  // ... before the instruction being reported
  // One hook a block (Config::hook_per_block; docs/tcg-engine.md): while
  // env->hflags has kHfHookless, QEMU looks up and makes translations that
  // call the code hook at their first instruction only (a flag of their own:
  // both kinds coexist in QEMU's cache).  The hook there stands for the
  // whole block: the instructions after the first count as started at once
  // (Pretend), and where QEMU leaves such a block in its middle (an
  // exception, vbts leaving after an OUT) or a callback asks in its middle
  // (a PMU access), the instruction it is at is found (Settle).
  struct HooklessTb {
    std::vector<uint64_t> pcs;  // the linear address of each instruction
    uint32_t bytes = 0;         // the block's size
  };
  // By QEMU's TranslationBlock (the pointers are unique until the code
  // buffer is emptied), and by the hook call's return address in the
  // translated code (likewise).
  std::unordered_map<const void*, HooklessTb> hookless_tbs_;
  struct HooklessHit {
    uintptr_t ra = 0;
    const HooklessTb* tb = nullptr;
    uint64_t first = 0, last = 0, before_last = 0;  // tb's first, last and last but one instruction
    size_t n = 0;                                    // ... and how many it has
  };
  std::vector<HooklessHit> hookless_hits_;
  const void* last_tb_alloc_ = nullptr;  // tcg_tb_alloc's last: a lower one means the buffer was emptied
  const HooklessTb* open_ = nullptr;  // the block whose later instructions count as started
  HooklessTb open_copy_;              // ... kept here when the translations go first
  size_t open_idx_ = 0;               // its last instruction known to have started
  uint64_t open_pretend_ = 0;         // its instructions after that one, counted in skipped_
  uint64_t open_prev_ = 0;            // prev_start_ and last_start_skipped_ as its instruction
  bool open_skipped_ = false;         // open_idx_ left them
  bool hookless_reentry_ = false;     // reenter_at_ was set leaving or entering the mode (kept across runs)
  uint64_t hookless_not_at_ = ~0ull;  // a block start the mode could not follow: not entered there next
  bool HooklessAllowed() const;
  // One call a block (Config::count_call): while env->hflags has
  // kHfCountCall, QEMU makes translations with neither the block hook nor
  // the code hook, which call CountCallStart before their first instruction
  // (where the block hook's call is) with the block's record; the call
  // does what HooklessStart does there (TcgCallbacks::AtBoundary), or leaves the mode.
  bool CountCallAllowed() const;        // ... by what observes and is watched now
  bool CountCallAllowedForRun() const;  // ... by what stays for a whole run
  void CountCallStart(const HooklessTb* tb, uint64_t address);
  [[noreturn]] void LeaveCountCall(uint64_t address, bool handled);
  void SyncCountCallMode();  // the flag off where the run no longer allows the mode
  // QEMU's icount_decr (its exit request at block starts: negative when set),
  // found by SelfCheck through CPUState.icount_decr_ptr; null: no such mode.
  const volatile int32_t* icount_decr_ = nullptr;
  // A copy of the code hook's Unicorn record with CountCallStart as its
  // callback, which Unicorn's inline-call generator reads.
  alignas(8) unsigned char count_call_hook_[64] = {};
  const HooklessHit* HooklessLookup(uintptr_t ra);
  // The first (only) hook of a block translated with one hook.
  void HooklessStart(uint64_t address, uintptr_t ra);
  // Into or out of the mode, at a boundary: leaves QEMU's block (a flag of
  // the translations changes only with QEMU's loop, so that no block is
  // chained to one of the other kind). `handled`: the instruction at
  // `address` was reported or skipped already (re-entered without that).
  void MaybeEnterHookless(uint64_t address);
  [[noreturn]] void LeaveHookless(uint64_t address, bool handled);
  [[noreturn]] void LeaveBlockMode(uint32_t flag, uint64_t address, bool handled);  // (either mode's flag)
  // `tb` is the block whose first instruction started: its last `tail`
  // instructions count as started (Pretend).
  void OpenBlock(const HooklessTb* tb, uint64_t tail, uint64_t before_last, uint64_t last);
  void StartBlock(uint64_t address, uint32_t size);  // a block starts: the one before ran to its end
  [[noreturn]] void EndRunAtBlockStart(uint64_t address);  // a stop, time limit or kick at a block start
  bool CanKeepEnd() const;  // the end before this block start can be kept (skipping with ends)
  bool BlockHookServesMore() const;  // what besides the code hook needs the block hook
  // open_'s last `tail` instructions (the last but one and the last at
  // `before_last` and `last`) count as started.
  void Pretend(uint64_t tail, uint64_t before_last, uint64_t last);
  void PretendFrom(size_t from);  // ... those after its instruction `from`
  bool SettleAt(uint64_t linear);  // ... only those up to the one at `linear`
  void SettleOpenBlock();     // ... up to the one at CS:EIP (or all: the block ended)
  void CloseBlock() { open_ = nullptr; open_pretend_ = 0; }
  void LeaveBlockAt(uint64_t linear) {  // the block is left at `linear`, which has started
    SettleAt(linear);
    CloseBlock();
  }
  void DetachOpenBlock();     // before the translations' records go
  void DropHooklessRecords();  // the code buffer was emptied
  // The debugger's stops (SetDebug*).
  std::vector<uint64_t> debug_bps_;  // sorted
  // A Unicorn code hook bounded to the breakpoint where a run resumes (the
  // run's first block runs that instruction: TcgCallbacks::DebugBreakpoint).
  std::vector<size_t> debug_bp_hooks_;
  std::vector<uint64_t> debug_bp_hook_addrs_;  // sorted, as debug_bp_hooks_
  // The debugger's breakpoints inserted as QEMU's own (BP_GDB), sorted:
  // while no catch-all code hook checks them, all but the one where the run
  // resumes (SyncDebugBreakpoints, TcgCallbacks::QemuBreakpoint).
  std::vector<uint64_t> qemu_bps_;
  void SyncDebugBreakpoints();
  // QEMU's own breakpoints of kind `flags` (BP_GDB, BP_CPU) at `want`
  // instead of `have`, which becomes `want`.
  void SetQemuBreakpoints(std::vector<uint64_t>& have, std::vector<uint64_t> want, int flags, bool invalidate = true);
  uint64_t blocks_in_run_ = 0;  // translated blocks started in this run
  bool debug_step_ = false;
  std::vector<DebugWatch> debug_watches_;
  DataAccessHook data_access_hook_;
  GuestDataHitHook guest_data_hit_hook_;
  // What QEMU's watch flags were last made from (SyncGuestWatches): DR0-DR3
  // and DR7's enables, R/W and LEN fields of the data breakpoints.
  std::array<uint64_t, 5> guest_watch_regs_{};
  // The guest's data-breakpoint ranges as DR0-DR7 set them now, and whether
  // the watch flags still match.
  std::array<uint64_t, 5> GuestWatchRegs() const;
  GuestBreakpoints GuestDebugRegs() const;  // DR0-DR3 and DR7 as the guest set them
  bool GuestWatchesStale() const { return guest_data_hit_hook_ && GuestWatchRegs() != guest_watch_regs_; }
  void SyncGuestWatches();
  // The instruction RunAloneUnlessSeen left the block at, and the number
  // of the block (blocks_in_run_) that runs it alone, which the next block
  // start sets while pending (TcgCallbacks::Block; a run that ends before
  // it keeps it pending for the next, Run).
  uint64_t alone_at_ = ~0ull;
  uint64_t alone_block_ = ~0ull;
  bool alone_pending_ = false;
  // The data-access hook's reports in the current block (their helpers'
  // return addresses, a ring), from which RunAloneUnlessSeen finds how many
  // the abandoned instruction made; its run alone (the block alone_block_)
  // does not report those again (alone_skip_, counted down), and asks for
  // the stop at the last of them if one of them made something due
  // (alone_due_).
  static constexpr size_t kReportedRing = 256;  // a power of two
  struct ReportedAccess {
    uintptr_t ra = 0;
    uint64_t block = ~0ull;
  };
  std::array<ReportedAccess, kReportedRing> reported_{};
  uint64_t reported_n_ = 0;
  uint64_t alone_skip_ = 0;
  bool alone_skip_started_ = false;
  bool alone_due_ = false;
  // The data-access hook's guest-physical addresses: a direct-mapped cache
  // of the walks (linear page, write, user) that did not fault, valid until
  // QEMU's next TLB flush (g_paging_generation), as QEMU's own TLB entries
  // are: an access reports the page QEMU performs it on, also where the
  // guest changed a page-table entry without INVLPG. A walk that faults is
  // not kept (the access faults: nothing is reported).
  struct PaCacheEntry {
    uint64_t tag = ~0ull;  // linear page << 2 | user << 1 | write
    uint64_t generation = ~0ull;
    uint64_t pa_page = 0;
  };
  static constexpr size_t kPaCache = 512;  // a power of two
  std::array<PaCacheEntry, kPaCache> pa_cache_{};
  bool CachedTranslation(uint64_t linear, bool write, uint64_t& pa);
  // Of the accesses reported in this block, how many the instruction at
  // `linear` made: those at the ring's end whose return addresses QEMU
  // places at it (nullopt: some cannot be placed, or the ring is all its).
  std::optional<uint64_t> ReportedByInstruction(uint64_t linear);
  // QEMU's TCGContext, which tcg_tb_alloc (interposed) gives at the first
  // translation; nullptr before (ReclaimCode).
  void* tcg_ctx_ = nullptr;
  size_t data_mem_hook_ = 0;
  std::optional<std::chrono::steady_clock::time_point> data_hook_idle_since_;
  bool debug_code_ = false;      // the code hook must check before each instruction
  bool ss_shadow_ = false;       // the last of (SS load, STI) was an SS load
  bool mmio_written_ = false;    // a store reached a device since the store helper began
  bool debug_first_ = false;     // no instruction of this run has been checked yet
  bool debug_progress_ = false;  // an instruction started (or an event came) since the run began
  uint64_t debug_resume_ = 0;    // linear address the run started at
  DebugStop debug_stop_;
  bool UpdateDebugCode();  // SyncCodeHook's answer
  // The catch-all code hook checks the debugger's stops at each boundary it sees.
  bool DebugChecked() const { return debug_code_ || !debug_bps_.empty(); }
  // Before the instruction at `linear`: a breakpoint or a finished step ends the run.
  void DebugCheck(uint64_t linear);
  bool DebugStopsAt(uint64_t linear) const;  // the bulk path must not skip this boundary
  [[noreturn]] void DebugBoundary(DebugStop::Kind kind, uint64_t linear);
  // The pages of guest RAM that QEMU's translations come from (one bit a
  // page): set when QEMU write-protects a page for the code it translated
  // from it (tlb_protect_code), cleared when it drops the page's last
  // translation (tlb_unprotect_code).  A store to a page outside it has no
  // translation to invalidate.
  std::vector<uint64_t> code_pages_;
  void NoteCodePage(uint64_t page, bool has_code);
  bool MayHoldCode(uint64_t page) const { return (code_pages_[page >> 6] >> (page & 63)) & 1; }
  uint64_t dr_[8] = {};
  uint64_t cr8_ = 0;
  uint8_t maxphyaddr_ = 36;
  TcgStats stats_;
};

// Guest RAM as vbts's own stores on the guest's behalf write it: the virtual
// PMU's BTS and PEBS records and DS index updates (the tracer's memory), a
// debugger's writes.  Each write drops the TCG engine's translations of the
// bytes it changes, as any store to code does (SDM vol. 3A 11.6;
// guest-tests/tiny/hostile_ds_overlap.asm); `engine()` names the engine that
// holds the vCPU now, or null (KVM fetches from RAM: nothing to drop).
class CodeCoherentMemory : public PhysMemory {
 public:
  // RAM's size is fixed for the machine's life: kept, not asked at every access.
  CodeCoherentMemory(PhysMemory& ram, std::function<TcgCpu*()> engine)
      : ram_(ram), size_(ram.size()), engine_(std::move(engine)) {}
  uint64_t size() const override { return size_; }
  absl::Status Read(Gpa gpa, absl::Span<uint8_t> out) const override { return ram_.Read(gpa, out); }
  absl::Status Write(Gpa gpa, absl::Span<const uint8_t> data) override;
  // Reads always; a write only where no page of it holds translated code
  // (the REP-string probe and the block ahead are in pages that do).
  uint8_t* Direct(Gpa gpa, uint64_t len, bool write) const override {
    if (write && len > 0 && gpa.value < size_) {
      if (TcgCpu* tcg = engine_(); tcg && tcg->MayHoldCodeIn(gpa.value, len)) return nullptr;
    }
    return ram_.Direct(gpa, len, write);
  }

 private:
  PhysMemory& ram_;
  const uint64_t size_;
  std::function<TcgCpu*()> engine_;
};

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_TCG_CPU_H_
