// unicorn_abi.h: the parts of Debian 12's libunicorn (2.0.1.post1) that the
// TCG engine (vcpu/tcg_cpu.h) uses beyond Unicorn's public API.
//
// Unicorn 2.0.1 is QEMU 5.0's TCG; its public API cannot express a whole
// x86 vCPU (no hidden segment parts, no CPL, no IDT delivery, no MSR hooks)
// and it checks every guest access against its mapped regions by *linear*
// address, so paging with linear != physical fails (fixed upstream in 2.1,
// which Debian 12 does not have).  libunicorn.so.2 exports QEMU's internals;
// vbts uses a few of them, and two fields of Unicorn's own struct, all at
// places this header pins and TcgCpu::Create checks at run time
// (docs/tcg-engine.md, "What vbts relies on"):
//  - uc_struct.stop_interrupt (set to null: #UD is delivered like every
//    other exception instead of ending the run);
//  - uc_struct.mem_redirect (the region lookup by linear address is pointed
//    at guest RAM, so the access itself goes through QEMU's page walk to the
//    physical address, as in Unicorn 2.1);
//  - uc_struct.cpu, CPUState.env_ptr and the prefix of CPUX86State below;
//  - exported QEMU functions (suffix _x86_64), and helpers vbts defines
//    itself so that the dynamic linker binds QEMU's calls to them (RDMSR,
//    WRMSR, HLT, the triple-fault reset): see vcpu/tcg_cpu.cc.
#ifndef VBTS_VCPU_UNICORN_ABI_H_
#define VBTS_VCPU_UNICORN_ABI_H_

#include <cstddef>
#include <cstdint>

namespace vbts::vcpu::uabi {

// The library version these offsets were read from (uc_version()).
inline constexpr unsigned kMajor = 2, kMinor = 0, kPatch = 1;

// struct uc_struct (include/uc_priv.h of 2.0.1): read off the library's own
// code (uc_mem_read calls *(uc + 0x118) to redirect, cpu_exec calls
// *(uc + 0xc8) for stop_interrupt) and checked at run time.
inline constexpr size_t kUcStopInterrupt = 0xc8;
inline constexpr size_t kUcMemRedirect = 0x118;
inline constexpr size_t kUcCpu = 0x180;
// struct CPUState: interrupt_request (x86_cpu_exec_interrupt clears its bits
// at 0x1c), env_ptr.
inline constexpr size_t kCpuInterruptRequest = 0x1c;
// cflags_next_tb, just before it: the flags of the next block QEMU's loop
// looks up, -1 for the usual ones (cpu_exec reads and resets it at 0x18; its
// precise self-modifying-code path stores 1 there: one instruction).
inline constexpr size_t kCpuCflagsNextTb = 0x18;
inline constexpr size_t kCpuEnvPtr = 0x128;
// icount_decr_ptr, after env_ptr: QEMU's IcountDecr (negative while an exit
// is requested at the next block start), just before CPUX86State.
inline constexpr size_t kCpuIcountDecrPtr = 0x130;
// struct TranslationBlock (include/exec/exec-all.h): pc (the linear address of
// its first instruction), cs_base, flags, size (bytes of guest code).  Checked
// on a translation: the first the engine sees (translator_loop).
inline constexpr size_t kTbPc = 0;
inline constexpr size_t kTbSize = 20;
// struct CPUClass (include/hw/core/cpu.h): reset, has_work, do_interrupt,
// do_unaligned_access, ... (x86 leaves the last unset; vbts sets it). The
// class is CPUState.cc, found next to CPUState.uc by TcgCpu::SelfCheck.
inline constexpr size_t kClassDoInterrupt = 2 * sizeof(void*);
inline constexpr size_t kClassDoUnalignedAccess = 3 * sizeof(void*);
// CPU_INTERRUPT_* bits of interrupt_request (include/hw/core/cpu.h, target/i386/cpu.h).
inline constexpr uint32_t kInterruptHard = 0x2;
inline constexpr uint32_t kInterruptNmi = 0x200;

// CPUX86State's cpuid_level ... cpuid_version, then `FeatureWordArray
// features` (uint64_t per FeatureWord: 1_EDX, 1_ECX, 7_0_EBX, 7_0_ECX,
// 7_0_EDX, 7_1_EAX, 8000_0001_EDX, 8000_0001_ECX, ..., FEAT_XSAVE = 19):
// the CPUID bits QEMU's translator and helpers test (POPCNT, MOVBE, SMAP,
// PDPE1GB, ...). Read off a Westmere instance (vendor "GenuineIntel" at
// kEnvFeatures - 16) and checked at run time (TcgCpu::SelfCheck).
inline constexpr size_t kEnvFeatures = 0x15e0;
enum FeatureWord : int {
  kFeat1Edx = 0, kFeat1Ecx, kFeat70Ebx, kFeat70Ecx, kFeat70Edx, kFeat71Eax, kFeat80000001Edx, kFeat80000001Ecx,
  kFeatXsave = 19,
};

// CPUX86State's old_exception (QEMU's exception in flight, which turns a
// fault during a #PF's delivery into #DF): after error_code (int),
// exception_is_int (int), exception_next_eip, dr[8] and cpu_breakpoint[4].
// vbts finds error_code at run time (TcgCpu::Create, next to the debug
// registers); old_exception is checked there too.
inline constexpr size_t kOldExceptionAfterErrorCode = 4 + 4 + 8 + 8 * 8 + 4 * 8;

// QEMU's SegmentCache (target_ulong is 64-bit in the x86_64 target).
struct SegCache {
  uint32_t selector;
  uint64_t base;
  uint32_t limit;  // byte-granular
  uint32_t flags;  // the descriptor's high dword: type<<8, S<<12, DPL<<13, P<<15, AVL<<20, L<<21, DB<<22, G<<23
};
static_assert(sizeof(SegCache) == 24);

// The prefix of QEMU 5.0's CPUX86State.
struct EnvPrefix {
  uint64_t regs[16];
  uint64_t eip;
  uint64_t eflags;  // without the lazily computed arithmetic flags
  uint64_t cc_dst, cc_src, cc_src2;
  uint32_t cc_op;
  int32_t df;
  uint32_t hflags, hflags2;
  SegCache segs[6];  // ES CS SS DS FS GS
  SegCache ldt, tr, gdt, idt;
  uint64_t cr[5];
  int32_t a20_mask;
  uint64_t bnd_regs[8];
  uint64_t bndcs[2];
  uint64_t msr_bndcfgs;
  uint64_t efer;
};
static_assert(offsetof(EnvPrefix, hflags) == 0xb0);
static_assert(offsetof(EnvPrefix, segs) == 0xb8);
static_assert(offsetof(EnvPrefix, cr) == 0x1a8);
static_assert(offsetof(EnvPrefix, efer) == 0x230);

enum { kEs = 0, kCs, kSs, kDs, kFs, kGs };

// QEMU's hflags/hflags2 bits (target/i386/cpu.h).
inline constexpr uint32_t kHfCplMask = 3;
inline constexpr uint32_t kHfInhibitIrq = 1u << 3;
inline constexpr uint32_t kHf2Nmi = 1u << 2;
// A bit QEMU 5.0 leaves unused in hflags (its HF_* end at bit 26), which
// cpu_get_tb_cpu_state copies into every translation's flags: vbts sets it
// for translations with the code hook at their first instruction only
// (TcgCpu's "one hook a block"), so that QEMU keeps them apart from those
// with the hook before every instruction.
inline constexpr uint32_t kHfHookless = 1u << 31;
// Another such bit, for translations with no Unicorn hook at all that call
// vbts once at their start to count the block (TcgCpu's "one call a block").
inline constexpr uint32_t kHfCountCall = 1u << 30;
inline constexpr uint32_t kDescP = 1u << 15;

// QEMU's exception numbers beyond the architectural vectors.
inline constexpr int kExcpHlt = 0x10001;

// QEMU 5.0's translator interface (include/exec/translator.h): the per-target
// operations translator_loop calls, and the start of the context it passes
// them (pc_next: the linear address of the instruction translate_insn is
// about to decode).
struct TranslatorOps {
  void (*init_disas_context)(void* db, void* cpu);
  void (*tb_start)(void* db, void* cpu);
  void (*insn_start)(void* db, void* cpu);
  bool (*breakpoint_check)(void* db, void* cpu, const void* bp);
  void (*translate_insn)(void* db, void* cpu);
  void (*tb_stop)(void* db, void* cpu);
};
// Unicorn 2.0.1's struct hook (include/uc_priv.h), which a uc_hook handle
// points to: type, insn, refs, op, op_flags (ints), to_delete, begin, end,
// callback, user_data.  A hook with to_delete set is not compiled into new
// translations (HOOK_BOUND_CHECK); TcgCpu checks the layout on its own code
// hook before it uses to_delete.
struct HookPrefix {
  int type, insn, refs, op, op_flags;
  bool to_delete;
  uint64_t begin, end;
  void* callback;
  void* user_data;
};
static_assert(offsetof(HookPrefix, to_delete) == 20);
static_assert(offsetof(HookPrefix, begin) == 24);
static_assert(offsetof(HookPrefix, callback) == 40);

struct DisasContextBasePrefix {
  void* tb;
  uint64_t pc_first;
  uint64_t pc_next;
  int32_t is_jmp;  // DisasJumpType: DISAS_NEXT 0, DISAS_TOO_MANY 1
};
inline constexpr int32_t kDisasNext = 0, kDisasTooMany = 1;
// TranslationBlock.flags (after pc and cs_base; kTbSize follows it): the
// CPU state the block was made for, with EFLAGS.RF at bit 16 (HF_RF_MASK).
inline constexpr size_t kTbFlags = 16;
inline constexpr uint32_t kTbFlagRf = 1u << 16;

}  // namespace vbts::vcpu::uabi

// QEMU internals exported by libunicorn.so.2.
extern "C" {
void x86_update_hflags_x86_64(void* env);
// The translation block whose translated code holds host address `tc_ptr`.
void* tcg_tb_lookup_x86_64(void* tcg_ctx, uintptr_t tc_ptr);
// Sets EIP (and the lazy flags' operation) to the guest instruction whose
// translated code holds host address `host_pc`.
bool cpu_restore_state_x86_64(void* cpu, uintptr_t host_pc, bool will_exit);
void cpu_x86_update_cr4_x86_64(void* env, uint32_t cr4);
void tlb_flush_x86_64(void* cpu);
// Clears TLB_NOTDIRTY from the write entries of linear page `vaddr` (every
// MMU index and the victim TLB) that carry exactly that flag.
void tlb_set_dirty_x86_64(void* cpu, uint64_t vaddr);
// Sets TLB_NOTDIRTY on every plain RAM write entry whose host address lies in
// [host_start, host_start + length).
void tlb_reset_dirty_x86_64(void* cpu, uint64_t host_start, uint64_t length);
void tb_invalidate_phys_range_x86_64(void* uc, uint64_t start, uint64_t end);
void x86_cpu_do_interrupt_x86_64(void* cpu);
void do_interrupt_x86_hardirq_x86_64(void* env, int intno, int is_hw);
int x86_cpu_pending_interrupt_x86_64(void* cpu, int interrupt_request);
void cpu_exit(void* cpu);
// TCG code generation (tcg/tcg.c, tcg/tcg-op.c of QEMU 5.0): a constant in a
// new temporary (TCGv_i32/TCGv_i64: its TCGTemp's offset from the context),
// a temporary freed, and Unicorn's direct call of a hook's callback from the
// translated code (args: TCGTemp pointers of uc, pc, size, user_data).
void* tcg_const_i32_x86_64(void* tcg_ctx, int32_t value);
void* tcg_const_i64_x86_64(void* tcg_ctx, int64_t value);
void tcg_temp_free_internal_x86_64(void* tcg_ctx, void* temp);
void uc_add_inline_hook_x86_64(void* uc, void* hook, void** args, int n_args);
[[noreturn]] void cpu_loop_exit_x86_64(void* cpu);
// QEMU's restart of the current instruction from a new block (vbts defines
// it around libunicorn's: TcgCallbacks::Restarted).
[[noreturn]] void cpu_loop_exit_noexc_x86_64(void* cpu);
// Sets EIP (and CC_OP) to the guest instruction whose translated code
// contains host address `host_pc` (a helper's return address).
bool cpu_restore_state_x86_64(void* cpu, uintptr_t host_pc, bool will_exit);
// QEMU's instruction fetch for the translator (vbts interposes it).
uint32_t cpu_ldub_code_x86_64(void* env, uint64_t addr);
[[noreturn]] void raise_exception_err_ra_x86_64(void* env, int exception_index, int error_code, uintptr_t retaddr);
// QEMU's own breakpoints (cpu->breakpoints): the translator ends a block
// before an instruction at `pc` with a debug exit (EXCP_DEBUG), which
// reaches the CPU class's debug_excp_handler (breakpoint_handler, which vbts
// defines around libunicorn's). Each insert or remove empties the whole code
// buffer (tb_flush, which vbts also defines).
int cpu_breakpoint_insert_x86_64(void* cpu, uint64_t pc, int flags, void** breakpoint);
int cpu_breakpoint_remove_x86_64(void* cpu, uint64_t pc, int flags);
}

namespace vbts::vcpu::uabi {
inline constexpr int kBpGdb = 0x10;  // QEMU's BP_GDB (include/hw/core/cpu.h)
inline constexpr int kBpCpu = 0x20;  // QEMU's BP_CPU: left out of blocks made with RF set
}

#endif  // VBTS_VCPU_UNICORN_ABI_H_
