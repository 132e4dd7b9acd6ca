"""PyTorch operations with PyTorch's semantics (regression losses, kl_div, cosine_similarity, pixel_shuffle and
pixel_unshuffle, outer, trace, isin, nan_to_num, logit, cdist): values, gradients and errors compared with PyTorch
(CPU), special values included."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.dtype import from_numpy_dtype
from uopkit.tensor.support import ArgumentError, ShapeError

torch = pytest.importorskip("torch")
F = torch.nn.functional
# (torch warns when a loss broadcasts its target and of kl_div's "mean", both tested on purpose)
pytestmark = [pytest.mark.filterwarnings("ignore:Using a target size"), pytest.mark.filterwarnings("ignore:reduction")]

RNG = np.random.default_rng(11)
NAN, INF = float("nan"), float("inf")


def _randn(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def as_torch(fn: Callable, arrays: list[np.ndarray], ours_fn: Callable | None = None, atol: float = 1e-5) -> None:
    """`ours_fn` (else `fn`) on Tensors against `fn` on torch tensors: the value, and the gradient of
    sum(out * a random upstream) with respect to every float input (NaN where torch has NaN)."""
    ours_fn = ours_fn or fn
    float_input = [np.issubdtype(a.dtype, np.floating) for a in arrays]
    ours = [Tensor(a, requires_grad=f or None) for a, f in zip(arrays, float_input, strict=True)]
    theirs = [torch.tensor(a, requires_grad=f) for a, f in zip(arrays, float_input, strict=True)]
    out, ref = ours_fn(*ours), fn(*theirs)
    assert out.shape == tuple(ref.shape), (out.shape, ref.shape)
    assert out.dtype == from_numpy_dtype(ref.detach().numpy().dtype), (out.dtype, ref.dtype)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=1e-4)
    if not ref.requires_grad:
        return
    upstream = RNG.standard_normal(out.shape).astype(out.numpy().dtype)
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    for i, (t, r) in enumerate(zip(ours, theirs, strict=True)):
        if float_input[i] and r.grad is not None:
            assert t.grad is not None, f"input {i} got no gradient"
            np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), atol=atol, rtol=1e-4, err_msg=f"gradient {i}")


# ---------------------------------------------------------------------------------------------------------------------
# regression losses, kl_div


def test_regression_losses_values_and_gradients_as_torch():
    # differences at 0, at +-1 (beta and delta), beyond, and infinite; a target broadcast against the input
    x = np.array([[0.25, -0.5, 1.0, 3.0, -2.0, INF], [0.0, 0.5, -1.0, 0.75, 7.0, -INF]], np.float32)
    target = np.zeros(6, np.float32)
    cases = [
        ("mse_loss", "none", {}),
        ("l1_loss", "none", {}),
        ("smooth_l1_loss", "none", {}),
        ("huber_loss", "none", {}),
    ]
    for name, reduction, kwargs in cases:
        as_torch(
            lambda a, b, n=name, r=reduction, kw=kwargs: getattr(F, n)(a, b, reduction=r, **kw),
            [x, target],
            lambda a, b, n=name, r=reduction, kw=kwargs: getattr(a, n)(b, reduction=r, **kw),
        )
    # float64, other betas and deltas (beta 0 is l1_loss), the sum and the mean
    finite = [_randn(3, 5, dtype=np.float64), _randn(3, 5, dtype=np.float64)]
    cases = [
        ("smooth_l1_loss", "sum", {"beta": 0.5}),
        ("smooth_l1_loss", "mean", {"beta": 0.0}),
        ("huber_loss", "sum", {"delta": 0.4}),
        ("mse_loss", "mean", {}),
    ]
    for name, reduction, kwargs in cases:
        as_torch(
            lambda a, b, n=name, r=reduction, kw=kwargs: getattr(F, n)(a, b, reduction=r, **kw),
            finite,
            lambda a, b, n=name, r=reduction, kw=kwargs: getattr(a, n)(b, reduction=r, **kw),
        )


def test_regression_loss_errors_say_what_is_wrong():
    a, b = Tensor([1.0, 2.0]), Tensor([1.0, 2.0, 3.0])
    with pytest.raises(ShapeError, match="mse_loss"):
        a.mse_loss(b)
    with pytest.raises(ValueError, match="l1_loss: reduction must be .* got 'batchmean'"):
        a.l1_loss(a, reduction="batchmean")
    with pytest.raises(TypeError, match="huber_loss: needs a floating-point"):
        Tensor([1, 2]).huber_loss(Tensor([1, 2]))
    with pytest.raises(ArgumentError, match="beta must be >= 0"):
        a.smooth_l1_loss(a, beta=-1.0)
    with pytest.raises(ArgumentError, match="delta must be > 0"):
        a.huber_loss(a, delta=0.0)
    # an int target with a float input is fine (promoted, as torch)
    assert Tensor([1.0, 3.0]).mse_loss(Tensor([1, 1])).item() == 2.0


def test_kl_div_values_and_gradients_of_both_arguments_as_torch():
    # zeros in the target (0, with xlogy's NaN gradient for the target) and a negative one (NaN, as torch)
    logp = np.log(RNG.dirichlet(np.ones(5), 3)).astype(np.float32)
    target = RNG.dirichlet(np.ones(5), 3).astype(np.float32)
    target[0, 1], target[1, 3], target[2, 0] = 0.0, 0.0, -0.25
    for reduction in ("none", "sum", "mean", "batchmean"):
        as_torch(
            lambda a, b, r=reduction: F.kl_div(a, b, reduction=r),
            [logp, target],
            lambda a, b, r=reduction: a.kl_div(b, reduction=r),
        )
    # a log target, with a -inf (torch's NaN: 0 * -inf)
    log_target = np.log(RNG.dirichlet(np.ones(5), 3)).astype(np.float32)
    log_target[1, 2] = -INF
    as_torch(
        lambda a, b: F.kl_div(a, b, reduction="none", log_target=True),
        [logp, log_target],
        lambda a, b: a.kl_div(b, reduction="none", log_target=True),
    )
    # batchmean divides by the input's first axis; of a 0-d input it is the sum
    assert Tensor(-1.0).kl_div(Tensor(0.5), reduction="batchmean").item() == pytest.approx(
        F.kl_div(torch.tensor(-1.0), torch.tensor(0.5), reduction="batchmean").item()
    )
    with pytest.raises(ValueError, match="'batchmean', got 'avg'"):
        Tensor(logp).kl_div(Tensor(target), reduction="avg")
    with pytest.raises(TypeError, match="kl_div: needs floating-point"):
        Tensor([1, 2]).kl_div(Tensor([1, 2]))


# ---------------------------------------------------------------------------------------------------------------------
# cosine_similarity, cdist, outer, trace


def test_cosine_similarity_clamps_each_norm_as_torch():
    # rows: plain, a zero vector (its norm clamped; the gradient is the norm's), a vector below eps, a tiny one
    x1 = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [1e-9, 0.0, 0.0], [1e-5, 0.0, -2e-5]], np.float32)
    x2 = np.array([[1.0, 0.0, 1.0]], np.float32)
    as_torch(F.cosine_similarity, [x1, x2], lambda a, b: a.cosine_similarity(b), atol=1e-3)
    a, b = _randn(2, 4, 3, dtype=np.float64), _randn(4, 1, dtype=np.float64)
    for dim in (0, -1, 1):
        as_torch(
            lambda p, q, d=dim: F.cosine_similarity(p, q, dim=d, eps=1e-6),
            [a, b],
            lambda p, q, d=dim: p.cosine_similarity(q, dim=d, eps=1e-6),
        )
    with pytest.raises(ShapeError, match="cosine_similarity"):
        Tensor.ones(2, 3).cosine_similarity(Tensor.ones(2, 4))
    with pytest.raises(TypeError, match="floating-point"):
        Tensor([1, 2]).cosine_similarity(Tensor([2, 1]), dim=0)
    with pytest.raises(IndexError, match="cosine_similarity"):
        Tensor.ones(3).cosine_similarity(Tensor.ones(3))


def test_cdist_values_and_gradients_as_torch():
    # batch axes broadcast; an equal pair of rows (distance 0: gradient 0), a zero difference in a row (p < 1: its
    # gradient is 0) and two tied largest differences (p = inf: each gets the whole gradient, as torch's)
    x1, x2 = _randn(2, 3, 4), _randn(5, 4)
    x1[0, 0] = x2[1]
    x1[1, 0] = x2[0] + np.array([0.0, 1.0, 2.0, 0.5], np.float32)
    x1[1, 1] = x2[2] + np.array([1.0, -1.0, 0.5, 0.25], np.float32)
    for p in (1.0, 2.0, 0.5, 3.0, INF):
        as_torch(lambda a, b, p=p: torch.cdist(a, b, p=p), [x1, x2], lambda a, b, p=p: a.cdist(b, p=p), atol=1e-4)
    # p = 0 counts the coordinates that differ (torch's gradient is 0; this one has none)
    zero = Tensor(x1).cdist(Tensor(x2), p=0.0)
    np.testing.assert_array_equal(zero.numpy(), torch.cdist(torch.tensor(x1), torch.tensor(x2), p=0.0).numpy())
    # more than 25 rows: torch's p = 2 goes through a matrix product (close to the exact differences)
    as_torch(torch.cdist, [_randn(30, 3), _randn(4, 3)], lambda s, t: s.cdist(t), atol=1e-4)
    assert Tensor.ones(2, 1, 3, 4).cdist(Tensor.ones(5, 2, 4)).shape == (2, 5, 3, 2)
    with pytest.raises(ShapeError, match="same M"):
        Tensor.ones(2, 3).cdist(Tensor.ones(2, 4))
    with pytest.raises(ShapeError, match="cdist"):
        Tensor.ones(3).cdist(Tensor.ones(3))
    with pytest.raises(ArgumentError, match="p must be >= 0"):
        Tensor.ones(2, 3).cdist(Tensor.ones(2, 3), p=-1.0)
    with pytest.raises(TypeError, match="x1 is dtypes.int"):
        Tensor([[1, 2]]).cdist(Tensor([[1.0, 2.0]]))


def test_outer_and_trace_as_torch():
    as_torch(torch.outer, [_randn(3), _randn(4)], lambda a, b: a.outer(b))
    ints = Tensor([1, 2]).outer(Tensor([3, 4, 5]))
    assert ints.dtype == dtypes.int32 and ints.tolist() == [[3, 4, 5], [6, 8, 10]]
    assert Tensor([1, 2]).outer(Tensor([0.5])).tolist() == [[0.5], [1.0]]
    with pytest.raises(ShapeError, match="outer: needs two 1-D tensors, got shapes \\(2, 2\\) and \\(2,\\)"):
        Tensor.ones(2, 2).outer(Tensor.ones(2))
    for shape in ((4, 4), (3, 5), (5, 2)):
        as_torch(torch.trace, [_randn(*shape)], lambda a: a.trace())
    assert Tensor([[1, 2, 3], [4, 5, 6]]).trace().item() == 6 and Tensor.ones(0, 2).trace().item() == 0.0
    with pytest.raises(ShapeError, match="trace: needs a matrix"):
        Tensor.ones(3).trace()


# ---------------------------------------------------------------------------------------------------------------------
# pixel_shuffle, pixel_unshuffle


def test_pixel_shuffle_and_unshuffle_as_torch():
    as_torch(lambda x: F.pixel_shuffle(x, 2), [_randn(2, 12, 3, 5)], lambda x: x.pixel_shuffle(2))
    as_torch(lambda x: F.pixel_shuffle(x, 3), [_randn(9, 2, 1)], lambda x: x.pixel_shuffle(3))
    as_torch(lambda x: F.pixel_unshuffle(x, 2), [_randn(2, 1, 3, 4, 6)], lambda x: x.pixel_unshuffle(2))
    ints = np.arange(2 * 8 * 2 * 3).reshape(2, 8, 2, 3)
    assert Tensor(ints).pixel_shuffle(2).pixel_unshuffle(2).tolist() == ints.tolist()
    assert Tensor(ints).pixel_shuffle(1).tolist() == ints.tolist()
    with pytest.raises(ShapeError, match="channels \\(5, .*divisible by upscale_factor\\^2 = 4"):
        Tensor.ones(1, 5, 2, 2).pixel_shuffle(2)
    with pytest.raises(ShapeError, match="pixel_unshuffle: height and width"):
        Tensor.ones(1, 1, 3, 4).pixel_unshuffle(2)
    with pytest.raises(ShapeError, match="pixel_shuffle: needs"):
        Tensor.ones(4, 2).pixel_shuffle(2)
    with pytest.raises(ArgumentError, match="must be positive"):
        Tensor.ones(1, 4, 2, 2).pixel_shuffle(0)
    with pytest.raises(TypeError, match="must be an int"):
        Tensor.ones(1, 4, 2, 2).pixel_unshuffle(2.0)


# ---------------------------------------------------------------------------------------------------------------------
# isin


def test_isin_as_torch():
    cases = [
        (np.array([[1, 2], [3, 4]]), np.array([4, 1, 9])),
        (np.array([1.0, NAN, 0.0, 2.5, -INF], np.float32), np.array([[NAN, -0.0], [-INF, 7.0]], np.float32)),
        # compared in the common dtype: 3 is in [2.5, 3.0], 2 isn't
        (np.array([1, 2, 3]), np.array([2.5, 3.0], np.float32)),
        (np.array(5), np.array([5])),
        (np.array([1, 2]), np.array([], np.int64)),
    ]
    for elements, tests in cases:
        for invert in (False, True):
            ours = Tensor(elements).isin(Tensor(tests), invert=invert)
            theirs = torch.isin(torch.tensor(elements), torch.tensor(tests), invert=invert)
            assert ours.dtype == dtypes.bool and ours.tolist() == theirs.tolist(), (elements, tests, invert)
    assert Tensor([1, 2, 3]).isin(2).tolist() == [False, True, False]
    assert Tensor([1, 2, 3]).isin([3, 1], assume_unique=True).tolist() == [True, False, True]


# ---------------------------------------------------------------------------------------------------------------------
# nan_to_num, logit


def test_nan_to_num_as_torch():
    x = np.array([NAN, INF, -INF, 1.5, -0.0, 65504.0], np.float32)
    for dtype in (np.float32, np.float16, np.float64):
        for kwargs in ({}, {"nan": 2.0, "posinf": 5.0}, {"neginf": -7.5}):
            ours = Tensor(x.astype(dtype)).nan_to_num(**kwargs)
            theirs = torch.nan_to_num(torch.tensor(x.astype(dtype)), **kwargs)
            assert ours.dtype == from_numpy_dtype(np.dtype(dtype))
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    as_torch(torch.nan_to_num, [x], lambda t: t.nan_to_num())
    bf = Tensor([INF, -INF]).cast(dtypes.bfloat16).nan_to_num()
    assert bf.dtype == dtypes.bfloat16 and bf.tolist() == torch.tensor([INF, -INF]).bfloat16().nan_to_num().tolist()
    assert Tensor([1, 2]).nan_to_num(nan=1.5).tolist() == [1, 2] and Tensor([True]).nan_to_num().tolist() == [True]


def test_logit_values_and_gradients_as_torch():
    # outside [0, 1], the ends, inside, NaN
    x = np.array([-0.5, 0.0, 0.001, 0.3, 0.5, 0.999, 1.0, 1.5, NAN], np.float32)
    for eps in (None, 1e-3, 0.0, 0.6):
        as_torch(lambda t, e=eps: torch.logit(t, e), [x], lambda t, e=eps: t.logit(e), atol=1e-3)
    as_torch(torch.logit, [np.array([0.25, 0.5], np.float64)], lambda t: t.logit())
    ints = Tensor([0, 1]).logit()
    assert ints.dtype == dtypes.float32 and ints.tolist() == [-INF, INF]
