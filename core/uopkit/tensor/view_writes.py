"""A value written through a view of a tensor, as a lazy graph: the value's shape against the view's
(`_check_value_fits`, `_without_leading_ones`) and the value moved back into place through the view's movement ops
(`_placed_through`), so that a write and its gradient are elementwise, not a scatter."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from uopkit.dtype import dtypes
from uopkit.gradient import set_gradient
from uopkit.tensor.support import _VIEW_NODES, ShapeError, _mark_view
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    # (set at run time by tensor.py, which imports this module)
    from uopkit.tensor.tensor import Tensor

_Picked = Callable[[], "Tensor"] | None


def _without_leading_ones(value: Tensor, ndim: int) -> Tensor:
    # a value written into `ndim` dimensions may have more, of size 1, in front (`out[i] = model(x[i:i + 1])`): PyTorch
    # and numpy drop them
    extra = 0
    while value.ndim - extra > ndim and value.shape[extra] == 1:
        extra += 1
    return value.reshape(value.shape[extra:]) if extra else value


def _check_value_fits(value: Tensor, shape: tuple[int, ...]) -> None:
    # an index assignment's value broadcasts to what the index selects: say so, with both shapes (as torch), rather
    # than the expand inside that fails
    fitted = value.shape
    while len(fitted) > len(shape) and fitted[0] == 1:
        fitted = fitted[1:]
    if len(fitted) > len(shape) or any(v not in (1, s) for v, s in zip(fitted[::-1], shape[::-1], strict=False)):
        raise ShapeError(
            f"setitem: shape mismatch: value tensor of shape {value.shape} can't be broadcast to the indexing result "
            f"of shape {shape}"
        )


def _placed_through(old: Tensor, view: UOp, value: Tensor, picked: _Picked = None) -> Tensor | None:
    # old with `value` (broadcast to view's shape) written where `view`, movement ops over old's graph, shows it (only
    # where `picked()` is True, when given), for a view that shows each element at most once (no expand): the value
    # and a mask of the written elements are moved back into old's shape move by move (a shrink undone by a pad, a
    # pad by a shrink, a permute by its inverse) and picked by one where, O(n) and a gradient as cheap; None for any
    # other view (the caller scatters at the flat positions, a one-hot compare of every write with every element)
    chain, u = [], view
    while u is not old.uop:
        if u.op not in _VIEW_NODES or u.op is Ops.EXPAND:
            return None
        chain.append(u)
        u = u.src[0]
    _check_value_fits(value, view.shape)
    shape = tuple(view.shape)
    placed = _without_leading_ones(value, len(shape)).cast(old.dtype)._broadcast_to(shape).uop
    every = Tensor.ones(shape, dtype=dtypes.bool, device=old.device)
    mask = (every if picked is None else picked()._broadcast_to(shape) & every).uop
    for n in chain:
        inner = n.src[0].shape
        if n.op is Ops.SHRINK:
            op, arg = Ops.PAD, tuple((b, s - e) for (b, e), s in zip(n.arg, inner, strict=True))
        elif n.op is Ops.PAD:
            op, arg = Ops.SHRINK, tuple((b, b + s) for (b, _), s in zip(n.arg, inner, strict=True))
        elif n.op is Ops.PERMUTE:
            op, arg = Ops.PERMUTE, tuple(int(i) for i in np.argsort(n.arg))
        elif n.op is Ops.RESHAPE:
            op, arg = Ops.RESHAPE, tuple(inner)
        elif n.op is Ops.FLIP:
            op, arg = Ops.FLIP, n.arg
        else:
            # (a detach: the same elements)
            continue
        placed, mask = UOp(op, placed.dtype, (placed,), arg), UOp(op, mask.dtype, (mask,), arg)
    return Tensor(mask).where(Tensor(placed), old)


def _carried_by_lost_writes(lost: Tensor, vals: Tensor) -> Tensor:
    # +0.0 everywhere, whose gradient gives each value written where `lost` (a mask found from the positions alone: a
    # later write to its position overwrote it) the gradient at its target, as PyTorch's index_put backward gives every
    # value written. The rule reads the mask alone, as PyTorch's backward reads no value written; the chain of rules of
    # `vals.detach() - vals` needed a check that the values are finite (inf - inf is nan), so a gradient through the
    # write read them, and a detach in the forward read their storage as it is, not as it was: after an in-place write
    # since into what they were computed from (`v[mask] *= 2` after `p = p + 0.1 * v` was realized) backward() raised.
    # (The mask is an input too: a rule with a bool input is kept where a write's graph is rebuilt, `_rebuilt_over`)
    every = UOp(Ops.CONST, dtypes.bool, (UOp(Ops.DEVICE, arg=vals.device),), True)
    every = UOp(Ops.EXPAND, dtypes.bool, (UOp(Ops.RESHAPE, dtypes.bool, (every,), (1,) * vals.ndim),), vals.shape)
    zeros = Tensor.zeros(vals.shape, device=vals.device, dtype=vals.dtype)
    # (vals tied in, not read: a select that always takes the zeros)
    tied = Tensor(UOp(Ops.WHERE, vals.dtype, (every, zeros.uop, vals.uop)))
    carried = lost.where(tied, zeros)
    mask = lost.uop

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, UOp | None]:
        if not wanted[0]:
            return (None, None)
        return (Tensor(mask).where(-Tensor(g), Tensor.zeros(g.shape, device=vals.device, dtype=g.dtype)).uop, None)

    set_gradient(carried.uop, (vals.uop, mask), rule)
    return carried


def _plain_mixed_view(t: Tensor, index: tuple, shape: tuple[int, ...]) -> Tensor | None:
    # `Tensor._plain_view` of `t` at a tuple of ints and unit-step slices that select something (t-SNE's row write
    # `dY[i, :] = ...`, a column `w[:, i:i + 1]`): a SHRINK where it takes less than the whole, then a RESHAPE dropping
    # the int axes (the nodes `_basic_view` builds, in a fraction of its time); None for anything else
    bounds: list[tuple[int, int]] = []
    kept: list[int] = []
    ints = False
    for i, n in zip(index, shape, strict=False):
        kind = type(i)
        if kind is int:
            if not -n <= i < n:
                return None
            first = i % n
            bounds.append((first, first + 1))
            ints = True
        elif kind is slice and (i.step is None or i.step == 1):
            first, end, _ = i.indices(n)
            if first >= end:
                return None
            bounds.append((first, end))
            kept.append(end - first)
        else:
            return None
    k = len(index)
    full = shape[k:]
    u = t.uop
    if any(b != (0, n) for b, n in zip(bounds, shape, strict=False)):
        u = UOp(Ops.SHRINK, t.dtype, (u,), (*bounds, *((0, s) for s in full)))
    elif not ints:
        return None
    if ints:
        u = UOp(Ops.RESHAPE, t.dtype, (u,), (*kept, *full))
    return _mark_view(Tensor(u), t)
