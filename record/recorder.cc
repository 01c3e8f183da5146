// recorder.cc: the recording side of `vbts record` (vmm/recorder.h).
#include "record/recorder.h"

#include <openssl/evp.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/status_macros.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file.h"

namespace vbts::record {
namespace {

constexpr uint64_t kFlushPeriodNs = 250'000'000;   // a block at least every 0.25 s
constexpr uint64_t kStatusPeriodNs = 250'000'000;

bool InRanges(const std::vector<trace::AddressRange>& ranges, uint64_t a) {
  for (const trace::AddressRange& r : ranges)
    if (a >= r.start && a < r.end) return true;
  return false;
}

std::string Size(uint64_t bytes) {
  if (bytes < 10 * 1024) return absl::StrFormat("%u B", bytes);
  if (bytes < 10 * 1024 * 1024) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  return absl::StrFormat("%.1f MiB", bytes / (1024.0 * 1024));
}

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

}  // namespace

bool TransferFilter::Keep(const pmu::Branch& b) const {
  if (cpl && b.cpl_from != *cpl && b.cpl_to != *cpl) return false;
  if (!ranges.empty() && !InRanges(ranges, b.from) && !InRanges(ranges, b.to)) return false;
  return true;
}

std::string TransferFilter::Describe() const {
  std::vector<std::string> parts;
  if (cpl) parts.push_back(absl::StrFormat("cpl=%u", *cpl));
  for (const trace::AddressRange& r : ranges) parts.push_back(absl::StrFormat("range=0x%x:0x%x", r.start, r.end));
  return parts.empty() ? "none" : absl::StrJoin(parts, " ");
}

absl::StatusOr<TransferFilter> MakeFilter(const std::string& cpl, const std::vector<std::string>& ranges,
                                          const SymbolTable* symbols) {
  TransferFilter f;
  if (cpl == "0" || cpl == "3") {
    f.cpl = static_cast<uint8_t>(cpl[0] - '0');
  } else if (cpl != "all") {
    return absl::InvalidArgumentError(absl::StrFormat("--cpl=%s: expected 0, 3 or all", cpl));
  }
  for (const std::string& spec : ranges) {
    absl::StatusOr<trace::AddressRange> r = ParseRange(spec, symbols);
    if (!r.ok()) return r.status();
    f.ranges.push_back(*r);
  }
  return f;
}

std::array<uint8_t, 32> Sha256(const std::vector<uint8_t>& bytes) {
  std::array<uint8_t, 32> d{};
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), d.data(), &len, EVP_sha256(), nullptr);
  return d;
}

Recorder::Recorder(Options options, trace::Writer::Output out, std::function<uint64_t()> now_ns)
    : options_(std::move(options)), writer_(std::move(out)), now_ns_(std::move(now_ns)) {}

absl::Status Recorder::Start(const trace::Header& header) {
  start_ns_ = last_flush_ns_ = last_status_ns_ = now_ns_();
  error_ = writer_.WriteHeader(header);
  return error_;
}

bool Recorder::OnTransfer(const pmu::Branch& b) {
  if (!b.taken()) return !limit_reached_;
  if (!options_.filter.Keep(b)) {
    filtered_++;
    return !limit_reached_;
  }
  if (!error_.ok() || limit_reached_) {
    unrecorded_++;
    // After a write error (a full disk, a file-size limit) nothing more can
    // be recorded: the guest runs on untraced for it.
    return error_.ok() && !limit_reached_;
  }
  error_ = writer_.Add(trace::FromBranch(b));
  if (options_.max_records && writer_.records() >= options_.max_records) {
    limit_reached_ = true;
    if (error_.ok()) error_ = writer_.Flush();
  }
  const uint64_t now = now_ns_();
  if (error_.ok() && writer_.pending_records() && now - last_flush_ns_ >= kFlushPeriodNs) {
    error_ = writer_.Flush();
    last_flush_ns_ = now;
  }
  if (options_.status_out && now - last_status_ns_ >= kStatusPeriodNs) Status(false);
  return error_.ok() && !limit_reached_;
}

void Recorder::Status(bool final) {
  const uint64_t now = now_ns_();
  if (final) {
    std::fprintf(options_.status_out, "\r\033[K");
  } else {
    const double dt = (now - last_status_ns_) / 1e9;
    const double rate = dt > 0 ? (writer_.records() - status_records_) / dt : 0;
    std::fprintf(options_.status_out, "\r\033[Kvbts record: %llu records, %.0f records/s, %s",
                 static_cast<unsigned long long>(writer_.records()), rate, Size(writer_.bytes_written()).c_str());
  }
  std::fflush(options_.status_out);
  last_status_ns_ = now;
  status_records_ = writer_.records();
}

void Recorder::EndStatus() {
  if (options_.status_out) Status(true);
  options_.status_out = nullptr;
}

absl::Status Recorder::Finish(const std::string& end, int exit_status) {
  EndStatus();
  trace::Trailer t;
  t.filtered = filtered_;
  t.unrecorded = unrecorded_;
  t.limit_reached = limit_reached_;
  t.end = end;
  t.exit_status = exit_status;
  t.duration_ns = now_ns_() - start_ns_;
  if (!error_.ok()) return error_;
  return writer_.Finish(t);
}

// ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<RecordSession>> RecordSession::Open(const RecordOptions& options,
                                                                   const std::string& image_path) {
  std::unique_ptr<RecordSession> s(new RecordSession());
  s->options_ = options;
  absl::StatusOr<std::vector<uint8_t>> image = ReadWholeFile(image_path, "kernel image", kMaxImageFileSize);
  if (!image.ok()) return image.status();
  s->image_ = std::move(*image);
  // Symbols for --range: --symbols, else the image itself when it is an ELF file.
  std::optional<SymbolTable> symbols;
  if (!options.symbols.empty()) {
    absl::StatusOr<SymbolTable> t = SymbolTable::LoadAll(options.symbols);
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("--symbols: ", t.status().message()));
    symbols = std::move(*t);
  } else if (s->image_.size() >= 4 && std::memcmp(s->image_.data(), "\x7f" "ELF", 4) == 0) {
    absl::StatusOr<SymbolTable> t = SymbolTable::FromElf(s->image_, image_path);
    if (t.ok()) symbols = std::move(*t);
  }
  absl::StatusOr<TransferFilter> filter = MakeFilter(options.cpl, options.ranges, symbols ? &*symbols : nullptr);
  if (!filter.ok()) return filter.status();
  s->filter_ = *std::move(filter);
  // The output file is created by Start(), once the machine exists: a run
  // that cannot start (bad image, unknown --cpu, ...) leaves no file behind
  // and does not truncate an existing one.
  return s;
}

absl::Status RecordSession::OpenOutput() {
  file_ = std::fopen(options_.output.c_str(), "wb");
  if (!file_)
    return absl::NotFoundError(absl::StrFormat("-o %s: cannot write: %s", options_.output, std::strerror(errno)));
  Recorder::Options ro;
  ro.filter = filter_;
  ro.max_records = options_.max_records;
  ro.status_out = isatty(2) ? stderr : nullptr;
  std::FILE* f = file_;
  std::string path = options_.output;
  recorder_ = std::make_unique<Recorder>(
      std::move(ro),
      [f, path](absl::Span<const uint8_t> b) {
        // Every block reaches the kernel at once, so a crash of vbts loses at
        // most the records of the block being filled.
        if (std::fwrite(b.data(), 1, b.size(), f) != b.size() || std::fflush(f) != 0)
          return absl::ResourceExhaustedError(absl::StrFormat("writing %s: %s", path, std::strerror(errno)));
        return absl::OkStatus();
      },
      MonotonicNs);
  return absl::OkStatus();
}

RecordSession::~RecordSession() {
  if (file_) std::fclose(file_);
}

std::function<bool(const pmu::Branch&)> RecordSession::Sink() {
  // Transfers arrive only once the guest runs, after Start().
  return [this](const pmu::Branch& b) { return recorder_ ? recorder_->OnTransfer(b) : true; };
}

absl::Status RecordSession::Start(const std::string& image_path, const std::string& cpu_model,
                                  const std::vector<trace::AddressRange>& code, uint64_t entry,
                                  const std::string& command) {
  trace::Header h;
  // The absolute path, so that `vbts report` finds the image's symbols from
  // any directory (and drcov names the module by its real path).
  char* real = realpath(image_path.c_str(), nullptr);
  h.image = real ? real : image_path;
  std::free(real);
  h.image_sha256 = Sha256(image_);
  h.cpu_model = cpu_model;
  h.vbts_version = VBTS_VERSION;
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  h.start_time_ns = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
  h.code = code;
  h.entry = entry;
  h.max_records = options_.max_records;
  h.command = command;
  h.filter = filter_.Describe();
  VBTS_RETURN_IF_ERROR(OpenOutput());
  return recorder_->Start(h);
}

absl::StatusOr<std::string> RecordSession::Finish(const std::string& end, int exit_status) {
  if (!recorder_) return absl::FailedPreconditionError("the recording never started");
  absl::Status s = recorder_->Finish(end, exit_status);
  const int close = std::fclose(file_);
  file_ = nullptr;
  if (!s.ok()) return s;
  if (close != 0)
    return absl::ResourceExhaustedError(absl::StrFormat("closing %s: %s", options_.output, std::strerror(errno)));
  const Recorder& r = *recorder_;
  std::string line = absl::StrFormat("vbts: recorded %u transfers to %s (%u bytes, %.2f bytes/transfer)",
                                     r.records(), options_.output, r.bytes(),
                                     r.records() ? static_cast<double>(r.bytes()) / r.records() : 0.0);
  if (r.filtered()) absl::StrAppendFormat(&line, "; %u filtered out", r.filtered());
  if (r.limit_reached())
    absl::StrAppendFormat(&line, "; --max-records=%u reached: the recording stopped there and the guest ran on "
                          "unrecorded (and no longer single-stepped for it)",
                          options_.max_records);
  return line;
}

}  // namespace vbts::record
