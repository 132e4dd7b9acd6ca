"""torch.special's functions that have no method of torch.Tensor, as Tensor methods: the normal distribution's ndtr,
log_ndtr and ndtri, erfcx, xlog1py, entr, the exponentially scaled Bessel functions i0e, i1e (and i1), the Hurwitz
zeta function and multigammaln. Compositions of the other mixins' methods and of the series of tensor/special.py and
tensor/series.py, compared with torch in tests/test_special_torch.py.

Each is accurate where its value is tiny or huge, as torch's: erfcx never multiplies exp(x**2) by erfc(x) beyond
x = 1/2, log_ndtr goes through erfcx in the left tail (finite down to -1e150), ndtri refines its first guess with
Halley steps on the tail's own scale."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from uopkit.dtype import dtypes
from uopkit.gradient import set_gradient
from uopkit.tensor.composite import _GILES_CENTRAL, _GILES_TAIL
from uopkit.tensor.replay import replayed
from uopkit.tensor.series import _ERFC_Q, _ERFC_SPLIT, _erf_near_zero, _horner
from uopkit.tensor.special import (
    _BERNOULLI,
    _BESSEL_FAR,
    _BESSEL_SERIES_TERMS,
    _BESSEL_SERIES_UP_TO,
    _i1,
)
from uopkit.tensor.support import _with_derivative, _with_derivative_of, in_float32
from uopkit.uop.ops import UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2PI = math.sqrt(2 * math.pi)

# ---------------------------------------------------------------------------------------------------------------------
# erfcx and the normal distribution


def _exp_square(a: Tensor) -> Tensor:
    # exp(a**2) as exp(hi**2) * exp((a - hi)(a + hi)), hi = a rounded down to few bits: hi**2 is exact, where a**2
    # rounded would put an error of a**2 ulps into the result
    split = _ERFC_SPLIT[a.dtype]
    hi = (a * split).floor() * (1 / split)
    return (hi * hi).exp() * ((a - hi) * (a + hi)).exp()


def _erfcx_of_nonnegative(a: Tensor) -> Tensor:
    # exp(a**2) erfc(a) for a >= 0: below 1/2 from erf's series, beyond it erfc's fitted t Q(t) without its Gaussian
    # (t = 1 / (1 + a/2) -> 0 as a -> inf, where Q(0) = 1/(2 sqrt(pi)) is the asymptote's 1/(a sqrt(pi)))
    t = (1 + 0.5 * a).reciprocal()
    far = t * _horner(t, _ERFC_Q[a.dtype])
    near_a = a.minimum(0.5)
    near = (near_a * near_a).exp() * (1 - _erf_near_zero(near_a))
    return (a < 0.5).where(near, far)


def _erfcx(x: Tensor) -> Tensor:
    # below 0 erfcx(x) = 2 exp(x**2) - erfcx(-x): inf once exp(x**2) overflows, as torch
    a = x.abs()
    positive = _erfcx_of_nonnegative(a)
    return (x < 0).where(2 * _exp_square(a.minimum(1e3)) - positive, positive)


def _erf_near_zero_or_erf(x: Tensor) -> Tensor:
    return (x.abs() < 0.5).where(_erf_near_zero(x), x.erf())


def _ndtr(x: Tensor) -> Tensor:
    # from erfc of the tail's side, so the left tail keeps its relative accuracy (1 - ndtr(-x) would round to 0)
    far = (x.abs() * _SQRT_HALF).erfc() * 0.5
    return (x < 0).where(far, 1 - far)


def _log_ndtr(x: Tensor) -> Tensor:
    # left of -1 log(erfcx(-x/sqrt 2) / 2) - x**2/2 (no exp(-x**2/2) to underflow), else log1p(-erfc(x/sqrt 2) / 2)
    left = x.minimum(-1.0)
    tail = (_erfcx_of_nonnegative(-left * _SQRT_HALF) * 0.5).log() - left * left * 0.5
    right = x.maximum(-1.0)
    body = (-(right * _SQRT_HALF).erfc() * 0.5).log1p()
    return (x < -1).where(tail, body)


# the upper normal quantile for tiny q, t - N(t) / D(t) with t = sqrt(-2 log q): Abramowitz and Stegun 26.2.23's
# rational approximation (highest power first)
_AS_NUMERATOR = (0.010328, 0.802853, 2.515517)
_AS_DENOMINATOR = (0.001308, 0.189269, 1.432788, 1.0)


def _ndtri(p: Tensor) -> Tensor:
    """ndtri of p: solved on the left half for q = min(p, 1 - p) (1 - p is exact from 1/2 on) and reflected. A first
    guess from Giles' erfinv (its w = -log((1 - y)(1 + y)) taken as -log(4 q (1 - q)), accurate for tiny q) down to
    w = 16, beyond it (q < 3e-8) from Abramowitz and Stegun 26.2.23 (4.5e-4 absolute, and Giles' polynomials are
    fitted no farther); then Halley steps on ndtr(x) - q scaled by the density: (ndtr(x) - q) / phi(x) =
    sqrt(pi/2) erfcx(-x/sqrt 2) - sqrt(2 pi) exp(x**2/2 + log q), which neither underflows nor overflows down to q's
    smallest subnormal."""
    upper = p > 0.5
    q = upper.where(1 - p, p)
    inside = q > 0
    q_safe = inside.where(q, 0.25)
    log_q = q_safe.log()
    w = -(log_q + math.log(4) + (-q_safe).log1p())
    root = w.minimum(16.0).sqrt()
    giles = (w < 5).where(_horner(w - 2.5, _GILES_CENTRAL), _horner(root - 3, _GILES_TAIL))
    giles = giles * (2 * q_safe - 1) * math.sqrt(2)
    t = (-2 * log_q).sqrt()
    far = _horner(t, _AS_NUMERATOR) / _horner(t, _AS_DENOMINATOR) - t
    x = (w < 16).where(giles, far)
    for _ in range(2 if p.dtype == dtypes.float64 else 1):
        x = x.minimum(0.0)
        density = (-(x * x) * 0.5).exp() * (1 / _SQRT_2PI)
        # (in the middle as (erf(x/sqrt 2) / 2 - (q - 1/2)) / phi(x): q - 1/2 is exact, and no erfcx term to cancel)
        near = (_erf_near_zero_or_erf(x * _SQRT_HALF) * 0.5 - (q_safe - 0.5)) / density
        tail = math.sqrt(math.pi / 2) * _erfcx_of_nonnegative(-x * _SQRT_HALF) - _SQRT_2PI * (x * x * 0.5 + log_q).exp()
        u = (x > -1).where(near, tail)
        x = x - u / (1 + x * u * 0.5)
    x = upper.where(-x, x)
    x = (q == 0).where(upper.where(math.inf, -math.inf), x)
    return ((p < 0) | (p > 1) | p.isnan()).where(math.nan, x)


# ---------------------------------------------------------------------------------------------------------------------
# the exponentially scaled Bessel functions


def _scaled_bessel_of_abs(a: Tensor, order: int) -> Tensor:
    """exp(-a) I_order(a) for a >= 0, order 0 or 1: the power series times exp(-a) up to 8, beyond it the fitted
    G(8/a) / sqrt(a) of tensor/special.py's I0 and I1 without their exp(a) (0 at inf)."""
    dt = a.dtype
    near = a.minimum(_BESSEL_SERIES_UP_TO)
    t = near * near * 0.25
    terms = _BESSEL_SERIES_TERMS[dt]
    series = _horner(t, [1 / (math.factorial(k) * math.factorial(k + order)) for k in reversed(range(terms))])
    if order:
        series = series * (near * 0.5)
    far_a = a.maximum(_BESSEL_SERIES_UP_TO)
    far = _horner(_BESSEL_SERIES_UP_TO / far_a, _BESSEL_FAR[(order, dt)]) / far_a.sqrt()
    return (a <= _BESSEL_SERIES_UP_TO).where(series * (-near).exp(), far)


def _i0e(x: Tensor) -> Tensor:
    # even; its derivative is i1e(x) - sign(x) i0e(x)
    return _with_derivative_of(_scaled_bessel_of_abs(x.abs(), 0), x, lambda v: _i1e(v) - v.sign() * _i0e(v))


def _i1e(x: Tensor) -> Tensor:
    # odd; its derivative is i0e(x) - i1e(x) (sign(x) + 1/x), 1/2 at 0
    value = _scaled_bessel_of_abs(x.abs(), 1)
    return _with_derivative_of((x < 0).where(-value, value), x, _i1e_derivative)


def _i1e_derivative(x: Tensor) -> Tensor:
    zero = x == 0
    safe = zero.where(1.0, x)
    return zero.where(0.5, _i0e(safe) - _i1e(safe) * (safe.sign() + safe.reciprocal()))


# ---------------------------------------------------------------------------------------------------------------------
# the Hurwitz zeta function

# zeta(x, q) = sum of (q + k)^-x over k < _ZETA_SHIFT, then the Euler-Maclaurin tail at w = q + _ZETA_SHIFT:
# w^(1-x) / (x - 1) + w^-x / 2 + sum_j B_2j / (2j)! x (x+1) ... (x+2j-2) w^(-x-2j+1), _ZETA_EM_TERMS terms of it
# (float64's precision for x up to ~60; the terms grow with x, but so does the shift's share of the sum)
_ZETA_SHIFT, _ZETA_EM_TERMS = 9, 12


def _hurwitz_zeta(x: Tensor, q: Tensor) -> Tensor:
    """zeta(x, q) of float32 or float64 x and q of one shape, for q > 0; torch's answers elsewhere: inf at x = 1 and
    at q a whole number <= 0, NaN for x < 1 (and here for the other q < 0, see docs/semantics.md)."""
    ok = (q > 0) & (x > 1)
    qs, xs = ok.where(q, 1.0), ok.where(x, 2.0)
    total = qs.pow(-xs)
    for k in range(1, _ZETA_SHIFT):
        total = total + (qs + k).pow(-xs)
    w = qs + _ZETA_SHIFT
    w_x = w.pow(-xs)
    total = total + w_x * w / (xs - 1) + 0.5 * w_x
    # where w^-x underflows the tail is 0: its factors then take x = 2, as x's own (float32's from x ~ 400, float64's
    # from 1e15) overflow, and 0 * inf made the sum NaN
    xt = (w_x > 0).where(xs, 2.0)
    # the Euler-Maclaurin terms, each from the last: factor x (x+1) ... / w^(2j-1)
    inv_w2 = (w * w).reciprocal()
    factor = xt / w
    for j in range(1, _ZETA_EM_TERMS + 1):
        b = float(_BERNOULLI[j - 1] / math.factorial(2 * j))
        total = total + w_x * factor * b
        factor = factor * (xt + 2 * j - 1) * (xt + 2 * j) * inv_w2
    # (x < 1 is NaN before a pole at q, as torch's; a NaN x isn't)
    pole = (x == 1) | (x < 1).where(False, (q <= 0) & (q == q.floor()))
    # (q = +inf: inf * 0 in torch's tail, NaN)
    return pole.where(math.inf, (ok & (q < math.inf)).where(total, math.nan))


# ---------------------------------------------------------------------------------------------------------------------
# the methods


def _float_operands(self: Tensor, other: Any, op: str) -> tuple[Tensor, Tensor]:
    a, b = self._broadcasted(other, False, op, floats=True)
    if not dtypes.is_float(a.dtype):
        a, b = a._float(), b._float()
    return a, b


class TorchSpecialMixin:
    __slots__ = ()

    @replayed
    @in_float32
    def ndtr(self) -> Tensor:
        """The standard normal distribution's CDF, (1 + erf(x / sqrt 2)) / 2, as torch.special.ndtr; computed from
        erfc of |x| so the left tail is accurate in relative terms (ndtr(-30) = 4.9e-198 in float64). Ints and bools
        promote to float32. The gradient is the density exp(-x**2/2) / sqrt(2 pi).

        >>> round(Tensor([1.0]).ndtr().item(), 6)
        0.841345
        """
        x = self._float()
        return _with_derivative(_ndtr(x), x, (-(x * x) * 0.5).exp() * (1 / _SQRT_2PI))

    @replayed
    @in_float32
    def log_ndtr(self) -> Tensor:
        """log of the standard normal CDF, as torch.special.log_ndtr: finite far into the left tail (-800.9 at -40,
        -x**2/2 - log(-x sqrt(2 pi)) beyond) through erfcx, and -ndtr(-x) (no log of a rounded 1) on the right. The
        gradient is the density over the CDF, exp(-x**2/2 - log_ndtr(x)) / sqrt(2 pi), as torch's.

        >>> round(Tensor([-40.0]).log_ndtr().item(), 2)
        -804.61
        """
        x = self._float()
        out = _log_ndtr(x)
        return _with_derivative(out, x, (-(out + x * x * 0.5)).exp() * (1 / _SQRT_2PI))

    @replayed
    @in_float32
    def ndtri(self) -> Tensor:
        """The inverse of ndtr (the standard normal quantile), as torch.special.ndtri: -inf at 0, inf at 1, NaN
        outside [0, 1]. Giles' erfinv guess (its logarithm taken from p itself, accurate for tiny p) refined by Halley
        steps (two in float64, one in float32); the right half is the left one's reflection, so near 1 the accuracy
        is that of 1 - p (torch's too). The gradient is sqrt(2 pi) exp(ndtri(p)**2 / 2), as torch's.

        >>> round(Tensor([0.975]).ndtri().item(), 6)
        1.959964
        """
        p = self._float()
        out = _ndtri(p)
        return _with_derivative(out, p, (out * out * 0.5).exp() * _SQRT_2PI)

    @replayed
    @in_float32
    def erfcx(self) -> Tensor:
        """The scaled complementary error function exp(x**2) erfc(x), as torch.special.erfcx: accurate for large x
        (about 1 / (x sqrt(pi)), never exp(x**2) times an underflowed erfc), 0 at inf, inf once exp(x**2) overflows
        on the left. The gradient is 2 x erfcx(x) - 2 / sqrt(pi), as torch's.

        >>> round(Tensor([100.0]).erfcx().item(), 8)
        0.00564161
        """
        x = self._float()
        out = _erfcx(x)
        return _with_derivative(out, x, 2 * x * out - 2 / math.sqrt(math.pi))

    def xlog1py(self, other: Any) -> Tensor:
        """self * log1p(other), 0 where self is 0 (unless other is NaN), as torch.special.xlog1py; broadcast and
        promoted, ints and bools to a float. The gradients are torch's: xlog1py(grad, other) for self (0 where self is
        0 and other <= -1), grad * self / (1 + other) for other.

        >>> Tensor([0.0, 2.0]).xlog1py(Tensor([-1.0, 0.0])).tolist()
        [0.0, 0.0]
        """
        a, b = (t._float() for t in self._broadcasted(other, False, "xlog1py", floats=True))
        out = b.isnan().where(math.nan, (a == 0).where(0.0, a * b.log1p()))
        a_uop, b_uop = a.uop, b.uop
        inputs = (a_uop,) if a_uop is b_uop else (a_uop, b_uop)

        def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
            grad, x, y = Tensor(g), Tensor(a_uop), Tensor(b_uop)
            # (a zero incoming gradient stays 0 beside log1p(-1) = -inf, as torch's xlog1py(grad, y))
            scaled = y.isnan().where(math.nan, (grad == 0).where(0.0, grad * y.log1p()))
            dx = ((x == 0) & (y <= -1)).where(0.0, scaled)
            dy = grad * x / (y + 1)
            if len(inputs) == 1:
                return ((dx + dy).uop,)
            return tuple(d.uop if w else None for d, w in zip((dx, dy), wanted, strict=True))

        set_gradient(out.uop, inputs, rule)
        return out

    @replayed
    @in_float32
    def entr(self) -> Tensor:
        """The elementwise entropy -x log(x): 0 at 0, -inf for x < 0, NaN at NaN, as torch.special.entr; ints and
        bools promote to float32. The gradient is -(1 + log x), as torch's (inf at 0, NaN below).

        >>> round(Tensor([0.5]).entr().item(), 6)
        0.346574
        """
        x = self._float()
        out = x.isnan().where(x, (x > 0).where(-x * x.log(), (x == 0).where(0.0, -math.inf)))
        return _with_derivative(out, x, -(1 + x.log()))

    @replayed
    @in_float32
    def i0e(self) -> Tensor:
        """exp(-|x|) I0(x), as torch.special.i0e: never overflows (the fitted tail of `i0` without its exp), 0 at
        +-inf. The gradient is i1e(x) - sign(x) i0e(x).

        >>> round(Tensor([1.0]).i0e().item(), 6)
        0.46576
        """
        return _i0e(self._float())

    @replayed
    @in_float32
    def i1(self) -> Tensor:
        """The modified Bessel function of the first kind of order 1, as torch.special.i1: odd, computed as `i0` (a
        power series up to |x| = 8, exp(|x|) / sqrt(|x|) times a fitted polynomial beyond). The gradient is
        I0(x) - I1(x) / x (1/2 at 0).

        >>> round(Tensor([1.0]).i1().item(), 6)
        0.565159
        """
        return _i1(self._float())

    @replayed
    @in_float32
    def i1e(self) -> Tensor:
        """exp(-|x|) I1(x), as torch.special.i1e: odd, 0 at +-inf. The gradient is i0e(x) - i1e(x) (sign(x) + 1/x)
        (1/2 at 0).

        >>> round(Tensor([1.0]).i1e().item(), 6)
        0.20791
        """
        return _i1e(self._float())

    def multigammaln(self, p: int) -> Tensor:
        """torch.special.multigammaln: the multivariate log-gamma function, `mvlgamma`.

        >>> round(Tensor([2.5]).multigammaln(2).item(), 6)
        0.857048
        """
        return self.mvlgamma(p)

    def zeta(self, other: Any) -> Tensor:
        """The Hurwitz zeta function sum over k >= 0 of (k + q)^-x, with x = self and q = other, as
        torch.special.zeta: broadcast and promoted (ints to a float). Nine terms of the sum and an Euler-Maclaurin
        tail, a fixed graph. torch's answers at the edges: inf at x = 1 and at q a whole number <= 0, NaN for x < 1;
        for q < 0 otherwise (torch sums from there for a whole x) NaN. The gradient with respect to q is
        -x zeta(x + 1, q); with respect to x backward raises NotImplementedError, as torch.

        >>> round(Tensor([2.0]).zeta(1.0).item(), 6)
        1.644934
        """
        x, q = _float_operands(self, other, "zeta")
        if x.dtype in dtypes.halves:
            out = _hurwitz_zeta(x.float(), q.float()).cast(x.dtype)
        else:
            out = _hurwitz_zeta(x, q)
        x_uop, q_uop = x.uop, q.uop

        def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
            if wanted[0]:
                raise NotImplementedError(
                    "the derivative of zeta with respect to its input x (self) is not implemented"
                )
            if len(wanted) == 1:
                return (None,)
            x_, q_ = Tensor(x_uop), Tensor(q_uop)
            return (None, (g * (-x_ * (x_ + 1).zeta(q_)).cast(g.dtype).uop) if wanted[1] else None)

        if x_uop is q_uop:
            set_gradient(out.uop, (x_uop,), rule)
        else:
            set_gradient(out.uop, (x_uop, q_uop), rule)
        return out
