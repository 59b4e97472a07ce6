#!/usr/bin/env python3
"""Reference data for rlx-sparse (crates/rlx-sparse/tests/fixtures/sparse.json).

scipy gives the forward values: CSR products (A @ x, A @ X, A.T @ y), conjugate gradient
(scipy.sparse.linalg.cg) on an SPD matrix and spsolve on an unsymmetric one. JAX (dense math in
f64 for the same functions) gives the gradients of `sum(w * solve(A, b))` with respect to A's
stored values and b, the implicit-function rule that rlx-sparse's vjp implements.

Run: python3 tools/sparse_fixtures.py
"""
import json
import os

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "rlx-sparse", "tests", "fixtures", "sparse.json")
rng = np.random.default_rng(40)


def csr_dict(a):
    a = sp.csr_matrix(a)
    a.sort_indices()
    return {
        "nrows": a.shape[0],
        "ncols": a.shape[1],
        "indptr": a.indptr.tolist(),
        "indices": a.indices.tolist(),
        "values": a.data.tolist(),
    }


def dense_of(a, values):
    """The dense matrix of A's pattern with `values`, as a differentiable JAX function."""
    rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
    return jnp.zeros(a.shape).at[rows, a.indices].add(values)


def solve_grads(a, b, w, sym):
    """Gradients of sum(w * M^-1 b), M = A (or its symmetric part), wrt A's values and b."""

    def loss(values, b):
        m = dense_of(a, values)
        if sym:
            m = 0.5 * (m + m.T)
        return jnp.sum(w * jnp.linalg.solve(m, b))

    gv, gb = jax.grad(loss, argnums=(0, 1))(jnp.array(a.data), jnp.array(b))
    return np.asarray(gv).tolist(), np.asarray(gb).tolist()


def main():
    # A rectangular random matrix for the products.
    r = sp.random(7, 9, density=0.3, random_state=1, format="csr")
    x, xs, y = rng.standard_normal(9), rng.standard_normal((9, 3)), rng.standard_normal(7)
    prod = {
        "a": csr_dict(r),
        "x": x.tolist(),
        "xs": xs.flatten().tolist(),
        "k": 3,
        "y": y.tolist(),
        "ax": (r @ x).tolist(),
        "axs": (r @ xs).flatten().tolist(),
        "aty": (r.T @ y).tolist(),
    }
    # An SPD matrix: the 1-D Laplacian plus random symmetric couplings, diagonally dominant.
    n = 30
    lap = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n))
    c = sp.random(n, n, density=0.05, random_state=2)
    c = 0.3 * (c + c.T)
    spd = sp.csr_matrix(lap + c + sp.diags(np.asarray(abs(c).sum(axis=1)).ravel()))
    b = rng.standard_normal(n)
    iters = []
    xcg, info = spla.cg(spd, b, rtol=1e-12, atol=0.0, maxiter=1000, callback=lambda xk: iters.append(1))
    assert info == 0
    w = rng.standard_normal(n)
    gv, gb = solve_grads(spd, b, w, sym=True)
    cg = {"a": csr_dict(spd), "b": b.tolist(), "x": xcg.tolist(), "scipy_iterations": len(iters),
          "w": w.tolist(), "grad_values": gv, "grad_b": gb}
    # An unsymmetric, non-singular matrix for the LU.
    u = sp.random(n, n, density=0.1, random_state=3) - sp.random(n, n, density=0.1, random_state=4)
    u = sp.csr_matrix(u + sp.diags(2.0 + rng.random(n)))
    xlu = spla.spsolve(sp.csc_matrix(u), b)
    gv, gb = solve_grads(u, b, w, sym=False)
    lu = {"a": csr_dict(u), "b": b.tolist(), "x": xlu.tolist(), "w": w.tolist(), "grad_values": gv, "grad_b": gb}
    with open(OUT, "w") as f:
        json.dump({"product": prod, "cg": cg, "lu": lu}, f)
    print("wrote", OUT, "cg iterations", len(iters))


if __name__ == "__main__":
    main()
