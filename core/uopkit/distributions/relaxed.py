"""Continuous relaxations of the binary and categorical families, for reparameterized gradients through discrete
choices (VAEs with discrete latents, Gumbel-softmax policies): RelaxedBernoulli and RelaxedOneHotCategorical (the
Concrete / Gumbel-softmax distributions at a `temperature`, TransformedDistributions of LogitRelaxedBernoulli and
ExpRelaxedCategorical, as torch), and ContinuousBernoulli (the normalized density p^x (1-p)^(1-x) on [0, 1]).

>>> from uopkit import Tensor
>>> RelaxedOneHotCategorical(Tensor(0.5), logits=Tensor([0.0, 1.0, 2.0])).rsample((4,)).shape
(4, 3)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from uopkit.distributions import constraints
from uopkit.distributions.discrete import _Binary, _OverCategorical
from uopkit.distributions.distribution import Distribution, as_tensor, broadcast_all, clamp_probs
from uopkit.distributions.transformed_distribution import TransformedDistribution
from uopkit.distributions.transforms import ExpTransform, SigmoidTransform
from uopkit.tensor import Tensor, no_grad

__all__ = [
    "ContinuousBernoulli",
    "ExpRelaxedCategorical",
    "LogitRelaxedBernoulli",
    "RelaxedBernoulli",
    "RelaxedOneHotCategorical",
]


def _clamped_logit(probs: Tensor) -> Tensor:
    probs = clamp_probs(probs)
    return probs.log() - (-probs).log1p()


def _uniform(shape: Sequence[int], like: Tensor) -> Tensor:
    return Tensor.rand(*shape, dtype=like.dtype, device=like.device)


class LogitRelaxedBernoulli(_Binary):
    """The logit of a RelaxedBernoulli draw: (logit(u) + logit(probs)) / temperature for u ~ U(0, 1)."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real

    def __init__(self, temperature: Any, probs: Any = None, logits: Any = None, validate_args: bool | None = None):
        self._set_probs_logits(probs, logits)
        self.temperature = as_tensor(temperature, self.probs)
        super().__init__(self.probs.shape, (), validate_args)

    @property
    def param_shape(self) -> tuple[int, ...]:
        return self.probs.shape

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        probs = clamp_probs(self.probs.expand(shape))
        u = clamp_probs(_uniform(shape, probs))
        return (u.log() - (-u).log1p() + probs.log() - (-probs).log1p()) / self.temperature

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        diff = self.logits - value * self.temperature
        # log(1 + e^diff) as an exact softplus: finite where torch's log1p(exp(diff)) overflows
        return self.temperature.log() + diff - 2 * diff.softplus(threshold=math.inf)


class _RelaxedOverBase(TransformedDistribution):
    """A relaxed family as a transform of its base: the base's temperature, probs and logits."""

    base_dist: Any

    @property
    def temperature(self) -> Tensor:
        return self.base_dist.temperature

    @property
    def probs(self) -> Tensor:
        return self.base_dist.probs

    @property
    def logits(self) -> Tensor:
        return self.base_dist.logits


class RelaxedBernoulli(_RelaxedOverBase):
    """A draw in (0, 1) that tends to Bernoulli(probs) as `temperature` goes to 0: sigmoid of a LogitRelaxedBernoulli
    draw (a TransformedDistribution by SigmoidTransform, as torch), reparameterized.

    >>> from uopkit import Tensor
    >>> RelaxedBernoulli(Tensor(0.1), probs=Tensor([0.2, 0.9])).rsample((5,)).shape
    (5, 2)
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval  # type: ignore[assignment]
    has_rsample = True  # type: ignore[assignment]
    base_dist: LogitRelaxedBernoulli

    def __init__(self, temperature: Any, probs: Any = None, logits: Any = None, validate_args: bool | None = None):
        base = LogitRelaxedBernoulli(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base, SigmoidTransform(), validate_args)


class ExpRelaxedCategorical(_OverCategorical):
    """The log of a RelaxedOneHotCategorical draw: log_softmax((logits + g) / temperature) for g standard Gumbel
    draws, over the last axis (event_shape (K,))."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    # the draws lie on a (K-1)-dimensional submanifold of this
    support = constraints.real_vector
    has_rsample = True

    def __init__(
        self,
        temperature: Any,
        probs: Tensor | None = None,
        logits: Tensor | None = None,
        validate_args: bool | None = None,
    ):
        super().__init__(probs, logits, validate_args)
        self.temperature = as_tensor(temperature, self.logits)

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        u = clamp_probs(_uniform(self._extended_shape(sample_shape), self.logits))
        scores = (self.logits - (-u.log()).log()) / self.temperature
        return scores - scores.logsumexp(-1, keepdim=True)

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        k = self.event_shape[0]
        logits, value = broadcast_all(self.logits, value)
        # the density of log_softmax((logits + g) / t): (K-1)! t^(K-1) prod over categories, normalized
        log_scale = math.lgamma(k) + (k - 1) * self.temperature.log()
        score = logits - value * self.temperature
        return (score - score.logsumexp(-1, keepdim=True)).sum(-1) + log_scale


class RelaxedOneHotCategorical(_RelaxedOverBase):
    """Gumbel-softmax: softmax((logits + g) / temperature) for g standard Gumbel draws, a point of the simplex that
    tends to a OneHotCategorical draw as `temperature` goes to 0; reparameterized. A TransformedDistribution of
    ExpRelaxedCategorical by ExpTransform, as torch."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.simplex  # type: ignore[assignment]
    has_rsample = True  # type: ignore[assignment]
    base_dist: ExpRelaxedCategorical

    def __init__(
        self,
        temperature: Any,
        probs: Tensor | None = None,
        logits: Tensor | None = None,
        validate_args: bool | None = None,
    ):
        base = ExpRelaxedCategorical(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base, ExpTransform(), validate_args)


class ContinuousBernoulli(Distribution):
    """The density C(p) p^x (1-p)^(1-x) on [0, 1] (Loaiza-Ganem and Cunningham 2019), for VAEs of [0, 1]-valued
    data. `probs` is clamped to [eps, 1 - eps]; within `lims` of 1/2, where the closed forms divide 0 by 0, the log
    normalizer, mean and variance take their Taylor series and the cdf and icdf are the uniform's, as torch.
    rsample inverts the cdf at a uniform draw.

    >>> from uopkit import Tensor
    >>> round(ContinuousBernoulli(probs=Tensor(0.5)).log_prob(Tensor(0.3)).item(), 4)
    0.0
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True
    _expanded = ("probs", "logits")

    def __init__(
        self,
        probs: Any = None,
        logits: Any = None,
        lims: tuple[float, float] = (0.499, 0.501),
        validate_args: bool | None = None,
    ):
        if (probs is None) == (logits is None):
            raise ValueError(
                f"give probs or logits, exactly one of them (got {'both' if probs is not None else 'neither'})"
            )
        self._lims = lims
        if probs is not None:
            # the given probs are checked (by the base class), then clamped
            (self.probs,) = broadcast_all(probs)
            self._given_name = "probs"
        else:
            (self.logits,) = broadcast_all(logits)
            self.probs, self._given_name = clamp_probs(self.logits.sigmoid()), "logits"
        super().__init__(self.probs.shape, (), validate_args)
        if probs is not None:
            self.probs = clamp_probs(self.probs)
            self.logits = _clamped_logit(self.probs)

    def _given(self) -> tuple[str, ...]:
        return (self._given_name,)

    @property
    def param_shape(self) -> tuple[int, ...]:
        return self.probs.shape

    def _outside_unstable_region(self) -> Tensor:
        return (self.probs <= self._lims[0]) | (self.probs > self._lims[1])

    def _cut_probs(self) -> Tensor:
        return self._outside_unstable_region().where(self.probs, self._lims[0])

    def _cont_bern_log_norm(self) -> Tensor:
        # log C(p) = log(|log(1-p) - log p| / |1 - 2p|), its Taylor series in (p - 1/2)^2 near 1/2
        cut = self._cut_probs()
        below = (cut <= 0.5).where(cut, 0.0)
        above = (cut >= 0.5).where(cut, 1.0)
        log_ratio = ((-cut).log1p() - cut.log()).abs().log()
        log_norm = log_ratio - (cut <= 0.5).where((-2.0 * below).log1p(), (2.0 * above - 1.0).log())
        x = (self.probs - 0.5) ** 2
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return self._outside_unstable_region().where(log_norm, taylor)

    @property
    def mean(self) -> Tensor:
        cut = self._cut_probs()
        exact = cut / (2.0 * cut - 1.0) + 1.0 / ((-cut).log1p() - cut.log())
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x**2) * x
        return self._outside_unstable_region().where(exact, taylor)

    @property
    def variance(self) -> Tensor:
        cut = self._cut_probs()
        exact = cut * (cut - 1.0) / (1.0 - 2.0 * cut) ** 2 + 1.0 / ((-cut).log1p() - cut.log()) ** 2
        x = (self.probs - 0.5) ** 2
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return self._outside_unstable_region().where(exact, taylor)

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape).detach()

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        return self.icdf(_uniform(self._extended_shape(sample_shape), self.probs))

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        # -binary_cross_entropy_with_logits(logits, x) + log C (Tensor.softplus: its slope at 0 is 1/2, as torch's)
        return -(self.logits.softplus(threshold=math.inf) - self.logits * value) + self._cont_bern_log_norm()

    def cdf(self, value: Any) -> Tensor:
        value = self._checked(value)
        cut = self._cut_probs()
        exact = (cut.pow(value) * (1.0 - cut).pow(1.0 - value) + cut - 1.0) / (2.0 * cut - 1.0)
        inside = self._outside_unstable_region().where(exact, value)
        return (value <= 0.0).where(0.0, (value >= 1.0).where(1.0, inside))

    def icdf(self, value: Any) -> Tensor:
        value = as_tensor(value, self.probs)
        cut = self._cut_probs()
        exact = ((-cut + value * (2.0 * cut - 1.0)).log1p() - (-cut).log1p()) / (cut.log() - (-cut).log1p())
        return self._outside_unstable_region().where(exact, value)

    def entropy(self) -> Tensor:
        log_probs0, log_probs1 = (-self.probs).log1p(), self.probs.log()
        return self.mean * (log_probs0 - log_probs1) - self._cont_bern_log_norm() - log_probs0
