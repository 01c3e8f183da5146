#!/usr/bin/env python3
"""hostile-resources.py: the resource side of guest-tests/tiny/hostile_com1_flood.asm.

  hostile-resources.py --vbts VBTS --images DIR

1. The flood through a pipe this script reads: status 1, exactly the bytes the guest wrote
   (32 x 1024 lines of 63 dots), and vbts's peak RSS no more than 2 MiB above that of the
   `hello` image under the same engine (vbts keeps none of the 2 MiB: it writes each byte as
   it comes; docs/security.md, "Hostile guests").
2. The flood into a pipe nobody reads, with --timeout=2: vbts ends with 124 within a few
   seconds of the deadline and says the output was not being read, instead of waiting for the
   reader forever.
Exit 0 when both hold, 1 otherwise.
"""
import argparse
import os
import resource
import subprocess
import sys
import time


def run_measured(cmd):
    # A child per command so that ru_maxrss is this command's alone (wait4's rusage).
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    out = bytearray()
    while True:
        chunk = p.stdout.read(65536)
        if not chunk:
            break
        out += chunk
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, bytes(out), err.decode(errors="replace"), usage.ru_maxrss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vbts", required=True)
    ap.add_argument("--images", required=True)
    a = ap.parse_args()
    flood = os.path.join(a.images, "hostile_com1_flood.elf")
    hello = os.path.join(a.images, "hello.elf")
    ok = True

    st, out, err, rss_hello = run_measured([a.vbts, "run", "--engine=tcg", "--timeout=20", hello])
    if st != 1:
        print(f"FAIL: hello: status {st}\n{err}")
        return 1
    t0 = time.monotonic()
    st, out, err, rss = run_measured([a.vbts, "run", "--engine=tcg", "--timeout=30", flood])
    dots = out.count(b".")
    print(f"flood: status {st}, {len(out)} bytes on stdout ({dots} dots) in {time.monotonic() - t0:.1f} s; "
          f"peak RSS {rss} KiB (hello: {rss_hello} KiB)")
    if st != 1 or dots != 32 * 1024 * 63 or not out.startswith(b"flood: start\n") or b"flood: done\n" not in out:
        print(f"FAIL: flood output or status wrong\n{err}")
        ok = False
    if rss > rss_hello + 2048:
        print(f"FAIL: peak RSS {rss} KiB is more than 2 MiB above hello's {rss_hello} KiB")
        ok = False

    # A reader that never reads: the pipe fills (64 KiB), then vbts must still end at --timeout.
    rfd, wfd = os.pipe()
    t0 = time.monotonic()
    p = subprocess.Popen([a.vbts, "run", "--engine=tcg", "--timeout=2", flood], stdout=wfd,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    os.close(wfd)
    try:
        _, err = p.communicate(timeout=15)
        elapsed = time.monotonic() - t0
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        print("FAIL: vbts still running 15 s after a 2 s --timeout with an unread stdout")
        return 1
    finally:
        os.close(rfd)
    err = err.decode(errors="replace")
    print(f"unread stdout: status {p.returncode} after {elapsed:.1f} s: {err.strip()}")
    if p.returncode != 124 or "not being read" not in err or elapsed > 8:
        print("FAIL: expected status 124 within 8 s and the line saying the output was not being read")
        ok = False
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
