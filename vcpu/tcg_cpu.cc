// tcg_cpu.cc: the TCG engine on libunicorn 2.0.1 (see tcg_cpu.h and
// unicorn_abi.h for what it relies on beyond the public API).
#include "vcpu/tcg_cpu.h"

#include "vcpu/control_regs.h"

#include <dlfcn.h>
#include <unicorn/unicorn.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstring>
#include <iterator>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/bits.h"
#include "base/status_macros.h"
#include "pmu/paging.h"
#include "pmu/phys_memory.h"
#include "vcpu/data_breakpoints.h"
#include "vcpu/decoder.h"
#include "vcpu/unicorn_abi.h"

namespace vbts::vcpu {
namespace {

// The engine running guest code on this thread (the helpers below are
// called by QEMU with only its CPU state in hand).
thread_local TcgCpu* t_running = nullptr;
// While QEMU translates the instruction at this linear address, its first
// two bytes read as UD2 (TcgCallbacks::TranslateInsn).
constexpr uint64_t kNoSubstitute = ~0ull;
thread_local uint64_t t_substitute_at = kNoSubstitute;
// Set while QEMU translates a legacy SSE instruction whose m128 operand must
// be 16-byte aligned: the first 64-bit guest load or store it generates
// carries QEMU's MO_ALIGN_16 (tcg_gen_qemu_ld_i64/st_i64 below).
thread_local bool t_align16 = false;
// QEMU 5.0's MemOp alignment field (include/exec/memop.h): MO_AMASK, MO_ALIGN_16.
constexpr int kMoAmask = 7 << 4, kMoAlign16 = 4 << 4;
// QEMU's x86 translate_insn (i386_tr_translate_insn), which vbts's wraps.
void (*t_translate_insn)(void*, void*) = nullptr;
// The return address in translated code of the QEMU helper running now for
// a device access (port I/O, or a load or store through QEMU's slow path,
// which every MMIO access takes); 0 outside one. In a block run with one
// hook, the device's time needs the instruction there (TcgCpu::SettleForDevice).
// A helper left by longjmp (a fault, QEMU's restart after a store into its
// own block) does not clear it: the exception hook, the restart and the
// translator do (TcgCallbacks::ForgetAccess), so that no device access outside
// such a helper (a page walk through a device, a frame pushed there) finds
// an old one.
thread_local uintptr_t t_access_ra = 0;
// Likewise the return address a QEMU helper passed for a guest access it
// makes itself (FXSAVE's stores, a far CALL's pushes: cpu_*_mmuidx_ra), for
// TcgCallbacks::RunAloneUnlessSeen only.
thread_local uintptr_t t_helper_ra = 0;
// While vbts's wrapper of a QEMU helper runs the original not as a tail call
// (IRET and far RET: TcgCallbacks::KeepFsGsBases), the return address in the
// translated code of the wrapper's call: the helper's own GETPC points into
// the wrapper, where QEMU cannot place the instruction; t_helper_ra takes
// this one instead (its guest accesses' instruction is the IRET or RET).
thread_local uintptr_t t_wrapper_ra = 0;
// The return address a helper's guest access is placed by (t_helper_ra).
uintptr_t HelperRa(uintptr_t ra) { return t_wrapper_ra != 0 ? t_wrapper_ra : ra; }
// The access the running load or store helper makes, as the instruction (or
// QEMU's helper) asked for it: QEMU splits an unaligned one into aligned
// parts before its watchpoint check (cpu_check_watchpoint).
thread_local uint64_t t_access_addr = 0;
thread_local uint32_t t_access_size = 0;
// The CS selector of the task QEMU is switching to (TcgCpu::ArmTaskSwitch),
// -1 outside a task switch: its descriptor's upper word is looked at once.
thread_local int32_t t_task_cs = -1;
// The return address of the last call of QEMU's helper_lookup_tb_ptr (the
// search for a branch's target block) on this thread: inside the translated
// block the branch ends (TcgCpu::LastLookupBlock).
thread_local uintptr_t t_lookup_ra = 0;
// libunicorn's helper_lookup_tb_ptr (TcgCpu::Create resolves it).
void* (*g_lookup_tb_ptr)(void*) = nullptr;
// Whether QEMU's TranslationBlock has pc and size where uabi::kTbPc and
// uabi::kTbSize say: 0 not seen yet, 1 checked on a translation, -1 not.
std::atomic<int> g_tb_layout{0};
// CLOCK_MONOTONIC through steady_clock, in ns: the watcher's deadlines.
uint64_t SteadyNowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
// Whether a hook handle shows the layout unicorn_abi.h pins: a catch-all
// hook of `type` to `callback` with `user` (checked when vbts adds one whose
// to_delete flag it will use).
bool CatchAllHookAsPinned(size_t handle, int type, void* callback, const void* user) {
  const auto* hook = reinterpret_cast<const uabi::HookPrefix*>(handle);
  return hook->type == type && !hook->to_delete && hook->begin == 1 && hook->end == 0 && hook->callback == callback &&
         hook->user_data == user;
}
// Every flush of QEMU's TLB (by any TcgCpu) counts here.
std::atomic<uint64_t> g_paging_generation{0};
// Host nanoseconds spent translating guest code (translator_loop) and
// invalidating or emptying translations (hooks added or removed, FlushCode,
// ReclaimCode), which the guest clock leaves out of host time
// (TcgCpu::TranslationNs).
std::atomic<uint64_t> g_translation_ns{0};
// The host time of one piece of that work, added at its end; nested pieces
// (a flush inside a hook's removal) count once, in the outermost.
class CodeWorkTimer {
 public:
  CodeWorkTimer() {
    if (depth_++ == 0) clock_gettime(CLOCK_MONOTONIC, &t0_);
  }
  ~CodeWorkTimer() {
    if (--depth_ != 0) return;
    timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const int64_t ns = (t1.tv_sec - t0_.tv_sec) * 1'000'000'000 + (t1.tv_nsec - t0_.tv_nsec);
    if (ns > 0) g_translation_ns.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
  }
  CodeWorkTimer(const CodeWorkTimer&) = delete;
  CodeWorkTimer& operator=(const CodeWorkTimer&) = delete;

 private:
  static thread_local int depth_;
  timespec t0_{};
};
thread_local int CodeWorkTimer::depth_ = 0;
// Changes whenever bytes QEMU translated may have changed or new code was
// translated (TcgCpu::CodeBytesGeneration).
std::atomic<uint64_t> g_code_bytes_generation{0};

// Every live engine, for the callbacks QEMU makes with only its CPU in hand.
std::mutex g_engines_mu;
std::vector<TcgCpu*>& Engines() {
  static auto* engines = new std::vector<TcgCpu*>;
  return *engines;
}

template <typename T>
T& At(void* base, size_t offset) {
  return *reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

absl::Status UcError(uc_err e, const char* what) {
  return absl::InternalError(absl::StrFormat("TCG engine: %s: %s", what, uc_strerror(e)));
}

uint32_t ToFlags(const Segment& s) {
  return (uint32_t{s.type} << 8) | (uint32_t{s.s} << 12) | (uint32_t{s.dpl} << 13) |
         (uint32_t{s.present} << 15) | (uint32_t{s.avl} << 20) | (uint32_t{s.l} << 21) |
         (uint32_t{s.db} << 22) | (uint32_t{s.g} << 23);
}

uabi::SegCache ToCache(const Segment& s) {
  return uabi::SegCache{s.selector, s.base, s.limit, ToFlags(s)};
}

void FromCacheInto(const uabi::SegCache& c, Segment& s) {
  s.selector = static_cast<uint16_t>(c.selector);
  s.base = c.base;
  s.limit = c.limit;
  s.type = (c.flags >> 8) & 15;
  s.s = (c.flags >> 12) & 1;
  s.dpl = (c.flags >> 13) & 3;
  s.present = (c.flags >> 15) & 1;
  s.avl = (c.flags >> 20) & 1;
  s.l = (c.flags >> 21) & 1;
  s.db = (c.flags >> 22) & 1;
  s.g = (c.flags >> 23) & 1;
  // QEMU keeps no "unusable" bit: a null selector leaves P clear (as
  // QEMU's own KVM code maps it).
  s.unusable = !s.present;
}

Segment FromCache(const uabi::SegCache& c) {
  Segment s;
  FromCacheInto(c, s);
  return s;
}

// Unicorn's region check by linear address, pointed at guest RAM (which
// starts at physical 0): the access itself then goes through QEMU's page
// walk to its physical address (unicorn_abi.h).
uint64_t RedirectToRam(uint64_t) { return 0; }

// The MSRs Unicorn's QEMU keeps as CPU state (helper_rdmsr/helper_wrmsr).
constexpr uint32_t kMsrTsc = 0x10, kMsrSysenterCs = 0x174, kMsrSysenterEsp = 0x175,
                   kMsrSysenterEip = 0x176, kMsrPat = 0x277, kMsrEfer = 0xC0000080,
                   kMsrStar = 0xC0000081, kMsrLstar = 0xC0000082, kMsrCstar = 0xC0000083,
                   kMsrFmask = 0xC0000084, kMsrFsBase = 0xC0000100, kMsrGsBase = 0xC0000101,
                   kMsrKernelGsBase = 0xC0000102, kMsrTscAux = 0xC0000103;

// Guest RAM as the page walker (pmu/paging.h) reads it.
class RamView : public PhysMemory {
 public:
  RamView(uint8_t* ram, uint64_t size) : ram_(ram), size_(size) {}
  uint64_t size() const override { return size_; }
  absl::Status Read(Gpa gpa, absl::Span<uint8_t> out) const override {
    if (gpa.value > size_ || out.size() > size_ - gpa.value) return absl::OutOfRangeError("outside RAM");
    std::memcpy(out.data(), ram_ + gpa.value, out.size());
    return absl::OkStatus();
  }
  absl::Status Write(Gpa gpa, absl::Span<const uint8_t> data) override {
    return absl::PermissionDeniedError("the TCG engine's walker only reads");
  }

 private:
  uint8_t* ram_;
  uint64_t size_;
};

// Guest-physical memory as QEMU's own page walk reads it, for the walk vbts
// repeats (TcgCallbacks::PhysicalPage): RAM; from the end of RAM to 4 GiB the
// MMIO region, i.e. the machine's devices (where nothing is mapped a read
// returns all ones, as on an empty PC bus); above 4 GiB nothing (Unicorn's
// unassigned memory reads 0).  Both walks then read the same entries and
// reach the same physical page, also when the guest's page tables (or CR3)
// point outside RAM (guest-tests/tiny/hostile_paging.asm).  Read-only.
class WalkView : public PhysMemory {
 public:
  WalkView(uint8_t* ram, uint64_t size, TcgDevices* devices) : ram_(ram), size_(size), devices_(devices) {}
  uint64_t size() const override { return size_; }
  absl::Status Read(Gpa gpa, absl::Span<uint8_t> out) const override {
    constexpr uint64_t k4G = 1ull << 32;
    uint64_t at = gpa.value;
    size_t done = 0;
    while (done < out.size()) {
      const uint64_t left = out.size() - done;
      uint64_t n;
      if (at < size_) {
        n = std::min<uint64_t>(left, size_ - at);
        std::memcpy(out.data() + done, ram_ + at, n);
      } else if (at < k4G) {
        // The walker reads aligned 4- and 8-byte entries: one device access each.
        n = std::min<uint64_t>({left, 8, k4G - at});
        const uint64_t v = devices_->MmioRead(at, static_cast<int>(n));
        std::memcpy(out.data() + done, &v, n);
      } else {
        n = left;
        std::memset(out.data() + done, 0, n);
      }
      done += n;
      at += n;
    }
    return absl::OkStatus();
  }
  absl::Status Write(Gpa gpa, absl::Span<const uint8_t> data) override {
    return absl::PermissionDeniedError("the TCG engine's walker only reads");
  }

 private:
  uint8_t* ram_;
  uint64_t size_;
  TcgDevices* devices_;
};

// Where QEMU's walk ended when it passed a linear page to its TLB; Unicorn
// 2.0.1 replaces it with the linear address ("identity map guest virtual
// address"), so vbts walks again, through the same memory (WalkView).
// QEMU's walk already checked access rights and set the A/D flags: this one
// only translates (supervisor read with SMEP and SMAP off, no A/D updates).
// An unassigned physical page if the two walks disagree all the same (a
// paging mode vbts's walker refuses: 5-level).
constexpr uint64_t kUnassigned = 1ull << 51;

// A legacy prefix, or REX in 64-bit code (SDM vol. 2A 2.1.1, 2.2.1).
bool IsPrefix(uint8_t b, bool code64) {
  return b == 0x66 || b == 0x67 || b == 0xF2 || b == 0xF3 || b == 0x2E || b == 0x36 || b == 0x3E || b == 0x26 ||
         b == 0x64 || b == 0x65 || b == 0xF0 || (code64 && (b & 0xF0) == 0x40);
}
// QEMU's hflags bit HF_CS64: the code segment is 64-bit.
constexpr uint32_t kHfCs64 = 1u << 15;
// ... HF_SS32: SS is a 32-bit stack segment (its B flag).
constexpr uint32_t kHfSs32 = 1u << 5;
// ... HF_CS32: the code segment's default operand and address size is 32 bits.
constexpr uint32_t kHfCs32 = 1u << 4;
// QEMU's hflags that skipping past a block boundary keeps (TcgCpu::
// SkipSequential): CPL (bits 0-1), CS32 (4), PE (7), TF (8), LMA (14), CS64
// (15), VM (17).  With the CS selector they fix the code's privilege and mode.
constexpr uint32_t kSkipHflags = 0x3 | (1u << 4) | (1u << 7) | (1u << 8) | (1u << 14) | (1u << 15) | (1u << 17);
// QEMU keeps TF and VM in EFLAGS, not in hflags (cpu_get_tb_cpu_state adds
// them to a translation's flags from there; the same bit positions): the
// flags that skipping keeps, as a translation sees them.  (hflags alone
// missed a POPF that set TF while blocks were skipped.)
inline uint32_t SkipFlags(const uabi::EnvPrefix* env) {
  return static_cast<uint32_t>((env->hflags | (env->eflags & ((1u << 8) | (1u << 17)))) & kSkipHflags);
}

using HelperFn = void (*)(void*);
using HltFn = void (*)(void*, int);
using ResetFn = void (*)(void*);

template <typename Fn>
Fn Original(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

// libunicorn's own cpu_loop_exit_noexc (vbts defines the symbol around it:
// cpu_loop_exit_noexc_x86_64 below): no exception, back to QEMU's loop.
[[noreturn]] void QemuLoopExitNoexc(void* cpu) {
  static const auto original = Original<void (*)(void*)>("cpu_loop_exit_noexc_x86_64");
  original(cpu);
  __builtin_unreachable();
}

}  // namespace

// Unicorn's callbacks, with access to the engine's insides.
struct TcgCallbacks {
  // The block being translated with one hook (BeginTranslation), and the
  // code hook hidden from the translator while it translates an instruction.
  static inline thread_local TcgCpu::HooklessTb* t_translating_tb = nullptr;
  static inline thread_local uabi::HookPrefix* t_translating_hook = nullptr;
  static inline thread_local uabi::HookPrefix* t_hidden_hook = nullptr;
  // A block made for one call a block: the code hook is hidden at every
  // instruction, and the block hook for the whole translation.
  static inline thread_local bool t_hide_every = false;
  static inline thread_local uabi::HookPrefix* t_hidden_block_hook = nullptr;
  static void Intr(uc_engine* uc, uint32_t intno, void* user) {
    auto* self = static_cast<TcgCpu*>(user);
    RestoreHiddenHook();  // (a fault while translating left QEMU's translator by longjmp)
    ForgetAccess();       // (... or a helper's)
    // Unicorn reports every exception and INT n here and delivers none;
    // QEMU's own delivery (x86_cpu_do_interrupt) uses the exception number,
    // error code and next EIP QEMU recorded when it raised it.  A fault
    // while that delivery runs comes back here (QEMU longjmps out of it).
    self->stats_.exceptions++;
    uabi::EnvPrefix* env = self->env_;
    const bool soft = At<int32_t>(env, self->error_code_offset_ + 4) != 0;
    if (self->delivering_ >= 0) {
      // A fault while delivering `delivering_`.  For an INT n, Unicorn has
      // already moved EIP past the instruction, but the fault belongs to the
      // INT itself (SDM vol. 3A 6.12.1: "the processor ... generates a #GP
      // ... with the saved EIP pointing to the INT n").
      if (self->delivering_soft_) env->eip = self->soft_start_;
      // QEMU's IA-32e delivery reports an IDT entry as vector*16+2 (16-byte
      // gates); the architectural error code is the vector in the selector
      // index field, vector*8 + IDT(2) + EXT(1) (SDM vol. 3A 6.13).
      int32_t& ec = At<int32_t>(env, self->error_code_offset_);
      if ((env->efer & kEferLma) && (ec & ~1) == self->delivering_ * 16 + 2) ec = self->delivering_ * 8 + (ec & 3);
    }
    // An instruction QEMU 5.0 would have translated wrongly inline, which
    // the translator saw as UD2 (TcgCallbacks::TranslateInsn): vbts runs it.
    if (intno == 6 && !soft && self->delivering_ < 0 && self->CompleteSubstituted()) return;
    if (intno == 13 && !soft && self->delivering_ < 0 && At<int32_t>(env, self->error_code_offset_) == 0) {
      // A near JMP, CALL or RET to a non-canonical address: hardware faults
      // at the branch (SDM vol. 2A JMP/CALL/RET: #GP(0) "if the target
      // offset is non-canonical"), QEMU 5.0 at the fetch of the target.
      self->FaultAtTheBranch();
      // QEMU 5.0 raises #GP(0) for every non-canonical data address; one
      // through SS (RSP/RBP-based, or an SS override) is #SS(0) (SDM vol. 3A
      // 6.15, "Interrupt 12"; kvm-unit-tests emulator64).
      if (self->NonCanonicalStackAccess()) {
        self->DeliverInstead(12, /*fault=*/true);  // with error code 0
        self->stats_.stack_faults++;
        return;
      }
    }
    // ICEBP (INT1, F1): QEMU 5.0 decodes it as invalid (#UD); it delivers
    // #DB as a trap, with no gate DPL check (SDM vol. 2 "INT n/INTO/INT3/
    // INT1": INT1 is not a software interrupt).
    bool icebp = false;
    uint64_t icebp_length = 0;
    if (intno == 6 && !soft) {
      // Prefixes are allowed (kvm-unit-tests' debug.flat runs `cs cs int1`).
      const uint64_t at = env->segs[uabi::kCs].base + env->eip;
      const uint64_t prefixes = self->PrefixBytes(at);
      uint8_t byte = 0;
      icebp = self->ReadCode(at + prefixes, byte) && byte == 0xF1;
      icebp_length = prefixes + 1;
    }
    if (self->delivering_ < 0) self->AnnounceEvent(soft ? std::optional<uint64_t>(env->segs[uabi::kCs].base + self->soft_start_)
                                                      : std::nullopt);
    self->delivering_ = icebp ? 1 : static_cast<int>(intno);
    self->delivering_soft_ = soft;
    if (icebp) {
      self->stats_.icebp++;
      env->eip += icebp_length;
      self->ArmTaskGate(1);
      do_interrupt_x86_hardirq_x86_64(env, 1, /*is_hw=*/0);
    } else {
      // A fault's frame holds EFLAGS with RF set, so that the IRET back to
      // the faulting instruction does not take an instruction breakpoint
      // there again (SDM vol. 3A 17.3.1.1: RF is set in the saved EFLAGS of
      // every fault but an instruction-breakpoint #DB; kvm-unit-tests
      // idt_test checks #UD and #GP).  QEMU 5.0 pushes it clear; its delivery
      // clears RF afterwards.
      constexpr uint32_t kFaults = (1u << 0) | (1u << 5) | (1u << 6) | (1u << 7) | (1u << 10) | (1u << 11) |
                                   (1u << 12) | (1u << 13) | (1u << 14) | (1u << 16) | (1u << 17) | (1u << 19) |
                                   (1u << 20) | (1u << 21);
      if (!soft && intno < 32 && ((kFaults >> intno) & 1)) env->eflags |= kRflagsRf;
      self->ArmTaskGate(static_cast<int>(intno));
      x86_cpu_do_interrupt_x86_64(self->cpu_);
    }
    self->delivering_ = -1;
  }
  static uint32_t In(uc_engine*, uint32_t port, int size, void* user) {
    auto* self = static_cast<TcgCpu*>(user);
    SettleForDevice(self);
    self->stats_.port_io++;
    return self->config_.devices->PortIn(static_cast<uint16_t>(port), size);
  }
  static void Out(uc_engine*, uint32_t port, int size, uint32_t value, void* user) {
    auto* self = static_cast<TcgCpu*>(user);
    SettleForDevice(self);
    self->stats_.port_io++;
    self->config_.devices->PortOut(static_cast<uint16_t>(port), size, value);
  }
  static int Cpuid(uc_engine*, void* user) {
    auto* self = static_cast<TcgCpu*>(user);
    self->stats_.cpuid++;
    uint64_t* r = self->env_->regs;
    CpuidResult c = self->config_.devices->Cpuid(static_cast<uint32_t>(r[kRax]), static_cast<uint32_t>(r[kRcx]));
    r[kRax] = c.eax;
    r[kRbx] = c.ebx;
    r[kRcx] = c.ecx;
    r[kRdx] = c.edx;
    return 1;  // skip QEMU's CPUID
  }
  static uint64_t MmioRead(uc_engine*, uint64_t offset, unsigned size, void* user) {
    auto* self = static_cast<TcgCpu*>(user);
    SettleForDevice(self);
    self->stats_.mmio++;
    return self->config_.devices->MmioRead(self->mmio_base() + offset, static_cast<int>(size));
  }
  static void MmioWrite(uc_engine*, uint64_t offset, unsigned size, uint64_t value, void* user) {
    auto* self = static_cast<TcgCpu*>(user);
    SettleForDevice(self);
    self->stats_.mmio++;
    self->config_.devices->MmioWrite(self->mmio_base() + offset, static_cast<int>(size), value);
    self->mmio_written_ = true;  // the store helper looks at the machine afterwards (AfterStore)
  }
  // A watched access (a debugger's watchpoint, the guest's data breakpoint)
  // asks for the boundary right after its instruction. Returns when that
  // boundary will be seen: a code hook runs before every instruction, or
  // this is the instruction's run alone (below), or it cannot be had (an
  // event delivery's frame, or an access whose instruction QEMU cannot
  // find: no return address; the stop then comes at the block's end).
  // Otherwise the instruction is abandoned at this access, as at a fault
  // there (what it stored before is stored again), and QEMU runs it again
  // alone in a block of its own (cflags_next_tb = 1, as QEMU's own
  // watchpoints and its precise self-modifying-code path do), where the
  // access is reported and the next instruction starts a block. So no code
  // hook is needed between hits (docs/tcg-engine.md, "Watched accesses").
  //
  // While the data-access hook is set (LLC events), the accesses the
  // instruction made before, which the hook has counted, are not reported
  // again in its run alone. `why`: a watched access (kWatched); one the
  // hook counted that made a PMI due (kDue: the run ends after the
  // instruction); a load the hook did not take, which the load-latency
  // event needs at its own instruction (kLatency: this access is not among
  // those reported before).
  enum class Rerun : uint8_t { kWatched, kDue, kLatency };
  // The block running is the one that runs an instruction alone.
  static bool InAloneBlock(const TcgCpu* self) {
    return self->blocks_in_run_ == self->alone_block_ && self->current_block_.start == self->alone_at_;
  }
  static void RunAloneUnlessSeen(TcgCpu* self, Rerun why = Rerun::kWatched) {
    const bool due = why == Rerun::kDue;
    if (self->delivering_ >= 0) return;
    uabi::EnvPrefix* env = self->env_;
    if (self->CodeHookActive() && !(env->hflags & uabi::kHfHookless)) return;
    if (InAloneBlock(self)) return;
    const uintptr_t ra = t_access_ra != 0 ? t_access_ra : t_helper_ra;
    if (ra == 0 || !cpu_restore_state_x86_64(self->cpu_, ra, /*will_exit=*/true)) {
      self->stats_.access_stops_at_block_end++;
      return;
    }
    const uint64_t at = env->segs[uabi::kCs].base + env->eip;
    uint64_t reported = 0;
    if (self->data_access_hook_) {
      const std::optional<uint64_t> n = self->ReportedByInstruction(at);
      if (!n) {  // (EIP is the instruction's now, as after SettleForDevice)
        self->stats_.access_stops_at_block_end++;
        return;
      }
      reported = *n;
    }
    self->alone_at_ = at;
    self->alone_block_ = ~0ull;  // the next block to start (Block), in this run or the next (Run)
    self->alone_pending_ = true;
    self->alone_skip_ = reported;
    self->alone_skip_started_ = false;
    self->alone_due_ = due;
    At<uint32_t>(self->cpu_, uabi::kCpuCflagsNextTb) = 1;
    if (why == Rerun::kLatency) {
      self->stats_.latency_reruns++;
    } else {
      self->stats_.access_reruns++;
      if (due) self->stats_.due_reruns++;
    }
    cpu_loop_exit_noexc_x86_64(self->cpu_);  // (vbts's: TcgCallbacks::Restarted settles the block)
  }
  // QEMU's watch flags for the TLB entries of the page at `addr`
  // (cpu_watchpoint_address_matches, at each TLB fill): BP_MEM_READ (1) and
  // BP_MEM_WRITE (2) where a debugger's watched range overlaps it. Only
  // accesses to such a page leave QEMU's fast path, and QEMU checks each of
  // them (cpu_check_watchpoint: DebugWatchCheck).
  static int WatchedPage(const TcgCpu* self, uint64_t addr, uint64_t len) {
    int flags = 0;
    for (const TcgCpu::DebugWatch& w : self->debug_watches_) {
      const uint64_t wlen = w.len ? w.len : 1;
      if (addr + len <= w.addr || addr >= w.addr + wlen) continue;
      flags |= (w.read ? 1 : 0) | (w.write ? 2 : 0);
    }
    // The guest's data breakpoints as last synced (SyncGuestWatches): the
    // kinds of access of the page any of them would match (Matches: R/W 01
    // writes, 11 reads and writes, SDM vol. 3B 17.2.5).
    const std::array<uint64_t, 5>& r = self->guest_watch_regs_;
    if (r[4] != 0) {
      GuestBreakpoints bp;
      for (int i = 0; i < 4; i++) bp.dr[i] = r[i];
      bp.dr7 = r[4];
      const auto size = static_cast<uint32_t>(len);
      if (DataBreakpointHits(bp, {{addr, size, /*read=*/true, /*write=*/false}})) flags |= 1;
      if (DataBreakpointHits(bp, {{addr, size, /*read=*/false, /*write=*/true}})) flags |= 2;
    }
    return flags;
  }
  // QEMU's check of an access to a watched page (cpu_check_watchpoint), of
  // [addr, addr + len): the access as the instruction or QEMU's helper made
  // it (t_access_addr/size), because QEMU checks an unaligned load as its
  // aligned parts, which may reach bytes it does not touch.
  static void WatchCheck(TcgCpu* self, uint64_t addr, uint64_t len, bool write, uintptr_t ra) {
    const uint64_t address = t_access_size != 0 ? t_access_addr : addr;
    const uint64_t size = t_access_size != 0 ? t_access_size : len;
    DebugWatchCheck(self, address, size, write, ra);
    GuestWatchCheck(self, address, size, write, ra);
  }
  // RunAloneUnlessSeen for a watched access. (An access no helper of
  // vbts's saw, such as QEMU's probe of a range a helper is about to write,
  // is placed by the return address QEMU passes.)
  static void RunWatchedAloneUnlessSeen(TcgCpu* self, uintptr_t ra) {
    const bool own_ra = t_access_ra == 0 && t_helper_ra == 0;
    if (own_ra) t_access_ra = ra;
    RunAloneUnlessSeen(self);
    if (own_ra) t_access_ra = 0;
  }
  // An access (WatchCheck) that hits a debugger's watched range ends the
  // run after its instruction (TcgCpu::DebugCheck or the block start after
  // it).
  static void DebugWatchCheck(TcgCpu* self, uint64_t address, uint64_t size, bool write, uintptr_t ra) {
    for (const TcgCpu::DebugWatch& w : self->debug_watches_) {
      if (!(write ? w.write : w.read)) continue;
      const uint64_t wlen = w.len ? w.len : 1;
      if (address + size <= w.addr || address >= w.addr + wlen) continue;
      RunWatchedAloneUnlessSeen(self, ra);
      if (self->debug_stop_.kind != TcgCpu::DebugStop::kWatch)
        self->debug_stop_ = TcgCpu::DebugStop{TcgCpu::DebugStop::kWatch, std::max(address, w.addr), write};
      self->RequestStop();
      return;
    }
  }
  // An access (WatchCheck) to a page one of the guest's enabled data
  // breakpoints overlaps: DR6.Bi for each breakpoint it matches exactly.
  static void GuestWatchCheck(TcgCpu* self, uint64_t address, uint64_t size, bool write, uintptr_t ra) {
    // Not the frames and table reads of an event delivery, as the KVM
    // engine's tracer, which lists each instruction's own operands, sees it.
    if (!self->guest_data_hit_hook_ || self->delivering_ >= 0) return;
    const uint32_t hits = DataBreakpointHits(
        self->GuestDebugRegs(), {{address, static_cast<uint32_t>(size), /*read=*/!write, write}});
    if (!hits) return;
    RunWatchedAloneUnlessSeen(self, ra);
    self->stats_.guest_data_hits += static_cast<uint64_t>(std::popcount(hits));
    self->guest_data_hit_hook_(hits);
  }
  // Any data access while a data-access hook is set (SetDataAccessHook).
  static void DataAccess(uc_engine*, uc_mem_type type, uint64_t address, int size, int64_t, void* user) {
    auto* self = static_cast<TcgCpu*>(user);
    // Not the frames and table reads of an event delivery: the KVM engine's
    // tracer, which lists each instruction's own operands, does not see them.
    if (!self->data_access_hook_ || size <= 0 || self->delivering_ >= 0) return;
    const uabi::EnvPrefix* env = self->env_;
    const bool write = type == UC_MEM_WRITE;
    uint64_t pa = address;
    if ((env->cr[0] & kCr0Pg) && !self->CachedTranslation(address, write, pa)) return;
    if (pa >= self->config_.ram_bytes) return;  // MMIO, nothing: not cached
    if (self->alone_skip_ > 0 && self->blocks_in_run_ == self->alone_block_) {
      // The instruction run again alone reported this access before it
      // was abandoned (RunAloneUnlessSeen).
      self->stats_.accesses_not_reported_again++;
      self->alone_skip_started_ = true;
      if (--self->alone_skip_ == 0 && self->alone_due_) self->RequestStop();
      return;
    }
    const auto cpl = static_cast<uint8_t>(env->hflags & uabi::kHfCplMask);
    // Whose access (TcgCpu::AccessOwner): an instruction that may be
    // counted in bulk, unless it runs alone (RunAloneUnlessSeen's block)
    // or the code hook reports the next boundary (no skip left).
    const bool hookless = (env->hflags & uabi::kHfHookless) != 0;
    const bool in_bulk = self->skipping_ && (hookless ? !InAloneBlock(self) : self->skipped_ < self->skip_limit_);
    TcgCpu::AccessOwner owner = in_bulk ? TcgCpu::AccessOwner::kInBulk : TcgCpu::AccessOwner::kObserved;
    TcgCpu::AccessVerdict v = self->data_access_hook_(pa, static_cast<uint32_t>(size), cpl, write, owner);
    if (v.needs_instruction) {
      // Not taken: the load counts for its own instruction (load latency).
      if (hookless) {
        RunAloneUnlessSeen(self, Rerun::kLatency);  // (returns only where QEMU cannot place the access)
        owner = TcgCpu::AccessOwner::kCountNow;
        self->stats_.latency_counted_at_access++;
      } else {
        owner = TcgCpu::AccessOwner::kObserved;
        self->unskip_next_ = true;
        self->stats_.latency_unskips++;
      }
      v = self->data_access_hook_(pa, static_cast<uint32_t>(size), cpl, write, owner);
    }
    self->reported_[self->reported_n_++ & (TcgCpu::kReportedRing - 1)] = {
        t_access_ra != 0 ? t_access_ra : t_helper_ra, self->blocks_in_run_};
    if (v.due) {
      // Due at the boundary after this instruction: inside a block run
      // with one hook it runs again alone; otherwise the next reported
      // boundary (the code hook's, or this alone block's end) ends the run.
      RunAloneUnlessSeen(self, Rerun::kDue);
      self->RequestStop();
    }
  }
  // QEMU's debug exit at an address of the guest's instruction breakpoints
  // (BP_CPU, SyncGuestExecHooks): a #DB fault before the instruction
  // (CheckInstructionBreakpoints raises it), or, where none is due (RF and
  // the MOV SS shadow suppress it, or the address's breakpoint is off), the
  // instruction runs: with RF set, its block is made without the breakpoint
  // and ends after it, where QEMU clears RF. Either way QEMU's loop goes on
  // from here (a longjmp, as QEMU's own breakpoint handler raises #DB).
  static bool GuestExecExit(TcgCpu* self, uint64_t linear) {
    if (!std::binary_search(self->guest_exec_addrs_.begin(), self->guest_exec_addrs_.end(), linear)) return false;
    self->CheckInstructionBreakpoints(linear);
    self->stats_.guest_exec_passes++;
    self->env_->eflags |= kRflagsRf;
    // (QEMU's own exit, not vbts's, which settles a block run with one hook:
    // none has started here.)
    QemuLoopExitNoexc(self->cpu_);
  }
  // A debugger's breakpoint (a code hook bounded to its address): before
  // the instruction, unless the catch-all code hook checks it (DebugCheck)
  // or the run resumes here (its first block starts at the resume address).
  static void DebugBreakpoint(uc_engine*, uint64_t address, uint32_t, void* user) {
    auto* self = static_cast<TcgCpu*>(user);
    if (self->CodeHookActive()) return;
    if (address == self->debug_resume_ && self->blocks_in_run_ <= 1) return;
    self->env_->eip = address - self->env_->segs[uabi::kCs].base;
    self->DebugBoundary(TcgCpu::DebugStop::kBreakpoint, address);
  }
  // Most calls while skipping: an instruction in the middle of a block,
  // skipped as CodeBoundary would skip it, without its frame.
  static void Code(uc_engine* uc, uint64_t address, uint32_t size, void* user) {
    auto* self = static_cast<TcgCpu*>(user);
    if (self->skipping_ && !self->block_start_ && !self->unskip_next_ && self->reenter_at_ != address && self->insn_hook_ &&
        self->skipped_ < self->skip_limit_ && !self->deliver_now_ && !self->stop_requested_ &&
        !self->time_up_.load(std::memory_order_relaxed) && !self->exec_bp_hook_mask_ && !self->DebugChecked()) {
      self->env_->eip = address - self->env_->segs[uabi::kCs].base;
      self->reenter_at_ = TcgCpu::kNoReentry;
      Skip(self, address);
      return;
    }
    // With one code hook Unicorn compiles a direct call of it into the
    // translation (its "inline hook"): where it returns to identifies the
    // block (TcgCpu::HooklessLookup).
    CodeBoundary(address, user, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
  }
  // The instruction at `address` starts unreported (block-level observation).
  static void Skip(TcgCpu* self, uint64_t address) {
    self->block_start_ = false;
    self->first_hook_of_run_ = false;
    self->skipped_++;
    self->prev_start_ = self->last_start_;
    self->last_start_ = address;
    self->last_start_skipped_ = true;
  }
  __attribute__((noinline)) static void CodeBoundary(uint64_t address, void* user, uintptr_t ra) {
    auto* self = static_cast<TcgCpu*>(user);
    if (self->env_->hflags & uabi::kHfHookless) {
      self->HooklessStart(address, ra);
      return;
    }
    AtBoundary(self, address);
  }
  // The instruction hook's work at a boundary (one hook a block: at the
  // block's first instruction, TcgCpu::HooklessStart).
  [[gnu::always_inline]] static inline void AtBoundary(TcgCpu* self, uint64_t address) {
    if (!self->insn_hook_ && !self->exec_bp_hook_mask_ && !self->debug_code_) {
      // Lingering: only counted, and a run that must end before this
      // instruction (the timer's deadline) ends here; it runs, and is
      // counted, when the next run starts with it.
      if (self->lingering_stop_at_ && self->lingering_retired_ >= *self->lingering_stop_at_) {
        self->lingering_stop_at_.reset();
        self->stop_requested_ = true;
        self->Boundary(address);
      }
      self->lingering_retired_++;
      return;
    }
    // Unicorn synced EIP as the linear address; the architectural EIP is
    // the offset in CS.
    self->env_->eip = address - self->env_->segs[uabi::kCs].base;
    // The block was left at this boundary, already reported, because the
    // observer's store changed its code (below): the instruction runs now
    // from the new translation, without a second report.
    const bool reentered = self->reenter_at_ == address;
    if (!reentered) {
      self->reenter_at_ = TcgCpu::kNoReentry;
      self->hookless_reentry_ = false;
    }
    if (reentered) {
      self->block_start_ = false;
      self->first_hook_of_run_ = false;
    } else if (self->skipping_) {
      // Block-level observation: an instruction in the middle of the block
      // the hook last reported runs unreported (the one before it did not
      // transfer control), unless something must happen at this boundary.
      bool skip = self->skipped_ < self->skip_limit_ && !self->deliver_now_ && !self->stop_requested_ &&
                  !self->time_up_.load(std::memory_order_relaxed) && !self->exec_bp_hook_mask_ && !self->unskip_next_ &&
                  !(self->DebugChecked() && self->DebugStopsAt(address));
      self->unskip_next_ = false;
      if (skip && self->block_start_) {
        // A REP string instruction's next iteration (a block of its own) is
        // no new instruction and no transfer.  Past other block boundaries
        // only when the observer allows it, at the same privilege and mode.
        if (address == self->last_start_ && self->IsRepString(address)) {
          self->block_start_ = false;
          return;
        }
        skip = self->skip_across_ && SkipFlags(self->env_) == self->skip_hflags_ &&
               self->env_->segs[uabi::kCs].selector == self->skip_cs_;
        if (skip && self->skip_block_ends_) {
          // Kept for the observer, who decodes `from` later: only while
          // nothing that decoding depends on has changed.
          skip = self->CanKeepEnd();
          if (skip) self->block_ends_[self->block_ends_n_++] = {self->last_start_, address, self->skipped_};
        }
      }
      if (skip) {
        Skip(self, address);
        self->MaybeEnterHookless(address);
        return;
      }
      self->skipping_ = false;
    }
    if (!reentered) self->hook_block_start_ = self->block_start_;
    self->block_start_ = false;
    self->allow_delivery_ = false;  // a permission is for the boundary it was given at
    if (self->first_hook_of_run_) {
      self->first_hook_of_run_ = false;
      // A run that ended right after this boundary was reported (a stop
      // checked between the hook and the instruction) resumes here: the
      // instruction has not run, and is not reported twice.  Not when a
      // block started after that report (the run ended at a block start:
      // the instruction ran, a loop came back to it) or instructions ran
      // unreported since.
      if (self->observed_valid_ && address == self->last_observed_ && !self->block_start_at_run_ &&
          self->last_start_ == address && self->skipped_ == 0) {
        self->debug_first_ = false;
        self->debug_progress_ = true;  // the instruction a debugger stopped before runs now
        return;
      }
    }
    // Before this instruction: a stop or an event a callback asked for
    // during the previous one.
    // (A debugger's watchpoint ends the run after the tracer has seen this
    // boundary, in DebugCheck, as its breakpoints do.)
    // (A run that ends here at a re-entered boundary resumes through
    // reenter_at_ when one hook a block set it: Run keeps it.)
    if ((self->stop_requested_ || self->time_up_) && self->debug_stop_.kind != TcgCpu::DebugStop::kWatch)
      self->Boundary(address);
    if (reentered) {
      self->reenter_at_ = TcgCpu::kNoReentry;
      self->hookless_reentry_ = false;
    }
    if (self->insn_hook_ && !reentered) {
      self->in_code_hook_ = true;
      self->hook_linear_ = address;
      self->insn_hook_(address);
      self->in_code_hook_ = false;
      self->last_observed_ = address;
      self->observed_valid_ = true;
    }
    self->last_start_ = address;
    self->last_start_skipped_ = false;
    if (self->code_changed_in_hook_) {
      // The observer stored over bytes of this block from this instruction
      // on (a BTS record over the branch target: InvalidateCodeBytes).  QEMU
      // would go on running its old translation of them: leave the block
      // here, so that QEMU translates the new bytes (SDM vol. 3A 11.6: the
      // store comes before the instruction's fetch).
      self->code_changed_in_hook_ = false;
      self->reenter_at_ = address;
      self->Boundary(address);
    }
    // A debugger's breakpoint or finished step: after the tracer saw this
    // boundary (it has accounted for the instruction before), before the
    // instruction runs; when the run resumes here the tracer is not told
    // twice (first_hook_of_run_ above).
    if (self->DebugChecked() || self->debug_stop_.kind == TcgCpu::DebugStop::kWatch) self->DebugCheck(address);
    if (self->exec_bp_mask_) self->CheckInstructionBreakpoints(address);
    // An event the observer raised for this boundary (a PMI, an emulated
    // #DB): leave the block here; QEMU's loop takes it before the
    // instruction runs.  If it cannot be taken yet (IF=0, a shadow), every
    // later boundary checks again.
    if (self->deliver_now_ && self->Deliverable()) {
      self->deliver_now_ = false;
      self->allow_delivery_ = true;
      cpu_loop_exit_x86_64(self->cpu_);
    }
    if (!(self->env_->hflags & (uabi::kHfHookless | uabi::kHfCountCall))) self->MaybeEnterHookless(address);
  }
  // Every block start (a hook that costs a few ns per block): where runs
  // end and queued events are noticed.  Unicorn 2.0.1 cannot be stopped
  // asynchronously (cpu_exit/uc_emu_stop from another thread or a callback
  // in the middle of a block): the block then left has its registers
  // updated but EIP at its start (seen with the public API alone).  Here,
  // at a block's start, the state is whole: set EIP, and leave through
  // QEMU's loop, which ends the run or takes the event.
  static void Block(uc_engine*, uint64_t address, uint32_t size, void* user) {
    auto* self = static_cast<TcgCpu*>(user);
    self->StartBlock(address, size);
    if (self->alone_pending_) {
      // The first block after RunAloneUnlessSeen left one: the instruction
      // alone, unless something else runs first (an interrupt taken where a
      // run ended in between: then the accesses it reported before are
      // reported again, counted as a race lost).
      self->alone_pending_ = false;
      if (address == self->alone_at_) {
        self->alone_block_ = self->blocks_in_run_;
      } else if (self->alone_skip_ > 0) {
        self->alone_skip_ = 0;
        self->stats_.alone_skips_dropped++;
      }
    } else if (self->alone_skip_ > 0 && self->blocks_in_run_ != self->alone_block_) {
      if (address == self->alone_at_ && !self->alone_skip_started_) {
        self->alone_block_ = self->blocks_in_run_;  // left before it ran (LeaveHookless): it starts here again
      } else {
        self->alone_skip_ = 0;  // its block was left before those accesses (a fault)
      }
    }
    if (!self->kick_.load(std::memory_order_relaxed) && !self->time_up_.load(std::memory_order_relaxed)) return;
    if (self->alone_block_ == self->blocks_in_run_) {
      // The run ends before the instruction runs alone: the next block to
      // start, in this run or the next (Run), is to be it again.
      self->alone_block_ = ~0ull;
      self->alone_pending_ = true;
    }
    // With a debugger's checks on, the code hook of this same boundary ends
    // the run after TcgCpu::DebugCheck, which must see every boundary (a
    // step ended here would otherwise run one more instruction when resumed);
    // so does a watchpoint's stop, after the tracer saw the boundary.
    if ((self->debug_code_ || self->debug_stop_.kind == TcgCpu::DebugStop::kWatch) && self->CodeHookActive()) return;
    self->EndRunAtBlockStart(address);
  }
  // QEMU's check for pending interrupts at a block boundary, for vbts's
  // events: a queued exception first, then NMI, then the LAPIC's interrupt.
  static bool ExecInterrupt(TcgCpu* self, int request) {
    uabi::EnvPrefix* env = self->env_;
    // Between blocks: the last one ran to its end (vbts's own exits in the
    // middle of one settle first, LeavePast).
    self->CloseBlock();
    uint32_t& ir = At<uint32_t>(self->cpu_, uabi::kCpuInterruptRequest);
    // While every instruction is reported, events come only at reported
    // boundaries (TcgCallbacks::Code), as under KVM where the stepped guest
    // stops at the boundary before the interrupt is delivered: not at a
    // block boundary QEMU reaches on its own (after an IRET, say).
    if (self->insn_hook_) {
      if (!self->allow_delivery_) {
        self->deliver_now_ = true;
        return false;
      }
      self->allow_delivery_ = false;
    }
    if (self->pending_exception_) {
      const auto [vector, ec] = *self->pending_exception_;
      self->pending_exception_.reset();
      if (const uint64_t length = std::exchange(self->pending_rep_skip_, 0)) {
        // QEMU runs each iteration of a REP string instruction as a block
        // that jumps back to the instruction, and stops there once more
        // with the count at 0 before it moves on; the CPU has finished the
        // instruction after its last iteration, so a trap that iteration
        // caused has the next instruction's EIP in its frame (SDM vol. 3B
        // 17.3.1.2: the trap follows the iteration; vol. 3A 6.5: a trap's
        // return address is the instruction after the trapping one). A REP
        // with a count of 0 changes nothing, so stepping past it here is
        // what QEMU's next block would do.
        env->eip += length;
        if (!(env->hflags & kHfCs64)) env->eip &= 0xFFFFFFFFu;
        self->stats_.finished_rep_traps++;
      }
      ir &= ~uabi::kInterruptHard;
      if (self->config_.devices->InterruptPending()) ir |= uabi::kInterruptHard;
      self->stats_.injected++;
      raise_exception_err_ra_x86_64(env, vector, ec.value_or(0), 0);
    }
    const int pending = x86_cpu_pending_interrupt_x86_64(self->cpu_, request);
    if (pending == static_cast<int>(uabi::kInterruptNmi)) {
      ir &= ~uabi::kInterruptNmi;
      env->hflags2 |= uabi::kHf2Nmi;
      self->stats_.nmis++;
      self->AnnounceEvent(std::nullopt);
      DeliverHardware(self, 2);
      return true;
    }
    if (pending == static_cast<int>(uabi::kInterruptHard)) {
      ir &= ~uabi::kInterruptHard;
      std::optional<uint8_t> vector = self->config_.devices->AcknowledgeInterrupt();
      if (self->config_.devices->InterruptPending()) ir |= uabi::kInterruptHard;
      if (!vector) return false;
      self->stats_.interrupts++;
      self->AnnounceEvent(std::nullopt);
      DeliverHardware(self, *vector);
      return true;
    }
    return false;
  }
  // An NMI or external interrupt through the IDT. Its table reads and frame
  // are the delivery's, not an instruction's (delivering_): the data-access
  // hook and the guest's data breakpoints see none of them, as for
  // exceptions (Intr), and as the KVM engine's tracer, which lists each
  // instruction's own operands. A fault on the way comes back through Intr.
  static void DeliverHardware(TcgCpu* self, int vector) {
    self->delivering_ = vector;
    self->delivering_soft_ = false;
    self->ArmTaskGate(vector);
    do_interrupt_x86_hardirq_x86_64(self->env_, vector, 1);
    self->delivering_ = -1;
  }
  // A guest store into a page with translations is about to land
  // (tb_invalidate_phys_page_fast): the engine on this thread is told.
  static void BeforeCodeStore(void* uc, uintptr_t retaddr) {
    TcgCpu* self = t_running;
    if (self != nullptr && static_cast<void*>(self->uc_) == uc) self->BeforeCodeStore(retaddr);
  }
  // Translating a block: with one hook a block (kHfHookless in the flags it
  // is made for), the code hook is hidden from QEMU's translator after the
  // first instruction, and each instruction's address is kept.
  static void BeginTranslation(void* cpu, const void* tb) {
    TcgCpu* self = t_running;
    // (What a translation left by longjmp, a fault fetching its code, kept.)
    RestoreHiddenHook();
    t_translating_tb = nullptr;
    t_translating_hook = nullptr;
    t_hide_every = false;
    ForgetAccess();  // no helper runs while QEMU translates
    if (self == nullptr || self->cpu_ != cpu) return;
    if (At<uint32_t>(const_cast<void*>(tb), uabi::kTbFlags) & uabi::kHfCountCall) {
      BeginCountCallTranslation(self, tb);
      return;
    }
    if (!(self->env_->hflags & uabi::kHfHookless) || self->code_hook_ == 0) return;
    t_translating_tb = &self->hookless_tbs_[tb];
    t_translating_tb->pcs.clear();
    t_translating_hook = reinterpret_cast<uabi::HookPrefix*>(self->code_hook_);
  }
  // One call a block (TcgCpu::CountCallStart): where Unicorn puts the block
  // hook's call, before QEMU's check of its exit request at the block's
  // start, a direct call of CountCall with the block's record (which the
  // translator fills with each instruction's address) as its first argument;
  // neither Unicorn hook is compiled in.  A block made for the mode always
  // has the call: its instructions are counted there or nowhere.
  static void BeginCountCallTranslation(TcgCpu* self, const void* tb) {
    TcgCpu::HooklessTb* record = &self->hookless_tbs_[tb];
    record->pcs.clear();
    t_translating_tb = record;
    t_translating_hook = reinterpret_cast<uabi::HookPrefix*>(self->code_hook_);
    t_hide_every = true;
    auto* block_hook = reinterpret_cast<uabi::HookPrefix*>(self->block_hook_);
    if (block_hook != nullptr && !block_hook->to_delete) {
      block_hook->to_delete = true;  // read by the translator only: restored after the first instruction
      t_hidden_block_hook = block_hook;
    }
    void* ctx = self->tcg_ctx_;
    auto temp = [ctx](void* tcgv) { return static_cast<void*>(static_cast<char*>(ctx) + reinterpret_cast<uintptr_t>(tcgv)); };
    void* args[4] = {
        temp(tcg_const_i64_x86_64(ctx, static_cast<int64_t>(reinterpret_cast<uintptr_t>(record)))),
        temp(tcg_const_i64_x86_64(ctx, static_cast<int64_t>(At<uint64_t>(const_cast<void*>(tb), uabi::kTbPc)))),
        temp(tcg_const_i32_x86_64(ctx, 0)),
        temp(tcg_const_i64_x86_64(ctx, static_cast<int64_t>(reinterpret_cast<uintptr_t>(self)))),
    };
    uc_add_inline_hook_x86_64(self->uc_, self->count_call_hook_, args, 4);
    for (void* a : args) tcg_temp_free_internal_x86_64(ctx, a);
  }
  static void CountCall(uc_engine* record, uint64_t address, uint32_t, void* user) {
    static_cast<TcgCpu*>(user)->CountCallStart(reinterpret_cast<const TcgCpu::HooklessTb*>(record), address);
  }
  static void EndTranslation(const void* db) {
    RestoreHiddenHook();
    if (t_translating_tb != nullptr) {
      const auto* base = static_cast<const uabi::DisasContextBasePrefix*>(db);
      t_translating_tb->bytes = static_cast<uint32_t>(base->pc_next - base->pc_first);
    }
    t_hide_every = false;
    t_translating_tb = nullptr;
    t_translating_hook = nullptr;
  }
  static void ForgetAccess() {
    t_access_ra = 0;
    t_helper_ra = 0;
    t_wrapper_ra = 0;
    t_access_size = 0;
  }
  static void RestoreHiddenHook() {
    if (t_hidden_hook != nullptr) t_hidden_hook->to_delete = false;
    t_hidden_hook = nullptr;
    // The block hook too: its call is made (or not) before the first
    // instruction, so after it the translator no longer looks at it.
    if (t_hidden_block_hook != nullptr) t_hidden_block_hook->to_delete = false;
    t_hidden_block_hook = nullptr;
  }
  static void TbAllocated(TcgCpu* self, const void* tb) {
    // QEMU allocates blocks upwards in its code buffer until it empties it.
    if (tb < self->last_tb_alloc_) self->DropHooklessRecords();
    self->last_tb_alloc_ = tb;
  }
  // QEMU linked the first translation into the RAM page at `ram_addr`
  // (tlb_protect_code) or dropped its last one (tlb_unprotect_code).
  static void CodePage(void* uc, uint64_t ram_addr, bool has_code) {
    TcgCpu* self = t_running;
    if (self == nullptr || static_cast<void*>(self->uc_) != uc) {
      self = nullptr;
      std::lock_guard<std::mutex> lock(g_engines_mu);
      for (TcgCpu* e : Engines()) {
        if (static_cast<void*>(e->uc_) == uc) self = e;
      }
    }
    if (self == nullptr) return;
    const uint64_t page = ram_addr >> 12;
    const bool was_code = page < (self->config_.ram_bytes >> 12) && self->MayHoldCode(page);
    self->NoteCodePage(page, has_code);
    // Stores to a page without code skip QEMU's check for translated code
    // in it (StoresWithoutCodeCheck); now that it has some, every TLB entry
    // that maps it checks again.
    if (has_code && !was_code && page < (self->config_.ram_bytes >> 12)) {
      self->stats_.store_checks_restored++;
      tlb_reset_dirty_x86_64(self->cpu_, reinterpret_cast<uintptr_t>(self->config_.ram) + (page << 12), 4096);
    }
  }
  // QEMU filled a TLB entry for linear page `vaddr` at `paddr`.  Unicorn
  // 2.0.1 keeps no dirty-memory bitmaps: every RAM page counts as clean, so
  // every store to RAM would take QEMU's slow path to look for translated
  // code in its page (notdirty_write: a page-collection lock, a tree
  // allocated and freed per store).  A writable RAM page without code gets a
  // plain write entry, as QEMU itself gives a page whose code-dirty bit is
  // set; CodePage puts the check back when code appears in the page.
  static void StoresWithoutCodeCheck(void* cpu, uint64_t vaddr, uint64_t paddr, int prot) {
    constexpr int kPageWrite = 2;  // QEMU's PAGE_WRITE
    if (!(prot & kPageWrite)) return;
    TcgCpu* self = t_running;
    if (self == nullptr || self->cpu_ != cpu) self = Owner(cpu);
    if (self == nullptr) return;
    const uint64_t page = paddr >> 12;
    if (page >= (self->config_.ram_bytes >> 12) || self->MayHoldCode(page)) return;
    self->stats_.plain_store_entries++;
    tlb_set_dirty_x86_64(cpu, vaddr);
  }
  static TcgCpu* Running(void* env) {
    TcgCpu* t = t_running;
    return t != nullptr && static_cast<void*>(t->env_) == env ? t : nullptr;
  }
  static TcgDevices::Msr ReadMsr(TcgCpu* self, uint32_t index, uint64_t& value) {
    self->stats_.msr++;
    return self->config_.devices->ReadMsr(index, value);
  }
  static TcgDevices::Msr ReadPmc(TcgCpu* self, uint32_t ecx, uint64_t& value) {
    self->stats_.msr++;
    return self->config_.devices->ReadPmc(ecx, value);
  }
  // RDTSC, RDTSCP, RDMSR IA32_TSC: EDX:EAX from the machine's clock.
  static void GuestTsc(TcgCpu* self, void* env) {
    if (std::optional<uint64_t> tsc = self->config_.devices->ReadTsc()) {
      uint64_t* regs = static_cast<uabi::EnvPrefix*>(env)->regs;
      regs[0] = static_cast<uint32_t>(*tsc);
      regs[2] = *tsc >> 32;
    }
  }
  static void WriteTsc(TcgCpu* self, uint64_t value) { self->config_.devices->WriteTsc(value); }
  static TcgDevices::Msr WriteMsr(TcgCpu* self, uint32_t index, uint64_t value) {
    self->stats_.msr++;
    return self->config_.devices->WriteMsr(index, value);
  }
  static void Halted(TcgCpu* self) {
    self->stats_.halts++;
    self->halted_ = true;
    // HLT that began with TF=1 is followed by its single-step trap when it
    // completes (SDM vol. 3B 17.3.1.4), before the interrupt that wakes the
    // CPU (a trap of the previous instruction has priority, SDM vol. 3A
    // 6.9); QEMU 5.0 halts without it.  Queued for the next boundary, after
    // the HLT: the machine resumes the CPU when the interrupt is due.
    if ((self->env_->eflags & kRflagsTf) && !self->own_single_step_) {
      self->dr()[6] |= 1u << 14;  // DR6.BS
      self->QueueException(1, std::nullopt);
    }
  }
  // The translator's view of guest code (docs/tcg-engine.md, "Instructions
  // QEMU 5.0 gets wrong inline"): before QEMU decodes the instruction at
  // db->pc_next, vbts looks at its bytes; for one QEMU 5.0 translates inline
  // and wrongly, the translator's fetches of its first two bytes read UD2
  // (cpu_ldub_code below), so that running it raises #UD there and vbts
  // performs it (CompleteSubstituted).
  static void TranslateInsn(void* db, void* cpu) {
    TcgCpu* self = t_running;
    const uint64_t pc = static_cast<uabi::DisasContextBasePrefix*>(db)->pc_next;
    switch (self != nullptr ? self->LookBeforeTranslation(pc) : TcgCpu::TranslateAs::kAsIs) {
      case TcgCpu::TranslateAs::kSubstitute:
        self->stats_.substituted++;
        t_substitute_at = pc;
        break;
      case TcgCpu::TranslateAs::kAlign16:
        self->stats_.alignment_checks++;
        t_align16 = true;
        break;
      case TcgCpu::TranslateAs::kAsIs:
        break;
    }
    if (TcgCpu::HooklessTb* h = t_translating_tb) {
      h->pcs.push_back(pc);
      if ((h->pcs.size() > 1 || t_hide_every) && t_translating_hook != nullptr && !t_translating_hook->to_delete) {
        t_translating_hook->to_delete = true;  // read by the translator only: restored below
        t_hidden_hook = t_translating_hook;
      }
    }
    t_translate_insn(db, cpu);
    // A block made with RF set suppresses the guest's instruction
    // breakpoints (QEMU's BP_CPU) in it, and QEMU clears RF only at its end:
    // it ends after its first instruction, as RF lasts one instruction (SDM
    // vol. 3B 17.3.1.1).
    auto* base = static_cast<uabi::DisasContextBasePrefix*>(db);
    if (base->is_jmp == uabi::kDisasNext && (At<uint32_t>(base->tb, uabi::kTbFlags) & uabi::kTbFlagRf))
      base->is_jmp = uabi::kDisasTooMany;
    RestoreHiddenHook();
    t_substitute_at = kNoSubstitute;
    t_align16 = false;
  }
  // QEMU's CPUClass.do_unaligned_access, which QEMU 5.0 leaves unset for x86
  // (TcgCpu::Init sets it): an access translated with MO_ALIGN_16 at an
  // address that is not 16-byte aligned. Legacy SSE raises #GP(0) (SDM vol.
  // 2A 2.5, exception types 1, 2, 4), at the instruction: QEMU restores its
  // state from `retaddr`.
  static void Unaligned(void* cpu, uint64_t /*addr*/, int /*access_type*/, int /*mmu_idx*/, uintptr_t retaddr) {
    void* env = At<void*>(cpu, uabi::kCpuEnvPtr);
    if (TcgCpu* self = Running(env)) self->stats_.alignment_faults++;
    raise_exception_err_ra_x86_64(env, 13, 0, retaddr);
  }
  // QEMU left the block being run at the instruction at CS:EIP, which has
  // started but not run, to run it again from a new translation: a guest
  // store into its own block (QEMU's precise self-modifying-code path,
  // SDM vol. 3A 11.6). That instruction's start was already seen: it is
  // neither counted nor reported twice. A skipped one is taken back (the new
  // block then starts at it after the instruction before, as at a page
  // boundary); a reported one is re-entered without a second report.
  static void TcgContext(TcgCpu* self, void* s) { self->tcg_ctx_ = s; }
  static void Restarted(TcgCpu* self) {
    ForgetAccess();  // the store helper is left by longjmp
    const uint64_t at = self->env_->segs[uabi::kCs].base + self->env_->eip;
    self->LeaveBlockAt(at);  // in a block with one hook: the store has started, what follows it has not
    // A lingering code hook counted the instruction; it counts it again.
    if (self->code_hook_ != 0 && !self->CodeHookActive() && self->lingering_retired_ > 0) self->lingering_retired_--;
    if (self->last_start_ != at) return;
    self->stats_.restarts++;
    if (self->last_start_skipped_ && self->skipped_ > 0) {
      self->skipped_--;
      self->last_start_ = self->prev_start_;
      self->last_start_skipped_ = false;
    } else {
      self->reenter_at_ = at;
    }
  }
  static void TripleFault(TcgCpu* self) {
    self->triple_fault_ = true;
    self->delivering_ = -1;
  }
  static void SoftInterrupt(TcgCpu* self) { self->soft_start_ = self->env_->eip; }
  // SS was loaded (MOV SS, POP SS, LSS) or STI ran: which of the two set
  // QEMU's interrupt shadow, for CheckInstructionBreakpoints.
  static void SsLoaded(TcgCpu* self, bool loaded) { self->ss_shadow_ = loaded; }
  static bool Owns(TcgCpu* self, void* cpu) { return self->cpu_ == cpu; }
  // While SyncDebugBreakpoints changes QEMU's breakpoints, the code buffer
  // flush each asks for is noted (tb_flush).
  static inline thread_local bool* t_flush_noted = nullptr;
  static bool NoteFlush() {
    if (t_flush_noted == nullptr) return false;
    *t_flush_noted = true;
    return true;
  }
  // QEMU's debug exit at one of the debugger's breakpoints inserted as
  // QEMU's (EIP is the instruction's: the exit synced it): the run ends
  // there, before the instruction, as DebugBoundary ends it.
  static bool QemuBreakpoint(TcgCpu* self) {
    const uint64_t linear = self->env_->segs[uabi::kCs].base + self->env_->eip;
    if (!std::binary_search(self->qemu_bps_.begin(), self->qemu_bps_.end(), linear)) return GuestExecExit(self, linear);
    self->stats_.qemu_breakpoint_stops++;
    self->debug_stop_ = TcgCpu::DebugStop{TcgCpu::DebugStop::kBreakpoint, linear, false};
    self->stop_requested_ = true;
    uc_emu_stop(self->uc_);  // (Unicorn's loop ends the run at EXCP_DEBUG only when asked to stop)
    return true;
  }
  static bool StopRequested(TcgCpu* self) { return self->stop_requested_; }
  // Task switches (TcgCpu::ArmTaskSwitch) for the helpers outside this struct.
  static uint32_t TaskCsDescriptor(TcgCpu* self, uint64_t linear, uint32_t v) {
    return self->TaskCsDescriptor(linear, v);
  }
  static void ArmFarTransfer(TcgCpu* self, uint16_t selector) { self->ArmFarTransfer(selector); }
  // IRET with NT (outside IA-32e mode) returns to the task in the back link,
  // the first word of the current TSS (SDM vol. 2A IRET, TASK-RETURN).
  static void ArmTaskReturn(TcgCpu* self) {
    const uabi::EnvPrefix* e = self->env_;
    uint16_t link = 0;
    if (!(e->eflags & (1u << 14)) || (e->efer & kEferLma)) return;
    absl::StatusOr<pmu::AccessFault> f = self->ReadLinear(e->tr.base, absl::MakeSpan(reinterpret_cast<uint8_t*>(&link), 2));
    if (f.ok() && f->ok()) self->ArmTaskSwitch(link);
  }
  // An interrupt the guest can take now (IF=1) is pending at a device: a
  // WRMSR that raised it (a TSC deadline already passed, an x2APIC self-IPI)
  // leaves its block, so that QEMU's loop delivers it at the next
  // instruction boundary (SDM vol. 3A 6.6), not at the end of the block.
  static bool InterruptTakenNext(TcgCpu* self) {
    return (self->env_->eflags & (1u << 9)) && self->config_.devices->InterruptPending();
  }
  static bool TrapsOwned(TcgCpu* self) { return self->own_single_step_; }
  // A device is accessed from a block run with one hook: the devices that
  // keep time (LAPIC timer, 8254, PM timer...) read the instructions retired
  // up to this one, so EIP must be this instruction's (QEMU finds it from
  // the helper's return address in the translated code).
  static void SettleForDevice(TcgCpu* self) {
    if (self->open_ != nullptr && t_access_ra != 0) {
      cpu_restore_state_x86_64(self->cpu_, t_access_ra, /*will_exit=*/false);
      t_access_ra = 0;
    }
  }
  // Instructions of a block run with one hook follow the current one.
  static bool InsideOneHookBlock(TcgCpu* self) { return self->open_ != nullptr && self->open_pretend_ > 0; }
  // After a device access (OUT, a store to MMIO): the block is left right
  // after the instruction for an interrupt the guest takes now, or, in a
  // block run with one hook, for any stop asked for (the instruction hook
  // would have ended the run at the next instruction).
  static bool LeavesAfterDeviceAccess(TcgCpu* self) {
    return InterruptTakenNext(self) || (InsideOneHookBlock(self) && StopRequested(self));
  }
  // Performs the instruction at EIP (synced by QEMU before the helper) with
  // the completion engine and leaves the block with the new state; a fault
  // it finds is raised at the instruction.
  [[noreturn]] static void CompleteHere(TcgCpu* self, uintptr_t ra) {
    self->LeaveBlockAt(self->env_->segs[uabi::kCs].base + self->env_->eip);
    // What happens is decided in a scope of its own: QEMU leaves by longjmp,
    // past destructors, so the statuses and strings must be gone by then.
    enum class Outcome { kRetired, kFault, kUndefined } outcome = Outcome::kUndefined;
    int vector = 6, error_code = 0;  // #UD: what vbts cannot perform
    {
      CpuState st = self->GetState(/*with_msrs=*/true);
      RamView ram(self->config_.ram, self->config_.ram_bytes);
      absl::StatusOr<DecodedInsn> insn = DecodeCurrent(st, ram);
      CpuidFn cpuid = [self](uint32_t leaf, uint32_t subleaf) { return self->config_.devices->Cpuid(leaf, subleaf); };
      absl::StatusOr<Completion> c =
          insn.ok() ? Complete(st, ram, *insn, cpuid) : absl::StatusOr<Completion>(insn.status());
      if (c.ok() && c->retired()) {
        self->stats_.completed++;
        TcgCpu* running = t_running;
        t_running = nullptr;  // the MSRs SetState writes are CPU state, not the machine's
        if (self->SetState(st).ok()) outcome = Outcome::kRetired;
        t_running = running;
      } else if (c.ok() && c->faulted()) {
        if (c->fault.vector == 14) self->env_->cr[2] = c->fault.cr2;
        outcome = Outcome::kFault;
        vector = c->fault.vector;
        error_code = static_cast<int>(c->fault.error_code.value_or(0));
      }
    }
    if (outcome == Outcome::kRetired) cpu_loop_exit_x86_64(self->cpu_);
    raise_exception_err_ra_x86_64(self->env_, vector, error_code, ra);
  }
  // QEMU 5.0 keeps EFER.SCE/NXE only where its own CPU model lists SYSCALL/NX
  // (and hides SYSCALL from Intel models outside 64-bit mode); the CPUID
  // the guest sees is vbts's, so the bits are taken as written.
  static void FixEfer(TcgCpu* self, uint64_t value) {
    uabi::EnvPrefix* env = self->env_;
    const uint64_t keep = kEferSce | kEferNxe;
    const uint64_t efer = (env->efer & ~keep) | (value & keep);
    if ((efer ^ env->efer) & kEferNxe) tlb_flush_x86_64(self->cpu_);
    env->efer = efer;
  }
  // MOV to CR0/CR4/CR8 (helper_write_crN): #GP(0) where the CPU raises it;
  // CR8 goes to the machine's LAPIC.  False: QEMU's helper does the rest.
  static bool WriteCr(TcgCpu* self, int reg, uint64_t value, uintptr_t ra) {
    uabi::EnvPrefix* env = self->env_;
    const ControlState s{env->cr[0], env->cr[3], env->cr[4], env->efer, (env->hflags & kHfCs64) != 0};
    switch (reg) {
      case 0:
        if (Cr0WriteFaults(value, s)) raise_exception_err_ra_x86_64(env, 13, 0, ra);
        return false;
      case 4: {
        TcgDevices* d = self->config_.devices;
        const uint64_t valid = Cr4ValidBits([d](uint32_t leaf, uint32_t subleaf) { return d->Cpuid(leaf, subleaf); });
        if (Cr4WriteFaults(value, valid, s)) raise_exception_err_ra_x86_64(env, 13, 0, ra);
        return false;
      }
      case 8:
        if (Cr8WriteFaults(value)) raise_exception_err_ra_x86_64(env, 13, 0, ra);
        self->cr8_ = value;
        // A lower task priority may let a pending interrupt in: QEMU checks
        // at the next block, which a MOV to CR8 ends.
        return self->config_.devices->WriteCr8(value);
      default:
        return false;
    }
  }
  // LTR and LLDT in IA-32e mode load a 16-byte descriptor whose base must
  // be canonical, else #GP(selector) (SDM vol. 2A LLDT, LTR: "If in IA-32e
  // mode and the base address in the descriptor is non-canonical"); QEMU
  // 5.0 loads it as it is.  Checked before QEMU's helper, for a present
  // descriptor of the right type in the GDT (the helper raises the others).
  static void CheckSystemSegmentBase(TcgCpu* self, int selector, uint8_t type, uintptr_t ra) {
    uabi::EnvPrefix* env = self->env_;
    const uint32_t sel = static_cast<uint32_t>(selector) & 0xFFFF;
    if (!(env->efer & kEferLma) || (sel & ~3u) == 0 || (sel & 4)) return;
    const uint32_t index = sel & ~7u;
    if (index + 15 > env->gdt.limit) return;
    WalkView bus(self->config_.ram, self->config_.ram_bytes, self->config_.devices);
    pmu::LinearMemory mem(bus, self->WalkRegs());
    pmu::Access implicit;
    implicit.implicit = true;
    uint8_t d[16];
    absl::StatusOr<pmu::AccessFault> f = mem.Read(Gva{env->gdt.base + index}, absl::MakeSpan(d), implicit);
    if (!f.ok() || !f->ok()) return;
    if (!(d[5] & 0x80) || (d[5] & 0x1F) != type) return;  // not present, or not this kind of system segment
    const uint64_t base = d[2] | (uint64_t{d[3]} << 8) | (uint64_t{d[4]} << 16) | (uint64_t{d[7]} << 24) |
                          (uint64_t{d[8]} << 32) | (uint64_t{d[9]} << 40) | (uint64_t{d[10]} << 48) |
                          (uint64_t{d[11]} << 56);
    const int bits = (env->cr[4] & (1u << 12)) ? 57 : 48;  // CR4.LA57
    const int64_t shifted = static_cast<int64_t>(base << (64 - bits)) >> (64 - bits);
    if (static_cast<uint64_t>(shifted) != base) raise_exception_err_ra_x86_64(env, 13, static_cast<int>(sel & ~3u), ra);
  }
  static uint64_t ReadCr8(TcgCpu* self) {
    if (std::optional<uint64_t> v = self->config_.devices->ReadCr8()) return *v;
    return self->cr8_;
  }
  static void SetDr(TcgCpu* self, int reg, uint64_t value, uintptr_t ra) {
    uabi::EnvPrefix* env = self->env_;
    uint64_t* dr = self->dr();
    const bool de = (env->cr[4] & (1u << 3)) != 0;  // CR4.DE: DR4/DR5 are reserved (#UD)
    if (dr[7] & (1u << 13)) {
      // DR7.GD: any MOV DRn faults with #DB, DR6.BD set and GD cleared for
      // the handler (SDM vol. 3B 17.2.4, 17.3.1.2); not held by MOV SS.
      dr[6] |= 1u << 13;
      dr[7] &= ~(1ull << 13);
      self->UpdateBreakpoints();
      raise_exception_err_ra_x86_64(env, 1, 0, ra);
    }
    switch (reg) {
      case 0: case 1: case 2: case 3:
        dr[reg] = value;
        break;
      case 4: case 6:
        if (reg == 4 && de) raise_exception_err_ra_x86_64(env, 6, 0, ra);
        dr[6] = value | 0xFFFF0FF0u;  // the bits that read as 1 (SDM vol. 3B 17.2.3)
        break;
      case 5: case 7:
        if (reg == 5 && de) raise_exception_err_ra_x86_64(env, 6, 0, ra);
        dr[7] = (value & 0xFFFFFFFFu) | 0x400;  // bit 10 reads as 1
        break;
      default:
        raise_exception_err_ra_x86_64(env, 6, 0, ra);
    }
    self->UpdateBreakpoints();
    // New data-breakpoint ranges: QEMU's TLB is emptied, its entries come
    // back with the new watch flags (as QEMU's own DR7 path does).
    if (self->GuestWatchesStale()) self->SyncGuestWatches();
    self->config_.devices->DebugRegistersWritten();
  }
  // Runs QEMU's IRET or far RET (`ret`), then gives FS and GS back the bases
  // it zeroed when it made their selectors null (helper_iret_protected).
  // `caller_ra`: the wrapper's return address in the translated code, where
  // the helper's guest accesses are placed (t_wrapper_ra).
  static void KeepFsGsBases(void* env, void (*ret)(void*, int, int), int a, int b, uintptr_t caller_ra) {
    TcgCpu* self = Running(env);
    auto* e = static_cast<uabi::EnvPrefix*>(env);
    const uint64_t fs = e->segs[uabi::kFs].base, gs = e->segs[uabi::kGs].base;
    const uint32_t fs_sel = e->segs[uabi::kFs].selector, gs_sel = e->segs[uabi::kGs].selector;
    t_wrapper_ra = caller_ra;
    ret(env, a, b);
    t_wrapper_ra = 0;
    if (self == nullptr || !(e->efer & kEferLma)) return;
    if (fs_sel != 0 && e->segs[uabi::kFs].selector == 0) e->segs[uabi::kFs].base = fs;
    if (gs_sel != 0 && e->segs[uabi::kGs].selector == 0) e->segs[uabi::kGs].base = gs;
  }
  // Leaves the block with EIP (at an instruction of `length` bytes that has
  // done its work) stepped past it: the next instruction starts a new block.
  [[noreturn]] static void LeavePast(TcgCpu* self, uint64_t length) {
    uabi::EnvPrefix* env = self->env_;
    self->LeaveBlockAt(env->segs[uabi::kCs].base + env->eip);  // what follows it in the block does not run
    env->eip += length;
    if (!(env->hflags & kHfCs64)) env->eip &= 0xFFFFFFFFu;
    cpu_loop_exit_x86_64(self->cpu_);
  }
  [[noreturn]] static void LeaveAfterWrmsr(TcgCpu* self) {
    // EIP is at the WRMSR (QEMU synced it before the helper): skip its
    // prefixes (legacy, and REX in 64-bit code) and 0F 30.
    LeavePast(self, self->PrefixBytes(self->env_->segs[uabi::kCs].base + self->env_->eip) + 2);
  }
  // After QEMU's OUT helper: a device write that ended the run (debug exit,
  // reset, ACPI soft-off or sleep) or raised an interrupt the guest takes now
  // ends the block right after the OUT, as the hardware stops or takes the
  // interrupt at that instruction boundary (SDM vol. 3A 6.6), not at the end
  // of the block. QEMU did not sync EIP for a ring-0 OUT: it is restored from
  // the translation (`ra`); OUTS is left alone (its RSI update follows the
  // helper in the block). Other stops (the PIT on instruction time) wait for
  // the next block start, as AfterStore's do.
  static void AfterOut(TcgCpu* self, uintptr_t ra) {
    if (!self->config_.devices->GuestEndsRun() && !LeavesAfterDeviceAccess(self)) return;
    if (!cpu_restore_state_x86_64(self->cpu_, ra, false)) return;
    const uint64_t at = self->env_->segs[uabi::kCs].base + self->env_->eip;
    const uint64_t prefixes = self->PrefixBytes(at);
    uint8_t op = 0;
    if (!self->ReadCode(at + prefixes, op)) return;
    uint64_t length = 0;
    if (op == 0xE6 || op == 0xE7) length = prefixes + 2;  // OUT imm8, AL/eAX
    if (op == 0xEE || op == 0xEF) length = prefixes + 1;  // OUT DX, AL/eAX
    if (length == 0) return;
    self->stats_.outs_left++;
    LeavePast(self, length);
  }
  // After QEMU's store helper: a store that reached a device (the LAPIC's
  // ICR or EOI, an I/O APIC redirection entry) and raised an interrupt the
  // guest takes now ends the block right after the storing instruction, as
  // AfterOut does for OUT. `ra` is the helper's return address in the
  // translated code (QEMU passes it); the length of the instruction comes
  // from vbts's decoder. (A stop a device store asks for, such as a LAPIC
  // timer write on instruction time, still waits for the next block start:
  // leaving there made tsc_clock's timer fire 15 times late, with the
  // instructions the block ran unreported not yet counted; not understood yet.)
  static void AfterStore(TcgCpu* self, uintptr_t ra) {
    if (!std::exchange(self->mmio_written_, false)) return;
    if (!LeavesAfterDeviceAccess(self)) return;
    if (!cpu_restore_state_x86_64(self->cpu_, ra, false)) return;
    const CpuState st = self->GetState(/*with_msrs=*/false);
    RamView ram(self->config_.ram, self->config_.ram_bytes);
    absl::StatusOr<DecodedInsn> insn = DecodeCurrent(st, ram);
    if (!insn.ok() || insn->rep_string) return;  // a REP MOVS/STOS goes on where QEMU left it
    self->stats_.stores_left++;
    LeavePast(self, insn->length);
  }
  static uint64_t PhysicalPage(void* cpu, uint64_t vaddr) {
    TcgCpu* self = t_running;
    if (self == nullptr || self->cpu_ != cpu) self = Owner(cpu);
    if (self == nullptr) return vaddr;
    const uabi::EnvPrefix* env = self->env_;
    if ((env->cr[0] & kCr0Pg) == 0) return vaddr;
    WalkView bus(self->config_.ram, self->config_.ram_bytes, self->config_.devices);
    auto t = pmu::Translate(self->WalkRegs(), bus, Gva{vaddr}, pmu::Access{}, /*set_accessed_dirty=*/false);
    if (!t.ok() || !t->fault.ok()) {
      self->stats_.unassigned_walks++;
      return kUnassigned;
    }
    return t->gpa.value & ~0xfffull;
  }
  // The engine that owns a QEMU CPU (TLB fills also happen outside Run(),
  // e.g. when vbts reads guest memory through the library).
  static TcgCpu* Owner(void* cpu);
};

TcgCpu* TcgCallbacks::Owner(void* cpu) {
  std::lock_guard<std::mutex> lock(g_engines_mu);
  for (TcgCpu* e : Engines()) {
    if (e->cpu_ == cpu) return e;
  }
  return nullptr;
}

}  // namespace vbts::vcpu

// QEMU's helpers for RDMSR, WRMSR and HLT, and its reset request (made only
// on a triple fault), defined here so that the dynamic linker binds
// libunicorn's calls to them (the executable exports them with
// vcpu/unicorn_interpose.list).  Outside a run of a TcgCpu they are QEMU's.
extern "C" {
using vbts::vcpu::TcgCallbacks;
using vbts::vcpu::TcgDevices;

__attribute__((noinline)) void helper_rdmsr_x86_64(void* env) {
  static const auto original = vbts::vcpu::Original<vbts::vcpu::HelperFn>("helper_rdmsr_x86_64");
  static const auto rdtsc = vbts::vcpu::Original<vbts::vcpu::HelperFn>("helper_rdtsc_x86_64");
  const uintptr_t ra = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env);
  if (self == nullptr) return original(env);
  uint64_t* regs = static_cast<vbts::vcpu::uabi::EnvPrefix*>(env)->regs;
  const uint32_t index = static_cast<uint32_t>(regs[1]);
  uint64_t value = 0;
  switch (TcgCallbacks::ReadMsr(self, index, value)) {
    case TcgDevices::Msr::kDone:
      regs[0] = static_cast<uint32_t>(value);
      regs[2] = value >> 32;
      return;
    case TcgDevices::Msr::kCpu:
      if (index == vbts::vcpu::kMsrTsc) {
        rdtsc(env);
        TcgCallbacks::GuestTsc(self, env);
        return;
      }
      if (vbts::vcpu::TcgCpu::OwnsMsr(index)) return original(env);
      break;
    case TcgDevices::Msr::kGp:
      break;
  }
  raise_exception_err_ra_x86_64(env, 13, 0, ra);
}

__attribute__((noinline)) void helper_wrmsr_x86_64(void* env) {
  static const auto original = vbts::vcpu::Original<vbts::vcpu::HelperFn>("helper_wrmsr_x86_64");
  const uintptr_t ra = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env);
  if (self == nullptr) return original(env);
  uint64_t* regs = static_cast<vbts::vcpu::uabi::EnvPrefix*>(env)->regs;
  const uint32_t index = static_cast<uint32_t>(regs[1]);
  const uint64_t value = (regs[2] << 32) | static_cast<uint32_t>(regs[0]);
  switch (TcgCallbacks::WriteMsr(self, index, value)) {
    case TcgDevices::Msr::kDone:
      // The machine wants the run to end here (tracing turned on or off):
      // QEMU would finish the translation block first, so the WRMSR retires
      // now and the block is left at the next instruction.
      // So too in a block run with one hook (docs/tcg-engine.md): the tracer
      // reported the WRMSR as retired, and the next instruction is reported
      // on its own.
      if (TcgCallbacks::StopRequested(self) || TcgCallbacks::InterruptTakenNext(self) ||
          TcgCallbacks::InsideOneHookBlock(self))
        TcgCallbacks::LeaveAfterWrmsr(self);
      return;
    case TcgDevices::Msr::kCpu:
      if (index == vbts::vcpu::kMsrTsc) return TcgCallbacks::WriteTsc(self, value);  // the machine's clock
      if (vbts::vcpu::TcgCpu::OwnsMsr(index) && !vbts::vcpu::TcgCpu::CpuMsrWriteFaults(index, value)) {
        original(env);
        if (index == vbts::vcpu::kMsrEfer) TcgCallbacks::FixEfer(self, value);
        return;
      }
      break;
    case TcgDevices::Msr::kGp:
      break;
  }
  raise_exception_err_ra_x86_64(env, 13, 0, ra);
}

// SYSCALL and SYSENTER: Unicorn 2.0.1 replaced QEMU's with "call the hooks
// and step over the instruction" (no privilege change at all).  vbts
// performs them with its completion engine (vcpu/completer.h), as it does for
// this host's KVM.
void helper_syscall_x86_64(void* env, int next_eip_addend) {
  using Fn = void (*)(void*, int);
  static const auto original = vbts::vcpu::Original<Fn>("helper_syscall_x86_64");
  const uintptr_t ra = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env);
  if (self == nullptr) return original(env, next_eip_addend);
  TcgCallbacks::CompleteHere(self, ra);
}

void helper_sysenter_x86_64(void* env, int next_eip_addend) {
  using Fn = void (*)(void*, int);
  static const auto original = vbts::vcpu::Original<Fn>("helper_sysenter_x86_64");
  const uintptr_t ra = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env);
  if (self == nullptr) return original(env, next_eip_addend);
  TcgCallbacks::CompleteHere(self, ra);
}

// RDPMC: QEMU 5.0 raises #UD after its CPL check; the counters are the
// virtual PMU's (SDM vol. 2B RDPMC: #GP at CPL > 0 without CR4.PCE, #GP for
// an invalid counter).
void helper_rdpmc_x86_64(void* env) {
  static const auto original = vbts::vcpu::Original<vbts::vcpu::HelperFn>("helper_rdpmc_x86_64");
  const uintptr_t ra = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env);
  if (self == nullptr) return original(env);
  auto* e = static_cast<vbts::vcpu::uabi::EnvPrefix*>(env);
  const bool pce = (e->cr[4] & (1u << 8)) != 0;
  uint64_t value = 0;
  if (((e->hflags & vbts::vcpu::uabi::kHfCplMask) == 0 || pce) &&
      TcgCallbacks::ReadPmc(self, static_cast<uint32_t>(e->regs[1]), value) == TcgDevices::Msr::kDone) {
    e->regs[0] = static_cast<uint32_t>(value);
    e->regs[2] = value >> 32;
    return;
  }
  raise_exception_err_ra_x86_64(env, 13, 0, ra);
}

// Segment loads in protected mode (MOV, POP, LSS...; QEMU's helper): for SS
// also the rule QEMU 5.0 lacks, a null selector in 64-bit mode whose RPL is
// not the CPL raises #GP(0) (SDM vol. 2B MOV: "IF segment selector is NULL
// ... IF SS: IF in 64-bit mode and CPL ≠ 3 and RPL = CPL: load; ELSE
// #GP(0)"; kvm-unit-tests emulator64 "mov null, %ss (with ss.rpl != cpl)").
// A load of SS is noted for the breakpoint rule after MOV SS.
void helper_load_seg_x86_64(void* env, int seg_reg, int selector) {
  using Fn = void (*)(void*, int, int);
  static const auto original = vbts::vcpu::Original<Fn>("helper_load_seg_x86_64");
  vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env);
  if (self != nullptr && seg_reg == vbts::vcpu::uabi::kSs) {
    const auto* e = static_cast<vbts::vcpu::uabi::EnvPrefix*>(env);
    const uint32_t cpl = e->hflags & vbts::vcpu::uabi::kHfCplMask;
    const bool code64 = (e->hflags & vbts::vcpu::kHfCs64) != 0;
    if ((selector & 0xFFFC) == 0 && code64 && static_cast<uint32_t>(selector & 3) != cpl)
      raise_exception_err_ra_x86_64(env, 13, 0, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
    TcgCallbacks::SsLoaded(self, true);
  }
  // Last, as a tail call: QEMU's checks raise their faults with the return
  // address into the translated block (GETPC), which must be the caller's.
  original(env, seg_reg, selector);
}
void helper_sti_x86_64(void* env) {
  static const auto original = vbts::vcpu::Original<vbts::vcpu::HelperFn>("helper_sti_x86_64");
  original(env);
  if (vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env)) TcgCallbacks::SsLoaded(self, false);
}

// RDTSC and RDTSCP: QEMU's checks (CR4.TSD at CPL > 0 raises #GP) and, for
// RDTSCP, ECX = IA32_TSC_AUX; then EDX:EAX from the machine's clock
// (vcpu/guest_clock.h).
void helper_rdtsc_x86_64(void* env) {
  static const auto original = vbts::vcpu::Original<vbts::vcpu::HelperFn>("helper_rdtsc_x86_64");
  original(env);
  if (vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env)) TcgCallbacks::GuestTsc(self, env);
}
void helper_rdtscp_x86_64(void* env) {
  static const auto original = vbts::vcpu::Original<vbts::vcpu::HelperFn>("helper_rdtscp_x86_64");
  original(env);
  if (vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env)) TcgCallbacks::GuestTsc(self, env);
}

// INT n/INT3 and INTO: where the instruction starts (QEMU's delivery of a
// fault it raises reports the INT itself; see TcgCallbacks::Intr).
void helper_raise_interrupt_x86_64(void* env, int intno, int next_eip_addend) {
  using Fn = void (*)(void*, int, int);
  static const auto original = vbts::vcpu::Original<Fn>("helper_raise_interrupt_x86_64");
  if (vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env)) TcgCallbacks::SoftInterrupt(self);
  original(env, intno, next_eip_addend);
}

void helper_into_x86_64(void* env, int next_eip_addend) {
  using Fn = void (*)(void*, int);
  static const auto original = vbts::vcpu::Original<Fn>("helper_into_x86_64");
  if (vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env)) TcgCallbacks::SoftInterrupt(self);
  original(env, next_eip_addend);
}

// MOV to CRn: QEMU 5.0 takes any value for CR0 and CR4, and its CR8 has no
// LAPIC behind it; vbts raises #GP(0) where the modelled CPU does
// (vcpu/control_regs.h) and makes CR8 the machine LAPIC's TPR[7:4].
void helper_write_crN_x86_64(void* env, int reg, uint64_t value) {
  using Fn = void (*)(void*, int, uint64_t);
  static const auto original = vbts::vcpu::Original<Fn>("helper_write_crN_x86_64");
  vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env);
  if (self == nullptr || !TcgCallbacks::WriteCr(self, reg, value, reinterpret_cast<uintptr_t>(__builtin_return_address(0))))
    original(env, reg, value);
}
// PUSHF: the EFLAGS image has RF and VM clear (SDM vol. 2B PUSHF: "the VM
// and RF flags (bits 16 and 17) are not copied; instead, the values for these
// flags are cleared"); Unicorn 2.0.1's helper copies them (kvm-unit-tests
// realmode's "rflags.rf" after an IRET that loaded RF).
uint64_t helper_read_eflags_x86_64(void* env) {
  using Fn = uint64_t (*)(void*);
  static const auto original = vbts::vcpu::Original<Fn>("helper_read_eflags_x86_64");
  return original(env) & ~uint64_t{0x30000};
}

void helper_ltr_x86_64(void* env, int selector) {
  using Fn = void (*)(void*, int);
  static const auto original = vbts::vcpu::Original<Fn>("helper_ltr_x86_64");
  if (vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env))  // an available 64-bit TSS: type 9
    TcgCallbacks::CheckSystemSegmentBase(self, selector, 0x09, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
  original(env, selector);
}
void helper_lldt_x86_64(void* env, int selector) {
  using Fn = void (*)(void*, int);
  static const auto original = vbts::vcpu::Original<Fn>("helper_lldt_x86_64");
  if (vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env))  // an LDT: type 2
    TcgCallbacks::CheckSystemSegmentBase(self, selector, 0x02, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
  original(env, selector);
}
uint64_t helper_read_crN_x86_64(void* env, int reg) {
  using Fn = uint64_t (*)(void*, int);
  static const auto original = vbts::vcpu::Original<Fn>("helper_read_crN_x86_64");
  vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env);
  if (self != nullptr && reg == 8) return TcgCallbacks::ReadCr8(self);
  return original(env, reg);
}

// MOV to DRn: QEMU 5.0 turns DR7 into its own breakpoints and watchpoints,
// which Unicorn 2.0.1 cannot run (the translation is flushed under the
// running block); vbts keeps the registers and raises the guest's
// breakpoints itself (docs/tcg-engine.md).
void helper_set_dr_x86_64(void* env, int reg, uint64_t value) {
  using Fn = void (*)(void*, int, uint64_t);
  static const auto original = vbts::vcpu::Original<Fn>("helper_set_dr_x86_64");
  vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env);
  if (self == nullptr) return original(env, reg, value);
  TcgCallbacks::SetDr(self, reg, value, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

// The single-step trap after an instruction that began with TF=1: QEMU's,
// unless vbts's tracer owns the guest's TF (it then raises the trap itself,
// after a taken branch only under DEBUGCTL.BTF, which QEMU does not model).
void helper_single_step_x86_64(void* env) {
  static const auto original = vbts::vcpu::Original<vbts::vcpu::HelperFn>("helper_single_step_x86_64");
  vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env);
  if (self != nullptr && TcgCallbacks::TrapsOwned(self)) return;
  original(env);
}

void helper_rechecking_single_step_x86_64(void* env) {
  static const auto original = vbts::vcpu::Original<vbts::vcpu::HelperFn>("helper_rechecking_single_step_x86_64");
  vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env);
  if (self != nullptr && TcgCallbacks::TrapsOwned(self)) return;
  original(env);
}

// Stores that miss QEMU's TLB fast path, MMIO among them: QEMU's helper, then
// TcgCallbacks::AfterStore with the return address QEMU passes.
#define VBTS_STORE_HELPER(name, type, size)                                                                 \
  void name##_x86_64(void* env, uint64_t addr, type val, uint32_t oi, uintptr_t retaddr) {                  \
    using Fn = void (*)(void*, uint64_t, type, uint32_t, uintptr_t);                                        \
    static const auto original = vbts::vcpu::Original<Fn>(#name "_x86_64");                                \
    vbts::vcpu::t_access_ra = retaddr;                                                                      \
    vbts::vcpu::t_access_addr = addr;                                                                       \
    vbts::vcpu::t_access_size = size;                                                                       \
    original(env, addr, val, oi, retaddr);                                                                  \
    vbts::vcpu::t_access_ra = 0;                                                                            \
    vbts::vcpu::t_access_size = 0;                                                                          \
    if (vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env)) TcgCallbacks::AfterStore(self, retaddr);    \
  }
VBTS_STORE_HELPER(helper_ret_stb_mmu, uint32_t, 1)
VBTS_STORE_HELPER(helper_le_stw_mmu, uint32_t, 2)
VBTS_STORE_HELPER(helper_le_stl_mmu, uint32_t, 4)
VBTS_STORE_HELPER(helper_le_stq_mmu, uint64_t, 8)
#undef VBTS_STORE_HELPER

// Loads through QEMU's slow path (MMIO among them): the return address for
// TcgCallbacks::SettleForDevice.
#define VBTS_LOAD_HELPER(name, size)                                                  \
  uint64_t name##_x86_64(void* env, uint64_t addr, uint32_t oi, uintptr_t retaddr) { \
    using Fn = uint64_t (*)(void*, uint64_t, uint32_t, uintptr_t);                    \
    static const auto original = vbts::vcpu::Original<Fn>(#name "_x86_64");          \
    vbts::vcpu::t_access_ra = retaddr;                                                \
    vbts::vcpu::t_access_addr = addr;                                                 \
    vbts::vcpu::t_access_size = size;                                                 \
    const uint64_t v = original(env, addr, oi, retaddr);                              \
    vbts::vcpu::t_access_ra = 0;                                                      \
    vbts::vcpu::t_access_size = 0;                                                    \
    return v;                                                                         \
  }
VBTS_LOAD_HELPER(helper_ret_ldub_mmu, 1)
VBTS_LOAD_HELPER(helper_le_lduw_mmu, 2)
VBTS_LOAD_HELPER(helper_le_ldul_mmu, 4)
VBTS_LOAD_HELPER(helper_le_ldq_mmu, 8)
VBTS_LOAD_HELPER(helper_ret_ldsb_mmu, 1)
VBTS_LOAD_HELPER(helper_le_ldsw_mmu, 2)
VBTS_LOAD_HELPER(helper_le_ldsl_mmu, 4)
#undef VBTS_LOAD_HELPER

// The guest accesses QEMU's helpers make themselves (FXSAVE, a far CALL's
// pushes, IRET's pops...): the return address the helper passes, for
// TcgCallbacks::RunAloneUnlessSeen.
#define VBTS_HELPER_LOAD(name, type, size)                                               \
  type name##_x86_64(void* env, uint64_t addr, int mmu_idx, uintptr_t ra) {              \
    using Fn = type (*)(void*, uint64_t, int, uintptr_t);                                \
    static const auto original = vbts::vcpu::Original<Fn>(#name "_x86_64");             \
    const uintptr_t outer = std::exchange(vbts::vcpu::t_helper_ra, vbts::vcpu::HelperRa(ra));                 \
    vbts::vcpu::t_access_addr = addr;                                                    \
    vbts::vcpu::t_access_size = size;                                                    \
    const type v = original(env, addr, mmu_idx, ra);                                     \
    vbts::vcpu::t_helper_ra = outer;                                                     \
    vbts::vcpu::t_access_size = 0;                                                       \
    return v;                                                                            \
  }
VBTS_HELPER_LOAD(cpu_ldub_mmuidx_ra, uint32_t, 1)
VBTS_HELPER_LOAD(cpu_ldsb_mmuidx_ra, int, 1)
VBTS_HELPER_LOAD(cpu_lduw_mmuidx_ra, uint32_t, 2)
VBTS_HELPER_LOAD(cpu_ldsw_mmuidx_ra, int, 2)
VBTS_HELPER_LOAD(cpu_ldq_mmuidx_ra, uint64_t, 8)
#undef VBTS_HELPER_LOAD
// ... and the upper word of a descriptor QEMU reads for a task switch's new
// CS (TcgCpu::ArmTaskSwitch).
uint32_t cpu_ldl_mmuidx_ra_x86_64(void* env, uint64_t addr, int mmu_idx, uintptr_t ra) {
  using Fn = uint32_t (*)(void*, uint64_t, int, uintptr_t);
  static const auto original = vbts::vcpu::Original<Fn>("cpu_ldl_mmuidx_ra_x86_64");
  const uintptr_t outer = std::exchange(vbts::vcpu::t_helper_ra, vbts::vcpu::HelperRa(ra));
  vbts::vcpu::t_access_addr = addr;
  vbts::vcpu::t_access_size = 4;
  uint32_t v = original(env, addr, mmu_idx, ra);
  vbts::vcpu::t_helper_ra = outer;
  vbts::vcpu::t_access_size = 0;
  if (vbts::vcpu::t_task_cs >= 0)
    if (vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env)) v = TcgCallbacks::TaskCsDescriptor(self, addr, v);
  return v;
}
#define VBTS_HELPER_STORE(name, type, size)                                              \
  void name##_x86_64(void* env, uint64_t addr, type val, int mmu_idx, uintptr_t ra) {    \
    using Fn = void (*)(void*, uint64_t, type, int, uintptr_t);                          \
    static const auto original = vbts::vcpu::Original<Fn>(#name "_x86_64");             \
    const uintptr_t outer = std::exchange(vbts::vcpu::t_helper_ra, vbts::vcpu::HelperRa(ra));                 \
    vbts::vcpu::t_access_addr = addr;                                                    \
    vbts::vcpu::t_access_size = size;                                                    \
    original(env, addr, val, mmu_idx, ra);                                               \
    vbts::vcpu::t_helper_ra = outer;                                                     \
    vbts::vcpu::t_access_size = 0;                                                       \
  }
VBTS_HELPER_STORE(cpu_stb_mmuidx_ra, uint32_t, 1)
VBTS_HELPER_STORE(cpu_stw_mmuidx_ra, uint32_t, 2)
VBTS_HELPER_STORE(cpu_stl_mmuidx_ra, uint32_t, 4)
VBTS_HELPER_STORE(cpu_stq_mmuidx_ra, uint64_t, 8)
#undef VBTS_HELPER_STORE

// IN: likewise.
#define VBTS_IN_HELPER(size)                                                                  \
  uint64_t helper_in##size##_x86_64(void* env, uint32_t port) {                               \
    using Fn = uint64_t (*)(void*, uint32_t);                                                 \
    static const auto original = vbts::vcpu::Original<Fn>("helper_in" #size "_x86_64");      \
    vbts::vcpu::t_access_ra = reinterpret_cast<uintptr_t>(__builtin_return_address(0));       \
    const uint64_t v = original(env, port);                                                   \
    vbts::vcpu::t_access_ra = 0;                                                              \
    return v;                                                                                 \
  }
VBTS_IN_HELPER(b)
VBTS_IN_HELPER(w)
VBTS_IN_HELPER(l)
#undef VBTS_IN_HELPER

// OUT: QEMU's helper (the device write, through Unicorn's OUT hook), then
// TcgCallbacks::AfterOut.
#define VBTS_OUT_HELPER(size)                                                                 \
  void helper_out##size##_x86_64(void* env, uint32_t port, uint32_t data) {                   \
    using Fn = void (*)(void*, uint32_t, uint32_t);                                           \
    static const auto original = vbts::vcpu::Original<Fn>("helper_out" #size "_x86_64");     \
    const uintptr_t ra = reinterpret_cast<uintptr_t>(__builtin_return_address(0));            \
    vbts::vcpu::t_access_ra = ra;                                                             \
    original(env, port, data);                                                                \
    vbts::vcpu::t_access_ra = 0;                                                              \
    if (vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env)) TcgCallbacks::AfterOut(self, ra); \
  }
VBTS_OUT_HELPER(b)
VBTS_OUT_HELPER(w)
VBTS_OUT_HELPER(l)
#undef VBTS_OUT_HELPER

void helper_hlt_x86_64(void* env, int next_eip_addend) {
  static const auto original = vbts::vcpu::Original<vbts::vcpu::HltFn>("helper_hlt_x86_64");
  if (vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env)) TcgCallbacks::Halted(self);
  original(env, next_eip_addend);
}

bool x86_cpu_exec_interrupt_x86_64(void* cpu, int interrupt_request) {
  using Fn = bool (*)(void*, int);
  static const auto original = vbts::vcpu::Original<Fn>("x86_cpu_exec_interrupt_x86_64");
  vbts::vcpu::TcgCpu* self = vbts::vcpu::t_running;
  if (self == nullptr || !TcgCallbacks::Owns(self, cpu)) return original(cpu, interrupt_request);
  return TcgCallbacks::ExecInterrupt(self, interrupt_request);
}

struct MemTxAttrs {
  uint32_t bits;
};
void tlb_set_page_with_attrs_x86_64(void* cpu, uint64_t vaddr, uint64_t /*qemu_paddr*/, MemTxAttrs attrs, int prot,
                                    int mmu_idx, uint64_t size) {
  using Fn = void (*)(void*, uint64_t, uint64_t, MemTxAttrs, int, int, uint64_t);
  static const auto original = vbts::vcpu::Original<Fn>("tlb_set_page_with_attrs_x86_64");
  const uint64_t paddr = TcgCallbacks::PhysicalPage(cpu, vaddr);
  original(cpu, vaddr, paddr, attrs, prot, mmu_idx, size);
  TcgCallbacks::StoresWithoutCodeCheck(cpu, vaddr, paddr, prot);
}

// IRET and far RET to an outer privilege level make ES, DS, FS and GS whose
// DPL is below the new CPL null (SDM vol. 2, IRET: "segment selector
// invalid"): the selector, not the hidden base, which in IA-32e mode is FS's
// and GS's own (their MSRs).  QEMU 5.0 also zeroes the base (validate_seg);
// kvm-unit-tests' per-CPU data behind GS is still there after ring 3 on
// hardware (debug.flat, kut.debug-tcg).  QEMU synced EIP before the helper,
// so a fault inside it is reported at the instruction.

void helper_iret_protected_x86_64(void* env, int shift, int next_eip) {
  using Fn = void (*)(void*, int, int);
  static const auto original = vbts::vcpu::Original<Fn>("helper_iret_protected_x86_64");
  vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env);
  if (self != nullptr) TcgCallbacks::ArmTaskReturn(self);
  TcgCallbacks::KeepFsGsBases(env, original, shift, next_eip, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

// Far JMP and CALL in protected mode: a TSS or a task gate target switches
// tasks (TcgCpu::ArmTaskSwitch). Tail calls (GETPC, as helper_load_seg); the
// arguments pass through as QEMU's translation put them in the registers.
void helper_ljmp_protected_x86_64(void* env, uint64_t new_cs, uint64_t new_eip, uint64_t next_eip) {
  using Fn = void (*)(void*, uint64_t, uint64_t, uint64_t);
  static const auto original = vbts::vcpu::Original<Fn>("helper_ljmp_protected_x86_64");
  if (vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env)) TcgCallbacks::ArmFarTransfer(self, static_cast<uint16_t>(new_cs));
  original(env, new_cs, new_eip, next_eip);
}
void helper_lcall_protected_x86_64(void* env, uint64_t new_cs, uint64_t new_eip, uint64_t shift, uint64_t next_eip) {
  using Fn = void (*)(void*, uint64_t, uint64_t, uint64_t, uint64_t);
  static const auto original = vbts::vcpu::Original<Fn>("helper_lcall_protected_x86_64");
  if (vbts::vcpu::TcgCpu* self = TcgCallbacks::Running(env)) TcgCallbacks::ArmFarTransfer(self, static_cast<uint16_t>(new_cs));
  original(env, new_cs, new_eip, shift, next_eip);
}

void helper_lret_protected_x86_64(void* env, int shift, int addend) {
  using Fn = void (*)(void*, int, int);
  static const auto original = vbts::vcpu::Original<Fn>("helper_lret_protected_x86_64");
  TcgCallbacks::KeepFsGsBases(env, original, shift, addend, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

// QEMU's TLB flushes (MOV to CR0/CR3/CR4, INVLPG, EFER, SMM, Unicorn's own
// memory-map changes all come through these two): the mappings code was
// fetched through may have changed (TcgCpu::PagingGeneration).
void tlb_flush_by_mmuidx_x86_64(void* cpu, uint16_t idxmap) {
  using Fn = void (*)(void*, uint16_t);
  static const auto original = vbts::vcpu::Original<Fn>("tlb_flush_by_mmuidx_x86_64");
  vbts::vcpu::g_paging_generation.fetch_add(1, std::memory_order_relaxed);
  original(cpu, idxmap);
}

void tlb_flush_page_by_mmuidx_x86_64(void* cpu, uint64_t addr, uint16_t idxmap) {
  using Fn = void (*)(void*, uint64_t, uint16_t);
  static const auto original = vbts::vcpu::Original<Fn>("tlb_flush_page_by_mmuidx_x86_64");
  vbts::vcpu::g_paging_generation.fetch_add(1, std::memory_order_relaxed);
  original(cpu, addr, idxmap);
}

// QEMU write-protects a RAM page for code when it links the first
// translation into it and unprotects it when the last one is dropped (the
// only two places either is called; Unicorn 2.0.1's unprotect does nothing
// itself): vbts keeps the same set of pages, so that its own stores to pages
// without code skip QEMU's invalidation (TcgCpu::InvalidateCodeBytes).
void tlb_protect_code_x86_64(void* uc, uint64_t ram_addr) {
  using Fn = void (*)(void*, uint64_t);
  static const auto original = vbts::vcpu::Original<Fn>("tlb_protect_code_x86_64");
  vbts::vcpu::g_code_bytes_generation.fetch_add(1, std::memory_order_relaxed);
  TcgCallbacks::CodePage(uc, ram_addr, true);
  original(uc, ram_addr);
}

// Every store to a page holding translations reaches one of these (guest
// stores through notdirty_write, vbts's through InvalidateCodeBytes and
// FlushCode): the bytes of translated code may have changed
// (TcgCpu::CodeBytesGeneration).
void tb_invalidate_phys_page_fast_x86_64(void* uc, void* pages, uint64_t start, int len, uintptr_t retaddr) {
  using Fn = void (*)(void*, void*, uint64_t, int, uintptr_t);
  static const auto original = vbts::vcpu::Original<Fn>("tb_invalidate_phys_page_fast_x86_64");
  // The kept block ends are decoded from these bytes: before they change.
  TcgCallbacks::BeforeCodeStore(uc, retaddr);
  vbts::vcpu::g_code_bytes_generation.fetch_add(1, std::memory_order_relaxed);
  vbts::vcpu::CodeWorkTimer timer;  // code-cache work, left out of the guest's host time
  original(uc, pages, start, len, retaddr);
}

void tb_invalidate_phys_page_range_x86_64(void* uc, uint64_t start, uint64_t end) {
  using Fn = void (*)(void*, uint64_t, uint64_t);
  static const auto original = vbts::vcpu::Original<Fn>("tb_invalidate_phys_page_range_x86_64");
  vbts::vcpu::g_code_bytes_generation.fetch_add(1, std::memory_order_relaxed);
  vbts::vcpu::CodeWorkTimer timer;  // code-cache work, left out of the guest's host time
  original(uc, start, end);
}

// QEMU empties its whole code buffer when a breakpoint is inserted or
// removed (breakpoint_invalidate); Unicorn 2.0.1's flush also zeroes the
// buffer (0.2 s, 2 s the first time). While vbts changes its breakpoints
// (TcgCpu::SyncDebugBreakpoints) the flush is noted instead, and vbts
// invalidates guest RAM's translations itself (FlushCode).
void tb_flush_x86_64(void* cpu) {
  using Fn = void (*)(void*);
  static const auto original = vbts::vcpu::Original<Fn>("tb_flush_x86_64");
  if (vbts::vcpu::TcgCallbacks::NoteFlush()) return;
  original(cpu);
}

// QEMU's watchpoints, which Unicorn 2.0.1 leaves empty: vbts's debugger
// watchpoints (TcgCallbacks::WatchedPage, DebugWatchCheck).
int cpu_watchpoint_address_matches_x86_64(void* cpu, uint64_t addr, uint64_t len) {
  vbts::vcpu::TcgCpu* self = vbts::vcpu::t_running;
  if (self == nullptr || !vbts::vcpu::TcgCallbacks::Owns(self, cpu)) self = vbts::vcpu::TcgCallbacks::Owner(cpu);
  return self != nullptr ? vbts::vcpu::TcgCallbacks::WatchedPage(self, addr, len) : 0;
}

void cpu_check_watchpoint_x86_64(void* cpu, uint64_t addr, uint64_t len, MemTxAttrs /*attrs*/, int flags,
                                 uintptr_t ra) {
  vbts::vcpu::TcgCpu* self = vbts::vcpu::t_running;
  if (self == nullptr || !vbts::vcpu::TcgCallbacks::Owns(self, cpu)) return;
  vbts::vcpu::TcgCallbacks::WatchCheck(self, addr, len, (flags & 2) != 0, ra);
}

// QEMU's handler of a debug exit (EXCP_DEBUG): one of vbts's debugger
// breakpoints (TcgCpu::SyncDebugBreakpoints) ends the run there.
void breakpoint_handler_x86_64(void* cs) {
  using Fn = void (*)(void*);
  static const auto original = vbts::vcpu::Original<Fn>("breakpoint_handler_x86_64");
  vbts::vcpu::TcgCpu* self = vbts::vcpu::t_running;
  if (self != nullptr && vbts::vcpu::TcgCallbacks::Owns(self, cs) && vbts::vcpu::TcgCallbacks::QemuBreakpoint(self))
    return;
  original(cs);
}

void tb_invalidate_phys_range_x86_64(void* uc, uint64_t start, uint64_t end) {
  using Fn = void (*)(void*, uint64_t, uint64_t);
  static const auto original = vbts::vcpu::Original<Fn>("tb_invalidate_phys_range_x86_64");
  vbts::vcpu::g_code_bytes_generation.fetch_add(1, std::memory_order_relaxed);
  vbts::vcpu::CodeWorkTimer timer;  // code-cache work, left out of the guest's host time
  original(uc, start, end);
}

void tlb_unprotect_code_x86_64(void* uc, uint64_t ram_addr) {
  using Fn = void (*)(void*, uint64_t);
  static const auto original = vbts::vcpu::Original<Fn>("tlb_unprotect_code_x86_64");
  original(uc, ram_addr);
  TcgCallbacks::CodePage(uc, ram_addr, false);
}

// The translator loop QEMU's gen_intermediate_code runs, with vbts's
// translate_insn around QEMU's (TcgCallbacks::TranslateInsn).
void translator_loop_x86_64(const void* ops, void* db, void* cpu, void* tb, int max_insns) {
  using Fn = void (*)(const void*, void*, void*, void*, int);
  static const auto original = vbts::vcpu::Original<Fn>("translator_loop_x86_64");
  static vbts::vcpu::uabi::TranslatorOps wrapped{};
  static const void* wrapped_from = nullptr;
  if (ops != wrapped_from) {  // x86 has one TranslatorOps; copied once
    wrapped = *static_cast<const vbts::vcpu::uabi::TranslatorOps*>(ops);
    vbts::vcpu::t_translate_insn = wrapped.translate_insn;
    wrapped.translate_insn = &TcgCallbacks::TranslateInsn;
    wrapped_from = ops;
  }
  vbts::vcpu::CodeWorkTimer timer;
  TcgCallbacks::BeginTranslation(cpu, tb);
  original(&wrapped, db, cpu, tb, max_insns);
  TcgCallbacks::EndTranslation(db);
  // The block's pc and size where unicorn_abi.h pins them (LastLookupBlock):
  // translator_loop has just set them from the context's first and next pc.
  const auto* base = static_cast<const vbts::vcpu::uabi::DisasContextBasePrefix*>(db);
  const bool ok = vbts::vcpu::At<uint64_t>(tb, vbts::vcpu::uabi::kTbPc) == base->pc_first &&
                  vbts::vcpu::At<uint16_t>(tb, vbts::vcpu::uabi::kTbSize) == static_cast<uint16_t>(base->pc_next - base->pc_first);
  if (!ok) vbts::vcpu::g_tb_layout.store(-1, std::memory_order_relaxed);
  else if (vbts::vcpu::g_tb_layout.load(std::memory_order_relaxed) == 0) vbts::vcpu::g_tb_layout.store(1, std::memory_order_relaxed);
}

// QEMU's search for the block a branch to another page (or an indirect one)
// goes to: its return address is in the block the branch ends, which
// TcgCpu::FaultAtTheBranch needs when no block hook reports blocks.
// (Called at every indirect branch: the original is resolved once, when the
// first engine is made, so that this is a store and a jump.)
void* helper_lookup_tb_ptr_x86_64(void* env) {
  vbts::vcpu::t_lookup_ra = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  return vbts::vcpu::g_lookup_tb_ptr(env);
}

// Each translation block QEMU allocates in its code buffer: the engine
// learns its TCGContext (TcgCpu::ReclaimCode).
void* tcg_tb_alloc_x86_64(void* s) {
  using Fn = void* (*)(void*);
  static const auto original = vbts::vcpu::Original<Fn>("tcg_tb_alloc_x86_64");
  if (vbts::vcpu::TcgCpu* self = vbts::vcpu::t_running) TcgCallbacks::TcgContext(self, s);
  void* tb = original(s);
  if (vbts::vcpu::TcgCpu* self = vbts::vcpu::t_running; self != nullptr && tb != nullptr)
    TcgCallbacks::TbAllocated(self, tb);
  return tb;
}


// Every opcode byte the translator fetches.
uint32_t cpu_ldub_code_x86_64(void* env, uint64_t addr) {
  using Fn = uint32_t (*)(void*, uint64_t);
  static const auto original = vbts::vcpu::Original<Fn>("cpu_ldub_code_x86_64");
  const uint64_t at = vbts::vcpu::t_substitute_at;
  if (at != vbts::vcpu::kNoSubstitute && addr - at < 2) return addr == at ? 0x0F : 0x0B;  // UD2
  return original(env, addr);
}

// The guest loads and stores the translator generates: MO_ALIGN_16 on the
// first of an SSE instruction that needs its m128 operand aligned
// (TcgCallbacks::TranslateInsn; QEMU 5.0 splits an m128 access into two
// 64-bit ones, the first at the operand's address).
#define VBTS_ALIGNING_GENERATOR(name)                                                    \
  void name##_x86_64(void* tcg, void* val, void* addr, uintptr_t idx, int memop) {       \
    using Fn = void (*)(void*, void*, void*, uintptr_t, int);                            \
    static const auto original = vbts::vcpu::Original<Fn>(#name "_x86_64");             \
    if (vbts::vcpu::t_align16) {                                                         \
      memop = (memop & ~vbts::vcpu::kMoAmask) | vbts::vcpu::kMoAlign16;                  \
      vbts::vcpu::t_align16 = false;                                                     \
    }                                                                                    \
    original(tcg, val, addr, idx, memop);                                                \
  }
VBTS_ALIGNING_GENERATOR(tcg_gen_qemu_ld_i64)
VBTS_ALIGNING_GENERATOR(tcg_gen_qemu_st_i64)
#undef VBTS_ALIGNING_GENERATOR

// Unicorn's check of QEMU's exit request after every guest load and store
// (and after each code hook) that a translation makes: where it fires, the
// block is left in the middle of an instruction, its registers partly
// updated, and libunicorn does not put EIP back (item 2 of "What vbts relies
// on", docs/tcg-engine.md). vbts never asks QEMU to exit from outside a block
// (its stops leave by longjmp at a block start or an instruction boundary),
// so the checks are not generated: one load, compare and branch fewer per
// guest memory access. (QEMU's own check at each block's start stays.)
void check_exit_request_x86_64(void*) {}

// QEMU's restart of the current instruction in a new block (its precise
// self-modifying-code path in tb_invalidate_phys_page_fast, and
// cpu_io_recompile): EIP is the instruction's (TcgCallbacks::Restarted).
[[noreturn]] void cpu_loop_exit_noexc_x86_64(void* cpu) {
  if (vbts::vcpu::TcgCpu* self = vbts::vcpu::t_running) TcgCallbacks::Restarted(self);
  vbts::vcpu::QemuLoopExitNoexc(cpu);
}

void qemu_system_reset_request(void* uc) {
  static const auto original = vbts::vcpu::Original<vbts::vcpu::ResetFn>("qemu_system_reset_request");
  if (vbts::vcpu::TcgCpu* self = vbts::vcpu::t_running) TcgCallbacks::TripleFault(self);
  original(uc);
}
}  // extern "C"

namespace vbts::vcpu {

bool TcgCpu::CpuMsrWriteFaults(uint32_t index, uint64_t value) {
  // What QEMU 5.0's WRMSR does not check (SDM vol. 4 and vol. 3A 2.2.1).
  switch (index) {
    case kMsrFsBase: case kMsrGsBase: case kMsrKernelGsBase: case kMsrLstar: case kMsrCstar:
    case kMsrSysenterEsp: case kMsrSysenterEip:
      return !pmu::IsCanonical(value);  // a linear address: #GP if not canonical
    case kMsrEfer:
      return (value & ~(kEferSce | kEferLme | kEferLma | kEferNxe)) != 0;  // reserved bits
    case kMsrTscAux:
      return (value >> 32) != 0;
    case kMsrPat:
      // Each entry a valid memory type: 0 UC, 1 WC, 4 WT, 5 WP, 6 WB, 7 UC-.
      for (int i = 0; i < 8; i++) {
        const uint64_t t = (value >> (8 * i)) & 0xFF;
        if (t == 2 || t == 3 || t > 7) return true;
      }
      return false;
    default:
      return false;
  }
}

int TcgCpu::UnicornModelFor(const std::string& vbts_model) {
  // Nehalem/Westmere, Yonah (QEMU's "coreduo": 32-bit only, as the real
  // Core Duo), Skylake client, Ice Lake server; anything else gets QEMU's generic 64-bit CPU.
  if (vbts_model == "westmere") return UC_CPU_X86_WESTMERE;
  if (vbts_model == "core-duo") return UC_CPU_X86_COREDUO;
  // No NetBurst in QEMU 5.0: its 32-bit generic CPU (SSE3, no long mode).
  if (vbts_model == "pentium4") return UC_CPU_X86_QEMU32;
  if (vbts_model == "skylake") return UC_CPU_X86_SKYLAKE_CLIENT;
  if (vbts_model == "icelake-server") return UC_CPU_X86_ICELAKE_SERVER;
  return UC_CPU_X86_QEMU64;
}

bool TcgCpu::OwnsMsr(uint32_t index) {
  switch (index) {
    case kMsrTsc: case kMsrSysenterCs: case kMsrSysenterEsp: case kMsrSysenterEip: case kMsrPat:
    case kMsrEfer: case kMsrStar: case kMsrLstar: case kMsrCstar: case kMsrFmask:
    case kMsrFsBase: case kMsrGsBase: case kMsrKernelGsBase: case kMsrTscAux:
      return true;
    default:
      return false;
  }
}

TcgCpu::TcgCpu(const Config& config) : config_(config), code_pages_((config.ram_bytes / 4096 + 63) / 64, 0) {}

TcgCpu::~TcgCpu() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    watch_quit_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  {
    std::lock_guard<std::mutex> lock(g_engines_mu);
    std::erase(Engines(), this);
  }
  if (uc_ != nullptr) {
    // QEMU's breakpoints are its allocations, which uc_close leaves.
    SetQemuBreakpoints(qemu_bps_, {}, uabi::kBpGdb, /*invalidate=*/false);
    SetQemuBreakpoints(guest_exec_addrs_, {}, uabi::kBpCpu, /*invalidate=*/false);
    uc_close(uc_);
  }
}

absl::StatusOr<std::unique_ptr<TcgCpu>> TcgCpu::Create(const Config& config) {
  if (config.ram == nullptr || config.ram_bytes == 0 || config.ram_bytes % 4096 != 0 ||
      config.devices == nullptr) {
    return absl::InvalidArgumentError("TCG engine: RAM (page-aligned) and devices are required");
  }
  if (g_lookup_tb_ptr == nullptr) {
    g_lookup_tb_ptr = Original<void* (*)(void*)>("helper_lookup_tb_ptr_x86_64");
    if (g_lookup_tb_ptr == nullptr)
      return absl::FailedPreconditionError("TCG engine: libunicorn has no helper_lookup_tb_ptr_x86_64");
  }
  unsigned major = 0, minor = 0;
  const unsigned v = uc_version(&major, &minor);
  const unsigned patch = (v >> 8) & 0xff;  // major << 24 | minor << 16 | patch << 8 | extra
  if (major != uabi::kMajor || minor != uabi::kMinor || patch != uabi::kPatch) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "TCG engine: libunicorn %u.%u.%u is not the 2.0.1 whose internals vbts was built against "
        "(docs/tcg-engine.md)", major, minor, patch));
  }
  std::unique_ptr<TcgCpu> cpu(new TcgCpu(config));
  VBTS_RETURN_IF_ERROR(cpu->Init());
  cpu->watcher_ = std::thread([p = cpu.get()] { p->Watch(); });
  return cpu;
}

uint64_t TcgCpu::mmio_base() const { return config_.ram_bytes; }

absl::Status TcgCpu::Init() {
  uc_err e = uc_open(UC_ARCH_X86, UC_MODE_64, &uc_);
  if (e != UC_ERR_OK) return UcError(e, "uc_open");
  e = uc_ctl_set_cpu_model(uc_, config_.uc_cpu_model);
  if (e != UC_ERR_OK) return UcError(e, "CPU model");
  e = uc_mem_map_ptr(uc_, 0, config_.ram_bytes, UC_PROT_ALL, config_.ram);
  if (e != UC_ERR_OK) return UcError(e, "mapping guest RAM");
  constexpr uint64_t k4G = 1ull << 32;
  if (mmio_base() < k4G) {
    e = uc_mmio_map(uc_, mmio_base(), k4G - mmio_base(), &TcgCallbacks::MmioRead, this,
                    &TcgCallbacks::MmioWrite, this);
    if (e != UC_ERR_OK) return UcError(e, "mapping the MMIO hole");
  }
  cpu_ = At<void*>(uc_, uabi::kUcCpu);
  if (cpu_ == nullptr) return absl::InternalError("TCG engine: libunicorn's CPU is not where unicorn_abi.h says");
  env_ = At<uabi::EnvPrefix*>(cpu_, uabi::kCpuEnvPtr);
  VBTS_RETURN_IF_ERROR(SelfCheck());
  SetFeatureWords();
  {
    std::lock_guard<std::mutex> lock(g_engines_mu);
    Engines().push_back(this);
  }
  At<void*>(uc_, uabi::kUcStopInterrupt) = nullptr;
  At<void*>(uc_, uabi::kUcMemRedirect) = reinterpret_cast<void*>(&RedirectToRam);
  At<void*>(cpu_class_, uabi::kClassDoUnalignedAccess) = reinterpret_cast<void*>(&TcgCallbacks::Unaligned);

  // No exit addresses: with uc_emu_start's "until" Unicorn invalidates the
  // translation at until-1 after every run, a walk that would #PF under the
  // guest's paging and overwrite CR2.  Runs end at stops only.
  e = uc_ctl_exits_enable(uc_);
  if (e != UC_ERR_OK) return UcError(e, "disabling exit addresses");
  uc_hook h;
  e = uc_hook_add(uc_, &h, UC_HOOK_INTR, reinterpret_cast<void*>(&TcgCallbacks::Intr), this, 1, 0);
  if (e == UC_ERR_OK) {
    e = uc_hook_add(uc_, &h, UC_HOOK_BLOCK, reinterpret_cast<void*>(&TcgCallbacks::Block), this, 1, 0);
    block_hook_ = h;
    // The record Unicorn's inline-call generator reads for one call a block
    // (its type and callback: uc_add_inline_hook).
    static_assert(sizeof(uabi::HookPrefix) <= sizeof(count_call_hook_));
    uabi::HookPrefix count_hook{};
    count_hook.type = UC_HOOK_CODE;
    count_hook.callback = reinterpret_cast<void*>(&TcgCallbacks::CountCall);
    count_hook.user_data = this;
    std::memcpy(count_call_hook_, &count_hook, sizeof count_hook);
    // Runs leave it out through its to_delete flag (SyncBlockHook): only where
    // the handle shows the layout unicorn_abi.h pins.
    if (e == UC_ERR_OK && !CatchAllHookAsPinned(h, UC_HOOK_BLOCK, reinterpret_cast<void*>(&TcgCallbacks::Block), this))
      config_.drop_block_hook = false;
  }
  if (e == UC_ERR_OK)
    e = uc_hook_add(uc_, &h, UC_HOOK_INSN, reinterpret_cast<void*>(&TcgCallbacks::In), this, 1, 0, UC_X86_INS_IN);
  if (e == UC_ERR_OK)
    e = uc_hook_add(uc_, &h, UC_HOOK_INSN, reinterpret_cast<void*>(&TcgCallbacks::Out), this, 1, 0, UC_X86_INS_OUT);
  if (e == UC_ERR_OK)
    e = uc_hook_add(uc_, &h, UC_HOOK_INSN, reinterpret_cast<void*>(&TcgCallbacks::Cpuid), this, 1, 0,
                    UC_X86_INS_CPUID);
  if (e != UC_ERR_OK) return UcError(e, "installing hooks");
  return absl::OkStatus();
}

void TcgCpu::SetFeatureWords() {
  // QEMU decodes and checks by its own model's feature words (POPCNT,
  // MOVBE, RDTSCP, BMI, SMAP, 1-GiB pages, ...), and Unicorn 2.0.1's are not
  // even its model's (its Westmere lacks POPCNT, SSE3 and the x87 bit, and
  // has BMI1/2, ADX and SMAP). The guest reads CPUID from vbts's model, so
  // TCG must execute by the same bits: an instruction the model has runs, one
  // it lacks is #UD (where QEMU 5.0 implements the check). The XSAVE state
  // components stay QEMU's: XSETBV accepts only what its XSAVE writes.
  TcgDevices* d = config_.devices;
  uint64_t* f = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(env_) + uabi::kEnvFeatures);
  const uint32_t max = d->Cpuid(0, 0).eax, max_ext = d->Cpuid(0x80000000, 0).eax;
  const CpuidResult l1 = d->Cpuid(1, 0);
  f[uabi::kFeat1Edx] = l1.edx;
  f[uabi::kFeat1Ecx] = l1.ecx;
  const CpuidResult l7 = max >= 7 ? d->Cpuid(7, 0) : CpuidResult{};
  f[uabi::kFeat70Ebx] = l7.ebx;
  f[uabi::kFeat70Ecx] = l7.ecx;
  f[uabi::kFeat70Edx] = l7.edx;
  f[uabi::kFeat71Eax] = max >= 7 && l7.eax >= 1 ? d->Cpuid(7, 1).eax : 0;
  const CpuidResult e1 = max_ext >= 0x80000001 ? d->Cpuid(0x80000001, 0) : CpuidResult{};
  f[uabi::kFeat80000001Edx] = e1.edx;
  f[uabi::kFeat80000001Ecx] = e1.ecx;
  f[uabi::kFeatXsave] = max >= 0xD ? d->Cpuid(0xD, 1).eax : 0;
}

absl::Status TcgCpu::SelfCheck() {
  auto fail = [](const std::string& what) {
    return absl::FailedPreconditionError("TCG engine: libunicorn is not laid out as vbts expects (" + what +
                                         "; docs/tcg-engine.md)");
  };
  // The CPU state: values written through the API must appear in place.
  const uint64_t magic = 0x5566778899aabbccull;
  uc_reg_write(uc_, UC_X86_REG_RBX, &magic);
  uc_x86_mmr gdtr{0, 0x123000, 0x1ff, 0};
  uc_reg_write(uc_, UC_X86_REG_GDTR, &gdtr);
  if (env_->regs[kRbx] != magic || env_->gdt.base != 0x123000 || env_->gdt.limit != 0x1ff) {
    return fail("CPU state");
  }
  env_->regs[kRbx] = 0;
  uint64_t dr[8];
  for (int i = 0; i < 8; i++) {
    dr[i] = magic + static_cast<uint64_t>(i);
    uc_reg_write(uc_, UC_X86_REG_DR0 + i, &dr[i]);
  }
  const size_t limit = uc_context_size(uc_);
  for (size_t off = sizeof(uabi::EnvPrefix); off + sizeof dr < limit; off += 8) {
    if (std::memcmp(reinterpret_cast<char*>(env_) + off, dr, sizeof dr) == 0) {
      error_code_offset_ = off - 16;
      break;
    }
  }
  if (error_code_offset_ == 0) return fail("debug registers");
  // QEMU's reset leaves no exception in flight: old_exception = -1.
  if (At<int32_t>(env_, error_code_offset_ + uabi::kOldExceptionAfterErrorCode) != -1) return fail("old_exception");
  const uint64_t zero = 0;
  for (int i = 0; i < 8; i++) uc_reg_write(uc_, UC_X86_REG_DR0 + i, &zero);
  // The two fields of Unicorn's own struct: x86's stop_interrupt is set
  // (a function in libunicorn), mem_redirect is not (only MIPS sets it).
  void* stop = At<void*>(uc_, uabi::kUcStopInterrupt);
  Dl_info info{};
  Dl_info lib{};
  if (stop == nullptr || dladdr(stop, &info) == 0 ||
      dladdr(reinterpret_cast<void*>(&uc_open), &lib) == 0 || info.dli_fbase != lib.dli_fbase) {
    return fail("stop_interrupt");
  }
  if (At<void*>(uc_, uabi::kUcMemRedirect) != nullptr) return fail("mem_redirect");
  // CPUState.icount_decr_ptr, right after env_ptr: QEMU's X86CPU puts its
  // IcountDecr last in `neg`, just before CPUX86State, with no exit
  // requested at rest.  Otherwise: no one call a block (CountCallAllowedForRun).
  {
    const auto env_at = reinterpret_cast<uintptr_t>(env_);
    const uintptr_t p = At<uintptr_t>(cpu_, uabi::kCpuIcountDecrPtr);
    const bool ok = p >= env_at - 64 && p < env_at && p % 4 == 0 && *reinterpret_cast<const int32_t*>(p) == 0;
    icount_decr_ = ok ? reinterpret_cast<const volatile int32_t*>(p) : nullptr;
  }

  // QEMU's CPU reset leaves cflags_next_tb at -1 (no request), next to
  // interrupt_request (TcgCallbacks::RunAloneUnlessSeen stores 1 there).
  if (At<int32_t>(cpu_, uabi::kCpuCflagsNextTb) != -1) return fail("cflags_next_tb");
  // CPUState's uc and cc (the CPU's class) are adjacent fields before the
  // architecture state: the class is the one whose do_interrupt is x86's
  // and whose do_unaligned_access is unset (vbts sets it in Init).
  {
    const char* c = static_cast<const char*>(cpu_);
    const char* end = reinterpret_cast<const char*>(env_);
    for (size_t off = uabi::kCpuEnvPtr + 8; c + off + 16 <= end && cpu_class_ == nullptr; off += 8) {
      if (At<void*>(cpu_, off) != uc_) continue;
      void* cls = At<void*>(cpu_, off + 8);
      Dl_info sym{};
      if (cls != nullptr && dladdr(At<void*>(cls, uabi::kClassDoInterrupt), &sym) != 0 && sym.dli_sname != nullptr &&
          std::strcmp(sym.dli_sname, "x86_cpu_do_interrupt_x86_64") == 0 &&
          At<void*>(cls, uabi::kClassDoUnalignedAccess) == nullptr) {
        cpu_class_ = cls;
      }
    }
    if (cpu_class_ == nullptr) return fail("CPUState.cc");
  }
  // The feature words follow cpuid_vendor1..3 and cpuid_version.
  {
    const char* vendor = reinterpret_cast<const char*>(env_) + uabi::kEnvFeatures - 16;
    if (std::memcmp(vendor, "Genu", 4) != 0 && std::memcmp(vendor, "Auth", 4) != 0) return fail("CPUID feature words");
  }
  // The helpers this file defines must be the ones QEMU calls.
  for (const auto& [name, ours] : {std::pair<const char*, void*>{"helper_rdmsr_x86_64", reinterpret_cast<void*>(&helper_rdmsr_x86_64)},
                                   {"helper_wrmsr_x86_64", reinterpret_cast<void*>(&helper_wrmsr_x86_64)},
                                   {"helper_hlt_x86_64", reinterpret_cast<void*>(&helper_hlt_x86_64)},
                                   {"qemu_system_reset_request", reinterpret_cast<void*>(&qemu_system_reset_request)},
                                   {"cpu_loop_exit_noexc_x86_64", reinterpret_cast<void*>(&cpu_loop_exit_noexc_x86_64)},
                                   {"check_exit_request_x86_64", reinterpret_cast<void*>(&check_exit_request_x86_64)},
                                   {"translator_loop_x86_64", reinterpret_cast<void*>(&translator_loop_x86_64)},
                                   {"cpu_ldub_code_x86_64", reinterpret_cast<void*>(&cpu_ldub_code_x86_64)},
                                   {"tcg_tb_alloc_x86_64", reinterpret_cast<void*>(&tcg_tb_alloc_x86_64)},
                                   {"helper_ret_ldub_mmu_x86_64", reinterpret_cast<void*>(&helper_ret_ldub_mmu_x86_64)},
                                   {"helper_le_lduw_mmu_x86_64", reinterpret_cast<void*>(&helper_le_lduw_mmu_x86_64)},
                                   {"helper_le_ldul_mmu_x86_64", reinterpret_cast<void*>(&helper_le_ldul_mmu_x86_64)},
                                   {"helper_le_ldq_mmu_x86_64", reinterpret_cast<void*>(&helper_le_ldq_mmu_x86_64)},
                                   {"helper_ret_ldsb_mmu_x86_64", reinterpret_cast<void*>(&helper_ret_ldsb_mmu_x86_64)},
                                   {"helper_le_ldsw_mmu_x86_64", reinterpret_cast<void*>(&helper_le_ldsw_mmu_x86_64)},
                                   {"helper_le_ldsl_mmu_x86_64", reinterpret_cast<void*>(&helper_le_ldsl_mmu_x86_64)},
                                   {"helper_inb_x86_64", reinterpret_cast<void*>(&helper_inb_x86_64)},
                                   {"helper_inw_x86_64", reinterpret_cast<void*>(&helper_inw_x86_64)},
                                   {"helper_inl_x86_64", reinterpret_cast<void*>(&helper_inl_x86_64)},
                                   {"tlb_set_page_with_attrs_x86_64", reinterpret_cast<void*>(&tlb_set_page_with_attrs_x86_64)},
                                   {"tb_flush_x86_64", reinterpret_cast<void*>(&tb_flush_x86_64)},
                                   {"breakpoint_handler_x86_64", reinterpret_cast<void*>(&breakpoint_handler_x86_64)},
                                   {"cpu_watchpoint_address_matches_x86_64", reinterpret_cast<void*>(&cpu_watchpoint_address_matches_x86_64)},
                                   {"cpu_check_watchpoint_x86_64", reinterpret_cast<void*>(&cpu_check_watchpoint_x86_64)},
                                   {"tlb_flush_by_mmuidx_x86_64", reinterpret_cast<void*>(&tlb_flush_by_mmuidx_x86_64)},
                                   {"helper_iret_protected_x86_64", reinterpret_cast<void*>(&helper_iret_protected_x86_64)},
                                   {"helper_ljmp_protected_x86_64", reinterpret_cast<void*>(&helper_ljmp_protected_x86_64)},
                                   {"helper_lcall_protected_x86_64", reinterpret_cast<void*>(&helper_lcall_protected_x86_64)},
                                   {"helper_lret_protected_x86_64", reinterpret_cast<void*>(&helper_lret_protected_x86_64)},
                                   {"tlb_flush_page_by_mmuidx_x86_64", reinterpret_cast<void*>(&tlb_flush_page_by_mmuidx_x86_64)},
                                   {"tlb_protect_code_x86_64", reinterpret_cast<void*>(&tlb_protect_code_x86_64)},
                                   {"tlb_unprotect_code_x86_64", reinterpret_cast<void*>(&tlb_unprotect_code_x86_64)},
                                   {"tb_invalidate_phys_page_fast_x86_64", reinterpret_cast<void*>(&tb_invalidate_phys_page_fast_x86_64)},
                                   {"tb_invalidate_phys_page_range_x86_64", reinterpret_cast<void*>(&tb_invalidate_phys_page_range_x86_64)},
                                   {"tb_invalidate_phys_range_x86_64", reinterpret_cast<void*>(&tb_invalidate_phys_range_x86_64)},
                                   {"helper_raise_interrupt_x86_64", reinterpret_cast<void*>(&helper_raise_interrupt_x86_64)},
                                   {"helper_into_x86_64", reinterpret_cast<void*>(&helper_into_x86_64)},
                                   {"x86_cpu_exec_interrupt_x86_64", reinterpret_cast<void*>(&x86_cpu_exec_interrupt_x86_64)},
                                   {"helper_single_step_x86_64", reinterpret_cast<void*>(&helper_single_step_x86_64)},
                                   {"helper_set_dr_x86_64", reinterpret_cast<void*>(&helper_set_dr_x86_64)},
                                   {"helper_write_crN_x86_64", reinterpret_cast<void*>(&helper_write_crN_x86_64)},
                                   {"helper_read_crN_x86_64", reinterpret_cast<void*>(&helper_read_crN_x86_64)},
                                   {"helper_ltr_x86_64", reinterpret_cast<void*>(&helper_ltr_x86_64)},
                                   {"helper_read_eflags_x86_64", reinterpret_cast<void*>(&helper_read_eflags_x86_64)},
                                   {"helper_lldt_x86_64", reinterpret_cast<void*>(&helper_lldt_x86_64)},
                                   {"helper_rdpmc_x86_64", reinterpret_cast<void*>(&helper_rdpmc_x86_64)},
                                   {"helper_rdtsc_x86_64", reinterpret_cast<void*>(&helper_rdtsc_x86_64)},
                                   {"helper_lookup_tb_ptr_x86_64", reinterpret_cast<void*>(&helper_lookup_tb_ptr_x86_64)},
                                   {"helper_load_seg_x86_64", reinterpret_cast<void*>(&helper_load_seg_x86_64)},
                                   {"helper_sti_x86_64", reinterpret_cast<void*>(&helper_sti_x86_64)},
                                   {"helper_rdtscp_x86_64", reinterpret_cast<void*>(&helper_rdtscp_x86_64)},
                                   {"helper_syscall_x86_64", reinterpret_cast<void*>(&helper_syscall_x86_64)},
                                   {"helper_sysenter_x86_64", reinterpret_cast<void*>(&helper_sysenter_x86_64)},
                                   {"helper_rechecking_single_step_x86_64", reinterpret_cast<void*>(&helper_rechecking_single_step_x86_64)},
                                   {"helper_outb_x86_64", reinterpret_cast<void*>(&helper_outb_x86_64)},
                                   {"helper_outw_x86_64", reinterpret_cast<void*>(&helper_outw_x86_64)},
                                   {"helper_outl_x86_64", reinterpret_cast<void*>(&helper_outl_x86_64)},
                                   {"helper_ret_stb_mmu_x86_64", reinterpret_cast<void*>(&helper_ret_stb_mmu_x86_64)},
                                   {"helper_le_stw_mmu_x86_64", reinterpret_cast<void*>(&helper_le_stw_mmu_x86_64)},
                                   {"helper_le_stl_mmu_x86_64", reinterpret_cast<void*>(&helper_le_stl_mmu_x86_64)},
                                   {"helper_le_stq_mmu_x86_64", reinterpret_cast<void*>(&helper_le_stq_mmu_x86_64)},
                                   {"cpu_ldub_mmuidx_ra_x86_64", reinterpret_cast<void*>(&cpu_ldub_mmuidx_ra_x86_64)},
                                   {"cpu_ldsb_mmuidx_ra_x86_64", reinterpret_cast<void*>(&cpu_ldsb_mmuidx_ra_x86_64)},
                                   {"cpu_lduw_mmuidx_ra_x86_64", reinterpret_cast<void*>(&cpu_lduw_mmuidx_ra_x86_64)},
                                   {"cpu_ldsw_mmuidx_ra_x86_64", reinterpret_cast<void*>(&cpu_ldsw_mmuidx_ra_x86_64)},
                                   {"cpu_ldl_mmuidx_ra_x86_64", reinterpret_cast<void*>(&cpu_ldl_mmuidx_ra_x86_64)},
                                   {"cpu_ldq_mmuidx_ra_x86_64", reinterpret_cast<void*>(&cpu_ldq_mmuidx_ra_x86_64)},
                                   {"cpu_stb_mmuidx_ra_x86_64", reinterpret_cast<void*>(&cpu_stb_mmuidx_ra_x86_64)},
                                   {"cpu_stw_mmuidx_ra_x86_64", reinterpret_cast<void*>(&cpu_stw_mmuidx_ra_x86_64)},
                                   {"cpu_stl_mmuidx_ra_x86_64", reinterpret_cast<void*>(&cpu_stl_mmuidx_ra_x86_64)},
                                   {"cpu_stq_mmuidx_ra_x86_64", reinterpret_cast<void*>(&cpu_stq_mmuidx_ra_x86_64)},
                                   {"tcg_gen_qemu_ld_i64_x86_64", reinterpret_cast<void*>(&tcg_gen_qemu_ld_i64_x86_64)},
                                   {"tcg_gen_qemu_st_i64_x86_64", reinterpret_cast<void*>(&tcg_gen_qemu_st_i64_x86_64)}}) {
    if (dlsym(RTLD_DEFAULT, name) != ours) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "TCG engine: %s is not exported by this executable (link with vcpu/unicorn_interpose.list)", name));
    }
  }
  return absl::OkStatus();
}

absl::Status TcgCpu::SetState(const CpuState& st) {
  for (int i = 0; i < 16; i++) env_->regs[i] = st.gpr[i];
  env_->eip = st.rip;
  const Segment* segs[6] = {&st.es, &st.cs, &st.ss, &st.ds, &st.fs, &st.gs};
  for (int i = 0; i < 6; i++) env_->segs[i] = ToCache(*segs[i]);
  env_->ldt = ToCache(st.ldtr);
  // QEMU keeps TR's type as "available" (helper_ltr caches the descriptor
  // before it sets the busy bit in memory, and its delivery code insists on
  // it); KVM and the architecture say busy.
  env_->tr = ToCache(st.tr);
  if ((st.tr.type & 5) == 1) env_->tr.flags &= ~(2u << 8);
  env_->gdt = uabi::SegCache{0, st.gdtr.base, st.gdtr.limit, 0};
  env_->idt = uabi::SegCache{0, st.idtr.base, st.idtr.limit, 0};
  env_->efer = st.efer;
  env_->cr[0] = st.cr0;
  env_->cr[2] = st.cr2;
  env_->cr[3] = st.cr3;
  cpu_x86_update_cr4_x86_64(env_, static_cast<uint32_t>(st.cr4));
  if (env_->cr[4] != st.cr4) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "TCG engine: the CPU model does not accept CR4=%#x (it keeps %#x)", st.cr4, env_->cr[4]));
  }
  uint64_t rflags = st.rflags;
  uc_reg_write(uc_, UC_X86_REG_RFLAGS, &rflags);
  x86_update_hflags_x86_64(env_);
  if (st.interrupt_shadow) env_->hflags |= uabi::kHfInhibitIrq; else env_->hflags &= ~uabi::kHfInhibitIrq;
  if (st.nmi_masked) env_->hflags2 |= uabi::kHf2Nmi; else env_->hflags2 &= ~uabi::kHf2Nmi;
  const std::pair<uint32_t, uint64_t> msrs[] = {
      {kMsrStar, st.star}, {kMsrLstar, st.lstar}, {kMsrCstar, st.cstar}, {kMsrFmask, st.sfmask},
      {kMsrKernelGsBase, st.kernel_gs_base}, {kMsrSysenterCs, st.sysenter_cs},
      {kMsrSysenterEsp, st.sysenter_esp}, {kMsrSysenterEip, st.sysenter_eip}};
  for (const auto& [index, value] : msrs) {
    uc_x86_msr m{index, value};
    uc_err e = uc_reg_write(uc_, UC_X86_REG_MSR, &m);
    if (e != UC_ERR_OK) return UcError(e, "writing an MSR");
  }
  cr8_ = st.cr8;
  maxphyaddr_ = st.maxphyaddr;
  tlb_flush_x86_64(cpu_);
  return absl::OkStatus();
}

CpuState TcgCpu::GetState(bool with_msrs) {
  CpuState st;
  for (int i = 0; i < 16; i++) st.gpr[i] = env_->regs[i];
  st.rip = env_->eip;
  uc_reg_read(uc_, UC_X86_REG_RFLAGS, &st.rflags);
  Segment* segs[6] = {&st.es, &st.cs, &st.ss, &st.ds, &st.fs, &st.gs};
  for (int i = 0; i < 6; i++) *segs[i] = FromCache(env_->segs[i]);
  // CS.DPL is the CPL (CpuState::cpl(), as the completion engine and KVM
  // keep it): QEMU loads a conforming CS with its descriptor's DPL and keeps
  // the CPL in hflags (a far CALL from ring 3 into a conforming DPL-0 segment).
  st.cs.dpl = static_cast<uint8_t>(env_->hflags & uabi::kHfCplMask);
  st.ldtr = FromCache(env_->ldt);
  st.tr = FromCache(env_->tr);
  if ((st.tr.type & 5) == 1) st.tr.type |= 2;  // available -> busy (see SetState)
  st.gdtr = DescriptorTable{env_->gdt.base, static_cast<uint16_t>(env_->gdt.limit)};
  st.idtr = DescriptorTable{env_->idt.base, static_cast<uint16_t>(env_->idt.limit)};
  st.cr0 = env_->cr[0];
  st.cr2 = env_->cr[2];
  st.cr3 = env_->cr[3];
  st.cr4 = env_->cr[4];
  st.efer = env_->efer;
  st.cr8 = cr8_;
  st.interrupt_shadow = (env_->hflags & uabi::kHfInhibitIrq) != 0;
  st.nmi_masked = (env_->hflags2 & uabi::kHf2Nmi) != 0;
  if (with_msrs) {
    const std::pair<uint32_t, uint64_t*> msrs[] = {
        {kMsrStar, &st.star}, {kMsrLstar, &st.lstar}, {kMsrCstar, &st.cstar}, {kMsrFmask, &st.sfmask},
        {kMsrKernelGsBase, &st.kernel_gs_base}, {kMsrSysenterCs, &st.sysenter_cs},
        {kMsrSysenterEsp, &st.sysenter_esp}, {kMsrSysenterEip, &st.sysenter_eip}};
    TcgCpu* running = t_running;
    t_running = nullptr;  // QEMU's own RDMSR, not the machine's
    for (const auto& [index, value] : msrs) {
      uc_x86_msr m{index, 0};
      uc_reg_read(uc_, UC_X86_REG_MSR, &m);
      *value = m.value;
    }
    t_running = running;
  }
  st.maxphyaddr = maxphyaddr_;
  return st;
}

FpuState TcgCpu::GetFpu() {
  FpuState f;
  uc_reg_read(uc_, UC_X86_REG_FPCW, &f.fcw);
  uc_reg_read(uc_, UC_X86_REG_FPSW, &f.fsw);
  uint16_t tag = 0;
  uc_reg_read(uc_, UC_X86_REG_FPTAG, &tag);  // 2 bits per physical register, 3 = empty
  f.ftw = 0;
  for (int i = 0; i < 8; i++)
    if (((tag >> (2 * i)) & 3) != 3) f.ftw |= 1u << i;
  const int top = (f.fsw >> 11) & 7;
  for (int i = 0; i < 8; i++) {
    uint8_t v[16] = {};  // mantissa (8 bytes), sign and exponent (2)
    uc_reg_read(uc_, UC_X86_REG_FP0 + ((top + i) & 7), v);
    std::memcpy(f.st[i], v, 10);
  }
  for (int i = 0; i < 16; i++) uc_reg_read(uc_, UC_X86_REG_XMM0 + i, f.xmm[i]);
  uc_reg_read(uc_, UC_X86_REG_MXCSR, &f.mxcsr);
  return f;
}

void TcgCpu::SetFpu(const FpuState& f) {
  uint16_t fcw = f.fcw, fsw = f.fsw;
  uc_reg_write(uc_, UC_X86_REG_FPCW, &fcw);
  uc_reg_write(uc_, UC_X86_REG_FPSW, &fsw);
  uint16_t tag = 0;
  for (int i = 0; i < 8; i++)
    if (!((f.ftw >> i) & 1)) tag |= 3u << (2 * i);
  uc_reg_write(uc_, UC_X86_REG_FPTAG, &tag);
  const int top = (f.fsw >> 11) & 7;
  for (int i = 0; i < 8; i++) {
    uint8_t v[16] = {};
    std::memcpy(v, f.st[i], 10);
    uc_reg_write(uc_, UC_X86_REG_FP0 + ((top + i) & 7), v);
  }
  for (int i = 0; i < 16; i++) {
    uint8_t v[16];
    std::memcpy(v, f.xmm[i], 16);
    uc_reg_write(uc_, UC_X86_REG_XMM0 + i, v);
  }
  uint32_t mxcsr = f.mxcsr;
  uc_reg_write(uc_, UC_X86_REG_MXCSR, &mxcsr);
}

void TcgCpu::GetCodeState(CpuState& st) {
  st.gpr[kRsp] = env_->regs[kRsp];
  st.rip = env_->eip;
  st.rflags = env_->eflags;
  // In place, and only what changed since the last call into the same
  // object (called at every reported block; the caller does not change them).
  auto same = [](const uabi::SegCache& a, const SegRaw& b) {
    return a.selector == b.selector && a.base == b.base && a.limit == b.limit && a.flags == b.flags;
  };
  const uabi::SegCache& cs = env_->segs[uabi::kCs];
  const uabi::SegCache& ss = env_->segs[uabi::kSs];
  if (&st != code_state_of_ || !same(cs, code_state_cs_)) FromCacheInto(cs, st.cs);
  if (&st != code_state_of_ || !same(ss, code_state_ss_)) FromCacheInto(ss, st.ss);
  code_state_of_ = &st;
  code_state_cs_ = {cs.base, cs.selector, cs.limit, cs.flags};
  code_state_ss_ = {ss.base, ss.selector, ss.limit, ss.flags};
  st.cs.dpl = static_cast<uint8_t>(env_->hflags & uabi::kHfCplMask);  // the CPL (GetState)
  st.cr0 = env_->cr[0];
  st.cr3 = env_->cr[3];
  st.cr4 = env_->cr[4];
  st.efer = env_->efer;
  st.interrupt_shadow = (env_->hflags & uabi::kHfInhibitIrq) != 0;
  st.maxphyaddr = maxphyaddr_;
}

uint64_t TcgCpu::cr4() const { return env_->cr[4]; }

uint64_t TcgCpu::TranslationNs() { return g_translation_ns.load(std::memory_order_relaxed); }
uint64_t TcgCpu::PagingGeneration() { return g_paging_generation.load(std::memory_order_relaxed); }
uint64_t TcgCpu::CodeBytesGeneration() { return g_code_bytes_generation.load(std::memory_order_relaxed); }

// env->error_code sits 16 bytes before env->dr[0] (QEMU 5.0 layout; found by
// SelfCheck writing DR0..DR7 through the API and searching for them).
uint64_t* TcgCpu::dr() const { return &At<uint64_t>(env_, error_code_offset_ + 16); }

pmu::PagingRegs TcgCpu::WalkRegs() const {
  return pmu::PagingRegs{env_->cr[0], env_->cr[3], env_->cr[4] & ~(kCr4Smep | kCr4Smap), env_->efer, maxphyaddr_,
                         false};
}

// --- Instructions QEMU 5.0 gets wrong inline (docs/tcg-engine.md) ---
//
// QEMU 5.0 translates some instructions inline, with no helper vbts could
// interpose, and wrongly: SMSW to a 32-bit register outside 64-bit mode
// stores 16 bits (hardware and QEMU 7.2 store CR0[31:0]; kvm-unit-tests
// realmode "smsw (3)"), and LGDT/LIDT in 64-bit mode take a non-canonical
// base without #GP(0) (SDM vol. 2A LGDT/LIDT; kvm-unit-tests la57). The
// translator sees UD2 for them (TcgCallbacks::TranslateInsn); vbts performs
// them at the #UD.
namespace {
enum class Substitute { kNone, kSmsw, kLgdt, kLidt };
// From the bytes of an instruction: prefixes (no LOCK: that #UDs as it
// is), 0F 01, ModRM.
Substitute SubstituteKind(const uint8_t* b, size_t n, bool code64, size_t* modrm_at = nullptr) {
  size_t i = 0;
  for (; i < n && i < 14; i++) {
    if (b[i] == 0xF0) return Substitute::kNone;
    if (!IsPrefix(b[i], code64)) break;
  }
  if (i + 2 >= n || b[i] != 0x0F || b[i + 1] != 0x01) return Substitute::kNone;
  const uint8_t modrm = b[i + 2];
  if (modrm_at) *modrm_at = i + 2;
  const int mod = modrm >> 6, reg = (modrm >> 3) & 7;
  if (!code64 && reg == 4 && mod == 3) return Substitute::kSmsw;
  if (code64 && mod != 3 && reg == 2) return Substitute::kLgdt;
  if (code64 && mod != 3 && reg == 3) return Substitute::kLidt;
  return Substitute::kNone;
}
}  // namespace

TcgCpu::TranslateAs TcgCpu::LookBeforeTranslation(uint64_t pc) {
  // The translator fetches pc's byte next, so pc's page is mapped; bytes on
  // the next page are not looked at (an instruction there may not reach
  // it, and QEMU's fetch would fault). Prefixes, then 0F: anything else (most
  // instructions, at their first byte) is translated as it is. After 0F:
  // 01 and a ModRM may be an instruction vbts performs (SubstituteKind); an
  // opcode byte of the SSE rows (10-17, 28-2F, 38, 3A, 50-7F, C2, C4-C6,
  // D0-FF; or one on the next page) is decoded in full for the alignment
  // rule (DecodedInsn::sse_aligned_m128).
  const uint32_t hf = env_->hflags;
  const bool code64 = (hf & kHfCs64) != 0;
  uint8_t b[17];
  size_t n = 0;
  auto fetch = [&] {
    if (n == sizeof b || ((pc + n) >> 12) != (pc >> 12)) return false;
    b[n] = static_cast<uint8_t>(cpu_ldub_code_x86_64(env_, pc + n));
    n++;
    return true;
  };
  do {
    if (!fetch()) return TranslateAs::kAsIs;
  } while (IsPrefix(b[n - 1], code64));
  if (b[n - 1] != 0x0F) return TranslateAs::kAsIs;
  if (fetch()) {
    const uint8_t op = b[n - 1];
    if (op == 0x01) {
      return fetch() && SubstituteKind(b, n, code64) != Substitute::kNone ? TranslateAs::kSubstitute
                                                                          : TranslateAs::kAsIs;
    }
    const bool sse_row = (op >= 0x10 && op <= 0x17) || (op >= 0x28 && op <= 0x2F) || op == 0x38 || op == 0x3A ||
                         (op >= 0x50 && op <= 0x7F) || op == 0xC2 || (op >= 0xC4 && op <= 0xC6) || op >= 0xD0;
    if (!sse_row) return TranslateAs::kAsIs;
  }
  // QEMU's hflags: CS32 (bit 4), SS32 (5), PE (7), LMA (14), CS64 (15), VM (17).
  DecodeMode mode;
  const bool cs32 = (hf & (1u << 4)) != 0;
  if (code64) mode.mode = CpuMode::kLong64;
  else if (hf & (1u << 14)) mode.mode = cs32 ? CpuMode::kCompat32 : CpuMode::kCompat16;
  else if (!(hf & (1u << 7))) mode.mode = CpuMode::kReal;
  else if (hf & (1u << 17)) mode.mode = CpuMode::kVirtual8086;
  else mode.mode = cs32 ? CpuMode::kProtected32 : CpuMode::kProtected16;
  mode.stack_width = code64 ? 64 : (hf & (1u << 5)) ? 32 : 16;
  uint8_t full[15];
  absl::StatusOr<DecodedInsn> insn = DecodeCode(pc, mode, full, n);
  return insn.ok() && insn->sse_aligned_m128 ? TranslateAs::kAlign16 : TranslateAs::kAsIs;
}

absl::StatusOr<DecodedInsn> TcgCpu::DecodeCode(uint64_t linear, DecodeMode mode, uint8_t (&b)[15], size_t& n) {
  n = 0;
  while (n < sizeof b && ReadCode(linear + n, b[n])) n++;
  return DecodeBytes(absl::MakeConstSpan(b, n), mode);
}

bool TcgCpu::CompleteSubstituted() {
  uabi::EnvPrefix* env = env_;
  const bool code64 = (env->hflags & kHfCs64) != 0;
  CpuState st = GetState(/*with_msrs=*/false);
  uint8_t b[15];
  size_t n = 0;
  absl::StatusOr<DecodedInsn> insn = DecodeCode(st.pc_linear(), DecodeModeOf(st), b, n);
  size_t modrm_at = 0;
  const Substitute kind = SubstituteKind(b, n, code64, &modrm_at);
  if (kind == Substitute::kNone || !insn.ok()) return false;  // a #UD of the guest's own
  stats_.performed++;
  if (kind == Substitute::kSmsw) {
    // SMSW r16 keeps the register's upper bits; SMSW r32 stores CR0[31:0].
    uint64_t& r = env->regs[b[modrm_at] & 7];
    r = insn->operand_size == 16 ? (r & ~0xFFFFull) | (env->cr[0] & 0xFFFF) : (env->cr[0] & 0xFFFFFFFFull);
  } else {
    // LGDT/LIDT m16&64 (SDM vol. 2A): #GP(0) above CPL 0; the operand read
    // faults as any read; a non-canonical base is #GP(0).
    if ((env->hflags & uabi::kHfCplMask) != 0) raise_exception_err_ra_x86_64(env, 13, 0, 0);
    // The exception is raised (a longjmp) once the operand's vector and
    // status are gone: a longjmp past them would leak them.
    std::optional<std::pair<int, int>> fault;  // (vector, error code)
    {
      const std::vector<DataAccess> acc = DataAccessesOf(*insn, st);
      if (acc.empty()) return false;
      uint8_t m[10];
      absl::StatusOr<pmu::AccessFault> f = ReadLinear(acc[0].linear, absl::MakeSpan(m));
      uint64_t base = 0;
      if (f.ok()) std::memcpy(&base, m + 2, 8);  // little-endian, as the guest's
      if (f.ok() && f->kind == pmu::AccessFault::Kind::kPageFault) {
        env->cr[2] = f->address;
        fault = {14, static_cast<int>(f->error_code)};
      } else if (!f.ok() || !f->ok() || !pmu::IsCanonical(base)) {
        fault = {13, 0};
      } else {
        uabi::SegCache& table = kind == Substitute::kLgdt ? env->gdt : env->idt;
        table.base = base;
        table.limit = static_cast<uint32_t>(m[0] | (m[1] << 8));
      }
    }
    if (fault) raise_exception_err_ra_x86_64(env, fault->first, fault->second, 0);
  }
  env->eip += insn->length;
  if (!code64) env->eip &= 0xFFFFFFFFu;
  env->eflags &= ~kRflagsRf;
  // The guest's own single-step trap after it, as after any instruction,
  // unless the tracer raises those itself.
  if ((env->eflags & kRflagsTf) && !own_single_step_) {
    dr()[6] |= 1u << 14;  // DR6.BS
    DeliverInstead(1, /*fault=*/false);
  }
  return true;
}

void TcgCpu::DeliverInstead(int vector, bool fault) {
  // Through the IDT now, as an exception without an INT n (QEMU pushes the
  // error code vectors 8, 10-14 and 17 have: 0); a fault's frame holds RF
  // (TcgCallbacks::Intr); then no exception is in flight, as after QEMU's
  // own successful delivery.
  AnnounceEvent(std::nullopt);
  if (fault) env_->eflags |= kRflagsRf;
  delivering_ = vector;
  ArmTaskGate(vector);
  do_interrupt_x86_hardirq_x86_64(env_, vector, /*is_hw=*/0);
  At<int32_t>(env_, error_code_offset_ + uabi::kOldExceptionAfterErrorCode) = -1;
  delivering_ = -1;
}

std::optional<Descriptor> TcgCpu::TableDescriptor(uint64_t base, uint32_t limit, uint32_t offset) {
  if (uint64_t{offset} + 7 > limit) return std::nullopt;
  Descriptor d;
  absl::StatusOr<pmu::AccessFault> f = ReadLinear(base + offset, absl::MakeSpan(reinterpret_cast<uint8_t*>(&d.lo), 8));
  if (!f.ok() || !f->ok()) return std::nullopt;
  return d;
}

bool TcgCpu::TasksSwitch() const {
  // Protected mode outside virtual-8086 and IA-32e mode (no task switches there).
  return (env_->cr[0] & kCr0Pe) && !(env_->eflags & kRflagsVm) && !(env_->efer & kEferLma);
}

void TcgCpu::ArmTaskSwitch(uint16_t tss_selector) {
  t_task_cs = -1;
  if (SelectorIsNull(tss_selector) || SelectorTi(tss_selector)) return;  // a TSS is in the GDT (QEMU faults otherwise)
  const std::optional<Descriptor> d = TableDescriptor(env_->gdt.base, env_->gdt.limit, tss_selector & ~7u);
  if (!d || d->s()) return;
  const uint8_t type = d->type();
  if (type != kTss16Available && type != kTss16Busy && type != kTss32Available && type != kTss32Busy) return;
  uint16_t cs = 0;
  const bool tss32 = type == kTss32Available || type == kTss32Busy;
  absl::StatusOr<pmu::AccessFault> f =
      ReadLinear(d->base32() + (tss32 ? 0x4C : 0x2E), absl::MakeSpan(reinterpret_cast<uint8_t*>(&cs), 2));
  if (!f.ok() || !f->ok()) return;
  t_task_cs = cs;
}

void TcgCpu::ArmFarTransfer(uint16_t selector) {
  t_task_cs = -1;
  if (!TasksSwitch() || SelectorIsNull(selector)) return;
  const uabi::SegCache& table = SelectorTi(selector) ? env_->ldt : env_->gdt;
  const std::optional<Descriptor> d = TableDescriptor(table.base, table.limit, selector & ~7u);
  if (!d || d->s()) return;
  if (d->type() == kTaskGate) ArmTaskSwitch(d->gate_selector());  // a task gate: its TSS
  else if (d->type() == kTss16Available || d->type() == kTss32Available) ArmTaskSwitch(selector);
}

void TcgCpu::ArmTaskGate(int vector) {
  t_task_cs = -1;
  if (!TasksSwitch() || vector < 0 || vector > 255) return;
  const std::optional<Descriptor> d = TableDescriptor(env_->idt.base, env_->idt.limit, static_cast<uint32_t>(vector) * 8);
  if (d && !d->s() && d->type() == kTaskGate) ArmTaskSwitch(d->gate_selector());
}

uint32_t TcgCpu::TaskCsDescriptor(uint64_t linear, uint32_t high_word) {
  const auto sel = static_cast<uint16_t>(t_task_cs);
  if (SelectorIsNull(sel)) return high_word;
  // QEMU loads the new task's LDTR before its segments.
  const uabi::SegCache& table = SelectorTi(sel) ? env_->ldt : env_->gdt;
  if (((table.base + (sel & ~7u) + 4) & 0xFFFFFFFFull) != (linear & 0xFFFFFFFFull)) return high_word;
  t_task_cs = -1;
  const Descriptor d{uint64_t{high_word} << 32};
  const int rpl = SelectorRpl(sel);
  // DPL = RPL passes QEMU's check; DPL > RPL is #TS on hardware too.
  if (!d.conforming() || d.dpl() >= rpl) return high_word;
  // The CS QEMU loads then holds DPL = RPL = the new CPL: vbts's convention
  // for a conforming CS (CpuState::cpl(), GetState).
  stats_.task_conforming_cs++;
  return (high_word & ~(3u << 13)) | (static_cast<uint32_t>(rpl) << 13);
}

void TcgCpu::FaultAtTheBranch() {
  uabi::EnvPrefix* env = env_;
  if (!(env->hflags & kHfCs64) || pmu::IsCanonical(env->eip)) return;
  // The branch ended the last block that started (no block starts at a
  // non-canonical address): its last instruction.  Without the block hook,
  // the block whose branch last searched for its target's block (a branch to
  // another page always does, and no block is at a non-canonical address).
  const bool from_lookup = exit_at_block_start_.load(std::memory_order_relaxed);
  const BlockSpan block = from_lookup ? LastLookupBlock() : current_block_;
  if (block.size == 0) return;
  const uint64_t start = block.start, end = block.start + block.size;
  CpuState st = GetState(/*with_msrs=*/false);
  const DecodeMode mode = DecodeModeOf(st);
  std::optional<DecodedInsn> last;
  uint64_t last_at = 0;
  for (uint64_t at = start; at < end;) {
    uint8_t b[15];
    size_t n = 0;
    absl::StatusOr<DecodedInsn> insn = DecodeCode(at, mode, b, n);
    if (!insn.ok() || insn->length == 0) return;
    last = *insn;
    last_at = at;
    at += insn->length;
  }
  if (!last) return;
  // Take back what the branch did besides jumping, where QEMU did it
  // (a CALL's return address on the stack, a RET's pop: 64-bit slots; seen
  // both ways, so checked against the stack's contents).
  uint64_t& rsp = env->regs[kRsp];
  const auto slot = [&](uint64_t la) -> std::optional<uint64_t> {
    uint64_t x;
    absl::StatusOr<pmu::AccessFault> f = ReadLinear(la, absl::MakeSpan(reinterpret_cast<uint8_t*>(&x), 8));
    if (!f.ok() || !f->ok()) return std::nullopt;
    return x;
  };
  const uint64_t next_rip = last_at + last->length - env->segs[uabi::kCs].base;
  const uint64_t ret_pop = 8 + (last->has_imm ? last->imm : 0);
  if (from_lookup) {
    // A search that was not this branch's (a block left another way since)
    // names a branch to somewhere else: QEMU's fault stands.
    if (last->has_rel && next_rip + static_cast<uint64_t>(last->rel) != env->eip) return;
    if (last->target_reg >= 0 && env->regs[last->target_reg] != env->eip) return;
    // (A RET's target cannot be checked: QEMU 5.0 loses the block's
    // register updates on this path, RSP included; TcgCpuTest.AJmpOrCall...)
  }
  switch (last->branch) {
    case pmu::BranchKind::kJmp: case pmu::BranchKind::kIndJmp: case pmu::BranchKind::kJcc: break;
    case pmu::BranchKind::kCall: case pmu::BranchKind::kIndCall:
      if (slot(rsp) == next_rip) rsp += 8;
      break;
    case pmu::BranchKind::kRet:
      if (slot(rsp - ret_pop) == env->eip) rsp -= ret_pop;
      break;
    default: return;  // far transfers, IRET...: QEMU's fault stands
  }
  env->eip = last_at - env->segs[uabi::kCs].base;
  stats_.branch_faults++;
}

TcgCpu::BlockSpan TcgCpu::LastLookupBlock() const {
  if (g_tb_layout.load(std::memory_order_relaxed) != 1 || tcg_ctx_ == nullptr || t_lookup_ra == 0) return {};
  void* tb = tcg_tb_lookup_x86_64(tcg_ctx_, t_lookup_ra);
  if (tb == nullptr) return {};
  return {At<uint64_t>(tb, uabi::kTbPc), At<uint16_t>(tb, uabi::kTbSize)};
}

bool TcgCpu::NeedsBlockHook() const {
  // The block hook reports block starts to what observes instructions (the
  // code hook, one hook a block, the code hook of the debugger's breakpoint
  // where a run resumes) and to the reruns of watched accesses (the
  // data-access hook, the debugger's and the guest's watched ranges).  A
  // code hook deleted since the last run stays listed in Unicorn until the
  // next run ends, and QEMU's exit at a block start leaves EIP stale while
  // one is listed.
  return !config_.drop_block_hook || code_hook_ != 0 || code_hook_deleted_ || BlockHookServesMore();
}

void TcgCpu::SyncBlockHook() {
  // The hook stays in Unicorn's list: taken out of the translations through
  // its to_delete flag (which Unicorn's translator and its call of the
  // callbacks both honour), not by uc_hook_del, whose invalidation of every
  // block the hook was translated into walks the guest's page tables.
  auto* hook = reinterpret_cast<uabi::HookPrefix*>(block_hook_);
  const bool need = NeedsBlockHook();
  if (need == !hook->to_delete) return;
  hook->to_delete = !need;
  if (need) stats_.block_hook_adds++;
  else stats_.block_hook_removals++;
  FlushCode();  // hooks are compiled into the translations
}

void TcgCpu::DeleteCodeHook(size_t hook) {
  DeleteHook(hook);
  code_hook_deleted_ = true;
}

bool TcgCpu::NonCanonicalStackAccess() {
  if (!(env_->hflags & kHfCs64)) return false;
  CpuState st = GetState(/*with_msrs=*/false);
  uint8_t b[15];
  size_t n = 0;
  absl::StatusOr<DecodedInsn> insn = DecodeCode(st.pc_linear(), DecodeModeOf(st), b, n);
  if (!insn.ok()) return false;
  const std::vector<DataAccess> acc = DataAccessesOf(*insn, st);
  bool stack = false;
  for (size_t i = 0; i < acc.size(); i++) {
    const bool canonical = pmu::IsCanonical(acc[i].linear) && pmu::IsCanonical(acc[i].linear + acc[i].size - 1);
    if (canonical) continue;
    if (insn->data[i].mem.seg != SegReg::kSs) return false;  // a #GP(0) of its own
    stack = true;
  }
  return stack;
}

absl::StatusOr<pmu::AccessFault> TcgCpu::ReadLinear(uint64_t linear, absl::Span<uint8_t> out) {
  if (!(env_->hflags & (1u << 14))) linear &= 0xFFFFFFFFu;  // outside IA-32e mode (HF_LMA)
  RamView ram(config_.ram, config_.ram_bytes);
  pmu::LinearMemory mem(ram, WalkRegs());
  return mem.Read(Gva{linear}, out, pmu::Access{});
}

bool TcgCpu::ReadCode(uint64_t linear, uint8_t& byte) {
  absl::StatusOr<pmu::AccessFault> f = ReadLinear(linear, absl::MakeSpan(&byte, 1));
  return f.ok() && f->ok();
}

void TcgCpu::RequestStop() {
  // At the next block start or reported instruction (see TcgCallbacks::Block);
  // without the block hook, through QEMU's exit request at the next block start.
  stop_requested_ = true;
  kick_ = true;
  if (exit_at_block_start_.load(std::memory_order_relaxed)) uc_emu_stop(uc_);
}

void TcgCpu::LimitRun(std::chrono::nanoseconds from_now) {
  const uint64_t at = SteadyNowNs() + static_cast<uint64_t>(from_now.count());
  std::lock_guard<std::mutex> lock(watch_mu_);
  if (t_running != this || watch_deadline_ == 0 || at >= watch_deadline_) return;
  watch_deadline_ = at;
  watch_cv_.notify_all();
}

void TcgCpu::FlushCode() {
  CodeWorkTimer timer;
  // Not tb_flush: Unicorn 2.0.1 then zeroes its whole 1-GiB code buffer
  // (0.2 s, 2 s the first time the pages are touched).  Invalidating the
  // translations of guest RAM page by page costs a few ms.  (RAM is
  // Unicorn's first RAM block, so its RAM offsets are guest-physical.)
  tb_invalidate_phys_range_x86_64(uc_, 0, config_.ram_bytes);
  rep_probe_.linear = ~0ull;
}

void TcgCpu::ReclaimCode() {
  if (tcg_ctx_ == nullptr) return;
  using Fn = size_t (*)(void*);
  static const auto code_size = Original<Fn>("tcg_code_size_x86_64");
  if (code_size(tcg_ctx_) < config_.code_reclaim_bytes) return;
  CodeWorkTimer timer;
  // QEMU's tb_flush (Unicorn zeroes the whole buffer: ~0.2 s, rare).
  uc_ctl(uc_, UC_CTL_WRITE(UC_CTL_TB_FLUSH, 0));
  DropHooklessRecords();
  last_tb_alloc_ = nullptr;
  rep_probe_.linear = ~0ull;
  stats_.code_reclaims++;
}

void TcgCpu::InterruptPending() {
  At<uint32_t>(cpu_, uabi::kCpuInterruptRequest) |= uabi::kInterruptHard;
  Kick();
}

void TcgCpu::QueueNmi() {
  At<uint32_t>(cpu_, uabi::kCpuInterruptRequest) |= uabi::kInterruptNmi;
  Kick();
}

bool TcgCpu::NmiPending() const {
  return (At<uint32_t>(cpu_, uabi::kCpuInterruptRequest) & uabi::kInterruptNmi) != 0;
}

void TcgCpu::QueueException(uint8_t vector, std::optional<uint32_t> error_code) {
  pending_exception_ = {vector, error_code};
  // A #DB the observer raises at the boundary right after an iteration of a
  // REP string instruction that left its count at 0 (a data breakpoint the
  // last iteration hit): see ExecInterrupt.
  pending_rep_skip_ =
      vector == 1 && in_code_hook_ && last_start_ == hook_linear_ ? FinishedRepLength(hook_linear_) : 0;
  At<uint32_t>(cpu_, uabi::kCpuInterruptRequest) |= uabi::kInterruptHard;
  Kick();
}

void TcgCpu::Kick() {
  // While the instruction hook is on: at the first boundary the hook
  // reports where it can be taken (from the hook itself: before this
  // instruction).  Otherwise, from a callback during a run: at the next
  // block start (TcgCallbacks::Block); between runs: at the start of the
  // next (QEMU checks interrupt_request first).
  if (CodeHookActive()) {
    deliver_now_ = true;
  } else {
    kick_ = true;
    // Without the block hook: QEMU's own exit to its loop at the next block
    // start, which then checks interrupt_request (cpu_exit; the run goes on).
    if (exit_at_block_start_.load(std::memory_order_relaxed)) cpu_exit(cpu_);
  }
}

void TcgCpu::Boundary(uint64_t linear) {
  // At an instruction boundary inside a run, from a hook: leave QEMU's block
  // with EIP there; a stop or time limit ends the run, a kick only lets
  // QEMU's loop check interrupt_request.
  kick_ = false;
  env_->eip = linear - env_->segs[uabi::kCs].base;
  if (time_up_.exchange(false)) timed_out_ = true;
  if (stop_requested_ || timed_out_) uc_emu_stop(uc_);  // the loop exit below ends the run
  cpu_loop_exit_x86_64(cpu_);
}

bool TcgCpu::Deliverable() const {
  if (pending_exception_) return true;
  const uint32_t ir = At<uint32_t>(cpu_, uabi::kCpuInterruptRequest);
  if ((ir & uabi::kInterruptNmi) && !(env_->hflags2 & uabi::kHf2Nmi)) return true;
  return (ir & uabi::kInterruptHard) && (env_->eflags & kRflagsIf) && !(env_->hflags & uabi::kHfInhibitIrq) &&
         config_.devices->InterruptPending();
}

// The registers live in QEMU's env->dr[] (at error_code + 16), written
// directly: QEMU's own DR7 path would install its breakpoints.
void TcgCpu::GetDebugRegs(uint64_t db[4], uint64_t& dr6, uint64_t& dr7) {
  const uint64_t* dr = this->dr();
  for (int i = 0; i < 4; i++) db[i] = dr[i];
  dr6 = dr[6];
  dr7 = dr[7];
}

void TcgCpu::SetDebugRegs(const uint64_t db[4], uint64_t dr6, uint64_t dr7) {
  uint64_t* dr = this->dr();
  for (int i = 0; i < 4; i++) dr[i] = db[i];
  dr[6] = dr6;
  dr[7] = dr7;
  UpdateBreakpoints();
}

void TcgCpu::UpdateBreakpoints() {
  // Instruction breakpoints: L or G set and R/W = 00 (SDM vol. 3B 17.2.4).
  const uint64_t dr7 = dr()[7];
  uint8_t mask = 0;
  for (int i = 0; i < 4; i++) {
    if (((dr7 >> (2 * i)) & 3) != 0 && ((dr7 >> (16 + 4 * i)) & 3) == 0) mask |= 1u << i;
  }
  exec_bp_mask_ = mask;
  // QEMU's breakpoints for them follow between runs (SyncGuestExecHooks);
  // until then the code hook checks them before every instruction
  // (exec_bp_hook_mask_: blocks leave the mode with one hook), and a run of
  // this engine ends at its next block start so that they come sooner.
  UpdateExecBpHookMask();
  if (t_running == this && !debug_code_ && exec_bp_hook_mask_) RequestStop();
}

bool TcgCpu::GuestExecHooked(const std::vector<uint64_t>& want) const {
  return std::includes(guest_exec_addrs_.begin(), guest_exec_addrs_.end(), want.begin(), want.end());
}

std::vector<uint64_t> TcgCpu::GuestExecAddrs() const {
  std::vector<uint64_t> a;
  for (int i = 0; i < 4; i++) {
    if ((exec_bp_mask_ >> i) & 1) a.push_back(dr()[i]);
  }
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  return a;
}

void TcgCpu::SyncGuestExecHooks() {
  // QEMU's own breakpoints (BP_CPU: the translator ends a block before the
  // instruction with a debug exit, TcgCallbacks::GuestExecExit), with no
  // Unicorn hook. They stay on addresses no longer enabled (the exit checks
  // DR7): a guest that turns the same breakpoints off and on (Linux at each
  // switch to and from a task that has them) then retranslates nothing.
  // Only a new address retranslates: QEMU's insert empties its code buffer
  // (tb_flush: vbts invalidates guest RAM's translations instead). While the
  // catch-all code hook runs (the tracer's instruction hook, a debugger's
  // step) it checks the breakpoints: then there are none.
  std::vector<uint64_t> want;
  if (!debug_code_) {
    want = GuestExecAddrs();
    if (GuestExecHooked(want)) {
      UpdateExecBpHookMask();
      return;
    }
    std::vector<uint64_t> keep = guest_exec_addrs_;
    if (keep.size() + want.size() > kMaxGuestExecHooks) keep.clear();  // past the bound, the old ones go
    std::vector<uint64_t> merged;
    std::set_union(keep.begin(), keep.end(), want.begin(), want.end(), std::back_inserter(merged));
    want = std::move(merged);
  }
  if (want != guest_exec_addrs_) {
    SetQemuBreakpoints(guest_exec_addrs_, std::move(want), uabi::kBpCpu);
    stats_.guest_exec_hook_syncs++;
  }
  UpdateExecBpHookMask();
}

void TcgCpu::UpdateExecBpHookMask() {
  exec_bp_hook_mask_ = exec_bp_mask_ != 0 && !GuestExecHooked(GuestExecAddrs()) ? exec_bp_mask_ : 0;
}

void TcgCpu::SetQemuBreakpoints(std::vector<uint64_t>& have, std::vector<uint64_t> want, int flags,
                                bool invalidate) {
  // QEMU's insert and remove each empty its whole code buffer (tb_flush):
  // noted instead, and guest RAM's translations are invalidated once.
  bool flush = false;
  TcgCallbacks::t_flush_noted = &flush;
  for (uint64_t a : have) cpu_breakpoint_remove_x86_64(cpu_, a, flags);
  for (uint64_t a : want) cpu_breakpoint_insert_x86_64(cpu_, a, flags, nullptr);
  TcgCallbacks::t_flush_noted = nullptr;
  have = std::move(want);
  if (flush && invalidate) FlushCode();  // QEMU's translator looks for them as it translates
}

void TcgCpu::CheckInstructionBreakpoints(uint64_t linear) {
  // A fault before the instruction, unless RFLAGS.RF suppresses it (SDM vol.
  // 3B 17.3.1.1); DR6.B0-B3 report every enabled breakpoint that matched.
  if (env_->eflags & kRflagsRf) return;
  // Intel: none right after MOV SS or POP SS, while their shadow holds
  // (SDM vol. 3A 6.8.3; kvm-unit-tests emulator "#DB suppressed after MOV
  // SS"); after STI's shadow they fire.
  if (ss_shadow_ && (env_->hflags & uabi::kHfInhibitIrq)) return;
  uint64_t* dr = this->dr();
  uint64_t hits = 0;
  for (int i = 0; i < 4; i++) {
    if ((exec_bp_mask_ >> i) & 1 && dr[i] == linear) hits |= 1u << i;
  }
  if (!hits) return;
  dr[6] = (dr[6] & ~0xFull) | hits;
  stats_.breakpoints++;
  raise_exception_err_ra_x86_64(env_, 1, 0, 0);
}

// --- One hook a block (docs/tcg-engine.md) ---

namespace {
// Room under the skip limit below which the mode is not entered: near a
// counter's overflow or the timer's deadline every block would leave it.
constexpr uint64_t kHooklessMinRoom = 4096;
constexpr size_t kHooklessHits = 32768;  // a power of two (48 bytes each: 1.5 MB)
}  // namespace

bool TcgCpu::CachedTranslation(uint64_t linear, bool write, uint64_t& pa) {
  const bool user = (env_->hflags & uabi::kHfCplMask) == 3;
  const uint64_t generation = g_paging_generation.load(std::memory_order_relaxed);
  const uint64_t tag = (linear >> 12) << 2 | (write ? 1 : 0) | (user ? 2 : 0);
  PaCacheEntry& e = pa_cache_[tag & (kPaCache - 1)];  // (128 consecutive pages, each kind of access)
  if (e.tag == tag && e.generation == generation) {
    pa = e.pa_page | (linear & 0xFFF);
    return true;
  }
  stats_.data_walks++;
  WalkView bus(config_.ram, config_.ram_bytes, config_.devices);  // as QEMU walks
  pmu::Access access;
  access.write = write;
  access.user = user;
  auto t = pmu::Translate(WalkRegs(), bus, Gva{linear}, access, /*set_accessed_dirty=*/false);
  if (!t.ok() || !t->fault.ok()) return false;  // the access faults: the instruction does not retire
  pa = t->gpa.value;
  e = {tag, generation, pa & ~0xFFFull};
  return true;
}

std::optional<uint64_t> TcgCpu::ReportedByInstruction(uint64_t linear) {
  // QEMU places a helper's return address at its instruction as it does for
  // a fault there (cpu_restore_state: EIP, and CC_OP where it is static),
  // so each look is undone after.
  const uint64_t eip = env_->eip;
  const uint32_t cc_op = env_->cc_op;
  uint64_t n = 0;
  bool placed = true;
  for (uint64_t k = reported_n_; k > 0 && n < kReportedRing; k--) {
    const ReportedAccess& r = reported_[(k - 1) & (kReportedRing - 1)];
    if (r.block != blocks_in_run_) break;  // (a block runs its instructions once each, in order)
    if (r.ra == 0 || !cpu_restore_state_x86_64(cpu_, r.ra, /*will_exit=*/false)) {
      placed = false;
      break;
    }
    if (env_->segs[uabi::kCs].base + env_->eip != linear) break;
    n++;
  }
  env_->eip = eip;
  env_->cc_op = cc_op;
  if (!placed || n == kReportedRing) return std::nullopt;
  return n;
}

bool TcgCpu::HooklessAllowed() const {
  // The data-access hook's and the watched accesses that need the boundary
  // after their instruction run it again alone (RunAloneUnlessSeen).
  return config_.hook_per_block && insn_hook_ && code_hook_ != 0 && skipping_ && !exec_bp_hook_mask_ && !debug_code_ &&
         debug_bps_.empty() && !deliver_now_ && !stop_requested_ &&
         skipped_ + kHooklessMinRoom <= skip_limit_;
}

bool TcgCpu::CountCallAllowedForRun() const {
  // Nothing that a Unicorn hook in the translations serves (the debugger's
  // checks and breakpoint hooks, watched ranges, the data-access hook, a
  // rerun alone), and a code hook that stays in Unicorn's list.
  return config_.count_call && config_.hook_per_block && icount_decr_ != nullptr && tcg_ctx_ != nullptr && insn_hook_ &&
         code_hook_ != 0 && block_hook_ != 0 && !code_hook_deleted_ && !exec_bp_hook_mask_ && !DebugChecked() &&
         !BlockHookServesMore() && !alone_pending_ && alone_skip_ == 0;
}

bool TcgCpu::CountCallAllowed() const {
  // Skipping across blocks (the ends kept or not): every instruction counts
  // alike, so a block is its number of instructions, and its end is where
  // it began.
  return skip_across_ && CountCallAllowedForRun() && HooklessAllowed();
}

void TcgCpu::CountCallStart(const HooklessTb* tb, uint64_t address) {
  // EIP is where an earlier block left it (Unicorn lists a code hook, so
  // QEMU does not set it at an exit before a block): here it is the block's.
  env_->eip = address - env_->segs[uabi::kCs].base;
  // QEMU leaves for its loop right after this call (an exit request made on
  // this thread: an A20 change, say): the block has not started.
  if (*icount_decr_ < 0) return;
  // What the block hook does at a block start (TcgCallbacks::Block), without
  // the reruns alone, which the mode excludes.
  StartBlock(address, tb->bytes);
  if (kick_.load(std::memory_order_relaxed) || time_up_.load(std::memory_order_relaxed)) EndRunAtBlockStart(address);
  const uint64_t n = tb->pcs.size();
  // The common case first: the block skipped whole, across the boundary
  // before it (its end kept where ends are), as TcgCallbacks::AtBoundary
  // and HooklessStart below would skip it.
  if (n != 0 && tb->pcs.front() == address && reenter_at_ != address && skipping_ &&
      skip_across_ && insn_hook_ && !deliver_now_ && !stop_requested_ && !unskip_next_ && !exec_bp_hook_mask_ &&
      !DebugChecked() && skipped_ + n <= skip_limit_ && SkipFlags(env_) == skip_hflags_ &&
      env_->segs[uabi::kCs].selector == skip_cs_ &&
      (!skip_block_ends_ || CanKeepEnd()) &&
      (address != last_start_ || !IsRepString(address))) {  // (a REP string instruction's next iteration: below)
    reenter_at_ = kNoReentry;
    hookless_reentry_ = false;
    if (skip_block_ends_) block_ends_[block_ends_n_++] = {last_start_, address, skipped_};
    TcgCallbacks::Skip(this, address);
    stats_.count_call_blocks++;
    if (n > 1) OpenBlock(tb, n - 1, tb->pcs[n - 2], tb->pcs[n - 1]);
    return;
  }
  // Otherwise what the code hook at the first instruction of a block made
  // with one hook does (HooklessStart), with the block's record in hand.
  if (n == 0 || tb->pcs.front() != address || !insn_hook_ || exec_bp_hook_mask_ || DebugChecked())
    LeaveCountCall(address, /*handled=*/false);
  // Where the first instruction would run unreported, the whole block must
  // fit under the limit: otherwise it runs with the hook before every
  // instruction, from its start.
  if (reenter_at_ != address && skipping_ && skipped_ + n > skip_limit_) LeaveCountCall(address, /*handled=*/false);
  TcgCallbacks::AtBoundary(this, address);  // skips or reports the first instruction (or leaves the block)
  stats_.count_call_blocks++;
  if (n == 1) return;
  if (!(env_->hflags & uabi::kHfCountCall) || !skipping_ || !skip_across_ || deliver_now_ || stop_requested_ ||
      skipped_ + (n - 1) > skip_limit_ || exec_bp_hook_mask_ || DebugChecked())
    LeaveCountCall(address, /*handled=*/true);  // the rest, one hook an instruction (or one hook a block)
  OpenBlock(tb, n - 1, tb->pcs[n - 2], tb->pcs[n - 1]);
}

void TcgCpu::LeaveCountCall(uint64_t address, bool handled) {
  // The block runs again from its start made with the code hook: where
  // `handled`, without a second report of its first instruction; otherwise
  // that hook reports or skips it, and the mode is not entered again right
  // there (MaybeEnterHookless).
  if (!handled) hookless_not_at_ = address;
  LeaveBlockMode(uabi::kHfCountCall, address, handled);
}

void TcgCpu::MaybeEnterHookless(uint64_t address) {
  if ((env_->hflags & (uabi::kHfHookless | uabi::kHfCountCall)) || !HooklessAllowed()) return;
  if (address == hookless_not_at_) {
    hookless_not_at_ = kNoReentry;
    return;
  }
  if (CountCallAllowed()) {
    env_->hflags |= uabi::kHfCountCall;
    stats_.count_call_enters++;
  } else {
    env_->hflags |= uabi::kHfHookless;
    stats_.hookless_enters++;
  }
  reenter_at_ = address;  // reported or skipped already
  hookless_reentry_ = true;
  env_->eip = address - env_->segs[uabi::kCs].base;
  cpu_loop_exit_x86_64(cpu_);
}

void TcgCpu::LeaveHookless(uint64_t address, bool handled) { LeaveBlockMode(uabi::kHfHookless, address, handled); }

void TcgCpu::LeaveBlockMode(uint32_t flag, uint64_t address, bool handled) {
  env_->hflags &= ~flag;
  (flag == uabi::kHfCountCall ? stats_.count_call_leaves : stats_.hookless_leaves)++;
  if (handled) {
    reenter_at_ = address;
    hookless_reentry_ = true;
  }
  env_->eip = address - env_->segs[uabi::kCs].base;
  cpu_loop_exit_x86_64(cpu_);
}

const TcgCpu::HooklessHit* TcgCpu::HooklessLookup(uintptr_t ra) {
  if (hookless_hits_.empty()) hookless_hits_.resize(kHooklessHits);
  HooklessHit& hit = hookless_hits_[(ra >> 2) & (kHooklessHits - 1)];
  if (hit.ra == ra && hit.tb != nullptr) return &hit;
  if (tcg_ctx_ == nullptr || ra == 0) return nullptr;
  stats_.hookless_lookups++;
  const void* tb = tcg_tb_lookup_x86_64(tcg_ctx_, ra);
  auto it = hookless_tbs_.find(tb);
  if (tb == nullptr || it == hookless_tbs_.end() || it->second.pcs.empty()) return nullptr;
  const std::vector<uint64_t>& pcs = it->second.pcs;
  hit = {ra, &it->second, pcs.front(), pcs.back(), pcs.size() >= 2 ? pcs[pcs.size() - 2] : 0, pcs.size()};
  return &hit;
}

void TcgCpu::HooklessStart(uint64_t address, uintptr_t ra) {
  // (What the common case needs is in the cache entry, not behind it.)
  const HooklessHit* hit = HooklessLookup(ra);
  // A block without a record (made with the hook before every instruction
  // and chained to from one of this kind), or one the mode cannot follow.
  if (hit == nullptr || hit->first != address || !block_start_ || !insn_hook_ || exec_bp_hook_mask_ || DebugChecked()) {
    hookless_not_at_ = address;  // not straight back into the mode here
    LeaveHookless(address, /*handled=*/false);
  }
  const uint64_t n = hit->n;
  // Where the hook would let the first instruction run unreported, the
  // whole block must fit under the limit: otherwise it runs with the hook
  // before every instruction, from its start.
  if (reenter_at_ != address && skipping_ && skipped_ + n > skip_limit_) LeaveHookless(address, /*handled=*/false);
  TcgCallbacks::AtBoundary(this, address);  // skips or reports the first instruction (or leaves the block)
  stats_.hookless_blocks++;
  // Skipping across blocks now (the observer changed at this report): on
  // with one call a block from the next boundary.
  if (CountCallAllowed()) LeaveHookless(address, /*handled=*/true);
  if (n == 1) return;
  if (!(env_->hflags & uabi::kHfHookless) || !skipping_ || deliver_now_ || stop_requested_ ||
      skipped_ + (n - 1) > skip_limit_ || exec_bp_hook_mask_ || DebugChecked())
    LeaveHookless(address, /*handled=*/true);  // the rest, one hook an instruction
  OpenBlock(hit->tb, n - 1, hit->before_last, hit->last);  // (from the cache entry, not behind it)
}

void TcgCpu::StartBlock(uint64_t address, uint32_t size) {
  CloseBlock();  // the block before ran to its end
  block_start_ = true;
  current_block_ = {address, size};
  blocks_in_run_++;
}

void TcgCpu::EndRunAtBlockStart(uint64_t address) {
  // A run ended here resumes with this boundary reported, as when the code
  // hook ends it (TcgCallbacks::AtBoundary).
  if (stop_requested_ || time_up_.load(std::memory_order_relaxed)) skipping_ = false;
  Boundary(address);
}

bool TcgCpu::CanKeepEnd() const {
  // Room among the kept ends, and nothing changed that decoding an end
  // later depends on (SS's size, CS's base, the paging and the code bytes).
  return block_ends_n_ < kMaxBlockEnds && (env_->hflags & kHfSs32) == skip_ss32_ &&
         env_->segs[uabi::kCs].base == skip_ends_.cs.base &&
         g_paging_generation.load(std::memory_order_relaxed) == skip_ends_.generations.paging &&
         g_code_bytes_generation.load(std::memory_order_relaxed) == skip_ends_.generations.bytes;
}

bool TcgCpu::BlockHookServesMore() const {
  // Unicorn hooks beside the code hook, and watched ranges, whose hits run
  // an instruction again alone: both need the block hook's bookkeeping.
  return !debug_bp_hooks_.empty() || !debug_watches_.empty() || guest_watch_regs_[4] != 0 || data_mem_hook_ != 0;
}

void TcgCpu::OpenBlock(const HooklessTb* tb, uint64_t tail, uint64_t before_last, uint64_t last) {
  open_ = tb;
  open_idx_ = 0;
  open_prev_ = prev_start_;
  open_skipped_ = last_start_skipped_;
  Pretend(tail, before_last, last);
}

void TcgCpu::Pretend(uint64_t tail, uint64_t before_last, uint64_t last) {
  open_pretend_ = tail;
  if (tail == 0) return;
  skipped_ += tail;
  prev_start_ = before_last;
  last_start_ = last;
  last_start_skipped_ = true;
  block_start_ = false;
}

void TcgCpu::PretendFrom(size_t from) {
  const std::vector<uint64_t>& pcs = open_->pcs;
  Pretend(pcs.size() - 1 - from, pcs.size() >= 2 ? pcs[pcs.size() - 2] : 0, pcs.back());
}

void TcgCpu::BeforeCodeStore(uintptr_t retaddr) {
  if (block_ends_n_ == 0 || !before_code_store_) return;
  // In a block with one hook EIP is where that hook left it: QEMU finds the
  // store's instruction from its return address in the translated code.
  if (open_ != nullptr && retaddr != 0) cpu_restore_state_x86_64(cpu_, retaddr, /*will_exit=*/false);
  before_code_store_();
}

bool TcgCpu::SettleAt(uint64_t linear) {
  if (open_ == nullptr) return false;
  const std::vector<uint64_t>& pcs = open_->pcs;
  size_t idx = open_idx_;
  while (idx < pcs.size() && pcs[idx] != linear) idx++;
  if (idx == pcs.size()) return false;
  stats_.hookless_settles++;
  skipped_ -= open_pretend_ - (idx - open_idx_);  // those after `linear` have not started
  last_start_ = pcs[idx];
  if (idx == open_idx_) {
    prev_start_ = open_prev_;
    last_start_skipped_ = open_skipped_;
  } else {
    prev_start_ = pcs[idx - 1];
    last_start_skipped_ = true;
  }
  open_idx_ = idx;
  open_prev_ = prev_start_;
  open_skipped_ = last_start_skipped_;
  open_pretend_ = 0;
  return true;
}

void TcgCpu::SettleOpenBlock() {
  if (open_ == nullptr) return;
  // CS:EIP inside the block: QEMU synced it before the helper that asks
  // (RDMSR, WRMSR, RDPMC, RDTSC...) or restored it (a store to code); where it
  // was not (an MMIO load), EIP is where the block's hook or an earlier
  // helper left it, so the count lags and never runs ahead.  Elsewhere the
  // block ran to its end.
  if (!SettleAt(env_->segs[uabi::kCs].base + env_->eip)) CloseBlock();
}

uint64_t TcgCpu::skipped() const {
  if (open_ == nullptr || open_pretend_ == 0) return skipped_;
  const std::vector<uint64_t>& pcs = open_->pcs;
  const uint64_t linear = env_->segs[uabi::kCs].base + env_->eip;
  for (size_t idx = open_idx_; idx < pcs.size(); idx++) {
    if (pcs[idx] == linear) return skipped_ - (open_pretend_ - (idx - open_idx_));
  }
  return skipped_;
}

void TcgCpu::DetachOpenBlock() {
  if (open_ == nullptr || open_ == &open_copy_) return;
  open_copy_ = *open_;
  open_ = &open_copy_;
}

void TcgCpu::DropHooklessRecords() {
  DetachOpenBlock();
  hookless_tbs_.clear();
  std::fill(hookless_hits_.begin(), hookless_hits_.end(), HooklessHit{});
}

void TcgCpu::SkipSequential(uint64_t limit, bool across_blocks, bool block_ends) {
  skipping_ = true;
  skip_limit_ = limit;
  skip_across_ = across_blocks;
  skip_block_ends_ = across_blocks && block_ends;
  block_ends_n_ = 0;
  if (skip_block_ends_) {
    if (block_ends_.empty()) block_ends_.resize(kMaxBlockEnds);
    skip_ss32_ = env_->hflags & kHfSs32;
    skip_ends_.generations = {g_paging_generation.load(std::memory_order_relaxed),
                              g_code_bytes_generation.load(std::memory_order_relaxed)};
    skip_ends_.cs = FromCache(env_->segs[uabi::kCs]);
    skip_ends_.rflags = env_->eflags;
    skip_ends_.cr0 = env_->cr[0];
    skip_ends_.cr3 = env_->cr[3];
    skip_ends_.cr4 = env_->cr[4];
    skip_ends_.efer = env_->efer;
  }
  skip_hflags_ = SkipFlags(env_);
  skip_cs_ = env_->segs[uabi::kCs].selector;
}

uint64_t TcgCpu::PrefixBytes(uint64_t linear, bool* rep, bool* addr_size) {
  // Legacy prefixes, and REX in 64-bit code.
  const bool code64 = (env_->hflags & kHfCs64) != 0;
  if (rep) *rep = false;
  if (addr_size) *addr_size = false;
  uint64_t n = 0;
  for (; n < 14; n++) {
    uint8_t b = 0;
    if (!ReadCode(linear + n, b)) break;
    if (!IsPrefix(b, code64)) break;
    if (rep && (b == 0xF2 || b == 0xF3)) *rep = true;
    if (addr_size && b == 0x67) *addr_size = true;
  }
  return n;
}

uint64_t TcgCpu::FinishedRepLength(uint64_t linear) {
  if (!IsRepString(linear)) return 0;
  // The count register is the address size's: CX, ECX or RCX (a 67 prefix
  // switches 16 <-> 32 bits, and 64 -> 32 in 64-bit code). The string
  // opcode is one byte after the prefixes.
  const bool code64 = (env_->hflags & kHfCs64) != 0;
  const bool cs32 = (env_->hflags & kHfCs32) != 0;
  bool a67 = false;
  const uint64_t prefixes = PrefixBytes(linear, nullptr, &a67);
  const int width = code64 ? (a67 ? 32 : 64) : (cs32 != a67 ? 32 : 16);
  return (env_->regs[kRcx] & LowBits(width)) == 0 ? prefixes + 1 : 0;
}

bool TcgCpu::IsRepString(uint64_t linear) {
  if (rep_probe_.linear == linear && rep_probe_.cr3 == env_->cr[3]) return rep_probe_.rep;
  // A REP prefix, then a string opcode: INS, OUTS, MOVS, CMPS, STOS, LODS,
  // SCAS (SDM vol. 2, "REP/REPE/REPNE").
  bool rep = false;
  const uint64_t prefixes = PrefixBytes(linear, &rep);
  uint8_t b = 0;
  const bool is = rep && ReadCode(linear + prefixes, b) &&
                  ((b >= 0xA4 && b <= 0xA7) || (b >= 0xAA && b <= 0xAF) || (b >= 0x6C && b <= 0x6F));
  rep_probe_.linear = linear;
  rep_probe_.cr3 = env_->cr[3];
  rep_probe_.rep = is;
  return is;
}

void TcgCpu::AnnounceEvent(std::optional<uint64_t> soft_linear) {
  // In a block with one hook: the instruction the event comes at (a fault,
  // INT n) has started, those after it have not.
  LeaveBlockAt(soft_linear ? *soft_linear : env_->segs[uabi::kCs].base + env_->eip);
  debug_progress_ = true;  // a step ends at the handler's first instruction
  if (event_hook_) event_hook_(soft_linear);
  skipping_ = false;
}

void TcgCpu::SetInstructionHook(std::function<void(uint64_t)> hook) {
  insn_hook_ = std::move(hook);
  CloseBlock();
  if (!insn_hook_) env_->hflags &= ~(uabi::kHfHookless | uabi::kHfCountCall);  // (between runs, or leaving no block of the other kind behind)
  observed_valid_ = false;
  skipping_ = false;
  skipped_ = 0;
  block_ends_n_ = 0;  // (an observer takes them before it goes: Machine::FlushTcgBulk)
  SyncCodeHook();
}

void TcgCpu::DeleteHook(size_t hook) {
  CodeWorkTimer timer;
  // CPUX86State after the prefix: error_code, exception_is_int,
  // exception_next_eip, dr[8], cpu_breakpoint[4], old_exception
  // (uabi::kOldExceptionAfterErrorCode).
  int32_t& old_exception = At<int32_t>(env_, error_code_offset_ + uabi::kOldExceptionAfterErrorCode);
  const uint64_t cr2 = env_->cr[2];
  const int32_t error_code = At<int32_t>(env_, error_code_offset_);
  const int32_t is_int = At<int32_t>(env_, error_code_offset_ + 4);
  const uint64_t next_eip = At<uint64_t>(env_, error_code_offset_ + 8);
  const int32_t in_flight = old_exception;
  uc_hook_del(uc_, hook);
  env_->cr[2] = cr2;
  At<int32_t>(env_, error_code_offset_) = error_code;
  At<int32_t>(env_, error_code_offset_ + 4) = is_int;
  At<uint64_t>(env_, error_code_offset_ + 8) = next_eip;
  old_exception = in_flight;
}

bool TcgCpu::Lingers(std::optional<std::chrono::steady_clock::time_point>& idle_since) const {
  const auto now = std::chrono::steady_clock::now();
  if (!idle_since) idle_since = now;
  return now - *idle_since < config_.code_hook_linger;
}

bool TcgCpu::KeepCodeHookLingering() {
  if (code_hook_ != 0) {
    if (!CodeHookActive()) code_hook_idle_since_ = std::chrono::steady_clock::now();
    return false;
  }
  linger_requested_ = true;
  return true;
}

bool TcgCpu::SyncCodeHook() {
  // (The guest's instruction breakpoints have hooks of their own:
  // SyncGuestExecHooks.)
  const bool want = static_cast<bool>(insn_hook_) || debug_code_;
  // Installed unused, to linger (KeepCodeHookLingering).
  const bool lingering = !want && code_hook_ == 0 && linger_requested_;
  linger_requested_ = false;
  if (want) {
    code_hook_idle_since_.reset();
  } else if (lingering) {
    code_hook_idle_since_ = std::chrono::steady_clock::now();
  } else if (code_hook_ != 0) {
    // Unused: it lingers (Config::code_hook_linger) before it goes.
    if (Lingers(code_hook_idle_since_)) {
      // Pending events are QEMU's to take at the next run's start or block
      // boundary, not the unused hook's (TcgCpu::Kick).
      deliver_now_ = false;
      return false;
    }
  }
  if ((want || lingering) && code_hook_ == 0) {
    uc_hook h = 0;
    if (uc_hook_add(uc_, &h, UC_HOOK_CODE, reinterpret_cast<void*>(&TcgCallbacks::Code), this, 1, 0) == UC_ERR_OK) {
      code_hook_ = h;
      // One hook a block hides this hook from the translator through its
      // to_delete flag: only where the handle shows the layout
      // unicorn_abi.h pins (a catch-all code hook to vbts's callback).
      if (!CatchAllHookAsPinned(h, UC_HOOK_CODE, reinterpret_cast<void*>(&TcgCallbacks::Code), this))
        config_.hook_per_block = false;
      stats_.code_hook_adds++;
    }
  } else if (!want && code_hook_ != 0) {
    DeleteCodeHook(code_hook_);
    code_hook_ = 0;
    code_hook_idle_since_.reset();
    stats_.code_hook_removals++;
  } else {
    return false;
  }
  observed_valid_ = false;
  deliver_now_ = CodeHookActive() && (At<uint32_t>(cpu_, uabi::kCpuInterruptRequest) != 0 || pending_exception_);
  // Hooks are compiled into the translations: retranslate.
  FlushCode();
  SyncCountCallMode();
  return true;
}

// Unicorn 2.0.1's own time limit stops the CPU asynchronously, which can
// leave a block's registers updated with EIP at its start (TcgCallbacks::
// Block); its timer thread also polls every 2 us.  vbts's watcher only sets
// time_up_, which the next block start acts on.
void TcgCpu::Watch() {
  std::unique_lock<std::mutex> lock(watch_mu_);
  while (!watch_quit_) {
    if (watch_deadline_ == 0) {
      watch_cv_.wait(lock);
      continue;
    }
    const auto deadline = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(watch_deadline_));
    if (watch_cv_.wait_until(lock, deadline) != std::cv_status::timeout) continue;
    if (watch_deadline_ == 0) continue;
    time_up_ = true;  // the next block start ends the run
    if (exit_at_block_start_.load(std::memory_order_relaxed)) {
      // Without the block hook, QEMU's exit request ends it there.  The
      // request can be lost: made before uc_emu_start has begun the run (it
      // is ignored, then reset), or while QEMU's loop clears the flag it
      // checks at a block start before it reads the request, which Unicorn
      // 2.0.1 does without QEMU's barrier between the two.  So it is made
      // again every kRestopNs until the run, under this lock, says it ended.
      uc_emu_stop(uc_);
      watch_deadline_ = SteadyNowNs() + kRestopNs;
      continue;
    }
    watch_deadline_ = 0;
  }
}

void TcgCpu::SyncHooks() {
  SyncCodeHook();
  hooks_synced_ = true;
}

absl::StatusOr<TcgStop> TcgCpu::Run(uint64_t timeout_us) {
  stats_.runs++;
  if (!hooks_synced_) SyncCodeHook();
  hooks_synced_ = false;
  SyncDataHook();
  SyncGuestWatches();
  SyncGuestExecHooks();
  SyncDebugBreakpoints();  // after the code hook: whether it checks them
  SyncBlockHook();  // after the other hooks: whether any needs it
  allow_delivery_ = false;
  stop_requested_ = halted_ = triple_fault_ = false;
  kick_ = false;
  delivering_ = -1;
  first_hook_of_run_ = true;
  // A run that ended where an instruction left in its block was to run
  // alone (RunAloneUnlessSeen) ended at that block's start, but the
  // instruction has not run since its boundary was reported.
  block_start_at_run_ = block_start_ && !(alone_pending_ && alone_at_ == env_->segs[uabi::kCs].base + env_->eip);
  // (a run that ended there resumes through first_hook_of_run_; one that
  // ended where one hook a block was entered or left, through reenter_at_)
  if (!hookless_reentry_ || reenter_at_ != env_->segs[uabi::kCs].base + env_->eip) reenter_at_ = kNoReentry;
  hookless_reentry_ = false;
  TcgCallbacks::RestoreHiddenHook();
  if (!config_.hook_per_block || !insn_hook_ || code_hook_ == 0 || exec_bp_hook_mask_ || DebugChecked())
    env_->hflags &= ~uabi::kHfHookless;
  if (!CountCallAllowedForRun()) env_->hflags &= ~uabi::kHfCountCall;
  debug_stop_ = DebugStop{};
  debug_first_ = true;
  debug_progress_ = false;
  blocks_in_run_ = 0;
  reported_n_ = 0;  // (block numbers start again)
  alone_block_ = ~0ull;
  if (alone_pending_) {
    // The last run ended between RunAloneUnlessSeen and the instruction's
    // run alone: this one starts with it, alone (unless an interrupt comes
    // first: then Block drops the rerun).
    At<uint32_t>(cpu_, uabi::kCpuCflagsNextTb) = 1;
  } else {
    alone_skip_ = 0;
  }
  debug_resume_ = env_->segs[uabi::kCs].base + env_->eip;
  TcgCpu* outer = t_running;
  t_running = this;
  timed_out_ = false;
  time_up_ = false;
  t_lookup_ra = 0;
  // No block hook: stops, the time limit and kicks leave through QEMU's exit
  // request at the next block start, where QEMU puts EIP at the block's start
  // (cpu_tb_exec) because no code hook is listed (NeedsBlockHook).
  const bool exit_at_block_start = reinterpret_cast<const uabi::HookPrefix*>(block_hook_)->to_delete;
  exit_at_block_start_ = exit_at_block_start;
  if (exit_at_block_start) stats_.runs_without_block_hook++;
  if (timeout_us != 0) {
    std::lock_guard<std::mutex> lock(watch_mu_);
    watch_deadline_ = SteadyNowNs() + timeout_us * 1000;
    watch_cv_.notify_all();
  }
  ReclaimCode();
  // The records of blocks translated with one hook stay until the code
  // buffer is emptied; invalidated blocks' among them.  Past a million (~100
  // MB) all translations go (a few ms) and are made again with new records.
  if (hookless_tbs_.size() >= config_.hook_per_block_records) {
    FlushCode();
    DropHooklessRecords();
    stats_.hookless_record_drops++;
  }
  const uc_err e = uc_emu_start(uc_, env_->eip, ~0ull, 0, 0);
  t_task_cs = -1;  // (a switch that faulted before its CS)
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    watch_deadline_ = 0;
    exit_at_block_start_ = false;
  }
  code_hook_deleted_ = false;  // Unicorn removed deleted hooks from its lists as the run ended
  if (exit_at_block_start && time_up_.load()) timed_out_ = true;
  time_up_ = false;
  t_running = outer;
  if (e != UC_ERR_OK) {
    CpuState st = GetState();
    return absl::InternalError(absl::StrFormat("TCG engine stopped at %s: %s", st.Describe(), uc_strerror(e)));
  }
  if (triple_fault_) return TcgStop{TcgStop::kTripleFault};
  if (halted_) return TcgStop{TcgStop::kHalted};
  if (stop_requested_) return TcgStop{TcgStop::kRequested};
  if (timed_out_) return TcgStop{TcgStop::kTimeout};
  return TcgStop{TcgStop::kRequested};
}

// --- A debugger's stops ---

void TcgCpu::SetDebugBreakpoints(std::vector<uint64_t> linear) {
  std::sort(linear.begin(), linear.end());
  linear.erase(std::unique(linear.begin(), linear.end()), linear.end());
  if (linear == debug_bps_) return;  // GDB removes and re-inserts them at every stop
  debug_bps_ = std::move(linear);
  UpdateDebugCode();  // (SyncDebugBreakpoints puts them in at the next run's start)
}

void TcgCpu::SyncDebugBreakpoints() {
  // While the catch-all code hook runs, it checks every breakpoint
  // (DebugCheck, after the tracer's events at the same boundary). Otherwise
  // each is QEMU's own (BP_GDB): its translation ends with a debug exit
  // before the instruction (QemuBreakpoint), with no Unicorn code hook, so
  // a run with breakpoints alone needs no block hook either (NeedsBlockHook).
  // The one where the run resumes is a code hook bounded to its address
  // instead, which lets the run's first block run it (DebugBreakpoint).
  std::vector<uint64_t> qemu, hooked;
  if (!CodeHookActive()) {
    const uint64_t resume = env_->segs[uabi::kCs].base + env_->eip;
    for (uint64_t a : debug_bps_) (a == resume ? hooked : qemu).push_back(a);
  }
  if (qemu != qemu_bps_) {
    SetQemuBreakpoints(qemu_bps_, std::move(qemu), uabi::kBpGdb);
    stats_.qemu_breakpoint_syncs++;
  }
  if (hooked != debug_bp_hook_addrs_) {
    for (size_t h : debug_bp_hooks_) DeleteCodeHook(h);
    debug_bp_hooks_.clear();
    debug_bp_hook_addrs_ = std::move(hooked);
    for (uint64_t a : debug_bp_hook_addrs_) {
      uc_hook h = 0;
      if (uc_hook_add(uc_, &h, UC_HOOK_CODE, reinterpret_cast<void*>(&TcgCallbacks::DebugBreakpoint), this, a, a) ==
          UC_ERR_OK)
        debug_bp_hooks_.push_back(h);
    }
    FlushCode();  // code hooks are compiled into the translations
  }
}

void TcgCpu::SetDebugStep(bool step) {
  debug_step_ = step;
  UpdateDebugCode();
}

void TcgCpu::SetDebugWatchpoints(std::vector<DebugWatch> watches) {
  if (watches.size() == debug_watches_.size() &&
      std::equal(watches.begin(), watches.end(), debug_watches_.begin(), [](const DebugWatch& a, const DebugWatch& b) {
        return a.addr == b.addr && a.len == b.len && a.read == b.read && a.write == b.write;
      }))
    return;
  debug_watches_ = std::move(watches);
  // QEMU's own watchpoint path (TcgCallbacks::WatchedPage, DebugWatchCheck):
  // the pages with a watched range take QEMU's slow path from their next TLB
  // fill, every other access stays on the fast path. No Unicorn memory hook
  // (which would send every access of the guest down the slow path) and no
  // retranslation.
  tlb_flush_x86_64(cpu_);
  stats_.debug_watch_syncs++;
  UpdateDebugCode();
}

void TcgCpu::SetDataAccessHook(DataAccessHook hook) {
  data_access_hook_ = std::move(hook);
  SyncDataHook();
}

void TcgCpu::SyncDataHook() {
  if (data_access_hook_) {
    data_hook_idle_since_.reset();
    if (data_mem_hook_ != 0) return;  // still installed (lingering): the translations have it
    uc_hook h = 0;
    // begin > end: every address.
    if (uc_hook_add(uc_, &h, UC_HOOK_MEM_READ | UC_HOOK_MEM_WRITE, reinterpret_cast<void*>(&TcgCallbacks::DataAccess),
                    this, 1, 0) == UC_ERR_OK) {
      data_mem_hook_ = h;
      stats_.data_hook_adds++;
    }
    FlushCode();  // memory hooks are compiled into the translations
    SyncCountCallMode();
    return;
  }
  if (data_mem_hook_ == 0) return;
  // Unused, the hook lingers (Config::code_hook_linger) as the code hook
  // does, calling nothing: a guest that turns its cache events off and on
  // around each PMI (Linux's perf) would otherwise have all its code
  // retranslated twice per PMI.
  if (Lingers(data_hook_idle_since_)) return;
  DeleteHook(data_mem_hook_);
  data_mem_hook_ = 0;
  data_hook_idle_since_.reset();
  stats_.data_hook_removals++;
  FlushCode();
}

void TcgCpu::SetGuestDataHitHook(GuestDataHitHook hook) {
  guest_data_hit_hook_ = std::move(hook);
  SyncGuestWatches();
}

GuestBreakpoints TcgCpu::GuestDebugRegs() const {
  GuestBreakpoints bp;
  for (int i = 0; i < 4; i++) bp.dr[i] = dr()[i];
  bp.dr7 = dr()[7];
  return bp;
}

std::array<uint64_t, 5> TcgCpu::GuestWatchRegs() const {
  // Only what decides the ranges: DR7's L/G bits and R/W and LEN fields of
  // the data breakpoints, and their addresses.
  std::array<uint64_t, 5> r{};
  if (!guest_data_hit_hook_) return r;
  const GuestBreakpoints bp = GuestDebugRegs();
  for (int i = 0; i < 4; i++) {
    if (!bp.IsData(i)) continue;
    r[4] |= bp.dr7 & ((3ull << (2 * i)) | (0xFull << (16 + 4 * i)));
    r[i] = bp.dr[i];
  }
  return r;
}

void TcgCpu::SyncGuestWatches() {
  // The ranges are QEMU's watch flags in its TLB entries (WatchedPage): a
  // change empties the TLB, and the pages the new ranges overlap leave QEMU's
  // fast path as their entries come back; no hook, no retranslation (Linux
  // sets and clears a task's watchpoints at every switch to and from it).
  const std::array<uint64_t, 5> want = GuestWatchRegs();
  if (want == guest_watch_regs_) return;
  guest_watch_regs_ = want;
  tlb_flush_x86_64(cpu_);
  stats_.guest_watch_syncs++;
  // (From MOV DRn in a run: QEMU ends the block after it and looks up the
  // next one by the flags.)
  SyncCountCallMode();
}

void TcgCpu::SyncCountCallMode() {
  // What one call a block cannot serve arrived in a run (watched ranges,
  // whose hits run an instruction again alone; a memory or code hook): the
  // next block is looked up without the mode's flag.  Only where QEMU looks
  // it up, not chains it: after MOV DRn (QEMU ends its block with an exit
  // to its loop) or after every translation was invalidated (FlushCode,
  // which unlinks every chain).
  if ((env_->hflags & uabi::kHfCountCall) && !CountCallAllowedForRun()) env_->hflags &= ~uabi::kHfCountCall;
}


bool TcgCpu::UpdateDebugCode() {
  // Breakpoints alone need no catch-all hook (DebugBreakpoint), nor do
  // watchpoints (their access finds its boundary: RunAloneUnlessSeen); a
  // step does.
  debug_code_ = debug_step_;
  return SyncCodeHook();
}

bool TcgCpu::DebugStopsAt(uint64_t linear) const {
  return debug_step_ || debug_stop_.kind != DebugStop::kNone ||
         std::binary_search(debug_bps_.begin(), debug_bps_.end(), linear);
}

void TcgCpu::DebugCheck(uint64_t linear) {
  const bool first = debug_first_;
  debug_first_ = false;
  // An event the tracer raised for this boundary (a PMI, an emulated #DB)
  // comes first, as on hardware: a breakpoint here is hit when the handler
  // returns to it; a step ends at the handler's first instruction.
  if (deliver_now_ && Deliverable()) {
    debug_progress_ = true;
    return;
  }
  // A watched access by the previous instruction ended it (RequestStop):
  // reported as the watchpoint, also when a step ends here.
  if (debug_stop_.kind == DebugStop::kWatch) Boundary(linear);
  // A breakpoint where a step ends is reported as the breakpoint (GDB's
  // range steps must not step over one).
  if (!(first && linear == debug_resume_) && std::binary_search(debug_bps_.begin(), debug_bps_.end(), linear))
    DebugBoundary(DebugStop::kBreakpoint, linear);
  if (debug_step_ && debug_progress_) DebugBoundary(DebugStop::kStep, linear);
  debug_progress_ = true;  // the instruction here starts
}

void TcgCpu::DebugBoundary(DebugStop::Kind kind, uint64_t linear) {
  debug_stop_ = DebugStop{kind, linear, false};
  stop_requested_ = true;
  Boundary(linear);
}

absl::Status CodeCoherentMemory::Write(Gpa gpa, absl::Span<const uint8_t> data) {
  VBTS_RETURN_IF_ERROR(ram_.Write(gpa, data));
  if (TcgCpu* tcg = engine_()) tcg->InvalidateCodeBytes(gpa.value, data.size());
  return absl::OkStatus();
}

void TcgCpu::InvalidateCodeBytes(uint64_t gpa, uint64_t len) {
  rep_probe_.linear = ~0ull;
  if (gpa >= config_.ram_bytes || len == 0) return;
  const uint64_t end = std::min<uint64_t>(config_.ram_bytes, gpa + len);
  // Most stores vbts makes (BTS and PEBS records, DS fields) land in pages
  // no translation comes from: nothing to drop.  QEMU's range invalidation
  // allocates and frees as it goes, so it is called only for pages that may
  // hold code.
  if (!MayHoldCodeIn(gpa, len)) return;
  stats_.code_invalidations++;
  // QEMU's range invalidation is exact within a page: a store next to code
  // (a DS area in the same page as the loop that branches) keeps it.
  tb_invalidate_phys_range_x86_64(uc_, gpa, end);
  if (in_code_hook_ && !code_changed_in_hook_ && HitsBlockAhead(gpa, end)) code_changed_in_hook_ = true;
}

bool TcgCpu::HitsBlockAhead(uint64_t gpa, uint64_t end) {
  // The rest of the block being run lies from the reported instruction to
  // at most the end of the next linear page (a block crosses at most one
  // page boundary): its physical bytes are [phys(L) + offset, end of that
  // page) and the page phys(L + 1), L the instruction's linear page.
  // Translated once per page and paging generation: most stores (BTS
  // records in a data buffer) then cost two comparisons.
  uint64_t linear = hook_linear_;
  if (!(env_->hflags & (1u << 14))) linear &= 0xFFFFFFFFu;  // outside IA-32e mode (HF_LMA)
  const uint64_t page = linear & ~0xFFFull;
  const uint64_t generation = PagingGeneration();
  if (!block_pages_.valid || block_pages_.linear_page != page || block_pages_.generation != generation ||
      block_pages_.cr3 != env_->cr[3]) {
    WalkView bus(config_.ram, config_.ram_bytes, config_.devices);
    for (int i = 0; i < 2; i++) {
      uint64_t la = page + static_cast<uint64_t>(i) * 0x1000;
      if (!(env_->hflags & (1u << 14))) la &= 0xFFFFFFFFu;
      absl::StatusOr<pmu::Translation> t = pmu::Translate(WalkRegs(), bus, Gva{la}, pmu::Access{}, false);
      block_pages_.phys[i] = t.ok() && t->fault.ok() ? (t->gpa.value & ~0xFFFull) : ~0ull;
    }
    block_pages_.valid = true;
    block_pages_.linear_page = page;
    block_pages_.generation = generation;
    block_pages_.cr3 = env_->cr[3];
  }
  const uint64_t from = block_pages_.phys[0] == ~0ull ? ~0ull : block_pages_.phys[0] + (linear & 0xFFF);
  const auto overlaps = [&](uint64_t lo, uint64_t hi) { return lo != ~0ull && gpa < hi && lo < end; };
  return overlaps(from, block_pages_.phys[0] + 0x1000) ||
         overlaps(block_pages_.phys[1], block_pages_.phys[1] + 0x1000);
}

void TcgCpu::NoteCodePage(uint64_t page, bool has_code) {
  if (page >= config_.ram_bytes >> 12) return;  // not guest RAM: InvalidateCodeBytes ignores it
  const uint64_t bit = 1ull << (page & 63);
  if (has_code) code_pages_[page >> 6] |= bit;
  else code_pages_[page >> 6] &= ~bit;
}

}  // namespace vbts::vcpu
