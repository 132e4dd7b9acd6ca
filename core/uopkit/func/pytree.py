"""The nested containers torch.func's transforms take and return (torch's pytrees, the part they use): tuples, lists,
named tuples and dicts hold values, anything else is a leaf. A structure (`Spec`) prints as torch's TreeSpec does, so
the errors that show one read alike.

>>> leaves, spec = tree_flatten({"w": 1, "b": (2, 3)})
>>> leaves, tree_unflatten([4, 5, 6], spec)
([1, 2, 3], {'w': 4, 'b': (5, 6)})
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Spec:
    """A container's structure: its type, its keys (a dict's) and its children's structures; a leaf is `LEAF`."""

    __slots__ = ("kind", "keys", "children", "leaves")

    def __init__(self, kind: type | None, keys: tuple[Any, ...] | None, children: tuple[Spec, ...]) -> None:
        self.kind, self.keys, self.children = kind, keys, children
        self.leaves = 1 if kind is None else sum(c.leaves for c in children)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Spec) and (self.kind, self.keys, self.children) == (
            other.kind,
            other.keys,
            other.children,
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.keys, self.children))

    def __repr__(self) -> str:
        if self.kind is None:
            return "*"
        keys = None if self.keys is None else list(self.keys)
        return f"TreeSpec({self.kind.__name__}, {keys}, [{', '.join(map(repr, self.children))}])"


LEAF = Spec(None, None, ())


def _children(tree: Any) -> tuple[tuple[Any, ...] | None, list[Any]] | None:
    # (keys, children) of a container, None for a leaf
    if isinstance(tree, dict):
        return tuple(tree), list(tree.values())
    if isinstance(tree, (tuple, list)):
        return None, list(tree)
    return None


def tree_flatten(tree: Any) -> tuple[list[Any], Spec]:
    """The leaves of `tree` in order, and its structure."""
    leaves: list[Any] = []
    return leaves, _flatten_into(tree, leaves)


def _flatten_into(tree: Any, leaves: list[Any]) -> Spec:
    parts = _children(tree)
    if parts is None:
        leaves.append(tree)
        return LEAF
    keys, children = parts
    return Spec(type(tree), keys, tuple(_flatten_into(c, leaves) for c in children))


def tree_unflatten(leaves: list[Any], spec: Spec) -> Any:
    """The tree of structure `spec` holding `leaves` in order."""
    if len(leaves) != spec.leaves:
        raise ValueError(f"tree_unflatten: {len(leaves)} leaves given for a structure of {spec.leaves}: {spec}")
    return _build(iter(leaves), spec)


def _build(leaves: Any, spec: Spec) -> Any:
    if spec.kind is None:
        return next(leaves)
    children = [_build(leaves, c) for c in spec.children]
    if spec.keys is not None:
        return spec.kind(zip(spec.keys, children, strict=True))
    if issubclass(spec.kind, tuple) and hasattr(spec.kind, "_fields"):
        return spec.kind(*children)
    return spec.kind(children)


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """`tree` with `fn` applied to each leaf."""
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([fn(x) for x in leaves], spec)


def broadcast_prefix(prefix: Any, tree: Any) -> list[Any] | None:
    """One value of `prefix` per leaf of `tree` (torch's in_dims and out_dims): where `prefix` has a leaf, every leaf
    of `tree` under that place takes it; where it has a container, `tree` must have one of the same type and length
    (a dict: the same keys). None when they don't fit."""
    out: list[Any] = []
    return out if _broadcast_into(prefix, tree, out) else None


def _broadcast_into(prefix: Any, tree: Any, out: list[Any]) -> bool:
    prefix_parts = _children(prefix)
    if prefix_parts is None:
        out.extend([prefix] * tree_flatten(tree)[1].leaves)
        return True
    tree_parts = _children(tree)
    if tree_parts is None or type(prefix) is not type(tree) or len(prefix_parts[1]) != len(tree_parts[1]):
        return False
    if isinstance(tree, dict):
        if set(prefix) != set(tree):
            return False
        return all(_broadcast_into(prefix[k], v, out) for k, v in tree.items())
    return all(_broadcast_into(p, t, out) for p, t in zip(prefix_parts[1], tree_parts[1], strict=True))
