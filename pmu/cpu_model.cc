// cpu_model.cc: the CPUID tables of vbts's guest CPU models.
#include "pmu/cpu_model.h"

#include <cstring>

#include "absl/strings/str_join.h"

namespace vbts::pmu {
namespace {

// Four little-endian ASCII bytes as CPUID returns them.
constexpr uint32_t Ascii4(const char (&s)[5]) {
  return uint32_t(uint8_t(s[0])) | uint32_t(uint8_t(s[1])) << 8 | uint32_t(uint8_t(s[2])) << 16 |
         uint32_t(uint8_t(s[3])) << 24;
}

// 0x80000002..4: the 48-byte brand string, NUL padded.
void AddBrand(std::vector<CpuidLeaf>& t, const char* brand) {
  char b[48] = {};
  std::strncpy(b, brand, sizeof b - 1);
  for (uint32_t i = 0; i < 3; i++) {
    uint32_t r[4];
    std::memcpy(r, b + 16 * i, 16);
    t.push_back({0x80000002 + i, 0, false, r[0], r[1], r[2], r[3]});
  }
}

// Bits of CPUID.1:EDX (SDM vol. 2A table 3-11).
enum : uint32_t {
  kFpu = 1u << 0, kVme = 1u << 1, kDe = 1u << 2, kPse = 1u << 3, kTsc = 1u << 4, kMsr = 1u << 5,
  kPae = 1u << 6, kMce = 1u << 7, kCx8 = 1u << 8, kApic = 1u << 9, kSep = 1u << 11, kMtrr = 1u << 12,
  kPge = 1u << 13, kMca = 1u << 14, kCmov = 1u << 15, kPat = 1u << 16, kPse36 = 1u << 17,
  kClfsh = 1u << 19, kMmx = 1u << 23, kFxsr = 1u << 24, kSse = 1u << 25, kSse2 = 1u << 26,
};
// Bits of CPUID.1:ECX (table 3-10).
enum : uint32_t {
  kSse3 = 1u << 0, kPclmul = 1u << 1, kSsse3 = 1u << 9, kCx16 = 1u << 13, kSse41 = 1u << 19,
  kSse42 = 1u << 20, kPopcnt = 1u << 23, kAes = 1u << 25,
};

constexpr uint32_t kBaseEdx = kFpu | kVme | kDe | kPse | kTsc | kMsr | kPae | kMce | kCx8 | kApic | kSep | kMtrr |
                              kPge | kMca | kCmov | kPat | kPse36 | kClfsh | kMmx | kFxsr | kSse | kSse2;

std::vector<CpuModel> MakeModels() {
  std::vector<CpuModel> models;
  {
    // Westmere-EP, Xeon X5650: family 6, model 0x2C, stepping 2 (SDM vol. 4
    // table 2-1, "06_2CH"), the machine of the textbook's experiments.
    CpuModel m{"westmere", "Intel Westmere-EP (06_2CH): 64-bit DS (DTES64), DS-CPL, PDCM, arch perfmon v3", {}};
    auto& t = m.leaves;
    t.push_back({0, 0, false, 0xB, Ascii4("Genu"), Ascii4("ntel"), Ascii4("ineI")});
    // 1.EBX: CLFLUSH line 8*8 bytes [15:8], 1 logical processor [23:16].
    t.push_back({1, 0, false, 0x000206C2, 0x00010800,
                 kSse3 | kPclmul | kCpuid1EcxDtes64 | kCpuid1EcxDsCpl | kSsse3 | kCx16 | kCpuid1EcxPdcm | kSse41 |
                     kSse42 | kPopcnt | kAes,
                 kBaseEdx | kCpuid1EdxDs});
    // 0xA: version 3, 4 GP counters of 48 bits, 7 architectural events all
    // available (EBX=0); 3 fixed counters of 48 bits (SDM 18.2.2, Westmere).
    t.push_back({0xA, 0, false, 0x07300403, 0, 0, 0x00000603});
    // 0xB: x2APIC topology, one thread, one core.
    t.push_back({0xB, 0, true, 0, 1, 0x100, 0});
    t.push_back({0xB, 1, true, 0, 1, 0x201, 0});
    t.push_back({0x80000000, 0, false, 0x80000008, 0, 0, 0});
    // 0x80000001: LAHF/SAHF; SYSCALL, NX, 1 GiB pages, RDTSCP, LM.
    t.push_back({0x80000001, 0, false, 0, 0, 1, (1u << 11) | (1u << 20) | (1u << 26) | (1u << 27) | (1u << 29)});
    AddBrand(t, "vbts virtual Intel(R) Xeon(R) X5650 (Westmere)");
    t.push_back({0x80000007, 0, false, 0, 0, 0, 1u << 8});     // invariant TSC
    t.push_back({0x80000008, 0, false, 0x00003028, 0, 0, 0});  // 40-bit physical, 48-bit linear
    models.push_back(std::move(m));
  }
  return models;
}

}  // namespace

const std::vector<CpuModel>& CpuModels() {
  static const std::vector<CpuModel>* models = new std::vector<CpuModel>(MakeModels());
  return *models;
}

const CpuModel* FindCpuModel(std::string_view name) {
  for (const CpuModel& m : CpuModels())
    if (m.name == name) return &m;
  return nullptr;
}

std::string CpuModelNames() {
  std::vector<std::string> names;
  for (const CpuModel& m : CpuModels()) names.push_back(m.name);
  return absl::StrJoin(names, ", ");
}

CpuidResult CpuModel::Cpuid(uint32_t leaf, uint32_t subleaf, uint32_t apic_id) const {
  auto find = [&](uint32_t f, uint32_t i) -> const CpuidLeaf* {
    for (const CpuidLeaf& l : leaves)
      if (l.function == f && (!l.indexed || l.index == i)) return &l;
    return nullptr;
  };
  const CpuidLeaf* max_basic = find(0, 0);
  const CpuidLeaf* max_ext = find(0x80000000, 0);
  uint32_t basic_max = max_basic ? max_basic->eax : 0;
  uint32_t ext_max = max_ext ? max_ext->eax : 0x80000000;
  bool extended = leaf >= 0x80000000;
  if ((!extended && leaf > basic_max) || (extended && leaf > ext_max)) {
    leaf = basic_max;  // Intel: out-of-range leaves return the highest basic leaf
  }
  const CpuidLeaf* l = find(leaf, subleaf);
  CpuidResult r;
  if (l) r = {l->eax, l->ebx, l->ecx, l->edx};
  if (leaf == 1) r.ebx = (r.ebx & 0x00FFFFFF) | (apic_id << 24);
  if (leaf == 0xB) r.edx = apic_id;
  return r;
}

}  // namespace vbts::pmu
