// fw_cfg.h: QEMU's firmware configuration device, I/O-port interface (ports
// 0x510-0x511), with the legacy entries a Multiboot test kernel reads.
#ifndef VBTS_VMM_FW_CFG_H_
#define VBTS_VMM_FW_CFG_H_

#include <cstdint>
#include <map>
#include <vector>

#include "vmm/pio_bus.h"

namespace vbts::vmm {

// Follows QEMU's hw/nvram/fw_cfg.c ("fw_cfg_io", docs/specs/fw_cfg.rst) as
// the x86 pc machine sets it up, without the DMA interface:
//  - The device answers at 0x510, 2 ports. The access size decides what an
//    access does, not the port (QEMU's combined region): a 16-bit OUT selects
//    the entry (key) and rewinds to its first byte; an 8-bit IN at either
//    port reads the next byte of the selected entry; an 8-bit OUT is the
//    legacy data write, which QEMU ignores (since 2.4) and vbts too. QEMU
//    refuses every other size; vbts ignores such writes and reads them as 0.
//  - Reading past the end of an entry, an absent entry, or before any
//    selection reads 0 (QEMU: "an invalid key ... reads return 0").
//    kvm-unit-tests relies on this: its NR_CPUS comes from entry 0x05.
//  - Entries (little-endian unless noted), as `qemu -kernel X -smp 1 -m M
//    -vga none` has them: 0x00 signature "QEMU"; 0x01 ID = 1 (traditional
//    interface only, no DMA); 0x02 UUID, 16 zero bytes (none given);
//    0x03 RAM_SIZE, u64 bytes; 0x04 NOGRAPHIC, u16 1 (no display);
//    0x05 NB_CPUS, u16 1; 0x0e BOOT_MENU, u16 0; 0x0f MAX_CPUS, u16 1;
//    0x19 FILE_DIR, a big-endian u32 count of 0 files.
//    QEMU's kernel-loading entries (0x07-0x0b, 0x10-0x18) and its x86 local
//    entries (0x8000: ACPI, SMBIOS, e820) are absent: vbts loads the kernel
//    itself and has no ACPI. kvm-unit-tests' MAX_RAM (0x11) is QEMU's
//    KERNEL_DATA, which vbts does not provide, so it reads 0.
class FwCfg : public PioDevice {
 public:
  static constexpr uint16_t kPort = 0x510;
  static constexpr uint16_t kSize = 2;
  static constexpr uint16_t kSignature = 0x00, kId = 0x01, kUuid = 0x02, kRamSize = 0x03,
                            kNoGraphic = 0x04, kNbCpus = 0x05, kBootMenu = 0x0e, kMaxCpus = 0x0f,
                            kFileDir = 0x19;

  FwCfg(uint64_t ram_bytes, uint16_t cpus);

  void Read(uint16_t offset, absl::Span<uint8_t> data) override;
  void Write(uint16_t offset, absl::Span<const uint8_t> data) override;

  // The bytes of entry `key`, empty when absent (for tests and `vbts info`).
  const std::vector<uint8_t>& Entry(uint16_t key) const;

 private:
  std::map<uint16_t, std::vector<uint8_t>> entries_;
  uint16_t key_ = 0xFFFF;  // QEMU's FW_CFG_INVALID until the first selection
  uint32_t offset_ = 0;
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_FW_CFG_H_
