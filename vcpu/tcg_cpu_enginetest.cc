// The TCG engine (vcpu/tcg_cpu.h) on the completer tests' tiny machine: state
// transfer, event delivery through the guest's IDT, 32-bit paging, and what
// it hands to the machine (ports, MMIO, CPUID, MSRs).  Every expected value
// is derived in the test from the SDM rule it checks.
#include "vcpu/tcg_cpu.h"

#include <unicorn/x86.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <thread>

#include "absl/strings/str_format.h"

#include "pmu/cpu_model.h"
#include "pmu/vpmu.h"
#include "vcpu/completer_test_util.h"

namespace vbts::vcpu::testing {
namespace {

class FakeDevices : public TcgDevices {
 public:
  uint32_t PortIn(uint16_t port, int size) override { return in_value; }
  void PortOut(uint16_t port, int size, uint32_t value) override {
    outs.push_back({port, size, value});
    if (port == 0xf4 && cpu != nullptr) {
      ended = true;
      cpu->RequestStop();
    }
    if (port == 0x70 && cpu != nullptr) cpu->LimitRun(std::chrono::nanoseconds(value));  // a timer armed: ends the run
    if (port == 0x80 && cpu != nullptr) {  // raises the interrupt whose vector is the value
      irqs.push_back(static_cast<uint8_t>(value));
      cpu->InterruptPending();
    }
  }
  uint64_t MmioRead(uint64_t gpa, int size) override {
    mmio.push_back({gpa, size, 0});
    return 0xfeedf00d;
  }
  void MmioWrite(uint64_t gpa, int size, uint64_t value) override {
    mmio.push_back({gpa, size, value});
    if (gpa == 0xfee00300 && cpu != nullptr) {  // as a self-IPI through the ICR: the vector in bits 7:0
      irqs.push_back(static_cast<uint8_t>(value));
      cpu->InterruptPending();
    }
  }
  Msr ReadMsr(uint32_t index, uint64_t& value) override {
    if (cpu != nullptr) skipped_at_rdmsr.push_back(cpu->skipped());
    if (auto it = msrs.find(index); it != msrs.end()) {
      value = it->second;
      return Msr::kDone;
    }
    return TcgCpu::OwnsMsr(index) ? Msr::kCpu : Msr::kGp;
  }
  Msr WriteMsr(uint32_t index, uint64_t value) override {
    if (msrs.contains(index)) {
      msrs[index] = value;
      return Msr::kDone;
    }
    return TcgCpu::OwnsMsr(index) ? Msr::kCpu : Msr::kGp;
  }
  // The feature leaves are the westmere model's (TcgCpu takes QEMU's feature
  // words from them); any other leaf answers a pattern the tests check.
  CpuidResult Cpuid(uint32_t leaf, uint32_t subleaf) override {
    if (leaf == 0 || leaf == 1 || leaf == 0x80000000 || leaf == 0x80000001) {
      const pmu::CpuidResult r = pmu::FindCpuModel("westmere")->Cpuid(leaf, subleaf);
      return {r.eax, r.ebx, r.ecx, r.edx};
    }
    return {leaf + 1, subleaf + 2, 0x33, 0x44};
  }
  std::optional<uint8_t> AcknowledgeInterrupt() override {
    if (irqs.empty()) return std::nullopt;
    uint8_t v = irqs.front();
    irqs.erase(irqs.begin());
    return v;
  }
  bool InterruptPending() override { return !irqs.empty(); }
  bool GuestEndsRun() override { return ended; }
  bool ended = false;  // the debug exit was written
  std::vector<uint8_t> irqs;  // pending external interrupt vectors, in acceptance order

  struct Access {
    uint64_t where;
    int size;
    uint64_t value;
    bool operator==(const Access&) const = default;
  };
  uint32_t in_value = 0;
  std::vector<Access> outs, mmio;
  std::map<uint32_t, uint64_t> msrs = {{0x1d9, 0x1234567890ull}};  // IA32_DEBUGCTL: a machine MSR
  TcgCpu* cpu = nullptr;
  std::vector<uint64_t> skipped_at_rdmsr;  // the engine's skipped() at each RDMSR
};

class TcgCpuTest : public CompleterTest {
 public:
  void SetUp() override {
    Recreate(std::chrono::milliseconds(0));
  }
  // A new engine whose unused code hook lingers for `linger` (0 for the
  // tests below but the one of the lingering: a hook let go goes at once).
  void Recreate(std::chrono::milliseconds linger, bool hook_per_block = true, size_t records = size_t{1} << 20,
                bool drop_block_hook = true, bool count_call = true) {
    cpu_.reset();
    TcgCpu::Config config{mem_.bytes().data(), mem_.bytes().size(), UC_CPU_X86_WESTMERE, &devices_, linger};
    config.hook_per_block = hook_per_block;
    config.count_call = count_call;
    config.drop_block_hook = drop_block_hook;
    config.hook_per_block_records = records;
    auto cpu = TcgCpu::Create(config);
    VBTS_ASSERT_OK(cpu.status());
    cpu_ = std::move(*cpu);
    devices_.cpu = cpu_.get();
  }
  void Code(uint64_t at, std::vector<uint8_t> bytes) {
    std::memcpy(mem_.bytes().data() + at, bytes.data(), bytes.size());
  }
  void NonCanonicalBranches(bool block_hook);
  void CutRuns(bool block_hook);
  void LimitedRun(bool block_hook);
  // Runs from `st` to the next stop; fails the test on an engine error.
  CpuState RunFrom(const CpuState& st, TcgStop::Kind expect = TcgStop::kHalted) {
    VBTS_EXPECT_OK(cpu_->SetState(st));
    auto stop = cpu_->Run(5'000'000);
    VBTS_EXPECT_OK(stop.status());
    if (stop.ok()) {
      EXPECT_EQ(stop->kind, expect);
    }
    return cpu_->GetState();
  }

  // 32-bit paging with CR4.PSE: PDE 0 maps linear 0..4 MiB to itself with a
  // 4-MiB page; PDE 0x100 (linear 0x40000000) points to a page table at
  // kPt whose PTE 0 maps physical 0x100000. The state runs at 0x40000000.
  static constexpr uint64_t kPd = 0x300000, kPt = 0x301000;
  CpuState Paged32AtHighPage() {
    Write32(kPd + 0, 0x00000083);         // P, W, PS
    Write32(kPd + 0x100 * 4, kPt | 0x3);  // P, W
    Write32(kPt + 0, 0x00100003);
    CpuState st = Pm32(0);
    st.cr0 |= kCr0Pg;
    st.cr4 = kCr4Pse;
    st.cr3 = kPd;
    st.rip = 0x40000000;
    return st;
  }

  // Runs `code` at CPL 0 with IF=1; the interrupt `vector` it raises (its
  // handler at 0x600 halts) must be taken before the instruction at
  // `frame_eip` (the frame's EIP), with EAX still the vector.
  void ExpectInterruptBefore(uint8_t vector, uint64_t frame_eip, std::vector<uint8_t> code) {
    Gate32(vector, MakeGate(kIntGate32, kCode32K, 0x600, 0));
    Code(0x600, {0xf4});
    Code(kCodeRip, std::move(code));
    CpuState st = Pm32(0);
    st.rflags = 0x202;
    st = RunFrom(st);
    EXPECT_EQ(st.rip, 0x601u);
    EXPECT_EQ(st.gpr[kRax], vector);
    EXPECT_EQ(Read32(kKernelStack - 12), frame_eip);
  }
  // An OUT to port 80H raises vector 41H (FakeDevices): with IF=1 it is
  // taken right after the OUT, before the `mov eax, 2` at kCodeRip + 10.
  void ExpectInterruptAfterOut() {
    ExpectInterruptBefore(0x41, kCodeRip + 10, {
        0xb8, 0x41, 0x00, 0x00, 0x00,  // mov eax, 41H
        0x66, 0xba, 0x80, 0x00,        // mov dx, 80H
        0xee,                          // out dx, al: raises vector 41H
        0xb8, 0x02, 0x00, 0x00, 0x00,  // mov eax, 2
        0xf4,
    });
  }
  // kCodeRip: mov ecx, 0; +5: mov byte [kCodeRip+13], 0x42 (the low byte of
  // the next instruction's immediate); +12: mov eax, 0x11111111; +17: hlt.
  void LoadStoreIntoItsOwnBlock() {
    const uint32_t imm = static_cast<uint32_t>(kCodeRip + 13);
    Code(kCodeRip, {0xb9, 0x00, 0x00, 0x00, 0x00,
                    0xc6, 0x05, static_cast<uint8_t>(imm), static_cast<uint8_t>(imm >> 8),
                    static_cast<uint8_t>(imm >> 16), static_cast<uint8_t>(imm >> 24), 0x42,
                    0xb8, 0x11, 0x11, 0x11, 0x11,
                    0xf4});
  }

  FakeDevices devices_;
  std::unique_ptr<TcgCpu> cpu_;
};

TEST_F(TcgCpuTest, StateRoundTripsInEveryMode) {
  for (CpuState st : {Pm32(0), Pm32(3), Lm64(0), Lm64(3), Compat32(3), Real()}) {
    st.gpr[kRax] = 0x1111222233334444ull;
    st.gpr[kR15] = 0xf0f0;
    st.cr2 = 0xdead000;
    st.rflags = 0x246 | (st.rflags & kRflagsIf);  // ZF, PF set: the lazily computed flags
    st.interrupt_shadow = true;
    st.nmi_masked = true;
    st.star = 0x0023001000000000ull;
    st.lstar = 0xffffffff81000000ull;
    st.sysenter_cs = 0x8;
    st.sysenter_eip = 0x4000;
    st.kernel_gs_base = 0x5000;
    st.maxphyaddr = 36;
    st.cr8 = 5;
    // QEMU keeps no "unusable" bit: a segment that is not present comes back
    // unusable, as KVM reports a null selector.
    for (Segment* s : {&st.es, &st.cs, &st.ss, &st.ds, &st.fs, &st.gs, &st.ldtr, &st.tr}) s->unusable = !s->present;
    VBTS_ASSERT_OK(cpu_->SetState(st));
    CpuState back = cpu_->GetState();
    EXPECT_EQ(back, st) << st.Dump() << "\n--- back from TCG:\n" << back.Dump();
  }
}

TEST_F(TcgCpuTest, RunsALoopToHlt) {
  // mov ecx, 1000; L: dec ecx; jnz L; hlt
  Code(kCodeRip, {0xb9, 0xe8, 0x03, 0x00, 0x00, 0x49, 0x75, 0xfd, 0xf4});
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRcx], 0u);
  EXPECT_EQ(st.rip, kCodeRip + 9);  // after the HLT
  EXPECT_EQ(cpu_->stats().halts, 1u);
}

TEST_F(TcgCpuTest, IntNFromCpl3SwitchesToTheTssStack) {
  // SDM vol. 3A 6.12.1: an interrupt gate to CPL0 from CPL3 loads SS:ESP from
  // the TSS and pushes SS, ESP, EFLAGS, CS, EIP of the next instruction.
  Gate32(0x80, MakeGate(kIntGate32, kCode32K, 0x600, 3));
  Code(0x600, {0xf4});              // handler: hlt
  Code(kCodeRip, {0xcd, 0x80});     // int 0x80
  CpuState st = RunFrom(Pm32(3));
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(st.cpl(), 0);
  EXPECT_EQ(st.ss.selector, kData32K);
  EXPECT_EQ(st.gpr[kRsp], kKernelStack - 20);
  EXPECT_EQ(Read32(kKernelStack - 20), kCodeRip + 2);
  EXPECT_EQ(Read32(kKernelStack - 16), kCode32U);
  EXPECT_EQ(Read32(kKernelStack - 12), 0x202u);
  EXPECT_EQ(Read32(kKernelStack - 8), kUserStack);
  EXPECT_EQ(Read32(kKernelStack - 4), kData32U);
  EXPECT_EQ(st.rflags & kRflagsIf, 0u);  // an interrupt gate clears IF
}

TEST_F(TcgCpuTest, TranslationTimeIsCountedOnlyWhenCodeIsTranslated) {
  // The guest clock leaves out the host time QEMU spends translating
  // (Machine::ClockNow, docs/tcg-engine.md "Guest time"): TranslationNs
  // grows when new code is translated and not when translated code runs
  // again. mov ecx, 1000; loop $; hlt: first run translates, second reuses.
  Code(kCodeRip, {0xb9, 0xe8, 0x03, 0x00, 0x00, 0xe2, 0xfe, 0xf4});
  cpu_->InvalidateCodeBytes(kCodeRip, 16);
  const uint64_t before = TcgCpu::TranslationNs();
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.rip, kCodeRip + 8);
  const uint64_t translated = TcgCpu::TranslationNs();
  EXPECT_GT(translated, before);
  st = RunFrom(Pm32(0));
  EXPECT_EQ(st.rip, kCodeRip + 8);
  EXPECT_EQ(TcgCpu::TranslationNs(), translated);
}

TEST_F(TcgCpuTest, AFullCodeBufferIsEmptiedBetweenRuns) {
  // Each FlushCode leaves the invalidated translations in QEMU's code buffer;
  // at Config::code_reclaim_bytes (here 64 KiB) Run empties it before it
  // starts, and the guest runs on. Each round below translates three blocks
  // again (to the loop, the loop, the HLT), each a TranslationBlock (~180
  // bytes) and its host code: ~1.1 KB a round measured, so 150 rounds pass
  // 64 KiB at least once (twice as measured).
  cpu_.reset();
  TcgCpu::Config config{mem_.bytes().data(), mem_.bytes().size(), UC_CPU_X86_WESTMERE, &devices_,
                        std::chrono::milliseconds(0)};
  config.code_reclaim_bytes = 64 << 10;
  auto cpu = TcgCpu::Create(config);
  VBTS_ASSERT_OK(cpu.status());
  cpu_ = std::move(*cpu);
  devices_.cpu = cpu_.get();
  // mov ecx, 1000; L: dec ecx; jnz L; hlt
  Code(kCodeRip, {0xb9, 0xe8, 0x03, 0x00, 0x00, 0x49, 0x75, 0xfd, 0xf4});
  for (int round = 0; round < 150; round++) {
    cpu_->FlushCode();
    CpuState st = RunFrom(Pm32(0));
    ASSERT_EQ(st.gpr[kRcx], 0u);
    ASSERT_EQ(st.rip, kCodeRip + 9);
  }
  EXPECT_GE(cpu_->stats().code_reclaims, 1u);
}

TEST_F(TcgCpuTest, Ud2IsDeliveredToTheGuest) {
  // #UD is a fault: the pushed EIP is the UD2 itself (SDM vol. 3A 6.15).
  Gate32(6, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  Code(kCodeRip, {0x0f, 0x0b});
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(Read32(kKernelStack - 12), kCodeRip);
}

TEST_F(TcgCpuTest, MovToCr4OfABitTheCpuLacksIsAGpFaultWithRfInTheFrame) {
  // The fake machine's CPUID leaf 1 is Westmere's (PAE, no XSAVE) and it has
  // no leaf 7 (no SMEP) (vcpu/control_regs.h).  MOV CR4 of PAE retires; of
  // SMEP (bit 20) raises #GP(0) at the MOV, whose frame has EFLAGS.RF set
  // (SDM vol. 3A 17.3.1.1).
  Gate32(13, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  Code(kCodeRip, {0xb8, 0x20, 0, 0, 0, 0x0f, 0x22, 0xe0,    // mov eax, 20H; mov cr4, eax
                  0xb8, 0, 0, 0x10, 0, 0x0f, 0x22, 0xe0});  // mov eax, 100000H; mov cr4, eax
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(st.cr4, 0x20u);
  EXPECT_EQ(Read32(kKernelStack - 16), 0u);              // error code
  EXPECT_EQ(Read32(kKernelStack - 12), kCodeRip + 13);   // the second MOV CR4
  EXPECT_EQ(Read32(kKernelStack - 4) & kRflagsRf, kRflagsRf);
}

TEST_F(TcgCpuTest, PushfClearsRfInTheImage) {
  // IRETD loads EFLAGS with RF set; the PUSHFD it returns to pushes the image
  // with RF (and VM) clear (SDM vol. 2B PUSHF), though RF is still set while
  // that PUSHFD runs.
  const uint32_t target = static_cast<uint32_t>(kCodeRip + 15);
  Code(kCodeRip, {0x9c,                                      // pushfd
                  0x81, 0x0c, 0x24, 0x00, 0x00, 0x01, 0x00,  // or dword [esp], 10000H (RF)
                  0x0e,                                      // push cs
                  0x68, static_cast<uint8_t>(target), static_cast<uint8_t>(target >> 8),
                  static_cast<uint8_t>(target >> 16), static_cast<uint8_t>(target >> 24),  // push target
                  0xcf,                                      // iretd
                  0x9c, 0x5b, 0xf4});                        // target: pushfd; pop ebx; hlt
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.rip, kCodeRip + 18);
  EXPECT_EQ(st.gpr[kRbx] & 0x30000, 0u);
  EXPECT_NE(st.gpr[kRbx] & 0x2, 0u);  // bit 1 reads as 1: a real image
}

TEST_F(TcgCpuTest, Cr8HoldsFourBitsAndFaultsOnMore) {
  // Without an interrupt controller behind it (the fake machine), CR8 is a
  // plain 4-bit register; bits 63:4 are reserved: #GP(0).
  Gate64(13, MakeGate(kIntGate32, kCode64K, 0x600, 0));
  Code(0x600, {0xf4});
  Code(kCodeRip, {0x48, 0xc7, 0xc0, 0x05, 0, 0, 0,   // mov rax, 5
                  0x44, 0x0f, 0x22, 0xc0,             // mov cr8, rax
                  0x44, 0x0f, 0x20, 0xc3,             // mov rbx, cr8
                  0x48, 0xc7, 0xc0, 0x10, 0, 0, 0,   // mov rax, 10H
                  0x44, 0x0f, 0x22, 0xc0});           // mov cr8, rax: #GP
  CpuState st = RunFrom(Lm64(0));
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(st.gpr[kRbx], 5u);
}

TEST_F(TcgCpuTest, PageFaultUnder32BitPagingHasCr2AndErrorCode) {
  // 32-bit paging (CR4.PSE): PDE 0 maps 0..4 MiB with a 4-MiB page; PDE 0x100
  // (linear 0x40000000) points to a page table whose PTE 0 maps physical
  // 0x100000.  The code there reads linear 0x80000000, whose PDE is not
  // present: #PF with CR2 = 0x80000000 and error code 0 (P=0, read,
  // supervisor; SDM vol. 3A 4.7), EIP = the MOV.
  Code(0x100000, {0xa1, 0x00, 0x00, 0x00, 0x80});  // mov eax, [0x80000000]
  Gate32(14, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  CpuState st = RunFrom(Paged32AtHighPage());
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(st.cr2, 0x80000000u);
  EXPECT_EQ(Read32(kKernelStack - 16), 0u);           // error code
  EXPECT_EQ(Read32(kKernelStack - 12), 0x40000000u);  // EIP of the MOV
  EXPECT_EQ(Read32(0x301000) & 0x20, 0x20u);          // the PTE's accessed bit (fetch)
}

TEST_F(TcgCpuTest, TheDataAccessHookSeesThePagesQemusTlbMapsUntilTheFlush) {
  // 32-bit paging as Paged32AtHighPage; PTE 1 maps linear 0x40001000 to
  // physical 0x200000. The code loads from there, points PTE 1 at 0x210000
  // with no INVLPG, loads again (QEMU's TLB, like a CPU's, still maps the old
  // page: EBX = the old page's word), then INVLPGs and loads a third time
  // (ECX = the new page's word). The hook reports the physical page each load
  // read: 0x200000, 0x200000, 0x210000 (a fresh walk at the second load
  // would have named 0x210000, which QEMU did not read).
  //   mov eax, [0x40001000]; mov dword [0x301004], 0x00210003;
  //   mov ebx, [0x40001000]; invlpg [0x40001000]; mov ecx, [0x40001000]; hlt
  Code(0x100000, {0xa1, 0x00, 0x10, 0x00, 0x40, 0xc7, 0x05, 0x04, 0x10, 0x30, 0x00, 0x03, 0x00, 0x21, 0x00,
                  0x8b, 0x1d, 0x00, 0x10, 0x00, 0x40, 0x0f, 0x01, 0x3d, 0x00, 0x10, 0x00, 0x40,
                  0x8b, 0x0d, 0x00, 0x10, 0x00, 0x40, 0xf4});
  CpuState st = Paged32AtHighPage();
  Write32(kPt + 4, 0x00200003);
  Write32(0x200000, 0x11111111);
  Write32(0x210000, 0x22222222);
  std::vector<std::pair<uint64_t, bool>> seen;
  cpu_->SetDataAccessHook([&](uint64_t pa, uint32_t, uint8_t, bool write, TcgCpu::AccessOwner) {
    seen.emplace_back(pa, write);
    return TcgCpu::AccessVerdict{};
  });
  st = RunFrom(st);
  EXPECT_EQ(st.gpr[kRax], 0x11111111u);
  EXPECT_EQ(st.gpr[kRbx], 0x11111111u);
  EXPECT_EQ(st.gpr[kRcx], 0x22222222u);
  const std::vector<std::pair<uint64_t, bool>> want = {
      {0x200000, false}, {kPt + 4, true}, {0x200000, false}, {0x210000, false}};
  EXPECT_EQ(seen, want);
  // Walks: the first load, the store, and the load after the INVLPG; the
  // second load's came from the cache.
  EXPECT_EQ(cpu_->stats().data_walks, 3u);
}

TEST_F(TcgCpuTest, LongModeInt3PushesA64BitFrameOnTheIstStack) {
  // SDM vol. 3A 6.14.2/6.14.5: a 64-bit gate with IST=1 loads RSP from IST1,
  // aligns it to 16 and pushes SS, RSP, RFLAGS, CS, RIP (8 bytes each).
  Gate64(3, MakeGate(kIntGate32, kCode64K, 0x600, 3, true, /*ist=*/1));
  Code(0x600, {0xf4});
  Code(kCodeRip, {0xcc});
  CpuState st = RunFrom(Lm64(3));
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(st.gpr[kRsp], kIstStack - 40);
  EXPECT_EQ(Read64(kIstStack - 40), kCodeRip + 1);
  EXPECT_EQ(Read64(kIstStack - 32), kCode64U);
  EXPECT_EQ(Read64(kIstStack - 16), kUserStack);
  EXPECT_EQ(Read64(kIstStack - 8), kData32U);
}

TEST_F(TcgCpuTest, PortsCpuidAndMmioGoToTheMachine) {
  devices_.in_value = 0xab;
  Code(kCodeRip, {
      0xb8, 0x07, 0x00, 0x00, 0x00,        // mov eax, 7
      0xb9, 0x01, 0x00, 0x00, 0x00,        // mov ecx, 1
      0x0f, 0xa2,                          // cpuid
      0x89, 0xc6,                          // mov esi, eax
      0xe4, 0x60,                          // in al, 0x60
      0x89, 0xc7,                          // mov edi, eax
      0x8b, 0x2d, 0x30, 0x00, 0xe0, 0xfe,  // mov ebp, [0xfee00030]
      0xe6, 0xf4,                          // out 0xf4, al  (stops the run)
  });
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  EXPECT_EQ(st.gpr[kRsi], 8u);        // leaf + 1
  EXPECT_EQ(st.gpr[kRbx], 3u);        // subleaf + 2
  EXPECT_EQ(st.gpr[kRdi], 0xabu);     // AL from the port over CPUID's EAX = 8
  EXPECT_EQ(st.gpr[kRbp], 0xfeedf00du);
  EXPECT_THAT(devices_.mmio, ::testing::ElementsAre(FakeDevices::Access{0xfee00030, 4, 0}));
  EXPECT_THAT(devices_.outs, ::testing::ElementsAre(FakeDevices::Access{0xf4, 1, 0xab}));
}

TEST_F(TcgCpuTest, MsrsGoToTheMachineOrTheCpuOrRaiseGp) {
  // A machine MSR reads the machine's value; EFER is the CPU's own; an MSR
  // nobody implements raises #GP(0) at the RDMSR (SDM vol. 2 RDMSR).
  Gate32(13, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  Code(kCodeRip, {
      0xb9, 0xd9, 0x01, 0x00, 0x00,  // mov ecx, 0x1d9
      0x0f, 0x32,                    // rdmsr
      0x89, 0xc6,                    // mov esi, eax
      0x89, 0xd7,                    // mov edi, edx
      0xb8, 0x01, 0x00, 0x00, 0x00,  // mov eax, 1
      0x31, 0xd2,                    // xor edx, edx
      0x0f, 0x30,                    // wrmsr  (DEBUGCTL := 1)
      0xb9, 0x80, 0x00, 0x00, 0xc0,  // mov ecx, 0xc0000080
      0x0f, 0x32,                    // rdmsr  (EFER)
      0x89, 0xc5,                    // mov ebp, eax
      0xb9, 0x45, 0x23, 0x01, 0x00,  // mov ecx, 0x12345
      0x0f, 0x32,                    // rdmsr  -> #GP
  });
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRsi], 0x34567890u);
  EXPECT_EQ(st.gpr[kRdi], 0x12u);
  EXPECT_EQ(devices_.msrs[0x1d9], 1u);
  EXPECT_EQ(st.gpr[kRbp], 0u);  // EFER of this pm32 state
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(Read32(kKernelStack - 16), 0u);              // error code 0
  EXPECT_EQ(Read32(kKernelStack - 12), kCodeRip + 34);  // EIP of the faulting RDMSR
}

TEST_F(TcgCpuTest, IntNToAGateAboveCplFaultsAtTheInt) {
  // SDM vol. 3A 6.12.1.1: INT n with gate DPL < CPL raises #GP with the IDT
  // entry as error code (vector*8 + IDT flag 2) and EIP = the INT n.
  // (Unicorn moves EIP past an INT before delivering it; vbts moves it back.)
  Gate32(0x42, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Gate32(13, MakeGate(kIntGate32, kCode32K, 0x700, 0));
  Code(0x700, {0xf4});
  Code(kCodeRip, {0x90, 0xcd, 0x42});  // nop; int 0x42
  CpuState st = RunFrom(Pm32(3));
  EXPECT_EQ(st.rip, 0x701u);
  EXPECT_EQ(Read32(kKernelStack - 24), 0x42u * 8 + 2);  // error code
  EXPECT_EQ(Read32(kKernelStack - 20), kCodeRip + 1);   // EIP of the INT
}

TEST_F(TcgCpuTest, IntNToAGateAboveCplInLongModeHasTheArchitecturalErrorCode) {
  // The same in IA-32e mode: the error code is still vector*8 + 2 (the
  // selector-index format of SDM vol. 3A 6.13), not QEMU's vector*16 + 2.
  Gate64(0x42, MakeGate(kIntGate32, kCode64K, 0x600, 0));
  Gate64(13, MakeGate(kIntGate32, kCode64K, 0x700, 0));
  Code(0x700, {0xf4});
  Code(kCodeRip, {0xcd, 0x42});
  CpuState st = RunFrom(Lm64(3));
  EXPECT_EQ(st.rip, 0x701u);
  EXPECT_EQ(Read64(kKernelStack - 48), 0x42u * 8 + 2);
  EXPECT_EQ(Read64(kKernelStack - 40), kCodeRip);
}

TEST_F(TcgCpuTest, IcebpDeliversATrapLikeDebugException) {
  // INT1 (F1) delivers #DB as a trap: the pushed EIP is the next
  // instruction, and no gate DPL check applies, so a DPL0 gate serves CPL3
  // (SDM vol. 2 "INT n/INTO/INT3/INT1": INT1 is not a software interrupt).
  Gate32(1, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  Code(kCodeRip, {0xf1});
  CpuState st = RunFrom(Pm32(3));
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(Read32(kKernelStack - 20), kCodeRip + 1);
  EXPECT_EQ(Read32(kKernelStack - 16), kCode32U);
}

TEST_F(TcgCpuTest, CodeBreakpointRightAfterMovSsIsSuppressedButNotAfterSti) {
  // Intel (SDM vol. 3A 6.8.3; kvm-unit-tests emulator "#DB suppressed after
  // MOV SS"): no instruction breakpoint for the instruction in a MOV SS
  // shadow.  STI's shadow does not suppress it.
  Gate32(1, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  const uint64_t db[4] = {kCodeRip + 4, 0, 0, 0};
  Code(kCodeRip, {0x8c, 0xd0,    // mov eax, ss
                  0x8e, 0xd0,    // mov ss, eax
                  0x90,          // nop: DR0
                  0xf4});
  cpu_->SetDebugRegs(db, 0, 0x401);  // L0, execute, 1 byte
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.rip, kCodeRip + 6);   // the HLT after the NOP: no #DB
  const uint64_t db_sti[4] = {kCodeRip + 1, 0, 0, 0};
  Code(kCodeRip, {0xfb,          // sti
                  0x90,          // nop: DR0
                  0xf4});
  cpu_->FlushCode();  // new code where the first ran
  cpu_->SetDebugRegs(db_sti, 0, 0x401);
  st = RunFrom(Pm32(0));
  EXPECT_EQ(st.rip, 0x601u);          // the #DB handler's HLT
  EXPECT_EQ(Read32(kKernelStack - 12), kCodeRip + 1);  // a fault before the NOP
  uint64_t dr[4], dr6 = 0, dr7 = 0;
  cpu_->GetDebugRegs(dr, dr6, dr7);
  EXPECT_EQ(dr6 & 0xF, 1u);           // B0
}

TEST_F(TcgCpuTest, GuestInstructionBreakpointsAreQemusOwnNotHooks) {
  // DR0 on the NOP in the middle of a loop's block (mov ecx, 3 / L: inc ebx /
  // nop / dec ecx / jnz L / hlt): three #DB faults before it (SDM vol. 3B
  // 17.3.1.1), each handler returning with RF set in the frame so that the
  // NOP then runs once (inc edx / or dword [esp+8], 10000H / iretd). Only the
  // NOP leaves QEMU's code: QEMU's own breakpoint at DR0's address (BP_CPU),
  // no code hook, so the runs need no block hook either.
  Gate32(1, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0x42,                                            // inc edx
               0x81, 0x4c, 0x24, 0x08, 0x00, 0x00, 0x01, 0x00,  // or dword [esp+8], 0x10000
               0xcf});                                          // iretd
  Code(kCodeRip, {0xb9, 0x03, 0x00, 0x00, 0x00,  // mov ecx, 3
                  0x43,                          // L: inc ebx
                  0x90,                          // nop: DR0
                  0x49,                          // dec ecx
                  0x75, 0xfb,                    // jnz L
                  0xf4});
  const uint64_t db[4] = {kCodeRip + 6, 0, 0, 0};
  cpu_->SetDebugRegs(db, 0, 0x401);  // L0, execute, 1 byte
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.rip, kCodeRip + 11);  // after the HLT
  EXPECT_EQ(st.gpr[kRdx], 3u);       // three #DBs
  EXPECT_EQ(st.gpr[kRbx], 3u);
  EXPECT_EQ(cpu_->stats().breakpoints, 3u);
  EXPECT_EQ(cpu_->stats().code_hook_adds, 0u);
  EXPECT_EQ(cpu_->stats().guest_exec_hook_syncs, 1u);
  EXPECT_EQ(cpu_->stats().runs_without_block_hook, 1u);
  EXPECT_EQ(cpu_->stats().guest_exec_passes, 0u);  // RF from the frame: no exit at the NOP
  uint64_t dr[4], dr6 = 0, dr7 = 0;
  cpu_->GetDebugRegs(dr, dr6, dr7);
  EXPECT_EQ(dr6 & 0xF, 1u);  // B0
  // DR7 off: the loop runs without #DB; the breakpoint stays in QEMU (its
  // exit reads DR7 and lets the NOP run, with RF), so that turning the same
  // breakpoint on again retranslates nothing.
  cpu_->SetDebugRegs(db, 0, 0x400);
  st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRdx], 0u);
  EXPECT_EQ(st.rflags & 0x10000, 0u);  // RF cleared after each NOP
  EXPECT_EQ(cpu_->stats().breakpoints, 3u);
  EXPECT_EQ(cpu_->stats().guest_exec_passes, 3u);
  cpu_->SetDebugRegs(db, 0, 0x401);
  st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRdx], 3u);
  EXPECT_EQ(cpu_->stats().breakpoints, 6u);
  EXPECT_EQ(cpu_->stats().guest_exec_hook_syncs, 1u);
  // A new address (the dec) adds its breakpoint: retranslated once more.
  const uint64_t db_dec[4] = {kCodeRip + 7, 0, 0, 0};
  cpu_->SetDebugRegs(db_dec, 0, 0x401);
  st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRdx], 3u);
  EXPECT_EQ(cpu_->stats().breakpoints, 9u);
  EXPECT_EQ(cpu_->stats().guest_exec_hook_syncs, 2u);
  EXPECT_EQ(cpu_->stats().code_hook_adds, 0u);
}

TEST_F(TcgCpuTest, GuestInstructionBreakpointsPastTheirBoundStartOver) {
  // 70 NOPs and a HLT; DR0 on NOP i in run i (i = 0..69): each run takes one
  // #DB (the handler counts in EDX and sets RF). Each new address adds a
  // breakpoint in QEMU; the 65th finds 64 (kMaxGuestExecHooks) and starts
  // over with its own, so that runs 65..69 add to that: the breakpoint fires
  // every time, and the ones kept from earlier runs (off in DR7) let their
  // NOPs run.
  Gate32(1, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0x42, 0x81, 0x4c, 0x24, 0x08, 0x00, 0x00, 0x01, 0x00, 0xcf});  // inc edx; or [esp+8], RF; iretd
  std::vector<uint8_t> nops(70, 0x90);
  nops.push_back(0xf4);
  Code(kCodeRip, nops);
  for (uint64_t i = 0; i < 70; i++) {
    const uint64_t db[4] = {kCodeRip + i, 0, 0, 0};
    cpu_->SetDebugRegs(db, 0, 0x401);
    CpuState st = RunFrom(Pm32(0));
    ASSERT_EQ(st.gpr[kRdx], 1u) << i;
    ASSERT_EQ(st.rip, kCodeRip + 71) << i;
  }
  EXPECT_EQ(cpu_->stats().guest_exec_hook_syncs, 70u);
  EXPECT_EQ(cpu_->stats().breakpoints, 70u);
}

TEST_F(TcgCpuTest, NullSsWithRplOtherThanCplFaultsInLongMode) {
  // SDM vol. 2B MOV: in 64-bit mode at CPL < 3 a null selector loads SS only
  // if its RPL is the CPL; otherwise #GP(0) (kvm-unit-tests emulator64
  // "mov null, %ss (with ss.rpl != cpl)"; QEMU 5.0 loads it).
  Gate64(13, MakeGate(kIntGate32, kCode64K, 0x600, 0, true, /*ist=*/1));
  Code(0x600, {0xf4});
  Code(kCodeRip, {0xb8, 0x03, 0, 0, 0,  // mov eax, 3
                  0x8e, 0xd0,           // mov ss, eax: #GP(0)
                  0xf4});
  CpuState st = RunFrom(Lm64(0));
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(Read64(kIstStack - 48), 0u);              // error code
  EXPECT_EQ(Read64(kIstStack - 40), kCodeRip + 5);    // the MOV SS
  // RPL = CPL = 0: the null selector loads.
  Code(kCodeRip, {0xb8, 0x00, 0, 0, 0, 0x8e, 0xd0, 0xf4});
  cpu_->FlushCode();
  st = RunFrom(Lm64(0));
  EXPECT_EQ(st.rip, kCodeRip + 8);
  EXPECT_EQ(st.ss.selector, 0u);
}

TEST_F(TcgCpuTest, IcebpAfterPrefixesIsStillIcebp) {
  // `cs cs int1` (kvm-unit-tests' debug.flat): prefixes do not make ICEBP
  // invalid; the trap's EIP is after all three bytes.
  Gate32(1, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  Code(kCodeRip, {0x2e, 0x2e, 0xf1});
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(Read32(kKernelStack - 12), kCodeRip + 3);
  EXPECT_EQ(cpu_->stats().icebp, 1u);
}

TEST_F(TcgCpuTest, ATaskSwitchTakesAConformingCodeSegmentWithDplBelowRpl) {
  // An LCALL to a TSS whose CS is the conforming DPL-0 segment with RPL 3
  // (kConfK | 3): the hardware (and KVM's emulator) loads it, the new task
  // runs at CPL 3; QEMU 5.0 alone would raise #TS(38H) (docs/tcg-engine.md,
  // "Task switches"; kvm-unit-tests' 32-bit taskswitch2).
  constexpr uint64_t kNewTss = 0x3800;
  Put(18, MakeSystemDescriptor(kTss32Available, kNewTss, 0x67));
  constexpr uint16_t kNewTssSel = 18 * 8;
  Write32(kNewTss + 0x20, 0x700);               // EIP
  Write32(kNewTss + 0x24, 0x3002);              // EFLAGS: IOPL 3 (its OUT ends the run)
  Write32(kNewTss + 0x38, kUserStack);          // ESP
  Write16(kNewTss + 0x48, kData32U);            // ES
  Write16(kNewTss + 0x4C, kConfK | 3);          // CS
  Write16(kNewTss + 0x50, kData32U);            // SS
  Write16(kNewTss + 0x54, kData32U);            // DS
  Code(0x700, {0x66, 0x8c, 0xc8,                // mov ax, cs
               0xe6, 0xf4});                    // out 0xf4, al: the run ends
  Code(kCodeRip, {0x9a, 0, 0, 0, 0, kNewTssSel, 0});  // call 90H:0
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  EXPECT_EQ(st.rip, 0x705u);
  EXPECT_EQ(st.gpr[kRax] & 0xFFFF, kConfK | 3u);
  EXPECT_EQ(st.cs.selector, kConfK | 3u);
  EXPECT_EQ(st.cs.dpl, 3);  // the CPL: vbts's convention for a conforming CS (CpuState::cpl())
  EXPECT_EQ(st.cpl(), 3);
  EXPECT_EQ(st.tr.selector, kNewTssSel);
  EXPECT_EQ(Read16(kNewTss), kTssSel);          // the back link
  EXPECT_EQ(Read32(kTss + 0x20), kCodeRip + 7);  // the old task resumes after the LCALL
  EXPECT_EQ(cpu_->stats().task_conforming_cs, 1u);
}

TEST_F(TcgCpuTest, AConformingCodeSegmentRunsAtTheCallersCpl) {
  // A far CALL from ring 3 into the conforming DPL-0 segment keeps CPL 3
  // (SDM vol. 3A 5.8.1.2): the state says so in CS.DPL, vbts's CPL
  // (CpuState::cpl()), although QEMU caches the descriptor's DPL 0.
  Code(0x700, {0xe6, 0xf4});  // out 0xf4, al (IOPL 3): the run ends
  Code(kCodeRip, {0x9a, 0x00, 0x07, 0, 0, kConfK, 0});  // call 38H:700H
  CpuState st = Pm32(3);
  st.rflags |= 0x3000;
  st = RunFrom(st, TcgStop::kRequested);
  EXPECT_EQ(st.rip, 0x702u);
  EXPECT_EQ(st.cs.selector, kConfK | 3u);  // RPL = CPL
  EXPECT_EQ(st.cs.dpl, 3);
  EXPECT_EQ(st.cpl(), 3);
}

TEST_F(TcgCpuTest, HltUnderTfIsFollowedByItsSingleStepTrap) {
  // SDM vol. 3B 17.3.1.4: an instruction that began with TF=1 is followed by
  // a single-step trap, HLT too, once it completes; the machine resumes the
  // CPU and the #DB (DR6.BS) comes first, with the EIP after the HLT.
  Gate32(1, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  Code(kCodeRip, {0xf4});
  CpuState st = Pm32(0);
  st.rflags |= kRflagsTf;
  st = RunFrom(st);
  EXPECT_EQ(st.rip, kCodeRip + 1);  // halted after the guest's HLT
  auto stop = cpu_->Run(5'000'000);
  VBTS_ASSERT_OK(stop.status());
  EXPECT_EQ(stop->kind, TcgStop::kHalted);
  EXPECT_EQ(cpu_->GetState().rip, 0x601u);  // the #DB handler's HLT
  EXPECT_EQ(Read32(kKernelStack - 12), kCodeRip + 1);
  EXPECT_EQ(Read32(kKernelStack - 4) & kRflagsTf, kRflagsTf);  // the frame's EFLAGS: TF as it was
  uint64_t db[4], dr6 = 0, dr7 = 0;
  cpu_->GetDebugRegs(db, dr6, dr7);
  EXPECT_EQ(dr6 & (1u << 14), 1u << 14);
}

TEST_F(TcgCpuTest, IretToRing3KeepsTheGsBaseInLongMode) {
  // IRETQ from CPL0 to CPL3 with GS holding a DPL0 data selector: the
  // selector becomes null (SDM vol. 2 IRET: DPL < new CPL), the base, which
  // in IA-32e mode is IA32_GS_BASE's, stays (kvm-unit-tests' per-CPU data).
  // The ring-3 code's UD2 brings the CPU back to a ring-0 handler.
  Gate64(6, MakeGate(kIntGate32, kCode64K, 0x600, 0));
  Code(0x600, {0xf4});
  Code(0x200, {0x0f, 0x0b});        // ring 3: ud2
  Code(kCodeRip, {0x48, 0xcf});     // iretq
  CpuState st = Lm64(0);
  st.gs = Seg(kData32K);
  st.gs.base = 0x12345000;
  st.gpr[kRsp] = kKernelStack - 40;
  Frame(kKernelStack - 40, {0x200, kCode64U, 0x2, kUserStack, kData32U}, 8);
  st = RunFrom(st);
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(st.gs.selector, 0u);
  EXPECT_EQ(st.gs.base, 0x12345000u);
}

TEST_F(TcgCpuTest, FpuStateRoundTripsAndIsTheGuests) {
  // FXSAVE layout in, the same out; and the guest sees it: ST(0) = 42.0
  // (80-bit: mantissa 0xA8 << 56, exponent 0x4004) with TOP = 5, so
  // `fistp dword [0x800]` stores 42 and pops (TOP = 6); `movd eax, xmm3`
  // reads XMM3's low dword.  CR4.OSFXSR lets SSE run.
  FpuState f;
  f.fsw = 5u << 11;
  f.ftw = 1u << 5;  // physical register 5 = ST(0) in use
  const uint64_t mant = 0xA8ull << 56;
  std::memcpy(f.st[0], &mant, 8);
  f.st[0][8] = 0x04;
  f.st[0][9] = 0x40;
  for (int b = 0; b < 16; b++) f.xmm[3][b] = static_cast<uint8_t>(0xA0 + b);
  f.mxcsr = 0x1F80;
  CpuState st = Pm32(0);
  st.cr4 |= 1u << 9;  // OSFXSR
  VBTS_ASSERT_OK(cpu_->SetState(st));
  cpu_->SetFpu(f);
  EXPECT_EQ(cpu_->GetFpu(), f);
  Code(kCodeRip, {0xdb, 0x1d, 0x00, 0x08, 0x00, 0x00,  // fistp dword [0x800]
                  0x66, 0x0f, 0x7e, 0xd8,              // movd eax, xmm3
                  0xf4});
  auto stop = cpu_->Run(5'000'000);
  VBTS_ASSERT_OK(stop.status());
  EXPECT_EQ(stop->kind, TcgStop::kHalted);
  EXPECT_EQ(Read32(0x800), 42u);
  EXPECT_EQ(cpu_->GetState().gpr[kRax], 0xA3A2A1A0u);
  const FpuState after = cpu_->GetFpu();
  EXPECT_EQ((after.fsw >> 11) & 7, 6);
  EXPECT_EQ(after.ftw, 0u);  // nothing left on the stack
}

TEST_F(TcgCpuTest, AnOutThatEndsTheRunStopsRightAfterIt) {
  // The debug exit (port F4H) asks the run to end: nothing after the OUT runs,
  // although it is in the same translated block.
  Code(kCodeRip, {0xe6, 0xf4,                    // out 0xf4, al
                  0xbb, 0x07, 0x00, 0x00, 0x00,  // mov ebx, 7
                  0xf4});
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  EXPECT_EQ(st.rip, kCodeRip + 2);
  EXPECT_EQ(st.gpr[kRbx], 0u);
  EXPECT_EQ(cpu_->stats().outs_left, 1u);
}

TEST_F(TcgCpuTest, AnInterruptAnOutRaisesComesAtTheNextBoundary) {
  // With IF=1 the interrupt a port write raises is taken right after the OUT
  // (SDM vol. 3A 6.6), not at the end of its block: frame EIP = the
  // `mov eax, 2` after it, EAX still the vector.
  ExpectInterruptAfterOut();
  EXPECT_EQ(cpu_->stats().outs_left, 1u);
}

TEST_F(TcgCpuTest, AnInterruptAStoreToADeviceRaisesComesAtTheNextBoundary) {
  // As for OUT: the self-IPI a store to the LAPIC's ICR raises is taken right
  // after the store (frame EIP = the `mov eax, 2` after it), not at the end
  // of the block.
  ExpectInterruptBefore(0x42, kCodeRip + 10, {
      0xb8, 0x42, 0x00, 0x00, 0x00,        // mov eax, 42H
      0xa3, 0x00, 0x03, 0xe0, 0xfe,        // mov [0xfee00300], eax
      0xb8, 0x02, 0x00, 0x00, 0x00,        // mov eax, 2
      0xf4,
  });
  EXPECT_EQ(cpu_->stats().stores_left, 1u);
}

TEST_F(TcgCpuTest, AnInterruptWaitsForTheStiShadow) {
  // SDM vol. 3A 6.8.3: after STI sets IF, interrupts stay inhibited until the
  // end of the next instruction.  Pending from the start with IF=0, the
  // interrupt arrives after `mov eax, 2`: frame EIP = the `mov eax, 3`.
  devices_.irqs = {0x40};
  Gate32(0x40, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  Code(kCodeRip, {
      0xb8, 0x01, 0x00, 0x00, 0x00,  // mov eax, 1
      0xfb,                          // sti
      0xb8, 0x02, 0x00, 0x00, 0x00,  // mov eax, 2
      0xb8, 0x03, 0x00, 0x00, 0x00,  // mov eax, 3
      0xf4,
  });
  CpuState st = Pm32(0);
  st.rflags = 0x2;
  cpu_->InterruptPending();
  st = RunFrom(st);
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(st.gpr[kRax], 2u);
  EXPECT_EQ(Read32(kKernelStack - 12), kCodeRip + 11);
  EXPECT_EQ(Read32(kKernelStack - 4), 0x202u);  // EFLAGS with IF
  EXPECT_EQ(cpu_->stats().interrupts, 1u);
  EXPECT_TRUE(devices_.irqs.empty());
}

TEST_F(TcgCpuTest, NmiIgnoresIfAndIsBlockedUntilIret) {
  // SDM vol. 3A 6.7.1: an NMI is taken with IF=0; further NMIs are blocked
  // until the next IRET.  The handler counts in ECX and IRETs; two NMIs
  // queued together are one pending NMI (the request is a latch), so one
  // handler run, then the code halts.
  Gate32(2, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0x41, 0xcf});  // inc ecx; iret
  Code(kCodeRip, {0x90, 0xf4});
  CpuState st = Pm32(0);
  st.rflags = 0x2;
  cpu_->QueueNmi();
  cpu_->QueueNmi();
  st = RunFrom(st);
  EXPECT_EQ(st.gpr[kRcx], 1u);
  EXPECT_EQ(st.rip, kCodeRip + 2);
  EXPECT_EQ(cpu_->stats().nmis, 1u);
}

TEST_F(TcgCpuTest, RemovingTheInstructionHookLeavesCr2AndTheNextPageFaultAlone) {
  // Code at linear 0x40000000 (PDE 0x100 -> PT -> physical 0x100000) runs
  // with the instruction hook, so Unicorn records that linear page as a
  // region translated with the hook. The guest then unmaps it (PDE 0x100
  // cleared; the state is set again, which flushes QEMU's TLB) and vbts
  // removes the hook (as when a recording stops). Unicorn 2.0.1's removal
  // walks the page tables for 0x40000000 and faults (DeleteHook): before
  // the fix CR2 read 0x40000000 afterwards, and QEMU's exception in flight
  // stayed #PF, so the guest's next #PF became a #DF (vector 8, handler at
  // 0x700). Expected: CR2 keeps the value the guest had (0x1234), and the
  // read of unmapped 0x80000000 at 0x100000 is an ordinary #PF: handler
  // 0x600, CR2 = 0x80000000, error code 0.
  Code(0x100000, {0xf4});               // hlt (run at 0x40000000)
  Code(0x101000, {0xa1, 0x00, 0x00, 0x00, 0x80});  // mov eax, [0x80000000]
  Gate32(14, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Gate32(8, MakeGate(kIntGate32, kCode32K, 0x700, 0));
  Code(0x600, {0xf4});
  Code(0x700, {0xf4});
  int hooked = 0;
  cpu_->SetInstructionHook([&](uint64_t) { hooked++; });
  CpuState st = RunFrom(Paged32AtHighPage());
  EXPECT_EQ(st.rip, 0x40000001u);
  EXPECT_EQ(hooked, 1);
  Write32(kPd + 0x100 * 4, 0);
  st.cr2 = 0x1234;
  st.rip = 0x101000;
  VBTS_ASSERT_OK(cpu_->SetState(st));
  cpu_->SetInstructionHook(nullptr);
  EXPECT_EQ(cpu_->GetState().cr2, 0x1234u);
  st = RunFrom(cpu_->GetState());
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(st.cr2, 0x80000000u);
  EXPECT_EQ(Read32(kKernelStack - 16), 0u);        // error code
  EXPECT_EQ(Read32(kKernelStack - 12), 0x101000u);  // EIP of the MOV
}

TEST_F(TcgCpuTest, AnUnusedDataAccessHookLingersUncalled) {
  // The data-access hook is compiled into the translations as well: let go,
  // it stays for Config::code_hook_linger (here 200 ms), calling nothing,
  // so that counters turned off and on around each PMI cost no
  // retranslation. mov eax, [0x5000]; mov [0x5004], eax; hlt
  Recreate(std::chrono::milliseconds(200));
  Code(kCodeRip, {0xa1, 0x00, 0x50, 0x00, 0x00, 0xa3, 0x04, 0x50, 0x00, 0x00, 0xf4});
  int loads = 0, stores = 0;
  auto count = [&](uint64_t pa, uint32_t size, uint8_t, bool write, TcgCpu::AccessOwner) {
    EXPECT_EQ(size, 4u);
    EXPECT_EQ(pa, write ? 0x5004u : 0x5000u);
    (write ? stores : loads)++;
    return TcgCpu::AccessVerdict{};
  };
  cpu_->SetDataAccessHook(count);
  RunFrom(Pm32(0));
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(stores, 1);
  cpu_->SetDataAccessHook(nullptr);
  RunFrom(Pm32(0));
  EXPECT_EQ(loads + stores, 2);
  cpu_->SetDataAccessHook(count);
  RunFrom(Pm32(0));
  EXPECT_EQ(loads, 2);
  EXPECT_EQ(stores, 2);
  EXPECT_EQ(cpu_->stats().data_hook_adds, 1u);
  EXPECT_EQ(cpu_->stats().data_hook_removals, 0u);
  // Unused for longer than the linger, it goes at the next run.
  cpu_->SetDataAccessHook(nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  RunFrom(Pm32(0));
  RunFrom(Pm32(0));
  EXPECT_EQ(cpu_->stats().data_hook_removals, 1u);
  EXPECT_EQ(loads + stores, 4);
}

TEST_F(TcgCpuTest, AnUnusedCodeHookLingersAndAnInterruptStillComesAtOnce) {
  // Adding or removing the catch-all code hook retranslates all code, so a
  // hook let go stays, unused, for Config::code_hook_linger (here 200 ms)
  // before it goes: Linux's perf turns its counters, and with them vbts's
  // tracing, off and on in every PMI, and paid a retranslation each time.
  Recreate(std::chrono::milliseconds(200));
  Code(kCodeRip, {0x90, 0x90, 0xf4});  // nop; nop; hlt
  int hooked = 0;
  cpu_->SetInstructionHook([&](uint64_t) { hooked++; });
  RunFrom(Pm32(0));
  EXPECT_EQ(hooked, 3);
  EXPECT_EQ(cpu_->stats().code_hook_adds, 1u);
  // Let go: the hook stays installed but is not called, and taking it back
  // within the linger adds nothing.
  cpu_->SetInstructionHook(nullptr);
  RunFrom(Pm32(0));
  EXPECT_EQ(hooked, 3);
  EXPECT_EQ(cpu_->stats().code_hook_removals, 0u);
  cpu_->SetInstructionHook([&](uint64_t) { hooked++; });
  RunFrom(Pm32(0));
  EXPECT_EQ(hooked, 6);
  EXPECT_EQ(cpu_->stats().code_hook_adds, 1u);
  // While it lingers an interrupt raised by an OUT is taken right after it,
  // as without a hook (AnInterruptAnOutRaisesComesAtTheNextBoundary): QEMU
  // delivers it, not the unused hook.  (New code where the old ran: its
  // translation goes, as after any store of vbts's.)
  cpu_->SetInstructionHook(nullptr);
  cpu_->InvalidateCodeBytes(kCodeRip, 16);
  ExpectInterruptAfterOut();
  EXPECT_EQ(hooked, 6);
  EXPECT_EQ(cpu_->stats().code_hook_removals, 0u);
  // Unused for longer than the linger: the next run removes it.
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  Code(kCodeRip, {0x90, 0x90, 0xf4});
  cpu_->InvalidateCodeBytes(kCodeRip, 16);
  RunFrom(Pm32(0));
  EXPECT_EQ(cpu_->stats().code_hook_removals, 1u);
  EXPECT_EQ(hooked, 6);
}

TEST_F(TcgCpuTest, ALingeringCodeHookCountsInstructionsAndEndsTheRunAtItsStop) {
  // Let go, the code hook stays (Config::code_hook_linger, here 10 s) and
  // QEMU still calls it before every instruction: it counts them
  // (lingering_retired), which keeps the guest's clock on instructions
  // (Machine::UpdateClockSource), and ends the run before the instruction at
  // which the count reaches SetLingeringStopAt (the LAPIC timer's deadline).
  // nop; nop; nop; hlt: four instructions start, the HLT included.
  Recreate(std::chrono::milliseconds(10'000));
  Code(kCodeRip, {0x90, 0x90, 0x90, 0xf4});
  cpu_->SetInstructionHook([](uint64_t) {});
  RunFrom(Pm32(0));
  EXPECT_EQ(cpu_->lingering_retired(), 0u);  // counted by the hook's user
  cpu_->SetInstructionHook(nullptr);
  cpu_->SyncHooks();
  EXPECT_TRUE(cpu_->CodeHookLingering());
  RunFrom(Pm32(0));
  EXPECT_EQ(cpu_->lingering_retired(), 4u);
  // A stop at count 6: two NOPs run (counts 4, 5), the run ends before the
  // third (EIP = kCodeRip + 2); the next run starts with it and counts it.
  cpu_->SetLingeringStopAt(6);
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  EXPECT_EQ(st.rip, kCodeRip + 2);
  EXPECT_EQ(cpu_->lingering_retired(), 6u);
  cpu_->SetLingeringStopAt(std::nullopt);
  st = RunFrom(st);
  EXPECT_EQ(st.rip, kCodeRip + 4);
  EXPECT_EQ(cpu_->lingering_retired(), 8u);
  EXPECT_EQ(cpu_->stats().code_hook_removals, 0u);
}

TEST_F(TcgCpuTest, KeepingTheCodeHookLingeringInstallsItUnused) {
  // A write of a PMU MSR (Machine::WriteMsr) keeps the code hook lingering:
  // without one, the next run's start installs it (one add, nothing else
  // calls it) and the guest's instructions are counted from then on.
  // nop; nop; hlt: three instructions.
  Recreate(std::chrono::milliseconds(10'000));
  Code(kCodeRip, {0x90, 0x90, 0xf4});
  EXPECT_FALSE(cpu_->CodeHookLingering());
  EXPECT_TRUE(cpu_->KeepCodeHookLingering());  // to be installed: the caller ends the run
  cpu_->SyncHooks();
  EXPECT_TRUE(cpu_->CodeHookLingering());
  EXPECT_EQ(cpu_->stats().code_hook_adds, 1u);
  RunFrom(Pm32(0));
  EXPECT_EQ(cpu_->lingering_retired(), 3u);
  EXPECT_FALSE(cpu_->KeepCodeHookLingering());  // installed: its linger starts again
  RunFrom(Pm32(0));
  EXPECT_EQ(cpu_->lingering_retired(), 6u);
  EXPECT_EQ(cpu_->stats().code_hook_adds, 1u);
  EXPECT_EQ(cpu_->stats().code_hook_removals, 0u);
}

TEST_F(TcgCpuTest, InvalidatingTranslationsCountsAsCodeCacheTime) {
  // A CPU spends no time on QEMU's code cache: TranslationNs, which the
  // guest clock leaves out of host time, also holds FlushCode's time (each
  // switch of what is observed invalidates every translation).
  const uint64_t before = TcgCpu::TranslationNs();
  cpu_->FlushCode();
  EXPECT_GT(TcgCpu::TranslationNs(), before);
}

TEST_F(TcgCpuTest, SmswToA32BitRegisterStoresAllOfCr0) {
  // SMSW r32 outside 64-bit mode stores CR0[31:0] (hardware, QEMU 7.2 and
  // kvm-unit-tests realmode "smsw (3)"); QEMU 5.0 translates it inline as a
  // 16-bit store, so vbts performs it (TcgCpu::CompleteSubstituted). With
  // paging on, CR0 = PE | PG = 0x80000001 (Pm32 + Paged32AtHighPage):
  //   mov eax, 0xdeadbeef; smsw eax       EAX = 0x80000001
  //   mov ebx, 0xdeadbeef; smsw bx (66)   EBX = 0xdead0001 (r16: the low 16 bits)
  //   hlt
  Code(0x100000, {0xb8, 0xef, 0xbe, 0xad, 0xde, 0x0f, 0x01, 0xe0,
                  0xbb, 0xef, 0xbe, 0xad, 0xde, 0x66, 0x0f, 0x01, 0xe3,
                  0xf4});
  const CpuState st = RunFrom(Paged32AtHighPage());
  EXPECT_EQ(st.cr0, 0x80000001u);
  EXPECT_EQ(st.gpr[kRax], 0x80000001u);
  EXPECT_EQ(st.gpr[kRbx], 0xdead0001u);
  EXPECT_EQ(st.rip, 0x40000012u);
  EXPECT_EQ(cpu_->stats().performed, 2u);
}

TEST_F(TcgCpuTest, SmswThatVbtsPerformsIsFollowedByTheGuestsSingleStepTrap) {
  // TF=1 at `smsw eax` (0F 01 E0, CR0 = PE = 1): the instruction vbts
  // performs is followed by the single-step #DB like any other (SDM 17.3.1.4):
  // handler 0x600 with the frame's EIP = kCodeRip + 3, DR6.BS set, EAX = 1.
  Gate32(1, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  Code(kCodeRip, {0x0f, 0x01, 0xe0, 0xf4});
  CpuState st = Pm32(0);
  st.gpr[kRax] = 0xdeadbeef;
  st.rflags |= kRflagsTf;
  st = RunFrom(st);
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(st.gpr[kRax], 1u);
  EXPECT_EQ(Read32(kKernelStack - 12), kCodeRip + 3);
  uint64_t db[4], dr6 = 0, dr7 = 0;
  cpu_->GetDebugRegs(db, dr6, dr7);
  EXPECT_EQ(dr6 & 0x4000, 0x4000u);
}

TEST_F(TcgCpuTest, LgdtAndLidtOfANonCanonicalBaseAreAGpFaultInLongMode) {
  // SDM vol. 2A LGDT/LIDT: in 64-bit mode a non-canonical base in the
  // operand is #GP(0) and GDTR/IDTR keep their values (kvm-unit-tests la57);
  // QEMU 5.0 loads it. lgdt [0x5000] = 0F 01 14 25 00 50 00 00, lidt
  // [0x5000] = 0F 01 1C 25 ...; operand at 0x5000: limit 0x1234, base
  // 0x0000800000000000 (bit 47 set, bits 63:48 clear). Expected for each:
  // the #GP handler (0x700) with error code 0 and the frame's RIP = the
  // instruction, the tables unchanged. Then a canonical base
  // 0xffff800000001000 is loaded: GDTR = {0xffff800000001000, 0x1234}.
  Gate64(13, MakeGate(kIntGate32, kCode64K, 0x700, 0));
  Code(0x700, {0xf4});
  Write16(0x5000, 0x1234);
  Write64(0x5002, 0x0000800000000000ull);
  for (uint8_t modrm : {uint8_t{0x14}, uint8_t{0x1c}}) {
    Code(kCodeRip, {0x0f, 0x01, modrm, 0x25, 0x00, 0x50, 0x00, 0x00, 0xf4});
    const CpuState st = RunFrom(Lm64(0));
    EXPECT_EQ(st.rip, 0x701u) << int(modrm);
    EXPECT_EQ(Read64(kKernelStack - 48), 0u) << int(modrm);       // error code
    EXPECT_EQ(Read64(kKernelStack - 40), kCodeRip) << int(modrm);  // RIP of the LGDT/LIDT
    EXPECT_EQ(st.gdtr, Lm64(0).gdtr);
    EXPECT_EQ(st.idtr, Lm64(0).idtr);
  }
  Write64(0x5002, 0xffff800000001000ull);
  Code(kCodeRip, {0x0f, 0x01, 0x14, 0x25, 0x00, 0x50, 0x00, 0x00, 0xf4});
  CpuState st = RunFrom(Lm64(0));
  EXPECT_EQ(st.rip, kCodeRip + 9);
  EXPECT_EQ(st.gdtr.base, 0xffff800000001000ull);
  EXPECT_EQ(st.gdtr.limit, 0x1234u);
  // The operand on a page that is not mapped (lm64 maps 0..4 MiB): #PF at
  // the LGDT with CR2 = the operand's address and error code 0 (not
  // present, read, supervisor), as any read (SDM vol. 3A 4.7); lgdt
  // [0x800000] = 0F 01 14 25 00 00 80 00.
  Gate64(14, MakeGate(kIntGate32, kCode64K, 0x900, 0));
  Code(0x900, {0xf4});
  Code(kCodeRip, {0x0f, 0x01, 0x14, 0x25, 0x00, 0x00, 0x80, 0x00, 0xf4});
  st = RunFrom(Lm64(0));
  EXPECT_EQ(st.rip, 0x901u);
  EXPECT_EQ(st.cr2, 0x800000u);
  EXPECT_EQ(Read64(st.gpr[kRsp]), 0u);             // error code
  EXPECT_EQ(Read64(st.gpr[kRsp] + 8), kCodeRip);   // RIP of the LGDT
  EXPECT_EQ(st.gdtr, Lm64(0).gdtr);
}

TEST_F(TcgCpuTest, AnUnalignedM128OfALegacySseInstructionIsAGpFault) {
  // SDM vol. 2A 2.5 (exception types 1, 2, 4): a legacy SSE instruction's
  // 128-bit memory operand not aligned on 16 bytes is #GP(0), at the
  // instruction, before any page fault; MOVUPS/MOVDQU take any alignment.
  // QEMU 5.0 translates the accesses inline without a check (kvm-unit-tests
  // emulator: "unaligned movaps exception"). CR4.OSFXSR on (SSE enabled).
  // In 32-bit protected mode, EAX = 0x5008 (8 mod 16), handler 0x600:
  //   movaps [eax], xmm0   0F 29 00   -> #GP(0), frame EIP = the MOVAPS
  //   movdqa xmm1, [eax]   66 0F 6F 08 -> #GP(0) (a load)
  //   paddd xmm1, [eax]    66 0F FE 08 -> #GP(0) (an arithmetic operand)
  //   movups [eax], xmm0   0F 11 00   -> stores, then HLT
  Gate32(13, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  const std::vector<std::vector<uint8_t>> faulting = {{0x0f, 0x29, 0x00}, {0x66, 0x0f, 0x6f, 0x08},
                                                      {0x66, 0x0f, 0xfe, 0x08}};
  for (const std::vector<uint8_t>& insn : faulting) {
    std::vector<uint8_t> code = insn;
    code.push_back(0xf4);
    Code(kCodeRip, code);
    cpu_->InvalidateCodeBytes(kCodeRip, 16);  // the previous case's translation
    CpuState st = Pm32(0);
    st.cr4 |= 1u << 9;  // OSFXSR
    st.gpr[kRax] = 0x5008;
    st = RunFrom(st);
    EXPECT_EQ(st.rip, 0x601u) << int(insn[1]);
    EXPECT_EQ(Read32(kKernelStack - 16), 0u) << int(insn[1]);        // error code
    EXPECT_EQ(Read32(kKernelStack - 12), kCodeRip) << int(insn[1]);  // EIP of the instruction
  }
  // The same MOVAPS at an aligned address, and MOVUPS at the unaligned one,
  // store XMM0 (all zero after reset, so first fill the bytes with 0xAA).
  for (const auto& [insn, addr] : {std::pair<uint8_t, uint32_t>{0x29, 0x5010}, {0x11, 0x5008}}) {
    for (uint32_t i = 0; i < 16; i += 4) Write32(addr + i, 0xAAAAAAAAu);
    Code(kCodeRip, {0x0f, insn, 0x00, 0xf4});
    cpu_->InvalidateCodeBytes(kCodeRip, 16);
    CpuState st = Pm32(0);
    st.cr4 |= 1u << 9;
    st.gpr[kRax] = addr;
    st = RunFrom(st);
    EXPECT_EQ(st.rip, kCodeRip + 4) << int(insn);
    for (uint32_t i = 0; i < 16; i += 4) EXPECT_EQ(Read32(addr + i), 0u) << int(insn) << " +" << i;
  }
  // Alignment is checked before paging: in 64-bit mode (0..4 MiB mapped),
  // movaps xmm0, [rax] with RAX = 0x800008, unmapped and unaligned, is
  // #GP(0) (handler 0x700), not #PF; CR2 keeps its value.
  Gate64(13, MakeGate(kIntGate32, kCode64K, 0x700, 0));
  Code(0x700, {0xf4});
  Code(kCodeRip, {0x0f, 0x28, 0x00, 0xf4});
  cpu_->InvalidateCodeBytes(kCodeRip, 16);
  CpuState st = Lm64(0);
  st.cr4 |= 1u << 9;
  st.gpr[kRax] = 0x800008;
  st = RunFrom(st);
  EXPECT_EQ(st.rip, 0x701u);
  EXPECT_EQ(st.cr2, Lm64(0).cr2);
  EXPECT_EQ(Read64(kKernelStack - 48), 0u);       // error code
  EXPECT_EQ(Read64(kKernelStack - 40), kCodeRip);  // RIP of the MOVAPS
  EXPECT_EQ(cpu_->stats().alignment_faults, 4u);
}

TEST_F(TcgCpuTest, ANonCanonicalAddressThroughSsIsAStackFault) {
  // SDM vol. 3A 6.15 (interrupt 12): in 64-bit mode a non-canonical address
  // referenced through SS is #SS(0), through another segment #GP(0)
  // (kvm-unit-tests emulator64); QEMU 5.0 raises #GP(0) for both.
  //   mov rax, [rbp]   RBP = 0x0000800000000000: SS-based -> #SS(0), handler 0x700
  //   mov rax, [rbx]   RBX = the same: DS-based -> #GP(0), handler 0x800
  Gate64(12, MakeGate(kIntGate32, kCode64K, 0x700, 0));
  Gate64(13, MakeGate(kIntGate32, kCode64K, 0x800, 0));
  Code(0x700, {0xf4});
  Code(0x800, {0xf4});
  for (const auto& [modrm, handler] : {std::pair<uint8_t, uint64_t>{0x45, 0x701}, {0x43, 0x801}}) {
    // 48 8B 45 00 = mov rax, [rbp+0]; 48 8B 03 = mov rax, [rbx]
    if (modrm == 0x45) Code(kCodeRip, {0x48, 0x8b, 0x45, 0x00, 0xf4});
    else Code(kCodeRip, {0x48, 0x8b, 0x03, 0xf4});
    CpuState st = Lm64(0);
    st.gpr[kRbp] = st.gpr[kRbx] = 0x0000800000000000ull;
    st = RunFrom(st);
    EXPECT_EQ(st.rip, handler) << int(modrm);
    EXPECT_EQ(Read64(kKernelStack - 48), 0u) << int(modrm);       // error code
    EXPECT_EQ(Read64(kKernelStack - 40), kCodeRip) << int(modrm);  // RIP of the MOV
  }
  EXPECT_EQ(cpu_->stats().stack_faults, 1u);
}

TEST_F(TcgCpuTest, AJmpOrCallToANonCanonicalAddressFaultsAtTheBranch) {
  // SDM vol. 2A JMP/CALL: #GP(0) if the target is non-canonical, with RIP at
  // the branch and nothing pushed (kvm-unit-tests emulator64 "jump to
  // non-canonical address"); QEMU 5.0 faults at the fetch, RIP = the target.
  //   mov rax, 0xaaaaaaaaaaaaaaaa; jmp rax (FF E0) / call rax (FF D0)
  // Expected: handler 0x800, error code 0, frame RIP = kCodeRip + 10 (the
  // branch), frame RSP = kKernelStack (no return address pushed).
  // These runs have no block hook: the branch's block is the one whose
  // search for its target's block came last (LastLookupBlock).
  // ...WithTheBlockHook below: the same through the last block that started.
  NonCanonicalBranches(/*block_hook=*/false);
}

TEST_F(TcgCpuTest, AJmpOrCallToANonCanonicalAddressFaultsAtTheBranchWithTheBlockHook) {
  Recreate(std::chrono::milliseconds(0), true, size_t{1} << 20, /*drop_block_hook=*/false);
  NonCanonicalBranches(/*block_hook=*/true);
}

void TcgCpuTest::NonCanonicalBranches(bool block_hook) {
  Gate64(13, MakeGate(kIntGate32, kCode64K, 0x800, 0));
  Code(0x800, {0xf4});
  for (uint8_t op : {uint8_t{0xe0}, uint8_t{0xd0}}) {
    Code(kCodeRip, {0x48, 0xb8, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xff, op, 0xf4});
    const CpuState st = RunFrom(Lm64(0));
    EXPECT_EQ(st.rip, 0x801u) << int(op);
    EXPECT_EQ(Read64(kKernelStack - 48), 0u) << int(op);
    EXPECT_EQ(Read64(kKernelStack - 40), kCodeRip + 10) << int(op);
    EXPECT_EQ(Read64(kKernelStack - 16), kKernelStack) << int(op);  // RSP at the fault
  }
  // push rax; ret: #GP(0) at the RET. (QEMU 5.0 loses the block's register
  // updates on this path: RSP reads as before the PUSH, so the frame's
  // place and RSP are not checked; docs/tcg-engine.md.)
  Code(kCodeRip, {0x48, 0xb8, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0x50, 0xc3, 0xf4});
  const CpuState st = RunFrom(Lm64(0));
  EXPECT_EQ(st.rip, 0x801u);
  EXPECT_EQ(Read64(st.gpr[kRsp]), 0u);                // error code, at the handler's RSP
  EXPECT_EQ(Read64(st.gpr[kRsp] + 8), kCodeRip + 11);  // RIP of the RET
  EXPECT_EQ(cpu_->stats().branch_faults, 3u);
  // 3 runs, each either without the block hook or with it throughout.
  EXPECT_EQ(cpu_->stats().runs_without_block_hook, block_hook ? 0u : 3u);
}

TEST_F(TcgCpuTest, WithoutTheBlockHookTheFaultingBranchIsTheLastSearchers) {
  // Two blocks each end with an indirect JMP, whose target QEMU searches for
  // (helper_lookup_tb_ptr): the first to 0x2000 (canonical), the second to a
  // non-canonical address.  The #GP(0) belongs to the second JMP, the block
  // whose search came last, not to the first:
  //   kCodeRip: mov rbx, 0x2000; jmp rbx
  //   0x2000:   mov rax, 0xaaaaaaaaaaaaaaaa; jmp rax
  // Expected: frame RIP 0x200a (the second JMP: 10 bytes of MOV before it).
  Gate64(13, MakeGate(kIntGate32, kCode64K, 0x800, 0));
  Code(0x800, {0xf4});
  Code(kCodeRip, {0x48, 0xbb, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xe3});
  Code(0x2000, {0x48, 0xb8, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xff, 0xe0, 0xf4});
  const CpuState st = RunFrom(Lm64(0));
  EXPECT_EQ(st.rip, 0x801u);
  EXPECT_EQ(Read64(kKernelStack - 40), 0x200au);
  EXPECT_EQ(cpu_->stats().branch_faults, 1u);
  EXPECT_EQ(cpu_->stats().runs_without_block_hook, 1u);
}

TEST_F(TcgCpuTest, TheBlockHookIsInTheTranslationsOnlyWhileSomethingObserves) {
  // Untraced runs have no block hook; the instruction hook brings it back for
  // its runs (one retranslation each way); let go, the code hook is deleted
  // (no lingering here) and stays in Unicorn's list until the next run ends,
  // which therefore still has the block hook; the run after has none.
  Code(kCodeRip, {0x90, 0xf4});
  RunFrom(Pm32(0));
  EXPECT_EQ(cpu_->stats().runs_without_block_hook, 1u);
  int reported = 0;
  cpu_->SetInstructionHook([&](uint64_t) { reported++; });
  RunFrom(Pm32(0));
  EXPECT_EQ(reported, 2);  // NOP, HLT
  EXPECT_EQ(cpu_->stats().runs_without_block_hook, 1u);
  cpu_->SetInstructionHook(nullptr);
  RunFrom(Pm32(0));
  EXPECT_EQ(cpu_->stats().runs_without_block_hook, 1u);  // the deleted code hook is still listed
  RunFrom(Pm32(0));
  EXPECT_EQ(cpu_->stats().runs_without_block_hook, 2u);
  EXPECT_EQ(cpu_->stats().block_hook_adds, 1u);
  EXPECT_EQ(cpu_->stats().block_hook_removals, 2u);  // at the first run, and after the tracing
}

TEST_F(TcgCpuTest, AnExceptionQueuedFromTheInstructionHookComesBeforeThatInstruction) {
  // What the tracer does for an emulated #DB: queued at the boundary before
  // `mov eax, 2`, delivered there (frame EIP = that MOV, EAX still 1).
  Gate32(1, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  Code(kCodeRip, {
      0xb8, 0x01, 0x00, 0x00, 0x00,  // mov eax, 1
      0xb8, 0x02, 0x00, 0x00, 0x00,  // mov eax, 2
      0xf4,
  });
  cpu_->SetInstructionHook([this](uint64_t la) {
    if (la == kCodeRip + 5) cpu_->QueueException(1, std::nullopt);
  });
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(st.gpr[kRax], 1u);
  EXPECT_EQ(Read32(kKernelStack - 12), kCodeRip + 5);
  EXPECT_EQ(cpu_->stats().injected, 1u);
}

// A #DB queued at the stop QEMU makes at a REP string instruction after its
// last iteration (count 0) is delivered with the next instruction's EIP, as
// the CPU has finished the instruction; queued at an earlier iteration, with
// the REP's own EIP (TcgCpu::QueueException). The count is the address
// size's: with a 67 prefix in 32-bit code, CX, whatever ECX's upper half.
TEST_F(TcgCpuTest, ATrapAfterARepsLastIterationHasTheNextInstructionsEip) {
  Gate32(1, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  struct Case {
    std::vector<uint8_t> rep;  // the REP MOVSB's bytes
    uint32_t ecx;
    int queue_at_visit;        // the hook's visits at the REP: one per iteration, then the count-0 stop
    uint64_t frame_eip_offset;  // from the REP
    uint64_t adjusted;          // finished_rep_traps
  };
  const Case cases[] = {
      {{0xf3, 0xa4}, 2, 3, 2, 1},              // after the last of 2 iterations: the next instruction
      {{0xf3, 0xa4}, 2, 2, 0, 0},              // after the first: the REP again, ECX = 1 left
      {{0x67, 0xf3, 0xa4}, 0x10001, 2, 3, 1},  // CX = 1: one iteration, then CX = 0 (ECX 0x10000)
  };
  uint64_t adjusted = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.rep.size());
    const uint64_t rep = kCodeRip + 15;
    std::vector<uint8_t> code = {0xb9, 0, 0, 0, 0,             // mov ecx, c.ecx
                                 0xbe, 0x00, 0x08, 0x00, 0x00,  // mov esi, 0x800
                                 0xbf, 0x00, 0x09, 0x00, 0x00};  // mov edi, 0x900
    std::memcpy(&code[1], &c.ecx, 4);
    code.insert(code.end(), c.rep.begin(), c.rep.end());
    code.push_back(0xf4);  // hlt
    Code(kCodeRip, code);
    int visits = 0;
    cpu_->SetInstructionHook([&](uint64_t la) {
      if (la == rep && ++visits == c.queue_at_visit) cpu_->QueueException(1, std::nullopt);
    });
    CpuState st = RunFrom(Pm32(0));
    EXPECT_EQ(st.rip, 0x601u);
    EXPECT_EQ(Read32(kKernelStack - 12), rep + c.frame_eip_offset);
    adjusted += c.adjusted;
    EXPECT_EQ(cpu_->stats().finished_rep_traps, adjusted);
    cpu_->SetInstructionHook(nullptr);
  }
}

TEST_F(TcgCpuTest, VbtsStoresInvalidateTranslationsOnlyInPagesThatHoldThem) {
  // InvalidateCodeBytes (BTS/PEBS records, a debugger's writes): QEMU's
  // invalidation runs only for a page some translation came from; the
  // next run then executes the bytes stored.
  constexpr uint64_t kData = 0x10000;  // a page no code runs from
  Code(kCodeRip, {0xb8, 0x01, 0x00, 0x00, 0x00, 0xf4});  // mov eax, 1; hlt
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRax], 1u);
  cpu_->InvalidateCodeBytes(kData, 24);
  cpu_->InvalidateCodeBytes(kData + 0xff8, 16);  // two pages, neither with code
  EXPECT_EQ(cpu_->stats().code_invalidations, 0u);
  mem_.bytes()[kCodeRip + 1] = 2;  // mov eax, 2
  cpu_->InvalidateCodeBytes(kCodeRip + 1, 1);
  EXPECT_EQ(cpu_->stats().code_invalidations, 1u);
  st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRax], 2u);
  // A store that ends in the code's page counts too.
  mem_.bytes()[kCodeRip + 1] = 3;
  cpu_->InvalidateCodeBytes(0, kCodeRip + 2);
  EXPECT_EQ(cpu_->stats().code_invalidations, 2u);
  st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRax], 3u);
  // Once every translation of the page is dropped, a store there has
  // nothing to invalidate; when code runs there again, it has.
  cpu_->FlushCode();
  mem_.bytes()[kCodeRip + 1] = 4;
  cpu_->InvalidateCodeBytes(kCodeRip + 1, 1);
  EXPECT_EQ(cpu_->stats().code_invalidations, 2u);
  st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRax], 4u);
  mem_.bytes()[kCodeRip + 1] = 5;
  cpu_->InvalidateCodeBytes(kCodeRip + 1, 1);
  EXPECT_EQ(cpu_->stats().code_invalidations, 3u);
  st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRax], 5u);
}

TEST_F(TcgCpuTest, GuestStoresToAPageSeeTheCodeThatAppearsInIt) {
  // Stores to a RAM page without translations take QEMU's fast path
  // (TcgCallbacks::StoresWithoutCodeCheck); once code from the page has been
  // translated, a store there must drop that translation (SDM vol. 3A 11.6),
  // also through the TLB entry made before the code appeared.
  //   mov edi, 0x20000 / mov dword [edi], 0x000007b8 / mov byte [edi+4], 0
  //   mov byte [edi+5], 0xc3      ; [edi]: mov eax, 7 / ret
  //   call edi / mov ebx, eax     ; 7
  //   mov byte [edi+1], 9         ; [edi]: mov eax, 9 / ret
  //   call edi / hlt              ; 9 from a new translation, 7 from the stale one
  Code(kCodeRip, {0xbf, 0x00, 0x00, 0x02, 0x00,        // mov edi, 0x20000
                  0xc7, 0x07, 0xb8, 0x07, 0x00, 0x00,  // mov dword [edi], 0x7b8
                  0xc6, 0x47, 0x04, 0x00,              // mov byte [edi+4], 0
                  0xc6, 0x47, 0x05, 0xc3,              // mov byte [edi+5], 0xc3
                  0xff, 0xd7,                          // call edi
                  0x89, 0xc3,                          // mov ebx, eax
                  0xc6, 0x47, 0x01, 0x09,              // mov byte [edi+1], 9
                  0xff, 0xd7,                          // call edi
                  0xf4});                              // hlt
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRbx], 7u);
  EXPECT_EQ(st.gpr[kRax], 9u);
  EXPECT_GE(cpu_->stats().plain_store_entries, 1u);  // the first store's entry (and the stack's)
  EXPECT_GE(cpu_->stats().store_checks_restored, 2u);  // the code's page, then 0x20000's
}

// Block-level observation (TcgCpu::SkipSequential): a loop of 5 iterations,
//   mov ecx, 5 / L: nop / nop / dec ecx / jnz L / hlt
// QEMU translates [mov .. jnz] as one block, [L .. jnz] as another (the
// target of the jump) and [hlt] as a third: 1 + 4 + 4*4 + 1 = 22 instructions.
// How the engine calls vbts while whole blocks run unreported: the hook
// before every instruction, one hook a block, one call a block (Config).
enum class Hooks { kInstruction, kBlock, kCall };

class TcgSkipTest : public TcgCpuTest {
 protected:
  void Recreate(Hooks hooks) {
    TcgCpuTest::Recreate(std::chrono::milliseconds(0), hooks != Hooks::kInstruction, size_t{1} << 20, true,
                         hooks == Hooks::kCall);
  }
  using TcgCpuTest::Recreate;
  // mov ebx, 3000 / L: nop / mov ecx, 0x1d9 / rdmsr / nop / dec ebx / jnz L / hlt:
  // 3000 blocks of six instructions with an RDMSR (a machine MSR: a device
  // access) in their middle, which asks the engine how many instructions
  // started unreported.
  void RdmsrLoop() {
    Code(kCodeRip, {0xbb, 0xb8, 0x0b, 0x00, 0x00,  // mov ebx, 3000
                    0x90,                          // L: nop
                    0xb9, 0xd9, 0x01, 0x00, 0x00,  // mov ecx, 0x1d9
                    0x0f, 0x32,                    // rdmsr
                    0x90,                          // nop
                    0x4b,                          // dec ebx
                    0x75, 0xf4,                    // jnz L
                    0xf4});                        // hlt
  }
  struct HookRun {
    std::vector<std::pair<uint64_t, uint64_t>> reports;  // (at, count)
    std::vector<BlockEnd> ends;
    std::vector<uint64_t> at_rdmsr;  // skipped() at each RDMSR
    TcgStats stats;
  };
  // RdmsrLoop's run, the tracer skipping up to `limit` instructions across
  // blocks after each report.
  HookRun RunRdmsrLoop(Hooks hooks, uint64_t limit, bool ends) {
    Recreate(hooks);
    devices_.skipped_at_rdmsr.clear();
    kept_.clear();
    HookRun o;
    cpu_->SetInstructionHook([this, &o, limit, ends](uint64_t la) {
      o.reports.push_back({la, Take().count});
      cpu_->SkipSequential(limit, /*across=*/true, ends);
    });
    CpuState st = RunFrom(Pm32(0));
    EXPECT_EQ(st.gpr[kRbx], 0u);
    o.reports.push_back({st.pc_linear(), Take().count});
    for (const auto& k : kept_) o.ends.insert(o.ends.end(), k.begin(), k.end());
    o.at_rdmsr = devices_.skipped_at_rdmsr;
    o.stats = cpu_->stats();
    return o;
  }
  struct Report {
    uint64_t at;
    TcgCpu::Skipped skipped;
  };
  void LoadLoop() {
    Code(kCodeRip, {0xb9, 0x05, 0x00, 0x00, 0x00,  // mov ecx, 5
                    0x90, 0x90,                    // L: nop; nop
                    0x49,                          // dec ecx
                    0x75, 0xfb,                    // jnz L
                    0xf4});                        // hlt
  }
  std::vector<Report> RunSkipping(uint64_t limit, bool across, bool ends = false) {
    std::vector<Report> reports;
    cpu_->SetInstructionHook([this, &reports, limit, across, ends](uint64_t la) {
      reports.push_back({la, Take()});
      cpu_->SkipSequential(limit, across, ends);
    });
    CpuState st = RunFrom(Pm32(0));
    EXPECT_EQ(st.gpr[kRcx], 0u);
    reports.push_back({st.pc_linear(), Take()});  // what ran after the last report
    return reports;
  }
  // TakeSkipped, with the block ends copied (they live until skipping resumes).
  TcgCpu::Skipped Take() {
    TcgCpu::Skipped k = cpu_->TakeSkipped();
    kept_.push_back(std::vector<BlockEnd>(k.ends.data, k.ends.data + k.ends.size));
    k.ends.data = kept_.back().data();
    return k;
  }
  std::deque<std::vector<BlockEnd>> kept_;
  static constexpr uint64_t kL = kCodeRip + 5, kJnz = kCodeRip + 8, kHlt = kCodeRip + 10;
};

TEST_F(TcgSkipTest, InsideBlocksTheHookSeesOnlyBlockStarts) {
  LoadLoop();
  const std::vector<Report> r = RunSkipping(UINT64_MAX, /*across=*/false);
  // The first instruction, then each block start: L for iterations 2-5
  // (each after the 3 skipped instructions before the jnz, and the jnz: the
  // last one to start), and HLT.
  ASSERT_EQ(r.size(), 7u);
  EXPECT_EQ(r[0].at, kCodeRip);
  EXPECT_EQ(r[1].at, kL);
  EXPECT_EQ(r[1].skipped.count, 4u);  // nop, nop, dec, jnz after the reported mov
  EXPECT_EQ(r[1].skipped.last, kJnz);
  EXPECT_TRUE(r[1].skipped.block_start);
  for (int i = 2; i <= 4; i++) {
    EXPECT_EQ(r[i].at, kL) << i;
    EXPECT_EQ(r[i].skipped.count, 3u) << i;  // nop, dec, jnz after the reported first nop
    EXPECT_EQ(r[i].skipped.last, kJnz) << i;
  }
  EXPECT_EQ(r[5].at, kHlt);
  EXPECT_EQ(r[5].skipped.count, 3u);
  EXPECT_EQ(r[5].skipped.last, kJnz);
  EXPECT_TRUE(r[5].skipped.block_start);
  EXPECT_EQ(r[6].skipped.count, 0u);  // nothing after HLT
}

TEST_F(TcgSkipTest, AStoreIntoItsOwnBlockIsNeitherCountedNorReportedTwice) {
  // Linux's text_poke_early patches code with a memcpy whose store lands in
  // the block being run. QEMU then leaves that block at the store and runs
  // the store again from a new one-instruction block (its precise
  // self-modifying-code path), then translates the patched bytes:
  //   kCodeRip     mov ecx, 0                      reported (first)
  //   kCodeRip+5   mov byte [kCodeRip+13], 0x42    skipped, restarted
  //   kCodeRip+12  mov eax, 0x11111111             its imm's low byte patched
  //   kCodeRip+17  hlt
  // Before TcgCallbacks::Restarted the store was counted twice and its new
  // block reported as an instruction that led to itself. Expected: the
  // store's first start is taken back, so its new block is reported as one
  // that follows kCodeRip without a transfer (as at a page boundary), then
  // the block after it at kCodeRip+12; every instruction counted once, 4 in
  // all (3 reported, hlt skipped); EAX = 0x11111142 (the store comes before
  // the patched instruction's fetch, SDM vol. 3A 11.6).
  constexpr uint64_t kStore = kCodeRip + 5, kMovEax = kCodeRip + 12, kHalt = kCodeRip + 17;
  LoadStoreIntoItsOwnBlock();
  const std::vector<Report> r = RunSkipping(UINT64_MAX, /*across=*/false);
  EXPECT_EQ(cpu_->GetState().gpr[kRax], 0x11111142u);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].at, kCodeRip);
  EXPECT_EQ(r[1].at, kStore);
  EXPECT_EQ(r[1].skipped.count, 0u);
  EXPECT_EQ(r[1].skipped.last, kCodeRip);
  EXPECT_TRUE(r[1].skipped.block_start);
  EXPECT_EQ(r[2].at, kMovEax);
  EXPECT_EQ(r[2].skipped.count, 0u);
  EXPECT_EQ(r[2].skipped.last, kStore);
  EXPECT_TRUE(r[2].skipped.block_start);
  EXPECT_EQ(r[3].skipped.count, 1u);  // hlt
  EXPECT_EQ(r[3].skipped.last, kHalt);
  EXPECT_EQ(cpu_->stats().restarts, 1u);
}

TEST_F(TcgCpuTest, AStoreIntoItsOwnBlockIsReportedOnceInstructionByInstruction) {
  // The same self-modifying store as above, with every instruction
  // reported (no skipping): QEMU's restart of the store is not a second
  // report of it. Expected: 0x100, 0x105, 0x10c, 0x111 once each, EAX patched.
  LoadStoreIntoItsOwnBlock();
  std::vector<uint64_t> seen;
  cpu_->SetInstructionHook([&](uint64_t la) { seen.push_back(la); });
  const CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRax], 0x11111142u);
  EXPECT_EQ(seen, (std::vector<uint64_t>{kCodeRip, kCodeRip + 5, kCodeRip + 12, kCodeRip + 17}));
  EXPECT_EQ(cpu_->stats().restarts, 1u);
}

TEST_F(TcgSkipTest, AcrossBlocksTheHookSeesOnlyTheLimit) {
  LoadLoop();
  // No limit: only the first instruction is reported; 21 start unreported.
  std::vector<Report> r = RunSkipping(UINT64_MAX, /*across=*/true);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].skipped.count, 21u);
  EXPECT_EQ(r[1].skipped.last, kHlt);
  // A limit of 4: every fifth instruction is reported, wherever it is
  // (instructions 1, 6, 11, 16, 21 of 22), with the 4 before it skipped.
  Code(kCodeRip, {0xb9, 0x05});
  r = RunSkipping(4, /*across=*/true);
  ASSERT_EQ(r.size(), 6u);
  const uint64_t at[] = {kCodeRip, kL, kL + 1, kL + 2, kJnz};
  for (int i = 0; i < 5; i++) EXPECT_EQ(r[i].at, at[i]) << i;
  for (int i = 1; i < 5; i++) EXPECT_EQ(r[i].skipped.count, 4u) << i;
  EXPECT_EQ(r[5].skipped.count, 1u);  // HLT
}

// The guest's data breakpoints at block speed (TcgCpu::SetGuestDataHitHook):
//   mov ecx, 3 / L: nop / mov ax, [0x800] / mov [0x802], cx / dec ecx / jnz L / hlt
// with DR0 = 0x800 (write, 4 bytes), DR1 = 0x900 (read/write, 1 byte) and
// DR3 = 0x803 (read/write, 1 byte), all enabled (L0, L1, L3). The 2-byte read
// of 0x800-0x801 touches only DR0, which does not match reads; the 2-byte
// store to 0x802-0x803 touches DR0 (0x800-0x803) and DR3: B0 and B3 (9),
// three times. Each hit asks for the next boundary (as the machine does):
// the hook then sees the DEC, with the store as the last instruction
// skipped, although the run skips across blocks otherwise.
TEST_F(TcgSkipTest, AGuestDataBreakpointHitReportsTheBoundaryAfterItsInstruction) {
  Code(kCodeRip, {0xb9, 0x03, 0x00, 0x00, 0x00,               // mov ecx, 3
                  0x90,                                       // L: nop
                  0x66, 0xa1, 0x00, 0x08, 0x00, 0x00,         // mov ax, [0x800]
                  0x66, 0x89, 0x0d, 0x02, 0x08, 0x00, 0x00,   // mov [0x802], cx
                  0x49,                                       // dec ecx
                  0x75, 0xef,                                 // jnz L
                  0xf4});                                     // hlt
  const uint64_t kStore = kCodeRip + 12, kDec = kCodeRip + 19;
  const uint64_t db[4] = {0x800, 0x900, 0, 0x803};
  // L0, L1, L3; R/W0 = 01, LEN0 = 11; R/W1 = 11, LEN1 = 00; R/W3 = 11, LEN3 = 00.
  cpu_->SetDebugRegs(db, 0xFFFF0FF0, 0x45 | (0xDull << 16) | (0x3ull << 20) | (0x3ull << 28));
  struct Hit {
    uint64_t at, last;
    uint32_t bits;
  };
  std::vector<Hit> hits;
  uint32_t pending = 0;
  cpu_->SetGuestDataHitHook([&](uint32_t bits) {
    pending |= bits;
    cpu_->RequestStop();
  });
  cpu_->SetInstructionHook([&](uint64_t la) {
    const TcgCpu::Skipped k = Take();
    if (pending) hits.push_back({la, k.last, std::exchange(pending, 0)});
    cpu_->SkipSequential(UINT64_MAX, /*across=*/true, /*ends=*/false);
  });
  VBTS_ASSERT_OK(cpu_->SetState(Pm32(0)));
  for (int run = 0; run < 20; run++) {
    auto stop = cpu_->Run(5'000'000);
    VBTS_ASSERT_OK(stop.status());
    if (stop->kind == TcgStop::kHalted) break;
  }
  EXPECT_EQ(cpu_->GetState().gpr[kRcx], 0u);
  ASSERT_EQ(hits.size(), 3u);
  for (const Hit& h : hits) {
    EXPECT_EQ(h.at, kDec);
    EXPECT_EQ(h.last, kStore);
    EXPECT_EQ(h.bits, 9u);
  }
  EXPECT_EQ(cpu_->stats().guest_data_hits, 6u);  // B0 and B3, three times
  // The store is in the middle of its block (nop .. jnz), which runs with one
  // hook: each hit leaves the block at the store and runs it again alone,
  // once per iteration; its hooks report then (6 hits, not 12).
  EXPECT_EQ(cpu_->stats().access_reruns, 3u);
  EXPECT_EQ(cpu_->stats().access_stops_at_block_end, 0u);
  EXPECT_GT(cpu_->stats().hookless_blocks, 0u);
  EXPECT_EQ(cpu_->stats().guest_watch_syncs, 1u);
  // DR0 moved to 0x802 (write, 2 bytes), DR1 and DR3 off: QEMU's TLB is
  // emptied and its entries come back with the new watch flags, without a
  // retranslation; the loop reports the new hits: B0.
  const uint64_t db2[4] = {0x802, 0x900, 0, 0x803};
  cpu_->SetDebugRegs(db2, 0xFFFF0FF0, 0x1 | (0x5ull << 16));  // L0; R/W0 = 01, LEN0 = 01
  hits.clear();
  VBTS_ASSERT_OK(cpu_->SetState(Pm32(0)));
  for (int run = 0; run < 20; run++) {
    auto stop = cpu_->Run(5'000'000);
    VBTS_ASSERT_OK(stop.status());
    if (stop->kind == TcgStop::kHalted) break;
  }
  ASSERT_EQ(hits.size(), 3u);
  for (const Hit& h : hits) {
    EXPECT_EQ(h.at, kDec);
    EXPECT_EQ(h.bits, 1u);
  }
  EXPECT_EQ(cpu_->stats().guest_watch_syncs, 2u);
  // DR7 with no data breakpoint: no hits, no watch flags.
  cpu_->SetDebugRegs(db, 0xFFFF0FF0, 0x400);
  VBTS_ASSERT_OK(cpu_->SetState(Pm32(0)));
  auto stop = cpu_->Run(5'000'000);
  VBTS_ASSERT_OK(stop.status());
  EXPECT_EQ(stop->kind, TcgStop::kHalted);
  EXPECT_EQ(hits.size(), 3u);
  EXPECT_EQ(cpu_->stats().guest_watch_syncs, 3u);
}

TEST_F(TcgSkipTest, SkippingAcrossBlocksEndsWhereAPopfSetTf) {
  // pushfd / or dword [esp], 0x100 / popfd / nop / hlt, skipped across
  // blocks after the first: QEMU keeps TF in EFLAGS, not in hflags, and ends
  // the block after the POPF; the next block start (the NOP) must be
  // reported, so that the observer sees the guest's TF (before, skipping
  // went on and vbts never raised the guest's single-step traps). The #DB
  // after the NOP goes to a handler that halts.
  Gate32(1, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  Code(kCodeRip, {0x9c,                                      // pushfd
                  0x81, 0x0c, 0x24, 0x00, 0x01, 0x00, 0x00,  // or dword [esp], 0x100
                  0x9d,                                      // popfd
                  0x90,                                      // nop
                  0xf4});                                    // hlt
  const std::vector<Report> r = RunSkipping(UINT64_MAX, /*across=*/true);
  ASSERT_GE(r.size(), 2u);
  EXPECT_EQ(r[0].at, kCodeRip);
  EXPECT_EQ(r[1].at, kCodeRip + 9);  // the NOP, after OR and POPF ran unreported
  EXPECT_EQ(r[1].skipped.count, 2u);
  EXPECT_TRUE(r[1].skipped.block_start);
}

TEST_F(TcgSkipTest, BlockEndsKeepEveryBoundaryPassed) {
  // Across blocks with the ends kept (an LBR-only observer): still only the
  // first instruction is reported, and each block boundary passed is kept
  // in order: the jnz to L after iterations 1-4 and to HLT after the 5th,
  // with the instructions skipped before each block started (4 before the
  // first L, then 4 more per iteration: 4, 8, 12, 16, 20).
  LoadLoop();
  const std::vector<Report> r = RunSkipping(UINT64_MAX, /*across=*/true, /*ends=*/true);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].skipped.ends.size, 0u);
  const TcgCpu::Skipped& k = r[1].skipped;
  EXPECT_EQ(k.count, 21u);
  EXPECT_EQ(k.last, kHlt);
  ASSERT_EQ(k.ends.size, 5u);
  for (size_t i = 0; i < 5; i++) {
    EXPECT_EQ(k.ends.data[i].from, kJnz) << i;
    EXPECT_EQ(k.ends.data[i].to, i < 4 ? kL : kHlt) << i;
    EXPECT_EQ(k.ends.data[i].skipped, 4 * (i + 1)) << i;
  }
  // What they were fetched through: the paging registers as skipping began.
  const CpuState st = cpu_->GetState();
  EXPECT_EQ(k.ends.cr0, st.cr0);
  EXPECT_EQ(k.ends.cr3, st.cr3);
  EXPECT_EQ(k.ends.efer, st.efer);
}

TEST_F(TcgSkipTest, BlockEndsStopAtTheirCapacity) {
  // 1500 iterations pass 1500 boundaries (1499 to L, one to HLT): the hook
  // is called at the one that finds the kept ends full (the 1025th, an L),
  // and the 475 after it are kept for the end of the run.
  LoadLoop();
  Code(kCodeRip, {0xb9, 0xdc, 0x05});  // mov ecx, 1500
  const std::vector<Report> r = RunSkipping(UINT64_MAX, /*across=*/true, /*ends=*/true);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[1].at, kL);
  EXPECT_TRUE(r[1].skipped.block_start);
  EXPECT_EQ(r[1].skipped.last, kJnz);
  EXPECT_EQ(r[1].skipped.ends.size, TcgCpu::kMaxBlockEnds);
  EXPECT_EQ(r[1].skipped.count, 4 + 4 * 1024u);  // up to the jnz before the reported L
  EXPECT_EQ(r[2].skipped.ends.size, 1500 - 1025u);
  EXPECT_EQ(r[2].skipped.ends.data[1500 - 1026].to, kHlt);
}

TEST_F(TcgSkipTest, BlockEndsAreTakenBeforeAStoreChangesTheirCode) {
  // mov ecx, 3 / L: dec ecx / jnz L / mov byte [kCodeRip+0x40], 0x90 / hlt:
  // the store goes to the page of the code that ran, whose kept ends (jnz to
  // L twice, then to the MOV) are decoded later from its bytes: the engine
  // calls the hook before the store lands, which takes them.
  Code(kCodeRip, {0xb9, 0x03, 0x00, 0x00, 0x00,              // mov ecx, 3
                  0x49,                                      // L: dec ecx
                  0x75, 0xfd,                                // jnz L
                  0xc6, 0x05, 0x40, 0x01, 0x00, 0x00, 0x90,  // mov byte [0x140], 0x90
                  0xf4});                                    // hlt
  ASSERT_EQ(kCodeRip, 0x100u);
  std::vector<size_t> taken;
  cpu_->SetBeforeCodeStoreHook([&] { taken.push_back(Take().ends.size); });
  const std::vector<Report> r = RunSkipping(UINT64_MAX, /*across=*/true, /*ends=*/true);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0], 3u);
  EXPECT_EQ(kept_[1].size(), 3u);  // [0] was the first report's
  EXPECT_EQ(kept_[1][2].from, kCodeRip + 6);
  EXPECT_EQ(kept_[1][2].to, kCodeRip + 8);
  EXPECT_EQ(mem_.bytes()[0x140], 0x90);
}

// One hook a block and one call a block (docs/tcg-engine.md): the same
// reports, counts and kept ends as with the hook before every instruction.
TEST_F(TcgSkipTest, OneHookABlockReportsAndCountsAsAHookBeforeEveryInstruction) {
  // RdmsrLoop: at the first RDMSR the nop, the mov and the RDMSR after the
  // reported `mov ebx` (3) started unreported, at the second 6 more (9).  The ends
  // are kept, 1024 at most: the hook is called at the block starts that find
  // them full (after iterations 1025 and 2050: the first block holds the
  // `mov ebx` too), which are no kept ends: 3000 - 2 are.
  RdmsrLoop();
  const HookRun each = RunRdmsrLoop(Hooks::kInstruction, UINT64_MAX, true),
                block = RunRdmsrLoop(Hooks::kBlock, UINT64_MAX, true), call = RunRdmsrLoop(Hooks::kCall, UINT64_MAX, true);
  EXPECT_EQ(each.stats.hookless_blocks, 0u);
  EXPECT_GE(block.stats.hookless_blocks, 2900u);  // most blocks ran with one hook
  EXPECT_EQ(block.stats.count_call_blocks, 0u);
  EXPECT_GE(call.stats.count_call_blocks, 2900u);  // ... with one call
  ASSERT_EQ(block.reports.size(), each.reports.size());
  ASSERT_EQ(block.reports.size(), 4u);
  EXPECT_EQ(block.reports, each.reports);
  EXPECT_EQ(call.reports, each.reports);
  EXPECT_EQ(each.reports[0].first, kCodeRip);
  EXPECT_EQ(each.reports[1].first, kCodeRip + 5);  // L, after iteration 1025
  EXPECT_EQ(each.reports[1].second, 6 * 1025u);     // nop..jnz of 1025 iterations, after the mov
  EXPECT_EQ(each.reports[2].first, kCodeRip + 5);   // L, after 1025 more
  EXPECT_EQ(each.reports[2].second, 6 * 1025u - 1);  // after the reported L
  EXPECT_EQ(each.reports[3].first, kCodeRip + 18);    // after the HLT, at the end of the run
  EXPECT_EQ(each.reports[3].second, 6 * 950u);        // 950 iterations, less the reported L, and the HLT
  ASSERT_EQ(block.ends.size(), each.ends.size());
  ASSERT_EQ(call.ends.size(), each.ends.size());
  ASSERT_EQ(each.ends.size(), 2998u);
  for (size_t i = 0; i < each.ends.size(); i++) {
    for (const HookRun* o : {&block, &call}) {
      ASSERT_EQ(o->ends[i].from, each.ends[i].from) << i;
      ASSERT_EQ(o->ends[i].to, each.ends[i].to) << i;
      ASSERT_EQ(o->ends[i].skipped, each.ends[i].skipped) << i;
    }
  }
  ASSERT_EQ(block.at_rdmsr.size(), 3000u);
  EXPECT_EQ(block.at_rdmsr, each.at_rdmsr);
  EXPECT_EQ(call.at_rdmsr, each.at_rdmsr);
  EXPECT_EQ(each.at_rdmsr[0], 3u);
  EXPECT_EQ(each.at_rdmsr[1], 9u);
}

// One call a block (docs/tcg-engine.md): while the tracer skips across
// blocks, blocks made with no Unicorn hook count themselves through one call
// at their start; the reports and counts are those of the hook before every
// instruction and of one hook a block.
TEST_F(TcgSkipTest, OneCallABlockCountsAsTheHooksDo) {
  // RdmsrLoop counted across blocks with no ends kept
  // and a limit of 10 000: 10 000 instructions skipped, then one reported
  // (near the limit the blocks run with the hook before every instruction).
  // The MOV first (reported), then 3000 iterations of nop, mov, rdmsr, nop,
  // dec, jnz and the HLT: reported are the MOV and the 10 001st instruction
  // after it (10 001 = 6 * 1666 + 5: the DEC of iteration 1667), and the
  // run's end counts the 18 001 - 10 001 after that DEC, the HLT included.
  // The RDMSR of iteration k is instruction 6k - 3 after the MOV:
  // skipped() there counts it and those before it since the last report.
  RdmsrLoop();
  const HookRun each = RunRdmsrLoop(Hooks::kInstruction, 10000, false), block = RunRdmsrLoop(Hooks::kBlock, 10000, false),
                call = RunRdmsrLoop(Hooks::kCall, 10000, false);
  EXPECT_EQ(block.stats.count_call_blocks, 0u);
  EXPECT_GE(call.stats.count_call_blocks, 2900u);  // most blocks counted with one call
  EXPECT_EQ(call.stats.hookless_blocks, 0u);
  ASSERT_EQ(each.reports.size(), 3u);
  EXPECT_EQ(each.reports[0], (std::pair<uint64_t, uint64_t>{kCodeRip, 0}));
  EXPECT_EQ(each.reports[1], (std::pair<uint64_t, uint64_t>{kCodeRip + 14, 10000}));
  EXPECT_EQ(each.reports[2], (std::pair<uint64_t, uint64_t>{kCodeRip + 18, 8000}));
  EXPECT_EQ(block.reports, each.reports);
  EXPECT_EQ(call.reports, each.reports);
  ASSERT_EQ(each.at_rdmsr.size(), 3000u);
  for (size_t k = 1; k <= 3000; k++) {
    const uint64_t i = 6 * k - 3;  // the RDMSR's number after the MOV
    ASSERT_EQ(each.at_rdmsr[k - 1], i <= 10000 ? i : i - 10001) << k;
  }
  EXPECT_EQ(block.at_rdmsr, each.at_rdmsr);
  EXPECT_EQ(call.at_rdmsr, each.at_rdmsr);
}

TEST_F(TcgSkipTest, OneCallABlockCountsARepStringInstructionOnce) {
  // mov ebx, 200 / L: mov ecx, 7 / rep stosb / dec ebx / jnz L / hlt, with
  // EDI at 0x3000: QEMU runs each of the 7 iterations of REP STOSB as a
  // block of its own (and once more with ECX = 0); each REP is one
  // instruction. The first MOV reported, then 1 + 200 * 4 + 1 (the HLT).
  Code(kCodeRip, {0xbb, 0xc8, 0x00, 0x00, 0x00,  // mov ebx, 200
                  0xbf, 0x00, 0x30, 0x00, 0x00,  // mov edi, 0x3000
                  0xb9, 0x07, 0x00, 0x00, 0x00,  // L: mov ecx, 7
                  0xf3, 0xaa,                    // rep stosb
                  0x4b,                          // dec ebx
                  0x75, 0xf6,                    // jnz L
                  0xf4});                        // hlt
  for (Hooks hooks : {Hooks::kInstruction, Hooks::kBlock, Hooks::kCall}) {
    Recreate(hooks);
    std::vector<std::pair<uint64_t, uint64_t>> reports;
    cpu_->SetInstructionHook([this, &reports](uint64_t la) {
      reports.push_back({la, Take().count});
      cpu_->SkipSequential(UINT64_MAX, /*across=*/true, /*ends=*/false);
    });
    CpuState st = RunFrom(Pm32(0));
    EXPECT_EQ(st.gpr[kRdi], 0x3000u + 200 * 7) << static_cast<int>(hooks);
    reports.push_back({st.pc_linear(), Take().count});
    ASSERT_EQ(reports.size(), 2u) << static_cast<int>(hooks);
    EXPECT_EQ(reports[1].second, 1 + 200 * 4 + 1u) << static_cast<int>(hooks);
    if (hooks == Hooks::kCall) EXPECT_GE(cpu_->stats().count_call_blocks, 1000u);
  }
}

TEST_F(TcgSkipTest, AFaultWhileTranslatingAOneCallBlockLeavesTheHooksAsTheyWere) {
  // Paged32AtHighPage, counting across blocks (one call a block): a JMP to
  // linear 0x40000ffe, where MOV EAX, imm32 runs into the page at 0x40001000,
  // which is not present: QEMU's translator faults fetching the instruction's
  // third byte and leaves the translation by longjmp, a #PF with CR2 =
  // 0x40001000, error code 0 (not present, read, supervisor) and EIP = the
  // MOV.  The translation had the block hook hidden, and the code hook at
  // every instruction.  At the fault the observer turns on a data-access
  // hook (as a WRMSR that enables a memory event would), which ends the mode
  // there, and then reports every block start (no skipping across): its
  // handler at 0x600 is LoadLoop's code, whose block starts are reported as
  // in InsideBlocksTheHookSeesOnlyBlockStarts: 0x600, L four times, HLT.
  // With the hooks left hidden from the faulting translation, the handler's
  // first block would be made with neither and run unreported.
  Write32(kPt + 4, 0);                          // PTE 1: not present
  Code(0x100000, {0xe9, 0xf9, 0x0f, 0x00, 0x00});  // jmp 0x40000ffe
  Code(0x100ffe, {0xb8, 0x11});                 // mov eax, 0x44332211 (runs into the next page)
  Gate32(14, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xb9, 0x05, 0x00, 0x00, 0x00,  // mov ecx, 5
               0x90, 0x90,                    // L: nop; nop
               0x49,                          // dec ecx
               0x75, 0xfb,                    // jnz L
               0xf4});                        // hlt
  Recreate(Hooks::kCall);
  bool faulted = false;
  std::vector<uint64_t> after;
  cpu_->SetInstructionHook([this, &faulted, &after](uint64_t la) {
    Take();
    if (faulted) after.push_back(la);
    cpu_->SkipSequential(UINT64_MAX, /*across=*/!faulted, /*ends=*/false);
  });
  cpu_->SetEventHook([this, &faulted](std::optional<uint64_t>) {
    Take();
    faulted = true;
    cpu_->SetDataAccessHook([](uint64_t, uint32_t, uint8_t, bool, TcgCpu::AccessOwner) { return TcgCpu::AccessVerdict{}; });
  });
  const CpuState st = RunFrom(Paged32AtHighPage());
  EXPECT_EQ(st.rip, 0x60bu);
  EXPECT_EQ(st.cr2, 0x40001000u);
  EXPECT_EQ(Read32(kKernelStack - 16), 0u);           // error code
  EXPECT_EQ(Read32(kKernelStack - 12), 0x40000ffeu);  // EIP of the MOV
  EXPECT_GE(cpu_->stats().count_call_blocks, 1u);     // the JMP's block
  EXPECT_EQ(after, (std::vector<uint64_t>{0x600, 0x605, 0x605, 0x605, 0x605, 0x60a}));
}

TEST_F(TcgSkipTest, AJmpToANonCanonicalAddressFaultsAtTheBranchInAOneCallBlock) {
  // AJmpOrCallToANonCanonicalAddressFaultsAtTheBranch with the instructions
  // counted across blocks: the block (mov rax, 0xaaaaaaaaaaaaaaaa; jmp rax)
  // runs with one call, which gives the engine the block's place and size
  // (the branch is its last instruction): #GP(0) with the frame's RIP at the
  // JMP, kCodeRip + 10.
  Gate64(13, MakeGate(kIntGate32, kCode64K, 0x800, 0));
  Code(0x800, {0xf4});
  Code(kCodeRip, {0x48, 0xb8, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xff, 0xe0, 0xf4});
  cpu_->SetInstructionHook([this](uint64_t) {
    Take();
    cpu_->SkipSequential(UINT64_MAX, /*across=*/true, /*ends=*/false);
  });
  const CpuState st = RunFrom(Lm64(0));
  EXPECT_EQ(st.rip, 0x801u);
  EXPECT_EQ(Read64(kKernelStack - 40), kCodeRip + 10);
  EXPECT_EQ(cpu_->stats().branch_faults, 1u);
  EXPECT_GE(cpu_->stats().count_call_blocks, 1u);
}

TEST_F(TcgSkipTest, OneHookBlockRecordsAreDroppedWithTheTranslationsAtTheirLimit) {
  // The loop of LoadLoop (5 iterations: blocks at the MOV, at L, and the HLT's)
  // run twice with a limit of 2 records: the second run's start finds 2 or
  // more and drops them with every translation; the run counts the same.
  LoadLoop();
  // Blocks run with one hook in each run: the second's are new translations
  // with new records (without them no block could run so).
  // The same with one call a block, whose translations call vbts with their
  // record's address: the records go only with every translation.
  for (bool count_call : {false, true}) {
    Recreate(std::chrono::milliseconds(0), /*hook_per_block=*/true, /*records=*/2, true, count_call);
    auto blocks_so_far = [this, count_call] {
      return count_call ? cpu_->stats().count_call_blocks : cpu_->stats().hookless_blocks;
    };
    uint64_t blocks[2] = {};
    for (int run = 0; run < 2; run++) {
      const uint64_t before = blocks_so_far();
      const std::vector<Report> r = RunSkipping(UINT64_MAX, /*across=*/true, /*ends=*/true);
      ASSERT_EQ(r.size(), 2u) << run;
      EXPECT_EQ(r[1].skipped.count, 21u) << run;  // as BlockEndsKeepEveryBoundaryPassed
      EXPECT_EQ(r[1].skipped.ends.size, 5u) << run;
      blocks[run] = blocks_so_far() - before;
    }
    EXPECT_EQ(cpu_->stats().hookless_record_drops, 1u) << count_call;
    // The first block (entered at its report), L four times and the HLT's;
    // the second run starts in the mode the first ended in, whose call at
    // the first block reports the MOV.
    EXPECT_EQ(blocks[0], 6u) << count_call;
    EXPECT_EQ(blocks[1], 6u) << count_call;
    EXPECT_EQ(cpu_->stats().count_call_leaves, 0u) << count_call;
  }
}

TEST_F(TcgSkipTest, AFaultInsideAOneHookBlockCountsWhatStartedUpToIt) {
  // mov ebx, 100 / L: nop / dec ebx / jnz L / xor edx, edx / xor ecx, ecx /
  // nop / div ecx / nop / nop / hlt: after 100 blocks of one hook each, the
  // block that divides by zero is left at the DIV (#DE, a fault: its handler
  // at 0x600 halts).  The event hook finds the DIV the last instruction that
  // started, after xor, xor, nop (3 + 1 = 4 after the last block end), and
  // the two NOPs after it never ran.  With the ends kept (each mode) and
  // counted only (one call a block).
  Gate32(0, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  Code(0x600, {0xf4});
  Code(kCodeRip, {0xbb, 0x64, 0x00, 0x00, 0x00,  // mov ebx, 100
                  0x90,                          // L: nop
                  0x4b,                          // dec ebx
                  0x75, 0xfc,                    // jnz L
                  0x31, 0xd2,                    // xor edx, edx
                  0x31, 0xc9,                    // xor ecx, ecx
                  0x90,                          // nop
                  0xf7, 0xf1,                    // div ecx
                  0x90, 0x90, 0xf4});            // nop, nop, hlt
  constexpr uint64_t kDiv = kCodeRip + 14;
  for (const auto& [hooks, ends] : {std::pair{Hooks::kInstruction, true}, std::pair{Hooks::kBlock, true},
                                    std::pair{Hooks::kCall, true}, std::pair{Hooks::kCall, false}}) {
    const std::string mode = absl::StrFormat("hooks %d, ends %d", static_cast<int>(hooks), ends);
    Recreate(hooks);
    kept_.clear();
    std::vector<TcgCpu::Skipped> at_event;
    cpu_->SetInstructionHook([this, ends = ends](uint64_t) {
      Take();
      cpu_->SkipSequential(UINT64_MAX, /*across=*/true, ends);
    });
    cpu_->SetEventHook([this, &at_event](std::optional<uint64_t>) { at_event.push_back(Take()); });
    CpuState st = RunFrom(Pm32(0));
    EXPECT_EQ(st.rip, 0x601u) << mode;
    EXPECT_EQ(Read32(kKernelStack - 12), kDiv) << mode;  // the #DE's frame: at the DIV
    ASSERT_EQ(at_event.size(), 1u) << mode;
    EXPECT_EQ(at_event[0].last, kDiv) << mode;
    EXPECT_EQ(at_event[0].count, 3 * 100 + 4u) << mode;  // 100 iterations, then xor, xor, nop, div
    EXPECT_EQ(at_event[0].ends.size, ends ? 100u : 0u) << mode;
    if (hooks != Hooks::kInstruction) {
      EXPECT_GE(hooks == Hooks::kBlock ? cpu_->stats().hookless_blocks : cpu_->stats().count_call_blocks, 90u) << mode;
      EXPECT_GE(cpu_->stats().hookless_settles, 1u) << mode;
    }
  }
}

TEST_F(TcgCpuTest, RunsCutByTheirTimeLimitResumeExactly) { CutRuns(/*block_hook=*/false); }

void TcgCpuTest::CutRuns(bool block_hook) {
  // 5 000 000 calls of f (push rbp; mov rbp, rsp; add rax, rcx; adc rdx, 0;
  // pop rbp; ret) cut into 20-us runs: every run must end at an instruction
  // boundary with the whole state, so RAX = sum of 1..5000000 and RSP is back
  // at the stack top.  (Unicorn's own time limit fails this: docs/tcg-engine.md.)
  // The loop takes tens of milliseconds, so that the watcher thread cuts it
  // even on a loaded host (200 000 calls once ran whole within one slice
  // after the guest's stores got faster).
  Code(kCodeRip, {0x48, 0xc7, 0xc1, 0x40, 0x4b, 0x4c, 0x00,  // mov rcx, 5000000
                  0xe8, 0x06, 0x00, 0x00, 0x00,              // call f
                  0x48, 0xff, 0xc9,                          // dec rcx
                  0x75, 0xf6,                                // jnz (the call)
                  0xf4,                                      // hlt
                  0x55, 0x48, 0x89, 0xe5, 0x48, 0x01, 0xc8,  // f:
                  0x48, 0x83, 0xd2, 0x00, 0x5d, 0xc3});
  VBTS_ASSERT_OK(cpu_->SetState(Lm64(0)));
  int runs = 0;
  for (;; runs++) {
    absl::StatusOr<TcgStop> stop = cpu_->Run(20);
    VBTS_ASSERT_OK(stop.status());
    if (stop->kind == TcgStop::kHalted) break;
    ASSERT_EQ(stop->kind, TcgStop::kTimeout);
    ASSERT_LT(runs, 1'000'000);
  }
  const CpuState end = cpu_->GetState();
  EXPECT_EQ(end.gpr[kRax], 5000000ull * 5000001 / 2);
  EXPECT_EQ(end.gpr[kRsp], kKernelStack);
  EXPECT_GT(runs, 2);  // the limit did cut the loop
  // Cut through QEMU's exit request at a block start (no block hook), or by
  // the block hook (...WithTheBlockHook).
  EXPECT_EQ(cpu_->stats().runs_without_block_hook, block_hook ? 0u : static_cast<uint64_t>(runs) + 1);
}

// A timer the guest arms during a run ends the run at its expiry, not at the
// limit the run began with (Machine::TimerMoved): Linux re-arms its tick from
// the tick's interrupt handler, and its timer interrupts came up to a run's
// 50-ms slice late, 15 ticks in a 360-ms loop at 250 Hz instead of 90.
//   out 0x70, eax (eax = 0: LimitRun(0 ns)); then count in RCX forever:
//   xor eax, eax; out 0x70, eax; l: inc rcx; jmp l
// Run with a 10-s limit: it must end by its (new) time limit long before,
// with RCX far below the ~10^9 iterations/s the loop runs at (bound: 10^8,
// 0.1-0.5 s of this loop on the hosts seen).  Without the block hook, and
// with it (...WithTheBlockHook).
void TcgCpuTest::LimitedRun(bool block_hook) {
  Code(kCodeRip, {0x31, 0xc0, 0xe7, 0x70, 0x48, 0xff, 0xc1, 0xeb, 0xfb});
  CpuState st = Lm64(0);
  st.gpr[kRcx] = 0;
  VBTS_ASSERT_OK(cpu_->SetState(st));
  absl::StatusOr<TcgStop> stop = cpu_->Run(10'000'000);
  VBTS_ASSERT_OK(stop.status());
  EXPECT_EQ(stop->kind, TcgStop::kTimeout);
  const CpuState end = cpu_->GetState();
  EXPECT_LT(end.gpr[kRcx], 100'000'000u);
  EXPECT_TRUE(end.rip == kCodeRip + 4 || end.rip == kCodeRip + 7) << std::hex << end.rip;  // in the loop
  EXPECT_EQ(cpu_->stats().runs_without_block_hook, block_hook ? 0u : 1u);
}

TEST_F(TcgCpuTest, ATimerArmedDuringARunEndsItAtTheTimersExpiry) { LimitedRun(/*block_hook=*/false); }

TEST_F(TcgCpuTest, ATimerArmedDuringARunEndsItAtTheTimersExpiryWithTheBlockHook) {
  Recreate(std::chrono::milliseconds(0), true, size_t{1} << 20, /*drop_block_hook=*/false);
  LimitedRun(/*block_hook=*/true);
}

TEST_F(TcgCpuTest, RunsCutByTheirTimeLimitResumeExactlyWithTheBlockHook) {
  Recreate(std::chrono::milliseconds(0), true, size_t{1} << 20, /*drop_block_hook=*/false);
  CutRuns(/*block_hook=*/true);
}

TEST_F(TcgCpuTest, SyscallEntersTheKernelAsTheSdmSays) {
  // SDM vol. 2B SYSCALL (IA-32e): RCX = next RIP, R11 = RFLAGS, RIP = LSTAR,
  // CS = STAR[47:32] (CPL0, 64-bit), SS = STAR[47:32] + 8, RFLAGS &= ~FMASK.
  // (Unicorn 2.0.1 only steps over it; vbts's completion engine performs it.)
  Code(kCodeRip, {0x0f, 0x05});  // syscall
  Code(0x600, {0xf4});
  CpuState st = Lm64(3);
  st.star = uint64_t{kCode64K} << 32;  // kernel CS 0x28, SS 0x30
  st.lstar = 0x600;
  st.sfmask = kRflagsIf;
  st = RunFrom(st);
  EXPECT_EQ(st.rip, 0x601u);
  EXPECT_EQ(st.gpr[kRcx], kCodeRip + 2);
  EXPECT_EQ(st.gpr[kR11], 0x202u);
  EXPECT_EQ(st.cs.selector, kCode64K);
  EXPECT_EQ(st.ss.selector, kCode64K + 8);
  EXPECT_EQ(st.cpl(), 0);
  EXPECT_EQ(st.rflags & kRflagsIf, 0u);
  EXPECT_EQ(cpu_->stats().completed, 1u);
}

TEST(TcgCpuMsrTest, CpuMsrWritesThatFault) {
  // What QEMU 5.0's WRMSR lets through and the architecture refuses with #GP:
  // a non-canonical base (SDM vol. 4 FS_BASE..LSTAR, SYSENTER_ESP/EIP),
  // reserved EFER bits (only SCE 0, LME 8, LMA 10, NXE 11 exist), TSC_AUX bits
  // 63:32, a PAT entry of type 2, 3 or > 7 (SDM vol. 3A 11.12.2).
  EXPECT_TRUE(TcgCpu::CpuMsrWriteFaults(0xC0000100, 0xaaaaaaaaaaaaaaaaull));   // FS_BASE
  EXPECT_FALSE(TcgCpu::CpuMsrWriteFaults(0xC0000100, 0xffff800000001000ull));
  EXPECT_TRUE(TcgCpu::CpuMsrWriteFaults(0x176, 0x0000800000000000ull));        // SYSENTER_EIP
  EXPECT_TRUE(TcgCpu::CpuMsrWriteFaults(0xC0000080, 1u << 1));                 // EFER bit 1
  EXPECT_FALSE(TcgCpu::CpuMsrWriteFaults(0xC0000080, 0xD01));                  // SCE|LME|LMA|NXE
  EXPECT_TRUE(TcgCpu::CpuMsrWriteFaults(0xC0000103, 1ull << 32));              // TSC_AUX
  EXPECT_FALSE(TcgCpu::CpuMsrWriteFaults(0xC0000103, 0xFFFFFFFF));
  EXPECT_FALSE(TcgCpu::CpuMsrWriteFaults(0x277, 0x0007040600070406ull));       // PAT power-on value
  EXPECT_TRUE(TcgCpu::CpuMsrWriteFaults(0x277, 0x0007040600070402ull));        // entry 0 = type 2
  EXPECT_TRUE(TcgCpu::CpuMsrWriteFaults(0x277, 0x0800000000000000ull));        // entry 7 = 8
  EXPECT_FALSE(TcgCpu::CpuMsrWriteFaults(0xC0000081, ~0ull));                  // STAR: no rule
}

TEST_F(TcgCpuTest, PopcntRunsOnAModelThatHasIt) {
  // Westmere has POPCNT (CPUID.1:ECX[23]); Linux patches it into
  // __bitmap_weight when CPUID says so. popcnt rax, rdi with RDI = 0xF0F0:
  // 8 bits set.
  Gate64(6, MakeGate(kIntGate32, kCode64K, 0x600, 0));
  Code(0x600, {0xf4});
  Code(kCodeRip, {0x48, 0xc7, 0xc7, 0xf0, 0xf0, 0, 0,  // mov rdi, 0xF0F0
                  0xf3, 0x48, 0x0f, 0xb8, 0xc7,        // popcnt rax, rdi
                  0xf4});
  CpuState st = RunFrom(Lm64(0));
  EXPECT_EQ(st.rip, kCodeRip + 13);
  EXPECT_EQ(st.gpr[kRax], 8u);
}

TEST_F(TcgCpuTest, AFaultWithNoUsableIdtEndsInATripleFault) {
  // IDT limit 0: the #UD's gate is beyond the limit -> #GP, whose gate is
  // too -> #DF, whose gate is too -> shutdown (SDM vol. 3A 6.15, "Interrupt 8").
  Code(kCodeRip, {0x0f, 0x0b});
  CpuState st = Pm32(0);
  st.idtr.limit = 0;
  RunFrom(st, TcgStop::kTripleFault);
}

TEST_F(TcgCpuTest, PageTablesOutsideRamAreReadFromTheBusAsQemuReadsThem) {
  // 32-bit paging, PDE 0x100 (linear 0x40000000) -> a page table at
  // physical 0x800000, beyond the test's 4 MiB of RAM: QEMU's walk reads its
  // PTE through the MMIO region, i.e. the devices, which answer 0xfeedf00d
  // to every read: P=1, R/W=0, U/S=1, PWT=1, frame 0xfeedf000.  So the read
  // of linear 0x40000010 goes to physical 0xfeedf010 (the devices again) and
  // returns 0xfeedf00d.  vbts's second walk (Unicorn 2.0.1 drops QEMU's
  // physical address) must read the same entry from the same place: before,
  // it gave up at the table outside RAM and the read went to an unassigned
  // page that read 0 (guest-tests/tiny/hostile_paging.asm).
  constexpr uint64_t kPd = 0x300000, kPtOutside = 0x800000;
  Write32(kPd + 0, 0x00000083);                // P, W, PS: 0..4 MiB 1:1 (the code)
  Write32(kPd + 0x100 * 4, kPtOutside | 0x3);  // P, W
  Code(kCodeRip, {0xa1, 0x10, 0x00, 0x00, 0x40, 0xf4});  // mov eax, [0x40000010]; hlt
  CpuState st = Pm32(0);
  st.cr0 |= kCr0Pg;
  st.cr4 = kCr4Pse;
  st.cr3 = kPd;
  st = RunFrom(st);
  EXPECT_EQ(st.gpr[kRax], 0xfeedf00du);
  EXPECT_EQ(st.rip, kCodeRip + 6);  // no #PF: after the HLT
  EXPECT_THAT(devices_.mmio, ::testing::Contains(FakeDevices::Access{0xfeedf010, 4, 0}));
  EXPECT_THAT(devices_.mmio, ::testing::Contains(FakeDevices::Access{kPtOutside, 4, 0}));
  EXPECT_EQ(cpu_->stats().unassigned_walks, 0u);
}

// --- The virtual PMU's stores over translated code (SDM vol. 3A 11.6) ---
//
// A BTS record is a store like any other: code it overwrites runs as
// overwritten.  The tracer stores through vcpu::CodeCoherentMemory (as the
// machine wires it), from the engine's instruction hook; here the hook calls
// the virtual PMU itself with a taken branch whose `to` field (record bytes
// 8-15, 64-bit DS format: westmere has DTES64) is 0xc3: the buffer's base is
// 8 bytes below `victim`, so the record's to lands on victim's first bytes
// and victim begins with RET (C3 00 ...).
class TcgPmuStoreTest : public TcgCpuTest {
 protected:
  static constexpr uint64_t kVictim = 0x4000, kDs = 0x5000, kBase = kVictim - 8;
  TcgPmuStoreTest() : pmu_(*pmu::FindCpuModel("westmere")) {}
  void SetUp() override {
    TcgCpuTest::SetUp();
    Write64(kDs + 0, kBase);           // BTS buffer base
    Write64(kDs + 8, kBase);           // index
    Write64(kDs + 16, kBase + 4 * 24); // absolute maximum: 4 records
    Write64(kDs + 24, kBase + 4 * 24); // threshold (no interrupt: BTINT clear)
    ASSERT_FALSE(pmu_.WriteMsr(0x600, kDs).gp);                    // IA32_DS_AREA
    ASSERT_FALSE(pmu_.WriteMsr(0x1d9, (1u << 6) | (1u << 7)).gp);  // DEBUGCTL: TR, BTS
    Code(kVictim, {0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3});           // victim: mov eax, 1; ret
  }
  // The record, stored as the tracer stores one (paging off: linear = physical).
  void StoreRecord(PhysMemory& mem) {
    pmu::LinearMemory lin(mem, pmu::PagingRegs{});
    pmu::Branch b;
    b.kind = pmu::BranchKind::kJmp;
    b.branch_insn = true;
    b.from = 0x1234;
    b.to = 0xc3;
    absl::StatusOr<pmu::PmuEffects> fx = pmu_.Observe(b, lin, /*guest_tf=*/false);
    VBTS_EXPECT_OK(fx.status());
    EXPECT_EQ(Read64(kDs + 8), kBase + 24);  // stored: the index moved on by one record
    EXPECT_EQ(mem_.bytes()[kVictim], 0xc3);
  }
  // mov eax, 0x55; call victim; mov ebx, eax; mov eax, 0x55; call victim; hlt
  // The record is stored before `mov ebx, eax` (0x10a), after victim ran once.
  void LoadTwoCalls() {
    const int32_t rel1 = static_cast<int32_t>(kVictim - (kCodeRip + 10));
    const int32_t rel2 = static_cast<int32_t>(kVictim - (kCodeRip + 22));
    std::vector<uint8_t> code = {0xb8, 0x55, 0x00, 0x00, 0x00, 0xe8};
    for (int i = 0; i < 4; i++) code.push_back(static_cast<uint8_t>(rel1 >> (8 * i)));
    code.insert(code.end(), {0x89, 0xc3, 0xb8, 0x55, 0x00, 0x00, 0x00, 0xe8});
    for (int i = 0; i < 4; i++) code.push_back(static_cast<uint8_t>(rel2 >> (8 * i)));
    code.push_back(0xf4);
    Code(kCodeRip, code);
  }
  static constexpr uint64_t kAfterFirstCall = kCodeRip + 10, kHltAt = kCodeRip + 22;

  pmu::VirtualPmu pmu_;
};

TEST_F(TcgPmuStoreTest, ARecordOverCodeThatRanIsWhatItsNextCallRuns) {
  // The first call translates and runs victim as written (EAX = 1, kept in
  // EBX); the record then makes it a RET, so the second call returns at once
  // and EAX keeps 0x55 (guest-tests/tiny/hostile_ds_overlap.asm, part 3).
  LoadTwoCalls();
  CodeCoherentMemory ram(mem_, [this] { return cpu_.get(); });
  cpu_->SetInstructionHook([&](uint64_t la) {
    if (la == kAfterFirstCall) StoreRecord(ram);
  });
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRbx], 1u);
  EXPECT_EQ(st.gpr[kRax], 0x55u);
  EXPECT_EQ(st.rip, kHltAt + 1);
}

TEST_F(TcgPmuStoreTest, WithoutTheInvalidationTheStaleTranslationRuns) {
  // The same store made behind the engine's back (no engine to tell): QEMU
  // keeps running its translation of victim as it was, EAX = 1 again.  This
  // is what CodeCoherentMemory exists for (and what the test above detects).
  LoadTwoCalls();
  CodeCoherentMemory ram(mem_, [] { return nullptr; });
  cpu_->SetInstructionHook([&](uint64_t la) {
    if (la == kAfterFirstCall) StoreRecord(ram);
  });
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRbx], 1u);
  EXPECT_EQ(st.gpr[kRax], 1u);
}

TEST_F(TcgPmuStoreTest, ARecordOverTheBranchTargetAboutToRunIsWhatRuns) {
  // The tracer stores a branch's record at the boundary before the target's
  // first instruction, which QEMU has already translated (the hook runs
  // inside that block).  The record makes the target a RET: the store comes
  // before the instruction is fetched, so the RET runs (EAX keeps 0x55) and
  // returns to the HLT after the call.
  // mov eax, 0x55; call victim; hlt
  const int32_t rel = static_cast<int32_t>(kVictim - (kCodeRip + 10));
  std::vector<uint8_t> code = {0xb8, 0x55, 0x00, 0x00, 0x00, 0xe8};
  for (int i = 0; i < 4; i++) code.push_back(static_cast<uint8_t>(rel >> (8 * i)));
  code.push_back(0xf4);
  Code(kCodeRip, code);
  CodeCoherentMemory ram(mem_, [this] { return cpu_.get(); });
  int victim_reports = 0;
  cpu_->SetInstructionHook([&](uint64_t la) {
    if (la != kVictim) return;
    // Reported once: the engine re-enters the block without telling the
    // tracer about the same boundary again.
    if (victim_reports++ == 0) StoreRecord(ram);
  });
  CpuState st = RunFrom(Pm32(0));
  EXPECT_EQ(st.gpr[kRax], 0x55u);
  EXPECT_EQ(st.rip, kCodeRip + 11);  // after the HLT
  EXPECT_EQ(victim_reports, 1);
}

// --- A debugger's stops (TcgCpu::SetDebug*, docs/gdb.md) ---

// mov ecx, 3; L: dec ecx (0x105); jnz L (0x106); mov [0x800], ecx (0x108);
// hlt (0x10e)
const std::vector<uint8_t> kDebugLoop = {0xb9, 0x03, 0x00, 0x00, 0x00, 0x49, 0x75, 0xfd,
                                         0x89, 0x0d, 0x00, 0x08, 0x00, 0x00, 0xf4};

TEST_F(TcgCpuTest, DebugBreakpointStopsBeforeTheInstructionEveryTime) {
  Code(kCodeRip, kDebugLoop);
  cpu_->SetDebugBreakpoints({kCodeRip + 5});  // dec ecx, run three times
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  // Before the first dec: ECX is still 3.
  EXPECT_EQ(cpu_->debug_stop().kind, TcgCpu::DebugStop::kBreakpoint);
  EXPECT_EQ(cpu_->debug_stop().address, kCodeRip + 5);
  EXPECT_EQ(st.rip, kCodeRip + 5);
  EXPECT_EQ(st.gpr[kRcx], 3u);
  // Resuming at the breakpoint runs it (no second stop there at once); the
  // loop comes back to it with ECX = 2, then 1.
  for (uint64_t ecx : {2u, 1u}) {
    st = RunFrom(st, TcgStop::kRequested);
    EXPECT_EQ(st.rip, kCodeRip + 5);
    EXPECT_EQ(st.gpr[kRcx], ecx);
  }
  cpu_->SetDebugBreakpoints({});
  st = RunFrom(st);
  EXPECT_EQ(st.rip, kCodeRip + 15);  // after the HLT
  EXPECT_EQ(cpu_->debug_stop().kind, TcgCpu::DebugStop::kNone);
}

TEST_F(TcgCpuTest, DebugBreakpointsAreQemusOwnAndNeedNoHook) {
  // Breakpoints at the DEC and at the MOV after the loop: the first run
  // stops before the DEC (ECX = 3) at QEMU's debug exit; with the DEC's
  // breakpoint removed the loop runs out and stops before the MOV (ECX = 0).
  // Neither run has a Unicorn code hook or the block hook.
  Code(kCodeRip, kDebugLoop);
  cpu_->SetDebugBreakpoints({kCodeRip + 5, kCodeRip + 8});
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  EXPECT_EQ(cpu_->debug_stop().kind, TcgCpu::DebugStop::kBreakpoint);
  EXPECT_EQ(cpu_->debug_stop().address, kCodeRip + 5);
  EXPECT_EQ(st.rip, kCodeRip + 5);
  EXPECT_EQ(st.gpr[kRcx], 3u);
  cpu_->SetDebugBreakpoints({kCodeRip + 8});
  Write32(0x800, 0x1234);
  st = RunFrom(st, TcgStop::kRequested);
  EXPECT_EQ(cpu_->debug_stop().kind, TcgCpu::DebugStop::kBreakpoint);
  EXPECT_EQ(cpu_->debug_stop().address, kCodeRip + 8);
  EXPECT_EQ(st.rip, kCodeRip + 8);
  EXPECT_EQ(st.gpr[kRcx], 0u);
  EXPECT_EQ(Read32(0x800), 0x1234u);  // the MOV has not run
  EXPECT_EQ(cpu_->stats().qemu_breakpoint_stops, 2u);
  EXPECT_EQ(cpu_->stats().runs_without_block_hook, 2u);
  EXPECT_EQ(cpu_->stats().code_hook_adds, 0u);
  // None left: the MOV (ECX = 0) and the HLT run.
  cpu_->SetDebugBreakpoints({});
  st = RunFrom(st);
  EXPECT_EQ(st.rip, kCodeRip + 15);
  EXPECT_EQ(Read32(0x800), 0u);
}

TEST_F(TcgCpuTest, DebugWatchpointSeesAnUnalignedLoadAsTheInstructionMadeIt) {
  // A read watch on byte 0x805. mov eax, [0x801] reads 0x801-0x804: QEMU
  // checks it as its aligned parts 0x800-0x803 and 0x804-0x807, the second
  // of which reaches the watched byte, but the load does not: no stop.
  // mov ecx, [0x802] reads 0x802-0x805: the stop after it, before the
  // second INC (EBX = 1).
  //   mov eax, [0x801]; inc ebx; mov ecx, [0x802]; inc ebx; hlt
  Code(kCodeRip, {0xa1, 0x01, 0x08, 0x00, 0x00, 0x43, 0x8b, 0x0d, 0x02, 0x08, 0x00, 0x00, 0x43, 0xf4});
  cpu_->SetDebugWatchpoints({{0x805, 1, /*read=*/true, /*write=*/false}});
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  EXPECT_EQ(cpu_->debug_stop().kind, TcgCpu::DebugStop::kWatch);
  EXPECT_EQ(cpu_->debug_stop().address, 0x805u);
  EXPECT_EQ(st.rip, kCodeRip + 12);
  EXPECT_EQ(st.gpr[kRbx], 1u);
  EXPECT_EQ(cpu_->stats().debug_watch_syncs, 1u);
}

TEST_F(TcgCpuTest, DebugStepRunsOneInstruction) {
  Code(kCodeRip, kDebugLoop);
  cpu_->SetDebugStep(true);
  // mov ecx, 3 (5 bytes), dec ecx, jnz L (taken back to 0x105): one each.
  CpuState st = Pm32(0);
  for (uint64_t rip : {kCodeRip + 5, kCodeRip + 6, kCodeRip + 5}) {
    st = RunFrom(st, TcgStop::kRequested);
    EXPECT_EQ(cpu_->debug_stop().kind, TcgCpu::DebugStop::kStep);
    EXPECT_EQ(st.rip, rip);
  }
  EXPECT_EQ(st.gpr[kRcx], 2u);
}

TEST_F(TcgCpuTest, DebugStepIntoAFaultStopsAtTheHandler) {
  // ud2 at 0x100: one step delivers #UD and stops before the handler's first
  // instruction (0x600), the fault's frame pushed (SDM vol. 3A 6.12.1).
  Code(kCodeRip, {0x0f, 0x0b});
  Code(0x600, {0xf4});
  Gate32(6, MakeGate(kIntGate32, kCode32K, 0x600, 0));
  cpu_->SetDebugStep(true);
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  EXPECT_EQ(cpu_->debug_stop().kind, TcgCpu::DebugStop::kStep);
  EXPECT_EQ(st.rip, 0x600u);
  EXPECT_EQ(Read32(st.gpr[kRsp]), kCodeRip);  // the frame's EIP: the faulting ud2
}

TEST_F(TcgCpuTest, DebugWatchpointStopsAfterTheAccess) {
  Code(kCodeRip, kDebugLoop);
  cpu_->SetDebugWatchpoints({{0x802, 1, /*read=*/false, /*write=*/true}});
  // The 4-byte store to 0x800 covers 0x802: the run ends after it, before hlt.
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  EXPECT_EQ(cpu_->debug_stop().kind, TcgCpu::DebugStop::kWatch);
  EXPECT_EQ(cpu_->debug_stop().address, 0x802u);
  EXPECT_TRUE(cpu_->debug_stop().write);
  EXPECT_EQ(st.rip, kCodeRip + 14);
  // A read watchpoint on the same bytes does not fire for a write.
  cpu_->SetDebugWatchpoints({{0x800, 4, /*read=*/true, /*write=*/false}});
  st = RunFrom(Pm32(0));
  EXPECT_EQ(st.rip, kCodeRip + 15);
}

// mov ecx, 3 / L: dec ecx / jnz L / mov [0x800], ecx / inc ebx / inc ebx / hlt
const std::vector<uint8_t> kWatchedStoreInsideABlock = {0xb9, 0x03, 0x00, 0x00, 0x00, 0x49, 0x75, 0xfd, 0x89, 0x0d,
                                                        0x00, 0x08, 0x00, 0x00, 0x43, 0x43, 0xf4};

TEST_F(TcgCpuTest, DebugWatchpointInsideABlockStopsRightAfterTheAccessWithNoCodeHook) {
  // The store starts the block after the loop (store, inc, inc, hlt): the
  // hit leaves it at the store, which runs again alone; the run stops before
  // the first inc (EBX still 0). No catch-all code hook is made for it.
  Code(kCodeRip, kWatchedStoreInsideABlock);
  cpu_->SetDebugWatchpoints({{0x800, 4, /*read=*/false, /*write=*/true}});
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  EXPECT_EQ(cpu_->debug_stop().kind, TcgCpu::DebugStop::kWatch);
  EXPECT_EQ(cpu_->debug_stop().address, 0x800u);
  EXPECT_EQ(st.rip, kCodeRip + 14);
  EXPECT_EQ(st.gpr[kRbx], 0u);
  EXPECT_EQ(Read32(0x800), 0u);  // ECX after the loop
  EXPECT_EQ(cpu_->stats().access_reruns, 1u);
  EXPECT_EQ(cpu_->stats().code_hook_adds, 0u);
  // Resumed there, the guest runs to its HLT: both incs, no second stop.
  st = RunFrom(st);
  EXPECT_EQ(st.rip, kCodeRip + 17);
  EXPECT_EQ(st.gpr[kRbx], 2u);
  EXPECT_EQ(cpu_->debug_stop().kind, TcgCpu::DebugStop::kNone);
}

TEST_F(TcgCpuTest, DebugWatchpointOnAHelpersStoreStopsRightAfterItsInstruction) {
  // FXSAVE [0x800] stores its image from QEMU's helper (FCW at offset 0,
  // SDM vol. 2A FXSAVE, table 3-53; 037FH after FNINIT, vol. 1 8.1.5): the
  // helper's return address finds the instruction, so the stop is right
  // after it, before the inc.
  Code(kCodeRip, {0xdb, 0xe3,                                // fninit
                  0x0f, 0xae, 0x05, 0x00, 0x08, 0x00, 0x00,  // fxsave [0x800]
                  0x43,                                      // inc ebx
                  0xf4});
  cpu_->SetDebugWatchpoints({{0x800, 2, /*read=*/false, /*write=*/true}});
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  EXPECT_EQ(cpu_->debug_stop().kind, TcgCpu::DebugStop::kWatch);
  EXPECT_EQ(st.rip, kCodeRip + 9);
  EXPECT_EQ(st.gpr[kRbx], 0u);
  EXPECT_EQ(Read32(0x800) & 0xFFFF, 0x037Fu);
  EXPECT_EQ(cpu_->stats().access_reruns, 1u);
  EXPECT_EQ(cpu_->stats().access_stops_at_block_end, 0u);
}

TEST_F(TcgSkipTest, DebugWatchpointUnderOneHookABlockStopsWhereTheHookSawTheBoundary) {
  // With the instruction hook skipping across blocks (one hook a block), the
  // watch stops before the first inc after the hook was called there: the
  // tracer has seen the boundary after the store when GDB is told.
  Code(kCodeRip, kWatchedStoreInsideABlock);
  cpu_->SetDebugWatchpoints({{0x800, 4, /*read=*/false, /*write=*/true}});
  std::vector<uint64_t> reports;
  cpu_->SetInstructionHook([&](uint64_t la) {
    reports.push_back(la);
    Take();
    cpu_->SkipSequential(UINT64_MAX, /*across=*/true, /*ends=*/false);
  });
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  EXPECT_EQ(cpu_->debug_stop().kind, TcgCpu::DebugStop::kWatch);
  EXPECT_EQ(st.rip, kCodeRip + 14);
  EXPECT_EQ(st.gpr[kRbx], 0u);
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.front(), kCodeRip);
  EXPECT_EQ(reports.back(), kCodeRip + 14);
  EXPECT_EQ(cpu_->stats().access_reruns, 1u);
  EXPECT_GT(cpu_->stats().hookless_blocks, 0u);
}


// mov ecx, 40 / L: mov eax, [0x800] / add [0x804], eax / inc ebx / dec ecx /
// jnz L / hlt: three data accesses an iteration (the MOV's load, the ADD's
// load and store), the ADD in the middle of the loop's block.
const std::vector<uint8_t> kThreeAccessesALoop = {0xb9, 0x28, 0x00, 0x00, 0x00, 0xa1, 0x00, 0x08, 0x00, 0x00, 0x01,
                                                   0x05, 0x04, 0x08, 0x00, 0x00, 0x43, 0x49, 0x75, 0xf1, 0xf4};
constexpr uint64_t kAddAt = kCodeRip + 10, kIncAt = kCodeRip + 16;

// The data-access hook says something is due (as the tracer does for an LLC
// counter's PMI, and from then on until the boundary) at access number `due`
// of the run, counting from 1; blocks run with one hook. Returns the stop.
struct DueRun {
  CpuState st;
  std::vector<uint64_t> reports;  // the instruction hook's boundaries
  uint64_t executed = 0;          // instructions that ran before the stop (reported or skipped)
  uint64_t loads800 = 0, loads804 = 0, stores804 = 0;
};

class TcgDueAccessTest : public TcgSkipTest {
 protected:
  DueRun RunDueAt(uint64_t due) {
    Code(kCodeRip, kThreeAccessesALoop);
    DueRun r;
    uint64_t accesses = 0;
    cpu_->SetDataAccessHook([&](uint64_t pa, uint32_t size, uint8_t, bool write, TcgCpu::AccessOwner) {
      EXPECT_EQ(size, 4u);
      if (write) {
        EXPECT_EQ(pa, 0x804u);
        r.stores804++;
      } else {
        (pa == 0x800 ? r.loads800 : r.loads804)++;
      }
      return TcgCpu::AccessVerdict{.due = ++accesses >= due};
    });
    cpu_->SetInstructionHook([&](uint64_t la) {
      r.reports.push_back(la);
      r.executed += Take().count;
      cpu_->SkipSequential(UINT64_MAX, /*across=*/true, /*ends=*/false);
    });
    r.st = RunFrom(Pm32(0), TcgStop::kRequested);
    // Each reported instruction ran, but one reported where the run stopped
    // (a run that stops at a block start reports it when resumed).
    r.executed += Take().count + r.reports.size();
    if (!r.reports.empty() && r.reports.back() == r.st.pc_linear()) r.executed--;
    return r;
  }
};

TEST_F(TcgDueAccessTest, DueAtAnInstructionsFirstAccessStopsAfterItReportingEachAccessOnce) {
  // Access 92 is the ADD's load in iteration 31 (3 x 30 + 2): the ADD is
  // left there and runs again alone without reporting that load again; its
  // store is reported once; the run stops before the INC after it. 1 MOV
  // ECX + 30 iterations of 5 + MOV and ADD: 153 instructions ran.
  const DueRun r = RunDueAt(92);
  EXPECT_EQ(r.st.rip, kIncAt);
  EXPECT_EQ(r.st.gpr[kRbx], 30u);
  EXPECT_EQ(r.st.gpr[kRcx], 10u);
  EXPECT_EQ(r.loads800, 31u);
  EXPECT_EQ(r.loads804, 31u);
  EXPECT_EQ(r.stores804, 31u);
  EXPECT_EQ(r.executed, 153u);
  EXPECT_EQ(cpu_->stats().due_reruns, 1u);
  EXPECT_EQ(cpu_->stats().accesses_not_reported_again, 1u);
  EXPECT_EQ(cpu_->stats().alone_skips_dropped, 0u);
  EXPECT_GT(cpu_->stats().hookless_blocks, 0u);
}

TEST_F(TcgDueAccessTest, DueAtAnInstructionsLastAccessStopsAfterItReportingEachAccessOnce) {
  // Access 93 is the ADD's store: its load and store are not reported again.
  const DueRun r = RunDueAt(93);
  EXPECT_EQ(r.st.rip, kIncAt);
  EXPECT_EQ(r.st.gpr[kRbx], 30u);
  EXPECT_EQ(r.loads800 + r.loads804 + r.stores804, 93u);
  EXPECT_EQ(r.stores804, 31u);
  EXPECT_EQ(r.executed, 153u);
  EXPECT_EQ(cpu_->stats().due_reruns, 1u);
  EXPECT_EQ(cpu_->stats().accesses_not_reported_again, 2u);
}

TEST_F(TcgDueAccessTest, DueAtABlocksFirstInstructionStopsAfterIt) {
  // Access 91 is the MOV's load, the first instruction of iteration 31's
  // block: the MOV runs again alone, the stop is before the ADD.
  const DueRun r = RunDueAt(91);
  EXPECT_EQ(r.st.rip, kAddAt);
  EXPECT_EQ(r.st.gpr[kRbx], 30u);
  EXPECT_EQ(r.loads800, 31u);
  EXPECT_EQ(r.loads804 + r.stores804, 60u);
  EXPECT_EQ(r.executed, 152u);
}

TEST_F(TcgDueAccessTest, AStopBeforeTheRunAloneKeepsTheSkipForTheNextRun) {
  // A stop asked for as the ADD's load (access 92) makes something due (as
  // a host-time limit could): the run ends before the ADD runs alone, at
  // the ADD. The next run starts with it alone and still does not report
  // that load again; it stops before the INC.
  Code(kCodeRip, kThreeAccessesALoop);
  uint64_t accesses = 0, loads804 = 0;
  cpu_->SetDataAccessHook([&](uint64_t pa, uint32_t, uint8_t, bool write, TcgCpu::AccessOwner) {
    if (pa == 0x804 && !write) loads804++;
    if (++accesses == 92) cpu_->RequestStop();
    return TcgCpu::AccessVerdict{.due = accesses >= 92};
  });
  cpu_->SetInstructionHook([&](uint64_t) { cpu_->SkipSequential(UINT64_MAX, /*across=*/true, /*ends=*/false); });
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  EXPECT_EQ(st.rip, kAddAt);
  EXPECT_EQ(st.gpr[kRbx], 30u);
  st = RunFrom(st, TcgStop::kRequested);
  EXPECT_EQ(st.rip, kIncAt);
  EXPECT_EQ(st.gpr[kRbx], 30u);
  EXPECT_EQ(accesses, 93u);
  EXPECT_EQ(loads804, 31u);
  EXPECT_EQ(cpu_->stats().accesses_not_reported_again, 1u);
  EXPECT_EQ(cpu_->stats().alone_skips_dropped, 0u);
}

TEST_F(TcgDueAccessTest, WithTheHookBeforeEveryInstructionNothingRunsAgain) {
  // Skipping nothing (no one hook a block): the code hook at the ADD's
  // successor ends the run; the same stop, each access once, no rerun.
  Code(kCodeRip, kThreeAccessesALoop);
  uint64_t accesses = 0;
  cpu_->SetDataAccessHook([&](uint64_t, uint32_t, uint8_t, bool, TcgCpu::AccessOwner) {
    return TcgCpu::AccessVerdict{.due = ++accesses >= 92};
  });
  cpu_->SetInstructionHook([](uint64_t) {});
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  EXPECT_EQ(st.rip, kIncAt);
  EXPECT_EQ(accesses, 93u);
  EXPECT_EQ(cpu_->stats().access_reruns, 0u);
}

// A load the data-access hook says needs its own instruction (as the
// tracer does for a load above the load-latency threshold while
// instructions are counted in bulk): the ADD's load of iteration 31
// (kThreeAccessesALoop), offered kInBulk. Each iteration's block is
// reported at its start (across=false, as while memory events count).
class TcgLatencyLoadTest : public TcgSkipTest {
 protected:
  struct Offer {
    uint64_t pa;
    bool write;
    TcgCpu::AccessOwner owner;
  };
  // `slow`: the load of iteration 31 that needs its instruction: the ADD's
  // (0x804) or the MOV's (0x800), the first instruction of the loop's block.
  CpuState RunWithLatencyAt(uint64_t limit, uint64_t slow = 0x804) {
    Code(kCodeRip, kThreeAccessesALoop);
    Write32(0x800, 3);
    uint64_t loads = 0;
    cpu_->SetDataAccessHook([&, loads, slow](uint64_t pa, uint32_t, uint8_t, bool write,
                                             TcgCpu::AccessOwner owner) mutable {
      offers_.push_back({pa, write, owner});
      if (pa == slow && !write && owner == TcgCpu::AccessOwner::kInBulk && ++loads == 31)
        return TcgCpu::AccessVerdict{.needs_instruction = true};
      return TcgCpu::AccessVerdict{};
    });
    cpu_->SetInstructionHook([&, limit](uint64_t la) {
      reports_.push_back(la);
      const TcgCpu::Skipped k = Take();
      lasts_.push_back(k.last);
      executed_ += k.count;
      cpu_->SkipSequential(limit, /*across=*/false, /*ends=*/false);
    });
    CpuState st = RunFrom(Pm32(0));
    executed_ += Take().count + reports_.size();
    return st;
  }
  // The offers of the ADD's load, in order, from the one of iteration 31.
  std::vector<TcgCpu::AccessOwner> AddLoadOwnersFrom31() const {
    std::vector<TcgCpu::AccessOwner> owners;
    int n = 0;
    for (const Offer& o : offers_)
      if (o.pa == 0x804 && !o.write && ++n >= 31) owners.push_back(o.owner);
    return owners;
  }
  // Runs with no skip limit: every instruction runs once ([0x804] = 40 x 3,
  // EBX = 40), and the ADD's load of iteration 31 comes twice, kInBulk
  // (not taken) then kObserved; the other iterations' once, kInBulk.
  void RunTakingTheLoadAgainObserved() {
    const CpuState st = RunWithLatencyAt(UINT64_MAX);
    EXPECT_EQ(st.gpr[kRbx], 40u);
    EXPECT_EQ(Read32(0x804), 120u);
    using O = TcgCpu::AccessOwner;
    // Iterations 31 (twice) to 40.
    const std::vector<O> want = {O::kInBulk, O::kObserved, O::kInBulk, O::kInBulk, O::kInBulk, O::kInBulk,
                                 O::kInBulk, O::kInBulk,   O::kInBulk, O::kInBulk, O::kInBulk};
    EXPECT_EQ(AddLoadOwnersFrom31(), want);
  }
  // How often `at` was reported as a boundary.
  size_t Reported(uint64_t at) const { return std::count(reports_.begin(), reports_.end(), at); }
  std::vector<Offer> offers_;
  std::vector<uint64_t> reports_;
  std::vector<uint64_t> lasts_;  // TakeSkipped's `last` at each report
  uint64_t executed_ = 0;
};

TEST_F(TcgLatencyLoadTest, WithOneHookABlockTheInstructionRunsAgainAloneAndTakesItsLoadObserved) {
  // The ADD is left at its load, which was not taken, and runs again alone:
  // the load comes again, kObserved, and both the ADD (the alone block's
  // start) and the INC after it are reported once, in iteration 31 only
  // (elsewhere only L, each block's start, and the first MOV). Every
  // instruction ran once: [0x804] = 40 x 3, 1 + 40 x 5 + HLT = 202 starts.
  RunTakingTheLoadAgainObserved();
  EXPECT_EQ(Reported(kAddAt), 1u);
  EXPECT_EQ(Reported(kIncAt), 1u);
  EXPECT_EQ(executed_, 202u);
  EXPECT_EQ(cpu_->stats().latency_reruns, 1u);
  EXPECT_EQ(cpu_->stats().latency_unskips, 0u);
  EXPECT_EQ(cpu_->stats().latency_counted_at_access, 0u);
  // 40 MOV loads, 41 offers of the ADD's load (one not taken), 40 stores.
  EXPECT_EQ(offers_.size(), 121u);
}

TEST_F(TcgLatencyLoadTest, AnIretWhoseFrameLoadIsSlowRunsAgainAlone) {
  // A load QEMU's IRET helper makes (vbts wraps that helper, not as a tail
  // call: its pops' return address is vbts's) can be placed all the same, at
  // the IRETD: it runs again alone instead of counting at the access
  // (AccessOwner::kCountNow). 40 iterations of
  //   105: pushfd | 106: push cs | 107: push 10DH | 10C: iretd | 10D: dec ecx
  //   | 10E: jnz 105
  // IRETD pops EIP first, from 8FF4H (ESP 9000H less the three pushes); the
  // 31st offer of that load, in bulk, needs its instruction.
  Code(kCodeRip, {0xb9, 40, 0, 0, 0,             // mov ecx, 40
                  0x9c, 0x0e,                    // pushfd; push cs
                  0x68, 0x0d, 0x01, 0, 0,        // push 10DH
                  0xcf,                          // iretd
                  0x49, 0x75, 0xf5,              // dec ecx; jnz 105H
                  0xf4});
  int loads = 0;
  std::vector<TcgCpu::AccessOwner> owners;
  cpu_->SetDataAccessHook([&](uint64_t pa, uint32_t, uint8_t, bool write, TcgCpu::AccessOwner owner) {
    if (pa != 0x8ff4 || write) return TcgCpu::AccessVerdict{};
    if (++loads >= 31) owners.push_back(owner);
    if (owner == TcgCpu::AccessOwner::kInBulk && loads == 31) return TcgCpu::AccessVerdict{.needs_instruction = true};
    return TcgCpu::AccessVerdict{};
  });
  uint64_t executed = 0;
  cpu_->SetInstructionHook([&](uint64_t) {
    executed += Take().count + 1;
    cpu_->SkipSequential(UINT64_MAX, /*across=*/false, /*ends=*/false);
  });
  CpuState st = RunFrom(Pm32(0));
  executed += Take().count;
  EXPECT_EQ(st.rip, 0x111u);
  EXPECT_EQ(st.gpr[kRcx], 0u);
  using O = TcgCpu::AccessOwner;
  ASSERT_GE(owners.size(), 2u);
  EXPECT_EQ(owners[0], O::kInBulk);
  EXPECT_EQ(owners[1], O::kObserved);  // the IRETD alone
  EXPECT_EQ(cpu_->stats().latency_reruns, 1u);
  EXPECT_EQ(cpu_->stats().latency_counted_at_access, 0u);
  EXPECT_EQ(executed, 1u + 40 * 6 + 1);  // each instruction once: MOV, 40 x 6, HLT
}

TEST_F(TcgLatencyLoadTest, WhileTheCodeHookSkipsTheBoundaryAfterTheInstructionIsReported) {
  // Blocks run with the code hook, skipping (no one hook a block): the
  // load is taken again at once, kObserved, and the next boundary, the
  // INC's, is reported instead of skipped. Nothing runs again.
  Recreate(std::chrono::milliseconds(0), /*hook_per_block=*/false);
  RunTakingTheLoadAgainObserved();
  EXPECT_EQ(Reported(kAddAt), 0u);
  EXPECT_EQ(Reported(kIncAt), 1u);
  EXPECT_EQ(executed_, 202u);
  EXPECT_EQ(cpu_->stats().latency_reruns, 0u);
  EXPECT_EQ(cpu_->stats().latency_unskips, 1u);
}

TEST_F(TcgLatencyLoadTest, AtABlocksFirstInstructionItRunsAgainAloneAsTheBlock) {
  // The MOV's load, the first access of iteration 31's block: the MOV runs
  // again alone; its boundary (L, that block's start) was reported before it
  // was left and is not reported again; the ADD's is, after the MOV alone.
  const CpuState st = RunWithLatencyAt(UINT64_MAX, 0x800);
  EXPECT_EQ(st.gpr[kRbx], 40u);
  EXPECT_EQ(Read32(0x804), 120u);
  EXPECT_EQ(executed_, 202u);
  // L: iterations 2-40 (the first block runs into iteration 1's); one
  // report has the MOV as its last instruction: the ADD's, after it ran alone.
  EXPECT_EQ(Reported(kL), 39u);
  EXPECT_EQ(std::count(lasts_.begin(), lasts_.end(), kL), 1);
  EXPECT_EQ(cpu_->stats().latency_reruns, 1u);
}

TEST_F(TcgLatencyLoadTest, AStopBeforeTheRunAloneReportsNoBoundaryTwice) {
  // A stop asked for at the MOV's load (iteration 31, the block's first
  // instruction, its boundary reported) ends the run at the start of the
  // block that runs the MOV alone, before the MOV runs. The next run starts
  // with it and does not report L again: once a report names L as the
  // instruction just run, the tracer finds it led to L (Debian's kernel
  // under `perf c2c record` showed it: "cannot explain how `movsxd` at X led
  // to ... X"). As without the stop: L is reported for iterations 2-40,
  // one report (the ADD's) has the MOV as its last instruction, and every
  // instruction ran once.
  Code(kCodeRip, kThreeAccessesALoop);
  Write32(0x800, 3);
  uint64_t loads = 0;
  cpu_->SetDataAccessHook([&](uint64_t pa, uint32_t, uint8_t, bool write, TcgCpu::AccessOwner owner) {
    if (pa == 0x800 && !write && owner == TcgCpu::AccessOwner::kInBulk && ++loads == 31) {
      cpu_->RequestStop();
      return TcgCpu::AccessVerdict{.needs_instruction = true};
    }
    return TcgCpu::AccessVerdict{};
  });
  cpu_->SetInstructionHook([&](uint64_t la) {
    reports_.push_back(la);
    const TcgCpu::Skipped k = Take();
    lasts_.push_back(k.last);
    executed_ += k.count;
    cpu_->SkipSequential(UINT64_MAX, /*across=*/false, /*ends=*/false);
  });
  CpuState st = RunFrom(Pm32(0), TcgStop::kRequested);
  EXPECT_EQ(st.pc_linear(), kL);
  st = RunFrom(st);
  executed_ += Take().count + reports_.size();
  EXPECT_EQ(Read32(0x804), 120u);
  EXPECT_EQ(st.gpr[kRbx], 40u);
  EXPECT_EQ(Reported(kL), 39u);
  EXPECT_EQ(std::count(lasts_.begin(), lasts_.end(), kL), 1);
  EXPECT_EQ(executed_, 202u);
}

TEST_F(TcgLatencyLoadTest, WithEveryInstructionReportedTheLoadIsObservedAtOnce) {
  // A skip limit of 0: every boundary is reported, every access kObserved.
  const CpuState st = RunWithLatencyAt(0);
  EXPECT_EQ(Read32(0x804), 120u);
  EXPECT_EQ(st.gpr[kRbx], 40u);
  for (const Offer& o : offers_) EXPECT_EQ(o.owner, TcgCpu::AccessOwner::kObserved);
  EXPECT_EQ(offers_.size(), 120u);
  EXPECT_EQ(cpu_->stats().latency_reruns, 0u);
}

}  // namespace
}  // namespace vbts::vcpu::testing
