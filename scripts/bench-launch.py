#!/usr/bin/env python3
"""bench-launch.py: launch-to-exit time of guest images under vbts and QEMU.

Runs each image N times under `vbts run`, `qemu-system-x86_64 -accel kvm` and
`-accel tcg` (same image, same ABI: isa-debug-exit at 0xf4, COM1 on stdio) and
prints min/median/max wall-clock times and the ratio QEMU/vbts, as Markdown
for docs/benchmarks.md. It measures; it asserts nothing.

Usage: scripts/bench-launch.py [--runs N] [--vbts build/vbts] IMAGE...
"""
import argparse
import os
import statistics
import subprocess
import sys
import threading
import time


def run_once(cmd, timeout):
    """Wall-clock time of one run. Popen.wait() without a timeout blocks in waitpid;
    subprocess.run(timeout=...) polls with sleeps of up to 50 ms, which added up to
    ~20 ms to every run (see docs/benchmarks.md)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    try:
        rc = p.wait()
    finally:
        timer.cancel()
    t = time.perf_counter() - t0
    if t >= timeout:
        raise subprocess.TimeoutExpired(cmd, timeout)
    return t, rc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--qemu-runs", type=int, default=3)
    ap.add_argument("--vbts", default="build/vbts")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("images", nargs="+")
    a = ap.parse_args()
    qemu = ["qemu-system-x86_64", "-display", "none", "-serial", "stdio", "-no-reboot",
            "-device", "isa-debug-exit,iobase=0xf4,iosize=4", "-m", "128"]
    monitors = [("vbts", lambda img: [a.vbts, "run", img], a.runs)]
    if os.access("/dev/kvm", os.W_OK):
        monitors.append(("qemu -accel kvm", lambda img: qemu + ["-accel", "kvm", "-kernel", img], a.qemu_runs))
    monitors.append(("qemu -accel tcg", lambda img: qemu + ["-accel", "tcg", "-kernel", img], a.qemu_runs))
    print("| image | monitor | runs | min ms | median ms | max ms | exit | median / vbts |")
    print("|---|---|---|---|---|---|---|---|")
    for img in a.images:
        base = None
        for name, cmd, runs in monitors:
            if runs <= 0:
                continue
            times, codes = [], set()
            for _ in range(runs):
                try:
                    t, rc = run_once(cmd(img), a.timeout)
                except subprocess.TimeoutExpired:
                    t, rc = a.timeout, "timeout"
                times.append(t)
                codes.add(rc)
            med = statistics.median(times)
            if base is None:
                base = med
            print(f"| {os.path.basename(img)} | {name} | {runs} | {min(times)*1e3:.1f} | {med*1e3:.1f} | "
                  f"{max(times)*1e3:.1f} | {','.join(map(str, sorted(codes, key=str)))} | {med/base:.1f}x |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
