// fake_memory.h: a std::vector-backed PhysMemory for unit tests.
#ifndef VBTS_PMU_TESTING_FAKE_MEMORY_H_
#define VBTS_PMU_TESTING_FAKE_MEMORY_H_

#include <vector>

#include "absl/strings/str_format.h"
#include "pmu/phys_memory.h"

namespace vbts::testing {

class FakePhysMemory : public PhysMemory {
 public:
  explicit FakePhysMemory(uint64_t size) : bytes_(size, 0) {}
  uint64_t size() const override { return bytes_.size(); }
  absl::Status Read(Gpa gpa, absl::Span<uint8_t> out) const override {
    if (!RangeWithin(gpa.value, out.size(), bytes_.size()))
      return absl::OutOfRangeError(absl::StrFormat("read of %u bytes at GPA 0x%x is outside RAM", out.size(), gpa.value));
    std::memcpy(out.data(), bytes_.data() + gpa.value, out.size());
    return absl::OkStatus();
  }
  absl::Status Write(Gpa gpa, absl::Span<const uint8_t> data) override {
    if (!RangeWithin(gpa.value, data.size(), bytes_.size()))
      return absl::OutOfRangeError(absl::StrFormat("write of %u bytes at GPA 0x%x is outside RAM", data.size(), gpa.value));
    std::memcpy(bytes_.data() + gpa.value, data.data(), data.size());
    return absl::OkStatus();
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace vbts::testing

#endif  // VBTS_PMU_TESTING_FAKE_MEMORY_H_
