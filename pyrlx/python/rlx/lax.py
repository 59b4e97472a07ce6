"""`rlx.lax`: structured control flow as in `jax.lax`, on pytrees (tuples, lists, dicts, None).

    import rlx, rlx.numpy as rnp
    from rlx import lax

    def rnn(h0, xs, w, u):
        def step(h, x):
            h = rnp.tanh(h @ w + x @ u)
            return h, rnp.sum(h)
        return lax.scan(step, h0, xs)

`scan`, `fori_loop` (static bounds), `map`, `cond` and `associative_scan` differentiate both ways; `while_loop` (and
`fori_loop` with traced bounds) in forward mode only, as in JAX. The bodies are traced once into
sub-graphs that backends run as loops and branches (`cond` runs one branch), so a 10,000-step
scan is one node, not 10,000 copies of its body. Values the bodies close over become inputs of
the loop. Outside a trace, each call stages itself through `rlx.jit`.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ._trace import _STACK, Trace, Tracer
from ._tree import tree_flatten, tree_unflatten

__all__ = ["associative_scan", "cond", "fori_loop", "map", "scan", "while_loop"]

# Dtypes that f64 holds exactly: a while_loop carry of mixed dtypes travels in one f64 vector.
_EXACT_IN_F64 = ("bool", "i8", "i16", "i32", "u8", "u32", "f16", "bf16", "f32", "f64")
# The default bound of a while_loop: effectively none (JAX has none); a loop still stops there.
_MAX_TRIPS = 2**31 - 1


def _staged(fn: Callable, *args):
    """Runs `fn(*args)` through `rlx.jit` when no trace is active (concrete arrays)."""
    from ._api import jit

    return jit(fn)(*args)


def _avals(ts: list[Tracer]) -> list[tuple]:
    return [(tuple(t.shape), t.rlx_dtype) for t in ts]


def _trace_body(name: str, f: Callable, in_avals: list[tuple], tree: Any, pre_captures=()) -> tuple:
    """Traces `f` on fresh inputs shaped `in_avals` (unflattened as `tree`): (trace, output value).
    `pre_captures` are outer tracers captured first, so that two bodies can share their inputs."""
    body = Trace(name)
    ins = [body.new_input(f"a{i}", shape, dt) for i, (shape, dt) in enumerate(in_avals)]
    _STACK.append(body)
    try:
        for c in pre_captures:
            body.lift(c)
        out = f(*tree_unflatten(tree, ins))
    finally:
        _STACK.pop()
    return body, out


def _lift_outputs(body: Trace, leaves: list, likes: list | None = None) -> list[Tracer]:
    """The body's output leaves as its tracers (Python scalars take the dtype of `likes`)."""
    _STACK.append(body)
    try:
        return [body.lift(v, likes[i] if likes is not None and i < len(likes) else None) for i, v in enumerate(leaves)]
    finally:
        _STACK.pop()


def _same_types(what: str, got: list[Tracer], want: list[tuple], tree_got: Any, tree_want: Any):
    if tree_got != tree_want:
        raise TypeError(f"{what}: the body's structure {tree_got} differs from the input's {tree_want}")
    for i, (t, (shape, dt)) in enumerate(zip(got, want)):
        if tuple(t.shape) != tuple(shape) or t.rlx_dtype != dt:
            raise TypeError(
                f"{what}: leaf {i} comes back as {t.rlx_dtype}{list(t.shape)}, went in as {dt}{list(shape)} "
                "(the carry must keep its shape and dtype)"
            )


def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None, reverse: bool = False, unroll: int = 1):
    """`jax.lax.scan`: `f(carry, x) -> (carry, y)` over the leading axis of `xs` (a pytree, or
    None with `length`); returns (final carry, stacked ys). `unroll` is accepted for JAX
    compatibility (the backend decides)."""
    del unroll
    if not _STACK:
        return _staged(lambda c, x: scan(f, c, x, length=length, reverse=reverse), init, xs)
    tr = _STACK[-1]
    init_leaves, init_tree = tree_flatten(init)
    inits = [tr.lift(v) for v in init_leaves]
    xs_leaves, xs_tree = tree_flatten(xs)
    seqs = [tr.lift(v) for v in xs_leaves]
    lengths = {t.shape[0] if t.shape else None for t in seqs}
    if None in lengths:
        raise TypeError("scan: every leaf of xs needs a leading axis to scan over (a scalar was given)")
    if length is not None:
        lengths.add(int(length))
    if len(lengths) != 1:
        raise ValueError(
            f"scan: the leading axes of xs (and `length`) disagree: {sorted(lengths)}"
            if lengths
            else "scan: with xs=None, `length` must be given"
        )
    trips = lengths.pop()
    dummy = not seqs
    if dummy:
        # No sequence: the loop scans an index the body ignores.
        seqs = [Tracer(tr, tr.graph.arange(0.0, 1.0, trips, "i32"))]
    x_avals = [(tuple(t.shape[1:]), t.rlx_dtype) for t in seqs]
    c_avals = _avals(inits)
    n_c = len(inits)

    def body_fn(*leaves):
        carry = tree_unflatten(init_tree, list(leaves[:n_c]))
        x = None if dummy else tree_unflatten(xs_tree, list(leaves[n_c:]))
        return f(carry, x)

    body, out = _trace_body("scan_body", body_fn, c_avals + x_avals, ("tuple", ("*",) * (n_c + len(seqs))))
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError(f"scan: the body must return a pair (carry, y), got {type(out).__name__}")
    c_out, c_tree = tree_flatten(out[0])
    y_out, y_tree = tree_flatten(out[1])
    c_t = _lift_outputs(body, c_out, [_Like(dt) for _s, dt in c_avals])
    y_t = _lift_outputs(body, y_out)
    _same_types("scan carry", c_t, c_avals, c_tree, init_tree)
    body.graph.set_outputs([t.node for t in c_t + y_t])
    consts = [tr.lift(c).node for c in body.captures]
    cs, ys = tr.graph.scan_n(body.graph, [t.node for t in inits], [t.node for t in seqs], consts, reverse)
    carry = tree_unflatten(init_tree, [Tracer(tr, n) for n in cs])
    return carry, tree_unflatten(y_tree, [Tracer(tr, n) for n in ys])


def associative_scan(fn: Callable, elems: Any, reverse: bool = False, axis: int = 0):
    """`jax.lax.associative_scan`: the inclusive scan of `elems` (a pytree, every leaf of one
    length along `axis`) under `fn(a, b)`, which must be associative and act elementwise along
    `axis` (it is traced once on the leaves' types and applied to stacked slices of them). One
    op in the graph; backends without a kernel get the log-depth decomposition."""
    if not _STACK:
        return _staged(lambda e: associative_scan(fn, e, reverse=reverse, axis=axis), elems)
    tr = _STACK[-1]
    leaves, tree = tree_flatten(elems)
    if not leaves:
        raise ValueError("associative_scan: elems has no array leaves")
    xs = [tr.lift(v) for v in leaves]
    rank = len(xs[0].shape)
    if not -rank <= axis < rank:
        raise ValueError(f"associative_scan: axis {axis} is out of range for leaves of rank {rank}")
    ax = axis % rank
    lengths = {t.shape[ax] if len(t.shape) > ax else None for t in xs}
    if len(lengths) != 1 or None in lengths:
        shapes = [list(t.shape) for t in xs]
        raise ValueError(f"associative_scan: every leaf needs one length along axis {axis}, got shapes {shapes}")
    avals = _avals(xs)
    n = len(xs)

    def body_fn(*ls):
        return fn(tree_unflatten(tree, list(ls[:n])), tree_unflatten(tree, list(ls[n:])))

    body, out = _trace_body("combine", body_fn, avals + avals, ("tuple", ("*",) * (2 * n)))
    o_leaves, o_tree = tree_flatten(out)
    if o_tree != tree:
        raise TypeError(f"associative_scan: fn returns the structure {o_tree}, elems have {tree}")
    o_t = _lift_outputs(body, o_leaves, [_Like(dt) for _s, dt in avals])
    for i, (t, (shape, dt)) in enumerate(zip(o_t, avals)):
        if tuple(t.shape) != tuple(shape) or t.rlx_dtype != dt:
            raise TypeError(
                f"associative_scan: fn gives leaf {i} as {t.rlx_dtype}{list(t.shape)}, the leaf is {dt}{list(shape)}"
            )
    body.graph.set_outputs([t.node for t in o_t])
    consts = [tr.lift(c).node for c in body.captures]
    outs = tr.graph.associative_scan(body.graph, [t.node for t in xs], consts, ax, reverse)
    return tree_unflatten(tree, [Tracer(tr, o) for o in outs])


def map(f: Callable, xs: Any):
    """`jax.lax.map`: `f` applied to each element along the leading axis of `xs`, as a loop."""
    return scan(lambda c, x: (c, f(x)), (), xs)[1]


def fori_loop(lower, upper, body_fun: Callable, init_val: Any):
    """`jax.lax.fori_loop`: `body_fun(i, val) -> val` for i in [lower, upper). With Python int
    bounds it is a scan (differentiable both ways); with traced bounds a while_loop."""
    if isinstance(lower, (int, np.integer)) and isinstance(upper, (int, np.integer)):
        lo, hi = int(lower), int(upper)
        if hi <= lo:
            return init_val
        if not _STACK:
            return _staged(lambda v: fori_loop(lo, hi, body_fun, v), init_val)
        tr = _STACK[-1]
        idx = Tracer(tr, tr.graph.arange(float(lo), 1.0, hi - lo, "i32"))
        return scan(lambda v, i: (body_fun(i, v), None), init_val, idx)[0]

    def cond_fun(c):
        return c[0] < c[1]

    def step(c):
        return (c[0] + 1, c[1], body_fun(c[0], c[2]))

    lo = lower if isinstance(lower, Tracer) else np.asarray(lower, np.int32)
    return while_loop(cond_fun, step, (lo, upper, init_val))[2]


def _pack_dtype(avals: list[tuple]) -> str:
    dts = {dt for _s, dt in avals}
    if len(dts) == 1:
        return dts.pop()
    bad = sorted(d for d in dts if d not in _EXACT_IN_F64)
    if bad:
        raise TypeError(
            f"while_loop: a carry of mixed dtypes {sorted(dts)} travels as one f64 vector, which cannot hold "
            f"{bad} exactly; give those leaves a loop of their own or one dtype"
        )
    return "f64"


def _pack(tr: Trace, leaves: list[Tracer], dt: str) -> Tracer:
    g = tr.graph
    parts = []
    for t in leaves:
        n = t.node if t.rlx_dtype == dt else g.cast(t.node, dt)
        parts.append(g.reshape(n, [int(np.prod(t.shape, dtype=np.int64))]))
    return Tracer(tr, parts[0] if len(parts) == 1 else g.concat(parts, 0))


def _unpack(tr: Trace, packed: Tracer, avals: list[tuple]) -> list[Tracer]:
    g, out, at = tr.graph, [], 0
    for shape, dt in avals:
        n = int(np.prod(shape, dtype=np.int64))
        node = g.slice_axis(packed.node, 0, at, at + n)
        node = g.reshape(node, list(shape))
        if dt != packed.rlx_dtype:
            node = g.cast(node, dt)
        out.append(Tracer(tr, node))
        at += n
    return out


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any, max_trips: int = _MAX_TRIPS):
    """`jax.lax.while_loop`: `while cond_fun(val): val = body_fun(val)`. The trip count depends on
    the data; forward mode only (reverse mode is an error that says so, as in JAX). `max_trips`
    (not in JAX) bounds a runaway loop: it stops there. A carry of several leaves travels packed
    in one vector (mixed dtypes as f64, which holds them exactly)."""
    if not _STACK:
        return _staged(lambda v: while_loop(cond_fun, body_fun, v, max_trips), init_val)
    tr = _STACK[-1]
    leaves, tree = tree_flatten(init_val)
    inits = [tr.lift(v) for v in leaves]
    if not inits:
        raise TypeError("while_loop: the carry has no arrays")
    avals = _avals(inits)
    single = len(inits) == 1
    dt = avals[0][1] if single else _pack_dtype(avals)
    packed = inits[0] if single else _pack(tr, inits, dt)
    p_aval = [(tuple(packed.shape), dt)]

    def open_carry(body: Trace, p: Tracer) -> Any:
        return tree_unflatten(tree, [p] if single else _unpack(body, p, avals))

    def cond_body(p):
        return cond_fun(open_carry(_STACK[-1], p))

    def step_body(p):
        return body_fun(open_carry(_STACK[-1], p))

    ctr, c_out = _trace_body("while_cond", cond_body, p_aval, ("tuple", ("*",)))
    (c_t,) = _lift_outputs(ctr, [c_out])
    if tuple(c_t.shape) != () or c_t.rlx_dtype != "bool":
        if tuple(c_t.shape) != ():
            raise TypeError(f"while_loop: cond_fun must return a scalar, got shape {tuple(c_t.shape)}")
        c_t = Tracer(ctr, ctr.graph.ne(c_t.node, ctr.graph.scalar(0.0, c_t.rlx_dtype)))
    ctr.graph.set_outputs([c_t.node])
    btr, b_out = _trace_body("while_body", step_body, p_aval, ("tuple", ("*",)), pre_captures=ctr.captures)
    b_leaves, b_tree = tree_flatten(b_out)
    b_t = _lift_outputs(btr, b_leaves, [_Like(dt) for _s, dt in avals])
    _same_types("while_loop carry", b_t, avals, b_tree, tree)
    _STACK.append(btr)
    try:
        out = b_t[0] if single else _pack(btr, b_t, dt)
    finally:
        _STACK.pop()
    btr.graph.set_outputs([out.node])
    # Both bodies take (carry, the captures of either): the cond's first, then the body's own.
    for c in btr.captures[len(ctr.captures):]:
        _add_unused_input(ctr, c)
    consts = [tr.lift(c).node for c in btr.captures]
    res = Tracer(tr, tr.graph.while_loop(ctr.graph, btr.graph, packed.node, consts, max_trips))
    return tree_unflatten(tree, [res] if single else _unpack(tr, res, avals))


class _Like:
    """Stands for a leaf's dtype where a Python scalar is lifted (`Trace.lift` reads only it)."""

    def __init__(self, rlx_dtype: str):
        self.rlx_dtype = rlx_dtype


def _add_unused_input(body: Trace, outer: Tracer) -> None:
    """Adds an input to `body` for a value only the other branch or body uses, so both take the
    same inputs."""
    body.new_input(f"c{len(body.captures)}", outer.shape, outer.rlx_dtype)
    body.captures.append(outer)


def cond(pred, true_fun: Callable, false_fun: Callable, *operands):
    """`jax.lax.cond`: `true_fun(*operands)` if `pred` else `false_fun(*operands)`; only the taken
    branch runs. A concrete `pred` (a Python or numpy bool) picks the branch while tracing."""
    if not isinstance(pred, Tracer):
        p = np.asarray(pred)
        if p.shape != ():
            raise TypeError(f"cond: pred must be a scalar, got shape {p.shape}")
        return (true_fun if bool(p) else false_fun)(*operands)
    tr = _STACK[-1] if _STACK else pred.trace
    if tuple(pred.shape) != ():
        raise TypeError(f"cond: pred must be a scalar, got shape {tuple(pred.shape)}")
    pnode = tr.lift(pred).node
    if pred.rlx_dtype != "bool":
        pnode = tr.graph.ne(pnode, tr.graph.scalar(0.0, pred.rlx_dtype))
    leaves, tree = tree_flatten(operands)
    args = [tr.lift(v) for v in leaves]
    avals = _avals(args)

    def branch(fn):
        return lambda *xs: fn(*tree_unflatten(tree, list(xs)))

    flat = ("tuple", ("*",) * len(args))
    ta, a_out = _trace_body("cond_true", branch(true_fun), avals, flat)
    tb, b_out = _trace_body("cond_false", branch(false_fun), avals, flat, pre_captures=ta.captures)
    for c in tb.captures[len(ta.captures):]:
        _add_unused_input(ta, c)
    a_leaves, a_tree = tree_flatten(a_out)
    b_leaves, b_tree = tree_flatten(b_out)
    if a_tree != b_tree:
        raise TypeError(f"cond: the branches return different structures: {a_tree} and {b_tree}")
    a_t = _lift_outputs(ta, a_leaves)
    b_t = _lift_outputs(tb, b_leaves, a_t)
    for i, (x, y) in enumerate(zip(a_t, b_t)):
        if tuple(x.shape) != tuple(y.shape) or x.rlx_dtype != y.rlx_dtype:
            raise TypeError(
                f"cond: output {i} is {x.rlx_dtype}{list(x.shape)} in true_fun, {y.rlx_dtype}{list(y.shape)} in false_fun"
            )
    ins = [t.node for t in args] + [tr.lift(c).node for c in tb.captures]
    outs = []
    # One cond node per output leaf (the IR's cond gives one output); each runs only its branch.
    for x, y in zip(a_t, b_t):
        ga, gb = ta.graph.copy(), tb.graph.copy()
        ga.set_outputs([x.node])
        gb.set_outputs([y.node])
        outs.append(Tracer(tr, tr.graph.cond(pnode, ga, gb, ins)))
    return tree_unflatten(a_tree, outs)
