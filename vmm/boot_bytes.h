// boot_bytes.h: what the image loaders and the boot-information writers
// (Multiboot info, PVH start info, Linux's boot_params, ACPI tables) share:
// little-endian reads and stores, a loader's refusal naming the file, and the
// check that a string bound for the guest is a C string.
#ifndef VBTS_VMM_BOOT_BYTES_H_
#define VBTS_VMM_BOOT_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"

namespace vbts::vmm {

// The `n`-byte little-endian value at b[off, off + n) (the caller checks the
// bounds).
inline uint64_t GetLe(absl::Span<const uint8_t> b, uint64_t off, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = (v << 8) | b[off + i];
  return v;
}

// InvalidArgument "<file_name>: <message>": how the image loaders refuse a file.
template <typename... Args>
absl::Status BadImage(std::string_view file_name, const absl::FormatSpec<Args...>& format, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s", file_name, absl::StrFormat(format, args...)));
}

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
