"""Tensor: a lazy value built as a UOp graph, realized by the scheduler into compiled kernels."""

from __future__ import annotations

import functools
import itertools
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from uopkit.device import Buffer, Device
from uopkit.dtype import (
    DType,
    dtypes,
    from_numpy_dtype,
    least_upper_dtype,
    least_upper_float,
    to_dtype,
    to_numpy_dtype,
)
from uopkit.engine.realize import buffers
from uopkit.helpers import CHECK_INDEX, prod
from uopkit.schedule import live_tensors as _all_tensors
from uopkit.uop.ops import GroupOp, Ops, UOp

_contiguous_ids = itertools.count()


class ShapeError(ValueError, RuntimeError):
    """Shapes that don't fit an op: a ValueError, and a RuntimeError where PyTorch users catch one."""


class ArgumentError(ValueError, RuntimeError):
    """An argument an op can't take (PyTorch raises RuntimeError there): caught as either."""


class EmptyReduceError(ValueError, IndexError, RuntimeError):
    """A max/min/argmax over an empty axis: PyTorch raises IndexError (RuntimeError without an axis)."""


def _canonical_device(device: str | None) -> str:
    return Device.canonicalize(device) if device is not None else Device.DEFAULT


def _normalize_axis(axis: int, ndim: int, op: str, shape: tuple[int, ...] | None = None) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        of = f"shape {shape}" if shape is not None else f"{ndim} dimensions"
        raise IndexError(f"{op}: axis {axis} is out of range for a tensor of {of}")
    return axis % ndim if ndim else 0


def _flatten_list(x: Any) -> tuple[list[Any], tuple[int, ...]]:
    if not isinstance(x, (list, tuple)):
        return [x], ()
    if len(x) == 0:
        return [], (0,)
    parts = [_flatten_list(v) for v in x]
    shapes = {p[1] for p in parts}
    if len(shapes) != 1:
        raise ValueError(f"ragged nested list: sub-lists have shapes {sorted(shapes)}")
    return [v for p in parts for v in p[0]], (len(x), *parts[0][1])


def _creates_leaf(fn: Any) -> Any:
    """A constructor taking `requires_grad=`: the tensor it returns is a leaf of its own. Constants are hash-consed
    (two `Tensor.ones(3)` are one node), so a leaf built from one gets a node of its own (a CONTIGUOUS with a fresh
    arg) and `backward()` gives every such tensor its own gradient."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Tensor:
        requires_grad = kwargs.pop("requires_grad", None)
        t = fn(*args, **kwargs)
        if requires_grad and t.uop.base.op is not Ops.BUFFER:
            t = t.contiguous()
        if requires_grad is not None:
            t.requires_grad = requires_grad
        return t

    return wrapper


class Tensor:
    """A multi-dimensional array on a device, computed lazily.

    >>> Tensor([1, 2, 3]).add(1).tolist()
    [2, 3, 4]
    """

    __slots__ = ("uop", "requires_grad", "grad", "__weakref__")
    training: bool = False
    _seed: int = 0
    _rng_counter: int = 0

    def __init__(
        self,
        data: Any,
        device: str | None = None,
        dtype: DType | str | None = None,
        requires_grad: bool | None = None,
    ) -> None:
        dt = to_dtype(dtype) if dtype is not None else None
        self.requires_grad = requires_grad
        self.grad: Tensor | None = None
        if isinstance(data, UOp):
            self.uop = data if dt is None else Tensor(data).cast(dt).uop
        elif isinstance(data, Tensor):
            self.uop = data.uop if dt is None else data.cast(dt).uop
        elif isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
            dt = dt or dtypes.from_py(data)
            if requires_grad:
                # a leaf of its own: equal constants are one (hash-consed) node and would share a gradient
                self.uop = _from_numpy(np.array(data, dtype=_host_np_dtype(dt)), _canonical_device(device), dt)
            else:
                self.uop = UOp(Ops.CONST, dt, (UOp(Ops.DEVICE, arg=_canonical_device(device)),), _cast_py(data, dt))
        elif isinstance(data, (list, tuple)):
            flat, shape = _flatten_list(data)
            dt = dt or (dtypes.from_py(flat) if flat else dtypes.default_float)
            arr = np.array(flat, dtype=to_numpy_dtype(dt) if dt != dtypes.bfloat16 else np.float32).reshape(shape)
            self.uop = _from_numpy(arr, _canonical_device(device), dt)
        elif isinstance(data, np.ndarray) or np.isscalar(data):
            arr = np.asarray(data)
            src_dt = from_numpy_dtype(arr.dtype)
            self.uop = _from_numpy(arr, _canonical_device(device), src_dt)
            if dt is not None and dt != src_dt:
                self.uop = self.uop.cast(dt)
        else:
            raise TypeError(f"Tensor() can't be built from {type(data).__name__}; pass a list, number or numpy array")
        _all_tensors.add(self)

    # ------------------------------------------------------------------------------------------------------------
    # properties

    @property
    def shape(self) -> tuple[int, ...]:
        shape = self.uop.shape
        assert shape is not None, f"{self.uop.op} has no shape"
        return shape

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def device(self) -> str:
        return self.uop.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<Tensor shape={self.shape} dtype={self.dtype} device={self.device}>"

    def element_size(self) -> int:
        return self.dtype.itemsize

    def nbytes(self) -> int:
        return self.numel() * self.element_size()

    # ------------------------------------------------------------------------------------------------------------
    # realizing

    def kernelize(self, *others: Tensor) -> Tensor:
        """Turn every value that must be computed into STORE(BUFFER, KERNEL(...)) without running anything."""
        from uopkit.schedule import kernelize_tensors

        tensors = [self, *others]
        bits = [_bits_tensor(t) for t in tensors]
        kernelize_tensors(bits)
        _rewrap_bf16(tensors, bits)
        return self

    def realize(self, *others: Tensor) -> Tensor:
        """Compute this tensor (and `others`) into device buffers."""
        from uopkit.engine.realize import realize_tensors

        tensors = [self, *others]
        bits = [_bits_tensor(t) for t in tensors]
        realize_tensors(bits)
        _rewrap_bf16(tensors, bits)
        return self

    def _buffer(self) -> Buffer:
        # a contiguous buffer holding exactly this tensor's values, in order
        if self.dtype == dtypes.bfloat16:
            # the uint16 bits: the same bytes
            return Tensor(_storage_uop(self.uop))._buffer()
        self.realize()
        t = self if self._is_plain_buffer() else self.contiguous().realize()
        base = t.uop.base
        return buffers[base]

    def _is_plain_buffer(self) -> bool:
        base = self.uop.base
        if base.op is not Ops.BUFFER or base not in buffers:
            return False
        node = self.uop
        while node.op is Ops.RESHAPE:
            node = node.src[0]
        return node is base

    def numpy(self) -> np.ndarray:
        """The values as a numpy array (copied to the host)."""
        if self.dtype == dtypes.bfloat16:
            return self.cast(dtypes.float32).numpy()
        if 0 in self.shape:
            return np.zeros(self.shape, dtype=to_numpy_dtype(self.dtype))
        return self._buffer().numpy().reshape(self.shape)

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Any:
        if self.numel() != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    def data(self) -> memoryview:
        return memoryview(self.numpy())

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
        dtype = kwargs.pop("dtype", None)
        t = Tensor(fill_value, dtype=dtype, device=kwargs.pop("device", None), **kwargs)
        return t.reshape((1,) * len(shape)).expand(shape)

    @staticmethod
    def zeros(*shape: Any, **kwargs: Any) -> Tensor:
        """A tensor of zeros (default float dtype).

        >>> Tensor.zeros(2, 3).shape
        (2, 3)
        """
        return Tensor.full(_shape_args(shape), 0.0, dtype=kwargs.pop("dtype", dtypes.default_float), **kwargs)

    @staticmethod
    def ones(*shape: Any, **kwargs: Any) -> Tensor:
        """A tensor of ones (default float dtype).

        >>> Tensor.ones(2).tolist()
        [1.0, 1.0]
        """
        return Tensor.full(_shape_args(shape), 1.0, dtype=kwargs.pop("dtype", dtypes.default_float), **kwargs)

    @staticmethod
    @_creates_leaf
    def empty(*shape: Any, dtype: DType | str = dtypes.default_float, device: str | None = None) -> Tensor:
        """An allocated tensor whose values are whatever the memory held.

        >>> Tensor.empty(3, 2).shape
        (3, 2)
        """
        shape = _shape_args(shape)
        if any(s < 0 for s in shape):
            raise ShapeError(f"empty: negative dimension in shape {shape}")
        dt = to_dtype(dtype)
        # bfloat16 is stored as its uint16 bits
        store_dt = dtypes.uint16 if dt == dtypes.bfloat16 else dt
        buf = UOp.new_buffer(_canonical_device(device), prod(shape), store_dt)
        buffers[buf] = Buffer(buf.arg[1], prod(shape), store_dt).allocate()
        t = Tensor(_reshape_uop(buf, shape))
        return Tensor(UOp(Ops.BITCAST, dt, (t.uop,))) if dt == dtypes.bfloat16 else t

    def full_like(self, fill_value: Any, **kwargs: Any) -> Tensor:
        """A tensor with this one's shape (and dtype, device unless given) filled with `fill_value`.

        >>> Tensor([1, 2]).full_like(5).tolist()
        [5, 5]
        """
        dtype = kwargs.pop("dtype", self.dtype)
        return Tensor.full(self.shape, fill_value, dtype=dtype, device=kwargs.pop("device", self.device), **kwargs)

    def zeros_like(self, **kwargs: Any) -> Tensor:
        """Zeros with this tensor's shape and dtype.

        >>> Tensor([1.5, 2.5]).zeros_like().tolist()
        [0.0, 0.0]
        """
        return self.full_like(0, **kwargs)

    def ones_like(self, **kwargs: Any) -> Tensor:
        """Ones with this tensor's shape and dtype.

        >>> Tensor([3, 4]).ones_like().tolist()
        [1, 1]
        """
        return self.full_like(1, **kwargs)

    @staticmethod
    @_creates_leaf
    def arange(start: int | float, stop: int | float | None = None, step: int | float = 1, **kwargs: Any) -> Tensor:
        """Evenly spaced values in [start, stop), like numpy.arange.

        >>> Tensor.arange(4).tolist()
        [0, 1, 2, 3]
        """
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange: step must not be zero")
        n = max(math.ceil((stop - start) / step), 0)
        dtype = to_dtype(kwargs.pop("dtype", dtypes.from_py([start, stop, step])))
        # an iota is data, not computation: build it on the host in float64/int64 and cast once
        values = start + np.arange(n, dtype=np.float64 if dtypes.is_float(dtype) else np.int64) * step
        return Tensor(_host_values(values, dtype), dtype=dtype, **kwargs)

    @staticmethod
    @_creates_leaf
    def linspace(start: float, stop: float, steps: int, **kwargs: Any) -> Tensor:
        """`steps` evenly spaced values from `start` to `stop`, both included.

        >>> Tensor.linspace(0, 1, 5).tolist()
        [0.0, 0.25, 0.5, 0.75, 1.0]
        """
        if steps < 0:
            raise ValueError(f"linspace: steps must be >= 0, got {steps}")
        dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
        values = np.linspace(start, stop, steps, dtype=np.float64)
        return Tensor(_host_values(values, dtype), dtype=dtype, **kwargs)

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
        dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
        device = kwargs.pop("device", None)
        rows = Tensor.arange(n, device=device).reshape(n, 1)
        cols = Tensor.arange(m, device=device).reshape(1, m)
        return (rows == cols).cast(dtype)

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Seed the random generator: the same seed gives the same sequence of random tensors.

        >>> Tensor.manual_seed(1); a = Tensor.rand(3).tolist(); Tensor.manual_seed(1); a == Tensor.rand(3).tolist()
        True
        """
        Tensor._seed, Tensor._rng_counter = seed, 0

    @staticmethod
    def _rng() -> np.random.Generator:
        # Philox keyed by (seed, call counter): reproducible for a given seed and call order
        Tensor._rng_counter += 1
        return np.random.Generator(np.random.Philox(key=Tensor._seed, counter=Tensor._rng_counter))

    @staticmethod
    @_creates_leaf
    def rand(*shape: Any, **kwargs: Any) -> Tensor:
        """Uniform samples in [0, 1).

        >>> Tensor.rand(2, 3).shape
        (2, 3)
        """
        dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
        values = Tensor._rng().random(_shape_args(shape), dtype=np.float32)
        return Tensor(values, **kwargs).cast(dtype)

    @staticmethod
    @_creates_leaf
    def randn(*shape: Any, **kwargs: Any) -> Tensor:
        """Standard normal samples.

        >>> Tensor.randn(4).shape
        (4,)
        """
        dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
        values = Tensor._rng().standard_normal(_shape_args(shape), dtype=np.float32)
        return Tensor(values, **kwargs).cast(dtype)

    def rand_like(self, **kwargs: Any) -> Tensor:
        """Uniform samples in [0, 1) with this tensor's shape and (float) dtype."""
        return Tensor.rand(self.shape, dtype=kwargs.pop("dtype", least_upper_float(self.dtype)), **kwargs)

    def randn_like(self, **kwargs: Any) -> Tensor:
        """Standard normal samples with this tensor's shape and (float) dtype."""
        return Tensor.randn(self.shape, dtype=kwargs.pop("dtype", least_upper_float(self.dtype)), **kwargs)

    @staticmethod
    @_creates_leaf
    def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, **kwargs: Any) -> Tensor:
        """Uniform samples in [low, high).

        >>> bool((Tensor.uniform(100, low=2, high=3) >= 2).all().item())
        True
        """
        dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
        return (Tensor.rand(*shape, **kwargs) * (high - low) + low).cast(dtype)

    @staticmethod
    @_creates_leaf
    def normal(*shape: Any, mean: float = 0.0, std: float = 1.0, **kwargs: Any) -> Tensor:
        """Normal samples with the given mean and standard deviation.

        >>> Tensor.normal(3, mean=1.0, std=0.0).tolist()
        [1.0, 1.0, 1.0]
        """
        dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
        return (Tensor.randn(*shape, **kwargs) * std + mean).cast(dtype)

    @staticmethod
    @_creates_leaf
    def randint(*shape: Any, low: int = 0, high: int = 10, **kwargs: Any) -> Tensor:
        """Integers uniformly drawn from [low, high).

        >>> Tensor.randint(5, low=3, high=4).tolist()
        [3, 3, 3, 3, 3]
        """
        if high <= low:
            raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
        dtype = to_dtype(kwargs.pop("dtype", dtypes.int32))
        if not dtypes.is_int(dtype):
            raise TypeError(f"randint: dtype must be an integer dtype, got {dtype}")
        values = Tensor._rng().integers(low, high, _shape_args(shape), dtype=np.int64)
        return Tensor(values.astype(to_numpy_dtype(dtype)), **kwargs)

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

    # ------------------------------------------------------------------------------------------------------------
    # movement

    def reshape(self, shape: int | Sequence[int], *args: int) -> Tensor:
        """The same values in a new shape (one dimension may be -1).

        >>> Tensor.arange(6).reshape(2, -1).shape
        (2, 3)
        """
        new = _as_shape((shape, *args) if args else shape)
        if new.count(-1) > 1:
            raise ShapeError(f"reshape: only one dimension can be -1, got {new}")
        if -1 in new:
            known = prod(s for s in new if s != -1)
            if known == 0 or self.numel() % known:
                raise ShapeError(f"reshape: can't infer -1 in {new} for a tensor of shape {self.shape}")
            new = tuple(self.numel() // known if s == -1 else s for s in new)
        if prod(new) != self.numel() or any(s < 0 for s in new):
            raise ShapeError(f"reshape: can't reshape {self.shape} ({self.numel()} elements) to {new}")
        return self if new == self.shape else Tensor(_reshape_uop(self.uop, new))

    def view(self, *shape: Any) -> Tensor:
        """Alias of reshape.

        >>> Tensor.arange(4).view(2, 2).shape
        (2, 2)
        """
        return self.reshape(*shape)

    def permute(self, order: Sequence[int], *args: int) -> Tensor:
        """Reorder the axes.

        >>> Tensor.zeros(2, 3, 4).permute(2, 0, 1).shape
        (4, 2, 3)
        """
        order = (order,) if isinstance(order, (int, np.integer)) and not args else order  # type: ignore[assignment]
        order = tuple(order) if not args else (order, *args)  # type: ignore[arg-type]
        if len(order) != self.ndim:
            raise ShapeError(f"permute: {order} names {len(order)} axes, the tensor has {self.ndim} {self.shape}")
        norm = tuple(_normalize_axis(a, self.ndim, "permute", self.shape) for a in order)
        if sorted(norm) != list(range(self.ndim)):
            raise ShapeError(f"permute: {order} is not a permutation of the {self.ndim} axes of {self.shape}")
        return self if norm == tuple(range(self.ndim)) else Tensor(UOp(Ops.PERMUTE, self.dtype, (self.uop,), norm))

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        """Swap two axes.

        >>> Tensor.zeros(2, 3).transpose().shape
        (3, 2)
        """
        order = list(range(self.ndim))
        a = _normalize_axis(dim0, self.ndim, "transpose", self.shape)
        b = _normalize_axis(dim1, self.ndim, "transpose", self.shape)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        """All axes reversed.

        >>> Tensor.zeros(2, 3).T.shape
        (3, 2)
        """
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, shape: Sequence[int], *args: int) -> Tensor:
        """Broadcast size-1 axes to `shape` (-1 keeps a size).

        >>> Tensor([[1], [2]]).expand(2, 3).tolist()
        [[1, 1, 1], [2, 2, 2]]
        """
        new = _as_shape((shape, *args) if args else shape)
        if len(new) < self.ndim:
            raise ShapeError(f"expand: can't expand {self.shape} to fewer dimensions {new}")
        cur = (1,) * (len(new) - self.ndim) + self.shape
        new = tuple(c if n == -1 else n for c, n in zip(cur, new, strict=True))
        for c, n in zip(cur, new, strict=True):
            if c != n and c != 1:
                raise ShapeError(f"expand: can't expand {self.shape} to {new}: size {c} is not 1 and differs from {n}")
        t = self.reshape(cur)
        return t if new == cur else Tensor(UOp(Ops.EXPAND, self.dtype, (t.uop,), new))

    def pad(
        self, padding: Sequence[tuple[int, int] | None] | Sequence[int], mode: str = "constant", value: float = 0.0
    ) -> Tensor:
        """Pad each axis with (before, after) elements.

        `padding` is one (before, after) pair per axis (tinygrad), or PyTorch's flat form (last axis first).
        `mode` is "constant" (with `value`), "reflect", "replicate" or "circular". Negative padding crops.

        >>> Tensor([1, 2, 3]).pad(((1, 2),), mode="reflect").tolist()
        [2, 1, 2, 3, 2, 1]
        """
        if isinstance(mode, (int, float)) and not isinstance(mode, bool):
            # tinygrad's positional form pad(padding, value)
            mode, value = "constant", mode
        if mode not in ("constant", "reflect", "replicate", "circular"):
            raise ValueError(f"pad: unknown mode {mode!r}; use constant, reflect, replicate or circular")
        if padding and isinstance(padding[0], (int, np.integer)):
            flat = [int(p) for p in padding]  # type: ignore[arg-type]
            if len(flat) % 2 or len(flat) // 2 > self.ndim:
                raise ShapeError(f"pad: flat padding {flat} needs an even length of at most 2*{self.ndim}")
            pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)][::-1]
            padding = [(0, 0)] * (self.ndim - len(pairs)) + pairs
        pads = tuple((0, 0) if p is None else (int(p[0] or 0), int(p[1] or 0)) for p in padding)  # type: ignore[index]
        if len(pads) != self.ndim:
            raise ShapeError(f"pad: {len(pads)} (before, after) pairs for a tensor of shape {self.shape}")
        if any(b < 0 or a < 0 for b, a in pads):
            # negative padding crops, first (in every mode, as PyTorch: a reflection is of the cropped values)
            crop = tuple((max(-b, 0), s - max(-a, 0)) for (b, a), s in zip(pads, self.shape, strict=True))
            if any(e < b for b, e in crop):
                raise ShapeError(f"pad: negative padding {pads} crops more than shape {self.shape} holds")
            return self.shrink(crop).pad(tuple((max(b, 0), max(a, 0)) for b, a in pads), mode=mode, value=value)
        if mode != "constant":
            return self._pad_mode(pads, mode)
        if all(b == 0 and a == 0 for b, a in pads):
            return self
        padded = Tensor(UOp(Ops.PAD, self.dtype, (self.uop,), pads))
        if value == 0 and not (isinstance(value, float) and math.copysign(1.0, value) < 0):
            return padded
        mask = Tensor(
            UOp(Ops.PAD, dtypes.bool, (Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device).uop,), pads)
        )
        return mask.where(padded, Tensor(value, device=self.device, dtype=self.dtype))

    def _pad_mode(self, pads: tuple[tuple[int, int], ...], mode: str) -> Tensor:
        t = self
        for ax, (b, a) in enumerate(pads):
            if b == 0 and a == 0:
                continue
            n = t.shape[ax]
            if mode == "reflect" and (b >= n or a >= n):
                raise ShapeError(f"pad: reflect padding {(b, a)} must be smaller than axis {ax} of size {n}")
            if mode == "circular" and (b > n or a > n):
                raise ShapeError(f"pad: circular padding {(b, a)} can't exceed axis {ax} of size {n}")
            if mode == "replicate" and n == 0:
                raise ShapeError(f"pad: can't replicate-pad an empty axis {ax}")
            parts = []
            if b:
                if mode == "reflect":
                    parts.append(t._slice_axis(ax, 1, b + 1).flip(ax))
                elif mode == "replicate":
                    parts.append(t._slice_axis(ax, 0, 1).expand(_with(t.shape, ax, b)))
                else:
                    parts.append(t._slice_axis(ax, n - b, n))
            parts.append(t)
            if a:
                if mode == "reflect":
                    parts.append(t._slice_axis(ax, n - 1 - a, n - 1).flip(ax))
                elif mode == "replicate":
                    parts.append(t._slice_axis(ax, n - 1, n).expand(_with(t.shape, ax, a)))
                else:
                    parts.append(t._slice_axis(ax, 0, a))
            t = Tensor.cat(*parts, dim=ax)
        return t

    def _slice_axis(self, axis: int, start: int, stop: int) -> Tensor:
        return self.shrink(tuple((start, stop) if i == axis else None for i in range(self.ndim)))

    def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
        """Keep [begin, end) of each axis (None keeps the whole axis).

        >>> Tensor.arange(5).shrink(((1, 3),)).tolist()
        [1, 2]
        """
        if len(arg) != self.ndim:
            raise ShapeError(f"shrink: {len(arg)} bounds for a tensor of shape {self.shape}")
        bounds = tuple((0, s) if b is None else (int(b[0]), int(b[1])) for b, s in zip(arg, self.shape, strict=True))
        for (b, e), s in zip(bounds, self.shape, strict=True):
            if not 0 <= b <= e <= s:
                raise ShapeError(f"shrink: bounds {bounds} don't fit in shape {self.shape}")
        if all(b == 0 and e == s for (b, e), s in zip(bounds, self.shape, strict=True)):
            return self
        return Tensor(UOp(Ops.SHRINK, self.dtype, (self.uop,), bounds))

    def flip(self, axis: int | Sequence[int], *args: int) -> Tensor:
        """Reverse the order along the given axes.

        >>> Tensor([1, 2, 3]).flip(0).tolist()
        [3, 2, 1]
        """
        raw = [axis, *args] if isinstance(axis, (int, np.integer)) else list(axis)
        axes = {_normalize_axis(a, self.ndim, "flip", self.shape) for a in raw}
        if not axes or self.ndim == 0:
            return self
        return Tensor(UOp(Ops.FLIP, self.dtype, (self.uop,), tuple(i in axes for i in range(self.ndim))))

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        """Drop size-1 axes (all of them, or those in `dim` that have size 1).

        >>> Tensor.zeros(1, 3, 1).squeeze().shape
        (3,)
        """
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        if self.ndim == 0:
            _normalize_axis(dim if isinstance(dim, int) else 0, 0, "squeeze", self.shape)
            return self
        dims = [dim] if isinstance(dim, (int, np.integer)) else list(dim)
        drop = {d for d in (_normalize_axis(d, self.ndim, "squeeze", self.shape) for d in dims) if self.shape[d] == 1}
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in drop))

    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a size-1 axis at `dim`.

        >>> Tensor.zeros(3).unsqueeze(0).shape
        (1, 3)
        """
        dim = _normalize_axis(dim, self.ndim + 1, "unsqueeze", self.shape)
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge axes start_dim..end_dim into one.

        >>> Tensor.zeros(2, 3, 4).flatten(1).shape
        (2, 12)
        """
        if self.ndim == 0:
            return self.reshape((1,))
        s = _normalize_axis(start_dim, self.ndim, "flatten", self.shape)
        e = _normalize_axis(end_dim, self.ndim, "flatten", self.shape)
        if e < s:
            raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for shape {self.shape}")
        return self.reshape(self.shape[:s] + (prod(self.shape[s : e + 1]),) + self.shape[e + 1 :])

    def unfold(self, dim: int, size: int, step: int) -> Tensor:
        """Every window of `size` elements along `dim`, `step` apart, as a new last axis (torch.Tensor.unfold).

        >>> Tensor.arange(5).unfold(0, 2, 2).tolist()
        [[0, 1], [2, 3]]
        """
        dim = _normalize_axis(dim, max(self.ndim, 1), "unfold", self.shape)
        n = self.shape[dim] if self.ndim else 1
        if size < 0 or size > n:
            raise ShapeError(f"unfold: size {size} doesn't fit dimension {dim} of shape {self.shape}")
        if step <= 0:
            raise ArgumentError(f"unfold: step must be positive, got {step}")
        x = self if self.ndim else self.reshape(1)
        count = (n - size) // step + 1
        idx = (np.arange(count)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
        windows = x._take(dim, idx).unflatten(dim, (count, size))
        return windows._move_to_end(dim + 1)

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        """Split axis `dim` into `sizes` (one may be -1).

        >>> Tensor.zeros(2, 12).unflatten(1, (3, 4)).shape
        (2, 3, 4)
        """
        dim = _normalize_axis(dim, self.ndim, "unflatten", self.shape)
        sizes = tuple(sizes)
        if sizes.count(-1) == 1:
            known = prod(s for s in sizes if s != -1)
            sizes = tuple(self.shape[dim] // known if s == -1 else s for s in sizes)
        if prod(sizes) != self.shape[dim]:
            raise ShapeError(
                f"unflatten: sizes {sizes} don't multiply to {self.shape[dim]} (axis {dim} of {self.shape})"
            )
        return self.reshape(self.shape[:dim] + sizes + self.shape[dim + 1 :])

    def repeat(self, repeats: int | Sequence[int], *args: int) -> Tensor:
        """Tile the tensor: `repeats[i]` copies along axis i (extra leading repeats add axes), as torch.Tensor.repeat.

        >>> Tensor([1, 2]).repeat(2).tolist()
        [1, 2, 1, 2]
        """
        reps = _as_shape((repeats, *args) if args else repeats)
        if len(reps) < self.ndim:
            raise ShapeError(
                f"repeat: {len(reps)} repeats for a tensor of shape {self.shape}; need at least {self.ndim}"
            )
        if any(r < 0 for r in reps):
            raise ShapeError(f"repeat: negative repeats {reps}")
        base = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
        inter = tuple(x for s in base.shape for x in (1, s))
        expanded = tuple(x for r, s in zip(reps, base.shape, strict=True) for x in (r, s))
        return base.reshape(inter).expand(expanded).reshape(tuple(r * s for r, s in zip(reps, base.shape, strict=True)))

    def repeat_interleave(self, repeats: int, dim: int | None = None) -> Tensor:
        """Repeat each element `repeats` times along `dim` (flattened when None).

        >>> Tensor([1, 2]).repeat_interleave(2).tolist()
        [1, 1, 2, 2]
        """
        if not isinstance(repeats, (int, np.integer)) or repeats < 0:
            raise TypeError(f"repeat_interleave: repeats must be a non-negative int, got {repeats!r}")
        t = self.flatten() if dim is None else self
        d = 0 if dim is None else _normalize_axis(dim, t.ndim, "repeat_interleave", t.shape)
        t = t.unsqueeze(d + 1)
        return t.expand(_with(t.shape, d + 1, int(repeats))).flatten(d, d + 1)

    def cat(self, *args: Tensor, dim: int = 0) -> Tensor:
        """Concatenate tensors along `dim`.

        >>> Tensor([1, 2]).cat(Tensor([3])).tolist()
        [1, 2, 3]
        """
        tensors = [self, *args]
        if self.ndim == 0:
            raise ShapeError("cat: zero-dimensional tensors can't be concatenated")
        dim = _normalize_axis(dim, self.ndim, "cat", self.shape)
        for t in args:
            if t.ndim != self.ndim or any(
                a != b for i, (a, b) in enumerate(zip(t.shape, self.shape, strict=False)) if i != dim
            ):
                shapes = [x.shape for x in tensors]
                raise ShapeError(f"cat: shapes {shapes} differ outside dimension {dim}")
        dt = least_upper_dtype(*(t.dtype for t in tensors))
        tensors = [t.cast(dt) for t in tensors if t.shape[dim] > 0] or [self.cast(dt)]
        if len(tensors) == 1:
            return tensors[0]
        total = sum(t.shape[dim] for t in tensors)
        # each piece padded with zeros to the full length, then added: one fused kernel
        out, offset = None, 0
        for t in tensors:
            pads = tuple((offset, total - offset - t.shape[dim]) if i == dim else (0, 0) for i in range(t.ndim))
            piece = t.pad(pads)
            out = piece if out is None else out._alu(Ops.ADD if dt != dtypes.bool else Ops.OR, piece)
            offset += t.shape[dim]
        assert out is not None
        return out

    def stack(self: Tensor | Sequence[Tensor], *args: Tensor, dim: int = 0) -> Tensor:
        """Stack same-shaped tensors along a new axis `dim`: `a.stack(b)`, `Tensor.stack(a, b)` or
        `Tensor.stack([a, b])`.

        >>> Tensor.stack(Tensor([1, 2]), Tensor([3, 4])).tolist()
        [[1, 2], [3, 4]]
        """
        first = [self] if isinstance(self, Tensor) else list(self)
        tensors = first + (list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args))
        if not tensors:
            raise ValueError("stack: needs at least one tensor")
        if any(t.shape != tensors[0].shape for t in tensors):
            raise ShapeError(f"stack: all tensors need the same shape, got {[t.shape for t in tensors]}")
        dim = _normalize_axis(dim, tensors[0].ndim + 1, "stack", tensors[0].shape)
        return Tensor.cat(*(t.unsqueeze(dim) for t in tensors), dim=dim)

    def meshgrid(self: Tensor | Sequence[Tensor], *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
        """Coordinate grids from 1-D tensors (`a.meshgrid(b)` or `Tensor.meshgrid(a, b)`), as torch.meshgrid;
        indexing "xy" swaps the first two axes.

        >>> [t.tolist() for t in Tensor([1, 2]).meshgrid(Tensor([3, 4, 5]))][0]
        [[1, 1, 1], [2, 2, 2]]
        """
        if indexing not in ("ij", "xy"):
            raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
        first = [self] if isinstance(self, Tensor) else list(self)
        tensors = first + (list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args))
        if any(t.ndim > 1 for t in tensors):
            raise ShapeError(f"meshgrid: needs 0-d or 1-d tensors, got shapes {[t.shape for t in tensors]}")
        flat = [t.reshape(-1) for t in tensors]
        if indexing == "xy" and len(flat) >= 2:
            flat[0], flat[1] = flat[1], flat[0]
        shape = tuple(t.shape[0] for t in flat)
        grids = [t.reshape(_with((1,) * len(flat), i, t.shape[0])).expand(shape) for i, t in enumerate(flat)]
        if indexing == "xy" and len(grids) >= 2:
            grids[0], grids[1] = grids[1], grids[0]
        return tuple(grids)

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Split along `dim` into pieces of `sizes` (an int: equal pieces, the last may be smaller).

        >>> [t.tolist() for t in Tensor.arange(5).split(2)]
        [[0, 1], [2, 3], [4]]
        """
        dim = _normalize_axis(dim, self.ndim, "split", self.shape)
        n = self.shape[dim]
        if isinstance(sizes, (int, np.integer)):
            if sizes <= 0:
                raise ValueError(f"split: size must be positive, got {sizes}")
            sizes = [min(int(sizes), n - i) for i in range(0, n, int(sizes))] or [0]
        if sum(sizes) != n:
            raise ShapeError(f"split: sizes {list(sizes)} don't add up to {n} (axis {dim} of {self.shape})")
        out, start = [], 0
        for s in sizes:
            out.append(self._slice_axis(dim, start, start + s))
            start += s
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """Split along `dim` into `chunks` pieces of equal size (the last may be smaller).

        >>> [t.tolist() for t in Tensor.arange(6).chunk(3)]
        [[0, 1], [2, 3], [4, 5]]
        """
        if chunks <= 0:
            raise ValueError(f"chunk: chunks must be positive, got {chunks}")
        dim = _normalize_axis(dim, self.ndim, "chunk", self.shape)
        return self.split(max(math.ceil(self.shape[dim] / chunks), 1), dim)

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        """Rotate elements along `dims` by `shifts` (flattened when dims is None), as torch.roll.

        >>> Tensor([1, 2, 3, 4]).roll(1).tolist()
        [4, 1, 2, 3]
        """
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        sh = [shifts] if isinstance(shifts, (int, np.integer)) else list(shifts)
        ds = [dims] if isinstance(dims, (int, np.integer)) else list(dims)
        if len(sh) != len(ds):
            raise ArgumentError(f"roll: {len(sh)} shifts for {len(ds)} dims")
        t = self
        for s, d in zip(sh, ds, strict=True):
            d = _normalize_axis(d, t.ndim, "roll", t.shape)
            n = t.shape[d]
            if n == 0 or s % n == 0:
                continue
            s %= n
            t = Tensor.cat(t._slice_axis(d, n - s, n), t._slice_axis(d, 0, n - s), dim=d)
        return t

    def tril(self, diagonal: int = 0) -> Tensor:
        """Keep the lower triangle (j - i <= diagonal) of the last two axes, zero the rest.

        >>> Tensor.ones(2, 2).tril().tolist()
        [[1.0, 0.0], [1.0, 1.0]]
        """
        return self._tri_mask(diagonal, lower=True).where(self, self.zeros_like())

    def triu(self, diagonal: int = 0) -> Tensor:
        """Keep the upper triangle (j - i >= diagonal) of the last two axes, zero the rest.

        >>> Tensor.ones(2, 2).triu().tolist()
        [[1.0, 1.0], [0.0, 1.0]]
        """
        return self._tri_mask(diagonal, lower=False).where(self, self.zeros_like())

    def _tri_mask(self, diagonal: int, lower: bool) -> Tensor:
        if self.ndim < 2:
            raise ShapeError(f"{'tril' if lower else 'triu'}: needs at least 2 dimensions, got shape {self.shape}")
        r, c = self.shape[-2:]
        rows = Tensor.arange(r, device=self.device).reshape(r, 1)
        cols = Tensor.arange(c, device=self.device).reshape(1, c)
        return (cols - rows <= diagonal) if lower else (cols - rows >= diagonal)

    def contiguous(self) -> Tensor:
        """A tensor whose values are stored in their own buffer, in order.

        >>> Tensor([[1, 2], [3, 4]]).T.contiguous().tolist()
        [[1, 3], [2, 4]]
        """
        # a fresh arg per call: two identical contiguous() calls must not end up sharing (and aliasing) storage
        return Tensor(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,), next(_contiguous_ids)))

    def detach(self) -> Tensor:
        """The same values with no gradient flowing back.

        >>> Tensor([1.0]).detach().tolist()
        [1.0]
        """
        return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)))

    def to(self, device: str | None) -> Tensor:
        """This tensor on another device (a copy when the device differs)."""
        device = _canonical_device(device)
        if device == self.device:
            return self
        return Tensor(UOp(Ops.COPY, self.dtype, (self.uop, UOp(Ops.DEVICE, arg=device))))

    def clone(self) -> Tensor:
        """A copy in a buffer of its own.

        >>> Tensor([1, 2]).clone().tolist()
        [1, 2]
        """
        return self.contiguous()

    # ------------------------------------------------------------------------------------------------------------
    # indexing: ints, slices, None and ... become shrink/flip/reshape views; integer and bool tensors (or lists)
    # select with a one-hot comparison and a sum; __setitem__ stores into the view (or the whole buffer)

    def _parse_index(self, index: Any) -> list[Any]:
        items = list(index) if isinstance(index, tuple) else [index]
        out: list[Any] = []
        for i in items:
            if isinstance(i, (list, np.ndarray, Tensor)):
                t = i if isinstance(i, Tensor) else Tensor(np.asarray(i), device=self.device)
                if t.dtype == dtypes.bool:
                    out.append(_Mask(t))
                elif dtypes.is_int(t.dtype):
                    out.append(t)
                else:
                    raise IndexError(f"tensors used as indices must be integer or bool, got {t.dtype}")
            elif isinstance(i, bool):
                raise IndexError("a Python bool is not a valid index; use a bool tensor")
            elif i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice)):
                out.append(i)
            else:
                raise IndexError(f"unsupported index {i!r} of type {type(i).__name__}")
        return out

    def _basic_view(self, items: list[Any]) -> tuple[Tensor, list[tuple[int, Tensor]], bool]:
        """Apply ints, slices, None and Ellipsis; returns the view, [(axis in view, index tensor)], and whether a
        strided slice needed padding (such a view can't be written through)."""
        n_real = sum(i.t.ndim if isinstance(i, _Mask) else 1 for i in items if i is not None and i is not Ellipsis)
        if n_real > self.ndim:
            raise IndexError(f"too many indices ({n_real}) for a tensor of shape {self.shape}")
        ellipses = [pos for pos, i in enumerate(items) if i is Ellipsis]
        if len(ellipses) > 1:
            raise IndexError("an index can only have a single ellipsis (...)")
        if ellipses:
            at = ellipses[0]
            items = items[:at] + [slice(None)] * (self.ndim - n_real) + items[at + 1 :]
        else:
            items = items + [slice(None)] * (self.ndim - n_real)
        bounds, flips, strides, out_axes = [], [], [], []
        tensors: list[tuple[int, Tensor]] = []
        axis = 0
        for i in items:
            if isinstance(i, _Mask):
                k = i.t.ndim
                if i.t.shape != self.shape[axis : axis + k]:
                    raise IndexError(
                        f"bool index of shape {i.t.shape} doesn't match axes {axis}..{axis + k - 1} of {self.shape}"
                    )
                for p in i.t.numpy().nonzero():
                    idx = Tensor(np.asarray(p, dtype=np.int32), device=self.device)
                    bounds.append((0, self.shape[axis]))
                    flips.append(False)
                    strides.append(1)
                    out_axes.append(("tensor", axis))
                    tensors.append((axis, idx))
                    axis += 1
                continue
            if i is None:
                out_axes.append(("new", None))
                continue
            size = self.shape[axis]
            if isinstance(i, Tensor):
                bounds.append((0, size))
                flips.append(False)
                strides.append(1)
                out_axes.append(("tensor", axis))
                tensors.append((axis, i))
            elif isinstance(i, (int, np.integer)):
                j = int(i)
                if not -size <= j < size:
                    raise IndexError(
                        f"index {j} is out of bounds for axis {axis} with size {size} (shape {self.shape})"
                    )
                j %= size
                bounds.append((j, j + 1))
                flips.append(False)
                strides.append(1)
                out_axes.append(("drop", axis))
            else:
                start, stop, step = i.indices(size)
                if step > 0:
                    n = max(0, math.ceil((stop - start) / step))
                    end = start + n * step if start + n * step <= size else start + max(n - 1, 0) * step + 1
                    bounds.append((start, end) if n else (0, 0))
                    flips.append(False)
                else:
                    n = max(0, math.ceil((start - stop) / -step))
                    lo = start + 1 + n * step if start + 1 + n * step >= 0 else start + (n - 1) * step
                    bounds.append((lo, start + 1) if n else (0, 0))
                    flips.append(True)
                strides.append(abs(step))
                out_axes.append(("keep", axis))
            axis += 1
        t = self.shrink(bounds)
        t = t.flip([a for a, f in enumerate(flips) if f])
        padded = False
        if any(s != 1 for s in strides):
            padded = any(k > 1 and t.shape[a] % k for a, k in enumerate(strides))
            t = t._stride(strides)
        new_shape, tensor_axes = [], []
        for kind, ax in out_axes:
            if kind == "new":
                new_shape.append(1)
            elif kind in ("keep", "tensor"):
                if kind == "tensor":
                    tensor_axes.append(len(new_shape))
                new_shape.append(t.shape[ax])
        view = t.reshape(tuple(new_shape))
        return view, [(ax, idx) for ax, (_, idx) in zip(tensor_axes, tensors, strict=True)], padded

    def _stride(self, strides: Sequence[int]) -> Tensor:
        # take every k-th element of each axis: pad to a multiple of k if needed, split the axis, keep index 0
        t = self
        for ax, k in enumerate(strides):
            if k == 1:
                continue
            n = t.shape[ax]
            keep = math.ceil(n / k)
            padded = t.pad(tuple((0, keep * k - n) if a == ax else (0, 0) for a in range(t.ndim)))
            split = padded.reshape(t.shape[:ax] + (keep, k) + t.shape[ax + 1 :])
            bounds = tuple((0, 1) if a == ax + 1 else (0, s) for a, s in enumerate(split.shape))
            t = split.shrink(bounds).reshape(t.shape[:ax] + (keep,) + t.shape[ax + 1 :])
        return t

    def _advanced_index(self, tensors: list[tuple[int, Tensor]]) -> Tensor:
        # out[b..., rest...] = self[.., idx_1[b], .., idx_m[b], ..]: one-hot masks over the indexed axes, then a sum
        axes = [a for a, _ in tensors]
        bshape: tuple[int, ...] = ()
        for _, idx in tensors:
            bshape = _broadcast_shape(bshape, idx.shape, "index")
        rest = [i for i in range(self.ndim) if i not in axes]
        rest_shape = tuple(self.shape[i] for i in rest)
        sizes = tuple(self.shape[a] for a in axes)
        nb, nr, m = len(bshape), len(rest), len(axes)
        x = self.permute(rest + axes).reshape((1,) * nb + rest_shape + sizes)
        mask: Tensor | None = None
        for k, (a, idx) in enumerate(tensors):
            n = self.shape[a]
            idx = idx.cast(dtypes.int32) if idx.dtype.itemsize < 4 else idx
            idx = (idx < 0).where(idx + n, idx)._broadcast_to(bshape)
            ar = Tensor.arange(n, device=self.device, dtype=idx.dtype)
            one_hot = idx.reshape(bshape + (1,) * (nr + m)) == ar.reshape((1,) * (nb + nr) + _with((1,) * m, k, n))
            mask = one_hot if mask is None else mask & one_hot
        assert mask is not None
        full = bshape + rest_shape + sizes
        picked = mask._broadcast_to(full).where(x._broadcast_to(full), Tensor(0, device=self.device, dtype=self.dtype))
        out = picked._reduce(Ops.ADD if self.dtype != dtypes.bool else Ops.MAX, tuple(range(nb + nr, nb + nr + m)))
        if axes == list(range(axes[0], axes[0] + m)) and axes[0] > 0:
            # adjacent indexed axes: the broadcast index dims take their place
            p = axes[0]
            order = list(range(nb, nb + p)) + list(range(nb)) + list(range(nb + p, nb + nr))
            out = out.permute(order)
        return out

    def __getitem__(self, index: Any) -> Tensor:
        """numpy/PyTorch indexing: ints, slices (any step), None, ..., int/bool tensors or lists.

        >>> Tensor.arange(10)[1:8:3].tolist()
        [1, 4, 7]
        >>> Tensor([[1, 2], [3, 4]])[[1, 0], 1].tolist()
        [4, 2]
        """
        view, tensors, _ = self._basic_view(self._parse_index(index))
        for ax, idx in tensors:
            self._check_index_range(idx, view.shape[ax], ax, "getitem")
        return view._advanced_index(tensors) if tensors else view

    def _check_index_range(self, idx: Tensor, size: int, axis: int, op: str = "index", negative: bool = True) -> None:
        # numpy-style indexing counts negative indices from the end; gather and scatter don't (as torch)
        where = f"for axis {axis} with size {size} (shape {self.shape})"
        _check_values_in(idx, -size if negative else 0, size, lambda bad: f"{op}: index {bad} is out of bounds {where}")

    def __setitem__(self, index: Any, value: Any) -> None:
        """Write `value` (broadcast) into the indexed positions, as a STORE into this tensor's buffer.

        >>> t = Tensor.zeros(4); t[1:3] = 5.0; t.tolist()
        [0.0, 5.0, 5.0, 0.0]
        """
        self.realize()
        storage = _storage_uop(self.uop)
        if storage.base.op is not Ops.BUFFER or any(n.op in (Ops.EXPAND, Ops.PAD) for n in storage.movement_chain()):
            # the tensor needs storage of its own to be written into
            self.uop = self.contiguous().realize().uop
        items = self._parse_index(index)
        view, tensors, padded = self._basic_view(items)
        if not isinstance(value, Tensor):
            value = Tensor(value, device=self.device, dtype=self.dtype)
        if not tensors and not padded:
            view.assign(value.cast(self.dtype)._broadcast_to(view.shape)).realize()
            return
        # general case: every written position is found by indexing a tensor of flat positions the same way
        positions = Tensor.arange(self.numel(), device=self.device).reshape(self.shape)[index]
        vals = value.cast(self.dtype)._broadcast_to(positions.shape).reshape(-1, 1)
        hit = positions.reshape(-1, 1) == Tensor.arange(self.numel(), device=self.device).reshape(1, -1)
        zero = Tensor(0, device=self.device, dtype=self.dtype)
        written = hit.where(vals._broadcast_to(hit.shape), zero)._reduce(
            Ops.MAX if self.dtype == dtypes.bool else Ops.ADD, 0
        )
        new = hit.any(0).reshape(self.shape).where(written.reshape(self.shape), self)
        self.assign(new.contiguous()).realize()

    def assign(self, x: Any) -> Tensor:
        """Write `x` into this tensor's storage: builds STORE(view of BUFFER, x), realized with the next realize.

        >>> t = Tensor([1, 2]); t.assign(Tensor([3, 4])).realize().tolist()
        [3, 4]
        """
        if not isinstance(x, Tensor):
            x = Tensor(x, device=self.device, dtype=self.dtype)
        if x.shape != self.shape:
            raise ShapeError(f"assign: value shape {x.shape} doesn't match target shape {self.shape}")
        if x.dtype != self.dtype:
            raise TypeError(f"assign: value dtype {x.dtype} doesn't match target dtype {self.dtype}; cast it first")
        if x.device != self.device:
            raise ValueError(f"assign: value is on {x.device}, target on {self.device}; use .to() first")
        if self.numel() == 0:
            # nothing to write (a STORE of an empty view would make a kernel with an empty loop); found by the fuzzer
            return self
        target = _storage_uop(self.uop)
        if target.base.op is not Ops.BUFFER:
            # an unrealized target gets a buffer of its own first
            self.realize()
            target = _storage_uop(self.uop)
        if any(n.op in (Ops.EXPAND, Ops.PAD) for n in target.movement_chain()):
            raise ValueError("assign: can't write through an expanded or padded view (elements would alias)")
        store = UOp(Ops.STORE, target.dtype, (target, _storage_uop(x.uop)))
        self.uop = UOp(Ops.BITCAST, self.dtype, (store,)) if self.dtype == dtypes.bfloat16 else store
        return self

    # ------------------------------------------------------------------------------------------------------------
    # elementwise

    def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        if self.shape == shape:
            return self
        if len(shape) < self.ndim:
            raise ShapeError(f"can't broadcast {self.shape} to {shape}")
        return self.reshape((1,) * (len(shape) - self.ndim) + self.shape).expand(shape)

    def _const_operand(self, y: Any, op: str = "op") -> Tensor:
        # a Python scalar takes the tensor's dtype unless its kind is "higher" (float into an int tensor)
        dt = self.dtype
        if isinstance(y, float) and not dtypes.is_float(self.dtype):
            dt = dtypes.default_float
        elif isinstance(y, int) and not isinstance(y, bool):
            dt = dtypes.default_int if self.dtype == dtypes.bool else self.dtype
            if dtypes.is_int(dt) and not dtypes.min(dt) <= y <= dtypes.max(dt):
                # the int would wrap in the tensor's dtype: compute in int64, which holds what torch's default int
                # tensors hold (torch itself wraps it into an int32 tensor silently)
                dt = dtypes.int64
            if not dtypes.is_float(dt) and not dtypes.min(dt) <= y <= dtypes.max(dt):
                raise OverflowError(
                    f"{op}: the Python int {_short_int(y)} doesn't fit any integer dtype (int64 at most)"
                )
            if dtypes.is_float(dt) and abs(y) >= 2**1024:
                raise OverflowError(f"{op}: the Python int {_short_int(y)} is too large for any float dtype")
        return Tensor(y, device=self.device, dtype=dt)

    def _broadcasted(self, y: Any, reverse: bool = False, op: str = "op") -> tuple[Tensor, Tensor]:
        x: Tensor = self
        if not isinstance(y, Tensor):
            if isinstance(y, (np.ndarray, list, tuple)):
                y = Tensor(y, device=x.device)
            elif isinstance(y, (bool, int, float, np.integer, np.floating, np.bool_)):
                y = x._const_operand(y.item() if isinstance(y, np.generic) else y, op)
            else:
                raise TypeError(f"{op}: can't combine a Tensor with {type(y).__name__}")
        if x.device != y.device:
            raise ValueError(f"{op}: operands are on different devices ({x.device} and {y.device})")
        if reverse:
            x, y = y, x
        out = least_upper_dtype(x.dtype, y.dtype)
        x, y = x.cast(out), y.cast(out)
        shape = _broadcast_shape(x.shape, y.shape, op)
        return x._broadcast_to(shape), y._broadcast_to(shape)

    def _alu(self, op: Ops, *srcs: Tensor) -> Tensor:
        if self.dtype == dtypes.bfloat16:
            # no backend computes in bfloat16: compute in float32 and round the result back
            ret = self.float()._alu(op, *(s.float() for s in srcs))
            return ret if op in GroupOp.Comparison else ret.cast(dtypes.bfloat16)
        out_dt = dtypes.bool if op in GroupOp.Comparison else self.dtype
        return Tensor(UOp(op, out_dt, (self.uop, *(s.uop for s in srcs))))

    def cast(self, dtype: DType | str) -> Tensor:
        """The values converted to `dtype` (floats to ints truncate toward zero).

        >>> Tensor([1.7, -1.7]).cast("int32").tolist()
        [1, -1]
        """
        dt = to_dtype(dtype)
        if dt == self.dtype:
            return self
        if self.dtype == dtypes.bfloat16:
            # bfloat16 is the top half of a float32
            bits = Tensor(_storage_uop(self.uop)).cast(dtypes.uint32).lshift(16)
            return bits.bitcast(dtypes.float32).cast(dt)
        if dt == dtypes.bfloat16:
            f = self.cast(dtypes.float32)
            u = f.bitcast(dtypes.uint32)
            # round to nearest even on the 16 dropped bits; NaN stays a quiet NaN
            rounded = (u + (0x7FFF + (u.rshift(16) & 1))).rshift(16)
            bits = f.isnan().where(Tensor(0x7FC0, device=self.device, dtype=dtypes.uint32), rounded)
            return Tensor(UOp(Ops.BITCAST, dt, (bits.cast(dtypes.uint16).uop,)))
        return Tensor(UOp(Ops.CAST, dt, (self.uop,)))

    def bitcast(self, dtype: DType | str) -> Tensor:
        """The same bits read as `dtype` (which must have the same size).

        >>> Tensor([1.0]).bitcast("uint32").tolist()
        [1065353216]
        """
        dt = to_dtype(dtype)
        if dt.itemsize != self.dtype.itemsize:
            raise TypeError(f"bitcast: {self.dtype} ({self.dtype.itemsize} bytes) and {dt} ({dt.itemsize}) differ")
        if dt == self.dtype:
            return self
        if self.dtype == dtypes.bfloat16:
            return Tensor(_storage_uop(self.uop)).bitcast(dt)
        if dt == dtypes.bfloat16:
            return Tensor(UOp(Ops.BITCAST, dt, (self.bitcast(dtypes.uint16).uop,)))
        return Tensor(UOp(Ops.BITCAST, dt, (self.uop,)))

    def float(self) -> Tensor:
        """Cast to float32."""
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        """Cast to float16."""
        return self.cast(dtypes.float16)

    def double(self) -> Tensor:
        """Cast to float64."""
        return self.cast(dtypes.float64)

    def int(self) -> Tensor:
        """Cast to int32."""
        return self.cast(dtypes.int32)

    def bool(self) -> Tensor:
        """Cast to bool."""
        return self.cast(dtypes.bool)

    def long(self) -> Tensor:
        """Cast to int64."""
        return self.cast(dtypes.int64)

    def is_floating_point(self) -> bool:
        """Whether the dtype is a float dtype."""
        return dtypes.is_float(self.dtype)

    def add(self, x: Any, reverse: bool = False) -> Tensor:
        """Elementwise sum with broadcasting and type promotion.

        >>> Tensor([1, 2]).add(1.5).tolist()
        [2.5, 3.5]
        """
        a, b = self._broadcasted(x, reverse, "add")
        return a._alu(Ops.ADD, b)

    def sub(self, x: Any, reverse: bool = False) -> Tensor:
        """Elementwise difference.

        >>> Tensor([3, 4]).sub(1).tolist()
        [2, 3]
        """
        a, b = self._broadcasted(x, reverse, "sub")
        if a.dtype == dtypes.bool:
            raise TypeError("sub: subtracting bool tensors is not supported; use logical_xor")
        return a._alu(Ops.ADD, b.neg())

    def mul(self, x: Any, reverse: bool = False) -> Tensor:
        """Elementwise product.

        >>> Tensor([1, 2]).mul(3).tolist()
        [3, 6]
        """
        a, b = self._broadcasted(x, reverse, "mul")
        return a._alu(Ops.MUL, b)

    def div(self, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        """True division (ints promote to float); rounding_mode "trunc" or "floor" as in PyTorch.

        >>> Tensor([7, -7]).div(2, rounding_mode="floor").tolist()
        [3, -4]
        """
        if rounding_mode not in (None, "trunc", "floor"):
            raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
        a, b = self._broadcasted(x, reverse, "div")
        if rounding_mode is None:
            a, b = a.cast(least_upper_float(a.dtype)), b.cast(least_upper_float(b.dtype))
            return a._alu(Ops.FDIV, b)
        if a.dtype == dtypes.bool:
            a, b = a.cast(dtypes.int32), b.cast(dtypes.int32)
        if dtypes.is_int(a.dtype):
            q = a._alu(Ops.IDIV, b)
            if rounding_mode == "trunc":
                return q
            # floor: step down where the signs differ and there is a remainder
            r = a._alu(Ops.MOD, b)
            fix = (r != 0) & ((r < 0) != (b < 0))
            return fix.where(q - 1, q)
        q = a._alu(Ops.FDIV, b)
        return q.trunc() if rounding_mode == "trunc" else q.floor()

    def idiv(self, x: Any, reverse: bool = False) -> Tensor:
        """Integer division truncating toward zero (C semantics).

        >>> Tensor([7, -7]).idiv(2).tolist()
        [3, -3]
        """
        a, b = self._broadcasted(x, reverse, "idiv")
        if not dtypes.is_int(a.dtype):
            raise TypeError(f"idiv needs integer tensors, got {a.dtype}")
        return a._alu(Ops.IDIV, b)

    def mod(self, x: Any, reverse: bool = False) -> Tensor:
        """Remainder with the sign of the divisor (Python / PyTorch `%`).

        >>> Tensor([5, -5]).mod(3).tolist()
        [2, 1]
        """
        a, b = self._broadcasted(x, reverse, "mod")
        if a.dtype == dtypes.bool:
            raise TypeError("mod: not defined for bool tensors")
        if dtypes.is_int(a.dtype):
            r = a._alu(Ops.MOD, b)
            return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)
        if a.dtype.itemsize < 4:
            # the quotient and product need float32's precision (as torch computes half ops), then one rounding
            return a.float().mod(b.float()).cast(a.dtype)
        r = a - a.div(b, rounding_mode="floor") * b
        # a finite a mod an infinite b is a itself, or b when the signs differ (as Python and torch); a - 0 * inf is nan
        by_inf = ((a != 0) & ((a < 0) != (b < 0))).where(b, a)
        return (b.isinf() & a.isfinite()).where(by_inf, r)

    def neg(self) -> Tensor:
        """-x (logical not for bool).

        >>> Tensor([1, -2]).neg().tolist()
        [-1, 2]
        """
        if self.dtype == dtypes.bool:
            return self.logical_not()
        if dtypes.is_unsigned(self.dtype):
            # wraps like torch: x * (2**bits - 1) is -x modulo 2**bits (a -1 operand would widen to int64)
            return self * dtypes.max(self.dtype)
        return self * -1 if dtypes.is_int(self.dtype) else self._alu(Ops.NEG)

    def maximum(self, x: Any) -> Tensor:
        """Elementwise maximum (NaN wins, as in numpy).

        >>> Tensor([1, 5]).maximum(3).tolist()
        [3, 5]
        """
        a, b = self._broadcasted(x, False, "maximum")
        return a._alu(Ops.MAX, b)

    def minimum(self, x: Any) -> Tensor:
        """Elementwise minimum.

        >>> Tensor([1, 5]).minimum(3).tolist()
        [1, 3]
        """
        a, b = self._broadcasted(x, False, "minimum")
        return a._inverse()._alu(Ops.MAX, b._inverse())._inverse()

    def _inverse(self) -> Tensor:
        # an order-reversing map used to build min from max
        if dtypes.is_float(self.dtype):
            return self._alu(Ops.NEG)
        if self.dtype == dtypes.bool:
            return self.logical_not()
        if dtypes.is_unsigned(self.dtype):
            return Tensor(dtypes.max(self.dtype), device=self.device, dtype=self.dtype)._broadcast_to(self.shape) - self
        return self._alu(Ops.XOR, self.full_like(-1))

    def where(self, x: Any, y: Any) -> Tensor:
        """Elementwise `x if self else y` (self is cast to bool).

        >>> Tensor([True, False]).where(1, 2).tolist()
        [1, 2]
        """
        cond = self.cast(dtypes.bool)
        if isinstance(x, Tensor):
            x_t, y_t = x._broadcasted(y, False, "where")
        elif isinstance(y, Tensor):
            y_t, x_t = y._broadcasted(x, False, "where")
        else:
            x_t = Tensor(x, device=self.device)
            x_t, y_t = x_t._broadcasted(y, False, "where")
        shape = _broadcast_shape(cond.shape, x_t.shape, "where")
        cond, x_t, y_t = cond._broadcast_to(shape), x_t._broadcast_to(shape), y_t._broadcast_to(shape)
        return Tensor(UOp(Ops.WHERE, x_t.dtype, (cond.uop, x_t.uop, y_t.uop)))

    def masked_select(self, mask: Tensor) -> Tensor:
        """The elements where `mask` (broadcast) is true, as a 1-D tensor. Its length depends on the data: the mask is
        read back to the host (a sync point), as torch's shape is.

        >>> Tensor([1, 2, 3]).masked_select(Tensor([True, False, True])).tolist()
        [1, 3]
        """
        if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool:
            raise TypeError("masked_select: mask must be a bool tensor")
        shape = _broadcast_shape(self.shape, mask.shape, "masked_select")
        picked = np.flatnonzero(mask._broadcast_to(shape).numpy())
        return self._broadcast_to(shape).reshape(-1)._take(0, picked)

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        """`value` where `mask` is true, else self.

        >>> Tensor([1, 2, 3]).masked_fill(Tensor([True, False, True]), 0).tolist()
        [0, 2, 0]
        """
        if not isinstance(mask, Tensor) or mask.dtype != dtypes.bool:
            raise TypeError("masked_fill: mask must be a bool tensor")
        _broadcast_shape(self.shape, mask.shape, "masked_fill")
        return mask.where(value, self)

    def lerp(self, end: Any, weight: Any) -> Tensor:
        """self + (end - self) * weight.

        >>> Tensor([0.0, 10.0]).lerp(Tensor([10.0, 20.0]), 0.5).tolist()
        [5.0, 15.0]
        """
        return self + (end - self) * weight

    def _cmp(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse, op.name.lower())
        return a._alu(op, b)

    def __lt__(self, x: Any) -> Tensor:
        return self._cmp(Ops.CMPLT, x)

    def __gt__(self, x: Any) -> Tensor:
        return self._cmp(Ops.CMPLT, x, reverse=True)

    def __le__(self, x: Any) -> Tensor:
        a, b = self._broadcasted(x, False, "le")
        # NaN compares false both ways, so a <= b is not (b < a) for floats
        return a._alu(Ops.CMPLT, b) | a._alu(Ops.CMPEQ, b)

    def __ge__(self, x: Any) -> Tensor:
        a, b = self._broadcasted(x, False, "ge")
        return b._alu(Ops.CMPLT, a) | a._alu(Ops.CMPEQ, b)

    def __eq__(self, x: Any) -> Tensor:  # type: ignore[override]
        return self._cmp(Ops.CMPEQ, x)

    def __ne__(self, x: Any) -> Tensor:  # type: ignore[override]
        return self._cmp(Ops.CMPNE, x)

    __hash__ = object.__hash__

    def eq(self, x: Any) -> Tensor:
        """Elementwise ==."""
        return self == x

    def ne(self, x: Any) -> Tensor:
        """Elementwise !=."""
        return self != x

    def lt(self, x: Any) -> Tensor:
        """Elementwise <."""
        return self < x

    def le(self, x: Any) -> Tensor:
        """Elementwise <=."""
        return self <= x

    def gt(self, x: Any) -> Tensor:
        """Elementwise >."""
        return self > x

    def ge(self, x: Any) -> Tensor:
        """Elementwise >=."""
        return self >= x

    def logical_not(self) -> Tensor:
        """Elementwise not (of the value cast to bool).

        >>> Tensor([0, 2]).logical_not().tolist()
        [True, False]
        """
        return self.cast(dtypes.bool)._alu(Ops.CMPNE, Tensor(True, device=self.device)._broadcast_to(self.shape))

    def logical_and(self, x: Any) -> Tensor:
        """Elementwise and of the values cast to bool."""
        a, b = self._broadcasted(x, False, "logical_and")
        return a.cast(dtypes.bool)._alu(Ops.AND, b.cast(dtypes.bool))

    def logical_or(self, x: Any) -> Tensor:
        """Elementwise or of the values cast to bool."""
        a, b = self._broadcasted(x, False, "logical_or")
        return a.cast(dtypes.bool)._alu(Ops.OR, b.cast(dtypes.bool))

    def logical_xor(self, x: Any) -> Tensor:
        """Elementwise xor of the values cast to bool."""
        a, b = self._broadcasted(x, False, "logical_xor")
        return a.cast(dtypes.bool)._alu(Ops.CMPNE, b.cast(dtypes.bool))

    def _bitwise(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse, op.name.lower())
        if not (dtypes.is_int(a.dtype) or a.dtype == dtypes.bool):
            raise TypeError(f"{op.name.lower()}: bitwise ops need integer or bool tensors, got {a.dtype}")
        return a._alu(op, b)

    def bitwise_and(self, x: Any) -> Tensor:
        """Elementwise & of ints or bools.

        >>> Tensor([6]).bitwise_and(3).tolist()
        [2]
        """
        return self._bitwise(Ops.AND, x)

    def bitwise_or(self, x: Any) -> Tensor:
        """Elementwise | of ints or bools."""
        return self._bitwise(Ops.OR, x)

    def bitwise_xor(self, x: Any) -> Tensor:
        """Elementwise ^ of ints or bools."""
        return self._bitwise(Ops.XOR, x)

    def bitwise_not(self) -> Tensor:
        """Elementwise ~ (logical not for bool).

        >>> Tensor([0]).bitwise_not().tolist()
        [-1]
        """
        if not (dtypes.is_int(self.dtype) or self.dtype == dtypes.bool):
            raise TypeError(f"bitwise_not: needs an integer or bool tensor, got {self.dtype}")
        return self.logical_not() if self.dtype == dtypes.bool else self._alu(Ops.XOR, self.full_like(-1))

    def lshift(self, x: int) -> Tensor:
        """Shift integer bits left.

        >>> Tensor([1, 3]).lshift(2).tolist()
        [4, 12]
        """
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"lshift: needs an integer tensor, got {self.dtype}")
        return self._alu(Ops.SHL, self._const_operand(int(x))._broadcast_to(self.shape).cast(self.dtype))

    def rshift(self, x: int) -> Tensor:
        """Shift integer bits right (arithmetic for signed ints).

        >>> Tensor([8, -8]).rshift(2).tolist()
        [2, -2]
        """
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"rshift: needs an integer tensor, got {self.dtype}")
        return self._alu(Ops.SHR, self._const_operand(int(x))._broadcast_to(self.shape).cast(self.dtype))

    def __and__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.AND, x)

    def __or__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.OR, x)

    def __xor__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.XOR, x)

    def __rand__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.AND, x, True)

    def __ror__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.OR, x, True)

    def __rxor__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.XOR, x, True)

    def __invert__(self) -> Tensor:
        return self.bitwise_not()

    def __lshift__(self, x: int) -> Tensor:
        return self.lshift(x)

    def __rshift__(self, x: int) -> Tensor:
        return self.rshift(x)

    def isnan(self) -> Tensor:
        """Where the value is NaN.

        >>> Tensor([1.0, float("nan")]).isnan().tolist()
        [False, True]
        """
        return self != self if dtypes.is_float(self.dtype) else self.full_like(False, dtype=dtypes.bool)

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
        """Where the value is +inf (detect_positive) or -inf (detect_negative).

        >>> Tensor([1.0, float("inf"), -float("inf")]).isinf().tolist()
        [False, True, True]
        """
        if not dtypes.is_float(self.dtype):
            return self.full_like(False, dtype=dtypes.bool)
        pos = (self == math.inf) if detect_positive else self.full_like(False, dtype=dtypes.bool)
        neg = (self == -math.inf) if detect_negative else self.full_like(False, dtype=dtypes.bool)
        return pos | neg

    def isfinite(self) -> Tensor:
        """Where the value is neither inf nor NaN.

        >>> Tensor([1.0, float("inf")]).isfinite().tolist()
        [True, False]
        """
        return (self.isinf() | self.isnan()).logical_not()

    # ---- unary math; every transcendental is built from EXP2, LOG2, SIN, SQRT and RECIP

    def _float(self) -> Tensor:
        return self.cast(least_upper_float(self.dtype))

    def _unary_float(self, op: Ops) -> Tensor:
        return self._float()._alu(op)

    def exp2(self) -> Tensor:
        """2 ** x.

        >>> Tensor([3.0]).exp2().tolist()
        [8.0]
        """
        return self._unary_float(Ops.EXP2)

    def log2(self) -> Tensor:
        """Base-2 logarithm.

        >>> Tensor([8.0]).log2().tolist()
        [3.0]
        """
        return self._unary_float(Ops.LOG2)

    def exp(self) -> Tensor:
        """e ** x, accurate to the dtype over its whole range.

        >>> round(Tensor([1.0]).exp().item(), 5)
        2.71828
        """
        # codegen recognizes EXP2(x * log2(e)) and reduces x by ln2 in two parts (see codegen/transcendental.py)
        return (self._float() * (1 / math.log(2)))._alu(Ops.EXP2)

    def log(self) -> Tensor:
        """Natural logarithm.

        >>> round(Tensor([math.e]).log().item(), 5)
        1.0
        """
        return self._unary_float(Ops.LOG2) * math.log(2)

    def log1p(self) -> Tensor:
        """log(1 + x), accurate for small x.

        >>> Tensor([1e-10]).log1p().tolist()[0] > 0
        True
        """
        x = self._float()
        u = x + 1
        exact = u == 1
        # log(u) * x / (u - 1) corrects the rounding of 1 + x (Goldberg); u == 1 means log1p(x) ~ x (and the unused
        # branch divides by 1 there, so its gradient stays finite)
        corrected = u.log() * x / exact.where(1, u - 1)
        return exact.where(x, (u == math.inf).where(math.inf, corrected))

    def expm1(self) -> Tensor:
        """exp(x) - 1, accurate for small x.

        >>> Tensor([0.0]).expm1().tolist()
        [0.0]
        """
        x = self._float()
        u = x.exp()
        # (u - 1) * x / log(u) corrects the rounding of exp for small x (Kahan); away from 0, u - 1 is accurate as it
        # is, and the correction's (u - 1) * x would overflow near the top of the range (expm1(88) in float32)
        corrected = (u - 1) * x / u.log()
        near_zero = (u > 0.5) & (u < 2.0)
        return (u == 1).where(x, near_zero.where(corrected, u - 1))

    def sqrt(self) -> Tensor:
        """Square root.

        >>> Tensor([4.0]).sqrt().tolist()
        [2.0]
        """
        return self._unary_float(Ops.SQRT)

    def rsqrt(self) -> Tensor:
        """1 / sqrt(x).

        >>> Tensor([4.0]).rsqrt().tolist()
        [0.5]
        """
        return self.sqrt().reciprocal()

    def reciprocal(self) -> Tensor:
        """1 / x.

        >>> Tensor([4.0]).reciprocal().tolist()
        [0.25]
        """
        return self._unary_float(Ops.RECIP)

    def sin(self) -> Tensor:
        """Sine.

        >>> Tensor([0.0]).sin().tolist()
        [0.0]
        """
        return self._unary_float(Ops.SIN)

    def cos(self) -> Tensor:
        """Cosine, as 1 - 2 sin(x/2)**2 (x/2 is exact, so large arguments stay accurate).

        >>> Tensor([0.0]).cos().tolist()
        [1.0]
        """
        x = self._float()
        if x.dtype.itemsize < 4:
            # three half-precision roundings would be a few ulp off: one rounding of the float32 answer
            return x.float().cos().cast(x.dtype)
        s = (x * 0.5).sin()
        return 1 - 2 * s * s

    def tan(self) -> Tensor:
        """Tangent, sin(x) / cos(x).

        >>> round(Tensor([math.pi / 4]).tan().item(), 5)
        1.0
        """
        x = self._float()
        if x.dtype.itemsize < 4:
            # the exact products below need float32's bits
            return x.float().tan().cast(x.dtype)
        # x = k * pi/2 + r with |r| <= pi/4, pi/2 in three parts (Cody-Waite) so that k * part is exact for |k| < 2**13:
        # sin(x) / cos(x) loses all relative accuracy (and the sign) next to the poles, where cos(x) ~ 0
        k = (x * (2 / math.pi)).round()
        r = x - k * 1.5703125 - k * 4.837512969970703125e-4 - k * 7.54978995489188216e-8
        half = r * 0.5
        s, c = r.sin(), 1 - 2 * half.sin() * half.sin()
        odd = (k * 0.5).floor() != k * 0.5
        reduced = odd.where(-c / s, s / c)
        return (x.abs() < 12000).where(reduced, x.sin() / x.cos())

    def trunc(self) -> Tensor:
        """Round toward zero.

        >>> Tensor([-1.5, 1.5]).trunc().tolist()
        [-1.0, 1.0]
        """
        return self if not dtypes.is_float(self.dtype) else self._alu(Ops.TRUNC)

    def floor(self) -> Tensor:
        """Round toward -inf.

        >>> Tensor([-1.5, 1.5]).floor().tolist()
        [-2.0, 1.0]
        """
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (self < t).where(t - 1, t)

    def ceil(self) -> Tensor:
        """Round toward +inf.

        >>> Tensor([-1.5, 1.5]).ceil().tolist()
        [-1.0, 2.0]
        """
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (self > t).where(t + 1, t)

    def round(self) -> Tensor:
        """Round half to even (as numpy and PyTorch).

        >>> Tensor([0.5, 1.5, 2.5, -0.5]).round().tolist()
        [0.0, 2.0, 2.0, -0.0]
        """
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        frac = self - t
        step = (self > 0).where(1.0, -1.0).cast(self.dtype)
        t_is_odd = (t * 0.5).trunc() != t * 0.5
        up = (frac.abs() > 0.5) | ((frac.abs() == 0.5) & t_is_odd)
        return up.where(t + step, t)

    def abs(self) -> Tensor:
        """|x|.

        >>> Tensor([-2, 3]).abs().tolist()
        [2, 3]
        """
        if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool:
            return self
        # both zeros give +0.0 (MAX of +0.0 and -0.0 may pick either), NaN stays NaN; the gradient at 0 is 0 as in torch
        return (self < 0).where(-self, (self == 0).where(0, self))

    def sign(self) -> Tensor:
        """-1, 0 or 1 (NaN stays NaN).

        >>> Tensor([-2.0, 0.0, 3.0]).sign().tolist()
        [-1.0, 0.0, 1.0]
        """
        if self.dtype == dtypes.bool:
            return self
        ret = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
        return self.isnan().where(self, ret) if dtypes.is_float(self.dtype) else ret

    def copysign(self, other: Any) -> Tensor:
        """|self| with the sign (bit) of `other`, so -0.0 counts as negative; float result, as torch.copysign.

        >>> Tensor([1.0, -2.0]).copysign(Tensor([-0.0, 3.0])).tolist()
        [-1.0, 2.0]
        """
        x, y = self._float()._broadcasted(other, op="copysign")
        x, y = x._float(), y._float()
        # the sign bit of y: negative values, and -0.0 (1 / -0.0 is -inf)
        neg = (y < 0) | ((y == 0) & (y.reciprocal() < 0))
        # |x|, with a zero gradient at 0 (as PyTorch's sign(x) * sign(y))
        mag = (x < 0).where(-x, (x == 0).where(0.0, x))
        # other gets a zero gradient (it only chooses the sign), as in PyTorch
        return Tensor.full(mag.shape, True, device=self.device).where(neg.where(-mag, mag), y)

    def isclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> Tensor:
        """|self - other| <= atol + rtol |other| elementwise; infinities are close only to themselves.

        >>> Tensor([1.0, 2.0]).isclose(Tensor([1.0 + 1e-7, 2.1])).tolist()
        [True, False]
        """
        a, b = self._broadcasted(other, op="isclose")
        ret = a == b
        if dtypes.is_float(a.dtype):
            finite = (a - a == 0) & (b - b == 0)
            ret = ret | (finite & ((a - b).abs() <= atol + rtol * b.abs()))
            if equal_nan:
                ret = ret | (a.isnan() & b.isnan())
        else:
            ret = ret | ((a - b).abs().cast(dtypes.float64) <= atol + rtol * b.abs().cast(dtypes.float64))
        return ret

    def square(self) -> Tensor:
        """x * x.

        >>> Tensor([3]).square().tolist()
        [9]
        """
        return self * self

    def clip(self, min_: Any = None, max_: Any = None) -> Tensor:
        """Clamp to [min_, max_] (either may be None).

        >>> Tensor([-1, 5, 10]).clip(0, 6).tolist()
        [0, 5, 6]
        """
        if min_ is None and max_ is None:
            raise ArgumentError("clip: at least one of min_ and max_ must be given")
        t = self
        if min_ is not None:
            t = t.maximum(min_)
        if max_ is not None:
            t = t.minimum(max_)
        return t

    clamp = clip

    def pow(self, x: Any, reverse: bool = False) -> Tensor:
        """self ** x; small integer exponents multiply, others use POW (negative bases with integer exponents work).

        >>> Tensor([2, 3]).pow(2).tolist()
        [4, 9]
        >>> Tensor([-2.0]).pow(3.0).tolist()
        [-8.0]
        """
        if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool) and float(x).is_integer():
            if self.dtype == dtypes.bool:
                # bool ** number promotes like bool + number (torch: bool ** 2 is an integer tensor)
                return self.cast(dtypes.default_int if isinstance(x, int) else dtypes.default_float).pow(x)
            if x == 0:
                # ones, still computed from self so that its gradient is zeros (as PyTorch), and 1 for inf and nan
                return Tensor.full(self.shape, True, device=self.device).where(1, self)
            if 0 < x <= 8:
                ret = self
                for _ in range(int(x) - 1):
                    ret = ret * self
                return ret
            if -8 <= x < 0 and dtypes.is_float(self.dtype):
                # (1/x)**n rather than 1/x**n: at x = 0 the gradient is -inf (no 0 * inf), as PyTorch's n x**(n-1)
                return self.reciprocal().pow(-x)
            if x < 0 and isinstance(x, int) and not dtypes.is_float(self.dtype):
                # the answer is not an integer (torch refuses too); a tensor of exponents gives truncated results
                raise ValueError(
                    f"pow: integers to negative integer powers are not allowed ({self.dtype} ** {x}); "
                    "cast to a float dtype first"
                )
        a, b = self._broadcasted(x, reverse, "pow")
        if a.dtype == dtypes.bool:
            a, b = a.cast(dtypes.int32), b.cast(dtypes.int32)
        if dtypes.is_int(a.dtype):
            # an integer power computed in float64 (exact up to 2**53), as torch gives an int result
            return a.cast(dtypes.float64)._alu(Ops.POW, b.cast(dtypes.float64)).cast(a.dtype)
        return a._alu(Ops.POW, b)

    def __pow__(self, x: Any) -> Tensor:
        return self.pow(x)

    def __rpow__(self, x: Any) -> Tensor:
        return self.pow(x, reverse=True)

    # ---- activations

    def relu(self) -> Tensor:
        """max(x, 0).

        >>> Tensor([-1.0, 2.0]).relu().tolist()
        [0.0, 2.0]
        """
        return (self > 0).where(self, 0)

    def sigmoid(self) -> Tensor:
        """1 / (1 + exp(-x)), stable for large |x|.

        >>> Tensor([0.0]).sigmoid().tolist()
        [0.5]
        """
        x = self._float()
        neg = x < 0
        # e = exp(-|x|) never overflows, so neither the value nor its gradient meets inf * 0 at large |x|
        e = neg.where(x, -x).exp()
        return neg.where(e, 1) / (1 + e)

    def logsigmoid(self) -> Tensor:
        """log(sigmoid(x)) = -softplus(-x)."""
        return -(-self).softplus()

    def tanh(self) -> Tensor:
        """Hyperbolic tangent, (1 - e) / (1 + e) with e = exp(-2|x|) and the sign of x.

        >>> Tensor([0.0]).tanh().tolist()
        [0.0]
        """
        x = self._float()
        e = (-2 * x.abs()).exp()
        # for small |x|, expm1 keeps the digits that 1 - e would cancel
        num = -(-2 * x.abs()).expm1()
        t = (num / (1 + e)).abs()
        # the gradient is taken from 2 sigmoid(2x) - 1 (the same function, finite derivatives everywhere)
        return _with_gradient_of((x < 0).where(-t, t), 2 * (2 * x).sigmoid() - 1)

    # ---- hyperbolic and inverse trigonometric functions, erf: each value computed where it is accurate, its gradient
    # the textbook derivative (see _with_derivative), so no branch's inf or nan leaks into a gradient

    def sinh(self) -> Tensor:
        """Hyperbolic sine (a series near 0, where (e^x - e^-x) / 2 would cancel).

        >>> Tensor([0.0]).sinh().tolist()
        [0.0]
        """
        x = self._float()
        return _with_derivative(x._sinh_value(), x, (x.exp() + (-x).exp()) / 2)

    def _sinh_value(self) -> Tensor:
        small = self.abs() < 1
        xs = small.where(self, 0)
        z = xs * xs
        series = xs * (1 + z / 6 * (1 + z / 20 * (1 + z / 42 * (1 + z / 72 * (1 + z / 110)))))
        return small.where(series, (self.exp() - (-self).exp()) / 2)

    def cosh(self) -> Tensor:
        """Hyperbolic cosine.

        >>> Tensor([0.0]).cosh().tolist()
        [1.0]
        """
        x = self._float()
        # the gradient is sinh computed accurately (e^x - e^-x would cancel near 0)
        return _with_derivative((x.exp() + (-x).exp()) / 2, x, x._sinh_value())

    def asinh(self) -> Tensor:
        """Inverse hyperbolic sine.

        >>> Tensor([0.0]).asinh().tolist()
        [0.0]
        """
        x = self._float()
        return _with_derivative(x._odd(Tensor._asinh_abs), x, (x * x + 1).rsqrt())

    def _asinh_abs(self) -> Tensor:
        # log(2a) where a*a would overflow; log1p(a + a^2 / (1 + sqrt(a^2 + 1))) keeps the digits near 0
        huge = self > 1e10
        a = huge.where(0, self)
        near = (a + a * a / (1 + (a * a + 1).sqrt())).log1p()
        return huge.where(huge.where(self, 1).log() + math.log(2), near)

    def _odd(self, on_abs: Any) -> Tensor:
        # an odd function from its values on |x| (|x| as a select: its gradient is +-1, also at 0)
        neg = self < 0
        r = on_abs(neg.where(-self, self))
        return neg.where(-r, r)

    def acosh(self) -> Tensor:
        """Inverse hyperbolic cosine (nan below 1).

        >>> Tensor([1.0]).acosh().tolist()
        [0.0]
        """
        x = self._float()
        huge = x > 1e10
        t = huge.where(0, x - 1)
        near = (t + (2 * t + t * t).sqrt()).log1p()
        derivative = ((x - 1) * (x + 1)).rsqrt()
        return _with_derivative(huge.where(huge.where(x, 1).log() + math.log(2), near), x, derivative)

    def atanh(self) -> Tensor:
        """Inverse hyperbolic tangent: (log1p(x) - log1p(-x)) / 2.

        >>> Tensor([0.0]).atanh().tolist()
        [0.0]
        """
        x = self._float()
        return _with_derivative((x.log1p() - (-x).log1p()) / 2, x, (1 - x * x).reciprocal())

    def atan(self) -> Tensor:
        """Inverse tangent: reduced to |t| <= tan(pi/8) (pi/2 - atan(1/x), pi/4 + atan((x-1)/(x+1))), then a
        polynomial (Cephes' single-precision coefficients).

        >>> Tensor([0.0]).atan().tolist()
        [0.0]
        """
        x = self._float()
        return _with_derivative(x._odd(Tensor._atan_abs), x, (1 + x * x).reciprocal())

    def _atan_abs(self) -> Tensor:
        big, mid = self > 2.414213562373095, self > 0.4142135623730950
        t = big.where(-big.where(self, 1).reciprocal(), mid.where((self - 1) / (self + 1), self))
        offset = big.where(math.pi / 2, mid.where(math.pi / 4, 0.0))
        z = t * t
        poly = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * t + t
        return offset + poly

    def asin(self) -> Tensor:
        """Inverse sine: atan(x / sqrt((1 - x)(1 + x))) (nan outside [-1, 1]).

        >>> Tensor([0.0]).asin().tolist()
        [0.0]
        """
        x = self._float()
        return _with_derivative((x / ((1 - x) * (1 + x)).sqrt()).atan(), x, ((1 - x) * (1 + x)).rsqrt())

    def acos(self) -> Tensor:
        """Inverse cosine: 2 atan(sqrt((1 - x) / (1 + x))), accurate near 1.

        >>> Tensor([1.0]).acos().tolist()
        [0.0]
        """
        x = self._float()
        return _with_derivative(2 * ((1 - x) / (1 + x)).sqrt().atan(), x, -((1 - x) * (1 + x)).rsqrt())

    def erf(self) -> Tensor:
        """The error function: its Taylor series below 0.5, Abramowitz & Stegun 7.1.26 above (error < 2e-7).

        >>> Tensor([0.0]).erf().tolist()
        [0.0]
        """
        x = self._float()
        return _with_derivative(x._odd(Tensor._erf_abs), x, (2 / math.sqrt(math.pi)) * (-x * x).exp())

    def _erf_abs(self) -> Tensor:
        small = self < 0.5
        s = small.where(self, 0)
        z = s * s
        series = (
            s * (2 / math.sqrt(math.pi)) * (1 - z * (1 / 3 - z * (1 / 10 - z * (1 / 42 - z * (1 / 216 - z / 1320)))))
        )
        t = (1 + 0.3275911 * self).reciprocal()
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        return small.where(series, 1 - poly * (-self * self).exp())

    def gelu(self, approximate: str = "tanh") -> Tensor:
        """GELU: the tanh approximation by default (as tinygrad; PyTorch's approximate="tanh"), or the exact
        x * (1 + erf(x / sqrt 2)) / 2 with approximate="none" (PyTorch's default).

        >>> Tensor([0.0]).gelu().tolist()
        [0.0]
        """
        if approximate not in ("tanh", "none"):
            raise ValueError(f"gelu: approximate must be 'tanh' or 'none', got {approximate!r}")
        x = self._float()
        if approximate == "none":
            return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())
        return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())

    def quick_gelu(self) -> Tensor:
        """x * sigmoid(1.702 x)."""
        return self * (self * 1.702).sigmoid()

    def silu(self) -> Tensor:
        """x * sigmoid(x).

        >>> Tensor([0.0]).silu().tolist()
        [0.0]
        """
        return self * self.sigmoid()

    swish = silu

    def softplus(self, beta: float = 1.0) -> Tensor:
        """log(1 + exp(beta x)) / beta, computed without overflow.

        >>> round(Tensor([0.0]).softplus().item(), 5)
        0.69315
        """
        bx = self._float() * beta
        pos = bx >= 0
        # max(bx, 0) + log1p(exp(-|bx|)), with selects whose gradients add up to sigmoid(bx) (1/2 at 0, as PyTorch)
        return (pos.where(bx, 0) + pos.where(-bx, bx).exp().log1p()) * (1 / beta)

    def mish(self) -> Tensor:
        """x * tanh(softplus(x))."""
        return self * self.softplus().tanh()

    def elu(self, alpha: float = 1.0) -> Tensor:
        """x for x > 0, alpha (exp(x) - 1) otherwise.

        >>> Tensor([1.0, 0.0]).elu().tolist()
        [1.0, 0.0]
        """
        x = self._float()
        return (x > 0).where(x, alpha * x.expm1())

    def celu(self, alpha: float = 1.0) -> Tensor:
        """max(0, x) + min(0, alpha (exp(x / alpha) - 1))."""
        x = self._float()
        return (x > 0).where(x, alpha * (x * (1 / alpha)).expm1())

    def selu(self, alpha: float = 1.6732632423543772, gamma: float = 1.0507009873554805) -> Tensor:
        """gamma * elu(x, alpha) with the self-normalizing constants."""
        return gamma * self.elu(alpha)

    def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
        """x for x > 0, neg_slope * x otherwise.

        >>> Tensor([-1.0, 2.0]).leaky_relu(0.1).tolist()
        [-0.10000000149011612, 2.0]
        """
        return (self < 0).where(self * neg_slope, self)

    def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
        """clip(alpha x + beta, 0, 1)."""
        return (alpha * self + beta).clip(0, 1)

    def hardswish(self) -> Tensor:
        """x * relu6(x + 3) / 6."""
        return self * (self + 3).relu6() * (1 / 6)

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        """clip(x, min_val, max_val)."""
        return self.clip(min_val, max_val)

    def relu6(self) -> Tensor:
        """min(max(x, 0), 6)."""
        return self.relu().minimum(6)

    def softsign(self) -> Tensor:
        """x / (1 + |x|)."""
        return self / (1 + self.abs())

    __add__ = add
    __mul__ = mul
    __sub__ = sub
    __truediv__ = div
    __neg__ = neg
    __mod__ = mod

    def __abs__(self) -> Tensor:
        return self.abs()

    def __radd__(self, x: Any) -> Tensor:
        return self.add(x, True)

    def __rsub__(self, x: Any) -> Tensor:
        return self.sub(x, True)

    def __rmul__(self, x: Any) -> Tensor:
        return self.mul(x, True)

    def __rtruediv__(self, x: Any) -> Tensor:
        return self.div(x, True)

    def __rmod__(self, x: Any) -> Tensor:
        return self.mod(x, True)

    def __floordiv__(self, x: Any) -> Tensor:
        return self.div(x, rounding_mode="floor")

    def __rfloordiv__(self, x: Any) -> Tensor:
        return self.div(x, True, rounding_mode="floor")

    def __matmul__(self, x: Tensor) -> Tensor:
        return self.matmul(x)

    def __bool__(self) -> bool:
        raise TypeError("the truth value of a Tensor is ambiguous; use .item() or .numpy()")

    # ------------------------------------------------------------------------------------------------------------
    # reductions

    def _axes(self, axis: int | Sequence[int] | None, op: str) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        raw = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
        return tuple(sorted({_normalize_axis(int(a), self.ndim, op, self.shape) for a in raw}))

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        name = {Ops.ADD: "sum", Ops.MAX: "max", Ops.MUL: "prod"}[op]
        if self.dtype == dtypes.bfloat16:
            return self.float()._reduce(op, axis, keepdim).cast(dtypes.bfloat16)
        axes = self._axes(axis, name)
        if self.ndim == 0:
            return self
        kept = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
        final = kept if keepdim else tuple(s for i, s in enumerate(self.shape) if i not in axes)
        if not axes:
            return self
        if self.numel() == 0:
            # a max over nothing has no value (as in PyTorch), except for bool: any() of nothing is False
            if op is Ops.MAX and self.dtype != dtypes.bool and any(self.shape[a] == 0 for a in axes):
                raise EmptyReduceError(
                    f"{name}: reducing an empty axis has no identity (shape {self.shape}, axes {axes})"
                )
            return self._reduce_empty(op, axes, final)
        real = [a for a in axes if self.shape[a] != 1]
        if not real:
            return self.reshape(final)
        ret = Tensor(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, tuple(real))))
        return ret.reshape(final)

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

    def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DType | None = None) -> Tensor:
        """Sum over `axis` (all axes when None), accumulating in `dtype`.

        Small ints and bool accumulate (and return) int32, unsigned ones uint32; half floats accumulate in float32
        and return their own dtype, as in tinygrad.

        >>> Tensor([[1, 2], [3, 4]]).sum(axis=0).tolist()
        [4, 6]
        """
        acc = to_dtype(dtype) if dtype is not None else _sum_acc_dtype(self.dtype)
        ret = self.cast(acc)._reduce(Ops.ADD, axis, keepdim)
        return ret.cast(self.dtype) if dtype is None and self.dtype in (dtypes.float16, dtypes.bfloat16) else ret

    def prod(
        self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DType | None = None
    ) -> Tensor:
        """Product over `axis`.

        >>> Tensor([[1, 2], [3, 4]]).prod(axis=1).tolist()
        [2, 12]
        """
        acc = to_dtype(dtype) if dtype is not None else (dtypes.int32 if self.dtype == dtypes.bool else self.dtype)
        return self.cast(acc)._reduce(Ops.MUL, axis, keepdim)

    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Maximum over `axis` (NaN wins).

        >>> Tensor([[1, 5], [3, 2]]).max(axis=1).tolist()
        [5, 3]
        """
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Minimum over `axis`.

        >>> Tensor([[1, 5], [3, 2]]).min(axis=1).tolist()
        [1, 2]
        """
        if self.numel() == 0 and any(self.shape[a] == 0 for a in self._axes(axis, "min")):
            raise EmptyReduceError(f"min: reducing an empty axis has no identity (shape {self.shape})")
        return self._inverse()._reduce(Ops.MAX, axis, keepdim)._inverse()

    def _count(self, axis: int | Sequence[int] | None) -> int:
        return prod(self.shape[a] for a in self._axes(axis, "mean")) if self.ndim else 1

    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Mean over `axis` (ints give float32).

        >>> Tensor([[1, 2], [3, 4]]).mean().tolist()
        2.5
        """
        out_dt = least_upper_float(self.dtype)
        acc = dtypes.float32 if out_dt in (dtypes.float16, dtypes.bfloat16) else out_dt
        total = self.sum(axis, keepdim, dtype=acc)
        count = self._count(axis)
        return (total * (1 / count) if count else total * math.nan).cast(out_dt)

    def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        """Variance over `axis`, dividing by N - correction.

        >>> Tensor([1.0, 2.0, 3.0, 4.0]).var().tolist()
        1.6666666269302368
        """
        squares = (self._float() - self._float().mean(axis, keepdim=True)).square()
        n = self._count(axis)
        return squares.sum(axis, keepdim) / max(n - correction, 0)

    def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        """Standard deviation over `axis`, dividing by N - correction.

        >>> Tensor([1.0, 3.0]).std().tolist()
        1.4142135381698608
        """
        return self.var(axis, keepdim, correction).sqrt()

    def var_mean(
        self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1
    ) -> tuple[Tensor, Tensor]:
        """(var, mean) over `axis`."""
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    def std_mean(
        self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1
    ) -> tuple[Tensor, Tensor]:
        """(std, mean) over `axis`."""
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """Index (int32) of the first maximum along `axis` (of the flattened tensor when None).

        >>> Tensor([[1, 5, 5], [7, 2, 3]]).argmax(axis=1).tolist()
        [1, 0]
        """
        if axis is None:
            ret = self.flatten().argmax(0)
            return ret.reshape((1,) * self.ndim) if keepdim else ret
        axis = _normalize_axis(axis, self.ndim, "argmax", self.shape)
        if self.ndim == 0:
            return Tensor(0, device=self.device, dtype=dtypes.int32)
        n = self.shape[axis]
        if n == 0:
            raise EmptyReduceError(f"argmax: axis {axis} of shape {self.shape} is empty")
        m = self.max(axis, keepdim=True)
        hit = (self == m) | self.isnan() if dtypes.is_float(self.dtype) else self == m
        # the first hit has the largest count-down value n - i
        countdown = Tensor.arange(n, 0, -1, device=self.device).reshape(_with((1,) * self.ndim, axis, n))
        ret = n - hit.where(countdown, 0).max(axis, keepdim)
        return ret.cast(dtypes.int32)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """Index (int32) of the first minimum along `axis`.

        >>> Tensor([3, 1, 1]).argmin().tolist()
        1
        """
        return self._inverse().argmax(axis, keepdim)

    def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Whether any value along `axis` is true.

        >>> Tensor([[0, 1], [0, 0]]).any(axis=1).tolist()
        [True, False]
        """
        return self.cast(dtypes.bool)._reduce(Ops.MAX, axis, keepdim)

    def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Whether every value along `axis` is true.

        >>> Tensor([[1, 1], [0, 1]]).all(axis=1).tolist()
        [True, False]
        """
        return self.logical_not().any(axis, keepdim).logical_not()

    def logsumexp(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """log(sum(exp(x))) along `axis`, shifted by the max so it never overflows.

        >>> round(Tensor([0.0, 0.0]).logsumexp().item(), 5)
        0.69315
        """
        x = self._float()
        if any(self.shape[a] == 0 for a in self._axes(axis, "logsumexp")):
            # nothing to shift by: log of an empty sum is -inf, as in PyTorch
            return x.exp().sum(axis, keepdim).log()
        m = x.max(axis, keepdim=True)
        # an infinite max would give inf - inf: shift by 0 there instead
        m = m.isinf().where(0.0, m).detach()
        ret = (x - m).exp().sum(axis, keepdim=True).log() + m
        return ret if keepdim else ret.squeeze(self._axes(axis, "logsumexp"))

    # ---- cumulative ops: a window of every prefix (pad + pool), reduced; long axes go in two levels

    def _cumalu(self, axis: int, op: Ops, name: str) -> Tensor:
        if self.ndim == 0:
            return self
        axis = _normalize_axis(axis, self.ndim, name, self.shape)
        n = self.shape[axis]
        if n <= 1:
            return self
        x = self.transpose(axis, -1)
        identity = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dtypes.min(self.dtype)}[op]
        if n <= _CUM_BLOCK:
            padded = x.pad(((0, 0),) * (x.ndim - 1) + ((n - 1, 0),), value=identity)
            ret = padded._pool((n,))._reduce(op, -1)
        else:
            # prefix within blocks of b, then add (combine) the prefix of the previous blocks' totals
            b = math.ceil(math.sqrt(n))
            nb = math.ceil(n / b)
            padded = x.pad(((0, 0),) * (x.ndim - 1) + ((0, nb * b - n),), value=identity)
            blocks = padded.reshape(x.shape[:-1] + (nb, b))._cumalu(-1, op, name)
            totals = blocks[..., -1]
            before = totals._cumalu(-1, op, name).pad(((0, 0),) * (x.ndim - 1) + ((1, -1),), value=identity)
            combine = {Ops.ADD: Tensor.add, Ops.MUL: Tensor.mul, Ops.MAX: Tensor.maximum}[op]
            ret = combine(blocks, before.unsqueeze(-1)).reshape(x.shape[:-1] + (nb * b,))._slice_axis(-1 % x.ndim, 0, n)
        return ret.transpose(axis, -1)

    def cumsum(self, axis: int = 0) -> Tensor:
        """Running sum along `axis` (ints accumulate like sum).

        >>> Tensor([1, 2, 3]).cumsum().tolist()
        [1, 3, 6]
        """
        acc = _sum_acc_dtype(self.dtype)
        ret = self.cast(acc)._cumalu(axis, Ops.ADD, "cumsum")
        return ret.cast(self.dtype) if self.dtype in (dtypes.float16, dtypes.bfloat16) else ret

    def cumprod(self, axis: int = 0) -> Tensor:
        """Running product along `axis`.

        >>> Tensor([1, 2, 3]).cumprod().tolist()
        [1, 2, 6]
        """
        return self.cast(dtypes.int32 if self.dtype == dtypes.bool else self.dtype)._cumalu(axis, Ops.MUL, "cumprod")

    def cummax(self, axis: int = 0) -> tuple[Tensor, Tensor]:
        """Running maximum along `axis` and the (int32) index where it was reached: (values, indices), as torch
        and tinygrad (a tie or a NaN takes the latest index).

        >>> [t.tolist() for t in Tensor([1, 3, 2, 3]).cummax()]
        [[1, 3, 3, 3], [0, 1, 1, 3]]
        """
        values = self._cumalu(axis, Ops.MAX, "cummax")
        return values, self._cum_index(values, axis)

    def cummin(self, axis: int = 0) -> tuple[Tensor, Tensor]:
        """Running minimum along `axis` and its index: (values, indices).

        >>> [t.tolist() for t in Tensor([3, 1, 2]).cummin()]
        [[3, 1, 1], [0, 1, 1]]
        """
        values = self._inverse()._cumalu(axis, Ops.MAX, "cummin")._inverse()
        return values, self._cum_index(values, axis)

    def _cum_index(self, values: Tensor, axis: int) -> Tensor:
        # the last position j <= i where self reached the running extreme (self[j] == values[j]): positions of those
        # hits, -1 elsewhere, carried forward by a running max
        if self.ndim == 0:
            return Tensor(0, device=self.device, dtype=dtypes.int32)
        axis = _normalize_axis(axis, self.ndim, "cummax", self.shape)
        n = self.shape[axis]
        hit = self == values
        if dtypes.is_float(self.dtype):
            hit = hit | self.isnan()
        pos = Tensor.arange(n, device=self.device, dtype=dtypes.int32).reshape(_with((1,) * self.ndim, axis, n))
        return hit.where(pos, -1)._cumalu(axis, Ops.MAX, "cummax")

    def logcumsumexp(self, axis: int = 0) -> Tensor:
        """log(cumsum(exp(x))) along `axis`, each prefix shifted by its own max (no overflow, no underflow to -inf).

        >>> [round(v, 4) for v in Tensor([0.0, 0.0]).logcumsumexp().tolist()]
        [0.0, 0.6931]
        """
        x = self._float()
        if x.ndim == 0:
            return x
        axis = _normalize_axis(axis, x.ndim, "logcumsumexp", x.shape)
        n = x.shape[axis]
        if n == 0:
            return x
        t = x.transpose(axis, -1)
        if n <= _CUM_BLOCK:
            # every prefix as a window (padded with -inf), then a logsumexp per window
            windows = t.pad(((0, 0),) * (t.ndim - 1) + ((n - 1, 0),), value=-math.inf)._pool((n,))
            return windows.logsumexp(-1).transpose(axis, -1)
        m = t.max(-1, keepdim=True)
        m = m.isinf().where(0.0, m).detach()
        return ((t - m).exp().cumsum(-1).log() + m).transpose(axis, -1)

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = True) -> tuple[Tensor, Tensor]:
        """Sorted values along `dim` and their (int32) indices, (values, indices); equal values keep their order,
        NaN sorts as the largest, as torch.sort. Each element's rank is counted against the others (n^2 compares).

        >>> [t.tolist() for t in Tensor([3, 1, 2]).sort()]
        [[1, 2, 3], [1, 2, 0]]
        """
        dim = _normalize_axis(dim, max(self.ndim, 1), "sort", self.shape)
        if self.ndim == 0:
            return self, Tensor(0, device=self.device, dtype=dtypes.int32)
        n = self.shape[dim]
        x = self._move_to_end(dim)
        a, b = x.unsqueeze(-1), x.unsqueeze(-2)
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
        # indices[r] = the i whose rank is r
        onehot = rank.unsqueeze(-2) == ar.reshape(n, 1)
        indices = onehot.where(ar, 0).sum(-1).cast(dtypes.int32)
        values = x.gather(x.ndim - 1, indices)
        last = self.ndim - 1
        return values.transpose(dim, last) if dim != last else values, (
            indices.transpose(dim, last) if dim != last else indices
        )

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
        """The (int32) indices that sort `dim`, as torch.argsort.

        >>> Tensor([3, 1, 2]).argsort().tolist()
        [1, 2, 0]
        """
        return self.sort(dim, descending, stable)[1]

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
        values, indices = self.sort(dim, descending=largest)
        if self.ndim == 0:
            return values, indices
        return values._slice_axis(dim, 0, k), indices._slice_axis(dim, 0, k)

    # ------------------------------------------------------------------------------------------------------------
    # gather, scatter and one-hot: index tensors compared with an arange, then a reduce

    def _move_to_end(self, dim: int) -> Tensor:
        return self.permute([d for d in range(self.ndim) if d != dim] + [dim])

    def _one_hot_along(self, n: int) -> Tensor:
        # self[..., None] == arange(n): shape self.shape + (n,)
        ar = Tensor.arange(n, device=self.device, dtype=self.dtype if dtypes.is_int(self.dtype) else dtypes.int32)
        return self.unsqueeze(-1) == ar.reshape((1,) * self.ndim + (n,))

    def one_hot(self, num_classes: int = -1) -> Tensor:
        """One-hot encoding of integer class indices (int32), a new last axis of `num_classes`.

        >>> Tensor([0, 2]).one_hot(3).tolist()
        [[1, 0, 0], [0, 0, 1]]
        """
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"one_hot: needs an integer tensor of class indices, got {self.dtype}")
        if num_classes == -1:
            num_classes = int(self.max().item()) + 1 if self.numel() else 0
        _check_values_in(self, 0, num_classes, lambda bad: f"one_hot: class {bad} is out of range [0, {num_classes})")
        return self._one_hot_along(num_classes).where(1, 0)

    def gather(self, dim: int, index: Tensor) -> Tensor:
        """out[i][j][k] = self[index[i][j][k]][j][k] for dim 0 (and likewise for other dims), as torch.gather.

        >>> Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[0, 0], [1, 0]])).tolist()
        [[1, 1], [4, 3]]
        """
        dim = _normalize_axis(dim, self.ndim, "gather", self.shape)
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype):
            raise TypeError("gather: index must be an integer tensor")
        if index.ndim != self.ndim or any(
            i > s for d, (i, s) in enumerate(zip(index.shape, self.shape, strict=True)) if d != dim
        ):
            raise ShapeError(f"gather: index shape {index.shape} doesn't fit input shape {self.shape} (dim {dim})")
        self._check_index_range(index, self.shape[dim], dim, "gather", negative=False)
        n = self.shape[dim]
        x = self.shrink(tuple(None if d == dim else (0, i) for d, i in enumerate(index.shape)))
        # x with `dim` moved last and a size-1 axis in its place, aligned with the one-hot of index
        x = x._move_to_end(dim).unsqueeze(dim)._broadcast_to(index.shape + (n,))
        hit = index._one_hot_along(n)
        return hit.where(x, Tensor(0, device=self.device, dtype=self.dtype))._reduce(_sum_op(self.dtype), -1)

    def _scatter_parts(self, dim: int, index: Tensor, src: Any, op: str) -> tuple[int, Tensor, Tensor]:
        dim = _normalize_axis(dim, self.ndim, op, self.shape)
        if not isinstance(index, Tensor) or not dtypes.is_int(index.dtype):
            raise TypeError(f"{op}: index must be an integer tensor")
        if index.ndim != self.ndim or any(
            i > s for d, (i, s) in enumerate(zip(index.shape, self.shape, strict=True)) if d != dim
        ):
            raise ShapeError(f"{op}: index shape {index.shape} doesn't fit self shape {self.shape} (dim {dim})")
        self._check_index_range(index, self.shape[dim], dim, op, negative=False)
        if isinstance(src, Tensor):
            if src.ndim != index.ndim or any(i > s for i, s in zip(index.shape, src.shape, strict=True)):
                raise ShapeError(f"{op}: src shape {src.shape} is smaller than index shape {index.shape}")
            src = src.shrink(tuple((0, i) for i in index.shape)).cast(self.dtype)
        else:
            src = Tensor.full(index.shape, src, dtype=self.dtype, device=self.device)
        n = self.shape[dim]
        # hit[..., p, ..., i] : index position i (along dim, moved last) writes target position p (at dim)
        hit = index._one_hot_along(n).transpose(dim, -1)
        vals = src._move_to_end(dim).unsqueeze(dim)._broadcast_to(hit.shape)
        # pad the index's smaller extents up to self's shape (nothing is written there)
        pads = tuple(
            (0, 0) if d == dim else (0, s - i) for d, (i, s) in enumerate(zip(index.shape, self.shape, strict=True))
        )
        hit = hit.pad(pads + ((0, 0),))
        vals = vals.pad(pads + ((0, 0),))
        return dim, hit, vals

    def scatter(self, dim: int, index: Tensor, src: Any, reduce: str | None = None) -> Tensor:
        """A copy of self with self[index[i][j]][j] = src[i][j] (dim 0), as torch.scatter; `reduce` "add" or
        "multiply" combines instead of replacing. With repeated indices and no reduce, the last write (in index order)
        wins, as PyTorch's CPU scatter.

        >>> Tensor.zeros(3).scatter(0, Tensor([2, 0]), Tensor([5.0, 6.0])).tolist()
        [6.0, 0.0, 5.0]
        """
        if reduce not in (None, "add", "multiply"):
            raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
        if reduce is not None:
            return self.scatter_reduce(dim, index, src, {"add": "sum", "multiply": "prod"}[reduce])
        _, hit, vals = self._scatter_parts(dim, index, src, "scatter")
        # of the writes to one position, keep the one with the highest position along `dim` in index
        k = hit.shape[-1]
        order = Tensor.arange(k, device=self.device, dtype=dtypes.int32).reshape((1,) * (hit.ndim - 1) + (k,))
        last = hit.where(order, -1).max(-1, keepdim=True)
        wins = hit & (order == last)
        zero = Tensor(0, device=self.device, dtype=self.dtype)
        written = wins.where(vals, zero)._reduce(_sum_op(self.dtype), -1)
        if dtypes.is_float(self.dtype):
            # every src element gets the gradient at its target, overwritten or not (PyTorch's gather backward): the
            # overwritten ones add an exact 0 that carries it
            lost = hit & ~wins & (vals - vals == 0)
            written = written - lost.where(vals.detach() - vals, zero).sum(-1)
        return hit.any(-1).where(written, self)

    def scatter_reduce(self, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:
        """Combine src into self at index along dim with "sum", "prod", "mean", "amax" or "amin", as torch.

        >>> Tensor([1.0, 1.0]).scatter_reduce(0, Tensor([0, 0, 1]), Tensor([2.0, 3.0, 4.0]), "sum").tolist()
        [6.0, 5.0]
        """
        if reduce not in ("sum", "prod", "mean", "amax", "amin"):
            raise ValueError(f"scatter_reduce: reduce must be sum, prod, mean, amax or amin, got {reduce!r}")
        _, hit, vals = self._scatter_parts(dim, index, src, "scatter_reduce")
        any_hit = hit.any(-1)
        dt = self.dtype
        if reduce in ("sum", "mean"):
            total = hit.where(vals, Tensor(0, device=self.device, dtype=dt))._reduce(_sum_op(dt), -1)
            if reduce == "sum":
                return self + total if include_self else any_hit.where(total, self)
            count = hit.cast(dtypes.int32)._reduce(Ops.ADD, -1)
            if include_self:
                total, count = total + self, count + 1
            mean = total.div(count.cast(dt), rounding_mode="floor" if not dtypes.is_float(dt) else None)
            return any_hit.where(mean.cast(dt), self)
        if reduce == "prod":
            total = hit.where(vals, Tensor(1, device=self.device, dtype=dt))._reduce(Ops.MUL, -1)
            return self * total if include_self else any_hit.where(total, self)
        inv = reduce == "amin"
        v = vals._inverse() if inv else vals
        low = Tensor(dtypes.min(dt), device=self.device, dtype=dt)
        best = hit.where(v, low)._reduce(Ops.MAX, -1)
        best = best._inverse() if inv else best
        if include_self:
            best = best.minimum(self) if inv else best.maximum(self)
        return any_hit.where(best, self)

    # ------------------------------------------------------------------------------------------------------------
    # linear algebra

    def dot(self, w: Tensor) -> Tensor:
        """Matrix product with numpy/PyTorch broadcasting of the batch dims.

        >>> Tensor([[1, 2], [3, 4]]).dot(Tensor([1, 1])).tolist()
        [3, 7]
        """
        if not isinstance(w, Tensor):
            raise TypeError(f"matmul: the right operand must be a Tensor, got {type(w).__name__}")
        if self.ndim == 0 or w.ndim == 0:
            raise ShapeError(f"matmul: both operands need at least 1 dimension, got {self.shape} and {w.shape}")
        x = self
        x_vec, w_vec = x.ndim == 1, w.ndim == 1
        if x_vec:
            x = x.reshape((1, x.shape[0]))
        if w_vec:
            w = w.reshape((w.shape[0], 1))
        if x.shape[-1] != w.shape[-2]:
            raise ShapeError(f"matmul: inner dimensions differ: {self.shape} @ {w.shape}")
        n, k, m = x.shape[-2], x.shape[-1], w.shape[-1]
        batch = _broadcast_shape(x.shape[:-2], w.shape[:-2], "matmul")
        out_dt = least_upper_dtype(x.dtype, w.dtype)
        xb = x.cast(out_dt).reshape(x.shape[:-2] + (n, 1, k))._broadcast_to(batch + (n, m, k))
        # (the scheduler may store a large row-major w in panels for the device: schedule/packing.py)
        wt = w.cast(out_dt).transpose(-1, -2).reshape(w.shape[:-2] + (1, m, k))
        wb = wt._broadcast_to(batch + (n, m, k))
        out = (xb * wb).sum(axis=-1, dtype=_sum_acc_dtype(out_dt)).cast(out_dt)
        if x_vec:
            out = out.squeeze(-2)
        if w_vec:
            out = out.squeeze(-1)
        return out

    def matmul(self, x: Tensor, reverse: bool = False) -> Tensor:
        """Matrix product (self @ x).

        >>> (Tensor([[1, 0], [0, 1]]) @ Tensor([[2], [3]])).tolist()
        [[2], [3]]
        """
        return x.dot(self) if reverse else self.dot(x)

    def __rmatmul__(self, x: Tensor) -> Tensor:
        return self.matmul(x, True)

    def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """self @ weight + bias with weight of shape (in, out) as in tinygrad (a 1-D weight scales elementwise).

        >>> Tensor([[1.0, 2.0]]).linear(Tensor([[1.0], [1.0]]), Tensor([0.5])).tolist()
        [[3.5]]
        """
        x = self * weight if weight.ndim == 1 else self.dot(weight)
        return x + bias if bias is not None else x

    @staticmethod
    def einsum(formula: str, *operands: Tensor) -> Tensor:
        """Einstein summation, e.g. "ij,jk->ik"; "..." broadcasts, a letter repeated in one operand takes the
        diagonal, and without "->" the output is the letters used once, sorted.

        >>> Tensor.einsum("ij,j->i", Tensor([[1, 2], [3, 4]]), Tensor([1, 1])).tolist()
        [3, 7]
        """
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = tuple(operands[0])
        formula = formula.replace(" ", "")
        lhs, arrow, rhs = formula.partition("->")
        inputs = lhs.split(",")
        if len(inputs) != len(operands):
            raise ArgumentError(f"einsum: {formula!r} names {len(inputs)} operands, got {len(operands)}")
        # "..." becomes upper-case letters for the broadcast dims
        ell_dims = max(
            (t.ndim - len(s.replace("...", "")) for s, t in zip(inputs, operands, strict=True) if "..." in s), default=0
        )
        ell = "".join(chr(ord("A") + i) for i in range(ell_dims))
        specs = []
        for s, t in zip(inputs, operands, strict=True):
            if "..." in s:
                n = t.ndim - len(s.replace("...", ""))
                s = s.replace("...", ell[ell_dims - n :])
            if len(s) != t.ndim:
                raise ShapeError(f"einsum: operand {s!r} has {len(s)} letters but the tensor has shape {t.shape}")
            specs.append(s)
        counts: dict[str, int] = {}
        for s in specs:
            for c in s:
                counts[c] = counts.get(c, 0) + 1
        if arrow:
            out = rhs.replace("...", ell)
        else:
            out = ell + "".join(sorted(c for c in counts if counts[c] == 1 and c not in ell))
        sizes: dict[str, int] = {}
        prepared = []
        for s, t in zip(specs, operands, strict=True):
            t, s = _einsum_diagonal(t, s)
            for c, n in zip(s, t.shape, strict=True):
                if c in sizes and n != sizes[c] and 1 not in (n, sizes[c]):
                    raise ShapeError(f"einsum: letter {c!r} has sizes {sizes[c]} and {n} in {formula!r}")
                sizes[c] = max(sizes.get(c, 1), n) if n != 0 and sizes.get(c, 1) != 0 else 0
            prepared.append((t, s))
        letters = sorted(sizes, key=lambda c: (c not in out, out.index(c) if c in out else 0, c))
        if any(c not in sizes for c in out):
            raise ArgumentError(f"einsum: output letter not in any input of {formula!r}")
        total: Tensor | None = None
        for t, s in prepared:
            aligned = t.permute([s.index(c) for c in letters if c in s])
            shape = tuple(t.shape[s.index(c)] if c in s else 1 for c in letters)
            aligned = aligned.reshape(shape)
            total = aligned if total is None else total * aligned
        assert total is not None
        total = total._broadcast_to(tuple(sizes[c] for c in letters))
        summed = tuple(i for i, c in enumerate(letters) if c not in out)
        return total.sum(summed) if summed else total

    # ------------------------------------------------------------------------------------------------------------
    # convolution and pooling: windows are movement ops over the input (no copies), then a multiply-reduce

    def _pool(self, k_: Sequence[int], stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1) -> Tensor:
        """Windows over the last len(k_) axes: shape (..., *out, *k_), out[o][j] = x[o * stride + j * dilation]."""
        n = len(k_)
        if self.ndim < n:
            raise ShapeError(f"pool: kernel {tuple(k_)} has more dims than the input shape {self.shape}")
        s_, d_ = _positive_n(stride, n, "stride", "pool"), _positive_n(dilation, n, "dilation", "pool")
        lead = self.ndim - n
        x = self
        tail: list[tuple[str, int]] = [("in", i) for i in range(n)]
        for i in range(n):
            pos = lead + tail.index(("in", i))
            x = x.permute([a for a in range(x.ndim) if a != pos] + [pos])
            tail.remove(("in", i))
            x = x._pool1d(k_[i], s_[i], d_[i])
            tail += [("out", i), ("k", i)]
        final = [("out", i) for i in range(n)] + [("k", i) for i in range(n)]
        return x.permute(list(range(lead)) + [lead + tail.index(lbl) for lbl in final])

    def _windows(self, pads: tuple, ks: tuple[int, ...], stride: Any, dilation: Any) -> Tensor:
        """self.pad(pads)._pool(ks, stride, dilation), replaying the movement ops worked out once per shape."""
        key = (self.shape, self.dtype, tuple(pads), tuple(ks), _as_key(stride), _as_key(dilation))
        recipe = _window_recipes.get(key)
        if recipe is None:
            # a stand-in of the same shape (never allocated): the recipe depends on shapes only
            buf = UOp.new_buffer(self.device, max(self.numel(), 1), self.dtype)
            probe = Tensor(UOp(Ops.RESHAPE, self.dtype, (buf,), self.shape))
            recipe = _movement_recipe(probe.pad(pads)._pool(ks, stride, dilation).uop, probe.uop)
            if len(_window_recipes) >= 256:
                _window_recipes.clear()
            _window_recipes[key] = recipe
        u = self.uop
        for op, arg in recipe:
            u = UOp(op, u.dtype, (u,), arg)
        return Tensor(u)

    def _pool1d(self, k: int, s: int, d: int) -> Tensor:
        # windows of the last axis as (..., o, k). Repeat the axis e times and read the flat result in rows of
        # R = m*L + d: element (j, i*s) of that grid is at flat j*R + i*s, i.e. x[(j*d + i*s) mod L] = x[j*d + i*s]
        lead, L = self.shape[:-1], self.shape[-1]
        o = (L - d * (k - 1) - 1) // s + 1
        if o <= 0 or k <= 0:
            raise ShapeError(f"pool: kernel {k} (dilation {d}) doesn't fit an axis of size {L}")
        m = max(1, math.ceil((o * s - d) / L))
        R = m * L + d
        e = math.ceil(k * R / L)
        x = self.unsqueeze(-2).expand(lead + (e, L)).reshape(lead + (e * L,))
        x = x._slice_axis(len(lead), 0, k * R).reshape(lead + (k, R))
        x = x._slice_axis(len(lead) + 1, 0, o * s).reshape(lead + (k, o, s))
        x = x._slice_axis(len(lead) + 2, 0, 1).reshape(lead + (k, o))
        return x.transpose(-1, -2)

    def conv2d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        padding: int | str | Sequence[int] = 0,
    ) -> Tensor:
        """N-d convolution (cross-correlation) of (N, C_in, *spatial) with weight (C_out, C_in/groups, *kernel).

        padding: an int, one int per spatial dim, 2 ints per spatial dim (tinygrad order: last dim first, as
        PyTorch's F.pad), "valid" or "same" (stride 1).

        >>> Tensor.ones(1, 1, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)).tolist()
        [[[[4.0, 4.0], [4.0, 4.0]]]]
        """
        if not isinstance(weight, Tensor):
            raise TypeError("conv2d: weight must be a Tensor")
        nd = weight.ndim - 2
        if nd < 1 or self.ndim != nd + 2:
            raise ShapeError(f"conv: input {self.shape} and weight {weight.shape} need N+2 and N+2 dims (N >= 1)")
        (bs, cin_), (cout, cin), ks = self.shape[:2], weight.shape[:2], weight.shape[2:]
        if groups < 1 or cin_ != groups * cin:
            raise ShapeError(
                f"conv: input {self.shape} has {cin_} channels but weight {weight.shape} with groups={groups} "
                f"expects {groups * cin}"
            )
        if cout % groups:
            raise ShapeError(f"conv: {cout} output channels of weight {weight.shape} don't split into {groups} groups")
        if bias is not None and bias.shape != (cout,):
            raise ShapeError(f"conv: bias shape {bias.shape} should be ({cout},)")
        _positive_n(stride, nd, "stride", "conv2d")
        pads = _conv_pads(padding, nd, ks, _positive_n(dilation, nd, "dilation", "conv2d"), "conv2d")
        x = self._windows(((0, 0), (0, 0)) + pads, ks, stride, dilation)
        out_sp = x.shape[2 : 2 + nd]
        rcout = cout // groups
        out_dt = least_upper_dtype(self.dtype, weight.dtype)
        x = x.cast(out_dt).reshape((bs, groups, 1, cin) + out_sp + ks)
        w = weight.cast(out_dt).reshape((1, groups, rcout, cin) + (1,) * nd + ks)
        prod_ = x._broadcast_to((bs, groups, rcout, cin) + out_sp + ks) * w._broadcast_to(
            (bs, groups, rcout, cin) + out_sp + ks
        )
        reduce_axes = (3,) + tuple(range(4 + nd, 4 + 2 * nd))
        ret = prod_.sum(reduce_axes, dtype=_sum_acc_dtype(out_dt)).cast(out_dt).reshape((bs, cout) + out_sp)
        return ret if bias is None else ret + bias.cast(out_dt).reshape((1, cout) + (1,) * nd)

    def conv1d(self, weight: Tensor, bias: Tensor | None = None, **kwargs: Any) -> Tensor:
        """1-d convolution of (N, C, L); see conv2d."""
        if self.ndim != 3 or weight.ndim != 3:
            raise ShapeError(f"conv1d: needs a 3-d input and weight, got {self.shape} and {weight.shape}")
        return self.conv2d(weight, bias, **kwargs)

    def conv3d(self, weight: Tensor, bias: Tensor | None = None, **kwargs: Any) -> Tensor:
        """3-d convolution of (N, C, D, H, W); see conv2d."""
        if self.ndim != 5 or weight.ndim != 5:
            raise ShapeError(f"conv3d: needs a 5-d input and weight, got {self.shape} and {weight.shape}")
        return self.conv2d(weight, bias, **kwargs)

    def conv_transpose2d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
    ) -> Tensor:
        """Transposed convolution with weight (C_in, C_out/groups, *kernel), as torch's conv_transpose2d.

        >>> Tensor.ones(1, 1, 2, 2).conv_transpose2d(Tensor.ones(1, 1, 2, 2)).shape
        (1, 1, 3, 3)
        """
        nd = weight.ndim - 2
        if nd < 1 or self.ndim != nd + 2:
            raise ShapeError(f"conv_transpose: input {self.shape} and weight {weight.shape} need N+2 dims each")
        cin, rcout, ks = weight.shape[0], weight.shape[1], weight.shape[2:]
        if self.shape[1] != cin or cin % groups:
            raise ShapeError(
                f"conv_transpose: input {self.shape} has {self.shape[1]} channels, weight {weight.shape} expects {cin} "
                f"(groups={groups})"
            )
        s_, d_ = (
            _positive_n(stride, nd, "stride", "conv_transpose2d"),
            _positive_n(dilation, nd, "dilation", "conv_transpose2d"),
        )
        p_, op_ = _tuple_n(padding, nd, "padding"), _tuple_n(output_padding, nd, "output_padding")
        if any(v < 0 for v in p_ + op_):
            raise ValueError(
                "conv_transpose2d: padding and output_padding must not be negative, "
                f"got {padding!r} and {output_padding!r}"
            )
        # weight as a plain conv's: (groups * C_out/groups, C_in/groups, *kernel), flipped in space
        w = (
            weight.reshape((groups, cin // groups, rcout) + ks)
            .transpose(1, 2)
            .reshape((groups * rcout, cin // groups) + ks)
        )
        w = w.flip(tuple(range(2, 2 + nd)))
        x = self
        for i, s in enumerate(s_):
            if s > 1:
                # insert s - 1 zeros between neighbours along this axis
                ax = 2 + i
                L = x.shape[ax]
                x = x.unsqueeze(ax + 1).pad(tuple((0, s - 1) if a == ax + 1 else (0, 0) for a in range(x.ndim + 1)))
                x = x.flatten(ax, ax + 1)._slice_axis(ax, 0, (L - 1) * s + 1)
        pads = tuple((d * (k - 1) - p, d * (k - 1) - p + o) for k, d, p, o in zip(ks, d_, p_, op_, strict=True))
        x = x.pad(((0, 0), (0, 0)) + pads)
        return x.conv2d(w, bias, groups=groups, dilation=d_)

    def _pool_prepare(
        self, kernel_size: Any, stride: Any, dilation: Any, padding: Any, ceil_mode: bool, op: str
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[tuple[int, int], ...], tuple[int, ...]]:
        nk = len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 2
        k_ = _positive_n(kernel_size, nk, "kernel_size", op)
        n = len(k_)
        if self.ndim < n:
            raise ShapeError(f"{op}: kernel {k_} has more dims than the input shape {self.shape}")
        s_ = _positive_n(stride if stride is not None else k_, n, "stride", op)
        d_ = _positive_n(dilation, n, "dilation", op)
        pads = _conv_pads(padding, n, k_, d_, op)
        extra = []
        for L, k, s, d, (pb, pa) in zip(self.shape[-n:], k_, s_, d_, pads, strict=True):
            span = L + pb + pa - d * (k - 1) - 1
            if span < 0:
                raise ShapeError(f"{op}: kernel {k_} (dilation {d_}) is larger than the padded input {self.shape}")
            o = (-(-span // s) if ceil_mode else span // s) + 1
            # the last window must start inside the input or the left padding (PyTorch's rule)
            if ceil_mode and (o - 1) * s >= L + pb:
                o -= 1
            extra.append(max(0, (o - 1) * s + d * (k - 1) + 1 - (L + pb + pa)))
        return k_, s_, d_, pads, tuple(extra)

    def max_pool2d(
        self,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        return_indices: bool = False,
    ) -> Any:
        """Max over windows of the last len(kernel_size) axes (padding counts as -inf). With return_indices, also
        where each max is: its (int32) flat index in the input's pooled plane (the first one on a tie), as torch.

        >>> Tensor.arange(16).reshape(1, 1, 4, 4).max_pool2d().tolist()
        [[[[5, 7], [13, 15]]]]
        """
        k_, s_, d_, pads, extra = self._pool_prepare(kernel_size, stride, dilation, padding, ceil_mode, "max_pool2d")
        n = len(k_)
        full = ((0, 0),) * (self.ndim - n) + tuple((b, a + e) for (b, a), e in zip(pads, extra, strict=True))
        low = dtypes.min(self.dtype)
        windows = self.pad(full, value=low)._pool(k_, s_, d_)
        axes = tuple(range(-n, 0))
        values = windows.max(axes)
        if not return_indices:
            return values
        # the flat position of every input element (padding: past the end), pooled the same way
        plane = prod(self.shape[-n:])
        pos = Tensor(np.arange(plane, dtype=np.int32).reshape(self.shape[-n:]), device=self.device)
        pos_windows = pos.pad(full[-n:], value=plane)._pool(k_, s_, d_)
        m = values.reshape(values.shape + (1,) * n)
        hit = windows == m
        if dtypes.is_float(self.dtype):
            hit = hit | (windows.isnan() & m.isnan())
        # positions grow along a window in scan order: the smallest hit is the first
        indices = hit.where(pos_windows, plane).min(axes)
        # the gradient goes to that first max only (as PyTorch's backward through the indices)
        first = pos_windows == indices.reshape(indices.shape + (1,) * n)
        values = first.where(windows, low).max(axes)
        return values, indices

    def max_unpool2d(
        self,
        indices: Tensor,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        output_size: Sequence[int] | None = None,
    ) -> Tensor:
        """The inverse of max_pool2d(return_indices=True): zeros with each value put back at its index.

        >>> v, i = Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).max_pool2d(return_indices=True)
        >>> v.max_unpool2d(i).tolist()
        [[[[0.0, 0.0], [0.0, 4.0]]]]
        """
        k_ = _tuple_n(kernel_size, len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 2, "kernel_size")
        n = len(k_)
        s_ = _tuple_n(stride if stride is not None else k_, n, "stride")
        p_ = _tuple_n(padding, n, "padding")
        if indices.shape != self.shape or not dtypes.is_int(indices.dtype):
            raise ShapeError(
                f"max_unpool2d: indices {indices.shape} ({indices.dtype}) must be ints shaped {self.shape}"
            )
        default = tuple((i - 1) * s - 2 * p + k for i, s, p, k in zip(self.shape[-n:], s_, p_, k_, strict=True))
        out = tuple(output_size[-n:]) if output_size is not None else default
        batch = self.shape[:-n]
        flat = Tensor.zeros(*batch, prod(out), dtype=self.dtype, device=self.device)
        flat = flat.scatter(len(batch), indices.reshape(*batch, -1), self.reshape(*batch, -1))
        return flat.reshape(batch + out)

    def avg_pool2d(
        self,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> Tensor:
        """Mean over windows of the last len(kernel_size) axes, dividing like PyTorch (see count_include_pad).

        >>> Tensor.arange(16).reshape(1, 1, 4, 4).float().avg_pool2d().tolist()
        [[[[2.5, 4.5], [10.5, 12.5]]]]
        """
        k_, s_, d_, pads, extra = self._pool_prepare(kernel_size, stride, dilation, padding, ceil_mode, "avg_pool2d")
        n = len(k_)
        x = self._float()
        full = ((0, 0),) * (self.ndim - n) + tuple((b, a + e) for (b, a), e in zip(pads, extra, strict=True))
        total = x.pad(full)._pool(k_, s_, d_).sum(tuple(range(-n, 0)))
        # how many elements each window averages: the input, the explicit padding if counted, never the ceil overhang
        ones = Tensor.ones(self.shape[-n:], device=self.device, dtype=x.dtype)
        ones = ones.pad(pads, value=1.0 if count_include_pad else 0.0)
        ones = ones.pad(tuple((0, e) for e in extra))
        count = ones._pool(k_, s_, d_).sum(tuple(range(-n, 0)))
        return total / count

    def interpolate(self, size: int | Sequence[int], mode: str = "linear", align_corners: bool = False) -> Tensor:
        """Resize the spatial axes (all but the first two) to `size`: mode "linear" (bi/trilinear, separable),
        "nearest" or "nearest-exact", as torch.nn.functional.interpolate.

        >>> Tensor([[[1.0, 2.0]]]).interpolate(4, mode="nearest").tolist()
        [[[1.0, 1.0, 2.0, 2.0]]]
        """
        if mode not in ("linear", "bilinear", "trilinear", "nearest", "nearest-exact"):
            raise ValueError(f"interpolate: unknown mode {mode!r}; use linear, nearest or nearest-exact")
        nsp = self.ndim - 2
        if nsp < 1:
            raise ShapeError(f"interpolate: needs (N, C, *spatial), got shape {self.shape}")
        out_size = _positive_n(size, nsp, "size", "interpolate")
        # an integer image stays one: each axis (the last first) resized, then rounded half up (as PyTorch for uint8)
        as_int = not mode.startswith("nearest") and not dtypes.is_float(self.dtype)
        x = self if mode.startswith("nearest") or as_int else self._float()
        axes = list(enumerate(zip(self.shape[2:], out_size, strict=True)))
        for i, (L, O) in reversed(axes) if as_int else axes:
            ax = 2 + i
            if L == O:
                continue
            pos = np.arange(O, dtype=np.float64)
            if mode == "nearest":
                idx = np.minimum(np.floor(pos * (L / O)).astype(np.int64), L - 1)
                x = x._take(ax, idx)
                continue
            if mode == "nearest-exact":
                idx = np.minimum(np.floor((pos + 0.5) * (L / O)).astype(np.int64), L - 1)
                x = x._take(ax, idx)
                continue
            if align_corners:
                src = pos * ((L - 1) / (O - 1)) if O > 1 else np.zeros(O)
            else:
                src = np.maximum((pos + 0.5) * (L / O) - 0.5, 0.0)
            lo = np.minimum(np.floor(src).astype(np.int64), L - 1)
            hi = np.minimum(lo + 1, L - 1)
            xf = x._float()
            w = Tensor((src - lo).astype(np.float32), device=self.device).cast(xf.dtype)
            w = w.reshape(tuple(O if a == ax else 1 for a in range(x.ndim)))
            a, b = xf._take(ax, lo), xf._take(ax, hi)
            x = a + (b - a) * w
            if as_int:
                x = (x + 0.5).floor().cast(self.dtype)
        return x

    def _take(self, axis: int, idx: np.ndarray) -> Tensor:
        # self indexed by a host list along one axis
        if len(idx) and np.all(np.diff(idx) == 1):
            return self._slice_axis(axis, int(idx[0]), int(idx[-1]) + 1)
        index: list[Any] = [slice(None)] * axis + [Tensor(idx.astype(np.int32), device=self.device)]
        return self[tuple(index)]

    # ------------------------------------------------------------------------------------------------------------
    # nn functional

    def softmax(self, axis: int = -1, dtype: DType | None = None) -> Tensor:
        """exp(x) / sum(exp(x)) along `axis` (shifted by the max).

        >>> Tensor([0.0, 0.0]).softmax().tolist()
        [0.5, 0.5]
        """
        x = self.cast(dtype) if dtype is not None else self._float()
        if x.numel() == 0:
            return x
        e = (x - x.max(axis, keepdim=True).detach()).exp()
        # one division per row, a multiply per element (as PyTorch's CPU softmax)
        return e * e.sum(axis, keepdim=True).reciprocal()

    def log_softmax(self, axis: int = -1, dtype: DType | None = None) -> Tensor:
        """log(softmax(x)) computed as x - logsumexp(x).

        >>> round(Tensor([0.0, 0.0]).log_softmax().tolist()[0], 5)
        -0.69315
        """
        x = self.cast(dtype) if dtype is not None else self._float()
        if x.numel() == 0:
            return x
        m = x - x.max(axis, keepdim=True).detach()
        return m - m.exp().sum(axis, keepdim=True).log()

    def _loss_reduce(self, reduction: str, op: str) -> Tensor:
        if reduction == "none":
            return self
        if reduction == "sum":
            return self.sum()
        if reduction == "mean":
            return self.mean()
        raise ValueError(f"{op}: reduction must be 'none', 'sum' or 'mean', got {reduction!r}")

    def cross_entropy(
        self,
        Y: Tensor,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
        ignore_index: int = -100,
        weight: Tensor | None = None,
    ) -> Tensor:
        """Cross entropy of logits (N, C, ...) against class indices (N, ...) or class probabilities (N, C, ...),
        with optional per-class `weight` (a weighted mean over class indices divides by the targets' weights, as torch).

        >>> round(Tensor([[0.0, 0.0]]).cross_entropy(Tensor([1])).item(), 5)
        0.69315
        """
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
        if self.ndim < 1:
            raise ShapeError(f"cross_entropy: logits need a class axis, got shape {self.shape}")
        axis = 1 if self.ndim >= 2 else 0
        C = self.shape[axis]
        logp = self.log_softmax(axis)
        if weight is not None:
            if weight.shape != (C,):
                raise ShapeError(f"cross_entropy: weight shape {weight.shape} should be ({C},)")
            # logp weighted per class: every term below is then weighted as torch weights it
            wshape = (1,) * axis + (C,) + (1,) * (self.ndim - axis - 1)
            w_class = weight.cast(logp.dtype).reshape(wshape)
            wlogp = logp * w_class
        else:
            wlogp = logp
        if dtypes.is_float(Y.dtype):
            if Y.shape != self.shape:
                raise ShapeError(f"cross_entropy: probability targets {Y.shape} must match logits {self.shape}")
            target = Y * (1 - label_smoothing) + label_smoothing / C
            return (-(wlogp * target).sum(axis))._loss_reduce(reduction, "cross_entropy")
        expected = self.shape[:axis] + self.shape[axis + 1 :]
        if Y.shape != expected:
            raise ShapeError(
                f"cross_entropy: class targets {Y.shape} should have shape {expected} for logits {self.shape}"
            )
        _check_targets(Y, C, ignore_index, "cross_entropy")
        valid = Y != ignore_index
        onehot = Y._one_hot_along(C)
        onehot = onehot.permute(list(range(axis)) + [Y.ndim] + list(range(axis, Y.ndim))) if axis else onehot
        nll = -onehot.where(wlogp, 0.0).sum(axis)
        if label_smoothing:
            nll = (1 - label_smoothing) * nll - label_smoothing * wlogp.mean(axis)
        nll = valid.where(nll, 0.0)
        if reduction == "mean":
            if weight is None:
                return nll.sum() / valid.sum().cast(nll.dtype)
            # divided by the weights of the (valid) targets
            return nll.sum() / valid.where(onehot.where(w_class, 0.0).sum(axis), 0.0).sum()
        return nll._loss_reduce(reduction, "cross_entropy")

    def nll_loss(
        self, Y: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean"
    ) -> Tensor:
        """Negative log likelihood of log-probabilities (N, C, ...) at class indices Y (N, ...), as torch.

        >>> Tensor([[-1.0, -2.0]]).nll_loss(Tensor([1])).tolist()
        2.0
        """
        axis = 1 if self.ndim >= 2 else 0
        C = self.shape[axis]
        expected = self.shape[:axis] + self.shape[axis + 1 :]
        if Y.shape != expected or not dtypes.is_int(Y.dtype):
            raise ShapeError(f"nll_loss: targets {Y.shape} ({Y.dtype}) should be ints of shape {expected}")
        _check_targets(Y, C, ignore_index, "nll_loss")
        onehot = Y._one_hot_along(C)
        onehot = onehot.permute(list(range(axis)) + [Y.ndim] + list(range(axis, Y.ndim))) if axis else onehot
        picked = onehot.where(self, 0.0).sum(axis)
        w = (Y != ignore_index).cast(self.dtype)
        if weight is not None:
            if weight.shape != (C,):
                raise ShapeError(f"nll_loss: weight shape {weight.shape} should be ({C},)")
            wshape = (1,) * axis + (C,) + (1,) * (self.ndim - axis - 1)
            w = w * onehot.where(weight.reshape(wshape), 0.0).sum(axis)
        loss = -picked * w
        if reduction == "mean":
            return loss.sum() / w.sum()
        return loss._loss_reduce(reduction, "nll_loss")

    def binary_cross_entropy(self, Y: Tensor, reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
        """-(Y log p + (1 - Y) log(1 - p)) of probabilities p = self (logs clamped at -100, as torch), times `weight`.

        >>> round(Tensor([0.5]).binary_cross_entropy(Tensor([1.0])).item(), 5)
        0.69315
        """
        _broadcast_shape(self.shape, Y.shape, "binary_cross_entropy")
        loss = -(Y * self.log().maximum(-100) + (1 - Y) * (1 - self).log().maximum(-100))
        if weight is not None:
            loss = loss * weight
        return loss._loss_reduce(reduction, "binary_cross_entropy")

    def binary_crossentropy(self, Y: Tensor, reduction: str = "mean") -> Tensor:
        """tinygrad's name for binary_cross_entropy.

        >>> round(Tensor([0.5]).binary_crossentropy(Tensor([0.0])).item(), 5)
        0.69315
        """
        return self.binary_cross_entropy(Y, reduction)

    def binary_crossentropy_logits(
        self, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None
    ) -> Tensor:
        """tinygrad's name for binary_cross_entropy_with_logits.

        >>> round(Tensor([0.0]).binary_crossentropy_logits(Tensor([1.0])).item(), 5)
        0.69315
        """
        return self.binary_cross_entropy_with_logits(Y, reduction, pos_weight)

    def binary_cross_entropy_with_logits(
        self, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None, weight: Tensor | None = None
    ) -> Tensor:
        """binary_cross_entropy(sigmoid(self), Y), computed stably from the logits.

        >>> round(Tensor([0.0]).binary_cross_entropy_with_logits(Tensor([1.0])).item(), 5)
        0.69315
        """
        _broadcast_shape(self.shape, Y.shape, "binary_cross_entropy_with_logits")
        x = self._float()
        # log(1 + exp(-x)) = softplus(-x); weighting the positive term by pos_weight
        log_sig_neg = (-x).softplus()
        if pos_weight is None:
            loss = (1 - Y) * x + log_sig_neg
        else:
            loss = (1 - Y) * x + (1 + (pos_weight - 1) * Y) * log_sig_neg
        if weight is not None:
            loss = loss * weight
        return loss._loss_reduce(reduction, "binary_cross_entropy_with_logits")

    def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
        """(x - mean) / sqrt(var + eps) over `axis` (no affine part; see nn.LayerNorm).

        >>> [round(v, 4) for v in Tensor([[1.0, 3.0]]).layernorm().tolist()[0]]
        [-1.0, 1.0]
        """
        x = self._float()
        y = x - x.mean(axis, keepdim=True)
        return y * (y.square().mean(axis, keepdim=True) + eps).rsqrt()

    def batchnorm(
        self,
        weight: Tensor | None,
        bias: Tensor | None,
        mean: Tensor,
        invstd: Tensor,
        axis: int | Sequence[int] = 1,
    ) -> Tensor:
        """(x - mean) * invstd * weight + bias with the statistics along `axis` (tinygrad's batchnorm).

        >>> Tensor([[1.0, 2.0]]).batchnorm(None, None, Tensor([1.0, 1.0]), Tensor([1.0, 2.0])).tolist()
        [[0.0, 2.0]]
        """
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        axes = tuple(_normalize_axis(a, self.ndim, "batchnorm", self.shape) for a in axes)
        shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
        x = self - mean.reshape(shape)
        if weight is not None:
            x = x * weight.reshape(shape)
        ret = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
        return ret + bias.reshape(shape) if bias is not None else ret

    def dropout(self, p: float = 0.5) -> Tensor:
        """Zero each element with probability p and scale the rest by 1/(1-p), only when Tensor.training.

        >>> Tensor.ones(3).dropout(0.5).tolist()
        [1.0, 1.0, 1.0]
        """
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout: p must be in [0, 1], got {p}")
        if not Tensor.training or p == 0:
            return self
        if p == 1:
            return self.zeros_like()
        keep = Tensor.rand(self.shape, device=self.device) >= p
        return keep.where(self, 0) * (1 / (1 - p))

    def embedding(self, weight: Tensor) -> Tensor:
        """Rows of `weight` (V, D) at the integer indices in self: shape self.shape + (D,).

        >>> Tensor([1, 0]).embedding(Tensor([[1.0, 2.0], [3.0, 4.0]])).tolist()
        [[3.0, 4.0], [1.0, 2.0]]
        """
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"embedding: indices must be integers, got {self.dtype}")
        if weight.ndim != 2:
            raise ShapeError(f"embedding: weight must be (num_embeddings, dim), got {weight.shape}")
        return weight[self]

    def scaled_dot_product_attention(
        self,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
    ) -> Tensor:
        """softmax(q k^T / sqrt(d) + mask) v with self as the query (..., L, d), key (..., S, d), value (..., S, dv).

        >>> q = Tensor.ones(1, 2, 4); q.scaled_dot_product_attention(q, q).shape
        (1, 2, 4)
        """
        if key.shape[-1] != self.shape[-1] or key.shape[-2] != value.shape[-2]:
            raise ShapeError(
                f"scaled_dot_product_attention: query {self.shape}, key {key.shape} and value {value.shape} don't fit"
            )
        qk = self.matmul(key.transpose(-2, -1)) * (1 / math.sqrt(self.shape[-1]))
        L, S = self.shape[-2], key.shape[-2]
        if is_causal:
            if attn_mask is not None:
                raise ValueError("scaled_dot_product_attention: pass attn_mask or is_causal, not both")
            attn_mask = Tensor.ones(L, S, dtype=dtypes.bool, device=self.device).tril(0)
        if attn_mask is not None:
            qk = attn_mask.where(qk, -math.inf) if attn_mask.dtype == dtypes.bool else qk + attn_mask
        return qk.softmax(-1).dropout(dropout_p) @ value

    # ---- autograd

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Mark this tensor as one whose gradient `backward()` writes into `.grad`.

        >>> Tensor([1.0]).requires_grad_().requires_grad
        True
        """
        self.requires_grad = requires_grad
        return self

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """The gradient of this tensor with respect to each of `targets` (lazy tensors, nothing is stored).

        >>> x = Tensor([1.0, 2.0])
        >>> (x * x).sum().gradient(x)[0].tolist()
        [2.0, 4.0]
        """
        from uopkit.gradient import compute_gradient
        from uopkit.schedule import unrealized_graph

        root_grad = self._root_gradient(gradient, "gradient")
        root = unrealized_graph(self.uop, {t.uop for t in targets})
        grads = compute_gradient(root, root_grad.uop, {t.uop for t in targets})
        missing = [t.shape for t in targets if t.uop not in grads]
        if missing:
            raise RuntimeError(f"gradient: targets of shapes {missing} are not used to compute this tensor")
        return [Tensor(grads[t.uop]) for t in targets]

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Add the gradient of this tensor into `.grad` of every tensor with `requires_grad` it depends on.

        Without `gradient` this tensor must be a scalar (a loss). Gradients are lazy until realized.

        >>> w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> (w * w).sum().backward().shape
        ()
        >>> w.grad.tolist()
        [2.0, 4.0, 6.0]
        """
        from uopkit.gradient import compute_gradient
        from uopkit.schedule import unrealized_graph

        root_grad = self._root_gradient(gradient, "backward")
        wanting = [t for t in list(_all_tensors) if t.requires_grad]
        # values realized since the forward pass are followed back to the graphs that computed them
        root = unrealized_graph(self.uop, {t.uop for t in wanting})
        in_graph = root.toposort(gate=lambda u: u.op is not Ops.KERNEL)
        targets = [t for t in wanting if t.uop in in_graph]
        if not targets:
            if all(u.op in GroupOp.Movement or u.op in (Ops.BUFFER, Ops.STORE, Ops.KERNEL) for u in in_graph):
                raise RuntimeError(
                    "backward: this tensor is already realized, so its graph is gone; call backward() before "
                    "realizing it (before .realize(), .item(), .numpy())"
                )
            raise RuntimeError("backward: no tensor with requires_grad=True was used to compute this tensor")
        grads = compute_gradient(root, root_grad.uop, {t.uop for t in targets})
        for t in targets:
            if t.uop not in grads:
                continue
            g = Tensor(grads[t.uop])
            t.grad = g if t.grad is None else t.grad + g
        return self

    def _root_gradient(self, gradient: Tensor | None, op: str) -> Tensor:
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"{op}: only floating-point tensors have gradients, this one is {self.dtype}")
        if gradient is None:
            if self.shape != ():
                raise ShapeError(f"{op}: needs a scalar (a loss) or gradient=, got a tensor of shape {self.shape}")
            return Tensor(1.0, device=self.device, dtype=self.dtype)
        if gradient.shape != self.shape:
            raise ShapeError(f"{op}: gradient shape {gradient.shape} doesn't match the tensor's shape {self.shape}")
        return gradient.cast(self.dtype)

    class train:
        """Training mode for a block: `with Tensor.train():` (BatchNorm uses batch statistics, dropout drops).

        >>> with Tensor.train():
        ...     Tensor.training
        True
        """

        def __init__(self, mode: bool = True) -> None:
            self.mode = mode

        def __enter__(self) -> None:
            self.prev, Tensor.training = Tensor.training, self.mode

        def __exit__(self, *exc: object) -> None:
            Tensor.training = self.prev

    @staticmethod
    def test() -> Tensor.train:
        """Inference mode for a block: `with Tensor.test():` (BatchNorm uses running statistics, no dropout)."""
        return Tensor.train(False)


# ---------------------------------------------------------------------------------------------------------------------
# helpers


def _cast_py(x: Any, dt: DType) -> Any:
    from uopkit.uop.ops import cast_scalar

    return cast_scalar(x, dt)


# conv windows by (input shape, dtype, pads, kernel, stride, dilation): the movement ops to apply, innermost first
_window_recipes: dict[tuple, tuple[tuple[Ops, Any], ...]] = {}


def _as_key(x: Any) -> Any:
    return tuple(x) if isinstance(x, (list, tuple)) else x


def _movement_recipe(top: UOp, bottom: UOp) -> tuple[tuple[Ops, Any], ...]:
    """The movement ops from `bottom` up to `top` (a chain of them), as (op, arg) pairs to replay on another node."""
    chain = top.movement_chain()
    assert bottom in chain, "not a chain of movement ops down to the input"
    return tuple((n.op, n.arg) for n in reversed(chain[: chain.index(bottom)]))


def _as_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def _shape_args(shape: tuple) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return _as_shape(shape[0])
    return _as_shape(shape)


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...], op: str) -> tuple[int, ...]:
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb, strict=True):
        if x != y and x != 1 and y != 1:
            raise ShapeError(f"{op}: shapes {a} and {b} can't be broadcast together")
        out.append(y if x == 1 else x)
    return tuple(out)


def _sum_acc_dtype(dt: DType) -> DType:
    # tinygrad's rule: small ints and bool accumulate in (u)int32, half floats in float32
    if dtypes.is_unsigned(dt) and dt.itemsize < 4:
        return dtypes.uint32
    if (dtypes.is_int(dt) and dt.itemsize < 4) or dt == dtypes.bool:
        return dtypes.int32
    if dt in (dtypes.float16, dtypes.bfloat16):
        return dtypes.float32
    return dt


def _sum_op(dt: DType) -> Ops:
    # adding a one-hot selection: bool values combine with OR (MAX), everything else with ADD
    return Ops.MAX if dt == dtypes.bool else Ops.ADD


# cumulative ops on axes longer than this go in two levels (blocks, then the blocks' totals)
_CUM_BLOCK = 512


class _Mask:
    """A bool tensor used as an index (selects where true)."""

    def __init__(self, t: Tensor) -> None:
        self.t = t


def _with(shape: tuple[int, ...], axis: int, size: int) -> tuple[int, ...]:
    return tuple(size if i == axis % len(shape) else s for i, s in enumerate(shape))


def _tuple_n(x: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    if isinstance(x, (int, np.integer)):
        return (int(x),) * n
    t = tuple(int(v) for v in x)
    if len(t) != n:
        raise ShapeError(f"{what}: expected {n} values, got {t}")
    return t


def _check_values_in(idx: Tensor, lo: int, hi: int, message: Callable[[int], str], ignore: int | None = None) -> None:
    """Raise IndexError(message(v)) for a value v of the int tensor idx outside [lo, hi) (`ignore` is allowed).

    Values from the host are checked here and now. Values computed on the device are checked by reading back their
    min and max (a sync; CHECK_INDEX=0 skips it); the check is recorded by a capturing TinyJit, whose replays repeat
    it after their kernels."""
    if not idx.numel():
        return
    if idx._is_plain_buffer():
        vals = idx.numpy().reshape(-1)
        vals = vals[vals != ignore] if ignore is not None else vals
        bad = vals[(vals < lo) | (vals >= hi)]
        if bad.size:
            raise IndexError(message(int(bad[0])))
        return
    if not CHECK_INDEX:
        return
    from uopkit.engine.realize import capturing_checks

    idx.realize()
    vals = idx if ignore is None else (idx == ignore).where(lo, idx)
    bounds = Tensor.stack(vals.min(), vals.max()).cast(dtypes.int64).realize()
    check = _DeviceRangeCheck(bounds._buffer(), lo, hi, message)
    for captured in capturing_checks:
        captured.append(check)
    check()


class _DeviceRangeCheck:
    """Reads a realized (min, max) pair of device-computed indices and raises if either lies outside [lo, hi)."""

    def __init__(self, bounds: Buffer, lo: int, hi: int, message: Callable[[int], str]) -> None:
        self.bounds, self.lo, self.hi, self.message = bounds, lo, hi, message

    def __call__(self) -> None:
        mn, mx = (int(v) for v in self.bounds.as_numpy())
        if mn < self.lo or mx >= self.hi:
            bad = mn if mn < self.lo else mx
            raise IndexError(self.message(bad) + " (computed on the device; CHECK_INDEX=0 skips this check)")


def _check_targets(Y: Tensor, C: int, ignore_index: int, op: str) -> None:
    # class targets in [0, C), ignore_index aside (torch raises "Target 5 is out of bounds")
    _check_values_in(Y, 0, C, lambda bad: f"{op}: target {bad} is out of bounds for {C} classes", ignore_index)


def _short_int(y: int) -> str:
    return str(y) if abs(y) < 10**30 else f"{'-' if y < 0 else ''}({y.bit_length()}-bit int)"


def _positive_n(x: int | Sequence[int], n: int, what: str, op: str) -> tuple[int, ...]:
    """_tuple_n for a size, step or count that must be at least 1 (0 would divide by zero further on)."""
    t = _tuple_n(x, n, what)
    if any(v <= 0 for v in t):
        raise ValueError(f"{op}: {what} must be positive, got {x!r}")
    return t


def _conv_pads(
    padding: Any, n: int, ks: Sequence[int], dilation: Sequence[int], op: str
) -> tuple[tuple[int, int], ...]:
    """(before, after) per spatial axis from an int, one int per axis, 2 per axis (last axis first), or a string."""
    pads = _conv_pads_any(padding, n, ks, dilation, op)
    if any(v < 0 for pair in pads for v in pair):
        raise ValueError(f"{op}: padding must not be negative, got {padding!r}")
    return pads


def _conv_pads_any(
    padding: Any, n: int, ks: Sequence[int], dilation: Sequence[int], op: str
) -> tuple[tuple[int, int], ...]:
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * n
        if padding == "same":
            total = [d * (k - 1) for k, d in zip(ks, dilation, strict=True)]
            return tuple((t // 2, t - t // 2) for t in total)
        raise ValueError(f"{op}: padding must be an int, a sequence, 'valid' or 'same', got {padding!r}")
    if isinstance(padding, (int, np.integer)):
        return ((int(padding), int(padding)),) * n
    p = [int(v) for v in padding]
    if len(p) == n:
        return tuple((v, v) for v in p)
    if len(p) == 2 * n:
        pairs = [(p[i], p[i + 1]) for i in range(0, 2 * n, 2)]
        return tuple(pairs[::-1])
    raise ShapeError(f"{op}: padding {tuple(p)} needs 1, {n} or {2 * n} values for {n} spatial dims")


def _einsum_diagonal(t: Tensor, s: str) -> tuple[Tensor, str]:
    # a letter repeated within one operand: take the diagonal of those two axes
    while len(set(s)) != len(s):
        c = next(c for c in s if s.count(c) > 1)
        i = s.index(c)
        j = s.index(c, i + 1)
        n = t.shape[i]
        if t.shape[j] != n:
            raise ShapeError(f"einsum: repeated letter {c!r} has sizes {n} and {t.shape[j]}")
        rest = [a for a in range(t.ndim) if a not in (i, j)]
        x = t.permute(rest + [i, j]).flatten(-2, -1)
        # the diagonal of an n x n block is every (n+1)-th element of its flat form
        x = x.pad(((0, 0),) * (x.ndim - 1) + ((0, n),)).reshape(x.shape[:-1] + (n, n + 1))
        t = x._slice_axis(x.ndim - 1, 0, 1).reshape(x.shape[:-2] + (n,))
        s = "".join(s[a] for a in rest) + c
    return t, s


def _with_gradient_of(value: Tensor, surrogate: Tensor) -> Tensor:
    """`value`, with the gradient of `surrogate` (the same function, computed in a way whose derivatives stay finite).
    `surrogate` must be finite wherever `value` is: their difference to the detached copy is then exactly 0 (taken
    away rather than added, so a -0.0 value stays -0.0)."""
    return value.detach() - (surrogate.detach() - surrogate)


def _with_derivative(value: Tensor, x: Tensor, derivative: Tensor) -> Tensor:
    """`value` (a function of x, computed for accuracy), whose gradient is `derivative` (d value / dx, a textbook
    formula) times the incoming one. Where x or the derivative is not finite (the ends of asin's domain) the gradient
    is 0; second derivatives are not kept."""
    d = derivative.detach()
    d = (d - d == 0).where(d, 0)
    # exactly 0 in value, 1 in gradient
    step = x.detach() - x
    step = (x - x == 0).where(step, 0)
    return value.detach() - step * d


def _host_np_dtype(dtype: DType) -> Any:
    # bfloat16 goes to the device from float32 (numpy has no bfloat16)
    return to_numpy_dtype(dtype) if dtype != dtypes.bfloat16 else np.float32


def _host_values(values: np.ndarray, dtype: DType) -> np.ndarray:
    return values.astype(_host_np_dtype(dtype))


def _reshape_uop(u: UOp, shape: tuple[int, ...]) -> UOp:
    return u if u.shape == shape else UOp(Ops.RESHAPE, u.dtype, (u,), tuple(shape))


def _from_numpy(arr: np.ndarray, device: str, dtype: DType) -> UOp:
    # np.ascontiguousarray would turn a 0-d array into shape (1,)
    shape = np.shape(arr)
    if dtype == dtypes.bfloat16:
        # the top half of float32, rounded to nearest even (NaN stays a quiet NaN)
        f32 = np.ascontiguousarray(arr, dtype=np.float32)
        bits = f32.view(np.uint32).astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        arr = np.where(np.isnan(f32), 0x7FC0, rounded).astype(np.uint16).reshape(shape)
        return UOp(Ops.BITCAST, dtype, (_from_numpy(arr, device, dtypes.uint16),))
    arr = np.ascontiguousarray(arr)
    buf = UOp.new_buffer(device, arr.size, dtype)
    b = Buffer(device, arr.size, dtype).allocate()
    if arr.size:
        b.copyin(memoryview(arr.reshape(-1)).cast("B"))
    buffers[buf] = b
    return _reshape_uop(buf, shape)


# ---------------------------------------------------------------------------------------------------------------------
# bfloat16: no renderer computes in it, so a bfloat16 tensor is BITCAST(bfloat16, <uint16 graph>) (under movement ops,
# WHERE, CONTIGUOUS, ...). Arithmetic goes through float32; realizing computes the uint16 bits.


# uint16 BUFFERs sharing the memory of bfloat16 BUFFERs
_bf16_alias: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()


def _storage_uop(u: UOp) -> UOp:
    """The graph of a bfloat16 value's uint16 bits (other dtypes are returned unchanged)."""
    if u.dtype != dtypes.bfloat16:
        return u
    memo: dict[UOp, UOp] = {}
    for node in u.toposort(gate=lambda n: n.dtype == dtypes.bfloat16):
        if node.dtype != dtypes.bfloat16:
            continue
        memo[node] = _bits_node(node, memo)
    return memo[u]


def _bits_node(node: UOp, memo: dict[UOp, UOp]) -> UOp:
    u16 = dtypes.uint16
    if node.op is Ops.BITCAST:
        src = node.src[0]
        return src if src.dtype == u16 else UOp(Ops.BITCAST, u16, (src,))
    if node.op is Ops.BUFFER:
        # a bfloat16 BUFFER made elsewhere: the same memory under a uint16 BUFFER
        if node not in _bf16_alias:
            alias = UOp.new_buffer(node.arg[1], node.arg[2], u16)
            if node in buffers:
                buffers[alias] = buffers[node]
            _bf16_alias[node] = alias
        return _bf16_alias[node]
    if node.op is Ops.CONST:
        bits = int(np.array([node.arg], dtype=np.float32).view(np.uint32)[0])
        rounded = 0x7FC0 if math.isnan(node.arg) else (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return UOp(Ops.CONST, u16, node.src, rounded)
    if node.op is Ops.CAST:
        return Tensor(node.src[0]).cast(dtypes.bfloat16).uop.src[0]
    if node.op in GroupOp.Movement or node.op in (Ops.CONTIGUOUS, Ops.DETACH, Ops.WHERE, Ops.STORE, Ops.COPY):
        return UOp(node.op, u16, tuple(memo.get(s, s) for s in node.src), node.arg)
    raise TypeError(f"bfloat16: {node.op.name} can't be computed in bfloat16; cast to float32 first")


def _bits_tensor(t: Tensor) -> Tensor:
    return Tensor(_storage_uop(t.uop)) if t.dtype == dtypes.bfloat16 else t


def _rewrap_bf16(tensors: list[Tensor], bits: list[Tensor]) -> None:
    for t, b in zip(tensors, bits, strict=True):
        if t is not b:
            t.uop = UOp(Ops.BITCAST, dtypes.bfloat16, (b.uop,))


__all__ = ["Tensor", "ShapeError", "buffers"]
