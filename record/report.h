// report.h: `vbts report`'s output formats (docs/cli.md): text, branches,
// json, drcov, folded and dot, each a ReportWriter fed the records of a
// trace in order.  Pure logic over trace::Record and a SymbolTable; the
// command (vmm/report_command.cc) reads the file and picks the writer.
#ifndef VBTS_VMM_REPORT_H_
#define VBTS_VMM_REPORT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "record/symbols.h"
#include "record/trace_format.h"

namespace vbts::record {

enum class ReportFormat { kText, kBranches, kJson, kDrcov, kFolded, kDot };
absl::StatusOr<ReportFormat> ParseReportFormat(const std::string& name);
inline constexpr const char* kReportFormats = "text, branches, json, drcov, folded, dot";

// What the reader knew at the end: the end block if the file had one, and
// the reader's status (DataLoss for a truncated or corrupt file).
struct ReportEnd {
  std::optional<trace::Trailer> trailer;
  absl::Status status;
};

class ReportWriter {
 public:
  virtual ~ReportWriter() = default;
  virtual void Begin(const trace::Header& header) {}
  virtual void Add(const trace::Record& r) = 0;
  virtual void End(const ReportEnd& end) {}
};

// `symbols` may be null (addresses only) and must outlive the writer.
std::unique_ptr<ReportWriter> MakeReportWriter(ReportFormat format, const SymbolTable* symbols, std::ostream& out);

// The length of the instruction at `addr` in the image `symbols` was read
// from, decoded in `mode`; nullopt when the image holds no bytes there or
// they do not decode.
std::optional<uint8_t> InstructionLength(const SymbolTable* symbols, uint64_t addr, pmu::ExecMode mode);

}  // namespace vbts::record

#endif  // VBTS_VMM_REPORT_H_
