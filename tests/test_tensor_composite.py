"""The Tensor methods of tensor/composite.py (fmax/fmin, signbit, isneginf/isposinf, frac, xlogy, hypot, erfc,
erfinv, diff, take_along_dim, tensor_split, mode, histc, cross, kron, tensordot, mm/bmm/mv, cov, corrcoef, logspace,
new_*, ravel and the stacks), each compared with PyTorch: values at special points, dtypes, shapes, gradients and the
errors of wrong shapes, dims and dtypes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.tensor import segments
from uopkit.tensor.support import ArgumentError, DTypeError, EmptyReduceError, ShapeError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)
NAN, INF = float("nan"), float("inf")

# (uopkit dtype, torch dtype) of the floats
FLOATS = [
    (dtypes.float32, torch.float32),
    (dtypes.float64, torch.float64),
    (dtypes.float16, torch.float16),
    (dtypes.bfloat16, torch.bfloat16),
]
HALVES = FLOATS[2:]
TORCH_DTYPE = {
    dtypes.bool: torch.bool,
    dtypes.int8: torch.int8,
    dtypes.uint8: torch.uint8,
    dtypes.int16: torch.int16,
    dtypes.int32: torch.int32,
    dtypes.int64: torch.int64,
    **dict(FLOATS),
}


def _randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _values(t: Tensor) -> np.ndarray:
    return t.numpy() if t.dtype != dtypes.bfloat16 else t.float().numpy()


def _torch_values(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def _same(ours: Tensor, theirs: torch.Tensor, rtol: float = 0.0, atol: float = 0.0) -> None:
    """The same shape, dtype (uopkit's int32 or int64 for torch's int64) and values: equal (NaN where torch has NaN,
    and the same signs of zero) or within the tolerances."""
    assert ours.shape == tuple(theirs.shape), (ours.shape, theirs.shape)
    if theirs.dtype == torch.int64:
        assert ours.dtype in (dtypes.int32, dtypes.int64), ours.dtype
    else:
        assert TORCH_DTYPE[ours.dtype] == theirs.dtype, (ours.dtype, theirs.dtype)
    a, b = _values(ours), _torch_values(theirs)
    if rtol or atol:
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
        return
    same = ((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b))
    assert same.all(), list(zip(a[~same][:6], b[~same][:6], strict=True))


def _check_grad(
    fn: Callable, arrays: list[np.ndarray], torch_fn: Callable | None = None, rtol: float = 1e-5, atol: float = 1e-6
) -> None:
    """Values and the gradients of sum(out * random upstream) against PyTorch (NaN where torch's is NaN)."""
    torch_fn = torch_fn or fn
    ours = [Tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = fn(*ours), torch_fn(*theirs)
    assert out.shape == tuple(ref.shape)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=rtol, atol=atol)
    upstream = RNG.standard_normal(out.shape).astype(np.float32)
    (out * Tensor(upstream)).sum().backward()
    (ref * torch.tensor(upstream)).sum().backward()
    for i, (t, r) in enumerate(zip(ours, theirs, strict=True)):
        assert t.grad is not None, f"input {i} got no gradient"
        np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=rtol, atol=atol, err_msg=f"gradient {i}")


# ---------------------------------------------------------------------------------------------------------------------
# elementwise


def test_fmax_fmin_ignore_nan_keep_self_on_ties_and_promote_as_torch():
    a = np.array([1.0, NAN, 3.0, NAN, -0.0, 0.0, -INF, 2.0], np.float32)
    b = np.array([NAN, 2.0, 1.0, NAN, 0.0, -0.0, 5.0, 2.0], np.float32)
    for name in ("fmax", "fmin"):
        _same(getattr(Tensor(a), name)(Tensor(b)), getattr(torch.tensor(a), name)(torch.tensor(b)))
        # broadcasting, and a dtype promoted as maximum's (int with float, float16 with float32, bools)
        rows = np.array([[1], [4]], np.int32)
        _same(getattr(Tensor(rows), name)(Tensor(b[:4])), getattr(torch.tensor(rows), name)(torch.tensor(b[:4])))
        half = np.array([1.5, NAN], np.float16)
        _same(
            getattr(Tensor(half), name)(Tensor(a[:2])),
            getattr(torch.tensor(half), name)(torch.tensor(a[:2])),
        )
        flags = np.array([True, False]), np.array([False, False])
        out = getattr(Tensor(flags[0]), name)(Tensor(flags[1]))
        assert out.dtype == dtypes.bool
        _same(out, getattr(torch.tensor(flags[0]), name)(torch.tensor(flags[1])))
        with pytest.raises(TypeError, match=name):
            getattr(Tensor(a), name)(2.0)
    # the gradient goes to the value taken: self on ties and where other is NaN, as torch's
    x = np.array([1.0, NAN, 3.0, 2.0, NAN], np.float32)
    y = np.array([NAN, 2.0, 3.0, 5.0, NAN], np.float32)
    for name in ("fmax", "fmin"):
        ours = [Tensor(v, requires_grad=True) for v in (x, y)]
        theirs = [torch.tensor(v, requires_grad=True) for v in (x, y)]
        getattr(ours[0], name)(ours[1]).sum().backward()
        getattr(theirs[0], name)(theirs[1]).sum().backward()
        for o, t in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(o.grad.numpy(), t.grad.numpy())


def test_signbit_isneginf_isposinf_every_dtype_as_torch():
    special = [-0.0, 0.0, -NAN, NAN, -INF, INF, -1.5, 2.5]
    for dt, tdt in FLOATS:
        x, tx = Tensor(special, dtype=dt), torch.tensor(special, dtype=tdt)
        for name in ("signbit", "isneginf", "isposinf"):
            out = getattr(x, name)()
            assert out.dtype == dtypes.bool
            np.testing.assert_array_equal(out.numpy(), getattr(tx, name)().numpy(), err_msg=f"{name} {dt}")
    # of a computed value (not only a stored one)
    np.testing.assert_array_equal((Tensor([1.0, 0.0]) * -1).signbit().numpy(), [True, True])
    for dt in (dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.bool):
        values = [True, False] if dt == dtypes.bool else [-2, 0, 3]
        x, tx = Tensor(values, dtype=dt), torch.tensor(values, dtype=TORCH_DTYPE[dt])
        for name in ("signbit", "isneginf", "isposinf"):
            np.testing.assert_array_equal(getattr(x, name)().numpy(), getattr(tx, name)().numpy(), err_msg=name)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_frac_values_gradient_and_refused_ints_as_torch():
    values = [1.5, -1.5, -2.0, -0.0, 0.0, 1e30, INF, -INF, NAN, 0.75]
    for dt, tdt in FLOATS:
        _same(Tensor(values, dtype=dt).frac(), torch.tensor(values, dtype=tdt).frac())
    _check_grad(lambda t: t.frac(), [_randn(6) * 3])
    with pytest.raises(DTypeError, match="frac"):
        Tensor([1, 2]).frac()


def test_xlogy_special_values_promotion_and_gradients_as_torch():
    x = np.array([0.0, 0.0, 0.0, 0.0, 1.0, 2.0, NAN, 0.0, -0.0, 3.0], np.float32)
    y = np.array([0.0, INF, NAN, -1.0, NAN, 0.0, 1.0, -INF, 2.0, 0.5], np.float32)
    _same(Tensor(x).xlogy(Tensor(y)), torch.tensor(x).xlogy(torch.tensor(y)))
    # a number, ints and bools (float32), a half float with a number (stays half), two dtypes, broadcasting
    cases = [
        (np.array([1, 0, 3], np.int32), 2.0),
        (np.array([1, 0, 3], np.int64), np.array([2, 5, 0], np.int64)),
        (np.array([True, False]), np.array([True, True])),
        (np.array([0.5, 0.0, 3.0], np.float16), 3.0),
        (np.array([0.5, 0.0, 3.0], np.float16), np.array([2.0, 1.0, 0.25], np.float32)),
        (np.array([[1.0], [2.0]], np.float32), np.array([0.5, 4.0], np.float32)),
    ]
    for a, b in cases:
        ours = Tensor(a).xlogy(b if isinstance(b, float) else Tensor(b))
        theirs = torch.tensor(a).xlogy(b if isinstance(b, float) else torch.tensor(b))
        assert ours.dtype == {torch.float32: dtypes.float32, torch.float16: dtypes.float16}[theirs.dtype]
        _same(ours, theirs, rtol=1e-6)
    for dt, tdt in HALVES:
        a, b = np.abs(_randn(64)), np.abs(_randn(64))
        _same(
            Tensor(a, dtype=dt).xlogy(Tensor(b, dtype=dt)), torch.tensor(a, dtype=tdt).xlogy(torch.tensor(b, dtype=tdt))
        )
    # torch's gradients, at 0 (-inf and inf, NaN at 0/0) and at NaN too; and of a tensor with itself
    gx = np.array([0.0, 1.0, 0.5, -0.0, 1.0, 0.0, 2.0], np.float32)
    gy = np.array([0.0, 0.0, 2.0, 3.0, NAN, NAN, 0.5], np.float32)
    ours = [Tensor(v, requires_grad=True) for v in (gx, gy)]
    theirs = [torch.tensor(v, requires_grad=True) for v in (gx, gy)]
    ours[0].xlogy(ours[1]).sum().backward()
    theirs[0].xlogy(theirs[1]).sum().backward()
    for o, t in zip(ours, theirs, strict=True):
        _same(o.grad, t.grad)
    # a zero incoming gradient stays 0 beside log(0) = -inf, as torch's (not 0 * -inf)
    ours = [Tensor(v, requires_grad=True) for v in (gx, gy)]
    theirs = [torch.tensor(v, requires_grad=True) for v in (gx, gy)]
    upstream = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0], np.float32)
    (ours[0].xlogy(ours[1]) * Tensor(upstream)).sum().backward()
    theirs[0].xlogy(theirs[1]).backward(torch.tensor(upstream))
    for o, t in zip(ours, theirs, strict=True):
        _same(o.grad, t.grad)
    _check_grad(lambda t: t.xlogy(t), [np.abs(_randn(5)) + 0.1])


def test_hypot_without_overflow_specials_gradient_and_dtypes_as_torch():
    a = np.array([3.0, 1e30, 1e-30, 3e38, 1e-45, 0.0, INF, NAN, -INF, -5.0, 0.0], np.float32)
    b = np.array([4.0, 1e30, 1e-30, 3e38, 1e-45, -0.0, NAN, INF, 1.0, 12.0, 1e-40], np.float32)
    _same(Tensor(a).hypot(Tensor(b)), torch.tensor(a).hypot(torch.tensor(b)), rtol=2e-7)
    big = np.array([1e300, 1e-300, 3.0, 1e-320], np.float64)
    _same(Tensor(big).hypot(Tensor(big)), torch.tensor(big).hypot(torch.tensor(big)), rtol=1e-15)
    r = RNG.standard_normal(10_000).astype(np.float32) * np.float32(10.0) ** RNG.integers(-30, 30, 10_000)
    s = RNG.standard_normal(10_000).astype(np.float32)
    _same(Tensor(r).hypot(Tensor(s)), torch.tensor(r).hypot(torch.tensor(s)), rtol=2.5e-7)
    for dt, tdt in HALVES:
        _same(
            Tensor(r[:200], dtype=dt).hypot(Tensor(s[:200], dtype=dt)),
            torch.tensor(r[:200], dtype=tdt).hypot(torch.tensor(s[:200], dtype=tdt)),
        )
    # a float with an int promotes (torch too); two ints and a number are refused, as torch
    _same(Tensor([3.0]).hypot(Tensor([4])), torch.tensor([3.0]).hypot(torch.tensor([4])))
    with pytest.raises(DTypeError, match="hypot"):
        Tensor([3]).hypot(Tensor([4]))
    with pytest.raises(TypeError, match="hypot"):
        Tensor([3.0]).hypot(4.0)
    _check_grad(lambda s, t: s.hypot(t), [_randn(6), _randn(2, 1)])
    x, y = Tensor([0.0, 3.0], requires_grad=True), Tensor([0.0, 4.0], requires_grad=True)
    x.hypot(y).sum().backward()
    _same(x.grad, torch.tensor([NAN, 0.6]))


def test_erfc_is_accurate_in_relative_terms_over_its_range():
    x = np.linspace(-10, 10, 100_001).astype(np.float32)
    exact = torch.erfc(torch.tensor(x, dtype=torch.float64)).numpy()
    ours = Tensor(x).erfc().numpy().astype(np.float64)
    normal = exact > np.finfo(np.float32).tiny
    # relative, also where 1 - erf(x) would have cancelled to 0 (x = 4: 1.5e-8; x = 9: 4e-37)
    assert np.max(np.abs(ours[normal] / exact[normal] - 1)) < 5e-7
    # where erfc is a subnormal float32, as close as torch's own
    theirs = torch.erfc(torch.tensor(x)).numpy().astype(np.float64)
    assert np.max(np.abs(ours[~normal] - theirs[~normal])) <= 3e-45
    x64 = np.linspace(-27, 27, 20_001)
    exact64 = torch.erfc(torch.tensor(x64)).numpy()
    normal = exact64 > 1e-300
    assert np.max(np.abs(Tensor(x64).erfc().numpy()[normal] / exact64[normal] - 1)) < 2e-15
    _same(Tensor([-INF, INF, NAN, 0.0, 30.0, -30.0]).erfc(), torch.tensor([-INF, INF, NAN, 0.0, 30.0, -30.0]).erfc())
    for dt, tdt in HALVES:
        grid = torch.linspace(-5, 5, 1001).to(tdt)
        _same(Tensor(_torch_values(grid), dtype=dt).erfc(), torch.erfc(grid))
    # ints and bools promote to float32, as torch
    for values in ([-2, 0, 1, 3], [True, False]):
        ours = Tensor(values).erfc()
        assert ours.dtype == dtypes.float32
        _same(ours, torch.tensor(values).erfc(), rtol=5e-7)
    _check_grad(lambda t: t.erfc(), [np.array([-30.0, -2.0, -0.3, 0.0, 0.4, 1.0, 5.0, 30.0], np.float32)])


def test_erfinv_is_accurate_with_infinities_at_one_and_nan_beyond():
    y = np.concatenate([np.linspace(-1, 1, 100_001)[1:-1], 1 - np.logspace(-7.5, -1, 500)]).astype(np.float32)
    exact = torch.erfinv(torch.tensor(y, dtype=torch.float64)).numpy()
    ours = Tensor(y).erfinv().numpy().astype(np.float64)
    nonzero = exact != 0
    assert np.max(np.abs(ours[nonzero] / exact[nonzero] - 1)) < 4e-7
    y64 = np.concatenate([np.linspace(-1, 1, 10_001)[1:-1], 1 - np.logspace(-16, -1, 500), np.logspace(-300, -1, 50)])
    exact64 = torch.erfinv(torch.tensor(y64)).numpy()
    nonzero = exact64 != 0
    assert np.max(np.abs(Tensor(y64).erfinv().numpy()[nonzero] / exact64[nonzero] - 1)) < 2e-15
    special = [-1.0, 1.0, 1.5, -2.0, NAN, 0.0, -0.0, 1e-30]
    for dt, tdt in FLOATS:
        _same(Tensor(special, dtype=dt).erfinv(), torch.tensor(special, dtype=tdt).erfinv(), rtol=4e-7)
    for dt, tdt in HALVES:
        grid = torch.linspace(-1, 1, 1001).to(tdt)
        _same(Tensor(_torch_values(grid), dtype=dt).erfinv(), torch.erfinv(grid))
    ours = Tensor([0, 1, -1]).erfinv()
    assert ours.dtype == dtypes.float32
    _same(ours, torch.tensor([0, 1, -1]).erfinv())
    # torch's gradient: inf at +-1, NaN beyond
    x, tx = (
        Tensor([-1.0, 1.0, 0.0, 0.5, 2.0], requires_grad=True),
        torch.tensor([-1.0, 1.0, 0.0, 0.5, 2.0], requires_grad=True),
    )
    x.erfinv().sum().backward()
    tx.erfinv().sum().backward()
    _same(x.grad, tx.grad, rtol=1e-6)
    _check_grad(lambda t: t.erfinv(), [np.array([-0.99, -0.5, 0.0, 0.3, 0.9], np.float32)])


# ---------------------------------------------------------------------------------------------------------------------
# along an axis


def test_diff_orders_dims_prepend_append_and_dtypes_as_torch():
    x = RNG.integers(-5, 5, (3, 6)).astype(np.int32)
    t, tt = Tensor(x), torch.tensor(x)
    for n in (0, 1, 2, 5, 6, 9):
        for dim in (-1, 0):
            _same(t.diff(n, dim), tt.diff(n, dim))
    pre, app = np.ones((3, 2), np.int32), np.full((3, 1), 7, np.int32)
    _same(
        t.diff(2, prepend=Tensor(pre), append=Tensor(app)),
        tt.diff(2, prepend=torch.tensor(pre), append=torch.tensor(app)),
    )
    # bools XOR, uint8 wraps, a float prepend promotes, a float16 stays float16
    _same(Tensor([True, False, True, True]).diff(2), torch.tensor([True, False, True, True]).diff(2))
    _same(Tensor([3, 1, 2], dtype=dtypes.uint8).diff(), torch.tensor([3, 1, 2], dtype=torch.uint8).diff())
    ours = Tensor([1, 2], dtype=dtypes.int8).diff(prepend=Tensor([5.5]))
    assert ours.dtype == dtypes.float32
    _same(ours, torch.tensor([1, 2], dtype=torch.int8).diff(prepend=torch.tensor([5.5])))
    _same(
        Tensor([1.0, 2.5, 0.25], dtype=dtypes.float16).diff(),
        torch.tensor([1.0, 2.5, 0.25], dtype=torch.float16).diff(),
    )
    _check_grad(lambda a, p: a.diff(2, dim=0, prepend=p), [_randn(4, 3), _randn(1, 3)])
    with pytest.raises(ShapeError, match="diff"):
        Tensor(1.0).diff()
    with pytest.raises(ArgumentError, match="diff"):
        t.diff(-1)
    with pytest.raises(ShapeError, match="diff.*prepend"):
        t.diff(prepend=Tensor([1, 2]))
    with pytest.raises(ShapeError, match="diff.*append"):
        t.diff(dim=0, append=Tensor.zeros(1, 5, dtype=dtypes.int32))
    with pytest.raises(IndexError, match="diff"):
        t.diff(dim=2)


def test_take_along_dim_broadcasts_wraps_negative_indices_and_checks_range():
    x = _randn(2, 3, 4)
    idx = RNG.integers(-4, 4, (2, 1, 5))
    for dt in (dtypes.int32, dtypes.int64, dtypes.int8):
        _same(Tensor(x).take_along_dim(Tensor(idx, dtype=dt), 2), torch.tensor(x).take_along_dim(torch.tensor(idx), 2))
    # indices broadcast against the input off dim (and the input against them), and dim None reads the flat tensor
    rows = RNG.integers(0, 2, (1, 3, 1))
    _same(Tensor(x).take_along_dim(Tensor(rows), 0), torch.tensor(x).take_along_dim(torch.tensor(rows), 0))
    flat = RNG.integers(0, 24, (7,))
    _same(Tensor(x).take_along_dim(Tensor(flat)), torch.tensor(x).take_along_dim(torch.tensor(flat)))
    _same(Tensor(5.0).take_along_dim(Tensor(0)), torch.tensor(5.0).take_along_dim(torch.tensor(0)))
    # the values at an argsort, the gradient to the picked elements (summed where picked twice)
    _check_grad(lambda a: a.take_along_dim(Tensor(idx), 2), [x], lambda a: a.take_along_dim(torch.tensor(idx), 2))
    ordered = Tensor(x).take_along_dim(Tensor(x).argsort(1), 1)
    np.testing.assert_array_equal(ordered.numpy(), np.sort(x, 1))
    with pytest.raises(IndexError, match="take_along_dim"):
        Tensor(x).take_along_dim(Tensor([[[4]]]), 2)
    # (with dim None no negative index, as torch)
    with pytest.raises(IndexError, match="take_along_dim"):
        Tensor(x).take_along_dim(Tensor([-1]))
    with pytest.raises(IndexError, match="take_along_dim"):
        Tensor(x).take_along_dim(Tensor([[[-5]]]), 2)
    with pytest.raises(ShapeError, match="take_along_dim"):
        Tensor(x).take_along_dim(Tensor([1, 2]), 2)
    with pytest.raises(ShapeError, match="take_along_dim"):
        Tensor(x).take_along_dim(Tensor.zeros(3, 3, 1, dtype=dtypes.int32), 2)
    with pytest.raises(TypeError, match="take_along_dim"):
        Tensor(x).take_along_dim(Tensor([[[1.0]]]), 2)
    with pytest.raises(IndexError, match="take_along_dim"):
        Tensor(5.0).take_along_dim(Tensor(0), 0)


def test_tensor_split_sections_indices_and_tensors_as_torch_views():
    x = np.arange(14).reshape(2, 7)
    t, tt = Tensor(x), torch.tensor(x)
    specs = [3, 7, 8, 1, [1, 5], [5, 1], [-2, 10], (1,), [], [0, 0, 7]]
    for spec in specs:
        for dim in (1, -1):
            ours, theirs = t.tensor_split(spec, dim), tt.tensor_split(spec, dim)
            assert isinstance(ours, tuple) and len(ours) == len(theirs)
            for o, r in zip(ours, theirs, strict=True):
                _same(o, r)
    for spec in (Tensor(3), Tensor([1, 5]), Tensor([2], dtype=dtypes.int64)):
        ours = t.tensor_split(spec, 1)
        theirs = tt.tensor_split(torch.tensor(spec.numpy()).long(), 1)
        assert [o.tolist() for o in ours] == [r.tolist() for r in theirs]
    assert [p.shape for p in Tensor.zeros(2, 6).tensor_split(4, 0)] == [(1, 6), (1, 6), (0, 6), (0, 6)]
    # views, as torch's: an in-place write into a piece shows in the tensor split
    base = Tensor.zeros(6).contiguous().realize()
    pieces = base.tensor_split(3)
    pieces[1].fill_(7.0)
    assert base.tolist() == [0.0, 0.0, 7.0, 7.0, 0.0, 0.0]
    _check_grad(
        lambda a: Tensor.cat([p * (i + 1) for i, p in enumerate(a.tensor_split([1, 3], 1))], 1),
        [_randn(2, 5)],
        lambda a: torch.cat([p * (i + 1) for i, p in enumerate(a.tensor_split([1, 3], 1))], 1),
    )
    with pytest.raises(ArgumentError, match="tensor_split"):
        t.tensor_split(0)
    with pytest.raises(ShapeError, match="tensor_split"):
        Tensor(1).tensor_split(1)
    with pytest.raises(ShapeError, match="tensor_split"):
        t.tensor_split(Tensor([[1]]))
    with pytest.raises(TypeError, match="tensor_split"):
        t.tensor_split(Tensor([1.0]))
    with pytest.raises(TypeError, match="tensor_split"):
        t.tensor_split(2.5)
    with pytest.raises(IndexError, match="tensor_split"):
        t.tensor_split(2, dim=2)


def test_mode_picks_the_smallest_most_frequent_value_at_its_last_position_as_torch():
    # rows shorter than 16, where torch's CPU index is the last position of the mode
    for shape, high in (((40, 9), 4), ((8, 15), 3), ((5, 1), 3)):
        x = RNG.integers(0, high, shape)
        for dim in (-1, 0):
            ours, theirs = Tensor(x, dtype=dtypes.int32).mode(dim), torch.tensor(x, dtype=torch.int32).mode(dim)
            assert ours.indices.dtype == dtypes.int32
            _same(ours.values, theirs.values)
            if x.shape[dim] < 16:
                _same(ours.indices, theirs.indices.int())
    x = (RNG.integers(0, 3, (4, 3, 7)) * 0.5).astype(np.float32)
    values, indices = Tensor(x).mode(1, keepdim=True)
    theirs = torch.tensor(x).mode(1, keepdim=True)
    _same(values, theirs.values)
    _same(indices, theirs.indices.int())
    # ties of value pick the smallest, -0.0 equals 0.0 (the value is the one at the index), bools, halves, a NaN
    for row in ([5, 5, 2, 2], [7, 1, 2, 3], [2, 2, 5, 5, 5, 2], [-0.0, 0.0, 1.0, 1.0], [0.0, -0.0, 2.0],
                [True, False, True], [NAN, NAN], [INF, -INF, INF, -INF]):  # fmt: skip
        ours, theirs = Tensor(row).mode(), torch.tensor(row).mode()
        _same(ours.values, theirs.values)
        _same(ours.indices, theirs.indices.int())
    for dt, tdt in HALVES:
        ours, theirs = (
            Tensor([1.5, 2.0, 1.5, 2.0], dtype=dt).mode(),
            torch.tensor([1.5, 2.0, 1.5, 2.0], dtype=tdt).mode(),
        )
        assert ours.values.dtype == dt
        _same(ours.values, theirs.values)
    _same(Tensor(4.0).mode().values, torch.tensor(4.0).mode().values)
    assert Tensor.zeros(0, 2).mode(1).values.shape == (0,)
    # the gradient goes to the returned position, as torch's
    _check_grad(lambda a: a.mode(0).values, [np.array([[1.0, 2.0], [2.0, 2.0], [3.0, 2.0], [2.0, 5.0]], np.float32)])
    with pytest.raises(EmptyReduceError, match="mode"):
        Tensor.zeros(2, 0).mode(1)
    with pytest.raises(IndexError, match="mode"):
        Tensor.zeros(2, 3).mode(2)


def test_mode_of_rows_with_nans_is_torchs():
    # torch's CPU mode sorts a row with `<` (an insertion sort up to 16): the NaNs stay put and split the numbers into
    # groups counted apart, so a NaN can be the mode ([nan, nan, 3]: NaN at 0), or a number counted in two groups lose
    for row in ([NAN, NAN, 3.0], [NAN, 2.0, 1.0], [1.0, NAN, 1.0, 2.0, 2.0], [2.0, NAN, 1.0, 1.0], [INF, NAN, NAN, INF],
                [NAN, NAN, NAN], [3.0, NAN, NAN], [0.0, -0.0, NAN], [1.0, NAN, 0.0, 2.0, 0.0]):  # fmt: skip
        ours, theirs = Tensor(row).mode(), torch.tensor(row).mode()
        _same(ours.values, theirs.values)
        _same(ours.indices, theirs.indices.int())
    for n in (2, 5, 9, 16):
        x = RNG.integers(-2, 3, (60, n)).astype(np.float32)
        x[RNG.random(x.shape) < 0.3] = NAN
        x[:3] = NAN
        for dt, tdt in FLOATS[:2]:
            for dim, keepdim in ((-1, False), (0, True)):
                xs = x if dim == -1 else x.T.copy()
                ours = Tensor(xs).cast(dt).mode(dim, keepdim)
                theirs = torch.tensor(xs).to(tdt).mode(dim, keepdim)
                _same(ours.values, theirs.values)
                _same(ours.indices, theirs.indices.int())
    # ints and bools have no NaN: their rows sort as before
    ours, theirs = Tensor([[2, 1, 2, 1]]).mode(1), torch.tensor([[2, 1, 2, 1]]).mode(1)
    _same(ours.values, theirs.values)
    _same(ours.indices, theirs.indices.int())


def test_histc_ranges_edges_and_dtypes_as_torch(monkeypatch):
    x = np.array([1.0, 2.0, 1.0, 4.0, -1.0, 5.0, NAN, INF, -INF], np.float32)
    finite = x[:6]
    for args in [(4,), (4, 0, 4), (4, 1, 1), (3, 0, 3), (10, -1.5, 5), (7, 0.1, 0.7), (1,), (100,)]:
        _same(Tensor(finite).histc(*args), torch.tensor(finite).histc(*args))
    # values outside a given range (infinities and NaN among them) are left out
    _same(Tensor(x).histc(4, 0, 2), torch.tensor(x).histc(4, 0, 2))
    # the data's range of one value is widened by 1 each way; an empty tensor has [-1, 1]
    _same(Tensor([3.0, 3.0]).histc(4), torch.tensor([3.0, 3.0]).histc(4))
    _same(Tensor.zeros(0).histc(4), torch.zeros(0).histc(4))
    data = _randn(3, 50)
    _same(Tensor(data).histc(16), torch.tensor(data).histc(16))
    for dt, tdt in FLOATS:
        values = data.reshape(-1)[:64]
        ours = Tensor(values, dtype=dt).histc(8, -2, 2)
        assert ours.dtype == dt
        _same(ours, torch.tensor(values, dtype=tdt).histc(8, -2, 2))
    # a large histogram counts by a scatter-add instead of a one-hot mask: the same counts
    monkeypatch.setattr(segments, "SCATTER_BY_SORTING", 1)
    _same(Tensor(data).histc(16, -1, 1), torch.tensor(data).histc(16, -1, 1))
    monkeypatch.undo()
    with pytest.raises(DTypeError, match="histc"):
        Tensor([1, 2]).histc()
    # torch's kernel is "not implemented for" int dtypes: code written for torch catches NotImplementedError
    with pytest.raises(NotImplementedError):
        torch.tensor([1, 2], dtype=torch.uint8).histc()
    with pytest.raises(NotImplementedError, match="histc"):
        Tensor([1, 2], dtype=dtypes.uint8).histc()
    with pytest.raises(ArgumentError, match="histc"):
        Tensor([1.0]).histc(0)
    with pytest.raises(TypeError, match="histc"):
        Tensor([1.0]).histc(2.5)
    with pytest.raises(ArgumentError, match="histc"):
        Tensor([1.0]).histc(4, 3, 1)
    with pytest.raises(ArgumentError, match="histc.*finite"):
        Tensor([1.0, NAN]).histc(4)
    with pytest.raises(ArgumentError, match="histc.*finite"):
        Tensor([1.0]).histc(4, 0, INF)


@pytest.mark.parametrize("form", ["written one by one", "sorted", "one-hot"])
def test_histc_and_bincount_count_by_scatter_as_torch(form, monkeypatch):
    # on the CPU each element adds its 1 (or weight) into its bin, one kernel of writes + bins steps, where a one-hot
    # mask compares every element with every bin (1e6 values into 8000 bins: 1.6 s for bincount, 4.2 s for histc);
    # a GPU-style device sorts where the mask would be large, else takes it. The same counts and sums as torch's,
    # inputs and weights read through broadcast views included.
    from uopkit.codegen.scatter import lowers_as_scatter
    from uopkit.engine.realize import create_schedule, kernelize_tensors
    from uopkit.uop.ops import Ops

    def scatter_kernels(t: Tensor) -> int:
        items = create_schedule(kernelize_tensors([t]))
        return sum(lowers_as_scatter(i.ast) for i in items if i.ast.op is Ops.SINK)

    if form == "sorted":
        monkeypatch.setattr(segments, "SCATTER_BY_SORTING", 1)
    if form != "written one by one":
        monkeypatch.setattr(segments, "writes_one_by_one", lambda device: False)
    data = RNG.standard_normal(3000).astype(np.float32)
    ints = RNG.integers(0, 200, 3000)
    weights = RNG.standard_normal(3000)
    counted = [
        (lambda: Tensor(data).histc(50, -2, 2), lambda: torch.tensor(data).histc(50, -2, 2)),
        (lambda: Tensor(data, dtype=dtypes.float16).histc(7), lambda: torch.tensor(data).half().histc(7)),
        (lambda: Tensor(ints).bincount(), lambda: torch.tensor(ints).bincount()),
        (lambda: Tensor(ints).bincount(minlength=300), lambda: torch.tensor(ints).bincount(minlength=300)),
    ]
    for ours, theirs in counted:
        out = ours()
        if form == "written one by one":
            assert scatter_kernels(out) == 1
        _same(out, theirs())
    # float32 weights sum in float32, others in float64
    for w in (weights.astype(np.float32), weights, weights.astype(np.float16)):
        out, ref = Tensor(ints).bincount(Tensor(w)), torch.tensor(ints).bincount(torch.tensor(w))
        assert out.dtype == (dtypes.float32 if w.dtype == np.float32 else dtypes.float64)
        np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-4)
    # every element the same stored value, seen through an expanded view
    src = np.arange(1.0, 7.0, dtype=np.float32)
    _same(Tensor([1]).expand(6).bincount(Tensor(src)), torch.tensor([1]).expand(6).bincount(torch.tensor(src)))
    _same(Tensor([3]).expand(6).bincount(), torch.tensor([3]).expand(6).bincount())
    _same(Tensor([0.5]).expand(9).histc(4, 0, 1), torch.tensor([0.5]).expand(9).histc(4, 0, 1))


# ---------------------------------------------------------------------------------------------------------------------
# products


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_cross_default_dim_broadcasting_dtypes_and_gradient_as_torch():
    a, b = _randn(3, 3), _randn(3, 3)
    # dim None is the first dimension of size 3 (torch.cross's default), not linalg.cross's last
    _same(Tensor(a).cross(Tensor(b)), torch.cross(torch.tensor(a), torch.tensor(b), dim=0), rtol=1e-6, atol=1e-6)
    for sa, sb, dim in [
        ((4, 3), (1, 3), None),
        ((3, 4), (3, 1), 0),
        ((2, 3, 5), (2, 3, 1), -2),
        ((2, 4, 3), (2, 4, 3), -1),
    ]:
        x, y = _randn(*sa), _randn(*sb)
        want = torch.linalg.cross(torch.tensor(x), torch.tensor(y), dim=dim if dim is not None else sa.index(3))
        _same(Tensor(x).cross(Tensor(y), dim), want, rtol=1e-6, atol=1e-6)
    _same(Tensor([1, 2, 3]).cross(Tensor([4, 5, 6])), torch.tensor([1, 2, 3]).cross(torch.tensor([4, 5, 6])).int())
    for dt, tdt in HALVES:
        x, y = _randn(8, 3), _randn(8, 3)
        _same(
            Tensor(x, dtype=dt).cross(Tensor(y, dtype=dt), 1),
            torch.tensor(x, dtype=tdt).cross(torch.tensor(y, dtype=tdt), 1),
        )
    _check_grad(lambda s, t: s.cross(t, 1), [_randn(2, 3), _randn(1, 3)], lambda s, t: torch.linalg.cross(s, t, dim=1))
    with pytest.raises(ShapeError, match="cross"):
        Tensor.zeros(2, 4).cross(Tensor.zeros(2, 4))
    with pytest.raises(ShapeError, match="cross"):
        Tensor.zeros(1, 3).cross(Tensor.zeros(3, 1))
    with pytest.raises(ShapeError, match="cross"):
        Tensor.zeros(3).cross(Tensor.zeros(2, 3))
    with pytest.raises(IndexError, match="cross"):
        Tensor.zeros(3, 4).cross(Tensor.zeros(3, 4), dim=5)
    with pytest.raises(DTypeError, match="cross"):
        Tensor([True, False, True]).cross(Tensor([True, True, True]))


def test_kron_shapes_dtypes_and_gradient_as_torch():
    for sa, sb in [((2, 3), (2, 2)), ((2,), (2, 1)), ((), (2,)), ((), ()), ((0, 2), (3,)), ((2, 1, 2), (3, 2))]:
        x, y = _randn(*sa), _randn(*sb)
        _same(Tensor(x).kron(Tensor(y)), torch.kron(torch.tensor(x), torch.tensor(y)))
    _same(
        Tensor([True, False]).kron(Tensor([True, True])),
        torch.kron(torch.tensor([True, False]), torch.tensor([True, True])),
    )
    # int8 wraps, an int with a float promotes
    _same(
        Tensor([100], dtype=dtypes.int8).kron(Tensor([3], dtype=dtypes.int8)),
        torch.kron(torch.tensor([100], dtype=torch.int8), torch.tensor([3], dtype=torch.int8)),
    )
    _same(Tensor([1, 2]).kron(Tensor([1.5])), torch.kron(torch.tensor([1, 2]), torch.tensor([1.5])))
    _check_grad(lambda s, t: s.kron(t), [_randn(2, 3), _randn(3, 2)], lambda s, t: torch.kron(s, t))
    with pytest.raises(TypeError, match="kron"):
        Tensor([1.0]).kron(2.0)


def test_tensordot_dims_forms_size_one_pairs_and_errors_as_torch():
    a, b = _randn(3, 4, 5), _randn(4, 5, 6)
    forms = [
        (b, 2),
        (b, 0),
        (b[0], 1),
        (b, ([1, 2], [0, 1])),
        (b, ([-2, -1], [0, 1])),
        (b, ([1], [0])),
        (b, ([2, 1], [1, 0])),
    ]
    for other, dims in forms:
        want = torch.tensordot(torch.tensor(a), torch.tensor(other), dims)
        _same(Tensor(a).tensordot(Tensor(other), dims), want, rtol=1e-5, atol=1e-5)
    for dims in (Tensor(2), Tensor([[1, 2], [0, 1]])):
        want = torch.tensordot(torch.tensor(a), torch.tensor(b), torch.tensor(dims.numpy()).long())
        _same(Tensor(a).tensordot(Tensor(b), dims), want, rtol=1e-5, atol=1e-5)
    # a paired dimension of size 1 beside a longer one: the longer is summed first, as torch
    _same(
        Tensor.ones(2, 1).tensordot(Tensor.ones(2, 3), ([1], [1])),
        torch.tensordot(torch.ones(2, 1), torch.ones(2, 3), ([1], [1])),
    )
    _same(Tensor(2.0).tensordot(Tensor(3.0), 0), torch.tensordot(torch.tensor(2.0), torch.tensor(3.0), 0))
    ints = np.arange(6, dtype=np.int32).reshape(2, 3)
    ours = Tensor(ints).tensordot(Tensor(ints), 2)
    assert (
        ours.dtype == dtypes.int32 and ours.item() == torch.tensordot(torch.tensor(ints), torch.tensor(ints), 2).item()
    )
    _check_grad(
        lambda s, t: s.tensordot(t, ([0, 2], [1, 0])),
        [_randn(3, 2, 4), _randn(4, 3, 5)],
        lambda s, t: torch.tensordot(s, t, ([0, 2], [1, 0])),
    )
    with pytest.raises(ShapeError, match="tensordot"):
        Tensor(a).tensordot(Tensor(b), ([0], [0]))
    with pytest.raises(ArgumentError, match="tensordot"):
        Tensor(a).tensordot(Tensor(b), -1)
    with pytest.raises(ShapeError, match="tensordot"):
        Tensor(a).tensordot(Tensor(b), 4)
    with pytest.raises(ArgumentError, match="tensordot"):
        Tensor(a).tensordot(Tensor(b), ([1, 2], [0]))
    with pytest.raises(ArgumentError, match="tensordot"):
        Tensor(a).tensordot(Tensor(b), ([1, 1], [0, 0]))
    with pytest.raises(IndexError, match="tensordot"):
        Tensor(a).tensordot(Tensor(b), ([3], [0]))
    with pytest.raises(TypeError, match="tensordot"):
        Tensor(a).tensordot(Tensor(b), "ij")


def test_mm_bmm_mv_values_gradients_and_shape_checks_as_torch():
    _check_grad(lambda s, t: s.mm(t), [_randn(2, 3), _randn(3, 4)])
    _check_grad(lambda s, t: s.bmm(t), [_randn(5, 2, 3), _randn(5, 3, 4)])
    _check_grad(lambda s, t: s.mv(t), [_randn(2, 3), _randn(3)])
    ints = np.arange(6, dtype=np.int32).reshape(2, 3)
    _same(Tensor(ints).mm(Tensor(ints.T.copy())), torch.tensor(ints).mm(torch.tensor(ints.T.copy())))
    _same(Tensor.ones(2, 0).mm(Tensor.ones(0, 4)), torch.ones(2, 0).mm(torch.ones(0, 4)))
    half = _randn(4, 8)
    _same(
        Tensor(half, dtype=dtypes.float16).mm(Tensor(half.T.copy(), dtype=dtypes.float16)),
        torch.tensor(half, dtype=torch.float16).mm(torch.tensor(half.T.copy(), dtype=torch.float16)),
    )
    bad = [
        (lambda: Tensor.ones(3).mm(Tensor.ones(3, 4)), "mm"),
        (lambda: Tensor.ones(2, 2, 3).mm(Tensor.ones(3, 4)), "mm"),
        (lambda: Tensor.ones(2, 3).mm(Tensor.ones(2, 4)), "mm"),
        (lambda: Tensor.ones(2, 3).bmm(Tensor.ones(3, 4)), "bmm"),
        (lambda: Tensor.ones(1, 2, 3).bmm(Tensor.ones(5, 3, 4)), "bmm"),
        (lambda: Tensor.ones(5, 2, 3).bmm(Tensor.ones(5, 2, 4)), "bmm"),
        (lambda: Tensor.ones(2, 3).mv(Tensor.ones(3, 1)), "mv"),
        (lambda: Tensor.ones(3).mv(Tensor.ones(3)), "mv"),
        (lambda: Tensor.ones(2, 3).mv(Tensor.ones(2)), "mv"),
    ]
    for call, name in bad:
        with pytest.raises(ShapeError, match=name):
            call()
    with pytest.raises(TypeError, match="mm"):
        Tensor.ones(2, 2).mm(np.ones((2, 2)))


# ---------------------------------------------------------------------------------------------------------------------
# statistics


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_cov_with_weights_corrections_and_dtypes_as_torch():
    x = np.array([[0.0, 1.0, 2.0, 5.0], [2.0, 1.0, 0.0, -1.0], [1.0, 3.0, 2.0, 2.0]], np.float32)
    fw, aw = np.array([1, 2, 1, 3]), np.array([0.5, 2.0, 1.0, 0.25], np.float32)
    cases = [
        {},
        {"correction": 0},
        {"correction": 2},
        {"correction": 4},
        {"correction": 7},
        {"fweights": fw},
        {"aweights": aw},
        {"fweights": fw, "aweights": aw},
        {"fweights": fw, "aweights": aw, "correction": 0},
        {"fweights": fw.astype(np.int32), "correction": 9},
    ]
    for kwargs in cases:
        ours = Tensor(x).cov(**{k: Tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()})
        theirs = torch.tensor(x).cov(
            **{k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        )
        _same(ours, theirs, rtol=1e-5, atol=1e-6)
    # one variable (1-D, or one row) gives a 0-d result; ints give float32; no observations NaN
    for data in ([1.0, 2.0, 4.0], [[1, 2, 4]], [[1.0], [2.0]]):
        ours, theirs = Tensor(data).cov(), torch.tensor(data).cov()
        assert ours.dtype == dtypes.float32
        _same(ours, theirs, rtol=1e-6)
    _same(Tensor.zeros(2, 0).cov(), torch.zeros(2, 0).cov())
    assert Tensor.zeros(0, 3).cov().shape == (0, 0)
    # half floats op by op, as torch's (the products of the matrix product summed in float32)
    r = _randn(4, 9)
    for dt, tdt in HALVES:
        _same(Tensor(x, dtype=dt).cov(), torch.tensor(x, dtype=tdt).cov())
        _same(
            Tensor(r, dtype=dt).cov(aweights=Tensor(np.abs(r[0]), dtype=dt)),
            torch.tensor(r, dtype=tdt).cov(aweights=torch.tensor(np.abs(r[0]), dtype=tdt)),
        )
        _same(Tensor(r, dtype=dt).corrcoef(), torch.tensor(r, dtype=tdt).corrcoef())
    ours = Tensor(x, dtype=dtypes.float16).cov(aweights=Tensor(aw))
    assert ours.dtype == dtypes.float32
    _check_grad(lambda t: t.cov(), [x])
    _check_grad(lambda t, w: t.cov(aweights=w), [x, aw], rtol=1e-4, atol=1e-5)
    bad = [
        (lambda: Tensor.ones(2, 2, 2).cov(), ShapeError, "cov"),
        (lambda: Tensor([[True, False]]).cov(), DTypeError, "cov"),
        (lambda: Tensor(x).cov(fweights=Tensor([1.0, 2.0, 1.0, 1.0])), TypeError, "cov.*fweights"),
        (lambda: Tensor(x).cov(aweights=Tensor([1, 2, 1, 1])), TypeError, "cov.*aweights"),
        (lambda: Tensor(x).cov(aweights=Tensor([1.0, 2.0])), ShapeError, "cov.*aweights"),
        (lambda: Tensor(x).cov(aweights=Tensor([[1.0, 2.0, 3.0, 4.0]])), ShapeError, "cov.*aweights"),
        (lambda: Tensor(x).cov(fweights=Tensor([1, -2, 1, 1])), ArgumentError, "cov.*fweights.*negative"),
        (lambda: Tensor(x).cov(aweights=Tensor([1.0, -2.0, 1.0, 1.0])), ArgumentError, "cov.*aweights.*negative"),
        (lambda: Tensor(x).cov(fweights=Tensor([0, 0, 0, 0])), ArgumentError, "cov.*0"),
    ]
    for call, error, match in bad:
        with pytest.raises(error, match=match):
            call()


def test_cov_weights_of_the_wrong_dtype_raise_torchs_runtime_error():
    # torch raises a RuntimeError for float fweights and integer aweights; ours a DTypeError (a TypeError and that)
    x = np.array([[0.0, 1.0, 2.0, 5.0], [2.0, 1.0, 0.0, -1.0]], np.float32)
    for name, weights in (("fweights", [1.0, 2.0, 1.0, 1.0]), ("aweights", [1, 2, 1, 1])):
        with pytest.raises(RuntimeError, match=name):
            torch.tensor(x).cov(**{name: torch.tensor(weights)})
        with pytest.raises(RuntimeError, match=f"cov: {name} must have"):
            Tensor(x).cov(**{name: Tensor(weights)})


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_corrcoef_as_torch():
    x = _randn(4, 10)
    _same(Tensor(x).corrcoef(), torch.tensor(x).corrcoef(), rtol=1e-5, atol=1e-6)
    for data in ([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]], [[1, 2, 4], [1, 0, 0]], [1.0, 2.0, 4.0], 2.0):
        _same(Tensor(data).corrcoef(), torch.tensor(data).corrcoef(), rtol=1e-6)
    _check_grad(lambda t: t.corrcoef(), [x[:3, :6]], rtol=1e-4, atol=1e-5)
    with pytest.raises(ShapeError, match="corrcoef"):
        Tensor.ones(2, 2, 2).corrcoef()


# ---------------------------------------------------------------------------------------------------------------------
# construction, flattening and stacking


def test_logspace_as_torch_for_every_dtype():
    cases = [(0, 2, 5, 10.0), (0, 2, 5, 2.0), (-1, 2.5, 6, 10.0), (0, 2, 1, 10.0), (0, 2, 0, 10.0), (0, 2, 3, -2.0),
             (0, 100, 3, 10.0), (0, 1, 7, 3.0), (-3.5, 4.25, 33, 1.7), (0.1, 1.3, 9, 10.0), (2.5, -1.2, 4, 0.5),
             (0.3, 0.7, 101, 10.0), (-1.8791228987245947, 1.7563908329815305, 1000, 10.0)]  # fmt: skip
    # (the last: torch stores its float64 power into float16 through float32, rounding twice: an ulp off at 196)
    for start, end, steps, base in cases:
        for dt in (
            dtypes.float32,
            dtypes.float64,
            dtypes.float16,
            dtypes.bfloat16,
            dtypes.int32,
            dtypes.int64,
            dtypes.uint8,
        ):
            if dt == dtypes.uint8 and min(start, end) < 0:
                # (torch wraps -1 into 255, its values then an inf cast to uint8, C's undefined behaviour; -1.2 raises)
                continue
            ours = Tensor.logspace(start, end, steps, base=base, dtype=dt)
            theirs = torch.logspace(start, end, steps, base=base, dtype=TORCH_DTYPE[dt])
            assert ours.dtype == dt
            _same(ours, theirs)
    assert Tensor.logspace(0, 1, 3).dtype == dtypes.float32
    leaf = Tensor.logspace(0, 1, 3, requires_grad=True)
    (leaf * 2).sum().backward()
    assert leaf.grad.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ArgumentError, match="logspace"):
        Tensor.logspace(0, 1, -1)
    with pytest.raises(DTypeError, match="logspace"):
        Tensor.logspace(0, 1, 3, dtype=dtypes.bool)


_LINSPACE_RNG = np.random.default_rng(7)
LINSPACE_CASES = [(0, 1, 7), (0, 1, 2), (0.3, 0.3, 1), (0, 1, 0), (3, -2, 5), (-1.7, 2.3, 13), (1e-4, 0.02, 50),
                  (-5, 5, 1001), (2.5, -7.25, 4097), (5, 5, 4), (-0.9, 0.7, 3), (0, 1e30, 9), (1e-40, 3e-40, 5)] + [
    (float(a), float(b), int(n))
    for a, b, n in zip(_LINSPACE_RNG.uniform(-60, 60, 40), _LINSPACE_RNG.uniform(-60, 60, 40),
                       _LINSPACE_RNG.choice([2, 3, 4, 7, 10, 33, 100, 257, 1000], 40), strict=True)
]  # fmt: skip


@pytest.mark.parametrize(
    "dt", [dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16, dtypes.int64, dtypes.int16, dtypes.uint8]
)
def test_linspace_as_torch_bit_for_bit(dt):
    # torch's kernel: start and end in the dtype, step = (end - start) / (steps - 1) in it, the first half
    # start + step * i and the rest end - step * (steps - 1 - i), fused multiply-adds (float16 and bfloat16 rounding
    # each operation; an integer dtype truncating start, end and each value); numpy's float64 values rounded once were
    # an ulp off in most float32 linspaces (linspace(0, 1, 7)[3]), and ints took start and end untruncated
    for start, end, steps in LINSPACE_CASES:
        try:
            theirs = torch.linspace(start, end, steps, dtype=TORCH_DTYPE[dt])
        except RuntimeError:
            # (out of the dtype's range: torch refuses it, and so do we)
            with pytest.raises(OverflowError, match="linspace"):
                Tensor.linspace(start, end, steps, dtype=dt)
            continue
        _same(Tensor.linspace(start, end, steps, dtype=dt), theirs)
    _same(Tensor.linspace(0, 1, 7), torch.linspace(0, 1, 7))
    if dt == dtypes.uint8:
        # (a negative int wraps into an unsigned dtype, as torch's)
        _same(Tensor.linspace(-1, 3, 3, dtype=dt), torch.linspace(-1, 3, 3, dtype=torch.uint8))


def test_new_constructors_take_self_dtype_and_device_unless_given():
    x = Tensor([1, 2], dtype=dtypes.int16)
    for out, shape, dt, value in [
        (x.new_zeros(2, 3), (2, 3), dtypes.int16, 0),
        (x.new_zeros((2, 3)), (2, 3), dtypes.int16, 0),
        (x.new_zeros(()), (), dtypes.int16, 0),
        (x.new_ones([4]), (4,), dtypes.int16, 1),
        (x.new_ones(2, dtype=dtypes.float32), (2,), dtypes.float32, 1),
        (x.new_full((2,), 7), (2,), dtypes.int16, 7),
        (x.new_full((2,), 7.5), (2,), dtypes.int16, 7),
        (x.new_full(3, -1.5, dtype=dtypes.float64), (3,), dtypes.float64, -1.5),
    ]:
        assert (out.shape, out.dtype, out.device) == (shape, dt, x.device)
        assert (out.numpy() == value).all()
    empty = x.new_empty(2, 3)
    assert (empty.shape, empty.dtype) == ((2, 3), dtypes.int16)
    assert x.new_empty((4,), dtype=dtypes.float32).dtype == dtypes.float32
    # new_tensor copies (floats truncate into the int dtype, as torch's), from a tensor too, outside its graph
    assert (
        x.new_tensor([1.5, -2.5]).tolist() == torch.tensor([1, 2], dtype=torch.int16).new_tensor([1.5, -2.5]).tolist()
    )
    assert x.new_tensor(3).shape == ()
    source = Tensor([1.5, 2.5], requires_grad=True)
    copy = Tensor([0.0]).new_tensor(source * 2, requires_grad=True)
    assert copy.requires_grad and copy.tolist() == [3.0, 5.0]
    (copy * copy).sum().backward()
    assert source.grad is None and copy.grad.tolist() == [6.0, 10.0]
    leaf = Tensor([1.0]).new_zeros(2, requires_grad=True)
    (leaf + 1).sum().backward()
    assert leaf.grad.tolist() == [1.0, 1.0]
    with pytest.raises(ShapeError):
        x.new_zeros(-1)
    with pytest.raises(OverflowError, match="full"):
        x.new_full((2,), 70000)


def test_ravel_and_the_stacks_as_torch():
    x = _randn(2, 3)
    _same(Tensor(x).T.ravel(), torch.tensor(x).T.ravel())
    _same(Tensor(3).ravel(), torch.tensor(3).ravel())
    groups = [
        [np.array([1, 2]), np.array([3, 4])],
        [np.array(1), np.array(2.5)],
        [np.ones((2, 1)), np.zeros((2, 2))],
        [np.ones((1, 2, 2)), np.zeros((2, 2, 2))],
        [np.ones((2, 2)), np.array([5.0, 6.0])],
        [np.ones((2, 2, 2)), np.ones((2, 1, 2))],
    ]
    for name in ("hstack", "vstack", "dstack", "column_stack"):
        for group in groups:
            try:
                want = getattr(torch, name)([torch.tensor(g) for g in group])
            except RuntimeError:
                with pytest.raises(ShapeError, match=name):
                    getattr(Tensor, name)([Tensor(g) for g in group])
                continue
            ours = [Tensor(g) for g in group]
            # torch's form, the tensors as arguments, and as a method
            for got in (getattr(Tensor, name)(ours), getattr(Tensor, name)(*ours), getattr(ours[0], name)(*ours[1:])):
                _same(got, want)
        with pytest.raises(ArgumentError, match=name):
            getattr(Tensor, name)([])
        with pytest.raises(TypeError, match=name):
            getattr(Tensor, name)([Tensor([1]), [2]])
    _check_grad(
        lambda a, b: Tensor.column_stack([a, b]), [_randn(3), _randn(3, 2)], lambda a, b: torch.column_stack([a, b])
    )


def test_atleast_nd_and_block_diag_as_torch():
    arrays = [np.array(2.5, np.float32), np.array([1, 2, 3]), np.ones((2, 3), np.float32), np.zeros((2, 1, 3, 1))]
    for name in ("atleast_1d", "atleast_2d", "atleast_3d"):
        for a in arrays:
            ours, theirs = getattr(Tensor(a), name)(), getattr(torch, name)(torch.tensor(a))
            _same(ours, theirs)
        # several tensors, or a list of them: a tuple
        for got in (getattr(Tensor, name)(*map(Tensor, arrays)), getattr(Tensor, name)(list(map(Tensor, arrays)))):
            want = getattr(torch, name)(*map(torch.tensor, arrays))
            assert isinstance(got, tuple) and len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                _same(g, w)
        assert isinstance(getattr(Tensor, name)([Tensor(1)]), tuple)
    # the tensor itself when it has the dims already, else a view of it (a write shows in both, as torch's)
    x = Tensor(_randn(2, 3)).realize()
    assert x.atleast_2d() is x
    v = Tensor([1.0, 2.0]).realize()
    v.atleast_3d()[0, 1, 0] = 9.0
    assert v.tolist() == [1.0, 9.0]
    blocks = [
        [np.array(1.0, np.float32), np.array([2.0, 3.0], np.float32), np.ones((2, 2), np.float32)],
        [np.arange(6).reshape(2, 3), np.array([[7]])],
        [np.zeros((0, 2), np.float32), np.ones((1, 1), np.float32), np.zeros((2, 0), np.float32)],
        [np.array([True, False]), np.array([[True]])],
        [_randn(3, 2)],
    ]
    for group in blocks:
        want = torch.block_diag(*map(torch.tensor, group))
        _same(Tensor.block_diag(*map(Tensor, group)), want)
        _same(Tensor(group[0]).block_diag(*map(Tensor, group[1:])), want)
    # two dtypes promote, as torch's
    _same(
        Tensor.block_diag(Tensor([1, 2]), Tensor([[0.5]])),
        torch.block_diag(torch.tensor([1, 2]), torch.tensor([[0.5]])),
    )
    with pytest.raises(
        ShapeError, match=r"block_diag: tensors must have 2 or fewer dims, tensor 1 has shape \(1, 1, 1\)"
    ):
        Tensor.block_diag(Tensor([1.0]), Tensor.ones(1, 1, 1))
    _check_grad(lambda a, b: Tensor.block_diag(a, b), [_randn(2, 3), _randn(2)], lambda a, b: torch.block_diag(a, b))
