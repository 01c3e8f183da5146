// cpu_model.cc: the CPUID tables of vbts's guest CPU models.
#include "pmu/cpu_model.h"

#include <cstring>
#include <numeric>

#include "absl/numeric/int128.h"
#include "absl/strings/str_join.h"

namespace vbts::pmu {
namespace {

// IA32_MISC_ENABLE bits the architectural MSR table (SDM vol. 4 table 2-2)
// marks R/W: fast strings (0), automatic thermal control (3), EIST (16),
// ENABLE MONITOR FSM (18), limit CPUID maxval (22), xTPR message disable
// (23), XD bit disable (34). kvm-unit-tests' msr.c writes 0x400c50809 with
// only 7, 11 and 12 kept, i.e. expects exactly these to be writable.
constexpr uint64_t kMiscEnableArchWritable =
    (1ull << 0) | (1ull << 3) | (1ull << 16) | (1ull << 18) | (1ull << 22) | (1ull << 23) | (1ull << 34);
constexpr uint64_t kMiscEnableTurboDisable = 1ull << 38;  // IDA/Turbo disengage, Nehalem and later

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
    // SDM 17.4.9 (DTES64, DS-CPL), 18.6.1/table 2-20 (Nehalem/Westmere
    // MSRs), 17.4.8.1 (PERF_CAPABILITIES: LBR format 3 = 64-bit EIP with
    // flags; bit 6 PEBS trap, bit 7 PEBS arch regs, [11:8] PEBS record
    // format 1, bit 12 freeze while SMM).
    PmuModel& p = m.pmu;
    p.ds = p.dtes64 = p.ds_cpl = p.pdcm = true;
    p.perf_capabilities = 0x11C3;
    p.misc_enable = 0x81;  // fast strings (0), performance monitoring available (7); BTS/PEBS available
    p.misc_enable_writable = kMiscEnableArchWritable | kMiscEnableTurboDisable;  // vol. 4 table 2-15 (Nehalem)
    p.debugctl_valid = 0x1FC3;  // LBR, BTF, TR, BTS, BTINT, BTS_OFF_OS/USR, FREEZE_LBRS/PERFMON_ON_PMI
    p.perfmon_version = 3;
    p.gp_counters = 4;
    p.gp_width = 48;
    p.fixed_counters = 3;
    p.fixed_width = 48;
    p.lbr = {16, 0x680, 0x6C0, 0, 0x1C9, 3, false, true};
    // Xeon X5650: 256 KB 8-way L2 per core, 12 MB 16-way shared L3 (Intel's
    // product specification and that CPU's CPUID.4 cache parameters).
    p.cache = {{512, 8}, {12288, 16}, PairPrefetch::kInnerAndLlc};
    // SDM vol. 3B ch. 19, the events of the Westmere microarchitecture: 0BH
    // umask 01H/02H, "instructions with an architecturally-visible load/store
    // retired", PEBS.
    p.mem_loads_event = 0x010B;
    p.mem_stores_event = 0x020B;
    p.l1d = {64, 8};  // 32 KB 8-way L1D (CPUID.4 of Westmere parts)
    p.load_latency_event = 0x100B;  // MEM_INST_RETIRED.LATENCY_ABOVE_THRESHOLD
    p.dram_source = 0x0C;
    p.offcore = PmuModel::OffcoreLayout::kNehalem;
    p.offcore_valid = 0xFFFF;  // Linux's intel_westmere_extra_regs mask (bit 11, reserved in the SDM, included)
    // BR_INST_RETIRED umasks of Westmere (SDM vol. 3B ch. 19, the Westmere
    // events; Linux's westmereep event list: conditional 01H, near_call 02H,
    // all_branches 04H).
    p.branch_umasks = {{0x01, kBranchClassCond}, {0x02, kBranchClassNearCall}, {0x04, kBranchClassAll}};
    m.microcode_revision = 0x1F;  // intel-ucode/06-2c-02, 2018-05-08
    models.push_back(std::move(m));
  }
  {
    CpuModel m{"core-duo",
               "Intel Core Duo T2500 (Yonah, 06_0EH): 32-bit only, DS without DTES64 (32-bit DS save area "
               "format), DS-CPL, arch perfmon v1, 8 packed LBRs at 40H",
               {}};
    auto& t = m.leaves;
    t.push_back({0, 0, false, 0xA, Ascii4("Genu"), Ascii4("ntel"), Ascii4("ineI")});
    // No DTES64, no PDCM; EST (7), TM2 (8), monitor (3).
    t.push_back({1, 0, false, 0x000006E8, 0x00010800, kSse3 | (1u << 3) | kCpuid1EcxDsCpl | (1u << 7) | (1u << 8),
                 kBaseEdx | kCpuid1EdxDs | (1u << 22) | (1u << 27) | (1u << 29) | (1u << 31)});
    t.push_back({0xA, 0, false, 0x07280201, 0, 0, 0});  // v1, 2 counters, 40 bits, 7 events
    t.push_back({0x80000000, 0, false, 0x80000008, 0, 0, 0});
    t.push_back({0x80000001, 0, false, 0, 0, 0, 1u << 20});  // XD; no long mode
    AddBrand(t, "vbts virtual Genuine Intel(R) CPU T2500 (Core Duo)");
    // 36-bit physical (PAE); linear width 0 (not reported): KVM_SET_CPUID2 accepts only 0, 48 or 57.
    t.push_back({0x80000008, 0, false, 0x00000024, 0, 0, 0});
    PmuModel& p = m.pmu;
    p.ds = p.ds_cpl = true;
    p.misc_enable = 0x1081;  // perfmon available (7), PEBS unavailable (12), BTS available (11 = 0)
    // vol. 4 table 2-3 (Core Solo/Duo): + FERR# multiplexing (10), TM2 enable (13).
    p.misc_enable_writable = kMiscEnableArchWritable | (1ull << 10) | (1ull << 13);
    p.debugctl_valid = 0x7C3;  // LBR, BTF, TR, BTS, BTINT, BTS_OFF_OS/USR (no freeze bits before v2)
    p.perfmon_version = 1;
    p.gp_counters = 2;
    p.gp_width = 40;
    p.lbr = {8, 0x40, 0, 0, 0x1C9, 0, true, false};
    // Core Duo T2500: 32 KB 8-way L1D per core, 2 MB 8-way shared L2 as the
    // last level (CPUID.4 of Yonah).
    p.cache = {{64, 8}, {4096, 8}, PairPrefetch::kLlc};
    // Its branch events are the P6 family's (SDM vol. 3B ch. 19, the Core Solo
    // and Core Duo events; OProfile's and PAPI's P6 tables): C4H branch
    // instructions retired, C9H taken branch instructions retired.
    p.branch_taken_event = 0xC9;
    m.microcode_revision = 0x39;  // intel-ucode/06-0e-08, 2005-11-15
    models.push_back(std::move(m));
  }
  {
    // Pentium 4 (Prescott, family 0FH model 03H, stepping 4: NetBurst, 90 nm,
    // 32-bit only): the CPU the Win32 BTS capture engine of the project's
    // material was written for (docs/cpu-models.md).  CPUID per SDM vol. 2A
    // tables 3-10/3-11 and the NetBurst sections of vol. 3B 17.12; no
    // architectural perfmon (leaf 0AH is beyond its maximum leaf 5).
    CpuModel m{"pentium4",
               "Intel Pentium 4 (Prescott, 0F_03H): NetBurst, 32-bit only, MSR_DEBUGCTLA layout, 32-bit DS with "
               "12-byte BTS records, DS-CPL, 16 LBRs (680H/6C0H, TOS 1DAH), LER 1D7H/1D8H, no arch perfmon; NetBurst "
               "ESCR/CCCR counters (18 x 40 bits)",
               {}};
    auto& t = m.leaves;
    t.push_back({0, 0, false, 0x5, Ascii4("Genu"), Ascii4("ntel"), Ascii4("ineI")});
    // 1.EAX: family 0FH, model 3, stepping 4.  ECX: SSE3 (0), MONITOR (3),
    // DS-CPL (4), CNXT-ID (10).  EDX: + DS (21), ACPI (22), SS (27), TM (29), PBE (31).
    t.push_back({1, 0, false, 0x00000F34, 0x00010800, kSse3 | (1u << 3) | kCpuid1EcxDsCpl | (1u << 10),
                 kBaseEdx | kCpuid1EdxDs | (1u << 22) | (1u << 27) | (1u << 29) | (1u << 31)});
    t.push_back({2, 0, false, 0x00665B5B, 0, 0, 0x007B7040});  // cache/TLB descriptors (Prescott)
    t.push_back({5, 0, false, 0x40, 0x40, 0, 0});               // MONITOR/MWAIT: 64-byte lines
    t.push_back({0x80000000, 0, false, 0x80000008, 0, 0, 0});
    t.push_back({0x80000001, 0, false, 0, 0, 0, 0});  // no XD, no long mode (EM64T came with later steppings)
    AddBrand(t, "vbts virtual Intel(R) Pentium(R) 4 CPU 3.00GHz (Prescott)");
    t.push_back({0x80000008, 0, false, 0x00000024, 0, 0, 0});  // 36-bit physical (PAE)
    PmuModel& p = m.pmu;
    p.ds = p.ds_cpl = true;
    // IA32_MISC_ENABLE (vol. 4 table 2-46, NetBurst): fast strings (0),
    // performance monitoring available (7), BTS available (11 = 0), PEBS
    // available (12 = 0: MSR_PEBS_ENABLE, MSR_PEBS_MATRIX_VERT and PEBS on
    // MSR_IQ_COUNTER4; docs/pmu-model.md, "NetBurst PEBS").
    p.misc_enable = 0x81;
    p.misc_enable_writable = kMiscEnableArchWritable;
    // MSR_DEBUGCTLA (17.12.1): LBR, BTF, TR, BTS, BTINT, BTS_OFF_OS, BTS_OFF_USR.
    p.debugctl_valid = 0x7F;
    p.netburst_debugctl = true;
    // NetBurst performance counters, ESCRs and CCCRs (vol. 3B, the NetBurst
    // performance-monitoring section; pmu/netburst.h).
    p.netburst_perfmon = true;
    // 17.12.2: family 0FH model 03H and later, 16 entries as
    // MSR_LASTBRANCH_n_FROM_IP (680H-68FH) / _TO_IP (6C0H-6CFH), TOS 1DAH,
    // 32-bit linear addresses (no PERF_CAPABILITIES: format 0); LER at 1D7H/1D8H.
    p.lbr = {16, 0x680, 0x6C0, 0, 0x1DA, 0, false, false, 0x1D7, 0x1D8};
    // As the model's CPUID.2 descriptors say (SDM vol. 2A table 3-12): 66H,
    // 8 KB 4-way L1D; 7BH, 512 KB 8-way L2, the last level (40H: no L3).  No
    // architectural perfmon: nothing counts LLC events on this model.
    p.cache = {{32, 4}, {1024, 8}, PairPrefetch::kLlc};
    m.microcode_revision = 0x17;  // intel-ucode/0f-03-04, 2005-04-21
    models.push_back(std::move(m));
  }
  {
    CpuModel m{"skylake",
               "Intel Core i7-6700 (Skylake, 06_5EH): 64-bit DS, arch perfmon v4, 32 LBRs with LBR_INFO "
               "(format 5), full-width counter writes",
               {}};
    auto& t = m.leaves;
    t.push_back({0, 0, false, 0x16, Ascii4("Genu"), Ascii4("ntel"), Ascii4("ineI")});
    // x2APIC and the TSC-deadline timer: every Core processor since Sandy
    // Bridge (Linux's cpuinfo flags x2apic, tsc_deadline_timer on Skylake).
    t.push_back({1, 0, false, 0x000506E3, 0x00010800,
                 kSse3 | kPclmul | kCpuid1EcxDtes64 | kCpuid1EcxDsCpl | kSsse3 | kCx16 | kCpuid1EcxPdcm | kSse41 |
                     kSse42 | kCpuid1EcxX2apic | kPopcnt | kCpuid1EcxTscDeadline | kAes,
                 kBaseEdx | kCpuid1EdxDs});
    t.push_back({0xA, 0, false, 0x08300404, 0, 0, 0x00000603});  // v4, 4 counters, 48 bits, 3 fixed
    // 0xB: x2APIC topology, one thread, one core (EDX: the x2APIC ID).
    t.push_back({0xB, 0, true, 0, 1, 0x100, 0});
    t.push_back({0xB, 1, true, 0, 1, 0x201, 0});
    t.push_back({0x80000000, 0, false, 0x80000008, 0, 0, 0});
    t.push_back({0x80000001, 0, false, 0, 0, 1, (1u << 11) | (1u << 20) | (1u << 26) | (1u << 27) | (1u << 29)});
    AddBrand(t, "vbts virtual Intel(R) Core(TM) i7-6700 (Skylake)");
    t.push_back({0x80000008, 0, false, 0x00003027, 0, 0, 0});  // 39-bit physical, 48-bit linear
    PmuModel& p = m.pmu;
    p.ds = p.dtes64 = p.ds_cpl = p.pdcm = true;
    // LBR format 5 (EIP, flags, TSX, LBR_INFO), PEBS trap, arch regs, PEBS
    // format 3, freeze while SMM, full-width writes (bit 13).
    p.perf_capabilities = 0x33C5;
    p.misc_enable = 0x81;
    p.misc_enable_writable = kMiscEnableArchWritable | kMiscEnableTurboDisable;  // vol. 4 tables 2-20, 2-38
    p.debugctl_valid = 0x5FC3;  // + FREEZE_WHILE_SMM (14)
    p.perfmon_version = 4;
    p.gp_counters = 4;
    p.gp_width = 48;
    p.fixed_counters = 3;
    p.fixed_width = 48;
    p.lbr = {32, 0x680, 0x6C0, 0xDC0, 0x1C9, 5, false, true};
    p.lbr.call_stack = true;
    // Core i7-6700: 256 KB 4-way L2 per core, 8 MB 16-way shared L3 (CPUID.4
    // of Skylake client parts).
    p.cache = {{1024, 4}, {8192, 16}, PairPrefetch::kInnerAndLlc};
    // SDM vol. 3B ch. 19, the Skylake events: D0H umask 81H/82H, "all retired load
    // / store instructions", PEBS with the data linear address (DataLA).
    p.mem_loads_event = 0x81D0;
    p.mem_stores_event = 0x82D0;
    p.l1d = {64, 8};  // 32 KB 8-way L1D (CPUID.4 of Skylake client parts)
    p.load_latency_event = 0x01CD;  // MEM_TRANS_RETIRED.LOAD_LATENCY
    p.dram_source = 0x0A;
    p.offcore = PmuModel::OffcoreLayout::kSkylake;
    p.offcore_valid = 0x3FFFFF8FFFull;  // Linux's intel_skl_extra_regs mask
    // BR_INST_RETIRED umasks of Skylake (SDM vol. 3B ch. 19, the Skylake
    // events; Linux's skylake event list): conditional 01H, near_call 02H,
    // all_branches_pebs 04H, near_return 08H, not_taken 10H (only
    // conditional branches can be not taken), near_taken 20H, far_branch 40H.
    p.branch_umasks = {{0x01, kBranchClassCond},          {0x02, kBranchClassNearCall},
                       {0x04, kBranchClassAll},           {0x08, kBranchClassNearReturn},
                       {0x10, kBranchClassCondNotTaken},  {0x20, kBranchClassNearTaken},
                       {0x40, kBranchClassFar}};
    m.microcode_revision = 0xF0;  // intel-ucode/06-5e-03, 2021-11-12
    models.push_back(std::move(m));
  }
  {
    // Ice Lake server (3rd generation Xeon Scalable, e.g. Platinum 8380):
    // family 6, model 6AH (SDM vol. 4 table 2-1 "06_6AH"), stepping 6.
    // Sunny Cove cores: perfmon v5 with 8 GP counters per logical processor
    // and 4 fixed counters (SDM vol. 3B 18.9.x "Ice Lake microarchitecture"),
    // PEBS record format 4 (adaptive PEBS, 18.9.2) on every GP and fixed
    // counter, legacy LBRs (format 5, 32 entries with LBR_INFO; architectural
    // LBRs came later).  Instruction-set features as `skylake`
    // (docs/cpu-models.md).
    CpuModel m{"icelake-server",
               "Intel Xeon Platinum 8380 (Ice Lake server, 06_6AH): 64-bit DS, arch perfmon v5 (8 GP, 4 fixed), "
               "adaptive PEBS (format 4, baseline, PEBS on fixed counters), 32 LBRs with LBR_INFO (format 5)",
               {}};
    auto& t = m.leaves;
    t.push_back({0, 0, false, 0x16, Ascii4("Genu"), Ascii4("ntel"), Ascii4("ineI")});
    t.push_back({1, 0, false, 0x000606A6, 0x00010800,
                 kSse3 | kPclmul | kCpuid1EcxDtes64 | kCpuid1EcxDsCpl | kSsse3 | kCx16 | kCpuid1EcxPdcm | kSse41 |
                     kSse42 | kCpuid1EcxX2apic | kPopcnt | kCpuid1EcxTscDeadline | kAes,
                 kBaseEdx | kCpuid1EdxDs});
    // 0xA (SDM vol. 2A CPUID leaf 0AH; vol. 3B 18.2.5 v5): EAX version 5,
    // 8 GP counters of 48 bits, EBX length 8 (the 7 events of v1 + topdown
    // slots), EBX 0 (all available); ECX fixed-counter bitmap 0FH (v5);
    // EDX 4 fixed counters of 48 bits, bit 15 AnyThread deprecated.
    t.push_back({0xA, 0, false, 0x08300805, 0, 0xF, 0x00008604});
    // 0xB: x2APIC topology, one thread, one core (EDX: the x2APIC ID).
    t.push_back({0xB, 0, true, 0, 1, 0x100, 0});
    t.push_back({0xB, 1, true, 0, 1, 0x201, 0});
    t.push_back({0x80000000, 0, false, 0x80000008, 0, 0, 0});
    t.push_back({0x80000001, 0, false, 0, 0, 1, (1u << 11) | (1u << 20) | (1u << 26) | (1u << 27) | (1u << 29)});
    AddBrand(t, "vbts virtual Intel(R) Xeon(R) Platinum 8380 (Ice Lake)");
    t.push_back({0x80000008, 0, false, 0x0000302E, 0, 0, 0});  // 46-bit physical, 48-bit linear
    PmuModel& p = m.pmu;
    p.ds = p.dtes64 = p.ds_cpl = p.pdcm = true;
    // PERF_CAPABILITIES (17.4.8.1, 18.9.2): LBR format 5 [5:0], PEBS trap
    // (6), PEBS arch regs (7), PEBS record format 4 [11:8], freeze while SMM
    // (12), full-width writes (13), PEBS_BASELINE (14).  Not set: 15
    // PERF_METRICS (MSR 329H is not modelled), 16 PEBS output to PT.
    p.perf_capabilities = 0x74C5;
    p.misc_enable = 0x81;
    p.misc_enable_writable = kMiscEnableArchWritable | kMiscEnableTurboDisable;
    p.debugctl_valid = 0x5FC3;  // as skylake: LBR, BTF, TR..BTS_OFF_USR, FREEZE_LBRS/PERFMON_ON_PMI, FREEZE_WHILE_SMM
    p.perfmon_version = 5;
    p.gp_counters = 8;
    p.gp_width = 48;
    p.fixed_counters = 4;
    p.fixed_width = 48;
    p.lbr = {32, 0x680, 0x6C0, 0xDC0, 0x1C9, 5, false, true};
    p.lbr.call_stack = true;
    // Xeon Platinum 8380: 1.25 MB 20-way L2 per core, 60 MB 12-way shared
    // L3 (40 slices of 1.5 MB; CPUID.4 of Ice Lake server parts).
    p.cache = {{1024, 20}, {81920, 12}, PairPrefetch::kInnerAndLlc};
    // Ice Lake: the same events (SDM vol. 3B, Ice Lake event table; Linux's
    // icl event list, MEM_INST_RETIRED.ALL_LOADS/ALL_STORES).
    p.mem_loads_event = 0x81D0;
    p.mem_stores_event = 0x82D0;
    p.l1d = {64, 12};  // 48 KB 12-way L1D (CPUID.4 of Ice Lake server parts)
    p.load_latency_event = 0x01CD;  // MEM_TRANS_RETIRED.LOAD_LATENCY
    p.dram_source = 0x0A;
    p.offcore = PmuModel::OffcoreLayout::kSkylake;
    p.offcore_valid = 0x3FFFFFBFFFull;  // Linux's intel_icl_extra_regs mask
    // BR_INST_RETIRED umasks of Ice Lake (SDM vol. 3B ch. 19, the Ice Lake
    // events; Linux's icelakex event list), where 01H is cond_taken and 11H
    // cond: cond_taken 01H, near_call 02H, near_return 08H, cond_ntaken 10H,
    // cond 11H, near_taken 20H, far_branch 40H, indirect 80H (no 04H).
    p.branch_umasks = {{0x01, kBranchClassCondTaken},    {0x02, kBranchClassNearCall},
                       {0x08, kBranchClassNearReturn},   {0x10, kBranchClassCondNotTaken},
                       {0x11, kBranchClassCond},         {0x20, kBranchClassNearTaken},
                       {0x40, kBranchClassFar},          {0x80, kBranchClassIndirect}};
    m.microcode_revision = 0x0D000410;  // intel-ucode/06-6a-06, 2025-03-11
    models.push_back(std::move(m));
  }
  return models;
}

}  // namespace

Ratio BestRatio(uint64_t p, uint64_t q, uint64_t max_numerator) {
  // The continued fraction of p/q: its convergents h/k are the best
  // approximations with numerators up to theirs; past the bound, the best
  // semiconvergent below it competes with the last convergent.
  const uint64_t p0 = p, q0 = q;
  uint64_t h0 = 0, h1 = 1, k0 = 1, k1 = 0;
  Ratio best{0, 1};
  const auto closer = [&](Ratio a, Ratio b) {  // |a - p/q| < |b - p/q|
    const auto err = [&](Ratio r) {
      const absl::int128 d = absl::int128(r.numerator) * q0 - absl::int128(p0) * r.denominator;
      return absl::uint128(d < 0 ? -d : d);
    };
    // Cross-multiplied by the denominators (q0 is common).
    return err(a) * b.denominator < err(b) * a.denominator;
  };
  while (q != 0) {
    const uint64_t a = p / q;
    if (a > 0 && h1 > (max_numerator - h0) / a) {
      const uint64_t t = (max_numerator - h0) / h1;  // the largest semiconvergent within the bound
      const Ratio semi{t * h1 + h0, t * k1 + k0};
      if (k1 != 0) best = {h1, k1};
      if (t > 0 && (best.numerator == 0 || closer(semi, best))) best = semi;
      return best;
    }
    const uint64_t h2 = a * h1 + h0, k2 = a * k1 + k0;
    h0 = h1, h1 = h2, k0 = k1, k1 = k2;
    if (k1 != 0) best = {h1, k1};
    const uint64_t r = p - a * q;
    p = q, q = r;
  }
  return best;
}

CpuModel CpuModel::WithTscFrequency(uint64_t tsc_khz, uint64_t crystal_hz) const {
  CpuModel m = *this;
  const uint64_t crystal_khz = crystal_hz / 1000;
  if (tsc_khz == 0 || tsc_khz > 0xFFFFFFFFull || crystal_khz == 0 || crystal_hz > 0xFFFFFFFFull ||
      Cpuid(0, 0).eax < 0x15)
    return m;
  // TSC = crystal * EBX / EAX, where software computes crystal_khz * EBX in
  // 32 bits (Linux's native_calibrate_tsc: unsigned int): EBX at most
  // 0xFFFFFFFF / crystal_khz, the ratio exact when it fits in lowest terms
  // and otherwise the closest one that does.
  const Ratio r = BestRatio(tsc_khz, crystal_khz, 0xFFFFFFFFull / crystal_khz);
  if (r.numerator == 0 || r.denominator > 0xFFFFFFFFull) return m;
  const uint32_t mhz = static_cast<uint32_t>((tsc_khz + 500) / 1000);
  std::erase_if(m.leaves, [](const CpuidLeaf& l) { return l.function == 0x15 || l.function == 0x16; });
  m.leaves.push_back({0x15, 0, false, static_cast<uint32_t>(r.denominator), static_cast<uint32_t>(r.numerator),
                      static_cast<uint32_t>(crystal_khz * 1000), 0});
  m.leaves.push_back({0x16, 0, false, mhz, mhz, 100, 0});
  return m;
}

CpuModel CpuModel::WithoutPmu() const {
  CpuModel m = *this;
  m.name += " (no PMU)";
  for (CpuidLeaf& l : m.leaves) {
    if (l.function == 1) {
      l.ecx &= ~(kCpuid1EcxDtes64 | kCpuid1EcxDsCpl | kCpuid1EcxPdcm);
      l.edx &= ~kCpuid1EdxDs;
    } else if (l.function == 0xA) {
      l.eax = l.ebx = l.ecx = l.edx = 0;
    }
  }
  m.pmu = PmuModel{};
  m.pmu.misc_enable = (pmu.misc_enable & ~0x80ull) | (1ull << 11) | (1ull << 12);  // no perfmon, BTS/PEBS unavailable
  m.pmu.misc_enable_writable = pmu.misc_enable_writable;
  return m;
}

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

CpuidResult CpuModel::CpuidInState(uint32_t leaf, uint32_t subleaf, uint64_t apic_base, uint64_t cr4) const {
  CpuidResult r = Cpuid(leaf, subleaf, 0);
  if (leaf == 1) {
    if (!(apic_base & (1u << 11))) r.edx &= ~(1u << 9);
    if (r.ecx & (1u << 26)) r.ecx = (r.ecx & ~(1u << 27)) | ((cr4 & (1u << 18)) ? (1u << 27) : 0);
  }
  return r;
}

}  // namespace vbts::pmu
