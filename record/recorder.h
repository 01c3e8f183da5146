// recorder.h: the recording side of `vbts record` (docs/cli.md,
// docs/trace-format.md): takes every transfer the tracer reports, applies the
// filters (--cpl, --range) and --max-records, and streams records to the
// trace file block by block; keeps the live status line on a terminal.
#ifndef VBTS_VMM_RECORDER_H_
#define VBTS_VMM_RECORDER_H_

#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pmu/branch.h"
#include "record/symbols.h"
#include "record/trace_format.h"

namespace vbts::record {

// A safe default for --max-records: at most ~23 bytes a record (the largest
// encoding), so a runaway guest writes at most ~230 MB; typical files are
// well under 3 bytes a record.
inline constexpr uint64_t kDefaultMaxRecords = 10'000'000;

// Which transfers are recorded.  A transfer is kept when its CPL filter
// matches the CPL at either end (so the entries to and exits from the ring
// are kept), and, with address ranges, when its source or its destination
// lies in one of them.
struct TransferFilter {
  std::optional<uint8_t> cpl;             // --cpl=0|3 (nullopt: all)
  std::vector<trace::AddressRange> ranges;  // --range (empty: everywhere)
  bool Keep(const pmu::Branch& b) const;
  // "cpl=0 range=[0x100000,0x100040)" or "none".
  std::string Describe() const;
};

// Parses --cpl (0, 3, all) and --range values (resolved with `symbols`, may be null).
absl::StatusOr<TransferFilter> MakeFilter(const std::string& cpl, const std::vector<std::string>& ranges,
                                          const SymbolTable* symbols);

// SHA-256 of a byte string.
std::array<uint8_t, 32> Sha256(const std::vector<uint8_t>& bytes);

class Recorder {
 public:
  struct Options {
    TransferFilter filter;
    uint64_t max_records = kDefaultMaxRecords;  // 0: no limit
    // Live status line: written to `status_out` (nullptr: none) at most
    // every 0.25 s.
    std::FILE* status_out = nullptr;
  };
  // `out` receives the file's bytes; `now_ns` is a monotonic clock (tests
  // pass their own).
  Recorder(Options options, trace::Writer::Output out, std::function<uint64_t()> now_ns);

  absl::Status Start(const trace::Header& header);
  // One transfer from the tracer (not-taken instructions are ignored).
  // Returns false once --max-records is reached: the recording wants no
  // more transfers (vbts then stops following the guest for it).
  bool OnTransfer(const pmu::Branch& b);
  // Erases the status line (before other lines go to stderr at the end).
  void EndStatus();
  // Writes the end block; returns the first write error of the recording if any.
  absl::Status Finish(const std::string& end, int exit_status);

  uint64_t records() const { return writer_.records(); }
  uint64_t filtered() const { return filtered_; }
  uint64_t unrecorded() const { return unrecorded_; }
  bool limit_reached() const { return limit_reached_; }
  const TransferFilter& filter() const { return options_.filter; }
  uint64_t bytes() const { return writer_.bytes_written(); }

 private:
  void Status(bool final);
  Options options_;
  trace::Writer writer_;
  std::function<uint64_t()> now_ns_;
  absl::Status error_;
  uint64_t filtered_ = 0;
  uint64_t unrecorded_ = 0;
  bool limit_reached_ = false;
  uint64_t start_ns_ = 0;
  uint64_t last_flush_ns_ = 0;
  uint64_t last_status_ns_ = 0;
  uint64_t status_records_ = 0;  // records at the last status line
};

// `vbts record`'s command-line options and their use around one run.
struct RecordOptions {
  std::string output;
  std::string cpl = "all";
  std::vector<std::string> ranges;
  std::vector<std::string> symbols;  // merged (SymbolTable::LoadAll); default: the image, when it is an ELF file
  uint64_t max_records = kDefaultMaxRecords;
};

// Owns the trace file for one `vbts record` run.
class RecordSession {
 public:
  // Opens the output and resolves the filters; errors name the option at fault.
  static absl::StatusOr<std::unique_ptr<RecordSession>> Open(const RecordOptions& options,
                                                             const std::string& image_path);
  ~RecordSession();
  // The sink for MachineConfig::transfer_sink.
  std::function<bool(const pmu::Branch&)> Sink();
  // Creates the output file and writes the header: `code` are the image's
  // executable ranges.
  absl::Status Start(const std::string& image_path, const std::string& cpu_model,
                     const std::vector<trace::AddressRange>& code, uint64_t entry, const std::string& command);
  // The run is over: erase the status line before the run's own messages.
  void EndStatus() {
    if (recorder_) recorder_->EndStatus();
  }
  // Ends the recording; returns one line for stderr (the summary or the error).
  absl::StatusOr<std::string> Finish(const std::string& end, int exit_status);

 private:
  RecordSession() = default;
  RecordOptions options_;
  absl::Status OpenOutput();
  std::FILE* file_ = nullptr;
  TransferFilter filter_;
  std::unique_ptr<Recorder> recorder_;
  std::vector<uint8_t> image_;
};

}  // namespace vbts::record

#endif  // VBTS_VMM_RECORDER_H_
