// completer.h: performs, on a CpuState and guest memory, the privileged
// control-transfer instructions this host's KVM cannot emulate (INT n/INT3/
// INTO/INT1, IRET, far RET/CALL/JMP, SYSCALL/SYSRET, SYSENTER/SYSEXIT, CPUID),
// following the SDM vol. 2 pseudo-code.  Pure logic: no /dev/kvm.  See
// docs/completion.md.
#ifndef VBTS_VCPU_COMPLETER_H_
#define VBTS_VCPU_COMPLETER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "pmu/phys_memory.h"
#include "vcpu/cpu_state.h"
#include "vcpu/decoder.h"

namespace vbts::vcpu {

// Exception vectors (SDM vol. 3A table 6-1).
inline constexpr uint8_t kVecDb = 1;
inline constexpr uint8_t kVecBp = 3;
inline constexpr uint8_t kVecOf = 4;
inline constexpr uint8_t kVecUd = 6;
inline constexpr uint8_t kVecTs = 10;
inline constexpr uint8_t kVecNp = 11;
inline constexpr uint8_t kVecSs = 12;
inline constexpr uint8_t kVecGp = 13;
inline constexpr uint8_t kVecPf = 14;

struct CpuidResult {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};
// Answers CPUID for (leaf = EAX, subleaf = ECX).
using CpuidFn = std::function<CpuidResult(uint32_t leaf, uint32_t subleaf)>;

enum class TransferKind : uint8_t {
  kNone,  // retired without a control transfer (INTO with OF=0)
  kInt,
  kIret,
  kFarCall,
  kFarJmp,
  kFarRet,
  kSyscall,
  kSysret,
  kSysenter,
  kSysexit,
  kCpuid,
};
const char* TransferKindName(TransferKind k);

// What a retired instruction did to control flow, for branch tracing.
struct ControlTransfer {
  TransferKind kind = TransferKind::kNone;
  uint64_t from = 0;  // linear address of the instruction
  uint64_t to = 0;    // linear address of the next instruction executed
  int old_cpl = 0;
  int new_cpl = 0;
  uint8_t vector = 0;  // kInt only
};

// An exception the instruction raises instead of completing.  The caller
// injects it (KVM delivers exceptions correctly on this host).
struct GuestFault {
  uint8_t vector = 0;
  std::optional<uint32_t> error_code;
  uint64_t cr2 = 0;  // #PF only
  bool operator==(const GuestFault&) const = default;
};

struct Completion {
  enum class Result : uint8_t { kRetired, kFault, kNotMine };
  Result result = Result::kNotMine;
  ControlTransfer transfer;  // kRetired
  GuestFault fault;          // kFault

  bool retired() const { return result == Result::kRetired; }
  bool faulted() const { return result == Result::kFault; }
  std::string ToString() const;
};

// Performs `insn` (decoded at st.pc_linear()) on `st` and `mem`.
//  - kRetired: `st` and guest memory hold the state after the instruction.
//  - kFault: neither `st` nor guest memory was modified (paging A/D flags of
//    walks that succeeded before the fault may have been set, as hardware
//    may); the fault is to be delivered at the instruction.
//  - kNotMine: `insn` is not one the completer performs; nothing changed.
// A non-OK status means vbts cannot model what the guest asked for
// (Unimplemented: task gates/switches, call gates, virtual-8086 mode, 16-bit
// gates and TSSs; the message names the instruction and RIP) or that guest
// memory could not be accessed on the host side (OutOfRange).  `st` and
// memory are unchanged then too.
absl::StatusOr<Completion> Complete(CpuState& st, PhysMemory& mem, const DecodedInsn& insn, const CpuidFn& cpuid);

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_COMPLETER_H_
