"""torch.quantile and torch.nanquantile: the sorted rows read at each level's position, interpolated as torch's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from uopkit.dtype import dtypes
from uopkit.tensor.autocast import FLOAT32, autocast_op
from uopkit.tensor.support import ArgumentError, DTypeError, EmptyReduceError, ShapeError, _normalize_axis

if TYPE_CHECKING:
    # (set at run time by tensor.py, which imports this module)
    from uopkit.tensor.tensor import Tensor

# quantile's interpolations, as torch names them
_QUANTILE_MODES = ("linear", "lower", "higher", "midpoint", "nearest")
# quantile's q: one level, or a 1-D list or tensor of them
Levels: TypeAlias = "float | Sequence[float] | Tensor"


class QuantileMixin:
    __slots__ = ()

    @autocast_op(FLOAT32)
    def quantile(
        self, q: Levels, dim: int | None = None, keepdim: bool = False, interpolation: str = "linear"
    ) -> Tensor:
        """The q-th quantiles along `dim` (of all elements when None), as torch.quantile: q a number in [0, 1], or a
        1-D list or tensor of them (a new first axis of the result, one per q; a tensor q is read back to check it).
        A quantile falls at position q (n - 1) of the sorted values; between two of them `interpolation` takes the
        "lower", the "higher", the "nearest" (a tie to the even position), their "midpoint" or the "linear"
        interpolation (torch's two-sided lerp, so infinities give torch's NaN and inf). A NaN makes every quantile of
        its row NaN (`nanquantile` leaves them out).

        >>> Tensor([1.0, 2.0, 3.0, 4.0]).quantile(0.5).tolist()
        2.5
        >>> Tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]).quantile([0.0, 0.25], dim=1, interpolation="lower").tolist()
        [[0.0, 3.0], [0.0, 3.0]]
        """
        return self._quantile(q, dim, keepdim, interpolation, "quantile")

    @autocast_op(FLOAT32)
    def nanquantile(
        self, q: Levels, dim: int | None = None, keepdim: bool = False, interpolation: str = "linear"
    ) -> Tensor:
        """The q-th quantiles of the non-NaN values along `dim`, as torch.nanquantile: as `quantile`, a row's
        positions being q (n - 1) for its own count n of non-NaN values (computed on the device from that count, so
        the values are found by a gather rather than a slice); NaN where every value of the row is NaN.

        >>> Tensor([1.0, float("nan"), 3.0, 7.0]).nanquantile(0.25).tolist()
        2.0
        """
        return self._quantile(q, dim, keepdim, interpolation, "nanquantile")

    def _quantile(self, q: Any, dim: int | None, keepdim: bool, interpolation: str, op: str) -> Tensor:
        if interpolation not in _QUANTILE_MODES:
            raise ArgumentError(
                f"{op}: interpolation takes {', '.join(map(repr, _QUANTILE_MODES))}, got {interpolation!r}"
            )
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"{op}: needs a floating-point input, got {self.dtype}; cast with .float() first")
        levels, one_level = _quantile_levels(q, op)
        if self.numel() == 0:
            raise EmptyReduceError(f"{op}: the input (shape {self.shape}) is empty, it has no quantiles")
        if dim is not None:
            axis = _normalize_axis(dim, max(self.ndim, 1), op, self.shape)
        over_all = dim is None or self.ndim == 0
        x = self.reshape(-1) if over_all else self._move_to_end(axis)
        ordered = x.sort(-1)[0]
        if op == "nanquantile":
            # the NaNs sort last: each row's quantiles are those of its first `count` sorted values
            out = ordered._interpolated_at(levels, interpolation, x._count_not_nan())
        else:
            out = ordered._interpolated_at(levels, interpolation)
            # torch takes the last sorted value (a NaN) where the row has one: the gradient goes there
            last = ordered._slice_axis(ordered.ndim - 1, ordered.shape[-1] - 1, ordered.shape[-1])
            out = x.isnan().any(-1, keepdim=True).where(last, out)
        # (..., q) -> (q, ...), the reduced axis kept as size 1 where asked
        out = out._move_from_end(0)
        if keepdim:
            out = out.reshape(len(levels), *((1,) * self.ndim)) if over_all else out.unsqueeze(axis + 1)
        return out[0] if one_level else out

    def _interpolated_at(self, levels: np.ndarray, interpolation: str, count: Tensor | None = None) -> Tensor:
        # the quantiles of sorted rows (the last axis) at each level, as a last axis of len(levels). Over the first
        # `count` values of each row where given (a (..., 1) int tensor): the positions are then tensors, found on
        # the device, else host arrays (the values then taken by slices where they can be)
        last = self.ndim - 1
        # positions computed in the value's dtype, as torch does (at least float32: half floats can't count far)
        rank_dtype = dtypes.float64 if self.dtype == dtypes.float64 else dtypes.float32
        if count is None:
            host_dtype = np.float64 if rank_dtype == dtypes.float64 else np.float32
            ranks: Any = levels.astype(host_dtype) * host_dtype(self.shape[-1] - 1)
            rounding: dict[str, Callable] = {"lower": np.floor, "higher": np.ceil, "nearest": np.round}

            def at(positions: Any) -> Tensor:
                return self._take(last, positions.astype(np.int64))

            def on_device(a: Any) -> Tensor:
                return Tensor(a, device=self.device)
        else:
            # an all-NaN row (count 0) takes position 0, its first NaN, as torch
            ranks = Tensor(levels, device=self.device, dtype=rank_dtype) * (count - 1).maximum(0).cast(rank_dtype)
            rounding = {"lower": Tensor.floor, "higher": Tensor.ceil, "nearest": Tensor.round}

            def at(positions: Any) -> Tensor:
                return self._gather_checked(last, positions.cast(dtypes.int32))

            def on_device(a: Any) -> Tensor:
                return a

        if interpolation != "linear" and interpolation != "midpoint":
            return at(rounding[interpolation](ranks))
        floor = rounding["lower"]
        below, above = at(floor(ranks)), at(rounding["higher"](ranks))
        weight = ranks - floor(ranks) if interpolation == "linear" else ranks * 0 + 0.5
        w = on_device(weight).cast(self.dtype)
        rest = on_device(1 - weight).cast(self.dtype)
        # torch's lerp: from the nearer end (exact at both ends; with an infinite end, inf or NaN as torch's)
        return on_device(weight < 0.5).where(below + w * (above - below), above - (above - below) * rest)


def _quantile_levels(q: Any, op: str) -> tuple[np.ndarray, bool]:
    """quantile's (or nanquantile's, `op`) q as a 1-D float64 array, and whether it was one number (a 0-d tensor is
    one too)."""
    if isinstance(q, Tensor):
        if q.ndim > 1:
            raise ShapeError(f"{op}: q must be a number or a 1-D tensor, got shape {q.shape}")
        levels, one = q.numpy().astype(np.float64).reshape(-1), q.ndim == 0
    elif isinstance(q, (list, tuple, np.ndarray)):
        levels = np.asarray(q, dtype=np.float64)
        if levels.ndim != 1:
            raise ShapeError(f"{op}: q must be a number or a 1-D list, got shape {levels.shape}")
        one = False
    else:
        levels, one = np.array([float(q)]), True
    outside = levels[~((levels >= 0) & (levels <= 1))]
    if outside.size:
        raise ArgumentError(f"{op}: q must be in [0, 1], got {outside[0]}")
    return levels, one
