"""The discrete families: Bernoulli, Categorical, OneHotCategorical, Multinomial, Geometric, Binomial, NegativeBinomial,
Poisson. Each but Poisson takes `probs` or `logits` (exactly one; the other is derived, lazily as every Tensor here), as
torch.

Poisson draws run on the device with a fixed amount of work per element: below rate 10 they invert the cdf over the
counts 0 .. 63 (the mass above 63 is below 1e-25 there); from 10 up they take Hormann's transformed rejection (PTRS),
`POISSON_ROUNDS` rounds elementwise, the first accepted one winning (each accepts with probability above 0.89, so an
element goes without one with probability below 1e-15; it then takes floor(rate), the mode).

Binomial draws likewise do work that doesn't grow with total_count: they draw the count of the rarer outcome (q =
min(p, 1 - p)). Below mean n q = 10 they invert the cdf over 0 .. 63, a table built once per parameter element; from 10
up they take Hormann's BTRS, `BINOMIAL_ROUNDS` rounds elementwise (each rejects with probability below 0.3, so an
element goes without an accepted one with probability below 1e-15 and takes the mode).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from uopkit.distributions import constraints
from uopkit.distributions.distribution import (
    Distribution,
    all_true,
    broadcast_all,
    clamp_probs,
    open_uniform,
    xlogy,
)
from uopkit.distributions.gamma import _marsaglia_tsang
from uopkit.dtype import dtypes
from uopkit.tensor import Tensor, no_grad

__all__ = [
    "Bernoulli",
    "Binomial",
    "Categorical",
    "Geometric",
    "Multinomial",
    "NegativeBinomial",
    "OneHotCategorical",
    "OneHotCategoricalStraightThrough",
    "Poisson",
]

# probabilities are clamped to [eps, 1 - eps] of their dtype before their logits are taken (clamp_probs), and -inf
# logits to float32's most negative value in entropies (0 * -inf would be NaN), as torch
MIN_REAL = -3.4028234663852886e38
POISSON_ROUNDS, POISSON_TABLE = 16, 64
BINOMIAL_ROUNDS, BINOMIAL_TABLE, BINOMIAL_MIN_MEAN = 28, 64, 10.0


def probs_to_logits(probs: Tensor, is_binary: bool = False) -> Tensor:
    """torch's probs_to_logits: log-odds (is_binary) or log-probabilities of probs clamped to the eps of their dtype."""
    p = clamp_probs(probs)
    return p.log() - (-p).log1p() if is_binary else p.log()


def _softplus(x: Tensor) -> Tensor:
    # log(1 + e^x) without overflow
    # (maximum: slope 1/2 at 0, as torch's)
    return x.maximum(0) + (-x.abs()).exp().log1p()


def _bce_with_logits(logits: Tensor, target: Tensor) -> Tensor:
    return _softplus(logits) - logits * target


def _one_of(probs: Any, logits: Any) -> None:
    if (probs is None) == (logits is None):
        raise ValueError(
            f"give probs or logits, exactly one of them (got {'both' if probs is not None else 'neither'})"
        )


class _Binary(Distribution):
    # the Bernoulli-trial families: a probs/logits pair of one broadcast shape
    _expanded = ("probs", "logits")

    def _set_probs_logits(self, probs: Any, logits: Any, *others: Any) -> tuple[Tensor, ...]:
        _one_of(probs, logits)
        if probs is not None:
            self.probs, *rest = broadcast_all(probs, *others)
            self.logits, self._given_name = probs_to_logits(self.probs, is_binary=True), "probs"
        else:
            self.logits, *rest = broadcast_all(logits, *others)
            self.probs, self._given_name = self.logits.sigmoid(), "logits"
        return tuple(rest)

    def _given(self) -> tuple[str, ...]:
        return (self._given_name,)


class Bernoulli(_Binary):
    """1 with probability `probs` (or sigmoid(`logits`)), else 0.

    >>> from uopkit import Tensor
    >>> round(Bernoulli(probs=0.25).log_prob(Tensor(1.0)).item(), 4)
    -1.3863
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: bool | None = None):
        self._set_probs_logits(probs, logits)
        super().__init__(self.probs.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def mode(self) -> Tensor:
        p = self.probs
        return (p == 0.5).where(float("nan"), (p > 0.5).cast(p.dtype))

    @property
    def variance(self) -> Tensor:
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        with no_grad():
            p = self.probs.detach()
            u = Tensor.rand(*self._extended_shape(sample_shape), dtype=p.dtype, device=p.device)
            return (u < p).cast(p.dtype)

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        return -_bce_with_logits(self.logits, value)

    def entropy(self) -> Tensor:
        return _bce_with_logits(self.logits, self.probs)

    def enumerate_support(self, expand: bool = True) -> Tensor:
        values = Tensor([0.0, 1.0], dtype=self.probs.dtype, device=self.probs.device).reshape(
            2, *(1,) * len(self.batch_shape)
        )
        return values.expand((2, *self.batch_shape)) if expand else values


class Geometric(_Binary):
    """The number of failures before the first success of Bernoulli(`probs`) trials: 0, 1, 2, ..."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: bool | None = None):
        self._set_probs_logits(probs, logits)
        super().__init__(self.probs.shape, (), validate_args)
        if self._validate_args and probs is not None and not all_true(self.probs > 0):
            raise ValueError(
                f"Expected parameter probs of distribution {self!r} to be positive but found invalid values"
            )

    @property
    def mean(self) -> Tensor:
        return self.probs.reciprocal() - 1

    @property
    def mode(self) -> Tensor:
        return self.probs * 0

    @property
    def variance(self) -> Tensor:
        return (self.probs.reciprocal() - 1) / self.probs

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        with no_grad():
            p = self.probs.detach()
            u = open_uniform(self._extended_shape(sample_shape), p)
            return (u.log() / (-p).log1p()).floor()

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        # a certain success (p = 1) at 0 failures: 0 * log(0) is 0 there
        failures = xlogy(value, (1 - self.probs).clamp(min=0))
        return (value == 0).where(0.0, failures) + self.probs.log()

    def entropy(self) -> Tensor:
        return _bce_with_logits(self.logits, self.probs) / self.probs


class Binomial(_Binary):
    """The number of successes in `total_count` Bernoulli(`probs`) trials."""

    arg_constraints = {
        "total_count": constraints.nonnegative_integer,
        "probs": constraints.unit_interval,
        "logits": constraints.real,
    }
    has_enumerate_support = True
    _expanded = ("total_count", "probs", "logits")

    def __init__(self, total_count: Any = 1, probs: Any = None, logits: Any = None, validate_args: bool | None = None):
        (self.total_count,) = self._set_probs_logits(probs, logits, total_count)
        self.total_count = self.total_count.cast(self.probs.dtype)
        super().__init__(self.probs.shape, (), validate_args)

    def _given(self) -> tuple[str, ...]:
        return ("total_count", self._given_name)

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self) -> Tensor:
        return self.total_count * self.probs

    @property
    def mode(self) -> Tensor:
        return ((self.total_count + 1) * self.probs).floor().minimum(self.total_count)

    @property
    def variance(self) -> Tensor:
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        with no_grad():
            n, p = self.total_count.detach(), self.probs.detach()
            return binomial_draws(n.expand(p.shape), p, tuple(sample_shape))

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        n, logits = self.total_count, self.logits
        log_choose = (n + 1).lgamma() - (value + 1).lgamma() - (n - value + 1).lgamma()
        return log_choose + value * logits - n * _softplus(logits)

    def entropy(self) -> Tensor:
        # -sum p log p over 0 .. max(total_count) (read back once), the values past an element's own count left out
        n = self.total_count
        top = int(n.max().item()) if n.numel() else 0
        values = Tensor.arange(top + 1, device=n.device).cast(n.dtype).reshape(top + 1, *(1,) * n.ndim)
        inside = values <= n
        log_choose = (n + 1).lgamma() - (values + 1).lgamma() - (n - values).clamp(min=0).add(1).lgamma()
        log_p = log_choose + values * self.logits - n * _softplus(self.logits)
        return -inside.where(log_p.exp() * log_p, 0.0).sum(0)


# log(k!) - ((k + 1/2) log(k + 1) - (k + 1) + log(2 pi) / 2) for k = 0 .. 9: the Stirling remainder where its series
# isn't yet accurate
_STIRLING_SMALL = [
    math.lgamma(k + 1) - ((k + 0.5) * math.log(k + 1) - (k + 1) + 0.5 * math.log(2 * math.pi)) for k in range(10)
]


def _stirling_tail(k: Tensor) -> Tensor:
    # the remainder above for an integer k >= 0: its series from 10 up, the table below
    k1 = k + 1
    value = (1 / 12 - (1 / 360 - 1 / (1260 * k1 * k1)) / (k1 * k1)) / k1
    for j, tail in enumerate(_STIRLING_SMALL):
        value = (k == j).where(tail, value)
    return value


def binomial_draws(total_count: Tensor, probs: Tensor, sample_shape: Sequence[int] = ()) -> Tensor:
    """Binomial(total_count, probs) draws of shape sample_shape + their (equal) shape, in probs' dtype, no gradient
    (see the module docstring)."""
    work = probs.dtype if probs.dtype in (dtypes.float32, dtypes.float64) else dtypes.float32
    n, p = total_count.cast(work), probs.cast(work)
    shape, lead = (*sample_shape, *p.shape), (1,) * len(sample_shape)
    # draw the count of the rarer outcome, q = min(p, 1 - p) <= 1/2, and flip it back for p > 1/2
    flip = p > 0.5
    q = flip.where(1 - p, p)
    small = n * q < BINOMIAL_MIN_MEAN
    # (which of the two ways any element takes: read back once, so that a way none takes isn't computed)
    any_small, any_big = Tensor.stack(small.any(), small.logical_not().any()).tolist() if p.numel() else (False, False)
    draws = Tensor.zeros(*shape, dtype=work, device=p.device)
    if any_small:
        # inversion: the number of counts k whose cdf is at most u (times the table's total, so that the k past n, of
        # mass 0, are never reached). The pmf by the ratios pmf(k + 1) / pmf(k) = (n - k) / (k + 1) * q / (1 - q) from
        # pmf(0) = (1 - q)^n, which stay exact for large n where lgamma(n + 1) - lgamma(n - k + 1) would not. The
        # table has the parameters' shape: each draw only compares against it
        n_small, q_small = small.where(n, 0.0), small.where(q, 0.0)
        k = Tensor.arange(BINOMIAL_TABLE - 1, device=p.device).cast(work).reshape(BINOMIAL_TABLE - 1, *(1,) * p.ndim)
        log_ratio = ((n_small - k).clamp(min=0) / (k + 1) * (q_small / (1 - q_small))).log()
        log_pmf0 = (n_small * (-q_small).log1p()).unsqueeze(0)
        cdf = log_pmf0.cat(log_pmf0 + log_ratio.cumsum(0)).exp().cumsum(0).realize()
        u = Tensor.rand(*shape, dtype=work, device=p.device)
        inverted = (cdf.reshape(BINOMIAL_TABLE, *lead, *p.shape) <= u * cdf[-1]).cast(work).sum(0)
        draws = small.where(inverted, draws)
    if any_big:
        draws = small.where(draws, _btrs(n, q, small, sample_shape, work))
    return flip.where(n - draws, draws).cast(probs.dtype)


def _btrs(n: Tensor, q: Tensor, small: Tensor, sample_shape: Sequence[int], work: Any) -> Tensor:
    # Hormann's transformed rejection with squeeze for the means n q from BINOMIAL_MIN_MEAN up (q <= 1/2), the
    # parameters of the other elements replaced by ones it takes; BINOMIAL_ROUNDS rounds elementwise, the first
    # accepted one winning, the mode where none is. The constants have the parameters' shape, computed once
    n, q = small.where(2 * BINOMIAL_MIN_MEAN, n), small.where(0.5, q)
    spread = (n * q * (1 - q)).sqrt()
    b = 1.15 + 2.53 * spread
    a = -0.0873 + 0.0248 * b + 0.01 * q
    c = n * q + 0.5
    alpha = (2.83 + 5.1 / b) * spread
    vr = 0.92 - 4.2 / b
    mode = ((n + 1) * q).floor()
    odds = q / (1 - q)
    at_mode = _stirling_tail(mode) + _stirling_tail(n - mode)
    Tensor.realize(n, b, a, c, alpha, vr, mode, odds, at_mode)
    rounds = (BINOMIAL_ROUNDS, *sample_shape, *n.shape)
    us_raw = Tensor.rand(*rounds, dtype=work, device=n.device) - 0.5
    v = open_uniform(rounds, us_raw)
    us = 0.5 - us_raw.abs()
    safe_us = us.clamp(min=1e-6)
    cand = ((2 * a / safe_us + b) * us_raw + c).floor()
    quick = (us >= 0.07) & (v <= vr)
    inside = (cand >= 0) & (cand <= n)
    # log(pmf(k) / pmf(mode)) through d = k - mode and log1p, so that float32 keeps it for large counts
    k = cand.maximum(0).minimum(n)
    d = k - mode
    log_ratio_to_mode = (
        -(mode + 0.5) * (d / (mode + 1)).log1p()
        - (n - mode + 0.5) * (-d / (n - mode + 1)).log1p()
        + d * ((n - k + 1) / (k + 1) * odds).log()
        + at_mode
        - _stirling_tail(k)
        - _stirling_tail(n - k)
    )
    log_v = (v * alpha / (a / (safe_us * safe_us) + b)).log()
    accept = inside & (quick | (log_v <= log_ratio_to_mode))
    draw = mode.expand((*sample_shape, *n.shape))
    for r in reversed(range(BINOMIAL_ROUNDS)):
        draw = accept[r].where(cand[r], draw)
    return draw


def poisson_draws(rate: Tensor) -> Tensor:
    """Poisson(rate) draws of rate's shape, in rate's dtype, no gradient (see the module docstring)."""
    lam = rate.detach().float()
    small = lam < 10
    # inversion: the number of counts k whose cdf is at most u
    lam_small = small.where(lam, 0.0)
    k = Tensor.arange(POISSON_TABLE, device=lam.device).float().reshape(POISSON_TABLE, *(1,) * lam.ndim)
    cdf = (xlogy(k, lam_small) - lam_small - (k + 1).lgamma()).exp().cumsum(0)
    u = Tensor.rand(*lam.shape, device=lam.device)
    inverted = (cdf <= u).float().sum(0)
    # PTRS for the large rates
    lam_big = small.where(10.0, lam)
    b = 0.931 + 2.53 * lam_big.sqrt()
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    vr = 0.9277 - 3.6224 / (b - 2)
    shape = (POISSON_ROUNDS, *lam.shape)
    us_raw = Tensor.rand(*shape, device=lam.device) - 0.5
    v = open_uniform(shape, lam)
    us = 0.5 - us_raw.abs()
    safe_us = us.clamp(min=1e-6)
    cand = ((2 * a / safe_us + b) * us_raw + lam_big + 0.43).floor()
    quick = (us >= 0.07) & (v <= vr)
    rejected = (cand < 0) | ((us < 0.013) & (v > us))
    log_lhs = v.log() + inv_alpha.log() - (a / (safe_us * safe_us) + b).log()
    log_rhs = -lam_big + cand.clamp(min=0) * lam_big.log() - (cand.clamp(min=0) + 1).lgamma()
    accept = quick | (rejected.logical_not() & (log_lhs <= log_rhs))
    draw = lam_big.floor()
    for r in reversed(range(POISSON_ROUNDS)):
        draw = accept[r].where(cand[r], draw)
    return small.where(inverted, draw).cast(rate.dtype)


class Poisson(Distribution):
    """Poisson(rate) on 0, 1, 2, ...: log_prob, mean, mode, variance and draws (see the module docstring)."""

    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer
    _expanded = ("rate",)

    def __init__(self, rate: Any, validate_args: bool | None = None):
        (self.rate,) = broadcast_all(rate)
        super().__init__(self.rate.shape, (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.rate

    @property
    def mode(self) -> Tensor:
        return self.rate.floor()

    @property
    def variance(self) -> Tensor:
        return self.rate

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        with no_grad():
            return poisson_draws(self.rate.detach().expand(self._extended_shape(sample_shape)))

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        return xlogy(value, self.rate) - self.rate - (value + 1).lgamma()


class NegativeBinomial(_Binary):
    """The number of successes (each with probability `probs`, or sigmoid(`logits`)) before `total_count` failures;
    `total_count` may be any nonnegative real. Draws are Poisson draws at Gamma(total_count, e^-logits) rates, as
    torch."""

    arg_constraints = {
        "total_count": constraints.greater_than_eq(0),
        "probs": constraints.half_open_interval(0.0, 1.0),
        "logits": constraints.real,
    }
    support = constraints.nonnegative_integer
    _expanded = ("total_count", "probs", "logits")

    def __init__(self, total_count: Any, probs: Any = None, logits: Any = None, validate_args: bool | None = None):
        (self.total_count,) = self._set_probs_logits(probs, logits, total_count)
        self.total_count = self.total_count.cast(self.probs.dtype)
        super().__init__(self.probs.shape, (), validate_args)

    def _given(self) -> tuple[str, ...]:
        return ("total_count", self._given_name)

    @property
    def param_shape(self) -> tuple[int, ...]:
        return self.probs.shape

    @property
    def mean(self) -> Tensor:
        return self.total_count * self.logits.exp()

    @property
    def mode(self) -> Tensor:
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0)

    @property
    def variance(self) -> Tensor:
        return self.mean / (-self.logits).sigmoid()

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        with no_grad():
            shape = self._extended_shape(sample_shape)
            gamma = _marsaglia_tsang(self.total_count.detach().expand(shape))
            return poisson_draws(gamma * self.logits.detach().exp())

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        n, logits = self.total_count, self.logits
        log_unnormalized = -n * _softplus(logits) - value * _softplus(-logits)
        log_normalization = (n + value).lgamma() - (value + 1).lgamma() - n.lgamma()
        return log_unnormalized + ((n + value) == 0).where(0.0, log_normalization)


class Categorical(Distribution):
    """One of K categories (the last axis of `probs` or `logits`; probs are normalized, logits shifted by their
    logsumexp). Draws invert the cumulative distribution at a uniform draw, on the device; int64 as
    torch's.

    >>> from uopkit import Tensor
    >>> Categorical(probs=Tensor([0.0, 1.0, 0.0])).sample((3,)).tolist()
    [1, 1, 1]
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(constraints.real, 1)}
    has_enumerate_support = True
    _expanded = ("probs", "logits")

    def __init__(self, probs: Tensor | None = None, logits: Tensor | None = None, validate_args: bool | None = None):
        _one_of(probs, logits)
        given = probs if probs is not None else logits
        if not isinstance(given, Tensor) or given.ndim < 1:
            raise ValueError(
                "Categorical: probs/logits needs a last dim of categories (at least 1-D), got a "
                f"{type(given).__name__} "
                f"{getattr(given, 'shape', '')}"
            )
        if probs is not None:
            self.probs = probs / probs.sum(-1, keepdim=True)
            self.logits, self._given_name = probs_to_logits(self.probs), "probs"
        else:
            self.logits = logits - logits.logsumexp(-1, keepdim=True)
            self.probs, self._given_name = self.logits.softmax(-1), "logits"
        self._num_events = given.shape[-1]
        super().__init__(given.shape[:-1], (), validate_args)

    def _given(self) -> tuple[str, ...]:
        return (self._given_name,)

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.integer_interval(0, self._num_events - 1)

    @property
    def param_shape(self) -> tuple[int, ...]:
        return self.probs.shape

    @property
    def mean(self) -> Tensor:
        return Tensor.full(self.batch_shape, float("nan"), dtype=self.probs.dtype, device=self.probs.device)

    @property
    def mode(self) -> Tensor:
        return self.probs.argmax(-1)

    @property
    def variance(self) -> Tensor:
        return self.mean

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        with no_grad():
            p = self.probs.detach()
            shape = self._extended_shape(sample_shape)
            cdf = p.cumsum(-1)
            # the last entry exactly 1, so that every draw in [0, 1) lands on a category
            cdf = (cdf / cdf[..., -1:]).expand((*shape, self._num_events))
            u = Tensor.rand(*shape, 1, dtype=p.dtype, device=p.device)
            return (u >= cdf).cast(dtypes.int64).sum(-1).clamp(max=self._num_events - 1).cast(dtypes.int64)

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        shape = tuple(broadcast_all(value, Tensor.empty(*self.batch_shape))[0].shape)
        index = value.cast(dtypes.int64).expand(shape).unsqueeze(-1)
        return self.logits.expand((*shape, self._num_events)).gather(-1, index).squeeze(-1)

    def entropy(self) -> Tensor:
        return -(self.probs * self.logits.clamp(min=MIN_REAL)).sum(-1)

    def enumerate_support(self, expand: bool = True) -> Tensor:
        k = self._num_events
        values = Tensor.arange(k, device=self.probs.device).cast(dtypes.int64).reshape(k, *(1,) * len(self.batch_shape))
        return values.expand((k, *self.batch_shape)) if expand else values


class _OverCategorical(Distribution):
    """A distribution over one Categorical's draws along the last axis (event_shape (K,)): holds the Categorical."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(constraints.real, 1)}

    def __init__(self, probs: Tensor | None = None, logits: Tensor | None = None, validate_args: bool | None = None):
        self._categorical = Categorical(probs, logits, validate_args)
        super().__init__(self._categorical.batch_shape, self._categorical.param_shape[-1:], False)
        self._validate_args = self._categorical._validate_args

    def _given(self) -> tuple[str, ...]:
        return ()

    def expand(self, batch_shape: Sequence[int], _instance: Distribution | None = None) -> Distribution:
        new = super().expand(batch_shape)
        new._categorical = self._categorical.expand(batch_shape)  # type: ignore[attr-defined]
        return new

    @property
    def probs(self) -> Tensor:
        return self._categorical.probs

    @property
    def logits(self) -> Tensor:
        return self._categorical.logits

    @property
    def param_shape(self) -> tuple[int, ...]:
        return self._categorical.param_shape


class OneHotCategorical(_OverCategorical):
    """Categorical draws as one-hot vectors of the last axis (event_shape (K,)), in the parameters' float dtype."""

    support = constraints.one_hot
    has_enumerate_support = True

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def mode(self) -> Tensor:
        return self.probs.argmax(-1).one_hot(self.event_shape[0]).cast(self.probs.dtype)

    @property
    def variance(self) -> Tensor:
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        return self._categorical.sample(sample_shape).one_hot(self.event_shape[0]).cast(self.probs.dtype)

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        return self._categorical.log_prob(value.argmax(-1))

    def entropy(self) -> Tensor:
        return self._categorical.entropy()

    def enumerate_support(self, expand: bool = True) -> Tensor:
        k = self.event_shape[0]
        values = Tensor.eye(k, dtype=self.probs.dtype, device=self.probs.device).reshape(
            k, *(1,) * len(self.batch_shape), k
        )
        return values.expand((k, *self.batch_shape, k)) if expand else values


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """OneHotCategorical with torch's straight-through rsample: the one-hot draw in the forward pass, the gradient of
    the probabilities in the backward pass (draw + probs - probs.detach()).

    >>> from uopkit import Tensor
    >>> OneHotCategoricalStraightThrough(probs=Tensor([0.0, 1.0])).rsample().tolist()
    [0.0, 1.0]
    """

    has_rsample = True

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        probs = self.probs
        return self.sample(sample_shape) + (probs - probs.detach())


class Multinomial(_OverCategorical):
    """Counts of `total_count` (a Python int, as torch) Categorical draws over the last axis of `probs` or `logits`
    (event_shape (K,)), in the parameters' float dtype. log_prob takes the count from the value (any total), as torch.

    >>> from uopkit import Tensor
    >>> Multinomial(4, probs=Tensor([0.0, 1.0])).sample().tolist()
    [0.0, 4.0]
    """

    def __init__(
        self,
        total_count: int = 1,
        probs: Tensor | None = None,
        logits: Tensor | None = None,
        validate_args: bool | None = None,
    ):
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        super().__init__(probs, logits, validate_args)

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.multinomial(self.total_count)

    @property
    def mean(self) -> Tensor:
        return self.probs * self.total_count

    @property
    def variance(self) -> Tensor:
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        # total_count Categorical draws per event, one-hot and summed
        with no_grad():
            k, p = self.event_shape[0], self.probs
            if self.total_count == 0:
                return Tensor.zeros(*self._extended_shape(sample_shape), dtype=p.dtype, device=p.device)
            draws = self._categorical.sample((self.total_count, *tuple(sample_shape)))
            return draws.one_hot(k).cast(p.dtype).sum(0)

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        logits = self.logits
        # a zero count of an impossible category adds nothing (0 * -inf would be NaN)
        logits = ((value == 0) & (logits == -math.inf)).where(0.0, logits)
        return (value.sum(-1) + 1).lgamma() - (value + 1).lgamma().sum(-1) + (logits * value).sum(-1)

    def entropy(self) -> Tensor:
        # n H(categorical) - log n! + sum over categories of E[log x_j!], x_j ~ Binomial(n, p_j)
        n, p = self.total_count, self.probs
        binomial = Binomial(n, probs=p, validate_args=False)
        if n == 0:
            return p.sum(-1) * 0
        support = Tensor.arange(1, n + 1, device=p.device).cast(p.dtype).reshape(n, *(1,) * p.ndim)
        weights = (support + 1).lgamma()
        expected = (binomial.log_prob(support).exp() * weights).sum(0).sum(-1)
        return n * self._categorical.entropy() - math.lgamma(n + 1) + expected
