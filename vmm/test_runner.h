// test_runner.h: `vbts test [DIR]`: runs a directory of guest images as
// described by a manifest (guest-tests/tests.cfg format) and prints a
// pass/fail table with timings.  docs/cli.md documents the command.
#ifndef VBTS_VMM_TEST_RUNNER_H_
#define VBTS_VMM_TEST_RUNNER_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vbts::vmm {

// One [section] of the manifest, with the keys `vbts test` uses.
struct TestCase {
  std::string name;
  std::string file;                      // image, relative to the image directory
  int expect_status = 1;
  std::string expected;                  // exact stdout file, relative to the manifest's directory
  std::vector<std::string> expect_output;  // substrings some stdout line must contain
  double timeout = 10;
  std::vector<std::string> vbts_args;    // extra `vbts run` options
  bool pending = false;                  // `vbts = pending`: listed, not run
};

// Parses the INI-like manifest (`[name]`, `key = value`, `#` or `;` comments).
// Errors name the file, line and problem.
absl::StatusOr<std::vector<TestCase>> ParseManifest(std::string_view text, std::string_view path);

struct TestRunOptions {
  std::string image_dir;  // where the images are
  std::string manifest;   // manifest path
  std::string filter;     // run only tests whose name contains this
  std::string vbts;       // the vbts binary to run (default: this one)
};

// What one run produced, and the verdict.
struct TestOutcome {
  enum Result { kPass, kFail, kPending } result = kFail;
  int status = -1;
  double seconds = 0;
  std::string why;  // for kFail: the first difference
};

// Compares a finished run with the test's expectations (pure).
TestOutcome Judge(const TestCase& t, int status, const std::string& out, const std::string& expected_text,
                  const std::string& err);

// Runs the tests; prints the table on stdout and a progress line on stderr
// when it is a terminal.  Returns the process exit status: 0 all run tests
// passed, 1 some failed, 116 the manifest or an image could not be read.
int RunTests(const TestRunOptions& opt);

}  // namespace vbts::vmm

#endif  // VBTS_VMM_TEST_RUNNER_H_
