// report_test.cc: every `vbts report` format on one small hand-made trace
// whose expected output is derived below, and the command's handling of
// truncated, corrupt and foreign files.
#include "record/report.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/status_macros.h"
#include "base/testing/status_matchers.h"
#include "base/exit_status.h"
#include "record/report_command.h"
#include "base/testing/elf_builder.h"

namespace vbts::record {
namespace {

using pmu::BranchKind;
using ::testing::HasSubstr;
using trace::Record;

// The image (32-bit code at 0x100000, NOPs except):
//   0x100001 e8 3a 00 00 00  call helper (0x100006 + 0x3a = 0x100040)
//   0x100006 eb 78           jmp tail (0x100008 + 0x78 = 0x100080)
//   0x100011 cf              iret
//   0x100041 c3              ret
std::vector<uint8_t> Text() {
  std::vector<uint8_t> t(0x100, 0x90);
  const uint8_t call[] = {0xe8, 0x3a, 0, 0, 0};
  std::copy(call, call + 5, t.begin() + 1);
  t[6] = 0xeb, t[7] = 0x78;
  t[0x11] = 0xcf;
  t[0x41] = 0xc3;
  return t;
}

Record R(BranchKind k, uint64_t from, uint64_t to, uint8_t vector = 0) {
  Record r;
  r.kind = k;
  r.from = from;
  r.to = to;
  r.vector = vector;
  return r;
}

// The run: _start calls helper, which returns; jmp to tail; an interrupt
// (vector 0x20) before tail+1, handled at _start.loop, whose iret returns
// there; then tail+2 faults (#UD, vector 6) into helper.
const std::vector<Record> kRun = {
    R(BranchKind::kCall, 0x100001, 0x100040),       R(BranchKind::kRet, 0x100041, 0x100006),
    R(BranchKind::kJmp, 0x100006, 0x100080),        R(BranchKind::kInterrupt, 0x100081, 0x100010, 0x20),
    R(BranchKind::kIret, 0x100011, 0x100081),       R(BranchKind::kException, 0x100082, 0x100040, 6),
};

trace::Header Hdr() {
  trace::Header h;
  h.image = "/img/t.elf";
  h.cpu_model = "westmere";
  h.vbts_version = "0.1.0";
  h.code = {{0x100000, 0x100100}};
  h.entry = 0x100000;
  return h;
}

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<SymbolTable> t = SymbolTable::FromElf(testing::MakeElf(false, testing::kSyms, Text()), "t.elf");
    ASSERT_TRUE(t.ok()) << t.status();
    symbols_ = std::move(*t);
  }
  std::string Run(ReportFormat f, const ReportEnd& end = {}) {
    std::ostringstream out;
    std::unique_ptr<ReportWriter> w = MakeReportWriter(f, &symbols_, out);
    w->Begin(Hdr());
    for (const Record& r : kRun) w->Add(r);
    w->End(end);
    return out.str();
  }
  SymbolTable symbols_;
};

TEST_F(ReportTest, InstructionLengthsFromTheImage) {
  EXPECT_EQ(InstructionLength(&symbols_, 0x100001, pmu::ExecMode::kProt32), 5);
  EXPECT_EQ(InstructionLength(&symbols_, 0x100006, pmu::ExecMode::kProt32), 2);
  EXPECT_EQ(InstructionLength(&symbols_, 0x100000, pmu::ExecMode::kProt32), 1);
  EXPECT_EQ(InstructionLength(&symbols_, 0x200000, pmu::ExecMode::kProt32), std::nullopt);
  EXPECT_EQ(InstructionLength(nullptr, 0x100000, pmu::ExecMode::kProt32), std::nullopt);
}

TEST_F(ReportTest, Branches) {
  EXPECT_EQ(Run(ReportFormat::kBranches),
            "0x100001 0x100040 call\n"
            "0x100041 0x100006 ret\n"
            "0x100006 0x100080 jmp\n"
            "0x100081 0x100010 interrupt\n"
            "0x100011 0x100081 iret\n"
            "0x100082 0x100040 exception\n");
}

TEST_F(ReportTest, Json) {
  const std::string out = Run(ReportFormat::kJson);
  EXPECT_THAT(out, HasSubstr(
      "{\"n\":5,\"kind\":\"exception\",\"from\":\"0x100082\",\"to\":\"0x100040\",\"cpl_from\":0,\"cpl_to\":0,"
      "\"mode_from\":\"pm32\",\"mode_to\":\"pm32\",\"ia32e\":false,\"vector\":6,\"from_sym\":\"tail+0x2\","
      "\"to_sym\":\"helper\"}\n"));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 6);
}

TEST_F(ReportTest, Text) {
  trace::Trailer t;
  t.records = 6;
  t.end = "guest-exit";
  t.exit_status = 1;
  t.duration_ns = 1'500'000'000;
  const std::string out = Run(ReportFormat::kText, {t, absl::OkStatus()});
  EXPECT_THAT(out, HasSubstr("# image /img/t.elf (sha256 unknown), cpu westmere\n"));
  EXPECT_THAT(out, HasSubstr("       3 interrupt 0x20 tail+0x1 (0x100081) -> _start.loop (0x100010)  [cpl0 pm32]\n"));
  EXPECT_THAT(out, HasSubstr("# summary: 6 transfers\n# by kind: jmp 1 call 1 ret 1 iret 1 exception 1 interrupt 1\n"));
  // Functions the transfers leave from: _start (call, jmp, iret), tail (interrupt, exception), helper (ret).
  EXPECT_THAT(out, HasSubstr("#          3  _start\n#          2  tail\n#          1  helper\n"));
  EXPECT_THAT(out, HasSubstr("# run ended: guest-exit, exit status 1, 1.500 s; 6 recorded, 0 filtered out\n"));
  EXPECT_THAT(Run(ReportFormat::kText, {std::nullopt, absl::DataLossError("truncated at byte 99")}),
              HasSubstr("# INCOMPLETE: truncated at byte 99\n"));
}

TEST_F(ReportTest, Drcov) {
  // Blocks (start, size): [0x100000,+6) ends with the 5-byte call; helper's
  // [0x100040,+2) with the ret; [0x100006,+2) the jmp; [0x100080,+1) stops
  // before the interrupted 0x100081; [0x100010,+2) ends with the iret;
  // [0x100081,+1) stops before the faulting 0x100082.  Sorted by start.
  const std::string out = Run(ReportFormat::kDrcov);
  const std::string head =
      "DRCOV VERSION: 2\nDRCOV FLAVOR: vbts\nModule Table: version 2, count 1\nColumns: id, base, end, entry, path\n"
      " 0, 0x0000000000100000, 0x0000000000100100, 0x0000000000100000, /img/t.elf\nBB Table: 6 bbs\n";
  ASSERT_EQ(out.substr(0, head.size()), head);
  const std::string table = out.substr(head.size());
  ASSERT_EQ(table.size(), 6u * 8);
  const uint32_t want[6][2] = {{0x00, 6}, {0x06, 2}, {0x10, 2}, {0x40, 2}, {0x80, 1}, {0x81, 1}};
  for (int i = 0; i < 6; i++) {
    const auto* e = reinterpret_cast<const uint8_t*>(table.data() + 8 * i);
    EXPECT_EQ(e[0] | e[1] << 8 | e[2] << 16 | e[3] << 24, want[i][0]) << i;
    EXPECT_EQ(e[4] | e[5] << 8, want[i][1]) << i;
    EXPECT_EQ(e[6] | e[7] << 8, 0) << i;
  }
}

TEST_F(ReportTest, Folded) {
  // Stack before each transfer: [_start] call, [_start helper] ret,
  // [_start] jmp (tail call: top becomes tail), [tail] interrupt,
  // [tail _start] iret (back below the entry frame), [tail] exception.
  EXPECT_EQ(Run(ReportFormat::kFolded), "_start 2\n_start;helper 1\ntail 2\ntail;_start 1\n");
}

TEST_F(ReportTest, Dot) {
  const std::string out = Run(ReportFormat::kDot);
  EXPECT_THAT(out, HasSubstr("digraph vbts {\n"));
  EXPECT_THAT(out, HasSubstr("  \"0x100000\" [label=\"_start\\n0x100000-0x100006\"];\n"));
  EXPECT_THAT(out, HasSubstr("  \"0x100080\" [label=\"tail\\n0x100080-0x100081\"];\n"));
  EXPECT_THAT(out, HasSubstr("  \"0x100000\" -> \"0x100040\" [label=\"call 1\"];\n"));
  EXPECT_THAT(out, HasSubstr("  \"0x100080\" -> \"0x100010\" [label=\"interrupt 1\"];\n"));
  EXPECT_THAT(out, HasSubstr("  \"0x100081\" -> \"0x100040\" [label=\"exception 1\"];\n"));
  EXPECT_EQ(out.substr(out.size() - 2), "}\n");
}

TEST(ReportFormatNames, ParseAndRefuse) {
  EXPECT_EQ(*ParseReportFormat("drcov"), ReportFormat::kDrcov);
  EXPECT_THAT(ParseReportFormat("xml"),
              ::vbts::testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--format=xml")));
}

// The command on files: complete, truncated, not a trace, missing.
class ReportCommandTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& bytes) {
    char path[] = "/tmp/vbts_report_test_XXXXXX";
    const int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    close(fd);
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const std::string& p : paths_) unlink(p.c_str());
  }
  std::string Trace() {
    std::string out;
    trace::Writer w([&out](absl::Span<const uint8_t> b) {
      out.append(reinterpret_cast<const char*>(b.data()), b.size());
      return absl::OkStatus();
    });
    EXPECT_TRUE(w.WriteHeader(Hdr()).ok());
    for (const Record& r : kRun) EXPECT_TRUE(w.Add(r).ok());
    EXPECT_TRUE(w.Finish({}).ok());
    return out;
  }
  int Report(const std::string& file, const std::string& format, std::string* out) {
    std::ostringstream s;
    ReportOptions o;
    o.file = file;
    o.format = format;
    const int rc = ReportCommand(o, s);
    *out = s.str();
    return rc;
  }
  std::vector<std::string> paths_;
};

TEST_F(ReportCommandTest, CompleteFile) {
  std::string out;
  EXPECT_EQ(Report(Write(Trace()), "branches", &out), 0);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 6);
}

TEST_F(ReportCommandTest, TruncatedFileReportsItsPrefixAndExitsOne) {
  // Cut inside the end block: all six records are in the one records block.
  const std::string t = Trace();
  std::string out;
  EXPECT_EQ(Report(Write(t.substr(0, t.size() - 3)), "branches", &out), kReportIncomplete);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 6);
  // Cut inside the records block (header: 16 fixed bytes, fields, CRC):
  // nothing of it can be trusted.
  const size_t first = 16 + (static_cast<uint8_t>(t[12]) | static_cast<uint8_t>(t[13]) << 8) + 4;
  EXPECT_EQ(Report(Write(t.substr(0, first + 20)), "text", &out), kReportIncomplete);
  EXPECT_THAT(out, HasSubstr("# INCOMPLETE: truncated at byte"));
  EXPECT_THAT(out, HasSubstr("# summary: 0 transfers"));
}

TEST_F(ReportCommandTest, CorruptFileExitsOne) {
  std::string t = Trace();
  t[t.size() - 40] ^= 0x10;
  std::string out;
  EXPECT_EQ(Report(Write(t), "json", &out), kReportIncomplete);
}

TEST_F(ReportCommandTest, ForeignAndMissingFiles) {
  std::string out;
  EXPECT_EQ(Report(Write("#!/bin/sh\necho not a trace\n"), "text", &out), kExitVbtsError);
  EXPECT_EQ(out, "");
  EXPECT_EQ(Report("/nonexistent/trace.vbtr", "text", &out), kExitVbtsError);
  EXPECT_EQ(Report(Write(Trace()), "xml", &out), kExitUsage);
}

}  // namespace
}  // namespace vbts::record
