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


def flatten(out):
    """Leaves of a nested result, as f32 arrays."""
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in flatten(o)]
    return [np.asarray(out, dtype=np.float32)]
