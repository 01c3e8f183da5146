// file.h: reading whole input files (kernel images, Multiboot modules, traces) and writing whole outputs.
#ifndef VBTS_BASE_FILE_H_
#define VBTS_BASE_FILE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vbts {

// Largest kernel image (and Multiboot module) vbts reads.
inline constexpr uint64_t kMaxImageFileSize = uint64_t{1} << 30;

// The status for a failed system call with errno `err`: NotFound for
// ENOENT/ENOTDIR, PermissionDenied for EACCES/EPERM, Unknown otherwise.
absl::Status ErrnoStatus(int err, const std::string& message);

// Reads the whole regular file `path`; `what` names it in messages ("kernel
// image", "initrd module"). NotFound if missing, InvalidArgument if a
// directory, not a regular file, empty (unless `allow_empty`) or larger than
// `max_bytes`, other errno failures as ErrnoStatus; every message starts with
// the path.
absl::StatusOr<std::vector<uint8_t>> ReadWholeFile(const std::string& path, std::string_view what,
                                                   uint64_t max_bytes, bool allow_empty = false);

// Writes `data` to `path` (created with mode 0644, or truncated): every
// failure (open, a short or failed write such as a full disk, close) is
// ErrnoStatus with a message that starts with the path.
absl::Status WriteWholeFile(const std::string& path, const std::vector<uint8_t>& data);

}  // namespace vbts

#endif  // VBTS_BASE_FILE_H_
