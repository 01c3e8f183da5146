// btrace.cc: GDB's branch trace in BTS format (gdb/btrace.h).
//
// GDB reads the trace as blocks of sequential instructions, newest first
// (GDB manual, "Branch Trace Format"), the way Linux perf BTS gives it to
// gdbserver: each BTS record (from, to) ends one block at `from` and begins
// the next at `to`, and the newest block ends at the current PC.  vbts sees
// every retired instruction, so it builds the same blocks directly; unlike
// BTS hardware, an exception or interrupt ends the block at the last
// instruction that really retired (the faulting/interrupted one did not).
//
// Delta reads follow what GDB's btrace_stitch_bts (gdb/btrace.c) does with
// them: it replaces the `begin` of the chronologically first block (which
// must be 0) with the PC of its previous read, drops the instruction it had
// at that PC and decodes again from there, so that first block's `end`
// must be the end of the block that held the previous PC; a single block
// ending at the previous PC means "no progress".
#include "gdb/btrace.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"

namespace vbts::gdb {
namespace {

constexpr char kHeader[] =
    "<?xml version=\"1.0\"?>\n<!DOCTYPE btrace SYSTEM \"btrace.dtd\">\n<btrace version=\"1.0\">\n";
constexpr char kFooter[] = "</btrace>\n";

struct Range {
  uint64_t begin, end;
};

// `chrono` oldest first; the XML wants newest first.
std::string Document(const std::vector<Range>& chrono) {
  std::string xml = kHeader;
  for (auto it = chrono.rbegin(); it != chrono.rend(); ++it)
    absl::StrAppendFormat(&xml, "<block begin=\"0x%x\" end=\"0x%x\"/>\n", it->begin, it->end);
  xml += kFooter;
  return xml;
}

}  // namespace

void BranchTrace::Start(uint64_t pc, uint64_t size) {
  Stop();
  active_ = true;
  size_ = size;
  begin_ = last_ = pc;
  // Starting counts as a read at `pc`: GDB seeds its BTS trace with the PC
  // at enable time (btrace_add_pc) and asks for a delta first.
  read_once_ = true;
  read_pc_ = pc;
  read_open_ = true;
}

void BranchTrace::Stop() {
  active_ = false;
  blocks_.clear();
  begin_ = last_ = 0;
  open_has_insn_ = false;
  closed_total_ = read_mark_ = read_pc_ = read_end_ = 0;
  read_once_ = read_open_ = read_retired_ = changed_ = false;
}

void BranchTrace::Add(const pmu::Branch& b) {
  if (!active_) return;
  changed_ = true;
  if (pmu::IsEventDelivery(b.kind)) {
    // b.from was interrupted or faulted: it did not retire, the block ends
    // at the instruction before it (if any retired in this block at all).
    Close(last_);
  } else {
    if (read_open_) read_retired_ = true;
    last_ = b.from;
    open_has_insn_ = true;
    if (!b.taken()) return;
    Close(b.from);
  }
  begin_ = last_ = b.to;
}

void BranchTrace::AddEvent(const pmu::Branch& b, std::optional<uint64_t> last_retired) {
  if (!active_) return;
  changed_ = true;
  if (last_retired) {
    // The block is sequential: an instruction at or after the read's PC
    // retired means the read's PC did too.
    if (read_open_ && *last_retired >= read_pc_) read_retired_ = true;
    last_ = *last_retired;
    open_has_insn_ = true;
  }
  Close(last_);
  begin_ = last_ = b.to;
}

// Ends the open block at `end` (meaningful only if it has an instruction:
// empty blocks are not kept) and keeps the account delta reads need.
void BranchTrace::Close(uint64_t end) {
  if (open_has_insn_) {
    blocks_.push_back({begin_, end});
    closed_total_++;
    const uint64_t keep = std::max<uint64_t>(1, size_ / kRecordBytes);
    while (blocks_.size() > keep) blocks_.pop_front();
  }
  open_has_insn_ = false;
  if (read_open_) {
    // The block GDB last saw as newest is complete.  If the instruction at
    // the read's PC never retired (an event was delivered first), stitch
    // at that PC itself: GDB already shows it as its last instruction.
    read_open_ = false;
    read_end_ = read_retired_ ? end : read_pc_;
    read_mark_ = closed_total_;
  }
}

absl::StatusOr<std::string> BranchTrace::Read(absl::string_view annex, uint64_t pc) {
  if (!active_) return absl::FailedPreconditionError("branch trace is not enabled");
  std::vector<Range> chrono;
  if (annex == "all" || annex == "new") {
    if (annex == "new" && read_once_ && !changed_) {
      chrono.clear();  // nothing ran: an empty trace keeps GDB's own
    } else {
      chrono.reserve(blocks_.size() + 1);
      for (const Block& b : blocks_) chrono.push_back({b.begin, b.end});
      chrono.push_back({begin_, pc});
    }
  } else if (annex == "delta") {
    if (!read_once_) return absl::FailedPreconditionError("no earlier branch trace read to extend");
    if (read_open_) {
      chrono.push_back({0, pc});
    } else {
      const uint64_t fresh = closed_total_ - read_mark_;
      if (fresh > blocks_.size())
        return absl::OutOfRangeError(
            absl::StrFormat("the branch trace buffer dropped %d blocks since the last read", fresh - blocks_.size()));
      chrono.reserve(fresh + 2);
      chrono.push_back({0, read_end_});
      for (size_t i = blocks_.size() - fresh; i < blocks_.size(); i++) chrono.push_back({blocks_[i].begin, blocks_[i].end});
      chrono.push_back({begin_, pc});
    }
  } else {
    return absl::InvalidArgumentError(absl::StrFormat("unknown branch trace annex \"%s\"", annex));
  }
  read_once_ = true;
  read_pc_ = pc;
  read_open_ = true;
  read_retired_ = false;
  changed_ = false;
  return Document(chrono);
}

std::string BranchTrace::ConfigXml() const {
  std::string xml =
      "<?xml version=\"1.0\"?>\n<!DOCTYPE btrace-conf SYSTEM \"btrace-conf.dtd\">\n<btrace-conf version=\"1.0\">\n";
  if (active_) absl::StrAppendFormat(&xml, "<bts size=\"0x%x\"/>\n", size_);
  xml += "</btrace-conf>\n";
  return xml;
}

}  // namespace vbts::gdb
