// netburst.h: the geometry of the performance-monitoring facility of
// processors based on Intel NetBurst microarchitecture (SDM vol. 3B,
// "Performance Monitoring (Processors Based on Intel NetBurst
// Microarchitecture)": the ESCR MSRs, the performance counters, the CCCR
// MSRs and the table of performance counter MSRs with their CCCRs and the
// ESCRs that can feed them), as the virtual PMU (pmu/vpmu.cc) models it for
// family 0FH model 03H.  docs/pmu-model.md, "NetBurst performance counters",
// lists every rule.
#ifndef VBTS_PMU_NETBURST_H_
#define VBTS_PMU_NETBURST_H_

#include <cstdint>

namespace vbts::pmu::netburst {

// 18 counters, MSR_BPU_COUNTER0 (300H) .. MSR_IQ_COUNTER5 (311H), 40 bits
// wide; their CCCRs at 360H..371H (counter n: 300H + n, 360H + n).
inline constexpr int kCounters = 18;
inline constexpr int kCounterWidth = 40;
inline constexpr uint32_t kMsrCounter0 = 0x300;
inline constexpr uint32_t kMsrCccr0 = 0x360;
// The ESCR MSRs lie in 3A0H..3E1H, with gaps (FindEscr).
inline constexpr uint32_t kMsrEscrFirst = 0x3A0;
inline constexpr uint32_t kMsrEscrLast = 0x3E1;
// The first IQ counter (MSR_IQ_COUNTER0, counter 12).
inline constexpr int kIqCounter0 = 12;

// CCCR fields (the figure "Counter Configuration Control Register (CCCR)",
// processors without Intel Hyper-Threading Technology).
inline constexpr uint64_t kCccrExtCascade = 1ull << 11;  // IQ CCCRs of 0F_02H-0F_06H: extended cascading
inline constexpr uint64_t kCccrEnable = 1ull << 12;
inline constexpr int kCccrEscrSelectShift = 13;           // bits 15:13
inline constexpr uint64_t kCccrActiveThread = 3ull << 16;  // "reserved: must be set to 11B"
inline constexpr uint64_t kCccrCompare = 1ull << 18;
inline constexpr uint64_t kCccrComplement = 1ull << 19;
inline constexpr int kCccrThresholdShift = 20;            // bits 23:20
inline constexpr uint64_t kCccrEdge = 1ull << 24;
inline constexpr uint64_t kCccrForceOvf = 1ull << 25;
inline constexpr uint64_t kCccrOvfPmi = 1ull << 26;        // OVF_PMI (OVF_PMI_T0 on HT parts)
inline constexpr uint64_t kCccrCascade = 1ull << 30;
inline constexpr uint64_t kCccrOvf = 1ull << 31;
// Bits a WRMSR may set: 12-26, 30, 31 (and 11 on the IQ CCCRs); the others
// (11:0, 29:27, 63:32) are reserved: #GP (docs/pmu-model.md).
inline constexpr uint64_t kCccrWritable = 0xC7FFF000ull;

// ESCR fields (the figure "Event Selection Control Register (ESCR) for
// Pentium 4 and Intel Xeon Processors without Intel HT Technology Support").
inline constexpr uint64_t kEscrUsr = 1ull << 2;        // T0_USR: count at CPL 1-3
inline constexpr uint64_t kEscrOs = 1ull << 3;         // T0_OS: count at CPL 0
inline constexpr uint64_t kEscrTagEnable = 1ull << 4;
inline constexpr int kEscrTagShift = 5;                // bits 8:5
inline constexpr int kEscrEventMaskShift = 9;          // bits 24:9
inline constexpr int kEscrEventSelectShift = 25;       // bits 30:25
// Bits 30:2; bits 1:0 (T1_USR/T1_OS on HT parts), 31 and 63:32 reserved: #GP.
inline constexpr uint64_t kEscrWritable = 0x7FFFFFFCull;

// The events vbts counts (SDM vol. 3B, chapter 19, "Performance
// Monitoring Events For Intel NetBurst Microarchitecture for At-Retirement
// Counting").
inline constexpr uint32_t kEventInstrRetired = 0x02;   // on MSR_CRU_ESCR0/1
inline constexpr uint32_t kEventBranchRetired = 0x06;  // on MSR_CRU_ESCR2/3
// instr_retired event mask: NBOGUSNTAG (0), NBOGUSTAG (1), BOGUSNTAG (2), BOGUSTAG (3).
inline constexpr uint32_t kMaskNbogusNtag = 1u << 0, kMaskNbogusTag = 1u << 1;
// branch_retired event mask: MMNP (0, not taken predicted), MMNM (1, not
// taken mispredicted), MMTP (2, taken predicted), MMTM (3, taken mispredicted).
inline constexpr uint32_t kMaskMmnp = 1u << 0, kMaskMmtp = 1u << 2;
// front_end_event (08H on MSR_CRU_ESCR2/3, "Can Support PEBS: Yes"): the
// retirement of µops the front-end tagging mechanism tagged; mask NBOGUS (0),
// BOGUS (1).  The tagging: uop_type (02H on MSR_RAT_ESCR0/1), mask TAGLOADS
// (1), TAGSTORES (2) — "Setting the TAGLOADS and TAGSTORES mask bits does
// not cause a counter to increment. They are only used to tag uops."
inline constexpr uint32_t kEventFrontEnd = 0x08;
inline constexpr uint32_t kMaskNbogus = 1u << 0;
inline constexpr uint32_t kEventUopType = 0x02;
inline constexpr uint32_t kMaskTagLoads = 1u << 1, kMaskTagStores = 1u << 2;
inline constexpr uint32_t kMsrRatEscr0 = 0x3BC, kMsrRatEscr1 = 0x3BD;
// replay_event (09H on MSR_CRU_ESCR2/3, "Can Support PEBS: Yes"): the
// retirement of µops the replay tagging mechanism tagged (mask NBOGUS, bit
// 0).  The metric is chosen in MSR_PEBS_ENABLE (bits below, with UOP_TAG)
// and MSR_PEBS_MATRIX_VERT (which µops: loads, stores, branches); the split
// metrics also need load_port_replay (04H, SPLIT_LD: mask bit 1) or
// store_port_replay (05H, SPLIT_ST: mask bit 1) on MSR_SAAT_ESCR0/1 (the SDM's
// "List of Metrics Available for Replay Tagging").
inline constexpr uint32_t kEventReplay = 0x09;
inline constexpr uint64_t kReplay1stL = 1ull << 0, kReplay2ndL = 1ull << 1, kReplayDtlb = 1ull << 2,
                          kReplayMob = 1ull << 9, kReplaySplit = 1ull << 10, kReplayMispred = 1ull << 15;
inline constexpr uint64_t kVertLoads = 1ull << 0, kVertStores = 1ull << 1, kVertBranches = 1ull << 4;
inline constexpr uint32_t kMsrSaatEscr0 = 0x3AE, kMsrSaatEscr1 = 0x3AF;
inline constexpr uint32_t kEventLoadPortReplay = 0x04, kEventStorePortReplay = 0x05;
inline constexpr uint32_t kMaskSplitLdSt = 1u << 1;

// PEBS (SDM vol. 3B, "Precise Event-Based Sampling (PEBS)" of the NetBurst
// section; vol. 4, the NetBurst MSR table): MSR_PEBS_ENABLE (3F1H) holds the
// replay-tagging metric bits (12:0, and 15 and 16 for Tagged_mispred_branch in
// the replay-tagging table), UOP_TAG (24) and ENABLE_PEBS_MY_THR (25), which
// turns PEBS on (ENABLE_PEBS_OTH_THR, 26, exists only with HT);
// MSR_PEBS_MATRIX_VERT (3F2H) the replay-tagging bits 0 (loads), 1 (stores)
// and 4 (branches).  Only MSR_IQ_COUNTER4 (counter 16) takes PEBS.
inline constexpr uint32_t kMsrPebsEnable = 0x3F1;
inline constexpr uint32_t kMsrPebsMatrixVert = 0x3F2;
inline constexpr uint64_t kPebsEnableUopTag = 1ull << 24;
inline constexpr uint64_t kPebsEnableMyThr = 1ull << 25;
inline constexpr uint64_t kPebsEnableWritable = 0x1FFFull | (3ull << 15) | kPebsEnableUopTag | kPebsEnableMyThr;
inline constexpr uint64_t kPebsMatrixVertWritable = 0x13;
inline constexpr int kPebsCounter = 16;
// The record: EFLAGS, linear IP, EAX, EBX, ECX, EDX, ESI, EDI, EBP, ESP, 4
// bytes each in the 32-bit DS format (the SDM's "PEBS Record Format" figure).
inline constexpr uint64_t kPebsRecord32 = 40;

// What an ESCR feeds.
enum class Unit : uint8_t { kOther, kCru01, kCru23, kRat };
struct Escr {
  uint32_t msr;
  const char* name;
  int select;         // the CCCR's ESCR select value (bits 15:13) for this ESCR
  uint32_t counters;  // bit n: counter n can take its events
  Unit unit;
};

// The ESCR at `msr` on family 0FH model 03H; nullptr where there is none
// (the gaps of 3A0H..3E1H, and MSR_IQ_ESCR0/1, 3BAH/3BBH, which only
// models 01H and 02H have).
const Escr* FindEscr(uint32_t msr);
// The ESCR whose events counter `counter` takes with ESCR select `select`;
// nullptr when that counter has no ESCR with that select value.
const Escr* EscrFor(int counter, int select);
// The counter whose overflow enables `counter` when its CCCR.CASCADE is set
// (its alternate in the other pair of the same group: n XOR 2); -1 for
// counters 16 and 17, which cannot take part in (plain) cascading.
int CascadeSource(int counter);

}  // namespace vbts::pmu::netburst

#endif  // VBTS_PMU_NETBURST_H_
