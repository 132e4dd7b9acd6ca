"""torch.nn's remaining spatial layers as modules over tensor/spatial.py's functions (Fold, Unfold, EmbeddingBag,
Bilinear, LPPool1d/2d/3d, FeatureAlphaDropout, CrossMapLRN2d); compared with torch in tests/test_nn_spatial.py.

Each takes torch's constructor arguments (in torch's order, with its defaults) and names its tensors as torch does
(EmbeddingBag's `weight`, Bilinear's `weight` and `bias`), so a torch state dict loads as it is.

>>> from uopkit import Tensor
>>> Unfold(2)(Tensor.ones(1, 3, 4, 4)).shape
(1, 12, 9)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from uopkit.dtype import dtypes
from uopkit.nn.arguments import _maybe_in_place, _probability
from uopkit.nn.module import Module, Parameter
from uopkit.nn.modules import _host, _renorm_looked_up_rows, _uniform
from uopkit.tensor import ShapeError, Tensor
from uopkit.tensor.spatial import frequency_scaled as _frequency_scaled

__all__ = [
    "Fold",
    "Unfold",
    "EmbeddingBag",
    "Bilinear",
    "LPPool1d",
    "LPPool2d",
    "LPPool3d",
    "FeatureAlphaDropout",
    "CrossMapLRN2d",
]


def _sizes(value: Any, n: int, name: str, layer: str, low: int = 1) -> tuple[int, ...]:
    # an int or a sequence of n ints, each at least `low`, as a tuple (torch checks these only at the first call)
    values = (value,) * n if isinstance(value, int) else tuple(value) if isinstance(value, Sequence) else None
    if values is None or len(values) != n or any(not isinstance(v, int) or isinstance(v, bool) for v in values):
        raise ValueError(f"{layer}: {name} must be an int or a sequence of {n} ints, got {value!r}")
    if any(v < low for v in values):
        raise ValueError(f"{layer}: every {name} must be >= {low}, got {value!r}")
    return values


def _no_device(device: Any, dtype: Any, layer: str) -> None:
    if device is not None or dtype is not None:
        raise ValueError(
            f"{layer}: device and dtype aren't supported (parameters are in dtypes.default_float on the default device)"
        )


# ---------------------------------------------------------------------------------------------------------------------
# sliding blocks: im2col and col2im


class Fold(Module):
    """col2im: (N, C * kh * kw, L) or (C * kh * kw, L), one column per sliding block, summed back into
    (N, C, *output_size), as torch.nn.Fold (Unfold's adjoint).

    >>> Fold((3, 3), 2)(Tensor.ones(1, 4, 4)).tolist()
    [[[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]]]
    """

    def __init__(
        self,
        output_size: int | Sequence[int],
        kernel_size: int | Sequence[int],
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        stride: int | Sequence[int] = 1,
    ) -> None:
        _sizes(output_size, 2, "output_size", "Fold")
        _sizes(kernel_size, 2, "kernel_size", "Fold")
        _sizes(dilation, 2, "dilation", "Fold")
        _sizes(padding, 2, "padding", "Fold", low=0)
        _sizes(stride, 2, "stride", "Fold")
        self.output_size, self.kernel_size, self.dilation = output_size, kernel_size, dilation
        self.padding, self.stride = padding, stride

    def __call__(self, input: Tensor) -> Tensor:
        if input.ndim not in (2, 3):
            raise ShapeError(f"Fold: expected input (N, C * kh * kw, L) or (C * kh * kw, L), got shape {input.shape}")
        return input.fold(self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)


class Unfold(Module):
    """im2col: every sliding block of (N, C, H, W) (or unbatched (C, H, W)) as a column, (N, C * kh * kw, L) with L
    blocks in row-major order, the rows in (c, i, j) order, as torch.nn.Unfold.

    >>> Unfold(2)(Tensor.arange(9.0).reshape(1, 1, 3, 3)).tolist()
    [[[0.0, 1.0, 3.0, 4.0], [1.0, 2.0, 4.0, 5.0], [3.0, 4.0, 6.0, 7.0], [4.0, 5.0, 7.0, 8.0]]]
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        stride: int | Sequence[int] = 1,
    ) -> None:
        self._k = _sizes(kernel_size, 2, "kernel_size", "Unfold")
        self._d = _sizes(dilation, 2, "dilation", "Unfold")
        self._p = _sizes(padding, 2, "padding", "Unfold", low=0)
        self._s = _sizes(stride, 2, "stride", "Unfold")
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def __call__(self, input: Tensor) -> Tensor:
        if input.ndim not in (3, 4):
            raise ShapeError(f"Unfold: expected input (N, C, H, W) or (C, H, W), got shape {input.shape}")
        x = input if input.ndim == 4 else input.unsqueeze(0)
        (kh, kw), (dh, dw), (ph, pw), (sh, sw) = self._k, self._d, self._p, self._s
        n, c, h, w = x.shape
        blocks = ((h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1)
        if min(blocks) < 1:
            raise ShapeError(
                f"Unfold: input {input.shape} padded by {self._p} has no {self._k} block (dilation {self._d}, stride "
                f"{self._s}): {blocks[0]} * {blocks[1]} sliding blocks"
            )
        # the pool's windows (N, C, oh, ow, kh, kw), movement ops over the padded input, as columns
        windows = x.pad(((0, 0), (0, 0), (ph, ph), (pw, pw)))._pool(self._k, self._s, self._d, gradient_by_taps=True)
        cols = windows.permute((0, 1, 4, 5, 2, 3)).reshape(n, c * kh * kw, blocks[0] * blocks[1])
        return cols if input.ndim == 4 else cols.squeeze(0)


# ---------------------------------------------------------------------------------------------------------------------
# embeddings and bilinear forms


_BAG_MODES = ("sum", "mean", "max")


class EmbeddingBag(Module):
    """The sum, mean or max of bags of rows of `weight` (num_embeddings, embedding_dim), N(0, 1) initialized (the
    `padding_idx` row zeros), as torch.nn.EmbeddingBag: called on a 2-D input (B, L) of B bags, or a 1-D input cut
    into bags at `offsets`, with `per_sample_weights` in mode "sum" (see Tensor.embedding_bag). `max_norm`: each
    looked-up row whose `norm_type`-norm exceeds it is scaled down to it in the weight itself, outside autograd, before
    the lookup (torch's). `sparse=True` is accepted and gives a dense gradient (there are no sparse tensors; every
    optimizer takes it). `scale_grad_by_freq` (modes "sum" and "mean"): each row's gradient is divided by how often its
    index occurs in the input.

    >>> bag = EmbeddingBag.from_pretrained(Tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), mode="sum")
    >>> bag(Tensor([0, 1, 2]), Tensor([0, 2])).tolist()
    [[4.0, 6.0], [5.0, 6.0]]
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        _weight: Tensor | None = None,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        layer = f"EmbeddingBag({num_embeddings}, {embedding_dim})"
        _no_device(device, dtype, layer)
        if mode not in _BAG_MODES:
            raise ValueError(f"{layer}: mode must be 'sum', 'mean' or 'max', got {mode!r}")
        if scale_grad_by_freq and mode == "max":
            # (torch raises at the first call)
            raise ValueError(f"{layer}: max mode does not support scaling the gradient by the frequency")
        if sparse and mode == "max":
            # (torch raises at the first call)
            raise ValueError(f"{layer}: max mode does not support sparse weights")
        if padding_idx is not None:
            if not isinstance(padding_idx, int) or not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(
                    f"{layer}: padding_idx must be an int in [{-num_embeddings}, {num_embeddings}), got {padding_idx!r}"
                )
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.mode, self.sparse = scale_grad_by_freq, mode, sparse
        self.include_last_offset, self.padding_idx = include_last_offset, padding_idx
        if _weight is None:
            table = Tensor._rng().standard_normal((num_embeddings, embedding_dim))
            if padding_idx is not None:
                table[padding_idx] = 0
            self.weight = _host(table)
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError(
                    f"{layer}: _weight must have shape {(num_embeddings, embedding_dim)}, got {_weight.shape}"
                )
            # used as it is, as a Parameter sharing its storage, trained (torch's)
            self.weight = Parameter(_weight)

    def __call__(
        self, input: Tensor, offsets: Tensor | Sequence[int] | None = None, per_sample_weights: Tensor | None = None
    ) -> Tensor:
        if offsets is not None and not isinstance(offsets, Tensor):
            offsets = Tensor(np.asarray(offsets, dtype=np.int64), device=input.device)
        if self.max_norm is not None and dtypes.is_int(input.dtype):
            # (the indices checked first: the renorm writes the weight; other dtypes are refused by the lookup)
            self.weight._check_index_range(input, self.num_embeddings, 0, "embedding_bag", negative=False)
            _renorm_looked_up_rows(input, self.weight, self.max_norm, self.norm_type)
        weight = self.weight
        if self.scale_grad_by_freq and dtypes.is_int(input.dtype):
            weight = _frequency_scaled(input, weight, self.mode, type(self).__name__)
        return input.embedding_bag(
            weight,
            offsets,
            mode=self.mode,
            per_sample_weights=per_sample_weights,
            include_last_offset=self.include_last_offset,
            padding_idx=self.padding_idx,
        )

    @classmethod
    def from_pretrained(
        cls,
        embeddings: Tensor,
        freeze: bool = True,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
    ) -> EmbeddingBag:
        """An EmbeddingBag whose weight is a copy of `embeddings` (num_embeddings, embedding_dim), trained unless
        `freeze` (weight.requires_grad = not freeze), as torch.nn.EmbeddingBag.from_pretrained."""
        if embeddings.ndim != 2:
            raise ValueError(f"EmbeddingBag.from_pretrained: embeddings must be 2-D, got shape {embeddings.shape}")
        rows, cols = embeddings.shape
        # (a copy: torch's Parameter shares the storage)
        weight = _host(embeddings.numpy(), embeddings.dtype, requires_grad=False)
        bag = cls(
            rows,
            cols,
            max_norm,
            norm_type,
            scale_grad_by_freq,
            mode,
            sparse,
            weight,
            include_last_offset,
            padding_idx,
        )
        bag.weight.requires_grad = not freeze
        return bag


class Bilinear(Module):
    """y = x1 @ weight[o] @ x2 + bias[o] for each output o, weight (out_features, in1_features, in2_features) and bias
    initialized U(-1/sqrt(in1_features), 1/sqrt(in1_features)), as torch.nn.Bilinear.

    >>> Bilinear(3, 4, 2)(Tensor.ones(5, 3), Tensor.ones(5, 4)).shape
    (5, 2)
    """

    def __init__(
        self,
        in1_features: int,
        in2_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        layer = f"Bilinear({in1_features}, {in2_features}, {out_features})"
        _no_device(device, dtype, layer)
        sizes = (in1_features, in2_features, out_features)
        if any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in sizes):
            raise ValueError(f"{layer}: in1_features, in2_features and out_features must be ints >= 0")
        self.in1_features, self.in2_features, self.out_features = sizes
        bound = 1 / math.sqrt(in1_features) if in1_features else 0.0
        self.weight = _uniform((out_features, in1_features, in2_features), bound)
        self.bias = _uniform((out_features,), bound) if bias else None

    def __call__(self, input1: Tensor, input2: Tensor) -> Tensor:
        if input1.ndim == 0 or input1.shape[-1] != self.in1_features or input2.ndim == 0:
            raise ShapeError(
                f"Bilinear({self.in1_features}, {self.in2_features}, {self.out_features}): input1 {input1.shape} must "
                f"end in {self.in1_features}, input2 {input2.shape} in {self.in2_features}"
            )
        if input2.shape[-1] != self.in2_features or input1.shape[:-1] != input2.shape[:-1]:
            raise ShapeError(
                f"Bilinear({self.in1_features}, {self.in2_features}, {self.out_features}): input2 {input2.shape} must "
                f"be (*, {self.in2_features}) with input1's leading dims {input1.shape[:-1]}"
            )
        return input1.bilinear(input2, self.weight, self.bias)


# ---------------------------------------------------------------------------------------------------------------------
# power-average pooling


class _LPPool(Module):
    spatial_dims = 1

    def __init__(
        self,
        norm_type: float,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        ceil_mode: bool = False,
    ) -> None:
        n, layer = self.spatial_dims, type(self).__name__
        if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float)) or norm_type == 0:
            raise ValueError(f"{layer}: norm_type must be a non-zero number (inf for the max), got {norm_type!r}")
        _sizes(kernel_size, n, "kernel_size", layer)
        if stride is not None:
            _sizes(stride, n, "stride", layer)
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, stride, ceil_mode

    def __call__(self, input: Tensor) -> Tensor:
        n = self.spatial_dims
        pool = getattr(input, f"lp_pool{n}d")
        if input.ndim not in (n + 1, n + 2):
            raise ShapeError(f"{type(self).__name__}: expected a {n + 1}-D or {n + 2}-D input, got shape {input.shape}")
        return pool(float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)


class LPPool1d(_LPPool):
    """(sum of x^p over each window of the last axis)^(1/p) of (N, C, L) or (C, L), as torch.nn.LPPool1d.

    >>> LPPool1d(2, 2)(Tensor([[3.0, 4.0, 1.0, 0.0]])).tolist()
    [[5.0, 1.0]]
    """


class LPPool2d(_LPPool):
    """LPPool1d over the last two axes of (N, C, H, W) or (C, H, W), as torch.nn.LPPool2d.

    >>> LPPool2d(1, 2)(Tensor.ones(1, 2, 2)).tolist()
    [[[4.0]]]
    """

    spatial_dims = 2


class LPPool3d(_LPPool):
    """LPPool1d over the last three axes of (N, C, D, H, W) or (C, D, H, W), as torch.nn.LPPool3d.

    >>> LPPool3d(1, 2)(Tensor.ones(1, 2, 2, 2)).tolist()
    [[[[8.0]]]]
    """

    spatial_dims = 3


# ---------------------------------------------------------------------------------------------------------------------
# dropout and normalization


class FeatureAlphaDropout(Module):
    """AlphaDropout of whole channels (one draw per (sample, channel), axis 1) in training mode, as
    torch.nn.FeatureAlphaDropout; the input itself in eval mode.

    >>> FeatureAlphaDropout(0.2).eval()(Tensor.ones(1, 2, 2)).tolist()
    [[[1.0, 1.0], [1.0, 1.0]]]
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        _probability(p, "FeatureAlphaDropout")
        self.p, self.inplace = p, inplace

    def __call__(self, x: Tensor) -> Tensor:
        if not Tensor.training or self.p == 0:
            return x
        return _maybe_in_place(x, self.inplace, lambda: self._dropped(x), "feature_alpha_dropout_")

    def _dropped(self, x: Tensor) -> Tensor:
        return x.feature_alpha_dropout(self.p, training=True)


class CrossMapLRN2d(Module):
    """Local response normalization across the channels of (N, C, H, W): x * (k + alpha / size * s)^-beta with s the
    sum of x^2 over a window of channels, as torch.nn.CrossMapLRN2d computes it, which is not LocalResponseNorm: its
    window of channel c runs from c - h to c + h (h = (size - 1) // 2, clipped to the channels) and always holds
    channel 0 too (torch's running window never drops it). The gradient is the true one of this forward; torch's own
    backward is not (see docs/semantics.md).

    >>> CrossMapLRN2d(1, alpha=1.0, beta=1.0, k=0.0)(Tensor([[[[2.0]]]])).tolist()
    [[[[0.5]]]]
    """

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"CrossMapLRN2d: size must be a positive int, got {size!r}")
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def __call__(self, input: Tensor) -> Tensor:
        if input.ndim != 4:
            raise ShapeError(f"CrossMapLRN2d: expected a 4-D input (N, C, H, W), got shape {input.shape}")
        channels, h = input.shape[1], (self.size - 1) // 2
        # window[c, j]: channel j is in channel c's window
        c, j = np.arange(channels)[:, None], np.arange(channels)[None, :]
        window = ((abs(c - j) <= h) | (j == 0)).astype(np.float32)
        x = input._float()
        summed = (x * x).permute((0, 2, 3, 1)) @ Tensor(window.T, device=input.device).cast(x.dtype)
        scale = self.k + self.alpha / self.size * summed.permute((0, 3, 1, 2))
        return x * scale.pow(-self.beta)
