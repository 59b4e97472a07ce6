"""A small pytree: tuples, lists, dicts (sorted keys) and None around array leaves."""

from __future__ import annotations

from typing import Any

LEAF = "*"


def tree_flatten(x: Any) -> tuple[list, Any]:
    """Leaves of `x` in order, and a hashable description of its structure."""
    leaves: list = []
    return leaves, _flatten(x, leaves)


def _flatten(x: Any, leaves: list) -> Any:
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return ("tuple", tuple(_flatten(c, leaves) for c in x))
    if isinstance(x, list):
        return ("list", tuple(_flatten(c, leaves) for c in x))
    if isinstance(x, dict):
        keys = sorted(x)
        return ("dict", tuple(keys), tuple(_flatten(x[k], leaves) for k in keys))
    if x is None:
        return ("none",)
    leaves.append(x)
    return LEAF


def tree_unflatten(tree: Any, leaves: list) -> Any:
    """Rebuilds a structure from `tree_flatten`'s description and (new) leaves."""
    it = iter(leaves)
    out = _unflatten(tree, it)
    rest = list(it)
    if rest:
        raise ValueError(f"tree_unflatten: {len(rest)} leaves left over")
    return out


def _unflatten(tree: Any, it) -> Any:
    if tree == LEAF:
        return next(it)
    kind = tree[0]
    if kind == "tuple":
        return tuple(_unflatten(c, it) for c in tree[1])
    if kind == "list":
        return [_unflatten(c, it) for c in tree[1]]
    if kind == "dict":
        return {k: _unflatten(c, it) for k, c in zip(tree[1], tree[2])}
    return None


def tree_map(f, x: Any) -> Any:
    """Applies `f` to every leaf."""
    leaves, tree = tree_flatten(x)
    return tree_unflatten(tree, [f(v) for v in leaves])
