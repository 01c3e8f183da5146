// target.h: what the GDB stub (gdb/stub.h) asks of the machine it debugs.
// The machine (vmm/) implements it over whichever engine holds the vCPU;
// tests implement it with a fake.  Every call is made while the guest is
// stopped, on the thread that runs the guest.
#ifndef VBTS_GDB_TARGET_H_
#define VBTS_GDB_TARGET_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "vcpu/cpu_state.h"

namespace vbts::gdb {

// The architectural registers GDB sees (gdb/registers.h lays them out).
struct Registers {
  vcpu::CpuState st;
  vcpu::FpuState fpu;
};

// Z/z packet types (GDB remote protocol, "insert breakpoint or watchpoint").
enum class PointType : int {
  kSoftware = 0,  // Z0: vbts does not patch guest memory, so the guest never sees it
  kHardware = 1,  // Z1
  kWrite = 2,     // Z2: write watchpoint
  kRead = 3,      // Z3: read watchpoint
  kAccess = 4,    // Z4: access watchpoint
};

// How the guest goes on after the stub resumes it.
struct Resume {
  enum Kind {
    kContinue,  // c, vCont;c
    kStep,      // s, vCont;s: one instruction (external interrupts stay pending, as QEMU's default)
    kRange,     // vCont;rSTART,END: step while RIP's linear address is in [start, end)
  } kind = kContinue;
  uint64_t start = 0, end = 0;  // kRange
};

// Why the guest stopped (reported to GDB as a stop reply).
struct Stop {
  enum Kind {
    kStep,         // a step (or range step) completed: T05
    kBreakpoint,   // before an instruction with a Z0/Z1 point: T05 swbreak:/hwbreak:
    kWatchpoint,   // after an access to a Z2-Z4 range: T05 watch:/rwatch:/awatch:ADDR
    kInterrupted,  // Ctrl-C, or stopped at start (--gdb-wait): T02 (SIGINT) / T05 at start
    kExited,       // the guest exited: W<status>
    kTerminated,   // vbts ended the run otherwise (triple fault, timeout...): X<signal>
  } kind = kStep;
  PointType point = PointType::kSoftware;  // kBreakpoint, kWatchpoint
  uint64_t address = 0;                    // kWatchpoint: the watched address that was accessed
  int status = 0;                          // kExited: the guest's exit status; kTerminated: a signal number
};

class Target {
 public:
  virtual ~Target() = default;

  virtual Registers ReadRegisters() = 0;
  // Writes every register; segment selectors that changed reload their
  // hidden parts from the descriptor tables (an error if they cannot).
  virtual absl::Status WriteRegisters(const Registers& regs) = 0;

  // Guest linear (GDB: virtual) memory through the guest's current paging,
  // physical when paging is off; never outside guest RAM.  Return how many
  // bytes from the start were transferred (stopping at the first page that
  // is not mapped or not RAM): 0 is an error for the stub.
  virtual size_t ReadMemory(uint64_t addr, absl::Span<uint8_t> out) = 0;
  virtual size_t WriteMemory(uint64_t addr, absl::Span<const uint8_t> data) = 0;

  // Z/z: unsupported types or lengths answer an error status (the stub
  // replies E..) or Unimplemented (the stub replies with an empty packet).
  virtual absl::Status InsertPoint(PointType type, uint64_t addr, uint64_t len) = 0;
  virtual absl::Status RemovePoint(PointType type, uint64_t addr, uint64_t len) = 0;

  // GDB's branch trace on or off: while on, the machine feeds every control
  // transfer of the guest to the stub's BranchTrace (gdb/btrace.h).  It is
  // independent of the guest's own BTS/LBR.
  virtual absl::Status SetBranchTrace(bool on) = 0;

  // qRcmd (`monitor CMD`): the text to print, or an error.
  virtual absl::StatusOr<std::string> Monitor(absl::string_view command) = 0;
};

}  // namespace vbts::gdb

#endif  // VBTS_GDB_TARGET_H_
