#!/usr/bin/env python3
"""gdb-test.py: Debian's gdb against vbts's gdbstub (ctest label gdb, docs/gdb.md).

    gdb-test.py --vbts build/vbts --gdb /usr/bin/gdb --images build/guest-tests [--engine=E]
                [--linux VMLINUX [--kallsyms FILE]] CASE

Each CASE starts `vbts run --gdb=127.0.0.1:0 --gdb-wait IMAGE` (port 0: vbts picks a
free port and names it on stderr), runs `gdb -batch -nx` with the case's commands and
checks gdb's output, the guest's output and vbts's exit status exactly.  The expected
values come from the guest's source (guest-tests/gdb/gdb_demo.c): leaf(x) = 3x+1,
middle(x) = leaf(x) + leaf(x+1) = 6x+5, counter = 5 + 11 + 17 = 33.
--engine passes vbts's --engine (kvm-tcg: the guest on KVM between the client's
stops); --linux and --kallsyms are Debian's kernel and its symbols for the linux
cases. Exit status 0: pass; 1: fail (with the difference on stderr); 77: skipped.
"""
import argparse
import contextlib
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

ARGS = None


def fail(msg, *outputs):
    sys.stderr.write("FAIL: %s\n" % msg)
    for name, text in outputs:
        sys.stderr.write("---- %s ----\n%s\n" % (name, text))
    sys.exit(1)


def symbols(image):
    """Function and object addresses from the image's symbol table (nm)."""
    out = subprocess.run(["nm", image], capture_output=True, text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            syms[parts[2]] = int(parts[0], 16)
    return syms


class Vbts:
    """One `vbts run --gdb` process; `port` once it listens."""

    def __init__(self, image, extra=(), wait=True, command=("run",)):
        cmd = [ARGS.vbts] + list(command) + ["--gdb=127.0.0.1:0", "--timeout=60"] + list(extra)
        if ARGS.engine and not any(e.startswith("--engine") for e in extra):
            cmd.append("--engine=%s" % ARGS.engine)
        if wait:
            cmd.append("--gdb-wait")
        cmd.append(image)
        self.cmd = cmd
        self.out = tempfile.TemporaryFile()
        self.err = tempfile.TemporaryFile()
        # With the stop signals' default dispositions, as from a terminal (a
        # signal the caller ignores, SIGINT in a job a script started with
        # `&`, would stay ignored in vbts: case ctrl_c_waiting).
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.err,
                                     preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL)
                                                         for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)])
        self.port = None
        deadline = time.time() + 20
        while time.time() < deadline and self.port is None:
            m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", self.read(self.err))
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        if self.port is None:
            self.proc.kill()
            fail("vbts did not start listening", ("stderr", self.read(self.err).decode(errors="replace")))

    @staticmethod
    def read(f):
        f.seek(0)
        return f.read()

    def stdout(self):
        return self.read(self.out).decode(errors="replace")

    def stderr(self):
        return self.read(self.err).decode(errors="replace")

    def wait(self, timeout=60):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            fail("vbts did not end", ("stderr", self.stderr()))


def run_gdb(vbts, image, commands, interrupt_after=None, arch=None):
    """Runs gdb -batch with `commands` against `vbts`; returns its output.

    interrupt_after: a callable polled while gdb runs with gdb's output so far;
    when it returns true, gdb gets SIGINT once (a user's Ctrl-C: gdb sends 0x03
    to the stub).  A list of them: one SIGINT each, in order."""
    # No `set architecture`: gdb takes the target description vbts gives
    # (i386 for this DWARF-32 image: Debugger::ArchForImage).
    script = ["set pagination off", "set confirm off", "set width 0"]
    if arch:
        script.append("set architecture %s" % arch)
    script += ["target remote 127.0.0.1:%d" % vbts.port] + commands
    with tempfile.NamedTemporaryFile("w", suffix=".gdb", delete=False) as f:
        f.write("\n".join(script) + "\n")
        path = f.name
    try:
        out = tempfile.TemporaryFile()
        proc = subprocess.Popen([ARGS.gdb, "-batch", "-nx", "-x", path] + ([image] if image else []), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.time() + 90
        triggers = list(interrupt_after) if isinstance(interrupt_after, list) else [interrupt_after] if interrupt_after else []
        while proc.poll() is None:
            if time.time() > deadline:
                proc.kill()
                fail("gdb did not end", ("gdb", Vbts.read(out).decode(errors="replace")),
                     ("vbts stderr", vbts.stderr()))
            if triggers and triggers[0](Vbts.read(out).decode(errors="replace")):
                proc.send_signal(signal.SIGINT)
                triggers.pop(0)
            time.sleep(0.02)
        return Vbts.read(out).decode(errors="replace")
    finally:
        os.unlink(path)


def expect(text, patterns, what, *context):
    """Every regex of `patterns` must match a line of `text`, in this order."""
    lines = text.splitlines()
    i = 0
    for p in patterns:
        rx = re.compile(p)
        while i < len(lines) and not rx.search(lines[i]):
            i += 1
        if i == len(lines):
            fail("%s: no line matching %r (in order)" % (what, p), (what, text), *context)
        i += 1


def demo():
    return os.path.join(ARGS.images, "gdb_demo.elf")


DEMO_OUTPUT = "gdb_demo: start\ncounter=33\nnot released\n"


def finish_demo(vbts, gdb_out, status=1, output=DEMO_OUTPUT):
    rc = vbts.wait()
    ctx = [("gdb", gdb_out), ("vbts stderr", vbts.stderr())]
    if rc != status:
        fail("vbts exited %d, expected %d" % (rc, status), *ctx)
    if vbts.stdout() != output:
        fail("guest output differs: %r, expected %r" % (vbts.stdout(), output), *ctx)


def first_code_byte(fn):
    """The first byte of function `fn` in gdb_demo.elf (objdump -d)."""
    dis = subprocess.run(["objdump", "-d", demo()], capture_output=True, text=True, check=True).stdout
    m = re.search(r"<%s>:\n\s*[0-9a-f]+:\s+([0-9a-f]{2})" % fn, dis)
    if not m:
        fail("no code for %s in objdump" % fn)
    return int(m.group(1), 16)


def case_break():
    # A breakpoint at leaf: the first call is leaf(0) from middle(0); `finish`
    # shows leaf(0) = 3*0+1 = 1; the next hit is leaf(1) (middle(0)'s second
    # call).  Then the guest runs to its end: counter=33, exit value 0 ("exited
    # normally": the stub reports the guest's isa-debug-exit value).
    # The guest reads leaf's first code byte into leaf_byte while the
    # breakpoint is set: it reads its own byte (objdump), not an INT3 (0xcc).
    v = Vbts(demo())
    out = run_gdb(v, demo(), ["break leaf", "continue", "finish", "continue", "print x", "print/x leaf_byte",
                              "delete", "continue"])
    expect(out, [r"Breakpoint 1 at 0x[0-9a-f]+: file .*gdb_demo\.c", r"Breakpoint 1, leaf \(x=(x@entry=)?0\)",
                 r"Value returned is \$1 = 1",
                 r"Breakpoint 1, leaf \(x=(x@entry=)?1\)", r"^\$2 = 1$", r"^\$3 = 0x%02x$" % first_code_byte("leaf"),
                 r"\[Inferior 1 \(Remote target\) exited normally\]"],
           "gdb")
    finish_demo(v, out)


def case_step():
    # stepi from the entry moves one instruction: _start's `mov $stack_top, %esp`
    # is 5 bytes (bc imm32), so $pc goes from _start to _start+5.  Then `break
    # step`, `step` into middle (source stepping: vCont;r range steps),
    # `next` over its leaf call, and `up` shows the caller.
    syms = symbols(demo())
    v = Vbts(demo())
    out = run_gdb(v, demo(), ["print/x $pc", "stepi", "print/x $pc", "break step", "continue", "step",
                              "bt 2", "next", "info frame", "delete", "continue"])
    expect(out, [r"^\$1 = 0x%x$" % syms["_start"], r"^\$2 = 0x%x$" % (syms["_start"] + 5),
                 r"Breakpoint 1, step \(i=(i@entry=)?0\)", r"^middle \(x=(x@entry=)?0\) at .*gdb_demo\.c", r"^#0\s+middle \(x=(x@entry=)?0\)",
                 r"^#1\s+0x[0-9a-f]+ in step \(i=(i@entry=)?0\)", r"exited normally"], "gdb")
    finish_demo(v, out)


def case_watch():
    # A write watchpoint on `counter`: step(0) writes 0 + middle(0) = 5, step(1)
    # 5 + 11 = 16 (middle(x) = 6x+5).  The stop is after the writing instruction,
    # inside step().
    # Then a read watchpoint on spin_limit, which main reads once, after the
    # three steps (2000000, its initial value), and an access watchpoint on
    # release, which spin() reads in its loop.
    v = Vbts(demo())
    out = run_gdb(v, demo(), ["watch counter", "continue", "continue", "delete", "rwatch spin_limit", "continue",
                              "bt 1", "delete", "awatch release", "continue", "bt 1", "delete", "continue"])
    expect(out, [r"Hardware watchpoint 1: counter", r"Old value = 0", r"New value = 5", r"step \(i=(i@entry=)?0\)",
                 r"Old value = 5", r"New value = 16", r"Hardware read watchpoint 2: spin_limit",
                 r"Value = 2000000", r"^#0\s+.*main \(", r"Hardware access \(read/write\) watchpoint 3: release",
                 r"Value = 0", r"^#0\s+.*spin \(", r"exited normally"], "gdb")
    finish_demo(v, out)


def case_watch_btrace():
    # A write watchpoint while GDB's branch trace runs: the TCG engine then runs
    # blocks with one hook and finds the boundary after the store by running
    # it again alone (docs/tcg-engine.md, "Watched accesses").  From step(0)'s
    # entry: the store 0 + middle(0) = 5 stops in step(0), then 5 + 11 = 16 in
    # step(1); the history up to there is step's call of middle (which calls
    # leaf twice), the return to main and the same again from step(1), in
    # step after the store each time (the source: gdb_demo.c).
    v = Vbts(demo())
    out = run_gdb(v, demo(), ["break step", "continue", "delete", "record btrace bts", "watch counter", "continue",
                              "continue", "record function-call-history 1,100", "record stop", "delete",
                              "continue"])
    got = re.findall(r"^\d+\t(\w+)$", out, re.M)
    want = ["step", "middle", "leaf", "middle", "leaf", "middle", "step", "main", "step", "middle", "leaf", "middle",
            "leaf", "middle", "step"]
    if got != want:
        fail("function-call-history %s, expected %s" % (got, want), ("gdb", out), ("vbts", v.stderr()))
    expect(out, [r"Breakpoint 1, step \(i=(i@entry=)?0\)", r"Hardware watchpoint 2: counter", r"Old value = 0",
                 r"New value = 5", r"step \(i=(i@entry=)?0\)", r"Old value = 5", r"New value = 16",
                 r"step \(i=(i@entry=)?1\)", r"exited normally"], "gdb", ("vbts", v.stderr()))
    finish_demo(v, out)


def case_interrupt():
    # spin() runs until `release` is set: the guest would spin ~forever with
    # spin_limit = 0xffffffff.  Ctrl-C (SIGINT to gdb, which sends 0x03) stops
    # it in spin() with SIGINT; setting release=1 lets it end ("released").
    v = Vbts(demo())
    ready = lambda _: "counter=33" in v.stdout()
    out = run_gdb(v, demo(), ["set var spin_limit = 0xffffffff", "continue", "bt 1", "set var release = 1",
                              "continue"], interrupt_after=ready)
    expect(out, [r"Program received signal SIGINT", r"^#0\s+.*spin \(", r"exited normally"], "gdb")
    finish_demo(v, out, output="gdb_demo: start\ncounter=33\nreleased\n")


# `monitor info engine` with --engine=kvm-tcg, N moves between KVM and TCG so far.
MOVES = r"^engine: tcg while GDB needs it .* KVM otherwise; %d moves between them so far; GDB branch trace: off$"


def case_kvm_moves():
    # --engine=kvm-tcg (what `auto` is on VT-x/SVM hosts): the guest runs on KVM
    # while GDB needs nothing of the TCG engine, and moves there for each stop.
    # Moves, counted by `monitor info engine`: 1 before the first instruction
    # (--gdb-wait); the breakpoint at leaf keeps the guest in TCG; `delete` +
    # `continue` moves it back to KVM (2), where it spins until Ctrl-C moves
    # it to TCG again (3), in spin(); with release=1 it runs on to its end on
    # KVM (4: "released", exit value 0).
    v = Vbts(demo(), extra=["--engine=kvm-tcg"])
    ready = lambda _: "counter=33" in v.stdout()
    out = run_gdb(v, demo(), ["monitor info engine", "break leaf", "continue", "monitor info engine", "delete",
                              "set var spin_limit = 0xffffffff", "continue", "monitor info engine", "bt 1",
                              "set var release = 1", "continue"], interrupt_after=ready)
    expect(out, [MOVES % 1, r"Breakpoint 1, leaf \(x=(x@entry=)?0\)", MOVES % 1, r"Program received signal SIGINT",
                 MOVES % 3, r"^#0\s+.*spin \(", r"exited normally"], "gdb", ("vbts", v.stderr()))
    finish_demo(v, out, output="gdb_demo: start\ncounter=33\nreleased\n")


def case_kvm_halted():
    # --engine=kvm-tcg: the guest waits in HLT on KVM (interrupts enabled, none
    # programmed) when Ctrl-C comes; it moves to TCG still halted (moves: 1 at
    # the start, 2 back to KVM at `continue`, 3 at Ctrl-C) and stops right
    # after its HLT; `kill` ends the run (status 114, docs/cli.md).
    v = Vbts(demo(), extra=["--engine=kvm-tcg"])
    # Still halted in TCG, `continue` leaves it halted there (it goes back to
    # KVM only once it runs), so a second Ctrl-C stops it at the same place
    # (sent 1 s after the first `monitor info engine`: GDB has resumed by then;
    # a SIGINT before that would quit the batch script instead).
    napping = lambda _: "napping" in v.stdout()
    again = lambda gdb_out: "moves between them" in gdb_out and time.sleep(1.0) is None
    out = run_gdb(v, demo(), ["set var spin_limit = 0", "set var nap = 1", "continue", "x/i $pc - 1",
                              "monitor info engine", "continue", "x/i $pc - 1", "monitor info engine", "kill"],
                  interrupt_after=[napping, again])
    hlt = r":\s+hlt\s*$"
    expect(out, [r"Program received signal SIGINT", hlt, MOVES % 3, r"Program received signal SIGINT", hlt, MOVES % 3],
           "gdb", ("vbts", v.stderr()))
    if v.stdout() != "gdb_demo: start\ncounter=33\nnot released\nnapping\n":
        fail("guest output %r" % v.stdout(), ("gdb", out), ("vbts", v.stderr()))
    rc = v.wait()
    if rc != 114:
        fail("vbts exited %d after kill, expected 114" % rc, ("gdb", out), ("vbts", v.stderr()))


def case_ctrl_c_waiting():
    # Ctrl-C (SIGINT) to vbts itself while --gdb-wait waits for a client that
    # never comes: the run ends cleanly, status 130 (vmm/stop_signals.h).
    v = Vbts(demo())
    v.proc.send_signal(signal.SIGINT)
    rc = v.wait(timeout=10)
    if rc != 130 or "vbts: stopped by SIGINT (Ctrl-C); the run ended cleanly" not in v.stderr():
        fail("vbts exited %d after SIGINT, expected 130" % rc, ("vbts", v.stderr()))


def case_exec_file():
    # GDB started without the image: vbts offers it (qXfer:exec-file:read,
    # as gdbserver does), GDB loads its symbols, and a breakpoint by name
    # works as in `break`: leaf(0) first, called from middle(0) (gdb_demo.c).
    v = Vbts(demo())
    out = run_gdb(v, None, ["break leaf", "continue", "bt 2", "delete", "continue"])
    expect(out, [r"Breakpoint 1 at 0x[0-9a-f]+: file .*gdb_demo\.c", r"Breakpoint 1, leaf \(x=(x@entry=)?0\)",
                 r"^#1\s+0x[0-9a-f]+ in middle \(x=(x@entry=)?0\)", r"exited normally"], "gdb")
    finish_demo(v, out)


def case_registers():
    # At the Multiboot entry (docs/guest-abi.md): EAX = 0x2BADB002, CS = 0x08
    # flat 32-bit code, CR0 = PE|ET = 0x11, EFER = 0; `monitor info registers`
    # and `monitor info cpu` answer from vbts; writes of EAX read back.
    # `monitor info lapic`: the LAPIC as the guest finds it, the reset state
    # (SDM 10.4.7.1: SVR 0FFH, software disabled, LVT entries masked; version
    # 14H with 6 LVT entries, docs/guest-abi.md) but LINT0 in ExtINT mode
    # unmasked (KVM's virtual wire), no timer armed.
    syms = symbols(demo())
    v = Vbts(demo())
    out = run_gdb(v, demo(), ["info registers eax eip cs cr0 efer", "set $ebx = 0x1234", "print/x $ebx",
                              "monitor info cpu", "monitor info pmu", "monitor info registers",
                              "monitor info lapic", "continue"])
    expect(out, [r"^eax\s+0x2badb002", r"^eip\s+0x%x" % syms["_start"], r"^cs\s+0x8\s", r"^cr0\s+0x11\b",
                 r"^efer\s+0x0\b", r"^\$1 = 0x1234$", r"^westmere: ", r"CPU model: westmere",
                 r"IA32_DEBUGCTL\s+0x0000000000000000", r"LBR stack, 16 entries",
                 r"^LAPIC \(xAPIC mode, software disabled\); guest clock on host time", r"^\s+version\s+00050014$",
                 r"^\s+SVR\s+000000ff$", r"^\s+LVT timer\s+00010000$", r"^\s+LVT LINT0\s+00000700$",
                 r"^\s+no timer interrupt due$", r"exited normally"], "gdb")
    finish_demo(v, out)


def case_memory():
    # x/ reads guest memory through the guest's view (no paging here: linear =
    # physical); the Multiboot magic of start.S sits at 0x100000.  A write
    # through `set var` changes what the guest then uses (spin_limit = 3 makes
    # no difference to the output); an address beyond RAM (128 MiB) gives an
    # error, never a crash.
    v = Vbts(demo())
    # (An error ends gdb's batch script: the unreadable address comes last, and
    # gdb then detaches, so the guest runs to its end on its own.)
    out = run_gdb(v, demo(), ["x/3wx 0x100000", "print spin_limit", "set var spin_limit = 3", "print spin_limit",
                              "x/wx 0x9000000"])
    expect(out, [r"^0x100000.*:\s+0x1badb002\s+0x00000003\s+0xe4524ffb$", r"^\$1 = 2000000$", r"^\$2 = 3$",
                 r"Cannot access memory at address 0x9000000", r"detached"], "gdb")
    finish_demo(v, out)


def blocks_from_record(image, syms):
    """GDB's BTS blocks (begin, end) oldest first, from `vbts record` over the
    same interval: a block runs from where a transfer lands to the next
    transfer's source, from step(0)'s entry to step(1)'s, whose block is only
    the current PC."""
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "t.vbtr")
        subprocess.run([ARGS.vbts, "record", "-o", trace, image], capture_output=True, check=False)
        rep = subprocess.run([ARGS.vbts, "report", "--format=branches", trace], capture_output=True, text=True,
                             check=True).stdout
    blocks, begin = [], None
    for line in rep.splitlines():
        frm, to = (int(x, 16) for x in line.split()[:2])
        if begin is not None:
            blocks.append((begin, frm))
            begin = to
            if to == syms["step"]:
                blocks.append((to, to))
                return blocks
        elif to == syms["step"]:
            begin = to
    fail("vbts record: step was not entered twice")


def call_history_from_record(image, syms, stop_fn="step", stop_arrival=2):
    """The functions entered and returned to from the first arrival at step()
    until arrival number `stop_arrival` at `stop_fn` (the current PC, left
    out), from `vbts record` + `vbts report --format=branches`."""
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "t.vbtr")
        subprocess.run([ARGS.vbts, "record", "-o", trace, image], capture_output=True, check=False)
        rep = subprocess.run([ARGS.vbts, "report", "--format=branches", trace], capture_output=True, text=True,
                             check=True).stdout
    funcs = sorted((addr, name) for name, addr in syms.items() if name in
                   ("main", "step", "middle", "leaf", "spin", "puts_com1", "put_dec", "putc_com1", "_start"))

    def fn(addr):
        best = None
        for a, n in funcs:
            if a <= addr:
                best = n
        return best

    seq = []
    started = False
    arrivals = 0
    for line in rep.splitlines():
        frm, to, kind = line.split()[:3]
        to = int(to, 16)
        if kind in ("call", "ret", "ind-call"):
            if to == syms[stop_fn] and started:
                arrivals += 1
                if arrivals == stop_arrival - (1 if stop_fn == "step" else 0):
                    # GDB stops before the function's first instruction: its
                    # history ends with the call, the current PC is not in it.
                    break
            if to == syms["step"]:
                started = True
            if started:
                seq.append(fn(to))
    return seq


def main_call_to_step(image, syms):
    """The address of main's call of step(1) (objdump): gcc -O1 unrolls the
    three-iteration loop into three calls in order, step(0), step(1), step(2)."""
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", image], capture_output=True, text=True,
                         check=True).stdout
    sites = [int(m.group(1), 16) for m in re.finditer(r"^\s*([0-9a-f]+):\s+call\s+%x <step>" % syms["step"], dis,
                                                       re.M)]
    if len(sites) != 3:
        fail("expected three calls of step in the image, found %d" % len(sites))
    return sites[1]


def case_btrace():
    # `record btrace bts` from step(0)'s entry to step(1)'s: step calls middle,
    # which calls leaf twice, then main's loop calls step again.  GDB's
    # function-call history must be exactly the sequence vbts record sees over
    # the same interval: step middle leaf middle leaf middle step main (the
    # current PC, step(1)'s first instruction, has not run: GDB leaves it out).
    # The last instruction that ran is main's `call step`: reverse-stepi goes
    # back onto it, and `record goto end` returns to step's entry.
    syms = symbols(demo())
    expected = call_history_from_record(demo(), syms)
    if expected != ["step", "middle", "leaf", "middle", "leaf", "middle", "step", "main"]:
        fail("vbts record's call sequence is %s" % expected)
    call = main_call_to_step(demo(), syms)
    v = Vbts(demo())
    out = run_gdb(v, demo(), ["break step", "continue", "record btrace bts", "continue",
                              "record function-call-history 1,100", "maint btrace packet-history",
                              "record instruction-history",
                              "reverse-stepi", "print/x $pc", "record goto end", "print/x $pc", "info record",
                              "record stop", "delete", "continue"])
    got = re.findall(r"^\d+\t(\w+)$", out, re.M)
    if got != expected:
        fail("function-call-history %s, vbts record %s" % (got, expected), ("gdb", out), ("vbts", v.stderr()))
    # The blocks GDB read (newest first in the XML, oldest first here) are
    # the blocks vbts record's transfers give over the same interval.
    got_blocks = [(int(b, 16), int(e, 16)) for b, e in
                  re.findall(r"^\d+\tbegin: (0x[0-9a-f]+), end: (0x[0-9a-f]+)$", out, re.M)]
    want_blocks = blocks_from_record(demo(), syms)
    if got_blocks != want_blocks:
        fail("GDB's blocks %s, vbts record's %s" % ([(hex(a), hex(b)) for a, b in got_blocks],
                                                    [(hex(a), hex(b)) for a, b in want_blocks]), ("gdb", out))
    expect(out, [r"Breakpoint 1, step \(i=(i@entry=)?0\)", r"Breakpoint 1, step \(i=(i@entry=)?1\)",
                 r"^\d+\t\s*0x%08x <main\+\d+>:\s+call\s+0x%x <step>$" % (call, syms["step"]),
                 r"^\$1 = 0x%x$" % call, r"^\$2 = 0x%x$" % syms["step"],
                 r"Active record target: record-btrace", r"Recording format: Branch Trace Store",
                 r"exited normally"], "gdb", ("vbts", v.stderr()))
    finish_demo(v, out)


def case_btrace_stops():
    # The trace across several stops (GDB reads a delta at each and stitches
    # it to what it has): from step(0)'s entry, four stops at leaf
    # (leaf(0), leaf(1) in middle(0), leaf(1), leaf(2) in middle(1)); at the
    # first, step's 4 instructions and middle's 6 up to its call have run
    # (objdump of gdb_demo.elf: 10 instructions in 2 functions); the
    # whole history must be vbts record's sequence up to the fourth arrival
    # at leaf: step middle leaf middle leaf middle step main step middle leaf
    # middle.
    syms = symbols(demo())
    expected = call_history_from_record(demo(), syms, stop_fn="leaf", stop_arrival=4)
    if expected != ["step", "middle", "leaf", "middle", "leaf", "middle", "step", "main", "step", "middle", "leaf",
                    "middle"]:
        fail("vbts record's call sequence is %s" % expected)
    v = Vbts(demo())
    out = run_gdb(v, demo(), ["break step", "continue", "delete", "record btrace bts", "break leaf", "continue",
                              "info record", "continue", "continue", "continue", "record function-call-history 1,100",
                              "record stop", "delete", "continue"])
    got = re.findall(r"^\d+\t(\w+)$", out, re.M)
    if got != expected:
        fail("function-call-history %s, vbts record %s" % (got, expected), ("gdb", out), ("vbts", v.stderr()))
    expect(out, [r"leaf \(x=(x@entry=)?0\)", r"Recorded 10 instructions in 2 functions",
                 r"leaf \(x=(x@entry=)?2\)", r"exited normally"], "gdb")
    finish_demo(v, out)


def case_btrace_guest_bts():
    # GDB's trace and the guest's own BTS are independent: exp14_9 checks its
    # own BTS records exactly (PASS lines, exit value 0) while GDB traces the
    # whole run with record btrace bts, and its output is byte for byte the
    # output of a run without GDB.
    image = os.path.join(ARGS.images, "exp14_9.elf")
    plain = subprocess.run([ARGS.vbts, "run", image], capture_output=True, text=True)
    v = Vbts(image)
    out = run_gdb(v, image, ["record btrace bts", "continue"])
    expect(out, [r"exited normally"], "gdb")
    rc = v.wait()
    if rc != plain.returncode or v.stdout() != plain.stdout:
        fail("exp14_9 under GDB's trace: status %d, output differs from the plain run (status %d)" %
             (rc, plain.returncode), ("traced", v.stdout()), ("plain", plain.stdout), ("gdb", out))
    if "PASS" not in plain.stdout or rc != 1:
        fail("exp14_9 did not pass", ("plain", plain.stdout))


def case_lm64():
    # A 64-bit guest (branchy_lm64: NASM, an ELF32 container of 64-bit code,
    # so the x86-64 description is asked for with --gdb-arch and gdb is told
    # the architecture, as docs/gdb.md says).  At main (64-bit code):
    # CS = SEL_KCODE64 = 0x38 (guest-tests/lib/defs.inc), EFER = LME|LMA
    # (lm64.inc sets LME, the CPU sets LMA when paging turns on) = 0x500,
    # RIP = main's address, and a step moves RIP by the first instruction's
    # length (objdump).
    image = os.path.join(ARGS.images, "branchy_lm64.elf")
    syms = symbols(image)
    dis = subprocess.run(["objdump", "-d", "-M", "x86-64", "-m", "i386:x86-64", "--no-show-raw-insn",
                          "--start-address=0x%x" % syms["main"], "--stop-address=0x%x" % (syms["main"] + 16), image],
                         capture_output=True, text=True, check=True).stdout
    addrs = [int(m.group(1), 16) for m in re.finditer(r"^\s*([0-9a-f]+):", dis, re.M)]
    v = Vbts(image, extra=["--gdb-arch=x86-64"])
    out = run_gdb(v, None, ["break *0x%x" % syms["main"], "continue", "info registers rip cs efer",
                            "stepi", "print/x $rip", "delete", "continue"], arch="i386:x86-64")
    expect(out, [r"^rip\s+0x%x\s" % syms["main"], r"^cs\s+0x38\s", r"^efer\s+0x500\b",
                 r"^\$1 = 0x%x$" % addrs[1], r"exited normally"], "gdb", ("vbts", v.stderr()))
    if v.wait() != 1:
        fail("branchy_lm64 did not pass under gdb", ("vbts", v.stderr()), ("gdb", out))


def case_lm64_alias():
    # A breakpoint on a 64-bit address set while the guest still runs its
    # 32-bit entry (--gdb-wait): int_lm64 calls alias_fn through the high
    # alias RT_ALIAS = 0xFFFFFFF810000000 of its load address 1 MiB
    # (guest-tests/lib/defs.inc), so the call arrives at
    # 0xFFFFFFF810000000 + (alias_fn - 0x100000) in IA-32e mode. GDB stops
    # there once (before 2026-11-26 the address was cut to 32 bits when set
    # and never hit). A Linux kernel's breakpoints are set the same way.
    image = os.path.join(ARGS.images, "int_lm64.elf")
    syms = symbols(image)
    alias = 0xFFFFFFF810000000 + syms["alias_fn"] - 0x100000
    v = Vbts(image, extra=["--gdb-arch=x86-64"])
    out = run_gdb(v, None, ["print/x $pc", "break *0x%x" % alias, "continue", "print/x $rip", "print/x $efer",
                            "delete", "continue"], arch="i386:x86-64")
    expect(out, [r"^\$2 = 0x%x$" % alias, r"^\$3 = 0x500$", r"exited normally"], "gdb", ("vbts", v.stderr()))
    if int(re.search(r"^\$1 = (0x[0-9a-f]+)$", out, re.M).group(1), 16) >= 1 << 32:
        fail("int_lm64 did not start in 32-bit code", ("gdb", out))
    if v.wait() != 1:
        fail("int_lm64 did not pass under gdb", ("vbts", v.stderr()), ("gdb", out))


def case_faults():
    # Steps across faults and privilege changes (user_fault_pm32): the ring-3
    # `ud2` at ud_site stops with CS = 0x1b (SEL_UCODE32); one stepi delivers
    # #UD through the IDT and stops at the first instruction of its ring-0
    # entry, rt_stub32_6, with CS = 0x08; the ring-3 `int 0x42` at int_site
    # meets a DPL-0 gate, so its stepi ends at the #GP entry rt_stub32_13.
    image = os.path.join(ARGS.images, "user_fault_pm32.elf")
    syms = symbols(image)
    v = Vbts(image)
    out = run_gdb(v, image, ["break *0x%x" % syms["ud_site"], "continue", "print/x $cs", "stepi",
                             "print/x $pc", "print/x $cs", "delete", "break *0x%x" % syms["int_site"], "continue",
                             "stepi", "print/x $pc", "print/x $cs", "delete", "continue"])
    expect(out, [r"^\$1 = 0x1b$", r"^\$2 = 0x%x$" % syms["rt_stub32_6"], r"^\$3 = 0x8$",
                 r"^\$4 = 0x%x$" % syms["rt_stub32_13"], r"^\$5 = 0x8$", r"exited normally"], "gdb",
           ("vbts", v.stderr()))
    if v.wait() != 1:
        fail("user_fault_pm32 did not pass under gdb", ("gdb", out))


def case_record():
    # `vbts record --gdb`: GDB's stops change nothing in the recording; the
    # transfers (vbts report --format=branches) of a run stopped at every call
    # of leaf (6 times: middle(0), middle(1) and middle(2) call it twice each)
    # equal those of a plain recording, byte for byte.
    with tempfile.TemporaryDirectory() as d:
        plain, debugged = os.path.join(d, "plain.vbtr"), os.path.join(d, "gdb.vbtr")
        subprocess.run([ARGS.vbts, "record", "-o", plain, demo()], capture_output=True)
        v = Vbts(demo(), command=("record", "-o", debugged))
        out = run_gdb(v, demo(), ["break leaf"] + ["continue"] * 6 + ["delete", "continue"])
        hits = len(re.findall(r"Breakpoint 1, leaf", out))
        if hits != 6:
            fail("leaf was hit %d times, expected 6 (two calls in each of middle(0), middle(1), middle(2))" % hits,
                 ("gdb", out))
        finish_demo(v, out)
        reports = [subprocess.run([ARGS.vbts, "report", "--format=branches", t], capture_output=True, text=True,
                                  check=True).stdout for t in (plain, debugged)]
        if reports[0] != reports[1] or not reports[0]:
            fail("the recording under gdb differs from the plain one (%d vs %d lines)" %
                 (reports[0].count("\n"), reports[1].count("\n")))


def case_stops_under_guest_bts():
    # GDB's stops leave no record in the guest's BTS: exp14_9 checks its own
    # ten BTS records exactly while GDB stops at j5 (inside the traced jumps),
    # steps three instructions (j5 -> j6 -> j7 -> j8: each jump is 2 bytes)
    # and continues; the guest's verdict and output are those of a plain run.
    image = os.path.join(ARGS.images, "exp14_9.elf")
    syms = symbols(image)
    plain = subprocess.run([ARGS.vbts, "run", image], capture_output=True, text=True)
    v = Vbts(image)
    out = run_gdb(v, image, ["break *0x%x" % syms["j5"], "continue", "stepi", "stepi", "stepi", "print/x $pc",
                             "monitor info pmu", "delete", "continue"])
    expect(out, [r"Breakpoint 1, 0x0*%x in j5" % syms["j5"], r"^\$1 = 0x%x$" % syms["j8"],
                 r"IA32_DEBUGCTL\s+0x00000000000000c0", r"exited normally"], "gdb")
    rc = v.wait()
    if rc != plain.returncode or v.stdout() != plain.stdout or rc != 1:
        fail("exp14_9 with GDB's stops: status %d, output differs from the plain run (status %d)" %
             (rc, plain.returncode), ("stopped", v.stdout()), ("plain", plain.stdout), ("gdb", out))


def raw(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s


def packet(payload):
    return b"$%s#%02x" % (payload, sum(payload) & 0xFF)


def recv_reply(s):
    """One reply packet's payload (after acking it)."""
    buf = b""
    while True:
        m = re.search(rb"\$([^#]*)#([0-9a-f]{2})", buf)
        if m:
            s.sendall(b"+")
            return m.group(1)
        chunk = s.recv(65536)
        if not chunk:
            return None
        buf += chunk


def case_bad_clients():
    # A client that misbehaves gets the protocol's error reply or a clean
    # close, and vbts goes on: a bad checksum is NAKed ('-'), a read of memory
    # beyond RAM is an E reply, an absurd length is bounded, malformed packets
    # get E replies, garbage between packets is ignored, a good packet after
    # all that is answered (m100000,4: the Multiboot magic 0x1badb002, little-
    # endian "02b0ad1b"), and a client that disconnects in the middle of a
    # packet lets the guest run on to its normal end.
    v = Vbts(demo())
    s = raw(v.port)
    s.sendall(b"$g#00")  # wrong checksum
    ack = s.recv(1)
    if ack != b"-":
        fail("bad checksum answered %r, expected '-'" % ack)
    replies = {}
    for p in [b"m9000000,4", b"mffffffffffffffff,ffffffffffffffff", b"Zq,zz,1", b"X100000,4:ab", b"m", b"p999",
              b"Gzz", b"vCont;q"]:
        s.sendall(packet(p))
        replies[p] = recv_reply(s)
    if not replies[b"m9000000,4"].startswith(b"E"):
        fail("read beyond RAM answered %r" % replies[b"m9000000,4"])
    if len(replies[b"mffffffffffffffff,ffffffffffffffff"]) > 0x4000:
        fail("a huge read answered %d bytes" % len(replies[b"mffffffffffffffff,ffffffffffffffff"]))
    for p in [b"Zq,zz,1", b"X100000,4:ab", b"m", b"p999", b"Gzz"]:
        if not replies[p].startswith(b"E") and replies[p] != b"":
            fail("malformed %r answered %r" % (p, replies[p]))
    s.sendall(b"\x00\xff garbage ##" + packet(b"m100000,4"))
    r = recv_reply(s)
    if r != b"02b0ad1b":
        fail("m100000,4 after garbage answered %r, expected 02b0ad1b" % r)
    s.sendall(b"$m100000,4#")  # disconnect in the middle of a packet
    s.close()
    finish_demo(v, "(raw client)")
    if "client disconnected; the guest runs on" not in v.stderr():
        fail("vbts did not report the disconnect", ("vbts", v.stderr()))


def case_detach():
    # `detach` lets the guest run on without a client: it ends by itself.
    v = Vbts(demo())
    out = run_gdb(v, demo(), ["break leaf", "continue", "detach"])
    expect(out, [r"Breakpoint 1, leaf \(x=(x@entry=)?0\)", r"\[Inferior 1 \(Remote target\) detached\]"], "gdb")
    finish_demo(v, out)


def case_kill():
    # `kill` ends the run: vbts exits with 114 (docs/cli.md).
    v = Vbts(demo())
    out = run_gdb(v, demo(), ["break middle", "continue", "kill"])
    expect(out, [r"Breakpoint 1, middle \(x=(x@entry=)?0\)"], "gdb")
    rc = v.wait()
    if rc != 114:
        fail("vbts exited %d after kill, expected 114" % rc, ("gdb", out), ("vbts", v.stderr()))


def ksymtab(kernel):
    """The exported symbols of a vmlinux without a symbol table (Debian's is
    stripped): its __ksymtab and __ksymtab_gpl sections, whose 12-byte entries
    (Linux 4.19+ on x86-64, CONFIG_HAVE_ARCH_PREL32_RELOCATIONS) are three
    32-bit offsets, each relative to its own field: the symbol's address, its
    name in __ksymtab_strings, its namespace."""
    out = subprocess.run(["readelf", "-S", "-W", kernel], capture_output=True, text=True, check=True).stdout
    secs = {}
    for line in out.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m:
            secs[m.group(1)] = tuple(int(g, 16) for g in m.groups()[1:])
    if "__ksymtab_strings" not in secs:
        fail("%s has no __ksymtab_strings section" % kernel)
    data = open(kernel, "rb").read()
    saddr, soff, ssize = secs["__ksymtab_strings"]
    syms = {}
    for name in ("__ksymtab", "__ksymtab_gpl"):
        addr, off, size = secs[name]
        for at in range(0, size - size % 12, 12):
            value, name_rel, _ = struct.unpack_from("<iii", data, off + at)
            name_addr = addr + at + 4 + name_rel
            if not saddr <= name_addr < saddr + ssize:
                fail("%s: a %s entry names no string (not the PREL32 layout)" % (kernel, name))
            so = soff + name_addr - saddr
            syms[data[so:data.index(b"\0", so)].decode()] = (addr + at + value) & 0xFFFFFFFFFFFFFFFF
    return syms


def case_linux():
    # Debian's kernel (nokaslr: its link-time addresses) under GDB, by the
    # addresses of two exported functions: a hardware breakpoint at
    # register_console stops there in 64-bit ring 0 with Linux's kernel code
    # segment (GDT_ENTRY_KERNEL_CS 2: selector 0x10); then GDB's branch trace
    # up to _printk, which the kernel calls there to announce the console:
    # no gaps, the last instruction recorded transfers to _printk, and
    # reverse-stepi goes back to it. The guest's own DEBUGCTL stays 0 (GDB's
    # trace is not the guest's BTS). Without the kernel (scripts/fetch-linux.sh):
    # skipped.
    if not ARGS.linux or not os.path.exists(ARGS.linux):
        print("SKIP: no Debian kernel (scripts/fetch-linux.sh)")
        sys.exit(77)
    syms = ksymtab(ARGS.linux)
    console, printk = syms["register_console"], syms["_printk"]
    v = Vbts(ARGS.linux, extra=["--mem=512M", "--cpu=skylake", "--append=console=ttyS0 panic=-1 nokaslr"])
    out = run_gdb(v, None, ["hbreak *0x%x" % console, "continue", "print/x $pc", "print/x $cs", "delete",
                            "record btrace bts", "break *0x%x" % printk, "continue", "info record",
                            "set record instruction-history-size 1", "record instruction-history",
                            "reverse-stepi", "print/x $pc", "monitor pmu", "kill"])
    ctx = [("gdb", out), ("vbts stderr", v.stderr())]
    expect(out, [r"^\$1 = 0x%x$" % console, r"^\$2 = 0x10$", r"Breakpoint 2, 0x0*%x in \?\? \(\)" % printk,
                 r"Recorded \d+ instructions in \d+ functions \(0 gaps\)",
                 r"^\d+\s+0x[0-9a-f]+:\s+(call|jmp)\s+0x%x$" % printk, r"^IA32_DEBUGCTL\s+0x0+$"], "gdb", *ctx[1:])
    last = re.search(r"^\d+\s+(0x[0-9a-f]+):\s+(?:call|jmp)\s+0x%x$" % printk, out, re.M).group(1)
    expect(out, [r"^\$3 = %s$" % last], "gdb", *ctx[1:])
    rc = v.wait()
    if rc != 114:
        fail("vbts exited %d after kill, expected 114" % rc, *ctx)


@contextlib.contextmanager
def kallsyms_elf(kernel):
    """The kernel's symbols from --kallsyms (linux.kallsyms wrote them) as an
    ELF file GDB loads (`vbts symbols`); skips (77) without the kernel or them."""
    if not ARGS.linux or not os.path.exists(kernel) or not ARGS.kallsyms or not os.path.exists(ARGS.kallsyms):
        print("SKIP: no %s or no symbols from it (scripts/fetch-linux.sh, ctest linux.kallsyms)" % kernel)
        sys.exit(77)
    with tempfile.TemporaryDirectory() as d:
        elf = os.path.join(d, "kallsyms.elf")
        r = subprocess.run([ARGS.vbts, "symbols", ARGS.kallsyms, "-o", elf], capture_output=True, text=True)
        if r.returncode != 0 or not re.search(r"vbts symbols: \d{5} functions from", r.stderr):
            fail("vbts symbols exited %d" % r.returncode, ("stderr", r.stderr))
        yield elf


def case_linux_kallsyms():
    # Debian's kernel (PVH entry: its link addresses) with no symbols of its
    # own (vmlinux is stripped): the guest's /proc/kallsyms, as linux.kallsyms
    # wrote it, becomes an ELF symbol file (`vbts symbols`) that GDB loads.
    # A hardware breakpoint by name at start_kernel stops there (`info symbol`
    # names it, `x/i` shows its first instruction, the ftrace call to
    # __fentry__); a breakpoint at setup_arch, start_kernel's tenth call
    # (init/main.c, run-linux.py's KALLSYMS_CALLS), stops with start_kernel
    # as its caller in `bt`.
    with kallsyms_elf(ARGS.linux) as elf:
        v = Vbts(ARGS.linux, extra=["--mem=512M", "--cpu=skylake", "--append=console=ttyS0 panic=-1 nokaslr"])
        out = run_gdb(v, None, ["symbol-file %s" % elf, "hbreak start_kernel", "continue", "info symbol $pc",
                                "x/i $pc", "break setup_arch", "continue", "bt 2", "kill"])
        expect(out, [r"Breakpoint 1, 0x[0-9a-f]+ in start_kernel \(\)", r"^start_kernel in section \.text$",
                     r"<start_kernel>:\s+call\s+0x[0-9a-f]+ <__fentry__>", r"Breakpoint 2, 0x[0-9a-f]+ in setup_arch",
                     r"^#0\s+0x[0-9a-f]+ in setup_arch \(\)", r"^#1\s+0x[0-9a-f]+ in start_kernel \(\)"], "gdb",
               ("vbts stderr", v.stderr()))
        rc = v.wait()
        if rc != 114:
            fail("vbts exited %d after kill, expected 114" % rc, ("gdb", out), ("vbts stderr", v.stderr()))


def case_linux_bzimage():
    # The same kernel as Debian ships it (vmlinuz beside vmlinux: Linux's own
    # boot protocol, its decompressor first) with `nokaslr`: it runs at its
    # link addresses, so the symbols of the PVH boots (linux.kallsyms) hold,
    # and a hardware breakpoint by name at start_kernel stops there after the
    # decompression.
    vmlinuz = os.path.join(os.path.dirname(ARGS.linux or ""), "vmlinuz")
    with kallsyms_elf(vmlinuz) as elf:
        v = Vbts(vmlinuz, extra=["--mem=512M", "--cpu=skylake", "--append=console=ttyS0 panic=-1 nokaslr"])
        out = run_gdb(v, None, ["set architecture i386:x86-64", "symbol-file %s" % elf, "hbreak start_kernel",
                                "continue", "info symbol $pc", "print/x $cs", "kill"])
        expect(out, [r"Breakpoint 1, 0x[0-9a-f]+ in start_kernel \(\)", r"^start_kernel in section \.text$",
                     r"^\$1 = 0x10$"], "gdb", ("vbts stderr", v.stderr()))
        rc = v.wait()
        if rc != 114:
            fail("vbts exited %d after kill, expected 114" % rc, ("gdb", out), ("vbts stderr", v.stderr()))


CASES = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--vbts", required=True)
    ap.add_argument("--gdb", default="gdb")
    ap.add_argument("--images", required=True)
    ap.add_argument("--linux", help="Debian's vmlinux (case linux)")
    ap.add_argument("--kallsyms", help="the kernel's code symbols from its /proc/kallsyms (case linux_kallsyms)")
    ap.add_argument("--engine", help="vbts's --engine (kvm-tcg: the guest runs on KVM while GDB lets it)")
    ap.add_argument("case", choices=sorted(CASES))
    ARGS = ap.parse_args()
    CASES[ARGS.case]()
    print("PASS: gdb.%s" % ARGS.case)


if __name__ == "__main__":
    main()
