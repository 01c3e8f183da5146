// file.cc: reading whole input files (images, modules) with errors that name the file.
#include "base/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace vbts {
namespace {

std::string HumanSize(uint64_t bytes) {
  if (bytes % (uint64_t{1} << 30) == 0) return absl::StrFormat("%u GiB", bytes >> 30);
  if (bytes % (uint64_t{1} << 20) == 0) return absl::StrFormat("%u MiB", bytes >> 20);
  return absl::StrFormat("%u bytes", bytes);
}

}  // namespace

absl::Status ErrnoStatus(int err, const std::string& message) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnknownError(message);
  }
}

absl::StatusOr<std::vector<uint8_t>> ReadWholeFile(const std::string& path, std::string_view what, uint64_t max_bytes,
                                                   bool allow_empty) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return ErrnoStatus(err, absl::StrFormat("%s: cannot open %s: %s", path, what,
                                            std::strerror(err)));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    return ErrnoStatus(err, absl::StrFormat("%s: cannot stat %s: %s", path, what,
                                            std::strerror(err)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: is a directory, not a %s file", path, what));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: is not a regular file (st_mode 0%o)", path, st.st_mode));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size == 0 && !allow_empty) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s is empty (0 bytes)", path, what));
  }
  if (size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s is %u bytes, larger than the %s (%u bytes) limit", path, what, size,
        HumanSize(max_bytes), max_bytes));
  }
  std::vector<uint8_t> data(size);
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = read(fd, data.data() + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      return ErrnoStatus(err, absl::StrFormat("%s: read failed at byte %u: %s", path, done,
                                              std::strerror(err)));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrFormat(
          "%s: file shrank while reading: got %u of %u bytes", path, done, size));
    }
    done += static_cast<uint64_t>(n);
  }
  return data;
}

absl::Status WriteWholeFile(const std::string& path, const std::vector<uint8_t>& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, absl::StrFormat("%s: cannot create: %s", path, std::strerror(errno)));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return ErrnoStatus(err, absl::StrFormat("%s: write failed after %u of %u bytes: %s", path, done, data.size(),
                                              std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return ErrnoStatus(errno, absl::StrFormat("%s: close failed: %s", path, std::strerror(errno)));
  return absl::OkStatus();
}

}  // namespace vbts
