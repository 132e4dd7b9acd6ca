"""kl_divergence(p, q) = E_p[log p(x) - log q(x)] in closed form for the registered pairs of families, and
`register_kl` to add more. A pair is looked up by the most specific registered classes that p's and q's types derive
from, as torch."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from uopkit.distributions.continuous import (
    EULER_GAMMA,
    Cauchy,
    Exponential,
    Gumbel,
    HalfCauchy,
    HalfNormal,
    Laplace,
    Normal,
    Pareto,
    Uniform,
)
from uopkit.distributions.discrete import (
    Bernoulli,
    Binomial,
    Categorical,
    Geometric,
    OneHotCategorical,
    Poisson,
    _softplus,
)
from uopkit.distributions.distribution import Distribution, lbeta, sum_rightmost, xlogy
from uopkit.distributions.gamma import Beta, Dirichlet, Gamma
from uopkit.distributions.matrix import Wishart, _mvdigamma
from uopkit.distributions.multivariate import (
    Independent,
    LowRankMultivariateNormal,
    MultivariateNormal,
    _batch_mahalanobis,
)
from uopkit.distributions.relaxed import ContinuousBernoulli
from uopkit.distributions.transformed_distribution import TransformedDistribution
from uopkit.tensor import Tensor

__all__ = ["kl_divergence", "register_kl"]

KLFunction = Callable[[Any, Any], Tensor]
_KL_REGISTRY: dict[tuple[type, type], KLFunction] = {}


def register_kl(type_p: type, type_q: type) -> Callable[[KLFunction], KLFunction]:
    """Decorator: `fn(p, q)` is KL(p || q) for p of type_p and q of type_q (and their subclasses, unless a more specific
    pair is registered).

    >>> from uopkit.distributions import Normal
    >>> class MyNormal(Normal): pass
    >>> @register_kl(MyNormal, MyNormal)
    ... def _kl(p, q): return p.loc * 0
    >>> kl_divergence(MyNormal(0.0, 1.0), MyNormal(1.0, 1.0)).item()
    0.0
    """
    if not (isinstance(type_p, type) and issubclass(type_p, Distribution)):
        raise TypeError(f"register_kl: type_p must be a Distribution class, got {type_p!r}")
    if not (isinstance(type_q, type) and issubclass(type_q, Distribution)):
        raise TypeError(f"register_kl: type_q must be a Distribution class, got {type_q!r}")

    def decorator(fn: KLFunction) -> KLFunction:
        _KL_REGISTRY[(type_p, type_q)] = fn
        return fn

    return decorator


def _dispatch(type_p: type, type_q: type) -> KLFunction | None:
    matches = [(tp, tq) for tp, tq in _KL_REGISTRY if issubclass(type_p, tp) and issubclass(type_q, tq)]
    if not matches:
        return None
    # the closest pair: nearest in p's method resolution order, then in q's
    best = min(matches, key=lambda pq: (type_p.__mro__.index(pq[0]), type_q.__mro__.index(pq[1])))
    return _KL_REGISTRY[best]


def kl_divergence(p: Distribution, q: Distribution) -> Tensor:
    """KL(p || q), of shape the batch shape, for a registered pair of distribution types (NotImplementedError
    otherwise).

    >>> from uopkit.distributions import Normal
    >>> round(kl_divergence(Normal(0.0, 1.0), Normal(1.0, 1.0)).item(), 4)
    0.5
    """
    fn = _dispatch(type(p), type(q))
    if fn is None:
        raise NotImplementedError(
            f"kl_divergence: no rule for ({type(p).__name__}, {type(q).__name__}); register_kl adds one"
        )
    return fn(p, q)


def _infinite_where(condition: Tensor, value: Tensor) -> Tensor:
    return condition.where(math.inf, value)


@register_kl(Normal, Normal)
def _kl_normal_normal(p: Normal, q: Normal) -> Tensor:
    var_ratio = (p.scale / q.scale) ** 2
    t1 = ((p.loc - q.loc) / q.scale) ** 2
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p: Bernoulli, q: Bernoulli) -> Tensor:
    # p log(p/q) + (1-p) log((1-p)/(1-q)) through the logits: log p = -softplus(-logit), log(1-p) = -softplus(logit)
    t1 = p.probs * (_softplus(-q.logits) - _softplus(-p.logits))
    t1 = (p.probs == 0).where(0.0, t1)
    t2 = (1 - p.probs) * (_softplus(q.logits) - _softplus(p.logits))
    t2 = (p.probs == 1).where(0.0, t2)
    return t1 + t2


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p: Categorical, q: Categorical) -> Tensor:
    t = p.probs * (p.logits - q.logits)
    # no mass in p: nothing; mass in p where q has none: infinite
    t = (q.probs == 0).where(math.inf, t)
    t = (p.probs == 0).where(0.0, t)
    return t.sum(-1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehotcategorical(p: OneHotCategorical, q: OneHotCategorical) -> Tensor:
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Geometric, Geometric)
def _kl_geometric_geometric(p: Geometric, q: Geometric) -> Tensor:
    return -p.entropy() - (-q.probs).log1p() / p.probs - q.logits


@register_kl(Poisson, Poisson)
def _kl_poisson_poisson(p: Poisson, q: Poisson) -> Tensor:
    return xlogy(p.rate, p.rate) - xlogy(p.rate, q.rate) - (p.rate - q.rate)


@register_kl(Binomial, Binomial)
def _kl_binomial_binomial(p: Binomial, q: Binomial) -> Tensor:
    # equal trial counts only (torch raises NotImplementedError for q's count above p's, gives inf below)
    if not bool((p.total_count == q.total_count).all().item()):
        raise NotImplementedError("KL between Binomials with different total_count is not implemented")
    kl = p.total_count * (
        p.probs * (_softplus(-q.logits) - _softplus(-p.logits))
        + (1 - p.probs) * (_softplus(q.logits) - _softplus(p.logits))
    )
    return kl


@register_kl(Exponential, Exponential)
def _kl_exponential_exponential(p: Exponential, q: Exponential) -> Tensor:
    rate_ratio = q.rate / p.rate
    return rate_ratio - rate_ratio.log() - 1


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p: Uniform, q: Uniform) -> Tensor:
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return _infinite_where((q.low > p.low) | (q.high < p.high), result)


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p: Laplace, q: Laplace) -> Tensor:
    scale_ratio = p.scale / q.scale
    loc_abs_diff = (p.loc - q.loc).abs()
    return -scale_ratio.log() + loc_abs_diff / q.scale + scale_ratio * (-loc_abs_diff / p.scale).exp() - 1


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p: Gamma, q: Gamma) -> Tensor:
    t1 = q.concentration * (p.rate / q.rate).log()
    t2 = q.concentration.lgamma() - p.concentration.lgamma()
    t3 = (p.concentration - q.concentration) * p.concentration.digamma()
    t4 = (q.rate - p.rate) * (p.concentration / p.rate)
    return t1 + t2 + t3 + t4


@register_kl(Beta, Beta)
def _kl_beta_beta(p: Beta, q: Beta) -> Tensor:
    a_p, b_p, a_q, b_q = p.concentration1, p.concentration0, q.concentration1, q.concentration0
    total_p, total_q = a_p + b_p, a_q + b_q
    return (
        lbeta(a_q, b_q)
        - lbeta(a_p, b_p)
        + (a_p - a_q) * a_p.digamma()
        + (b_p - b_q) * b_p.digamma()
        + (total_q - total_p) * total_p.digamma()
    )


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p: Dirichlet, q: Dirichlet) -> Tensor:
    a_p, a_q = p.concentration, q.concentration
    total_p, total_q = a_p.sum(-1), a_q.sum(-1)
    t1 = total_p.lgamma() - total_q.lgamma()
    t2 = (a_p.lgamma() - a_q.lgamma()).sum(-1)
    t3 = ((a_p - a_q) * (a_p.digamma() - total_p.digamma().unsqueeze(-1))).sum(-1)
    return t1 - t2 + t3


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_mvn_mvn(p: MultivariateNormal, q: MultivariateNormal) -> Tensor:
    if p.event_shape != q.event_shape:
        raise ValueError(
            f"kl_divergence: the two MultivariateNormals have event shapes {p.event_shape} and {q.event_shape}; they "
            "must "
            "be equal"
        )
    lp, lq = p._unbroadcasted_scale_tril, q._unbroadcasted_scale_tril
    n = p.event_shape[0]
    half_log_det_q = lq.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    half_log_det_p = lp.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    # tr(Sigma_q^-1 Sigma_p) = |Lq^-1 Lp|_F^2
    batch = tuple(p.batch_shape) if len(p.batch_shape) >= len(q.batch_shape) else tuple(q.batch_shape)
    lq_b, lp_b = lq.expand((*batch, n, n)), lp.expand((*batch, n, n))
    trace = (lq_b.solve_triangular(lp_b, upper=False) ** 2).sum((-2, -1))
    mahalanobis = _batch_mahalanobis(lq, q.loc - p.loc)
    return half_log_det_q - half_log_det_p + 0.5 * (trace + mahalanobis - n)


@register_kl(Wishart, Wishart)
def _kl_wishart_wishart(p: Wishart, q: Wishart) -> Tensor:
    # E_p[log det X] = mvdigamma(df_p / 2) + n log 2 + log det Sigma_p and E_p[X] = df_p Sigma_p, in the log-densities
    if p.event_shape != q.event_shape:
        raise ValueError(
            f"kl_divergence: the two Wisharts have event shapes {p.event_shape} and {q.event_shape}; they must be equal"
        )
    n = p.event_shape[-1]
    lp, lq = p._unbroadcasted_scale_tril, q._unbroadcasted_scale_tril
    half_nu_p, half_nu_q = p.df / 2, q.df / 2
    log_det_ratio = 2 * (lq.diagonal(dim1=-2, dim2=-1).log().sum(-1) - lp.diagonal(dim1=-2, dim2=-1).log().sum(-1))
    # tr(Sigma_q^-1 Sigma_p) = |Lq^-1 Lp|_F^2
    batch = tuple(p.batch_shape) if len(p.batch_shape) >= len(q.batch_shape) else tuple(q.batch_shape)
    trace = (lq.expand((*batch, n, n)).solve_triangular(lp.expand((*batch, n, n)), upper=False) ** 2).sum((-2, -1))
    return (
        (half_nu_p - half_nu_q) * _mvdigamma(half_nu_p, n)
        + half_nu_q * log_det_ratio
        + half_nu_p * (trace - n)
        + half_nu_q.mvlgamma(n)
        - half_nu_p.mvlgamma(n)
    )


@register_kl(Independent, Independent)
def _kl_independent_independent(p: Independent, q: Independent) -> Tensor:
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError("KL between Independents with different reinterpreted_batch_ndims")
    return sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)


@register_kl(HalfNormal, HalfNormal)
def _kl_halfnormal_halfnormal(p: HalfNormal, q: HalfNormal) -> Tensor:
    # folding both at 0 keeps the density ratio: the Normal pair's value with equal locs
    return _kl_normal_normal(p.base_dist, q.base_dist)  # type: ignore[arg-type]


@register_kl(Cauchy, Cauchy)
def _kl_cauchy_cauchy(p: Cauchy, q: Cauchy) -> Tensor:
    return (((p.scale + q.scale) ** 2 + (p.loc - q.loc) ** 2) / (4 * p.scale * q.scale)).log()


@register_kl(Gumbel, Gumbel)
def _kl_gumbel_gumbel(p: Gumbel, q: Gumbel) -> Tensor:
    ratio = p.scale / q.scale
    shift = (p.loc - q.loc) / q.scale
    return -ratio.log() + shift + EULER_GAMMA * (ratio - 1) + ((1 + ratio).lgamma() - shift).exp() - 1


@register_kl(Pareto, Pareto)
def _kl_pareto_pareto(p: Pareto, q: Pareto) -> Tensor:
    alpha_ratio = q.alpha / p.alpha
    result = q.alpha * (p.scale / q.scale).log() - alpha_ratio.log() + alpha_ratio - 1
    return _infinite_where(p.scale < q.scale, result)


def _as_mvn(d: Distribution) -> MultivariateNormal:
    if isinstance(d, LowRankMultivariateNormal):
        return MultivariateNormal(d.loc, scale_tril=d.scale_tril, validate_args=False)
    return d  # type: ignore[return-value]


@register_kl(LowRankMultivariateNormal, LowRankMultivariateNormal)
@register_kl(LowRankMultivariateNormal, MultivariateNormal)
@register_kl(MultivariateNormal, LowRankMultivariateNormal)
def _kl_lowrank(p: Distribution, q: Distribution) -> Tensor:
    # through the dense Cholesky factors of the covariances (n x n; torch works with the capacitance instead)
    if p.event_shape != q.event_shape:
        raise ValueError(
            f"kl_divergence: the two distributions have event shapes {p.event_shape} and {q.event_shape}; they must be "
            "equal"
        )
    return _kl_mvn_mvn(_as_mvn(p), _as_mvn(q))


# pairs whose p has mass where q has none
def _kl_infinite(p: Distribution, q: Distribution) -> Tensor:
    like = next(v for v in p.__dict__.values() if isinstance(v, Tensor))
    return (like * 0).add(math.inf).expand(p.batch_shape)


for _p_type, _q_types in (
    (Beta, (Pareto,)),
    (ContinuousBernoulli, (Pareto,)),
    (Exponential, (Beta, Pareto, Uniform, ContinuousBernoulli)),
    (Gamma, (Beta, Pareto, Uniform, ContinuousBernoulli)),
    (Gumbel, (Beta, Exponential, Gamma, Pareto, Uniform, ContinuousBernoulli)),
    (Laplace, (Beta, Exponential, Gamma, Pareto, Uniform, ContinuousBernoulli)),
    (Normal, (Beta, Exponential, Gamma, Pareto, Uniform, ContinuousBernoulli)),
    (Pareto, (Beta, Uniform, ContinuousBernoulli)),
    (Poisson, (Bernoulli, Binomial)),
):
    for _q_type in _q_types:
        register_kl(_p_type, _q_type)(_kl_infinite)


# KL(p || q) = -H(p) + E_p[-log q(x)]: q's log-density needs only a few moments of p (its mean, variance, E[log x])


def _normal_cross_entropy(q: Normal, mean: Tensor, variance: Tensor) -> Tensor:
    # E[-log q(x)] = log(sqrt(2 pi) sigma) + E[(x - mu)^2] / (2 sigma^2)
    return (math.sqrt(2 * math.pi) * q.scale).log() + (variance + (mean - q.loc) ** 2) / (2 * q.scale**2)


def _exponential_cross_entropy(q: Exponential, mean: Tensor) -> Tensor:
    return q.rate * mean - q.rate.log()


def _gamma_cross_entropy(q: Gamma, mean: Tensor, mean_log: Tensor) -> Tensor:
    k, rate = q.concentration, q.rate
    return k.lgamma() - k * rate.log() - (k - 1) * mean_log + rate * mean


def _uniform_mean_log(low: Tensor, high: Tensor) -> Tensor:
    # E[log x] for x ~ U(low, high), 0 <= low: the mean of x log x - x over the interval
    return (xlogy(high, high) - xlogy(low, low)) / (high - low) - 1


def _beta_mean_log(p: Beta) -> Tensor:
    return p.concentration1.digamma() - (p.concentration1 + p.concentration0).digamma()


@register_kl(Beta, Normal)
@register_kl(Exponential, Normal)
@register_kl(Gamma, Normal)
@register_kl(Laplace, Normal)
@register_kl(Uniform, Normal)
def _kl_to_normal(p: Distribution, q: Normal) -> Tensor:
    return -p.entropy() + _normal_cross_entropy(q, p.mean, p.variance)


@register_kl(Beta, Exponential)
@register_kl(Gamma, Exponential)
def _kl_to_exponential(p: Distribution, q: Exponential) -> Tensor:
    return -p.entropy() + _exponential_cross_entropy(q, p.mean)


@register_kl(Uniform, Exponential)
def _kl_uniform_exponential(p: Uniform, q: Exponential) -> Tensor:
    return _infinite_where(p.low < 0, -p.entropy() + _exponential_cross_entropy(q, p.mean))


@register_kl(Beta, Gamma)
def _kl_beta_gamma(p: Beta, q: Gamma) -> Tensor:
    return -p.entropy() + _gamma_cross_entropy(q, p.mean, _beta_mean_log(p))


@register_kl(Exponential, Gamma)
def _kl_exponential_gamma(p: Exponential, q: Gamma) -> Tensor:
    # E[log x] = -(euler gamma) - log rate
    return -p.entropy() + _gamma_cross_entropy(q, p.mean, -EULER_GAMMA - p.rate.log())


@register_kl(Uniform, Gamma)
def _kl_uniform_gamma(p: Uniform, q: Gamma) -> Tensor:
    outside = p.low < 0
    # (an interval that reaches below 0 gets a stand-in inside the support: its KL is inf, its gradients 0, not NaN)
    low, high = outside.where(1.0, p.low), outside.where(2.0, p.high)
    result = -(high - low).log() + _gamma_cross_entropy(q, (low + high) / 2, _uniform_mean_log(low, high))
    return _infinite_where(outside, result)


@register_kl(Beta, Uniform)
def _kl_beta_uniform(p: Beta, q: Uniform) -> Tensor:
    # finite only when q's interval covers [0, 1]
    return _infinite_where((q.low > 0) | (q.high < 1), -p.entropy() + (q.high - q.low).log())


@register_kl(Uniform, Beta)
def _kl_uniform_beta(p: Uniform, q: Beta) -> Tensor:
    outside = (p.low < 0) | (p.high > 1)
    low, high = outside.where(0.25, p.low), outside.where(0.75, p.high)
    a, b = q.concentration1, q.concentration0
    # log q(x) = (a - 1) log x + (b - 1) log(1 - x) - log B(a, b); 1 - x ~ U(1 - high, 1 - low)
    cross = lbeta(a, b) - (a - 1) * _uniform_mean_log(low, high) - (b - 1) * _uniform_mean_log(1 - high, 1 - low)
    return _infinite_where(outside, -(high - low).log() + cross)


@register_kl(Normal, Laplace)
def _kl_normal_laplace(p: Normal, q: Laplace) -> Tensor:
    # E|x - m| for x ~ N(mu, s^2), d = mu - m: s sqrt(2/pi) exp(-d^2 / 2s^2) + d erf(d / (s sqrt 2))
    d = p.loc - q.loc
    z = d / p.scale
    mean_abs = math.sqrt(2 / math.pi) * p.scale * (-0.5 * z**2).exp() + d * (z * math.sqrt(0.5)).erf()
    return -p.entropy() + (2 * q.scale).log() + mean_abs / q.scale


@register_kl(Bernoulli, Poisson)
def _kl_bernoulli_poisson(p: Bernoulli, q: Poisson) -> Tensor:
    # log q(0) = -rate, log q(1) = log rate - rate
    return -p.entropy() + q.rate - p.probs * q.rate.log()


@register_kl(HalfCauchy, HalfCauchy)
def _kl_halfcauchy_halfcauchy(p: HalfCauchy, q: HalfCauchy) -> Tensor:
    # folding both at 0 keeps the density ratio: the Cauchy pair's value with equal locs
    return _kl_cauchy_cauchy(p.base_dist, q.base_dist)  # type: ignore[arg-type]


@register_kl(Exponential, Gumbel)
def _kl_exponential_gumbel(p: Exponential, q: Gumbel) -> Tensor:
    c, r = p.rate * q.scale, q.loc / q.scale
    return c.log() - 1 - r + r.exp() * c / (c + 1) + c.reciprocal()


@register_kl(Gamma, Gumbel)
def _kl_gamma_gumbel(p: Gamma, q: Gumbel) -> Tensor:
    a, c, r = p.concentration, p.rate * q.scale, q.loc / q.scale
    neg_entropy_part = (a - 1) * a.digamma() - a.lgamma() - a
    return neg_entropy_part + c.log() + a / c + r.exp() * (-a * (1 + c.reciprocal()).log()).exp() - r


@register_kl(Normal, Gumbel)
def _kl_normal_gumbel(p: Normal, q: Gumbel) -> Tensor:
    m, v, r = p.loc / q.scale, (p.scale / q.scale) ** 2, q.loc / q.scale
    return -0.5 * v.log() + m - r + (r - m + 0.5 * v).exp() - 0.5 * (1 + math.log(2 * math.pi))


@register_kl(Uniform, Gumbel)
def _kl_uniform_gumbel(p: Uniform, q: Gumbel) -> Tensor:
    width = p.high - p.low
    ratio = q.scale / width
    hi, lo = (p.high - q.loc) / q.scale, (p.low - q.loc) / q.scale
    return ratio.log() + 0.5 * (hi + lo) - ratio * ((-hi).exp() - (-lo).exp())


@register_kl(Gumbel, Normal)
def _kl_gumbel_normal(p: Gumbel, q: Normal) -> Tensor:
    ratio = p.scale / q.scale
    mean_gap = (p.loc + EULER_GAMMA * p.scale - q.loc) / q.scale
    return (
        -(ratio / math.sqrt(2 * math.pi)).log() + (math.pi * ratio / 2) ** 2 / 3 + 0.5 * mean_gap**2 - (EULER_GAMMA + 1)
    )


@register_kl(Pareto, Exponential)
def _kl_pareto_exponential(p: Pareto, q: Exponential) -> Tensor:
    a, c = p.alpha, p.scale * q.rate
    result = (a / c).log() - a.reciprocal() + a * c / (a - 1) - 1
    return _infinite_where(a <= 1, result)


@register_kl(Pareto, Gamma)
def _kl_pareto_gamma(p: Pareto, q: Gamma) -> Tensor:
    a, k, rate = p.alpha, q.concentration, q.rate
    mean_log = p.scale.log() + a.reciprocal()
    result = a.log() - k * mean_log + k.lgamma() - k * rate.log() + rate * a * p.scale / (a - 1) - 1
    return _infinite_where(a <= 1, result)


@register_kl(Pareto, Normal)
def _kl_pareto_normal(p: Pareto, q: Normal) -> Tensor:
    a = p.alpha
    mean = a * p.scale / (a - 1)
    variance = a * (p.scale / (a - 1)) ** 2 / (a - 2)
    log_norm = (math.sqrt(2 * math.pi) * q.scale * a / p.scale).log()
    result = log_norm - a.reciprocal() + (variance + (mean - q.loc) ** 2) / (2 * q.scale**2) - 1
    return _infinite_where(a <= 2, result)


@register_kl(Uniform, Pareto)
def _kl_uniform_pareto(p: Uniform, q: Pareto) -> Tensor:
    width = p.high - p.low
    mean_log = (xlogy(p.high, p.high) - xlogy(p.low, p.low) - width) / width
    result = (q.alpha + 1) * mean_log - (q.alpha * width).log() - q.alpha * q.scale.log()
    return _infinite_where(p.low < q.scale, result)


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed_transformed(p: TransformedDistribution, q: TransformedDistribution) -> Tensor:
    # the same bijections on both sides leave the divergence of the bases unchanged
    if p.transforms != q.transforms:
        raise NotImplementedError("KL between TransformedDistributions with different transforms")
    if p.event_shape != q.event_shape:
        raise NotImplementedError("KL between TransformedDistributions with different event shapes")
    return kl_divergence(p.base_dist, q.base_dist)


@register_kl(ContinuousBernoulli, ContinuousBernoulli)
def _kl_continuous_bernoulli(p: ContinuousBernoulli, q: ContinuousBernoulli) -> Tensor:
    t1 = p.mean * (p.logits - q.logits)
    return t1 + p._cont_bern_log_norm() + (-p.probs).log1p() - q._cont_bern_log_norm() - (-q.probs).log1p()


def _minus_cross_entropy_continuous_bernoulli(p: Distribution, q: ContinuousBernoulli) -> Tensor:
    # KL(p || q) = -H(p) - E_p[log q(x)], with log q(x) = x logit + log(1 - q) + log C(q)
    return -p.entropy() - p.mean * q.logits - (-q.probs).log1p() - q._cont_bern_log_norm()


@register_kl(Beta, ContinuousBernoulli)
def _kl_beta_continuous_bernoulli(p: Beta, q: ContinuousBernoulli) -> Tensor:
    return _minus_cross_entropy_continuous_bernoulli(p, q)


@register_kl(Uniform, ContinuousBernoulli)
def _kl_uniform_continuous_bernoulli(p: Uniform, q: ContinuousBernoulli) -> Tensor:
    # infinite when p has mass outside [0, 1] (torch's test, p.high >= 1 or p.low <= 0, also marks [0, 1] itself)
    return _infinite_where((p.high > 1) | (p.low < 0), _minus_cross_entropy_continuous_bernoulli(p, q))


@register_kl(ContinuousBernoulli, Exponential)
def _kl_continuous_bernoulli_exponential(p: ContinuousBernoulli, q: Exponential) -> Tensor:
    return -p.entropy() - q.rate.log() + q.rate * p.mean


@register_kl(ContinuousBernoulli, Normal)
def _kl_continuous_bernoulli_normal(p: ContinuousBernoulli, q: Normal) -> Tensor:
    log_norm = 0.5 * (math.log(2.0 * math.pi) + (q.loc / q.scale) ** 2) + q.scale.log()
    second_moment = (p.variance + p.mean**2 - 2.0 * q.loc * p.mean) / (2.0 * q.scale**2)
    return -p.entropy() + log_norm + second_moment


@register_kl(ContinuousBernoulli, Uniform)
def _kl_continuous_bernoulli_uniform(p: ContinuousBernoulli, q: Uniform) -> Tensor:
    # infinite when [0, 1] is not inside q's interval (torch's test, q.low >= 0 or q.high <= 1, also marks [0, 1])
    return _infinite_where((q.low > 0) | (q.high < 1), -p.entropy() + (q.high - q.low).log())
