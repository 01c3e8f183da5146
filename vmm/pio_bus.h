// pio_bus.h: the x86 port I/O bus that routes KVM_EXIT_IO accesses to devices and counts unclaimed ports.
#ifndef VBTS_VMM_PIO_BUS_H_
#define VBTS_VMM_PIO_BUS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"

namespace vbts::vmm {

// A device occupying a range of I/O ports. `offset` is relative to the base
// the device was registered at; data.size() is 1, 2 or 4 for an access that
// lies entirely inside the device, and 1 for the bytes of an access that
// crosses a device boundary (see PioBus::Dispatch). Multi-byte values are
// little-endian, data[0] belonging to port base+offset.
class PioDevice {
 public:
  virtual ~PioDevice() = default;
  virtual void Read(uint16_t offset, absl::Span<uint8_t> data) = 0;
  virtual void Write(uint16_t offset, absl::Span<const uint8_t> data) = 0;
};

// Access statistics for one port nothing is registered at (for `vbts -v`).
struct UnclaimedPort {
  uint16_t port = 0;
  uint64_t reads = 0;
  uint64_t writes = 0;
  std::optional<uint64_t> first_rip;  // RIP of the first access, if known.
  bool operator==(const UnclaimedPort&) const = default;
};

class PioBus {
 public:
  // At most this many distinct unclaimed ports are tracked individually;
  // accesses to further ones only increment untracked_unclaimed_accesses().
  static constexpr size_t kMaxTrackedUnclaimedPorts = 64;

  // Claims ports [base, base+len) for `device` (not owned; must outlive the
  // bus). InvalidArgument if len is 0, the range passes port 0xFFFF, device
  // is null, or the range overlaps an already registered device (the message
  // names both devices and both ranges).
  absl::Status Register(uint16_t base, uint16_t len, PioDevice* device,
                        std::string_view name);

  // Performs one guest IN/OUT of `size` (1, 2 or 4) bytes at `port`; `data`
  // must hold exactly `size` bytes (read: filled in; write: the value).
  //  - Entirely inside one device: one device call with the whole access.
  //  - Otherwise the access is split into bytes, byte i going to port+i
  //    (to whichever device owns that port, as a 1-byte access).
  //  - Unclaimed bytes read as 0xFF; unclaimed writes are dropped. An access
  //    touching no device at all counts once under `port`; in a split access
  //    each unclaimed byte counts under its own port. Bytes beyond port
  //    0xFFFF are unclaimed and counted under `port`.
  // InvalidArgument (nothing dispatched) if size is not 1/2/4 or data.size()
  // differs from size.
  absl::Status Dispatch(uint16_t port, uint8_t size, bool is_write,
                        absl::Span<uint8_t> data,
                        std::optional<uint64_t> rip = std::nullopt);

  // Tracked unclaimed ports, sorted by port number.
  std::vector<UnclaimedPort> unclaimed_ports() const;
  uint64_t untracked_unclaimed_accesses() const { return untracked_; }

  // Name of the device owning `port`, or nullopt.
  std::optional<std::string> DeviceAt(uint16_t port) const;

 private:
  struct Entry {
    uint32_t base;
    uint32_t end;  // exclusive
    PioDevice* device;
    std::string name;
  };
  const Entry* Find(uint32_t port) const;
  void CountUnclaimed(uint16_t port, bool is_write, std::optional<uint64_t> rip);

  std::map<uint32_t, Entry> devices_;  // keyed by base
  absl::flat_hash_map<uint16_t, UnclaimedPort> unclaimed_;
  uint64_t untracked_ = 0;
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_PIO_BUS_H_
