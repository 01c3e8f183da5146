// phys_memory.h: the guest-physical memory interface that pure logic (paging
// walks, DS/BTS writer, instruction completion) reads and writes through.
// vmm::GuestMemory implements it over the VM's RAM mapping; tests use
// testing::FakePhysMemory. Accesses never touch anything outside guest RAM.
#ifndef VBTS_PMU_PHYS_MEMORY_H_
#define VBTS_PMU_PHYS_MEMORY_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pmu/types.h"

namespace vbts {

class PhysMemory {
 public:
  virtual ~PhysMemory() = default;
  // Bytes of RAM, from GPA 0.
  virtual uint64_t size() const = 0;
  // Both return OutOfRange (naming GPA and length) unless [gpa, gpa+len) lies
  // entirely in RAM; nothing is read or written then.
  virtual absl::Status Read(Gpa gpa, absl::Span<uint8_t> out) const = 0;
  virtual absl::Status Write(Gpa gpa, absl::Span<const uint8_t> data) = 0;
  // A fast path: the host bytes of [gpa, gpa+len) when an access there needs
  // nothing but a copy (plain RAM and, for a write, nothing else to do, such
  // as dropping translated code), else nullptr, and then Read or Write must
  // be used. nullptr is always a correct answer.
  virtual uint8_t* Direct(Gpa gpa, uint64_t len, bool write) const { return nullptr; }

  // Little-endian scalar helpers.
  template <typename T>
  absl::StatusOr<T> ReadLe(Gpa gpa) const {
    static_assert(std::is_integral_v<T>);
    uint8_t b[sizeof(T)] = {};  // (GCC cannot see the virtual Read fill it)
    absl::Status s = Read(gpa, absl::MakeSpan(b));
    if (!s.ok()) return s;
    T v;
    std::memcpy(&v, b, sizeof(T));
    return v;
  }
  template <typename T>
  absl::Status WriteLe(Gpa gpa, T v) {
    static_assert(std::is_integral_v<T>);
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    return Write(gpa, absl::MakeConstSpan(b));
  }
};

// True if [start, start+len) lies in [0, limit) without overflow.
constexpr bool RangeWithin(uint64_t start, uint64_t len, uint64_t limit) {
  return start <= limit && len <= limit - start;
}

}  // namespace vbts

#endif  // VBTS_PMU_PHYS_MEMORY_H_
