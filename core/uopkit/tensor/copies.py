"""`copy.deepcopy` of tensors, as PyTorch's: the copy's values are computed at once into storage of its own, and
nothing of the original stays with it (no graph that reads the original's storage, no record of what computed it);
PyTorch views among the tensors of one deepcopy stay views of one copied storage (`[x, x[1:3]]`, a module whose
attributes are a weight and its transpose).

(`Tensor.__deepcopy__` calls `deep_copy`; pickle is `Tensor.__reduce__`, which keeps values only, as PyTorch's
pickle gives each tensor a storage of its own.)"""

from __future__ import annotations

import copy
import weakref
from typing import TYPE_CHECKING, Any

from uopkit.schedule import forget_source
from uopkit.tensor.indexing import _view_chain, _view_of, _views_node
from uopkit.tensor.support import _A_COPY, _A_RESHAPED_COPY, _mark_view, _storage_uop
from uopkit.uop.ops import UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def own_values(t: Tensor) -> Tensor:
    """A new tensor holding t's values, computed now into a buffer of its own and remembering no graph.

    Left lazy (a graph reading t's buffer), the copy was a reader of the original: an in-place write into the original
    (an optimizer step) first gave it a copy-on-write snapshot, whose remembered source was the original's buffer, and
    backward() through the copy then found that buffer overwritten since and raised."""
    out = t.detach().contiguous().realize()
    # (what computed it reads the original: a gradient must stop at the copy, a leaf; the uint16 bits of a bfloat16
    # value remember their source too)
    forget_source(out.uop)
    forget_source(_storage_uop(out.uop))
    return out


def _storage_of(t: Tensor) -> tuple[weakref.ref, UOp, Tensor | None]:
    """The storage a deep copy of t shares with the other tensors of its deepcopy: (the reference all its PyTorch
    views hold, the node they are views of, the live tensor that node is, if any). A tensor that is no view is its own
    storage; a view whose base is gone shares the node under its chain of views with the other views of that base."""
    ref = t._view_of
    if ref is None or ref is _A_COPY or ref is _A_RESHAPED_COPY:
        return t._live_ref, t.uop, t
    root = ref()
    if root is not None:
        # (a view realized apart from its base since is a value of its own)
        return (ref, root.uop, root) if _views_node(t.uop, root.uop) else (t._live_ref, t.uop, t)
    chain = _view_chain(t.uop)
    return ref, chain[-1].src[0] if chain else t.uop, None


def _wants_grad(out: Tensor, like: Tensor) -> None:
    # out, a new leaf, requires grad where `like` does (a value computed from one that requires grad comes back a leaf
    # that requires grad, as pickle gives it) and is a parameter where `like` is one (a frozen weight)
    if like.requires_grad:
        out.requires_grad = True
    else:
        out._requires_grad = like._requires_grad
    out._wanted_grad = out._wanted_grad or like._wanted_grad


def deep_copy(t: Tensor, memo: dict[Any, Any], with_grad: bool = True) -> Tensor:
    """t's deep copy (see the module's docstring), with its requires_grad and a deep copy of its `.grad`
    (with_grad=False: no `.grad`, as PyTorch copies an `nn.Parameter`).

    A PyTorch view is the same view of a copy of its base's storage, which `memo` keeps for every other view of that
    base and the base itself in this deepcopy, as PyTorch's memo keeps each copied storage (the whole storage is
    copied, as PyTorch's, when only a view of it is)."""
    ref, node, root = _storage_of(t)
    key = ("uopkit storage", id(ref))
    # (the entry holds the reference: its id is not reused while the deepcopy runs)
    entry = memo.get(key)
    if entry is None or entry[1] is not node:
        storage = own_values(root if root is not None else Tensor(node))
        if root is not None:
            _wants_grad(storage, root)
        entry = (ref, node, storage)
        memo.setdefault(key, entry)
    storage = entry[2]
    if root is t:
        out = storage
    else:
        out = Tensor(_view_of(t.uop, node, storage.uop))
        _mark_view(out, storage)
        # a view of a base copied already is computed from the base's copy (it requires grad where that does). One
        # given requires_grad itself, or whose base is gone, was a leaf of its own, and so is its copy; so is one
        # copied before its base, which may not be copied at all (torch refuses a view that requires grad: here
        # `copy.deepcopy(w.T)` is a leaf that can be trained, as a deep copy of any value computed from `w` is)
        if t._requires_grad or root is None or id(root) not in memo:
            _wants_grad(out, t)
        else:
            out._requires_grad = t._requires_grad
    memo[id(t)] = out
    if with_grad and t.grad is not None:
        out.grad = copy.deepcopy(t.grad, memo)
    return out
