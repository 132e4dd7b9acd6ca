"""torch.nn's stateless and lightly stateful layers as plain classes (tinygrad style) over Tensor methods: reshaping and
upsampling, normalizations by other names, distances, losses, channel dropouts (pooling and padding are in
nn/pooling.py, activations in nn/activations.py); compared with torch in
tests/test_nn_layers.py.

Each takes torch's constructor arguments (in torch's order, with its defaults) and names its tensors as torch does
(PReLU's `weight`, a loss' `weight` and `pos_weight` buffers), so a torch state dict loads as it is.

>>> from uopkit import Tensor
>>> from uopkit.nn import Conv2d, Flatten, LeakyReLU, MaxPool2d, Sequential
>>> Sequential(Conv2d(1, 2, 3), LeakyReLU(0.1), MaxPool2d(2), Flatten())(Tensor.ones(1, 1, 6, 6)).shape
(1, 8)
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from uopkit.nn.arguments import _SPATIAL, _maybe_in_place, _probability
from uopkit.nn.module import Module
from uopkit.nn.modules import BatchNorm, LayerNorm, _host
from uopkit.tensor import ArgumentError, ShapeError, Tensor
from uopkit.tensor.autocast import FLOAT32, autocast_op
from uopkit.tensor.resample import UnsupportedRankError

__all__ = [
    "Unflatten",
    "PixelShuffle",
    "PixelUnshuffle",
    "Upsample",
    "UpsamplingNearest2d",
    "UpsamplingBilinear2d",
    "ChannelShuffle",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "SyncBatchNorm",
    "LayerNorm2d",
    "LocalResponseNorm",
    "CosineSimilarity",
    "PairwiseDistance",
    "L1Loss",
    "MSELoss",
    "SmoothL1Loss",
    "HuberLoss",
    "BCELoss",
    "BCEWithLogitsLoss",
    "CrossEntropyLoss",
    "NLLLoss",
    "KLDivLoss",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "AlphaDropout",
]


# ---------------------------------------------------------------------------------------------------------------------
# reshaping and upsampling


class Unflatten(Module):
    """Split axis `dim` into `unflattened_size` (one may be -1), as torch.nn.Unflatten (Flatten's inverse).

    >>> Unflatten(1, (2, 3))(Tensor.ones(4, 6)).shape
    (4, 2, 3)
    """

    def __init__(self, dim: int, unflattened_size: Sequence[int]) -> None:
        if not isinstance(dim, int) or isinstance(unflattened_size, (str, int)):
            raise TypeError(
                f"Unflatten: dim must be an int and unflattened_size a sequence of ints, got {dim!r} and "
                f"{unflattened_size!r} (named dims aren't supported)"
            )
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def __call__(self, x: Tensor) -> Tensor:
        return x.unflatten(self.dim, self.unflattened_size)


class PixelShuffle(Module):
    """(*, C r^2, H, W) -> (*, C, H r, W r) with r = upscale_factor, as torch.nn.PixelShuffle.

    >>> PixelShuffle(2)(Tensor.ones(1, 8, 3, 3)).shape
    (1, 2, 6, 6)
    """

    def __init__(self, upscale_factor: int) -> None:
        self.upscale_factor = upscale_factor

    def __call__(self, x: Tensor) -> Tensor:
        return x.pixel_shuffle(self.upscale_factor)


class PixelUnshuffle(Module):
    """(*, C, H r, W r) -> (*, C r^2, H, W) with r = downscale_factor, as torch.nn.PixelUnshuffle.

    >>> PixelUnshuffle(2)(Tensor.ones(1, 2, 6, 6)).shape
    (1, 8, 3, 3)
    """

    def __init__(self, downscale_factor: int) -> None:
        self.downscale_factor = downscale_factor

    def __call__(self, x: Tensor) -> Tensor:
        return x.pixel_unshuffle(self.downscale_factor)


_UPSAMPLE_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")
# the input rank a mode is made for, as torch checks it
_MODE_RANK = {"linear": 3, "bilinear": 4, "bicubic": 4, "trilinear": 5}


class Upsample(Module):
    """Resize the spatial axes (all but N and C) to `size` or by `scale_factor`, as torch.nn.Upsample (see
    Tensor.interpolate for the modes).

    >>> Upsample(scale_factor=2)(Tensor([[[1.0, 2.0]]])).tolist()
    [[[1.0, 1.0, 2.0, 2.0]]]
    """

    def __init__(
        self,
        size: int | Sequence[int] | None = None,
        scale_factor: float | Sequence[float] | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ) -> None:
        layer = type(self).__name__
        if (size is None) == (scale_factor is None):
            raise ValueError(f"{layer}: give exactly one of size and scale_factor")
        if mode not in _UPSAMPLE_MODES:
            raise ValueError(f"{layer}: mode must be one of {', '.join(_UPSAMPLE_MODES)}, got {mode!r}")
        if align_corners is not None and mode not in _MODE_RANK:
            raise ValueError(f"{layer}: align_corners can only be set with the linear and bicubic modes, not {mode!r}")
        self.size, self.mode, self.align_corners = size, mode, align_corners
        self.recompute_scale_factor = recompute_scale_factor
        self.scale_factor: float | tuple[float, ...] | None
        if isinstance(scale_factor, Sequence):
            self.scale_factor = tuple(float(f) for f in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor is not None else None

    def __call__(self, x: Tensor) -> Tensor:
        rank = _MODE_RANK.get(self.mode)
        if rank is not None and x.ndim != rank:
            raise UnsupportedRankError(
                f"{type(self).__name__}: mode {self.mode!r} needs a {rank}-d input, got shape {x.shape}"
            )
        if not 3 <= x.ndim <= 5:
            raise UnsupportedRankError(
                f"{type(self).__name__}: expected a 3-d, 4-d or 5-d input (N, C, ...), got {x.shape}"
            )
        return x.interpolate(self.size, self.scale_factor, self.mode, self.align_corners, self.recompute_scale_factor)


class UpsamplingNearest2d(Upsample):
    """Upsample(size, scale_factor, mode="nearest"), as torch.nn.UpsamplingNearest2d.

    >>> UpsamplingNearest2d(scale_factor=2)(Tensor.ones(1, 1, 2, 3)).shape
    (1, 1, 4, 6)
    """

    def __init__(self, size: int | Sequence[int] | None = None, scale_factor: float | Sequence[float] | None = None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Upsample(size, scale_factor, mode="bilinear", align_corners=True) of (N, C, H, W), as
    torch.nn.UpsamplingBilinear2d.

    >>> UpsamplingBilinear2d(size=3)(Tensor([[[[0.0, 2.0], [0.0, 2.0]]]])).tolist()[0][0][0]
    [0.0, 1.0, 2.0]
    """

    def __init__(self, size: int | Sequence[int] | None = None, scale_factor: float | Sequence[float] | None = None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class ChannelShuffle(Module):
    """Interleave the channels (axis 1) of `groups` groups: (N, g, C / g, ...) -> (N, C / g, g, ...), as
    torch.nn.ChannelShuffle.

    >>> ChannelShuffle(2)(Tensor.arange(4).reshape(1, 4, 1)).flatten().tolist()
    [0, 2, 1, 3]
    """

    def __init__(self, groups: int) -> None:
        if not isinstance(groups, int) or groups < 1:
            raise ValueError(f"ChannelShuffle: groups must be a positive int, got {groups!r}")
        self.groups = groups

    def __call__(self, x: Tensor) -> Tensor:
        g = self.groups
        if x.ndim < 3 or x.shape[1] % g:
            raise ShapeError(
                f"ChannelShuffle({g}): expected input (N, C, ...) with C divisible by {g}, got shape {x.shape}"
            )
        return x.channel_shuffle(g)


# ---------------------------------------------------------------------------------------------------------------------
# normalizations by torch's (and tinygrad's) other names, and distances


class BatchNorm1d(BatchNorm):
    """BatchNorm over the channels of (N, C) or (N, C, L), torch.nn.BatchNorm1d's arguments and state names
    (weight, bias, running_mean, running_var, num_batches_tracked).

    >>> BatchNorm1d(3)(Tensor.ones(2, 3)).shape
    (2, 3)
    """

    ranks: tuple[int, ...] = (2, 3)

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__(num_features, eps, affine, track_running_stats, momentum)
        self.num_features, self.affine = num_features, affine

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim not in self.ranks:
            dims = " or ".join(f"{r}-d" for r in self.ranks)
            raise ShapeError(f"{type(self).__name__}({self.sz}): expected a {dims} input, got shape {x.shape}")
        return super().__call__(x)


class BatchNorm2d(BatchNorm1d):
    """BatchNorm over the channels of (N, C, H, W), as torch.nn.BatchNorm2d (its arguments in its order: momentum
    before affine; tinygrad's order is `BatchNorm`'s).

    >>> BatchNorm2d(2)(Tensor.ones(2, 2, 1, 1)).shape
    (2, 2, 1, 1)
    """

    ranks = (4,)


class BatchNorm3d(BatchNorm1d):
    """BatchNorm over the channels of (N, C, D, H, W), as torch.nn.BatchNorm3d.

    >>> BatchNorm3d(2)(Tensor.ones(2, 2, 1, 1, 1)).shape
    (2, 2, 1, 1, 1)
    """

    ranks = (5,)


class SyncBatchNorm(BatchNorm1d):
    """torch.nn.SyncBatchNorm: BatchNorm over the channels (axis 1) of an input of 2 or more dims. torch's averages the
    batch statistics over the processes of `process_group` when torch.distributed runs, and without it normalizes by
    the batch's own, as BatchNorm; uopkit runs in one process, so it is always the latter (`process_group` is kept,
    unused). `SyncBatchNorm.convert_sync_batchnorm(model)` swaps every BatchNorm of a model for one, as SSL training
    scripts (DINO, BYOL, SwAV) do before they train.

    >>> SyncBatchNorm(3)(Tensor.ones(2, 3, 4, 4, 4, 4)).shape
    (2, 3, 4, 4, 4, 4)
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group: Any = None,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_group = process_group

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2:
            raise ShapeError(f"SyncBatchNorm({self.sz}): expected an input of 2 or more dims, got shape {x.shape}")
        return BatchNorm.__call__(self, x)

    @classmethod
    def convert_sync_batchnorm(cls, module: Any, process_group: Any = None) -> Any:
        """`module` with every BatchNorm in it (itself included) replaced by a SyncBatchNorm that holds the same
        parameters and running statistics (the tensor objects: an optimizer built before still steps them) and the
        same training mode, as torch's; the other modules are kept, their BatchNorm children replaced."""
        out = module
        if isinstance(module, BatchNorm):
            out = cls(
                module.sz,
                module.eps,
                module.momentum,
                module.weight is not None,
                module.track_running_stats,
                process_group,
            )
            for name in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
                setattr(out, name, getattr(module, name))
            out.training = module.training
        if isinstance(module, Module):
            for name, child in list(vars(module).items()):
                if isinstance(child, Module):
                    setattr(out, name, cls.convert_sync_batchnorm(child, process_group))
                elif isinstance(child, list) and any(isinstance(c, Module) for c in child):
                    # (a tinygrad-style plain list of layers)
                    child[:] = [cls.convert_sync_batchnorm(c, process_group) for c in child]
        return out


class LayerNorm2d(LayerNorm):
    """tinygrad's LayerNorm2d: LayerNorm over the channels (axis 1) of (N, C, H, W), at each position.

    >>> [round(v, 4) for v in LayerNorm2d(2)(Tensor([[[[1.0]], [[3.0]]]])).flatten().tolist()]
    [-1.0, 1.0]
    """

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2:
            raise ShapeError(f"LayerNorm2d({self.normalized_shape}): expected input (N, C, ...), got shape {x.shape}")
        return super().__call__(x.movedim(1, -1)).movedim(-1, 1)


class LocalResponseNorm(Module):
    """x / (k + alpha / size * sum of x^2 over `size` neighbouring channels)^beta, the window of channel c running from
    c - size // 2 to c + (size - 1) // 2 (zeros past the ends), as torch.nn.LocalResponseNorm.

    >>> LocalResponseNorm(1, alpha=1.0, beta=1.0, k=0.0)(Tensor([[[2.0]]])).tolist()
    [[[0.5]]]
    """

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> None:
        if not isinstance(size, int) or size < 1:
            raise ArgumentError(f"LocalResponseNorm: size must be a positive int, got {size!r}")
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 3:
            raise ShapeError(f"LocalResponseNorm: expected input (N, C, ...) of 3 or more dims, got shape {x.shape}")
        return x.local_response_norm(self.size, self.alpha, self.beta, self.k)


class CosineSimilarity(Module):
    """sum(x1 * x2) / (max(||x1||, eps) * max(||x2||, eps)) along `dim`, as torch.nn.CosineSimilarity.

    >>> CosineSimilarity(dim=0)(Tensor([1.0, 0.0]), Tensor([2.0, 0.0])).tolist()
    1.0
    """

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        self.dim, self.eps = dim, eps

    def __call__(self, x1: Tensor, x2: Tensor) -> Tensor:
        return x1.cosine_similarity(x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """||x1 - x2 + eps||_p over the last axis, as torch.nn.PairwiseDistance.

    >>> PairwiseDistance(eps=0.0)(Tensor([[3.0, 0.0]]), Tensor([[0.0, 4.0]])).tolist()
    [5.0]
    """

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def __call__(self, x1: Tensor, x2: Tensor) -> Tensor:
        if max(x1.ndim, x2.ndim) == 0:
            raise ShapeError(f"PairwiseDistance: inputs need an axis to take the norm along, got {x1.shape}")
        return x1.pairwise_distance(x2, self.norm, self.eps, self.keepdim)


# ---------------------------------------------------------------------------------------------------------------------
# losses: __call__(input, target) over the Tensor's losses


def _reduction(size_average: bool | None, reduce: bool | None, reduction: str, layer: str, extra: tuple = ()) -> str:
    if size_average is not None or reduce is not None:
        # torch's deprecated pair: reduce=False keeps every term, size_average=False sums them
        reduction = "none" if reduce is False else "sum" if size_average is False else "mean"
        warnings.warn(f"{layer}: size_average and reduce are deprecated, use reduction={reduction!r}", stacklevel=3)
    if reduction not in ("none", "mean", "sum") + extra:
        names = ", ".join(repr(r) for r in ("none", "mean", "sum") + extra)
        raise ValueError(f"{layer}: reduction must be one of {names}, got {reduction!r}")
    return reduction


def _buffer(value: Any) -> Tensor | None:
    # a loss' weight (for `register_buffer`: torch's registered buffer, so it is in the state dict): a Tensor as it is,
    # a list or an array as a float32 one
    if value is None or isinstance(value, Tensor):
        return value
    return _host(np.asarray(value, dtype=np.float32), requires_grad=False)


class _Loss(Module):
    # (a loss on torch's autocast float32 list decorates its __call__ with autocast_op(FLOAT32), as its nn.functional
    # form: under autocast nn.CrossEntropyLoss computes in float32 as F.cross_entropy does)
    def __init__(self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean") -> None:
        self.reduction = _reduction(size_average, reduce, reduction, type(self).__name__)


class _WeightedLoss(_Loss):
    # torch's base of the losses with a per-class `weight` buffer (user losses subclass it, as torch's
    # nn.modules.loss._WeightedLoss: `super().__init__(weight, reduction=...)` and `self.weight` in forward)
    def __init__(
        self,
        weight: Tensor | Sequence[float] | None = None,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", _buffer(weight))


class L1Loss(_Loss):
    """|input - target|, reduced by `reduction` ("mean", "sum" or "none"), as torch.nn.L1Loss.

    >>> L1Loss()(Tensor([1.0, -3.0]), Tensor([0.0, 0.0])).tolist()
    2.0
    """

    @autocast_op(FLOAT32)
    def __call__(self, input: Tensor, target: Tensor) -> Tensor:
        return input.l1_loss(target, self.reduction)


class MSELoss(_Loss):
    """(input - target)^2, reduced by `reduction`, as torch.nn.MSELoss.

    >>> MSELoss(reduction="sum")(Tensor([1.0, 3.0]), Tensor([0.0, 0.0])).tolist()
    10.0
    """

    @autocast_op(FLOAT32)
    def __call__(self, input: Tensor, target: Tensor) -> Tensor:
        return input.mse_loss(target, self.reduction)


class SmoothL1Loss(_Loss):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target), as torch.nn.SmoothL1Loss.

    >>> SmoothL1Loss(reduction="none")(Tensor([0.5, 3.0]), Tensor([0.0, 0.0])).tolist()
    [0.125, 2.5]
    """

    def __init__(
        self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean", beta: float = 1.0
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        if beta < 0:
            raise ValueError(f"SmoothL1Loss: beta must be >= 0, got {beta}")
        self.beta = beta

    @autocast_op(FLOAT32)
    def __call__(self, input: Tensor, target: Tensor) -> Tensor:
        return input.smooth_l1_loss(target, self.reduction, self.beta)


class HuberLoss(_Loss):
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta) (d = input - target), as torch.nn.HuberLoss.

    >>> HuberLoss(reduction="none", delta=2.0)(Tensor([0.5, 3.0]), Tensor([0.0, 0.0])).tolist()
    [0.125, 4.0]
    """

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction=reduction)
        if not delta > 0:
            raise ValueError(f"HuberLoss: delta must be > 0, got {delta}")
        self.delta = delta

    @autocast_op(FLOAT32)
    def __call__(self, input: Tensor, target: Tensor) -> Tensor:
        return input.huber_loss(target, self.reduction, self.delta)


class BCELoss(_WeightedLoss):
    """-(y log p + (1 - y) log(1 - p)) of probabilities p, times `weight` (broadcast to the input), as
    torch.nn.BCELoss.

    >>> round(BCELoss()(Tensor([0.5]), Tensor([1.0])).item(), 5)
    0.69315
    """

    @autocast_op(FLOAT32)
    def __call__(self, input: Tensor, target: Tensor) -> Tensor:
        return input.binary_cross_entropy(target, self.reduction, self.weight)


class BCEWithLogitsLoss(_WeightedLoss):
    """BCELoss of sigmoid(input), computed stably from the logits, with `weight` and `pos_weight` (the positive
    term's weight per class, broadcast along the last axis), as torch.nn.BCEWithLogitsLoss.

    >>> round(BCEWithLogitsLoss()(Tensor([0.0]), Tensor([1.0])).item(), 5)
    0.69315
    """

    def __init__(
        self,
        weight: Tensor | Sequence[float] | None = None,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
        pos_weight: Tensor | Sequence[float] | None = None,
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.register_buffer("pos_weight", _buffer(pos_weight))

    @autocast_op(FLOAT32)
    def __call__(self, input: Tensor, target: Tensor) -> Tensor:
        return input.binary_cross_entropy_with_logits(target, self.reduction, self.pos_weight, self.weight)


class CrossEntropyLoss(_WeightedLoss):
    """Cross entropy of logits (N, C, ...) or (C,) against class indices or class probabilities, with per-class
    `weight`, `ignore_index` and `label_smoothing`, as torch.nn.CrossEntropyLoss.

    >>> round(CrossEntropyLoss()(Tensor([[0.0, 0.0]]), Tensor([1])).item(), 5)
    0.69315
    """

    def __init__(
        self,
        weight: Tensor | Sequence[float] | None = None,
        size_average: bool | None = None,
        ignore_index: int = -100,
        reduce: bool | None = None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"CrossEntropyLoss: label_smoothing must be in [0, 1], got {label_smoothing}")
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    @autocast_op(FLOAT32)
    def __call__(self, input: Tensor, target: Tensor) -> Tensor:
        return input.cross_entropy(target, self.reduction, self.label_smoothing, self.ignore_index, self.weight)


class NLLLoss(_WeightedLoss):
    """Negative log likelihood of log-probabilities (N, C, ...) at class indices (N, ...), with per-class `weight`
    and `ignore_index`, as torch.nn.NLLLoss.

    >>> NLLLoss()(Tensor([[-1.0, -2.0]]), Tensor([1])).tolist()
    2.0
    """

    def __init__(
        self,
        weight: Tensor | Sequence[float] | None = None,
        size_average: bool | None = None,
        ignore_index: int = -100,
        reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    @autocast_op(FLOAT32)
    def __call__(self, input: Tensor, target: Tensor) -> Tensor:
        return input.nll_loss(target, self.weight, self.ignore_index, self.reduction)


class KLDivLoss(Module):
    """target * (log(target) - input) of log-probabilities `input` (log_target: the target is a log-probability
    too), as torch.nn.KLDivLoss; reduction "batchmean" divides the sum by the batch size (the KL divergence), "mean"
    (the default) by the number of elements.

    >>> round(KLDivLoss(reduction="batchmean")(Tensor([[-1.0, -1.0]]), Tensor([[0.5, 0.5]])).item(), 5)
    0.30685
    """

    def __init__(
        self,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
        log_target: bool = False,
    ) -> None:
        self.reduction = _reduction(size_average, reduce, reduction, "KLDivLoss", ("batchmean",))
        self.log_target = log_target

    @autocast_op(FLOAT32)
    def __call__(self, input: Tensor, target: Tensor) -> Tensor:
        return input.kl_div(target, self.reduction, self.log_target)


# ---------------------------------------------------------------------------------------------------------------------
# dropout of whole channels, and alpha dropout: active in training mode only, as nn.Dropout


class _ChannelDropout(Module):
    spatial_dims = 2

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        _probability(p, type(self).__name__)
        self.p, self.inplace = p, inplace

    def _checked(self, x: Tensor) -> int:
        # how many leading axes a channel's mask covers: N and C, or C alone on an unbatched input
        n, layer = self.spatial_dims, type(self).__name__
        if x.ndim not in (n + 1, n + 2):
            if n == 1 or x.ndim < 2:
                raise ShapeError(f"{layer}: expected input (N, C, {_SPATIAL[n]}) or (C, {_SPATIAL[n]}), got {x.shape}")
            # (torch's Dropout2d and Dropout3d only warn there)
            warnings.warn(f"{layer}: a {x.ndim}-d input is deprecated (as in PyTorch)", UserWarning, stacklevel=3)
        if n == 2:
            if x.ndim == 3:
                # torch's historical choice: a 3-d input is (N, C, L), not an unbatched (C, H, W)
                warnings.warn(f"{layer}: a 3-d input is taken as (N, C, L) (as PyTorch)", UserWarning, stacklevel=3)
            # (any rank: the channels are axis 1, as torch's)
            return 2
        return 2 if x.ndim == n + 2 else 1

    def __call__(self, x: Tensor) -> Tensor:
        lead = self._checked(x)
        if not Tensor.training or self.p == 0:
            return x
        return _maybe_in_place(x, self.inplace, lambda: self._dropped(x, lead), f"{type(self).__name__.lower()}_")

    def _dropped(self, x: Tensor, lead: int) -> Tensor:
        # (the Tensor's channel dropout, whose checks and warnings this layer has made already)
        return x._feature_dropout(self.p, True, False, type(self).__name__.lower(), batched=lead == 2)


class Dropout1d(_ChannelDropout):
    """Zero each channel of (N, C, L) or (C, L) with probability p and scale the rest by 1 / (1 - p) in training
    mode, as torch.nn.Dropout1d; the input itself in eval mode.

    >>> Dropout1d(0.5).eval()(Tensor.ones(1, 2, 3)).tolist()
    [[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]]
    """

    spatial_dims = 1


class Dropout2d(_ChannelDropout):
    """Zero each channel of (N, C, H, W) with probability p in training mode, as torch.nn.Dropout2d (which
    takes a 3-d input as (N, C, L), with a warning, not as an unbatched (C, H, W)).

    >>> Dropout2d(0.5).eval()(Tensor.ones(1, 1, 1, 2)).tolist()
    [[[[1.0, 1.0]]]]
    """


class Dropout3d(_ChannelDropout):
    """Zero each channel of (N, C, D, H, W) or (C, D, H, W) with probability p in training mode, as
    torch.nn.Dropout3d.

    >>> Dropout3d(0.5)(Tensor.ones(1, 1, 1, 1, 1)).shape
    (1, 1, 1, 1, 1)
    """

    spatial_dims = 3


class AlphaDropout(Module):
    """Dropout that keeps SELU's zero mean and unit variance, in training mode: each element is set to SELU's
    low value with probability p, then everything scaled and shifted (a = ((1 - p) (1 + p low^2))^-1/2, b = -a low p)
    so that the mean and the variance are kept, as torch.nn.AlphaDropout; the input itself in eval mode.

    >>> AlphaDropout(0.2).eval()(Tensor([1.0, -1.0])).tolist()
    [1.0, -1.0]
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        _probability(p, "AlphaDropout")
        self.p, self.inplace = p, inplace

    def __call__(self, x: Tensor) -> Tensor:
        if not Tensor.training or self.p == 0:
            return x
        return _maybe_in_place(x, self.inplace, lambda: self._dropped(x), "alpha_dropout_")

    def _dropped(self, x: Tensor) -> Tensor:
        return x.alpha_dropout(self.p, training=True)
