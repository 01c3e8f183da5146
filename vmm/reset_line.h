// reset_line.h: the 8042 keyboard controller's CPU-reset output (port 0x64),
// the way a PC guest restarts the machine (Linux's `reboot`, `panic=N`).
#ifndef VBTS_VMM_RESET_LINE_H_
#define VBTS_VMM_RESET_LINE_H_

#include <cstdint>
#include <optional>

#include "vmm/pio_bus.h"

namespace vbts::vmm {

// vbts has no keyboard controller, only its reset line, as QEMU's i8042
// decodes it (hw/input/pckbd.c): a command byte written to port 0x64 of
// 0xF0-0xFF ("pulse output port bits 3:0", a 0 bit pulses) with bit 0 clear
// pulses output bit 0, the CPU reset; 0xFE is the usual one. vbts has no
// firmware to restart into, so the reset ends the run, as QEMU's
// -no-reboot does (status 120, docs/cli.md). Reads return 0xFF and other
// commands are ignored, as on a bus without a controller: Linux's i8042
// driver then reports "No controller found".
class ResetLine : public PioDevice {
 public:
  static constexpr uint16_t kPort = 0x64;
  static constexpr uint16_t kSize = 1;

  void Read(uint16_t offset, absl::Span<uint8_t> data) override;
  void Write(uint16_t offset, absl::Span<const uint8_t> data) override;

  // The command that pulsed the reset (the first one).
  std::optional<uint8_t> reset_command() const { return command_; }

 private:
  std::optional<uint8_t> command_;
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_RESET_LINE_H_
