// kvm_vcpu.h: one KVM vCPU: its fd, the shared kvm_run page, and typed access to
// registers, events, MSRs, LAPIC, guest debug and MP state. The only place in
// vcpu/ that issues vCPU ioctls; converts between KVM structs and CpuState.
#ifndef VBTS_VCPU_KVM_VCPU_H_
#define VBTS_VCPU_KVM_VCPU_H_

#include "vcpu/kvm_uapi.h"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "vcpu/cpu_state.h"
#include "vcpu/kvm_fd.h"
#include "vcpu/vcpu_control.h"

namespace vbts::vcpu {

class KvmVcpu : public VcpuControl {
 public:
  // Creates vCPU `id` on `vm_fd`; `run_size` is KVM_GET_VCPU_MMAP_SIZE.
  // `sync_regs` makes KVM publish regs/sregs/events in kvm_run at every exit
  // (KVM_CAP_SYNC_REGS), which saves two ioctls per single-step.
  static absl::StatusOr<std::unique_ptr<KvmVcpu>> Create(int vm_fd, int id, size_t run_size, bool sync_regs);
  ~KvmVcpu();
  KvmVcpu(const KvmVcpu&) = delete;
  KvmVcpu& operator=(const KvmVcpu&) = delete;

  int fd() const { return fd_.get(); }
  kvm_run* run() const { return run_; }

  // KVM_RUN. Returns true on a guest exit (run()->exit_reason), false when a
  // signal interrupted it (EINTR; run()->immediate_exit is cleared).
  absl::StatusOr<bool> Run();
  // Finishes what the last exit left pending (the I/O or MMIO data of an
  // IO/MMIO exit, RIP past an OUT) with a KVM_RUN that has immediate_exit set,
  // so the guest state is consistent before the VMM overwrites it. Returns
  // true if a new exit (e.g. a single-step stop) came instead of EINTR.
  absl::StatusOr<bool> CompletePendingExit();

  // Architectural state. GetState reads regs, sregs and events (from the sync
  // area when it is valid), plus the SYSCALL/SYSENTER MSRs when `with_msrs`.
  absl::StatusOr<CpuState> GetState(bool with_msrs = false) override;
  // Fills the SYSCALL/SYSENTER/SWAPGS MSR fields of `st` (KVM_GET_MSRS).
  absl::Status ReadSystemMsrs(CpuState* st);
  // Writes regs, sregs, and the interrupt-shadow/NMI-masked events; MSRs when
  // `with_msrs`. Invalidates nothing the guest did not change.
  absl::Status SetState(const CpuState& st, bool with_msrs = false);

  // The x87/SSE registers (KVM_GET_XSAVE / KVM_SET_XSAVE's legacy region).
  absl::StatusOr<FpuState> GetFpu() override;
  absl::Status SetFpu(const FpuState& f);
  absl::StatusOr<kvm_regs> GetRegs();
  absl::Status SetRegs(const kvm_regs& r);
  absl::StatusOr<kvm_sregs> GetSregs();
  absl::Status SetSregs(const kvm_sregs& s);
  absl::StatusOr<kvm_vcpu_events> GetEvents();
  absl::Status SetEvents(const kvm_vcpu_events& e);
  // Queues exception `vector` (with `error_code` if it has one) for delivery
  // at the next entry, as if the current instruction raised it.
  absl::Status InjectException(uint8_t vector, std::optional<uint32_t> error_code) override;

  absl::Status SetCpuid(absl::Span<const kvm_cpuid_entry2> entries);
  absl::StatusOr<std::vector<kvm_cpuid_entry2>> GetCpuid();
  absl::Status SetMsrs(absl::Span<const MsrValue> msrs) override;
  absl::StatusOr<uint64_t> GetMsr(uint32_t index) override;

  // KVM_SET_GUEST_DEBUG. `control` 0 turns guest debugging off.
  absl::Status SetGuestDebug(uint32_t control, const std::array<uint64_t, 8>& debugreg = {});
  absl::StatusOr<kvm_debugregs> GetDebugRegs() override;
  absl::Status SetDebugRegs(const kvm_debugregs& d) override;

  absl::StatusOr<kvm_lapic_state> GetLapic() override;
  absl::Status SetLapic(const kvm_lapic_state& l) override;
  absl::StatusOr<uint32_t> GetMpState();
  absl::Status SetMpState(uint32_t state);
  // KVM_GET_TSC_KHZ: the guest TSC's frequency in kHz.
  absl::StatusOr<uint64_t> TscKhz();
  // Makes the guest's TSC read `tsc` now.  A KVM_SET_MSRS of IA32_TSC is not
  // exact: KVM takes a host write within a second of the value it expects as
  // a synchronization and keeps its offset (kvm_synchronize_tsc), so after a
  // traced stretch, whose TSC runs on instructions, the guest's TSC would
  // jump.  With the vCPU TSC offset attribute (KVM_VCPU_TSC_OFFSET, Linux
  // 5.16) the offset moves by the difference between `tsc` and the TSC KVM
  // reports; without it, the MSR write.
  absl::Status SetTsc(uint64_t tsc);
  // KVM_NMI: an NMI to this vCPU's LAPIC (taken at the next boundary).
  absl::Status Nmi() override;

 private:
  KvmVcpu(ScopedFd fd, kvm_run* run, size_t run_size, bool sync_regs);
  ScopedFd fd_;
  kvm_run* run_;
  size_t run_size_;
  bool sync_regs_;
};

// kvm_segment <-> Segment.
Segment FromKvm(const kvm_segment& k);
kvm_segment ToKvm(const Segment& s);
void StateFromKvm(const kvm_regs& r, const kvm_sregs& s, CpuState* st);
void StateToKvm(const CpuState& st, kvm_regs* r, kvm_sregs* s);

}  // namespace vbts::vcpu

#endif  // VBTS_VCPU_KVM_VCPU_H_
