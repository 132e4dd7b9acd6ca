"""torch.nn.functional's convolutions, pools, normalizations, linear maps, lookups, attention, distances and
resampling over Tensor methods (re-exported by uopkit.nn.functional)."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from uopkit.dtype import dtypes, least_upper_dtype
from uopkit.nn.attention.bias import CausalBias
from uopkit.nn.functional.arguments import _check_rank, _ntuple, _pool_window, _tensor_input
from uopkit.nn.modules import _MACHINE_EPS, _renorm_looked_up_rows
from uopkit.nn.pooling import AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d
from uopkit.nn.sequence import multi_head_attention_forward as multi_head_attention_forward
from uopkit.nn.spatial import _frequency_scaled
from uopkit.tensor import ArgumentError, ShapeError, Tensor
from uopkit.tensor.autocast import FLOAT32, GPU, autocast_op
from uopkit.tensor.resample import UnsupportedRankError
from uopkit.tensor.support import _check_same_device

__all__ = [
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "conv_tbc", "unfold",
    "fold", "avg_pool1d", "avg_pool2d", "avg_pool3d", "max_pool1d", "max_pool2d", "max_pool3d",
    "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices", "max_unpool1d", "max_unpool2d",
    "max_unpool3d", "lp_pool1d", "lp_pool2d", "lp_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
    "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices",
    "batch_norm", "instance_norm", "layer_norm", "rms_norm", "group_norm", "local_response_norm", "normalize", "linear",
    "bilinear", "embedding", "embedding_bag", "one_hot", "scaled_dot_product_attention", "multi_head_attention_forward",
    "cosine_similarity",
    "pairwise_distance", "pdist", "pad", "interpolate", "upsample", "upsample_nearest", "upsample_bilinear",
    "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle", "grid_sample", "affine_grid",
]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# convolutions


def _check_conv(x: Tensor, weight: Tensor, n: int, fn: str) -> None:
    if not isinstance(weight, Tensor) or weight.ndim != n + 2 or x.ndim not in (n + 1, n + 2):
        shape = weight.shape if isinstance(weight, Tensor) else type(weight).__name__
        raise ShapeError(
            f"{fn}: expected a {n + 1}-d or {n + 2}-d input and a {n + 2}-d weight, got {x.shape}, {shape}"
        )


@_tensor_input
def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv1d (padding may be 'same' or 'valid')."""
    _check_conv(input, weight, 1, "conv1d")
    return input.conv1d(weight, bias, stride, padding, dilation, groups)


@_tensor_input
def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv2d (padding may be 'same' or 'valid')."""
    _check_conv(input, weight, 2, "conv2d")
    return input.conv2d(weight, bias, stride, padding, dilation, groups)


@_tensor_input
def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv3d (padding may be 'same' or 'valid')."""
    _check_conv(input, weight, 3, "conv3d")
    return input.conv3d(weight, bias, stride, padding, dilation, groups)


@_tensor_input
def conv_transpose1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,
    dilation=1,
) -> Tensor:
    """torch.nn.functional.conv_transpose1d."""
    _check_conv(input, weight, 1, "conv_transpose1d")
    return input.conv_transpose2d(weight, bias, stride, padding, output_padding, groups, dilation)


@_tensor_input
def conv_transpose2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,
    dilation=1,
) -> Tensor:
    """torch.nn.functional.conv_transpose2d."""
    _check_conv(input, weight, 2, "conv_transpose2d")
    return input.conv_transpose2d(weight, bias, stride, padding, output_padding, groups, dilation)


@_tensor_input
def conv_transpose3d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,
    dilation=1,
) -> Tensor:
    """torch.nn.functional.conv_transpose3d."""
    _check_conv(input, weight, 3, "conv_transpose3d")
    return input.conv_transpose2d(weight, bias, stride, padding, output_padding, groups, dilation)


@_tensor_input
def conv_tbc(input: Tensor, weight: Tensor, bias: Tensor, pad: int = 0) -> Tensor:
    """torch.nn.functional.conv_tbc: a 1-d convolution of (time, batch, channels) by weight (k, C_in, C_out)."""
    if input.ndim != 3 or weight.ndim != 3:
        raise ShapeError(f"conv_tbc: expected a 3-d input (T, B, C) and weight (k, C_in, C_out), got {input.shape}")
    out = input.permute((1, 2, 0)).conv1d(weight.permute((2, 1, 0)), bias, padding=pad)
    return out.permute((2, 0, 1))


@_tensor_input
def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """torch.nn.functional.unfold (im2col): (N, C, H, W) -> (N, C * kh * kw, L), each sliding block a column."""
    if input.ndim == 3:
        return unfold(input.unsqueeze(0), kernel_size, dilation, padding, stride).squeeze(0)
    if input.ndim != 4:
        raise ShapeError(f"unfold: expected input (N, C, H, W) or (C, H, W), got shape {input.shape}")
    k, d = _ntuple(kernel_size, 2, "kernel_size", "unfold"), _ntuple(dilation, 2, "dilation", "unfold")
    p, s = _ntuple(padding, 2, "padding", "unfold"), _ntuple(stride, 2, "stride", "unfold")
    if min(k + d + s) < 1 or min(p) < 0:
        raise ArgumentError(f"unfold: kernel_size, dilation and stride must be >= 1, padding >= 0, got {k, d, p, s}")
    x = input.pad(((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    for axis in (2, 3):
        span = d[axis - 2] * (k[axis - 2] - 1) + 1
        if x.shape[axis] < span:
            raise ShapeError(f"unfold: kernel {k} (dilation {d}) is larger than the padded input {x.shape}")
        # each window of the axis as a new last axis, its taps `dilation` apart
        x = x.unfold(axis, span, s[axis - 2])[..., :: d[axis - 2]]
    n, c, oh, ow = x.shape[:4]
    return x.permute((0, 1, 4, 5, 2, 3)).reshape(n, c * k[0] * k[1], oh * ow)


@_tensor_input
def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """torch.nn.functional.fold (col2im)."""
    return input.fold(output_size, kernel_size, dilation, padding, stride)


# ---------------------------------------------------------------------------------------------------------------------
# pooling: the Tensor's pools pool as many trailing axes as the kernel has sizes


def _avg_pool(
    n: int, fn: str, x: Tensor, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor
) -> Tensor:
    k, s, p, _ = _pool_window(fn, n, x, kernel_size, stride, padding)
    if divisor is not None and (not isinstance(divisor, int) or divisor <= 0):
        raise ArgumentError(f"{fn}: divisor_override must be a positive int, got {divisor!r}")
    return x.avg_pool2d(k, s, p, ceil_mode, count_include_pad, divisor)


@_tensor_input
def avg_pool1d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True) -> Tensor:
    """torch.nn.functional.avg_pool1d."""
    return _avg_pool(1, "avg_pool1d", input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


@_tensor_input
def avg_pool2d(
    input: Tensor, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
) -> Tensor:
    """torch.nn.functional.avg_pool2d."""
    args = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    return _avg_pool(2, "avg_pool2d", input, *args)


@_tensor_input
def avg_pool3d(
    input: Tensor, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
) -> Tensor:
    """torch.nn.functional.avg_pool3d."""
    args = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    return _avg_pool(3, "avg_pool3d", input, *args)


def _max_pool(n: int, fn: str, x: Tensor, kernel_size, stride, padding, dilation, ceil_mode, return_indices) -> Any:
    k, s, p, d = _pool_window(fn, n, x, kernel_size, stride, padding, dilation)
    return x.max_pool2d(k, s, p, d, ceil_mode, return_indices)


@_tensor_input
def max_pool1d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """torch.nn.functional.max_pool1d (the indices are int32, torch's int64)."""
    return _max_pool(1, "max_pool1d", input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@_tensor_input
def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """torch.nn.functional.max_pool2d (the indices are int32, torch's int64)."""
    return _max_pool(2, "max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@_tensor_input
def max_pool3d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """torch.nn.functional.max_pool3d (the indices are int32, torch's int64)."""
    return _max_pool(3, "max_pool3d", input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@_tensor_input
def max_pool1d_with_indices(
    input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
) -> tuple[Tensor, Tensor]:
    """torch.nn.functional.max_pool1d_with_indices: (values, int32 indices) whatever return_indices says."""
    return _max_pool(1, "max_pool1d_with_indices", input, kernel_size, stride, padding, dilation, ceil_mode, True)


@_tensor_input
def max_pool2d_with_indices(
    input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
) -> tuple[Tensor, Tensor]:
    """torch.nn.functional.max_pool2d_with_indices: (values, int32 indices) whatever return_indices says."""
    return _max_pool(2, "max_pool2d_with_indices", input, kernel_size, stride, padding, dilation, ceil_mode, True)


@_tensor_input
def max_pool3d_with_indices(
    input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
) -> tuple[Tensor, Tensor]:
    """torch.nn.functional.max_pool3d_with_indices: (values, int32 indices) whatever return_indices says."""
    return _max_pool(3, "max_pool3d_with_indices", input, kernel_size, stride, padding, dilation, ceil_mode, True)


def _max_unpool(n: int, fn: str, x: Tensor, indices: Tensor, kernel_size, stride, padding, output_size) -> Tensor:
    k, s, p, _ = _pool_window(fn, n, x, kernel_size, stride, padding)
    if output_size is not None and len(output_size) not in (n, x.ndim):
        raise ArgumentError(f"{fn}: output_size must have {n} or {x.ndim} sizes, got {output_size}")
    return x.max_unpool2d(indices, k, s, p, output_size)


@_tensor_input
def max_unpool1d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """torch.nn.functional.max_unpool1d."""
    return _max_unpool(1, "max_unpool1d", input, indices, kernel_size, stride, padding, output_size)


@_tensor_input
def max_unpool2d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """torch.nn.functional.max_unpool2d."""
    return _max_unpool(2, "max_unpool2d", input, indices, kernel_size, stride, padding, output_size)


@_tensor_input
def max_unpool3d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """torch.nn.functional.max_unpool3d."""
    return _max_unpool(3, "max_unpool3d", input, indices, kernel_size, stride, padding, output_size)


@_tensor_input
def lp_pool1d(input: Tensor, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:
    """torch.nn.functional.lp_pool1d."""
    return input.lp_pool1d(norm_type, kernel_size, stride, ceil_mode)


@_tensor_input
def lp_pool2d(input: Tensor, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:
    """torch.nn.functional.lp_pool2d."""
    return input.lp_pool2d(norm_type, kernel_size, stride, ceil_mode)


@_tensor_input
def lp_pool3d(input: Tensor, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:
    """torch.nn.functional.lp_pool3d."""
    return input.lp_pool3d(norm_type, kernel_size, stride, ceil_mode)


def _adaptive_size(n: int, fn: str, x: Tensor, output_size: Any) -> tuple[int | None, ...]:
    # an int, or n sizes (None keeps the axis), as torch's adaptive pools take it
    _check_rank(x, n, fn)
    sizes = tuple(output_size) if isinstance(output_size, Sequence) else (output_size,) * n
    if len(sizes) != n or any(v is not None and (not isinstance(v, (int, np.integer)) or v < 0) for v in sizes):
        raise ArgumentError(f"{fn}: output_size must be an int or {n} sizes >= 0 (None: keep the axis), got {sizes}")
    return sizes


@_tensor_input
def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    """torch.nn.functional.adaptive_avg_pool1d."""
    return input.adaptive_avg_pool2d(_adaptive_size(1, "adaptive_avg_pool1d", input, output_size))


@_tensor_input
def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """torch.nn.functional.adaptive_avg_pool2d."""
    return input.adaptive_avg_pool2d(_adaptive_size(2, "adaptive_avg_pool2d", input, output_size))


@_tensor_input
def adaptive_avg_pool3d(input: Tensor, output_size) -> Tensor:
    """torch.nn.functional.adaptive_avg_pool3d."""
    return input.adaptive_avg_pool2d(_adaptive_size(3, "adaptive_avg_pool3d", input, output_size))


def _adaptive_max(n: int, fn: str, x: Tensor, output_size: Any, return_indices: bool) -> Any:
    sizes = _adaptive_size(n, fn, x, output_size)
    if not return_indices:
        return x.adaptive_max_pool2d(sizes)
    # the indices are worked out by the layer (each window's first maximum, as torch's)
    layer = (AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d)[n - 1]
    return layer(sizes, return_indices=True)(x)


@_tensor_input
def adaptive_max_pool1d(input: Tensor, output_size, return_indices: bool = False) -> Any:
    """torch.nn.functional.adaptive_max_pool1d (the indices are int32, torch's int64)."""
    return _adaptive_max(1, "adaptive_max_pool1d", input, output_size, return_indices)


@_tensor_input
def adaptive_max_pool2d(input: Tensor, output_size, return_indices: bool = False) -> Any:
    """torch.nn.functional.adaptive_max_pool2d (the indices are int32, torch's int64)."""
    return _adaptive_max(2, "adaptive_max_pool2d", input, output_size, return_indices)


@_tensor_input
def adaptive_max_pool3d(input: Tensor, output_size, return_indices: bool = False) -> Any:
    """torch.nn.functional.adaptive_max_pool3d (the indices are int32, torch's int64)."""
    return _adaptive_max(3, "adaptive_max_pool3d", input, output_size, return_indices)


@_tensor_input
def adaptive_max_pool1d_with_indices(input: Tensor, output_size, return_indices: bool = False) -> Any:
    """torch.nn.functional.adaptive_max_pool1d_with_indices: (values, int32 indices)."""
    return _adaptive_max(1, "adaptive_max_pool1d_with_indices", input, output_size, True)


@_tensor_input
def adaptive_max_pool2d_with_indices(input: Tensor, output_size, return_indices: bool = False) -> Any:
    """torch.nn.functional.adaptive_max_pool2d_with_indices: (values, int32 indices)."""
    return _adaptive_max(2, "adaptive_max_pool2d_with_indices", input, output_size, True)


@_tensor_input
def adaptive_max_pool3d_with_indices(input: Tensor, output_size, return_indices: bool = False) -> Any:
    """torch.nn.functional.adaptive_max_pool3d_with_indices: (values, int32 indices)."""
    return _adaptive_max(3, "adaptive_max_pool3d_with_indices", input, output_size, True)


# ---------------------------------------------------------------------------------------------------------------------
# normalization


def _halves_in_float32(norm: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """A normalization that computes a float16 or bfloat16 input in float32 and rounds once to the input's dtype, as
    torch's: x * x and a variance overflow float16 from |x| ~ 256, and rounding each step costs ulps."""
    first = next(iter(inspect.signature(norm).parameters))

    @functools.wraps(norm)
    def call(*args: Any, **kwargs: Any) -> Tensor:
        x = args[0] if args else kwargs[first]
        if x.dtype not in dtypes.halves:
            return norm(*args, **kwargs)
        # (the input passed by position or by torch's keyword `input`)
        args, kwargs = ((x.float(),) + args[1:], kwargs) if args else (args, {**kwargs, first: x.float()})
        return norm(*args, **kwargs).cast(x.dtype)

    return call


def _channel_view(t: Tensor | None, x: Tensor) -> Tensor | None:
    # a per-channel (C,) tensor shaped to broadcast over axis 1 of x (N, C, ...)
    return None if t is None else t.reshape((1, -1) + (1,) * (x.ndim - 2))


@_tensor_input
@_halves_in_float32
def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """torch.nn.functional.batch_norm: training uses the batch's statistics and updates running_mean and running_var
    in place (the variance unbiased, as torch's); otherwise the running statistics normalize. A half-float input is
    normalized in float32 and rounded once to its dtype, as torch's (its variance overflows float16 from |x| ~ 256)."""
    if input.ndim < 2:
        raise ShapeError(f"batch_norm: expected input (N, C, ...), got shape {input.shape}")
    c = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        if t is not None and t.shape != (c,):
            raise ShapeError(f"batch_norm: {name} must have shape ({c},) for input {input.shape}, got {t.shape}")
    if not training:
        if running_mean is None or running_var is None:
            raise ArgumentError("batch_norm: running_mean and running_var are needed when training=False")
        # (half running statistics beside the float32 the input is normalized in: rsqrt in float32, as torch's)
        var = running_var.cast(least_upper_dtype(input.dtype, running_var.dtype))
        return input.batchnorm(weight, bias, running_mean, (var + eps).rsqrt())
    n = input.numel() // max(c, 1)
    if n <= 1:
        raise ValueError(
            f"batch_norm: training needs at least 2 values per channel to take a variance, got input {input.shape}"
        )
    axes = tuple(i for i in range(input.ndim) if i != 1)
    mean, var = input.mean(axes), input.var(axes, correction=0)
    if running_mean is not None:
        running_mean.copy_((1 - momentum) * running_mean + momentum * mean.detach())
    if running_var is not None:
        running_var.copy_((1 - momentum) * running_var + momentum * var.detach() * (n / (n - 1)))
    return input.batchnorm(weight, bias, mean, (var + eps).rsqrt())


@_tensor_input
@_halves_in_float32
def instance_norm(
    input: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """torch.nn.functional.instance_norm: each sample's channels normalized over their positions; given running
    statistics are updated with the batch's mean of them, or (use_input_stats=False) normalize instead. A half-float
    input is normalized in float32 and rounded once to its dtype, as torch's."""
    if input.ndim < 3:
        raise ShapeError(f"instance_norm: expected input (N, C, ...) with a spatial axis, got shape {input.shape}")
    if not use_input_stats:
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    n = math.prod(input.shape[2:])
    if n <= 1:
        raise ValueError(
            f"instance_norm: needs at least 2 spatial positions per channel to take a variance, got input {input.shape}"
        )
    axes = tuple(range(2, input.ndim))
    mean, var = input.mean(axes, keepdim=True), input.var(axes, keepdim=True, correction=0)
    batch_shape = input.shape[:2]
    if running_mean is not None:
        batch_mean = mean.detach().reshape(batch_shape).mean(0)
        running_mean.copy_((1 - momentum) * running_mean + momentum * batch_mean)
    if running_var is not None:
        batch_var = var.detach().reshape(batch_shape).mean(0) * (n / (n - 1))
        running_var.copy_((1 - momentum) * running_var + momentum * batch_var)
    out = (input - mean) * (var + eps).rsqrt()
    scale, shift = _channel_view(weight, input), _channel_view(bias, input)
    out = out * scale if scale is not None else out
    return out + shift if shift is not None else out


def _normalized_axes(x: Tensor, normalized_shape: Any, fn: str) -> tuple[int, ...]:
    # the trailing axes normalized_shape names (an int is the last one), checked against the input's shape
    shape = (int(normalized_shape),) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    if x.ndim < len(shape) or x.shape[x.ndim - len(shape) :] != shape:
        raise ShapeError(f"{fn}: input of shape {x.shape} doesn't end in normalized_shape {shape}")
    return tuple(range(x.ndim - len(shape), x.ndim))


@autocast_op(FLOAT32, GPU)
@_tensor_input
def layer_norm(
    input: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """torch.nn.functional.layer_norm."""
    out = input.layernorm(_normalized_axes(input, normalized_shape, "layer_norm"), eps)
    out = out * weight if weight is not None else out
    return out + bias if bias is not None else out


@_tensor_input
@_halves_in_float32
def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """torch.nn.functional.rms_norm: a half-float input is computed in float32 (x * x overflows float16 from 256) and
    rounded once to its dtype, also with float32 weights, and eps None is the machine epsilon of the dtype it computes
    in (float32's for half floats), as torch's kernel and nn.RMSNorm."""
    axes = _normalized_axes(input, normalized_shape, "rms_norm")
    eps = _MACHINE_EPS.get(input.dtype, _MACHINE_EPS[dtypes.float32]) if eps is None else eps
    out = input * (input.square().mean(axes, keepdim=True) + eps).rsqrt()
    return out * weight if weight is not None else out


@autocast_op(FLOAT32, GPU)
@_tensor_input
def group_norm(
    input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """torch.nn.functional.group_norm."""
    return input.group_norm(num_groups, weight, bias, eps)


@_tensor_input
def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> Tensor:
    """torch.nn.functional.local_response_norm."""
    return input.local_response_norm(size, alpha, beta, k)


@autocast_op(FLOAT32, GPU)
@_tensor_input
def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Tensor | None = None) -> Tensor:
    """torch.nn.functional.normalize (out: the result is written into it, as torch's)."""
    result = input.normalize(p, dim, eps)
    return result if out is None else out.copy_(result)


# ---------------------------------------------------------------------------------------------------------------------
# linear, sparse and attention


@_tensor_input
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """torch.nn.functional.linear: input @ weight.T + bias, weight (out, in) or one (in,) row."""
    if not isinstance(weight, Tensor) or weight.ndim not in (1, 2):
        raise ShapeError(f"linear: weight must be a 1-d or 2-d Tensor (out_features, in_features), got {weight!r}")
    _check_same_device("linear", [t for t in (input, weight, bias) if isinstance(t, Tensor)])
    if weight.ndim == 1:
        # torch's 1-d weight is a single output's row (a dot product); Tensor.linear would scale elementwise
        return input._product_plus(weight, bias)
    # (Tensor.linear takes tinygrad's (in, out) weight)
    return input.linear(weight.T, bias)


@_tensor_input
def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """torch.nn.functional.bilinear."""
    return input1.bilinear(input2, weight, bias)


@_tensor_input
def embedding(
    input: Tensor,
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """torch.nn.functional.embedding (sparse=True still gives a dense gradient)."""
    if not isinstance(weight, Tensor) or weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be a 2-d Tensor (num_embeddings, embedding_dim), got {weight!r}")
    vocab = weight.shape[0]
    if padding_idx is not None:
        if not -vocab <= padding_idx < vocab:
            raise ArgumentError(f"embedding: padding_idx {padding_idx} must be within [{-vocab}, {vocab})")
        padding_idx %= vocab
    if max_norm is not None:
        _renorm_looked_up_rows(input, weight, max_norm, norm_type)
    rows = input.embedding(weight)
    if scale_grad_by_freq:
        # each row's gradient divided by how often its index occurs in input (the value untouched: rows - rows is 0)
        counts = input.flatten().one_hot(vocab).sum(0).cast(weight.dtype).unsqueeze(-1)
        rows = rows.detach() + (rows - rows.detach()) / input.embedding(counts)
    if padding_idx is not None:
        # the padding row gets no gradient
        rows = (input != padding_idx).unsqueeze(-1).where(rows, rows.detach())
    return rows


@_tensor_input
def embedding_bag(
    input: Tensor,
    weight: Tensor,
    offsets: Tensor | None = None,
    max_norm: float | None = None,
    norm_type: float = 2,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights: Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> Tensor:
    """torch.nn.functional.embedding_bag (sparse=True gives a dense gradient)."""
    if sparse and mode == "max":
        raise ArgumentError("embedding_bag: max mode does not support sparse weights (as PyTorch)")
    if max_norm is not None:
        # (the method leaves max_norm out: the weight is renormalized here first, as embedding's)
        _renorm_looked_up_rows(input, weight, max_norm, norm_type)
    if scale_grad_by_freq and dtypes.is_int(input.dtype):
        # (the method leaves it out too: the weight's gradient is scaled here)
        weight = _frequency_scaled(input, weight, mode, "embedding_bag")
    bags = (mode, False, per_sample_weights, include_last_offset, padding_idx)
    return input.embedding_bag(weight, offsets, None, norm_type, False, *bags)


@_tensor_input
def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """torch.nn.functional.one_hot (the result is int32, torch's int64)."""
    return tensor.one_hot(num_classes)


@_tensor_input
def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """torch.nn.functional.scaled_dot_product_attention; `attn_mask` may also be a causal bias of
    uopkit.nn.attention.bias (`causal_lower_right(L, S)`), as torch's."""
    if isinstance(attn_mask, CausalBias):
        if is_causal:
            raise ValueError(
                "scaled_dot_product_attention: a CausalBias attn_mask is already causal; pass is_causal=False with it"
            )
        attn_mask = attn_mask._materialize(query.device)
    return query.scaled_dot_product_attention(key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


# ---------------------------------------------------------------------------------------------------------------------
# distances


@autocast_op(FLOAT32, GPU)
@_tensor_input
def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """torch.nn.functional.cosine_similarity."""
    return x1.cosine_similarity(x2, dim, eps)


@_tensor_input
def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """torch.nn.functional.pairwise_distance."""
    return x1.pairwise_distance(x2, p, eps, keepdim)


@autocast_op(FLOAT32, GPU)
@_tensor_input
def pdist(input: Tensor, p: float = 2.0) -> Tensor:
    """torch.nn.functional.pdist."""
    return input.pdist(p)


# ---------------------------------------------------------------------------------------------------------------------
# shape and resampling


@_tensor_input
def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """torch.nn.functional.pad: `pad` is torch's flat (left, right, top, bottom, ...), last axis first."""
    if mode != "constant" and value is not None and value != 0:
        raise ArgumentError(f"pad: mode {mode!r} doesn't take a value (only 'constant' does), got value={value}")
    if mode in ("reflect", "replicate", "circular"):
        _check_mode_pad(input, pad, mode)
    return input.pad(pad, mode, 0.0 if value is None else value)


def _check_mode_pad(input: Tensor, pad: Sequence[int], mode: str) -> None:
    # torch's reflect/replicate/circular pads take 1, 2 or 3 spatial dims of an (N, C, *spatial) or unbatched
    # (C, *spatial) input; the flat padding's own length checks (even, at most 2 per dim) come first, as torch's
    n = len(pad)
    if n % 2 or n // 2 > input.ndim:
        raise ShapeError(f"pad: flat padding {tuple(pad)} needs an even length of at most 2 * {input.ndim} (the dims)")
    spatial = n // 2
    if spatial not in (1, 2, 3) or input.ndim not in (spatial + 1, spatial + 2):
        raise UnsupportedRankError(
            f"pad: mode {mode!r} pads the last 1, 2 or 3 dims of a (N, C, *spatial) or (C, *spatial) input, so "
            f"{n} padding values need a {spatial + 1}-d or {spatial + 2}-d input, got shape {input.shape}; use "
            f"Tensor.pad for other ranks"
        )


# the input rank each interpolation mode needs (torch refuses the others)
_INTERPOLATE_RANK = {"linear": 3, "bilinear": 4, "bicubic": 4, "trilinear": 5}


@_tensor_input
def interpolate(
    input: Tensor,
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """torch.nn.functional.interpolate."""
    if antialias and (mode not in ("bilinear", "bicubic") or input.ndim != 4):
        # (checked first, as torch: a ValueError whatever else is wrong)
        raise ArgumentError(
            f"interpolate: antialias=True is restricted to the bilinear and bicubic modes and needs a 4-d input "
            f"(N, C, H, W), got mode {mode!r} and shape {input.shape}"
        )
    rank = _INTERPOLATE_RANK.get(mode)
    if rank is not None and input.ndim != rank:
        raise UnsupportedRankError(f"interpolate: mode {mode!r} needs a {rank}-d input, got shape {input.shape}")
    return input.interpolate(size, scale_factor, mode, align_corners, recompute_scale_factor, antialias)


@_tensor_input
def upsample(input: Tensor, size=None, scale_factor=None, mode: str = "nearest", align_corners=None) -> Tensor:
    """torch.nn.functional.upsample (interpolate)."""
    return interpolate(input, size, scale_factor, mode, align_corners)


@_tensor_input
def upsample_nearest(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """torch.nn.functional.upsample_nearest (interpolate, mode 'nearest')."""
    return interpolate(input, size, scale_factor, "nearest")


@_tensor_input
def upsample_bilinear(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """torch.nn.functional.upsample_bilinear (interpolate, mode 'bilinear', align_corners=True)."""
    return interpolate(input, size, scale_factor, "bilinear", align_corners=True)


@_tensor_input
def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """torch.nn.functional.pixel_shuffle."""
    return input.pixel_shuffle(upscale_factor)


@_tensor_input
def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """torch.nn.functional.pixel_unshuffle."""
    return input.pixel_unshuffle(downscale_factor)


@_tensor_input
def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """torch.nn.functional.channel_shuffle."""
    return input.channel_shuffle(groups)


@_tensor_input
def native_channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """torch.nn.functional.native_channel_shuffle (channel_shuffle)."""
    return input.channel_shuffle(groups)


@_tensor_input
def grid_sample(
    input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros", align_corners: bool | None = None
) -> Tensor:
    """torch.nn.functional.grid_sample (align_corners None is False, as torch's, without its warning)."""
    return input.grid_sample(grid, mode, padding_mode, bool(align_corners))


@_tensor_input
def affine_grid(theta: Tensor, size: Sequence[int], align_corners: bool | None = None) -> Tensor:
    """torch.nn.functional.affine_grid (align_corners None is False, as torch's, without its warning)."""
    return theta.affine_grid(size, bool(align_corners))
