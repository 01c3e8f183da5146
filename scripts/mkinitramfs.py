#!/usr/bin/env python3
"""Writes a newc cpio archive (the initramfs format Linux unpacks) holding
/init (the given executable), the empty directories /dev, /proc, /sys and
/tmp, and any further files.

usage: mkinitramfs.py INIT OUT [SRC[=DEST] ...]

Each SRC goes to DEST (by default the same absolute path) with its parent
directories; a SRC without a slash is a program looked up in PATH. A dynamically linked executable brings the shared libraries and
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


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    files = {}  # guest path -> host path
    for spec in sys.argv[3:]:
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
