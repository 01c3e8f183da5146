// loader_fuzz.cc: libFuzzer target for the kernel image loader (Multiboot ELF32
// and a.out kludge; PVH ELF32/ELF64 with their notes; Linux bzImages with their
// setup header, boot_params and initrd) writing into a guest RAM model: any input must end in an image
// or a clean error, and no byte may land outside the 16 MiB RAM (FakePhysMemory
// refuses out-of-range writes, which the loader must never attempt).
#include <cstddef>
#include <cstdint>

#include "pmu/testing/fake_memory.h"
#include "vmm/loader.h"
#include "vmm/multiboot_info.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vbts::testing::FakePhysMemory* ram = new vbts::testing::FakePhysMemory(16 << 20);
  absl::StatusOr<vbts::vmm::MultibootInfo> mbi = vbts::vmm::WriteMultibootInfo(*ram, "fuzz.elf", "");
  if (!mbi.ok()) __builtin_trap();
  vbts::vmm::LoaderLimits limits;
  limits.reserved = mbi->reserved;
  absl::StatusOr<vbts::vmm::LoadedImage> img =
      vbts::vmm::LoadKernelImage(absl::MakeConstSpan(data, size), "fuzz.elf", *ram, limits);
  if (img.ok()) {
    for (const vbts::vmm::GpaRange& r : img->ranges)
      if (r.end > ram->size() || r.start > r.end) __builtin_trap();  // a range outside RAM was accepted
    if (img->boot == vbts::vmm::BootProtocol::kLinux) {
      // boot_params, the command line and an initrd for whatever header it has.
      const std::vector<vbts::vmm::LoadedModule> initrd = {{"initrd", std::vector<uint8_t>(0x1234, 0x5A)}};
      absl::StatusOr<vbts::vmm::LinuxBootInfo> lb = vbts::vmm::WriteLinuxBootParams(
          *ram, absl::MakeConstSpan(data, size), *img->linux_header, "console=ttyS0", 0x9000, initrd, 0xF0000);
      if (lb.ok())
        for (const vbts::vmm::GpaRange& r : lb->reserved)
          if (r.end > ram->size() || r.start > r.end) __builtin_trap();
    }
  }
  return 0;
}
