// guest_memory.cc: anonymous-mmap guest RAM.
#include "vmm/guest_memory.h"

#include <sys/mman.h>

#include <cstring>

#include "absl/strings/str_format.h"

namespace vbts::vmm {

absl::StatusOr<std::unique_ptr<GuestMemory>> GuestMemory::Create(uint64_t size) {
  if (size < kMinRamBytes || size > kMaxRamBytes || size % 4096 != 0)
    return absl::InvalidArgumentError(absl::StrFormat(
        "--mem=%u bytes: guest RAM must be a multiple of 4 KiB between %u MiB and %u MiB", size,
        kMinRamBytes >> 20, kMaxRamBytes >> 20));
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return absl::ErrnoToStatus(errno, absl::StrFormat("mmap(%u bytes of guest RAM) failed", size));
  return std::unique_ptr<GuestMemory>(new GuestMemory(static_cast<uint8_t*>(p), size));
}

GuestMemory::~GuestMemory() { ::munmap(base_, size_); }

absl::Status GuestMemory::Read(Gpa gpa, absl::Span<uint8_t> out) const {
  if (!RangeWithin(gpa.value, out.size(), size_))
    return absl::OutOfRangeError(absl::StrFormat("read of %u bytes at GPA 0x%x is outside guest RAM (0x%x bytes)",
                                                 out.size(), gpa.value, size_));
  std::memcpy(out.data(), base_ + gpa.value, out.size());
  return absl::OkStatus();
}

absl::Status GuestMemory::Write(Gpa gpa, absl::Span<const uint8_t> data) {
  if (!RangeWithin(gpa.value, data.size(), size_))
    return absl::OutOfRangeError(absl::StrFormat("write of %u bytes at GPA 0x%x is outside guest RAM (0x%x bytes)",
                                                 data.size(), gpa.value, size_));
  std::memcpy(base_ + gpa.value, data.data(), data.size());
  return absl::OkStatus();
}

}  // namespace vbts::vmm
