#!/usr/bin/env python3
"""pyrlx overhead and speed, side by side in one process (figures go in docs/benchmarks-history.md).

1. A tiny graph (f32[4] * 2 + 1): seconds per run from Python (`CompiledGraph.run` with a dict,
   `CompiledGraph.call` positional, an `rlx.jit` function) against the same compiled graph run
   in a Rust loop (`run_into`, buffers allocated once).
2. An MLP forward at batch 128, width 768 (768 -> 3072 -> 768, tanh-GELU, the transformer FFN
   shape): `rlx.jit` against `jax.jit` on the CPU (skipped without jax).

Every figure is the median of --repeats timings of --iters calls each.
Usage: python3 tools/pyrlx_bench.py [--repeats 7] [--iters 20000]
"""

import argparse
import os
import statistics
import time

import numpy as np

import rlx
import rlx.numpy as rnp
from rlx import _rlx


def median_time(fn, iters, repeats):
    fn()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        out.append((time.perf_counter() - t) / iters)
    return statistics.median(out)


def tiny(iters, repeats):
    g = rlx.Graph("tiny")
    x = g.input("x", [4])
    g.set_outputs([g.add(g.mul(x, g.scalar(2.0)), g.scalar(1.0))])
    c = rlx.Session("cpu").compile(g)
    xs = np.arange(4, dtype=np.float32)
    inputs = {"x": xs}
    rust = statistics.median(_rlx._time_rust_run(c, [xs], iters) for _ in range(repeats))
    run = median_time(lambda: c.run(inputs), iters, repeats)
    call = median_time(lambda: c.call(xs), iters, repeats)
    f = rlx.jit(lambda x: x * 2.0 + 1.0)
    jit = median_time(lambda: f(xs), iters, repeats)
    print("tiny graph f32[4] (x * 2 + 1), us per call (median):")
    print(f"  Rust run_into loop   {rust * 1e6:8.2f}")
    for name, t in [("CompiledGraph.run", run), ("CompiledGraph.call", call), ("rlx.jit call", jit)]:
        print(f"  {name:20s} {t * 1e6:8.2f}   (+{(t - rust) * 1e6:.2f} over Rust)")


def mlp(ns, x, w1, b1, w2, b2, gelu):
    return gelu(x @ w1 + b1) @ w2 + b2


def mlp_bench(repeats):
    r = np.random.default_rng(0)
    x = r.standard_normal((128, 768)).astype(np.float32)
    w1 = (r.standard_normal((768, 3072)) * 0.02).astype(np.float32)
    b1 = np.zeros(3072, np.float32)
    w2 = (r.standard_normal((3072, 768)) * 0.02).astype(np.float32)
    b2 = np.zeros(768, np.float32)
    args = (x, w1, b1, w2, b2)
    f = rlx.jit(lambda *a: mlp(rnp, *a, rnp.gelu))
    out_rlx = f(*args)
    t_rlx = median_time(lambda: f(*args), 20, repeats)
    built = next(iter(f.cache.values()))
    t_rust = statistics.median(_rlx._time_rust_run(built.compiled, list(args), 20) for _ in range(repeats))
    flops = 2 * 128 * 768 * 3072 * 2
    print("MLP forward 128x768 -> 3072 -> 768 (tanh GELU), ms per call (median of 20-call runs):")
    print(f"  rlx.jit    {t_rlx * 1e3:8.3f}  ({flops / t_rlx / 1e9:.1f} GFLOP/s)")
    print(f"  Rust loop  {t_rust * 1e3:8.3f}  (the same compiled graph, run_into from Rust)")
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("  jax.jit    (jax not installed: pip install jax)")
        return
    jf = jax.jit(lambda *a: mlp(jnp, *a, jax.nn.gelu))
    jargs = [jax.device_put(a) for a in args]
    out_jax = np.asarray(jf(*jargs))
    t_jax = median_time(lambda: jf(*jargs).block_until_ready(), 20, repeats)
    jnp_in = median_time(lambda: jf(*args).block_until_ready(), 20, repeats)
    print(f"  jax.jit    {t_jax * 1e3:8.3f}  ({flops / t_jax / 1e9:.1f} GFLOP/s; device arrays in)")
    print(f"  jax.jit    {jnp_in * 1e3:8.3f}  (numpy arrays in, as rlx takes them)")
    print(f"  rlx / jax  {t_rlx / t_jax:8.2f}x time (numpy in for both: {t_rlx / jnp_in:.2f}x)")
    print(f"  max |rlx - jax| = {np.abs(out_rlx - out_jax).max():.2e}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20000)
    a = ap.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f} (2 cores); RLX_NUM_THREADS={os.environ.get('RLX_NUM_THREADS', 'default')}")
    tiny(a.iters, a.repeats)
    mlp_bench(a.repeats)
