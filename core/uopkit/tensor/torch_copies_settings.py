"""torch's remaining top-level names that a port reaches as `Tensor.X` (and the settings also as `uopkit.X`), compared
with torch in tests/test_torch_copies_settings.py:

- the `_copy` variants of the view ops (`permute_copy`, `select_copy`, `split_copy`, ...): the view's values in
  storage of their own (a write into the input or the result doesn't show in the other), with the view's gradient,
  and torch's `out=`;
- `empty_strided`, `fill` (out of place), `rms_norm`, `constant_pad_nd`, `typename`, `is_storage`;
- the process settings: threads (`set_num_threads` sets the CPU backend's thread count), deterministic algorithms,
  float32 matmul precision, the default device (`Device.DEFAULT`), anomaly mode, warn-always and flush-denormal;
- the legacy typed constructors (`Tensor.FloatTensor(2, 3)`, `Tensor.LongTensor([1, 2])`, `isinstance(t,
  Tensor.FloatTensor)`) and `Tensor.Size`, torch.Size's tuple with `numel()`.
"""

from __future__ import annotations

import importlib
import operator
import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from uopkit import helpers
from uopkit.device import Device, device_name
from uopkit.dtype import DType, dtypes
from uopkit.engine.realize import method_cache
from uopkit.helpers import prod
from uopkit.tensor.out_arg import write_out
from uopkit.tensor.support import ArgumentError, ShapeError, _normalize_axis

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def _written(op: str, result: Any, out: Any) -> Any:
    # torch's `out=` of a `_copy` function: the result written into `out`; one of several tensors returns None, as
    # torch's (it returns nothing for a list of outs)
    if out is None:
        return result
    if isinstance(result, tuple):
        write_out(op, result, tuple(out) if isinstance(out, list) else out)
        return None
    return write_out(op, result, out)


def _copies(op: str, views: Sequence[Tensor], out: Any) -> Any:
    return _written(op, tuple(v.clone() for v in views), out)


def _flag(value: Any, op: str, what: str = "mode") -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {what} must be a bool (True or False), got {type(value).__name__} {value!r}")
    return value


def _positive_count(n: Any, op: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{op}: the thread count must be an int, got {type(n).__name__} {n!r}")
    if n <= 0:
        raise ArgumentError(f"{op}: the thread count must be at least 1, got {n}")
    return n


# the settings torch keeps that change nothing here (see each setter's docstring), as the setters left them
class _Settings:
    interop_threads: int | None = None
    deterministic: bool = False
    deterministic_warn_only: bool = False
    matmul_precision: str | None = None
    anomaly: bool = False
    anomaly_check_nan: bool = True
    warn_always: bool = False


_MATMUL_PRECISIONS = ("highest", "high", "medium")


# ------------------------------------------------------------------------------------------------------------------
# torch.Size


class Size(tuple):
    """torch.Size: a tuple of ints (a shape) with `numel()`, printed as `Size([2, 3])`; slicing it, adding a tuple
    to it or repeating it gives a Size. uopkit's `.shape` and `.size()` are plain tuples (equal to a Size of the same
    ints); where a port needs a Size, as `Tensor.FloatTensor(sizes)` does to tell sizes from data, it makes one:
    `Tensor.Size(x.shape)`.

    >>> s = Tensor.Size([2, 3]); s, s.numel(), s == (2, 3), s[1:]
    (Size([2, 3]), 6, True, Size([3]))
    """

    __slots__ = ()

    def __new__(cls, sizes: Any = ()) -> Size:
        items = []
        for i, s in enumerate(sizes):
            if isinstance(s, Tensor) and s.ndim == 0 and dtypes.is_int(s.dtype):
                s = s.item()
            try:
                items.append(operator.index(s))
            except TypeError:
                raise TypeError(f"Size: every size must be an int, item {i} is a {type(s).__name__} ({s!r})") from None
        return super().__new__(cls, items)

    def numel(self) -> int:
        """The number of elements a tensor of this shape holds (1 for `Size([])`).

        >>> Tensor.Size([2, 3, 4]).numel()
        24
        """
        return prod(self)

    def __repr__(self) -> str:
        return f"Size({list(self)})"

    __str__ = __repr__

    def __getitem__(self, key: Any) -> Any:
        got = super().__getitem__(key)
        return Size(got) if isinstance(key, slice) else got

    def __add__(self, other: Any) -> Any:
        return Size(tuple(self) + other) if isinstance(other, tuple) else NotImplemented

    def __radd__(self, other: Any) -> Any:
        return Size(other + tuple(self)) if isinstance(other, tuple) else NotImplemented

    def __mul__(self, n: Any) -> Any:
        return Size(tuple(self) * n) if isinstance(n, int) else NotImplemented

    __rmul__ = __mul__

    def __reduce__(self) -> tuple[Any, ...]:
        return Size, (tuple(self),)


# ------------------------------------------------------------------------------------------------------------------
# the legacy typed constructors


class _LegacyType(type):
    # the class of `Tensor.FloatTensor` & co: called, it makes a Tensor of its dtype (torch's legacy constructor);
    # `isinstance(t, Tensor.FloatTensor)` asks whether t is a tensor of that dtype off CUDA, as torch's
    dtype: DType

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype and not obj.is_cuda

    def __call__(cls, *args: Any, device: Any = None) -> Tensor:  # type: ignore[override]
        name, dt = cls.__name__, cls.dtype
        if not args:
            return Tensor.empty(0, dtype=dt, device=device)
        if all(isinstance(a, int) and not isinstance(a, bool) for a in args) or (
            len(args) == 1 and isinstance(args[0], Size)
        ):
            return Tensor.empty(*args, dtype=dt, device=device)
        if len(args) > 1:
            raise TypeError(
                f"{name}: takes sizes (ints or a Size) or one sequence of values, got "
                f"({', '.join(type(a).__name__ for a in args)})"
            )
        data = args[0]
        if isinstance(data, Tensor):
            if data.dtype != dt:
                raise TypeError(
                    f"{name}: the tensor given is {data.dtype}, not {dt}; cast it with .type(Tensor.{name})"
                )
            return data.view(data.shape) if device is None else data.to(device)
        if isinstance(data, (bool, int, float, complex, str)):
            raise TypeError(
                f"{name}: a {type(data).__name__} is neither sizes nor a sequence of values; pass sizes as ints "
                f"({name}(2, 3)) or the values as a list ({name}([{data!r}]))"
            )
        return Tensor(data, dtype=dt, device=device)


_LEGACY_TYPES = {
    "FloatTensor": dtypes.float32,
    "DoubleTensor": dtypes.float64,
    "HalfTensor": dtypes.float16,
    "BFloat16Tensor": dtypes.bfloat16,
    "LongTensor": dtypes.int64,
    "IntTensor": dtypes.int32,
    "ShortTensor": dtypes.int16,
    "CharTensor": dtypes.int8,
    "ByteTensor": dtypes.uint8,
    "BoolTensor": dtypes.bool,
}


def _legacy_type(name: str, dt: DType) -> _LegacyType:
    doc = (
        f"torch.{name}, the legacy constructor of {dt.name} tensors: `Tensor.{name}(2, 3)` (ints, or a `Tensor.Size`)"
        f" is an uninitialized tensor of that shape, `Tensor.{name}([1, 2])` (a list, a tuple, an array) holds those "
        f"values as {dt.name}, `Tensor.{name}()` is empty, a {dt.name} tensor is returned as a view of itself "
        f"(another dtype raises TypeError); `device=` is the only keyword. The result is a Tensor: `isinstance(t, "
        f"Tensor.{name})` is true for a {dt.name} tensor, and `t.type(Tensor.{name})` casts to it.\n\n"
        f"    >>> Tensor.{name}(2, 3).shape, isinstance(Tensor.{name}([1, 0]), Tensor.{name})\n"
        f"    ((2, 3), True)\n"
    )
    return _LegacyType(name, (), {"dtype": dt, "is_cuda": False, "__doc__": doc, "__module__": "uopkit"})


LEGACY_TYPES = {name: _legacy_type(name, dt) for name, dt in _LEGACY_TYPES.items()}

# torch's module-level names that uopkit's top level has too (uopkit/__init__.py): the settings, the types
SETTINGS_NAMES = (
    "get_num_threads",
    "set_num_threads",
    "get_num_interop_threads",
    "set_num_interop_threads",
    "use_deterministic_algorithms",
    "are_deterministic_algorithms_enabled",
    "is_deterministic_algorithms_warn_only_enabled",
    "set_float32_matmul_precision",
    "get_float32_matmul_precision",
    "set_default_device",
    "get_default_device",
    "set_anomaly_enabled",
    "is_anomaly_enabled",
    "is_anomaly_check_nan_enabled",
    "set_warn_always",
    "is_warn_always_enabled",
    "set_flush_denormal",
    "typename",
    "is_storage",
    "Size",
    *LEGACY_TYPES,
)


class TorchCopiesSettingsMixin:
    __slots__ = ()

    Size = Size
    FloatTensor = LEGACY_TYPES["FloatTensor"]
    DoubleTensor = LEGACY_TYPES["DoubleTensor"]
    HalfTensor = LEGACY_TYPES["HalfTensor"]
    BFloat16Tensor = LEGACY_TYPES["BFloat16Tensor"]
    LongTensor = LEGACY_TYPES["LongTensor"]
    IntTensor = LEGACY_TYPES["IntTensor"]
    ShortTensor = LEGACY_TYPES["ShortTensor"]
    CharTensor = LEGACY_TYPES["CharTensor"]
    ByteTensor = LEGACY_TYPES["ByteTensor"]
    BoolTensor = LEGACY_TYPES["BoolTensor"]

    # --------------------------------------------------------------------------------------------------------------
    # the views' `_copy` variants: the view's values in storage of their own, gradients as the view's

    @staticmethod
    def view_copy(input: Tensor, size: Any = None, *, dtype: Any = None, out: Tensor | None = None) -> Tensor:
        """torch.view_copy: `input.view(size)` (or `input.view(dtype)`, the bits read as another dtype) as a new
        tensor that shares no storage with `input`.

        >>> Tensor.view_copy(Tensor.arange(6), (3, 2)).tolist()
        [[0, 1], [2, 3], [4, 5]]
        """
        if (size is None) == (dtype is None):
            raise TypeError("view_copy: give either a size or a dtype")
        return _written("view_copy", input.view(dtype if size is None else size).clone(), out)

    @staticmethod
    def permute_copy(input: Tensor, dims: Sequence[int], *, out: Tensor | None = None) -> Tensor:
        """torch.permute_copy: `input.permute(dims)` as a new tensor that shares no storage with `input`.

        >>> Tensor.permute_copy(Tensor([[1, 2, 3]]), (1, 0)).tolist()
        [[1], [2], [3]]
        """
        return _written("permute_copy", input.permute(tuple(dims)).clone(), out)

    @staticmethod
    def expand_copy(input: Tensor, size: Sequence[int], *, implicit: bool = False, out: Tensor | None = None) -> Tensor:
        """torch.expand_copy: `input.expand(size)` (-1 keeps an axis) with its values repeated into storage of their
        own; `implicit` changes nothing, as torch's.

        >>> Tensor.expand_copy(Tensor([[1], [2]]), (2, 3)).tolist()
        [[1, 1, 1], [2, 2, 2]]
        """
        return _written("expand_copy", input.expand(tuple(size)).clone(), out)

    @staticmethod
    def transpose_copy(input: Tensor, dim0: int, dim1: int, *, out: Tensor | None = None) -> Tensor:
        """torch.transpose_copy: `input.transpose(dim0, dim1)` as a new tensor that shares no storage with `input`.

        >>> Tensor.transpose_copy(Tensor([[1, 2]]), 0, 1).tolist()
        [[1], [2]]
        """
        return _written("transpose_copy", input.transpose(dim0, dim1).clone(), out)

    @staticmethod
    def t_copy(input: Tensor, *, out: Tensor | None = None) -> Tensor:
        """torch.t_copy: `input.t()` (a matrix transposed; 0-d and 1-d tensors as they are) as a new tensor.

        >>> Tensor.t_copy(Tensor([[1, 2]])).tolist()
        [[1], [2]]
        """
        return _written("t_copy", input.t().clone(), out)

    @staticmethod
    def unsqueeze_copy(input: Tensor, dim: int, *, out: Tensor | None = None) -> Tensor:
        """torch.unsqueeze_copy: `input.unsqueeze(dim)` as a new tensor that shares no storage with `input`.

        >>> Tensor.unsqueeze_copy(Tensor([1, 2]), 1).shape
        (2, 1)
        """
        return _written("unsqueeze_copy", input.unsqueeze(dim).clone(), out)

    @staticmethod
    def squeeze_copy(input: Tensor, dim: int | Sequence[int] | None = None, *, out: Tensor | None = None) -> Tensor:
        """torch.squeeze_copy: `input.squeeze(dim)` (every axis of length 1 when `dim` is None; an int or a tuple of
        them) as a new tensor that shares no storage with `input`.

        >>> Tensor.squeeze_copy(Tensor.zeros(1, 2, 1)).shape, Tensor.squeeze_copy(Tensor.zeros(1, 2, 1), 0).shape
        ((2,), (2, 1))
        """
        return _written("squeeze_copy", input.squeeze(dim).clone(), out)

    @staticmethod
    def select_copy(input: Tensor, dim: int, index: int, *, out: Tensor | None = None) -> Tensor:
        """torch.select_copy: `input.select(dim, index)` (that axis taken at `index`) as a new tensor.

        >>> Tensor.select_copy(Tensor([[1, 2], [3, 4]]), 1, 0).tolist()
        [1, 3]
        """
        return _written("select_copy", input.select(dim, index).clone(), out)

    @staticmethod
    def slice_copy(
        input: Tensor,
        dim: int = 0,
        start: int | None = None,
        end: int | None = None,
        step: int = 1,
        *,
        out: Tensor | None = None,
    ) -> Tensor:
        """torch.slice_copy: `start:end:step` along axis `dim` (bounds clamped as a Python slice's; `step` must be
        positive) as a new tensor that shares no storage with `input`.

        >>> Tensor.slice_copy(Tensor([[0, 1, 2, 3]]), 1, 1, None, 2).tolist()
        [[1, 3]]
        """
        if isinstance(step, bool) or not isinstance(step, int) or step <= 0:
            raise ArgumentError(f"slice_copy: step must be a positive int, got {step!r}")
        if input.ndim == 0:
            raise ShapeError("slice_copy: a 0-d tensor has no axis to slice")
        axis = _normalize_axis(dim, input.ndim, "slice_copy", input.shape)
        index = (slice(None),) * axis + (slice(start, end, step),)
        return _written("slice_copy", input[index].clone(), out)

    @staticmethod
    def diagonal_copy(
        input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1, *, out: Tensor | None = None
    ) -> Tensor:
        """torch.diagonal_copy: `input.diagonal(offset, dim1, dim2)` as a new tensor that shares no storage with
        `input`.

        >>> Tensor.diagonal_copy(Tensor([[1, 2], [3, 4]])).tolist()
        [1, 4]
        """
        return _written("diagonal_copy", input.diagonal(offset, dim1, dim2).clone(), out)

    @staticmethod
    def detach_copy(input: Tensor, *, out: Tensor | None = None) -> Tensor:
        """torch.detach_copy: `input`'s values in a new tensor outside the gradient graph (no gradient reaches
        `input` through it; torch's result of a tensor that requires grad says it requires grad and raises in
        backward).

        >>> Tensor.detach_copy(Tensor([1.0], requires_grad=True)).requires_grad
        False
        """
        return _written("detach_copy", input.detach().clone(), out)

    @staticmethod
    def alias_copy(input: Tensor, *, out: Tensor | None = None) -> Tensor:
        """torch.alias_copy: `input`'s values in a new tensor (the gradient passes through, as `clone`'s).

        >>> Tensor.alias_copy(Tensor([1, 2])).tolist()
        [1, 2]
        """
        return _written("alias_copy", input.clone(), out)

    @staticmethod
    def unbind_copy(input: Tensor, dim: int = 0, *, out: Sequence[Tensor] | None = None) -> tuple[Tensor, ...] | None:
        """torch.unbind_copy: `input.unbind(dim)`, each tensor in storage of its own; with `out=` (a list of as many
        tensors) they are written there and None is returned, as torch's.

        >>> [t.tolist() for t in Tensor.unbind_copy(Tensor([[1, 2], [3, 4]]), 1)]
        [[1, 3], [2, 4]]
        """
        return _copies("unbind_copy", input.unbind(dim), out)

    @staticmethod
    def split_copy(
        tensor: Tensor, split_size: int | Sequence[int], dim: int = 0, *, out: Sequence[Tensor] | None = None
    ) -> tuple[Tensor, ...] | None:
        """torch.split_copy: `tensor.split(split_size, dim)`, each piece in storage of its own; with `out=` they are
        written there and None is returned.

        >>> [t.tolist() for t in Tensor.split_copy(Tensor([1, 2, 3]), 2)]
        [[1, 2], [3]]
        """
        return _copies("split_copy", tensor.split(split_size, dim), out)

    @staticmethod
    def split_with_sizes_copy(
        input: Tensor, split_sizes: Sequence[int], dim: int = 0, *, out: Sequence[Tensor] | None = None
    ) -> tuple[Tensor, ...] | None:
        """torch.split_with_sizes_copy: `input.split_with_sizes(split_sizes, dim)` (the sizes must add up to the
        axis' length), each piece in storage of its own; with `out=` they are written there and None is returned.

        >>> [t.tolist() for t in Tensor.split_with_sizes_copy(Tensor([1, 2, 3]), [1, 2])]
        [[1], [2, 3]]
        """
        return _copies("split_with_sizes_copy", input.split_with_sizes(list(split_sizes), dim), out)

    @staticmethod
    def unfold_copy(input: Tensor, dimension: int, size: int, step: int, *, out: Tensor | None = None) -> Tensor:
        """torch.unfold_copy: `input.unfold(dimension, size, step)` (windows of `size` every `step` along that axis,
        as a new last axis) as a new tensor.

        >>> Tensor.unfold_copy(Tensor([1, 2, 3, 4]), 0, 2, 2).tolist()
        [[1, 2], [3, 4]]
        """
        return _written("unfold_copy", input.unfold(dimension, size, step).clone(), out)

    @staticmethod
    def as_strided_copy(
        input: Tensor,
        size: Sequence[int],
        stride: Sequence[int],
        storage_offset: int | None = None,
        *,
        out: Tensor | None = None,
    ) -> Tensor:
        """torch.as_strided_copy: `input.as_strided(size, stride, storage_offset)` (the elements of input's storage
        at those strides) as a new tensor.

        >>> Tensor.as_strided_copy(Tensor([0, 1, 2, 3, 4, 5]), (2, 2), (1, 2), 1).tolist()
        [[1, 3], [2, 4]]
        """
        return _written("as_strided_copy", input.as_strided(size, stride, storage_offset).clone(), out)

    # --------------------------------------------------------------------------------------------------------------
    # making and filling

    @staticmethod
    def empty_strided(
        size: Sequence[int],
        stride: Sequence[int],
        *,
        dtype: Any = None,
        layout: Any = None,
        device: Any = None,
        requires_grad: bool = False,
        pin_memory: bool = False,
    ) -> Tensor:
        """torch.empty_strided: an uninitialized tensor of shape `size` laid out with `stride`. A layout that covers
        its storage once (row-major, a transpose, channels-last: any order of the axes) is made as that order of axes
        permuted back, so `stride()` reports it; any other (gaps, overlaps) gives a row-major tensor, its values as
        undefined. `layout` and `pin_memory` change nothing.

        >>> Tensor.empty_strided((2, 3), (1, 2)).stride()
        (1, 2)
        """
        size, stride = tuple(size), tuple(stride)
        if len(size) != len(stride):
            raise ShapeError(f"empty_strided: size {size} has {len(size)} axes and stride {stride} {len(stride)}")
        if any(s < 0 for s in size) or any(st < 0 for st in stride):
            raise ShapeError(f"empty_strided: sizes and strides must not be negative, got {size} and {stride}")
        # the axes from the outermost (largest stride) in; a layout walked in that order without gaps is a permutation
        order = sorted(range(len(size)), key=lambda d: (-stride[d], d))
        expected, dense = 1, True
        for d in reversed(order):
            if size[d] != 1 and stride[d] != expected:
                dense = False
            expected *= size[d]
        if dense:
            out = Tensor.empty(*(size[d] for d in order), dtype=dtype, device=device)
            out = out.permute(tuple(order.index(d) for d in range(len(size)))) if size else out
        else:
            out = Tensor.empty(*size, dtype=dtype, device=device)
        return out.requires_grad_(True) if requires_grad else out

    @staticmethod
    def fill(input: Tensor, value: Any) -> Tensor:
        """torch.fill: a new tensor of input's shape and dtype holding `value` (a number or a 0-d tensor, cast to
        input's dtype), out of place. Gradients as torch's: none reaches `input`, a 0-d tensor `value` gets the sum of
        the result's.

        >>> Tensor.fill(Tensor([1, 2, 3]), 7).tolist()
        [7, 7, 7]
        """
        return input.clone().fill_(value)

    @staticmethod
    def constant_pad_nd(input: Tensor, pad: Sequence[int], value: float = 0) -> Tensor:
        """torch.constant_pad_nd: `pad` is (before, after) pairs from the last axis back, as F.pad's (a negative
        amount cuts), and the new places hold `value`.

        >>> Tensor.constant_pad_nd(Tensor([[1, 2]]), [1, 0, 0, 1], 9).tolist()
        [[9, 1, 2], [9, 9, 9]]
        """
        pad = list(pad)
        if len(pad) % 2 or len(pad) > 2 * input.ndim:
            raise ShapeError(
                f"constant_pad_nd: pad must be (before, after) pairs for at most the {input.ndim} axes of a tensor of "
                f"shape {input.shape}, got {len(pad)} numbers"
            )
        return input.pad(pad, value=value)

    @staticmethod
    def rms_norm(
        input: Tensor, normalized_shape: Any, weight: Tensor | None = None, eps: float | None = None
    ) -> Tensor:
        """torch.rms_norm: uopkit.nn.functional.rms_norm (x / sqrt(mean(x^2) + eps) over the trailing
        `normalized_shape` axes, times `weight`; eps None is the machine epsilon of the dtype it computes in).

        >>> [round(v, 3) for v in Tensor.rms_norm(Tensor([[3.0, 4.0]]), [2]).flatten().tolist()]
        [0.849, 1.131]
        """
        return importlib.import_module("uopkit.nn.functional").rms_norm(input, normalized_shape, weight, eps)

    # --------------------------------------------------------------------------------------------------------------
    # questions about objects

    @staticmethod
    def typename(obj: Any) -> str:
        """torch.typename: a tensor's type name (`t.type()`, 'torch.FloatTensor'); for anything else the module and
        qualified name of it (a class or a function) or of its class, the module left out for builtins.

        >>> Tensor.typename(Tensor([1.0])), Tensor.typename(1), Tensor.typename(np.zeros(2))
        ('torch.FloatTensor', 'int', 'numpy.ndarray')
        """
        if isinstance(obj, Tensor):
            return str(obj.type())
        named = obj if hasattr(obj, "__qualname__") else type(obj)
        module = getattr(named, "__module__", None) or ""
        qualname = getattr(named, "__qualname__", type(obj).__qualname__)
        return qualname if module in ("", "builtins") else f"{module}.{qualname}"

    @staticmethod
    def is_storage(obj: Any) -> bool:
        """torch.is_storage: False for every object (uopkit has no storage objects: a tensor's values live in its
        device buffer).

        >>> Tensor.is_storage(Tensor([1.0]))
        False
        """
        return False

    # --------------------------------------------------------------------------------------------------------------
    # threads

    @staticmethod
    def get_num_threads() -> int:
        """torch.get_num_threads: the threads a CPU kernel uses at most: what `set_num_threads` chose, else
        UOPKIT_THREADS, else OMP_NUM_THREADS, else the cores this process may run on.

        >>> Tensor.get_num_threads() >= 1
        True
        """
        return helpers.cpu_threads()

    @staticmethod
    def set_num_threads(n: int) -> None:
        """torch.set_num_threads: CPU kernels use at most `n` threads (before UOPKIT_THREADS / OMP_NUM_THREADS). The
        count is part of a CPU kernel (its parallel loop is cut into that many chunks), so the kernels compiled from
        then on take it; the compiled-kernel cache is emptied when it changes, but a graph the schedule cache or a
        TinyJit holds keeps the kernels it recorded: call it before running, as torch asks. There is no way back to
        "unset" (the environment deciding) but setting the count again.
        """
        n = _positive_count(n, "set_num_threads")
        if n != helpers.cpu_threads():
            method_cache.clear()
        helpers.threads_chosen = n

    @staticmethod
    def get_num_interop_threads() -> int:
        """torch.get_num_interop_threads: the value `set_num_interop_threads` kept, else the cores this process may
        run on (torch's default). uopkit runs no independent ops side by side, so the value is only kept.

        >>> Tensor.get_num_interop_threads() >= 1
        True
        """
        return _Settings.interop_threads or helpers.usable_cores()

    @staticmethod
    def set_num_interop_threads(n: int) -> None:
        """torch.set_num_interop_threads: kept for `get_num_interop_threads` and changes nothing (uopkit has no
        inter-op thread pool; a realize's kernels run one after another). torch takes it once, before any parallel
        work; here any time.
        """
        _Settings.interop_threads = _positive_count(n, "set_num_interop_threads")

    # --------------------------------------------------------------------------------------------------------------
    # flags

    @staticmethod
    def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
        """torch.use_deterministic_algorithms: kept for `are_deterministic_algorithms_enabled` and
        `is_deterministic_algorithms_warn_only_enabled`. Every uopkit kernel is deterministic already (no atomics: a
        scatter-add or index_add on a GPU-style backend is a reduce, and a reduce split across threads adds its parts
        in a fixed order for a given thread count), so nothing raises or changes under it.

        >>> Tensor.use_deterministic_algorithms(True); on = Tensor.are_deterministic_algorithms_enabled()
        >>> Tensor.use_deterministic_algorithms(False); on
        True
        """
        _Settings.deterministic = _flag(mode, "use_deterministic_algorithms")
        _Settings.deterministic_warn_only = _flag(warn_only, "use_deterministic_algorithms", "warn_only")

    @staticmethod
    def are_deterministic_algorithms_enabled() -> bool:
        """torch.are_deterministic_algorithms_enabled: what `use_deterministic_algorithms` was last given.

        >>> Tensor.are_deterministic_algorithms_enabled()
        False
        """
        return _Settings.deterministic

    @staticmethod
    def is_deterministic_algorithms_warn_only_enabled() -> bool:
        """torch.is_deterministic_algorithms_warn_only_enabled: the `warn_only` `use_deterministic_algorithms` was last
        given (with mode True or False, as torch's).

        >>> Tensor.is_deterministic_algorithms_warn_only_enabled()
        False
        """
        return _Settings.deterministic_warn_only

    @staticmethod
    def set_float32_matmul_precision(precision: str) -> None:
        """torch.set_float32_matmul_precision ('highest', 'high' or 'medium'): kept for
        `get_float32_matmul_precision`. uopkit's float32 matmuls are float32 on every backend unless the TF32
        environment variable lets CUDA's use TF32 tensor cores (read when the device opens), so the value changes no
        kernel. Another value warns and is ignored, as torch's.
        """
        if precision not in _MATMUL_PRECISIONS:
            warnings.warn(
                f"set_float32_matmul_precision: {precision!r} is none of 'highest', 'high', 'medium'; the precision "
                f"stays {Tensor.get_float32_matmul_precision()!r}",
                UserWarning,
                stacklevel=2,
            )
            return
        _Settings.matmul_precision = precision

    @staticmethod
    def get_float32_matmul_precision() -> str:
        """torch.get_float32_matmul_precision: what `set_float32_matmul_precision` was given, else 'high' when the
        TF32 environment variable lets CUDA use TF32 and 'highest' otherwise (torch's default).

        >>> Tensor.get_float32_matmul_precision() in ("highest", "high", "medium")
        True
        """
        if _Settings.matmul_precision is not None:
            return _Settings.matmul_precision
        return "high" if os.environ.get("TF32", "0") not in ("", "0") else "highest"

    @staticmethod
    def set_default_device(device: Any) -> None:
        """torch.set_default_device: `Device.DEFAULT = device` ('cpu', 'cuda:1', a torch.device, a uopkit name), where
        tensors made without a device go; None goes back to the DEVICE variable or the best backend. An unknown or
        unusable device raises uopkit's DeviceError (a RuntimeError) and leaves the default as it was.

        >>> Tensor.set_default_device("cpu"); Tensor.get_default_device(); Tensor.set_default_device(None)
        'CPU'
        """
        before = Device._default
        Device.DEFAULT = None if device is None else Device.canonicalize(device)
        try:
            _ = Device.DEFAULT
        except Exception:
            Device.DEFAULT = before
            raise

    @staticmethod
    def get_default_device() -> str:
        """torch.get_default_device: the device tensors made without one go to (`Device.DEFAULT`, a name such as
        'CPU' whose `.type` is torch's 'cpu').

        >>> Tensor.get_default_device().type in ("cpu", "cuda", "opencl", "emulator", "triton")
        True
        """
        return device_name(Device.DEFAULT)

    @staticmethod
    def set_anomaly_enabled(enabled: bool, check_nan: bool = True) -> None:
        """torch.set_anomaly_enabled: kept for `is_anomaly_enabled` / `is_anomaly_check_nan_enabled` only: uopkit's
        backward records no forward traces and doesn't check gradients for NaN, so the mode finds nothing.

        >>> Tensor.set_anomaly_enabled(True); on = Tensor.is_anomaly_enabled(); Tensor.set_anomaly_enabled(False); on
        True
        """
        _Settings.anomaly = _flag(enabled, "set_anomaly_enabled", "enabled")
        _Settings.anomaly_check_nan = _flag(check_nan, "set_anomaly_enabled", "check_nan")

    @staticmethod
    def is_anomaly_enabled() -> bool:
        """torch.is_anomaly_enabled: what `set_anomaly_enabled` was last given (False at first).

        >>> Tensor.is_anomaly_enabled()
        False
        """
        return _Settings.anomaly

    @staticmethod
    def is_anomaly_check_nan_enabled() -> bool:
        """torch.is_anomaly_check_nan_enabled: the `check_nan` `set_anomaly_enabled` was last given (True at first).

        >>> Tensor.is_anomaly_check_nan_enabled()
        True
        """
        return _Settings.anomaly_check_nan

    @staticmethod
    def set_warn_always(b: bool) -> None:
        """torch.set_warn_always: kept for `is_warn_always_enabled`. uopkit's warnings are Python's (`warnings`: shown
        once per place unless its filters say otherwise), which this leaves as they are.

        >>> Tensor.set_warn_always(True); on = Tensor.is_warn_always_enabled(); Tensor.set_warn_always(False); on
        True
        """
        if not isinstance(b, bool):
            # (torch's type for it)
            raise RuntimeError(f"set_warn_always: takes a bool, got {type(b).__name__} {b!r}")
        _Settings.warn_always = b

    @staticmethod
    def is_warn_always_enabled() -> bool:
        """torch.is_warn_always_enabled: what `set_warn_always` was last given (False at first).

        >>> Tensor.is_warn_always_enabled()
        False
        """
        return _Settings.warn_always

    @staticmethod
    def set_flush_denormal(mode: bool) -> bool:
        """torch.set_flush_denormal: returns False, torch's answer where flushing isn't supported. Flushing denormals
        is a per-thread setting of the CPU's floating-point unit, and uopkit's kernels run on the CPU backend's pool
        threads (and on other devices) that it doesn't reach: denormals are always kept, as IEEE arithmetic does.

        >>> Tensor.set_flush_denormal(True)
        False
        """
        _flag(mode, "set_flush_denormal")
        return False
