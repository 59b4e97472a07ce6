#!/usr/bin/env bash
# rlx-cortexm on a Cortex-M4 under QEMU: exports the committed QAT digits checkpoints (MLP, conv
# net, depthwise-separable net) with `rlx export cortexm`, builds the firmware (crates/rlx-cortexm/firmware) for
# thumbv7em-none-eabihf with Debian's Rust toolchain (rustup's target download is not reachable
# here; core is built from Debian's rust-src with -Z build-std), runs it on QEMU's mps2-an386, and
# requires accuracy >= 96.6% on the digits test split and 100% agreement with the host INT8 run;
# then the MLP once more with the DSP extension turned off (-C target-feature=-dsp), so the
# portable kernels run on the device too. QEMU runs with -icount (deterministic virtual time), so
# the SysTick ticks the firmware prints are reproducible, an instruction-count proxy, not cycles.
# Usage: .ci/cortexm.sh [path/to/rlx]   (default: the workspace's debug build, built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

bash .ci/apt-need.sh rustc-web cargo-web rust-web-src gcc-arm-none-eabi qemu-system-arm

target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
rlx="${1:-$target_dir/debug/rlx}"
if [ ! -x "$rlx" ]; then
    cargo build -p rlx-cli --locked
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
elf="$target_dir/thumbv7em-none-eabihf/release/rlx-cortexm-firmware"

run() {
    local model="$1" variant="$2"
    echo "cortexm: $model ($variant)"
    if [ ! -f "$out/$model/model.rs" ]; then
        "$rlx" export cortexm --model "data/cortexm/digits_${model}_qat.safetensors" --out "$out/$model" \
            --testset digits --flash-budget 64K --ram-budget 16K
    fi
    local flags=()
    if [ "$variant" = portable ]; then
        # RUSTFLAGS replaces the config's rustflags, so it repeats the linker flags.
        flags=("RUSTFLAGS=-C linker=arm-none-eabi-ld -C linker-flavor=ld -C link-arg=-Tlink.x -C target-feature=-dsp")
    fi
    # Debian's cargo and rustc (their rust-src matches), not rustup's; nightly flags via RUSTC_BOOTSTRAP.
    (cd crates/rlx-cortexm/firmware && env "${flags[@]}" RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
        RLX_CORTEXM_MODEL_DIR="$out/$model" CARGO_TARGET_DIR="$target_dir" /usr/bin/cargo build --release --locked -q)
    arm-none-eabi-size "$elf"
    local log
    log="$(timeout 120 qemu-system-arm -machine mps2-an386 -cpu cortex-m4 -icount shift=0 \
        -semihosting-config enable=on,target=native -nographic -kernel "$elf")"
    echo "$log"
    # "cortexm: accuracy C/N = ..." and "cortexm: agreement with the host INT8 run: A/N"
    local correct n agree n2
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
    if ! echo "$log" | grep -q "DSP instructions: $([ "$variant" = dsp ] && echo true || echo false)"; then
        echo "cortexm: $model: the firmware did not run the $variant kernels" >&2
        exit 1
    fi
}

run mlp dsp
run conv dsp
run separable dsp
run mlp portable
echo "cortexm: passed in $(( $(date +%s) - start )) s"
