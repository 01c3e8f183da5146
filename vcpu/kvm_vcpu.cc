// kvm_vcpu.cc: vCPU ioctls and KVM <-> CpuState conversion.
#include "vcpu/kvm_vcpu.h"

#include <sys/mman.h>

#include <cstring>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace vbts::vcpu {

// MSR indices (SDM vol. 4, table 2-2) needed for SYSCALL/SYSENTER completion.
constexpr uint32_t kMsrSysenterCs = 0x174, kMsrSysenterEsp = 0x175, kMsrSysenterEip = 0x176;
constexpr uint32_t kMsrStar = 0xC0000081, kMsrLstar = 0xC0000082, kMsrCstar = 0xC0000083,
                   kMsrSfmask = 0xC0000084, kMsrKernelGsBase = 0xC0000102;

absl::StatusOr<std::unique_ptr<KvmVcpu>> KvmVcpu::Create(int vm_fd, int id, size_t run_size, bool sync_regs) {
  VBTS_ASSIGN_OR_RETURN(int fd, Ioctl(vm_fd, KVM_CREATE_VCPU, static_cast<unsigned long>(id), "KVM_CREATE_VCPU",
                                      absl::StrCat("id=", id)));
  ScopedFd owned(fd);
  void* p = ::mmap(nullptr, run_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return absl::ErrnoToStatus(errno, absl::StrFormat("mmap(kvm_run, %u bytes) failed", run_size));
  return std::unique_ptr<KvmVcpu>(new KvmVcpu(std::move(owned), static_cast<kvm_run*>(p), run_size, sync_regs));
}

KvmVcpu::KvmVcpu(ScopedFd fd, kvm_run* run, size_t run_size, bool sync_regs)
    : fd_(std::move(fd)), run_(run), run_size_(run_size), sync_regs_(sync_regs) {}

KvmVcpu::~KvmVcpu() { ::munmap(run_, run_size_); }

absl::StatusOr<bool> KvmVcpu::Run() {
  if (sync_regs_) run_->kvm_valid_regs = KVM_SYNC_X86_REGS | KVM_SYNC_X86_SREGS | KVM_SYNC_X86_EVENTS;
  int rc = ::ioctl(fd_.get(), KVM_RUN, 0);
  run_->kvm_dirty_regs = 0;
  if (rc == 0) return true;
  if (errno == EINTR || errno == EAGAIN) {
    run_->immediate_exit = 0;
    if (sync_regs_) run_->kvm_valid_regs = 0;  // the sync area was not refreshed
    return false;
  }
  return absl::ErrnoToStatus(errno, "KVM_RUN failed");
}

absl::StatusOr<bool> KvmVcpu::CompletePendingExit() {
  run_->immediate_exit = 1;
  int rc = ::ioctl(fd_.get(), KVM_RUN, 0);
  int e = errno;
  run_->immediate_exit = 0;
  run_->kvm_dirty_regs = 0;
  if (rc == 0) return true;
  if (e == EINTR || e == EAGAIN) {
    if (sync_regs_) run_->kvm_valid_regs = 0;
    return false;
  }
  return absl::ErrnoToStatus(e, "KVM_RUN(immediate_exit) failed");
}

// The x87/SSE registers travel through KVM_GET/SET_XSAVE's legacy region (the
// FXSAVE layout: FCW 0, FSW 2, abridged FTW 4, MXCSR 24, ST0-7 from 32, XMM0-15
// from 160; SDM vol. 1 10.5.1), not KVM_GET/SET_FPU: on the PVM hosts seen so
// far those drop MXCSR (docs/host-support.md).  A write sets XSTATE_BV's x87
// and SSE bits (offset 512), without which the kernel keeps its own copy.
namespace {
constexpr size_t kXsaveBv = 512;
}

absl::StatusOr<FpuState> KvmVcpu::GetFpu() {
  kvm_xsave x{};
  VBTS_RETURN_IF_ERROR(Ioctl(fd(), KVM_GET_XSAVE, &x, "KVM_GET_XSAVE").status());
  const auto* r = reinterpret_cast<const uint8_t*>(x.region);
  FpuState f;
  std::memcpy(&f.fcw, r + 0, 2);
  std::memcpy(&f.fsw, r + 2, 2);
  f.ftw = r[4];
  std::memcpy(&f.mxcsr, r + 24, 4);
  std::memcpy(f.st, r + 32, sizeof(f.st));
  std::memcpy(f.xmm, r + 160, sizeof(f.xmm));
  return f;
}

absl::Status KvmVcpu::SetFpu(const FpuState& f) {
  kvm_xsave x{};
  VBTS_RETURN_IF_ERROR(Ioctl(fd(), KVM_GET_XSAVE, &x, "KVM_GET_XSAVE").status());  // keeps AVX and the rest
  auto* r = reinterpret_cast<uint8_t*>(x.region);
  std::memcpy(r + 0, &f.fcw, 2);
  std::memcpy(r + 2, &f.fsw, 2);
  r[4] = f.ftw;
  std::memcpy(r + 24, &f.mxcsr, 4);
  std::memcpy(r + 32, f.st, sizeof(f.st));
  std::memcpy(r + 160, f.xmm, sizeof(f.xmm));
  uint64_t bv;
  std::memcpy(&bv, r + kXsaveBv, 8);
  bv |= 3;  // x87, SSE
  std::memcpy(r + kXsaveBv, &bv, 8);
  return Ioctl(fd(), KVM_SET_XSAVE, &x, "KVM_SET_XSAVE").status();
}

absl::StatusOr<kvm_regs> KvmVcpu::GetRegs() {
  kvm_regs r;
  VBTS_RETURN_IF_ERROR(Ioctl(fd(), KVM_GET_REGS, &r, "KVM_GET_REGS").status());
  return r;
}
absl::Status KvmVcpu::SetRegs(const kvm_regs& r) {
  return Ioctl(fd(), KVM_SET_REGS, &r, "KVM_SET_REGS").status();
}
absl::StatusOr<kvm_sregs> KvmVcpu::GetSregs() {
  kvm_sregs s;
  VBTS_RETURN_IF_ERROR(Ioctl(fd(), KVM_GET_SREGS, &s, "KVM_GET_SREGS").status());
  return s;
}
absl::Status KvmVcpu::SetSregs(const kvm_sregs& s) {
  return Ioctl(fd(), KVM_SET_SREGS, &s, "KVM_SET_SREGS").status();
}
absl::StatusOr<kvm_vcpu_events> KvmVcpu::GetEvents() {
  kvm_vcpu_events e;
  VBTS_RETURN_IF_ERROR(Ioctl(fd(), KVM_GET_VCPU_EVENTS, &e, "KVM_GET_VCPU_EVENTS").status());
  return e;
}
absl::Status KvmVcpu::SetEvents(const kvm_vcpu_events& e) {
  return Ioctl(fd(), KVM_SET_VCPU_EVENTS, &e, "KVM_SET_VCPU_EVENTS").status();
}

Segment FromKvm(const kvm_segment& k) {
  Segment s;
  s.base = k.base;
  s.limit = k.limit;
  s.selector = k.selector;
  s.type = k.type;
  s.dpl = k.dpl;
  s.s = k.s;
  s.present = k.present;
  s.db = k.db;
  s.l = k.l;
  s.g = k.g;
  s.avl = k.avl;
  s.unusable = k.unusable;
  return s;
}

kvm_segment ToKvm(const Segment& s) {
  kvm_segment k{};
  k.base = s.base;
  k.limit = s.limit;
  k.selector = s.selector;
  k.type = s.type;
  k.dpl = s.dpl;
  k.s = s.s;
  k.present = s.present;
  k.db = s.db;
  k.l = s.l;
  k.g = s.g;
  k.avl = s.avl;
  k.unusable = s.unusable;
  return k;
}

void StateFromKvm(const kvm_regs& r, const kvm_sregs& s, CpuState* st) {
  const uint64_t g[16] = {r.rax, r.rcx, r.rdx, r.rbx, r.rsp, r.rbp, r.rsi, r.rdi,
                          r.r8,  r.r9,  r.r10, r.r11, r.r12, r.r13, r.r14, r.r15};
  std::memcpy(st->gpr, g, sizeof g);
  st->rip = r.rip;
  st->rflags = r.rflags;
  st->cs = FromKvm(s.cs);
  st->ds = FromKvm(s.ds);
  st->es = FromKvm(s.es);
  st->fs = FromKvm(s.fs);
  st->gs = FromKvm(s.gs);
  st->ss = FromKvm(s.ss);
  st->tr = FromKvm(s.tr);
  st->ldtr = FromKvm(s.ldt);
  // A conforming code segment runs at the caller's CPL (SDM vol. 3A
  // 5.8.1.2): KVM reports the descriptor's DPL in CS and the CPL in SS.DPL
  // (VMX defines the CPL so; KVM's SVM code reports it there); vbts keeps the
  // CPL in CS.DPL (CpuState::cpl()), as its completion engine and the TCG
  // engine do.  (A ring-3 RETF out of one was completed as a return to an
  // outer level before, and faulted: image conforming_cpl_pm32.)
  if ((s.cr0 & kCr0Pe) && !(r.rflags & kRflagsVm) && st->cs.s && (st->cs.type & 0xC) == 0xC) st->cs.dpl = st->ss.dpl;
  st->gdtr = {s.gdt.base, s.gdt.limit};
  st->idtr = {s.idt.base, s.idt.limit};
  st->cr0 = s.cr0;
  st->cr2 = s.cr2;
  st->cr3 = s.cr3;
  st->cr4 = s.cr4;
  st->cr8 = s.cr8;
  st->efer = s.efer;
}

void StateToKvm(const CpuState& st, kvm_regs* r, kvm_sregs* s) {
  r->rax = st.gpr[kRax];
  r->rcx = st.gpr[kRcx];
  r->rdx = st.gpr[kRdx];
  r->rbx = st.gpr[kRbx];
  r->rsp = st.gpr[kRsp];
  r->rbp = st.gpr[kRbp];
  r->rsi = st.gpr[kRsi];
  r->rdi = st.gpr[kRdi];
  r->r8 = st.gpr[kR8];
  r->r9 = st.gpr[kR9];
  r->r10 = st.gpr[kR10];
  r->r11 = st.gpr[kR11];
  r->r12 = st.gpr[kR12];
  r->r13 = st.gpr[kR13];
  r->r14 = st.gpr[kR14];
  r->r15 = st.gpr[kR15];
  r->rip = st.rip;
  r->rflags = st.rflags;
  s->cs = ToKvm(st.cs);
  s->ds = ToKvm(st.ds);
  s->es = ToKvm(st.es);
  s->fs = ToKvm(st.fs);
  s->gs = ToKvm(st.gs);
  s->ss = ToKvm(st.ss);
  s->tr = ToKvm(st.tr);
  s->ldt = ToKvm(st.ldtr);
  s->gdt.base = st.gdtr.base;
  s->gdt.limit = st.gdtr.limit;
  s->idt.base = st.idtr.base;
  s->idt.limit = st.idtr.limit;
  s->cr0 = st.cr0;
  s->cr2 = st.cr2;
  s->cr3 = st.cr3;
  s->cr4 = st.cr4;
  s->cr8 = st.cr8;
  s->efer = st.efer;
}

absl::StatusOr<CpuState> KvmVcpu::GetState(bool with_msrs) {
  CpuState st;
  kvm_regs r;
  kvm_sregs s;
  kvm_vcpu_events e;
  if (sync_regs_ && (run_->kvm_valid_regs & KVM_SYNC_X86_REGS) && (run_->kvm_valid_regs & KVM_SYNC_X86_SREGS) &&
      (run_->kvm_valid_regs & KVM_SYNC_X86_EVENTS)) {
    r = run_->s.regs.regs;
    s = run_->s.regs.sregs;
    e = run_->s.regs.events;
  } else {
    VBTS_ASSIGN_OR_RETURN(r, GetRegs());
    VBTS_ASSIGN_OR_RETURN(s, GetSregs());
    VBTS_ASSIGN_OR_RETURN(e, GetEvents());
  }
  StateFromKvm(r, s, &st);
  st.interrupt_shadow = e.interrupt.shadow != 0;
  st.nmi_masked = e.nmi.masked != 0;
  if (with_msrs) VBTS_RETURN_IF_ERROR(ReadSystemMsrs(&st));
  return st;
}

absl::Status KvmVcpu::ReadSystemMsrs(CpuState* st) {
  VBTS_ASSIGN_OR_RETURN(st->star, GetMsr(kMsrStar));
  VBTS_ASSIGN_OR_RETURN(st->lstar, GetMsr(kMsrLstar));
  VBTS_ASSIGN_OR_RETURN(st->cstar, GetMsr(kMsrCstar));
  VBTS_ASSIGN_OR_RETURN(st->sfmask, GetMsr(kMsrSfmask));
  VBTS_ASSIGN_OR_RETURN(st->kernel_gs_base, GetMsr(kMsrKernelGsBase));
  VBTS_ASSIGN_OR_RETURN(st->sysenter_cs, GetMsr(kMsrSysenterCs));
  VBTS_ASSIGN_OR_RETURN(st->sysenter_esp, GetMsr(kMsrSysenterEsp));
  VBTS_ASSIGN_OR_RETURN(st->sysenter_eip, GetMsr(kMsrSysenterEip));
  return absl::OkStatus();
}

absl::Status KvmVcpu::SetState(const CpuState& st, bool with_msrs) {
  kvm_regs r{};
  kvm_sregs s;
  // Keep KVM's interrupt bitmap and APIC base: fetch, then overwrite what we own.
  VBTS_ASSIGN_OR_RETURN(s, GetSregs());
  StateToKvm(st, &r, &s);
  VBTS_RETURN_IF_ERROR(SetSregs(s));
  VBTS_RETURN_IF_ERROR(SetRegs(r));
  VBTS_ASSIGN_OR_RETURN(kvm_vcpu_events e, GetEvents());
  e.flags = KVM_VCPUEVENT_VALID_SHADOW;
  e.interrupt.shadow = st.interrupt_shadow ? KVM_X86_SHADOW_INT_MOV_SS : 0;
  e.nmi.masked = st.nmi_masked;
  VBTS_RETURN_IF_ERROR(SetEvents(e));
  if (sync_regs_) run_->kvm_valid_regs = 0;
  if (with_msrs) {
    const MsrValue m[] = {{kMsrStar, st.star},           {kMsrLstar, st.lstar},
                          {kMsrCstar, st.cstar},         {kMsrSfmask, st.sfmask},
                          {kMsrKernelGsBase, st.kernel_gs_base}, {kMsrSysenterCs, st.sysenter_cs},
                          {kMsrSysenterEsp, st.sysenter_esp},   {kMsrSysenterEip, st.sysenter_eip}};
    VBTS_RETURN_IF_ERROR(SetMsrs(m));
  }
  return absl::OkStatus();
}

absl::Status KvmVcpu::InjectException(uint8_t vector, std::optional<uint32_t> error_code) {
  VBTS_ASSIGN_OR_RETURN(kvm_vcpu_events e, GetEvents());
  e.flags = 0;
  e.exception.injected = 1;
  e.exception.nr = vector;
  e.exception.has_error_code = error_code.has_value();
  e.exception.error_code = error_code.value_or(0);
  return SetEvents(e);
}

absl::Status KvmVcpu::SetCpuid(absl::Span<const kvm_cpuid_entry2> entries) {
  std::vector<uint8_t> buf(sizeof(kvm_cpuid2) + entries.size() * sizeof(kvm_cpuid_entry2));
  auto* c = reinterpret_cast<kvm_cpuid2*>(buf.data());
  c->nent = entries.size();
  std::memcpy(c->entries, entries.data(), entries.size() * sizeof(kvm_cpuid_entry2));
  return Ioctl(fd(), KVM_SET_CPUID2, c, "KVM_SET_CPUID2", absl::StrCat("nent=", entries.size())).status();
}

absl::StatusOr<std::vector<kvm_cpuid_entry2>> KvmVcpu::GetCpuid() {
  constexpr int kMax = 128;
  std::vector<uint8_t> buf(sizeof(kvm_cpuid2) + kMax * sizeof(kvm_cpuid_entry2));
  auto* c = reinterpret_cast<kvm_cpuid2*>(buf.data());
  c->nent = kMax;
  VBTS_RETURN_IF_ERROR(Ioctl(fd(), KVM_GET_CPUID2, c, "KVM_GET_CPUID2").status());
  return std::vector<kvm_cpuid_entry2>(c->entries, c->entries + c->nent);
}

absl::Status KvmVcpu::SetMsrs(absl::Span<const MsrValue> msrs) {
  std::vector<uint8_t> buf(sizeof(kvm_msrs) + msrs.size() * sizeof(kvm_msr_entry));
  auto* m = reinterpret_cast<kvm_msrs*>(buf.data());
  m->nmsrs = msrs.size();
  for (size_t i = 0; i < msrs.size(); i++) {
    m->entries[i] = kvm_msr_entry{};
    m->entries[i].index = msrs[i].index;
    m->entries[i].data = msrs[i].value;
  }
  VBTS_ASSIGN_OR_RETURN(int n, Ioctl(fd(), KVM_SET_MSRS, m, "KVM_SET_MSRS"));
  if (n != static_cast<int>(msrs.size()))
    return absl::FailedPreconditionError(absl::StrFormat("KVM_SET_MSRS set %d of %u MSRs; MSR 0x%x was refused", n,
                                                         msrs.size(), msrs[n].index));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> KvmVcpu::GetMsr(uint32_t index) {
  struct {
    kvm_msrs header;
    kvm_msr_entry entry;  // header.entries[0]
  } buf{};
  kvm_msrs* m = &buf.header;
  m->nmsrs = 1;
  buf.entry.index = index;
  VBTS_ASSIGN_OR_RETURN(int n, Ioctl(fd(), KVM_GET_MSRS, m, "KVM_GET_MSRS", absl::StrFormat("0x%x", index)));
  if (n != 1) return absl::FailedPreconditionError(absl::StrFormat("KVM_GET_MSRS(0x%x) read nothing", index));
  return buf.entry.data;
}

absl::Status KvmVcpu::SetGuestDebug(uint32_t control, const std::array<uint64_t, 8>& debugreg) {
  kvm_guest_debug d{};
  d.control = control;
  for (int i = 0; i < 8; i++) d.arch.debugreg[i] = debugreg[i];
  return Ioctl(fd(), KVM_SET_GUEST_DEBUG, &d, "KVM_SET_GUEST_DEBUG", absl::StrFormat("control=0x%x", control))
      .status();
}

absl::StatusOr<kvm_debugregs> KvmVcpu::GetDebugRegs() {
  kvm_debugregs d;
  VBTS_RETURN_IF_ERROR(Ioctl(fd(), KVM_GET_DEBUGREGS, &d, "KVM_GET_DEBUGREGS").status());
  return d;
}
absl::Status KvmVcpu::SetDebugRegs(const kvm_debugregs& d) {
  return Ioctl(fd(), KVM_SET_DEBUGREGS, &d, "KVM_SET_DEBUGREGS").status();
}

absl::StatusOr<kvm_lapic_state> KvmVcpu::GetLapic() {
  kvm_lapic_state l;
  VBTS_RETURN_IF_ERROR(Ioctl(fd(), KVM_GET_LAPIC, &l, "KVM_GET_LAPIC").status());
  return l;
}
absl::Status KvmVcpu::SetLapic(const kvm_lapic_state& l) {
  return Ioctl(fd(), KVM_SET_LAPIC, &l, "KVM_SET_LAPIC").status();
}

absl::StatusOr<uint32_t> KvmVcpu::GetMpState() {
  kvm_mp_state m;
  VBTS_RETURN_IF_ERROR(Ioctl(fd(), KVM_GET_MP_STATE, &m, "KVM_GET_MP_STATE").status());
  return m.mp_state;
}
absl::Status KvmVcpu::SetMpState(uint32_t state) {
  kvm_mp_state m{state};
  return Ioctl(fd(), KVM_SET_MP_STATE, &m, "KVM_SET_MP_STATE", absl::StrCat("state=", state)).status();
}

absl::StatusOr<uint64_t> KvmVcpu::TscKhz() {
  const int khz = ::ioctl(fd(), KVM_GET_TSC_KHZ, 0);
  if (khz <= 0) return absl::ErrnoToStatus(errno, "KVM_GET_TSC_KHZ");
  return static_cast<uint64_t>(khz);
}

absl::Status KvmVcpu::SetTsc(uint64_t tsc) {
  constexpr uint32_t kMsrTsc = 0x10;
  uint64_t offset = 0;
  kvm_device_attr attr{};
  attr.group = KVM_VCPU_TSC_CTRL;
  attr.attr = KVM_VCPU_TSC_OFFSET;
  attr.addr = reinterpret_cast<uint64_t>(&offset);
  if (::ioctl(fd(), KVM_HAS_DEVICE_ATTR, &attr) != 0 || ::ioctl(fd(), KVM_GET_DEVICE_ATTR, &attr) != 0) {
    const MsrValue m{kMsrTsc, tsc};
    return SetMsrs({&m, 1});
  }
  // guest TSC = scaled host TSC + offset: moving the offset by the difference
  // moves the guest's TSC by it (the microseconds between the two reads are
  // the error).
  VBTS_ASSIGN_OR_RETURN(uint64_t now, GetMsr(kMsrTsc));
  offset += tsc - now;
  VBTS_RETURN_IF_ERROR(Ioctl(fd(), KVM_SET_DEVICE_ATTR, &attr, "KVM_SET_DEVICE_ATTR", "KVM_VCPU_TSC_OFFSET").status());
  return absl::OkStatus();
}

absl::Status KvmVcpu::Nmi() { return Ioctl(fd(), KVM_NMI, nullptr, "KVM_NMI", "").status(); }

}  // namespace vbts::vcpu
