// machine_kvmtest.cc: whole-machine runs of tiny hand-assembled guests in real
// KVM: guest exit status, COM1 output, triple fault, HLT with IF=0, timeout,
// unclaimed ports and MMIO. Images are built here as a.out-kludge Multiboot
// files (header at offset 0, code at offset 32, loaded at 1 MiB).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/testing/status_matchers.h"
#include "base/exit_status.h"
#include "vmm/host_probe.h"
#include "vmm/kvm_vm.h"
#include "vmm/machine.h"

namespace vbts::vmm {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kLoad = 0x100000;

// Multiboot header with the address fields (flag 16), then `code`.
std::vector<uint8_t> AoutImage(const std::vector<uint8_t>& code) {
  const uint32_t magic = 0x1BADB002, flags = 1u << 16;
  const uint32_t hdr[8] = {magic, flags, 0u - magic - flags, kLoad, kLoad, 0, 0, kLoad + 32};
  std::vector<uint8_t> img(reinterpret_cast<const uint8_t*>(hdr), reinterpret_cast<const uint8_t*>(hdr) + 32);
  img.insert(img.end(), code.begin(), code.end());
  return img;
}

class MachineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "no /dev/kvm";
    absl::StatusOr<Kvm> kvm = Kvm::Open();
    ASSERT_THAT(kvm, testing::IsOk());
    kvm_.emplace(std::move(*kvm));
    absl::StatusOr<vcpu::HostFacts> facts = ProbeHost(*kvm_);
    ASSERT_THAT(facts, testing::IsOk());
    facts_ = *facts;
  }

  // Runs `code` as a guest; returns the result and fills output_ with COM1 bytes.
  RunResult RunCode(const std::vector<uint8_t>& code, double timeout = 10) {
    char path[] = "/tmp/vbts-machine-test-XXXXXX";
    int fd = mkstemp(path);
    std::vector<uint8_t> img = AoutImage(code);
    EXPECT_EQ(write(fd, img.data(), img.size()), static_cast<ssize_t>(img.size()));
    close(fd);
    int pipefd[2];
    EXPECT_EQ(pipe2(pipefd, O_NONBLOCK), 0);
    MachineConfig config;
    config.image_path = path;
    config.timeout_seconds = timeout;
    config.output_fd = pipefd[1];
    RunResult r;
    absl::StatusOr<std::unique_ptr<Machine>> m = Machine::Create(config, *kvm_, facts_);
    EXPECT_THAT(m, testing::IsOk());
    if (m.ok()) r = (*m)->Run();
    unlink(path);
    close(pipefd[1]);
    output_.clear();
    char buf[256];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof buf)) > 0) output_.append(buf, n);
    close(pipefd[0]);
    return r;
  }

  std::optional<Kvm> kvm_;
  vcpu::HostFacts facts_;
  std::string output_;
};

TEST_F(MachineTest, HelloPrintsAndExitsWithGuestStatus) {
  RunResult r = RunCode({
      0x66, 0xBA, 0xF8, 0x03,  // mov dx, 0x3f8
      0xB0, 'h', 0xEE,         // mov al, 'h'; out dx, al
      0xB0, 'i', 0xEE,         // mov al, 'i'; out dx, al
      0xB8, 0x2A, 0, 0, 0,     // mov eax, 42
      0xE7, 0xF4,              // out 0xf4, eax
      0xF4,                    // hlt (not reached)
  });
  EXPECT_EQ(r.end, RunEnd::kGuestExit);
  EXPECT_EQ(r.exit_status, (42 << 1) | 1);  // isa-debug-exit: (v << 1) | 1 = 85
  EXPECT_EQ(r.message, "");
  EXPECT_EQ(output_, "hi");
}

TEST_F(MachineTest, EntryStateIsMultiboot) {
  // Exit value = 1 if EAX == 0x2BADB002 and EBX points at the info (0x9000), else 0.
  RunResult r = RunCode({
      0x3D, 0x02, 0xB0, 0xAD, 0x2B,        // cmp eax, 0x2BADB002
      0x75, 0x0E,                          // jne fail (+14)
      0x81, 0xFB, 0x00, 0x90, 0x00, 0x00,  // cmp ebx, 0x9000
      0x75, 0x06,                          // jne fail (+6)
      0xB8, 0x01, 0, 0, 0,                 // mov eax, 1
      0xEB, 0x02,                          // jmp out
      0x31, 0xC0,                          // fail: xor eax, eax
      0xE7, 0xF4,                          // out: out 0xf4, eax
  });
  EXPECT_EQ(r.exit_status, 3);  // (1 << 1) | 1
}

TEST_F(MachineTest, TripleFaultEndsWith120) {
  // ud2 with the boot IDT (base 0, all gates zero = not present): #UD -> #NP ->
  // #DF -> shutdown.
  RunResult r = RunCode({0x0F, 0x0B});
  EXPECT_EQ(r.end, RunEnd::kTripleFault);
  EXPECT_EQ(r.exit_status, kExitTripleFault);
  EXPECT_THAT(r.message, HasSubstr("triple fault"));
  EXPECT_THAT(r.message, HasSubstr("pm32 CPL0"));
}

TEST_F(MachineTest, HaltWithInterruptsDisabledEndsWith122) {
  RunResult r = RunCode({0xFA, 0xF4});  // cli; hlt
  EXPECT_EQ(r.end, RunEnd::kHaltedIfClear);
  EXPECT_EQ(r.exit_status, kExitHaltedIfClear);
  EXPECT_THAT(r.message, HasSubstr("halted with interrupts disabled"));
}

TEST_F(MachineTest, SpinEndsWithTimeout124) {
  RunResult r = RunCode({0xEB, 0xFE}, /*timeout=*/0.3);  // jmp $
  EXPECT_EQ(r.end, RunEnd::kTimeout);
  EXPECT_EQ(r.exit_status, kExitTimeout);
  EXPECT_THAT(r.message, HasSubstr("timed out after 0.3 s"));
  EXPECT_THAT(r.message, HasSubstr("CS:EIP=0008:00100020"));  // the jmp at load address + 32
}

TEST_F(MachineTest, UnclaimedPortReadsAllOnes) {
  RunResult r = RunCode({
      0xE4, 0x80,        // in al, 0x80
      0x0F, 0xB6, 0xC0,  // movzx eax, al
      0xE7, 0xF4,        // out 0xf4, eax
  });
  EXPECT_EQ(r.exit_status, 0xFF);  // ((0xFF << 1) | 1) & 0xFF
}

TEST_F(MachineTest, UnclaimedMmioReadsAllOnes) {
  RunResult r = RunCode({
      0xA1, 0x00, 0x00, 0xB0, 0xFE,  // mov eax, [0xFEB00000] (nothing there)
      0x83, 0xF8, 0xFF,              // cmp eax, -1
      0x0F, 0x94, 0xC0,              // sete al
      0x0F, 0xB6, 0xC0,              // movzx eax, al
      0xE7, 0xF4,                    // out 0xf4, eax
  });
  EXPECT_EQ(r.exit_status, 3);
}

TEST_F(MachineTest, BadImageIsRejectedWithField) {
  MachineConfig config;
  config.image_path = "/nonexistent/vbts-image";
  EXPECT_THAT(Machine::Create(config, *kvm_, facts_),
              testing::StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/vbts-image")));
}

TEST_F(MachineTest, UnknownCpuModelIsRejected) {
  MachineConfig config;
  config.image_path = "/dev/null";
  config.cpu_model = "pentium";
  EXPECT_THAT(Machine::Create(config, *kvm_, facts_),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--cpu=pentium")));
}

// A WRMSR retires under the configuration it leaves (docs/pmu-model.md, "The
// WRMSR itself"): PMC0 counts the WRMSR of GLOBAL_CTRL that enables it - here
// the guest is not stepped before it, so the tracer reports it from the MSR
// exit alone - and a WRMSR of PMC0 while it counts, on top of the value
// written; not the WRMSR that disables it. The guest exits with PMC0.
TEST_F(MachineTest, WrmsrIsCountedUnderTheConfigurationItLeaves) {
  RunResult r = RunCode({
      0xB9, 0x86, 0x01, 0, 0,        // mov ecx, 0x186 (PERFEVTSEL0)
      0xB8, 0xC0, 0x00, 0x42, 0x00,  // mov eax, C0H | OS | EN
      0x31, 0xD2,                    // xor edx, edx
      0x0F, 0x30,                    // wrmsr (GLOBAL_CTRL still 0: nothing counts)
      0xB9, 0x8F, 0x03, 0, 0,        // mov ecx, 0x38F (GLOBAL_CTRL)
      0xB8, 0x01, 0, 0, 0,           // mov eax, 1
      0x0F, 0x30,                    // wrmsr: enables PMC0, counted      -> 1
      0x90,                          // nop                               -> 2
      0xB9, 0xC1, 0, 0, 0,           // mov ecx, 0xC1 (PMC0)              -> 3
      0xB8, 0x64, 0, 0, 0,           // mov eax, 100                      -> 4
      0x0F, 0x30,                    // wrmsr: PMC0 = 100, counted        -> 101
      0x90,                          // nop                               -> 102
      0xB9, 0x8F, 0x03, 0, 0,        // mov ecx, 0x38F                    -> 103
      0x31, 0xC0,                    // xor eax, eax                      -> 104
      0x0F, 0x30,                    // wrmsr: disables PMC0, not counted
      0x90,                          // nop: not counted
      0xB9, 0xC1, 0, 0, 0,           // mov ecx, 0xC1
      0x0F, 0x32,                    // rdmsr: eax = 104
      0xE7, 0xF4,                    // out 0xf4, eax
      0xF4,                          // hlt (not reached)
  });
  EXPECT_EQ(r.end, RunEnd::kGuestExit) << r.message;
  EXPECT_EQ(r.exit_status, (104 << 1) | 1) << r.details;
}

// A WRMSR that leaves a counter counting can be the instruction that wraps
// it: PMC0 = -1 (a 32-bit write, sign-extended), the enabling WRMSR wraps it
// and sets GLOBAL_STATUS bit 0 before the next instruction runs.
TEST_F(MachineTest, EnablingWrmsrCanOverflowTheCounter) {
  RunResult r = RunCode({
      0xB9, 0xC1, 0, 0, 0,           // mov ecx, 0xC1
      0xB8, 0xFF, 0xFF, 0xFF, 0xFF,  // mov eax, 0xFFFFFFFF
      0x31, 0xD2,                    // xor edx, edx
      0x0F, 0x30,                    // wrmsr: PMC0 = 2^48 - 1 (not counting)
      0xB9, 0x86, 0x01, 0, 0,        // mov ecx, 0x186
      0xB8, 0xC0, 0x00, 0x42, 0x00,  // mov eax, C0H | OS | EN (no INT)
      0x0F, 0x30,                    // wrmsr
      0xB9, 0x8F, 0x03, 0, 0,        // mov ecx, 0x38F
      0xB8, 0x01, 0, 0, 0,           // mov eax, 1
      0x0F, 0x30,                    // wrmsr: enables PMC0, counted: wraps to 0
      0xB9, 0x8E, 0x03, 0, 0,        // mov ecx, 0x38E (GLOBAL_STATUS)     -> 1
      0x0F, 0x32,                    // rdmsr: eax = 1 (PMC0 overflowed)  -> 2
      0x89, 0xC3,                    // mov ebx, eax                      -> 3
      0xB9, 0x8F, 0x03, 0, 0,        // mov ecx, 0x38F                    -> 4
      0x31, 0xC0,                    // xor eax, eax                      -> 5 (edx = 0 from rdmsr)
      0x0F, 0x30,                    // wrmsr: disables, not counted
      0xB9, 0xC1, 0, 0, 0,           // mov ecx, 0xC1
      0x0F, 0x32,                    // rdmsr: eax = 5
      0xC1, 0xE0, 0x04,              // shl eax, 4
      0x09, 0xD8,                    // or eax, ebx: 0x51
      0xE7, 0xF4,                    // out 0xf4, eax
      0xF4,                          // hlt
  });
  EXPECT_EQ(r.end, RunEnd::kGuestExit) << r.message;
  EXPECT_EQ(r.exit_status, (0x51 << 1) | 1) << r.details;
}

// `vbts record --max-records`: once the transfer sink says it wants no more
// (the recorder at its limit), vbts stops single-stepping for it. int_lm64
// runs ~37.8 k instructions (docs/benchmarks.md); with a sink that stops
// after 10 calls the tracer follows only the instructions up to then.
// The x87/SSE registers that move with the vCPU between the engines
// (docs/tcg-engine.md, "Switching engines"): what KVM_SET_FPU takes,
// KVM_GET_FPU gives back, field by field.
// --engine=auto for a run that is not traced from its start: the TCG engine
// on a PVM host (whose KVM runs guest ring 0 and 32-bit code in its
// instruction emulator, which TCG outruns: docs/benchmarks.md), KVM on
// VT-x/SVM hosts. `vbts run -v`'s details show the TCG engine's counts only
// when it ran.
TEST_F(MachineTest, AutoEngineIsTcgOnPvmHostsAndKvmElsewhere) {
  MachineConfig config;
  config.image_path = VBTS_GUEST_IMAGE_DIR "/hello.elf";
  config.output_fd = open("/dev/null", O_WRONLY);
  absl::StatusOr<std::unique_ptr<Machine>> m = Machine::Create(config, *kvm_, facts_);
  ASSERT_THAT(m, testing::IsOk());
  const RunResult r = (*m)->Run();
  close(config.output_fd);
  EXPECT_EQ(r.exit_status, 1) << r.message;
  const bool tcg = r.details.find("tcg: ") != std::string::npos;
  EXPECT_EQ(tcg, facts_.kind == vcpu::HostKind::kPvm) << r.details;
}

TEST_F(MachineTest, KvmFpuStateRoundTrips) {
  absl::StatusOr<std::unique_ptr<Vm>> vm = Vm::Create(*kvm_);
  ASSERT_THAT(vm, testing::IsOk());
  absl::StatusOr<std::unique_ptr<vcpu::KvmVcpu>> cpu = (*vm)->CreateVcpu(0, facts_.sync_regs);
  ASSERT_THAT(cpu, testing::IsOk());
  vcpu::FpuState f;
  f.fcw = 0x027F;                  // 53-bit precision, all exceptions masked
  f.fsw = 6u << 11;                // TOP = 6
  f.ftw = 0xC0;                    // physical registers 6 and 7 in use
  for (int i = 0; i < 8; i++)
    for (int b = 0; b < 10; b++) f.st[i][b] = static_cast<uint8_t>(0x10 * i + b + 1);
  for (int i = 0; i < 16; i++)
    for (int b = 0; b < 16; b++) f.xmm[i][b] = static_cast<uint8_t>(i * 16 + b);
  f.mxcsr = 0x1FA0;                // masks, and the precision flag
  ASSERT_THAT((*cpu)->SetFpu(f), testing::IsOk());
  absl::StatusOr<vcpu::FpuState> back = (*cpu)->GetFpu();
  ASSERT_THAT(back, testing::IsOk());
  EXPECT_EQ(back->fcw, f.fcw);
  EXPECT_EQ(back->fsw, f.fsw);
  EXPECT_EQ(back->ftw, f.ftw);
  EXPECT_EQ(back->mxcsr, f.mxcsr);
  for (int i = 0; i < 8; i++) EXPECT_EQ(std::memcmp(back->st[i], f.st[i], 10), 0) << "ST(" << i << ")";
  for (int i = 0; i < 16; i++) EXPECT_EQ(std::memcmp(back->xmm[i], f.xmm[i], 16), 0) << "XMM" << i;
}

// The IOAPIC state the TCG engine's model takes from KVM and gives back
// (Vm::GetIoapic/SetIoapic): every field KVM keeps survives the round trip.
TEST_F(MachineTest, KvmIoapicStateRoundTrips) {
  absl::StatusOr<std::unique_ptr<Vm>> vm = Vm::Create(*kvm_);
  ASSERT_THAT(vm, testing::IsOk());
  ASSERT_THAT((*vm)->CreateIrqchip(), testing::IsOk());
  absl::StatusOr<vcpu::IoapicState> reset = (*vm)->GetIoapic();
  ASSERT_THAT(reset, testing::IsOk());
  EXPECT_EQ(reset->base_address, vcpu::kIoapicDefaultBase);
  for (int i = 0; i < vcpu::kIoapicPins; i++) EXPECT_EQ(reset->redirtbl[i] & (1u << 16), 1u << 16) << "pin " << i;
  vcpu::IoapicState s = *reset;
  s.id = 3;
  s.ioregsel = 0x1D;
  s.irr = 1u << 14;
  s.redirtbl[14] = (uint64_t{1} << 56) | (1u << 15) | (1u << 14) | 0x77;  // level, Remote IRR, vector 77H
  s.redirtbl[2] = 0x30;
  ASSERT_THAT((*vm)->SetIoapic(s), testing::IsOk());
  absl::StatusOr<vcpu::IoapicState> back = (*vm)->GetIoapic();
  ASSERT_THAT(back, testing::IsOk());
  EXPECT_EQ(back->id, s.id);
  EXPECT_EQ(back->ioregsel, s.ioregsel);
  EXPECT_EQ(back->irr, s.irr);
  EXPECT_EQ(back->redirtbl, s.redirtbl);
}

// The in-kernel PIT's state the TCG engine's model takes and gives back
// (Vm::GetPit/SetPit): the programmed fields survive the round trip.
TEST_F(MachineTest, KvmPitStateRoundTrips) {
  absl::StatusOr<std::unique_ptr<Vm>> vm = Vm::Create(*kvm_);
  ASSERT_THAT(vm, testing::IsOk());
  ASSERT_THAT((*vm)->CreateIrqchip(), testing::IsOk());
  ASSERT_THAT((*vm)->CreatePit(), testing::IsOk());
  absl::StatusOr<std::pair<std::array<vcpu::PitChannelState, 3>, bool>> reset = (*vm)->GetPit();
  ASSERT_THAT(reset, testing::IsOk());
  EXPECT_EQ(reset->first[2].gate, 0);  // channel 2's gate is port 61H bit 0, low at reset
  std::array<vcpu::PitChannelState, 3> ch = reset->first;
  ch[0].count = 11932;
  ch[0].mode = 2;
  ch[0].rw_mode = 3;
  ch[0].read_state = 3;
  ch[0].write_state = 3;
  ch[2].mode = 0;
  ch[2].count = 1000;
  ch[2].gate = 1;
  ASSERT_THAT((*vm)->SetPit(ch, /*speaker=*/true), testing::IsOk());
  absl::StatusOr<std::pair<std::array<vcpu::PitChannelState, 3>, bool>> back = (*vm)->GetPit();
  ASSERT_THAT(back, testing::IsOk());
  EXPECT_EQ(back->first[0].count, 11932u);
  EXPECT_EQ(back->first[0].mode, 2);
  EXPECT_EQ(back->first[0].rw_mode, 3);
  EXPECT_EQ(back->first[2].count, 1000u);
  EXPECT_EQ(back->first[2].gate, 1);
  EXPECT_TRUE(back->second);
}

TEST_F(MachineTest, SinkThatWantsNoMoreStopsTheStepping) {
  auto boundaries = [](const std::string& details) {
    const size_t at = details.find("tracer: ");
    return at == std::string::npos ? -1L : std::strtol(details.c_str() + at + 8, nullptr, 10);
  };
  for (int limit : {10, 0}) {  // 0: a sink that wants everything
    MachineConfig config;
    config.image_path = VBTS_GUEST_IMAGE_DIR "/int_lm64.elf";
    config.output_fd = open("/dev/null", O_WRONLY);
    int calls = 0;
    config.transfer_sink = [&](const pmu::Branch&) { return limit == 0 || ++calls < limit; };
    absl::StatusOr<std::unique_ptr<Machine>> m = Machine::Create(config, *kvm_, facts_);
    ASSERT_THAT(m, testing::IsOk());
    const RunResult r = (*m)->Run();
    close(config.output_fd);
    EXPECT_EQ(r.exit_status, 1) << r.message;  // the guest's own verdict either way
    if (limit) {
      EXPECT_EQ(calls, 10);  // never called again after it said no
      EXPECT_LT(boundaries(r.details), 20) << r.details;
    } else {
      // Every instruction followed (reported one by one under KVM, in bulk
      // per block under TCG, docs/tcg-engine.md): the retired count.
      const size_t at = r.details.find(" boundaries, ");
      const long insns = at == std::string::npos ? -1L : std::strtol(r.details.c_str() + at + 13, nullptr, 10);
      EXPECT_GT(insns, 30000) << r.details;
    }
  }
}

// --vpmu=passthrough on a host whose KVM cannot keep the guest's LBRs (this
// PVM host: kvm.enable_pmu=N): refused before any VM exists, with the reason
// `vbts info` prints.
TEST_F(MachineTest, PassthroughIsRefusedWithTheHostsReason) {
  if (facts_.lbr_virtualization) GTEST_SKIP() << "this host's KVM virtualises LBRs: " << facts_.lbr_reason;
  MachineConfig config;
  config.image_path = "/dev/null";
  config.vpmu = "passthrough";
  EXPECT_THAT(Machine::Create(config, *kvm_, facts_),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(facts_.lbr_reason)));
}

// Host facts of an Intel Westmere host with kvm.enable_pmu=Y.
vcpu::HostFacts WestmereHostFacts(vcpu::HostFacts f) {
  f.cpu_vendor = "GenuineIntel";
  f.cpu_signature = 0x000206C2;
  f.enable_pmu = vcpu::Tristate::kYes;
  f.perf_capabilities_known = true;
  f.perf_capabilities = 0x11C3;
  f.lbr_virtualization = true;
  return f;
}

TEST_F(MachineTest, PassthroughNeedsAModelKvmCanGiveLbrsTo) {
  MachineConfig config;
  config.image_path = "/dev/null";
  config.vpmu = "passthrough";
  config.cpu_model = "core-duo";  // no PDCM: KVM takes no PERF_CAPABILITIES, so no LBRs
  EXPECT_THAT(Machine::Create(config, *kvm_, WestmereHostFacts(facts_)),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("PDCM")));
}

// Host facts that claim LBR virtualisation on a KVM that has none: vbts
// gets as far as giving KVM the guest's PERF_CAPABILITIES LBR format
// (0x11C3 & 0x3F = 3) and reports KVM's refusal instead of running a guest
// whose LBR MSRs nobody would answer. (On a real VT-x host KVM refuses it
// too: the guest model 06_2CH is not the host's.)
TEST_F(MachineTest, PassthroughThatKvmRefusesEndsWithKvmsAnswer) {
  if (facts_.lbr_virtualization) GTEST_SKIP() << "this host's KVM virtualises LBRs: " << facts_.lbr_reason;
  MachineConfig config;
  config.image_path = VBTS_GUEST_IMAGE_DIR "/hello.elf";
  config.vpmu = "passthrough";
  EXPECT_THAT(Machine::Create(config, *kvm_, WestmereHostFacts(facts_)),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("the host KVM refused IA32_PERF_CAPABILITIES=0x3")));
}

}  // namespace
}  // namespace vbts::vmm
