"""EXP2 and LOG2 from +, *, comparisons and bit tricks, for renderers that don't have them natively (or whose
native ones are slow scalar library calls the C compiler can't vectorize).

Both are accurate to a few float32 ulp (a few float64 ulp for doubles) over the whole domain, including
inf, nan, zero, negative inputs, overflow, underflow and denormals. float16 is computed in float32.
"""

from __future__ import annotations

import math

from uopkit.dtype import DType, dtypes
from uopkit.uop.ops import Ops, PatternMatcher, UOp, UPat

# (mantissa bits, exponent bias, the int type of the same size)
_FLOAT_LAYOUT = {dtypes.float32: (23, 127, dtypes.int32), dtypes.float64: (52, 1023, dtypes.int64)}


def _pow2i(n: UOp, dt: DType) -> UOp:
    """2**n for an integer-valued float n in the normal range, built from the exponent bits."""
    mant, bias, itype = _FLOAT_LAYOUT[dt]
    bits = (n.cast(itype) + bias).alu(Ops.SHL, UOp.const(itype, mant))
    return bits.bitcast(dt)


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
