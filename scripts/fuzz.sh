#!/usr/bin/env bash
# fuzz.sh: build the libFuzzer targets (clang, ASan+UBSan) in build-fuzz/ and run
# each for SECONDS (default 60) from its seed corpus in fuzz/corpus/TARGET
# (TARGET without _fuzz; new inputs go to build-fuzz/corpus/TARGET; crashes to
# build-fuzz/crash-TARGET-*).
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#   targets (default: all): loader_fuzz boot_fuzz gdb_packet_fuzz trace_fuzz vpmu_fuzz completer_fuzz pci_fuzz hpet_fuzz
#   symbols_fuzz
# The normal build replays every seed once instead (ctest -R '^fuzz\.', label
# unit; fuzz/replay_main.cc). Seeds: fuzz/make_seeds.py, fuzz/make_trace_seeds.sh.
# Exit status: 0 if no target found a crash. See docs/security.md.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(loader_fuzz boot_fuzz gdb_packet_fuzz trace_fuzz vpmu_fuzz completer_fuzz pci_fuzz hpet_fuzz symbols_fuzz)
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DVBTS_FUZZ=ON -DVBTS_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"
for t in "${targets[@]}"; do
  seeds=fuzz/corpus/${t%_fuzz}
  work=build-fuzz/corpus/${t%_fuzz}
  mkdir -p "$work"
  echo "fuzz: $t for ${secs}s (seeds $seeds)"
  build-fuzz/fuzz/$t -max_total_time="$secs" -artifact_prefix=build-fuzz/crash-$t- -print_final_stats=1 "$work" "$seeds"
done
