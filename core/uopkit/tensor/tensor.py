"""Tensor: a lazy value built as a UOp graph, realized by the scheduler into compiled kernels.

The class holds construction, properties, realizing and autograd; each group of operations is a mixin in a
module of its own (creation, movement, indexing, elementwise, math, reduce, linalg, factorize, matrix, special,
placing, losses, spatial, functional, composite, special_torch, torch_names)."""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import uopkit.schedule as _schedule_module
from uopkit.device import Buffer, DeviceName, _device_names, device_name
from uopkit.dtype import (
    DType,
    DTypeError,
    ValueOverflowError,
    dtypes,
    from_numpy_dtype,
    to_dtype,
    to_numpy_dtype,
)
from uopkit.engine import realize as _realize_module
from uopkit.engine.realize import buffers, realize_lock, realize_tensors
from uopkit.gradient import OwnNode, carry_gradient_rule, compute_gradient, given_gradient, graph_of
from uopkit.helpers import prod
from uopkit.schedule import StaleReads, unrealized_graph
from uopkit.schedule import live_tensors as _all_tensors
from uopkit.tensor import autocast as _autocast_module
from uopkit.tensor import bitonic as _bitonic_module
from uopkit.tensor import bits_gradients as _bits_gradients_module
from uopkit.tensor import blocksort as _blocksort_module
from uopkit.tensor import complex_creation as _complex_creation_module
from uopkit.tensor import complex_tensor as _complex_tensor_module
from uopkit.tensor import composite as _composite_module
from uopkit.tensor import copies as _copies_module
from uopkit.tensor import creation as _creation_module
from uopkit.tensor import einsum as _einsum_module
from uopkit.tensor import elementwise as _elementwise_module
from uopkit.tensor import factorize as _factorize_module
from uopkit.tensor import finite_differences as _finite_differences_module
from uopkit.tensor import functional as _functional_module
from uopkit.tensor import generator as _generator_module
from uopkit.tensor import gradient_reach as _gradient_reach
from uopkit.tensor import indexing as _indexing_module
from uopkit.tensor import interop as _interop_module
from uopkit.tensor import lapack as _lapack_module
from uopkit.tensor import leaf_constructors as _leaf_constructors_module
from uopkit.tensor import leaves as _leaves
from uopkit.tensor import linalg as _linalg_module
from uopkit.tensor import lobpcg as _lobpcg_module
from uopkit.tensor import losses as _losses_module
from uopkit.tensor import math as _math_module
from uopkit.tensor import matrix as _matrix_module
from uopkit.tensor import movement as _movement_module
from uopkit.tensor import movement_args as _movement_args_module
from uopkit.tensor import nan_bits as _nan_bits_module
from uopkit.tensor import operators as _operators_module
from uopkit.tensor import out_arg as _out_arg_module
from uopkit.tensor import placing as _placing_module
from uopkit.tensor import printing as _printing_module
from uopkit.tensor import quantiles as _quantiles_module
from uopkit.tensor import reduce as _reduce_module
from uopkit.tensor import relaunch as _relaunch_module
from uopkit.tensor import replay as _replay_module
from uopkit.tensor import rounds as _rounds_module
from uopkit.tensor import segments as _segments_module
from uopkit.tensor import select as _select_module
from uopkit.tensor import sharing as _sharing_module
from uopkit.tensor import spatial as _spatial_module
from uopkit.tensor import special as _special_module
from uopkit.tensor import special_bessel as _special_bessel_module
from uopkit.tensor import special_polynomials as _special_polynomials_module
from uopkit.tensor import special_torch as _special_torch_module
from uopkit.tensor import support
from uopkit.tensor import tensor_hooks as _tensor_hooks
from uopkit.tensor import torch_copies_settings as _torch_copies_settings_module
from uopkit.tensor import torch_extras as _torch_extras_module
from uopkit.tensor import torch_functions as _torch_functions_module
from uopkit.tensor import torch_names as _torch_names_module
from uopkit.tensor import tournament as _tournament_module
from uopkit.tensor import triangular as _triangular_module
from uopkit.tensor import unread as _unread_module
from uopkit.tensor import view_writes as _view_writes_module
from uopkit.tensor import wordsort as _wordsort_module
from uopkit.tensor import write_history as _write_history_module
from uopkit.tensor.autocast import without_autocast
from uopkit.tensor.bits_realized import rewrap_bf16 as _rewrap_bf16
from uopkit.tensor.complex_creation import ComplexMixin
from uopkit.tensor.composite import CompositeMixin
from uopkit.tensor.creation import CreationMixin
from uopkit.tensor.elementwise import ElementwiseMixin
from uopkit.tensor.factorize import FactorizeMixin
from uopkit.tensor.functional import FunctionalMixin
from uopkit.tensor.grad_mode import thread_mode as _grad_mode
from uopkit.tensor.indexing import IndexingMixin
from uopkit.tensor.interop import InteropMixin
from uopkit.tensor.leaves import gradient_keys as _gradient_keys
from uopkit.tensor.leaves import own_leaf as _own_leaf
from uopkit.tensor.leaves import requires_grad_of as _requires_grad
from uopkit.tensor.linalg import LinalgMixin
from uopkit.tensor.losses import LossesMixin
from uopkit.tensor.math import MathMixin
from uopkit.tensor.matrix import MatrixMixin
from uopkit.tensor.movement import MovementMixin
from uopkit.tensor.operators import OperatorsMixin
from uopkit.tensor.placing import PlacingMixin
from uopkit.tensor.quantiles import QuantileMixin
from uopkit.tensor.reduce import ReduceMixin
from uopkit.tensor.spatial import SpatialMixin
from uopkit.tensor.special import SpecialMixin
from uopkit.tensor.special_bessel import BesselMixin
from uopkit.tensor.special_polynomials import PolynomialsMixin
from uopkit.tensor.special_torch import TorchSpecialMixin
from uopkit.tensor.support import (
    ArgumentError,
    GradFn,
    ShapeError,
    _bits_tensor,
    _canonical_device,
    _cast_py,
    _contiguous_strides,
    _flatten_list,
    _from_numpy,
    _host_values,
    _list_dtype,
    _mark_view,
    _normalize_axis,
    _short_int,
    _storage_uop,
    _strides_after_reshape,
    retaining_grad,
    tensors_with_grad,
)
from uopkit.tensor.tensor_hooks import RemovableHook
from uopkit.tensor.tensor_hooks import gradient_hooks as _gradient_hooks
from uopkit.tensor.tensor_hooks import in_rebuilt_graph as _in_rebuilt_graph
from uopkit.tensor.tensor_type import _CAST_METHOD_DTYPES, _ByteCount, _TensorType
from uopkit.tensor.torch_copies_settings import TorchCopiesSettingsMixin
from uopkit.tensor.torch_extras import TorchExtrasMixin
from uopkit.tensor.torch_functions import TorchFunctionsMixin, install_top_level
from uopkit.tensor.torch_keywords import install_torch_keywords
from uopkit.tensor.torch_names import TorchNamesMixin
from uopkit.uop.ops import GroupOp, Ops, UOp

# what a Tensor built under no_grad keeps as it is: views, storage, constants and what is detached already
_KEPT_UNDER_NO_GRAD = frozenset({*GroupOp.Movement, Ops.BUFFER, Ops.CONST, Ops.DETACH, Ops.STORE})


def _bfloat16_storage(u: UOp) -> bool:
    # a bfloat16 value of storage (or a view of it) is the BITCAST of its uint16 bits: kept under no_grad as the bits
    # are, or a write into it (`y[...] = v`) would be one through a detach
    return u.op is Ops.BITCAST and u.dtype == dtypes.bfloat16 and u.src[0].op in _KEPT_UNDER_NO_GRAD


def _no_grad_view(u: UOp) -> UOp:
    """A view built under no_grad (`u`, a movement op) with what it views cut from the gradient where that is a computed
    value: a method whose last node is a view (`sum(0)`'s reshape of its reduce, a matmul's) let the gradient flow
    into its result, where torch's is a constant. A view of storage, a constant or a detached value stays as it is."""
    chain = []
    while u.op in GroupOp.Movement:
        chain.append(u)
        u = u.src[0]
    if u.op in _KEPT_UNDER_NO_GRAD or _bfloat16_storage(u):
        return chain[0]
    u = UOp(Ops.DETACH, u.dtype, (u,))
    for view in reversed(chain):
        u = view.replace(src=(u, *view.src[1:]))
    return u


def _wrapped_unsigned(value: int, dt: DType) -> int:
    # PyTorch takes a negative int into an unsigned dtype narrower than 64 bits modulo 2**bits while it is above
    # -2**bits (`Tensor([-1], dtype=uint8)` is 255); others are left to the range check
    bits = 8 * dt.itemsize
    return value + (1 << bits) if dtypes.is_unsigned(dt) and bits < 64 and -(1 << bits) < value < 0 else value


def _type_name(data: Any) -> str:
    # the class with its module, so a torch.Tensor isn't mistaken for ours
    cls = type(data)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _from_bytes(data: bytes, dt: DType, device: str) -> UOp:
    """`data` as a 1-d tensor of `dt` (little-endian, as the host stores it)."""
    if len(data) % dt.itemsize:
        raise ValueError(
            f"Tensor: {len(data)} bytes are not a whole number of {dt} elements ({dt.itemsize} bytes each)"
        )
    if dt == dtypes.bfloat16:
        bits = _from_bytes(data, dtypes.uint16, device)
        return UOp(Ops.BITCAST, dt, (bits,))
    return _from_numpy(np.frombuffer(data, dtype=to_numpy_dtype(dt)).copy(), device, dt)


class Tensor(
    CreationMixin,
    MovementMixin,
    IndexingMixin,
    ElementwiseMixin,
    OperatorsMixin,
    MathMixin,
    ReduceMixin,
    QuantileMixin,
    LinalgMixin,
    FactorizeMixin,
    MatrixMixin,
    FunctionalMixin,
    CompositeMixin,
    SpecialMixin,
    TorchSpecialMixin,
    BesselMixin,
    PolynomialsMixin,
    PlacingMixin,
    LossesMixin,
    SpatialMixin,
    TorchNamesMixin,
    TorchExtrasMixin,
    TorchFunctionsMixin,
    TorchCopiesSettingsMixin,
    InteropMixin,
    ComplexMixin,
    metaclass=_TensorType,
):
    """A multi-dimensional array on a device, computed lazily.

    >>> Tensor([1, 2, 3]).add(1).tolist()
    [2, 3, 4]
    """

    # _live_ref: the tensor's reference in `live_tensors` (whose `set_uop` is how its graph changes)
    # _requires_grad: behind the `requires_grad` property, which keeps `tensors_with_grad` (what backward() looks at)
    # _view_of: for a PyTorch view (reshape, permute, slice, expand, diagonal), the reference of the oldest live tensor
    # in its chain of views: an in-place write into one must show in the other (`support._mark_view`)
    __slots__ = ("uop", "_requires_grad", "_wanted_grad", "_grad", "_live_ref", "_view_of", "__weakref__")
    training: bool = False
    # bumped by every change of an nn.Module's own training mode (TinyJit keys its captures by it)
    _modes_changed: int = 0
    _seed: int = 0
    _rng_counter: int = 0

    def __init__(
        self,
        data: Any,
        device: str | None = None,
        dtype: DType | str | None = None,
        requires_grad: bool | None = None,
    ) -> None:
        if type(device) is int and type(data) is int:
            # torch's legacy `torch.Tensor(2, 3)` (sizes, uninitialized values): here the second number would be read
            # as a device and the third as a dtype, with an error naming neither
            sizes = ", ".join(str(s) for s in (data, device, dtype, requires_grad) if type(s) is int)
            raise TypeError(
                f"Tensor({sizes}): uopkit's Tensor takes (data, device, dtype), not torch's legacy sizes; "
                f"for a tensor of shape ({sizes}) use Tensor.empty({sizes}) or Tensor.zeros({sizes})"
            )
        dt = to_dtype(dtype) if dtype is not None else None
        self._requires_grad = requires_grad
        # whether it ever required a gradient: a layer's weight frozen with requires_grad_(False) is still one of
        # its parameters (uopkit.nn.Module), as a torch Parameter stays one
        self._wanted_grad = bool(requires_grad)
        self._grad: Tensor | None = None
        self._view_of = None
        if isinstance(data, UOp):
            if _grad_mode.off and data.op not in _KEPT_UNDER_NO_GRAD and not _bfloat16_storage(data):
                # computed while gradients aren't recorded (grad_mode.no_grad): cut from the gradient; views stay
                # views of their storage
                data = UOp(Ops.DETACH, data.dtype, (data,))
            elif _grad_mode.off and data.op in GroupOp.Movement:
                data = _no_grad_view(data)
            self.uop = data if dt is None else Tensor(data).cast(dt).uop
        elif isinstance(data, Tensor):
            self.uop = data.uop if dt is None else data.cast(dt).uop
        elif isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
            dt = dt or dtypes.from_py(data)
            if type(data) is int and data < 0:
                data = _wrapped_unsigned(data, dt)
            if type(data) is int and dtypes.is_int(dt) and not dtypes.min(dt) <= data <= dtypes.max(dt):
                # (as numpy and torch refuse it; wrapped, it would be another number)
                raise ValueOverflowError(f"Tensor: the Python int {_short_int(data)} is out of range for {dt}")
            if requires_grad:
                # a leaf of its own: equal constants are one (hash-consed) node and would share a gradient
                self.uop = _from_numpy(_host_values(data, dt), _canonical_device(device), dt)
            else:
                self.uop = UOp(Ops.CONST, dt, (UOp(Ops.DEVICE, arg=_canonical_device(device)),), _cast_py(data, dt))
        elif isinstance(data, (list, tuple, range)):
            typed: set[Any] = set()
            flat, shape = _flatten_list(data, typed)
            if dt is None:
                dt = _list_dtype(flat, typed)
            dt = dt or (dtypes.from_py(flat) if flat else dtypes.default_float)
            if dtypes.is_unsigned(dt):
                flat = [_wrapped_unsigned(v, dt) if type(v) is int and v < 0 else v for v in flat]
            # (float16 through float32, as torch's: 65519.999 is inf, not 65504; without numpy's overflow warning)
            try:
                arr = _host_values(flat, dt).reshape(shape)
            except OverflowError as e:
                # (numpy's OverflowError for an int the dtype can't hold: ours is PyTorch's RuntimeError too)
                raise ValueOverflowError(
                    f"Tensor: a value doesn't fit {dt} ({e}); use values in range or a wider dtype"
                ) from None
            self.uop = _from_numpy(arr, _canonical_device(device), dt)
        elif isinstance(data, (bytes, bytearray, memoryview)):
            # raw bytes, as tinygrad's: uint8, or read as `dtype` (its bits, not cast), a 1-d tensor
            self.uop = _from_bytes(bytes(data), dt or dtypes.uint8, _canonical_device(device))
        elif isinstance(data, np.ndarray) or np.isscalar(data):
            arr = np.asarray(data)
            if not arr.dtype.isnative:
                # a big-endian array (file formats such as MNIST's hold them): its values, in the host's byte order
                arr = arr.astype(arr.dtype.newbyteorder("="))
            src_dt = from_numpy_dtype(arr.dtype)
            self.uop = _from_numpy(arr, _canonical_device(device), src_dt)
            if dt == dtypes.float16 and src_dt == dtypes.float64:
                # (through float32, as torch's cast and as `Tensor.cast`)
                self.uop = self.uop.cast(dtypes.float32)
            if dt is not None and dt != self.uop.dtype:
                self.uop = self.uop.cast(dt)
        elif hasattr(data, "__dlpack__"):
            # a torch tensor (on the CPU), a JAX or CuPy array: its values copied, keeping its dtype (see interop.py)
            self.uop = _interop_module.dlpack_uop(data, device)
            if dt is not None and dt != self.uop.dtype:
                self.uop = self.uop.cast(dt)
        elif hasattr(data, "__array__") or hasattr(data, "__array_interface__"):
            # what numpy reads as an array (a pandas Series, a PIL image): as that array
            Tensor.__init__(self, np.asarray(data), device, dtype, requires_grad)
            return
        else:
            raise TypeError(
                f"Tensor() can't be built from {_type_name(data)}; pass a list, number, numpy array, or an object with "
                "__dlpack__ or __array__ (Tensor.from_dlpack, Tensor.from_numpy)"
            )
        self._live_ref = _all_tensors.add(self)
        if requires_grad:
            self.requires_grad = requires_grad

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
    def device(self) -> DeviceName:
        """The device's canonical name ('CPU', 'CUDA:1'), a str that also has torch.device's `type` ('cpu') and
        `index`.

        >>> x = Tensor([1.0], device="cpu")
        >>> x.device, x.device.type, x.device == "CPU"
        ('CPU', 'cpu', True)
        """
        device = self.uop.device
        # (the cached DeviceName without a call: binary ops ask for both operands' devices)
        return _device_names.get(device) or device_name(device)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # numpy's operators defer to the tensor's (`ndarray + t` is a Tensor, as with torch's tensors)
    __array_priority__ = 1000

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        # np.asarray(t), np.testing.assert_allclose(t, ...): the values read back (always a copy of device memory)
        if copy is False:
            raise ValueError("a Tensor's values can't be viewed by numpy without a copy: its memory is a device's")
        values = self.float().numpy() if self.dtype == dtypes.bfloat16 else self.numpy()
        return values if dtype is None else values.astype(dtype)

    def __iter__(self) -> Any:
        # the rows along the first axis, as PyTorch's (a 0-d tensor can't be iterated: without this, Python's
        # fallback through __getitem__ gave an empty iteration)
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __contains__(self, element: Any) -> bool:
        # whether any element equals `element` (a number or a tensor that broadcasts), as PyTorch's `in`
        found = self == element
        if not isinstance(found, Tensor):
            raise TypeError(f"`in` looks for a number or a Tensor in a Tensor, got {type(element).__name__}")
        return bool(found.any().item())

    def __format__(self, spec: str) -> str:
        # a 0-d tensor formats as its number, with a spec (`f"{loss:.4f}"`) or without (`f"loss {loss}"` is
        # "loss 0.25"), as PyTorch's; others as their repr, and only without a spec
        if self.ndim == 0 and spec:
            return format(self.item(), spec)
        if self.ndim == 0:
            try:
                return str(self.item())
            except Exception:
                # (a value that can't be computed still prints: the repr names the error)
                return repr(self)
        if spec:
            raise TypeError(
                f"format spec {spec!r} for a tensor of shape {self.shape}: only a 0-d tensor formats as a number"
            )
        return repr(self)

    def __repr__(self) -> str:
        """The values as PyTorch lays them out, `Tensor([1., 2.])`, with what differs from the defaults (device, dtype,
        requires_grad): see `uopkit.set_printoptions`. Computes the tensor and reads back the values it shows; one
        that fails to compute prints the error's type and message instead of the values."""
        return _printing_module.tensor_repr(self)

    # ---- copies: copy.copy shares storage (a view of this tensor, as PyTorch's), copy.deepcopy and pickle copy values

    def __copy__(self) -> Tensor:
        out = _mark_view(Tensor(self.uop), self)
        if self.requires_grad:
            # (a leaf that requires grad, as torch's copy of any value that does)
            _leaves.want_gradient(out)
        return out

    def __deepcopy__(self, memo: dict[int, Any]) -> Tensor:
        """A copy of the values, computed now into storage of its own (a write into either doesn't show in the other,
        and nothing of the original's graph or write history stays with it), its requires_grad and a deep copy of its
        .grad, as PyTorch's (`copy.deepcopy(model)` for an EMA or target model). Views among the tensors copied
        together stay views of one copied storage (`copy.deepcopy([x, x[1:3]])`), as PyTorch's."""
        return _copies_module.deep_copy(self, memo)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # pickled as its values (read back to the host), dtype, device and requires_grad: a value computed from one
        # that requires grad comes back a leaf that requires grad, as PyTorch's
        values = self.float().numpy() if self.dtype == dtypes.bfloat16 else self.numpy()
        requires_grad = self._requires_grad
        if requires_grad is None and self.requires_grad:
            requires_grad = True
        # (and whether it is a parameter: a frozen weight stays one of its module's, as torch's Parameter)
        return _unpickled_tensor, (values, self.dtype, self.device, requires_grad, self._wanted_grad)

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        """The shape, or with `dim` the length of that axis (torch.Tensor.size).

        >>> Tensor.zeros(2, 3).size(), Tensor.zeros(2, 3).size(-1)
        ((2, 3), 3)
        """
        if dim is None:
            return self.shape
        return self.shape[_normalize_axis(dim, self.ndim, "size", self.shape)]

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> _ByteCount:
        """The bytes the elements take: torch's property `t.nbytes`, an int, which called (`t.nbytes()`, tinygrad's
        method) gives the same number.

        >>> t = Tensor.zeros(3, 4, dtype="int16")
        >>> t.nbytes, t.nbytes() + 1
        (24, 25)
        """
        return _ByteCount(self.numel() * self.element_size())

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
        # (realize_tensors is imported with the module: an import statement here cost ~1 us per call, two
        # AttributeErrors raised and caught inside the import machinery)
        if self._view_of is not None:
            _indexing_module._realize_with_base(self)
        for t in others:
            if t._view_of is not None:
                _indexing_module._realize_with_base(t)
        if not others and _grad_groups and (siblings := _gradient_siblings(self)):
            return self.realize(*siblings)
        if not others and self.uop.dtype is not dtypes.bfloat16:
            # (the common case: one tensor, its own bits)
            realize_tensors([self])
            return self
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

    def numpy(self, force: bool = False) -> np.ndarray:
        """The values as a numpy array (copied to the host). `force` is torch's (which otherwise refuses a tensor that
        requires grad or is on a GPU); ours always copies, so it changes nothing."""
        if self.dtype == dtypes.bfloat16:
            return self.cast(dtypes.float32).numpy()
        if 0 in self.shape:
            return np.zeros(self.shape, dtype=to_numpy_dtype(self.dtype))
        # (one realize's worth: another thread's realize, an optimizer step, may rebind this tensor to a buffer it
        # has yet to fill between our realize and the read)
        with realize_lock:
            self.realize()
            view = self._view_read_on_host()
            if view is not None:
                return view
            buffer = self._buffer()
        return buffer.numpy().reshape(self.shape)

    def _view_read_on_host(self) -> np.ndarray | None:
        """The values of a view of a stored buffer (`iou[i, j]`, `scores[k]`, a row `x[i]` of a computed tensor), read
        by copying out the bytes the view covers and taking the view in numpy: a copy kernel for one element costs
        ~100 us, a Python loop of `.item()`s (NMS over a realized IoU matrix) pays it per element. A view no strides
        show (a pad) copies the whole buffer, when it is small. None where it doesn't apply."""
        chain = self.uop.movement_chain()
        if not chain:
            return None
        base = chain[-1].src[0]
        buf = buffers.get(base) if base.op is Ops.BUFFER else None
        if buf is None:
            return None
        # (a symbolic shape or window start, which the kernel path knows the value of)
        if not all(_plain_ints(n.arg) for n in chain):
            return None
        limit = max(HOST_VIEW_READ_BYTES // self.dtype.itemsize, 4 * self.numel())
        layout = _buffer_layout(chain)
        if layout is None:
            # (numpy takes the views in turn: none may be large itself, a pad by 10**12, an expand to 2**33 elements
            # flattened)
            if buf.size > limit or any(prod(n.shape) > limit for n in chain):
                return None
            arr = buf.numpy()
            for node in reversed(chain):
                arr = _numpy_movement(arr, node)
            return np.array(arr, copy=True).reshape(self.shape)
        shape, strides, offset = layout
        # the view reads the buffer's elements [first, last] (a device that can't read from an offset copies from 0)
        first = offset + sum((n - 1) * st for n, st in zip(shape, strides, strict=True) if st < 0)
        last = offset + sum((n - 1) * st for n, st in zip(shape, strides, strict=True) if st > 0)
        if last + 1 - (first if buf.allocator.reads_at_offset else 0) > limit:
            return None
        values = buf.as_numpy(first, last + 1)
        if values.size == self.numel() and strides == _contiguous_strides(shape):
            # (the elements in order: the copy is the result)
            return values.reshape(shape)
        steps = tuple([st * values.itemsize for st in strides])
        view = np.ndarray(shape, values.dtype, values, (offset - first) * values.itemsize, steps)
        return view.copy()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Any:
        if self.numel() != 1:
            raise ArgumentError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    @property
    def data(self) -> Tensor:
        """torch's `.data`: this tensor's values without autograd, sharing its storage (an in-place write into it,
        `p.data.normal_()`, changes the tensor unseen by autograd). Called, it is tinygrad's `data()`: the values as a
        memoryview."""
        out = _DataView(UOp(Ops.DETACH, self.dtype, (self.uop,)))
        return _mark_view(out, self)

    @data.setter
    def data(self, value: Tensor) -> None:
        # torch's `p.data = x`: p takes x's values (and storage), keeping its requires_grad and .grad
        if not isinstance(value, Tensor):
            raise TypeError(f"data: assign a Tensor, got {type(value).__name__}")
        detached = UOp(Ops.DETACH, value.dtype, (value.uop,))
        _all_tensors.set_uop(self, _own_leaf(detached) if self._requires_grad else detached)

    # ---- autograd

    @property
    def requires_grad(self) -> bool:
        """PyTorch's answer: a tensor given requires_grad (whose gradient `backward()` writes into `.grad`), or a float
        value computed from one with gradients recorded (not under no_grad, not through a detach)."""
        if self._requires_grad is not None:
            return self._requires_grad
        return _requires_grad(self)

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        # only a leaf's flag changes, as torch's (see tensor/leaves.py)
        _leaves.set_requires_grad(self, value)

    @property
    def grad(self) -> Tensor | None:
        """The gradient `backward()` wrote (None before); assigned, it must be None or a tensor of this one's shape,
        dtype and device, as torch's (RuntimeError otherwise)."""
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        self._grad = _leaves.checked_grad(self, value, Tensor)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Mark this tensor as one whose gradient `backward()` writes into `.grad` (a leaf's flag; on a value computed
        from a tensor that requires grad, True changes nothing and False raises, as torch's).

        >>> Tensor([1.0]).requires_grad_().requires_grad
        True
        """
        _leaves.set_requires_grad(self, requires_grad, method=True)
        return self

    def detach_(self) -> Tensor:
        """Detach this tensor in place (torch.Tensor.detach_): no gradient flows back through it any more, and it no
        longer requires one; it becomes a leaf. A view (a reshape, a slice) raises, as torch's.

        >>> x = Tensor([1.0], requires_grad=True); y = x * 2; y.detach_().is_leaf
        True
        """
        _leaves.detach_in_place(self)
        return self

    @property
    def is_leaf(self) -> bool:
        """Whether this tensor is a leaf of autograd's graph, as torch says: it was not computed from another tensor
        that needs a gradient (a detached value is a leaf), so backward() stops at it.

        >>> x = Tensor([1.0], requires_grad=True)
        >>> x.is_leaf, (x * 2).is_leaf, (x * 2).detach().is_leaf
        (True, False, True)
        """
        return _leaves.is_leaf(self)

    @property
    def grad_fn(self) -> GradFn | None:
        """torch's `grad_fn`: None for a leaf and for a value that doesn't require grad; for a value computed from a
        tensor that requires grad, an object whose `name()` names the op that computed it (not torch's names).

        >>> x = Tensor([1.0], requires_grad=True)
        >>> x.grad_fn is None, (x * 2).grad_fn is None, (x * 2).detach().grad_fn is None
        (True, False, True)
        """
        if self.is_leaf or not self.requires_grad:
            return None
        u = self.uop
        # (a node of its own over a value another tensor's hooks are on: the op is the value's)
        return GradFn((u.src[0] if u.arg.__class__ is OwnNode else u).op.name)

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None, **torch_gradient: Any) -> Any:
        """The gradient of this tensor with respect to each of `targets` (lazy tensors, nothing is stored), tinygrad's.
        With no targets (and no `gradient=`), or with torch's keywords `spacing=`, `dim=`, `edge_order=`, it is
        torch.gradient instead: a tuple of finite-difference derivatives of the values along each dim (see
        `uopkit.tensor.finite_differences.numerical_gradient`).

        >>> x = Tensor([1.0, 2.0])
        >>> (x * x).sum().gradient(x)[0].tolist()
        [2.0, 4.0]
        >>> Tensor([1.0, 4.0, 9.0]).gradient(spacing=1.0)[0].tolist()
        [3.0, 4.0, 5.0]
        """
        unknown = set(torch_gradient) - {"spacing", "dim", "edge_order"}
        if unknown:
            raise TypeError(f"gradient: unexpected keyword arguments {sorted(unknown)}")
        if torch_gradient or (not targets and gradient is None):
            if targets or gradient is not None:
                raise TypeError(
                    "gradient: torch.gradient's keywords (spacing, dim, edge_order) take no targets and no gradient=; "
                    "call x.gradient(spacing=...) for torch's, or loss.gradient(*targets) for tinygrad's autograd"
                )
            return _finite_differences_module.numerical_gradient(self, **torch_gradient)
        root_grad = self._root_gradient(gradient, "gradient")
        keys = [_gradient_keys(t) for t in targets]
        every = {k for ks in keys for k in ks}
        stale = StaleReads()
        root = unrealized_graph(self.uop, every, rebuilt=carry_gradient_rule, check_writes=stale, given=given_gradient)
        grads = stale.checked(compute_gradient(root, root_grad.uop, every))
        # (an empty target has its empty gradient whether or not an op kept it: cat drops empty parts)
        missing = [t.shape for t, ks in zip(targets, keys, strict=True) if not _summed(grads, ks) and t.numel()]
        if missing:
            raise RuntimeError(f"gradient: targets of shapes {missing} are not used to compute this tensor")
        out = []
        for t, ks in zip(targets, keys, strict=True):
            g = _summed(grads, ks)
            out.append(
                Tensor(g).cast(t.dtype) if g is not None else Tensor.zeros(t.shape, device=t.device, dtype=t.dtype)
            )
        return out

    @without_autocast
    def backward(
        self,
        gradient: Tensor | None = None,
        retain_graph: bool | None = None,
        create_graph: bool = False,
        inputs: Tensor | Sequence[Tensor] | None = None,
    ) -> None:
        """Add the gradient of this tensor into `.grad` of every tensor with `requires_grad` it depends on (only of
        `inputs` when given), as torch's.

        Without `gradient` this tensor must be a scalar (a loss). Gradients are lazy until realized. They are detached
        (constants to a later backward()) unless `create_graph`, which makes them differentiable (second derivatives).
        `retain_graph` is accepted for torch's sake: graphs are never freed here, so a second backward() always works.
        Returns None, as torch's.

        >>> w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> (w * w).sum().backward()
        >>> w.grad.tolist()
        [2.0, 4.0, 6.0]
        """
        root_grad = self._root_gradient(gradient, "backward")
        only = _backward_inputs(inputs)
        wanting = {t: _gradient_keys(t) for t in tensors_with_grad.live()}
        every = {k for ks in wanting.values() for k in ks}
        base = self.uop
        # (a view of a leaf made from a constant, `Tensor.zeros(1).requires_grad_().sum()`, is over the leaf's DETACH)
        while base.op in GroupOp.Movement and base not in every:
            base = base.src[0]
        if base.op is Ops.DETACH and base not in every:
            raise RuntimeError(
                "backward: this tensor doesn't require a gradient: it was computed under no_grad() or from a "
                "detach(); compute the loss with gradients recorded"
            )
        # values realized since the forward pass are followed back to the graphs that computed them
        in_graph = graph_of(self.uop)
        forms: dict[UOp, UOp] = {}
        stale = StaleReads()
        root = unrealized_graph(
            self.uop, every - _through_keys(), in_graph, carry_gradient_rule, stale, given_gradient, forms
        )
        if root is not self.uop:
            in_graph = graph_of(root)
            wanting = {t: _in_rebuilt_graph(ks, forms) for t, ks in wanting.items()}
        targets = [t for t, ks in wanting.items() if any(k in in_graph for k in ks)]
        hooks = stale.guard(_gradient_hooks(in_graph, forms))
        if only is not None:
            # (every tensor with requires_grad still bounds the walk back through realized values above); as torch's,
            # hooks run and retained tensors get `.grad` only on the way to the inputs
            reach = _tensor_hooks.reaching(in_graph, {k for t in targets if id(t) in only for k in wanting[t]})
            kept = {id(t) for t in retaining_grad}
            targets = [t for t in targets if id(t) in only or (id(t) in kept and any(k in reach for k in wanting[t]))]
            hooks = {k: run for k, run in hooks.items() if k in reach}
        if not targets:
            # (a graph of storage only is no realized loss that lost its graph: realized values are followed back to
            # the graphs that computed them above; it is data, `Tensor([1.0]).sum()`, a view of a buffer)
            if self.requires_grad or tensors_with_grad.was_given_requires_grad(in_graph):
                # its leaves are gone (temporaries nobody holds, also behind a value realized since): PyTorch computes
                # gradients no one can read, and still runs the hooks of the tensors on the way
                if hooks and only is None:
                    stale.checked(compute_gradient(root, root_grad.uop, set(hooks), in_graph, hooks))
                return
            raise RuntimeError("backward: no tensor with requires_grad=True was used to compute this tensor")
        keys = {k for t in targets for k in wanting[t]}
        # (hooked nodes count as targets: a subgraph with a given gradient is then walked through, not jumped over)
        grads = stale.checked(compute_gradient(root, root_grad.uop, keys | hooks.keys(), in_graph, hooks))
        reached = [(t, summed) for t in targets if (summed := _summed(grads, wanting[t])) is not None]
        if targets and not reached:
            if self.requires_grad:
                # an op on the way gives its inputs no gradient (`norm(p=0)`, as torch's whose backward returns
                # none): backward runs and leaves every `.grad` as it was, as torch's
                return
            # the loss reaches its leaves only through values cut from the gradient (no_grad, detach) or ops without
            # one (argmax, comparisons): it doesn't require grad, as torch says
            raise RuntimeError(
                "backward: element 0 of tensors does not require grad and does not have a grad_fn: no gradient "
                "reaches a tensor that requires one, this value was computed from them only through detached values "
                "(no_grad(), detach()) or ops without a gradient (argmax, comparisons)"
            )
        for t, summed in reached:
            g = Tensor(summed).cast(t.dtype)
            if not create_graph:
                g = Tensor(_detached_under_views(g.uop))
            if t.grad is None or t.grad.shape != g.shape or t.grad.dtype != g.dtype:
                t.grad = g if t.grad is None else t.grad + g
            else:
                # accumulated into the same tensor object, as PyTorch's: a reference to `.grad` taken before sees it
                _all_tensors.set_uop(t.grad, (t.grad + g).uop)
        if len(reached) > 1:
            _group_gradients([t.grad for t, _ in reached])
        run_post_accumulate_hooks([t for t, _ in reached], create_graph)

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> RemovableHook:
        """Call `hook(grad)` with this tensor's gradient on every backward() that computes it, as torch's: a returned
        tensor replaces the gradient (what `.grad` gets for a leaf, what flows on to the tensors it was computed from
        otherwise). The gradient given is lazy; hooks run in the order registered. `.remove()` on the result takes the
        hook away.

        >>> x = Tensor([1.0, 2.0], requires_grad=True)
        >>> _ = x.register_hook(lambda g: g * 10)
        >>> _ = (x * x).sum().backward(); x.grad.tolist()
        [20.0, 40.0]
        """
        if not self.requires_grad:
            raise RuntimeError("register_hook: this tensor doesn't require a gradient, so no hook can run on it")
        if not callable(hook):
            raise TypeError(f"register_hook: the hook must be callable, got {type(hook).__name__}")
        hooks = _tensor_hooks.hooks_of(self)
        handle = RemovableHook(hooks)
        hooks[handle.id] = hook
        return handle

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]) -> RemovableHook:
        """Call `hook(tensor)` after each backward() has added into this leaf's `.grad`, as torch's: the hook gets the
        tensor, not the gradient, may change both in place (an optimizer step inside backward), and runs with
        gradient recording off unless create_graph=True. Hooks run in the order registered; `.remove()` on the result
        takes the hook away.

        >>> v = Tensor([0.0, 0.0], requires_grad=True)
        >>> _ = v.register_post_accumulate_grad_hook(lambda p: p.sub_(p.grad * 0.5))
        >>> _ = v.backward(Tensor([1.0, 2.0])); v.tolist()
        [-0.5, -1.0]
        """
        if not self.requires_grad:
            raise RuntimeError(
                "register_post_accumulate_grad_hook: the tensor does not require grad, so it never accumulates one"
            )
        if not self._requires_grad or not self.is_leaf:
            raise RuntimeError(
                "register_post_accumulate_grad_hook: only a leaf tensor accumulates into .grad; this one is computed "
                "from others"
            )
        if not callable(hook):
            raise TypeError(f"register_post_accumulate_grad_hook: the hook must be callable, got {type(hook).__name__}")
        entry = _post_accumulate.setdefault(
            id(self), (weakref.ref(self, lambda _, i=id(self): _post_accumulate.pop(i, None)), {})
        )
        handle = RemovableHook(entry[1])
        entry[1][handle.id] = hook
        return handle

    def _root_gradient(self, gradient: Tensor | None, op: str) -> Tensor:
        if not dtypes.is_float(self.dtype):
            # (a TypeError, and the RuntimeError torch raises: an integer or bool tensor never requires grad)
            raise DTypeError(
                f"{op}: only floating-point tensors have gradients, this one is {self.dtype}: element 0 of tensors "
                "does not require grad"
            )
        if gradient is None:
            if self.numel() != 1:
                raise ShapeError(f"{op}: needs one value (a loss) or gradient=, got a tensor of shape {self.shape}")
            # (any one-element shape, as torch's: a loss of shape (1,) from a mean over (N, 1) outputs)
            return (
                Tensor.ones(*self.shape, device=self.device, dtype=self.dtype)
                if self.shape
                else Tensor(1.0, device=self.device, dtype=self.dtype)
            )
        if gradient.shape != self.shape:
            raise ShapeError(f"{op}: gradient shape {gradient.shape} doesn't match the tensor's shape {self.shape}")
        return gradient.cast(self.dtype)

    class train(contextlib.ContextDecorator):
        """Training mode for a block or a function: `with Tensor.train():` or `@Tensor.train()` (BatchNorm uses
        batch statistics, dropout drops); `Tensor.train(False)` is `Tensor.test()`.

        >>> with Tensor.train():
        ...     Tensor.training
        True
        >>> @Tensor.train()
        ... def step():
        ...     return Tensor.training
        >>> step(), Tensor.training
        (True, False)
        """

        def __init__(self, mode: bool = True) -> None:
            self.mode = mode
            # a stack, not one slot: a decorated function reuses this object on every (possibly nested) call
            self._prev: list[bool] = []

        def __enter__(self) -> None:
            self._prev.append(Tensor.training)
            Tensor.training = self.mode

        def __exit__(self, *exc: object) -> None:
            Tensor.training = self._prev.pop()

    @staticmethod
    def test() -> Tensor.train:
        """Inference mode for a block or a function: `with Tensor.test():` or `@Tensor.test()` (BatchNorm uses
        running statistics, no dropout)."""
        return Tensor.train(False)


# the mixin modules and the shared helpers build Tensors: bind the class in each of them, now that it exists
for _module in (
    _view_writes_module,
    _autocast_module,
    _bits_gradients_module,
    _composite_module,
    _complex_tensor_module,
    _complex_creation_module,
    _leaf_constructors_module,
    _movement_args_module,
    support,
    _creation_module,
    _einsum_module,
    _generator_module,
    _movement_module,
    _indexing_module,
    _segments_module,
    _elementwise_module,
    _operators_module,
    _math_module,
    _reduce_module,
    _linalg_module,
    _triangular_module,
    _lapack_module,
    _factorize_module,
    _matrix_module,
    _special_module,
    _special_torch_module,
    _special_bessel_module,
    _special_polynomials_module,
    _placing_module,
    _losses_module,
    _spatial_module,
    _functional_module,
    _replay_module,
    _rounds_module,
    _relaunch_module,
    _bitonic_module,
    _blocksort_module,
    _tournament_module,
    _wordsort_module,
    _select_module,
    _unread_module,
    _out_arg_module,
    _quantiles_module,
    _tensor_hooks,
    _copies_module,
    _torch_names_module,
    _torch_extras_module,
    _torch_functions_module,
    _torch_copies_settings_module,
    _sharing_module,
    _interop_module,
    _nan_bits_module,
    _lobpcg_module,
    _printing_module,
    _schedule_module,
    _write_history_module,
):
    _module.Tensor = Tensor  # type: ignore[attr-defined]


# a view's values are read from a host copy of the part of its buffer it covers (of the whole buffer, for a view no
# strides show) when that part has at most this many bytes (or 4x the view's)
HOST_VIEW_READ_BYTES = 1 << 18


def _plain_ints(args: Any) -> bool:
    # whether every number in nested tuples is a Python int or bool (none symbolic), without a call per tuple: a
    # loop of `.item()`s checks every view
    stack = [args]
    while stack:
        arg = stack.pop()
        if type(arg) is tuple:
            stack.extend(arg)
        elif not isinstance(arg, int):
            return False
    return True


def _buffer_layout(chain: list[UOp]) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
    """(shape, strides, offset), in elements, of the view a chain of movement ops (outermost first) makes of the
    buffer under it: which of its elements the view reads, in which order. None where no strides show the view (a pad,
    a reshape that would copy)."""
    shape = chain[-1].src[0].shape or ()
    strides, offset = _contiguous_strides(shape), 0
    # (while the view is the buffer's elements in order: a reshape keeps it so, the usual first op over a buffer)
    dense = True
    for node in reversed(chain):
        op, new = node.op, node.shape or ()
        if op is Ops.RESHAPE:
            reshaped = _contiguous_strides(new) if dense else _strides_after_reshape(shape, strides, new)
            if reshaped is None:
                return None
            strides = reshaped
            shape = new
            continue
        dense = False
        if op is Ops.PERMUTE:
            strides = tuple([strides[i] for i in node.arg])
        elif op is Ops.EXPAND:
            strides = tuple([0 if old != size else st for old, size, st in zip(shape, new, strides, strict=True)])
        elif op is Ops.SHRINK:
            offset += sum(b * st for (b, _), st in zip(node.arg, strides, strict=True))
        elif op is Ops.FLIP:
            offset += sum((n - 1) * st for n, st, f in zip(shape, strides, node.arg, strict=True) if f)
            strides = tuple([-st if f else st for st, f in zip(strides, node.arg, strict=True)])
        else:
            return None
        shape = new
    return shape, strides, offset


def _numpy_movement(arr: np.ndarray, node: UOp) -> np.ndarray:
    # one movement op on a host array: what the kernel path would read through it
    op, arg = node.op, node.arg
    if op is Ops.RESHAPE:
        return arr.reshape(arg)
    if op is Ops.PERMUTE:
        return arr.transpose(arg)
    if op is Ops.EXPAND:
        return np.broadcast_to(arr, arg)
    if op is Ops.SHRINK:
        return arr[tuple(slice(b, e) for b, e in arg)]
    if op is Ops.FLIP:
        return arr[tuple(slice(None, None, -1) if f else slice(None) for f in arg)]
    if op is Ops.PAD:
        return np.pad(arr, arg)
    raise AssertionError(f"no host form of {op}")


def _unpickled_tensor(
    values: np.ndarray, dtype: DType, device: str, requires_grad: bool | None, wanted_grad: bool = False
) -> Tensor:
    out = Tensor(values, device=device, dtype=dtype)
    if requires_grad is not None:
        out.requires_grad = requires_grad
    out._wanted_grad = out._wanted_grad or wanted_grad
    return out


def _detached_under_views(u: UOp) -> UOp:
    # a gradient cut from its graph, the DETACH put under its movement ops (on the value they view), where the
    # scheduler reads through it as through a cast: a view of a gradient is still computed in one kernel with it
    chain = u.movement_chain()
    base = chain[-1].src[0] if chain else u
    out = UOp(Ops.DETACH, base.dtype, (base,))
    for m in reversed(chain):
        out = UOp(m.op, m.dtype, (out, *m.src[1:]), m.arg)
    return out


def _backward_inputs(inputs: Tensor | Sequence[Tensor] | None) -> set[int] | None:
    # backward(inputs=...): the ids of the tensors whose .grad it fills, each checked as torch checks them
    if inputs is None:
        return None
    chosen = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if not chosen:
        raise RuntimeError("backward: inputs must not be empty (pass None for every tensor that requires a gradient)")
    for t in chosen:
        if not isinstance(t, Tensor):
            raise TypeError(f"backward: inputs must be Tensors, got {type(t).__name__}")
        if not t._requires_grad:
            if not t.requires_grad:
                raise RuntimeError(f"backward: an input of shape {t.shape} doesn't require a gradient")
            # a value computed from leaves retains its gradient from now on, as torch's
            t.retain_grad()
    return {id(t) for t in chosen}


# id(tensor) -> (a weak reference to it, its post-accumulate-grad hooks by handle id); an entry goes when its tensor
# does
_post_accumulate: dict[int, tuple[weakref.ref, dict[int, Callable[[Tensor], None]]]] = {}


def run_post_accumulate_hooks(accumulated: list[Tensor], create_graph: bool) -> None:
    """The post-accumulate-grad hooks of the tensors whose `.grad` a backward pass just added into, each tensor's in
    the order registered (torch runs them as each leaf's gradient is accumulated, in its own backward order)."""
    if not _post_accumulate:
        return
    for t in accumulated:
        entry = _post_accumulate.get(id(t))
        if entry is None or entry[0]() is not t:
            continue
        for hook in list(entry[1].values()):
            if create_graph:
                hook(t)
                continue
            before, _grad_mode.off = _grad_mode.off, True
            try:
                hook(t)
            finally:
                _grad_mode.off = before


# the `.grad` tensors one backward() wrote, by id of each -> (a weak reference to it, the group's): realizing one
# realizes the others with it, as torch's backward computes them all at once (read one at a time, as a per-parameter
# log of gradient norms does, each read computed the backward chain they share again: 4x slower steps)
_grad_groups: dict[int, tuple[weakref.ref, list[weakref.ref]]] = {}


def _group_gradients(grads: list[Tensor]) -> None:
    group = [weakref.ref(g, functools.partial(_forget_grad, id(g))) for g in grads]
    for g, ref in zip(grads, group, strict=True):
        _grad_groups[id(g)] = (ref, group)


def _forget_grad(key: int, ref: weakref.ref) -> None:
    # (the id may belong to a newer tensor by now: only this reference's entry goes)
    entry = _grad_groups.get(key)
    if entry is not None and entry[0] is ref:
        del _grad_groups[key]


def _gradient_siblings(t: Tensor) -> list[Tensor]:
    """The other live gradients of the backward() that wrote `t` (none when it wrote no group), taken out of the
    groups: they are realized with `t` once."""
    entry = _grad_groups.get(id(t))
    if entry is None or entry[0]() is not t:
        return []
    siblings = []
    for ref in entry[1]:
        g = ref()
        if g is not None:
            _grad_groups.pop(id(g), None)
            if g is not t:
                siblings.append(g)
    return siblings


def _through_keys() -> set[UOp]:
    """The gradient keys of tensors whose gradient is wanted that are not leaves (given retain_grad() or a hook):
    backward() follows a value realized since the forward pass through them to the leaves behind them (the
    gradient still arrives at the node that computed them, one of their keys)."""
    out = _tensor_hooks.hooked_non_leaf_keys()
    for t in retaining_grad:
        if not t.is_leaf:
            out.update(_gradient_keys(t))
    return out


def _summed(grads: dict[UOp, UOp], keys: tuple[UOp, ...]) -> UOp | None:
    found = [grads[k] for k in keys if k in grads]
    if not found:
        return None
    total = found[0]
    for g in found[1:]:
        total = total + g
    return total


# the readers a realize adds are realized as their stored bits too (bfloat16)
# torch's keyword names (`torch.cumprod(input=x, dim=0)`, `t.pow(exponent=2)`) on the methods that name them otherwise
install_torch_keywords(Tensor)
# (after them: the methods, wrapped or not, that a torch top-level function of the same name reads otherwise)
install_top_level(Tensor)
# torch's functions of complex tensors spelled `Tensor.X(z)` (torch.conj(z), torch.cat([z, w])): ComplexTensor's X
_complex_tensor_module.install_function_forms(Tensor)
for _name, _dtype in (*_CAST_METHOD_DTYPES.items(), ("cfloat", dtypes.complex64), ("cdouble", dtypes.complex128)):
    getattr(Tensor, _name).as_dtype = _dtype
_realize_module.stored_bits = (_bits_tensor, _rewrap_bf16)
# a live tensor over storage that PyTorch would have copied (a flip, a pad, a repeat, a reshape no strides show) reads
# the storage as it is: an assign protects it as a reader
_schedule_module.view_shows_writes = _indexing_module._writes_through
# a realize remembers the graph of a value it stores only where a gradient can flow through that graph
# (a partial, not a lambda: it is asked of every value a realize stores, and a partial's call is one C call)
_schedule_module.gradient_reaches = functools.partial(_gradient_reach.reaches, keys_of=_gradient_keys)
# and a realize's rewrite of a graph that read assigns follows a Function's given gradient to its inputs
_schedule_module.given_gradient = given_gradient


class _DataView(Tensor):
    """What `Tensor.data` gives: a detached view that, called, is tinygrad's `data()` (a memoryview of the values)."""

    __slots__ = ()

    def __call__(self) -> memoryview:
        return memoryview(self.numpy())
