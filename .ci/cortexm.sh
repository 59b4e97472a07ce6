#!/usr/bin/env bash
# rlx-cortexm on a Cortex-M4 under QEMU: exports the committed QAT digits checkpoints (MLP and
# conv net) with `rlx export cortexm`, builds the firmware (crates/rlx-cortexm/firmware) for
# thumbv7em-none-eabihf with Debian's Rust toolchain (rustup's target download is not reachable
# here; core is built from Debian's rust-src with -Z build-std), runs it on QEMU's mps2-an386, and
# requires accuracy >= 96.6% on the digits test split and 100% agreement with the host INT8 run.
# Usage: .ci/cortexm.sh [path/to/rlx]   (default: the workspace's debug build, built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

need=()
for p in rustc-web cargo-web rust-web-src gcc-arm-none-eabi qemu-system-arm; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
    sudo=""
    if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then sudo="sudo"; fi
    $sudo apt-get update -qq && $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
rlx="${1:-$target_dir/debug/rlx}"
if [ ! -x "$rlx" ]; then
    cargo build -p rlx-cli --locked
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
elf="$target_dir/thumbv7em-none-eabihf/release/rlx-cortexm-firmware"

for model in mlp conv; do
    echo "cortexm: $model"
    "$rlx" export cortexm --model "data/cortexm/digits_${model}_qat.safetensors" --out "$out/$model" \
        --testset digits --flash-budget 64K --ram-budget 16K
    # Debian's cargo and rustc (their rust-src matches), not rustup's; nightly flags via RUSTC_BOOTSTRAP.
    (cd crates/rlx-cortexm/firmware && RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 RLX_CORTEXM_MODEL_DIR="$out/$model" \
        CARGO_TARGET_DIR="$target_dir" /usr/bin/cargo build --release --locked -q)
    arm-none-eabi-size "$elf"
    log="$(timeout 120 qemu-system-arm -machine mps2-an386 -cpu cortex-m4 \
        -semihosting-config enable=on,target=native -nographic -kernel "$elf")"
    echo "$log"
    # "cortexm: accuracy C/N = ..." and "cortexm: agreement with the host INT8 run: A/N"
    read -r correct n < <(echo "$log" | sed -n 's/^cortexm: accuracy \([0-9]*\)\/\([0-9]*\).*/\1 \2/p') || true
    read -r agree n2 < <(echo "$log" | sed -n 's/^cortexm: agreement with the host INT8 run: \([0-9]*\)\/\([0-9]*\).*/\1 \2/p') || true
    if [ -z "${n:-}" ] || [ "$n" -eq 0 ] || [ $((correct * 1000)) -lt $((966 * n)) ]; then
        echo "cortexm: $model accuracy ${correct:-?}/${n:-?} is under 96.6%" >&2
        exit 1
    fi
    if [ "${agree:-}" != "$n" ] || [ "${n2:-}" != "$n" ]; then
        echo "cortexm: $model: ${agree:-?}/${n2:-?} predictions equal the host INT8 run" >&2
        exit 1
    fi
done
echo "cortexm: passed in $(( $(date +%s) - start )) s"
