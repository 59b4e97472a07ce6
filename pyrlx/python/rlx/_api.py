"""The JAX-style transforms on Python functions: jit, grad, value_and_grad, vmap, jvp.

Each traces the function once per input signature (tree structure, shapes, dtypes) into a
graph, applies the graph transform of `rlx.transforms`, and either compiles and runs it (on
concrete arrays) or inlines it into the enclosing trace (on traced values), so they compose.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from . import _rlx
from ._trace import _STACK, Trace, Tracer, current_trace, rlx_dtype
from ._tree import tree_flatten, tree_unflatten

_SESSIONS: dict[str, _rlx.Session] = {}


def _session(device: str) -> _rlx.Session:
    s = _SESSIONS.get(device)
    if s is None:
        s = _SESSIONS[device] = _rlx.Session(device)
    return s


def _canonical(x: Any) -> Any:
    """A leaf as a tracer or a numpy array (Python scalars: f32 / i32 / bool, as in JAX)."""
    if isinstance(x, (Tracer, np.ndarray)):
        return x
    if isinstance(x, bool):
        return np.asarray(x)
    if isinstance(x, int):
        return np.asarray(x, dtype=np.int32)
    if isinstance(x, float):
        return np.asarray(x, dtype=np.float32)
    if isinstance(x, np.generic):
        return np.asarray(x)
    arr = np.asarray(x)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    return arr


def _aval(x: Any) -> tuple:
    if isinstance(x, Tracer):
        return (x.shape, x.rlx_dtype)
    return (x.shape, rlx_dtype(x.dtype))


class _Built:
    """A traced and transformed graph: which call leaf (or capture) feeds each graph input."""

    __slots__ = ("graph", "out_tree", "feed", "captures", "compiled")

    def __init__(self, graph, out_tree, sources: dict, captures: list):
        self.graph = graph
        self.out_tree = out_tree
        self.captures = captures
        self.compiled = None
        self.feed = []
        for name, _node in graph.inputs():
            if name not in sources:
                raise RuntimeError(f"internal: graph input `{name}` has no source")
            self.feed.append(sources[name])


def trace_function(f: Callable, args_tree: Any, avals: Sequence[tuple], name: str):
    """Traces `f(*args)` with one input `a{i}` per leaf: (trace, flat output tracers, out tree)."""
    tr = Trace(name)
    tracers = [tr.new_input(f"a{i}", shape, dt) for i, (shape, dt) in enumerate(avals)]
    _STACK.append(tr)
    try:
        out = f(*tree_unflatten(args_tree, tracers))
        leaves, out_tree = tree_flatten(out)
        outs = [tr.lift(v) for v in leaves]
    finally:
        _STACK.pop()
    tr.graph.set_outputs([t.node for t in outs])
    return tr, outs, out_tree


class Transformed:
    """A function staged through a graph transform, cached per input signature."""

    def __init__(self, f: Callable, build: Callable, name: str, device: str = "cpu"):
        self.f = f
        self.build = build
        self.name = name
        self.device = device
        self.cache: dict = {}
        self.fast: dict = {}
        functools.update_wrapper(self, f, updated=())

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = _positional(self.f, args, kwargs)
        # Fast path: positional numpy arrays whose signature already ran compiled.
        try:
            built = self.fast[tuple([(a.shape, a.dtype) if type(a) is np.ndarray else None for a in args])]
        except (KeyError, AttributeError):
            built = None
        if built is not None:
            outs = built.compiled.call(*[args[i] for i in built.feed])
            return outs[0] if built.out_tree == "*" else tree_unflatten(built.out_tree, outs)
        leaves, tree = tree_flatten(args)
        leaves = [_canonical(x) for x in leaves]
        key = (tree, tuple(_aval(x) for x in leaves))
        built = self.cache.get(key)
        if built is None:
            built = self.build(self.f, tree, key[1], leaves)
            if not built.captures:
                self.cache[key] = built
        out = self._apply(built, leaves)
        if built.compiled is not None and all(type(a) is np.ndarray for a in args):
            self.fast[tuple((a.shape, a.dtype) for a in args)] = built
        return out

    def _apply(self, built: _Built, leaves: list):
        feeds = [leaves[s] if isinstance(s, int) else built.captures[s[1]] for s in built.feed]
        tr = current_trace(tuple(feeds))
        if tr is not None:
            nodes = [tr.lift(x).node for x in feeds]
            outs = tr.graph.inline(built.graph, nodes)
            return tree_unflatten(built.out_tree, [Tracer(tr, n) for n in outs])
        if built.compiled is None:
            built.compiled = _session(self.device).compile(built.graph)
        return tree_unflatten(built.out_tree, built.compiled.call(*feeds))

    def lower(self, *args) -> _rlx.Graph:
        """The graph this function runs for `args` (for inspection: `print(f.lower(x))`)."""
        leaves, tree = tree_flatten(args)
        leaves = [_canonical(x) for x in leaves]
        return self.build(self.f, tree, tuple(_aval(x) for x in leaves), leaves).graph


def _positional(f: Callable, args: tuple, kwargs: dict) -> tuple:
    """Keyword arguments bound to `f`'s positional parameters (keyword-only ones are refused)."""
    import inspect

    bound = inspect.signature(f).bind(*args, **kwargs)
    if bound.kwargs:
        raise TypeError(f"rlx transforms take positional arguments; `{', '.join(bound.kwargs)}` is keyword-only")
    return bound.args


def _fname(f: Callable) -> str:
    return getattr(f, "__name__", "fn")


def _sources(n: int, captures: list, prefix: str = "a") -> dict:
    src: dict[str, Any] = {f"{prefix}{i}": i for i in range(n)}
    src.update({f"c{k}": ("c", k) for k in range(len(captures))})
    return src


def jit(f: Callable | None = None, *, device: str = "cpu"):
    """Compiles `f` once per input signature (shapes, dtypes, structure) and runs it with RLX.
    Inside another transform it is inlined."""
    if f is None:
        return functools.partial(jit, device=device)

    def build(f, tree, avals, leaves):
        tr, _outs, out_tree = trace_function(f, tree, avals, _fname(f))
        return _Built(tr.graph, out_tree, _sources(len(avals), tr.captures), tr.captures)

    return Transformed(f, build, f"jit({_fname(f)})", device)


def _arg_leaf_ranges(tree: Any) -> list[tuple[int, int]]:
    """Leaf index range of each top-level argument of an args tuple's tree."""
    ranges, start = [], 0
    for sub in tree[1]:
        n = _count(sub)
        ranges.append((start, start + n))
        start += n
    return ranges


def _count(tree: Any) -> int:
    if tree == "*":
        return 1
    kind = tree[0]
    if kind in ("tuple", "list"):
        return sum(_count(c) for c in tree[1])
    if kind == "dict":
        return sum(_count(c) for c in tree[2])
    return 0


def _grad_build(argnums, with_value: bool, has_aux: bool):
    def build(f, tree, avals, leaves):
        tr, outs, out_tree = trace_function(f, tree, avals, _fname(f))
        aux_nodes, aux_tree = [], None
        if has_aux:
            if not (isinstance(out_tree, tuple) and out_tree[0] == "tuple" and len(out_tree[1]) == 2):
                raise ValueError("has_aux=True needs the function to return a pair (loss, aux)")
            out_tree, aux_tree = out_tree[1]
            n = _count(out_tree)
            outs, aux_nodes = outs[:n], [t.node for t in outs[n:]]
            tr.graph.set_outputs([t.node for t in outs])
        if len(outs) != 1 or outs[0].shape not in ((), (1,)):
            shapes = [f"{t.rlx_dtype}{list(t.shape)}" for t in outs]
            raise ValueError(f"grad needs a function with one scalar output, got outputs {shapes}")
        ranges = _arg_leaf_ranges(tree)
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        for a in nums:
            if not 0 <= a < len(ranges):
                raise ValueError(f"argnums {a} is out of range for {len(ranges)} arguments")
        wrt = [f"a{i}" for a in nums for i in range(*ranges[a])]
        transform = _rlx.grad_with_loss if with_value else _rlx.grad
        g = transform(tr.graph, wrt)
        subs = [tree[1][a] for a in nums]
        grads_tree = subs[0] if isinstance(argnums, int) else ("tuple", tuple(subs))
        if has_aux:
            # The transforms keep the original nodes, so the aux values are still there.
            g.set_outputs(list(g.outputs) + aux_nodes)
            value_tree = ("tuple", (out_tree, aux_tree))
            if with_value:
                out = ("tuple", (value_tree, grads_tree))
                g.set_outputs(_reorder(g.outputs, 1, _count(grads_tree), len(aux_nodes)))
            else:
                out = ("tuple", (grads_tree, aux_tree))
        else:
            out = ("tuple", (out_tree, grads_tree)) if with_value else grads_tree
        return _Built(g, out, _sources(len(avals), tr.captures), tr.captures)

    return build


def _reorder(outs: list, n_loss: int, n_grads: int, n_aux: int) -> list:
    """[loss, grads, aux] -> [loss, aux, grads] for value_and_grad(has_aux=True)."""
    loss, grads, aux = outs[:n_loss], outs[n_loss : n_loss + n_grads], outs[n_loss + n_grads :]
    assert len(aux) == n_aux
    return loss + aux + grads


def grad(f: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False):
    """The gradient of scalar-valued `f` with respect to argument(s) `argnums`. With
    `has_aux=True`, `f` returns `(loss, aux)` and the result is `(grads, aux)`."""
    return Transformed(f, _grad_build(argnums, False, has_aux), f"grad({_fname(f)})")


def value_and_grad(f: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False):
    """`(f(*args), grad(f)(*args))` in one pass (`((loss, aux), grads)` with `has_aux=True`)."""
    return Transformed(f, _grad_build(argnums, True, has_aux), f"value_and_grad({_fname(f)})")


def _jvp_build(f, tree, avals, leaves):
    p_tree, t_tree = tree[1]
    if p_tree != t_tree:
        raise ValueError(f"jvp: primals and tangents differ in structure: {p_tree} vs {t_tree}")
    n = len(avals) // 2
    for i in range(n):
        if avals[i] != avals[n + i]:
            raise ValueError(f"jvp: primal {i} is {avals[i]} but its tangent is {avals[n + i]}")
    tr, _outs, out_tree = trace_function(f, p_tree, avals[:n], _fname(f))
    g = _rlx.jvp(tr.graph, [f"a{i}" for i in range(n)])
    src = _sources(n, tr.captures)
    src.update({f"tangent_a{i}": n + i for i in range(n)})
    return _Built(g, ("tuple", (out_tree, out_tree)), src, tr.captures)


def jvp(f: Callable, primals: Sequence, tangents: Sequence):
    """Forward mode: `(f(*primals), J f(primals) . tangents)`."""
    # One staging per function (held weakly), cached by the signature of primals and tangents.
    try:
        t = _JVP_CACHE[f]
    except (KeyError, TypeError):
        t = Transformed(f, _jvp_build, f"jvp({_fname(f)})")
        try:
            _JVP_CACHE[f] = t
        except TypeError:
            pass
    return t(tuple(primals), tuple(tangents))


_JVP_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def vmap(f: Callable, in_axes: int | None | Sequence = 0, out_axes: int = 0):
    """Vectorizes `f` over axis `in_axes` of its arguments (None: not batched; one entry per
    argument, or one for all); outputs carry the batch axis at `out_axes`."""

    def build(f, tree, avals, leaves):
        axes = _leaf_axes(tree, in_axes)
        sizes = {avals[i][0][0] for i, a in enumerate(axes) if a is not None}
        if not sizes:
            raise ValueError("vmap: no argument is batched (every in_axes is None)")
        if len(sizes) > 1:
            raise ValueError(f"vmap: batched arguments disagree on the batch size: {sorted(sizes)}")
        size = sizes.pop()
        inner = [(s[1:], d) if a is not None else (s, d) for (s, d), a in zip(avals, axes)]
        tr, _outs, out_tree = trace_function(f, tree, inner, _fname(f))
        batched = [f"a{i}" for i, a in enumerate(axes) if a is not None]
        g = _rlx.vmap(tr.graph, batched, size)
        return _Built(g, out_tree, _sources(len(avals), tr.captures), tr.captures)

    staged = Transformed(f, build, f"vmap({_fname(f)})")

    @functools.wraps(f)
    def call(*args, **kwargs):
        if kwargs:
            args = _positional(f, args, kwargs)
        leaves, tree = tree_flatten(args)
        axes = _leaf_axes(tree, in_axes)
        leaves = [_canonical(x) for x in leaves]
        for x, a in zip(leaves, axes):
            if a is not None and not -x.ndim <= a < x.ndim:
                raise ValueError(f"vmap: in_axes {a} is out of range for an argument of shape {x.shape}")
        moved = [_moveaxis(x, a, 0) if a not in (None, 0) else x for x, a in zip(leaves, axes)]
        out = staged(*tree_unflatten(tree, moved))
        if out_axes != 0:
            out = tree_unflatten(*_swap(tree_flatten(out), out_axes))
        return out

    call.staged = staged  # type: ignore[attr-defined]
    return call


def _swap(flat, out_axes):
    leaves, tree = flat
    return tree, [_moveaxis(x, 0, out_axes) for x in leaves]


def _moveaxis(x: Any, src: int, dst: int):
    if isinstance(x, Tracer):
        from . import numpy as rnp

        return rnp.moveaxis(x, src, dst)
    return np.moveaxis(x, src, dst)


def _leaf_axes(tree: Any, in_axes: Any) -> list:
    """The batch axis of every leaf of an args tuple, from JAX-style `in_axes`."""
    nargs = len(tree[1])
    if in_axes is None or isinstance(in_axes, int):
        per_arg = [in_axes] * nargs
    else:
        per_arg = list(in_axes)
        if len(per_arg) != nargs:
            raise ValueError(f"vmap: in_axes has {len(per_arg)} entries for {nargs} arguments")
    out = []
    for sub, a in zip(tree[1], per_arg):
        out.extend([a] * _count(sub))
    return out
