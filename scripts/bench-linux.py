#!/usr/bin/env python3
"""bench-linux.py: wall time of Debian's kernel from reset to ACPI power-off,
under vbts (TCG engine on a PVM host) and qemu-system-x86_64 -accel tcg, with
the same vmlinux, initramfs and command line; init (guest-tests/linux/init.c)
powers off as soon as it starts (`-- poweroff`). QEMU's time includes SeaBIOS
and its PVH option ROM; vbts has no firmware. Results: docs/benchmarks.md.

    scripts/bench-linux.py [--runs N] [--kernel build/linux/vmlinux]
                           [--initrd build/guest-tests/linux-perf.cpio] [--vbts build/vbts]
"""
import argparse
import shutil
import statistics
import subprocess
import time

APPEND = "console=ttyS0 panic=-1 nmi_watchdog=0 pti=off -- poweroff"


def run(cmd):
    t = time.monotonic()
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=300)
    return (time.monotonic() - t) * 1000, p.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kernel", default="build/linux/vmlinux")
    ap.add_argument("--initrd", default="build/guest-tests/linux-perf.cpio")
    ap.add_argument("--vbts", default="build/vbts")
    a = ap.parse_args()
    monitors = [("vbts (westmere)", [a.vbts, "run", "--mem=512M", "--initrd=" + a.initrd, "--append=" + APPEND,
                                     a.kernel])]
    qemu = shutil.which("qemu-system-x86_64")
    if qemu:
        monitors.append(("qemu -accel tcg -cpu Westmere", [qemu, "-accel", "tcg", "-cpu", "Westmere", "-m", "512",
                                                           "-display", "none", "-serial", "null", "-kernel",
                                                           a.kernel, "-initrd", a.initrd, "-append", APPEND]))
    print("| monitor | runs | min ms | median ms | max ms | exit |")
    print("|---|---|---|---|---|---|")
    for name, cmd in monitors:
        times, codes = [], set()
        for _ in range(a.runs):
            ms, rc = run(cmd)
            times.append(ms)
            codes.add(rc)
        print("| %s | %d | %.0f | %.0f | %.0f | %s |" % (name, a.runs, min(times), statistics.median(times),
                                                         max(times), ",".join(map(str, sorted(codes)))))


if __name__ == "__main__":
    main()
