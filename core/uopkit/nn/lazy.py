"""torch.nn's lazy layers: LazyLinear, LazyConv1d/2d/3d, LazyConvTranspose1d/2d/3d, LazyBatchNorm1d/2d/3d and
LazyInstanceNorm1d/2d/3d. Their input size (in_features, in_channels, num_features) is read from the first input, and
their parameters and running statistics are made then; until that they hold `UninitializedParameter` and
`UninitializedBuffer`s, whose shape can't be read (torch's RuntimeError). The first call makes the layer the layer it
stands for (a LazyLinear becomes a Linear, `type(layer)` included), with the parameters that layer would have drawn
now; loading a state dict into a lazy layer makes its tensors in the state dict's shapes first, as torch's.

>>> from uopkit import Tensor
>>> from uopkit.nn import LazyLinear
>>> layer = LazyLinear(2)
>>> layer.has_uninitialized_params()
True
>>> layer(Tensor.ones(3, 5)).shape, type(layer).__name__, layer.weight.shape
((3, 2), 'Linear', (2, 5))
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from uopkit.dtype import DType, dtypes, to_dtype
from uopkit.nn import layers, modules
from uopkit.nn.module import Module, Parameter
from uopkit.tensor import ArgumentError, ShapeError, Tensor

__all__ = [
    "UninitializedParameter", "UninitializedBuffer", "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d",
    "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d", "LazyBatchNorm1d", "LazyBatchNorm2d",
    "LazyBatchNorm3d", "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d",
]  # fmt: skip


class _Uninitialized:
    # what UninitializedParameter and UninitializedBuffer share: an empty placeholder that knows its device and dtype
    # (a module's `to()` converts it as any tensor), no shape, and `materialize`
    __slots__ = ()
    cls_to_become: type[Tensor] = Tensor
    # (what a state dict's loading looks for: nn/state.py doesn't import the layers)
    uninitialized = True

    @property
    def shape(self) -> tuple[int, ...]:
        raise RuntimeError(
            "this lazy parameter/buffer has no shape yet: call the lazy module on an input (or load a state dict into "
            "it) to make its tensors first"
        )

    def materialize(self, shape: Sequence[int] | int, device: Any = None, dtype: DType | str | None = None) -> None:
        """Become a tensor of `shape` (uninitialized values) in place, on the placeholder's device and dtype unless
        given, and the class it stands for (a Parameter, a plain buffer), as torch's."""
        shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
        t: Any = self
        value = Tensor.empty(
            *shape,
            device=t.device if device is None else device,
            dtype=t.dtype if dtype is None else to_dtype(dtype),
        )
        _become(t, value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


class UninitializedParameter(_Uninitialized, Parameter):
    """torch.nn.parameter.UninitializedParameter: a lazy layer's parameter before its first input; `materialize(shape)`
    makes it a Parameter of that shape (the same object)."""

    __slots__ = ()
    cls_to_become = Parameter

    def __init__(self, requires_grad: bool = True, device: Any = None, dtype: DType | str | None = None) -> None:
        dt = dtypes.default_float if dtype is None else to_dtype(dtype)
        super().__init__(Tensor.empty(0, device=device, dtype=dt), requires_grad)


class UninitializedBuffer(_Uninitialized, Tensor):
    """torch.nn.parameter.UninitializedBuffer: a lazy layer's buffer (a running statistic) before its first input."""

    __slots__ = ()

    def __init__(self, requires_grad: bool = False, device: Any = None, dtype: DType | str | None = None) -> None:
        dt = dtypes.default_float if dtype is None else to_dtype(dtype)
        super().__init__(Tensor.empty(0, device=device, dtype=dt))
        # (requires_grad False marks a layer's buffer, as the built-in layers mark their running statistics)
        self.requires_grad = requires_grad


def _become(placeholder: Any, value: Tensor) -> None:
    # the placeholder (the same object: a module, an optimizer may hold it) takes `value`'s values and becomes the class
    # it stands for
    placeholder._hold_in_place(value.to(placeholder.device).cast(placeholder.dtype))
    placeholder.__class__ = placeholder.cls_to_become


class _LazyMixin:
    """torch's LazyModuleMixin: the first call reads the input size and makes the tensors (`initialize_parameters`: as
    `cls_to_become` built with that size would draw them now), then the module becomes a `cls_to_become`."""

    cls_to_become: type[Module]
    # the attribute the input's size goes into
    _size_name: str

    def has_uninitialized_params(self) -> bool:
        """Whether a parameter or a buffer is still uninitialized (torch's LazyModuleMixin)."""
        return any(isinstance(t, _Uninitialized) for t in vars(self).values())

    def initialize_parameters(self, x: Tensor) -> None:
        """Make the parameters and buffers from the input `x` (the first call does this, torch's name)."""
        if not isinstance(x, Tensor):
            raise TypeError(f"{type(self).__name__}: the input must be a Tensor, got {type(x).__name__}")
        size = self._input_size(x)
        self._set_size(size)
        if self.has_uninitialized_params():
            built = self._built(size)
            for name, value in vars(self).items():
                if isinstance(value, _Uninitialized):
                    _become(value, getattr(built, name))

    def _set_size(self, size: int) -> None:
        setattr(self, self._size_name, size)

    def _input_size(self, x: Tensor) -> int:
        raise NotImplementedError

    def _built(self, size: int) -> Module:
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not args:
            raise TypeError(f"{type(self).__name__}: called without an input")
        self.initialize_parameters(args[0])
        # (torch's: the layer is the layer it stands for from now on)
        vars(self).pop("_lazy_arguments", None)
        self.__class__ = self.cls_to_become
        return self(*args, **kwargs)

    def _fill_old_state(self, state_dict: dict[str, Any], prefix: str, local_metadata: dict[str, Any]) -> None:
        # loading a state dict makes the uninitialized tensors in the shapes of its entries, as torch's lazy load hook
        for name, value in vars(self).items():
            given = state_dict.get(prefix + name)
            if (
                isinstance(value, _Uninitialized)
                and isinstance(given, Tensor)
                and not isinstance(given, _Uninitialized)
            ):
                value.materialize(given.shape)
        size = self._size_from_state()
        if size is not None:
            self._set_size(size)
        super()._fill_old_state(state_dict, prefix, local_metadata)  # type: ignore[misc]

    def _size_from_state(self) -> int | None:
        # the input size the materialized tensors show, once they are
        return None


@contextlib.contextmanager
def _drawing_nothing() -> Iterator[None]:
    # the layer a lazy one is built as (its checks, its attributes) draws its weights from the global stream: undone,
    # as torch's lazy layer draws nothing until its first input (so a seed gives the same weights as the layer's)
    counter = Tensor._rng_counter
    try:
        yield
    finally:
        Tensor._rng_counter = counter


def _uninitialized_pair(bias: bool, device: Any, dtype: Any) -> tuple[UninitializedParameter, Any]:
    return UninitializedParameter(device=device, dtype=dtype), (
        UninitializedParameter(device=device, dtype=dtype) if bias else None
    )


class LazyLinear(_LazyMixin, modules.Linear):
    """torch.nn.LazyLinear: a Linear whose in_features is the last axis of its first input.

    >>> layer = LazyLinear(3)
    >>> layer(Tensor.ones(2, 4)).shape, layer.in_features
    ((2, 3), 4)
    """

    cls_to_become = modules.Linear
    _size_name = "in_features"

    def __init__(self, out_features: int, bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        with _drawing_nothing():
            super().__init__(0, out_features, bias)
        self.weight, self.bias = _uninitialized_pair(bias, device, dtype)

    def _input_size(self, x: Tensor) -> int:
        if x.ndim == 0:
            raise ShapeError(f"LazyLinear({self.out_features}): the input must have at least 1 axis, got {x.shape}")
        return x.shape[-1]

    def _built(self, size: int) -> Module:
        return modules.Linear(size, self.out_features, self.bias is not None)

    def _size_from_state(self) -> int | None:
        return None if isinstance(self.weight, _Uninitialized) else self.weight.shape[1]


class _LazyConv(_LazyMixin):
    # a convolution whose in_channels is axis 1 of its first input (axis 0 of an unbatched one)
    _size_name = "in_channels"
    spatial_dims: int
    out_channels: int
    groups: int
    transposed: bool
    weight: Any

    def _input_size(self, x: Tensor) -> int:
        if x.ndim not in (self.spatial_dims + 1, self.spatial_dims + 2):
            raise ShapeError(
                f"{type(self).__name__}({self.out_channels}): expected a {self.spatial_dims + 1}-d (unbatched) or "
                f"{self.spatial_dims + 2}-d input, got {x.shape}"
            )
        return x.shape[0] if x.ndim == self.spatial_dims + 1 else x.shape[1]

    def _built(self, size: int) -> Module:
        return self.cls_to_become(size, self.out_channels, **self._lazy_arguments)  # type: ignore[call-arg]

    def _size_from_state(self) -> int | None:
        if isinstance(self.weight, _Uninitialized):
            return None
        return self.weight.shape[0] if self.transposed else self.weight.shape[1] * self.groups


def _lazy_conv(real: type[Module], transposed: bool) -> type[Module]:
    name = f"Lazy{real.__name__}"

    def __init__(
        self: Any,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: Any = 0,
        *args: Any,
        device: Any = None,
        dtype: Any = None,
        **kwargs: Any,
    ) -> None:
        # torch's positional order after padding: (output_padding,) groups, bias, dilation (transposed) or dilation,
        # groups, bias; kept by name for the layer made at the first input
        names = ("output_padding", "groups", "bias", "dilation") if transposed else ("dilation", "groups", "bias")
        if len(args) > len(names):
            raise TypeError(f"{name}: takes at most {4 + len(names)} positional arguments")
        kwargs.update(zip(names, args, strict=False))
        made_with = {"kernel_size": kernel_size, "stride": stride, "padding": padding, **kwargs}
        # (checked as the layer checks them, with as many input channels as groups: any other count is unknown yet)
        with _drawing_nothing():
            real.__init__(self, kwargs.get("groups", 1), out_channels, **made_with)
        self._lazy_arguments = made_with
        self.weight, self.bias = _uninitialized_pair(kwargs.get("bias", True), device, dtype)
        self.in_channels = 0

    doc = f"""torch.nn.{name}: a {real.__name__} whose in_channels is axis 1 of its first input (axis 0 unbatched)."""
    return type(
        name,
        (_LazyConv, real),
        {"__init__": __init__, "__doc__": doc, "cls_to_become": real, "__module__": __name__},
    )


LazyConv1d = _lazy_conv(modules.Conv1d, False)
LazyConv2d = _lazy_conv(modules.Conv2d, False)
LazyConv3d = _lazy_conv(modules.Conv3d, False)
LazyConvTranspose1d = _lazy_conv(modules.ConvTranspose1d, True)
LazyConvTranspose2d = _lazy_conv(modules.ConvTranspose2d, True)
LazyConvTranspose3d = _lazy_conv(modules.ConvTranspose3d, True)


class _LazyNorm(_LazyMixin):
    # a BatchNorm or InstanceNorm whose num_features is axis 1 of its first input
    _size_name = "num_features"
    _unbatched_rank: int
    affine: bool
    track_running_stats: bool

    def _lazy_init(self, bias: bool, device: Any, dtype: Any) -> None:
        self.num_features = 0
        if self.affine:
            self.weight = UninitializedParameter(device=device, dtype=dtype)
            self.bias = UninitializedParameter(device=device, dtype=dtype) if bias else None
        if self.track_running_stats:
            self.running_mean = UninitializedBuffer(device=device, dtype=dtype)
            self.running_var = UninitializedBuffer(device=device, dtype=dtype)

    def _set_size(self, size: int) -> None:
        self.num_features = size
        if isinstance(self, modules.BatchNorm):
            # (BatchNorm's own name for it)
            self.sz = size

    def _input_size(self, x: Tensor) -> int:
        if x.ndim < 2:
            raise ShapeError(f"{type(self).__name__}: expected input (N, C, ...), got {x.shape}")
        return x.shape[0] if x.ndim == self._unbatched_rank else x.shape[1]

    def _size_from_state(self) -> int | None:
        for t in (getattr(self, "weight", None), getattr(self, "running_mean", None)):
            if isinstance(t, Tensor) and not isinstance(t, _Uninitialized):
                return t.shape[0]
        return None


def _lazy_norm(real: type[Module], unbatched_rank: int) -> type[Module]:
    name = f"Lazy{real.__name__}"

    def __init__(
        self: Any,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: Any = None,
        dtype: Any = None,
        *,
        bias: bool = True,
    ) -> None:
        if affine and not bias:
            # (uopkit's BatchNorm and InstanceNorm scale and shift together)
            raise ArgumentError(f"{name}: bias=False (a weight without a bias) isn't supported; use affine=False")
        real.__init__(self, 0, eps, momentum, affine, track_running_stats)  # type: ignore[call-arg]
        self.affine, self.track_running_stats = affine, track_running_stats
        self._lazy_init(bias, device, dtype)
        self._set_size(0)

    def _built(self: Any, size: int) -> Module:
        return real(size, self.eps, self.momentum, self.affine, self.track_running_stats)  # type: ignore[call-arg]

    doc = f"""torch.nn.{name}: a {real.__name__} whose num_features is axis 1 of its first input."""
    return type(
        name,
        (_LazyNorm, real),
        {
            "__init__": __init__,
            "__doc__": doc,
            "_built": _built,
            "cls_to_become": real,
            "_unbatched_rank": unbatched_rank,
            "__module__": __name__,
        },
    )


LazyBatchNorm1d = _lazy_norm(layers.BatchNorm1d, 0)
LazyBatchNorm2d = _lazy_norm(layers.BatchNorm2d, 0)
LazyBatchNorm3d = _lazy_norm(layers.BatchNorm3d, 0)
LazyInstanceNorm1d = _lazy_norm(modules.InstanceNorm1d, 2)
LazyInstanceNorm2d = _lazy_norm(modules.InstanceNorm2d, 3)
LazyInstanceNorm3d = _lazy_norm(modules.InstanceNorm3d, 4)
