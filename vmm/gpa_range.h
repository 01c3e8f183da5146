// gpa_range.h: a named half-open guest-physical range, shared by the image loader and the boot-info builders.
#ifndef VBTS_VMM_GPA_RANGE_H_
#define VBTS_VMM_GPA_RANGE_H_

#include <cstdint>
#include <string>

namespace vbts::vmm {

// [start, end) in guest-physical address space. `name` says who owns it
// ("multiboot info", "phdr[1]", ...) and appears in error messages.
struct GpaRange {
  uint64_t start = 0;
  uint64_t end = 0;
  std::string name;

  uint64_t size() const { return end - start; }
  bool Contains(uint64_t gpa) const { return gpa >= start && gpa < end; }
  bool Overlaps(uint64_t other_start, uint64_t other_end) const {
    return start < other_end && other_start < end;
  }
  bool operator==(const GpaRange&) const = default;
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_GPA_RANGE_H_
