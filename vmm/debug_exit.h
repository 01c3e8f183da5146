// debug_exit.h: QEMU's isa-debug-exit device (vbts places it at port 0xF4, 4 ports), which lets a guest end the run with a status.
#ifndef VBTS_VMM_DEBUG_EXIT_H_
#define VBTS_VMM_DEBUG_EXIT_H_

#include <cstdint>
#include <optional>

#include "vmm/pio_bus.h"

namespace vbts::vmm {

// Behaviour matches QEMU hw/misc/debugexit.c as configured by
// `-device isa-debug-exit,iobase=0xf4,iosize=0x04`:
//  - A write of any size (1, 2 or 4) at any offset inside the device ends the
//    guest; QEMU passes the written value v (zero-extended to 64 bits, the
//    offset ignored) to exit((v << 1) | 1). The host process status is that
//    int truncated by the kernel to 8 bits: v=0 -> 1, v=1 -> 3, v=0x7F ->
//    0xFF, v=0x80 -> 1 (0x101 & 0xFF).
//  - Reads return 0 (QEMU's debug_exit_read returns 0).
// Here the write only records a pending exit request; the run loop stops the
// guest when exit_requested() is true. The first write wins: later writes
// (which QEMU could never see, having exited) are ignored.
class DebugExit : public PioDevice {
 public:
  static constexpr uint16_t kPort = 0xF4;
  static constexpr uint16_t kSize = 4;

  void Read(uint16_t offset, absl::Span<uint8_t> data) override;
  void Write(uint16_t offset, absl::Span<const uint8_t> data) override;

  bool exit_requested() const { return value_.has_value(); }
  // The value the guest wrote (little-endian, 1 to 4 bytes).
  std::optional<uint32_t> written_value() const { return value_; }
  // (v << 1) | 1 without truncation, i.e. the int QEMU passes to exit().
  std::optional<uint64_t> full_exit_code() const;
  // The process exit status the host sees: full_exit_code() & 0xFF.
  std::optional<int> exit_status() const;

 private:
  std::optional<uint32_t> value_;
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_DEBUG_EXIT_H_
