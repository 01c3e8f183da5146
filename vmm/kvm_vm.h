// kvm_vm.h: /dev/kvm and one VM: capabilities, memory slots, the in-kernel
// irqchip, MSR filters, MSI injection and vCPU creation.
#ifndef VBTS_VMM_KVM_VM_H_
#define VBTS_VMM_KVM_VM_H_

#include "vcpu/kvm_uapi.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "vcpu/ioapic.h"
#include "vcpu/pic8259.h"
#include "vcpu/pit8254.h"
#include "vcpu/kvm_fd.h"
#include "vcpu/kvm_vcpu.h"

namespace vbts::vmm {

class Kvm {
 public:
  // Opens `path` (normally /dev/kvm) and checks KVM_GET_API_VERSION == 12.
  static absl::StatusOr<Kvm> Open(const std::string& path = "/dev/kvm");
  int fd() const { return fd_.get(); }
  int api_version() const { return api_version_; }
  // KVM_CHECK_EXTENSION; 0 when absent.
  int CheckExtension(long cap) const;
  absl::StatusOr<std::vector<kvm_cpuid_entry2>> SupportedCpuid() const;
  absl::StatusOr<size_t> VcpuMmapSize() const;
  // KVM_GET_MSR_FEATURE_INDEX_LIST: the feature MSRs KVM can report (empty
  // without KVM_CAP_GET_MSR_FEATURES).
  absl::StatusOr<std::vector<uint32_t>> FeatureMsrIndices() const;
  // KVM_GET_MSRS on /dev/kvm: the value of feature MSR `index`.
  absl::StatusOr<uint64_t> GetFeatureMsr(uint32_t index) const;

 private:
  Kvm(ScopedFd fd, int api) : fd_(std::move(fd)), api_version_(api) {}
  ScopedFd fd_;
  int api_version_ = 0;
};

// A deny-range for KVM_X86_SET_MSR_FILTER: accesses to [base, base+count) exit
// to user space (KVM_EXIT_X86_RDMSR/WRMSR with reason FILTER).
struct MsrRange {
  uint32_t base;
  uint32_t count;
};

class Vm {
 public:
  static absl::StatusOr<std::unique_ptr<Vm>> Create(const Kvm& kvm);
  int fd() const { return fd_.get(); }
  const Kvm& kvm() const { return *kvm_; }

  absl::Status SetMemoryRegion(uint32_t slot, uint64_t gpa, uint64_t size, void* host);
  // In-kernel LAPIC + IOAPIC + PIC (KVM_CREATE_IRQCHIP).
  absl::Status CreateIrqchip();
  absl::Status EnableCap(uint32_t cap, uint64_t arg0);
  // Turns on user-space MSR exits for filtered MSRs and installs `deny` ranges
  // (default allow), so KVM stops answering those MSRs itself.
  absl::Status SetMsrFilter(absl::Span<const MsrRange> deny);
  // KVM_IRQ_LINE: drives GSI `gsi` of the in-kernel irqchip (IOAPIC pin n,
  // and the PIC for n < 16, under KVM's default routing).
  absl::Status SetIrqLine(uint32_t gsi, bool level);
  // KVM_GET_IRQCHIP / KVM_SET_IRQCHIP of the in-kernel IOAPIC (moved with
  // the vCPU between the engines).
  absl::StatusOr<vcpu::IoapicState> GetIoapic();
  absl::Status SetIoapic(const vcpu::IoapicState& s);
  // The in-kernel 8254 PIT (KVM_CREATE_PIT2, with KVM's port 61H), and its
  // state (KVM_GET/SET_PIT2; count_load_time in CLOCK_MONOTONIC ns) with
  // the speaker-data flag.
  absl::Status CreatePit();
  absl::StatusOr<std::pair<std::array<vcpu::PitChannelState, 3>, bool>> GetPit();
  // `hpet_legacy`: KVM_PIT_FLAGS_HPET_LEGACY, the HPET's legacy replacement
  // mode, which keeps the PIT's channel 0 from interrupting (KVM stops it
  // when the flag comes on, as QEMU's PIT does).
  absl::Status SetPit(const std::array<vcpu::PitChannelState, 3>& ch, bool speaker, bool hpet_legacy = false);
  // The same for the in-kernel 8259 pair (master, then slave).
  absl::StatusOr<std::pair<vcpu::PicChipState, vcpu::PicChipState>> GetPic();
  absl::Status SetPic(const vcpu::PicChipState& master, const vcpu::PicChipState& slave);
  // KVM_SIGNAL_MSI to the LAPIC with `apic_id`: fixed delivery of `vector`.
  absl::Status SignalMsi(uint32_t apic_id, uint8_t vector);
  absl::StatusOr<std::unique_ptr<vcpu::KvmVcpu>> CreateVcpu(int id, bool sync_regs);

 private:
  Vm(const Kvm* kvm, ScopedFd fd) : kvm_(kvm), fd_(std::move(fd)) {}
  const Kvm* kvm_;
  ScopedFd fd_;
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_KVM_VM_H_
