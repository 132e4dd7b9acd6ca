"""uopkit.nn's first layers (tinygrad's set and torch's basic ones): Modules holding Tensors as attributes;
`get_parameters` finds them.

>>> from uopkit import Tensor
>>> from uopkit.nn import Linear
>>> Linear(3, 2)(Tensor.ones(4, 3)).shape
(4, 2)
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from uopkit.dtype import DType, dtypes, to_dtype, to_numpy_dtype
from uopkit.engine.realize import run_together
from uopkit.nn.module import Module, Parameter, _as_parameter
from uopkit.tensor import ArgumentError, ShapeError, Tensor, is_grad_enabled, segments
from uopkit.tensor import autocast as _autocast
from uopkit.tensor.replay import replay_call
from uopkit.tensor.support import _conv_pads, _gradient_stored_once

__all__ = [
    "Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "RNNCell",
    "LSTMCell", "GRUCell", "BatchNorm", "LayerNorm", "GroupNorm",
    "InstanceNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "RMSNorm", "Embedding", "Sequential",
    "Dropout", "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Flatten", "Identity",
]  # fmt: skip


def _host(values: np.ndarray, dtype: DType | None = None, requires_grad: bool = True) -> Tensor:
    # parameters and state are built on the host into a fresh buffer of their own: lazy constants are hash-consed,
    # so two `Tensor.zeros(n)` would be one node and could end up sharing storage once realized. Parameters require
    # gradients from the start, as PyTorch's: `layer(x).sum().backward()` fills `layer.weight.grad` with no optimizer.
    # No dtype: the default float dtype read now, not at import (`dtypes.default_float = dtypes.float16` makes half
    # layers, as tinygrad's; torch's layers follow torch.set_default_dtype the same way)
    dtype = dtypes.default_float if dtype is None else dtype
    if dtype == dtypes.bfloat16:
        # numpy has no bfloat16: rounded once from float32 on the device, into a buffer of its own all the same
        t = _host(values, dtypes.float32, requires_grad=False).cast(dtype).contiguous().realize()
    else:
        t = Tensor(np.ascontiguousarray(values, dtype=to_numpy_dtype(dtype))).reshape(np.shape(values))
    t.requires_grad = requires_grad
    # a learned tensor is an nn.Parameter, as torch's layers hold them (`isinstance(p, nn.Parameter)` filters)
    return _as_parameter(t) if requires_grad else t


def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
    # U(-bound, bound), drawn from Tensor's seeded generator (Tensor.manual_seed makes it reproducible)
    return _host(Tensor._rng().uniform(-bound, bound, shape))


def _ntuple(x: int | Sequence[int], n: int, name: str, layer: str) -> tuple[int, ...]:
    if isinstance(x, int):
        return (x,) * n
    if len(x) != n:
        raise ValueError(f"{layer}: {name} must be an int or a sequence of {n}, got {x!r}")
    return tuple(int(v) for v in x)


def _pair(x: int | Sequence[int], name: str, layer: str) -> tuple[int, int]:
    a, b = _ntuple(x, 2, name, layer)
    return (a, b)


def _check_sizes(layer: str, **sizes: int) -> None:
    # a layer's sizes, checked before its weight is made: named after the layer and the argument (torch's says
    # "Trying to create tensor with negative dimension"; a bad size otherwise failed deep in the initializer)
    for name, size in sizes.items():
        if isinstance(size, (int, np.integer)) and size < 0:
            raise ArgumentError(f"{layer}: {name} must be >= 0, got {size}")


class Linear(Module):
    """y = x @ weight.T + bias, weight (out_features, in_features) initialized U(-1/sqrt(in), 1/sqrt(in)) as in PyTorch.

    >>> Linear(4, 2)(Tensor.ones(3, 4)).shape
    (3, 2)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        _check_sizes(f"Linear({in_features}, {out_features})", in_features=in_features, out_features=out_features)
        bound = 1 / math.sqrt(in_features) if in_features else 0.0
        self.in_features, self.out_features = in_features, out_features
        self.weight = _uniform((out_features, in_features), bound)
        self.bias = _uniform((out_features,), bound) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ShapeError(
                f"Linear({self.in_features}, {self.out_features}): input of shape {x.shape} doesn't "
                f"end in {self.in_features}"
            )
        # (one op with its bias: autocast computes both in its dtype)
        return x.linear(self.weight.T, self.bias)


class _ConvLayer(Module):
    # what the convolution layers share: the channel and group checks, and the input's shape (batched or not)
    spatial_dims = 2

    def _channels(self, in_channels: int, out_channels: int, groups: int, kernel_size: int | Sequence[int]) -> str:
        layer = type(self).__name__
        _check_sizes(layer, in_channels=in_channels, out_channels=out_channels)
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{layer}: in_channels {in_channels} and out_channels {out_channels} must be divisible "
                f"by groups {groups}"
            )
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _ntuple(kernel_size, self.spatial_dims, "kernel_size", layer)
        _check_sizes(layer, kernel_size=min(self.kernel_size))
        return layer

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim == 1 + self.spatial_dims and x.shape[0] == self.in_channels:
            # unbatched (C, ...), as torch's layers take it
            return self(x.unsqueeze(0)).squeeze(0)
        if x.ndim != 2 + self.spatial_dims or x.shape[1] != self.in_channels:
            spatial = ", ".join("DHW"[3 - self.spatial_dims :])
            raise ShapeError(
                f"{type(self).__name__}({self.in_channels}, {self.out_channels}): expected input (N, "
                f"{self.in_channels}, {spatial}), got {x.shape}"
            )
        return self._forward(x)

    def _forward(self, x: Tensor) -> Tensor:
        raise NotImplementedError


# torch's padding_mode names -> Tensor.pad's modes
_PADDING_MODES = {"zeros": "constant", "reflect": "reflect", "replicate": "replicate", "circular": "circular"}


class Conv2d(_ConvLayer):
    """2-D convolution over (N, C, H, W); weight (out, in // groups, kh, kw), PyTorch's default initialization.

    padding_mode "zeros" (default), "reflect", "replicate" or "circular": as torch's, the input is padded with that
    mode ("same" included), then convolved without padding.

    >>> Conv2d(1, 4, 3, padding=1)(Tensor.ones(2, 1, 8, 8)).shape
    (2, 4, 8, 8)
    >>> Conv2d(1, 1, 3, padding=1, padding_mode="circular", bias=False)(Tensor.ones(1, 1, 4, 4)).shape
    (1, 1, 4, 4)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] | str = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
    ) -> None:
        layer = self._channels(in_channels, out_channels, groups, kernel_size)
        if padding_mode not in _PADDING_MODES:
            raise ValueError(
                f"{layer}: padding_mode must be one of {', '.join(map(repr, _PADDING_MODES))}, got {padding_mode!r}"
            )
        # (as torch's layer keeps them: tuples, one per spatial axis; a padding given by name stays one)
        dims = self.spatial_dims
        self.stride, self.dilation = _ntuple(stride, dims, "stride", layer), _ntuple(dilation, dims, "dilation", layer)
        self.padding = padding if isinstance(padding, str) else _ntuple(padding, dims, "padding", layer)
        self.padding_mode, self.transposed, self.output_padding = padding_mode, False, (0,) * dims
        if isinstance(padding, str):
            # checked here, as torch's layer, not at the first forward
            if padding not in ("same", "valid"):
                raise ValueError(f"{layer}: padding must be an int, a sequence, 'same' or 'valid', got {padding!r}")
            if padding == "same" and any(s != 1 for s in _ntuple(stride, self.spatial_dims, "stride", layer)):
                raise ValueError(f"{layer}: padding='same' needs stride 1 (as PyTorch), got stride {stride}")
        fan_in = in_channels // groups * math.prod(self.kernel_size)
        bound = 1 / math.sqrt(fan_in)
        self.weight = _uniform((out_channels, in_channels // groups, *self.kernel_size), bound)
        self.bias = _uniform((out_channels,), bound) if bias else None

    def _forward(self, x: Tensor) -> Tensor:
        return self._conv_forward(x, self.weight, self.bias)

    def _conv_forward(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        """The layer's convolution of `x` with another weight and bias (torch's, which a subclass's forward calls
        with a standardized or masked weight)."""
        padding = self.padding
        if self.padding_mode != "zeros":
            layer = type(self).__name__
            pads = _conv_pads(padding, self.spatial_dims, self.kernel_size, self.dilation, layer)
            try:
                x = x.pad(((0, 0), (0, 0)) + pads, mode=_PADDING_MODES[self.padding_mode])
            except ShapeError as e:
                # (torch raises a RuntimeError too: reflect needs padding < size, circular padding <= size)
                raise ShapeError(
                    f"{layer}({self.in_channels}, {self.out_channels}): padding_mode={self.padding_mode!r} can't pad "
                    f"input {x.shape} by {padding!r}: {e}"
                ) from e
            padding = 0
        return x.conv2d(  # type: ignore[attr-defined]
            weight, bias, groups=self.groups, stride=self.stride, dilation=self.dilation, padding=padding
        )


class Conv1d(Conv2d):
    """1-D convolution over (N, C, L); weight (out, in // groups, k); see Conv2d.

    >>> Conv1d(2, 4, 3, padding=1)(Tensor.ones(1, 2, 8)).shape
    (1, 4, 8)
    """

    spatial_dims = 1


class Conv3d(Conv2d):
    """3-D convolution over (N, C, D, H, W); weight (out, in // groups, kd, kh, kw); see Conv2d.

    >>> Conv3d(1, 2, 3, padding=1)(Tensor.ones(1, 1, 4, 4, 4)).shape
    (1, 2, 4, 4, 4)
    """

    spatial_dims = 3


class ConvTranspose2d(_ConvLayer):
    """Transposed 2-D convolution; weight (in, out // groups, kh, kw), PyTorch's default initialization.

    >>> ConvTranspose2d(2, 3, 3, stride=2)(Tensor.ones(1, 2, 4, 4)).shape
    (1, 3, 9, 9)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: int | Sequence[int] = 1,
        padding_mode: str = "zeros",
    ) -> None:
        layer = self._channels(in_channels, out_channels, groups, kernel_size)
        if padding_mode != "zeros":
            # (torch's transposed convolutions have only this mode too)
            raise ValueError(f"{layer}: only padding_mode='zeros' is supported, got {padding_mode!r} (as PyTorch)")
        dims = self.spatial_dims
        self.stride, self.padding = _ntuple(stride, dims, "stride", layer), _ntuple(padding, dims, "padding", layer)
        self.dilation = _ntuple(dilation, dims, "dilation", layer)
        self.output_padding = _ntuple(output_padding, dims, "output_padding", layer)
        self.padding_mode, self.transposed = padding_mode, True
        fan_in = out_channels // groups * math.prod(self.kernel_size)
        bound = 1 / math.sqrt(fan_in)
        self.weight = _uniform((in_channels, out_channels // groups, *self.kernel_size), bound)
        self.bias = _uniform((out_channels,), bound) if bias else None

    def __call__(self, x: Tensor, output_size: Sequence[int] | None = None) -> Tensor:
        """`output_size`: the output's spatial size (or the whole shape), as torch's: it picks the output padding
        among the sizes a strided transposed convolution can give."""
        if output_size is None:
            return super().__call__(x)
        padding = self._output_padding_for(x, output_size)
        kept, self.output_padding = self.output_padding, padding
        try:
            return super().__call__(x)
        finally:
            self.output_padding = kept

    def _output_padding_for(self, x: Tensor, output_size: Sequence[int]) -> tuple[int, ...]:
        dims, layer = self.spatial_dims, type(self).__name__
        wanted = tuple(int(s) for s in output_size)[-dims:]
        if len(wanted) != dims:
            raise ValueError(f"{layer}: output_size must have {dims} or {dims + 2} entries, got {tuple(output_size)}")
        out = []
        for d, size in enumerate(wanted):
            n = x.shape[x.ndim - dims + d]
            least = (n - 1) * self.stride[d] - 2 * self.padding[d] + self.dilation[d] * (self.kernel_size[d] - 1) + 1
            most = least + max(self.stride[d], self.dilation[d]) - 1
            if not least <= size <= most:
                raise ValueError(
                    f"{layer}: output_size {wanted} can't be reached on spatial axis {d} of input {x.shape}: the "
                    "stride "
                    f"allows sizes {least} to {most} there"
                )
            out.append(size - least)
        return tuple(out)

    def _forward(self, x: Tensor) -> Tensor:
        return x.conv_transpose2d(  # type: ignore[attr-defined]
            self.weight,
            self.bias,
            groups=self.groups,
            stride=self.stride,
            dilation=self.dilation,
            padding=self.padding,
            output_padding=self.output_padding,
        )


class ConvTranspose1d(ConvTranspose2d):
    """Transposed 1-D convolution over (N, C, L); weight (in, out // groups, k).

    >>> ConvTranspose1d(2, 3, 3, stride=2)(Tensor.ones(1, 2, 4)).shape
    (1, 3, 9)
    """

    spatial_dims = 1


class ConvTranspose3d(ConvTranspose2d):
    """Transposed 3-D convolution over (N, C, D, H, W); weight (in, out // groups, kd, kh, kw).

    >>> ConvTranspose3d(1, 2, 2, stride=2)(Tensor.ones(1, 1, 2, 2, 2)).shape
    (1, 2, 4, 4, 4)
    """

    spatial_dims = 3


def _in_float32(layer: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """A normalization layer's call that, on a float16 or bfloat16 input, normalizes (and scales and shifts) in float32
    and rounds once, as torch's norms do: x * x in float16 overflows past 256 (a row of LayerNorm came out zeros) and
    each rounding on the way costs an ulp. The result has the input's dtype, also with float32 weights (mixed
    precision), as torch's norm layers."""

    @functools.wraps(layer)
    def call(self: Any, x: Tensor, *args: Any) -> Tensor:
        if not isinstance(x, Tensor) or x.dtype not in dtypes.halves:
            return layer(self, x, *args)
        # (half weights meet the float32 input as float32, exactly)
        return layer(self, x.cast(dtypes.float32), *args).cast(x.dtype)

    return call


def _normalize(x: Tensor, axes: tuple[int, ...], eps: float) -> Tensor:
    # (x - mean) / sqrt(biased var + eps) over `axes`, its graph recorded once per input signature and rebuilt over
    # each new input (`replay_call`): built op by op, a norm's ~20 tensor ops cost ~100 us of Python at every call
    return replay_call(_normalized, (x,), axes, eps)


def _normalized(x: Tensor, axes: tuple[int, ...], eps: float) -> Tensor:
    centered = x - x.mean(axes, keepdim=True)
    var = (centered * centered).mean(axes, keepdim=True)
    return centered * (var + eps).rsqrt()


def _shape_arg(shape: int | Sequence[int]) -> tuple[int, ...]:
    # a norm's normalized_shape: an int is one trailing axis
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(v) for v in shape)


def _scale_and_shift(shape: int | tuple[int, ...], affine: bool) -> tuple[Tensor | None, Tensor | None]:
    # a normalization's learned weight (ones) and bias (zeros), or neither
    return (_host(np.ones(shape)), _host(np.zeros(shape))) if affine else (None, None)


def _running_stats(n: int, track: bool) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    # a norm's running mean (zeros), variance (ones) and batch count, buffers marked requires_grad=False; or None for
    # each, as torch's (`bn.running_mean is None` is how code tells)
    if not track:
        return None, None, None
    count = _host(np.zeros(()), dtypes.int64, requires_grad=False)
    return _host(np.zeros(n), requires_grad=False), _host(np.ones(n), requires_grad=False), count


def _per_channel_affine(out: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    # out * weight + bias with one weight and bias per channel (axis 1 of (N, C, ...))
    if weight is None or bias is None:
        return out
    shape = (1, out.shape[1]) + (1,) * (out.ndim - 2)
    return out * weight.reshape(shape) + bias.reshape(shape)


class BatchNorm(Module):
    """Batch normalization over axis 1 of (N, C, ...): batch statistics in training mode, else running ones.

    The running statistics are updated in place (STORE) during training; an optimizer built from
    `get_parameters(model)` realizes them with each step.

    >>> bn = BatchNorm(3)
    >>> bn(Tensor.ones(2, 3, 4, 4)).shape
    (2, 3, 4, 4)
    """

    _version = 2  # (torch's _NormBase's: its version 2 added num_batches_tracked)

    def __init__(
        self,
        sz: int,
        eps: float = 1e-5,
        affine: bool = True,
        track_running_stats: bool = True,
        momentum: float | None = 0.1,
    ) -> None:
        self.sz, self.eps, self.momentum, self.track_running_stats = sz, eps, momentum, track_running_stats
        self.weight, self.bias = _scale_and_shift(sz, affine)
        self.running_mean, self.running_var, self.num_batches_tracked = _running_stats(sz, track_running_stats)

    def _fill_old_state(self, state_dict: dict[str, Any], prefix: str, local_metadata: dict[str, Any]) -> None:
        # a checkpoint from before torch's version 2 of the layer (torch < 0.4.1, or a hand-built or converted one,
        # with no `_metadata`) has no num_batches_tracked: the layer's own count stays, as torch's
        # _NormBase._load_from_state_dict fills it in
        version = local_metadata.get("version")
        if (version is None or version < 2) and self.track_running_stats:
            state_dict.setdefault(prefix + "num_batches_tracked", self.num_batches_tracked)

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.sz:
            raise ShapeError(f"BatchNorm({self.sz}): expected input (N, {self.sz}, ...), got {x.shape}")
        # checked before `_in_float32` casts a half input: PyTorch takes the layer's own dtype, or a half input into
        # float32 tensors (mixed precision), and refuses the rest
        own = self.weight if self.weight is not None else getattr(self, "running_mean", None)
        if own is not None and dtypes.is_float(x.dtype) and x.dtype != own.dtype:
            if not (x.dtype in dtypes.halves and own.dtype == dtypes.float32):
                raise TypeError(
                    f"BatchNorm({self.sz}): the input is {x.dtype}, the layer's tensors are {own.dtype}; cast the "
                    "input, or the layer (as PyTorch, which refuses mixed dtypes other than a half input into a "
                    "float32 layer)"
                )
        return self._batch_normalized(x)

    @_in_float32
    def _batch_normalized(self, x: Tensor) -> Tensor:
        axes = tuple(i for i in range(x.ndim) if i != 1)
        shape = (1, self.sz) + (1,) * (x.ndim - 2)
        if Tensor.training or not self.track_running_stats:
            if x.numel() == self.sz:
                # one value per channel: its variance is 0/0 (PyTorch raises too)
                raise ValueError(
                    f"BatchNorm({self.sz}): batch statistics need at least 2 values per channel, got input {x.shape}"
                )
            mean = x.mean(axes)
            centered = x - mean.reshape(shape)
            var = (centered * centered).mean(axes)
            if Tensor.training and self.track_running_stats:
                stats_dt = self.running_mean.dtype
                n = x.numel() // self.sz
                # the running variance is the unbiased one, as in PyTorch
                unbiased = var.detach() * (n / max(n - 1, 1))
                # momentum None: the running statistics are the plain average of every batch's, as PyTorch's
                m = self.momentum if self.momentum is not None else 1 / (self.num_batches_tracked + 1).float()
                self.running_mean.assign(((1 - m) * self.running_mean + m * mean.detach()).cast(stats_dt))
                self.running_var.assign(((1 - m) * self.running_var + m * unbiased).cast(stats_dt))
                self.num_batches_tracked.assign(self.num_batches_tracked + 1)
                # (the count, which reads nothing of the batch, is stored with the running statistics)
                run_together([self.running_mean, self.running_var, self.num_batches_tracked])
            out = centered * (var.reshape(shape) + self.eps).rsqrt()
            return _gradient_stored_once(_per_channel_affine(out, self.weight, self.bias))
        # (half running statistics read in float32, the input's dtype here: their rsqrt in half was an ulp off torch's)
        mean, var = self.running_mean.cast(x.dtype), self.running_var.cast(x.dtype)
        out = (x - mean.reshape(shape)) * (var.reshape(shape) + self.eps).rsqrt()
        return _per_channel_affine(out, self.weight, self.bias)


class LayerNorm(Module):
    """Normalize over the trailing `normalized_shape` axes, then scale and shift elementwise (bias=False: scale only,
    no `bias` in the state dict, as torch's).

    >>> LayerNorm(4)(Tensor.ones(2, 4)).shape
    (2, 4)
    >>> LayerNorm(4, bias=False).bias is None
    True
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
    ) -> None:
        self.normalized_shape = _shape_arg(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight, self.bias = _scale_and_shift(self.normalized_shape, elementwise_affine)
        if not bias:
            self.bias = None

    @_in_float32
    def __call__(self, x: Tensor) -> Tensor:
        n = len(self.normalized_shape)
        if x.shape[x.ndim - n :] != self.normalized_shape or x.ndim < n:
            raise ShapeError(
                f"LayerNorm({self.normalized_shape}): input of shape {x.shape} doesn't end in {self.normalized_shape}"
            )
        out = _normalize(x, tuple(range(x.ndim - n, x.ndim)), self.eps)
        if self.weight is not None:
            out = out * self.weight
        return out + self.bias if self.bias is not None else out


class GroupNorm(Module):
    """Split the channels (axis 1) into `num_groups` groups and normalize each group over its channels and positions.

    >>> GroupNorm(2, 4)(Tensor.ones(3, 4, 5)).shape
    (3, 4, 5)
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        if num_groups < 1 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels {num_channels} must be divisible by num_groups {num_groups}")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight, self.bias = _scale_and_shift(num_channels, affine)

    @_in_float32
    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ShapeError(
                f"GroupNorm({self.num_groups}, {self.num_channels}): expected input (N, "
                f"{self.num_channels}, ...), got {x.shape}"
            )
        # (the group size spelled out: -1 can't be inferred for an empty batch, which torch takes)
        grouped = x.reshape(x.shape[0], self.num_groups, math.prod(x.shape[1:]) // self.num_groups)
        return _per_channel_affine(_normalize(grouped, (2,), self.eps).reshape(x.shape), self.weight, self.bias)


class InstanceNorm(Module):
    """Normalize each sample's channels (axis 1) over their positions; per-channel scale and shift when `affine`
    (PyTorch's InstanceNorm2d with affine=True). With `track_running_stats`, training updates running_mean/running_var
    (the batch's mean of each instance's statistics) and eval normalizes by them, as torch's; momentum None leaves them
    as they are (torch passes 0.0). Any number of spatial axes: (N, C, ...), or
    an unbatched (C, L) as torch's InstanceNorm1d takes it; InstanceNorm1d/2d/3d know their dims (an unbatched
    (C, H, W) too) and default to affine=False, as torch's.

    >>> InstanceNorm(3)(Tensor.rand(2, 3, 4, 4)).shape
    (2, 3, 4, 4)
    """

    _version = 2  # (torch's _NormBase's)
    spatial_dims: int | None = None

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        affine: bool = True,
        track_running_stats: bool = False,
        momentum: float | None = 0.1,
    ) -> None:
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight, self.bias = _scale_and_shift(num_features, affine)
        # (num_batches_tracked for torch's state dict only: torch's InstanceNorm never counts)
        self.running_mean, self.running_var, self.num_batches_tracked = _running_stats(
            num_features, track_running_stats
        )

    def __call__(self, x: Tensor) -> Tensor:
        name, dims = f"{type(self).__name__}({self.num_features})", self.spatial_dims
        if dims is not None and x.ndim not in (dims + 1, dims + 2):
            raise ShapeError(f"{name}: expected a {dims + 1}-d or {dims + 2}-d input, got {x.shape}")
        if x.ndim == (2 if dims is None else dims + 1):
            # unbatched (C, ...): a batch of 1, as torch's
            return self(x.unsqueeze(0)).squeeze(0)
        per_channel = self.weight is not None or self.track_running_stats
        if x.ndim < 3 or (x.shape[1] != self.num_features and per_channel):
            raise ShapeError(f"{name}: expected input (N, {self.num_features}, ...), got {x.shape}")
        if x.shape[1] != self.num_features:
            # (torch only warns here: without affine weights or running statistics num_features is unused)
            warnings.warn(f"{name}: input {x.shape} doesn't have {self.num_features} channels", stacklevel=2)
        if math.prod(x.shape[2:]) == 1 and self._input_stats():
            # one value per instance: its variance is 0/0, and torch refuses it (unless it uses running statistics)
            raise ValueError(
                f"{name}: needs at least 2 spatial positions per channel to take a variance, got input {x.shape}"
            )
        return self._normalized(x)

    def _input_stats(self) -> bool:
        # each instance's own statistics, or (eval with tracked ones) the running statistics, as torch's
        return Tensor.training or not self.track_running_stats

    @_in_float32
    def _normalized(self, x: Tensor) -> Tensor:
        axes, shape = tuple(range(2, x.ndim)), (1, x.shape[1]) + (1,) * (x.ndim - 2)
        if not self._input_stats():
            out = (x - self.running_mean.reshape(shape)) * (self.running_var.reshape(shape) + self.eps).rsqrt()
            return _per_channel_affine(out, self.weight, self.bias)
        if self.track_running_stats and self.momentum:
            m, stats_dt, seen = self.momentum, self.running_mean.dtype, x.detach()
            # the batch's mean of the instances' means and unbiased variances (torch's batch_norm over N * C channels)
            mean, var = seen.mean(axes).mean(0), seen.var(axes, correction=1).mean(0)
            self.running_mean.assign(((1 - m) * self.running_mean + m * mean).cast(stats_dt))
            self.running_var.assign(((1 - m) * self.running_var + m * var).cast(stats_dt))
        return _per_channel_affine(_normalize(x, axes, self.eps), self.weight, self.bias)


class InstanceNorm1d(InstanceNorm):
    """torch.nn.InstanceNorm1d: (N, C, L) or unbatched (C, L); affine=False by default.

    >>> InstanceNorm1d(3)(Tensor.rand(3, 5)).shape
    (3, 5)
    """

    spatial_dims = 1

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
    ) -> None:
        super().__init__(num_features, eps, affine, track_running_stats, momentum)


class InstanceNorm2d(InstanceNorm1d):
    """torch.nn.InstanceNorm2d: (N, C, H, W) or unbatched (C, H, W); affine=False by default.

    >>> InstanceNorm2d(3)(Tensor.rand(3, 4, 5)).shape
    (3, 4, 5)
    """

    spatial_dims = 2


class InstanceNorm3d(InstanceNorm1d):
    """torch.nn.InstanceNorm3d: (N, C, D, H, W) or unbatched (C, D, H, W); affine=False by default.

    >>> InstanceNorm3d(2)(Tensor.rand(1, 2, 3, 4, 5)).shape
    (1, 2, 3, 4, 5)
    """

    spatial_dims = 3


# the gap between 1 and the next float (torch.finfo(dtype).eps) of the dtype a norm computes in: float32 for half floats
_MACHINE_EPS = {dtypes.float32: 2.0**-23, dtypes.float64: 2.0**-52}


class RMSNorm(Module):
    """x / sqrt(mean(x * x over the trailing `normalized_shape` axes) + eps), times a learned scale of that shape
    (PyTorch's RMSNorm; an int is the last axis).

    >>> RMSNorm(4)(Tensor.ones(2, 4)).tolist()
    [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]
    >>> RMSNorm((2, 4)).weight.shape
    (2, 4)
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int] | None = None,
        eps: float | None = None,
        elementwise_affine: bool = True,
        *,
        dim: int | None = None,
    ) -> None:
        # (`dim`: tinygrad's name for a one-axis size)
        if (normalized_shape is None) == (dim is None):
            raise TypeError("RMSNorm: give normalized_shape (torch's name) or dim (tinygrad's), one of them")
        # eps None: the machine epsilon of the dtype it computes in (float32 for half floats), as PyTorch's
        self.normalized_shape, self.eps = _shape_arg(normalized_shape if normalized_shape is not None else dim), eps
        # (tinygrad's name for the one-axis size)
        self.dim = self.normalized_shape[-1] if self.normalized_shape else 1
        self.weight = _host(np.ones(self.normalized_shape)) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        n = len(self.normalized_shape)
        if x.ndim < n or x.shape[x.ndim - n :] != self.normalized_shape:
            shape = self.normalized_shape[0] if n == 1 else self.normalized_shape
            raise ShapeError(f"RMSNorm({shape}): input of shape {x.shape} doesn't end in {shape}")
        eps = self.eps if self.eps is not None else _MACHINE_EPS.get(x.dtype, _MACHINE_EPS[dtypes.float32])
        return self._scaled(x, eps)

    @_in_float32
    def _scaled(self, x: Tensor, eps: float) -> Tensor:
        axes = tuple(range(x.ndim - len(self.normalized_shape), x.ndim))
        out = x * ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
        return out * self.weight if self.weight is not None else out


def _renorm_looked_up_rows(input: Tensor, weight: Tensor, max_norm: float, norm_type: float) -> None:
    # the rows of weight that input looks up and whose norm exceeds max_norm are scaled down to it in weight itself,
    # outside autograd, as torch's embedding_renorm_; the rows used counted by a scatter, not a one-hot mask of every
    # index against every row (an index out of range is dropped: the lookup raises for it)
    flat = input.flatten()
    ones = Tensor.ones(flat.shape, dtype=dtypes.int32, device=flat.device)
    used = segments.added_at(flat, ones, weight.shape[0]).unsqueeze(-1) > 0
    norms = weight.detach().vector_norm(norm_type, -1, keepdim=True)
    scale = (used & (norms > max_norm)).where(max_norm / (norms + 1e-7), 1.0)
    weight.detach().mul_(scale.cast(weight.dtype))


class Embedding(Module):
    """A lookup table, as torch.nn.Embedding: integer indices of any shape -> rows of `weight` (num_embeddings,
    embedding_dim), N(0, 1) initialized (tinygrad's `Embedding(vocab_size, embed_size)` is the same call, and
    `vocab_size`/`embed_size` the same sizes). The row at `padding_idx` (a padding token) starts as zeros and gets no
    gradient. `max_norm`: each looked-up row whose `norm_type`-norm exceeds it is scaled down to it in the weight
    itself, outside autograd, before the lookup (torch's). `scale_grad_by_freq`: each row's gradient is divided by how
    often its index occurs in the batch. `sparse=True` is accepted and gives a dense gradient (there are no sparse
    tensors; every optimizer takes it). `_weight` is used as the weight (a Parameter showing its storage, as torch's),
    frozen with `_freeze`.

    >>> Embedding(10, 3)(Tensor([[1, 2], [3, 4]])).shape
    (2, 2, 3)
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight: Tensor | None = None,
        _freeze: bool = False,
        device: str | None = None,
        dtype: DType | str | None = None,
    ) -> None:
        layer = f"Embedding({num_embeddings}, {embedding_dim})"
        _check_sizes(layer, num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"{layer}: padding_idx {padding_idx} is out of range")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        # (tinygrad's names for the two sizes)
        self.vocab_size, self.embed_size = num_embeddings, embedding_dim
        if _weight is not None:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError(
                    f"{layer}: _weight must have shape {(num_embeddings, embedding_dim)}, got {tuple(_weight.shape)}"
                )
            # used as it is, the padding row included (torch's); `device` and `dtype` are for a new weight only
            self.weight: Tensor = Parameter(_weight, requires_grad=not _freeze)
            return
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if not dtypes.is_float(dt):
            raise TypeError(f"{layer}: dtype must be a float dtype, got {dt}")
        table = Tensor._rng().standard_normal((num_embeddings, embedding_dim))
        if padding_idx is not None:
            table[padding_idx] = 0
        weight = _host(table, dt, requires_grad=False)
        if device is not None:
            # built on the host as the other layers' parameters, then moved
            weight = weight.to(device=device).realize()
        weight.requires_grad = not _freeze
        # (a Parameter, so that a frozen one stays a parameter: a plain tensor that requires no gradient is a buffer)
        self.weight = _as_parameter(weight)

    @classmethod
    def from_pretrained(
        cls,
        embeddings: Tensor,
        freeze: bool = True,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
    ) -> Embedding:
        """An Embedding whose weight is `embeddings` (num_embeddings, embedding_dim), trained unless `freeze`, as
        torch.nn.Embedding.from_pretrained (the weight shows a realized tensor's storage, as torch's Parameter does;
        the padding row is left as it is).

        >>> emb = Embedding.from_pretrained(Tensor([[1.0, 2.0], [3.0, 4.0]]))
        >>> emb(Tensor([1, 1])).tolist(), emb.weight.requires_grad
        ([[3.0, 4.0], [3.0, 4.0]], False)
        """
        if not isinstance(embeddings, Tensor) or embeddings.ndim != 2:
            got = f"shape {embeddings.shape}" if isinstance(embeddings, Tensor) else type(embeddings).__name__
            raise ValueError(f"Embedding.from_pretrained: embeddings must be a 2-D Tensor, got {got}")
        rows, cols = embeddings.shape
        options = (padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)
        return cls(rows, cols, *options, _weight=embeddings, _freeze=freeze)

    def __call__(self, idx: Tensor | Sequence | np.ndarray) -> Tensor:
        name = f"Embedding({self.num_embeddings}, {self.embedding_dim})"
        if not isinstance(idx, Tensor):
            arr = np.asarray(idx)
            bad = arr[(arr < 0) | (arr >= self.num_embeddings)]
            if bad.size:
                raise IndexError(f"{name}: index {int(bad.flat[0])} is out of range [0, {self.num_embeddings})")
            idx = Tensor(arr.astype(np.int32))
        if not dtypes.is_int(idx.dtype):
            raise TypeError(f"Embedding: indices must be integers, got {idx.dtype}")
        # the rows gathered (one load per lookup: a one-hot matrix times the table was a pass over the whole table per
        # lookup, 140 ms for 2048 lookups in 30000 rows); indices checked as torch's, negative ones included
        self.weight._check_index_range(idx, self.num_embeddings, 0, name, negative=False)
        if self.max_norm is not None:
            _renorm_looked_up_rows(idx, self.weight, self.max_norm, self.norm_type)
        rows = self.weight._advanced_index([(0, idx)])
        if self.scale_grad_by_freq and self.weight._requires_grad and is_grad_enabled():
            # each row's gradient divided by how often its index occurs in the batch, as torch's (the value is
            # untouched: rows - rows.detach() is 0); with no gradient to scale, the counts aren't computed
            counts = idx.flatten().one_hot(self.num_embeddings).sum(0).cast(rows.dtype)
            rows = rows.detach() + (rows - rows.detach()) / counts._advanced_index([(0, idx)]).unsqueeze(-1)
        if self.padding_idx is None:
            return rows
        # the padding row is read without a gradient
        return (idx == self.padding_idx).unsqueeze(-1).where(rows.detach(), rows)

    def extra_repr(self) -> str:
        # torch's: the sizes, then the options that differ from their defaults
        options = [f"{self.num_embeddings}, {self.embedding_dim}"]
        if self.padding_idx is not None:
            options.append(f"padding_idx={self.padding_idx}")
        if self.max_norm is not None:
            options.append(f"max_norm={self.max_norm}")
        if self.norm_type != 2:
            options.append(f"norm_type={self.norm_type}")
        if self.scale_grad_by_freq:
            options.append("scale_grad_by_freq=True")
        if self.sparse:
            options.append("sparse=True")
        return ", ".join(options)


def _check_weight_dtype(layer: Module, weight: Tensor, x: Tensor, what: str) -> None:
    """torch's rule for a recurrent layer or cell: an input or state of another dtype than the weights is an error
    outside autocast (its matmul refuses mixed dtypes), not promoted (float64 steps, silently)."""
    if x.dtype != weight.dtype and _autocast.enabled_dtype(_autocast.device_type(x.device)) is None:
        raise ArgumentError(
            f"{type(layer).__name__}: {what} dtype ({x.dtype}) does not match weight dtype ({weight.dtype}). "
            f"Convert {what}: {what}.to({weight.dtype}), or convert the model: model.to({x.dtype})"
        )


class _RecurrentCell(Module):
    # weight_ih (gates * hidden, input), weight_hh (gates * hidden, hidden), biases (gates * hidden,): PyTorch's
    # layout and initialization, U(-1/sqrt(hidden), 1/sqrt(hidden))
    gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
        bound = 1 / math.sqrt(hidden_size) if hidden_size else 0.0
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight_ih = _uniform((self.gates * hidden_size, input_size), bound)
        self.weight_hh = _uniform((self.gates * hidden_size, hidden_size), bound)
        self.bias_ih = _uniform((self.gates * hidden_size,), bound) if bias else None
        self.bias_hh = _uniform((self.gates * hidden_size,), bound) if bias else None

    def _check(self, x: Tensor) -> None:
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ShapeError(
                f"{type(self).__name__}({self.input_size}, {self.hidden_size}): expected input (N, {self.input_size}) "
                f"or ({self.input_size},), got {x.shape}"
            )
        self._check_dtype(x, "input")

    def _check_dtype(self, x: Tensor, what: str) -> None:
        _check_weight_dtype(self, self.weight_ih, x, what)

    # (not `_state`: that is Module's bookkeeping, which every owner and train()/eval() call)
    def _checked_state(self, x: Tensor, h: Tensor | None, what: str) -> Tensor:
        """`h` checked as a state for input `x` (torch's names: hidden0 is h, hidden1 LSTMCell's c); zeros if None."""
        if h is None:
            return Tensor.zeros(*x.shape[:-1], self.hidden_size, device=x.device, dtype=x.dtype)
        name = type(self).__name__
        if not isinstance(h, Tensor):
            raise TypeError(f"{name}: {what} must be a Tensor, got {type(h).__name__}")
        if h.ndim != x.ndim:
            form = "a batched (N, H)" if x.ndim == 2 else "an unbatched (H,)"
            raise ShapeError(f"{name}: {what} must be {form} state for an input of shape {x.shape}, got {h.shape}")
        if h.shape[-1] != self.hidden_size:
            raise ShapeError(
                f"{name}: {what} has inconsistent hidden_size: got {h.shape[-1]}, expected {self.hidden_size}"
            )
        if h.shape[:-1] != x.shape[:-1]:
            raise ShapeError(f"{name}: input batch size {x.shape[0]} doesn't match {what} batch size {h.shape[0]}")
        self._check_dtype(h, what)
        return h

    def _projections(self, x: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        gi, gh = x @ self.weight_ih.T, h @ self.weight_hh.T
        if self.bias_ih is not None and self.bias_hh is not None:
            gi, gh = gi + self.bias_ih, gh + self.bias_hh
        return gi, gh


class RNNCell(_RecurrentCell):
    """h' = tanh(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh) (or relu), as torch.nn.RNNCell.

    >>> RNNCell(3, 2)(Tensor.ones(4, 3)).shape
    (4, 2)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh") -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        super().__init__(input_size, hidden_size, bias)
        self.nonlinearity = nonlinearity

    def __call__(self, x: Tensor, h: Tensor | None = None) -> Tensor:
        self._check(x)
        gi, gh = self._projections(x, self._checked_state(x, h, "hidden0"))
        return (gi + gh).tanh() if self.nonlinearity == "tanh" else (gi + gh).relu()


class LSTMCell(_RecurrentCell):
    """One LSTM step, as torch.nn.LSTMCell: gates in PyTorch's order (input, forget, cell, output); returns (h', c').

    >>> [t.shape for t in LSTMCell(3, 2)(Tensor.ones(4, 3))]
    [(4, 2), (4, 2)]
    """

    gates = 4

    def __call__(self, x: Tensor, state: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        self._check(x)
        if state is not None and (not isinstance(state, tuple | list) or len(state) != 2):
            raise TypeError("LSTMCell: the state must be a tuple (h, c)")
        h, c = (None, None) if state is None else state
        h, c = self._checked_state(x, h, "hidden0"), self._checked_state(x, c, "hidden1")
        gi, gh = self._projections(x, h)
        i, f, g, o = (gi + gh).chunk(4, -1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        return o.sigmoid() * c.tanh(), c


class GRUCell(_RecurrentCell):
    """One GRU step, as torch.nn.GRUCell: gates (reset, update, new), n = tanh(gi_n + r * gh_n).

    >>> GRUCell(3, 2)(Tensor.ones(4, 3)).shape
    (4, 2)
    """

    gates = 3

    def __call__(self, x: Tensor, h: Tensor | None = None) -> Tensor:
        self._check(x)
        h = self._checked_state(x, h, "hidden0")
        gi, gh = self._projections(x, h)
        ir, iz, inn = gi.chunk(3, -1)
        hr, hz, hn = gh.chunk(3, -1)
        r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
        n = (inn + r * hn).tanh()
        return (1 - z) * n + z * h


class Sequential(Module):
    """Call each layer in turn on the result of the previous one, as torch.nn.Sequential. The layers are attributes
    named "0", "1", ... (or by the keys of a dict passed alone), so the state dict's keys are torch's ("0.weight",
    "2.bias") and a torch Sequential's state dict loads as it is. A plain callable (`Tensor.relu`, a lambda) is a
    layer too, as in tinygrad's `x.sequential([...])`; torch asks for a module there.

    >>> from uopkit.nn.state import get_state_dict
    >>> model = Sequential(Linear(3, 4), Tensor.relu, Linear(4, 2))
    >>> model(Tensor.ones(5, 3)).shape, len(model), sorted(get_state_dict(model))
    ((5, 2), 3, ['0.bias', '0.weight', '2.bias', '2.weight'])
    """

    # The instance's attributes are its layers and nothing else (`_entries`, which leaves out the module's bookkeeping):
    # get_state_dict names them by attribute

    def __init__(self, *layers: Callable[..., Any] | dict[str, Callable[..., Any]]) -> None:
        # made in training mode, as torch's (its layers take the mode): a bare `Sequential(BatchNorm1d(3), ...)`
        # model trains until `eval()`
        super().__init__()
        if len(layers) == 1 and isinstance(layers[0], dict):
            for name, layer in layers[0].items():
                self._add(name, layer)
        else:
            for each in layers:
                self.append(each)  # type: ignore[arg-type]

    def _add(self, name: str, layer: Callable[..., Any]) -> None:
        if not isinstance(name, str) or not name or "." in name or name.startswith("_"):
            raise ValueError(
                f"Sequential: layer name {name!r} must be a non-empty string without '.' and not starting with '_'"
            )
        if name in vars(self):
            raise ValueError(f"Sequential: two layers named {name!r}")
        if hasattr(type(self), name):
            raise ValueError(f"Sequential: a layer can't be named {name!r}, an attribute of the container")
        if not callable(layer):
            raise TypeError(
                f"Sequential: layer {name} is a {type(layer).__name__}, which can't be called; pass layers or "
                "functions of a Tensor such as Tensor.relu"
            )
        setattr(self, name, layer)

    def append(self, layer: Callable[..., Any]) -> Sequential:
        """Add a layer at the end, named by its position (torch's append)."""
        self._add(str(len(self)), layer)
        return self

    def __call__(self, x: Any) -> Any:
        for layer in self:
            x = layer(x)
        return x

    def __len__(self) -> int:
        return sum(1 for _ in self._entries())

    def __iter__(self) -> Iterator[Callable[..., Any]]:
        return iter([layer for _, layer in self._entries()])

    def __getitem__(self, idx: int | slice) -> Any:
        items = list(self._entries())
        if isinstance(idx, slice):
            # the layers keep their names, as torch's slice does ("1.weight" stays "1.weight")
            return Sequential(dict(items[idx]))
        if not -len(items) <= idx < len(items):
            raise IndexError(f"Sequential: index {idx} is out of range for {len(items)} layers")
        return items[idx][1]

    def _index(self, idx: int) -> int:
        n = len(self)
        if not isinstance(idx, (int, np.integer)) or isinstance(idx, bool):
            raise TypeError(f"Sequential: an index must be an int, got {type(idx).__name__}")
        if not -n <= idx < n:
            raise IndexError(f"Sequential: index {idx} is out of range for {n} layers")
        return int(idx) % n

    def _renumbered(self, layers: list[Callable[..., Any]]) -> None:
        # the layers named "0", "1", ... in this order, as torch's Sequential after a delete or an insert
        for name, _ in list(self._entries()):
            delattr(self, name)
        for layer in layers:
            self.append(layer)

    def __setitem__(self, idx: int, layer: Callable[..., Any]) -> None:
        """Replace the layer at `idx` under its name (`model.classifier[1] = Linear(...)`: fine-tuning's idiom)."""
        name = list(self._entries())[self._index(idx)][0]
        if not callable(layer):
            raise TypeError(f"Sequential: layer {name} is a {type(layer).__name__}, which can't be called")
        setattr(self, name, layer)

    def __delitem__(self, idx: int | slice) -> None:
        """Remove a layer (or a slice of them); the rest are numbered again from "0", as torch's."""
        layers = [layer for _, layer in self._entries()]
        if isinstance(idx, slice):
            del layers[idx]
        else:
            del layers[self._index(idx)]
        self._renumbered(layers)

    def insert(self, index: int, layer: Callable[..., Any]) -> Sequential:
        """Insert a layer before position `index` (torch's insert: -len <= index <= len); the layers are numbered
        again."""
        n = len(self)
        if not -n <= index <= n:
            raise IndexError(f"Sequential.insert: index {index} is out of range for {n} layers")
        layers = [layer for _, layer in self._entries()]
        layers.insert(index % (n + 1) if index < 0 else index, layer)
        self._renumbered(layers)
        return self

    def extend(self, layers: Iterable[Callable[..., Any]]) -> Sequential:
        """Append every layer of `layers` (a Sequential or any iterable of layers)."""
        for layer in list(layers):
            self.append(layer)
        return self

    def pop(self, idx: int | slice) -> Any:
        """Remove and return the layer at `idx` (torch's pop)."""
        layer = self[idx]
        del self[idx]
        return layer

    def __add__(self, other: Sequential) -> Sequential:
        if not isinstance(other, Sequential):
            raise TypeError(f"Sequential: can only add another Sequential, got {type(other).__name__}")
        return Sequential(*self, *other)

    def __iadd__(self, other: Sequential) -> Sequential:
        if not isinstance(other, Sequential):
            raise TypeError(f"Sequential: can only add another Sequential, got {type(other).__name__}")
        return self.extend(other)

    def __mul__(self, times: int) -> Sequential:
        if not isinstance(times, int) or isinstance(times, bool) or times <= 0:
            raise ValueError(f"Sequential: can only be multiplied by a positive int, got {times!r}")
        # (the same layer objects, repeated, as torch's)
        return Sequential(*(list(self) * times))

    __rmul__ = __mul__

    def __repr__(self) -> str:
        # each layer's own repr, indented, as torch's (nested blocks show their layers); a plain function by its name
        inner = ""
        for k, v in self._entries():
            text = repr(v) if isinstance(v, Module) else getattr(v, "__name__", None) or type(v).__name__
            inner += f"\n  ({k}): " + text.replace("\n", "\n  ")
        return f"Sequential({inner}\n)" if inner else "Sequential()"


class Dropout(Module):
    """Zero each element with probability p and scale the rest by 1 / (1 - p) in training mode (a new layer's, until
    `.eval()`, as torch's); the input itself in eval mode.

    >>> Dropout(0.5).eval()(Tensor.ones(3)).tolist()
    [1.0, 1.0, 1.0]
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be a probability in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def __call__(self, x: Tensor) -> Tensor:
        if self.inplace and Tensor.training:
            return x._update_in_place(lambda: x.dropout(self.p), "dropout_")
        return x.dropout(self.p)


class ReLU(Module):
    """max(x, 0) as a layer (torch.nn.ReLU; inplace=True writes into x, as x.relu_()).

    >>> ReLU()(Tensor([-1.0, 2.0])).tolist()
    [0.0, 2.0]
    """

    def __init__(self, inplace: bool = False) -> None:
        self.inplace = inplace

    def __call__(self, x: Tensor) -> Tensor:
        return x.relu_() if self.inplace else x.relu()  # type: ignore[attr-defined]


class GELU(Module):
    """x * Phi(x) as a layer; approximate "none" (exact, erf) or "tanh", as torch.nn.GELU.

    >>> GELU()(Tensor([0.0])).tolist()
    [0.0]
    """

    def __init__(self, approximate: str = "none") -> None:
        if approximate not in ("none", "tanh"):
            # (torch's raises this at the first call)
            raise ArgumentError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def __call__(self, x: Tensor) -> Tensor:
        return x.gelu(approximate=self.approximate)


class SiLU(Module):
    """x * sigmoid(x) as a layer (torch.nn.SiLU; inplace=True writes into x).

    >>> SiLU()(Tensor([0.0])).tolist()
    [0.0]
    """

    def __init__(self, inplace: bool = False) -> None:
        self.inplace = inplace

    def __call__(self, x: Tensor) -> Tensor:
        return x._update_in_place(x.silu, "silu_") if self.inplace else x.silu()


class Tanh(Module):
    """tanh as a layer (torch.nn.Tanh).

    >>> Tanh()(Tensor([0.0])).tolist()
    [0.0]
    """

    def __call__(self, x: Tensor) -> Tensor:
        return x.tanh()


class Sigmoid(Module):
    """1 / (1 + exp(-x)) as a layer (torch.nn.Sigmoid).

    >>> Sigmoid()(Tensor([0.0])).tolist()
    [0.5]
    """

    def __call__(self, x: Tensor) -> Tensor:
        return x.sigmoid()


class Flatten(Module):
    """Flatten axes start_dim..end_dim into one; by default all but the batch axis (torch.nn.Flatten).

    >>> Flatten()(Tensor.ones(2, 3, 4)).shape
    (2, 12)
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        self.start_dim, self.end_dim = start_dim, end_dim

    def __call__(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)


class Identity(Module):
    """Its input, unchanged; takes (and ignores) any arguments, as torch.nn.Identity.

    >>> Identity(54, unused="x")(Tensor([1.0])).tolist()
    [1.0]
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, x: Any) -> Any:
        return x
