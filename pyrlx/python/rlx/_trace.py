"""Tracing: Python functions of arrays become RLX graphs.

A `Tracer` stands for a value of the graph being built; `rlx.numpy` functions and the Tracer's
operators add nodes. A trace that meets a tracer of an enclosing trace (a closure) makes it an
extra input of its own graph ("capture"), bound to the outer value when the graph is inlined.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _rlx

_STACK: list["Trace"] = []
_NP_DTYPES: dict[str, np.dtype] = {}
_RLX_NAMES: dict[Any, str] = {}


def np_dtype(name: str) -> np.dtype:
    """The numpy dtype of an RLX or numpy dtype name (bfloat16 through ml_dtypes)."""
    d = _NP_DTYPES.get(name)
    if d is None:
        rlx_name = _rlx.canonical_dtype(name)
        if rlx_name == "bf16":
            try:
                import ml_dtypes
            except ImportError as e:  # pragma: no cover - depends on the environment
                raise TypeError("bf16 needs the ml_dtypes package: pip install ml_dtypes") from e
            d = np.dtype(ml_dtypes.bfloat16)
        else:
            d = np.dtype({"f32": "float32", "f16": "float16", "f64": "float64", "i8": "int8",
                          "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
                          "u32": "uint32", "bool": "bool", "c64": "complex64"}[rlx_name])
        _NP_DTYPES[name] = d
    return d


def rlx_dtype(dtype: Any) -> str:
    """The RLX name (`f32`) of a numpy dtype, scalar type or name."""
    try:
        return _RLX_NAMES[dtype]
    except (KeyError, TypeError):
        pass
    name = _rlx.canonical_dtype(dtype)
    try:
        _RLX_NAMES[dtype] = name
    except TypeError:
        pass
    return name


class Trace:
    """One graph being built, with the outer tracers it captured."""

    def __init__(self, name: str):
        self.graph = _rlx.Graph(name)
        self.captures: list[Tracer] = []
        self._captured: dict[tuple[int, int], Tracer] = {}

    def new_input(self, name: str, shape: tuple, dtype: str) -> "Tracer":
        return Tracer(self, self.graph.input(name, list(shape), dtype))

    def lift(self, x: Any, like: "Tracer | None" = None) -> "Tracer":
        """`x` as a tracer of this trace: itself, a capture of an outer tracer, or a constant.
        Python scalars take the dtype of `like` (weak typing, as in JAX)."""
        if isinstance(x, Tracer):
            if x.trace is self:
                return x
            return self._capture(x)
        if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
            if like is not None:
                dt = like.rlx_dtype
                if isinstance(x, float) and dt in ("i8", "i16", "i32", "i64", "u8", "u32", "bool"):
                    dt = "f32"
                elif isinstance(x, int) and not isinstance(x, bool) and dt == "bool":
                    dt = "i32"
            else:
                dt = "bool" if isinstance(x, bool) else ("i32" if isinstance(x, int) else "f32")
            return Tracer(self, self.graph.scalar(float(x), dt))
        arr = np.asarray(x)
        if arr.dtype == np.float64 and not isinstance(x, np.ndarray) and not isinstance(x, np.generic):
            arr = arr.astype(np.float32)  # Python float lists are f32, as in JAX
        # ascontiguousarray makes 0-d arrays 1-d: a numpy scalar must stay a scalar.
        return Tracer(self, self.graph.constant(np.ascontiguousarray(arr) if arr.ndim else arr))

    def _capture(self, x: "Tracer") -> "Tracer":
        if x.trace not in _STACK:
            raise ValueError(
                "a traced value escaped its transform (it was kept from an earlier trace and used "
                "outside it); pass it as an argument instead"
            )
        key = (id(x.trace), x.node.id)
        t = self._captured.get(key)
        if t is None:
            t = self.new_input(f"c{len(self.captures)}", x.shape, x.rlx_dtype)
            self.captures.append(x)
            self._captured[key] = t
        return t


def current_trace(args: tuple) -> Trace | None:
    """The innermost trace among the tracers in `args` (None when all are concrete)."""
    best = None
    for a in args:
        if isinstance(a, Tracer):
            if a.trace not in _STACK:
                raise ValueError(
                    "a traced value escaped its transform (it was kept from an earlier trace and "
                    "used outside it); pass it as an argument instead"
                )
            if best is None or _STACK.index(a.trace) > _STACK.index(best):
                best = a.trace
    return best


def binary_args(a: Any, b: Any) -> tuple[Trace, "Tracer", "Tracer"]:
    """Both operands as tracers of the innermost trace involved."""
    tr = current_trace((a, b))
    assert tr is not None
    like = a if isinstance(a, Tracer) else b
    like = tr.lift(like)
    ta = tr.lift(a, like)
    tb = tr.lift(b, like)
    return tr, ta, tb


class Tracer:
    """A value in a graph being traced: supports numpy-style operators and attributes."""

    __slots__ = ("trace", "node", "shape", "rlx_dtype")
    __array_priority__ = 1000

    def __init__(self, trace: Trace, node: "_rlx.Node"):
        if not isinstance(trace, Trace):
            raise TypeError("Tracer is made by rlx transforms, not directly")
        self.trace = trace
        self.node = node
        g = trace.graph
        self.shape = tuple(g.shape(node))
        self.rlx_dtype = g.dtype(node)

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype."""
        return np_dtype(self.rlx_dtype)

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"Tracer({self.rlx_dtype}{list(self.shape)}, node={self.node!r})"

    def _concrete(self, what: str):
        raise TypeError(
            f"{what} needs a concrete value, but this is a traced value ({self.rlx_dtype}"
            f"{list(self.shape)}) inside an rlx transform: use rlx.numpy.where instead of Python "
            "control flow on traced values, or pass the value as a static Python number"
        )

    def __bool__(self):
        self._concrete("bool()")

    def __float__(self):
        self._concrete("float()")

    def __int__(self):
        self._concrete("int()")

    def __index__(self):
        self._concrete("an index")

    def __array__(self, dtype=None, copy=None):
        self._concrete("numpy conversion")

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    # Operators, through rlx.numpy.
    def __add__(self, o): return _rnp().add(self, o)
    def __radd__(self, o): return _rnp().add(o, self)
    def __sub__(self, o): return _rnp().subtract(self, o)
    def __rsub__(self, o): return _rnp().subtract(o, self)
    def __mul__(self, o): return _rnp().multiply(self, o)
    def __rmul__(self, o): return _rnp().multiply(o, self)
    def __truediv__(self, o): return _rnp().divide(self, o)
    def __rtruediv__(self, o): return _rnp().divide(o, self)
    def __pow__(self, o): return _rnp().power(self, o)
    def __rpow__(self, o): return _rnp().power(o, self)
    def __matmul__(self, o): return _rnp().matmul(self, o)
    def __rmatmul__(self, o): return _rnp().matmul(o, self)
    def __neg__(self): return _rnp().negative(self)
    def __pos__(self): return self
    def __abs__(self): return _rnp().abs(self)
    def __lt__(self, o): return _rnp().less(self, o)
    def __le__(self, o): return _rnp().less_equal(self, o)
    def __gt__(self, o): return _rnp().greater(self, o)
    def __ge__(self, o): return _rnp().greater_equal(self, o)
    def __eq__(self, o): return _rnp().equal(self, o)  # type: ignore[override]
    def __ne__(self, o): return _rnp().not_equal(self, o)  # type: ignore[override]
    __hash__ = None  # type: ignore[assignment]

    def __getitem__(self, idx): return _rnp()._getitem(self, idx)

    @property
    def T(self) -> "Tracer":
        """Axes reversed."""
        return _rnp().transpose(self)

    def reshape(self, *shape): return _rnp().reshape(self, shape[0] if len(shape) == 1 else shape)
    def transpose(self, *axes): return _rnp().transpose(self, axes if axes else None)
    def astype(self, dtype): return _rnp().astype(self, dtype)
    def sum(self, axis=None, keepdims=False): return _rnp().sum(self, axis, keepdims=keepdims)
    def mean(self, axis=None, keepdims=False): return _rnp().mean(self, axis, keepdims=keepdims)
    def max(self, axis=None, keepdims=False): return _rnp().max(self, axis, keepdims=keepdims)
    def min(self, axis=None, keepdims=False): return _rnp().min(self, axis, keepdims=keepdims)
    def prod(self, axis=None, keepdims=False): return _rnp().prod(self, axis, keepdims=keepdims)
    def argmax(self, axis=None): return _rnp().argmax(self, axis)


def _rnp():
    from . import numpy as rnp

    return rnp
