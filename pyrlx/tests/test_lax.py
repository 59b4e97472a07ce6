"""rlx.lax beyond the JAX comparisons of test_jax.py: loops stay loops in the graph, nested loops,
eager calls, and the errors a user meets."""

import numpy as np
import pytest

import rlx
import rlx.numpy as rnp
from rlx import lax


def test_a_long_scan_is_one_loop_node():
    def f(h, xs, w):
        return lax.scan(lambda h, x: (rnp.tanh(h @ w + x), rnp.sum(h)), h, xs)

    h, xs, w = np.zeros(4, np.float32), np.ones((10_000, 4), np.float32) * 0.01, np.eye(4, dtype=np.float32) * 0.5
    text = str(rlx.jit(f).lower(h, xs, w))
    assert text.count("scan(") == 2 and "tanh" in text, text[:2000]  # the carry and the ys of one loop
    hT, ys = rlx.jit(f)(h, xs, w)
    ref = h
    for x in xs[:5]:
        ref = np.tanh(ref @ w + x)
    assert ys.shape == (10_000,)
    np.testing.assert_allclose(ys[5], np.sum(ref), rtol=1e-5, atol=1e-6)


def test_nested_scans_close_over_the_outer_body():
    def f(a, xs):
        def outer(c, x):
            inner, _ = lax.scan(lambda d, y: (d + y * c, None), 0.0, x)
            return c * 0.5 + inner, inner

        return lax.scan(outer, a, xs)

    a, xs = np.float32(1.0), np.arange(12, dtype=np.float32).reshape(4, 3)
    c, ys = rlx.jit(f)(a, xs)
    ref_c, ref_ys = 1.0, []
    for x in xs:
        inner = float(np.sum(x * ref_c))
        ref_c = ref_c * 0.5 + inner
        ref_ys.append(inner)
    np.testing.assert_allclose(c, ref_c, rtol=1e-6)
    np.testing.assert_allclose(ys, ref_ys, rtol=1e-6)
    g = rlx.grad(lambda a: rnp.sum(f(a, xs)[1]))(a)
    eps = 1e-2
    fd = (np.sum(f_np(a + eps, xs)) - np.sum(f_np(a - eps, xs))) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-3)


def f_np(a, xs):
    c, ys = float(a), []
    for x in xs:
        inner = float(np.sum(x * c))
        c = c * 0.5 + inner
        ys.append(inner)
    return np.array(ys)


def test_eager_calls_stage_themselves():
    x = np.array([0.5, 1.0], np.float32)
    i, y = lax.while_loop(lambda c: rnp.sum(c[1]) < 10.0, lambda c: (c[0] + 1, c[1] * 2.0), (0, x))
    assert int(i) == 3 and np.allclose(y, x * 8)
    assert lax.cond(True, lambda v: v + 1.0, lambda v: v - 1.0, x).tolist() == [1.5, 2.0]
    np.testing.assert_allclose(lax.fori_loop(0, 3, lambda i, v: v + i, x), x + 3.0)
    np.testing.assert_allclose(lax.map(lambda r: r * 2.0, x), x * 2.0)


def test_fori_loop_with_traced_bounds_is_a_while_loop():
    f = rlx.jit(lambda n, x: lax.fori_loop(0, n, lambda i, v: v * 2.0 + i, x))
    x = np.float32(1.0)
    assert float(f(np.int32(4), x)) == ((((1 * 2 + 0) * 2 + 1) * 2 + 2) * 2 + 3)
    assert "while_loop" in str(f.lower(np.int32(4), x))


def test_carry_type_changes_are_named():
    with pytest.raises(TypeError, match="carry must keep its shape and dtype"):
        rlx.jit(lambda x: lax.scan(lambda c, y: (c.astype("f64"), y), x, np.ones((3, 2), np.float32)))(
            np.ones(2, np.float32)
        )
    with pytest.raises(TypeError, match="structure"):
        rlx.jit(lambda x: lax.scan(lambda c, y: ((c, c), y), x, np.ones((3, 2), np.float32)))(np.ones(2, np.float32))
    with pytest.raises(ValueError, match="leading axes"):
        rlx.jit(lambda a, b: lax.scan(lambda c, y: (c, y), 0.0, (a, b)))(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="length"):
        rlx.jit(lambda a: lax.scan(lambda c, y: (c, y), a, None))(np.ones(3))


def test_cond_errors():
    x = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="scalar"):
        rlx.jit(lambda v: lax.cond(v > 0.0, lambda u: u, lambda u: u, v))(x)
    with pytest.raises(TypeError, match="different structures"):
        rlx.jit(lambda v: lax.cond(rnp.sum(v) > 0.0, lambda u: (u, u), lambda u: u, v))(x)
    with pytest.raises(TypeError, match="output 0"):
        rlx.jit(lambda v: lax.cond(rnp.sum(v) > 0.0, lambda u: u, lambda u: rnp.sum(u), v))(x)


def test_while_loop_reverse_mode_is_refused_by_name():
    def f(x):
        return rnp.sum(lax.while_loop(lambda v: rnp.sum(v) < 10.0, lambda v: v * 2.0, x))

    with pytest.raises(ValueError, match="forward-mode only"):
        rlx.grad(f)(np.ones(2, np.float32))


def test_mixed_carries_that_f64_cannot_hold_are_refused():
    with pytest.raises(TypeError, match="cannot hold"):
        rlx.jit(lambda x: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1]), (np.int64(0), x)))(
            np.ones(2, np.float32)
        )
