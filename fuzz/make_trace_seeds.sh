#!/usr/bin/env bash
# make_trace_seeds.sh: regenerates fuzz/corpus/trace/ (trace_fuzz's seeds):
# small real recordings of the guest-tests images (pm32 and lm64, interrupts,
# a user-mode fault, filters, --max-records), one cut short and one with a
# damaged block, so that the fuzzer starts from every part of the format.
# Needs a built tree with /dev/kvm:  fuzz/make_trace_seeds.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build}
g=$b/guest-tests
out=fuzz/corpus/trace
mkdir -p "$out"
rec() {  # NAME IMAGE [OPTIONS...]
  local name=$1 img=$2
  shift 2
  "$b/vbts" record -o "$out/$name" "$@" "$g/$img" >/dev/null 2>&1 || true
  [ -s "$out/$name" ] || { echo "make_trace_seeds: $name was not written" >&2; exit 1; }
}
rec hello.vbtr hello.elf
rec int_pm32.vbtr int_pm32.elf
rec int_lm64.vbtr int_lm64.elf
rec user_fault_lm64.vbtr user_fault_lm64.elf
rec branchy_pm32_max100.vbtr branchy_pm32.elf --max-records 100
rec branchy_lm64_max100.vbtr branchy_lm64.elf --max-records 100
rec int_lm64_cpl3.vbtr int_lm64.elf --cpl 3
rec hello_range.vbtr hello.elf --range _start
rec user_fault_lm64_skylake.vbtr user_fault_lm64.elf --cpu skylake
# The header names the image by its absolute path on this machine; the seeds
# name it relative to the source tree instead (no machine's path in the
# project's files; the header CRC is recomputed, docs/trace-format.md).
python3 - "$out"/*.vbtr <<'PY'
import os, sys, zlib
for path in sys.argv[1:]:
    b = open(path, 'rb').read()
    n = int.from_bytes(b[12:16], 'little')
    fields, rest = b[16:16 + n], b[16 + n + 4:]
    out, i = bytearray(), 0
    while i < len(fields):
        tag, i = fields[i], i + 1
        length = shift = 0
        while True:
            c, i = fields[i], i + 1
            length |= (c & 0x7f) << shift
            shift += 7
            if not c & 0x80:
                break
        value, i = fields[i:i + length], i + length
        if tag == 1:
            value = ('guest-tests/' + os.path.basename(value.decode())).encode()
        out.append(tag)
        m = len(value)
        while True:
            out.append((m & 0x7f) | (0x80 if m > 0x7f else 0))
            m >>= 7
            if not m:
                break
        out += value
    head = b[:12] + len(out).to_bytes(4, 'little') + bytes(out)
    open(path, 'wb').write(head + zlib.crc32(head).to_bytes(4, 'little') + rest)
PY
# The same hello trace cut in its first block, and with one byte of its
# record block flipped (the reader's truncated and corrupt paths).
head -c 400 "$out/hello.vbtr" >"$out/hello_truncated.vbtr"
python3 - "$out/hello.vbtr" "$out/hello_corrupt.vbtr" <<'PY'
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
b[len(b) * 2 // 3] ^= 0x40
open(sys.argv[2], 'wb').write(bytes(b))
PY
ls -l "$out"
