"""torch's top-level functional names with torch's own argument order, as a port reaches them: `Tensor.X(...)` for
`torch.X(...)` (`tensor/torch_functions.py`: `Tensor.layer_norm` is read from here; `Tensor.kl_div` here when read
from the class, the method when read from a tensor). torch's top-level functions take their arguments in another
order than `torch.nn.functional`'s (`torch.batch_norm(input, weight, bias, running_mean, running_var, training,
momentum, eps, cudnn_enabled)`, `torch.embedding(weight, indices)`), with no defaults where F has some
(`torch.dropout(input, p, train)`), and the losses take torch's reduction numbers (0 none, 1 mean, 2 sum; left out:
0, what torch's own functions get, not the mean F's take). Each one forwards to `uopkit.nn.functional` or to the
Tensor method; `cudnn_enable(d)` and `sparse` change nothing. Compared with torch in tests/test_torch_top_level.py."""

from __future__ import annotations

from typing import Any

from uopkit.nn import functional as F
from uopkit.tensor import Tensor

# torch's reduction numbers (at::Reduction): 1 the mean, 2 the sum, any other number no reduction
_REDUCTIONS = {1: "mean", 2: "sum"}


def _reduction(reduction: Any, fn: str) -> str:
    if isinstance(reduction, bool) or not isinstance(reduction, int):
        raise TypeError(
            f"{fn}: reduction is torch's number here (0 none, 1 mean, 2 sum), got {type(reduction).__name__} "
            f"{reduction!r}; torch.nn.functional's {fn} takes the names"
        )
    return _REDUCTIONS.get(reduction, "none")


def _stride(stride: Any) -> Any:
    # torch's top-level pools take stride=[] (their default) for the kernel size
    return None if isinstance(stride, (list, tuple)) and not stride else stride


# ---------------------------------------------------------------------------------------------------------------------
# norms


def layer_norm(
    input: Tensor,
    normalized_shape: Any,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    cudnn_enable: bool = True,
) -> Tensor:
    """torch.layer_norm: normalized over the trailing `normalized_shape` axes, then scaled and shifted.

    >>> [round(v, 4) for v in Tensor.layer_norm(Tensor([[1.0, 3.0]]), [2]).flatten().tolist()]
    [-1.0, 1.0]
    """
    return F.layer_norm(input, normalized_shape, weight, bias, eps)


def batch_norm(
    input: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool,
) -> Tensor:
    """torch.batch_norm: F.batch_norm's arguments in torch's top-level order (the affine ones before the running
    statistics, which training updates in place).

    >>> x = Tensor([[1.0], [3.0]])
    >>> Tensor.batch_norm(x, None, None, None, None, True, 0.1, 0.0, False).flatten().tolist()
    [-1.0, 1.0]
    """
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def instance_norm(
    input: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    use_input_stats: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool,
) -> Tensor:
    """torch.instance_norm: F.instance_norm's arguments in torch's top-level order.

    >>> x = Tensor([[[1.0, 3.0]]])
    >>> Tensor.instance_norm(x, None, None, None, None, True, 0.1, 0.0, False).flatten().tolist()
    [-1.0, 1.0]
    """
    return F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)


# ---------------------------------------------------------------------------------------------------------------------
# convolutions and pools


def conv_transpose1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """torch.conv_transpose1d (F.conv_transpose1d's arguments, in the same order).

    >>> Tensor.conv_transpose1d(Tensor([[[1.0, 2.0]]]), Tensor([[[1.0, 1.0]]])).tolist()
    [[[1.0, 3.0, 2.0]]]
    """
    return F.conv_transpose1d(input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose3d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """torch.conv_transpose3d (F.conv_transpose3d's arguments, in the same order).

    >>> Tensor.conv_transpose3d(Tensor.ones(1, 1, 1, 1, 2), Tensor.ones(1, 1, 1, 1, 2)).flatten().tolist()
    [1.0, 2.0, 1.0]
    """
    return F.conv_transpose3d(input, weight, bias, stride, padding, output_padding, groups, dilation)


def max_pool1d(
    input: Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False
) -> Tensor:
    """torch.max_pool1d: the values only (stride [] or left out: the kernel size).

    >>> Tensor.max_pool1d(Tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2).tolist()
    [[[3.0, 2.0]]]
    """
    return F.max_pool1d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


def max_pool3d(
    input: Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False
) -> Tensor:
    """torch.max_pool3d: the values only (stride [] or left out: the kernel size).

    >>> Tensor.max_pool3d(Tensor.arange(8.0).reshape(1, 1, 2, 2, 2), 2).flatten().tolist()
    [7.0]
    """
    return F.max_pool3d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


def avg_pool1d(
    input: Tensor,
    kernel_size: Any,
    stride: Any = (),
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """torch.avg_pool1d (stride [] or left out: the kernel size).

    >>> Tensor.avg_pool1d(Tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2).tolist()
    [[[2.0, 1.0]]]
    """
    return F.avg_pool1d(input, kernel_size, _stride(stride), padding, ceil_mode, count_include_pad)


def adaptive_avg_pool1d(input: Tensor, output_size: Any) -> Tensor:
    """torch.adaptive_avg_pool1d.

    >>> Tensor.adaptive_avg_pool1d(Tensor([[[1.0, 3.0, 2.0, 0.0]]]), 1).tolist()
    [[[1.5]]]
    """
    return F.adaptive_avg_pool1d(input, output_size)


def adaptive_max_pool1d(input: Tensor, output_size: Any) -> tuple[Tensor, Tensor]:
    """torch.adaptive_max_pool1d: (values, indices), always both, as torch's (the indices int32, torch's int64).

    >>> [t.tolist() for t in Tensor.adaptive_max_pool1d(Tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2)]
    [[[[3.0, 2.0]]], [[[1, 2]]]]
    """
    return F.adaptive_max_pool1d(input, output_size, True)


# ---------------------------------------------------------------------------------------------------------------------
# lookups


def embedding(
    weight: Tensor, indices: Tensor, padding_idx: int = -1, scale_grad_by_freq: bool = False, sparse: bool = False
) -> Tensor:
    """torch.embedding: the rows of `weight` (first, as torch's) at `indices`; `padding_idx` >= 0 is the row that
    gets no gradient (a negative one: none, torch's -1 default).

    >>> Tensor.embedding(Tensor([[0.0, 1.0], [2.0, 3.0]]), Tensor([1, 1, 0])).tolist()
    [[2.0, 3.0], [2.0, 3.0], [0.0, 1.0]]
    """
    padding = None if padding_idx < 0 else padding_idx
    return F.embedding(indices, weight, padding, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


# ---------------------------------------------------------------------------------------------------------------------
# losses: torch's reduction numbers, 0 (no reduction) when left out


def kl_div(input: Tensor, target: Tensor, reduction: int = 0, *, log_target: bool = False) -> Tensor:
    """torch.kl_div (reduction 1 is the mean over every element).

    >>> Tensor.kl_div(Tensor([-1.0, -1.0]), Tensor([0.5, 0.5]), 2).item() > 0
    True
    """
    return input.kl_div(target, _reduction(reduction, "kl_div"), log_target)


def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0, reduction: int = 0) -> Tensor:
    """torch.hinge_embedding_loss.

    >>> Tensor.hinge_embedding_loss(Tensor([0.25, 0.25]), Tensor([1.0, -1.0])).tolist()
    [0.25, 0.75]
    """
    return input.hinge_embedding_loss(target, margin, _reduction(reduction, "hinge_embedding_loss"))


def margin_ranking_loss(
    input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0, reduction: int = 0
) -> Tensor:
    """torch.margin_ranking_loss.

    >>> Tensor.margin_ranking_loss(Tensor([1.0, 3.0]), Tensor([2.0, 2.0]), Tensor([1.0, 1.0])).tolist()
    [1.0, 0.0]
    """
    return input1.margin_ranking_loss(input2, target, margin, _reduction(reduction, "margin_ranking_loss"))


def cosine_embedding_loss(
    input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0, reduction: int = 0
) -> Tensor:
    """torch.cosine_embedding_loss.

    >>> Tensor.cosine_embedding_loss(Tensor([[1.0, 0.0]]), Tensor([[1.0, 0.0]]), Tensor([1.0]), 0.0, 1).item()
    0.0
    """
    return input1.cosine_embedding_loss(input2, target, margin, _reduction(reduction, "cosine_embedding_loss"))


def triplet_margin_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    margin: float = 1.0,
    p: float = 2.0,
    eps: float = 1e-6,
    swap: bool = False,
    reduction: int = 0,
) -> Tensor:
    """torch.triplet_margin_loss.

    >>> a = Tensor([[0.0, 0.0]])
    >>> Tensor.triplet_margin_loss(a, a, Tensor([[3.0, 4.0]])).tolist()
    [0.0]
    """
    fn = "triplet_margin_loss"
    return anchor.triplet_margin_loss(positive, negative, margin, p, eps, swap, _reduction(reduction, fn))


def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool, full: bool, eps: float, reduction: int) -> Tensor:
    """torch.poisson_nll_loss (every argument given, as torch's).

    >>> Tensor.poisson_nll_loss(Tensor([0.0]), Tensor([0.0]), True, False, 1e-8, 1).item()
    1.0
    """
    return input.poisson_nll_loss(target, log_input, full, eps, _reduction(reduction, "poisson_nll_loss"))


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    pos_weight: Tensor | None = None,
    reduction: int = 0,
) -> Tensor:
    """torch.binary_cross_entropy_with_logits (weight before pos_weight, then the reduction number).

    >>> [round(v, 5) for v in Tensor.binary_cross_entropy_with_logits(Tensor([0.0]), Tensor([1.0])).tolist()]
    [0.69315]
    """
    fn = "binary_cross_entropy_with_logits"
    return input.binary_cross_entropy_with_logits(target, _reduction(reduction, fn), pos_weight, weight)


def ctc_loss(
    log_probs: Tensor,
    targets: Tensor,
    input_lengths: Any,
    target_lengths: Any,
    blank: int = 0,
    reduction: int = 0,
    zero_infinity: bool = False,
) -> Tensor:
    """torch.ctc_loss (reduction 1: each sequence's loss divided by its target length, then the mean, as F's).

    >>> lp = Tensor.full((1, 1, 2), 0.5).log()
    >>> [round(v, 4) for v in Tensor.ctc_loss(lp, Tensor([[1]]), [1], [1]).tolist()]
    [0.6931]
    """
    fn = "ctc_loss"
    return log_probs.ctc_loss(targets, input_lengths, target_lengths, blank, _reduction(reduction, fn), zero_infinity)


__all__ = [
    "layer_norm",
    "batch_norm",
    "instance_norm",
    "conv_transpose1d",
    "conv_transpose3d",
    "max_pool1d",
    "max_pool3d",
    "avg_pool1d",
    "adaptive_avg_pool1d",
    "adaptive_max_pool1d",
    "embedding",
    "kl_div",
    "hinge_embedding_loss",
    "margin_ranking_loss",
    "cosine_embedding_loss",
    "triplet_margin_loss",
    "poisson_nll_loss",
    "binary_cross_entropy_with_logits",
    "ctc_loss",
]
