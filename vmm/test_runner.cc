// test_runner.cc: `vbts test`.
#include "vmm/test_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/exit_status.h"

namespace vbts::vmm {
namespace {

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string Join(const std::string& dir, const std::string& rel) {
  return !rel.empty() && rel[0] == '/' ? rel : dir + "/" + rel;
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrFormat("cannot read %s: %s", path, std::strerror(errno)));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// First line where `got` and `want` differ, for a failure message.
std::string FirstDifference(const std::string& got, const std::string& want) {
  std::vector<std::string> g = absl::StrSplit(got, '\n'), w = absl::StrSplit(want, '\n');
  for (size_t i = 0; i < std::max(g.size(), w.size()); i++) {
    std::string a = i < g.size() ? g[i] : "<end of output>", b = i < w.size() ? w[i] : "<end of output>";
    if (a != b) return absl::StrFormat("output line %u is \"%s\", expected \"%s\"", i + 1, a, b);
  }
  return "output differs";
}

struct Child {
  int status = -1;
  std::string out, err;
  bool killed = false;
};

// Runs argv, capturing stdout and stderr; kills it after `limit` seconds.
absl::StatusOr<Child> Spawn(const std::vector<std::string>& argv, double limit) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "vbts test: cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  Child c;
  const double deadline = Now() + limit;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0) {
    int wait_ms = static_cast<int>((deadline - Now()) * 1000);
    if (wait_ms <= 0) {
      kill(pid, SIGKILL);
      c.killed = true;
      break;
    }
    int n = poll(fds, 2, wait_ms);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t r = read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        (i == 0 ? c.out : c.err).append(buf, r);
      } else if (r == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        open_fds--;
      }
    }
  }
  for (pollfd& f : fds)
    if (f.fd >= 0) close(f.fd);
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  c.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  return c;
}

}  // namespace

absl::StatusOr<std::vector<TestCase>> ParseManifest(std::string_view text_in, std::string_view path) {
  std::vector<TestCase> tests;
  int lineno = 0;
  const absl::string_view text(text_in.data(), text_in.size());
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    lineno++;
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    auto err = [&](std::string what) {
      return absl::InvalidArgumentError(absl::StrFormat("%s:%d: %s", std::string(path), lineno, what));
    };
    if (line.front() == '[') {
      if (line.back() != ']' || line.size() < 3) return err("expected [name]");
      TestCase t;
      t.name = std::string(line.substr(1, line.size() - 2));
      t.file = t.name + ".elf";
      tests.push_back(std::move(t));
      continue;
    }
    size_t eq = line.find('=');
    if (eq == absl::string_view::npos)
      return err(absl::StrFormat("expected key = value, got \"%s\"", std::string(line)));
    if (tests.empty()) return err("key before the first [name]");
    std::string key(absl::StripAsciiWhitespace(line.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    TestCase& t = tests.back();
    if (key == "file") {
      t.file = value;
    } else if (key == "expect_status") {
      if (!absl::SimpleAtoi(value, &t.expect_status) || t.expect_status < 0 || t.expect_status > 255)
        return err(absl::StrFormat("expect_status must be 0..255, got \"%s\"", value));
    } else if (key == "expected") {
      t.expected = value;
    } else if (key == "expect_output") {
      t.expect_output.push_back(value);
    } else if (key == "timeout") {
      if (!absl::SimpleAtod(value, &t.timeout) || t.timeout <= 0)
        return err(absl::StrFormat("timeout must be a positive number of seconds, got \"%s\"", value));
    } else if (key == "vbts_args") {
      t.vbts_args = absl::StrSplit(value, ' ', absl::SkipWhitespace());
    } else if (key == "vbts") {
      if (value != "pending" && value != "yes") return err(absl::StrFormat("vbts must be yes or pending, got \"%s\"", value));
      t.pending = value == "pending";
    }
    // Other keys (source, qemu*, ...) belong to the build and the QEMU runs.
  }
  return tests;
}

TestOutcome Judge(const TestCase& t, int status, const std::string& out, const std::string& expected_text,
                  const std::string& err) {
  TestOutcome o;
  o.status = status;
  o.result = TestOutcome::kFail;
  if (status != t.expect_status) {
    std::string first_err = err.substr(0, err.find('\n'));
    o.why = absl::StrFormat("status %d, expected %d%s%s", status, t.expect_status, first_err.empty() ? "" : ": ",
                            first_err);
    return o;
  }
  if (!t.expected.empty() && out != expected_text) {
    o.why = FirstDifference(out, expected_text);
    return o;
  }
  for (const std::string& want : t.expect_output) {
    bool found = false;
    for (absl::string_view line : absl::StrSplit(out, '\n'))
      if (line.find(want) != absl::string_view::npos) found = true;
    if (!found) {
      o.why = absl::StrFormat("no output line contains \"%s\"", want);
      return o;
    }
  }
  o.result = TestOutcome::kPass;
  return o;
}

int RunTests(const TestRunOptions& opt) {
  absl::StatusOr<std::string> text = ReadText(opt.manifest);
  if (!text.ok()) {
    std::fprintf(stderr, "vbts test: %s\n", std::string(text.status().message()).c_str());
    return kExitVbtsError;
  }
  absl::StatusOr<std::vector<TestCase>> tests = ParseManifest(*text, opt.manifest);
  if (!tests.ok()) {
    std::fprintf(stderr, "vbts test: %s\n", std::string(tests.status().message()).c_str());
    return kExitVbtsError;
  }
  std::vector<const TestCase*> run;
  for (const TestCase& t : *tests)
    if (opt.filter.empty() || t.name.find(opt.filter) != std::string::npos) run.push_back(&t);
  const bool tty = isatty(2);
  size_t width = 4;
  for (const TestCase* t : run) width = std::max(width, t->name.size());
  std::printf("%-*s  %-7s  %6s  %8s\n", static_cast<int>(width), "TEST", "RESULT", "STATUS", "TIME");
  std::fflush(stdout);
  int passed = 0, failed = 0, pending = 0;
  const double start = Now();
  for (size_t i = 0; i < run.size(); i++) {
    const TestCase& t = *run[i];
    if (tty) std::fprintf(stderr, "\r\033[K[%zu/%zu] %s ...", i + 1, run.size(), t.name.c_str());
    TestOutcome o;
    if (t.pending) {
      o.result = TestOutcome::kPending;
      o.why = "not run: marked pending in the manifest";
    } else {
      std::vector<std::string> argv = {opt.vbts, "run"};
      // The test's time limit, unless the test sets vbts's --timeout itself
      // (an image that is expected to time out).
      bool own_timeout = false;
      for (const std::string& a : t.vbts_args) own_timeout |= a.rfind("--timeout", 0) == 0;
      if (!own_timeout) argv.push_back(absl::StrFormat("--timeout=%g", t.timeout));
      argv.insert(argv.end(), t.vbts_args.begin(), t.vbts_args.end());
      argv.push_back(Join(opt.image_dir, t.file));
      std::string expected_text;
      if (!t.expected.empty()) {
        absl::StatusOr<std::string> e = ReadText(Join(DirName(opt.manifest), t.expected));
        if (!e.ok()) {
          o.why = std::string(e.status().message());
        } else {
          expected_text = *e;
        }
      }
      if (o.why.empty()) {
        const double t0 = Now();
        // vbts enforces --timeout itself; the kill is a safety net.
        absl::StatusOr<Child> c = Spawn(argv, t.timeout + 15);
        const double dt = Now() - t0;
        if (!c.ok()) {
          o.why = std::string(c.status().message());
        } else if (c->killed) {
          o.why = absl::StrFormat("killed after %.0f s (vbts did not stop at --timeout)", dt);
        } else {
          o = Judge(t, c->status, c->out, expected_text, c->err);
        }
        o.seconds = dt;
      }
    }
    if (tty) std::fprintf(stderr, "\r\033[K");
    const char* res = o.result == TestOutcome::kPass ? "PASS" : o.result == TestOutcome::kPending ? "PENDING" : "FAIL";
    (o.result == TestOutcome::kPass ? passed : o.result == TestOutcome::kPending ? pending : failed)++;
    std::string status = o.status >= 0 ? absl::StrCat(o.status) : "-";
    std::printf("%-*s  %-7s  %6s  %6.2f s%s%s\n", static_cast<int>(width), t.name.c_str(), res, status.c_str(),
                o.seconds, o.result == TestOutcome::kFail ? "  " : "", o.result == TestOutcome::kFail ? o.why.c_str() : "");
    std::fflush(stdout);
  }
  std::printf("%zu tests: %d passed, %d failed, %d pending (%.1f s)\n", run.size(), passed, failed, pending,
              Now() - start);
  return failed ? 1 : 0;
}

}  // namespace vbts::vmm
