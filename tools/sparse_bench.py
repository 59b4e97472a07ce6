#!/usr/bin/env python3
"""scipy's spmv on the matrix of crates/rlx-sparse/examples/spmv_bench.rs (5-point 2D Laplacian
on an m x m grid, f64 values, i32 indices), timed the same way: best of 5 batches of >= 0.2 s,
GFLOP/s = 2 nnz / time. Then runs the rlx example for the side-by-side line.

Run: python3 tools/sparse_bench.py [m]   (builds the example with cargo --release)
"""
import os
import subprocess
import sys
import time

import numpy as np
import scipy
import scipy.sparse as sp


def main():
    m = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    eye = sp.identity(m)
    a = sp.csr_matrix(sp.kron(eye, t) + sp.kron(t, eye))
    a.sort_indices()
    x = (np.arange(a.shape[0]) % 7).astype(np.float64) - 3.0
    best, reps = float("inf"), 1
    for _ in range(5):
        while True:
            t0 = time.perf_counter()
            for _ in range(reps):
                a @ x
            s = time.perf_counter() - t0
            if s < 0.2:
                reps *= 2
                continue
            best = min(best, s / reps)
            break
    print(f"scipy {scipy.__version__} spmv: grid {m}x{m}, n {a.shape[0]}, nnz {a.nnz}, index {a.indices.dtype}: "
          f"{best * 1e3:.3f} ms, {2 * a.nnz / best / 1e9:.2f} GFLOP/s")
    root = os.path.join(os.path.dirname(__file__), "..")
    subprocess.run(["cargo", "run", "--release", "-q", "-p", "rlx-sparse", "--example", "spmv_bench", "--", str(m)],
                   cwd=root, check=True)


if __name__ == "__main__":
    main()
