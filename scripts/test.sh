#!/usr/bin/env bash
# test.sh: the whole test suite from a fresh machine: setup + build, then every
# ctest label (unit, kvm, guest, qemu, engines, kut); then, with no arguments, the same
# unit, kvm, guest, engines, gdb and linux tests built with AddressSanitizer + UndefinedBehaviorSanitizer
# (docs/security.md). Labels whose requirement is missing (no /dev/kvm, no shared
# kvm-unit-tests binaries) report their tests as skipped, never as passed.
# Arguments go to the first ctest run (e.g. -L unit) and skip the sanitizer run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Without arguments: everything but the label heavy (minutes each; `ctest -L heavy`).
if [ $# -eq 0 ]; then set -- -LE heavy; heavy_default=1; else heavy_default=0; fi
(cd build && ctest --output-on-failure -j2 --timeout 300 "$@")
if [ "$heavy_default" -eq 1 ]; then
  # A unity build at -O1 with line tables only (what sanitizer reports need):
  # about half the build time of a file-by-file -O2 -g build (docs/benchmarks.md).
  cmake -S . -B build-asan -DVBTS_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DVBTS_LINUX_DIR="$PWD/build/linux" >/dev/null
  cmake --build build-asan -j"$(nproc)"
  # The QEMU differential tests and the record/report scripts add nothing the
  # sanitizers can see that the guest images do not already exercise; of the
  # perf-tool runs of Debian's perf, one model (icelake-server: adaptive PEBS,
  # the LBR call stack, TSC-deadline mode) stands for the three, and for perf's own
  # `perf test` cases (linux.perf-test-*: the guest's debug registers, which the
  # guest images exercise under the sanitizers too) and its shell tests
  # (linux.perf-shell-*: LBR filters and branch events, which the unit tests
  # and the perf-tool runs cover); and linux.watchdog-skylake (3 G instructions
  # counted, 105 s under the sanitizers: the counting paths it runs are the
  # engine tests' and the perf-tool runs'); and the kallsyms tests (linux.kallsyms prints 2 MB
  # of symbols through COM1; the System.map parser and the ELF writer have their unit tests,
  # recordings and GDB the guest images').
  cd build-asan
  # Leaks inside libunicorn (not vbts's) are suppressed: scripts/lsan.supp.
  LSAN_OPTIONS="suppressions=$PWD/../scripts/lsan.supp" \
    ctest --output-on-failure -j2 --timeout 300 -L "unit|kvm|guest|engines|gdb|linux" \
      -E "^(diff|record|engines.record|linux.perf-qemu|linux.perf-tool-(westmere|skylake|qemu)|linux.perf-test|linux.perf-shell|linux.watchdog|linux.record-kallsyms|linux.kallsyms|gdb.linux-kallsyms|gdb.linux-bzimage)"
fi
