"""torch.special's orthogonal polynomials P_n(x) as Tensor methods, `x.chebyshev_polynomial_t(n)` for
torch.special.chebyshev_polynomial_t(x, n): Chebyshev's T, U, V, W and their shifted forms on [0, 1] (of 2x - 1), the
Hermite polynomials H (physicists') and He (probabilists'), Laguerre's L and Legendre's P. Compared with torch in
tests/test_special_polynomials.py.

Each follows torch's piecewise definition, in its order: 0 for n < 0; the values at the interval's ends (x = +-1, or
x = 0 and 1 for the shifted ones; Laguerre's 1 at x = 0); inside (-1, 1) the trigonometric forms from torch's degree
on (T_n = cos(n acos x) from n = 7, U, V, W from 9, the shifted T, U, V from 7 and W from 5); 1 for n = 0, P_1 for
n = 1; Hermite's NaN past degree 128 in float32 and 512 in float64 (torch's limit); elsewhere the family's
three-term recurrence, with torch's arithmetic in the result's dtype (so overflow turns into inf, then NaN, where
torch's does). Where torch reads an uninitialized value (a NaN x with n >= 2, Hermite's H aside) the result here is
NaN.

n is a tensor or a number (x may be a number in `uopkit.special`'s functions); they broadcast, and the result's dtype
is their promotion (ints to float32). n is taken in that dtype and truncated, as torch's cast to int64 (NaN, +-inf
and magnitudes from 2**63 on count as negative: 0).

The recurrence up to degree 32 is built into the graph. Past it, it runs in chunks of 32 steps that store the last
two values between them, every chunk the same kernels (its first degree is read from a one-element buffer), compiled
once; how far it runs is the largest degree of an element that needs it, read from the device for a tensor n (and
for a number n past 32). No gradient: the results are detached, as torch's."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import DType, dtypes, to_numpy_dtype

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# degrees of the recurrence built into one graph; past them, kernels of as many steps each
_UNROLLED = 32
# torch's Hermite polynomials are NaN past these degrees
_HERMITE_LIMIT = {dtypes.float32: 128, dtypes.float64: 512}

# a degree: a Python int (the same for every element) or a float tensor of whole numbers
Degree = Any


def _where(cond: Any, a: Any, b: Any) -> Any:
    # cond.where(a, b), for a Python bool too (a degree given as a number decides at once)
    if cond is True or cond is False:
        return a if cond else b
    return cond.where(a, b)


def _both(a: Any, b: Any) -> Any:
    if a is True or a is False:
        return b if a else False
    if b is True or b is False:
        return a if b else False
    return a & b


def _not(a: Any) -> Any:
    return (not a) if a is True or a is False else ~a


def _even(n: Degree) -> Any:
    return n % 2 == 0 if isinstance(n, int) else (n * 0.5).floor() * 2 == n


def _signed(n: Degree, magnitude: Any) -> Any:
    # (-1)^n magnitude
    return _where(_even(n), magnitude, -magnitude)


def _degree(x: Tensor, n: Any, op: str) -> tuple[Tensor, Degree, DType]:
    """(x, n, the result's dtype): x and n broadcast to their promoted float dtype (half floats computed in float32),
    detached; n as a Python int, or a tensor of x's dtype truncated (NaN, +-inf and magnitudes from 2**63 on as -1:
    torch's cast to int64 makes those its smallest value)."""
    if isinstance(n, Tensor):
        a, b = x._broadcasted(n, False, op, floats=True)
        if not dtypes.is_float(a.dtype):
            a, b = a._float(), b._float()
        dtype = a.dtype
        if dtype in dtypes.halves:
            a, b = a.float(), b.float()
        a, b = a.detach(), b.detach()
        return a, (b.abs() < 2.0**63).where(b.trunc(), -1.0), dtype
    if not isinstance(n, int | float):
        raise TypeError(f"{op}: n must be a Tensor or a number, got {type(n).__name__}")
    a = x._float()
    dtype = a.dtype
    if dtype in dtypes.halves:
        a = a.float()
    # (the number as the dtype holds it, then truncated: 2.9999999 is 3 in float32)
    value = float(np.array(n, dtype=to_numpy_dtype(dtype)))
    return a.detach(), int(value) if math.isfinite(value) and abs(value) < 2.0**63 else -1, dtype


Step = Callable[[Any, "Tensor", "Tensor", "Tensor"], "Tensor"]


def _recurrence(x: Tensor, n: Degree, first: Tensor, step: Step, needs: Any, limit: int | None = None) -> Tensor:
    """P_n by `step(m, x, P_(m-2), P_(m-1)) = P_m` from P_0 = 1 and P_1 = `first`, for the elements where `needs` (a
    mask, or True) is set (the others get some P_k, k <= n). Elements stop at their own n, none past `limit`."""
    if isinstance(n, int):
        top = n if limit is None or n <= limit else 0
        if top > _UNROLLED and needs is not True and not needs.any().item():
            top = 0
    elif x.numel() == 0:
        top = 0
    else:
        wanted = needs if limit is None else _both(needs, n <= limit)
        top = int(_where(wanted, n, 0.0).max().item())
    p, q = x.ones_like(), first
    if top <= _UNROLLED:
        for m in range(2, top + 1):
            r = step(m, x, p, q)
            if isinstance(n, int):
                p, q = q, r
            else:
                done = n < m
                p, q = done.where(p, q), done.where(q, r)
        return q
    # chunks of _UNROLLED steps: the first degree of each comes from a buffer, so every chunk is the same kernel
    x = x.contiguous().realize()
    if not isinstance(n, int):
        n = n.contiguous().realize()
    for start in range(2, top + 1, _UNROLLED):
        base = Tensor([float(start)], dtype=x.dtype, device=x.device).reshape((1,) * x.ndim).expand(x.shape)
        for j in range(_UNROLLED):
            m = base + j
            r = step(m, x, p, q)
            done = m > n
            p, q = done.where(p, q), done.where(q, r)
        p, q = p.contiguous(), q.contiguous()
        p.realize(q)
    return q


# the steps: torch's arithmetic for the degree m each computes (k = m - 1 in torch's loops)
def _chebyshev_step(m: Any, y: Tensor, p: Tensor, q: Tensor) -> Tensor:
    return (y + y) * q - p


def _hermite_step(m: Any, x: Tensor, p: Tensor, q: Tensor) -> Tensor:
    return (x + x) * q - (m - 1) * 2 * p


def _hermite_e_step(m: Any, x: Tensor, p: Tensor, q: Tensor) -> Tensor:
    return x * q - (m - 1) * p


def _laguerre_step(m: Any, x: Tensor, p: Tensor, q: Tensor) -> Tensor:
    k = m - 1
    return (((k + k) + (1 - x)) * q - k * p) / m


def _legendre_step(m: Any, x: Tensor, p: Tensor, q: Tensor) -> Tensor:
    k = m - 1
    return ((k + k + 1) * x * q - k * p) / m


# ---------------------------------------------------------------------------------------------------------------------
# the families

# Chebyshev's kinds: (P_1 of y, the degree past which torch takes the trigonometric form, unshifted and shifted)
_CHEBYSHEV = {
    "t": (lambda y: y, 6, 6),
    "u": (lambda y: y + y, 8, 6),
    "v": (lambda y: y + y - 1, 8, 6),
    "w": (lambda y: y + y + 1, 8, 4),
}


def _chebyshev_trig(kind: str, y: Tensor, n: Degree, x_positive: Tensor | None) -> Tensor:
    """The trigonometric form of P_n(y) for |y| < 1 (theta = acos y), with torch's values where its divisor is exact
    (sin(theta) = 0, sin(theta/2) = 1, cos(theta/2) = 1)."""
    theta = y.acos()
    if kind == "t":
        return (n * theta).cos()
    if kind == "u":
        s = theta.sin()
        return (s != 0).where(((n + 1) * theta).sin() / s, (n + 1) * ((n + 1) * theta).cos() / y)
    half = theta * 0.5
    if kind == "v":
        return (half.sin() != 1).where(((n + 0.5) * theta).cos() / half.cos(), _signed(n, n + n + 1))
    fallback = _signed(n, 1) if x_positive is None else x_positive.where(n + n + 1, _signed(n, 1))
    return (half.cos() != 1).where(((n + 0.5) * theta).sin() / half.sin(), fallback)


def _chebyshev_ends(kind: str, n: Degree) -> tuple[Any, Any]:
    # P_n(1) and P_n(-1)
    if kind == "t":
        return 1, _signed(n, 1)
    if kind == "u":
        return n + 1, _signed(n, n + 1)
    if kind == "v":
        return 1, _signed(n, n + n + 1)
    return n + n + 1, _signed(n, 1)


def _chebyshev(self: Tensor, n: Any, kind: str, shifted: bool) -> Tensor:
    name = f"{'shifted_' if shifted else ''}chebyshev_polynomial_{kind}"
    x, n, dtype = _degree(self, n, name)
    first_of, degree, shifted_degree = _CHEBYSHEV[kind]
    # the shifted ones are P_n(2x - 1), their ends x = 1 and x = 0 (torch's tests are on x)
    y = x + x - 1 if shifted else x
    at_one, at_minus_one = x == 1, x == (0 if shifted else -1)
    ends = at_one | at_minus_one
    trig = _both(n > (shifted_degree if shifted else degree), y.abs() < 1)
    out = _recurrence(y, n, first_of(y), _chebyshev_step, _both(n >= 2, _both(~ends, _not(trig))))
    out = _where(n == 0, x.ones_like(), _where(n == 1, first_of(y), out))
    if trig is not False:
        # (torch's W at cos(theta/2) = 1 reads x's sign, unshifted)
        out = _where(trig, _chebyshev_trig(kind, y, n, None if shifted else x > 0), out)
    one, minus_one = _chebyshev_ends(kind, n)
    out = at_minus_one.where(minus_one, at_one.where(one, out))
    return _where(n < 0, x.zeros_like(), out).cast(dtype)


def _hermite(self: Tensor, n: Any, probabilists: bool) -> Tensor:
    x, n, dtype = _degree(self, n, "hermite_polynomial_he" if probabilists else "hermite_polynomial_h")
    limit = _HERMITE_LIMIT[x.dtype]
    first = x if probabilists else x + x
    out = _recurrence(x, n, first, _hermite_e_step if probabilists else _hermite_step, True, limit)
    out = _where(n == 0, x.ones_like(), _where(n == 1, first, _where(n > limit, x.full_like(math.nan), out)))
    return _where(n < 0, x.zeros_like(), out).cast(dtype)


def _laguerre(self: Tensor, n: Any) -> Tensor:
    x, n, dtype = _degree(self, n, "laguerre_polynomial_l")
    zero = x == 0
    out = _recurrence(x, n, 1 - x, _laguerre_step, _both(n >= 2, ~zero))
    out = zero.where(1.0, _where(n == 0, x.ones_like(), _where(n == 1, 1 - x, out)))
    return _where(n < 0, x.zeros_like(), out).cast(dtype)


def _legendre(self: Tensor, n: Any) -> Tensor:
    x, n, dtype = _degree(self, n, "legendre_polynomial_p")
    ends = x.abs() == 1
    out = _recurrence(x, n, x, _legendre_step, _both(n >= 2, ~ends))
    out = ends.where((x > 0).where(1.0, _signed(n, 1.0)), _where(n == 0, x.ones_like(), _where(n == 1, x, out)))
    return _where(n < 0, x.zeros_like(), out).cast(dtype)


# ---------------------------------------------------------------------------------------------------------------------
# the methods


class PolynomialsMixin:
    __slots__ = ()

    def chebyshev_polynomial_t(self, n: Any) -> Tensor:
        """The Chebyshev polynomial of the first kind T_n(x), as torch.special.chebyshev_polynomial_t(x, n): n a
        tensor or a number, broadcast with x and truncated; cos(n acos x) inside (-1, 1) from n = 7, the recurrence
        T_(k+1) = 2x T_k - T_(k-1) elsewhere; 0 for n < 0. No gradient (the result is detached, as torch's).

        >>> Tensor([0.5, 2.0]).chebyshev_polynomial_t(3).tolist()
        [-1.0, 26.0]
        """
        return _chebyshev(self, n, "t", False)

    def chebyshev_polynomial_u(self, n: Any) -> Tensor:
        """The Chebyshev polynomial of the second kind U_n(x), as torch.special.chebyshev_polynomial_u(x, n):
        sin((n + 1) theta) / sin(theta), theta = acos x, inside (-1, 1) from n = 9, the recurrence of T from U_1 = 2x
        elsewhere; 0 for n < 0. No gradient (the result is detached, as torch's).

        >>> Tensor([0.5, 2.0]).chebyshev_polynomial_u(3).tolist()
        [-1.0, 56.0]
        """
        return _chebyshev(self, n, "u", False)

    def chebyshev_polynomial_v(self, n: Any) -> Tensor:
        """The Chebyshev polynomial of the third kind V_n(x), as torch.special.chebyshev_polynomial_v(x, n):
        cos((n + 1/2) theta) / cos(theta / 2) inside (-1, 1) from n = 9, the recurrence of T from V_1 = 2x - 1
        elsewhere; 0 for n < 0. No gradient (the result is detached, as torch's).

        >>> Tensor([0.5, 2.0]).chebyshev_polynomial_v(3).tolist()
        [-1.0, 41.0]
        """
        return _chebyshev(self, n, "v", False)

    def chebyshev_polynomial_w(self, n: Any) -> Tensor:
        """The Chebyshev polynomial of the fourth kind W_n(x), as torch.special.chebyshev_polynomial_w(x, n):
        sin((n + 1/2) theta) / sin(theta / 2) inside (-1, 1) from n = 9, the recurrence of T from W_1 = 2x + 1
        elsewhere; 0 for n < 0. No gradient (the result is detached, as torch's).

        >>> Tensor([0.5, 2.0]).chebyshev_polynomial_w(3).tolist()
        [-1.0, 71.0]
        """
        return _chebyshev(self, n, "w", False)

    def shifted_chebyshev_polynomial_t(self, n: Any) -> Tensor:
        """T_n(2x - 1), the Chebyshev polynomial of the first kind on [0, 1], as
        torch.special.shifted_chebyshev_polynomial_t(x, n) (its trigonometric form inside from n = 7). No gradient
        (the result is detached, as torch's).

        >>> Tensor([0.25, 1.5]).shifted_chebyshev_polynomial_t(3).tolist()
        [1.0, 26.0]
        """
        return _chebyshev(self, n, "t", True)

    def shifted_chebyshev_polynomial_u(self, n: Any) -> Tensor:
        """U_n(2x - 1), the Chebyshev polynomial of the second kind on [0, 1], as
        torch.special.shifted_chebyshev_polynomial_u(x, n) (its trigonometric form inside from n = 7). No gradient
        (the result is detached, as torch's).

        >>> Tensor([0.25, 1.5]).shifted_chebyshev_polynomial_u(3).tolist()
        [1.0, 56.0]
        """
        return _chebyshev(self, n, "u", True)

    def shifted_chebyshev_polynomial_v(self, n: Any) -> Tensor:
        """V_n(2x - 1), the Chebyshev polynomial of the third kind on [0, 1], as
        torch.special.shifted_chebyshev_polynomial_v(x, n) (its trigonometric form inside from n = 7). No gradient
        (the result is detached, as torch's).

        >>> Tensor([0.25, 1.5]).shifted_chebyshev_polynomial_v(3).tolist()
        [1.0, 41.0]
        """
        return _chebyshev(self, n, "v", True)

    def shifted_chebyshev_polynomial_w(self, n: Any) -> Tensor:
        """W_n(2x - 1), the Chebyshev polynomial of the fourth kind on [0, 1], as
        torch.special.shifted_chebyshev_polynomial_w(x, n) (its trigonometric form inside from n = 5). No gradient
        (the result is detached, as torch's).

        >>> Tensor([0.25, 1.5]).shifted_chebyshev_polynomial_w(3).tolist()
        [1.0, 71.0]
        """
        return _chebyshev(self, n, "w", True)

    def hermite_polynomial_h(self, n: Any) -> Tensor:
        """The physicists' Hermite polynomial H_n(x), as torch.special.hermite_polynomial_h(x, n): the recurrence
        H_(k+1) = 2x H_k - 2k H_(k-1); 0 for n < 0, NaN past n = 128 (float32) or 512 (float64), torch's limit. No
        gradient (the result is detached, as torch's).

        >>> Tensor([0.5, 2.0]).hermite_polynomial_h(3).tolist()
        [-5.0, 40.0]
        """
        return _hermite(self, n, False)

    def hermite_polynomial_he(self, n: Any) -> Tensor:
        """The probabilists' Hermite polynomial He_n(x), as torch.special.hermite_polynomial_he(x, n): the recurrence
        He_(k+1) = x He_k - k He_(k-1); 0 for n < 0, NaN past n = 128 (float32) or 512 (float64), torch's limit. No
        gradient (the result is detached, as torch's).

        >>> Tensor([0.5, 2.0]).hermite_polynomial_he(3).tolist()
        [-1.375, 2.0]
        """
        return _hermite(self, n, True)

    def laguerre_polynomial_l(self, n: Any) -> Tensor:
        """The Laguerre polynomial L_n(x), as torch.special.laguerre_polynomial_l(x, n): the recurrence
        (k + 1) L_(k+1) = (2k + 1 - x) L_k - k L_(k-1); 1 at x = 0, 0 for n < 0. No gradient (the result is
        detached, as torch's).

        >>> Tensor([0.0, 2.0]).laguerre_polynomial_l(2).tolist()
        [1.0, -1.0]
        """
        return _laguerre(self, n)

    def legendre_polynomial_p(self, n: Any) -> Tensor:
        """The Legendre polynomial P_n(x), as torch.special.legendre_polynomial_p(x, n): the recurrence
        (k + 1) P_(k+1) = (2k + 1) x P_k - k P_(k-1); +-1 at x = +-1, 0 for n < 0. No gradient (the result is
        detached, as torch's).

        >>> Tensor([0.5, 2.0]).legendre_polynomial_p(2).tolist()
        [-0.125, 5.5]
        """
        return _legendre(self, n)
