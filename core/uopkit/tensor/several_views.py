"""The views one op returns together (`split`, `split_with_sizes`, `chunk`, `unbind`), as torch marks them: an in-place
write into one of them, or into a view of one, can't be differentiated, so while gradients are recorded and the write
needs a gradient it raises a RuntimeError, as torch's (which refuses it too). `unsafe_split`/`unsafe_chunk`,
`tensor_split` and the numpy-style splits built on it, and `narrow` make views that take such writes.

>>> from uopkit import Tensor
>>> a, b = (Tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True) * 1).split(2)
>>> b.clone().mul_(2).tolist()
[6.0, 8.0]
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from uopkit.tensor.grad_mode import thread_mode

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

__all__ = ["mark_several_views", "inherit_mark", "maker_of", "check_several_views_write"]

# such views made while gradients were recorded, and their views: by id -> (a weak reference, the op's name)
marked: dict[int, tuple[weakref.ref, str]] = {}


def _mark(t: Tensor, op: str) -> None:
    key = id(t)
    marked[key] = (weakref.ref(t, lambda _, key=key: marked.pop(key, None)), op)


def mark_several_views(outputs: tuple[Tensor, ...], op: str, of: Tensor) -> tuple[Tensor, ...]:
    """`outputs`, the views of `of` that `op` returned together, marked as such while gradients are recorded, as
    torch's (an output that is `of` itself, not a new view, stays unmarked)."""
    if not thread_mode.off:
        for t in outputs:
            if t is not of:
                _mark(t, op)
    return outputs


def maker_of(t: Tensor) -> str | None:
    """The op that returned `t` (or the tensor `t` is a view of) together with other views, if one did."""
    entry = marked.get(id(t))
    return entry[1] if entry is not None and entry[0]() is t else None


def inherit_mark(view: Tensor, of: Tensor) -> None:
    """`view` of `of` is marked as `of` is (a view's `_view_of` points past `of`, at the oldest live base)."""
    op = maker_of(of)
    if op is not None:
        _mark(view, op)


def check_several_views_write(t: Tensor, value: Any, op: str) -> None:
    """torch's refusal of an in-place write (`op`, of `value`) into a marked view while gradients are recorded, where
    the view or the value requires grad. A view of a leaf that requires grad is let through: a write into a leaf is an
    update here, unseen by autograd (docs/semantics.md)."""
    maker = maker_of(t) if marked else None
    if maker is None or thread_mode.off:
        return
    root = t._view_of() if t._view_of is not None else None
    if root is not None and root._requires_grad:
        return
    if getattr(value, "requires_grad", False) is True or t.requires_grad:
        raise RuntimeError(
            f"{op}: this tensor is one of the views {maker}() returned together (or a view of one), and an in-place "
            f"write into it can't be differentiated while gradients are recorded (PyTorch refuses it too). Write "
            f"into a copy instead (`part = part.clone()` before the {op}), or make the write under no_grad() if no "
            "gradient should flow through it"
        )
