"""Polynomials and series the elementwise special functions evaluate: Horner's rule over Tensors, and erf's and erfc's
approximations to float32's and float64's precision (erf, erfc, erfinv and gelu build on them)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from uopkit.dtype import dtypes

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)

# erf(x) = 2/sqrt(pi) * x * S(x**2): S's Taylor coefficients, highest power first; for |x| < 0.5 a float32 needs the
# last 7 (the first left out is below 1e-9), a float64 all 14
_ERF_SERIES = tuple((-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in reversed(range(14)))
_ERF_TERMS = {dtypes.float32: 7, dtypes.float64: 14}

# erfc(a) = exp(-a**2) * t * Q(t) for a >= 0.5, t = 1 / (1 + a / 2) in (0, 0.8]: Q (highest power first) is the
# Chebyshev interpolant of erfc(a) exp(a**2) / t, of relative error 9e-9 (float32's) and 4e-18 (float64's)
_ERFC_Q = {
    dtypes.float32: (
        0.03391683709259767, -0.19869114557806902, 0.4346268612200163, -0.4018524969472525, 0.10361647173551929,
        -0.04983226940287561, 0.09161776843209721, 0.17552013520866766, 0.24687339599633118, 0.282093983294875,
        0.28209479444611074,
    ),
    dtypes.float64: (
        0.32516513197352, -3.198874469607809, 14.599730620253323, -40.88355589723335, 78.2208142885105,
        -107.68280912994452, 109.40237115557295, -82.95879058430897, 47.33467897159321, -20.78671294349837,
        7.369668680662869, -2.0761506323911108, 0.35041443672899253, -0.080621445998063, 0.06312509103211553,
        0.04880723664360708, -0.0037367623537114566, -0.05344505423489855, -0.05674960945407707,
        -0.004407722497027429, 0.08374689092457598, 0.1763092448673961, 0.2468329428020475, 0.28209479177387853,
        0.28209479177387814,
    ),
}  # fmt: skip
# exp(-a**2) as exp(-hi**2) * exp(-(a - hi)(a + hi)), hi = a rounded down to a multiple of 1/SPLIT: hi**2 is exact
# (hi has few bits), where a**2 rounded would put an error of a**2 ulps into the result (5e-6 at a = 9). Beyond CLAMP
# erfc underflows to 0; a is held there (an infinite a would make a - hi NaN)
_ERFC_SPLIT = {dtypes.float32: 2.0**7, dtypes.float64: 2.0**20}
_ERFC_CLAMP = {dtypes.float32: 11.0, dtypes.float64: 27.5}


def _horner(v: Tensor, coefs: Sequence[float]) -> Tensor:
    # the polynomial with `coefs` (highest power first) at v
    out = v * coefs[0] + coefs[1]
    for c in coefs[2:]:
        out = out * v + c
    return out


def _erf_near_zero(x: Tensor) -> Tensor:
    # erf by its Taylor series, for |x| < 0.5 (x float32 or float64)
    terms = _ERF_SERIES[-_ERF_TERMS[x.dtype] :]
    return x * _TWO_OVER_SQRT_PI * _horner(x * x, terms)


def _erfc_beyond_half(a: Tensor) -> Tensor:
    # erfc(a) for a >= 0.5 (float32 or float64): exp(-a**2) * t * Q(t), to a few ulps in relative terms (no 1 - erf)
    dt = a.dtype
    a = a.minimum(_ERFC_CLAMP[dt])
    t = (1 + 0.5 * a).reciprocal()
    split = _ERFC_SPLIT[dt]
    hi = (a * split).floor() * (1 / split)
    gauss = (-(hi * hi)).exp() * (-((a - hi) * (a + hi))).exp()
    return gauss * (t * _horner(t, _ERFC_Q[dt]))


def _erfc_of_abs(a: Tensor) -> Tensor:
    # erfc(a) for a >= 0 (float32 or float64)
    return (a < 0.5).where(1 - _erf_near_zero(a), _erfc_beyond_half(a))
