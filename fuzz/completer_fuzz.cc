// completer_fuzz.cc: libFuzzer target for the instruction decoder and the
// completion engine (vcpu/decoder.h, vcpu/completer.h) on random CPU states
// and guest memory.  The first byte picks a starting machine (real mode,
// pm16, pm32 or IA-32e at CPL 0 or 3, with a GDT, IDT, TSS, stacks and, for
// IA-32e, identity page tables in a 256 KiB FakePhysMemory); the rest is a
// list of changes: general registers, RFLAGS, any field of any segment
// register (TR and LDTR too), GDTR/IDTR pointing anywhere, CR0/CR3/CR4/EFER
// (kept to combinations KVM accepts), the SYSCALL/SYSENTER MSRs, RIP, random
// bytes anywhere in RAM (descriptors, gates, stacks, page tables), and last
// the instruction bytes at RIP.  The instruction there is decoded through the
// guest's paging and, when the completer handles it, completed.  Checks: no
// crash or UB; a fault, a not-mine or an error status leaves the state
// unchanged and memory unchanged but for paging A/D flags (completer.h's
// contract); a retired instruction leaves RIP canonical in 64-bit mode and
// within 32 bits otherwise and a CPL of 0-3; nothing is written outside RAM
// (the fake refuses such writes).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "pmu/cpu_model.h"
#include "pmu/testing/fake_memory.h"
#include "vcpu/completer.h"
#include "vcpu/cpu_state.h"
#include "vcpu/decoder.h"
#include "vcpu/descriptors.h"

namespace {

using namespace vbts::vcpu;
using vbts::fuzz::FuzzInput;

constexpr uint64_t kRam = 256 << 10;
constexpr uint64_t kGdt = 0x1000, kIdt = 0x2000, kTss = 0x3000, kTss64 = 0x3400, kPml4 = 0x10000;
constexpr uint64_t kKernelStack = 0x9000, kUserStack = 0x7000, kCode = 0x100;
// GDT: 1 code32 DPL0, 2 data DPL0, 3 code32 DPL3, 4 data DPL3, 5 code64 DPL0,
// 6 code64 DPL3, 7 16-bit code DPL0, 8 32-bit TSS, 9 call gate, 10-11 64-bit TSS.
constexpr uint16_t kCode32K = 0x08, kData32K = 0x10, kCode32U = 0x1b, kData32U = 0x23, kCode64K = 0x28,
                   kCode64U = 0x33, kCode16K = 0x38, kTssSel = 0x40, kTss64Sel = 0x50;

void W64(vbts::testing::FakePhysMemory& m, uint64_t a, uint64_t v) { std::memcpy(m.bytes().data() + a, &v, 8); }
Descriptor Gdt(vbts::testing::FakePhysMemory& m, int i) {
  Descriptor d;
  std::memcpy(&d.lo, m.bytes().data() + kGdt + 8 * i, 8);
  std::memcpy(&d.hi, m.bytes().data() + kGdt + 8 * i + 8, 8);
  return d;
}

CpuState Machine(uint8_t pick, vbts::testing::FakePhysMemory& m) {
  W64(m, kGdt + 8 * 1, MakeCode32(0).lo);
  W64(m, kGdt + 8 * 2, MakeData32(0).lo);
  W64(m, kGdt + 8 * 3, MakeCode32(3).lo);
  W64(m, kGdt + 8 * 4, MakeData32(3).lo);
  W64(m, kGdt + 8 * 5, MakeCode64(0).lo);
  W64(m, kGdt + 8 * 6, MakeCode64(3).lo);
  W64(m, kGdt + 8 * 7, MakeSegmentDescriptor(0, 0xffff, 0xb, true, 0, true, false, false, false).lo);
  W64(m, kGdt + 8 * 8, MakeSystemDescriptor(kTss32Busy, kTss, 0x67).lo);
  W64(m, kGdt + 8 * 9, MakeGate(kCallGate32, kCode32K, 0x5000, 3).lo);
  const Descriptor t64 = MakeSystemDescriptor(kTss32Busy, kTss64, 0x67);
  W64(m, kGdt + 8 * 10, t64.lo);
  W64(m, kGdt + 8 * 11, t64.hi);
  std::memcpy(m.bytes().data() + kTss + 4, &kKernelStack, 4);
  const uint16_t ss0 = kData32K;
  std::memcpy(m.bytes().data() + kTss + 8, &ss0, 2);
  W64(m, kTss64 + 4, kKernelStack);
  W64(m, kTss64 + 0x24, kKernelStack - 0x800);  // IST1
  const bool lm = (pick % 8) >= 4;
  for (int v = 0; v < 256; v++) {
    const uint8_t type = (v % 3 == 0) ? kTrapGate32 : kIntGate32;
    const Descriptor g = MakeGate(type, lm ? kCode64K : kCode32K, 0x4000 + 16 * v, v >= 0x80 ? 3 : 0, true,
                                  lm && v == 2 ? 1 : 0);
    if (lm) {
      W64(m, kIdt + 16 * v, g.lo);
      W64(m, kIdt + 16 * v + 8, g.hi);
    } else {
      W64(m, kIdt + 8 * v, g.lo);
    }
  }
  // Identity page tables for IA-32e: one 1 GiB page.
  W64(m, kPml4, (kPml4 + 0x1000) | 0x7);
  W64(m, kPml4 + 0x1000, 0x87);

  CpuState st;
  st.rip = kCode;
  st.rflags = 0x202;
  const int cpl = (pick % 8) % 2 == 0 ? 3 : 0;  // odd picks: CPL0
  auto seg = [&](uint16_t sel) { return SegmentFromDescriptor(Gdt(m, sel >> 3), sel); };
  switch (pick % 8) {
    case 0:  // real mode
      st.cs.limit = st.ss.limit = st.ds.limit = st.es.limit = st.fs.limit = st.gs.limit = 0xffff;
      st.cs.present = st.ss.present = st.ds.present = true;
      st.cs.s = st.ss.s = st.ds.s = true;
      st.cs.type = 0xb;
      st.ss.type = st.ds.type = st.es.type = 0x3;
      st.idtr = {0, 0x3ff};
      st.gpr[kRsp] = kUserStack;
      return st;
    case 1:  // pm16, CPL0
    case 2:  // pm32, CPL3
    case 3:  // pm32, CPL0
      st.cr0 = kCr0Pe;
      st.gdtr = {kGdt, 0xff};
      st.idtr = {kIdt, 256 * 8 - 1};
      st.tr = seg(kTssSel);
      st.cs = seg((pick % 8) == 1 ? kCode16K : cpl ? kCode32U : kCode32K);
      st.ss = seg(cpl ? kData32U : kData32K);
      st.ds = st.es = st.fs = st.gs = st.ss;
      st.gpr[kRsp] = cpl ? kUserStack : kKernelStack;
      st.sysenter_cs = kCode32K;
      st.sysenter_esp = kKernelStack;
      st.sysenter_eip = 0x4800;
      return st;
    default:  // 4: compat CPL3, 5: lm64 CPL0, 6: lm64 CPL3, 7: compat CPL0
      st.cr0 = kCr0Pe | kCr0Pg;
      st.cr4 = kCr4Pae;
      st.efer = kEferLme | kEferLma | kEferSce;
      st.cr3 = kPml4;
      st.gdtr = {kGdt, 0xff};
      st.idtr = {kIdt, 256 * 16 - 1};
      st.tr = seg(kTss64Sel);
      st.tr.type = kTss32Busy;
      st.cs = seg((pick % 8) == 4 || (pick % 8) == 7 ? (cpl ? kCode32U : kCode32K) : (cpl ? kCode64U : kCode64K));
      st.ss = seg(cpl ? kData32U : kData32K);
      st.ds = st.es = st.ss;
      st.fs = st.gs = NullSegment(0);
      st.gpr[kRsp] = cpl ? kUserStack : kKernelStack;
      st.star = (uint64_t{kData32U} << 48) | (uint64_t{kCode32K} << 32);  // SYSRET: CS 0x33 (64-bit) or 0x23
      st.lstar = 0x4800;
      st.cstar = 0x4900;
      st.sfmask = 0x700;
      st.sysenter_cs = kCode32K;
      st.sysenter_esp = kKernelStack;
      st.sysenter_eip = 0x4800;
      return st;
  }
}

void FuzzSegment(FuzzInput& in, Segment& s) {
  switch (in.U8() % 4) {
    case 0: s.selector = in.U16(); break;
    case 1: s.base = in.Value(); break;
    case 2: s.limit = in.U32(); break;
    default: {
      const uint8_t a = in.U8(), b = in.U8();
      s.type = a & 0xf;
      s.s = a & 0x10;
      s.dpl = (a >> 5) & 3;
      s.present = a & 0x80;
      s.db = b & 1;
      s.l = b & 2;
      s.g = b & 4;
      s.avl = b & 8;
      s.unusable = b & 16;
      break;
    }
  }
}

// Keeps CR0/CR4/EFER to what KVM_SET_SREGS accepts: PG needs PE, LMA is
// LME with PG (which needs PAE).
void Consistent(CpuState& st) {
  if (st.cr0 & kCr0Pg) st.cr0 |= kCr0Pe;
  if ((st.efer & kEferLme) && (st.cr0 & kCr0Pg) && !(st.cr4 & kCr4Pae)) st.cr4 |= kCr4Pae;
  st.efer = (st.efer & ~kEferLma) | ((st.efer & kEferLme) && (st.cr0 & kCr0Pg) ? kEferLma : 0);
  st.cr4 &= ~(uint64_t{1} << 12);  // LA57: no model has it
  st.rflags |= kRflagsFixed1;
  st.rflags &= ~kRflagsVm;  // virtual-8086 mode is refused (Unimplemented) before anything else
  // The MSRs that hold linear addresses are canonical in every state a vCPU
  // can be in: WRMSR of a non-canonical value #GPs (SDM vol. 4; the TCG
  // engine, TcgCpu::CpuMsrWriteFaults) and KVM canonicalises SYSENTER_EIP/ESP
  // (first finding of this harness after its speed-up: SYSENTER "retired" to
  // RIP 0x10000000000000 from a state no guest can make).
  for (uint64_t* v : {&st.lstar, &st.cstar, &st.kernel_gs_base, &st.sysenter_eip, &st.sysenter_esp})
    *v = static_cast<uint64_t>(static_cast<int64_t>(*v << 16) >> 16);
}

// Only paging A/D flags may differ between `was` and `now`.
bool OnlyAccessedDirty(const std::vector<uint8_t>& was, const std::vector<uint8_t>& now) {
  // (memcmp first: a byte loop over all of RAM would cost libFuzzer's
  // comparison tracing a callback per byte.)
  if (std::memcmp(was.data(), now.data(), was.size()) == 0) return true;
  for (size_t i = 0; i < was.size(); i++) {
    if (was[i] == now[i]) continue;
    if (i % 4 != 0 || ((was[i] ^ now[i]) & ~0x60) || (was[i] & ~now[i])) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  // One RAM for every input, cleared each time: a fresh 256 KiB buffer per
  // input cost more in page faults than the rest of the run.
  static vbts::testing::FakePhysMemory& mem = *new vbts::testing::FakePhysMemory(kRam);
  std::memset(mem.bytes().data(), 0, kRam);  // (memset, memcpy: one sanitizer check each, not one per byte)
  CpuState st = Machine(in.U8(), mem);

  // Changes until a byte says stop, then the instruction bytes.
  for (int n = 0; n < 64 && !in.empty();) {
    const uint8_t op = in.U8();
    if (op % 12 == 11) break;
    n++;
    switch (op % 12) {
      case 0: st.gpr[in.U8() % 16] = in.Value(); break;
      case 1: st.rflags = in.U32(); break;
      case 2: {
        Segment* segs[] = {&st.es, &st.cs, &st.ss, &st.ds, &st.fs, &st.gs, &st.tr, &st.ldtr};
        FuzzSegment(in, *segs[in.U8() % 8]);
        break;
      }
      case 3: {
        DescriptorTable& t = in.Bool() ? st.gdtr : st.idtr;
        t.base = in.Value();
        t.limit = in.U16();
        break;
      }
      case 4: {
        const uint8_t which = in.U8() % 4;
        const uint64_t v = in.Value();
        (which == 0 ? st.cr0 : which == 1 ? st.cr3 : which == 2 ? st.cr4 : st.efer) = v;
        break;
      }
      case 5: {
        uint64_t* msrs[] = {&st.star, &st.lstar, &st.cstar, &st.sfmask, &st.kernel_gs_base,
                            &st.sysenter_cs, &st.sysenter_esp, &st.sysenter_eip};
        *msrs[in.U8() % 8] = in.Value();
        break;
      }
      case 6: st.rip = in.Value(); break;
      case 7: {  // bytes anywhere in RAM
        const uint64_t at = in.U32() % kRam;
        uint8_t buf[32];
        const size_t k = in.Bytes(buf, std::min<uint64_t>(in.U8() % 33, kRam - at));
        std::copy(buf, buf + k, mem.bytes().begin() + at);
        break;
      }
      case 8: {  // a descriptor into the GDT or a gate into the IDT
        const bool idt = in.Bool();
        const uint64_t at = (idt ? kIdt : kGdt) + 8 * (in.U8() % (idt ? 512 : 32));
        W64(mem, at, in.U64());
        break;
      }
      case 9: st.interrupt_shadow = in.Bool(), st.nmi_masked = in.Bool(); break;
      default: st.maxphyaddr = 32 + in.U8() % 21; break;
    }
  }
  Consistent(st);

  // The instruction at CS:RIP, where the guest's paging puts it.
  uint8_t code[15] = {};
  const size_t len = in.Bytes(code, sizeof code);
  absl::StatusOr<vbts::pmu::Translation> t =
      vbts::pmu::Translate(st.paging_regs(), mem, vbts::Gva(st.pc_linear()), {}, /*set_accessed_dirty=*/false);
  if (t.ok() && t->fault.ok())
    for (size_t i = 0; i < len && t->gpa.value + i < kRam; i++) mem.bytes()[t->gpa.value + i] = code[i];

  absl::StatusOr<DecodedInsn> insn = DecodeCurrent(st, mem);
  if (!insn.ok()) return 0;
  insn->ToString();
  static const vbts::pmu::CpuModel& model = vbts::pmu::CpuModels().front();
  const CpuidFn cpuid = [](uint32_t leaf, uint32_t subleaf) {
    const vbts::pmu::CpuidResult r = model.Cpuid(leaf, subleaf);
    return CpuidResult{r.eax, r.ebx, r.ecx, r.edx};
  };
  const CpuState before = st;
  static std::vector<uint8_t>& mem_before = *new std::vector<uint8_t>(kRam);
  std::memcpy(mem_before.data(), mem.bytes().data(), kRam);
  absl::StatusOr<Completion> c = Complete(st, mem, *insn, cpuid);
  if (!c.ok() || !c->retired()) {
    if (!(st == before)) __builtin_trap();  // a fault, not-mine or error changed the state
    if (!OnlyAccessedDirty(mem_before, mem.bytes())) __builtin_trap();  // ... or memory
    if (c.ok()) c->ToString();
    return 0;
  }
  c->ToString();
  if (st.cpl() < 0 || st.cpl() > 3) __builtin_trap();
  if (st.mode() == CpuMode::kLong64 ? !vbts::pmu::IsCanonical(st.rip) : st.rip > 0xFFFFFFFFull) __builtin_trap();
  return 0;
}
