"""torch.special's functions by torch.special's names (`uopkit.special.erfinv(x)` for `torch.special.erfinv(x)`):
thin functions over the Tensor methods of tensor/special.py, tensor/special_torch.py and the others, with
torch.special's argument order (`polygamma(n, x)`) and its aliases (`expit` is sigmoid, `gammaln` lgamma, `psi`
digamma, `gammainc`/`gammaincc` igamma/igammac). What has no method here (the Bessel functions of the first and
second kind, the orthogonal polynomials, airy_ai, ...) is not defined.

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
    "i0",
    "i0e",
    "i1",
    "i1e",
    "log1p",
    "log_ndtr",
    "log_softmax",
    "logit",
    "logsumexp",
    "multigammaln",
    "ndtr",
    "ndtri",
    "polygamma",
    "psi",
    "round",
    "sinc",
    "softmax",
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
