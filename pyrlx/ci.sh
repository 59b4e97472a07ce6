#!/usr/bin/env bash
# pyrlx in CI: a fresh venv with maturin, numpy, ml_dtypes and pytest; `pip install ./pyrlx`
# (maturin builds the abi3 wheel); then the pytest suite. Run from the repository root.
set -euo pipefail
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
# Absolute: the venv's bin goes on PATH below.
case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
venv="$target_dir/pyrlx-venv"
if [ ! -x "$venv/bin/python" ]; then
    # System site packages: the MiniLM weights package installed above is visible to the tests.
    python3 -m venv --system-site-packages "$venv"
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
# maturin's build hook runs the `maturin` program: the venv's bin must be on PATH (a fresh
# machine has no maturin elsewhere).
export PATH="$venv/bin:$PATH"
"$venv/bin/python" -m pip install -q maturin pytest numpy ml_dtypes
# Its own target dir: no lock contention with the workspace build, and reused between runs. The
# `ci` profile (opt-level 1) builds faster than release; benchmarks use `maturin develop --release`.
MATURIN_PEP517_ARGS="--profile ci" CARGO_TARGET_DIR="$target_dir/pyrlx" "$venv/bin/python" -m pip install -q --no-build-isolation ./pyrlx
"$venv/bin/python" -m pytest -q pyrlx/tests
