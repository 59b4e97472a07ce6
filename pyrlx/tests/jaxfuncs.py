"""Functions written once against a numpy-like namespace `ns` (jax.numpy or rlx.numpy), the
transforms applied to them, and their inputs. tools/pyrlx_jax_fixtures.py runs them under JAX
and commits the results; test_jax.py runs them under RLX and compares."""

import numpy as np


def mlp_loss(ns, x, w1, b1, w2):
    return ns.sum(ns.tanh(x @ w1 + b1) @ w2) / x.shape[0]


def xent(ns, w, x, onehot):
    logp = ns.log_softmax(x @ w, axis=-1)
    return -ns.mean(ns.sum(logp * onehot, axis=-1))


def elementwise(ns, x):
    return ns.sum(ns.sin(x) * ns.exp(-x * x) + ns.sqrt(x * x + 1.0))


def scalar_fn(ns, x):
    return ns.sin(x) * x * x + ns.tanh(x)


def layer(ns, x, w):
    return ns.tanh(x @ w)


def layer_norm_loss(ns, x, g):
    m = ns.mean(x, axis=-1, keepdims=True)
    v = ns.mean((x - m) ** 2, axis=-1, keepdims=True)
    return ns.sum(((x - m) / ns.sqrt(v + 1e-5)) * g)


def rnn_loss(ns, lax, h0, xs, w, u):
    def step(h, x):
        h = ns.tanh(h @ w + x @ u)
        return h, ns.sum(h * h)

    h, ys = lax.scan(step, h0, xs)
    return ns.sum(h) + ns.sum(ys)


def scan_tree(ns, lax, a, xs):
    """A dict carry with a weakly typed scalar, a tuple of stacked outputs, run in reverse."""

    def step(c, x):
        s = c["s"] * 0.9 + ns.sin(x)
        return {"n": c["n"] + 1.0, "s": s}, (s, ns.sum(x))

    c, (ss, sums) = lax.scan(step, {"n": 0.0, "s": a}, xs, reverse=True)
    return c["n"], c["s"], ss, sums


def scan_length(ns, lax, a):
    """No sequence: `length` steps over the carry alone, with a closure."""
    return lax.scan(lambda c, _: (c * 0.5 + ns.tanh(a), ns.sum(c)), a, None, length=5)


def fori_sum(ns, lax, x):
    return ns.sum(lax.fori_loop(0, 6, lambda i, v: v * 0.8 + ns.sin(v) * 0.1, x))


def cond_pick(ns, lax, x):
    return ns.sum(lax.cond(ns.sum(x) > 0.0, lambda v: ns.sin(v) * 2.0, lambda v: v * v, x))


def cond_tree(ns, lax, x, w):
    """Pytree outputs; each branch closes over a value of its own."""
    return lax.cond(
        ns.sum(x) < 0.0, lambda v: (ns.tanh(v @ w), ns.sum(v)), lambda v: (v @ (w * 2.0), ns.mean(v) + ns.sum(w)), x
    )


def grow(ns, lax, x):
    """A data-dependent trip count with a carry of mixed dtypes (an int count, a float vector)."""
    i, y = lax.while_loop(lambda c: ns.sum(c[1]) < 40.0, lambda c: (c[0] + 1, c[1] * 1.5 + 0.25), (0, x))
    return i, y


def inputs():
    """Fixed inputs of every case (f32)."""
    r = np.random.default_rng(7)
    f = lambda *s: r.standard_normal(s).astype(np.float32)  # noqa: E731
    labels = r.integers(0, 5, size=6)
    return {
        "x": f(6, 8), "w1": f(8, 16) * 0.3, "b1": f(16) * 0.1, "w2": f(16, 4) * 0.3,
        "wx": f(8, 5) * 0.3, "onehot": np.eye(5, dtype=np.float32)[labels],
        "e": f(3, 7), "s": np.float32(0.7), "v": f(6, 8), "batch": f(5, 6, 8), "g": f(8),
        "xb1": f(8, 5, 6),
        # Loops (rlx.lax against jax.lax): drawn after the others, which keep their values.
        "h0": f(4) * 0.5, "seq": f(7, 3), "wh": f(4, 4) * 0.4, "ux": f(3, 4) * 0.5, "seqb": f(2, 7, 3),
        "pos": np.abs(f(5)) + 0.5,
    }


def cases(ns, tr, I):
    """name -> zero-argument thunk computing the case with namespace `ns` and transforms `tr`
    (an object with grad, value_and_grad, vmap, jvp, jit)."""
    P = lambda f: (lambda *a: f(ns, *a))  # noqa: E731
    return {
        "mlp_value": lambda: tr.jit(P(mlp_loss))(I["x"], I["w1"], I["b1"], I["w2"]),
        "mlp_grad": lambda: tr.grad(P(mlp_loss), argnums=(1, 2, 3))(I["x"], I["w1"], I["b1"], I["w2"]),
        "xent_value_and_grad": lambda: tr.value_and_grad(P(xent))(I["wx"], I["x"], I["onehot"]),
        "elementwise_grad": lambda: tr.grad(P(elementwise))(I["e"]),
        "second_derivative": lambda: tr.grad(tr.grad(P(scalar_fn)))(I["s"]),
        "third_derivative": lambda: tr.grad(tr.grad(tr.grad(P(scalar_fn))))(I["s"]),
        "jvp_layer": lambda: tr.jvp(lambda x: P(layer)(x, I["w1"]), (I["x"],), (I["v"],)),
        "vmap_layer": lambda: tr.vmap(P(layer), in_axes=(0, None))(I["batch"], I["w1"]),
        "vmap_axis1": lambda: tr.vmap(P(layer), in_axes=(1, None), out_axes=1)(I["xb1"], I["wx"][:6]),
        "per_example_grads": lambda: tr.vmap(tr.grad(P(xent)), in_axes=(None, 0, 0))(
            I["wx"], I["x"][:, None, :], I["onehot"][:, None, :]
        ),
        "hvp_fwd_over_rev": lambda: tr.jvp(tr.grad(P(elementwise)), (I["e"],), (I["e"] * 0.5,)),
        "layer_norm_grad": lambda: tr.grad(P(layer_norm_loss), argnums=(0, 1))(I["x"], I["g"]),
        "jit_of_grad_of_vmap": lambda: tr.jit(
            tr.grad(lambda w, xs: ns.sum(tr.vmap(lambda x: P(layer)(x, w))(xs)))
        )(I["w1"], I["batch"]),
    }


def assoc_linear(ns, lax, a, b, reverse=False, axis=0):
    """The linear recurrence h = a h + b as pairs under (a1 a2, a2 b1 + b2), summed with weights."""
    def comb(x, y):
        return (x[0] * y[0], y[0] * x[1] + y[1])

    ha, hb = lax.associative_scan(comb, (a, b), reverse=reverse, axis=axis)
    return ns.sum(ha * 0.5) + ns.sum(hb * ns.sin(b))


def assoc_softmax(ns, lax, x, c):
    """A cumulative soft maximum with a temperature the combine closes over, along axis 1."""
    return lax.associative_scan(lambda a, b: ns.log(ns.exp(a / c) + ns.exp(b / c)) * c, x, reverse=True, axis=1)


def lax_cases(ns, tr, lax, I):
    """Loops and branches (`lax` is jax.lax or rlx.lax), under the transforms."""
    L = lambda f: (lambda *a: f(ns, lax, *a))  # noqa: E731
    neg = -I["pos"]
    return {
        "scan_rnn_value": lambda: tr.jit(L(rnn_loss))(I["h0"], I["seq"], I["wh"], I["ux"]),
        "scan_rnn_grad": lambda: tr.grad(L(rnn_loss), argnums=(0, 2, 3))(I["h0"], I["seq"], I["wh"], I["ux"]),
        "scan_rnn_eager": lambda: L(rnn_loss)(I["h0"], I["seq"], I["wh"], I["ux"]),
        "scan_rnn_vmap": lambda: tr.vmap(L(rnn_loss), in_axes=(None, 0, None, None))(I["h0"], I["seqb"], I["wh"], I["ux"]),
        "scan_rnn_jvp": lambda: tr.jvp(lambda w: L(rnn_loss)(I["h0"], I["seq"], w, I["ux"]), (I["wh"],), (I["wh"] * 0.3,)),
        "scan_tree": lambda: tr.jit(L(scan_tree))(I["pos"][:3], I["seq"]),
        "scan_tree_grad": lambda: tr.grad(lambda a: ns.sum(L(scan_tree)(a, I["seq"])[2]))(I["pos"][:3]),
        "scan_length": lambda: tr.jit(L(scan_length))(I["h0"]),
        "scan_length_grad": lambda: tr.grad(lambda a: ns.sum(L(scan_length)(a)[1]))(I["h0"]),
        "map_rows": lambda: tr.jit(lambda x: lax.map(lambda r: ns.sum(ns.sin(r) * r), x))(I["x"]),
        "fori_value_and_grad": lambda: tr.value_and_grad(L(fori_sum))(I["e"]),
        "cond_true_grad": lambda: tr.value_and_grad(L(cond_pick))(I["pos"]),
        "cond_false_grad": lambda: tr.value_and_grad(L(cond_pick))(neg),
        "cond_tree_true": lambda: tr.jit(L(cond_tree))(neg[:4], I["wh"]),
        "cond_tree_false": lambda: tr.jit(L(cond_tree))(I["pos"][:4], I["wh"]),
        "cond_tree_grad": lambda: tr.grad(lambda w: ns.sum(L(cond_tree)(I["pos"][:4], w)[0]))(I["wh"]),
        "while_grow": lambda: tr.jit(L(grow))(I["pos"]),
        "while_grow_vmap": lambda: tr.vmap(L(grow))(np.abs(I["batch"][:, 0, :5]) + 0.5),
        "while_grow_jvp": lambda: tr.jvp(lambda x: L(grow)(x)[1], (I["pos"],), (I["pos"] * 0.1,)),
        "assoc_cumsum": lambda: tr.jit(lambda x: lax.associative_scan(lambda a, b: a + b, x))(I["seq"]),
        "assoc_cummax_axis1": lambda: tr.jit(lambda x: lax.associative_scan(ns.maximum, x, axis=1))(I["e"]),
        "assoc_linear_grad": lambda: tr.value_and_grad(L(assoc_linear), argnums=(0, 1))(
            np.abs(I["seq"]) * 0.3 + 0.6, I["seq"]
        ),
        "assoc_linear_reverse_axis1_grad": lambda: tr.grad(
            lambda a, b: assoc_linear(ns, lax, a, b, reverse=True, axis=1), argnums=(0, 1)
        )(np.abs(I["e"]) * 0.3 + 0.6, I["e"]),
        "assoc_softmax_grad": lambda: tr.grad(lambda x, c: ns.sum(L(assoc_softmax)(x, c) * x), argnums=(0, 1))(
            I["e"], I["s"]
        ),
        "assoc_vmap": lambda: tr.vmap(lambda x: L(assoc_linear)(ns.abs(x) * 0.3 + 0.6, x))(I["seqb"]),
        "assoc_eager": lambda: lax.associative_scan(lambda a, b: a * b, I["pos"]),
    }


def all_cases(ns, tr, lax, I):
    """Every case: `cases` and `lax_cases`."""
    return {**cases(ns, tr, I), **lax_cases(ns, tr, lax, I)}


def jax_namespaces():
    """(ns, tr, lax) for JAX: jax.numpy plus the jax.nn functions rlx.numpy also has, the
    transforms, jax.lax. Imports jax (the fixture script, and the live check where installed)."""
    import types

    import jax
    import jax.numpy as jnp

    ns = types.SimpleNamespace(**{k: getattr(jnp, k) for k in ("sum", "mean", "tanh", "sin", "exp", "sqrt", "log", "abs", "maximum")})
    ns.log_softmax = jax.nn.log_softmax
    tr = types.SimpleNamespace(jit=jax.jit, grad=jax.grad, value_and_grad=jax.value_and_grad, vmap=jax.vmap, jvp=jax.jvp)
    return ns, tr, jax.lax


def flatten(out):
    """Leaves of a nested result, as f32 arrays."""
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in flatten(o)]
    return [np.asarray(out, dtype=np.float32)]
