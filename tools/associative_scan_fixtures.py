#!/usr/bin/env python3
"""Reference values for RLX's `associative_scan` from `jax.lax.associative_scan` (float64): a
cumulative sum, a cumulative max and the linear recurrence `(a1, b1) . (a2, b2) = (a1 a2,
a2 b1 + b2)` (forward, reverse=True, axis=1), each with its value and the gradient of
`sum(w * result)` for fixed weights `w`.

Writes crates/rlx-autodiff/tests/fixtures/jax_associative_scan.json.
Run: pip install jax; python3 tools/associative_scan_fixtures.py
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)
OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "rlx-autodiff", "tests", "fixtures")
rng = np.random.RandomState(39)


def enc(v):
    return {"shape": list(np.shape(v)), "data": np.asarray(v, dtype=np.float64).ravel().tolist()}


def linrec(x, y):
    (a1, b1), (a2, b2) = x, y
    return a1 * a2, a2 * b1 + b2


COMBINES = {
    "add": lambda x, y: (x[0] + y[0],),
    "max": lambda x, y: (jnp.maximum(x[0], y[0]),),
    "linear": linrec,
}


def case(name, combine, shape, axis, reverse, lows):
    leaves = tuple(rng.uniform(lo, hi, shape) for lo, hi in lows)
    ws = tuple(rng.uniform(-1, 1, shape) for _ in leaves)

    def scan(*xs):
        return jax.lax.associative_scan(COMBINES[combine], tuple(xs), reverse=reverse, axis=axis)

    def loss(*xs):
        return sum(jnp.sum(w * r) for w, r in zip(ws, scan(*xs)))

    outs = scan(*leaves)
    grads = jax.grad(loss, argnums=tuple(range(len(leaves))))(*leaves)
    return {
        "name": name,
        "combine": combine,
        "axis": axis,
        "reverse": reverse,
        "leaves": [enc(x) for x in leaves],
        "weights": [enc(w) for w in ws],
        "results": [enc(r) for r in outs],
        "grads": [enc(g) for g in grads],
    }


def main():
    lin = [(0.6, 1.1), (-1.0, 1.0)]
    cases = [
        case("cumsum", "add", (13, 3), 0, False, [(-1, 1)]),
        case("cummax", "max", (12, 2), 0, False, [(-2, 2)]),
        case("cummax_reverse", "max", (11,), 0, True, [(-2, 2)]),
        case("linear", "linear", (17, 2), 0, False, lin),
        case("linear_reverse", "linear", (16, 2), 0, True, lin),
        case("linear_axis1", "linear", (2, 15, 2), 1, False, lin),
        case("linear_axis1_reverse", "linear", (3, 10), 1, True, lin),
    ]
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "jax_associative_scan.json")
    with open(path, "w") as f:
        json.dump({"jax": jax.__version__, "cases": cases}, f, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
