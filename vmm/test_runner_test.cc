#include "vmm/test_runner.h"

#include <gtest/gtest.h>

#include "base/testing/status_matchers.h"

namespace vbts::vmm {
namespace {

using ::vbts::testing::StatusIs;

TEST(ParseManifestTest, ReadsTheKeysVbtsTestUses) {
  const char* kText =
      "# comment\n"
      "; another comment\n"
      "[hello]\n"
      "file = hello.elf\n"
      "expect_status = 1\n"
      "expected = tiny/hello.expected\n"
      "qemu_expect_status = 3\n"  // QEMU-side keys are ignored
      "\n"
      "[spin]\n"
      "expect_status = 124\n"
      "vbts_args = --timeout=1  --cpu=westmere\n"
      "timeout = 2.5\n"
      "expect_output = a\n"
      "expect_output = b c\n"
      "vbts = pending\n";
  absl::StatusOr<std::vector<TestCase>> t = ParseManifest(kText, "m.cfg");
  VBTS_ASSERT_OK(t);
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].name, "hello");
  EXPECT_EQ((*t)[0].file, "hello.elf");
  EXPECT_EQ((*t)[0].expect_status, 1);
  EXPECT_EQ((*t)[0].expected, "tiny/hello.expected");
  EXPECT_FALSE((*t)[0].pending);
  EXPECT_EQ((*t)[0].timeout, 10);  // default
  EXPECT_EQ((*t)[1].file, "spin.elf");  // default: <name>.elf
  EXPECT_EQ((*t)[1].expect_status, 124);
  EXPECT_EQ((*t)[1].vbts_args, (std::vector<std::string>{"--timeout=1", "--cpu=westmere"}));
  EXPECT_EQ((*t)[1].timeout, 2.5);
  EXPECT_EQ((*t)[1].expect_output, (std::vector<std::string>{"a", "b c"}));
  EXPECT_TRUE((*t)[1].pending);
}

TEST(ParseManifestTest, ErrorsNameFileAndLine) {
  EXPECT_THAT(ParseManifest("file = x\n", "m.cfg"),
              StatusIs(absl::StatusCode::kInvalidArgument, "m.cfg:1: key before the first [name]"));
  EXPECT_THAT(ParseManifest("[a]\nexpect_status = 300\n", "m.cfg"),
              StatusIs(absl::StatusCode::kInvalidArgument, "m.cfg:2: expect_status must be 0..255, got \"300\""));
  EXPECT_THAT(ParseManifest("[a]\ntimeout = -1\n", "m.cfg"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "m.cfg:2: timeout must be a positive number of seconds, got \"-1\""));
  EXPECT_THAT(ParseManifest("[a]\njunk\n", "m.cfg"),
              StatusIs(absl::StatusCode::kInvalidArgument, "m.cfg:2: expected key = value, got \"junk\""));
  EXPECT_THAT(ParseManifest("[a\n", "m.cfg"), StatusIs(absl::StatusCode::kInvalidArgument, "m.cfg:1: expected [name]"));
  EXPECT_THAT(ParseManifest("[a]\nvbts = maybe\n", "m.cfg"),
              StatusIs(absl::StatusCode::kInvalidArgument, "m.cfg:2: vbts must be yes or pending, got \"maybe\""));
}

TEST(JudgeTest, StatusThenExactOutputThenSubstrings) {
  TestCase t;
  t.expect_status = 1;
  EXPECT_EQ(Judge(t, 1, "x\n", "", "").result, TestOutcome::kPass);
  TestOutcome o = Judge(t, 3, "", "", "vbts: guest halted\nmore");
  EXPECT_EQ(o.result, TestOutcome::kFail);
  EXPECT_EQ(o.why, "status 3, expected 1: vbts: guest halted");

  t.expected = "e";
  o = Judge(t, 1, "a\nb\n", "a\nc\n", "");
  EXPECT_EQ(o.result, TestOutcome::kFail);
  EXPECT_EQ(o.why, "output line 2 is \"b\", expected \"c\"");
  o = Judge(t, 1, "a\n", "a\nc\n", "");
  EXPECT_EQ(o.why, "output line 2 is \"\", expected \"c\"");
  EXPECT_EQ(Judge(t, 1, "a\nc\n", "a\nc\n", "").result, TestOutcome::kPass);

  TestCase s;
  s.expect_output = {"SUMMARY: 3 tests"};
  EXPECT_EQ(Judge(s, 1, "PASS: x\nSUMMARY: 3 tests, 0 failures\n", "", "").result, TestOutcome::kPass);
  o = Judge(s, 1, "SUMMARY: 2 tests\n", "", "");
  EXPECT_EQ(o.why, "no output line contains \"SUMMARY: 3 tests\"");
}

}  // namespace
}  // namespace vbts::vmm
