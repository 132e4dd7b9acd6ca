"""MultivariateNormal, LowRankMultivariateNormal and the distributions built from others: Independent (batch axes read
as event axes) and MixtureSameFamily (a Categorical mixture of one family's batch)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from uopkit.distributions import constraints
from uopkit.distributions.discrete import Categorical
from uopkit.distributions.distribution import (
    LOG_2PI,
    Distribution,
    _broadcast_shape,
    as_tensor,
    standard_normal,
    sum_rightmost,
)
from uopkit.tensor import Tensor, no_grad

__all__ = ["Independent", "LowRankMultivariateNormal", "MixtureSameFamily", "MultivariateNormal"]


def _batch_mahalanobis(scale_tril: Tensor, diff: Tensor) -> Tensor:
    # |L^-1 diff|^2 over the last axis, for lower-triangular L, batch axes broadcast
    shape = _broadcast_shape(scale_tril.shape[:-2], diff.shape[:-1])
    n = diff.shape[-1]
    solved = scale_tril.expand((*shape, n, n)).solve_triangular(diff.expand((*shape, n)).unsqueeze(-1), upper=False)
    return (solved.squeeze(-1) ** 2).sum(-1)


class MultivariateNormal(Distribution):
    """N(loc, Sigma) over the last axis, Sigma given as exactly one of `covariance_matrix`, `precision_matrix` or its
    Cholesky factor `scale_tril`; rsample is loc + L eps. A covariance or precision matrix is factored once
    (Tensor.cholesky, which reads back whether the matrix is positive definite).

    >>> from uopkit import Tensor
    >>> round(MultivariateNormal(Tensor([0.0, 0.0]), Tensor.eye(2)).log_prob(Tensor([0.0, 0.0])).item(), 4)
    -1.8379
    """

    arg_constraints = {
        "loc": constraints.real_vector,
        "covariance_matrix": constraints.positive_definite,
        "precision_matrix": constraints.positive_definite,
        "scale_tril": constraints.lower_cholesky,
    }
    support = constraints.real_vector
    has_rsample = True
    _expanded = ("loc", "_unbroadcasted_scale_tril")

    def __init__(
        self,
        loc: Tensor,
        covariance_matrix: Tensor | None = None,
        precision_matrix: Tensor | None = None,
        scale_tril: Tensor | None = None,
        validate_args: bool | None = None,
    ):
        loc = as_tensor(loc)
        if loc.ndim < 1:
            raise ValueError("loc must be at least one-dimensional.")
        given = [(n, m) for n, m in (("covariance_matrix", covariance_matrix), ("precision_matrix", precision_matrix),
                                     ("scale_tril", scale_tril)) if m is not None]  # fmt: skip
        if len(given) != 1:
            raise ValueError(
                "MultivariateNormal: give exactly one of covariance_matrix, precision_matrix, scale_tril (got "
                f"{len(given)})"
            )
        self._given_name, matrix = given[0]
        if matrix.ndim < 2:
            raise ValueError(
                f"MultivariateNormal: {self._given_name} must be a matrix or a batch of them (at least 2-D), got shape "
                f"{matrix.shape}"
            )
        batch_shape = _broadcast_shape(matrix.shape[:-2], loc.shape[:-1])
        n = loc.shape[-1]
        setattr(self, self._given_name, matrix.expand((*batch_shape, n, n)))
        self.loc = loc.expand((*batch_shape, n))
        # validate before factoring: a matrix that is not positive definite makes cholesky raise its own error
        super().__init__(batch_shape, (n,), validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = self.scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = self.covariance_matrix.cholesky()
        else:
            self._unbroadcasted_scale_tril = self.precision_matrix.inverse().cholesky()

    def _given(self) -> tuple[str, ...]:
        return ("loc", self._given_name)

    def expand(self, batch_shape: Sequence[int], _instance: Distribution | None = None) -> Distribution:
        new = super().expand(batch_shape)
        n = self.event_shape[0]
        for name in ("covariance_matrix", "precision_matrix", "scale_tril"):
            if name in self.__dict__:
                new.__dict__[name] = self.__dict__[name].expand((*batch_shape, n, n))
        return new

    @property
    def scale_tril(self) -> Tensor:
        if "scale_tril" in self.__dict__:
            return self.__dict__["scale_tril"]
        return self._unbroadcasted_scale_tril

    @scale_tril.setter
    def scale_tril(self, value: Tensor) -> None:
        self.__dict__["scale_tril"] = value

    @property
    def covariance_matrix(self) -> Tensor:
        if "covariance_matrix" in self.__dict__:
            return self.__dict__["covariance_matrix"]
        low = self._unbroadcasted_scale_tril
        return low @ low.mT

    @covariance_matrix.setter
    def covariance_matrix(self, value: Tensor) -> None:
        self.__dict__["covariance_matrix"] = value

    @property
    def precision_matrix(self) -> Tensor:
        if "precision_matrix" in self.__dict__:
            return self.__dict__["precision_matrix"]
        return self._unbroadcasted_scale_tril.cholesky_inverse()

    @precision_matrix.setter
    def precision_matrix(self, value: Tensor) -> None:
        self.__dict__["precision_matrix"] = value

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        return (self._unbroadcasted_scale_tril**2).sum(-1)

    def _half_log_det(self) -> Tensor:
        return self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        eps = standard_normal(self._extended_shape(sample_shape), self.loc)
        return self.loc + (self._unbroadcasted_scale_tril @ eps.unsqueeze(-1)).squeeze(-1)

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        m = _batch_mahalanobis(self._unbroadcasted_scale_tril, value - self.loc)
        return -0.5 * (self.event_shape[0] * LOG_2PI + m) - self._half_log_det()

    def entropy(self) -> Tensor:
        return 0.5 * self.event_shape[0] * (1.0 + LOG_2PI) + self._half_log_det()


class LowRankMultivariateNormal(Distribution):
    """N(loc, W W^T + diag(D)) over the last axis, for `cov_factor` W (n x rank) and positive `cov_diag` D. log_prob
    and entropy use the capacitance matrix I + W^T D^-1 W (rank x rank, factored once, as torch: Woodbury's identity
    and the matrix determinant lemma); rsample is loc + W eps_W + sqrt(D) eps_D.

    >>> from uopkit import Tensor
    >>> d = LowRankMultivariateNormal(Tensor([0.0, 0.0]), Tensor([[1.0], [0.0]]), Tensor([1.0, 1.0]))
    >>> d.variance.tolist()
    [2.0, 1.0]
    """

    arg_constraints = {
        "loc": constraints.real_vector,
        "cov_factor": constraints.independent(constraints.real, 2),
        "cov_diag": constraints.independent(constraints.positive, 1),
    }
    support = constraints.real_vector
    has_rsample = True
    _expanded = ("loc", "cov_factor", "cov_diag", "_capacitance_tril")

    def __init__(self, loc: Tensor, cov_factor: Tensor, cov_diag: Tensor, validate_args: bool | None = None):
        loc = as_tensor(loc)
        if loc.ndim < 1:
            raise ValueError("loc must be at least one-dimensional.")
        n = loc.shape[-1]
        if cov_factor.ndim < 2:
            raise ValueError(
                f"LowRankMultivariateNormal: cov_factor must be a matrix or a batch of them (at least 2-D), got shape "
                f"{cov_factor.shape}"
            )
        if cov_factor.shape[-2] != n:
            raise ValueError(
                f"LowRankMultivariateNormal: cov_factor needs {n} rows (loc's size), got shape {cov_factor.shape}"
            )
        if tuple(cov_diag.shape[-1:]) != (n,):
            raise ValueError(
                f"LowRankMultivariateNormal: cov_diag must end in loc's size {n}, got shape {cov_diag.shape}"
            )
        rank = cov_factor.shape[-1]
        batch_shape = _broadcast_shape(loc.shape[:-1], cov_factor.shape[:-2], cov_diag.shape[:-1])
        self.loc = loc.expand((*batch_shape, n))
        self.cov_factor = cov_factor.expand((*batch_shape, n, rank))
        self.cov_diag = cov_diag.expand((*batch_shape, n))
        super().__init__(batch_shape, (n,), validate_args)
        self._capacitance_tril = self._capacitance().cholesky()

    def _scaled_factor_t(self) -> Tensor:
        # W^T D^-1
        return self.cov_factor.mT / self.cov_diag.unsqueeze(-2)

    def _capacitance(self) -> Tensor:
        rank = self.cov_factor.shape[-1]
        eye = Tensor.eye(rank, dtype=self.loc.dtype, device=self.loc.device)
        return self._scaled_factor_t() @ self.cov_factor + eye

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        return (self.cov_factor**2).sum(-1) + self.cov_diag

    @property
    def covariance_matrix(self) -> Tensor:
        n = self.event_shape[0]
        eye = Tensor.eye(n, dtype=self.loc.dtype, device=self.loc.device)
        return self.cov_factor @ self.cov_factor.mT + self.cov_diag.unsqueeze(-1) * eye

    @property
    def precision_matrix(self) -> Tensor:
        # D^-1 - D^-1 W C^-1 W^T D^-1, with C = L L^T the capacitance
        n = self.event_shape[0]
        eye = Tensor.eye(n, dtype=self.loc.dtype, device=self.loc.device)
        a = self._capacitance_tril.solve_triangular(self._scaled_factor_t(), upper=False)
        return self.cov_diag.reciprocal().unsqueeze(-1) * eye - a.mT @ a

    @property
    def scale_tril(self) -> Tensor:
        return self.covariance_matrix.cholesky()

    def _log_det(self) -> Tensor:
        half = self._capacitance_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        return 2 * half + self.cov_diag.log().sum(-1)

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        eps_w = standard_normal((*shape[:-1], self.cov_factor.shape[-1]), self.loc)
        eps_d = standard_normal(shape, self.loc)
        return self.loc + (self.cov_factor @ eps_w.unsqueeze(-1)).squeeze(-1) + self.cov_diag.sqrt() * eps_d

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        diff = value - self.loc
        # diff^T Sigma^-1 diff = diff^T D^-1 diff - |L^-1 W^T D^-1 diff|^2
        projected = (self._scaled_factor_t() @ diff.unsqueeze(-1)).squeeze(-1)
        mahalanobis = (diff**2 / self.cov_diag).sum(-1) - _batch_mahalanobis(self._capacitance_tril, projected)
        return -0.5 * (self.event_shape[0] * LOG_2PI + mahalanobis + self._log_det())

    def entropy(self) -> Tensor:
        return 0.5 * (self.event_shape[0] * (1.0 + LOG_2PI) + self._log_det())


class Independent(Distribution):
    """`base_distribution` with its `reinterpreted_batch_ndims` rightmost batch axes read as event axes: log_prob
    and entropy sum over them.

    >>> from uopkit import Tensor
    >>> from uopkit.distributions import Normal
    >>> Independent(Normal(Tensor.zeros(3, 2), Tensor.ones(3, 2)), 1).batch_shape
    (3,)
    """

    arg_constraints: dict[str, constraints.Constraint] = {}

    def __init__(
        self, base_distribution: Distribution, reinterpreted_batch_ndims: int, validate_args: bool | None = None
    ):
        shape = (*base_distribution.batch_shape, *base_distribution.event_shape)
        if reinterpreted_batch_ndims > len(base_distribution.batch_shape):
            raise ValueError(
                f"Independent: reinterpreted_batch_ndims={reinterpreted_batch_ndims} is more than the base "
                "distribution's "
                f"{len(base_distribution.batch_shape)} batch dims"
            )
        self.base_dist, self.reinterpreted_batch_ndims = base_distribution, reinterpreted_batch_ndims
        event_dim = reinterpreted_batch_ndims + len(base_distribution.event_shape)
        split = len(shape) - event_dim
        super().__init__(shape[:split], shape[split:], validate_args)

    def expand(self, batch_shape: Sequence[int], _instance: Distribution | None = None) -> Distribution:
        batch_shape = tuple(batch_shape)
        base = self.base_dist.expand(batch_shape + self.event_shape[: self.reinterpreted_batch_ndims])
        return Independent(base, self.reinterpreted_batch_ndims, validate_args=False)

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        support = self.base_dist.support
        return constraints.independent(support, self.reinterpreted_batch_ndims) if support is not None else None  # type: ignore[return-value]

    @property
    def mean(self) -> Tensor:
        return self.base_dist.mean

    @property
    def mode(self) -> Tensor:
        return self.base_dist.mode

    @property
    def variance(self) -> Tensor:
        return self.base_dist.variance

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value: Any) -> Tensor:
        return sum_rightmost(self.base_dist.log_prob(value), self.reinterpreted_batch_ndims)

    def entropy(self) -> Tensor:
        return sum_rightmost(self.base_dist.entropy(), self.reinterpreted_batch_ndims)

    def __repr__(self) -> str:
        return f"Independent({self.base_dist!r}, {self.reinterpreted_batch_ndims})"


class MixtureSameFamily(Distribution):
    """A mixture of the components along the last batch axis of `component_distribution`, weighted by
    `mixture_distribution` (a Categorical over that axis): log_prob (a logsumexp), sample, mean and variance.

    >>> from uopkit import Tensor
    >>> from uopkit.distributions import Categorical, Normal
    >>> mix = MixtureSameFamily(Categorical(probs=Tensor([0.5, 0.5])), Normal(Tensor([-1.0, 1.0]), Tensor([1.0, 1.0])))
    >>> mix.mean.item()
    0.0
    """

    arg_constraints: dict[str, constraints.Constraint] = {}
    has_rsample = False

    def __init__(
        self, mixture_distribution: Categorical, component_distribution: Distribution, validate_args: bool | None = None
    ):
        if not isinstance(mixture_distribution, Categorical):
            raise ValueError(
                "MixtureSameFamily: mixture_distribution must be a Categorical, got "
                f"{type(mixture_distribution).__name__}"
            )
        if not isinstance(component_distribution, Distribution):
            raise ValueError(
                f"MixtureSameFamily: component_distribution must be a Distribution, got "
                f"{type(component_distribution).__name__}"
            )
        mix_batch, comp_batch = mixture_distribution.batch_shape, component_distribution.batch_shape
        if len(comp_batch) < 1:
            raise ValueError("The component distribution needs a batch axis of components")
        try:
            batch_shape = _broadcast_shape(mix_batch, comp_batch[:-1])
        except ValueError:
            raise ValueError(
                f"`mixture_distribution.batch_shape` ({mix_batch}) is not compatible with "
                f"`component_distribution.batch_shape` ({comp_batch})"
            ) from None
        if mixture_distribution._num_events != comp_batch[-1]:
            raise ValueError(
                f"MixtureSameFamily: {mixture_distribution._num_events} mixture weights for {comp_batch[-1]} "
                "components "
                "(the last batch dim of component_distribution); give one weight per component"
            )
        self._mixture_distribution, self._component_distribution = mixture_distribution, component_distribution
        self._num_component = comp_batch[-1]
        self._event_ndims = len(component_distribution.event_shape)
        super().__init__(batch_shape, component_distribution.event_shape, validate_args)

    @property
    def mixture_distribution(self) -> Categorical:
        return self._mixture_distribution

    @property
    def component_distribution(self) -> Distribution:
        return self._component_distribution

    @property
    def support(self) -> constraints.Constraint | None:  # type: ignore[override]
        return self._component_distribution.support

    def expand(self, batch_shape: Sequence[int], _instance: Distribution | None = None) -> Distribution:
        batch_shape = tuple(batch_shape)
        mix = self._mixture_distribution.expand(batch_shape)
        comp = self._component_distribution.expand((*batch_shape, self._num_component))
        return MixtureSameFamily(mix, comp, validate_args=False)  # type: ignore[arg-type]

    def _weights(self) -> Tensor:
        # the mixture probabilities shaped to multiply a component quantity of shape batch + (K,) + event
        probs = self._mixture_distribution.probs
        return probs.reshape(*probs.shape, *(1,) * self._event_ndims)

    @property
    def mean(self) -> Tensor:
        axis = -1 - self._event_ndims
        return (self._weights() * self._component_distribution.mean).sum(axis)

    @property
    def variance(self) -> Tensor:
        axis = -1 - self._event_ndims
        w, comp = self._weights(), self._component_distribution
        mean_cond_var = (w * comp.variance).sum(axis)
        var_cond_mean = (w * (comp.mean - self.mean.unsqueeze(axis)) ** 2).sum(axis)
        return mean_cond_var + var_cond_mean

    def log_prob(self, value: Any) -> Tensor:
        value = as_tensor(value, self._mixture_distribution.logits)
        if self._validate_args:
            self._validate_sample(value)
        component_log_prob = self._component_distribution.log_prob(value.unsqueeze(-1 - self._event_ndims))
        log_weights = self._mixture_distribution.logits.log_softmax(-1)
        return (component_log_prob + log_weights).logsumexp(-1)

    def cdf(self, value: Any) -> Tensor:
        value = as_tensor(value, self._mixture_distribution.logits)
        component_cdf = self._component_distribution.cdf(value.unsqueeze(-1 - self._event_ndims))
        return (component_cdf * self._mixture_distribution.probs).sum(-1)

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        # every component draws, the mixture's choice picks one (a one-hot mask summed over the component axis)
        with no_grad():
            sample_shape = tuple(sample_shape)
            choice = self._mixture_distribution.sample(sample_shape)
            draws = self._component_distribution.sample(sample_shape)
            mask = choice.one_hot(self._num_component).cast(draws.dtype)
            mask = mask.reshape(*mask.shape, *(1,) * self._event_ndims)
            return (draws * mask).sum(-1 - self._event_ndims)

    def __repr__(self) -> str:
        return f"MixtureSameFamily({self._mixture_distribution!r}, {self._component_distribution!r})"
