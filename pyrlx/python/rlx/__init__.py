"""RLX from Python: the graph API of the Rust crates, and a JAX-style front end.

    import numpy as np, rlx, rlx.numpy as rnp

    @rlx.jit
    def layer(x, w):
        return rnp.tanh(x @ w)

    y = layer(np.ones((2, 4), np.float32), np.ones((4, 3), np.float32))
    dw = rlx.grad(lambda x, w: rnp.sum(layer(x, w)), argnums=1)(x, w)
"""

from . import _rlx, lax, models, nn, numpy, transforms  # noqa: F401
from ._api import Transformed, grad, jit, jvp, value_and_grad, vmap
from ._rlx import CompiledGraph, Graph, Node, Session, __version__, dtypes
from ._trace import Tracer
from ._tree import tree_flatten, tree_map, tree_unflatten

__all__ = [
    "CompiledGraph", "Graph", "Node", "Session", "Tracer", "Transformed", "__version__", "dtypes",
    "grad", "jit", "jvp", "lax", "models", "nn", "numpy", "transforms", "tree_flatten", "tree_map", "tree_unflatten",
    "value_and_grad", "vmap",
]
