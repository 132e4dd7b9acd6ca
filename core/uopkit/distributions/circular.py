"""VonMises, the circular distribution: log_prob, its circular mean and variance, and draws by Best and Fisher's
rejection method run on the device with a fixed number of rounds.

log I0 and log I1 (the modified Bessel functions in the normalizer and the variance) are computed here: below 15 as the
logsumexp of their power series' first 48 terms (the rest is below 1e-14 relative there), from 15 up as their
large-argument expansion to 12 terms (its error is below 1e-12 relative there). Both are plain Tensor graphs, so
gradients flow through them.

The sampler. With tau = 1 + sqrt(1 + 4 k^2), rho = 2 k / (tau + sqrt(2 tau)) (the usual (tau - sqrt(2 tau)) / (2 k),
rewritten so that it does not cancel for small k) and r = (1 + rho^2) / (2 rho): draw u1, u2, take z = cos(pi u1),
f = (1 + r z) / (r + z), c = k (r - f), and accept when c (2 - c) > u2 or log(c / u2) + 1 - c >= 0; the draw is then
loc +- acos(f), the sign from a third uniform, wrapped to [-pi, pi). Each round accepts with probability above 0.65,
and `ROUNDS` rounds run elementwise (the first accepted wins), so an element goes without one with probability below
0.35^40 < 1e-18; it then takes loc, the mode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from uopkit.distributions import constraints
from uopkit.distributions.distribution import Distribution, broadcast_all, open_uniform
from uopkit.tensor import Tensor, no_grad

__all__ = ["VonMises", "log_bessel_i"]

ROUNDS = 40
_SERIES_TERMS, _ASYMPTOTIC_TERMS, _SWITCH = 48, 12, 15.0


def log_bessel_i(x: Tensor, order: int) -> Tensor:
    """log I_order(x) for x > 0 and order 0 or 1, differentiable (see the module docstring)."""
    if order not in (0, 1):
        raise ValueError("log_bessel_i: order must be 0 or 1")
    small = x.clamp(max=_SWITCH)
    k = Tensor.arange(_SERIES_TERMS, device=x.device).cast(x.dtype).reshape(_SERIES_TERMS, *(1,) * x.ndim)
    terms = (2 * k + order) * (small / 2).log() - (k + 1).lgamma() - (k + order + 1).lgamma()
    series = terms.logsumexp(0)
    big = x.clamp(min=_SWITCH)
    mu, coefficient, total = 4 * order * order, 1.0, big * 0 + 1
    for j in range(1, _ASYMPTOTIC_TERMS):
        coefficient *= -(mu - (2 * j - 1) ** 2) / (8 * j)
        total = total + coefficient / big**j
    asymptotic = big - 0.5 * (2 * math.pi * big).log() + total.log()
    return (x < _SWITCH).where(series, asymptotic)


def _best_fisher(loc: Tensor, concentration: Tensor) -> Tensor:
    # VonMises(loc, concentration) draws of their (common) shape, no gradient
    k = concentration.detach().float()
    tau = 1 + (1 + 4 * k * k).sqrt()
    rho = 2 * k / (tau + (2 * tau).sqrt())
    r = (1 + rho * rho) / (2 * rho)
    shape = (ROUNDS, *k.shape)
    z = (math.pi * Tensor.rand(*shape, device=k.device)).cos()
    u2 = open_uniform(shape, k)
    f = (1 + r * z) / (r + z)
    c = k * (r - f)
    accept = (c * (2 - c) - u2 > 0) | ((c / u2).log() + 1 - c >= 0)
    cos_theta = f.clamp(-1, 1)
    draw = k * 0 + 1
    for i in reversed(range(ROUNDS)):
        draw = accept[i].where(cos_theta[i], draw)
    sign = (Tensor.rand(*k.shape, device=k.device) < 0.5).where(-1.0, 1.0)
    theta = sign * draw.acos() + loc.detach().float()
    return ((theta + math.pi) % (2 * math.pi) - math.pi).cast(loc.dtype)


class VonMises(Distribution):
    """The von Mises distribution of an angle: density exp(k cos(x - loc)) / (2 pi I0(k)) with k = concentration.
    `mean` (loc) and `variance` (1 - I1(k) / I0(k)) are the circular ones, as torch; values and loc may be any real,
    read modulo 2 pi; draws lie in [-pi, pi). No rsample, as torch.

    >>> from uopkit import Tensor
    >>> round(VonMises(0.0, 1.0).log_prob(Tensor(0.0)).item(), 4)
    -1.0737
    """

    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.real
    _expanded = ("loc", "concentration")

    def __init__(self, loc: Any, concentration: Any, validate_args: bool | None = None):
        self.loc, self.concentration = broadcast_all(loc, concentration)
        super().__init__(self.loc.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        k = self.concentration
        return 1 - (log_bessel_i(k, 1) - log_bessel_i(k, 0)).exp()

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        with no_grad():
            shape = self._extended_shape(sample_shape)
            return _best_fisher(self.loc.expand(shape), self.concentration.expand(shape))

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        k = self.concentration
        return k * (value - self.loc).cos() - math.log(2 * math.pi) - log_bessel_i(k, 0)
