// init.c: PID 1 of the initramfs that `linux.*` tests boot Debian's kernel with
// (guest-tests/linux/README.md). It asks Linux's own perf for what vbts
// emulates, through the system calls `perf stat -e instructions:u`,
// `perf record -e intel_bts//u`, `perf record -b` and `perf record -e
// instructions:upp` use, checks exact results, prints PASS/FAIL/SKIP
// lines like the other guest-tests images and ends the run through the
// debug-exit port 0xF4: 0 (status 1) all passed, 1 (status 3) a failure,
// 77 (status 155) perf has no PMU (QEMU TCG).
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures, passes;

static void report(int ok, const char* name, const char* detail) {
  printf("%s: %s%s%s\n", ok ? "PASS" : "FAIL", name, detail[0] ? ": " : "", detail);
  if (ok) passes++;
  else failures++;
}

// Ends the run with `verdict` on the debug-exit port.
static void exit_vm(int verdict) {
  fflush(stdout);
  if (ioperm(0xf4, 4, 1) == 0) outl(verdict, 0xf4);
  reboot(RB_POWER_OFF);  // without the port (not vbts, not QEMU's isa-debug-exit)
  for (;;) pause();
}

static void finish(int verdict) {
  printf("SUMMARY: %d passed, %d failed\n", passes, failures);
  exit_vm(verdict);
}

// Opens `a` for this process, disabled, user mode only (the `:u` of perf's
// event names); on failure reports it as check `name` and returns -1.
static int open_user_event(struct perf_event_attr* a, const char* name) {
  a->size = sizeof *a;
  a->disabled = 1;
  a->exclude_kernel = 1;
  a->exclude_hv = 1;
  const int fd = (int)syscall(SYS_perf_event_open, a, 0, -1, -1, 0);
  if (fd < 0) {
    char detail[160];
    snprintf(detail, sizeof detail, "perf_event_open: %s", strerror(errno));
    report(0, name, detail);
  }
  return fd;
}

// mmap of perf's ring buffer or AUX area; on failure reports it as check
// `name` and returns NULL.
static void* map_or_report(int fd, size_t length, off_t offset, const char* name) {
  void* p = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, offset);
  if (p != MAP_FAILED) return p;
  char detail[160];
  snprintf(detail, sizeof detail, "mmap: %s", strerror(errno));
  report(0, name, detail);
  return NULL;
}

// The counted loop: ENABLE, N iterations of dec/jnz, DISABLE, as raw system
// calls so that no library code runs between them. Returns the count.
static uint64_t count_loop(int fd, uint64_t n) {
  register long rax __asm__("rax");
  __asm__ volatile(
      "mov %[nr], %%eax\n\t"
      "mov %[fd], %%edi\n\t"
      "mov %[on], %%esi\n\t"
      "xor %%edx, %%edx\n\t"
      "syscall\n\t"
      "mov %[n], %%rcx\n"
      "1:\n\t"
      "dec %%rcx\n\t"
      "jnz 1b\n\t"
      "mov %[nr], %%eax\n\t"
      "mov %[fd], %%edi\n\t"
      "mov %[off], %%esi\n\t"
      "xor %%edx, %%edx\n\t"
      "syscall\n\t"
      : "=&a"(rax)
      : [nr] "i"(SYS_ioctl), [fd] "r"(fd), [on] "i"(PERF_EVENT_IOC_ENABLE), [off] "i"(PERF_EVENT_IOC_DISABLE),
        [n] "r"(n)
      : "rcx", "rdx", "rsi", "rdi", "r11", "memory");
  uint64_t value = 0;
  if (read(fd, &value, sizeof value) != sizeof value) return ~0ull;
  return value;
}

// instructions:u over the loop at two lengths: whatever the enabling and
// disabling system calls add at the edges is the same both times, so the
// difference is exactly the 1000 more iterations of two instructions each.
static void test_instructions(void) {
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.type = PERF_TYPE_HARDWARE;
  a.config = PERF_COUNT_HW_INSTRUCTIONS;
  const int fd = open_user_event(&a, "instructions:u");
  if (fd < 0) return;
  char detail[160];
  const uint64_t c1000 = count_loop(fd, 1000);
  ioctl(fd, PERF_EVENT_IOC_RESET, 0);
  const uint64_t c2000 = count_loop(fd, 2000);
  snprintf(detail, sizeof detail, "%llu over 1000 iterations, %llu over 2000 (difference %lld, expected 2000)",
           (unsigned long long)c1000, (unsigned long long)c2000, (long long)(c2000 - c1000));
  report(c2000 - c1000 == 2000, "instructions:u", detail);
  close(fd);
}

// A workload whose addresses the checks know: NAME(n) runs n iterations of
// dec/jnz; NAME_head, NAME_jnz and NAME_ret label its instructions.
#define DEFINE_LOOP(name)                                       \
  extern void name(uint64_t n);                                 \
  extern char name##_head[], name##_jnz[], name##_ret[];        \
  __asm__(".text\n"                                             \
          ".globl " #name ", " #name "_head, " #name "_jnz, " #name "_ret\n" \
          #name ":\n\tmov %rdi, %rcx\n"                         \
          #name "_head:\n\tdec %rcx\n"                          \
          #name "_jnz:\n\tjnz " #name "_head\n"                 \
          #name "_ret:\n\tret\n")

// The BTS workload: a call, n iterations of dec/jnz, a return.
DEFINE_LOOP(bts_loop);

static int read_int_file(const char* path, int* value) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  int ok = fscanf(f, "%d", value) == 1;
  fclose(f);
  return ok ? 0 : -1;
}

// `perf record -e intel_bts//u` in small: Linux's intel_bts PMU writes the
// BTS records of this process into a perf AUX buffer (64-bit records: from,
// to, flags). The loop's jnz is taken n - 1 times: exactly n - 1 records
// from bts_loop_jnz to bts_loop_head, one call into bts_loop and one return
// from bts_loop_ret, wherever the rest of the buffer comes from.
static void test_intel_bts(void) {
  int type;
  if (read_int_file("/sys/bus/event_source/devices/intel_bts/type", &type) != 0) {
    report(0, "intel_bts", "no intel_bts PMU in /sys/bus/event_source/devices (pti=off? DTES64?)");
    return;
  }
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.type = (uint32_t)type;
  const int fd = open_user_event(&a, "intel_bts");
  if (fd < 0) return;
  char detail[200];
  const long page = sysconf(_SC_PAGESIZE);
  const size_t data_pages = 1, aux_pages = 64;  // 256 KiB: ~10 900 records
  struct perf_event_mmap_page* pc = map_or_report(fd, (1 + data_pages) * page, 0, "intel_bts");
  if (pc == NULL) return;
  pc->aux_offset = (1 + data_pages) * page;
  pc->aux_size = aux_pages * page;
  const uint64_t* aux = map_or_report(fd, pc->aux_size, pc->aux_offset, "intel_bts");
  if (aux == NULL) return;
  const uint64_t n = 1000;
  ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
  bts_loop(n);
  ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
  const uint64_t head = __atomic_load_n(&pc->aux_head, __ATOMIC_ACQUIRE);
  uint64_t records = head / 24, back = 0, calls = 0, rets = 0, kernel_from = 0;
  for (uint64_t i = 0; i < records && i < pc->aux_size / 24; i++) {
    const uint64_t from = aux[3 * i], to = aux[3 * i + 1];
    if (from == (uint64_t)bts_loop_jnz && to == (uint64_t)bts_loop_head) back++;
    if (to == (uint64_t)bts_loop) calls++;
    if (from == (uint64_t)bts_loop_ret) rets++;
    if (from >> 47) kernel_from++;
  }
  snprintf(detail, sizeof detail,
           "%llu records; jnz->head %llu (expected %llu), calls in %llu, returns %llu (expected 1 each); "
           "%llu from kernel addresses",
           (unsigned long long)records, (unsigned long long)back, (unsigned long long)(n - 1),
           (unsigned long long)calls, (unsigned long long)rets, (unsigned long long)kernel_from);
  report(back == n - 1 && calls == 1 && rets == 1, "intel_bts", detail);
  // The event lives while mapped; BTS and LBR users exclude each other.
  munmap((void*)aux, aux_pages * page);
  munmap(pc, (1 + data_pages) * page);
  close(fd);
}

// The sampling workload (its own copy, so that its addresses are its own).
DEFINE_LOOP(lbr_loop);

// Samples `a` (instructions:u every 10 007) over lbr_loop(100000) through
// perf's ring buffer and hands each PERF_RECORD_SAMPLE's fields to `sample`.
// The loop runs 200 000 instructions and fewer than 140 counted ones come
// before it, so exactly 19 samples fall inside it (19 x 10 007 = 190 133 <=
// 200 000 + pre < 200 140 = 20 x 10 007), each after thousands of
// iterations. False (with a FAIL line) if perf refuses the event.
static int sample_loop(struct perf_event_attr* a, const char* name, void (*sample)(const uint64_t* fields)) {
  a->type = PERF_TYPE_HARDWARE;
  a->config = PERF_COUNT_HW_INSTRUCTIONS;
  a->sample_period = 10007;
  const int fd = open_user_event(a, name);
  if (fd < 0) return 0;
  const long page = sysconf(_SC_PAGESIZE);
  const size_t data_pages = 16;
  struct perf_event_mmap_page* pc = map_or_report(fd, (1 + data_pages) * page, 0, name);
  if (pc == NULL) {
    close(fd);
    return 0;
  }
  ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
  lbr_loop(100000);
  ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
  const uint64_t head = __atomic_load_n(&pc->data_head, __ATOMIC_ACQUIRE);
  const uint8_t* data = (const uint8_t*)pc + pc->data_offset;
  for (uint64_t off = 0; off + sizeof(struct perf_event_header) <= head && head <= pc->data_size;) {
    const struct perf_event_header* h = (const void*)(data + off);
    if (h->size == 0) break;
    if (h->type == PERF_RECORD_SAMPLE) sample((const uint64_t*)(h + 1));
    off += h->size;
  }
  munmap(pc, (1 + data_pages) * page);
  close(fd);
  return 1;
}

static int in_lbr_loop(uint64_t ip) { return ip == (uint64_t)lbr_loop_head || ip == (uint64_t)lbr_loop_jnz; }

// `perf record -b`: each sample carries the whole LBR stack (16 entries on
// Westmere, 32 on Skylake and Ice Lake; user branches only, through
// MSR_LBR_SELECT; frozen on the PMI), so each of the 19 in the loop holds
// nothing but the loop's jnz to its head.
static uint64_t lbr_samples, lbr_in_loop, lbr_good, lbr_depth;
static void lbr_sample(const uint64_t* f) {
  const uint64_t ip = f[0], nr = f[1];
  const uint64_t* e = f + 2;  // perf_branch_entry: from, to, flags
  lbr_samples++;
  if (!in_lbr_loop(ip)) return;
  uint64_t match = 0;
  for (uint64_t i = 0; i < nr; i++)
    if (e[3 * i] == (uint64_t)lbr_loop_jnz && e[3 * i + 1] == (uint64_t)lbr_loop_head) match++;
  if (++lbr_in_loop == 1) lbr_depth = nr;
  if (nr == lbr_depth && match == nr) lbr_good++;
}
static void test_lbr(void) {
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_BRANCH_STACK;
  a.branch_sample_type = PERF_SAMPLE_BRANCH_ANY | PERF_SAMPLE_BRANCH_USER;
  if (!sample_loop(&a, "lbr", lbr_sample)) return;
  char detail[200];
  snprintf(detail, sizeof detail,
           "%llu samples, %llu in the loop (expected 19), %llu of them with all %llu entries jnz->head",
           (unsigned long long)lbr_samples, (unsigned long long)lbr_in_loop, (unsigned long long)lbr_good,
           (unsigned long long)lbr_depth);
  report(lbr_in_loop == 19 && lbr_good == 19 && lbr_depth >= 16, "lbr", detail);
}

// `perf record -e instructions:upp`: the samples come from PEBS records
// (Westmere's format 1, with the IP fixed up through the LBRs; Skylake's
// format 3 and Ice Lake's adaptive format 4 carry the eventing IP), written
// into the debug store and drained at its threshold PMI or at the disable.
// An overflow arms PEBS and the counter's next event causes the assist
// (SDM 18.6.1.1), after which the counter restarts from the reset value
// -10 007: assists come every 10 008 counted instructions, an even number,
// so all 19 in the loop are at the same one of its two instructions (which
// one depends on the parity of the instructions before the loop). The
// kernel's first record format for Skylake, 0xC8 bytes with the TSC at C0H,
// is the one this check found vbts writing 8 bytes short.
static uint64_t pebs_samples, pebs_head, pebs_jnz, pebs_other;
static void pebs_sample(const uint64_t* f) {
  pebs_samples++;
  if (f[0] == (uint64_t)lbr_loop_head) pebs_head++;
  else if (f[0] == (uint64_t)lbr_loop_jnz) pebs_jnz++;
  else if (!pebs_other) pebs_other = f[0];
}
static void test_pebs(void) {
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.sample_type = PERF_SAMPLE_IP;
  a.precise_ip = 2;
  if (!sample_loop(&a, "pebs", pebs_sample)) return;
  char detail[200];
  snprintf(detail, sizeof detail,
           "%llu samples, %llu at the loop's dec and %llu at its jnz (expected 19 at one of them); first elsewhere: %#llx (loop at %p)",
           (unsigned long long)pebs_samples, (unsigned long long)pebs_head, (unsigned long long)pebs_jnz,
           (unsigned long long)pebs_other, (void*)lbr_loop);
  report((pebs_head == 19 && pebs_jnz == 0) || (pebs_head == 0 && pebs_jnz == 19), "pebs", detail);
}

// The workload of perf-tool.sh (`/init loop N`, not as PID 1): a call to
// tool_loop, N iterations of dec/jnz, its return, then exit (through libc:
// its atexit handlers and stdio cleanup run after the loop).
DEFINE_LOOP(tool_loop);

// The call-graph workload (`/init chain N`): main calls chain_outer, which
// calls chain_inner, which calls tool_loop; each returns.
extern void chain_outer(uint64_t n);
__asm__(".text\n"
        ".globl chain_outer, chain_inner\n"
        "chain_outer:\n\tsub $8, %rsp\n\tcall chain_inner\n\tadd $8, %rsp\n\tret\n"
        "chain_inner:\n\tsub $8, %rsp\n\tcall tool_loop\n\tadd $8, %rsp\n\tret\n");

// The retired-load and -store workload (`/init mem N`): N iterations of one
// store (to the red zone), one load from it, dec, jnz: N instructions that
// store and N that load (docs/pmu-model.md, "Retired loads and stores").
extern void mem_loop(uint64_t n);
__asm__(".text\n"
        ".globl mem_loop\n"
        "mem_loop:\n\tmov %rdi, %rcx\n"
        "1:\n\tmov %rcx, -8(%rsp)\n\tadd -8(%rsp), %rax\n\tdec %rcx\n\tjnz 1b\n\tret\n");

// The branch-event workload (`/init calls N`, docs/pmu-model.md "Branch
// events"): N iterations of a direct near CALL of a bare RET, a JZ that is
// never taken (RCX is not 0 there), DEC and a JNZ taken back to the top
// except the last time. Each more iteration adds exactly one near call, one
// near return, two conditional branches (one not taken, one taken) and
// three taken near branches (CALL, RET, JNZ).
extern void calls_loop(uint64_t n);
__asm__(".text\n"
        ".globl calls_loop\n"
        "calls_loop:\n\tmov %rdi, %rcx\n"
        "1:\n\tcall 3f\n\ttest %rcx, %rcx\n\tjz 2f\n\tdec %rcx\n\tjnz 1b\n"
        "2:\n\tret\n"
        "3:\n\tret\n");

// The load-latency and offcore workload (`/init sweep`): one store to each
// line of a 2 MB buffer (its pages come in on first touch), then a load from
// every other line of it, 16384 loads 128 bytes apart (sweep_load_insn). The
// buffer is larger than the L2 of every model (256 KB, 1.25 MB on
// icelake-server) and smaller than every L3, so each of those loads misses
// the L2 and finds its line in the L3 (docs/pmu-model.md, "Load latency and
// data source", "Offcore responses").
#define SWEEP_BYTES (2u << 20)
static uint8_t sweep_buf[SWEEP_BYTES] __attribute__((aligned(4096)));
extern void sweep_store(void* p, uint64_t lines);
extern uint64_t sweep_load(const void* p, uint64_t loads);
extern char sweep_load_insn[];
__asm__(".text\n"
        ".globl sweep_store, sweep_load, sweep_load_insn\n"
        "sweep_store:\n\tmov %rsi, %rcx\n"
        "1:\n\tmov %rcx, (%rdi)\n\tadd $64, %rdi\n\tdec %rcx\n\tjnz 1b\n\tret\n"
        "sweep_load:\n\tmov %rsi, %rcx\n\txor %eax, %eax\n"
        "sweep_load_insn:\n\tadd (%rdi), %rax\n\tadd $128, %rdi\n\tdec %rcx\n\tjnz sweep_load_insn\n\tret\n");

// `/init edu-dma IOVA`: the edu PCI device (vbts --device=edu; vmm/pci_edu.h)
// moves 4 bytes from its buffer to IOVA, then 4 bytes from IOVA into its
// buffer, as a user-space driver would: bus mastering on through the
// configuration file, the registers through its BAR (resource0). With the
// device in a DMA domain of Linux's VT-d driver and nothing mapped at IOVA,
// both transfers fault: the kernel logs a write fault and then a read fault.
static int edu_dma(uint64_t iova) {
  const char* dev = "/sys/bus/pci/devices/0000:00:03.0";
  char path[128];
  snprintf(path, sizeof path, "%s/config", dev);
  int cfg = open(path, O_RDWR);
  uint16_t command = 0;
  if (cfg < 0 || pread(cfg, &command, 2, 4) != 2) {
    printf("edu-dma: %s: %s\n", path, strerror(errno));
    return 1;
  }
  command |= 0x6;  // memory space, bus master
  if (pwrite(cfg, &command, 2, 4) != 2) return printf("edu-dma: cannot enable bus mastering\n"), 1;
  close(cfg);
  snprintf(path, sizeof path, "%s/resource0", dev);
  int bar = open(path, O_RDWR | O_SYNC);
  volatile uint32_t* r = bar < 0 ? MAP_FAILED : mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, bar, 0);
  if (r == MAP_FAILED) return printf("edu-dma: %s: %s\n", path, strerror(errno)), 1;
  printf("edu-dma: id %#x\n", r[0]);
  for (int to_ram = 1; to_ram >= 0; to_ram--) {
    const uint64_t src = to_ram ? 0x40000 : iova, dst = to_ram ? iova : 0x40000;
    r[0x80 / 4] = (uint32_t)src, r[0x84 / 4] = (uint32_t)(src >> 32);
    r[0x88 / 4] = (uint32_t)dst, r[0x8C / 4] = (uint32_t)(dst >> 32);
    r[0x90 / 4] = 4, r[0x94 / 4] = 0;
    r[0x98 / 4] = to_ram ? 3 : 1;  // start; bit 1: buffer to RAM
    while (r[0x98 / 4] & 1) {
    }
    printf("edu-dma: %s IOVA %#llx done\n", to_ram ? "to" : "from", (unsigned long long)iova);
    usleep(100000);  // the fault interrupt's handler logs before the next transfer
  }
  return 0;
}

// `-- run CMD ARGS` on the kernel command line: CMD's exit status is the
// verdict (0 all passed, 77 skipped, anything else, or a signal, failed).
static void run_command(char** argv) {
  fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    execv(argv[0], argv);
    printf("FAIL: exec %s: %s\n", argv[0], strerror(errno));
    _exit(1);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) {
    printf("FAIL: %s: fork or wait: %s\n", argv[0], strerror(errno));
    exit_vm(1);
  }
  if (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 77)) exit_vm(WEXITSTATUS(status));
  printf("FAIL: %s ended with status %#x\n", argv[0], status);
  exit_vm(1);
}

int main(int argc, char** argv) {
  if (argc > 2 && strcmp(argv[1], "loop") == 0 && getpid() != 1) {
    tool_loop(strtoull(argv[2], NULL, 0));
    return 0;
  }
  if (argc > 2 && strcmp(argv[1], "mem") == 0 && getpid() != 1) {
    mem_loop(strtoull(argv[2], NULL, 0));
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "sweep") == 0 && getpid() != 1) {
    sweep_store(sweep_buf, SWEEP_BYTES / 64);
    return sweep_load(sweep_buf, SWEEP_BYTES / 128) != 0 ? 0 : 1;  // the values stored: never all 0
  }
  if (argc > 2 && strcmp(argv[1], "calls") == 0 && getpid() != 1) {
    calls_loop(strtoull(argv[2], NULL, 0));
    return 0;
  }
  if (argc > 2 && strcmp(argv[1], "chain") == 0 && getpid() != 1) {
    chain_outer(strtoull(argv[2], NULL, 0));
    return 0;
  }
  if (argc > 2 && strcmp(argv[1], "edu-dma") == 0 && getpid() != 1) return edu_dma(strtoull(argv[2], NULL, 0));
  // `/init where`: the addresses perf-tool.sh looks for in `perf script -F ip`.
  if (argc > 1 && strcmp(argv[1], "where") == 0 && getpid() != 1) {
    printf("%lx %lx %lx %lx\n", (unsigned long)tool_loop_head, (unsigned long)tool_loop_jnz, (unsigned long)tool_loop_ret,
           (unsigned long)sweep_load_insn);
    return 0;
  }
  // `-- poweroff` on the kernel command line (scripts/bench-linux.py): boot,
  // then power off through ACPI at once.
  if (argc > 1 && strcmp(argv[1], "poweroff") == 0) {
    sync();
    reboot(RB_POWER_OFF);
  }
  mount("sysfs", "/sys", "sysfs", 0, NULL);
  mount("proc", "/proc", "proc", 0, NULL);
  mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);  // /dev/null for perf-tool.sh's shell
  setvbuf(stdout, NULL, _IONBF, 0);
  printf("vbts linux init: pid %d\n", getpid());
  if (argc > 2 && strcmp(argv[1], "run") == 0) run_command(argv + 2);
  if (access("/sys/bus/event_source/devices/cpu", F_OK) != 0) {
    printf("SKIP: no hardware PMU under this kernel (/sys/bus/event_source/devices/cpu)\n");
    finish(77);
  }
  // As perf-tool.sh: the kernel lowers its sample rate when a PMI handler
  // seems slow and then throttles sampling to a few samples per tick; a
  // handler's guest time includes vbts's switching between host and
  // instruction time (docs/tcg-engine.md, "Guest time": ~2.7 ms at the first
  // PMI here), so the LBR check saw 14-15 of its 19 samples in some runs.
  // 0 turns that adjustment off (Documentation/admin-guide/sysctl/kernel.rst).
  int fd = open("/proc/sys/kernel/perf_cpu_time_max_percent", O_WRONLY);
  if (fd < 0 || write(fd, "0\n", 2) != 2) printf("init: cannot write perf_cpu_time_max_percent\n");
  if (fd >= 0) close(fd);
  test_instructions();
  test_intel_bts();
  test_lbr();
  test_pebs();
  finish(failures ? 1 : 0);
}
