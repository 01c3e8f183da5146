// kvm_fd.h: an owning file descriptor and the one ioctl wrapper every KVM call
// in vbts goes through, so each failure names the ioctl, its argument and errno.
#ifndef VBTS_VCPU_KVM_FD_H_
#define VBTS_VCPU_KVM_FD_H_

#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace vbts {

class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { Reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// ioctl(fd, request, arg); on failure an errno Status "KVM_xxx(detail) failed".
// Retries EINTR except for KVM_RUN (whose EINTR the caller must see).
template <typename Arg>
absl::StatusOr<int> Ioctl(int fd, unsigned long request, Arg arg, std::string_view name,
                          std::string_view detail = {}) {
  for (;;) {
    int rc = ::ioctl(fd, request, arg);
    if (rc >= 0) return rc;
    if (errno == EINTR && name != "KVM_RUN") continue;
    int e = errno;
    return absl::ErrnoToStatus(e, absl::StrCat(std::string(name), "(", std::string(detail), ") failed"));
  }
}

}  // namespace vbts

#endif  // VBTS_VCPU_KVM_FD_H_
