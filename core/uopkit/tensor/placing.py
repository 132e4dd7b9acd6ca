"""Out-of-place writes of values into positions of a tensor, PyTorch's *_scatter family and its put-like methods
(diagonal_scatter, select_scatter, slice_scatter, index_put, masked_scatter, put, index_add, index_copy, index_fill,
index_reduce), with their in-place variants, and the searches for positions in sorted rows (searchsorted, bucketize);
compared with torch in tests/test_placing.py, tests/test_indexing.py and tests/test_segments.py.

Each is a lazy graph built from the other mixins' public methods (where, pad, scatter_reduce, indexing), so its
gradient is theirs: the written positions send the gradient to the values, the others to the tensor. The in-place
variants write through `_update_in_place`, with the view and copy-on-write semantics of the other in-place ops."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import UnsupportedDTypeError, dtypes, least_upper_dtype
from uopkit.tensor import segments
from uopkit.tensor.index_errors import described
from uopkit.tensor.support import (
    ArgumentError,
    DTypeError,
    IndexTensorError,
    ShapeError,
    _broadcast_shape,
    _check_same_device,
    _check_stored_scalar,
    _check_values_in,
    _normalize_axis,
)
from uopkit.tensor.unread import with_zero_gradient_to

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

_INDEX_REDUCTIONS = ("prod", "mean", "amax", "amin")
# segment_reduce's reductions and the scatter_reduce each is (a mean: the sum, then divided by the length)
_SEGMENT_REDUCTIONS = {
    "sum": "sum",
    "mean": "sum",
    "prod": "prod",
    "max": "amax",
    "amax": "amax",
    "min": "amin",
    "amin": "amin",
}
# sorted entries x values from which searchsorted halves its way down each row instead of counting the whole row
SEARCH_BY_HALVING = 1 << 24


def _need_tensor(op: str, name: str, x: Any) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor, got {type(x).__name__} (as PyTorch); wrap it in Tensor(...)")


def _need_same_dtype(op: str, name: str, x: Tensor, dt: Any) -> Tensor:
    # torch refuses another dtype here (its *_scatter ops and setitem cast instead). An int source that widens into the
    # tensor's int dtype without loss is cast: `Tensor([7, 9])` is int32 here where torch's literal is int64, so
    # `long_t.index_put_((i,), torch.tensor([7, 9]))` ported from torch has an int32 source
    if x.dtype != dt and dtypes.is_int(x.dtype) and dtypes.is_int(dt) and least_upper_dtype(x.dtype, dt) == dt:
        return x.cast(dt)
    if x.dtype != dt:
        raise DTypeError(
            f"{op}: {name} is {x.dtype} but the tensor is {dt}; they must have the same dtype (as PyTorch), "
            f"cast {name} with .cast({dt})"
        )
    return x


def _need_shape(op: str, name: str, x: Tensor, want: tuple[int, ...], what: str) -> None:
    if x.shape != want:
        raise ShapeError(f"{op}: {name} has shape {x.shape}, but {what} it fills has shape {want}; give it that shape")


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    # whether `shape` broadcasts to exactly `target` (no new leading axes of size 1 beyond it)
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(shape, target[len(target) - len(shape) :], strict=True))


def _spread_along(t: Tensor, dim: int, first: int, step: int, size: int) -> Tensor:
    # t's slices along `dim` at first, first + step, ... of an axis `size` long, zeros (False) between and around
    count = t.shape[dim]
    if step > 1 and count > 0:
        # each slice followed by step - 1 zero slices, the ones after the last cut off
        gaps = tuple((0, step - 1) if d == dim + 1 else (0, 0) for d in range(t.ndim + 1))
        t = t.unsqueeze(dim + 1).pad(gaps)
        t = t.reshape(t.shape[:dim] + (count * step,) + t.shape[dim + 2 :])._slice_axis(dim, 0, (count - 1) * step + 1)
    return t.pad(tuple((first, size - first - t.shape[dim]) if d == dim else (0, 0) for d in range(t.ndim)))


class PlacingMixin:
    __slots__ = ()

    # ---- the *_scatter family: a copy of self with src in a view of it (a where over a padded src)

    def slice_scatter(
        self, src: Tensor, dim: int = 0, start: int | None = None, end: int | None = None, step: int = 1
    ) -> Tensor:
        """A copy of self with `src` written into the slice start:end:step along `dim` (torch.slice_scatter): src has
        that slice's shape; it is cast to self's dtype. Bounds are clamped as a Python slice's; step must be positive.

        >>> Tensor.zeros(2, 4).slice_scatter(Tensor.ones(2, 2), 1, 0, None, 2).tolist()
        [[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0]]
        """
        _need_tensor("slice_scatter", "src", src)
        dim = _normalize_axis(dim, self.ndim, "slice_scatter", self.shape, scalar=False)
        if step <= 0:
            raise ArgumentError(f"slice_scatter: slice step must be positive, got {step} (as PyTorch)")
        size = self.shape[dim]
        first, stop, _ = slice(start, end, step).indices(size)
        count = len(range(first, stop, step))
        want = self.shape[:dim] + (count,) + self.shape[dim + 1 :]
        _need_shape("slice_scatter", "src", src, want, f"the slice {first}:{stop}:{step} of dim {dim} of {self.shape}")
        _check_same_device("slice_scatter", [self, src])
        inside = Tensor.full(src.shape, True, dtype=dtypes.bool, device=self.device)
        placed = _spread_along(src.cast(self.dtype), dim, first, step, size)
        return _spread_along(inside, dim, first, step, size).where(placed, self)

    def select_scatter(self, src: Tensor, dim: int, index: int) -> Tensor:
        """A copy of self with `src` written into self.select(dim, index) (torch.select_scatter): src has self's shape
        without `dim`; a negative index counts from the end.

        >>> Tensor.zeros(2, 3).select_scatter(Tensor([1.0, 2.0]), 1, -1).tolist()
        [[0.0, 0.0, 1.0], [0.0, 0.0, 2.0]]
        """
        _need_tensor("select_scatter", "src", src)
        dim = _normalize_axis(dim, self.ndim, "select_scatter", self.shape, scalar=False)
        size = self.shape[dim]
        if not -size <= index < size:
            raise IndexError(
                f"select_scatter: index {index} is out of range for dim {dim} of size {size} (shape {self.shape})"
            )
        want = self.shape[:dim] + self.shape[dim + 1 :]
        _need_shape("select_scatter", "src", src, want, f"the selection at index {index} of dim {dim} of {self.shape}")
        index %= size
        return self.slice_scatter(src.unsqueeze(dim), dim, index, index + 1)

    def diagonal_scatter(self, src: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """A copy of self with `src` written into self.diagonal(offset, dim1, dim2) (torch.diagonal_scatter): src has
        that diagonal's shape (the other dims, then the diagonal's length); it is cast to self's dtype.

        >>> Tensor.zeros(2, 3).diagonal_scatter(Tensor([1.0, 2.0]), 1).tolist()
        [[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]]
        """
        _need_tensor("diagonal_scatter", "src", src)
        d1 = _normalize_axis(dim1, self.ndim, "diagonal_scatter", self.shape)
        d2 = _normalize_axis(dim2, self.ndim, "diagonal_scatter", self.shape)
        if d1 == d2:
            raise ShapeError(f"diagonal_scatter: dim1 and dim2 are the same axis ({dim1}, {dim2}) of {self.shape}")
        want = self.diagonal(offset, d1, d2).shape
        _need_shape("diagonal_scatter", "src", src, want, f"the diagonal {offset} of dims {d1}, {d2} of {self.shape}")
        _check_same_device("diagonal_scatter", [self, src])
        # the two dims last: src's diagonal matrices, padded into each (rows, cols) matrix where the diagonal starts
        order = [d for d in range(self.ndim) if d not in (d1, d2)] + [d1, d2]
        x = self.permute(order)
        rows, cols = x.shape[-2:]
        n = src.shape[-1]
        first_row, first_col = min(max(-offset, 0), rows), min(max(offset, 0), cols)
        corner = ((first_row, rows - first_row - n), (first_col, cols - first_col - n))
        on_diagonal = Tensor.eye(n, dtype=dtypes.bool, device=self.device).pad(corner)
        placed = src.cast(self.dtype).diag_embed().pad(((0, 0),) * (x.ndim - 2) + corner)
        return on_diagonal.where(placed, x).permute(np.argsort(order).tolist())

    # ---- searchsorted and bucketize: where values go in sorted rows

    def searchsorted(
        self,
        values: Tensor | float,
        right: bool = False,
        *,
        side: str | None = None,
        sorter: Tensor | None = None,
        out_int32: bool = False,
    ) -> Tensor:
        """For each of `values`, the index at which it would be inserted into self's sorted last axis to keep it
        sorted (the first such index, the last with `right` or side="right"), as torch.searchsorted; self 1-D, or its
        leading axes matching values' (one sorted row per row of values); `sorter`: the indices that sort self's last
        axis (argsort's), for an unsorted self. int32 with or without `out_int32` (torch's default is int64).

        >>> Tensor([1.0, 3.0, 5.0]).searchsorted(Tensor([0.0, 3.0, 6.0])).tolist()
        [0, 1, 3]
        """
        if side is not None:
            if side not in ("left", "right"):
                raise ArgumentError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
            if side == "left" and right:
                raise ArgumentError("searchsorted: side='left' and right=True ask for opposite sides; give one")
            right = side == "right"
        if not isinstance(values, Tensor):
            values = Tensor(values, device=self.device, dtype=self.dtype)
        if self.ndim == 0:
            raise ShapeError("searchsorted: the sorted sequence must have at least one axis")
        if sorter is not None:
            if sorter.shape != self.shape:
                raise ShapeError(f"searchsorted: sorter {sorter.shape} must have the sequence's shape {self.shape}")
            return self.gather(-1, sorter).searchsorted(values, right)
        if self.ndim > 1 and (values.ndim != self.ndim or values.shape[:-1] != self.shape[:-1]):
            raise ShapeError(
                f"searchsorted: values {values.shape} must match the sorted sequence {self.shape} but for the last axis"
            )
        m = self.shape[-1]
        if m * values.numel() >= SEARCH_BY_HALVING:
            # a binary search, PyTorch's step for step: log2(m) gathers instead of m compares per value
            if self.ndim == 1:
                found = segments.binary_search(self.reshape(1, m), values.reshape(1, -1), right)
            else:
                found = segments.binary_search(self.reshape(-1, m), values.reshape(-1, values.shape[-1]), right)
            return found.reshape(values.shape)
        # how many of the row's entries sort before each value, counted (a NaN value goes past them all, as PyTorch's
        # search)
        seq = self.unsqueeze(-2) if self.ndim > 1 else self.reshape((1,) * values.ndim + self.shape)
        v = values.unsqueeze(-1)
        after = (seq > v) if right else (seq >= v)
        if not dtypes.is_float(self.dtype):
            before = after.logical_not() | v.isnan() if dtypes.is_float(values.dtype) else after.logical_not()
            return before.cast(dtypes.int32).sum(-1)
        # a row sorted as torch.sort leaves it ends in its NaNs, which PyTorch's search takes as "go right": it
        # answers the count a of numbers before the value, unless its probes reach the NaNs first, and then m. While
        # every probe goes right it probes a fixed spine of positions (for m); the first spine probe at or past a
        # settles it: a number there (< the count b of numbers) means a, a NaN means m
        # (a NaN entry is never "after" the value: counted with the numbers before it, then taken off)
        nans = (self if self.ndim > 1 else self.reshape((1,) * (values.ndim - 1) + (m,))).isnan().cast(dtypes.int32)
        nans = nans.sum(-1, keepdim=True) if values.ndim else nans.sum()
        a = after.logical_not().cast(dtypes.int32).sum(-1) - nans
        b = m - nans
        first_probe: Tensor | int = m
        for p in reversed(_search_spine(m)):
            first_probe = (a <= p).where(p, first_probe)
        return (first_probe < b).where(a, m)

    def bucketize(self, boundaries: Tensor, right: bool = False, *, out_int32: bool = False) -> Tensor:
        """For each element, the index of its bucket among the sorted 1-D `boundaries`, as torch.bucketize: i with
        boundaries[i-1] < x <= boundaries[i] (boundaries[i-1] <= x < boundaries[i] with `right`). int32 with or
        without `out_int32` (torch's default is int64).

        >>> Tensor([0.5, 1.0, 7.0]).bucketize(Tensor([1.0, 5.0])).tolist()
        [0, 0, 2]
        """
        if boundaries.ndim != 1:
            raise ShapeError(f"bucketize: boundaries must be 1-D, got shape {boundaries.shape}")
        return boundaries.searchsorted(self, right=right)

    # ---- index_put and put: writes at positions found by indexing a tensor of flat positions

    def index_put(self, indices: tuple[Tensor, ...], values: Tensor, accumulate: bool = False) -> Tensor:
        """A copy of self with `values` (broadcast, self's dtype) written at self[indices], as torch.index_put:
        `indices` is a tuple of int or bool index tensors, as in `t[indices] = values`. A position indexed more than
        once keeps the last write, or with `accumulate` the sum of self's value and all of them.

        >>> Tensor.zeros(3).index_put((Tensor([0, 2, 0]),), Tensor([1.0, 2.0, 3.0]), accumulate=True).tolist()
        [4.0, 0.0, 2.0]
        """
        if not isinstance(indices, (tuple, list)):
            raise TypeError(
                f"index_put: indices must be a tuple of index tensors, got {type(indices).__name__}; wrap a single "
                "index tensor as (index,)"
            )
        if not indices:
            raise ArgumentError("index_put: indices is empty; give one index tensor per indexed dim")
        for i, index in enumerate(indices):
            _need_tensor("index_put", f"indices[{i}]", index)
        _need_tensor("index_put", "values", values)
        values = _need_same_dtype("index_put", "values", values, self.dtype)
        _check_same_device("index_put", [self, values, *indices])
        positions = self._flat_positions(tuple(indices), "index_put")
        if not _broadcasts_to(values.shape, positions.shape):
            raise ShapeError(
                f"index_put: values of shape {values.shape} can't be broadcast to the indexed shape {positions.shape} "
                f"(self {self.shape})"
            )
        return self._placed_at(positions, values, accumulate)

    def index_put_(self, indices: tuple[Tensor, ...], values: Tensor, accumulate: bool = False) -> Tensor:
        """`index_put` in place (torch.Tensor.index_put_).

        >>> t = Tensor([1, 2, 3]); t.index_put_((Tensor([True, False, True]),), Tensor(0)).tolist()
        [0, 2, 0]
        """
        # (the elements written: True put where the values go)
        picked = lambda: self.zeros_like(dtype=dtypes.bool).index_put(indices, Tensor(True, device=self.device))  # noqa: E731
        op = "index_put_(accumulate=True)" if accumulate else "index_put_"
        return self._update_in_place(lambda: self.index_put(indices, values, accumulate), op, picked)

    def put(self, index: Tensor, source: Tensor, accumulate: bool = False) -> Tensor:
        """A copy of self with source's elements written at `index` into self read as a flat array (torch.put):
        index and source have as many elements; a negative index counts from the end. A position indexed more than
        once keeps the last write, or with `accumulate` the sum of self's value and all of them.

        >>> Tensor([[1, 2], [3, 4]]).put(Tensor([0, -1]), Tensor([9, 8])).tolist()
        [[9, 2], [3, 8]]
        """
        _need_tensor("put", "index", index)
        _need_tensor("put", "source", source)
        if not dtypes.is_int(index.dtype):
            raise DTypeError(f"put: index must be an integer tensor, got {index.dtype}")
        source = _need_same_dtype("put", "source", source, self.dtype)
        if index.numel() != source.numel():
            raise IndexError(
                f"put: index and source must have as many elements, got {index.numel()} indices (shape {index.shape}) "
                f"and {source.numel()} values (shape {source.shape})"
            )
        _check_same_device("put", [self, index, source])
        n = self.numel()
        if n == 0 and index.numel():
            raise IndexError(f"put: can't put elements into an empty tensor (shape {self.shape})")
        _check_values_in(
            index,
            -n,
            n,
            lambda bad: (
                f"put: index {bad} is out of range for a tensor of {n} elements (shape {self.shape}); put "
                f"indexes the flattened tensor, from {-n} to {n - 1}"
            ),
        )
        # (checked in range: a signed index wide enough to count from the end)
        index = index.cast(dtypes.int64 if n > dtypes.max(dtypes.int32) else dtypes.int32)
        positions = (index < 0).where(index + n, index)
        return self._placed_at(positions, source.reshape(index.shape), accumulate)

    def put_(self, index: Tensor, source: Tensor, accumulate: bool = False) -> Tensor:
        """`put` in place (torch.Tensor.put_).

        >>> t = Tensor.zeros(2, 2); t.put_(Tensor([1, 1]), Tensor([2.0, 3.0]), accumulate=True).tolist()
        [[0.0, 5.0], [0.0, 0.0]]
        """
        return self._update_in_place(lambda: self.put(index, source, accumulate), "put_")

    def _placed_at(self, positions: Tensor, values: Tensor, accumulate: bool) -> Tensor:
        # self with values (broadcast to positions' shape) written, or added, at the flat positions (in range)
        if positions.numel() == 0:
            # (a copy: the result is a tensor of its own, which an in-place write into must not reach self)
            return self.clone()
        if not accumulate:
            return self._overwritten_at(positions, values.cast(self.dtype))
        spread = values.cast(self.dtype)._broadcast_to(positions.shape).reshape(-1)
        return self.reshape(-1).scatter_reduce(0, positions.reshape(-1), spread, "sum").reshape(self.shape)

    # ---- masked_scatter: the mask read back (its number of True positions decides how much of source is read)

    def masked_scatter(self, mask: Tensor, source: Tensor) -> Tensor:
        """A copy of self with the True positions of `mask` (broadcast with self) filled, in row-major order, with
        source's first elements (torch.masked_scatter); source has at least as many. The mask is read back to the
        host, as masked_select's.

        >>> Tensor.zeros(2, 2).masked_scatter(Tensor([[True, False], [True, True]]), Tensor([1.0, 2.0, 3.0])).tolist()
        [[1.0, 0.0], [2.0, 3.0]]
        """
        _need_tensor("masked_scatter", "mask", mask)
        _need_tensor("masked_scatter", "source", source)
        if mask.dtype != dtypes.bool:
            raise DTypeError(f"masked_scatter: mask must be a bool tensor, got {mask.dtype}; compare it (m != 0)")
        source = _need_same_dtype("masked_scatter", "source", source, self.dtype)
        _check_same_device("masked_scatter", [self, mask, source])
        shape = _broadcast_shape(self.shape, mask.shape, "masked_scatter")
        mask = mask._broadcast_to(shape)
        hits = mask.numpy().reshape(-1)
        count = int(hits.sum())
        if count > source.numel():
            raise ShapeError(
                f"masked_scatter: the mask (shape {shape}) has {count} True positions but source (shape "
                f"{source.shape}) only {source.numel()} elements; give source at least {count}"
            )
        if count == 0:
            # (source is read nowhere; torch still gives it a gradient of zeros)
            return with_zero_gradient_to(self._broadcast_to(shape).clone(), source)
        # each position reads source at its rank among the True positions (the first one's before the first True)
        rank = np.maximum(np.cumsum(hits) - 1, 0)
        picked = source.reshape(-1)._take(0, rank).reshape(shape)
        return mask.where(picked, self)

    def masked_scatter_(self, mask: Tensor, source: Tensor) -> Tensor:
        """`masked_scatter` in place (torch.Tensor.masked_scatter_); the mask broadcasts to self's shape.

        >>> t = Tensor([0, 0, 0]); t.masked_scatter_(Tensor([False, True, True]), Tensor([7, 8, 9])).tolist()
        [0, 7, 8]
        """
        if isinstance(mask, Tensor) and not _broadcasts_to(mask.shape, self.shape):
            raise ShapeError(
                f"masked_scatter_: mask of shape {mask.shape} doesn't broadcast to the tensor's shape {self.shape}; "
                "an in-place op can't change the tensor's shape"
            )
        return self._update_in_place(lambda: self.masked_scatter(mask, source), "masked_scatter_")

    # ---- index_add, index_copy, index_fill and index_reduce: slices of self picked by a 1-D index along one dim

    def _index_spread(self, dim: int, index: Tensor, source: Tensor, op: str) -> tuple[int, Tensor]:
        # (dim, index spread over source) for index_add and index_copy: source's slice i goes to self's slice
        # index[i], a scatter along dim with the same index at every position of the slice
        dim = _normalize_axis(dim, self.ndim, op, self.shape)
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype) or index.ndim > 1:
            raise IndexTensorError(f"{op}: index must be a 0-d or 1-D integer tensor, got {described(index)}")
        want = self.shape[:dim] + (index.numel(),) + self.shape[dim + 1 :]
        if not isinstance(source, Tensor) or source.shape != want:
            got = source.shape if isinstance(source, Tensor) else type(source).__name__
            raise ShapeError(f"{op}: source shape {got} should be {want} (self {self.shape}, dim {dim})")
        return dim, index.reshape(tuple(-1 if d == dim else 1 for d in range(self.ndim)))._broadcast_to(want)

    def index_add(self, dim: int, index: Tensor, source: Tensor, alpha: float = 1) -> Tensor:
        """A copy of self with alpha * source's slice i (along dim) added to self's slice index[i], repeated indices
        summed, as torch.index_add (index 1-D, no negative indices; source has self's shape with index's length at
        dim).

        >>> Tensor.zeros(3, 2).index_add(0, Tensor([2, 0, 2]), Tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])).tolist()
        [[3.0, 4.0], [0.0, 0.0], [6.0, 8.0]]
        """
        dim, spread = self._index_spread(dim, index, source, "index_add")
        return self._scatter_reduce(dim, spread, source if alpha == 1 else source * alpha, "sum", True, "index_add")

    def index_copy(self, dim: int, index: Tensor, source: Tensor) -> Tensor:
        """A copy of self with source's slice i (along dim) written at self's slice index[i] (torch.index_copy; no
        negative indices; of repeated ones the last write wins).

        >>> Tensor.zeros(3, 2).index_copy(0, Tensor([2, 0]), Tensor([[1.0, 2.0], [3.0, 4.0]])).tolist()
        [[3.0, 4.0], [0.0, 0.0], [1.0, 2.0]]
        """
        dim, spread = self._index_spread(dim, index, source, "index_copy")
        return self._scatter_replacing(dim, spread, source.cast(self.dtype), "index_copy")

    def index_fill(self, dim: int, index: Tensor, value: Any) -> Tensor:
        """A copy of self with the slices `index` (along dim; negative ones count from the end) set to `value`, cast to
        self's dtype (torch.index_fill).

        >>> Tensor.zeros(2, 3).index_fill(1, Tensor([0, -1]), 5.0).tolist()
        [[5.0, 0.0, 5.0], [5.0, 0.0, 5.0]]
        """
        dim = _normalize_axis(dim, max(self.ndim, 1), "index_fill", self.shape)
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype) or index.ndim > 1:
            raise IndexTensorError(f"index_fill: index must be a 0-d or 1-D integer tensor, got {described(index)}")
        if isinstance(value, Tensor) and value.ndim != 0:
            raise ShapeError(f"index_fill: the value must be a number or a 0-d tensor, got shape {value.shape}")
        n = self.shape[dim] if self.ndim else 1
        self._check_index_range(index, n, dim, "index_fill")
        index = index.reshape(-1)
        hit = ((index < 0).where(index + n, index))._one_hot_along(n).any(0)
        hit = hit.reshape(tuple(n if d == dim else 1 for d in range(self.ndim)))
        if not isinstance(value, Tensor):
            _check_stored_scalar(value, self.dtype, "index_fill")
        fill = value if isinstance(value, Tensor) else Tensor(value, device=self.device)
        return hit.where(fill.cast(self.dtype), self)

    def index_fill_(self, dim: int, index: Tensor, value: Any) -> Tensor:
        """`index_fill` in place (torch.Tensor.index_fill_); through a view of an expand, every element of storage
        that a filled element shows takes the value, as PyTorch's.

        >>> t = Tensor.zeros(2, 2); t.index_fill_(1, Tensor([1]), 3.0).tolist()
        [[0.0, 3.0], [0.0, 3.0]]
        """
        picked = lambda: self.zeros_like(dtype=dtypes.bool).index_fill(dim, index, True)  # noqa: E731
        return self._update_in_place(lambda: self.index_fill(dim, index, value), "index_fill_", picked)

    # (index_reduce: index_add's reductions other than the sum)

    def index_reduce(self, dim: int, index: Tensor, source: Tensor, reduce: str, include_self: bool = True) -> Tensor:
        """A copy of self with source's slice i (along dim) combined into self's slice index[i] by `reduce`, "prod",
        "mean", "amax" or "amin" (torch.index_reduce): index is 1-D (no negative indices), source has self's shape
        with index's length at dim. Slices no index reaches keep self's; `include_self=False` leaves self's value out
        of the ones reached. An integer mean rounds down, as torch's.

        >>> Tensor([1.0, 2.0]).index_reduce(0, Tensor([0, 0, 1]), Tensor([3.0, 4.0, 5.0]), "prod").tolist()
        [12.0, 10.0]
        """
        if reduce not in _INDEX_REDUCTIONS:
            raise ArgumentError(f"index_reduce: reduce takes 'prod', 'mean', 'amax' or 'amin', got {reduce!r}")
        _need_tensor("index_reduce", "index", index)
        _need_tensor("index_reduce", "source", source)
        dim = _normalize_axis(dim, self.ndim, "index_reduce", self.shape)
        if not dtypes.is_int(index.dtype):
            raise DTypeError(f"index_reduce: index must be an integer tensor, got {index.dtype}")
        if index.ndim > 1:
            raise IndexError(f"index_reduce: index must be a 0-d or 1-D tensor, got shape {index.shape}")
        source = _need_same_dtype("index_reduce", "source", source, self.dtype)
        _check_same_device("index_reduce", [self, index, source])
        x, src = (self.reshape(1), source.reshape(-1)) if self.ndim == 0 else (self, source)
        want = x.shape[:dim] + (index.numel(),) + x.shape[dim + 1 :]
        if src.shape != want:
            raise ShapeError(
                f"index_reduce: source has shape {source.shape}, should be {want} (self's shape {self.shape} with the "
                f"{index.numel()} indices at dim {dim})"
            )
        self._check_index_range(index, x.shape[dim], dim, "index_reduce", negative=False)
        # the same index for every position of source's slice i: a scatter along dim
        spread = index.reshape(tuple(-1 if d == dim else 1 for d in range(x.ndim)))._broadcast_to(want)
        return x.scatter_reduce(dim, spread, src, reduce, include_self).reshape(self.shape)

    def index_reduce_(self, dim: int, index: Tensor, source: Tensor, reduce: str, include_self: bool = True) -> Tensor:
        """`index_reduce` in place (torch.Tensor.index_reduce_).

        >>> t = Tensor([5, 5]); t.index_reduce_(0, Tensor([1, 1]), Tensor([7, 2]), "amin", include_self=False).tolist()
        [5, 2]
        """
        return self._update_in_place(
            lambda: self.index_reduce(dim, index, source, reduce, include_self), "index_reduce_"
        )

    # (segment_reduce: runs of consecutive slices reduced, as torch_scatter's segment_csr)

    def segment_reduce(
        self,
        reduce: str,
        *,
        lengths: Tensor | None = None,
        indices: Tensor | None = None,
        offsets: Tensor | None = None,
        axis: int = 0,
        unsafe: bool = False,
        initial: float | None = None,
    ) -> Tensor:
        """self's slices along `axis` reduced in consecutive segments, as torch.segment_reduce (called as
        `Tensor.segment_reduce(data, ...)`): segment s is `lengths[..., s]` slices long, or runs from `offsets[..., s]`
        to `offsets[..., s + 1]`; lengths/offsets have self's shape before `axis` and a last axis of segments. `reduce`
        is "sum", "mean", "max", "min" or "prod" ("amax"/"amin" too). An empty segment gives `initial`, else the
        reduction's identity (NaN for "mean"); `initial` also takes part in every segment ("mean" divides by the
        segment's length only, as torch's). Without `unsafe`, the lengths are read back and checked (not negative,
        summing to self's size at axis); offsets must rise within 0..size. The gradient is scatter_reduce's (max/min
        share it among tied values).

        >>> Tensor.segment_reduce(Tensor([1.0, 5.0, 2.0, 3.0]), "max", lengths=Tensor([2, 0, 2])).tolist()
        [5.0, -inf, 3.0]
        """
        op = "segment_reduce"
        scatter_op = _SEGMENT_REDUCTIONS
        if reduce not in scatter_op:
            raise ArgumentError(
                f"{op}: reduce must be 'sum', 'mean', 'max', 'min' or 'prod' (or 'amax'/'amin'), got {reduce!r}"
            )
        if indices is not None and lengths is None and offsets is None:
            raise ArgumentError(
                f"{op}: reducing by indices is not supported (torch's neither): give lengths or offsets"
            )
        if lengths is None and offsets is None:
            raise ArgumentError(f"{op}: either lengths or offsets must be given")
        if not dtypes.is_float(self.dtype):
            raise UnsupportedDTypeError(
                f"{op}: data must be a float tensor, got {self.dtype} (as torch); cast with .float()"
            )
        given, name = (lengths, "lengths") if lengths is not None else (offsets, "offsets")
        _need_tensor(op, name, given)
        if not dtypes.is_int(given.dtype):
            raise UnsupportedDTypeError(f"{op}: {name} must be an integer tensor, got {given.dtype}")
        if self.ndim == 0:
            raise ShapeError(f"{op}: data must have at least one axis, got a 0-d tensor")
        axis = _normalize_axis(axis, self.ndim, op, self.shape)
        if given.ndim != axis + 1 or given.shape[:-1] != self.shape[:axis]:
            raise ShapeError(
                f"{op}: {name} of shape {given.shape} must have data's shape before axis {axis} ({self.shape[:axis]}) "
                f"and one last axis of segments (data's shape {self.shape})"
            )
        _check_same_device(op, [self, given])
        size = self.shape[axis]
        given = given.cast(dtypes.int32)
        if lengths is not None:
            zero = Tensor.zeros(*given.shape[:-1], 1, dtype=dtypes.int32, device=given.device)
            offsets = zero.cat(given.cumsum(-1), dim=-1)
        else:
            offsets = given
        if not unsafe:
            bounds = offsets.numpy()
            if lengths is not None and (given.numpy() < 0).any():
                raise ArgumentError(f"{op}: lengths must not be negative, got {given.numpy().tolist()}")
            if lengths is not None and (bounds[..., -1] != size).any():
                raise ArgumentError(
                    f"{op}: every row of lengths must sum to data's size {size} at axis {axis}, got sums "
                    f"{bounds[..., -1].tolist()} (pass unsafe=True to skip this check)"
                )
            if bounds.shape[-1] == 0 or (np.diff(bounds, axis=-1) < 0).any() or bounds.min() < 0 or bounds.max() > size:
                raise ArgumentError(
                    f"{op}: offsets must rise from 0..{size} (data's size at axis {axis}) with one more entry than "
                    f"segments, got {bounds.tolist()}"
                )
        segs = offsets.shape[-1] - 1
        # each slice's segment: the first whose end is past it; a slice before the first offset or past the last end
        # goes to an extra segment left out of the result
        position = Tensor.arange(size, dtype=dtypes.int32, device=self.device)
        position = position.reshape((1,) * axis + (size,))._broadcast_to(self.shape[:axis] + (size,))
        ends = offsets[..., 1:].contiguous()
        segment = ends.searchsorted(position, right=True) if segs else position.zeros_like()
        inside = (position >= offsets[..., :1]) & (segment < segs)
        segment = inside.where(segment, segs)
        index = segment.reshape(segment.shape + (1,) * (self.ndim - axis - 1))._broadcast_to(self.shape)
        start = 0.0 if reduce in ("sum", "mean") else 1.0 if reduce == "prod" else math.inf
        start = -start if scatter_op[reduce] == "amax" else start
        base_shape = self.shape[:axis] + (segs + 1,) + self.shape[axis + 1 :]
        extreme = scatter_op[reduce] in ("amax", "amin")
        fill = start if initial is None or extreme else initial
        base = Tensor.full(base_shape, fill, dtype=self.dtype, device=self.device)
        out = base.scatter_reduce(axis, index, self, scatter_op[reduce], include_self=True).narrow(axis, 0, segs)
        if extreme and initial is not None:
            # (initial taken after: a value equal to it keeps the whole gradient, as torch's)
            kept = out >= initial if scatter_op[reduce] == "amax" else out <= initial
            return kept.where(out, initial)
        if reduce != "mean":
            return out
        count = (offsets[..., 1:] - offsets[..., :-1]).minimum(size).maximum(0)
        count = count.reshape(count.shape + (1,) * (self.ndim - axis - 1)).cast(self.dtype)
        if initial is None:
            return out / count
        return (count == 0).where(initial, out / count)


def _search_spine(m: int) -> list[int]:
    """The positions PyTorch's binary search over m entries probes while every probe sends it right (ascending)."""
    spine, lo = [], 0
    while lo < m:
        mid = lo + ((m - lo) >> 1)
        spine.append(mid)
        lo = mid + 1
    return spine
