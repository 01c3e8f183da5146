"""Helpers shared by the scripts that read QEMU's execution log (-d exec)."""
import struct


def image_log_ranges(path):
    """QEMU -dfilter ranges: the image's PT_LOAD segments (their memory size) and
    every address above 4 GiB (64-bit guests run their code through high aliases
    too; no firmware code runs there). SeaBIOS and the Multiboot option ROM run
    millions of instructions before the image; logging them took ~95% of each
    differential test's time. Code the guest ran outside these ranges would be
    missing from QEMU's stream and so still fail the comparison."""
    with open(path, "rb") as f:
        data = f.read()
    phoff, = struct.unpack_from("<I", data, 28)
    phentsize, phnum = struct.unpack_from("<HH", data, 42)
    ranges = []
    for k in range(phnum):
        ptype, _, vaddr, _, _, memsz = struct.unpack_from("<6I", data, phoff + k * phentsize)
        if ptype == 1 and memsz:
            ranges.append(f"0x{vaddr:x}+0x{memsz:x}")
    ranges.append("0x100000000..0xffffffffffffffff")
    return ",".join(ranges)
