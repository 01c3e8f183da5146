#!/usr/bin/env python3
"""Writes a newc cpio archive (the initramfs format Linux unpacks) holding
/init (the given executable), and the empty directories /dev, /proc and /sys.

usage: mkinitramfs.py INIT OUT
"""
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


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], "rb") as f:
        init = f.read()
    archive = b""
    for i, d in enumerate(("dev", "proc", "sys")):
        archive += entry(d, 0o040755, ino=2 + i)
    archive += entry("init", 0o100755, init, ino=10)
    archive += entry("TRAILER!!!", 0, ino=0)
    archive += b"\0" * (-len(archive) % 512)
    with open(sys.argv[2], "wb") as f:
        f.write(archive)


if __name__ == "__main__":
    main()
