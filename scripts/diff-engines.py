#!/usr/bin/env python3
"""diff-engines.py: one image recorded by `vbts record` under --engine=kvm and
--engine=tcg must give the same run: exit status, guest output (COM1) and
every recorded transfer (`vbts report --format=branches`, byte for byte).
Issue 11's differential check between vbts's two engines (docs/tcg-engine.md).
With --run, `vbts run` instead (no recording, so the TCG engine follows the
guest as an untraced run would: kept block ends for LBRs): the same status,
guest output and vbts's own messages (stderr: a warning is a difference).

  diff-engines.py --vbts PATH [--run] IMAGE [--vbts-arg ARG]...
Exit status: 0 identical, 1 different (the first difference is printed),
2 usage or a vbts failure."""
import argparse
import os
import subprocess
import sys
import tempfile


def record(vbts, engine, image, args, tmp):
    trace = os.path.join(tmp, f"{engine}.vbtr")
    p = subprocess.run([vbts, "record", f"--engine={engine}", "-o", trace, *args, image],
                       capture_output=True, timeout=300)
    rep = subprocess.run([vbts, "report", "--format=branches", trace], capture_output=True, timeout=300)
    if rep.returncode != 0:
        print(f"diff-engines: vbts report of the {engine} trace failed: {rep.stderr.decode(errors='replace')}")
        sys.exit(2)
    return p.returncode, p.stdout, rep.stdout


def run(vbts, engine, image, args):
    p = subprocess.run([vbts, "run", f"--engine={engine}", *args, image], capture_output=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def first_difference(a, b):
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}: kvm {x!r} vs tcg {y!r}"
    return f"kvm has {len(la)} lines, tcg {len(lb)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vbts", required=True)
    ap.add_argument("--vbts-arg", action="append", default=[])
    ap.add_argument("--run", action="store_true", help="compare `vbts run` (status, output, stderr)")
    ap.add_argument("image")
    a = ap.parse_args()
    if a.run:
        ks, ko, ke = run(a.vbts, "kvm", a.image, a.vbts_arg)
        ts, to, te = run(a.vbts, "tcg", a.image, a.vbts_arg)
        ok = True
        if ks != ts:
            print(f"exit status: kvm {ks}, tcg {ts}")
            ok = False
        for what, x, y in (("guest output", ko, to), ("vbts's messages (stderr)", ke, te)):
            if x != y:
                print(f"{what} differs: " + first_difference(x, y))
                ok = False
        print(f"{os.path.basename(a.image)}: {'identical' if ok else 'DIFFERENT'} (run: status {ks}, "
              f"{len(ko)} output bytes)")
        return 0 if ok else 1
    with tempfile.TemporaryDirectory() as tmp:
        ks, ko, kb = record(a.vbts, "kvm", a.image, a.vbts_arg, tmp)
        ts, to, tb = record(a.vbts, "tcg", a.image, a.vbts_arg, tmp)
    ok = True
    if ks != ts:
        print(f"exit status: kvm {ks}, tcg {ts}")
        ok = False
    if ko != to:
        print("guest output differs: " + first_difference(ko, to))
        ok = False
    if kb != tb:
        print("recorded transfers differ: " + first_difference(kb, tb))
        ok = False
    n = kb.count(b"\n")
    print(f"{os.path.basename(a.image)}: {'identical' if ok else 'DIFFERENT'} "
          f"(status {ks}, {len(ko)} output bytes, {n} transfers)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
