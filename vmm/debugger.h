// debugger.h: the gdbstub inside the machine (`vbts run --gdb`, docs/gdb.md).
// It owns the TCP server and the protocol stub (gdb/), implements
// gdb::Target over the TCG engine that holds the vCPU, and tells the
// machine's run loop when the guest must stop for the client and how it
// resumes.  Called only between two runs of the engine.
#ifndef VBTS_VMM_DEBUGGER_H_
#define VBTS_VMM_DEBUGGER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gdb/server.h"
#include "gdb/stub.h"
#include "gdb/target.h"
#include "pmu/branch.h"
#include "vcpu/tcg_cpu.h"

namespace vbts::vmm {

class Machine;
struct RunResult;

class Debugger : public gdb::Target {
 public:
  // Listens on `listen` ([HOST:]PORT).  With `wait` the first BetweenRuns
  // blocks until a client has attached (QEMU's -S).
  // `exec_file`: offered to GDB as the executable (gdb::StubOptions).
  static absl::StatusOr<std::unique_ptr<Debugger>> Create(Machine& machine, const std::string& listen, bool wait,
                                                          gdb::Arch arch, std::string exec_file = "");
  // The image's absolute path when GDB can load it as the executable with
  // the registers it is given: an ELF64 file with x86-64, an ELF32 one with
  // i386 (GDB takes an ELF32 file for i386 code, whatever its DWARF says:
  // such a file with x86-64 registers is not offered). Empty otherwise (not
  // ELF, or no absolute path).
  static std::string ExecFileFor(absl::Span<const uint8_t> image, const std::string& path, gdb::Arch arch);

  // --gdb-arch=auto: the registers GDB is given for this image.  An ELF64
  // image, or an ELF32 one (kvm-unit-tests' .flat files are ELF32 containers
  // of 64-bit code) whose DWARF says its code has 8-byte addresses, is
  // x86-64; any other ELF32 image is i386 (GDB refuses an x86-64
  // description for an i386 file); a non-ELF image (a.out kludge) is x86-64
  // when the CPU model has long mode (as qemu-system-x86_64).
  static gdb::Arch ArchForImage(absl::Span<const uint8_t> image, bool model_has_long_mode);

  // Between two runs of the engine: takes a new client (which stops the
  // guest, as QEMU's gdbstub does), watches for Ctrl-C, and while the guest
  // is stopped serves the client until it resumes.  `halted`: the vCPU waits
  // in HLT (a step then waits for the interrupt that wakes it).  Returns how
  // the run ends when the client ends it (`kill`).
  std::optional<RunResult> BetweenRuns(bool halted);
  // While the vCPU runs on KVM (--engine=kvm-tcg, auto on VT-x/SVM hosts):
  // takes a new client and a Ctrl-C without touching the vCPU; both stop the
  // guest once the machine has moved it to the TCG engine (WantsTcg), where
  // BetweenRuns serves the client.
  void PollOnKvm();
  // The client needs the TCG engine: to stop the guest (attach, Ctrl-C,
  // stopped), for a step, breakpoints, watchpoints or its branch trace.  A
  // client that lets the guest continue with none of these leaves it to KVM.
  bool WantsTcg() const;
  // After a run of the engine: whether the client's resume has finished
  // (breakpoint, watchpoint, step); the client hears the stop.
  void AfterRun(const vcpu::TcgStop& stop);
  // The next run is a step: it must run without a time limit (a step cut by
  // one would run one more instruction when resumed).
  bool stepping() const { return resume_ && resume_->kind != gdb::Resume::kContinue; }
  // A client is attached (the loop polls it more often).
  bool connected() const { return server_->connected(); }
  // External interrupts wait while the client steps (QEMU's default).
  bool masks_interrupts() const { return mask_interrupts_; }
  // The run ends: an attached client hears the guest's exit status or that
  // it was terminated.
  void Ended(const RunResult& result);
  // GDB's branch trace is on: every transfer goes to AddTransfer.
  bool tracing() const { return stub_ && stub_->btrace().active(); }
  // `every_instruction`: the tracer reports the not-taken instructions too
  // (--insns); otherwise the last instruction before an event is found by
  // decoding the open block.
  void AddTransfer(const pmu::Branch& b, bool every_instruction);
  // Nanoseconds the guest spent stopped for the client (not counted by --timeout).
  uint64_t stopped_ns() const { return stopped_ns_; }
  const std::string& address() const { return server_->address(); }

  // gdb::Target.
  gdb::Registers ReadRegisters() override;
  absl::Status WriteRegisters(const gdb::Registers& regs) override;
  size_t ReadMemory(uint64_t addr, absl::Span<uint8_t> out) override;
  size_t WriteMemory(uint64_t addr, absl::Span<const uint8_t> data) override;
  absl::Status InsertPoint(gdb::PointType type, uint64_t addr, uint64_t len) override;
  absl::Status RemovePoint(gdb::PointType type, uint64_t addr, uint64_t len) override;
  absl::Status SetBranchTrace(bool on) override;
  absl::StatusOr<std::string> Monitor(absl::string_view command) override;

 private:
  Debugger(Machine& machine, gdb::Arch arch, std::string exec_file)
      : m_(machine), arch_(arch), exec_file_(std::move(exec_file)) {}
  struct Point {
    gdb::PointType type;
    uint64_t addr, len;
    bool operator==(const Point&) const = default;
  };
  // The engine's stops from points_.
  void ApplyPoints();
  // The client disconnected or detached: its points and trace go, the
  // guest runs on.
  void ClientGone(const char* why);
  void Send(const std::string& bytes) { server_->Write(bytes); }
  // The engine's debug step and interrupt masking for a resume.
  void ResumeWith(const gdb::Resume& r, bool halted);
  // Stops the guest for the client with `stop` as the reason.
  void StopFor(const gdb::Stop& stop);
  std::string PmuReport();
  // `monitor info lapic`: the TCG engine's LAPIC model as of the guest clock's now.
  std::string LapicReport();

  Machine& m_;
  gdb::Arch arch_;
  std::string exec_file_;
  std::unique_ptr<gdb::Server> server_;
  std::unique_ptr<gdb::Stub> stub_;
  bool wait_first_ = false;
  bool stopped_ = false;  // the guest is stopped for the client
  std::optional<gdb::Resume> resume_;
  bool mask_interrupts_ = false;
  bool interrupting_ = false;  // a Ctrl-C's stop is under way (one step)
  bool stop_on_arrival_ = false;  // a Ctrl-C came while the guest ran on KVM
  std::vector<Point> points_;
  uint64_t stopped_ns_ = 0;
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_DEBUGGER_H_
