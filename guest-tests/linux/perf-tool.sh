#!/bin/sh
# perf-tool.sh: Debian's own `perf` tool (linux-perf, the kernel's version) inside
# Debian's kernel under vbts, on what vbts emulates: `perf stat`, `perf record -e
# intel_bts//u`, `perf record -e branches:u -c 1` (the kernel's other BTS path),
# `perf record -b`, `perf record -e instructions:upp` and `perf record
# --call-graph lbr`, each read back with
# `perf script` and checked exactly. Run by init.c (`-- run /bin/sh
# /perf-tool.sh` on the kernel command line), whose verdict is this script's
# status: 0 all passed, 1 a failure, 77 no PMU (QEMU TCG).
#
# The workload is `/init loop N` (init.c): a call to tool_loop, N iterations
# of `dec rcx; jnz tool_loop_head`, its return. Everything else the process
# runs (exec, static glibc's start-up and exit) differs in length between
# C libraries, so each check looks only at the loop, or at a difference.
export PATH=/usr/bin:/bin
cd /tmp || exit 1
. /check.sh

require_pmu
read -r release < /proc/sys/kernel/osrelease
read -r pmu < /sys/bus/event_source/devices/cpu/caps/pmu_name
echo "$(perf --version) on Linux $release"
# Linux lowers perf_event_max_sample_rate when a PMI handler takes long (the
# drain of ~3000 BTS records below takes ~90 us of guest time) and then
# throttles sampling events to a few samples per tick: the LBR check would
# see 6 of its 20. 0 turns that adjustment off (Documentation/admin-guide/sysctl/kernel.rst).
echo 0 > /proc/sys/kernel/perf_cpu_time_max_percent
# Address-space randomisation off: with it, glibc's start-up in the static
# /init runs 16 instructions more for some placements of its stack (6 of
# ~200 runs with it, 0 of 117 without, 2026-11-26), so two processes' counts
# could differ by more than their loops, on any CPU.
echo 0 > /proc/sys/kernel/randomize_va_space
set -- $(/init where)
head_ip=$1 jnz_ip=$2 ret_ip=$3 sweep_ip=$4

# The machine's SMBIOS tables (docs/guest-abi.md, "SMBIOS"), as Linux's
# dmi_scan found them at boot (before them: "DMI not present or invalid").
read -r vendor < /sys/class/dmi/id/sys_vendor
read -r product < /sys/class/dmi/id/product_name
read -r bios < /sys/class/dmi/id/bios_vendor
check "DMI" "$([ "$vendor" = vbts ] && [ "$product" = "vbts virtual PC" ] && [ "$bios" = vbts ] && echo 1)" \
  "sys_vendor '$vendor', product_name '$product', bios_vendor '$bios' (expected vbts, vbts virtual PC, vbts)"

# perf stat: instructions:u of the whole process at 1000 and 2000 iterations.
# Both runs execute the same instructions outside the loop (the arguments
# have the same length), so the counts differ by exactly 1000 iterations of
# two instructions.
c1=$(perf stat -x, -e instructions:u -- /init loop 1000 2>&1 >/dev/null | grep instructions | cut -d, -f1)
c2=$(perf stat -x, -e instructions:u -- /init loop 2000 2>&1 >/dev/null | grep instructions | cut -d, -f1)
d=$((c2 - c1))
check "perf stat" "$([ "$d" = 2000 ] && echo 1)" \
  "instructions:u $c1 at 1000 iterations, $c2 at 2000: difference $d (expected 2000)"

# perf stat -e L1-dcache-loads:u,L1-dcache-stores:u (the retired-load and
# -store events, docs/pmu-model.md) of `/init mem N` at 1000 and 2000: each
# iteration of mem_loop has one instruction that stores and one that loads,
# so both counts differ by exactly 1000.
m1=$(perf stat -x, -e L1-dcache-loads:u,L1-dcache-stores:u -- /init mem 1000 2>&1 >/dev/null | cut -d, -f1 | tr '\n' ' ')
m2=$(perf stat -x, -e L1-dcache-loads:u,L1-dcache-stores:u -- /init mem 2000 2>&1 >/dev/null | cut -d, -f1 | tr '\n' ' ')
set -- $m1 $m2
check "perf stat L1-dcache" "$([ $(($3 - $1)) = 1000 ] && [ $(($4 - $2)) = 1000 ] && echo 1)" \
  "loads:u $1 / $3, stores:u $2 / $4 at 1000 / 2000 iterations (expected differences 1000 and 1000)"

# perf stat of BR_INST_RETIRED's umasks (docs/pmu-model.md, "Branch events")
# by their names in perf's event list for the model, at most four at once (no
# multiplexing), of `/init calls N` at 1000 and 2000: each more iteration adds
# one near call, one near return, two conditional branches (a JZ not taken, a
# JNZ taken), three taken near branches (CALL, RET, JNZ), four branches in all.
case $pmu in
  westmere) expect="near_call:1000 conditional:2000 all_branches:4000" ;;
  skylake) expect="near_call:1000 near_return:1000 not_taken:1000 near_taken:3000" ;;
  *) expect="near_call:1000 near_return:1000 cond:2000 cond_taken:1000" ;;
esac
events=""
for e in $expect; do events="$events${events:+,}br_inst_retired.${e%%:*}:u"; done
b1=$(perf stat -x, -e "$events" -- /init calls 1000 2>&1 >/dev/null | cut -d, -f1 | tr '\n' ' ')
b2=$(perf stat -x, -e "$events" -- /init calls 2000 2>&1 >/dev/null | cut -d, -f1 | tr '\n' ' ')
ok=1 detail=""
for e in $expect; do
  set -- $b1; c1=$1; b1=${b1#* }
  set -- $b2; c2=$1; b2=${b2#* }
  d=$((c2 - c1))
  [ "$d" = "${e#*:}" ] || ok=0
  detail="$detail${e%%:*} $c1 / $c2 (difference $d, expected ${e#*:}); "
done
check "perf stat br_inst_retired" "$ok" "$pmu: $detail"

# perf stat -e task-clock,ref-cycles: the process's time and its reference
# cycles run on one clock, the TSC's (SDM vol. 3B 18.2.1: unhalted reference
# cycles count at the TSC's rate; docs/tcg-engine.md, "Guest time"), so
# reference cycles per task-clock nanosecond is the TSC frequency Linux
# reports as "cpu MHz", within 20 % (the counters and the task clock start
# and stop a few instructions apart). Before 2026-11-26 (session 7) host time
# leaked into the process whenever perf switched its counters: 158-419 MHz
# on a 2100 MHz TSC.
mhz=$(grep -m1 "cpu MHz" /proc/cpuinfo | cut -d: -f2 | cut -d. -f1 | tr -d ' ')
set -- $(perf stat -x, -e task-clock,ref-cycles -- /init loop 1000000 2>&1 >/dev/null | cut -d, -f1,4 | tr ',\n' '  ')
task_ns=$2 refs=$3
rate=$((refs * 1000 / (task_ns > 0 ? task_ns : 1)))
check "perf stat task-clock" "$([ $((rate * 10)) -ge $((mhz * 8)) ] && [ $((rate * 10)) -le $((mhz * 12)) ] && echo 1)" \
  "ref-cycles $refs in a task-clock of $task_ns ns: $rate MHz (TSC $mhz MHz; expected within 20 %)"

# perf mem (docs/pmu-model.md, "Load latency and data source"): `/init sweep`
# loads 16384 lines 128 bytes apart that the model's L3 holds and its L1D and
# L2 do not (init.c): 16384 loads of 44 cycles, above perf mem's threshold of
# 30 (mem-loads,ldlat=30). With a period of 127 a record comes every 128
# events (the counter wraps; the next event makes the record: the next-event
# rule, as for instructions:upp below), so exactly 16384 / 128 = 128 samples
# at that load wherever the periods start, each with the data source "L3 hit"
# and weight 44; 128 records stay below the buffer's threshold, so no PMI (and
# no reprogramming of the counter) falls in the loop. --all-user: the kernel's
# loads would otherwise count too, wherever an interrupt falls.
perf mem record -t load -c 127 --all-user -o ld.data -- /init sweep >/dev/null 2>&1
perf script -i ld.data -F ip,data_src,weight > ld.txt 2>/dev/null
at=$(grep -c " $sweep_ip$" ld.txt)
l3=$(grep -c "|LVL L3 or L3 hit|.* 44 *$sweep_ip$" ld.txt)
check "perf mem loads" "$([ "$at/$l3" = 128/128 ] && echo 1)" \
  "$(wc -l < ld.txt) samples, $at at the sweep's load, $l3 of them L3 hits of weight 44 (expected 128 and 128)"

# perf record -e LLC-loads:u,LLC-load-misses:u: OFFCORE_RESPONSE with Linux's
# demand-read masks in MSR_OFFCORE_RSP_0/1 (docs/pmu-model.md, "Offcore
# responses"). The loop of `/init sweep` makes 16384 loads that miss the L2
# and hit the L3 (init.c): with a period of 128 exactly 128 LLC-loads samples
# fall in sweep_load wherever the periods start (each PMI comes right after
# its load, at the next instruction, still in sweep_load, and resets the
# period; the kernel's accesses are not counted, :u), and no LLC-load-misses
# sample. (Counts of the whole process are not exact:
# the kernel's work at exec and exit, which the model's caches see too,
# moves a few of the start-up's lines between levels from run to run.)
perf record -q -e LLC-loads:u,LLC-load-misses:u -c 128 -o llc.data -- /init sweep >/dev/null 2>&1
perf script -i llc.data -F event,ip,sym > llc.txt 2>/dev/null
loads=$(grep "LLC-loads:" llc.txt | grep -c " sweep_load")
misses=$(grep "LLC-load-misses:" llc.txt | grep -c " sweep_load")
check "perf record LLC-loads" "$([ "$loads/$misses" = 128/0 ] && echo 1)" \
  "$(wc -l < llc.txt) samples; in sweep_load $loads LLC-loads, $misses LLC-load-misses (expected 128 and 0)"

# perf mem stores: MEM_INST_RETIRED.ALL_STORES with PEBS (Skylake on; Linux has
# no mem-stores event on Westmere): the record's data-source bit 0 says the
# store hit the L1D. mem_loop's 1000 stores go to one red-zone slot, in the
# L1D from the first on: with a period of 99, exactly 10 samples there, all
# "L1 hit".
if [ "$pmu" = westmere ]; then
  check "perf mem stores" "$([ ! -e /sys/bus/event_source/devices/cpu/events/mem-stores ] && echo 1)" \
    "$pmu: no mem-stores event (expected: Linux has none for Nehalem and Westmere)"
else
  perf mem record -t store -c 99 --all-user -o st.data -- /init mem 1000 >/dev/null 2>&1
  perf script -i st.data -F ip,sym,data_src > st.txt 2>/dev/null
  at=$(grep -c "mem_loop" st.txt)
  hit=$(grep -c "|OP STORE|LVL L1 hit|.*mem_loop" st.txt)
  check "perf mem stores" "$([ "$at/$hit" = 10/10 ] && echo 1)" \
    "$(wc -l < st.txt) samples, $at in mem_loop, $hit of them L1 hits (expected 10 and 10)"
fi

# perf record -e intel_bts//u: the BTS records of the process in perf's AUX
# area (`--per-thread`: intel_bts traces tasks, not CPUs). The loop's jnz is
# taken N - 1 = 999 times; one call enters the loop, one return leaves it.
perf record -q -e intel_bts//u --per-thread -o bts.data -- /init loop 1000 >/dev/null 2>&1
perf script -i bts.data --itrace=b -F ip,sym,addr > bts.txt 2>/dev/null
loop=$(grep -c "tool_loop_jnz => *$head_ip tool_loop_head$" bts.txt)
into=$(grep -c "main => *[0-9a-f]* tool_loop$" bts.txt)
out=$(grep -c "tool_loop_ret => *[0-9a-f]* main$" bts.txt)
check "intel_bts" "$([ "$loop/$into/$out" = 999/1/1 ] && echo 1)" \
  "$(wc -l < bts.txt) branches; jnz->head $loop, call $into, return $out (expected 999, 1, 1)"

# perf record -e branches:u -c 1: a sample per taken branch, which Linux
# takes from its own DS BTS buffer, drained at the buffer's threshold PMI
# and when the event stops (arch/x86/events/intel/ds.c). Each sample's IP
# is a branch's source: the loop's jnz 999 times.
perf record -q -e branches:u -c 1 -o br.data -- /init loop 1000 >/dev/null 2>&1
jnz=$(perf script -i br.data -F ip 2>/dev/null | grep -c "^ *$jnz_ip$")
check "branches -c 1" "$([ "$jnz" = 999 ] && echo 1)" "$jnz samples at the loop's jnz (expected 999)"

# perf record -b: instructions:u every 10 000 with the LBR stack. The loop
# runs 200 000 instructions, exactly 20 periods, so exactly 20 PMIs fall in
# it wherever the periods start; the counter overflows at the same one of the
# loop's two instructions each time (the period is even). Each sample's
# stack is full (the model's depth: 16 or 32) and, once the loop has run as
# many iterations, holds nothing but jnz -> head: all but possibly the first
# sample, which may come within its first iterations.
perf record -q -b -e instructions:u -c 10000 -o lbr.data -- /init loop 100000 >/dev/null 2>&1
# `-F ip,brstack` prints the IP, then each entry as 0xFROM/0xTO/flags.
perf script -i lbr.data -F ip,brstack > lbr.txt 2>/dev/null
grep "^ *\($head_ip\|$jnz_ip\) " lbr.txt | tr ' ' '\n' | grep / > lbr-entries.txt
in_loop=$(grep -c "^ *\($head_ip\|$jnz_ip\) " lbr.txt)
read -r depth < /sys/bus/event_source/devices/cpu/caps/branches
entries=$(wc -l < lbr-entries.txt)
full=$(grep -c "^0x$jnz_ip/0x$head_ip/" lbr-entries.txt)
check "perf record -b" "$([ "$in_loop" = 20 ] && [ "$entries" = $((20 * depth)) ] && [ "$full" -ge $((19 * depth)) ] && echo 1)" \
  "$in_loop samples in the loop (expected 20) with $entries LBR entries ($depth-deep stack: expected $((20 * depth))), $full of them jnz->head (expected at least $((19 * depth)))"

# perf record -e instructions:upp, period 9 999: PEBS. An overflow arms
# PEBS and the next counted instruction causes the assist (SDM 18.6.1.1;
# docs/pmu-model.md, "the next-event rule"), so assists come every 10 000
# instructions: 200 000 / 10 000 = exactly 20 in the loop, all at the same
# one of its two instructions (the step is even).
perf record -q -e instructions:upp -c 9999 -o pebs.data -- /init loop 100000 >/dev/null 2>&1
perf script -i pebs.data -F ip > pebs.txt 2>/dev/null
head=$(grep -c "^ *$head_ip$" pebs.txt)
jnz=$(grep -c "^ *$jnz_ip$" pebs.txt)
check "instructions:upp" "$([ "$head/$jnz" = 20/0 ] || [ "$head/$jnz" = 0/20 ] && echo 1)" \
  "$(wc -l < pebs.txt) samples; $head at the loop's dec, $jnz at its jnz (expected 20 at one of them)"

# perf record --call-graph lbr: the LBR call stack (Haswell and later, SDM
# 17.9: a call pushes, a return pops). `/init chain N` runs main ->
# chain_outer -> chain_inner -> tool_loop, so each of the 20 samples in the
# loop (as for -b above) has the call chain tool_loop, chain_inner,
# chain_outer, main, and then glibc's start-up frames. Westmere has no call
# stack: the kernel refuses the event (arch/x86/events/intel/lbr.c).
if perf record -q --call-graph lbr -e instructions:u -c 10000 -o cs.data -- /init chain 100000 > cs.err 2>&1; then
  # One line per sample: its frames joined by "|".
  perf script -i cs.data -F ip,sym 2>/dev/null | tr -s ' \t' '  ' | tr '\n' '|' | sed 's/|||*/\n/g' > cs.txt
  in_loop=$(grep -c "^ [0-9a-f]* tool_loop" cs.txt)
  chains=$(grep -c "^ [0-9a-f]* tool_loop[_a-z]*| [0-9a-f]* chain_inner| [0-9a-f]* chain_outer| [0-9a-f]* main|" cs.txt)
  check "call-graph lbr" "$([ "$pmu" != westmere ] && [ "$in_loop" = 20 ] && [ "$chains" = 20 ] && echo 1)" \
    "$pmu: $in_loop samples in the loop (expected 20), $chains with the chain tool_loop, chain_inner, chain_outer, main (expected 20)"
else
  check "call-graph lbr" "$([ "$pmu" = westmere ] && grep -q "support branch stack sampling" cs.err && echo 1)" \
    "$pmu: perf record refused: $(grep -v "^ *$" cs.err | tr '\n' ' ')(expected only on westmere)"
fi

summary
