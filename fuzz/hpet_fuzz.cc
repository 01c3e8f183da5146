// hpet_fuzz.cc: libFuzzer target for the HPET (vmm/hpet.h): a guest's
// register accesses of every size and offset, time moving on in steps, to the
// next announced interrupt or far ahead, and the changes of clock the machine
// makes between engines, all from the input.
//
// Checks: no crash; a read returns no more bits than its size; the
// capabilities never change; an interrupt comes exactly when
// NextInterruptNs announced it (none at the nanosecond before, one at it:
// the machine's run loops sleep and stop by that announcement); no line is
// lowered more often than raised, nor held by more than the three timers.
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>

#include "fuzz/fuzz_input.h"
#include "vmm/hpet.h"

namespace {

using vbts::vmm::Hpet;

constexpr uint64_t kRegisters[] = {Hpet::kCapId, Hpet::kConfig, Hpet::kIntStatus, Hpet::kCounter,
                                   0x100, 0x108, 0x110, 0x120, 0x128, 0x130, 0x140, 0x148, 0x150};
constexpr uint64_t kMaxNs = uint64_t{1} << 62;

uint64_t Offset(vbts::fuzz::FuzzInput& in) {
  const uint8_t shape = in.U8();
  if (shape & 0x80) return in.U16() % Hpet::kSize;  // anywhere in the block
  return kRegisters[(shape & 0x0F) % std::size(kRegisters)] + ((shape >> 4) & 1) * 4;  // a register or its high half
}

int Size(vbts::fuzz::FuzzInput& in) { return 1 << (in.U8() % 4); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vbts::fuzz::FuzzInput in(data, size);
  std::map<uint32_t, int> held;  // per line (ISA lines as 100 + n): raises - lowers
  uint64_t raises = 0, calls = 0;
  Hpet hpet([&](Hpet::Line line, bool level) {
    int& h = held[line.isa ? 100 + line.n : line.n];
    h += level ? 1 : -1;
    if (h < 0 || h > Hpet::kTimers) __builtin_trap();
    raises += level;
    calls++;
  });
  const uint64_t caps = hpet.Read(Hpet::kCapId, 8, 0);
  uint64_t now = 0;
  for (int ops = 0; !in.empty() && ops < 4096; ops++) {
    switch (in.U8() % 5) {
      case 0: {
        const uint64_t off = Offset(in);
        const int n = Size(in);
        hpet.Write(off, n, in.Value(), now);
        break;
      }
      case 1: {
        const uint64_t off = Offset(in);
        const int n = Size(in);
        const uint64_t v = hpet.Read(off, n, now);
        if (n < 8 && (v >> (8 * n)) != 0) __builtin_trap();
        break;
      }
      case 2:
      case 3: {
        // On to a target time, stopping at each announced interrupt on the way.
        const uint8_t how = in.U8();
        uint64_t delta = how & 1 ? in.U16() : how & 2 ? in.U32() : in.U64() >> 8;
        const uint64_t target = now + (delta < kMaxNs - now ? delta : kMaxNs - now);
        for (int stops = 0; stops < 16; stops++) {
          const std::optional<uint64_t> next = hpet.NextInterruptNs();
          if (!next || *next > target) break;
          if (*next > now) {
            const uint64_t before = calls;
            hpet.Advance(*next - 1);
            if (calls != before) __builtin_trap();  // an interrupt before its time
            now = *next - 1;
          }
          const uint64_t before = raises;
          hpet.Advance(*next > now ? *next : now);
          if (raises == before) __builtin_trap();  // none at its time
          if (*next > now) now = *next;
        }
        hpet.Advance(target);
        now = target;
        break;
      }
      default: {
        // The machine moves to the other engine's clock.
        const uint64_t other = in.U64() % kMaxNs;
        hpet.Rebase(now, other);
        now = other;
        break;
      }
    }
  }
  if (hpet.Read(Hpet::kCapId, 8, now) != caps) __builtin_trap();
  return 0;
}
