// trace_format.h: the `vbts record` trace file (docs/trace-format.md): a
// header (magic, version, image name and SHA-256, CPU model, vbts version,
// start time, ...) followed by CRC-checked blocks of delta-encoded transfer
// records and an end block.  Pure logic: the writer hands finished bytes to
// an output callback block by block (bounded memory), the reader pulls them
// from a std::istream and stops with a clear status at the first truncated
// or corrupt byte, after returning every record before it.
#ifndef VBTS_VMM_TRACE_FORMAT_H_
#define VBTS_VMM_TRACE_FORMAT_H_

#include <array>
#include <cstdint>
#include <functional>
#include <istream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pmu/branch.h"

namespace vbts::record::trace {

inline constexpr uint8_t kMagic[8] = {'V', 'B', 'T', 'S', 'T', 'R', 'C', 0};
// A reader refuses another major version; a newer minor version only adds
// header/end fields, which older readers skip.
inline constexpr uint16_t kVersionMajor = 1;
inline constexpr uint16_t kVersionMinor = 0;
// A block's payload is written once it reaches this size (the writer's
// memory bound); a reader refuses blocks larger than kMaxBlockPayload.
inline constexpr size_t kBlockTarget = 16 * 1024;
inline constexpr uint32_t kMaxBlockPayload = 1 << 20;
inline constexpr uint32_t kMaxHeaderBytes = 1 << 20;

// One taken control transfer (pmu::Branch without the not-taken fields).
struct Record {
  pmu::BranchKind kind = pmu::BranchKind::kJmp;
  uint64_t from = 0;
  uint64_t to = 0;
  uint8_t cpl_from = 0;
  uint8_t cpl_to = 0;
  pmu::ExecMode mode_from = pmu::ExecMode::kProt32;
  pmu::ExecMode mode_to = pmu::ExecMode::kProt32;
  uint8_t vector = 0;  // kSoftInt, kException, kInterrupt, kNmi; 0 otherwise
  bool ia32e = false;  // IA32_EFER.LMA

  bool operator==(const Record&) const = default;
};
// The record of a taken transfer (b.taken() must hold).
Record FromBranch(const pmu::Branch& b);
// True for the kinds whose record carries a vector.
bool HasVector(pmu::BranchKind k);
// "real", "pm16", "pm32", "lm64".
const char* ModeName(pmu::ExecMode m);

// [start, end) in guest linear addresses.
struct AddressRange {
  uint64_t start = 0;
  uint64_t end = 0;
  bool operator==(const AddressRange&) const = default;
};

struct Header {
  uint16_t version_major = kVersionMajor;
  uint16_t version_minor = kVersionMinor;
  std::string image;                      // the image path as given to vbts record
  std::optional<std::array<uint8_t, 32>> image_sha256;
  std::string cpu_model;
  std::string vbts_version;
  uint64_t start_time_ns = 0;             // CLOCK_REALTIME, ns since the Unix epoch
  std::vector<AddressRange> code;         // the image's executable segments (linked addresses)
  std::optional<uint64_t> entry;          // the linear address the guest starts at
  std::string filter;                     // the filters in force, human-readable ("" = none)
  uint64_t max_records = 0;               // 0 = no limit
  std::string command;                    // the vbts command line
};

// What the end block says about how the recording ended.
struct Trailer {
  uint64_t records = 0;      // records written (must equal the records in the blocks)
  uint64_t filtered = 0;     // transfers seen but not recorded (filters)
  uint64_t unrecorded = 0;   // transfers after --max-records was reached
  bool limit_reached = false;
  std::string end;           // how the run ended: "guest-exit", "timeout", "triple-fault", ...
  int64_t exit_status = 0;   // the status vbts record exits with
  uint64_t duration_ns = 0;  // wall time of the run
};

// Sequential block writer.  Every call that completes a block hands its
// bytes to `out` at once; nothing else is buffered.
class Writer {
 public:
  using Output = std::function<absl::Status(absl::Span<const uint8_t>)>;
  explicit Writer(Output out);
  ~Writer();

  absl::Status WriteHeader(const Header& h);
  // Adds a record to the current block; writes the block when it is full.
  absl::Status Add(const Record& r);
  // Writes the current block if it holds any record.
  absl::Status Flush();
  // Flushes and writes the end block.  `t.records` is set from the writer's count.
  absl::Status Finish(Trailer t);

  uint64_t records() const { return records_; }
  uint64_t bytes_written() const { return bytes_; }
  // Records added since the last block was written.
  uint64_t pending_records() const;

 private:
  struct Codec;
  absl::Status Emit(absl::Span<const uint8_t> bytes);
  Output out_;
  std::unique_ptr<Codec> codec_;
  uint64_t records_ = 0;
  uint64_t bytes_ = 0;
  bool finished_ = false;
};

// Sequential reader.  Open() validates the header; Next() returns records
// until the end block (status() OK, trailer() set) or until the first
// problem: a file that ends early is DataLoss "truncated ...", a CRC or
// encoding error DataLoss "corrupt ...", both naming the byte offset and how
// many records were read before it.  A block is checked whole before any of
// its records is returned.
class Reader {
 public:
  static absl::StatusOr<std::unique_ptr<Reader>> Open(std::istream& in);
  ~Reader();

  const Header& header() const { return header_; }
  bool Next(Record* r);
  const absl::Status& status() const { return status_; }
  const std::optional<Trailer>& trailer() const { return trailer_; }
  uint64_t records_read() const { return records_read_; }
  uint64_t blocks_read() const { return blocks_read_; }

 private:
  struct Codec;
  explicit Reader(std::istream& in);
  bool LoadBlock();
  void Fail(absl::Status s);
  std::istream& in_;
  Header header_;
  std::unique_ptr<Codec> codec_;
  std::vector<Record> block_;
  size_t pos_ = 0;
  uint64_t offset_ = 0;  // file offset of the next unread byte
  uint64_t records_read_ = 0;
  uint64_t blocks_read_ = 0;
  bool done_ = false;
  absl::Status status_;
  std::optional<Trailer> trailer_;
};

// Parses a whole in-memory trace (tests and small tools): the header, every
// record that could be read, and the reader's final status.
struct ParsedTrace {
  Header header;
  std::vector<Record> records;
  std::optional<Trailer> trailer;
  absl::Status status;
};
absl::StatusOr<ParsedTrace> ParseTrace(const std::string& bytes);

}  // namespace vbts::record::trace

#endif  // VBTS_VMM_TRACE_FORMAT_H_
