"""TransformedDistribution: Y = f(X) for X drawn from a base distribution and f a chain of Transforms, with
log p(y) = log p_X(f^-1(y)) - log |det df/dx|; and the families torch builds that way from a Normal: LogNormal
(exp) and LogisticNormal (stick breaking onto the simplex). The families built on the relaxed discrete ones live
in distributions/relaxed.py.

>>> from uopkit import Tensor
>>> from uopkit.distributions import Normal, TanhTransform
>>> policy = TransformedDistribution(Normal(Tensor([0.0]), Tensor([1.0])), [TanhTransform(cache_size=1)])
>>> action = policy.rsample()
>>> policy.log_prob(action).shape
(1,)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from uopkit.distributions import constraints
from uopkit.distributions.continuous import Normal
from uopkit.distributions.distribution import Distribution, as_tensor, sum_rightmost
from uopkit.distributions.multivariate import Independent
from uopkit.distributions.transforms import ComposeTransform, ExpTransform, StickBreakingTransform, Transform
from uopkit.tensor import Tensor, no_grad

__all__ = ["LogNormal", "LogisticNormal", "TransformedDistribution"]


class TransformedDistribution(Distribution):
    """`base_distribution` pushed through `transforms` (a Transform or a list, applied in order). Its event shape is
    the largest the base and the transforms couple: a transform whose domain has event axes the base lacks reads
    that many base batch axes as event axes (an Independent), and the base is expanded to the shape the transforms
    need. sample/rsample map base draws forward; log_prob and cdf invert them; icdf maps the base's forward."""

    arg_constraints: dict[str, constraints.Constraint] = {}

    def __init__(
        self,
        base_distribution: Distribution,
        transforms: Transform | Sequence[Transform],
        validate_args: bool | None = None,
    ):
        if isinstance(transforms, Transform):
            self.transforms = [transforms]
        elif isinstance(transforms, (list, tuple)):
            if not all(isinstance(t, Transform) for t in transforms):
                raise ValueError(
                    f"TransformedDistribution: every entry of transforms must be a Transform, got "
                    f"{[type(t).__name__ for t in transforms]}"
                )
            self.transforms = list(transforms)
        else:
            raise ValueError(
                "TransformedDistribution: transforms takes a Transform or a list of them, got "
                f"{type(transforms).__name__}"
            )
        base_shape = (*base_distribution.batch_shape, *base_distribution.event_shape)
        base_event_dim = len(base_distribution.event_shape)
        chain = ComposeTransform(self.transforms)
        if len(base_shape) < chain.domain.event_dim:
            raise ValueError(
                f"TransformedDistribution: the transforms act on {chain.domain.event_dim} dims, the base "
                "distribution has "
                f"only {len(base_shape)} (shape {base_shape})"
            )
        forward_shape = chain.forward_shape(base_shape)
        # parameters of the transforms may broadcast the base's batch (an AffineTransform with a batch of scales)
        expanded_base_shape = chain.inverse_shape(forward_shape)
        if base_shape != expanded_base_shape:
            base_distribution = base_distribution.expand(
                expanded_base_shape[: len(expanded_base_shape) - base_event_dim]
            )
        reinterpreted = chain.domain.event_dim - base_event_dim
        if reinterpreted > 0:
            base_distribution = Independent(base_distribution, reinterpreted)
        self.base_dist = base_distribution
        event_dim = max(chain.codomain.event_dim, base_event_dim + chain.codomain.event_dim - chain.domain.event_dim)
        cut = len(forward_shape) - event_dim
        super().__init__(forward_shape[:cut], forward_shape[cut:], validate_args)

    def _given(self) -> tuple[str, ...]:
        # the parameters belong to the base distribution, which checked them
        return ()

    def _like(self) -> Tensor | None:
        return self.base_dist._like()

    def expand(self, batch_shape: Sequence[int], _instance: Distribution | None = None) -> Distribution:
        batch_shape = tuple(batch_shape)
        shape: tuple[int, ...] = (*batch_shape, *self.event_shape)
        for transform in reversed(self.transforms):
            shape = transform.inverse_shape(shape)
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.base_dist = self.base_dist.expand(shape[: len(shape) - len(self.base_dist.event_shape)])
        new._batch_shape = batch_shape
        return new

    @property
    def support(self) -> constraints.Constraint | None:  # type: ignore[override]
        if not self.transforms:
            return self.base_dist.support
        support = self.transforms[-1].codomain
        if len(self.event_shape) > support.event_dim:
            support = constraints.independent(support, len(self.event_shape) - support.event_dim)
        return support

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        with no_grad():
            x = self.base_dist.sample(sample_shape)
            for transform in self.transforms:
                x = transform(x)
            return x

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        x = self.base_dist.rsample(sample_shape)
        for transform in self.transforms:
            x = transform(x)
        return x

    def log_prob(self, value: Any) -> Tensor:
        y = self._checked(value)
        event_dim = len(self.event_shape)
        log_prob: Tensor | float = 0.0
        # walk the chain back, subtracting each transform's log |det J| summed over the axes this event couples
        for transform in reversed(self.transforms):
            x = transform.inv(y)
            event_dim += transform.domain.event_dim - transform.codomain.event_dim
            log_prob = log_prob - sum_rightmost(
                transform.log_abs_det_jacobian(x, y), event_dim - transform.domain.event_dim
            )
            y = x
        return log_prob + sum_rightmost(self.base_dist.log_prob(y), event_dim - len(self.base_dist.event_shape))

    def _monotonize_cdf(self, value: Tensor) -> Tensor:
        # a decreasing chain flips the base cdf: P(Y <= y) = 1 - F_X(f^-1(y))
        sign: int | Tensor = 1
        for transform in self.transforms:
            sign = sign * transform.sign
        if isinstance(sign, int) and sign == 1:
            return value
        return sign * (value - 0.5) + 0.5

    def cdf(self, value: Any) -> Tensor:
        value = as_tensor(value, self._like())
        for transform in reversed(self.transforms):
            value = transform.inv(value)
        # checked once inverted, against the base's support (as torch)
        if self._validate_args:
            self.base_dist._validate_sample(value)
        return self._monotonize_cdf(self.base_dist.cdf(value))

    def icdf(self, value: Any) -> Tensor:
        value = self.base_dist.icdf(self._monotonize_cdf(as_tensor(value, self._like())))
        for transform in self.transforms:
            value = transform(value)
        return value

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class LogNormal(TransformedDistribution):
    """exp(X) for X ~ N(loc, scale**2): a TransformedDistribution of Normal(loc, scale) by ExpTransform, as torch.

    >>> from uopkit import Tensor
    >>> round(LogNormal(0.0, 1.0).log_prob(Tensor(1.0)).item(), 4)
    -0.9189
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.positive  # type: ignore[assignment]
    has_rsample = True  # type: ignore[assignment]
    base_dist: Normal

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None):
        super().__init__(Normal(loc, scale, validate_args=validate_args), ExpTransform(), validate_args)

    @property
    def loc(self) -> Tensor:
        return self.base_dist.loc

    @property
    def scale(self) -> Tensor:
        return self.base_dist.scale

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

    def entropy(self) -> Tensor:
        return self.base_dist.entropy() + self.loc


class LogisticNormal(TransformedDistribution):
    """StickBreakingTransform of N(loc, scale**2) over K reals: a point of the (K+1)-simplex whose additive
    log-ratios log(y_i / (1 - y_1 - ... - y_i)) shifted by log(K + 1 - i) are Normal. A scalar loc and scale make
    K = 1, as torch.

    >>> from uopkit import Tensor
    >>> LogisticNormal(Tensor([0.0, 0.0]), Tensor([1.0, 1.0])).event_shape
    (3,)
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.simplex  # type: ignore[assignment]
    has_rsample = True  # type: ignore[assignment]
    base_dist: Independent

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None):
        base: Distribution = Normal(loc, scale, validate_args=validate_args)
        if not base.batch_shape:
            base = base.expand((1,))
        super().__init__(base, StickBreakingTransform(), validate_args)

    @property
    def loc(self) -> Tensor:
        return self.base_dist.base_dist.loc  # type: ignore[attr-defined]

    @property
    def scale(self) -> Tensor:
        return self.base_dist.base_dist.scale  # type: ignore[attr-defined]
