// fake_target.h: a gdb::Target over plain data for the stub's unit tests
// and fuzz/gdb_packet_fuzz.cc: registers in a struct, one window of RAM
// (reads and writes stop at its end, as the machine's stop at the first
// unmapped page), points in a list, and statuses the test can set.
#ifndef VBTS_GDB_TESTING_FAKE_TARGET_H_
#define VBTS_GDB_TESTING_FAKE_TARGET_H_

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gdb/target.h"

namespace vbts::gdb::testing {

class FakeTarget : public Target {
 public:
  // RAM at [ram_base, ram_base + ram_size).
  explicit FakeTarget(uint64_t ram_base = 0x1000, size_t ram_size = 0x10000)
      : ram_base(ram_base), ram(ram_size, 0) {}

  Registers ReadRegisters() override { return regs; }
  absl::Status WriteRegisters(const Registers& r) override {
    if (!write_status.ok()) return write_status;
    regs = r;
    register_writes++;
    return absl::OkStatus();
  }

  size_t ReadMemory(uint64_t addr, absl::Span<uint8_t> out) override {
    const size_t n = Available(addr, out.size());
    if (n) std::memcpy(out.data(), ram.data() + (addr - ram_base), n);
    return n;
  }
  size_t WriteMemory(uint64_t addr, absl::Span<const uint8_t> data) override {
    const size_t n = Available(addr, data.size());
    if (n) std::memcpy(ram.data() + (addr - ram_base), data.data(), n);
    return n;
  }

  absl::Status InsertPoint(PointType type, uint64_t addr, uint64_t len) override {
    if (!point_status.ok()) return point_status;
    points.emplace_back(type, addr, len);
    return absl::OkStatus();
  }
  absl::Status RemovePoint(PointType type, uint64_t addr, uint64_t len) override {
    if (!point_status.ok()) return point_status;
    auto it = std::find(points.begin(), points.end(), std::make_tuple(type, addr, len));
    if (it == points.end()) return absl::NotFoundError("no such point");
    points.erase(it);
    return absl::OkStatus();
  }

  absl::Status SetBranchTrace(bool on) override {
    if (!btrace_status.ok()) return btrace_status;
    btrace_on = on;
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Monitor(absl::string_view command) override {
    if (command == "fail") return absl::InternalError("monitor failed");
    if (command == "quiet") return std::string();
    return "you said: " + std::string(command) + "\n";
  }

  Registers regs;
  uint64_t ram_base;
  std::vector<uint8_t> ram;
  std::vector<std::tuple<PointType, uint64_t, uint64_t>> points;
  absl::Status write_status, point_status, btrace_status;
  bool btrace_on = false;
  int register_writes = 0;

 private:
  // Bytes transferable from addr on, at most `want`.
  size_t Available(uint64_t addr, size_t want) const {
    if (addr < ram_base || addr - ram_base >= ram.size()) return 0;
    return std::min<uint64_t>(want, ram.size() - (addr - ram_base));
  }
};

}  // namespace vbts::gdb::testing

#endif  // VBTS_GDB_TESTING_FAKE_TARGET_H_
