"""torch.distributions.constraint_registry: `biject_to(c)` and `transform_to(c)` give a transform from unconstrained
reals onto the region of constraint `c`, to optimize a constrained parameter through an unconstrained one.
`biject_to` gives bijections (for HMC-like samplers, log_abs_det_jacobian defined); `transform_to` may give a
non-bijective map that suits optimization (softmax onto the simplex). A registry is keyed by the constraint's class
(looked up exactly, as torch); `register` adds an entry, for user constraints too.

>>> from uopkit import Tensor
>>> from uopkit.distributions import constraints
>>> biject_to(constraints.positive)(Tensor([0.0])).tolist()
[1.0]
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Number
from typing import Any

from uopkit.distributions import constraints, transforms

__all__ = ["ConstraintRegistry", "biject_to", "transform_to"]

Factory = Callable[[Any], transforms.Transform]


class ConstraintRegistry:
    """Constraint classes to factories `fn(constraint) -> Transform`."""

    def __init__(self) -> None:
        self._registry: dict[type, Factory] = {}

    def register(self, constraint: Any, factory: Factory | None = None) -> Any:
        """Register `factory` for a Constraint subclass (or the class of a constraint object); as a decorator when
        `factory` is left out."""
        if factory is None:
            return lambda fn: self.register(constraint, fn)
        if isinstance(constraint, constraints.Constraint):
            constraint = type(constraint)
        if not (isinstance(constraint, type) and issubclass(constraint, constraints.Constraint)):
            raise TypeError(f"register: the key must be a Constraint (class or instance), got {constraint!r}")
        self._registry[constraint] = factory
        return factory

    def __call__(self, constraint: constraints.Constraint) -> transforms.Transform:
        """The transform registered for `constraint`'s class (NotImplementedError when there is none)."""
        factory = self._registry.get(type(constraint))
        if factory is None:
            raise NotImplementedError(f"Cannot transform {type(constraint).__name__} constraints")
        return factory(constraint)


biject_to = ConstraintRegistry()
transform_to = ConstraintRegistry()


def _real(constraint: Any) -> transforms.Transform:
    return transforms.identity_transform


def _biject_to_independent(constraint: Any) -> transforms.Transform:
    return transforms.IndependentTransform(biject_to(constraint.base_constraint), constraint.reinterpreted_batch_ndims)


def _transform_to_independent(constraint: Any) -> transforms.Transform:
    base = transform_to(constraint.base_constraint)
    return transforms.IndependentTransform(base, constraint.reinterpreted_batch_ndims)


def _greater_than(constraint: Any) -> transforms.Transform:
    return transforms.ComposeTransform(
        [transforms.ExpTransform(), transforms.AffineTransform(constraint.lower_bound, 1)]
    )


def _less_than(constraint: Any) -> transforms.Transform:
    return transforms.ComposeTransform(
        [transforms.ExpTransform(), transforms.AffineTransform(constraint.upper_bound, -1)]
    )


def _interval(constraint: Any) -> transforms.Transform:
    low, high = constraint.lower_bound, constraint.upper_bound
    # the unit interval is a plain sigmoid; Tensor bounds always take the affine map
    if isinstance(low, Number) and isinstance(high, Number) and low == 0 and high == 1:
        return transforms.SigmoidTransform()
    return transforms.ComposeTransform([transforms.SigmoidTransform(), transforms.AffineTransform(low, high - low)])


def _biject_to_cat(constraint: Any) -> transforms.Transform:
    return transforms.CatTransform([biject_to(c) for c in constraint.cseq], constraint.dim, constraint.lengths)


def _transform_to_cat(constraint: Any) -> transforms.Transform:
    return transforms.CatTransform([transform_to(c) for c in constraint.cseq], constraint.dim, constraint.lengths)


def _biject_to_stack(constraint: Any) -> transforms.Transform:
    return transforms.StackTransform([biject_to(c) for c in constraint.cseq], constraint.dim)


def _transform_to_stack(constraint: Any) -> transforms.Transform:
    return transforms.StackTransform([transform_to(c) for c in constraint.cseq], constraint.dim)


# positive and nonnegative are greater_than(0) and greater_than_eq(0): exp, then a shift by 0 (torch's table registers
# ExpTransform for them first, then overwrites it with this entry of the same class)
for _registry in (biject_to, transform_to):
    _registry.register(constraints.real, _real)
    _registry.register(constraints.greater_than, _greater_than)
    _registry.register(constraints.greater_than_eq, _greater_than)
    _registry.register(constraints.less_than, _less_than)
    _registry.register(constraints.interval, _interval)
    _registry.register(constraints.half_open_interval, _interval)
biject_to.register(constraints.independent, _biject_to_independent)
transform_to.register(constraints.independent, _transform_to_independent)
biject_to.register(constraints.simplex, lambda c: transforms.StickBreakingTransform())
transform_to.register(constraints.simplex, lambda c: transforms.SoftmaxTransform())
# no bijection onto the Cholesky factors or the positive-definite matrices (LowerCholeskyTransform drops the upper part)
transform_to.register(constraints.lower_cholesky, lambda c: transforms.LowerCholeskyTransform())
transform_to.register(constraints.positive_definite, lambda c: transforms.PositiveDefiniteTransform())
# a bijection onto the Cholesky factors of correlation matrices, for both (LKJCholesky's support)
biject_to.register(constraints.corr_cholesky, lambda c: transforms.CorrCholeskyTransform())
transform_to.register(constraints.corr_cholesky, lambda c: transforms.CorrCholeskyTransform())
biject_to.register(constraints.cat, _biject_to_cat)
transform_to.register(constraints.cat, _transform_to_cat)
biject_to.register(constraints.stack, _biject_to_stack)
transform_to.register(constraints.stack, _transform_to_stack)
