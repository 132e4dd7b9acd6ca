"""Unary math (exp, log, trigonometry, rounding, pow), activations, hyperbolic and inverse functions: a mixin of
`Tensor`."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from uopkit.dtype import (
    dtypes,
    least_upper_float,
)
from uopkit.gradient import set_gradient
from uopkit.tensor.elementwise import _scalar_uop
from uopkit.tensor.replay import replayed
from uopkit.tensor.series import _erf_near_zero, _erfc_beyond_half, _horner
from uopkit.tensor.support import (
    ArgumentError,
    DTypeError,
    ShapeError,
    UnsupportedDTypeError,
    _check_stored_scalar,
    _int_joining,
    _normalize_axis,
    _py_number,
    _reading_input,
    _rounded_to,
    _with_derivative,
    _with_derivative_of,
    float_alu_method,
    in_float32,
)
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


# tanh's Taylor series: x * (1 + x**2 * (c0 * x**16 + ... + c8)), highest power first; the first term left out is
# below 1e-9 at |x| = 0.55
_TANH_SERIES = (
    -443861162 / 1856156927625,
    6404582 / 10854718875,
    -929569 / 638512875,
    21844 / 6081075,
    -1382 / 155925,
    62 / 2835,
    -17 / 315,
    2 / 15,
    -1 / 3,
)


# atan's Taylor series in u**2 for float64 (u <= tan(pi/16)): (-1)**k / (2k + 1), highest power first
_ATAN_SERIES = tuple((-1) ** k / (2 * k + 1) for k in reversed(range(12)))

# from here e^-|x| is below float64's precision next to e^|x| (e^-40): cosh and sinh are e^|x| / 2 alone
_EXP_MINUS_NEGLIGIBLE = 20.0


def _tanh_derivative(x: Tensor) -> Tensor:
    # 1 - tanh(x)^2 as (1 - t)(1 + t): 1 - t is exact where t is near 1 (t * t would round there)
    t = x.tanh()
    return (1 - t) * (1 + t)


def _relu_gradient(low: UOp, zero: UOp, x: UOp, g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
    # torch's threshold_backward: the incoming gradient where x > 0 (and at NaN), else 0, built as the select's own
    # rule builds it (`low`: x <= 0, `zero`: relu's broadcast 0), and a function of x too (see `_reading_input`)
    if g.dtype != zero.dtype:
        zero = _scalar_uop(0, g.dtype, x.device, x.shape or ())
    return (_reading_input(UOp(Ops.WHERE, g.dtype, (low, zero, g)), x),)


def _leaky_relu_gradient(positive: UOp, slope: float, x: UOp, g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
    # torch's leaky_relu_backward: the incoming gradient where x > 0, times the slope elsewhere (at NaN too), and a
    # function of x (see `_reading_input`)
    scaled = g * _scalar_uop(slope, g.dtype, x.device, x.shape or ())
    return (_reading_input(UOp(Ops.WHERE, g.dtype, (positive, g, scaled)), x),)


def _erf_abs_float64(a: Tensor) -> Tensor:
    # erf for a >= 0 in float64: the Taylor series below 0.5, 1 - erfc above (erfc <= 0.48 there: no digits are lost)
    return (a < 0.5).where(_erf_near_zero(a), 1 - _erfc_beyond_half(a))


# pi/2 in parts for cos's and tan's reduction x - k * pi/2: each part's product with an integer k below the limit on
# |x| is exact, and so is each difference (short parts), so the reduced argument keeps x's accuracy next to cos's
# zeros without relying on the compiler to fuse a product and a difference into an FMA (PoCL doesn't). float32: parts
# of at most 11 bits, k < 2**13, then what they leave rounded; float64: fdlibm's 33-bit parts, k < 2**20
_HALF_PI_PARTS_32 = (
    (1.5703125, 4.837512969970703125e-4, 7.549533620476723e-08, 2.5632829192545614e-12, 6.123234262925839e-17),
    12000.0,
)
_HALF_PI_PARTS_64 = (
    (1.57079632673412561417e00, 6.07710050630396597660e-11, 2.02226624871116645580e-21, 8.47842766036889956997e-32),
    1.6e6,
)


def _reduce_half_pi(x: Tensor) -> tuple[Tensor, Tensor]:
    """x = k * pi/2 + r with |r| <= pi/4 (about), for cos and tan; k = 0 (r = x) beyond the parts' range."""
    parts, limit = _HALF_PI_PARTS_64 if x.dtype == dtypes.float64 else _HALF_PI_PARTS_32
    # (any integer next to x * 2/pi will do: floor, cheaper than round's ties to even)
    k = ((x < limit) & (x > -limit)).where((x * (2 / math.pi) + 0.5).floor(), 0)
    r = x
    for part in parts:
        r = r - k * part
    return k, r


def _integer_power(a: Tensor, b: Tensor, bits: int | None) -> Tensor:
    """a ** b of ints by squaring, in their own dtype: it wraps where the power leaves the dtype's range, as torch's
    (3 ** 100 in int32 is -818408495; a float64 power was exact only up to 2**53). A negative power truncates to 0,
    except for 1 and -1 (0 ** -1 is 0, as torch's). `bits`: how many of b's low bits can be set, when known."""
    dt = a.dtype
    if bits is None:
        bits = 8 * dt.itemsize - (0 if dtypes.is_unsigned(dt) else 1)
    ret, square = Tensor.ones(a.shape, device=a.device, dtype=dt), a
    for i in range(bits):
        ret = ((b >> i) & 1).cast(dtypes.bool).where(ret * square, ret)
        if i + 1 < bits:
            square = square * square
    if dtypes.is_unsigned(dt):
        return ret
    odd = (b & 1).cast(dtypes.bool)
    negative_power = (a == 1).where(1, (a == -1).where(odd.where(-1, 1), 0)).cast(dt)
    return (b < 0).where(negative_power, ret)


def _bounds(min_: Any, max_: Any, min_kw: Any, max_kw: Any, op: str) -> tuple[Any, Any]:
    # clip's and clamp's (lo, hi): each given by position or by torch's keyword, at least one of them
    if (min_ is not None and min_kw is not None) or (max_ is not None and max_kw is not None):
        raise ArgumentError(f"{op}: a bound is given twice (min_ and min, or max_ and max); give it once")
    lo = min_ if min_ is not None else min_kw
    hi = max_ if max_ is not None else max_kw
    if lo is None and hi is None:
        raise ArgumentError(f"{op}: at least one of min and max must be given")
    if lo is not None and hi is not None and isinstance(lo, Tensor) != isinstance(hi, Tensor):
        # torch has a form with two numbers and one with two tensors, none with one of each
        kinds = f"min is a {type(lo).__name__} and max a {type(hi).__name__}"
        raise TypeError(f"{op}: the bounds must be both numbers or both tensors, {kinds}; make the number a tensor")
    return lo, hi


def _may_be_nan(bound: Any) -> bool:
    # a clamp bound that may hold NaN: a tensor (or list), or a NaN number
    if isinstance(bound, (bool, int)):
        return False
    return not isinstance(bound, float) or math.isnan(bound)


class MathMixin:
    __slots__ = ()

    # ---- unary math; every transcendental is built from EXP2, LOG2, SIN, SQRT and RECIP

    def _float(self) -> Tensor:
        return self.cast(least_upper_float(self.dtype))

    def _unary_float(self, op: Ops) -> Tensor:
        return self._float()._alu(op)

    # one ALU op on the value as a float (ints promote): name, op, docstring and its example
    exp2 = float_alu_method("exp2", Ops.EXP2, "2 ** x.", "Tensor([3.0]).exp2().tolist()", "[8.0]")
    log2 = float_alu_method("log2", Ops.LOG2, "Base-2 logarithm.", "Tensor([8.0]).log2().tolist()", "[3.0]")
    sqrt = float_alu_method("sqrt", Ops.SQRT, "Square root.", "Tensor([4.0]).sqrt().tolist()", "[2.0]")
    reciprocal = float_alu_method("reciprocal", Ops.RECIP, "1 / x.", "Tensor([4.0]).reciprocal().tolist()", "[0.25]")

    def sin(self) -> Tensor:
        """Sine.

        >>> Tensor([0.0]).sin().tolist()
        [0.0]
        """
        x = self._float()
        # cos(x), given whole: Tensor.cos reduces x by pi/2 in exact parts, where the SIN rule's own cos can't (its
        # error is about an ulp of 1.0, all of the value next to cos's zeros)
        return _with_derivative_of(x._alu(Ops.SIN), x, Tensor.cos)

    @in_float32
    def exp(self) -> Tensor:
        """e ** x, accurate to the dtype over its whole range.

        >>> round(Tensor([1.0]).exp().item(), 5)
        2.71828
        """
        # codegen recognizes EXP2(x * log2(e)) and reduces x by ln2 in two parts (see codegen/transcendental.py)
        return (self._float() * (1 / math.log(2)))._alu(Ops.EXP2)

    @in_float32
    def log(self) -> Tensor:
        """Natural logarithm.

        >>> round(Tensor([math.e]).log().item(), 5)
        1.0
        """
        return self._unary_float(Ops.LOG2) * math.log(2)

    @replayed
    @in_float32
    def log10(self) -> Tensor:
        """Base-10 logarithm.

        >>> round(Tensor([1000.0]).log10().item(), 5)
        3.0
        """
        return self._unary_float(Ops.LOG2) * math.log10(2)

    def logaddexp(self, other: Any) -> Tensor:
        """log(exp(self) + exp(other)), without overflow: max + log1p(exp(-|self - other|)).

        >>> round(Tensor([0.0]).logaddexp(0.0).item(), 5)
        0.69315
        """
        a, b = (t._float() for t in self._broadcasted(other, op="logaddexp", floats=True))
        if a.dtype in dtypes.halves:
            # in float32, rounded once (op by op in half floats was up to 6 ulp off in float16, 12 in bfloat16)
            return a.float().logaddexp(b.float()).cast(a.dtype)
        # equal arguments (both -inf or both inf among them) give a + log(2): a - b would be nan there
        spread = (a - b).abs()
        out = (a == b).where(a + math.log(2), a.maximum(b) + (-spread).exp().log1p())
        # PyTorch's derivatives, given whole (the max's tie and the equal-arguments branch would split them otherwise)
        da, db = (1 + (b - a).exp()).reciprocal(), (1 + (a - b).exp()).reciprocal()
        return _with_derivative(out, a, da + db) if a.uop is b.uop else _with_derivative(out, a, da, (b, db))

    @replayed
    def logit(self, eps: float | None = None) -> Tensor:
        """log(x / (1 - x)), x first clamped to [eps, 1 - eps] when `eps` is given, as torch.logit: its gradient is 0
        where the clamp holds x, and NaN outside [0, 1] without `eps`.

        >>> Tensor([0.5, 0.75]).logit().tolist()
        [0.0, 1.0986123085021973]
        """
        if self.dtype not in dtypes.halves:
            return self._logit(eps, None if eps is None else 1 - eps)
        # computed in float32 and rounded once, with torch's bounds of the half float itself: float16's 1 - 1e-6 is
        # 1.0, so logit(1.0, eps=1e-6) is inf there, as torch's
        bounds = (None, None) if eps is None else (_rounded_to(eps, self.dtype), _rounded_to(1 - eps, self.dtype))
        return self.cast(dtypes.float32)._logit(*bounds).cast(self.dtype)

    def _logit(self, eps: float | None, high: float | None) -> Tensor:
        x = self._float()
        # (inf at 0 and 1 as torch's, from either side: 1 / (x * (1 - x)) is -inf at -0.0)
        slope = ((x == 0) | (x == 1)).where(math.inf, (x * (1 - x)).reciprocal())
        if eps is None:
            z, derivative = x, ((x < 0) | (x > 1)).where(math.nan, slope)
        else:
            # (torch's order of the two tests: an eps above 0.5 gives eps below 1 - eps, and 1 - eps above eps)
            below, above = x < eps, x > high
            z = below.where(eps, above.where(high, x))
            derivative = (below | above).where(0.0, slope)
        return _with_derivative((z / (1 - z)).log(), x, derivative)

    @replayed
    @in_float32
    def log1p(self) -> Tensor:
        """log(1 + x), accurate for small x.

        >>> Tensor([1e-10]).log1p().tolist()[0] > 0
        True
        """
        x = self._float()
        u = x + 1
        exact = u == 1
        # log(u) * (x / (u - 1)) corrects the rounding of 1 + x (Goldberg; the ratio first: log(u) * x overflowed past
        # 1e37); u == 1 means log1p(x) ~ x (and the unused branch divides by 1 there, so its gradient stays finite)
        corrected = u.log() * (x / exact.where(1, u - 1))
        out = exact.where(x, (u == math.inf).where(math.inf, corrected))
        # the correction's own derivative is 0/0 and inf/inf in places: PyTorch's 1 / (1 + x), given whole
        return _with_derivative(out, x, (x + 1).reciprocal())

    @replayed
    @in_float32
    def expm1(self) -> Tensor:
        """exp(x) - 1, accurate for small x.

        >>> Tensor([0.0]).expm1().tolist()
        [0.0]
        """
        x = self._float()
        u = x.exp()
        # (u - 1) * x / log(u) corrects the rounding of exp for small x (Kahan); away from 0, u - 1 is accurate as it
        # is, and the correction's (u - 1) * x would overflow near the top of the range (expm1(88) in float32)
        corrected = (u - 1) * x / u.log()
        near_zero = (u > 0.5) & (u < 2.0)
        out = (u == 1).where(x, near_zero.where(corrected, u - 1))
        # the correction's own derivative is 0/0 at 0 (and NaN at +-inf): exp(x), given whole
        return _with_derivative(out, x, u)

    @in_float32
    def rsqrt(self) -> Tensor:
        """1 / sqrt(x).

        >>> Tensor([4.0]).rsqrt().tolist()
        [0.5]
        """
        return self.sqrt().reciprocal()

    @replayed
    @in_float32
    def cos(self) -> Tensor:
        """Cosine: x = k * pi/2 + r with |r| <= pi/4, then +-sin(r) or +-(1 - 2 sin(r/2)**2) by k's quadrant.

        Next to cos's zeros (odd multiples of pi/2), 1 - 2 sin(x/2)**2 cancels to a few ulp of 1.0 (cos(1.5707964)
        came out 5.96e-08 instead of -4.37e-08); sin(r) of the reduced r keeps the relative accuracy there. Beyond the
        reduction's range (pi/2 is split in parts whose multiples by k are exact), 1 - 2 sin(x/2)**2, whose x/2 is
        exact.

        >>> Tensor([0.0]).cos().tolist()
        [1.0]
        """
        x = self._float()
        # (beyond the reduction's range k = 0 and r = x: the even quadrant's 1 - 2 sin(x/2)**2)
        k, r = _reduce_half_pi(x)
        # k's quadrant from its bits, as 0/1 and +-1 factors: arithmetic, not selects on booleans, vectorizes best
        quadrant = k.cast(dtypes.int32)
        odd = (quadrant & 1).cast(x.dtype)
        sign = (1 - ((quadrant + 1) & 2)).cast(x.dtype)
        # one sine: sin(r) in the odd quadrants, else sin(r/2)
        s = (r * (0.5 + 0.5 * odd)).sin()
        out = (odd * s + (1 - odd) * (1 - 2 * s * s)) * sign
        # -sin(x), given whole (the reduction's round has no derivative)
        return _with_derivative(out, x, -x.sin())

    @replayed
    @in_float32
    def tan(self) -> Tensor:
        """Tangent, sin(x) / cos(x).

        >>> round(Tensor([math.pi / 4]).tan().item(), 5)
        1.0
        """
        # (half floats in float32, `in_float32`: the exact products below need float32's bits)
        x = self._float()
        # x = k * pi/2 + r with |r| <= pi/4, as in cos: sin(x) / cos(x) loses all relative accuracy (and the sign) next
        # to the poles, where cos(x) ~ 0
        k, r = _reduce_half_pi(x)
        half = r * 0.5
        s, c = r.sin(), 1 - 2 * half.sin() * half.sin()
        odd = (k * 0.5).floor() != k * 0.5
        # (beyond the reduction's range k = 0: sin(x) / cos(x) as it is)
        out = odd.where(-c / s, s / c)
        # (tan(+-0) is that zero: the reduction above gives -0.0 - -0.0 = +0.0)
        out = (x == 0).where(x, out)
        # 1 / cos(x)^2, given whole: the chain through both branches meets 0 * inf at 0 (the unused -c / s)
        return _with_derivative(out, x, x.cos().square().reciprocal())

    @replayed
    def trunc(self) -> Tensor:
        """Round toward zero.

        >>> Tensor([-1.5, 1.5]).trunc().tolist()
        [-1.0, 1.0]
        """
        return self if not dtypes.is_float(self.dtype) else self._alu(Ops.TRUNC)

    @replayed
    def floor(self) -> Tensor:
        """Round toward -inf.

        >>> Tensor([-1.5, 1.5]).floor().tolist()
        [-2.0, 1.0]
        """
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (self < t).where(t - 1, t)

    @replayed
    def ceil(self) -> Tensor:
        """Round toward +inf.

        >>> Tensor([-1.5, 1.5]).ceil().tolist()
        [-1.0, 2.0]
        """
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (self > t).where(t + 1, t)

    @replayed
    def round(self, decimals: int = 0) -> Tensor:
        """Round half to even (as numpy and PyTorch), to `decimals` places as torch.round: x * 10**decimals rounded,
        then divided back (multiplied back by 10**-decimals when it is negative).

        >>> Tensor([0.5, 1.5, 2.5, -0.5]).round().tolist(), Tensor([1.25, 1250.0]).round(1).tolist()
        ([0.0, 2.0, 2.0, -0.0], [1.2000000476837158, 1250.0])
        """
        if decimals:
            if not dtypes.is_float(self.dtype):
                raise UnsupportedDTypeError(
                    f"round: decimals={decimals} needs a float tensor, got {self.dtype} (as PyTorch); "
                    "cast with .float() first"
                )
            if self.dtype.itemsize < 4:
                # scaled in float32, as torch computes half floats (1250 * 100 overflows float16)
                return self.float().round(decimals).cast(self.dtype)
            scale = 10.0 ** abs(decimals)
            return (self * scale).round() / scale if decimals > 0 else (self / scale).round() * scale
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        frac = self - t
        step = (self > 0).where(1.0, -1.0).cast(self.dtype)
        t_is_odd = (t * 0.5).trunc() != t * 0.5
        up = (frac.abs() > 0.5) | ((frac.abs() == 0.5) & t_is_odd)
        return up.where(t + step, t)

    @replayed
    def abs(self) -> Tensor:
        """|x|.

        >>> Tensor([-2, 3]).abs().tolist()
        [2, 3]
        """
        if self.dtype == dtypes.bool:
            raise UnsupportedDTypeError(
                "abs: a bool tensor has no absolute value, as in PyTorch (cast it to a number first)"
            )
        if dtypes.is_unsigned(self.dtype):
            return self
        # both zeros give +0.0 (MAX of +0.0 and -0.0 may pick either), NaN stays NaN
        value = (self < 0).where(-self, (self == 0).where(0, self))
        if not dtypes.is_float(self.dtype):
            return value
        # torch's derivative, sign(x) times the incoming gradient: 0 at 0 and at NaN, and NaN there for an infinite
        # or NaN incoming one (sqrt(abs(x)) at 0), where a select would give 0
        return _with_derivative(value, self, self.sign())

    @replayed
    def sign(self) -> Tensor:
        """-1, 0 or 1; NaN gives 0 and the gradient is 0 everywhere, as torch.sign.

        >>> Tensor([-2.0, 0.0, 3.0, float("nan")]).sign().tolist()
        [-1.0, 0.0, 1.0, 0.0]
        """
        if self.dtype == dtypes.bool:
            return self
        ret = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
        # (a float input gets a zero gradient, as torch's, rather than none)
        nowhere = Tensor.zeros(*self.shape, dtype=dtypes.bool, device=self.device)
        return _with_derivative(ret, self, nowhere) if dtypes.is_float(self.dtype) else ret

    def copysign(self, other: Any) -> Tensor:
        """|self| with the sign (bit) of `other`, so -0.0 counts as negative; float result, as torch.copysign.

        >>> Tensor([1.0, -2.0]).copysign(Tensor([-0.0, 3.0])).tolist()
        [-1.0, 2.0]
        """
        # (promoted first, then made float: an int tensor with a float16 one gives float16, as torch's)
        x, y = self._broadcasted(other, op="copysign", floats=True)
        x, y = x._float(), y._float()
        # the sign bit of y: negative values, and -0.0 (1 / -0.0 is -inf); detached, so that the value's subgraph
        # holds no other input with a gradient (its given derivative would be passed over for the chain of rules)
        yd = y.detach()
        neg = (yd < 0) | ((yd == 0) & (yd.reciprocal() < 0))
        # |x| (-0.0 made 0.0)
        mag = (x < 0).where(-x, (x == 0).where(0.0, x))
        value = neg.where(-mag, mag)
        # PyTorch's derivative, result / x: +-1, 0 at x = 0, NaN at x = +-inf or NaN
        value = _with_derivative(value, x, (x == 0).where(0.0, value.detach() / x.detach()))
        # other gets a zero gradient (it only chooses the sign), as in PyTorch
        return Tensor.full(value.shape, True, device=self.device).where(value, y)

    def isclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> Tensor:
        """|self - other| <= atol + rtol |other| elementwise; infinities are close only to themselves.

        >>> Tensor([1.0, 2.0]).isclose(Tensor([1.0 + 1e-7, 2.1])).tolist()
        [True, False]
        """
        if isinstance(other, Tensor) and other.dtype is not self.dtype:
            # torch compares tensors of one dtype only (a number is taken in self's)
            raise DTypeError(f"isclose: needs tensors of one dtype, got {self.dtype} and {other.dtype}; cast one first")
        a, b = self._broadcasted(other, op="isclose")
        ret = a == b
        if dtypes.is_float(a.dtype):
            finite = (a - a == 0) & (b - b == 0)
            ret = ret | (finite & ((a - b).abs() <= atol + rtol * b.abs()))
            if equal_nan:
                ret = ret | (a.isnan() & b.isnan())
        else:
            # (in float64: an unsigned difference would wrap, bools don't subtract)
            a64, b64 = a.cast(dtypes.float64), b.cast(dtypes.float64)
            ret = ret | ((a64 - b64).abs() <= atol + rtol * b64.abs())
        return ret

    def allclose(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
        """Whether every element is close (`isclose`) to `other`, as a Python bool (torch.allclose); reads back.

        >>> Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-7]))
        True
        """
        return bool(self.isclose(other, rtol, atol, equal_nan).all().item())

    def square(self) -> Tensor:
        """x * x.

        >>> Tensor([3]).square().tolist()
        [9]
        """
        # (a bool squares as a number, as PyTorch's pow(2): True * True would stay a bool)
        return self.pow(2) if dtypes.is_bool(self.dtype) else self * self

    def clip(self, min_: Any = None, max_: Any = None, *, min: Any = None, max: Any = None) -> Tensor:
        """Clamp to [min_, max_] (either may be None); torch's keyword names min= and max= work too.

        >>> Tensor([-1, 5, 10]).clip(0, 6).tolist()
        [0, 5, 6]
        """
        return self._clipped(*_bounds(min_, max_, min, max, "clip"), "clip")

    def clamp(self, min_: Any = None, max_: Any = None, *, min: Any = None, max: Any = None) -> Tensor:
        """torch's name for clip (its errors say clamp).

        >>> Tensor([-1.0, 5.0]).clamp(min=0).tolist()
        [0.0, 5.0]
        """
        return self._clipped(*_bounds(min_, max_, min, max, "clamp"), "clamp")

    @replayed
    def _clipped(self, lo: Any, hi: Any, op: str) -> Tensor:
        """clip and clamp: self within [lo, hi] (either may be None), its errors naming `op`, the method called."""
        lo, hi = _int_joining(lo, self.dtype, op), _int_joining(hi, self.dtype, op)
        x, lo_t, hi_t = self, None, None
        if lo is not None:
            x, lo_t = x._broadcasted(lo, False, op)
        if hi is not None:
            x, hi_t = x._broadcasted(hi, False, op)
            if lo_t is not None:
                # (the upper bound may have widened x's shape or dtype)
                lo_t = lo_t.cast(x.dtype)._broadcast_to(x.shape)
        for bound in (lo, hi):
            if not isinstance(bound, Tensor):
                _check_stored_scalar(bound, x.dtype, op)
        if not dtypes.is_float(x.dtype):
            one_bound = hi if lo is None else lo if hi is None else None
            if x.dtype == dtypes.bool and not isinstance(one_bound, Tensor):
                # torch clamps bools by one tensor bound only (its maximum or minimum); number bounds or two don't
                raise UnsupportedDTypeError(
                    f"{op}: a bool tensor clamps only against one bool tensor bound (as PyTorch); got bounds "
                    f"{type(lo).__name__} and {type(hi).__name__}: cast the tensor with .int() for number bounds"
                )
            t = x if lo_t is None else x.maximum(lo_t)
            return t if hi_t is None else t.minimum(hi_t)
        # x itself where it equals a bound, as torch's max(x, lo) and min(., hi) (clamp(-0.0, min=0) is -0.0); a NaN
        # in x or in a bound gives NaN (a Python number bound is never NaN here but where it is one)
        t = x
        if lo_t is not None:
            below = t < lo_t
            t = (below | lo_t.isnan() if _may_be_nan(lo) else below).where(lo_t, t)
        if hi_t is not None:
            above = t > hi_t
            t = (above | hi_t.isnan() if _may_be_nan(hi) else above).where(hi_t, t)
        # torch's gradients: to x inside the bounds (ties included), to a bound where x is beyond it (no tie sharing)
        # (with min > max every value is max, whose gradient that is)
        if lo_t is not None and hi_t is not None:
            inside = (x >= lo_t) & (x <= hi_t)
            return _with_derivative(
                t, x, inside, (lo_t, (x < lo_t) & (lo_t < hi_t)), (hi_t, (x > hi_t) | (hi_t < lo_t))
            )
        if lo_t is not None:
            return _with_derivative(t, x, x >= lo_t, (lo_t, x < lo_t))
        assert hi_t is not None
        return _with_derivative(t, x, x <= hi_t, (hi_t, x > hi_t))

    def clip_(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 - torch's names
        """clamp_'s PyTorch alias: self clamped to [min, max] in place."""
        return self.clamp_(min, max)

    def clamp_min(self, min: Any) -> Tensor:  # noqa: A002 - torch's name
        """clamp(min=min)."""
        return self.clip(min=min)

    def clamp_max(self, max: Any) -> Tensor:  # noqa: A002 - torch's name
        """clamp(max=max)."""
        return self.clip(max=max)

    def pow(self, x: Any, reverse: bool = False) -> Tensor:
        """self ** x; small integer exponents multiply, others use POW (negative bases with integer exponents work).

        >>> Tensor([2, 3]).pow(2).tolist()
        [4, 9]
        >>> Tensor([-2.0]).pow(3.0).tolist()
        [-8.0]
        """
        if not isinstance(self, MathMixin) and isinstance(x, MathMixin):
            # torch.pow(self: Number, exponent: Tensor): the number as the base
            return x.pow(self, reverse=not reverse)
        # (a numpy scalar exponent as a Python number: np.int64(3) takes the integer path below, as 3)
        x = _py_number(x)
        if not reverse and self.dtype in dtypes.halves and type(x) in (int, float):
            # torch takes a number exponent in the half float, checked as a stored value: float16's 5001 is 5000, an
            # even power (-2.0 ** 5001 is inf), and 1e5 raises
            _check_stored_scalar(x, self.dtype, "pow")
            x = _rounded_to(float(x), self.dtype)
        if isinstance(x, bool) and self.dtype == dtypes.bool:
            if reverse:
                raise UnsupportedDTypeError(f"pow: {x} ** a bool tensor has no bool power (as PyTorch): cast to int")
            # torch's exponents 1 and 0 of a bool tensor: the tensor itself, or ones, still bool
            return self if x else Tensor.full(self.shape, True, device=self.device)
        if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool) and float(x).is_integer():
            if self.dtype == dtypes.bool:
                # bool ** number promotes like bool + number (torch: bool ** 2 is an integer tensor)
                return self.cast(dtypes.default_int if isinstance(x, int) else dtypes.default_float).pow(x)
            if isinstance(x, float) and not dtypes.is_float(self.dtype):
                # a float exponent makes the result a float, as torch's (int ** 2.0 is float32, not int)
                return self.cast(dtypes.default_float).pow(x)
            if x == 0:
                # ones, still computed from self so that its gradient is zeros (as PyTorch), and 1 for inf and nan
                return Tensor.full(self.shape, True, device=self.device).where(1, self)
            if self.dtype in dtypes.halves and x not in (1, 2):
                return self._half_integer_power(x)
            if 0 < x <= 8:
                ret = self
                for _ in range(int(x) - 1):
                    ret = ret * self
                return ret
            if -8 <= x < 0 and dtypes.is_float(self.dtype):
                # (1/x)**n rather than 1/x**n: at x = 0 the gradient is -inf (no 0 * inf), as PyTorch's n x**(n-1)
                return self.reciprocal().pow(-x)
            if x < 0 and isinstance(x, int) and not dtypes.is_float(self.dtype):
                # the answer is not an integer (torch refuses too); a tensor of exponents gives truncated results
                raise ArgumentError(
                    f"pow: a negative exponent of an integer tensor gives no integer ({self.dtype} ** {x}); "
                    "cast to a float dtype first"
                )
        if not reverse and type(x) is float and x in (0.5, -0.5):
            # as torch: a square root (or its reciprocal), not POW: (-0.0) ** 0.5 is -0.0 and (-inf) ** 0.5 NaN
            base = self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
            return base.sqrt() if x > 0 else base.rsqrt()
        a, b = self._broadcasted(x, reverse, "pow")
        if a.dtype == dtypes.bool:
            raise UnsupportedDTypeError(
                f"pow: a bool base with a bool exponent has no bool power (as PyTorch), got {self.dtype} and "
                f"{x.dtype if isinstance(x, Tensor) else type(x).__name__}; cast one operand with .int() first"
            )
        if dtypes.is_int(a.dtype):
            known = x.bit_length() if not reverse and isinstance(x, int) and x >= 0 else None
            return _integer_power(a, b, known)
        return a._alu(Ops.POW, b)

    def _half_integer_power(self, n: int | float) -> Tensor:
        """A float16 or bfloat16 tensor to the integer power n (not 0, 1 or 2) as torch's CPU kernel computes it:
        std::pow in float32, rounded once (multiplies rounded each to the half float left a fifth of float16 x ** 3
        an ulp off), except that its bfloat16 kernel multiplies x * x * x and 1 / (x * x) in bfloat16."""
        if self.dtype == dtypes.bfloat16 and n == 3:
            return self * self * self
        if self.dtype == dtypes.bfloat16 and n == -2:
            # (in float32 around the rounded square, with the derivative given: the chain through 1 / (x * x) is
            # 0 * inf at x = 0, where torch's -2 / x**3 is inf)
            x = self.float()
            value = (x * x).cast(dtypes.bfloat16).float().reciprocal()
            return _with_derivative(value, x, x.pow(-3) * -2).cast(dtypes.bfloat16)
        a, b = self.float()._broadcasted(float(n), False, "pow")
        return a._alu(Ops.POW, b).cast(self.dtype)

    def __pow__(self, x: Any) -> Tensor:
        return self.pow(x)

    def __rpow__(self, x: Any) -> Tensor:
        return self.pow(x, reverse=True)

    # ---- activations

    def relu(self) -> Tensor:
        """max(x, 0).

        >>> Tensor([-1.0, 2.0]).relu().tolist()
        [0.0, 2.0]
        """
        u = self.uop
        if not dtypes.is_float(u.dtype):
            if u.dtype == dtypes.bool:
                raise DTypeError("relu: not supported on a bool tensor (as PyTorch); cast with .int() or .float()")
            return (self > 0).where(self, 0)
        if u.dtype is not dtypes.bfloat16:
            # (every hidden layer's activation) the nodes of the line below, built directly: one zero, broadcast
            zero = _scalar_uop(0, u.dtype, u.device, self.shape)
            low = UOp(
                Ops.OR, dtypes.bool, (UOp(Ops.CMPLT, dtypes.bool, (u, zero)), UOp(Ops.CMPEQ, dtypes.bool, (u, zero)))
            )
            value = UOp(Ops.WHERE, u.dtype, (low, zero, u))
            set_gradient(value, (u,), functools.partial(_relu_gradient, low, zero, u))
            return Tensor(value)
        # NaN stays NaN and gets the gradient (PyTorch's relu); x <= 0 is false for NaN
        return (self <= 0).where(0, self)

    @replayed
    @in_float32
    def sigmoid(self) -> Tensor:
        """1 / (1 + exp(-x)), stable for large |x|.

        >>> Tensor([0.0]).sigmoid().tolist()
        [0.5]
        """
        x = self._float()
        neg = x < 0
        # e = exp(-|x|) never overflows, so neither the value nor its gradient meets inf * 0 at large |x|
        e = neg.where(x, -x).exp()
        return neg.where(e, 1) / (1 + e)

    @replayed
    @in_float32
    def logsigmoid(self) -> Tensor:
        """log(sigmoid(x)) = -softplus(-x)."""
        # (negated as a float: an int's negation wrapped, uint8 1 gave -255)
        return -(-self._float()).softplus(threshold=math.inf)

    @replayed
    @in_float32
    def tanh(self) -> Tensor:
        """Hyperbolic tangent: (1 - e) / (1 + e) with e = exp(-2|x|) and the sign of x, and its odd Taylor series
        where |x| < 0.55 (there 1 - e would cancel digits).

        >>> Tensor([0.0]).tanh().tolist()
        [0.0]
        """
        x = self._float()
        a = x.abs()
        e = (-2 * a).exp()
        if x.dtype == dtypes.float64:
            # float64 would need many more terms of the series: expm1 keeps the digits 1 - e would cancel
            t = (-(-2 * a).expm1() / (1 + e)).abs()
            # (a zero is itself: -0.0 keeps its sign)
            value = (x == 0).where(x, (x < 0).where(-t, t))
        else:
            far = (1 - e) / (1 + e)
            # (clipped so that the series never sees a large x, even where it isn't selected)
            s = x.clip(-0.55, 0.55)
            s2 = s * s
            series = _TANH_SERIES[0]
            for c in _TANH_SERIES[1:]:
                series = series * s2 + c
            # (s times the rest keeps the sign of -0.0)
            near = s * (1 + s2 * series)
            value = (a < 0.55).where(near, (x < 0).where(-far, far))
        # the derivative as torch's, 1 - tanh^2 of the value itself, so the derivatives of every order are polynomials
        # in tanh: those of the series lost its truncation error's digits (the 5th 2e-3 off) and grew large graphs (a
        # small tanh MLP's 5th input derivative: 13 s to compile, 1.7 s now). A recurrent layer, whose backward chain
        # this shallow derivative no longer cuts at each step, stores each step's state gradient (`nn/sequence.py`)
        return _with_derivative_of(value, x, _tanh_derivative)

    # ---- hyperbolic and inverse trigonometric functions, erf: each value computed where it is accurate, its gradient
    # the textbook derivative (see _with_derivative), so no branch's inf or nan leaks into a gradient

    @replayed
    @in_float32
    def sinh(self) -> Tensor:
        """Hyperbolic sine (a series near 0, where (e^x - e^-x) / 2 would cancel).

        >>> Tensor([0.0]).sinh().tolist()
        [0.0]
        """
        x = self._float()
        # (cosh built when asked for, with its own rule: the chain through cosh's branches met e^89 = inf times a
        # masked 0, a nan second derivative from |x| = 89 in float32)
        return _with_derivative_of(x._sinh_value(), x, Tensor.cosh)

    def _sinh_value(self) -> Tensor:
        a = self.abs()
        small = a < 1
        xs = small.where(self, 0)
        z = xs * xs
        # x (1 + x^2/3! (1 + x^2/(4*5) (1 + ...))): to x^11 for float32; float64 needs to x^19 (the next term, x^13/13!,
        # is 1.6e-10 of the value at x = 1)
        last = 19 if self.dtype == dtypes.float64 else 11
        inner = 1 + z / (last * (last - 1))
        for k in range(last - 2, 2, -2):
            inner = 1 + z / (k * (k - 1)) * inner
        series = xs * inner
        far = a._half_exp_of_abs()
        return small.where(
            series, (a < _EXP_MINUS_NEGLIGIBLE).where((self.exp() - (-self).exp()) / 2, far * self.sign())
        )

    def _cosh_value(self) -> Tensor:
        a = self.abs()
        return (a < _EXP_MINUS_NEGLIGIBLE).where((self.exp() + (-self).exp()) / 2, a._half_exp_of_abs())

    def _half_exp_of_abs(self) -> Tensor:
        # e^a / 2 for a >= 0 as (e^(a/2) / 2) e^(a/2): finite wherever the result is (e^a alone overflows first, from
        # a = 88.7 in float32 where cosh and sinh are finite up to 89.4)
        h = (self * 0.5).exp()
        return (h * 0.5) * h

    @replayed
    @in_float32
    def cosh(self) -> Tensor:
        """Hyperbolic cosine.

        >>> Tensor([0.0]).cosh().tolist()
        [1.0]
        """
        x = self._float()
        # the gradient is sinh computed accurately (e^x - e^-x would cancel near 0), with its own rule (see sinh)
        return _with_derivative_of(x._cosh_value(), x, Tensor.sinh)

    @replayed
    @in_float32
    def asinh(self) -> Tensor:
        """Inverse hyperbolic sine.

        >>> Tensor([0.0]).asinh().tolist()
        [0.0]
        """
        # (half floats in float32, `in_float32`: a * a overflows float16 from a = 256)
        x = self._float()
        return _with_derivative(x._odd(Tensor._asinh_abs), x, (x * x + 1).rsqrt())

    def _asinh_abs(self) -> Tensor:
        # log(2a) where a*a would overflow; log1p(a + a^2 / (1 + sqrt(a^2 + 1))) keeps the digits near 0
        huge = self > 1e10
        a = huge.where(0, self)
        near = (a + a * a / (1 + (a * a + 1).sqrt())).log1p()
        return huge.where(huge.where(self, 1).log() + math.log(2), near)

    def _odd(self, on_abs: Any) -> Tensor:
        # an odd function from its values on |x| (|x| as a select: its gradient is +-1, also at 0); f(+-0) = +-0, the
        # zero itself (the arithmetic on |x| would turn -0.0 into 0.0)
        neg = self < 0
        r = on_abs(neg.where(-self, self))
        return (self == 0).where(self, neg.where(-r, r))

    @replayed
    @in_float32
    def acosh(self) -> Tensor:
        """Inverse hyperbolic cosine (nan below 1).

        >>> Tensor([1.0]).acosh().tolist()
        [0.0]
        """
        x = self._float()
        huge = x > 1e10
        t = huge.where(0, x - 1)
        # (t * t overflows to inf far below -1: the domain is checked, not left to the sqrt)
        near = (t < 0).where(math.nan, (t + (2 * t + t * t).sqrt()).log1p())
        # 1 / sqrt(x*x - 1), x*x - 1 as (x - 1)(x + 1) (accurate near 1) but +0.0 at -1 (inf, as torch's)
        u = (x < 0).where(x * x - 1, (x - 1) * (x + 1))
        derivative = _with_derivative(u, x, 2 * x).rsqrt()
        return _with_derivative(huge.where(huge.where(x, 1).log() + math.log(2), near), x, derivative)

    @replayed
    @in_float32
    def atanh(self) -> Tensor:
        """Inverse hyperbolic tangent: (log1p(x) - log1p(-x)) / 2.

        >>> Tensor([0.0]).atanh().tolist()
        [0.0]
        """
        x = self._float()
        return _with_derivative((x.log1p() - (-x).log1p()) / 2, x, (1 - x * x).reciprocal())

    @replayed
    @in_float32
    def atan(self) -> Tensor:
        """Inverse tangent: reduced to |t| <= tan(pi/8) (pi/2 - atan(1/x), pi/4 + atan((x-1)/(x+1))), then a
        polynomial (Cephes' single-precision coefficients).

        >>> Tensor([0.0]).atan().tolist()
        [0.0]
        """
        # (half floats in float32, `in_float32`: the reduction's constants are float32s)
        x = self._float()
        return _with_derivative(x._odd(Tensor._atan_abs), x, (1 + x * x).reciprocal())

    def atan2(self, other: Any) -> Tensor:
        """The angle of the point (other, self) in (-pi, pi], signs of zeros included, as torch.atan2.

        >>> [round(v, 4) for v in Tensor([1.0, -1.0]).atan2(Tensor([-1.0, 0.0])).tolist()]
        [2.3562, -1.5708]
        """
        # (promoted first, then made float, as copysign)
        y, x = self._broadcasted(other, op="atan2", floats=True)
        y, x = y._float(), x._float()
        if y.dtype in dtypes.halves:
            # in float32, rounded once, as torch's half kernels (each step in half was off in a fifth of the results)
            return y.float().atan2(x.float()).cast(y.dtype)
        ay, ax = y.abs(), x.abs()
        lo, hi = ay.minimum(ax), ay.maximum(ax)
        # the angle folded into [0, pi/4] (atan(lo/hi) stays accurate where y/x would overflow); inf/inf is pi/4
        ratio = ((ay == math.inf) & (ax == math.inf)).where(1.0, (hi == 0).where(0.0, lo / hi))
        angle = ratio.atan()
        angle = (ay > ax).where(math.pi / 2 - angle, angle)
        # x < 0, -0.0 included (atan2(0.0, -0.0) is pi)
        x_negative = (x < 0) | ((x == 0) & (x.reciprocal() < 0))
        angle = x_negative.where(math.pi - angle, angle).copysign(y)
        # 1 / (x^2 + y^2), 0 at the origin (PyTorch's gradient there is 0, not 0/0)
        recip = (x * x + y * y).reciprocal()
        recip = (recip == math.inf).where(0.0, recip)
        return _with_derivative(angle, y, x * recip, (x, -y * recip))

    def _atan_abs(self) -> Tensor:
        big, mid = self > 2.414213562373095, self > 0.4142135623730950
        t = big.where(-big.where(self, 1).reciprocal(), mid.where((self - 1) / (self + 1), self))
        # (constants of self's dtype: a Python float in a where of two constants would be a float32)
        offset = big.where(self.full_like(math.pi / 2), mid.where(self.full_like(math.pi / 4), self.zeros_like()))
        if self.dtype == dtypes.float64:
            # halved once more, atan(t) = 2 atan(u) with u = t / (1 + sqrt(1 + t^2)) <= tan(pi/16), where 12 terms of
            # the Taylor series reach float64's precision (the next is 6e-19 of the value)
            u = t / (1 + (1 + t * t).sqrt())
            return offset + 2 * u * _horner(u * u, _ATAN_SERIES)
        z = t * t
        poly = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * t + t
        return offset + poly

    @replayed
    @in_float32
    def asin(self) -> Tensor:
        """Inverse sine: atan(x / sqrt((1 - x)(1 + x))) (nan outside [-1, 1]).

        >>> Tensor([0.0]).asin().tolist()
        [0.0]
        """
        x = self._float()
        return _with_derivative((x / ((1 - x) * (1 + x)).sqrt()).atan(), x, x._one_minus_square().rsqrt())

    @replayed
    @in_float32
    def acos(self) -> Tensor:
        """Inverse cosine: 2 atan(sqrt((1 - x) / (1 + x))), accurate near 1.

        >>> Tensor([1.0]).acos().tolist()
        [0.0]
        """
        x = self._float()
        return _with_derivative(2 * ((1 - x) / (1 + x)).sqrt().atan(), x, -x._one_minus_square().rsqrt())

    def _one_minus_square(self) -> Tensor:
        # 1 - x*x as (1 - x)(1 + x), accurate near +-1, with the derivative -2x of PyTorch's form (its product rule
        # would give 0 * -inf = NaN at +-1 for the derivative of asin's and acos's 1 / sqrt of it: torch's is -+inf)
        return _with_derivative((1 - self) * (1 + self), self, -2 * self)

    @replayed
    @in_float32
    def erf(self) -> Tensor:
        """The error function: its Taylor series below 0.5, Abramowitz & Stegun 7.1.26 above (error < 2e-7); in float64
        the series to float64's precision below 0.5 and 1 - erfc above (a few ulp).

        >>> Tensor([0.0]).erf().tolist()
        [0.0]
        """
        x = self._float()
        on_abs = _erf_abs_float64 if x.dtype == dtypes.float64 else Tensor._erf_abs
        return _with_derivative(x._odd(on_abs), x, (2 / math.sqrt(math.pi)) * (-x * x).exp())

    def _erf_abs(self) -> Tensor:
        small = self < 0.5
        s = small.where(self, 0)
        z = s * s
        series = (
            s * (2 / math.sqrt(math.pi)) * (1 - z * (1 / 3 - z * (1 / 10 - z * (1 / 42 - z * (1 / 216 - z / 1320)))))
        )
        t = (1 + 0.3275911 * self).reciprocal()
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        return small.where(series, 1 - poly * (-self * self).exp())

    @replayed
    @in_float32
    def gelu(self, approximate: str = "none") -> Tensor:
        """GELU: the exact x * (1 + erf(x / sqrt 2)) / 2 by default (as PyTorch), or its tanh approximation with
        approximate="tanh" (tinygrad's gelu, GPT-2's).

        >>> Tensor([0.0]).gelu().tolist()
        [0.0]
        """
        if approximate not in ("tanh", "none"):
            raise ArgumentError(f"gelu: approximate must be 'tanh' or 'none', got {approximate!r}")
        x = self._float()
        if approximate == "none":
            return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())
        # 0.5 * x * (1 + tanh(y)) computed as x * sigmoid(2y), the same function: one exp and a division (tanh's
        # accurate-near-0 form costs a log and a surrogate for its gradient, and a body gcc no longer vectorizes), and
        # no cancellation in 1 + tanh(y) where y is very negative
        return x * (2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).sigmoid()

    @replayed
    @in_float32
    def quick_gelu(self) -> Tensor:
        """x * sigmoid(1.702 x)."""
        return self * (self * 1.702).sigmoid()

    @replayed
    @in_float32
    def silu(self) -> Tensor:
        """x * sigmoid(x).

        >>> Tensor([0.0]).silu().tolist()
        [0.0]
        """
        return self * self.sigmoid()

    swish = silu

    @replayed
    @in_float32
    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        """log(1 + exp(beta x)) / beta, computed without overflow; x itself where beta x > threshold, as torch.

        >>> round(Tensor([0.0]).softplus().item(), 5)
        0.69315
        """
        x = self._float()
        bx = x * beta
        pos = bx >= 0
        # max(bx, 0) + log1p(exp(-|bx|)), with selects whose gradients add up to sigmoid(bx) (1/2 at 0, as PyTorch)
        exact = (pos.where(bx, 0) + pos.where(-bx, bx).exp().log1p()) * (1 / beta)
        return exact if threshold == math.inf else (bx > threshold).where(x, exact)

    def glu(self, dim: int = -1) -> Tensor:
        """Gated linear unit: the first half along `dim` times the sigmoid of the second (torch.nn.functional.glu).

        >>> Tensor([[1.0, 0.0]]).glu().tolist()
        [[0.5]]
        """
        n = self.shape[_normalize_axis(dim, self.ndim, "glu", self.shape)]
        if n % 2:
            raise ShapeError(f"glu: axis {dim} of shape {self.shape} must have an even length, it has {n}")
        a, b = self.split(n // 2, dim)
        return a * b.sigmoid()

    @replayed
    @in_float32
    def mish(self) -> Tensor:
        """x * tanh(softplus(x))."""
        return self * self.softplus(threshold=math.inf).tanh()

    @replayed
    @in_float32
    def elu(self, alpha: float = 1.0) -> Tensor:
        """x for x > 0, alpha (exp(x) - 1) otherwise.

        >>> Tensor([1.0, 0.0]).elu().tolist()
        [1.0, 0.0]
        """
        return self._exponential_linear(alpha, 1.0)

    @replayed
    @in_float32
    def celu(self, alpha: float = 1.0) -> Tensor:
        """max(0, x) + min(0, alpha (exp(x / alpha) - 1))."""
        return self._exponential_linear(alpha, 1 / alpha)

    def _exponential_linear(self, alpha: float, scale: float) -> Tensor:
        # x for x > 0, alpha * expm1(scale * x) otherwise. The negative branch sees only x <= 0: at large x its expm1
        # would be inf, and the unused branch's gradient 0 * inf is NaN. NaN takes the x branch (its gradient passes,
        # as PyTorch's)
        x = self._float()
        low = x <= 0
        inner = low.where(x, 0)
        value = low.where(alpha * (inner if scale == 1.0 else inner * scale).expm1(), x)
        # torch's derivative alpha * scale * exp(scale * x) for x <= 0, with torch's own derivative of it: 0 at x = 0,
        # where the value has a kink (a derivative through where(x <= 0) would be alpha * scale**2 there)
        below = (x < 0).where(x, 0)
        return _with_derivative(value, x, low.where((below * scale).exp() * (alpha * scale), 1.0))

    @replayed
    @in_float32
    def selu(self, alpha: float = 1.6732632423543772, gamma: float = 1.0507009873554805) -> Tensor:
        """gamma * elu(x, alpha) with the self-normalizing constants."""
        return gamma * self.elu(alpha)

    @replayed
    def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
        """x for x > 0, neg_slope * x otherwise.

        >>> Tensor([-1.0, 2.0]).leaky_relu(0.1).tolist()
        [-0.10000000149011612, 2.0]
        """
        # (x > 0, as PyTorch: at 0 and at NaN the gradient is neg_slope)
        positive = self > 0
        value = positive.where(self, self * neg_slope)
        if dtypes.is_float(self.dtype):
            set_gradient(
                value.uop, (self.uop,), functools.partial(_leaky_relu_gradient, positive.uop, neg_slope, self.uop)
            )
        return value

    @replayed
    @in_float32
    def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
        """clip(alpha x + beta, 0, 1); the gradient is alpha strictly inside, 0 at the corners and at NaN (torch's)."""
        y = alpha * self._float() + beta
        return _with_derivative(y.clip(0, 1), self, ((y > 0) & (y < 1), y.full_like(alpha)))

    @replayed
    @in_float32
    def hardswish(self) -> Tensor:
        """x * relu6(x + 3) / 6, with torch's gradient: 0 up to -3, x / 3 + 1/2 up to 3 (excluded), else 1 (NaN too)."""
        x = self._float()
        # (NaN takes the last branch, as torch's: its gradient is the incoming one)
        derivative = ((x <= -3).logical_not(), (x < 3).where(x * (1 / 3) + 0.5, 1.0))
        return _with_derivative(x * (x + 3).relu6() * (1 / 6), self, derivative)

    @replayed
    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        """clip(x, min_val, max_val), with torch's gradient: 1 strictly inside the bounds (and at NaN), else 0."""
        if not dtypes.is_float(self.dtype):
            # an int tensor keeps its dtype, as torch's: the bounds truncated into it (clamping commutes with
            # truncation, so the result is the same as clamping in float and truncating)
            lo = max(math.trunc(min_val), dtypes.min(self.dtype))
            hi = min(math.trunc(max_val), dtypes.max(self.dtype))
            return self.clip(lo, hi)
        # (torch's hardtanh_backward)
        return _with_derivative(
            self.clip(min_val, max_val), self, ((self <= min_val) | (self >= max_val)).logical_not(), reads_input=True
        )

    @replayed
    def relu6(self) -> Tensor:
        """min(max(x, 0), 6) (torch's hardtanh(x, 0, 6), its gradient too)."""
        return self.hardtanh(0, 6)

    @replayed
    @in_float32
    def softsign(self) -> Tensor:
        """x / (1 + |x|)."""
        return self / (1 + self.abs())
