"""uopkit.distributions' matrix families (LKJCholesky, Wishart; distributions/matrix.py) against torch.distributions:
log_prob, entropy and moments with their gradients with respect to the parameters, shapes, argument checks and
errors, and the statistics of many draws (the draws themselves come from uopkit's generator)."""

import math
import warnings

import numpy as np
import pytest
import torch
import torch.distributions as td

import uopkit.distributions as ud
from uopkit import Tensor

RNG = np.random.default_rng(11)


def _close(ours, theirs, tol):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    np.testing.assert_allclose(ours.numpy(), theirs, rtol=tol, atol=tol)


def _spd(*batch, n=3):
    a = RNG.standard_normal((*batch, n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


# ---- LKJCholesky


@pytest.mark.parametrize("n", [2, 3, 5])
def test_lkj_log_prob_and_gradient_match_torch(n):
    concentration = np.array([0.5, 1.0, 2.5])
    values = td.LKJCholesky(n, torch.tensor(1.5, dtype=torch.float64)).sample((4, 3))
    ct = torch.tensor(concentration, requires_grad=True)
    theirs = td.LKJCholesky(n, ct).log_prob(values)
    theirs.sum().backward()
    cu = Tensor(concentration, requires_grad=True)
    ours = ud.LKJCholesky(n, cu).log_prob(Tensor(values.numpy()))
    ours.sum().backward()
    _close(ours, theirs, 1e-12)
    _close(cu.grad, ct.grad, 1e-12)
    assert ours.shape == (4, 3)


def test_lkj_shapes_expand_and_errors():
    d = ud.LKJCholesky(4, Tensor([1.0, 2.0]))
    assert d.batch_shape == (2,) and d.event_shape == (4, 4)
    assert d.sample((5,)).shape == (5, 2, 4, 4)
    e = d.expand((3, 2))
    assert e.batch_shape == (3, 2) and e.sample().shape == (3, 2, 4, 4) and e.dim == 4
    assert ud.LKJCholesky(3).concentration.item() == 1.0
    assert not ud.LKJCholesky(3).has_rsample
    for dim in (1, 0):
        with pytest.raises(ValueError, match="LKJCholesky: dim must be an int >= 2, got"):
            ud.LKJCholesky(dim)
    with pytest.raises(ValueError, match="concentration"):
        ud.LKJCholesky(3, Tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="support"):
        ud.LKJCholesky(2).log_prob(Tensor([[1.0, 0.0], [0.5, 0.5]]))
    with pytest.raises(ValueError, match=r"must end in the event shape \(3, 3\)"):
        ud.LKJCholesky(3).log_prob(Tensor.eye(2))
    # the support: a bijection from unconstrained vectors onto it, as torch's registry gives
    assert isinstance(ud.biject_to(ud.LKJCholesky(3).support), ud.CorrCholeskyTransform)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_lkj_draw_statistics(n):
    # every off-diagonal correlation C = L L^T is Beta(b, b) on (-1, 1) with b = eta - 1 + n / 2, so E[C_ij^2] is
    # 1 / (2 eta + n - 1) at every position. torch 2.13's sampler matches that for n = 2 and for the second row
    # (compared below), but its later rows draw y ~ Beta(i - 1/2, .) where the onion method has Beta(i / 2, .): its
    # E[C_20^2] at n = 3, eta = 1 is 0.30, not 0.25, so beyond them the check is against the exact value
    Tensor.manual_seed(3)
    concentration = np.array([0.7, 1.0, 3.0])
    draws = ud.LKJCholesky(n, Tensor(concentration)).sample((20000,)).numpy()
    torch.manual_seed(3)
    torch_draws = td.LKJCholesky(n, torch.tensor(concentration)).sample((20000,)).numpy()
    assert draws.shape == (20000, 3, n, n)
    assert bool(ud.constraints.corr_cholesky.check(Tensor(draws)).all().item())
    corr = draws @ np.swapaxes(draws, -1, -2)
    rows, cols = np.tril_indices(n, -1)
    second_moment = (corr[..., rows, cols] ** 2).mean(0)
    exact = 1 / (2 * concentration + n - 1)
    np.testing.assert_allclose(second_moment, np.broadcast_to(exact[:, None], second_moment.shape), rtol=0.05)
    # the second row, against torch's draws: its square and its diagonal's mean
    np.testing.assert_allclose((draws[..., 1, 0] ** 2).mean(0), (torch_draws[..., 1, 0] ** 2).mean(0), rtol=0.05)
    np.testing.assert_allclose(draws[..., 1, 1].mean(0), torch_draws[..., 1, 1].mean(0), rtol=0.02)
    # symmetric about 0, as torch's
    assert np.abs(corr[..., rows, cols].mean(0)).max() < 0.02


# ---- Wishart


def _wishart_pair(kind, matrix, df, grad=True):
    # ours and torch's from the same parameters (numpy), with the parameter tensors that take gradients
    given = {
        "covariance_matrix": matrix,
        "precision_matrix": np.linalg.inv(matrix),
        "scale_tril": np.linalg.cholesky(matrix),
    }
    mt, dft = torch.tensor(given[kind], requires_grad=grad), torch.tensor(df, requires_grad=grad)
    mu, dfu = Tensor(given[kind], requires_grad=grad), Tensor(df, requires_grad=grad)
    return ud.Wishart(dfu, **{kind: mu}), td.Wishart(dft, **{kind: mt}), (mu, dfu), (mt, dft)


@pytest.mark.parametrize("kind", ["covariance_matrix", "precision_matrix", "scale_tril"])
def test_wishart_log_prob_entropy_and_gradients_match_torch(kind):
    matrix, df = _spd(2), np.array([3.5, 7.0])
    values = td.Wishart(torch.tensor(6.0, dtype=torch.float64), covariance_matrix=torch.eye(3, dtype=torch.float64))
    values = values.sample((4, 2))
    ours, theirs, (mu, dfu), (mt, dft) = _wishart_pair(kind, matrix, df)
    lu, lt = ours.log_prob(Tensor(values.numpy())), theirs.log_prob(values)
    _close(lu, lt, 1e-10)
    _close(ours.entropy(), theirs.entropy(), 1e-10)
    (lu.sum() + ours.entropy().sum()).backward()
    (lt.sum() + theirs.entropy().sum()).backward()
    _close(dfu.grad, dft.grad, 1e-8)
    # (scale_tril: torch's cholesky_solve backward also sends a gradient to the entries above the diagonal, as if the
    # factor were a full matrix; ours is torch's)
    _close(mu.grad, mt.grad, 1e-10)
    assert lu.shape == (4, 2) and ours.batch_shape == (2,) and ours.event_shape == (3, 3)


@pytest.mark.parametrize("kind", ["covariance_matrix", "precision_matrix", "scale_tril"])
@pytest.mark.parametrize("df", [np.array([3.5, 4.5]), np.array([5.0, 9.0])])
def test_wishart_moments_and_matrices_match_torch(kind, df):
    ours, theirs, _, _ = _wishart_pair(kind, _spd(2), df, grad=False)
    for name in ("mean", "variance", "mode", "covariance_matrix", "precision_matrix", "scale_tril"):
        # (mode is NaN where df <= n + 1, as torch's)
        ours_value, theirs_value = getattr(ours, name), getattr(theirs, name)
        assert ours_value.shape == tuple(theirs_value.shape), name
        np.testing.assert_allclose(ours_value.numpy(), theirs_value.numpy(), rtol=1e-10, atol=1e-10, err_msg=name)


def test_wishart_df_shapes_and_expand():
    # a number df takes the matrices' batch; a Tensor df broadcasts with it
    cov = Tensor(_spd(2))
    assert ud.Wishart(4.0, covariance_matrix=cov).batch_shape == (2,)
    d = ud.Wishart(Tensor([[4.0], [5.0], [6.0]]), covariance_matrix=cov)
    assert d.batch_shape == (3, 2) and d.df.shape == (3, 2)
    assert d.rsample((5,)).shape == (5, 3, 2, 3, 3)
    assert d.log_prob(Tensor(np.broadcast_to(np.eye(3), (3, 2, 3, 3)).copy())).shape == (3, 2)
    e = ud.Wishart(4.0, scale_tril=Tensor(np.linalg.cholesky(_spd()))).expand((4,))
    assert e.batch_shape == (4,) and e.scale_tril.shape == (4, 3, 3) and e.mean.shape == (4, 3, 3)
    assert e.sample((2,)).shape == (2, 4, 3, 3)


def test_wishart_errors_match_torch():
    eye = Tensor.eye(3)
    # none or two of the matrices: torch raises AssertionError; ours is a ValueError that is one too
    for kwargs in ({}, {"covariance_matrix": eye, "scale_tril": eye}):
        with pytest.raises(AssertionError, match="Wishart: give exactly one of"):
            ud.Wishart(4.0, **kwargs)
        with pytest.raises(ValueError, match="Wishart: give exactly one of"):
            ud.Wishart(4.0, **kwargs)
    with pytest.raises(ValueError, match=r"covariance_matrix must be a matrix .* got shape \(2,\)"):
        ud.Wishart(4.0, covariance_matrix=Tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="square"):
        ud.Wishart(4.0, covariance_matrix=Tensor.ones(2, 3))
    # df must exceed n - 1, whatever validate_args says
    for df in (2.0, Tensor([5.0, 1.5])):
        with pytest.raises(ValueError, match="Wishart: df must exceed 2"):
            ud.Wishart(df, covariance_matrix=eye, validate_args=False)
    with pytest.warns(UserWarning, match="Wishart: df below 3"):
        ud.Wishart(2.5, covariance_matrix=eye)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ud.Wishart(3.0, covariance_matrix=eye)
    with pytest.raises(ValueError, match="covariance_matrix"):
        ud.Wishart(4.0, covariance_matrix=Tensor([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="scale_tril"):
        ud.Wishart(4.0, scale_tril=Tensor([[1.0, 1.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="support"):
        ud.Wishart(4.0, covariance_matrix=Tensor.eye(2)).log_prob(Tensor([[1.0, 2.0], [2.0, 1.0]]))
    assert ud.Wishart(4.0, covariance_matrix=eye).has_rsample


def test_wishart_draw_statistics_and_rsample_gradient():
    # the mean and variance of many Bartlett draws against torch's formulas; the draws' mean differentiated with
    # respect to df is Sigma (mean = df Sigma), through the chi2 draws' implicit gradient
    Tensor.manual_seed(4)
    cov, df = _spd(2), np.array([3.5, 8.0])
    theirs = td.Wishart(torch.tensor(df), covariance_matrix=torch.tensor(cov))
    dfu = Tensor(df, requires_grad=True)
    draws = ud.Wishart(dfu, covariance_matrix=Tensor(cov)).rsample((20000,))
    draws_np = draws.numpy()
    assert draws_np.shape == (20000, 2, 3, 3)
    assert bool(ud.constraints.positive_definite.check(Tensor(draws_np)).all().item())
    scale = np.abs(theirs.mean.numpy()).max()
    assert np.abs(draws_np.mean(0) - theirs.mean.numpy()).max() < 0.03 * scale
    np.testing.assert_allclose(draws_np.var(0), theirs.variance.numpy(), rtol=0.12)
    draws.mean(0).sum().backward()
    np.testing.assert_allclose(dfu.grad.numpy(), cov.sum((-1, -2)), rtol=0.03)


def test_wishart_log_prob_is_normalized_in_one_dimension():
    # 1 x 1: Wishart(df, s) is Gamma(df / 2, rate 1 / (2 s)), whose log density is known in closed form
    x = np.array([0.3, 1.0, 4.0])
    ours = ud.Wishart(Tensor([5.0]), covariance_matrix=Tensor([[2.0]])).log_prob(Tensor(x.reshape(3, 1, 1, 1)))
    a, rate = 2.5, 0.25
    exact = a * math.log(rate) + (a - 1) * np.log(x) - rate * x - math.lgamma(a)
    np.testing.assert_allclose(ours.numpy().ravel(), exact, rtol=1e-6)
