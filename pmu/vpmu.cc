// vpmu.cc: the virtual PMU (pmu/vpmu.h). Every rule cites the Intel SDM vol.
// 3B section it implements; docs/pmu-model.md collects them, with what vbts
// reports where the SDM leaves the value open and what happens when the
// guest programs nonsense.
#include "pmu/vpmu.h"

#include <algorithm>
#include <bit>
#include <array>
#include <cstring>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/bits.h"
#include "base/status_macros.h"
#include "pmu/netburst.h"

namespace vbts::pmu {
namespace {

// Architectural MSRs (SDM vol. 4, table 2-2).
constexpr uint32_t kMsrPmc0 = 0xC1;
constexpr uint32_t kMsrPerfEvtSel0 = 0x186;
constexpr uint32_t kMsrMiscEnable = 0x1A0;
constexpr uint32_t kMsrLbrSelect = 0x1C8;
constexpr uint32_t kMsrDebugCtl = 0x1D9;
constexpr uint32_t kMsrLerTo = 0x1DE;
constexpr uint32_t kMsrFixedCtr0 = 0x309;
constexpr uint32_t kMsrPerfCapabilities = 0x345;
constexpr uint32_t kMsrFixedCtrCtrl = 0x38D;
constexpr uint32_t kMsrGlobalStatus = 0x38E;
constexpr uint32_t kMsrGlobalCtrl = 0x38F;
constexpr uint32_t kMsrGlobalOvfCtrl = 0x390;
constexpr uint32_t kMsrPebsEnable = 0x3F1;
constexpr uint32_t kMsrPebsDataCfg = 0x3F2;  // adaptive PEBS (SDM 18.9.2.3)
constexpr uint64_t kMiscPebsUnavailable = 1ull << 12;  // IA32_MISC_ENABLE bit 12 (read-only)
constexpr uint32_t kMsrPebsLdLat = 0x3F6;    // MSR_PEBS_LD_LAT_THRESHOLD: bits 15:0 (SDM vol. 4)
constexpr uint32_t kMsrOffcoreRsp0 = 0x1A6;  // MSR_OFFCORE_RSP_0, _1 at 1A7H

// The model's load latencies in core cycles, by the level that serves the
// load (docs/pmu-model.md, "Load latency and data source"): vbts has no
// timing model, so each level has one latency, the measured load-to-use
// latencies of a Skylake client core (L1D 4, L2 12, L3 44 cycles) and a
// round 200 cycles for DRAM.  Linux's default `perf mem` threshold (30)
// lets L3 hits and DRAM through.
enum DataLevel : uint8_t { kLevelNone = 0, kLevelL1 = 1, kLevelL2 = 2, kLevelLlc = 3, kLevelDram = 4 };
// Where a load's line came from: the L1D, else the L2/L3 model's outcome.
uint8_t LoadLevel(bool l1_hit, CacheModel::Outcome o) {
  return l1_hit ? kLevelL1 : !o.llc_reference ? kLevelL2 : !o.llc_miss ? kLevelLlc : kLevelDram;
}
constexpr uint16_t kLoadLatency[5] = {0, 4, 12, 44, 200};
constexpr uint32_t kMsrAPmc0 = 0x4C1;
constexpr uint32_t kMsrDsArea = 0x600;
// The intercepted ranges reserve room for the largest geometry of any model.
constexpr int kMaxGp = 8, kMaxFixed = 4, kMaxLbr = 32;

// IA32_DEBUGCTL (SDM 17.4.1, figure 17-3).
constexpr uint64_t kDbgLbr = 1u << 0;
constexpr uint64_t kDbgBtf = 1u << 1;
constexpr uint64_t kDbgTr = 1u << 6;
constexpr uint64_t kDbgBts = 1u << 7;
constexpr uint64_t kDbgBtint = 1u << 8;
constexpr uint64_t kDbgBtsOffOs = 1u << 9;
constexpr uint64_t kDbgBtsOffUsr = 1u << 10;
constexpr uint64_t kDbgFreezeLbrs = 1u << 11;
constexpr uint64_t kDbgFreezePerfmon = 1u << 12;

// IA32_PERFEVTSELx (SDM 18.2.1.1).
constexpr uint64_t kEvtUsr = 1u << 16;
constexpr uint64_t kEvtOs = 1u << 17;
constexpr uint64_t kEvtInt = 1u << 20;
constexpr uint64_t kEvtEn = 1u << 22;
constexpr uint64_t kEvtAdaptive = 1ull << 34;  // Adaptive_Record (SDM 18.9.2.3, models with PEBS_BASELINE)

// MSR_PEBS_DATA_CFG (SDM 18.9.2.3, the MSR_PEBS_DATA_CFG layout): the
// record groups after the basic group, and the LBR entry count minus one.
constexpr uint64_t kCfgMemInfo = 1u << 0, kCfgGprs = 1u << 1, kCfgXmms = 1u << 2, kCfgLbrs = 1u << 3;
constexpr uint64_t kPebsDataCfgValid = 0xFF00000Full;  // bits 3:0 and 31:24; the rest reserved (#GP)
// Group sizes in bytes (SDM 18.9.2.3, the tables of the record groups).
constexpr uint64_t kGroupBasic = 0x20, kGroupMemInfo = 0x20, kGroupGprs = 0x90, kGroupXmms = 0x100,
                   kLbrEntry = 0x18;

// IA32_PERF_GLOBAL_STATUS (SDM 18.2.2, 18.2.4): v4 freeze bits.
constexpr uint64_t kStatusLbrFrz = 1ull << 58;
constexpr uint64_t kStatusCtrFrz = 1ull << 59;

// MSR_LBR_SELECT (SDM 17.9.2, table 17-14): a set bit suppresses the class.
constexpr uint64_t kSelCplEq0 = 1u << 0, kSelCplNeq0 = 1u << 1, kSelJcc = 1u << 2, kSelNearRelCall = 1u << 3,
                   kSelNearIndCall = 1u << 4, kSelNearRet = 1u << 5, kSelNearIndJmp = 1u << 6,
                   kSelNearRelJmp = 1u << 7, kSelFarBranch = 1u << 8;
constexpr uint64_t kLbrSelectMask = 0x1FF;
// EN_CALLSTACK (SDM 17.9, table 17-13), on models with the LBR call stack.
constexpr uint64_t kSelEnCallstack = 1u << 9;


// A DS management field or BTS record field: 8 bytes in the 64-bit format,
// 4 in the 32-bit one (fixed-size copies: a variable-length memcpy of these
// was 3 % of a BTS-traced run).
inline uint64_t LoadField(const uint8_t* p, bool fmt64) {
  if (fmt64) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline void StoreField(uint8_t* p, uint64_t v, bool fmt64) {
  if (fmt64) {
    std::memcpy(p, &v, 8);
  } else {
    const uint32_t w = static_cast<uint32_t>(v);
    std::memcpy(p, &w, 4);
  }
}

// Sign-extends a linear address from bit 47 (the FROM/TO formats keep
// canonical addresses; SDM 17.4.8.1).
uint64_t Canonical(uint64_t a) { return (a & (1ull << 47)) ? (a | 0xFFFF000000000000ull) : (a & LowBits(48)); }


struct Counter {
  uint64_t value = 0;
  uint64_t evtsel = 0;  // GP counters
};

struct LbrEntry {
  uint64_t from = 0, to = 0, info = 0;
};

// A NetBurst counter with its CCCR (pmu/netburst.h).
struct NbCounter {
  uint64_t value = 0;  // 40 bits
  uint64_t cccr = 0;
  bool last_out = false;     // the threshold comparison's output at the last instruction (CCCR.EDGE)
  bool pmi_pending = false;  // overflowed: the next event counted raises the PMI (OVF_PMI)
};

// The BR_INST_RETIRED classes (pmu/cpu_model.h) of a retired instruction: 0
// for one that is no branch instruction.  A branch instruction that did not
// transfer control is a conditional one (Jcc, JCXZ, LOOPcc; an INTO that
// did not trap counts with them).
uint16_t BranchClasses(const Branch& b) {
  if (!b.branch_insn) return 0;
  constexpr uint16_t kAll = kBranchClassAll;
  switch (b.kind) {
    case BranchKind::kNone: return kAll | kBranchClassCondNotTaken;
    case BranchKind::kJcc: return kAll | kBranchClassCondTaken | kBranchClassNearTaken;
    case BranchKind::kJmp: return kAll | kBranchClassNearTaken;
    case BranchKind::kIndJmp: return kAll | kBranchClassNearTaken | kBranchClassIndirect;
    case BranchKind::kCall: return kAll | kBranchClassNearTaken | kBranchClassNearCall;
    case BranchKind::kIndCall: return kAll | kBranchClassNearTaken | kBranchClassNearCall | kBranchClassIndirect;
    case BranchKind::kRet: return kAll | kBranchClassNearTaken | kBranchClassNearReturn;
    default: return kAll | (IsFarBranch(b.kind) ? kBranchClassFar : 0);
  }
}

}  // namespace

struct VirtualPmu::State {
  State(const CpuModel& m, VirtualPmuOptions o) : model(m), pmu(m.pmu), options(o), cache(m.pmu.cache), l1d(CacheGeometry{m.pmu.l1d, {}, PairPrefetch::kNone}) {}
  const CpuModel& model;
  const PmuModel& pmu;
  VirtualPmuOptions options;

  uint64_t debugctl = 0;
  uint64_t ds_area = 0;
  uint64_t misc_enable = 0;
  uint64_t lbr_select = 0;
  uint64_t pebs_enable = 0;
  uint64_t pebs_armed = 0;  // PEBS-enabled counters that overflowed (GP i: bit i, fixed i: bit 32+i)
  uint64_t pebs_data_cfg = 0;  // MSR_PEBS_DATA_CFG (adaptive PEBS)
  uint64_t ld_lat_threshold = 0;  // MSR_PEBS_LD_LAT_THRESHOLD
  uint64_t offcore_rsp[2] = {0, 0};  // MSR_OFFCORE_RSP_0/1
  // Where the current instruction's data came from (ObserveDataAccess, while
  // WantsDataSource()): the slowest level of its loads, and whether it
  // stored and every store hit the L1D.  Taken by the instruction's
  // Observe, cleared at every observed boundary.
  uint8_t insn_load_level = kLevelNone;
  bool insn_stored = false, insn_store_l1_miss = false;
  uint64_t ler_from = 0, ler_to = 0;
  std::array<LbrEntry, kMaxLbr> lbr{};
  uint32_t tos = 0;
  uint64_t last_from = 0, last_to = 0;  // last branch recorded in the LBRs (for LER)
  bool have_last = false;
  std::array<Counter, kMaxGp> gp{};
  std::array<Counter, kMaxFixed> fixed{};
  uint64_t fixed_ctrl = 0;
  uint64_t global_ctrl = 0;
  uint64_t global_status = 0;
  std::array<NbCounter, netburst::kCounters> nb{};
  std::array<uint64_t, netburst::kMsrEscrLast - netburst::kMsrEscrFirst + 1> escr{};
  uint64_t nb_pebs_enable = 0, nb_matrix_vert = 0;  // MSR_PEBS_ENABLE, MSR_PEBS_MATRIX_VERT (NetBurst)
  // What the current instruction's data accesses met, for replay tagging
  // (ObserveDataAccess while NbWantsAccesses; taken by its Observe): a load
  // that missed the L1D, one that missed the L2, a load and a store that
  // spanned two cache lines.
  bool nb_load_l1_miss = false, nb_load_l2_miss = false, nb_split_load = false, nb_split_store = false;

  CacheModel cache;  // LLC Reference/Misses (docs/pmu-model.md)
  CacheModel l1d;    // L1D.REPLACEMENT: the L1D alone (its "inner" level)

  std::vector<std::string> warnings;
  std::set<std::string> warned;
  PmuStats stats;

  void Warn(std::string w) {
    if (warned.size() < 64 && warned.insert(w).second) warnings.push_back(std::move(w));
  }

  // --- MSR geometry
  bool IsLbrFrom(uint32_t msr, int* i) const {
    if (!pmu.lbr.entries || msr < pmu.lbr.from_base || msr >= pmu.lbr.from_base + pmu.lbr.entries) return false;
    *i = msr - pmu.lbr.from_base;
    return true;
  }
  bool IsLbrTo(uint32_t msr, int* i) const {
    if (!pmu.lbr.entries || pmu.lbr.packed || msr < pmu.lbr.to_base || msr >= pmu.lbr.to_base + pmu.lbr.entries)
      return false;
    *i = msr - pmu.lbr.to_base;
    return true;
  }
  bool IsLbrInfo(uint32_t msr, int* i) const {
    if (!pmu.lbr.entries || !pmu.lbr.info_base || msr < pmu.lbr.info_base ||
        msr >= pmu.lbr.info_base + pmu.lbr.entries)
      return false;
    *i = msr - pmu.lbr.info_base;
    return true;
  }
  bool v2() const { return pmu.perfmon_version >= 2; }
  // PEBS (SDM 18.4.4, 18.6.1.1): DS, PDCM and MISC_ENABLE bit 12 clear; the
  // record format is PERF_CAPABILITIES[11:8].
  bool pebs() const { return pmu.ds && pmu.pdcm && !(pmu.misc_enable & (1ull << 12)); }
  int pebs_format() const { return static_cast<int>((pmu.perf_capabilities >> 8) & 0xF); }
  // Adaptive PEBS: record format 4 with PERF_CAPABILITIES.PEBS_BASELINE
  // (SDM 18.9.2): MSR_PEBS_DATA_CFG, the Adaptive_Record bits.
  bool adaptive() const { return pebs() && pebs_format() >= 4 && (pmu.perf_capabilities & kPerfCapPebsBaseline); }
  // Counters with PEBS: PMC0-3 up to format 3; from format 4 (extended PEBS,
  // SDM 18.9.2) every GP counter and every fixed counter.
  int PebsGp() const { return pebs_format() >= 4 ? pmu.gp_counters : std::min(pmu.gp_counters, 4); }
  int PebsFixed() const { return pebs_format() >= 4 ? pmu.fixed_counters : 0; }
  uint64_t PebsEnableMask() const {
    if (pebs_format() >= 4) return LowBits(PebsGp()) | (LowBits(PebsFixed()) << 32);  // PEBS_EN_PMCn, PEBS_EN_FIXEDm (32+m)
    const uint64_t c = LowBits(std::min(pmu.gp_counters, 4));
    return c | (c << 32);  // PEBS on PMC0-3, load latency on PMC0-3 (SDM vol. 4, MSR_PEBS_ENABLE)
  }
  // IA32_FIXED_CTR_CTRL: 4 bits per counter; with adaptive PEBS also the
  // per-counter Adaptive_Record bit 32+4i (SDM 18.9.2.3).
  uint64_t FixedCtrlMask() const {
    uint64_t m = LowBits(4 * pmu.fixed_counters);
    if (adaptive())
      for (int i = 0; i < pmu.fixed_counters; i++) m |= 1ull << (32 + 4 * i);
    return m;
  }
  bool full_width_writes() const { return pmu.pdcm && (pmu.perf_capabilities & kPerfCapFullWidthWrite); }
  uint64_t GlobalCtrlMask() const {
    return LowBits(pmu.gp_counters) | (LowBits(pmu.fixed_counters) << 32);
  }
  uint64_t GlobalStatusMask() const {
    uint64_t m = GlobalCtrlMask() | (1ull << 62) | (1ull << 63);
    if (pmu.perfmon_version >= 4) m |= kStatusLbrFrz | kStatusCtrFrz;
    return m;
  }

  // --- state machine
  bool CounterEnabled(int i, bool fixed_counter) const {
    if (v2() && !(global_ctrl & (1ull << (fixed_counter ? 32 + i : i)))) return false;
    if (fixed_counter) return ((fixed_ctrl >> (4 * i)) & 3) != 0;
    return (gp[i].evtsel & kEvtEn) != 0;
  }
  // The counters that count every non-branch instruction (instructions,
  // cycles, slots: GpIncrement(sel, plain) = 1) at CPL 0 ([0]) and above
  // ([1]), as bit masks: what SequentialLimit and CountSequential need at
  // every reported block.  Kept until GLOBAL_CTRL, an event select or
  // FIXED_CTR_CTRL changes (PlainChanged: every WRMSR, the legacy freeze).
  void PlainChanged() { plain_valid_ = false; }
  // Also the GP counters every branch instruction increments (branch_gp_:
  // GpIncrement depends on nothing else of the instruction, and is 0 or 1),
  // and those of a BR_INST_RETIRED umask that selects some branches
  // (branch_sel_gp_), whose increment depends on the branch's class.
  void PlainMasks() const {
    if (plain_valid_) return;
    Branch plain, branch;
    branch.branch_insn = true;
    llc_gp_ = l1d_gp_ = offcore_gp_ = 0;
    for (int i = 0; i < pmu.gp_counters; i++) {
      if (!CounterEnabled(i, false)) continue;
      const uint64_t sel = gp[i].evtsel;
      if (IsLlcReference(sel) || IsLlcMiss(sel)) llc_gp_ |= 1u << i;
      if (IsL1dReplacement(sel)) l1d_gp_ |= 1u << i;
      if (OffcoreMsrOf(sel) >= 0) offcore_gp_ |= 1u << i;
    }
    for (int level = 0; level < 2; level++) {
      plain_gp_[level] = plain_fixed_[level] = branch_gp_[level] = load_gp_[level] = store_gp_[level] = 0;
      ldlat_gp_[level] = branch_sel_gp_[level] = 0;
      for (int i = 0; i < pmu.gp_counters; i++) {
        const uint64_t sel = gp[i].evtsel;
        if (!CounterEnabled(i, false) || !(sel & (level == 0 ? kEvtOs : kEvtUsr))) continue;
        if (GpIncrement(sel, plain)) plain_gp_[level] |= 1u << i;
        if (SelectsBranches(sel)) branch_sel_gp_[level] |= 1u << i;
        else if (GpIncrement(sel, branch)) branch_gp_[level] |= 1u << i;
        if (IsMemEvent(sel, pmu.mem_loads_event)) load_gp_[level] |= 1u << i;
        if (IsMemEvent(sel, pmu.mem_stores_event)) store_gp_[level] |= 1u << i;
        if (IsMemEvent(sel, pmu.load_latency_event)) ldlat_gp_[level] |= 1u << i;
      }
      for (int i = 0; i < pmu.fixed_counters; i++) {
        if (CounterEnabled(i, true) && (((fixed_ctrl >> (4 * i)) & 0xF) & (level == 0 ? 1 : 2)))
          plain_fixed_[level] |= 1u << i;
      }
    }
    plain_valid_ = true;
  }
  mutable bool plain_valid_ = false;
  mutable uint32_t plain_gp_[2] = {0, 0}, plain_fixed_[2] = {0, 0}, branch_gp_[2] = {0, 0};
  mutable uint32_t branch_sel_gp_[2] = {0, 0};
  // The counters that count retired loads / stores (docs/pmu-model.md,
  // "Retired loads and stores"), per level as above.
  mutable uint32_t load_gp_[2] = {0, 0}, store_gp_[2] = {0, 0};
  // ... and those that count loads above the latency threshold.
  mutable uint32_t ldlat_gp_[2] = {0, 0};
  // The enabled counters of the events the data accesses drive, at any CPL
  // (CountsLlc, CountsL1d, CountsOffcore: asked at every access).
  mutable uint32_t llc_gp_ = 0, l1d_gp_ = 0, offcore_gp_ = 0;
  // An event select of the model's retired-load or -store event (`event`:
  // event | umask << 8, 0 for none), without CMASK (vbts's cycle is one
  // instruction: a CMASK of 1 would count the same, and INV with it the
  // opposite; the other values never; like other events vbts does not
  // count, such a select counts nothing).
  static bool IsMemEvent(uint64_t sel, uint16_t event) {
    return event != 0 && (sel & 0xFFFF) == event && ((sel >> 24) & 0xFF) == 0;
  }
  bool CountsMemory() const {
    PlainMasks();
    return (load_gp_[0] | load_gp_[1] | store_gp_[0] | store_gp_[1] | ldlat_gp_[0] | ldlat_gp_[1]) != 0 ||
           NbCountsTagged();
  }
  // Where data comes from matters to a load-latency counter (what it counts,
  // and its PEBS record's data source and latency) and to a PEBS-enabled
  // retired-stores counter (the record's L1D-hit bit): the caches then see
  // every data access.
  bool CountsLoadLatency() const {
    PlainMasks();
    return (ldlat_gp_[0] | ldlat_gp_[1]) != 0;
  }
  // A load served from `level` is above MSR_PEBS_LD_LAT_THRESHOLD (SDM
  // 18.3.4.4.2: "loads with latencies greater than this value are eligible
  // for counting").
  bool LatencyAbove(uint8_t level) const {
    return level != kLevelNone && kLoadLatency[level] > (ld_lat_threshold & 0xFFFF);
  }
  bool WantsDataSource() const {
    return CountsLoadLatency() || (((store_gp_[0] | store_gp_[1]) & pebs_enable) != 0);
  }
  // The PEBS data-source field of a load served from `level` (SDM vol. 3B,
  // the load-latency data-source encodings; Linux's pebs_data_source[]).
  uint64_t LoadSource(uint8_t level) const {
    switch (level) {
      case kLevelL1: return 0x01;   // L1D hit
      case kLevelL2: return 0x03;   // L2 hit
      case kLevelLlc: return 0x04;  // L3 hit, no snoop needed
      case kLevelDram: return pmu.dram_source;
      default: return 0;
    }
  }

  // Every enabled counter adds the same for a taken branch as for another
  // instruction (fixed counters always do): VirtualPmu::BranchAgnostic.
  bool CountersBranchAgnostic() const;
  bool AnyCounterEnabled() const {
    for (int i = 0; i < pmu.gp_counters; i++)
      if (CounterEnabled(i, false)) return true;
    for (int i = 0; i < pmu.fixed_counters; i++)
      if (CounterEnabled(i, true)) return true;
    for (int i = 0; i < nb_count(); i++)
      if (NbCounts(i)) return true;
    return false;
  }

  // --- NetBurst counters (SDM vol. 3B, the NetBurst performance-monitoring
  // section; docs/pmu-model.md, "NetBurst performance counters").
  bool nb_on() const { return pmu.netburst_perfmon; }
  // How many NetBurst counters to look at: none on the other models (the
  // loops over them run at every reported boundary).
  int nb_count() const { return nb_on() ? netburst::kCounters : 0; }
  // CCCR.Enable, with the active-thread field (bits 17:16, "must be set to
  // 11B" on a processor without HT) at 11B.
  bool NbEnabled(int i) const {
    const uint64_t c = nb[i].cccr;
    return nb_on() && (c & netburst::kCccrEnable) && (c & netburst::kCccrActiveThread) == netburst::kCccrActiveThread;
  }
  // The ESCR counter i takes its events from (CCCR bits 15:13), nullptr if none.
  const netburst::Escr* NbEscr(int i) const {
    return netburst::EscrFor(i, static_cast<int>((nb[i].cccr >> netburst::kCccrEscrSelectShift) & 7));
  }
  // An ESCR's value and its fields (pmu/netburst.h): event select, event
  // mask, and whether its T0_OS/T0_USR let it count at `cpl`.
  uint64_t EscrAt(uint32_t msr) const { return escr[msr - netburst::kMsrEscrFirst]; }
  static uint32_t EscrEvent(uint64_t v) { return (v >> netburst::kEscrEventSelectShift) & 0x3F; }
  static uint32_t EscrMask(uint64_t v) { return (v >> netburst::kEscrEventMaskShift) & 0xFFFF; }
  static bool EscrAtCpl(uint64_t v, uint8_t cpl) { return v & (cpl == 0 ? netburst::kEscrOs : netburst::kEscrUsr); }
  // Events counter i's ESCR selects in one retired instruction `b` at CPL
  // `cpl`, after the ESCR's T0_OS/T0_USR qualification; -1 for an event vbts
  // does not count (the counter stays as it is).  instr_retired (02H on
  // CRU_ESCR0/1): NBOGUSNTAG counts every retired instruction none of whose
  // µops the front end tagged, NBOGUSTAG the others; vbts has no speculation
  // (nothing bogus).  branch_retired (06H on CRU_ESCR2/3): every branch
  // instruction, taken (MMTP) or not taken (MMNP); vbts predicts every
  // branch, so the mispredicted bits (MMNM, MMTM) count nothing.
  // front_end_event and replay_event (08H, 09H on CRU_ESCR2/3): NbTaggedUops,
  // NbReplayUops.
  int NbEvents(int i, const Branch& b, uint8_t cpl) const {
    const netburst::Escr* e = NbEscr(i);
    if (!e) return -1;
    const uint64_t v = EscrAt(e->msr);
    const uint32_t event = EscrEvent(v);
    const uint32_t mask = EscrMask(v);
    int n;
    if (e->unit == netburst::Unit::kCru01 && event == netburst::kEventInstrRetired) {
      const bool tagged = NbTaggedUops(b, cpl) > 0;
      n = (mask & (tagged ? netburst::kMaskNbogusTag : netburst::kMaskNbogusNtag)) ? 1 : 0;
    } else if (e->unit == netburst::Unit::kCru23 && event == netburst::kEventBranchRetired) {
      n = b.branch_insn && (mask & (b.taken() ? netburst::kMaskMmtp : netburst::kMaskMmnp)) ? 1 : 0;
    } else if (e->unit == netburst::Unit::kCru23 && event == netburst::kEventFrontEnd) {
      n = (mask & netburst::kMaskNbogus) ? NbTaggedUops(b, cpl) : 0;
    } else if (e->unit == netburst::Unit::kCru23 && event == netburst::kEventReplay) {
      n = (mask & netburst::kMaskNbogus) ? NbReplayUops(b, cpl) : 0;
    } else {
      return -1;
    }
    if (!EscrAtCpl(v, cpl)) n = 0;
    return n;
  }
  // Counter i is enabled and counts an event vbts models.
  bool NbCounts(int i) const { return NbEnabled(i) && NbEvents(i, Branch{}, 0) >= 0; }
  // The µops of `b` that the front-end tagging mechanism tagged at CPL `cpl`
  // (docs/pmu-model.md, "NetBurst PEBS"): uop_type (02H) on MSR_RAT_ESCR0 or
  // 1, qualified by that ESCR's T0_OS/T0_USR, tags the instruction's load µop
  // (TAGLOADS) and its store µop (TAGSTORES): vbts's instruction has at most
  // one of each (Branch::mem, the rule of the retired-load and -store
  // events).  Not taggable (SDM vol. 3B, "At-Retirement Counting": "I/O,
  // uncacheable and locked accesses, returns, and far transfers"): a locked
  // or I/O instruction (Branch::mem bit 2), RET, and every far transfer.
  static bool Untaggable(const Branch& b) {
    return (b.mem & kMemUntaggable) || b.kind == BranchKind::kRet || IsFarBranch(b.kind);
  }
  int NbTaggedUops(const Branch& b, uint8_t cpl) const {
    if (Untaggable(b)) return 0;
    uint32_t tags = 0;
    for (const uint32_t msr : {netburst::kMsrRatEscr0, netburst::kMsrRatEscr1}) {
      const uint64_t v = EscrAt(msr);
      if (EscrEvent(v) == netburst::kEventUopType && EscrAtCpl(v, cpl)) tags |= EscrMask(v);
    }
    return ((tags & netburst::kMaskTagLoads) && (b.mem & 1) ? 1 : 0) +
           ((tags & netburst::kMaskTagStores) && (b.mem & 2) ? 1 : 0);
  }
  // The µops of `b` the replay tagging mechanism tagged (docs/pmu-model.md,
  // "NetBurst PEBS"): with MSR_PEBS_ENABLE.UOP_TAG, the instruction's load
  // µop (MATRIX_VERT bit 0) when its data accesses missed the L1D (metric
  // 1stL_cache_load_miss_retired, PEBS_ENABLE bit 0) or the L2 (2ndL, bit 1)
  // in the model's caches, or spanned two cache lines with load_port_replay
  // SPLIT_LD on a SAAT ESCR qualified at `cpl` (split_load_retired, bit 10);
  // its store µop (VERT bit 1) when it spanned two lines with
  // store_port_replay SPLIT_ST (split_store_retired, bit 10).  DTLB misses
  // (bit 2: vbts models no TLB), MOB replays (bit 9: no store forwarding) and
  // mispredicted branches (bits 15-16: every branch is predicted) tag
  // nothing; neither do untaggable instructions (NbTaggedUops).
  bool NbSaat(uint32_t event, uint8_t cpl) const {
    for (const uint32_t msr : {netburst::kMsrSaatEscr0, netburst::kMsrSaatEscr1}) {
      const uint64_t v = EscrAt(msr);
      if (EscrEvent(v) == event && (EscrMask(v) & netburst::kMaskSplitLdSt) && EscrAtCpl(v, cpl)) return true;
    }
    return false;
  }
  int NbReplayUops(const Branch& b, uint8_t cpl) const {
    const uint64_t pe = nb_pebs_enable;
    if (!(pe & netburst::kPebsEnableUopTag)) return 0;
    if (Untaggable(b)) return 0;
    const bool load = (nb_matrix_vert & netburst::kVertLoads) && (b.mem & 1) &&
                      (((pe & netburst::kReplay1stL) && nb_load_l1_miss) ||
                       ((pe & netburst::kReplay2ndL) && nb_load_l2_miss) ||
                       ((pe & netburst::kReplaySplit) && nb_split_load &&
                        NbSaat(netburst::kEventLoadPortReplay, cpl)));
    const bool store = (nb_matrix_vert & netburst::kVertStores) && (b.mem & 2) && (pe & netburst::kReplaySplit) &&
                       nb_split_store && NbSaat(netburst::kEventStorePortReplay, cpl);
    return (load ? 1 : 0) + (store ? 1 : 0);
  }
  // A counter counts replay_event with a metric the data accesses decide:
  // the engine reports them (WantsDataAccesses), as observed accesses of
  // each instruction.
  bool NbWantsAccesses() const {
    if (!nb_on() || !(nb_pebs_enable & netburst::kPebsEnableUopTag) ||
        !(nb_pebs_enable & (netburst::kReplay1stL | netburst::kReplay2ndL | netburst::kReplaySplit)))
      return false;
    for (int i = 0; i < nb_count(); i++)
      if (NbCountsEvent(i, netburst::kEventReplay)) return true;
    return false;
  }
  // Counter i is enabled and its ESCR, one of `unit`'s, selects `event`.
  bool NbCountsEvent(int i, uint32_t event, netburst::Unit unit = netburst::Unit::kCru23) const {
    if (!NbEnabled(i)) return false;
    const netburst::Escr* e = NbEscr(i);
    return e && e->unit == unit && EscrEvent(EscrAt(e->msr)) == event;
  }
  // Some RAT ESCR tags µops (uop_type with TAGLOADS or TAGSTORES).
  bool NbTagging() const {
    for (const uint32_t msr : {netburst::kMsrRatEscr0, netburst::kMsrRatEscr1}) {
      const uint64_t v = EscrAt(msr);
      if (EscrEvent(v) == netburst::kEventUopType &&
          (EscrMask(v) & (netburst::kMaskTagLoads | netburst::kMaskTagStores)))
        return true;
    }
    return false;
  }
  // Counter i counts front_end_event: its count depends on the instruction's
  // memory operands, which bulk counting does not see (SequentialLimit).
  bool NbFrontEnd(int i) const { return NbCountsEvent(i, netburst::kEventFrontEnd); }
  // Counter i counts an event PEBS supports (of those vbts counts).
  bool NbPebsEvent(int i) const { return NbFrontEnd(i) || NbCountsEvent(i, netburst::kEventReplay); }
  // Some counter's count depends on the front end's tags: front_end_event,
  // or instr_retired while a RAT ESCR tags (NBOGUSTAG/NBOGUSNTAG then tell
  // instructions with a load or store from the others).
  bool NbCountsTagged() const {
    if (!nb_on()) return false;
    const bool tagging = NbTagging();
    for (int i = 0; i < nb_count(); i++) {
      if (NbPebsEvent(i)) return true;  // front_end_event, replay_event
      if (tagging && NbCountsEvent(i, netburst::kEventInstrRetired, netburst::Unit::kCru01)) return true;
    }
    return false;
  }
  // NetBurst PEBS (docs/pmu-model.md, "NetBurst PEBS"): DS with MISC_ENABLE's
  // PEBS-unavailable bit clear; on with MSR_PEBS_ENABLE.ENABLE_PEBS_MY_THR and
  // MSR_IQ_COUNTER4 counting an event that supports PEBS (of those vbts
  // counts, front_end_event and replay_event).
  bool nb_pebs() const { return nb_on() && pmu.ds && !(pmu.misc_enable & kMiscPebsUnavailable); }
  bool NbPebsOn() const {
    return nb_pebs() && (nb_pebs_enable & netburst::kPebsEnableMyThr) && NbPebsEvent(netburst::kPebsCounter);
  }
  // The CCCR's filtering of `n` events in one instruction (vbts's cycle):
  // with Compare, 1 when n > threshold (n <= threshold with Complement),
  // with Edge only on the comparison's false-to-true transition.
  static uint64_t NbFilter(uint64_t cccr, int n, bool& last_out) {
    if (!(cccr & netburst::kCccrCompare)) return static_cast<uint64_t>(n);
    const int thr = static_cast<int>((cccr >> netburst::kCccrThresholdShift) & 0xF);
    const bool out = (cccr & netburst::kCccrComplement) ? n <= thr : n > thr;
    const bool inc = (cccr & netburst::kCccrEdge) ? out && !last_out : out;
    last_out = out;
    return inc ? 1 : 0;
  }
  // Adds `inc` to counter i: a wrap past 2^40 - 1 (or any increment with
  // FORCE_OVF) sets CCCR.OVF and arms the PMI, which the next event counted
  // raises when OVF_PMI is set; an overflow enables the counter whose
  // CASCADE names this one as its alternate (returned in `cascade`).
  bool NbAdd(int i, uint64_t inc, bool& pmi, uint32_t& cascade) {
    if (!inc) return false;
    NbCounter& c = nb[i];
    if (c.pmi_pending) {
      c.pmi_pending = false;
      if (c.cccr & netburst::kCccrOvfPmi) pmi = true;
    }
    const uint64_t m = LowBits(netburst::kCounterWidth);
    const uint64_t next = (c.value + inc) & m;
    const bool ovf = next < c.value || (c.cccr & netburst::kCccrForceOvf);
    c.value = next;
    if (ovf) {
      c.cccr |= netburst::kCccrOvf;
      c.pmi_pending = true;
      if (i < 16) cascade |= 1u << (i ^ 2);
    }
    return ovf;
  }
  void NbCascade(uint32_t cascade) {
    for (int j = 0; j < netburst::kCounters; j++)
      if ((cascade & (1u << j)) && netburst::CascadeSource(j) >= 0 && (nb[j].cccr & netburst::kCccrCascade))
        nb[j].cccr |= netburst::kCccrEnable;
  }
  // Returns true when MSR_IQ_COUNTER4 overflowed with PEBS on: `b` is the
  // instruction whose record the assist writes (NbPebsAssist).
  bool NbCountInstruction(const Branch& b, bool& pmi) {
    uint32_t cascade = 0;
    bool assist = false;
    const bool pebs = NbPebsOn();
    for (int i = 0; i < nb_count(); i++) {
      if (!NbEnabled(i)) continue;
      const int n = NbEvents(i, b, b.cpl_from);
      if (n < 0) continue;
      if (NbAdd(i, NbFilter(nb[i].cccr, n, nb[i].last_out), pmi, cascade) && pebs && i == netburst::kPebsCounter)
        assist = true;
    }
    NbCascade(cascade);
    return assist;
  }
  // The NetBurst PEBS assist for `b`, whose event overflowed MSR_IQ_COUNTER4
  // (SDM vol. 3B, NetBurst "Precise Event-Based Sampling (PEBS)" and the DS
  // save area's "PEBS Record Format" figure): "After the counter overflows,
  // the processor copies the current state of the general-purpose and
  // EFLAGS registers and instruction pointer into a record ... then resets
  // the count in the performance counter and restarts the counter";
  // "Nominally the register values are those at the beginning of the
  // instruction that caused the event" and the linear IP is that
  // instruction's.  The DS management area's PEBS fields (32-bit format:
  // base 10H, index 14H, absolute maximum 18H, threshold 1CH, the 40-bit
  // counter reset at 20H) are checked as for the other models' PEBS; the PMI
  // comes when the index reaches the threshold.
  absl::Status NbPebsAssist(const Branch& b, LinearMemory& mem, const GuestRegs* before, PmuEffects& fx) {
    const bool fmt64 = pmu.dtes64 || b.ia32e;
    const uint64_t fw = fmt64 ? 8 : 4;
    const uint64_t rec = fmt64 ? 18 * 8 : netburst::kPebsRecord32;  // 64-bit: R8-R15 follow ESP
    uint8_t raw[0x48] = {};
    const std::optional<PebsBuffer> buf = ReadPebsBuffer(mem, raw, 8 * fw + 8, fmt64, rec);  // through the counter reset
    if (!buf) return absl::OkStatus();
    const uint64_t index = buf->index, threshold = buf->threshold;
    uint64_t reset;
    std::memcpy(&reset, raw + 8 * fw, 8);
    auto drop = [&](std::string why) {
      DropPebs(std::move(why));
      return absl::OkStatus();
    };
    if (!before) return drop("the registers the instruction began with were not captured (a vbts bug)");
    Access acc;
    acc.implicit = true;
    static constexpr int kOrder[8] = {0, 3, 1, 2, 6, 7, 5, 4};  // EAX EBX ECX EDX ESI EDI EBP ESP
    uint8_t r[18 * 8] = {};
    StoreField(r, before->rflags, fmt64);
    StoreField(r + fw, fmt64 ? b.from : (b.from & 0xFFFFFFFFull), fmt64);
    for (int k = 0; k < 8; k++) StoreField(r + (2 + k) * fw, before->gpr[kOrder[k]], fmt64);
    if (fmt64)
      for (int k = 0; k < 8; k++) StoreField(r + (10 + k) * fw, before->gpr[8 + k], fmt64);
    acc.write = true;
    absl::StatusOr<AccessFault> wf = mem.Write(Gva(index), absl::MakeConstSpan(r, rec), acc);
    if (!wf.ok() || !wf->ok()) return drop(absl::StrFormat("the record at 0x%x cannot be written", index));
    const uint64_t next = index + rec;
    uint8_t ni[8];
    StoreField(ni, next, fmt64);
    (void)mem.Write(Gva(ds_area + 5 * fw), absl::MakeConstSpan(ni, fw), acc);
    stats.pebs_records++;
    nb[netburst::kPebsCounter].value = reset & LowBits(netburst::kCounterWidth);
    if (next >= threshold) RequestPmi(fx);
    return absl::OkStatus();
  }
  bool BtsOn() const { return pmu.ds && (debugctl & kDbgTr) && (debugctl & kDbgBts); }

  // Requests a PMI and applies the freeze controls (SDM 17.4.7, 18.2.4.2:
  // legacy freeze clears DEBUGCTL.LBR / GLOBAL_CTRL; v4 sets LBR_FRZ/CTR_FRZ).
  void RequestPmi(PmuEffects& fx) {
    fx.pmi = true;
    RequestPmi();
  }
  void RequestPmi() {
    stats.pmis++;
    if (debugctl & kDbgFreezeLbrs) {
      if (pmu.perfmon_version >= 4) global_status |= kStatusLbrFrz;
      else debugctl &= ~kDbgLbr;
    }
    if (debugctl & kDbgFreezePerfmon) {
      if (pmu.perfmon_version >= 4) global_status |= kStatusCtrFrz;
      else global_ctrl = 0;
      PlainChanged();
    }
  }

  // The architectural LLC events (SDM 18.2.1.2, table 18-1): counted per
  // data access by CountDataAccess, not per instruction.
  static bool IsLlcReference(uint64_t evtsel) { return (evtsel & 0xFFFF) == 0x4F2E && !((evtsel >> 24) & 0xFF); }
  static bool IsLlcMiss(uint64_t evtsel) { return (evtsel & 0xFFFF) == 0x412E && !((evtsel >> 24) & 0xFF); }
  bool CountsLlc() const {
    PlainMasks();
    return llc_gp_ != 0;
  }
  // L1D.REPLACEMENT (51H/01H) on the models with an L1D geometry, without
  // CMASK: counted per line an access brings into the L1D.
  bool IsL1dReplacement(uint64_t evtsel) const {
    return pmu.l1d.sets != 0 && (evtsel & 0xFFFF) == 0x0151 && !((evtsel >> 24) & 0xFF);
  }
  bool CountsL1d() const {
    PlainMasks();
    return l1d_gp_ != 0;
  }
  // OFFCORE_RESPONSE_0 (B7H/01H) and _1 (BBH/01H), without CMASK: which of
  // MSR_OFFCORE_RSP_0/1 the select uses, or -1.
  int OffcoreMsrOf(uint64_t evtsel) const {
    if (pmu.offcore == PmuModel::OffcoreLayout::kNone || ((evtsel >> 24) & 0xFF)) return -1;
    if ((evtsel & 0xFFFF) == 0x01B7) return 0;
    if ((evtsel & 0xFFFF) == 0x01BB) return 1;
    return -1;
  }
  bool CountsOffcore() const {
    PlainMasks();
    return offcore_gp_ != 0;
  }
  // Whether a demand request that left the core (an access that missed the
  // model's L2) matches an MSR_OFFCORE_RSP value (docs/pmu-model.md,
  // "Offcore responses"): its request type (a load is DMND_DATA_RD, bit 0; a
  // store DMND_RFO, bit 1) and its response, which for the model's one core
  // is an L3 hit that needed no snoop or a miss served by local DRAM.
  bool OffcoreMatches(uint64_t rsp, bool store, bool llc_miss) const {
    if (!(rsp & (store ? 2 : 1))) return false;
    if (pmu.offcore == PmuModel::OffcoreLayout::kNehalem)
      return rsp & (llc_miss ? 1ull << 14 : 1ull << 8);  // LOCAL_DRAM : UNCORE_HIT
    if (rsp & (1ull << 16)) return true;  // ANY_RESPONSE
    const uint64_t supplier = llc_miss ? 1ull << 26 : 1ull << 19;  // L3_MISS_LOCAL_DRAM : L3_HIT_E
    return (rsp & supplier) && (rsp & (1ull << 32));  // and SNOOP_NOT_NEEDED
  }

  // The branch classes a BR_INST_RETIRED umask counts (pmu/cpu_model.h):
  // 00H every branch instruction (the architectural event), the model's
  // other umasks from its table, any other umask nothing.
  uint16_t BranchUmaskClasses(uint32_t umask) const {
    if (umask == 0) return kBranchClassAll;
    for (const PmuModel::BranchUmask& u : pmu.branch_umasks)
      if (u.umask == umask) return u.classes;
    return 0;
  }
  // An event select of BR_INST_RETIRED with a umask that counts some branch
  // instructions and not others.
  bool SelectsBranches(uint64_t evtsel) const {
    const uint32_t event = evtsel & 0xFF;
    if (pmu.branch_taken_event && event == pmu.branch_taken_event) return true;
    return event == 0xC4 && !(BranchUmaskClasses((evtsel >> 8) & 0xFF) & kBranchClassAll);
  }
  // What an event select counts for one retired instruction (SDM 18.2.1.2,
  // table 18-1; docs/pmu-model.md lists the events vbts implements).
  uint64_t GpIncrement(uint64_t evtsel, const Branch& b) const {
    const uint32_t event = evtsel & 0xFF, umask = (evtsel >> 8) & 0xFF;
    uint64_t n = 0;
    if (event == 0xC0 && (umask == 0 || umask == 1)) n = 1;                   // instructions retired (01H: INST_RETIRED.ALL, PEBS)
    else if (event == 0xC4) n = (BranchClasses(b) & BranchUmaskClasses(umask)) ? 1 : 0;  // branch instructions retired
    else if (pmu.branch_taken_event && event == pmu.branch_taken_event && umask == 0)  // P6's taken branches retired
      n = (BranchClasses(b) & (kBranchClassNearTaken | kBranchClassFar)) ? 1 : 0;
    else if (event == 0x3C && (umask == 0 || umask == 1)) n = 1;             // core/reference cycles: 1 per instruction
    else if (event == 0xA4 && umask == 1) n = 1;  // TOPDOWN.SLOTS (arch event 7, CPUID.0AH:EAX[31:24] = 8): as fixed counter 3
    // CMASK (bits 31:24, SDM 18.2.1.1): when nonzero the counter counts the
    // cycles in which the event occurred at least CMASK times, or (INV, bit
    // 23) fewer times.  vbts's cycle is one instruction, in which an event
    // occurs 0 or 1 times.
    if (const uint64_t cmask = (evtsel >> 24) & 0xFF) {
      const bool inv = (evtsel >> 23) & 1;
      if (event != 0xC0 && event != 0xC4 && event != 0x3C && event != 0xA4) return 0;  // an event vbts does not count
      return (n >= cmask) != inv ? 1 : 0;
    }
    return n;
  }

  // Adds `inc` to GP counter i; true when it wrapped past its width, which
  // sets the counter's GLOBAL_STATUS bit (SDM 18.2.1.1, 18.2.2).
  bool AddToGp(int i, uint64_t inc) {
    const uint64_t next = (gp[i].value + inc) & LowBits(pmu.gp_width);
    const bool wrapped = next < gp[i].value;
    if (wrapped) global_status |= 1ull << i;
    gp[i].value = next;
    return wrapped;
  }
  // One event of GP counter i, counted at its instruction: true when it
  // wrapped the counter and the select asks for a PMI (INT).  A PEBS-enabled
  // counter's wrap arms PEBS; the next event of the counter causes the
  // assist (SDM 18.6.1.1).
  bool AddGpEvent(int i) {
    if (!AddToGp(i, 1)) return false;
    if (pebs() && (pebs_enable & (1ull << i)) && i < PebsGp()) pebs_armed |= 1ull << i;
    return (gp[i].evtsel & kEvtInt) != 0;
  }

  absl::Status CountInstruction(const Branch& b, LinearMemory& mem, const GuestRegs* after, const GuestRegs* before,
                                PmuEffects& fx) {
    if (pmu.perfmon_version >= 4 && (global_status & kStatusCtrFrz)) return absl::OkStatus();
    const bool ring0 = b.cpl_from == 0;
    bool overflow_pmi = false;
    uint64_t assist = 0;  // armed PEBS counters this instruction is the next event of
    PlainMasks();
    const int level = ring0 ? 0 : 1;
    // The enabled GP counters whose event this instruction is, at its CPL
    // (each counts it once: GpIncrement is 0 or 1).
    uint32_t counting = b.branch_insn ? branch_gp_[level] : plain_gp_[level];
    if (b.branch_insn) {
      for (uint32_t m = branch_sel_gp_[level]; m; m &= m - 1)
        if (GpIncrement(gp[std::countr_zero(m)].evtsel, b)) counting |= m & -m;
    }
    if (b.mem & 1) counting |= load_gp_[level];
    if (b.mem & 2) counting |= store_gp_[level];
    // The load-latency event: an instruction whose slowest load took longer
    // than the threshold (SDM 18.3.4.4.2: "loads with latencies greater than
    // this value are eligible for counting").
    if ((b.mem & 1) && LatencyAbove(insn_load_level)) counting |= ldlat_gp_[level];
    for (uint32_t m = counting; m; m &= m - 1) {
      const int i = std::countr_zero(m);
      if (pebs_armed & (1ull << i)) assist |= 1ull << i;
      if (AddGpEvent(i)) overflow_pmi = true;
    }
    for (uint32_t fm = plain_fixed_[level]; fm; fm &= fm - 1) {
      const int i = std::countr_zero(fm);
      const uint64_t ctl = (fixed_ctrl >> (4 * i)) & 0xF;
      const uint64_t m = LowBits(pmu.fixed_width);
      const uint64_t next = (fixed[i].value + 1) & m;  // instructions, core and reference cycles alike
      const uint64_t bit = 1ull << (32 + i);
      if (pebs_armed & bit) assist |= bit;
      if (next < fixed[i].value) {
        global_status |= bit;
        if (ctl & 8) overflow_pmi = true;
        // PEBS on fixed counters (format 4, PEBS_ENABLE bit 32+i): armed as a GP counter is.
        if (pebs() && (pebs_enable & bit) && i < PebsFixed()) pebs_armed |= bit;
      }
      fixed[i].value = next;
    }
    if (nb_on() && NbCountInstruction(b, overflow_pmi)) VBTS_RETURN_IF_ERROR(NbPebsAssist(b, mem, before, fx));
    if (assist) VBTS_RETURN_IF_ERROR(PebsAssist(assist, b, mem, after, fx));
    if (overflow_pmi) RequestPmi(fx);
    return absl::OkStatus();
  }

  // The PEBS fields of the DS save area, after its BTS fields (SDM 17.4.9:
  // buffer base, index, absolute maximum, interrupt threshold), read with the
  // area's first `n` bytes into `raw` and checked for room for one `rec`-byte
  // record at the index; nullopt after a drop (counted, warned).
  struct PebsBuffer {
    uint64_t index = 0, threshold = 0;
  };
  std::optional<PebsBuffer> ReadPebsBuffer(LinearMemory& mem, uint8_t* raw, size_t n, bool fmt64, uint64_t rec) {
    Access acc;
    acc.implicit = true;
    absl::StatusOr<AccessFault> rf = mem.Read(Gva(ds_area), absl::MakeSpan(raw, n), acc);
    if (!rf.ok() || !rf->ok()) {
      DropPebs(absl::StrFormat("the DS save area at 0x%x (IA32_DS_AREA) cannot be read", ds_area));
      return std::nullopt;
    }
    const uint64_t fw = fmt64 ? 8 : 4;
    auto field = [&](int i) { return LoadField(raw + i * fw, fmt64); };
    const uint64_t base = field(4), index = field(5), max = field(6), threshold = field(7);
    if (index < base || index > max) {
      DropPebs(absl::StrFormat("index 0x%x is outside [base 0x%x, maximum 0x%x]", index, base, max));
      return std::nullopt;
    }
    if (max - index < rec) {
      DropPebs(absl::StrFormat("the buffer is full (index 0x%x, maximum 0x%x)", index, max));
      return std::nullopt;
    }
    return PebsBuffer{index, threshold};
  }
  void DropPebs(std::string why) {
    stats.pebs_dropped++;
    Warn(absl::StrCat("PEBS: ", why, "; PEBS assists are skipped"));
  }

  // The PEBS assist after the instruction `b` (SDM 18.6.1.1, table 18-23; 18.9.4 /
  // Skylake format 3): bounds checks against the DS save area's PEBS fields,
  // the record (machine state after `b`, RIP = the next instruction), index
  // update, overflow status cleared and the counters reloaded from their
  // reset values, and the PMI with GLOBAL_STATUS.OvfBuffer (bit 62) when the
  // index reaches the threshold. A failed check skips the assist entirely.
  absl::Status PebsAssist(uint64_t counters, const Branch& b, LinearMemory& mem, const GuestRegs* after,
                          PmuEffects& fx) {
    pebs_armed &= ~counters;
    const int format = pebs_format();
    // Format 4 (SDM 18.9.2.3): the record is adaptive when a counter that
    // caused it has its Adaptive_Record bit set (PERFEVTSELx bit 34,
    // FIXED_CTR_CTRL bit 32+4i); then the groups PEBS_DATA_CFG selects follow
    // the basic group, otherwise the basic group alone (docs/pmu-model.md).
    bool adaptive_rec = false;
    if (format >= 4 && adaptive()) {
      for (int i = 0; i < pmu.gp_counters; i++)
        if ((counters & (1ull << i)) && (gp[i].evtsel & kEvtAdaptive)) adaptive_rec = true;
      for (int i = 0; i < pmu.fixed_counters; i++)
        if ((counters & (1ull << (32 + i))) && (fixed_ctrl & (1ull << (32 + 4 * i)))) adaptive_rec = true;
    }
    const uint64_t cfg = adaptive_rec ? pebs_data_cfg : 0;
    const uint64_t lbr_n = (cfg & kCfgLbrs) ? ((cfg >> 24) & 0xFF) + 1 : 0;
    const uint64_t rec = format >= 4 ? kGroupBasic + ((cfg & kCfgMemInfo) ? kGroupMemInfo : 0) +
                                           ((cfg & kCfgGprs) ? kGroupGprs : 0) + ((cfg & kCfgXmms) ? kGroupXmms : 0) +
                                           lbr_n * kLbrEntry
                     : format >= 3 ? 0xC8  // Skylake: Haswell's 0xC0 plus the TSC (SDM table 18-55)
                     : format >= 1 ? 0xB0
                                   : 0x90;
    // 64-bit DS management area (DTES64 models only have PEBS); format 4:
    // reset values of PMC0-7 at 40H-78H and FIXED_CTR0-3 at 80H-98H.
    uint8_t raw[0xA0] = {};
    const std::optional<PebsBuffer> buf = ReadPebsBuffer(mem, raw, format >= 4 ? 0xA0 : 0x60, /*fmt64=*/true, rec);
    if (!buf) return absl::OkStatus();
    const uint64_t index = buf->index, threshold = buf->threshold;
    auto field = [&](int off) {
      uint64_t v;
      std::memcpy(&v, raw + off, 8);
      return v;
    };
    auto drop = [&](std::string why) {
      DropPebs(std::move(why));
      return absl::OkStatus();
    };
    if (!after) return absl::InternalError("PEBS assist without the guest's registers");
    Access acc;
    acc.implicit = true;
    const bool full = b.ia32e;  // outside IA-32e mode: 32-bit values, R8-R15 (and XMM8-15) zero
    const uint64_t m32 = full ? ~0ull : 0xFFFFFFFFull;
    std::vector<uint64_t> r(rec / 8, 0);
    if (format >= 4) {
      size_t k = 0;
      // Basic group (SDM 18.9.2.3): [47:0] record format = the effective
      // PEBS_DATA_CFG, [63:48] record size; the eventing IP (the
      // instruction that caused the assist); applicable counters; TSC.
      r[k++] = (rec << 48) | (cfg & LowBits(48));
      r[k++] = b.from & m32;
      r[k++] = counters;
      r[k++] = after->tsc;
      if (cfg & kCfgMemInfo) {
        // Memory access address, data source ("memory auxiliary info"),
        // latency, then TSX information: 0 (SDM 18.9.2.3; no TSX).
        const MemInfo mi = MemoryInfo(counters, b);
        r[k] = mi.address & m32;
        r[k + 1] = mi.source;
        r[k + 2] = mi.latency;
        k += 4;
      }
      if (cfg & kCfgGprs) {
        // RFLAGS, RIP (the next instruction, trap-like), then RAX..R15 in
        // encoding order.
        r[k++] = after->rflags & m32;
        r[k++] = b.to & m32;
        for (int g = 0; g < 16; g++) r[k++] = (g < 8 || full) ? after->gpr[g] & m32 : 0;
      }
      if (cfg & kCfgXmms) {
        for (int x = 0; x < 16; x++, k += 2)
          if (x < 8 || full) std::memcpy(&r[k], after->xmm[x], 16);
      }
      // LBR group: entry j is the j-th most recent branch (FROM, TO, INFO of
      // LBR[TOS - j]); entries beyond the stack's depth, and all of them
      // while the host KVM holds the LBRs, are 0.
      for (uint64_t j = 0; j < lbr_n; j++, k += 3) {
        if (options.lbr_in_kernel || pmu.lbr.entries == 0 || j >= static_cast<uint64_t>(pmu.lbr.entries)) continue;
        const LbrEntry& e = lbr[(tos + pmu.lbr.entries - j) % pmu.lbr.entries];
        r[k] = e.from;
        r[k + 1] = e.to;
        r[k + 2] = e.info;
      }
    } else {
      static constexpr int kOrder[8] = {0, 3, 1, 2, 6, 7, 5, 4};  // RAX RBX RCX RDX RSI RDI RBP RSP
      r[0] = after->rflags & m32;
      r[1] = b.to & m32;  // trap-like (PERF_CAPABILITIES bit 6): the instruction after the assist
      for (int k = 0; k < 8; k++) r[2 + k] = after->gpr[kOrder[k]] & m32;
      for (int k = 0; k < 8; k++) r[10 + k] = full ? after->gpr[8 + k] : 0;
      if (rec >= 0xB0) r[18] = format >= 3 ? counters : global_status;  // 90H: applicable counters / GLOBAL_STATUS
      // 98H data linear address, A0H data source, A8H latency (SDM 18.8.1.2
      // and table 18-55): format 1 fills them for load-latency records only,
      // format 3 also the address of the retired-load and -store events'
      // instruction (DataLA) and a store's L1D-hit bit.
      const MemInfo mi = MemoryInfo(counters, b);
      if (format >= 3 || mi.load_latency) {
        r[19] = mi.address & m32;
        r[20] = mi.source;
        r[21] = mi.latency;
      }
      if (rec >= 0xC0) r[22] = b.from & m32;  // B0H EventingIP: the instruction that caused the assist
      // B8H TX abort information: 0 (no TSX); C0H TSC at the assist.
      if (rec >= 0xC8) r[24] = after->tsc;
    }
    acc.write = true;
    absl::StatusOr<AccessFault> wf =
        mem.Write(Gva(index), absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(r.data()), rec), acc);
    if (!wf.ok() || !wf->ok()) return drop(absl::StrFormat("the record at 0x%x cannot be written", index));
    const uint64_t next = index + rec;
    uint8_t ni[8];
    std::memcpy(ni, &next, 8);
    (void)mem.Write(Gva(ds_area + 0x28), absl::MakeConstSpan(ni, 8), acc);
    stats.pebs_records++;
    for (int i = 0; i < pmu.gp_counters; i++) {
      if (!(counters & (1ull << i))) continue;
      global_status &= ~(1ull << i);
      gp[i].value = field(0x40 + 8 * i) & LowBits(pmu.gp_width);
    }
    for (int i = 0; i < pmu.fixed_counters; i++) {
      if (!(counters & (1ull << (32 + i)))) continue;
      global_status &= ~(1ull << (32 + i));
      fixed[i].value = field(0x80 + 8 * i) & LowBits(pmu.fixed_width);
    }
    if (next >= threshold) {
      global_status |= 1ull << 62;
      RequestPmi(fx);
    }
    return absl::OkStatus();
  }

  // What a PEBS record says about the memory access of the instruction that
  // caused it, for the counters that caused it (docs/pmu-model.md, "Load
  // latency and data source"): a load-latency counter's load with its data
  // source and latency; else a retired-stores counter's store, with bit 0 of
  // the data source set when the store hit the L1D (Linux's
  // precise_datala_hsw()); else a retired-loads counter's load address.
  struct MemInfo {
    uint64_t address = 0, source = 0, latency = 0;
    bool load_latency = false;
  };
  MemInfo MemoryInfo(uint64_t counters, const Branch& b) const {
    const uint32_t gp_mask = static_cast<uint32_t>(counters & 0xFFFFFFFFu);
    const int level = b.cpl_from == 0 ? 0 : 1;
    MemInfo mi;
    if ((gp_mask & ldlat_gp_[level]) && (b.mem & 1)) {
      mi.address = b.load_la;
      mi.source = LoadSource(insn_load_level);
      mi.latency = kLoadLatency[insn_load_level];
      mi.load_latency = true;
    } else if ((gp_mask & store_gp_[level]) && (b.mem & 2)) {
      mi.address = b.store_la;
      mi.source = (insn_stored && !insn_store_l1_miss) ? 1 : 0;
    } else if ((gp_mask & load_gp_[level]) && (b.mem & 1)) {
      mi.address = b.load_la;
    }
    return mi;
  }

  bool LbrFiltered(const Branch& b) const {
    if (!pmu.lbr.select) return false;
    const uint64_t s = lbr_select;
    if ((s & kSelCplEq0) && b.cpl_from == 0) return true;
    if ((s & kSelCplNeq0) && b.cpl_from != 0) return true;
    switch (b.kind) {
      case BranchKind::kJcc: return s & kSelJcc;
      case BranchKind::kCall: return s & kSelNearRelCall;
      case BranchKind::kIndCall: return s & kSelNearIndCall;
      case BranchKind::kRet: return s & kSelNearRet;
      case BranchKind::kIndJmp: return s & kSelNearIndJmp;
      case BranchKind::kJmp: return s & kSelNearRelJmp;
      default: return IsFarBranch(b.kind) && (s & kSelFarBranch);
    }
  }

  void PushLbr(const Branch& b) {
    if (options.lbr_in_kernel || !(debugctl & kDbgLbr) || !pmu.lbr.entries) return;
    if (pmu.perfmon_version >= 4 && (global_status & kStatusLbrFrz)) return;
    if (IsEventDelivery(b.kind)) {
      // LER: the last branch before the exception or interrupt (SDM 17.4.8.4? "last exception record").
      if (have_last) {
        ler_from = last_from;
        ler_to = last_to;
      }
      if (b.kind == BranchKind::kException && b.vector == 1) return;  // not #DB (SDM 17.4.2)
    }
    if (LbrFiltered(b)) return;
    if ((lbr_select & kSelEnCallstack) && b.kind == BranchKind::kRet) {
      // The LBR call stack (SDM 17.9): a return takes the last record off,
      // last in, first out, so that the stack holds the calls not yet
      // returned from.  The record is cleared: Linux reads a call stack
      // from TOS down "until invalid entry (0s) is detected"
      // (arch/x86/events/intel/lbr.c), which only hardware that clears
      // popped entries makes correct.
      lbr[tos] = LbrEntry{};
      tos = tos == 0 ? static_cast<uint32_t>(pmu.lbr.entries) - 1 : tos - 1;
      stats.lbr_pops++;
      return;
    }
    tos = tos + 1 >= static_cast<uint32_t>(pmu.lbr.entries) ? 0 : tos + 1;
    LbrEntry& e = lbr[tos];
    if (pmu.lbr.packed) {
      e.from = b.from & 0xFFFFFFFFull;
      e.to = b.to & 0xFFFFFFFFull;
    } else {
      e.from = Canonical(b.from);
      e.to = Canonical(b.to);
      if (pmu.lbr.format == 3 || pmu.lbr.format == 4) e.from &= ~(1ull << 63);  // MISPRED = 0 (no prediction)
      e.info = 0;  // format 5: MISPRED 0, no TSX, cycle count 0 (docs/pmu-model.md)
    }
    last_from = b.from;
    last_to = b.to;
    have_last = true;
    stats.lbr_pushes++;
  }

  // --- BTS (SDM 17.4.5, 17.4.9).
  absl::Status StoreBts(const Branch& b, LinearMemory& mem, PmuEffects& fx) {
    if (pmu.ds_cpl) {
      // CPL-qualified BTS (SDM 17.4.9.4, table 17-6): decided by the CPL of
      // the branch target.
      if ((debugctl & kDbgBtsOffOs) && b.cpl_to == 0) return absl::OkStatus();
      if ((debugctl & kDbgBtsOffUsr) && b.cpl_to != 0) return absl::OkStatus();
    }
    // 64-bit format with DTES64, or in IA-32e mode (SDM 17.4.9.2/17.4.9.3).
    const bool fmt64 = pmu.dtes64 || b.ia32e;
    const uint64_t fw = fmt64 ? 8 : 4;  // management field width
    const uint64_t rec = 3 * fw;        // record size: 24 or 12 bytes
    Access acc;
    acc.implicit = true;
    uint8_t raw[32] = {};
    // The management block read, and its index written below, in place where
    // each is one plain copy (LinearMemory::DirectPointer: paging off or a
    // cached writable translation, RAM without translated code). The index
    // then goes where the block was read from, as through the processor's
    // TLB, even if the record's store changed the paging structures.
    Access wacc = acc;
    wacc.write = true;
    uint8_t* const ds = mem.DirectPointer(Gva(ds_area), 4 * fw, wacc);
    absl::StatusOr<AccessFault> rf = AccessFault{};
    // A guest address outside RAM (or paging structures outside RAM) is the
    // guest's problem here, not vbts's: the record is dropped.
    if (ds != nullptr) std::memcpy(raw, ds, 4 * fw);
    else rf = mem.Read(Gva(ds_area), absl::MakeSpan(raw, 4 * fw), acc);
    if (!rf.ok() || !rf->ok()) {
      stats.bts_dropped++;
      Warn(absl::StrFormat("BTS: the DS save area at 0x%x (IA32_DS_AREA) cannot be read (%s); branch records are "
                           "dropped",
                           ds_area, !rf.ok() ? "not in guest RAM"
                                    : rf->kind == AccessFault::Kind::kNonCanonical ? "non-canonical" : "not mapped"));
      return absl::OkStatus();
    }
    auto field = [&](int i) { return LoadField(raw + i * fw, fmt64); };
    const uint64_t base = field(0), index = field(1), max = field(2), threshold = field(3);
    if (max < base || max - base < rec) {
      stats.bts_dropped++;
      Warn(absl::StrFormat("BTS: absolute maximum 0x%x leaves no room for one %u-byte record above base 0x%x; "
                           "branch records are dropped",
                           max, rec, base));
      return absl::OkStatus();
    }
    if (index < base || index > max) {
      stats.bts_dropped++;
      Warn(absl::StrFormat("BTS: index 0x%x is outside [base 0x%x, maximum 0x%x]; branch records are dropped",
                           index, base, max));
      return absl::OkStatus();
    }
    const bool circular = !(debugctl & kDbgBtint);
    uint64_t at = index;
    if (circular && max - at < rec) at = base;  // wrap before a record that would cross the maximum
    // The end of the record to store, computed without wrapping: an index in
    // the last 24 bytes of the 64-bit space must not look like a small one
    // (guest-tests/tiny/hostile_bts_index.asm).
    const unsigned __int128 candidate = static_cast<unsigned __int128>(at) + rec;
    if (candidate <= max) {
      uint8_t r[24] = {};
      const uint64_t from = fmt64 ? b.from : (b.from & 0xFFFFFFFFull);
      const uint64_t to = fmt64 ? b.to : (b.to & 0xFFFFFFFFull);
      const uint64_t flags = 0;  // bit 4 "predicted": vbts models no predictor (docs/pmu-model.md)
      StoreField(r, from, fmt64);
      StoreField(r + fw, to, fmt64);
      StoreField(r + 2 * fw, flags, fmt64);
      acc.write = true;
      absl::StatusOr<AccessFault> wf = mem.Write(Gva(at), absl::MakeConstSpan(r, rec), acc);
      if (!wf.ok() || !wf->ok()) {
        stats.bts_dropped++;
        Warn(absl::StrFormat("BTS: the record at 0x%x cannot be written (%s); branch records are dropped", at,
                             !wf.ok() ? "not in guest RAM"
                             : wf->kind == AccessFault::Kind::kNonCanonical ? "non-canonical"
                                                                            : "not mapped or read-only"));
        return absl::OkStatus();
      }
      uint64_t next = static_cast<uint64_t>(candidate);  // <= max: no wrap
      if (circular && next >= max) next = base;  // circular: back to base at the maximum (SDM 17.4.9.4? 17.4.5)
      uint8_t ni[8];
      std::memcpy(ni, &next, 8);
      if (ds != nullptr) {
        std::memcpy(ds + fw, ni, fw);
      } else {
        absl::StatusOr<AccessFault> xf = mem.Write(Gva(ds_area + fw), absl::MakeConstSpan(ni, fw), acc);
        (void)xf;  // readable a moment ago; a read-only DS page keeps the old index (as a lost update)
      }
      stats.bts_records++;
    }
    // The DS interrupt (SDM 17.4.9.4; book 6.5.6 and 9): in interrupt mode a
    // PMI whenever the end of the record being stored reaches the threshold,
    // also when the buffer is full and the record is not stored — so a
    // threshold one record above the maximum interrupts at every branch once
    // the buffer is full, and two or more records above it never; in
    // circular mode once per pass, when the index steps onto a threshold
    // below the maximum.
    if (!circular) {
      if (candidate >= threshold) RequestPmi(fx);
    } else if (threshold < max && at < threshold && candidate >= threshold) {
      RequestPmi(fx);
    }
    return absl::OkStatus();
  }
};

VirtualPmu::VirtualPmu(const CpuModel& model, VirtualPmuOptions options)
    : s_(std::make_unique<State>(model, options)) {
  s_->misc_enable = model.pmu.misc_enable;
}
VirtualPmu::~VirtualPmu() = default;

std::vector<MsrRange> VirtualPmu::InterceptedMsrs() const {
  // Every MSR any model defines for these features, so that a model lacking
  // one gives #GP instead of the host KVM's answer (kvm-host-facts.md).
  // With the LBRs in the kernel, the LBR stack, TOS, LBR_SELECT and LER
  // are the host KVM's (docs/pmu-model.md, "Passthrough").
  std::vector<MsrRange> r;
  const bool lbr = !s_->options.lbr_in_kernel;
  if (lbr) r.push_back({0x40, 0x47});             // MSR_LASTBRANCH_0..7 (Pentium M, Core Solo/Duo)
  r.push_back({kMsrPmc0, kMsrPmc0 + kMaxGp - 1});
  r.push_back({kMsrPerfEvtSel0, kMsrPerfEvtSel0 + kMaxGp - 1});
  r.push_back({kMsrMiscEnable, kMsrMiscEnable});
  if (lbr) r.push_back({kMsrLbrSelect, kMsrLbrSelect + 1});  // LBR_SELECT, LASTBRANCH_TOS
  r.push_back({kMsrDebugCtl, kMsrDebugCtl});
  if (lbr) r.push_back({0x1D7, 0x1D8});           // NetBurst LER (MSR_LER_FROM_LIP/TO_LIP)
  if (lbr) r.push_back({0x1DA, 0x1DA});           // NetBurst MSR_LASTBRANCH_TOS
  if (lbr) r.push_back({0x1DB, kMsrLerTo});       // LER (1DBH/1DCH on older parts, 1DDH/1DEH)
  r.push_back({kMsrFixedCtr0, kMsrFixedCtr0 + kMaxFixed - 1});
  // NetBurst counters, CCCRs, ESCRs: on every model, so that a model without
  // them answers #GP on both engines (docs/pmu-model.md).
  r.push_back({netburst::kMsrCounter0, netburst::kMsrCounter0 + netburst::kCounters - 1});
  r.push_back({netburst::kMsrCccr0, netburst::kMsrCccr0 + netburst::kCounters - 1});
  r.push_back({netburst::kMsrEscrFirst, netburst::kMsrEscrLast});
  r.push_back({kMsrPerfCapabilities, kMsrPerfCapabilities});
  r.push_back({kMsrFixedCtrCtrl, kMsrGlobalOvfCtrl});
  r.push_back({kMsrPebsEnable, kMsrPebsDataCfg});
  r.push_back({kMsrPebsLdLat, kMsrPebsLdLat});
  r.push_back({kMsrOffcoreRsp0, kMsrOffcoreRsp0 + 1});
  r.push_back({kMsrAPmc0, kMsrAPmc0 + kMaxGp - 1});
  r.push_back({kMsrDsArea, kMsrDsArea});
  if (lbr) {
    r.push_back({0x680, 0x680 + kMaxLbr - 1});
    r.push_back({0x6C0, 0x6C0 + kMaxLbr - 1});
    r.push_back({0xDC0, 0xDC0 + kMaxLbr - 1});
  }
  return r;
}

MsrResult VirtualPmu::ReadPmc(uint32_t ecx) const {
  if (s_->nb_on()) {
    // No architectural perfmon (SDM vol. 2B RDPMC): ECX[30:0] is the counter
    // index, 0-17 on family 0FH models 03H/04H/06H without L3; ECX[31]
    // selects the fast read: bits 31:0 in EAX, EDX cleared.
    const uint32_t index = ecx & 0x7FFFFFFF;
    if (index >= static_cast<uint32_t>(netburst::kCounters)) return MsrResult{true, 0};
    const uint64_t v = s_->nb[index].value;
    return MsrResult{false, (ecx >> 31) ? (v & 0xFFFFFFFFull) : v};
  }
  const uint32_t index = ecx & 0x3FFFFFFF;
  const bool fixed = (ecx >> 30) & 1;
  if ((ecx >> 31) != 0) return MsrResult{true, 0};  // reserved on Intel
  if (fixed) {
    if (index >= static_cast<uint32_t>(s_->pmu.fixed_counters)) return MsrResult{true, 0};
    return ReadMsr(kMsrFixedCtr0 + index);
  }
  if (index >= static_cast<uint32_t>(s_->pmu.gp_counters)) return MsrResult{true, 0};
  return ReadMsr(kMsrPmc0 + index);
}

bool VirtualPmu::Owns(uint32_t msr) const {
  for (const MsrRange& r : InterceptedMsrs())
    if (msr >= r.first && msr <= r.last) return true;
  return false;
}

namespace {

// MSR_DEBUGCTLA (NetBurst, SDM vol. 3B figure 17-22) <-> IA32_DEBUGCTL
// (figure 17-3): LBR and BTF stay at bits 0 and 1; TR, BTS, BTINT,
// BTS_OFF_OS, BTS_OFF_USR move from bits 2-6 to bits 6-10.
uint64_t DebugCtlFromNetBurst(uint64_t v) { return (v & 3) | ((v >> 2) & 0x1F) << 6; }
uint64_t DebugCtlToNetBurst(uint64_t v) { return (v & 3) | ((v >> 6) & 0x1F) << 2; }

}  // namespace

MsrResult VirtualPmu::ReadMsr(uint32_t msr) const {
  const State& s = *s_;
  const PmuModel& p = s.pmu;
  auto ok = [](uint64_t v) { return MsrResult{false, v}; };
  const MsrResult gp{true, 0};
  int i;
  if (s.nb_on()) {
    if (msr >= netburst::kMsrCounter0 && msr < netburst::kMsrCounter0 + netburst::kCounters)
      return ok(s.nb[msr - netburst::kMsrCounter0].value);
    if (msr >= netburst::kMsrCccr0 && msr < netburst::kMsrCccr0 + netburst::kCounters)
      return ok(s.nb[msr - netburst::kMsrCccr0].cccr);
    if (msr >= netburst::kMsrEscrFirst && msr <= netburst::kMsrEscrLast)
      return netburst::FindEscr(msr) ? ok(s.EscrAt(msr)) : gp;
    if (msr == netburst::kMsrPebsEnable) return s.nb_pebs() ? ok(s.nb_pebs_enable) : gp;
    if (msr == netburst::kMsrPebsMatrixVert) return s.nb_pebs() ? ok(s.nb_matrix_vert) : gp;
  }
  if (msr == kMsrMiscEnable) return ok(s.misc_enable);
  if (msr == kMsrDebugCtl) {
    if (!p.debugctl_valid) return gp;
    return ok(p.netburst_debugctl ? DebugCtlToNetBurst(s.debugctl) : s.debugctl);
  }
  if (msr == kMsrDsArea) return p.ds ? ok(s.ds_area) : gp;
  if (msr == kMsrPerfCapabilities) return p.pdcm ? ok(p.perf_capabilities) : gp;
  if (msr == kMsrPebsEnable) return (p.ds && p.pdcm) ? ok(s.pebs_enable) : gp;
  if (msr == kMsrPebsDataCfg) return s.adaptive() ? ok(s.pebs_data_cfg) : gp;
  if (msr == kMsrPebsLdLat) return p.load_latency_event ? ok(s.ld_lat_threshold) : gp;
  if (msr == kMsrOffcoreRsp0 || msr == kMsrOffcoreRsp0 + 1)
    return p.offcore != PmuModel::OffcoreLayout::kNone ? ok(s.offcore_rsp[msr - kMsrOffcoreRsp0]) : gp;
  if (msr == p.lbr.tos && p.lbr.entries) return ok(s.tos);
  if (msr == kMsrLbrSelect) return p.lbr.select ? ok(s.lbr_select) : gp;
  if (msr == p.lbr.ler_from && p.lbr.entries) return ok(s.ler_from);
  if (msr == p.lbr.ler_to && p.lbr.entries) return ok(s.ler_to);
  if (s.IsLbrFrom(msr, &i)) {
    if (p.lbr.packed) return ok(s.lbr[i].from | (s.lbr[i].to << 32));
    return ok(s.lbr[i].from);
  }
  if (s.IsLbrTo(msr, &i)) return ok(s.lbr[i].to);
  if (s.IsLbrInfo(msr, &i)) return ok(s.lbr[i].info);
  if (msr >= kMsrPmc0 && msr < kMsrPmc0 + static_cast<uint32_t>(p.gp_counters)) return ok(s.gp[msr - kMsrPmc0].value);
  if (msr >= kMsrAPmc0 && msr < kMsrAPmc0 + static_cast<uint32_t>(p.gp_counters) && s.full_width_writes())
    return ok(s.gp[msr - kMsrAPmc0].value);
  if (msr >= kMsrPerfEvtSel0 && msr < kMsrPerfEvtSel0 + static_cast<uint32_t>(p.gp_counters))
    return ok(s.gp[msr - kMsrPerfEvtSel0].evtsel);
  if (msr >= kMsrFixedCtr0 && msr < kMsrFixedCtr0 + static_cast<uint32_t>(p.fixed_counters))
    return ok(s.fixed[msr - kMsrFixedCtr0].value);
  if (s.v2()) {
    if (msr == kMsrFixedCtrCtrl && p.fixed_counters) return ok(s.fixed_ctrl);
    if (msr == kMsrGlobalStatus) return ok(s.global_status);
    if (msr == kMsrGlobalCtrl) return ok(s.global_ctrl);
    if (msr == kMsrGlobalOvfCtrl) return ok(0);
  }
  return gp;
}

MsrResult VirtualPmu::WriteMsr(uint32_t msr, uint64_t v) {
  State& s = *s_;
  s.PlainChanged();  // whatever it writes
  const PmuModel& p = s.pmu;
  const MsrResult ok{false, 0}, gp{true, 0};
  int i;
  if (s.nb_on()) {
    if (msr >= netburst::kMsrCounter0 && msr < netburst::kMsrCounter0 + netburst::kCounters) {
      // 40-bit counters: bits 63:40 of the value are ignored (docs/pmu-model.md).
      NbCounter& c = s.nb[msr - netburst::kMsrCounter0];
      c.value = v & LowBits(netburst::kCounterWidth);
      c.pmi_pending = false;  // a reloaded counter has no overflow pending
      return ok;
    }
    if (msr >= netburst::kMsrCccr0 && msr < netburst::kMsrCccr0 + netburst::kCounters) {
      const int n = static_cast<int>(msr - netburst::kMsrCccr0);
      const uint64_t writable =
          netburst::kCccrWritable | (n >= netburst::kIqCounter0 ? netburst::kCccrExtCascade : 0);
      if (v & ~writable) return gp;  // reserved bits (docs/pmu-model.md)
      s.nb[n].cccr = v;
      s.nb[n].last_out = false;
      return ok;
    }
    if (msr >= netburst::kMsrEscrFirst && msr <= netburst::kMsrEscrLast) {
      if (!netburst::FindEscr(msr) || (v & ~netburst::kEscrWritable)) return gp;
      s.escr[msr - netburst::kMsrEscrFirst] = v;
      return ok;
    }
    // MSR_PEBS_ENABLE and MSR_PEBS_MATRIX_VERT: the bits vol. 4 and the
    // replay-tagging table define; the others (ENABLE_PEBS_OTH_THR, HT only,
    // among them) are reserved: #GP (docs/pmu-model.md, "NetBurst PEBS").
    if (msr == netburst::kMsrPebsEnable) {
      if (!s.nb_pebs() || (v & ~netburst::kPebsEnableWritable)) return gp;
      s.nb_pebs_enable = v;
      return ok;
    }
    if (msr == netburst::kMsrPebsMatrixVert) {
      if (!s.nb_pebs() || (v & ~netburst::kPebsMatrixVertWritable)) return gp;
      s.nb_matrix_vert = v;
      return ok;
    }
  }
  if (msr == kMsrMiscEnable) {
    // SDM vol. 4 table 2-2 and the model's table: the writable bits take the
    // value; the performance-monitoring bits 7, 11 and 12 are read-only and
    // keep theirs; a reserved bit set #GPs. The stored bits change nothing
    // else (limit-CPUID-maxval and XD-disable do not alter CPUID; docs/pmu-model.md).
    constexpr uint64_t kReadOnly = (1ull << 7) | (1ull << 11) | (1ull << 12);
    if (v & ~(p.misc_enable_writable | kReadOnly)) return gp;
    s.misc_enable = (v & p.misc_enable_writable) | (s.misc_enable & ~p.misc_enable_writable);
    return ok;
  }
  if (msr == kMsrDebugCtl) {
    if (!p.debugctl_valid || (v & ~p.debugctl_valid)) return gp;  // reserved bits (SDM 17.4.1, 17.12.1)
    s.debugctl = p.netburst_debugctl ? DebugCtlFromNetBurst(v) : v;
    return ok;
  }
  if (msr == kMsrDsArea) {
    if (!p.ds || Canonical(v) != v) return gp;  // SDM 17.4.9: a linear address, canonical
    s.ds_area = v;
    return ok;
  }
  if (msr == kMsrPerfCapabilities) return gp;  // read-only
  if (msr == kMsrPebsEnable) {
    if (!(p.ds && p.pdcm) || (v & ~s.PebsEnableMask())) return gp;
    // Bits 32-35 (LL_EN, up to format 3) are kept: the load-latency event
    // counts, and its records carry the load's fields, with or without them
    // (docs/pmu-model.md, "Load latency and data source").
    s.pebs_enable = v;
    s.pebs_armed &= v;
    return ok;
  }
  if (msr == kMsrOffcoreRsp0 || msr == kMsrOffcoreRsp0 + 1) {
    if (p.offcore == PmuModel::OffcoreLayout::kNone || (v & ~p.offcore_valid)) return gp;
    s.offcore_rsp[msr - kMsrOffcoreRsp0] = v;
    return ok;
  }
  if (msr == kMsrPebsLdLat) {
    // SDM vol. 4: bits 15:0 the threshold (R/W), the rest reserved.
    if (!p.load_latency_event || (v >> 16)) return gp;
    s.ld_lat_threshold = v;
    return ok;
  }
  if (msr == kMsrPebsDataCfg) {
    // SDM 18.9.2.3: groups in bits 3:0, LBR entries - 1 in 31:24; reserved bits #GP.
    if (!s.adaptive() || (v & ~kPebsDataCfgValid)) return gp;
    s.pebs_data_cfg = v;
    return ok;
  }
  if (msr == p.lbr.tos && p.lbr.entries) {
    // SDM vol. 4 (tables 2-3, 2-15, 2-38): "Last Branch Record Stack TOS
    // (R/W)", an index into the stack; kvm-unit-tests' pmu_lbr writes 0.
    // An index beyond the stack is a reserved value: #GP.
    if (v >= static_cast<uint64_t>(p.lbr.entries)) return gp;
    s.tos = static_cast<uint32_t>(v);
    return ok;
  }
  if (msr == kMsrLbrSelect) {
    if (!p.lbr.select || (v & ~(kLbrSelectMask | (p.lbr.call_stack ? kSelEnCallstack : 0)))) return gp;
    s.lbr_select = v;
    return ok;
  }
  if ((msr == p.lbr.ler_from || msr == p.lbr.ler_to) && p.lbr.entries) return gp;  // read-only
  if (s.IsLbrFrom(msr, &i)) {
    if (p.lbr.packed) {
      s.lbr[i].from = v & 0xFFFFFFFFull;
      s.lbr[i].to = v >> 32;
    } else {
      s.lbr[i].from = v;
    }
    return ok;
  }
  if (s.IsLbrTo(msr, &i)) {
    s.lbr[i].to = v;
    return ok;
  }
  if (s.IsLbrInfo(msr, &i)) {
    s.lbr[i].info = v;
    return ok;
  }
  if (msr >= kMsrPmc0 && msr < kMsrPmc0 + static_cast<uint32_t>(p.gp_counters)) {
    // Legacy writes: bits 31:0, sign-extended to the counter width (SDM 18.2.6).
    uint64_t x = v & 0xFFFFFFFFull;
    if (x & 0x80000000ull) x |= ~0xFFFFFFFFull;
    s.gp[msr - kMsrPmc0].value = x & LowBits(p.gp_width);
    s.pebs_armed &= ~(1ull << (msr - kMsrPmc0));  // a reloaded counter is no longer armed
    return ok;
  }
  if (msr >= kMsrAPmc0 && msr < kMsrAPmc0 + static_cast<uint32_t>(p.gp_counters) && s.full_width_writes()) {
    if (v & ~LowBits(p.gp_width)) return gp;
    s.gp[msr - kMsrAPmc0].value = v;
    s.pebs_armed &= ~(1ull << (msr - kMsrAPmc0));
    return ok;
  }
  if (msr >= kMsrPerfEvtSel0 && msr < kMsrPerfEvtSel0 + static_cast<uint32_t>(p.gp_counters)) {
    if ((v >> 32) & ~((s.adaptive() ? kEvtAdaptive : 0) >> 32)) return gp;  // reserved upper half (but Adaptive_Record)
    s.gp[msr - kMsrPerfEvtSel0].evtsel = v;
    return ok;
  }
  if (msr >= kMsrFixedCtr0 && msr < kMsrFixedCtr0 + static_cast<uint32_t>(p.fixed_counters)) {
    if (v & ~LowBits(p.fixed_width)) return gp;
    s.fixed[msr - kMsrFixedCtr0].value = v;
    s.pebs_armed &= ~(1ull << (32 + msr - kMsrFixedCtr0));
    return ok;
  }
  if (s.v2()) {
    if (msr == kMsrFixedCtrCtrl && p.fixed_counters) {
      if (v & ~s.FixedCtrlMask()) return gp;
      s.fixed_ctrl = v;
      return ok;
    }
    if (msr == kMsrGlobalStatus) return gp;  // read-only (SDM 18.2.2)
    if (msr == kMsrGlobalCtrl) {
      if (v & ~s.GlobalCtrlMask()) return gp;
      s.global_ctrl = v;
      return ok;
    }
    if (msr == kMsrGlobalOvfCtrl) {
      if (v & ~s.GlobalStatusMask()) return gp;
      s.global_status &= ~v;  // clears the status bits written as 1 (SDM 18.2.2)
      return ok;
    }
  }
  return gp;
}

bool VirtualPmu::NeedsObservation() const {
  const State& s = *s_;
  const uint64_t observed = s.options.lbr_in_kernel ? kDbgBtf : (kDbgLbr | kDbgBtf);
  return (s.debugctl & observed) || s.BtsOn() || s.AnyCounterEnabled();
}

bool VirtualPmu::MayStartCounting(uint32_t msr, uint64_t value) const {
  const State& s = *s_;
  if (s.AnyCounterEnabled()) return true;
  if (s.nb_on())
    return msr >= netburst::kMsrCccr0 && msr < netburst::kMsrCccr0 + netburst::kCounters && (value & netburst::kCccrEnable);
  if (msr >= kMsrPerfEvtSel0 && msr < kMsrPerfEvtSel0 + static_cast<uint32_t>(s.pmu.gp_counters)) return value & kEvtEn;
  return msr == kMsrFixedCtrCtrl && s.pmu.fixed_counters > 0 && value != 0;
}

bool VirtualPmu::DisablesAll(uint32_t msr, uint64_t value) const {
  return msr == kMsrGlobalCtrl && s_->pmu.perfmon_version >= 2 && value == 0;  // (NetBurst: version 0)
}

bool VirtualPmu::WantsDataAccesses() const {
  return s_->CountsLlc() || s_->CountsL1d() || s_->WantsDataSource() || s_->CountsOffcore() || s_->NbWantsAccesses();
}

PmuEffects VirtualPmu::ObserveDataAccess(uint64_t pa, uint32_t size, uint8_t cpl, DataAccessKind kind,
                                         AccessOwner owner) {
  State& s = *s_;
  // (Its effects are built at the end from locals: a PmuEffects written in
  // parts and returned costs a store-forwarding stall on every access.)
  const bool llc = s.CountsLlc(), l1d = s.CountsL1d(), source = s.WantsDataSource(), offcore = s.CountsOffcore();
  const bool replay = s.NbWantsAccesses();
  if (size == 0 || !(llc || l1d || source || offcore || replay)) return {};
  if (s.pmu.perfmon_version >= 4 && (s.global_status & kStatusCtrFrz)) return {};
  // Every line the access touches (an unaligned one may touch two).  The
  // L1D model sees the accesses while L1D.REPLACEMENT or the data source
  // matters, the L2/LLC model while an LLC or offcore event or the data source does;
  // each sees every access then (docs/pmu-model.md).
  const uint64_t first = pa / kCacheLineBytes, last = (pa + size - 1) / kCacheLineBytes;
  const bool latency_load =
      kind == DataAccessKind::kLoad && owner != AccessOwner::kObserved && s.ldlat_gp_[cpl == 0 ? 0 : 1] != 0;
  if (latency_load && owner == AccessOwner::kInBulk) {
    // The level each line would come from, the caches unchanged: the
    // access is taken later, alone, if the slowest is above the threshold.
    // (A line the access's first line fills could be the second line only
    // in a cache of one or two sets; none is modelled.)
    uint8_t slowest = kLevelNone;
    for (uint64_t line = first; line <= last && line >= first; line++) {
      const uint64_t at = line * kCacheLineBytes;
      const bool l1_hit = !s.l1d.Probe(at).llc_reference;
      slowest = std::max(slowest, LoadLevel(l1_hit, l1_hit ? CacheModel::Outcome{} : s.cache.Probe(at)));
    }
    if (s.LatencyAbove(slowest)) return {.needs_instruction = true};
  }
  uint8_t load_level = kLevelNone;  // (kCountNow)
  bool overflow_pmi = false;
  // Adds 1 to every enabled GP counter, counting at `cpl`, whose select
  // `counts` the event.
  const auto count = [&](auto counts) {
    for (int i = 0; i < s.pmu.gp_counters; i++) {
      const uint64_t sel = s.gp[i].evtsel;
      if (!s.CounterEnabled(i, false) || !(sel & (cpl == 0 ? kEvtOs : kEvtUsr)) || !counts(sel)) continue;
      if (s.AddToGp(i, 1) && (sel & kEvtInt)) overflow_pmi = true;
    }
  };
  for (uint64_t line = first; line <= last && line >= first; line++) {
    bool l1_hit = true;
    if (l1d || source) {
      l1_hit = !s.l1d.Access(line * kCacheLineBytes).llc_reference;
      if (!l1_hit && l1d) count([&](uint64_t sel) { return s.IsL1dReplacement(sel); });  // a line replaced
    }
    CacheModel::Outcome o;
    if (llc || source || offcore || replay) o = s.cache.Access(line * kCacheLineBytes);
    if (replay && kind == DataAccessKind::kLoad && owner == AccessOwner::kObserved) {
      // NetBurst's caches (pentium4: the model's inner level is the L1D,
      // its last level the L2).
      if (o.llc_reference) s.nb_load_l1_miss = true;
      if (o.llc_miss) s.nb_load_l2_miss = true;
    }
    if (offcore && o.llc_reference) {  // a demand request to the uncore
      const bool store = kind == DataAccessKind::kStore;
      count([&](uint64_t sel) {
        const int m = s.OffcoreMsrOf(sel);
        return m >= 0 && s.OffcoreMatches(s.offcore_rsp[m], store, o.llc_miss);
      });
    }
    if (source) {
      if (kind == DataAccessKind::kLoad) {
        const uint8_t level = LoadLevel(l1_hit, o);
        load_level = std::max(load_level, level);
        if (owner == AccessOwner::kObserved) s.insn_load_level = std::max(s.insn_load_level, level);
      } else if (owner == AccessOwner::kObserved) {
        s.insn_stored = true;
        if (!l1_hit) s.insn_store_l1_miss = true;
      }
    }
    if (llc && o.llc_reference)
      count([&](uint64_t sel) { return State::IsLlcReference(sel) || (o.llc_miss && State::IsLlcMiss(sel)); });
  }
  if (replay && owner == AccessOwner::kObserved && last != first) {
    (kind == DataAccessKind::kLoad ? s.nb_split_load : s.nb_split_store) = true;  // a split access
  }
  if (latency_load && owner == AccessOwner::kCountNow && s.LatencyAbove(load_level)) {
    // As CountInstruction counts the event for a load-latency counter, but
    // with no instruction boundary here: an assist armed for the counter
    // (ArmedOnlyForLoadLatency) stays armed for its next event.
    for (uint32_t m = s.ldlat_gp_[cpl == 0 ? 0 : 1]; m; m &= m - 1)
      if (s.AddGpEvent(std::countr_zero(m))) overflow_pmi = true;
  }
  if (!overflow_pmi) return {};
  s.RequestPmi();
  return {.pmi = true};
}

bool VirtualPmu::WantsRegs() const { return s_->pebs_armed != 0; }
bool VirtualPmu::WantsRegsBefore() const { return s_->NbPebsOn(); }
bool VirtualPmu::NeedsEachInstruction() const { return s_->NbCountsTagged(); }
bool VirtualPmu::ArmedOnlyForLoadLatency() const {
  const State& s = *s_;
  s.PlainMasks();
  return s.pebs_armed != 0 && (s.pebs_armed & ~uint64_t{s.ldlat_gp_[0] | s.ldlat_gp_[1]}) == 0;
}
bool VirtualPmu::CountsMemoryInstructions() const { return s_->CountsMemory(); }
bool VirtualPmu::CountsLoadLatency() const { return s_->CountsLoadLatency(); }
bool VirtualPmu::WantsXmm() const {
  return s_->pebs_armed != 0 && s_->adaptive() && (s_->pebs_data_cfg & kCfgXmms);
}

uint64_t VirtualPmu::SequentialLimit(uint8_t cpl) const {
  const State& s = *s_;
  if (s.pebs_armed && !ArmedOnlyForLoadLatency()) return 0;
  // NetBurst's tagged µops depend on each instruction's operands and on what
  // it is (a locked one, a RET): every instruction is observed.
  if (s.NbCountsTagged()) return 0;
  if (s.pmu.perfmon_version >= 4 && (s.global_status & kStatusCtrFrz)) return UINT64_MAX;
  Branch plain;  // a non-branch instruction (GpIncrement's view)
  uint64_t limit = UINT64_MAX;
  s.PlainMasks();
  const int level = cpl == 0 ? 0 : 1;
  // An instruction adds at most 1 to a retired-load or -store counter.
  for (uint32_t m = s.plain_gp_[level] | s.load_gp_[level] | s.store_gp_[level]; m; m &= m - 1) {
    const int i = std::countr_zero(m);
    limit = std::min(limit, LowBits(s.pmu.gp_width) - s.gp[i].value);  // increments before it wraps
  }
  for (uint32_t m = s.plain_fixed_[level]; m; m &= m - 1) {
    const int i = std::countr_zero(m);
    limit = std::min(limit, LowBits(s.pmu.fixed_width) - s.fixed[i].value);
  }
  for (int i = 0; i < s.nb_count(); i++) {
    if (!s.NbEnabled(i)) continue;
    const int n = s.NbEvents(i, plain, cpl);
    if (n < 0) continue;
    const NbCounter& c = s.nb[i];
    bool out = c.last_out;
    const uint64_t first = State::NbFilter(c.cccr, n, out);
    if (!first) continue;
    // A pending PMI or FORCE_OVF needs the exact instruction of the next increment.
    if (c.pmi_pending || (c.cccr & netburst::kCccrForceOvf)) return 0;
    const bool edge = (c.cccr & netburst::kCccrCompare) && (c.cccr & netburst::kCccrEdge);
    // With Edge only the first instruction of the run counts (the comparison stays true).
    const uint64_t room = LowBits(netburst::kCounterWidth) - c.value;
    if (edge) {
      if (room == 0) return 0;
    } else {
      limit = std::min(limit, room / first);
    }
  }
  return limit;
}

bool VirtualPmu::BranchAgnostic() const {
  const State& s = *s_;
  // The retired-load and -store events count by instruction kind: bulk
  // counting across blocks would not know which instructions ran.
  if ((s.debugctl & (kDbgLbr | kDbgBtf)) || s.BtsOn() || s.options.lbr_in_kernel || s.CountsMemory()) return false;
  return s.CountersBranchAgnostic();
}

bool VirtualPmu::LbrOnly() const {
  const State& s = *s_;
  return (s.debugctl & kDbgLbr) && !(s.debugctl & kDbgBtf) && !s.options.lbr_in_kernel && !s.BtsOn() &&
         s.pebs_armed == 0 && !s.CountsMemory() && s.CountersBranchAgnostic();
}

bool VirtualPmu::State::CountersBranchAgnostic() const {
  const State& s = *this;
  Branch taken;
  taken.kind = BranchKind::kJmp;
  taken.branch_insn = true;
  const Branch plain;
  for (int i = 0; i < s.pmu.gp_counters; i++) {
    if (!s.CounterEnabled(i, false)) continue;
    // A umask that selects some branches tells one kind from another.
    if (s.SelectsBranches(s.gp[i].evtsel)) return false;
    if (s.GpIncrement(s.gp[i].evtsel, taken) != s.GpIncrement(s.gp[i].evtsel, plain)) return false;
  }
  for (int i = 0; i < s.nb_count(); i++) {
    if (!s.NbEnabled(i)) continue;
    for (uint8_t cpl : {0, 3})
      if (s.NbEvents(i, taken, cpl) != s.NbEvents(i, plain, cpl)) return false;
  }
  return true;  // fixed counters count every instruction alike
}

void VirtualPmu::CountSequential(uint64_t n, uint8_t cpl, uint64_t loads, uint64_t stores) {
  State& s = *s_;
  s.stats.instructions += n;
  // (Their accesses gave no data source: AccessOwner::kInBulk.)
  if (n == 0 || (s.pmu.perfmon_version >= 4 && (s.global_status & kStatusCtrFrz))) return;
  Branch plain;
  s.PlainMasks();
  const int level = cpl == 0 ? 0 : 1;
  for (uint32_t m = s.plain_gp_[level]; m; m &= m - 1) {
    const int i = std::countr_zero(m);
    s.gp[i].value = (s.gp[i].value + n) & LowBits(s.pmu.gp_width);
  }
  // The retired-load and -store events (a counter of both adds each kind).
  for (uint32_t m = s.load_gp_[level] | s.store_gp_[level]; m; m &= m - 1) {
    const int i = std::countr_zero(m);
    const uint64_t k = ((s.load_gp_[level] >> i) & 1 ? loads : 0) + ((s.store_gp_[level] >> i) & 1 ? stores : 0);
    s.gp[i].value = (s.gp[i].value + k) & LowBits(s.pmu.gp_width);  // no wrap: SequentialLimit
  }
  for (uint32_t m = s.plain_fixed_[level]; m; m &= m - 1) {
    const int i = std::countr_zero(m);
    s.fixed[i].value = (s.fixed[i].value + n) & LowBits(s.pmu.fixed_width);
  }
  for (int i = 0; i < s.nb_count(); i++) {
    if (!s.NbEnabled(i)) continue;
    const int events = s.NbEvents(i, plain, cpl);
    if (events < 0) continue;
    NbCounter& c = s.nb[i];
    // Every instruction of the run has the same events: the filter's
    // output is the same for all; with Edge only the first can count.
    const bool edge = (c.cccr & netburst::kCccrCompare) && (c.cccr & netburst::kCccrEdge);
    const uint64_t first = State::NbFilter(c.cccr, events, c.last_out);
    const uint64_t total = edge ? first : first * n;
    c.value = (c.value + total) & LowBits(netburst::kCounterWidth);  // no wrap: SequentialLimit
  }
}

void VirtualPmu::ObserveKeptBranch(const Branch& b) {
  State& s = *s_;
  if (!b.taken()) return;
  s.stats.branches++;
  s.PushLbr(b);
}

absl::StatusOr<PmuEffects> VirtualPmu::Observe(const Branch& b, LinearMemory& mem, bool guest_tf,
                                               const GuestRegs* after, const GuestRegs* before) {
  State& s = *s_;
  PmuEffects fx;
  const bool event = IsEventDelivery(b.kind);
  // The instruction's own records first, then its count: a PMI (and the
  // freeze it triggers) follows the instruction that caused it, whose branch
  // is already in the LBRs and the BTS buffer.
  if (b.taken()) {
    s.stats.branches++;
    s.PushLbr(b);
    if (s.BtsOn()) VBTS_RETURN_IF_ERROR(s.StoreBts(b, mem, fx));
  }
  if (!event) {
    s.stats.instructions++;
    VBTS_RETURN_IF_ERROR(s.CountInstruction(b, mem, after, before, fx));
  }
  if (event && b.kind == BranchKind::kException && b.vector == 1) {
    // #DB delivery clears DEBUGCTL.LBR and BTF (SDM 17.4.2).
    s.debugctl &= ~(kDbgLbr | kDbgBtf);
  }
  // BTF: single-step on branches (SDM 17.4.3): with TF set, the trap follows
  // a taken branch only; without BTF, every instruction.
  if (!event && guest_tf) fx.single_step_trap = !(s.debugctl & kDbgBtf) || b.taken();
  s.insn_load_level = kLevelNone;  // the next instruction's accesses follow
  s.insn_stored = s.insn_store_l1_miss = false;
  s.nb_load_l1_miss = s.nb_load_l2_miss = s.nb_split_load = s.nb_split_store = false;
  return fx;
}

std::vector<std::string> VirtualPmu::TakeWarnings() {
  std::vector<std::string> w;
  w.swap(s_->warnings);
  return w;
}

const PmuStats& VirtualPmu::stats() const { return s_->stats; }

bool VirtualPmu::lbr_in_kernel() const { return s_->options.lbr_in_kernel; }

uint64_t VirtualPmu::KernelDebugCtl() const {
  const State& s = *s_;
  if (!s.options.lbr_in_kernel) return 0;
  uint64_t v = s.debugctl & (kDbgLbr | kDbgFreezeLbrs);
  if (s.pmu.perfmon_version >= 4 && (s.global_status & kStatusLbrFrz)) v &= ~kDbgLbr;
  return v;
}

void VirtualPmu::NoteKernelDebugCtl(uint64_t kernel_value) {
  State& s = *s_;
  if (!s.options.lbr_in_kernel) return;
  // Only a clear can come from the hardware (#DB delivery, its own freeze);
  // while vbts's LBR_FRZ holds the kernel's LBR off, that is vbts's doing.
  if ((KernelDebugCtl() & kDbgLbr) && !(kernel_value & kDbgLbr)) s.debugctl &= ~kDbgLbr;
}

}  // namespace vbts::pmu
