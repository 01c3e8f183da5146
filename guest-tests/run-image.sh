#!/usr/bin/env bash
# run-image.sh: run one guest image from tests.cfg under a monitor and check its exit status and
# output against the manifest. See guest-tests/README.md.
#
#   run-image.sh [--manifest FILE] [--image-dir DIR] [--vbts PATH] [--qemu PATH] [--image PATH]
#                [--vbts-arg ARG]... MONITOR NAME
#
# MONITOR: vbts  -> $VBTS run [vbts_args] IMAGE
#          qemu  -> timeout T qemu-system-x86_64 -kernel IMAGE -device isa-debug-exit,iobase=0xf4,iosize=4
#                   -serial stdio -display none -accel tcg -no-reboot -m 128M
# Exit status: 0 if status and output match, 1 if not, 2 on a usage or manifest error.
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
manifest=$here/tests.cfg
image_dir=${GUEST_IMAGE_DIR:-$PWD/guest-tests}
vbts=${VBTS:-vbts}
qemu=${QEMU:-qemu-system-x86_64}
image=
extra_args=()

usage() { echo "usage: $0 [--manifest F] [--image-dir D] [--vbts P] [--qemu P] [--image P] vbts|qemu NAME" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --manifest) manifest=$2; shift 2 ;;
    --image-dir) image_dir=$2; shift 2 ;;
    --vbts) vbts=$2; shift 2 ;;
    --qemu) qemu=$2; shift 2 ;;
    --image) image=$2; shift 2 ;;
    --vbts-arg) extra_args+=("$2"); shift 2 ;;
    -h|--help) usage ;;
    -*) echo "run-image.sh: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[[ $# -eq 2 ]] || usage
monitor=$1 name=$2
[[ $monitor == vbts || $monitor == qemu ]] || { echo "run-image.sh: monitor must be vbts or qemu, not '$monitor'" >&2; exit 2; }
[[ -r $manifest ]] || { echo "run-image.sh: cannot read manifest $manifest" >&2; exit 2; }
base=$(dirname "$manifest")

# cfg_get KEY: every value of KEY in section [name], one per line (in order).
cfg_get() {
  awk -v sect="$name" -v key="$1" '
    /^[[:space:]]*(#|;|$)/ { next }
    /^[[:space:]]*\[/ { s = $0; gsub(/^[[:space:]]*\[|\][[:space:]]*$/, "", s); cur = s; next }
    cur == sect {
      i = index($0, "="); if (i == 0) next
      k = substr($0, 1, i - 1); v = substr($0, i + 1)
      gsub(/^[[:space:]]+|[[:space:]]+$/, "", k); gsub(/^[[:space:]]+|[[:space:]]+$/, "", v)
      if (k == key) print v
    }' "$manifest"
}
# cfg_one KEY DEFAULT: the last value of KEY, or DEFAULT.
cfg_one() { local v; v=$(cfg_get "$1" | tail -n 1); echo "${v:-$2}"; }

grep -q "^[[:space:]]*\[$name\][[:space:]]*$" "$manifest" || { echo "run-image.sh: no [$name] in $manifest" >&2; exit 2; }
file=$(cfg_one file "$name.elf")
[[ -n $image ]] || image=$image_dir/$file
expect_status=$(cfg_one expect_status "")
expected=$(cfg_one expected "")
mapfile -t expect_output < <(cfg_get expect_output)
timeout_s=$(cfg_one timeout 10)
expect_stderr=()
expect_warnings=""
if [[ $monitor == vbts ]]; then
  mapfile -t expect_stderr < <(cfg_get expect_stderr)
  expect_warnings=$(cfg_one expect_warnings "")
fi
if [[ $monitor == qemu ]]; then
  [[ $(cfg_one qemu yes) == yes ]] || { echo "run-image.sh: [$name] has qemu = no" >&2; exit 2; }
  expect_status=$(cfg_one qemu_expect_status "$expect_status")
  expected=$(cfg_one qemu_expected "$expected")
  mapfile -t qo < <(cfg_get qemu_expect_output)
  [[ ${#qo[@]} -gt 0 ]] && expect_output=("${qo[@]}")
  timeout_s=$(cfg_one qemu_timeout "$timeout_s")
fi
[[ -n $expect_status ]] || { echo "run-image.sh: [$name] has no expect_status" >&2; exit 2; }
[[ -r $image ]] || { echo "run-image.sh: image $image not found (build target guest-images)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# initrd = "FILE [ARGS],FILE..." with FILEs relative to the manifest's directory: Multiboot
# modules for both monitors (vbts --initrd, qemu -initrd).
initrd=$(cfg_one initrd "")
initrd_abs=""
if [[ -n $initrd ]]; then
  IFS=',' read -r -a mods <<< "$initrd"
  for m in "${mods[@]}"; do initrd_abs+="${initrd_abs:+,}$base/$m"; done
fi
if [[ $monitor == qemu ]]; then
  # timeout(1) exits 124 when it had to stop QEMU, the status vbts uses for --timeout.
  cmd=(timeout "$timeout_s" "$qemu" -kernel "$image" -device isa-debug-exit,iobase=0xf4,iosize=4
       -serial stdio -display none -accel tcg -no-reboot -m 128M)
  [[ -n $initrd_abs ]] && cmd+=(-initrd "$initrd_abs")
  read -r -a qargs <<< "$(cfg_one qemu_args "")"
  cmd+=("${qargs[@]}")
else
  read -r -a vargs <<< "$(cfg_one vbts_args "")"
  [[ -n $initrd_abs ]] && vargs+=("--initrd=$initrd_abs")
  # vbts enforces its own --timeout (124); the outer KILL (status 137) only catches a hung vbts.
  cmd=(timeout -s KILL "$((${timeout_s%.*} + 5))" "$vbts" run "${vargs[@]}" "${extra_args[@]}" "$image")
fi
start=$(date +%s.%N)
"${cmd[@]}" </dev/null >"$tmp/stdout.raw" 2>"$tmp/stderr"
status=$?
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
tr -d '\r' <"$tmp/stdout.raw" >"$tmp/stdout"

ok=1
problems=()
if [[ $status != "$expect_status" ]]; then
  ok=0
  what=""
  case $status in
    120) what=" (triple fault)" ;; 122) what=" (halted with IF=0)" ;; 124) what=" (timeout)" ;;
    137) what=" (killed by the runner's timeout)" ;; 116) what=" (vbts error)" ;;
    118) what=" (unsupported by host/vbts)" ;; 127) what=" (command not found)" ;;
  esac
  [[ -z $what && $((status % 2)) == 1 ]] && what=" (guest exit value $((status >> 1)))"
  problems+=("exit status $status$what, expected $expect_status")
fi
if [[ -n $expected ]]; then
  if ! diff -u --label "expected ($expected)" --label "actual stdout" "$base/$expected" "$tmp/stdout" >"$tmp/diff"; then
    ok=0
    problems+=("stdout differs from $expected")
  fi
fi
for want in "${expect_output[@]}"; do
  if ! grep -qF -- "$want" "$tmp/stdout"; then
    ok=0
    problems+=("stdout lacks: $want")
  fi
done
for want in "${expect_stderr[@]}"; do
  if ! grep -qF -- "$want" "$tmp/stderr"; then
    ok=0
    problems+=("stderr lacks: $want")
  fi
done
if [[ -n $expect_warnings ]]; then
  warnings=$(grep -c '^vbts: warning:' "$tmp/stderr")
  if [[ $warnings != "$expect_warnings" ]]; then
    ok=0
    problems+=("$warnings 'vbts: warning:' lines on stderr, expected $expect_warnings")
  fi
fi

if [[ $ok == 1 ]]; then
  echo "ok: $monitor.$name: status $status, ${elapsed}s"
  exit 0
fi
echo "FAILED: $monitor.$name"
for p in "${problems[@]}"; do echo "  - $p"; done
echo "  command: ${cmd[*]}"
echo "  time: ${elapsed}s"
if [[ -s $tmp/diff ]]; then echo "--- diff (expected vs actual) ---"; cat "$tmp/diff"; fi
echo "--- stdout ---"; cat "$tmp/stdout"
echo "--- stderr ---"; cat "$tmp/stderr"
exit 1
