#!/bin/sh
# watchdog.sh: Linux's hard-lockup detector, the NMI watchdog a stock kernel
# turns on, on vbts's virtual PMU. run-linux.py --watchdog boots without
# nmi_watchdog=0 and with watchdog_thresh=1: the detector keeps one counter
# counting unhalted core cycles in every ring, with a period of one second of
# the CPU's clock, cpu_khz * 1000 * watchdog_thresh (hw_nmi_get_sample_period,
# arch/x86/kernel/apic/hw_nmi.c): 2 596 000 000 on the skylake model, whose
# TSC the kernel finds at 2596 MHz. Its overflow is an NMI through the LAPIC's
# performance-counter LVT, which /proc/interrupts counts on the NMI line.
# Run by init.c (`-- run /bin/sh /watchdog.sh`), whose verdict is this
# script's status.
export PATH=/usr/bin:/bin
. /check.sh
require_pmu

nmis() {
  set -- $(grep "^ *NMI:" /proc/interrupts)
  echo "$2"
}

on=$(cat /proc/sys/kernel/nmi_watchdog)
check "watchdog on" "$([ "$on" = 1 ] && echo 1)" "/proc/sys/kernel/nmi_watchdog = $on (expected 1)"

# 1.5 G iterations of dec/jnz: 3.0 G instructions, and as many cycles at
# least (the model's core cycles advance by one per instruction while
# counted, more where its caches miss): more than one period and less than
# two, so the counter overflows once or twice in the loop, wherever it stood
# when the loop began.
n0=$(nmis)
/init loop 1500000000
n1=$(nmis)
d=$((n1 - n0))
check "watchdog NMI" "$([ "$d" -ge 1 ] && [ "$d" -le 2 ] && echo 1)" \
  "$d NMIs over 3 G instructions ($n0 before, $n1 after; expected 1 or 2 at a period of 2 596 000 000 cycles)"

# perf stat beside it (the watchdog holds a general-purpose counter; the
# instructions event a fixed one): the difference of instructions:u between
# 1000 and 2000 iterations of the loop is exactly 2000, with address-space
# randomisation off as in perf-tool.sh: with it on, glibc's start-up takes 16
# more instructions for some placements of the stack, on any CPU (about one
# run in 13-30, with the watchdog and without; docs/compatibility.md, "Debian's
# perf tool in the guest").
echo 0 > /proc/sys/kernel/randomize_va_space
c1=$(perf stat -x, -e instructions:u -- /init loop 1000 2>&1 >/dev/null | grep instructions | cut -d, -f1)
c2=$(perf stat -x, -e instructions:u -- /init loop 2000 2>&1 >/dev/null | grep instructions | cut -d, -f1)
check "perf stat beside the watchdog" "$([ $((c2 - c1)) = 2000 ] && echo 1)" \
  "instructions:u $c1 at 1000 iterations, $c2 at 2000 (expected a difference of 2000)"
summary
