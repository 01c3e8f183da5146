#!/usr/bin/env python3
"""run-kut.py: run one kvm-unit-tests binary under vbts and check it against kut.cfg.

    run-kut.py --vbts PATH --kut-dir DIR [--manifest kut.cfg] NAME

The binaries are not ours: they are read from DIR (by default the shared
kvm-unit-tests directory next to the checkout; CMake's VBTS_KUT_DIR) and
checked against the SHA-256 in kut.cfg, so that a test never runs a binary
other than the one its expectations were written for.

A [NAME] section of kut.cfg says:
  flat      the binary's file name;            sha256  its digest
  cpu       vbts --cpu;                        timeout vbts --timeout (seconds)
  engine    vbts --engine (kvm by default; tcg: the TCG engine, docs/tcg-engine.md)
  record    yes: `vbts record` (into a temporary trace) instead of `vbts run`: the
            recording must change nothing the guest sees
  env       lines of the first Multiboot module (kvm-unit-tests' environment), ';'-separated
  status    the exit status vbts must end with (1 = every assertion passed, 3 = a
            failure, 155 = skipped, 118 = vbts stopped: unsupported on this host,
            124 = --timeout); with `because` saying why, for anything but 1 and 155
  summary   the exact SUMMARY line, when the test reaches it
  pass      minimum number of PASS lines
  xfail     "TEXT | REASON": an assertion whose FAIL line is exactly "FAIL: TEXT" is
            expected to fail on this host for REASON (repeatable). A FAIL line
            not listed fails the test; a listed one that passes fails it too
            (the list must shrink when vbts gets better).
  xfail_re  "REGEX | REASON": as xfail, for FAIL lines whose text (after "FAIL: ") the
            Python regular expression matches whole (values that depend on the host's
            speed); it must match at least one.
  skip      "TEXT | REASON": an allowed SKIP line (the CPU model lacks the feature).
  last      the text the last line of output starts with (where the run stops).
  heavy     yes: the run takes minutes; CMake gives it the ctest label heavy, which .ci/run
            leaves out (ctest -L heavy).
Exit status: 0 as expected, 1 not, 77 the binaries are missing (ctest: skipped).
"""
import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile


def parse_cfg(path):
    sections, cur = {}, None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            s = line.strip()
            if not s or s.startswith('#'):
                continue
            m = re.fullmatch(r'\[([A-Za-z0-9_.-]+)\]', s)
            if m:
                cur = sections.setdefault(m.group(1), {})
                continue
            if cur is None or '=' not in s:
                sys.exit(f'{path}:{n}: cannot parse: {line.rstrip()}')
            k, v = (x.strip() for x in s.split('=', 1))
            cur.setdefault(k, []).append(v)
    return sections


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--vbts', required=True)
    ap.add_argument('--kut-dir', required=True)
    ap.add_argument('--manifest', default=os.path.join(os.path.dirname(__file__), 'kut.cfg'))
    ap.add_argument('name')
    a = ap.parse_args()
    cfg = parse_cfg(a.manifest).get(a.name)
    if cfg is None:
        sys.exit(f'run-kut.py: no [{a.name}] in {a.manifest}')
    one = lambda k, d=None: cfg.get(k, [d])[-1]
    flat = os.path.join(a.kut_dir, one('flat'))
    if not os.path.exists(flat):
        print(f'SKIPPED: {flat} is missing: the kvm-unit-tests binaries are test inputs from the shared '
              f'directory (configure with -DVBTS_KUT_DIR=DIR)')
        return 77
    digest = hashlib.sha256(open(flat, 'rb').read()).hexdigest()
    if digest != one('sha256'):
        print(f'FAILED: {flat} has SHA-256 {digest}, kut.cfg expects {one("sha256")}: not the binary the '
              f'expectations were written for')
        return 1
    with tempfile.NamedTemporaryFile('w', suffix='.env', delete=False) as env:
        env.write(''.join(l.strip() + '\n' for l in one('env', 'NR_CPUS=1').split(';')))
    trace_dir = tempfile.TemporaryDirectory()
    mode = ['record', '-o', os.path.join(trace_dir.name, 'kut.vbtr')] if one('record') == 'yes' else ['run']
    cmd = [a.vbts, *mode, f'--cpu={one("cpu", "westmere")}', f'--timeout={one("timeout", "60")}',
           f'--engine={one("engine", "kvm")}', f'--initrd={env.name}', flat]
    print('$ ' + ' '.join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors='replace')
    os.unlink(env.name)
    lines = [l for l in p.stdout.splitlines() if 'tracer: cannot explain' not in l]
    print('\n'.join(lines))
    problems = []
    want_status = int(one('status', '1'))
    if p.returncode != want_status:
        problems.append(f'exit status {p.returncode}, expected {want_status}')
    xfail = [x.split('|', 1)[0].strip() for x in cfg.get('xfail', [])]
    skips = [x.split('|', 1)[0].strip() for x in cfg.get('skip', [])]
    xfail_re = [re.compile(x.split('|', 1)[0].strip()) for x in cfg.get('xfail_re', [])]
    fails = [l[len('FAIL: '):] for l in lines if l.startswith('FAIL: ')]
    for f in fails:
        if f not in xfail and not any(r.fullmatch(f) for r in xfail_re):
            problems.append(f'unexpected FAIL: {f}')
    for r in xfail_re:
        if not any(r.fullmatch(f) for f in fails):
            problems.append(f'expected failure did not fail (remove it from kut.cfg if vbts now gets it right): '
                            f'{r.pattern}')
    for x in xfail:
        if x not in fails:
            problems.append(f'expected failure did not fail (remove it from kut.cfg if vbts now gets it right): {x}')
    for s in (l[len('SKIP: '):] for l in lines if l.startswith('SKIP: ')):
        if not any(s.startswith(x) for x in skips):
            problems.append(f'unexpected SKIP: {s}')
    npass = sum(l.startswith('PASS: ') for l in lines)
    if npass < int(one('pass', '0')):
        problems.append(f'{npass} PASS lines, expected at least {one("pass")}')
    if one('summary') and one('summary') not in lines:
        problems.append(f'no line "{one("summary")}"')
    if one('last') and not (lines and lines[-1].startswith(one('last'))):
        problems.append(f'last line is "{lines[-1] if lines else ""}", expected it to start with "{one("last")}"')
    for pr in problems:
        print('kut: ' + pr)
    if not problems:
        why = [x for x in cfg.get('because', [])] + [x.split('|', 1)[1].strip()
                                                     for x in cfg.get('xfail', []) + cfg.get('xfail_re', [])]
        print(f'kut: {a.name} as expected ({npass} PASS, {len(fails)} expected FAIL)' +
              ''.join(f'\nkut: expected on this host: {w}' for w in why))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
