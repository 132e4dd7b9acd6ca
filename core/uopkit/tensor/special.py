"""Special functions of PyTorch's Tensor (lgamma, digamma, polygamma, mvlgamma, i0) and its floating-point and integer
helpers (frexp, ldexp, nextafter, gcd, lcm): compositions of the other mixins' methods, compared with torch in
tests/test_special.py.

The gamma family shifts its argument up by whole steps with a fixed number of guarded elementwise terms (no loop over
the data) until an asymptotic series takes it, and reflects negative arguments; every derivative is a function of the
family again, built only when a backward pass asks for it."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any, NamedTuple

from uopkit.dtype import DType, dtypes
from uopkit.gradient import set_gradient
from uopkit.tensor.indexing import _in_place_method
from uopkit.tensor.replay import replayed
from uopkit.tensor.series import _horner
from uopkit.tensor.support import (
    ArgumentError,
    DTypeError,
    UnsupportedDTypeError,
    _with_derivative,
    _with_derivative_of,
    in_float32,
)
from uopkit.uop.ops import UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


class Frexp(NamedTuple):
    """(mantissa, exponent): what `frexp` returns, as torch.return_types.frexp; unpacks as a pair, or by name."""

    mantissa: Tensor
    exponent: Tensor


# ---------------------------------------------------------------------------------------------------------------------
# the gamma family: lgamma, digamma, polygamma

# B_2, B_4, ..., B_26: the Bernoulli numbers of the asymptotic series below
_BERNOULLI = (
    Fraction(1, 6), Fraction(-1, 30), Fraction(1, 42), Fraction(-1, 30), Fraction(5, 66), Fraction(-691, 2730),
    Fraction(7, 6), Fraction(-3617, 510), Fraction(43867, 798), Fraction(-174611, 330), Fraction(854513, 138),
    Fraction(-236364091, 2730), Fraction(8553103, 6),
)  # fmt: skip

# arguments from here on go to the asymptotic series; smaller ones are shifted up to it by whole steps
_ASYMPTOTIC_FROM = {dtypes.float32: 6, dtypes.float64: 10}
# terms of Stirling's series (lgamma) and of digamma's, from _ASYMPTOTIC_FROM on: the first left out is below the
# dtype's precision there (2e-9 and 2e-18 relative)
_STIRLING_TERMS = {dtypes.float32: 3, dtypes.float64: 8}
_DIGAMMA_TERMS = {dtypes.float32: 3, dtypes.float64: 8}
# Euler-Maclaurin terms of the Hurwitz zeta function's tail (polygamma n >= 1), and the relative size the first term
# left out may have where the tail starts (which moves up with n: the terms grow with n)
_ZETA_TERMS = {dtypes.float32: 5, dtypes.float64: 10}
_ZETA_CUTOFF = {dtypes.float32: 6e-9, dtypes.float64: 2e-17}

# lgamma(2 + z) = z * Q(z) for |z| <= 1/2: Q (highest power first) is the Chebyshev interpolant of lgamma(2 + z) / z,
# fitted offline with mpmath, of degree 8 (float32, relative error 5e-9) and 17 (float64, 6e-17). It keeps lgamma's
# zeros at 1 and 2 accurate in relative terms, where a shifted Stirling series cancels to its absolute error
_LGAMMA_NEAR_TWO = {
    dtypes.float32: (
        -0.00025056202146086636, 0.0005702512502829781, -0.0011874848136699278, 0.00287886868374075,
        -0.007385920884783578, 0.0205816254365885, -0.06735229409087408, 0.3224670180454995, 0.42278433509846713,
    ),
    dtypes.float64: (
        2.7475390051909663e-07, -5.811277768921246e-07, 9.242852225162277e-07, -1.9743106888421067e-06,
        4.3828545383846665e-06, -9.45628851510172e-06, 2.050601970174762e-05, -4.4923727564247656e-05,
        9.945761692157133e-05, -0.00022315497746292723, 0.0005096695196526673, -0.0011927539009983087,
        0.002890510330865901, -0.007385551028935545, 0.02058080842778338, -0.06735230105319563, 0.3224670334241132,
        0.42278433509846713,
    ),
}  # fmt: skip


def _stirling_series(dt: DType) -> tuple[float, ...]:
    # lgamma(y) - ((y - 1/2) log y - y + log(2 pi)/2) ~ sum B_2k / (2k (2k - 1) y^(2k - 1)): the coefficients, highest
    # power of 1/y**2 first
    n = _STIRLING_TERMS[dt]
    return tuple(float(_BERNOULLI[k - 1] / (2 * k * (2 * k - 1))) for k in reversed(range(1, n + 1)))


def _digamma_series(dt: DType) -> tuple[float, ...]:
    # digamma(y) - (log y - 1/(2y)) ~ -sum B_2k / (2k y^2k): the coefficients of 1/y**2 * S(1/y**2), highest first
    n = _DIGAMMA_TERMS[dt]
    return tuple(float(-_BERNOULLI[k - 1] / (2 * k)) for k in reversed(range(1, n + 1)))


def _rising(s: int, k: int) -> int:
    # s (s + 1) ... (s + k - 1)
    return math.prod(range(s, s + k))


def _finite(v: Fraction | int) -> float:
    # a float, held at +-float64's largest where it overflows (huge orders n: a coefficient times an underflowed power
    # stays 0 instead of NaN)
    try:
        return float(v)
    except OverflowError:
        return 1.7976931348623157e308 if v > 0 else -1.7976931348623157e308


@functools.cache
def _zeta_tail(n: int, dt: DType) -> tuple[int, tuple[float, ...]]:
    """Where the Hurwitz zeta tail of polygamma(n) starts (zeta(n + 1, y) for y at least this), and its Euler-Maclaurin
    coefficients c_j = B_2j / (2j)! (n + 1)_(2j - 1) of 1/y**(n + 2j), highest j first. The start is the first whole
    number from _ASYMPTOTIC_FROM on where the first term left out is below _ZETA_CUTOFF of the leading one."""
    s, terms = n + 1, _ZETA_TERMS[dt]
    start = _ASYMPTOTIC_FROM[dt]
    left_out = abs(_BERNOULLI[terms] / math.factorial(2 * terms + 2) * _rising(s, 2 * terms + 1)) * n
    while left_out > _ZETA_CUTOFF[dt] * start ** (2 * terms + 2):
        start += 1
    coefs = tuple(
        _finite(_BERNOULLI[j - 1] / math.factorial(2 * j) * _rising(s, 2 * j - 1)) for j in range(terms, 0, -1)
    )
    return start, coefs


@functools.cache
def _cot_derivative(n: int) -> tuple[int, tuple[float, ...]]:
    """d^n/dx^n cot(pi x) = pi^n P_n(cot(pi x)) with P_0(c) = c and P_(k+1)(c) = -(1 + c^2) P_k'(c): P_n is c^parity
    times a polynomial in c^2 whose coefficients share one sign (no cancellation, and +-inf at a pole, not NaN). The
    parity (0 or 1) and that polynomial's coefficients, highest first."""
    poly = [0, 1]
    for _ in range(n):
        derivative = [i * c for i, c in enumerate(poly)][1:]
        # -(1 + c^2) * derivative
        out = [0] * (len(derivative) + 2)
        for i, c in enumerate(derivative):
            out[i] -= c
            out[i + 2] -= c
        poly = out
    parity = (n + 1) % 2
    return parity, tuple(_finite(c) for c in reversed(poly[parity::2]))


def _power(v: Tensor, e: int) -> Tensor:
    # v ** e for a whole e >= 1, by squaring (exact integer powers: POW goes through exp and log)
    out: Tensor | None = None
    while True:
        if e & 1:
            out = v if out is None else out * v
        e >>= 1
        if not e:
            assert out is not None
            return out
        v = v * v


def _centered_fraction(x: Tensor) -> Tensor:
    # x minus the nearest whole number, in [-1/2, 1/2], exact (its sine and cotangent of pi r are those of pi x, without
    # the rounding of pi x): x - trunc(x) and a step of 1 from it are exact, where x - floor(x) rounds (-1e-30 - -1 is
    # 1). 0 for whole numbers (every float past 2**52 or 2**23), NaN for +-inf
    f = x - x.trunc()
    return (f > 0.5).where(f - 1, (f < -0.5).where(f + 1, f))


def _sin_pi(r: Tensor) -> Tensor:
    return (r * math.pi).sin()


def _cot_pi(r: Tensor) -> Tensor:
    # cot(pi r) for r in [-1/2, 1/2]: cos(pi r) as sin(pi (1/2 - |r|)), accurate in relative terms next to r = +-1/2
    return _sin_pi(0.5 - r.abs()) / _sin_pi(r)


def _shifted(y: Tensor, start: int, term: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor]:
    """y (>= 0, or NaN) moved up by whole steps m to y + m >= start (m = 0 where y is there already), and the sum of
    term(y + k) over the steps k < m: `start` guarded terms, a fixed graph whatever the values."""
    steps = (start - y).ceil().maximum(0)
    total = (steps > 0).where(term(y), 0)
    for k in range(1, start):
        total = total + (steps > k).where(term(y + k), 0)
    return y + steps, total


def _lgamma(x: Tensor) -> Tensor:
    """lgamma of a float32 or float64 x: z Q(z) near 2 (|z| <= 1/2), moved to x = r + z by the logarithm of the
    product of the steps between them (down to r > 1/2 - _ASYMPTOTIC_FROM: no reflection there, whose 1 - x rounds),
    Stirling's series from _ASYMPTOTIC_FROM on, and below both the reflection log(pi / |sin(pi x)|) - lgamma(1 - x).
    inf at the poles (a step's factor is 0, or sin(pi x) is), as torch."""
    dt = x.dtype
    start = _ASYMPTOTIC_FROM[dt]
    reflected = x < 0.5 - start
    y = reflected.where(1 - x, x)
    big = y >= start
    # (NaN stays NaN: it compares False)
    near = big.where(start, y)
    r = (near + 0.5).floor()
    z = near - r
    near_two = z * _horner(z, _LGAMMA_NEAR_TWO[dt])
    # Gamma(x) / Gamma(2 + z): (2 + z)(3 + z)...(r - 1 + z) for r >= 3; 1 / (1 + z) for r = 1; and for r <= 0
    # 1 / (z (1 + z) (z - 1)(z - 2)...(z + r)). The factors 1 + z go through log1p (no rounding of 1 + z)
    steps = None
    for i in range(1, start):
        down = (r < 1 - i).where(z - i, 1)
        factor = down if i == 1 else (r > i).where(z + i, 1) * down
        steps = factor if steps is None else steps * factor
    below_one = r <= 0
    # one logarithm for the three uses: of y (Stirling), of the product of the steps up, or of those down
    log = big.where(y, below_one.where((z * steps).abs(), steps)).log()
    small = near_two + below_one.where(-log, log) - (r <= 1).where(z.log1p(), 0)
    w = y.reciprocal()
    # (y - 1/2)(log y - 1) + log(2 pi)/2 - 1/2: no y log y - y, which is inf - inf at y = inf and overflows early
    stirling = (y - 0.5) * (log - 1) + (0.5 * math.log(2 * math.pi) - 0.5) + w * _horner(w * w, _stirling_series(dt))
    positive = big.where(stirling, small)
    r = _centered_fraction(x)
    # (a pole is inf whatever lgamma(1 - x) is: past 2**24 (2**53) every float is a whole number, and there
    # lgamma(1 - x) overflows too, inf - inf)
    reflection = (r == 0).where(math.inf, (math.pi / _sin_pi(r).abs()).log() - positive)
    return (x == -math.inf).where(math.inf, reflected.where(reflection, positive))


def _digamma(x: Tensor) -> Tensor:
    """digamma of a float32 or float64 x: the asymptotic series at y + m >= _ASYMPTOTIC_FROM less 1/(y + k) for the
    steps k < m, and the reflection digamma(1 - x) - pi cot(pi x) below 0. -inf at 0, inf at -0.0 (-1/x), NaN at the
    negative whole numbers and -inf, as torch."""
    dt = x.dtype
    reflected = x < 0
    y = reflected.where(1 - x, x)
    far, steps = _shifted(y, _ASYMPTOTIC_FROM[dt], lambda v: v.reciprocal())
    w = far.reciprocal()
    w2 = w * w
    positive = far.log() - 0.5 * w + w2 * _horner(w2, _digamma_series(dt)) - steps
    r = _centered_fraction(x)
    reflection = positive - math.pi * _cot_pi(r)
    # (a pole approached from either side with opposite signs: NaN, as torch)
    return (reflected & (r == 0)).where(math.nan, reflected.where(reflection, positive))


def _polygamma(n: int, x: Tensor) -> Tensor:
    """polygamma(n >= 1) of a float32 or float64 x: (-1)^(n+1) n! zeta(n + 1, y), the Hurwitz zeta function summed
    over the steps up to its tail's start and the Euler-Maclaurin series there; below 0 the reflection (-1)^n
    polygamma(n, 1 - x) - pi^(n+1) P_n(cot(pi x)) (see _cot_derivative). At the poles (x a whole number <= 0, and -inf
    for n >= 2) (-1)^(n+1) inf and at +inf for n >= 2 NaN, torch's answers (its zeta's)."""
    dt = x.dtype
    start, coefs = _zeta_tail(n, dt)
    reflected = x < 0
    y = reflected.where(1 - x, x)
    far, steps = _shifted(y, start, lambda v: _power(v.reciprocal(), n + 1))
    w = far.reciprocal()
    w2 = w * w
    zeta = steps + _power(w, n) * (1 / n + w * 0.5 + w2 * _horner(w2, coefs))
    # n! (inf where it overflows the dtype: torch's inf * zeta, NaN where zeta underflows)
    sign = (-1) ** (n + 1)
    factorial = math.factorial(n)
    positive = zeta * (sign * float(factorial)) if factorial < 2**1023 else zeta * (sign * math.inf)
    parity, cot_coefs = _cot_derivative(n)
    r = _centered_fraction(x)
    c = _cot_pi(r)
    p = _horner(c * c, cot_coefs)
    if parity:
        p = c * p
    reflection = (-1) ** n * positive - _finite(Fraction(math.pi) ** (n + 1)) * p
    out = reflected.where(reflection, positive)
    # (r is NaN at -inf)
    pole = (x <= 0) & (r == 0)
    if n >= 2:
        pole = pole | (x == -math.inf)
        out = (x == math.inf).where(math.nan, out)
    return pole.where(sign * math.inf, out)


# ---------------------------------------------------------------------------------------------------------------------
# Bessel functions of order 0 and 1

# |x| up to here takes the power series, beyond it the fitted polynomials in 8/|x|
_BESSEL_SERIES_UP_TO = 8.0
# terms of the power series sum (x^2/4)^k / (k! (k + order)!) that reach the dtype's precision at 8
_BESSEL_SERIES_TERMS = {dtypes.float32: 14, dtypes.float64: 22}
# sqrt(x) exp(-x) I_order(x) = G(8 / x) for x >= 8: G (highest power first) the Chebyshev interpolant on [0, 1],
# fitted offline with mpmath, of degree 6 (float32, relative error 2e-9) and 22 (float64, 2.4e-16)
_BESSEL_FAR = {
    (0, dtypes.float32): (
        6.931134885926942e-06, -9.171931680893514e-06, 2.056674713909079e-05, 5.336070136244024e-05,
        0.0004389431753544657, 0.006233431269764034, 0.39894228083080335,
    ),
    (0, dtypes.float64): (
        0.0004564239425667149, -0.004946732027962788, 0.02479851420055745, -0.07628739967702916, 0.16115242264504226,
        -0.247951980254461, 0.28775108003052513, -0.25746559955012743, 0.18009904215884992, -0.09930596955619408,
        0.0433264116012903, -0.014954338242435741, 0.0040669758158161755, -0.0008642913780102672,
        0.00014185862063324504, -1.7257358411381738e-05, 2.4790402883167792e-06, 2.660781503256634e-06,
        1.0927918056261565e-05, 5.706903014318292e-05, 0.00043829108125822356, 0.006233473131262672,
        0.3989422804014327,
    ),
    (1, dtypes.float32): (
        -7.815999018202313e-06, 9.958223061065892e-06, -2.4812993409022678e-05, -7.575615781829992e-05,
        -0.0007312132306201776, -0.018700372652298087, 0.39894227992200576,
    ),
    (1, dtypes.float64): (
        -0.00047516802365472427, 0.0051583182483779235, -0.02590447705482271, 0.0798382871072217,
        -0.16898758494287802, 0.2605523239447968, -0.3030414232673048, 0.2717736829616532, -0.19056544723505672,
        0.10533880645053749, -0.046075925137500966, 0.015944639489659202, -0.004347608236147105,
        0.0009263122476636002, -0.00015242942065105608, 1.856140921337216e-05, -2.765135469077418e-06,
        -3.266723732408937e-06, -1.4049264663890154e-05, -7.98966802825771e-05, -0.0007304851344339821,
        -0.018700419393806605, 0.39894228040143265,
    ),
}  # fmt: skip


def _bessel_of_abs(a: Tensor, order: int) -> Tensor:
    """I_order(a) for a >= 0 (float32 or float64), order 0 or 1: the power series up to 8 (positive terms: no
    cancellation), beyond it exp(a/2) * (exp(a/2) * G(8/a) / sqrt(a)), finite up to the dtype's largest value (one
    exp(a) would overflow first). At inf that is inf * (inf / inf), NaN, torch's answer (its exp(x) * P(32/x - 2) /
    sqrt(x))."""
    dt = a.dtype
    t = a * a * 0.25
    terms = _BESSEL_SERIES_TERMS[dt]
    series = _horner(t, [1 / (math.factorial(k) * math.factorial(k + order)) for k in reversed(range(terms))])
    if order:
        series = series * (a * 0.5)
    half = (a * 0.5).exp()
    far = half * (half * _horner(_BESSEL_SERIES_UP_TO / a, _BESSEL_FAR[(order, dt)]) / a.sqrt())
    return (a <= _BESSEL_SERIES_UP_TO).where(series, far)


def _i0(x: Tensor) -> Tensor:
    return _with_derivative_of(_bessel_of_abs(x.abs(), 0), x, _i1)


def _i1(x: Tensor) -> Tensor:
    # odd; its derivative is I0(x) - I1(x) / x, 1/2 at 0
    value = _bessel_of_abs(x.abs(), 1)
    return _with_derivative_of((x < 0).where(-value, value), x, _i1_derivative)


def _i1_derivative(x: Tensor) -> Tensor:
    # (x held off 0 in the other branch: its 1/x there would make the next derivative NaN, where torch's is 0)
    zero = x == 0
    safe = zero.where(1.0, x)
    return zero.where(0.5, _i0(safe) - _i1(safe) / safe)


# ---------------------------------------------------------------------------------------------------------------------
# the bits of floats: frexp, ldexp, nextafter

# (the integer dtype of the same width, mantissa bits, exponent bias, smallest normal) of the dtypes handled in bits;
# half floats go through float32, which holds each of their values (subnormals too) exactly
_FLOAT_BITS = {
    dtypes.float32: (dtypes.int32, 23, 127, 2.0**-126),
    dtypes.float64: (dtypes.int64, 52, 1023, 2.0**-1022),
}
_SAME_WIDTH_INT = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}
# the smallest subnormal of each float dtype: nextafter's step from zero
_SMALLEST = {
    dtypes.float16: 2.0**-24,
    dtypes.bfloat16: 2.0**-133,
    dtypes.float32: 2.0**-149,
    dtypes.float64: 2.0**-1074,
}


def _frexp_bits(x: Tensor) -> tuple[Tensor, Tensor]:
    # frexp of a float32 or float64 x: (mantissa in x's dtype, exponent in the same-width int dtype), read from the bits
    # (a subnormal scaled up by 2**mantissa_bits first, exactly)
    int_dt, bits_n, bias, smallest_normal = _FLOAT_BITS[x.dtype]
    exp_mask = 2 * bias + 1
    subnormal = x.abs() < smallest_normal
    bits = subnormal.where(x * 2.0**bits_n, x).bitcast(int_dt)
    exponent = ((bits >> bits_n) & exp_mask) - (bias - 1) - subnormal.where(bits_n, 0).cast(int_dt)
    # the exponent field replaced by that of [0.5, 1), the sign and mantissa bits kept
    mantissa = ((bits & ~(exp_mask << bits_n)) | ((bias - 1) << bits_n)).bitcast(x.dtype)
    # 0, +-inf and NaN are their own mantissa, with exponent 0 (C's frexp)
    kept = (x == 0) | x.isinf() | x.isnan()
    return kept.where(x, mantissa), kept.where(0, exponent)


def _power_of_two(e: Tensor, dt: DType) -> Tensor:
    # 2**e for whole e (int32) in the dtype's normal range, built from its bits
    int_dt, bits_n, bias, _ = _FLOAT_BITS[dt]
    return ((e.cast(int_dt) + bias) << bits_n).bitcast(dt)


def _ldexp_exact(x: Tensor, k: Tensor) -> Tensor:
    """x * 2**k for a float32 or float64 x and whole k (int32): C's ldexp, rounded once (no overflow on the way:
    1e-30 * 2**130 is 1.36e9). x = m * 2**e; m * 2**(e + k) as two products by powers of two, the first exact (its
    result normal), the second the only rounding; beyond twice the exponent range the result is 0 or inf anyway."""
    dt = x.dtype
    limit = _FLOAT_BITS[dt][2] - 1
    m, e = _frexp_bits(x)
    total = (e.cast(dtypes.int32) + k.clip(-4 * limit, 4 * limit)).clip(-2 * limit, 2 * limit)
    second = (total > limit).where(limit, (total < -limit).where(-limit, 0))
    return m * _power_of_two(total - second, dt) * _power_of_two(second, dt)


# ---------------------------------------------------------------------------------------------------------------------
# gcd and lcm


@functools.cache
def _euclid_steps(dt: DType) -> int:
    """The most steps of torch's loop (a, b) -> (b % a, a) until a is 0 that a dtype's values take: consecutive
    Fibonacci numbers take the most (Lame), one step per Fibonacci number (1, 2, 3, 5, ...) up to the largest
    magnitude, the first step a swap (91 for int64; the tests try every 8-bit pair)."""
    largest = 2 ** (dt.itemsize * 8) - 1 if dtypes.is_unsigned(dt) else 2 ** (dt.itemsize * 8 - 1)
    a, b, count = 1, 2, 1
    while b <= largest:
        a, b, count = b, a + b, count + 1
    return count


def _integer_operands(self: Tensor, other: Any, op: str) -> tuple[Tensor, Tensor]:
    if not isinstance(other, Tensor):
        raise TypeError(f"{op}: other must be a Tensor, got {type(other).__name__}")
    a, b = self._broadcasted(other, False, op)
    if not dtypes.is_int(a.dtype):
        raise UnsupportedDTypeError(
            f"{op}: not implemented for {a.dtype} (operands {self.dtype} and {other.dtype}), as PyTorch; it takes "
            "integer tensors"
        )
    return a, b


def _gcd(a: Tensor, b: Tensor) -> Tensor:
    # torch's Euclid on |a| and |b| (C's % and abs: |INT_MIN| stays INT_MIN), a fixed number of guarded steps
    a, b = a.abs(), b.abs()
    for _ in range(_euclid_steps(a.dtype)):
        done = a == 0
        a, b = b.fmod(done.where(1, a)), done.where(b, a)
    return b


# ---------------------------------------------------------------------------------------------------------------------
# the regularized incomplete gamma functions: igamma (P, the lower) and igammac (Q, the upper)

# Temme's uniform expansion (DLMF 8.12): Q(a, x) = erfc(eta sqrt(a / 2)) / 2 + exp(-a eta^2 / 2) / sqrt(2 pi a) *
# sum_k c_k(eta) a^-k, with eta^2 / 2 = mu - log(1 + mu), mu = x / a - 1 and eta of mu's sign. The rows are c_0 ... c_7
# as Taylor polynomials in eta (highest power first), computed offline in exact rationals from DLMF 8.12.9-8.12.12
# (the reverted series of mu(eta) and Stirling's coefficients of Gamma*): 4e-13 relative for a >= 20, |mu| < 0.3
_TEMME = (
    (
        -2.5514193994946248e-11,
        9.14769958223679e-10,
        -4.382036018453353e-09,
        1.0261809784240309e-08,
        6.707853543401498e-09,
        -1.7665952736826078e-07,
        8.296711340953087e-07,
        -1.85406221071516e-06,
        -2.185448510679992e-06,
        3.919263178522438e-05,
        -0.0001787551440329218,
        0.0003527336860670194,
        0.0011574074074074073,
        -0.014814814814814815,
        0.08333333333333333,
        -0.3333333333333333,
    ),
    (
        4.162792991842583e-10,
        -1.0091543710600413e-09,
        -1.7543241719747647e-11,
        1.1951628599778148e-08,
        -5.752545603517705e-08,
        1.378633446915721e-07,
        4.647127802807434e-09,
        -1.6120900894563446e-06,
        7.64916091608111e-06,
        -1.8098550334489977e-05,
        -4.018775720164609e-07,
        0.00020576131687242798,
        -0.0009902263374485596,
        0.0026455026455026454,
        -0.003472222222222222,
        -0.001851851851851852,
    ),
    (
        9.428356159014678e-13,
        -1.3670488396617114e-09,
        6.228974084922022e-09,
        -1.409252991086752e-08,
        -2.0477098421990866e-10,
        1.4280614206064242e-07,
        -6.298992138380055e-07,
        1.3721957309062934e-06,
        3.423578734096138e-08,
        -1.2760635188618728e-05,
        5.2923448829120125e-05,
        -0.0001073665322636516,
        2.0093878600823047e-06,
        0.0007716049382716049,
        -0.0026813271604938273,
        0.004133597883597883,
    ),
    (
        -9.460496661855133e-10,
        2.0620131815488797e-09,
        2.3928620439808118e-12,
        -1.9111168485973655e-08,
        8.099464905388083e-08,
        -1.6958404091930278e-07,
        -2.7861080291528143e-11,
        1.4230900732435883e-06,
        -5.6749528269915965e-06,
        1.1082654115347302e-05,
        -2.396505113867297e-07,
        -7.561801671883977e-05,
        0.00026772063206283885,
        -0.0004691894943952557,
        0.00022947209362139917,
        0.0006494341563786008,
    ),
    (
        -2.3024517174528067e-13,
        3.4463580499464896e-09,
        -1.4189739437803219e-08,
        2.8865829742708783e-08,
        2.956794137544049e-11,
        -2.292934834000805e-07,
        8.907507532205309e-07,
        -1.6954149536558305e-06,
        2.507497226237533e-10,
        1.1375726970678419e-05,
        -3.968365047179435e-05,
        6.641498215465122e-05,
        -1.4638452578843418e-06,
        -0.0002990724803031902,
        0.0007840392217200666,
        -0.0008618882909167117,
    ),
    (
        3.162417628774568e-09,
        -6.306194500013523e-09,
        -1.7989466721743514e-14,
        4.8240967037894184e-08,
        -1.8447187191171344e-07,
        3.4652846491085265e-07,
        -3.252473551298454e-10,
        -2.291481176508095e-06,
        8.018470256334202e-06,
        -1.3594048189768693e-05,
        1.419062920643967e-07,
        6.797780477937208e-05,
        -0.00019932570516188847,
        0.0002772753244959392,
        -6.972813758365857e-05,
        -0.00033679855336635813,
    ),
    (
        8.649648858010293e-14,
        -1.2545415020710383e-08,
        4.7435958880408125e-08,
        -8.828600746330484e-08,
        2.338630673826657e-13,
        5.788792863149004e-07,
        -2.0291327396058603e-06,
        3.465155368803609e-06,
        -3.0796134506033047e-09,
        -1.8329116582843375e-05,
        5.61168275310625e-05,
        -8.153969367561969e-05,
        7.902353232660328e-07,
        0.0002708782096718045,
        -0.0005921664373536939,
        0.0005313079364639922,
    ),
    (
        -1.4578352908731272e-08,
        2.695423606288966e-08,
        -1.297447328701544e-12,
        -1.7562973359060463e-07,
        6.166714376110408e-07,
        -1.0595367014026043e-06,
        4.93875893393627e-10,
        5.7876949497350525e-06,
        -1.8263488805711332e-05,
        2.7744451511563645e-05,
        -1.2741009095484485e-07,
        -0.00010976582244684731,
        0.0002812695154763237,
        -0.00033493161081142234,
        5.171790908260592e-05,
        0.00034436760689237765,
    ),
)
# a from here on, with |mu| below _TEMME_MU, takes Temme's expansion
_TEMME_FROM, _TEMME_MU = 20.0, 0.3
# elsewhere x <= a (or x <= 1) takes P's power series and x above both Legendre's continued fraction of Q, with a fixed
# number of terms (levels) that reaches float64's precision over the whole rest of the plane: the series' ratio
# x / (a + n) is below 0.7 for a >= 20 (100 terms), and a < 20 needs 60 terms and 80 levels at worst (x just above a)
_IGAMMA_SERIES_TERMS, _IGAMMA_FRACTION_LEVELS = 100, 80
# 1/3, 1/5, ..., 1/29 (highest power first): the series of (atanh(t) - t) / t^3 in t^2
_ATANH_TAIL = tuple(1 / (2 * k + 1) for k in range(14, 0, -1))


def _mu_minus_log1p(mu: Tensor, ratio: Tensor) -> Tensor:
    """mu - log(1 + mu) (>= 0), accurate in relative terms next to mu = 0: with t = mu / (2 + mu), log(1 + mu) =
    2 atanh(t) and mu = 2t / (1 - t), so it is 2 t^2 / (1 - t) - 2 (atanh(t) - t): no cancellation for |mu| < 1/2."""
    t = mu / (2 + mu)
    t2 = t * t
    near = 2 * t2 / (1 - t) - 2 * t * t2 * _horner(t2, _ATANH_TAIL)
    # (farther out the log of the ratio 1 + mu itself: 1 + mu rounded from mu loses its digits next to mu = -1, x << a)
    return (mu.abs() < 0.5).where(near, mu - ratio.log())


def _incomplete_gamma(a: Tensor, x: Tensor, upper: bool) -> Tensor:
    """P(a, x) (or Q with `upper`) of float64 a and x of one shape: Temme's expansion, P's power series or Q's
    continued fraction (see above) computed for every element and the one for its region selected, then torch's
    answers at the edges (NaN for a < 0 or x < 0, a = 0, a = inf, x = 0, x = inf)."""
    mu = (x - a) / a
    m = _mu_minus_log1p(mu, x / a)
    # x^a e^-x / Gamma(a): for a >= 10 as sqrt(a / 2 pi) exp(-a m) / Gamma*(a) (Gamma* by Stirling's series), whose
    # exponent has no a log x - x - lgamma(a) to cancel (that loses a log x ulp)
    w = a.reciprocal()
    stirling = (a / (2 * math.pi)).sqrt() * (-a * m - w * _horner(w * w, _stirling_series(dtypes.float64))).exp()
    prefactor = (a >= 10).where(stirling, (a * x.log() - x - _lgamma(a)).exp())
    # P = x^a e^-x / Gamma(a + 1) * (1 + x / (a + 1) (1 + x / (a + 2) (1 + ...))), summed from the last term back
    series = x.ones_like()
    for n in range(_IGAMMA_SERIES_TERMS, 0, -1):
        series = 1 + series * x / (a + n)
    lower_series = prefactor / a * series
    # Q = x^a e^-x / Gamma(a) / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a - ...))), from the end
    tail = x.zeros_like()
    for n in range(_IGAMMA_FRACTION_LEVELS, 0, -1):
        tail = n * (n - a) / (x + (2 * n + 1) - a - tail)
    upper_fraction = prefactor / (x + 1 - a - tail)
    eta = (mu < 0).where(-(2 * m).sqrt(), (2 * m).sqrt())
    total = None
    for row in reversed(_TEMME):
        c = _horner(eta, row)
        total = c if total is None else total * w + c
    assert total is not None
    remainder = (-a * m).exp() / (2 * math.pi * a).sqrt() * total
    scaled = eta * (a * 0.5).sqrt()
    temme = (a >= _TEMME_FROM) & (mu.abs() < _TEMME_MU)
    fraction = (x > a) & (x > 1)
    if upper:
        out = temme.where((scaled.erfc() * 0.5) + remainder, fraction.where(upper_fraction, 1 - lower_series))
    else:
        out = temme.where(((-scaled).erfc() * 0.5) - remainder, fraction.where(1 - upper_fraction, lower_series))
    one, zero = (0.0, 1.0) if upper else (1.0, 0.0)
    out = (x == math.inf).where(one, out)
    out = (a == math.inf).where((x == math.inf).where(math.nan, zero), out)
    out = (x == 0).where(zero, out)
    out = (a == 0).where((x > 0).where(one, math.nan), out)
    return ((x < 0) | (a < 0) | a.isnan() | x.isnan()).where(math.nan, out)


def _incomplete_gamma_method(self: Tensor, other: Tensor, upper: bool) -> Tensor:
    op = "igammac" if upper else "igamma"
    if not isinstance(other, Tensor):
        raise TypeError(f"{op}: other must be a Tensor (x), got {type(other).__name__}, as torch")
    a, x = self._broadcasted(other, False, op)
    dt = a.dtype
    if not dtypes.is_float(dt):
        raise UnsupportedDTypeError(
            f"{op}: not implemented for {dt} (operands {self.dtype} and {other.dtype}), as PyTorch; it takes float "
            "tensors (an int operand beside a float one is promoted)"
        )
    value = _incomplete_gamma(a.cast(dtypes.float64), x.cast(dtypes.float64), upper).cast(dt)
    a_uop, x_uop = a.uop, x.uop

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
        if len(wanted) > 1 and wanted[1]:
            raise NotImplementedError(f"the derivative of {op} with respect to its input (a, self) is not implemented")
        a_, x_ = Tensor(a_uop), Tensor(x_uop)
        # d P / dx = x^(a-1) e^-x / Gamma(a), torch's formula (NaN at x = 0 for a = 1, as torch's)
        d = ((a_ - 1) * x_.log() - x_ - a_.lgamma()).exp()
        return ((-d if upper else d).cast(g.dtype).uop * g, None)[: len(wanted)]

    set_gradient(value.uop, (x_uop, a_uop) if a_uop is not x_uop else (x_uop,), rule)
    return value


class SpecialMixin:
    __slots__ = ()

    # ------------------------------------------------------------------------------------------------------------
    # the gamma family

    @replayed
    @in_float32
    def lgamma(self) -> Tensor:
        """log|Gamma(x)|, as torch.lgamma: inf at 0 and the negative whole numbers (and +-inf); ints and bools promote
        to float32. Its zeros at 1 and 2 keep their relative accuracy (a polynomial in x - 2); its negative zeros
        (-2.457, ...) an absolute one, of a few ulp of the terms (1e-8 in float32). The gradient is digamma(x).

        >>> round(Tensor([0.5]).lgamma().item(), 6)
        0.572365
        """
        x = self._float()
        return _with_derivative_of(_lgamma(x), x, lambda v: v.digamma())

    @replayed
    @in_float32
    def digamma(self) -> Tensor:
        """The logarithmic derivative of Gamma, as torch.digamma: -inf at 0, inf at -0.0, NaN at the negative whole
        numbers; ints and bools promote to float32. Accurate in absolute terms (a few ulp of digamma(10)) next to its
        zeros (1.4616 and one in each negative interval), relative elsewhere. The gradient is polygamma(1, x).

        >>> round(Tensor([1.0]).digamma().item(), 6)
        -0.577216
        """
        x = self._float()
        return _with_derivative_of(_digamma(x), x, lambda v: v.polygamma(1))

    def polygamma(self, n: int) -> Tensor:
        """The n-th derivative of digamma at x (`x.polygamma(n)`, torch.polygamma(n, x), and so
        `Tensor.polygamma(n, x)`); n = 0 is digamma. Ints and bools promote to float32. At the poles (whole numbers
        <= 0) (-1)^(n+1) inf, and for n >= 2 also at -inf, with NaN at +inf, as torch (its zeta's answers). The
        gradient is polygamma(n + 1, x).

        >>> round(Tensor([1.0]).polygamma(1).item(), 6)
        1.644934
        >>> round(Tensor.polygamma(1, Tensor([1.0])).item(), 6)
        1.644934
        """
        if not isinstance(self, SpecialMixin) and isinstance(n, SpecialMixin):
            # torch.polygamma(n, input): the order comes first
            return n.polygamma(self)
        return self._polygamma_of_order(n)

    @replayed
    @in_float32
    def _polygamma_of_order(self, n: int) -> Tensor:
        """`polygamma` with the tensor first (x.polygamma(n)): n checked, digamma for n = 0."""
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"polygamma: n must be an int (the order of the derivative), got {type(n).__name__}")
        if n < 0:
            raise ArgumentError(f"polygamma: n must be >= 0 (the order of digamma's derivative), got {n}")
        if n == 0:
            return self.digamma()
        x = self._float()
        return _with_derivative_of(_polygamma(n, x), x, lambda v: v.polygamma(n + 1))

    def mvlgamma(self, p: int) -> Tensor:
        """The multivariate log-gamma function of dimension p: sum of lgamma(x - j/2) for j < p, plus
        p (p - 1) / 4 log(pi), as torch.mvlgamma (and torch.special.multigammaln); ints promote to float32, bools
        are refused. No check of x > (p - 1)/2 (PyTorch 2's neither: inf at the poles, finite between them). The
        gradient is the sum of the digammas.

        >>> round(Tensor([2.5]).mvlgamma(2).item(), 6)
        0.857048
        """
        if isinstance(p, bool) or not isinstance(p, int):
            raise TypeError(f"mvlgamma: p must be an int (the dimension), got {type(p).__name__}")
        if p < 1:
            raise ArgumentError(f"mvlgamma: p must be >= 1 (the dimension), got {p}")
        if self.dtype == dtypes.bool:
            raise DTypeError("mvlgamma: not defined for bool tensors (as PyTorch); cast to a number dtype first")
        x = self._float()
        # x - (p-1)/2, ..., x - 1/2, x along a new last axis, as torch's arange: one lgamma for all of them
        offsets = Tensor.arange(p, device=x.device, dtype=x.dtype) * 0.5 - (p - 1) * 0.5
        return (x.unsqueeze(-1) + offsets).lgamma().sum(-1) + p * (p - 1) / 4 * math.log(math.pi)

    # ------------------------------------------------------------------------------------------------------------
    # the incomplete gamma functions

    def igamma(self, other: Tensor) -> Tensor:
        """The regularized lower incomplete gamma function P(a, x) with a = self and x = other (torch.igamma,
        torch.special.gammainc), broadcast and promoted; floats only (ints beside a float promote, as torch).
        Computed in float64 (Temme's uniform expansion near x = a for a >= 20, else P's power series or Q's continued
        fraction, a fixed graph) and rounded to the dtype: ~1e-13 relative in float64. torch's answers at the edges:
        NaN for a < 0 or x < 0, 1 for a = 0 < x, 0 for x = 0 or a = inf. The gradient with respect to x is
        x^(a-1) e^-x / Gamma(a); with respect to a there is none (backward raises NotImplementedError, as torch).

        >>> round(Tensor([2.0]).igamma(Tensor([1.0])).item(), 6)
        0.264241
        """
        return _incomplete_gamma_method(self, other, False)

    def igammac(self, other: Tensor) -> Tensor:
        """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x) (torch.igammac,
        torch.special.gammaincc), computed for itself (accurate where it is tiny): see `igamma`.

        >>> round(Tensor([2.0]).igammac(Tensor([1.0])).item(), 6)
        0.735759
        """
        return _incomplete_gamma_method(self, other, True)

    # ------------------------------------------------------------------------------------------------------------
    # Bessel

    @replayed
    @in_float32
    def i0(self) -> Tensor:
        """The modified Bessel function of the first kind of order 0, as torch.i0: even, 1 at 0; ints and bools
        promote to float32. A power series up to |x| = 8, beyond it exp(|x|) / sqrt(|x|) times a fitted polynomial in
        8/|x| (a few ulp). Finite up to the dtype's largest value (torch's float32 overflows from 88.7 on, where
        exp(x) does); NaN at +-inf, as torch. The gradient is I1(x).

        >>> round(Tensor([1.0]).i0().item(), 6)
        1.266066
        """
        return _i0(self._float())

    # ------------------------------------------------------------------------------------------------------------
    # floating-point bits

    def frexp(self) -> Frexp:
        """(mantissa, exponent) with x = mantissa * 2**exponent, |mantissa| in [0.5, 1) (subnormals too), as
        torch.frexp: the mantissa in x's float dtype, the exponent int32; 0, +-inf and NaN give (x, 0). Floats only,
        as torch. The mantissa's gradient is 2**-exponent (torch's computes 2**exponent in float32: 0 for a
        float64 beyond 2**128).

        >>> m, e = Tensor([8.0, -0.75, 0.0]).frexp()
        >>> m.tolist(), e.tolist()
        ([0.5, -0.75, 0.0], [4, 0, 0])
        """
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"frexp: needs a float tensor, got {self.dtype} (as PyTorch); cast to a float dtype first")
        x = self.float() if self.dtype in dtypes.halves else self
        mantissa, exponent = _frexp_bits(x)
        exponent = exponent.cast(dtypes.int32)
        mantissa = _with_derivative(mantissa, x, (-exponent.cast(x.dtype)).exp2())
        return Frexp(mantissa.cast(self.dtype), exponent)

    def ldexp(self, other: Tensor) -> Tensor:
        """self * 2**other, broadcast, as torch.ldexp: in the operands' promoted dtype, float32 where both are
        integers. An integer exponent scales exactly, rounding once (C's ldexp: 1e-30 * 2**130 is finite; the exponent
        is read as a C int, as torch's); a float one multiplies by 2**other (which may overflow first, as torch's).
        Bool exponents are refused, as torch. The gradients are 2**other (torch's is 0 for negative integer
        exponents, a power of integers), and self * 2**other * log(2) for a float exponent.

        >>> Tensor([1.0, 3.0]).ldexp(Tensor([3, -1])).tolist()
        [8.0, 1.5]
        """
        if not isinstance(other, Tensor):
            raise TypeError(f"ldexp: other must be a Tensor, got {type(other).__name__}")
        if other.dtype == dtypes.bool:
            raise UnsupportedDTypeError(
                "ldexp: not implemented for a bool exponent (as PyTorch); cast it to an integer dtype"
            )
        a, b = self._broadcasted(other, False, "ldexp")
        dt = a.dtype if dtypes.is_float(a.dtype) else dtypes.default_float
        x = a.cast(dt)
        if dtypes.is_float(other.dtype):
            return x * b.cast(dt).exp2()
        k = other._broadcast_to(x.shape).cast(dtypes.int32)
        wide = x.float() if dt in dtypes.halves else x
        out = _ldexp_exact(wide, k).cast(dt)
        return _with_derivative(out, x, k.cast(dt).exp2())

    def nextafter(self, other: Tensor) -> Tensor:
        """The next float after self toward other, as torch.nextafter: other where they are equal (so +-0 keeps
        other's sign), the smallest subnormal with other's sign from 0, NaN where either is NaN. Broadcast and
        promoted; floats only (as torch), every float dtype. Computed on the bits. The gradient is torch's: 1 for
        self, 0 for other.

        >>> Tensor([1.0]).nextafter(Tensor([2.0])).item() - 1.0
        1.1920928955078125e-07
        """
        if not isinstance(other, Tensor):
            raise TypeError(f"nextafter: other must be a Tensor, got {type(other).__name__}")
        a, b = self._broadcasted(other, False, "nextafter")
        dt = a.dtype
        if not dtypes.is_float(dt):
            raise UnsupportedDTypeError(
                f"nextafter: not implemented for {dt} (operands {self.dtype} and {other.dtype}), as PyTorch; it "
                "takes float tensors"
            )
        bits = a.bitcast(_SAME_WIDTH_INT[dt.itemsize])
        # a's bits read as a signed int grow with its magnitude: +1 steps away from 0, -1 toward it
        away = (b > a) == (a > 0)
        moved = away.where(bits + 1, bits - 1).bitcast(dt)
        tiny = a.full_like(_SMALLEST[dt])
        out = (a == 0).where((b < 0).where(-tiny, tiny), moved)
        out = (a == b).where(b, out)
        out = (a.isnan() | b.isnan()).where(a + b, out)
        if a.uop is b.uop:
            return _with_derivative(out, a, a.ones_like())
        return _with_derivative(out, a, a.ones_like(), (b, b.zeros_like()))

    # ------------------------------------------------------------------------------------------------------------
    # integers

    def gcd(self, other: Tensor) -> Tensor:
        """The greatest common divisor, >= 0 (gcd(0, 0) = 0; |INT_MIN| wraps to itself, as torch's C abs), broadcast
        and promoted, as torch.gcd: integer tensors only (floats and bools raise NotImplementedError, as torch). A
        fixed number of guarded Euclid steps, enough for the dtype (91 for int64).

        >>> Tensor([12, -12, 0, 7]).gcd(Tensor([18, 18, 0, 0])).tolist()
        [6, 6, 0, 7]
        """
        return _gcd(*_integer_operands(self, other, "gcd"))

    def lcm(self, other: Tensor) -> Tensor:
        """The least common multiple, |self / gcd * other| (0 where either is 0), broadcast and promoted, as torch.lcm:
        integer tensors only; overflow wraps as torch's C arithmetic (int8 and int16 in int, then cast).

        >>> Tensor([4, -6, 0]).lcm(Tensor([6, 4, 5])).tolist()
        [12, 12, 0]
        """
        a, b = _integer_operands(self, other, "lcm")
        g = _gcd(a, b)
        zero = g == 0
        # (C promotes int8 and int16 operands to int: the product and abs happen there, the cast back wraps)
        wide = dtypes.int32 if a.dtype.itemsize < 4 else a.dtype
        out = (a.cast(wide).idiv(zero.where(1, g).cast(wide)) * b.cast(wide)).abs().cast(a.dtype)
        return zero.where(0, out)


# PyTorch's in-place variants, each its out-of-place method written into the tensor
for _name in (
    "lgamma",
    "digamma",
    "polygamma",
    "mvlgamma",
    "i0",
    "ldexp",
    "nextafter",
    "gcd",
    "lcm",
    "igamma",
    "igammac",
):
    setattr(SpecialMixin, f"{_name}_", _in_place_method(_name))
