// trace_fuzz.cc: libFuzzer target for the trace-file reader behind every
// `vbts report` format: the input is a trace file (record/trace_format.h).
// Whatever header Reader::Open accepts is streamed, record by record as
// ReportCommand does, into one of the six report writers (text, branches,
// json, drcov, folded, dot; record/report.h), without symbols or with a
// symbol table (a synthetic ELF whose code bytes 0x00..0xff at 0x100000 make
// the writers decode instruction lengths), into a stream that discards the
// bytes.  Which of the twelve is a hash of the input: every input exercises
// the reader fully and one writer, so an execution costs about a sixth of
// running all twelve (libFuzzer's mutations reach all of them).  Each input runs twice: as it is, and with the CRC-32 of its header
// and of every block it frames recomputed, so that mutations get past the
// CRC checks into the field and record decoders.  Checks: no crash; ParseTrace returns the same records, trailer and
// status as the streamed read; a reader that stops early says why (DataLoss),
// and one that read the end block has an OK status.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include <zlib.h>

#include "base/testing/elf_builder.h"
#include "record/report.h"
#include "record/symbols.h"
#include "record/trace_format.h"

namespace {

using namespace vbts::record;

// Counts and drops what the writers print (formatting still runs).
class NullBuf : public std::streambuf {
 protected:
  int overflow(int c) override { return traits_type::not_eof(c); }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

const SymbolTable* Symbols() {
  static const SymbolTable* t = [] {
    absl::StatusOr<SymbolTable> s = SymbolTable::FromElf(vbts::testing::MakeElf(false, vbts::testing::kSyms), "f.elf");
    if (!s.ok()) __builtin_trap();
    return new SymbolTable(std::move(*s));
  }();
  return t;
}

constexpr ReportFormat kFormats[] = {ReportFormat::kText,  ReportFormat::kBranches, ReportFormat::kJson,
                                     ReportFormat::kDrcov, ReportFormat::kFolded,   ReportFormat::kDot};

uint32_t Le32(const std::string& b, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}
void PutLe32(std::string& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; i++) b[at + i] = static_cast<char>(v >> (8 * i));
}
uint32_t Crc(const std::string& b, size_t at, size_t n, uint32_t crc = 0) {
  return static_cast<uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(b.data() + at), static_cast<uInt>(n)));
}

// Recomputes the CRCs docs/trace-format.md defines: the header's (over the
// 16 fixed bytes and the fields, stored after them) and each block's (over
// its first 12 header bytes and its payload, stored in header bytes 12-15).
void FixCrcs(std::string& b) {
  if (b.size() < 16) return;
  const uint64_t len = Le32(b, 12);
  if (16 + len + 4 > b.size()) return;
  PutLe32(b, 16 + len, Crc(b, 0, 16 + len));
  for (uint64_t at = 16 + len + 4; at + 16 <= b.size();) {
    const uint64_t n = Le32(b, at + 4);
    if (at + 16 + n > b.size()) return;
    PutLe32(b, at + 12, Crc(b, at + 16, n, Crc(b, at, 12)));
    at += 16 + n;
  }
}

void Check(const std::string& bytes, size_t writer) {
  std::istringstream in(bytes);
  absl::StatusOr<std::unique_ptr<trace::Reader>> reader = trace::Reader::Open(in);
  absl::StatusOr<trace::ParsedTrace> parsed = trace::ParseTrace(bytes);
  if (reader.ok() != parsed.ok()) __builtin_trap();
  if (!reader.ok()) return;

  NullBuf buf;
  std::ostream out(&buf);
  std::vector<std::unique_ptr<ReportWriter>> writers;
  constexpr size_t kNumFormats = sizeof kFormats / sizeof kFormats[0];
  writers.push_back(MakeReportWriter(kFormats[writer % kNumFormats],
                                     (writer / kNumFormats) % 2 ? Symbols() : nullptr, out));
  trace::Reader& r = **reader;
  for (auto& w : writers) w->Begin(r.header());
  trace::Record rec;
  size_t n = 0;
  while (r.Next(&rec)) {
    if (n >= parsed->records.size() || !(parsed->records[n] == rec)) __builtin_trap();
    n++;
    for (auto& w : writers) w->Add(rec);
  }
  const ReportEnd end{r.trailer(), r.status()};
  for (auto& w : writers) w->End(end);
  // The streamed read and ParseTrace agree; how it ended is consistent.
  if (n != parsed->records.size() || r.records_read() != n) __builtin_trap();
  if (r.status() != parsed->status || r.trailer().has_value() != parsed->trailer.has_value()) __builtin_trap();
  if (r.trailer().has_value() && !r.status().ok()) __builtin_trap();
  if (!r.trailer().has_value() && r.status().code() != absl::StatusCode::kDataLoss) __builtin_trap();
  // A second Next() after the end changes nothing.
  if (r.Next(&rec) || r.records_read() != n) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  // FNV-1a of the input picks the writer (and symbols or not).
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ull;
  Check(bytes, h);
  const std::string before = bytes;
  FixCrcs(bytes);
  if (bytes != before) Check(bytes, h);
  return 0;
}
