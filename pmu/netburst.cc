// netburst.cc: the ESCR table of family 0FH model 03H (pmu/netburst.h).
#include "pmu/netburst.h"

namespace vbts::pmu::netburst {
namespace {

// Counter sets (SDM vol. 3B, the table "Performance Counter MSRs and
// Associated CCCR and ESCR MSRs (Pentium 4 and Intel Xeon Processors)"):
// in the BPU, MS and FLAME groups an ESCR0 feeds the group's first two
// counters, an ESCR1 the last two; in the IQ group the ESCR0/2/4 ones feed
// counters 12, 13 and 16, the ESCR1/3/5 ones 14, 15 and 17.
constexpr uint32_t C(int a, int b) { return (1u << a) | (1u << b); }
constexpr uint32_t kBpu0 = C(0, 1), kBpu1 = C(2, 3), kMs0 = C(4, 5), kMs1 = C(6, 7), kFlame0 = C(8, 9),
                   kFlame1 = C(10, 11), kIq0 = C(12, 13) | (1u << 16), kIq1 = C(14, 15) | (1u << 17);

// In address order; ESCR select values from the same table.
constexpr Escr kEscrs[] = {
    {0x3A0, "MSR_BSU_ESCR0", 7, kBpu0, Unit::kOther},   {0x3A1, "MSR_BSU_ESCR1", 7, kBpu1, Unit::kOther},
    {0x3A2, "MSR_FSB_ESCR0", 6, kBpu0, Unit::kOther},   {0x3A3, "MSR_FSB_ESCR1", 6, kBpu1, Unit::kOther},
    {0x3A4, "MSR_FIRM_ESCR0", 1, kFlame0, Unit::kOther}, {0x3A5, "MSR_FIRM_ESCR1", 1, kFlame1, Unit::kOther},
    {0x3A6, "MSR_FLAME_ESCR0", 0, kFlame0, Unit::kOther}, {0x3A7, "MSR_FLAME_ESCR1", 0, kFlame1, Unit::kOther},
    {0x3A8, "MSR_DAC_ESCR0", 5, kFlame0, Unit::kOther}, {0x3A9, "MSR_DAC_ESCR1", 5, kFlame1, Unit::kOther},
    {0x3AA, "MSR_MOB_ESCR0", 2, kBpu0, Unit::kOther},   {0x3AB, "MSR_MOB_ESCR1", 2, kBpu1, Unit::kOther},
    {0x3AC, "MSR_PMH_ESCR0", 4, kBpu0, Unit::kOther},   {0x3AD, "MSR_PMH_ESCR1", 4, kBpu1, Unit::kOther},
    {0x3AE, "MSR_SAAT_ESCR0", 2, kFlame0, Unit::kOther}, {0x3AF, "MSR_SAAT_ESCR1", 2, kFlame1, Unit::kOther},
    {0x3B0, "MSR_U2L_ESCR0", 3, kFlame0, Unit::kOther}, {0x3B1, "MSR_U2L_ESCR1", 3, kFlame1, Unit::kOther},
    {0x3B2, "MSR_BPU_ESCR0", 0, kBpu0, Unit::kOther},   {0x3B3, "MSR_BPU_ESCR1", 0, kBpu1, Unit::kOther},
    {0x3B4, "MSR_IS_ESCR0", 1, kBpu0, Unit::kOther},    {0x3B5, "MSR_IS_ESCR1", 1, kBpu1, Unit::kOther},
    {0x3B6, "MSR_ITLB_ESCR0", 3, kBpu0, Unit::kOther},  {0x3B7, "MSR_ITLB_ESCR1", 3, kBpu1, Unit::kOther},
    {0x3B8, "MSR_CRU_ESCR0", 4, kIq0, Unit::kCru01},    {0x3B9, "MSR_CRU_ESCR1", 4, kIq1, Unit::kCru01},
    // 3BAH/3BBH MSR_IQ_ESCR0/1: family 0FH models 01H-02H only (vol. 4, the NetBurst MSR table).
    {0x3BC, "MSR_RAT_ESCR0", 2, kIq0, Unit::kRat},      {0x3BD, "MSR_RAT_ESCR1", 2, kIq1, Unit::kRat},
    {0x3BE, "MSR_SSU_ESCR0", 3, kIq0, Unit::kOther},
    {0x3C0, "MSR_MS_ESCR0", 0, kMs0, Unit::kOther},     {0x3C1, "MSR_MS_ESCR1", 0, kMs1, Unit::kOther},
    {0x3C2, "MSR_TBPU_ESCR0", 2, kMs0, Unit::kOther},   {0x3C3, "MSR_TBPU_ESCR1", 2, kMs1, Unit::kOther},
    {0x3C4, "MSR_TC_ESCR0", 1, kMs0, Unit::kOther},     {0x3C5, "MSR_TC_ESCR1", 1, kMs1, Unit::kOther},
    {0x3C8, "MSR_IX_ESCR0", 5, kBpu0, Unit::kOther},    {0x3C9, "MSR_IX_ESCR1", 5, kBpu1, Unit::kOther},
    {0x3CA, "MSR_ALF_ESCR0", 1, kIq0, Unit::kOther},    {0x3CB, "MSR_ALF_ESCR1", 1, kIq1, Unit::kOther},
    {0x3CC, "MSR_CRU_ESCR2", 5, kIq0, Unit::kCru23},    {0x3CD, "MSR_CRU_ESCR3", 5, kIq1, Unit::kCru23},
    {0x3E0, "MSR_CRU_ESCR4", 6, kIq0, Unit::kOther},    {0x3E1, "MSR_CRU_ESCR5", 6, kIq1, Unit::kOther},
};

}  // namespace

const Escr* FindEscr(uint32_t msr) {
  for (const Escr& e : kEscrs)
    if (e.msr == msr) return &e;
  return nullptr;
}

const Escr* EscrFor(int counter, int select) {
  if (counter < 0 || counter >= kCounters) return nullptr;
  for (const Escr& e : kEscrs)
    if (e.select == select && (e.counters & (1u << counter))) return &e;
  return nullptr;
}

int CascadeSource(int counter) {
  if (counter < 0 || counter >= 16) return -1;
  return counter ^ 2;
}

}  // namespace vbts::pmu::netburst
