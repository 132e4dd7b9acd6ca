"""torch.special's functions by torch.special's names (`uopkit.special.erfinv(x)` for `torch.special.erfinv(x)`):
thin functions over the Tensor methods of tensor/special.py, tensor/special_torch.py and the others, with
torch.special's argument order (`polygamma(n, x)`) and its aliases (`expit` is sigmoid, `gammaln` lgamma, `psi`
digamma, `gammainc`/`gammaincc` igamma/igammac); the Bessel functions and airy_ai are tensor/special_bessel.py's
methods, the orthogonal polynomials (`chebyshev_polynomial_t(input, n)`, a number for either operand)
tensor/special_polynomials.py's.

>>> from uopkit import Tensor, special
>>> special.expit(Tensor([0.0])).item(), special.polygamma(0, Tensor([1.0])).item() == special.psi(Tensor([1.0])).item()
(0.5, True)
>>> special.xlogy(0.0, Tensor([0.0, 1.0])).tolist()
[0.0, 0.0]
"""

from __future__ import annotations

from typing import Any

from uopkit.dtype import DType, dtypes
from uopkit.tensor import Tensor

__all__ = [
    "airy_ai",
    "bessel_j0",
    "bessel_j1",
    "bessel_y0",
    "bessel_y1",
    "chebyshev_polynomial_t",
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_v",
    "chebyshev_polynomial_w",
    "digamma",
    "entr",
    "erf",
    "erfc",
    "erfcx",
    "erfinv",
    "exp2",
    "expit",
    "expm1",
    "gammainc",
    "gammaincc",
    "gammaln",
    "hermite_polynomial_h",
    "hermite_polynomial_he",
    "i0",
    "i0e",
    "i1",
    "i1e",
    "laguerre_polynomial_l",
    "legendre_polynomial_p",
    "log1p",
    "log_ndtr",
    "log_softmax",
    "logit",
    "logsumexp",
    "modified_bessel_i0",
    "modified_bessel_i1",
    "modified_bessel_k0",
    "modified_bessel_k1",
    "multigammaln",
    "ndtr",
    "ndtri",
    "polygamma",
    "psi",
    "round",
    "scaled_modified_bessel_k0",
    "scaled_modified_bessel_k1",
    "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w",
    "sinc",
    "softmax",
    "spherical_bessel_j0",
    "xlog1py",
    "xlogy",
    "zeta",
]


def _pair(input: Any, other: Any, op: str) -> tuple[Tensor, Any]:  # noqa: A002
    # torch.special's two-operand functions take a number for either operand: a number first becomes a 0-d tensor of
    # the other's float dtype
    if isinstance(input, Tensor):
        return input, other
    if not isinstance(other, Tensor):
        raise TypeError(f"special.{op}: one operand must be a Tensor, got {type(input).__name__} and a number")
    dtype = other.dtype if dtypes.is_float(other.dtype) else dtypes.default_float
    return Tensor(float(input), dtype=dtype, device=other.device), other


def erf(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.erf."""
    return input.erf()


def erfc(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.erfc."""
    return input.erfc()


def erfcx(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.erfcx: exp(x**2) erfc(x)."""
    return input.erfcx()


def erfinv(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.erfinv."""
    return input.erfinv()


def expit(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.expit: the logistic sigmoid."""
    return input.sigmoid()


def logit(input: Tensor, eps: float | None = None) -> Tensor:  # noqa: A002
    """torch.special.logit: log(p / (1 - p)), p clamped to [eps, 1 - eps] when `eps` is given."""
    return input.logit(eps)


def gammaln(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.gammaln: log |Gamma(x)|."""
    return input.lgamma()


def digamma(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.digamma."""
    return input.digamma()


psi = digamma


def polygamma(n: int, input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.polygamma(n, x): the n-th derivative of digamma."""
    return input.polygamma(n)


def multigammaln(input: Tensor, p: int) -> Tensor:  # noqa: A002
    """torch.special.multigammaln: the multivariate log-gamma of dimension `p`."""
    return input.multigammaln(p)


def i0(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.i0."""
    return input.i0()


def i0e(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.i0e."""
    return input.i0e()


def i1(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.i1."""
    return input.i1()


def i1e(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.i1e."""
    return input.i1e()


def ndtr(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.ndtr: the standard normal CDF."""
    return input.ndtr()


def ndtri(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.ndtri: the standard normal quantile."""
    return input.ndtri()


def log_ndtr(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.log_ndtr."""
    return input.log_ndtr()


def xlogy(input: Tensor | float, other: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.xlogy: x log(y), 0 where x is 0."""
    x, y = _pair(input, other, "xlogy")
    return x.xlogy(y)


def xlog1py(input: Tensor | float, other: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.xlog1py: x log1p(y), 0 where x is 0."""
    x, y = _pair(input, other, "xlog1py")
    return x.xlog1py(y)


def zeta(input: Tensor | float, other: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.zeta(x, q): the Hurwitz zeta function."""
    x, q = _pair(input, other, "zeta")
    return x.zeta(q)


def entr(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.entr: -x log(x)."""
    return input.entr()


def sinc(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.sinc: sin(pi x) / (pi x)."""
    return input.sinc()


def gammainc(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """torch.special.gammainc(a, x): the regularized lower incomplete gamma function."""
    return input.igamma(other)


def gammaincc(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """torch.special.gammaincc(a, x): the regularized upper incomplete gamma function."""
    return input.igammac(other)


def exp2(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.exp2."""
    return input.exp2()


def expm1(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.expm1."""
    return input.expm1()


def log1p(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.log1p."""
    return input.log1p()


def round(input: Tensor, *, decimals: int = 0) -> Tensor:  # noqa: A001, A002
    """torch.special.round: to `decimals` places, halves to even."""
    return input.round(decimals)


def softmax(input: Tensor, dim: int, *, dtype: DType | None = None) -> Tensor:  # noqa: A002
    """torch.special.softmax."""
    return input.softmax(dim, dtype)


def log_softmax(input: Tensor, dim: int, *, dtype: DType | None = None) -> Tensor:  # noqa: A002
    """torch.special.log_softmax."""
    return input.log_softmax(dim, dtype)


def logsumexp(input: Tensor, dim: int | tuple[int, ...], keepdim: bool = False) -> Tensor:  # noqa: A002
    """torch.special.logsumexp."""
    return input.logsumexp(dim, keepdim)


# ---------------------------------------------------------------------------------------------------------------------
# Bessel functions and airy_ai (tensor/special_bessel.py)


def bessel_j0(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.bessel_j0: the Bessel function of the first kind of order 0."""
    return input.bessel_j0()


def bessel_j1(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.bessel_j1: the Bessel function of the first kind of order 1."""
    return input.bessel_j1()


def bessel_y0(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.bessel_y0: the Bessel function of the second kind of order 0."""
    return input.bessel_y0()


def bessel_y1(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.bessel_y1: the Bessel function of the second kind of order 1."""
    return input.bessel_y1()


def modified_bessel_i0(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.modified_bessel_i0: the modified Bessel function of the first kind of order 0."""
    return input.modified_bessel_i0()


def modified_bessel_i1(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.modified_bessel_i1: the modified Bessel function of the first kind of order 1."""
    return input.modified_bessel_i1()


def modified_bessel_k0(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.modified_bessel_k0: the modified Bessel function of the second kind of order 0."""
    return input.modified_bessel_k0()


def modified_bessel_k1(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.modified_bessel_k1: the modified Bessel function of the second kind of order 1."""
    return input.modified_bessel_k1()


def scaled_modified_bessel_k0(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.scaled_modified_bessel_k0: exp(x) K0(x)."""
    return input.scaled_modified_bessel_k0()


def scaled_modified_bessel_k1(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.scaled_modified_bessel_k1: exp(x) K1(x)."""
    return input.scaled_modified_bessel_k1()


def spherical_bessel_j0(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.spherical_bessel_j0: the spherical Bessel function of the first kind of order 0, sin(x) / x."""
    return input.spherical_bessel_j0()


def airy_ai(input: Tensor) -> Tensor:  # noqa: A002
    """torch.special.airy_ai: the Airy function Ai."""
    return input.airy_ai()


# ---------------------------------------------------------------------------------------------------------------------
# orthogonal polynomials (tensor/special_polynomials.py): a number for either operand


def chebyshev_polynomial_t(input: Tensor | float, n: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.chebyshev_polynomial_t(input, n): the Chebyshev polynomial of the first kind T_n(x)."""
    x, degree = _pair(input, n, "chebyshev_polynomial_t")
    return x.chebyshev_polynomial_t(degree)


def chebyshev_polynomial_u(input: Tensor | float, n: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.chebyshev_polynomial_u(input, n): the Chebyshev polynomial of the second kind U_n(x)."""
    x, degree = _pair(input, n, "chebyshev_polynomial_u")
    return x.chebyshev_polynomial_u(degree)


def chebyshev_polynomial_v(input: Tensor | float, n: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.chebyshev_polynomial_v(input, n): the Chebyshev polynomial of the third kind V_n(x)."""
    x, degree = _pair(input, n, "chebyshev_polynomial_v")
    return x.chebyshev_polynomial_v(degree)


def chebyshev_polynomial_w(input: Tensor | float, n: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.chebyshev_polynomial_w(input, n): the Chebyshev polynomial of the fourth kind W_n(x)."""
    x, degree = _pair(input, n, "chebyshev_polynomial_w")
    return x.chebyshev_polynomial_w(degree)


def shifted_chebyshev_polynomial_t(input: Tensor | float, n: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.shifted_chebyshev_polynomial_t(input, n): T_n(2x - 1)."""
    x, degree = _pair(input, n, "shifted_chebyshev_polynomial_t")
    return x.shifted_chebyshev_polynomial_t(degree)


def shifted_chebyshev_polynomial_u(input: Tensor | float, n: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.shifted_chebyshev_polynomial_u(input, n): U_n(2x - 1)."""
    x, degree = _pair(input, n, "shifted_chebyshev_polynomial_u")
    return x.shifted_chebyshev_polynomial_u(degree)


def shifted_chebyshev_polynomial_v(input: Tensor | float, n: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.shifted_chebyshev_polynomial_v(input, n): V_n(2x - 1)."""
    x, degree = _pair(input, n, "shifted_chebyshev_polynomial_v")
    return x.shifted_chebyshev_polynomial_v(degree)


def shifted_chebyshev_polynomial_w(input: Tensor | float, n: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.shifted_chebyshev_polynomial_w(input, n): W_n(2x - 1)."""
    x, degree = _pair(input, n, "shifted_chebyshev_polynomial_w")
    return x.shifted_chebyshev_polynomial_w(degree)


def hermite_polynomial_h(input: Tensor | float, n: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.hermite_polynomial_h(input, n): the physicists' Hermite polynomial H_n(x)."""
    x, degree = _pair(input, n, "hermite_polynomial_h")
    return x.hermite_polynomial_h(degree)


def hermite_polynomial_he(input: Tensor | float, n: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.hermite_polynomial_he(input, n): the probabilists' Hermite polynomial He_n(x)."""
    x, degree = _pair(input, n, "hermite_polynomial_he")
    return x.hermite_polynomial_he(degree)


def laguerre_polynomial_l(input: Tensor | float, n: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.laguerre_polynomial_l(input, n): the Laguerre polynomial L_n(x)."""
    x, degree = _pair(input, n, "laguerre_polynomial_l")
    return x.laguerre_polynomial_l(degree)


def legendre_polynomial_p(input: Tensor | float, n: Tensor | float) -> Tensor:  # noqa: A002
    """torch.special.legendre_polynomial_p(input, n): the Legendre polynomial P_n(x)."""
    x, degree = _pair(input, n, "legendre_polynomial_p")
    return x.legendre_polynomial_p(degree)
