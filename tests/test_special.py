"""The Tensor methods of tensor/special.py (lgamma, digamma, polygamma, mvlgamma, i0, frexp, ldexp, nextafter, gcd, lcm
and their in-place variants), each compared with PyTorch: values on grids (negatives, next to poles and zeros, large
arguments), the special points, dtypes and their promotion, gradients and the errors of wrong arguments. The float64
accuracy claims are checked against mpmath, whose values torch's own polygamma doesn't reach (1e-10 off for n = 1)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from uopkit import Tensor, dtypes
from uopkit.tensor.support import ArgumentError, DTypeError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
NAN, INF = float("nan"), float("inf")

TORCH_DTYPE = {
    dtypes.bool: torch.bool,
    dtypes.int8: torch.int8,
    dtypes.uint8: torch.uint8,
    dtypes.int16: torch.int16,
    dtypes.int32: torch.int32,
    dtypes.int64: torch.int64,
    dtypes.float16: torch.float16,
    dtypes.bfloat16: torch.bfloat16,
    dtypes.float32: torch.float32,
    dtypes.float64: torch.float64,
}

# arguments of the gamma family: a grid over the negatives (whole numbers left out: the poles are checked apart), next
# to the poles and to the zeros of lgamma (1, 2) and digamma (1.4616...), and large ones
_near_poles = np.array([k + d for k in (0.0, -1.0, -2.0, -7.0) for d in (-1e-3, 1e-3, -1e-6, 1e-6)])
GAMMA_GRID = np.concatenate(
    [
        np.linspace(-11.95, 12.05, 481),
        _near_poles,
        [1 + 1e-6, 1 - 1e-6, 2 + 1e-6, 2 - 1e-6, 1.4616321449683623, 1.46, 1e-30, -1e-30],
        np.logspace(-7, 0, 15),
        np.logspace(1, 30, 30),
    ]
)

# (the tolerances measured: float32 relative to torch's float64 values of the same inputs, with an absolute part
# for digamma's zeros and lgamma's negative ones, where the formulas are accurate to a few ulp of their terms, and
# for polygamma's subnormal results)
FLOAT32_TOLERANCE = {"lgamma": (2e-6, 5e-8), "digamma": (2e-6, 1e-6), "polygamma": (3e-6, 1e-37)}


def _values(t: Tensor) -> np.ndarray:
    return t.numpy() if t.dtype != dtypes.bfloat16 else t.float().numpy()


def _torch_values(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def _same(ours: Tensor, theirs: torch.Tensor) -> None:
    """The same shape, dtype and values: equal, with the same signs of zero, NaN where torch has NaN."""
    assert ours.shape == tuple(theirs.shape), (ours.shape, theirs.shape)
    assert TORCH_DTYPE[ours.dtype] == theirs.dtype, (ours.dtype, theirs.dtype)
    a, b = _values(ours), _torch_values(theirs)
    same = ((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b))
    assert same.all(), list(zip(a[~same][:6], b[~same][:6], strict=True))


def _close(ours: np.ndarray, exact: np.ndarray, rtol: float, atol: float = 0.0) -> None:
    """Within atol + rtol * |exact|, with inf and NaN where `exact` has them."""
    ours, exact = np.asarray(ours, np.float64), np.asarray(exact, np.float64)
    finite = np.isfinite(exact)
    np.testing.assert_array_equal(ours[~finite], exact[~finite])
    error = np.abs(ours[finite] - exact[finite])
    bad = error > atol + rtol * np.abs(exact[finite])
    assert not bad.any(), list(zip(ours[finite][bad][:6], exact[finite][bad][:6], strict=True))


def _check_grad(fn: Callable, x: np.ndarray, torch_fn: Callable | None = None, rtol: float = 1e-10) -> None:
    """The gradient of sum(fn(x) * random upstream) against PyTorch's (inf and NaN where torch has them)."""
    ours, theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    upstream = RNG.standard_normal(x.shape)
    (fn(ours) * Tensor(upstream)).sum().backward()
    ((torch_fn or fn)(theirs) * torch.tensor(upstream)).sum().backward()
    assert ours.grad is not None
    _close(ours.grad.numpy(), theirs.grad.numpy(), rtol)


# ---------------------------------------------------------------------------------------------------------------------
# the gamma family


def test_gamma_family_matches_torch_in_float32_on_a_grid():
    x = GAMMA_GRID.astype(np.float32)
    t, exact = Tensor(x), torch.tensor(x.astype(np.float64))
    for name, ours, theirs in (
        ("lgamma", t.lgamma(), exact.lgamma()),
        ("digamma", t.digamma(), exact.digamma()),
        ("polygamma", t.polygamma(2), torch.polygamma(2, exact)),
    ):
        assert ours.dtype == dtypes.float32
        # (where torch's float64 value is beyond float32, ours is inf: compare with the value rounded to float32)
        _close(ours.numpy(), theirs.float().numpy(), *FLOAT32_TOLERANCE[name])


def test_gamma_family_is_accurate_in_float64():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 30
    x = np.concatenate([GAMMA_GRID[::6], _near_poles, [1.4616321449683623, 1 + 1e-9, 2 - 1e-9, -2.4570247382208006]])
    t = Tensor(x)
    exact = {
        "lgamma": [mpmath.log(abs(mpmath.gamma(v))) if abs(v) < 1e5 else mpmath.loggamma(v).real for v in x],
        **{n: [mpmath.polygamma(n, v) for v in x] for n in (0, 1, 3, 6)},
    }
    # relative, and absolute next to the zeros of lgamma and digamma (lgamma(-2.457...) and digamma(1.4616...) = 0)
    _close(t.lgamma().numpy(), np.array(exact["lgamma"], np.float64), 5e-15, 1e-15)
    _close(t.digamma().numpy(), np.array(exact[0], np.float64), 1e-14, 2e-15)
    for n in (1, 3, 6):
        _close(t.polygamma(n).numpy(), np.array(exact[n], np.float64), 1e-14)


def test_gamma_family_special_points_are_torchs():
    special = [0.0, -0.0, -1.0, -2.0, -INF, INF, NAN, -1e30, 1e30, 1e-40, 1.0, 2.0]
    for dt in (torch.float32, torch.float64):
        x = torch.tensor(special, dtype=dt)
        t = Tensor(x.numpy())
        # lgamma(1) = lgamma(2) = 0 exactly, inf at the poles; digamma -inf at 0, inf at -0.0, NaN at -1, -2, -inf
        _same(t[[0, 1, 2, 3, 4, 5, 6, 7, 10, 11]].lgamma(), x[[0, 1, 2, 3, 4, 5, 6, 7, 10, 11]].lgamma())
        _close(t.lgamma().numpy(), x.lgamma().numpy(), 1e-15)
        _same(t[:-2].digamma(), x[:-2].digamma())
        _same(t[:-2].polygamma(0), torch.polygamma(0, x[:-2]))
        # the poles: (-1)^(n+1) inf, and for n >= 2 also at -inf, NaN at +inf (torch's zeta's answers). torch's
        # trigamma is finite at the negative whole numbers (1.3e15 at -1 in float32: its sin(pi x) there isn't 0),
        # ours inf
        kept = [0, 1, 4, 5, 6, 8]
        _same(t[kept].polygamma(1), torch.polygamma(1, x[kept]))
        assert np.all(t[[2, 3, 7]].polygamma(1).numpy() == INF)
        # (torch's float64 trigamma is 5e-10 off at 1: ours is pi**2 / 6 to the last bit)
        _close(t[9:].polygamma(1).numpy(), torch.polygamma(1, x[9:]).numpy(), 1e-9)
        assert t[10:11].polygamma(1).item() == (np.float32(np.pi**2 / 6) if dt == torch.float32 else np.pi**2 / 6)
        for n in (2, 3):
            _same(t[:-4].polygamma(n), torch.polygamma(n, x[:-4]))
            _close(t[8:].polygamma(n).numpy(), torch.polygamma(n, x[8:]).numpy(), 1e-9 if dt == torch.float64 else 3e-7)


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16, torch.float64, torch.float16])
def test_lgamma_of_huge_negatives_is_inf_as_torch(dt):
    # every float past 2**24 (2**53) is a whole number, a pole: inf, also where lgamma(1 - x) overflows (was NaN)
    big = [-1e10, -1e30, -3e38, -3.4e38, -1e300, -1.7976931348623157e308, -(2.0**60), -6e4]
    x = torch.tensor(big, dtype=torch.float64).to(dt)
    ours = Tensor(np.array(big)).cast(getattr(dtypes, str(dt).removeprefix("torch.")))
    np.testing.assert_array_equal(ours.lgamma().float().numpy(), x.lgamma().float().numpy())
    assert np.all(ours.lgamma().float().numpy() == INF)


def test_gamma_family_promotes_ints_and_rounds_half_floats_as_torch():
    for values in ([1, 2, 3, 7, -3, 0], [True, False]):
        for name in ("lgamma", "digamma", "i0"):
            ours = getattr(Tensor(values), name)()
            assert ours.dtype == dtypes.float32
            _close(ours.numpy(), getattr(torch.tensor(values), name)().numpy(), 1e-6)
        ours = Tensor(values[:2]).polygamma(1)
        assert ours.dtype == dtypes.float32
        _close(ours.numpy(), torch.polygamma(1, torch.tensor(values[:2])).numpy(), 1e-6)
    ours = Tensor([3, 4]).mvlgamma(2)
    assert ours.dtype == dtypes.float32
    _close(ours.numpy(), torch.tensor([3, 4]).mvlgamma(2).numpy(), 1e-6)
    # half floats compute in float32 and round once, as torch (an ulp apart where float32 values straddle a rounding)
    x = np.linspace(-4.9, 6.1, 45)
    for dt, tdt, ulp in ((dtypes.float16, torch.float16, 1e-3), (dtypes.bfloat16, torch.bfloat16, 8e-3)):
        theirs = torch.tensor(x).to(tdt)
        t = Tensor(_torch_values(theirs), dtype=dt)
        for name in ("lgamma", "digamma", "i0"):
            ours = getattr(t, name)()
            assert ours.dtype == dt
            _close(_values(ours), _torch_values(getattr(theirs, name)()), ulp, 1e-3)
        ours = t.polygamma(2)
        assert ours.dtype == dt
        _close(_values(ours), _torch_values(torch.polygamma(2, theirs)), ulp, 1e-2)


def test_polygamma_of_higher_orders_and_their_overflow_as_torch():
    x = np.array([0.3, 1.0, 2.0, 5.5, 10.0, 33.0, -0.7, -3.3])
    for n in (5, 10, 20):
        _close(Tensor(x).polygamma(n).numpy(), torch.polygamma(n, torch.tensor(x)).numpy(), 2e-14)
    # 40! is beyond float32: torch's inf * zeta (NaN where zeta underflows to 0)
    positive = x[:6].astype(np.float32)
    _same(Tensor(positive).polygamma(40), torch.polygamma(40, torch.tensor(positive)))


def test_gamma_family_gradients_are_the_next_derivative():
    x = np.array([-2.5, -0.3, 0.2, 1.0, 1.4616, 2.5, 7.0, 15.0, 40.0, 0.0, -2.0])
    _check_grad(lambda t: t.lgamma(), x)
    # (torch's digamma and trigamma are 1e-10 off in places: compared a bit looser)
    _check_grad(lambda t: t.digamma(), x[:-2], rtol=1e-8)
    _check_grad(lambda t: t.polygamma(1), x[:-2], rtol=1e-8)
    _check_grad(lambda t: t.polygamma(3), x[:-2])
    _check_grad(lambda t: t.mvlgamma(3), x[:-2] + 3)
    # a second derivative: lgamma'' = polygamma(1)
    t = Tensor(x[:-2], requires_grad=True)
    (g,) = t.lgamma().sum().gradient(t)
    (g2,) = g.sum().gradient(t)
    _close(g2.numpy(), torch.polygamma(1, torch.tensor(x[:-2])).numpy(), 1e-8)


def test_mvlgamma_sums_shifted_lgammas_as_torch():
    x = RNG.uniform(-3, 8, (3, 5))
    for p in (1, 2, 5):
        _close(Tensor(x).mvlgamma(p).numpy(), torch.tensor(x).mvlgamma(p).numpy(), 1e-13, 1e-13)
    # a 0-d tensor, and the poles (no check of x > (p - 1)/2, as PyTorch 2)
    assert Tensor(2.5).mvlgamma(3).shape == ()
    _same(Tensor([0.5, 1.0, 0.0]).mvlgamma(2), torch.tensor([0.5, 1.0, 0.0]).mvlgamma(2))


def test_gamma_family_argument_errors_say_what_to_pass():
    t = Tensor([1.5])
    with pytest.raises(ArgumentError, match="polygamma: n must be >= 0"):
        t.polygamma(-1)
    for bad in (1.5, True):
        with pytest.raises(TypeError, match="polygamma: n must be an int"):
            t.polygamma(bad)
    with pytest.raises(RuntimeError, match="mvlgamma: p must be >= 1"):
        t.mvlgamma(0)
    with pytest.raises(TypeError, match="mvlgamma: p must be an int"):
        t.mvlgamma(2.0)
    with pytest.raises(DTypeError, match="mvlgamma: not defined for bool"):
        Tensor([True]).mvlgamma(1)
    # an int tensor can't hold the float result, as torch
    with pytest.raises(TypeError, match="lgamma_"):
        Tensor([1, 2]).lgamma_()


# ---------------------------------------------------------------------------------------------------------------------
# i0


def test_i0_matches_torch_and_stays_finite_where_exp_overflows():
    x32 = np.concatenate([np.linspace(-85, 85, 681), np.logspace(-6, 1, 20)]).astype(np.float32)
    _close(Tensor(x32).i0().numpy(), torch.tensor(x32.astype(np.float64)).i0().numpy().astype(np.float32), 6e-7)
    x64 = np.concatenate([np.linspace(-700, 700, 561), np.linspace(-20, 20, 161), np.logspace(-6, 1, 20)])
    _close(Tensor(x64).i0().numpy(), torch.tensor(x64).i0().numpy(), 2e-15)
    # NaN at +-inf (torch's exp(x) * P / sqrt(x) is inf / inf there); torch's float32 is inf from 88.7 on, ours
    # finite up to float32's largest value (I0(91.9) = 3.3e38)
    _same(Tensor([INF, -INF, NAN]).i0(), torch.tensor([INF, -INF, NAN]).i0())
    assert Tensor([0.0, -0.0]).i0().tolist() == [1.0, 1.0]
    far = np.array([89.0, 91.0, 92.0], np.float32)
    _close(Tensor(far).i0().numpy(), torch.tensor(far, dtype=torch.float64).i0().float().numpy(), 1e-6)
    # the gradient is I1, whose own derivative is I0 - I1 / x (1/2 at 0)
    x = np.array([-30.0, -2.5, 0.0, 1e-3, 1.0, 8.0, 8.5, 25.0])
    _check_grad(lambda t: t.i0(), x, rtol=2e-15)
    t = Tensor(x, requires_grad=True)
    (g,) = t.i0().sum().gradient(t)
    (g2,) = g.sum().gradient(t)
    tx = torch.tensor(x, requires_grad=True)
    (tg,) = torch.autograd.grad(tx.i0().sum(), tx, create_graph=True)
    (tg2,) = torch.autograd.grad(tg.sum(), tx)
    _close(g2.numpy(), tg2.numpy(), 1e-13)


# ---------------------------------------------------------------------------------------------------------------------
# frexp, ldexp, nextafter

SPECIAL_FLOATS = [0.0, -0.0, 1.0, -1.0, 3.0, 0.75, INF, -INF, NAN, 1e-40, -1e-45, 3.4e38, 6e-39, 65504.0, 6e-8]


def test_frexp_splits_every_float_as_torch():
    values = np.array(SPECIAL_FLOATS + list(RNG.standard_normal(20) * 10.0 ** RNG.integers(-30, 30, 20)))
    for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
        theirs = torch.tensor(values).to(TORCH_DTYPE[dt])
        if dt == dtypes.float64:
            theirs = torch.cat([theirs, torch.tensor([5e-324, -2.2e-308, 1.7e308], dtype=torch.float64)])
        mantissa, exponent = Tensor(_torch_values(theirs), dtype=dt).frexp()
        expected = theirs.frexp()
        _same(mantissa, expected.mantissa)
        _same(exponent, expected.exponent)
    # the mantissa's gradient is 2**-exponent, as torch's (which computes 2**exponent in float32: 0 for 1e300, ours
    # 2**-997)
    _check_grad(lambda t: t.frexp()[0], np.array([1.0, 2.5, -0.1, 0.0, 1e-310, 1e30, -3e-30]), rtol=0)
    with pytest.raises(RuntimeError, match="frexp: needs a float tensor"):
        Tensor([1, 2]).frexp()


def test_ldexp_scales_exactly_by_integer_exponents_as_torch():
    x = np.array([3.0, 1.0, 5.0, 1e30, 3e38, 1e-45, 1e-30, 0.0, -0.0, INF, NAN, 1.5, -7.25, 1e-3])
    k = np.array([-150, -149, -150, -250, 2, 300, 130, 5000, -5000, -5000, 3, 2**40, -1, 20])
    for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
        theirs = torch.tensor(x).to(TORCH_DTYPE[dt])
        _same(Tensor(_torch_values(theirs), dtype=dt).ldexp(Tensor(k)), theirs.ldexp(torch.tensor(k)))
    _same(
        Tensor([3.0, 1.0, 1.5], dtype=dtypes.float64).ldexp(Tensor([-1075, 1024, -1074])),
        torch.tensor([3.0, 1.0, 1.5], dtype=torch.float64).ldexp(torch.tensor([-1075, 1024, -1074])),
    )
    # a float exponent multiplies by 2**other (inf first, as torch's); dtypes promote, ints to float32; broadcasting
    pairs = [
        (np.array([1e-30, 1.5, 2.0], np.float32), np.array([130.0, 0.5, -2.0], np.float32)),
        (np.array([1, 2, 3]), np.array([3, 4, -1])),
        (np.array([1, 2], np.int8), np.array([2.5, -1.0])),
        (np.array([1.5, 2.0], np.float16), np.array([3, 4])),
        (np.array([1.5, 2.0], np.float32), np.array([[3.0], [4.0]])),
        (np.array([True, False]), np.array([2, 3])),
    ]
    for a, b in pairs:
        ours, theirs = Tensor(a).ldexp(Tensor(b)), torch.tensor(a).ldexp(torch.tensor(b))
        assert TORCH_DTYPE[ours.dtype] == theirs.dtype
        # (2**2.5 is an ulp apart from torch's pow)
        _close(_values(ours), _torch_values(theirs), 3e-16)
    # gradients: 2**other, and self * 2**other * log(2) for a float exponent (torch's for an integer exponent is
    # 2**other in integers, 0 for negative ones: compared with its gradient for the same exponent as floats)
    _check_grad(
        lambda t: t.ldexp(Tensor([3, 0, -2])), np.array([1.0, 2.5, -3.0]), lambda t: t.ldexp(torch.tensor([3.0, 0, -2]))
    )
    _check_grad(
        lambda t: Tensor([1.0, -2.0, 3.0]).ldexp(t),
        np.array([0.5, 2.0, -1.0]),
        lambda t: torch.tensor([1.0, -2.0, 3.0]).ldexp(t),
    )
    with pytest.raises(TypeError, match="ldexp: other must be a Tensor"):
        Tensor([1.0]).ldexp(2)
    with pytest.raises(NotImplementedError, match="ldexp: not implemented for a bool exponent"):
        Tensor([1.0]).ldexp(Tensor([True]))


def test_nextafter_steps_one_float_in_every_dtype_as_torch():
    a = [0.0, -0.0, 1.0, -1.0, 0.0, NAN, 1.0, INF, 3.4e38, -1e-45, 1.0, 1e-45, -INF, 2.0, 1e-40, -65504.0]
    b = [-0.0, 0.0, 2.0, -2.0, -1.0, 1.0, NAN, 0.0, INF, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, -INF]
    for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
        ta, tb = (torch.tensor(v).to(TORCH_DTYPE[dt]) for v in (a, b))
        _same(Tensor(_torch_values(ta), dtype=dt).nextafter(Tensor(_torch_values(tb), dtype=dt)), ta.nextafter(tb))
    # promotion (float32 with float64 is float64; with ints the float), broadcasting
    _same(
        Tensor([1.0]).nextafter(Tensor([2.0], dtype=dtypes.float64)),
        torch.tensor([1.0]).nextafter(torch.tensor([2.0], dtype=torch.float64)),
    )
    _same(
        Tensor([[1.0], [3.0]]).nextafter(Tensor([2, 0])), torch.tensor([[1.0], [3.0]]).nextafter(torch.tensor([2, 0]))
    )
    # torch's gradients: 1 for self, 0 for other
    x, y = Tensor([1.0, 2.5], requires_grad=True), Tensor([3.0, 0.0], requires_grad=True)
    x.nextafter(y).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0] and y.grad.tolist() == [0.0, 0.0]
    with pytest.raises(NotImplementedError, match="nextafter: not implemented for dtypes.int"):
        Tensor([1]).nextafter(Tensor([2]))
    with pytest.raises(TypeError, match="nextafter: other must be a Tensor"):
        Tensor([1.0]).nextafter(2.0)


# ---------------------------------------------------------------------------------------------------------------------
# gcd and lcm


def _fibonacci_pairs(largest: int) -> tuple[list[int], list[int]]:
    # consecutive Fibonacci numbers up to `largest`, both ways round and with signs: Euclid's slowest inputs
    fib = [1, 2]
    while fib[-1] + fib[-2] <= largest:
        fib.append(fib[-1] + fib[-2])
    a, b = fib[-1], fib[-2]
    return [a, b, -a, b, a - 1, 0], [b, a, b, -a, a, 0]


def test_gcd_lcm_of_every_int8_pair_and_euclids_slowest_inputs_as_torch():
    # every int8 pair (INT_MIN too: its abs wraps, as torch's C abs) in one tensor
    grid = np.arange(-128, 128, dtype=np.int8)
    a, b = np.repeat(grid, 256), np.tile(grid, 256)
    for name in ("gcd", "lcm"):
        _same(getattr(Tensor(a), name)(Tensor(b)), getattr(torch.tensor(a), name)(torch.tensor(b)))
    u = np.arange(0, 256, dtype=np.uint8)
    ua, ub = np.repeat(u, 256), np.tile(u, 256)
    _same(Tensor(ua).gcd(Tensor(ub)), torch.tensor(ua).gcd(torch.tensor(ub)))
    for npdt in (np.int16, np.int32, np.int64):
        info = np.iinfo(npdt)
        fa, fb = _fibonacci_pairs(int(info.max))
        extra_a = [info.min, info.min, info.max, 0, -7, 12] + list(RNG.integers(info.min, info.max, 30))
        extra_b = [0, -1, info.max - 1, -5, 0, -18] + list(RNG.integers(info.min, info.max, 30))
        x, y = np.array(fa + extra_a, npdt), np.array(fb + extra_b, npdt)
        for name in ("gcd", "lcm"):
            _same(getattr(Tensor(x), name)(Tensor(y)), getattr(torch.tensor(x), name)(torch.tensor(y)))


def test_gcd_lcm_promote_broadcast_and_refuse_floats_as_torch():
    a, b = np.array([[12], [-8]], np.int8), np.array([18, 4, 0], np.int32)
    for name in ("gcd", "lcm"):
        _same(getattr(Tensor(a), name)(Tensor(b)), getattr(torch.tensor(a), name)(torch.tensor(b)))
        for x, y in (([12.0], [18.0]), ([12], [18.0]), ([True], [False])):
            with pytest.raises(NotImplementedError, match=f"{name}: not implemented for"):
                getattr(Tensor(x), name)(Tensor(y))
        with pytest.raises(TypeError, match=f"{name}: other must be a Tensor"):
            getattr(Tensor([12]), name)(3)


# ---------------------------------------------------------------------------------------------------------------------
# in place, and the size of the graphs


def test_in_place_variants_write_the_result_into_the_tensor():
    x = np.array([0.5, 1.5, 2.5, 4.0])
    cases = [
        ("lgamma_", (), ()),
        ("digamma_", (), ()),
        ("polygamma_", (2,), (2,)),
        ("mvlgamma_", (2,), (2,)),
        ("i0_", (), ()),
        ("ldexp_", (Tensor([1, 2, 3, 4]),), (torch.tensor([1, 2, 3, 4]),)),
        ("nextafter_", (Tensor([0.0, 9.0, 0.0, 9.0]),), (torch.tensor([0.0, 9.0, 0.0, 9.0]),)),
    ]
    for name, ours_args, torch_args in cases:
        t, tt = Tensor(x), torch.tensor(x)
        assert getattr(t, name)(*ours_args) is t
        getattr(tt, name)(*torch_args)
        _close(t.numpy(), tt.numpy(), 1e-13)
    for name in ("gcd_", "lcm_"):
        t, tt = Tensor([12, -8, 0], dtype=dtypes.int64), torch.tensor([12, -8, 0])
        getattr(t, name)(Tensor([18, 12, 5], dtype=dtypes.int64))
        getattr(tt, name)(torch.tensor([18, 12, 5]))
        _same(t, tt)


def test_graphs_stay_compact():
    # a fixed number of elementwise nodes, whatever the values: no loop over the data, no realize on the way
    sizes = {
        "lgamma": (Tensor([1.5], dtype=dtypes.float64).lgamma(), 400),
        "digamma": (Tensor([1.5], dtype=dtypes.float64).digamma(), 220),
        "polygamma": (Tensor([1.5], dtype=dtypes.float64).polygamma(3), 300),
        "i0": (Tensor([1.5], dtype=dtypes.float64).i0(), 280),
        "gcd": (Tensor([12], dtype=dtypes.int64).gcd(Tensor([18], dtype=dtypes.int64)), 400),
    }
    for name, (out, limit) in sizes.items():
        assert len(out.uop.toposort()) < limit, name


def test_polygamma_takes_torchs_function_order():
    # torch.polygamma(n, x) ported as Tensor.polygamma(n, x) raised AttributeError ('int' object has no attribute
    # 'uop'): the order comes first there, as in torch.special.polygamma
    torch = pytest.importorskip("torch")
    x = np.array([0.5, 1.5, 4.0])
    for n in (0, 1, 2):
        got = Tensor.polygamma(n, Tensor(x)).numpy()
        np.testing.assert_allclose(got, torch.polygamma(n, torch.from_numpy(x)).numpy(), rtol=1e-9)
        np.testing.assert_array_equal(got, Tensor(x).polygamma(n).numpy())
