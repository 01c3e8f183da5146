#include "vmm/sandbox.h"

#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/exit_status.h"

namespace vbts::vmm {
namespace {

// What the run loop, the devices, the TCG engine, the recorder and the
// gdbstub call once the machine is set up (each group says who needs it).
const std::vector<std::string>& Allowed() {
  static const std::vector<std::string> calls = {
      // KVM: KVM_RUN, register and event transfers, MSI injection.
      "ioctl",
      // Guest output (COM1), trace files, --branches/--insns, stderr.
      "read", "write", "readv", "writev", "pread64", "pwrite64", "lseek", "close", "fstat", "newfstatat",
      "fsync", "fdatasync",
      // Memory: malloc, the TCG engine's translation buffers.
      "mmap", "munmap", "mprotect", "mremap", "brk", "madvise",
      // Threads: the TCG engine's watcher (made lazily when a kvm-tcg run
      // starts tracing), condition variables, thread exit.  clone only with
      // CLONE_THREAD (below); clone3 answers ENOSYS, so glibc uses clone.
      "futex", "set_robust_list", "rseq", "clone", "exit", "exit_group", "sched_yield", "getrandom",
      // Time: deadlines, the LAPIC timer, HLT waits.
      "clock_gettime", "clock_nanosleep", "nanosleep", "gettimeofday",
      // The kick timer (SIGALRM ends KVM_RUN), abort() on an internal error.
      "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "setitimer", "getpid", "gettid", "tgkill",
      // The gdbstub: its listening socket and one client.
      "poll", "ppoll", "accept4", "recvfrom", "sendto", "setsockopt",
  };
  return calls;
}

// Names of system calls by number, resolved before the filter is on (the
// SIGSYS handler must not allocate).
constexpr int kMaxNr = 512;
std::array<const char*, kMaxNr> g_names{};

void OnSigsys(int, siginfo_t* info, void*) {
  const int nr = info->si_syscall;
  char buf[256];
  const char* name = nr >= 0 && nr < kMaxNr && g_names[nr] ? g_names[nr] : "?";
  // Async-signal-safe formatting: no stdio.
  int n = 0;
  auto put = [&](const char* s) {
    while (*s && n < static_cast<int>(sizeof(buf)) - 1) buf[n++] = *s++;
  };
  char num[16];
  int k = 0;
  unsigned v = static_cast<unsigned>(nr);
  do {
    num[k++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v && k < 15);
  char digits[16];
  for (int i = 0; i < k; i++) digits[i] = num[k - 1 - i];
  digits[k] = 0;
  put("vbts: system call ");
  put(name);
  put(" (");
  put(digits);
  put(") is not allowed after setup: vbts's seccomp filter ended the run (docs/security.md)\n");
  (void)!::write(2, buf, static_cast<size_t>(n));
  ::_exit(kExitVbtsError);
}

}  // namespace

const std::vector<std::string>& SandboxAllowedCalls() { return Allowed(); }

std::string SandboxLibraryVersion() {
  const scmp_version* v = seccomp_version();
  return v ? absl::StrFormat("%u.%u.%u", v->major, v->minor, v->micro) : "unknown";
}

absl::Status EnterSandbox() {
  for (int nr = 0; nr < kMaxNr; nr++)
    if (!g_names[nr]) g_names[nr] = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);  // kept for the handler
  struct sigaction sa = {};
  sa.sa_sigaction = OnSigsys;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSYS, &sa, nullptr) != 0) return absl::ErrnoToStatus(errno, "sigaction(SIGSYS)");

  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_TRAP);
  if (!ctx) return absl::InternalError("seccomp_init failed");
  auto fail = [&](const std::string& what, int rc) {
    seccomp_release(ctx);
    return absl::InternalError(absl::StrCat("seccomp: ", what, ": ", std::strerror(-rc)));
  };
  for (const std::string& name : Allowed()) {
    const int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR) continue;  // not a call on this architecture (e.g. a 32-bit-only one)
    int rc;
    if (name == "clone") {
      // Threads only: a new process could exec what the filter forbids.
      rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
    } else {
      rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
    }
    if (rc != 0) return fail("allowing " + name, rc);
  }
  // clone3's flags are in memory, out of the filter's reach: ENOSYS makes
  // glibc fall back to clone, whose flags it can check.
  if (int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0); rc != 0)
    return fail("clone3", rc);
  if (int rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1); rc != 0) return fail("thread sync", rc);
  if (int rc = seccomp_load(ctx); rc != 0) return fail("loading the filter", rc);
  seccomp_release(ctx);
  return absl::OkStatus();
}

}  // namespace vbts::vmm
