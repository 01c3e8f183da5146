// report_internal.h: helpers shared by the report formats (report.cc,
// report_graph.cc); not part of the report API.
#ifndef VBTS_VMM_REPORT_INTERNAL_H_
#define VBTS_VMM_REPORT_INTERNAL_H_

#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "record/report.h"

namespace vbts::record::report_internal {

std::string Hex(uint64_t v);
// "sym+0x4 (0x100104)" with a symbol, "0x100104" without.
std::string Where(const SymbolTable* symbols, uint64_t addr);
std::string JsonString(const std::string& s);
// The header / end-of-run lines of the text report, each line prefixed.
std::string HeaderLines(const trace::Header& h, const std::string& prefix);
std::string EndLines(const ReportEnd& e, const std::string& prefix);

std::unique_ptr<ReportWriter> MakeDrcovWriter(const SymbolTable* symbols, std::ostream& out);
std::unique_ptr<ReportWriter> MakeFoldedWriter(const SymbolTable* symbols, std::ostream& out);
std::unique_ptr<ReportWriter> MakeDotWriter(const SymbolTable* symbols, std::ostream& out);

// Basic blocks from the transfer stream: a block starts where a transfer
// went (or at the entry point) and ends with the next transfer's source
// instruction (inclusive; for an event delivery, before the interrupted
// instruction).
class BlockTracker {
 public:
  struct Block {
    uint64_t start = 0;
    uint64_t end = 0;  // exclusive
  };
  explicit BlockTracker(const SymbolTable* symbols) : symbols_(symbols) {}
  void Begin(const trace::Header& h) { start_ = h.entry; }
  // The block `r` ends, if known: nullopt at the start without an entry
  // point, or when `r.from` is not within reach of the block's start (a gap
  // left by a filtered or unexplained stretch).
  std::optional<Block> Next(const trace::Record& r);

 private:
  static constexpr uint64_t kMaxBlock = 0x10000;
  const SymbolTable* symbols_;
  std::optional<uint64_t> start_;
};

}  // namespace vbts::record::report_internal

#endif  // VBTS_VMM_REPORT_INTERNAL_H_
