// machine.h: one guest machine for `vbts run`: RAM, the KVM VM with its
// in-kernel irqchip and one vCPU, COM1 and the debug-exit port, the loaded
// Multiboot image, and the run loop that ends with the guest's verdict.
#ifndef VBTS_VMM_MACHINE_H_
#define VBTS_VMM_MACHINE_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pmu/cpu_model.h"
#include "pmu/feature_msrs.h"
#include "pmu/vpmu.h"
#include "vcpu/guest_clock.h"
#include "vcpu/host_facts.h"
#include "vcpu/pic8259.h"
#include "vcpu/pit8254.h"
#include "vcpu/kvm_vcpu.h"
#include "vcpu/supervisor.h"
#include "vcpu/lapic.h"
#include "vcpu/tcg_control.h"
#include "vcpu/tcg_cpu.h"
#include "vcpu/tracer.h"
#include "vmm/acpi_pm.h"
#include "vmm/cmos_rtc.h"
#include "vmm/debug_exit.h"
#include "vmm/debugger.h"
#include "vmm/fw_cfg.h"
#include "vmm/guest_output.h"
#include "vmm/hpet.h"
#include "vmm/pc_testdev.h"
#include "vmm/guest_memory.h"
#include "vmm/kvm_vm.h"
#include "vmm/loader.h"
#include "vmm/pio_bus.h"
#include "vmm/intel_iommu.h"
#include "vmm/pci_edu.h"
#include "vmm/pci_function.h"
#include "vmm/pci_host.h"
#include "vmm/reset_line.h"
#include "vmm/uart16550.h"

namespace vbts::vmm {

struct MachineConfig {
  std::string image_path;
  uint64_t mem_bytes = 128ull << 20;
  std::string cpu_model = "westmere";
  double timeout_seconds = 0;  // 0: no limit
  std::string append;          // Multiboot command line after the image name
  // --initrd: Multiboot modules, "FILE [ARGS],FILE..." as QEMU's -initrd
  // (vmm/multiboot_info.h, ParseInitrd). kvm-unit-tests reads its
  // environment (NR_CPUS=1, ...) from the first one.
  std::string initrd;
  bool verbose = false;
  // --vpmu: "emulated" (the virtual PMU, docs/pmu-model.md), "off" (no
  // PMU/DS/LBR: the model's CPUID hides them, the MSRs #GP), "passthrough".
  std::string vpmu = "emulated";
  // --branches=FILE: every control transfer the tracer sees, as
  // "0x<from> 0x<to> <kind>" lines (docs/cli.md); --insns=FILE: the linear
  // address of every instruction executed, one per line.  Either makes vbts
  // step the whole guest.
  std::string branches_path;
  std::string insns_path;
  // --engine: "kvm" (the host's KVM), "tcg" (vcpu/tcg_cpu.h: QEMU's TCG
  // in-process, for the whole run; docs/tcg-engine.md), "kvm-tcg" (KVM, and
  // TCG while the guest traces itself) or "auto": tcg when the run observes
  // every instruction from its start (a recording, --branches, --insns) or on
  // a PVM host, kvm-tcg otherwise.
  std::string engine = "auto";
  // --tcg-hooks: "block" (the TCG engine calls vbts once a translated block
  // while vbts lets whole blocks run unreported) or "instruction" (before
  // every instruction, as before 2026-11-27; for comparisons).
  // docs/tcg-engine.md, "One hook a block".
  bool tcg_hook_per_block = true;
  bool tcg_count_call = true;  // --tcg-hooks=call (TcgCpu::Config::count_call)
  // --clock=instructions: the guest's time runs on retired instructions for
  // the whole run (one TSC tick each; a halted guest moves to its next timer
  // at once), as it does while vbts traces (docs/tcg-engine.md, "Guest
  // time"); the TCG engine observes every block for it.  Default: the host's
  // clock while untraced.
  bool instruction_clock = false;
  // Single-step the whole guest on hosts that rewrite CPUID, so that every
  // CPUID answers from the CPU model (docs/completion.md, "CPUID").
  bool exact_cpuid = false;
  int output_fd = 1;           // where COM1 output goes
  // `vbts record`: every transfer the tracer reports, in program order
  // (like --branches, it makes vbts step the whole guest). Returning false
  // says it wants no more: vbts stops stepping for it.
  std::function<bool(const pmu::Branch&)> transfer_sink;
  // --gdb=[HOST:]PORT: a GDB remote-protocol server (vmm/debugger.h,
  // docs/gdb.md); the run uses the TCG engine.  --gdb-wait: stop before the
  // first instruction until a client attaches.  gdb_arch: the target
  // description, "auto" (x86-64 when the CPU model has long mode), "i386" or
  // "x86-64".
  std::string gdb;
  bool gdb_wait = false;
  // --device=NAME (repeatable): PCI devices and platform units beyond the
  // PC every guest gets: "edu" (vmm/pci_edu.h) and "intel-iommu"
  // (vmm/intel_iommu.h); docs/guest-abi.md, "Optional devices". They need
  // the TCG engine (auto chooses it).
  std::vector<std::string> devices;
  static constexpr const char* kDeviceNames[] = {"edu", "intel-iommu"};  // what --device accepts
  bool HasDevice(std::string_view name) const {
    return std::find(devices.begin(), devices.end(), name) != devices.end();
  }
  // --sandbox=on: the syscall filter after setup (vmm/sandbox.h).
  bool sandbox = true;
  std::string gdb_arch = "auto";
};

enum class RunEnd { kGuestExit, kPowerOff, kTimeout, kTripleFault, kHaltedIfClear, kUnsupported, kError, kKilled, kSignalled };

struct RunResult {
  RunEnd end = RunEnd::kError;
  int exit_status = 0;  // the process status `vbts run` exits with
  std::string message;  // one line for stderr on an abnormal end (empty on a guest exit)
  std::string details;  // register dump and device statistics (printed with -v)
};

// A KVM VM made ahead of the machine: KVM_X86_SET_MSR_FILTER waits for an
// SRCU grace period (~10-15 ms measured here, a third of a short run), so
// `vbts run` creates the VM and installs the filter on another thread while
// it probes the host. The filter depends only on --vpmu.
struct PreparedVm {
  std::unique_ptr<Vm> vm;
  std::string vpmu;  // the --vpmu mode its filter is for
};
absl::StatusOr<PreparedVm> PrepareVm(const Kvm& kvm, const std::string& vpmu);

class Machine : private vcpu::TcgDevices, private PciPlatform {
 public:
  friend class Debugger;
  // Builds the machine and loads the image; errors name the file/field at fault.
  // `prepared` (optional) is a VM from PrepareVm for config.vpmu.
  static absl::StatusOr<std::unique_ptr<Machine>> Create(const MachineConfig& config, const Kvm& kvm,
                                                         const vcpu::HostFacts& facts,
                                                         std::optional<PreparedVm> prepared = std::nullopt);
  ~Machine();
  RunResult Run();
  // The supervisor (its mode, statistics), for tests and diagnostics.
  const vcpu::Supervisor& supervisor() const { return *supervisor_; }
  // The branch-tracing engine's hook (vcpu/step_observer.h); call before Run().
  void SetObserver(vcpu::StepObserver* observer) { supervisor_->SetObserver(observer); }
  // The loaded image's executable segments (for vbts record's trace header).
  const std::vector<CodeRange>& code() const { return code_; }
  // The guest starts on the KVM engine (--engine resolved by Setup).
  bool starts_in_kvm() const { return config_.engine == "kvm"; }
  uint32_t entry() const { return entry_; }

 private:
  Machine(const MachineConfig& config, const vcpu::HostFacts& facts);
  absl::Status Setup(const Kvm& kvm, std::optional<PreparedVm> prepared);
  absl::Status SetBootState(uint32_t entry, BootProtocol boot, uint32_t info);
  bool GuestEndsRun() override {
    return debug_exit_->exit_status() || reset_line_->reset_command() || acpi_pm_->power_off_requested() ||
           acpi_pm_->suspend_requested();
  }
  // The guest ended the run through a device: the debug-exit port (its
  // status), ACPI soft-off (0) or the 8042 reset line (120, as a triple fault).
  std::optional<RunResult> GuestEnded();
  // Sets ISA interrupt line `line` (pc-testdev's lines, COM1's IRQ 4) in the
  // interrupt controllers of the engine that holds the vCPU.
  void SetIsaLine(uint32_t line, bool level);
  // Sets I/O APIC input `gsi` alone (the HPET's routes, 16-23).
  void SetGsi(uint32_t gsi, bool level);
  // The time of the devices that keep it (the 8254, the ACPI PM timer, the
  // HPET): the guest clock in TCG, the host's under KVM.
  uint64_t DeviceNs() const;
  // After a guest access to the HPET: its legacy replacement mode cuts the
  // 8254 off KVM's interrupt controllers (KVM_PIT_FLAGS_HPET_LEGACY) when it
  // changed; `moved`: its next interrupt moved (TimerMoved, ServiceTimersOnKvm).
  void HpetAccessed(bool was_legacy, bool moved);
  // On the KVM engine: the HPET's and the RTC's interrupts due by now, and a
  // kick of KVM_RUN at the next one (KickTimer::KickIn).
  void ServiceTimersOnKvm();
  // After a guest access to the RTC's data port: IRQ 8 and the RTC's next
  // interrupt may have changed (TimerMoved, ServiceTimersOnKvm).
  void RtcAccessed();
  // The guest asked for ACPI S3: sleeps until the RTC alarm and resumes at the
  // FACS waking vector in real mode (nullopt), or ends the run (no wake
  // event, --timeout first at `deadline`, no waking vector).
  std::optional<RunResult> SuspendToRam(uint64_t deadline);
  // Handles one KVM exit; sets `result` and returns false when the run ends.
  absl::StatusOr<bool> HandleExit(RunResult* result);
  // KVM_EXIT_X86_RDMSR/WRMSR of an MSR the virtual PMU owns.
  absl::Status HandleMsr(bool write);
  void PrintWarnings();
  RunResult Finish(RunEnd end, int status, std::string message);
  // The run loop of --engine=tcg.
  RunResult RunTcg();
  // The TCG engine's run loop from the state it holds; with `until_untraced`
  // it returns nothing once tracing is off (the vCPU can go back to KVM).
  // `deadline`: steady-clock ns, 0 for none.
  std::optional<RunResult> RunTcgLoop(uint64_t deadline, bool until_untraced);
  absl::Status CreateTcg();
  // --engine=auto: the guest turned tracing on under KVM; moves the vCPU to
  // the TCG engine and runs it there until tracing is off, then moves it
  // back.  A result when the run ended in TCG; nothing when it continues on
  // KVM (or could not switch here: the next stop tries again).
  absl::StatusOr<std::optional<RunResult>> TraceInTcg(double deadline);
  // The debugger's client needs the TCG engine (Debugger::WantsTcg) and the
  // supervisor's state is plain: the vCPU moves there (TraceInTcg) until the
  // client lets it run with nothing to stop at.  `deadline` moves by the
  // time the guest was stopped for the client.
  absl::StatusOr<std::optional<RunResult>> DebuggerMovesToTcg(double& deadline);
  // The guest's tracing or the debugger's client needs the TCG engine.
  bool WantsTcg() const;
  // Before the virtual PMU is read or written in block-level observation:
  // the instructions that ran unreported are counted first.
  void FlushTcgBulk();
  // The guest's time in the TCG engine (vcpu/guest_clock.h): where its
  // sources stand now (the instructions retired so far include those run
  // unreported in block-level observation), its LAPIC nanoseconds, and the
  // LAPIC timer's deadline in ticks while the clock runs on instructions.
  vcpu::GuestClock::Now ClockNow() const;
  // Its `retired` part alone (no host clock read: the hot path of a clock on
  // instructions).
  uint64_t RetiredNow() const;
  uint64_t GuestNs() const { return clock_->Ns(ClockNow()); }
  std::optional<uint64_t> TimerDeadlineTicks() const;
  // The next LAPIC timer expiry, PIT channel-0 edge or HPET interrupt, in guest ns.
  std::optional<uint64_t> NextTimerNs() const;
  // Guest ns from `guest_now` to NextTimerNs(), at least 1 us (a run's limit).
  std::optional<uint64_t> NsToNextTimer(uint64_t guest_now) const;
  // The timers up to `guest_ns` (the PIT's edges pulse ISA line 0 unless
  // the HPET's legacy replacement mode has cut it off).
  void AdvanceTimers(uint64_t guest_ns);
  // The guest moved a timer's next expiry (LAPIC timer, TSC deadline, PIT):
  // the current TCG run ends at it (RequestStop on instruction time,
  // TcgCpu::LimitRun on host time).
  void TimerMoved();
  // What moves with the vCPU besides its registers, LAPIC and debug
  // registers: the TSC, and the I/O APIC, 8259 and 8254 state, from KVM's
  // vCPU and in-kernel irqchip into the TCG engine's models and back.
  absl::Status TimeAndIrqchipsFromKvm();
  // After a guest write of the LAPIC in TCG: the engine notices interrupts,
  // and a write that may have moved the timer (`timer_moved`) ends the run
  // on instruction time.
  void AfterLapicWrite(bool timer_moved);
  // IA32_TSC_DEADLINE in TCG: arms the LAPIC model at the guest clock's
  // time of that TSC value.
  void ArmTscDeadline(uint64_t tsc);
  // KVM -> TCG, after TimeAndIrqchipsFromKvm: IA32_APIC_BASE (xAPIC or
  // x2APIC mode), the page, an armed TSC deadline; KVM's own timer stops.
  absl::Status LapicFromKvm();
  // TCG -> KVM, after the page and the TSC: an armed TSC deadline.
  absl::Status TscDeadlineToKvm();
  static vcpu::CodeGenerations CodeGenerationsNow();
  absl::Status TimeAndIrqchipsToKvm();
  // The tracer's transfer sink from what consumes transfers now: --branches,
  // --insns, vbts record, GDB's branch trace.
  void InstallSink();
  // GDB's branch trace on or off (Debugger::SetBranchTrace).
  absl::Status SetGdbBranchTrace(bool on);
  // The vCPU state from the engine that holds it.
  absl::StatusOr<vcpu::CpuState> CurrentState();
  // vcpu::TcgDevices: what the TCG engine hands to the machine.
  uint32_t PortIn(uint16_t port, int size) override;
  void PortOut(uint16_t port, int size, uint32_t value) override;
  uint64_t MmioRead(uint64_t gpa, int size) override;
  void MmioWrite(uint64_t gpa, int size, uint64_t value) override;
  Msr ReadMsr(uint32_t index, uint64_t& value) override;
  Msr WriteMsr(uint32_t index, uint64_t value) override;
  vcpu::CpuidResult Cpuid(uint32_t leaf, uint32_t subleaf) override;
  std::optional<uint8_t> AcknowledgeInterrupt() override;
  bool InterruptPending() override;
  void DebugRegistersWritten() override;
  std::optional<uint64_t> ReadCr8() override;
  bool WriteCr8(uint64_t value) override;
  std::optional<uint64_t> ReadTsc() override;
  void WriteTsc(uint64_t value) override;
  Msr ReadPmc(uint32_t ecx, uint64_t& value) override;
  bool IsLapicPage(uint64_t gpa) const;
  bool IsIoapicPage(uint64_t gpa) const;
  // The 8259 pair's INT reaches the processor (LINT0 in ExtINT mode, or the APIC disabled).
  bool PicDelivers() const;
  // Tells the TCG engine about the LAPIC's and the 8259s' deliverable interrupts.
  void NotifyInterrupts();
  // Installs or removes the TCG engine's instruction hook as the tracer
  // wants every instruction or not.  Its callers choose the guest clock's
  // source after it (UpdateClockSource).
  void UpdateTcgObservation();
  // The guest clock's source for what the TCG engine does now (docs/tcg-engine.md, "Guest time").
  void UpdateClockSource();
  // An MMIO access outside RAM (both engines): the pc-testdev window, or
  // nothing (reads all ones, writes dropped).
  void Mmio(uint64_t gpa, bool write, uint8_t* data, uint32_t len);
  // --device: creates and attaches the devices config_.devices names.
  absl::Status AddDevices();
  // PciPlatform: a PCI function's DMA (through the IOMMU, page by page) and
  // interrupts (INTx on an ISA/IOAPIC line; MSI through interrupt remapping).
  absl::Status DmaRead(uint16_t requester, uint64_t address, absl::Span<uint8_t> out) override;
  absl::Status DmaWrite(uint16_t requester, uint64_t address, absl::Span<const uint8_t> data) override;
  void SetIntx(uint16_t requester, uint8_t line, bool level) override;
  void SignalMsi(uint16_t requester, const MsiMessage& message) override;
  // A compatibility-format MSI to the LAPIC (SDM vol. 3A 10.11): whether it
  // accepted the interrupt.
  bool DeliverMsi(const MsiMessage& m);
  // The end of the run a supervisor verdict means, if any.
  std::optional<RunResult> FromVerdict(const vcpu::Supervisor::Verdict& v);

  MachineConfig config_;
  bool sink_wanted_ = true;  // config_.transfer_sink still wants transfers
  vcpu::HostFacts facts_;
  const pmu::CpuModel* model_ = nullptr;
  std::optional<pmu::CpuModel> own_model_;  // --vpmu=off: the model without its PMU
  std::unique_ptr<GuestMemory> ram_;
  // The tracer's (and the debugger's) view of RAM: stores made for the guest
  // drop the TCG engine's translations of the bytes they change.
  std::unique_ptr<vcpu::CodeCoherentMemory> tracer_ram_;
  // COM1's output (vmm/guest_output.h): with --timeout, a write that would
  // block past the deadline drops the rest of the output instead.
  void WriteGuestOutput(uint8_t c);
  GuestOutput output_{config_.output_fd};
  std::unique_ptr<Vm> vm_;
  std::unique_ptr<vcpu::KvmVcpu> vcpu_;
  std::unique_ptr<vcpu::Supervisor> supervisor_;
  std::unique_ptr<pmu::VirtualPmu> vpmu_;
  std::unique_ptr<pmu::FeatureMsrs> feature_msrs_;  // SPEC_CTRL, PRED_CMD, FLUSH_CMD
  std::unique_ptr<vcpu::Tracer> tracer_;
  std::unique_ptr<vcpu::TcgCpu> tcg_;  // --engine=tcg
  std::unique_ptr<vcpu::Lapic> lapic_;  // the LAPIC while in TCG (KVM's in-kernel one otherwise)
  std::unique_ptr<vcpu::TcgControl> tcg_control_;
  std::unique_ptr<vcpu::Ioapic> ioapic_;  // the IOAPIC while in TCG (KVM's in-kernel one otherwise)
  std::unique_ptr<vcpu::Pic8259> pic_;    // the 8259 pair while in TCG (KVM's in-kernel one otherwise)
  std::unique_ptr<vcpu::Pit8254> pit_;    // the 8254 while in TCG (KVM's in-kernel one otherwise)
  std::vector<std::unique_ptr<PioDevice>> device_ports_;  // their ports
  std::optional<vcpu::GuestClock> clock_;  // the guest's time while in TCG
  std::optional<uint64_t> timer_deadline_ticks_;  // TimerDeadlineTicks() for the current run
  bool in_tcg_ = false;                // the TCG engine holds the vCPU state
  bool tcg_observing_ = false;         // the instruction hook feeds the tracer
  // The guest has armed a performance counter (VirtualPmu::MayStartCounting)
  // at least once: from then on its PMU disables keep the code hook lingering.
  bool pmu_armed_once_ = false;
  bool tcg_first_boundary_ = false;
  bool tcg_bulk_ = false;
  bool switch_engines_ = false;        // --engine=auto on KVM: traced stretches run in TCG
  uint64_t engine_switches_ = 0;
  vcpu::CpuState tcg_code_state_;      // TcgCpu::GetCodeState's, reused at every block              // block-level observation (Tracer::BulkAllowed) since the last boundary
  absl::Status tcg_error_;             // a failure inside a TCG callback, reported after the run
  uint64_t apic_base_ = 0xFEE00900;    // IA32_APIC_BASE while in TCG (BSP, enabled)
  uint64_t msr_exits_ = 0;
  std::unique_ptr<Debugger> debugger_;  // --gdb
  bool gdb_trace_ = false;              // GDB's branch trace is on
  bool halted_wait_ = false;            // the TCG vCPU waits in HLT for an interrupt
  std::FILE* branches_file_ = nullptr;
  std::FILE* insns_file_ = nullptr;
  PioBus pio_;
  std::unique_ptr<Uart16550> uart_;
  std::unique_ptr<DebugExit> debug_exit_;
  std::unique_ptr<ResetLine> reset_line_;
  std::unique_ptr<PciHost> pci_host_;
  std::unique_ptr<IntelIommu> iommu_;  // --device=intel-iommu
  std::unique_ptr<PciEdu> edu_;        // --device=edu
  uint64_t dma_faults_ = 0;            // DMA refused (no RAM, IOMMU fault)
  std::unique_ptr<CmosRtc> cmos_rtc_;
  std::unique_ptr<AcpiPm> acpi_pm_;
  std::unique_ptr<Hpet> hpet_;
  std::optional<uint64_t> kvm_kick_at_;  // the device interrupt ServiceTimersOnKvm last armed a kick for (host ns)
  bool acpi_tables_ = false;  // WriteAcpiTables wrote them (the image left the page free)
  std::unique_ptr<FwCfg> fw_cfg_;
  std::unique_ptr<TestdevIo> testdev_io_;
  std::unique_ptr<TestdevIrq> testdev_irq_;
  uint64_t irq_errors_ = 0;
  uint64_t mmio_unclaimed_reads_ = 0, mmio_unclaimed_writes_ = 0;
  // QEMU pc-testdev's iomem window (docs/guest-abi.md, "Devices").
  static constexpr uint64_t kTestdevIomem = 0xFF000000;
  std::vector<uint8_t> testdev_iomem_ = std::vector<uint8_t>(0x10000, 0);
  uint64_t exits_ = 0;
  std::vector<CodeRange> code_;
  uint32_t entry_ = 0;
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_MACHINE_H_
