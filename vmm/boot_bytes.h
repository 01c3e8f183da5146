// boot_bytes.h: what the boot-information writers (Multiboot info, PVH start
// info, ACPI tables) share: little-endian stores into a page being built and
// the check that a string bound for the guest is a C string.
#ifndef VBTS_VMM_BOOT_BYTES_H_
#define VBTS_VMM_BOOT_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace vbts::vmm {

// Stores the low `n` bytes of `v`, little-endian, at b[off, off + n).
inline void PutLe(std::vector<uint8_t>& b, size_t off, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

// InvalidArgument "<context>: <what> contains a NUL byte at offset N; the
// command line is a C string" if `s` holds a NUL.
inline absl::Status CheckNoNul(std::string_view context, std::string_view what, std::string_view s) {
  const size_t pos = s.find('\0');
  if (pos == std::string_view::npos) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %s contains a NUL byte at offset %u; the command line is a C string", context, what, pos));
}

}  // namespace vbts::vmm

#endif  // VBTS_VMM_BOOT_BYTES_H_
