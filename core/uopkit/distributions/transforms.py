"""torch.distributions.transforms: invertible maps y = t(x) with their log |det dy/dx|, the pieces of a
TransformedDistribution and of the constraint registries (biject_to, transform_to).

A transform declares its `domain` and `codomain` (constraints; their event_dim says how many rightmost axes one
application couples), `bijective`, and, for monotone ones, `sign`. `t.inv` is the inverse transform (`t.inv.inv is t`).
With `cache_size=1` a transform remembers its last (x, y) pair, by identity: `t.inv(t(x))` gives back `x` itself
without computing the inverse (what a tanh-squashed policy needs, atanh of a rounded 1.0 being inf), as torch.

>>> from uopkit import Tensor
>>> t = ComposeTransform([ExpTransform(), AffineTransform(1.0, 2.0)])
>>> t(Tensor([0.0])).tolist(), t.inv(Tensor([3.0])).tolist()
([3.0], [0.0])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from uopkit.distributions import constraints
from uopkit.distributions.distribution import _broadcast_shape, finfo_tiny_eps, sum_rightmost
from uopkit.tensor import Tensor

if TYPE_CHECKING:
    from uopkit.distributions.distribution import Distribution

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "CatTransform",
    "ComposeTransform",
    "CorrCholeskyTransform",
    "CumulativeDistributionTransform",
    "ExpTransform",
    "IndependentTransform",
    "LowerCholeskyTransform",
    "PositiveDefiniteTransform",
    "PowerTransform",
    "ReshapeTransform",
    "SigmoidTransform",
    "SoftmaxTransform",
    "SoftplusTransform",
    "StackTransform",
    "StickBreakingTransform",
    "TanhTransform",
    "Transform",
    "identity_transform",
]

Sign = int | Tensor


def _shape_of(value: Any) -> tuple[int, ...]:
    return tuple(value.shape) if isinstance(value, Tensor) else ()


def _all_equal(a: Tensor | float, b: Tensor | float) -> bool:
    # a parameter compared elementwise (read back once) when either side is a Tensor
    if isinstance(a, Tensor):
        return bool((a == b).all().item())
    if isinstance(b, Tensor):
        return bool((b == a).all().item())
    return a == b


class Transform:
    """An invertible (or pseudo-invertible) map with a computable log |det Jacobian|. Subclasses implement `_call`
    and/or `_inverse`, and `log_abs_det_jacobian` when bijective; `cache_size` is 0 or 1."""

    bijective = False
    domain: constraints.Constraint
    codomain: constraints.Constraint

    def __init__(self, cache_size: int = 0):
        if cache_size not in (0, 1):
            raise ValueError("cache_size must be 0 or 1")
        self._cache_size = cache_size
        self._inv: Transform | None = None
        self._cached_x_y: tuple[Tensor | None, Tensor | None] = (None, None)

    @property
    def event_dim(self) -> int:
        if self.domain.event_dim == self.codomain.event_dim:
            return self.domain.event_dim
        raise ValueError(
            f"{type(self).__name__}.event_dim is ambiguous: domain and codomain have different event dims; read "
            ".domain.event_dim or .codomain.event_dim"
        )

    @property
    def inv(self) -> Transform:
        """The inverse transform; `t.inv.inv is t`."""
        if self._inv is None:
            self._inv = _InverseTransform(self)
        return self._inv

    @property
    def sign(self) -> Sign:
        """The sign of the Jacobian's determinant (+1 or -1, or a Tensor of them) of a monotone transform."""
        raise NotImplementedError

    def with_cache(self, cache_size: int = 1) -> Transform:
        """This transform with `cache_size` (itself when it already has it)."""
        if self._cache_size == cache_size:
            return self
        if type(self).__init__ is Transform.__init__:
            return type(self)(cache_size=cache_size)
        raise NotImplementedError(f"{type(self)}.with_cache is not implemented")

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    # defining __eq__ drops the inherited hash; transforms are unhashable, as torch's
    __hash__ = None  # type: ignore[assignment]

    def __call__(self, x: Tensor) -> Tensor:
        """y = t(x)."""
        if self._cache_size == 0:
            return self._call(x)
        x_old, y_old = self._cached_x_y
        if x is x_old:
            return y_old  # type: ignore[return-value]
        y = self._call(x)
        self._cached_x_y = (x, y)
        return y

    def _inv_call(self, y: Tensor) -> Tensor:
        if self._cache_size == 0:
            return self._inverse(y)
        x_old, y_old = self._cached_x_y
        if y is y_old:
            return x_old  # type: ignore[return-value]
        x = self._inverse(y)
        self._cached_x_y = (x, y)
        return x

    def _call(self, x: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no forward map")

    def _inverse(self, y: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no inverse")

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        """log |det dy/dx| at the pair (x, y = t(x)), one value per application (its event axes summed)."""
        raise NotImplementedError(f"{type(self).__name__} has no log_abs_det_jacobian")

    def forward_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """The shape of t(x) for an x of `shape`."""
        return tuple(shape)

    def inverse_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """The shape of t.inv(y) for a y of `shape`."""
        return tuple(shape)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _InverseTransform(Transform):
    # the inverse of `transform`: its caching lives in the transform it inverts
    def __init__(self, transform: Transform):
        super().__init__(cache_size=transform._cache_size)
        self._inv = transform

    @property
    def _base(self) -> Transform:
        assert self._inv is not None
        return self._inv

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]
        return self._base.codomain

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]
        return self._base.domain

    @property
    def bijective(self) -> bool:  # type: ignore[override]
        return self._base.bijective

    @property
    def sign(self) -> Sign:
        return self._base.sign

    @property
    def inv(self) -> Transform:
        return self._base

    def with_cache(self, cache_size: int = 1) -> Transform:
        return self._base.with_cache(cache_size).inv

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _InverseTransform) and self._base == other._base

    def __call__(self, x: Tensor) -> Tensor:
        return self._base._inv_call(x)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return -self._base.log_abs_det_jacobian(y, x)

    def forward_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return self._base.inverse_shape(shape)

    def inverse_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return self._base.forward_shape(shape)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._base!r})"


class ComposeTransform(Transform):
    """`parts` applied in order (parts[0] first). The parts do the caching: `cache_size` is handed to each.

    >>> from uopkit import Tensor
    >>> t = ComposeTransform([AffineTransform(0.0, 2.0), ExpTransform()])
    >>> round(t.log_abs_det_jacobian(Tensor(0.5), t(Tensor(0.5))).item(), 4)  # log 2 + 2 * 0.5
    1.6931
    """

    def __init__(self, parts: Sequence[Transform], cache_size: int = 0):
        if not all(isinstance(part, Transform) for part in parts):
            raise TypeError("ComposeTransform: every part must be a Transform")
        if cache_size:
            parts = [part.with_cache(cache_size) for part in parts]
        super().__init__(cache_size=cache_size)
        self.parts = list(parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ComposeTransform) and self.parts == other.parts

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]
        if not self.parts:
            return constraints.real
        domain = self.parts[0].domain
        # the event axes the whole chain couples, walked back from the last codomain
        event_dim = self.parts[-1].codomain.event_dim
        for part in reversed(self.parts):
            event_dim += part.domain.event_dim - part.codomain.event_dim
            event_dim = max(event_dim, part.domain.event_dim)
        if event_dim > domain.event_dim:
            domain = constraints.independent(domain, event_dim - domain.event_dim)
        return domain

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]
        if not self.parts:
            return constraints.real
        codomain = self.parts[-1].codomain
        event_dim = self.parts[0].domain.event_dim
        for part in self.parts:
            event_dim += part.codomain.event_dim - part.domain.event_dim
            event_dim = max(event_dim, part.codomain.event_dim)
        if event_dim > codomain.event_dim:
            codomain = constraints.independent(codomain, event_dim - codomain.event_dim)
        return codomain

    @property
    def bijective(self) -> bool:  # type: ignore[override]
        return all(part.bijective for part in self.parts)

    @property
    def sign(self) -> Sign:
        sign: Sign = 1
        for part in self.parts:
            sign = sign * part.sign
        return sign

    @property
    def inv(self) -> Transform:
        if self._inv is None:
            inverse = ComposeTransform([part.inv for part in reversed(self.parts)])
            inverse._inv = self
            self._inv = inverse
        return self._inv

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return ComposeTransform(self.parts, cache_size=cache_size)

    def __call__(self, x: Tensor) -> Tensor:
        for part in self.parts:
            x = part(x)
        return x

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        if not self.parts:
            return x.zeros_like()
        xs = [x]
        for part in self.parts[:-1]:
            xs.append(part(xs[-1]))
        xs.append(y)
        total: Tensor | None = None
        # each part's term summed over the axes the chain couples beyond its own
        event_dim = self.domain.event_dim
        for part, x_in, y_out in zip(self.parts, xs[:-1], xs[1:], strict=True):
            term = sum_rightmost(part.log_abs_det_jacobian(x_in, y_out), event_dim - part.domain.event_dim)
            total = term if total is None else total + term
            event_dim += part.codomain.event_dim - part.domain.event_dim
        assert total is not None
        return total

    def forward_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        for part in self.parts:
            shape = part.forward_shape(shape)
        return tuple(shape)

    def inverse_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        for part in reversed(self.parts):
            shape = part.inverse_shape(shape)
        return tuple(shape)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(\n    " + ",\n    ".join(repr(part) for part in self.parts) + "\n)"


identity_transform = ComposeTransform([])


class IndependentTransform(Transform):
    """`base_transform` with its `reinterpreted_batch_ndims` rightmost batch axes read as event axes: the same map,
    its log_abs_det_jacobian summed over them."""

    def __init__(self, base_transform: Transform, reinterpreted_batch_ndims: int, cache_size: int = 0):
        super().__init__(cache_size=cache_size)
        self.base_transform = base_transform.with_cache(cache_size)
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return IndependentTransform(self.base_transform, self.reinterpreted_batch_ndims, cache_size=cache_size)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, IndependentTransform)
            and self.base_transform == other.base_transform
            and self.reinterpreted_batch_ndims == other.reinterpreted_batch_ndims
        )

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.independent(self.base_transform.domain, self.reinterpreted_batch_ndims)

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.independent(self.base_transform.codomain, self.reinterpreted_batch_ndims)

    @property
    def bijective(self) -> bool:  # type: ignore[override]
        return self.base_transform.bijective

    @property
    def sign(self) -> Sign:
        return self.base_transform.sign

    def _call(self, x: Tensor) -> Tensor:
        if x.ndim < self.domain.event_dim:
            raise ValueError("Too few dimensions on input")
        return self.base_transform(x)

    def _inverse(self, y: Tensor) -> Tensor:
        if y.ndim < self.codomain.event_dim:
            raise ValueError("Too few dimensions on input")
        return self.base_transform.inv(y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return sum_rightmost(self.base_transform.log_abs_det_jacobian(x, y), self.reinterpreted_batch_ndims)

    def forward_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return self.base_transform.forward_shape(shape)

    def inverse_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return self.base_transform.inverse_shape(shape)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_transform!r}, {self.reinterpreted_batch_ndims})"


class ReshapeTransform(Transform):
    """Reshapes the rightmost `in_shape` axes to `out_shape` (same number of elements); its Jacobian is 1."""

    bijective = True

    def __init__(self, in_shape: Sequence[int], out_shape: Sequence[int], cache_size: int = 0):
        self.in_shape, self.out_shape = tuple(in_shape), tuple(out_shape)
        if math.prod(self.in_shape) != math.prod(self.out_shape):
            raise ValueError(
                f"ReshapeTransform: in_shape {self.in_shape} and out_shape {self.out_shape} hold different numbers "
                "of elements"
            )
        super().__init__(cache_size=cache_size)

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.independent(constraints.real, len(self.in_shape))

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.independent(constraints.real, len(self.out_shape))

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return ReshapeTransform(self.in_shape, self.out_shape, cache_size=cache_size)

    def _call(self, x: Tensor) -> Tensor:
        return x.reshape(*x.shape[: x.ndim - len(self.in_shape)], *self.out_shape)

    def _inverse(self, y: Tensor) -> Tensor:
        return y.reshape(*y.shape[: y.ndim - len(self.out_shape)], *self.in_shape)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return Tensor.zeros(*x.shape[: x.ndim - len(self.in_shape)], dtype=x.dtype, device=x.device)

    def _reshaped(self, shape: Sequence[int], old: tuple[int, ...], new: tuple[int, ...]) -> tuple[int, ...]:
        shape = tuple(shape)
        if len(shape) < len(old):
            raise ValueError("Too few dimensions on input")
        cut = len(shape) - len(old)
        if shape[cut:] != old:
            raise ValueError(f"Shape mismatch: expected {shape[cut:]} but got {old}")
        return shape[:cut] + new

    def forward_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return self._reshaped(shape, self.in_shape, self.out_shape)

    def inverse_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return self._reshaped(shape, self.out_shape, self.in_shape)


class _Stateless(Transform):
    # a transform without parameters: equal to any other of its class, whatever their caches
    def __eq__(self, other: object) -> bool:
        return isinstance(other, type(self))


class ExpTransform(_Stateless):
    """y = exp(x)."""

    domain = constraints.real
    codomain = constraints.positive
    bijective = True
    sign = +1

    def _call(self, x: Tensor) -> Tensor:
        return x.exp()

    def _inverse(self, y: Tensor) -> Tensor:
        return y.log()

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return x


class PowerTransform(Transform):
    """y = x ** exponent on the positive reals; its sign is the exponent's."""

    domain = constraints.positive
    codomain = constraints.positive
    bijective = True

    def __init__(self, exponent: Tensor | float, cache_size: int = 0):
        super().__init__(cache_size=cache_size)
        self.exponent = exponent if isinstance(exponent, Tensor) else Tensor(float(exponent))

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return PowerTransform(self.exponent, cache_size=cache_size)

    @property
    def sign(self) -> Sign:
        return self.exponent.sign()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PowerTransform) and bool((self.exponent == other.exponent).all().item())

    def _call(self, x: Tensor) -> Tensor:
        return x.pow(self.exponent)

    def _inverse(self, y: Tensor) -> Tensor:
        return y.pow(1 / self.exponent)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return (self.exponent * y / x).abs().log()

    def forward_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return _broadcast_shape(shape, self.exponent.shape)

    def inverse_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return _broadcast_shape(shape, self.exponent.shape)


def _clipped_sigmoid(x: Tensor) -> Tensor:
    # sigmoid kept inside (0, 1) at the dtype's resolution, so that its logit is finite
    tiny, eps = finfo_tiny_eps(x.dtype)
    return x.sigmoid().clamp(tiny, 1.0 - eps)


class SigmoidTransform(_Stateless):
    """y = sigmoid(x) (clipped to [tiny, 1 - eps] of the dtype) and x = logit(y)."""

    domain = constraints.real
    codomain = constraints.unit_interval
    bijective = True
    sign = +1

    def _call(self, x: Tensor) -> Tensor:
        return _clipped_sigmoid(x)

    def _inverse(self, y: Tensor) -> Tensor:
        tiny, eps = finfo_tiny_eps(y.dtype)
        y = y.clamp(tiny, 1.0 - eps)
        return y.log() - (-y).log1p()

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return -(-x).softplus() - x.softplus()


class SoftplusTransform(_Stateless):
    """y = log(1 + exp(x)) (x itself above 20, as torch's softplus)."""

    domain = constraints.real
    codomain = constraints.positive
    bijective = True
    sign = +1

    def _call(self, x: Tensor) -> Tensor:
        return x.softplus()

    def _inverse(self, y: Tensor) -> Tensor:
        return (-(-y).expm1()).log() + y

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return -(-x).softplus()


class TanhTransform(_Stateless):
    """y = tanh(x), x = atanh(y). Use cache_size=1 where y comes from this transform: a y rounded to +-1 has an
    infinite atanh, the cache hands back the x instead (SAC's squashed Gaussian).

    >>> from uopkit import Tensor
    >>> round(TanhTransform().log_abs_det_jacobian(Tensor(0.0), Tensor(0.0)).item(), 6)
    0.0
    """

    domain = constraints.real
    codomain = constraints.interval(-1.0, 1.0)
    bijective = True
    sign = +1

    def _call(self, x: Tensor) -> Tensor:
        return x.tanh()

    def _inverse(self, y: Tensor) -> Tensor:
        return y.atanh()

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        # log(1 - tanh(x)^2) = 2 (log 2 - x - softplus(-2x)), finite for every x
        return 2.0 * (math.log(2.0) - x - (-2.0 * x).softplus())


class AbsTransform(_Stateless):
    """y = |x|; not bijective: its inverse is the identity (a right inverse), it has no log_abs_det_jacobian."""

    domain = constraints.real
    codomain = constraints.positive

    def _call(self, x: Tensor) -> Tensor:
        return x.abs()

    def _inverse(self, y: Tensor) -> Tensor:
        return y


class AffineTransform(Transform):
    """y = loc + scale * x, pointwise; `event_dim` of 1 or more makes its log_abs_det_jacobian one value per event
    (summed over those rightmost axes), as for a vector- or matrix-valued flow layer."""

    bijective = True

    def __init__(self, loc: Tensor | float, scale: Tensor | float, event_dim: int = 0, cache_size: int = 0):
        super().__init__(cache_size=cache_size)
        self.loc, self.scale, self._event_dim = loc, scale, event_dim

    @property
    def event_dim(self) -> int:
        return self._event_dim

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.real if self._event_dim == 0 else constraints.independent(constraints.real, self._event_dim)

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]
        return self.domain

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return AffineTransform(self.loc, self.scale, self._event_dim, cache_size=cache_size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AffineTransform):
            return False
        return _all_equal(self.loc, other.loc) and _all_equal(self.scale, other.scale)

    @property
    def sign(self) -> Sign:
        if isinstance(self.scale, Tensor):
            return self.scale.sign()
        return 1 if self.scale > 0 else -1 if self.scale < 0 else 0

    def _call(self, x: Tensor) -> Tensor:
        return self.loc + self.scale * x

    def _inverse(self, y: Tensor) -> Tensor:
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        if isinstance(self.scale, Tensor):
            result = self.scale.abs().log()
        else:
            result = x.full_like(math.log(abs(self.scale)))
        # the scale broadcast against x first, so that a scale shared along an event axis counts once per element
        shape = _broadcast_shape(x.shape, result.shape)
        result = result.expand(shape)
        if self._event_dim:
            result = sum_rightmost(result, self._event_dim)
        return result

    def forward_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return _broadcast_shape(shape, _shape_of(self.loc), _shape_of(self.scale))

    def inverse_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return _broadcast_shape(shape, _shape_of(self.loc), _shape_of(self.scale))


def _at_least_one_axis(shape: Sequence[int]) -> None:
    if len(shape) < 1:
        raise ValueError("Too few dimensions on input")


class SoftmaxTransform(_Stateless):
    """Unconstrained vectors onto the simplex: exp then normalize (the last axis). Not bijective (adding a constant
    changes nothing); its inverse is log."""

    domain = constraints.real_vector
    codomain = constraints.simplex

    def _call(self, x: Tensor) -> Tensor:
        probs = (x - x.max(axis=-1, keepdim=True)).exp()
        return probs / probs.sum(-1, keepdim=True)

    def _inverse(self, y: Tensor) -> Tensor:
        return y.log()

    def forward_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        _at_least_one_axis(shape)
        return tuple(shape)

    def inverse_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        _at_least_one_axis(shape)
        return tuple(shape)


def _stick_offsets(k: int, like: Tensor) -> Tensor:
    # k, k-1, ..., 1: the logit shift that maps x = 0 to the simplex's centre
    return Tensor.arange(k, 0, -1, device=like.device).cast(like.dtype)


class StickBreakingTransform(_Stateless):
    """Vectors of K reals onto the simplex of K + 1 (the last axis) by stick breaking: the i-th coordinate takes the
    fraction sigmoid(x_i - log(K - i)) of what is left. Bijective; x = 0 maps to the uniform point.

    >>> from uopkit import Tensor
    >>> [round(v, 4) for v in StickBreakingTransform()(Tensor([0.0, 0.0])).tolist()]
    [0.3333, 0.3333, 0.3333]
    """

    domain = constraints.real_vector
    codomain = constraints.simplex
    bijective = True

    def _call(self, x: Tensor) -> Tensor:
        z = _clipped_sigmoid(x - _stick_offsets(x.shape[-1], x).log())
        remaining = (1 - z).cumprod(-1)
        return z.pad((0, 1), value=1.0) * remaining.pad((1, 0), value=1.0)

    def _inverse(self, y: Tensor) -> Tensor:
        y_crop = y[..., :-1]
        tiny = finfo_tiny_eps(y.dtype)[0]
        left = (1 - y_crop.cumsum(-1)).clamp(min=tiny)
        return y_crop.log() - left.log() + _stick_offsets(y_crop.shape[-1], y).log()

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        shifted = x - _stick_offsets(x.shape[-1], x).log()
        return (-shifted + shifted.logsigmoid() + y[..., :-1].log()).sum(-1)

    def forward_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        _at_least_one_axis(shape)
        return (*shape[:-1], shape[-1] + 1)

    def inverse_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        _at_least_one_axis(shape)
        return (*shape[:-1], shape[-1] - 1)


class LowerCholeskyTransform(_Stateless):
    """Square matrices onto lower-triangular ones with a positive diagonal: the strict lower part kept, the diagonal
    exponentiated (the upper part dropped, so not bijective)."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.lower_cholesky

    def _call(self, x: Tensor) -> Tensor:
        return x.tril(-1) + x.diagonal(dim1=-2, dim2=-1).exp().diag_embed()

    def _inverse(self, y: Tensor) -> Tensor:
        return y.tril(-1) + y.diagonal(dim1=-2, dim2=-1).log().diag_embed()


def _strict_lower(vec: Tensor, n: int) -> Tensor:
    # the last axis of `vec` (n (n - 1) / 2 values) laid out row by row below the diagonal of n x n matrices, zeros
    # elsewhere: row i takes the next i values
    rows = [Tensor.zeros(*vec.shape[:-1], n, dtype=vec.dtype, device=vec.device)]
    start = 0
    for i in range(1, n):
        rows.append(vec[..., start : start + i].pad((0, n - i)))
        start += i
    return Tensor.stack(*rows, dim=-2)


def _below_diagonal(m: Tensor, offset: int) -> list[Tensor]:
    # the pieces of each row of square matrices left of diagonal `offset` (< 0), row by row: their concatenation is
    # the inverse of _strict_lower for offset -1
    n = m.shape[-1]
    return [m[..., i, : i + offset + 1] for i in range(-offset, n)]


def _tril_count_to_size(count: int) -> int:
    # n with n (n - 1) / 2 == count, or an error
    n = round((0.25 + 2 * count) ** 0.5 + 0.5)
    if n * (n - 1) // 2 != count:
        raise ValueError(f"the last dim ({count}) is not the size of a flattened strictly lower triangle (n(n-1)/2)")
    return n


class CorrCholeskyTransform(_Stateless):
    """Vectors of n (n - 1) / 2 reals onto the Cholesky factors of n x n correlation matrices (lower triangular,
    positive diagonal, rows of unit length). The values fill the strict lower triangle row by row; each becomes a
    partial correlation r = tanh(x) (kept inside (-1, 1) by the dtype's eps), and row i is built by signed stick
    breaking: L_ij = r_ij sqrt(prod_{k<j} (1 - r_ik^2)) below the diagonal, L_ii the square root of what is left.
    Bijective; log_abs_det_jacobian is that of x onto the strict lower triangle of L (the diagonal follows from it).

    >>> from uopkit import Tensor
    >>> [[round(v, 4) for v in row] for row in CorrCholeskyTransform()(Tensor([0.0])).tolist()]
    [[1.0, 0.0], [0.0, 1.0]]
    """

    domain = constraints.real_vector
    codomain = constraints.corr_cholesky
    bijective = True

    def _call(self, x: Tensor) -> Tensor:
        n = self.forward_shape(x.shape)[-1]
        eps = finfo_tiny_eps(x.dtype)[1]
        r = _strict_lower(x.tanh().clamp(-1 + eps, 1 - eps), n)
        # the length left in each row before column j: the running product of sqrt(1 - r^2) up to column j - 1
        left = (1 - r * r).sqrt().cumprod(-1)[..., :-1].pad((1, 0), value=1.0)
        eye = Tensor.eye(n, dtype=x.dtype, device=x.device)
        return (r + eye) * left

    def _inverse(self, y: Tensor) -> Tensor:
        self.inverse_shape(y.shape)
        # r_ij = L_ij / (what is left of row i before column j)
        left = (1 - (y * y).cumsum(-1))[..., :-1].pad((1, 0), value=1.0)
        pieces = _below_diagonal(y, -1)
        lefts = _below_diagonal(left, -1)
        if not pieces:
            # 1 x 1: nothing below the diagonal
            return Tensor.zeros(*y.shape[:-2], 0, dtype=y.dtype, device=y.device)
        t = pieces[0].cat(*pieces[1:], dim=-1) / lefts[0].cat(*lefts[1:], dim=-1).sqrt()
        return 0.5 * (t.log1p() - (-t).log1p())

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        # stick breaking: half the log of what is left of each row after every column but its last two below the
        # diagonal; tanh: log(1 - tanh(x)^2) = 2 (log 2 - x - softplus(-2x))
        left = 1 - (y * y).cumsum(-1)
        tanh_part = (2.0 * (math.log(2.0) - x - (-2.0 * x).softplus())).sum(-1)
        for piece in _below_diagonal(left, -2):
            tanh_part = tanh_part + 0.5 * piece.log().sum(-1)
        return tanh_part

    def forward_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        _at_least_one_axis(shape)
        n = _tril_count_to_size(shape[-1])
        return (*shape[:-1], n, n)

    def inverse_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        if len(shape) < 2:
            raise ValueError("Too few dimensions on input")
        if shape[-2] != shape[-1]:
            raise ValueError("Input is not square")
        n = shape[-1]
        return (*shape[:-2], n * (n - 1) // 2)


class PositiveDefiniteTransform(_Stateless):
    """Square matrices onto positive-definite ones: L L^T for L the LowerCholeskyTransform of x."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.positive_definite

    def _call(self, x: Tensor) -> Tensor:
        lower = LowerCholeskyTransform()(x)
        return lower @ lower.mT

    def _inverse(self, y: Tensor) -> Tensor:
        return LowerCholeskyTransform().inv(y.cholesky())


def _check_axis(value: Tensor, dim: int, size: int, what: str) -> None:
    if not -value.ndim <= dim < value.ndim:
        raise ValueError(f"dim {dim} out of range for a tensor with {value.ndim} dimensions")
    if value.shape[dim] != size:
        raise ValueError(f"{what}: axis {dim} of a tensor of shape {value.shape} is not of size {size}")


class CatTransform(Transform):
    """`tseq[i]` applied to the i-th piece of axis `dim` (pieces of sizes `lengths`, 1 each by default), the results
    concatenated as Tensor.cat."""

    def __init__(
        self, tseq: Sequence[Transform], dim: int = 0, lengths: Sequence[int] | None = None, cache_size: int = 0
    ):
        if not all(isinstance(t, Transform) for t in tseq):
            raise TypeError("CatTransform: every element of tseq must be a Transform")
        if cache_size:
            tseq = [t.with_cache(cache_size) for t in tseq]
        super().__init__(cache_size=cache_size)
        self.transforms, self.dim = list(tseq), dim
        self.lengths = [1] * len(self.transforms) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.transforms):
            raise ValueError(f"CatTransform: {len(self.lengths)} lengths for {len(self.transforms)} transforms")

    @property
    def event_dim(self) -> int:
        return max(t.event_dim for t in self.transforms)

    @property
    def length(self) -> int:
        return sum(self.lengths)

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return CatTransform(self.transforms, self.dim, self.lengths, cache_size)

    def _pieces(self, value: Tensor) -> list[Tensor]:
        _check_axis(value, self.dim, self.length, "CatTransform")
        pieces, start = [], 0
        for length in self.lengths:
            pieces.append(value.narrow(self.dim, start, length))
            start += length
        return pieces

    def _call(self, x: Tensor) -> Tensor:
        ys = [t(piece) for t, piece in zip(self.transforms, self._pieces(x), strict=True)]
        return ys[0].cat(*ys[1:], dim=self.dim)

    def _inverse(self, y: Tensor) -> Tensor:
        xs = [t.inv(piece) for t, piece in zip(self.transforms, self._pieces(y), strict=True)]
        return xs[0].cat(*xs[1:], dim=self.dim)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        terms = []
        for t, x_piece, y_piece in zip(self.transforms, self._pieces(x), self._pieces(y), strict=True):
            terms.append(sum_rightmost(t.log_abs_det_jacobian(x_piece, y_piece), self.event_dim - t.event_dim))
        # an axis that remains in the terms is concatenated; one summed away (an event axis) adds the pieces
        dim = self.dim - x.ndim if self.dim >= 0 else self.dim
        if dim < -self.event_dim:
            return terms[0].cat(*terms[1:], dim=dim + self.event_dim)
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        return total

    @property
    def bijective(self) -> bool:  # type: ignore[override]
        return all(t.bijective for t in self.transforms)

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.cat([t.domain for t in self.transforms], self.dim, self.lengths)

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.cat([t.codomain for t in self.transforms], self.dim, self.lengths)


class StackTransform(Transform):
    """`tseq[i]` applied to index i of axis `dim`, the results stacked as Tensor.stack."""

    def __init__(self, tseq: Sequence[Transform], dim: int = 0, cache_size: int = 0):
        if not all(isinstance(t, Transform) for t in tseq):
            raise TypeError("StackTransform: every element of tseq must be a Transform")
        if cache_size:
            tseq = [t.with_cache(cache_size) for t in tseq]
        super().__init__(cache_size=cache_size)
        self.transforms, self.dim = list(tseq), dim

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return StackTransform(self.transforms, self.dim, cache_size)

    def _slices(self, value: Tensor) -> list[Tensor]:
        _check_axis(value, self.dim, len(self.transforms), "StackTransform")
        return [value.select(self.dim, i) for i in range(len(self.transforms))]

    def _call(self, x: Tensor) -> Tensor:
        ys = [t(piece) for t, piece in zip(self.transforms, self._slices(x), strict=True)]
        return Tensor.stack(*ys, dim=self.dim)

    def _inverse(self, y: Tensor) -> Tensor:
        xs = [t.inv(piece) for t, piece in zip(self.transforms, self._slices(y), strict=True)]
        return Tensor.stack(*xs, dim=self.dim)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        pairs = zip(self.transforms, self._slices(x), self._slices(y), strict=True)
        return Tensor.stack(*(t.log_abs_det_jacobian(xs, ys) for t, xs, ys in pairs), dim=self.dim)

    @property
    def bijective(self) -> bool:  # type: ignore[override]
        return all(t.bijective for t in self.transforms)

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.stack([t.domain for t in self.transforms], self.dim)

    @property
    def codomain(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.stack([t.codomain for t in self.transforms], self.dim)


class CumulativeDistributionTransform(Transform):
    """y = distribution.cdf(x) onto [0, 1] (a copula's margin); its log_abs_det_jacobian is the log density."""

    bijective = True
    codomain = constraints.unit_interval
    sign = +1

    def __init__(self, distribution: Distribution, cache_size: int = 0):
        super().__init__(cache_size=cache_size)
        self.distribution = distribution

    @property
    def domain(self) -> constraints.Constraint:  # type: ignore[override]
        return self.distribution.support  # type: ignore[return-value]

    def _call(self, x: Tensor) -> Tensor:
        return self.distribution.cdf(x)

    def _inverse(self, y: Tensor) -> Tensor:
        return self.distribution.icdf(y)

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        return self.distribution.log_prob(x)

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return CumulativeDistributionTransform(self.distribution, cache_size=cache_size)
