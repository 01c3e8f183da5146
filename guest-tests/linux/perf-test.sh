#!/bin/sh
# perf-test.sh: the hardware-facing cases of Debian's own `perf test` (the
# perf tool's self-test suite, written by the kernel's perf developers, not
# by us) inside Debian's kernel under vbts: user-space counter reads (RDPMC
# through the mmap page), samples and their fields, the breakpoint and
# watchpoint tests on the debug registers, perf time to TSC, a breakpoint
# changed while armed. Each case's own verdict becomes a PASS or FAIL line (check.sh).
# Expected: "Ok" for each, except the read-only watchpoint, which x86 has no
# encoding for (SDM vol. 3B 17.2.4: DR7 R/W 00 execute, 01 write, 10 I/O,
# 11 read or write), so perf skips it with "missing hardware support".
# Run by init.c (`-- run /bin/sh /perf-test.sh`); status 0 all passed, 1 a
# failure, 77 no PMU (QEMU TCG). docs/compatibility.md has the whole suite.
export PATH=/usr/bin:/bin
cd /tmp || exit 1
. /check.sh

require_pmu
echo 0 > /proc/sys/kernel/perf_cpu_time_max_percent
# Cases by their description (their numbers change between perf versions).
# A fragment selects the cases and subcases whose own description holds it.
# "Sigtrap": a watchpoint that stays on while the test's threads run (a few
# seconds since the TCG engine reports the guest's data-breakpoint hits
# itself, ~1 min before: docs/compatibility.md).
# "Software clock events period values": cpu-clock and task-clock sampled at
# 500 Hz over a 10^7-iteration user loop; its samples come from hrtimer
# interrupts, so it fails when timer interrupts come late (until 2026-11-27,
# session 15, a timer armed during a TCG run fired up to 50 ms late: 0 samples).
out=$(perf test "mmap interface" "User space counter reading" "Test data source output" "PERF_RECORD_" \
        "Breakpoint overflow" "Breakpoint accounting" "Watchpoint" "TSC support" "perf time to TSC" \
        "x86 bp modify" "Sigtrap" "Software clock events" 2>&1 |
      sed 's/\x1b\[[0-9;]*m//g')
echo "$out"

result() {  # DESCRIPTION EXPECTED: the case's line must end in ": EXPECTED"
  line=$(echo "$out" | grep -m 1 -F ": $1")
  got=${line##*: }
  ok=0
  [ -n "$line" ] && [ "$got" = "$2" ] && ok=1
  check "$1" "$ok" "${got:-no such case}"
}

result "Read samples using the mmap interface" "Ok"
result "User space counter reading of instructions" "Ok"
result "User space counter reading of cycles" "Ok"
result "Test data source output" "Ok"
result "PERF_RECORD_* events & perf_sample fields" "Ok"
result "Breakpoint overflow signal handler" "Ok"
result "Breakpoint overflow sampling" "Ok"
result "Breakpoint accounting" "Ok"
result "Read Only Watchpoint" "Skip (missing hardware support)"
result "Write Only Watchpoint" "Ok"
result "Read / Write Watchpoint" "Ok"
result "Modify Watchpoint" "Ok"
result "TSC support" "Ok"
result "Perf time to TSC" "Ok"
result "x86 bp modify" "Ok"
result "Sigtrap" "Ok"
result "Software clock events period values" "Ok"
summary
