#!/usr/bin/env bash
# Data-parallel scaling of `rlx train` (the default char-GPT, global batch 16) on this machine: steps per
# second of 2 MPI ranks x 1 thread, 1 process x 2 threads and 1 process x 1 thread, the all-reduce time
# and bytes per step (printed by rank 0), and a projection to 8 machines from them.
# Usage: tools/mpi_scaling.sh [rlx binary built with --features mpi] [steps] [network Gbit/s]
# (build it with: cargo build -p rlx-cli --features mpi)
set -euo pipefail
rlx="${1:-${CARGO_TARGET_DIR:-target}/debug/rlx}"
steps="${2:-30}"
gbits="${3:-10}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(train --steps "$steps" --batch 16 --warmup 5 --sample-every 0 --sample-chars 1)

# Steps per second from the "trained N steps in S s" line of a log.
sps() { sed -n 's/^trained \([0-9]*\) steps in \([0-9.]*\) s.*/\1 \2/p' "$1" | awk '{ printf "%.3f", $1 / $2 }'; }

RLX_NUM_THREADS=1 "$rlx" "${args[@]}" --out "$tmp/a" > "$tmp/one1.log"
RLX_NUM_THREADS=2 "$rlx" "${args[@]}" --out "$tmp/b" > "$tmp/one2.log"
mpirun --allow-run-as-root --oversubscribe -np 2 -x RLX_NUM_THREADS=1 "$rlx" "${args[@]}" --out "$tmp/c" > "$tmp/mpi2.log"

one1=$(sps "$tmp/one1.log")
one2=$(sps "$tmp/one2.log")
mpi2=$(sps "$tmp/mpi2.log")
ar_line=$(grep '^all-reduce:' "$tmp/mpi2.log")
ar_ms=$(echo "$ar_line" | sed -n 's/^all-reduce: \([0-9.]*\) ms per step.*/\1/p')
kb=$(echo "$ar_line" | sed -n 's/.*(\([0-9]*\) KB per rank per step).*/\1/p')
echo "rlx train, default char-GPT, global batch 16, $steps steps, $(nproc) cores:"
echo "  1 rank  x 1 thread : $one1 steps/s"
echo "  1 rank  x 2 threads: $one2 steps/s"
echo "  2 ranks x 1 thread : $mpi2 steps/s (MPI, shared memory)"
echo "  $ar_line"
# Ring all-reduce moves 2 (N - 1) / N of the buffer per rank; compute per rank falls as 1 / N of the
# global batch (from the 1 x 1 figure, assuming time linear in the batch).
awk -v s1="$one1" -v kb="$kb" -v gb="$gbits" 'BEGIN {
    n = 8; t1 = 1 / s1; bytes = kb * 1024; bw = gb * 1e9 / 8;
    comm = 2 * (n - 1) / n * bytes / bw; comp = t1 / n;
    printf "  projection, 8 machines x 1 thread at %g Gbit/s: %.1f ms compute + %.2f ms all-reduce (%d KB) per step = %.2f steps/s\n", gb, comp * 1e3, comm * 1e3, kb, 1 / (comp + comm)
}'
