"""The location-scale and simple continuous families: Normal, Uniform, Exponential, Laplace, LogNormal. All have
reparameterized draws (a parameter-free draw pushed through a map that is differentiable in the parameters)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from uopkit.distributions import constraints
from uopkit.distributions.distribution import (
    LOG_2PI,
    Distribution,
    broadcast_all,
    open_uniform,
    standard_normal,
)
from uopkit.tensor import Tensor

__all__ = ["Exponential", "Laplace", "LogNormal", "Normal", "Uniform"]


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
        return 0.5 * (1 + ((value - self.loc) / (self.scale * math.sqrt(2))).erf())

    def icdf(self, value: Any) -> Tensor:
        return self.loc + self.scale * math.sqrt(2) * (2 * value - 1).erfinv()

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


class LogNormal(_LocationScale):
    """exp(X) for X ~ N(loc, scale**2) (torch's is a TransformedDistribution of Normal; this one is written out, with
    the same `loc`, `scale` and `base_dist`)."""

    support = constraints.positive

    @property
    def base_dist(self) -> Normal:
        return Normal(self.loc, self.scale, validate_args=False)

    @property
    def mean(self) -> Tensor:
        return (self.loc + self.scale**2 / 2).exp()

    @property
    def mode(self) -> Tensor:
        return (self.loc - self.scale**2).exp()

    @property
    def variance(self) -> Tensor:
        s2 = self.scale**2
        return s2.expm1() * (2 * self.loc + s2).exp()

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        return self.base_dist.rsample(sample_shape).exp()

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        y = value.log()
        return self.base_dist.log_prob(y) - y

    def cdf(self, value: Any) -> Tensor:
        value = self._checked(value)
        return self.base_dist.cdf(value.log())

    def icdf(self, value: Any) -> Tensor:
        return self.base_dist.icdf(value).exp()

    def entropy(self) -> Tensor:
        return self.base_dist.entropy() + self.loc
