// pio_bus.cc: port I/O routing, boundary splitting and unclaimed-port accounting.
#include "vmm/pio_bus.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace vbts::vmm {

absl::Status PioBus::Register(uint16_t base, uint16_t len, PioDevice* device,
                              std::string_view name) {
  if (device == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pio: device \"%s\" registered at port 0x%04x is null", name, base));
  }
  if (len == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pio: device \"%s\" at port 0x%04x has length 0, must be >= 1", name, base));
  }
  const uint32_t end = uint32_t{base} + len;
  if (end > 0x10000) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pio: device \"%s\" ports [0x%04x, 0x%x) pass the last port 0xffff", name, base, end));
  }
  for (const auto& [unused, e] : devices_) {
    if (base < e.end && e.base < end) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pio: device \"%s\" ports [0x%04x, 0x%04x) overlap device \"%s\" ports [0x%04x, 0x%04x)",
          name, base, end, e.name, e.base, e.end));
    }
  }
  devices_.emplace(base, Entry{base, end, device, std::string(name)});
  return absl::OkStatus();
}

const PioBus::Entry* PioBus::Find(uint32_t port) const {
  auto it = devices_.upper_bound(port);
  if (it == devices_.begin()) return nullptr;
  --it;
  return port < it->second.end ? &it->second : nullptr;
}

std::optional<std::string> PioBus::DeviceAt(uint16_t port) const {
  const Entry* e = Find(port);
  if (e == nullptr) return std::nullopt;
  return e->name;
}

void PioBus::CountUnclaimed(uint16_t port, bool is_write, std::optional<uint64_t> rip) {
  auto it = unclaimed_.find(port);
  if (it == unclaimed_.end()) {
    if (unclaimed_.size() >= kMaxTrackedUnclaimedPorts) {
      ++untracked_;
      return;
    }
    it = unclaimed_.emplace(port, UnclaimedPort{port, 0, 0, rip}).first;
  }
  if (is_write) {
    ++it->second.writes;
  } else {
    ++it->second.reads;
  }
}

absl::Status PioBus::Dispatch(uint16_t port, uint8_t size, bool is_write,
                              absl::Span<uint8_t> data, std::optional<uint64_t> rip) {
  if (size != 1 && size != 2 && size != 4) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pio: access at port 0x%04x has size %u, must be 1, 2 or 4", port, size));
  }
  if (data.size() != size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pio: access at port 0x%04x has size %u but a %u-byte buffer", port, size, data.size()));
  }
  const uint32_t first = port;
  const uint32_t last = first + size - 1;
  const Entry* e = Find(first);
  if (e != nullptr && last < e->end) {
    const auto offset = static_cast<uint16_t>(first - e->base);
    if (is_write) {
      e->device->Write(offset, data);
    } else {
      e->device->Read(offset, data);
    }
    return absl::OkStatus();
  }
  bool any_claimed = false;
  for (uint32_t p = first; p <= last; ++p) {
    if (Find(p) != nullptr) any_claimed = true;
  }
  for (uint32_t i = 0; i < size; ++i) {
    const uint32_t p = first + i;
    const Entry* owner = Find(p);
    if (owner != nullptr) {
      const auto offset = static_cast<uint16_t>(p - owner->base);
      if (is_write) {
        owner->device->Write(offset, data.subspan(i, 1));
      } else {
        owner->device->Read(offset, data.subspan(i, 1));
      }
      continue;
    }
    if (!is_write) data[i] = 0xFF;
    if (any_claimed && p <= 0xFFFF) CountUnclaimed(static_cast<uint16_t>(p), is_write, rip);
  }
  if (!any_claimed) CountUnclaimed(port, is_write, rip);
  else if (last > 0xFFFF) CountUnclaimed(port, is_write, rip);
  return absl::OkStatus();
}

std::vector<UnclaimedPort> PioBus::unclaimed_ports() const {
  std::vector<UnclaimedPort> out;
  out.reserve(unclaimed_.size());
  for (const auto& [unused, u] : unclaimed_) out.push_back(u);
  std::sort(out.begin(), out.end(),
            [](const UnclaimedPort& a, const UnclaimedPort& b) { return a.port < b.port; });
  return out;
}

}  // namespace vbts::vmm
