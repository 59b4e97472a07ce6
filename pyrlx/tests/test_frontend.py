"""The JAX-style front end: rlx.numpy against numpy (eagerly and under jit), tracing, caching
per signature, pytrees, closures and composition."""

import math

import numpy as np
import pytest

import rlx
import rlx.numpy as rnp

R = np.random.default_rng(1)
X = R.uniform(0.2, 2.0, (3, 4)).astype(np.float32)
Y = R.uniform(-2.0, 2.0, (3, 4)).astype(np.float32)
erf = np.vectorize(math.erf)

UNARY = [
    ("negative", np.negative), ("abs", np.abs), ("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt),
    ("rsqrt", lambda x: 1 / np.sqrt(x)), ("reciprocal", np.reciprocal), ("square", np.square),
    ("sin", np.sin), ("cos", np.cos), ("tanh", np.tanh), ("erf", erf), ("floor", np.floor),
    ("sign", np.sign), ("sigmoid", lambda x: 1 / (1 + np.exp(-x))), ("relu", lambda x: np.maximum(x, 0)),
    ("silu", lambda x: x / (1 + np.exp(-x))), ("softplus", lambda x: np.log1p(np.exp(x))),
]


@pytest.mark.parametrize("name,ref", UNARY)
def test_unary_eager_and_jit(name, ref):
    f = getattr(rnp, name)
    want = ref(X.astype(np.float64))
    np.testing.assert_allclose(f(X), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rlx.jit(lambda x: f(x * 1.0))(X), want, rtol=1e-5, atol=1e-6)


BINARY = [
    ("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply), ("divide", np.divide),
    ("power", np.power), ("maximum", np.maximum), ("minimum", np.minimum), ("equal", np.equal),
    ("not_equal", np.not_equal), ("less", np.less), ("less_equal", np.less_equal),
    ("greater", np.greater), ("greater_equal", np.greater_equal),
]


@pytest.mark.parametrize("name,ref", BINARY)
def test_binary_and_operators(name, ref):
    a, b = X, Y[:1]
    if name == "power":
        b = np.abs(b)
    np.testing.assert_allclose(getattr(rnp, name)(a, b), ref(a, b), rtol=1e-5)


def test_operators_on_tracers_match_numpy():
    def f(x, y):
        return [x + y, x - 2, 3 - x, x * y, x / 2, 1 / x, x**2, 2.0**y, -x, abs(y), x @ y.T,
                x < y, x >= 1.0, x == x, x.T, x.reshape(4, 3), x.reshape(-1), x.sum(), x.mean(0),
                x.max(axis=1, keepdims=True), x.min(), x.prod(1), x.argmax(), y.argmax(axis=0),
                x.astype(np.float16), x.transpose(1, 0)]

    def ref(x, y):
        return [x + y, x - 2, 3 - x, x * y, x / 2, 1 / x, x**2, 2.0**y, -x, abs(y), x @ y.T,
                x < y, x >= 1.0, x == x, x.T, x.reshape(4, 3), x.reshape(-1), x.sum(), x.mean(0),
                x.max(axis=1, keepdims=True), x.min(), x.prod(1), x.argmax(), y.argmax(axis=0),
                x.astype(np.float16), x.transpose(1, 0)]

    for i, (a, b) in enumerate(zip(rlx.jit(f)(X, Y), ref(X, Y))):
        assert a.shape == b.shape, i
        assert a.dtype == b.dtype or (b.dtype == np.int64 and a.dtype.kind == "i"), (i, a.dtype, b.dtype)
        np.testing.assert_allclose(a, b, rtol=2e-3 if b.dtype == np.float16 else 1e-5, err_msg=str(i))


def test_shape_functions_match_numpy():
    z = R.standard_normal((2, 3, 4)).astype(np.float32)
    idx = np.array([2, 0, 2], np.int32)
    cases = [
        (lambda a: rnp.transpose(a, (2, 0, 1)), lambda a: np.transpose(a, (2, 0, 1))),
        (lambda a: rnp.moveaxis(a, 0, -1), lambda a: np.moveaxis(a, 0, -1)),
        (lambda a: rnp.swapaxes(a, 0, 2), lambda a: np.swapaxes(a, 0, 2)),
        (lambda a: rnp.expand_dims(a, 1), lambda a: np.expand_dims(a, 1)),
        (lambda a: rnp.squeeze(a[:1]), lambda a: np.squeeze(a[:1])),
        (lambda a: rnp.broadcast_to(a[0, 0], (5, 4)), lambda a: np.broadcast_to(a[0, 0], (5, 4))),
        (lambda a: rnp.concatenate([a, a * 2], axis=1), lambda a: np.concatenate([a, a * 2], axis=1)),
        (lambda a: rnp.stack([a, a], axis=-1), lambda a: np.stack([a, a], axis=-1)),
        (lambda a: rnp.take(a, idx, axis=1), lambda a: np.take(a, idx, axis=1)),
        (lambda a: rnp.take(a, idx), lambda a: np.take(a, idx)),
        (lambda a: rnp.cumsum(a, axis=2), lambda a: np.cumsum(a, axis=2)),
        (lambda a: rnp.cumsum(a), lambda a: np.cumsum(a)),
        (lambda a: rnp.where(a > 0, a, 0.0), lambda a: np.where(a > 0, a, 0.0)),
        (lambda a: rnp.clip(a, -0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5)),
        (lambda a: rnp.var(a, axis=-1), lambda a: np.var(a, axis=-1)),
        (lambda a: rnp.softmax(a), lambda a: np.exp(a) / np.exp(a).sum(-1, keepdims=True)),
        (lambda a: rnp.logsumexp(a, axis=1), lambda a: np.log(np.exp(a).sum(1))),
        (lambda a: rnp.zeros_like(a) + rnp.ones_like(a), lambda a: np.ones_like(a)),
        (lambda a: rnp.full_like(a, 3.5), lambda a: np.full_like(a, 3.5)),
        (lambda a: rnp.dot(a[0], a[1].T), lambda a: np.dot(a[0], a[1].T)),
        (lambda a: rnp.matmul(a[0, 0], a[1].T), lambda a: a[0, 0] @ a[1].T),
        (lambda a: a[1, :, ::2], lambda a: a[1, :, ::2]),
        (lambda a: a[..., -1], lambda a: a[..., -1]),
        (lambda a: a[None, :, 1], lambda a: a[None, :, 1]),
        (lambda a: a[idx[:2] % 2], lambda a: a[idx[:2] % 2]),
        (lambda a: rnp.gelu(a), lambda a: 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a**3)))),
        (lambda a: rnp.gelu(a, approximate=False), lambda a: 0.5 * a * (1 + erf(a / np.sqrt(2)))),
    ]
    for i, (f, ref) in enumerate(cases):
        got = rlx.jit(f)(z)
        want = ref(z.astype(np.float64))
        assert got.shape == want.shape, i
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"case {i}")


def test_jit_traces_once_per_signature_and_retraces_on_new_shapes():
    traces = []

    @rlx.jit
    def f(x, y):
        traces.append(x.shape)
        return rnp.tanh(x) * y

    f(X, Y)
    f(X + 1, Y)
    assert traces == [(3, 4)]
    f(X[:2], Y[:2])
    assert traces == [(3, 4), (2, 4)]
    f(X.astype(np.float64), Y)
    assert len(traces) == 3


def test_pytrees_in_and_out():
    @rlx.jit
    def f(params, xs):
        h = rnp.tanh(xs[0] @ params["w"] + params["b"])
        return {"h": h, "pair": (h.sum(), [xs[1] * 2])}

    p = {"w": R.standard_normal((4, 2)).astype(np.float32), "b": np.ones(2, np.float32)}
    out = f(p, (X, Y))
    np.testing.assert_allclose(out["h"], np.tanh(X @ p["w"] + 1), rtol=1e-5)
    np.testing.assert_allclose(out["pair"][0], np.tanh(X @ p["w"] + 1).sum(), rtol=1e-5)
    np.testing.assert_allclose(out["pair"][1][0], 2 * Y)
    g = rlx.grad(lambda p, x: rnp.sum(rnp.tanh(x @ p["w"] + p["b"])))(p, X)
    t = np.tanh(X @ p["w"] + 1)
    np.testing.assert_allclose(g["w"], X.T @ (1 - t**2), rtol=1e-4)
    np.testing.assert_allclose(g["b"], (1 - t**2).sum(0), rtol=1e-4)


def test_python_scalars_are_weakly_typed():
    out = rlx.jit(lambda x: x * 2 + 1)(X.astype(np.float16))
    assert out.dtype == np.float16
    assert rlx.jit(lambda x: x + 1)(np.arange(3, dtype=np.int8)).dtype == np.int8
    assert rlx.jit(lambda x, s: x * s)(X, 3.0).dtype == np.float32


def test_closures_over_outer_tracers():
    def outer(w, x):
        # The inner grad closes over `w`, a value traced by the outer grad.
        inner = rlx.grad(lambda v: rnp.sum(rnp.sin(v * w)))
        return rnp.sum(inner(x) * w)

    w, x = np.float32(0.7), X
    got = rlx.grad(outer)(w, x)
    # d/dw sum(cos(x w) w^2) = sum(-sin(x w) x w^2 + 2 w cos(x w))
    want = np.sum(-np.sin(x * w) * x * w * w + 2 * w * np.cos(x * w))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    np.testing.assert_allclose(rlx.jit(lambda a: rlx.jit(lambda b: b * a)(X))(np.float32(2.0)), 2 * X)


def test_value_and_grad_argnums_and_lower():
    f = lambda a, b: rnp.sum(a * b * b)  # noqa: E731
    v, (ga, gb) = rlx.value_and_grad(f, argnums=(0, 1))(X, Y)
    np.testing.assert_allclose(v, np.sum(X * Y * Y), rtol=1e-5)
    np.testing.assert_allclose(ga, Y * Y, rtol=1e-6)
    np.testing.assert_allclose(gb, 2 * X * Y, rtol=1e-6)
    g = rlx.jit(f).lower(X, Y)
    assert isinstance(g, rlx.Graph) and "mul" in str(g)


def test_vmap_in_axes_none_and_out_axes():
    f = rlx.vmap(lambda a, b: a * b + 1, in_axes=(1, None), out_axes=1)
    out = f(X, Y[:, 0])
    np.testing.assert_allclose(out, X * Y[:, :1] + 1, rtol=1e-6)
    mm = rlx.vmap(rlx.vmap(lambda a, b: rnp.sum(a * b), in_axes=(None, 0)), in_axes=(0, None))(X, Y)
    np.testing.assert_allclose(mm, X @ Y.T, rtol=1e-5)


def test_jvp_structure_and_linearity():
    f = lambda a, b: (rnp.sin(a) * b, rnp.sum(a))  # noqa: E731
    (p1, p2), (t1, t2) = rlx.jvp(f, (X, Y), (np.ones_like(X), np.zeros_like(Y)))
    np.testing.assert_allclose(p1, np.sin(X) * Y, rtol=1e-6)
    np.testing.assert_allclose(t1, np.cos(X) * Y, rtol=1e-5)
    np.testing.assert_allclose(t2, X.size, rtol=1e-6)
    with pytest.raises(ValueError, match="structure"):
        rlx.jvp(f, (X, Y), (X,))


def test_has_aux():
    def f(w, x):
        h = rnp.tanh(x @ w)
        return rnp.sum(h), {"h": h, "n": rnp.mean(h)}

    w = R.standard_normal((4, 2)).astype(np.float32)
    t = np.tanh(X @ w)
    g, aux = rlx.grad(f, has_aux=True)(w, X)
    np.testing.assert_allclose(g, X.T @ (1 - t**2), rtol=1e-4)
    np.testing.assert_allclose(aux["h"], t, rtol=1e-5)
    (v, aux2), g2 = rlx.value_and_grad(f, has_aux=True)(w, X)
    np.testing.assert_allclose(v, t.sum(), rtol=1e-5)
    np.testing.assert_allclose(aux2["n"], t.mean(), rtol=1e-5)
    np.testing.assert_allclose(g2, g, rtol=1e-6)
    with pytest.raises(ValueError, match="pair"):
        rlx.grad(lambda w: rnp.sum(w), has_aux=True)(w)


def test_keyword_arguments_bind_to_positions():
    def f(x, w, scale=2.0):
        return rnp.sum(x @ w) * scale

    w = np.ones((4, 2), np.float32)
    np.testing.assert_allclose(rlx.jit(f)(X, w=w), 2 * (X @ w).sum(), rtol=1e-5)
    np.testing.assert_allclose(rlx.grad(f, argnums=1)(X, w=w, scale=1.0), X.T @ np.ones((3, 2)), rtol=1e-5)
    np.testing.assert_allclose(rlx.vmap(lambda a, b: a * b)(X, b=Y), X * Y)


def test_numpy_arrays_on_the_left_of_operators():
    w = np.ones((4, 2), np.float32)
    out = rlx.jit(lambda x: [Y + x, Y * x, Y < x, X.T @ x, np.float32(2) * x])(X)
    np.testing.assert_allclose(out[0], Y + X)
    np.testing.assert_allclose(out[1], Y * X)
    np.testing.assert_array_equal(out[2], Y < X)
    np.testing.assert_allclose(out[3], X.T @ X, rtol=1e-5)
    assert out[4].dtype == np.float32
    assert rlx.jit(lambda v: w.T @ v)(np.ones(4, np.float32)).shape == (2,)
