// loader_fuzz.cc: libFuzzer target for the kernel image loader (Multiboot ELF32
// and a.out kludge; PVH ELF32/ELF64 with their notes) writing into a guest RAM model: any input must end in an image
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
  }
  return 0;
}
