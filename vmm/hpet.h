// hpet.h: the PC's High Precision Event Timer block (IA-PC HPET
// Specification 1.0a, Intel, 2004; "the spec" below) at 0xFED00000, which the
// ACPI HPET table announces (vmm/acpi_tables.h). Pure logic: every call takes
// the caller's time in nanoseconds (the guest's clock: vcpu/guest_clock.h on
// the TCG engine, the host's monotonic clock on the KVM engine), and
// interrupts leave through a callback. What QEMU's `hpet` device offers a
// guest (hw/timer/hpet.c), with the spec's rules where the two differ:
//
//  - 3 timers, a 64-bit main counter at 100 MHz (COUNTER_CLK_PERIOD 10 ns),
//    vendor 8086H, revision 1, legacy replacement capable: capabilities
//    8086A201H in the low half, as QEMU's (and the ACPI table's block ID).
//  - Each timer: 64-bit capable, periodic capable, no FSB (MSI) delivery (QEMU's
//    default). Its I/O APIC routes (Tn_INT_ROUTE_CAP) are inputs 16-23:
//    vbts's ISA lines 0-15 reach the 8259s as well as the I/O APIC (KVM's
//    default routing, which the MADT states), so a route below 16 would be
//    two lines at once on the KVM engine. A route outside the capability
//    delivers nothing (the spec: "unpredictable").
//  - Legacy replacement (GEN_CONF.LEG_RT_CNF): timer 0 on ISA line 0, timer 1
//    on ISA line 8, whatever their routes; the 8254's (and the RTC's)
//    interrupts are cut off meanwhile (the machine asks legacy()). ISA line 0
//    is the I/O APIC's input 0 on this machine (no interrupt source override
//    in the MADT), where QEMU's PC overrides it to input 2.
//  - Comparators match when the counter reaches them (the spec), not "soon"
//    when written behind the counter (QEMU): a one-shot comparator in the past
//    fires after the counter wraps (2^32 ticks in 32-bit mode, ~43 s). A
//    one-shot timer in 32-bit mode also fires when the counter's low 32 bits
//    wrap (the spec's one-shot mode; QEMU likewise). A periodic comparator
//    adds the period at each match; matches missed between two calls
//    coalesce into one interrupt (one edge, or the status bit already set).
//  - In periodic mode a write of the comparator sets the period, and the
//    comparator itself only with Tn_VAL_SET_CNF, which the write clears
//    (QEMU's reading of the spec, which Linux's hpet_set_periodic follows);
//    a 64-bit write is one write (QEMU splits it in two).
//  - Level-triggered timers set their GINTR_STA bit at a match and hold their
//    line while it is set, the interrupt enabled and the block enabled;
//    writing 1 clears it. Edge-triggered timers pulse their line and leave
//    the bit clear. A disabled interrupt still lets the comparator run.
//  - MAIN_CNT is writable while the block is halted (ENABLE_CNF clear);
//    writes while it runs are dropped (the spec: software halts it first).
//  - Registers take accesses of any size at any offset inside them (the
//    bytes they cover); offsets that are no register read 0 and drop writes.
#ifndef VBTS_VMM_HPET_H_
#define VBTS_VMM_HPET_H_

#include <array>
#include <cstdint>
#include <functional>
#include <optional>

namespace vbts::vmm {

class Hpet {
 public:
  static constexpr uint64_t kBase = 0xFED00000;
  static constexpr uint64_t kSize = 0x400;
  static constexpr int kTimers = 3;
  static constexpr uint64_t kTickNs = 10;                  // 100 MHz
  static constexpr uint32_t kPeriodFs = 10'000'000;        // COUNTER_CLK_PERIOD
  static constexpr uint32_t kBlockId = 0x8086A201;         // GCAP_ID[31:0]
  static constexpr uint32_t kRouteCap = 0x00FF0000;        // I/O APIC inputs 16-23
  static constexpr uint32_t kLegacyLine[2] = {0, 8};       // ISA lines of timers 0 and 1

  // Register offsets (the spec, table 3).
  static constexpr uint64_t kCapId = 0x000, kConfig = 0x010, kIntStatus = 0x020, kCounter = 0x0F0;
  static constexpr uint64_t kTimer0 = 0x100, kTimerStride = 0x20;  // +0 config/caps, +8 comparator, +10H FSB route
  // GEN_CONF and Tn_CONF_CAP bits.
  static constexpr uint64_t kEnable = 1u << 0, kLegacy = 1u << 1;
  static constexpr uint64_t kTnLevel = 1u << 1, kTnIntEnable = 1u << 2, kTnPeriodic = 1u << 3,
                            kTnPeriodicCap = 1u << 4, kTnSizeCap = 1u << 5, kTnValSet = 1u << 6, kTn32Bit = 1u << 8,
                            kTnRouteShift = 9, kTnRouteMask = 0x1Fu << 9, kTnFsbEnable = 1u << 14;

  // An interrupt line: ISA line `n` (legacy replacement: the 8259s and the
  // I/O APIC) or I/O APIC input `n` alone.
  struct Line {
    bool isa = false;
    uint32_t n = 0;
    bool operator==(const Line&) const = default;
  };
  using SetLine = std::function<void(Line line, bool level)>;

  explicit Hpet(SetLine set_line);

  // Power-up: halted, counter 0, every timer's configuration 0, comparators
  // all ones (QEMU's reset values; the spec leaves them to the vendor).
  void Reset();

  uint64_t Read(uint64_t offset, int size, uint64_t now_ns);
  void Write(uint64_t offset, int size, uint64_t value, uint64_t now_ns);

  // Raises the interrupts of the matches up to now_ns.
  void Advance(uint64_t now_ns);
  // When the next interrupt is due, in the caller's time, if a timer can
  // raise one (at or before the caller's now: due already, for Advance).
  std::optional<uint64_t> NextInterruptNs() const;
  // The caller changes clocks (the machine moves to the other engine):
  // `old_now_ns` on the old clock is `new_now_ns` on the new one. The
  // counter goes on from the value it has.
  void Rebase(uint64_t old_now_ns, uint64_t new_now_ns);

  bool legacy() const { return (config_ & (kEnable | kLegacy)) == (kEnable | kLegacy); }
  uint64_t Counter(uint64_t now_ns) const;

 private:
  struct Timer {
    uint64_t config = 0;
    uint64_t cmp = ~0ull;
    uint64_t period = 0;
    uint64_t fsb = 0;
    bool asserted = false;  // a level held on `asserted_line`
    Line asserted_line;
  };
  bool enabled() const { return (config_ & kEnable) != 0; }
  // Timer n's register `field` (0 config and capabilities, 8 comparator,
  // 10H FSB route) at block offset `reg`, if it is one.
  struct TimerRegister {
    int n;
    uint64_t field;
  };
  static std::optional<TimerRegister> TimerRegisterAt(uint64_t reg);
  uint64_t Register(uint64_t reg, uint64_t now_ns) const;
  // Writes the bytes `mask` covers of register `reg` (value in place).
  void SetRegister(uint64_t reg, uint64_t value, uint64_t mask, uint64_t now_ns);
  // Where timer n's interrupt goes now, if anywhere.
  std::optional<Line> Route(int n) const;
  // Matches of t's comparator in the `elapsed` ticks after counter value
  // `from` (modulo 2^64: the counter wraps; in 32-bit one-shot mode also the
  // wraps of the low half); moves a periodic comparator past them. Returns
  // whether there was one.
  static bool Match(Timer& t, uint64_t from, uint64_t elapsed);
  // How many ticks after counter value `from` t next matches (>= 1), if
  // before the counter comes back to `from`.
  static std::optional<uint64_t> TicksToMatch(const Timer& t, uint64_t from);
  void Fire(int n);
  // Each level-triggered line as its timer's state says it should be.
  void SyncLevels();

  SetLine set_line_;
  uint64_t config_ = 0;
  uint64_t status_ = 0;
  uint64_t counter_ = 0;    // while halted; at enable_ns_ while running
  uint64_t enable_ns_ = 0;  // when it last started running (the caller's time)
  uint64_t processed_ = 0;  // matches up to this counter value are done
  std::array<Timer, kTimers> timers_;
};

}  // namespace vbts::vmm

#endif  // VBTS_VMM_HPET_H_
