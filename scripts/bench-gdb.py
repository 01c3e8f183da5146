#!/usr/bin/env python3
"""bench-gdb.py: what GDB's breakpoints, watchpoints and branch trace cost a guest.

    bench-gdb.py --vbts build/vbts --image build/guest-tests/gdb_demo.elf [--spins N] [--runs R] [--only TEXT]
                 [--vbts-arg ARG ...]

Each case starts `vbts run --gdb=127.0.0.1:0 --gdb-wait IMAGE`, attaches
`gdb -batch -nx`, sets `spin_limit` to N (spin() then runs N iterations of its
6-instruction loop: guest-tests/gdb/gdb_demo.c), sets the case's stop, and
continues once to the guest's end. Printed: the wall-clock time of the gdb
process (start-up and attach included), best of R runs, and the guest
instructions per second in the loop after subtracting the same session with
N = 1. A benchmark (docs/benchmarks.md, "The gdbstub's costs"), not a test.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

CASES = [
    ("nothing", []),
    ("a breakpoint never hit (break *0x100000)", ["break *0x100000"]),
    ("a write watchpoint the loop never touches", ["watch *(int *)0x800000"]),
    ("an access watchpoint the loop never touches", ["awatch *(int *)0x800000"]),
    ("record btrace bts", ["record btrace bts"]),
]


def session(args, spins, setup):
    vbts = subprocess.Popen([args.vbts, "run", "--gdb=127.0.0.1:0", "--gdb-wait", "--timeout=600", *args.vbts_arg,
                             args.image],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    port = None
    for line in vbts.stderr:
        m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("vbts did not listen")
    script = ["set pagination off", "set confirm off", "target remote 127.0.0.1:%d" % port,
              "set var spin_limit = %d" % spins] + setup + ["continue"]
    with tempfile.NamedTemporaryFile("w", suffix=".gdb", delete=False) as f:
        f.write("\n".join(script) + "\n")
    start = time.monotonic()
    out = subprocess.run([args.gdb, "-batch", "-nx", "-x", f.name, args.image], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL)
    took = time.monotonic() - start
    os.unlink(f.name)
    vbts.wait(timeout=60)
    if "exited normally" not in out.stdout + out.stderr:
        sys.exit("the guest did not end normally:\n" + out.stdout + out.stderr)
    return took


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vbts", required=True)
    p.add_argument("--image", required=True)
    p.add_argument("--gdb", default="gdb")
    p.add_argument("--spins", type=int, default=100_000_000)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--only", default="", help="the cases whose name holds this text")
    p.add_argument("--vbts-arg", action="append", default=[], help="another argument of vbts run (repeatable)")
    args = p.parse_args()
    print("| what GDB has set | time (s) | guest instructions/s in the loop |")
    print("|---|---|---|")
    for name, setup in CASES:
        if args.only not in name:
            continue
        base = min(session(args, 1, setup) for _ in range(args.runs))
        took = min(session(args, args.spins, setup) for _ in range(args.runs))
        rate = 6 * args.spins / max(took - base, 1e-3)
        print("| %s | %.2f | %.3g |" % (name, took, rate), flush=True)


if __name__ == "__main__":
    main()
