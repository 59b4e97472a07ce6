#!/usr/bin/env python3
"""JAX's side of the scan RNN benchmark (`rlx-bench scan`, which runs this script each round):
a T-step RNN `h <- tanh(x wx + h wh + b)` through `jax.lax.scan` in float32, loss
`sum(hs^2) / T`; jit compile time (lower + compile) and the median run of the forward (loss) and
of the forward and backward (loss and gradients of wx, wh, b), on the CPU.

Run: pip install jax; python3 tools/jax_scan_bench.py [T] [BATCH] [IN] [HIDDEN] [REPS]
"""
import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

T, N, D, H, REPS = (int(a) for a in (sys.argv[1:] + ["1000", "8", "16", "64", "20"][len(sys.argv[1:]):]))


def loss(wx, wh, b, h0, xs):
    def step(h, x):
        hn = jnp.tanh(x @ wx + h @ wh + b)
        return hn, hn

    _, hs = jax.lax.scan(step, h0, xs)
    return jnp.sum(hs * hs) / T


def bench(f, args):
    t = time.perf_counter()
    c = jax.jit(f).lower(*args).compile()
    compile_s = time.perf_counter() - t
    jax.block_until_ready(c(*args))
    runs = []
    for _ in range(REPS):
        t = time.perf_counter()
        jax.block_until_ready(c(*args))
        runs.append(time.perf_counter() - t)
    return compile_s, statistics.median(runs)


def main():
    rng = np.random.RandomState(0)
    f = lambda *s: jnp.asarray(rng.uniform(-0.5, 0.5, s).astype(np.float32))
    args = (f(D, H), f(H, H), f(H), f(N, H), f(T, N, D))
    fc, fr = bench(loss, args)
    bc, br = bench(jax.value_and_grad(loss, argnums=(0, 1, 2)), args)
    print(json.dumps({"jax": jax.__version__, "T": T, "N": N, "D": D, "H": H,
                      "forward_compile_ms": fc * 1e3, "forward_ms": fr * 1e3,
                      "backward_compile_ms": bc * 1e3, "backward_ms": br * 1e3}))


if __name__ == "__main__":
    main()
