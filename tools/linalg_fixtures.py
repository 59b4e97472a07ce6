#!/usr/bin/env python3
"""Fixtures for crates/rlx-linalg: values from numpy (LAPACK, f64) and gradients from JAX (CPU,
x64) of `sum(op(inputs) * w)` for a fixed weight w.

Decompositions have sign conventions fixed, on numpy's value and inside the JAX function alike
(the signs are piecewise constant, so the gradient is that of the fixed-sign output):
qr has diag(r) >= 0; each eigenvector of eigh, and each column of svd's u, has its entry of
largest magnitude positive (svd's vt rows follow u's columns).

Writes crates/rlx-linalg/tests/fixtures/linalg.json. Run from the repo root:
    python3 tools/linalg_fixtures.py
"""
import json
import os

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

rng = np.random.default_rng(40)


def general(*dims):
    """Well-conditioned square matrices: normal plus 3 I (signs of det vary)."""
    a = rng.standard_normal(dims)
    return a + 3.0 * np.eye(dims[-1]) * rng.choice([-1.0, 1.0], size=dims[:-2] + (1, 1))


def spd(*dims):
    m = rng.standard_normal(dims)
    return m @ np.swapaxes(m, -1, -2) / dims[-1] + np.eye(dims[-1])


def t(x):
    x = np.asarray(x, dtype=np.float64)
    return {"dims": list(x.shape), "data": [float(v) for v in x.reshape(-1)]}


def qr_signs(q, r, xp):
    """Reduced QR with diag(r) >= 0."""
    d = xp.diagonal(r, axis1=-2, axis2=-1)
    s = xp.where(d < 0, -1.0, 1.0)
    return q * s[..., None, :], r * s[..., :, None]


def np_qr(a):
    return qr_signs(*np.linalg.qr(a, mode="reduced"), np)


def jax_qr(a):
    return qr_signs(*jnp.linalg.qr(a, mode="reduced"), jnp)


def vec_signs(v, xp):
    """Each column's entry of largest magnitude positive (the first on ties)."""
    idx = xp.argmax(xp.abs(v), axis=-2)
    big = xp.take_along_axis(v, idx[..., None, :], axis=-2)
    return v * xp.where(big < 0, -1.0, 1.0)


def svd_signs(u, s, vt, xp, stop=lambda x: x):
    """Each column of u with its entry of largest magnitude positive, the rows of vt with it."""
    idx = xp.argmax(xp.abs(u), axis=-2)
    big = xp.take_along_axis(u, idx[..., None, :], axis=-2)
    sg = stop(xp.where(big < 0, -1.0, 1.0))
    return u * sg, s, vt * xp.swapaxes(sg, -1, -2)


def np_svd(a):
    return svd_signs(*np.linalg.svd(a, full_matrices=False), np)


def jax_svd(a):
    return svd_signs(*jnp.linalg.svd(a, full_matrices=False), jnp, jax.lax.stop_gradient)


def np_eigh(a):
    w, v = np.linalg.eigh(a)
    return w, vec_signs(v, np)


def jax_eigh(a):
    w, v = jnp.linalg.eigh(a)
    return w, vec_signs(v, jnp)


OPS = {
    # name: (numpy value, jax function)
    "solve": (np.linalg.solve, jnp.linalg.solve),
    "cholesky": (np.linalg.cholesky, jnp.linalg.cholesky),
    "inv": (np.linalg.inv, jnp.linalg.inv),
    "det": (np.linalg.det, jnp.linalg.det),
    "slogdet_sign": (lambda a: np.linalg.slogdet(a)[0], lambda a: jnp.linalg.slogdet(a)[0]),
    "slogdet_logabsdet": (lambda a: np.linalg.slogdet(a)[1], lambda a: jnp.linalg.slogdet(a)[1]),
    "qr_q": (lambda a: np_qr(a)[0], lambda a: jax_qr(a)[0]),
    "qr_r": (lambda a: np_qr(a)[1], lambda a: jax_qr(a)[1]),
    "eigh_values": (lambda a: np_eigh(a)[0], lambda a: jax_eigh(a)[0]),
    "eigh_vectors": (lambda a: np_eigh(a)[1], lambda a: jax_eigh(a)[1]),
    "svd_u": (lambda a: np_svd(a)[0], lambda a: jax_svd(a)[0]),
    "svd_s": (lambda a: np_svd(a)[1], lambda a: jax_svd(a)[1]),
    "svd_vt": (lambda a: np_svd(a)[2], lambda a: jax_svd(a)[2]),
    "lstsq": (lambda a, b: np.linalg.lstsq(a, b, rcond=None)[0], lambda a, b: jnp.linalg.lstsq(a, b)[0]),
}

CASES = [
    ("solve", [general(3, 3), rng.standard_normal(3)]),
    ("solve", [general(2, 4, 4), rng.standard_normal((2, 4, 3))]),
    ("solve", [general(2, 3, 3), rng.standard_normal((3, 2))]),
    ("solve", [general(3, 3), rng.standard_normal((2, 3, 1))]),
    ("solve", [general(2, 3, 3), rng.standard_normal(3)]),
    ("cholesky", [spd(4, 4)]),
    ("cholesky", [spd(2, 3, 3)]),
    ("inv", [general(4, 4)]),
    ("inv", [general(2, 3, 3)]),
    ("det", [general(3, 3)]),
    ("det", [general(3, 4, 4)]),
    ("slogdet_sign", [general(3, 4, 4)]),
    ("slogdet_logabsdet", [general(3, 4, 4)]),
]

# Later ops draw from their own generator, so the cases above stay as they were.
FIRST = len(CASES)
rng_first, rng = rng, np.random.default_rng(41)


def symmetric(*dims):
    m = rng.standard_normal(dims)
    return (m + np.swapaxes(m, -1, -2)) / 2


CASES += [
    ("qr_q", [rng.standard_normal((5, 3))]),
    ("qr_r", [rng.standard_normal((5, 3))]),
    ("qr_q", [rng.standard_normal((2, 4, 4))]),
    ("qr_r", [rng.standard_normal((2, 4, 4))]),
    ("qr_q", [rng.standard_normal((3, 5))]),
    ("qr_r", [rng.standard_normal((3, 5))]),
    ("eigh_values", [symmetric(4, 4)]),
    ("eigh_vectors", [symmetric(4, 4)]),
    ("eigh_values", [symmetric(2, 3, 3)]),
    ("eigh_vectors", [symmetric(2, 3, 3)]),
    ("lstsq", [rng.standard_normal((5, 3)), rng.standard_normal(5)]),
    ("lstsq", [rng.standard_normal((6, 4)), rng.standard_normal((6, 2))]),
    ("lstsq", [rng.standard_normal((3, 3)), rng.standard_normal(3)]),
    ("svd_u", [rng.standard_normal((5, 3))]),
    ("svd_s", [rng.standard_normal((5, 3))]),
    ("svd_vt", [rng.standard_normal((5, 3))]),
    ("svd_u", [rng.standard_normal((2, 3, 4))]),
    ("svd_s", [rng.standard_normal((2, 3, 4))]),
    ("svd_vt", [rng.standard_normal((2, 3, 4))]),
    ("svd_vt", [rng.standard_normal((3, 3))]),
    # Wide: numpy's minimum-norm solution.
    ("lstsq", [rng.standard_normal((3, 5)), rng.standard_normal(3)]),
    ("lstsq", [rng.standard_normal((2, 4)), rng.standard_normal((2, 3))]),
]


def main():
    out = []
    for i, (name, ins) in enumerate(CASES):
        np_f, jax_f = OPS[name]
        y = np.asarray(np_f(*ins))
        w = (rng_first if i < FIRST else rng).standard_normal(y.shape)
        loss = lambda *xs: jnp.sum(jax_f(*xs) * w)  # noqa: E731
        try:
            grads = jax.grad(loss, argnums=tuple(range(len(ins))))(*[jnp.asarray(x) for x in ins])
        except NotImplementedError:
            grads = []  # JAX has no derivative here (qr of a wide matrix): values only.
        out.append({
            "op": name,
            "inputs": [t(x) for x in ins],
            "output": t(y),
            "weight": t(w),
            "grads": [t(g) for g in grads],
        })
    path = os.path.join(os.path.dirname(__file__), "..", "crates", "rlx-linalg", "tests", "fixtures", "linalg.json")
    with open(path, "w") as f:
        json.dump({"source": "tools/linalg_fixtures.py (numpy %s, jax %s)" % (np.__version__, jax.__version__),
                   "cases": out}, f)
        f.write("\n")
    print("wrote", os.path.normpath(path), len(out), "cases")


if __name__ == "__main__":
    main()
