// cpu_model.h: named guest CPU models (`--cpu=MODEL`): the CPUID table a guest
// sees. Values and their sources are in docs/cpu-models.md.
#ifndef VBTS_PMU_CPU_MODEL_H_
#define VBTS_PMU_CPU_MODEL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pmu/cache_model.h"

namespace vbts::pmu {

// A fraction numerator/denominator.
struct Ratio {
  uint64_t numerator = 0, denominator = 1;
  bool operator==(const Ratio&) const = default;
};
// The fraction closest to p/q (0 < q, both below 2^32) among those with a numerator of at
// most `max_numerator` (at least 1) and a non-zero denominator: p/q in lowest
// terms when its numerator is within the bound.  {0, 1} when no fraction
// with a numerator from 1 to the bound has a denominator that fits.
Ratio BestRatio(uint64_t p, uint64_t q, uint64_t max_numerator);

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
inline constexpr uint32_t kCpuid1EcxX2apic = 1u << 21;        // x2APIC mode (SDM 10.12)
inline constexpr uint32_t kCpuid1EcxTscDeadline = 1u << 24;  // LAPIC timer TSC-deadline mode (SDM 10.5.4.1)
inline constexpr uint32_t kCpuid1EdxDs = 1u << 21;

// Last-branch-record geometry (SDM vol. 3B 17.4.8, 17.5–17.13 per family).
struct LbrModel {
  int entries = 0;           // 0: no LBR stack
  uint32_t from_base = 0;    // MSR of FROM_0 (FROM_n = from_base + n)
  uint32_t to_base = 0;      // MSR of TO_0; unused when `packed`
  uint32_t info_base = 0;    // MSR_LBR_INFO_0, 0 if the model has none
  uint32_t tos = 0x1C9;      // MSR_LASTBRANCH_TOS
  int format = 0;            // IA32_PERF_CAPABILITIES[5:0] (SDM 17.4.8.1)
  // One MSR per entry with FROM in bits 31:0 and TO in bits 63:32 (Pentium M,
  // Core Solo/Duo: MSR_LASTBRANCH_0..7 at 40H-47H).
  bool packed = false;
  bool select = false;       // MSR_LBR_SELECT (1C8H) present
  // MSR_LER_FROM_LIP / MSR_LER_TO_LIP: 1DDH/1DEH on Core and later, 1D7H/1D8H
  // on NetBurst (SDM vol. 4, table 2-46 and the Core tables).
  uint32_t ler_from = 0x1DD;
  uint32_t ler_to = 0x1DE;
  // MSR_LBR_SELECT.EN_CALLSTACK (bit 9): the LBR call stack of Haswell and
  // later (SDM vol. 3B 17.9, table 17-13); reserved (#GP) without it.
  bool call_stack = false;
};

// The debug-store, branch-recording and performance-monitoring features of
// a model: what the virtual PMU (pmu/vpmu.h) implements for it.
struct PmuModel {
  bool ds = false;              // CPUID.1:EDX.DS: IA32_DS_AREA, BTS
  bool dtes64 = false;          // CPUID.1:ECX.DTES64: 64-bit DS save area format in all modes
  bool ds_cpl = false;          // CPUID.1:ECX.DS-CPL: DEBUGCTL.BTS_OFF_OS/BTS_OFF_USR
  bool pdcm = false;            // CPUID.1:ECX.PDCM: IA32_PERF_CAPABILITIES
  uint64_t perf_capabilities = 0;
  uint64_t misc_enable = 0;     // IA32_MISC_ENABLE as read (reset value)
  // IA32_MISC_ENABLE bits a WRMSR may change (SDM vol. 4, the model's table);
  // bits 7, 11 and 12 are read-only (writes leave them), all others reserved (#GP).
  uint64_t misc_enable_writable = 0;
  uint64_t debugctl_valid = 0;  // writable IA32_DEBUGCTL bits; others #GP (in the model's own layout)
  // NetBurst's MSR_DEBUGCTLA (1D9H, SDM vol. 3B 17.12.1): LBR, BTF, TR, BTS,
  // BTINT, BTS_OFF_OS, BTS_OFF_USR at bits 0-6, where IA32_DEBUGCTL has TR..
  // BTS_OFF_USR at bits 6-10.  The virtual PMU converts at the MSR.
  bool netburst_debugctl = false;
  // NetBurst's own performance counters (SDM vol. 3B, "Performance
  // Monitoring (Processors Based on Intel NetBurst Microarchitecture)"):
  // 18 40-bit counters 300H-311H, their CCCRs 360H-371H and the ESCRs of
  // family 0FH model 03H in 3A0H-3E1H (pmu/netburst.h).  RDPMC takes ECX =
  // counter index 0-17, bit 31 the fast (32-bit) read.
  bool netburst_perfmon = false;
  int perfmon_version = 0;      // CPUID.0AH:EAX[7:0]
  int gp_counters = 0;          // CPUID.0AH:EAX[15:8]
  int gp_width = 0;             // CPUID.0AH:EAX[23:16]
  int fixed_counters = 0;       // CPUID.0AH:EDX[4:0]
  int fixed_width = 0;          // CPUID.0AH:EDX[12:5]
  LbrModel lbr;
  // The data caches behind the LLC Reference/Misses events (pmu/cache_model.h).
  CacheGeometry cache;
  // The model-specific events that count retired instructions which load
  // and which store (event | umask << 8; 0: the model has none vbts counts):
  // MEM_INST_RETIRED.LOADS/STORES (0BH, umask 01H/02H, Westmere) and
  // MEM_INST_RETIRED.ALL_LOADS/ALL_STORES (D0H, 81H/82H, Skylake and Ice
  // Lake), PEBS events on both (docs/pmu-model.md, "Retired loads and stores").
  uint16_t mem_loads_event = 0, mem_stores_event = 0;
  // The L1 data cache behind L1D.REPLACEMENT (event 51H, umask 01H: lines
  // brought into the L1D; Linux's `L1-dcache-load-misses` on these CPUs);
  // sets 0: the event counts nothing (docs/pmu-model.md, "L1D replacements").
  CacheLevelGeometry l1d;
  // The load-latency event (event | umask << 8; 0: none, and no MSR 3F6H):
  // MEM_INST_RETIRED.LATENCY_ABOVE_THRESHOLD (0BH/10H, Westmere) and
  // MEM_TRANS_RETIRED.LOAD_LATENCY (CDH/01H, Skylake, Ice Lake), with its
  // threshold in MSR_PEBS_LD_LAT_THRESHOLD (3F6H); Linux's `mem-loads`
  // (docs/pmu-model.md, "Load latency and data source").
  uint16_t load_latency_event = 0;
  // The PEBS data-source encoding of a load served by local DRAM: 0CH
  // ("L3 miss, local DRAM, exclusive") on Westmere, 0AH on Skylake and
  // later, where 0CH means a remote forward (Linux's pebs_data_source[] and
  // its Skylake patch-up).
  uint8_t dram_source = 0;
  // OFFCORE_RESPONSE_0/1 (events B7H and BBH, umask 01H) with their request
  // and response masks in MSR_OFFCORE_RSP_0/1 (1A6H, 1A7H): Linux's `LLC-loads`
  // and `LLC-load-misses` on these CPUs (docs/pmu-model.md, "Offcore
  // responses").  The layouts: Nehalem/Westmere's (request bits 7:0, response
  // bits 15:8) and Skylake's (request 15:0, ANY_RESPONSE 16, supplier 29:17,
  // snoop 37:31).  `offcore_valid`: the writable bits (others #GP).
  enum class OffcoreLayout : uint8_t { kNone, kNehalem, kSkylake };
  OffcoreLayout offcore = OffcoreLayout::kNone;
  uint64_t offcore_valid = 0;
  // BR_INST_RETIRED (C4H): the model's umasks beyond the architectural 00H
  // (every branch instruction), each with the branch classes it counts
  // (kBranchClass*, a union); a umask not listed counts nothing
  // (docs/pmu-model.md, "Branch events").
  struct BranchUmask {
    uint8_t umask;
    uint16_t classes;
  };
  std::vector<BranchUmask> branch_umasks;
  // The P6 family's BR_TAKEN_RETIRED (event C9H, umask 00H: taken branch
  // instructions retired), which `core-duo` keeps among its events beside
  // C4H; 0: the model has no such event.
  uint8_t branch_taken_event = 0;
};
// The classes of a retired branch instruction that BR_INST_RETIRED's umasks
// select (pmu/branch.h has the instruction's kind).
inline constexpr uint16_t kBranchClassAll = 1u << 0;         // every branch instruction
inline constexpr uint16_t kBranchClassCondTaken = 1u << 1;   // conditional (Jcc, JCXZ, LOOPcc), taken
inline constexpr uint16_t kBranchClassCondNotTaken = 1u << 2;  // conditional, not taken
inline constexpr uint16_t kBranchClassNearCall = 1u << 3;    // near CALL, direct or indirect
inline constexpr uint16_t kBranchClassNearReturn = 1u << 4;  // near RET
inline constexpr uint16_t kBranchClassNearTaken = 1u << 5;   // a taken near branch of any kind
inline constexpr uint16_t kBranchClassFar = 1u << 6;         // far branch instructions (far JMP/CALL/RET, INT n, IRET, SYSCALL, ...)
inline constexpr uint16_t kBranchClassIndirect = 1u << 7;    // near indirect JMP or CALL (not RET)
inline constexpr uint16_t kBranchClassCond = kBranchClassCondTaken | kBranchClassCondNotTaken;
inline constexpr uint64_t kPerfCapFullWidthWrite = 1ull << 13;
inline constexpr uint64_t kPerfCapPebsBaseline = 1ull << 14;  // adaptive PEBS (SDM 18.9.2)

struct CpuModel {
  std::string name;
  std::string description;
  std::vector<CpuidLeaf> leaves;
  PmuModel pmu;
  // The microcode update revision IA32_BIOS_SIGN_ID (8BH) reports in bits
  // 63:32 (SDM vol. 3A 9.11.7.1, vol. 4 table 2-2): the latest that Intel's
  // public microcode repository (Intel-Linux-Processor-Microcode-Data-Files,
  // intel-ucode/FF-MM-SS) has for the model's family, model and stepping.
  // Linux keys errata on it (the TSC-deadline timer needs >= 0xB2 on 06_5EH).
  uint32_t microcode_revision = 0;

  // The same model without a PMU, debug store or branch recording (`vbts run
  // --vpmu=off`): CPUID.1 DS/DTES64/DS-CPL/PDCM clear, leaf 0AH zero, and
  // the virtual PMU answers #GP for all their MSRs.
  CpuModel WithoutPmu() const;

  // The same model with the TSC frequency the guest's TSC really runs at
  // (KVM's for the vCPU: the host's, whatever the model's part ran at) in
  // CPUID leaves 15H and 16H, for a model whose maximum basic leaf reaches
  // them (SDM vol. 2A CPUID: 15H EAX/EBX the TSC/crystal ratio, ECX the
  // crystal's Hz; 16H EAX/EBX/ECX base, maximum and bus MHz).  The crystal
  // is `crystal_hz`, the clock of the LAPIC timer (SDM vol. 3A 10.5.4: with
  // leaf 15H enumerated, the timer counts the core crystal clock; Linux
  // takes its timer period from it).  Enumerated, Linux takes the TSC
  // frequency from these leaves (native_calibrate_tsc) instead of timing the
  // PIT, which an emulated PIT on a loaded host can fail ("tsc: Unable to
  // calibrate against PIT").  Linux multiplies the crystal's kHz by EBX in
  // 32 bits, so EBX stays within 0xFFFFFFFF / (crystal_hz / 1000): the
  // ratio is exact when it fits, otherwise the closest one that does
  // (BestRatio).  `tsc_khz` 0 or a model below leaf 15H: unchanged.
  CpuModel WithTscFrequency(uint64_t tsc_khz, uint64_t crystal_hz) const;

  // What CPUID returns for (leaf, subleaf), with Intel's rules for leaves
  // outside the table: a basic leaf above CPUID.0:EAX returns the highest
  // basic leaf's data; an extended one above CPUID.80000000H:EAX likewise
  // (SDM vol. 2A, CPUID, "If a value entered ... is higher than the maximum");
  // leaves within range but not listed read as zeros. `apic_id` fills
  // CPUID.1:EBX[31:24].
  CpuidResult Cpuid(uint32_t leaf, uint32_t subleaf, uint32_t apic_id = 0) const;
  // Cpuid() plus the bits hardware computes from the current state (SDM
  // vol. 2A, CPUID, tables 3-10/3-11): leaf 1 EDX.APIC (9) reads 0 while
  // IA32_APIC_BASE has the xAPIC globally disabled (bit 11 clear);
  // ECX.OSXSAVE (27) mirrors CR4.OSXSAVE on a CPU with XSAVE (ECX bit 26).
  CpuidResult CpuidInState(uint32_t leaf, uint32_t subleaf, uint64_t apic_base, uint64_t cr4) const;
};

// The models vbts knows; the first is the default.
const std::vector<CpuModel>& CpuModels();
// nullptr if `name` is unknown.
const CpuModel* FindCpuModel(std::string_view name);
std::string CpuModelNames();  // "westmere, ..." for messages

}  // namespace vbts::pmu

#endif  // VBTS_PMU_CPU_MODEL_H_
