// report.cc: the line-oriented report formats (text, branches, json) and
// the format table; the graph formats are in report_graph.cc.
#include "record/report.h"

#include <Zydis/Zydis.h>
#include <time.h>

#include <algorithm>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "record/report_internal.h"

namespace vbts::record {

using pmu::BranchKind;
using trace::Record;

absl::StatusOr<ReportFormat> ParseReportFormat(const std::string& name) {
  if (name == "text") return ReportFormat::kText;
  if (name == "branches") return ReportFormat::kBranches;
  if (name == "json") return ReportFormat::kJson;
  if (name == "drcov") return ReportFormat::kDrcov;
  if (name == "folded") return ReportFormat::kFolded;
  if (name == "dot") return ReportFormat::kDot;
  return absl::InvalidArgumentError(absl::StrFormat("--format=%s: expected one of %s", name, kReportFormats));
}

std::optional<uint8_t> InstructionLength(const SymbolTable* symbols, uint64_t addr, pmu::ExecMode mode) {
  if (!symbols) return std::nullopt;
  absl::Span<const uint8_t> bytes = symbols->BytesAt(addr, ZYDIS_MAX_INSTRUCTION_LENGTH);
  if (bytes.empty()) return std::nullopt;
  ZydisDecoder dec;
  const bool lm = mode == pmu::ExecMode::kLong64, p32 = mode == pmu::ExecMode::kProt32;
  if (ZYAN_FAILED(ZydisDecoderInit(&dec,
                                   lm    ? ZYDIS_MACHINE_MODE_LONG_64
                                   : p32 ? ZYDIS_MACHINE_MODE_LEGACY_32
                                         : ZYDIS_MACHINE_MODE_LEGACY_16,
                                   lm ? ZYDIS_STACK_WIDTH_64 : p32 ? ZYDIS_STACK_WIDTH_32 : ZYDIS_STACK_WIDTH_16)))
    return std::nullopt;
  ZydisDecodedInstruction zi;
  if (ZYAN_FAILED(ZydisDecoderDecodeInstruction(&dec, nullptr, bytes.data(), bytes.size(), &zi))) return std::nullopt;
  return zi.length;
}

namespace report_internal {

std::string Hex(uint64_t v) { return absl::StrFormat("0x%x", v); }

std::string Where(const SymbolTable* symbols, uint64_t addr) {
  if (!symbols) return Hex(addr);
  const Symbol* s = symbols->Find(addr);
  if (!s) return Hex(addr);
  return absl::StrFormat("%s (0x%x)", symbols->Describe(addr), addr);
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) out += absl::StrFormat("\\u%04x", c);
        else out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string HeaderLines(const trace::Header& h, const std::string& prefix) {
  std::string sha = "unknown";
  if (h.image_sha256) {
    sha.clear();
    for (uint8_t b : *h.image_sha256) absl::StrAppendFormat(&sha, "%02x", b);
  }
  const time_t secs = static_cast<time_t>(h.start_time_ns / 1'000'000'000ull);
  tm t{};
  gmtime_r(&secs, &t);
  char when[32];
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &t);
  std::string out = absl::StrFormat("%strace format %u.%u, vbts %s, recorded %s\n", prefix, h.version_major,
                                    h.version_minor, h.vbts_version, when);
  absl::StrAppendFormat(&out, "%simage %s (sha256 %s), cpu %s\n", prefix, h.image, sha, h.cpu_model);
  absl::StrAppendFormat(&out, "%sfilter %s, max records %s\n", prefix, h.filter.empty() ? "none" : h.filter,
                        h.max_records ? absl::StrCat(h.max_records) : std::string("unlimited"));
  return out;
}

std::string EndLines(const ReportEnd& e, const std::string& prefix) {
  std::string out;
  if (e.trailer) {
    const trace::Trailer& t = *e.trailer;
    absl::StrAppendFormat(&out, "%srun ended: %s, exit status %d, %.3f s; %u recorded, %u filtered out", prefix, t.end,
                          t.exit_status, t.duration_ns / 1e9, t.records, t.filtered);
    if (t.limit_reached) absl::StrAppendFormat(&out, ", max records reached (%u not recorded)", t.unrecorded);
    out += "\n";
  }
  if (!e.status.ok()) absl::StrAppendFormat(&out, "%sINCOMPLETE: %s\n", prefix, e.status.message());
  return out;
}

}  // namespace report_internal

namespace {

using namespace report_internal;

class BranchesWriter : public ReportWriter {
 public:
  explicit BranchesWriter(std::ostream& out) : out_(out) {}
  void Add(const Record& r) override {
    char line[80];
    const int n = std::snprintf(line, sizeof line, "0x%llx 0x%llx %s\n", static_cast<unsigned long long>(r.from),
                                static_cast<unsigned long long>(r.to), pmu::BranchKindName(r.kind));
    out_.write(line, n);
  }

 private:
  std::ostream& out_;
};

class JsonWriter : public ReportWriter {
 public:
  JsonWriter(const SymbolTable* symbols, std::ostream& out) : symbols_(symbols), out_(out) {}
  void Add(const Record& r) override {
    std::string line = absl::StrFormat(
        "{\"n\":%u,\"kind\":\"%s\",\"from\":\"0x%x\",\"to\":\"0x%x\",\"cpl_from\":%u,\"cpl_to\":%u,"
        "\"mode_from\":\"%s\",\"mode_to\":\"%s\",\"ia32e\":%s",
        n_++, pmu::BranchKindName(r.kind), r.from, r.to, r.cpl_from, r.cpl_to, trace::ModeName(r.mode_from),
        trace::ModeName(r.mode_to), r.ia32e ? "true" : "false");
    if (trace::HasVector(r.kind)) absl::StrAppendFormat(&line, ",\"vector\":%u", r.vector);
    if (symbols_) {
      if (symbols_->Find(r.from)) absl::StrAppend(&line, ",\"from_sym\":", JsonString(symbols_->Describe(r.from)));
      if (symbols_->Find(r.to)) absl::StrAppend(&line, ",\"to_sym\":", JsonString(symbols_->Describe(r.to)));
    }
    line += "}\n";
    out_ << line;
  }

 private:
  const SymbolTable* symbols_;
  std::ostream& out_;
  uint64_t n_ = 0;
};

class TextWriter : public ReportWriter {
 public:
  TextWriter(const SymbolTable* symbols, std::ostream& out) : symbols_(symbols), out_(out) {}
  void Begin(const trace::Header& h) override { out_ << HeaderLines(h, "# "); }
  void Add(const Record& r) override {
    std::string state = absl::StrFormat("cpl%u %s", r.cpl_from, trace::ModeName(r.mode_from));
    if (r.cpl_to != r.cpl_from || r.mode_to != r.mode_from)
      absl::StrAppendFormat(&state, " -> cpl%u %s", r.cpl_to, trace::ModeName(r.mode_to));
    std::string kind = pmu::BranchKindName(r.kind);
    if (trace::HasVector(r.kind)) absl::StrAppendFormat(&kind, " 0x%02x", r.vector);
    out_ << absl::StrFormat("%8u %-14s %s -> %s  [%s]\n", n_++, kind, Where(symbols_, r.from), Where(symbols_, r.to),
                            state);
    kinds_[static_cast<int>(r.kind)]++;
    edges_[{r.from, r.to, r.kind}]++;
    if (symbols_) functions_[symbols_->FunctionOf(r.from)]++;
  }
  void End(const ReportEnd& e) override {
    out_ << absl::StrFormat("\n# summary: %u transfers\n# by kind:", n_);
    for (int k = 0; k < 32; k++)
      if (kinds_[k]) out_ << absl::StrFormat(" %s %u", pmu::BranchKindName(static_cast<BranchKind>(k)), kinds_[k]);
    out_ << "\n";
    std::vector<std::pair<uint64_t, Edge>> edges;
    for (const auto& [e, c] : edges_) edges.push_back({c, e});
    std::sort(edges.begin(), edges.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : std::tie(a.second.from, a.second.to) < std::tie(b.second.from, b.second.to);
    });
    out_ << "# hottest edges:\n";
    for (size_t i = 0; i < edges.size() && i < kTop; i++)
      out_ << absl::StrFormat("# %10u  %-9s %s -> %s\n", edges[i].first, pmu::BranchKindName(edges[i].second.kind),
                              Where(symbols_, edges[i].second.from), Where(symbols_, edges[i].second.to));
    if (symbols_) {
      std::vector<std::pair<uint64_t, std::string>> fns;
      for (const auto& [f, c] : functions_) fns.push_back({c, f});
      std::sort(fns.begin(), fns.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
      });
      out_ << "# hottest functions (transfers leaving code in them):\n";
      for (size_t i = 0; i < fns.size() && i < kTop; i++)
        out_ << absl::StrFormat("# %10u  %s\n", fns[i].first, fns[i].second);
    }
    out_ << EndLines(e, "# ");
  }

 private:
  static constexpr size_t kTop = 10;
  struct Edge {
    uint64_t from, to;
    BranchKind kind;
    bool operator==(const Edge& o) const { return from == o.from && to == o.to && kind == o.kind; }
    template <typename H>
    friend H AbslHashValue(H h, const Edge& e) {
      return H::combine(std::move(h), e.from, e.to, e.kind);
    }
  };
  const SymbolTable* symbols_;
  std::ostream& out_;
  uint64_t n_ = 0;
  uint64_t kinds_[32] = {};
  absl::flat_hash_map<Edge, uint64_t> edges_;
  absl::flat_hash_map<std::string, uint64_t> functions_;
};

}  // namespace

std::unique_ptr<ReportWriter> MakeReportWriter(ReportFormat format, const SymbolTable* symbols, std::ostream& out) {
  switch (format) {
    case ReportFormat::kText: return std::make_unique<TextWriter>(symbols, out);
    case ReportFormat::kBranches: return std::make_unique<BranchesWriter>(out);
    case ReportFormat::kJson: return std::make_unique<JsonWriter>(symbols, out);
    case ReportFormat::kDrcov: return report_internal::MakeDrcovWriter(symbols, out);
    case ReportFormat::kFolded: return report_internal::MakeFoldedWriter(symbols, out);
    case ReportFormat::kDot: return report_internal::MakeDotWriter(symbols, out);
  }
  return nullptr;
}

}  // namespace vbts::record
