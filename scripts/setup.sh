#!/usr/bin/env bash
# setup.sh: install vbts's build and test dependencies (Debian 12 packages only)
# and build vbts into ./build. Idempotent: packages already present are skipped.
# Usage: scripts/setup.sh            (needs root or sudo for apt-get)
set -euo pipefail
cd "$(dirname "$0")/.."

# Why each package is here: docs/dependencies.md.
packages=(
  build-essential cmake pkg-config
  linux-libc-dev        # <linux/kvm.h>
  libabsl-dev           # Status/StatusOr, StrFormat, Span, flat_hash_map
  libcli11-dev          # command-line parsing
  googletest libgtest-dev libgmock-dev
  libbenchmark-dev      # micro-benchmarks
  libzydis-dev          # x86 instruction decoder
  libunicorn-dev        # QEMU's TCG as a library: the TCG engine (vcpu/tcg_cpu.h)
  nasm binutils         # guest images (nasm + ld -m elf_i386)
  qemu-system-x86       # reference monitor for the guest-image suite (label qemu)
  libssl-dev            # SHA-256 of the image in vbts record's trace header (libcrypto)
  zlib1g-dev            # CRC-32 of trace file blocks
  python3               # differential and record/report tests (scripts/*.py)
  graphviz              # record.* tests: `dot` must accept vbts report --format=dot
  clang libclang-rt-14-dev  # scripts/fuzz.sh: libFuzzer targets (fuzz/), with ASan/UBSan
  libseccomp-dev        # the syscall filter vbts runs under after setup (vmm/sandbox.h)
  gdb                   # gdb.* tests: Debian's gdb against vbts's gdbstub (docs/gdb.md)
  lz4 xz-utils zstd     # linux.* tests: scripts/fetch-linux.sh unpacks Debian's kernel
  linux-perf            # linux.perf-tool-* tests: Debian's perf tool inside Debian's kernel
  bc                    # linux.perf-shell-skylake: perf's stat+shadow_stat.sh computes with it
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built build/vbts"
# Debian's kernel for the linux.* tests (not installed: unpacked into build/linux).
scripts/fetch-linux.sh build/linux || echo "setup: no Debian kernel (linux.* tests will be skipped)" >&2
