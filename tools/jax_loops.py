#!/usr/bin/env python3
"""Reference values for RLX's loops from JAX (float64): a 1000-step RNN through `jax.lax.scan`
(loss, gradients, a JVP) and a Newton iteration with a data-dependent trip count through
`jax.lax.while_loop` (value, trip count, forward-mode derivative).

The RNN's inputs are a formula (`xs`, below, rewritten in the Rust test), so the fixture stays
small: only the weights, the tangents and the results are stored.

Writes crates/rlx-autodiff/tests/fixtures/jax_loops.json. Run: pip install jax; python3 tools/jax_loops.py
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)
OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "rlx-autodiff", "tests", "fixtures")
rng = np.random.RandomState(39)

T, N, D, H = 1000, 2, 3, 4


def enc(v):
    return {"shape": list(np.shape(v)), "data": np.asarray(v, dtype=np.float64).ravel().tolist()}


def xs_formula():
    # xs[t, n, d] = 0.8 * sin(0.01 * (t + 1) * (d + 1) + 0.5 * n): the same expression in the Rust test.
    t = np.arange(T, dtype=np.float64)[:, None, None]
    n = np.arange(N, dtype=np.float64)[None, :, None]
    d = np.arange(D, dtype=np.float64)[None, None, :]
    return 0.8 * np.sin(0.01 * (t + 1.0) * (d + 1.0) + 0.5 * n)


def rnn_loss(xs, h0, wx, wh, b):
    def step(h, x):
        hn = jnp.tanh(x @ wx + h @ wh + b)
        return hn, hn

    last, hs = jax.lax.scan(step, h0, xs)
    return jnp.sum(hs * hs) / T + jnp.sum(last)


def rnn():
    params = {
        "h0": rng.uniform(-1, 1, (N, H)),
        "wx": rng.uniform(-1, 1, (D, H)),
        "wh": rng.uniform(-0.6, 0.6, (H, H)),
        "b": rng.uniform(-0.3, 0.3, (H,)),
    }
    names = ["h0", "wx", "wh", "b"]
    xs = jnp.asarray(xs_formula())
    vals = [jnp.asarray(params[n]) for n in names]
    f = jax.jit(lambda *p: rnn_loss(xs, *p))
    loss, grads = jax.value_and_grad(f, argnums=(0, 1, 2, 3))(*vals)
    tangents = {n: rng.uniform(-0.5, 0.5, np.shape(params[n])) for n in names}
    _, jv = jax.jvp(f, tuple(vals), tuple(jnp.asarray(tangents[n]) for n in names))
    gxs = jax.grad(lambda x: rnn_loss(x, *vals))(xs)
    res = {"loss": loss, "jvp": jv, "grad_xs_dot_xs": jnp.vdot(gxs, xs)}
    for n, g in zip(names, grads):
        res[f"grad_{n}"] = g
    return {
        "params": {n: enc(v) for n, v in params.items()},
        "tangents": {n: enc(v) for n, v in tangents.items()},
        "results": {k: enc(v) for k, v in res.items()},
    }


def newton():
    # x <- x - (x^2 - a) / (2x) while any |x^2 - a| > 1e-12; the carry's last entry counts trips.
    a = np.array([2.0, 9.0, 0.25, 1234.5])
    ta = np.array([1.0, -0.5, 0.25, 2.0])

    def solve(a):
        def cond(c):
            x = c[:4]
            return jnp.max(jnp.abs(x * x - a)) > 1e-12

        def body(c):
            x = c[:4]
            return jnp.concatenate([x - (x * x - a) / (2.0 * x), c[4:] + 1.0])

        return jax.lax.while_loop(cond, body, jnp.concatenate([a, jnp.zeros(1)]))

    out = solve(jnp.asarray(a))
    _, dout = jax.jvp(solve, (jnp.asarray(a),), (jnp.asarray(ta),))
    return {"a": enc(a), "tangent_a": enc(ta), "out": enc(out), "jvp": enc(dout)}


def main():
    doc = {"rnn": rnn(), "newton": newton()}
    with open(os.path.join(OUT, "jax_loops.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
