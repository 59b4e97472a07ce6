#!/usr/bin/env python3
"""numpy's and JAX's side of the selective_scan benchmark (RLX's:
crates/rlx-autodiff/examples/selective_scan_bench.rs, same shapes and loss): mamba's
selective_scan_ref with softplus, delta_bias, D and z in f32, loss sum(y * w); the median run of
the numpy loop (forward only), and of JAX's jit-compiled lax.scan version, forward and
forward + backward (jax.value_and_grad over every operand), on the CPU.

Run: python3 tools/selective_scan_bench.py [B] [D] [N] [L] [REPS]
"""
import json
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from selective_scan_fixtures import selective_scan_ref  # noqa: E402


def median_ms(f, reps):
    f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t) * 1e3)
    return sorted(ts)[len(ts) // 2]


def main():
    a = [int(x) for x in sys.argv[1:]]
    at = lambda i, d: a[i] if len(a) > i else d  # noqa: E731
    b, d, n, l, reps = at(0, 2), at(1, 64), at(2, 16), at(3, 256), at(4, 10)
    rng = np.random.RandomState(1)
    f32 = np.float32
    u = rng.uniform(-1, 1, (b, d, l)).astype(f32)
    delta = rng.uniform(-1, 0.5, (b, d, l)).astype(f32)
    A = rng.uniform(-1.5, -0.2, (d, n)).astype(f32)
    B = rng.uniform(-1, 1, (b, n, l)).astype(f32)
    C = rng.uniform(-1, 1, (b, n, l)).astype(f32)
    D = rng.uniform(-1, 1, (d,)).astype(f32)
    z = rng.uniform(-1, 1, (b, d, l)).astype(f32)
    bias = rng.uniform(-0.5, 0.5, (d,)).astype(f32)
    w = rng.uniform(-1, 1, (b, d, l)).astype(f32)
    out = {"B": b, "D": d, "N": n, "L": l}
    out["numpy_forward_ms"] = round(median_ms(
        lambda: float((selective_scan_ref(u, delta, A, B, C, D, z, bias, True) * w).sum()), reps), 3)
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print(json.dumps(out))
        return

    def ssm(u, delta, A, B, C, D, z, bias):
        delta = jax.nn.softplus(delta + bias[:, None])
        dA = jnp.exp(jnp.einsum("bdl,dn->lbdn", delta, A))
        dBu = jnp.einsum("bdl,bnl,bdl->lbdn", delta, B, u)

        def step(h, xs):
            da, dbu, c = xs
            h = da * h + dbu
            return h, jnp.einsum("bdn,bn->bd", h, c)

        _, ys = jax.lax.scan(step, jnp.zeros((u.shape[0], u.shape[1], A.shape[1]), u.dtype),
                             (dA, dBu, jnp.transpose(C, (2, 0, 1))))
        y = jnp.transpose(ys, (1, 2, 0)) + u * D[:, None]
        return y * jax.nn.silu(z)

    def loss(*args):
        return (ssm(*args) * w).sum()

    args = tuple(jnp.asarray(x) for x in (u, delta, A, B, C, D, z, bias))
    fwd = jax.jit(loss)
    vg = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(8))))
    out["jax_forward_ms"] = round(median_ms(lambda: fwd(*args).block_until_ready(), reps), 3)
    out["jax_fwd_bwd_ms"] = round(median_ms(lambda: jax.block_until_ready(vg(*args)), reps), 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
