"""The Distribution base (torch.distributions.Distribution's API) and the helpers the families share.

Parameters are Tensors (Python numbers become float Tensors) broadcast to one batch shape. Everything stays lazy: a
log_prob is a graph like any other Tensor expression, and its gradient flows to the parameters. The one eager step is
`validate_args` (on by default, as torch): parameters and the values given to log_prob/cdf are checked once against
their constraints, read back from the device, and a violation raises ValueError.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from uopkit.distributions import constraints
from uopkit.dtype import dtypes
from uopkit.tensor import Tensor, no_grad

__all__ = ["Distribution", "broadcast_all", "clamp_probs", "finfo_tiny_eps"]

# the smallest positive normal float32: uniform draws are clamped to it before a log (a draw can be exactly 0)
TINY = 1.1754944e-38


def _broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(-ndim, 0):
        sizes = {s[axis] for s in shapes if len(s) >= -axis and s[axis] != 1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {[tuple(s) for s in shapes]} don't broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


# (smallest positive normal, machine epsilon) of each float dtype, as torch.finfo's tiny and eps
_FINFO = {
    dtypes.float16: (6.103515625e-05, 0.0009765625),
    dtypes.bfloat16: (1.1754943508222875e-38, 0.0078125),
    dtypes.float32: (1.1754943508222875e-38, 1.1920928955078125e-07),
    dtypes.float64: (2.2250738585072014e-308, 2.220446049250313e-16),
}


def finfo_tiny_eps(dtype: Any) -> tuple[float, float]:
    """torch.finfo(dtype)'s (tiny, eps) for a float dtype (float32's for any other)."""
    return _FINFO.get(dtype, _FINFO[dtypes.float32])


def clamp_probs(probs: Tensor) -> Tensor:
    """Probabilities clamped to [eps, 1 - eps] of their dtype, so that their logits are finite (torch's clamp_probs)."""
    eps = finfo_tiny_eps(probs.dtype)[1]
    return probs.clamp(eps, 1 - eps)


def as_tensor(value: Any, like: Tensor | None = None) -> Tensor:
    if isinstance(value, Tensor):
        return value
    dtype = like.dtype if like is not None and dtypes.is_float(like.dtype) else dtypes.default_float
    return Tensor(value, dtype=dtype, device=like.device if like is not None else None)


def broadcast_all(*values: Any) -> tuple[Tensor, ...]:
    """The values as Tensors of one broadcast shape (numbers take the dtype and device of the first Tensor)."""
    like = next((v for v in values if isinstance(v, Tensor)), None)
    tensors = [as_tensor(v, like) for v in values]
    shape = _broadcast_shape(*(t.shape for t in tensors))
    return tuple(t if t.shape == shape else t.expand(shape) for t in tensors)


def sum_rightmost(value: Tensor, n: int) -> Tensor:
    return value.sum(tuple(range(-n, 0))) if n > 0 else value


def all_true(check: Tensor) -> bool:
    return bool(check.all().item()) if check.numel() else True


def standard_normal(shape: Sequence[int], like: Tensor) -> Tensor:
    return Tensor.randn(*shape, dtype=like.dtype, device=like.device)


def open_uniform(shape: Sequence[int], like: Tensor) -> Tensor:
    """U(0, 1) draws with 0 moved to TINY, so that their log is finite."""
    return Tensor.rand(*shape, dtype=like.dtype, device=like.device).clamp(min=TINY)


def xlogy(x: Tensor | float, y: Tensor) -> Tensor:
    # torch.xlogy for a scalar or Tensor x: 0 where x is 0, with torch's gradient (log(y) for x, also where x is 0:
    # Dirichlet's, Gamma's and Beta's log_prob at concentration 1)
    return as_tensor(x, y).xlogy(y)


def lbeta(a: Tensor, b: Tensor) -> Tensor:
    return a.lgamma() + b.lgamma() - (a + b).lgamma()


LOG_2PI = math.log(2 * math.pi)


class Distribution:
    """A family of probability distributions with a batch of parameter sets (`batch_shape`), each over events of
    `event_shape`. Subclasses set `arg_constraints`, `support`, `has_rsample` and implement what they can of
    `rsample`/`sample`, `log_prob`, `cdf`, `icdf`, `entropy`, `mean`, `mode` and `variance`."""

    has_rsample = False
    has_enumerate_support = False
    arg_constraints: dict[str, constraints.Constraint] = {}
    support: constraints.Constraint | None = None
    # the Tensor attributes `expand` broadcasts (each has the batch shape, then its own event axes)
    _expanded: tuple[str, ...] = ()
    _validate_default = True

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Turn parameter and sample checks on (the default, as torch) or off for distributions made from now on."""
        if value not in (True, False):
            raise ValueError("set_default_validate_args: expected a bool")
        Distribution._validate_default = value

    def __init__(
        self, batch_shape: Sequence[int] = (), event_shape: Sequence[int] = (), validate_args: bool | None = None
    ):
        self._batch_shape, self._event_shape = tuple(batch_shape), tuple(event_shape)
        self._validate_args = Distribution._validate_default if validate_args is None else validate_args
        if self._validate_args:
            for name, constraint in self.arg_constraints.items():
                if isinstance(constraint, constraints._Dependent) or name not in self._given():
                    continue
                if not all_true(constraint.check(getattr(self, name))):
                    value = getattr(self, name)
                    raise ValueError(
                        f"{type(self).__name__}: {name} (shape {value.shape}) has values outside {constraint!r}; "
                        "validate_args=False skips this check"
                    )

    def _given(self) -> tuple[str, ...]:
        # the parameters set by the caller (checked by validate_args; the derived ones are right by construction)
        return tuple(self.arg_constraints)

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return self._batch_shape

    @property
    def event_shape(self) -> tuple[int, ...]:
        return self._event_shape

    def expand(self, batch_shape: Sequence[int], _instance: Distribution | None = None) -> Distribution:
        """The same distribution with its parameters broadcast to `batch_shape` (no copies: expanded views)."""
        batch_shape = tuple(batch_shape)
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        for name in self._expanded:
            value = getattr(self, name)
            new.__dict__[name] = value.expand((*batch_shape, *value.shape[len(self._batch_shape) :]))
        new._batch_shape = batch_shape
        return new

    def _extended_shape(self, sample_shape: Sequence[int] = ()) -> tuple[int, ...]:
        return (*tuple(sample_shape), *self._batch_shape, *self._event_shape)

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        """Reparameterized draws of shape sample_shape + batch_shape + event_shape: the gradient flows to the
        parameters."""
        raise NotImplementedError(f"{type(self).__name__} has no rsample")

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        """Draws of shape sample_shape + batch_shape + event_shape, without gradient."""
        with no_grad():
            return self.rsample(sample_shape).detach()

    def sample_n(self, n: int) -> Tensor:
        return self.sample((n,))

    def log_prob(self, value: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no log_prob")

    def cdf(self, value: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no cdf")

    def icdf(self, value: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no icdf")

    def entropy(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no entropy")

    def perplexity(self) -> Tensor:
        return self.entropy().exp()

    @property
    def mean(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no mean")

    @property
    def mode(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no mode")

    @property
    def variance(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no variance")

    @property
    def stddev(self) -> Tensor:
        return self.variance.sqrt()

    def _validate_sample(self, value: Tensor) -> None:
        if not isinstance(value, Tensor):
            raise ValueError(f"{type(self).__name__}: the value to score must be a Tensor, got {type(value).__name__}")
        n_event = len(self._event_shape)
        if n_event and tuple(value.shape[-n_event:]) != self._event_shape:
            raise ValueError(
                f"{type(self).__name__}: a value of shape {value.shape} must end in the event shape {self._event_shape}"
            )
        try:
            _broadcast_shape(value.shape, (*self._batch_shape, *self._event_shape))
        except ValueError:
            raise ValueError(
                f"{type(self).__name__}: a value of shape {value.shape} does not broadcast against batch + event shape "
                f"{(*self._batch_shape, *self._event_shape)}"
            ) from None
        support = self.support
        if support is None or isinstance(support, constraints._Dependent):
            return
        if not all_true(support.check(value)):
            raise ValueError(
                f"{type(self).__name__}: the value (shape {value.shape}) has entries outside the support {support!r}; "
                "validate_args=False skips this check"
            )

    def _checked(self, value: Any) -> Tensor:
        # log_prob's and cdf's argument: a Tensor, checked against the support when validate_args is on
        value = as_tensor(value, self._like())
        if self._validate_args:
            self._validate_sample(value)
        return value

    def _like(self) -> Tensor | None:
        for name in self._expanded:
            value = self.__dict__.get(name)
            if isinstance(value, Tensor):
                return value
        return None

    def __repr__(self) -> str:
        # as torch's: a one-element parameter by its value (`Normal(loc: 0.0, scale: 1.0)`), any other by its shape
        def shown(value: Tensor) -> str:
            return f"{value}" if value.numel() == 1 else f"{tuple(value.shape)}"

        params = ", ".join(f"{name}: {shown(getattr(self, name))}" for name in self._given() if name in self.__dict__)
        return f"{type(self).__name__}({params})"
