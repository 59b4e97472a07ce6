#!/usr/bin/env bash
# Data-parallel `rlx train` under mpirun (rlx-dist's MPI collectives, feature `mpi`, OpenMPI from apt):
# clippy with the feature, rlx-dist's tests over MPI, then rlx-cli's mpirun tests (2 ranks against one
# process on the same global batch, resume, a killed rank and a stalled one ending the job).
# RLX_SKIP_MPI=1 skips it explicitly on a machine that cannot install OpenMPI.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${RLX_SKIP_MPI:-0}" = "1" ]; then
    echo "ci: mpi skipped (RLX_SKIP_MPI=1)"
    exit 0
fi
# libclang: rsmpi's mpi-sys runs bindgen on mpi.h.
bash .ci/apt-need.sh openmpi-bin libopenmpi-dev libclang-dev
# mpirun refuses to run as root without these (CI containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$(date +%s)
cargo clippy -p rlx-dist -p rlx-cli --features mpi --all-targets --locked -- -D warnings
cargo test -p rlx-dist --features mpi --locked
cargo test -p rlx-cli --features mpi --locked --test mpi -- --nocapture --test-threads 1
echo "ci: mpi took $(( $(date +%s) - start )) s"
