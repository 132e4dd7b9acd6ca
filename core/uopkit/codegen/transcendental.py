"""EXP2 and LOG2 from +, *, comparisons and bit tricks, for renderers that don't have them natively (or whose
native ones are slow scalar library calls the C compiler can't vectorize).

Both are accurate to a few float32 ulp (a few float64 ulp for doubles) over the whole domain, including
inf, nan, zero, negative inputs, overflow, underflow and denormals. float16 is computed in float32.
"""

from __future__ import annotations

import math
import struct

from uopkit.dtype import DType, dtypes
from uopkit.uop.ops import Ops, PatternMatcher, UOp, UPat

# (mantissa bits, exponent bias, the int type of the same size)
_FLOAT_LAYOUT = {dtypes.float32: (23, 127, dtypes.int32), dtypes.float64: (52, 1023, dtypes.int64)}


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


def _horner(x: UOp, coeffs: list[float]) -> UOp:
    # coeffs from the highest power down
    acc = x.const_like(coeffs[0])
    for c in coeffs[1:]:
        acc = acc * x + c
    return acc


def xexp2(x: UOp) -> UOp:
    dt = x.dtype
    if dt == dtypes.float16:
        return xexp2(x.cast(dtypes.float32)).cast(dt)
    lo, hi, degree = (-151.0, 129.0, 7) if dt == dtypes.float32 else (-1076.0, 1025.0, 13)
    # clamp keeps n's exponent bits valid; past the ends the answer is 0 or inf anyway (nan passes through MAX)
    xc = x.maximum(lo)
    xc = xc.lt(hi).where(xc, xc.const_like(hi))
    n = _floor(xc + 0.5)
    f = xc - n
    # 2**f = e**(f ln2) on [-0.5, 0.5]: its Taylor series converges fast enough there
    ln2 = math.log(2)
    poly = _horner(f, [ln2**k / math.factorial(k) for k in range(degree, -1, -1)])
    # 2**n in two halves so that neither half leaves the normal range
    n1 = _floor(n * 0.5)
    ret = poly * _pow2i(n1, dt) * _pow2i(n - n1, dt)
    return x.alu(Ops.CMPNE, x).where(x, ret)


def xlog2(x: UOp) -> UOp:
    dt = x.dtype
    if dt == dtypes.float16:
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
    series = _horner(t2, [1.0 / (2 * k + 1) for k in range(n_terms - 1, -1, -1)])
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
    return (x - n * hi) - n * lo


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
    if dt == dtypes.float16:
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
    t = xc * (1 / math.log(2)) + rounder
    n = t - rounder
    n_int = t.bitcast(itype) - _ROUNDER_BITS[dt]
    poly = _horner(_exp_remainder(xc, n), _EXP_POLY[dt])
    # 2**n in two halves so that neither leaves the normal range (results down in the denormals stay right)
    n1 = n_int.alu(Ops.SHR, UOp.const(itype, 1))
    return poly * _pow2_bits(n1, dt) * _pow2_bits(n_int - n1, dt)


def xexp_native(x: UOp) -> UOp:
    """e**x from a native EXP2, which is exact for the integer part: 2**n * 2**(r/ln2)."""
    n = _floor(x * (1 / math.log(2)) + 0.5)
    r = _exp_remainder(x, n)
    # 2**n in two halves: near the top of the range n is one past the largest exponent (exp(88.5) in float32 is
    # 2**128 * 0.71, finite) and 2**n alone would be inf
    n1 = _floor(n * 0.5)
    frac = r.alu(Ops.FDIV, r.const_like(math.log(2))).alu(Ops.EXP2)
    ret = n1.alu(Ops.EXP2) * ((n - n1).alu(Ops.EXP2) * frac)
    # the reduction is nan at +-inf: exp(inf) = inf, exp(-inf) = 0
    ret = x.alu(Ops.CMPEQ, x.const_like(math.inf)).where(x, ret)
    return x.alu(Ops.CMPEQ, x.const_like(-math.inf)).where(x.const_like(0.0), ret)


def _is_log2e(c: UOp, x: UOp) -> bool:
    return c.op is Ops.CONST and c.dtype == x.dtype and c.arg == UOp.const(c.dtype, 1 / math.log(2)).arg


def do_exp(x: UOp, c: UOp, native: bool) -> UOp | None:
    # Tensor.exp is EXP2(x * log2(e)); rounding that product would cost large results ~|x| ulp of accuracy
    if not _is_log2e(c, x) or x.dtype not in (dtypes.float16, *_FLOAT_LAYOUT):
        return None
    if native and x.dtype != dtypes.float16:
        return xexp_native(x)
    return xexp(x)


def exp_rules(native: set[Ops] | frozenset[Ops]) -> PatternMatcher:
    """e**x written as EXP2(x * log2(e)) becomes an accurate exp (run before vector lanes, on scalar code)."""
    has_exp2 = Ops.EXP2 in native
    pat = UPat(Ops.EXP2, src=(UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar("c")]),))
    return PatternMatcher([(pat, lambda x, c: do_exp(x, c, has_exp2))])


def do_exp2(x: UOp, e: UOp) -> UOp | None:
    return xexp2(x) if x.dtype in (dtypes.float16, *_FLOAT_LAYOUT) else None


def do_log2(x: UOp, e: UOp) -> UOp | None:
    return xlog2(x) if x.dtype in (dtypes.float16, *_FLOAT_LAYOUT) else None


pm_transcendental = {
    Ops.EXP2: (UPat(Ops.EXP2, src=(UPat.var("x"),), name="e"), do_exp2),
    Ops.LOG2: (UPat(Ops.LOG2, src=(UPat.var("x"),), name="e"), do_log2),
}


def decompositions_for(native: set[Ops] | frozenset[Ops]) -> PatternMatcher | None:
    """The rules that replace the transcendental ops a renderer doesn't render natively."""
    rules = [rule for op, rule in pm_transcendental.items() if op not in native]
    return PatternMatcher(rules) if rules else None
