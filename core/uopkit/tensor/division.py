"""Division helpers of the elementwise ops (`tensor/elementwise.py`): the exact float `//`, `%` and `fmod` (quotient,
remainder and their gradients, as PyTorch's at every value) and the refusal of an integer division by the number 0."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import dtypes
from uopkit.tensor.support import ArgumentError, _has_float64, _with_derivative
from uopkit.uop.ops import Ops

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


class ZeroDivisorError(ArgumentError, ZeroDivisionError):
    """An integer (or bool) tensor divided by the number 0 (`//`, `%`, `fmod`, `div` with a rounding mode): PyTorch's
    CPU raises a RuntimeError there, so this is one (and an ArgumentError), and Python's ZeroDivisionError too."""


def refuse_zero_divisor(a: Tensor, x: Any, reverse: bool, op: str) -> None:
    """Raise `ZeroDivisorError` where the integer tensor `a` (the dividend: `reverse` False) is divided by the Python
    int (or bool) `x` and `x` is 0, unless `a` is empty, as PyTorch's CPU kernels refuse it. Only a number divisor is
    checked here: a tensor's values would have to be read back (see docs/semantics.md, "Indices and tie rules")."""
    if reverse or not isinstance(x, (int, np.integer)) or x != 0 or a.numel() == 0:
        return
    raise ZeroDivisorError(
        f"{op}: integer division by zero ({a.dtype} tensor of shape {a.shape} divided by the number {int(x)}); divide "
        "by a nonzero number, or cast the tensor to a float dtype to get inf/nan instead"
    )


def remainder_against_divisor(r: Tensor, b: Tensor, x: Any, reverse: bool) -> Tensor | None:
    """Where an integer division's truncated remainder `r` (by `b`) is nonzero with the sign opposite the divisor's:
    where floor division steps its quotient down and `%` adds `b`. A number divisor `x` (not `reverse`) has a known
    sign, so this is one compare instead of five ops (an int's `// 7` or `% table_size` in a hash loop); None where
    it is never so (an unsigned dividend by a positive number)."""
    if not reverse and isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        if x > 0:
            return None if dtypes.is_unsigned(r.dtype) else r < 0
        return r > 0
    return (r != 0) & ((r < 0) != (b < 0))


def _truncated_division(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """trunc(a / b) and the exact a - trunc(a / b) * b (C fmod: the dividend's sign, -0.0 for a zero remainder of a
    negative a) of float32 or float64 tensors (broadcast). Exact while |a / b| < 2**48 (float32) or 2**106 (float64)."""
    q = a._alu(Ops.FDIV, b).trunc()
    r = _exact_remainder(a, b, q)
    # past 2**24 (float32) the quotient is rounded, so r can be many b's from the remainder (2**40 % 3.0): a second
    # pass brings it within one b (exact while |a / b| < 2**48; 2**106 for float64). Below, it subtracts nothing
    q_more = r._alu(Ops.FDIV, b).trunc()
    # (only a finite, nonzero step moves the quotient: x / 0 and x / inf keep inf and 0, and -0.0 // 1 stays -0.0)
    q = (q_more.isfinite() & (q_more != 0)).where(q + q_more, q)
    r = _exact_remainder(r, b, q_more)
    # a / b rounded (in magnitude) onto an integer the true quotient doesn't reach (238.74632 / -1.0182e-4): the
    # remainder then has the wrong sign; one step toward zero mends both
    past = (r != 0) & ((r < 0) != (a < 0)) & r.isfinite()
    negative = (a < 0) != (b < 0)
    q = past.where(negative.where(q + 1, q - 1), q)
    r = past.where(negative.where(r - b, r + b), r)
    if a.dtype == dtypes.float32 and _has_float64(a.device):
        # (q as above: torch's `//` rounds its quotient too; only the remainder is exact at every quotient)
        return q, _fmod_in_float64(a, b)
    # a * 0 is the dividend's zero (for a finite a); a finite a fmod an infinite b is a (a - 0 * inf is nan)
    r = (r == 0).where(a * 0, r)
    return q, (b.isinf() & a.isfinite()).where(a, r)


# float64's bits: the sign, the exponent field, the fraction, and one (2**0)
_F64_SIGN, _F64_EXPONENT = 0x8000000000000000, 0x7FF0000000000000
_F64_FRACTION, _F64_ONE = 0x000FFFFFFFFFFFFF, 0x3FF0000000000000


def _fmod_steps(b: Tensor) -> list[int]:
    """The exponents e of fmod's divisors m * 2**e (`_fmod_in_float64`), largest first, each step's quotient below
    2**29: |x| / 2**ey is below 2**(128 - ey), ey (|y|'s exponent) at least -149, or known for a Python number y."""
    u, top = b.uop, 128 + 149
    while u.op is Ops.EXPAND or u.op is Ops.RESHAPE:
        u = u.src[0]
    if u.op is Ops.CONST and math.isfinite(u.arg) and u.arg != 0:
        top = 128 - (math.frexp(u.arg)[1] - 1)
    return [*range(top - 29, 0, -28), 0]


def _fmod_in_float64(a: Tensor, b: Tensor) -> Tensor:
    """fmod of float32 tensors (broadcast), exact at every quotient (3e30 fmod 7 is 6, as C's fmod), computed in
    float64, with C's signs, zeros, infinities and NaNs. With |y| = m * 2**ey (m in [1, 2)), x fmod y is
    ((|x| / 2**ey) fmod m) * 2**ey with x's sign, all exact in float64 (|x| / 2**ey is below 2**277). The reduced x
    is taken down by the divisors m * 2**e of `_fmod_steps` (x fmod (m * 2**e) fmod m is x fmod m), 28 bits a step:
    q = trunc(r * (1 / m) / 2**e) is the true quotient or one off (1 / m is rounded), below 2**29, so q * m * 2**e
    (29 + 24 bits) and r - q * m * 2**e (a multiple of the divisor's last bit, below twice it) are exact and |r| stays
    below (1 + 2**-22) times the divisor; the last step leaves r within one m of [0, m)."""
    x, y = a.cast(dtypes.float64), b.cast(dtypes.float64)
    x_bits, y_bits = x.bitcast(dtypes.uint64), y.bitcast(dtypes.uint64)
    m = ((y_bits & _F64_FRACTION) | _F64_ONE).bitcast(dtypes.float64)
    # 2**ey with x's sign: x over it is |x| / 2**ey (an exact division)
    power = ((y_bits & _F64_EXPONENT) | (x_bits & _F64_SIGN)).bitcast(dtypes.float64)
    r = x._alu(Ops.FDIV, power)
    inv_m = m.reciprocal()
    for e in _fmod_steps(b):
        r = r + (r * (inv_m * 2.0**-e)).trunc() * (m * -(2.0**e))
    # (one select on r: another node read twice this deep would be stored by the scheduler, MAX_FUSED_DEPTH)
    r = (r < 0).where((r < -m).where(r + 2 * m, r + m), (r < m).where(r, r - m))
    # (a zero remainder keeps x's sign through the signed power; x fmod inf is x, fmod 0 and inf fmod y are NaN)
    out = (r * power).cast(dtypes.float32)
    # (no remainder: NaN made by arithmetic, so that it is the device's own, as C's fmod gives it: -nan on x86 for
    # inf fmod y, the dividend's or divisor's NaN when one is given)
    quotient = a / b
    out = (a.isfinite() & (b != 0) & (b == b)).where(out, quotient - quotient)
    return (b.isinf() & a.isfinite()).where(a, out)


def _floor_division(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """floor(a / b) and a - floor(a / b) * b (Python's and torch's `//` and `%`) of float32 or float64 tensors, as
    torch computes them: the truncated remainder, stepped by b where its sign differs from b's (one rounding)."""
    q, truncated = _truncated_division(a, b)
    r = _remainder_in_range(truncated, b, a)
    below = (r != 0) & ((r < 0) != (b < 0))
    q, r = below.where(q - 1, q), below.where(r + b, r)
    # no remainder means no quotient (inf // 1.5 is nan), except x // 0, which stays x / 0, and a finite quotient too
    # large for the dtype (7 // 1e-38), which overflows to inf as torch's
    return (truncated.isnan() & (b != 0) & ~(a.isfinite() & q.isinf())).where(math.nan, q), r


def _remainder_in_range(r: Tensor, b: Tensor, sign: Tensor) -> Tensor:
    """A remainder r of a by b whose sign is to be `sign`'s (a's for fmod, b's for %), NaN where it is off: past the
    quotients `_truncated_division` reaches exactly (|a / b| >= 2**106 in float64, 2**48 in float32 computed without
    float64) r can be many b's off, and NaN says so where a remainder of the wrong sign or not below |b| would not
    (1e30 fmod 1e-30 was -8.6e-4). float32 with float64 at hand is exact at every quotient: r comes back as it is."""
    if r.dtype == dtypes.float32 and _has_float64(r.device):
        return r
    off = r.isfinite() & ((r.abs() >= b.abs()) | ((r != 0) & ((r < 0) != (sign < 0))))
    return off.where(math.nan, r)


def _half_floor_division(a: Tensor, b: Tensor) -> Tensor:
    """a // b of float16 or bfloat16 tensors as torch's CPU kernel computes it: C10's div_floor_floating in the half
    float's own arithmetic, each step rounded to it (float16 5000 // 3 is 1667: 5000 - 2 rounds to 5000), not in
    float32 rounded once (1666). Computed in float32 with those roundings; its gradient is 0, as floor's."""
    dt = a.dtype

    def rounded(t: Tensor) -> Tensor:
        return t.cast(dt).float()

    x, y = a.float(), b.float()
    # (fmod of two half floats is exact in float32)
    mod = x.fmod(y)
    div = rounded(rounded(x - mod) / y)
    div = ((mod != 0) & ((y < 0) != (mod < 0))).where(rounded(div - 1), div)
    floor = div.floor()
    floor = (rounded(div - floor) > 0.5).where(rounded(floor + 1), floor)
    # a zero quotient takes the sign of a / b; x / 0 is a / b itself (+-inf or NaN; trunc keeps it, with no gradient)
    quotient = rounded(x / y).trunc()
    zero = quotient.signbit().where(-0.0, 0.0)
    return (y == 0).where(quotient, (div != 0).where(floor, zero)).cast(dt)


# a float's top half of significant bits (float64: the implicit one and 25 stored of 52; float32: the implicit one and
# 11 of 23), as a mask over its bits: two such halves multiply exactly in the float's own precision
_HIGH_HALF = {dtypes.float64: (dtypes.uint64, 0xFFFFFFFFF8000000), dtypes.float32: (dtypes.uint32, 0xFFFFF000)}


def _exact_remainder(a: Tensor, b: Tensor, q: Tensor) -> Tensor:
    """a - q * b without rounding the product (for an integer-valued q near a / b), in a's own float dtype (no
    float64 for float32: devices without it keep an exact `%`). Every product below is exact, so a backend that fuses a
    multiply and a subtract (gcc contracts them by default) computes the same value."""
    bits, mask = _HIGH_HALF[a.dtype]

    def halves(x: Tensor) -> tuple[Tensor, Tensor]:
        high = (x.bitcast(bits) & mask).bitcast(a.dtype)
        return high, x - high

    qh, ql = halves(q)
    bh, bl = halves(b)
    # the largest part first: each difference is (close to) exact, as a ~ q * b
    return (((a - qh * bh) - qh * bl) - ql * bh) - ql * bl


def _with_quotient_gradient(out: Tensor, a: Tensor, b: Tensor, q: Tensor) -> Tensor:
    """`out` = a - q * b (a remainder), with torch's gradient: 1 for a and -q for b."""
    if a.uop is b.uop:
        return _with_derivative(out, a, 1 - q)
    return _with_derivative(out, a, q.ones_like(), (b, -q))
