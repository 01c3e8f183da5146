#include "vmm/debugger.h"

#include <limits.h>
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/exit_status.h"
#include "base/status_macros.h"
#include "pmu/paging.h"
#include "vcpu/decoder.h"
#include "vcpu/descriptors.h"
#include "vmm/machine.h"
#include "vmm/stop_signals.h"

namespace vbts::vmm {
namespace {

uint64_t MonoNs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Linear address of a data access at `addr`: outside IA-32e mode linear
// addresses are 32 bits wide (SDM vol. 3A 3.4: no paging means linear =
// physical, and 32-bit paging translates 32-bit addresses).
uint64_t Linear(const vcpu::CpuState& st, uint64_t addr) {
  return st.long_mode_active() ? addr : (addr & 0xFFFFFFFFull);
}

}  // namespace

gdb::Arch Debugger::ArchForImage(absl::Span<const uint8_t> image, bool model_has_long_mode) {
  const gdb::Arch fallback = model_has_long_mode ? gdb::Arch::kX86_64 : gdb::Arch::kI386;
  auto le = [&](uint64_t off, int n) -> std::optional<uint64_t> {
    if (off > image.size() || static_cast<uint64_t>(n) > image.size() - off) return std::nullopt;
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | image[off + i];
    return v;
  };
  if (image.size() < 52 || image[0] != 0x7F || image[1] != 'E' || image[2] != 'L' || image[3] != 'F') return fallback;
  if (image[4] == 2) return gdb::Arch::kX86_64;  // ELFCLASS64
  if (image[4] != 1) return fallback;
  // GDB takes an ELF32 i386 file's architecture as i386 and rejects an
  // x86-64 description then, unless DWARF shows 64-bit code (below).
  const gdb::Arch elf32 = gdb::Arch::kI386;
  // ELF32 section headers: find .debug_info through the section name table.
  const auto shoff = le(0x20, 4), shentsize = le(0x2E, 2), shnum = le(0x30, 2), shstrndx = le(0x32, 2);
  if (!shoff || !shentsize || !shnum || !shstrndx || *shentsize < 40 || *shstrndx >= *shnum) return elf32;
  auto section = [&](uint64_t i, int field) { return le(*shoff + i * *shentsize + field, 4); };
  const auto names = section(*shstrndx, 16);
  if (!names) return elf32;
  for (uint64_t i = 0; i < *shnum && i < 4096; i++) {
    const auto name = section(i, 0), off = section(i, 16), size = section(i, 20);
    if (!name || !off || !size) return elf32;
    static constexpr char kDebugInfo[] = ".debug_info";
    bool match = true;
    for (size_t k = 0; k < sizeof(kDebugInfo); k++) {
      const auto c = le(*names + *name + k, 1);
      if (!c || *c != static_cast<uint8_t>(kDebugInfo[k])) {
        match = false;
        break;
      }
    }
    if (!match || *size < 12) continue;
    // The first compilation unit's header (DWARF 2-4: length, version,
    // abbrev offset, address size; DWARF 5: length, version, unit type,
    // address size).  64-bit DWARF (length 0xffffffff) is not looked into.
    const auto length = le(*off, 4), version = le(*off + 4, 2);
    if (!length || !version || *length == 0xFFFFFFFF) return elf32;
    const auto addr_size = le(*off + (*version >= 5 ? 7 : 10), 1);
    if (addr_size == 8) return gdb::Arch::kX86_64;
    if (addr_size == 4) return gdb::Arch::kI386;
    return elf32;
  }
  return elf32;
}

std::string Debugger::ExecFileFor(absl::Span<const uint8_t> image, const std::string& path, gdb::Arch arch) {
  if (image.size() < 5 || image[0] != 0x7F || image[1] != 'E' || image[2] != 'L' || image[3] != 'F') return "";
  const bool elf64 = image[4] == 2, elf32 = image[4] == 1;
  if (!(elf64 && arch == gdb::Arch::kX86_64) && !(elf32 && arch == gdb::Arch::kI386)) return "";
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) return "";
  return resolved;
}

absl::StatusOr<std::unique_ptr<Debugger>> Debugger::Create(Machine& machine, const std::string& listen, bool wait,
                                                            gdb::Arch arch, std::string exec_file) {
  std::unique_ptr<Debugger> d(new Debugger(machine, arch, std::move(exec_file)));
  VBTS_ASSIGN_OR_RETURN(d->server_, gdb::Server::Listen(listen));
  d->wait_first_ = wait;
  return d;
}

void Debugger::PollOnKvm() {
  if (!server_->connected()) {
    (void)server_->Accept(0);  // BetweenRuns attaches it, in the TCG engine
    return;
  }
  if (!stub_ || stopped_) return;
  const std::string in = server_->Read(0);
  if (!server_->connected()) {
    ClientGone("disconnected");
    return;
  }
  if (in.empty()) return;
  Send(stub_->Receive(in));
  // On KVM nothing is traced for GDB: the guest stops where the move leaves it.
  if (stub_->interrupt_requested()) stop_on_arrival_ = true;
}

bool Debugger::WantsTcg() const {
  if (!server_->connected()) return wait_first_;
  return !stub_ || stopped_ || stop_on_arrival_ || interrupting_ || stepping() || !points_.empty() || tracing();
}

std::optional<RunResult> Debugger::BetweenRuns(bool halted) {
  if (!server_->connected()) {
    const bool first_wait = wait_first_;
    if (first_wait)
      std::fprintf(stderr, "vbts: gdb: waiting for a client on %s (--gdb-wait)\n", server_->address().c_str());
    const uint64_t t0 = MonoNs();
    // (--gdb-wait: in slices, so that Ctrl-C ends vbts while nobody comes.)
    bool accepted = server_->Accept(first_wait ? 200 : 0);
    while (!accepted && first_wait && !PendingStopSignal()) accepted = server_->Accept(200);
    if (first_wait) stopped_ns_ += MonoNs() - t0;
    if (!accepted) return std::nullopt;
  }
  if (!stub_) {
    wait_first_ = false;
    std::fprintf(stderr, "vbts: gdb: client attached on %s\n", server_->address().c_str());
    stub_ = std::make_unique<gdb::Stub>(*this, gdb::StubOptions{arch_, exec_file_});
    // A client that attaches stops the guest (QEMU's gdbstub does the same);
    // GDB asks why with `?`.
    (void)stub_->Stopped(gdb::Stop{gdb::Stop::kInterrupted});
    stopped_ = true;
  }
  if (stop_on_arrival_) StopFor(gdb::Stop{gdb::Stop::kInterrupted});
  if (!stopped_) {
    // Running: only Ctrl-C can come.  It stops the guest at the next
    // instruction boundary the tracer has seen: one step (so that GDB's
    // branch trace ends exactly where the guest stopped).
    const std::string in = server_->Read(0);
    if (!server_->connected()) {
      ClientGone("disconnected");
      return std::nullopt;
    }
    if (!in.empty()) {
      Send(stub_->Receive(in));
      if (stub_->interrupt_requested() && !interrupting_) {
        if (halted) {
          // Nothing runs until an interrupt: stop right here.
          StopFor(gdb::Stop{gdb::Stop::kInterrupted});
        } else {
          ResumeWith(gdb::Resume{gdb::Resume::kStep}, halted);
          interrupting_ = true;
        }
      }
    }
  }
  const uint64_t t0 = MonoNs();
  while (stopped_) {
    if (PendingStopSignal()) break;  // the run loop ends the run
    const std::string in = server_->Read(1000);
    if (!server_->connected()) {
      ClientGone("disconnected");
      break;
    }
    if (in.empty()) continue;
    Send(stub_->Receive(in));
    if (stub_->killed()) {
      stopped_ns_ += MonoNs() - t0;
      server_->CloseClient();
      return m_.Finish(RunEnd::kKilled, kExitKilled, "vbts: killed by the debugger (gdb kill)");
    }
    if (stub_->detached()) {
      ClientGone("detached");
      break;
    }
    if (std::optional<gdb::Resume> r = stub_->TakeResume()) {
      ResumeWith(*r, halted);
      stopped_ = false;
    }
  }
  stopped_ns_ += MonoNs() - t0;
  return std::nullopt;
}

void Debugger::ResumeWith(const gdb::Resume& r, bool halted) {
  resume_ = r;
  const bool step = r.kind != gdb::Resume::kContinue;
  m_.tcg_->SetDebugStep(step);
  // A step of a halted CPU takes the interrupt that wakes it (the step ends
  // at the handler's first instruction); otherwise interrupts wait.
  mask_interrupts_ = step && !halted;
}

void Debugger::AfterRun(const vcpu::TcgStop& stop) {
  if (!stub_ || stopped_ || !resume_) return;
  const vcpu::TcgCpu::DebugStop ds = m_.tcg_->debug_stop();
  switch (ds.kind) {
    case vcpu::TcgCpu::DebugStop::kBreakpoint: {
      // Which kind of point: software unless only a Z1 is at this address.
      gdb::PointType type = gdb::PointType::kHardware;
      for (const Point& p : points_)
        if (p.type == gdb::PointType::kSoftware && p.addr == ds.address) type = gdb::PointType::kSoftware;
      StopFor(gdb::Stop{gdb::Stop::kBreakpoint, type});
      return;
    }
    case vcpu::TcgCpu::DebugStop::kWatch: {
      // Z2 reports a write, Z3 a read; Z4 (access) either.
      gdb::PointType type = ds.write ? gdb::PointType::kWrite : gdb::PointType::kRead;
      bool exact = false;
      for (const Point& p : points_)
        if (p.type == type && ds.address >= p.addr && ds.address < p.addr + p.len) exact = true;
      if (!exact) type = gdb::PointType::kAccess;
      StopFor(gdb::Stop{gdb::Stop::kWatchpoint, type, ds.address});
      return;
    }
    case vcpu::TcgCpu::DebugStop::kStep:
      break;
    case vcpu::TcgCpu::DebugStop::kNone:
      // A step over HLT ends with the CPU halted, after the HLT.
      if (!(stepping() && stop.kind == vcpu::TcgStop::kHalted)) return;
      break;
  }
  if (interrupting_) {
    interrupting_ = false;
    StopFor(gdb::Stop{gdb::Stop::kInterrupted});
    return;
  }
  if (resume_->kind == gdb::Resume::kRange) {
    // vCont;r: go on stepping while RIP stays in the range (GDB's `next`
    // and `step` over a line), without a round trip to the client.
    const vcpu::CpuState st = m_.tcg_->GetState(/*with_msrs=*/false);
    if (st.rip >= resume_->start && st.rip < resume_->end && stop.kind != vcpu::TcgStop::kHalted) return;
  }
  StopFor(gdb::Stop{gdb::Stop::kStep});
}

void Debugger::AddTransfer(const pmu::Branch& b, bool every_instruction) {
  gdb::BranchTrace& trace = stub_->btrace();
  if (every_instruction || !pmu::IsEventDelivery(b.kind)) {
    if (every_instruction || b.taken()) trace.Add(b);
    return;
  }
  // Block-level observation reports taken transfers and events only.  The
  // open block ran sequentially from its begin to the instruction the event
  // interrupted (b.from, which did not retire): decode forward to find the
  // last one that did.  An event costs one decode per instruction of its
  // block; instructions cost nothing.
  std::optional<uint64_t> last;
  const vcpu::CpuState st = m_.tcg_->GetState(/*with_msrs=*/false);
  vcpu::DecodeMode mode;
  switch (b.mode_from) {
    case pmu::ExecMode::kReal: mode.mode = vcpu::CpuMode::kReal; break;
    case pmu::ExecMode::kProt16: mode.mode = vcpu::CpuMode::kProtected16; break;
    case pmu::ExecMode::kProt32: mode.mode = vcpu::CpuMode::kProtected32; break;
    case pmu::ExecMode::kLong64: mode.mode = vcpu::CpuMode::kLong64; break;
  }
  uint64_t pc = trace.open_begin();
  for (int i = 0; pc < b.from && i < 100'000; i++) {
    absl::StatusOr<vcpu::DecodedInsn> insn =
        vcpu::DecodeAt(st.paging_regs(), b.cpl_from == 3, mode, *m_.ram_, Gva{pc});
    if (!insn.ok() || insn->length == 0) {
      last.reset();  // cannot tell: the block is left out (GDB shows a gap)
      break;
    }
    last = pc;
    pc += insn->length;
  }
  if (pc != b.from) last.reset();
  trace.AddEvent(b, last);
}

void Debugger::StopFor(const gdb::Stop& stop) {
  stopped_ = true;
  interrupting_ = stop_on_arrival_ = false;  // a Ctrl-C's step that met a breakpoint reports the breakpoint
  resume_.reset();
  mask_interrupts_ = false;
  m_.tcg_->SetDebugStep(false);
  Send(stub_->Stopped(stop));
}

void Debugger::Ended(const RunResult& result) {
  if (!stub_ || !server_->connected()) return;
  // GDB hears the value the guest wrote to isa-debug-exit (vbts exits with
  // (v << 1) | 1): `exited normally` for 0.
  if (result.end == RunEnd::kGuestExit)
    Send(stub_->Stopped(gdb::Stop{gdb::Stop::kExited, gdb::PointType::kSoftware, 0, (result.exit_status >> 1) & 0xFF}));
  else if (result.end == RunEnd::kPowerOff)  // ACPI soft-off: the machine exited normally
    Send(stub_->Stopped(gdb::Stop{gdb::Stop::kExited, gdb::PointType::kSoftware, 0, 0}));
  else if (result.end != RunEnd::kKilled)
    Send(stub_->Stopped(gdb::Stop{gdb::Stop::kTerminated, gdb::PointType::kSoftware, 0, 9}));  // SIGKILL
  server_->CloseClient();
}

void Debugger::ClientGone(const char* why) {
  std::fprintf(stderr, "vbts: gdb: client %s; the guest runs on\n", why);
  points_.clear();
  ApplyPoints();
  if (stub_ && stub_->btrace().active()) {
    stub_->btrace().Stop();
    (void)SetBranchTrace(false);
  }
  if (m_.tcg_) m_.tcg_->SetDebugStep(false);
  stopped_ = false;
  interrupting_ = stop_on_arrival_ = false;
  resume_.reset();
  mask_interrupts_ = false;
  stub_.reset();
  server_->CloseClient();
}

gdb::Registers Debugger::ReadRegisters() {
  gdb::Registers r;
  r.st = m_.tcg_->GetState(/*with_msrs=*/true);
  r.fpu = m_.tcg_->GetFpu();
  return r;
}

namespace {

// The hidden part of a segment register for a selector GDB wrote: from the
// GDT/LDT in protected mode (SDM vol. 3A 3.4.3), selector << 4 in real and
// virtual-8086 mode.
absl::StatusOr<vcpu::Segment> LoadSegment(Debugger& d, const vcpu::CpuState& st, const vcpu::Segment& old,
                                          uint16_t selector) {
  if (!(st.cr0 & vcpu::kCr0Pe) || (st.rflags & vcpu::kRflagsVm)) {
    vcpu::Segment s = old;
    s.selector = selector;
    s.base = static_cast<uint64_t>(selector) << 4;
    return s;
  }
  if (vcpu::SelectorIsNull(selector)) return vcpu::NullSegment(selector);
  const vcpu::DescriptorTable table =
      vcpu::SelectorTi(selector) ? vcpu::DescriptorTable{st.ldtr.base, static_cast<uint16_t>(st.ldtr.limit)} : st.gdtr;
  const uint64_t offset = static_cast<uint64_t>(vcpu::SelectorIndex(selector)) * 8;
  if (offset + 7 > table.limit)
    return absl::InvalidArgumentError(absl::StrFormat("selector 0x%x is beyond its descriptor table", selector));
  uint8_t raw[8];
  if (d.ReadMemory(table.base + offset, absl::MakeSpan(raw)) != sizeof(raw))
    return absl::InvalidArgumentError(absl::StrFormat("the descriptor of selector 0x%x is not in RAM", selector));
  vcpu::Descriptor desc;
  std::memcpy(&desc.lo, raw, 8);
  if (!((desc.lo >> 47) & 1))
    return absl::InvalidArgumentError(absl::StrFormat("selector 0x%x: descriptor not present", selector));
  return vcpu::SegmentFromDescriptor(desc, selector);
}

}  // namespace

absl::Status Debugger::WriteRegisters(const gdb::Registers& regs) {
  const vcpu::CpuState cur = m_.tcg_->GetState(/*with_msrs=*/true);
  vcpu::CpuState st = regs.st;
  for (auto [seg, old] : {std::pair{&st.cs, &cur.cs}, {&st.ss, &cur.ss}, {&st.ds, &cur.ds}, {&st.es, &cur.es},
                          {&st.fs, &cur.fs}, {&st.gs, &cur.gs}}) {
    if (seg->selector == old->selector) continue;
    const uint64_t base = seg->base;
    VBTS_ASSIGN_OR_RETURN(*seg, LoadSegment(*this, cur, *old, seg->selector));
    // fs_base/gs_base written with the selector in one G packet: the base wins.
    if (base != old->base && (seg == &st.fs || seg == &st.gs)) seg->base = base;
  }
  VBTS_RETURN_IF_ERROR(m_.tcg_->SetState(st));
  m_.tcg_->SetFpu(regs.fpu);
  return absl::OkStatus();
}

namespace {

// A debugger's access to [addr, addr+len) of guest linear memory: supervisor,
// no A/D bits set, no protection checks.  Calls access(gpa, offset, n) page
// by page while each page translates and the access succeeds; returns the
// bytes done.
template <typename Fn>
size_t EachPage(const vcpu::CpuState& st, PhysMemory& mem, uint64_t addr, size_t len, Fn access) {
  size_t done = 0;
  while (done < len) {
    const uint64_t la = Linear(st, addr + done);
    absl::StatusOr<pmu::Translation> t =
        pmu::Translate(st.paging_regs(), mem, Gva{la}, pmu::Access{}, /*set_accessed_dirty=*/false);
    if (!t.ok() || !t->fault.ok()) break;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len - done, 0x1000 - (la & 0xFFF)));
    if (!access(t->gpa, done, n).ok()) break;  // not RAM (the LAPIC page, MMIO)
    done += n;
  }
  return done;
}

}  // namespace

size_t Debugger::ReadMemory(uint64_t addr, absl::Span<uint8_t> out) {
  return EachPage(m_.tcg_->GetState(/*with_msrs=*/false), *m_.ram_, addr, out.size(),
                  [&](Gpa gpa, size_t off, size_t n) { return m_.ram_->Read(gpa, out.subspan(off, n)); });
}

size_t Debugger::WriteMemory(uint64_t addr, absl::Span<const uint8_t> data) {
  // Through the machine's code-coherent view of RAM: the TCG engine drops
  // its translations of the bytes GDB writes, as it does for the tracer's stores.
  return EachPage(m_.tcg_->GetState(/*with_msrs=*/false), *m_.ram_, addr, data.size(),
                  [&](Gpa gpa, size_t off, size_t n) { return m_.tracer_ram_->Write(gpa, data.subspan(off, n)); });
}

absl::Status Debugger::InsertPoint(gdb::PointType type, uint64_t addr, uint64_t len) {
  if (type == gdb::PointType::kSoftware || type == gdb::PointType::kHardware) {
    len = 1;  // GDB's "kind" of an x86 breakpoint
  } else if (len == 0 || len > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrFormat("watchpoint length %u: expected 1 byte to 1 MiB", len));
  }
  points_.push_back(Point{type, addr, len});
  ApplyPoints();
  return absl::OkStatus();
}

absl::Status Debugger::RemovePoint(gdb::PointType type, uint64_t addr, uint64_t len) {
  if (type == gdb::PointType::kSoftware || type == gdb::PointType::kHardware) len = 1;
  auto it = std::find(points_.begin(), points_.end(), Point{type, addr, len});
  if (it == points_.end()) return absl::NotFoundError("no such breakpoint or watchpoint");
  points_.erase(it);
  ApplyPoints();
  return absl::OkStatus();
}

void Debugger::ApplyPoints() {
  std::vector<uint64_t> bps;
  std::vector<vcpu::TcgCpu::DebugWatch> watches;
  for (const Point& p : points_) {
    switch (p.type) {
      case gdb::PointType::kSoftware:
      case gdb::PointType::kHardware:
        // As GDB gave it, not cut to the mode of the moment: a breakpoint
        // on a 64-bit kernel address, set while the guest still runs its
        // 32-bit entry (--gdb-wait), must hit once it runs in IA-32e mode.
        // (Cut to 32 bits it hit nothing.) Outside IA-32e mode instructions
        // have 32-bit linear addresses, so a wider one only waits.
        bps.push_back(p.addr);
        break;
      case gdb::PointType::kWrite:
        watches.push_back({p.addr, p.len, false, true});
        break;
      case gdb::PointType::kRead:
        watches.push_back({p.addr, p.len, true, false});
        break;
      case gdb::PointType::kAccess:
        watches.push_back({p.addr, p.len, true, true});
        break;
    }
  }
  if (!m_.tcg_) return;  // on KVM, before any move: nothing was set
  m_.tcg_->SetDebugBreakpoints(std::move(bps));
  m_.tcg_->SetDebugWatchpoints(std::move(watches));
}

absl::Status Debugger::SetBranchTrace(bool on) { return m_.SetGdbBranchTrace(on); }

std::string Debugger::PmuReport() {
  const pmu::CpuModel& model = *m_.model_;
  pmu::VirtualPmu& vpmu = *m_.vpmu_;
  auto msr = [&](uint32_t index) -> std::string {
    const pmu::MsrResult r = vpmu.ReadMsr(index);
    return r.gp ? std::string("(#GP)") : absl::StrFormat("0x%016x", r.value);
  };
  std::string out = absl::StrFormat("CPU model: %s (%s)\n", model.name, model.description);
  absl::StrAppendFormat(&out, "IA32_DEBUGCTL     %s\n", msr(0x1D9));
  absl::StrAppendFormat(&out, "IA32_DS_AREA      %s\n", msr(0x600));
  const pmu::MsrResult ds = vpmu.ReadMsr(0x600);
  if (model.pmu.ds && !ds.gp && ds.value != 0) {
    // The DS buffer management area (SDM vol. 3B 18.6.3.4): 64-bit fields
    // with DTES64, 32-bit ones otherwise.
    const int w = model.pmu.dtes64 ? 8 : 4;
    const char* names[] = {"BTS buffer base", "BTS index", "BTS absolute maximum", "BTS interrupt threshold",
                           "PEBS buffer base", "PEBS index", "PEBS absolute maximum", "PEBS interrupt threshold"};
    for (int i = 0; i < 8; i++) {
      uint64_t v = 0;
      uint8_t raw[8] = {};
      if (ReadMemory(ds.value + static_cast<uint64_t>(i) * w, absl::MakeSpan(raw, w)) != static_cast<size_t>(w)) {
        absl::StrAppendFormat(&out, "  DS %-26s (not readable)\n", names[i]);
        continue;
      }
      std::memcpy(&v, raw, w);
      absl::StrAppendFormat(&out, "  DS %-26s 0x%x\n", names[i], v);
    }
  }
  const pmu::LbrModel& lbr = model.pmu.lbr;
  if (lbr.entries > 0) {
    absl::StrAppendFormat(&out, "LBR stack, %d entries, TOS %s\n", lbr.entries, msr(lbr.tos));
    for (int i = 0; i < lbr.entries; i++) {
      if (lbr.packed)
        absl::StrAppendFormat(&out, "  LBR %2d  %s\n", i, msr(lbr.from_base + i));
      else
        absl::StrAppendFormat(&out, "  LBR %2d  from %s  to %s\n", i, msr(lbr.from_base + i), msr(lbr.to_base + i));
    }
  }
  if (model.pmu.perfmon_version >= 2) absl::StrAppendFormat(&out, "IA32_PERF_GLOBAL_CTRL   %s\n", msr(0x38F));
  if (model.pmu.perfmon_version >= 2) absl::StrAppendFormat(&out, "IA32_PERF_GLOBAL_STATUS %s\n", msr(0x38E));
  for (int i = 0; i < model.pmu.gp_counters; i++)
    absl::StrAppendFormat(&out, "PERFEVTSEL%d %s  PMC%d %s\n", i, msr(0x186 + i), i, msr(0xC1 + i));
  if (model.pmu.fixed_counters > 0) absl::StrAppendFormat(&out, "IA32_FIXED_CTR_CTRL %s\n", msr(0x38D));
  for (int i = 0; i < model.pmu.fixed_counters; i++)
    absl::StrAppendFormat(&out, "IA32_FIXED_CTR%d %s\n", i, msr(0x309 + i));
  return out;
}

std::string Debugger::LapicReport() {
  const vcpu::GuestClock::Now now = m_.ClockNow();
  const uint64_t ns = m_.clock_->Ns(now);
  const vcpu::Lapic& apic = *m_.lapic_;
  uint8_t regs[vcpu::kLapicStateSize];
  apic.GetState(regs, ns);
  auto reg = [&](uint32_t offset) {
    uint32_t v;
    std::memcpy(&v, regs + offset, sizeof v);
    return v;
  };
  std::string out = absl::StrFormat(
      "LAPIC (%s mode, software %s); guest clock on %s time: TSC %#x, %u ns\n",
      apic.x2apic_mode() ? "x2APIC" : "xAPIC", apic.software_enabled() ? "enabled" : "disabled",
      m_.clock_->source() == vcpu::GuestClock::Source::kInstructions ? "instruction" : "host", m_.clock_->Tsc(now), ns);
  static constexpr std::pair<const char*, uint32_t> kRegs[] = {
      {"ID", vcpu::kApicRegId},
      {"version", vcpu::kApicRegVersion},
      {"TPR", vcpu::kApicRegTpr},
      {"PPR", vcpu::kApicRegPpr},
      {"LDR", vcpu::kApicRegLdr},
      {"SVR", vcpu::kApicRegSvr},
      {"ESR", vcpu::kApicRegEsr},
      {"ICR", vcpu::kApicRegIcrLow},
      {"LVT timer", vcpu::kApicRegLvtTimer},
      {"LVT thermal", vcpu::kApicRegLvtThermal},
      {"LVT perf", vcpu::kApicRegLvtPerf},
      {"LVT LINT0", vcpu::kApicRegLvtLint0},
      {"LVT LINT1", vcpu::kApicRegLvtLint1},
      {"LVT error", vcpu::kApicRegLvtError},
      {"timer initial count", vcpu::kApicRegTimerInitialCount},
      {"timer current count", vcpu::kApicRegTimerCurrentCount},
      {"timer divide", vcpu::kApicRegTimerDivide},
  };
  for (const auto& [name, offset] : kRegs) absl::StrAppendFormat(&out, "  %-20s %08x\n", name, reg(offset));
  for (const auto& [name, base] : {std::pair<const char*, uint32_t>{"IRR", vcpu::kApicRegIrr},
                                   {"ISR", vcpu::kApicRegIsr}, {"TMR", vcpu::kApicRegTmr}}) {
    absl::StrAppendFormat(&out, "  %-20s", name);
    for (int i = 7; i >= 0; i--) absl::StrAppendFormat(&out, " %08x", reg(base + 0x10 * i));
    out += "\n";
  }
  const std::optional<uint64_t> next = apic.NextDeadline();
  if (apic.tsc_deadline_mode()) absl::StrAppendFormat(&out, "  IA32_TSC_DEADLINE    %#x\n", apic.armed_tsc_deadline());
  if (next)
    absl::StrAppendFormat(&out, "  next timer interrupt at %u ns (in %d ns)\n", *next,
                          static_cast<int64_t>(*next - ns));
  else
    out += "  no timer interrupt due\n";
  return out;
}

absl::StatusOr<std::string> Debugger::Monitor(absl::string_view command) {
  const std::string cmd = std::string(absl::StripAsciiWhitespace(command));
  if (cmd == "help" || cmd.empty())
    return std::string(
        "vbts monitor commands:\n"
        "  info pmu        the virtual PMU: DEBUGCTL, DS area and its BTS/PEBS fields, LBR stack with TOS, counters\n"
        "  info registers  every register as the guest sees it (segments with their hidden parts, CRs, EFER, MSRs)\n"
        "  info lapic      the local APIC's registers, its timer and the guest clock\n"
        "  info cpu        the CPU model\n"
        "  info engine     the execution engine and GDB's branch trace\n");
  if (cmd == "info pmu" || cmd == "pmu") return PmuReport();
  if (cmd == "info registers" || cmd == "registers") return m_.tcg_->GetState(/*with_msrs=*/true).Dump() + "\n";
  if (cmd == "info lapic" || cmd == "lapic") return LapicReport();
  if (cmd == "info cpu" || cmd == "cpu")
    return absl::StrFormat("%s: %s\n", m_.model_->name, m_.model_->description);
  if (cmd == "info engine" || cmd == "engine") {
    const std::string trace =
        tracing() ? absl::StrFormat("on, %u-byte buffer", stub_->btrace().size()) : std::string("off");
    if (!m_.switch_engines_)
      return absl::StrFormat("engine: tcg (QEMU's TCG in-process); GDB branch trace: %s\n", trace);
    return absl::StrFormat(
        "engine: tcg while GDB needs it (stopped, stepping, breakpoints, watchpoints, branch trace), KVM "
        "otherwise; %u moves between them so far; GDB branch trace: %s\n",
        m_.engine_switches_, trace);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown monitor command '", cmd, "' (try 'monitor help')"));
}

}  // namespace vbts::vmm
