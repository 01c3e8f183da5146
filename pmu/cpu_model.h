// cpu_model.h: named guest CPU models (`--cpu=MODEL`): the CPUID table a guest
// sees. Values and their sources are in docs/cpu-models.md.
#ifndef VBTS_PMU_CPU_MODEL_H_
#define VBTS_PMU_CPU_MODEL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vbts::pmu {

struct CpuidLeaf {
  uint32_t function;
  uint32_t index;        // subleaf, meaningful when `indexed`
  bool indexed;
  uint32_t eax, ebx, ecx, edx;
};

struct CpuidResult {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  bool operator==(const CpuidResult&) const = default;
};

// CPUID.1:ECX / EDX bits vbts's models care about (SDM vol. 2A, CPUID, tables 3-10/3-11).
inline constexpr uint32_t kCpuid1EcxDtes64 = 1u << 2;
inline constexpr uint32_t kCpuid1EcxDsCpl = 1u << 4;
inline constexpr uint32_t kCpuid1EcxPdcm = 1u << 15;
inline constexpr uint32_t kCpuid1EdxDs = 1u << 21;

struct CpuModel {
  std::string name;
  std::string description;
  std::vector<CpuidLeaf> leaves;

  // What CPUID returns for (leaf, subleaf), with Intel's rules for leaves
  // outside the table: a basic leaf above CPUID.0:EAX returns the highest
  // basic leaf's data; an extended one above CPUID.80000000H:EAX likewise
  // (SDM vol. 2A, CPUID, "If a value entered ... is higher than the maximum");
  // leaves within range but not listed read as zeros. `apic_id` fills
  // CPUID.1:EBX[31:24].
  CpuidResult Cpuid(uint32_t leaf, uint32_t subleaf, uint32_t apic_id = 0) const;
};

// The models vbts knows; the first is the default.
const std::vector<CpuModel>& CpuModels();
// nullptr if `name` is unknown.
const CpuModel* FindCpuModel(std::string_view name);
std::string CpuModelNames();  // "westmere, ..." for messages

}  // namespace vbts::pmu

#endif  // VBTS_PMU_CPU_MODEL_H_
