"""`Tensor.unique`'s groups: the distinct values of a flattened tensor, sorted on the host (its order and length are
read back anyway), or the distinct slices along an axis, sorted on the device; then the inverse and the counts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from uopkit.dtype import dtypes
from uopkit.helpers import prod
from uopkit.tensor.support import ShapeError, _normalize_axis

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def unique_of(t: Tensor, dim: int | None, return_inverse: bool, return_counts: bool) -> Tensor | tuple[Tensor, ...]:
    """`Tensor.unique` (which documents it); `sorted` changes nothing (the result is always sorted)."""
    if dim is None:
        found, perm, starts = _values_on_host(t)
    else:
        rows, axis = slices_as_rows(t, dim, "unique")
        found, perm, starts = _rows_on_device(rows)
    k = len(perm)
    if dim is None:
        values = found.reshape(-1)
    else:
        values = found.reshape((len(starts),) + t.shape[:axis] + t.shape[axis + 1 :])
        values = values._move_to_end(0)._move_from_end(axis)
    out = [values]
    positions = np.int32 if dtypes.positions(k) == dtypes.int32 else np.int64
    if return_inverse:
        # each sorted row's group (a running count of the starts), put back at the row's place in the input
        started = np.zeros(k, positions)
        started[starts] = 1
        inverse = np.empty(k, positions)
        inverse[perm] = np.cumsum(started) - 1
        out.append(type(t)(inverse.reshape(t.shape if dim is None else (k,)), device=t.device))
    if return_counts:
        out.append(type(t)(np.diff(np.append(starts, k)).astype(positions), device=t.device))
    return out[0] if len(out) == 1 else tuple(out)


def slices_as_rows(t: Tensor, dim: int, op: str) -> tuple[Tensor, int]:
    """The slices of `t` along `dim` as the rows of a 2-D tensor (each slice's elements in row-major order), and the
    axis; `op` names the caller in the errors (a 0-d tensor, empty slices)."""
    if t.ndim == 0:
        raise ShapeError(f"{op}: dim {dim} given for a 0-d tensor, which has no axes; pass dim=None")
    axis = _normalize_axis(dim, t.ndim, op, t.shape)
    if t.shape[axis] and not t.numel():
        raise ShapeError(f"{op}: the slices along dim {dim} of shape {t.shape} are empty (another axis has size 0)")
    # (the row width spelled out: -1 can't be inferred when there are no rows)
    return t._move_to_end(axis)._move_from_end(0).reshape(t.shape[axis], prod(t.shape) // max(t.shape[axis], 1)), axis


def _rows_on_device(rows: Tensor) -> tuple[Tensor, np.ndarray, np.ndarray]:
    # the groups of the rows of a 2-D tensor: (the first row of each group, the sorting order, where each group
    # starts in it)
    k, width = rows.shape
    if k == 0:
        return rows.detach(), np.zeros(0, np.int64), np.zeros(0, np.int64)
    # a lexicographic order of the rows: stable sorts by each column, the last first
    order: Tensor | None = None
    for column in reversed(range(width)):
        keys = rows._slice_axis(1, column, column + 1).reshape(k)
        step = (keys if order is None else keys._gather_checked(0, order)).argsort()
        order = step if order is None else order._gather_checked(0, step)
    assert order is not None, "the slices are not empty (checked by unique_of)"
    perm = order.numpy().astype(np.int64)
    ordered = rows.detach()._take(0, perm)
    # a row starts a group where it differs from the one before (NaN != NaN: every NaN is one of its own)
    differs = (ordered._slice_axis(0, 1, k) != ordered._slice_axis(0, 0, k - 1)).any(1)
    starts = np.concatenate([[0], np.flatnonzero(differs.numpy()) + 1])
    return ordered._take_counted(0, starts), perm, starts


def _values_on_host(t: Tensor) -> tuple[Tensor, np.ndarray, np.ndarray]:
    # `_rows_on_device` of the flattened values by numpy's stable sort: one read of the values and a host sort beat
    # the sort's kernels (100k values: 160 bitonic kernels). numpy's order is torch's: NaNs last, each NaN a group of
    # its own (NaN != NaN), -0.0 beside 0.0 (`numpy()` gives every dtype's values exactly: bfloat16 as float32)
    flat = t.detach().numpy().reshape(-1)
    perm = np.argsort(flat, kind="stable")
    ordered = flat[perm]
    starts = np.concatenate([[0], np.flatnonzero(ordered[1:] != ordered[:-1]) + 1]) if flat.size else perm
    return type(t)(ordered[starts], device=t.device, dtype=t.dtype), perm, starts
