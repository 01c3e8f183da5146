// tcg_control.h: the vCPU seen through VcpuControl (vcpu/vcpu_control.h)
// while the TCG engine runs it: QEMU's CPU state (vcpu/tcg_cpu.h) and vbts's
// own local APIC (vcpu/lapic.h), which stands in for KVM's in-kernel one.
#ifndef VBTS_VCPU_TCG_CONTROL_H_
#define VBTS_VCPU_TCG_CONTROL_H_

#include <cstdint>
#include <functional>

#include "vcpu/lapic.h"
#include "vcpu/tcg_cpu.h"
#include "vcpu/vcpu_control.h"

namespace vbts::vcpu {

class TcgControl : public VcpuControl {
 public:
  // `now_ns`: the clock the LAPIC timer runs on; `tsc`, if given, the
  // guest's TSC (GetMsr(IA32_TSC), e.g. for adaptive PEBS's TSC field).
  TcgControl(TcgCpu& cpu, Lapic& lapic, std::function<uint64_t()> now_ns, std::function<uint64_t()> tsc = nullptr)
      : cpu_(cpu), lapic_(lapic), now_ns_(std::move(now_ns)), tsc_(std::move(tsc)) {}

  absl::StatusOr<CpuState> GetState(bool with_msrs = false) override { return cpu_.GetState(with_msrs); }
  absl::StatusOr<kvm_debugregs> GetDebugRegs() override;
  absl::Status SetDebugRegs(const kvm_debugregs& d) override;
  absl::Status InjectException(uint8_t vector, std::optional<uint32_t> error_code) override;
  absl::StatusOr<kvm_lapic_state> GetLapic() override;
  absl::Status SetLapic(const kvm_lapic_state& l) override;
  absl::Status Nmi() override;
  // The tracer needs these only for --vpmu=passthrough, which the TCG
  // engine refuses: both are Unimplemented, but for GetMsr(IA32_TSC) with a
  // `tsc` clock.
  absl::Status SetMsrs(absl::Span<const MsrValue> msrs) override;
  absl::StatusOr<uint64_t> GetMsr(uint32_t index) override;
  absl::StatusOr<FpuState> GetFpu() override { return cpu_.GetFpu(); }

  // A fixed interrupt to the LAPIC (the tracer's PMI, a device): it reaches
  // the CPU when the LAPIC lets it (priority) and the CPU accepts it (IF).
  absl::Status SendInterrupt(uint8_t vector);
  // Tells the CPU when the LAPIC has something deliverable.
  void Notify();

 private:
  TcgCpu& cpu_;
  Lapic& lapic_;
  std::function<uint64_t()> now_ns_;
  std::function<uint64_t()> tsc_;
};

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_TCG_CONTROL_H_
