"""The rest of torch.Tensor's methods a PyTorch program calls: strided views (`as_strided`), `fill_diagonal_`,
`histogram`, `triangular_solve`, the storage and layout queries (`storage_offset`, `data_ptr`, `is_sparse`, ...),
`type`, `unsafe_split`/`unsafe_chunk`, `apply_`/`map_`, `resize_`, compared with torch in tests/test_torch_extras.py.

Storage here is torch's layout as `stride()` reports it (`support._torch_layout`): a tensor that is no view owns a
row-major storage of its own values; a view reads the storage of the live tensor it views (its root), at the flat
positions of its elements there. `as_strided` gathers from that storage (so gradients flow), and returns a copy."""

from __future__ import annotations

import builtins
import importlib
import math
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from uopkit.device import Device, DeviceError
from uopkit.dtype import DType, dtypes, to_dtype
from uopkit.schedule import live_tensors
from uopkit.tensor.indexing import _positions_of, _view_root
from uopkit.tensor.sharing import share_memory, shared_segment
from uopkit.tensor.support import (
    _A_COPY,
    _A_RESHAPED_COPY,
    _VIEW_NODES,
    ArgumentError,
    DTypeError,
    ShapeError,
    _check_stored_scalar,
    _contiguous_strides,
    _is_filled_constant,
    _is_size,
)
from uopkit.uop.ops import UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


class Histogram(NamedTuple):
    """(hist, bin_edges): what `histogram` returns, as torch.return_types.histogram."""

    hist: Tensor
    bin_edges: Tensor


class HistogramDD(NamedTuple):
    """(hist, bin_edges): what `histogramdd` returns, as torch.return_types.histogramdd (a tuple of edges)."""

    hist: Tensor
    bin_edges: tuple[Tensor, ...]


class TriangularSolve(NamedTuple):
    """(solution, cloned_coefficient): what `triangular_solve` returns, as torch.return_types.triangular_solve."""

    solution: Tensor
    cloned_coefficient: Tensor


# torch's legacy type names: torch.FloatTensor for float32, ...
_TYPE_NAMES = {
    dtypes.float32: "FloatTensor", dtypes.float64: "DoubleTensor", dtypes.float16: "HalfTensor",
    dtypes.bfloat16: "BFloat16Tensor", dtypes.int64: "LongTensor", dtypes.int32: "IntTensor",
    dtypes.int16: "ShortTensor", dtypes.int8: "CharTensor", dtypes.uint8: "ByteTensor", dtypes.bool: "BoolTensor",
    dtypes.uint16: "UInt16Tensor", dtypes.uint32: "UInt32Tensor", dtypes.uint64: "UInt64Tensor",
}  # fmt: skip
_DTYPE_OF_TYPE_NAME = {name: dt for dt, name in _TYPE_NAMES.items()}
# torch.dtype names (str(torch.int64) is 'torch.int64') that differ from ours
_TORCH_DTYPE_NAMES = {"long": dtypes.int64, "int": dtypes.int32, "short": dtypes.int16, "half": dtypes.float16}


def _int_tuple(values: Any, op: str, what: str) -> tuple[int, ...]:
    # ints, and what torch takes as one by its __index__: a numpy int, a 0-d int tensor (HF Longformer's chunk count
    # `torch.div(n, w, rounding_mode="trunc") - 1` in as_strided's size)
    if isinstance(values, int) and not isinstance(values, bool):
        return (values,)
    if not isinstance(values, (tuple, list)) or not all(_is_size(v) for v in values):
        raise TypeError(f"{op}: {what} must be a sequence of ints, got {values!r}")
    return tuple(operator.index(v) for v in values)


def _storage(t: Tensor) -> tuple[Tensor, Tensor | None, Any]:
    """t's storage as torch lays it out, flattened, the flat positions of t's elements in it (None: t owns its storage,
    row-major, from position 0), and the object that owns the storage (its id is `data_ptr`'s). A view of a live
    tensor reads that tensor's storage; one whose base is gone, the storage its movement ops read (as `stride()`)."""
    mark = t._view_of
    if mark is None or mark is _A_COPY or mark is _A_RESHAPED_COPY:
        return t.reshape(-1), None, t
    root = _view_root(t)
    if root is not None and root is not t:
        storage, above, owner = _storage(root)
        positions = _positions_of(t.uop, root.uop, t.device).cast(dtypes.int32)
        if above is not None:
            # (the root is a view itself, of storage whose tensor is gone)
            positions = above.reshape(-1).gather(0, positions.reshape(-1)).reshape(t.shape)
        return storage, positions, owner
    node = t.uop
    # (down the movement ops to what they view; a constant broadcast to a shape is storage of its own, as in torch)
    while node.op in _VIEW_NODES and not _is_filled_constant(node):
        node = node.src[0]
    if node is t.uop:
        return t.reshape(-1), None, t
    return Tensor(node).reshape(-1), _positions_of(t.uop, node, t.device).cast(dtypes.int32), node


def _strided_positions(size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> np.ndarray:
    # offset + sum_k i_k stride_k for every index of `size`, row-major
    pos = np.full(size, offset, dtype=np.int64)
    for k, (n, s) in enumerate(zip(size, stride, strict=True)):
        shape = [1] * len(size)
        shape[k] = n
        pos = pos + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return pos.reshape(-1)


def _gradient_by_readers(out: Tensor, storage: Tensor, positions: np.ndarray) -> None:
    """`out` = storage[positions] (flat, the positions known on the host): its gradient to `storage` gathers, for each
    storage element, the incoming gradient of the k elements of `out` that read it (k: the most any element is read; a
    zero where fewer do) and sums them, storage x k picks. The gather's own gradient is a one-hot scatter of every
    element of `out` against every element of the storage (Longformer's overlapping chunks of its padded values, 64 x
    16 x 6 x 8 from 64 x 36 x 8: 0.12 s a step on one thread, where torch's whole step takes 0.02 s)."""
    from uopkit.gradient import set_gradient

    n, size = positions.size, storage.numel()
    counts = np.bincount(positions, minlength=size)
    order = np.argsort(positions, kind="stable")
    first = np.cumsum(counts) - counts
    # readers[p, j]: the j-th element of out reading storage element p, or n (a zero put after the gradient) for none
    readers = np.full((size, max(int(counts.max()), 1)), n, dtype=np.int32)
    readers[positions[order], np.arange(n) - first[positions[order]]] = order
    picks = Tensor(readers.reshape(-1), device=out.device)

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None]:
        padded = Tensor(g).pad(((0, 1),))
        # (the picks are in range by construction: no read-back of their bounds)
        return (padded._gather_checked(0, picks).reshape(readers.shape).sum(1).uop,)

    set_gradient(out.uop, (storage.uop,), rule)


def _check_strided(
    op: str, size: Any, stride: Any, offset: Any, storage_size: int, itemsize: int
) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    size, stride = _int_tuple(size, op, "size"), _int_tuple(stride, op, "stride")
    if len(size) != len(stride):
        raise ShapeError(f"{op}: mismatch in length of strides and shape: size {size}, stride {stride}")
    if any(n < 0 for n in size):
        raise ArgumentError(f"{op}: sizes must be >= 0, got {size}")
    if any(s < 0 for s in stride):
        raise ArgumentError(f"{op}: negative strides are not supported (as torch), got strides {stride}")
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"{op}: storage_offset must be an int, got {offset!r}")
    if offset < 0:
        raise ArgumentError(f"{op}: invalid storage offset {offset} (must be >= 0)")
    if math.prod(size):
        needed = offset + 1 + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
        if needed > storage_size:
            raise ArgumentError(
                f"{op}: sizes {list(size)}, strides {list(stride)}, storage offset {offset} and itemsize {itemsize} "
                f"need a storage of {needed * itemsize} bytes, out of bounds for the storage of "
                f"{storage_size * itemsize} bytes"
            )
    return size, stride, offset


def _not_here(name: str, why: str) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{name}: {why}")

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Not in uopkit: {why}"
    return method


def _host_map(self: Tensor, op: str, fn: Callable[..., Any], others: Sequence[Any]) -> Tensor:
    """torch's apply_/map_/map2_: fn called on the host, element by element, with Python numbers (self's element
    first, then the others' broadcast to self's shape), its results cast to self's dtype and written in place."""
    if not callable(fn):
        raise TypeError(f"{op}: fn must be callable, got {type(fn).__name__}")
    if self._requires_grad:
        raise RuntimeError(f"{op}: can't be called on a tensor that requires grad (as torch); use .detach().{op}")
    operands = []
    for i, o in enumerate(others):
        if not isinstance(o, Tensor):
            raise TypeError(f"{op}: argument {i + 1} must be a Tensor, got {type(o).__name__}")
        if o.dtype != self.dtype:
            raise TypeError(f"{op}: expected a {self.dtype} tensor for argument {i + 1} (as self), got {o.dtype}")
        try:
            np.broadcast_shapes(o.shape, self.shape)
            operands.append(o._broadcast_to(self.shape).numpy().reshape(-1).tolist())
        except ValueError:
            raise ShapeError(f"{op}: argument {i + 1} of shape {o.shape} doesn't broadcast to {self.shape}") from None
    values = self.numpy().reshape(-1).tolist()
    out = [fn(*args) for args in zip(values, *operands, strict=True)]
    for v in out:
        if isinstance(v, (bool, int, float, np.generic)):
            continue
        raise TypeError(f"{op}: fn must return a number, got {type(v).__name__}")
    # (cast as torch casts a Python number into the tensor: floats truncate into ints)
    host = np.array(out, dtype=np.float64 if dtypes.is_float(self.dtype) else None).reshape(self.shape)
    result = Tensor(host, device=self.device).cast(self.dtype) if self.numel() else self.zeros_like()
    return self._update_in_place(lambda: result, op)


class TorchExtrasMixin:
    __slots__ = ()

    def stft(self, *args: Any, **kwargs: Any) -> Any:
        """torch.stft of this signal: `uopkit.fft.stft(self, n_fft, hop_length, ...)` (a complex spectrogram).

        >>> Tensor.zeros(8).stft(4, return_complex=True).shape
        (3, 9)
        """
        return importlib.import_module("uopkit.fft").stft(self, *args, **kwargs)

    def istft(self, *args: Any, **kwargs: Any) -> Any:
        """torch.istft: `uopkit.fft.istft`, whose input is a complex spectrum; a real tensor isn't one, so it raises
        (as torch's)."""
        return importlib.import_module("uopkit.fft").istft(self, *args, **kwargs)

    # torch's module constants (torch.pi, torch.inf, ...) as class attributes, so a port that reads `Tensor.X` for
    # `torch.X` finds them; uopkit's module has them too (and torch.vmap, as uopkit.vmap: uopkit.func is a layer above)
    pi = math.pi
    e = math.e
    inf = math.inf
    nan = math.nan
    newaxis = None

    # ------------------------------------------------------------------------------------------------------------
    # strided views

    def as_strided(  # type: ignore[misc]
        self: Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int | None = None
    ) -> Tensor:
        """The elements at storage_offset + sum_k i_k stride[k] of this tensor's storage (torch.as_strided): the storage
        is torch's layout (`stride()`), so a slice reads on from where it starts (`storage_offset()` by default).
        Sizes, strides and the offset are checked against the storage, as torch. A copy (a gather, through which
        gradients flow), not a view: a write into it doesn't reach the storage.

        >>> Tensor.arange(6).as_strided((2, 2), (1, 2)).tolist()
        [[0, 2], [1, 3]]
        >>> Tensor.arange(6)[2:].as_strided((2,), (3,)).tolist()
        [2, 5]
        """
        storage, positions, _ = _storage(self)
        if storage_offset is None:
            storage_offset = self.storage_offset()
        size, stride, offset = _check_strided(
            "as_strided", size, stride, storage_offset, storage.numel(), self.element_size()
        )
        if not math.prod(size):
            return Tensor.zeros(size, dtype=self.dtype, device=self.device)
        positions = _strided_positions(size, stride, offset)
        out = storage.gather(0, Tensor(positions.astype(np.int32), device=self.device))
        if dtypes.is_float(self.dtype):
            _gradient_by_readers(out, storage, positions)
        return out.reshape(size)

    def as_strided_(  # type: ignore[misc]
        self: Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int | None = None
    ) -> Tensor:
        """`as_strided` in place (torch.Tensor.as_strided_): the tensor object itself takes the strided elements and
        their shape. It then holds a copy (a write through it doesn't reach the old storage, unlike torch's view).

        >>> t = Tensor.arange(4); t.as_strided_((2,), (2,)).tolist()
        [0, 2]
        """
        if self._requires_grad and self.is_leaf:
            raise RuntimeError(
                "as_strided_: a leaf tensor that requires grad can't change in place (as PyTorch); use as_strided"
            )
        live_tensors.set_uop(self, self.as_strided(size, stride, storage_offset).uop)
        self._view_of = None
        return self

    def as_strided_scatter(  # type: ignore[misc]
        self: Tensor, src: Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int | None = None
    ) -> Tensor:
        """A copy of this tensor with `src` written where `as_strided(size, stride, storage_offset)` reads
        (torch.as_strided_scatter): positions in this tensor's storage (`storage_offset()` by default); an element of
        the storage this tensor doesn't show is not written, as torch's. Gradients flow to both.

        >>> Tensor.zeros(2, 3).as_strided_scatter(Tensor([1.0, 2.0]), (2,), (4,)).tolist()
        [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]
        """
        if not isinstance(src, Tensor):
            raise TypeError(f"as_strided_scatter: src must be a Tensor, got {type(src).__name__}")
        if src.dtype != self.dtype:
            raise DTypeError(f"as_strided_scatter: src is {src.dtype}, expected the tensor's dtype {self.dtype}")
        storage, positions, _ = _storage(self)
        if storage_offset is None:
            storage_offset = self.storage_offset()
        size, stride, offset = _check_strided(
            "as_strided_scatter", size, stride, storage_offset, storage.numel(), self.element_size()
        )
        if src.shape != size:
            raise ShapeError(f"as_strided_scatter: src of shape {src.shape} must have the strided view's shape {size}")
        if not self.numel() or not src.numel():
            return self.clone()
        # for each storage position the last element of src written there (-1: none), then for each of our elements
        # the one written at its position
        written = np.full(storage.numel(), -1, dtype=np.int64)
        written[_strided_positions(size, stride, offset)] = np.arange(src.numel())
        where = np.arange(self.numel()) if positions is None else positions.numpy().reshape(-1).astype(np.int64)
        which = written[where].reshape(self.shape)
        picked = src.reshape(-1).gather(
            0, Tensor(np.maximum(which, 0).astype(np.int32), device=self.device).reshape(-1)
        )
        return Tensor(which >= 0, device=self.device).where(picked.reshape(self.shape), self)

    def fill_diagonal_(self: Tensor, fill_value: Any, wrap: bool = False) -> Tensor:  # type: ignore[misc]
        """The main diagonal (i, i, ..., i) set to `fill_value` in place (torch.Tensor.fill_diagonal_): a matrix of
        any shape, or more dims all of one length. `wrap`: for a tall matrix the diagonal goes on every cols + 1
        elements in row-major order (after each cols x cols block one row is skipped), as torch's.

        >>> Tensor.zeros(3, 2).fill_diagonal_(1.0, wrap=True).tolist()
        [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]
        """
        if self.ndim < 2:
            raise ShapeError(f"fill_diagonal_: needs a tensor of at least 2 dims, got shape {self.shape}")
        if self.ndim > 2 and len(set(self.shape)) != 1:
            raise ShapeError(
                f"fill_diagonal_: all dims of a tensor of more than 2 dims must be equal, got {self.shape}"
            )
        if isinstance(fill_value, Tensor):
            if fill_value.numel() != 1:
                raise ShapeError(
                    f"fill_diagonal_: fill_value must be a number, got a tensor of shape {fill_value.shape}"
                )
            fill_value = fill_value.item()
        _check_stored_scalar(fill_value, self.dtype, "fill_diagonal_")
        step = sum(_contiguous_strides(self.shape))
        count = min(self.shape)
        if wrap and self.ndim == 2:
            count = -(-self.numel() // step)
        mask = np.zeros(self.numel(), dtype=bool)
        mask[np.arange(count) * step] = True
        on = Tensor(mask.reshape(self.shape), device=self.device)
        return self._update_in_place(lambda: on.where(Tensor(fill_value, dtype=self.dtype), self), "fill_diagonal_")

    # ------------------------------------------------------------------------------------------------------------
    # histogram and triangular_solve

    def histogram(  # type: ignore[misc]
        self: Tensor,
        bins: int | Tensor,
        *,
        range: tuple[float, float] | None = None,  # noqa: A002 - torch's name
        weight: Tensor | None = None,
        density: bool = False,
    ) -> Histogram:
        """(hist, bin_edges) of the flattened tensor, as torch.histogram: `bins` equal bins over `range` (default:
        the data's min and max, read back; widened by 0.5 each way when they are equal) or the given increasing
        edges; each bin holds [left, right) except the last, [left, right]; values outside are not counted. `weight`
        (same shape and dtype) sums weights; `density` divides by the total and the bin widths. Float tensors only.

        >>> h = Tensor([1.0, 2.0, 1.0, 4.0]).histogram(3)
        >>> h.hist.tolist(), h.bin_edges.tolist()
        ([2.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0])
        """
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"histogram: not implemented for {self.dtype} (as torch); it takes float tensors")
        _check_histogram_weight(self, weight, self.shape, "histogram")
        edges = _histogram_edges(self, bins, range, "histogram")
        nbins = edges.numel() - 1
        x = self.reshape(-1)
        w = weight.reshape(-1) if weight is not None else x.ones_like()
        if nbins < 1 or not x.numel():
            hist = Tensor.zeros(max(nbins, 0), dtype=self.dtype, device=self.device)
        else:
            hist = _bin_membership(x, edges).where(w.unsqueeze(1), 0).sum(0).cast(self.dtype)
        if density and nbins >= 1:
            hist = hist / (hist.sum() * (edges[1:] - edges[:-1]))
        return Histogram(hist, edges)

    def histogramdd(  # type: ignore[misc]
        self: Tensor,
        bins: int | Sequence[int] | Sequence[Tensor] = 10,
        *,
        range: Sequence[float] | None = None,  # noqa: A002 - torch's name
        weight: Tensor | None = None,
        density: bool = False,
    ) -> HistogramDD:
        """(hist, bin_edges) of points in D dimensions, as torch.histogramdd: the last axis holds each point's D
        coordinates (the others are flattened into the points); `bins` is one int for every dimension, D ints, or D
        1-D tensors of increasing edges; `range` D (min, max) pairs flattened ([min0, max0, min1, max1, ...]), by
        default each dimension's min and max (read back). Each bin is [left, right), the last [left, right], as
        `histogram`'s; `weight` (the input's shape without its last axis) sums weights; `density` divides by the
        total and the bins' volumes. hist has D axes; bin_edges is a tuple of D tensors. Float tensors only.

        >>> h = Tensor([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]]).histogramdd(bins=2)
        >>> h.hist.tolist(), [e.tolist() for e in h.bin_edges]
        ([[0.0, 0.0], [1.0, 2.0]], [[-0.5, 0.0, 0.5], [1.0, 2.0, 3.0]])
        """
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"histogramdd: not implemented for {self.dtype} (as torch); it takes float tensors")
        if self.ndim < 2:
            raise ShapeError(
                f"histogramdd: the input needs at least 2 dims (points x coordinates), got shape {self.shape}"
            )
        dims = self.shape[-1]
        per_dim = [bins] * dims if isinstance(bins, int) and not isinstance(bins, bool) else list(bins)
        if len(per_dim) != dims:
            raise ShapeError(f"histogramdd: bins has {len(per_dim)} entries for points of {dims} coordinates")
        if range is not None and len(range) != 2 * dims:
            raise ArgumentError(
                f"histogramdd: range must hold {2 * dims} numbers (a min and a max per dimension), got {len(range)}"
            )
        _check_histogram_weight(self, weight, self.shape[:-1], "histogramdd")
        points = self.reshape(-1, dims)
        edges = tuple(
            _histogram_edges(
                points[:, d], per_dim[d], None if range is None else range[2 * d : 2 * d + 2], "histogramdd"
            )
            for d in builtins.range(dims)
        )
        counts = tuple(e.numel() - 1 for e in edges)
        if not points.shape[0] or min(counts) < 1:
            hist = Tensor.zeros(*counts, dtype=self.dtype, device=self.device)
        else:
            # each point's weight spread over the bins it falls in along every dimension: an outer product per point
            spread = weight.reshape(-1) if weight is not None else points[:, 0].ones_like()
            for d, e in enumerate(edges):
                inside = _bin_membership(points[:, d], e).cast(self.dtype)
                spread = spread.unsqueeze(-1) * inside.reshape(-1, *([1] * d), counts[d])
            hist = spread.reshape(-1, *counts).sum(0).cast(self.dtype)
        if density and min(counts) >= 1:
            volume = Tensor.ones(*counts, dtype=self.dtype, device=self.device)
            for d, e in enumerate(edges):
                volume = volume * (e[1:] - e[:-1]).reshape(*([1] * d), counts[d], *([1] * (dims - d - 1)))
            hist = hist / (hist.sum() * volume)
        return HistogramDD(hist, edges)

    def triangular_solve(  # type: ignore[misc]
        self: Tensor, A: Tensor, upper: bool = True, transpose: bool = False, unitriangular: bool = False
    ) -> TriangularSolve:
        """X with A X = self (A^T X = self with `transpose`) for triangular A (`upper`: its upper triangle is read),
        and a copy of A broadcast to the batch, as the deprecated torch.triangular_solve(b, A); see
        `solve_triangular` (torch.linalg's, which it calls).

        >>> Tensor([[4.0], [8.0]]).triangular_solve(Tensor([[2.0, 1.0], [0.0, 4.0]])).solution.tolist()
        [[1.0], [2.0]]
        """
        if not isinstance(A, Tensor):
            raise TypeError(f"triangular_solve: A must be a Tensor, got {type(A).__name__}")
        if self.ndim < 2 or A.ndim < 2:
            raise ShapeError(
                f"triangular_solve: b and A need at least 2 dims, got shapes {self.shape} (b) and {A.shape} (A)"
            )
        if A.shape[-1] != A.shape[-2]:
            raise ShapeError(f"triangular_solve: A must be (batches of) square matrices, got shape {A.shape}")
        if A.shape[-1] != self.shape[-2]:
            raise ShapeError(f"triangular_solve: b {self.shape} needs {A.shape[-1]} rows for A {A.shape}")
        if self.dtype != A.dtype:
            raise DTypeError(f"triangular_solve: b and A must have the same dtype, got {self.dtype} and {A.dtype}")
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"triangular_solve: not implemented for {self.dtype} (as torch); it takes floats")
        batch = tuple(np.broadcast_shapes(self.shape[:-2], A.shape[:-2]))
        coefficient = A.expand(*batch, *A.shape[-2:])
        solver = coefficient.transpose(-1, -2) if transpose else coefficient
        solution = solver.solve_triangular(
            self.expand(*batch, *self.shape[-2:]), upper=upper != transpose, unitriangular=unitriangular
        )
        return TriangularSolve(solution, coefficient.clone())

    def rsub(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:  # type: ignore[misc]
        """other - alpha * self, torch.rsub (`sub` with its operands swapped: the dtypes and alpha's checks are sub's).

        >>> Tensor([1.0, 2.0]).rsub(10.0, alpha=2).tolist()
        [8.0, 6.0]
        """
        if not isinstance(other, Tensor):
            other = self._const_operand(other, "rsub")
        return other.sub(self, alpha=alpha)

    # ------------------------------------------------------------------------------------------------------------
    # storage and layout queries

    def storage_offset(self: Tensor) -> int:  # type: ignore[misc]
        """Where this tensor starts in its storage, in elements (torch.Tensor.storage_offset): 0 for a tensor that is
        no view; for a view (a slice) its first element's position in the storage of the tensor it views (read back:
        one small kernel). A zero-size view reports 0.

        >>> x = Tensor.arange(6).reshape(2, 3); x.storage_offset(), x[1].storage_offset(), x.T[1:].storage_offset()
        (0, 3, 1)
        """
        _, positions, _ = _storage(self)
        if positions is None or not self.numel():
            return 0
        return int(positions.reshape(-1)[0].item())

    def data_ptr(self: Tensor) -> int:  # type: ignore[misc]
        """An int naming where this tensor's first element is (torch.Tensor.data_ptr): the id of the storage's owner
        (the tensor viewed, or this one) plus storage_offset() times the element size, so views of one storage that
        start at the same element give the same number, as torch's pointers; 0 for a zero-size tensor. Not an address
        the device can be read at.

        >>> x = Tensor.arange(4.0); x[1:].data_ptr() - x.data_ptr(), x.reshape(2, 2).data_ptr() == x.data_ptr()
        (4, True)
        """
        if not self.numel():
            return 0
        return id(_storage(self)[2]) + self.storage_offset() * self.element_size()

    def dim_order(self: Tensor) -> tuple[int, ...]:  # type: ignore[misc]
        """The dims from outermost to innermost in memory (torch.Tensor.dim_order): by decreasing stride, ties in dim
        order.

        >>> Tensor.ones(2, 3).T.dim_order()
        (1, 0)
        """
        strides = self.stride()
        return tuple(sorted(range(self.ndim), key=lambda d: -strides[d]))

    def is_inference(self: Tensor) -> bool:  # type: ignore[misc]
        """False: uopkit has no inference mode (torch.Tensor.is_inference)."""
        return False

    def is_pinned(self: Tensor) -> bool:  # type: ignore[misc]
        """False: uopkit has no page-locked host memory (torch.Tensor.is_pinned)."""
        return False

    def pin_memory(self: Tensor) -> Tensor:  # type: ignore[misc]
        """The tensor itself: uopkit has no page-locked host memory, copies to a device go as they would anyway."""
        return self

    def share_memory_(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Move this tensor's storage to shared memory, which processes started later (fork or spawn) and those it is
        sent to through multiprocessing (a Process's arguments, a Queue) map too: a write into it in place (an
        optimizer step, `add_`, `copy_`, setitem) in any of them shows in all, as torch's (Hogwild training). A lazy
        tensor is computed first; a shared one is left as it is. Returns the tensor. CPU only: other devices raise.

        >>> t = Tensor([1.0, 2.0]).share_memory_()
        >>> t.is_shared()
        True
        """
        return share_memory(self)

    def is_shared(self: Tensor) -> bool:  # type: ignore[misc]
        """Whether this tensor's storage is in shared memory (`share_memory_`, or received over it from another
        process)."""
        return shared_segment(self) is not None

    @property
    def retains_grad(self: Tensor) -> bool:  # type: ignore[misc]
        """Whether `backward()` fills `.grad` of this tensor though it is not a leaf (`retain_grad()` was called), as
        torch's.

        >>> x = Tensor([1.0], requires_grad=True); y = x * 2; y.retain_grad(); y.retains_grad, x.retains_grad
        (True, False)
        """
        return bool(self._requires_grad) and not self.is_leaf

    def type(self: Tensor, dtype: Any = None, non_blocking: bool = False, **kwargs: Any) -> str | Tensor:  # type: ignore[misc]
        """With no dtype torch's type name of this tensor ('torch.FloatTensor', 'torch.cuda.LongTensor'); with one
        (a dtype, its name, or a type name such as 'torch.IntTensor') the tensor cast to it (itself if it is that
        dtype already), as torch.Tensor.type.

        >>> Tensor([1.0]).type(), Tensor([1.5]).type("torch.IntTensor").tolist()
        ('torch.FloatTensor', [1])
        """
        if dtype is None:
            name = _TYPE_NAMES.get(self.dtype)
            if name is None:
                raise TypeError(f"type: torch has no type name for {self.dtype}")
            return f"torch.cuda.{name}" if self.is_cuda else f"torch.{name}"
        if isinstance(dtype, type) and hasattr(dtype, "__name__") and dtype.__name__ in _DTYPE_OF_TYPE_NAME:
            dtype = dtype.__name__
        if not isinstance(dtype, (DType, str)):
            # a torch.dtype or a torch tensor type: their names
            dtype = str(dtype)
        if isinstance(dtype, str):
            name = dtype.removeprefix("torch.")
            device = None
            if name.startswith("cuda."):
                name, device = name.removeprefix("cuda."), "CUDA"
            if name in _DTYPE_OF_TYPE_NAME:
                out = self.cast(_DTYPE_OF_TYPE_NAME[name])
                return out if device is None else out.cuda()
            try:
                dtype = _TORCH_DTYPE_NAMES.get(name) or to_dtype(name)
            except ValueError:
                raise ValueError(f"type: invalid type {dtype!r}") from None
        return self.cast(dtype)

    def cuda(self: Tensor, device: int | str | None = None, non_blocking: bool = False, **kwargs: Any) -> Tensor:  # type: ignore[misc]
        """The tensor on uopkit's CUDA device (`device`: its index, or 'cuda:1'), as torch.Tensor.cuda; an error that
        says what to install when no CUDA backend can run here.

        >>> Tensor([1.0]).cuda().device  # doctest: +SKIP
        'CUDA'
        """
        if isinstance(device, str):
            name, _, index = device.partition(":")
            if name.lower() != "cuda":
                raise ArgumentError(f"cuda: device must be a CUDA device or its index, got {device!r}")
            device = int(index) if index else None
        target = "CUDA" if not device else f"CUDA:{device}"
        try:
            Device[target]
        except DeviceError as e:
            raise DeviceError(
                f"cuda: no usable CUDA device ({e}); install uopkit's CUDA backend (`pip install ./plugins/cuda`: "
                "needs pycuda and an NVIDIA driver), or keep the tensor on its device"
            ) from None
        return self.to(target)

    def new_empty_strided(  # type: ignore[misc]
        self: Tensor,
        size: Sequence[int],
        stride: Sequence[int],
        *,
        dtype: DType | str | None = None,
        device: str | None = None,
        requires_grad: bool | None = None,
    ) -> Tensor:
        """`new_empty(size)` (torch.Tensor.new_empty_strided): the strides are checked against the size but the
        result is row-major (its stride() is contiguous): uopkit allocates no strided storage.

        >>> Tensor([1.0]).new_empty_strided((2, 3), (1, 2)).shape
        (2, 3)
        """
        size, stride = _int_tuple(size, "new_empty_strided", "size"), _int_tuple(stride, "new_empty_strided", "stride")
        if len(size) != len(stride):
            raise ShapeError(
                f"new_empty_strided: dimensionality of sizes {size} doesn't match that of strides {stride}"
            )
        return self.new_empty(size, dtype=dtype, device=device, requires_grad=requires_grad)

    def nonzero_static(self: Tensor, *, size: int, fill_value: int = -1) -> Tensor:  # type: ignore[misc]
        """`nonzero()` with exactly `size` rows (torch.Tensor.nonzero_static): cut after `size`, or padded with rows of
        `fill_value`. The dtype is nonzero's (int32).

        >>> Tensor([1, 0, 2, 0, 3]).nonzero_static(size=4).tolist()
        [[0], [2], [4], [-1]]
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ArgumentError(f"nonzero_static: size must be a non-negative int, got {size!r}")
        found = self.nonzero()
        assert isinstance(found, Tensor)
        if found.shape[0] >= size:
            return found[:size]
        pad = Tensor.full((size - found.shape[0], self.ndim), fill_value, dtype=found.dtype, device=self.device)
        return found.cat(pad, dim=0)

    def unsafe_split(self: Tensor, split_size: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:  # type: ignore[misc]
        """`split` (torch.Tensor.unsafe_split: the same parts, views here as there, which may be written in place while
        they need a gradient)."""
        return self._split(split_size, dim)

    def unsafe_split_with_sizes(self: Tensor, split_sizes: Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:  # type: ignore[misc]
        """`split_with_sizes` (torch.Tensor.unsafe_split_with_sizes)."""
        return self._split(split_sizes, dim)

    def unsafe_chunk(self: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:  # type: ignore[misc]
        """`chunk` (torch.Tensor.unsafe_chunk)."""
        return self._chunk(chunks, dim)

    # ------------------------------------------------------------------------------------------------------------
    # Python functions per element, and resizing

    def apply_(self: Tensor, callable: Callable[[Any], Any]) -> Tensor:  # type: ignore[misc]  # noqa: A002
        """`callable` applied to each element in place (torch.Tensor.apply_): run on the host, one Python call per
        element (slow, as torch's); not for a tensor that requires grad.

        >>> Tensor([1, 2, 3]).apply_(lambda v: v * 10).tolist()
        [10, 20, 30]
        """
        return _host_map(self, "apply_", callable, ())

    def map_(self: Tensor, tensor: Tensor, callable: Callable[[Any, Any], Any]) -> Tensor:  # type: ignore[misc]  # noqa: A002
        """`callable(self_element, other_element)` for each element (other broadcast to self's shape, of self's
        dtype), written in place on the host (torch.Tensor.map_).

        >>> Tensor([1.0, 2.0]).map_(Tensor([10.0]), lambda a, b: a + b).tolist()
        [11.0, 12.0]
        """
        return _host_map(self, "map_", callable, (tensor,))

    def map2_(self: Tensor, x: Tensor, y: Tensor, callable: Callable[[Any, Any, Any], Any]) -> Tensor:  # type: ignore[misc]  # noqa: A002
        """`callable(self_element, x_element, y_element)` for each element, in place on the host (torch's map2_)."""
        return _host_map(self, "map2_", callable, (x, y))

    def resize_(self: Tensor, *sizes: Any) -> Tensor:  # type: ignore[misc]
        """The tensor object itself reshaped to `sizes`, keeping its elements in row-major order (torch.Tensor.resize_):
        cut when there are fewer, and new elements zeros (torch leaves them uninitialized). The tensor then owns
        its values (no longer a view). Not for a tensor that requires grad, as torch.

        >>> t = Tensor([1.0, 2.0, 3.0]); t.resize_(2, 2).tolist()
        [[1.0, 2.0], [3.0, 0.0]]
        """
        shape = _int_tuple(sizes[0] if len(sizes) == 1 and not isinstance(sizes[0], int) else sizes, "resize_", "sizes")
        if any(n < 0 for n in shape):
            raise ArgumentError(f"resize_: sizes must be >= 0, got {shape}")
        if self._requires_grad:
            raise RuntimeError("resize_: can't resize a tensor that requires grad (as torch)")
        n, have = math.prod(shape), self.numel()
        flat = self.reshape(-1)
        if n < have:
            flat = flat[:n]
        elif n > have:
            flat = flat.cat(Tensor.zeros(n - have, dtype=self.dtype, device=self.device)) if have else flat.new_zeros(n)
        live_tensors.set_uop(self, flat.reshape(shape).contiguous().uop)
        self._view_of = None
        return self

    def to_dense(self: Tensor, dtype: Any = None, *, masked_grad: bool | None = None) -> Tensor:  # type: ignore[misc]
        """The tensor itself, as torch's to_dense of a dense (strided) tensor, which every tensor here is (a port of
        `emb.weight.grad.to_dense()` after `Embedding(sparse=True)`, whose gradient is dense here); with `dtype`, the
        values in that dtype (`to(dtype)`). `masked_grad` only matters for torch's sparse tensors.

        >>> t = Tensor([1.0, 0.0]); t.to_dense() is t
        True
        """
        return self if dtype is None else self.to(dtype)

    def dequantize(self: Tensor) -> Tensor:  # type: ignore[misc]
        """The values as float32, as torch's dequantize of a tensor that isn't quantized (none is here): a float32
        tensor is returned itself.

        >>> t = Tensor([1.0]); t.dequantize() is t
        True
        """
        return self.float()

    def resize_as_(self: Tensor, the_template: Tensor) -> Tensor:  # type: ignore[misc]
        """`resize_` to the shape of `the_template` (torch.Tensor.resize_as_)."""
        if not isinstance(the_template, Tensor):
            raise TypeError(f"resize_as_: the_template must be a Tensor, got {type(the_template).__name__}")
        return self.resize_(the_template.shape)


# torch's layout and device flags, all False here (uopkit has dense, strided, real tensors on its own devices)
for _flag in (
    "is_sparse", "is_sparse_csr", "is_quantized", "is_meta", "is_mkldnn", "is_nested", "is_vulkan", "is_xpu", "is_ipu",
    "is_mps", "is_xla", "is_mtia", "is_maia",
):  # fmt: skip
    setattr(
        TorchExtrasMixin, _flag, property(lambda self: False, doc=f"False, as torch's `{_flag}` for a dense tensor.")
    )

# torch's methods for sparse, quantized and complex tensors and raw storage: named errors, not AttributeErrors
_NO_SPARSE = "uopkit has no sparse tensors (every tensor is dense and strided)"
_NO_QUANTIZED = "uopkit has no quantized tensors (cast to an int dtype and keep the scale yourself)"
_NO_COMPLEX = "uopkit's complex tensors (Tensor.complex, uopkit.fft) don't have it"
_NO_STORAGE = "uopkit has no torch storage objects (see storage_offset(), data_ptr(), numpy())"
for _name, _why in (
    *((n, _NO_SPARSE) for n in ("to_sparse", "to_sparse_csr", "to_sparse_csc", "to_sparse_bsr", "to_sparse_bsc")),
    *((n, _NO_QUANTIZED) for n in ("q_scale", "q_zero_point", "q_per_channel_scales", "q_per_channel_zero_points",
                                   "q_per_channel_axis", "qscheme", "int_repr")),
    *((n, _NO_COMPLEX) for n in ("chalf",)),
    *((n, _NO_STORAGE) for n in ("storage", "untyped_storage", "set_", "record_stream")),
):  # fmt: skip
    setattr(TorchExtrasMixin, _name, _not_here(_name, _why))


def _check_histogram_weight(x: Tensor, weight: Tensor | None, shape: tuple[int, ...], op: str) -> None:
    # histogram's and histogramdd's weights: one per value (per point), of the input's dtype
    if weight is None:
        return
    if not isinstance(weight, Tensor) or weight.shape != shape:
        got = weight.shape if isinstance(weight, Tensor) else type(weight).__name__
        raise ShapeError(f"{op}: weight must be a tensor of shape {shape} (one per value), got {got}")
    if weight.dtype != x.dtype:
        raise DTypeError(f"{op}: weight is {weight.dtype}, expected the input's dtype {x.dtype}")


def _histogram_edges(x: Tensor, bins: Any, range_: Sequence[float] | None, op: str) -> Tensor:
    # the bin edges of histogram (and of one dimension of histogramdd): the given tensor, or `bins` equal bins over
    # `range_` (the data's min and max by default, widened by 0.5 each way when they are equal)
    if isinstance(bins, Tensor):
        if bins.ndim != 1:
            raise ShapeError(f"{op}: bins must be a 1-D tensor of edges, got shape {bins.shape}")
        if bins.dtype != x.dtype:
            raise DTypeError(f"{op}: bins is {bins.dtype}, expected the input's dtype {x.dtype}")
        if bins.numel() < 1:
            raise ShapeError(f"{op}: bins needs at least one edge")
        if range_ is not None:
            raise ArgumentError(f"{op}: range can't be given with a tensor of bin edges")
        return bins
    if isinstance(bins, bool) or not isinstance(bins, int):
        raise TypeError(f"{op}: bins must be an int or a 1-D tensor, got {type(bins).__name__}")
    if bins <= 0:
        raise ArgumentError(f"{op}: bins must be > 0, got {bins}")
    if range_ is not None:
        lo, hi = (float(v) for v in range_)
    elif x.numel():
        lo, hi = x.min().item(), x.max().item()
    else:
        lo, hi = 0.0, 1.0
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ArgumentError(f"{op}: the range [{lo}, {hi}] is not finite")
    if lo > hi:
        raise ArgumentError(f"{op}: min should not exceed max, got min {lo} and max {hi}")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return Tensor.linspace(lo, hi, bins + 1, dtype=x.dtype, device=x.device)


def _bin_membership(x: Tensor, edges: Tensor) -> Tensor:
    # (values, bins) bool: each 1-D value against each bin, [left, right), the last bin closed on the right
    nbins = edges.numel() - 1
    left, right = edges[:-1], edges[1:]
    last = Tensor.arange(nbins, device=x.device) == nbins - 1
    xs = x.reshape(-1).unsqueeze(1)
    return (xs >= left) & ((xs < right) | (last & (xs == right)))
