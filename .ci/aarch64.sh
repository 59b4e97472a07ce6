#!/usr/bin/env bash
# rlx-cpu on aarch64 (the NEON GEMM micro-kernels, the NEON and dotprod quantized row dot products,
# the NEON dense attention path and the portable paths), cross-built and run under qemu user mode: clippy, then the crate's
# unit, kernel and conformance tests.
# RLX_SKIP_AARCH64=1 skips it explicitly on a machine that cannot install the tools.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${RLX_SKIP_AARCH64:-0}" = "1" ]; then
    echo "ci: aarch64 skipped (RLX_SKIP_AARCH64=1)"
    exit 0
fi
if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null; then
    sudo=""
    if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then sudo="sudo"; fi
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null
fi
rustup target add aarch64-unknown-linux-gnu >/dev/null
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
start=$(date +%s)
cargo clippy -p rlx-cpu --target aarch64-unknown-linux-gnu --all-targets --locked -- -D warnings
cargo test -p rlx-cpu --target aarch64-unknown-linux-gnu --locked
echo "ci: aarch64 (qemu) took $(( $(date +%s) - start )) s"
