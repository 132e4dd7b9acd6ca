"""Gamma, Chi2, StudentT, FisherSnedecor, Beta and Dirichlet: exact log_prob, entropy and moments; draws from Marsaglia
and Tsang's method run on the device with a fixed number of rounds, and reparameterized by implicit differentiation of
the cdf.

The sampler. For a >= 1, with d = a - 1/3 and c = 1 / sqrt(9 d): draw x ~ N(0, 1) and u ~ U(0, 1), take v = (1 + c x)^3,
accept d v when v > 0 and log u < x^2 / 2 + d - d v + d log v. For a < 1 it draws Gamma(a + 1) and multiplies by
u^(1/a). Each round accepts with probability at least 0.951 (the worst case, a + 1 = 1), and `ROUNDS` rounds run
elementwise (every element draws them all; the first accepted candidate wins), so an element goes without an accepted
candidate with probability below 0.049^12 < 2e-16; it then takes d, the candidate distribution's mode (near the
mean), as its draw.

The gradient. A draw x of Gamma(a, 1) is F^-1(u; a) for F the regularized incomplete gamma function P(a, x), so
dx/da = -(dF/da) / (dF/dx) at the draw, with dF/dx the density. dF/da has no closed form (torch approximates it with
series); here it is a central difference of P (of Q = 1 - P above the mean, where P is near 1) in float64, whose
igamma is accurate to ~1e-13, so the quotient is good to ~1e-7 relative. The rate enters as x / rate, exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from uopkit.distributions import constraints
from uopkit.distributions.distribution import (
    TINY,
    Distribution,
    broadcast_all,
    finfo_tiny_eps,
    lbeta,
    open_uniform,
    standard_normal,
    xlogy,
)
from uopkit.dtype import dtypes
from uopkit.tensor import Tensor
from uopkit.tensor.support import _with_derivative_of
from uopkit.uop.ops import Ops, UOp

__all__ = ["Beta", "Chi2", "Dirichlet", "FisherSnedecor", "Gamma", "StudentT"]

ROUNDS = 12


def _marsaglia_tsang(alpha: Tensor, detach: bool = True) -> Tensor:
    # Gamma(alpha, 1) draws of alpha's shape, no gradient. `detach=False`: for a graph given its gradient with respect
    # to alpha directly (standard_gamma_rsample), whose walk skips these ops; alpha stays a visible ancestor of the
    # draws, so a backward that puts a realized alpha (one a distribution's validation read) back as the graph that
    # computed it rebuilds the draws over that graph, and the gradient reaches what alpha was computed from
    a = (alpha.detach() if detach else alpha).float()
    boost = a < 1
    a1 = boost.where(a + 1, a)
    d = a1 - 1 / 3
    c = (9 * d).rsqrt()
    shape = (ROUNDS, *a.shape)
    x = Tensor.randn(*shape, device=a.device)
    u = open_uniform(shape, a)
    v = (1 + c * x) ** 3
    accept = (v > 0) & (u.log() < 0.5 * x * x + d - d * v + d * v.clamp(min=TINY).log())
    candidates = d * v
    draw = d
    # the first accepted round wins: fold from the last round to the first
    for r in reversed(range(ROUNDS)):
        draw = accept[r].where(candidates[r], draw)
    boost_factor = (open_uniform(a.shape, a).log() / a).exp()
    return (boost.where(draw * boost_factor, draw)).clamp(min=TINY).cast(alpha.dtype)


def _dx_dalpha(alpha: Tensor, x: Tensor) -> Tensor:
    # the implicit reparameterization gradient d x / d alpha of a Gamma(alpha, 1) draw x (see the module docstring)
    a, v = alpha.detach().cast(dtypes.float64), x.detach().cast(dtypes.float64)
    h = 1e-4 * a.clamp(min=1e-2)
    upper = v > a
    # dP/da: from P below the mean, from -Q above it (where P rounds near 1)
    d_lower = ((a + h).igamma(v) - (a - h).igamma(v)) / (2 * h)
    d_upper = -((a + h).igammac(v) - (a - h).igammac(v)) / (2 * h)
    d_cdf = upper.where(d_upper, d_lower)
    log_density = (a - 1) * v.log() - v - a.lgamma()
    return (-d_cdf / log_density.exp()).cast(alpha.dtype)


def standard_gamma_rsample(alpha: Tensor) -> Tensor:
    """Gamma(alpha, 1) draws of alpha's shape whose gradient with respect to alpha is the implicit one."""
    x = _marsaglia_tsang(alpha, detach=False).uop
    # the derivative (an igamma graph in float64) is built only when a backward pass asks for it. The rule is given to
    # a node over the draw, not the draw itself: a rule holding its own node would keep its entry (and the draw) alive
    # for good
    value = Tensor(UOp(Ops.RESHAPE, x.dtype, (x,), x.shape))
    return _with_derivative_of(value, alpha, lambda a: _dx_dalpha(a, Tensor(x)))


def _within_open_unit(x: Tensor) -> Tensor:
    # a normalized draw (Dirichlet's, Beta's) kept within [tiny, 1 - eps / 2] of its dtype, as torch's: g1 / (g1 + g0)
    # rounds to exactly 1 (or 0) where one Gamma draw dwarfs the other (a Beta(0.4, 0.4) draw in ~1 of 1500), and
    # log_prob is infinite there. The clamp moves only those values, to their nearest neighbour (exactly: x + (c - x)
    # is c there), and passes the gradient through unchanged
    tiny, eps = finfo_tiny_eps(x.dtype)
    held = x.detach()
    return x + (held.clamp(tiny, 1 - eps / 2) - held)


class Gamma(Distribution):
    """Gamma(concentration, rate): density rate^a x^(a-1) e^(-rate x) / Gamma(a) on x > 0.

    >>> from uopkit import Tensor
    >>> round(Gamma(2.0, 1.0).log_prob(Tensor(1.0)).item(), 4)
    -1.0
    """

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _expanded = ("concentration", "rate")

    def __init__(self, concentration: Any, rate: Any, validate_args: bool | None = None):
        self.concentration, self.rate = broadcast_all(concentration, rate)
        super().__init__(self.concentration.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.concentration / self.rate

    @property
    def mode(self) -> Tensor:
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self) -> Tensor:
        return self.concentration / self.rate**2

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        return standard_gamma_rsample(self.concentration.expand(shape)) / self.rate.expand(shape)

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        a, r = self.concentration, self.rate
        return xlogy(a, r) + xlogy(a - 1, value) - r * value - a.lgamma()

    def cdf(self, value: Any) -> Tensor:
        value = self._checked(value)
        return self.concentration.igamma(self.rate * value)

    def entropy(self) -> Tensor:
        a = self.concentration
        return a - self.rate.log() + a.lgamma() + (1 - a) * a.digamma()


class Dirichlet(Distribution):
    """Dirichlet(concentration) on the simplex of the last axis; draws are normalized Gamma draws (reparameterized
    through them)."""

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True
    _expanded = ("concentration",)

    def __init__(self, concentration: Tensor, validate_args: bool | None = None):
        if not isinstance(concentration, Tensor) or concentration.ndim < 1:
            raise ValueError(
                f"Dirichlet: concentration needs a last dim of categories (at least 1-D), got shape "
                f"{getattr(concentration, 'shape', type(concentration).__name__)}"
            )
        self.concentration = concentration
        super().__init__(concentration.shape[:-1], concentration.shape[-1:], validate_args)

    @property
    def mean(self) -> Tensor:
        return self.concentration / self.concentration.sum(-1, keepdim=True)

    @property
    def mode(self) -> Tensor:
        a = self.concentration
        excess = (a - 1).clamp(min=0)
        inner = excess / excess.sum(-1, keepdim=True)
        # every concentration below 1: torch's answer is the first vertex (a one-hot of the argmax of NaNs)
        vertex = Tensor.arange(a.shape[-1], device=a.device).cast(a.dtype) == 0
        return (a < 1).all(-1, keepdim=True).where(vertex, inner)

    @property
    def variance(self) -> Tensor:
        a = self.concentration
        a0 = a.sum(-1, keepdim=True)
        return a * (a0 - a) / (a0**2 * (a0 + 1))

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        g = standard_gamma_rsample(self.concentration.expand(self._extended_shape(sample_shape)))
        return _within_open_unit(g / g.sum(-1, keepdim=True))

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        a = self.concentration
        return xlogy(a - 1, value).sum(-1) + a.sum(-1).lgamma() - a.lgamma().sum(-1)

    def entropy(self) -> Tensor:
        a = self.concentration
        k = a.shape[-1]
        a0 = a.sum(-1)
        log_b = a.lgamma().sum(-1) - a0.lgamma()
        return log_b + (a0 - k) * a0.digamma() - ((a - 1) * a.digamma()).sum(-1)


class Beta(Distribution):
    """Beta(concentration1, concentration0) on [0, 1]: density x^(a-1) (1-x)^(b-1) / B(a, b) with a =
    concentration1, b = concentration0; draws are g1 / (g1 + g0) for Gamma draws g1, g0 (reparameterized)."""

    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True
    _expanded = ("concentration1", "concentration0")

    def __init__(self, concentration1: Any, concentration0: Any, validate_args: bool | None = None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        super().__init__(self.concentration1.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self) -> Tensor:
        # Dirichlet's mode of (a, b), first coordinate, as torch
        a, b = self.concentration1, self.concentration0
        excess_a, excess_b = (a - 1).clamp(min=0), (b - 1).clamp(min=0)
        return ((a < 1) & (b < 1)).where(1.0, excess_a / (excess_a + excess_b))

    @property
    def variance(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        total = a + b
        return a * b / (total**2 * (total + 1))

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        g1 = standard_gamma_rsample(self.concentration1.expand(shape))
        g0 = standard_gamma_rsample(self.concentration0.expand(shape))
        return _within_open_unit(g1 / (g1 + g0))

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        a, b = self.concentration1, self.concentration0
        return xlogy(a - 1, value) + xlogy(b - 1, 1 - value) - lbeta(a, b)

    def entropy(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        total = a + b
        return lbeta(a, b) - (a - 1) * a.digamma() - (b - 1) * b.digamma() + (total - 2) * total.digamma()


class Chi2(Gamma):
    """Chi2(df): Gamma(df / 2, rate 1/2), with `df` its parameter (torch's subclass of Gamma).

    >>> Chi2(4.0).mean.item()
    4.0
    """

    arg_constraints = {"df": constraints.positive}

    def __init__(self, df: Any, validate_args: bool | None = None):
        (df,) = broadcast_all(df)
        super().__init__(0.5 * df, 0.5, validate_args)

    @property
    def df(self) -> Tensor:
        return self.concentration * 2


class StudentT(Distribution):
    """Student's t with `df` degrees of freedom, shifted by `loc` and scaled by `scale`; rsample is
    loc + scale * X / sqrt(Z / df) with X ~ N(0, 1) and Z ~ Chi2(df) (reparameterized through Z's implicit gradient).
    The mean is NaN for df <= 1; the variance infinite for 1 < df <= 2 and NaN for df <= 1, as torch.

    >>> from uopkit import Tensor
    >>> round(StudentT(1.0).log_prob(Tensor(0.0)).item(), 4)
    -1.1447
    """

    arg_constraints = {"df": constraints.positive, "loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True
    _expanded = ("df", "loc", "scale")

    def __init__(self, df: Any, loc: Any = 0.0, scale: Any = 1.0, validate_args: bool | None = None):
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        super().__init__(self.df.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return (self.df > 1).where(self.loc, math.nan)

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        df = self.df
        finite = self.scale**2 * df / (df - 2).clamp(min=TINY)
        return (df > 2).where(finite, (df > 1).where(math.inf, math.nan))

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        x = standard_normal(shape, self.df)
        chi2 = 2 * standard_gamma_rsample(0.5 * self.df.expand(shape))
        return self.loc + self.scale * x * (chi2 / self.df).rsqrt()

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        df = self.df
        y = (value - self.loc) / self.scale
        log_norm = self.scale.log() + 0.5 * df.log() + lbeta(0.5 * df, df * 0 + 0.5)
        return -0.5 * (df + 1) * (y * y / df).log1p() - log_norm

    def entropy(self) -> Tensor:
        df = self.df
        half, half_up = 0.5 * df, 0.5 * (df + 1)
        return (
            self.scale.log()
            + half_up * (half_up.digamma() - half.digamma())
            + 0.5 * df.log()
            + lbeta(half, df * 0 + 0.5)
        )


class FisherSnedecor(Distribution):
    """F(df1, df2): (X1 / df1) / (X2 / df2) for X1 ~ Chi2(df1), X2 ~ Chi2(df2), drawn as the ratio of Gamma(df/2,
    rate df) draws (reparameterized, each clamped to tiny as torch). The mean is NaN for df2 <= 2, the variance for
    df2 <= 4 and the mode for df1 <= 2, as torch.

    >>> FisherSnedecor(3.0, 6.0).mean.item()
    1.5
    """

    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support = constraints.positive
    has_rsample = True
    _expanded = ("df1", "df2")

    def __init__(self, df1: Any, df2: Any, validate_args: bool | None = None):
        self.df1, self.df2 = broadcast_all(df1, df2)
        super().__init__(self.df1.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        df2 = self.df2
        return (df2 > 2).where(df2 / (df2 - 2), math.nan)

    @property
    def mode(self) -> Tensor:
        df1, df2 = self.df1, self.df2
        return (df1 > 2).where((df1 - 2) / df1 * df2 / (df2 + 2), math.nan)

    @property
    def variance(self) -> Tensor:
        df1, df2 = self.df1, self.df2
        finite = 2 * df2**2 * (df1 + df2 - 2) / (df1 * (df2 - 2) ** 2 * (df2 - 4))
        return (df2 > 4).where(finite, math.nan)

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        tiny = finfo_tiny_eps(self.df1.dtype)[0]
        x1 = standard_gamma_rsample(0.5 * self.df1.expand(shape)) / self.df1.expand(shape)
        x2 = standard_gamma_rsample(0.5 * self.df2.expand(shape)) / self.df2.expand(shape)
        return (x1 / x2.clamp(min=tiny)).clamp(min=tiny)

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        half1, half2, ratio = 0.5 * self.df1, 0.5 * self.df2, self.df1 / self.df2
        log_norm = (half1 + half2).lgamma() - half1.lgamma() - half2.lgamma()
        return log_norm + half1 * ratio.log() + (half1 - 1) * value.log() - (half1 + half2) * (ratio * value).log1p()
