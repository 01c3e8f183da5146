// trace_format_test.cc: the trace file encoder and decoder
// (docs/trace-format.md): exact bytes, round trips, truncated and corrupt files.
#include "record/trace_format.h"

#include <cstring>
#include <random>
#include <sstream>

#include <zlib.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/testing/status_matchers.h"

namespace vbts::record::trace {
namespace {

using pmu::BranchKind;
using pmu::ExecMode;
using ::testing::HasSubstr;

Record Rec(BranchKind k, uint64_t from, uint64_t to, uint8_t cpl = 0, ExecMode mode = ExecMode::kProt32) {
  Record r;
  r.kind = k;
  r.from = from;
  r.to = to;
  r.cpl_from = r.cpl_to = cpl;
  r.mode_from = r.mode_to = mode;
  return r;
}

Header SampleHeader() {
  Header h;
  h.image = "guest-tests/hello.elf";
  h.image_sha256.emplace();
  for (int i = 0; i < 32; i++) (*h.image_sha256)[i] = static_cast<uint8_t>(i * 7);
  h.cpu_model = "westmere";
  h.vbts_version = "0.1.0";
  h.start_time_ns = 1700000000123456789ull;
  h.code = {{0x100000, 0x103618}};
  h.entry = 0x100100;
  h.filter = "cpl=all";
  h.max_records = 10000000;
  h.command = "vbts record -o t.vbtr hello.elf";
  return h;
}

// Writes header + records + end block into a string.
std::string Encode(const Header& h, const std::vector<Record>& recs, Trailer t = {}) {
  std::string out;
  Writer w([&out](absl::Span<const uint8_t> b) {
    out.append(reinterpret_cast<const char*>(b.data()), b.size());
    return absl::OkStatus();
  });
  VBTS_EXPECT_OK(w.WriteHeader(h));
  for (const Record& r : recs) VBTS_EXPECT_OK(w.Add(r));
  VBTS_EXPECT_OK(w.Finish(t));
  EXPECT_EQ(w.bytes_written(), out.size());
  return out;
}

// Offset of the first block: 16 fixed bytes, the fields, the CRC.
size_t FirstBlock(const std::string& file) {
  uint32_t len;
  std::memcpy(&len, file.data() + 12, 4);
  return 16 + len + 4;
}

std::vector<Record> Workload(int n, uint32_t seed) {
  // A mix of every shape the encoder distinguishes: a hot loop (predicted
  // runs), data-dependent branches, calls and returns, 64-bit kernel
  // addresses, ring changes with vectors and mode changes.
  std::mt19937 rng(seed);
  std::vector<Record> v;
  uint64_t pos = 0x100100;
  for (int i = 0; i < n; i++) {
    switch (rng() % 8) {
      case 0:
      case 1:
      case 2:
        v.push_back(Rec(BranchKind::kJcc, 0x100140, 0x100130));
        break;
      case 3:
        v.push_back(Rec(rng() % 2 ? BranchKind::kJcc : BranchKind::kJmp, pos + rng() % 64, 0x100000 + rng() % 0x4000));
        break;
      case 4:
        v.push_back(Rec(BranchKind::kCall, pos + 5, 0x101000 + (rng() % 16) * 0x40));
        v.push_back(Rec(BranchKind::kRet, v.back().to + 0x20, pos + 10));
        break;
      case 5: {
        Record r = Rec(BranchKind::kInterrupt, 0xffffffff80001234ull + rng() % 4096, 0xffffffff80100000ull, 3,
                       ExecMode::kLong64);
        r.cpl_to = 0;
        r.vector = static_cast<uint8_t>(0x20 + rng() % 200);
        r.ia32e = true;
        v.push_back(r);
        Record back = Rec(BranchKind::kIret, 0xffffffff80100040ull, r.from, 0, ExecMode::kLong64);
        back.cpl_to = 3;
        back.ia32e = true;
        v.push_back(back);
        break;
      }
      case 6: {
        Record r = Rec(BranchKind::kFarJmp, 0x100200, 0x100300, 0, ExecMode::kProt32);
        r.mode_to = ExecMode::kLong64;
        r.ia32e = true;
        v.push_back(r);
        Record e = Rec(BranchKind::kException, 0x7000, 0x100400, 0, ExecMode::kReal);
        e.vector = 13;
        v.push_back(e);
        break;
      }
      default:
        v.push_back(Rec(BranchKind::kSyscall, 0x400000 + rng() % 100, 0xffffffff81000000ull, 3, ExecMode::kLong64));
        v.back().cpl_to = 0;
        break;
    }
    pos = v.back().to;
  }
  return v;
}

TEST(TraceFormat, RoundTripsHeaderRecordsAndTrailer) {
  const std::vector<Record> recs = Workload(50000, 1);
  Trailer t;
  t.filtered = 12;
  t.unrecorded = 3;
  t.limit_reached = true;
  t.end = "guest-exit";
  t.exit_status = 1;
  t.duration_ns = 987654321;
  const std::string file = Encode(SampleHeader(), recs, t);
  VBTS_ASSERT_OK_AND_ASSIGN(ParsedTrace p, ParseTrace(file));
  VBTS_EXPECT_OK(p.status);
  EXPECT_EQ(p.header.image, "guest-tests/hello.elf");
  EXPECT_EQ(p.header.image_sha256, SampleHeader().image_sha256);
  EXPECT_EQ(p.header.cpu_model, "westmere");
  EXPECT_EQ(p.header.vbts_version, "0.1.0");
  EXPECT_EQ(p.header.start_time_ns, 1700000000123456789ull);
  EXPECT_EQ(p.header.code, (std::vector<AddressRange>{{0x100000, 0x103618}}));
  EXPECT_EQ(p.header.entry, std::optional<uint64_t>(0x100100));
  EXPECT_EQ(p.header.filter, "cpl=all");
  EXPECT_EQ(p.header.max_records, 10000000u);
  EXPECT_EQ(p.header.command, "vbts record -o t.vbtr hello.elf");
  EXPECT_EQ(p.header.version_major, 1);
  ASSERT_EQ(p.records.size(), recs.size());
  EXPECT_TRUE(p.records == recs);
  ASSERT_TRUE(p.trailer.has_value());
  EXPECT_EQ(p.trailer->records, recs.size());
  EXPECT_EQ(p.trailer->filtered, 12u);
  EXPECT_EQ(p.trailer->unrecorded, 3u);
  EXPECT_TRUE(p.trailer->limit_reached);
  EXPECT_EQ(p.trailer->end, "guest-exit");
  EXPECT_EQ(p.trailer->exit_status, 1);
  EXPECT_EQ(p.trailer->duration_ns, 987654321u);
}

TEST(TraceFormat, LoopEncodesToExactBytes) {
  // Five iterations of `jnz` at 0x100010 back to 0x100000, CPL0 pm32:
  //  1st: T=0x01 (jcc, no state byte: CPL0/pm32 is the block's start state),
  //       zigzag(0x100010 - 0) = 0x200020 = LEB128 A0 80 80 01, zigzag(-16) = 0x1F;
  //  2nd: position 0x100000 has no prediction yet: 01, zigzag(0x10) = 0x20, 1F;
  //  3rd..5th: predicted from position 0x100000: one run byte 0x80 | (3 - 1).
  const Record loop = Rec(BranchKind::kJcc, 0x100010, 0x100000);
  const std::string file = Encode(Header{}, std::vector<Record>(5, loop));
  const size_t b = FirstBlock(file);
  const uint8_t expected[] = {'V', 'B', 'R', 'B', 10, 0, 0, 0, 5, 0, 0, 0};
  ASSERT_GE(file.size(), b + 16 + 10);
  EXPECT_EQ(std::memcmp(file.data() + b, expected, 12), 0);
  const uint8_t payload[] = {0x01, 0xA0, 0x80, 0x80, 0x01, 0x1F, 0x01, 0x20, 0x1F, 0x82};
  EXPECT_EQ(std::memcmp(file.data() + b + 16, payload, 10), 0);
}

TEST(TraceFormat, StateByteVectorAndSixtyFourBitDeltas) {
  // An interrupt from CPL3 lm64 to CPL0 lm64, vector 0x40, IA32e:
  // T = 17 (interrupt) | 0x20 (state) | 0x40 (ia32e) = 0x71,
  // state = cpl_from 3 | mode_from 3 << 2 | cpl_to 0 << 4 | mode_to 3 << 6 = 0xCF.
  Record r = Rec(BranchKind::kInterrupt, 0x400000, 0xffffffff80000000ull, 3, ExecMode::kLong64);
  r.cpl_to = 0;
  r.vector = 0x40;
  r.ia32e = true;
  const std::string file = Encode(Header{}, {r});
  const size_t b = FirstBlock(file);
  const uint8_t* p = reinterpret_cast<const uint8_t*>(file.data()) + b + 16;
  EXPECT_EQ(p[0], 0x71);
  EXPECT_EQ(p[1], 0xCF);
  VBTS_ASSERT_OK_AND_ASSIGN(ParsedTrace t, ParseTrace(file));
  ASSERT_EQ(t.records.size(), 1u);
  EXPECT_EQ(t.records[0], r);
}

TEST(TraceFormat, HotLoopCostsUnderOneBytePerRecord) {
  // 100000 loop records: 6 + 3 bytes for the first two, then one run byte
  // per 128 predicted records: ceil(99998 / 128) = 782; payload 791 bytes.
  const std::string file = Encode(Header{}, std::vector<Record>(100000, Rec(BranchKind::kJcc, 0x100010, 0x100000)));
  uint32_t len;
  std::memcpy(&len, file.data() + FirstBlock(file) + 4, 4);
  EXPECT_EQ(len, 791u);
}

TEST(TraceFormat, SplitsIntoIndependentBlocks) {
  const std::vector<Record> recs = Workload(200000, 2);
  const std::string file = Encode(Header{}, recs);
  std::istringstream in(file);
  VBTS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Reader> r, Reader::Open(in));
  Record rec;
  uint64_t n = 0;
  while (r->Next(&rec)) ASSERT_EQ(rec, recs[n++]);
  VBTS_EXPECT_OK(r->status());
  EXPECT_EQ(n, recs.size());
  // Each block's payload is at most kBlockTarget plus one record.
  EXPECT_GE(r->blocks_read(), file.size() / (kBlockTarget + 64));
  EXPECT_GT(r->blocks_read(), 3u);
}

TEST(TraceFormat, RefusesUnrecordableTransfers) {
  std::string out;
  Writer w([&out](absl::Span<const uint8_t> b) {
    out.append(reinterpret_cast<const char*>(b.data()), b.size());
    return absl::OkStatus();
  });
  EXPECT_THAT(w.Add(Rec(BranchKind::kNone, 1, 2)), ::vbts::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  Record bad = Rec(BranchKind::kJmp, 1, 2);
  bad.cpl_to = 4;
  EXPECT_THAT(w.Add(bad), ::vbts::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST(TraceFormat, PropagatesOutputErrors) {
  Writer w([](absl::Span<const uint8_t>) { return absl::ResourceExhaustedError("disk full"); });
  EXPECT_THAT(w.WriteHeader(Header{}), ::vbts::testing::StatusIs(absl::StatusCode::kResourceExhausted, ::testing::_));
}

TEST(TraceFormat, NotATraceFile) {
  EXPECT_THAT(ParseTrace(""), ::vbts::testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a vbts trace")));
  EXPECT_THAT(ParseTrace("\x7f" "ELF\x01\x01\x01\0\0\0\0\0\0\0\0\0\0\0\0"),
              ::vbts::testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a vbts trace")));
}

TEST(TraceFormat, RefusesAnotherMajorVersion) {
  std::string file = Encode(Header{}, {});
  file[8] = 2;
  EXPECT_THAT(ParseTrace(file),
              ::vbts::testing::StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("version 2.0; this vbts reads version 1.x")));
}

TEST(TraceFormat, EveryTruncationGivesThePrefixAndAClearError) {
  const std::vector<Record> recs = Workload(20000, 3);
  const std::string file = Encode(SampleHeader(), recs);
  const size_t first = FirstBlock(file);
  // Block boundaries, to know how many records a prefix must yield.
  std::vector<std::pair<size_t, uint64_t>> ends;  // (end offset, records up to it)
  uint64_t total = 0;
  for (size_t off = first; off < file.size();) {
    uint32_t len, count;
    std::memcpy(&len, file.data() + off + 4, 4);
    std::memcpy(&count, file.data() + off + 8, 4);
    off += 16 + len;
    total += count;
    ends.push_back({off, total});
  }
  ASSERT_GE(ends.size(), 3u);
  ASSERT_EQ(total, recs.size());
  for (size_t n = 0; n < file.size(); n += (n < first + 64 || n > file.size() - 64) ? 1 : 97) {
    absl::StatusOr<ParsedTrace> p = ParseTrace(file.substr(0, n));
    if (n < first) {
      ASSERT_FALSE(p.ok()) << n;
      EXPECT_THAT(p.status().message(), n < 8 ? HasSubstr("not a vbts trace") : HasSubstr("truncated")) << n;
      continue;
    }
    VBTS_ASSERT_OK(p.status());
    EXPECT_THAT(p->status, ::vbts::testing::StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated"))) << n;
    EXPECT_FALSE(p->trailer.has_value());
    uint64_t expect = 0;
    for (auto [end, count] : ends)
      if (end <= n) expect = count;
    ASSERT_EQ(p->records.size(), expect) << n;
    EXPECT_TRUE(std::equal(p->records.begin(), p->records.end(), recs.begin())) << n;
    EXPECT_THAT(p->status.message(), HasSubstr(absl::StrFormat("(%u records in", expect)));
  }
}

TEST(TraceFormat, EveryCorruptByteIsCaughtAndThePrefixKept) {
  const std::vector<Record> recs = Workload(300, 4);
  const std::string file = Encode(SampleHeader(), recs);
  for (size_t i = 0; i < file.size(); i++) {
    for (uint8_t flip : {0x01, 0x80}) {
      std::string bad = file;
      bad[i] ^= flip;
      absl::StatusOr<ParsedTrace> p = ParseTrace(bad);
      if (!p.ok()) continue;  // header damage: refused with a status
      EXPECT_FALSE(p->status.ok()) << "byte " << i << " flip " << int(flip);
      EXPECT_LE(p->records.size(), recs.size());
      EXPECT_TRUE(std::equal(p->records.begin(), p->records.end(), recs.begin())) << i;
    }
  }
}

TEST(TraceFormat, GarbageNeverCrashes) {
  // Random bytes behind a valid header: decoded or refused, never a crash;
  // also blocks with valid CRCs over random payloads (exercises the decoder).
  std::mt19937 rng(5);
  const std::string head = Encode(Header{}, {}).substr(0, FirstBlock(Encode(Header{}, {})));
  for (int iter = 0; iter < 2000; iter++) {
    std::string payload(rng() % 64, '\0');
    for (char& c : payload) c = static_cast<char>(rng());
    std::string block = "VBRB";
    uint32_t len = static_cast<uint32_t>(payload.size()), count = rng() % 40;
    block.append(reinterpret_cast<const char*>(&len), 4);
    block.append(reinterpret_cast<const char*>(&count), 4);
    uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(block.data()), 12));
    crc = static_cast<uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(payload.data()), len));
    block.append(reinterpret_cast<const char*>(&crc), 4);
    absl::StatusOr<ParsedTrace> p = ParseTrace(head + block + payload);
    VBTS_ASSERT_OK(p.status());
    EXPECT_FALSE(p->status.ok());
  }
}

TEST(TraceFormat, NothingAfterTheReaderStopped) {
  // Found by trace_fuzz: a block with a valid CRC whose payload holds fewer
  // records than its count fails to decode, and Next() returned false; but a
  // further Next() returned the records decoded before the failure, from the
  // block the reader had refused.
  const std::vector<Record> recs = Workload(5, 1);
  std::string file = Encode(Header{}, recs);
  const size_t b = FirstBlock(file);
  uint32_t len, count;
  std::memcpy(&len, file.data() + b + 4, 4);
  std::memcpy(&count, file.data() + b + 8, 4);
  ASSERT_EQ(count, recs.size());
  count++;
  std::memcpy(file.data() + b + 8, &count, 4);
  uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(file.data() + b), 12));
  crc = static_cast<uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(file.data() + b + 16), len));
  std::memcpy(file.data() + b + 12, &crc, 4);
  std::istringstream in(file);
  VBTS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Reader> r, Reader::Open(in));
  Record rec;
  EXPECT_FALSE(r->Next(&rec));
  EXPECT_THAT(r->status(), ::vbts::testing::StatusIs(absl::StatusCode::kDataLoss, HasSubstr("corrupt block")));
  EXPECT_FALSE(r->Next(&rec));
  EXPECT_FALSE(r->Next(&rec));
  EXPECT_EQ(r->records_read(), 0u);
}

}  // namespace
}  // namespace vbts::record::trace
