"""torch.nn.functional's losses over Tensor methods (re-exported by uopkit.nn.functional), with torch's argument
order, its deprecated size_average/reduce pair included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from uopkit.nn.functional.arguments import _reduction, _tensor_input
from uopkit.nn.functional.layers import linear
from uopkit.tensor import Tensor
from uopkit.tensor.autocast import FLOAT32, autocast_op

__all__ = [
    "cross_entropy", "linear_cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "kl_div", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "poisson_nll_loss", "gaussian_nll_loss",
    "margin_ranking_loss", "hinge_embedding_loss", "soft_margin_loss", "multilabel_soft_margin_loss",
    "multilabel_margin_loss", "multi_margin_loss", "cosine_embedding_loss", "triplet_margin_loss",
    "triplet_margin_with_distance_loss", "ctc_loss",
]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# losses: size_average and reduce are torch's deprecated pair (they override reduction, with a warning)


@autocast_op(FLOAT32)
@_tensor_input
def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """torch.nn.functional.cross_entropy."""
    reduction = _reduction(size_average, reduce, reduction, "cross_entropy")
    return input.cross_entropy(target, reduction, label_smoothing, ignore_index, weight)


@autocast_op(FLOAT32)
@_tensor_input
def linear_cross_entropy(
    input: Tensor,
    linear_weight: Tensor,
    target: Tensor,
    *,
    linear_bias: Tensor | None = None,
    weight: Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int | None = None,
    label_smoothing: float = 0.0,
    options: Any = None,
) -> Tensor:
    """torch.nn.functional.linear_cross_entropy: cross_entropy(linear(input, linear_weight, linear_bias), target)
    (options, torch's chunking strategy, is accepted and unused: the result is the same)."""
    logits = linear(input, linear_weight, linear_bias)
    ignore = -100 if ignore_index is None else ignore_index
    return logits.cross_entropy(target, reduction, label_smoothing, ignore, weight)


@autocast_op(FLOAT32)
@_tensor_input
def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """torch.nn.functional.nll_loss."""
    reduction = _reduction(size_average, reduce, reduction, "nll_loss")
    return input.nll_loss(target, weight, ignore_index, reduction)


@autocast_op(FLOAT32)
@_tensor_input
def binary_cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """torch.nn.functional.binary_cross_entropy."""
    reduction = _reduction(size_average, reduce, reduction, "binary_cross_entropy")
    return input.binary_cross_entropy(target, reduction, weight)


@autocast_op(FLOAT32)
@_tensor_input
def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """torch.nn.functional.binary_cross_entropy_with_logits."""
    reduction = _reduction(size_average, reduce, reduction, "binary_cross_entropy_with_logits")
    return input.binary_cross_entropy_with_logits(target, reduction, pos_weight, weight)


@autocast_op(FLOAT32)
@_tensor_input
def kl_div(
    input: Tensor,
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    """torch.nn.functional.kl_div."""
    return input.kl_div(target, _reduction(size_average, reduce, reduction, "kl_div"), log_target)


@autocast_op(FLOAT32)
@_tensor_input
def mse_loss(
    input: Tensor,
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    weight: Tensor | None = None,
) -> Tensor:
    """torch.nn.functional.mse_loss."""
    return input.mse_loss(target, _reduction(size_average, reduce, reduction, "mse_loss"), weight)


@autocast_op(FLOAT32)
@_tensor_input
def l1_loss(
    input: Tensor,
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    weight: Tensor | None = None,
) -> Tensor:
    """torch.nn.functional.l1_loss."""
    return input.l1_loss(target, _reduction(size_average, reduce, reduction, "l1_loss"), weight)


@autocast_op(FLOAT32)
@_tensor_input
def smooth_l1_loss(
    input: Tensor,
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    """torch.nn.functional.smooth_l1_loss."""
    return input.smooth_l1_loss(target, _reduction(size_average, reduce, reduction, "smooth_l1_loss"), beta)


@autocast_op(FLOAT32)
@_tensor_input
def huber_loss(
    input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0, weight: Tensor | None = None
) -> Tensor:
    """torch.nn.functional.huber_loss."""
    return input.huber_loss(target, reduction, delta, weight)


@autocast_op(FLOAT32)
@_tensor_input
def poisson_nll_loss(
    input: Tensor,
    target: Tensor,
    log_input: bool = True,
    full: bool = False,
    size_average: bool | None = None,
    eps: float = 1e-8,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """torch.nn.functional.poisson_nll_loss."""
    reduction = _reduction(size_average, reduce, reduction, "poisson_nll_loss")
    return input.poisson_nll_loss(target, log_input, full, eps, reduction)


@_tensor_input
def gaussian_nll_loss(
    input: Tensor, target: Tensor, var: Tensor | float, full: bool = False, eps: float = 1e-6, reduction: str = "mean"
) -> Tensor:
    """torch.nn.functional.gaussian_nll_loss."""
    return input.gaussian_nll_loss(target, var, full, eps, reduction)


@autocast_op(FLOAT32)
@_tensor_input
def margin_ranking_loss(
    input1: Tensor,
    input2: Tensor,
    target: Tensor,
    margin: float = 0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """torch.nn.functional.margin_ranking_loss."""
    reduction = _reduction(size_average, reduce, reduction, "margin_ranking_loss")
    return input1.margin_ranking_loss(input2, target, margin, reduction)


@autocast_op(FLOAT32)
@_tensor_input
def hinge_embedding_loss(
    input: Tensor,
    target: Tensor,
    margin: float = 1.0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """torch.nn.functional.hinge_embedding_loss."""
    reduction = _reduction(size_average, reduce, reduction, "hinge_embedding_loss")
    return input.hinge_embedding_loss(target, margin, reduction)


@autocast_op(FLOAT32)
@_tensor_input
def soft_margin_loss(
    input: Tensor,
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """torch.nn.functional.soft_margin_loss."""
    return input.soft_margin_loss(target, _reduction(size_average, reduce, reduction, "soft_margin_loss"))


@_tensor_input
def multilabel_soft_margin_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """torch.nn.functional.multilabel_soft_margin_loss."""
    reduction = _reduction(size_average, reduce, reduction, "multilabel_soft_margin_loss")
    return input.multilabel_soft_margin_loss(target, weight, reduction)


@autocast_op(FLOAT32)
@_tensor_input
def multilabel_margin_loss(
    input: Tensor,
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """torch.nn.functional.multilabel_margin_loss."""
    return input.multilabel_margin_loss(target, _reduction(size_average, reduce, reduction, "multilabel_margin_loss"))


@autocast_op(FLOAT32)
@_tensor_input
def multi_margin_loss(
    input: Tensor,
    target: Tensor,
    p: int = 1,
    margin: float = 1.0,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """torch.nn.functional.multi_margin_loss."""
    reduction = _reduction(size_average, reduce, reduction, "multi_margin_loss")
    return input.multi_margin_loss(target, p, margin, weight, reduction)


@autocast_op(FLOAT32)
@_tensor_input
def cosine_embedding_loss(
    input1: Tensor,
    input2: Tensor,
    target: Tensor,
    margin: float = 0,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """torch.nn.functional.cosine_embedding_loss."""
    reduction = _reduction(size_average, reduce, reduction, "cosine_embedding_loss")
    return input1.cosine_embedding_loss(input2, target, margin, reduction)


@autocast_op(FLOAT32)
@_tensor_input
def triplet_margin_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    margin: float = 1.0,
    p: float = 2,
    eps: float = 1e-6,
    swap: bool = False,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """torch.nn.functional.triplet_margin_loss."""
    reduction = _reduction(size_average, reduce, reduction, "triplet_margin_loss")
    return anchor.triplet_margin_loss(positive, negative, margin, p, eps, swap, reduction)


@_tensor_input
def triplet_margin_with_distance_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    *,
    distance_function: Callable[[Tensor, Tensor], Tensor] | None = None,
    margin: float = 1.0,
    swap: bool = False,
    reduction: str = "mean",
) -> Tensor:
    """torch.nn.functional.triplet_margin_with_distance_loss."""
    return anchor.triplet_margin_with_distance_loss(
        positive, negative, distance_function=distance_function, margin=margin, swap=swap, reduction=reduction
    )


@autocast_op(FLOAT32)
@_tensor_input
def ctc_loss(
    log_probs: Tensor,
    targets: Tensor,
    input_lengths: Any,
    target_lengths: Any,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> Tensor:
    """torch.nn.functional.ctc_loss."""
    return log_probs.ctc_loss(targets, input_lengths, target_lengths, blank, reduction, zero_infinity)
