// btrace.h: the branch trace GDB reads from vbts (`record btrace bts`):
// the guest's control transfers turned into blocks of sequential
// instructions, as GDB's branch trace XML has them (gdb/features/btrace.dtd:
// <btrace version="1.0"><block begin="0x.." end="0x.."/>...</btrace>,
// newest block first; a block's `end` is the address of its last
// instruction, the newest block ends at the current PC).
#ifndef VBTS_GDB_BTRACE_H_
#define VBTS_GDB_BTRACE_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pmu/branch.h"

namespace vbts::gdb {

class BranchTrace {
 public:
  // Bytes of GDB's BTS buffer (Qbtrace-conf:bts:size); one block costs one
  // 24-byte BTS record, so at most size/24 blocks are kept (the oldest go).
  static constexpr uint64_t kRecordBytes = 24;
  static constexpr uint64_t kDefaultSize = 64 * 1024;

  // Starts a trace at `pc` (linear) with a buffer of `size` bytes.
  void Start(uint64_t pc, uint64_t size);
  void Stop();
  bool active() const { return active_; }
  uint64_t size() const { return size_; }

  // One retired instruction or event delivery, in program order (every
  // instruction, including the not-taken ones: pmu::Branch kind kNone).
  void Add(const pmu::Branch& b);
  // An event delivery when the feed has only the taken transfers and the
  // events (the tracer's block-level observation, which does not report
  // every instruction): `last_retired` is the last instruction that retired
  // in the open block before the event (the machine decodes forward from
  // open_begin() to b.from), nothing if none did.
  void AddEvent(const pmu::Branch& b, std::optional<uint64_t> last_retired);
  // Where the open block begins (the target of the last transfer).
  uint64_t open_begin() const { return begin_; }

  // qXfer:btrace:read:ANNEX with the guest stopped at `pc`: "all" (the whole
  // buffer), "new" (all, or an empty trace if nothing ran since the last
  // read), "delta" (the blocks since the last read; the oldest has begin 0,
  // as GDB's stitching expects).  Errors for unknown annexes or no trace.
  absl::StatusOr<std::string> Read(absl::string_view annex, uint64_t pc);
  // qXfer:btrace-conf:read.
  std::string ConfigXml() const;

 private:
  struct Block {
    uint64_t begin, end;
  };
  void Close(uint64_t end);
  bool active_ = false;
  uint64_t size_ = kDefaultSize;
  std::deque<Block> blocks_;   // oldest first
  uint64_t begin_ = 0;         // start of the open block
  uint64_t last_ = 0;          // last retired instruction in the open block
  bool open_has_insn_ = false;
  uint64_t closed_total_ = 0;  // blocks ever closed (delta reads count from here)
  // closed_total_ once the block that held the last read's PC closed: the
  // blocks a delta read returns after its first one.
  uint64_t read_mark_ = 0;
  uint64_t read_pc_ = 0;       // the PC at the last read
  bool read_once_ = false;
  bool read_open_ = false;     // the open block still holds read_pc_
  bool read_retired_ = false;  // an instruction retired in it since the read
  uint64_t read_end_ = 0;      // end of that block once closed (see Read)
  bool changed_ = false;       // anything added since the last read
};

}  // namespace vbts::gdb

#endif  // VBTS_GDB_BTRACE_H_
