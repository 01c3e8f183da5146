#!/usr/bin/env python3
"""Writes a newc cpio archive (the initramfs format Linux unpacks) holding
/init (the given executable), the empty directories /dev, /proc, /sys and
/tmp, and any further files.

usage: mkinitramfs.py INIT OUT [SRC[=DEST] | --tree=DIR | --cc=COMPILER ...]

Each SRC goes to DEST (by default the same absolute path) with its parent
directories; a SRC without a slash is a program looked up in PATH.
--tree=DIR adds every regular file under DIR at its own path. --cc=COMPILER
adds a working C compiler as /usr/bin/cc: the GCC driver COMPILER and what it
runs and links with, as it names them itself (-print-prog-name,
-print-file-name, the header `-M` finds for an empty file), at the paths it
looks for them, and the files its libc.so linker script names. A dynamically linked executable brings the shared libraries and
the loader `ldd` names for it, at the paths `ldd` gives, so that the guest's
loader finds them where the host's does. Files are stored as regular files
(symbolic links followed), in a fixed order, with mtime 0: the same inputs
give the same archive.
"""
import os
import shutil
import subprocess
import sys


def entry(name, mode, data=b"", ino=1):
    # newc: "070701", then 13 eight-digit hex fields, the NUL-terminated
    # name padded to 4 bytes (with the 110-byte header), the data padded to 4.
    fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name) + 1, 0]
    head = b"070701" + b"".join(b"%08X" % f for f in fields)
    out = head + name.encode() + b"\0"
    out += b"\0" * (-len(out) % 4)
    out += data + b"\0" * (-len(data) % 4)
    return out


def shared_libraries(path):
    """The absolute paths of the libraries and loader `ldd` lists for path;
    none for a static executable or a file that is not one."""
    with open(path, "rb") as f:
        if f.read(4) != b"\x7fELF":
            return []
    p = subprocess.run(["ldd", path], capture_output=True, text=True)
    if p.returncode != 0:  # "not a dynamic executable"
        return []
    libs = []
    for line in p.stdout.splitlines():
        # "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
        # "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no path.
        words = line.split()
        if "=>" in words:
            words = words[words.index("=>") + 1:]
        if words and words[0].startswith("/"):
            libs.append(words[0])
        elif "not found" in line:
            sys.exit("mkinitramfs: %s: %s" % (path, line.strip()))
    return libs


def ask(cc, *args):
    p = subprocess.run([cc, *args], capture_output=True, text=True, input="")
    if p.returncode != 0:
        sys.exit("mkinitramfs: %s %s: %s" % (cc, " ".join(args), p.stderr.strip()))
    return p.stdout


def compiler_files(cc):
    """SRC=DEST specs for the C compiler `cc` (a GCC driver): the driver as
    /usr/bin/cc, cc1, collect2, lto-wrapper, the LTO plugin, the assembler
    and the linker, the start files and libraries of a dynamically linked
    program, the implicit header, and what the libc.so script refers to.
    Paths as the driver reports them (normalised, not resolved: the driver
    searches those directories), contents from their targets."""
    cc = shutil.which(cc) or cc
    specs = ["%s=/usr/bin/cc" % cc]
    for prog in ("cc1", "collect2", "lto-wrapper", "as", "ld"):
        path = ask(cc, "-print-prog-name=" + prog).strip()
        path = shutil.which(path) or path
        if not os.path.isabs(path):
            sys.exit("mkinitramfs: %s does not say where %s is" % (cc, prog))
        specs.append("%s=%s" % (path, os.path.normpath(path)))
    for name in ("liblto_plugin.so", "Scrt1.o", "crti.o", "crtn.o", "crtbeginS.o", "crtendS.o", "libgcc.a",
                 "libgcc_s.so", "libgcc_s.so.1", "libc.so", "libc_nonshared.a"):
        path = ask(cc, "-print-file-name=" + name).strip()
        if not os.path.isabs(path):
            sys.exit("mkinitramfs: %s does not find %s" % (cc, name))
        specs.append("%s=%s" % (path, os.path.normpath(path)))
        if name == "libc.so":
            # A linker script: GROUP ( /lib/.../libc.so.6 /usr/lib/.../libc_nonshared.a AS_NEEDED ( ... ) )
            with open(path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            specs += [w for w in text.replace("(", " ").replace(")", " ").split() if w.startswith("/") and os.path.isfile(w)]
    # `cc -M` of an empty file names the header every compilation reads
    # (stdc-predef.h), which cc1 needs a directory of to start.
    deps = ask(cc, "-M", "-x", "c", "-").replace("\\\n", " ").split()
    specs += [d for d in deps[1:] if os.path.isabs(d)]
    return specs


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    files = {}  # guest path -> host path
    specs = []
    for spec in sys.argv[3:]:
        if spec.startswith("--cc="):
            specs += compiler_files(spec[len("--cc="):])
        elif spec.startswith("--tree="):
            for root, _, names in sorted(os.walk(spec[len("--tree="):])):
                specs += [os.path.join(root, n) for n in sorted(names) if os.path.isfile(os.path.join(root, n))]
        else:
            specs.append(spec)
    for spec in specs:
        src, _, dest = spec.partition("=")
        if "/" not in src:
            src = shutil.which(src) or src
        dest = dest or os.path.abspath(src)
        if not os.path.isfile(src):
            sys.exit("mkinitramfs: %s: no such file" % src)
        files[dest.lstrip("/")] = src
        for lib in shared_libraries(src):
            files.setdefault(lib.lstrip("/"), lib)
    dirs = {"dev", "proc", "sys", "tmp"}
    for name in files:
        parent = os.path.dirname(name)
        while parent:
            dirs.add(parent)
            parent = os.path.dirname(parent)
    archive = b""
    ino = 2
    for d in sorted(dirs):
        archive += entry(d, 0o041777 if d == "tmp" else 0o040755, ino=ino)
        ino += 1
    with open(sys.argv[1], "rb") as f:
        archive += entry("init", 0o100755, f.read(), ino=ino)
    for name in sorted(files):
        ino += 1
        with open(files[name], "rb") as f:
            archive += entry(name, 0o100755, f.read(), ino=ino)
    archive += entry("TRAILER!!!", 0, ino=0)
    archive += b"\0" * (-len(archive) % 512)
    with open(sys.argv[2], "wb") as f:
        f.write(archive)


if __name__ == "__main__":
    main()
