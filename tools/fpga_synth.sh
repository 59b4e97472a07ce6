#!/usr/bin/env bash
# Synthesizes an `rlx export fpga` directory for an iCE40 and builds its bitstream: yosys
# synth_ice40 (top rlx_board), nextpnr-ice40 (pins left unconstrained: no board is assumed),
# icepack. Prints one line, "fpga-synth: LUTs L FFs F BRAM B DSPs D Fmax M MHz bitstream PATH",
# or says which step failed (a design over the device fails in nextpnr, naming the cell type).
# Usage: tools/fpga_synth.sh DIR [hx8k|up5k]   (logs: DIR/yosys.log, DIR/nextpnr.log)
set -euo pipefail
dir="$1"
dev="${2:-hx8k}"
case "$dev" in
    hx8k) pnr=(--hx8k --package ct256) ;;
    up5k) pnr=(--up5k --package sg48) ;;
    *) echo "fpga-synth: unknown device $dev" >&2; exit 2 ;;
esac
cd "$dir"
yosys -q -l yosys.log -p "read_verilog -sv $(tr "\n" " " < sources.f); synth_ice40 -top rlx_board -json board.json; stat" >/dev/null
# synth_ice40's last `stat` lists the cells: SB_LUT4, the SB_DFF* flip-flops, SB_RAM40_4K, SB_MAC16.
cells() { awk -v pat="$1" '$1 ~ pat && $2 ~ /^[0-9]+$/ {n[$1]=$2} END {s=0; for (k in n) s+=n[k]; print s}' \
    <(sed -n '/Printing statistics/,$p' yosys.log | tail -n 60); }
luts=$(cells '^SB_LUT4$')
ffs=$(cells '^SB_DFF')
brams=$(cells '^SB_RAM40_4K$')
dsps=$(cells '^SB_MAC16$')
if ! nextpnr-ice40 "${pnr[@]}" --pcf-allow-unconstrained --freq 12 --json board.json --asc board.asc \
    -l nextpnr.log -q >/dev/null 2>&1; then
    echo "fpga-synth: LUTs $luts FFs $ffs BRAM $brams DSPs $dsps; nextpnr failed: $(grep -m1 -i 'error' nextpnr.log || tail -1 nextpnr.log)"
    exit 1
fi
fmax=$(grep -o "Max frequency for clock '[^']*': [0-9.]* MHz" nextpnr.log | tail -1 | grep -o '[0-9.]* MHz' | cut -d' ' -f1)
icepack board.asc board.bin
echo "fpga-synth: LUTs $luts FFs $ffs BRAM $brams DSPs $dsps Fmax $fmax MHz bitstream $dir/board.bin ($(stat -c %s board.bin) bytes)"
