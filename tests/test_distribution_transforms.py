"""uopkit.distributions' transforms, constraint registries, TransformedDistribution and the families built on them
(LogNormal, LogisticNormal, RelaxedBernoulli, RelaxedOneHotCategorical, ContinuousBernoulli, FisherSnedecor) against
torch.distributions: values and gradients of maps, inverses and log |det J|; shapes, event dims, caching, equality,
signs and errors; log_prob/cdf/icdf and the rsample map of the same base noise; the KL pairs torch registers."""

import math

import numpy as np
import pytest
import torch
import torch.distributions as td
import torch.distributions.transforms as tt
from torch.distributions.utils import clamp_probs

import uopkit.distributions as ud
import uopkit.distributions.transforms as ut
from uopkit import Tensor, dtypes
from uopkit.distributions import constraints as uc
from uopkit.distributions.constraint_registry import biject_to, transform_to

RNG = np.random.default_rng(7)


def _real(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _pos(*shape, low=0.3, high=3.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


def _unit(*shape):
    return RNG.uniform(0.05, 0.95, shape).astype(np.float32)


def _simplex(*shape):
    p = RNG.uniform(0.1, 1.0, shape)
    return (p / p.sum(-1, keepdims=True)).astype(np.float32)


def _close(ours, theirs, tol=1e-5):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    np.testing.assert_allclose(ours.numpy(), theirs, rtol=tol, atol=tol)


# name: (build ours from its parameters, build torch's, parameters, x in the domain)
TRANSFORMS = {
    "exp": (lambda: ut.ExpTransform(), lambda: tt.ExpTransform(), {}, lambda: _real(3, 4)),
    "power": (
        lambda exponent: ut.PowerTransform(exponent),
        lambda exponent: tt.PowerTransform(exponent),
        {"exponent": _pos(4, low=0.5, high=2.0)},
        lambda: _pos(3, 4),
    ),
    "sigmoid": (lambda: ut.SigmoidTransform(), lambda: tt.SigmoidTransform(), {}, lambda: 3 * _real(3, 4)),
    "softplus": (lambda: ut.SoftplusTransform(), lambda: tt.SoftplusTransform(), {}, lambda: 3 * _real(3, 4)),
    "tanh": (lambda: ut.TanhTransform(), lambda: tt.TanhTransform(), {}, lambda: 2 * _real(3, 4)),
    "affine_numbers": (
        lambda: ut.AffineTransform(1.5, -2.0),
        lambda: tt.AffineTransform(1.5, -2.0),
        {},
        lambda: _real(3, 4),
    ),
    "affine_tensors": (
        lambda loc, scale: ut.AffineTransform(loc, scale),
        lambda loc, scale: tt.AffineTransform(loc, scale),
        {"loc": _real(4), "scale": _real(3, 4)},
        lambda: _real(3, 4),
    ),
    "affine_event": (
        lambda loc, scale: ut.AffineTransform(loc, scale, event_dim=1),
        lambda loc, scale: tt.AffineTransform(loc, scale, event_dim=1),
        {"loc": _real(4), "scale": _pos(3, 4)},
        lambda: _real(3, 4),
    ),
    "stick_breaking": (
        lambda: ut.StickBreakingTransform(),
        lambda: tt.StickBreakingTransform(),
        {},
        lambda: _real(3, 4),
    ),
    "reshape": (
        lambda: ut.ReshapeTransform((4,), (2, 2)),
        lambda: tt.ReshapeTransform((4,), (2, 2)),
        {},
        lambda: _real(3, 4),
    ),
    "independent": (
        lambda: ut.IndependentTransform(ut.SigmoidTransform(), 1),
        lambda: tt.IndependentTransform(tt.SigmoidTransform(), 1),
        {},
        lambda: _real(3, 4),
    ),
    "compose": (
        lambda scale: ut.ComposeTransform(
            [ut.AffineTransform(0.5, scale), ut.TanhTransform(), ut.StickBreakingTransform()]
        ),
        lambda scale: tt.ComposeTransform(
            [tt.AffineTransform(0.5, scale), tt.TanhTransform(), tt.StickBreakingTransform()]
        ),
        {"scale": _pos(4)},
        lambda: _real(3, 4),
    ),
    "inverse_sigmoid": (lambda: ut.SigmoidTransform().inv, lambda: tt.SigmoidTransform().inv, {}, lambda: _unit(3, 4)),
    "inverse_compose": (
        lambda: ut.ComposeTransform([ut.ExpTransform(), ut.AffineTransform(1.0, 2.0)]).inv,
        lambda: tt.ComposeTransform([tt.ExpTransform(), tt.AffineTransform(1.0, 2.0)]).inv,
        {},
        lambda: 1 + _pos(3, 4),
    ),
    "cat": (
        lambda: ut.CatTransform(
            [ut.ExpTransform(), ut.identity_transform, ut.TanhTransform()], dim=-1, lengths=[1, 2, 1]
        ),
        lambda: tt.CatTransform(
            [tt.ExpTransform(), tt.identity_transform, tt.TanhTransform()], dim=-1, lengths=[1, 2, 1]
        ),
        {},
        lambda: _real(3, 4),
    ),
    "stack": (
        lambda: ut.StackTransform([ut.ExpTransform(), ut.SigmoidTransform(), ut.TanhTransform()], dim=0),
        lambda: tt.StackTransform([tt.ExpTransform(), tt.SigmoidTransform(), tt.TanhTransform()], dim=0),
        {},
        lambda: _real(3, 4),
    ),
    "cdf_normal": (
        lambda loc: ut.CumulativeDistributionTransform(ud.Normal(loc, 1.5)),
        lambda loc: tt.CumulativeDistributionTransform(td.Normal(loc, 1.5)),
        {"loc": _real(4)},
        lambda: _real(3, 4),
    ),
}


def _pair(name):
    make_ours, make_theirs, params, make_x = TRANSFORMS[name]
    ours_p = {k: Tensor(v, requires_grad=True) for k, v in params.items()}
    theirs_p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    return make_ours(**ours_p), make_theirs(**theirs_p), ours_p, theirs_p, make_x()


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_transform_matches_torch(name):
    ours, theirs, ours_p, theirs_p, x = _pair(name)
    assert ours.bijective == theirs.bijective
    assert ours.domain.event_dim == theirs.domain.event_dim
    assert ours.codomain.event_dim == theirs.codomain.event_dim
    assert type(ours.codomain).__name__.lstrip("_") in type(theirs.codomain).__name__
    assert ours.forward_shape(x.shape) == tuple(theirs.forward_shape(torch.Size(x.shape)))
    x_ours, x_theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y_ours, y_theirs = ours(x_ours), theirs(x_theirs)
    _close(y_ours, y_theirs)
    assert ours.inverse_shape(y_ours.shape) == tuple(theirs.inverse_shape(y_theirs.shape))
    y = y_theirs.detach().numpy()
    _close(ours.inv(Tensor(y)), theirs.inv(torch.tensor(y)), tol=2e-5)
    ladj_ours, ladj_theirs = ours.log_abs_det_jacobian(x_ours, y_ours), theirs.log_abs_det_jacobian(x_theirs, y_theirs)
    _close(ladj_ours, ladj_theirs, tol=2e-5)
    # one loss through the map and its log |det J|: gradients to the input and to the parameters
    weights = RNG.standard_normal(y.shape).astype(np.float32)
    ((y_ours * Tensor(weights)).sum() + ladj_ours.sum()).backward()
    ((y_theirs * torch.tensor(weights)).sum() + ladj_theirs.sum()).backward()
    _close(x_ours.grad, x_theirs.grad, tol=1e-4)
    for k in ours_p:
        _close(ours_p[k].grad, theirs_p[k].grad, tol=1e-4)


@pytest.mark.parametrize(
    "make_ours,make_theirs,x",
    [
        (ut.AbsTransform, tt.AbsTransform, _real(3, 4)),
        (ut.SoftmaxTransform, tt.SoftmaxTransform, _real(3, 4)),
        (ut.LowerCholeskyTransform, tt.LowerCholeskyTransform, _real(2, 3, 3)),
        (ut.PositiveDefiniteTransform, tt.PositiveDefiniteTransform, _real(2, 3, 3)),
    ],
)
def test_non_bijective_transforms_match_torch(make_ours, make_theirs, x):
    ours, theirs = make_ours(), make_theirs()
    assert not ours.bijective and not theirs.bijective
    assert (ours.domain.event_dim, ours.codomain.event_dim) == (theirs.domain.event_dim, theirs.codomain.event_dim)
    x_ours, x_theirs = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y_ours, y_theirs = ours(x_ours), theirs(x_theirs)
    _close(y_ours, y_theirs, tol=1e-5)
    assert bool(ours.codomain.check(y_ours).all().item())
    # weighted by x, so that a softmax's gradient is not identically 0
    (y_ours * Tensor(x)).sum().backward()
    (y_theirs * torch.tensor(x)).sum().backward()
    _close(x_ours.grad, x_theirs.grad, tol=1e-4)
    # the pseudo-inverse: t(t.inv(t(x))) == t(x)
    y = y_theirs.detach().numpy()
    _close(ours.inv(Tensor(y)), theirs.inv(torch.tensor(y)), tol=1e-4)
    _close(ours(ours.inv(y_ours)), y_theirs, tol=1e-4)
    with pytest.raises(NotImplementedError):
        ours.log_abs_det_jacobian(x_ours, y_ours)


def test_signs_match_torch():
    scale = _real(5)
    assert ut.ExpTransform().sign == tt.ExpTransform().sign == 1
    assert ut.AffineTransform(0.0, -2.0).sign == tt.AffineTransform(0.0, -2.0).sign == -1
    assert ut.AffineTransform(0.0, 0.0).sign == 0
    _close(ut.AffineTransform(0.0, Tensor(scale)).sign, tt.AffineTransform(0.0, torch.tensor(scale)).sign)
    _close(ut.PowerTransform(Tensor([-1.0, 2.0])).sign, tt.PowerTransform(torch.tensor([-1.0, 2.0])).sign)
    assert ut.ComposeTransform([ut.AffineTransform(0.0, -1.0), ut.ExpTransform(), ut.AffineTransform(1, -3)]).sign == 1
    assert ut.SigmoidTransform().inv.sign == 1
    with pytest.raises(NotImplementedError):
        ut.AbsTransform().sign  # noqa: B018


def test_inverse_and_equality():
    t = ut.ExpTransform()
    assert t.inv.inv is t and t.inv is t.inv
    assert t == ut.ExpTransform() and t != ut.SigmoidTransform() and t.inv == ut.ExpTransform().inv
    assert t.inv != t
    assert ut.ExpTransform() == ut.ExpTransform(cache_size=1)
    assert ut.AffineTransform(1.0, 2.0) == ut.AffineTransform(1.0, 2.0) != ut.AffineTransform(1.0, 3.0)
    assert ut.AffineTransform(Tensor([1.0, 1.0]), 2.0) == ut.AffineTransform(1.0, 2.0)
    assert ut.AffineTransform(Tensor([1.0, 2.0]), 2.0) != ut.AffineTransform(1.0, 2.0)
    assert ut.PowerTransform(2.0) == ut.PowerTransform(Tensor(2.0)) != ut.PowerTransform(3.0)
    compose = ut.ComposeTransform([ut.ExpTransform(), ut.AffineTransform(1.0, 2.0)])
    assert compose == ut.ComposeTransform([ut.ExpTransform(), ut.AffineTransform(1.0, 2.0)])
    assert compose != ut.ComposeTransform([ut.AffineTransform(1.0, 2.0), ut.ExpTransform()])
    assert compose.inv.inv is compose and compose.inv.parts[0] == ut.AffineTransform(1.0, 2.0).inv
    assert ut.IndependentTransform(t, 1) == ut.IndependentTransform(ut.ExpTransform(), 1)
    assert ut.IndependentTransform(t, 1) != ut.IndependentTransform(t, 2)
    # a generic transform is equal only to itself, and none is hashable (torch defines __eq__ without __hash__)
    base = ut.Transform()
    assert base == base and base != ut.Transform()
    with pytest.raises(TypeError):
        hash(t)
    assert repr(t.inv) == "_InverseTransform(ExpTransform())"
    assert repr(ut.identity_transform) == repr(tt.identity_transform)


def test_caching_returns_the_same_tensors():
    x = Tensor(_real(4))
    for cache_size, same in ((0, False), (1, True)):
        t = ut.ExpTransform(cache_size=cache_size)
        y = t(x)
        assert (t(x) is y) == same
        assert (t.inv(y) is x) == same
        # the inverse remembers its pair too: t(t.inv(y2)) gives back y2
        y2 = Tensor(_pos(4))
        assert (t(t.inv(y2)) is y2) == same
    compose = ut.ComposeTransform([ut.ExpTransform(), ut.TanhTransform()], cache_size=1)
    assert all(part._cache_size == 1 for part in compose.parts)
    y = compose(x)
    assert compose.inv(y) is x
    assert ut.TanhTransform().with_cache(1)._cache_size == 1
    assert ut.AffineTransform(0.0, 2.0).with_cache(1).scale == 2.0
    assert ut.SigmoidTransform().inv.with_cache(1).inv._cache_size == 1
    with pytest.raises(ValueError, match="cache_size must be 0 or 1"):
        ut.ExpTransform(cache_size=2)


def test_tanh_cache_keeps_the_log_prob_finite_at_saturation():
    # tanh(10) rounds to 1.0 in float32: without the cache atanh(1) is inf and the log_prob is NaN or inf
    loc = Tensor([10.0, 0.0], requires_grad=True)
    base = ud.Normal(loc, 1.0)
    x = Tensor([10.0, 0.3])
    for cache_size in (0, 1):
        t = ut.TanhTransform(cache_size=cache_size)
        y = t(x)
        ladj = t.log_abs_det_jacobian(t.inv(y), y)
        logp = base.log_prob(t.inv(y)) - ladj
        finite = bool(logp.isfinite().all().item())
        assert finite == (cache_size == 1)
    expected = td.Normal(torch.tensor([10.0, 0.0]), 1.0).log_prob(torch.tensor([10.0, 0.3]))
    expected = expected - tt.TanhTransform().log_abs_det_jacobian(torch.tensor([10.0, 0.3]), None)
    _close(logp, expected)


def test_shape_and_argument_errors():
    with pytest.raises(ValueError, match=r"in_shape \(4,\) and out_shape \(3,\) hold different numbers"):
        ut.ReshapeTransform((4,), (3,))
    with pytest.raises(ValueError, match="Shape mismatch"):
        ut.ReshapeTransform((4,), (2, 2)).forward_shape((3, 5))
    with pytest.raises(ValueError, match="Too few dimensions"):
        ut.StickBreakingTransform().forward_shape(())
    with pytest.raises(ValueError, match="ReshapeTransform.event_dim is ambiguous"):
        ut.ReshapeTransform((4,), (2, 2)).event_dim  # noqa: B018
    with pytest.raises(ValueError, match="Too few dimensions"):
        ut.IndependentTransform(ut.ExpTransform(), 2)(Tensor([1.0]))
    with pytest.raises(NotImplementedError):
        ut.Transform()(Tensor([1.0]))

    class Scaled(ut.Transform):
        def __init__(self, factor, cache_size=0):
            super().__init__(cache_size=cache_size)
            self.factor = factor

    with pytest.raises(NotImplementedError, match="with_cache"):
        Scaled(2.0).with_cache(1)
    with pytest.raises(ValueError, match="size 3"):
        ut.StackTransform([ut.ExpTransform()] * 3, dim=0)(Tensor(_real(2, 4)))
    with pytest.raises(ValueError, match="size 4"):
        ut.CatTransform([ut.ExpTransform(), ut.ExpTransform()], dim=-1, lengths=[2, 2])(Tensor(_real(2, 3)))
    with pytest.raises(ValueError, match="3 lengths for 2"):
        ut.CatTransform([ut.ExpTransform(), ut.ExpTransform()], lengths=[1, 1, 1])
    with pytest.raises(TypeError):
        ut.ComposeTransform([ut.ExpTransform(), "exp"])


# constraint: (ours, torch's, transform_to only)
CONSTRAINTS = {
    "real": (uc.real, td.constraints.real, False),
    "real_vector": (uc.real_vector, td.constraints.real_vector, False),
    "positive": (uc.positive, td.constraints.positive, False),
    "nonnegative": (uc.nonnegative, td.constraints.nonnegative, False),
    "greater_than": (uc.greater_than(2.0), td.constraints.greater_than(2.0), False),
    "greater_than_eq": (uc.greater_than_eq(-1.0), td.constraints.greater_than_eq(-1.0), False),
    "less_than": (uc.less_than(1.5), td.constraints.less_than(1.5), False),
    "unit_interval": (uc.unit_interval, td.constraints.unit_interval, False),
    "interval": (uc.interval(-1.0, 3.0), td.constraints.interval(-1.0, 3.0), False),
    "half_open_interval": (uc.half_open_interval(0.0, 2.0), td.constraints.half_open_interval(0.0, 2.0), False),
    "independent_positive": (
        uc.independent(uc.positive, 1),
        td.constraints.independent(td.constraints.positive, 1),
        False,
    ),
    "simplex": (uc.simplex, td.constraints.simplex, False),
    "lower_cholesky": (uc.lower_cholesky, td.constraints.lower_cholesky, True),
    "positive_definite": (uc.positive_definite, td.constraints.positive_definite, True),
    "corr_cholesky": (uc.corr_cholesky, td.constraints.corr_cholesky, False),
    "cat": (
        uc.cat([uc.positive, uc.real], dim=-1, lengths=[2, 2]),
        td.constraints.cat([td.constraints.positive, td.constraints.real], dim=-1, lengths=[2, 2]),
        False,
    ),
    "stack": (
        uc.stack([uc.unit_interval, uc.positive, uc.real], dim=0),
        td.constraints.stack([td.constraints.unit_interval, td.constraints.positive, td.constraints.real], dim=0),
        False,
    ),
}


@pytest.mark.parametrize("registry", ["biject_to", "transform_to"])
@pytest.mark.parametrize("name", list(CONSTRAINTS))
def test_constraint_registries_match_torch(name, registry):
    ours_c, theirs_c, transform_only = CONSTRAINTS[name]
    ours_registry = biject_to if registry == "biject_to" else transform_to
    theirs_registry = getattr(td, registry)
    if transform_only and registry == "biject_to":
        with pytest.raises(NotImplementedError, match="Cannot transform"):
            ours_registry(ours_c)
        with pytest.raises(NotImplementedError):
            theirs_registry(theirs_c)
        return
    ours, theirs = ours_registry(ours_c), theirs_registry(theirs_c)
    assert repr(ours) == repr(theirs)
    assert ours.bijective == theirs.bijective
    x = _real(3, 3, 3) if ours.domain.event_dim == 2 else _real(3, 6 if name == "corr_cholesky" else 4)
    y_ours = ours(Tensor(x))
    _close(y_ours, theirs(torch.tensor(x)), tol=1e-5)
    assert bool(ours_c.check(y_ours).all().item())
    if ours.bijective:
        y = theirs(torch.tensor(x))
        _close(ours.inv(Tensor(y.numpy())), x, tol=1e-4)
        _close(ours.log_abs_det_jacobian(Tensor(x), y_ours), theirs.log_abs_det_jacobian(torch.tensor(x), y), tol=1e-4)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_corr_cholesky_transform_matches_torch(n):
    # values and gradients of the map, its inverse and log |det J| (float64: the inverse divides by what is left of a
    # row, which float32 rounds coarsely near the end of a long row)
    x = 1.5 * RNG.standard_normal((4, n * (n - 1) // 2))
    ours, theirs = ut.CorrCholeskyTransform(), tt.CorrCholeskyTransform()
    weights = RNG.standard_normal((n, n))
    xt = torch.tensor(x, requires_grad=True)
    yt = theirs(xt)
    ((yt * torch.tensor(weights)).sum() + theirs.log_abs_det_jacobian(xt, yt).sum()).backward()
    xu = Tensor(x, requires_grad=True)
    yu = ours(xu)
    ((yu * Tensor(weights)).sum() + ours.log_abs_det_jacobian(xu, yu).sum()).backward()
    _close(yu, yt, tol=1e-12)
    _close(xu.grad, xt.grad, tol=1e-10)
    _close(ours.log_abs_det_jacobian(Tensor(x), yu), theirs.log_abs_det_jacobian(torch.tensor(x), yt), tol=1e-12)
    _close(ours.inv(Tensor(yt.detach().numpy())), x, tol=1e-9)
    assert bool(uc.corr_cholesky.check(yu).all().item())
    assert ours.forward_shape((2, 4, n * (n - 1) // 2)) == theirs.forward_shape((2, 4, n * (n - 1) // 2))
    assert ours.inverse_shape((2, n, n)) == theirs.inverse_shape((2, n, n))
    assert ours.bijective and ours.domain.event_dim == 1 and ours.codomain.event_dim == 2
    assert ours == ut.CorrCholeskyTransform() and ours.inv.inv is ours


def test_corr_cholesky_transform_saturates_and_refuses_bad_shapes():
    # huge x: tanh is kept inside (-1, 1), so every diagonal entry stays positive, as torch's
    x = np.array([[40.0, -40.0, 40.0]], dtype=np.float32)
    ours = ut.CorrCholeskyTransform()(Tensor(x))
    _close(ours, tt.CorrCholeskyTransform()(torch.tensor(x)), tol=1e-6)
    assert (ours.numpy().diagonal(axis1=-2, axis2=-1) > 0).all()
    t = ut.CorrCholeskyTransform()
    # 1 x 1 (torch's log_abs_det_jacobian refuses it): the identity matrix from nothing, and back
    one = t(Tensor.zeros(2, 0))
    assert one.tolist() == [[[1.0]], [[1.0]]] and t.inv(one).shape == (2, 0)
    with pytest.raises(ValueError, match=r"last dim \(4\) is not the size of a flattened strictly lower triangle"):
        t(Tensor(_real(2, 4)))
    with pytest.raises(ValueError, match=r"last dim \(5\) is not the size"):
        t.forward_shape((5,))
    with pytest.raises(ValueError, match="Too few dimensions"):
        t.forward_shape(())
    with pytest.raises(ValueError, match="not square"):
        t.inv(Tensor(_real(3, 4)))
    with pytest.raises(ValueError, match="Too few dimensions"):
        t.inverse_shape((3,))


def test_corr_cholesky_constraint_matches_torch():
    good = tt.CorrCholeskyTransform()(torch.tensor(_real(5, 6)))
    cases = [good, good * 1.01, good.mT, -good, good + 1e-3 * torch.tril(torch.ones(4, 4), -1)]
    for value in cases:
        np.testing.assert_array_equal(
            uc.corr_cholesky.check(Tensor(value.numpy())).numpy(), td.constraints.corr_cholesky.check(value).numpy()
        )
    assert uc.corr_cholesky.event_dim == 2


def test_registry_errors_and_registration():
    with pytest.raises(NotImplementedError, match="Cannot transform _Boolean constraints"):
        biject_to(uc.boolean)
    with pytest.raises(TypeError, match="the key must be a Constraint"):
        biject_to.register(int, lambda c: ut.identity_transform)
    assert ud.constraint_registry.biject_to is biject_to and ud.transforms is ut

    class _Big(uc.Constraint):
        def check(self, value):
            return value > 10

    registry = ud.constraint_registry.ConstraintRegistry()

    @registry.register(_Big)
    def _to_big(constraint):
        return ut.ComposeTransform([ut.ExpTransform(), ut.AffineTransform(10.0, 1.0)])

    assert registry(_Big())(Tensor([0.0])).tolist() == [11.0]


def _flow_layers(lib, params):
    # a RealNVP-style flow over vectors of 4: coupling layers (user-written transforms) and a learnt affine map
    transforms = ut if lib == "ours" else tt
    constraints = uc if lib == "ours" else td.constraints

    class Coupling(transforms.Transform):
        domain = constraints.real_vector
        codomain = constraints.real_vector
        bijective = True

        def __init__(self, w, flip):
            super().__init__()
            self.w, self.flip = w, flip

        def _halves(self, v):
            a, b = v[..., :2], v[..., 2:]
            return (b, a) if self.flip else (a, b)

        def _shift_scale(self, a):
            h = (a @ self.w).tanh()
            return h[..., :2], h[..., 2:]

        def _join(self, a, b):
            pair = (b, a) if self.flip else (a, b)
            return pair[0].cat(pair[1], dim=-1) if lib == "ours" else torch.cat(pair, -1)

        def _call(self, x):
            a, b = self._halves(x)
            shift, log_scale = self._shift_scale(a)
            return self._join(a, b * log_scale.exp() + shift)

        def _inverse(self, y):
            a, b = self._halves(y)
            shift, log_scale = self._shift_scale(a)
            return self._join(a, (b - shift) * (-log_scale).exp())

        def log_abs_det_jacobian(self, x, y):
            return self._shift_scale(self._halves(x)[0])[1].sum(-1)

    return [
        Coupling(params["w1"], False),
        transforms.AffineTransform(params["loc"], params["scale"], event_dim=1),
        Coupling(params["w2"], True),
    ]


def test_realnvp_flow_matches_torch():
    params = {"w1": _real(2, 4), "w2": _real(2, 4), "loc": _real(4), "scale": _pos(4)}
    ours_p = {k: Tensor(v, requires_grad=True) for k, v in params.items()}
    theirs_p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    base_ours = ud.Independent(ud.Normal(Tensor.zeros(4), Tensor.ones(4)), 1)
    base_theirs = td.Independent(td.Normal(torch.zeros(4), torch.ones(4)), 1)
    flow_ours = ud.TransformedDistribution(base_ours, ut.ComposeTransform(_flow_layers("ours", ours_p)))
    flow_theirs = td.TransformedDistribution(base_theirs, tt.ComposeTransform(_flow_layers("torch", theirs_p)))
    assert flow_ours.batch_shape == () and flow_ours.event_shape == (4,) == tuple(flow_theirs.event_shape)
    data = _real(16, 4)
    nll_ours, nll_theirs = -flow_ours.log_prob(Tensor(data)).mean(), -flow_theirs.log_prob(torch.tensor(data)).mean()
    _close(nll_ours, nll_theirs, tol=1e-5)
    nll_ours.backward()
    nll_theirs.backward()
    for k in params:
        _close(ours_p[k].grad, theirs_p[k].grad, tol=1e-4)
    draws = flow_ours.rsample((8,))
    assert draws.shape == (8, 4)
    # the inverse of the flow takes its draws back to the base's
    chain = ut.ComposeTransform(_flow_layers("ours", ours_p))
    _close(chain(chain.inv(Tensor(data))), data, tol=1e-4)


def test_sac_tanh_gaussian_policy_matches_torch():
    mu, log_std = _real(5, 2), 0.3 * _real(5, 2)
    m, s = Tensor(mu, requires_grad=True), Tensor(log_std, requires_grad=True)
    policy = ud.TransformedDistribution(ud.Normal(m, s.exp()), [ut.TanhTransform(cache_size=1)])
    assert policy.has_rsample and policy.batch_shape == (5, 2) and policy.event_shape == ()
    Tensor.manual_seed(3)
    action = policy.rsample()
    log_prob = policy.log_prob(action).sum(-1)
    loss = (log_prob * 0.2 - action.sum(-1)).mean()
    loss.backward()
    # torch's policy, fed the same pre-squash draw through the reparameterization
    Tensor.manual_seed(3)
    eps = torch.tensor(Tensor.randn(5, 2).numpy())
    tm, ts = torch.tensor(mu, requires_grad=True), torch.tensor(log_std, requires_grad=True)
    tanh = tt.TanhTransform(cache_size=1)
    theirs = td.TransformedDistribution(td.Normal(tm, ts.exp()), [tanh])
    t_action = tanh(tm + ts.exp() * eps)
    t_loss = (theirs.log_prob(t_action).sum(-1) * 0.2 - t_action.sum(-1)).mean()
    t_loss.backward()
    _close(action, t_action)
    _close(loss, t_loss, tol=1e-5)
    _close(m.grad, tm.grad, tol=1e-5)
    _close(s.grad, ts.grad, tol=1e-5)


# name: (ours, torch's, value in the support) built from shared numpy parameters
TD_CASES = {
    "affine_exp": (
        lambda p: ud.TransformedDistribution(
            ud.Normal(p["loc"], p["scale"]), [ut.AffineTransform(1.0, -2.0), ut.ExpTransform()]
        ),
        lambda p: td.TransformedDistribution(
            td.Normal(p["loc"], p["scale"]), [tt.AffineTransform(1.0, -2.0), tt.ExpTransform()]
        ),
        {"loc": _real(3, 4), "scale": _pos(3, 4)},
        lambda: _pos(3, 4),
    ),
    "broadcast_affine": (
        lambda p: ud.TransformedDistribution(ud.Normal(0.0, 1.0), ut.AffineTransform(p["loc"], p["scale"])),
        lambda p: td.TransformedDistribution(td.Normal(0.0, 1.0), tt.AffineTransform(p["loc"], p["scale"])),
        {"loc": _real(4), "scale": _pos(4)},
        lambda: _real(2, 4),
    ),
    "stick_breaking": (
        lambda p: ud.TransformedDistribution(ud.Normal(p["loc"], p["scale"]), ut.StickBreakingTransform()),
        lambda p: td.TransformedDistribution(td.Normal(p["loc"], p["scale"]), tt.StickBreakingTransform()),
        {"loc": _real(3, 4), "scale": _pos(3, 4)},
        lambda: _simplex(3, 5),
    ),
    "reshape_mvn": (
        lambda p: ud.TransformedDistribution(
            ud.MultivariateNormal(p["loc"], _eye(4)), ut.ReshapeTransform((4,), (2, 2))
        ),
        lambda p: td.TransformedDistribution(
            td.MultivariateNormal(p["loc"], torch.eye(4)), tt.ReshapeTransform((4,), (2, 2))
        ),
        {"loc": _real(3, 4)},
        lambda: _real(3, 2, 2),
    ),
    "lognormal": (
        lambda p: ud.LogNormal(p["loc"], p["scale"]),
        lambda p: td.LogNormal(p["loc"], p["scale"]),
        {"loc": _real(3, 4), "scale": _pos(3, 4)},
        lambda: _pos(3, 4),
    ),
    "logistic_normal": (
        lambda p: ud.LogisticNormal(p["loc"], p["scale"]),
        lambda p: td.LogisticNormal(p["loc"], p["scale"]),
        {"loc": _real(3, 4), "scale": _pos(3, 4)},
        lambda: _simplex(3, 5),
    ),
    "relaxed_bernoulli_probs": (
        lambda p: ud.RelaxedBernoulli(p["temperature"], probs=p["probs"]),
        lambda p: td.RelaxedBernoulli(p["temperature"], probs=p["probs"]),
        {"temperature": np.float32(0.7), "probs": _unit(3, 4)},
        lambda: _unit(3, 4),
    ),
    "relaxed_bernoulli_logits": (
        lambda p: ud.RelaxedBernoulli(p["temperature"], logits=p["logits"]),
        lambda p: td.RelaxedBernoulli(p["temperature"], logits=p["logits"]),
        {"temperature": np.float32(1.3), "logits": _real(3, 4)},
        lambda: _unit(3, 4),
    ),
    "relaxed_onehot": (
        lambda p: ud.RelaxedOneHotCategorical(p["temperature"], logits=p["logits"]),
        lambda p: td.RelaxedOneHotCategorical(p["temperature"], logits=p["logits"]),
        {"temperature": np.float32(0.5), "logits": _real(3, 5)},
        lambda: _simplex(2, 3, 5),
    ),
    "relaxed_onehot_probs": (
        lambda p: ud.RelaxedOneHotCategorical(p["temperature"], probs=p["probs"]),
        lambda p: td.RelaxedOneHotCategorical(p["temperature"], probs=p["probs"]),
        {"temperature": np.float32(2.0), "probs": _simplex(3, 5)},
        lambda: _simplex(3, 5),
    ),
}


def _eye(n):
    return Tensor.eye(n)


def _build_td(case):
    make_ours, make_theirs, params, make_value = TD_CASES[case]
    ours_p = {k: Tensor(v, requires_grad=True) for k, v in params.items()}
    theirs_p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    return make_ours(ours_p), make_theirs(theirs_p), ours_p, theirs_p, make_value()


@pytest.mark.parametrize("case", list(TD_CASES))
def test_transformed_distribution_matches_torch(case):
    ours, theirs, ours_p, theirs_p, value = _build_td(case)
    assert isinstance(ours, ud.TransformedDistribution)
    assert ours.batch_shape == tuple(theirs.batch_shape) and ours.event_shape == tuple(theirs.event_shape)
    assert ours.has_rsample == theirs.has_rsample
    assert ours.support.event_dim == theirs.support.event_dim
    for sample_shape in ((), (2,)):
        assert ours.sample(sample_shape).shape == tuple(theirs.sample(sample_shape).shape)
        assert ours.rsample(sample_shape).shape == tuple(theirs.rsample(sample_shape).shape)
    got, expected = ours.log_prob(Tensor(value)), theirs.log_prob(torch.tensor(value))
    _close(got, expected, tol=2e-5)
    got.sum().backward()
    expected.sum().backward()
    for k, param in theirs_p.items():
        if param.grad is not None:
            _close(ours_p[k].grad, param.grad, tol=1e-4)
    expanded, theirs_expanded = ours.expand((2, *ours.batch_shape)), theirs.expand((2, *theirs.batch_shape))
    assert type(expanded) is type(ours)
    assert expanded.batch_shape == tuple(theirs_expanded.batch_shape)
    assert expanded.sample((3,)).shape == tuple(theirs_expanded.sample((3,)).shape)
    _close(expanded.log_prob(Tensor(value)), theirs_expanded.log_prob(torch.tensor(value)), tol=2e-5)


@pytest.mark.parametrize("case", ["affine_exp", "broadcast_affine", "lognormal"])
def test_transformed_cdf_icdf_match_torch(case):
    ours, theirs, _, _, value = _build_td(case)
    _close(ours.cdf(Tensor(value)), theirs.cdf(torch.tensor(value)), tol=2e-5)
    q = _unit(3, 4) if case != "broadcast_affine" else _unit(2, 4)
    _close(ours.icdf(Tensor(q)), theirs.icdf(torch.tensor(q)), tol=1e-4)


def test_transformed_distribution_errors_and_support():
    normal = ud.Normal(Tensor(_real(3)), 1.0)
    with pytest.raises(ValueError, match="transforms takes a Transform or a list of them, got type"):
        ud.TransformedDistribution(normal, ut.ExpTransform)
    with pytest.raises(
        ValueError, match=r"every entry of transforms must be a Transform, got \['ExpTransform', 'NoneType'\]"
    ):
        ud.TransformedDistribution(normal, [ut.ExpTransform(), None])
    with pytest.raises(ValueError, match=r"the transforms act on 2 dims, the base distribution has only 1"):
        ud.TransformedDistribution(normal, ut.LowerCholeskyTransform())
    squashed = ud.TransformedDistribution(normal, ut.TanhTransform())
    with pytest.raises(ValueError, match="support"):
        squashed.log_prob(Tensor([0.5, 2.0, 0.0]))
    with pytest.raises(ValueError, match="support"):
        ud.LogNormal(0.0, 1.0).log_prob(Tensor(-1.0))
    with pytest.raises(ValueError, match="scale"):
        ud.LogNormal(0.0, -1.0)
    with pytest.raises(NotImplementedError):
        squashed.entropy()
    assert ud.TransformedDistribution(normal, []).support is normal.support
    assert ud.TransformedDistribution(normal, []).log_prob(Tensor([0.0, 0.0, 0.0])).shape == (3,)
    # a decreasing chain flips the cdf: P(-X <= 1) = 1 - P(X < -1)
    flipped = ud.TransformedDistribution(ud.Normal(0.0, 1.0), ut.AffineTransform(0.0, -1.0))
    assert abs(flipped.cdf(Tensor(1.0)).item() - (1 - td.Normal(0.0, 1.0).cdf(torch.tensor(-1.0)).item())) < 1e-6
    assert abs(flipped.icdf(Tensor(0.25)).item() + td.Normal(0.0, 1.0).icdf(torch.tensor(0.75)).item()) < 1e-5


def _same_noise(make_ours, torch_map, params, noise_shape, noise=Tensor.rand):
    """Our rsample in float64 and torch's map of the same base draws: values and the gradients of a loss."""
    ours = {k: Tensor(np.float64(v), dtype=dtypes.float64, requires_grad=True) for k, v in params.items()}
    theirs = {k: torch.tensor(np.float64(v), dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    Tensor.manual_seed(11)
    x = make_ours(**ours).rsample((16,))
    Tensor.manual_seed(11)
    u = torch.tensor(noise(*noise_shape, dtype=dtypes.float64).numpy())
    y = torch_map(u, **theirs)
    np.testing.assert_allclose(x.numpy(), y.detach().numpy(), rtol=1e-9, atol=1e-12)
    (x * x.sin()).sum().backward()
    (y * y.sin()).sum().backward()
    for k in params:
        np.testing.assert_allclose(ours[k].grad.numpy(), theirs[k].grad.numpy(), rtol=1e-8, atol=1e-12)


def _torch_relaxed_bernoulli(u, temperature, probs):
    u, p = clamp_probs(u), clamp_probs(probs.expand(u.shape))
    return torch.sigmoid((u.log() - (-u).log1p() + p.log() - (-p).log1p()) / temperature).clamp(
        torch.finfo(u.dtype).tiny, 1 - torch.finfo(u.dtype).eps
    )


def _torch_relaxed_onehot(u, temperature, logits):
    logits = logits - logits.logsumexp(-1, keepdim=True)
    scores = (logits - (-clamp_probs(u).log()).log()) / temperature
    return (scores - scores.logsumexp(-1, keepdim=True)).exp()


def test_rsample_maps_match_torch():
    _same_noise(ud.RelaxedBernoulli, _torch_relaxed_bernoulli, {"temperature": 0.4, "probs": _unit(3)}, (16, 3))
    _same_noise(
        ud.RelaxedOneHotCategorical, _torch_relaxed_onehot, {"temperature": 0.6, "logits": _real(2, 4)}, (16, 2, 4)
    )
    _same_noise(
        ud.ContinuousBernoulli,
        lambda u, probs: td.ContinuousBernoulli(probs).icdf(u),
        {"probs": np.array([0.1, 0.4995, 0.8], np.float32)},
        (16, 3),
    )
    _same_noise(
        ud.LogisticNormal,
        lambda e, loc, scale: td.LogisticNormal(loc, scale).transforms[0](loc + scale * e),
        {"loc": _real(3), "scale": _pos(3)},
        (16, 3),
        noise=Tensor.randn,
    )


def test_gumbel_softmax_draws_concentrate_at_low_temperature():
    logits = Tensor([0.0, 1.0, 2.0])
    Tensor.manual_seed(5)
    draws = ud.RelaxedOneHotCategorical(Tensor(0.05), logits=logits).sample((4000,)).numpy()
    assert np.allclose(draws.sum(-1), 1.0, atol=1e-5)
    assert (draws.max(-1) > 0.9).mean() > 0.85
    frequencies = np.bincount(draws.argmax(-1), minlength=3) / 4000
    expected = torch.tensor([0.0, 1.0, 2.0]).softmax(-1).numpy()
    assert np.abs(frequencies - expected).max() < 5 * math.sqrt(0.25 / 4000)


# ContinuousBernoulli: probs away from and within the Taylor region around 1/2
CB_PROBS = np.array([[0.05, 0.3, 0.4995, 0.5], [0.5005, 0.7, 0.95, 0.2]], np.float32)
CB_METHODS = ("log_prob", "cdf", "icdf", "mean", "variance", "stddev", "entropy")


@pytest.mark.parametrize("param", ["probs", "logits"])
@pytest.mark.parametrize("method", CB_METHODS)
def test_continuous_bernoulli_matches_torch(method, param):
    value = np.clip(_unit(2, 4), 0.0, 1.0)
    raw = CB_PROBS if param == "probs" else np.log(CB_PROBS / (1 - CB_PROBS)) * 1.5
    ours_p, theirs_p = Tensor(raw, requires_grad=True), torch.tensor(raw, requires_grad=True)
    ours, theirs = ud.ContinuousBernoulli(**{param: ours_p}), td.ContinuousBernoulli(**{param: theirs_p})
    if method in ("log_prob", "cdf", "icdf"):
        got, expected = getattr(ours, method)(Tensor(value)), getattr(theirs, method)(torch.tensor(value))
    elif method == "entropy":
        got, expected = ours.entropy(), theirs.entropy()
    else:
        got, expected = getattr(ours, method), getattr(theirs, method)
    _close(got, expected, tol=1e-4)
    got.sum().backward()
    expected.sum().backward()
    _close(ours_p.grad, theirs_p.grad, tol=2e-3)


def test_continuous_bernoulli_shapes_and_errors():
    d, t = ud.ContinuousBernoulli(probs=Tensor(CB_PROBS)), td.ContinuousBernoulli(probs=torch.tensor(CB_PROBS))
    assert d.batch_shape == tuple(t.batch_shape) and d.event_shape == ()
    assert d.rsample((3,)).shape == (3, 2, 4) and d.expand((5, 2, 4)).sample().shape == (5, 2, 4)
    with pytest.raises(ValueError, match="probs"):
        ud.ContinuousBernoulli(probs=Tensor([1.5]))
    with pytest.raises(ValueError, match=r"exactly one of them \(got both\)"):
        ud.ContinuousBernoulli(probs=Tensor([0.5]), logits=Tensor([0.0]))
    with pytest.raises(ValueError, match="support"):
        d.log_prob(Tensor(np.full((2, 4), 1.5, np.float32)))
    with pytest.raises(NotImplementedError):
        d.mode  # noqa: B018


def test_relaxed_families_parameters_and_errors():
    probs = _unit(3)
    d = ud.RelaxedBernoulli(Tensor(0.5), probs=Tensor(probs))
    t = td.RelaxedBernoulli(torch.tensor(0.5), probs=torch.tensor(probs))
    _close(d.logits, t.logits)
    _close(d.probs, t.probs)
    assert d.temperature.item() == 0.5
    assert isinstance(d.base_dist, ud.LogitRelaxedBernoulli)
    logit_value = _real(2, 3)
    _close(d.base_dist.log_prob(Tensor(logit_value)), t.base_dist.log_prob(torch.tensor(logit_value)))
    with pytest.raises(ValueError, match="probs"):
        ud.RelaxedBernoulli(Tensor(0.5), probs=Tensor([1.5]))
    with pytest.raises(ValueError, match=r"exactly one of them \(got neither\)"):
        ud.RelaxedBernoulli(Tensor(0.5))
    c = ud.RelaxedOneHotCategorical(Tensor(0.5), probs=Tensor(_simplex(2, 3)))
    assert isinstance(c.base_dist, ud.ExpRelaxedCategorical)
    assert c.probs.shape == (2, 3) and c.logits.shape == (2, 3) and c.temperature.item() == 0.5
    with pytest.raises(ValueError, match="support"):
        c.log_prob(Tensor([[0.5, 0.6, 0.1], [0.2, 0.2, 0.6]]))
    with pytest.raises(ValueError, match="probs"):
        ud.RelaxedOneHotCategorical(Tensor(0.5), probs=Tensor([[0.5, -0.5, 1.0]]))
    ln = ud.LogisticNormal(0.0, 1.0)
    assert ln.batch_shape == () and ln.event_shape == (2,) and ln.loc.shape == (1,)
    with pytest.raises(ValueError, match="scale"):
        ud.LogisticNormal(Tensor([0.0]), Tensor([-1.0]))


FISHER = {"df1": np.array([[0.8, 1.5, 3.0, 7.0]], np.float32), "df2": np.array([[1.5], [3.0], [6.0]], np.float32)}


@pytest.mark.parametrize("method", ["log_prob", "mean", "mode", "variance"])
def test_fisher_snedecor_matches_torch(method):
    ours_p = {k: Tensor(v, requires_grad=True) for k, v in FISHER.items()}
    theirs_p = {k: torch.tensor(v, requires_grad=True) for k, v in FISHER.items()}
    ours, theirs = ud.FisherSnedecor(**ours_p), td.FisherSnedecor(**theirs_p)
    assert ours.batch_shape == tuple(theirs.batch_shape) == (3, 4)
    if method == "log_prob":
        value = _pos(3, 4)
        got, expected = ours.log_prob(Tensor(value)), theirs.log_prob(torch.tensor(value))
    else:
        got, expected = getattr(ours, method), getattr(theirs, method)
    np.testing.assert_allclose(got.numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-5, equal_nan=True)
    if method == "log_prob":
        got.sum().backward()
        expected.sum().backward()
        for k in FISHER:
            _close(ours_p[k].grad, theirs_p[k].grad, tol=1e-4)


def test_fisher_snedecor_draws():
    d = ud.FisherSnedecor(Tensor([4.0, 10.0]), Tensor([10.0, 20.0]))
    assert d.expand((3, 2)).rsample((5,)).shape == (5, 3, 2)
    Tensor.manual_seed(2)
    draws = d.sample((20000,)).numpy()
    mean, std = d.mean.numpy(), d.stddev.numpy()
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * std / math.sqrt(20000))
    # the reparameterized draws carry a gradient to both degrees of freedom
    df1 = Tensor([4.0], requires_grad=True)
    ud.FisherSnedecor(df1, Tensor([10.0])).rsample((64,)).mean().backward()
    assert df1.grad is not None and bool(df1.grad.isfinite().all().item())
    with pytest.raises(ValueError, match="df1"):
        ud.FisherSnedecor(-1.0, 2.0)


def _cb(probs):
    return ud.ContinuousBernoulli(probs=Tensor(probs))


# name: (p, q), ours; torch's copies are built from their parameters
KL_CASES = {
    "cb_cb": lambda: (_cb(CB_PROBS), _cb(CB_PROBS[::-1].copy())),
    "beta_cb": lambda: (ud.Beta(Tensor(_pos(2, 4)), Tensor(_pos(2, 4))), _cb(CB_PROBS)),
    "uniform_cb": lambda: (ud.Uniform(0.1, Tensor(_unit(2, 4) * 0.5 + 0.45)), _cb(CB_PROBS)),
    "cb_exponential": lambda: (_cb(CB_PROBS), ud.Exponential(Tensor(_pos(2, 4)))),
    "cb_normal": lambda: (_cb(CB_PROBS), ud.Normal(Tensor(_real(2, 4)), Tensor(_pos(2, 4)))),
    "cb_uniform": lambda: (_cb(CB_PROBS), ud.Uniform(-0.5, Tensor(1.0 + _pos(2, 4)))),
    "cb_pareto": lambda: (_cb(CB_PROBS), ud.Pareto(1.0, 2.0)),
    "normal_cb": lambda: (ud.Normal(0.0, Tensor(_pos(2, 4))), _cb(CB_PROBS)),
    "gamma_cb": lambda: (ud.Gamma(Tensor(_pos(2, 4)), 1.0), _cb(CB_PROBS)),
    "lognormal_lognormal": lambda: (
        ud.LogNormal(Tensor(_real(2, 4)), Tensor(_pos(2, 4))),
        ud.LogNormal(Tensor(_real(2, 4)), Tensor(_pos(2, 4))),
    ),
    "logistic_normal": lambda: (
        ud.LogisticNormal(Tensor(_real(2, 3)), Tensor(_pos(2, 3))),
        ud.LogisticNormal(Tensor(_real(2, 3)), Tensor(_pos(2, 3))),
    ),
}


def _to_torch(d):
    # torch's copy of one of ours (the parameters read back)
    name = type(d).__name__
    if name == "ContinuousBernoulli":
        return td.ContinuousBernoulli(probs=torch.tensor(d.probs.numpy()))
    fields = {
        "Beta": ("concentration1", "concentration0"),
        "Uniform": ("low", "high"),
        "Exponential": ("rate",),
        "Gamma": ("concentration", "rate"),
        "Normal": ("loc", "scale"),
        "Pareto": ("scale", "alpha"),
        "LogNormal": ("loc", "scale"),
        "LogisticNormal": ("loc", "scale"),
    }[name]
    return getattr(td, name)(*(torch.tensor(getattr(d, f).numpy()) for f in fields))


@pytest.mark.parametrize("case", list(KL_CASES))
def test_kl_matches_torch(case):
    p, q = KL_CASES[case]()
    got, expected = ud.kl_divergence(p, q), td.kl_divergence(_to_torch(p), _to_torch(q))
    np.testing.assert_allclose(got.numpy(), np.broadcast_to(expected.numpy(), got.shape), rtol=1e-4, atol=1e-4)


def test_kl_boundaries_and_unregistered_pairs():
    # [0, 1] against a ContinuousBernoulli is finite (torch's strict test makes it inf), wider or narrower is inf
    cb = ud.ContinuousBernoulli(probs=Tensor([0.3]))
    assert math.isfinite(ud.kl_divergence(ud.Uniform(0.0, 1.0), cb).item())
    assert math.isfinite(ud.kl_divergence(cb, ud.Uniform(0.0, 1.0)).item())
    assert ud.kl_divergence(ud.Uniform(-0.1, 1.0), cb).item() == math.inf
    assert ud.kl_divergence(cb, ud.Uniform(0.1, 1.0)).item() == math.inf
    relaxed = ud.RelaxedBernoulli(Tensor(0.5), probs=Tensor([0.3]))
    with pytest.raises(NotImplementedError):
        ud.kl_divergence(relaxed, relaxed)
    tanh_normal = ud.TransformedDistribution(ud.Normal(0.0, 1.0), ut.TanhTransform())
    with pytest.raises(NotImplementedError):
        ud.kl_divergence(ud.LogNormal(0.0, 1.0), tanh_normal)
