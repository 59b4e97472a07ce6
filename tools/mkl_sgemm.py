#!/usr/bin/env python3
"""oneMKL's f32 GEMM (cblas_sgemm, row-major, no transposes) in GFLOP/s, as a reference for
`rlx-bench matmul`: on an Intel host MKL is the vendor's own BLAS, the strongest f32 GEMM there
is. Not a peer `rlx-bench` runs (the wheels are 200 MB); run it right before or after
`rlx-bench matmul` with the same thread count.

Set-up (no system packages; the wheels are unpacked, not installed):
  pip download mkl intel-openmp --no-deps -d /tmp/mklwheel
  mkdir -p /tmp/mklx && cd /tmp/mklx && for w in /tmp/mklwheel/*.whl; do unzip -q -o "$w"; done
Run:
  LD_LIBRARY_PATH=$(dirname $(find /tmp/mklx -name libmkl_rt.so.2)):$(dirname $(find /tmp/mklx -name libiomp5.so)) \\
    MKL_NUM_THREADS=2 python3 tools/mkl_sgemm.py 1024 4096

Prints, per n, the median of 7 timed rounds (each about 2 GFLOP of products) and checks a corner
of C against numpy.
"""
import ctypes
import sys
import time

import numpy as np


def main():
    sizes = [int(x) for x in sys.argv[1:]] or [1024, 4096]
    lib = ctypes.CDLL("libmkl_rt.so.2")
    sgemm = lib.cblas_sgemm
    sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                           ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    row_major, no_trans = 101, 111
    rng = np.random.default_rng(0)
    for n in sizes:
        a = rng.random((n, n), dtype=np.float32)
        b = rng.random((n, n), dtype=np.float32)
        c = np.zeros((n, n), np.float32)

        def run():
            sgemm(row_major, no_trans, no_trans, n, n, n, 1.0, a.ctypes.data, n, b.ctypes.data, n, 0.0,
                  c.ctypes.data, n)

        run()
        ref = a[:8].astype(np.float64) @ b[:, :8].astype(np.float64)
        assert np.allclose(c[:8, :8], ref, rtol=1e-4), "MKL result differs from numpy"
        reps = max(1, int(2e9 / (2 * n ** 3)))
        times = []
        for _ in range(7):
            t = time.perf_counter()
            for _ in range(reps):
                run()
            times.append((time.perf_counter() - t) / reps)
        times.sort()
        print(f"n={n}: MKL {2 * n ** 3 / times[len(times) // 2] / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
