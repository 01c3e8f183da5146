// acpi_tables.cc: lays out the ACPI tables byte by byte (ACPI 6.4 chapter 5) with their checksums.
#include "vmm/acpi_tables.h"

#include <cstring>
#include <string_view>
#include <vector>

#include "base/status_macros.h"
#include "vmm/boot_bytes.h"
#include "vmm/hpet.h"

namespace vbts::vmm {
namespace {

constexpr uint64_t kRsdp = 0x000, kFacs = kAcpiFacsGpa - kAcpiTablesGpa, kDsdt = 0x080, kFadt = 0x100, kMadt = 0x200, kRsdt = 0x280,
                   kXsdt = 0x2C0, kDmar = 0x320, kSsdt = 0x380, kHpet = 0x800;
constexpr uint64_t kVtdBase = 0xFED90000;  // IntelIommu::kBase (vmm/intel_iommu.h)

class Page {
 public:
  Page() : b_(kAcpiTablesSize, 0) {}
  void Put(uint64_t off, uint64_t v, int n) { PutLe(b_, off, v, n); }
  void Bytes(uint64_t off, std::string_view s) { std::memcpy(&b_[off], s.data(), s.size()); }
  // The 36-byte system description header (ACPI 5.2.6).
  void Header(uint64_t off, std::string_view sig, uint32_t length, uint8_t revision) {
    Bytes(off, sig);
    Put(off + 4, length, 4);
    Put(off + 8, revision, 1);
    Bytes(off + 10, "VBTS  ");
    Bytes(off + 16, "VBTSPC  ");
    Put(off + 24, 1, 4);
    Bytes(off + 28, "VBTS");
    Put(off + 32, 1, 4);
  }
  // Makes bytes [off, off + n) sum to 0 mod 256 through the byte at `at`.
  void Checksum(uint64_t off, uint64_t n, uint64_t at) {
    b_[at] = 0;
    uint8_t sum = 0;
    for (uint64_t i = 0; i < n; i++) sum = static_cast<uint8_t>(sum + b_[off + i]);
    b_[at] = static_cast<uint8_t>(-sum);
  }
  void TableChecksum(uint64_t off) {
    uint32_t length;
    std::memcpy(&length, &b_[off + 4], 4);
    Checksum(off, length, off + 9);
  }
  // A Generic Address Structure (ACPI 5.2.3.2) for a system I/O register.
  void IoGas(uint64_t off, uint8_t bits, uint8_t access_size, uint64_t port) {
    Put(off, 1, 1);  // system I/O space
    Put(off + 1, bits, 1);
    Put(off + 2, 0, 1);
    Put(off + 3, access_size, 1);  // 1 byte, 2 word, 3 dword
    Put(off + 4, port, 8);
  }
  const std::vector<uint8_t>& bytes() const { return b_; }

 private:
  std::vector<uint8_t> b_;
};

// AML (ACPI 6.4 chapter 20): `body` after its PkgLength (one byte below 64
// bytes in all, two up to 4095).
std::vector<uint8_t> Pkg(uint8_t op, const std::vector<uint8_t>& body, bool ext = false) {
  std::vector<uint8_t> out;
  if (ext) out.push_back(0x5B);
  out.push_back(op);
  const size_t n = body.size() + 1;
  if (n < 64) {
    out.push_back(static_cast<uint8_t>(n));
  } else {
    out.push_back(static_cast<uint8_t>(0x40 | ((n + 1) & 0xF)));
    out.push_back(static_cast<uint8_t>((n + 1) >> 4));
  }
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

// Scope (\_SB) { Device (PCI0) { Name (_HID, EisaId ("PNP0A03")) Name (_UID, Zero)
// Name (_CRS, ResourceTemplate () {...}) } }
std::vector<uint8_t> PciRootAml() {
  static constexpr uint8_t kCrs[] = {
      // Word address space descriptors (6.4.3.5.3): bus numbers 00-FF; I/O
      // 0000-0CF7 and 0D00-FFFF (not the configuration ports); fixed ranges.
      0x88, 0x0D, 0x00, 0x02, 0x0C, 0x00, 0x00, 0x00, 0x00, 0x00, 0xFF, 0x00, 0x00, 0x00, 0x00, 0x01,
      0x88, 0x0D, 0x00, 0x01, 0x0C, 0x03, 0x00, 0x00, 0x00, 0x00, 0xF7, 0x0C, 0x00, 0x00, 0xF8, 0x0C,
      0x88, 0x0D, 0x00, 0x01, 0x0C, 0x03, 0x00, 0x00, 0x00, 0x0D, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0xF3,
      // DWord memory descriptor (6.4.3.5.2): read/write, C0000000-FEBFFFFF.
      0x87, 0x17, 0x00, 0x00, 0x0C, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xC0, 0xFF, 0xFF, 0xBF, 0xFE,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xC0, 0x3E,
      0x79, 0x00};  // end tag
  std::vector<uint8_t> buffer = {0x0A, sizeof kCrs};  // BufferSize: ByteConst
  buffer.insert(buffer.end(), std::begin(kCrs), std::end(kCrs));
  std::vector<uint8_t> dev = {'P', 'C', 'I', '0',
                              0x08, '_', 'H', 'I', 'D', 0x0C, 0x41, 0xD0, 0x0A, 0x03,  // EisaId ("PNP0A03")
                              0x08, '_', 'U', 'I', 'D', 0x00,
                              0x08, '_', 'C', 'R', 'S'};
  const std::vector<uint8_t> crs = Pkg(0x11, buffer);  // BufferOp
  dev.insert(dev.end(), crs.begin(), crs.end());
  std::vector<uint8_t> scope = {0x5C, '_', 'S', 'B', '_'};
  const std::vector<uint8_t> device = Pkg(0x82, dev, /*ext=*/true);  // DeviceOp
  scope.insert(scope.end(), device.begin(), device.end());
  return Pkg(0x10, scope);  // ScopeOp
}

}  // namespace

absl::Status WriteAcpiTables(PhysMemory& ram, AcpiOptions options) {
  const bool dmar = options.dmar;
  if (kAcpiTablesGpa + kAcpiTablesSize > ram.size()) return absl::OkStatus();  // no RAM there: no tables
  const uint64_t at = kAcpiTablesGpa;
  Page p;

  // FACS (5.2.10): signature, length, hardware signature, waking vectors 0,
  // global lock 0, flags 0, version 2.
  p.Bytes(kFacs, "FACS");
  p.Put(kFacs + 4, 64, 4);
  p.Put(kFacs + 32, 2, 1);

  // DSDT: Name (_S5, Package (4) {0, 0, 0, 0}) in AML (20.2): NameOp,
  // NameString, PackageOp, PkgLength 6, NumElements 4, ZeroOp four times
  // (kAcpiS5SlpTyp is 0).
  static_assert(kAcpiS5SlpTyp == 0);
  static constexpr uint8_t kAml[] = {0x08, '_', 'S', '5', '_', 0x12, 0x06, 0x04, 0x00, 0x00, 0x00, 0x00};
  p.Header(kDsdt, "DSDT", 36 + sizeof kAml, 2);
  p.Bytes(kDsdt + 36, std::string_view(reinterpret_cast<const char*>(kAml), sizeof kAml));
  p.TableChecksum(kDsdt);

  // FADT (5.2.9), revision 3, 244 bytes.
  p.Header(kFadt, "FACP", 244, 3);
  p.Put(kFadt + 36, at + kFacs, 4);
  p.Put(kFadt + 40, at + kDsdt, 4);
  p.Put(kFadt + 46, kAcpiSciIrq, 2);
  p.Put(kFadt + 56, kAcpiPm1aEvt, 4);
  p.Put(kFadt + 64, kAcpiPm1aCnt, 4);
  p.Put(kFadt + 76, kAcpiPmTmr, 4);
  p.Put(kFadt + 88, 4, 1);     // PM1_EVT_LEN
  p.Put(kFadt + 89, 2, 1);     // PM1_CNT_LEN
  p.Put(kFadt + 91, 4, 1);     // PM_TMR_LEN
  p.Put(kFadt + 96, 101, 2);   // P_LVL2_LAT > 100: no C2
  p.Put(kFadt + 98, 1001, 2);  // P_LVL3_LAT > 1000: no C3
  p.Put(kFadt + 108, 0x32, 1);  // CENTURY
  p.Put(kFadt + 109, (1u << 0) | (1u << 2), 2);  // IAPC_BOOT_ARCH: LEGACY_DEVICES, VGA not present; no 8042
  p.Put(kFadt + 112, (1u << 0) | (1u << 2) | (1u << 4) | (1u << 5) | (1u << 10), 4);
  p.IoGas(kFadt + 116, 8, 1, 0x64);  // RESET_REG: the 8042's reset line
  p.Put(kFadt + 128, 0xFE, 1);       // RESET_VALUE
  p.Put(kFadt + 132, at + kFacs, 8);
  p.Put(kFadt + 140, at + kDsdt, 8);
  p.IoGas(kFadt + 148, 32, 2, kAcpiPm1aEvt);
  p.IoGas(kFadt + 172, 16, 2, kAcpiPm1aCnt);
  p.IoGas(kFadt + 208, 32, 3, kAcpiPmTmr);
  p.TableChecksum(kFadt);

  // MADT (5.2.12).
  uint64_t e = kMadt + 44;
  p.Put(kMadt + 36, 0xFEE00000, 4);
  p.Put(kMadt + 40, 1, 4);  // PCAT_COMPAT
  p.Put(e, 0, 1), p.Put(e + 1, 8, 1), p.Put(e + 2, 0, 1), p.Put(e + 3, 0, 1), p.Put(e + 4, 1, 4);  // processor
  e += 8;
  p.Put(e, 1, 1), p.Put(e + 1, 12, 1), p.Put(e + 2, 0, 1), p.Put(e + 4, 0xFEC00000, 4), p.Put(e + 8, 0, 4);  // I/O APIC
  e += 12;
  p.Put(e, 2, 1), p.Put(e + 1, 10, 1), p.Put(e + 2, 0, 1), p.Put(e + 3, kAcpiSciIrq, 1);  // ISA IRQ 9 ->
  p.Put(e + 4, kAcpiSciIrq, 4), p.Put(e + 8, 0x000D, 2);  // GSI 9, active high (01), level (11 << 2)
  e += 10;
  p.Put(e, 4, 1), p.Put(e + 1, 6, 1), p.Put(e + 2, 0xFF, 1), p.Put(e + 3, 0, 2), p.Put(e + 5, 1, 1);  // LINT1: NMI
  e += 6;
  p.Header(kMadt, "APIC", static_cast<uint32_t>(e - kMadt), 3);
  p.TableChecksum(kMadt);

  // DMAR (VT-d spec 8.1): host address width - 1, flags; then a DRHD (8.3):
  // type 0, length, INCLUDE_PCI_ALL, segment 0, register base; its one device
  // scope (8.3.1): type 3 (I/O APIC), length 8, enumeration ID 0, start bus
  // FFH, path device 0 function 0.
  if (dmar) {
    p.Put(kDmar + 36, 38, 1);
    p.Put(kDmar + 37, 1u << 0, 1);  // INTR_REMAP (not X2APIC_OPT_OUT: the unit has EIM)
    const uint64_t d = kDmar + 48;
    p.Put(d, 0, 2), p.Put(d + 2, 16 + 8, 2), p.Put(d + 4, 1, 1), p.Put(d + 6, 0, 2), p.Put(d + 8, kVtdBase, 8);
    const uint64_t sc = d + 16;
    p.Put(sc, 3, 1), p.Put(sc + 1, 8, 1), p.Put(sc + 4, 0, 1), p.Put(sc + 5, kIoapicSourceId >> 8, 1);
    p.Put(sc + 6, (kIoapicSourceId >> 3) & 0x1F, 1), p.Put(sc + 7, kIoapicSourceId & 7, 1);
    p.Header(kDmar, "DMAR", static_cast<uint32_t>(sc + 8 - kDmar), 1);
    p.TableChecksum(kDmar);
  }

  // SSDT: the PCI root.
  if (options.pci_root) {
    const std::vector<uint8_t> aml = PciRootAml();
    p.Header(kSsdt, "SSDT", static_cast<uint32_t>(36 + aml.size()), 2);
    p.Bytes(kSsdt + 36, std::string_view(reinterpret_cast<const char*>(aml.data()), aml.size()));
    p.TableChecksum(kSsdt);
  }

  // HPET (IA-PC HPET spec 1.0a, 3.2.4): event timer block ID (GCAP_ID's
  // low half), its base as a memory-space Generic Address Structure (width,
  // offset and access size 0, as QEMU's), HPET number 0, minimum periodic
  // tick 0, no page protection.
  p.Put(kHpet + 36, Hpet::kBlockId, 4);
  p.Put(kHpet + 40, 0, 4);  // system memory space, 0, 0, 0
  p.Put(kHpet + 44, Hpet::kBase, 8);
  p.Header(kHpet, "HPET", 56, 1);
  p.TableChecksum(kHpet);

  // RSDT and XSDT: FADT, MADT, HPET (, DMAR) (, SSDT).
  std::vector<uint64_t> tables = {kFadt, kMadt, kHpet};
  if (dmar) tables.push_back(kDmar);
  if (options.pci_root) tables.push_back(kSsdt);
  const uint32_t n = static_cast<uint32_t>(tables.size());
  p.Header(kRsdt, "RSDT", 36 + n * 4, 1);
  p.Header(kXsdt, "XSDT", 36 + n * 8, 1);
  for (uint32_t i = 0; i < n; i++) {
    p.Put(kRsdt + 36 + 4 * i, at + tables[i], 4);
    p.Put(kXsdt + 36 + 8 * i, at + tables[i], 8);
  }
  p.TableChecksum(kRsdt);
  p.TableChecksum(kXsdt);

  // RSDP (5.2.5.3): checksum over the first 20 bytes, extended over all 36.
  p.Bytes(kRsdp, "RSD PTR ");
  p.Bytes(kRsdp + 9, "VBTS  ");
  p.Put(kRsdp + 15, 2, 1);
  p.Put(kRsdp + 16, at + kRsdt, 4);
  p.Put(kRsdp + 20, 36, 4);
  p.Put(kRsdp + 24, at + kXsdt, 8);
  p.Checksum(kRsdp, 20, kRsdp + 8);
  p.Checksum(kRsdp, 36, kRsdp + 32);

  return ram.Write(Gpa(at), p.bytes());
}

}  // namespace vbts::vmm
