// machine.cc: wiring and the run loop of one guest machine.
#include "vmm/machine.h"

#include <poll.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "pmu/feature_msrs.h"
#include "pmu/passthrough.h"
#include "base/status_macros.h"
#include "vcpu/descriptors.h"
#include "base/exit_status.h"
#include "vmm/firmware_mtrrs.h"
#include "vmm/host_probe.h"
#include "vmm/kick_timer.h"
#include "vmm/loader.h"
#include "vmm/multiboot_info.h"
#include "vmm/acpi_tables.h"
#include "vmm/smbios_tables.h"
#include "vmm/linux_boot.h"
#include "vmm/pvh_boot.h"
#include "vmm/stop_signals.h"

namespace vbts::vmm {
namespace {

// Where vbts puts its boot GDT (null, flat 32-bit code 0x08, flat data 0x10)
// and the initial ESP below it; see docs/guest-abi.md.
constexpr uint64_t kBootGdt = 0x7000;
constexpr uint16_t kBootCs = 0x08, kBootDs = 0x10;
constexpr uint64_t kBootStack = 0x7000;
// How often KVM_RUN is forced back to user space to check --timeout and a
// vCPU halted with IF=0 (costs one exit per period).
constexpr int kKickPeriodMs = 10;

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Sleeps `ns` of host time, through signals (the kick timer's).
void SleepNs(uint64_t ns) {
  timespec left{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

// IA32_APIC_BASE: the machine's own while in TCG (SDM vol. 3A 10.4.4).
constexpr uint32_t kMsrTsc = 0x10;
constexpr uint32_t kMsrApicBase = 0x1B;
constexpr uint32_t kMsrTscDeadline = 0x6E0;  // SDM vol. 3A 10.5.4.1, with CPUID.1:ECX[24]
constexpr uint64_t kApicBaseEn = 1ull << 11, kApicBaseExtd = 1ull << 10;  // SDM 10.4.4, 10.12.1
bool IsX2apicMsr(uint32_t index) { return index >= 0x800 && index <= 0x8FF; }
// LAPIC registers (page offsets) whose write can move the timer's next expiry.
bool MovesLapicTimer(uint32_t reg) {
  return reg == vcpu::kApicRegLvtTimer || reg == vcpu::kApicRegTimerInitialCount || reg == vcpu::kApicRegTimerDivide;
}

// A virtual-PMU or feature-MSR answer as the TCG engine takes it.
vcpu::TcgDevices::Msr TcgMsr(const pmu::MsrResult& r, uint64_t& value) {
  value = r.value;
  return r.gp ? vcpu::TcgDevices::Msr::kGp : vcpu::TcgDevices::Msr::kDone;
}

// The clock the TCG engine's LAPIC timer runs on.
uint64_t NowNs() { return MonotonicNs(); }  // the clock of COM1's deadline too

// The MSRs KVM must send to vbts for --vpmu=`vpmu`, as KVM filter ranges.
std::vector<MsrRange> PmuDenyList(const std::string& vpmu) {
  const pmu::VirtualPmu probe(pmu::CpuModels().front(),
                              pmu::VirtualPmuOptions{.lbr_in_kernel = vpmu == "passthrough"});
  // Vm::SetMsrFilter sorts the ranges and packs neighbours into KVM's 16.
  std::vector<MsrRange> deny;
  for (const std::vector<pmu::MsrRange>& owner : {probe.InterceptedMsrs(), pmu::FeatureMsrs::Intercepted()})
    for (const pmu::MsrRange& r : owner) deny.push_back({r.first, r.last - r.first + 1});
  return deny;
}

// Byte-wide ports of a device model (the 8259 pair, the 8254), each byte
// of an access in turn at its own port number, then `after` (the machine's
// reaction to the device's new state).  Only the TCG engine's accesses reach
// them: under KVM the in-kernel devices answer these ports.
class BytePorts : public PioDevice {
 public:
  BytePorts(uint16_t base, std::function<uint8_t(uint16_t port)> read,
            std::function<void(uint16_t port, uint8_t value)> write, std::function<void()> after)
      : base_(base), read_(std::move(read)), write_(std::move(write)), after_(std::move(after)) {}
  void Read(uint16_t offset, absl::Span<uint8_t> data) override {
    for (size_t i = 0; i < data.size(); i++) data[i] = read_(static_cast<uint16_t>(base_ + offset + i));
    after_();  // an 8259 poll-mode read acknowledges
  }
  void Write(uint16_t offset, absl::Span<const uint8_t> data) override {
    for (size_t i = 0; i < data.size(); i++) write_(static_cast<uint16_t>(base_ + offset + i), data[i]);
    after_();
  }

 private:
  uint16_t base_;
  std::function<uint8_t(uint16_t)> read_;
  std::function<void(uint16_t, uint8_t)> write_;
  std::function<void()> after_;
};

}  // namespace

absl::StatusOr<PreparedVm> PrepareVm(const Kvm& kvm, const std::string& vpmu) {
  PreparedVm p;
  VBTS_ASSIGN_OR_RETURN(p.vm, Vm::Create(kvm));
  VBTS_RETURN_IF_ERROR(p.vm->SetMsrFilter(PmuDenyList(vpmu)));
  p.vpmu = vpmu;
  return p;
}

Machine::Machine(const MachineConfig& config, const vcpu::HostFacts& facts) : config_(config), facts_(facts) {}
Machine::~Machine() {
  KickTimer::Stop();
  if (branches_file_) std::fclose(branches_file_);
  if (insns_file_) std::fclose(insns_file_);
}

absl::StatusOr<std::unique_ptr<Machine>> Machine::Create(const MachineConfig& config, const Kvm& kvm,
                                                         const vcpu::HostFacts& facts,
                                                         std::optional<PreparedVm> prepared) {
  std::unique_ptr<Machine> m(new Machine(config, facts));
  VBTS_RETURN_IF_ERROR(m->Setup(kvm, std::move(prepared)));
  // The host's default timer slack (50 us) would make every sleep of the run
  // loop, and so every timer interrupt of a halted guest, up to that late
  // (kvm-unit-tests' tscdeadline_latency: ~80 us on the TCG engine). Before
  // the syscall filter, which has no prctl.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  return m;
}

absl::Status Machine::Setup(const Kvm& kvm, std::optional<PreparedVm> prepared) {
  model_ = pmu::FindCpuModel(config_.cpu_model);
  if (model_ && config_.vpmu == "off") {
    // No PMU, debug store or branch recording: CPUID hides them and the
    // virtual PMU answers #GP for their MSRs, as a CPU without them does.
    own_model_ = model_->WithoutPmu();
    model_ = &*own_model_;
  }
  if (!model_)
    return absl::InvalidArgumentError(absl::StrFormat("--cpu=%s: unknown CPU model (known: %s)", config_.cpu_model,
                                                      pmu::CpuModelNames()));
  if ((model_->Cpuid(1, 0).ecx & pmu::kCpuid1EcxTscDeadline) && !facts_.cap_tsc_deadline_timer)
    std::fprintf(stderr,
                 "vbts: warning: this host's KVM lacks KVM_CAP_TSC_DEADLINE_TIMER: on the KVM engine the %s "
                 "model's TSC-deadline timer (CPUID.1:ECX[24]) does not fire; the TCG engine's does\n",
                 model_->name.c_str());
  if (config_.vpmu == "passthrough") {
    // The host KVM keeps the LBRs; it does so only for a guest with the
    // host's CPUID model and LBR format (pmu/passthrough.h).
    absl::StatusOr<pmu::CpuModel> m =
        facts_.lbr_virtualization ? pmu::PassthroughModel(*model_, HostPmuOf(facts_))
                                  : absl::FailedPreconditionError(facts_.lbr_reason);
    if (!m.ok())
      return absl::FailedPreconditionError(
          absl::StrCat("--vpmu=passthrough needs a host KVM that virtualises LBRs itself; this one cannot (",
                       m.status().message(), "). Use --vpmu=emulated (the default)."));
    own_model_ = *std::move(m);
    model_ = &*own_model_;
  } else if (config_.vpmu != "emulated" && config_.vpmu != "off") {
    return absl::InvalidArgumentError(
        absl::StrFormat("--vpmu=%s: expected emulated, passthrough or off", config_.vpmu));
  }
  VBTS_ASSIGN_OR_RETURN(std::vector<uint8_t> image, ReadImageFile(config_.image_path));
  std::vector<LoadedModule> modules;
  if (!config_.initrd.empty()) {
    VBTS_ASSIGN_OR_RETURN(std::vector<ModuleSpec> specs, ParseInitrd(config_.initrd));
    for (ModuleSpec& m : specs) {
      // An empty module is valid (QEMU loads it as mod_start == mod_end).
      VBTS_ASSIGN_OR_RETURN(std::vector<uint8_t> data,
                            ReadWholeFile(m.path, "--initrd module", kMaxImageFileSize, /*allow_empty=*/true));
      modules.push_back(LoadedModule{std::move(m.cmdline), std::move(data)});
    }
  }
  VBTS_ASSIGN_OR_RETURN(ram_, GuestMemory::Create(config_.mem_bytes));

  // The image first; the boot information goes at 0x9000 or, where the image
  // covers that page, right after the image (MultibootInfoPage).
  LoaderLimits limits;
  limits.reserved.push_back({kBootStack - 0x1000, kBootGdt + 0x20, "vbts boot stack and GDT"});
  VBTS_ASSIGN_OR_RETURN(LoadedImage img, LoadKernelImage(image, config_.image_path, *ram_, limits));
  code_ = img.code;
  entry_ = img.entry;
  uint64_t kernel_end = 0;
  for (const GpaRange& r : img.ranges) kernel_end = std::max(kernel_end, r.end);
  // The ACPI and SMBIOS tables where firmware puts them, each unless the
  // image or the boot information page (after an image that covers 0x9000)
  // is on its page.
  const auto firmware_page_free = [&](uint64_t gpa, uint64_t size) {
    return std::none_of(img.ranges.begin(), img.ranges.end(),
                        [&](const GpaRange& r) { return r.Overlaps(gpa, gpa + size); }) &&
           MultibootInfoPage(img.ranges) != gpa;
  };
  uint64_t rsdp = 0;
  if (firmware_page_free(kAcpiTablesGpa, kAcpiTablesSize) && kAcpiTablesGpa + kAcpiTablesSize <= ram_->size()) {
    VBTS_RETURN_IF_ERROR(WriteAcpiTables(
        *ram_, AcpiOptions{.dmar = config_.HasDevice("intel-iommu"), .pci_root = config_.HasDevice("edu")}));
    rsdp = kAcpiTablesGpa;
    acpi_tables_ = true;
  }
  if (firmware_page_free(kSmbiosGpa, kSmbiosSize)) {  // (WriteSmbiosTables: nothing where RAM ends before)
    const pmu::CpuidResult id = model_->Cpuid(1, 0);
    SmbiosInfo smbios{VBTS_VERSION, model_->name, {}, id.eax, id.edx,
                      (model_->Cpuid(0x80000001, 0).edx & (1u << 29)) != 0};
    for (uint32_t leaf = 0x80000002; leaf <= 0x80000004; leaf++) {
      const pmu::CpuidResult r = model_->Cpuid(leaf, 0);
      for (uint32_t w : {r.eax, r.ebx, r.ecx, r.edx})
        for (int i = 0; i < 4; i++) smbios.cpu_brand.push_back(static_cast<char>(w >> (8 * i)));
    }
    smbios.cpu_brand = smbios.cpu_brand.substr(0, smbios.cpu_brand.find('\0'));
    VBTS_RETURN_IF_ERROR(WriteSmbiosTables(*ram_, smbios));
  }
  uint32_t boot_info = 0;
  if (img.boot == BootProtocol::kLinux) {
    VBTS_ASSIGN_OR_RETURN(LinuxBootInfo lb, WriteLinuxBootParams(*ram_, image, *img.linux_header, config_.append,
                                                                 MultibootInfoPage(img.ranges), modules, rsdp));
    boot_info = lb.boot_params_gpa;
  } else if (img.boot == BootProtocol::kPvh) {
    VBTS_ASSIGN_OR_RETURN(PvhBootInfo pvh, WritePvhStartInfo(*ram_, config_.append, MultibootInfoPage(img.ranges),
                                                             kernel_end, modules, rsdp));
    boot_info = pvh.start_info_gpa;
  } else {
    VBTS_ASSIGN_OR_RETURN(MultibootInfo mbi, WriteMultibootInfo(*ram_, config_.image_path, config_.append,
                                                                MultibootInfoPage(img.ranges)));
    for (const GpaRange& r : mbi.reserved) limits.reserved.push_back(r);
    for (const GpaRange& r : limits.reserved) kernel_end = std::max(kernel_end, r.end);  // never below the boot info
    VBTS_RETURN_IF_ERROR(WriteMultibootModules(*ram_, mbi.info_gpa, kernel_end, modules).status());
    boot_info = mbi.info_gpa;
  }

  // A VM made ahead (PrepareVm) already has the MSR filter of this --vpmu mode.
  const bool filtered = prepared && prepared->vm && prepared->vpmu == config_.vpmu;
  if (filtered) {
    vm_ = std::move(prepared->vm);
  } else {
    VBTS_ASSIGN_OR_RETURN(vm_, Vm::Create(kvm));
  }
  VBTS_RETURN_IF_ERROR(vm_->SetMemoryRegion(0, 0, ram_->size(), ram_->host_base()));
  VBTS_RETURN_IF_ERROR(vm_->CreateIrqchip());
  // The 8254 in both engines: KVM's in kernel, vbts's model (vcpu/pit8254.h)
  // in TCG, moved with the vCPU.
  VBTS_RETURN_IF_ERROR(vm_->CreatePit());
  VBTS_ASSIGN_OR_RETURN(vcpu_, vm_->CreateVcpu(0, facts_.sync_regs));
  // CPUID leaves 15H/16H with the TSC frequency the vCPU has (the TCG
  // engine's clock runs at it too) over the LAPIC timer's clock as the
  // crystal (both engines' LAPICs count 1 GHz); without KVM's, they stay 0.
  if (absl::StatusOr<uint64_t> khz = vcpu_->TscKhz(); khz.ok()) {
    pmu::CpuModel m = model_->WithTscFrequency(*khz, vcpu::LapicConfig{}.bus_hz);
    own_model_ = std::move(m);
    model_ = &*own_model_;
  }

  // Guest CPUID: the model's table; the supervisor patches what KVM rewrites.
  std::vector<kvm_cpuid_entry2> cpuid;
  for (const pmu::CpuidLeaf& l : model_->leaves) {
    kvm_cpuid_entry2 e{};
    e.function = l.function;
    e.index = l.index;
    e.flags = l.indexed ? KVM_CPUID_FLAG_SIGNIFCANT_INDEX : 0;
    e.eax = l.eax;
    e.ebx = l.ebx;
    e.ecx = l.ecx;
    e.edx = l.edx;
    cpuid.push_back(e);
  }
  VBTS_RETURN_IF_ERROR(vcpu_->SetCpuid(cpuid));
  {  // The MTRRs firmware would have programmed (vmm/firmware_mtrrs.h).
    const bool has_80000008 = model_->Cpuid(0x80000000, 0).eax >= 0x80000008;
    const int maxphyaddr = has_80000008 ? static_cast<int>(model_->Cpuid(0x80000008, 0).eax & 0xFF) : 36;
    const std::vector<vcpu::MsrValue> mtrrs = FirmwareMtrrs(maxphyaddr);
    // Every KVM takes them (QEMU restores them so); one that did not would
    // leave KVM's blank reset state, which guests survive.
    if (absl::Status st = vcpu_->SetMsrs(mtrrs); !st.ok())
      std::fprintf(stderr, "vbts: warning: the host KVM refused the firmware's MTRRs (%s); the guest finds them blank\n",
                   std::string(st.message()).c_str());
  }
  if (config_.vpmu == "passthrough") {
    // After KVM_SET_CPUID2: KVM checks the LBR format against the guest's model.
    constexpr uint32_t kMsrPerfCapabilities = 0x345;
    const vcpu::MsrValue caps{kMsrPerfCapabilities, pmu::KernelPerfCapabilities(HostPmuOf(facts_))};
    absl::Status st = vcpu_->SetMsrs(absl::MakeConstSpan(&caps, 1));
    if (!st.ok())
      return absl::FailedPreconditionError(absl::StrFormat(
          "--vpmu=passthrough: the host KVM refused IA32_PERF_CAPABILITIES=0x%x for the guest (%s)", caps.value,
          st.message()));
  }

  uart_ = std::make_unique<Uart16550>([this](uint8_t c) { WriteGuestOutput(c); });
  debug_exit_ = std::make_unique<DebugExit>();
  VBTS_RETURN_IF_ERROR(pio_.Register(Uart16550::kCom1Port, Uart16550::kSize, uart_.get(), "COM1 16550"));
  VBTS_RETURN_IF_ERROR(pio_.Register(DebugExit::kPort, DebugExit::kSize, debug_exit_.get(), "isa-debug-exit"));
  acpi_pm_ = std::make_unique<AcpiPm>([this] { return DeviceNs(); });
  hpet_ = std::make_unique<Hpet>([this](Hpet::Line line, bool level) {
    if (line.isa) SetIsaLine(line.n, level);
    else SetGsi(line.n, level);
  });
  VBTS_RETURN_IF_ERROR(pio_.Register(kAcpiPmBase, AcpiPm::kSize, acpi_pm_.get(), "ACPI PM block"));
  if (config_.instruction_clock) {
    // --clock=instructions: the RTC runs on the guest's clock too (QEMU's
    // -rtc clock=vm, which -icount runs want), from the host's UTC time at
    // start in whole seconds: its periodic, update and alarm interrupts come
    // at the same instruction in every run (docs/tcg-engine.md, "Guest time").
    timespec ts;
    ::clock_gettime(CLOCK_REALTIME, &ts);
    const int64_t start_ns = static_cast<int64_t>(ts.tv_sec) * 1'000'000'000;
    // (The guest clock starts with the TCG engine, after the RTC: 0 until then.)
    cmos_rtc_ = std::make_unique<CmosRtc>(
        [this, start_ns] { return start_ns + (clock_ ? static_cast<int64_t>(GuestNs()) : 0); });
  } else {
    cmos_rtc_ = std::make_unique<CmosRtc>();  // on the host's CLOCK_REALTIME, as QEMU's -rtc base=utc
  }
  // IRQ 8, unless the HPET's legacy replacement mode has taken the line (as
  // QEMU's HPET cuts its RTC off then).
  cmos_rtc_->SetIrq([this](bool level) {
    if (!hpet_->legacy()) SetIsaLine(8, level);
  });
  // The alarm's ACPI event (RTC_STS) and the SCI on ISA line 9, level (the
  // MADT's override), which Linux's RTC alarms use while the HPET has IRQ 8.
  cmos_rtc_->SetAlarmEvent([this] { acpi_pm_->RtcAlarm(); });
  acpi_pm_->SetSci([this](bool level) { SetIsaLine(kAcpiSciIrq, level); });
  VBTS_RETURN_IF_ERROR(pio_.Register(CmosRtc::kPort, CmosRtc::kSize, cmos_rtc_.get(), "MC146818 RTC/CMOS"));
  reset_line_ = std::make_unique<ResetLine>();
  VBTS_RETURN_IF_ERROR(pio_.Register(ResetLine::kPort, ResetLine::kSize, reset_line_.get(), "8042 reset line"));
  pci_host_ = std::make_unique<PciHost>();
  VBTS_RETURN_IF_ERROR(pio_.Register(PciHost::kPort, PciHost::kSize, pci_host_.get(), "PCI configuration"));
  testdev_io_ = std::make_unique<TestdevIo>();
  VBTS_RETURN_IF_ERROR(pio_.Register(TestdevIo::kPort, TestdevIo::kSize, testdev_io_.get(), "pc-testdev io"));
  testdev_irq_ = std::make_unique<TestdevIrq>([this](uint32_t line, bool level) { SetIsaLine(line, level); });
  uart_->SetIrq([this](bool level) { SetIsaLine(Uart16550::kCom1Irq, level); });
  VBTS_RETURN_IF_ERROR(pio_.Register(TestdevIrq::kPort, TestdevIrq::kSize, testdev_irq_.get(), "pc-testdev irq"));
  pic_ = std::make_unique<vcpu::Pic8259>();
  for (uint16_t base : {vcpu::Pic8259::kMasterCommand, vcpu::Pic8259::kSlaveCommand, vcpu::Pic8259::kElcrMaster}) {
    device_ports_.push_back(std::make_unique<BytePorts>(
        base, [this](uint16_t port) { return pic_->Read(port); },
        [this](uint16_t port, uint8_t value) { pic_->Write(port, value); },
        [this] {
          if (in_tcg_) NotifyInterrupts();
        }));
    VBTS_RETURN_IF_ERROR(pio_.Register(base, 2, device_ports_.back().get(), "8259 PIC"));
  }
  pit_ = std::make_unique<vcpu::Pit8254>();
  for (auto [base, size] : {std::pair<uint16_t, uint16_t>{vcpu::Pit8254::kPortBase, 4}, {vcpu::Pit8254::kPortB, 1}}) {
    device_ports_.push_back(std::make_unique<BytePorts>(
        base, [this](uint16_t port) { return pit_->Read(port, DeviceNs()); },
        [this](uint16_t port, uint8_t value) { pit_->Write(port, value, DeviceNs()); },
        [this] { TimerMoved(); }));
    VBTS_RETURN_IF_ERROR(pio_.Register(base, size, device_ports_.back().get(), "8254 PIT"));
  }
  fw_cfg_ = std::make_unique<FwCfg>(ram_->size(), /*cpus=*/1);
  VBTS_RETURN_IF_ERROR(pio_.Register(FwCfg::kPort, FwCfg::kSize, fw_cfg_.get(), "fw_cfg"));

  for (const std::string& d : config_.devices) {
    if (std::find(std::begin(MachineConfig::kDeviceNames), std::end(MachineConfig::kDeviceNames), d) ==
        std::end(MachineConfig::kDeviceNames))
      return absl::InvalidArgumentError(
          absl::StrFormat("--device=%s: expected %s", d, absl::StrJoin(MachineConfig::kDeviceNames, " or ")));
  }
  // Options only the TCG engine serves: `auto` becomes tcg for them, and
  // another engine is refused with the reason.
  auto needs_tcg = [this](bool asked, std::string_view option, std::string_view why) -> absl::Status {
    if (!asked) return absl::OkStatus();
    if (config_.engine == "auto") config_.engine = "tcg";
    if (config_.engine == "tcg") return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrFormat("%s needs the TCG engine: --engine=%s %s (use auto or tcg)", option, config_.engine, why));
  };
  // The devices' interrupts reach vbts's interrupt controllers, which run
  // with the TCG engine (KVM's in-kernel I/O APIC cannot remap).
  VBTS_RETURN_IF_ERROR(needs_tcg(!config_.devices.empty(), "--device", "has KVM's interrupt controllers"));
  // The debugger's stops (breakpoints the guest cannot see, exact steps,
  // watchpoints) are the TCG engine's: the vCPU is there while a client
  // needs them, and may run on KVM otherwise (kvm-tcg; docs/gdb.md).
  if (!config_.gdb.empty()) {
    if (config_.engine == "kvm")
      return absl::InvalidArgumentError(
          "--gdb needs the TCG engine for its stops: --engine=kvm never moves there (use auto, tcg or kvm-tcg)");
    if (config_.vpmu == "passthrough")
      return absl::InvalidArgumentError(
          "--gdb needs the TCG engine for its stops: --vpmu=passthrough keeps the vCPU on KVM (the host's LBRs "
          "cannot move)");
  }
  // Only the TCG engine counts instructions without stepping them.
  VBTS_RETURN_IF_ERROR(needs_tcg(config_.instruction_clock, "--clock=instructions", "keeps the host's time"));
  if (config_.engine == "auto") {
    // Traced from the start: the TCG engine for the whole run.  Otherwise KVM,
    // and the TCG engine for as long as the guest turns tracing on
    // (Machine::TraceInTcg; docs/tcg-engine.md, "Switching engines").
    const bool every_instruction =
        !config_.branches_path.empty() || !config_.insns_path.empty() || static_cast<bool>(config_.transfer_sink);
    // On a PVM host KVM runs guest ring 0 and all 32-bit code in its
    // instruction emulator, which TCG outruns (docs/benchmarks.md).
    const bool emulated = facts_.kind == vcpu::HostKind::kPvm;
    config_.engine = (every_instruction || emulated) && config_.vpmu != "passthrough" ? "tcg" : "kvm-tcg";
  }
  if (config_.engine == "kvm-tcg") {
    config_.engine = "kvm";
    switch_engines_ = config_.vpmu != "passthrough";  // the host's LBRs cannot move
  }
  if (config_.engine == "tcg") {
    if (config_.vpmu == "passthrough")
      return absl::InvalidArgumentError("--vpmu=passthrough needs the host KVM's LBRs: it cannot run with --engine=tcg");
    VBTS_RETURN_IF_ERROR(CreateTcg());
  } else if (config_.engine != "kvm") {
    return absl::InvalidArgumentError(absl::StrFormat("--engine=%s: expected auto, kvm or tcg", config_.engine));
  }
  // The CPUID instructions of the image, for the supervisor's CPUID guards:
  // at the address each is loaded at and, for a segment linked elsewhere
  // (ELF p_vaddr != p_paddr), at the address it is linked to run at.
  // Only the KVM engine has guards: a run on the TCG engine throughout answers
  // CPUID from the model and skips the scan (2.2 s for Linux's 24 MiB of code).
  vcpu::SupervisorOptions options;
  options.exact_cpuid = config_.exact_cpuid;
  const absl::Span<const CodeRange> guarded =
      config_.engine == "tcg" ? absl::Span<const CodeRange>() : absl::MakeConstSpan(img.code);
  for (const CodeRange& c : guarded) {
    std::vector<uint8_t> bytes(c.size);
    VBTS_RETURN_IF_ERROR(ram_->Read(Gpa(c.gpa), absl::MakeSpan(bytes)));
    std::vector<uint64_t> all;
    for (auto [find, out] : {std::pair{&vcpu::FindCpuidSites, &options.cpuid_sites},
                             std::pair{&vcpu::FindMovDr7Sites, &options.movdr7_sites}}) {
      std::vector<uint64_t> sites = find(bytes.data(), bytes.size(), c.gpa);
      all.insert(all.end(), sites.begin(), sites.end());
      if (c.vaddr != c.gpa) {
        std::vector<uint64_t> linked = find(bytes.data(), bytes.size(), c.vaddr);
        sites.insert(sites.end(), linked.begin(), linked.end());
      }
      out->insert(out->end(), sites.begin(), sites.end());
    }
    // Sites beyond the debug registers may get code guards (UD2 patches);
    // only confirmed instruction starts qualify. The sweep costs ~1 ms per
    // 100 KiB and runs only when there are more sites than registers.
    if (all.size() > 3) {
      for (uint64_t gpa : vcpu::ConfirmInstructionStarts(bytes.data(), bytes.size(), c.gpa, all)) {
        vcpu::SupervisorOptions::PatchableSite p{gpa, {gpa}};
        if (c.vaddr != c.gpa) p.linear.push_back(gpa - c.gpa + c.vaddr);
        options.patchable.push_back(std::move(p));
      }
    }
  }
  supervisor_ = std::make_unique<vcpu::Supervisor>(*vcpu_, *ram_, *model_, facts_, std::move(options));
  // Only the TCG engine caches translated code; KVM fetches from RAM.  Under
  // kvm-tcg the engine's translations are flushed when it takes the vCPU back.
  tracer_ram_ = std::make_unique<vcpu::CodeCoherentMemory>(*ram_, [this] { return in_tcg_ ? tcg_.get() : nullptr; });
  VBTS_RETURN_IF_ERROR(AddDevices());
  {  // The virtual PMU, its MSR filter and the tracer, in every --vpmu mode.
    feature_msrs_ = std::make_unique<pmu::FeatureMsrs>(*model_);
    vpmu_ = std::make_unique<pmu::VirtualPmu>(
        *model_, pmu::VirtualPmuOptions{.lbr_in_kernel = config_.vpmu == "passthrough"});
    // KVM must exit on every MSR the virtual PMU owns (kvm-host-facts.md:
    // unfiltered, KVM answers DEBUGCTL, MISC_ENABLE and some counters itself).
    if (!filtered) VBTS_RETURN_IF_ERROR(vm_->SetMsrFilter(PmuDenyList(config_.vpmu)));
    if (tcg_) {
      tracer_ = std::make_unique<vcpu::Tracer>(*tcg_control_, *tracer_ram_, *vpmu_,
                                               [this](uint8_t vector) { return tcg_control_->SendInterrupt(vector); });
      tracer_->SetEmulateDataBreakpoints(true);  // QEMU's are not used (vcpu/tcg_cpu.cc)
      // --clock=instructions: the guest's time counts every instruction, so
      // the engine observes them all (in blocks where nothing is traced).
      tracer_->SetObserveAlways(config_.instruction_clock);
    } else {
      tracer_ = std::make_unique<vcpu::Tracer>(*vcpu_, *tracer_ram_, *vpmu_,
                                               [vm = vm_.get()](uint8_t vector) { return vm->SignalMsi(0, vector); });
      tracer_->SetEmulateDataBreakpoints(facts_.emulate_data_breakpoints);
    }
    supervisor_->SetObserver(tracer_.get());
    for (auto [path, file] : {std::pair{&config_.branches_path, &branches_file_}, {&config_.insns_path, &insns_file_}}) {
      if (path->empty()) continue;
      *file = std::fopen(path->c_str(), "w");
      if (!*file) return absl::NotFoundError(absl::StrFormat("cannot write %s: %s", *path, std::strerror(errno)));
    }
    InstallSink();
  }
  if (!config_.gdb.empty()) {
    const bool long_mode = (model_->Cpuid(0x80000001, 0).edx >> 29) & 1;  // CPUID.80000001H:EDX.LM
    gdb::Arch arch = Debugger::ArchForImage(image, long_mode);
    if (config_.gdb_arch == "i386") arch = gdb::Arch::kI386;
    else if (config_.gdb_arch == "x86-64") arch = gdb::Arch::kX86_64;
    else if (config_.gdb_arch != "auto")
      return absl::InvalidArgumentError(
          absl::StrFormat("--gdb-arch=%s: expected auto, i386 or x86-64", config_.gdb_arch));
    VBTS_ASSIGN_OR_RETURN(debugger_, Debugger::Create(*this, config_.gdb, config_.gdb_wait, arch,
                                                      Debugger::ExecFileFor(image, config_.image_path, arch)));
    std::fprintf(stderr, "vbts: gdb: listening on %s (target remote %s)\n", debugger_->address().c_str(),
                 debugger_->address().c_str());
  }
  return SetBootState(img.entry, img.boot, boot_info);
}

void Machine::InstallSink() {
  if (!branches_file_ && !insns_file_ && !config_.transfer_sink && !gdb_trace_) {
    tracer_->SetSink(nullptr);
    return;
  }
  tracer_->SetSink(
      [this](const pmu::Branch& b) {
        if (config_.transfer_sink && sink_wanted_) sink_wanted_ = config_.transfer_sink(b);
        if (branches_file_ && b.taken())
          std::fprintf(branches_file_, "0x%llx 0x%llx %s\n", static_cast<unsigned long long>(b.from),
                       static_cast<unsigned long long>(b.to), pmu::BranchKindName(b.kind));
        if (insns_file_ && !pmu::IsEventDelivery(b.kind))
          std::fprintf(insns_file_, "0x%llx\n", static_cast<unsigned long long>(b.from));
        if (gdb_trace_ && debugger_ && debugger_->tracing()) debugger_->AddTransfer(b, insns_file_ != nullptr);
        return branches_file_ || insns_file_ || (config_.transfer_sink && sink_wanted_) || gdb_trace_;
      },
      /*every_instruction=*/insns_file_ != nullptr);
}

absl::Status Machine::SetGdbBranchTrace(bool on) {
  if (!tracer_) return absl::FailedPreconditionError("no tracer in this machine");
  gdb_trace_ = on;
  InstallSink();
  return absl::OkStatus();
}

absl::Status Machine::SetBootState(uint32_t entry, BootProtocol boot, uint32_t info) {
  // Boot GDT: null, code (base 0, limit 4 GiB, 32-bit, DPL0), data (same,
  // writable); for Linux's 32-bit boot protocol the code and data
  // descriptors are at __BOOT_CS (0x10) and __BOOT_DS (0x18).
  constexpr uint64_t kCode = 0x00CF9B000000FFFFull, kData = 0x00CF93000000FFFFull;
  const bool linux_boot = boot == BootProtocol::kLinux;
  const uint64_t gdt[4] = {0, linux_boot ? 0 : kCode, linux_boot ? kCode : kData, linux_boot ? kData : 0};
  for (int i = 0; i < 4; i++) VBTS_RETURN_IF_ERROR(ram_->WriteLe<uint64_t>(Gpa(kBootGdt + 8 * i), gdt[i]));
  const uint16_t cs = linux_boot ? kLinuxBootCs : kBootCs, ds = linux_boot ? kLinuxBootDs : kBootDs;
  VBTS_ASSIGN_OR_RETURN(vcpu::CpuState st, vcpu_->GetState());
  // Multiboot v1 machine state (spec 3.2): EAX magic, EBX info, CS/DS/ES/FS/GS/SS
  // flat 4 GiB 32-bit, CR0.PE=1 PG=0, EFLAGS.IF=0 and VM=0. PVH (Xen's
  // docs/misc/pvh.pandoc) is the same with EBX = hvm_start_info, the other
  // GPRs undefined (vbts: EAX 0) and TR a 32-bit busy TSS with base 0 and
  // limit 0x67.
  // Linux's 32-bit boot protocol (boot.rst): ESI boot_params, EBP, EDI and
  // EBX 0, __BOOT_CS/__BOOT_DS flat, interrupts off; TR as for PVH.
  st.gpr[vcpu::kRax] = boot == BootProtocol::kMultiboot ? 0x2BADB002 : 0;
  st.gpr[vcpu::kRbx] = linux_boot ? 0 : info;
  if (linux_boot) st.gpr[vcpu::kRsi] = info;
  if (boot != BootProtocol::kMultiboot) {
    st.tr = vcpu::Segment{};
    st.tr.limit = 0x67;
    st.tr.type = 0xB;
    st.tr.present = true;
  }
  st.gpr[vcpu::kRsp] = kBootStack;
  st.rip = entry;
  st.rflags = vcpu::kRflagsFixed1;
  // Types: 0xB execute/read accessed, 0x3 read/write accessed; DPL 0, 32-bit.
  st.cs = vcpu::FlatSegment(cs, 0xB, 0, /*db=*/true, /*l=*/false);
  st.ds = st.es = st.fs = st.gs = st.ss = vcpu::FlatSegment(ds, 0x3, 0, /*db=*/true, /*l=*/false);
  st.gdtr = {kBootGdt, static_cast<uint16_t>((linux_boot ? 4 : 3) * 8 - 1)};
  st.idtr = {0, 0x3FF};
  st.cr0 = 0x11;  // PE | ET
  st.cr3 = st.cr4 = st.efer = 0;
  return vcpu_->SetState(st);
}

void Machine::PrintWarnings() {
  if (!tracer_) return;
  for (const std::string& w : tracer_->TakeWarnings()) std::fprintf(stderr, "vbts: warning: %s\n", w.c_str());
}

absl::Status Machine::HandleMsr(bool write) {
  kvm_run* run = vcpu_->run();
  msr_exits_++;
  if (feature_msrs_ && pmu::FeatureMsrs::Owns(run->msr.index)) {
    const pmu::MsrResult r =
        write ? feature_msrs_->Write(run->msr.index, run->msr.data) : feature_msrs_->Read(run->msr.index);
    run->msr.error = r.gp ? 1 : 0;
    if (!write) run->msr.data = r.gp ? 0 : r.value;
    return absl::OkStatus();
  }
  if (!vpmu_ || !vpmu_->Owns(run->msr.index)) {
    // Only filtered MSRs exit (KVM_MSR_EXIT_REASON_FILTER); be exact anyway.
    run->msr.error = 1;
    return absl::OkStatus();
  }
  if (write) {
    pmu::MsrResult r = vpmu_->WriteMsr(run->msr.index, run->msr.data);
    // A WRMSR that succeeds retires under the configuration it leaves: the
    // one that enables a counter is counted by it, the one that disables it
    // is not (docs/pmu-model.md, "The WRMSR itself"); a faulting one retires
    // nothing (the #GP delivery is seen at the next boundary).
    if (tracer_ && !r.gp) VBTS_RETURN_IF_ERROR(tracer_->AfterMsrWrite());
    if (tracer_) VBTS_RETURN_IF_ERROR(tracer_->SyncKernelDebugCtl());
    // Tracing may have been switched on: the run loop's OnOtherExit then
    // makes the supervisor step from the next instruction on.
    run->msr.error = r.gp ? 1 : 0;
  } else {
    constexpr uint32_t kMsrDebugCtl = 0x1D9;
    if (tracer_ && run->msr.index == kMsrDebugCtl) VBTS_RETURN_IF_ERROR(tracer_->ReadKernelDebugCtl());
    pmu::MsrResult r = vpmu_->ReadMsr(run->msr.index);
    run->msr.error = r.gp ? 1 : 0;
    run->msr.data = r.gp ? 0 : r.value;
  }
  return absl::OkStatus();
}

RunResult Machine::Finish(RunEnd end, int status, std::string message) {
  RunResult r;
  r.end = end;
  r.exit_status = status;
  r.message = std::move(message);
  if (debugger_) debugger_->Ended(r);
  if (end != RunEnd::kGuestExit && end != RunEnd::kPowerOff && vcpu_) {  // the normal ends print nothing
    absl::StatusOr<vcpu::CpuState> st = CurrentState();
    if (st.ok()) {
      r.message += absl::StrFormat(" [%s", st->Describe());
      if (supervisor_ && supervisor_->last_exception())
        r.message += absl::StrCat(", last exception ", supervisor_->last_exception()->Describe());
      r.message += "]";
      r.details = st->Dump();
      if (absl::StatusOr<kvm_debugregs> d = vcpu_->GetDebugRegs(); d.ok() && !in_tcg_)
        absl::StrAppendFormat(&r.details, "dr0=%016x dr1=%016x dr2=%016x dr3=%016x dr6=%016x dr7=%016x\n", d->db[0],
                              d->db[1], d->db[2], d->db[3], d->dr6, d->dr7);
    }
  }
  absl::StrAppendFormat(&r.details, "exits: %u\n", exits_);
  for (const UnclaimedPort& p : pio_.unclaimed_ports())
    absl::StrAppendFormat(&r.details, "unclaimed port 0x%04x: %u reads, %u writes\n", p.port, p.reads, p.writes);
  if (uint64_t n = pio_.untracked_unclaimed_accesses())
    absl::StrAppendFormat(&r.details, "unclaimed ports beyond the first 64: %u accesses\n", n);
  if (dma_faults_) absl::StrAppendFormat(&r.details, "DMA refused: %u accesses\n", dma_faults_);
  if (mmio_unclaimed_reads_ || mmio_unclaimed_writes_)
    absl::StrAppendFormat(&r.details, "unclaimed MMIO: %u reads, %u writes\n", mmio_unclaimed_reads_,
                          mmio_unclaimed_writes_);
  if (supervisor_ && (!tcg_ || switch_engines_)) r.details += supervisor_->Statistics();
  if (switch_engines_ && engine_switches_)
    absl::StrAppendFormat(&r.details, "engines: %u moves between KVM and TCG (tracing, a debugger)\n", engine_switches_);
  if (tcg_) {
    const vcpu::TcgStats& t = tcg_->stats();
    absl::StrAppendFormat(&r.details,
                          "tcg: %u runs, %u exceptions/INT n delivered, %u port I/O, %u MMIO, %u MSR, %u CPUID, "
                          "%u HLT; code hook added %u times, removed %u times; data-access hook added %u times, removed %u times; "
                          "code buffer emptied %u times\n"
                          "tcg: corrected QEMU 5.0: %u instructions performed by vbts (%u translated as UD2), %u "
                          "#SS for #GP, %u branch faults moved, %u SSE instructions translated with their alignment check "
                          "(%u #GP); %u restarts after a store into the running block; %u task switches into a "
                          "conforming CS with DPL below RPL\n",
                          t.runs, t.exceptions, t.port_io, t.mmio, t.msr, t.cpuid, t.halts, t.code_hook_adds,
                          t.code_hook_removals, t.data_hook_adds, t.data_hook_removals, t.code_reclaims, t.performed, t.substituted, t.stack_faults, t.branch_faults,
                          t.alignment_checks, t.alignment_faults, t.restarts, t.task_conforming_cs);
    absl::StrAppendFormat(&r.details,
                          "tcg: one hook a block: %u blocks, entered %u times, left %u times, %u instructions found "
                          "inside a block, records dropped %u times, %u blocks searched for\n",
                          t.hookless_blocks, t.hookless_enters, t.hookless_leaves, t.hookless_settles,
                          t.hookless_record_drops, t.hookless_lookups);
    absl::StrAppendFormat(&r.details, "tcg: one call a block: %u blocks, entered %u times, left %u times\n",
                          t.count_call_blocks, t.count_call_enters, t.count_call_leaves);
    absl::StrAppendFormat(&r.details,
                          "tcg: %u runs without the block hook; block hook put into the translations %u times, "
                          "taken out %u times\n",
                          t.runs_without_block_hook, t.block_hook_adds, t.block_hook_removals);
    if (t.guest_watch_syncs)
      absl::StrAppendFormat(&r.details,
                            "tcg: the guest's data breakpoints: %u hits reported by the engine, their ranges changed "
                            "%u times\n",
                            t.guest_data_hits, t.guest_watch_syncs);
    if (t.guest_exec_hook_syncs)
      absl::StrAppendFormat(&r.details,
                            "tcg: the guest's instruction breakpoints: %u raised, %u passed without #DB, QEMU's set "
                            "of them remade %u times\n",
                            t.breakpoints, t.guest_exec_passes, t.guest_exec_hook_syncs);
    if (t.qemu_breakpoint_syncs)
      absl::StrAppendFormat(&r.details,
                            "tcg: the debugger's breakpoints as QEMU's own: the set changed %u times, %u stops\n",
                            t.qemu_breakpoint_syncs, t.qemu_breakpoint_stops);
    if (t.data_walks)
      absl::StrAppendFormat(&r.details, "tcg: the data-access hook walked the page tables %u times (other accesses "
                            "found their page in its cache)\n", t.data_walks);
    if (t.access_reruns || t.access_stops_at_block_end)
      absl::StrAppendFormat(&r.details,
                            "tcg: watched accesses (data breakpoints, watchpoints, LLC-event PMIs): %u instructions "
                            "run again alone (%u for a PMI, %u accesses not reported again, %u races lost), %u stops "
                            "at a block's end\n",
                            t.access_reruns, t.due_reruns, t.accesses_not_reported_again, t.alone_skips_dropped,
                            t.access_stops_at_block_end);
    if (t.latency_reruns || t.latency_unskips || t.latency_counted_at_access)
      absl::StrAppendFormat(&r.details,
                            "tcg: loads above the load-latency threshold: %u instructions run again alone, %u "
                            "boundaries reported after one, %u counted at the access (instruction not found)\n",
                            t.latency_reruns, t.latency_unskips, t.latency_counted_at_access);
  }
  if (tracer_) {
    const vcpu::TracerStats& t = tracer_->stats();
    const pmu::PmuStats& p = vpmu_->stats();
    absl::StrAppendFormat(&r.details,
                          "tracer: %u boundaries, %u instructions, %u events, %u unexplained; %u PMIs sent, %u "
                          "masked; %u MSR exits\n"
                          "virtual PMU: %u BTS records (%u dropped), %u PEBS records (%u skipped), %u LBR pushes (%u pops), "
                          "%u PMIs requested\n",
                          t.boundaries, t.instructions, t.events, t.lost, t.pmis_sent, t.pmis_masked, msr_exits_,
                          p.bts_records, p.bts_dropped, p.pebs_records, p.pebs_dropped, p.lbr_pushes, p.lbr_pops, p.pmis);
  }
  PrintWarnings();
  return r;
}

std::optional<RunResult> Machine::FromVerdict(const vcpu::Supervisor::Verdict& v) {
  switch (v.kind) {
    case vcpu::Supervisor::Verdict::kResume:
      return std::nullopt;
    case vcpu::Supervisor::Verdict::kHaltedIfClear:
      return Finish(RunEnd::kHaltedIfClear, kExitHaltedIfClear,
                    "vbts: guest halted with interrupts disabled (HLT with IF=0)");
    case vcpu::Supervisor::Verdict::kUnsupported:
      return Finish(RunEnd::kUnsupported, kExitUnsupported, "vbts: " + v.message);
  }
  return std::nullopt;
}

absl::StatusOr<vcpu::CpuState> Machine::CurrentState() {
  if (in_tcg_) return tcg_->GetState();
  return vcpu_->GetState();
}

RunResult Machine::Run() {
  if (config_.timeout_seconds > 0)
    output_.SetDeadline(NowNs() + static_cast<uint64_t>(config_.timeout_seconds * 1e9));
  if (tcg_) return RunTcg();
  double deadline = config_.timeout_seconds > 0 ? Now() + config_.timeout_seconds : 0;
  if (absl::Status s = KickTimer::Start(vcpu_->run(), kKickPeriodMs); !s.ok())
    return Finish(RunEnd::kError, kExitVbtsError, s.ToString());
  // --gdb-wait: the first stop is before the first instruction, in TCG.
  if (debugger_ && switch_engines_) supervisor_->RequestSteps(debugger_->WantsTcg());
  absl::StatusOr<vcpu::Supervisor::Verdict> start = supervisor_->Start();
  if (!start.ok()) return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + start.status().ToString());
  if (std::optional<RunResult> end = FromVerdict(*start)) return *end;
  // (Run at the boundary the supervisor stopped at or armed from, never after
  // an I/O or MMIO exit, whose instruction KVM has yet to finish.)
  auto debugger_move = [&]() -> std::optional<RunResult> {
    absl::StatusOr<std::optional<RunResult>> end = DebuggerMovesToTcg(deadline);
    if (!end.ok()) return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + end.status().ToString());
    return *end;
  };
  if (std::optional<RunResult> end = debugger_move()) return *end;
  for (;;) {
    if (deadline && Now() >= deadline)
      return Finish(RunEnd::kTimeout, kExitTimeout,
                    TimeoutMessage(config_.timeout_seconds, output_.dropped()));
    if (int sig = PendingStopSignal()) return Finish(RunEnd::kSignalled, kExitSignalled, StopSignalMessage(sig));
    absl::StatusOr<bool> exited = vcpu_->Run();
    if (!exited.ok()) return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + exited.status().ToString());
    if (!*exited) {
      // The kick ServiceTimersOnKvm armed for the next HPET or RTC interrupt
      // (or the periodic one): the devices' interrupts due by now. Their
      // accesses service them too (HpetAccessed, RtcAccessed); the vCPU's
      // other exits, one an instruction while it is stepped, do no such work.
      ServiceTimersOnKvm();
      // Kicked by the timer: is the vCPU halted for good (HLT with IF=0)?
      absl::StatusOr<uint32_t> mp = vcpu_->GetMpState();
      absl::StatusOr<kvm_regs> regs = vcpu_->GetRegs();
      if (mp.ok() && regs.ok() && *mp == KVM_MP_STATE_HALTED && !(regs->rflags & vcpu::kRflagsIf))
        return Finish(RunEnd::kHaltedIfClear, kExitHaltedIfClear,
                      "vbts: guest halted with interrupts disabled (HLT with IF=0)");
      // A client may have attached or sent Ctrl-C: the supervisor steps
      // towards a plain boundary if it is not at one.
      if (debugger_) debugger_->PollOnKvm();
      if (debugger_ && switch_engines_) supervisor_->RequestSteps(debugger_->WantsTcg());
      absl::StatusOr<vcpu::Supervisor::Verdict> v = supervisor_->OnOtherExit(/*interrupted=*/true);
      if (!v.ok()) return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + v.status().ToString());
      if (std::optional<RunResult> end = FromVerdict(*v)) return *end;
      if (std::optional<RunResult> end = debugger_move()) return *end;
      continue;
    }
    exits_++;
    RunResult result;
    absl::StatusOr<bool> more = HandleExit(&result);
    if (!more.ok()) return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + more.status().ToString());
    if (!*more) return result;
    if (acpi_pm_->TakeSuspend()) {
      if (std::optional<RunResult> end = SuspendToRam(deadline ? static_cast<uint64_t>(deadline * 1e9) : 0))
        return *end;
    }
    const uint32_t reason = vcpu_->run()->exit_reason;
    if (reason != KVM_EXIT_DEBUG && reason != KVM_EXIT_INTERNAL_ERROR) {
      // The guest ran: the supervisor re-evaluates its mode and re-arms its
      // guards (the observer may want steps now; the IDT may have changed).
      absl::StatusOr<vcpu::Supervisor::Verdict> v = supervisor_->OnOtherExit(/*interrupted=*/false);
      if (!v.ok()) return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + v.status().ToString());
      if (std::optional<RunResult> end = FromVerdict(*v)) return *end;
    } else if (switch_engines_ && reason == KVM_EXIT_DEBUG && tracer_->WantsEveryInstruction() &&
               !tracer_->EventPending() && supervisor_->SteppingPlainly()) {
      // The guest turned tracing on: it runs in the TCG engine until it turns
      // it off, at the first single-step stop where the state is its own.
      absl::StatusOr<std::optional<RunResult>> end = TraceInTcg(deadline);
      if (!end.ok()) return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + end.status().ToString());
      if (*end) return **end;
    } else if (reason == KVM_EXIT_DEBUG) {
      if (std::optional<RunResult> end = debugger_move()) return *end;
    }
  }
}

void Machine::Mmio(uint64_t gpa, bool write, uint8_t* data, uint32_t len) {
  const auto device = [&](auto& dev, uint64_t offset) {
    uint64_t v = 0;
    if (write) {
      std::memcpy(&v, data, std::min<uint32_t>(len, 8));
      dev.MmioWrite(offset, static_cast<int>(len), v);
    } else {
      v = dev.MmioRead(offset, static_cast<int>(len));
      std::memcpy(data, &v, std::min<uint32_t>(len, 8));
    }
  };
  if (gpa >= Hpet::kBase && gpa < Hpet::kBase + Hpet::kSize) {
    const bool was_legacy = hpet_->legacy();
    const uint64_t now = DeviceNs();
    uint64_t v = 0;
    if (write) {
      const std::optional<uint64_t> next = hpet_->NextInterruptNs();
      std::memcpy(&v, data, std::min<uint32_t>(len, 8));
      hpet_->Write(gpa - Hpet::kBase, static_cast<int>(len), v, now);
      HpetAccessed(was_legacy, hpet_->NextInterruptNs() != next);
    } else {
      v = hpet_->Read(gpa - Hpet::kBase, static_cast<int>(len), now);
      std::memcpy(data, &v, std::min<uint32_t>(len, 8));
      HpetAccessed(was_legacy, /*moved=*/false);
    }
    return;
  }
  if (iommu_ && gpa >= IntelIommu::kBase && gpa < IntelIommu::kBase + IntelIommu::kSize) {
    device(*iommu_, gpa - IntelIommu::kBase);
    return;
  }
  if (edu_) {
    if (std::optional<uint64_t> bar = edu_->MemoryBar(0); bar && gpa >= *bar && gpa - *bar < PciEdu::kBarSize) {
      device(*edu_, gpa - *bar);
      return;
    }
  }
  if (gpa >= kTestdevIomem && len <= 8 && gpa + len <= kTestdevIomem + testdev_iomem_.size()) {
    // QEMU pc-testdev's "iomem": 64 KiB at 0xFF000000 that read back what
    // was written, at any size, but through MMIO exits (kvm-unit-tests'
    // emulator.c runs its instructions on it).
    uint8_t* at = testdev_iomem_.data() + (gpa - kTestdevIomem);
    if (write)
      std::memcpy(at, data, len);
    else
      std::memcpy(data, at, len);
    return;
  }
  // Nothing but RAM, the LAPIC, the IOAPIC and the HPET is mapped: reads of anything
  // else return all ones, writes are dropped (as on an empty PC bus).
  if (write) {
    mmio_unclaimed_writes_++;
  } else {
    std::memset(data, 0xFF, len);
    mmio_unclaimed_reads_++;
  }
}

void Machine::WriteGuestOutput(uint8_t c) { output_.Write(c); }

absl::Status Machine::CreateTcg() {
  vcpu::TcgCpu::Config tcg_config{ram_->host_base(), ram_->size(), vcpu::TcgCpu::UnicornModelFor(config_.cpu_model),
                                   this};
  tcg_config.hook_per_block = config_.tcg_hook_per_block;
  tcg_config.count_call = config_.tcg_count_call;
  VBTS_ASSIGN_OR_RETURN(tcg_, vcpu::TcgCpu::Create(tcg_config));
  const uint32_t cpuid1_ecx = model_->Cpuid(1, 0).ecx;
  vcpu::LapicConfig lapic_config;
  lapic_config.tsc_deadline = (cpuid1_ecx & pmu::kCpuid1EcxTscDeadline) != 0;
  lapic_config.x2apic = (cpuid1_ecx & pmu::kCpuid1EcxX2apic) != 0;
  VBTS_ASSIGN_OR_RETURN(vcpu::Lapic lapic, vcpu::Lapic::Create(lapic_config));
  lapic_ = std::make_unique<vcpu::Lapic>(std::move(lapic));
  // The guest's TSC runs at the frequency KVM gives it, in both engines.
  absl::StatusOr<uint64_t> khz = vcpu_->TscKhz();
  if (!khz.ok())
    std::fprintf(stderr, "vbts: warning: %s; the TCG engine's guest TSC runs at 1 GHz\n",
                 std::string(khz.status().message()).c_str());
  clock_.emplace(khz.ok() ? *khz * 1000 : 0, vcpu::GuestClock::Now{NowNs(), 0});
  clock_->SetSource(vcpu::GuestClock::Source::kHost, ClockNow());
  tcg_control_ = std::make_unique<vcpu::TcgControl>(
      *tcg_, *lapic_, [this] { return GuestNs(); }, [this] { return clock_->Tsc(ClockNow()); });
  // The I/O APIC: its interrupts go to the LAPIC when their destination
  // names it; the LAPIC's EOIs of level-triggered vectors come back.
  ioapic_ = std::make_unique<vcpu::Ioapic>(
      [this](const vcpu::Ioapic::Delivery& d) {
        if (!lapic_->Accepts(d.dest, d.logical)) return false;
        const bool accepted = lapic_->Raise(d.vector, d.level);
        tcg_control_->Notify();
        return accepted;
      },
      [this](uint8_t dest, bool logical) {
        if (lapic_->Accepts(dest, logical)) tcg_->QueueNmi();
      });
  lapic_->SetLevelEoiListener([this](uint8_t vector) { ioapic_->Eoi(vector); });
  return absl::OkStatus();
}

absl::StatusOr<std::optional<RunResult>> Machine::DebuggerMovesToTcg(double& deadline) {
  // (As for the guest's own tracing: not while the tracer has an event on
  // its way into the guest through KVM.)
  if (!debugger_ || !switch_engines_ || !debugger_->WantsTcg() || !supervisor_->Plain() || tracer_->EventPending())
    return std::nullopt;
  const uint64_t stopped_before = debugger_->stopped_ns();
  absl::StatusOr<std::optional<RunResult>> end = TraceInTcg(deadline);
  // Time stopped for the client does not count against --timeout.
  if (deadline > 0) deadline += static_cast<double>(debugger_->stopped_ns() - stopped_before) / 1e9;
  return end;
}

bool Machine::WantsTcg() const {
  return tracer_->WantsEveryInstruction() || (debugger_ && debugger_->WantsTcg());
}

absl::StatusOr<std::optional<RunResult>> Machine::TraceInTcg(double deadline) {
  // Only at a boundary where nothing is on its way into the guest: KVM's
  // pending or injected events would not move (the LAPIC's requests do).
  VBTS_ASSIGN_OR_RETURN(kvm_vcpu_events ev, vcpu_->GetEvents());
  if (ev.exception.injected || ev.exception.pending || ev.interrupt.injected || ev.nmi.injected || ev.nmi.pending)
    return std::nullopt;
  VBTS_ASSIGN_OR_RETURN(uint32_t mp_state, vcpu_->GetMpState());
  if (!tcg_) {
    if (absl::Status s = CreateTcg(); !s.ok()) {
      if (debugger_) return s;  // its stops have no other engine
      // The library is not the one vbts pins: trace under KVM, as before.
      std::fprintf(stderr, "vbts: warning: tracing stays on KVM: %s\n", std::string(s.message()).c_str());
      switch_engines_ = false;
      tcg_.reset();
      return std::nullopt;
    }
  }
  // KVM -> TCG: the whole architectural state, x87/SSE, the LAPIC and the
  // guest's debug registers (docs/tcg-engine.md, "Switching engines").
  VBTS_ASSIGN_OR_RETURN(vcpu::CpuState st, vcpu_->GetState(/*with_msrs=*/true));
  VBTS_ASSIGN_OR_RETURN(vcpu::FpuState fpu, vcpu_->GetFpu());
  VBTS_ASSIGN_OR_RETURN(kvm_debugregs dr, vcpu_->GetDebugRegs());
  VBTS_RETURN_IF_ERROR(TimeAndIrqchipsFromKvm());
  tcg_->FlushCode();  // guest memory changed under KVM
  VBTS_RETURN_IF_ERROR(tcg_->SetState(st));
  tcg_->SetFpu(fpu);
  VBTS_RETURN_IF_ERROR(LapicFromKvm());
  VBTS_RETURN_IF_ERROR(tcg_control_->SetDebugRegs(dr));
  tracer_->Rebind(*tcg_control_, [this](uint8_t vector) { return tcg_control_->SendInterrupt(vector); },
                  /*emulate_data_bps=*/true);
  tcg_observing_ = tcg_bulk_ = false;
  in_tcg_ = true;
  // A debugger's move may come while the vCPU waits in HLT (at a kick).
  halted_wait_ = mp_state == KVM_MP_STATE_HALTED;
  engine_switches_++;
  const uint64_t deadline_ns = deadline > 0 ? static_cast<uint64_t>(deadline * 1e9) : 0;
  std::optional<RunResult> end = RunTcgLoop(deadline_ns, /*until_untraced=*/true);
  if (end) return end;
  if (debugger_) supervisor_->RequestSteps(false);  // nothing the client needs is left (WantsTcg)
  // TCG -> KVM: tracing is off again.
  UpdateTcgObservation();  // removes the hooks
  in_tcg_ = false;
  UpdateClockSource();  // KVM's time is the host's
  st = tcg_->GetState(/*with_msrs=*/true);
  fpu = tcg_->GetFpu();
  VBTS_ASSIGN_OR_RETURN(kvm_lapic_state lapic, tcg_control_->GetLapic());
  VBTS_ASSIGN_OR_RETURN(dr, tcg_control_->GetDebugRegs());
  VBTS_RETURN_IF_ERROR(vcpu_->SetState(st, /*with_msrs=*/true));
  VBTS_RETURN_IF_ERROR(vcpu_->SetFpu(fpu));
  // IA32_APIC_BASE (xAPIC or x2APIC mode) before the page whose layout it
  // decides; the page before the I/O APIC, whose state KVM re-injects into it.
  const vcpu::MsrValue base{kMsrApicBase, apic_base_};
  VBTS_RETURN_IF_ERROR(vcpu_->SetMsrs({&base, 1}));
  VBTS_RETURN_IF_ERROR(vcpu_->SetLapic(lapic));
  VBTS_RETURN_IF_ERROR(vcpu_->SetDebugRegs(dr));
  // The TCG engine leaves only once it runs (RunTcgLoop): not halted.
  if (mp_state == KVM_MP_STATE_HALTED) VBTS_RETURN_IF_ERROR(vcpu_->SetMpState(KVM_MP_STATE_RUNNABLE));
  VBTS_RETURN_IF_ERROR(TimeAndIrqchipsToKvm());
  VBTS_RETURN_IF_ERROR(TscDeadlineToKvm());
  tracer_->Rebind(*vcpu_, [vm = vm_.get()](uint8_t vector) { return vm->SignalMsi(0, vector); },
                  facts_.emulate_data_breakpoints);
  engine_switches_++;
  // The supervisor arms its guards for the free run again.
  VBTS_ASSIGN_OR_RETURN(vcpu::Supervisor::Verdict v, supervisor_->OnOtherExit(/*interrupted=*/true));
  return FromVerdict(v);
}

RunResult Machine::RunTcg() {
  const uint64_t deadline =
      config_.timeout_seconds > 0 ? NowNs() + static_cast<uint64_t>(config_.timeout_seconds * 1e9) : 0;
  // The boot state and the reset LAPIC come from KVM's vCPU.
  absl::StatusOr<vcpu::CpuState> boot = vcpu_->GetState(/*with_msrs=*/true);
  if (!boot.ok()) return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + boot.status().ToString());
  if (absl::Status s = tcg_->SetState(*boot); !s.ok()) return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + s.ToString());
  if (absl::Status s = TimeAndIrqchipsFromKvm(); !s.ok())
    return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + s.ToString());
  if (absl::Status s = LapicFromKvm(); !s.ok()) return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + s.ToString());
  in_tcg_ = true;
  return *RunTcgLoop(deadline, /*until_untraced=*/false);
}

std::optional<RunResult> Machine::RunTcgLoop(uint64_t deadline, bool until_untraced) {
  // Runs are cut into slices so that --timeout, the LAPIC timer and (with a
  // GDB client attached, in shorter slices) a Ctrl-C are noticed.
  constexpr uint64_t kSliceNs = 50'000'000;
  constexpr uint64_t kDebugSliceNs = 10'000'000;
  for (;;) {
    if (debugger_) {
      // Time stopped for the client does not count against --timeout.
      const uint64_t before = debugger_->stopped_ns();
      std::optional<RunResult> end = debugger_->BetweenRuns(halted_wait_);
      if (deadline) deadline += debugger_->stopped_ns() - before;
      output_.ExtendDeadline(debugger_->stopped_ns() - before);
      if (end) return end;
    }
    if (deadline && NowNs() >= deadline)
      return Finish(RunEnd::kTimeout, kExitTimeout,
                    TimeoutMessage(config_.timeout_seconds, output_.dropped()));
    if (int sig = PendingStopSignal()) return Finish(RunEnd::kSignalled, kExitSignalled, StopSignalMessage(sig));
    // (After BetweenRuns: a client may just have attached.)
    const uint64_t slice = debugger_ && debugger_->connected() ? kDebugSliceNs : kSliceNs;
    if (halted_wait_) {
      // Halted until an interrupt: the next expiry of the LAPIC timer, the
      // 8254, the HPET or the RTC, or --timeout (nothing else interrupts a
      // halted vCPU here).  In slices, so that a debugger's Ctrl-C is seen.
      AdvanceTimers(GuestNs());
      NotifyInterrupts();
      if (!lapic_->Pending() && !PicDelivers() && !tcg_->NmiPending()) {
        const std::optional<uint64_t> t = NextTimerNs();
        if (t && clock_->source() == vcpu::GuestClock::Source::kInstructions) {
          // On instruction time nothing runs until the timer fires: its
          // deadline comes at once (docs/tcg-engine.md, "Guest time").
          clock_->SkipToNs(*t, ClockNow());
          continue;
        }
        uint64_t wake = NowNs() + slice;
        if (t) wake = std::min(wake, NowNs() + (*t - std::min(*t, GuestNs())));
        // The RTC's interrupts are on the host's clock, on instruction time too
        // (but with --clock=instructions: NextTimerNs has them).
        if (std::optional<int64_t> rtc = cmos_rtc_->NsToNextInterrupt(); rtc && !config_.instruction_clock)
          wake = std::min(wake, NowNs() + static_cast<uint64_t>(std::max<int64_t>(*rtc, 0)));
        if (deadline) wake = std::min(wake, deadline);
        const uint64_t n = NowNs();
        if (wake > n) {
          // To the nanosecond (with the timer slack Run set): a guest's
          // timer interrupt comes at its time, not up to ~60 us later.
          const uint64_t ns = std::min<uint64_t>(wake - n, 50'000'000);
          timespec t{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
          ::nanosleep(&t, nullptr);
        }
        continue;
      }
      halted_wait_ = false;
    }
    // Tracing is off and no event waits in the engine: the vCPU can go back.
    // (Nor a debugger's client needs it: Debugger::WantsTcg.)
    if (until_untraced && !WantsTcg() && !tcg_->EventPending()) return std::nullopt;
    UpdateTcgObservation();
    // Whether a code hook no longer used still lingers for this run: its
    // instructions are counted, and the guest's time stays on them.
    tcg_->SyncHooks();
    UpdateClockSource();
    const uint64_t now = NowNs();
    const uint64_t guest_now = GuestNs();
    AdvanceTimers(guest_now);
    NotifyInterrupts();
    // Within the run the timers change only by a guest write, which ends the
    // run on instruction time and shortens it to the new expiry on host time
    // (TimerMoved), or by an expiry, which the deadline stops at.
    timer_deadline_ticks_ = TimerDeadlineTicks();
    // Unobserved under the lingering hook, the run ends at that deadline too.
    std::optional<uint64_t> lingering_stop;
    if (timer_deadline_ticks_ && !tcg_observing_) {
      const uint64_t ticks = clock_->Ticks(ClockNow());
      const uint64_t left = *timer_deadline_ticks_ - std::min(*timer_deadline_ticks_, ticks);
      lingering_stop = tcg_->lingering_retired() + std::max<uint64_t>(left, 1);
    }
    tcg_->SetLingeringStopAt(lingering_stop);
    uint64_t until = now + slice;
    // On host time the timer's deadline ends the run; on instruction time
    // the instruction hook stops at it (TimerDeadlineTicks).
    if (std::optional<uint64_t> t = NsToNextTimer(guest_now); t && clock_->source() == vcpu::GuestClock::Source::kHost)
      until = std::min(until, now + *t);
    if (deadline) until = std::min(until, std::max(deadline, now) + 1000);
    // A debugger's step runs without a time limit (TcgCpu::SetDebugStep).
    const uint64_t limit_us = debugger_ && debugger_->stepping() ? 0 : (until - now + 999) / 1000;
    absl::StatusOr<vcpu::TcgStop> stop = tcg_->Run(limit_us);
    // Between runs the tracer has seen everything that ran (bulk counts, kept
    // block ends): what ends here (an exit, a timeout, a debugger's stop)
    // finds the virtual PMU, the recording and GDB's branch trace whole.
    FlushTcgBulk();
    PrintWarnings();
    if (!stop.ok()) return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + stop.status().ToString());
    if (!tcg_error_.ok()) return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + tcg_error_.ToString());
    if (std::optional<RunResult> end = GuestEnded()) return *end;
    if (acpi_pm_->TakeSuspend()) {
      if (std::optional<RunResult> end = SuspendToRam(deadline)) return *end;
      continue;
    }
    switch (stop->kind) {
      case vcpu::TcgStop::kTripleFault:
        return Finish(RunEnd::kTripleFault, kExitTripleFault, "vbts: guest shut down (triple fault)");
      case vcpu::TcgStop::kHalted: {
        const vcpu::CpuState st = tcg_->GetState(/*with_msrs=*/false);
        if (!(st.rflags & vcpu::kRflagsIf) && !tcg_->NmiPending())
          return Finish(RunEnd::kHaltedIfClear, kExitHaltedIfClear,
                        "vbts: guest halted with interrupts disabled (HLT with IF=0)");
        halted_wait_ = true;
        break;
      }
      case vcpu::TcgStop::kRequested:
      case vcpu::TcgStop::kTimeout:
        break;
    }
    if (debugger_) debugger_->AfterRun(*stop);
  }
}

void Machine::UpdateTcgObservation() {
  // LLC events count data accesses, which the engine reports while the
  // virtual PMU wants them (docs/pmu-model.md, "LLC references and misses").
  const bool want_data = tracer_ && vpmu_ && vpmu_->WantsDataAccesses();
  if (want_data != tcg_->has_data_access_hook()) {
    tracer_->SetEngineReportsDataAccesses(want_data);
    if (!want_data) {
      tcg_->SetDataAccessHook(nullptr);
    } else {
      tcg_->SetDataAccessHook([this](uint64_t pa, uint32_t size, uint8_t cpl, bool write,
                                     vcpu::TcgCpu::AccessOwner owner) {
        // A PMI is due: the engine reports the boundary after the instruction.
        return tracer_->ObserveDataAccess(pa, size, cpl, write, owner);
      });
    }
  }
  // The guest's data breakpoints: the engine reports each access that hits
  // one, and blocks run unobserved between hits (docs/tcg-engine.md, "The
  // guest's data breakpoints").
  if (tracer_ && !tracer_->engine_reports_data_breakpoints()) {
    tracer_->SetEngineReportsDataBreakpoints(true);
    tcg_->SetGuestDataHitHook([this](uint32_t hits) {
      tracer_->EngineDataHits(hits);
      tcg_->RequestStop();  // the boundary after the access is reported
    });
  }
  const bool want = tracer_ && tracer_->WantsEveryInstruction();
  if (want == tcg_observing_) return;
  if (!want) FlushTcgBulk();
  tcg_observing_ = want;
  tcg_first_boundary_ = true;
  tcg_bulk_ = false;
  // While the tracer sees every instruction it raises the guest's
  // single-step traps (with BTF), as it does under KVM.
  tcg_->SetOwnSingleStep(want);
  if (!want) {
    tcg_->SetInstructionHook(nullptr);
    tcg_->SetEventHook(nullptr);
    tcg_->SetBeforeCodeStoreHook(nullptr);
    return;
  }
  tcg_->SetInstructionHook([this](uint64_t) {
    absl::Status s;
    if (tcg_bulk_) {
      // Block-level observation: the instructions since the last boundary
      // ran inside one block (docs/tcg-engine.md).
      tcg_->GetCodeState(tcg_code_state_);
      const vcpu::TcgCpu::Skipped k = tcg_->TakeSkipped();
      s = tracer_->BulkBoundary(tcg_code_state_, k.count, k.last, k.block_start, CodeGenerationsNow(), k.ends);
    } else {
      vcpu::CpuState st = tcg_->GetState(/*with_msrs=*/false);
      // Every instruction is observed while the hook is on: consecutive
      // boundaries, except the first after it was turned on.
      tracer_->SetConsecutive(!tcg_first_boundary_);
      tcg_first_boundary_ = false;
      bool dirty = false;
      s = tracer_->AtBoundary(st, dirty);
    }
    if (!s.ok() && tcg_error_.ok()) tcg_error_ = s;
    tcg_bulk_ = s.ok() && (tcg_bulk_ ? tracer_->BulkAfterBoundary() : tracer_->BulkAllowed());
    // The LAPIC timer's deadline on instruction time: the boundary where it
    // has passed ends the run (the loop raises the interrupt there), and no
    // bulk runs past it.
    uint64_t limit = tcg_bulk_ ? tracer_->BulkLimit() : 0;
    if (timer_deadline_ticks_) {
      // (Set only while the guest's time is on instructions: no host time
      // needed, TimerDeadlineTicks.)
      const uint64_t ticks = clock_->Ticks({0, RetiredNow()});
      if (ticks >= *timer_deadline_ticks_) tcg_->RequestStop();
      else limit = std::min(limit, *timer_deadline_ticks_ - ticks - 1);
    }
    if (tcg_bulk_) {
      const bool ends = tracer_->BulkBlockEnds();
      tcg_->SkipSequential(limit, ends || tracer_->BulkCountsAcrossBlocks(), ends);
    }
    // Stop observing between runs (this instruction runs unobserved then).
    if (!s.ok() || !tracer_->WantsEveryInstruction()) tcg_->RequestStop();
  });
  tcg_->SetEventHook([this](std::optional<uint64_t> soft_linear) {
    if (!tcg_bulk_) return;
    tcg_bulk_ = false;  // the handler's first instruction is followed one by one
    const vcpu::TcgCpu::Skipped k = tcg_->TakeSkipped();
    absl::Status s = tracer_->BulkEvent(tcg_->GetState(/*with_msrs=*/false), k.count, k.last, soft_linear,
                                        CodeGenerationsNow(), k.ends);
    if (!s.ok() && tcg_error_.ok()) tcg_error_ = s;
  });
  // Kept block ends are reported before a guest store changes the code they
  // are decoded from (TcgCpu::SetBeforeCodeStoreHook).
  tcg_->SetBeforeCodeStoreHook([this] { FlushTcgBulk(); });
}

vcpu::CodeGenerations Machine::CodeGenerationsNow() {
  return {vcpu::TcgCpu::PagingGeneration(), vcpu::TcgCpu::CodeBytesGeneration()};
}

void Machine::FlushTcgBulk() {
  if (!tcg_bulk_ || !tracer_) return;
  const vcpu::TcgCpu::Skipped k = tcg_->TakeSkipped();
  tcg_->GetCodeState(tcg_code_state_);
  absl::Status s = tracer_->BulkFlush(tcg_code_state_, k.count, k.last, CodeGenerationsNow(), k.ends);
  if (!s.ok() && tcg_error_.ok()) tcg_error_ = s;
}

uint32_t Machine::PortIn(uint16_t port, int size) {
  uint8_t data[4] = {};
  absl::Status s = pio_.Dispatch(port, static_cast<uint8_t>(size), /*write=*/false, absl::MakeSpan(data, size));
  if (!s.ok()) std::fprintf(stderr, "vbts: warning: %s\n", std::string(s.message()).c_str());
  uint32_t v = 0;
  std::memcpy(&v, data, size);
  if (port == CmosRtc::kPort + 1) RtcAccessed();
  return v;
}

void Machine::PortOut(uint16_t port, int size, uint32_t value) {
  uint8_t data[4];
  std::memcpy(data, &value, 4);
  absl::Status s = pio_.Dispatch(port, static_cast<uint8_t>(size), /*write=*/true, absl::MakeSpan(data, size));
  if (!s.ok()) std::fprintf(stderr, "vbts: warning: %s\n", std::string(s.message()).c_str());
  if (port == CmosRtc::kPort + 1) RtcAccessed();
  if (GuestEndsRun()) tcg_->RequestStop();
}

std::optional<RunResult> Machine::SuspendToRam(uint64_t deadline) {
  // ACPI S3 (docs/guest-abi.md, "ACPI"): the vCPU stops until a wake event;
  // vbts's only one is the RTC alarm (AIE). Then the firmware's resume path
  // runs the FACS waking vector in real mode (ACPI 6.4 7.4.2, 16.3.2): vbts
  // sets that state directly. Memory keeps its contents; the devices keep
  // theirs too (vbts does not reset them).
  std::optional<int64_t> wake = cmos_rtc_->NsToAlarm();
  if (!wake)
    return Finish(RunEnd::kHaltedIfClear, kExitHaltedIfClear,
                  "vbts: guest suspended to RAM (ACPI S3) with no wake event (vbts wakes it only by the RTC alarm)");
  const uint64_t now = NowNs();
  if (deadline && now + static_cast<uint64_t>(*wake) > deadline) {
    if (deadline > now) SleepNs(deadline - now);
    return Finish(RunEnd::kTimeout, kExitTimeout, TimeoutMessage(config_.timeout_seconds, output_.dropped()));
  }
  SleepNs(static_cast<uint64_t>(*wake));
  uint32_t vector = 0;
  if (acpi_tables_) {
    absl::StatusOr<uint32_t> v = ram_->ReadLe<uint32_t>(Gpa(kAcpiFacsGpa + 12));  // firmware_waking_vector
    if (v.ok()) vector = *v;
  }
  if (vector == 0 || vector >= 0x100000)
    return Finish(RunEnd::kTripleFault, kExitTripleFault,
                  absl::StrFormat("vbts: guest woke from S3 with no real-mode waking vector in the FACS (0x%x): "
                                  "the firmware would boot afresh",
                                  vector));
  absl::StatusOr<vcpu::CpuState> st = CurrentState();
  if (!st.ok()) return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + st.status().ToString());
  const uint16_t segment = static_cast<uint16_t>(vector >> 4);
  st->cs = vcpu::FlatSegment(segment, 0xB, 0, /*db=*/false, /*l=*/false);
  st->cs.base = uint64_t{segment} << 4;
  st->cs.limit = 0xFFFF;
  st->cs.g = false;
  for (vcpu::Segment* seg : {&st->ds, &st->es, &st->ss, &st->fs, &st->gs}) {
    *seg = vcpu::FlatSegment(0, 0x3, 0, /*db=*/false, /*l=*/false);
    seg->limit = 0xFFFF;
    seg->g = false;
  }
  st->rip = vector & 0xF;
  st->rflags = vcpu::kRflagsFixed1;
  st->cr0 = 0x10;  // ET; protection and paging off
  st->cr3 = st->cr4 = st->efer = 0;
  st->idtr = {0, 0x3FF};
  st->interrupt_shadow = false;
  absl::Status set = in_tcg_ ? tcg_->SetState(*st) : vcpu_->SetState(*st);
  if (!set.ok()) return Finish(RunEnd::kError, kExitVbtsError, "vbts: " + set.ToString());
  halted_wait_ = false;
  acpi_pm_->Woke();
  return std::nullopt;
}

void Machine::SetIsaLine(uint32_t line, bool level) {
  // The interrupt controllers of the engine that runs the vCPU: vbts's in
  // TCG, KVM's otherwise (ISA lines 0-15 reach both the 8259s and the I/O
  // APIC, as under KVM's default routing, where GSI n is both).
  if (in_tcg_) pic_->SetLine(line, level);
  SetGsi(line, level);
}

uint64_t Machine::DeviceNs() const { return in_tcg_ ? GuestNs() : NowNs(); }

void Machine::SetGsi(uint32_t gsi, bool level) {
  if (in_tcg_) {
    ioapic_->SetLine(gsi, level);
    NotifyInterrupts();
    return;
  }
  if (absl::Status st = vm_->SetIrqLine(gsi, level); !st.ok() && irq_errors_++ == 0)
    std::fprintf(stderr, "vbts: warning: IRQ line (GSI) %u: %s\n", gsi, std::string(st.message()).c_str());
}

void Machine::HpetAccessed(bool was_legacy, bool moved) {
  if (in_tcg_) {
    // Only when the next interrupt moved: on instruction time TimerMoved ends
    // the run, and Linux's /dev/hpet driver calibrates itself by writing a
    // comparator whose interrupt is off in a loop for 1 ms of HPET time
    // (drivers/char/hpet.c, __hpet_calibrate): ~500 000 writes beside the NMI
    // watchdog, which took its boot from 2.8 to 3.7 s when each ended a run.
    if (moved) TimerMoved();
    return;
  }
  if (hpet_->legacy() != was_legacy) {
    absl::StatusOr<std::pair<std::array<vcpu::PitChannelState, 3>, bool>> pit = vm_->GetPit();
    absl::Status st = pit.ok() ? vm_->SetPit(pit->first, pit->second, hpet_->legacy()) : pit.status();
    if (!st.ok() && irq_errors_++ == 0)
      std::fprintf(stderr, "vbts: warning: the 8254 under the HPET's legacy mode: %s\n", std::string(st.message()).c_str());
  }
  ServiceTimersOnKvm();
}

void Machine::RtcAccessed() {
  // IRQ 8 and the RTC's next interrupt follow registers A-C. The RTC is among
  // the TCG engine's deadlines on host time only (NextTimerNs).
  if (in_tcg_) {
    if (clock_->source() == vcpu::GuestClock::Source::kHost || config_.instruction_clock) TimerMoved();
    return;
  }
  ServiceTimersOnKvm();
}

void Machine::ServiceTimersOnKvm() {
  const uint64_t now = NowNs();
  hpet_->Advance(now);
  cmos_rtc_->Advance();
  std::optional<uint64_t> next = hpet_->NextInterruptNs();
  if (std::optional<int64_t> rtc = cmos_rtc_->NsToNextInterrupt(); rtc && (!next || now + *rtc < *next))
    next = now + static_cast<uint64_t>(*rtc);
  // One setitimer a new expiry: the periodic kick stands in for a later one.
  // The kick comes no sooner than kMinKickNs from now, as KVM keeps its
  // own periodic LAPIC timer to min_timer_period_us (200 us): with an
  // interrupt due at every tick the SIGALRMs otherwise ended KVM_RUN before
  // the guest took a single interrupt (image hostile_hpet_storm_kvm: 0 in
  // 2 s without the floor, ~13 500 with it).
  constexpr uint64_t kMinKickNs = 100'000;
  if (next && next != kvm_kick_at_) KickTimer::KickIn(std::max(*next > now ? *next - now : 0, kMinKickNs));
  kvm_kick_at_ = next;
}

std::optional<RunResult> Machine::GuestEnded() {
  if (std::optional<int> status = debug_exit_->exit_status()) return Finish(RunEnd::kGuestExit, *status, "");
  if (acpi_pm_->power_off_requested()) return Finish(RunEnd::kPowerOff, kExitPowerOff, "");
  if (std::optional<uint8_t> cmd = reset_line_->reset_command())
    return Finish(RunEnd::kTripleFault, kExitTripleFault,
                  absl::StrFormat("vbts: guest reset the machine (8042 command 0x%02X at port 0x64)", *cmd));
  return std::nullopt;
}

bool Machine::IsLapicPage(uint64_t gpa) const {
  // The xAPIC page while IA32_APIC_BASE has it enabled (SDM vol. 3A 10.4.4).
  // Not in x2APIC mode (SDM 10.12.2: the MMIO interface is then unavailable).
  return (apic_base_ & kApicBaseEn) && !(apic_base_ & kApicBaseExtd) &&
         (gpa & ~0xFFFull) == (apic_base_ & 0xFFFFFF000ull);
}

bool Machine::IsIoapicPage(uint64_t gpa) const {
  return (gpa & ~0xFFFull) == (ioapic_->base_address() & ~0xFFFull);
}

uint64_t Machine::MmioRead(uint64_t gpa, int size) {
  if (IsIoapicPage(gpa)) {
    // IOREGSEL (00H) and IOWIN (10H); KVM takes any access size there.
    const uint64_t v = ioapic_->Read(static_cast<uint32_t>(gpa & 0xFF));
    return size >= 4 ? v : v & ((1ull << (8 * size)) - 1);
  }
  if (IsLapicPage(gpa)) {
    // 32-bit registers at 16-byte strides; narrower reads see their bytes.
    const uint32_t offset = static_cast<uint32_t>(gpa & 0xFFF);
    const uint64_t v = lapic_->Read(offset & ~3u, GuestNs());
    return (v >> (8 * (offset & 3))) & (size >= 4 ? 0xFFFFFFFFull : ((1ull << (8 * size)) - 1));
  }
  uint8_t data[8] = {};
  Mmio(gpa, /*write=*/false, data, static_cast<uint32_t>(size));
  uint64_t v = 0;
  std::memcpy(&v, data, size);
  return v;
}

void Machine::MmioWrite(uint64_t gpa, int size, uint64_t value) {
  if (IsIoapicPage(gpa)) {
    const uint32_t v = static_cast<uint32_t>(size >= 4 ? value : value & ((1ull << (8 * size)) - 1));
    ioapic_->Write(static_cast<uint32_t>(gpa & 0xFF), v);  // (a delivery notifies the engine itself)
    return;
  }
  if (IsLapicPage(gpa)) {
    // Only aligned 32-bit writes reach a register (SDM vol. 3A 10.4.1: other
    // accesses are undefined; vbts drops them).
    if (size == 4 && (gpa & 3) == 0) {
      lapic_->Write(static_cast<uint32_t>(gpa & 0xFFF), static_cast<uint32_t>(value), GuestNs());
      AfterLapicWrite(MovesLapicTimer(static_cast<uint32_t>(gpa & 0xFF0)));
    } else {
      mmio_unclaimed_writes_++;
    }
    return;
  }
  uint8_t data[8];
  std::memcpy(data, &value, 8);
  Mmio(gpa, /*write=*/true, data, static_cast<uint32_t>(size));
}

vcpu::TcgDevices::Msr Machine::ReadMsr(uint32_t index, uint64_t& value) {
  msr_exits_++;
  if (index == kMsrApicBase) {
    value = apic_base_;
    return Msr::kDone;
  }
  if (index == kMsrTscDeadline) {
    if (!lapic_->config().tsc_deadline) return Msr::kGp;
    value = lapic_->ReadTscDeadline(GuestNs());
    return Msr::kDone;
  }
  if (IsX2apicMsr(index)) return lapic_->ReadX2apicMsr(index, value, GuestNs()) ? Msr::kDone : Msr::kGp;
  if (feature_msrs_ && pmu::FeatureMsrs::Owns(index)) return TcgMsr(feature_msrs_->Read(index), value);
  if (vpmu_ && vpmu_->Owns(index)) {
    FlushTcgBulk();
    return TcgMsr(vpmu_->ReadMsr(index), value);
  }
  if (vcpu::TcgCpu::OwnsMsr(index)) return Msr::kCpu;
  // The rest are KVM's in TCG too (machine check, MTRRs, feature control,
  // ...): read from the idle KVM vCPU; one KVM does not have raises #GP.
  absl::StatusOr<uint64_t> v = vcpu_->GetMsr(index);
  if (!v.ok()) return Msr::kGp;
  value = *v;
  return Msr::kDone;
}

vcpu::TcgDevices::Msr Machine::WriteMsr(uint32_t index, uint64_t value) {
  msr_exits_++;
  if (index == kMsrApicBase) {
    // BSP (8), x2APIC enable (10, with CPUID.1:ECX.x2APIC), global enable
    // (11), base (12..MAXPHYADDR-1); the rest is reserved (SDM vol. 3A
    // 10.4.4).
    const uint64_t writable = kApicBaseEn | 0xFFFFFF000ull | (lapic_->config().x2apic ? kApicBaseExtd : 0);
    if (value & ~(writable | (1ull << 8))) return Msr::kGp;
    // SDM 10.12.5, figure 10-27: EXTD without EN is invalid; x2APIC mode is
    // left only to disabled, and entered only from xAPIC mode.
    const bool en = value & kApicBaseEn, extd = value & kApicBaseExtd;
    const bool was_x2 = (apic_base_ & kApicBaseEn) && (apic_base_ & kApicBaseExtd);
    const bool was_disabled = !(apic_base_ & kApicBaseEn);
    if ((extd && !en) || (was_x2 && en && !extd) || (was_disabled && extd)) return Msr::kGp;
    apic_base_ = (apic_base_ & (1ull << 8)) | (value & writable);
    lapic_->SetX2apicMode(en && extd);
    return Msr::kDone;
  }
  if (IsX2apicMsr(index)) {
    if (!lapic_->WriteX2apicMsr(index, value, GuestNs())) return Msr::kGp;
    AfterLapicWrite(MovesLapicTimer((index - 0x800) << 4));
    return Msr::kDone;
  }
  if (index == kMsrTscDeadline) {
    if (!lapic_->config().tsc_deadline) return Msr::kGp;
    ArmTscDeadline(value);
    AfterLapicWrite(/*timer_moved=*/true);
    return Msr::kDone;
  }
  if (feature_msrs_ && pmu::FeatureMsrs::Owns(index)) return feature_msrs_->Write(index, value).gp ? Msr::kGp : Msr::kDone;
  if (vpmu_ && vpmu_->Owns(index)) {
    FlushTcgBulk();
    if (vpmu_->WriteMsr(index, value).gp) return Msr::kGp;
    // Counting may be about to start: the guest's clock goes on instructions
    // now (docs/tcg-engine.md, "Guest time").  So also at a PMU disable, after
    // which Linux's perf programs a task's counters, once the guest has armed a
    // counter before: Linux's boot disables the PMU once and counts nothing.
    const bool arms = vpmu_->MayStartCounting(index, value);
    pmu_armed_once_ = pmu_armed_once_ || arms;
    if ((arms || (pmu_armed_once_ && vpmu_->DisablesAll(index, value))) && tcg_->KeepCodeHookLingering())
      tcg_->RequestStop();
    // As in HandleMsr: the WRMSR retires under the configuration it leaves.
    if (tracer_) {
      absl::Status s = tracer_->AfterMsrWrite();
      if (!s.ok() && tcg_error_.ok()) tcg_error_ = s;
      // Tracing turned on or off: observe from the next instruction on (the
      // engine ends the run right after the WRMSR, TcgCallbacks::LeaveAfterWrmsr).
      if (!s.ok() || tracer_->WantsEveryInstruction() != tcg_observing_ ||
          vpmu_->WantsDataAccesses() != tcg_->has_data_access_hook())
        tcg_->RequestStop();
    }
    return Msr::kDone;
  }
  if (vcpu::TcgCpu::OwnsMsr(index)) return Msr::kCpu;
  // KVM's (see ReadMsr). KVM takes host writes of read-only MSRs that a
  // guest WRMSR may not make: those fault here (SDM vol. 4: MTRRCAP,
  // PLATFORM_ID, MCG_CAP, PERF_STATUS are read-only).
  constexpr uint32_t kReadOnly[] = {0xFE, 0x17, 0x179, 0x198};
  for (uint32_t ro : kReadOnly)
    if (index == ro) return Msr::kGp;
  // IA32_MCi_STATUS: a guest may write only 0 (SDM vol. 3B 15.3.2.2; KVM
  // applies this to guest writes only).
  if (index >= 0x400 && index < 0x480 && (index & 3) == 1 && value != 0) return Msr::kGp;
  const vcpu::MsrValue m{index, value};
  return vcpu_->SetMsrs(absl::MakeConstSpan(&m, 1)).ok() ? Msr::kDone : Msr::kGp;
}

std::optional<uint8_t> Machine::AcknowledgeInterrupt() {
  if (!InterruptPending()) return std::nullopt;
  // The LAPIC's interrupts first, then the 8259's through LINT0 (QEMU's
  // cpu_get_pic_interrupt does the same).
  if (lapic_->Pending()) return lapic_->Acknowledge();
  return pic_->Acknowledge();
}

bool Machine::PicDelivers() const {
  // The 8259's INT reaches the processor through LINT0 in ExtINT mode,
  // unmasked (virtual wire mode, SDM 10.5.1), or directly while the APIC is
  // disabled in IA32_APIC_BASE (SDM 10.4.3).
  if (!pic_->Output()) return false;
  if (!(apic_base_ & kApicBaseEn)) return true;
  const uint32_t lint0 = lapic_->lvt_lint0();
  return !(lint0 & vcpu::kApicLvtMasked) && ((lint0 >> 8) & 7) == 7;
}

void Machine::NotifyInterrupts() {
  tcg_control_->Notify();
  if (PicDelivers()) tcg_->InterruptPending();
}

bool Machine::InterruptPending() {
  // While a debugger steps, external interrupts wait in the LAPIC.
  if (debugger_ && debugger_->masks_interrupts()) return false;
  return lapic_->Pending().has_value() || PicDelivers();
}

vcpu::TcgDevices::Msr Machine::ReadPmc(uint32_t ecx, uint64_t& value) {
  if (!vpmu_) return Msr::kGp;
  FlushTcgBulk();
  return TcgMsr(vpmu_->ReadPmc(ecx), value);
}

std::optional<uint64_t> Machine::ReadCr8() { return (lapic_->Read(0x80, GuestNs()) >> 4) & 0xF; }

bool Machine::WriteCr8(uint64_t value) {
  lapic_->Write(0x80, static_cast<uint32_t>(value & 0xF) << 4, GuestNs());  // TPR (SDM vol. 3A 10.8.6.1)
  return true;
}

std::optional<uint64_t> Machine::ReadTsc() { return clock_->Tsc(ClockNow()); }

void Machine::WriteTsc(uint64_t value) { clock_->SetTsc(value, ClockNow()); }

absl::Status Machine::TimeAndIrqchipsFromKvm() {
  VBTS_ASSIGN_OR_RETURN(uint64_t tsc, vcpu_->GetMsr(kMsrTsc));
  clock_->SetTsc(tsc, ClockNow());
  VBTS_ASSIGN_OR_RETURN(vcpu::IoapicState ioapic, vm_->GetIoapic());
  ioapic_->SetState(ioapic);
  VBTS_ASSIGN_OR_RETURN(auto pic, vm_->GetPic());
  pic_->SetState(pic.first, pic.second);
  // KVM's PIT load times are CLOCK_MONOTONIC; the model's are the guest
  // clock's: the same time before now in both.
  VBTS_ASSIGN_OR_RETURN(auto pit, vm_->GetPit());
  const int64_t host_now = static_cast<int64_t>(NowNs()), guest_now = static_cast<int64_t>(GuestNs());
  for (vcpu::PitChannelState& c : pit.first) c.count_load_time = guest_now - (host_now - c.count_load_time);
  pit_->SetState(pit.first, static_cast<uint64_t>(guest_now));
  hpet_->Rebase(static_cast<uint64_t>(host_now), static_cast<uint64_t>(guest_now));
  pit_->set_speaker_data_on(pit.second);
  return absl::OkStatus();
}

absl::Status Machine::TimeAndIrqchipsToKvm() {
  VBTS_RETURN_IF_ERROR(vcpu_->SetTsc(clock_->Tsc(ClockNow())));
  VBTS_RETURN_IF_ERROR(vm_->SetIoapic(ioapic_->GetState()));
  VBTS_RETURN_IF_ERROR(vm_->SetPic(pic_->master(), pic_->slave()));
  std::array<vcpu::PitChannelState, 3> ch = pit_->GetState();
  const int64_t host_now = static_cast<int64_t>(NowNs()), guest_now = static_cast<int64_t>(GuestNs());
  for (vcpu::PitChannelState& c : ch) c.count_load_time = host_now - (guest_now - c.count_load_time);
  hpet_->Rebase(static_cast<uint64_t>(guest_now), static_cast<uint64_t>(host_now));
  kvm_kick_at_.reset();
  return vm_->SetPit(ch, pit_->speaker_data_on(), hpet_->legacy());
}

void Machine::AfterLapicWrite(bool timer_moved) {
  NotifyInterrupts();
  if (timer_moved) TimerMoved();
}

void Machine::TimerMoved() {
  if (!in_tcg_) return;
  // On instruction time the run loop turns the timers' next expiry into an
  // instruction count (TimerDeadlineTicks): end the run so that it does.
  if (clock_->source() == vcpu::GuestClock::Source::kInstructions) {
    tcg_->RequestStop();
    return;
  }
  // On host time the run's limit came from the expiry known when it began:
  // an earlier one armed since (Linux re-arms its tick from the tick's own
  // interrupt handler, where nothing was armed when the run began) ends the
  // run at that expiry, not up to a slice (50 ms) later.
  if (std::optional<uint64_t> t = NsToNextTimer(GuestNs())) tcg_->LimitRun(std::chrono::nanoseconds(*t));
}

std::optional<uint64_t> Machine::NsToNextTimer(uint64_t guest_now) const {
  const std::optional<uint64_t> t = NextTimerNs();
  if (!t) return std::nullopt;
  return std::max<uint64_t>(*t - std::min(*t, guest_now), 1000);
}

void Machine::ArmTscDeadline(uint64_t tsc) {
  // The LAPIC counts the guest clock's nanoseconds: the deadline's TSC value
  // becomes the time the TSC reaches it (now, if it already has).
  const vcpu::GuestClock::Now now = ClockNow();
  const uint64_t now_tsc = clock_->Tsc(now), now_ns = clock_->Ns(now);
  const uint64_t at_ns = tsc <= now_tsc ? now_ns : clock_->NsOfTicks(clock_->Ticks(now) + (tsc - now_tsc));
  lapic_->WriteTscDeadline(tsc, at_ns, now_ns);
}

absl::Status Machine::LapicFromKvm() {
  VBTS_ASSIGN_OR_RETURN(kvm_lapic_state page, vcpu_->GetLapic());
  // IA32_APIC_BASE first: the page's layout depends on the mode.
  VBTS_ASSIGN_OR_RETURN(apic_base_, vcpu_->GetMsr(kMsrApicBase));
  lapic_->SetX2apicMode((apic_base_ & kApicBaseEn) && (apic_base_ & kApicBaseExtd));
  VBTS_RETURN_IF_ERROR(tcg_control_->SetLapic(page));
  // The page (the timer's mode) and the TSC have moved: an armed deadline can.
  if (lapic_->config().tsc_deadline) {
    // KVM's deadline, or none: the model may keep one from its last stretch
    // in TCG (SetState keeps an armed deadline), which has passed on KVM.
    VBTS_ASSIGN_OR_RETURN(uint64_t tsc, vcpu_->GetMsr(kMsrTscDeadline));
    ArmTscDeadline(tsc);
    if (tsc != 0) {
      const vcpu::MsrValue off{kMsrTscDeadline, 0};
      VBTS_RETURN_IF_ERROR(vcpu_->SetMsrs({&off, 1}));
    }
  }
  // The timer now runs in the model: KVM's stops (deadline disarmed above,
  // initial count 0 here), so that it does not expire while the vCPU is idle
  // and come back as an interrupt after the switch back, which loads the
  // model's page (image apic_switch_pm32).
  std::memset(page.regs + vcpu::kApicRegTimerInitialCount, 0, 4);
  return vcpu_->SetLapic(page);
}

absl::Status Machine::TscDeadlineToKvm() {
  // After KVM_SET_LAPIC (KVM ignores the MSR outside TSC-deadline mode) and
  // the TSC (KVM converts the deadline against the guest's TSC at the write).
  if (!lapic_->config().tsc_deadline) return absl::OkStatus();
  const vcpu::MsrValue m{kMsrTscDeadline, lapic_->ReadTscDeadline(GuestNs())};
  return vcpu_->SetMsrs({&m, 1});
}

void Machine::UpdateClockSource() {
  // The guest's time runs on instructions while they are all counted, and
  // while the code hook that counted them lingers unused (it still sees
  // every instruction: TcgCpu::CodeHookLingering).  Host time there would
  // be the time the engine takes to run code translated with the hook, and
  // each switch of Linux's perf around a context switch or a PMI would let
  // milliseconds of it into the counted process's times (docs/tcg-engine.md,
  // "Guest time").
  const bool instructions = in_tcg_ && (tcg_observing_ || tcg_->CodeHookLingering());
  const auto source = instructions ? vcpu::GuestClock::Source::kInstructions : vcpu::GuestClock::Source::kHost;
  if (clock_->source() != source) clock_->SetSource(source, ClockNow());
}

uint64_t Machine::RetiredNow() const {
  // Instructions counted by the tracer, skipped inside blocks, and run
  // under the lingering code hook: each instruction is in one of them.
  uint64_t retired = (tracer_ ? tracer_->stats().instructions : 0) + (tcg_ ? tcg_->lingering_retired() : 0);
  if (in_tcg_ && tcg_bulk_) retired += tcg_->skipped();
  return retired;
}

vcpu::GuestClock::Now Machine::ClockNow() const {
  // Host time leaves out the time QEMU spends translating guest code and
  // invalidating translations, which a CPU does not spend (docs/tcg-engine.md,
  // "Guest time").
  return {NowNs() - vcpu::TcgCpu::TranslationNs(), RetiredNow()};
}

std::optional<uint64_t> Machine::TimerDeadlineTicks() const {
  if (clock_->source() != vcpu::GuestClock::Source::kInstructions) return std::nullopt;
  std::optional<uint64_t> ns = NextTimerNs();
  if (!ns) return std::nullopt;
  return clock_->TicksOfNs(*ns);
}

std::optional<uint64_t> Machine::NextTimerNs() const {
  const uint64_t now = GuestNs();
  std::optional<uint64_t> next = lapic_->NextDeadline();
  // The RTC runs on the host's clock: its interrupts wake the guest on host
  // time; on instruction time they come when the loop next looks (a halted
  // guest's wait looks in slices). With --clock=instructions it runs on the
  // guest's clock, a deadline like the others.
  std::optional<uint64_t> rtc;
  if (clock_->source() == vcpu::GuestClock::Source::kHost || config_.instruction_clock)
    if (std::optional<int64_t> d = cmos_rtc_->NsToNextInterrupt()) rtc = now + static_cast<uint64_t>(*d);
  for (std::optional<uint64_t> t : {pit_->NextEdgeNs(now), hpet_->NextInterruptNs(), rtc})
    if (t && (!next || *t < *next)) next = t;
  return next;
}

void Machine::AdvanceTimers(uint64_t guest_ns) {
  lapic_->Advance(guest_ns);
  hpet_->Advance(guest_ns);
  cmos_rtc_->Advance();
  if (pit_->Advance(guest_ns) && !hpet_->legacy()) {
    // A rising edge of channel 0's output on ISA line 0: a pulse, as KVM's
    // PIT gives it (edge-triggered in both controllers).
    for (bool level : {true, false}) {
      ioapic_->SetLine(0, level);
      pic_->SetLine(0, level);
    }
  }
}

void Machine::DebugRegistersWritten() {
  // The tracer raises the guest's data breakpoints (it reads DR0-DR7 again);
  // a data breakpoint makes it want every instruction: end the run (QEMU
  // ends the block after a MOV to DRn) so that observation starts next.
  if (!tracer_) return;
  FlushTcgBulk();  // the next instruction is reported: the tracer decides again how to follow the guest
  tracer_->RefreshGuestBreakpoints();
  if (tracer_->WantsEveryInstruction() != tcg_observing_) tcg_->RequestStop();
}

vcpu::CpuidResult Machine::Cpuid(uint32_t leaf, uint32_t subleaf) {
  // (While the TCG engine is being made, it asks before tcg_ is set: CR4 = 0.)
  const pmu::CpuidResult r = model_->CpuidInState(leaf, subleaf, apic_base_, tcg_ ? tcg_->cr4() : 0);
  return vcpu::CpuidResult{r.eax, r.ebx, r.ecx, r.edx};
}

absl::StatusOr<bool> Machine::HandleExit(RunResult* result) {
  kvm_run* run = vcpu_->run();
  switch (run->exit_reason) {
    case KVM_EXIT_IO: {
      auto* data = reinterpret_cast<uint8_t*>(run) + run->io.data_offset;
      const bool write = run->io.direction == KVM_EXIT_IO_OUT;
      for (uint32_t i = 0; i < run->io.count; i++)
        VBTS_RETURN_IF_ERROR(
            pio_.Dispatch(run->io.port, run->io.size, write, absl::MakeSpan(data + i * run->io.size, run->io.size)));
      if (run->io.port == CmosRtc::kPort + 1) RtcAccessed();
      PrintWarnings();
      if (std::optional<RunResult> end = GuestEnded()) {
        *result = *end;
        return false;
      }
      return true;
    }
    case KVM_EXIT_MMIO:
      Mmio(run->mmio.phys_addr, run->mmio.is_write, run->mmio.data, run->mmio.len);
      return true;
    case KVM_EXIT_HLT:
      // Only without an in-kernel LAPIC; vbts always has one, but be exact.
      *result = Finish(RunEnd::kHaltedIfClear, kExitHaltedIfClear, "vbts: guest halted (KVM_EXIT_HLT)");
      return false;
    case KVM_EXIT_SHUTDOWN:
      *result = Finish(RunEnd::kTripleFault, kExitTripleFault, "vbts: guest shut down (triple fault)");
      return false;
    case KVM_EXIT_DEBUG:
    case KVM_EXIT_INTERNAL_ERROR: {
      VBTS_ASSIGN_OR_RETURN(vcpu::Supervisor::Verdict v, run->exit_reason == KVM_EXIT_DEBUG
                                                             ? supervisor_->OnDebug()
                                                             : supervisor_->OnInternalError());
      if (tracer_ && run->exit_reason == KVM_EXIT_INTERNAL_ERROR) PrintWarnings();
      std::optional<RunResult> end = FromVerdict(v);
      if (!end) return true;
      *result = *end;
      return false;
    }
    case KVM_EXIT_X86_RDMSR:
    case KVM_EXIT_X86_WRMSR:
      VBTS_RETURN_IF_ERROR(HandleMsr(run->exit_reason == KVM_EXIT_X86_WRMSR));
      PrintWarnings();
      return true;
    case KVM_EXIT_FAIL_ENTRY:
      *result = Finish(RunEnd::kError, kExitVbtsError,
                       absl::StrFormat("vbts: KVM could not enter the guest (KVM_EXIT_FAIL_ENTRY, reason 0x%x)",
                                       run->fail_entry.hardware_entry_failure_reason));
      return false;
    default:
      *result = Finish(RunEnd::kError, kExitVbtsError,
                       absl::StrFormat("vbts: unhandled KVM exit reason %u", run->exit_reason));
      return false;
  }
}

absl::Status Machine::AddDevices() {
  if (config_.HasDevice("intel-iommu")) {
    iommu_ = std::make_unique<IntelIommu>(*tracer_ram_, [this](const MsiMessage& m) { DeliverMsi(m); });
    // Every I/O APIC interrupt goes through interrupt remapping (VT-d spec
    // 5.1): the entry becomes the message the I/O APIC would send.
    ioapic_->SetRemapper([this](uint64_t e) {
      constexpr uint64_t kRemappable = 1ull << 48, kLevel = 1ull << 15;
      MsiMessage m;
      if (e & kRemappable) {  // index[14:0] in 63:49, format in 48, index[15] in 11
        m.address = 0xFEE00000ull | ((e >> 48) & 0xFFFF) << 4 | ((e >> 11) & 1) << 2;
        m.data = static_cast<uint32_t>((e & 0xFF) | (e & kLevel));
      } else {  // destination, destination mode; vector, delivery mode, trigger mode
        m.address = 0xFEE00000ull | ((e >> 56) & 0xFF) << 12 | ((e >> 11) & 1) << 2;
        m.data = static_cast<uint32_t>((e & 0x7FF) | (e & kLevel));
      }
      std::optional<MsiMessage> out = iommu_->RemapInterrupt(std::nullopt, m);
      return out && DeliverMsi(*out);
    });
  }
  if (config_.HasDevice("edu")) {
    // Where firmware (SeaBIOS on QEMU's i440FX) would put it: slot 3 of
    // bus 0, INTA# routed to line 11, BAR0 in the PCI hole below the I/O
    // APIC; memory decoding on, bus mastering left to the driver.
    constexpr uint8_t kDevfn = 3 << 3;
    constexpr uint32_t kBar = 0xFE000000;
    edu_ = std::make_unique<PciEdu>(static_cast<PciPlatform&>(*this), kDevfn, kBar, /*line=*/11);
    uint8_t command[2] = {PciFunction::kCommandMemory, 0};
    edu_->WriteConfig(0x04, absl::MakeConstSpan(command));
    pci_host_->Attach(kDevfn, edu_.get());
  }
  return absl::OkStatus();
}

absl::Status Machine::DmaRead(uint16_t requester, uint64_t address, absl::Span<uint8_t> out) {
  absl::Status st = IommuDmaRead(iommu_.get(), *tracer_ram_, requester, address, out);
  if (!st.ok()) dma_faults_++;
  return st;
}

absl::Status Machine::DmaWrite(uint16_t requester, uint64_t address, absl::Span<const uint8_t> data) {
  // Through the code-coherent view: a DMA write over translated code drops
  // the TCG engine's translations of it.
  absl::Status st = IommuDmaWrite(iommu_.get(), *tracer_ram_, requester, address, data);
  if (!st.ok()) dma_faults_++;
  return st;
}

void Machine::SetIntx(uint16_t requester, uint8_t line, bool level) { SetIsaLine(line, level); }

void Machine::SignalMsi(uint16_t requester, const MsiMessage& message) {
  std::optional<MsiMessage> m = iommu_ ? iommu_->RemapInterrupt(requester, message) : message;
  if (m) DeliverMsi(*m);
}

bool Machine::DeliverMsi(const MsiMessage& m) {
  // Address: FEEH in 31:20, destination ID 19:12, destination mode 2; data:
  // vector 7:0, delivery mode 10:8, trigger mode 15 (SDM vol. 3A 10.11.1-2).
  // A message elsewhere is no interrupt: dropped. Whom it names: MsiTarget.
  const std::optional<MsiTarget> to = MsiTarget::Of(m);
  if (!to || !lapic_) return false;
  const bool named = m.x2apic_dest ? lapic_->AcceptsWide(to->dest, to->logical)
                                   : lapic_->Accepts(static_cast<uint8_t>(to->dest), to->logical);
  if (!named) return false;
  switch ((m.data >> 8) & 7) {
    case 0:  // fixed
    case 1: {  // lowest priority (one LAPIC)
      const bool accepted = lapic_->Raise(static_cast<uint8_t>(m.data), (m.data >> 15) & 1);
      tcg_control_->Notify();
      return accepted;
    }
    case 4:  // NMI
      tcg_->QueueNmi();
      return true;
    default:  // SMI, INIT, ExtINT, reserved: not modelled
      return false;
  }
}

}  // namespace vbts::vmm
