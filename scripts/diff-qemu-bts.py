#!/usr/bin/env python3
"""Differential test of vbts's BTS against QEMU TCG (docs/tracing.md).

IMAGE runs a branchy workload between the labels wl_call (a CALL) and
wl_back (its return point) with BTS on under vbts, and prints its BTS records
as "BTS 0x<from> 0x<to>". Under QEMU TCG (one instruction per block,
`-d exec,nochain`) the same workload runs unrecorded; this script takes QEMU's
executed-instruction stream from wl_call to wl_back, finds the instruction
lengths with objdump (an independent decoder), and derives the taken
transfers: consecutive instructions a, b with b != a + length(a), or a an
unconditional JMP/CALL/RET/INT/IRET (whose target may be the fall-through). The two
lists must be equal, in order. Exit 0 when they are, 1 otherwise, 77 without
QEMU or binutils.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

from qemu_log import image_log_ranges

TRACE = re.compile(r"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")
INSN = re.compile(r"^\s*([0-9a-f]+):\s+((?:[0-9a-f]{2} )+)\s*(.*)$")


def symbols(image):
    out = subprocess.run(["nm", image], capture_output=True, text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            syms[parts[2]] = int(parts[0], 16)
    return syms


UNCONDITIONAL = ("jmp", "call", "ret", "iret", "int", "lret", "ljmp", "lcall", "syscall", "sysret", "sysenter",
                 "sysexit")


def next_addresses(image, mode):
    """Map instruction address -> (address of the next instruction, always transfers control) (objdump)."""
    args = ["objdump", "-d", "-w"] + (["-M", "x86-64"] if mode == 64 else []) + [image]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    nxt = {}
    for line in out.splitlines():
        m = INSN.match(line)
        if m:
            a = int(m.group(1), 16)
            mnem = m.group(3).split()[0] if m.group(3).split() else ""
            nxt[a] = (a + len(m.group(2).split()), mnem.startswith(UNCONDITIONAL))
    return nxt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vbts", default="build/vbts")
    ap.add_argument("--mode", type=int, default=32, choices=(32, 64))
    ap.add_argument("--alias", default="0xfffffff810000000:0x100000",
                    help="VIRT:LOAD: code executed at VIRT+x is the image's code at LOAD+x (for lengths)")
    ap.add_argument("image")
    a = ap.parse_args()
    alias_virt, alias_load = (int(x, 16) for x in a.alias.split(":"))
    for tool in ("qemu-system-x86_64", "nm", "objdump"):
        if not shutil.which(tool):
            print(f"SKIP: {tool} not installed")
            return 77
    syms = symbols(a.image)
    start, back = syms["wl_call"], syms["wl_back"]
    nxt = next_addresses(a.image, a.mode)

    v = subprocess.run([a.vbts, "run", a.image], capture_output=True, text=True, timeout=120)
    recs = [tuple(int(x, 16) for x in l.split()[1:3]) for l in v.stdout.splitlines() if l.startswith("BTS ")]
    if not recs:
        print("FAIL: vbts printed no BTS records\n" + v.stdout[-2000:] + v.stderr[-2000:])
        return 1

    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "exec.log")
        subprocess.run(["qemu-system-x86_64", "-accel", "tcg", "-singlestep", "-d", "exec,nochain",
                        "-dfilter", image_log_ranges(a.image), "-D", log,
                        "-kernel", a.image, "-device", "isa-debug-exit,iobase=0xf4,iosize=4", "-serial", "null",
                        "-display", "none", "-no-reboot", "-m", "128"], capture_output=True, timeout=120)
        pcs = []
        inside = False
        with open(log) as f:
            for line in f:
                m = TRACE.match(line)
                if not m:
                    continue
                pc = int(m.group(1), 16)
                if not inside:
                    if pc == start:
                        inside = True
                        pcs.append(pc)
                    continue
                if pcs[-1] == pc:  # a REP iteration: the same instruction again
                    continue
                pcs.append(pc)
                if pc == back:
                    break
    if not pcs or pcs[-1] != back:
        print(f"FAIL: QEMU's stream never went from wl_call 0x{start:x} to wl_back 0x{back:x}")
        return 1
    qemu = []
    for x, y in zip(pcs, pcs[1:]):
        shift = alias_virt - alias_load if x >= alias_virt else 0
        if x - shift not in nxt:
            print(f"FAIL: objdump has no instruction at 0x{x - shift:x} (executed at 0x{x:x})")
            return 1
        # A transfer: the next instruction is not the fall-through, or the
        # instruction always transfers control (a JMP/CALL/RET whose target
        # happens to be the fall-through is still a taken branch).
        fall, always = nxt[x - shift]
        if y != fall + shift or always:
            qemu.append((x, y))
    if recs != qemu:
        for i, (r, q) in enumerate(zip(recs, qemu)):
            if r != q:
                print(f"FAIL: transfer {i}: vbts BTS 0x{r[0]:x} -> 0x{r[1]:x}, QEMU 0x{q[0]:x} -> 0x{q[1]:x}")
                return 1
        print(f"FAIL: vbts has {len(recs)} BTS records, QEMU {len(qemu)} taken transfers")
        return 1
    print(f"PASS: {len(recs)} BTS records equal the taken transfers of QEMU's {len(pcs)}-instruction stream")
    return 0


if __name__ == "__main__":
    sys.exit(main())
