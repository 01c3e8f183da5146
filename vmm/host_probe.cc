// host_probe.cc: ProbeHost. Host facts come from uname, the cpuid instruction,
// /proc/cpuinfo, /sys/module and KVM_CHECK_EXTENSION; guest behaviour from
// tiny probe guests run in one VM with one vCPU (2 MiB of RAM), reset between
// probes. Each probe is a few hand-assembled instructions that end by writing
// to port 0xE0 (CPL0) or to an unbacked GPA (any CPL); every IDT vector leads
// to a stub that reports its number on port 0xE1, so a fault the guest takes
// instead of what was probed is seen too. A thread-directed timer signal kicks
// KVM_RUN (kvm_run.immediate_exit) so no probe can hang.
#include "vmm/host_probe.h"

#include <cpuid.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "vmm/guest_memory.h"

namespace vbts::vmm {
namespace {

using Clock = std::chrono::steady_clock;
using vcpu::KvmVcpu;
using vcpu::Tristate;

// ---- Probe guest physical layout (identity mapped) ----
constexpr uint64_t kRamBytes = 2ull << 20;
constexpr uint64_t kGdt = 0x1000;
constexpr uint64_t kIdt32 = 0x2000;  // 256 8-byte gates
constexpr uint64_t kIdt64 = 0x3000;  // 256 16-byte gates
constexpr uint64_t kTss32 = 0x4000;
constexpr uint64_t kTss64 = 0x4100;
constexpr uint64_t kStubs = 0x5000;  // 16 bytes per vector
constexpr uint64_t kPml4 = 0x6000, kPdpt = 0x7000, kPd = 0x8000;  // lm64: 1 GiB of 2 MiB pages
constexpr uint64_t kPd32 = 0x9000;  // 32-bit paging probe: one 4 MiB PSE page at 0
constexpr uint64_t kCode = 0x10000;
constexpr uint64_t kCodeArea = 0x1000;
constexpr uint64_t kUserStack = 0x70000, kKernelStack = 0x80000;
constexpr uint32_t kDoneMmio = 0x3F000000;  // not backed by RAM: a write is an MMIO exit at any CPL
constexpr uint8_t kDonePort = 0xE0, kReportPort = 0xE1;
constexpr uint32_t kProbeData = 0x60000;  // data word of the data-breakpoint probe

// GDT (SDM vol. 3A 3.4.5): flat 4 GiB code/data, 64-bit code, both TSSs.
constexpr uint16_t kSelK32 = 0x08, kSelKData = 0x10, kSelU32 = 0x1B, kSelUData = 0x23, kSelK64 = 0x28,
                   kSelU64 = 0x33, kSelTss32 = 0x38, kSelTss64 = 0x40;
constexpr uint16_t kGdtLimit = 10 * 8 - 1;

constexpr uint8_t kVecDb = 1, kVecUd = 6, kProbeVector = 0x30;
constexpr uint64_t kRflagsIf = 1u << 9, kRflagsRf = 1u << 16;
constexpr uint32_t kCpuid1EdxDs = 1u << 21, kCpuid1EdxApic = 1u << 9;
constexpr uint32_t kMsrPerfCapabilities = 0x345;

// A tiny assembler for the probe guests: each method appends the bytes of one
// instruction at the next address of the code area (GPA kCode).
class Code {
 public:
  uint64_t here() const { return kCode + bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

  Code& Nop() { return Put({0x90}); }                              // nop
  Code& Hlt() { return Put({0xF4}); }                              // hlt
  Code& Pushf() { return Put({0x9C}); }                            // pushfd
  Code& PushCs() { return Put({0x0E}); }                           // push cs (not in 64-bit mode)
  Code& PushImm32(uint32_t v) { return Put({0x68}).Imm32(v); }     // push imm32
  Code& Iret() { return Put({0xCF}); }                             // iretd (32-bit operand size)
  Code& Retf() { return Put({0xCB}); }                             // retf: pops EIP, CS (+ESP, SS if outer)
  Code& Int(uint8_t n) { return Put({0xCD, n}); }                  // int n
  Code& XorEcxEcx() { return Put({0x31, 0xC9}); }                  // xor ecx, ecx
  Code& MovEaxImm(uint32_t v) { return Put({0xB8}).Imm32(v); }     // mov eax, imm32
  Code& OrEaxImm(uint32_t v) { return Put({0x0D}).Imm32(v); }      // or eax, imm32
  Code& MovEaxMoffs(uint32_t a) { return Put({0xA1}).Imm32(a); }   // mov eax, [moffs32] (32-bit mode)
  Code& MovMoffsEax(uint32_t a) { return Put({0xA3}).Imm32(a); }   // mov [moffs32], eax (32-bit mode)
  Code& Cpuid() { return Put({0x0F, 0xA2}); }                      // cpuid
  Code& MovEaxCr0() { return Put({0x0F, 0x20, 0xC0}); }            // mov eax, cr0
  Code& MovCr0Eax() { return Put({0x0F, 0x22, 0xC0}); }            // mov cr0, eax
  Code& MovCr3Eax() { return Put({0x0F, 0x22, 0xD8}); }            // mov cr3, eax
  Code& MovEaxCr4() { return Put({0x0F, 0x20, 0xE0}); }            // mov eax, cr4
  Code& MovCr4Eax() { return Put({0x0F, 0x22, 0xE0}); }            // mov cr4, eax
  Code& JmpNext() { return Put({0xEB, 0x00}); }                    // jmp short $+2
  Code& OutDone() { return Put({0xE6, kDonePort}); }               // out 0xE0, al (CPL0 only)
  // mov dword [kDoneMmio], 1. 32-bit: C7 05 disp32 imm32. 64-bit: ModRM 05
  // would be RIP-relative, so C7 04 25 disp32 imm32 (SIB, no base/index).
  Code& StoreDone(bool long_mode) {
    if (long_mode) return Put({0xC7, 0x04, 0x25}).Imm32(kDoneMmio).Imm32(1);
    return Put({0xC7, 0x05}).Imm32(kDoneMmio).Imm32(1);
  }
  // The usual end of a probe: port write at CPL0, MMIO write at CPL3.
  Code& Done(bool long_mode, int cpl) { return cpl == 0 ? OutDone() : StoreDone(long_mode); }

 private:
  Code& Put(std::initializer_list<uint8_t> b) {
    bytes_.insert(bytes_.end(), b);
    return *this;
  }
  Code& Imm32(uint32_t v) {
    for (int i = 0; i < 4; i++) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  std::vector<uint8_t> bytes_;
};

// ---- Watchdog: a periodic thread-directed signal that kicks KVM_RUN ----
thread_local kvm_run* t_watched_run = nullptr;

void OnWatchdogSignal(int) {
  kvm_run* r = t_watched_run;
  if (r != nullptr) r->immediate_exit = 1;
}

class Watchdog {
 public:
  static absl::StatusOr<std::unique_ptr<Watchdog>> Start(int period_ms) {
    std::unique_ptr<Watchdog> w(new Watchdog());
    w->signo_ = SIGRTMIN + 5;
    struct sigaction sa {};
    sa.sa_handler = OnWatchdogSignal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(w->signo_, &sa, &w->old_action_) != 0)
      return absl::ErrnoToStatus(errno, "sigaction(probe watchdog signal) failed");
    w->installed_ = true;
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, w->signo_);
    pthread_sigmask(SIG_UNBLOCK, &unblock, &w->old_mask_);
    sigevent sev{};
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = w->signo_;
#ifdef sigev_notify_thread_id
    sev.sigev_notify_thread_id = static_cast<pid_t>(::syscall(SYS_gettid));
#else
    sev._sigev_un._tid = static_cast<pid_t>(::syscall(SYS_gettid));
#endif
    if (timer_create(CLOCK_MONOTONIC, &sev, &w->timer_) != 0)
      return absl::ErrnoToStatus(errno, "timer_create(probe watchdog) failed");
    w->timer_created_ = true;
    itimerspec its{};
    its.it_value.tv_nsec = its.it_interval.tv_nsec = period_ms * 1000000L;
    if (timer_settime(w->timer_, 0, &its, nullptr) != 0)
      return absl::ErrnoToStatus(errno, "timer_settime(probe watchdog) failed");
    return w;
  }
  ~Watchdog() {
    // Delete the timer first: a signal already pending is delivered on the
    // return from timer_delete, to our handler, before it is uninstalled.
    if (timer_created_) timer_delete(timer_);
    t_watched_run = nullptr;
    if (installed_) {
      sigaction(signo_, &old_action_, nullptr);
      pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    }
  }

 private:
  Watchdog() = default;
  int signo_ = 0;
  bool installed_ = false, timer_created_ = false;
  struct sigaction old_action_ {};
  sigset_t old_mask_{};
  timer_t timer_{};
};

// How one probe run ended.
struct RunEnd {
  enum Kind { kDone, kReport, kStopped, kInternalError, kShutdown, kHlt, kTimeout, kExitLimit, kOther };
  Kind kind = kOther;
  uint8_t vector = 0;  // kReport: the IDT vector the guest took
  int debug_exits = 0;
  std::vector<uint64_t> debug_pcs;
  std::string text;  // kInternalError / kOther: what KVM said
};

std::string VectorName(uint8_t v) {
  static const char* const kNames[] = {"#DE", "#DB", "NMI", "#BP", "#OF", "#BR", "#UD", "#NM",
                                       "#DF", "#MF?", "#TS", "#NP", "#SS", "#GP", "#PF"};
  if (v < 15) return kNames[v];
  return absl::StrFormat("vector 0x%x", v);
}

kvm_segment FlatSeg(uint16_t sel, bool code, bool long_code) {
  kvm_segment s{};
  s.base = 0;
  s.limit = 0xFFFFFFFF;
  s.selector = sel;
  s.type = code ? 11 : 3;  // execute/read accessed; read/write accessed
  s.present = 1;
  s.dpl = sel & 3;
  s.db = long_code ? 0 : 1;
  s.s = 1;
  s.l = long_code ? 1 : 0;
  s.g = 1;
  return s;
}

// One VM with RAM, descriptor tables and a vCPU, reused by every probe.
class ProbeVm {
 public:
  static absl::StatusOr<std::unique_ptr<ProbeVm>> Create(const Kvm& kvm, const std::vector<kvm_cpuid_entry2>& cpuid) {
    std::unique_ptr<ProbeVm> p(new ProbeVm());
    VBTS_ASSIGN_OR_RETURN(p->ram_, GuestMemory::Create(kRamBytes));
    VBTS_ASSIGN_OR_RETURN(p->vm_, Vm::Create(kvm));
    VBTS_RETURN_IF_ERROR(p->vm_->SetMemoryRegion(0, 0, kRamBytes, p->ram_->host_base()));
    p->BuildTables();
    VBTS_ASSIGN_OR_RETURN(p->vcpu_, p->vm_->CreateVcpu(0, /*sync_regs=*/false));
    VBTS_RETURN_IF_ERROR(p->vcpu_->SetCpuid(cpuid));
    return p;
  }

  ~ProbeVm() {
    // The watchdog must not touch kvm_run once it is unmapped.
    if (vcpu_ != nullptr && t_watched_run == vcpu_->run()) t_watched_run = nullptr;
  }

  KvmVcpu& vcpu() { return *vcpu_; }
  int runs() const { return runs_; }

  // Loads `code` at kCode and puts the vCPU at its start in pm32 or lm64 at
  // `cpl`, with `rflags` and the guest debug `control` (DR0 = `dr0`, enabled
  // as an execute breakpoint when `control` has USE_HW_BP).
  absl::Status Prepare(bool long_mode, int cpl, const Code& code, uint64_t rflags = 2, uint32_t control = 0,
                       uint64_t dr0 = 0) {
    VBTS_RETURN_IF_ERROR(vcpu_->SetGuestDebug(0));
    // An IO/MMIO exit is finished by the next KVM_RUN (RIP past an OUT);
    // finish it now so it cannot move the state set below.
    for (int i = 0; i < 4; i++) {
      VBTS_ASSIGN_OR_RETURN(bool exited, vcpu_->CompletePendingExit());
      if (!exited) break;
    }
    uint8_t* m = ram_->host_base();
    std::memset(m + kCode, 0xF4, kCodeArea);  // a runaway probe halts (KVM_EXIT_HLT)
    VBTS_CHECK(code.bytes().size() < kCodeArea);
    std::memcpy(m + kCode, code.bytes().data(), code.bytes().size());

    VBTS_ASSIGN_OR_RETURN(kvm_sregs s, vcpu_->GetSregs());
    const bool user = cpl != 0;
    if (long_mode) {
      s.cs = FlatSeg(user ? kSelU64 : kSelK64, true, true);
      s.cr0 = 0x80000031;  // PG NE ET PE
      s.cr3 = kPml4;
      s.cr4 = 0x20;        // PAE
      s.efer = 0x500;      // LMA LME
      s.tr = kvm_segment{};
      s.tr.base = kTss64;
      s.tr.selector = kSelTss64;
      s.idt.base = kIdt64;
      s.idt.limit = 256 * 16 - 1;
    } else {
      s.cs = FlatSeg(user ? kSelU32 : kSelK32, true, false);
      s.cr0 = 0x31;  // NE ET PE
      s.cr3 = 0;
      s.cr4 = 0;
      s.efer = 0;
      s.tr = kvm_segment{};
      s.tr.base = kTss32;
      s.tr.selector = kSelTss32;
      s.idt.base = kIdt32;
      s.idt.limit = 256 * 8 - 1;
    }
    s.tr.limit = 0x67;
    s.tr.type = 11;  // busy 32/64-bit TSS
    s.tr.present = 1;
    s.ds = s.es = s.fs = s.gs = s.ss = FlatSeg(user ? kSelUData : kSelKData, false, false);
    s.ldt = kvm_segment{};
    s.ldt.unusable = 1;
    s.gdt.base = kGdt;
    s.gdt.limit = kGdtLimit;
    s.cr2 = 0;
    std::memset(s.interrupt_bitmap, 0, sizeof s.interrupt_bitmap);
    VBTS_RETURN_IF_ERROR(vcpu_->SetSregs(s));

    kvm_regs r{};
    r.rip = kCode;
    r.rflags = rflags | 2;
    r.rsp = user ? kUserStack : kKernelStack;
    VBTS_RETURN_IF_ERROR(vcpu_->SetRegs(r));

    VBTS_ASSIGN_OR_RETURN(kvm_vcpu_events e, vcpu_->GetEvents());
    e.exception = {};
    e.interrupt = {};
    e.nmi = {};
    e.flags = KVM_VCPUEVENT_VALID_SHADOW | KVM_VCPUEVENT_VALID_NMI_PENDING;
    VBTS_RETURN_IF_ERROR(vcpu_->SetEvents(e));
    VBTS_RETURN_IF_ERROR(vcpu_->SetMpState(KVM_MP_STATE_RUNNABLE));

    if (control != 0) {
      std::array<uint64_t, 8> dr{};
      if (control & KVM_GUESTDBG_USE_HW_BP) {
        dr[0] = dr0;
        dr[7] = 0x401;  // L0, DR0 = execute breakpoint (RW0=LEN0=0); bit 10 reads as 1
      }
      VBTS_RETURN_IF_ERROR(vcpu_->SetGuestDebug(control, dr));
    }
    return absl::OkStatus();
  }

  // Runs the prepared probe until it signals done, the guest takes an IDT
  // vector, `on_debug` (called at each KVM_EXIT_DEBUG with its pc) says stop,
  // or anything else ends it.
  absl::StatusOr<RunEnd> Run(const ProbeOptions& o, const std::function<absl::StatusOr<bool>(uint64_t)>& on_debug = {}) {
    kvm_run* run = vcpu_->run();
    t_watched_run = run;
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(o.per_probe_timeout_ms);
    RunEnd end;
    int exits = 0;
    for (;;) {
      if (exits >= o.max_exits_per_probe) {
        end.kind = RunEnd::kExitLimit;
        end.text = absl::StrFormat("%d exits", exits);
        return end;
      }
      if (Clock::now() >= deadline) {
        end.kind = RunEnd::kTimeout;
        end.text = absl::StrFormat("%d ms", o.per_probe_timeout_ms);
        return end;
      }
      VBTS_ASSIGN_OR_RETURN(bool exited, vcpu_->Run());
      runs_++;
      if (!exited) continue;  // the watchdog's kick
      exits++;
      switch (run->exit_reason) {
        case KVM_EXIT_DEBUG: {
          end.debug_exits++;
          end.debug_pcs.push_back(run->debug.arch.pc);
          if (on_debug) {
            VBTS_ASSIGN_OR_RETURN(bool stop, on_debug(run->debug.arch.pc));
            if (stop) {
              end.kind = RunEnd::kStopped;
              return end;
            }
          }
          continue;
        }
        case KVM_EXIT_IO: {
          uint8_t* data = reinterpret_cast<uint8_t*>(run) + run->io.data_offset;
          if (run->io.direction == KVM_EXIT_IO_OUT) {
            if (run->io.port == kDonePort) {
              end.kind = RunEnd::kDone;
              return end;
            }
            if (run->io.port == kReportPort) {
              end.kind = RunEnd::kReport;
              end.vector = data[0];
              return end;
            }
          } else {
            std::memset(data, 0xFF, run->io.size * run->io.count);
          }
          continue;
        }
        case KVM_EXIT_MMIO:
          if (run->mmio.is_write && run->mmio.phys_addr == kDoneMmio) {
            end.kind = RunEnd::kDone;
            return end;
          }
          if (!run->mmio.is_write) std::memset(run->mmio.data, 0xFF, sizeof run->mmio.data);
          continue;
        case KVM_EXIT_HLT:
          end.kind = RunEnd::kHlt;
          return end;
        case KVM_EXIT_INTERNAL_ERROR:
          end.kind = RunEnd::kInternalError;
          end.text = DescribeInternalError();
          return end;
        case KVM_EXIT_SHUTDOWN:
          end.kind = RunEnd::kShutdown;
          return end;
        default:
          end.kind = RunEnd::kOther;
          end.text = absl::StrFormat("unexpected KVM exit reason %u", run->exit_reason);
          return end;
      }
    }
  }

 private:
  ProbeVm() = default;

  std::string DescribeInternalError() {
    kvm_run* run = vcpu_->run();
    std::string s = absl::StrFormat("KVM_EXIT_INTERNAL_ERROR suberror %u%s", run->internal.suberror,
                                    run->internal.suberror == KVM_INTERNAL_ERROR_EMULATION ? " (emulation)" : "");
    absl::StatusOr<kvm_regs> r = vcpu_->GetRegs();
    if (r.ok()) {
      absl::StrAppendFormat(&s, " at rip 0x%x", r->rip);
      if (r->rip >= kCode && r->rip + 3 <= kRamBytes) {
        const uint8_t* p = ram_->host_base() + r->rip;
        absl::StrAppendFormat(&s, " [%02x %02x %02x]", p[0], p[1], p[2]);
      }
    }
    return s;
  }

  void BuildTables() {
    uint8_t* m = ram_->host_base();
    auto put64 = [m](uint64_t gpa, uint64_t v) { std::memcpy(m + gpa, &v, 8); };
    auto put32 = [m](uint64_t gpa, uint32_t v) { std::memcpy(m + gpa, &v, 4); };
    auto put16 = [m](uint64_t gpa, uint16_t v) { std::memcpy(m + gpa, &v, 2); };
    // GDT.
    put64(kGdt + 0x00, 0);
    put64(kGdt + 0x08, 0x00CF9B000000FFFFull);  // kernel code 32, DPL0
    put64(kGdt + 0x10, 0x00CF93000000FFFFull);  // kernel data, DPL0
    put64(kGdt + 0x18, 0x00CFFB000000FFFFull);  // user code 32, DPL3
    put64(kGdt + 0x20, 0x00CFF3000000FFFFull);  // user data, DPL3
    put64(kGdt + 0x28, 0x00AF9B000000FFFFull);  // kernel code 64 (L=1), DPL0
    put64(kGdt + 0x30, 0x00AFFB000000FFFFull);  // user code 64 (L=1), DPL3
    auto tss_desc = [](uint64_t base) {         // 32/64-bit TSS, busy (type 11), limit 0x67
      return 0x67 | ((base & 0xFFFFFF) << 16) | (0x8Bull << 40) | (((base >> 24) & 0xFF) << 56);
    };
    put64(kGdt + 0x38, tss_desc(kTss32));
    put64(kGdt + 0x40, tss_desc(kTss64));
    put64(kGdt + 0x48, kTss64 >> 32);
    // TSSs: the ring-0 stack for interrupts taken at CPL3; no I/O bitmap.
    put32(kTss32 + 4, kKernelStack);  // ESP0
    put32(kTss32 + 8, kSelKData);     // SS0
    put16(kTss32 + 0x66, 0x68);
    put64(kTss64 + 4, kKernelStack);  // RSP0
    put16(kTss64 + 0x66, 0x68);
    // Stubs and IDTs: vector v runs `mov al, v; out 0xE1, al; jmp $` (same
    // bytes in 32- and 64-bit code). Vector 0x30 has a DPL3 gate (INT n
    // from CPL3 allowed); all are interrupt gates to ring 0.
    for (int v = 0; v < 256; v++) {
      const uint64_t stub = kStubs + 16 * v;
      const uint8_t bytes[] = {0xB0, static_cast<uint8_t>(v),  // mov al, v
                               0xE6, kReportPort,               // out 0xE1, al
                               0xEB, 0xFE};                     // jmp $
      std::memcpy(m + stub, bytes, sizeof bytes);
      const uint64_t attr = v == kProbeVector ? 0xEE : 0x8E;  // P, DPL, 32/64-bit interrupt gate
      put64(kIdt32 + 8 * v, (stub & 0xFFFF) | (uint64_t{kSelK32} << 16) | (attr << 40) | ((stub >> 16) << 48));
      put64(kIdt64 + 16 * v, (stub & 0xFFFF) | (uint64_t{kSelK64} << 16) | (attr << 40) | ((stub >> 16) << 48));
      put64(kIdt64 + 16 * v + 8, stub >> 32);
    }
    // lm64 paging: identity map 1 GiB (covers kDoneMmio) with user-accessible 2 MiB pages.
    put64(kPml4, kPdpt | 7);
    put64(kPdpt, kPd | 7);
    for (uint64_t i = 0; i < 512; i++) put64(kPd + 8 * i, (i << 21) | 0x87);  // P RW US PS
    // 32-bit paging probe: PDE 0 maps 0-4 MiB with one PSE page.
    put32(kPd32, 0x87);
  }

  std::unique_ptr<GuestMemory> ram_;
  std::unique_ptr<Vm> vm_;
  std::unique_ptr<KvmVcpu> vcpu_;
  int runs_ = 0;
};

ProbeResult Result(ProbeOutcome o, std::string detail) { return ProbeResult{o, std::move(detail)}; }

// A run that ended in none of the ways the probe expected.
ProbeResult Unexpected(const RunEnd& e) {
  switch (e.kind) {
    case RunEnd::kInternalError:
      return Result(ProbeOutcome::kInternalError, e.text);
    case RunEnd::kReport:
      if (e.vector == kVecUd) return Result(ProbeOutcome::kGuestUd, "the guest received #UD");
      return Result(ProbeOutcome::kGuestFault, absl::StrCat("the guest received ", VectorName(e.vector)));
    case RunEnd::kShutdown:
      return Result(ProbeOutcome::kShutdown, "KVM_EXIT_SHUTDOWN (triple fault)");
    case RunEnd::kTimeout:
      return Result(ProbeOutcome::kTimeout, absl::StrCat("no result within ", e.text));
    case RunEnd::kExitLimit:
      return Result(ProbeOutcome::kTimeout, absl::StrCat("no result after ", e.text));
    case RunEnd::kHlt:
      return Result(ProbeOutcome::kDiffers, "unexpected KVM_EXIT_HLT");
    case RunEnd::kDone:
      return Result(ProbeOutcome::kDiffers, "reached the end without the expected event");
    case RunEnd::kStopped:
      return Result(ProbeOutcome::kDiffers, "stopped at a debug exit");
    case RunEnd::kOther:
      break;
  }
  return Result(ProbeOutcome::kDiffers, e.text);
}

// ---- the probes ----
using Probe = std::function<absl::StatusOr<ProbeResult>(ProbeVm&)>;

// (a)/(b): KVM_GUESTDBG_SINGLESTEP over three NOPs: one stop after each, at
// the next RIP.
Probe StepProbe(const ProbeOptions& o, bool long_mode, int cpl) {
  return [&o, long_mode, cpl](ProbeVm& pv) -> absl::StatusOr<ProbeResult> {
    Code c;
    c.Nop().Nop().Nop().Done(long_mode, cpl);
    VBTS_RETURN_IF_ERROR(pv.Prepare(long_mode, cpl, c, 2, KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP));
    VBTS_ASSIGN_OR_RETURN(RunEnd e, pv.Run(o));
    if (e.kind == RunEnd::kDone) {
      const std::vector<uint64_t> want = {kCode + 1, kCode + 2, kCode + 3};
      if (e.debug_pcs == want) return Result(ProbeOutcome::kWorks, "3 KVM_EXIT_DEBUG for 3 NOPs, pc = next RIP");
      if (e.debug_exits == 0)
        return Result(ProbeOutcome::kNotIntercepted, "ran to the end with no KVM_EXIT_DEBUG");
      std::vector<std::string> pcs;
      for (uint64_t pc : e.debug_pcs) pcs.push_back(absl::StrFormat("+%d", static_cast<int64_t>(pc - kCode)));
      return Result(ProbeOutcome::kDiffers, absl::StrFormat("%d KVM_EXIT_DEBUG for 3 NOPs at %s", e.debug_exits,
                                                            absl::StrJoin(pcs, " ")));
    }
    if (e.kind == RunEnd::kReport && e.vector == kVecDb)
      return Result(ProbeOutcome::kNotIntercepted, "the guest received #DB (its own TF trap), no KVM_EXIT_DEBUG");
    return Unexpected(e);
  };
}

// (c): IRETD to the same privilege level at CPL0 in pm32.
Probe IretProbe(const ProbeOptions& o) {
  return [&o](ProbeVm& pv) -> absl::StatusOr<ProbeResult> {
    Code c;
    const uint64_t target = kCode + 8;
    c.Pushf().PushCs().PushImm32(target).Iret();
    VBTS_CHECK(c.here() == target);
    c.OutDone();
    VBTS_RETURN_IF_ERROR(pv.Prepare(false, 0, c));
    VBTS_ASSIGN_OR_RETURN(RunEnd e, pv.Run(o));
    if (e.kind == RunEnd::kDone) return Result(ProbeOutcome::kWorks, "IRETD returned to the pushed EIP");
    return Unexpected(e);
  };
}

// (d)/(e): INT 0x30 through a DPL3 interrupt gate, from CPL0 or CPL3 (pm32).
Probe IntProbe(const ProbeOptions& o, int cpl) {
  return [&o, cpl](ProbeVm& pv) -> absl::StatusOr<ProbeResult> {
    Code c;
    c.Int(kProbeVector).Done(false, cpl);
    VBTS_RETURN_IF_ERROR(pv.Prepare(false, cpl, c));
    VBTS_ASSIGN_OR_RETURN(RunEnd e, pv.Run(o));
    if (e.kind == RunEnd::kReport && e.vector == kProbeVector)
      return Result(ProbeOutcome::kWorks, "reached the gate's handler for vector 0x30");
    if (e.kind == RunEnd::kReport && e.vector == kVecUd)
      return Result(ProbeOutcome::kGuestUd, "the guest received #UD at INT 0x30; the VMM sees nothing");
    if (e.kind == RunEnd::kDone) return Result(ProbeOutcome::kDiffers, "INT 0x30 fell through without delivery");
    return Unexpected(e);
  };
}

// (f): CPUID leaf 1 at pm32 CPL0, compared with what KVM_SET_CPUID2 set.
// The APIC bit (EDX 9) follows IA32_APIC_BASE and is ignored.
Probe CpuidProbe(const ProbeOptions& o, uint32_t eax_set, uint32_t edx_set, HostFacts& f) {
  return [&o, eax_set, edx_set, &f](ProbeVm& pv) -> absl::StatusOr<ProbeResult> {
    Code c;
    c.XorEcxEcx().MovEaxImm(1).Cpuid().OutDone();
    VBTS_RETURN_IF_ERROR(pv.Prepare(false, 0, c));
    VBTS_ASSIGN_OR_RETURN(RunEnd e, pv.Run(o));
    if (e.kind != RunEnd::kDone) return Unexpected(e);
    VBTS_ASSIGN_OR_RETURN(kvm_regs r, pv.vcpu().GetRegs());
    const uint32_t eax = static_cast<uint32_t>(r.rax), edx = static_cast<uint32_t>(r.rdx);
    f.cpuid1_edx_set = edx_set;
    f.cpuid1_edx_seen = edx;
    const uint32_t edx_diff = (edx ^ edx_set) & ~kCpuid1EdxApic;
    if (eax == eax_set && edx_diff == 0)
      return Result(ProbeOutcome::kWorks, absl::StrFormat("leaf 1 EAX/EDX as set (EDX 0x%08x, DS=1)", edx));
    std::string d = absl::StrFormat("leaf 1 EDX set 0x%08x, guest read 0x%08x (DS %s)", edx_set, edx,
                                    (edx & kCpuid1EdxDs) ? "kept" : "dropped");
    if (eax != eax_set) absl::StrAppendFormat(&d, "; EAX set 0x%08x, read 0x%08x", eax_set, eax);
    return Result(ProbeOutcome::kDiffers, d);
  };
}

// CPUID leaf 1 in native user code (lm64 CPL3): are KVM's values seen at all?
Probe UserCpuidProbe(const ProbeOptions& o, uint32_t eax_set) {
  return [&o, eax_set](ProbeVm& pv) -> absl::StatusOr<ProbeResult> {
    Code c;
    c.XorEcxEcx().MovEaxImm(1).Cpuid().StoreDone(true);
    VBTS_RETURN_IF_ERROR(pv.Prepare(true, 3, c));
    VBTS_ASSIGN_OR_RETURN(RunEnd e, pv.Run(o));
    if (e.kind != RunEnd::kDone) return Unexpected(e);
    VBTS_ASSIGN_OR_RETURN(kvm_regs r, pv.vcpu().GetRegs());
    const uint32_t eax = static_cast<uint32_t>(r.rax);
    unsigned heax = 0, hebx = 0, hecx = 0, hedx = 0;
    __cpuid(1, heax, hebx, hecx, hedx);
    if (eax == eax_set) return Result(ProbeOutcome::kWorks, absl::StrFormat("leaf 1 EAX 0x%08x as set", eax));
    if (eax == heax)
      return Result(ProbeOutcome::kNotIntercepted,
                    absl::StrFormat("the guest read the host's leaf 1 (EAX 0x%08x, set 0x%08x)", eax, eax_set));
    return Result(ProbeOutcome::kDiffers, absl::StrFormat("leaf 1 EAX set 0x%08x, read 0x%08x", eax_set, eax));
  };
}

// (g): RETF from CPL0 to CPL3 (pm32).
Probe FarRetProbe(const ProbeOptions& o) {
  return [&o](ProbeVm& pv) -> absl::StatusOr<ProbeResult> {
    Code c;
    const uint64_t target = kCode + 21;
    c.PushImm32(kSelUData).PushImm32(kUserStack).PushImm32(kSelU32).PushImm32(target).Retf();
    VBTS_CHECK(c.here() == target);
    c.StoreDone(false);
    VBTS_RETURN_IF_ERROR(pv.Prepare(false, 0, c));
    VBTS_ASSIGN_OR_RETURN(RunEnd e, pv.Run(o));
    if (e.kind != RunEnd::kDone) return Unexpected(e);
    VBTS_ASSIGN_OR_RETURN(kvm_sregs s, pv.vcpu().GetSregs());
    if (s.cs.selector == kSelU32 && s.cs.dpl == 3)
      return Result(ProbeOutcome::kWorks, "RETF landed at CPL3 with CS=0x1b");
    return Result(ProbeOutcome::kDiffers, absl::StrFormat("reached the target with CS=0x%x DPL%d", s.cs.selector,
                                                          s.cs.dpl));
  };
}

// (h): HLT with IF=1 under single-step, no in-kernel irqchip: a halting vCPU
// gives KVM_EXIT_HLT.
Probe HltProbe(const ProbeOptions& o) {
  return [&o](ProbeVm& pv) -> absl::StatusOr<ProbeResult> {
    Code c;
    c.Nop().Hlt().Nop().OutDone();
    VBTS_RETURN_IF_ERROR(pv.Prepare(false, 0, c, 2 | kRflagsIf, KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP));
    VBTS_ASSIGN_OR_RETURN(RunEnd e, pv.Run(o));
    if (e.kind == RunEnd::kHlt) return Result(ProbeOutcome::kWorks, "KVM_EXIT_HLT: the vCPU halted");
    if (e.kind == RunEnd::kTimeout)
      return Result(ProbeOutcome::kWorks, "the vCPU stayed halted until the probe timeout");
    if (e.kind == RunEnd::kDone)
      return Result(ProbeOutcome::kDiffers,
                    absl::StrFormat("fell through: stepped past HLT to the end (%d stops, no KVM_EXIT_HLT)",
                                    e.debug_exits));
    return Unexpected(e);
  };
}

// (i): the guest turns on 32-bit paging (CR4.PSE, CR0.PG, EFER.LME=0) and
// loads through it.
Probe Paging32Probe(const ProbeOptions& o) {
  return [&o](ProbeVm& pv) -> absl::StatusOr<ProbeResult> {
    Code c;
    c.MovEaxImm(kPd32).MovCr3Eax();
    c.MovEaxCr4().OrEaxImm(0x10).MovCr4Eax();         // CR4.PSE
    c.MovEaxCr0().OrEaxImm(0x80000000).MovCr0Eax();   // CR0.PG
    c.JmpNext().MovEaxMoffs(kGdt + 8).OutDone();      // a load through the new mapping
    VBTS_RETURN_IF_ERROR(pv.Prepare(false, 0, c));
    VBTS_ASSIGN_OR_RETURN(RunEnd e, pv.Run(o));
    if (e.kind == RunEnd::kDone) {
      VBTS_ASSIGN_OR_RETURN(kvm_sregs s, pv.vcpu().GetSregs());
      if (s.cr0 & 0x80000000) return Result(ProbeOutcome::kWorks, "CR0.PG=1 with EFER.LME=0; a paged load worked");
      return Result(ProbeOutcome::kDiffers, "reached the end but CR0.PG reads 0");
    }
    if (e.kind == RunEnd::kReport)
      return Result(e.vector == kVecUd ? ProbeOutcome::kGuestUd : ProbeOutcome::kGuestFault,
                    absl::StrCat("the guest received ", VectorName(e.vector), " enabling 32-bit paging"));
    return Unexpected(e);
  };
}

// (j): an execute breakpoint (KVM_GUESTDBG_USE_HW_BP, DR0) in emulated pm32
// code, resumed with RFLAGS.RF=1, which should suppress it once.
Probe HwBpRfProbe(const ProbeOptions& o) {
  return [&o](ProbeVm& pv) -> absl::StatusOr<ProbeResult> {
    Code c;
    const uint64_t bp = kCode + 1;
    c.Nop().Nop().Nop().OutDone();
    VBTS_RETURN_IF_ERROR(pv.Prepare(false, 0, c, 2, KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_USE_HW_BP, bp));
    int hits = 0;
    VBTS_ASSIGN_OR_RETURN(RunEnd e, pv.Run(o, [&](uint64_t pc) -> absl::StatusOr<bool> {
      if (pc != bp) return false;
      if (++hits >= 3) return true;
      VBTS_ASSIGN_OR_RETURN(kvm_regs r, pv.vcpu().GetRegs());
      r.rflags |= kRflagsRf;
      VBTS_RETURN_IF_ERROR(pv.vcpu().SetRegs(r));
      return false;
    }));
    if (e.kind == RunEnd::kDone && hits == 1)
      return Result(ProbeOutcome::kWorks, "fired once; resuming with RFLAGS.RF=1 went past it");
    if (e.kind == RunEnd::kDone && hits == 0) return Result(ProbeOutcome::kNotIntercepted, "never fired");
    if (e.kind == RunEnd::kStopped)
      return Result(ProbeOutcome::kDiffers, "re-fired 3 times at the same RIP although RFLAGS.RF=1 (RF ignored)");
    ProbeResult u = Unexpected(e);
    std::vector<std::string> pcs;
    for (uint64_t pc : e.debug_pcs) pcs.push_back(absl::StrFormat("0x%x", pc));
    absl::StrAppendFormat(&u.detail, " (%d hits; stops at %s)", hits, absl::StrJoin(pcs, " "));
    return u;
  };
}

// An execute breakpoint in native user code (lm64 CPL3).
Probe HwBpUserProbe(const ProbeOptions& o) {
  return [&o](ProbeVm& pv) -> absl::StatusOr<ProbeResult> {
    Code c;
    constexpr uint64_t bp = kCode + 1;
    c.Nop().Nop().Nop().StoreDone(true);
    VBTS_RETURN_IF_ERROR(pv.Prepare(true, 3, c, 2, KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_USE_HW_BP, bp));
    VBTS_ASSIGN_OR_RETURN(RunEnd e, pv.Run(o, [](uint64_t pc) -> absl::StatusOr<bool> { return pc == bp; }));
    if (e.kind == RunEnd::kStopped) return Result(ProbeOutcome::kWorks, "fired at the breakpoint");
    if (e.kind == RunEnd::kDone)
      return Result(ProbeOutcome::kNotIntercepted, "never fired: no KVM_EXIT_DEBUG, no guest #DB");
    if (e.kind == RunEnd::kReport && e.vector == kVecDb)
      return Result(ProbeOutcome::kNotIntercepted, "the guest received #DB instead of a KVM_EXIT_DEBUG");
    return Unexpected(e);
  };
}

// The guest's own data breakpoint (DR0 = a dword, DR7 L0, RW0=01 write,
// LEN0=11 4 bytes; SDM 17.2.4) while KVM single-steps the guest, as vbts's
// tracing does: architecturally the write is followed by #DB with DR6.B0.
Probe DataBpProbe(const ProbeOptions& o) {
  return [&o](ProbeVm& pv) -> absl::StatusOr<ProbeResult> {
    Code c;
    c.MovEaxImm(0x1234).MovMoffsEax(kProbeData).Nop().OutDone();
    VBTS_RETURN_IF_ERROR(pv.Prepare(false, 0, c, 2, KVM_GUESTDBG_ENABLE | KVM_GUESTDBG_SINGLESTEP));
    kvm_debugregs d{};
    d.db[0] = kProbeData;
    d.dr6 = 0xFFFF0FF0;
    d.dr7 = 0x400 | 1 | (1u << 16) | (3u << 18);
    VBTS_RETURN_IF_ERROR(pv.vcpu().SetDebugRegs(d));
    bool reported = false;
    VBTS_ASSIGN_OR_RETURN(RunEnd e, pv.Run(o, [&](uint64_t) -> absl::StatusOr<bool> {
      if (pv.vcpu().run()->debug.arch.dr6 & 1) reported = true;
      return false;
    }));
    if (e.kind == RunEnd::kReport && e.vector == kVecDb)
      return Result(ProbeOutcome::kWorks, "the guest received #DB after the write");
    if (e.kind == RunEnd::kDone)
      return Result(ProbeOutcome::kDiffers,
                    reported ? "no guest #DB; KVM_EXIT_DEBUG reported DR6.B0 to the VMM"
                             : "no guest #DB: the write completed without the breakpoint");
    return Unexpected(e);
  };
}

// ---- host information ----
std::string ReadFirstLine(const std::string& path, bool* exists) {
  std::ifstream in(path);
  *exists = in.good();
  std::string line;
  if (*exists) std::getline(in, line);
  return line;
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void ReadHostCpu(const ProbeOptions& o, HostFacts& f) {
  utsname u;
  if (::uname(&u) == 0) f.kernel_release = u.release;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char v[13] = {};
    std::memcpy(v, &b, 4);
    std::memcpy(v + 4, &d, 4);
    std::memcpy(v + 8, &c, 4);
    f.cpu_vendor = v;
  }
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    const uint32_t family = (a >> 8) & 0xF, model = (a >> 4) & 0xF;
    f.cpu_family = family == 0xF ? family + ((a >> 20) & 0xFF) : family;
    f.cpu_model = (family == 0x6 || family == 0xF) ? (((a >> 16) & 0xF) << 4) | model : model;
    f.cpu_stepping = a & 0xF;
    f.cpu_signature = a;
  }
  std::string brand;
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
    char s[49] = {};
    for (uint32_t i = 0; i < 3; i++) {
      __get_cpuid(0x80000002 + i, &a, &b, &c, &d);
      const uint32_t r[4] = {a, b, c, d};
      std::memcpy(s + 16 * i, r, 16);
    }
    brand = s;
  }
  std::ifstream in(o.proc_cpuinfo);
  std::string line;
  bool have_name = false, have_flags = false;
  while ((!have_name || !have_flags) && std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == '\t' || key.back() == ' ')) key.pop_back();
    std::string value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.erase(0, 1);
    if (key == "model name" && !have_name) {
      f.cpu_name = value;
      have_name = true;
    } else if (key == "flags" && !have_flags) {
      std::istringstream words(value);
      std::string w;
      while (words >> w) {
        if (w == "vmx") f.cpu_flag_vmx = true;
        if (w == "svm") f.cpu_flag_svm = true;
        if (w == "hypervisor") f.cpu_flag_hypervisor = true;
      }
      have_flags = true;
    }
  }
  if (f.cpu_name.empty()) f.cpu_name = brand;
  const bool intel = PathExists(o.sys_module_dir + "/kvm_intel");
  const bool amd = PathExists(o.sys_module_dir + "/kvm_amd");
  const bool pvm = PathExists(o.sys_module_dir + "/kvm_pvm");
  f.kind = DetectHostKind(intel, amd, pvm, f.cpu_flag_vmx, f.cpu_flag_svm, &f.kind_evidence);
  if (f.cpu_flag_hypervisor) f.kind_evidence += ", hypervisor";
}

void ReadCapabilities(const Kvm& kvm, HostFacts& f) {
  f.api_version = kvm.api_version();
  f.cap_user_space_msr = kvm.CheckExtension(KVM_CAP_X86_USER_SPACE_MSR);
  f.cap_msr_filter = kvm.CheckExtension(KVM_CAP_X86_MSR_FILTER);
  f.cap_set_guest_debug = kvm.CheckExtension(KVM_CAP_SET_GUEST_DEBUG);
  f.guest_debug_flags = static_cast<uint32_t>(kvm.CheckExtension(KVM_CAP_SET_GUEST_DEBUG2));
  f.sync_regs_mask = static_cast<uint32_t>(kvm.CheckExtension(KVM_CAP_SYNC_REGS));
  constexpr uint32_t kAllSync = KVM_SYNC_X86_REGS | KVM_SYNC_X86_SREGS | KVM_SYNC_X86_EVENTS;
  f.sync_regs = (f.sync_regs_mask & kAllSync) == kAllSync;
  f.cap_irqchip = kvm.CheckExtension(KVM_CAP_IRQCHIP);
  f.cap_signal_msi = kvm.CheckExtension(KVM_CAP_SIGNAL_MSI);
  f.cap_vcpu_events = kvm.CheckExtension(KVM_CAP_VCPU_EVENTS);
  f.cap_exit_on_emulation_failure = kvm.CheckExtension(KVM_CAP_EXIT_ON_EMULATION_FAILURE);
  f.cap_tsc_deadline_timer = kvm.CheckExtension(KVM_CAP_TSC_DEADLINE_TIMER);
}

}  // namespace

pmu::HostPmu HostPmuOf(const vcpu::HostFacts& f) {
  pmu::HostPmu h;
  h.vendor = f.cpu_vendor;
  h.cpuid1_eax = f.cpu_signature;
  h.enable_pmu = f.enable_pmu == vcpu::Tristate::kYes;
  h.perf_capabilities_known = f.perf_capabilities_known;
  h.perf_capabilities = f.perf_capabilities;
  h.perf_lbr_entries = f.perf_lbr_entries;
  return h;
}

namespace {

void ReadPmu(const Kvm& kvm, const ProbeOptions& o, HostFacts& f) {
  bool exists = false;
  const std::string v = ReadFirstLine(o.sys_module_dir + "/kvm/parameters/enable_pmu", &exists);
  if (!exists)
    f.enable_pmu = Tristate::kAbsent;
  else
    f.enable_pmu = (!v.empty() && (v[0] == 'Y' || v[0] == 'y' || v[0] == '1')) ? Tristate::kYes : Tristate::kNo;
  absl::StatusOr<std::vector<uint32_t>> features = kvm.FeatureMsrIndices();
  if (features.ok()) {
    for (uint32_t idx : *features) {
      if (idx != kMsrPerfCapabilities) continue;
      absl::StatusOr<uint64_t> caps = kvm.GetFeatureMsr(idx);
      if (caps.ok()) {
        f.perf_capabilities_known = true;
        f.perf_capabilities = *caps;
      }
    }
  }
  bool branches_exist = false;
  const std::string branches = ReadFirstLine(o.perf_cpu_dir + "/caps/branches", &branches_exist);
  if (branches_exist) f.perf_lbr_entries = std::atoi(branches.c_str());
  absl::StatusOr<pmu::LbrModel> lbr = pmu::HostLbrGeometry(HostPmuOf(f));
  f.lbr_virtualization = lbr.ok();
  f.lbr_reason = lbr.ok() ? absl::StrFormat("Intel 06_%02XH, kvm.enable_pmu=Y, LBR format %d, %d entries at 0x%x",
                                            f.cpu_model, lbr->format, lbr->entries, lbr->from_base)
                          : std::string(lbr.status().message());
}

// The probe VM's CPUID: what KVM supports, with a changed stepping in leaf 1
// EAX (to tell KVM's answer from the host's) and DS (leaf 1 EDX bit 21) set.
absl::StatusOr<std::vector<kvm_cpuid_entry2>> ProbeCpuid(const Kvm& kvm, uint32_t* eax_set, uint32_t* edx_set) {
  VBTS_ASSIGN_OR_RETURN(std::vector<kvm_cpuid_entry2> cpuid, kvm.SupportedCpuid());
  for (kvm_cpuid_entry2& e : cpuid) {
    if (e.function != 1) continue;
    e.eax ^= 0x1;
    e.edx |= kCpuid1EdxDs;
    *eax_set = e.eax;
    *edx_set = e.edx;
    return cpuid;
  }
  return absl::FailedPreconditionError("KVM_GET_SUPPORTED_CPUID has no leaf 1");
}

}  // namespace

HostKind DetectHostKind(bool kvm_intel, bool kvm_amd, bool kvm_pvm, bool flag_vmx, bool flag_svm,
                        std::string* evidence) {
  std::vector<std::string> mods;
  if (kvm_intel) mods.push_back("kvm_intel");
  if (kvm_amd) mods.push_back("kvm_amd");
  if (kvm_pvm) mods.push_back("kvm_pvm");
  HostKind k = HostKind::kUnknown;
  // PVM first: it can run beside a hardware module only in theory, and then
  // the kvm_pvm flavour is what a /dev/kvm guest would use only if it is the
  // vendor module; one vendor module can be loaded at a time.
  if (kvm_pvm)
    k = HostKind::kPvm;
  else if (kvm_intel)
    k = HostKind::kVmx;
  else if (kvm_amd)
    k = HostKind::kSvm;
  *evidence = absl::StrCat(mods.empty() ? "no KVM vendor module loaded" : absl::StrCat("module ", absl::StrJoin(mods, ", ")),
                           "; cpu flags: ", flag_vmx ? "vmx" : "no vmx", ", ", flag_svm ? "svm" : "no svm");
  return k;
}

absl::StatusOr<HostFacts> ProbeHost(const Kvm& kvm, const ProbeOptions& options) {
  const Clock::time_point t0 = Clock::now();
  HostFacts f;
  ReadHostCpu(options, f);
  ReadCapabilities(kvm, f);
  ReadPmu(kvm, options, f);

  uint32_t eax_set = 0, edx_set = 0;
  VBTS_ASSIGN_OR_RETURN(std::vector<kvm_cpuid_entry2> cpuid, ProbeCpuid(kvm, &eax_set, &edx_set));
  VBTS_ASSIGN_OR_RETURN(std::unique_ptr<Watchdog> watchdog, Watchdog::Start(/*period_ms=*/5));
  VBTS_ASSIGN_OR_RETURN(std::unique_ptr<ProbeVm> pv, ProbeVm::Create(kvm, cpuid));
  if (absl::StatusOr<uint64_t> khz = pv->vcpu().TscKhz(); khz.ok()) f.vcpu_tsc_khz = *khz;

  const bool debug = f.cap_set_guest_debug > 0;
  struct Slot {
    ProbeResult* out;
    Probe probe;
    bool needs_debug;
  };
  const Slot slots[] = {
      {&f.step_pm32_cpl0, StepProbe(options, false, 0), true},
      {&f.step_pm32_cpl3, StepProbe(options, false, 3), true},
      {&f.step_lm64_cpl0, StepProbe(options, true, 0), true},
      {&f.step_lm64_cpl3, StepProbe(options, true, 3), true},
      {&f.iret_pm32, IretProbe(options), false},
      {&f.int_pm32_cpl0, IntProbe(options, 0), false},
      {&f.int_pm32_cpl3, IntProbe(options, 3), false},
      {&f.cpuid_leaf1, CpuidProbe(options, eax_set, edx_set, f), false},
      {&f.cpuid_lm64_cpl3, UserCpuidProbe(options, eax_set), false},
      {&f.far_ret_outer_pm32, FarRetProbe(options), false},
      {&f.hw_bp_rf_pm32, HwBpRfProbe(options), true},
      {&f.hw_bp_lm64_cpl3, HwBpUserProbe(options), true},
      {&f.data_bp_pm32, DataBpProbe(options), true},
      {&f.paging32, Paging32Probe(options), false},  // the likeliest to wreck the vCPU
      // Last: on PVM the next run after a stepped HLT that fell through
      // returns a stray KVM_EXIT_HLT (measured), which would spoil a later probe.
      {&f.hlt_step, HltProbe(options), true},
  };
  int total_runs = 0;
  for (const Slot& s : slots) {
    if (s.needs_debug && !debug) {
      *s.out = Result(ProbeOutcome::kNotTested, "no KVM_CAP_SET_GUEST_DEBUG");
      continue;
    }
    // After a triple fault, a timeout or a failed ioctl the VM is replaced,
    // so the next probe starts clean.
    if (pv == nullptr) {
      absl::StatusOr<std::unique_ptr<ProbeVm>> fresh = ProbeVm::Create(kvm, cpuid);
      if (!fresh.ok()) {
        *s.out = Result(ProbeOutcome::kProbeError, std::string(fresh.status().message()));
        continue;
      }
      pv = std::move(*fresh);
    }
    const int before = pv->runs();
    absl::StatusOr<ProbeResult> r = s.probe(*pv);
    total_runs += pv->runs() - before;
    *s.out = r.ok() ? *std::move(r) : Result(ProbeOutcome::kProbeError, std::string(r.status().message()));
    if (s.out->outcome == ProbeOutcome::kShutdown || s.out->outcome == ProbeOutcome::kTimeout ||
        s.out->outcome == ProbeOutcome::kProbeError)
      pv.reset();
  }
  pv.reset();
  watchdog.reset();
  DeriveHostPolicy(f);
  f.probe_exits = total_runs;
  f.probe_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return f;
}

}  // namespace vbts::vmm
