"""The graph API (`rlx.Graph`, `Session`, `CompiledGraph`, `rlx.transforms`) against numpy."""

import math

import numpy as np
import pytest

import rlx
from rlx import transforms

RNG = np.random.default_rng(0)
erf = np.vectorize(math.erf)


def f32(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def run(g, outs, **inputs):
    g.set_outputs(outs if isinstance(outs, list) else [outs])
    return rlx.Session("cpu").compile(g).run(inputs)


UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "recip": lambda x: 1 / x, "square": np.square,
    "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0), "gelu": lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x / (1 + np.exp(-x)), "erf": erf, "softplus": lambda x: np.log1p(np.exp(x)),
    "floor": np.floor, "sign": np.sign,
}


@pytest.mark.parametrize("kind", sorted(UNARY))
def test_unary_matches_numpy(kind):
    positive = kind in ("log", "sqrt", "rsqrt", "recip")
    x = f32(3, 5, lo=0.1 if positive else -2.0)
    g = rlx.Graph()
    out = run(g, getattr(g, kind)(g.input("x", x.shape)), x=x)[0]
    np.testing.assert_allclose(out, UNARY[kind](x.astype(np.float64)), rtol=2e-5, atol=2e-6)


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum,
    "minimum": np.minimum, "pow": np.power, "eq": np.equal, "ne": np.not_equal, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
}


@pytest.mark.parametrize("kind", sorted(BINARY))
def test_binary_broadcasts_like_numpy(kind):
    a, b = f32(4, 1, 3, lo=0.5), f32(5, 1, lo=0.5)
    b[0, 0] = a[0, 0, 0]  # an equal pair for the comparisons
    g = rlx.Graph()
    out = run(g, getattr(g, kind)(g.input("a", a.shape), g.input("b", b.shape)), a=a, b=b)[0]
    want = BINARY[kind](a, b)
    assert out.shape == want.shape and out.dtype == want.dtype
    np.testing.assert_allclose(out, want, rtol=2e-6)


@pytest.mark.parametrize("a,b,want", [
    ("i32", "f32", "f32"),  # the float wins, as in JAX (numpy would widen to f64)
    ("f16", "f32", "f32"), ("f16", "bf16", "f32"), ("i8", "i32", "i32"), ("u8", "i8", "i16"),
    ("bool", "i32", "i32"), ("u32", "i32", "i64"),
])
def test_binary_promotes_dtypes(a, b, want):
    g = rlx.Graph()
    y = g.add(g.input("a", [3], a), g.input("b", [3], b))
    assert g.dtype(y) == want
    xa, xb = np.array([1, 0, 1]).astype(rlx._trace.np_dtype(a)), np.array([2, 3, 1]).astype(rlx._trace.np_dtype(b))
    out = run(g, y, a=xa, b=xb)[0]
    assert out.dtype == rlx._trace.np_dtype(want)
    np.testing.assert_array_equal(out.astype(np.float64), [3, 3, 2])


@pytest.mark.parametrize("kind,ref", [("sum", np.sum), ("mean", np.mean), ("max", np.max), ("min", np.min), ("prod", np.prod)])
@pytest.mark.parametrize("axes,keep", [(None, False), ([1], True), ([0, -1], False)])
def test_reductions(kind, ref, axes, keep):
    x = f32(3, 4, 5, lo=0.5, hi=1.5)
    g = rlx.Graph()
    out = run(g, getattr(g, kind)(g.input("x", x.shape), axes, keep), x=x)[0]
    want = ref(x.astype(np.float64), axis=None if axes is None else tuple(axes), keepdims=keep)
    np.testing.assert_allclose(out, want, rtol=1e-5)


def test_matmul_softmax_norms_and_movement():
    x, w, gam, bet = f32(2, 3, 4), f32(4, 6), f32(6), f32(6)
    g = rlx.Graph()
    X, W, G, B = g.input("x", x.shape), g.param("w", w.shape), g.input("g", [6]), g.input("b", [6])
    h = g.matmul(X, W)
    outs = [
        h,
        g.matmul_t(X, g.transpose(W, [1, 0]), transpose_b=True),
        g.softmax(h, -1),
        g.log_softmax(h, 1),
        g.layer_norm(h, G, B, 1e-5),
        g.rms_norm(h, G, 1e-6),
        g.reshape(h, [6, 6]),
        g.transpose(h, [2, 0, 1]),
        g.broadcast_to(g.input("v", [6]), [2, 3, 6]),
        g.expand_dims(h, 1),
        g.squeeze(g.expand_dims(h, 0), [0]),
        g.slice(h, [0, 1, 0], [2, 3, 6], [1, 1, 2]),
        g.slice_axis(h, -1, 2, 5),
        g.concat([h, h], 1),
        g.cumsum(h, -1),
        g.cumsum(h, 1, reverse=True, exclusive=True),
        g.argmax(h, -1),
        g.where_(g.gt(h, g.scalar(0.0)), h, g.neg(h)),
        g.sum_all(h),
    ]
    g.set_outputs(outs)
    c = rlx.Session().compile(g)
    c.set_param("w", w)
    got = c.run({"x": x, "g": gam, "b": bet, "v": gam})
    hh = x.astype(np.float64) @ w
    sm = np.exp(hh - hh.max(-1, keepdims=True))
    sm /= sm.sum(-1, keepdims=True)
    mu, var = hh.mean(-1, keepdims=True), hh.var(-1, keepdims=True)
    cs = np.cumsum(hh[:, ::-1], axis=1)[:, ::-1]
    excl = np.concatenate([cs[:, 1:], np.zeros_like(cs[:, :1])], axis=1)
    want = [
        hh, hh, sm,
        hh - np.log(np.exp(hh).sum(1, keepdims=True)),
        (hh - mu) / np.sqrt(var + 1e-5) * gam + bet,
        hh / np.sqrt((hh**2).mean(-1, keepdims=True) + 1e-6) * gam,
        hh.reshape(6, 6), hh.transpose(2, 0, 1), np.broadcast_to(gam, (2, 3, 6)), hh[:, None],
        hh, hh[0:2, 1:3, 0:6:2], hh[..., 2:5], np.concatenate([hh, hh], 1), np.cumsum(hh, -1), excl,
        hh.argmax(-1), np.abs(hh), hh.sum(),
    ]
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.shape == np.shape(b), i
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"output {i}")


def test_gather_scatter_topk_attention_conv():
    x = f32(5, 3)
    idx = np.array([4, 0, 0, 2], np.int32)
    q, k, v = f32(1, 2, 3, 4), f32(1, 2, 5, 4), f32(1, 2, 5, 4)
    img, ker = f32(1, 2, 5, 5), f32(3, 2, 3, 3)
    g = rlx.Graph()
    X, I = g.input("x", x.shape), g.input("i", [4], "i32")
    Q, K, V = g.input("q", q.shape), g.input("k", k.shape), g.input("v", v.shape)
    vals, inds = g.topk(X, 2)
    outs = [
        g.gather(X, I, 0),
        g.scatter_add(g.full([5, 3], 0.0), I, g.gather(X, I, 0), 0),
        vals, inds,
        g.attention(Q, K, V),
        g.attention(Q, K, V, "causal"),
        g.conv2d(g.input("img", img.shape), g.input("ker", ker.shape), padding=(1, 1)),
        g.max_pool2d(g.input("p", [1, 1, 4, 4]), (2, 2), (2, 2)),
    ]
    pool_in = f32(1, 1, 4, 4)
    got = run(g, outs, x=x, i=idx, q=q, k=k, v=v, img=img, ker=ker, p=pool_in)
    scat = np.zeros((5, 3))
    np.add.at(scat, idx, x[idx])
    order = np.argsort(-x, axis=-1, kind="stable")[:, :2]

    def attn(causal):
        s = q.astype(np.float64) @ k.transpose(0, 1, 3, 2) / 2.0
        if causal:
            off = 5 - 3
            mask = np.arange(5)[None, :] <= np.arange(3)[:, None] + off
            s = np.where(mask, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        return (p / p.sum(-1, keepdims=True)) @ v

    pad = np.pad(img.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((1, 3, 5, 5))
    for o in range(3):
        for i in range(5):
            for j in range(5):
                conv[0, o, i, j] = (pad[0, :, i : i + 3, j : j + 3] * ker[o]).sum()
    want = [
        x[idx], scat, np.take_along_axis(x, order, -1), order, attn(False), attn(True), conv,
        pool_in.reshape(1, 1, 2, 2, 2, 2).max(axis=(3, 5)),
    ]
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"output {i}")


def test_generic_op_matches_typed_builder_and_covers_every_op():
    g = rlx.Graph()
    x = g.input("x", [2, 3])
    a = g.op("reduce", [x], kind="sum", axes=[-1], keep_dims=False)
    b = g.sum(x, [-1])
    c = g.op("unary", [x], kind="tanh")
    d = g.op("cast", [x], to=np.float64)
    assert g.op_of(a) == g.op_of(b) and g.type_of(a) == "f32[2]"
    assert g.type_of(c) == "f32[2,3]" and g.dtype(d) == "f64"
    names = rlx.Graph.op_names()
    for op in ["input", "mat_mul", "attention", "scan", "custom_fn", "fused", "top_k"]:
        assert op in names
    xs = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = run(g, [a, c], x=xs)
    np.testing.assert_allclose(out[0], xs.sum(-1))
    np.testing.assert_allclose(out[1], np.tanh(xs), rtol=1e-6)


def test_constants_text_json_and_copies():
    g = rlx.Graph("consts")
    x = g.input("x", [2, 2], np.float32)
    y = g.add(g.mul(x, g.constant(np.array([[1, 2], [3, 4]], np.float32))), g.scalar(0.5))
    g.set_outputs([y])
    g2 = rlx.Graph.from_text(str(g))
    g3 = rlx.Graph.from_json(g.to_json())
    assert g2.to_text() == g.to_text() == g3.to_text()
    xs = np.ones((2, 2), np.float32)
    for h in (g, g2, g3, g.copy()):
        np.testing.assert_array_equal(rlx.Session().compile(h).run(x=xs)[0], [[1.5, 2.5], [3.5, 4.5]])


def test_symbolic_dims_and_bind():
    g = rlx.Graph()
    x = g.input("x", ["batch", 3])
    y = g.sum(x, [1])
    g.set_outputs([y])
    assert g.shape(y) == ("batch",)
    with pytest.raises(ValueError, match="batch"):
        rlx.Session().compile(g)
    b = g.bind_dims({"batch": 4})
    out = rlx.Session().compile(b).run(x=np.ones((4, 3), np.float32))[0]
    np.testing.assert_array_equal(out, [3, 3, 3, 3])


def test_inline_and_control_flow():
    body = rlx.Graph("body")
    bx = body.input("x", [3])
    body.set_outputs([body.mul(bx, bx)])
    g = rlx.Graph()
    x = g.input("x", [3])
    (y,) = g.inline(body, [x])
    neg = rlx.Graph("neg")
    neg.set_outputs([neg.neg(neg.input("x", [3]))])
    p = g.input("p", [], "bool")
    z = g.cond(p, body, neg, [x])
    xs = np.array([1, -2, 3], np.float32)
    c = rlx.Session().compile((g.set_outputs([y, z]), g)[1])
    out_t = c.run(x=xs, p=np.array(True))
    out_f = c.run(x=xs, p=np.array(False))
    np.testing.assert_array_equal(out_t[0], xs * xs)
    np.testing.assert_array_equal(out_t[1], xs * xs)
    np.testing.assert_array_equal(out_f[1], -xs)


def mlp_graph():
    g = rlx.Graph("mlp")
    x = g.input("x", [4, 3])
    w = g.param("w", [3, 2])
    loss = g.sum(g.tanh(g.matmul(x, w)))
    g.set_outputs([loss])
    return g


def test_graph_transforms_against_analytic_numpy():
    x, w = f32(4, 3), f32(3, 2)
    t = np.tanh(x.astype(np.float64) @ w)
    dw = x.T @ (1 - t**2)
    v = f32(3, 2)

    def compiled(gr):
        c = rlx.Session().compile(gr)
        c.set_param("w", w)
        return c

    np.testing.assert_allclose(compiled(transforms.grad(mlp_graph(), ["w"])).run(x=x)[0], dw, rtol=1e-5)
    loss, gw = compiled(transforms.grad_with_loss(mlp_graph(), ["w"])).run(x=x)
    np.testing.assert_allclose(loss, t.sum(), rtol=1e-5)
    np.testing.assert_allclose(gw, dw, rtol=1e-5)
    ct = np.float32(2.0)
    _, vw = compiled(transforms.vjp(mlp_graph(), ["w"])).run(x=x, cotangent_0=ct)
    np.testing.assert_allclose(vw, 2 * dw, rtol=1e-5)
    _, tw = compiled(transforms.jvp(mlp_graph(), ["w"])).run(x=x, tangent_w=v)
    np.testing.assert_allclose(tw, ((1 - t**2) * (x @ v)).sum(), rtol=1e-4)
    hv = compiled(transforms.hvp(mlp_graph(), ["w"])).run(x=x, tangent_w=v)[2]
    # d/dw of (1 - t^2) x^T: the Hessian-vector product is x^T (-2 t (1 - t^2) * (x v)).
    np.testing.assert_allclose(hv, x.T @ (-2 * t * (1 - t**2) * (x @ v)), rtol=1e-4, atol=1e-5)
    vm = compiled(transforms.vmap(mlp_graph(), ["x"], 5))
    xb = f32(5, 4, 3)
    np.testing.assert_allclose(vm.run(x=xb)[0], np.tanh(xb.astype(np.float64) @ w).sum((1, 2)), rtol=1e-5)
    jf = compiled(transforms.jacfwd(mlp_graph(), "w")).run(x=x)
    jr = compiled(transforms.jacrev(mlp_graph(), "w")).run(x=x)
    np.testing.assert_allclose(jf[-1].reshape(dw.shape), dw, rtol=1e-5)
    np.testing.assert_allclose(jr[-1].reshape(dw.shape), dw, rtol=1e-5)


def test_compiled_graph_introspection():
    g = mlp_graph()
    c = rlx.Session("cpu").compile(g)
    assert c.inputs() == [("x", (4, 3), "f32")]
    assert c.params() == [("w", (3, 2), "f32")]
    assert c.outputs() == [((), "f32")]
    assert "matmul" in c.dispatch_report() or "mat_mul" in c.dispatch_report()


def test_wgpu_device_matches_cpu_when_available():
    """Runs where pyrlx was built with `--features wgpu` and a GPU (or lavapipe) is present."""
    x, w = f32(4, 3), f32(3, 2)
    outs = []
    for device in ("cpu", "wgpu"):
        g = mlp_graph()
        try:
            c = rlx.Session(device).compile(g)
        except RuntimeError as e:
            if "not available" in str(e):
                pytest.skip(str(e))
            raise
        c.set_param("w", w)
        outs.append(c.run(x=x)[0])
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5)


def test_family_builders_by_kind_name():
    x = f32(2, 3)
    g = rlx.Graph()
    X = g.input("x", [2, 3])
    outs = [g.unary("tanh", X), g.binary("maximum", X, g.scalar(0.0)), g.compare("lt", X, g.scalar(0.5)),
            g.reduce("max", X, [1]), g.reduce("sum", X)]
    got = run(g, outs, x=x)
    want = [np.tanh(x), np.maximum(x, 0), x < 0.5, x.max(1), x.sum()]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    with pytest.raises(ValueError, match="unary kind `tanhh`"):
        g.unary("tanhh", X)


def test_dynamic_slices():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = rlx.Graph()
    X, S = g.input("x", [3, 4]), g.input("s", [], "i32")
    U = g.input("u", [3, 2])
    outs = [g.dynamic_slice(X, S, 1, 2), g.dynamic_update_slice(X, U, S, 1)]
    g.set_outputs(outs)
    c = rlx.Session().compile(g)
    u = -np.ones((3, 2), np.float32)
    for s in (1, 3):  # 3 is clamped to 2 so the window fits
        a, b = c.run(x=x, s=np.int32(s), u=u)
        k = min(s, 2)
        np.testing.assert_array_equal(a, x[:, k : k + 2])
        want = x.copy()
        want[:, k : k + 2] = u
        np.testing.assert_array_equal(b, want)


def test_custom_fn_with_its_own_vjp():
    # body: x * x; the vjp rule deliberately returns 3 * x * ct, so the gradient shows it was used.
    body = rlx.Graph("sq")
    bx = body.input("x", [3])
    body.set_outputs([body.mul(bx, bx)])
    vjp = rlx.Graph("sq_vjp")
    vx, ct = vjp.input("x", [3]), vjp.input("ct", [3])
    vjp.set_outputs([vjp.mul(vjp.mul(vx, ct), vjp.scalar(3.0))])
    g = rlx.Graph()
    x = g.input("x", [3])
    g.set_outputs([g.sum(g.custom_fn([x], body, vjp_body=vjp, name="sq"))])
    xs = np.array([1, 2, 3], np.float32)
    np.testing.assert_allclose(rlx.Session().compile(g).run(x=xs)[0], (xs * xs).sum())
    gr = rlx.Session().compile(rlx.transforms.grad(g, ["x"])).run(x=xs)[0]
    np.testing.assert_allclose(gr, 3 * xs)


def test_param_updates_persist_across_runs():
    g = rlx.Graph()
    w = g.param("w", [3])
    x = g.input("x", [3])
    y = g.mul(w, x)
    g.update_param(w, g.add(w, x))
    g.set_outputs([y])
    assert g.updates() == [(w, rlx.Node(3))]
    with pytest.raises(ValueError, match="not a param"):
        g.update_param(x, y)
    assert g.updates() == [(w, rlx.Node(3))]
    c = rlx.Session().compile(g)
    c.set_param("w", np.zeros(3, np.float32))
    xs = np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(c.run(x=xs)[0], 0 * xs)
    np.testing.assert_array_equal(c.run(x=xs)[0], xs * xs)
    np.testing.assert_array_equal(c.get_param("w"), 2 * xs)
    with pytest.raises(KeyError, match="unknown param"):
        c.get_param("v")


def test_attention_bshd_layout_matches_bhsd():
    # [batch, seq, heads, dim] values give the heads-first result with seq and heads swapped.
    q, k, v = f32(2, 5, 4, 8), f32(2, 7, 2, 8), f32(2, 7, 2, 3)
    m = RNG.uniform(size=(2, 1, 5, 7)) < 0.7
    m[..., 0] = True
    g = rlx.Graph()
    Q, K, V = g.input("q", q.shape), g.input("k", k.shape), g.input("v", v.shape)
    M = g.input("m", m.shape, "bool")
    outs = [g.attention(Q, K, V, "causal", layout="bshd"), g.attention_with_mask(Q, K, V, M, layout="bshd")]
    got = run(g, outs, q=q, k=k, v=v, m=m)
    g2 = rlx.Graph()
    Q2, K2, V2 = (g2.input(n, x.transpose(0, 2, 1, 3).shape) for n, x in [("q", q), ("k", k), ("v", v)])
    M2 = g2.input("m", m.shape, "bool")
    outs2 = [g2.attention(Q2, K2, V2, "causal"), g2.attention_with_mask(Q2, K2, V2, M2)]
    sw = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))
    want = run(g2, outs2, q=sw(q), k=sw(k), v=sw(v), m=m)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, sw(b), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="attention layout `hbsd`"):
        g.attention(Q, K, V, layout="hbsd")


def test_rope_halves_and_interleaved_pairs_match_numpy():
    x, pos = f32(1, 2, 3, 8), np.array([0, 5, 900], dtype=np.int64)
    ang = pos[:, None] * 10000.0 ** (-np.arange(4) * 2 / 8)
    c, s = np.cos(ang), np.sin(ang)
    halves = np.concatenate([x[..., :4] * c - x[..., 4:] * s, x[..., 4:] * c + x[..., :4] * s], -1)
    pairs = np.empty_like(x)
    pairs[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    pairs[..., 1::2] = x[..., 1::2] * c + x[..., 0::2] * s
    g = rlx.Graph()
    X, P = g.input("x", x.shape), g.input("p", pos.shape, "i64")
    got = run(g, [g.rope(X, P), g.rope(X, P, interleaved=True)], x=x, p=pos)
    np.testing.assert_allclose(got[0], halves, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], pairs, rtol=1e-5, atol=1e-5)
