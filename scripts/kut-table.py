#!/usr/bin/env python3
"""kut-table.py: runs the x86_64 (or i386) tests of a kvm-unit-tests build under vbts,
as the vbts columns of docs/compatibility.md were measured, and prints one row per test
with its verdict and PASS/FAIL/SKIP counts, then the totals.

Usage: scripts/kut-table.py --kut DIR [--arch x86_64|i386] [--vbts PATH] [--jobs N]
                            [--timeout S] [TEST...]
  DIR   a kvm-unit-tests tree built for that architecture (./configure --arch=x86_64
        && make, or --arch=i386; docs/compatibility.md names the commit)
  TEST  section names of x86/unittests.cfg (default: every section of the
        architecture, those without an `arch` and those with its own, but the
        nested-virtualisation, Hyper-V, TSX-ctrl, CET and LAM ones)

Each test runs as `vbts run --initrd=ENV --timeout=T [--device=...] X.flat
--append=ARGS`: ENV holds NR_CPUS=1 and TEST_DEVICE=0 (kvm-unit-tests' non-KVM
environment), T is the section's timeout (90 s where it gives none, kvm-unit-tests'
default), ARGS its test_args, and the `-device edu` / `-device intel-iommu` of its
qemu_params become `--device=edu` / `--device=intel-iommu`. Verdicts by vbts's exit
status (docs/cli.md): 1 PASS, 3 FAIL, 77 SKIP, 127 ABORT, 116/118 STOP, 120 RESET,
124 HANG/SLOW; the counts are the PASS/FAIL/SKIP lines of the output.
"""
import argparse
import concurrent.futures
import configparser
import os
import re
import subprocess
import sys
import tempfile
import time

EXCLUDED = re.compile(r'^(vmx|svm|ept|hyperv|tsx|cet|lam)')
VERDICTS = {1: 'PASS', 3: 'FAIL', 77: 'SKIP', 127: 'ABORT', 116: 'STOP', 118: 'STOP', 120: 'RESET',
            124: 'HANG/SLOW'}


def sections(kut, arch='x86_64'):
    cfg = configparser.ConfigParser(interpolation=None, strict=False)
    with open(os.path.join(kut, 'x86', 'unittests.cfg')) as f:
        cfg.read_file(f)
    for name in cfg.sections():
        s = cfg[name]
        if s.get('arch', arch) != arch or EXCLUDED.match(name):
            continue
        flat = os.path.join(kut, 'x86', s['file'])
        if os.path.exists(flat):
            yield name, s, flat


def run(vbts, env, name, s, flat, timeout):
    t = int(s.get('timeout', '90').rstrip('s')) if timeout is None else timeout
    cmd = [vbts, 'run', f'--initrd={env}', f'--timeout={t}']
    params = s.get('qemu_params', '') + ' ' + s.get('extra_params', '')
    for dev in ('edu', 'intel-iommu'):
        if re.search(r'-device\s+' + dev + r'\b', params):
            cmd.append(f'--device={dev}')
    cmd.append(flat)
    args = s.get('test_args', '').strip().strip('\'"')
    if args:
        cmd.append(f'--append={args}')
    start = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=t + 60)
    secs = time.monotonic() - start
    out = p.stdout.decode(errors='replace')
    counts = [len(re.findall(rf'^{w}:', out, re.M)) for w in ('PASS', 'FAIL', 'SKIP')]
    return name, VERDICTS.get(p.returncode, f'status {p.returncode}'), counts, secs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--kut', required=True)
    ap.add_argument('--vbts', default=os.path.join(os.path.dirname(__file__), '..', 'build', 'vbts'))
    ap.add_argument('--arch', choices=('x86_64', 'i386'), default='x86_64',
                    help='the architecture the tree was built for (which sections run)')
    ap.add_argument('--jobs', type=int, default=1)
    ap.add_argument('--timeout', type=int, help='one timeout for every test instead of the cfg\'s')
    ap.add_argument('tests', nargs='*')
    a = ap.parse_args()
    todo = [t for t in sections(a.kut, a.arch) if not a.tests or t[0] in a.tests]
    if not todo:
        sys.exit('kut-table.py: no test to run')
    with tempfile.NamedTemporaryFile('w', suffix='.env', delete=False) as env:
        env.write('NR_CPUS=1\nTEST_DEVICE=0\n')
    try:
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            rows = list(pool.map(lambda t: run(a.vbts, env.name, *t, a.timeout), todo))
    finally:
        os.unlink(env.name)
    print('| test | vbts | P/F/S | seconds |\n| --- | --- | --- | --- |')
    totals = {}
    for name, verdict, (p, f, s), secs in rows:
        print(f'| {name} | {verdict} | {p}/{f}/{s} | {secs:.1f} |')
        totals[verdict] = totals.get(verdict, 0) + 1
    print('totals: ' + ', '.join(f'{v} {n}' for v, n in sorted(totals.items())))


if __name__ == '__main__':
    main()
