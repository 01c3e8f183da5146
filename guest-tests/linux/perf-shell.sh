#!/bin/sh
# perf-shell.sh: Debian perf's own shell tests (tests/shell of linux-perf,
# which `perf test` runs as its last cases; written by the kernel's perf
# developers, not by us) inside Debian's kernel under vbts, those that test
# what vbts emulates and run in this initramfs: the LBR's branch stack with
# its filters and branch types (test_brstack.sh, with the C compiler it
# builds its workload with), `perf stat` in its output modes and metrics,
# and `perf record` with register capture from PEBS and a compressed trace,
# and `perf mem`'s data addresses resolved to a symbol.
# Each script's status is checked against the status it has on a real CPU
# with this kernel (below); a PASS or FAIL line each (check.sh).
# Run by init.c (`-- run /bin/sh /perf-shell.sh [data_symbol]`); status 0 all as expected,
# 1 not, 77 no PMU (QEMU TCG). docs/compatibility.md lists the scripts left
# out and why.
export PATH=/usr/bin:/bin
cd /tmp || exit 1
. /check.sh

require_pmu
echo 0 > /proc/sys/kernel/perf_cpu_time_max_percent
dir=$(perf --exec-path)/tests/shell

# shell SCRIPT EXPECTED [WHY]: runs SCRIPT (its own interpreter), shows its
# last lines and checks its status (0 passed, 1 failed, 2 skipped).
shell() {
  "$1" > /tmp/shell.log 2>&1
  got=$?
  tail -n 20 /tmp/shell.log
  check "${1##*/}" "$([ "$got" = "$2" ] && echo 1)" "status $got (expected $2${3:+: $3})"
}

# test_brstack.sh: `perf record --branch-filter any,save_type,u` of a C
# program (main -> bench -> foo -> bar, direct and indirect calls), then the
# branch types of the LBR entries, and seven filter permutations (any_call,
# call, cond, any_ret and combinations): every entry must be of a kept type.
# One change: it splits `perf script`'s entries with `xargs -n1`, one echo
# process per entry (~4000 a run, eight runs); a process's start costs ~40 ms
# of guest time under TCG (QEMU's own TCG: 35 ms, 2026-11-27), 20 minutes in
# all, so `tr` splits them here, as xargs does (blanks), and sed drops empty
# items (sed, not grep -v: grep fails on no input, which the script's set -e
# would take for a failure; the filters of a model without some LBR classes
# leave no entries at all: `call` on westmere, as on that CPU, whose
# LBR_SELECT has no class for it).
sed "s/| xargs -n1 >/| tr -s '[:blank:]' '\\\\n' | sed '\/^\$\/d' >/" "$dir/test_brstack.sh" > /tmp/test_brstack.sh
chmod +x /tmp/test_brstack.sh
grep -q "| xargs" /tmp/test_brstack.sh && echo "perf-shell.sh: test_brstack.sh still uses xargs"
shell /tmp/test_brstack.sh 0

# record.sh: its per-thread test records `true` with instructions:u at the
# default frequency (4000 Hz) and expects a sample. Linux 6.1 as Debian
# builds it (6.1.192) does not start a frequency event at a period of 1: it
# wrote -124999 to IA32_FIXED_CTR0 at -F 4000 (-499999 at -F 1000, 2026-11-27),
# and `true` retires fewer user instructions than that, so there is no sample
# on any CPU and the test fails ("Per-thread record [Failed missing
# output]"). Both numbers come from the running kernel here: the first
# sample's period of a long loop at -F 4000, and `true`'s count. Its
# register-capture test (br_inst_retired.near_call:p, PEBS, with DI, R8, DX,
# CX in the samples) must succeed.
perf record -q -e instructions:u -o /tmp/first.data -- /init loop 1000000 > /dev/null 2>&1
first=$(perf report -D -i /tmp/first.data 2>/dev/null | grep -m 1 "PERF_RECORD_SAMPLE" | sed 's/.* period: \([0-9]*\).*/\1/')
n=$(perf stat -x, -e instructions:u true 2>&1 >/dev/null | cut -d, -f1)
if [ "$n" -lt "${first:-1}" ]; then want=1; else want=0; fi
shell "$dir/record.sh" "$want" "true retires $n user instructions, the kernel's first period at -F 4000 is $first"
check "record.sh register capture" "$(grep -q "Register capture test \[Success\]" /tmp/shell.log && echo 1)" \
  "$(grep "Register capture test " /tmp/shell.log | tail -n 1)"

# stat.sh (stat, stat record/report, weak groups; its topdown cases skip:
# Skylake has no topdown events), stat+shadow_stat.sh (IPC from cycles and
# instructions, system-wide and per CPU), stat+csv_summary.sh,
# stat+csv_output.sh (CSV output of every aggregation mode, bash),
# record+zstd_comp_decomp.sh (a compressed call-graph trace of dd).
shell "$dir/stat.sh" 0
shell "$dir/stat+shadow_stat.sh" 0
shell "$dir/stat+csv_summary.sh" 0
shell "$dir/stat+csv_output.sh" 0
shell "$dir/record+zstd_comp_decomp.sh" 0

# test_data_symbol.sh: `perf mem record --all-user` (mem-loads with PEBS at
# perf's load-latency threshold of 30, and mem-stores) of a compiled loop that
# increments buf1.data1 and adds it to buf1.data2 (offsets 0 and 0x38 of a
# 64-byte aligned struct), started in the background and killed after
# `sleep 1`; every sample's data address must be buf1+0x0 or buf1+0x38. The
# samples come from mem-stores (MEM_INST_RETIRED.ALL_STORES with PEBS: each
# store's address); the loop's loads hit the L1D, 4 cycles in the model, below
# the threshold. One guest second is ~1 G instructions while counters count
# (the guest's time is on instructions then, docs/tcg-engine.md, "Guest
# time"), which the load-latency event's one hook a block makes ~30 s here.
# Westmere has no mem-stores event in Linux ("event 'cpu/mem-stores/P' not
# supported"): perf records nothing and the script fails, as on that CPU.
# Only when asked (`/perf-shell.sh data_symbol`: run-linux.py
# --perf-shell-data-symbol, the runs labelled heavy).
if [ "$1" = data_symbol ]; then
  if [ -e /sys/bus/event_source/devices/cpu/events/mem-stores ]; then
    shell "$dir/test_data_symbol.sh" 0
  else
    shell "$dir/test_data_symbol.sh" 1 "no mem-stores event on this CPU"
  fi
fi
summary
