"""PyTorch operations with PyTorch's semantics (regression losses, kl_div, cosine_similarity, pixel_shuffle and
pixel_unshuffle, outer, trace, count_nonzero, isin, bincount, median, quantile, nan_to_num, logit, cdist, nanmedian,
nanquantile, unique): values, gradients and errors compared with PyTorch (CPU), special values included."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.dtype import from_numpy_dtype
from uopkit.dtype import to_numpy_dtype as to_numpy
from uopkit.schedule import computed_from
from uopkit.tensor.support import ArgumentError, EmptyReduceError, ShapeError

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
    # weights (of the input's shape; a gradient for them too): mse_loss's and l1_loss's mean divides by their sum,
    # huber_loss's by the count, as torch's
    weight = np.abs(_randn(3, 5, dtype=np.float64))
    for name, reduction in [("mse_loss", "mean"), ("l1_loss", "mean"), ("huber_loss", "mean"), ("l1_loss", "none")]:
        as_torch(
            lambda a, b, w, n=name, r=reduction: getattr(F, n)(a, b, reduction=r, weight=w),
            [*finite, weight],
            lambda a, b, w, n=name, r=reduction: getattr(a, n)(b, reduction=r, weight=w),
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
    with pytest.raises(ShapeError, match="mse_loss: weight shape \\(3,\\) must be the input's shape \\(2,\\)"):
        a.mse_loss(a, weight=b)
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
    with pytest.raises(ValueError, match="compute_mode must be one of"):
        Tensor.ones(2, 3).cdist(Tensor.ones(2, 3), compute_mode="mm")
    assert Tensor([[0.0, 3.0]]).cdist(Tensor([[4.0, 0.0]]), compute_mode="use_mm_for_euclid_dist").item() == 5.0


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
# count_nonzero, isin, bincount


def test_count_nonzero_as_torch_but_int32():
    x = np.array([[[0.0, 1.0, -0.0], [NAN, 0.0, 2.0]], [[3.0, 0.0, 0.0], [0.0, -INF, 0.0]]], np.float32)
    for dim in (None, 0, -1, 1, (0, 2), (-1, 0, 1), ()):
        ours = Tensor(x).count_nonzero(dim)
        assert ours.dtype == dtypes.int32
        np.testing.assert_array_equal(ours.numpy(), torch.count_nonzero(torch.tensor(x), dim=dim).numpy())
    assert Tensor([True, False, True]).count_nonzero().item() == 2
    assert Tensor([[0, 5], [7, 0]], dtype=dtypes.int8).count_nonzero(1).tolist() == [1, 1]
    with pytest.raises(ArgumentError, match="names an axis twice"):
        Tensor(x).count_nonzero((0, -3))
    with pytest.raises(IndexError, match="count_nonzero: axis 3"):
        Tensor(x).count_nonzero(3)


@pytest.mark.parametrize("name", ["amax", "amin", "count_nonzero", "aminmax"])
def test_reductions_named_with_dim_take_numpy_s_axis_too_as_torch(name):
    x = np.array([[0.123, -1.7, 0.0], [2.5, 0.04, 0.0]], np.float32)
    for axis in (0, 1, -1):
        ours, ref = getattr(Tensor(x), name)(axis=axis), getattr(torch.from_numpy(x), name)(axis=axis)
        for got, want in zip(ours if name == "aminmax" else [ours], ref if name == "aminmax" else [ref], strict=True):
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    if name != "aminmax":
        with pytest.raises(TypeError, match=f"{name}: got both dim=1 and axis=0"):
            getattr(Tensor(x), name)(1, axis=0)


def test_arange_takes_zero_dim_tensors_as_torch():
    # a length read off a tensor (`torch.arange(lengths.max())`) is the number it holds, of its kind
    for args in [(Tensor(4),), (Tensor(1.5), Tensor(4)), (0, Tensor(2.0), 0.5), (Tensor(4, dtype="int64"),)]:
        ours = Tensor.arange(*args)
        ref = torch.arange(*(torch.tensor(a.item()) if isinstance(a, Tensor) else a for a in args))
        assert ours.tolist() == ref.tolist()
        assert dtypes.is_float(ours.dtype) == ref.dtype.is_floating_point
    assert Tensor.arange(end=Tensor(3)).tolist() == [0, 1, 2]
    with pytest.raises(TypeError, match=r"arange: end must be a number or a 0-d tensor, got a tensor of shape \(1,\)"):
        Tensor.arange(Tensor([4]))


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


def test_bincount_as_torch():
    x = np.array([0, 2, 2, 5, 1, 2], np.int64)
    for minlength in (0, 3, 9):
        ours = Tensor(x).bincount(minlength=minlength)
        assert ours.dtype == dtypes.int32
        assert ours.tolist() == torch.bincount(torch.tensor(x), minlength=minlength).tolist()
    # float32 weights stay float32, others give float64 (as torch); their gradient is each bin's upstream value
    for w_dtype in (np.float32, np.float64, np.int32):
        w = (RNG.random(6) * 4).astype(w_dtype)
        ours = Tensor(x).bincount(Tensor(w))
        theirs = torch.bincount(torch.tensor(x), torch.tensor(w))
        assert ours.dtype == from_numpy_dtype(theirs.numpy().dtype)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    w = Tensor(RNG.random(6).astype(np.float32), requires_grad=True)
    (Tensor(x).bincount(w, minlength=7) * Tensor.arange(7).float()).sum().backward()
    assert w.grad.tolist() == x.astype(np.float32).tolist()
    # a computed input (read back to size the output), small ints, an empty input
    assert (Tensor([3, 1, 1]) * 2).bincount().tolist() == [0, 0, 2, 0, 0, 0, 1]
    assert Tensor([1, 1, 250], dtype=dtypes.uint8).bincount().numpy()[[0, 1, 250]].tolist() == [0, 2, 1]
    assert Tensor(np.zeros(0, np.int32)).bincount().shape == (0,)
    assert Tensor(np.zeros(0, np.int32)).bincount(minlength=3).tolist() == [0, 0, 0]
    with pytest.raises(ArgumentError, match="non-negative, it holds -1"):
        Tensor([0, -1, 3]).bincount()
    with pytest.raises(TypeError, match="bincount: needs a tensor of non-negative ints, got dtypes.float"):
        Tensor([0.0, 1.0]).bincount()
    # torch's kernel is "not implemented for" floats and bools: its NotImplementedError
    for values in ([0.0, 1.0], [True, False]):
        with pytest.raises(NotImplementedError):
            torch.bincount(torch.tensor(values))
        with pytest.raises(NotImplementedError, match="bincount"):
            Tensor(values).bincount()
    with pytest.raises(ShapeError, match="1-D"):
        Tensor([[0, 1]]).bincount()
    with pytest.raises(ShapeError, match="weights must be a tensor of the input's shape \\(2,\\), got \\(1,\\)"):
        Tensor([0, 1]).bincount(Tensor([1.0]))
    with pytest.raises(ArgumentError, match="minlength must be >= 0"):
        Tensor([0, 1]).bincount(minlength=-1)


# ---------------------------------------------------------------------------------------------------------------------
# median, quantile


def test_median_over_all_elements_as_torch_with_shared_gradient():
    cases = [
        _randn(3, 5),  # odd count
        _randn(2, 4),  # even: the lower middle value
        np.array([3.0, 1.0, 2.0, 2.0, 1.0, 3.0, 2.0], np.float32),  # ties share the gradient
        np.array([3.0, NAN, 2.0, NAN], np.float32),  # NaN: the NaNs share it
        np.array([3.0, -INF, -INF, -INF], np.float32),
        np.array([INF, INF, 1.0], np.float32),
    ]
    for x in cases:
        as_torch(torch.median, [x], lambda t: t.median())
    assert Tensor(_randn(2, 3)).median(keepdim=True).shape == (1, 1)
    ints = RNG.integers(-50, 50, (4, 6))
    assert Tensor(ints).median().item() == torch.tensor(ints).median().item()
    assert np.isnan(Tensor.zeros(0).median().item())
    with pytest.raises(EmptyReduceError, match="no median"):
        Tensor(np.zeros(0, np.int32)).median()
    with pytest.raises(TypeError, match="bool"):
        Tensor([True, False]).median()


def test_order_statistics_give_nans_and_zeros_of_torchs_sign():
    # median() of a row holding a NaN is a positive NaN in torch whatever the NaN's sign (a min of the NaNs negated
    # it here), nanmedian() of NaNs alone the element itself; median() is the sorted element (a zero's sign too)
    neg_nan = -np.float32(NAN)
    nan_rows = [[1.0, NAN, 2.0], [1.0, neg_nan, 2.0], [NAN] * 3, [neg_nan] * 3, [neg_nan, NAN, 3.0]]
    # (along a dim the value is the first position's: its zero's sign may differ, see docs/semantics.md)
    zero_rows = [[0.0, -0.0, 1.0], [-0.0, 0.0, 1.0], [-0.0, 0.0, -0.0], [NAN, 0.0, -0.0, 2.0]]
    ops = {
        "median": lambda t: t.median(),
        "nanmedian": lambda t: t.nanmedian(),
        "median(0)": lambda t: t.median(0)[0],
        "nanmedian(0)": lambda t: t.nanmedian(0)[0],
        "quantile": lambda t: t.quantile(0.5),
        "sort": lambda t: t.sort()[0],
    }
    for dtype in (np.float32, np.float64):
        for row, along_dims in [(row, True) for row in nan_rows] + [(row, False) for row in zero_rows]:
            x = np.array(row, dtype)
            for name, op in ops.items():
                if "(0)" in name and not along_dims:
                    continue
                want = op(torch.from_numpy(x)).numpy()
                # (the third call relaunches a captured graph)
                for _ in range(3):
                    got = op(Tensor(x)).numpy()
                    np.testing.assert_array_equal(got, want, err_msg=f"{name} of {row}")
                    assert np.signbit(got).tolist() == np.signbit(want).tolist(), f"{name} of {row} {x.dtype}"


def test_median_along_a_dim_values_indices_and_gradient_as_torch():
    x = _randn(4, 5, 6)  # no ties: torch's index is the one index
    for dim, keepdim in [(0, False), (1, True), (-1, False), (-2, True)]:
        values, indices = Tensor(x).median(dim, keepdim)
        ref = torch.tensor(x).median(dim, keepdim)
        assert indices.dtype == dtypes.int32 and values.shape == tuple(ref.values.shape)
        np.testing.assert_array_equal(values.numpy(), ref.values.numpy())
        np.testing.assert_array_equal(indices.numpy(), ref.indices.numpy())
    as_torch(lambda t: t.median(1).values, [x], lambda t: t.median(1)[0])
    half = Tensor(x.astype(np.float16)).median(-1)
    ref = torch.tensor(x.astype(np.float16)).median(-1)
    assert half[0].dtype == dtypes.float16 and half[0].tolist() == ref.values.tolist()
    assert half[1].tolist() == ref.indices.tolist()
    # ties: the first index holding the median (torch's choice among ties is unspecified); NaN: the first NaN
    rows = np.array(
        [[1.0, 1.0, 1.0, 1.0], [2.0, 1.0, 2.0, 1.0], [5.0, NAN, 3.0, NAN], [NAN, 2.0, 1.0, 0.0]], np.float32
    )
    values, indices = Tensor(rows).median(1)
    ref = torch.tensor(rows).median(1)
    np.testing.assert_array_equal(values.numpy(), ref.values.numpy())
    assert indices.tolist() == [0, 1, 1, 0] and ref.indices.tolist()[2:] == [1, 0]
    # the gradient goes to the returned index
    t = Tensor(rows, requires_grad=True)
    t.median(1)[0].sum().backward()
    assert t.grad.tolist() == [[1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0]]
    # a long row (sorted by the bitonic network), ints, a 0-d tensor
    long = RNG.permutation(301).astype(np.float32)
    assert Tensor(long).median(0)[0].item() == 150.0 and Tensor(long).median(0)[1].item() == int(np.argmax(long == 150))
    ints = RNG.integers(0, 1000, (3, 7))
    ours, ref = Tensor(ints).median(-1), torch.tensor(ints).median(-1)
    assert ours[0].tolist() == ref.values.tolist()
    assert [row[i] for row, i in zip(ints, ours[1].tolist(), strict=True)] == ref.values.tolist()
    assert [t.tolist() for t in Tensor(5.0).median(0)] == [5.0, 0]
    with pytest.raises(EmptyReduceError, match="median: axis 1 of shape \\(2, 0\\) is empty"):
        Tensor.zeros(2, 0).median(1)
    assert Tensor.zeros(0, 3).median(1)[0].shape == (0,)


def test_median_cummax_and_aminmax_return_named_tuples_as_torch():
    # `.values` / `.indices` (aminmax: `.min` / `.max`) as torch's named tuples, and still pairs
    x = np.array([[3.0, 1.0, 2.0, 5.0], [NAN, 0.0, 4.0, -1.0], [2.0, 2.0, 7.0, 0.5]], np.float32)
    t, tt = Tensor(x), torch.tensor(x)
    for name, args in [
        ("median", (1,)),
        ("median", (0, True)),
        ("median", (-1,)),
        ("nanmedian", (1,)),
        ("nanmedian", (0, True)),
        ("cummax", (1,)),
        ("cummax", (0,)),
        ("cummin", (-1,)),
        ("cummin", (0,)),
    ]:
        ours, theirs = getattr(t, name)(*args), getattr(tt, name)(*args)
        values, indices = ours
        assert values is ours.values and indices is ours.indices and len(ours) == 2
        assert ours.values.shape == tuple(theirs.values.shape) and ours.indices.dtype == dtypes.int32
        np.testing.assert_array_equal(ours.values.numpy(), theirs.values.numpy())
        # (no ties among the non-NaN values here: torch's indices are the same)
        np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy())
    for kwargs in ({}, {"dim": 1}, {"dim": -2, "keepdim": True}, {"keepdim": True}):
        ours, theirs = Tensor(x[:, 1:]).aminmax(**kwargs), torch.tensor(x[:, 1:]).aminmax(**kwargs)
        low, high = ours
        assert low is ours.min and high is ours.max
        for got, want in ((ours.min, theirs.min), (ours.max, theirs.max)):
            assert got.shape == tuple(want.shape) and got.tolist() == want.tolist()
    # 0-d inputs and a dim of size 1
    assert Tensor(2.0).median(0).indices.item() == 0 and Tensor(2.0).cummax(0).values.item() == 2.0
    assert Tensor([[4.0]]).nanmedian(1).values.tolist() == [4.0]
    assert Tensor(3).aminmax().max.item() == 3


def test_extremes_over_an_empty_dim_name_the_op_called():
    # torch: "amax(): Expected reduction dim 1 to have non-zero size."
    x, tx = Tensor.zeros(2, 0), torch.zeros(2, 0)
    for name in ("amax", "amin"):
        with pytest.raises(IndexError):
            getattr(tx, name)(1)
        with pytest.raises(EmptyReduceError, match=rf"^{name}: reducing an empty axis .*shape \(2, 0\), dim 1"):
            getattr(x, name)(1)
        with pytest.raises(EmptyReduceError, match=rf"^{name}: "):
            getattr(Tensor.zeros(0), name)()
        # (over the other dim: empty results, as torch's)
        assert getattr(x, name)(0).shape == tuple(getattr(tx, name)(0).shape) == (0,)
    with pytest.raises(EmptyReduceError, match=r"^aminmax: reducing an empty axis"):
        x.aminmax(dim=-1)
    with pytest.raises(EmptyReduceError, match=r"^max: reducing an empty axis"):
        Tensor.zeros(0, dtype=dtypes.bool).max()
    # clamp's own name (torch: "torch.clamp: At least one of 'min' or 'max' must not be None")
    with pytest.raises(RuntimeError):
        torch.tensor([1.0]).clamp()
    with pytest.raises(ArgumentError, match="^clamp: at least one of min and max"):
        Tensor([1.0]).clamp()
    with pytest.raises(ArgumentError, match="^clip: at least one of min and max"):
        Tensor([1.0]).clip()
    with pytest.raises(OverflowError, match="clamp"):
        Tensor([1, 2], dtype=dtypes.int8).clamp(max=1000)


QUANTILE_MODES = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantiles_as_torch(op: str, x: np.ndarray, cases: list[tuple], rtol: float) -> None:
    """Tensor.`op` against torch.`op` (quantile or nanquantile) on x for each (q, interpolation, dim, keepdim): shape,
    dtype and values (a list q goes to torch as a tensor of x's dtype)."""
    for q, mode, dim, keepdim in cases:
        ref_q = torch.tensor(q.numpy()) if isinstance(q, Tensor) else q
        ref_q = torch.tensor(q, dtype=torch.tensor(x).dtype) if isinstance(q, list) else ref_q
        ours = getattr(Tensor(x), op)(q, dim=dim, keepdim=keepdim, interpolation=mode)
        ref = getattr(torch, op)(torch.tensor(x), ref_q, dim, keepdim, interpolation=mode)
        assert ours.shape == tuple(ref.shape) and ours.dtype == from_numpy_dtype(x.dtype), (q, mode, dim, keepdim)
        np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=rtol, err_msg=f"{q} {mode} {dim} {keepdim}")


def test_quantile_every_interpolation_dim_and_keepdim_as_torch():
    q = [0.0, 0.1, 0.25, 0.5, 0.625, 0.9, 1.0]
    dims = [(None, True), (1, False), (-1, True)]
    _quantiles_as_torch(
        "quantile", _randn(3, 6, 5, dtype=np.float64), [(q, m, *d) for m in QUANTILE_MODES for d in dims], 1e-12
    )
    # float32 (ranks computed in float32, as torch), one q (no q axis), a 0-d or 1-D tensor q
    cases = [(0.1, mode) for mode in QUANTILE_MODES] + [(Tensor(0.3), "linear"), (Tensor([0.3, 0.7]), "nearest")]
    _quantiles_as_torch("quantile", _randn(4, 11), [(q1, mode, 1, False) for q1, mode in cases], 1e-6)
    assert Tensor(3.0).quantile(0.5).tolist() == 3.0 and Tensor(3.0).quantile(0.5, dim=0).shape == ()
    assert Tensor([1.0, 2.0]).quantile([]).shape == (0,)


def test_quantile_nan_inf_and_gradients_as_torch():
    # a NaN makes its row's quantiles NaN; infinities give torch's lerp results (NaN at the exact positions)
    x = np.array([[1.0, NAN, 3.0, 0.5], [-INF, 1.0, INF, 2.0], [4.0, 3.0, 2.0, 1.0]], np.float32)
    q = torch.tensor([0.0, 0.2, 0.5, 0.75, 1.0])
    for mode in QUANTILE_MODES:
        ours = Tensor(x).quantile(q.tolist(), dim=1, interpolation=mode)
        np.testing.assert_array_equal(ours.numpy(), torch.quantile(torch.tensor(x), q, 1, interpolation=mode).numpy())
    # gradients: through the sort to the elements each quantile interpolates (ties in stable order, as torch's)
    for values in (_randn(2, 9), np.array([[3.0, 1.0, 3.0, 1.0, 3.0], [NAN, 2.0, NAN, 1.0, 0.0]], np.float32)):
        for mode in QUANTILE_MODES:
            as_torch(
                lambda t, m=mode: torch.quantile(t, torch.tensor([0.3, 0.5, 0.9]), dim=-1, interpolation=m),
                [values],
                lambda t, m=mode: t.quantile([0.3, 0.5, 0.9], dim=-1, interpolation=m),
            )


def test_quantile_and_nanquantile_errors_say_what_is_wrong():
    x = Tensor([1.0, NAN, 3.0])
    for op in ("quantile", "nanquantile"):
        for bad in (1.5, -0.1, NAN, [0.5, 2.0], Tensor([0.2, 1.2])):
            with pytest.raises(ArgumentError, match=f"^{op}: q must be in \\[0, 1\\]"):
                getattr(x, op)(bad)
        for bad in (Tensor([[0.5]]), [[0.5]]):
            with pytest.raises(ShapeError, match=f"^{op}: q must be a number or a 1-D"):
                getattr(x, op)(bad)
        with pytest.raises(ArgumentError, match=f"^{op}: interpolation takes 'linear', 'lower', 'higher', 'midpoint'"):
            getattr(x, op)(0.5, interpolation="cubic")
        with pytest.raises(TypeError, match=f"^{op}: needs a floating-point input, got dtypes.int"):
            getattr(Tensor([1, 2]), op)(0.5)
        with pytest.raises(EmptyReduceError, match=f"^{op}: the input \\(shape \\(2, 0\\)\\) is empty"):
            getattr(Tensor.zeros(2, 0), op)(0.5, dim=0)
        with pytest.raises(IndexError, match=f"^{op}: axis 2"):
            getattr(Tensor.zeros(2, 3), op)(0.5, dim=2)


def test_errors_name_the_operation_the_user_called():
    a = Tensor.zeros(3, 4).contiguous()
    with pytest.raises(IndexError, match="^setitem: index 7 is out of bounds for axis 0 with size 3"):
        a[Tensor([0, 7])] = 1.0
    with pytest.raises(IndexError, match="^setitem: index 9 is out of bounds for axis 1 with size 4"):
        a[:, [0, 9]] = 1.0
    with pytest.raises(IndexError, match="^getitem: index 9 is out of bounds"):
        a[:, [0, 9]]
    assert a.sum().item() == 0  # (nothing written)
    empty = Tensor.zeros(0, 3)
    for op in ("max", "min"):
        with pytest.raises(EmptyReduceError, match=f"^{op}: axis 0 of shape \\(0, 3\\) is empty"):
            getattr(empty, op)(dim=0)
        assert getattr(empty, op)(dim=1).values.shape == (0,)
    for op in ("argmax", "argmin"):
        with pytest.raises(EmptyReduceError, match=f"^{op}: axis 0 of shape \\(0, 3\\) is empty"):
            getattr(empty, op)(0)
        with pytest.raises(EmptyReduceError, match=f"^{op}: the tensor of shape \\(0, 3\\) is empty"):
            getattr(empty, op)()
        assert getattr(empty, op)(1).shape == (0,)


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


def test_logit_of_half_floats_clamps_at_bounds_of_their_dtype_as_torch():
    # torch's bounds are eps and 1 - eps in the half float: float16's 1 - 1e-6 is 1.0, so logit(1.0) is inf there
    # (computed with float32 bounds it was 13.8), and bfloat16's 1 - 1e-3 is 1.0 too
    x = np.array([0.0, 1e-7, 1e-6, 0.3, 0.999, 0.9995, 1.0], np.float32)
    for dtype, torch_dtype in ((dtypes.float16, torch.float16), (dtypes.bfloat16, torch.bfloat16)):
        for eps in (1e-6, 1e-3, 0.3):
            ours = Tensor(x).cast(dtype).requires_grad_()
            theirs = torch.tensor(x).to(torch_dtype).requires_grad_()
            ours.logit(eps).sum().backward()
            want = torch.logit(theirs, eps)
            want.sum().backward()
            # (inside the bounds torch's half kernel can round an ulp apart; the clamped ends and infinities agree)
            np.testing.assert_allclose(ours.logit(eps).float().numpy(), want.float().detach().numpy(), rtol=8e-3)
            assert ours.grad.float().tolist() == theirs.grad.float().tolist()


# ---------------------------------------------------------------------------------------------------------------------
# nanmedian, nanquantile, unique

# rows with no NaN (ties), one NaN, some NaNs (an even count left), every value NaN
NAN_ROWS = np.array(
    [
        [2.0, 1.0, 2.0, 3.0, 1.0],
        [4.0, NAN, 3.0, 5.0, 1.0],
        [NAN, 2.0, NAN, 7.0, -1.0],
        [NAN, NAN, NAN, NAN, NAN],
    ],
    np.float32,
)


def test_nanmedian_over_all_elements_as_torch_with_shared_gradient():
    cases = [
        _randn(3, 5),
        np.array([3.0, NAN, 2.0, 2.0, NAN, 1.0], np.float32),  # the tied middle shares the gradient
        np.array([NAN, NAN, NAN], np.float32),  # every value NaN: NaN, the NaNs share it
        np.array([NAN, 1.0, NAN, 4.0, INF], np.float64),
        NAN_ROWS,
    ]
    for x in cases:
        as_torch(torch.nanmedian, [x], lambda t: t.nanmedian())
    assert Tensor(NAN_ROWS).nanmedian(keepdim=True).shape == (1, 1)
    half = np.array([NAN, 1.0, 3.0, 2.0], np.float16)
    assert Tensor(half).nanmedian().tolist() == torch.tensor(half).nanmedian().item()
    ints = RNG.integers(-50, 50, (4, 6))
    assert Tensor(ints).nanmedian().item() == torch.tensor(ints).nanmedian().item()
    assert np.isnan(Tensor.zeros(0).nanmedian().item())
    with pytest.raises(TypeError, match="nanmedian: bool tensors have no median"):
        Tensor([True, False]).nanmedian()


def test_nanmedian_along_a_dim_values_indices_and_gradient_as_torch():
    def first_index(x: np.ndarray, values: np.ndarray, dim: int) -> np.ndarray:
        # the first position along dim equal to the value (NaN to NaN)
        moved, v = np.moveaxis(x, dim, -1), values[..., None]
        return np.argmax((moved == v) | (np.isnan(moved) & np.isnan(v)), -1)

    x = _randn(3, 4, 7)
    x[RNG.random(x.shape) < 0.3] = NAN
    x[0, :, 2] = NAN  # lines of every value NaN along each dim
    x[1, 2, :] = NAN
    for dim, keepdim in [(0, False), (-2, True), (-1, False)]:
        values, indices = Tensor(x).nanmedian(dim, keepdim)
        ref = torch.tensor(x).nanmedian(dim, keepdim)
        assert indices.dtype == dtypes.int32 and values.shape == indices.shape == tuple(ref.values.shape)
        np.testing.assert_array_equal(values.numpy(), ref.values.numpy())
        expected = first_index(x, ref.values.numpy() if not keepdim else ref.values.squeeze(dim).numpy(), dim)
        np.testing.assert_array_equal(indices.numpy().reshape(expected.shape), expected)
    # ties take the first index (torch's choice among ties, and for an all-NaN row, is unspecified)
    values, indices = Tensor(NAN_ROWS).nanmedian(1)
    np.testing.assert_array_equal(values.numpy(), torch.tensor(NAN_ROWS).nanmedian(1).values.numpy())
    assert indices.tolist() == [0, 2, 1, 0]
    # the gradient goes to the returned index: torch's where the index is the only one
    as_torch(lambda t: t.nanmedian(1).values, [NAN_ROWS[1:3]], lambda t: t.nanmedian(1)[0])
    t = Tensor(NAN_ROWS, requires_grad=True)
    t.nanmedian(1)[0].sum().backward()
    assert t.grad.numpy().argmax(1).tolist() == [0, 2, 1, 0] and t.grad.sum().item() == 4.0
    # float16 and float64; a row longer than 256 (the sorting network) with NaNs spread through it
    for dtype in (np.float16, np.float64):
        values, _ = Tensor(NAN_ROWS.astype(dtype)).nanmedian(-1)
        assert values.dtype == from_numpy_dtype(np.dtype(dtype))
        np.testing.assert_array_equal(values.numpy(), torch.tensor(NAN_ROWS.astype(dtype)).nanmedian(-1).values)
    long = RNG.permutation(301).astype(np.float32)
    long[RNG.choice(301, 40, replace=False)] = NAN
    values, indices = Tensor(long).nanmedian(0)
    ref = torch.tensor(long).nanmedian(0)
    assert values.item() == ref.values.item() and indices.item() == ref.indices.item()
    ints = RNG.integers(0, 9, (3, 7))
    assert Tensor(ints).nanmedian(-1)[0].tolist() == torch.tensor(ints).nanmedian(-1).values.tolist()
    assert [t.tolist() for t in Tensor(5.0).nanmedian(0)] == [5.0, 0]
    with pytest.raises(EmptyReduceError, match="nanmedian: axis 1 of shape \\(2, 0\\) is empty"):
        Tensor.zeros(2, 0).nanmedian(1)


def test_nanquantile_every_interpolation_dim_and_keepdim_as_torch():
    x = np.concatenate([NAN_ROWS, _randn(2, 5)]).astype(np.float64)
    x[4, 1] = NAN
    q = [0.0, 0.1, 0.25, 0.5, 0.625, 0.9, 1.0]
    # every mode along the rows, linear also over all elements and along the columns (keeping the axis)
    cases = [(q, mode, -1, False) for mode in QUANTILE_MODES] + [(q, "linear", None, True), (q, "linear", 0, True)]
    _quantiles_as_torch("nanquantile", x, cases, 1e-12)
    # float32 (ranks in float32, as torch), one q or a tensor q; a row longer than 256 with NaNs spread through it
    long = _randn(2, 300)
    long[RNG.random(long.shape) < 0.2] = NAN
    _quantiles_as_torch(
        "nanquantile", NAN_ROWS, [(0.7, "nearest", 1, True), (Tensor([0.3, 0.5]), "midpoint", -1, False)], 1e-6
    )
    _quantiles_as_torch("nanquantile", long, [(0.3, "linear", -1, False), (0.55, "higher", 1, False)], 1e-6)
    # float16 (torch has none): as float32's, rounded
    half = Tensor(NAN_ROWS.astype(np.float16)).nanquantile(0.4, dim=1)
    assert half.dtype == dtypes.float16
    np.testing.assert_allclose(half.numpy(), torch.nanquantile(torch.tensor(NAN_ROWS), 0.4, dim=1).numpy(), rtol=1e-3)
    # no NaN: quantile's values
    assert Tensor([1.0, 2.0, 4.0]).nanquantile(0.75).item() == 3.0 and Tensor(3.0).nanquantile(0.5).item() == 3.0


def test_nanquantile_gradients_as_torch():
    # through the sort to the elements interpolated, an all-NaN row's to its first NaN (as torch)
    for mode in QUANTILE_MODES:
        as_torch(
            lambda t, m=mode: torch.nanquantile(t, torch.tensor([0.3, 0.5, 0.9]), dim=-1, interpolation=m),
            [NAN_ROWS],
            lambda t, m=mode: t.nanquantile([0.3, 0.5, 0.9], dim=-1, interpolation=m),
        )


def _check_unique(x: np.ndarray, **kwargs: object) -> None:
    ours = Tensor(x).unique(return_inverse=True, return_counts=True, **kwargs)
    ref = torch.tensor(x).unique(return_inverse=True, return_counts=True, **kwargs)
    assert ours[0].dtype == from_numpy_dtype(x.dtype) and ours[1].dtype == ours[2].dtype == dtypes.int32
    for mine, theirs in zip(ours, ref, strict=True):
        assert mine.shape == tuple(theirs.shape), (x, kwargs)
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy(), err_msg=f"{x} {kwargs}")


def test_unique_values_inverse_and_counts_as_torch():
    # each NaN distinct and last; -0.0 equal to 0.0 (the first in order kept); ints, bools, 2-D, 0-d, empty
    cases = [
        np.array([NAN, 1.0, NAN, -0.0, 0.0, 1.0, -INF], np.float32),
        np.array([[3, 1, 3], [2, 1, -7]], np.int32),
        np.array([True, False, True, True]),
        np.array(2.5, np.float32),
        np.zeros((2, 0), np.float32),
        RNG.integers(0, 40, 300).astype(np.int32),
        np.array([5, 5, 5], np.int8),
        RNG.integers(-3000, 3000, 20000).astype(np.int64),
    ]
    for x in cases:
        _check_unique(x)
    # (dim=None sorts on the host) bfloat16 values and a lazy input
    x = np.array([1.5, -2.0, 1.5, NAN, 0.0], np.float32)
    ours = (Tensor(x).cast(dtypes.bfloat16) * 2).unique(return_counts=True)
    ref = (torch.tensor(x).to(torch.bfloat16) * 2).unique(return_counts=True)
    assert ours[0].dtype == dtypes.bfloat16
    np.testing.assert_array_equal(ours[0].numpy(), ref[0].float().numpy())
    np.testing.assert_array_equal(ours[1].numpy(), ref[1].numpy())
    # sorted=False is sorted too (as torch on the CPU); only the values unless asked
    x = np.array([4, 1, 4, 0], np.int32)
    assert Tensor(x).unique(sorted=False).tolist() == torch.tensor(x).unique(sorted=False).tolist() == [0, 1, 4]
    ours = Tensor(x).unique(return_counts=True)
    assert isinstance(ours, tuple) and [t.tolist() for t in ours] == [[0, 1, 4], [1, 1, 2]]
    assert Tensor(x).unique(return_inverse=True)[1].tolist() == [2, 1, 2, 0]


def test_unique_along_a_dim_as_torch():
    rows = np.array([[2.0, NAN, 1.0], [1.0, 1.0, 0.0], [1.0, NAN, 1.0], [1.0, 1.0, 0.0]], np.float32)
    _check_unique(rows, dim=0)  # rows holding a NaN are each distinct; the rest in lexicographic order
    _check_unique(np.array([[3, 1, 3, 1], [2, 0, 2, 1]], np.int32), dim=1)
    _check_unique(np.array([[[1, 2], [1, 2]], [[0, 0], [1, 2]]], np.int64), dim=-1)
    _check_unique(np.array([[[1, 2], [1, 2]], [[0, 0], [1, 2]]], np.int64), dim=-2)
    _check_unique(np.array([True, False, False]), dim=0)
    _check_unique(np.zeros((0, 3), np.float32), dim=0)
    with pytest.raises(ShapeError, match="unique: dim 0 given for a 0-d tensor"):
        Tensor(1.0).unique(dim=0)
    with pytest.raises(ShapeError, match="unique: the slices along dim 0 of shape \\(3, 0\\) are empty"):
        Tensor.zeros(3, 0).unique(dim=0)


# ---------------------------------------------------------------------------------------------------------------------
# what a port from PyTorch meets: torch's keywords and argument orders, dtype rules of shifts, masked_fill, products;
# gradients at clamp bounds and activation corners; NaN-free saturated losses and fully masked attention


def _same(ours: Tensor, ref: torch.Tensor) -> None:
    assert ours.shape == tuple(ref.shape) and ours.dtype == from_numpy_dtype(ref.numpy().dtype), (ours, ref)
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())


def test_shifts_by_tensors_past_the_width_and_reflected_as_torch():
    # amounts of another dtype (promoted), past the width or negative (torch: every bit shifted out), 3 << t
    amounts = np.array([0, 3, 7, 8, 31, -1], np.int32)
    for values in (np.array([1, -1, 5, -128, 100, 77], np.int8), np.array([1, 255, 5, 128, 100, 77], np.uint8)):
        a, t = Tensor(values), torch.tensor(values)
        _same(a << Tensor(amounts), t << torch.tensor(amounts))
        _same(a >> Tensor(amounts), t >> torch.tensor(amounts))
        _same(a << 9, t << 9)
        _same(a >> 9, t >> 9)
    small = np.array([0, 1, 4], np.int32)
    _same(3 << Tensor(small), 3 << torch.tensor(small))
    _same(-100 >> Tensor(small), -100 >> torch.tensor(small))
    assert (Tensor([True, False]) << 2).tolist() == [4, 0]
    _same(~Tensor(np.array([0, 1, 255], np.uint8)), ~torch.tensor(np.array([0, 1, 255], np.uint8)))


def test_masked_fill_keeps_the_tensor_dtype_as_torch():
    mask = np.array([True, False, True])
    for values, fill in [
        (np.array([1, 2, 3], np.int64), 2.7),  # truncated
        (np.array([1, 2, 3], np.uint8), -1),  # wraps
        (np.array([1, 2, 3], np.float16), -INF),
        (np.array([True, False, False]), 1),
    ]:
        ours = Tensor(values).masked_fill(Tensor(mask), fill)
        _same(ours, torch.tensor(values).masked_fill(torch.tensor(mask), fill))
    # a 0-d tensor value gets its gradient
    as_torch(lambda x, v: x.masked_fill(torch.tensor(mask), v), [_randn(3), np.array(2.0, np.float32)],
             lambda x, v: x.masked_fill(Tensor(mask), v))  # fmt: skip


def test_cat_and_stack_take_a_list_and_a_positional_dim_as_torch():
    a, b = np.array([[1, 2]], np.int64), np.array([[2.5, 3.0]], np.float32)
    _same(Tensor.cat([Tensor(a), Tensor(b)], 1), torch.cat([torch.tensor(a), torch.tensor(b)], 1))
    _same(Tensor.stack((Tensor(a), Tensor(b)), -1), torch.stack((torch.tensor(a), torch.tensor(b)), -1))
    assert Tensor(a).cat(Tensor(a), dim=0).shape == (2, 2)
    with pytest.raises(TypeError, match="cat: expects tensors, got list"):
        Tensor.cat([Tensor(a), [1, 2]])


def test_products_of_small_ints_accumulate_like_sums():
    x = np.array([[100, 100, 3], [-7, 50, 2]], np.int8)
    assert Tensor(x).prod(1).tolist() == torch.tensor(x).prod(1).tolist() == [30000, -700]
    assert Tensor(x).cumprod(1).tolist() == torch.tensor(x).cumprod(1).tolist()
    assert Tensor(x).prod().dtype == dtypes.int32 and Tensor(x.astype(np.uint8)).prod().dtype == dtypes.uint32
    # floats multiply in their own dtype, as torch's (this float16 product overflows)
    h = np.array([300.0, 300.0, 0.5], np.float16)
    assert Tensor(h).prod().dtype == dtypes.float16 and Tensor(h).prod().item() == torch.tensor(h).prod().item()


def test_int_pow_of_zero_to_a_negative_power_as_torch():
    base, exponent = np.array([0, 0, 1, -1, 2, 0], np.int64), np.array([-2, -1, -3, -3, -1, 0], np.int64)
    _same(Tensor(base) ** Tensor(exponent), torch.tensor(base) ** torch.tensor(exponent))


def test_clamp_sign_and_hard_activation_gradients_at_their_bounds_as_torch():
    # ties at the bounds, NaN, min > max, tensor bounds (min < max and min > max), a broadcast bound
    x = np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 3.0, 6.0, NAN, 7.0], np.float32)
    as_torch(lambda t: t.clamp(-1, 1), [x])
    as_torch(lambda t: t.clamp(min=0.5), [x])
    as_torch(lambda t: t.clamp(max=0.5), [x])
    as_torch(lambda t: t.clamp(1, -1), [x])
    lo, hi = np.zeros(9, np.float32), np.array([2, 2, -1, 2, 0, 2, 2, 2, 2], np.float32)
    as_torch(lambda t, a, b: t.clamp(a, b), [x, lo, hi])
    as_torch(lambda t, a: t.clamp(min=a), [x.reshape(3, 3), np.array([0.0, 0.5, 6.0], np.float32)])
    for name in ("hardtanh", "relu6", "hardsigmoid", "hardswish"):
        as_torch(getattr(F, name), [x], lambda t, n=name: getattr(t, n)())
    assert Tensor([-2, 3, 9]).relu6().tolist() == [0, 3, 6]
    # sign(NaN) is 0, and the gradient is zeros (not none, not NaN)
    as_torch(torch.sign, [x], Tensor.sign)


def test_activation_defaults_and_half_floats_as_torch():
    x = np.array([-30.0, -3.7, -0.5, 0.0, 2.0, 19.0, 25.0], np.float32)
    as_torch(F.gelu, [x], Tensor.gelu, atol=3e-7)  # exact by default (erf: absolute error < 2e-7)
    as_torch(lambda t: F.softplus(t, beta=2, threshold=5), [x], lambda t: t.softplus(beta=2, threshold=5))
    h = np.array([-INF, -0.0, 0.3, 300.0, 60000.0, INF], np.float16)
    for name in ("atan", "asinh"):
        ours, ref = getattr(Tensor(h), name)(), getattr(torch.tensor(h), name)()
        assert ours.dtype == dtypes.float16
        np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-3)
        assert np.signbit(ours.numpy()[1])


def test_binary_cross_entropy_gradient_at_saturated_probabilities_as_torch():
    # p exactly 0 or 1 (a saturated sigmoid): torch's (p - y) / max(p (1 - p), 1e-12), not NaN
    p, y = np.array([0.0, 1.0, 0.5, 1.0, 0.0], np.float32), np.array([1.0, 0.0, 0.0, 1.0, 0.0], np.float32)
    for reduction in ("mean", "none"):
        as_torch(lambda a, b, r=reduction: F.binary_cross_entropy(a, b, reduction=r), [p, y],
                 lambda a, b, r=reduction: a.binary_cross_entropy(b, reduction=r), atol=1e-3)  # fmt: skip


def test_attention_with_a_fully_masked_query_gives_zeros_as_torch():
    q, k, v = _randn(2, 3, 4), _randn(2, 5, 4), _randn(2, 5, 6)
    mask = np.array([[True, False, True, False, False], [False] * 5, [True] * 5])
    as_torch(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=torch.tensor(mask)), [q, k, v],
             lambda a, b, c: a.scaled_dot_product_attention(b, c, attn_mask=Tensor(mask)))  # fmt: skip
    additive = np.where(mask, 0.0, -INF).astype(np.float32)
    as_torch(lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, attn_mask=m), [q, k, v, additive],
             lambda a, b, c, m: a.scaled_dot_product_attention(b, c, attn_mask=m))  # fmt: skip


def test_masked_attention_costs_no_more_kernels_than_unmasked():
    # the fully masked rows are told by the softmax's own max: no extra pass over the scores (forward and backward)
    from uopkit.schedule import create_schedule, kernelize_tensors

    counts = []
    for kw in ({}, {"is_causal": True}, {"attn_mask": Tensor.ones(16, 16, dtype=dtypes.bool).tril(0)}):
        q, k, v = Tensor.empty(2, 16, 8, requires_grad=True), Tensor.empty(2, 16, 8), Tensor.empty(2, 16, 8)
        out = q.scaled_dot_product_attention(k, v, **kw)
        out.sum().backward()
        counts.append(len(create_schedule(kernelize_tensors([out, q.grad]))))
    # (at most one kernel more: the unmasked attention's scores are stored with their scale since the grouper stores
    # the value a shared reduce's uses go through, 8 -> 7 kernels; a mask's select keeps the causal one at 8)
    assert counts[1] <= counts[0] + 1 and counts[2] <= counts[0] + 1 and counts[0] <= 7, counts


def test_pooling_and_interpolate_take_torch_argument_orders_and_defaults():
    x = _randn(1, 2, 5, 5)
    as_torch(lambda t: F.max_pool2d(t, 3, 2, 1, 2), [x], lambda t: t.max_pool2d(3, 2, 1, 2))
    as_torch(lambda t: F.avg_pool2d(t, 3, 2, 1, True, False), [x], lambda t: t.avg_pool2d(3, 2, 1, True, False))
    as_torch(lambda t: F.avg_pool2d(t, 2, 1, 0, False, True, 3), [x], lambda t: t.avg_pool2d(2, 1, 0, False, True, 3))
    # nearest by default; size then scale_factor positionally
    as_torch(lambda t: F.interpolate(t, None, 2), [x], lambda t: t.interpolate(None, 2))
    with pytest.raises(ValueError, match="align_corners can only be set with the linear and bicubic modes"):
        Tensor(x).interpolate(7, align_corners=False)


@pytest.mark.parametrize(
    "kw",
    [
        dict(size=(8, 8), mode="bicubic"),
        dict(size=(8, 11), mode="bicubic", align_corners=True),
        dict(size=(3, 4), mode="bicubic"),
        dict(scale_factor=(2, 0.5), mode="bicubic"),
        dict(size=(1, 1), mode="bicubic", align_corners=True),
        dict(size=(3, 3), mode="area"),
        dict(size=(2, 5), mode="area"),
        dict(scale_factor=0.5, mode="area"),
    ],
)
def test_interpolate_bicubic_and_area_as_torch(kw):
    # bicubic: four taps per axis, clamped at the border (so weights past it pile onto the edge pixel)
    as_torch(lambda t: F.interpolate(t, **kw), [_randn(2, 3, 5, 6)], lambda t: t.interpolate(**kw), atol=1e-5)


def test_interpolate_bicubic_and_area_refuse_what_torch_refuses():
    with pytest.raises(TypeError, match="mode 'area' needs a float input, not dtypes.int"):
        Tensor(np.ones((1, 1, 4, 4), np.int32)).interpolate(size=3, mode="area")
    with pytest.raises(ShapeError, match="mode 'bicubic' needs a 4-d input"):
        Tensor(_randn(1, 2, 7)).interpolate(size=3, mode="bicubic")
    with pytest.raises(ValueError, match="unknown mode 'lanczos'"):
        Tensor(_randn(1, 2, 7)).interpolate(size=3, mode="lanczos")


def test_torch_keywords_and_forms_of_reductions_and_conversions():
    x = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]], np.float32)
    t, r = Tensor(x), torch.tensor(x)
    for name in ("sum", "mean", "amax", "logsumexp", "softmax", "log_softmax", "cumsum", "var", "std", "argmax"):
        ours = getattr(t, name)(dim=1)
        np.testing.assert_allclose(ours.numpy(), getattr(r, name)(dim=1).numpy(), rtol=1e-6)
    # torch's max(dim=)/min(dim=) (values, indices), by position or name; sort and topk name theirs too
    for name in ("max", "min"):
        (v, i), (tv, ti) = getattr(t, name)(dim=1, keepdim=True), getattr(r, name)(dim=1, keepdim=True)
        assert v.tolist() == tv.tolist() and i.tolist() == ti.tolist()
        assert getattr(t, name)(dim=0).indices.tolist() == getattr(r, name)(dim=0).indices.tolist()
    assert t.sort(1).values.tolist() == r.sort(1).values.tolist() and t.topk(2).indices.tolist() == [[1, 2], [0, 2]]
    assert t.max(1).values.tolist() == r.max(1).values.tolist() and t.max(axis=1).tolist() == [5.0, 7.0]
    np.testing.assert_allclose(t.var(dim=0, unbiased=False).numpy(), r.var(dim=0, unbiased=False).numpy())
    np.testing.assert_allclose(t.std(unbiased=False).numpy(), r.std(unbiased=False).numpy(), rtol=1e-6)
    assert t.all(dim=1).tolist() == r.all(dim=1).tolist() and t.prod(dim=0).tolist() == r.prod(dim=0).tolist()
    with pytest.raises(TypeError, match="sum: got both axis=0 and dim=1"):
        t.sum(0, dim=1)
    # max/min of two tensors; to(dtype), view(dtype), mT; torch's randint(low, high, size)
    assert t.max(Tensor(x[::-1].copy())).tolist() == r.max(torch.tensor(x[::-1].copy())).tolist()
    assert t.min(Tensor(x[::-1].copy())).tolist() == r.min(torch.tensor(x[::-1].copy())).tolist()
    assert t.to(dtypes.int32).tolist() == r.to(torch.int32).tolist() and t.to("CPU", "float16").dtype == dtypes.float16
    assert t.view(dtypes.int32).tolist() == r.view(torch.int32).tolist()
    assert Tensor.zeros(4, 2, 3).mT.shape == (4, 3, 2)
    drawn = Tensor.randint(3, 5, (2, 6))
    assert drawn.shape == (2, 6) and 3 <= drawn.min().item() and drawn.max().item() < 5


def test_lerp_from_the_nearer_end_as_torch():
    # weight 1 gives end exactly (1e8 + (1 - 1e8) * 1 is 0 in float32), an infinite start inf
    start, end = np.array([0.1, 1e8, -3.0, INF], np.float32), np.array([0.7, 1.0, 2.0, 1.0], np.float32)
    for weight in (0.3, 0.5, 1.0, -0.7):
        as_torch(lambda a, b, w=weight: torch.lerp(a, b, w), [start, end], lambda a, b, w=weight: a.lerp(b, w))
    as_torch(torch.lerp, [start[:3], end[:3], np.array([0.2, 1.0, -0.6], np.float32)], Tensor.lerp)


def test_round_to_decimals_as_torch():
    x = np.array([1.2345, -2.675, 0.125, 1250.0, -0.004, 15.5, 25.0, NAN, INF], np.float32)
    for dtype in (np.float32, np.float16):
        for decimals in (2, -1):
            as_torch(lambda t, d=decimals: t.round(decimals=d), [x.astype(dtype)], atol=0)
    with pytest.raises(TypeError, match="round: decimals=1 needs a float tensor"):
        Tensor([1, 2]).round(1)


def test_torch_method_names_missing_before():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7
    for fn in (
        lambda t: t.tile((2, 1, 1, 2)),
        lambda t: t.narrow(-1, -3, 2),
        lambda t: torch.stack(t.unbind(1)) if isinstance(t, torch.Tensor) else Tensor.stack(t.unbind(1)),
        lambda t: t.movedim((0, 1), (2, 0)),
        lambda t: t[:, :1].expand_as(t) + t.flatten().view_as(t) + t.flatten().reshape_as(t),
        lambda t: t[0].t(),
        lambda t: t.amax((0, 2)) + t.amin(dim=1).sum(),
        lambda t: t.detach().floor_divide(3) + t.remainder(-3),
        lambda t: t.clamp_min(0) - t.clamp_max(0),
    ):
        as_torch(fn, [x])
    assert Tensor(x).dim() == 3 and Tensor(x).type_as(Tensor([1])).dtype == dtypes.int32


# ---------------------------------------------------------------------------------------------------------------------
# a second sweep against torch: Python bools and empty lists as indices, repeated indices in setitem, index_select,
# take, scatter_add, norm, torch's conv argument order and unbatched inputs, repeated reduce dims, mean(dtype=),
# dropout(p=1), BatchNorm's single value per channel


def test_getitem_and_setitem_with_python_bools_and_empty_lists_as_torch():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for index in (True, False, (True, 0), (0, ..., False), [], (slice(None), [])):
        assert np.array_equal(Tensor(x)[index].numpy(), torch.tensor(x)[index].numpy()), index
        ours, ref = Tensor(x).contiguous(), torch.tensor(x)
        ours[index], ref[index] = -1.0, -1.0
        assert np.array_equal(ours.numpy(), ref.numpy()), index
    with pytest.raises(IndexError, match="a Python bool index together with index tensors"):
        Tensor(x)[[1, 0], True]


@pytest.mark.parametrize("dtype", [np.float32, np.bool_])
def test_setitem_at_a_repeated_index_keeps_the_last_write_as_torch(dtype):
    # before: the writes to one position were added up
    values = np.array([1, 0, 3, 4], np.float32).astype(dtype)
    for index in ([0, 2, 0, 0], ([1, 1, 0, 1], [2, 2, 2, 2])):
        target = np.zeros((2, 3) if isinstance(index, tuple) else 4, dtype)
        ours, ref = Tensor(target).contiguous(), torch.tensor(target)
        ours[index], ref[index] = Tensor(values), torch.tensor(values)
        assert np.array_equal(ours.numpy(), ref.numpy()), index


def test_gradients_through_setitem_see_the_write_as_torch():
    # before: a backward() through a tensor written by setitem followed the graph of its old contents alone
    def run(T):
        x, y = T([1.0, 2.0, 3.0], requires_grad=True), T([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        buf = T([0.0, 0.0, 0.0, 0.0]) * 1
        buf[1:] = x * 2
        written = y * 3
        written[[0, 0, 1], [1, 1, 0]] = x  # a repeated position: every writer gets the gradient, as torch
        masked = y * y
        masked[masked > 10] = 0.0
        copied = y + 0
        copied[0] = copied[1]  # the value read before the write
        w = T([[1.0, 2.0], [3.0, 4.0]])
        loss = (buf * w.reshape(-1)).sum() + (written * w).sum() + masked.sum() + (copied * w * w).sum()
        loss.backward()
        return loss.item(), x.grad.tolist(), y.grad.tolist()

    assert run(lambda v, **kw: Tensor(v, **kw)) == run(lambda v, **kw: torch.tensor(v, **kw))
    # a buffer written where no gradient flows: a gradient through it reads its new contents (before: the graph that
    # computed its old ones), and remembers no chain of the writes
    cache, w = Tensor.zeros(3).contiguous().realize(), Tensor([1.0, 2.0, 3.0], requires_grad=True)
    for step in range(3):
        cache[step] = Tensor(5.0) * (step + 1)
    (cache * w).sum().backward()
    assert w.grad.tolist() == [5.0, 10.0, 15.0] and cache.uop not in computed_from


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_and_min_with_dim_send_the_gradient_to_the_index_as_torch(op):
    # ties, NaN, -0.0 and infinities in a row: before, tied extremes shared the gradient
    x = np.array([[1, 1, 0], [NAN, 2, NAN], [-0.0, -0.0, -1], [INF, INF, 1], [-INF, -INF, -INF]], np.float32)
    as_torch(lambda t: getattr(t, op)(dim=1).values, [x], atol=0)
    as_torch(lambda t: getattr(t, op)(dim=0, keepdim=True)[0], [x], atol=0)
    assert np.signbit(getattr(Tensor(x), op)(dim=1).values.numpy()[2])


def test_index_select_take_and_scatter_add_as_torch():
    x, index = _randn(3, 4), np.array([3, 0, 3], np.int64)
    as_torch(lambda t, i: t.index_select(1, i), [x, index])
    as_torch(lambda t, i: t.index_select(-2, i), [x, index[1:] // 2])
    as_torch(lambda t, i: t.take(i), [x, np.array([[11, -1], [0, 5]], np.int64)])
    as_torch(lambda t, i, s: t.scatter_add(1, i, s), [x, np.array([[1, 1], [0, 3], [2, 2]], np.int64), _randn(3, 2)])
    with pytest.raises(IndexError, match="index_select: index 4 is out of bounds"):
        Tensor(x).index_select(1, Tensor([4]))
    with pytest.raises(IndexError, match="take: index 12 is out of bounds"):
        Tensor(x).take(Tensor([12]))


def test_norm_values_and_gradients_as_torch():
    x = _randn(2, 3, 4)
    x[0, 0] = 0.0
    for p, dim, keepdim in (("fro", None, False), (1, 1, False), (3, (0, 2), True), (INF, -1, False)):
        as_torch(lambda t, p=p, d=dim, k=keepdim: t.norm(p, d, k), [x])
    with pytest.raises(TypeError, match="norm: needs a floating-point tensor"):
        Tensor([1, 2]).norm()
    # torch's dtype=: the input cast to it first (a float dtype; the input must be a float tensor too)
    half = x.astype(np.float16)
    for p, dim, dt, tdt in (("fro", None, dtypes.float64, torch.float64), (1, 1, dtypes.float32, torch.float32)):
        as_torch(
            lambda t, p=p, d=dim, dt=tdt: t.norm(p, d, dtype=dt),
            [x],
            lambda t, p=p, d=dim, dt=dt: t.norm(p, d, dtype=dt),
        )
        ours, theirs = Tensor(half).norm(p, dim, dtype=dt), torch.tensor(half).norm(p, dim, dtype=tdt)
        assert ours.dtype == dt and np.allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    with pytest.raises(TypeError, match="norm: dtype must be a floating-point dtype"):
        Tensor(x).norm(dtype=dtypes.int32)
    with pytest.raises(TypeError, match="norm: needs a floating-point tensor"):
        Tensor([1, 2]).norm(dtype=dtypes.float32)


def test_view_as_a_dtype_of_another_item_size_as_torch():
    # the last dim scales by the ratio of the item sizes; the bytes are the same
    x = np.array([[1.0, -2.5, 3e-40, np.inf], [0.0, -0.0, np.nan, 65504.0]], np.float32)
    b = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    cases = [
        (x, [dtypes.uint8, dtypes.int8, dtypes.float16, dtypes.bfloat16, dtypes.int16, dtypes.float64, dtypes.int64]),
        (b, [dtypes.int16, dtypes.uint16, dtypes.float16, dtypes.int32, dtypes.float32, dtypes.bool]),
        (b.reshape(3, 8), [dtypes.int64, dtypes.float64, dtypes.uint32]),
        (x.astype(np.float16), [dtypes.uint8, dtypes.int32, dtypes.float32]),
        (np.array([True, False, True, True]), [dtypes.int16, dtypes.int32]),
    ]
    torch_dtype = {dtypes.bfloat16: torch.bfloat16, dtypes.bool: torch.bool}
    for array, targets in cases:
        for dt in targets:
            ours = Tensor(array).view(dt)
            tdt = torch_dtype.get(dt) or torch.from_numpy(np.zeros(0, to_numpy(dt))).dtype
            theirs = torch.tensor(array).view(tdt)
            assert ours.shape == tuple(theirs.shape) and ours.dtype == dt, (array.dtype, dt)
            got = ours.numpy().view(np.uint8) if dt != dtypes.bfloat16 else ours.bitcast(dtypes.uint16).numpy()
            want = theirs.numpy().view(np.uint8) if dt != dtypes.bfloat16 else theirs.view(torch.int16).numpy()
            np.testing.assert_array_equal(got.reshape(-1), want.reshape(-1).astype(got.dtype))
    # zero-size, a view of a slice whose last dim is contiguous, and torch's refusals
    assert Tensor.zeros(2, 0).view(dtypes.uint8).shape == tuple(torch.zeros(2, 0).view(torch.uint8).shape) == (2, 0)
    with pytest.raises(RuntimeError, match="stride"):
        torch.zeros(2, 0).view(torch.float64)
    assert Tensor(b)[:, 1].view(dtypes.int16).tolist() == torch.from_numpy(b)[:, 1].view(torch.int16).tolist()
    for bad, dt, message in [
        (Tensor(x).T, dtypes.uint8, "the last dim must have stride 1"),
        (Tensor(1.0), dtypes.uint8, "a 0-d tensor has no last dim"),
        (Tensor(b[:, :, :3]), dtypes.int16, "the last dim's size and the other dims' strides must divide by 2"),
        (Tensor.zeros(2, 0), dtypes.float64, "the last dim's size and the other dims' strides must divide by 2"),
    ]:
        with pytest.raises(ShapeError, match=f"view: {message}"):
            bad.view(dt)


def test_to_copies_when_asked_as_torch():
    x = Tensor([1.0, 2.0]).realize()
    for kwargs in ({}, {"dtype": dtypes.float32}, {"device": x.device}):
        copied = x.to(copy=True, **kwargs)
        assert copied is not x and copied.tolist() == [1.0, 2.0]
        copied.add_(1)
        assert x.tolist() == [1.0, 2.0]
    assert x.to(x.device) is x and x.to(dtypes.float32, non_blocking=True) is x
    assert x.to(dtypes.int32, copy=True).tolist() == torch.tensor([1.0, 2.0]).to(torch.int32, copy=True).tolist()


def test_conv_takes_torch_argument_order_and_unbatched_inputs():
    # torch's order is (weight, bias, stride, padding, dilation, groups); tinygrad's put groups third
    x, w, b, wt = _randn(2, 4, 7, 6), _randn(4, 2, 3, 3), _randn(4), _randn(4, 3, 3, 3)
    as_torch(lambda t, u, c: F.conv2d(t, u, c, 2, 1, 1, 2), [x, w, b], lambda t, u, c: t.conv2d(u, c, 2, 1, 1, 2))
    x0, w1 = Tensor(x[0]), Tensor(w[:, :, 0])
    tx0, tw1, tw = torch.tensor(x[0]), torch.tensor(w[:, :, 0]), torch.tensor(wt)
    for ours, ref in (
        (x0.conv2d(Tensor(w), None, 1, "same", 2, 2), F.conv2d(tx0, torch.tensor(w), None, 1, "same", 2, 2)),
        (x0[:, 0].conv1d(w1, None, 1, 1, 1, 2), F.conv1d(tx0[:, 0], tw1, None, 1, 1, 1, 2)),
        (Tensor(x).conv_transpose2d(Tensor(wt), None, 2, 1, 1), F.conv_transpose2d(torch.tensor(x), tw, None, 2, 1, 1)),
    ):  # fmt: skip
        assert ours.shape == tuple(ref.shape)
        np.testing.assert_allclose(ours.numpy(), ref.numpy(), atol=1e-5, rtol=1e-4)
    with pytest.raises(ArgumentError, match="conv2d: padding='same' needs stride 1"):
        Tensor(x).conv2d(Tensor(w), stride=2, padding="same", groups=2)


def test_reduce_dims_appear_once_and_mean_takes_a_dtype_as_torch():
    x = _randn(2, 3)
    with pytest.raises(ArgumentError, match=r"sum: an axis appears more than once in \(1, -1\)"):
        Tensor(x).sum((1, -1))
    ours = Tensor([[1, 2], [4, 4]]).mean(dim=1, dtype=dtypes.float64)
    assert ours.dtype == dtypes.float64 and ours.tolist() == [1.5, 4.0]
    with pytest.raises(TypeError, match="mean: dtype must be a floating-point dtype"):
        Tensor(x).mean(dtype=dtypes.int32)


def test_dropout_of_one_and_batchnorm_of_one_value_per_channel_as_torch():
    from uopkit.nn import BatchNorm

    x = np.array([NAN, INF, -2.0, 3.0], np.float32)
    Tensor.training = True
    try:
        assert np.array_equal(Tensor(x).dropout(1.0).numpy(), F.dropout(torch.tensor(x), 1.0).numpy(), equal_nan=True)
        with pytest.raises(ValueError, match=r"BatchNorm\(4\): batch statistics need at least 2 values per channel"):
            BatchNorm(4)(Tensor(x.reshape(1, 4, 1, 1)))
        # momentum=None: the running statistics average every batch's (it raised a TypeError)
        ours, ref = BatchNorm(2, momentum=None), torch.nn.BatchNorm2d(2, momentum=None)
        for step in range(2):
            batch = _randn(2, 2, 1, 3) * (step + 1)
            ours(Tensor(batch)).realize(), ref(torch.tensor(batch))
        np.testing.assert_allclose(ours.running_var.numpy(), ref.running_var.numpy(), rtol=1e-5)
        np.testing.assert_allclose(ours.running_mean.numpy(), ref.running_mean.numpy(), atol=1e-6)
    finally:
        Tensor.training = False


def test_uint8_bilinear_as_torchs_fixed_point_kernel():
    # PyTorch resizes uint8 images with 16-bit fixed-point weights, width first: the same bits here
    rng = np.random.default_rng(0)
    for trial in range(24):
        h, w = (int(v) for v in rng.integers(2, 12, 2))
        x = rng.integers(0, 256, (1, 2, h, w)).astype(np.uint8)
        kw = dict(scale_factor=1.5) if trial % 6 == 0 else dict(size=tuple(int(v) for v in rng.integers(1, 15, 2)))
        align = bool(trial % 2)
        ours = Tensor(x).interpolate(mode="bilinear", align_corners=align, **kw)
        theirs = F.interpolate(torch.tensor(x), mode="bilinear", align_corners=align, **kw)
        assert ours.dtype == dtypes.uint8
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_torch_errors_and_scalars_of_small_ops():
    # a constructor names itself for an argument it doesn't take (it said Tensor.__init__())
    for make, kw in ((Tensor.randn, "pin_memory"), (Tensor.zeros, "pin_memory"), (Tensor.arange, "out")):
        with pytest.raises(TypeError, match=f"^{make.__name__}\\(\\) got an unexpected keyword argument '{kw}'"):
            make(3, **{kw: None})
    with pytest.raises(TypeError, match="^zeros_like\\(\\) got an unexpected keyword argument 'layout'"):
        Tensor([1.0]).zeros_like(layout=None)
    assert Tensor([1.0, 2.0]).ones_like(requires_grad=True).requires_grad is True
    # negation and abs of bools raise, as torch's (they gave logical not and the input)
    with pytest.raises(TypeError, match="^neg: .*use ~ or logical_not"):
        -Tensor([True, False])
    with pytest.raises(TypeError, match="^abs: a bool tensor"):
        Tensor([True]).abs()
    assert (~Tensor([True, False])).tolist() == [False, True]
    # scatters into a 0-d tensor (an IndexError from deep inside before)
    zero = torch.tensor(0)
    assert (
        Tensor(2.5).scatter_add(0, Tensor(0), Tensor(1.0)).item()
        == torch.tensor(2.5).scatter_add(0, zero, torch.tensor(1.0)).item()
    )
    assert Tensor(2.5).scatter(-1, Tensor(0), 7.0).item() == 7.0
    got = Tensor(2.5).scatter_reduce(0, Tensor([0]), Tensor([4.0]), "amax")
    assert got.shape == () and got.item() == 4.0
    with pytest.raises(IndexError, match="^scatter_add: axis 1"):
        Tensor(2.5).scatter_add(1, Tensor(0), Tensor(1.0))


def test_errors_of_conv_attention_and_one_hot_name_them():
    with pytest.raises(ShapeError, match=r"^conv2d: kernel \(7, 7\) \(dilation \(1, 1\)\) is larger than the padded"):
        Tensor.ones(1, 3, 5, 5).conv2d(Tensor.ones(4, 3, 7, 7))
    assert Tensor.ones(1, 3, 5, 5).conv2d(Tensor.ones(4, 3, 7, 7), padding=1).shape == (1, 4, 1, 1)
    # conv1d and conv3d name themselves (they said conv2d)
    with pytest.raises(ArgumentError, match="^conv1d: padding='same' needs stride 1"):
        Tensor.ones(1, 2, 8).conv1d(Tensor.ones(3, 2, 3), padding="same", stride=2)
    with pytest.raises(ShapeError, match=r"^conv1d: kernel \(9,\)"):
        Tensor.ones(1, 2, 8).conv1d(Tensor.ones(3, 2, 9))
    with pytest.raises(ArgumentError, match="^conv3d: dilation must be positive"):
        Tensor.ones(1, 1, 4, 4, 4).conv3d(Tensor.ones(1, 1, 2, 2, 2), dilation=0)
    q = Tensor.ones(1, 2, 3)
    with pytest.raises(ShapeError, match="^scaled_dot_product_attention"):
        q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(4, 4))
    with pytest.raises(ArgumentError, match="^one_hot: num_classes must be -1"):
        Tensor([0, 1]).one_hot(-2)


def _dtype_refusals() -> list[tuple[str, Callable, Callable]]:
    # (case, torch's call, ours) for ops both refuse for a dtype; built lazily, torch imported
    ti, ui = torch.tensor([1, 2, 3]), Tensor([1, 2, 3])
    tf, uf = torch.tensor([1.0, 2.0]), Tensor([1.0, 2.0])
    tb, ub = torch.tensor([True, False]), Tensor([True, False])
    tu64, uu64 = torch.tensor([1], dtype=torch.uint64), Tensor([1], dtype=dtypes.uint64)
    t_empty, u_empty = torch.zeros(2, 0), Tensor.zeros(2, 0)
    return [
        ("frac of ints", lambda: ti.frac(), lambda: ui.frac()),
        ("hypot of ints", lambda: torch.hypot(ti, ti), lambda: ui.hypot(ui)),
        ("& of floats", lambda: tf & tf, lambda: uf & uf),
        ("| of floats", lambda: tf | tf, lambda: uf | uf),
        ("^ of floats", lambda: tf ^ tf, lambda: uf ^ uf),
        ("~ of floats", lambda: ~tf, lambda: ~uf),
        ("<< of floats", lambda: tf << 1, lambda: uf << 1),
        (">> of floats", lambda: tf >> 1, lambda: uf >> 1),
        ("round(decimals=) of ints", lambda: ti.round(decimals=1), lambda: ui.round(decimals=1)),
        ("% of bools", lambda: tb % tb, lambda: ub % ub),
        ("fmod of bools", lambda: torch.fmod(tb, tb), lambda: ub.fmod(ub)),
        ("median of bools", lambda: tb.median(), lambda: ub.median()),
        ("median(dim) of bools", lambda: tb.median(0), lambda: ub.median(0)),
        ("nanmedian of bools", lambda: tb.nanmedian(), lambda: ub.nanmedian()),
        ("kthvalue of bools", lambda: tb.kthvalue(1), lambda: ub.kthvalue(1)),
        ("abs of bools", lambda: tb.abs(), lambda: ub.abs()),
        ("- of bools", lambda: -tb, lambda: -ub),
        ("nanmean of ints", lambda: ti.nanmean(), lambda: ui.nanmean()),
        ("norm of ints", lambda: ti.norm(), lambda: ui.norm()),
        ("matrix_norm of ints", lambda: torch.linalg.matrix_norm(ti[None]), lambda: ui[None].matrix_norm()),
        ("renorm of ints", lambda: ti.reshape(1, 3).renorm(2, 0, 1), lambda: ui.reshape(1, 3).renorm(2, 0, 1)),
        ("quantile of ints", lambda: ti.quantile(0.5), lambda: ui.quantile(0.5)),
        ("nanquantile of ints", lambda: ti.nanquantile(0.5), lambda: ui.nanquantile(0.5)),
        ("uint64 + int64", lambda: tu64 + torch.tensor([1]), lambda: uu64 + Tensor([1], dtype=dtypes.int64)),
        ("uint64 + int32", lambda: tu64 + torch.tensor([1], dtype=torch.int32), lambda: uu64 + Tensor([1])),
        ("lerp of ints", lambda: torch.lerp(ti, ti, 0.5), lambda: ui.lerp(ui, 0.5)),
        ("lerp of ints, tensor weight", lambda: torch.lerp(ti, ti, ti), lambda: ui.lerp(ui, ui)),
        ("lerp of an int and a float", lambda: torch.lerp(ti[:2], tf, 0.5), lambda: ui[:2].lerp(uf, 0.5)),
        ("lerp_ of ints", lambda: ti.clone().lerp_(ti, 0.5), lambda: ui.clone().lerp_(ui, 0.5)),
        ("kthvalue over an empty dim", lambda: t_empty.kthvalue(1, 1), lambda: u_empty.kthvalue(1, 1)),
        ("kthvalue of an empty 1-D", lambda: torch.zeros(0).kthvalue(1), lambda: Tensor.zeros(0).kthvalue(1)),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(31))
def test_dtype_and_empty_refusals_raise_an_instance_of_torchs_exception(case: int) -> None:
    # both refuse; code written for torch catches by torch's type (NotImplementedError for "not implemented for
    # 'Float'", RuntimeError, IndexError), so ours is an instance of it too, with a message naming the op
    cases = _dtype_refusals()
    assert len(cases) == 31
    name, theirs, ours = cases[case]
    with pytest.raises(Exception) as ref:  # noqa: B017 - torch's type is what is compared
        theirs()
    with pytest.raises(type(ref.value)) as got:
        ours()
    assert str(got.value), name


def test_mean_of_whole_counts_is_torchs_quotient():
    # recall@k as it is written, hits.float().mean(dim): torch divides the sum by the count (the nearest float to
    # 197 / 200), where a product with the count's reciprocal gave 0.98499995 for 0.985 and 0.96999997 for 0.97
    rng = np.random.default_rng(0)
    hits = (rng.uniform(size=(7, 200)) < rng.uniform(size=(7, 1))).astype(np.float32)
    hits[0, :197], hits[0, 197:] = 1, 0
    for dim in (None, 1, 0):
        ours = Tensor(hits).mean() if dim is None else Tensor(hits).mean(dim)
        theirs = torch.tensor(hits).mean() if dim is None else torch.tensor(hits).mean(dim)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(
        Tensor(hits).mean(1, dtype=dtypes.float16).numpy(), torch.tensor(hits).mean(1, dtype=torch.float16).numpy()
    )
