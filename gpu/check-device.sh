#!/usr/bin/env bash
# Checks the Vulkan device exactgrad-wgpu would use (docs/gpu.md §7): lists the adapters,
# runs the arithmetic probes, then, for each set of arithmetic paths asked for and each
# mode the device offers, the conformance kit (the softmax's cases once more with each
# row-maximum path forced, docs/gpu.md §5.5) and the digits run, printing every hash and
# the time per training step on the device beside the CPU's. Exits non-zero when a bit
# differs: a conformance failure, an exact-mode digits hash other than the pinned
# 0x22f4e62902a28255, or a fast-mode hash other than FastScalarRefBackend's. A mode the
# device refuses is reported and skipped (the backend refusing it is correct). Works on
# lavapipe as on a GPU; needs cargo (it builds the crate in release mode).
#
#   gpu/check-device.sh [--paths LIST] [--adapter NAME|INDEX]
#
# LIST is a comma-separated subset of: default (the paths the probes choose), soft (the
# integer division and square root forced), int (the integer binary64 for the f64 sums
# forced), both (the two forced), all (the four). Default: default,both.
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TERM_COLOR=never
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
# A missing adapter is a failure here, not a skipped test.
export EXACTGRAD_REQUIRE_GPU=1

paths="default,both"
while (($#)); do
    case "$1" in
        --paths) paths="${2:?--paths needs a value}"; shift 2 ;;
        --adapter) export EXACTGRAD_WGPU_ADAPTER="${2:?--adapter needs a value}"; shift 2 ;;
        -h | --help) sed -n '2,16p' "$(basename "$0")"; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ "$paths" = all ] && paths="default,soft,int,both"
IFS=, read -ra list <<<"$paths"
for p in "${list[@]}"; do
    case "$p" in
        default | soft | int | both) ;;
        *) echo "error: unknown path set '$p' (default, soft, int, both, all)" >&2; exit 2 ;;
    esac
done

pinned="0x22f4e62902a28255"
bin="${CARGO_TARGET_DIR:-target}/release/examples"
failures=()
summary=()

echo "== build ($(date +%T))"
cargo build --release --tests --examples

echo
echo "== adapters and probes (default paths)"
if ! probe=$(EXACTGRAD_GPU_SOFT_DIV_SQRT=0 EXACTGRAD_GPU_INT_F64=0 "$bin"/probe_device 2>&1); then
    echo "$probe"
    echo "error: no usable Vulkan device" >&2
    exit 1
fi
echo "$probe"

for p in "${list[@]}"; do
    case "$p" in
        default) soft=0 int=0 ;;
        soft) soft=1 int=0 ;;
        int) soft=0 int=1 ;;
        *) soft=1 int=1 ;;
    esac
    export EXACTGRAD_GPU_SOFT_DIV_SQRT=$soft EXACTGRAD_GPU_INT_F64=$int
    echo
    echo "== paths: $p (EXACTGRAD_GPU_SOFT_DIV_SQRT=$soft EXACTGRAD_GPU_INT_F64=$int) ($(date +%T))"
    found=$("$bin"/probe_device 2>&1 || true)
    grep -E '^  (kernels|f64 sums|softmax row maximum)' <<<"$found" || true
    for mode in exact fast; do
        if ! grep -q "^$mode mode: available" <<<"$found"; then
            why=$(grep "^$mode mode" <<<"$found" || echo "$mode mode: no answer")
            echo "-- $why: skipped"
            summary+=("$p $mode: refused")
            continue
        fi
        echo "-- conformance kit, $mode mode"
        if kit=$(cargo test --release --quiet --test conformance -- "$mode::" 2>&1); then
            grep '^test result' <<<"$kit" || true
        else
            tail -n 40 <<<"$kit"
            failures+=("$p $mode: the conformance kit failed")
        fi
        echo "-- digits, $mode mode"
        out=$("$bin"/digits_gpu --mode "$mode" 2>&1) || true
        echo "$out"
        got=$(sed -n 's/^final parameter hash: //p' <<<"$out")
        cpu=$(sed -n 's/^cpu final parameter hash: //p' <<<"$out")
        gstep=$(sed -n 's/^gpu: .*, \([0-9.]* ms per step\)$/\1/p' <<<"$out")
        cstep=$(sed -n 's/^cpu: .*, \([0-9.]* ms per step\)$/\1/p' <<<"$out")
        want="$cpu"
        [ "$mode" = exact ] && want="$pinned"
        if [ -z "$got" ] || [ "$got" != "$want" ] || [ "$got" != "$cpu" ]; then
            failures+=("$p $mode: digits hash '$got', want '$want' (CPU '$cpu')")
            summary+=("$p $mode: digits $got WRONG (want $want), device ${gstep:-?}, CPU ${cstep:-?}")
        else
            summary+=("$p $mode: digits $got, device ${gstep:-?}, CPU ${cstep:-?}")
        fi
    done
done

echo
echo "== summary"
printf '%s\n' "${summary[@]}"
if ((${#failures[@]})); then
    echo
    printf 'FAILED: %s\n' "${failures[@]}" >&2
    exit 1
fi
echo "every bit as the CPU's"
