// recorder_test.cc: vbts record's filters, --max-records, time-bounded
// blocks and the end block, with a fake clock and an in-memory file.
#include "record/recorder.h"

#include <unistd.h>

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/status_macros.h"
#include "base/testing/status_matchers.h"

namespace vbts::record {
namespace {

using pmu::BranchKind;
using ::testing::HasSubstr;
using ::vbts::testing::StatusIs;

pmu::Branch B(BranchKind k, uint64_t from, uint64_t to, uint8_t cpl_from = 0, uint8_t cpl_to = 0) {
  pmu::Branch b;
  b.kind = k;
  b.from = from;
  b.to = to;
  b.cpl_from = cpl_from;
  b.cpl_to = cpl_to;
  return b;
}

TEST(TransferFilter, CplMatchesEitherEnd) {
  TransferFilter f;
  f.cpl = 3;
  EXPECT_TRUE(f.Keep(B(BranchKind::kJcc, 1, 2, 3, 3)));
  EXPECT_TRUE(f.Keep(B(BranchKind::kSyscall, 1, 2, 3, 0)));   // leaving ring 3
  EXPECT_TRUE(f.Keep(B(BranchKind::kSysret, 1, 2, 0, 3)));    // entering ring 3
  EXPECT_FALSE(f.Keep(B(BranchKind::kJcc, 1, 2, 0, 0)));
  EXPECT_EQ(f.Describe(), "cpl=3");
}

TEST(TransferFilter, RangesMatchSourceOrDestination) {
  TransferFilter f;
  f.ranges = {{0x1000, 0x1100}};
  EXPECT_TRUE(f.Keep(B(BranchKind::kJcc, 0x1010, 0x1000)));
  EXPECT_TRUE(f.Keep(B(BranchKind::kCall, 0x5000, 0x1000)));   // call into the range
  EXPECT_TRUE(f.Keep(B(BranchKind::kRet, 0x10ff, 0x5005)));    // return out of it
  EXPECT_FALSE(f.Keep(B(BranchKind::kJcc, 0x1100, 0x2000)));   // END is exclusive
  EXPECT_FALSE(f.Keep(B(BranchKind::kJcc, 0xfff, 0x2000)));
  EXPECT_EQ(f.Describe(), "range=0x1000:0x1100");
  EXPECT_EQ(TransferFilter{}.Describe(), "none");
}

TEST(TransferFilter, MakeFilterRefusesBadValues) {
  EXPECT_THAT(MakeFilter("1", {}, nullptr), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--cpl=1")));
  EXPECT_THAT(MakeFilter("all", {"main"}, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--symbols")));
  VBTS_ASSERT_OK_AND_ASSIGN(TransferFilter f, MakeFilter("0", {"0x10:0x20", "0x40:0x48"}, nullptr));
  EXPECT_EQ(f.Describe(), "cpl=0 range=0x10:0x20 range=0x40:0x48");
}

TEST(Sha256, KnownDigest) {
  // FIPS 180-2 appendix B.1: SHA-256("abc").
  const std::array<uint8_t, 32> d = Sha256({'a', 'b', 'c'});
  const uint8_t want[32] = {0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40, 0xde, 0x5d, 0xae, 0x22, 0x23,
                            0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
  EXPECT_EQ(std::memcmp(d.data(), want, 32), 0);
}

struct Fixture {
  std::string file;
  uint64_t now = 1000;
  std::unique_ptr<Recorder> rec;
  explicit Fixture(Recorder::Options o) {
    rec = std::make_unique<Recorder>(
        std::move(o),
        [this](absl::Span<const uint8_t> b) {
          file.append(reinterpret_cast<const char*>(b.data()), b.size());
          return absl::OkStatus();
        },
        [this] { return now; });
    EXPECT_THAT(rec->Start(trace::Header{}), ::vbts::testing::IsOk());
  }
};

TEST(Recorder, MaxRecordsEndsTheRecordingAndSaysSo) {
  Recorder::Options o;
  o.max_records = 3;
  o.filter.cpl = 0;
  Fixture f(o);
  f.rec->OnTransfer(B(BranchKind::kNone, 1, 2));         // not taken: ignored entirely
  f.rec->OnTransfer(B(BranchKind::kJcc, 0x10, 0x20, 3, 3));  // filtered
  // The 3rd record reaches the limit: from then on OnTransfer says "no more".
  for (int i = 0; i < 5; i++) EXPECT_EQ(f.rec->OnTransfer(B(BranchKind::kJmp, 0x100 + i, 0x200)), i < 2) << i;
  EXPECT_TRUE(f.rec->limit_reached());
  EXPECT_EQ(f.rec->records(), 3u);
  EXPECT_EQ(f.rec->unrecorded(), 2u);
  EXPECT_EQ(f.rec->filtered(), 1u);
  const size_t before_finish = f.file.size();
  EXPECT_GT(before_finish, 0u);  // the records were written when the limit was hit
  f.now += 5'000'000'000ull;
  VBTS_ASSERT_OK(f.rec->Finish("guest-exit", 1));
  VBTS_ASSERT_OK_AND_ASSIGN(trace::ParsedTrace t, trace::ParseTrace(f.file));
  VBTS_EXPECT_OK(t.status);
  ASSERT_EQ(t.records.size(), 3u);
  EXPECT_EQ(t.records[2].from, 0x102u);
  ASSERT_TRUE(t.trailer);
  EXPECT_TRUE(t.trailer->limit_reached);
  EXPECT_EQ(t.trailer->unrecorded, 2u);
  EXPECT_EQ(t.trailer->filtered, 1u);
  EXPECT_EQ(t.trailer->end, "guest-exit");
  EXPECT_EQ(t.trailer->exit_status, 1);
  EXPECT_EQ(t.trailer->duration_ns, 5'000'000'000u);
}

TEST(Recorder, BlocksAreWrittenAtLeastEveryQuarterSecond) {
  Fixture f(Recorder::Options{});
  const size_t header = f.file.size();
  f.rec->OnTransfer(B(BranchKind::kJmp, 0x100, 0x200));
  EXPECT_EQ(f.file.size(), header);  // held in the block being filled
  f.now += 100'000'000;
  f.rec->OnTransfer(B(BranchKind::kJmp, 0x210, 0x300));
  EXPECT_EQ(f.file.size(), header);
  f.now += 200'000'000;              // 0.3 s since the start
  f.rec->OnTransfer(B(BranchKind::kJmp, 0x310, 0x400));
  EXPECT_GT(f.file.size(), header);  // a crash now keeps all three
  VBTS_ASSERT_OK_AND_ASSIGN(trace::ParsedTrace t, trace::ParseTrace(f.file));
  EXPECT_EQ(t.records.size(), 3u);
  EXPECT_THAT(t.status, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("no end block")));
}

TEST(Recorder, WriteErrorsAreReportedAtTheEnd) {
  int writes = 0;
  Recorder r(
      Recorder::Options{}, [&writes](absl::Span<const uint8_t>) {
        return ++writes > 1 ? absl::ResourceExhaustedError("disk full") : absl::OkStatus();
      },
      [] { return uint64_t{0}; });
  VBTS_ASSERT_OK(r.Start(trace::Header{}));
  // The header is write 1; the first block's write fails: from then on the
  // recorder wants no more transfers (the tracer stops following the guest
  // for it), and says so for every transfer offered anyway.
  int wanted = 0;
  for (int i = 0; i < 20000; i++) wanted += r.OnTransfer(B(BranchKind::kJcc, 0x100 + (i * 7919) % 4096, 0x5000 + i));
  EXPECT_GT(wanted, 0);
  EXPECT_LT(wanted, 20000);
  EXPECT_FALSE(r.OnTransfer(B(BranchKind::kJcc, 0x100, 0x200)));
  EXPECT_THAT(r.Finish("guest-exit", 1), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("disk full")));
}

// A session whose run never starts (the machine could not be built) creates
// no output file and leaves an existing one as it was.
TEST(RecordSession, NoFileUntilTheRunStarts) {
  char image[] = "/tmp/vbts-rec-image-XXXXXX";
  const int fd = mkstemp(image);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "not an image", 12), 12);
  close(fd);
  RecordOptions o;
  o.output = std::string(image) + ".trace";
  unlink(o.output.c_str());
  {
    VBTS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<RecordSession> s, RecordSession::Open(o, image));
    EXPECT_THAT(s->Finish("error", 116), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("never started")));
  }
  EXPECT_NE(access(o.output.c_str(), F_OK), 0) << o.output << " exists";
  { std::ofstream(o.output) << "keep"; }
  { VBTS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<RecordSession> s, RecordSession::Open(o, image)); }
  std::ifstream in(o.output);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "keep");
  unlink(o.output.c_str());
  unlink(image);
}

}  // namespace
}  // namespace vbts::record
