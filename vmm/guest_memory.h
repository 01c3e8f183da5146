// guest_memory.h: the VM's RAM, one anonymous mapping from GPA 0, registered as
// KVM memory slot 0. Implements PhysMemory with overflow-checked bounds.
#ifndef VBTS_VMM_GUEST_MEMORY_H_
#define VBTS_VMM_GUEST_MEMORY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "pmu/phys_memory.h"

namespace vbts::vmm {

// RAM must end below the LAPIC/IOAPIC MMIO window (docs/guest-abi.md).
inline constexpr uint64_t kMaxRamBytes = 3ull << 30;
inline constexpr uint64_t kMinRamBytes = 2ull << 20;

class GuestMemory : public PhysMemory {
 public:
  // `size` must be a multiple of 4 KiB in [kMinRamBytes, kMaxRamBytes].
  static absl::StatusOr<std::unique_ptr<GuestMemory>> Create(uint64_t size);
  ~GuestMemory() override;
  uint64_t size() const override { return size_; }
  absl::Status Read(Gpa gpa, absl::Span<uint8_t> out) const override;
  absl::Status Write(Gpa gpa, absl::Span<const uint8_t> data) override;
  uint8_t* Direct(Gpa gpa, uint64_t len, bool write) const override {
    return RangeWithin(gpa.value, len, size_) ? base_ + gpa.value : nullptr;
  }
  uint8_t* host_base() const { return base_; }

 private:
  GuestMemory(uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  uint8_t* base_;
  uint64_t size_;
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_GUEST_MEMORY_H_
