"""uopkit.distributions against torch.distributions: values and parameter gradients of log_prob, entropy, moments,
cdf/icdf and kl_divergence on random parameters; shapes of draws; draw statistics (20k draws, ~5 sigma tolerances,
fixed seed); reparameterized gradients; validate_args errors."""

import math

import numpy as np
import pytest
import torch
import torch.distributions as td

import uopkit.distributions as ud
from uopkit import Tensor
from uopkit.distributions import constraints

RNG = np.random.default_rng(0)
B = (3, 4)


def _pos(*shape, low=0.3, high=3.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


def _real(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _unit(*shape):
    return RNG.uniform(0.05, 0.95, shape).astype(np.float32)


def _spd(*batch, n=3):
    a = RNG.standard_normal((*batch, n, n)).astype(np.float32)
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=np.float32)).astype(np.float32)


def _tril(*batch, n=3):
    return np.linalg.cholesky(_spd(*batch, n=n).astype(np.float64)).astype(np.float32)


def _simplex(*shape):
    p = RNG.uniform(0.1, 1.0, shape).astype(np.float32)
    return (p / p.sum(-1, keepdims=True)).astype(np.float32)


# name: (family name, keyword parameters as numpy arrays, value in the support of batch shape B)
CASES = {
    "normal": ("Normal", {"loc": _real(*B), "scale": _pos(*B)}, lambda: _real(*B)),
    "uniform": (
        "Uniform",
        {"low": -1 - _pos(*B), "high": 1 + _pos(*B)},
        lambda: RNG.uniform(-1, 1, B).astype(np.float32),
    ),
    "exponential": ("Exponential", {"rate": _pos(*B)}, lambda: _pos(*B)),
    "laplace": ("Laplace", {"loc": _real(*B), "scale": _pos(*B)}, lambda: _real(*B)),
    "lognormal": ("LogNormal", {"loc": _real(*B) * 0.5, "scale": _pos(*B, high=1.0)}, lambda: _pos(*B)),
    "gamma": ("Gamma", {"concentration": _pos(*B), "rate": _pos(*B)}, lambda: _pos(*B)),
    "beta": ("Beta", {"concentration1": _pos(*B), "concentration0": _pos(*B)}, lambda: _unit(*B)),
    "dirichlet": ("Dirichlet", {"concentration": _pos(*B, 5)}, lambda: _simplex(*B, 5)),
    "bernoulli_probs": ("Bernoulli", {"probs": _unit(*B)}, lambda: RNG.integers(0, 2, B).astype(np.float32)),
    "bernoulli_logits": ("Bernoulli", {"logits": _real(*B) * 2}, lambda: RNG.integers(0, 2, B).astype(np.float32)),
    "geometric": ("Geometric", {"probs": _unit(*B)}, lambda: RNG.integers(0, 6, B).astype(np.float32)),
    "geometric_logits": ("Geometric", {"logits": _real(*B)}, lambda: RNG.integers(0, 6, B).astype(np.float32)),
    "poisson": ("Poisson", {"rate": _pos(*B, high=8.0)}, lambda: RNG.integers(0, 9, B).astype(np.float32)),
    "binomial": (
        "Binomial",
        {"total_count": np.full(B, 10.0, np.float32), "probs": _unit(*B)},
        lambda: RNG.integers(0, 11, B).astype(np.float32),
    ),
    "binomial_logits": (
        "Binomial",
        {"total_count": RNG.integers(5, 12, B).astype(np.float32), "logits": _real(*B)},
        lambda: RNG.integers(0, 6, B).astype(np.float32),
    ),
    "categorical_probs": ("Categorical", {"probs": _simplex(*B, 5)}, lambda: RNG.integers(0, 5, B)),
    "categorical_logits": ("Categorical", {"logits": _real(*B, 5)}, lambda: RNG.integers(0, 5, B)),
    "onehot": (
        "OneHotCategorical",
        {"logits": _real(*B, 5)},
        lambda: np.eye(5, dtype=np.float32)[RNG.integers(0, 5, B)],
    ),
    "onehot_st": (
        "OneHotCategoricalStraightThrough",
        {"logits": _real(*B, 5)},
        lambda: np.eye(5, dtype=np.float32)[RNG.integers(0, 5, B)],
    ),
    "mvn_cov": ("MultivariateNormal", {"loc": _real(4, 3), "covariance_matrix": _spd(4)}, lambda: _real(2, 4, 3)),
    "mvn_tril": ("MultivariateNormal", {"loc": _real(4, 3), "scale_tril": _tril(4)}, lambda: _real(4, 3)),
    "mvn_prec": ("MultivariateNormal", {"loc": _real(3), "precision_matrix": _spd(4)}, lambda: _real(4, 3)),
}
# parameters with no gradient in torch either (counts), or whose torch gradient needs a symmetric perturbation
NO_GRAD = {"total_count", "covariance_matrix", "precision_matrix"}
METHODS = ("log_prob", "entropy", "mean", "variance", "stddev", "mode", "cdf")


def _build(case):
    family, params, _ = CASES[case]
    ours = {k: Tensor(v, requires_grad=k not in NO_GRAD) for k, v in params.items()}
    theirs = {k: torch.tensor(v, requires_grad=k not in NO_GRAD) for k, v in params.items()}
    return getattr(ud, family)(**ours), getattr(td, family)(**theirs), ours, theirs


def _call(dist, method, value):
    if method in ("log_prob", "cdf"):
        return getattr(dist, method)(value)
    if method == "entropy":
        return dist.entropy()
    return getattr(dist, method)


def _tolerance(case, method):
    # float32 throughout; the gamma family's special functions and the MVN's factorizations round a little more
    return 2e-4 if case.startswith(("mvn", "gamma", "beta", "dirichlet", "binomial", "poisson")) else 1e-5


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", list(CASES))
def test_matches_torch(case, method):
    value = CASES[case][2]()
    ours, theirs, our_params, their_params = _build(case)
    try:
        expected = _call(theirs, method, torch.tensor(value))
    except NotImplementedError:
        if (case, method) == ("binomial_logits", "entropy"):
            # torch's Binomial has no entropy for unequal counts; ours: -sum p log p over the support, by torch's pmf
            counts = theirs.total_count
            ks = torch.arange(int(counts.max()) + 1, dtype=torch.float32).reshape(-1, *[1] * counts.ndim)
            logp = theirs.log_prob(torch.minimum(ks, counts)).masked_fill(ks > counts, -math.inf)
            expected = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(0)
            got = _call(ours, method, Tensor(value))
            np.testing.assert_allclose(got.numpy(), expected.detach().numpy(), rtol=2e-4, atol=2e-4)
            return
        # torch has no such method for this family: neither have we
        with pytest.raises(NotImplementedError):
            _call(ours, method, Tensor(value))
        return
    got = _call(ours, method, Tensor(value))
    expected_np = expected.detach().numpy()
    tol = _tolerance(case, method)
    np.testing.assert_allclose(got.numpy(), expected_np, rtol=tol, atol=tol, equal_nan=True)
    if not expected.requires_grad or method in ("mode",):
        return
    weights = RNG.standard_normal(expected.shape).astype(np.float32)
    try:
        (expected * torch.tensor(weights)).sum().backward()
    except (NotImplementedError, RuntimeError):
        # (torch's gammainc has no gradient with respect to the concentration, nor has ours)
        return
    (got * Tensor(weights)).sum().backward()
    for name, param in their_params.items():
        if param.grad is None or name in NO_GRAD:
            continue
        ours_grad = our_params[name].grad
        assert ours_grad is not None, f"no gradient for {name}"
        np.testing.assert_allclose(ours_grad.numpy(), param.grad.numpy(), rtol=10 * tol, atol=10 * tol)


@pytest.mark.parametrize("family", ["Normal", "Uniform", "Exponential", "Laplace", "LogNormal"])
def test_icdf_matches_torch(family):
    case = family.lower()
    ours, theirs, _, _ = _build(case)
    q = _unit(*B)
    np.testing.assert_allclose(
        ours.icdf(Tensor(q)).numpy(), theirs.icdf(torch.tensor(q)).detach().numpy(), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("family", ["Normal", "HalfNormal", "LogNormal"])
def test_float64_values_keep_float64_precision_with_number_parameters(family):
    # Normal(0.0, 1.0) holds float32 parameters; a float64 value (a GP's z-score in an acquisition function) is
    # computed in float64 by torch: sqrt(2) must not be rounded to float32 with the scale first
    z = np.array([-2.3, -0.7, 0.1, 0.4, 1.9, 3.3])
    value = np.exp(z) if family == "LogNormal" else np.abs(z) if family == "HalfNormal" else z
    args = (1.0,) if family == "HalfNormal" else (0.0, 1.0)
    ours, theirs = getattr(ud, family)(*args), getattr(td, family)(*args)
    got, want = ours.cdf(Tensor(value)), theirs.cdf(torch.tensor(value))
    assert got.dtype == Tensor(value).dtype
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-14, atol=1e-15)
    q = 1 / (1 + np.exp(-z))
    got, want = ours.icdf(Tensor(q)), theirs.icdf(torch.tensor(q))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("sample_shape", [(), (2,), (5, 1)])
def test_shapes_match_torch(case, sample_shape):
    ours, theirs, _, _ = _build(case)
    assert ours.batch_shape == tuple(theirs.batch_shape)
    assert ours.event_shape == tuple(theirs.event_shape)
    if case == "poisson":
        return
    assert ours.sample(sample_shape).shape == tuple(theirs.sample(sample_shape).shape)
    expanded, theirs_expanded = ours.expand((2, *ours.batch_shape)), theirs.expand((2, *theirs.batch_shape))
    assert expanded.batch_shape == tuple(theirs_expanded.batch_shape)
    assert expanded.sample(sample_shape).shape == tuple(theirs_expanded.sample(sample_shape).shape)
    value = CASES[case][2]()
    got = expanded.log_prob(Tensor(value)).numpy()
    np.testing.assert_allclose(
        got, theirs_expanded.log_prob(torch.tensor(value)).detach().numpy(), rtol=2e-4, atol=2e-4
    )


# (distribution, its true mean, its true variance) for the moment checks, scalar parameters
STAT_CASES = {
    "normal": (lambda: ud.Normal(1.5, 2.0), 1.5, 4.0),
    "uniform": (lambda: ud.Uniform(-1.0, 3.0), 1.0, 16 / 12),
    "exponential": (lambda: ud.Exponential(2.0), 0.5, 0.25),
    "laplace": (lambda: ud.Laplace(1.0, 0.5), 1.0, 0.5),
    "lognormal": (lambda: ud.LogNormal(0.0, 0.5), math.exp(0.125), math.expm1(0.25) * math.exp(0.25)),
    "gamma_small": (lambda: ud.Gamma(0.3, 2.0), 0.15, 0.075),
    "gamma_one": (lambda: ud.Gamma(1.0, 1.0), 1.0, 1.0),
    "gamma_big": (lambda: ud.Gamma(7.5, 0.5), 15.0, 30.0),
    "beta": (lambda: ud.Beta(2.0, 0.5), 0.8, 2 * 0.5 / (2.5**2 * 3.5)),
    "bernoulli": (lambda: ud.Bernoulli(probs=0.3), 0.3, 0.21),
    "geometric": (lambda: ud.Geometric(probs=0.4), 1.5, 0.6 / 0.16),
    "binomial": (lambda: ud.Binomial(8, probs=0.3), 2.4, 8 * 0.21),
    "categorical": (lambda: ud.Categorical(probs=Tensor([0.1, 0.2, 0.3, 0.4])), 2.0, 1.0),
}


@pytest.mark.parametrize("case", list(STAT_CASES))
def test_draw_statistics(case):
    make, mean, var = STAT_CASES[case]
    Tensor.manual_seed(1234)
    n = 20_000
    draws = make().sample((n,)).numpy().astype(np.float64)
    # 5 sigma of the sample mean; the sample variance's own standard error from the fourth moment of the draws
    assert abs(draws.mean() - mean) < 5 * math.sqrt(var / n)
    fourth = ((draws - draws.mean()) ** 4).mean()
    assert abs(draws.var() - var) < 5 * math.sqrt(max(fourth - var**2, 1e-12) / n)


def test_dirichlet_and_mvn_draw_statistics():
    Tensor.manual_seed(7)
    n = 20_000
    alpha = np.array([0.5, 1.0, 3.0], np.float32)
    draws = ud.Dirichlet(Tensor(alpha)).sample((n,)).numpy().astype(np.float64)
    np.testing.assert_allclose(draws.sum(-1), 1.0, atol=1e-5)
    a0 = alpha.sum()
    sd = np.sqrt(alpha * (a0 - alpha) / (a0**2 * (a0 + 1)) / n)
    assert (np.abs(draws.mean(0) - alpha / a0) < 5 * sd).all()
    cov = _spd(n=3).astype(np.float64)
    loc = np.array([1.0, -2.0, 0.5])
    draws = ud.MultivariateNormal(Tensor(loc.astype(np.float32)), Tensor(cov.astype(np.float32))).sample((n,)).numpy()
    assert (np.abs(draws.mean(0) - loc) < 5 * np.sqrt(np.diag(cov) / n)).all()
    np.testing.assert_allclose(np.cov(draws.T), cov, atol=5 * np.sqrt(2 / n) * np.diag(cov).max())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_beta_and_dirichlet_draws_stay_inside_the_open_unit_interval(dtype):
    # mixup's Beta(0.4, 0.4): one Gamma draw can dwarf the other, and g1 / (g1 + g0) rounded to exactly 1.0 (67 of
    # 100k draws), where log_prob is infinite; torch's draws are clamped to [tiny, 1 - eps / 2] of their dtype
    Tensor.manual_seed(0)
    torch.manual_seed(0)
    tdt = getattr(torch, dtype)
    top = 1 - torch.finfo(tdt).eps / 2
    for a in (0.4, 0.01):
        ours = ud.Beta(Tensor(a, dtype=dtype), Tensor(a, dtype=dtype))
        theirs = td.Beta(torch.tensor(a, dtype=tdt), torch.tensor(a, dtype=tdt))
        mine, ref = ours.sample((50_000,)), theirs.sample((50_000,)).numpy()
        drawn = mine.numpy()
        assert drawn.dtype == ref.dtype and ref.max() <= top and ref.min() > 0
        assert drawn.max() <= top and drawn.min() > 0
        assert np.isfinite(ours.log_prob(mine).numpy()).all()
        dirichlet = ud.Dirichlet(Tensor([a, a, a], dtype=dtype)).sample((50_000,)).numpy()
        assert dirichlet.max() <= top and dirichlet.min() > 0
    # the clamp keeps the reparameterized gradient (an identity through it)
    c = Tensor([0.5, 2.0], requires_grad=True)
    Tensor.manual_seed(3)
    ud.Beta(c[0], c[1]).rsample((2000,)).sum().backward()
    conc = torch.tensor([0.5, 2.0], requires_grad=True)
    torch.manual_seed(3)
    td.Beta(conc[0], conc[1]).rsample((2000,)).sum().backward()
    # d/da sum of draws ~ n * d(mean)/da, the same sign and scale in both
    np.testing.assert_allclose(c.grad.numpy(), conc.grad.numpy(), rtol=0.3)


def test_mixture_matches_torch():
    logits, loc, scale = _real(3, 4), _real(3, 4, 2), _pos(3, 4, 2)
    ours = ud.MixtureSameFamily(
        ud.Categorical(logits=Tensor(logits)), ud.Independent(ud.Normal(Tensor(loc), Tensor(scale)), 1)
    )
    theirs = td.MixtureSameFamily(
        td.Categorical(logits=torch.tensor(logits)),
        td.Independent(td.Normal(torch.tensor(loc), torch.tensor(scale)), 1),
    )
    assert (ours.batch_shape, ours.event_shape) == (tuple(theirs.batch_shape), tuple(theirs.event_shape))
    x = _real(5, 3, 2)
    np.testing.assert_allclose(
        ours.log_prob(Tensor(x)).numpy(), theirs.log_prob(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(ours.mean.numpy(), theirs.mean.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours.variance.numpy(), theirs.variance.numpy(), rtol=1e-4, atol=1e-5)
    assert ours.sample((6,)).shape == tuple(theirs.sample((6,)).shape) == (6, 3, 2)
    # a 1-D two-component mixture's draws: mean and variance
    Tensor.manual_seed(3)
    mix = ud.MixtureSameFamily(
        ud.Categorical(probs=Tensor([0.3, 0.7])), ud.Normal(Tensor([-2.0, 1.0]), Tensor([0.5, 1.0]))
    )
    draws = mix.sample((20_000,)).numpy().astype(np.float64)
    mean, var = mix.mean.item(), mix.variance.item()
    assert abs(draws.mean() - mean) < 5 * math.sqrt(var / 20_000)
    assert abs(draws.var() - var) < 0.1 * var


def test_independent_matches_torch():
    loc, scale, x = _real(3, 4), _pos(3, 4), _real(2, 3, 4)
    ours = ud.Independent(ud.Normal(Tensor(loc), Tensor(scale)), 1)
    theirs = td.Independent(td.Normal(torch.tensor(loc), torch.tensor(scale)), 1)
    assert (ours.batch_shape, ours.event_shape) == ((3,), (4,))
    np.testing.assert_allclose(ours.log_prob(Tensor(x)).numpy(), theirs.log_prob(torch.tensor(x)).numpy(), rtol=1e-5)
    np.testing.assert_allclose(ours.entropy().numpy(), theirs.entropy().numpy(), rtol=1e-5)
    assert ours.expand((2, 3)).batch_shape == (2, 3)


# kl pairs: (family of both, keyword parameters of p, of q)
KL_CASES = {
    "normal": ("Normal", {"loc": _real(*B), "scale": _pos(*B)}, {"loc": _real(*B), "scale": _pos(*B)}),
    "bernoulli": ("Bernoulli", {"probs": _unit(*B)}, {"probs": _unit(*B)}),
    "categorical": ("Categorical", {"logits": _real(*B, 5)}, {"probs": _simplex(*B, 5)}),
    "onehot": ("OneHotCategorical", {"logits": _real(*B, 5)}, {"logits": _real(*B, 5)}),
    "onehot_st": ("OneHotCategoricalStraightThrough", {"logits": _real(*B, 5)}, {"logits": _real(*B, 5)}),
    "mvn": (
        "MultivariateNormal",
        {"loc": _real(4, 3), "scale_tril": _tril(4)},
        {"loc": _real(4, 3), "scale_tril": _tril(4)},
    ),
    "mvn_broadcast": (
        "MultivariateNormal",
        {"loc": _real(4, 3), "scale_tril": _tril(4)},
        {"loc": _real(3), "scale_tril": _tril()},
    ),
    "beta": (
        "Beta",
        {"concentration1": _pos(*B), "concentration0": _pos(*B)},
        {"concentration1": _pos(*B), "concentration0": _pos(*B)},
    ),
    "gamma": ("Gamma", {"concentration": _pos(*B), "rate": _pos(*B)}, {"concentration": _pos(*B), "rate": _pos(*B)}),
    "exponential": ("Exponential", {"rate": _pos(*B)}, {"rate": _pos(*B)}),
    "uniform": (
        "Uniform",
        {"low": -_pos(*B), "high": _pos(*B)},
        {"low": -3 - _pos(*B), "high": 3 + _pos(*B)},
    ),
    "dirichlet": ("Dirichlet", {"concentration": _pos(*B, 5)}, {"concentration": _pos(*B, 5)}),
    "laplace": ("Laplace", {"loc": _real(*B), "scale": _pos(*B)}, {"loc": _real(*B), "scale": _pos(*B)}),
    "poisson": ("Poisson", {"rate": _pos(*B)}, {"rate": _pos(*B)}),
    "geometric": ("Geometric", {"probs": _unit(*B)}, {"probs": _unit(*B)}),
}


@pytest.mark.parametrize("case", list(KL_CASES))
def test_kl_matches_torch(case):
    family, p_params, q_params = KL_CASES[case]
    ours_p = {k: Tensor(v, requires_grad=True) for k, v in p_params.items()}
    theirs_p = {k: torch.tensor(v, requires_grad=True) for k, v in p_params.items()}
    ours_q = {k: Tensor(v) for k, v in q_params.items()}
    theirs_q = {k: torch.tensor(v) for k, v in q_params.items()}
    got = ud.kl_divergence(getattr(ud, family)(**ours_p), getattr(ud, family)(**ours_q))
    expected = td.kl_divergence(getattr(td, family)(**theirs_p), getattr(td, family)(**theirs_q))
    np.testing.assert_allclose(got.numpy(), expected.detach().numpy(), rtol=2e-4, atol=2e-4)
    got.sum().backward()
    expected.sum().backward()
    for name, param in theirs_p.items():
        np.testing.assert_allclose(ours_p[name].grad.numpy(), param.grad.numpy(), rtol=2e-3, atol=2e-3)


def test_kl_independent_and_uniform_infinite():
    p = ud.Independent(ud.Normal(Tensor(_real(3, 4)), Tensor(_pos(3, 4))), 1)
    q = ud.Independent(ud.Normal(Tensor(_real(3, 4)), Tensor(_pos(3, 4))), 1)
    tp = td.Independent(td.Normal(torch.tensor(p.base_dist.loc.numpy()), torch.tensor(p.base_dist.scale.numpy())), 1)
    tq = td.Independent(td.Normal(torch.tensor(q.base_dist.loc.numpy()), torch.tensor(q.base_dist.scale.numpy())), 1)
    np.testing.assert_allclose(ud.kl_divergence(p, q).numpy(), td.kl_divergence(tp, tq).numpy(), rtol=1e-5)
    assert ud.kl_divergence(ud.Uniform(0.0, 2.0), ud.Uniform(0.5, 3.0)).item() == math.inf


def test_register_kl_most_specific_wins():
    class MyNormal(ud.Normal):
        pass

    @ud.register_kl(MyNormal, ud.Normal)
    def _kl(p, q):
        return p.loc * 0 + 42.0

    assert ud.kl_divergence(MyNormal(0.0, 1.0), ud.Normal(1.0, 1.0)).item() == 42.0
    assert ud.kl_divergence(ud.Normal(0.0, 1.0), MyNormal(1.0, 1.0)).item() == pytest.approx(0.5)
    # (a pair torch doesn't register either; Normal-Exponential is registered, infinite)
    with pytest.raises(NotImplementedError):
        ud.kl_divergence(ud.Normal(0.0, 1.0), ud.Cauchy(0.0, 1.0))
    assert ud.kl_divergence(ud.Normal(0.0, 1.0), ud.Exponential(1.0)).item() == math.inf


def test_normal_rsample_is_loc_plus_scale_eps():
    loc, scale = Tensor([0.5, -1.0], requires_grad=True), Tensor([2.0, 0.5], requires_grad=True)
    Tensor.manual_seed(5)
    draw = ud.Normal(loc, scale).rsample((3,))
    Tensor.manual_seed(5)
    eps = Tensor.randn(3, 2).numpy()
    np.testing.assert_allclose(draw.numpy(), loc.numpy() + scale.numpy() * eps, rtol=1e-6)
    draw.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), [3.0, 3.0])
    np.testing.assert_allclose(scale.grad.numpy(), eps.sum(0), rtol=1e-5)


def test_one_hot_straight_through_rsample_is_a_draw_with_the_gradient_of_probs():
    # DreamerV2's latents: the value is a one-hot draw, the gradient that of the probabilities (torch's estimator)
    logits = _real(4, 6)
    weights = _real(3, 4, 6)
    ours = Tensor(logits, requires_grad=True)
    draw = ud.OneHotCategoricalStraightThrough(logits=ours).rsample((3,))
    assert draw.shape == (3, 4, 6) and ud.OneHotCategoricalStraightThrough.has_rsample
    np.testing.assert_array_equal(draw.numpy().sum(-1), 1.0)
    assert set(np.unique(draw.numpy())) <= {0.0, 1.0}
    (draw * Tensor(weights)).sum().backward()
    theirs = torch.tensor(logits, requires_grad=True)
    (td.OneHotCategoricalStraightThrough(logits=theirs).rsample((3,)) * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)


def _grad_of_mean(make, value, f, n=20_000, seed=11):
    p = Tensor([value], requires_grad=True)
    Tensor.manual_seed(seed)
    f(make(p).rsample((n,))).mean().backward()
    return p.grad.item()


def test_rsample_gradients_match_analytic():
    # d E[x^2] / d loc for N(loc, 1) = 2 loc; its estimator's sd is 2 / sqrt(n)
    assert abs(_grad_of_mean(lambda p: ud.Normal(p, 1.0), 1.0, lambda x: x**2) - 2.0) < 5 * 2 / math.sqrt(20_000)
    # d E[x] / d rate for Exponential(rate) = -1 / rate^2 (exact per draw up to the sample mean: -mean(x) / rate)
    assert abs(_grad_of_mean(ud.Exponential, 2.0, lambda x: x) + 0.25) < 5 * 0.25 / math.sqrt(20_000)
    # d E[x] / d concentration for Gamma(a, 1) = 1; the implicit gradient's sd is about sqrt(a) / a
    for a in (0.4, 1.0, 6.0):
        got = _grad_of_mean(lambda p: ud.Gamma(p, 1.0), a, lambda x: x)
        assert abs(got - 1.0) < 5 * max(1.0, 1 / math.sqrt(a)) / math.sqrt(20_000) * 3
    # d E[x] / d a for Beta(a, b) = b / (a + b)^2
    got = _grad_of_mean(lambda p: ud.Beta(p, 2.0), 1.5, lambda x: x)
    assert abs(got - 2.0 / 3.5**2) < 0.02
    # Uniform: d E[x] / d high = 1/2
    assert abs(_grad_of_mean(lambda p: ud.Uniform(0.0, p), 2.0, lambda x: x) - 0.5) < 0.02


@pytest.mark.parametrize(
    "family, params, value",
    [
        ("Dirichlet", ([[2.0, 0.5, 1.0]],), [0.3, 0.3, 0.4]),
        ("Gamma", ([1.0, 2.0], [1.5, 0.5]), [0.7, 2.0]),
        ("Beta", ([1.0, 2.0], [3.0, 1.0]), [0.4, 0.6]),
    ],
)
def test_log_prob_gradient_at_concentration_one_matches_torch(family, params, value):
    # xlogy(concentration - 1, value) at concentration 1 has torch's gradient log(value), not 0
    tp = [torch.tensor(p, requires_grad=True) for p in params]
    up = [Tensor(np.array(p, dtype=np.float32), requires_grad=True) for p in params]
    getattr(td, family)(*tp).log_prob(torch.tensor(value)).sum().backward()
    getattr(ud, family)(*up).log_prob(Tensor(value)).sum().backward()
    for t, u in zip(tp, up, strict=True):
        np.testing.assert_allclose(u.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", ["Bernoulli", "Categorical", "Binomial"])
def test_float64_probs_clamp_to_float64_eps(family):
    # probabilities near 0 and 1 keep float64's logits (torch clamps to the eps of the dtype, not float32's)
    p = np.array([1e-9, 0.3, 1 - 1e-12])
    v = np.array([1.0, 1.0, 0.0])
    make = {"Binomial": lambda m, probs: m.Binomial(5, probs=probs)}.get(
        family, lambda m, probs: getattr(m, family)(probs=probs)
    )
    t, u = make(td, torch.tensor(p)), make(ud, Tensor(p))
    np.testing.assert_allclose(u.logits.numpy(), t.logits.numpy(), rtol=1e-12)
    if family != "Categorical":
        np.testing.assert_allclose(u.log_prob(Tensor(v)).numpy(), t.log_prob(torch.tensor(v)).numpy(), rtol=1e-12)


def test_gamma_implicit_gradient_matches_torch():
    from uopkit.distributions.gamma import _dx_dalpha

    alpha = np.array([0.2, 0.7, 1.0, 2.5, 10.0, 60.0])
    x = np.array([0.01, 0.9, 2.2, 0.4, 13.0, 55.0])
    expected = torch._standard_gamma_grad(torch.tensor(alpha), torch.tensor(x)).numpy()
    np.testing.assert_allclose(_dx_dalpha(Tensor(alpha), Tensor(x)).numpy(), expected, rtol=5e-4)


def test_gamma_family_rsample_reaches_what_a_validated_concentration_was_computed_from():
    # a Dirichlet prior whose concentration is built from a parameter (`torch.stack([a, 2, 0.5])`): validating it
    # realizes it, and the draws' gradient stopped there (grad None; torch gives one). d E[x0] / d a = 2.5 / 3.8**2
    from uopkit.autograd import grad

    def dirichlet(lib, dist, grad_fn):
        a = lib.tensor(1.3, requires_grad=True)
        x = dist.Dirichlet(lib.stack([a, lib.tensor(2.0), lib.tensor(0.5)])).rsample((40000,))
        return float(grad_fn(x[:, 0].mean(), a)[0].item())

    def gamma(lib, dist, grad_fn):
        a = lib.tensor(1.3, requires_grad=True)
        concentration = a * lib.tensor([1.0, 2.0])
        return float(grad_fn(dist.Gamma(concentration, 2.0).rsample((40000,)).mean(), a)[0].item())

    for case, expected in ((dirichlet, 2.5 / 3.8**2), (gamma, 0.75)):
        ours, theirs = case(Tensor, ud, grad), case(torch, td, torch.autograd.grad)
        assert ours == pytest.approx(theirs, abs=0.02) and ours == pytest.approx(expected, abs=0.02)


def test_validate_args():
    with pytest.raises(ValueError):
        ud.Normal(0.0, -1.0)
    with pytest.raises(ValueError):
        ud.Normal(0.0, 1.0).log_prob(Tensor(float("nan")))
    with pytest.raises(ValueError):
        ud.Exponential(1.0).log_prob(Tensor(-1.0))
    with pytest.raises(ValueError):
        ud.Uniform(1.0, 0.0)
    with pytest.raises(ValueError):
        ud.Bernoulli(probs=1.5)
    with pytest.raises(ValueError):
        ud.Bernoulli(probs=0.5).log_prob(Tensor(0.5))
    with pytest.raises(ValueError):
        ud.Bernoulli(probs=0.5, logits=0.0)
    with pytest.raises(ValueError):
        ud.Categorical(probs=Tensor([-0.5, 1.5]))
    with pytest.raises(ValueError):
        ud.Categorical(logits=Tensor([0.0, 1.0])).log_prob(Tensor([2]))
    with pytest.raises(ValueError):
        ud.Beta(1.0, 1.0).log_prob(Tensor(1.5))
    with pytest.raises(ValueError):
        ud.Dirichlet(Tensor([1.0, 1.0])).log_prob(Tensor([0.2, 0.2]))
    with pytest.raises(ValueError):
        ud.MultivariateNormal(Tensor([0.0, 0.0]), Tensor([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError):
        ud.MultivariateNormal(Tensor([0.0, 0.0]), scale_tril=Tensor([[1.0, 1.0], [0.0, 1.0]]))
    with pytest.raises(ValueError):
        ud.Normal(Tensor([0.0, 1.0]), 1.0).log_prob(Tensor([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError):
        ud.Binomial(5, probs=0.5).log_prob(Tensor(6.0))
    with pytest.raises(ValueError):
        ud.Geometric(probs=0.0)
    # off: out-of-support values give what the formula gives, as torch
    assert ud.Exponential(1.0, validate_args=False).log_prob(Tensor(-1.0)).item() == pytest.approx(1.0)
    assert ud.Uniform(0.0, 1.0, validate_args=False).log_prob(Tensor(2.0)).item() == -math.inf


def test_set_default_validate_args():
    ud.Distribution.set_default_validate_args(False)
    try:
        assert ud.Normal(0.0, 1.0).log_prob(Tensor(float("nan"))).isnan().item()
    finally:
        ud.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError):
        ud.Normal(0.0, 1.0).log_prob(Tensor(float("nan")))


def test_constraints_check():
    assert constraints.simplex.check(Tensor([0.25, 0.75])).item()
    assert not constraints.positive.check(Tensor(0.0)).item()
    assert constraints.lower_cholesky.check(Tensor([[1.0, 0.0], [3.0, 2.0]])).item()
    assert not constraints.positive_definite.check(Tensor([[1.0, 2.0], [2.0, 1.0]])).item()


@pytest.mark.parametrize(
    "name", ["lower_triangular", "square", "symmetric", "positive_semidefinite", "positive_definite"]
)
def test_matrix_constraints_match_torch(name):
    a = RNG.standard_normal((3, 3, 3)).astype(np.float32)
    spd = a @ np.swapaxes(a, -1, -2)
    near = np.array([[100.0, 1.0], [1.0005, 2.0]], np.float32)
    for value in (a, spd, spd - 6 * np.eye(3, dtype=np.float32), np.tril(spd), near, a[0, :2], np.zeros((2, 2))):
        expected = getattr(td.constraints, name).check(torch.tensor(value)).numpy()
        np.testing.assert_array_equal(getattr(constraints, name).check(Tensor(value)).numpy(), expected)
    assert constraints.is_dependent(constraints.dependent) and not constraints.is_dependent(constraints.real)


def test_dependent_property_is_a_property_and_a_dependent_constraint():
    class Box(ud.Distribution):
        arg_constraints = {}

        def __init__(self, high):
            self.high = high
            super().__init__((), validate_args=False)

        @constraints.dependent_property(is_discrete=False, event_dim=0)
        def support(self):
            return constraints.interval(0.0, self.high)

    assert constraints.is_dependent(Box.support) and Box.support.event_dim == 0
    assert Box(2.0).support.upper_bound == 2.0


def test_one_hot_categorical_straight_through_matches_torch():
    logits = _real(2, 4)
    tl, ul = torch.tensor(logits, requires_grad=True), Tensor(logits, requires_grad=True)
    t, u = td.OneHotCategoricalStraightThrough(logits=tl), ud.OneHotCategoricalStraightThrough(logits=ul)
    draw = u.rsample((5,))
    assert u.has_rsample and draw.shape == (5, 2, 4) and (draw.sum(-1).numpy() == 1).all()
    weight = _real(4)
    (t.rsample((5,)) * torch.tensor(weight)).sum().backward()
    (draw * Tensor(weight)).sum().backward()
    # the gradient is the probabilities' (the straight-through estimator), whatever was drawn
    np.testing.assert_allclose(ul.grad.numpy(), tl.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_utils_match_torch():
    import torch.distributions.utils as tu

    import uopkit.distributions.utils as uu

    x = _unit(3, 4)
    for name in ("logits_to_probs", "probs_to_logits"):
        for binary in (False, True):
            got = getattr(uu, name)(Tensor(x), is_binary=binary).numpy()
            np.testing.assert_allclose(got, getattr(tu, name)(torch.tensor(x), is_binary=binary).numpy(), rtol=1e-6)
    np.testing.assert_array_equal(
        uu.clamp_probs(Tensor([0.0, 1.0])).numpy(), tu.clamp_probs(torch.zeros(2) + torch.tensor([0.0, 1.0])).numpy()
    )
    for n, diag in ((3, 0), (4, -1), (3, 1)):
        mat = _real(2, n, n)
        vec = uu.tril_matrix_to_vec(Tensor(mat), diag)
        np.testing.assert_array_equal(vec.numpy(), tu.tril_matrix_to_vec(torch.tensor(mat), diag).numpy())
        back = tu.vec_to_tril_matrix(torch.tensor(vec.numpy()), diag).numpy()
        np.testing.assert_array_equal(uu.vec_to_tril_matrix(vec, diag).numpy(), back)
    with pytest.raises(ValueError, match="lower triangular"):
        uu.vec_to_tril_matrix(Tensor([1.0, 2.0]))
    assert uu.euler_constant == tu.euler_constant and ud.utils.broadcast_all is uu.broadcast_all


def test_enumerate_support_and_sample_dtypes():
    assert ud.Bernoulli(probs=Tensor([0.2, 0.5])).enumerate_support().tolist() == [[0.0, 0.0], [1.0, 1.0]]
    assert ud.Categorical(probs=Tensor([0.5, 0.5])).enumerate_support().tolist() == [0, 1]
    assert ud.Categorical(probs=Tensor([0.5, 0.5])).sample((3,)).dtype == Tensor([1]).cast("int64").dtype
    assert ud.Normal(0.0, 1.0).sample().shape == ()


def test_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, uopkit.distributions; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.usefixtures("gc_of_this_test")
def test_gamma_rsample_leaves_nothing_alive():
    # the implicit-gradient rule is given to a node over the draw: given to the draw itself it held its own key
    import gc

    from uopkit.schedule import live_tensors

    def draw():
        a = Tensor([2.0, 3.0], requires_grad=True)
        ud.Gamma(a, Tensor([1.0, 1.0])).rsample().sum().backward()
        return a.grad.numpy()

    draw()
    gc.collect()
    before = len(live_tensors.computed())
    for _ in range(3):
        assert np.isfinite(draw()).all()
    gc.collect()
    assert len(live_tensors.computed()) == before


def _binomial_pmf(n, p):
    k = np.arange(n + 1)
    log_choose = np.array([math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) for j in k])
    with np.errstate(divide="ignore"):
        return np.exp(log_choose + k * np.log(p) + (n - k) * np.log1p(-p))


# (total_count, probs): inversion (mean below 10, large counts too), the rejection sampler (from mean 10 up, at its
# lower end too), and probs above 1/2 (drawn as the count of failures)
BINOMIAL_DRAW_CASES = [(10, 0.3), (1000, 0.004), (20, 0.5), (1000, 0.3), (100, 0.9), (20000, 0.3), (7, 0.97)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n, p", BINOMIAL_DRAW_CASES)
def test_binomial_draws_follow_the_pmf(n, p, dtype):
    from uopkit import dtypes

    Tensor.manual_seed(7)
    draws_n = 200_000
    dtype_ = getattr(dtypes, dtype)
    dist = ud.Binomial(Tensor([float(n)], dtype=dtype_), probs=Tensor([p], dtype=dtype_))
    draws = dist.sample((draws_n,)).numpy().ravel()
    assert draws.dtype == np.dtype(dtype) and (draws == np.round(draws)).all()
    assert draws.min() >= 0 and draws.max() <= n
    mean, var = n * p, n * p * (1 - p)
    assert abs(draws.mean() - mean) < 5 * math.sqrt(var / draws_n)
    fourth = ((draws - draws.mean()) ** 4).mean()
    assert abs(draws.var() - var) < 5 * math.sqrt((fourth - var**2) / draws_n)
    # chi-square of the histogram against the exact pmf, counts pooled into bins expecting at least 20
    expected, observed = _binomial_pmf(n, p) * draws_n, np.bincount(draws.astype(np.int64), minlength=n + 1)
    bins, pending = [], np.zeros(2)
    for pair in zip(expected, observed, strict=True):
        pending += pair
        if pending[0] >= 20:
            bins.append(pending)
            pending = np.zeros(2)
    bins[-1] = bins[-1] + pending
    exp_bins, obs_bins = np.array(bins).T
    dof = len(bins) - 1
    chi2 = ((obs_bins - exp_bins) ** 2 / exp_bins).sum()
    assert chi2 < dof + 5 * math.sqrt(2 * dof), (chi2, dof)


def test_binomial_draws_edge_parameters_and_shapes():
    Tensor.manual_seed(3)
    assert (ud.Binomial(0, probs=Tensor([0.3, 0.9])).sample((4,)).numpy() == 0).all()
    # probs 0 and 1 (through logits too), a zero count, float and int counts, broadcast against probs
    counts = np.array([5, 50, 0, 7, 3000])
    dist = ud.Binomial(Tensor(counts), probs=Tensor([0.0, 1.0, 0.5, 1.0, 0.0]))
    np.testing.assert_array_equal(dist.sample((3,)).numpy(), np.broadcast_to([0, 50, 0, 7, 0], (3, 5)))
    assert (ud.Binomial(Tensor([4.0]), logits=Tensor([-math.inf, math.inf])).sample((2,)).numpy() == [0, 4]).all()
    dist = ud.Binomial(Tensor([[3], [300]]), probs=Tensor([0.2, 0.7, 0.99]))
    draws = dist.sample((20_000,)).numpy()
    assert draws.shape == (20_000, 2, 3)
    assert (draws <= np.array([[3], [300]])).all()
    variance = dist.variance.numpy()
    assert (np.abs(draws.mean(0) - dist.mean.numpy()) < 5 * np.sqrt(variance / 20_000)).all()
    assert dist.expand((4, 2, 3)).sample((5,)).shape == (5, 4, 2, 3)
    theirs = td.Binomial(torch.tensor([]), probs=torch.tensor([])).sample((3,))
    assert ud.Binomial(Tensor([]), probs=Tensor([])).sample((3,)).shape == tuple(theirs.shape)


def test_binomial_draws_take_uniforms_independent_of_total_count(monkeypatch):
    # a fixed number of uniforms per draw whatever the count (the draws of one uniform per trial grew with it)
    requested = []
    rand = Tensor.rand

    def counting_rand(*shape, **kwargs):
        requested.append(math.prod(shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape))
        return rand(*shape, **kwargs)

    monkeypatch.setattr(Tensor, "rand", staticmethod(counting_rand))
    totals = []
    for count in (20, 2_000, 200_000):
        requested.clear()
        draws = ud.Binomial(count, probs=Tensor([0.5])).sample((100,)).numpy()
        assert abs(draws.mean() / count - 0.5) < 0.5 / math.sqrt(count)
        totals.append(sum(requested))
    assert totals[0] == totals[1] == totals[2], totals


def test_constraint_reprs_name_their_bounds_as_torchs():
    tc = td.constraints
    pairs = [
        (constraints.integer_interval(0, 2), tc.integer_interval(0, 2)),
        (constraints.interval(0.0, 1.0), tc.interval(0.0, 1.0)),
        (constraints.half_open_interval(-1.0, 1.0), tc.half_open_interval(-1.0, 1.0)),
        (constraints.greater_than(0.5), tc.greater_than(0.5)),
        (constraints.greater_than_eq(1), tc.greater_than_eq(1)),
        (constraints.less_than(3.0), tc.less_than(3.0)),
        (constraints.positive, tc.positive),
        (constraints.nonnegative_integer, tc.nonnegative_integer),
        (constraints.positive_integer, tc.positive_integer),
        (constraints.unit_interval, tc.unit_interval),
        (constraints.real, tc.real),
        (constraints.simplex, tc.simplex),
        (constraints.independent(constraints.real, 1), tc.independent(tc.real, 1)),
    ]
    for ours, theirs in pairs:
        assert repr(ours) == repr(theirs)
    # an out-of-support value's error says which bounds it broke (it printed `IntegerInterval()`)
    with pytest.raises(ValueError, match=r"IntegerInterval\(lower_bound=0, upper_bound=2\)"):
        ud.Categorical(logits=Tensor.zeros(3)).log_prob(Tensor(5))


def test_normal_cdf_icdf_of_float64_values_with_float32_parameters_match_torch():
    # Normal(0.0, 1.0) keeps float32 parameters; a float64 value's cdf and icdf are float64 in torch, computed exactly:
    # ours multiplied the scale by sqrt(2) in float32 first, 4e-9 off (cdf) and 4e-8 (icdf)
    x = np.linspace(-5, 5, 11)
    q = np.linspace(0.01, 0.99, 7)
    ours, theirs = ud.Normal(0.0, 1.0), td.Normal(0.0, 1.0)
    np.testing.assert_allclose(ours.cdf(Tensor(x)).numpy(), theirs.cdf(torch.from_numpy(x)).numpy(), rtol=1e-15)
    np.testing.assert_allclose(ours.icdf(Tensor(q)).numpy(), theirs.icdf(torch.from_numpy(q)).numpy(), rtol=1e-14)


def test_distribution_reprs_show_one_element_parameters_by_value_as_torchs():
    # `print(prior)` in a Bayesian layer: torch shows a scalar parameter's value, a larger one's shape
    assert repr(ud.Normal(0.0, 1.0)) == repr(td.Normal(0.0, 1.0))
    assert repr(ud.Gamma(Tensor(2.0), Tensor(0.5))) == repr(td.Gamma(torch.tensor(2.0), torch.tensor(0.5)))
    assert repr(ud.Normal(Tensor.zeros(3), 1.0)) == "Normal(loc: (3,), scale: (3,))"
    assert repr(ud.Normal(Tensor([0.5]), 2.0)).startswith("Normal(loc: Tensor([0.5000])")
