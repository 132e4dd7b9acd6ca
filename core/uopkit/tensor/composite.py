"""PyTorch's Tensor methods that are compositions of others: NaN-ignoring extremes, differences, splits, histograms
and bincount, the mode, matrix and tensor products, the special functions erfc and erfinv, constructors from a tensor
(new_*), the stacks, atleast_Nd and block_diag, and covariance (a mixin of `Tensor`). Each is built from existing
Tensor methods, so it stays lazy and gets its gradients from what it calls (or from a derivative given whole, where the
formula's chain of rules isn't one)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import DType, dtypes, to_dtype, to_numpy_dtype
from uopkit.gradient import set_gradient
from uopkit.helpers import prod
from uopkit.tensor import segments
from uopkit.tensor.autocast import without_autocast
from uopkit.tensor.leaf_constructors import _creates_leaf
from uopkit.tensor.reduce import _CUM_BLOCK_MASKED, _CUM_LEVEL_BLOCK, ValuesIndices
from uopkit.tensor.replay import replayed
from uopkit.tensor.series import _TWO_OVER_SQRT_PI, _erf_near_zero, _erfc_beyond_half, _erfc_of_abs, _horner
from uopkit.tensor.support import (
    ArgumentError,
    DTypeError,
    EmptyReduceError,
    ShapeError,
    UnsupportedDTypeError,
    _broadcast_shape,
    _dim_for_axis,
    _dtype_arg,
    _host_values,
    _normalize_axis,
    _rounded_to,
    _shape_args,
    _with_derivative,
    in_float32,
)
from uopkit.uop.ops import UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


# ---------------------------------------------------------------------------------------------------------------------
# erfinv: polynomials fitted (offline, with mpmath) to float32's and float64's precision (erf's and erfc's are in
# tensor/series.py)

# Giles' single-precision erfinv ("Approximating the erfinv function", GPU Computing Gems, 2011): erfinv(y) = y * p,
# p a polynomial in w - 2.5 for w = -log(1 - y**2) < 5, else in sqrt(w) - 3; highest power first. A third polynomial
# in sqrt(w) - 5 (interpolated at Chebyshev points with mpmath, relative error 1.2e-8) takes sqrt(w) >= 4, which only a
# float64 reaches (1 - |y| below 6e-8)
_GILES_CENTRAL = (
    2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
    0.246640727, 1.50140941,
)  # fmt: skip
_GILES_TAIL = (
    -0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
    1.00167406, 2.83297682,
)  # fmt: skip
_GILES_FAR = (
    4.196348994232952e-06, -2.1693653936965705e-05, 7.696565101007677e-05, -0.00021391688427691211,
    -0.00013913949383057093, 1.0103003079857482, 4.849906425234675,
)  # fmt: skip

# hypot squares its operands scaled by a power of two (exact) where the squares would overflow or underflow:
# (largest |operand| above, scale), (below, scale)
_HYPOT_SCALES = {
    dtypes.float32: ((2.0**60, 2.0**-100), (2.0**-60, 2.0**100)),
    dtypes.float64: ((2.0**500, 2.0**-600), (2.0**-500, 2.0**600)),
}


def _erfinv_halley_step(x: Tensor, y: Tensor) -> Tensor:
    """One Halley step toward erfinv(y) from x (float64): near 0 on erf(x) - y, in the tails on erfc(|x|) - (1 - |y|)
    (1 - |y| is exact there, where erf(x) - y would lose the digits that count). Both f satisfy f'' = -2x f', so the
    step is x - d / (1 + x d) with d = f / f'."""
    s = y.abs()
    gauss = _TWO_OVER_SQRT_PI * (-(x * x)).exp()
    tail = s > 0.5
    a = x.abs()
    d = tail.where(((1 - s) - _erfc_of_abs(a)) / gauss, (_erf_near_zero(x) - y) / gauss)
    moved = tail.where(a, x)
    moved = moved - d / (1 + moved * d)
    return tail.where((y < 0).where(-moved, moved), moved)


def _with_xlogy_gradient(out: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """`out` = xlogy(x, y), with torch's gradient: xlogy(grad, y) for x, so that a zero incoming gradient stays 0 beside
    log(0) = -inf (a product with the derivative log(y) would make it NaN), and 0 where x is 0 and y <= 0; grad * x / y
    for y."""
    x_uop, y_uop = x.uop, y.uop
    inputs = (x_uop,) if x_uop is y_uop else (x_uop, y_uop)

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
        grad, x_now, y_now = Tensor(g), Tensor(x_uop), Tensor(y_uop)
        scaled_log = y_now.isnan().where(math.nan, (grad == 0).where(0.0, grad * y_now.log()))
        dx = ((x_now == 0) & (y_now <= 0)).where(0.0, scaled_log)
        dy = grad * x_now / y_now
        if len(inputs) == 1:
            return ((dx + dy).uop,)
        return tuple(d.uop if w else None for d, w in zip((dx, dy), wanted, strict=True))

    set_gradient(out.uop, inputs, rule)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# helpers


def _tensor_list(first: Any, rest: tuple, op: str) -> list[Tensor]:
    # the tensors of a.hstack(b, c), Tensor.hstack(a, b) or, as torch.hstack, Tensor.hstack([a, b])
    tensors = [first] if isinstance(first, Tensor) else list(first)
    tensors += list(rest[0]) if len(rest) == 1 and isinstance(rest[0], (list, tuple)) else list(rest)
    if not tensors:
        raise ArgumentError(f"{op}: needs at least one tensor")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: expects tensors, got {type(t).__name__}")
    return tensors


# the shape a tensor of fewer dims takes in atleast_2d / atleast_3d (dstack and block_diag too), by its ndim
_AT_LEAST: dict[int, dict[int, Any]] = {
    1: {0: lambda s: (1,)},
    2: {0: lambda s: (1, 1), 1: lambda s: (1, *s)},
    3: {0: lambda s: (1, 1, 1), 1: lambda s: (1, *s, 1), 2: lambda s: (*s, 1)},
}


def _at_least(first: Any, rest: tuple, ndim: int, op: str) -> Tensor | tuple[Tensor, ...]:
    # atleast_Nd of one tensor (a tensor) or of several, or of a list (a tuple)
    tensors = _tensor_list(first, rest, op)
    out = tuple(t.reshape(_AT_LEAST[ndim][t.ndim](t.shape)) if t.ndim < ndim else t for t in tensors)
    return out[0] if isinstance(first, Tensor) and not rest else out


def _joined(tensors: list[Tensor], dim: int, op: str) -> Tensor:
    # Tensor.cat, its shape errors named after the op the user called
    try:
        return Tensor.cat(tensors, dim)
    except ShapeError as e:
        raise ShapeError(f"{op}: {e}") from None


def _as_tensor(x: Any, op: str, name: str = "other") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor, got {type(x).__name__}")
    return x


def _axis_list(axes: Any, ndim: int, op: str, shape: tuple[int, ...]) -> list[int]:
    # one axis or a sequence of them, normalized
    raw = [axes] if isinstance(axes, (int, np.integer)) else list(axes)
    out = [_normalize_axis(int(a), ndim, op, shape, scalar=False) for a in raw]
    if len(set(out)) != len(out):
        raise ArgumentError(f"{op}: an axis appears more than once in {tuple(raw)} (shape {shape})")
    return out


def _check_weights(w: Any, n: int, name: str, integral: bool) -> Tensor:
    # cov's fweights (integers) and aweights (floats): one weight per observation
    w = _as_tensor(w, "cov", name)
    if w.ndim > 1:
        raise ShapeError(f"cov: {name} must have one or fewer dimensions, got shape {w.shape}")
    if integral and not dtypes.is_int(w.dtype):
        raise DTypeError(f"cov: {name} must have an integer dtype, got {w.dtype}; cast them with .long()")
    if not integral and not dtypes.is_float(w.dtype):
        raise DTypeError(f"cov: {name} must have a floating-point dtype, got {w.dtype}; cast them with .float()")
    if w.numel() != n:
        raise ShapeError(f"cov: {name} has {w.numel()} elements for {n} observations; give one per observation")
    return w


def _check_weight_values(fweights: Tensor | None, aweights: Tensor | None, total: Tensor, n: int) -> None:
    # torch's checks of cov's weights, in its order: their signs (when there are observations), then their sum; read
    # back to the host together
    checks = [
        (f"{name} cannot be negative", w.min() >= 0)
        for name, w in (("fweights", fweights), ("aweights", aweights))
        if w is not None and n
    ]
    checks.append(("the weights add up to 0, they can't be normalized", total != 0))
    passed = Tensor.stack(*(flag for _, flag in checks)).tolist()
    for (message, _), ok in zip(checks, passed, strict=True):
        if not ok:
            raise ArgumentError(f"cov: {message}")


def _logcumsumexp_along_last(t: Tensor) -> Tensor:
    """logcumsumexp along the last axis: short rows as a logsumexp of every prefix (masked with -inf); long ones in
    blocks, each block's prefixes combined by logaddexp with the running total of the blocks before it (one max
    shift for the whole row underflowed: a prefix far below the row's max came out -inf)."""
    n = t.shape[-1]
    if n <= _CUM_BLOCK_MASKED:
        return t._prefixes(-math.inf).logsumexp(-1)
    b = _CUM_LEVEL_BLOCK
    count = math.ceil(n / b)
    lead = ((0, 0),) * (t.ndim - 1)
    blocks = _logcumsumexp_along_last(
        t.pad(lead + ((0, count * b - n),), value=-math.inf).reshape(t.shape[:-1] + (count, b))
    )
    before = _logcumsumexp_along_last(blocks[..., -1]).pad(lead + ((1, -1),), value=-math.inf)
    out = blocks.logaddexp(before.unsqueeze(-1))
    return out.reshape(t.shape[:-1] + (count * b,))[..., :n]


class CompositeMixin:
    __slots__ = ()

    # ------------------------------------------------------------------------------------------------------------
    # elementwise

    def fmax(self, other: Tensor) -> Tensor:
        """Elementwise maximum that ignores NaN (NaN only where both are), broadcast and promoted as `maximum`, as
        torch.fmax; of equal values (0.0 and -0.0) self's. The gradient goes to the value taken.

        >>> Tensor([1.0, float("nan"), 3.0]).fmax(Tensor([float("nan"), 2.0, 1.0])).tolist()
        [1.0, 2.0, 3.0]
        """
        a, b = self._broadcasted(_as_tensor(other, "fmax"), False, "fmax")
        # torch's selection: self where other is NaN or not larger (and where both are NaN)
        return (b.isnan() | (a >= b)).where(a, b)

    def fmin(self, other: Tensor) -> Tensor:
        """Elementwise minimum that ignores NaN (NaN only where both are), as torch.fmin (see `fmax`).

        >>> Tensor([1.0, float("nan"), 3.0]).fmin(Tensor([float("nan"), 2.0, 1.0])).tolist()
        [1.0, 2.0, 1.0]
        """
        a, b = self._broadcasted(_as_tensor(other, "fmin"), False, "fmin")
        return (b.isnan() | (a <= b)).where(a, b)

    def signbit(self) -> Tensor:
        """Where the sign bit is set: negative numbers, -0.0, -inf and a NaN with its sign set, as torch.signbit.

        >>> Tensor([-0.0, 0.0, -2.0]).signbit().tolist()
        [True, False, True]
        """
        if dtypes.is_float(self.dtype):
            # (the bits read as a signed int of the same width: negative exactly when the sign bit is set)
            same_width = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[self.dtype.itemsize]
            return self.bitcast(same_width) < 0
        if self.dtype == dtypes.bool or dtypes.is_unsigned(self.dtype):
            return self.full_like(False, dtype=dtypes.bool)
        return self < 0

    def isneginf(self) -> Tensor:
        """Where the value is -inf (never for ints), as torch.isneginf.

        >>> Tensor([float("-inf"), float("inf"), 1.0]).isneginf().tolist()
        [True, False, False]
        """
        return self.isinf(detect_positive=False)

    def isposinf(self) -> Tensor:
        """Where the value is +inf (never for ints), as torch.isposinf.

        >>> Tensor([float("-inf"), float("inf"), 1.0]).isposinf().tolist()
        [False, True, False]
        """
        return self.isinf(detect_negative=False)

    @replayed
    def frac(self) -> Tensor:
        """The fractional part, x - trunc(x), with x's sign (NaN for +-inf), as torch.frac; floats only, as torch.

        >>> Tensor([1.5, -2.25]).frac().tolist()
        [0.5, -0.25]
        """
        if not dtypes.is_float(self.dtype):
            raise UnsupportedDTypeError(f"frac: not defined for {self.dtype} (as PyTorch); cast to a float dtype first")
        return self - self.trunc()

    def xlogy(self, other: Any) -> Tensor:
        """self * log(other), 0 where self is 0 (also where other is 0 or inf) and NaN where other is NaN, as
        torch.xlogy; ints and bools promote to a float; half floats round the logarithm and the product, as
        torch's. The gradient is torch's: xlogy(grad, other) for self (0 where self is 0 and other <= 0), grad *
        self / other for other.

        >>> Tensor([0.0, 2.0]).xlogy(Tensor([0.0, 1.0])).tolist()
        [0.0, 0.0]
        """
        if not isinstance(self, CompositeMixin):
            # torch.xlogy(2.0, t): a number as self
            a, b = (t._float() for t in other._broadcasted(self, True, "xlogy", floats=True))
        else:
            a, b = (t._float() for t in self._broadcasted(other, False, "xlogy", floats=True))
        out = b.isnan().where(math.nan, (a == 0).where(0.0, a * b.log()))
        return _with_xlogy_gradient(out, a, b)

    def hypot(self, other: Tensor) -> Tensor:
        """sqrt(self**2 + other**2) without overflow or underflow on the way (inf where either is infinite, even
        beside NaN), as torch.hypot; at least one operand must be a float tensor, as torch. The gradient is
        self / hypot and other / hypot (NaN at (0, 0), as torch's).

        >>> Tensor([3.0, 1e30]).hypot(Tensor([4.0, 1e30])).tolist()
        [5.0, 1.4142135130433894e+30]
        """
        a, b = self._broadcasted(_as_tensor(other, "hypot"), False, "hypot")
        dt = a.dtype
        if not dtypes.is_float(dt):
            raise UnsupportedDTypeError(
                f"hypot: not defined for {dt} operands (as PyTorch); cast to a float dtype first"
            )
        if dt in dtypes.halves:
            a, b = a.float(), b.float()
        (big, down), (tiny, up) = (
            (limit, Tensor(scale, device=a.device, dtype=a.dtype)) for limit, scale in _HYPOT_SCALES[a.dtype]
        )
        largest = a.abs().maximum(b.abs())
        scale = (largest > big).where(down, (largest < tiny).where(up, 1.0))
        sa, sb = a * scale, b * scale
        out = (sa * sa + sb * sb).sqrt() / scale
        out = (a.isinf() | b.isinf()).where(math.inf, out)
        da, db = a / out, b / out
        out = _with_derivative(out, a, da + db) if a.uop is b.uop else _with_derivative(out, a, da, (b, db))
        return out.cast(dt)

    @replayed
    @in_float32
    def erfc(self) -> Tensor:
        """The complementary error function 1 - erf(x), accurate in relative terms where it is small (x up to 10:
        exp(-x**2) times a fitted polynomial, never 1 - erf(x)), as torch.erfc; ints promote to float32. About 5e-7
        relative in float32, 1e-15 in float64.

        >>> f"{Tensor([5.0]).erfc().item():.6e}"
        '1.537460e-12'
        """
        x = self._float()
        a = x.abs()
        far = _erfc_beyond_half(a)
        out = (a < 0.5).where(1 - _erf_near_zero(x), (x < 0).where(2 - far, far))
        return _with_derivative(out, x, -_TWO_OVER_SQRT_PI * (-(x * x)).exp())

    @replayed
    @in_float32
    def erfinv(self) -> Tensor:
        """The inverse error function: +-inf at +-1, NaN beyond, as torch.erfinv; ints promote to float32. Giles'
        approximation (about 3 ulps in float32), and in float64 one Halley step on it (a few ulps). The gradient is
        sqrt(pi) / 2 * exp(erfinv(x)**2).

        >>> round(Tensor([0.5]).erfinv().item(), 6)
        0.476936
        """
        y = self._float()
        w = -((1 - y) * (1 + y)).log()
        root = w.sqrt()
        central, tail, far = (
            _horner(w - 2.5, _GILES_CENTRAL),
            _horner(root - 3, _GILES_TAIL),
            _horner(root - 5, _GILES_FAR),
        )
        x = (w < 5).where(central, (root < 4).where(tail, far)) * y
        if y.dtype == dtypes.float64:
            x = _erfinv_halley_step(x, y)
        # (beyond +-1 the logarithm is NaN already)
        x = (y.abs() == 1).where(y * math.inf, x)
        return _with_derivative(x, y, (math.sqrt(math.pi) / 2) * (x * x).exp())

    # ------------------------------------------------------------------------------------------------------------
    # along an axis

    def logcumsumexp(self, axis: int = 0, *, dim: int | None = None) -> Tensor:
        """log(cumsum(exp(x))) along `axis`, each prefix shifted by its own max (no overflow, no underflow to -inf).

        >>> [round(v, 4) for v in Tensor([0.0, 0.0]).logcumsumexp().tolist()]
        [0.0, 0.6931]
        """
        if dim is not None:
            axis = _dim_for_axis(axis, dim, 0, "logcumsumexp")
        if not dtypes.is_float(self.dtype):
            # (torch has no int kernel: a log of summed exponentials of counts is a slip, cast first if meant)
            raise UnsupportedDTypeError(
                f"logcumsumexp: needs a floating-point input, got {self.dtype} (as PyTorch); cast with .float() first"
            )
        x = self
        axis = _normalize_axis(axis, x.ndim, "logcumsumexp", x.shape)
        if x.ndim == 0 or x.shape[axis] == 0:
            return x
        return _logcumsumexp_along_last(x.transpose(axis, -1)).transpose(axis, -1)

    def diff(self, n: int = 1, dim: int = -1, prepend: Tensor | None = None, append: Tensor | None = None) -> Tensor:
        """The n-th forward difference along `dim` (out[i] = x[i + 1] - x[i], applied n times; bools XOR), `prepend`
        and `append` joined to the input first, as torch.diff; n at least the length gives an empty axis.

        >>> Tensor([1, 4, 9, 16]).diff().tolist()
        [3, 5, 7]
        >>> Tensor([1, 4, 9, 16]).diff(n=2, prepend=Tensor([0])).tolist()
        [2, 2, 2]
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ArgumentError(f"diff: n must be a non-negative int, got {n!r}")
        axis = _normalize_axis(dim, self.ndim, "diff", self.shape, scalar=False)
        parts = []
        for name, t in (("prepend", prepend), (None, self), ("append", append)):
            if t is None:
                continue
            if name is not None:
                t = _as_tensor(t, "diff", name)
                if t.ndim != self.ndim or any(
                    a != b for i, (a, b) in enumerate(zip(t.shape, self.shape, strict=True)) if i != axis
                ):
                    raise ShapeError(
                        f"diff: {name} of shape {t.shape} doesn't fit the input's shape {self.shape} outside "
                        f"dimension {axis}"
                    )
            parts.append(t)
        if n == 0:
            # (torch's: no difference at all, prepend and append left out too)
            return self
        x = Tensor.cat(parts, axis) if len(parts) > 1 else self
        for _ in range(n):
            length = x.shape[axis]
            if length == 0:
                break
            later, earlier = x._slice_axis(axis, 1, length), x._slice_axis(axis, 0, length - 1)
            x = later != earlier if x.dtype == dtypes.bool else later - earlier
        return x

    def take_along_dim(self, indices: Tensor, dim: int | None = None) -> Tensor:
        """The values at `indices` along `dim` (negative ones count from the end), input and indices broadcast
        against each other off `dim`, as torch.take_along_dim; with dim None, of the flattened tensor (no negative
        indices, as torch). Indices of any integer dtype (torch: int64 only); one out of range raises an IndexError
        (torch's CPU reads whatever is there).

        >>> Tensor([[10, 30, 20], [60, 40, 50]]).take_along_dim(Tensor([[0], [-1]]), 1).tolist()
        [[10], [50]]
        """
        if not isinstance(indices, Tensor) or not dtypes.is_int(indices.dtype):
            raise TypeError(f"take_along_dim: indices must be an integer tensor, got {indices!r}")
        if dim is None:
            x, idx, axis = self.reshape(-1), indices.reshape(-1), 0
        else:
            if self.ndim == 0:
                raise IndexError(f"take_along_dim: dim {dim} is out of range for a 0-d tensor (give dim=None)")
            axis = _normalize_axis(dim, self.ndim, "take_along_dim", self.shape)
            if indices.ndim != self.ndim:
                raise ShapeError(
                    f"take_along_dim: indices of shape {indices.shape} need as many dimensions as the input's "
                    f"shape {self.shape}"
                )
            off_dim = [s if i != axis else indices.shape[axis] for i, s in enumerate(self.shape)]
            shape = _broadcast_shape(tuple(off_dim), indices.shape, "take_along_dim")
            x = self._broadcast_to(tuple(s if i != axis else self.shape[axis] for i, s in enumerate(shape)))
            idx = indices._broadcast_to(shape)
        n = x.shape[axis]
        x._check_index_range(idx, n, axis, "take_along_dim", negative=dim is not None)
        if n > dtypes.max(idx.dtype):
            # (an int8 index of a long axis: + n would wrap)
            idx = idx.cast(dtypes.int32)
        return x._gather_checked(axis, (idx < 0).where(idx + n, idx))

    def tensor_split(self, indices_or_sections: int | Sequence[int] | Tensor, dim: int = 0) -> tuple[Tensor, ...]:
        """Views of the tensor split along `dim`, as torch.tensor_split: into `sections` pieces of near-equal size
        (the first `size % sections` one longer), or at the positions in a list of `indices` (Python's slicing:
        negative ones count from the end, out-of-order ones give empty pieces). A tensor gives either: 0-d an int,
        1-D the indices (read back to the host).

        >>> [t.tolist() for t in Tensor.arange(7).tensor_split(3)]
        [[0, 1, 2], [3, 4], [5, 6]]
        >>> [t.tolist() for t in Tensor.arange(7).tensor_split([1, 5])]
        [[0], [1, 2, 3, 4], [5, 6]]
        """
        axis = _normalize_axis(dim, self.ndim, "tensor_split", self.shape, scalar=False)
        spec: Any = indices_or_sections
        if isinstance(spec, Tensor):
            if not dtypes.is_int(spec.dtype):
                raise TypeError(f"tensor_split: a tensor of indices or sections must be integer, got {spec.dtype}")
            if spec.ndim > 1:
                raise ShapeError(f"tensor_split: a tensor of indices must be 0-d or 1-D, got shape {spec.shape}")
            spec = int(spec.item()) if spec.ndim == 0 else [int(v) for v in spec.tolist()]
        n = self.shape[axis]
        if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
            if spec <= 0:
                raise ArgumentError(f"tensor_split: the number of sections must be positive, got {spec}")
            size, longer = divmod(n, int(spec))
            edges = [0]
            for i in range(int(spec)):
                edges.append(edges[-1] + size + (i < longer))
            bounds = list(itertools.pairwise(edges))
        elif isinstance(spec, (list, tuple)) and all(isinstance(i, (int, np.integer)) for i in spec):
            cuts: list[int | None] = [None, *(int(i) for i in spec), None]
            bounds = [slice(a, b).indices(n)[:2] for a, b in itertools.pairwise(cuts)]
        else:
            raise TypeError(f"tensor_split: takes an int, a sequence of ints or an integer tensor, got {spec!r}")
        return tuple(self._slice_axis(axis, start, max(start, stop)) for start, stop in bounds)

    def mode(self, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
        """The most frequent value along `dim` and where it is: (values, indices), as torch.mode. Of equally frequent
        values the smallest (torch's rule), at the last position that holds it: torch's CPU index of rows up to 16
        long; for longer rows torch's comes from an unstable sort (one of the positions, unspecified). A row with NaNs
        gives torch's CPU answer for rows up to 16 long (see `_mode_groups`): each NaN is a value of its own, and the
        NaNs split the numbers into groups counted apart, so `[nan, nan, 3.0]` has mode NaN at 0. Indices are int32;
        the gradient goes to the returned position, as torch's.

        >>> [t.tolist() for t in Tensor([[3, 1, 3, 1, 2], [5, 5, 2, 0, 0]]).mode()]
        [[1, 0], [3, 4]]
        """
        axis = _normalize_axis(dim, self.ndim, "mode", self.shape)
        if self.ndim == 0:
            return ValuesIndices(self, Tensor(0, device=self.device, dtype=dtypes.int32))
        if self.shape[axis] == 0:
            raise EmptyReduceError(f"mode: axis {dim} of shape {self.shape} is empty, it has no mode")
        x = self._move_to_end(axis)
        last, n = x.ndim - 1, x.shape[-1]
        ordered, order = x.sort(-1)
        # equal values are runs of the sorted row (a NaN is unequal to every value: a run of its own); each position
        # counts how far its run has come, so a run's length is reached at its end
        changed = ordered._slice_axis(last, 1, n) != ordered._slice_axis(last, 0, n - 1)
        if dtypes.is_float(x.dtype):
            # torch's order: by group first (a stable sort of the groups of the value-sorted row); a run ends at a
            # change of group too
            groups, by_group = x._mode_groups()._gather_checked(last, order).sort(-1)
            order = order._gather_checked(last, by_group)
            ordered = x._gather_checked(last, order)
            changed = (ordered._slice_axis(last, 1, n) != ordered._slice_axis(last, 0, n - 1)) | (
                groups._slice_axis(last, 1, n) != groups._slice_axis(last, 0, n - 1)
            )
        positions = Tensor.arange(n, device=self.device, dtype=dtypes.positions(n))
        begins = changed.where(positions._slice_axis(0, 1, n), 0).pad(((0, 0),) * last + ((1, 0),))
        run_length = positions - begins.cummax(-1)[0] + 1
        # the first longest run ends here: the smallest most frequent value, its last element in the stable order
        index = order._gather_checked(last, run_length.argmax(-1, keepdim=True))
        values = x._gather_checked(last, index)
        values, index = values._move_from_end(axis), index._move_from_end(axis)
        return ValuesIndices(values, index) if keepdim else ValuesIndices(values.squeeze(axis), index.squeeze(axis))

    def _mode_groups(self) -> Tensor:
        # (along the last axis, floats) torch's CPU mode orders a row by std::sort with `<`, which for rows up to 16
        # is an insertion sort: a NaN never moves, and a number moves left past the larger numbers up to the nearest
        # NaN, or to the front when it is below the row's first element (a number then: the minimum so far). So
        # the numbers before the first NaN, and each later new strict minimum, sort into group 0, any other number into
        # group 2k after the k-th NaN, and the k-th NaN is group 2k - 1 (each a run of its own)
        last, n = self.ndim - 1, self.shape[-1]
        nan = self.isnan()
        nans = nan.cast(dtypes.positions(n)).cumsum(-1)
        # (the minimum of the numbers before each position; the first's is never read: nans == 0 there or it's NaN)
        low = nan.where(math.inf, self).cummin(-1)[0]._slice_axis(last, 0, n - 1).pad(((0, 0),) * last + ((1, 0),))
        jumps = (self < low) & ~nan._slice_axis(last, 0, 1)
        return nan.where(2 * nans - 1, (jumps | (nans == 0)).where(0, 2 * nans))

    def histc(self, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:  # noqa: A002 - torch's names
        """A histogram of all elements in `bins` equal bins over [min, max] (the data's min and max where min == max,
        as torch; a range of one value widened by 1 each way), the last bin taking max too and values outside (and
        NaN) left out, as torch.histc: the counts in the input's float dtype. Each element's bin is torch's
        (x - min) * bins / (max - min) in that dtype, truncated. The data's range is read back to the host (one sync,
        as torch's .item()); a given range is not. Counts are exact, then rounded to the dtype (torch's CPU adds 1s in
        a half float, which stops counting at 2048 in float16). No gradient, as torch.

        >>> Tensor([1.0, 2.0, 1.0, 4.0]).histc(bins=4, min=0, max=4).tolist()
        [0.0, 2.0, 1.0, 1.0]
        """
        if not dtypes.is_float(self.dtype):
            raise UnsupportedDTypeError(f"histc: not defined for {self.dtype} (as PyTorch); cast to a float dtype")
        if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)):
            raise TypeError(f"histc: bins must be an int, got {type(bins).__name__}")
        if bins <= 0:
            raise ArgumentError(f"histc: bins must be positive, got {bins}")
        lo, hi = float(min), float(max)
        x = self.detach().reshape(-1)
        if lo == hi and x.numel():
            lo, hi = (float(v) for v in Tensor.stack(x.min(), x.max()).numpy())
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ArgumentError(f"histc: the range [{lo}, {hi}] is not finite")
        if lo > hi:
            raise ArgumentError(f"histc: max ({hi}) must be larger than min ({lo})")
        dt, device = self.dtype, self.device
        lo_t, hi_t = Tensor(lo, device=device, dtype=dt), Tensor(hi, device=device, dtype=dt)
        inside = (x >= lo_t) & (x <= hi_t)
        # (each op in the dtype, as torch's kernel: `bins` is rounded to it too)
        position = (x - lo_t) * Tensor(float(bins), device=device, dtype=dt) / (hi_t - lo_t)
        # the last bin takes max; an element outside sits in no bin (-1)
        bin_index = inside.where(inside.where(position, 0).cast(dtypes.int32).minimum(bins - 1), -1)
        # a 1 added at each element's bin (a 0 at bin 0 for one outside); every bin is in range by construction
        counts = segments.added_at(bin_index.maximum(0), inside.cast(dtypes.int32), bins)
        return counts.cast(dt)

    def bincount(self, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
        """How often each value 0..max occurs in a 1-D tensor of non-negative ints (at least `minlength` bins), as
        torch.bincount, counts in int32 (torch: int64); with `weights` the sum of the weights of each value's
        elements (float32 weights give float32, other weights float64, as torch), whose gradient flows back (torch
        has none). The output's length depends on the data: its min and max are read back.

        >>> Tensor([0, 2, 2, 5]).bincount().tolist()
        [1, 0, 2, 0, 0, 1]
        """
        if not dtypes.is_int(self.dtype):
            # (torch's kernel is "not implemented for" floats and bools: NotImplementedError, which this is too)
            raise UnsupportedDTypeError(f"bincount: needs a tensor of non-negative ints, got {self.dtype}")
        if self.ndim != 1:
            raise ShapeError(f"bincount: needs a 1-D tensor, got shape {self.shape}")
        if minlength < 0:
            raise ArgumentError(f"bincount: minlength must be >= 0, got {minlength}")
        if weights is not None and (not isinstance(weights, Tensor) or weights.shape != self.shape):
            got = weights.shape if isinstance(weights, Tensor) else type(weights).__name__
            raise ShapeError(f"bincount: weights must be a tensor of the input's shape {self.shape}, got {got}")
        size = minlength
        if self.numel():
            lowest, highest = (int(v) for v in Tensor.stack(self.min(), self.max()).cast(dtypes.int64).numpy())
            if lowest < 0:
                raise ArgumentError(f"bincount: the input must be non-negative, it holds {lowest}")
            size = max(size, highest + 1)
        dt = dtypes.int32 if weights is None else dtypes.float32 if weights.dtype == dtypes.float32 else dtypes.float64
        # each value's 1 (or weight) added at its bin: the values are in [0, size) as read back above
        added = Tensor.ones(self.shape, device=self.device, dtype=dt) if weights is None else weights.cast(dt)
        return segments.added_at(self, added, size)

    # ------------------------------------------------------------------------------------------------------------
    # products

    def cross(self, other: Tensor, dim: int | None = None) -> Tensor:
        """The cross product of 3-vectors along `dim` (None: the first dimension of size 3 of self, as torch.cross;
        torch.linalg.cross's default is -1), the other dimensions broadcast, as torch.cross. Operands of two dtypes
        promote (torch refuses them); bools are refused, as torch.

        >>> Tensor([1, 0, 0]).cross(Tensor([0, 1, 0])).tolist()
        [0, 0, 1]
        """
        other = _as_tensor(other, "cross")
        if self.ndim != other.ndim:
            raise ShapeError(f"cross: inputs need the same number of dimensions, got {self.shape} and {other.shape}")
        if dim is None:
            if 3 not in self.shape:
                raise ShapeError(f"cross: no dimension of size 3 in shape {self.shape}; give dim")
            dim = self.shape.index(3)
        axis = _normalize_axis(dim, self.ndim, "cross", self.shape, scalar=False)
        if self.shape[axis] != 3 or other.shape[axis] != 3:
            raise ShapeError(
                f"cross: dimension {axis} must have length 3 in both inputs, got {self.shape} and {other.shape}"
            )
        if dtypes.bool in (self.dtype, other.dtype):
            raise DTypeError("cross: not defined for bool tensors (as PyTorch); cast to a number dtype first")
        a, b = self._broadcasted(other, False, "cross")
        # component i is a[i + 1] * b[i + 2] - a[i + 2] * b[i + 1], indices modulo 3
        return a.roll(-1, axis) * b.roll(-2, axis) - a.roll(-2, axis) * b.roll(-1, axis)

    def kron(self, other: Tensor) -> Tensor:
        """The Kronecker product: block (i, j, ...) is self[i, j, ...] * other (the shapes' lengths evened with
        leading 1s), as torch.kron.

        >>> Tensor([1, 2]).kron(Tensor([1, 10])).tolist()
        [1, 10, 2, 20]
        """
        other = _as_tensor(other, "kron")
        n = max(self.ndim, other.ndim)
        sa = (1,) * (n - self.ndim) + self.shape
        sb = (1,) * (n - other.ndim) + other.shape
        # a's axes interleaved with b's: (a0, 1, a1, 1, ...) * (1, b0, 1, b1, ...), then each pair merged
        spread_a = self.reshape(tuple(v for s in sa for v in (s, 1)))
        spread_b = other.reshape(tuple(v for s in sb for v in (1, s)))
        return (spread_a * spread_b).reshape(tuple(x * y for x, y in zip(sa, sb, strict=True)))

    def tensordot(self, other: Tensor, dims: int | Sequence[Any] | Tensor = 2) -> Tensor:
        """The sum of products over paired dimensions, as torch.tensordot: `dims` an int (self's last `dims` with
        other's first `dims`) or two lists of dimensions (a tensor gives either); a paired dimension of size 1 beside
        a longer one is summed first, as torch. Operands of two dtypes promote, as matmul.

        >>> Tensor.ones(2, 3, 4).tensordot(Tensor.ones(3, 4, 5)).shape
        (2, 5)
        >>> Tensor([[1, 2], [3, 4]]).tensordot(Tensor([[1, 0], [0, 1]]), ([1], [0])).tolist()
        [[1, 2], [3, 4]]
        """
        other = _as_tensor(other, "tensordot")
        if isinstance(dims, Tensor):
            if not dtypes.is_int(dims.dtype) or dims.ndim not in (0, 2):
                raise TypeError(f"tensordot: dims as a tensor must be a 0-d or 2-D integer tensor, got {dims!r}")
            dims = int(dims.item()) if dims.ndim == 0 else dims.tolist()
        if isinstance(dims, (int, np.integer)) and not isinstance(dims, bool):
            if dims < 0:
                raise ArgumentError(f"tensordot: dims must be >= 0, got {dims}")
            if dims > min(self.ndim, other.ndim):
                raise ShapeError(f"tensordot: dims={dims} is more than the dimensions of {self.shape} or {other.shape}")
            axes_a, axes_b = list(range(self.ndim - int(dims), self.ndim)), list(range(int(dims)))
        elif isinstance(dims, (list, tuple)) and len(dims) == 2:
            axes_a = _axis_list(dims[0], self.ndim, "tensordot", self.shape)
            axes_b = _axis_list(dims[1], other.ndim, "tensordot", other.shape)
            if len(axes_a) != len(axes_b):
                raise ArgumentError(f"tensordot: the two lists of dims differ in length: {dims!r}")
        else:
            raise TypeError(f"tensordot: dims must be an int or two lists of dimensions, got {dims!r}")
        a, b = self, other
        for i, j in zip(axes_a, axes_b, strict=True):
            if a.shape[i] != b.shape[j]:
                if a.shape[i] == 1:
                    b = b.sum(j, keepdim=True)
                elif b.shape[j] == 1:
                    a = a.sum(i, keepdim=True)
                else:
                    raise ShapeError(
                        f"tensordot: paired dimensions differ: {a.shape[i]} (dim {i} of {self.shape}) and "
                        f"{b.shape[j]} (dim {j} of {other.shape})"
                    )
        free_a = [d for d in range(a.ndim) if d not in axes_a]
        free_b = [d for d in range(b.ndim) if d not in axes_b]
        shape_a, shape_b = tuple(a.shape[d] for d in free_a), tuple(b.shape[d] for d in free_b)
        paired = prod(a.shape[d] for d in axes_a)
        # one matrix product: (free of a, paired) @ (paired, free of b)
        rows = a.permute(free_a + axes_a).reshape(prod(shape_a), paired)
        cols = b.permute(axes_b + free_b).reshape(paired, prod(shape_b))
        return rows.dot(cols).reshape(shape_a + shape_b)

    def mm(self, mat2: Tensor) -> Tensor:
        """The product of two matrices (2-D only, as torch.mm; matmul broadcasts). Two dtypes promote, as matmul.

        >>> Tensor([[1, 2]]).mm(Tensor([[3], [4]])).tolist()
        [[11]]
        """
        mat2 = _as_tensor(mat2, "mm", "mat2")
        if self.ndim != 2 or mat2.ndim != 2:
            raise ShapeError(f"mm: needs two matrices (2-D), got shapes {self.shape} and {mat2.shape}")
        if self.shape[1] != mat2.shape[0]:
            raise ShapeError(f"mm: shapes {self.shape} and {mat2.shape} can't be multiplied")
        return self.dot(mat2)

    def bmm(self, mat2: Tensor) -> Tensor:
        """Batched matrix products of two 3-D tensors with the same batch size (no broadcasting, as torch.bmm).

        >>> Tensor.ones(5, 2, 3).bmm(Tensor.ones(5, 3, 4)).shape
        (5, 2, 4)
        """
        mat2 = _as_tensor(mat2, "bmm", "mat2")
        if self.ndim != 3 or mat2.ndim != 3:
            raise ShapeError(f"bmm: needs two 3-D tensors, got shapes {self.shape} and {mat2.shape}")
        if self.shape[0] != mat2.shape[0] or self.shape[2] != mat2.shape[1]:
            raise ShapeError(
                f"bmm: shapes {self.shape} and {mat2.shape} can't be multiplied (the same batch, and inner sizes)"
            )
        return self.dot(mat2)

    @without_autocast
    def mv(self, vec: Tensor) -> Tensor:
        """The product of a matrix and a vector, as torch.mv.

        >>> Tensor([[1, 2], [3, 4]]).mv(Tensor([1, 1])).tolist()
        [3, 7]
        """
        vec = _as_tensor(vec, "mv", "vec")
        if self.ndim != 2 or vec.ndim != 1:
            raise ShapeError(f"mv: needs a matrix and a vector, got shapes {self.shape} and {vec.shape}")
        if self.shape[1] != vec.shape[0]:
            raise ShapeError(f"mv: shapes {self.shape} and {vec.shape} can't be multiplied")
        return self.dot(vec)

    # ------------------------------------------------------------------------------------------------------------
    # statistics

    def cov(self, correction: int = 1, fweights: Tensor | None = None, aweights: Tensor | None = None) -> Tensor:
        """The covariance matrix of the variables in the rows (observations in the columns; a 1-D tensor is one
        variable), dividing by N - correction, with integer frequency weights and float weights as torch.cov: ints
        give float32, half floats compute op by op as torch's; no degrees of freedom left (N - correction <= 0)
        gives inf or NaN, as torch (which warns). Negative weights, or weights that add up to 0, raise: their check
        reads them back to the host (one sync); without weights nothing is read.

        >>> Tensor([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]]).cov().tolist()
        [[1.0, -1.0], [-1.0, 1.0]]
        """
        if self.ndim > 2:
            raise ShapeError(f"cov: needs a tensor of two or fewer dimensions, got shape {self.shape}")
        if self.dtype == dtypes.bool:
            raise DTypeError("cov: bool tensors have no covariance (as PyTorch); cast to a number dtype first")
        x = self.reshape(1, -1) if self.ndim < 2 else self
        n = x.shape[1]
        w = None if fweights is None else _check_weights(fweights, n, "fweights", integral=True)
        if aweights is not None:
            aweights = _check_weights(aweights, n, "aweights", integral=False)
            w = aweights if w is None else w * aweights
        norm: Any
        if w is None:
            avg = x.sum(1) / n
            norm = max(n - correction, 0)
        else:
            w = w.reshape(-1)
            total = w.sum()
            _check_weight_values(fweights, aweights, total, n)
            avg = (x * w).sum(1) / total
            norm = total - correction
            if aweights is not None and correction != 0:
                norm = total - correction * (w * aweights.reshape(-1)).sum() / total
            norm = (norm <= 0).where(0, norm)
        centered = x - avg.unsqueeze(1)
        products = centered.mm((centered if w is None else centered * w).t())
        return (products / norm).squeeze()

    def corrcoef(self) -> Tensor:
        """Pearson's correlation coefficients of the variables in the rows (cov divided by the standard deviations,
        clipped to [-1, 1]), as torch.corrcoef; NaN for a variable that doesn't vary.

        >>> Tensor([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]]).corrcoef().tolist()
        [[1.0, -1.0], [-1.0, 1.0]]
        """
        if self.ndim > 2:
            raise ShapeError(f"corrcoef: needs a tensor of two or fewer dimensions, got shape {self.shape}")
        c = self.cov()
        if c.ndim == 0:
            # one variable: 1, or NaN where its variance is 0, inf or NaN
            return c / c
        std = c.diagonal().sqrt()
        c = c / std.reshape(-1, 1)
        c = c / std.reshape(1, -1)
        return c.clip(-1, 1)

    # ------------------------------------------------------------------------------------------------------------
    # construction

    @staticmethod
    @_creates_leaf
    def logspace(start: float, end: float, steps: int, base: float = 10.0, **kwargs: Any) -> Tensor:
        """`steps` values from base ** start to base ** end, their exponents evenly spaced, as torch.logspace (whose
        formula, on the host as `linspace`: the first half counted up from start, the second down from end; an
        integer dtype takes start and end converted to it and computes in float32, as torch).

        >>> Tensor.logspace(0, 2, 3).tolist()
        [1.0, 10.0, 100.0]
        """
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)):
            raise TypeError(f"logspace: steps must be an int, got {type(steps).__name__}")
        if steps < 0:
            raise ArgumentError(f"logspace: steps must be >= 0, got {steps}")
        dtype = to_dtype(_dtype_arg(kwargs, dtypes.default_float))
        if dtype == dtypes.bool:
            raise DTypeError("logspace: no bool logspace (as PyTorch); build the values in a number dtype and cast")
        with np.errstate(over="ignore"):
            # (a power beyond the dtype is inf, as torch's, without numpy's warning)
            values = _host_values(_logspace_values(start, end, steps, base, dtype), dtype)
        return Tensor(values, dtype=dtype, **kwargs)

    def new_zeros(
        self, *size: Any, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None
    ) -> Tensor:
        """Zeros of `size` with this tensor's dtype and device (unless given), as torch.Tensor.new_zeros.

        >>> Tensor([1, 2]).new_zeros(2, 3).tolist()
        [[0, 0, 0], [0, 0, 0]]
        """
        return self.new_full(_shape_args(size), 0, dtype=dtype, device=device, requires_grad=requires_grad)

    def new_ones(
        self, *size: Any, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None
    ) -> Tensor:
        """Ones of `size` with this tensor's dtype and device (unless given), as torch.Tensor.new_ones.

        >>> Tensor([1.5]).new_ones((2,)).tolist()
        [1.0, 1.0]
        """
        return self.new_full(_shape_args(size), 1, dtype=dtype, device=device, requires_grad=requires_grad)

    def new_full(
        self,
        size: int | Sequence[int],
        fill_value: Any,
        *,
        dtype: DType | str | None = None,
        device: str | None = None,
        requires_grad: bool | None = None,
    ) -> Tensor:
        """`size` filled with `fill_value`, with this tensor's dtype and device (unless given), as
        torch.Tensor.new_full (a value the dtype can't hold raises, as Tensor.full).

        >>> Tensor([1, 2]).new_full((2,), 7).tolist()
        [7, 7]
        """
        return Tensor.full(
            _shape_args((size,)),
            fill_value,
            dtype=self.dtype if dtype is None else dtype,
            device=self.device if device is None else device,
            requires_grad=requires_grad,
        )

    def new_empty(
        self, *size: Any, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None
    ) -> Tensor:
        """An allocated tensor of `size`, values unset, with this tensor's dtype and device (unless given), as
        torch.Tensor.new_empty.

        >>> Tensor([1, 2]).new_empty(3).shape
        (3,)
        """
        return Tensor.empty(
            *_shape_args(size),
            dtype=self.dtype if dtype is None else dtype,
            device=self.device if device is None else device,
            requires_grad=requires_grad,
        )

    def new_tensor(
        self, data: Any, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool = False
    ) -> Tensor:
        """A new leaf holding `data` (a list, number, array or tensor: copied, not a view), in this tensor's dtype and
        device unless given, as torch.Tensor.new_tensor (floats into an integer dtype truncate).

        >>> Tensor([1, 2]).new_tensor([1.5, -2.5]).tolist()
        [1, -2]
        """
        dt = self.dtype if dtype is None else to_dtype(dtype)
        dev = self.device if device is None else device
        if isinstance(data, Tensor):
            # (storage of its own, outside the graph data came from)
            out = data.detach().cast(dt).to(dev).contiguous()
        else:
            out = Tensor(data, device=dev, dtype=dt)
        if requires_grad:
            out.requires_grad = True
        return out

    # ------------------------------------------------------------------------------------------------------------
    # flattening and stacking

    def ravel(self) -> Tensor:
        """The elements as a 1-D tensor (a view where strides can show it, as torch.ravel).

        >>> Tensor([[1, 2], [3, 4]]).ravel().tolist()
        [1, 2, 3, 4]
        """
        return self.reshape(-1)

    def hstack(self: Tensor | Sequence[Tensor], *args: Any) -> Tensor:
        """Join tensors column-wise: along dim 1, or dim 0 when they are 1-D (0-d ones become 1-D), as torch.hstack;
        `a.hstack(b)`, `Tensor.hstack(a, b)` or `Tensor.hstack([a, b])`.

        >>> Tensor.hstack([Tensor([1, 2]), Tensor([3])]).tolist()
        [1, 2, 3]
        """
        tensors = [t.reshape(1) if t.ndim == 0 else t for t in _tensor_list(self, args, "hstack")]
        return _joined(tensors, 0 if tensors[0].ndim == 1 else 1, "hstack")

    def concat(self: Tensor | Sequence[Tensor], *args: Any, dim: int | None = None) -> Tensor:
        """torch.concat and torch.concatenate, torch's other names for `cat` (dim by position or keyword).

        >>> Tensor.concat([Tensor([1]), Tensor([2, 3])], dim=0).tolist()
        [1, 2, 3]
        """
        return Tensor.cat(self, *args, dim=dim)

    concatenate = concat

    def vstack(self: Tensor | Sequence[Tensor], *args: Any) -> Tensor:
        """Join tensors row-wise, along dim 0 (1-D ones become rows, 0-d ones 1x1), as torch.vstack.

        >>> Tensor.vstack([Tensor([1, 2]), Tensor([3, 4])]).tolist()
        [[1, 2], [3, 4]]
        """
        tensors = _tensor_list(self, args, "vstack")
        return _joined([t.reshape((1,) * (2 - t.ndim) + t.shape) if t.ndim < 2 else t for t in tensors], 0, "vstack")

    def dstack(self: Tensor | Sequence[Tensor], *args: Any) -> Tensor:
        """Join tensors depth-wise, along dim 2 (0-d ones become 1x1x1, 1-D of n 1xnx1, 2-D ones get a last dim of 1),
        as torch.dstack.

        >>> Tensor.dstack([Tensor([1, 2]), Tensor([3, 4])]).tolist()
        [[[1, 3], [2, 4]]]
        """
        tensors = _tensor_list(self, args, "dstack")
        return _joined([t.reshape(_AT_LEAST[3][t.ndim](t.shape)) if t.ndim < 3 else t for t in tensors], 2, "dstack")

    def column_stack(self: Tensor | Sequence[Tensor], *args: Any) -> Tensor:
        """Join tensors as columns: 0-d and 1-D ones become columns, the others join along dim 1, as
        torch.column_stack.

        >>> Tensor.column_stack([Tensor([1, 2]), Tensor([3, 4])]).tolist()
        [[1, 3], [2, 4]]
        """
        tensors = _tensor_list(self, args, "column_stack")
        return _joined([t.reshape(t.numel(), 1) if t.ndim < 2 else t for t in tensors], 1, "column_stack")

    def atleast_1d(self: Tensor | Sequence[Tensor], *args: Any) -> Tensor | tuple[Tensor, ...]:
        """The tensor with at least 1 dim (a 0-d one becomes (1,); a view), as torch.atleast_1d: `t.atleast_1d()`;
        `Tensor.atleast_1d(a, b)` or `Tensor.atleast_1d([a, b])` give a tuple.

        >>> Tensor(5).atleast_1d().shape
        (1,)
        """
        return _at_least(self, args, 1, "atleast_1d")

    def atleast_2d(self: Tensor | Sequence[Tensor], *args: Any) -> Tensor | tuple[Tensor, ...]:
        """The tensor with at least 2 dims (0-d becomes (1, 1), 1-D (1, n)), as torch.atleast_2d; as `atleast_1d`
        for several tensors.

        >>> Tensor([1, 2]).atleast_2d().shape
        (1, 2)
        """
        return _at_least(self, args, 2, "atleast_2d")

    def atleast_3d(self: Tensor | Sequence[Tensor], *args: Any) -> Tensor | tuple[Tensor, ...]:
        """The tensor with at least 3 dims (0-d becomes (1, 1, 1), 1-D (1, n, 1), 2-D (m, n, 1)), as
        torch.atleast_3d; as `atleast_1d` for several tensors.

        >>> Tensor([[1, 2]]).atleast_3d().shape
        (1, 2, 1)
        """
        return _at_least(self, args, 3, "atleast_3d")

    def block_diag(self: Tensor | Sequence[Tensor], *args: Tensor) -> Tensor:
        """A block-diagonal matrix of the tensors (each 2-D; a 0-d one is 1 x 1, a 1-D one a row), zeros elsewhere,
        in their common dtype, as torch.block_diag.

        >>> Tensor.block_diag(Tensor([[1, 2]]), Tensor(3)).tolist()
        [[1, 2, 0], [0, 0, 3]]
        """
        blocks = _tensor_list(self, args, "block_diag")
        for i, t in enumerate(blocks):
            if t.ndim > 2:
                raise ShapeError(f"block_diag: tensors must have 2 or fewer dims, tensor {i} has shape {t.shape}")
        blocks = [t.reshape(_AT_LEAST[2][t.ndim](t.shape)) if t.ndim < 2 else t for t in blocks]
        width, start, rows = sum(t.shape[1] for t in blocks), 0, []
        for t in blocks:
            # each block's rows, padded with zeros to the full width at its place
            rows.append(t.pad(((0, 0), (start, width - start - t.shape[1]))))
            start += t.shape[1]
        return _joined(rows, 0, "block_diag")


def _logspace_values(start: float, end: float, steps: int, base: float, dtype: DType) -> np.ndarray:
    """torch.logspace's values on the host, by its CPU kernel's formula: the exponents of the first half counted up
    from start by step, the second half down from end; start and end converted to the dtype first, the rest in float64
    (in float32 for an integer dtype, whose values are the powers truncated)."""
    if steps <= 1:
        return np.array([float(base) ** float(start)] * steps)
    i = np.arange(steps)
    if dtypes.is_int(dtype):
        first, last = (np.float32(np.array(int(v)).astype(to_numpy_dtype(dtype))) for v in (start, end))
        step = np.float32(last - first) / np.float32(steps - 1)
        up, down = i.astype(np.float32), (steps - 1 - i).astype(np.float32)
        exponents = np.where(i < steps // 2, first + step * up, last - step * down)
        # (a power beyond the dtype is C's undefined behaviour in torch's cast: whatever numpy's cast gives)
        with np.errstate(over="ignore", invalid="ignore"):
            return np.power(np.float32(base), exponents.astype(np.float32)).astype(to_numpy_dtype(dtype))
    first, last = (_rounded_to(float(v), dtype) for v in (start, end))
    # (their difference in the dtype, as torch's)
    step = _rounded_to(last - first, dtype) / (steps - 1)
    exponents = np.where(i < steps // 2, first + step * i, last - step * (steps - 1 - i))
    with np.errstate(over="ignore", invalid="ignore"):
        values = np.power(float(base), exponents)
    # the finite ones by the C library's pow, as torch's (numpy's vectorized power can be an ulp off: 10 ** 2.5)
    finite = np.flatnonzero(np.isfinite(values))
    values[finite] = [_c_pow(float(base), float(e)) for e in exponents[finite]]
    # (a double stored into float16 goes through float32 in torch's C++, rounding twice)
    return values.astype(np.float32) if dtype == dtypes.float16 else values


def _c_pow(base: float, exponent: float) -> float:
    try:
        return math.pow(base, exponent)
    except OverflowError:
        return math.copysign(math.inf, base) if exponent % 2 == 1 else math.inf
