// btrace_test.cc: GDB's BTS-format branch trace (gdb/btrace.h).  Each test
// derives its expected XML block by block in the comments: a block begins
// at the trace start or at the target of a taken transfer, ends at its last
// retired instruction, and the newest block ends at the stop PC.
#include "gdb/btrace.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_format.h"
#include "base/testing/status_matchers.h"

namespace vbts::gdb {
namespace {

using pmu::BranchKind;
using ::testing::HasSubstr;
using vbts::testing::StatusIs;

constexpr char kHead[] = "<?xml version=\"1.0\"?>\n<!DOCTYPE btrace SYSTEM \"btrace.dtd\">\n<btrace version=\"1.0\">\n";
constexpr char kTail[] = "</btrace>\n";

pmu::Branch B(BranchKind k, uint64_t from, uint64_t to) {
  pmu::Branch b;
  b.kind = k;
  b.from = from;
  b.to = to;
  return b;
}
// A two-byte instruction that falls through.
pmu::Branch Insn(uint64_t at) { return B(BranchKind::kNone, at, at + 2); }
pmu::Branch Jmp(uint64_t from, uint64_t to) { return B(BranchKind::kJmp, from, to); }
pmu::Branch Fault(uint64_t at, uint64_t handler) { return B(BranchKind::kException, at, handler); }

// The document with these blocks (newest first), "begin,end" pairs.
std::string Xml(std::vector<std::pair<uint64_t, uint64_t>> blocks) {
  std::string s = kHead;
  for (auto [b, e] : blocks) s += absl::StrFormat("<block begin=\"0x%x\" end=\"0x%x\"/>\n", b, e);
  return s + kTail;
}

std::string Read(BranchTrace& t, absl::string_view annex, uint64_t pc) {
  absl::StatusOr<std::string> x = t.Read(annex, pc);
  EXPECT_THAT(x, vbts::testing::IsOk());
  return x.ok() ? *x : "";
}

TEST(BranchTrace, NothingRanIsOneBlockAtPc) {
  BranchTrace t;
  t.Start(0x100, BranchTrace::kDefaultSize);
  // The open block begins at the start PC and ends at the current PC.
  EXPECT_EQ(Read(t, "all", 0x100),
            "<?xml version=\"1.0\"?>\n<!DOCTYPE btrace SYSTEM \"btrace.dtd\">\n<btrace version=\"1.0\">\n"
            "<block begin=\"0x100\" end=\"0x100\"/>\n</btrace>\n");
}

TEST(BranchTrace, TakenBranchesCloseBlocks) {
  BranchTrace t;
  t.Start(0x100, BranchTrace::kDefaultSize);
  t.Add(Insn(0x100));             // block 1: 0x100...
  t.Add(Jmp(0x102, 0x200));       // ...ends at the jmp at 0x102; block 2 begins at 0x200
  t.Add(Insn(0x200));             // not-taken instructions extend it
  t.Add(B(BranchKind::kCall, 0x202, 0x300));  // block 2 ends at the call at 0x202
  // Stopped at 0x300 before it ran: the open block is [0x300, 0x300].
  EXPECT_EQ(Read(t, "all", 0x300), Xml({{0x300, 0x300}, {0x200, 0x202}, {0x100, 0x102}}));
}

TEST(BranchTrace, EventEndsBlockAtLastRetiredInstruction) {
  BranchTrace t;
  t.Start(0x100, BranchTrace::kDefaultSize);
  t.Add(Insn(0x100));
  t.Add(Fault(0x102, 0x500));  // 0x102 faulted: it did not retire, block 1 is [0x100, 0x100]
  t.Add(Insn(0x500));
  EXPECT_EQ(Read(t, "all", 0x502), Xml({{0x500, 0x502}, {0x100, 0x100}}));
}

TEST(BranchTrace, EmptyBlocksAreSkipped) {
  BranchTrace t;
  t.Start(0x100, BranchTrace::kDefaultSize);
  // An interrupt before the first instruction retired: [0x100, ?] holds
  // nothing and is not reported.  The handler's first instruction jumps.
  t.Add(B(BranchKind::kInterrupt, 0x100, 0x600));
  t.Add(Jmp(0x600, 0x700));
  // An NMI at the jump target, before anything there retired: empty again.
  t.Add(B(BranchKind::kNmi, 0x700, 0x800));
  EXPECT_EQ(Read(t, "all", 0x800), Xml({{0x800, 0x800}, {0x600, 0x600}}));
}

TEST(BranchTrace, SoftwareInterruptIsAnInstruction) {
  BranchTrace t;
  t.Start(0x100, BranchTrace::kDefaultSize);
  // INT n retires (unlike an exception): block 1 ends at the INT itself.
  t.Add(B(BranchKind::kSoftInt, 0x100, 0x900));
  EXPECT_EQ(Read(t, "all", 0x900), Xml({{0x900, 0x900}, {0x100, 0x100}}));
}

TEST(BranchTrace, KeepsSizeOver24Blocks) {
  BranchTrace t;
  t.Start(0x100, 48);  // 48 / 24 = 2 closed blocks kept
  t.Add(Jmp(0x100, 0x200));  // [0x100, 0x100] (dropped below)
  t.Add(Jmp(0x200, 0x300));  // [0x200, 0x200] (dropped below)
  t.Add(Jmp(0x300, 0x400));  // [0x300, 0x300]
  t.Add(Jmp(0x400, 0x500));  // [0x400, 0x400]
  EXPECT_EQ(Read(t, "all", 0x500), Xml({{0x500, 0x500}, {0x400, 0x400}, {0x300, 0x300}}));
}

TEST(BranchTrace, NewIsEmptyWhenNothingRan) {
  BranchTrace t;
  t.Start(0x100, BranchTrace::kDefaultSize);
  t.Add(Insn(0x100));
  // Something ran since the start: "new" is everything.
  EXPECT_EQ(Read(t, "new", 0x102), Xml({{0x100, 0x102}}));
  // Nothing since: an empty trace (GDB keeps what it has).
  EXPECT_EQ(Read(t, "new", 0x102), Xml({}));
  EXPECT_EQ(Xml({}), "<?xml version=\"1.0\"?>\n<!DOCTYPE btrace SYSTEM \"btrace.dtd\">\n<btrace version=\"1.0\">\n"
                     "</btrace>\n");
  t.Add(Insn(0x102));
  EXPECT_EQ(Read(t, "new", 0x104), Xml({{0x100, 0x104}}));
}

TEST(BranchTrace, DeltaStitchesAtThePreviousPc) {
  BranchTrace t;
  t.Start(0x100, BranchTrace::kDefaultSize);
  t.Add(Insn(0x100));
  EXPECT_EQ(Read(t, "all", 0x102), Xml({{0x100, 0x102}}));
  // Nothing ran: exactly one block ending at the PC (GDB: "no progress").
  EXPECT_EQ(Read(t, "delta", 0x102), Xml({{0, 0x102}}));

  // The block that held 0x102 runs on to the jmp at 0x104: its end 0x104
  // goes with begin 0 (GDB puts its previous PC 0x102 there); then a call
  // block [0x200, 0x200] and the open block [0x300, 0x302].
  t.Add(Insn(0x102));
  t.Add(Jmp(0x104, 0x200));
  t.Add(B(BranchKind::kCall, 0x200, 0x300));
  t.Add(Insn(0x300));
  EXPECT_EQ(Read(t, "delta", 0x302), Xml({{0x300, 0x302}, {0x200, 0x200}, {0, 0x104}}));

  // Sequential progress inside the open block only: one block [0, pc],
  // GDB stitches [0x302, 0x306].
  t.Add(Insn(0x302));
  t.Add(Insn(0x304));
  EXPECT_EQ(Read(t, "delta", 0x306), Xml({{0, 0x306}}));
  // A full read still has everything.
  EXPECT_EQ(Read(t, "all", 0x306), Xml({{0x300, 0x306}, {0x200, 0x200}, {0x100, 0x104}}));
}

TEST(BranchTrace, StartCountsAsARead) {
  // GDB seeds its trace with the PC at enable time and reads a delta first.
  BranchTrace t;
  t.Start(0x100, BranchTrace::kDefaultSize);
  EXPECT_EQ(Read(t, "new", 0x100), Xml({}));  // nothing ran
  EXPECT_EQ(Read(t, "delta", 0x100), Xml({{0, 0x100}}));
  // 0x100 (GDB's seed) retires and jumps: the first delta block ends there.
  t.Add(Jmp(0x100, 0x200));
  EXPECT_EQ(Read(t, "delta", 0x200), Xml({{0x200, 0x200}, {0, 0x100}}));
}

TEST(BranchTrace, DeltaWhenTheReadPcNeverRetired) {
  BranchTrace t;
  t.Start(0x100, BranchTrace::kDefaultSize);
  t.Add(Insn(0x100));
  EXPECT_EQ(Read(t, "all", 0x102), Xml({{0x100, 0x102}}));
  // An interrupt arrives before 0x102 retires: the block closes at 0x100,
  // before GDB's last instruction.  The delta's first block is then
  // [0, 0x102], so GDB re-adds 0x102 (which it already shows) and goes on
  // with the handler's block.
  t.Add(B(BranchKind::kInterrupt, 0x102, 0x800));
  t.Add(Insn(0x800));
  EXPECT_EQ(Read(t, "delta", 0x802), Xml({{0x800, 0x802}, {0, 0x102}}));
}

TEST(BranchTrace, DeltaAfterDroppedBlocksIsAnError) {
  BranchTrace t;
  t.Start(0x100, 48);  // 2 blocks
  EXPECT_EQ(Read(t, "all", 0x100), Xml({{0x100, 0x100}}));
  t.Add(Jmp(0x100, 0x200));  // closes the read block (end 0x100, kept aside)
  t.Add(Jmp(0x200, 0x300));  // new 1
  t.Add(Jmp(0x300, 0x400));  // new 2
  t.Add(Jmp(0x400, 0x500));  // new 3: more than the 2 kept
  EXPECT_THAT(t.Read("delta", 0x500), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("dropped 1 blocks")));
  // GDB falls back to "new", which has what is left.
  EXPECT_EQ(Read(t, "new", 0x500), Xml({{0x500, 0x500}, {0x400, 0x400}, {0x300, 0x300}}));
  // Exactly as many new blocks as kept is fine.
  t.Add(Jmp(0x500, 0x600));  // read block [0x500, 0x500]
  t.Add(Jmp(0x600, 0x700));
  t.Add(Jmp(0x700, 0x800));
  EXPECT_EQ(Read(t, "delta", 0x800), Xml({{0x800, 0x800}, {0x700, 0x700}, {0x600, 0x600}, {0, 0x500}}));
}

TEST(BranchTrace, Errors) {
  BranchTrace t;
  EXPECT_THAT(t.Read("all", 0), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not enabled")));
  t.Start(0x100, BranchTrace::kDefaultSize);
  EXPECT_THAT(t.Read("everything", 0x100),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"everything\"")));
}

TEST(BranchTrace, StopAndRestartReset) {
  BranchTrace t;
  t.Add(Insn(0x50));  // inactive: ignored
  t.Start(0x100, BranchTrace::kDefaultSize);
  t.Add(Jmp(0x100, 0x200));
  t.Stop();
  EXPECT_FALSE(t.active());
  EXPECT_THAT(t.Read("all", 0x200), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not enabled")));
  t.Start(0x200, 4096);
  EXPECT_EQ(t.size(), 4096u);
  EXPECT_EQ(Read(t, "all", 0x200), Xml({{0x200, 0x200}}));
}

TEST(BranchTrace, ConfigXml) {
  BranchTrace t;
  EXPECT_EQ(t.ConfigXml(),
            "<?xml version=\"1.0\"?>\n<!DOCTYPE btrace-conf SYSTEM \"btrace-conf.dtd\">\n"
            "<btrace-conf version=\"1.0\">\n</btrace-conf>\n");
  t.Start(0, 0x10000);
  EXPECT_EQ(t.ConfigXml(),
            "<?xml version=\"1.0\"?>\n<!DOCTYPE btrace-conf SYSTEM \"btrace-conf.dtd\">\n"
            "<btrace-conf version=\"1.0\">\n<bts size=\"0x10000\"/>\n</btrace-conf>\n");
}

// The block-level feed (taken transfers and events only, AddEvent with the
// last retired instruction the machine decoded): the same blocks as the
// every-instruction feed.
TEST(BranchTrace, TakenOnlyFeedWithDecodedEventEnd) {
  BranchTrace t;
  t.Start(0x100, BranchTrace::kDefaultSize);
  t.Add(Jmp(0x104, 0x200));  // block [0x100, 0x104]; 0x100 and 0x102 ran unreported
  EXPECT_EQ(t.open_begin(), 0x200u);
  // 0x200 and 0x202 retired, 0x204 faulted: the block ends at 0x202.
  t.AddEvent(Fault(0x204, 0x900), 0x202);
  // An interrupt before the handler's first instruction retired: no block.
  t.AddEvent(B(BranchKind::kInterrupt, 0x900, 0xA00), std::nullopt);
  EXPECT_EQ(Read(t, "all", 0xA00), Xml({{0xA00, 0xA00}, {0x200, 0x202}, {0x100, 0x104}}));
}

}  // namespace
}  // namespace vbts::gdb
