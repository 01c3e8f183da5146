// gdb_packet_fuzz.cc: libFuzzer target for the GDB stub (gdb/stub.h, with
// the framing of gdb/rsp.h): the input is what a client sends, cut into
// reads at places derived from the input, to a Stub over a fake target.
// Whenever the client resumes the guest, the next read arrives while it
// runs (only Ctrl-C counts then), and the fake machine then stops it for a
// reason derived from the input, after feeding the stub's branch trace a
// few transfers.  Nothing may crash, and each call's output stays within
// what its input can ask for (one reply of at most 2*kMaxPacket escaped
// bytes per input byte: a `-` resends the last one), so nothing grows
// without bound.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <string>

#include "gdb/stub.h"
#include "gdb/testing/fake_target.h"

namespace {

// FNV-1a of the input: the cuts and stop reasons follow from the bytes.
uint64_t Hash(const uint8_t* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 0x100000001b3ull;
  return h;
}

struct Rng {
  uint64_t s;
  uint64_t Next() {  // xorshift64
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

void CheckBounded(const std::string& out, size_t input) {
  if (out.size() > (input + 1) * (2 * vbts::gdb::kMaxPacket + 8) + 5 * (2 * vbts::gdb::kMaxPacket + 8))
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vbts::gdb;
  Rng rng{Hash(data, size) | 1};
  testing::FakeTarget target(0x1000, 0x1000);
  target.regs.st.rip = 0x1000;
  StubOptions options;
  options.arch = (rng.Next() & 1) ? Arch::kX86_64 : Arch::kI386;
  if (rng.Next() & 1) options.exec_file = "/images/gdb_demo.elf";  // qXfer:exec-file:read offered
  Stub stub(target, options);
  stub.Stopped(Stop{Stop::kInterrupted});  // the attach stop

  bool stop_after_next_read = false;
  size_t pos = 0;
  while (pos < size) {
    const size_t n = std::min<size_t>(size - pos, 1 + rng.Next() % 97);
    const std::string out = stub.Receive(std::string(reinterpret_cast<const char*>(data + pos), n));
    pos += n;
    CheckBounded(out, n);

    if (stop_after_next_read && stub.running()) {
      // The guest ran meanwhile: transfers for the trace, then a stop.
      for (uint64_t i = rng.Next() % 8; i > 0; i--) {
        vbts::pmu::Branch b;
        b.kind = static_cast<vbts::pmu::BranchKind>(rng.Next() % 19);
        b.from = 0x1000 + rng.Next() % 0x100;
        b.to = 0x1000 + rng.Next() % 0x100;
        stub.btrace().Add(b);
      }
      target.regs.st.rip = 0x1000 + rng.Next() % 0x100;
      Stop stop;
      stop.kind = static_cast<Stop::Kind>(rng.Next() % 6);
      stop.point = static_cast<PointType>(rng.Next() % 5);
      stop.address = rng.Next();
      stop.status = static_cast<int>(rng.Next() % 300);
      if (stub.interrupt_requested()) stop.kind = Stop::kInterrupted;
      CheckBounded(stub.Stopped(stop), 0);
      stop_after_next_read = false;
    }
    if (stub.TakeResume()) stop_after_next_read = true;
    if (stub.killed()) break;
  }
  if (stub.running()) CheckBounded(stub.Stopped(Stop{Stop::kStep}), 0);
  return 0;
}
