#!/usr/bin/env bash
# fetch-linux.sh: puts Debian's cloud kernel into DIR: vmlinuz, the bzImage as
# the package ships it (Linux's own boot protocol), and vmlinux, its payload
# uncompressed (the ELF with its PVH entry note); vbts and QEMU boot both with
# -kernel. The linux.* tests boot them (guest-tests/linux/README.md). Idempotent:
# files that are there are kept. Needs apt-get (the package comes from the
# machine's Debian mirror, not installed: nothing lands in /boot) and lz4/xz/zstd
# for the compressed payload.
# Usage: scripts/fetch-linux.sh DIR
set -euo pipefail
dir=${1:?usage: fetch-linux.sh DIR}
[ -s "$dir/vmlinux" ] && [ -s "$dir/vmlinuz" ] && exit 0
mkdir -p "$dir"
work=$(mktemp -d)
chmod 755 "$work"  # apt downloads as its own user
trap 'rm -rf "$work"' EXIT
# The metapackage names the current kernel package.
pkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$pkg" ] || { echo "fetch-linux: apt-cache knows no linux-image-cloud-amd64 (apt-get update?)" >&2; exit 1; }
(cd "$work" && apt-get download -qq "$pkg")
dpkg-deb -x "$work"/*.deb "$work/x"
vmlinuz=$(ls "$work"/x/boot/vmlinuz-*)
# The bzImage's payload: find its compression's magic and decompress from there
# (what the kernel's scripts/extract-vmlinux does).
python3 - "$vmlinuz" "$work/vmlinux" <<'PY'
import subprocess, sys
data = open(sys.argv[1], "rb").read()
for magic, cmd in ((b"\x02\x21\x4c\x18", ["lz4", "-dc"]), (b"\xfd7zXZ\x00", ["xz", "-dc"]),
                   (b"\x28\xb5\x2f\xfd", ["zstd", "-dc"]), (b"\x1f\x8b\x08\x00", ["gzip", "-dc"])):
    at = data.find(magic)
    while at >= 0:
        out = subprocess.run(cmd, input=data[at:], capture_output=True).stdout
        if out[:4] == b"\x7fELF":
            open(sys.argv[2], "wb").write(out)
            sys.exit(0)
        at = data.find(magic, at + 1)
sys.exit("fetch-linux: no compressed ELF kernel found in " + sys.argv[1])
PY
mv "$work/vmlinux" "$dir/vmlinux"
cp "$vmlinuz" "$dir/vmlinuz"
echo "$pkg" > "$dir/package"
echo "fetch-linux: $dir/vmlinux and $dir/vmlinuz from $pkg"
