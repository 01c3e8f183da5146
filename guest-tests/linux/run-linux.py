#!/usr/bin/env python3
"""run-linux.py: boot Debian's kernel with guest-tests/linux/init.c as PID 1.

    run-linux.py (--vbts PATH | --qemu PATH) --kernel VMLINUX --initrd CPIO [--cpu MODEL]
                 [--record-max N] [--perf-tool] [--perf-test] [--perf-shell] [--iommu] [--watchdog]
                 [--clocks]

The kernel is not ours: scripts/fetch-linux.sh puts Debian's cloud kernel
(linux-image-cloud-amd64) there; without it the test is skipped (77) with a
line saying how to get it. Both monitors get the same command line: COM1 as
the console, `pti=off` (Linux refuses intel_bts while page-table isolation is
on, arch/x86/events/intel/bts.c), `nmi_watchdog=0` (the watchdog keeps a
counter, and with it vbts's tracing, running for the whole boot), `panic=-1`
(a panic resets at once: the run ends instead of waiting).

Under vbts: status 1 (every check of init.c passed), its four PASS lines,
"SUMMARY: 4 passed, 0 failed", and the kernel's line naming the PMU the CPU
model gives it (Westmere: PEBS format 1 and a 16-deep LBR; Skylake: PEBS
format 3, 32 LBRs and full-width counter writes; Ice Lake server: adaptive
PEBS format 4 with the baseline bit; from CPUID leaf 0AH, IA32_PERF_CAPABILITIES
and the model number, arch/x86/events/intel/core.c); in every mode also the
kernel's lines that it found and registered the HPET (HPET_LINES).
With --record-max N, vbts records the boot (`vbts record --max-records=N`)
and the recording stops early in the boot: the rest of it, and init's perf
checks, run on the untraced engine after the switch, with the same
expectations; the trace must hold exactly N transfers
(`vbts report --format=branches`). (Until 2026-11-26 the switch left QEMU's
state broken and the kernel ended in a triple fault: TcgCpu::DeleteHook.)
With --perf-tool the initramfs is linux-perf-tool.cpio and init runs
perf-tool.sh (`-- run /bin/sh /perf-tool.sh`): Debian's own perf tool, eleven
PASS lines (PERF_TOOL_CHECKS) and "SUMMARY: 13 passed, 0 failed"; without that
initramfs (the build found no perf) the test is skipped (77) with a line
saying how to get it.
With --perf-test the initramfs is linux-perf-test.cpio and init runs
perf-test.sh: the hardware-facing cases of Debian's own `perf test` suite, one
PASS line each (PERF_TEST_CHECKS) and "SUMMARY: 17 passed, 0 failed".
With --perf-shell the initramfs is linux-perf-shell.cpio (perf, bash, gcc and
perf's own tests/shell) and init runs perf-shell.sh: Debian perf's shell
tests, each with the status it has on a real CPU with this kernel, one PASS
line each (PERF_SHELL_CHECKS) and "SUMMARY: 8 passed, 0 failed" (9 with
--perf-shell-data-symbol, which adds test_data_symbol.sh); the guest has
1 GiB (the initramfs is ~90 MB) and up to 280 s.
With --iommu (vbts only) the machine has `--device=intel-iommu,edu` and init
runs iommu.sh from linux-iommu.cpio: Linux's VT-d driver enables interrupt
remapping and DMA remapping on vbts's unit, finds the edu device through the
ACPI PCI root, and user space makes the device DMA to an unmapped IOVA twice:
six PASS lines (IOMMU_CHECKS), "SUMMARY: 6 passed, 0 failed", and the kernel's
lines in IOMMU_LINES, among them the two faults as Linux decodes the unit's
fault records (reason 5 for the write, 6 for the read), and in
IOMMU_MODE_LINES: remapping in xAPIC format on westmere, in x2APIC format (EIM)
with the x2APIC in cluster mode on skylake.
With --watchdog the command line keeps Linux's NMI watchdog on (no
`nmi_watchdog=0`) with `watchdog_thresh=1` (WATCHDOG_APPEND), and init runs
watchdog.sh from linux-watchdog.cpio: the kernel's line that the watchdog is
enabled (WATCHDOG_LINE), one or two NMIs over a 3 G-instruction loop, exact
counts from perf stat beside it: three PASS lines (WATCHDOG_CHECKS) and
"SUMMARY: 3 passed, 0 failed".
With --clocks init runs clocks.sh from linux-clocks.cpio: the HPET among the
clocksources and time running on it, the RTC's alarm delivered through ACPI's
RTC event and the SCI: three PASS lines (CLOCKS_CHECKS).
Under QEMU's TCG (no PMU): status 155 and init's (or perf-tool.sh's) SKIP line.
Exit status: 0 as expected, 1 not, 77 no kernel.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

APPEND = "console=ttyS0 panic=-1 nmi_watchdog=0 pti=off"
PMU_LINES = {
    "westmere": "Performance Events: PEBS fmt1+, Westmere events, 16-deep LBR, Intel PMU driver.",
    "skylake": "Performance Events: PEBS fmt3+, Skylake events, 32-deep LBR, full-width counters, Intel PMU driver.",
    "icelake-server": "Performance Events: PEBS fmt4+-baseline, Icelake events, AnyThread deprecated, 32-deep LBR, "
                      "full-width counters, Intel PMU driver.",
}


# Every boot under vbts: the kernel finds the HPET through the ACPI table and
# registers it (docs/guest-abi.md, "Devices").
HPET_LINES = ("ACPI: HPET id: 0x8086a201 base: 0xfed00000", "hpet0: 3 comparators, 64-bit 100.000000 MHz counter")


INIT_CHECKS = ("instructions:u", "intel_bts", "lbr", "pebs")
PERF_TOOL_CHECKS = ("DMI", "perf stat", "perf stat L1-dcache", "perf stat br_inst_retired", "perf stat task-clock", "perf mem loads", "perf record LLC-loads", "perf mem stores",
                    "intel_bts",
                    "branches -c 1", "perf record -b", "instructions:upp", "call-graph lbr")


PERF_TEST_CHECKS = ("Read samples using the mmap interface", "User space counter reading of instructions",
                    "User space counter reading of cycles", "Test data source output",
                    "PERF_RECORD_* events & perf_sample fields", "Breakpoint overflow signal handler",
                    "Breakpoint overflow sampling", "Breakpoint accounting", "Read Only Watchpoint",
                    "Write Only Watchpoint", "Read / Write Watchpoint", "Modify Watchpoint", "TSC support",
                    "Perf time to TSC", "x86 bp modify", "Sigtrap", "Software clock events period values")


WATCHDOG_CHECKS = ("watchdog on", "watchdog NMI", "perf stat beside the watchdog")
CLOCKS_CHECKS = ("hpet clocksource", "time on the hpet", "rtc alarm")
WATCHDOG_APPEND = "console=ttyS0 panic=-1 pti=off watchdog_thresh=1"
WATCHDOG_LINE = "NMI watchdog: Enabled. Permanently consumes one hw-PMU counter."


PERF_SHELL_CHECKS = ("test_brstack.sh", "record.sh", "record.sh register capture", "stat.sh", "stat+shadow_stat.sh",
                     "stat+csv_summary.sh", "stat+csv_output.sh", "record+zstd_comp_decomp.sh")


IOMMU_CHECKS = ("timer through interrupt remapping", "COM1 through interrupt remapping", "dmar0 registers",
                "edu on the PCI bus", "edu in an IOMMU group", "DMA faults signalled")
IOMMU_LINES = (
    "DMAR: dmar0: reg_base_addr fed90000 ver 1:0 cap c222f0606 ecap f00f5b",
    "DMAR-IR: IOAPIC id 0 under DRHD base  0xfed90000 IOMMU 0",
    "ACPI: PCI Root Bridge [PCI0] (domain 0000 [bus 00-ff])",
    "pci 0000:00:03.0: BAR 0 [mem 0xfe000000-0xfe0fffff]",
    "DMAR: dmar0: Using Queued invalidation",
    "pci 0000:00:03.0: Adding to iommu group 1",
    "DMAR: Intel(R) Virtualization Technology for Directed I/O",
    "DMAR: [DMA Write NO_PASID] Request device [00:03.0] fault addr 0x1000 [fault reason 0x05] "
    "PTE Write access is not set",
    "DMAR: [DMA Read NO_PASID] Request device [00:03.0] fault addr 0x1000 [fault reason 0x06] "
    "PTE Read access is not set",
)


# Interrupt remapping's mode: x2APIC (EIM) where the CPU model has an x2APIC.
IOMMU_MODE_LINES = {
    "westmere": ("DMAR-IR: Enabled IRQ remapping in xapic mode",),
    "skylake": ("DMAR-IR: Enabled IRQ remapping in x2apic mode", "x2apic enabled",
                "Switched APIC routing to cluster x2apic."),
}


# start_kernel's first calls in Linux 6.1 (init/main.c: set_task_stack_end_magic,
# smp_setup_processor_id, debug_objects_early_init (empty without
# CONFIG_DEBUG_OBJECTS), init_vmlinux_build_id, cgroup_init_early,
# local_irq_disable (paravirt: pv_native_irq_disable, an indirect call),
# boot_cpu_init, page_address_init (empty), pr_notice (_printk),
# early_security_init, setup_arch), each followed by its return; the
# compiler's __fentry__ call comes first (ftrace).
KALLSYMS_CALLS = ("__fentry__", "set_task_stack_end_magic", "smp_setup_processor_id", "init_vmlinux_build_id",
                  "cgroup_init_early", "pv_native_irq_disable", "boot_cpu_init", "_printk", "early_security_init",
                  "setup_arch")
KALLSYMS_LINE = re.compile(r"^[0-9a-f]{16} [A-Za-z] \S+(\t\[\S+\])?$")


def dump_kallsyms(a):
    """--dump-kallsyms OUT: a boot that prints the kernel's code symbols
    (/proc/kallsyms, types t, T, w, W) through COM1; the lines of that shape go
    to OUT. The PVH entry applies no KASLR, so every boot of this kernel file
    has these addresses (docs/cli.md, `vbts report --symbols`)."""
    dump = APPEND + " quiet -- run /bin/sh -c \"sed -n '/ [tTwW] /p' /proc/kallsyms\""
    p = subprocess.run([a.vbts, "run", "--cpu=" + a.cpu, "--mem=512M", "--timeout=120", "--initrd=" + a.initrd,
                        "--append=" + dump, a.kernel], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       errors="replace", timeout=300)
    lines = [l for l in p.stdout.replace("\r", "").splitlines() if KALLSYMS_LINE.match(l)]
    if p.returncode != 1 or len(lines) < 10000:
        print(p.stdout[-3000:] + p.stderr[-2000:])
        print("run-linux: the kallsyms boot: status %d (expected 1), %d symbol lines" % (p.returncode, len(lines)))
        return 1
    with open(a.dump_kallsyms, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("PASS: %d code symbols from the guest's /proc/kallsyms in %s" % (len(lines), a.dump_kallsyms))
    return 0


def kallsyms_range(a):
    """--kallsyms-range KALLSYMS: `vbts record --symbols=KALLSYMS
    --range=start_kernel --max-records=N` of a boot, and `vbts report
    --symbols=KALLSYMS`: N transfers, each from or to start_kernel, whose calls
    begin with KALLSYMS_CALLS in order."""
    tmp = tempfile.TemporaryDirectory()
    kallsyms = a.kallsyms_range
    n = 40
    trace = os.path.join(tmp.name, "start_kernel.vbtr")
    r = subprocess.run([a.vbts, "record", "-o", trace, "--symbols=" + kallsyms, "--range=start_kernel",
                        "--max-records=%d" % n, "--cpu=" + a.cpu, "--mem=512M", "--timeout=120",
                        "--append=" + APPEND, a.kernel], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       errors="replace", timeout=300)
    errors = []
    # No initramfs: the kernel panics at mounting its root and, with panic=-1,
    # resets the machine (status 120).
    if r.returncode != 120 or "--max-records=%d reached" % n not in r.stderr:
        errors.append("vbts record: status %d (expected 120), no '--max-records=%d reached'" % (r.returncode, n))
    rep = subprocess.run([a.vbts, "report", "--symbols=" + kallsyms, trace], capture_output=True, text=True,
                         timeout=120)
    records = [l for l in rep.stdout.splitlines() if l and not l.startswith("#")]
    if rep.returncode != 0 or len(records) != n:
        errors.append("vbts report: status %d, %d transfers (expected 0, %d)" % (rep.returncode, len(records), n))
    outside = [l for l in records if "start_kernel" not in l]
    if outside:
        errors.append("transfers neither from nor to start_kernel: %s" % outside[:3])
    calls = [m.group(1) for m in (re.search(r" (?:call|ind-call) +start_kernel(?:\+0x[0-9a-f]+)? \(0x[0-9a-f]+\) -> "
                                            r"([A-Za-z0-9_.]+) \(", l) for l in records) if m]
    if tuple(calls[:len(KALLSYMS_CALLS)]) != KALLSYMS_CALLS:
        errors.append("start_kernel's calls %s, expected %s first" % (calls, list(KALLSYMS_CALLS)))
    if errors:
        print(rep.stdout[-4000:] + r.stderr[-2000:])
        print("run-linux: " + "; ".join(errors))
        return 1
    print("PASS: vbts record --range=start_kernel with the guest's own symbols: %d transfers, start_kernel's "
          "calls %s" % (n, " ".join(calls[:len(KALLSYMS_CALLS)])))
    return 0


def main():
    ap = argparse.ArgumentParser()
    mon = ap.add_mutually_exclusive_group(required=True)
    mon.add_argument("--vbts")
    mon.add_argument("--qemu")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--initrd", required=True)
    ap.add_argument("--cpu", default="westmere")
    ap.add_argument("--record-max", type=int, default=0,
                    help="vbts record the boot with --max-records=N, then check the trace too")
    ap.add_argument("--perf-tool", action="store_true",
                    help="the initramfs of perf-tool.sh: check its perf checks (PERF_TOOL_CHECKS)")
    ap.add_argument("--perf-test", action="store_true",
                    help="the initramfs of perf-test.sh: check its cases of `perf test` (PERF_TEST_CHECKS)")
    ap.add_argument("--perf-shell", action="store_true",
                    help="the initramfs of perf-shell.sh: check Debian perf's shell tests (PERF_SHELL_CHECKS)")
    ap.add_argument("--perf-shell-data-symbol", action="store_true",
                    help="with --perf-shell: test_data_symbol.sh too (~35 s more: label heavy)")
    ap.add_argument("--watchdog", action="store_true",
                    help="the initramfs of watchdog.sh, with the NMI watchdog on (WATCHDOG_APPEND): WATCHDOG_CHECKS")
    ap.add_argument("--clocks", action="store_true",
                    help="the initramfs of clocks.sh: the HPET as clocksource, the RTC alarm through ACPI (CLOCKS_CHECKS)")
    ap.add_argument("--iommu", action="store_true",
                    help="--device=intel-iommu,edu and the initramfs of iommu.sh: IOMMU_CHECKS, IOMMU_LINES")
    ap.add_argument("--dump-kallsyms", metavar="OUT",
                    help="write the kernel's code symbols, from its own /proc/kallsyms, to OUT")
    ap.add_argument("--kallsyms-range", metavar="KALLSYMS",
                    help="vbts record --range=start_kernel with the symbols --dump-kallsyms wrote (KALLSYMS_CALLS)")
    a = ap.parse_args()
    if not os.path.exists(a.kernel):
        print("SKIP: no kernel at %s: run scripts/fetch-linux.sh %s (scripts/test.sh does)"
              % (a.kernel, os.path.dirname(a.kernel)))
        return 77
    if a.dump_kallsyms:
        if not os.path.exists(a.initrd):
            print("SKIP: no %s (an initramfs with sed)" % a.initrd)
            return 77
        return dump_kallsyms(a)
    if a.kallsyms_range:
        if not os.path.exists(a.kallsyms_range):
            print("SKIP: no %s (linux.kallsyms writes it)" % a.kallsyms_range)
            return 77
        return kallsyms_range(a)
    if (a.perf_tool or a.perf_test or a.perf_shell) and not os.path.exists(a.initrd):
        print("SKIP: no %s: the build found no `perf` (Debian's linux-perf; scripts/setup.sh installs it)"
              % a.initrd)
        return 77
    script = ("/perf-tool.sh" if a.perf_tool else "/perf-test.sh" if a.perf_test else
              "/perf-shell.sh" if a.perf_shell else "/iommu.sh" if a.iommu else
              "/watchdog.sh" if a.watchdog else "/clocks.sh" if a.clocks else "")
    if a.perf_shell and a.perf_shell_data_symbol:
        script += " data_symbol"
    append = (WATCHDOG_APPEND if a.watchdog else APPEND) + (" -- run /bin/sh " + script if script else "")
    checks = (PERF_TOOL_CHECKS if a.perf_tool else PERF_TEST_CHECKS if a.perf_test else
              PERF_SHELL_CHECKS if a.perf_shell else IOMMU_CHECKS if a.iommu else
              WATCHDOG_CHECKS if a.watchdog else CLOCKS_CHECKS if a.clocks else INIT_CHECKS)
    if a.perf_shell and a.perf_shell_data_symbol:
        checks = checks + ("test_data_symbol.sh",)
    # Limits, not timings: the sanitizer build (scripts/test.sh) runs perf-tool.sh
    # in ~100 s on this 2-core host beside other tests, and slower when they crowd it.
    mem, seconds = ("1G", 280) if a.perf_shell else ("512M", 180)
    tmp = tempfile.TemporaryDirectory()
    trace = os.path.join(tmp.name, "boot.vbtr")
    if a.vbts:
        mode = ["record", "-o", trace, "--max-records=%d" % a.record_max] if a.record_max else ["run"]
        devices = ["--device=intel-iommu,edu"] if a.iommu else []
        cmd = [a.vbts, *mode, *devices, "--cpu=" + a.cpu, "--mem=" + mem, "--timeout=%d" % seconds,
               "--initrd=" + a.initrd, "--append=" + append, a.kernel]
    else:
        cmd = [a.qemu, "-accel", "tcg", "-cpu", "Westmere", "-m", "512", "-no-reboot",
               "-display", "none", "-serial", "stdio", "-device", "isa-debug-exit,iobase=0xf4,iosize=4",
               "-kernel", a.kernel, "-initrd", a.initrd, "-append", append]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                       timeout=seconds + 180)
    out = p.stdout.splitlines()
    errors = []
    want_status = 1 if a.vbts else 155
    if p.returncode != want_status:
        errors.append("status %d, expected %d" % (p.returncode, want_status))
    lines = [l for l in out if not l.startswith("[")]  # init's lines, not the kernel's
    if a.vbts:
        for name in checks:
            if not any(l.startswith("PASS: %s:" % name) for l in lines):
                errors.append("no PASS line for %s" % name)
        summary = "SUMMARY: %d passed, 0 failed" % len(checks)
        if summary not in lines:
            errors.append("no '%s' line" % summary)
        iommu_lines = list(IOMMU_LINES) + list(IOMMU_MODE_LINES.get(a.cpu, ())) if a.iommu else []
        watchdog_lines = [WATCHDOG_LINE] if a.watchdog else []
        for want in [PMU_LINES.get(a.cpu)] + list(HPET_LINES) + iommu_lines + watchdog_lines:
            if want and not any(l.endswith("] " + want) for l in out):
                errors.append("the kernel did not say %r" % want)
        if a.record_max:
            if "--max-records=%d reached" % a.record_max not in p.stderr:
                errors.append("vbts record did not say --max-records=%d was reached" % a.record_max)
            r = subprocess.run([a.vbts, "report", "--format=branches", trace], capture_output=True, timeout=120)
            n = r.stdout.count(b"\n")
            if r.returncode != 0 or n != a.record_max:
                errors.append("vbts report: status %d, %d transfers (expected 0, %d)" % (r.returncode, n, a.record_max))
    elif "SKIP: no hardware PMU under this kernel (/sys/bus/event_source/devices/cpu)" not in lines:
        errors.append("no SKIP line from init")
    if any(l.startswith("FAIL") for l in lines):
        errors.append("FAIL lines")
    if errors:
        sys.stdout.write(p.stdout[-6000:])
        sys.stdout.write(p.stderr[-2000:])
        print("run-linux: " + "; ".join(errors))
        return 1
    for l in lines:
        print(l)
    return 0


if __name__ == "__main__":
    sys.exit(main())
