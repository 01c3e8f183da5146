// types.h: distinct address types, so a guest-physical address is never
// passed where a linear (guest-virtual) one is expected.
#ifndef VBTS_PMU_TYPES_H_
#define VBTS_PMU_TYPES_H_

#include <compare>
#include <cstdint>

namespace vbts {

// Guest-physical address.
struct Gpa {
  uint64_t value = 0;
  constexpr Gpa() = default;
  constexpr explicit Gpa(uint64_t v) : value(v) {}
  constexpr Gpa operator+(uint64_t off) const { return Gpa(value + off); }
  constexpr auto operator<=>(const Gpa&) const = default;
};

// Guest linear address (after segmentation, before paging).
struct Gva {
  uint64_t value = 0;
  constexpr Gva() = default;
  constexpr explicit Gva(uint64_t v) : value(v) {}
  constexpr Gva operator+(uint64_t off) const { return Gva(value + off); }
  constexpr auto operator<=>(const Gva&) const = default;
};

}  // namespace vbts

#endif  // VBTS_PMU_TYPES_H_
