"""EXP2, LOG2, SIN and SQRT from +, *, comparisons and bit tricks, for renderers that don't have them natively (or
whose native ones are slow scalar library calls the C compiler can't vectorize).

EXP2 and LOG2 are accurate to a few float32 ulp (a few float64 ulp for doubles) over the whole domain, including
inf, nan, zero, negative inputs, overflow, underflow and denormals. SIN is within 2 ulp over the whole range of
float32 and float64: the argument is reduced modulo pi/2 with the bits of 2/pi in 64-bit integer arithmetic
(Payne-Hanek), so sin(1e300) is as right as sin(1.0). SQRT is correctly rounded for float32 (a float estimate
corrected with exact integer arithmetic) and within 1 ulp for float64 (Newton steps, then a correction by the
exactly computed residual). float16 and bfloat16 are computed in float32 and rounded once. SIN and SQRT need the
renderer to handle int64/uint64 arithmetic; a backend without 64-bit integers claims them in transcendental_ops.
"""

from __future__ import annotations

import math
import struct

from uopkit.dtype import DType, dtypes
from uopkit.uop.ops import Ops, PatternMatcher, UOp, UPat

# (mantissa bits, exponent bias, the int type of the same size)
_FLOAT_LAYOUT = {dtypes.float32: (23, 127, dtypes.int32), dtypes.float64: (52, 1023, dtypes.int64)}
# computed in float32 and rounded back once
_HALVES = dtypes.halves
_DECOMPOSABLE = (*_HALVES, *_FLOAT_LAYOUT)


def _pow2i(n: UOp, dt: DType) -> UOp:
    """2**n for an integer-valued float n in the normal range, built from the exponent bits."""
    return _pow2_bits(n.cast(_FLOAT_LAYOUT[dt][2]), dt)


def _pow2_bits(n: UOp, dt: DType) -> UOp:
    """2**n for an integer n (of the float's same-size int type) in the normal range."""
    mant, bias, itype = _FLOAT_LAYOUT[dt]
    return (n + bias).alu(Ops.SHL, UOp.const(itype, mant)).bitcast(dt)


def _floor(x: UOp) -> UOp:
    t = x.alu(Ops.TRUNC)
    return x.lt(t).where(t - 1.0, t)


def _horner(x: UOp, coeffs: list[float], fused: bool = False) -> UOp:
    # coeffs from the highest power down; `fused`: each step one MULACC (a*b+c in one expression, which the backend's
    # compiler may contract into an FMA: C compilers contract only within an expression unless told otherwise)
    acc = x.const_like(coeffs[0])
    for c in coeffs[1:]:
        acc = acc.alu(Ops.MULACC, x, x.const_like(c)) if fused else acc * x + c
    return acc


def xexp2(x: UOp) -> UOp:
    dt = x.dtype
    if dt in _HALVES:
        return xexp2(x.cast(dtypes.float32)).cast(dt)
    lo, hi, degree = (-151.0, 129.0, 7) if dt == dtypes.float32 else (-1076.0, 1025.0, 13)
    # clamp keeps n's exponent bits valid; past the ends the answer is 0 or inf anyway (nan passes through MAX)
    xc = x.maximum(lo)
    xc = xc.lt(hi).where(xc, xc.const_like(hi))
    n = _floor(xc + 0.5)
    f = xc - n
    # 2**f = e**(f ln2) on [-0.5, 0.5]: its Taylor series converges fast enough there
    ln2 = math.log(2)
    poly = _horner(f, [ln2**k / math.factorial(k) for k in range(degree, -1, -1)], fused=True)
    # 2**n in two halves so that neither half leaves the normal range
    n1 = _floor(n * 0.5)
    ret = poly * _pow2i(n1, dt) * _pow2i(n - n1, dt)
    return x.alu(Ops.CMPNE, x).where(x, ret)


def xlog2(x: UOp) -> UOp:
    dt = x.dtype
    if dt in _HALVES:
        return xlog2(x.cast(dtypes.float32)).cast(dt)
    mant, bias, itype = _FLOAT_LAYOUT[dt]
    smallest_normal = 2.0 ** (1 - bias)
    # denormals: scale into the normal range first
    is_denormal = x.lt(smallest_normal)
    xs = is_denormal.where(x * 2.0**mant, x)
    bits = xs.bitcast(itype)
    exponent = bits.alu(Ops.SHR, UOp.const(itype, mant)) - bias
    mantissa_bits = bits.alu(Ops.AND, UOp.const(itype, (1 << mant) - 1)).alu(Ops.OR, UOp.const(itype, bias << mant))
    m = mantissa_bits.bitcast(dt)
    # keep m in [sqrt(1/2), sqrt(2)) so t below stays small
    big = (m.const_like(math.sqrt(2))).lt(m)
    m = big.where(m * 0.5, m)
    e = exponent.cast(dt) + big.where(x.const_like(1.0), x.const_like(0.0))
    e = is_denormal.where(e - float(mant), e)
    # log(m) = 2 atanh(t), t = (m-1)/(m+1), |t| < 0.172
    t = (m - 1.0) * (m + 1.0).alu(Ops.RECIP)
    t2 = t * t
    n_terms = 6 if dt == dtypes.float32 else 11
    series = _horner(t2, [1.0 / (2 * k + 1) for k in range(n_terms - 1, -1, -1)], fused=True)
    log2_m = t * series * (2.0 / math.log(2))
    ret = e + log2_m
    # the special values
    ret = x.alu(Ops.CMPNE, x.const_like(math.inf)).where(ret, x.const_like(math.inf))
    ret = x.alu(Ops.CMPEQ, x.const_like(0.0)).where(x.const_like(-math.inf), ret)
    ret = x.lt(0.0).where(x.const_like(math.nan), ret)
    return x.alu(Ops.CMPNE, x).where(x, ret)


# ln2 split so that n * hi is exact for the exponents a float can have (Cody-Waite)
LN2_SPLIT = {
    dtypes.float32: (0.693145751953125, 1.428606765330187e-06),
    dtypes.float64: (6.93147180369123816490e-01, 1.90821492927058770002e-10),
}


def _exp_remainder(x: UOp, n: UOp) -> UOp:
    """r = x - n*ln2 for an integer-valued float n, without the rounding of n*ln2 (ln2 in two parts)."""
    hi, lo = LN2_SPLIT[x.dtype]
    # (n * hi is exact, so a fused x - n*hi is the same value; the fused - n*lo is rounded once instead of twice)
    return n.alu(Ops.MULACC, n.const_like(-lo), n.alu(Ops.MULACC, n.const_like(-hi), x))


# 1.5 * 2**mantissa: adding it rounds a float to an integer (to nearest) and leaves that integer in the low bits
_ROUNDER = {dtypes.float32: 12582912.0, dtypes.float64: 6755399441055744.0}
_ROUNDER_BITS = {
    dtypes.float32: struct.unpack("<i", struct.pack("<f", 12582912.0))[0],
    dtypes.float64: struct.unpack("<q", struct.pack("<d", 6755399441055744.0))[0],
}


# e**r on [-ln2/2, ln2/2], highest power first. float32: a degree-6 fit for relative error (2.6e-9, well under
# float32's 6e-8; Taylor needs degree 7 for that). float64: Taylor to degree 13 (error 4e-18).
_EXP_POLY = {
    dtypes.float32: [
        0.001382942063971824,
        0.008374771520698765,
        0.04166835803260927,
        0.16666420832112339,
        0.49999991493035445,
        1.0000000361258992,
        1.0,
    ],
    dtypes.float64: [1.0 / math.factorial(k) for k in range(13, -1, -1)],
}


def xexp(x: UOp) -> UOp:
    """e**x from +, * and bit tricks, accurate to a few ulp over the whole range: x = n*ln2 + r with ln2 split in
    two (Cody-Waite) so r keeps its precision, a polynomial for e**r, and 2**n built from exponent bits."""
    dt = x.dtype
    if dt in _HALVES:
        return xexp(x.cast(dtypes.float32)).cast(dt)
    itype = _FLOAT_LAYOUT[dt][2]
    # past these ends the answer is inf or 0 anyway; the clamp keeps n's exponent bits valid (nan passes through
    # and stays nan to the end)
    lo_x, hi_x = (-104.0, 89.0) if dt == dtypes.float32 else (-746.0, 710.0)
    # (compares that are false for nan: nan goes through both untouched)
    xc = x.lt(lo_x).where(x.const_like(lo_x), x)
    xc = xc.const_like(hi_x).lt(xc).where(xc.const_like(hi_x), xc)
    # n = round(x / ln2), as a float and as an int, without a float -> int conversion
    rounder = _ROUNDER[dt]
    # (one multiply-add: any integer n near x / ln2 does, as long as r and 2**n use the same)
    t = xc.alu(Ops.MULACC, xc.const_like(1 / math.log(2)), xc.const_like(rounder))
    n = t - rounder
    n_int = t.bitcast(itype) - _ROUNDER_BITS[dt]
    poly = _horner(_exp_remainder(xc, n), _EXP_POLY[dt], fused=True)
    # 2**n in two halves so that neither leaves the normal range (results down in the denormals stay right)
    n1 = n_int.alu(Ops.SHR, UOp.const(itype, 1))
    return poly * _pow2_bits(n1, dt) * _pow2_bits(n_int - n1, dt)


def _is_log2e(c: UOp, x: UOp) -> bool:
    return c.op is Ops.CONST and c.dtype == x.dtype and c.arg == UOp.const(c.dtype, 1 / math.log(2)).arg


def do_exp(x: UOp, c: UOp) -> UOp | None:
    # Tensor.exp is EXP2(x * log2(e)); rounding that product would cost large results ~|x| ulp of accuracy. The
    # polynomial form is used even where EXP2 is native: an accurate exp from native EXP2 takes three of them
    # (2**n in two halves and 2**(r/ln2)), 8x slower on PoCL than the polynomial and no faster with gcc
    if not _is_log2e(c, x) or x.dtype not in _DECOMPOSABLE:
        return None
    return xexp(x)


def exp_rules() -> PatternMatcher:
    """e**x written as EXP2(x * log2(e)) becomes an accurate exp (run before vector lanes, on scalar code)."""
    pat = UPat(Ops.EXP2, src=(UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar("c")]),))
    return PatternMatcher([(pat, do_exp)])


def do_exp2(x: UOp, e: UOp) -> UOp | None:
    return xexp2(x) if x.dtype in _DECOMPOSABLE else None


def do_log2(x: UOp, e: UOp) -> UOp | None:
    return xlog2(x) if x.dtype in _DECOMPOSABLE else None


# --- SIN


def _two_over_pi_words(count: int) -> list[int]:
    """The first 32 * count bits of 2/pi's fraction (0.a2f9836e...) as 32-bit words, from pi by Machin's formula in
    integer arithmetic (64 guard bits; tests/test_transcendental.py checks the result against a published prefix)."""

    def arctan_inv(n: int, scale: int) -> int:
        # arctan(1/n) * scale by its series
        total, term, k = 0, scale // n, 0
        while term:
            total += term // (2 * k + 1) if k % 2 == 0 else -(term // (2 * k + 1))
            term //= n * n
            k += 1
        return total

    bits = 32 * count
    scale = 1 << (bits + 64)
    pi_scaled = 16 * arctan_inv(5, scale) - 4 * arctan_inv(239, scale)
    fraction = (2 * scale << bits) // pi_scaled
    return [(fraction >> (32 * (count - 1 - k))) & 0xFFFFFFFF for k in range(count)]


# float64 arguments up to 2**1024 need 2/pi's bits down to about 2**-1140
_TWO_OVER_PI_WORDS = _two_over_pi_words(37)

# sin and cos on [-pi/4, pi/4]: Taylor coefficients of r**2 (highest power first); the first left-out term is
# below 3e-9 relative (float32) and 1e-19 (float64)
_SIN_POLY = {
    dtypes.float32: [(-1) ** k / math.factorial(2 * k + 1) for k in range(4, 0, -1)],
    dtypes.float64: [(-1) ** k / math.factorial(2 * k + 1) for k in range(8, 0, -1)],
}
_COS_POLY = {
    dtypes.float32: [(-1) ** k / math.factorial(2 * k) for k in range(5, 1, -1)],
    dtypes.float64: [(-1) ** k / math.factorial(2 * k) for k in range(9, 1, -1)],
}


def _select(index: UOp, table: list[int], dt: DType) -> UOp:
    """table[index] for an int32 index known to lie in range(len(table)), as a chain of WHEREs."""
    out = UOp.const(dt, table[0])
    for k in range(1, len(table)):
        out = index.alu(Ops.CMPEQ, index.const_like(k)).where(UOp.const(dt, table[k]), out)
    return out


def _reduce_pio2_f32(ax: UOp) -> tuple[UOp, UOp]:
    """(r, q) with |ax| = (q + 4k) * pi/2 + r, |r| <= pi/4, for a float32 ax >= pi/4 (finite).

    ax = m * 2**e with m the 24-bit integer mantissa. Multiples of 4 in ax * 2/pi don't matter, so only the bits of
    2/pi from 2**(1-e) down are needed: F = (2**e * 2/pi) mod 4, 96 bits of it (2 integer bits, 94 fraction bits),
    taken from the table at the exponent's offset. Then ax * 2/pi mod 4 = m * F mod 4, computed with 62 fraction
    bits in uint64 arithmetic that wraps modulo 4: exact enough for the closest any float32 comes to a multiple of
    pi/2 (about 2**-30 relative)."""
    u64, i32 = dtypes.uint64, dtypes.int32
    bits = ax.bitcast(i32)
    # clamped so that inf/nan lanes (whose result is replaced) index the table in range
    exponent = bits.alu(Ops.SHR, UOp.const(i32, 23)).maximum(126)
    exponent = exponent.lt(254).where(exponent, exponent.const_like(254))
    m = bits.alu(Ops.AND, UOp.const(i32, 0x7FFFFF)).alu(Ops.OR, UOp.const(i32, 0x800000)).cast(u64)
    # e = exponent - 150; the first bit of 2/pi needed is 2**-(e-1); with one zero word in front of the table its
    # 0-based position is (e - 2) + 32 = exponent - 120, in [6, 134]
    position = exponent - 120
    word = position.alu(Ops.SHR, UOp.const(i32, 5))
    shift = position.alu(Ops.AND, UOp.const(i32, 31)).cast(u64)
    table = [0, *_TWO_OVER_PI_WORDS]
    a, b, c, d = (_select(word, table[k : k + 5], u64) for k in range(4))

    def window(hi: UOp, lo: UOp) -> UOp:
        # 32 bits of hi:lo starting `shift` bits in (the shift wraps away the bits before)
        joined = hi.alu(Ops.SHL, UOp.const(u64, 32)).alu(Ops.OR, lo)
        return joined.alu(Ops.SHL, shift).alu(Ops.SHR, UOp.const(u64, 32))

    w0, w1, w2 = window(a, b), window(b, c), window(c, d)
    # F = w0 * 2**-30 + w1 * 2**-62 + w2 * 2**-94; y = m * F mod 4 as y * 2**62 mod 2**64
    y = (m * w0).alu(Ops.SHL, UOp.const(u64, 32)) + m * w1 + (m * w2).alu(Ops.SHR, UOp.const(u64, 32))
    # round to the nearest quadrant: q = top two bits of y + 1/2, the remainder in [-1/2, 1/2) * 2**62
    y = y + (1 << 61)
    q = y.alu(Ops.SHR, UOp.const(u64, 62)).cast(i32)
    rest = y.alu(Ops.AND, UOp.const(u64, (1 << 62) - 1)).cast(dtypes.int64) - (1 << 61)
    return rest.cast(dtypes.float32) * (math.pi / 2 * 2.0**-62), q


def _reduce_pio2_f64(ax: UOp) -> tuple[UOp, UOp]:
    """(r, q) with |ax| = (q + 4k) * pi/2 + r, |r| <= pi/4, for a float64 ax >= pi/4 (finite).

    As for float32, with m the 53-bit mantissa in two 32-bit limbs and F = (2**e * 2/pi) mod 4 in six 32-bit words
    (2 integer bits, 190 fraction bits): y = m * F mod 4 is summed in four 32-bit columns (126 fraction bits; the
    closest a float64 comes to a multiple of pi/2 is about 2**-61 relative), and its remainder after rounding to
    the nearest quadrant is converted to a float from its magnitude's limbs, smallest first, so nothing cancels."""
    u64, i32, i64 = dtypes.uint64, dtypes.int32, dtypes.int64
    mask32 = UOp.const(u64, 0xFFFFFFFF)
    bits = ax.bitcast(i64)
    exponent = bits.alu(Ops.SHR, UOp.const(i64, 52)).cast(i32).maximum(1022)
    exponent = exponent.lt(2046).where(exponent, exponent.const_like(2046))
    m = bits.alu(Ops.AND, UOp.const(i64, (1 << 52) - 1)).alu(Ops.OR, UOp.const(i64, 1 << 52)).bitcast(u64)
    limbs = (m.alu(Ops.AND, mask32), m.alu(Ops.SHR, UOp.const(u64, 32)))
    # e = exponent - 1075; the first bit of 2/pi needed is 2**-(e-1); with two zero words in front of the table its
    # 0-based position is (e - 2) + 64 = exponent - 1013, in [9, 1033]
    position = exponent - 1013
    word = position.alu(Ops.SHR, UOp.const(i32, 5))
    shift = position.alu(Ops.AND, UOp.const(i32, 31)).cast(u64)
    table = [0, 0, *_TWO_OVER_PI_WORDS]
    raw = [_select(word, table[k : k + 33], u64) for k in range(7)]
    # F's words: 32 bits of each pair of table words, starting `shift` bits in
    words = [
        raw[k]
        .alu(Ops.SHL, UOp.const(u64, 32))
        .alu(Ops.OR, raw[k + 1])
        .alu(Ops.SHL, shift)
        .alu(Ops.SHR, UOp.const(u64, 32))
        for k in range(6)
    ]
    # y * 2**126 mod 2**128: limb a times word k weighs 2**(32 * (a + 3 - k)); column t holds the weight 2**(32 t)
    columns: list[list[UOp]] = [[], [], [], []]
    for a, limb in enumerate(limbs):
        for k, w in enumerate(words):
            t = a + 3 - k
            if t >= 4 or t < -1:
                continue
            product = limb * w
            if t >= 0:
                columns[t].append(product.alu(Ops.AND, mask32))
            if t + 1 <= 3:
                columns[t + 1].append(product.alu(Ops.SHR, UOp.const(u64, 32)))
    # round to the nearest quadrant: add 2**125 (bit 29 of the top column)
    columns[3].append(UOp.const(u64, 1 << 29))
    col = []
    carry = UOp.const(u64, 0)
    for terms in columns:
        total = carry
        for term in terms:
            total = total + term
        col.append(total.alu(Ops.AND, mask32))
        carry = total.alu(Ops.SHR, UOp.const(u64, 32))
    q = col[3].alu(Ops.SHR, UOp.const(u64, 30)).alu(Ops.AND, UOp.const(u64, 3)).cast(i32)
    # the remainder: the low 126 bits minus 2**125; negative when bit 29 of the top column is clear
    top = col[3].alu(Ops.AND, UOp.const(u64, (1 << 30) - 1))
    negative = top.lt(1 << 29)
    # the magnitude: (2**125 - low) when negative, (low - 2**125) otherwise, as two's complement on the limbs
    flipped = [c.alu(Ops.XOR, mask32) for c in (*col[:3], top)]
    plus_one = []
    carry = UOp.const(u64, 1)
    for c in flipped:
        total = c + carry
        plus_one.append(total.alu(Ops.AND, mask32))
        carry = total.alu(Ops.SHR, UOp.const(u64, 32))
    # negative: 2**126 - low - 2**125 = (~low + 1) - 2**125 in 126 bits; positive: low - 2**125
    neg_top = plus_one[3].alu(Ops.AND, UOp.const(u64, (1 << 30) - 1)) - (1 << 29)
    pos_top = top - (1 << 29)
    mag = [negative.where(n, c) for n, c in zip(plus_one[:3], col[:3], strict=True)]
    mag.append(negative.where(neg_top, pos_top))
    f64 = dtypes.float64
    r = mag[0].cast(f64) * 2.0**-126 + mag[1].cast(f64) * 2.0**-94
    r = r + mag[2].cast(f64) * 2.0**-62
    r = (r + mag[3].cast(f64) * 2.0**-30) * (math.pi / 2)
    return negative.where(-r, r), q


def xsin(x: UOp) -> UOp:
    """sin(x): |x| < pi/4 directly by polynomial (keeps -0 and denormals exact), else reduced to r in [-pi/4, pi/4]
    and quadrant q, then sin(r), cos(r), -sin(r) or -cos(r), with the sign of x; nan for inf and nan."""
    dt = x.dtype
    if dt in _HALVES:
        return xsin(x.cast(dtypes.float32)).cast(dt)
    itype = _FLOAT_LAYOUT[dt][2]
    # |x| by clearing the sign bit
    ax = x.bitcast(itype).alu(Ops.AND, UOp.const(itype, ~(1 << (8 * dt.itemsize - 1)))).bitcast(dt)
    small = ax.lt(math.pi / 4)
    r_big, q_big = _reduce_pio2_f32(ax) if dt == dtypes.float32 else _reduce_pio2_f64(ax)
    r = small.where(x, r_big)
    q = small.where(q_big.const_like(0), q_big)
    r2 = r * r
    sin_r = r + r * r2 * _horner(r2, _SIN_POLY[dt])
    cos_r = 1.0 - r2 * 0.5 + r2 * r2 * _horner(r2, _COS_POLY[dt])
    i32 = dtypes.int32
    odd = q.alu(Ops.AND, UOp.const(i32, 1)).alu(Ops.CMPNE, UOp.const(i32, 0))
    upper = q.alu(Ops.AND, UOp.const(i32, 2)).alu(Ops.CMPNE, UOp.const(i32, 0))
    ret = odd.where(cos_r, sin_r)
    # sin(x) for x < 0 is -sin(|x|): the reduced path worked on |x|, the direct one on x itself
    negative = small.where(small.const_like(False), x.lt(0.0))
    ret = upper.alu(Ops.CMPNE, negative).where(-ret, ret)
    # +-0 keeps its sign (the polynomial makes -0 + 0 = +0 of it); inf and nan give nan
    ret = x.alu(Ops.CMPEQ, x.const_like(0.0)).where(x, ret)
    return ax.lt(math.inf).where(ret, x.const_like(math.nan))


# --- SQRT


def _sqrt_f32(x: UOp) -> UOp:
    """Correctly rounded float32 sqrt: x = M * 2**(2k - 23) with M a 24- or 25-bit integer; sqrt(M * 2**23) is a
    24-bit mantissa R, estimated in float (rsqrt bit trick and Newton) and corrected to round(sqrt(N)) exactly in
    uint64 arithmetic (R is right when R*R - R < N <= R*R + R)."""
    i32, u64 = dtypes.int32, dtypes.uint64
    # denormals: 2**24 * x is normal, and sqrt of it is 2**12 * sqrt(x), both exact
    denormal = x.lt(2.0**-126)
    xs = denormal.where(x * 2.0**24, x)
    bits = xs.bitcast(i32)
    # the unbiased exponent (clamped so that the 0, inf, nan and negative lanes, replaced at the end, stay in range)
    e = bits.alu(Ops.SHR, UOp.const(i32, 23)).alu(Ops.AND, UOp.const(i32, 0xFF)).maximum(1) - 127
    mant = bits.alu(Ops.AND, UOp.const(i32, 0x7FFFFF)).alu(Ops.OR, UOp.const(i32, 0x800000))
    # an even exponent: odd ones move a bit into the mantissa
    odd = e.alu(Ops.AND, UOp.const(i32, 1)).alu(Ops.CMPNE, UOp.const(i32, 0))
    mant = odd.where(mant.alu(Ops.SHL, UOp.const(i32, 1)), mant)
    half_e = (e - odd.where(e.const_like(1), e.const_like(0))).alu(Ops.SHR, UOp.const(i32, 1))
    n = mant.cast(u64).alu(Ops.SHL, UOp.const(u64, 23))
    # an estimate of sqrt(N), N in [2**46, 2**48): rsqrt by the bit trick and three Newton steps, then N * rsqrt
    nf = n.cast(dtypes.float32)
    y = (UOp.const(i32, 0x5F3759DF) - nf.bitcast(i32).alu(Ops.SHR, UOp.const(i32, 1))).bitcast(dtypes.float32)
    for _ in range(3):
        y = y * (1.5 - 0.5 * nf * y * y)
    root = (nf * y + 0.5).cast(i32).cast(dtypes.int64)
    # the estimate is within 4 of sqrt(N); one Newton step on the exact residual N - R*R brings it within 1 (the
    # +64 makes the float -> int truncation a floor)
    residual = n.cast(dtypes.int64) - root * root
    root = root + ((residual.cast(dtypes.float32) * (y * 0.5) + 64.5).cast(i32) - 64).cast(dtypes.int64)
    # then exactly: R is right when R*R - R < N <= R*R + R
    root = root.cast(u64)
    root = (root * root + root).lt(n).where(root + 1, root)
    root = n.lt(root * root - root + 1).where(root - 1, root)
    # R (at most 2**24, exact as a float) times 2**(half_e - 23), from the exponent bits
    ret = root.cast(dtypes.float32) * _pow2_bits(half_e - 23, dtypes.float32)
    return denormal.where(ret * 2.0**-12, ret)


def _sqrt_f64(x: UOp) -> UOp:
    """float64 sqrt within 1 ulp (almost always correctly rounded): rsqrt by the bit trick and four Newton steps, then
    s = x * rsqrt corrected by the exactly computed residual."""
    i64 = dtypes.int64
    # scaled by 2**+-512 into [2**-562, 2**512) first, so that the split below neither overflows nor underflows
    # (denormals included); sqrt then scales back by 2**-+256, exactly
    tiny, huge = x.lt(2.0**-512), x.const_like(2.0**512).lt(x)
    xs = tiny.where(x * 2.0**512, huge.where(x * 2.0**-512, x))
    y = (UOp.const(i64, 0x5FE6EB50C7B537A9) - xs.bitcast(i64).alu(Ops.SHR, UOp.const(i64, 1))).bitcast(dtypes.float64)
    for _ in range(4):
        y = y * (1.5 - 0.5 * xs * y * y)
    s = xs * y
    # one correction by the exact residual x - s*s: s*s as hi + lo from s split in two 26-bit halves (Dekker), x - hi
    # exact (hi is within a few ulp of x)
    split = s * 134217729.0
    s_hi = split - (split - s)
    s_lo = s - s_hi
    hi = s * s
    lo = ((s_hi * s_hi - hi) + s_hi * s_lo * 2.0) + s_lo * s_lo
    s = s + ((xs - hi) - lo) * (y * 0.5)
    return tiny.where(s * 2.0**-256, huge.where(s * 2.0**256, s))


def xsqrt(x: UOp) -> UOp:
    """sqrt(x); sqrt(+-0) = +-0, sqrt(inf) = inf, nan for nan and negative x."""
    dt = x.dtype
    if dt in _HALVES:
        return xsqrt(x.cast(dtypes.float32)).cast(dt)
    ret = _sqrt_f32(x) if dt == dtypes.float32 else _sqrt_f64(x)
    ret = x.alu(Ops.CMPEQ, x.const_like(math.inf)).where(x, ret)
    ret = x.alu(Ops.CMPEQ, x.const_like(0.0)).where(x, ret)
    # negative x (and nan, for which every compare above is false) give nan
    return x.lt(0.0).where(x.const_like(math.nan), x.alu(Ops.CMPNE, x).where(x, ret))


def do_sin(x: UOp, e: UOp) -> UOp | None:
    return xsin(x) if x.dtype in _DECOMPOSABLE else None


def do_sqrt(x: UOp, e: UOp) -> UOp | None:
    return xsqrt(x) if x.dtype in _DECOMPOSABLE else None


pm_transcendental = {
    Ops.EXP2: (UPat(Ops.EXP2, src=(UPat.var("x"),), name="e"), do_exp2),
    Ops.LOG2: (UPat(Ops.LOG2, src=(UPat.var("x"),), name="e"), do_log2),
    Ops.SIN: (UPat(Ops.SIN, src=(UPat.var("x"),), name="e"), do_sin),
    Ops.SQRT: (UPat(Ops.SQRT, src=(UPat.var("x"),), name="e"), do_sqrt),
}


def decompositions_for(native: set[Ops] | frozenset[Ops]) -> PatternMatcher | None:
    """The rules that replace the transcendental ops a renderer doesn't render natively."""
    rules = [rule for op, rule in pm_transcendental.items() if op not in native]
    return PatternMatcher(rules) if rules else None
