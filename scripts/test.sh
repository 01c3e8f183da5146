#!/usr/bin/env bash
# test.sh: the whole test suite from a fresh machine: setup + build, then every
# ctest label (unit, kvm, guest, qemu). Labels whose requirement is missing
# (no /dev/kvm) report their tests as skipped, never as passed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
ctest --output-on-failure -j2 --timeout 300 "$@"
