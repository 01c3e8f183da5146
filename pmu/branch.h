// branch.h: what the stepping engine (vcpu/) tells the virtual PMU about each
// retired instruction: its linear address, privilege, mode and, when it
// transferred control, what kind of transfer and where to.  This is the one
// contract between vcpu/ (which observes the guest) and pmu/ (which models
// what Intel hardware would record); pmu/ never sees KVM.
#ifndef VBTS_PMU_BRANCH_H_
#define VBTS_PMU_BRANCH_H_

#include <cstdint>
#include <optional>

namespace vbts::pmu {

// Classes of control transfer, fine enough for MSR_LBR_SELECT (SDM 17.9.2,
// table 17-14) and for vbts record's trace kinds.
enum class BranchKind : uint8_t {
  kNone,       // the instruction did not transfer control (incl. not-taken Jcc)
  kJcc,        // taken conditional near branch (incl. JCXZ/LOOPcc)
  kJmp,        // near relative JMP
  kIndJmp,     // near indirect JMP (register/memory)
  kCall,       // near relative CALL
  kIndCall,    // near indirect CALL
  kRet,        // near RET (incl. RET imm16)
  kFarJmp,     // far JMP
  kFarCall,    // far CALL
  kFarRet,     // far RET
  kIret,       // IRET/IRETD/IRETQ
  kSoftInt,    // INT n, INT3, INTO (taken), INT1
  kSyscall,    // SYSCALL
  kSysret,     // SYSRET
  kSysenter,   // SYSENTER
  kSysexit,    // SYSEXIT
  kException,  // exception delivery (fault or trap), not caused by INT n
  kInterrupt,  // external (maskable) interrupt delivery
  kNmi,        // NMI delivery
};
const char* BranchKindName(BranchKind k);  // "jcc", "ind-call", "exception", ...

// True for the kinds SDM 17.4.8 / 17.9.2 call far branches (far transfers,
// software interrupts, IRET, SYSCALL/SYSRET/SYSENTER/SYSEXIT and event
// deliveries).
bool IsFarBranch(BranchKind k);
// True for the event deliveries (kException, kInterrupt, kNmi).
inline bool IsEventDelivery(BranchKind k) {  // (inline: asked at every LBR push)
  return k == BranchKind::kException || k == BranchKind::kInterrupt || k == BranchKind::kNmi;
}

// Execution mode of the code that ran, as branch records need it.
enum class ExecMode : uint8_t {
  kReal,     // CR0.PE=0
  kProt16,   // protected mode, CS.D=0
  kProt32,   // protected mode, CS.D=1 (also IA-32e compatibility mode)
  kLong64,   // IA-32e 64-bit mode (CS.L=1)
};

// Branch::mem bit 2 (see there).
inline constexpr uint8_t kMemUntaggable = 4;

// One retired instruction or one event delivery, in program order.
//
// For an instruction: `from` is the linear address of the instruction (CS
// base + RIP), `to` the linear address of the next instruction when `kind`
// is not kNone (for kNone, `to` is the fall-through address), `cpl_from`/
// `mode_from` the privilege and mode it ran at, `cpl_to`/`mode_to` those
// after it.  An instruction that faults is not reported as retired: the
// engine reports the exception delivery instead.
//
// For an event delivery (IsEventDelivery(kind)): `from` is the linear address
// of the instruction the event interrupted or that faulted (SDM 17.4.8.1:
// BTS "from" for interrupts/exceptions), `to` the handler's entry, `vector`
// the IDT vector.  kSoftInt instructions are instructions, not events.
struct Branch {
  BranchKind kind = BranchKind::kNone;
  uint64_t from = 0;
  uint64_t to = 0;
  uint8_t cpl_from = 0;
  uint8_t cpl_to = 0;
  ExecMode mode_from = ExecMode::kProt32;
  ExecMode mode_to = ExecMode::kProt32;
  uint8_t vector = 0;          // kSoftInt, kException, kInterrupt, kNmi
  bool ia32e = false;          // IA32_EFER.LMA at the time (selects DS format with DTES64)
  // The instruction is a branch instruction, taken or not (a not-taken Jcc
  // has kind kNone and this set): architectural event C4H counts these.
  bool branch_insn = false;
  // The instruction's data accesses, as the retired-load and retired-store
  // events count them (PmuModel::mem_loads_event/mem_stores_event): bit 0 it
  // reads memory, bit 1 it writes memory (explicit and implicit operands:
  // stack slots, string operands), and the linear address of its first read
  // and first write; bit 2 (kMemUntaggable) its memory µops cannot be
  // tagged for NetBurst's at-retirement counting (a LOCK-prefixed
  // instruction, XCHG with memory, INS/OUTS: locked and I/O accesses).
  // Filled only while a counter counts those events.
  uint8_t mem = 0;
  uint64_t load_la = 0, store_la = 0;

  bool taken() const { return kind != BranchKind::kNone; }
};

}  // namespace vbts::pmu

#endif  // VBTS_PMU_BRANCH_H_
