// fake_memory.h: a std::vector-backed PhysMemory for unit tests.
#ifndef VBTS_PMU_TESTING_FAKE_MEMORY_H_
#define VBTS_PMU_TESTING_FAKE_MEMORY_H_

#include <optional>
#include <string>
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
  // `n` (1..8) bytes at `gpa`, little-endian; std::out_of_range past the end.
  uint64_t Le(uint64_t gpa, int n) const {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | bytes_.at(gpa + i);
    return v;
  }
  // The NUL-terminated string at `gpa`; std::out_of_range without a NUL.
  std::string CString(uint64_t gpa) const {
    std::string s;
    for (uint64_t a = gpa; bytes_.at(a) != 0; ++a) s.push_back(static_cast<char>(bytes_[a]));
    return s;
  }

  // PhysMemory::Direct: nullptr (the default, every access through Read and
  // Write) unless enabled; then the bytes in RAM, except writes to
  // `refused_write_page` (as a page with translated code refuses them).
  void EnableDirect(std::optional<uint64_t> refused_write_page = std::nullopt) {
    direct_ = true;
    refused_write_page_ = refused_write_page;
  }
  uint8_t* Direct(Gpa gpa, uint64_t len, bool write) const override {
    if (!direct_ || !RangeWithin(gpa.value, len, bytes_.size())) return nullptr;
    if (write && refused_write_page_ && (gpa.value >> 12 == *refused_write_page_ ||
                                         (gpa.value + len - 1) >> 12 == *refused_write_page_))
      return nullptr;
    return const_cast<uint8_t*>(bytes_.data()) + gpa.value;
  }

 private:
  std::vector<uint8_t> bytes_;
  bool direct_ = false;
  std::optional<uint64_t> refused_write_page_;
};

}  // namespace vbts::testing

#endif  // VBTS_PMU_TESTING_FAKE_MEMORY_H_
