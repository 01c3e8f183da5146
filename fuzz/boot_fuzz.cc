// boot_fuzz.cc: libFuzzer target for what a guest and a command line feed the
// boot devices: --initrd text (ParseInitrd), the module layouts of both boot
// protocols (WriteMultibootModules, WritePvhStartInfo) and a guest's port
// accesses to fw_cfg, the RTC/CMOS, the ACPI PM block, the 8042 reset line
// and PCI configuration mechanism #1. The first input byte splits the rest
// into an --initrd string and a port-access stream.
#include <cstddef>
#include <cstdint>
#include <string>

#include "pmu/testing/fake_memory.h"
#include "vmm/acpi_pm.h"
#include "vmm/acpi_tables.h"
#include "vmm/cmos_rtc.h"
#include "vmm/fw_cfg.h"
#include "vmm/multiboot_info.h"
#include "vmm/pci_host.h"
#include "vmm/pio_bus.h"
#include "vmm/pvh_boot.h"
#include "vmm/reset_line.h"

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
    absl::StatusOr<vbts::vmm::PvhBootInfo> pvh =
        vbts::vmm::WritePvhStartInfo(ram, text, 0x9000, 0x100000, mods, vbts::vmm::kAcpiTablesGpa);
    if (pvh.ok())
      for (const vbts::vmm::GpaRange& r : pvh->reserved)
        if (r.end > ram.size()) __builtin_trap();
  }
  if (!vbts::vmm::WriteAcpiTables(ram, {.dmar = (split & 1) != 0, .pci_root = (split & 2) != 0}).ok()) __builtin_trap();
  // The rest: 4-byte port accesses (device and port, size, direction, value),
  // on clocks that the input moves.
  int64_t now_ns = 1795671801LL * 1000000000;
  vbts::vmm::FwCfg cfg(ram.size(), 1);
  vbts::vmm::CmosRtc rtc([&now_ns] { return now_ns; });
  vbts::vmm::AcpiPm pm([&now_ns] { return static_cast<uint64_t>(now_ns); });
  vbts::vmm::ResetLine reset;
  vbts::vmm::PciHost pci;
  vbts::vmm::PioBus bus;
  if (!bus.Register(vbts::vmm::FwCfg::kPort, vbts::vmm::FwCfg::kSize, &cfg, "fw_cfg").ok() ||
      !bus.Register(vbts::vmm::CmosRtc::kPort, vbts::vmm::CmosRtc::kSize, &rtc, "rtc").ok() ||
      !bus.Register(vbts::vmm::kAcpiPmBase, vbts::vmm::AcpiPm::kSize, &pm, "acpi pm").ok() ||
      !bus.Register(vbts::vmm::ResetLine::kPort, vbts::vmm::ResetLine::kSize, &reset, "reset").ok() ||
      !bus.Register(vbts::vmm::PciHost::kPort, vbts::vmm::PciHost::kSize, &pci, "pci").ok())
    __builtin_trap();
  // An access is 4 bytes d0..d3: d0 bits 6:4 pick the device, 3:0 the port
  // from its base; d1 % 3 the size; d2 bit 0 the direction; the value's
  // low bytes are d3, d2.  A 4-byte value also takes d2 >> 1 as bits 15:8,
  // d1 / 3 as bits 23:16 and d0 as bits 31:24 (bit 31: PCI's enable bit),
  // so that CONFIG_ADDRESS can name 00:00.0 (bus 0, device 0, function 0).
  static constexpr uint16_t kBases[8] = {0x50E, 0x70, vbts::vmm::kAcpiPmBase, 0x60, 0xCF8, 0xCFC, 0x50E, 0x70};
  for (size_t i = 1 + split; i + 4 <= size; i += 4) {
    const uint16_t port = kBases[(data[i] >> 4) & 7] + (data[i] & 15);
    now_ns += int64_t{data[i + 3]} * 7919 * 1000;  // up to ~2 s a step
    const uint8_t sizes[3] = {1, 2, 4};
    const uint8_t n = sizes[data[i + 1] % 3];
    uint8_t buf[4] = {data[i + 3], data[i + 2], 0, 0};
    if (n == 4) {
      buf[1] = data[i + 2] >> 1;
      buf[2] = data[i + 1] / 3;
      buf[3] = data[i];
    }
    if (!bus.Dispatch(port, n, data[i + 2] & 1, absl::MakeSpan(buf, n)).ok()) __builtin_trap();
  }
  // Whatever was written, the host bridge keeps its identity (every
  // register but CONFIG_ADDRESS ignores writes): 8086H, 1237H at 00:00.0.
  uint8_t addr[4] = {0x00, 0x00, 0x00, 0x80};
  uint8_t id[4] = {};
  if (!bus.Dispatch(vbts::vmm::PciHost::kPort, 4, true, absl::MakeSpan(addr, 4)).ok() ||
      !bus.Dispatch(vbts::vmm::PciHost::kPort + 4, 4, false, absl::MakeSpan(id, 4)).ok() ||
      (id[0] | id[1] << 8 | id[2] << 16 | uint32_t{id[3]} << 24) != 0x12378086u)
    __builtin_trap();
  // What an S3 request would wait for: at most a day ahead.
  if (std::optional<int64_t> wake = rtc.NsToAlarm(); wake && (*wake < 0 || *wake > int64_t{86400} * 1000000000))
    __builtin_trap();
  return 0;
}
