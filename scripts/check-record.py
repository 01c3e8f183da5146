#!/usr/bin/env python3
"""End-to-end check of `vbts record` and every `vbts report` format.

Runs IMAGE twice, once with `vbts run --branches=F1` and once with
`vbts record -o T --branches=F2`, and checks:
 - both runs print the same guest output and exit with the same status
   (recording changes nothing the guest can observe);
 - `vbts report --format=branches T` equals F2 (the same run) byte for byte,
   and F1 too unless --timing-dependent (a guest whose interrupts arrive at
   different instructions from run to run, such as lapic_timer);
 - each other format, read back by an independent reader written here
   (not vbts's code): json (Python's json module, every field against the
   branches lines), drcov (parsed the way Lighthouse's drcov parser reads
   version 2 files), folded (the flamegraph.pl line syntax, counts summing to
   the transfers), dot (Graphviz `dot` must accept it; edge counts sum to the
   transfers), text (one line per transfer, the summary count);
 - a truncated copy of T is reported up to the damage with exit status 1
   and a "truncated" message, and a file that is not a trace exits 116;
 - the filters: --cpl=0/3 and --range record exactly the subset of the full
   recording they describe, --max-records=N exactly its first N transfers,
   with the guest's output and status unchanged.
With --crash (use an image that never ends, e.g. spin.elf), vbts record is
killed with SIGKILL after 1.5 s instead, and the file must still report its
prefix: exit status 1, "no end block" on stderr, and transfers on stdout.
With --signal INT|TERM|HUP (an image that never ends), vbts record gets that
signal once the guest has printed its first line: vbts ends the run cleanly
(vmm/stop_signals.h): exit status 130, "stopped by SIG..." on stderr, and a
complete file whose report (exit status 0) ends with "run ended: signalled,
exit status 130".
Exit status 0 when all hold, 1 otherwise (the first failure is printed).
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, timeout=600, **kw)


def parse_drcov(data):
    """A drcov reader following Lighthouse's parser: header lines, a module
    table (version 2), then 'BB Table: N bbs' and N binary entries
    {u32 start, u16 size, u16 mod_id}."""
    pos = 0

    def line():
        nonlocal pos
        end = data.index(b"\n", pos)
        text = data[pos:end].decode()
        pos = end + 1
        return text

    version = int(line().split(":")[1])
    if version != 2:
        fail(f"drcov: version {version}")
    line()  # flavor
    field, value = line().split(": ")
    ver, count = value.split(", ")
    if field != "Module Table" or ver != "version 2":
        fail(f"drcov: module table header {field}: {value}")
    columns = line().split(": ")[1].split(", ")
    modules = []
    for _ in range(int(count.split(" ")[1])):
        parts = line().split(", ")
        row = dict(zip(columns, parts))
        modules.append({"id": int(row["id"]), "base": int(row["base"], 16), "end": int(row["end"], 16),
                        "path": row["path"]})
    field, value = line().split(": ")
    n = int(value.split(" ")[0])
    if field != "BB Table":
        fail(f"drcov: expected the BB table, got {field}")
    if len(data) - pos != 8 * n:
        fail(f"drcov: {n} bbs announced, {len(data) - pos} bytes of table")
    bbs = [struct.unpack_from("<IHH", data, pos + 8 * i) for i in range(n)]
    return modules, bbs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vbts", default="build/vbts")
    ap.add_argument("--timing-dependent", action="store_true",
                    help="the guest's path depends on timing: compare with vbts run's output, not its transfers")
    ap.add_argument("--crash", action="store_true", help="kill vbts record mid-run; check the prefix")
    ap.add_argument("--signal", choices=["INT", "TERM", "HUP"], help="stop vbts record with SIGxxx; check the end")
    ap.add_argument("--file-limit", type=int, default=0,
                    help="record under RLIMIT_FSIZE of this many bytes; check the error and the prefix")
    ap.add_argument("image")
    a = ap.parse_args()
    vbts = os.path.abspath(a.vbts)
    image = os.path.abspath(a.image)
    if a.crash:
        return crash_test(vbts, image)
    if a.signal:
        return signal_test(vbts, image, a.signal)
    if a.file_limit:
        return write_error_test(vbts, image, a.file_limit)
    with tempfile.TemporaryDirectory() as d:
        branches, trace = os.path.join(d, "run.branches"), os.path.join(d, "t.vbtr")
        same_run = os.path.join(d, "record.branches")
        r1 = run([vbts, "run", f"--branches={branches}", image])
        r2 = run([vbts, "record", "-o", trace, f"--branches={same_run}", image])
        if r1.stdout != r2.stdout:
            fail("guest output differs between vbts run and vbts record")
        if r1.returncode != r2.returncode:
            fail(f"exit status: vbts run {r1.returncode}, vbts record {r2.returncode}")
        if not re.search(rb"vbts: recorded \d+ transfers to ", r2.stderr):
            fail("vbts record printed no summary: " + r2.stderr.decode(errors="replace"))

        def report(fmt, path=trace, expect=0):
            p = run([vbts, "report", f"--format={fmt}", path])
            if p.returncode != expect:
                fail(f"vbts report --format={fmt} exited {p.returncode}, expected {expect}: "
                     + p.stderr.decode(errors="replace"))
            return p

        with open(same_run, "rb") as f:
            want = f.read()
        got = report("branches").stdout
        if got != want:
            fail("vbts report --format=branches differs from the same run's --branches")
        with open(branches, "rb") as f:
            if not a.timing_dependent and got != f.read():
                fail("vbts report --format=branches differs from vbts run --branches")
        lines = [l.split() for l in want.decode().splitlines()]
        n = len(lines)
        if n == 0:
            fail("no transfers recorded")

        # json
        objs = [json.loads(l) for l in report("json").stdout.decode().splitlines()]
        if len(objs) != n:
            fail(f"json: {len(objs)} objects for {n} transfers")
        for i, (o, (f_, t_, k_)) in enumerate(zip(objs, lines)):
            if o["n"] != i or o["from"] != f_ or o["to"] != t_ or o["kind"] != k_:
                fail(f"json object {i} {o} does not match branches line {f_} {t_} {k_}")
            if o["mode_from"] not in ("real", "pm16", "pm32", "lm64") or o["cpl_from"] not in range(4):
                fail(f"json object {i}: bad mode/cpl {o}")
            if k_ in ("int", "exception", "interrupt", "nmi") and "vector" not in o:
                fail(f"json object {i}: {k_} without a vector")

        # drcov
        modules, bbs = parse_drcov(report("drcov").stdout)
        if len(modules) != 1 or os.path.basename(modules[0]["path"]) != os.path.basename(image):
            fail(f"drcov: module table {modules}")
        base, end = modules[0]["base"], modules[0]["end"]
        targets = {int(t, 16) for _, t, _ in lines}
        for start, size, mod in bbs:
            if mod != 0 or size == 0 or base + start + size > end:
                fail(f"drcov: block (0x{start:x}, {size}, {mod}) outside module [0x{base:x}, 0x{end:x})")
        starts = {base + s for s, _, _ in bbs}
        # Every block starts at a transfer's target or the entry point.
        stray = [hex(s) for s in starts if s not in targets]
        if len(stray) > 1:
            fail(f"drcov: blocks that start at no transfer target: {stray[:5]}")
        if not bbs:
            fail("drcov: no blocks")

        # folded
        total = 0
        for l in report("folded").stdout.decode().splitlines():
            m = re.fullmatch(r"([^ ]+) ([0-9]+)", l)
            if not m or "" in m.group(1).split(";"):
                fail(f"folded: bad line {l!r}")
            total += int(m.group(2))
        if total != n:
            fail(f"folded: counts sum to {total}, {n} transfers")

        # dot
        dot_path = os.path.join(d, "cfg.dot")
        with open(dot_path, "wb") as f:
            f.write(report("dot").stdout)
        if shutil.which("dot"):
            p = run(["dot", "-Tsvg", "-o", os.path.join(d, "cfg.svg"), dot_path])
            if p.returncode != 0:
                fail("Graphviz dot refused the CFG: " + p.stderr.decode(errors="replace"))
        else:
            print("note: graphviz not installed, dot output only checked by this script")
        edges = 0
        with open(dot_path) as f:
            for l in f:
                m = re.fullmatch(r'  "0x[0-9a-f]+" -> "0x[0-9a-f]+" \[label="[a-z-]+ ([0-9]+)"\];\n', l)
                if m:
                    edges += int(m.group(1))
        if edges != n:
            fail(f"dot: edge counts sum to {edges}, {n} transfers")

        # text
        text = report("text").stdout.decode()
        rows = [l for l in text.splitlines() if re.match(r"^ *[0-9]+ [a-z]", l)]
        if len(rows) != n or f"# summary: {n} transfers" not in text:
            fail(f"text: {len(rows)} transfer lines / summary for {n} transfers")

        # damaged files
        with open(trace, "rb") as f:
            data = f.read()
        cut = os.path.join(d, "cut.vbtr")
        with open(cut, "wb") as f:
            f.write(data[:len(data) // 2])
        p = report("branches", cut, expect=1)
        if not want.startswith(p.stdout) or b"truncated" not in p.stderr:
            fail("a truncated trace is not reported as its prefix with a 'truncated' message")
        p = report("text", branches, expect=116)
        if b"not a vbts trace" not in p.stderr:
            fail("a non-trace file is not refused clearly: " + p.stderr.decode(errors="replace"))

        # filters
        full = objs

        def filtered(opts):
            t = os.path.join(d, "f.vbtr")
            p = run([vbts, "record", "-o", t, *opts, image])
            if p.stdout != r2.stdout or p.returncode != r2.returncode:
                fail(f"vbts record {' '.join(opts)}: the guest's output or status changed")
            return [json.loads(l) for l in report("json", t).stdout.decode().splitlines()], p

        def same(got, want, what):
            key = lambda o: (o["from"], o["to"], o["kind"])
            if [key(o) for o in got] != [key(o) for o in want]:
                fail(f"{what}: {len(got)} transfers recorded, {len(want)} expected from the full recording")

        if not a.timing_dependent:
            for cpl in (0, 3):
                got, _ = filtered([f"--cpl={cpl}"])
                same(got, [o for o in full if cpl in (o["cpl_from"], o["cpl_to"])], f"--cpl={cpl}")
            got, _ = filtered(["--range=0x100000:0x100800"])
            same(got, [o for o in full if any(0x100000 <= int(o[k], 16) < 0x100800 for k in ("from", "to"))],
                 "--range=0x100000:0x100800")
            got, _ = filtered(["--range=main"])
            if not got or not all(o.get("from_sym", "").startswith("main") or o.get("to_sym", "").startswith("main")
                                  for o in got):
                fail("--range=main: a transfer neither from nor to main, or none at all")
            limit = min(100, n // 2)
            got, p = filtered([f"--max-records={limit}"])
            same(got, full[:limit], f"--max-records={limit}")
            if f"--max-records={limit} reached".encode() not in p.stderr:
                fail("--max-records: the summary line does not say the limit was reached")

        size = len(data)
        print(f"PASS: {n} transfers, {size} bytes ({size / n:.2f} bytes/transfer); branches identical to vbts run; "
              f"json, drcov ({len(bbs)} blocks), folded, dot, text read back; truncation handled")
    return 0


def write_error_test(vbts, image, limit):
    """vbts record under a file-size limit (RLIMIT_FSIZE, as a full disk):
    it ends with status 116 and "recording failed: writing ...", the guest
    still runs to its end (its output is the plain run's), and the file's
    complete blocks report: `vbts report --format=branches` of it is a prefix
    of the full recording's, with exit status 1 and "truncated"."""
    import resource
    with tempfile.TemporaryDirectory() as d:
        full, cut = os.path.join(d, "full.vbtr"), os.path.join(d, "cut.vbtr")
        r0 = run([vbts, "record", "-o", full, image])
        want = run([vbts, "report", "--format=branches", full]).stdout.decode().splitlines()

        def limit_fsize():
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        r = subprocess.run([vbts, "record", "-o", cut, image], capture_output=True, preexec_fn=limit_fsize)
        err = r.stderr.decode(errors="replace")
        if r.returncode != 116 or not re.search(r"vbts: recording failed: writing .*: File too large", err):
            fail(f"recording past a {limit}-byte file limit exited {r.returncode}: {err}")
        if r.stdout != r0.stdout:
            fail("the guest's output changed when the recording failed")
        if os.path.getsize(cut) > limit:
            fail(f"the file is {os.path.getsize(cut)} bytes, over the {limit}-byte limit")
        rep = run([vbts, "report", "--format=branches", cut])
        got = rep.stdout.decode().splitlines()
        if rep.returncode != 1 or b"truncated" not in rep.stderr:
            fail(f"report of the cut file exited {rep.returncode}: " + rep.stderr.decode(errors="replace"))
        if not got or got != want[:len(got)] or len(got) >= len(want):
            fail(f"the cut file reports {len(got)} transfers, not a proper prefix of the {len(want)} recorded")
        print(f"PASS: a {limit}-byte file limit ends vbts record with 116; its file reports the first "
              f"{len(got)} of {len(want)} transfers")
    return 0


def crash_test(vbts, image):
    import signal
    import time
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "t.vbtr")
        p = subprocess.Popen([vbts, "record", "-o", trace, image], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        p.send_signal(signal.SIGKILL)
        p.wait()
        r = run([vbts, "report", "--format=branches", trace])
        lines = r.stdout.decode().splitlines()
        if r.returncode != 1 or b"no end block" not in r.stderr or not lines:
            fail(f"killed recording: report exited {r.returncode} with {len(lines)} transfers: "
                 + r.stderr.decode(errors="replace"))
        if not all(re.fullmatch(r"0x[0-9a-f]+ 0x[0-9a-f]+ [a-z-]+", l) for l in lines):
            fail("killed recording: malformed branches lines")
        print(f"PASS: vbts record killed after 1.5 s; its file reports {len(lines)} transfers and says: "
              + r.stderr.decode(errors="replace").strip())
    return 0


def signal_test(vbts, image, name):
    import signal
    import time
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "t.vbtr")
        out = open(os.path.join(d, "out"), "w+b")
        # vbts as a terminal starts it: a signal the caller ignores (SIGINT in a
        # job started with `&` by a script) would stay ignored in vbts.
        p = subprocess.Popen([vbts, "record", "-o", trace, image], stdout=out, stderr=subprocess.PIPE,
                             preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL)
                                                 for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)])
        deadline = time.time() + 20
        while time.time() < deadline and os.path.getsize(out.name) == 0 and p.poll() is None:
            time.sleep(0.02)
        p.send_signal(getattr(signal, "SIG" + name))
        try:
            _, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            fail(f"vbts record did not end within 10 s of SIG{name}")
        err = err.decode(errors="replace")
        if p.returncode != 130 or f"vbts: stopped by SIG{name}" not in err:
            fail(f"SIG{name}: vbts record exited {p.returncode}, expected 130 with 'stopped by SIG{name}': {err}")
        r = run([vbts, "report", trace])
        text = r.stdout.decode(errors="replace")
        if r.returncode != 0 or "# run ended: signalled, exit status 130" not in text:
            fail(f"SIG{name}: report exited {r.returncode}: {r.stderr.decode(errors='replace')} {text[-300:]}")
        print(f"PASS: vbts record stopped by SIG{name}: status 130, a complete file; its report says: "
              + [l for l in text.splitlines() if l.startswith("# run ended")][0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
