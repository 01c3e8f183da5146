#!/usr/bin/env python3
"""Differential test of vbts's tracer against QEMU TCG.

Runs IMAGE under QEMU TCG with one instruction per translation block and
`-d exec,nochain` (QEMU logs the linear address of every block it executes,
i.e. of every instruction), and under `vbts run --insns=F --branches=F`, then
compares the two executed-instruction streams from the image's entry point to
its exit, and checks that every transfer vbts reports joins two consecutive
instructions of that stream.  Exit status 0 when they agree, 1 with the first
difference and context otherwise, 77 when QEMU is missing.

With --record, the image is instead recorded with `vbts record` and the
transfers of `vbts report --format=branches` are checked against QEMU's
stream itself: QEMU also logs each instruction's bytes (`-d in_asm`), so
every step of its stream where the next address is not the previous
instruction's address plus its length is a taken transfer, and the recorded
transfers must be exactly those, in order, with the same source and target
(rules below), plus transfers whose target happens to be the fall-through
(`call $+5`).

Rules (docs/tracing.md):
 - Consecutive repeats of one address are collapsed on both sides (QEMU logs
   each iteration of a REP string instruction; vbts reports it once).
 - An instruction that faults is logged by QEMU (the block started) but does
   not retire, so vbts does not list it; the QEMU entry is skipped when vbts
   reports an exception delivery from exactly that address there.
 - --record: an event delivery (exception, interrupt, nmi) matches QEMU's
   step a -> b when its target is b and its source is a (a fault at a) or
   the instruction after a (taken after a retired); an instruction that
   branched to X and was then interrupted before X appears in QEMU as one
   step a -> handler and matches the two records a -> X, X -> handler.
"""
import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

from qemu_log import image_log_ranges

TRACE = re.compile(r"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")
IN_ASM = re.compile(r"^0x([0-9a-f]+):  ((?:[0-9a-f]{2}(?: |$))+)")
EVENTS = ("exception", "interrupt", "nmi")


def elf_entry(path):
    with open(path, "rb") as f:
        h = f.read(32)
    if h[:4] != b"\x7fELF" or h[4] != 1:
        sys.exit(f"{path}: not an ELF32 image (the differential test needs e_entry)")
    return struct.unpack_from("<I", h, 24)[0]


def collapse(seq):
    out = []
    for x in seq:
        if not out or out[-1] != x:
            out.append(x)
    return out


def qemu_stream(image, entry, timeout, lengths=False):
    """QEMU's executed linear addresses from `entry` on; with `lengths`, a
    list of (address, instruction length) instead."""
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "exec.log")
        # Only the image's own addresses are logged (qemu_log.image_log_ranges).
        cmd = ["qemu-system-x86_64", "-accel", "tcg", "-singlestep", "-d",
               "in_asm,exec,nochain" if lengths else "exec,nochain",
               "-dfilter", image_log_ranges(image), "-D", log,
               "-kernel", image, "-device", "isa-debug-exit,iobase=0xf4,iosize=4", "-serial", "null",
               "-display", "none", "-no-reboot", "-m", "128"]
        p = subprocess.run(cmd, timeout=timeout, capture_output=True)
        pcs = []
        started = False
        length = {}  # address -> length of the instruction QEMU last translated there
        block = None  # address of the one instruction of the block being listed
        with open(log) as f:
            for line in f:
                if lengths and line.startswith("IN:"):
                    block = None
                    continue
                if lengths and line.startswith("0x"):
                    # One instruction per block (-singlestep); the disassembler
                    # continues long byte sequences on further "0x..." lines.
                    m = IN_ASM.match(line.rstrip("\n"))
                    if m:
                        n = len(m.group(2).split())
                        if block is None:
                            block = int(m.group(1), 16)
                            length[block] = n
                        else:
                            length[block] += n
                    continue
                m = TRACE.match(line)
                if not m:
                    continue
                pc = int(m.group(1), 16)
                if not started:
                    if pc != entry:
                        continue
                    started = True
                pcs.append((pc, length.get(pc, 0)) if lengths else pc)
        return pcs, p.returncode


def vbts_streams(vbts, image, args, timeout):
    with tempfile.TemporaryDirectory() as d:
        insns, branches = os.path.join(d, "insns"), os.path.join(d, "branches")
        p = subprocess.run([vbts, "run", f"--insns={insns}", f"--branches={branches}", *args, image],
                           timeout=timeout, capture_output=True)
        stream = []  # ("i", addr) or ("e", from, to)
        with open(insns) as f:
            for line in f:
                stream.append(int(line, 16))
        transfers = []
        with open(branches) as f:
            for line in f:
                a, b, kind = line.split()
                transfers.append((int(a, 16), int(b, 16), kind))
        return stream, transfers, p.returncode, p.stderr.decode(errors="replace")


def recorded_transfers(vbts, image, args, timeout):
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "t.vbtr")
        p = subprocess.run([vbts, "record", "-o", trace, *args, image], timeout=timeout, capture_output=True)
        r = subprocess.run([vbts, "report", "--format=branches", trace], timeout=timeout, capture_output=True)
        if r.returncode != 0:
            sys.exit(f"FAIL: vbts report exited {r.returncode}: {r.stderr.decode(errors='replace')}")
        transfers = []
        for line in r.stdout.decode().splitlines():
            a, b, kind = line.split()
            transfers.append((int(a, 16), int(b, 16), kind))
        return transfers, p.returncode, p.stderr.decode(errors="replace")


def check_recording(q, transfers, verr):
    """Recorded transfers against QEMU's (address, length) stream."""
    if "tracer:" in verr:
        print("FAIL: the tracer could not explain part of the run:\n  " + verr.strip().replace("\n", "\n  "))
        return 1
    steps = []  # collapsed: QEMU logs every iteration of a REP instruction
    for pc, n in q:
        if not steps or steps[-1][0] != pc:
            steps.append((pc, n))
    i = j = 0
    taken_steps = 0
    while i + 1 < len(steps):
        (a, la), b = steps[i], steps[i + 1][0]
        taken = la == 0 or b != a + la
        taken_steps += taken
        if j < len(transfers):
            f, t, k = transfers[j]
            ev = k in EVENTS
            if (not ev and f == a and t == b) or (ev and t == b and f in (a, a + la)):
                i, j = i + 1, j + 1
                continue
            if (not ev and f == a and j + 1 < len(transfers) and transfers[j + 1][2] in EVENTS
                    and transfers[j + 1][0] == t and transfers[j + 1][1] == b):
                i, j = i + 1, j + 2
                continue
        if taken:
            print(f"FAIL: QEMU step {i}: 0x{a:x} (length {la}) -> 0x{b:x} is a transfer, "
                  f"recorded transfer {j} is {fmt(transfers[j]) if j < len(transfers) else 'missing'}")
            print("  QEMU next:     " + " ".join(f"0x{x:x}" for x, _ in steps[i:i + 8]))
            print("  recorded next: " + "; ".join(fmt(x) for x in transfers[j:j + 4]))
            return 1
        i += 1
    if j != len(transfers):
        print(f"FAIL: {len(transfers) - j} recorded transfers after QEMU's stream ended, first {fmt(transfers[j])}")
        return 1
    print(f"PASS: {len(transfers)} recorded transfers match QEMU TCG's stream of {len(steps)} instructions "
          f"({taken_steps} taken steps)")
    return 0


def fmt(t):
    return f"0x{t[0]:x} -> 0x{t[1]:x} {t[2]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vbts", default="build/vbts")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--vbts-arg", action="append", default=[])
    ap.add_argument("--record", action="store_true",
                    help="check `vbts record` + `vbts report --format=branches` against QEMU's stream")
    ap.add_argument("image")
    a = ap.parse_args()
    if not shutil.which("qemu-system-x86_64"):
        print("SKIP: qemu-system-x86_64 not installed")
        return 77
    entry = elf_entry(a.image)
    if a.record:
        q, _ = qemu_stream(a.image, entry, a.timeout, lengths=True)
        if not q:
            print(f"FAIL: QEMU never reached the entry point 0x{entry:x}")
            return 1
        transfers, _, verr = recorded_transfers(a.vbts, a.image, a.vbts_arg, a.timeout)
        return check_recording(q, transfers, verr)
    q, qrc = qemu_stream(a.image, entry, a.timeout)
    v, transfers, vrc, verr = vbts_streams(a.vbts, a.image, a.vbts_arg, a.timeout)
    if not q:
        print(f"FAIL: QEMU never reached the entry point 0x{entry:x}")
        return 1
    if "tracer:" in verr:
        print("FAIL: the tracer could not explain part of the run:\n  " + verr.strip().replace("\n", "\n  "))
        return 1
    faults = {(f, t) for f, t, k in transfers if k == "exception"}
    fault_from = {f for f, _ in faults}
    q, v = collapse(q), collapse(v)
    i = j = 0
    skipped = 0
    while i < len(q) and j < len(v):
        if q[i] == v[j]:
            i += 1
            j += 1
            continue
        if q[i] in fault_from:  # QEMU logged a faulting instruction that did not retire
            i += 1
            skipped += 1
            continue
        lo = max(0, j - 8)
        print(f"FAIL: streams differ at instruction {j}: QEMU 0x{q[i]:x}, vbts 0x{v[j]:x}")
        print("  vbts before: " + " ".join(f"0x{x:x}" for x in v[lo:j]))
        print("  QEMU next:   " + " ".join(f"0x{x:x}" for x in q[i:i + 8]))
        print("  vbts next:   " + " ".join(f"0x{x:x}" for x in v[j:j + 8]))
        if verr:
            print("  vbts stderr: " + verr.strip().replace("\n", "\n    "))
        return 1
    # QEMU's last logged block is the OUT to the exit port, which vbts reports
    # only if it retired; allow that one.
    if len(q) - i > 1 or len(v) - j > 0:
        print(f"FAIL: stream lengths differ: QEMU {len(q)} (matched {i}), vbts {len(v)} (matched {j})")
        return 1
    # Every taken transfer joins consecutive instructions (events excepted).
    pos = {}
    for n, x in enumerate(v):
        pos.setdefault(x, []).append(n)
    bad = [t for t in transfers if t[2] not in ("exception", "interrupt", "nmi") and t[0] not in pos]
    if bad:
        print(f"FAIL: {len(bad)} transfers start at an address vbts never executed, first {bad[0]}")
        return 1
    print(f"PASS: {i} instructions agree with QEMU TCG ({skipped} faulting instructions skipped), "
          f"{len(transfers)} transfers; QEMU status {qrc}, vbts status {vrc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
