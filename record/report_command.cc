// report_command.cc: `vbts report` (vmm/report_command.h).
#include "record/report_command.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>

#include "absl/strings/str_format.h"
#include "base/exit_status.h"
#include "record/recorder.h"
#include "record/report.h"

namespace vbts::record {
namespace {

void Note(const std::string& line) { std::fprintf(stderr, "vbts report: %s\n", line.c_str()); }

// The recorded image's symbols, when the file is still there and unchanged.
std::optional<SymbolTable> ImageSymbols(const trace::Header& h, bool quiet) {
  std::ifstream in(h.image, std::ios::binary);
  if (!in) {
    if (!quiet) Note(absl::StrFormat("no symbols: the recorded image %s is not here (use --symbols=ELF)", h.image));
    return std::nullopt;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (h.image_sha256 && Sha256(bytes) != *h.image_sha256) {
    if (!quiet)
      Note(absl::StrFormat("no symbols: %s has changed since it was recorded (SHA-256 differs; use --symbols=ELF)",
                           h.image));
    return std::nullopt;
  }
  absl::StatusOr<SymbolTable> t = SymbolTable::FromElf(bytes, h.image);
  if (!t.ok()) return std::nullopt;  // an a.out-kludge image: no symbols
  return std::move(*t);
}

}  // namespace

int ReportCommand(const ReportOptions& options, std::ostream& out) {
  absl::StatusOr<ReportFormat> format = ParseReportFormat(options.format);
  if (!format.ok()) {
    Note(std::string(format.status().message()));
    return kExitUsage;
  }
  std::ifstream in(options.file, std::ios::binary);
  if (!in) {
    Note(absl::StrFormat("cannot open %s: %s", options.file, std::strerror(errno)));
    return kExitVbtsError;
  }
  absl::StatusOr<std::unique_ptr<trace::Reader>> reader = trace::Reader::Open(in);
  if (!reader.ok()) {
    Note(absl::StrFormat("%s: %s", options.file, reader.status().message()));
    return kExitVbtsError;
  }
  const trace::Header& header = (*reader)->header();
  std::optional<SymbolTable> symbols;
  if (!options.symbols.empty()) {
    absl::StatusOr<SymbolTable> t = SymbolTable::LoadAll(options.symbols);
    if (!t.ok()) {
      Note(absl::StrFormat("--symbols: %s", t.status().message()));
      return kExitVbtsError;
    }
    symbols = std::move(*t);
  } else if (*format != ReportFormat::kBranches) {
    symbols = ImageSymbols(header, /*quiet=*/false);
  }
  std::unique_ptr<ReportWriter> w = MakeReportWriter(*format, symbols ? &*symbols : nullptr, out);
  w->Begin(header);
  trace::Record r;
  while ((*reader)->Next(&r)) w->Add(r);
  w->End({(*reader)->trailer(), (*reader)->status()});
  out.flush();
  if (!(*reader)->status().ok()) {
    Note(absl::StrFormat("%s: %s", options.file, (*reader)->status().message()));
    return kReportIncomplete;
  }
  return 0;
}

}  // namespace vbts::record
