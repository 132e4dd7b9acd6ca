"""Reductions, cumulative ops, gather/scatter and one-hot (a mixin of `Tensor`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from uopkit.dtype import DType, dtypes, least_upper_float, to_dtype
from uopkit.helpers import prod
from uopkit.tensor.autocast import FLOAT32, GPU, autocast_op
from uopkit.tensor.bitonic import bitonic_descending
from uopkit.tensor.blocksort import sort_positions_by_blocks
from uopkit.tensor.nan_bits import with_torch_nan
from uopkit.tensor.relaunch import relaunched
from uopkit.tensor.replay import replay_call
from uopkit.tensor.select import position_of_rank
from uopkit.tensor.support import (
    _CUM_BLOCK,
    ArgumentError,
    DTypeError,
    EmptyReduceError,
    UnsupportedDTypeError,
    _axis_for_dim,
    _check_values_in,
    _cum_acc_dtype,
    _dim_for_axis,
    _in_float64,
    _normalize_axis,
    _reshape_uop,
    _sum_acc_dtype,
    _with,
    _with_gradient_of,
    in_float32,
)
from uopkit.tensor.tournament import TOURNAMENT_MAX_K, TOURNAMENT_MIN_K, top_keys
from uopkit.tensor.unique import unique_of
from uopkit.tensor.wordsort import positions_by_words
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def _prod_acc_dtype(dt: DType) -> DType:
    # ints as sum accumulates them (a product of int8s doesn't wrap at 127); floats in their own dtype, as torch
    return dt if dtypes.is_float(dt) else _sum_acc_dtype(dt)


# products and extremes over masked prefixes (n^2 taps) up to this long; longer go in blocks of sqrt(n): 4096x256
# cumprod 25 -> 11 ms, cummax 48 -> 16 ms (a sum's padded windows vectorize, so it stays in one level to _CUM_BLOCK)
_CUM_BLOCK_MASKED = 64
# a long axis's blocks (one level of a running sum, product or extreme) are at most this long: b * n taps per level.
# 16, not 64: float32 cumsum of 256 rows of 50257 ~80 -> ~35 ms and of 2**20 ~8 -> ~5 ms (2 cores), for a little
# accuracy (largest error 4.3 -> 9.1 ulp of the running total on the rows)
_CUM_LEVEL_BLOCK = 16

# sort counts each element's rank against the others for rows up to this long (one kernel of n^2 compares); longer rows
# go through a bitonic network (log2(n) * (log2(n) + 1) / 2 stages, two a kernel). One thread, 128K elements in
# rows of 128 / 512 / 1024: by rank 3.3 / 15 / 45 ms, by the network (one stage a kernel then) 6.2 / 10 / 21 ms
SORT_BY_RANK = 256
# rows up to this long (and past SORT_BY_RANK) are sorted by ranks counted per block (`uopkit.tensor.blocksort`: seven
# kernels, n * B compares and ~2 n^2 / B * log2(B) loads); longer ones by the network. One thread, argsort of 8192
# floats: about even (blocks of 1024: ~3 ms of kernels, the network's 50 kernels ~5 ms of Python)
SORT_BY_BLOCKS = 8192

# (rows past SORT_BY_RANK of dtypes up to 32 bits: topk of TOURNAMENT_MIN_K to TOURNAMENT_MAX_K by a tournament of
# blocks, a few kernels whatever k is: `uopkit.tensor.tournament`) otherwise
# topk picks its k elements one round at a time (one pass over the row each) for k up to this, or up to half the
# stages of a sort of the row, and rows at least this many times k; more: a sort. 50 of a 50257-long row (a language
# model's sampling): 16 rounds of one pass each, where a sort was 136 stages (2 threads: 135 ms by sorting)
TOPK_BY_SELECTION = 16


# (module constants: on Python 3.11 every `Ops.X` is a lookup through EnumType's slow __getattr__ hook)
_REDUCE_NAMES = {Ops.ADD: "sum", Ops.MAX: "max", Ops.MUL: "prod"}
_REDUCE_AXIS = Ops.REDUCE_AXIS


def _correction(unbiased: Any, correction: float | None, op: str) -> float:
    # torch's unbiased (a bool: correction 1 or 0) or its keyword correction (default 1), not both
    if unbiased is None:
        return 1 if correction is None else correction
    if not isinstance(unbiased, (bool, np.bool_)) or correction is not None:
        raise TypeError(
            f"{op}: unbiased (the second argument, torch's) is a bool, given without correction=; got "
            f"unbiased={unbiased!r}, correction={correction!r} (keepdim is the third argument)"
        )
    return int(unbiased)


def _refuse_int_statistic(x: Tensor, op: str, fix: str = "cast with .float() first") -> None:
    # the mean and the moments of an int or bool tensor: torch has no float dtype to give them, and raises
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"{op}: needs a floating-point tensor, got {x.dtype} (as PyTorch); {fix}")


class ValuesIndices(NamedTuple):
    """(values, indices): what PyTorch's max(dim=), min(dim=), sort, topk, median(dim), cummax, ... return; unpacks
    as a pair, or by name."""

    values: Tensor
    indices: Tensor


class MinMax(NamedTuple):
    """(min, max): what PyTorch's aminmax returns; unpacks as a pair, or by name."""

    min: Tensor
    max: Tensor


class ReduceMixin:
    __slots__ = ()

    # ------------------------------------------------------------------------------------------------------------
    # reductions

    def _axes(self, axis: int | Sequence[int] | None, op: str) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        if type(axis) is int:
            # (one axis in range: the common case, without the general path's set and sort)
            ndim = len(self.shape)
            if -ndim <= axis < ndim:
                return (axis % ndim,)
        if type(axis) is tuple and all(type(a) is int for a in axis):
            # (a tuple of axes in range, none twice: the library's own reductions, `mean((2, 3))`)
            ndim = len(self.shape)
            if all(-ndim <= a < ndim for a in axis):
                axes = sorted({a % ndim for a in axis})
                if len(axes) == len(axis):
                    return tuple(axes)
        raw = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
        if any(isinstance(a, (bool, np.bool_)) for a in raw):
            # (a bool is no dim, as torch says: `x.sum(True)` meant keepdim=True, and summed axis 1 here)
            raise TypeError(
                f"{op}: dim must be an int or a sequence of ints, got a bool in {axis!r}; pass keepdim= by name"
            )
        axes = {_normalize_axis(int(a), self.ndim, op, self.shape) for a in raw}
        if len(axes) != len(raw):
            raise ArgumentError(f"{op}: an axis appears more than once in {tuple(raw)} (shape {self.shape})")
        return tuple(sorted(axes))

    def _reduce(
        self, op: Ops, axis: int | Sequence[int] | None = None, keepdim: bool = False, name: str | None = None
    ) -> Tensor:
        # `name`: the method called, for errors (any() is a MAX, but a bad axis is any's)
        name = name or _REDUCE_NAMES[op]
        if self.dtype == dtypes.bfloat16:
            return self.float()._reduce(op, axis, keepdim, name).cast(dtypes.bfloat16)
        axes = self._axes(axis, name)
        shape = self.shape
        if not shape or not axes:
            return self
        if keepdim:
            final = tuple([1 if i in axes else s for i, s in enumerate(shape)])
        else:
            final = tuple([s for i, s in enumerate(shape) if i not in axes])
        if 0 in shape:
            # a max over nothing has no value (as in PyTorch), except for bool: any() of nothing is False
            if op is Ops.MAX and self.dtype != dtypes.bool and any(shape[a] == 0 for a in axes):
                raise EmptyReduceError(f"{name}: reducing an empty axis has no identity (shape {shape}, axes {axes})")
            return self._reduce_empty(op, axes, final)
        real = tuple([a for a in axes if shape[a] != 1])
        if not real:
            return self.reshape(final)
        uop = self.uop
        # (the reduced node's shape keeps the axes as 1s: `final` has its elements, so the reshape needs no checks)
        return Tensor(_reshape_uop(UOp(_REDUCE_AXIS, uop.dtype, (uop,), (op, real)), final))

    def _reduce_empty(self, op: Ops, axes: tuple[int, ...], final: tuple[int, ...]) -> Tensor:
        # no element: the identity, still computed from self (padding each empty reduced axis to one identity
        # element) so that gradients flow back to it as zero-size zeros
        identity = 1 if op is Ops.MUL else 0
        pads = tuple((0, 1) if i in axes and s == 0 else (0, 0) for i, s in enumerate(self.shape))
        padded = (self - identity).pad(pads) + identity if identity else self.pad(pads)
        if padded.numel() == 0:
            # another axis is empty too: so is the result
            shrink = tuple((0, 1) if i in axes else (0, s) for i, s in enumerate(padded.shape))
            return padded.shrink(shrink).reshape(final)
        return padded._reduce(op, axes, keepdim=len(final) == self.ndim)

    def sum(
        self,
        axis: int | Sequence[int] | None = None,
        keepdim: bool = False,
        dtype: DType | None = None,
        *,
        dim: int | Sequence[int] | None = None,
        acc_dtype: DType | None = None,
    ) -> Tensor:
        """Sum over `axis` (all axes when None) into `dtype` (torch's: the values cast to it, then summed).

        Small ints and bool accumulate (and return) int32, unsigned ones uint32; half floats accumulate in float32
        and return their own dtype, as in tinygrad; `dtype=float16` casts, accumulates in float32 and rounds once,
        as torch. `acc_dtype` accumulates in exactly that dtype and returns it (a float16 accumulator, as a tensor
        core's).

        >>> Tensor([[1, 2], [3, 4]]).sum(axis=0).tolist()
        [4, 6]
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, None, "sum")
        if acc_dtype is not None:
            return self.cast(to_dtype(acc_dtype))._reduce(Ops.ADD, axis, keepdim)
        if dtype is not None and (want := to_dtype(dtype)) in dtypes.halves:
            # torch's `sum(dtype=float16)`: the values cast, the sum accumulated wider and rounded once (3000 ones
            # summed in float16 stop at 2048)
            return self.cast(want).sum(axis, keepdim)
        acc = to_dtype(dtype) if dtype is not None else _sum_acc_dtype(self.dtype)
        ret = self.cast(acc)._reduce(Ops.ADD, axis, keepdim)
        return ret.cast(self.dtype) if dtype is None and self.dtype in dtypes.halves else ret

    @autocast_op(FLOAT32)
    def prod(
        self,
        axis: int | Sequence[int] | None = None,
        keepdim: bool = False,
        dtype: DType | None = None,
        *,
        dim: int | Sequence[int] | None = None,
    ) -> Tensor:
        """Product over `axis`; small ints and bool accumulate (and return) int32, unsigned ones uint32, as sum's
        (torch gives int64 for every int); floats multiply in their own dtype (a float16 product overflows as torch's).

        >>> Tensor([[1, 2], [3, 4]]).prod(axis=1).tolist()
        [2, 12]
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, None, "prod")
        acc = to_dtype(dtype) if dtype is not None else _prod_acc_dtype(self.dtype)
        return self.cast(acc)._reduce(Ops.MUL, axis, keepdim)

    def max(
        self, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, axis: int | Sequence[int] | None = None
    ) -> Any:
        """Maximum, as torch's max: over every element with no dim; along one `dim` (by position or keyword),
        (values, indices) with the index of the first maximum (int32); with a tensor, the elementwise maximum. NaN wins.
        tinygrad's keyword `axis=` (an int or several) and a sequence of dims give the values only, as torch.amax.

        >>> Tensor([[1, 5], [3, 2]]).max(1).indices.tolist()
        [1, 0]
        >>> Tensor([[1, 5], [3, 2]]).max(axis=1).tolist()
        [5, 3]
        """
        return self._extreme("max", dim, keepdim, axis)

    def _extreme(self, op: str, dim: Any, keepdim: bool, axis: Any) -> Any:
        if axis is not None and dim is not None:
            raise TypeError(f"{op}: got both dim {dim!r} and axis={axis!r}; give one")
        if isinstance(dim, Tensor):
            return self.maximum(dim) if op == "max" else self.minimum(dim)
        if isinstance(dim, (int, np.integer)) and not isinstance(dim, (bool, np.bool_)):
            # torch's max(dim)/min(dim): the value at each index, so that the gradient goes to that element alone
            self._check_axis_not_empty(_normalize_axis(int(dim), self.ndim, op, self.shape), op)
            indices = self.argmax(int(dim), keepdim=True) if op == "max" else self.argmin(int(dim), keepdim=True)
            return self._values_at(indices, int(dim), keepdim, op)
        axis = dim if axis is None else axis
        # (also for bool, whose MAX is any(), which has an identity)
        self._refuse_empty_extreme(axis, op)
        value = (self if op == "max" else self._inverse())._reduce(Ops.MAX, axis, keepdim)
        value = value if op == "max" else value._inverse()
        # (over every element, torch's max()'s NaN: `uopkit.tensor.nan_bits`)
        return value if axis is not None else with_torch_nan(value, self)

    def _refuse_empty_extreme(self, axis: int | Sequence[int] | None, op: str) -> None:
        # a max or min over an empty axis has no value (as in PyTorch), named after the method called; so is an axis
        # out of range (amin's is min's otherwise)
        axes = self._axes(axis, op)
        if 0 in self.shape and any(self.shape[a] == 0 for a in axes):
            raise EmptyReduceError(f"{op}: reducing an empty axis has no identity (shape {self.shape}, dim {axis})")

    def _values_at(self, indices: Tensor, axis: Any, keepdim: bool, op: str) -> ValuesIndices:
        # torch's max(dim=)/min(dim=): the value at each index (kept dim), so that the gradient goes to that element
        # alone, as torch's (a plain max shares it among ties)
        if not dtypes.is_float(self.dtype) or self.ndim == 0:
            values = self._reduce(Ops.MAX, axis, keepdim) if op == "max" else self.min(axis=axis, keepdim=keepdim)
            return ValuesIndices(values, indices if keepdim else indices.reshape(values.shape))
        if self.dtype == dtypes.bfloat16:
            # (in float32, exact both ways: a sum over bfloat16's bits and casts is a real one, and 0.0 + -0.0 lost a
            # -0.0 maximum's sign)
            values, indices = self.float()._values_at(indices, axis, keepdim, op)
            return ValuesIndices(values.cast(dtypes.bfloat16), indices)
        axis = _normalize_axis(axis, self.ndim, op, self.shape)
        n = self.shape[axis]
        ar = Tensor.arange(n, device=self.device, dtype=indices.dtype)
        first = indices == ar.reshape(_with((1,) * self.ndim, axis, n))
        # the others add -0.0, which keeps a -0.0 maximum's sign (one term is nonzero: exact in any float dtype)
        values = first.where(self, -0.0)._reduce(Ops.ADD, axis, keepdim)
        return ValuesIndices(values, indices if keepdim else indices.squeeze(axis))

    def min(
        self, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, axis: int | Sequence[int] | None = None
    ) -> Any:
        """Minimum, as `max`: along one `dim` (by position or keyword) torch's (values, indices); tinygrad's keyword
        `axis=` gives the values only.

        >>> Tensor([[1, 5], [3, 2]]).min(1).values.tolist()
        [1, 2]
        >>> Tensor([[1, 5], [3, 2]]).min(axis=1).tolist()
        [1, 2]
        """
        return self._extreme("min", dim, keepdim, axis)

    def amax(
        self, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, axis: int | Sequence[int] | None = None
    ) -> Tensor:
        """max over `dim` (all axes when None or ()), as torch.amax; numpy's `axis=` too, as torch's.

        >>> Tensor([[1, 5], [3, 2]]).amax(1).tolist()
        [5, 3]
        """
        if axis is not None:
            dim = _axis_for_dim(dim, axis, "amax")
        self._refuse_empty_extreme(dim if dim != () else None, "amax")
        # (torch's NaN of amax: its own, positive)
        return with_torch_nan(self.max(axis=dim if dim not in (None, ()) else tuple(range(self.ndim)), keepdim=keepdim))

    def amin(
        self, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, axis: int | Sequence[int] | None = None
    ) -> Tensor:
        """min over `dim` (all axes when None or ()), as torch.amin; numpy's `axis=` too, as torch's."""
        if axis is not None:
            dim = _axis_for_dim(dim, axis, "amin")
        self._refuse_empty_extreme(dim if dim != () else None, "amin")
        return with_torch_nan(self.min(axis=dim if dim not in (None, ()) else tuple(range(self.ndim)), keepdim=keepdim))

    def _count(self, axis: int | Sequence[int] | None, op: str) -> int:
        # how many elements each result reduces; checks the axes, named after `op`, the method called
        axes = self._axes(axis, op)
        return prod(self.shape[a] for a in axes) if self.ndim else 1

    def mean(
        self,
        axis: int | Sequence[int] | None = None,
        keepdim: bool = False,
        *,
        dim: int | Sequence[int] | None = None,
        dtype: DType | None = None,
    ) -> Tensor:
        """Mean over `axis` of a float tensor; with `dtype` (a float), of the input cast to it first, as torch's (an int
        or bool tensor needs `dtype=`, or a cast, as torch's: a DTypeError otherwise).

        >>> Tensor([[1.0, 2.0], [3.0, 4.0]]).mean().tolist()
        2.5
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, None, "mean")
        if dtype is not None:
            dtype = to_dtype(dtype)
            if not dtypes.is_float(dtype):
                raise TypeError(f"mean: dtype must be a floating-point dtype, got {dtype}")
            return self.cast(dtype).mean(axis, keepdim)
        _refuse_int_statistic(self, "mean", "pass dtype=dtypes.float32 or cast with .float() first")
        # (counted first: a bad axis is mean's, not the sum's)
        count = self._count(axis, "mean")
        out_dt = least_upper_float(self.dtype)
        acc = dtypes.float32 if out_dt in dtypes.halves else out_dt
        total = self.sum(axis, keepdim, dtype=acc)
        # (divided, as torch's: a mean of whole counts, recall@k's hits.float().mean(), is the nearest float to the
        # fraction, where a product with 1 / count is one off at times: 197 / 200 -> 0.98499995)
        return (total / count if count else total * math.nan).cast(out_dt)

    @in_float32
    def var(
        self,
        axis: int | Sequence[int] | None = None,
        unbiased: bool | None = None,
        keepdim: bool = False,
        *,
        correction: float | None = None,
        dim: int | Sequence[int] | None = None,
    ) -> Tensor:
        """Variance over `axis`, dividing by N - correction (1 by default; torch's `unbiased` is correction 1 or 0),
        by torch's positions: `x.var(1, False, True)` is var(dim=1, unbiased=False, keepdim=True), `x.var(False)`
        unbiased=False over every element.

        >>> Tensor([1.0, 2.0, 3.0, 4.0]).var().tolist()
        1.6666666269302368
        """
        if isinstance(axis, bool):
            # torch's var(unbiased) form: a bool is never an axis
            axis, unbiased = None, axis
        if dim is not None:
            axis = _dim_for_axis(axis, dim, None, "var")
        _refuse_int_statistic(self, "var")
        correction = _correction(unbiased, correction, "var")
        # (counted first: a bad axis is var's, not the mean's)
        n = self._count(axis, "var")
        if _in_float64(self):
            # (float32's squares overflowed from 1.8e19 and its sums drift: float64, as PyTorch's accumulator)
            return self.cast(dtypes.float64).var(axis, keepdim=keepdim, correction=correction).cast(dtypes.float32)
        squares = (self - self.mean(axis, keepdim=True)).square()
        return squares.sum(axis, keepdim) / max(n - correction, 0)

    @in_float32
    def std(
        self,
        axis: int | Sequence[int] | None = None,
        unbiased: bool | None = None,
        keepdim: bool = False,
        *,
        correction: float | None = None,
        dim: int | Sequence[int] | None = None,
    ) -> Tensor:
        """Standard deviation over `axis`, dividing by N - correction (torch's positions and `unbiased`, as `var`).

        >>> Tensor([1.0, 3.0]).std().tolist()
        1.4142135381698608
        """
        _refuse_int_statistic(self, "std")
        self._check_axes_of_composite(axis, dim, "std")
        kw = {"keepdim": keepdim, "correction": correction, "dim": dim}
        if _in_float64(self):
            # (a variance past float32's range can have a root inside it: [1e30, -1e30, 3e30])
            return self.cast(dtypes.float64).std(axis, unbiased, **kw).float()
        variance = self.var(axis, unbiased, **kw)
        # a zero variance (a constant row) selected apart: the same value, and a zero gradient, as torch's, where the
        # square root's 1 / (2 * 0) would make it NaN
        return (variance == 0).where(0.0, variance).sqrt()

    def var_mean(
        self,
        axis: int | Sequence[int] | None = None,
        unbiased: bool | None = None,
        keepdim: bool = False,
        *,
        correction: float | None = None,
        dim: int | Sequence[int] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """(var, mean) over `axis` (torch's positions, as `var`)."""
        if isinstance(axis, bool):
            axis, unbiased = None, axis
        _refuse_int_statistic(self, "var_mean")
        self._check_axes_of_composite(axis, dim, "var_mean")
        var = self.var(axis, unbiased, keepdim, correction=correction, dim=dim)
        return var, self.mean(axis, keepdim, dim=dim)

    def std_mean(
        self,
        axis: int | Sequence[int] | None = None,
        unbiased: bool | None = None,
        keepdim: bool = False,
        *,
        correction: float | None = None,
        dim: int | Sequence[int] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """(std, mean) over `axis` (torch's positions, as `var`)."""
        if isinstance(axis, bool):
            axis, unbiased = None, axis
        _refuse_int_statistic(self, "std_mean")
        self._check_axes_of_composite(axis, dim, "std_mean")
        std = self.std(axis, unbiased, keepdim, correction=correction, dim=dim)
        return std, self.mean(axis, keepdim, dim=dim)

    def _check_axes_of_composite(self, axis: Any, dim: Any, op: str) -> None:
        # the axes of a method built on other reductions, checked under its own name (std(dim=3) said "sum")
        if not isinstance(axis, bool):
            self._axes(axis if dim is None else dim, op)

    def argmax(self, axis: int | None = None, keepdim: bool = False, *, dim: int | None = None) -> Tensor:
        """Index of the first maximum along `axis` (the flattened tensor's when None); int32, int64 past 2**31 places.

        >>> Tensor([[1, 5, 5], [7, 2, 3]]).argmax(axis=1).tolist()
        [1, 0]
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, None, "argmax")
        if axis is None:
            if self.numel() == 0:
                raise EmptyReduceError(f"argmax: the tensor of shape {self.shape} is empty, it has no maximum")
            ret = self.flatten().argmax(0)
            return ret.reshape((1,) * self.ndim) if keepdim else ret
        axis = _normalize_axis(axis, self.ndim, "argmax", self.shape)
        if self.ndim == 0:
            return Tensor(0, device=self.device, dtype=dtypes.int32)
        self._check_axis_not_empty(axis, "argmax")
        n = self.shape[axis]
        m = self.max(axis=axis, keepdim=True)
        hit = (self == m) | self.isnan() if dtypes.is_float(self.dtype) else self == m
        # the first hit has the largest count-down value n - i
        countdown = Tensor.arange(n, 0, -1, device=self.device).reshape(_with((1,) * self.ndim, axis, n))
        ret = n - hit.where(countdown, 0).max(axis=axis, keepdim=keepdim)
        return ret.cast(dtypes.positions(n))

    def _check_axis_not_empty(self, axis: int, op: str) -> None:
        # (an index of the first extreme value: none exists on an empty axis; torch raises too)
        if self.ndim and self.shape[axis] == 0:
            raise EmptyReduceError(f"{op}: axis {axis} of shape {self.shape} is empty, it has no extreme value")

    def argmin(self, axis: int | None = None, keepdim: bool = False, *, dim: int | None = None) -> Tensor:
        """Index (int32) of the first minimum along `axis`.

        >>> Tensor([3, 1, 1]).argmin().tolist()
        1
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, None, "argmin")
        if axis is not None:
            self._check_axis_not_empty(_normalize_axis(axis, self.ndim, "argmin", self.shape), "argmin")
        elif self.numel() == 0:
            raise EmptyReduceError(f"argmin: the tensor of shape {self.shape} is empty, it has no minimum")
        return self._inverse().argmax(axis, keepdim)

    def any(
        self, axis: int | Sequence[int] | None = None, keepdim: bool = False, *, dim: int | Sequence[int] | None = None
    ) -> Tensor:
        """Whether any value along `axis` is true.

        >>> Tensor([[0, 1], [0, 0]]).any(axis=1).tolist()
        [True, False]
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, None, "any")
        return self.cast(dtypes.bool)._reduce(Ops.MAX, axis, keepdim, "any")

    def all(
        self, axis: int | Sequence[int] | None = None, keepdim: bool = False, *, dim: int | Sequence[int] | None = None
    ) -> Tensor:
        """Whether every value along `axis` is true.

        >>> Tensor([[1, 1], [0, 1]]).all(axis=1).tolist()
        [True, False]
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, None, "all")
        return self.logical_not()._reduce(Ops.MAX, axis, keepdim, "all").logical_not()

    def count_nonzero(
        self, dim: int | Sequence[int] | None = None, *, axis: int | Sequence[int] | None = None
    ) -> Tensor:
        """The number of nonzero elements (NaN counts, -0.0 doesn't) along `dim` (an axis, several, or all when None
        or empty; numpy's `axis=` too), as torch.count_nonzero, but int32 (as sum of a bool tensor; torch gives
        int64).

        >>> Tensor([[0, 1], [2, 3]]).count_nonzero().item(), Tensor([[0, 1], [2, 3]]).count_nonzero(0).tolist()
        (3, [1, 2])
        """
        if axis is not None:
            dim = _axis_for_dim(dim, axis, "count_nonzero")
        dims = [] if dim is None else [dim] if isinstance(dim, (int, np.integer)) else list(dim)
        axes = [_normalize_axis(int(d), self.ndim, "count_nonzero", self.shape) for d in dims]
        if len(set(axes)) != len(axes):
            raise ArgumentError(f"count_nonzero: dim {tuple(dims)} names an axis twice (shape {self.shape})")
        return (self != 0).sum(axes or None)

    @autocast_op(FLOAT32, GPU)
    @in_float32
    def logsumexp(
        self, axis: int | Sequence[int] | None = None, keepdim: bool = False, *, dim: int | Sequence[int] | None = None
    ) -> Tensor:
        """log(sum(exp(x))) along `axis`, shifted by the max so it never overflows.

        >>> round(Tensor([0.0, 0.0]).logsumexp().item(), 5)
        0.69315
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, None, "logsumexp")
        x = self._float()
        if self.ndim and any(self.shape[a] == 0 for a in self._axes(axis, "logsumexp")):
            # nothing to shift by: log of an empty sum is -inf, as in PyTorch
            return x.exp().sum(axis, keepdim).log()
        m = x.max(axis=axis, keepdim=True)
        # an infinite max would give inf - inf: shift by 0 there instead
        m = m.isinf().where(0.0, m).detach()
        ret = (x - m).exp().sum(axis, keepdim=True).log() + m
        return ret if keepdim else ret.squeeze(self._axes(axis, "logsumexp"))

    # ---- order statistics: a sort along the axis (a long row's radix select), then the values at host-known positions

    def median(self, dim: int | None = None, keepdim: bool = False) -> Tensor | ValuesIndices:
        """The median, the lower of the two middle values for an even count, as torch.median: over all elements (dim
        None) one value, whose gradient is shared equally among the elements equal to it (torch's); along `dim`
        (values, indices), an index (int32) being the first position along `dim` that holds the median (torch picks
        one of the ties unspecified) and the gradient going there. A NaN makes the median NaN (its index the first
        NaN's); the median of no elements is NaN, along an empty `dim` an error.

        >>> Tensor([3.0, 1.0, 4.0, 2.0]).median().tolist()
        2.0
        >>> [t.tolist() for t in Tensor([[3, 1, 1], [5, 9, 2]]).median(1)]
        [[1, 5], [1, 0]]
        """
        return self._median(dim, keepdim, "median")

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
        """The k-th smallest value along `dim` (k counts from 1; NaN sorts last) and where it is, as torch.kthvalue:
        (values, indices), an index (int32) being the first position along `dim` that holds the value (torch picks
        one of the ties unspecified) and the gradient going there.

        >>> [t.tolist() for t in Tensor([[3, 1, 2], [5, 9, 2]]).kthvalue(2)]
        [[2, 5], [2, 0]]
        """
        if self.dtype == dtypes.bool:
            raise UnsupportedDTypeError("kthvalue: bool tensors have no order statistics; cast with .int() first")
        axis = _normalize_axis(dim, max(self.ndim, 1), "kthvalue", self.shape)
        n = self.shape[axis] if self.ndim else 1
        if n == 0:
            # torch's IndexError, whatever k is
            raise EmptyReduceError(f"kthvalue: axis {dim} of shape {self.shape} is empty, it has no k-th value")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
            raise ArgumentError(f"kthvalue: k must be an int in 1..{n} (axis {dim} of shape {self.shape}), got {k!r}")
        if self.ndim == 0:
            return ValuesIndices(self, Tensor(0, device=self.device, dtype=dtypes.int32))
        return relaunched(Tensor._kth_along, self, k, axis, keepdim)

    def _kth_along(self, k: int, axis: int, keepdim: bool) -> ValuesIndices:
        x = self._move_to_end(axis)
        kth = x._sorted_at(k - 1).detach()
        index = x._is_value(kth).argmax(-1, keepdim=True)
        # (the first hit is in range by construction: no bounds check, which would read it back)
        values = x._gather_checked(x.ndim - 1, index)
        values, index = values._move_from_end(axis), index._move_from_end(axis)
        return ValuesIndices(values, index) if keepdim else ValuesIndices(values.squeeze(axis), index.squeeze(axis))

    def nanmedian(self, dim: int | None = None, keepdim: bool = False) -> Tensor | ValuesIndices:
        """The median of the non-NaN values, as torch.nanmedian: as `median`, with the NaNs left out (the lower middle
        of the rest); NaN only where every value is NaN (the index then the first NaN's: torch's is unspecified). The
        middle's position differs per row and is found on the device from the row's count of non-NaN values.

        >>> Tensor([3.0, float("nan"), 1.0, 2.0]).nanmedian().tolist()
        2.0
        >>> [t.tolist() for t in Tensor([[1.0, float("nan"), 5.0], [float("nan")] * 3]).nanmedian(1)]
        [[1.0, nan], [0, 0]]
        """
        return self._median(dim, keepdim, "nanmedian")

    def _median(self, dim: int | None, keepdim: bool, op: str) -> Tensor | ValuesIndices:
        if self.dtype == dtypes.bool:
            raise UnsupportedDTypeError(f"{op}: bool tensors have no median; cast with .int() first")
        skip_nan = op == "nanmedian"
        if dim is None:
            return relaunched(Tensor._median_of_all, self, keepdim, op)
        axis = _normalize_axis(dim, max(self.ndim, 1), op, self.shape)
        if self.ndim == 0:
            return ValuesIndices(self, Tensor(0, device=self.device, dtype=dtypes.int32))
        if self.shape[axis] == 0:
            raise EmptyReduceError(f"{op}: axis {dim} of shape {self.shape} is empty, it has no median")
        return relaunched(Tensor._median_along, self, axis, keepdim, skip_nan)

    def _median_along(self, axis: int, keepdim: bool, skip_nan: bool) -> ValuesIndices:
        x = self._move_to_end(axis)
        index = x._is_value(x._lower_middle(skip_nan)).argmax(-1, keepdim=True)
        # (the first hit is in range by construction: no bounds check, which would read it back)
        values = x._gather_checked(x.ndim - 1, index)
        values, index = values._move_from_end(axis), index._move_from_end(axis)
        return ValuesIndices(values, index) if keepdim else ValuesIndices(values.squeeze(axis), index.squeeze(axis))

    def _median_of_all(self, keepdim: bool, op: str) -> Tensor:
        flat = self.reshape(-1)
        shape = (1,) * self.ndim if keepdim else ()
        if flat.numel() == 0:
            if not dtypes.is_float(self.dtype):
                raise EmptyReduceError(f"{op}: an empty {self.dtype} tensor has no median")
            return (flat.sum() * math.nan).reshape(shape)
        middle = flat._lower_middle(op == "nanmedian")
        if not dtypes.is_float(self.dtype):
            return middle.reshape(shape)
        # the gradient of the elements equal to the median (the NaNs when it is NaN) reduced by a min (shared equally
        # among ties: torch's), or by a max for +inf (a min's padding would tie); the value the sorted one but for inf
        # (a min's NaN comes negated: torch's median of a NaN is a positive NaN, nanmedian's of NaNs the element)
        hit, middle = flat._is_value(middle), middle.reshape(())
        out = (middle == math.inf).where(hit.where(flat, -math.inf).max(), hit.where(flat, math.inf).min())
        return out.isinf().where(out, _with_gradient_of(middle, out)).reshape(shape)

    def _lower_middle(self, skip_nan: bool = False) -> Tensor:
        # the lower median of the last axis (kept as size 1), NaN where a NaN is in the row (a NaN sorts last, so the
        # middle is NaN only when most are); detached: gradients go through the elements equal to it
        n = self.shape[-1]
        if skip_nan and dtypes.is_float(self.dtype):
            # of the first `count` sorted values (the NaNs sort last), at a position per row; a NaN where count is 0
            # (the element itself, through its position: its bits, a zero's sign and a NaN's)
            positions, count = self._sort_along(self.ndim - 1, False)[1], self._count_not_nan()
            at = positions._gather_checked(self.ndim - 1, (count - 1).maximum(0) // 2)
            return self._gather_checked(self.ndim - 1, at).detach()
        middle = self._sorted_at((n - 1) // 2).detach()
        if dtypes.is_float(self.dtype):
            middle = self.isnan().any(-1, keepdim=True).where(math.nan, middle)
        return middle

    def _sorted_at(self, r: int) -> Tensor:
        # the value of rank r along the last axis (kept as size 1), at a stored position (`uopkit.tensor.select`)
        position = position_of_rank(self, r)
        return self._gather_checked(self.ndim - 1, position)

    def _count_not_nan(self) -> Tensor:
        # how many of the last axis' values are not NaN (int32, kept as size 1)
        return (~self.isnan()).cast(dtypes.int32).sum(-1, keepdim=True)

    def _is_value(self, value: Tensor) -> Tensor:
        # where self equals `value` (broadcast), a NaN counting as equal to a NaN
        hit = self == value
        return hit | (self.isnan() & value.isnan()) if dtypes.is_float(self.dtype) else hit

    # ---- cumulative ops: a window of every prefix (pad + pool), reduced; long axes go in two levels

    def _cumalu(self, axis: int, op: Ops, name: str) -> Tensor:
        axis = _normalize_axis(axis, self.ndim, name, self.shape)
        if self.ndim == 0:
            return self
        n = self.shape[axis]
        if n <= 1:
            return self
        x = self.transpose(axis, -1)
        identity = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dtypes.min(self.dtype)}[op]
        if n <= _CUM_BLOCK and op is Ops.ADD:
            # a sum's windows over a padded copy: the copy is stored and the windows' taps vectorize across outputs
            padded = x.pad(((0, 0),) * (x.ndim - 1) + ((n - 1, 0),), value=identity).contiguous()
            ret = padded._pool((n,))._reduce(op, -1)
        elif n <= _CUM_BLOCK_MASKED:
            ret = x._prefixes(identity)._reduce(op, -1)
        else:
            # prefix within blocks of b, then add (combine) the prefix of the previous blocks' totals; b at most
            # _CUM_LEVEL_BLOCK: blocks of sqrt(n) cost n * sqrt(n) taps (a 50257-long row: 11 ms, torch 0.07)
            b = min(math.ceil(math.sqrt(n)), _CUM_LEVEL_BLOCK)
            nb = math.ceil(n / b)
            padded = x.pad(((0, 0),) * (x.ndim - 1) + ((0, nb * b - n),), value=identity)
            blocks = padded.reshape(x.shape[:-1] + (nb, b))._cumalu(-1, op, name)
            totals = blocks[..., -1]
            before = totals._cumalu(-1, op, name).pad(((0, 0),) * (x.ndim - 1) + ((1, -1),), value=identity)
            combine = {Ops.ADD: Tensor.add, Ops.MUL: Tensor.mul, Ops.MAX: Tensor.maximum}[op]
            ret = combine(blocks, before.unsqueeze(-1)).reshape(x.shape[:-1] + (nb * b,))._slice_axis(-1 % x.ndim, 0, n)
        return ret.transpose(axis, -1)

    def _prefixes(self, identity: Any) -> Tensor:
        # (..., n, n): row i holds the last axis' first i+1 values, the rest masked with the op's identity. A mask
        # over an expand reads the input unconditionally: a product's or max's windows over a padded copy stayed
        # bounds-checked scalar loads (1024x1024 cumprod 17 ms, cummax with indices 125 ms; this way 6 and 14)
        n = self.shape[-1]
        pos = Tensor.arange(n, device=self.device, dtype=dtypes.positions(n))
        taken = pos.reshape(1, n) <= pos.reshape(n, 1)
        return taken.where(self.unsqueeze(-2).expand(self.shape[:-1] + (n, n)), identity)

    @autocast_op(FLOAT32, GPU)
    def cumsum(self, axis: int = 0, *, dim: int | None = None, dtype: DType | str | None = None) -> Tensor:
        """Running sum along `axis` (ints accumulate like sum; `dtype` casts the input first, as torch's).

        >>> Tensor([1, 2, 3]).cumsum().tolist()
        [1, 3, 6]
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, 0, "cumsum")
        if dtype is not None:
            # torch's dtype=: the input cast first, and the result of that dtype (a uint8 running sum wraps around; it
            # is accumulated wider, which wraps to the same numbers)
            dt = to_dtype(dtype)
            return self.cast(dt).cumsum(axis).cast(dt)
        x = self.cast(_cum_acc_dtype(self, _normalize_axis(axis, self.ndim, "cumsum", self.shape)))
        ret = x._cumalu(axis, Ops.ADD, "cumsum")
        if ret.uop is not x.uop and dtypes.is_float(x.dtype):
            # (the rule on the value returned, of the input given: a float32 row summed in float64 is one node to it)
            x, ret = (self, ret.cast(self.dtype)) if x.dtype == dtypes.float64 != self.dtype else (x, ret)
            _set_cumsum_gradient(ret.uop, x.uop, _normalize_axis(axis, x.ndim, "cumsum", x.shape))
        return ret.cast(self.dtype) if dtypes.is_float(self.dtype) else ret

    @autocast_op(FLOAT32, GPU)
    def cumprod(self, axis: int = 0, *, dim: int | None = None, dtype: DType | str | None = None) -> Tensor:
        """Running product along `axis` (ints accumulate like sum; `dtype` casts the input first, as torch's).

        >>> Tensor([1, 2, 3]).cumprod().tolist()
        [1, 2, 6]
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, 0, "cumprod")
        if dtype is not None:
            # torch's dtype=: the input cast first, and the result of that dtype (as cumsum's: a product accumulated
            # wider wraps to the same numbers)
            dt = to_dtype(dtype)
            return self.cast(dt).cumprod(axis).cast(dt)
        acc = _cum_acc_dtype(self, _normalize_axis(axis, self.ndim, "cumprod", self.shape))
        if self.dtype in dtypes.halves or acc == dtypes.float64 != self.dtype:
            # (each running product rounded once from float32, or from float64 for float32, as PyTorch's)
            return self.cast(acc).cumprod(axis).cast(self.dtype)
        return self.cast(_prod_acc_dtype(self.dtype))._cumalu(axis, Ops.MUL, "cumprod")

    def cummax(self, axis: int = 0, *, dim: int | None = None) -> ValuesIndices:
        """Running maximum along `axis` and the (int32) index where it was reached: (values, indices), as torch
        and tinygrad (a tie or a NaN takes the latest index).

        >>> [t.tolist() for t in Tensor([1, 3, 2, 3]).cummax()]
        [[1, 3, 3, 3], [0, 1, 1, 3]]
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, 0, "cummax")
        values = self._cumalu(axis, Ops.MAX, "cummax")
        _set_cum_extreme_gradient(values, self, axis, Tensor.cummax)
        return ValuesIndices(values, self._cum_index(values, axis))

    def cummin(self, axis: int = 0, *, dim: int | None = None) -> ValuesIndices:
        """Running minimum along `axis` and its index: (values, indices).

        >>> [t.tolist() for t in Tensor([3, 1, 2]).cummin()]
        [[3, 1, 1], [0, 1, 1]]
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, 0, "cummin")
        values = self._inverse()._cumalu(axis, Ops.MAX, "cummin")._inverse()
        _set_cum_extreme_gradient(values, self, axis, Tensor.cummin)
        return ValuesIndices(values, self._cum_index(values, axis))

    def _cum_index(self, values: Tensor, axis: int) -> Tensor:
        # the last position j <= i where self reached the running extreme (self[j] == values[j]): positions of those
        # hits, -1 elsewhere, carried forward by a running max
        axis = _normalize_axis(axis, self.ndim, "cummax", self.shape)
        if self.ndim == 0:
            return Tensor(0, device=self.device, dtype=dtypes.int32)
        n = self.shape[axis]
        hit = self == values
        if dtypes.is_float(self.dtype):
            hit = hit | self.isnan()
        pos = Tensor.arange(n, device=self.device, dtype=dtypes.positions(n))
        return hit.where(pos.reshape(_with((1,) * self.ndim, axis, n)), -1)._cumalu(axis, Ops.MAX, "cummax")

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = True) -> tuple[Tensor, Tensor]:
        """Sorted values along `dim` and their (int32) indices, (values, indices); equal values keep their order,
        NaN sorts as the largest, as torch.sort. Rows up to SORT_BY_RANK long count each element's rank against the
        others (n^2 compares, one kernel); up to SORT_BY_BLOCKS, ranks are counted per block and then across the sorted
        blocks by binary searches (six kernels); longer ones go through a bitonic network (n log^2 n, two stages a
        kernel).

        >>> [t.tolist() for t in Tensor([3, 1, 2]).sort()]
        [[1, 2, 3], [1, 2, 0]]
        """
        dim = _normalize_axis(dim, max(self.ndim, 1), "sort", self.shape)
        if self.ndim == 0:
            return ValuesIndices(self, Tensor(0, device=self.device, dtype=dtypes.int32))
        return relaunched(Tensor._sort_along, self, dim, descending)

    def _sort_along(self, dim: int, descending: bool) -> tuple[Tensor, Tensor]:
        x = self._move_to_end(dim)
        if x.shape[-1] <= SORT_BY_RANK:
            # (replayed: the rank's graph is ~50 ops, ~300 us of Python built op by op)
            indices = replay_call(Tensor._sort_positions_by_rank, (x,), descending)
        else:
            indices = x._sort_positions(descending)
        # (positions in range by construction: no bounds check, which would read them back)
        values = x._gather_checked(x.ndim - 1, indices)
        return ValuesIndices(values._move_from_end(dim), indices._move_from_end(dim))

    def _sort_positions_by_rank(self, descending: bool) -> Tensor:
        # (along the last axis) each element's rank is how many come before it; position r of the result is the element
        # whose rank is r
        n = self.shape[-1]
        a, b = self.unsqueeze(-1), self.unsqueeze(-2)
        # before[..., i, j]: element j comes before element i
        first = b > a if descending else b < a
        same = b == a
        if dtypes.is_float(self.dtype):
            nan_a, nan_b = a.isnan(), b.isnan()
            first = first | ((nan_b & ~nan_a) if descending else (nan_a & ~nan_b))
            same = same | (nan_a & nan_b)
        ar = Tensor.arange(n, device=self.device, dtype=dtypes.int32)
        before = first | (same & (ar.reshape(1, n) < ar.reshape(n, 1)))
        rank = before.cast(dtypes.int32).sum(-1)
        onehot = rank.unsqueeze(-2) == ar.reshape(n, 1)
        return onehot.where(ar, 0).sum(-1).cast(dtypes.int32)

    def _sort_positions(self, descending: bool) -> Tensor:
        # (along the last axis) by unique keys that hold the position (`_positions_of_keys`): a stable sort. A 64-bit
        # dtype's order and a position don't fit one key: sorted by the order's low, then high 32 bits (`wordsort`)
        n = self.shape[-1]
        if n > 1 << 31:
            raise ArgumentError(f"sort: rows of more than 2**31 elements are not supported, got shape {self.shape}")
        x = self.cast(dtypes.int32) if self.dtype == dtypes.bool else self
        if x.dtype.itemsize <= 4:
            # (the keys replayed: ~25 ops, ~100 us of Python built op by op)
            return _positions_of_keys(replay_call(Tensor._sort_order_key, (x,), descending))
        return positions_by_words(replay_call(Tensor._order_as_int64, (x,), descending), _positions_of_keys)

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
        """The (int32) indices that sort `dim`, as torch.argsort.

        >>> Tensor([3, 1, 2]).argsort().tolist()
        [1, 2, 0]
        """
        return self.sort(dim, descending, stable)[1]

    def unique(
        self, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None
    ) -> Tensor | tuple[Tensor, ...]:
        """The distinct values (dim None: of the flattened tensor) or distinct slices along `dim`, in ascending
        (lexicographic) order, as torch.unique; with `return_inverse` the (int32) position in the result of each
        element (each slice), of the input's shape (of length shape[dim]); with `return_counts` how often each occurs
        (int32). Each NaN is distinct from every other (a slice holding one is distinct too) and sorts last, as in
        torch. `sorted=False` returns them sorted too (as torch on the CPU). The result's length depends on the data:
        with `dim` None the values are read back and sorted on the host (numpy's stable sort); along a `dim`, the
        slices are sorted on the device, and which sorted neighbours differ, and the order, are read back (as
        `nonzero` reads its mask). No gradient flows through it (torch has none).

        >>> Tensor([3, 1, 3, 2]).unique().tolist()
        [1, 2, 3]
        >>> [t.tolist() for t in Tensor([[1, 2], [0, 5], [1, 2]]).unique(dim=0, return_inverse=True)]
        [[[0, 5], [1, 2]], [1, 0, 1]]
        """
        return unique_of(self, dim, return_inverse, return_counts)

    def topk(
        self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True, **kwargs: Any
    ) -> tuple[Tensor, Tensor]:
        """The k largest (or smallest) values along `dim` and their (int32) indices, as torch.topk.

        >>> [t.tolist() for t in Tensor([1, 5, 3]).topk(2)]
        [[5, 3], [1, 2]]
        """
        dim = _normalize_axis(dim, max(self.ndim, 1), "topk", self.shape)
        n = self.shape[dim] if self.ndim else 1
        if not 0 <= k <= n:
            raise ArgumentError(f"topk: k ({k}) must be in [0, {n}] for dim {dim} of shape {self.shape}")
        levels = max(0, (n - 1).bit_length())
        rounds = max(TOPK_BY_SELECTION, levels * (levels + 1) // 4)
        keyed = self.dtype in (dtypes.float16, dtypes.bfloat16, dtypes.float32) or (
            dtypes.is_int(self.dtype) and self.dtype.itemsize <= 4
        )
        if self.ndim and keyed and TOURNAMENT_MIN_K <= k <= TOURNAMENT_MAX_K and SORT_BY_RANK < n <= 1 << 31:
            # (a tournament of blocks: a few kernels a level, whatever k is)
            return relaunched(Tensor._topk_by_selection, self, k, dim, largest)
        if self.ndim and 0 < k <= rounds and k * TOPK_BY_SELECTION <= n and self.dtype != dtypes.bool:
            return relaunched(Tensor._topk_by_selection, self, k, dim, largest)
        values, indices = self.sort(dim, descending=largest)
        if self.ndim == 0:
            return ValuesIndices(values, indices)
        return ValuesIndices(values._slice_axis(dim, 0, k), indices._slice_axis(dim, 0, k))

    def _topk_by_selection(self, k: int, dim: int, largest: bool) -> tuple[Tensor, Tensor]:
        # k rounds, each picking the first element in sort order (NaN as the largest, equals by position) that comes
        # after the last one picked: k*n work where sort's ranks are n*n
        x = self._move_to_end(dim)
        n = x.shape[-1]
        order = x._sort_order_key(largest)
        if order is not None and k >= TOURNAMENT_MIN_K and n > SORT_BY_RANK:
            # the k largest keys by a tournament of blocks (`uopkit.tensor.tournament`): a few kernels whatever k is
            picked = top_keys(order, k, n)
            indices = ((n - 1) - (picked & ((1 << 31) - 1))).cast(dtypes.positions(n))
        elif order is not None:
            # one pass per round: the largest key below the last pick's. (Keys from the last pick up are moved below
            # every key, 2**63 down, rather than replaced: C compilers vectorize that max, not a max over a select.)
            picks: list[Tensor] = []
            for _ in range(k):
                left = order if not picks else order + (order >= picks[-1]).where(dtypes.min(dtypes.int64), 0)
                picks.append(left.max(axis=-1, keepdim=True))
            indices = ((n - 1) - (Tensor.cat(*picks, dim=-1) & ((1 << 31) - 1))).cast(dtypes.positions(n))
        else:
            indices = x._topk_positions_by_rounds(k, largest)
        # (positions in range by construction: no bounds check, which would read them back)
        values = x._gather_checked(x.ndim - 1, indices)
        return ValuesIndices(values._move_from_end(dim), indices._move_from_end(dim))

    def _sort_order_key(self, largest: bool) -> Tensor | None:
        """A non-negative int64 per element of the last axis, unique, larger for what comes first in topk's order (the
        largest or smallest value first, NaN as the largest, equal values by position): the value's order as a uint32
        above the position reversed in 31 bits. None for dtypes whose order doesn't fit 32 bits (64-bit ones)."""
        dt, n = self.dtype, self.shape[-1]
        if n > 1 << 31:
            return None
        if dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32):
            f = self.cast(dtypes.float32)
            # -0.0 equals 0.0 and every NaN equals every other (by position): one bit pattern each
            f = (f == 0).where(0.0, f)
            bits = f.bitcast(dtypes.int32)
            bits = f.isnan().where(0x7FC00000, bits)
            # IEEE order as int32 order: a negative value's magnitude bits flipped
            value = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).cast(dtypes.int64)
        elif dtypes.is_int(dt) and dt.itemsize <= 4:
            value = self.cast(dtypes.int64)
            if dt == dtypes.uint32:
                value = value - (1 << 31)
        else:
            return None
        if not largest:
            value = -value - 1
        position = (n - 1) - Tensor.arange(n, device=self.device, dtype=dtypes.int64)
        return (value + (1 << 31)) * (1 << 31) + position

    def _order_as_int64(self, largest: bool) -> Tensor:
        """An int64 per element, larger for what comes first (the largest or the smallest value, NaN as the largest;
        -0.0 equal to 0.0, NaNs equal to each other), for any dtype: float64's order is its bits' order with a negative
        value's magnitude bits flipped, uint64's is int64's with the top bit flipped."""
        dt = self.dtype
        if dtypes.is_float(dt):
            f = self.cast(dtypes.float64)
            f = (f == 0).where(0.0, f)
            bits = f.isnan().where(0x7FF8000000000000, f.bitcast(dtypes.int64))
            value = bits ^ ((bits >> 63) & 0x7FFFFFFFFFFFFFFF)
        elif dt == dtypes.uint64:
            value = self.bitcast(dtypes.int64) ^ dtypes.min(dtypes.int64)
        else:
            value = self.cast(dtypes.int64)
        # (~v, not -v: the order reversed without overflowing at int64's minimum)
        return value if largest else ~value

    def _topk_positions_by_rounds(self, k: int, largest: bool) -> Tensor:
        # (64-bit dtypes, whose order has no int32 key) each round a max, a NaN check and the first position of the
        # max, each a pass over the last axis
        x = self
        n = x.shape[-1]
        ar = Tensor.arange(n, device=self.device, dtype=dtypes.positions(n))
        is_float = dtypes.is_float(x.dtype)
        nan = x.isnan()
        real = ~nan
        worst = Tensor(dtypes.min(x.dtype) if largest else dtypes.max(x.dtype), device=self.device, dtype=x.dtype)
        free = x.full_like(True, dtype=dtypes.bool)
        picks = []
        for _ in range(k):
            candidates = (free & real).where(x, worst)
            best = (candidates.max(axis=-1) if largest else candidates.min(axis=-1)).unsqueeze(-1)
            is_best = free & real & (x == best)
            picked_nan = None
            if is_float:
                # the largest: NaNs come first; the smallest: last, once no number is left
                if largest:
                    picked_nan = (free & nan).any(-1, keepdim=True)
                else:
                    picked_nan = ~(free & real).any(-1, keepdim=True)
                is_best = picked_nan.where(free & nan, is_best)
            index = is_best.where(ar, n).min(axis=-1, keepdim=True)
            picks.append(index)
            # what comes after this pick in sort order
            later = ar > index
            after_number = (x < best) if largest else (x > best)
            after_number = real & (after_number | ((x == best) & later))
            if picked_nan is None:
                free = after_number
            elif largest:
                free = picked_nan.where((nan & later) | real, after_number)
            else:
                free = picked_nan.where(nan & later, nan | after_number)
        return Tensor.cat(*picks, dim=-1)

    # ------------------------------------------------------------------------------------------------------------
    # gather, scatter and one-hot: index tensors compared with an arange, then a reduce

    def _move_to_end(self, dim: int) -> Tensor:
        return self.permute([d for d in range(self.ndim) if d != dim] + [dim])

    def _move_from_end(self, dim: int) -> Tensor:
        # _move_to_end's inverse: the last axis back to position `dim`
        last = self.ndim - 1
        return self if dim == last else self.permute([*range(dim), last, *range(dim, last)])

    def _one_hot_along(self, n: int) -> Tensor:
        # self[..., None] == arange(n): shape self.shape + (n,), compared in self's int dtype where it holds n - 1
        # (an int8 arange of 300 would wrap: 256 would equal 0)
        x, dt = self, self.dtype if dtypes.is_int(self.dtype) else dtypes.int32
        if dtypes.is_int(x.dtype) and n - 1 > dtypes.max(x.dtype):
            x = x.cast(dtypes.positions(n))
            dt = x.dtype
        ar = Tensor.arange(n, device=self.device, dtype=dt)
        return x.unsqueeze(-1) == ar.reshape((1,) * self.ndim + (n,))

    def one_hot(self, num_classes: int = -1) -> Tensor:
        """One-hot encoding of integer class indices (int32), a new last axis of `num_classes`.

        >>> Tensor([0, 2]).one_hot(3).tolist()
        [[1, 0, 0], [0, 0, 1]]
        """
        if not dtypes.is_int(self.dtype):
            raise DTypeError(f"one_hot: needs an integer tensor of class indices, got {self.dtype}; cast with .long()")
        if num_classes < -1 or num_classes == 0 and self.numel():
            raise ArgumentError(f"one_hot: num_classes must be -1 (largest class + 1) or positive, got {num_classes}")
        if num_classes == -1:
            if not self.numel():
                raise ArgumentError("one_hot: can't infer the number of classes of an empty tensor; give num_classes")
            num_classes = int(self.max().item()) + 1
        _check_values_in(self, 0, num_classes, lambda bad: f"one_hot: class {bad} is out of range [0, {num_classes})")
        return self._one_hot_along(num_classes).where(1, 0)


def _positions_of_keys(key: Tensor) -> Tensor:
    """The positions (..., n) that put unique keys >= 0 (`Tensor._sort_order_key`s: the position reversed in the low 31
    bits) in descending order: by blocks up to SORT_BY_BLOCKS, longer rows by the bitonic network."""
    n = key.shape[-1]
    if n <= SORT_BY_BLOCKS:
        return sort_positions_by_blocks([key], n, "keys descending")
    # keys are >= 0: padding with -1 sorts last
    ordered = bitonic_descending([key], n, [-1], "keys descending")[0]
    return ((n - 1) - (ordered & ((1 << 31) - 1))).cast(dtypes.positions(n))


def _set_cum_extreme_gradient(values: Tensor, x: Tensor, axis: int, scan: Callable[..., ValuesIndices]) -> None:
    """A running max's (min's) gradient as PyTorch's: each out[i] sends its gradient to the one position its index
    names (the latest tie), not shared among the tied values as the chain through the scan's MAX nodes would."""
    from uopkit.gradient import set_gradient

    if not dtypes.is_float(x.dtype) or x.ndim == 0 or values.uop is x.uop:
        return
    axis = _normalize_axis(axis, x.ndim, scan.__name__, x.shape)
    xu = x.uop

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None]:
        # (the indices are rebuilt from x here: the rule must not hold the values node it is the gradient of)
        indices = scan(Tensor(xu), axis).indices
        grad = Tensor(g)
        return (grad.zeros_like().scatter_add(axis, indices, grad).uop,)

    set_gradient(values.uop, (xu,), rule)


def _set_cumsum_gradient(out: UOp, x: UOp, axis: int) -> None:
    """A running sum's gradient given whole: each x[j] feeds every out[i >= j], so it gets g's running sum taken from
    the far end (flip, cumsum, flip). The chain through the windows' movement ops is a gather with a division and a
    modulo per tap (1024x1024 backward 20-30 ms on one thread)."""
    from uopkit.gradient import set_gradient

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None]:
        return (Tensor(g).flip(axis)._cumalu(axis, Ops.ADD, "cumsum").flip(axis).uop,)

    set_gradient(out, (x,), rule)
