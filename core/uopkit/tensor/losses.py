"""PyTorch's loss functions that are compositions of Tensor methods (torch.nn.functional's margin, ranking,
embedding and likelihood losses), with torch's reductions and checks; compared with torch in tests/test_losses.py."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import dtypes
from uopkit.gradient import set_gradient
from uopkit.tensor.support import (
    ArgumentError,
    DTypeError,
    ShapeError,
    _broadcast_shape,
    _check_values_in,
    _gradient_stored_once,
    _with_gradient_of,
)
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

_INF = math.inf
# torch's cosine_embedding_loss adds this to each squared norm (a zero vector's cosine is then 0, not 0 / 0)
_COSINE_EPS = 1e-12


def _check_reduction(reduction: str, op: str) -> None:
    # (checked before any work, as torch's: `_loss_reduce` would say the same only after the loss is built)
    if reduction not in ("none", "sum", "mean"):
        raise ArgumentError(f"{op}: reduction must be 'none', 'sum' or 'mean', got {reduction!r}")


def _as_tensor(x: Any, like: Tensor) -> Tensor:
    # a target given as a list or a number goes to the input's device
    return x if isinstance(x, Tensor) else Tensor(x, device=like.device)


def _positive_part(z: Tensor) -> Tensor:
    """max(z, 0) whose gradient passes only where z > 0, as the margin losses' own backward (torch's
    multilabel_margin_loss and multi_margin_loss give nothing at z == 0, where clamp_min would pass it)."""
    return (z > 0).where(z, 0.0)


def _pairwise_distance(x1: Tensor, x2: Tensor, p: float, eps: float, op: str) -> Tensor:
    """||x1 - x2 + eps||_p over the last axis of the broadcast operands, as torch.pairwise_distance (of 0-d operands:
    |x1 - x2 + eps|), with torch's norm gradient (0 where the norm is 0)."""
    diff = x1._float() - x2 + eps
    if diff.ndim == 0:
        return diff._vector_norm(0, p, op).reshape(())
    return diff._vector_norm(diff.ndim - 1, p, op).squeeze(-1)


def _log_sum_exp(terms: list[Tensor]) -> Tensor:
    """log(sum(exp(t))) of tensors of one shape, shifted by their max, -inf where all are -inf. The gradient is
    finite everywhere, 0 to a -inf term and where all are -inf (the plain formula's log(0) gives 0 * inf = NaN there
    even when no gradient comes in, and the CTC recursion has such states at every step)."""
    top = terms[0]
    for t in terms[1:]:
        top = top.maximum(t)
    shift = (top == -_INF).where(0.0, top).detach()
    total = (terms[0] - shift).exp()
    for t in terms[1:]:
        total = total + (t - shift).exp()
    return _guarded_log(total, shift)


def _log_sum_exp_axis(x: Tensor, axis: int) -> Tensor:
    # _log_sum_exp of the slices of x along `axis` (removed)
    top = x.max(axis=axis, keepdim=True)
    shift = (top == -_INF).where(0.0, top).detach()
    return _guarded_log((x - shift).exp().sum(axis, keepdim=True), shift).squeeze(axis)


def _guarded_log(total: Tensor, shift: Tensor) -> Tensor:
    # log(total) + shift, -inf where total is 0, whose gradient never divides by that 0
    some = total > 0
    return some.where(some.where(total, 1.0).log() + shift, -_INF)


def _with_extra_gradient(value: Tensor, x: Tensor, extra: Tensor) -> Tensor:
    """`value` (N,), a function of x (T, N, C) among others, whose gradient with respect to x is its own plus `extra`
    (T, N, C) times the incoming gradient of each element n: torch's ctc_loss backward adds exp(log_probs) (see
    ctc_loss). The other inputs' gradients are value's own."""
    node = UOp(Ops.RESHAPE, value.dtype, (value.uop,), value.shape)
    value_uop, extra_uop = value.uop, extra.uop

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
        if not wanted[1]:
            return (g, None)
        per_sample = Tensor(g).reshape(1, g.shape[0], 1)
        return (g, (per_sample * Tensor(extra_uop).cast(g.dtype)).uop)

    set_gradient(node, (value_uop, x.uop), rule)
    return Tensor(node)


def _host_lengths(lengths: Any, name: str) -> np.ndarray:
    """ctc_loss's input or target lengths (a tensor of any shape, a sequence or an int) as int64 host values, flat."""
    if isinstance(lengths, Tensor):
        if not dtypes.is_int(lengths.dtype):
            raise DTypeError(f"ctc_loss: {name} must be integral, got {lengths.dtype}")
        return lengths.numpy().reshape(-1).astype(np.int64)
    values = np.asarray(lengths).reshape(-1)
    if values.size and not np.issubdtype(values.dtype, np.integer):
        raise DTypeError(f"ctc_loss: {name} must be integral, got {lengths!r}")
    return values.astype(np.int64)


class LossesMixin:
    __slots__ = ()

    # ---- margin and ranking losses: hinges of scores, elementwise or over the classes of each sample

    def margin_ranking_loss(self, x2: Tensor, target: Tensor, margin: float = 0.0, reduction: str = "mean") -> Tensor:
        """max(0, -target * (x1 - x2) + margin) with self as x1, the three broadcast together (they must have the
        same number of dimensions), reduced by `reduction`, as torch.nn.functional.margin_ranking_loss.

        >>> Tensor([1.0, 3.0]).margin_ranking_loss(Tensor([2.0, 2.0]), Tensor([1.0, 1.0]), reduction="none").tolist()
        [1.0, 0.0]
        """
        _check_reduction(reduction, "margin_ranking_loss")
        x2, target = _as_tensor(x2, self), _as_tensor(target, self)
        if not self.ndim == x2.ndim == target.ndim:
            raise ShapeError(
                f"margin_ranking_loss: input1 {self.shape}, input2 {x2.shape} and target {target.shape} must have the "
                "same number of dimensions"
            )
        loss = (-target * (self._float() - x2) + margin).clamp_min(0)
        return loss._loss_reduce(reduction, "margin_ranking_loss")

    def hinge_embedding_loss(self, target: Tensor, margin: float = 1.0, reduction: str = "mean") -> Tensor:
        """x where target is 1, max(0, margin - x) where it is -1 (the sum of both for any other target value), input
        and target broadcast together, reduced by `reduction`, as torch.nn.functional.hinge_embedding_loss.

        >>> Tensor([0.25, 0.25]).hinge_embedding_loss(Tensor([1.0, -1.0]), reduction="none").tolist()
        [0.25, 0.75]
        """
        _check_reduction(reduction, "hinge_embedding_loss")
        target = _as_tensor(target, self)
        x = self._float()
        loss = (target != 1).where((margin - x).clamp_min(0), 0.0) + (target != -1).where(x, 0.0)
        return loss._loss_reduce(reduction, "hinge_embedding_loss")

    def soft_margin_loss(self, target: Tensor, reduction: str = "mean") -> Tensor:
        """log(1 + exp(-target * x)), the target broadcast to the input's shape, reduced by `reduction`, as
        torch.nn.functional.soft_margin_loss (computed without overflow: torch's is inf past |x| of about 88).

        >>> round(Tensor([0.0, 2.0]).soft_margin_loss(Tensor([1.0, 1.0]), reduction="sum").item(), 5)
        0.82008
        """
        _check_reduction(reduction, "soft_margin_loss")
        target = _as_tensor(target, self)
        if _broadcast_shape(self.shape, target.shape, "soft_margin_loss") != self.shape:
            raise ShapeError(
                f"soft_margin_loss: the target {target.shape} must broadcast to the input's shape {self.shape}"
            )
        loss = (-(self._float() * target)).softplus(threshold=_INF)
        return loss._loss_reduce(reduction, "soft_margin_loss")

    def multilabel_soft_margin_loss(
        self, target: Tensor, weight: Tensor | None = None, reduction: str = "mean"
    ) -> Tensor:
        """-(y log(sigmoid(x)) + (1 - y) log(sigmoid(-x))) of input x (N, C) and target y (broadcast together), times
        `weight`, averaged over the input's last axis (the classes), then reduced by `reduction`, as
        torch.nn.functional.multilabel_soft_margin_loss.

        >>> round(Tensor([[0.0, 0.0]]).multilabel_soft_margin_loss(Tensor([[1.0, 0.0]])).item(), 5)
        0.69315
        """
        _check_reduction(reduction, "multilabel_soft_margin_loss")
        if self.ndim == 0:
            raise IndexError("multilabel_soft_margin_loss: the input needs a class axis, got a 0-d tensor")
        target = _as_tensor(target, self)
        x = self._float()
        loss = -(target * x.logsigmoid() + (1 - target) * (-x).logsigmoid())
        if weight is not None:
            loss = loss * weight
        # (torch sums over the input's last axis, which is not the last of a loss broadcast to more axes)
        loss = loss.sum(self.ndim - 1) / self.shape[-1]
        return loss._loss_reduce(reduction, "multilabel_soft_margin_loss")

    def _margin_input(self, target: Tensor, op: str) -> Tensor:
        # the input of a multi-class margin loss as (N, C): a vector or a matrix with classes, or a 0-d score
        if not (self.ndim == 0 or (self.ndim <= 2 and self.shape[-1] > 0)):
            raise ShapeError(f"{op}: expected a non-empty vector or an (N, C) matrix with C > 0, got {self.shape}")
        if not dtypes.is_int(target.dtype):
            raise DTypeError(f"{op}: the target must hold integer class indices, got {target.dtype}")
        x = self._float()
        return x.reshape(1, 1) if x.ndim == 0 else x.reshape(-1, x.shape[-1])

    def multilabel_margin_loss(self, target: Tensor, reduction: str = "mean") -> Tensor:
        """sum over the target classes j and the other classes i of max(0, 1 - (x[j] - x[i])), divided by C, for each
        sample of input x (C) or (N, C); the target, of the input's shape, lists each sample's class indices and ends
        at the first -1, as torch.nn.functional.multilabel_margin_loss (the gradient is 0 where the hinge is 0).

        >>> round(Tensor([[0.1, 0.2, 0.4, 0.8]]).multilabel_margin_loss(Tensor([[3, 0, -1, 1]])).item(), 5)
        0.85
        """
        op = "multilabel_margin_loss"
        _check_reduction(reduction, op)
        target = _as_tensor(target, self)
        x = self._margin_input(target, op)
        if target.shape != self.shape:
            raise ShapeError(f"{op}: the target's shape {target.shape} must be the input's {self.shape}")
        C = x.shape[1]
        _check_values_in(target, -1, C, lambda bad: f"{op}: target {bad} is out of range for {C} classes")
        y = target.reshape(x.shape)
        # the class indices before each row's first -1
        listed = (y < 0).cast(dtypes.int32).cumsum(1) == 0
        is_target = (y._one_hot_along(C) & listed.unsqueeze(-1)).any(1)
        picked = x._gather_checked(1, listed.where(y, 0))
        # (N, targets, classes): 1 - x[y[k]] + x[i], counted for each listed target and every class not a target
        hinge = _positive_part(1 - picked.unsqueeze(2) + x.unsqueeze(1))
        counted = listed.unsqueeze(2) & (~is_target).unsqueeze(1)
        loss = counted.where(hinge, 0.0).sum((1, 2)) / C
        return loss.reshape(self.shape[:-1] if self.ndim else ())._loss_reduce(reduction, op)

    def multi_margin_loss(
        self,
        target: Tensor,
        p: int = 1,
        margin: float = 1.0,
        weight: Tensor | None = None,
        reduction: str = "mean",
    ) -> Tensor:
        """sum over the classes i other than the target y of max(0, margin - x[y] + x[i])^p (times weight[y]), divided
        by C, for each sample of input x (C) or (N, C) and class index target (N,) (a vector: one index), p 1 or 2, as
        torch.nn.functional.multi_margin_loss (the gradient is 0 where the hinge is 0).

        >>> round(Tensor([[0.1, 0.2, 0.4, 0.8]]).multi_margin_loss(Tensor([3])).item(), 5)
        0.325
        """
        op = "multi_margin_loss"
        _check_reduction(reduction, op)
        if p not in (1, 2):
            raise ArgumentError(f"{op}: only p == 1 and p == 2 are supported, got {p}")
        if weight is not None and weight.ndim != 1:
            raise ShapeError(f"{op}: weight must be one-dimensional, got shape {weight.shape}")
        target = _as_tensor(target, self)
        x = self._margin_input(target, op)
        N, C = x.shape
        if target.ndim > 1 or target.numel() != N:
            raise ShapeError(
                f"{op}: the target must be 1-D with one class index per sample, {N} for input {self.shape}, got "
                f"shape {target.shape}"
            )
        if weight is not None and weight.shape != (C,):
            raise ShapeError(f"{op}: weight must have one value per class, {C}, got shape {weight.shape}")
        _check_values_in(target, 0, C, lambda bad: f"{op}: target {bad} is out of range for {C} classes")
        y = target.reshape(N, 1)
        hinge = _positive_part(margin - x._gather_checked(1, y) + x)
        if p == 2:
            hinge = hinge * hinge
        if weight is not None:
            hinge = hinge * weight._float()._gather_checked(0, y.reshape(N)).reshape(N, 1)
        loss = y._one_hot_along(C).reshape(N, C).where(0.0, hinge).sum(1) / C
        # (one loss per target element: a vector input's is 0-d or (1,), as its target)
        return loss.reshape(target.shape)._loss_reduce(reduction, op)

    # ---- embedding losses: distances and similarities between pairs or triplets of vectors

    def cosine_embedding_loss(self, x2: Tensor, target: Tensor, margin: float = 0.0, reduction: str = "mean") -> Tensor:
        """1 - cos(x1, x2) where target is 1, max(0, cos(x1, x2) - margin) where it is -1 (0 elsewhere), with self as
        x1: vectors (D) with a 0-d target or rows (N, D) with a target (N,), as torch.nn.functional
        .cosine_embedding_loss (each squared norm plus 1e-12, so a zero vector's cosine is 0).

        >>> Tensor([[1.0, 0.0]]).cosine_embedding_loss(Tensor([[0.0, 1.0]]), Tensor([1.0])).tolist()
        1.0
        """
        op = "cosine_embedding_loss"
        _check_reduction(reduction, op)
        x2, target = _as_tensor(x2, self), _as_tensor(target, self)
        if target.ndim > 1:
            raise ShapeError(f"{op}: the target must be 0-d or 1-D (multi-target is not supported), got {target.shape}")
        if self.ndim != target.ndim + 1 or x2.ndim != target.ndim + 1:
            raise ShapeError(
                f"{op}: a {target.ndim}-D target takes {target.ndim + 1}-D inputs, got {self.shape} and {x2.shape}"
            )
        # (checked here: the loss's own `where` would name neither the loss nor the inputs)
        rows = _broadcast_shape(self.shape[:-1], x2.shape[:-1], f"{op} (the inputs' rows)")
        _broadcast_shape(rows, target.shape, f"{op} (the inputs' rows and the target)")
        x1, x2 = self._float(), x2._float()
        axis = target.ndim
        # (each norm from its own operand, as torch's: x2 (N, 1) broadcast against x1 (N, D) keeps its own norm)
        dot = (x1 * x2).sum(axis)
        squared_norms = ((x1 * x1).sum(axis) + _COSINE_EPS) * ((x2 * x2).sum(axis) + _COSINE_EPS)
        cos = dot / squared_norms.sqrt()
        loss = (target == 1).where(1 - cos, 0.0) + (target == -1).where((cos - margin).clamp_min(0), 0.0)
        return loss._loss_reduce(reduction, op)

    def triplet_margin_loss(
        self,
        positive: Tensor,
        negative: Tensor,
        margin: float = 1.0,
        p: float = 2,
        eps: float = 1e-6,
        swap: bool = False,
        reduction: str = "mean",
    ) -> Tensor:
        """max(0, margin + d(a, positive) - d(a, negative)) with self as the anchor a and d the p-norm distance over
        the last axis, torch.pairwise_distance's ||x1 - x2 + eps||_p (with `swap`, d(a, negative) is the smaller of it
        and d(positive, negative)), the three of the same number of dimensions and broadcast together, as
        torch.nn.functional.triplet_margin_loss.

        >>> Tensor([[0.0, 0.0]]).triplet_margin_loss(Tensor([[3.0, 4.0]]), Tensor([[0.0, 1.0]]), eps=0.0).tolist()
        5.0
        """
        op = "triplet_margin_loss"
        _check_reduction(reduction, op)
        positive, negative = _as_tensor(positive, self), _as_tensor(negative, self)
        self._check_triplet(positive, negative, margin, op)

        def distance(x1: Tensor, x2: Tensor) -> Tensor:
            return _pairwise_distance(x1, x2, p, eps, op)

        return self._triplet_loss(positive, negative, distance, margin, swap, reduction, op)

    def triplet_margin_with_distance_loss(
        self,
        positive: Tensor,
        negative: Tensor,
        *,
        distance_function: Callable[[Tensor, Tensor], Tensor] | None = None,
        margin: float = 1.0,
        swap: bool = False,
        reduction: str = "mean",
    ) -> Tensor:
        """triplet_margin_loss with any `distance_function(x1, x2)` (default: the Euclidean pairwise distance with
        eps 1e-6), as torch.nn.functional.triplet_margin_with_distance_loss.

        >>> Tensor([[0.0]]).triplet_margin_with_distance_loss(
        ...     Tensor([[1.0]]), Tensor([[3.0]]), distance_function=lambda a, b: (a - b).abs().sum(-1)
        ... ).tolist()
        0.0
        """
        op = "triplet_margin_with_distance_loss"
        _check_reduction(reduction, op)
        positive, negative = _as_tensor(positive, self), _as_tensor(negative, self)
        self._check_triplet(positive, negative, margin, op)

        def pairwise(x1: Tensor, x2: Tensor) -> Tensor:
            return _pairwise_distance(x1, x2, 2.0, 1e-6, op)

        distance = distance_function if distance_function is not None else pairwise
        return self._triplet_loss(positive, negative, distance, margin, swap, reduction, op)

    def _check_triplet(self, positive: Tensor, negative: Tensor, margin: float, op: str) -> None:
        if not margin > 0:
            raise ArgumentError(f"{op}: margin must be greater than 0, got {margin}")
        if not self.ndim == positive.ndim == negative.ndim:
            raise ShapeError(
                f"{op}: anchor, positive and negative must have equal ndims, got shapes "
                f"{self.shape}, {positive.shape} and {negative.shape}"
            )
        both = _broadcast_shape(self.shape, positive.shape, f"{op} (anchor and positive)")
        _broadcast_shape(both, negative.shape, f"{op} (anchor, positive and negative)")

    def _triplet_loss(
        self,
        positive: Tensor,
        negative: Tensor,
        distance: Callable[[Tensor, Tensor], Tensor],
        margin: float,
        swap: bool,
        reduction: str,
        op: str,
    ) -> Tensor:
        to_positive, to_negative = distance(self, positive), distance(self, negative)
        if swap:
            to_negative = to_negative.minimum(distance(positive, negative))
        return (margin + to_positive - to_negative).clamp_min(0)._loss_reduce(reduction, op)

    # ---- likelihood losses

    def poisson_nll_loss(
        self, target: Tensor, log_input: bool = True, full: bool = False, eps: float = 1e-8, reduction: str = "mean"
    ) -> Tensor:
        """The negative log likelihood of a Poisson target: exp(x) - target * x of a log rate x (`log_input`), else
        x - target * log(x + eps) of a rate x; with `full`, plus Stirling's approximation of log(target!) where
        target > 1. Input and target broadcast together, as torch.nn.functional.poisson_nll_loss.

        >>> round(Tensor([0.0, 1.0]).poisson_nll_loss(Tensor([1.0, 2.0]), reduction="sum").item(), 5)
        1.71828
        """
        _check_reduction(reduction, "poisson_nll_loss")
        target = _as_tensor(target, self)
        _broadcast_shape(self.shape, target.shape, "poisson_nll_loss (input and target)")
        x = self._float()
        loss = x.exp() - target * x if log_input else x - target * (x + eps).log()
        if full:
            # target * log(target) - target + log(2 pi target) / 2, fed only targets > 1 (no log(0) in the gradient)
            t = (target > 1).where(target, 2.0)
            stirling = t * t.log() - t + 0.5 * (2 * math.pi * t).log()
            loss = loss + (target > 1).where(stirling, 0.0)
        return loss._loss_reduce(reduction, "poisson_nll_loss")

    def gaussian_nll_loss(
        self, target: Tensor, var: Tensor | float, full: bool = False, eps: float = 1e-6, reduction: str = "mean"
    ) -> Tensor:
        """The negative log likelihood of a Gaussian target: (log(var) + (x - target)^2 / var) / 2, plus log(2 pi) / 2
        with `full`, var clamped to at least eps (its gradient as if not clamped, as torch's). `var` has the input's
        shape, or one axis of size 1 (or the last one missing): one variance shared along it; a number is the same
        for all. As torch.nn.functional.gaussian_nll_loss: a negative var is an error (a tensor's is read back).

        >>> Tensor([1.0, 3.0]).gaussian_nll_loss(Tensor([1.0, 1.0]), 1.0, reduction="none").tolist()
        [0.0, 2.0]
        """
        op = "gaussian_nll_loss"
        target = _as_tensor(target, self)
        x = self._float()
        if isinstance(var, Tensor):
            if var.shape != self.shape:
                if var.shape == self.shape[:-1]:
                    # one variance per sample, shared along the input's last axis
                    var = var.unsqueeze(-1)
                elif var.ndim != self.ndim or sum(v for s, v in zip(self.shape, var.shape, strict=True) if s != v) != 1:
                    # (torch's rule: the sizes of var where it differs from the input add up to 1)
                    raise ShapeError(f"{op}: var's shape {var.shape} doesn't fit the input's {self.shape}")
            _check_reduction(reduction, op)
            if (var < 0).any().item():
                raise ArgumentError(f"{op}: var has negative entries")
            var = var._float()
        else:
            if var < 0:
                raise ArgumentError(f"{op}: var must not be negative, got {var}")
            _check_reduction(reduction, op)
            var = Tensor.full(self.shape, float(var), dtype=x.dtype, device=self.device)
        # clamped without recording it, as torch's in-place clamp under no_grad: the gradient is var's own
        var = _with_gradient_of((var < eps).where(eps, var), var)
        loss = 0.5 * (var.log() + (x - target).square() / var)
        if full:
            loss = loss + 0.5 * math.log(2 * math.pi)
        return loss._loss_reduce(reduction, op)

    # ---- connectionist temporal classification

    def ctc_loss(
        self,
        targets: Tensor,
        input_lengths: Tensor | Any,
        target_lengths: Tensor | Any,
        blank: int = 0,
        reduction: str = "mean",
        zero_infinity: bool = False,
    ) -> Tensor:
        """The CTC loss of log-probabilities (T, N, C) (or unbatched (T, C)) against class-index targets, padded
        (N, S) or concatenated (sum of target_lengths,), sample n read for input_lengths[n] steps: -log of the sum,
        over every alignment of its target (blanks between and around the labels, each label held one step or more),
        of the alignment's probability, as torch.nn.functional.ctc_loss. "mean" divides each loss by its target
        length (at least 1) and averages them. An impossible alignment (too few steps) is inf with a NaN gradient, or
        0 with a 0 gradient with `zero_infinity`. The lengths (tensors, sequences or ints) and the targets are read
        back to the host for torch's checks; the forward is a lazy graph of one step per time step. The gradient is
        torch's: the one with respect to the logits that log_softmax turned into these log-probabilities, which is
        the true one plus exp(log_probs) at each step read (the same once it goes back through the log_softmax).

        >>> lp = Tensor.full((2, 1, 2), math.log(0.5))
        >>> round(lp.ctc_loss(Tensor([[1]]), [2], [1], reduction="sum").item(), 5)
        0.28768
        """
        op = "ctc_loss"
        _check_reduction(reduction, op)
        input_len = _host_lengths(input_lengths, "input_lengths")
        target_len = _host_lengths(target_lengths, "target_lengths")
        if self.ndim not in (2, 3):
            raise ShapeError(f"{op}: log_probs must be (T, N, C) or unbatched (T, C), got {self.shape}")
        if self.numel() == 0:
            raise ArgumentError(f"{op}: log_probs must not be empty, got {self.shape}")
        if self.dtype not in (dtypes.float32, dtypes.float64):
            raise DTypeError(f"{op}: log_probs must be float32 or float64, got {self.dtype}")
        log_probs = self if self.ndim == 3 else self.unsqueeze(1)
        T, N, C = log_probs.shape
        if not 0 <= blank < C:
            raise ArgumentError(f"{op}: blank {blank} must be in the label range [0, {C})")
        labels = _ctc_labels(_as_tensor(targets, self), input_len, target_len, T, N, C, blank)
        running = Tensor((np.arange(T)[:, None] < input_len[None, :])[..., None], device=self.device)
        losses = _ctc_forward(log_probs, labels, running, input_len, target_len, blank)
        # torch's backward gives exp(log_probs) minus the true gradient's occupancy at each step t < input_length, and
        # NaN at all of them for an impossible alignment (zero_infinity zeroes its gradient below instead)
        scale = 1.0 if zero_infinity else losses.detach().isinf().where(math.nan, 1.0).reshape(1, N, 1)
        losses = _with_extra_gradient(losses, log_probs, running.where(log_probs.exp() * scale, 0.0))
        if zero_infinity:
            losses = (losses == _INF).where(0.0, losses)
        if reduction == "mean":
            divisors = Tensor(np.maximum(target_len, 1), device=self.device, dtype=losses.dtype)
            return (losses / divisors).mean()
        if reduction == "sum":
            return losses.sum()
        return losses if self.ndim == 3 else losses.reshape(())


def _ctc_labels(
    targets: Tensor, input_len: np.ndarray, target_len: np.ndarray, T: int, N: int, C: int, blank: int
) -> np.ndarray:
    """ctc_loss's checks of lengths and targets (torch's, and the labels in [0, C)), and each sample's extended label
    sequence (N, 2 S + 1): blank, label 1, blank, ..., label S, blank (S the targets' padded width, or the longest
    target of concatenated ones; blanks past a sample's length)."""
    op = "ctc_loss"
    for name, lengths in (("input_lengths", input_len), ("target_lengths", target_len)):
        if lengths.size != N:
            raise ShapeError(f"{op}: {name} must have one length per sample, {N}, got {lengths.size}")
    if input_len.min() < 0 or input_len.max() > T:
        raise ArgumentError(f"{op}: input_lengths must be in [0, {T}] (the log_probs' steps), got {input_len.tolist()}")
    if target_len.min() < 0:
        raise ArgumentError(f"{op}: target_lengths must be at least 0, got {target_len.tolist()}")
    if not dtypes.is_int(targets.dtype):
        raise DTypeError(f"{op}: targets must hold integer class indices, got {targets.dtype}")
    longest = int(target_len.max())
    values = targets.numpy().astype(np.int64)
    if targets.ndim == 1:
        if values.size != target_len.sum():
            raise ShapeError(
                f"{op}: concatenated targets must hold the sum of target_lengths, {target_len.sum()}, got {values.size}"
            )
        padded = np.zeros((N, longest), np.int64)
        starts = np.cumsum(target_len) - target_len
        for n in range(N):
            padded[n, : target_len[n]] = values[starts[n] : starts[n] + target_len[n]]
    elif targets.ndim == 2:
        if targets.shape[0] != N or targets.shape[1] < longest:
            raise ShapeError(
                f"{op}: padded targets must be (N, S) with N = {N} and S at least the longest target, {longest}, got "
                f"{targets.shape}"
            )
        padded = values
    else:
        raise ShapeError(
            f"{op}: targets must be padded (N, S) or concatenated (sum of target_lengths,), got {targets.shape}"
        )
    S = padded.shape[1]
    within = np.arange(S)[None, :] < target_len[:, None]
    padded = np.where(within, padded, blank)
    bad = padded[(padded < 0) | (padded >= C)]
    if bad.size:
        raise IndexError(f"{op}: target {bad[0]} is out of range for {C} classes")
    labels = np.full((N, 2 * S + 1), blank, np.int64)
    labels[:, 1::2] = padded
    return labels


def _ctc_forward(
    log_probs: Tensor, labels: np.ndarray, running: Tensor, input_len: np.ndarray, target_len: np.ndarray, blank: int
) -> Tensor:
    """-log p(target | log_probs) of each sample (N,), by the CTC forward recursion in log space over the extended
    labels: alpha_t(s) = logsumexp(alpha_{t-1}(s), alpha_{t-1}(s-1), alpha_{t-1}(s-2) where label s is not label
    s-2) + log_probs[t, label s], from alpha_{-1} = log 1 at s = 0, each sample held after its input length; the
    loss is -logsumexp of its last two states (the last one for an empty target). A lazy graph of one stored step per
    time step, the same kernel at every step (and one for every step's gradient)."""
    _, N, _ = log_probs.shape
    device = log_probs.device
    L = labels.shape[1]
    previous = labels.copy()
    previous[:, 2:], previous[:, :2] = labels[:, :-2], blank
    # (torch's rule reads only the label two back: a target holding the blank, which torch's docs rule out but its
    # kernels take, may be skipped into as any label is)
    skips = Tensor((labels != previous) & (np.arange(L) >= 2), device=device)
    start = np.full((N, L), -_INF)
    start[:, 0] = 0.0
    alpha = Tensor(start, device=device, dtype=log_probs.dtype)
    # (one step at least: with every input length 0 it holds every sample, and the loss still reads log_probs, whose
    # gradient is then 0 as torch's, not missing)
    for t, emitted in enumerate(_emitted_per_step(log_probs, labels, max(int(input_len.max()), 1))):
        advance = alpha.pad(((0, 0), (1, 0)), value=-_INF).shrink(((0, N), (0, L)))
        skip = skips.where(alpha.pad(((0, 0), (2, 0)), value=-_INF).shrink(((0, N), (0, L))), -_INF)
        step = _log_sum_exp([alpha, advance, skip]) + emitted
        held = running.shrink(((t, t + 1), None, None)).reshape(N, 1)
        alpha = _gradient_stored_once(held.where(step, alpha)).contiguous()
    ends = np.zeros((N, L), bool)
    ends[np.arange(N), 2 * target_len] = True
    ends[np.arange(N), np.maximum(2 * target_len - 1, 0)] = True
    return -_log_sum_exp_axis(Tensor(ends, device=device).where(alpha, -_INF), 1)


def _emitted_per_step(log_probs: Tensor, labels: np.ndarray, steps: int) -> list[Tensor]:
    """log_probs[t, n, labels[n, s]] (N, L) for each of the first `steps` steps t: slices of one gather, each a window
    of a stored block of about sqrt(steps) steps. A step reads its slice at a launch-time offset (the same kernel at
    every step), and the backward sums the steps' gradients block by block, then the blocks' (a sum of every step's
    padded at once costs each element a select per step, in a kernel of as many inputs as steps)."""
    _, N, _ = log_probs.shape
    L = labels.shape[1]
    index = Tensor(labels.astype(np.int32), device=log_probs.device).unsqueeze(0).expand(steps, N, L)
    emitted = _gradient_stored_once(log_probs.shrink(((0, steps), None, None))._gather_checked(2, index)).contiguous()
    size = math.isqrt(steps - 1) + 1
    slices = []
    for begin in range(0, steps, size):
        block = _gradient_stored_once(emitted.shrink(((begin, min(begin + size, steps)), None, None))).contiguous()
        slices += [block.shrink(((t, t + 1), None, None)).reshape(N, L) for t in range(block.shape[0])]
    return slices
