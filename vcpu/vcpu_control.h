// vcpu_control.h: what the branch-tracing engine (vcpu/tracer.h) needs of the
// execution engine that holds the vCPU: its state, the guest's debug
// registers, exception and NMI injection, the LAPIC register page and MSRs.
// The KVM vCPU (vcpu/kvm_vcpu.h) implements it with ioctls; the TCG engine's
// adapter (vcpu/tcg_control.h) with vbts's own LAPIC model and QEMU's CPU
// state.  The KVM structs are the data format (they are plain data).
#ifndef VBTS_VCPU_VCPU_CONTROL_H_
#define VBTS_VCPU_VCPU_CONTROL_H_

#include "vcpu/kvm_uapi.h"

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "vcpu/cpu_state.h"

namespace vbts::vcpu {

struct MsrValue {
  uint32_t index;
  uint64_t value;
};

class VcpuControl {
 public:
  virtual ~VcpuControl() = default;
  // Architectural state; the SYSCALL/SYSENTER MSRs too with `with_msrs`.
  virtual absl::StatusOr<CpuState> GetState(bool with_msrs = false) = 0;
  virtual absl::StatusOr<kvm_debugregs> GetDebugRegs() = 0;
  virtual absl::Status SetDebugRegs(const kvm_debugregs& d) = 0;
  // Queues exception `vector` (with `error_code` if it has one) for delivery
  // before the next instruction.
  virtual absl::Status InjectException(uint8_t vector, std::optional<uint32_t> error_code) = 0;
  // The xAPIC register page (KVM_GET_LAPIC layout).
  virtual absl::StatusOr<kvm_lapic_state> GetLapic() = 0;
  virtual absl::Status SetLapic(const kvm_lapic_state& l) = 0;
  // An NMI to this vCPU (taken at the next boundary where NMIs are unmasked).
  virtual absl::Status Nmi() = 0;
  virtual absl::Status SetMsrs(absl::Span<const MsrValue> msrs) = 0;
  virtual absl::StatusOr<uint64_t> GetMsr(uint32_t index) = 0;
  // x87/SSE state (the XMM registers of an adaptive PEBS record).
  virtual absl::StatusOr<FpuState> GetFpu() = 0;
};

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_VCPU_CONTROL_H_
