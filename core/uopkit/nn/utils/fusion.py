"""torch.nn.utils.fusion: a BatchNorm in eval mode folded into the convolution or linear layer before it, for
inference (one layer's weight and bias computing both); compared with torch in tests/test_nn_utils.py.

In eval mode BatchNorm is the affine map y = (x - mean) / sqrt(var + eps) * w + b per channel, so after a layer
x = W @ in + c it is the layer with weight W * s and bias (c - mean) * s + b, s = w / sqrt(var + eps) per output
channel (for a transposed convolution, whose weight keeps its output channels on axis 1, along that axis).

>>> from uopkit import Tensor
>>> from uopkit.nn import BatchNorm1d, Linear
>>> linear, bn = Linear(2, 3).eval(), BatchNorm1d(3).eval()
>>> fused = fuse_linear_bn_eval(linear, bn)
>>> x = Tensor([[1.0, -2.0]])
>>> bool(((fused(x) - bn(linear(x))).abs() < 1e-5).all().item())
True
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar

from uopkit.nn.module import Module, Parameter
from uopkit.tensor import Tensor

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights"]

LayerT = TypeVar("LayerT", bound=Module)


def _in_eval_mode(what: str, *layers: Module) -> None:
    for layer in layers:
        if layer.training:
            raise AssertionError(f"Fusion only for eval! ({what}: {type(layer).__name__} is in training mode)")


def _running_stats(bn: Any) -> tuple[Tensor, Tensor]:
    mean, var = getattr(bn, "running_mean", None), getattr(bn, "running_var", None)
    if mean is None or var is None:
        raise AssertionError(
            f"fusing {type(bn).__name__}: it keeps no running statistics (track_running_stats=False), nothing to "
            "fold in"
        )
    return mean, var


def fuse_conv_bn_eval(conv: LayerT, bn: Module, transpose: bool = False) -> LayerT:
    """A new convolution (a deep copy of `conv`) computing `bn(conv(x))`, both in eval mode, as torch's.
    transpose=True for a transposed convolution."""
    _in_eval_mode("fuse_conv_bn_eval", conv, bn)
    return _fused(conv, bn, fuse_conv_bn_weights, transpose)


def fuse_conv_bn_weights(
    conv_w: Tensor,
    conv_b: Tensor | None,
    bn_rm: Tensor,
    bn_rv: Tensor,
    bn_eps: float,
    bn_w: Tensor | None,
    bn_b: Tensor | None,
    transpose: bool = False,
) -> tuple[Parameter, Parameter]:
    """The fused convolution's (weight, bias) as new Parameters, in the dtypes of `conv_w` and `conv_b` (a missing
    bias: zeros, in the weight's dtype). As torch's, each requires a gradient as the tensor it replaces does (a bias
    made here doesn't)."""
    weight_dtype = conv_w.dtype
    bias_dtype = weight_dtype if conv_b is None else conv_b.dtype
    bias = bn_rm.zeros_like() if conv_b is None else conv_b
    inv_std = (bn_rv + bn_eps).rsqrt()
    bn_w = bn_rm.ones_like() if bn_w is None else bn_w
    # the per-channel scale along the weight's output-channel axis (1 for a transposed convolution)
    shape = [1] * conv_w.ndim
    shape[1 if transpose else 0] = -1
    fused_w = (conv_w * (bn_w * inv_std).reshape(shape)).cast(weight_dtype)
    # (in torch's order of roundings)
    fused_b = ((bias - bn_rm) * inv_std * bn_w + _shift(bn_rm, bn_b)).cast(bias_dtype)
    return Parameter(fused_w, conv_w.requires_grad), Parameter(fused_b, bias.requires_grad)


def fuse_linear_bn_eval(linear: LayerT, bn: Module) -> LayerT:
    """A new linear layer (a deep copy of `linear`) computing `bn(linear(x))`, both in eval mode, as torch's: bn has
    linear's out_features channels, or 1."""
    _in_eval_mode("fuse_linear_bn_eval", linear, bn)
    out_features, features = linear.out_features, bn.num_features  # type: ignore[attr-defined]
    if out_features != features and features != 1:
        raise AssertionError(
            f"fuse_linear_bn_eval: the batch norm's {features} features match neither the linear layer's "
            f"{out_features} outputs nor 1"
        )
    return _fused(linear, bn, fuse_linear_bn_weights)


def fuse_linear_bn_weights(
    linear_w: Tensor,
    linear_b: Tensor | None,
    bn_rm: Tensor,
    bn_rv: Tensor,
    bn_eps: float,
    bn_w: Tensor | None,
    bn_b: Tensor | None,
) -> tuple[Parameter, Parameter]:
    """The fused linear layer's (weight, bias) as new Parameters; each requires a gradient as the tensor it replaces
    does (a bias made here doesn't), as torch's."""
    bias = bn_rm.zeros_like() if linear_b is None else linear_b
    # w / sqrt(var + eps) per channel (an affine=False BatchNorm's w is 1)
    inv_std = (bn_rv + bn_eps).rsqrt()
    scale = inv_std if bn_w is None else bn_w * inv_std
    fused_w = linear_w * scale.unsqueeze(-1)
    fused_b = (bias - bn_rm) * scale + _shift(bn_rm, bn_b)
    return Parameter(fused_w, linear_w.requires_grad), Parameter(fused_b, bias.requires_grad)


def _fused(layer: LayerT, bn: Any, fuse_weights: Any, *extra: Any) -> LayerT:
    # a deep copy of `layer` with bn's eval-mode map folded into its weight and bias (Parameters replace the names,
    # a bias of None included)
    fused = copy.deepcopy(layer)
    mean, var = _running_stats(bn)
    fused.weight, fused.bias = fuse_weights(fused.weight, fused.bias, mean, var, bn.eps, bn.weight, bn.bias, *extra)
    return fused


def _shift(mean: Tensor, bias: Tensor | None) -> Tensor:
    return mean.zeros_like() if bias is None else bias
