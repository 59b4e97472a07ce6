#!/usr/bin/env bash
# rlx-fpga: exports the committed QAT digits MLP with `rlx export fpga --testset digits`, lints
# the SystemVerilog with `verilator --lint-only -Wall` (any warning fails), simulates the
# generated testbench over the digits test split in iverilog (-g2012) and in verilator
# (--binary), requiring every sample's logits equal to the host INT8 run and accuracy >= 96.6%,
# and builds one iCE40 HX8K bitstream (yosys synth_ice40, nextpnr-ice40, icepack) with a timeout.
# Reuse 16 for the simulations and the bitstream: the smallest design, the quickest to place and
# route on CI's two cores; the lint also covers reuse 1 and 5 (a partial last chunk).
# Usage: .ci/fpga.sh [path/to/rlx]   (default: the workspace's debug build, built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

bash .ci/apt-need.sh verilator iverilog yosys nextpnr-ice40 fpga-icestorm

target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
rlx="${1:-$target_dir/debug/rlx}"
if [ ! -x "$rlx" ]; then
    cargo build -p rlx-cli --locked
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
model=data/cortexm/digits_mlp_qat.safetensors

# "fpga: agreement with the host INT8 run: A/N", "fpga: accuracy C/N", "fpga: cycles per inference K"
check() {
    local sim="$1" log="$2" agree n correct n2
    echo "$log" | grep '^fpga:'
    read -r agree n < <(echo "$log" | sed -n 's/^fpga: agreement with the host INT8 run: \([0-9]*\)\/\([0-9]*\).*/\1 \2/p') || true
    read -r correct n2 < <(echo "$log" | sed -n 's/^fpga: accuracy \([0-9]*\)\/\([0-9]*\).*/\1 \2/p') || true
    if [ -z "${n:-}" ] || [ "$n" -eq 0 ] || [ "${agree:-}" != "$n" ]; then
        echo "fpga: $sim: ${agree:-?}/${n:-?} samples equal the host INT8 run" >&2
        exit 1
    fi
    if [ -z "${n2:-}" ] || [ $((correct * 1000)) -lt $((966 * n2)) ]; then
        echo "fpga: $sim: accuracy ${correct:-?}/${n2:-?} is under 96.6%" >&2
        exit 1
    fi
    echo "fpga: $sim: accuracy $(awk -v c="$correct" -v n="$n2" 'BEGIN {printf "%.2f%%", 100 * c / n}')"
}

for reuse in 1 5; do
    "$rlx" export fpga --model "$model" --out "$out/r$reuse" --reuse "$reuse" --part any >/dev/null
    (cd "$out/r$reuse" && verilator --lint-only -Wall --top-module rlx_board -f sources.f)
    echo "fpga: reuse $reuse: verilator -Wall lint clean"
done

dir="$out/r16"
"$rlx" export fpga --model "$model" --out "$dir" --reuse 16 --part hx8k --testset digits | grep -v "^wrote "
(cd "$dir" && verilator --lint-only -Wall --top-module rlx_board -f sources.f)
echo "fpga: reuse 16: verilator -Wall lint clean"

t=$(date +%s)
log="$(cd "$dir" && iverilog -g2012 -o tb.vvp -c sources.f tb.sv && timeout 300 vvp -n tb.vvp)"
check iverilog "$log"
echo "fpga: iverilog took $(( $(date +%s) - t )) s"

t=$(date +%s)
(cd "$dir" && verilator --binary -j 2 --top-module tb -Mdir obj_dir -f sources.f tb.sv >/dev/null)
log="$(cd "$dir" && timeout 300 ./obj_dir/Vtb)"
check verilator "$log"
echo "fpga: verilator took $(( $(date +%s) - t )) s"

t=$(date +%s)
timeout 600 bash tools/fpga_synth.sh "$dir" hx8k
test -s "$dir/board.bin"
echo "fpga: synthesis, place and route and bitstream took $(( $(date +%s) - t )) s"
echo "fpga: passed in $(( $(date +%s) - start )) s"
