"""torch.nn's remaining losses as modules over tensor/losses.py's functions; compared with torch in
tests/test_nn_losses.py.

Each takes torch's constructor arguments (in torch's order, with its defaults, the deprecated size_average and reduce
included where torch has them) and names its tensors as torch does (a loss' `weight` buffer, AdaptiveLogSoftmaxWithLoss'
`head` and `tail.i.j` layers), so a torch state dict loads as it is.

>>> from uopkit import Tensor
>>> MarginRankingLoss()(Tensor([1.0, 3.0]), Tensor([2.0, 2.0]), Tensor([1.0, 1.0])).tolist()
0.5
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from uopkit.dtype import dtypes
from uopkit.nn.layers import NLLLoss, PairwiseDistance, _buffer, _Loss, _WeightedLoss
from uopkit.nn.module import Module, ModuleList
from uopkit.nn.modules import Linear, Sequential
from uopkit.tensor import ShapeError, Tensor
from uopkit.tensor.autocast import FLOAT32, autocast_op
from uopkit.tensor.support import _check_values_in

__all__ = [
    "MarginRankingLoss",
    "HingeEmbeddingLoss",
    "SoftMarginLoss",
    "MultiLabelSoftMarginLoss",
    "MultiLabelMarginLoss",
    "MultiMarginLoss",
    "CosineEmbeddingLoss",
    "TripletMarginLoss",
    "TripletMarginWithDistanceLoss",
    "PoissonNLLLoss",
    "GaussianNLLLoss",
    "CTCLoss",
    "NLLLoss2d",
    "AdaptiveLogSoftmaxWithLoss",
]


# ---------------------------------------------------------------------------------------------------------------------
# margin and ranking losses


class MarginRankingLoss(_Loss, Module):
    """max(0, -target * (input1 - input2) + margin), reduced by `reduction`, as torch.nn.MarginRankingLoss.

    >>> MarginRankingLoss(reduction="none")(Tensor([1.0, 3.0]), Tensor([2.0, 2.0]), Tensor([1.0, 1.0])).tolist()
    [1.0, 0.0]
    """

    def __init__(
        self, margin: float = 0.0, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean"
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    @autocast_op(FLOAT32)
    def __call__(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return input1.margin_ranking_loss(input2, target, self.margin, self.reduction)


class HingeEmbeddingLoss(_Loss, Module):
    """x where target is 1, max(0, margin - x) where it is -1, reduced by `reduction`, as torch.nn.HingeEmbeddingLoss.

    >>> HingeEmbeddingLoss(reduction="none")(Tensor([0.25, 0.25]), Tensor([1.0, -1.0])).tolist()
    [0.25, 0.75]
    """

    def __init__(
        self, margin: float = 1.0, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean"
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    @autocast_op(FLOAT32)
    def __call__(self, input: Tensor, target: Tensor) -> Tensor:
        return input.hinge_embedding_loss(target, self.margin, self.reduction)


class SoftMarginLoss(_Loss, Module):
    """log(1 + exp(-target * input)), reduced by `reduction`, as torch.nn.SoftMarginLoss.

    >>> round(SoftMarginLoss(reduction="sum")(Tensor([0.0, 2.0]), Tensor([1.0, 1.0])).item(), 5)
    0.82008
    """

    @autocast_op(FLOAT32)
    def __call__(self, input: Tensor, target: Tensor) -> Tensor:
        return input.soft_margin_loss(target, self.reduction)


class MultiLabelSoftMarginLoss(_WeightedLoss, Module):
    """The binary cross entropy of sigmoid(input) against 0/1 targets (N, C), times the per-class `weight` buffer,
    averaged over the classes, then reduced by `reduction`, as torch.nn.MultiLabelSoftMarginLoss.

    >>> round(MultiLabelSoftMarginLoss()(Tensor([[0.0, 0.0]]), Tensor([[1.0, 0.0]])).item(), 5)
    0.69315
    """

    # (torch's registered buffer: in the state dict, not a parameter)
    weight: Tensor | None

    def __call__(self, input: Tensor, target: Tensor) -> Tensor:
        return input.multilabel_soft_margin_loss(target, self.weight, self.reduction)


class MultiLabelMarginLoss(_Loss, Module):
    """The multi-class multi-label hinge loss of scores (C) or (N, C) against the class indices listed in the target
    (ending at the first -1), as torch.nn.MultiLabelMarginLoss.

    >>> round(MultiLabelMarginLoss()(Tensor([[0.1, 0.2, 0.4, 0.8]]), Tensor([[3, 0, -1, 1]])).item(), 5)
    0.85
    """

    @autocast_op(FLOAT32)
    def __call__(self, input: Tensor, target: Tensor) -> Tensor:
        return input.multilabel_margin_loss(target, self.reduction)


class MultiMarginLoss(_WeightedLoss, Module):
    """The multi-class hinge loss: the sum over the classes i other than the target y of
    max(0, margin - x[y] + x[i])^p (times weight[y]), divided by C, as torch.nn.MultiMarginLoss (p 1 or 2).

    >>> round(MultiMarginLoss()(Tensor([[0.1, 0.2, 0.4, 0.8]]), Tensor([3])).item(), 5)
    0.325
    """

    # (torch's registered buffer: in the state dict, not a parameter)
    weight: Tensor | None

    def __init__(
        self,
        p: int = 1,
        margin: float = 1.0,
        weight: Tensor | Sequence[float] | None = None,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(None, size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError(f"MultiMarginLoss: p must be 1 or 2, got {p!r}")
        buffer = _buffer(weight)
        if buffer is not None and buffer.ndim != 1:
            raise ValueError(f"MultiMarginLoss: weight must be None or a 1-D tensor, got shape {buffer.shape}")
        self.p, self.margin = p, margin
        self.register_buffer("weight", buffer)

    @autocast_op(FLOAT32)
    def __call__(self, input: Tensor, target: Tensor) -> Tensor:
        return input.multi_margin_loss(target, self.p, self.margin, self.weight, self.reduction)


# ---------------------------------------------------------------------------------------------------------------------
# embedding losses


class CosineEmbeddingLoss(_Loss, Module):
    """1 - cos(x1, x2) where target is 1, max(0, cos(x1, x2) - margin) where it is -1, as torch.nn.CosineEmbeddingLoss.

    >>> CosineEmbeddingLoss()(Tensor([[1.0, 0.0]]), Tensor([[0.0, 1.0]]), Tensor([1.0])).tolist()
    1.0
    """

    def __init__(
        self, margin: float = 0.0, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean"
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    @autocast_op(FLOAT32)
    def __call__(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return input1.cosine_embedding_loss(input2, target, self.margin, self.reduction)


def _positive_margin(margin: float, layer: str) -> None:
    if not margin > 0:
        raise ValueError(f"{layer}: margin must be greater than 0, got {margin}")


class TripletMarginLoss(_Loss, Module):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)) with d the p-norm distance ||x1 - x2 + eps||_p (with
    `swap`, d(anchor, negative) is the smaller of it and d(positive, negative)), as torch.nn.TripletMarginLoss.

    >>> TripletMarginLoss(eps=0.0)(Tensor([[0.0, 0.0]]), Tensor([[3.0, 4.0]]), Tensor([[0.0, 1.0]])).tolist()
    5.0
    """

    def __init__(
        self,
        margin: float = 1.0,
        p: float = 2.0,
        eps: float = 1e-6,
        swap: bool = False,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        _positive_margin(margin, "TripletMarginLoss")
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    @autocast_op(FLOAT32)
    def __call__(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return anchor.triplet_margin_loss(positive, negative, self.margin, self.p, self.eps, self.swap, self.reduction)


class TripletMarginWithDistanceLoss(_Loss, Module):
    """TripletMarginLoss with any `distance_function(x1, x2)` (default: the Euclidean pairwise distance), as
    torch.nn.TripletMarginWithDistanceLoss (keyword arguments only).

    >>> l1 = lambda a, b: (a - b).abs().sum(-1)
    >>> TripletMarginWithDistanceLoss(distance_function=l1)(Tensor([[0.0]]), Tensor([[1.0]]), Tensor([[1.5]])).tolist()
    0.5
    """

    def __init__(
        self,
        *,
        distance_function: Callable[[Tensor, Tensor], Tensor] | None = None,
        margin: float = 1.0,
        swap: bool = False,
        reduction: str = "mean",
    ) -> None:
        super().__init__(reduction=reduction)
        _positive_margin(margin, "TripletMarginWithDistanceLoss")
        if distance_function is not None and not callable(distance_function):
            raise ValueError(
                f"TripletMarginWithDistanceLoss: distance_function must be callable or None, got {distance_function!r}"
            )
        # (no function: the Euclidean distance as a sub-module, torch's default, which prints it)
        self.distance_function = PairwiseDistance() if distance_function is None else distance_function
        self.margin, self.swap = margin, swap

    def __call__(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return anchor.triplet_margin_with_distance_loss(
            positive,
            negative,
            distance_function=self.distance_function,
            margin=self.margin,
            swap=self.swap,
            reduction=self.reduction,
        )


# ---------------------------------------------------------------------------------------------------------------------
# likelihood losses


class PoissonNLLLoss(_Loss, Module):
    """exp(x) - target * x of a log rate x (`log_input`), else x - target * log(x + eps) of a rate; with `full`, plus
    Stirling's approximation of log(target!), as torch.nn.PoissonNLLLoss.

    >>> round(PoissonNLLLoss(reduction="sum")(Tensor([0.0, 1.0]), Tensor([1.0, 2.0])).item(), 5)
    1.71828
    """

    def __init__(
        self,
        log_input: bool = True,
        full: bool = False,
        size_average: bool | None = None,
        eps: float = 1e-8,
        reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    @autocast_op(FLOAT32)
    def __call__(self, log_input: Tensor, target: Tensor) -> Tensor:
        return log_input.poisson_nll_loss(target, self.log_input, self.full, self.eps, self.reduction)


class GaussianNLLLoss(_Loss, Module):
    """(log(var) + (input - target)^2 / var) / 2 (plus log(2 pi) / 2 with `full`), var clamped to at least eps, as
    torch.nn.GaussianNLLLoss (keyword arguments only); called as loss(input, target, var).

    >>> GaussianNLLLoss(reduction="none")(Tensor([1.0, 3.0]), Tensor([1.0, 1.0]), Tensor([1.0, 1.0])).tolist()
    [0.0, 2.0]
    """

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean") -> None:
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def __call__(self, input: Tensor, target: Tensor, var: Tensor | float) -> Tensor:
        return input.gaussian_nll_loss(target, var, self.full, self.eps, self.reduction)


class CTCLoss(_Loss, Module):
    """The connectionist temporal classification loss of log-probabilities (T, N, C) against class-index targets, as
    torch.nn.CTCLoss; called as loss(log_probs, targets, input_lengths, target_lengths) (see Tensor.ctc_loss).

    >>> import math
    >>> lp = Tensor.full((2, 1, 2), math.log(0.5))
    >>> round(CTCLoss(reduction="sum")(lp, Tensor([[1]]), [2], [1]).item(), 5)
    0.28768
    """

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False) -> None:
        super().__init__(reduction=reduction)
        if not isinstance(blank, int) or blank < 0:
            raise ValueError(f"CTCLoss: blank must be a non-negative class index, got {blank!r}")
        self.blank, self.zero_infinity = blank, zero_infinity

    @autocast_op(FLOAT32)
    def __call__(self, log_probs: Tensor, targets: Tensor, input_lengths: Any, target_lengths: Any) -> Tensor:
        return log_probs.ctc_loss(
            targets, input_lengths, target_lengths, self.blank, self.reduction, self.zero_infinity
        )


class NLLLoss2d(NLLLoss, Module):
    """NLLLoss under its old name, deprecated (a FutureWarning at construction, as torch.nn.NLLLoss2d).

    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     NLLLoss2d()(Tensor([[-1.0, -2.0]]), Tensor([1])).tolist()
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
        warnings.warn(
            "NLLLoss2d is deprecated (as in PyTorch): use NLLLoss, the same loss", FutureWarning, stacklevel=2
        )
        super().__init__(weight, size_average, ignore_index, reduce, reduction)


# ---------------------------------------------------------------------------------------------------------------------
# adaptive softmax


class _ASMoutput(NamedTuple):
    """AdaptiveLogSoftmaxWithLoss' result: `output`, the log-probability of each target, and `loss`, the mean of
    -output (torch's namedtuple of the same name and fields)."""

    output: Tensor
    loss: Tensor


class AdaptiveLogSoftmaxWithLoss(Module):
    """Efficient softmax approximation (Grave et al., 2016) as torch.nn.AdaptiveLogSoftmaxWithLoss: the classes are
    split at `cutoffs` into a frequent head (classes below cutoffs[0]) and tail clusters. `head` is a Linear from the
    input to the head's classes plus one score per cluster; `tail[i]` is Sequential(Linear(in, in // div_value^(i+1)),
    Linear(that, cluster size)), both without bias, so torch's state dict (head.weight, tail.0.0.weight, ...) loads.

    Called on input (N, in_features) and target (N,) (or (in_features,) and a 0-d target) it returns `_ASMoutput`
    (output, loss): the log-probability of each target and the mean of its negation. `log_prob(input)` gives all
    n_classes log-probabilities, `predict(input)` the most likely class. Each tail is evaluated on the whole batch and
    the rows of its cluster selected (torch gathers those rows first): the same values and gradients, with no
    data-dependent shapes.

    >>> asm = AdaptiveLogSoftmaxWithLoss(4, 6, [2, 4])
    >>> out = asm(Tensor.ones(3, 4), Tensor([0, 3, 5]))
    >>> out.output.shape, out.loss.shape, asm.log_prob(Tensor.ones(3, 4)).shape, asm.predict(Tensor.ones(3, 4)).shape
    ((3,), (), (3, 6), (3,))
    """

    def __init__(
        self,
        in_features: int,
        n_classes: int,
        cutoffs: Sequence[int],
        div_value: float = 4.0,
        head_bias: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        layer = "AdaptiveLogSoftmaxWithLoss"
        if device is not None or dtype is not None:
            raise ValueError(
                f"{layer}: device and dtype aren't supported (parameters are in dtypes.default_float on the default "
                "device)"
            )
        cuts = list(cutoffs)
        if (
            not cuts
            or any(not isinstance(c, int) or isinstance(c, bool) for c in cuts)
            or cuts != sorted(set(cuts))
            or cuts[0] <= 0
            or cuts[-1] > n_classes - 1
        ):
            raise ValueError(
                f"{layer}: cutoffs must be unique positive ints in increasing order, each in [1, n_classes - 1] = "
                f"[1, {n_classes - 1}], got {cutoffs!r}"
            )
        if not div_value > 0:
            raise ValueError(f"{layer}: div_value must be > 0, got {div_value}")
        self.in_features, self.n_classes, self.div_value, self.head_bias = in_features, n_classes, div_value, head_bias
        # (torch's attributes: cutoffs with n_classes appended, the shortlist and the head's sizes)
        self.cutoffs = cuts + [n_classes]
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hidden = int(in_features // (div_value ** (i + 1)))
            size = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hidden, bias=False), Linear(hidden, size, bias=False)))

    def _checked(self, input: Tensor, op: str) -> None:
        if input.ndim not in (1, 2) or input.shape[-1] != self.in_features:
            raise ShapeError(
                f"AdaptiveLogSoftmaxWithLoss({self.in_features}, {self.n_classes}).{op}: expected input "
                f"(N, {self.in_features}) or ({self.in_features},), got shape {input.shape}"
            )

    def __call__(self, input: Tensor, target: Tensor) -> _ASMoutput:
        name = f"AdaptiveLogSoftmaxWithLoss({self.in_features}, {self.n_classes})"
        self._checked(input, "forward")
        if not isinstance(target, Tensor):
            target = Tensor(target, device=input.device)
        if target.ndim != input.ndim - 1 or (input.ndim == 2 and target.shape[0] != input.shape[0]):
            raise ShapeError(
                f"{name}: a {input.ndim}-D input {input.shape} takes a target of shape {input.shape[:-1]}, got "
                f"{target.shape}"
            )
        if not dtypes.is_int(target.dtype):
            raise TypeError(f"{name}: the target must hold integer class indices, got {target.dtype}")
        _check_values_in(
            target, 0, self.n_classes, lambda bad: f"{name}: target {bad} is out of range [0, {self.n_classes - 1}]"
        )
        x = input if input.ndim == 2 else input.unsqueeze(0)
        y = target.reshape(-1)
        # each row's head column: its class if in the shortlist, else its cluster's; plus the class' log-probability
        # within the cluster, from that cluster's tail
        column, output = y, None
        for i, tail in enumerate(self.tail):
            low, high = self.cutoffs[i], self.cutoffs[i + 1]
            member = (y >= low) & (y < high)
            column = member.where(self.shortlist_size + i, column)
            within = tail(x).log_softmax(1).gather(1, member.where(y - low, 0).unsqueeze(1)).squeeze(1)
            picked = member.where(within, 0.0)
            output = picked if output is None else output + picked
        head = self.head(x).log_softmax(1).gather(1, column.unsqueeze(1)).squeeze(1)
        output = head if output is None else head + output
        if input.ndim == 1:
            output = output.squeeze(0)
        return _ASMoutput(output, (-output).mean())

    def log_prob(self, input: Tensor) -> Tensor:
        """Every class' log-probability, (N, n_classes), of input (N, in_features)."""
        self._checked(input, "log_prob")
        if input.ndim != 2:
            raise ShapeError(
                f"AdaptiveLogSoftmaxWithLoss.log_prob: expected a 2-D input (N, {self.in_features}), got {input.shape}"
            )
        head = self.head(input).log_softmax(1)
        parts = [head[:, : self.shortlist_size]]
        for i, tail in enumerate(self.tail):
            column = self.shortlist_size + i
            parts.append(tail(input).log_softmax(1) + head[:, column : column + 1])
        return parts[0].cat(*parts[1:], dim=1)

    def predict(self, input: Tensor) -> Tensor:
        """The most likely class of each row of input (N, in_features): log_prob(input).argmax(1)."""
        return self.log_prob(input).argmax(1)
