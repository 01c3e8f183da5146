// cli.cc: argument parsing (CLI11) and subcommand dispatch for `vbts`.
#include "vmm/cli.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <future>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "pmu/cpu_model.h"
#include "vmm/test_runner.h"

#include <unistd.h>
#include "base/exit_status.h"
#include "vmm/host_probe.h"
#include "vmm/info.h"
#include "record/symbol_elf.h"
#include "record/symbols.h"
#include "vmm/machine.h"
#include "vmm/stop_signals.h"
#include "vmm/sandbox.h"
#include "record/recorder.h"
#include "record/report_command.h"

namespace vbts::vmm {
namespace {

using record::RecordOptions;
using record::RecordSession;
using record::ReportCommand;
using record::ReportOptions;
namespace trace = record::trace;

// "128M", "1G", "65536K", "4194304" (bytes) -> bytes.
absl::StatusOr<uint64_t> ParseSize(const std::string& text) {
  if (text.empty()) return absl::InvalidArgumentError("--mem: empty size");
  uint64_t mult = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'K': case 'k': mult = 1ull << 10; digits.pop_back(); break;
    case 'M': case 'm': mult = 1ull << 20; digits.pop_back(); break;
    case 'G': case 'g': mult = 1ull << 30; digits.pop_back(); break;
    default: break;
  }
  uint64_t n;
  if (!absl::SimpleAtoi(digits, &n) || n > (~0ull) / mult)
    return absl::InvalidArgumentError(
        absl::StrFormat("--mem=%s: not a size (use bytes or a K/M/G suffix, e.g. 128M)", text));
  return n * mult;
}

void PrintError(const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }

const char* RunEndName(RunEnd e) {
  switch (e) {
    case RunEnd::kGuestExit: return "guest-exit";
    case RunEnd::kPowerOff: return "power-off";
    case RunEnd::kTimeout: return "timeout";
    case RunEnd::kTripleFault: return "triple-fault";
    case RunEnd::kHaltedIfClear: return "halted-if-clear";
    case RunEnd::kUnsupported: return "unsupported";
    case RunEnd::kError: return "error";
    case RunEnd::kKilled: return "killed";
    case RunEnd::kSignalled: return "signalled";
  }
  return "error";
}

// `vbts run`, and `vbts record` when `record` is set (the same run, with the
// tracer's transfers streamed to the trace file).
int RunCommand(const MachineConfig& base, const std::string& mem, const RecordOptions* record = nullptr,
               const std::string& command = "") {
  MachineConfig config = base;
  absl::StatusOr<uint64_t> bytes = ParseSize(mem);
  if (!bytes.ok()) {
    PrintError(absl::StrCat("vbts: ", bytes.status().message()));
    return kExitUsage;
  }
  config.mem_bytes = *bytes;
  absl::StatusOr<Kvm> kvm = Kvm::Open();
  if (!kvm.ok()) {
    PrintError(absl::StrCat("vbts: ", kvm.status().message()));
    return kExitVbtsError;
  }
  // The guest's VM and its MSR filter are made while the host is probed
  // (PrepareVm); if that fails, Machine::Create makes its own and reports.
  std::future<absl::StatusOr<PreparedVm>> prepared =
      std::async(std::launch::async, [&kvm, vpmu = config.vpmu] { return PrepareVm(*kvm, vpmu); });
  absl::StatusOr<vcpu::HostFacts> facts = ProbeHost(*kvm);
  absl::StatusOr<PreparedVm> vm = prepared.get();
  if (!facts.ok()) {
    PrintError(absl::StrCat("vbts: probing the host's KVM failed: ", facts.status().message()));
    return kExitVbtsError;
  }
  // Ctrl-C and the like end the run cleanly from here on (vmm/stop_signals.h).
  if (absl::Status s = InstallStopSignals(); !s.ok()) {
    PrintError(absl::StrCat("vbts: ", s.message()));
    return kExitVbtsError;
  }
  std::unique_ptr<RecordSession> session;
  if (record) {
    absl::StatusOr<std::unique_ptr<RecordSession>> s = RecordSession::Open(*record, config.image_path);
    if (!s.ok()) {
      PrintError(absl::StrCat("vbts: ", s.status().message()));
      return kExitVbtsError;
    }
    session = std::move(*s);
    config.transfer_sink = session->Sink();
  }
  absl::StatusOr<std::unique_ptr<Machine>> machine =
      Machine::Create(config, *kvm, *facts, vm.ok() ? std::optional<PreparedVm>(*std::move(vm)) : std::nullopt);
  if (!machine.ok()) {
    PrintError(absl::StrCat("vbts: ", machine.status().message()));
    return kExitVbtsError;
  }
  if (session) {
    std::vector<trace::AddressRange> code;
    for (const CodeRange& c : (*machine)->code()) code.push_back({c.vaddr, c.vaddr + c.size});
    if (absl::Status s = session->Start(config.image_path, config.cpu_model, code, (*machine)->entry(), command); !s.ok()) {
      PrintError(absl::StrCat("vbts: ", s.message()));
      return kExitVbtsError;
    }
  }
  if (config.sandbox) {
    // Setup is over: from here vbts only runs the guest (docs/security.md).
    if (absl::Status s = EnterSandbox(); !s.ok()) {
      PrintError(absl::StrCat("vbts: cannot enter the syscall filter (--sandbox=off runs without it): ", s.message()));
      return kExitVbtsError;
    }
  }
  // (The TCG engine answers every CPUID from the model: nothing to step for.)
  if (const std::string& why = (*machine)->supervisor().stepping_reason();
      !why.empty() && !config.exact_cpuid && (*machine)->starts_in_kvm())
    PrintError(absl::StrCat("vbts: note: single-stepping the whole guest (slow): ", why));
  RunResult r = (*machine)->Run();
  if (session) session->EndStatus();
  if (!r.message.empty()) PrintError(r.message);
  if (config.verbose) std::fprintf(stderr, "%s", r.details.c_str());
  if (session) {
    absl::StatusOr<std::string> summary = session->Finish(RunEndName(r.end), r.exit_status);
    if (!summary.ok()) {
      PrintError(absl::StrCat("vbts: recording failed: ", summary.status().message()));
      return kExitVbtsError;
    }
    PrintError(*summary);
  }
  return r.exit_status;
}

// `vbts symbols FILE -o OUT`: FILE's symbols as an ELF file for GDB.
int SymbolsCommand(const std::string& in, const std::string& out) {
  absl::StatusOr<record::SymbolTable> table = record::SymbolTable::Load(in);
  if (!table.ok()) {
    PrintError(absl::StrCat("vbts symbols: ", table.status().message()));
    return kExitVbtsError;
  }
  absl::StatusOr<std::vector<uint8_t>> elf = record::SymbolElf(*table);
  if (!elf.ok()) {
    PrintError(absl::StrCat("vbts symbols: ", in, ": ", elf.status().message()));
    return kExitVbtsError;
  }
  if (absl::Status s = WriteWholeFile(out, *elf); !s.ok()) {
    PrintError(absl::StrCat("vbts symbols: ", s.message()));
    return kExitVbtsError;
  }
  std::fprintf(stderr, "vbts symbols: %zu functions from %s written to %s (GDB: symbol-file %s)\n", table->size(),
               in.c_str(), out.c_str(), out.c_str());
  return 0;
}

}  // namespace

int CliMain(int argc, char** argv) {
  CLI::App app{"vbts: a KVM hypervisor with virtual Intel branch tracing (BTS, LBR, BTF, PMU)."};
  app.set_version_flag("--version", std::string("vbts ") + VBTS_VERSION);
  app.require_subcommand(1);
  app.footer(
      "Exit status of `vbts run`: the guest's isa-debug-exit value v as (v << 1) | 1 (odd);\n"
      "  116 vbts error (bad image, no /dev/kvm, host failure), 118 the guest needs something this\n"
      "  host cannot run, 120 triple fault, 122 halted with interrupts disabled, 124 --timeout,\n"
      "  114 ended by the debugger (gdb kill), 130 ended by SIGINT/SIGTERM/SIGHUP (recordings finished),\n"
      "  2 usage error. See docs/cli.md.");

  MachineConfig config;
  std::string mem = "128M";
#if defined(__SANITIZE_ADDRESS__)
  // The sanitizer build (docs/security.md): LeakSanitizer's exit-time check
  // stops the world from a cloned process with ptrace, which the filter
  // refuses; the filter itself is tested there in forked children
  // (vmm/sandbox_test.cc).
  std::string sandbox = "off";
#else
  std::string sandbox = "on";
#endif
  // The options of `vbts run`, which `vbts record` takes too.
  std::string tcg_hooks = "call";
  std::string clock = "host";
  auto add_run_options = [&config, &mem, &sandbox, &tcg_hooks, &clock](CLI::App* cmd) {
    cmd->add_option("--mem", mem, "guest RAM size (bytes, or with K/M/G suffix)")->capture_default_str();
    cmd->add_option("--cpu", config.cpu_model, "guest CPU model (" + pmu::CpuModelNames() + ")")
        ->capture_default_str();
    cmd->add_option("--timeout", config.timeout_seconds, "stop the guest after SECONDS (exit status 124)")
        ->check(CLI::NonNegativeNumber);
    // expected(0, 1): `--append=` (empty, as QEMU accepts `-append ""`) is an empty command line.
    cmd->add_option("--append", config.append, "Multiboot command line after the image name")->expected(0, 1);
    cmd->add_option("--initrd", config.initrd,
                    "Multiboot modules \"FILE [ARGS],FILE...\" (as qemu -initrd; ',,' is a comma)");
    cmd->add_option("--vpmu", config.vpmu,
                    "virtual PMU/DS/LBR: emulated (by stepping the guest while tracing is on), passthrough (host "
                    "KVM's LBR virtualisation, where it has one), off")
        ->check(CLI::IsMember({"emulated", "passthrough", "off"}))
        ->capture_default_str();
    cmd->add_option("--engine", config.engine,
                    "how the vCPU runs: kvm (the host's KVM; stepped while tracing), tcg (QEMU's TCG through "
                    "libunicorn, in-process; runs what this host's KVM cannot, e.g. 32-bit paging), kvm-tcg (kvm, "
                    "moving to tcg while the guest traces itself), or auto (tcg for a run traced from its start: "
                    "record, --branches, --insns; tcg on PVM hosts; kvm-tcg otherwise). docs/tcg-engine.md")
        ->check(CLI::IsMember({"auto", "kvm", "tcg", "kvm-tcg"}))
        ->capture_default_str();
    cmd->add_option("--tcg-hooks", tcg_hooks,
                    "TCG engine: call (where whole blocks run unreported, one Unicorn hook per translated block, "
                    "and while whole blocks are skipped across, as for counters, LBRs and recordings, one direct "
                    "call per block instead), block (the hook there too) or instruction (a hook before every "
                    "instruction while tracing; slower, for comparisons). docs/tcg-engine.md")
        ->check(CLI::IsMember({"call", "block", "instruction"}))
        ->capture_default_str();
    cmd->add_option("--clock", clock,
                    "the guest's time on the TCG engine: host (the host's clock, as under KVM, while nothing is "
                    "traced) or instructions (one TSC tick per retired instruction throughout, and a halted guest "
                    "jumps to its next timer: deterministic, like QEMU's -icount; needs the TCG engine). "
                    "docs/tcg-engine.md")
        ->check(CLI::IsMember({"host", "instructions"}))
        ->capture_default_str();
    cmd->add_option("--branches", config.branches_path,
                    "write every control transfer as `0x<from> 0x<to> <kind>` lines to FILE (steps the guest)");
    cmd->add_option("--insns", config.insns_path,
                    "write the linear address of every executed instruction to FILE (steps the guest)");
    cmd->add_flag("-v,--verbose", config.verbose, "on an abnormal end, dump registers and device statistics");
    cmd->add_flag("--exact-cpuid", config.exact_cpuid,
                  "single-step the whole guest so that every CPUID answers from the CPU model, even where this "
                  "host's KVM cannot be guarded (slow; see docs/completion.md)");
    cmd->add_option("--device", config.devices,
                    "add a device (repeatable, or comma-separated): edu (QEMU's educational PCI device: DMA, INTx, "
                    "MSI) or intel-iommu (a VT-d remapping unit at 0xfed90000: DMA and interrupt remapping); "
                    "needs the TCG engine. docs/guest-abi.md")
        ->delimiter(',')
        ->check(CLI::IsMember(std::vector<std::string>(std::begin(MachineConfig::kDeviceNames),
                                                        std::end(MachineConfig::kDeviceNames))));
    cmd->add_option("--gdb", config.gdb,
                    "serve the GDB remote protocol on [HOST:]PORT (default host 127.0.0.1); the client's stops are "
                    "the TCG engine's (with kvm-tcg the guest runs on KVM while the client sets nothing). "
                    "docs/gdb.md");
    cmd->add_flag("--gdb-wait", config.gdb_wait, "with --gdb: stop before the first instruction until GDB attaches");
    cmd->add_option("--gdb-arch", config.gdb_arch,
                    "with --gdb: the registers GDB is given: i386, x86-64, or auto (x86-64 unless the CPU model "
                    "has no long mode)")
        ->check(CLI::IsMember({"auto", "i386", "x86-64"}))
        ->capture_default_str();
    cmd->add_option("--sandbox", sandbox,
                    "on: after setup, run under a seccomp-bpf syscall allowlist (a forbidden call ends vbts with "
                    "status 116); off: without it. docs/security.md")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
    cmd->add_option("IMAGE", config.image_path, "Linux bzImage, Multiboot v1 image (ELF32 or a.out-kludge) or PVH kernel (vmlinux)")->required();
  };
  CLI::App* run = app.add_subcommand("run", "Boot a Multiboot image; its COM1 output goes to stdout.");
  add_run_options(run);

  RecordOptions rec;
  CLI::App* record = app.add_subcommand(
      "record", "Run an image like `vbts run` while recording every control transfer to a trace file.");
  record->add_option("-o,--output", rec.output, "the trace file to write (docs/trace-format.md)")->required();
  record->add_option("--cpl", rec.cpl, "record only transfers from or to this CPL: 0, 3 or all")
      ->check(CLI::IsMember({"0", "3", "all"}))
      ->capture_default_str();
  record->add_option("--range", rec.ranges,
                     "record only transfers from or to START:END (addresses or symbols, END exclusive) or SYMBOL; "
                     "repeatable");
  record->add_option("--symbols", rec.symbols,
                     "ELF file, or Linux's System.map or a copy of /proc/kallsyms, for symbol names in --range "
                     "(default: the image); repeatable: the files' symbols together")
      ->allow_extra_args(false);
  record->add_option("--max-records", rec.max_records,
                     "stop recording after N transfers (0: no limit); the guest runs on")
      ->capture_default_str();
  add_run_options(record);

  ReportOptions report_opt;
  CLI::App* report = app.add_subcommand("report", "Print a trace file written by `vbts record` in a chosen format.");
  report->add_option("--format", report_opt.format,
                     std::string("text (default), branches, json, drcov, folded or dot; see docs/cli.md"))
      ->check(CLI::IsMember({"text", "branches", "json", "drcov", "folded", "dot"}))
      ->capture_default_str();
  report->add_option("--symbols", report_opt.symbols,
                     "ELF file for symbol names and instruction lengths, or Linux's System.map or a copy of "
                     "/proc/kallsyms for names (default: the recorded image, if unchanged); repeatable: the files' "
                     "symbols together (a guest kernel's and a program's)")
      ->allow_extra_args(false);
  report->add_option("FILE", report_opt.file, "the trace file")->required();

  std::string symbols_in, symbols_out;
  CLI::App* symbols = app.add_subcommand(
      "symbols", "Write a symbol file (System.map, a guest's /proc/kallsyms, or ELF) as an ELF file GDB loads.");
  symbols->add_option("FILE", symbols_in, "Linux's System.map, a copy of /proc/kallsyms, or an ELF file")->required();
  symbols->add_option("-o,--output", symbols_out, "the ELF file to write (for GDB's symbol-file)")->required();

  bool info_verbose = false;
  std::string info_cpu;
  CLI::App* info = app.add_subcommand("info", "Show what this host's KVM can do (probed with tiny guests).");
  info->add_option("--cpu", info_cpu, "also print a CPU model's CPUID (" + pmu::CpuModelNames() + ")");
  info->add_flag("-v,--verbose", info_verbose, "more detail");

  TestRunOptions test_opt;
  std::string test_dir;
  CLI::App* test = app.add_subcommand(
      "test", "Run a directory of guest images as a manifest describes them; print a pass/fail table.");
  test->add_option("DIR", test_dir,
                   "directory of the images (default: guest-tests/ next to this vbts binary)");
  test->add_option("--manifest", test_opt.manifest,
                   "the manifest (default: DIR/tests.cfg, else the source tree's guest-tests/tests.cfg)");
  test->add_option("--filter", test_opt.filter, "run only the tests whose name contains TEXT");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  config.sandbox = sandbox == "on";
  config.tcg_hook_per_block = tcg_hooks != "instruction";
  config.tcg_count_call = tcg_hooks == "call";
  config.instruction_clock = clock == "instructions";
  if (config.gdb_wait && config.gdb.empty()) {
    PrintError("vbts: --gdb-wait needs --gdb=[HOST:]PORT");
    return kExitUsage;
  }
  if (*run) return RunCommand(config, mem);
  if (*record) {
    std::string command;
    for (int i = 0; i < argc; i++) absl::StrAppend(&command, i ? " " : "", argv[i]);
    return RunCommand(config, mem, &rec, command);
  }
  if (*report) {
    std::ios::sync_with_stdio(false);
    return ReportCommand(report_opt, std::cout);
  }
  if (*info) return RunInfo(info_verbose, info_cpu);
  if (*symbols) return SymbolsCommand(symbols_in, symbols_out);
  if (*test) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
      PrintError("vbts test: cannot find the vbts binary (/proc/self/exe)");
      return kExitVbtsError;
    }
    self[n] = 0;
    test_opt.vbts = self;
    std::string bin_dir = test_opt.vbts.substr(0, test_opt.vbts.rfind('/'));
    test_opt.image_dir = test_dir.empty() ? bin_dir + "/guest-tests" : test_dir;
    if (test_opt.manifest.empty()) {
      test_opt.manifest = test_opt.image_dir + "/tests.cfg";
      if (access(test_opt.manifest.c_str(), R_OK) != 0)
        test_opt.manifest = std::string(VBTS_SOURCE_DIR) + "/guest-tests/tests.cfg";
    }
    return RunTests(test_opt);
  }
  return kExitUsage;
}

}  // namespace vbts::vmm
