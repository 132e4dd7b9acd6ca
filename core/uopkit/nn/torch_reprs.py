"""The settings each built-in layer prints, in torch's words: its torch twin's `extra_repr`, by layer class, put into
nn/reprs.py's table when uopkit.nn is imported (the layers' own modules stay as they are, and none of them imports
this one). Compared with torch's for every layer in tests/test_nn_repr.py.

>>> from uopkit.nn import Conv2d, Embedding
>>> Conv2d(3, 16, 3, padding=1, bias=False), Embedding(10, 3, padding_idx=0)
(Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False), Embedding(10, 3, padding_idx=0))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from uopkit.nn import activations, fractional_pool, layers, losses, modules, pooling, reprs, sequence, spatial


def _inplace(m: Any, before: str = "") -> str:
    # torch's activations: "inplace=True" only when set
    if not m.inplace:
        return before
    return f"{before}, inplace=True" if before else "inplace=True"


def _conv(m: Any) -> str:
    s = f"{m.in_channels}, {m.out_channels}, kernel_size={m.kernel_size}, stride={m.stride}"
    if m.padding != (0,) * len(m.padding):
        s += f", padding={m.padding}"
    if m.dilation != (1,) * len(m.dilation):
        s += f", dilation={m.dilation}"
    if m.output_padding != (0,) * len(m.output_padding):
        s += f", output_padding={m.output_padding}"
    if m.groups != 1:
        s += f", groups={m.groups}"
    if m.bias is None:
        s += ", bias=False"
    if m.padding_mode != "zeros":
        s += f", padding_mode={m.padding_mode}"
    return s


def _norm(m: Any) -> str:
    # BatchNorm*d and InstanceNorm*d (torch's _NormBase)
    return (
        f"{m.num_features}, eps={m.eps}, momentum={m.momentum}, affine={m.affine}, bias={m.bias is not None}, "
        f"track_running_stats={m.track_running_stats}"
    )


def _embedding_bag(m: Any) -> str:
    s = f"{m.num_embeddings!r}, {m.embedding_dim!r}"
    if m.max_norm is not None:
        s += f", max_norm={m.max_norm!r}"
    if m.norm_type != 2:
        s += f", norm_type={m.norm_type!r}"
    if m.scale_grad_by_freq is not False:
        s += f", scale_grad_by_freq={m.scale_grad_by_freq!r}"
    s += f", mode={m.mode!r}"
    if m.padding_idx is not None:
        s += f", padding_idx={m.padding_idx!r}"
    return s


def _rnn_cell(m: Any) -> str:
    s = f"{m.input_size}, {m.hidden_size}"
    if m.bias_ih is None:
        s += ", bias=False"
    if getattr(m, "nonlinearity", "tanh") != "tanh":
        s += f", nonlinearity={m.nonlinearity}"
    return s


def _upsample(m: Any) -> str:
    size = f"scale_factor={m.scale_factor!r}" if m.scale_factor is not None else f"size={m.size!r}"
    return f"{size}, mode={m.mode!r}"


def _nothing(m: Any) -> str:
    return ""


def _linear(m: Any) -> str:
    return f"in_features={m.in_features}, out_features={m.out_features}, bias={m.bias is not None}"


def _tupled_pool(m: Any) -> str:
    # (torch keeps these sizes as tuples: AvgPool1d's, MaxUnpool's)
    kernel_size, stride, padding = m._args[:3]
    return f"kernel_size={kernel_size}, stride={stride}, padding={padding}"


_TORCH_EXTRA_REPRS: dict[type, Callable[[Any], str]] = {
    modules.Linear: _linear,
    spatial.Bilinear: lambda m: (
        f"in1_features={m.in1_features}, in2_features={m.in2_features}, out_features={m.out_features}, "
        f"bias={m.bias is not None}"
    ),
    modules.Conv2d: _conv,
    modules.ConvTranspose2d: _conv,
    layers.BatchNorm1d: _norm,
    modules.InstanceNorm: _norm,
    modules.LayerNorm: lambda m: (
        f"{m.normalized_shape}, eps={m.eps}, elementwise_affine={m.elementwise_affine}, bias={m.bias is not None}"
    ),
    modules.GroupNorm: lambda m: (
        f"{m.num_groups}, {m.num_channels}, eps={m.eps}, affine={m.affine}, bias={m.bias is not None}"
    ),
    modules.RMSNorm: lambda m: f"{m.normalized_shape}, eps={m.eps}, elementwise_affine={m.weight is not None}",
    layers.LocalResponseNorm: lambda m: f"{m.size}, alpha={m.alpha}, beta={m.beta}, k={m.k}",
    spatial.CrossMapLRN2d: lambda m: f"{m.size}, alpha={m.alpha}, beta={m.beta}, k={m.k}",
    spatial.EmbeddingBag: _embedding_bag,
    modules.RNNCell: _rnn_cell,
    modules.LSTMCell: _rnn_cell,
    modules.GRUCell: _rnn_cell,
    activations.PReLU: lambda m: f"num_parameters={m.num_parameters}",
    modules.ReLU: _inplace,
    activations.ReLU6: _inplace,
    activations.SELU: _inplace,
    modules.SiLU: _inplace,
    activations.Mish: _inplace,
    activations.Hardswish: _nothing,
    activations.Hardsigmoid: _nothing,
    activations.ELU: lambda m: _inplace(m, f"alpha={m.alpha}"),
    activations.CELU: lambda m: _inplace(m, f"alpha={m.alpha}"),
    activations.LeakyReLU: lambda m: _inplace(m, f"negative_slope={m.negative_slope}"),
    activations.Hardtanh: lambda m: _inplace(m, f"min_val={m.min_val}, max_val={m.max_val}"),
    activations.Threshold: lambda m: _inplace(m, f"threshold={m.threshold}, value={m.value}"),
    activations.RReLU: lambda m: _inplace(m, f"lower={m.lower}, upper={m.upper}"),
    activations.Hardshrink: lambda m: f"{m.lambd}",
    activations.Softshrink: lambda m: f"{m.lambd}",
    pooling.MaxPool2d: lambda m: (
        f"kernel_size={m.kernel_size}, stride={m.stride}, padding={m.padding}, dilation={m.dilation}, "
        f"ceil_mode={m.ceil_mode}"
    ),
    pooling.AvgPool2d: lambda m: f"kernel_size={m.kernel_size}, stride={m.stride}, padding={m.padding}",
    pooling.AvgPool1d: _tupled_pool,
    pooling.MaxUnpool2d: _tupled_pool,
    pooling.AdaptiveMaxPool2d: lambda m: f"output_size={m.output_size}",
    pooling.AdaptiveAvgPool2d: lambda m: f"output_size={m.output_size}",
    fractional_pool.FractionalMaxPool2d: _nothing,
    spatial._LPPool: lambda m: (
        f"norm_type={m.norm_type}, kernel_size={m.kernel_size}, stride={m.stride}, ceil_mode={m.ceil_mode}"
    ),
    pooling._Pad: lambda m: f"{m.padding}",
    pooling.ConstantPad2d: lambda m: f"padding={m.padding}, value={m.value}",
    layers.Upsample: _upsample,
    layers._Loss: _nothing,
    layers.KLDivLoss: _nothing,
    layers.CosineSimilarity: _nothing,
    layers.PairwiseDistance: _nothing,
    losses.AdaptiveLogSoftmaxWithLoss: _nothing,
    sequence.MultiheadAttention: _nothing,
    sequence.Transformer: _nothing,
    sequence.TransformerEncoderLayer: _nothing,
    sequence.TransformerDecoderLayer: _nothing,
    sequence.TransformerEncoder: _nothing,
    sequence.TransformerDecoder: _nothing,
}

reprs.EXTRA_REPRS.update(_TORCH_EXTRA_REPRS)
