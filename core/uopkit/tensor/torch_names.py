"""PyTorch's other names for existing Tensor methods (`greater`, `moveaxis`, `absolute`, ...) and its short
compositions of them (`addmm`, `inner`, `rot90`, `hsplit`, ...), with torch's argument checks.

The methods here build on the other mixins' public methods only: a semantic change there reaches them too.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import DType, dtypes, finfo, iinfo, least_upper_dtype, least_upper_float, to_dtype
from uopkit.schedule import live_tensors
from uopkit.tensor import leaves as _leaves
from uopkit.tensor import tensor_hooks as _tensor_hooks
from uopkit.tensor.autocast import FLOAT32, LOWER, autocast_op
from uopkit.tensor.factorize import _square, _with_right_side
from uopkit.tensor.indexing import _in_place_method, _share_storage
from uopkit.tensor.memory_format import as_memory_format, dims_order
from uopkit.tensor.reduce import MinMax
from uopkit.tensor.support import (
    _A_COPY,
    _A_RESHAPED_COPY,
    ArgumentError,
    DTypeError,
    ShapeError,
    _axis_for_dim,
    _contiguous_strides,
    _normalize_axis,
    _torch_layout,
    _with_derivative,
)
from uopkit.tensor.triangular import cholesky_solve as _triangular_cholesky_solve
from uopkit.tensor.unique import slices_as_rows
from uopkit.tensor.unread import with_zero_gradient_to

if TYPE_CHECKING:
    from uopkit.tensor.generator import Generator
    from uopkit.tensor.tensor import Tensor


def _alias(name: str, target: str, doc: str | None = None) -> Any:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(self, TorchNamesMixin) and args and isinstance(args[0], TorchNamesMixin):
            # a number first (torch.bitwise_left_shift(1, t)): the tensor's class method takes it, as the target's own
            return getattr(type(args[0]), target)(self, *args, **kwargs)
        if not isinstance(self, TorchNamesMixin):
            # a number (torch.divide(7, 2)): the target's own rule for one, an error or a 0-d tensor
            return getattr(Tensor, target)(self, *args, **kwargs)
        return getattr(self, target)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc or f"torch's name for `{target}`."
    return method


def _one_number(t: Tensor, what: str, op: str) -> float:
    # a one-element tensor argument (torch's tensor overloads of scalar parameters) read back as its number
    if t.numel() != 1:
        raise ShapeError(f"{op}: {what} must be a number or a one-element tensor, got shape {t.shape}")
    return t.detach().reshape(()).item()


def _fake_quantized(
    x: Tensor,
    scale: float | Tensor,
    inv_scale: float | Tensor,
    zero_point: int | Tensor,
    quant_min: int,
    quant_max: int,
    op: str,
    float_zero_point: bool = False,
) -> Tensor:
    """torch's fake-quantize kernels: q = round(x * inv_scale) + zero_point (round(x * inv_scale + zero_point) for
    float zero points), clamped to [quant_min, quant_max] (NaN to quant_min: fmax's), minus zero_point, times scale,
    with the straight-through gradient inside the range."""
    if not dtypes.is_float(x.dtype):
        raise TypeError(f"{op}: needs a floating-point tensor, got {x.dtype}; cast with .float()")
    if quant_min > quant_max:
        raise ArgumentError(f"{op}: quant_min ({quant_min}) must be <= quant_max ({quant_max})")
    # (in float64 for a float64 x, as torch's kernels, except the per-tensor one's final product: float32)
    work = x if x.dtype == dtypes.float64 else x.float()
    q = (work * inv_scale + zero_point).round() if float_zero_point else (work * inv_scale).round() + zero_point
    clamped = (q >= quant_min).where(q, quant_min)
    clamped = (clamped <= quant_max).where(clamped, quant_max)
    value = (clamped - zero_point) * scale if isinstance(scale, Tensor) else (clamped - zero_point).float() * scale
    # the gradient straight through where q was in range (an inf or NaN x is outside)
    inside = (q >= quant_min) & (q <= quant_max)
    return _with_derivative(value, work, inside.detach()).cast(x.dtype)


def _need_dims(t: Tensor, n: int, op: str) -> None:
    if t.ndim < n:
        raise ShapeError(f"{op}: needs a tensor of {n} or more dims, got shape {t.shape}")


def _scaled_sum(
    base: Tensor,
    op: str,
    operands: tuple[Tensor, Tensor],
    ndims: tuple[int, int],
    product: Callable[[Tensor, Tensor], tuple[Tensor, DType]],
    beta: Any,
    alpha: Any,
) -> Tensor:
    """beta * base + alpha * product(*operands), torch's add*mm family (operands of `ndims` dims): with beta 0 `base`
    is not read (its NaN don't show). `product` gives its sums and the dtype they round to; half floats summed in
    float32 are scaled and added to a base of their dtype there and rounded once, as torch's CPU kernels."""
    a, b = operands
    if (a.ndim, b.ndim) != ndims:
        raise ShapeError(f"{op}: needs operands of {ndims[0]} and {ndims[1]} dims, got shapes {a.shape} and {b.shape}")
    acc, out_dt = product(a, b)
    once = out_dt in dtypes.halves and acc.dtype is not out_dt and base.dtype is out_dt
    out = acc if once else acc.cast(out_dt)
    out = out if alpha == 1 else out * alpha
    if beta == 0:
        base._broadcast_to(out.shape)  # (still checks that it fits, as torch)
        out = out.cast(out_dt) if once else out
        # torch's backward still gives `base` a gradient, of zeros (its `.grad` is zeros, not None)
        return with_zero_gradient_to(out, base)
    base = base.cast(acc.dtype) if once else base
    total = (base if beta == 1 else base * beta) + out
    return total.cast(out_dt) if once else total


def _product_sums(a: Tensor, b: Tensor) -> tuple[Tensor, DType]:
    return a._product_accumulator(b)


def _outer_product(a: Tensor, b: Tensor) -> tuple[Tensor, DType]:
    # (torch's addr computes in the operands' dtype: a half outer product is rounded before the sum)
    out = a.outer(b)
    return out, out.dtype


def _summed_batch_products(a: Tensor, b: Tensor) -> tuple[Tensor, DType]:
    out = (a @ b).sum(0)
    return out, out.dtype


def _strides(t: Tensor) -> tuple[int, ...]:
    # a tensor that is no PyTorch view (a result of an op, a copy) is contiguous; a view has its base's layout moved
    mark = t._view_of
    if mark is None or mark is _A_COPY or mark is _A_RESHAPED_COPY:
        return _contiguous_strides(t.shape)
    base = mark()
    if base is None or base is t:
        return _torch_layout(t.uop)[1]
    # (a view of a view whose own base is gone, `x = x.t(); x[1:]`: moved from that view's layout)
    return _torch_layout(t.uop, base.uop, _strides(base))[1]


def _trapezoid_terms(
    y: Tensor, x: Tensor | None, dx: float | None, dim: int, op: str
) -> tuple[int, Tensor, Tensor | float]:
    """(dim, y's neighbours summed along dim, the spacing of the points: a tensor from x, else a number) for the
    trapezoidal rule, torch's checks made."""
    if x is not None and dx is not None:
        raise ArgumentError(f"{op}: give the points x or their spacing dx, not both")
    if y.dtype == dtypes.bool or (isinstance(x, Tensor) and x.dtype == dtypes.bool):
        raise DTypeError(f"{op}: bool samples or points aren't supported (as torch); cast them to a number dtype")
    dim = _normalize_axis(dim, y.ndim, op, y.shape, scalar=False)
    n = y.shape[dim]
    pairs = y._slice_axis(dim, 0, max(n - 1, 0)) + y._slice_axis(dim, min(1, n), n)
    if x is None:
        if dx is not None and (isinstance(dx, bool) or not isinstance(dx, (int, float, np.integer, np.floating))):
            raise TypeError(f"{op}: dx must be a real number, got {dx!r}")
        return dim, pairs, 1.0 if dx is None else float(dx)
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: x must be a Tensor, got {type(x).__name__}")
    if x.ndim == 1:
        if x.shape[0] != n:
            raise ShapeError(f"{op}: x needs one coordinate per sample of y along dim {dim}: x {x.shape}, y {y.shape}")
        x = x.reshape(tuple(n if d == dim else 1 for d in range(y.ndim)))
    elif x.ndim < y.ndim:
        x = x.reshape((1,) * (y.ndim - x.ndim) + x.shape)
    m = x.shape[dim]
    return dim, pairs, x._slice_axis(dim, min(1, m), m) - x._slice_axis(dim, 0, max(m - 1, 0))


def _draw_dtype(t: Tensor) -> Any:
    # what random draws for t are transformed in: float64 for float64, else float32 (a half float's draws are too
    # coarse for a logarithm or a tangent, an integer tensor's are cast at the end)
    return dtypes.float64 if t.dtype == dtypes.float64 else dtypes.float32


class TorchNamesMixin:
    __slots__ = ()

    absolute = _alias("absolute", "abs")
    arccos = _alias("arccos", "acos")
    arccosh = _alias("arccosh", "acosh")
    arcsin = _alias("arcsin", "asin")
    arcsinh = _alias("arcsinh", "asinh")
    arctan = _alias("arctan", "atan")
    arctan2 = _alias("arctan2", "atan2")
    arctanh = _alias("arctanh", "atanh")
    bitwise_left_shift = _alias("bitwise_left_shift", "lshift")
    bitwise_right_shift = _alias("bitwise_right_shift", "rshift")
    divide = _alias("divide", "div")
    true_divide = _alias("true_divide", "div")
    multiply = _alias("multiply", "mul")
    subtract = _alias("subtract", "sub")
    negative = _alias("negative", "neg")
    positive = _alias("positive", "__pos__")
    greater = _alias("greater", "gt")
    greater_equal = _alias("greater_equal", "ge")
    less = _alias("less", "lt")
    less_equal = _alias("less_equal", "le")
    not_equal = _alias("not_equal", "ne")
    fix = _alias("fix", "trunc")
    sgn = _alias("sgn", "sign")
    moveaxis = _alias("moveaxis", "movedim")
    swapdims = _alias("swapdims", "swapaxes")
    ndimension = _alias("ndimension", "dim")
    nelement = _alias("nelement", "numel")
    ger = _alias("ger", "outer")
    argwhere = _alias("argwhere", "nonzero", "The indices of the nonzero elements, (n, ndim) (torch.argwhere).")
    split_with_sizes = _alias("split_with_sizes", "split", "`split` by a list of sizes.")

    def byte(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Cast to uint8."""
        return self.cast(dtypes.uint8)

    def char(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Cast to int8."""
        return self.cast(dtypes.int8)

    def cpu(self: Tensor) -> Tensor:  # type: ignore[misc]
        """The tensor on the CPU backend (itself when it is there)."""
        return self.to("CPU")

    def is_signed(self: Tensor) -> bool:  # type: ignore[misc]
        """Whether the dtype holds negative numbers (floats and signed ints)."""
        return self.dtype != dtypes.bool and not dtypes.is_unsigned(self.dtype)

    def is_complex(self: Tensor) -> bool:  # type: ignore[misc]
        """False: a Tensor is real (complex values are `ComplexTensor`s, whose `is_complex()` is True)."""
        return False

    def is_same_size(self: Tensor, other: Tensor) -> bool:  # type: ignore[misc]
        """Whether both tensors have the same shape."""
        return self.shape == other.shape

    def is_nonzero(self: Tensor) -> bool:  # type: ignore[misc]
        """The truth of a one-element tensor (reads it back)."""
        if self.numel() != 1:
            raise ShapeError(f"is_nonzero: needs a tensor of one element, got shape {self.shape}")
        return bool(self.item())

    def equal(self: Tensor, other: Tensor) -> bool:  # type: ignore[misc]
        """Whether both have the same shape and equal elements (torch.equal; NaN is unequal; reads back)."""
        return self.shape == other.shape and bool((self == other).all().item())

    def msort(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Sorted along dim 0."""
        return self.sort(0)[0]

    def aminmax(  # type: ignore[misc]
        self: Tensor, *, dim: int | None = None, keepdim: bool = False, axis: int | None = None
    ) -> MinMax:
        """(min, max) over `dim` (every element when None; numpy's `axis=` too), as torch.aminmax: named `.min` and
        `.max`.

        >>> Tensor([[1, 5], [3, 2]]).aminmax(dim=1).max.tolist()
        [5, 3]
        """
        if axis is not None:
            dim = _axis_for_dim(dim, axis, "aminmax")
        self._refuse_empty_extreme(dim, "aminmax")
        if dim is None:
            # (min() and max(): torch's NaN of a whole tensor's extremes, not amin's)
            shape = (1,) * self.ndim if keepdim else ()
            return MinMax(self.min().reshape(shape), self.max().reshape(shape))
        return MinMax(self.amin(dim, keepdim), self.amax(dim, keepdim))

    def broadcast_to(self: Tensor, shape: Sequence[int] | int, *sizes: int) -> Tensor:  # type: ignore[misc]
        """`expand` to `shape` (-1 keeps a dim), torch.broadcast_to; the sizes may come one by one, as torch's.

        >>> Tensor([1, 2]).broadcast_to(2, 2).tolist()
        [[1, 2], [1, 2]]
        """
        try:
            return self.expand(shape, *sizes)
        except ShapeError as e:
            raise ShapeError(f"broadcast_to: {e}") from None

    def fliplr(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Reversed along dim 1 (needs 2 or more dims)."""
        _need_dims(self, 2, "fliplr")
        return self.flip(1)

    def flipud(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Reversed along dim 0 (needs 1 or more dims)."""
        _need_dims(self, 1, "flipud")
        return self.flip(0)

    def rot90(self: Tensor, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:  # type: ignore[misc]
        """Rotated by 90 degrees k times in the plane of `dims`, from the first toward the second (torch.rot90).

        >>> Tensor([[1, 2], [3, 4]]).rot90().tolist()
        [[2, 4], [1, 3]]
        """
        if len(dims) != 2:
            raise ArgumentError(f"rot90: dims must name 2 axes, got {tuple(dims)}")
        _need_dims(self, 2, "rot90")
        a, b = (_normalize_axis(d, self.ndim, "rot90", self.shape) for d in dims)
        if a == b:
            raise ArgumentError(f"rot90: the two dims must differ, got {tuple(dims)}")
        k %= 4
        if k == 0:
            return self.clone()
        if k == 2:
            return self.flip((a, b))
        return self.flip(b).transpose(a, b) if k == 1 else self.transpose(a, b).flip(b)

    def deg2rad(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Degrees to radians (ints promote to float)."""
        return self.cast(least_upper_float(self.dtype)) * (math.pi / 180)

    def rad2deg(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Radians to degrees (ints promote to float)."""
        return self.cast(least_upper_float(self.dtype)) * (180 / math.pi)

    @staticmethod
    def result_type(tensor1: Any, tensor2: Any) -> DType:
        """The dtype an arithmetic op of `tensor1` and `tensor2` (tensors or numbers) computes in, as
        torch.result_type: by uopkit's promotion (a Python int is int32 here, docs/semantics.md).

        >>> Tensor.result_type(Tensor([1], dtype="int8"), 2.5), Tensor.result_type(Tensor([1], dtype="int8"), 2)
        (dtypes.float, dtypes.char)
        """

        def stand_in(x: Any) -> Any:
            # (promotion looks at dtypes and at whether a tensor has dimensions, not at shapes, which needn't
            # broadcast here: an empty stand-in of one element or none, nothing computed)
            if not isinstance(x, Tensor):
                return x
            return Tensor.empty(*((1,) if x.ndim else ()), dtype=x.dtype, device=x.device)

        first, second = stand_in(tensor1), stand_in(tensor2)
        if not isinstance(first, Tensor) and isinstance(second, Tensor):
            return second._broadcasted(first, True, "result_type")[0].dtype
        first = first if isinstance(first, Tensor) else Tensor(first)
        return first._broadcasted(second, False, "result_type")[0].dtype

    @staticmethod
    def promote_types(type1: DType | str, type2: DType | str) -> DType:
        """The smallest dtype both dtypes convert to without losing their kind, as torch.promote_types.

        >>> Tensor.promote_types("uint8", "int8")
        dtypes.short
        """
        return least_upper_dtype(to_dtype(type1), to_dtype(type2))

    @staticmethod
    def can_cast(from_: DType | str, to: DType | str) -> bool:
        """Whether torch's type promotion lets a value of `from_` be stored into `to` (an in-place op's result):
        never to a lower kind (float to int, int to bool), any size within a kind, as torch.can_cast.

        >>> Tensor.can_cast("float64", "float16"), Tensor.can_cast("float32", "int64")
        (True, False)
        """

        def kind(dt: DType) -> int:
            return 2 if dtypes.is_float(dt) else 0 if dt == dtypes.bool else 1

        return kind(to_dtype(from_)) <= kind(to_dtype(to))

    @staticmethod
    def finfo(dtype: DType | str | None = None) -> finfo:
        """torch.finfo: the numbers of a float dtype (`uopkit.finfo`), so a program's `torch.finfo(x.dtype).min`
        (an attention mask's fill) ports as `Tensor.finfo(x.dtype).min`. No dtype: the default float's.

        >>> Tensor.finfo(dtypes.float16).min, Tensor.finfo("bfloat16").eps
        (-65504.0, 0.0078125)
        """
        return finfo(dtype)

    @staticmethod
    def iinfo(dtype: DType | str) -> iinfo:
        """torch.iinfo: the range of an integer dtype (`uopkit.iinfo`).

        >>> Tensor.iinfo(dtypes.int8).min, Tensor.iinfo("uint16").max
        (-128, 65535)
        """
        return iinfo(dtype)

    def float_power(self: Tensor, exponent: Any) -> Tensor:  # type: ignore[misc]
        """self ** exponent in float64 (torch.float_power); `self` may be a number (torch.float_power(2, t))."""
        if not isinstance(self, TorchNamesMixin):
            return exponent.cast(dtypes.float64).pow(float(self), reverse=True)
        if isinstance(exponent, Tensor):
            exponent = exponent.cast(dtypes.float64)
        return self.cast(dtypes.float64).pow(float(exponent) if isinstance(exponent, (int, float)) else exponent)

    def sinc(self: Tensor) -> Tensor:  # type: ignore[misc]
        """sin(pi x) / (pi x), 1 at 0 (torch.sinc)."""
        if self.dtype in dtypes.halves:
            # in float32, rounded once, as torch: pi x and its sine rounded to the half float are ~1e-3 off, so sinc at
            # an integer was ~3e-4 where torch's is 0
            return self.float().sinc().cast(self.dtype)
        x = self.cast(least_upper_float(self.dtype))
        px = x * math.pi
        return (x == 0).where(1.0, px.sin() / (x == 0).where(1.0, px))

    def logaddexp2(self: Tensor, other: Any) -> Tensor:  # type: ignore[misc]
        """log2(2**self + 2**other) without overflow; equal infinities give themselves."""
        # (ints as floats: a - b and -|a - b| wrapped in their dtype)
        a, b = (t._float() for t in self._broadcasted(other, False, "logaddexp2", floats=True))
        if a.dtype in dtypes.halves:
            # in float32, rounded once, as torch computes half floats
            return a.float().logaddexp2(b.float()).cast(a.dtype)
        top = a.maximum(b)
        # (a tie as the mean of both plus 1: each gets half the gradient, as torch's)
        return (a == b).where((a + b) * 0.5 + 1, top + (1 + (-(a - b).abs()).exp2()).log2())

    def heaviside(self: Tensor, values: Tensor) -> Tensor:  # type: ignore[misc]
        """0 where self < 0, `values` where self == 0, 1 where self > 0 (NaN gives 0, as torch's)."""
        if isinstance(values, Tensor) and values.dtype != self.dtype:
            raise ArgumentError(
                f"heaviside: values must have the input's dtype ({self.dtype}), got {values.dtype} (as torch)"
            )
        return (self == 0).where(values, (self > 0).cast(self.dtype))

    def hardshrink(self: Tensor, lambd: float = 0.5) -> Tensor:  # type: ignore[misc]
        """x where |x| > lambd, else 0 (NaN stays NaN, as torch's)."""
        # (two comparisons, not |x|: an int's abs wraps at its minimum, int8 -128 came out inside)
        inside = (self >= -lambd) & (self <= lambd)
        # (a bool's zero is False: an int 0 would promote the bool to int32)
        value = inside.where(False if self.dtype == dtypes.bool else 0, self)
        if not value.is_floating_point():
            return value
        # (torch's hardshrink_backward)
        return _with_derivative(value, self, inside.logical_not(), reads_input=True)

    def softshrink(self: Tensor, lambd: float = 0.5) -> Tensor:  # type: ignore[misc]
        """x - lambd above lambd, x + lambd below -lambd, a zero of x's sign between (torch.nn.functional.softshrink).

        >>> Tensor([1.0, 0.2, -1.0]).softshrink().tolist()
        [0.5, 0.0, -0.5]
        """
        if lambd < 0:
            raise ArgumentError(f"softshrink: lambd must be >= 0, got {lambd}")
        # (the zeros keep x's sign and take no gradient, as torch's; NaN is outside, its gradient the incoming one)
        inside = (self >= -lambd) & (self <= lambd)
        value = inside.where((self * 0).detach(), (self > lambd).where(self - lambd, self + lambd))
        if not value.is_floating_point():
            return value
        # (torch's softshrink_backward)
        return _with_derivative(value, self, inside.logical_not(), reads_input=True)

    def tanhshrink(self: Tensor) -> Tensor:  # type: ignore[misc]
        """x - tanh(x) (torch.nn.functional.tanhshrink)."""
        return self - self.tanh()

    def threshold(self: Tensor, threshold: float, value: float) -> Tensor:  # type: ignore[misc]
        """x where x > threshold, else `value` (NaN stays NaN), as torch.nn.functional.threshold.

        >>> Tensor([1.0, 3.0]).threshold(2.0, -1.0).tolist()
        [-1.0, 3.0]
        """
        below = self <= threshold
        out = below.where(self.full_like(value), self)
        if not out.is_floating_point():
            return out
        # (torch's threshold_backward)
        return _with_derivative(out, self, below.logical_not(), reads_input=True)

    @autocast_op(LOWER)
    def prelu(self: Tensor, weight: Tensor) -> Tensor:  # type: ignore[misc]
        """x for x > 0, weight * x otherwise, weight one value or one per channel (dim 1), as
        torch.nn.functional.prelu.

        >>> Tensor([[-1.0, -2.0]]).prelu(Tensor([0.25, 0.5])).tolist()
        [[-0.25, -1.0]]
        """
        channels = self.shape[1] if self.ndim >= 2 else 1
        if weight.numel() not in (1, channels) or weight.ndim > 1:
            raise ShapeError(
                f"prelu: weight of shape {weight.shape} must hold 1 value or one per channel ({channels}, dim 1 of "
                f"the input's shape {self.shape})"
            )
        # (one value for every element, or one per channel along dim 1)
        shape = () if weight.numel() == 1 else (1, channels) + (1,) * (self.ndim - 2)
        positive = self > 0
        value = positive.where(self, self * weight.reshape(shape))
        if not value.is_floating_point() or self.dtype != weight.dtype:
            return value
        # torch's prelu backward: the input's gradient also a function of the input, with a zero derivative (a
        # gradient penalty gives what the input was computed from a zero `.grad`, see `_reading_input`); the weight's,
        # x where x <= 0 (and at NaN), summed over the elements it scales
        slope = weight.reshape(shape).expand(self.shape)
        return _with_derivative(
            value, self, positive.where(1.0, slope), (slope, (positive.logical_not(), self)), reads_input=True
        )

    def rrelu(  # type: ignore[misc]
        self: Tensor,
        lower: float = 1 / 8,
        upper: float = 1 / 3,
        training: bool = False,
        generator: Generator | None = None,
    ) -> Tensor:
        """Leaky ReLU with a random slope per negative element drawn from U(lower, upper) (from `generator`, else the
        global stream) when `training`, else the fixed slope (lower + upper) / 2, as torch.nn.functional.rrelu and
        torch.rrelu.

        >>> Tensor([-1.0, 2.0]).rrelu(0.25, 0.25).tolist()
        [-0.25, 2.0]
        """
        if not 0 <= lower <= upper:
            raise ArgumentError(f"rrelu: needs 0 <= lower <= upper, got lower={lower}, upper={upper}")
        if not training:
            return self.leaky_relu((lower + upper) / 2)
        slope = Tensor.uniform(
            *self.shape, low=lower, high=upper, generator=generator, device=self.device, dtype=_draw_dtype(self)
        )
        # (an int input is scaled in float: its slopes truncated to 0)
        return (self >= 0).where(self, self * (slope.cast(self.dtype) if self.is_floating_point() else slope))

    def inner(self: Tensor, other: Tensor) -> Tensor:  # type: ignore[misc]
        """Sums over the last dims of both: shape self.shape[:-1] + other.shape[:-1] (a 0-d operand multiplies)."""
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        if self.shape[-1] != other.shape[-1]:
            raise ShapeError(f"inner: last dims differ, shapes {self.shape} and {other.shape}")
        n = self.shape[-1]
        flat = self.reshape(-1, n) @ other.reshape(-1, n).transpose(0, 1)
        return flat.reshape(self.shape[:-1] + other.shape[:-1])

    def vdot(self: Tensor, other: Tensor) -> Tensor:  # type: ignore[misc]
        """The dot product of two 1-D tensors."""
        if self.ndim != 1 or other.ndim != 1:
            raise ShapeError(f"vdot: needs two 1-D tensors, got shapes {self.shape} and {other.shape}")
        return self.dot(other)

    def dist(self: Tensor, other: Tensor, p: float = 2) -> Tensor:  # type: ignore[misc]
        """The p-norm of self - other (broadcast), torch.dist."""
        return (self - other).flatten().norm(p)

    @autocast_op(LOWER)
    def addmm(self: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # type: ignore[misc]
        """beta * self + alpha * (mat1 @ mat2), two matrices (torch.addmm)."""
        return _scaled_sum(self, "addmm", (mat1, mat2), (2, 2), _product_sums, beta, alpha)

    def addmv(self: Tensor, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # type: ignore[misc]
        """beta * self + alpha * (mat @ vec), a matrix and a vector (torch.addmv)."""
        return _scaled_sum(self, "addmv", (mat, vec), (2, 1), _product_sums, beta, alpha)

    def addr(self: Tensor, vec1: Tensor, vec2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # type: ignore[misc]
        """beta * self + alpha * outer(vec1, vec2) (torch.addr)."""
        return _scaled_sum(self, "addr", (vec1, vec2), (1, 1), _outer_product, beta, alpha)

    @autocast_op(LOWER)
    def baddbmm(self: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # type: ignore[misc]
        """beta * self + alpha * (batch1 @ batch2), batches of matrices (torch.baddbmm)."""
        return _scaled_sum(self, "baddbmm", (batch1, batch2), (3, 3), _product_sums, beta, alpha)

    @autocast_op(LOWER)
    def addbmm(self: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # type: ignore[misc]
        """beta * self + alpha * the sum over the batch of batch1[i] @ batch2[i] (torch.addbmm)."""
        return _scaled_sum(self, "addbmm", (batch1, batch2), (3, 3), _summed_batch_products, beta, alpha)

    def matrix_power(self: Tensor, n: int) -> Tensor:  # type: ignore[misc]
        """self @ self ... n times by squaring (0 gives identities, a negative n the inverse's power); batched."""
        _need_dims(self, 2, "matrix_power")
        if self.shape[-1] != self.shape[-2]:
            raise ShapeError(f"matrix_power: needs square matrices, got shape {self.shape}")
        if n < 0:
            return self.inverse().matrix_power(-n)
        out: Tensor | None = None
        square = self
        while n:
            if n & 1:
                out = square if out is None else out @ square
            n >>= 1
            if n:
                square = square @ square
        if out is None:
            eye = Tensor.eye(self.shape[-1], dtype=self.dtype, device=self.device)
            return eye.expand(self.shape).contiguous()
        return out

    def select(self: Tensor, dim: int, index: int) -> Tensor:  # type: ignore[misc]
        """self[..., index, ...] at `dim` (the dim goes), torch.select."""
        dim = _normalize_axis(dim, self.ndim, "select", self.shape, scalar=False)
        return self[(slice(None),) * dim + (index,)]

    def _numpy_split(self: Tensor, sections: int | Sequence[int], dim: int, op: str) -> tuple[Tensor, ...]:
        if isinstance(sections, int) and (sections <= 0 or self.shape[dim] % sections):
            raise ArgumentError(
                f"{op}: dim {dim} of size {self.shape[dim]} doesn't split into {sections} equal parts (give indices)"
            )
        return self.tensor_split(sections, dim)

    def hsplit(self: Tensor, sections: int | Sequence[int]) -> tuple[Tensor, ...]:  # type: ignore[misc]
        """Split along dim 1 (dim 0 of a 1-D tensor) into equal parts or at indices, as numpy's hsplit."""
        _need_dims(self, 1, "hsplit")
        return self._numpy_split(sections, 1 if self.ndim > 1 else 0, "hsplit")

    def vsplit(self: Tensor, sections: int | Sequence[int]) -> tuple[Tensor, ...]:  # type: ignore[misc]
        """Split along dim 0 (2 or more dims) into equal parts or at indices, as numpy's vsplit."""
        _need_dims(self, 2, "vsplit")
        return self._numpy_split(sections, 0, "vsplit")

    def dsplit(self: Tensor, sections: int | Sequence[int]) -> tuple[Tensor, ...]:  # type: ignore[misc]
        """Split along dim 2 (3 or more dims) into equal parts or at indices, as numpy's dsplit."""
        _need_dims(self, 3, "dsplit")
        return self._numpy_split(sections, 2, "dsplit")

    def diag_embed(self: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # type: ignore[misc]
        """Matrices whose `offset` diagonal is the last dim, placed at dims dim1 and dim2 of the result.

        >>> Tensor([1, 2]).diag_embed().tolist()
        [[1, 0], [0, 2]]
        """
        _need_dims(self, 1, "diag_embed")
        ndim, n = self.ndim + 1, self.shape[-1]
        d1, d2 = (_normalize_axis(d, ndim, "diag_embed", None) for d in (dim1, dim2))
        if d1 == d2:
            raise ArgumentError(f"diag_embed: dim1 and dim2 must differ, got {dim1} and {dim2}")
        # (selects, no products: a NaN or inf stays on its diagonal, zeros keep their sign)
        eye = Tensor.eye(n, dtype=dtypes.bool, device=self.device)
        square = eye.where(self.unsqueeze(-1), Tensor.zeros((), dtype=self.dtype, device=self.device))
        k = abs(offset)
        lead = ((0, 0),) * (ndim - 2)
        out = square.pad(lead + (((0, k), (k, 0)) if offset >= 0 else ((k, 0), (0, k))))
        batch = iter(range(ndim - 2))
        return out.permute([ndim - 2 if j == d1 else ndim - 1 if j == d2 else next(batch) for j in range(ndim)])

    def diagflat(self: Tensor, offset: int = 0) -> Tensor:  # type: ignore[misc]
        """The flattened tensor as the `offset` diagonal of a square matrix."""
        return self.flatten().diag_embed(offset)

    # ------------------------------------------------------------------------------------------------------------
    # the real-valued forms of torch's complex-number methods (every dtype here is real)

    def conj(self: Tensor) -> Tensor:  # type: ignore[misc]
        """The complex conjugate: the tensor itself, as torch's for a real tensor."""
        return self

    conj_physical = _alias("conj_physical", "conj", "The complex conjugate, a copy in torch: the values themselves.")
    conj_physical_ = _alias("conj_physical_", "conj", "The complex conjugate in place: the tensor itself.")
    resolve_conj = _alias("resolve_conj", "conj", "The tensor itself (no lazy conjugation to resolve).")
    resolve_neg = _alias("resolve_neg", "conj", "The tensor itself (no lazy negation to resolve).")

    def is_conj(self: Tensor) -> bool:  # type: ignore[misc]
        """False: no tensor is a lazy conjugate."""
        return False

    def is_neg(self: Tensor) -> bool:  # type: ignore[misc]
        """False: no tensor is a lazy negation."""
        return False

    def isreal(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Whether each element is real: all True, as torch's for a real dtype.

        >>> Tensor([1.0, float("nan")]).isreal().tolist()
        [True, True]
        """
        return Tensor.ones(*self.shape, dtype=dtypes.bool, device=self.device)

    @property
    def real(self: Tensor) -> Tensor:  # type: ignore[misc]
        """The real part: the tensor itself (a real tensor's, as torch's)."""
        return self

    @property
    def imag(self: Tensor) -> Tensor:  # type: ignore[misc]
        """torch raises for a real tensor, which has no imaginary part to view; so does this."""
        raise RuntimeError(f"imag: the tensor is {self.dtype}, not complex; a real tensor has no imaginary part")

    def angle(self: Tensor) -> Tensor:  # type: ignore[misc]
        """The argument of each element as a complex number: 0 for x >= 0, pi for x < 0, NaN for NaN (torch.angle of
        a real tensor); ints promote to float32.

        >>> Tensor([2.0, -1.0, 0.0]).angle().tolist()
        [0.0, 3.1415927410125732, 0.0]
        """
        x = self.cast(least_upper_float(self.dtype))
        # (the pi, the zero and the NaN selected, detached, and tied back to the input: a gradient of zeros everywhere,
        # NaN included, and a result that requires grad, as torch's for real inputs)
        return with_zero_gradient_to((x < 0).where(math.pi, x.isnan().where(x, 0.0)).detach(), self)

    @property
    def mH(self: Tensor) -> Tensor:  # type: ignore[misc]
        """The conjugate transpose of the last two dims (the transpose: the values are real)."""
        _need_dims(self, 2, "mH")
        return self.transpose(-2, -1)

    def adjoint(self: Tensor) -> Tensor:  # type: ignore[misc]
        """The conjugate transpose of the last two dims (torch.adjoint), a view."""
        _need_dims(self, 2, "adjoint")
        return self.transpose(-2, -1)

    @property
    def H(self: Tensor) -> Tensor:  # type: ignore[misc]
        """The conjugate transpose of a matrix (or a 0-d tensor itself), as torch's `.H`."""
        if self.ndim not in (0, 2):
            raise ShapeError(f"H: needs a matrix or a 0-d tensor, got shape {self.shape}; for a batch use .mH")
        return self if self.ndim == 0 else self.transpose(0, 1)

    # ------------------------------------------------------------------------------------------------------------
    # layout and autograd queries

    def stride(self: Tensor, dim: int | None = None) -> tuple[int, ...] | int:  # type: ignore[misc]
        """The strides PyTorch gives this tensor, in elements (one dim's with `dim`): a tensor computed by an op is
        contiguous; a view (permute, transpose, expand, a slice, reshape) has the strides of its base's layout.

        >>> Tensor.ones(2, 3).stride(), Tensor.ones(2, 3).T.stride()
        ((3, 1), (1, 3))
        """
        strides = _strides(self)
        if dim is None:
            return strides
        return strides[_normalize_axis(dim, max(self.ndim, 1), "stride", self.shape)] if self.ndim else 1

    def is_contiguous(self: Tensor, memory_format: Any = None) -> bool:  # type: ignore[misc]
        """Whether PyTorch lays this tensor out without gaps (`stride()`), row-major or in `memory_format`'s order
        (channels_last: N, H, W, C), size-1 dims ignored as torch.

        >>> Tensor.ones(2, 3).is_contiguous(), Tensor.ones(2, 3).T.is_contiguous()
        (True, False)
        """
        fmt = as_memory_format(memory_format, "is_contiguous")
        order = dims_order(fmt, self.ndim, "is_contiguous") or tuple(range(self.ndim))
        if self.numel() == 0:
            return True
        strides = _strides(self)
        expected = 1
        for axis in reversed(order):
            if self.shape[axis] != 1 and strides[axis] != expected:
                return False
            expected *= self.shape[axis]
        return True

    def retain_grad(self: Tensor) -> None:  # type: ignore[misc]
        """Fill `.grad` of this tensor too on the next backward(), also when it was computed by ops (torch's
        retain_grad for a non-leaf tensor); gradients still flow through it to the tensors it was computed from.

        >>> x = Tensor([1.0, 2.0], requires_grad=True); y = x * 3; y.retain_grad()
        >>> _ = (y * y).sum().backward(); y.grad.tolist(), x.grad.tolist()
        ([6.0, 12.0], [18.0, 36.0])
        """
        # (a leaf has its .grad already; a tensor that doesn't require grad raises, as torch's)
        _leaves.retain_grad(self, _tensor_hooks.own_node)

    def sum_to_size(self: Tensor, *size: Any) -> Tensor:  # type: ignore[misc]
        """Summed over the dims that broadcasting `size` to this shape would expand (torch.sum_to_size): the inverse
        of `expand`, as a broadcast's gradient is reduced.

        >>> Tensor.ones(2, 3).sum_to_size(1, 3).tolist()
        [[2.0, 2.0, 2.0]]
        """
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
        lead = self.ndim - len(shape)
        if lead < 0 or any(s != 1 and s != n for s, n in zip(shape, self.shape[lead:], strict=True)):
            raise ShapeError(f"sum_to_size: size {shape} is not expandable to the tensor's shape {self.shape}")
        axes = tuple(range(lead)) + tuple(
            lead + i for i, (s, n) in enumerate(zip(shape, self.shape[lead:], strict=True)) if s == 1 and n != 1
        )
        return self.sum(axes).reshape(shape) if axes else self

    def narrow_copy(self: Tensor, dim: int, start: int, length: int) -> Tensor:  # type: ignore[misc]
        """`narrow`, as a new tensor rather than a view (torch.narrow_copy)."""
        return self.narrow(dim, start, length).clone()

    def float_power_(self: Tensor, exponent: Any) -> Tensor:  # type: ignore[misc]
        """`float_power` in place: the tensor must be float64, the dtype float_power computes in (as torch)."""
        if self.dtype != dtypes.float64:
            raise DTypeError(
                f"float_power_: the result is float64, which can't be stored in place into this {self.dtype} tensor "
                "(as PyTorch); use float_power (a new tensor), or a float64 tensor"
            )
        return self._update_in_place(lambda: self.float_power(exponent), "float_power_")

    # ------------------------------------------------------------------------------------------------------------
    # combinations, flat indices and integrals

    def combinations(self: Tensor, r: int = 2, with_replacement: bool = False) -> Tensor:  # type: ignore[misc]
        """Every combination of `r` elements of a 1-D tensor, one per row in lexicographic order of their positions,
        as torch.combinations (itertools.combinations, or combinations_with_replacement); r = 0 gives an empty 1-D
        tensor.

        >>> Tensor([1, 2, 3]).combinations().tolist()
        [[1, 2], [1, 3], [2, 3]]
        """
        if self.ndim != 1:
            raise ShapeError(f"combinations: needs a 1-D tensor, got shape {self.shape}")
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 0:
            raise ArgumentError(f"combinations: r must be a non-negative int, got {r!r}")
        if r == 0:
            return self._slice_axis(0, 0, 0)
        pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
        positions = np.array(list(pick(range(self.shape[0]), int(r))), dtype=np.int64).reshape(-1, r)
        return self._take(0, positions.reshape(-1)).reshape(len(positions), r)

    def unravel_index(self: Tensor, shape: int | Sequence[int]) -> tuple[Tensor, ...]:  # type: ignore[misc]
        """The coordinates, in a tensor of `shape`, of the flat (row-major) indices in self: one tensor per dim of
        `shape`, each of self's shape and dtype (torch's are int64), as torch.unravel_index (`Tensor.unravel_index(
        indices, shape)`); an index wraps as torch's (-1 is the last element).

        >>> [t.tolist() for t in Tensor([5, 1]).unravel_index((2, 3))]
        [[1, 0], [2, 1]]
        """
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"unravel_index: the indices must be an integer tensor, got {self.dtype}")
        dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0 for n in dims):
            raise ArgumentError(f"unravel_index: shape must hold positive ints, got {dims}")
        total = math.prod(dims)
        flat = self.cast(dtypes.int64) if total > dtypes.max(self.dtype) else self
        # (floor division and modulo: a negative index counts from the end, as torch's)
        return tuple((flat // math.prod(dims[d + 1 :])) % n for d, n in enumerate(dims))

    def trapezoid(  # type: ignore[misc]
        self: Tensor, x: Tensor | None = None, *, dx: float | None = None, dim: int = -1
    ) -> Tensor:
        """The integral of self (samples y) along `dim` by the trapezoidal rule, as torch.trapezoid: at the points `x`
        (1-D of y's length along dim, or broadcasting with y), else spaced `dx` apart (default 1). Integer samples
        give float32; no samples give zeros of self's dtype.

        >>> Tensor([1.0, 2.0, 3.0]).trapezoid(Tensor([0.0, 1.0, 3.0])).item()
        6.5
        """
        dim, pairs, spacing = _trapezoid_terms(self, x, dx, dim, "trapezoid")
        if self.shape[dim] == 0:
            return Tensor.zeros(pairs.shape[:dim] + pairs.shape[dim + 1 :], dtype=self.dtype, device=self.device)
        if isinstance(spacing, Tensor):
            return (pairs * spacing).sum(dim) / 2
        # (torch's formula for a constant spacing)
        return (self.sum(dim) - (self.select(dim, 0) + self.select(dim, -1)) * 0.5) * spacing

    trapz = _alias("trapz", "trapezoid", "torch's older name for `trapezoid`.")

    def cumulative_trapezoid(  # type: ignore[misc]
        self: Tensor, x: Tensor | None = None, *, dx: float | None = None, dim: int = -1
    ) -> Tensor:
        """The running integral of self along `dim` by the trapezoidal rule, one value per interval (one fewer than
        the samples), as torch.cumulative_trapezoid; `x` and `dx` as in `trapezoid`.

        >>> Tensor([1.0, 2.0, 3.0]).cumulative_trapezoid().tolist()
        [1.5, 4.0]
        """
        dim, pairs, spacing = _trapezoid_terms(self, x, dx, dim, "cumulative_trapezoid")
        if isinstance(spacing, Tensor):
            return (pairs * spacing).cumsum(dim) / 2
        return (spacing / 2 * pairs).cumsum(dim)

    # ------------------------------------------------------------------------------------------------------------
    # data-dependent results and norms

    def unique_consecutive(  # type: ignore[misc]
        self: Tensor, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None
    ) -> Tensor | tuple[Tensor, ...]:
        """Each run of equal consecutive elements (dim None: of the flattened tensor) or slices along `dim` kept once,
        as torch.unique_consecutive; `return_inverse`: the (int32) run of each element (slice), `return_counts`: the
        length of each run (int32). NaN equals nothing, so each NaN is a run of its own. Which neighbours differ is
        read back to the host (the result's length depends on it).

        >>> Tensor([1, 1, 2, 2, 3, 1]).unique_consecutive().tolist()
        [1, 2, 3, 1]
        >>> [t.tolist() for t in Tensor([1, 1, 2]).unique_consecutive(return_inverse=True, return_counts=True)]
        [[1, 2], [0, 0, 1], [2, 1]]
        """
        if dim is None:
            rows, axis = self.reshape(-1, 1), 0
        else:
            rows, axis = slices_as_rows(self, dim, "unique_consecutive")
        k = rows.shape[0]
        changed = (rows[1:] != rows[:-1]).any(1).numpy() if k > 1 else np.zeros(0, bool)
        starts = np.concatenate([[0], np.flatnonzero(changed) + 1]).astype(np.int32) if k else np.zeros(0, np.int32)
        index = Tensor(starts, device=self.device)
        values = self.flatten().index_select(0, index) if dim is None else self.index_select(axis, index)
        out = [values.detach()]
        if return_inverse:
            runs = np.cumsum(np.concatenate([[0], changed.astype(np.int32)])).astype(np.int32) if k else starts
            out.append(Tensor(runs.reshape(self.shape if dim is None else (k,)), device=self.device))
        if return_counts:
            out.append(Tensor(np.diff(np.append(starts, k)).astype(np.int32), device=self.device))
        return out[0] if len(out) == 1 else tuple(out)

    def fake_quantize_per_tensor_affine(  # type: ignore[misc]
        self: Tensor, scale: float | Tensor, zero_point: int | Tensor, quant_min: int, quant_max: int
    ) -> Tensor:
        """Quantized to the integers [quant_min, quant_max] and back, as torch.fake_quantize_per_tensor_affine:
        (clamp(round(x * (1 / scale)) + zero_point, quant_min, quant_max) - zero_point) * scale, rounding half to
        even, scale taken as a float32 (NaN goes to quant_min, as torch's). The gradient passes straight through
        where the rounded value lies within [quant_min, quant_max] and is 0 elsewhere. `scale` and `zero_point` may
        be one-element tensors (torch's overload: read back, the zero point truncated to an int).

        >>> q = Tensor([0.123, -1.7, 2.5]).fake_quantize_per_tensor_affine(0.05, 3, -128, 127)
        >>> [round(v, 4) for v in q.tolist()]
        [0.1, -1.7, 2.5]
        """
        op = "fake_quantize_per_tensor_affine"
        if isinstance(scale, Tensor):
            scale = _one_number(scale, "scale", op)
        if isinstance(zero_point, Tensor):
            zero_point = int(_one_number(zero_point, "zero_point", op))
        elif quant_min <= quant_max and not quant_min <= zero_point <= quant_max:
            raise ArgumentError(
                f"{op}: zero_point {zero_point} must be within [quant_min, quant_max] = [{quant_min}, {quant_max}]"
            )
        # (torch's kernel multiplies by the float32 reciprocal of the float32 scale)
        scale32 = np.float32(scale)
        inv_scale = float(np.float32(1) / scale32) if scale32 else math.copysign(math.inf, scale32)
        return _fake_quantized(self, float(scale32), inv_scale, int(zero_point), quant_min, quant_max, op)

    def fake_quantize_per_channel_affine(  # type: ignore[misc]
        self: Tensor, scale: Tensor, zero_point: Tensor, axis: int, quant_min: int, quant_max: int
    ) -> Tensor:
        """fake_quantize_per_tensor_affine with a scale and a zero point for each index along `axis` (1-D tensors of
        that length), as torch.fake_quantize_per_channel_affine; float zero points add before rounding
        (round(x / scale + zero_point)), as torch's, integer ones after. The straight-through gradient as the
        per-tensor one's.

        >>> w = Tensor([[0.26, -0.3], [1.0, 2.25]])
        >>> w.fake_quantize_per_channel_affine(Tensor([0.1, 0.5]), Tensor([0, 1]), 0, -4, 4).tolist()
        [[0.30000001192092896, -0.30000001192092896], [1.0, 1.5]]
        """
        op = "fake_quantize_per_channel_affine"
        if not isinstance(scale, Tensor) or not isinstance(zero_point, Tensor):
            raise TypeError(
                f"{op}: scale and zero_point must be 1-D Tensors, got {type(scale).__name__} and "
                f"{type(zero_point).__name__}"
            )
        if not 0 <= axis < self.ndim:
            raise ArgumentError(f"{op}: axis {axis} must be within [0, {self.ndim}) for input of shape {self.shape}")
        n = self.shape[axis]
        if scale.shape != (n,) or zero_point.shape != (n,):
            raise ShapeError(
                f"{op}: scale and zero_point must have shape ({n},) (input {self.shape}, axis {axis}), "
                f"got {scale.shape} and {zero_point.shape}"
            )
        float_zero_point = dtypes.is_float(zero_point.dtype)
        if not float_zero_point and n and quant_min <= quant_max:
            low, high = (int(v) for v in Tensor.stack(zero_point.min(), zero_point.max()).numpy())
            if low < quant_min or high > quant_max:
                raise ArgumentError(
                    f"{op}: zero_point must be within [quant_min, quant_max] = "
                    f"[{quant_min}, {quant_max}], got values from {low} to {high}"
                )
        shape = tuple(n if i == axis else 1 for i in range(self.ndim))
        scale32 = scale.detach().float().reshape(shape)
        zero = zero_point.detach().float().reshape(shape)
        return _fake_quantized(self, scale32, 1 / scale32, zero, quant_min, quant_max, op, float_zero_point)

    def renorm(self: Tensor, p: float, dim: int, maxnorm: float) -> Tensor:  # type: ignore[misc]
        """Each slice along `dim` whose p-norm is above `maxnorm` scaled down to it, as torch.renorm (scale
        maxnorm / (norm + 1e-7)); the others are unchanged.

        >>> Tensor([[3.0, 4.0], [0.3, 0.4]]).renorm(2, 0, 1.0).tolist()
        [[0.6000000238418579, 0.800000011920929], [0.30000001192092896, 0.4000000059604645]]
        """
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"renorm: needs a floating-point tensor, got {self.dtype}; cast with .float() first")
        if p <= 0:
            raise ArgumentError(f"renorm: p must be positive, got {p}")
        if maxnorm < 0:
            raise ArgumentError(f"renorm: maxnorm must be non-negative, got {maxnorm}")
        _need_dims(self, 2, "renorm")
        axis = _normalize_axis(dim, self.ndim, "renorm", self.shape)
        others = tuple(i for i in range(self.ndim) if i != axis)
        # half floats take the norm and the scale in float32, as torch's (|x|^p overflows float16 from |x| ~ 256);
        # the scale is rounded to the dtype before it multiplies, as torch's
        x = self.float() if self.dtype in dtypes.halves else self
        norm = (
            x.abs().pow(p).sum(others, keepdim=True).pow(1 / p) if p != math.inf else x.abs().amax(others, keepdim=True)
        )
        # (the gradient flows through the norm too, as torch's)
        scale = (norm > maxnorm).where(maxnorm / (norm + 1e-7), 1.0)
        return self * scale.cast(self.dtype)

    @autocast_op(FLOAT32)
    def cholesky_solve(self: Tensor, factor: Tensor, upper: bool = False) -> Tensor:  # type: ignore[misc]
        """X with A @ X = self, given A's Cholesky factor (lower L with A = L L^T, or `upper` U with A = U^T U), as
        torch.cholesky_solve(self, factor); batch dims broadcast.

        >>> Tensor([[2.0], [2.0]]).cholesky_solve(Tensor([[1.0, 0.0], [1.0, 1.0]])).tolist()
        [[2.0], [0.0]]
        """
        a = _square(factor, "cholesky_solve")
        if self.ndim < 2 or self.shape[-2] != a.shape[-1]:
            raise ShapeError(
                f"cholesky_solve: B must be matrices (..., {a.shape[-1]}, k) for a factor of shape {factor.shape}, got "
                f"shape {self.shape}"
            )
        a, b = _with_right_side(a, self, "cholesky_solve")
        return _triangular_cholesky_solve(a, b, upper)

    # ------------------------------------------------------------------------------------------------------------
    # in-place draws from other distributions (torch's; from `generator` (a uopkit.Generator) or the global stream,
    # which Tensor.manual_seed seeds, as the others)

    def _draw_in_place(self: Tensor, op: str, draw: Callable[[], Tensor], floats_only: bool = True) -> Tensor:  # type: ignore[misc]
        if floats_only and not dtypes.is_float(self.dtype):
            raise TypeError(f"{op}: needs a floating-point tensor, got {self.dtype} (as PyTorch)")
        return self._update_in_place(lambda: draw().cast(self.dtype), op)

    def _uniform_draws(self: Tensor, generator: Generator | None) -> Tensor:  # type: ignore[misc]
        # in [0, 1)
        return Tensor.rand(*self.shape, device=self.device, dtype=_draw_dtype(self), generator=generator)

    def uniform_(self: Tensor, low: float = 0.0, high: float = 1.0, *, generator: Generator | None = None) -> Tensor:  # type: ignore[misc]
        """Every element drawn from U[low, high) in place (torch.Tensor.uniform_), from `generator` (a
        uopkit.Generator) or the global stream (Tensor.manual_seed seeds it)."""
        draw = lambda: Tensor.uniform(  # noqa: E731
            *self.shape, low=low, high=high, device=self.device, dtype=self.dtype, generator=generator
        )
        return self._update_in_place(draw, "uniform_")

    def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Generator | None = None) -> Tensor:  # type: ignore[misc]
        """Every element drawn from N(mean, std**2) in place (torch.Tensor.normal_), from `generator` or the global
        stream."""
        draw = lambda: Tensor.normal(  # noqa: E731
            *self.shape, mean=mean, std=std, device=self.device, dtype=self.dtype, generator=generator
        )
        return self._update_in_place(draw, "normal_")

    def bernoulli_(self: Tensor, p: float | Tensor = 0.5, *, generator: Generator | None = None) -> Tensor:  # type: ignore[misc]
        """Every element 1 with probability p, else 0, in place (torch.Tensor.bernoulli_): `p` a number, or a float
        tensor of probabilities broadcastable to this one's shape (its values aren't read back to check them: below
        0 acts as 0, above 1 as 1). Drawn from `generator` or the global stream.

        >>> Tensor.zeros(2, 2).bernoulli_(Tensor([0.0, 1.0])).tolist()
        [[0.0, 1.0], [0.0, 1.0]]
        """
        if isinstance(p, Tensor):
            if not dtypes.is_float(p.dtype):
                raise TypeError(f"bernoulli_: p must be a float tensor of probabilities, got {p.dtype}")
            probs: float | Tensor = p.detach()
        elif not 0 <= p <= 1:
            raise ArgumentError(f"bernoulli_: p must be in [0, 1], got {p}")
        else:
            probs = p
        draw = lambda: (Tensor.rand(*self.shape, device=self.device, generator=generator) < probs).cast(self.dtype)  # noqa: E731
        return self._update_in_place(draw, "bernoulli_")

    def exponential_(self: Tensor, lambd: float = 1.0, *, generator: Generator | None = None) -> Tensor:  # type: ignore[misc]
        """Every element drawn from the exponential distribution of rate `lambd`, in place (torch's).

        >>> bool((Tensor.zeros(100).exponential_(2.0) >= 0).all().item())
        True
        """
        if not lambd > 0:
            raise ArgumentError(f"exponential_: lambd must be positive, got {lambd}")
        return self._draw_in_place("exponential_", lambda: -(1 - self._uniform_draws(generator)).log() / lambd)

    def geometric_(self: Tensor, p: float, *, generator: Generator | None = None) -> Tensor:  # type: ignore[misc]
        """Every element the number of Bernoulli(p) trials up to the first success (1, 2, ...), in place (torch's);
        integer tensors too.

        >>> bool((Tensor.zeros(100).geometric_(0.5) >= 1).all().item())
        True
        """
        if not 0 < p < 1:
            raise ArgumentError(f"geometric_: p must be in (0, 1), got {p}")
        trials = lambda: ((1 - self._uniform_draws(generator)).log() / math.log1p(-p)).ceil().maximum(1)  # noqa: E731
        return self._draw_in_place("geometric_", trials, floats_only=False)

    def cauchy_(  # type: ignore[misc]
        self: Tensor, median: float = 0.0, sigma: float = 1.0, *, generator: Generator | None = None
    ) -> Tensor:
        """Every element drawn from the Cauchy distribution around `median` with scale `sigma`, in place (torch's).

        >>> Tensor.zeros(3).cauchy_(sigma=0.0).tolist()
        [0.0, 0.0, 0.0]
        """
        if not sigma >= 0:
            raise ArgumentError(f"cauchy_: sigma must be non-negative, got {sigma}")
        draw = lambda: ((self._uniform_draws(generator) - 0.5) * math.pi).tan() * sigma + median  # noqa: E731
        return self._draw_in_place("cauchy_", draw)

    def log_normal_(  # type: ignore[misc]
        self: Tensor, mean: float = 1.0, std: float = 2.0, *, generator: Generator | None = None
    ) -> Tensor:
        """Every element exp(N(mean, std**2)), in place (torch's).

        >>> Tensor.zeros(2).log_normal_(0.0, 0.0).tolist()
        [1.0, 1.0]
        """
        if not std >= 0:
            raise ArgumentError(f"log_normal_: std must be non-negative, got {std}")
        shape, dtype = self.shape, _draw_dtype(self)
        draw = lambda: (Tensor.randn(*shape, device=self.device, dtype=dtype, generator=generator) * std + mean).exp()  # noqa: E731
        return self._draw_in_place("log_normal_", draw)

    def random_(  # type: ignore[misc]
        self: Tensor, low: int = 0, high: int | None = None, *, generator: Generator | None = None
    ) -> Tensor:
        """Every element an integer drawn uniformly from [low, high), in place (torch's `random_(from, to)`;
        `random_(to)` is [0, to)); without `high`, from 0 up to the largest integer the dtype holds exactly (a float
        dtype's 2**mantissa bits, inclusive, as torch).

        >>> sorted(set(Tensor.zeros(200).random_(3).tolist()))
        [0.0, 1.0, 2.0]
        """
        dtype = self.dtype
        if high is None and low != 0:
            low, high = 0, low
        if high is None:
            if dtype == dtypes.bool:
                high = 2
            elif dtypes.is_float(dtype):
                high = 2 ** {dtypes.float16: 11, dtypes.bfloat16: 8, dtypes.float32: 24}.get(dtype, 53) + 1
            else:
                high = dtypes.max(dtype) + 1
        if high <= low:
            raise ArgumentError(f"random_: the range [{low}, {high}) is empty")
        if (
            not dtypes.is_float(dtype)
            and dtype != dtypes.bool
            and not dtypes.min(dtype) <= low <= high - 1 <= dtypes.max(dtype)
        ):
            raise ArgumentError(f"random_: [{low}, {high}) doesn't fit this {dtype} tensor")
        draw = lambda: Tensor.randint(  # noqa: E731
            *self.shape, low=low, high=high, device=self.device, dtype=dtypes.int64, generator=generator
        )
        return self._draw_in_place("random_", draw, floats_only=False)

    # ------------------------------------------------------------------------------------------------------------
    # device and element queries

    @property
    def itemsize(self: Tensor) -> int:  # type: ignore[misc]
        """Bytes per element (torch's `itemsize`, also `element_size()`)."""
        return self.dtype.itemsize

    @property
    def is_cpu(self: Tensor) -> bool:  # type: ignore[misc]
        """Whether the tensor lives on the CPU backend."""
        return self.device.split(":")[0] == "CPU"

    @property
    def is_cuda(self: Tensor) -> bool:  # type: ignore[misc]
        """Whether the tensor lives on the CUDA backend."""
        return self.device.split(":")[0] == "CUDA"

    def get_device(self: Tensor) -> int:  # type: ignore[misc]
        """The device's index (`CUDA:1` -> 1, a device without one -> 0), -1 on the CPU, as torch's."""
        name, _, index = self.device.partition(":")
        return -1 if name == "CPU" else int(index or 0)


def _shape_change_in_place(name: str) -> Callable[..., Tensor]:
    # torch's `t.name_(...)` for a view op: t itself becomes the view (same storage, new shape); its values don't change
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if self._requires_grad and self.is_leaf:
            raise RuntimeError(
                f"{name}_: a leaf tensor that requires grad can't change in place (as PyTorch); use {name} (a view) "
                "or detach() it first"
            )
        # (a lazy tensor with live views, or a lazy view of a live base, is computed into storage first: the views
        # keep seeing its storage, as PyTorch's, after its graph becomes a view op over it)
        _share_storage(self)
        live_tensors.set_uop(self, getattr(self, name)(*args, **kwargs).uop)
        return self

    method.__name__ = method.__qualname__ = f"{name}_"
    method.__doc__ = f"`{name}` in place (torch.Tensor.{name}_): the tensor object itself takes the new shape."
    return method


for _name in ("squeeze", "unsqueeze", "t", "transpose", "swapaxes", "swapdims"):
    setattr(TorchNamesMixin, f"{_name}_", _shape_change_in_place(_name))

# PyTorch's other in-place methods, each its out-of-place method written into the tensor
for _name in (
    "abs", "absolute", "neg", "negative", "sign", "sgn", "square", "reciprocal", "sqrt", "rsqrt", "exp", "exp2",
    "expm1", "log", "log2", "log10", "log1p", "logit", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
    "tanh", "asinh", "acosh", "atanh", "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "sinc",
    "sigmoid", "relu", "erf", "erfc", "erfinv", "floor", "ceil", "round", "trunc", "fix", "frac", "nan_to_num",
    "deg2rad", "rad2deg", "clamp_min", "clamp_max", "fmod", "remainder", "atan2", "arctan2", "hypot",
    "copysign", "heaviside", "xlogy", "lerp", "addcmul", "addcdiv", "multiply", "subtract", "divide", "true_divide",
    "floor_divide", "eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal",
    "logical_not", "logical_and", "logical_or", "logical_xor", "bitwise_not", "bitwise_and", "bitwise_or",
    "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "tril", "triu", "cumsum", "cumprod",
    "renorm", "addmm", "addmv", "addr", "baddbmm", "addbmm", "scatter", "scatter_add", "scatter_reduce", "index_add",
    "index_copy",
):  # fmt: skip
    setattr(TorchNamesMixin, f"{_name}_", _in_place_method(_name))
