"""The losses of tensor/losses.py (torch.nn.functional's margin, ranking, embedding and likelihood losses, and
ctc_loss): values and input gradients compared with PyTorch (CPU) for each reduction, broadcasting, and errors.

Every kernel compiles (~50-100 ms here), so each check realizes a loss's three reductions and their gradients in one
schedule, and the tests share shapes where they can."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.tensor.support import ArgumentError, DTypeError, ShapeError

torch = pytest.importorskip("torch")
F = torch.nn.functional

RNG = np.random.default_rng(5)
REDUCTIONS = ("none", "sum", "mean")


def _randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def as_torch(
    name: str, arrays: list[np.ndarray], reductions=REDUCTIONS, atol: float = 1e-5, with_grad: int = 3, **kwargs
) -> None:
    """Tensor.`name` against F.`name` on the same arrays (integer ones are int32 here and int64 for torch), for each
    reduction: the values, and the gradient of sum(loss * upstream) summed over the reductions with respect to each
    of the first `with_grad` arrays that is float (NaN where torch has NaN). Ours realize in one schedule."""
    is_float = [a.dtype.kind == "f" and i < with_grad for i, a in enumerate(arrays)]
    ours = [
        Tensor(a if f else a.astype(np.int32), requires_grad=f or None) for a, f in zip(arrays, is_float, strict=True)
    ]
    theirs = [
        torch.tensor(a if f else a.astype(np.int64), requires_grad=f) for a, f in zip(arrays, is_float, strict=True)
    ]
    outs = [getattr(ours[0], name)(*ours[1:], reduction=r, **kwargs) for r in reductions]
    refs = [getattr(F, name)(*theirs, reduction=r, **kwargs) for r in reductions]
    upstreams = [np.asarray(RNG.standard_normal(ref.shape), np.float32) for ref in refs]
    sum(((out * Tensor(up)).sum() for out, up in zip(outs, upstreams, strict=True)), Tensor(0.0)).backward()
    sum((ref * torch.tensor(up)).sum() for ref, up in zip(refs, upstreams, strict=True)).backward()
    grads = [t.grad for t in ours if t.grad is not None]
    outs[0].realize(*outs[1:], *grads)
    for reduction, out, ref in zip(reductions, outs, refs, strict=True):
        assert out.shape == tuple(ref.shape), (name, reduction, out.shape, ref.shape)
        np.testing.assert_allclose(
            out.numpy(), ref.detach().numpy(), atol=atol, rtol=1e-4, err_msg=f"{name} {reduction}"
        )
    for i, (t, r) in enumerate(zip(ours, theirs, strict=True)):
        if r.grad is not None:
            assert t.grad is not None, f"{name}: input {i} got no gradient"
            np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), atol=atol, rtol=1e-4, err_msg=f"{name} grad {i}")


# ---------------------------------------------------------------------------------------------------------------------
# margin and ranking losses


def test_margin_ranking_hinge_and_soft_margin_losses_as_torch():
    x1 = np.array([[1.0, 2.0, 3.0, -0.5], [0.25, -1.0, 4.0, 1.5]], np.float32)
    x2 = np.array([[1.0, 1.0, 5.0, 0.5]], np.float32)
    target = np.array([[1.0, -1.0, 1.0, -1.0], [-1.0, 1.0, -1.0, 1.0]], np.float32)
    # x2 broadcast along the batch; ties at the hinge (x1 == x2, target 1): clamp_min passes the gradient, as torch's
    as_torch("margin_ranking_loss", [x1, x2, target])
    as_torch("margin_ranking_loss", [x1, x2, target[:1]], reductions=("none",), margin=0.5)
    # target 1, -1 and any other value (0.0, 2.0: both terms), margin - x == 0 at x = 1 (tie)
    x = np.array([[0.5, 2.0, -1.0, 1.0], [0.3, 1.0, -3.0, 0.0]], np.float32)
    signs = np.array([[1.0, -1.0, -1.0, -1.0], [0.0, 2.0, -1.0, 1.0]], np.float32)
    as_torch("hinge_embedding_loss", [x, signs])
    # a target broadcast against the input both ways: (2, 1) x (4,) -> (2, 4)
    as_torch("hinge_embedding_loss", [x[0], signs[:, :1].copy()], reductions=("none",), margin=0.5)
    # soft margin: the target broadcast to the input
    # (torch's has no gradient for the target)
    as_torch("soft_margin_loss", [x, signs[1]], with_grad=1)

    with pytest.raises(ShapeError, match="same number of dimensions"):
        Tensor(x1).margin_ranking_loss(Tensor(x2[0]), Tensor(target))
    with pytest.raises(ValueError, match="reduction must be"):
        Tensor(x1).margin_ranking_loss(Tensor(x2), Tensor(target), reduction="avg")
    # the target only broadcasts to the input's shape (torch: "output with shape [4] doesn't match ...")
    with pytest.raises(ShapeError, match="must broadcast to the input"):
        Tensor(x[0]).soft_margin_loss(Tensor(signs))
    # torch's log1p(exp(-x y)) is inf beyond |x y| ~ 88 (its gradient NaN): ours is the exact value
    big = Tensor([-100.0, 100.0], requires_grad=True)
    loss = big.soft_margin_loss(Tensor([1.0, -1.0]), reduction="sum")
    loss.backward()
    assert loss.item() == pytest.approx(200.0) and big.grad.tolist() == [-1.0, 1.0]


def test_multilabel_and_multi_class_margin_losses_as_torch():
    x = _randn(3, 5)
    labels = (RNG.random((3, 5)) > 0.5).astype(np.float32)
    weight = np.abs(_randn(5))
    as_torch("multilabel_soft_margin_loss", [x, labels])
    as_torch("multilabel_soft_margin_loss", [x, labels[:1], weight], reductions=("none",))
    # class lists ending at the first -1 (values after it ignored), a repeated class counted twice, an empty list;
    # hinges of exactly 0 (x[j] - x[i] == 1) get no gradient, as torch's
    xs = np.array([[0.1, 0.2, 0.4, 0.8, 0.0], [0.5, 1.5, 0.5, 0.3, 2.0], [1.0, 0.0, 0.0, 0.0, 0.0]], np.float32)
    targets = np.array([[3, 0, -1, 1, 4], [1, 1, -1, -1, -1], [-1, 0, 1, 2, 3]])
    as_torch("multilabel_margin_loss", [xs, targets])
    as_torch("multilabel_margin_loss", [xs[0], np.array([1, 0, 4, -1, 2])])
    # p 1 and 2, a margin, class weights, a tie (z == 0 at x = [1, 0], target 0 with margin 1)
    y = np.array([3, 1, 0])
    for p in (1, 2):
        as_torch("multi_margin_loss", [xs, y], p=p, margin=0.7)
    ours = Tensor(xs, requires_grad=True)
    theirs = torch.tensor(xs, requires_grad=True)
    out = ours.multi_margin_loss(Tensor(y.astype(np.int32)), p=2, margin=0.7, weight=Tensor(weight), reduction="sum")
    ref = F.multi_margin_loss(theirs, torch.tensor(y), p=2, margin=0.7, weight=torch.tensor(weight), reduction="sum")
    out.backward()
    ref.backward()
    assert out.item() == pytest.approx(ref.item(), rel=1e-5)
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)
    # a vector input: the loss takes the target's shape, 0-d or (1,)
    for target in (np.array(2), np.array([2])):
        assert Tensor(xs[0]).multi_margin_loss(Tensor(target), reduction="none").shape == target.shape

    with pytest.raises(IndexError, match="class axis"):
        Tensor(1.0).multilabel_soft_margin_loss(Tensor(1.0))
    with pytest.raises(ShapeError, match="must be the input's"):
        Tensor(xs).multilabel_margin_loss(Tensor(targets[0]))
    with pytest.raises(IndexError, match="target 5 is out of range"):
        Tensor(xs).multilabel_margin_loss(Tensor(np.where(targets == 4, 5, targets)))
    with pytest.raises(TypeError, match="integer class indices"):
        Tensor(xs).multi_margin_loss(Tensor(y.astype(np.float32)))
    with pytest.raises(ShapeError, match="non-empty vector"):
        Tensor(_randn(2, 0)).multi_margin_loss(Tensor([0, 0]))
    with pytest.raises(ShapeError, match="one class index per sample"):
        Tensor(xs).multi_margin_loss(Tensor(y[:2]))
    with pytest.raises(IndexError, match="target 5 is out of range"):
        Tensor(xs).multi_margin_loss(Tensor([0, 5, 1]))
    with pytest.raises(ValueError, match="only p == 1 and p == 2"):
        Tensor(xs).multi_margin_loss(Tensor(y), p=3)
    with pytest.raises(ShapeError, match="one value per class"):
        Tensor(xs).multi_margin_loss(Tensor(y), weight=Tensor(weight[:3]))


# ---------------------------------------------------------------------------------------------------------------------
# embedding losses


def test_cosine_embedding_and_triplet_losses_as_torch():
    # rows: similar pair, a -1 pair under the margin and over it, a zero vector (its cosine is 0), a target of 0
    x1 = np.array([[1.0, 0.0, 2.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 2.0, -1.0], [0.5, -1.0, 1.0]], np.float32)
    x2 = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.5], [1.0, 0.0, 0.0], [2.0, -1.0, 0.0], [0.5, 1.0, 2.0]], np.float32)
    target = np.array([1.0, -1.0, -1.0, 0.0, -1.0], np.float32)
    as_torch("cosine_embedding_loss", [x1, x2, target], margin=0.2)
    as_torch("cosine_embedding_loss", [x1[0], x2[1], np.array(-1.0, np.float32)], reductions=("none",))
    # x2 (N, 1) broadcast along the rows: each squared norm is its own operand's, as torch's (so cos can pass 1)
    as_torch("cosine_embedding_loss", [x1, x2[:, :1].copy(), target], reductions=("none",))
    anchor, positive, negative = _randn(4, 6), _randn(4, 6), _randn(1, 6)
    # the negative broadcast along the batch; swap; a p-norm other than 2
    as_torch("triplet_margin_loss", [anchor, positive, negative], margin=2.0)
    as_torch("triplet_margin_loss", [anchor, positive, negative], reductions=("mean",), p=1.0, swap=True)
    as_torch("triplet_margin_with_distance_loss", [anchor, positive, negative], reductions=("none",), margin=1.5)

    def manhattan(a, b):
        return (a - b).abs().sum(-1)

    as_torch(
        "triplet_margin_with_distance_loss",
        [anchor, positive, negative],
        reductions=("sum",),
        distance_function=manhattan,
        swap=True,
    )

    with pytest.raises(ShapeError, match="0-d or 1-D"):
        Tensor(x1).cosine_embedding_loss(Tensor(x2), Tensor(x1))
    with pytest.raises(ShapeError, match="1-D target takes 2-D inputs"):
        Tensor(x1[0]).cosine_embedding_loss(Tensor(x2[0]), Tensor(target[:1]))
    with pytest.raises(ShapeError, match="triplet_margin_loss: .* equal ndims"):
        Tensor(anchor).triplet_margin_loss(Tensor(positive), Tensor(negative[0]))
    with pytest.raises(ValueError, match="margin must be greater than 0"):
        Tensor(anchor).triplet_margin_with_distance_loss(Tensor(positive), Tensor(negative), margin=0.0)
    with pytest.raises(ShapeError):
        Tensor(anchor).triplet_margin_loss(Tensor(positive), Tensor(_randn(3, 6)))


# ---------------------------------------------------------------------------------------------------------------------
# likelihood losses


def test_poisson_and_gaussian_nll_losses_as_torch():
    log_rate = np.array([[0.5, -1.0, 2.0], [0.0, 3.0, -0.25]], np.float32)
    counts = np.array([[0.0, 1.0, 2.0], [3.0, 0.5, 7.0]], np.float32)
    as_torch("poisson_nll_loss", [log_rate, counts])
    # Stirling's term where target > 1; a rate input (log_input=False) with eps, a target broadcast along the batch
    as_torch("poisson_nll_loss", [log_rate, counts[1]], reductions=("none",), full=True)
    # (a target of 0 with full: torch's target gradient is NaN there, 0 * log(0), ours 0)
    positive = np.where(counts == 0, 0.25, counts).astype(np.float32)
    as_torch("poisson_nll_loss", [np.abs(log_rate), positive], reductions=("sum",), log_input=False, full=True)
    x, target = _randn(2, 3), _randn(2, 3)
    # variances of the input's shape (one below eps: clamped, its gradient var's own), one per sample ((N,) and
    # (N, 1)), one per column ((1, 3)); full adds log(2 pi) / 2
    var = np.array([[1e-8, 0.5, 2.0], [1.5, 0.25, 3.0]], np.float32)
    as_torch("gaussian_nll_loss", [x, target, var], full=True)
    as_torch("gaussian_nll_loss", [x, target, var[:, 0].copy()], reductions=("none",))
    as_torch("gaussian_nll_loss", [x, target, var[:, :1].copy()], reductions=("mean",))
    as_torch("gaussian_nll_loss", [x, target, var[1:]], reductions=("sum",), eps=0.3)
    assert Tensor(x).gaussian_nll_loss(Tensor(target), 0.5).item() == pytest.approx(
        F.gaussian_nll_loss(torch.tensor(x), torch.tensor(target), 0.5).item(), rel=1e-5
    )

    with pytest.raises(ShapeError, match="doesn't fit"):
        Tensor(x).gaussian_nll_loss(Tensor(target), Tensor(var[0]))
    with pytest.raises(ValueError, match="negative"):
        Tensor(x).gaussian_nll_loss(Tensor(target), Tensor(-var))
    with pytest.raises(ValueError, match="negative"):
        Tensor(x).gaussian_nll_loss(Tensor(target), -1.0)
    with pytest.raises(ValueError, match="reduction must be"):
        Tensor(x).poisson_nll_loss(Tensor(target), reduction="batchmean")


# ---------------------------------------------------------------------------------------------------------------------
# ctc_loss


def _ctc_case(T: int = 7, N: int = 4, C: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    # log-probabilities; targets padded (N, 3): a repeat needing a blank between, an impossible one (2 steps for a
    # repeated label), an empty target with no steps (loss -0.0); int32 here
    log_probs = torch.randn(T, N, C, generator=torch.Generator().manual_seed(3)).log_softmax(2).numpy()
    targets = np.array([[1, 2, 2], [3, 0, 0], [1, 1, -1], [4, 4, 4]], np.int32)
    input_lengths = np.array([7, 5, 2, 0], np.int32)
    target_lengths = np.array([3, 1, 2, 0], np.int32)
    return log_probs, targets, input_lengths, target_lengths


def _ctc_both(log_probs, targets, input_lengths, target_lengths, reduction, **kwargs):
    # (ours, torch's) loss and log_probs gradient, the loss times a random upstream; our lengths as a tensor and a list
    ours_lp = Tensor(log_probs, requires_grad=True)
    out = ours_lp.ctc_loss(Tensor(targets), Tensor(input_lengths), list(target_lengths), reduction=reduction, **kwargs)
    theirs_lp = torch.tensor(log_probs, requires_grad=True)
    t_targets = torch.tensor(targets.astype(np.int64))
    t_lengths = [torch.tensor(v.astype(np.int64)) for v in (input_lengths, target_lengths)]
    ref = F.ctc_loss(theirs_lp, t_targets, *t_lengths, reduction=reduction, **kwargs)
    upstream = np.asarray(RNG.standard_normal(ref.shape), log_probs.dtype)
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    out.realize(ours_lp.grad)
    return (out.numpy(), ours_lp.grad.numpy()), (ref.detach().numpy(), theirs_lp.grad.numpy())


def test_ctc_loss_values_and_gradients_as_torch():
    log_probs, targets, input_lengths, target_lengths = _ctc_case()
    for zero_infinity in (False, True):
        for reduction in REDUCTIONS:
            (out, grad), (ref, ref_grad) = _ctc_both(
                log_probs, targets, input_lengths, target_lengths, reduction, zero_infinity=zero_infinity
            )
            # inf for the impossible alignment (0 with zero_infinity), -0.0 for the empty one; torch's gradient: NaN
            # for the impossible one's steps, exp(log_probs) added at each step before the input length
            np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5, err_msg=f"{reduction} {zero_infinity}")
            np.testing.assert_allclose(grad, ref_grad, rtol=1e-4, atol=1e-5, err_msg=f"{reduction} {zero_infinity}")
            if reduction == "none":
                assert np.signbit(out[3]) and (out[2] == 0 if zero_infinity else out[2] == math.inf)
    # concatenated targets (the first two samples' labels) with another blank; unbatched (T, C) with a 0-d loss
    flat = np.concatenate([row[:n] for row, n in zip(targets[:2], target_lengths[:2], strict=True)])
    first_two = (log_probs[:, :2].copy(), flat, input_lengths[:2], target_lengths[:2])
    (out, grad), (ref, ref_grad) = _ctc_both(*first_two, "none", blank=4)
    np.testing.assert_allclose(out, ref, rtol=1e-5)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-4, atol=1e-5)
    lp = Tensor(log_probs[:, 0])
    loss = lp.ctc_loss(Tensor(targets[0]), Tensor(7), Tensor(3), reduction="none")
    ref = F.ctc_loss(
        torch.tensor(log_probs[:, 0]), torch.tensor(targets[0].astype(np.int64)), [7], [3], reduction="none"
    )
    assert loss.shape == () and loss.item() == pytest.approx(ref.item(), rel=1e-5)


def test_ctc_loss_float64_and_through_log_softmax():
    # float64 log-probabilities from logits: the gradient with respect to the logits is the true one (torch's
    # exp(log_probs) term sums to zero through the log_softmax)
    log_probs, targets, input_lengths, target_lengths = _ctc_case()
    logits = np.random.default_rng(1).standard_normal(log_probs.shape)
    ours = Tensor(logits, requires_grad=True)
    theirs = torch.tensor(logits, requires_grad=True)
    # (the mean of an inf loss, the impossible alignment's)
    out = ours.log_softmax(2).ctc_loss(Tensor(targets), input_lengths.tolist(), Tensor(target_lengths))
    ref = F.ctc_loss(theirs.log_softmax(2), torch.tensor(targets.astype(np.int64)), [7, 5, 2, 0], [3, 1, 2, 0])
    assert out.dtype == dtypes.float64 and out.item() == math.inf == ref.item()
    keep = [0, 1, 3]
    out = ours.log_softmax(2)[:, keep].ctc_loss(Tensor(targets[keep]), input_lengths[keep], target_lengths[keep])
    ref = F.ctc_loss(
        theirs.log_softmax(2)[:, keep],
        torch.tensor(targets[keep].astype(np.int64)),
        [7, 5, 0],
        [3, 1, 0],
    )
    out.backward()
    ref.backward()
    assert out.item() == pytest.approx(ref.item(), rel=1e-12)
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_ctc_loss_errors():
    log_probs, targets, input_lengths, target_lengths = _ctc_case()
    lp = Tensor(log_probs)

    def ctc(**changes):
        args = {"targets": Tensor(targets), "input_lengths": input_lengths, "target_lengths": target_lengths}
        args.update(changes)
        return lp.ctc_loss(**args)

    with pytest.raises(ValueError, match="reduction must be"):
        ctc(reduction="avg")
    with pytest.raises(TypeError, match="input_lengths must be integral"):
        ctc(input_lengths=Tensor(input_lengths.astype(np.float32)))
    with pytest.raises(ArgumentError, match="blank 5 must be in the label range"):
        ctc(blank=5)
    with pytest.raises(ShapeError, match="one length per sample"):
        ctc(target_lengths=target_lengths[:3])
    with pytest.raises(ArgumentError, match=r"input_lengths must be in \[0, 7\]"):
        ctc(input_lengths=[8, 1, 1, 1])
    with pytest.raises(ArgumentError, match="target_lengths must be at least 0"):
        ctc(target_lengths=[-1, 1, 1, 1])
    with pytest.raises(ShapeError, match="longest target, 4"):
        ctc(target_lengths=[4, 1, 1, 1])
    with pytest.raises(ShapeError, match="sum of target_lengths, 6"):
        ctc(targets=Tensor([1, 2, 2, 3, 1]))
    with pytest.raises(IndexError, match="target 5 is out of range"):
        ctc(targets=Tensor(np.where(targets == 3, 5, targets)))
    with pytest.raises(DTypeError, match="integer class indices"):
        ctc(targets=Tensor(targets.astype(np.float32)))
    with pytest.raises(ArgumentError, match="must not be empty"):
        Tensor(log_probs[:, :0]).ctc_loss(Tensor(targets[:0]), [], [])
    with pytest.raises(ShapeError, match=r"\(T, N, C\)"):
        Tensor(log_probs[None]).ctc_loss(Tensor(targets), input_lengths, target_lengths)
    with pytest.raises(TypeError, match="float32 or float64"):
        Tensor(log_probs).cast(dtypes.float16).ctc_loss(Tensor(targets), input_lengths, target_lengths)


def test_ctc_loss_with_the_blank_inside_targets_as_torch():
    # torch's docs rule the blank out of targets, but its kernels take it (no error) and skip into it as into any
    # label (only the label two back is compared); the blank test on the label itself gave a larger loss (6.016 where
    # torch gives 5.059). The gradient is the true one of that loss: torch's hand-written backward agrees with its
    # finite differences except where a target ends in the blank, so the gradient is checked against them there
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((7, 4, 4))
    targets = np.array([[1, 0, 2], [2, 0, 0], [0, 0, 1], [3, 3, 2]], np.int64)
    input_lengths, target_lengths = np.array([7, 6, 7, 7]), np.array([3, 2, 3, 3])

    def theirs_of(x):
        lp = torch.tensor(x).log_softmax(-1)
        return F.ctc_loss(
            lp, torch.tensor(targets), torch.tensor(input_lengths), torch.tensor(target_lengths), reduction="none"
        )

    ours = Tensor(logits, requires_grad=True)
    losses = ours.log_softmax(-1).ctc_loss(Tensor(targets), input_lengths, target_lengths, reduction="none")
    np.testing.assert_allclose(losses.numpy(), theirs_of(logits).numpy(), rtol=1e-12)
    losses.sum().backward()
    numeric = np.zeros_like(logits)
    for i in np.ndindex(logits.shape):
        step = np.zeros_like(logits)
        step[i] = 1e-6
        numeric[i] = (theirs_of(logits + step).sum() - theirs_of(logits - step).sum()).item() / 2e-6
    np.testing.assert_allclose(ours.grad.numpy(), numeric, atol=1e-7)
