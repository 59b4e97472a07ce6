"""`rlx.numpy`: a numpy-like namespace. On traced values (inside `rlx.jit`, `rlx.grad`, ...)
each function adds graph nodes; on concrete arrays it compiles once per signature and runs.

    import rlx, rlx.numpy as rnp
    f = rlx.jit(lambda x, w: rnp.tanh(x @ w))
"""

from __future__ import annotations

import builtins as _builtins
import functools
import inspect
from typing import Any, Sequence

import numpy as _np

from ._trace import Tracer, current_trace, rlx_dtype
from ._tree import tree_flatten

_FLOATS = ("f32", "f64", "f16", "bf16")
_INTS = ("i8", "i16", "i32", "i64", "u8", "u32")

__all__ = [
    "abs", "absolute", "add", "argmax", "astype", "broadcast_to", "clip", "concatenate", "cos",
    "cumsum", "divide", "dot", "equal", "erf", "exp", "expand_dims", "floor", "full_like",
    "gelu", "greater", "greater_equal", "less", "less_equal", "log", "log_softmax", "logsumexp",
    "matmul", "max", "maximum", "mean", "min", "minimum", "moveaxis", "multiply", "negative",
    "not_equal", "ones_like", "power", "prod", "reciprocal", "relu", "reshape", "round", "rsqrt",
    "sigmoid", "sign", "silu", "sin", "softmax", "softplus", "sqrt", "square", "squeeze", "stack",
    "subtract", "sum", "swapaxes", "take", "tanh", "transpose", "var", "where", "zeros_like",
]


def _freeze(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, _np.dtype) or isinstance(v, type):
        return rlx_dtype(v)
    return v


def _prim(*array_params: str):
    """Makes a function of traced values work on concrete arrays too: the named parameters are
    arrays, the others static; the concrete path is `rlx.jit` cached per static values."""

    def deco(fn):
        sig = inspect.signature(fn)
        cache: dict = {}

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            arrays = [bound.arguments[p] for p in array_params if p in bound.arguments]
            leaves, _ = tree_flatten(arrays)
            if any(isinstance(v, Tracer) for v in leaves):
                return fn(*args, **kwargs)
            static = {k: v for k, v in bound.arguments.items() if k not in array_params}
            key = tuple(sorted((k, _freeze(v)) for k, v in static.items()))
            j = cache.get(key)
            if j is None:
                from ._api import jit

                names = [p for p in array_params if p in bound.arguments]

                def staged(*xs, _names=names, _static=static):
                    return fn(**dict(zip(_names, xs)), **_static)

                staged.__name__ = fn.__name__
                j = cache[key] = jit(staged)
            return j(*arrays)

        return wrapper

    return deco


def _trace_of(*xs):
    tr = current_trace(xs)
    if tr is None:
        raise TypeError("internal: no traced value among the arguments")
    return tr


def _t(x: Any, like: Any = None) -> Tracer:
    tr = _trace_of(*[v for v in (x, like) if isinstance(v, Tracer)])
    return tr.lift(x, like if isinstance(like, Tracer) else None)


def _wrap(tr, node) -> Tracer:
    return Tracer(tr, node)


def _float(x: Tracer) -> Tracer:
    """Ints and bools become f32 for float-only ops (as jax.numpy does)."""
    if x.rlx_dtype in _FLOATS or x.rlx_dtype == "c64":
        return x
    return _wrap(x.trace, x.trace.graph.cast(x.node, "f32"))


def _unary(name: str, kind: str, float_only: bool, doc: str):
    @_prim("x")
    def f(x):
        t = _t(x)
        if float_only:
            t = _float(t)
        return _wrap(t.trace, getattr(t.trace.graph, kind)(t.node))

    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


negative = _unary("negative", "neg", False, "Elementwise `-x`.")
abs = _unary("abs", "abs", False, "Elementwise absolute value.")
absolute = abs
exp = _unary("exp", "exp", True, "Elementwise exponential.")
log = _unary("log", "log", True, "Elementwise natural logarithm.")
sqrt = _unary("sqrt", "sqrt", True, "Elementwise square root.")
rsqrt = _unary("rsqrt", "rsqrt", True, "Elementwise `1 / sqrt(x)`.")
reciprocal = _unary("reciprocal", "recip", True, "Elementwise `1 / x`.")
square = _unary("square", "square", False, "Elementwise `x * x`.")
sin = _unary("sin", "sin", True, "Elementwise sine.")
cos = _unary("cos", "cos", True, "Elementwise cosine.")
tanh = _unary("tanh", "tanh", True, "Elementwise hyperbolic tangent.")
erf = _unary("erf", "erf", True, "Elementwise error function.")
floor = _unary("floor", "floor", False, "Elementwise floor.")
round = _unary("round", "round", False, "Elementwise rounding (half away from zero).")
sign = _unary("sign", "sign", False, "Elementwise sign.")
sigmoid = _unary("sigmoid", "sigmoid", True, "Elementwise logistic sigmoid.")
relu = _unary("relu", "relu", False, "Elementwise `max(x, 0)`.")
silu = _unary("silu", "silu", True, "Elementwise `x * sigmoid(x)`.")
softplus = _unary("softplus", "softplus", True, "Elementwise `log(1 + exp(x))`.")
_gelu_exact = _unary("gelu_exact", "gelu", True, "Exact (erf) GELU.")
_gelu_tanh = _unary("gelu_tanh", "gelu_tanh", True, "Tanh-approximated GELU.")


def gelu(x, approximate: bool = True):
    """GELU; `approximate=True` (the default, as in jax.nn.gelu) uses the tanh form."""
    return _gelu_tanh(x) if approximate else _gelu_exact(x)


def _binary(name: str, method: str, true_div: bool, doc: str):
    @_prim("a", "b")
    def f(a, b):
        like = a if isinstance(a, Tracer) else b
        ta, tb = _t(a, like), _t(b, like)
        if true_div:
            ta, tb = _float(ta), _float(tb)
        tr = _trace_of(ta, tb)
        ta, tb = tr.lift(ta), tr.lift(tb)
        return _wrap(tr, getattr(tr.graph, method)(ta.node, tb.node))

    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


add = _binary("add", "add", False, "Elementwise `a + b` with broadcasting.")
subtract = _binary("subtract", "sub", False, "Elementwise `a - b` with broadcasting.")
multiply = _binary("multiply", "mul", False, "Elementwise `a * b` with broadcasting.")
divide = _binary("divide", "div", True, "Elementwise true division (ints become f32).")
power = _binary("power", "pow", True, "Elementwise `a ** b`.")
maximum = _binary("maximum", "maximum", False, "Elementwise maximum.")
minimum = _binary("minimum", "minimum", False, "Elementwise minimum.")
equal = _binary("equal", "eq", False, "Elementwise `a == b` (bool).")
not_equal = _binary("not_equal", "ne", False, "Elementwise `a != b` (bool).")
less = _binary("less", "lt", False, "Elementwise `a < b` (bool).")
less_equal = _binary("less_equal", "le", False, "Elementwise `a <= b` (bool).")
greater = _binary("greater", "gt", False, "Elementwise `a > b` (bool).")
greater_equal = _binary("greater_equal", "ge", False, "Elementwise `a >= b` (bool).")


@_prim("cond", "a", "b")
def where(cond, a, b):
    """`a` where `cond` else `b`, with broadcasting."""
    tr = _trace_of(*[v for v in (cond, a, b) if isinstance(v, Tracer)])
    like = a if isinstance(a, Tracer) else (b if isinstance(b, Tracer) else None)
    like = tr.lift(like) if like is not None else None
    tc = tr.lift(cond)
    if tc.rlx_dtype != "bool":
        tc = _wrap(tr, tr.graph.ne(tc.node, tr.lift(0, tc).node))
    ta, tb = tr.lift(a, like), tr.lift(b, like)
    return _wrap(tr, tr.graph.where_(tc.node, ta.node, tb.node))


@_prim("a", "b")
def matmul(a, b):
    """Matrix product with numpy's rules (1-D operands are promoted, then squeezed)."""
    like = a if isinstance(a, Tracer) else b
    ta, tb = _t(a, like), _t(b, like)
    tr = _trace_of(ta, tb)
    ta, tb = tr.lift(ta), tr.lift(tb)
    g = tr.graph
    an, bn = ta.node, tb.node
    if ta.ndim == 1:
        an = g.expand_dims(an, 0)
    if tb.ndim == 1:
        bn = g.expand_dims(bn, 1)
    out = g.matmul(an, bn)
    if tb.ndim == 1:
        out = g.squeeze(out, [-1])
    if ta.ndim == 1:
        out = g.squeeze(out, [-2 if tb.ndim != 1 else -1])
    return _wrap(tr, out)


def dot(a, b):
    """`numpy.dot` for 1-D and 2-D operands (the matrix product)."""
    return matmul(a, b)


def _axes(x: Tracer, axis) -> list[int] | None:
    if axis is None:
        return None
    if isinstance(axis, int):
        return [axis]
    return list(axis)


def _reduce(name: str, method: str, doc: str):
    @_prim("x")
    def f(x, axis=None, keepdims: bool = False):
        t = _t(x)
        if name == "mean":
            t = _float(t)
        return _wrap(t.trace, getattr(t.trace.graph, method)(t.node, _axes(t, axis), keepdims))

    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


sum = _reduce("sum", "sum", "Sum over `axis` (default: all).")
mean = _reduce("mean", "mean", "Mean over `axis` (default: all).")
max = _reduce("max", "max", "Maximum over `axis` (default: all).")
min = _reduce("min", "min", "Minimum over `axis` (default: all).")
prod = _reduce("prod", "prod", "Product over `axis` (default: all).")


def var(x, axis=None, keepdims: bool = False):
    """Variance over `axis` (population, ddof=0)."""
    m = mean(x, axis, keepdims=True)
    return mean(square(subtract(x, m)), axis, keepdims=keepdims)


@_prim("x")
def argmax(x, axis=None):
    """Index of the maximum (over the flattened array when `axis` is None)."""
    t = _t(x)
    g = t.trace.graph
    if axis is None:
        return _wrap(t.trace, g.argmax(g.reshape(t.node, [t.size]), 0, False))
    return _wrap(t.trace, g.argmax(t.node, axis, False))


@_prim("x")
def reshape(x, shape):
    """Same elements, new shape (one -1 is inferred)."""
    t = _t(x)
    shape = [shape] if isinstance(shape, int) else list(shape)
    if shape.count(-1) > 1:
        raise ValueError(f"reshape: at most one -1 in {shape}")
    if -1 in shape:
        known = int(_np.prod([d for d in shape if d != -1], dtype=_np.int64))
        if known == 0 or t.size % known:
            raise ValueError(f"reshape: cannot reshape {list(t.shape)} into {shape}")
        shape[shape.index(-1)] = t.size // known
    return _wrap(t.trace, t.trace.graph.reshape(t.node, shape))


@_prim("x")
def transpose(x, axes=None):
    """Permutes axes (reverses them by default)."""
    t = _t(x)
    perm = list(reversed(range(t.ndim))) if axes is None else [a % t.ndim for a in axes]
    return _wrap(t.trace, t.trace.graph.transpose(t.node, perm))


def moveaxis(x, source: int, destination: int):
    """Moves one axis to a new position."""
    nd = x.ndim if isinstance(x, Tracer) else _np.ndim(x)
    order = [a for a in range(nd) if a != source % nd]
    order.insert(destination % nd, source % nd)
    return transpose(x, order)


def swapaxes(x, a: int, b: int):
    """Swaps two axes."""
    nd = x.ndim if isinstance(x, Tracer) else _np.ndim(x)
    order = list(range(nd))
    order[a % nd], order[b % nd] = order[b % nd], order[a % nd]
    return transpose(x, order)


@_prim("x")
def expand_dims(x, axis: int):
    """Inserts a size-1 axis."""
    t = _t(x)
    return _wrap(t.trace, t.trace.graph.expand_dims(t.node, axis))


@_prim("x")
def squeeze(x, axis=None):
    """Removes size-1 axes (all of them by default)."""
    t = _t(x)
    return _wrap(t.trace, t.trace.graph.squeeze(t.node, _axes(t, axis) or []))


@_prim("x")
def broadcast_to(x, shape):
    """Broadcasts to `shape`."""
    t = _t(x)
    return _wrap(t.trace, t.trace.graph.broadcast_to(t.node, list(shape)))


@_prim("xs")
def concatenate(xs: Sequence, axis: int = 0):
    """Joins arrays along an existing axis."""
    tr = _trace_of(*[v for v in xs if isinstance(v, Tracer)])
    like = next(v for v in xs if isinstance(v, Tracer))
    return _wrap(tr, tr.graph.concat([tr.lift(v, like).node for v in xs], axis))


def stack(xs: Sequence, axis: int = 0):
    """Joins arrays along a new axis."""
    return concatenate([expand_dims(v, axis) for v in xs], axis)


@_prim("x", "indices")
def take(x, indices, axis=None):
    """Elements of `x` at integer `indices` along `axis` (flattened when None)."""
    tr = _trace_of(*[v for v in (x, indices) if isinstance(v, Tracer)])
    t = tr.lift(x)
    if axis is None:
        t = _wrap(tr, tr.graph.reshape(t.node, [t.size]))
        axis = 0
    i = indices if isinstance(indices, Tracer) else _np.asarray(indices, dtype=_np.int32)
    ti = tr.lift(i)
    return _wrap(tr, tr.graph.gather(t.node, ti.node, axis))


@_prim("x")
def cumsum(x, axis=None):
    """Cumulative sum along `axis` (of the flattened array when None)."""
    t = _t(x)
    g = t.trace.graph
    if axis is None:
        return _wrap(t.trace, g.cumsum(g.reshape(t.node, [t.size]), 0))
    return _wrap(t.trace, g.cumsum(t.node, axis))


@_prim("x")
def astype(x, dtype):
    """Converts to `dtype` (a numpy dtype or an RLX name)."""
    t = _t(x)
    return _wrap(t.trace, t.trace.graph.cast_to(t.node, rlx_dtype(dtype)))


def clip(x, a_min=None, a_max=None):
    """Limits values to [a_min, a_max]."""
    if a_min is not None:
        x = maximum(x, a_min)
    if a_max is not None:
        x = minimum(x, a_max)
    return x


@_prim("x")
def full_like(x, fill_value, dtype=None):
    """An array of `x`'s shape filled with `fill_value`."""
    t = _t(x)
    dt = rlx_dtype(dtype) if dtype is not None else t.rlx_dtype
    return _wrap(t.trace, t.trace.graph.full(list(t.shape), float(fill_value), dt))


def zeros_like(x, dtype=None):
    """Zeros of `x`'s shape."""
    return full_like(x, 0.0, dtype)


def ones_like(x, dtype=None):
    """Ones of `x`'s shape."""
    return full_like(x, 1.0, dtype)


@_prim("x")
def softmax(x, axis: int = -1):
    """Softmax along `axis`."""
    t = _float(_t(x))
    return _wrap(t.trace, t.trace.graph.softmax(t.node, axis))


@_prim("x")
def log_softmax(x, axis: int = -1):
    """Log-softmax along `axis`."""
    t = _float(_t(x))
    return _wrap(t.trace, t.trace.graph.log_softmax(t.node, axis))


def logsumexp(x, axis=None, keepdims: bool = False):
    """`log(sum(exp(x)))`, computed stably."""
    m = max(x, axis, keepdims=True)
    out = add(log(sum(exp(subtract(x, m)), axis, keepdims=True)), m)
    return out if keepdims else squeeze(out, axis) if axis is not None else reshape(out, ())


def _getitem(x: Tracer, idx: Any) -> Tracer:
    """Basic indexing: ints, slices (positive steps), None, Ellipsis; one integer array takes
    along axis 0."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    if len(idx) == 1 and isinstance(idx[0], (Tracer, _np.ndarray, list)):
        return take(x, idx[0], axis=0)
    n_axes = len([i for i in idx if i is not None and i is not Ellipsis])
    if n_axes > x.ndim:
        raise IndexError(f"too many indices ({n_axes}) for an array of rank {x.ndim}")
    if Ellipsis in idx:
        k = idx.index(Ellipsis)
        idx = idx[:k] + (slice(None),) * (x.ndim - n_axes) + idx[k + 1 :]
    else:
        idx = idx + (slice(None),) * (x.ndim - n_axes)
    starts, ends, steps, out_shape = [], [], [], []
    axis = 0
    for i in idx:
        if i is None:
            out_shape.append(1)
            continue
        dim = x.shape[axis]
        if isinstance(i, slice):
            s, e, st = i.indices(dim)
            if st <= 0:
                raise IndexError("negative or zero slice steps are not supported on traced values")
            e = _builtins.max(e, s)
            starts.append(s), ends.append(e), steps.append(st)
            out_shape.append(len(range(s, e, st)))
        elif isinstance(i, (int, _np.integer)):
            j = int(i) + dim if i < 0 else int(i)
            if not 0 <= j < dim:
                raise IndexError(f"index {int(i)} is out of bounds for axis {axis} with size {dim}")
            starts.append(j), ends.append(j + 1), steps.append(1)
        else:
            raise IndexError(f"unsupported index {i!r} on a traced value (use rnp.take)")
        axis += 1
    g = x.trace.graph
    node = x.node
    if (starts, ends, steps) != ([0] * x.ndim, list(x.shape), [1] * x.ndim):
        node = g.slice(node, starts, ends, steps)
    if tuple(out_shape) != tuple(g.shape(node)):
        node = g.reshape(node, out_shape)
    return _wrap(x.trace, node)

