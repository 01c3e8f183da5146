// vpmu_fuzz.cc: libFuzzer target for the virtual PMU (pmu/vpmu.h) driven as
// a guest and the stepping engine drive it.  The first byte picks the CPU
// model (with or without its PMU, LBRs emulated or in the kernel); the rest
// is a sequence of operations: WRMSR/RDMSR of every MSR the model intercepts
// with random values, RDPMC, writes of random bytes into the 64 KiB guest
// RAM (a FakePhysMemory: DS save areas, BTS/PEBS buffers, page tables), a
// change of the paging registers (none, 32-bit, PAE, 4-level, CR3 anywhere),
// event selects of the events vbts counts (with random flags), retired
// instructions and event deliveries (pmu::Branch of every kind, with random
// addresses, CPLs, modes, vectors, registers and memory operands, so that BTS,
// PEBS and LBR records are written through the guest's paging), bulk counts
// and the passthrough DEBUGCTL read-back.  Checks: no crash or UB, Observe
// never fails (bad guest programming is the guest's problem: a dropped
// record and a warning, never an error status), nothing is written outside
// RAM (the fake refuses such writes, and the model must cope with the
// refusal), CountSequential never exceeds SequentialLimit, and a data access
// in bulk that the model refuses (a load the load-latency event needs at its
// own instruction) changes no counter and is refused again.  The model's
// feature MSRs (pmu/feature_msrs.h) take the same WRMSR/RDMSR stream:
// IA32_BIOS_SIGN_ID always reads the model's microcode revision, a locked
// IA32_FEATURE_CONTROL refuses every write and keeps its value, and the
// write-only PRED_CMD/FLUSH_CMD never read.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "pmu/cpu_model.h"
#include "pmu/feature_msrs.h"
#include "pmu/testing/fake_memory.h"
#include "pmu/vpmu.h"

namespace {

using namespace vbts::pmu;
using vbts::fuzz::FuzzInput;

constexpr uint64_t kRam = 64 << 10;

// One of the MSRs the virtual PMU intercepts (n-th over all its ranges), or
// now and then any MSR.
uint32_t PickMsr(FuzzInput& in, const std::vector<MsrRange>& ranges) {
  uint32_t total = 0;
  for (const MsrRange& r : ranges) total += r.last - r.first + 1;
  const uint16_t pick = in.U16();
  if (pick == 0xFFFF) return in.U32();
  uint32_t i = pick % total;
  for (const MsrRange& r : ranges) {
    if (i <= r.last - r.first) return r.first + i;
    i -= r.last - r.first + 1;
  }
  return 0;
}

PagingRegs Paging(FuzzInput& in) {
  PagingRegs p;
  const uint8_t m = in.U8();
  switch (m % 4) {
    case 0: break;                                   // no paging
    case 1: p.cr0 = 0x80000011; break;               // 32-bit
    case 2: p.cr0 = 0x80000011, p.cr4 = 0x20; break;  // PAE
    default: p.cr0 = 0x80000011, p.cr4 = 0x20, p.efer = 0x500; break;  // 4-level
  }
  if (m & 0x04) p.cr4 |= 1u << 4;    // PSE
  if (m & 0x08) p.cr0 |= 1u << 16;   // WP
  if (m & 0x10) p.efer |= 1u << 11;  // NXE
  if (m & 0x20) p.cr4 |= 1u << 20;   // SMEP
  if (m & 0x40) p.cr4 |= 1u << 21;   // SMAP
  p.rflags_ac = m & 0x80;
  p.cr3 = in.Value() & ~uint64_t{0x7};
  p.maxphyaddr = 32 + in.U8() % 21;
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint8_t m = in.U8();
  const std::vector<CpuModel>& models = CpuModels();
  const CpuModel model = (m & 0x80) ? models[m % models.size()].WithoutPmu() : models[m % models.size()];
  VirtualPmuOptions options;
  options.lbr_in_kernel = m & 0x40;
  VirtualPmu pmu(model, options);
  std::vector<MsrRange> msrs = pmu.InterceptedMsrs();
  FeatureMsrs features(model);
  for (const MsrRange& r : FeatureMsrs::Intercepted()) msrs.push_back(r);
  vbts::testing::FakePhysMemory ram(kRam);
  // Bit 5: the stores' fast paths as the machine has them (a translation
  // cache, direct copies, one page refusing direct writes as a page with
  // translated code does); the slow paths otherwise.
  const bool fast = m & 0x20;
  if (fast) ram.EnableDirect(/*refused_write_page=*/1);
  vbts::pmu::TranslationCache cache;
  PagingRegs paging;

  for (int ops = 0; !in.empty() && ops < 4096; ops++) {
    switch (in.U8() % 12) {
      case 0: {  // WRMSR
        const uint32_t msr = PickMsr(in, msrs);
        const uint64_t v = in.Value();
        if (pmu.Owns(msr)) pmu.WriteMsr(msr, v);
        if (FeatureMsrs::Owns(msr)) {
          const MsrResult before = features.Read(msr);
          const MsrResult w = features.Write(msr, v);
          const MsrResult after = features.Read(msr);
          // A locked IA32_FEATURE_CONTROL (3AH) refuses every write and keeps its value.
          if (msr == 0x3A && (before.value & 1) && (!w.gp || after.value != before.value)) __builtin_trap();
          if (msr == 0x8B && after.value != uint64_t{model.microcode_revision} << 32) __builtin_trap();
        }
        break;
      }
      case 1: {  // RDMSR
        const uint32_t msr = PickMsr(in, msrs);
        if (pmu.Owns(msr)) pmu.ReadMsr(msr);
        if (FeatureMsrs::Owns(msr)) {
          const MsrResult r = features.Read(msr);
          if ((msr == 0x49 || msr == 0x10B) && !r.gp) __builtin_trap();  // write-only
        }
        break;
      }
      case 2: {  // bytes into RAM
        const uint64_t at = in.U16() % kRam;
        uint8_t buf[64];
        const size_t n = in.Bytes(buf, std::min<uint64_t>(in.U8() % 65, kRam - at));
        std::copy(buf, buf + n, ram.bytes().begin() + at);
        break;
      }
      case 3: {  // one 64-bit value into RAM (a DS field, a page-table entry)
        const uint64_t at = in.U16() % (kRam - 7);
        const uint64_t v = in.Value();
        if (!ram.WriteLe<uint64_t>(vbts::Gpa(at), v).ok()) __builtin_trap();
        break;
      }
      case 4: {  // a retired instruction or event delivery
        Branch b;
        b.kind = static_cast<BranchKind>(in.U8() % 19);
        b.from = in.Value();
        b.to = in.Value();
        const uint8_t f = in.U8();
        b.cpl_from = f & 3;
        b.cpl_to = (f >> 2) & 3;
        b.mode_from = static_cast<ExecMode>((f >> 4) & 3);
        b.mode_to = static_cast<ExecMode>((f >> 6) & 3);
        b.vector = in.U8();
        const uint8_t g = in.U8();
        b.ia32e = g & 1;
        b.branch_insn = (g & 2) || b.kind != BranchKind::kNone;
        b.mem = (g >> 5) & 7;  // the retired-load and -store events, PEBS data addresses, untaggable
        if (b.mem & 1) b.load_la = in.Value();
        if (b.mem & 2) b.store_la = in.Value();
        const bool tf = g & 4;
        GuestRegs regs;
        regs.rflags = in.U32();
        for (uint64_t& r : regs.gpr) r = (g & 8) ? in.Value() : 0;
        vbts::pmu::LinearMemory lin(ram, paging, fast ? &cache : nullptr);
        // (The registers serve as both `after` and `before`: NetBurst PEBS takes
        // the latter, WantsRegsBefore; without them it drops its record.)
        absl::StatusOr<PmuEffects> fx = pmu.Observe(b, lin, tf, (g & 16) || pmu.WantsRegs() ? &regs : nullptr,
                                                    (g & 16) || pmu.WantsRegsBefore() ? &regs : nullptr);
        if (!fx.ok()) __builtin_trap();  // guest programming never makes Observe fail
        break;
      }
      case 5: {  // instructions counted in bulk
        const uint8_t cpl = in.U8() & 3;
        const uint64_t limit = pmu.SequentialLimit(cpl);
        const uint64_t n = std::min<uint64_t>(limit, in.U16());
        pmu.CountSequential(n, cpl);
        break;
      }
      case 6:  // RDPMC
        pmu.ReadPmc(in.U32());
        break;
      case 7:  // MOV CR0/CR3/CR4, WRMSR EFER
        paging = Paging(in);
        break;
      case 8:  // --vpmu=passthrough: DEBUGCTL read back from the host
        pmu.NoteKernelDebugCtl(in.Value());
        pmu.KernelDebugCtl();
        break;
      case 9: {  // a data access, for the cache events and data sources (any address, size, CPL, kind, owner)
        const uint64_t pa = in.Value();
        const uint32_t n = in.U8();
        const uint8_t f = in.U8();
        pmu.WantsDataAccesses();
        const auto kind = (f & 4) ? VirtualPmu::DataAccessKind::kStore : VirtualPmu::DataAccessKind::kLoad;
        const auto owner = static_cast<VirtualPmu::AccessOwner>((f >> 3) % 3);
        uint64_t before[8];
        for (uint32_t i = 0; i < 8; i++) before[i] = pmu.ReadPmc(i).value;
        const PmuEffects fx = pmu.ObserveDataAccess(pa, n, f & 3, kind, owner);
        if (fx.needs_instruction) {
          // Only a load in bulk is refused, and a refused one changes
          // nothing: no counter moved, no PMI, and the same access is
          // refused again (the caches were only looked at).
          if (owner != VirtualPmu::AccessOwner::kInBulk || kind != VirtualPmu::DataAccessKind::kLoad || fx.pmi)
            __builtin_trap();
          for (uint32_t i = 0; i < 8; i++)
            if (pmu.ReadPmc(i).value != before[i]) __builtin_trap();
          if (!pmu.ObserveDataAccess(pa, n, f & 3, kind, owner).needs_instruction) __builtin_trap();
        }
        break;
      }
      case 10: {  // an event select of an event some model counts, with random flags
        static constexpr uint16_t kEvents[] = {0x00C0, 0x01C0, 0x00C4, 0x003C, 0x013C, 0x01A4,
                                               0x4F2E, 0x412E, 0x010B, 0x020B, 0x81D0, 0x82D0, 0x0151,
                                               0x100B, 0x01CD, 0x01B7, 0x01BB};
        const uint16_t ev = kEvents[in.U8() % (sizeof kEvents / sizeof kEvents[0])];
        const uint32_t msr = 0x186 + in.U8() % 8;
        if (pmu.Owns(msr)) pmu.WriteMsr(msr, (in.Value() & ~uint64_t{0xFFFF}) | ev);
        // The load-latency threshold (MSR_PEBS_LD_LAT_THRESHOLD), mostly within its 16 bits.
        if (in.U8() & 1) pmu.WriteMsr(0x3F6, in.U8() & 1 ? in.U16() : in.Value());
        // An offcore-response mask (MSR_OFFCORE_RSP_0/1).
        if (in.U8() & 1) pmu.WriteMsr(0x1A6 + (in.U8() & 1), in.Value());
        break;
      }
      default:  // what the engine and `vbts run -v` query
        pmu.NeedsObservation();
        pmu.BranchAgnostic();
        pmu.WantsRegs();
        pmu.WantsRegsBefore();
        pmu.CountsMemoryInstructions();
        pmu.TakeWarnings();
        break;
    }
  }
  if (ram.size() != kRam) __builtin_trap();
  return 0;
}
