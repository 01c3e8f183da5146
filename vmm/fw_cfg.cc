// fw_cfg.cc: QEMU's fw_cfg I/O interface (selector and data byte port).
#include "vmm/fw_cfg.h"

#include <algorithm>

namespace vbts::vmm {
namespace {

std::vector<uint8_t> Le(uint64_t v, int bytes) {
  std::vector<uint8_t> b(bytes);
  for (int i = 0; i < bytes; i++) b[i] = static_cast<uint8_t>(v >> (8 * i));
  return b;
}

}  // namespace

FwCfg::FwCfg(uint64_t ram_bytes, uint16_t cpus) {
  entries_[kSignature] = {'Q', 'E', 'M', 'U'};
  entries_[kId] = Le(1, 4);
  entries_[kUuid] = std::vector<uint8_t>(16, 0);
  entries_[kRamSize] = Le(ram_bytes, 8);
  entries_[kNoGraphic] = Le(1, 2);
  entries_[kNbCpus] = Le(cpus, 2);
  entries_[kBootMenu] = Le(0, 2);
  entries_[kMaxCpus] = Le(cpus, 2);
  entries_[kFileDir] = {0, 0, 0, 0};  // big-endian count
}

const std::vector<uint8_t>& FwCfg::Entry(uint16_t key) const {
  static const std::vector<uint8_t> kNone;
  auto it = entries_.find(key);
  return it == entries_.end() ? kNone : it->second;
}

void FwCfg::Read(uint16_t offset, absl::Span<uint8_t> data) {
  std::fill(data.begin(), data.end(), 0);
  if (data.size() != 1) return;
  const std::vector<uint8_t>& e = Entry(key_);
  if (offset_ < e.size()) data[0] = e[offset_];
  // QEMU stops advancing at the end of the entry; reads there stay 0.
  if (offset_ < e.size()) offset_++;
}

void FwCfg::Write(uint16_t offset, absl::Span<const uint8_t> data) {
  if (data.size() != 2) return;  // 8-bit data writes: ignored, as QEMU does
  key_ = static_cast<uint16_t>(data[0] | data[1] << 8);
  offset_ = 0;
}

}  // namespace vbts::vmm
