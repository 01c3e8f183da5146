// bits.h: small arithmetic helpers every layer uses.
#ifndef VBTS_BASE_BITS_H_
#define VBTS_BASE_BITS_H_

#include <cstdint>

namespace vbts {

// The low `bits` bits set (all 64 from 64 up): an operand-, address- or
// stack-width mask, a counter's width.
constexpr uint64_t LowBits(int bits) { return bits >= 64 ? ~0ull : (1ull << bits) - 1; }

inline constexpr uint64_t kNsPerSecond = 1'000'000'000;

}  // namespace vbts

#endif  // VBTS_BASE_BITS_H_
