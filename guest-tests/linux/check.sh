# check.sh: what the guest scripts run by init.c (perf-tool.sh, iommu.sh) share:
# `require_pmu` ends the script with init's SKIP (77) where the kernel found
# no hardware PMU (QEMU's TCG); `check NAME OK DETAIL` prints a PASS line when OK is 1 and a FAIL line
# otherwise, counting them; `summary` prints the SUMMARY line and returns
# the verdict (0 all passed). Sourced as /check.sh.
passes=0
failures=0

require_pmu() {
  if [ ! -e /sys/bus/event_source/devices/cpu ]; then
    echo "SKIP: no hardware PMU under this kernel (/sys/bus/event_source/devices/cpu)"
    exit 77
  fi
}

check() {  # NAME OK DETAIL
  if [ "$2" = 1 ]; then
    echo "PASS: $1: $3"
    passes=$((passes + 1))
  else
    echo "FAIL: $1: $3"
    failures=$((failures + 1))
  fi
}

summary() {
  echo "SUMMARY: $passes passed, $failures failed"
  [ "$failures" = 0 ]
}
