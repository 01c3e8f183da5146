// pci_fuzz.cc: libFuzzer target for the optional PCI devices and the VT-d
// unit (--device=edu,intel-iommu): a guest's configuration cycles through
// mechanism #1, its MMIO accesses to the edu's BAR and the remapping unit's
// registers, and the tables in guest RAM they walk (root, context and
// second-level entries, the invalidation queue, IRTEs), all from the input.
// The platform is the machine's in small: DMA page by page through the
// IOMMU to RAM (the machine's own function), MSI through interrupt remapping, the I/O APIC's requests
// remapped too.
//
// Checks: no crash; every RAM access stays inside RAM (FakePhysMemory
// refuses the rest); with translation off a request translates to the
// address itself (the edu's DMA goes through the same translation, in the
// machine's IommuDmaRead/IommuDmaWrite); a remapped interrupt is a
// compatibility-format message to FEExxxxxH; the edu keeps its identity.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fuzz/fuzz_input.h"
#include "pmu/testing/fake_memory.h"
#include "vmm/intel_iommu.h"
#include "vmm/pci_edu.h"
#include "vmm/pci_host.h"

namespace {

using vbts::vmm::MsiMessage;

constexpr uint64_t kRam = 64 << 10;
constexpr uint32_t kBar = 0xFE000000;

class Platform : public vbts::vmm::PciPlatform {
 public:
  Platform(vbts::PhysMemory& ram, vbts::vmm::IntelIommu& iommu) : ram_(ram), iommu_(iommu) {}
  // As the machine's: vmm/intel_iommu.h's page by page DMA.
  absl::Status DmaRead(uint16_t requester, uint64_t address, absl::Span<uint8_t> out) override {
    return vbts::vmm::IommuDmaRead(&iommu_, ram_, requester, address, out);
  }
  absl::Status DmaWrite(uint16_t requester, uint64_t address, absl::Span<const uint8_t> data) override {
    return vbts::vmm::IommuDmaWrite(&iommu_, ram_, requester, address, data);
  }
  void SetIntx(uint16_t, uint8_t, bool) override {}
  void SignalMsi(uint16_t requester, const MsiMessage& m) override {
    Check(m, iommu_.RemapInterrupt(requester, m));
  }
  void Check(const MsiMessage& request, const std::optional<MsiMessage>& out) {
    // With remapping on, a remappable request that passes comes out of an
    // IRTE: compatibility format (bit 4 clear) at FEExxxxxH (an x2APIC
    // destination's bits 31:8 in address bits 63:40, 39:32 clear), 16-bit
    // data.
    if (out && iommu_.remapping_enabled() && (request.address & (1u << 4)) &&
        (((out->address >> 20) & 0xFFF) != 0xFEE || ((out->address >> 32) & 0xFF) || (out->address & (1u << 4)) ||
         (out->data >> 16)))
      __builtin_trap();
  }

 private:
  vbts::PhysMemory& ram_;
  vbts::vmm::IntelIommu& iommu_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vbts::fuzz::FuzzInput in(data, size);
  vbts::testing::FakePhysMemory ram(kRam);
  // The first bytes are RAM's contents (tables the unit will walk).
  in.Bytes(ram.bytes().data(), std::min<size_t>(in.U16(), kRam));
  uint64_t events = 0;
  vbts::vmm::IntelIommu iommu(ram, [&](const MsiMessage&) { events++; });
  Platform platform(ram, iommu);
  vbts::vmm::PciEdu edu(platform, 0x18, kBar, 11);
  vbts::vmm::PciHost host;
  host.Attach(0x18, &edu);
  for (int op = 0; op < 1024 && !in.empty(); op++) {
    const uint8_t kind = in.U8();
    const int size = (kind & 0x10) ? 8 : 4;
    switch (kind & 7) {  // bits 4-6: size and direction flags
      case 0: {  // a configuration cycle: CONFIG_ADDRESS, then CONFIG_DATA
        uint32_t address = 0x80001800u | in.U8();
        if (kind & 0x20) address = in.U32();
        uint8_t b[4];
        std::memcpy(b, &address, 4);
        host.Write(0, absl::MakeConstSpan(b, 4));
        const uint8_t n = uint8_t{1} << (in.U8() % 3);
        const uint16_t port = static_cast<uint16_t>(4 + in.U8() % (5 - n));
        uint32_t v = in.U32();
        std::memcpy(b, &v, 4);
        if (kind & 0x40)
          host.Write(port, absl::MakeConstSpan(b, n));
        else
          host.Read(port, absl::MakeSpan(b, n));
        break;
      }
      case 1: {  // edu register write (any size, any offset in its page)
        const uint64_t offset = in.U16() & 0xFF;
        const int n = in.U8() % 9;
        edu.MmioWrite(offset, n, in.Value(0x40000));
        break;
      }
      case 2: {
        const uint64_t offset = in.U16() & 0xFF;
        (void)edu.MmioRead(offset, in.U8() % 9);
        break;
      }
      case 3: {  // a remapping unit register write, in the shapes drivers use
        const uint32_t offset = (in.U16() & 0x3FC) & ~(size == 8 ? 7u : 3u);
        const uint16_t near = in.U16();
        iommu.MmioWrite(offset, size, in.Value(near));
        break;
      }
      case 4:
        (void)iommu.MmioRead(in.U16() & 0xFFF, size);
        break;
      default: {  // a request from elsewhere: DMA translation, an I/O APIC or MSI interrupt
        const uint16_t requester = in.U16();
        const uint64_t address = in.Value();
        const bool translating = iommu.translation_enabled();
        const std::optional<uint64_t> gpa = iommu.TranslateDma(requester, address, in.Bool());
        if (!translating && gpa != address) __builtin_trap();  // translation off: the address itself
        MsiMessage m;
        m.address = in.Value(0xFEE00000);
        m.data = in.U32();
        const bool from_function = in.Bool();
        platform.Check(m, iommu.RemapInterrupt(from_function ? std::optional<uint16_t>(requester) : std::nullopt, m));
        break;
      }
    }
  }
  if (edu.MmioRead(0, 4) != 0x010000ED) __builtin_trap();
  return 0;
}
