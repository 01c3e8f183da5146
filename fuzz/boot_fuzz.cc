// boot_fuzz.cc: libFuzzer target for what a guest and a command line feed the
// boot devices: --initrd text (ParseInitrd), the module layout
// (WriteMultibootModules) and a guest's port accesses to fw_cfg. The first
// input byte splits the rest into an --initrd string and a port-access stream.
#include <cstddef>
#include <cstdint>
#include <string>

#include "pmu/testing/fake_memory.h"
#include "vmm/fw_cfg.h"
#include "vmm/multiboot_info.h"
#include "vmm/pio_bus.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t split = std::min<size_t>(data[0], size - 1);
  const std::string text(reinterpret_cast<const char*>(data + 1), split);
  absl::StatusOr<std::vector<vbts::vmm::ModuleSpec>> specs = vbts::vmm::ParseInitrd(text);
  static vbts::testing::FakePhysMemory& ram = *new vbts::testing::FakePhysMemory(2 << 20);
  if (specs.ok()) {
    absl::StatusOr<vbts::vmm::MultibootInfo> mbi = vbts::vmm::WriteMultibootInfo(ram, "k", "");
    if (!mbi.ok()) __builtin_trap();
    std::vector<vbts::vmm::LoadedModule> mods;
    for (const vbts::vmm::ModuleSpec& m : *specs)
      mods.push_back({m.cmdline, std::vector<uint8_t>(m.cmdline.size() * 97 % 5000)});
    absl::StatusOr<vbts::vmm::ModuleLayout> l = vbts::vmm::WriteMultibootModules(ram, mbi->info_gpa, 0x100000, mods);
    if (l.ok())
      for (const vbts::vmm::GpaRange& r : l->reserved)
        if (r.end > ram.size()) __builtin_trap();
  }
  // The rest: 4-byte port accesses (port low byte, size, direction, value).
  vbts::vmm::FwCfg cfg(ram.size(), 1);
  vbts::vmm::PioBus bus;
  if (!bus.Register(vbts::vmm::FwCfg::kPort, vbts::vmm::FwCfg::kSize, &cfg, "fw_cfg").ok()) __builtin_trap();
  for (size_t i = 1 + split; i + 4 <= size; i += 4) {
    const uint16_t port = 0x50E + (data[i] & 7);
    const uint8_t sizes[3] = {1, 2, 4};
    const uint8_t n = sizes[data[i + 1] % 3];
    uint8_t buf[4] = {data[i + 3], data[i + 2], 0, 0};
    if (!bus.Dispatch(port, n, data[i + 2] & 1, absl::MakeSpan(buf, n)).ok()) __builtin_trap();
  }
  return 0;
}
