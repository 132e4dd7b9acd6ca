"""torch.distributions.constraints' names: what a parameter or a sample must satisfy. `check(value)` gives a bool
Tensor (one value per batch element: an event's constraint reduces over its `event_dim` rightmost axes); the
distributions read it back once to raise ValueError, as torch's `validate_args`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from uopkit.dtype import dtypes
from uopkit.tensor import Tensor

__all__ = [
    "Constraint",
    "boolean",
    "cat",
    "corr_cholesky",
    "dependent",
    "dependent_property",
    "greater_than",
    "greater_than_eq",
    "half_open_interval",
    "independent",
    "integer_interval",
    "interval",
    "is_dependent",
    "less_than",
    "lower_cholesky",
    "lower_triangular",
    "multinomial",
    "nonnegative",
    "nonnegative_integer",
    "one_hot",
    "positive",
    "positive_definite",
    "positive_integer",
    "positive_semidefinite",
    "real",
    "real_vector",
    "simplex",
    "square",
    "stack",
    "symmetric",
    "unit_interval",
]


class Constraint:
    """A region of values; `event_dim` is how many rightmost axes make one event."""

    is_discrete = False
    event_dim = 0
    # the attributes the repr shows, as torch's (an out-of-support error names the bounds it broke)
    _shown: tuple[str, ...] = ()

    def check(self, value: Tensor) -> Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)}" for name in self._shown)
        return f"{type(self).__name__[1:]}({shown})"


class _Dependent(Constraint):
    # a support that depends on other parameters: nothing to check on its own
    def __init__(self, is_discrete: bool = False, event_dim: int = 0):
        self.is_discrete, self.event_dim = is_discrete, event_dim

    def check(self, value: Tensor) -> Tensor:
        raise ValueError("can't check a dependent constraint on its own")


class _DependentProperty(property, _Dependent):
    # a property on an instance and a dependent constraint on the class (a custom distribution's `support` that
    # reads its parameters), as torch's dependent_property; used bare or called with is_discrete=/event_dim=
    def __init__(self, fn: Any = None, *, is_discrete: bool = False, event_dim: int = 0):
        property.__init__(self, fn)
        _Dependent.__init__(self, is_discrete, event_dim)

    def __call__(self, fn: Any) -> _DependentProperty:
        return _DependentProperty(fn, is_discrete=self.is_discrete, event_dim=self.event_dim)


dependent_property = _DependentProperty


def is_dependent(constraint: Any) -> bool:
    """Whether a constraint is `dependent` (a support that depends on other parameters, checked by none), as torch's."""
    return isinstance(constraint, _Dependent)


class _Real(Constraint):
    def check(self, value: Tensor) -> Tensor:
        # NaN is the one value out of it
        return value == value


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value: Tensor) -> Tensor:
        return (value == 0) | (value == 1)


class _IntegerInterval(Constraint):
    is_discrete = True
    _shown = ("lower_bound", "upper_bound")

    def __init__(self, lower_bound: float, upper_bound: float | Tensor):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value: Tensor) -> Tensor:
        return (value % 1 == 0) & (value >= self.lower_bound) & (value <= self.upper_bound)


class _IntegerGreaterThan(Constraint):
    is_discrete = True
    _shown = ("lower_bound",)

    def __init__(self, lower_bound: float):
        self.lower_bound = lower_bound

    def check(self, value: Tensor) -> Tensor:
        return (value % 1 == 0) & (value >= self.lower_bound)


class _GreaterThan(Constraint):
    _shown = ("lower_bound",)

    def __init__(self, lower_bound: float | Tensor):
        self.lower_bound = lower_bound

    def check(self, value: Tensor) -> Tensor:
        return value > self.lower_bound


class _GreaterThanEq(_GreaterThan):
    def check(self, value: Tensor) -> Tensor:
        return value >= self.lower_bound


class _LessThan(Constraint):
    _shown = ("upper_bound",)

    def __init__(self, upper_bound: float | Tensor):
        self.upper_bound = upper_bound

    def check(self, value: Tensor) -> Tensor:
        return value < self.upper_bound


class _Interval(Constraint):
    _shown = ("lower_bound", "upper_bound")

    def __init__(self, lower_bound: float | Tensor, upper_bound: float | Tensor):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value: Tensor) -> Tensor:
        return (value >= self.lower_bound) & (value <= self.upper_bound)


class _HalfOpenInterval(_Interval):
    def check(self, value: Tensor) -> Tensor:
        return (value >= self.lower_bound) & (value < self.upper_bound)


class _Independent(Constraint):
    # a base constraint whose `reinterpreted_batch_ndims` rightmost axes become event axes
    def __init__(self, base: Constraint, reinterpreted_batch_ndims: int):
        self.base, self.reinterpreted_batch_ndims = base, reinterpreted_batch_ndims
        self.is_discrete, self.event_dim = base.is_discrete, base.event_dim + reinterpreted_batch_ndims

    @property
    def base_constraint(self) -> Constraint:
        # torch's name for the wrapped constraint (the registries in constraint_registry read it)
        return self.base

    def __repr__(self) -> str:
        return f"IndependentConstraint({self.base!r}, {self.reinterpreted_batch_ndims})"

    def check(self, value: Tensor) -> Tensor:
        ok = self.base.check(value)
        for _ in range(self.reinterpreted_batch_ndims):
            ok = ok.all(-1)
        return ok


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value: Tensor) -> Tensor:
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _OneHot(Constraint):
    is_discrete, event_dim = True, 1

    def check(self, value: Tensor) -> Tensor:
        return ((value == 0) | (value == 1)).all(-1) & (value.sum(-1) == 1)


class _Multinomial(Constraint):
    # count vectors of the last axis: nonnegative integers summing to at most `upper_bound`
    is_discrete, event_dim = True, 1

    def __init__(self, upper_bound: int):
        self.upper_bound = upper_bound

    def check(self, value: Tensor) -> Tensor:
        counts = ((value >= 0) & (value % 1 == 0)).all(-1)
        return counts & (value.sum(-1) <= self.upper_bound)


class _LowerCholesky(Constraint):
    event_dim = 2

    def check(self, value: Tensor) -> Tensor:
        lower = (value.tril() == value).all(-1).all(-1)
        return lower & (value.diagonal(dim1=-2, dim2=-1) > 0).all(-1)


# machine epsilon of each float dtype (torch.finfo's eps; distribution.py's table has the same, and imports this module)
_EPS = {dtypes.float16: 2.0**-10, dtypes.bfloat16: 2.0**-7, dtypes.float32: 2.0**-23, dtypes.float64: 2.0**-52}


class _CorrCholesky(Constraint):
    # Cholesky factors of correlation matrices: lower Cholesky factors whose rows have unit length, to within
    # 10 n eps of the dtype (torch's tolerance)
    event_dim = 2

    def check(self, value: Tensor) -> Tensor:
        tol = _EPS.get(value.dtype, _EPS[dtypes.float32]) * value.shape[-1] * 10
        unit_rows = ((value.detach().square().sum(-1).sqrt() - 1).abs() <= tol).all(-1)
        return _LowerCholesky().check(value) & unit_rows


class _LowerTriangular(Constraint):
    event_dim = 2

    def check(self, value: Tensor) -> Tensor:
        return (value.tril() == value).all(-1).all(-1)


class _Square(Constraint):
    event_dim = 2

    def check(self, value: Tensor) -> Tensor:
        square = value.shape[-2] == value.shape[-1]
        return Tensor.full(value.shape[:-2], square, dtype=dtypes.bool, device=value.device)


class _Symmetric(_Square):
    # square, and equal to the transpose to within torch.isclose's tolerances (rtol 1e-5, atol 1e-6), as torch's
    def check(self, value: Tensor) -> Tensor:
        if value.shape[-2] != value.shape[-1]:
            return super().check(value)
        return value.isclose(value.mT, atol=1e-6).all(-1).all(-1)


class _PositiveSemidefinite(_Symmetric):
    def check(self, value: Tensor) -> Tensor:
        symmetric = super().check(value)
        if value.shape[-2] != value.shape[-1]:
            return symmetric
        return symmetric & (value.eigvalsh() >= 0).all(-1)


class _PositiveDefinite(_Symmetric):
    def check(self, value: Tensor) -> Tensor:
        symmetric = super().check(value)
        if value.shape[-2] != value.shape[-1]:
            return symmetric
        # cholesky_ex's info is 0 exactly for the positive-definite ones
        return symmetric & (value.cholesky_ex().info == 0)


class _Cat(Constraint):
    # constraints `cseq` on consecutive pieces of axis `dim`, of sizes `lengths` (1 each by default), as Tensor.cat
    def __init__(self, cseq: Sequence[Constraint], dim: int = 0, lengths: Sequence[int] | None = None):
        self.cseq, self.dim = list(cseq), dim
        self.lengths = [1] * len(self.cseq) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.cseq):
            raise ValueError(f"cat: {len(self.lengths)} lengths for {len(self.cseq)} constraints")
        self.is_discrete = any(c.is_discrete for c in self.cseq)
        self.event_dim = max((c.event_dim for c in self.cseq), default=0)

    def check(self, value: Tensor) -> Tensor:
        if value.shape[self.dim] != sum(self.lengths):
            raise ValueError(
                f"cat: axis {self.dim} of a value of shape {value.shape} is not of size {sum(self.lengths)}"
            )
        checks, start = [], 0
        for constraint, length in zip(self.cseq, self.lengths, strict=True):
            checks.append(constraint.check(value.narrow(self.dim, start, length)))
            start += length
        return checks[0].cat(*checks[1:], dim=self.dim)


class _Stack(Constraint):
    # one constraint of `cseq` per index of axis `dim`, as Tensor.stack
    def __init__(self, cseq: Sequence[Constraint], dim: int = 0):
        self.cseq, self.dim = list(cseq), dim
        self.is_discrete = any(c.is_discrete for c in self.cseq)
        self.event_dim = max((c.event_dim for c in self.cseq), default=0)

    def check(self, value: Tensor) -> Tensor:
        if value.shape[self.dim] != len(self.cseq):
            raise ValueError(
                f"stack: axis {self.dim} of a value of shape {value.shape} is not of size {len(self.cseq)}"
            )
        pieces = [value.select(self.dim, i) for i in range(len(self.cseq))]
        return Tensor.stack(*(c.check(v) for c, v in zip(self.cseq, pieces, strict=True)), dim=self.dim)


dependent = _Dependent()
real = _Real()
real_vector = _Independent(real, 1)
boolean = _Boolean()
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
unit_interval = _Interval(0.0, 1.0)
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
simplex = _Simplex()
one_hot = _OneHot()
lower_cholesky = _LowerCholesky()
corr_cholesky = _CorrCholesky()
lower_triangular = _LowerTriangular()
square = _Square()
symmetric = _Symmetric()
positive_semidefinite = _PositiveSemidefinite()
positive_definite = _PositiveDefinite()
independent = _Independent
integer_interval = _IntegerInterval
interval = _Interval
half_open_interval = _HalfOpenInterval
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
less_than = _LessThan
multinomial = _Multinomial
cat = _Cat
stack = _Stack
