// report_graph.cc: the report formats that rebuild structure from the
// transfer stream: drcov (basic-block coverage), folded (call stacks for
// flame graphs) and dot (control-flow graph).  docs/cli.md describes each.
#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "record/report_internal.h"

namespace vbts::record::report_internal {

using pmu::BranchKind;
using trace::Record;

std::optional<BlockTracker::Block> BlockTracker::Next(const Record& r) {
  std::optional<Block> b;
  if (start_ && r.from >= *start_ && r.from - *start_ < kMaxBlock) {
    uint64_t end = r.from;
    if (!pmu::IsEventDelivery(r.kind)) end += InstructionLength(symbols_, r.from, r.mode_from).value_or(1);
    if (end > *start_) b = Block{*start_, end};
  }
  start_ = r.to;
  return b;
}

namespace {

// drcov version 2 (DynamoRIO's drcov; read by Lighthouse, bncov, Dragon
// Dance): a text header, a one-module table (the guest image), and the
// unique basic blocks as binary {u32 offset from the module base, u16 size,
// u16 module id}.
class DrcovWriter : public ReportWriter {
 public:
  DrcovWriter(const SymbolTable* symbols, std::ostream& out) : blocks_tracker_(symbols), out_(out) {}
  void Begin(const trace::Header& h) override {
    header_ = h;
    blocks_tracker_.Begin(h);
  }
  void Add(const Record& r) override {
    if (std::optional<BlockTracker::Block> b = blocks_tracker_.Next(r)) blocks_.insert({b->start, b->end});
  }
  void End(const ReportEnd&) override {
    uint64_t base = ~0ull, end = 0;
    for (const trace::AddressRange& c : header_.code) {
      base = std::min(base, c.start);
      end = std::max(end, c.end);
    }
    if (header_.code.empty())
      for (const auto& [s, e] : blocks_) base = std::min(base, s), end = std::max(end, e);
    if (base > end) base = end = 0;
    std::vector<std::pair<uint64_t, uint64_t>> in;
    for (const auto& [s, e] : blocks_)
      if (s >= base && e <= end && e - s <= 0xFFFF && s - base <= 0xFFFFFFFFull) in.push_back({s, e});
    // Module paths must not hold ", " (the table's separator).
    std::string path = header_.image;
    for (size_t p; (p = path.find(", ")) != std::string::npos;) path.replace(p, 2, "_ ");
    out_ << "DRCOV VERSION: 2\nDRCOV FLAVOR: vbts\n";
    out_ << "Module Table: version 2, count 1\nColumns: id, base, end, entry, path\n";
    out_ << absl::StrFormat(" 0, 0x%016x, 0x%016x, 0x%016x, %s\n", base, end, header_.entry.value_or(0), path);
    out_ << absl::StrFormat("BB Table: %u bbs\n", in.size());
    for (const auto& [s, e] : in) {
      uint8_t entry[8];
      const uint32_t off = static_cast<uint32_t>(s - base);
      const uint16_t size = static_cast<uint16_t>(e - s);
      for (int i = 0; i < 4; i++) entry[i] = static_cast<uint8_t>(off >> (8 * i));
      entry[4] = static_cast<uint8_t>(size), entry[5] = static_cast<uint8_t>(size >> 8);
      entry[6] = entry[7] = 0;  // module id 0
      out_.write(reinterpret_cast<const char*>(entry), 8);
    }
  }

 private:
  BlockTracker blocks_tracker_;
  std::ostream& out_;
  trace::Header header_;
  std::set<std::pair<uint64_t, uint64_t>> blocks_;
};

// Folded stacks ("root;caller;callee COUNT"), as Brendan Gregg's
// stackcollapse scripts write them for flamegraph.pl, inferno or
// speedscope.  Frames are functions (symbols, else addresses); calls, INT n,
// SYSCALL/SYSENTER and event deliveries push the target's function, RET
// pops one frame, IRET/SYSRET/SYSEXIT pop back to the frame the matching
// entry pushed, and a JMP into another function replaces the top frame (a
// tail call).  Each transfer counts once for the stack it left from.
class FoldedWriter : public ReportWriter {
 public:
  FoldedWriter(const SymbolTable* symbols, std::ostream& out) : symbols_(symbols), out_(out) {}
  void Begin(const trace::Header& h) override {
    if (h.entry) stack_.push_back({Name(*h.entry), false});
  }
  void Add(const Record& r) override {
    if (stack_.empty()) stack_.push_back({Name(r.from), false});
    Sample();
    switch (r.kind) {
      case BranchKind::kCall:
      case BranchKind::kIndCall:
      case BranchKind::kFarCall:
        Push(r.to, false);
        break;
      case BranchKind::kSoftInt:
      case BranchKind::kSyscall:
      case BranchKind::kSysenter:
      case BranchKind::kException:
      case BranchKind::kInterrupt:
      case BranchKind::kNmi:
        Push(r.to, true);
        break;
      case BranchKind::kRet:
      case BranchKind::kFarRet:
        Pop(false);
        break;
      case BranchKind::kIret:
      case BranchKind::kSysret:
      case BranchKind::kSysexit:
        Pop(true);
        break;
      case BranchKind::kJmp:
      case BranchKind::kIndJmp:
      case BranchKind::kFarJmp:
        if (hidden_ == 0) stack_.back().name = Name(r.to);
        break;
      default:
        break;
    }
    if (stack_.empty()) stack_.push_back({Name(r.to), false});
  }
  void End(const ReportEnd&) override {
    std::vector<std::pair<std::string, uint64_t>> lines(counts_.begin(), counts_.end());
    std::sort(lines.begin(), lines.end());
    for (const auto& [k, v] : lines) out_ << k << ' ' << v << '\n';
  }

 private:
  static constexpr size_t kMaxDepth = 512;
  struct Frame {
    std::string name;
    bool entry;  // pushed by an interrupt/exception/INT n/SYSCALL/SYSENTER
  };
  std::string Name(uint64_t addr) const {
    std::string n = symbols_ ? symbols_->FunctionOf(addr) : Hex(addr);
    for (char& c : n)
      if (c == ';' || c == ' ' || c == '\n') c = '_';
    return n;
  }
  void Sample() {
    std::string key;
    for (const Frame& f : stack_) absl::StrAppend(&key, key.empty() ? "" : ";", f.name);
    counts_[key]++;
  }
  void Push(uint64_t to, bool entry) {
    if (stack_.size() >= kMaxDepth) {
      hidden_entries_.push_back(entry);
      hidden_++;
      return;
    }
    stack_.push_back({Name(to), entry});
  }
  void Pop(bool to_entry) {
    if (hidden_ > 0) {
      hidden_--;
      hidden_entries_.pop_back();
      return;
    }
    if (!to_entry) {
      if (stack_.size() > 1) stack_.pop_back();
      return;
    }
    // Back to before the most recent entry frame, if there is one.
    auto it = std::find_if(stack_.rbegin(), stack_.rend(), [](const Frame& f) { return f.entry; });
    if (it == stack_.rend()) {
      if (stack_.size() > 1) stack_.pop_back();
      return;
    }
    stack_.erase(std::prev(it.base()), stack_.end());
  }
  const SymbolTable* symbols_;
  std::ostream& out_;
  std::vector<Frame> stack_;
  size_t hidden_ = 0;  // frames beyond kMaxDepth, counted but not named
  std::vector<bool> hidden_entries_;
  absl::flat_hash_map<std::string, uint64_t> counts_;
};

std::string DotEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

// A Graphviz digraph: one node per basic block (labelled with its symbol and
// address range), one edge per distinct (block, target, kind) with its count.
class DotWriter : public ReportWriter {
 public:
  DotWriter(const SymbolTable* symbols, std::ostream& out) : symbols_(symbols), out_(out), blocks_(symbols) {}
  void Begin(const trace::Header& h) override {
    blocks_.Begin(h);
    image_ = h.image;
  }
  void Add(const Record& r) override {
    std::optional<BlockTracker::Block> b = blocks_.Next(r);
    const uint64_t src = b ? b->start : r.from;
    if (b) ends_[b->start] = std::max(ends_[b->start], b->end);
    else ends_.try_emplace(src, 0);
    ends_.try_emplace(r.to, 0);
    edges_[{src, r.to, static_cast<int>(r.kind)}]++;
  }
  void End(const ReportEnd&) override {
    out_ << "digraph vbts {\n";
    out_ << absl::StrFormat("  label=\"%s\";\n  node [shape=box, fontname=\"monospace\"];\n", DotEscape(image_));
    for (const auto& [start, end] : ends_) {
      // "\n" is DOT's line break inside a label.
      std::string label = symbols_ && symbols_->Find(start) ? DotEscape(symbols_->Describe(start)) + "\\n" : "";
      label += end > start ? absl::StrFormat("0x%x-0x%x", start, end) : Hex(start);
      out_ << absl::StrFormat("  \"0x%x\" [label=\"%s\"];\n", start, label);
    }
    for (const auto& [e, count] : edges_) {
      const auto& [src, dst, kind] = e;
      out_ << absl::StrFormat("  \"0x%x\" -> \"0x%x\" [label=\"%s %u\"];\n", src, dst,
                              pmu::BranchKindName(static_cast<BranchKind>(kind)), count);
    }
    out_ << "}\n";
  }

 private:
  const SymbolTable* symbols_;
  std::ostream& out_;
  BlockTracker blocks_;
  std::string image_;
  std::map<uint64_t, uint64_t> ends_;  // block start -> end (0: only seen as a target)
  std::map<std::tuple<uint64_t, uint64_t, int>, uint64_t> edges_;
};

}  // namespace

std::unique_ptr<ReportWriter> MakeDrcovWriter(const SymbolTable* symbols, std::ostream& out) {
  return std::make_unique<DrcovWriter>(symbols, out);
}
std::unique_ptr<ReportWriter> MakeFoldedWriter(const SymbolTable* symbols, std::ostream& out) {
  return std::make_unique<FoldedWriter>(symbols, out);
}
std::unique_ptr<ReportWriter> MakeDotWriter(const SymbolTable* symbols, std::ostream& out) {
  return std::make_unique<DotWriter>(symbols, out);
}

}  // namespace vbts::record::report_internal
