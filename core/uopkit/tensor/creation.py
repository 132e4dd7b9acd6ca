"""Tensor creation: constants, ranges, random values, from data (a mixin of `Tensor`)."""

from __future__ import annotations

import functools
import math
import secrets
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.device import Buffer
from uopkit.dtype import (
    DType,
    UnsupportedDTypeError,
    dtypes,
    least_upper_float,
    to_dtype,
    to_numpy_dtype,
)
from uopkit.engine.realize import buffers, capturing
from uopkit.helpers import prod
from uopkit.tensor.generator import (
    Generator,
    _philox,
    _seed_value,
    random_draw_rules,
    read_stream_state,
    stream_state,
)
from uopkit.tensor.leaf_constructors import _creates_leaf
from uopkit.tensor.support import (
    ArgumentError,
    DTypeError,
    ShapeError,
    _as_shape,
    _canonical_device,
    _check_stored_scalar,
    _dtype_arg,
    _host_np_dtype,
    _host_values,
    _largest_finite,
    _py_number,
    _reshape_uop,
    _shape_args,
)
from uopkit.tensor.unread import with_zero_gradient_to
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


# the host random draws made while TinyJit captures a function, one list per capture: (the buffer the values went to,
# a function that draws new ones from the same stream), so that every replay fills the buffer with new values (the
# kernels read the buffer; left as captured, every replay would reuse the same dropout mask)
random_draws: list[list[tuple[Buffer, Callable[[], np.ndarray]]]] = []


def _draw_again(draw: Callable[[np.random.Generator], np.ndarray], generator: Generator | None) -> np.ndarray:
    # a replay's draw, from the next stretch of the stream the captured one came from (a Generator's draws leave the
    # global stream alone in a replay too)
    return draw(Tensor._rng(generator))


def _random_tensor(
    draw: Callable[[np.random.Generator], np.ndarray], generator: Generator | None = None, **kwargs: Any
) -> Tensor:
    """A tensor of values drawn on the host by `draw` from `generator`'s stream, or the global one (Tensor.manual_seed)
    when None (recorded while TinyJit captures)."""
    t = Tensor(draw(Tensor._rng(generator)), **kwargs)
    if random_draws:
        random_draws[-1].append((buffers[t.uop.base], functools.partial(_draw_again, draw, generator)))
    return t


def _torch_normal_args(
    shape: tuple[Any, ...], mean: Any, std: Any, size: Sequence[int] | None
) -> tuple[Any, Any, Sequence[int] | None] | None:
    # torch.normal(mean, std, size=None) where the arguments can't be tinygrad's shape (ints) with numbers as
    # mean= and std=: None for tinygrad's form
    def number_or_tensor(a: Any) -> bool:
        return isinstance(a, Tensor) or (isinstance(a, float) and not isinstance(a, bool))

    torch_form = size is not None or isinstance(mean, Tensor) or isinstance(std, Tensor)
    torch_form |= any(number_or_tensor(a) for a in shape[:2])
    torch_form |= len(shape) == 3 and isinstance(shape[2], (tuple, list))
    if not torch_form:
        return None
    if len(shape) > 3:
        raise TypeError(f"normal() takes mean, std and size, got {len(shape)} positional arguments")
    args = [mean, std, size]
    for i, (name, default) in enumerate((("mean", 0.0), ("std", 1.0), ("size", None))):
        if i < len(shape):
            if args[i] is not default and not (isinstance(args[i], float) and args[i] == default):
                raise TypeError(f"normal() got multiple values for argument {name!r}")
            args[i] = shape[i]
    return args[0], args[1], args[2]


def _torch_normal(
    mean: Any, std: Any, size: Sequence[int] | None, generator: Generator | None, kwargs: dict[str, Any]
) -> Tensor:
    tensors = [a for a in (mean, std) if isinstance(a, Tensor)]
    for name, a in (("mean", mean), ("std", std)):
        if not isinstance(a, Tensor) and not isinstance(a, (int, float)):
            raise TypeError(f"normal: {name} must be a number or a tensor, got {type(a).__name__}")
    if not isinstance(std, Tensor) and std < 0:
        raise ArgumentError(f"normal expects std >= 0.0, but found std {std}")
    if not tensors:
        if size is None:
            raise TypeError("normal(mean, std) of two numbers needs size=, the shape to draw (torch.normal's form)")
        return Tensor.normal(*_shape_args((size,)), mean=mean, std=std, generator=generator, **kwargs)
    if size is not None or "dtype" in kwargs:
        what = "size" if size is not None else "dtype"
        raise TypeError(f"normal: {what}= is taken with a number mean and std only; here the tensors give the shape")
    # the tensor mean's dtype, else the std's (torch's), drawn in float64 for float64 as Tensor.normal does
    dtype = tensors[0].dtype
    if not dtypes.is_float(dtype):
        raise UnsupportedDTypeError(f"normal: mean and std must be float tensors, got {dtype}; cast with .float()")
    shape = Tensor.broadcast_shapes(*(t.shape for t in tensors))
    kwargs.setdefault("device", tensors[0].device)
    drawn = dtypes.float64 if dtype == dtypes.float64 else None
    eps = Tensor.randn(*shape, generator=generator, dtype=drawn, **kwargs)
    m = mean.detach() if isinstance(mean, Tensor) else mean
    s = std.detach() if isinstance(std, Tensor) else std
    value = (eps * s + m).cast(dtype)
    # torch's normal passes its parameters zero gradients (it is no reparameterized draw)
    for t in tensors:
        value = with_zero_gradient_to(value, t)
    return value


def _draw_numpy_dtype(dtype: DType) -> type[np.floating]:
    # float64 draws for float64 (53 random bits, as torch's: a float32 draw cast up is a multiple of 2**-24 and cuts
    # randn's tails near 5.4), float32 for every other dtype (so their seeded streams stay as they were)
    return np.float64 if dtype == dtypes.float64 else np.float32


def _triangle_indices(
    numpy_indices: Callable[..., tuple[np.ndarray, np.ndarray]],
    row: int,
    col: int,
    offset: int,
    dtype: DType | str,
    device: str | None,
    op: str,
) -> Tensor:
    # tril_indices / triu_indices: numpy's (the same row-major order as torch's), known on the host from the sizes
    for name, n in (("row", row), ("col", col), ("offset", offset)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"{op}: {name} must be an int, got {type(n).__name__}")
    if row < 0 or col < 0:
        raise ArgumentError(f"{op}: row and col must be non-negative, got {row} and {col}")
    dt = to_dtype(dtype)
    if not dtypes.is_int(dt):
        raise DTypeError(f"{op}: dtype must be an integer dtype, got {dt}")
    found = np.stack(numpy_indices(int(row), int(offset), int(col))).reshape(2, -1)
    return Tensor(found.astype(to_numpy_dtype(dt)), device=device, dtype=dt)


def _int_arange(start: int, step: int, n: int, dtype: DType, device: str, kwargs: dict[str, Any]) -> Tensor:
    # an integer (or bool) arange is computed where it is read, never on the host, so a one-hot compare against it
    # (indexing, gather, one_hot) becomes an indexed load instead of a pass over every position, and one of 2**31
    # positions or more costs no host array. It counts in int64 where `dtype` can't hold the positions or the values,
    # then casts: values past the dtype wrap, as PyTorch's and numpy's. (Float arguments were truncated, as PyTorch's.)
    last = start + (n - 1) * step
    fits = dtypes.is_int(dtype) and dtypes.min(dtype) <= min(start, last) and max(start, last) <= dtypes.max(dtype)
    # (an unsigned count takes no negative step)
    narrow = fits and n - 1 <= dtypes.max(dtype) and (step > 0 or not dtypes.is_unsigned(dtype))
    count = dtype if narrow else dtypes.int64
    if count == dtypes.int64:
        # (the same values modulo 2**64: arguments past int64 wrap into it)
        start, step = (((v + 2**63) % 2**64) - 2**63 for v in (start, step))
    iota = Tensor(UOp(Ops.IOTA, count, (UOp(Ops.DEVICE, arg=device),), n), **kwargs)
    values = iota if (start, step) == (0, 1) else iota * step + start
    return values if count == dtype else values.cast(dtype)


# positions per chunk of float values computed on the host (`_rounded_on_host`)
_HOST_CHUNK = 1 << 16


class _ArangeValues:
    """start + i * step in float64, as numpy's arange computes it."""

    def __init__(self, start: float, step: float) -> None:
        self.start, self.step = start, step

    def __call__(self, i: np.ndarray) -> np.ndarray:
        return self.start + i * self.step


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # a + b rounded, and what the rounding lost (exactly)
    total = a + b
    b_part = total - a
    return total, (a - (total - b_part)) + (b - b_part)


def _two_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # a * b rounded, and what the rounding lost (exactly, from Veltkamp's halves of each factor)
    product = a * b
    a_hi, b_hi = _upper_half(a), _upper_half(b)
    a_lo, b_lo = a - a_hi, b - b_hi
    return product, ((a_hi * b_hi - product) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo


def _upper_half(v: np.ndarray) -> np.ndarray:
    scaled = v * 134217729.0  # 2**27 + 1
    return scaled - (scaled - v)


def _sum_to_odd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # a + b rounded to odd: an inexact sum ends in a 1 bit, so a later rounding to fewer bits rounds once
    total, lost = _two_sum(a, b)
    even = (total.view(np.uint64) & 1) == 0
    return np.where((lost != 0) & even, np.nextafter(total, np.where(lost > 0, np.inf, -np.inf)), total)


def _fused(a: np.ndarray, b: np.ndarray, c: np.ndarray, dtype: DType) -> np.ndarray:
    """a * b + c rounded once to float32 or float64, as the C compiler's fused multiply-add (float64 arrays; for
    float32 their values are float32's): Boldo and Melquiond's exact sums, rounded to odd before the last rounding."""
    if dtype == dtypes.float32:
        # float32 factors have an exact float64 product, and the float64 sum rounded again to float32 is the fused
        # result except where it lands on a midpoint of float32's (or in its subnormals): those again, rounded to odd
        total = a * b + c
        out = total.astype(np.float32)
        again = np.flatnonzero(((total.view(np.uint64) & 0x1FFFFFFF) == 0x10000000) | (np.abs(total) < 2.0**-126))
        if again.size:
            a, b, c = (np.broadcast_to(v, total.shape)[again] for v in (a, b, c))
            out[again] = _sum_to_odd(a * b, c).astype(np.float32)
        return out
    with np.errstate(over="ignore", invalid="ignore"):
        product, product_lost = _two_product(a, b)
        head, head_lost = _two_sum(c, product)
        fused = head + _sum_to_odd(head_lost, product_lost)
    # (inf and NaN, and the parts past float64's range: the plain formula)
    return np.where(np.isfinite(fused), fused, a * b + c)


class _LinspaceValues:
    """torch.linspace's values at positions i, by its CPU kernel's formula: start and end converted to the dtype and
    step = (end - start) / (steps - 1) in it (float64 for an integer dtype); the first half start + step * i, the rest
    end - step * (steps - 1 - i), each a fused multiply-add. float16 and bfloat16 compute in float32 rounded to the
    dtype after every operation (the positions too), as their C++ operators do; an integer dtype truncates."""

    def __init__(self, start: float, end: float, steps: int, dtype: DType) -> None:
        self.steps, self.dtype = steps, dtype
        self.small = dtypes.is_float(dtype) and dtype.itemsize == 2
        # the type torch's arithmetic runs in
        self.compute = np.float32 if self.small or dtype == dtypes.float32 else np.float64
        if dtypes.is_int(dtype):
            # (a negative int into an unsigned dtype wraps; a float truncates)
            wrap = 1 << 8 * dtype.itemsize if dtypes.is_unsigned(dtype) else None
            self.start, self.end = (np.float64(int(v) % wrap if wrap else int(v)) for v in (start, end))
            self.step = (self.end - self.start) / np.float64(steps - 1)
            return
        self.start, self.end = (self._rounded(v) for v in (start, end))
        steps_less_one = self._rounded(self.compute(steps - 1))
        self.step = self._rounded(self._rounded(self.end - self.start) / steps_less_one)

    def _rounded(self, v: Any) -> Any:
        # a value of the compute type rounded to the dtype (a float16 or bfloat16 one kept as the float32 it is)
        v = np.asarray(v, self.compute)
        if self.dtype == dtypes.float16:
            return v.astype(np.float16).astype(np.float32)
        if self.dtype == dtypes.bfloat16:
            # (float32's top half, to nearest even; NaN stays NaN)
            bits = v.view(np.uint32)
            with np.errstate(over="ignore"):
                kept = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) & np.uint32(0xFFFF0000)).view(np.float32)
            return np.where(np.isnan(v), v, kept)
        return v

    def __call__(self, i: np.ndarray) -> np.ndarray:
        # (positions in order: those before the halfway point count up from start, the rest down from end)
        split = int(np.searchsorted(i, self.steps // 2))
        up, down = i[:split], self.steps - 1 - i[split:]
        return np.concatenate((self._along(up, self.start, self.step), self._along(down, self.end, -self.step)))

    def _along(self, n: np.ndarray, origin: Any, step: Any) -> np.ndarray:
        # origin + step * n, as torch's kernel computes it in the dtype
        # (the positions as the dtype's arithmetic takes them: an int64 converts to float32 there)
        n = self._rounded(n.astype(self.compute))
        with np.errstate(over="ignore", invalid="ignore"):
            if self.small:
                return self._rounded(origin + self._rounded(step * n))
            fused = dtypes.float32 if self.dtype == dtypes.float32 else dtypes.float64
            values = _fused(np.asarray(n, np.float64), np.float64(step), np.float64(origin), fused)
        return np.trunc(values) if dtypes.is_int(self.dtype) else values


def _rounded_on_host(n: int, dtype: DType, values: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    # `values(positions)` computed in float64 and rounded once to `dtype`, a chunk of positions at a time: the float64
    # array of all of them was twice the result, and its cast another copy (a 512 MB float32 linspace peaked at 2 GB)
    out = np.empty(n, _host_np_dtype(dtype))
    for lo in range(0, n, _HOST_CHUNK):
        out[lo : lo + _HOST_CHUNK] = values(np.arange(lo, min(n, lo + _HOST_CHUNK), dtype=np.float64))
    return out


def _arange_number(value: Any, what: str) -> Any:
    # arange's bounds and step as torch takes them: a 0-d tensor (`arange(len_tensor)`) as the number it holds, a
    # numpy scalar as the Python number of its kind
    if isinstance(value, Tensor):
        if value.ndim:
            raise TypeError(f"arange: {what} must be a number or a 0-d tensor, got a tensor of shape {value.shape}")
        return value.item()
    return _py_number(value)


def _window(
    name: str, window_length: int, periodic: bool, kwargs: dict[str, Any], shape: Callable[[np.ndarray], np.ndarray]
) -> Tensor:
    """A window of torch's `<name>`: `shape` maps the positions n / (N - 1) in [0, 1] of a symmetric window of N
    points to its values; a periodic window is the symmetric one of window_length + 1 points without its last (the
    form a DFT wants). Computed in float64 and rounded once to the dtype (torch computes in the dtype: last bits)."""
    if isinstance(window_length, bool) or not isinstance(window_length, (int, np.integer)):
        raise TypeError(f"{name}: window_length must be an int, got {type(window_length).__name__}")
    if window_length < 0:
        raise ArgumentError(f"{name}: window_length must be >= 0, got {window_length}")
    dtype = to_dtype(_dtype_arg(kwargs, dtypes.default_float))
    if not dtypes.is_float(dtype):
        raise DTypeError(f"{name}: the window's dtype must be a float dtype (as torch's), got {dtype}")
    if window_length <= 1:
        # (as torch: no points, or the single point 1)
        return Tensor(np.ones(window_length), dtype=dtype, **kwargs)
    n = window_length + 1 if periodic else window_length
    values = shape(np.arange(n, dtype=np.float64) / (n - 1))
    return Tensor(values[:window_length], dtype=dtype, **kwargs)


def _first_in_stable_order(keys: np.ndarray, k: int) -> np.ndarray:
    """`np.argsort(keys, -1, kind="stable")[:, :k]` for rows of keys, without sorting whole rows where k is small: the
    k-th smallest key of each row by a partition, then a stable sort of the keys up to it, kept in their positions'
    order (ties keep it). Multinomial's 1 draw of 8 rows of 50257: ~110 ms sorting, ~5 ms so. (A NaN key, 0 / 0 where
    an exponential draw is 0, sorts last: argsort then, which places it; short rows too, where a sort is cheap and a
    Python loop over many rows isn't.)"""
    if 4 * k > keys.shape[-1] or keys.shape[-1] < 2048 or np.isnan(keys).any():
        return np.argsort(keys, -1, kind="stable")[:, :k]
    if k == 1:
        # (the first of the smallest)
        return keys.argmin(-1)[:, None]
    kth = np.partition(keys, k - 1, -1)[:, k - 1]
    rows = []
    for row, bound in zip(keys, kth, strict=True):
        kept = np.flatnonzero(row <= bound)
        rows.append(kept[np.argsort(row[kept], kind="stable")[:k]])
    return np.stack(rows)


class CreationMixin:
    __slots__ = ()

    # ------------------------------------------------------------------------------------------------------------
    # creation

    @staticmethod
    @_creates_leaf
    def full(shape: int | Sequence[int], fill_value: Any, **kwargs: Any) -> Tensor:
        """A tensor of `shape` filled with `fill_value` (one constant, expanded: nothing is stored).

        >>> Tensor.full((2, 2), 7).tolist()
        [[7, 7], [7, 7]]
        """
        shape = _as_shape(shape)
        if any(s < 0 for s in shape):
            raise ShapeError(f"full: negative dimension in shape {shape}")
        # (a numpy scalar fills as a Python number, as torch's: np.log(2.0) gives float32, not float64)
        fill_value = _py_number(fill_value)
        dtype = kwargs.pop("dtype", None)
        if dtype is not None or isinstance(fill_value, float):
            # (an int without a dtype picks one that holds it)
            _check_stored_scalar(fill_value, to_dtype(dtype or dtypes.default_float), "full")
        t = Tensor(fill_value, dtype=dtype, device=kwargs.pop("device", None), **kwargs)
        return t.reshape((1,) * len(shape)).expand(shape)

    @staticmethod
    @_creates_leaf
    def zeros(*shape: Any, **kwargs: Any) -> Tensor:
        """A tensor of zeros (default float dtype).

        >>> Tensor.zeros(2, 3).shape
        (2, 3)
        """
        return Tensor.full(_shape_args(shape), 0.0, dtype=_dtype_arg(kwargs, dtypes.default_float), **kwargs)

    @staticmethod
    @_creates_leaf
    def ones(*shape: Any, **kwargs: Any) -> Tensor:
        """A tensor of ones (default float dtype).

        >>> Tensor.ones(2).tolist()
        [1.0, 1.0]
        """
        return Tensor.full(_shape_args(shape), 1.0, dtype=_dtype_arg(kwargs, dtypes.default_float), **kwargs)

    @staticmethod
    @_creates_leaf
    def empty(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """An allocated tensor whose values are whatever the memory held.

        >>> Tensor.empty(3, 2).shape
        (3, 2)
        """
        shape = _shape_args(shape)
        if any(s < 0 for s in shape):
            raise ShapeError(f"empty: negative dimension in shape {shape}")
        dt = to_dtype(dtypes.default_float if dtype is None else dtype)
        # bfloat16 is stored as its uint16 bits
        store_dt = dtypes.uint16 if dt == dtypes.bfloat16 else dt
        buf = UOp.new_buffer(_canonical_device(device), prod(shape), store_dt)
        buffers[buf] = Buffer(buf.arg[1], prod(shape), store_dt).allocate()
        t = Tensor(_reshape_uop(buf, shape))
        return Tensor(UOp(Ops.BITCAST, dt, (t.uop,))) if dt == dtypes.bfloat16 else t

    @_creates_leaf
    def full_like(self, fill_value: Any, **kwargs: Any) -> Tensor:
        """A tensor with this one's shape (and dtype, device unless given) filled with `fill_value`.

        >>> Tensor([1, 2]).full_like(5).tolist()
        [5, 5]
        """
        dtype = _dtype_arg(kwargs, self.dtype)
        return Tensor.full(self.shape, fill_value, dtype=dtype, device=kwargs.pop("device", self.device), **kwargs)

    @_creates_leaf
    def zeros_like(self, **kwargs: Any) -> Tensor:
        """Zeros with this tensor's shape and dtype.

        >>> Tensor([1.5, 2.5]).zeros_like().tolist()
        [0.0, 0.0]
        """
        return self.full_like(0, **kwargs)

    @_creates_leaf
    def ones_like(self, **kwargs: Any) -> Tensor:
        """Ones with this tensor's shape and dtype.

        >>> Tensor([3, 4]).ones_like().tolist()
        [1, 1]
        """
        return self.full_like(1, **kwargs)

    def empty_like(self, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """An allocated tensor of this one's shape (and dtype, device unless given), values unset.

        >>> Tensor([1, 2]).empty_like().shape
        (2,)
        """
        return Tensor.empty(
            self.shape, dtype=self.dtype if dtype is None else dtype, device=self.device if device is None else device
        )

    @staticmethod
    @_creates_leaf
    def arange(
        start: int | float | None = None,
        stop: int | float | None = None,
        step: int | float = 1,
        *,
        end: int | float | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """Evenly spaced values in [start, stop), like numpy.arange; `end` is torch's name for `stop`.

        >>> Tensor.arange(4).tolist()
        [0, 1, 2, 3]
        >>> Tensor.arange(start=1, end=3).tolist()
        [1, 2]
        """
        # (a lone first argument is the end, as torch names it)
        first = "end" if stop is None and end is None else "start"
        start, stop, step = (_arange_number(v, what) for v, what in ((start, first), (stop, "end"), (step, "step")))
        end = _arange_number(end, "end")
        if end is not None:
            if stop is not None:
                raise ArgumentError("arange: got both stop and end (torch's name for it); give one")
            stop, start = end, 0 if start is None else start
        if start is None:
            raise ArgumentError("arange: needs an end: arange(end), arange(start, end) or arange(start, end, step)")
        if stop is None:
            start, stop = 0, start
        dtype = to_dtype(_dtype_arg(kwargs, dtypes.from_py([start, stop, step])))
        if dtype.itemsize == 8 and dtypes.is_int(dtype):
            # a 64-bit integer arange truncates its arguments before anything else, as PyTorch's
            start, stop, step = int(start), int(stop), int(step)
        if step == 0:
            raise ArgumentError("arange: step must not be zero")
        n = max(math.ceil((stop - start) / step), 0)
        if n > 0 and not dtypes.is_float(dtype):
            return _int_arange(int(start), int(step), n, dtype, _canonical_device(kwargs.pop("device", None)), kwargs)
        # floats on a grid of integers (arange(n, dtype=float32), positions, ...): an integer arange cast, computed on
        # the device as one. Each integer is rounded once, by the cast, as numpy and PyTorch round the exact float64
        # they compute (float32 past 2**24 too: arange(2**24 + 1) ends in 2**24). A 16-bit float only where it holds
        # the integers exactly: its cast from a wide integer may go through float32 and round twice
        exact = 2**53 if dtype.itemsize >= 4 else 2**24
        if n > 0 and all(float(v).is_integer() for v in (start, step)) and abs(start) + n * abs(step) <= exact:
            ints = dtypes.from_py([int(start), int(start + n * step)])
            device = _canonical_device(kwargs.pop("device", None))
            return _int_arange(int(start), int(step), n, ints, device, kwargs).cast(dtype)
        # other floats: built on the host in float64 and cast once (start + i * step rounded once, as numpy)
        if not dtypes.is_float(dtype):
            return Tensor(np.zeros(0, np.int64), dtype=dtype, **kwargs)
        return Tensor(_rounded_on_host(n, dtype, _ArangeValues(start, step)), dtype=dtype, **kwargs)

    @staticmethod
    @_creates_leaf
    def linspace(
        start: float, stop: float | None = None, steps: int | None = None, *, end: float | None = None, **kwargs: Any
    ) -> Tensor:
        """`steps` evenly spaced values from `start` to `stop`, both included; `end` is torch's name for `stop`.

        >>> Tensor.linspace(0, 1, 5).tolist()
        [0.0, 0.25, 0.5, 0.75, 1.0]
        >>> Tensor.linspace(start=0, end=1, steps=3).tolist()
        [0.0, 0.5, 1.0]
        """
        if (stop is None) == (end is None) or steps is None:
            raise TypeError(f"linspace: give start, stop (or torch's end=, not both) and steps; got {stop=}, {end=}")
        stop = end if stop is None else stop
        if steps < 0:
            raise ArgumentError(f"linspace: steps must be >= 0, got {steps}")
        dtype = to_dtype(_dtype_arg(kwargs, dtypes.default_float))
        if dtype == dtypes.bool:
            raise DTypeError("linspace: no bool linspace (as PyTorch); build the values in a number dtype and cast")
        for v in (start, stop):
            _check_stored_scalar(v, dtype, "linspace")
        if steps <= 1:
            # (one value: start converted to the dtype, as torch's fill: an int truncated, a float16 through float32)
            values = np.array([start] * steps, np.float64)
            values = (
                np.trunc(values) if dtypes.is_int(dtype) else values.astype(np.float32 if dtype.itemsize == 2 else None)
            )
            return Tensor(_host_values(values, dtype), dtype=dtype, **kwargs)
        # torch's values bit for bit, a chunk of positions at a time
        values = _rounded_on_host(steps, dtype, _LinspaceValues(start, stop, steps, dtype))
        return Tensor(values, dtype=dtype, **kwargs)

    @staticmethod
    @_creates_leaf
    def eye(n: int, m: int | None = None, **kwargs: Any) -> Tensor:
        """The n x m identity matrix.

        >>> Tensor.eye(2).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
        """
        m = n if m is None else m
        if n < 0 or m < 0:
            raise ShapeError(f"eye: negative size ({n}, {m})")
        dtype = to_dtype(_dtype_arg(kwargs, dtypes.default_float))
        device = kwargs.pop("device", None)
        rows = Tensor.arange(n, device=device).reshape(n, 1)
        cols = Tensor.arange(m, device=device).reshape(1, m)
        return (rows == cols).cast(dtype)

    @staticmethod
    @_creates_leaf
    def hann_window(window_length: int, periodic: bool = True, **kwargs: Any) -> Tensor:
        """torch.hann_window: 0.5 - 0.5 cos(2 pi n / (N - 1)), periodic (N = window_length + 1, last point dropped)
        unless `periodic=False`.

        >>> Tensor.hann_window(4).tolist()
        [0.0, 0.5, 1.0, 0.5]
        """
        return _window("hann_window", window_length, periodic, kwargs, lambda t: 0.5 - 0.5 * np.cos(2 * np.pi * t))

    @staticmethod
    @_creates_leaf
    def hamming_window(
        window_length: int, periodic: bool = True, alpha: float = 0.54, beta: float = 0.46, **kwargs: Any
    ) -> Tensor:
        """torch.hamming_window: alpha - beta cos(2 pi n / (N - 1)), periodic unless `periodic=False`.

        >>> [round(v, 2) for v in Tensor.hamming_window(4, periodic=False).tolist()]
        [0.08, 0.77, 0.77, 0.08]
        """

        def hamming(t: np.ndarray) -> np.ndarray:
            return alpha - beta * np.cos(2 * np.pi * t)

        return _window("hamming_window", window_length, periodic, kwargs, hamming)

    @staticmethod
    @_creates_leaf
    def blackman_window(window_length: int, periodic: bool = True, **kwargs: Any) -> Tensor:
        """torch.blackman_window: 0.42 - 0.5 cos(2 pi n / (N - 1)) + 0.08 cos(4 pi n / (N - 1)), periodic unless
        `periodic=False`.

        >>> [abs(round(v, 2)) for v in Tensor.blackman_window(3, periodic=False).tolist()]
        [0.0, 1.0, 0.0]
        """

        def blackman(t: np.ndarray) -> np.ndarray:
            return 0.42 - 0.5 * np.cos(2 * np.pi * t) + 0.08 * np.cos(4 * np.pi * t)

        return _window("blackman_window", window_length, periodic, kwargs, blackman)

    @staticmethod
    @_creates_leaf
    def bartlett_window(window_length: int, periodic: bool = True, **kwargs: Any) -> Tensor:
        """torch.bartlett_window, the triangle 1 - |2n / (N - 1) - 1|, periodic unless `periodic=False`.

        >>> Tensor.bartlett_window(5, periodic=False).tolist()
        [0.0, 0.5, 1.0, 0.5, 0.0]
        """
        return _window("bartlett_window", window_length, periodic, kwargs, lambda t: 1 - np.abs(2 * t - 1))

    @staticmethod
    @_creates_leaf
    def kaiser_window(window_length: int, periodic: bool = True, beta: float = 12.0, **kwargs: Any) -> Tensor:
        """torch.kaiser_window: I0(beta sqrt(1 - (2n / (N - 1) - 1)^2)) / I0(beta), periodic unless `periodic=False`.

        >>> [round(v, 3) for v in Tensor.kaiser_window(3, periodic=False, beta=5.0).tolist()]
        [0.037, 1.0, 0.037]
        """

        def kaiser(t: np.ndarray) -> np.ndarray:
            return np.i0(beta * np.sqrt(np.clip(1 - (2 * t - 1) ** 2, 0, None))) / np.i0(beta)

        return _window("kaiser_window", window_length, periodic, kwargs, kaiser)

    @staticmethod
    def tril_indices(
        row: int, col: int, offset: int = 0, *, dtype: DType | str = dtypes.int32, device: str | None = None
    ) -> Tensor:
        """The (row, column) indices of the lower triangle of a row x col matrix (diagonal `offset` and below), as a
        2 x N tensor in row-major order, as torch.tril_indices (int32 by default; torch's is int64).

        >>> Tensor.tril_indices(3, 3).tolist()
        [[0, 1, 1, 2, 2, 2], [0, 0, 1, 0, 1, 2]]
        """
        return _triangle_indices(np.tril_indices, row, col, offset, dtype, device, "tril_indices")

    @staticmethod
    def triu_indices(
        row: int, col: int, offset: int = 0, *, dtype: DType | str = dtypes.int32, device: str | None = None
    ) -> Tensor:
        """The (row, column) indices of the upper triangle of a row x col matrix (diagonal `offset` and above), as a
        2 x N tensor in row-major order, as torch.triu_indices (int32 by default; torch's is int64).

        >>> Tensor.triu_indices(2, 3, 1).tolist()
        [[0, 0, 1], [1, 2, 2]]
        """
        return _triangle_indices(np.triu_indices, row, col, offset, dtype, device, "triu_indices")

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Seed the global random stream: the same seed gives the same sequence of random tensors (an int in
        [-2**63, 2**64), negative ones taken modulo 2**64, as torch). A `uopkit.Generator` seeded alike draws the
        same values from a stream of its own.

        >>> Tensor.manual_seed(1); a = Tensor.rand(3).tolist(); Tensor.manual_seed(1); a == Tensor.rand(3).tolist()
        True
        """
        Tensor._seed, Tensor._rng_counter = _seed_value(seed, "manual_seed"), 0

    @staticmethod
    def initial_seed() -> int:
        """The seed the global stream was last started from (torch.initial_seed; 0 before any seeding, where
        torch's is its default seed).

        >>> Tensor.manual_seed(5); Tensor.initial_seed()
        5
        """
        return Tensor._seed

    @staticmethod
    def seed() -> int:
        """Restart the global stream from a fresh non-deterministic seed and return that seed (torch.seed)."""
        Tensor.manual_seed(secrets.randbits(64))
        return Tensor._seed

    @staticmethod
    def get_rng_state() -> Tensor:
        """The global stream's state, for `set_rng_state` (torch.get_rng_state): a uint8 tensor of 16 bytes (the
        seed and the call number), not torch's 5056-byte Mersenne Twister state.

        >>> s = Tensor.get_rng_state(); a = Tensor.rand(3).tolist()
        >>> Tensor.set_rng_state(s); Tensor.rand(3).tolist() == a
        True
        """
        return stream_state(Tensor._seed, Tensor._rng_counter)

    @staticmethod
    def set_rng_state(new_state: Tensor) -> None:
        """Go back to a state `get_rng_state` returned (torch.set_rng_state): the draws after it are drawn again."""
        Tensor._seed, Tensor._rng_counter = read_stream_state(new_state, "set_rng_state", "Tensor.get_rng_state()")

    @staticmethod
    def _rng(generator: Generator | None = None) -> np.random.Generator:
        # the next stretch of `generator`'s stream, or of the global one when None (see tensor/generator.py)
        if generator is not None and not isinstance(generator, Generator):
            kind = f"{type(generator).__module__}.{type(generator).__qualname__}"
            raise TypeError(
                f"generator must be a uopkit.Generator or None, got {kind} (a torch.Generator's stream can't be "
                "drawn from here: make a uopkit.Generator().manual_seed(seed))"
            )
        # (inside a vmap: its randomness rule, uopkit.func.vmap)
        for rule in random_draw_rules.get():
            rule.drawing(generator)
        if generator is not None:
            return generator._next()
        Tensor._rng_counter += 1
        return _philox(Tensor._seed, Tensor._rng_counter)

    @staticmethod
    @_creates_leaf
    def rand(*shape: Any, generator: Generator | None = None, **kwargs: Any) -> Tensor:
        """Uniform samples in [0, 1), drawn from `generator` (a uopkit.Generator) or the global stream.

        >>> Tensor.rand(2, 3).shape
        (2, 3)
        """
        dtype, size = to_dtype(_dtype_arg(kwargs, dtypes.default_float)), _shape_args(shape)
        if not dtypes.is_float(dtype):
            raise TypeError(f"rand: dtype must be a float dtype, got {dtype} (use randint for integers)")
        if dtype in dtypes.halves:
            # whole multiples of the dtype's spacing below 1 (as torch draws them): a float32 draw rounded to a half
            # float could round up to 1.0
            steps = 2 ** (11 if dtype == dtypes.float16 else 8)
            draw = lambda rng: (rng.integers(0, steps, size) / steps).astype(np.float32)  # noqa: E731
            return _random_tensor(draw, generator, **kwargs).cast(dtype)
        drawn = _draw_numpy_dtype(dtype)
        return _random_tensor(lambda rng: rng.random(size, dtype=drawn), generator, **kwargs).cast(dtype)

    @staticmethod
    @_creates_leaf
    def randn(*shape: Any, generator: Generator | None = None, **kwargs: Any) -> Tensor:
        """Standard normal samples, drawn from `generator` (a uopkit.Generator) or the global stream.

        >>> Tensor.randn(4).shape
        (4,)
        """
        dtype, size = to_dtype(_dtype_arg(kwargs, dtypes.default_float)), _shape_args(shape)
        drawn = _draw_numpy_dtype(dtype)
        draw = lambda rng: rng.standard_normal(size, dtype=drawn)  # noqa: E731
        return _random_tensor(draw, generator, **kwargs).cast(dtype)

    @_creates_leaf
    def rand_like(self, *, generator: Generator | None = None, **kwargs: Any) -> Tensor:
        """Uniform samples in [0, 1) with this tensor's shape and (float) dtype."""
        dtype = _dtype_arg(kwargs, least_upper_float(self.dtype))
        return Tensor.rand(self.shape, dtype=dtype, generator=generator, **kwargs)

    @_creates_leaf
    def randn_like(self, *, generator: Generator | None = None, **kwargs: Any) -> Tensor:
        """Standard normal samples with this tensor's shape and (float) dtype."""
        dtype = _dtype_arg(kwargs, least_upper_float(self.dtype))
        return Tensor.randn(self.shape, dtype=dtype, generator=generator, **kwargs)

    @_creates_leaf
    def randint_like(
        self, low: int, high: int | None = None, *, generator: Generator | None = None, **kwargs: Any
    ) -> Tensor:
        """Integers uniformly drawn from [low, high) (one bound: [0, low)) with this tensor's shape, in its dtype and
        on its device unless `dtype=`/`device=` say otherwise (torch.randint_like: a float tensor's are floats).

        >>> Tensor.zeros(3, dtype=dtypes.int32).randint_like(2, 3).tolist()
        [2, 2, 2]
        """
        low, high = (0, low) if high is None else (low, high)
        dtype = to_dtype(_dtype_arg(kwargs, self.dtype))
        kwargs.setdefault("device", self.device)
        # (drawn as int64 for a float or bool dtype, then converted)
        drawn = dtype if dtypes.is_int(dtype) else dtypes.int64
        return Tensor.randint(self.shape, low=low, high=high, dtype=drawn, generator=generator, **kwargs).cast(dtype)

    @staticmethod
    @_creates_leaf
    def uniform(
        *shape: Any, low: float = 0.0, high: float = 1.0, generator: Generator | None = None, **kwargs: Any
    ) -> Tensor:
        """Uniform samples in [low, high).

        >>> bool((Tensor.uniform(100, low=2, high=3) >= 2).all().item())
        True
        """
        dtype = to_dtype(_dtype_arg(kwargs, dtypes.default_float))
        if dtypes.is_int(dtype):
            # an integer dtype draws each of [low, high) equally often (truncating low + u * (high - low) would
            # give 0 twice the share of the others when low < 0)
            steps = (Tensor.rand(*shape, generator=generator, **kwargs) * (high - low)).cast(dtype)
            return steps.minimum(math.ceil(high - low) - 1) + int(low)
        # (drawn in float64 for float64, see _draw_numpy_dtype)
        drawn = dtypes.float64 if dtype == dtypes.float64 else None
        return (Tensor.rand(*shape, generator=generator, dtype=drawn, **kwargs) * (high - low) + low).cast(dtype)

    @staticmethod
    @_creates_leaf
    def normal(
        *shape: Any,
        mean: Any = 0.0,
        std: Any = 1.0,
        size: Sequence[int] | None = None,
        generator: Generator | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """Normal samples with the given mean and standard deviation: tinygrad's `Tensor.normal(*shape, mean=, std=)`,
        or torch.normal's forms, taken where a mean or std is a tensor, a float is given by position or `size=` is
        given: `normal(mean, std)` with a tensor for either (one draw per element of their broadcast shape, in the
        tensor mean's dtype, else the std's; zero gradients to them, as torch's) and `normal(mean, std, size)` of
        numbers.

        >>> Tensor.normal(3, mean=1.0, std=0.0).tolist()
        [1.0, 1.0, 1.0]
        >>> Tensor.normal(Tensor([1.0, 5.0]), 0.0).tolist()
        [1.0, 5.0]
        """
        torch_form = _torch_normal_args(shape, mean, std, size)
        if torch_form is not None:
            return _torch_normal(*torch_form, generator, kwargs)
        dtype = to_dtype(_dtype_arg(kwargs, dtypes.default_float))
        drawn = dtypes.float64 if dtype == dtypes.float64 else None
        return (Tensor.randn(*shape, generator=generator, dtype=drawn, **kwargs) * std + mean).cast(dtype)

    @staticmethod
    @_creates_leaf
    def randint(
        *shape: Any,
        low: int = 0,
        high: int = 10,
        size: Any = None,
        generator: Generator | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """Integers uniformly drawn from [low, high): `randint(*shape, low=, high=)` or torch's
        `randint(high, size)` and `randint(low, high, size)` (`size` positional or a keyword).

        >>> Tensor.randint(5, low=3, high=4).tolist(), Tensor.randint(3, 4, (2,)).tolist()
        ([3, 3, 3, 3, 3], [3, 3])
        >>> Tensor.randint(3, 4, size=(2,)).tolist()
        [3, 3]
        """
        if size is not None:
            # (after the bounds, as torch's positional size)
            shape = (*shape, tuple(size) if isinstance(size, (tuple, list)) else (size,))
        if len(shape) in (2, 3) and isinstance(shape[-1], (tuple, list)):
            # torch's order: the bounds first, the size last
            bounds, shape = shape[:-1], tuple(shape[-1])
            low, high = (0, bounds[0]) if len(bounds) == 1 else bounds
        if not all(isinstance(b, (int, np.integer)) and not isinstance(b, bool) for b in (low, high)):
            raise TypeError(f"randint: low and high must be ints, got {low!r} and {high!r}")
        if high <= low:
            raise ArgumentError(f"randint: high ({high}) must be greater than low ({low})")
        dtype = to_dtype(_dtype_arg(kwargs, dtypes.int32))
        # (a bool or float dtype, as torch's: the integers of [low, high) drawn as int64, then converted)
        drawn = dtype if dtypes.is_int(dtype) else dtypes.int64
        if dtype == dtypes.bool:
            lowest, highest = 0, 1
        elif dtypes.is_float(dtype):
            highest = int(_largest_finite(dtype))
            lowest = -highest
        elif dtypes.is_int(dtype):
            lowest, highest = int(dtypes.min(dtype)), int(dtypes.max(dtype))
        else:
            raise TypeError(f"randint: dtype must be an integer, bool or float dtype, got {dtype}")
        if not lowest <= low or high - 1 > highest:
            # (numpy's astype would wrap the draws into the dtype)
            raise ArgumentError(
                f"randint: [{low}, {high}) doesn't fit {dtype} (its values {lowest}..{highest}); pass bounds in that "
                "range or a wider dtype (dtype=dtypes.int64)"
            )
        size, np_dtype = _shape_args(shape), to_numpy_dtype(drawn)
        draw = lambda rng: rng.integers(low, high, size, dtype=np.int64).astype(np_dtype)  # noqa: E731
        out = _random_tensor(draw, generator, **kwargs)
        return out if drawn is dtype else out.cast(dtype)

    @staticmethod
    @_creates_leaf
    def randperm(
        n: int,
        device: str | None = None,
        dtype: DType | str = dtypes.int32,
        *,
        generator: Generator | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """A random permutation of 0 .. n-1.

        >>> sorted(Tensor.randperm(4).tolist())
        [0, 1, 2, 3]
        """
        if n < 0:
            raise ArgumentError(f"randperm: n must be >= 0, got {n}")
        draw = lambda rng: rng.permutation(n).astype(np.int64)  # noqa: E731
        perm = _random_tensor(draw, generator, device=device, **kwargs)
        return perm.cast(to_dtype(dtype))

    def bernoulli(self, p: float | None = None, *, generator: Generator | None = None) -> Tensor:
        """1 with probability `p` (or each element's own value, a probability in [0, 1]), else 0, in this tensor's
        (float) dtype, as torch.bernoulli; no gradient. Drawn from `generator` or the global stream.

        >>> Tensor([0.0, 1.0]).bernoulli().tolist()
        [0.0, 1.0]
        """
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"bernoulli: needs a float tensor of probabilities, got {self.dtype}")
        if p is not None and not 0 <= p <= 1:
            raise ArgumentError(f"bernoulli: p must be in [0, 1], got {p}")
        draw = Tensor.rand(*self.shape, device=self.device, generator=generator)
        return (draw < (p if p is not None else self.detach().float())).cast(self.dtype)

    def multinomial(
        self, num_samples: int = 1, replacement: bool = False, *, generator: Generator | None = None
    ) -> Tensor:
        """`num_samples` category indices drawn from each row of (unnormalized, non-negative) weights (1-D or 2-D),
        int32, as torch.multinomial, from `generator` or the global stream. Without replacement no index repeats
        (zero-weight categories come last, as in torch). The weights are read back to check them: floating point,
        finite, non-negative, a positive sum per row (no rows at all give a (0, num_samples) draw, as torch's).

        >>> Tensor([0.0, 1.0, 0.0]).multinomial(2, replacement=True).tolist()
        [1, 1]
        """
        if self.ndim not in (1, 2):
            raise ShapeError(f"multinomial: weights must be 1-D or 2-D, got shape {self.shape}")
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"multinomial: weights must be floating point, got {self.dtype}; cast them with .float()")
        n_cat = self.shape[-1]
        if num_samples <= 0:
            raise ArgumentError(f"multinomial: num_samples must be positive, got {num_samples}")
        if not replacement and num_samples > n_cat:
            raise ArgumentError(
                f"multinomial: can't draw {num_samples} samples from {n_cat} categories without replacement"
            )
        if capturing:
            # the weights are read back and sampled on the host: a TinyJit replay would return the captured sample
            raise RuntimeError(
                "multinomial: samples on the host from weights read back, which a TinyJit replay can't repeat (it "
                "would return the captured sample every time); call it outside the jitted function"
            )
        if n_cat == 0:
            raise ArgumentError(f"multinomial: weights {self.shape} have no categories to draw from")
        if self.ndim == 2 and self.shape[0] == 0:
            # no rows: no draws (torch's (0, num_samples))
            return Tensor.empty(0, num_samples, dtype=dtypes.int32, device=self.device)
        w = self.float().numpy().astype(np.float64).reshape(-1, n_cat)
        if np.isnan(w).any() or np.isinf(w).any() or (w < 0).any():
            raise ArgumentError("multinomial: weights must be finite and non-negative")
        totals = w.sum(-1, keepdims=True)
        if (totals == 0).any():
            raise ArgumentError("multinomial: every row of weights needs a positive sum")
        rng = Tensor._rng(generator)
        if replacement:
            # inverse CDF: the first category whose cumulative weight exceeds a uniform draw
            cdf = np.cumsum(w / totals, -1)
            u = rng.random((w.shape[0], num_samples))
            picks = np.stack([np.searchsorted(row, draws, side="right") for row, draws in zip(cdf, u, strict=True)])
            # a zero-weight last category can't be picked: rounding in the cdf's last step stays in range
            picks = np.minimum(picks, (w > 0).cumsum(-1).argmax(-1)[:, None])
        else:
            # exponential races (the Gumbel-top-k trick): the num_samples smallest Exp(1) / w are a draw without
            # replacement; zero weights give inf and come last
            with np.errstate(divide="ignore"):
                keys = rng.exponential(size=w.shape) / w
            picks = _first_in_stable_order(keys, num_samples)
        picks = picks.astype(np.int32)
        return Tensor(picks if self.ndim == 2 else picks[0], device=self.device)

    @staticmethod
    @_creates_leaf
    def scaled_uniform(*shape: Any, **kwargs: Any) -> Tensor:
        """Uniform in [-1, 1) scaled by 1/sqrt(number of elements).

        >>> Tensor.scaled_uniform(4, 4).shape
        (4, 4)
        """
        return Tensor.uniform(*shape, low=-1.0, high=1.0, **kwargs) * (prod(_shape_args(shape)) ** -0.5)

    @staticmethod
    @_creates_leaf
    def glorot_uniform(*shape: Any, **kwargs: Any) -> Tensor:
        """Glorot/Xavier uniform: bound sqrt(6 / (fan_in + fan_out)) with fan_out = shape[0].

        >>> Tensor.glorot_uniform(3, 5).shape
        (3, 5)
        """
        s = _shape_args(shape)
        bound = math.sqrt(6 / (s[0] + prod(s[1:]))) if s else 1.0
        return Tensor.uniform(*s, low=-1.0, high=1.0, **kwargs) * bound

    @staticmethod
    @_creates_leaf
    def kaiming_uniform(*shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
        """Kaiming/He uniform for a leaky-ReLU slope `a`; fan_in = prod(shape[1:]).

        >>> Tensor.kaiming_uniform(8, 4).shape
        (8, 4)
        """
        s = _shape_args(shape)
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a**2)) / math.sqrt(max(prod(s[1:]), 1))
        return Tensor.uniform(*s, low=-bound, high=bound, **kwargs)

    @staticmethod
    @_creates_leaf
    def kaiming_normal(*shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
        """Kaiming/He normal for a leaky-ReLU slope `a`; fan_in = prod(shape[1:]).

        >>> Tensor.kaiming_normal(8, 4).shape
        (8, 4)
        """
        s = _shape_args(shape)
        std = math.sqrt(2.0 / (1 + a**2)) / math.sqrt(max(prod(s[1:]), 1))
        return Tensor.normal(*s, mean=0.0, std=std, **kwargs)
