"""Tensor: a lazy value built as a UOp graph, realized by the scheduler into compiled kernels."""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Sequence
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
from uopkit.helpers import argsort, prod
from uopkit.uop.ops import GroupOp, Ops, UOp

# every live tensor, so that realizing one updates the graphs the others hold
_all_tensors: weakref.WeakSet[Tensor] = weakref.WeakSet()
# the Buffer behind each BUFFER node
buffers: weakref.WeakKeyDictionary[UOp, Buffer] = weakref.WeakKeyDictionary()


class ShapeError(ValueError):
    pass


def _canonical_device(device: str | None) -> str:
    return Device.canonicalize(device) if device is not None else Device.DEFAULT


def _normalize_axis(axis: int, ndim: int, op: str) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise IndexError(f"{op}: axis {axis} is out of range for a tensor with {ndim} dimensions")
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
            self.uop = data if dt is None else data.cast(dt)
        elif isinstance(data, Tensor):
            self.uop = data.uop if dt is None else data.uop.cast(dt)
        elif isinstance(data, (bool, int, float)):
            dt = dt or dtypes.from_py(data)
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

        kernelize_tensors([self, *others])
        return self

    def realize(self, *others: Tensor) -> Tensor:
        """Compute this tensor (and `others`) into device buffers."""
        from uopkit.engine.realize import realize_tensors

        realize_tensors([self, *others])
        return self

    def _buffer(self) -> Buffer:
        # a contiguous buffer holding exactly this tensor's values, in order
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
    def full(shape: int | Sequence[int], fill_value: Any, **kwargs: Any) -> Tensor:
        shape = _as_shape(shape)
        if any(s < 0 for s in shape):
            raise ShapeError(f"full: negative dimension in shape {shape}")
        dtype = kwargs.pop("dtype", None)
        t = Tensor(fill_value, dtype=dtype, device=kwargs.pop("device", None), **kwargs)
        return t.reshape((1,) * len(shape)).expand(shape)

    @staticmethod
    def zeros(*shape: Any, **kwargs: Any) -> Tensor:
        return Tensor.full(_shape_args(shape), 0.0, dtype=kwargs.pop("dtype", dtypes.default_float), **kwargs)

    @staticmethod
    def ones(*shape: Any, **kwargs: Any) -> Tensor:
        return Tensor.full(_shape_args(shape), 1.0, dtype=kwargs.pop("dtype", dtypes.default_float), **kwargs)

    @staticmethod
    def empty(*shape: Any, dtype: DType | str = dtypes.default_float, device: str | None = None) -> Tensor:
        shape = _shape_args(shape)
        dt = to_dtype(dtype)
        buf = UOp.new_buffer(_canonical_device(device), prod(shape), dt)
        buffers[buf] = Buffer(buf.arg[1], prod(shape), dt).allocate()
        return Tensor(_reshape_uop(buf, shape))

    def full_like(self, fill_value: Any, **kwargs: Any) -> Tensor:
        return Tensor.full(self.shape, fill_value, dtype=kwargs.pop("dtype", self.dtype), device=self.device)

    def zeros_like(self, **kwargs: Any) -> Tensor:
        return self.full_like(0, **kwargs)

    def ones_like(self, **kwargs: Any) -> Tensor:
        return self.full_like(1, **kwargs)

    @staticmethod
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
        return Tensor(
            values.astype(to_numpy_dtype(dtype) if dtype != dtypes.bfloat16 else np.float32), dtype=dtype, **kwargs
        )

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        Tensor._seed, Tensor._rng_counter = seed, 0

    @staticmethod
    def _rng() -> np.random.Generator:
        # Philox keyed by (seed, call counter): reproducible for a given seed and call order
        Tensor._rng_counter += 1
        return np.random.Generator(np.random.Philox(key=Tensor._seed, counter=Tensor._rng_counter))

    @staticmethod
    def rand(*shape: Any, **kwargs: Any) -> Tensor:
        """Uniform samples in [0, 1)."""
        dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
        values = Tensor._rng().random(_shape_args(shape), dtype=np.float32)
        return Tensor(values, **kwargs).cast(dtype)

    @staticmethod
    def randn(*shape: Any, **kwargs: Any) -> Tensor:
        dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
        values = Tensor._rng().standard_normal(_shape_args(shape), dtype=np.float32)
        return Tensor(values, **kwargs).cast(dtype)

    @staticmethod
    def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, **kwargs: Any) -> Tensor:
        return Tensor.rand(*shape, **kwargs) * (high - low) + low

    @staticmethod
    def randint(*shape: Any, low: int = 0, high: int = 10, **kwargs: Any) -> Tensor:
        values = Tensor._rng().integers(low, high, _shape_args(shape), dtype=np.int32)
        return Tensor(values, **kwargs)

    # ------------------------------------------------------------------------------------------------------------
    # movement

    def reshape(self, shape: int | Sequence[int], *args: int) -> Tensor:
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
        return self.reshape(*shape)

    def permute(self, order: Sequence[int], *args: int) -> Tensor:
        order = tuple(order) if not args else (order, *args)  # type: ignore[arg-type]
        norm = tuple(_normalize_axis(a, self.ndim, "permute") for a in order)
        if sorted(norm) != list(range(self.ndim)):
            raise ShapeError(f"permute: {order} is not a permutation of the {self.ndim} axes of {self.shape}")
        return self if norm == tuple(range(self.ndim)) else Tensor(UOp(Ops.PERMUTE, self.dtype, (self.uop,), norm))

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        order = list(range(self.ndim))
        a, b = _normalize_axis(dim0, self.ndim, "transpose"), _normalize_axis(dim1, self.ndim, "transpose")
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, shape: Sequence[int], *args: int) -> Tensor:
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

    def pad(self, padding: Sequence[tuple[int, int]] | Sequence[int], value: float = 0.0) -> Tensor:
        """Pad each axis with (before, after) elements of `value` (tinygrad order: one pair per axis)."""
        if padding and isinstance(padding[0], int):
            # PyTorch flat form: last axis first
            flat = list(padding)
            pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)][::-1]
            padding = [(0, 0)] * (self.ndim - len(pairs)) + pairs
        pads = tuple((int(b or 0), int(a or 0)) for b, a in (p if p is not None else (0, 0) for p in padding))
        if len(pads) != self.ndim:
            raise ShapeError(f"pad: {len(pads)} (before, after) pairs for a tensor with {self.ndim} dimensions")
        if any(b < 0 or a < 0 for b, a in pads):
            # negative padding crops
            crop = tuple((max(-b, 0), s - max(-a, 0)) for (b, a), s in zip(pads, self.shape, strict=True))
            return self.shrink(crop).pad(tuple((max(b, 0), max(a, 0)) for b, a in pads), value)
        if all(b == 0 and a == 0 for b, a in pads):
            return self
        padded = Tensor(UOp(Ops.PAD, self.dtype, (self.uop,), pads))
        if value == 0:
            return padded
        mask = Tensor(
            UOp(Ops.PAD, dtypes.bool, (Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device).uop,), pads)
        )
        return mask.where(padded, value)

    def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
        bounds = tuple((0, s) if b is None else (int(b[0]), int(b[1])) for b, s in zip(arg, self.shape, strict=True))
        if len(arg) != self.ndim:
            raise ShapeError(f"shrink: {len(arg)} bounds for a tensor with {self.ndim} dimensions")
        for (b, e), s in zip(bounds, self.shape, strict=True):
            if not 0 <= b <= e <= s:
                raise ShapeError(f"shrink: bounds {bounds} don't fit in shape {self.shape}")
        if all(b == 0 and e == s for (b, e), s in zip(bounds, self.shape, strict=True)):
            return self
        return Tensor(UOp(Ops.SHRINK, self.dtype, (self.uop,), bounds))

    def flip(self, axis: int | Sequence[int]) -> Tensor:
        axes = {_normalize_axis(a, self.ndim, "flip") for a in ([axis] if isinstance(axis, int) else axis)}
        if not axes:
            return self
        return Tensor(UOp(Ops.FLIP, self.dtype, (self.uop,), tuple(i in axes for i in range(self.ndim))))

    def squeeze(self, dim: int | None = None) -> Tensor:
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        dim = _normalize_axis(dim, self.ndim, "squeeze")
        if self.shape[dim] != 1:
            return self
        return self.reshape(self.shape[:dim] + self.shape[dim + 1 :])

    def unsqueeze(self, dim: int) -> Tensor:
        dim = _normalize_axis(dim, self.ndim + 1, "unsqueeze")
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape((1,))
        s = _normalize_axis(start_dim, self.ndim, "flatten")
        e = _normalize_axis(end_dim, self.ndim, "flatten")
        return self.reshape(self.shape[:s] + (prod(self.shape[s : e + 1]),) + self.shape[e + 1 :])

    def contiguous(self) -> Tensor:
        """A tensor whose values are stored in their own buffer, in order."""
        return Tensor(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

    def detach(self) -> Tensor:
        return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)))

    def to(self, device: str | None) -> Tensor:
        device = _canonical_device(device)
        if device == self.device:
            return self
        return Tensor(UOp(Ops.COPY, self.dtype, (self.uop, UOp(Ops.DEVICE, arg=device))))

    def clone(self) -> Tensor:
        return self.contiguous()

    # ------------------------------------------------------------------------------------------------------------
    # indexing: basic slicing becomes shrink/flip/reshape; __setitem__ is an assign into that view

    def _view_for_index(self, index: Any) -> Tensor:
        if not isinstance(index, tuple):
            index = (index,)
        n_real = sum(1 for i in index if i is not None and i is not Ellipsis)
        if n_real > self.ndim:
            raise IndexError(f"too many indices ({n_real}) for a tensor of shape {self.shape}")
        if sum(1 for i in index if i is Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis")
        if Ellipsis in index:
            at = index.index(Ellipsis)
            index = index[:at] + (slice(None),) * (self.ndim - n_real) + index[at + 1 :]
        else:
            index = index + (slice(None),) * (self.ndim - n_real)
        t, axis, out_shape_ops = self, 0, []
        bounds, flips, strides = [], [], []
        for i in index:
            if i is None:
                out_shape_ops.append(("new", None))
                continue
            size = self.shape[axis]
            if isinstance(i, (int, np.integer)) and not isinstance(i, bool):
                j = int(i)
                if not -size <= j < size:
                    raise IndexError(f"index {j} is out of bounds for axis {axis} with size {size}")
                j %= size
                bounds.append((j, j + 1))
                flips.append(False)
                strides.append(1)
                out_shape_ops.append(("drop", axis))
            elif isinstance(i, slice):
                start, stop, step = i.indices(size)
                if step > 0:
                    n = max(0, math.ceil((stop - start) / step))
                    bounds.append((start, start + max(n - 1, 0) * step + (1 if n else 0)))
                    flips.append(False)
                else:
                    n = max(0, math.ceil((start - stop) / -step))
                    lo = start + (n - 1) * step if n else 0
                    bounds.append((lo, start + 1) if n else (0, 0))
                    flips.append(True)
                strides.append(abs(step))
                out_shape_ops.append(("keep", axis))
            else:
                raise TypeError(f"unsupported index {i!r} of type {type(i).__name__}; use ints, slices, None, ...")
            axis += 1
        t = t.shrink(bounds)
        t = t.flip([a for a, f in enumerate(flips) if f])
        if any(s != 1 for s in strides):
            t = t._stride(strides)
        new_shape = []
        for kind, ax in out_shape_ops:
            if kind == "new":
                new_shape.append(1)
            elif kind == "keep":
                new_shape.append(t.shape[ax])
        return t.reshape(tuple(new_shape))

    def _stride(self, strides: Sequence[int]) -> Tensor:
        # take every k-th element of each axis: pad to a multiple of k, split the axis, keep index 0
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

    def __getitem__(self, index: Any) -> Tensor:
        return self._view_for_index(index)

    def __setitem__(self, index: Any, value: Any) -> None:
        view = self._view_for_index(index)
        if not isinstance(value, Tensor):
            value = Tensor(value, device=self.device, dtype=self.dtype)
        view.assign(value.cast(self.dtype)._broadcast_to(view.shape)).realize()

    def assign(self, x: Any) -> Tensor:
        """Write `x` into this tensor's storage: builds STORE(view of BUFFER, x), realized with the next realize."""
        if not isinstance(x, Tensor):
            x = Tensor(x, device=self.device, dtype=self.dtype)
        if x.shape != self.shape:
            raise ShapeError(f"assign: value shape {x.shape} doesn't match target shape {self.shape}")
        if x.dtype != self.dtype:
            raise TypeError(f"assign: value dtype {x.dtype} doesn't match target dtype {self.dtype}; cast it first")
        if x.device != self.device:
            raise ValueError(f"assign: value is on {x.device}, target on {self.device}; use .to() first")
        target = self.uop
        if target.base.op is not Ops.BUFFER:
            # an unrealized target gets a buffer of its own first
            self.realize()
            target = self.uop
        if any(n.op in (Ops.EXPAND, Ops.PAD) for n in _movement_chain(target)):
            raise ValueError("assign: can't write through an expanded or padded view (elements would alias)")
        self.uop = UOp(Ops.STORE, self.dtype, (target, x.uop))
        return self

    # ------------------------------------------------------------------------------------------------------------
    # elementwise

    def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        if self.shape == shape:
            return self
        if len(shape) < self.ndim:
            raise ShapeError(f"can't broadcast {self.shape} to {shape}")
        return self.reshape((1,) * (len(shape) - self.ndim) + self.shape).expand(shape)

    def _broadcasted(self, y: Any, reverse: bool = False, op: str = "op") -> tuple[Tensor, Tensor]:
        x: Tensor = self
        if not isinstance(y, Tensor):
            if isinstance(y, (np.ndarray, list, tuple)):
                y = Tensor(y, device=x.device)
            else:
                # a Python scalar takes the tensor's dtype unless its kind is "higher" (float into an int tensor)
                dt = x.dtype
                if isinstance(y, float) and not dtypes.is_float(x.dtype):
                    dt = dtypes.default_float
                elif isinstance(y, int) and not isinstance(y, bool) and x.dtype == dtypes.bool:
                    dt = dtypes.default_int
                y = Tensor(y, device=x.device, dtype=dt)
        if x.device != y.device:
            raise ValueError(f"{op}: operands are on different devices ({x.device} and {y.device})")
        if reverse:
            x, y = y, x
        out = least_upper_dtype(x.dtype, y.dtype)
        x, y = x.cast(out), y.cast(out)
        shape = _broadcast_shape(x.shape, y.shape, op)
        return x._broadcast_to(shape), y._broadcast_to(shape)

    def _alu(self, op: Ops, *srcs: Tensor) -> Tensor:
        out_dt = dtypes.bool if op in GroupOp.Comparison else self.dtype
        return Tensor(UOp(op, out_dt, (self.uop, *(s.uop for s in srcs))))

    def cast(self, dtype: DType | str) -> Tensor:
        dt = to_dtype(dtype)
        return self if dt == self.dtype else Tensor(UOp(Ops.CAST, dt, (self.uop,)))

    def bitcast(self, dtype: DType | str) -> Tensor:
        dt = to_dtype(dtype)
        if dt.itemsize != self.dtype.itemsize:
            raise TypeError(f"bitcast: {self.dtype} and {dt} have different sizes")
        return self if dt == self.dtype else Tensor(UOp(Ops.BITCAST, dt, (self.uop,)))

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        return self.cast(dtypes.float16)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def bool(self) -> Tensor:
        return self.cast(dtypes.bool)

    def long(self) -> Tensor:
        return self.cast(dtypes.int64)

    def add(self, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse, "add")
        return a._alu(Ops.ADD, b)

    def sub(self, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse, "sub")
        if a.dtype == dtypes.bool:
            raise TypeError("sub: subtracting bool tensors is not supported; use logical_xor")
        return a._alu(Ops.ADD, b.neg())

    def mul(self, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse, "mul")
        return a._alu(Ops.MUL, b)

    def div(self, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        """True division (ints promote to float); rounding_mode "trunc" or "floor" as in PyTorch."""
        a, b = self._broadcasted(x, reverse, "div")
        if rounding_mode is None:
            a, b = a.cast(least_upper_float(a.dtype)), b.cast(least_upper_float(b.dtype))
            return a._alu(Ops.FDIV, b)
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
        """Integer division truncating toward zero (C semantics)."""
        a, b = self._broadcasted(x, reverse, "idiv")
        if not dtypes.is_int(a.dtype):
            raise TypeError(f"idiv needs integer tensors, got {a.dtype}")
        return a._alu(Ops.IDIV, b)

    def mod(self, x: Any, reverse: bool = False) -> Tensor:
        """Remainder with the sign of the divisor (Python / PyTorch `%`)."""
        a, b = self._broadcasted(x, reverse, "mod")
        if dtypes.is_int(a.dtype):
            r = a._alu(Ops.MOD, b)
            return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)
        return a - a.div(b, rounding_mode="floor") * b

    def neg(self) -> Tensor:
        if self.dtype == dtypes.bool:
            return self.logical_not()
        return self * -1 if dtypes.is_int(self.dtype) else self._alu(Ops.NEG)

    def maximum(self, x: Any) -> Tensor:
        a, b = self._broadcasted(x, False, "maximum")
        return a._alu(Ops.MAX, b)

    def minimum(self, x: Any) -> Tensor:
        a, b = self._broadcasted(x, False, "minimum")
        return a._inverse()._alu(Ops.MAX, b._inverse())._inverse()

    def _inverse(self) -> Tensor:
        # an order-reversing map used to build min from max
        if dtypes.is_float(self.dtype):
            return -self
        if self.dtype == dtypes.bool:
            return self.logical_not()
        if dtypes.is_unsigned(self.dtype):
            return Tensor(dtypes.max(self.dtype), device=self.device, dtype=self.dtype) - self
        return self._alu(Ops.XOR, self.full_like(-1))

    def where(self, x: Any, y: Any) -> Tensor:
        """Elementwise `x if self else y` (self is cast to bool)."""
        cond = self.cast(dtypes.bool)
        if isinstance(x, Tensor) or not isinstance(y, Tensor):
            x_t, y_t = (x if isinstance(x, Tensor) else Tensor(x, device=self.device))._broadcasted(y, False, "where")
        else:
            y_t, x_t = y._broadcasted(x, False, "where")
        shape = _broadcast_shape(cond.shape, x_t.shape, "where")
        cond, x_t, y_t = cond._broadcast_to(shape), x_t._broadcast_to(shape), y_t._broadcast_to(shape)
        return cond._alu_where(x_t, y_t)

    def _alu_where(self, x: Tensor, y: Tensor) -> Tensor:
        return Tensor(UOp(Ops.WHERE, x.dtype, (self.uop, x.uop, y.uop)))

    def _cmp(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse, op.name.lower())
        return a._alu(op, b)

    def __lt__(self, x: Any) -> Tensor:
        return self._cmp(Ops.CMPLT, x)

    def __gt__(self, x: Any) -> Tensor:
        return self._cmp(Ops.CMPLT, x, reverse=True)

    def __le__(self, x: Any) -> Tensor:
        return (self > x).logical_not()

    def __ge__(self, x: Any) -> Tensor:
        return (self < x).logical_not()

    def __eq__(self, x: Any) -> Tensor:  # type: ignore[override]
        return self._cmp(Ops.CMPEQ, x)

    def __ne__(self, x: Any) -> Tensor:  # type: ignore[override]
        return self._cmp(Ops.CMPNE, x)

    __hash__ = object.__hash__

    def logical_not(self) -> Tensor:
        return self.cast(dtypes.bool)._alu(Ops.CMPNE, Tensor(True, device=self.device)._broadcast_to(self.shape))

    def _bitwise(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse, op.name.lower())
        if not (dtypes.is_int(a.dtype) or a.dtype == dtypes.bool):
            raise TypeError(f"{op.name.lower()}: bitwise ops need integer or bool tensors, got {a.dtype}")
        return a._alu(op, b)

    def __and__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.AND, x)

    def __or__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.OR, x)

    def __xor__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.XOR, x)

    def __invert__(self) -> Tensor:
        return self.logical_not() if self.dtype == dtypes.bool else self ^ -1

    def _unary_float(self, op: Ops) -> Tensor:
        return self.cast(least_upper_float(self.dtype))._alu(op)

    def exp2(self) -> Tensor:
        return self._unary_float(Ops.EXP2)

    def log2(self) -> Tensor:
        return self._unary_float(Ops.LOG2)

    def exp(self) -> Tensor:
        return (self.cast(least_upper_float(self.dtype)) * (1 / math.log(2)))._alu(Ops.EXP2)

    def log(self) -> Tensor:
        return self._unary_float(Ops.LOG2) * math.log(2)

    def sqrt(self) -> Tensor:
        return self._unary_float(Ops.SQRT)

    def rsqrt(self) -> Tensor:
        return self.sqrt().reciprocal()

    def reciprocal(self) -> Tensor:
        return self._unary_float(Ops.RECIP)

    def sin(self) -> Tensor:
        return self._unary_float(Ops.SIN)

    def cos(self) -> Tensor:
        return (math.pi / 2 - self.cast(least_upper_float(self.dtype))).sin()

    def trunc(self) -> Tensor:
        return self if not dtypes.is_float(self.dtype) else self._alu(Ops.TRUNC)

    def floor(self) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (self < t).where(t - 1, t)

    def ceil(self) -> Tensor:
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (self > t).where(t + 1, t)

    def abs(self) -> Tensor:
        return self if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool else self.maximum(-self)

    def sign(self) -> Tensor:
        return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)

    def relu(self) -> Tensor:
        return self.maximum(0)

    def sigmoid(self) -> Tensor:
        return (1 + (-self).exp()).reciprocal()

    def tanh(self) -> Tensor:
        return 2 * (2 * self).sigmoid() - 1

    def square(self) -> Tensor:
        return self * self

    def clip(self, min_: Any = None, max_: Any = None) -> Tensor:
        t = self
        if min_ is not None:
            t = t.maximum(min_)
        if max_ is not None:
            t = t.minimum(max_)
        return t

    def pow(self, x: Any) -> Tensor:
        if isinstance(x, (int, float)) and not isinstance(x, bool) and float(x).is_integer() and 0 <= x <= 8:
            ret = self.ones_like() if x == 0 else self
            for _ in range(int(x) - 1):
                ret = ret * self
            return ret
        a, b = self._broadcasted(x, False, "pow")
        a = a.cast(least_upper_float(a.dtype))
        b = b.cast(a.dtype)
        # |a|**b through exp2/log2, with the sign fixed for negative bases and integer exponents
        mag = (b * a.abs().log2()).exp2()
        is_odd_int = (b.trunc() == b) & ((b.abs() % 2) == 1)
        neg_base = a < 0
        result = (neg_base & is_odd_int).where(-mag, mag)
        nan = Tensor(math.nan, device=a.device, dtype=a.dtype)
        return (neg_base & (b.trunc() != b)).where(nan, result)

    __add__ = add
    __mul__ = mul
    __sub__ = sub
    __truediv__ = div
    __neg__ = neg
    __mod__ = mod
    __pow__ = pow

    def __radd__(self, x: Any) -> Tensor:
        return self.add(x, True)

    def __rsub__(self, x: Any) -> Tensor:
        return self.sub(x, True)

    def __rmul__(self, x: Any) -> Tensor:
        return self.mul(x, True)

    def __rtruediv__(self, x: Any) -> Tensor:
        return self.div(x, True)

    def __floordiv__(self, x: Any) -> Tensor:
        return self.div(x, rounding_mode="floor")

    def __rfloordiv__(self, x: Any) -> Tensor:
        return self.div(x, True, rounding_mode="floor")

    def __rpow__(self, x: Any) -> Tensor:
        return Tensor(x, device=self.device, dtype=least_upper_float(self.dtype)).pow(self)

    def __matmul__(self, x: Tensor) -> Tensor:
        return self.matmul(x)

    def __bool__(self) -> bool:
        raise TypeError("the truth value of a Tensor is ambiguous; use .item() or .numpy()")

    # ------------------------------------------------------------------------------------------------------------
    # reductions

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        if axis is None:
            axes = tuple(range(self.ndim))
        else:
            raw = [axis] if isinstance(axis, int) else list(axis)
            axes = tuple(sorted({_normalize_axis(a, self.ndim, op.name.lower()) for a in raw}))
        if self.ndim == 0:
            return self
        out_shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
        if not axes:
            ret = self
        elif 0 in self.shape and any(self.shape[a] == 0 for a in axes):
            if op is Ops.MAX:
                raise ValueError(f"max of an empty axis is undefined (shape {self.shape}, axes {axes})")
            ret = Tensor.full(out_shape, 0, dtype=self.dtype, device=self.device)
        else:
            ret = Tensor(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes)))
        if keepdim:
            return ret
        return ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DType | None = None) -> Tensor:
        """Sum over `axis` (all axes when None). Small ints and bool accumulate as int32, as in tinygrad."""
        acc = to_dtype(dtype) if dtype is not None else _sum_acc_dtype(self.dtype)
        return self.cast(acc)._reduce(Ops.ADD, axis, keepdim)

    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self._inverse().max(axis, keepdim)._inverse()

    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        out = self.sum(axis, keepdim)
        count = max(self.numel() // max(out.numel(), 1), 1) if self.numel() else 0
        out_dt = least_upper_float(self.dtype)
        return out.cast(out_dt) / count if count else out.cast(out_dt) * math.nan

    # ------------------------------------------------------------------------------------------------------------
    # linear algebra

    def dot(self, w: Tensor) -> Tensor:
        """Matrix product with numpy/PyTorch broadcasting of the batch dims."""
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
        wb = w.cast(out_dt).transpose(-1, -2).reshape(w.shape[:-2] + (1, m, k))._broadcast_to(batch + (n, m, k))
        out = (xb * wb).sum(axis=-1, dtype=_sum_acc_dtype(out_dt)).cast(out_dt)
        if x_vec:
            out = out.squeeze(-2)
        if w_vec:
            out = out.squeeze(-1)
        return out

    def matmul(self, x: Tensor, reverse: bool = False) -> Tensor:
        return x.dot(self) if reverse else self.dot(x)

    def __rmatmul__(self, x: Tensor) -> Tensor:
        return self.matmul(x, True)


# ---------------------------------------------------------------------------------------------------------------------
# helpers


def _cast_py(x: Any, dt: DType) -> Any:
    from uopkit.uop.ops import cast_scalar

    return cast_scalar(x, dt)


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
    if dtypes.is_unsigned(dt) and dt.itemsize < 4:
        return dtypes.uint32
    if (dtypes.is_int(dt) and dt.itemsize < 4) or dt == dtypes.bool:
        return dtypes.int32
    return dt


def _reshape_uop(u: UOp, shape: tuple[int, ...]) -> UOp:
    return u if u.shape == shape else UOp(Ops.RESHAPE, u.dtype, (u,), tuple(shape))


def _movement_chain(u: UOp) -> list[UOp]:
    chain = []
    while u.op in GroupOp.Movement:
        chain.append(u)
        u = u.src[0]
    return chain


def _from_numpy(arr: np.ndarray, device: str, dtype: DType) -> UOp:
    if dtype == dtypes.bfloat16:
        # stored as the top half of float32
        bits = np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32) >> 16
        arr = bits.astype(np.uint16)
    arr = np.ascontiguousarray(arr)
    buf = UOp.new_buffer(device, arr.size, dtype)
    b = Buffer(device, arr.size, dtype).allocate()
    if arr.size:
        b.copyin(memoryview(arr.reshape(-1)).cast("B"))
    buffers[buf] = b
    return _reshape_uop(buf, arr.shape)


def argfix(*x: Any) -> tuple:
    if x and isinstance(x[0], (tuple, list)):
        return tuple(x[0])
    return x


__all__ = ["Tensor", "ShapeError", "buffers", "argsort", "Iterable"]
