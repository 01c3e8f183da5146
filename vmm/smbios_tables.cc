// smbios_tables.cc: vbts's SMBIOS tables (vmm/smbios_tables.h).
#include "vmm/smbios_tables.h"

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace vbts::vmm {
namespace {

// One structure: its formatted area (type, length, handle first), then its
// strings, each NUL-terminated, the set ended by one more NUL (two NULs when
// it has none; DMTF SMBIOS 6.1.3).
class Structure {
 public:
  Structure(uint8_t type, uint8_t length, uint16_t handle) : bytes_(length, 0) {
    bytes_[0] = type;
    bytes_[1] = length;
    Put(2, handle, 2);
  }
  void Put(size_t at, uint64_t v, int n) {
    for (int i = 0; i < n; i++) bytes_[at + i] = static_cast<uint8_t>(v >> (8 * i));
  }
  // Adds `s` to the strings and puts its number (1-based) at `at`; an empty
  // string is "none" (0).
  void String(size_t at, const std::string& s) {
    if (s.empty()) return;
    strings_.push_back(s);
    bytes_[at] = static_cast<uint8_t>(strings_.size());
  }
  void AppendTo(std::vector<uint8_t>& out, size_t& largest) const {
    const size_t start = out.size();
    out.insert(out.end(), bytes_.begin(), bytes_.end());
    for (const std::string& s : strings_) {
      out.insert(out.end(), s.begin(), s.end());
      out.push_back(0);
    }
    if (strings_.empty()) out.push_back(0);
    out.push_back(0);
    largest = std::max(largest, out.size() - start);
  }

 private:
  std::vector<uint8_t> bytes_;
  std::vector<std::string> strings_;
};

uint8_t Checksum(const uint8_t* p, size_t n) {
  uint8_t sum = 0;
  for (size_t i = 0; i < n; i++) sum = static_cast<uint8_t>(sum + p[i]);
  return static_cast<uint8_t>(-sum);
}

}  // namespace

absl::Status WriteSmbiosTables(PhysMemory& ram, const SmbiosInfo& info) {
  if (kSmbiosGpa + kSmbiosSize > ram.size()) return absl::OkStatus();  // no RAM there: no tables
  constexpr uint64_t kTable = kSmbiosGpa + 0x20;
  std::vector<uint8_t> table;
  size_t largest = 0;

  // Type 0, BIOS information (7.1), 24 bytes (2.4 and later).
  Structure bios(0, 0x18, 0);
  bios.String(0x04, "vbts");
  bios.String(0x05, info.vbts_version);
  bios.Put(0x06, 0xE800, 2);  // starting address segment
  bios.String(0x08, "11/28/2026");
  bios.Put(0x09, 0, 1);          // ROM size: 64 KB * (n + 1)
  bios.Put(0x0A, 1u << 3, 8);    // characteristics: "not supported"
  bios.Put(0x13, 1u << 4, 1);    // extension byte 2: the table describes a virtual machine
  uint32_t major = 0, minor = 0;
  const std::vector<std::string> parts = absl::StrSplit(info.vbts_version, '.');
  if (parts.size() >= 2 && absl::SimpleAtoi(parts[0], &major) && absl::SimpleAtoi(parts[1], &minor)) {
    bios.Put(0x14, std::min<uint32_t>(major, 0xFE), 1);
    bios.Put(0x15, std::min<uint32_t>(minor, 0xFE), 1);
  } else {
    bios.Put(0x14, 0xFF, 1);  // not known
    bios.Put(0x15, 0xFF, 1);
  }
  bios.Put(0x16, 0xFF, 1);  // no embedded controller
  bios.Put(0x17, 0xFF, 1);
  bios.AppendTo(table, largest);

  // Type 1, system information (7.2), 27 bytes.
  Structure system(1, 0x1B, 1);
  system.String(0x04, "vbts");
  system.String(0x05, "vbts virtual PC");
  system.String(0x06, info.vbts_version);
  system.Put(0x18, 6, 1);  // wake-up type: power switch
  system.String(0x19, info.cpu_model);
  system.String(0x1A, "vbts");
  system.AppendTo(table, largest);

  // Type 4, processor information (7.5), 42 bytes (2.5 and later).
  Structure cpu(4, 0x2A, 2);
  cpu.String(0x04, "CPU 0");
  cpu.Put(0x05, 3, 1);  // central processor
  cpu.Put(0x06, 1, 1);  // family: other
  cpu.String(0x07, "GenuineIntel");
  cpu.Put(0x08, info.cpuid1_eax, 4);
  cpu.Put(0x0C, info.cpuid1_edx, 4);
  cpu.String(0x10, info.cpu_brand);
  cpu.Put(0x18, 0x41, 1);  // socket populated, CPU enabled
  cpu.Put(0x19, 1, 1);     // upgrade: other
  cpu.Put(0x1A, 0xFFFF, 2);  // no cache structures
  cpu.Put(0x1C, 0xFFFF, 2);
  cpu.Put(0x1E, 0xFFFF, 2);
  cpu.Put(0x23, 1, 1);  // cores
  cpu.Put(0x24, 1, 1);  // cores enabled
  cpu.Put(0x25, 1, 1);  // threads
  cpu.Put(0x26, info.long_mode ? (1u << 2) : 0, 2);
  cpu.Put(0x28, 1, 2);  // family 2: other
  cpu.AppendTo(table, largest);

  // Type 127, end of table (7.45).
  Structure end(127, 4, 3);
  end.AppendTo(table, largest);
  if (0x20 + table.size() > kSmbiosSize) return absl::InternalError("SMBIOS table larger than its page");

  // The 32-bit entry point (5.2.1), 31 bytes.
  uint8_t ep[0x1F] = {'_', 'S', 'M', '_'};
  ep[0x05] = sizeof ep;
  ep[0x06] = 2;  // version 2.8
  ep[0x07] = 8;
  ep[0x08] = static_cast<uint8_t>(largest);
  ep[0x09] = static_cast<uint8_t>(largest >> 8);
  ep[0x10] = '_', ep[0x11] = 'D', ep[0x12] = 'M', ep[0x13] = 'I', ep[0x14] = '_';
  ep[0x16] = static_cast<uint8_t>(table.size());
  ep[0x17] = static_cast<uint8_t>(table.size() >> 8);
  for (int i = 0; i < 4; i++) ep[0x18 + i] = static_cast<uint8_t>(kTable >> (8 * i));
  ep[0x1C] = 4;  // structures
  ep[0x1E] = 0x28;  // BCD revision 2.8
  ep[0x15] = Checksum(ep + 0x10, 0x0F);  // the intermediate anchor's 15 bytes
  ep[0x04] = Checksum(ep, sizeof ep);
  VBTS_RETURN_IF_ERROR(ram.Write(Gpa(kSmbiosGpa), absl::MakeConstSpan(ep, sizeof ep)));
  return ram.Write(Gpa(kTable), absl::MakeConstSpan(table));
}

}  // namespace vbts::vmm
