"""The location-scale and simple continuous families: Normal, Uniform, Exponential, Laplace, Cauchy, HalfNormal,
HalfCauchy, Gumbel, Weibull, Pareto, Kumaraswamy. All have reparameterized draws (a parameter-free draw pushed through a
map that is differentiable in the parameters). torch builds the last six from transforms of a base distribution; here
each is written out (HalfNormal and HalfCauchy keep torch's `base_dist`). LogNormal is a TransformedDistribution, as
torch's (distributions/transformed_distribution.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from uopkit.distributions import constraints
from uopkit.distributions.distribution import (
    LOG_2PI,
    Distribution,
    as_tensor,
    broadcast_all,
    open_uniform,
    standard_normal,
)
from uopkit.tensor import Tensor

__all__ = [
    "Cauchy",
    "Exponential",
    "Gumbel",
    "HalfCauchy",
    "HalfNormal",
    "Kumaraswamy",
    "Laplace",
    "Normal",
    "Pareto",
    "Uniform",
    "Weibull",
]

EULER_GAMMA = 0.5772156649015329
LOG_2 = math.log(2)


class _LocationScale(Distribution):
    # a family of `loc` and a positive `scale` (broadcast together), reparameterized, centred on loc
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True
    _expanded = ("loc", "scale")

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc


class Normal(_LocationScale):
    """N(loc, scale**2); rsample is loc + scale * eps with eps ~ N(0, 1).

    >>> from uopkit import Tensor
    >>> round(Normal(0.0, 1.0).log_prob(Tensor(0.0)).item(), 4)
    -0.9189
    """

    @property
    def stddev(self) -> Tensor:
        return self.scale

    @property
    def variance(self) -> Tensor:
        return self.scale * self.scale

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        return self.loc + self.scale * standard_normal(self._extended_shape(sample_shape), self.loc)

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        return -((value - self.loc) ** 2) / (2 * self.variance) - self.scale.log() - 0.5 * LOG_2PI

    def cdf(self, value: Any) -> Tensor:
        value = self._checked(value)
        # sqrt(2) divides the standardized value, so it is taken in the value's dtype: a float64 value with
        # float32 parameters (Normal(0.0, 1.0)) keeps float64's precision, as torch's
        return 0.5 * (1 + ((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)).erf())

    def icdf(self, value: Any) -> Tensor:
        return self.loc + self.scale * (2 * value - 1).erfinv() * math.sqrt(2)

    def entropy(self) -> Tensor:
        return 0.5 + 0.5 * LOG_2PI + self.scale.log()


class Uniform(Distribution):
    """U[low, high); rsample is low + (high - low) * u.

    >>> from uopkit import Tensor
    >>> Uniform(0.0, 4.0).cdf(Tensor(1.0)).item()
    0.25
    """

    has_rsample = True
    _expanded = ("low", "high")

    def __init__(self, low: Any, high: Any, validate_args: bool | None = None):
        self.low, self.high = broadcast_all(low, high)
        super().__init__(self.low.shape, (), validate_args)

    @property
    def arg_constraints(self) -> dict[str, constraints.Constraint]:  # type: ignore[override]
        return {"low": constraints.less_than(self.high), "high": constraints.greater_than(self.low)}

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.half_open_interval(self.low, self.high)

    @property
    def mean(self) -> Tensor:
        return (self.high + self.low) / 2

    @property
    def mode(self) -> Tensor:
        # every point of the interval is a mode: NaN, as torch
        return self.high * math.nan

    @property
    def stddev(self) -> Tensor:
        return (self.high - self.low) / math.sqrt(12)

    @property
    def variance(self) -> Tensor:
        return (self.high - self.low) ** 2 / 12

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        u = Tensor.rand(*self._extended_shape(sample_shape), dtype=self.low.dtype, device=self.low.device)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        inside = (value >= self.low) & (value < self.high)
        return inside.where(-(self.high - self.low).log(), -math.inf)

    def cdf(self, value: Any) -> Tensor:
        value = self._checked(value)
        return ((value - self.low) / (self.high - self.low)).clamp(0, 1)

    def icdf(self, value: Any) -> Tensor:
        return value * (self.high - self.low) + self.low

    def entropy(self) -> Tensor:
        return (self.high - self.low).log()


class Exponential(Distribution):
    """Exponential(rate): density rate * exp(-rate * x) on x >= 0; rsample is -log(u) / rate."""

    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _expanded = ("rate",)

    def __init__(self, rate: Any, validate_args: bool | None = None):
        (self.rate,) = broadcast_all(rate)
        super().__init__(self.rate.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.rate.reciprocal()

    @property
    def mode(self) -> Tensor:
        return self.rate * 0

    @property
    def stddev(self) -> Tensor:
        return self.rate.reciprocal()

    @property
    def variance(self) -> Tensor:
        return self.rate.reciprocal() ** 2

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        return -open_uniform(self._extended_shape(sample_shape), self.rate).log() / self.rate

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        return self.rate.log() - self.rate * value

    def cdf(self, value: Any) -> Tensor:
        value = self._checked(value)
        return 1 - (-self.rate * value).exp()

    def icdf(self, value: Any) -> Tensor:
        return -(-value).log1p() / self.rate

    def entropy(self) -> Tensor:
        return 1.0 - self.rate.log()


class Laplace(_LocationScale):
    """Laplace(loc, scale): density exp(-|x - loc| / scale) / (2 scale); rsample inverts the cdf at a draw."""

    @property
    def stddev(self) -> Tensor:
        return math.sqrt(2) * self.scale

    @property
    def variance(self) -> Tensor:
        return 2 * self.scale**2

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        # u in (-1, 1): its sign picks the side, |u| the quantile within it
        shape, like = self._extended_shape(sample_shape), self.loc
        u = (2 * Tensor.rand(*shape, dtype=like.dtype, device=like.device) - 1).clamp(min=-1 + 2**-23)
        return self.loc - self.scale * u.sign() * (-u.abs()).log1p()

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        return -(2 * self.scale).log() - (value - self.loc).abs() / self.scale

    def cdf(self, value: Any) -> Tensor:
        value = self._checked(value)
        z = value - self.loc
        return 0.5 - 0.5 * z.sign() * (-z.abs() / self.scale).expm1()

    def icdf(self, value: Any) -> Tensor:
        term = value - 0.5
        return self.loc - self.scale * term.sign() * (-2 * term.abs()).log1p()

    def entropy(self) -> Tensor:
        return 1 + (2 * self.scale).log()


class Cauchy(_LocationScale):
    """Cauchy(loc, scale): density 1 / (pi scale (1 + z^2)) with z = (x - loc) / scale; rsample is
    loc + scale * tan(pi (u - 1/2)). Its mean is NaN and its variance infinite, as torch.

    >>> from uopkit import Tensor
    >>> Cauchy(0.0, 1.0).cdf(Tensor(1.0)).item()
    0.75
    """

    @property
    def mean(self) -> Tensor:
        return self.loc * math.nan

    @property
    def variance(self) -> Tensor:
        return (self.loc * 0).add(math.inf)

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        shape, like = self._extended_shape(sample_shape), self.loc
        u = Tensor.rand(*shape, dtype=like.dtype, device=like.device)
        return self.loc + self.scale * (math.pi * (u - 0.5)).tan()

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        z = (value - self.loc) / self.scale
        return -math.log(math.pi) - self.scale.log() - (z * z).log1p()

    def cdf(self, value: Any) -> Tensor:
        value = self._checked(value)
        return ((value - self.loc) / self.scale).atan() / math.pi + 0.5

    def icdf(self, value: Any) -> Tensor:
        return self.loc + self.scale * (math.pi * (as_tensor(value, self.loc) - 0.5)).tan()

    def entropy(self) -> Tensor:
        return math.log(4 * math.pi) + self.scale.log()


class _Folded(Distribution):
    # |X| for X of a family centred on 0 with a positive `scale`: the density doubles on x >= 0, the cdf is 2F - 1
    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _expanded = ("scale",)
    _base: type[_LocationScale]

    def __init__(self, scale: Any, validate_args: bool | None = None):
        (self.scale,) = broadcast_all(scale)
        super().__init__(self.scale.shape, (), validate_args)

    @property
    def base_dist(self) -> _LocationScale:
        return self._base(self.scale * 0, self.scale, validate_args=False)

    @property
    def mode(self) -> Tensor:
        return self.scale * 0

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        return self.base_dist.rsample(sample_shape).abs()

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        return (value >= 0).where(self.base_dist.log_prob(value) + LOG_2, -math.inf)

    def cdf(self, value: Any) -> Tensor:
        value = self._checked(value)
        return 2 * self.base_dist.cdf(value) - 1

    def icdf(self, value: Any) -> Tensor:
        return self.base_dist.icdf((as_tensor(value, self.scale) + 1) / 2)

    def entropy(self) -> Tensor:
        return self.base_dist.entropy() - LOG_2


class HalfNormal(_Folded):
    """|X| for X ~ N(0, scale**2) (torch's is a TransformedDistribution of Normal; same `scale` and `base_dist`).

    >>> from uopkit import Tensor
    >>> round(HalfNormal(1.0).log_prob(Tensor(0.0)).item(), 4)
    -0.2258
    """

    _base = Normal

    @property
    def mean(self) -> Tensor:
        return self.scale * math.sqrt(2 / math.pi)

    @property
    def variance(self) -> Tensor:
        return self.scale**2 * (1 - 2 / math.pi)


class HalfCauchy(_Folded):
    """|X| for X ~ Cauchy(0, scale); its mean and variance are infinite, as torch."""

    _base = Cauchy

    @property
    def mean(self) -> Tensor:
        return (self.scale * 0).add(math.inf)

    @property
    def variance(self) -> Tensor:
        return (self.scale * 0).add(math.inf)


class Gumbel(_LocationScale):
    """Gumbel(loc, scale): cdf exp(-exp(-(x - loc) / scale)); rsample is loc - scale * log(-log(u)).

    >>> from uopkit import Tensor
    >>> round(Gumbel(0.0, 1.0).cdf(Tensor(0.0)).item(), 4)
    0.3679
    """

    @property
    def mean(self) -> Tensor:
        return self.loc + self.scale * EULER_GAMMA

    @property
    def stddev(self) -> Tensor:
        return self.scale * (math.pi / math.sqrt(6))

    @property
    def variance(self) -> Tensor:
        return self.stddev**2

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        u = open_uniform(self._extended_shape(sample_shape), self.loc)
        return self.loc - self.scale * (-u.log()).log()

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        z = (value - self.loc) / self.scale
        return -(self.scale.log() + z + (-z).exp())

    def cdf(self, value: Any) -> Tensor:
        value = self._checked(value)
        return (-(-(value - self.loc) / self.scale).exp()).exp()

    def icdf(self, value: Any) -> Tensor:
        return self.loc - self.scale * (-as_tensor(value, self.loc).log()).log()

    def entropy(self) -> Tensor:
        return self.scale.log() + (1 + EULER_GAMMA)


class Weibull(Distribution):
    """Weibull(scale, concentration): cdf 1 - exp(-(x / scale)^k) on x > 0 with k = concentration; rsample is
    scale * E^(1/k) for E ~ Exponential(1). Its mode is 0 for k <= 1 (torch gives NaN or a wrong power there)."""

    arg_constraints = {"scale": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive
    has_rsample = True
    _expanded = ("scale", "concentration")

    def __init__(self, scale: Any, concentration: Any, validate_args: bool | None = None):
        self.scale, self.concentration = broadcast_all(scale, concentration)
        super().__init__(self.scale.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.scale * (1 + self.concentration.reciprocal()).lgamma().exp()

    @property
    def mode(self) -> Tensor:
        k = self.concentration
        inner = (k > 1).where(1 - k.reciprocal(), 1.0)
        return (k > 1).where(self.scale * (inner.log() / k).exp(), 0.0)

    @property
    def variance(self) -> Tensor:
        k = self.concentration
        first = (1 + k.reciprocal()).lgamma()
        return self.scale**2 * ((1 + 2 / k).lgamma().exp() - (2 * first).exp())

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        u = open_uniform(self._extended_shape(sample_shape), self.scale)
        return self.scale * ((-u.log()).log() / self.concentration).exp()

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        k, log_z = self.concentration, value.log() - self.scale.log()
        return k.log() - self.scale.log() + (k - 1) * log_z - (k * log_z).exp()

    def cdf(self, value: Any) -> Tensor:
        value = self._checked(value)
        return -(-(self.concentration * (value / self.scale).log()).exp()).expm1()

    def icdf(self, value: Any) -> Tensor:
        hazard = -(-as_tensor(value, self.scale)).log1p()
        return self.scale * (hazard.log() / self.concentration).exp()

    def entropy(self) -> Tensor:
        k = self.concentration
        return EULER_GAMMA * (1 - k.reciprocal()) + (self.scale / k).log() + 1


class Pareto(Distribution):
    """Pareto(scale, alpha): density alpha scale^alpha / x^(alpha+1) on x >= scale; rsample is scale * exp(E / alpha)
    for E ~ Exponential(1). The mean is infinite for alpha <= 1 and the variance for alpha <= 2, as torch."""

    arg_constraints = {"alpha": constraints.positive, "scale": constraints.positive}
    has_rsample = True
    _expanded = ("scale", "alpha")

    def __init__(self, scale: Any, alpha: Any, validate_args: bool | None = None):
        self.scale, self.alpha = broadcast_all(scale, alpha)
        super().__init__(self.scale.shape, (), validate_args)

    def _given(self) -> tuple[str, ...]:
        return ("alpha", "scale")

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.greater_than_eq(self.scale)

    @property
    def mean(self) -> Tensor:
        a = self.alpha.clamp(min=1)
        return a * self.scale / (a - 1)

    @property
    def mode(self) -> Tensor:
        return self.scale

    @property
    def variance(self) -> Tensor:
        a = self.alpha.clamp(min=2)
        return self.scale**2 * a / ((a - 1) ** 2 * (a - 2))

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        u = open_uniform(self._extended_shape(sample_shape), self.scale)
        return self.scale * (-u.log() / self.alpha).exp()

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        return self.alpha.log() + self.alpha * self.scale.log() - (self.alpha + 1) * value.log()

    def cdf(self, value: Any) -> Tensor:
        value = self._checked(value)
        return -(self.alpha * (self.scale / value).log()).expm1()

    def icdf(self, value: Any) -> Tensor:
        return self.scale * (-(-as_tensor(value, self.scale)).log1p() / self.alpha).exp()

    def entropy(self) -> Tensor:
        return (self.scale / self.alpha).log() + self.alpha.reciprocal() + 1


def _kumaraswamy_moment(a: Tensor, b: Tensor, n: int) -> Tensor:
    # E[X^n] = b B(1 + n/a, b)
    shifted = 1 + n / a
    return b * (shifted.lgamma() + b.lgamma() - (shifted + b).lgamma()).exp()


class Kumaraswamy(Distribution):
    """Kumaraswamy(concentration1 = a, concentration0 = b) on [0, 1]: cdf 1 - (1 - x^a)^b; rsample is
    (1 - u^(1/b))^(1/a). Its mode is ((a - 1) / (a b - 1))^(1/a) for a, b >= 1 (not both 1) and NaN otherwise (torch's
    is NaN everywhere but b = 1)."""

    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True
    _expanded = ("concentration1", "concentration0")

    def __init__(self, concentration1: Any, concentration0: Any, validate_args: bool | None = None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        super().__init__(self.concentration1.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return _kumaraswamy_moment(self.concentration1, self.concentration0, 1)

    @property
    def mode(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        ok = (a >= 1) & (b >= 1) & (a * b > 1)
        ratio = ok.where((a - 1) / (a * b - 1), 1.0)
        return ok.where((ratio.log() / a).exp(), math.nan)

    @property
    def variance(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        return _kumaraswamy_moment(a, b, 2) - self.mean**2

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        u = open_uniform(self._extended_shape(sample_shape), self.concentration1)
        return (-(u.log() / self.concentration0).expm1()).log().div(self.concentration1).exp()

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        a, b = self.concentration1, self.concentration0
        log_x = value.log()
        return a.log() + b.log() + (a - 1) * log_x + (b - 1) * (-(a * log_x).exp()).log1p()

    def cdf(self, value: Any) -> Tensor:
        value = self._checked(value)
        a, b = self.concentration1, self.concentration0
        return -(b * (-(a * value.log()).exp()).log1p()).expm1()

    def icdf(self, value: Any) -> Tensor:
        a, b = self.concentration1, self.concentration0
        inner = -((-as_tensor(value, a)).log1p() / b).expm1()
        return (inner.log() / a).exp()

    def entropy(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        harmonic = (b + 1).digamma() + EULER_GAMMA
        return (1 - b.reciprocal()) + (1 - a.reciprocal()) * harmonic - a.log() - b.log()
