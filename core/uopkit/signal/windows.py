"""torch.signal.windows: SciPy's window functions by torch's definitions (`M` points, keyword-only options, `sym=True`
for a symmetric window, `sym=False` for a periodic one: the symmetric window of M + 1 points without its last, the
form a DFT wants). Each is torch's function of torch's positions (a `linspace` in the dtype, float32 or float64, whose
rounding moves a float32 exponential window of 401 points by 7e-6), computed in float64 on the host and rounded once
to the dtype (torch computes the function in the dtype too: its last bit can differ).

>>> from uopkit.signal import windows
>>> [round(v, 4) for v in windows.gaussian(5, std=1.0).tolist()]
[0.1353, 0.6065, 1.0, 0.6065, 0.1353]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from uopkit.dtype import DType, dtypes, to_dtype
from uopkit.tensor import Tensor

__all__ = [
    "bartlett",
    "blackman",
    "cosine",
    "exponential",
    "gaussian",
    "general_cosine",
    "general_hamming",
    "hamming",
    "hann",
    "kaiser",
    "nuttall",
]


def _made(
    name: str,
    M: int,
    span: tuple[float, float],
    shape: Callable[[np.ndarray], np.ndarray],
    dtype: DType | str | None,
    kwargs: dict,
) -> Tensor:
    # torch's checks (its ValueErrors), then `shape` of M positions from span[0] to span[1] spaced in the dtype,
    # rounded once to the dtype; device= and requires_grad= are the constructor's
    if isinstance(M, bool) or not isinstance(M, (int, np.integer)):
        raise TypeError(f"{name}: M must be an int, got {type(M).__name__}")
    if M < 0:
        raise ValueError(f"{name} requires non-negative window length, got M={M}")
    dt = dtypes.default_float if dtype is None else to_dtype(dtype)
    if dt not in (dtypes.float32, dtypes.float64):
        raise ValueError(f"{name} expects float32 or float64 dtypes, got: {dt}")
    if M == 0:
        return Tensor(np.zeros(0), dtype=dt, **kwargs)
    positions = Tensor.linspace(span[0], span[1], M, dtype=dt).numpy().astype(np.float64)
    return Tensor(shape(positions), dtype=dt, **kwargs)


def _span(M: int, sym: bool) -> int:
    # the denominator of a window's positions: M - 1 for a symmetric window, M for a periodic one (of M > 1 points)
    return M if not sym and M > 1 else M - 1


def exponential(
    M: int,
    *,
    center: float | None = None,
    tau: float = 1.0,
    sym: bool = True,
    dtype: DType | str | None = None,
    **kwargs: Any,
) -> Tensor:
    """exp(-|n - center| / tau), centred at (M - 1) / 2 (M / 2 periodic) unless `center` is given (periodic only).

    >>> [round(v, 4) for v in exponential(4, tau=2.0).tolist()]
    [0.4724, 0.7788, 0.7788, 0.4724]
    """
    if tau <= 0:
        raise ValueError(f"exponential: tau must be positive, got {tau}")
    if sym and center is not None:
        raise ValueError("exponential: center must be None for symmetric windows (sym=True)")
    mid = _span(M, sym) / 2.0 if center is None else center
    return _made("exponential", M, (-mid / tau, (M - 1 - mid) / tau), lambda k: np.exp(-np.abs(k)), dtype, kwargs)


def cosine(M: int, *, sym: bool = True, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
    """sin(pi (n + 0.5) / M) (M + 1 in place of M for a periodic window), SciPy's cosine window.

    >>> [round(v, 4) for v in cosine(3).tolist()]
    [0.5, 1.0, 0.5]
    """
    step = math.pi / max(1, M + 1 if not sym and M > 1 else M)
    return _made("cosine", M, (0.5 * step, (M - 0.5) * step), np.sin, dtype, kwargs)


def gaussian(M: int, *, std: float = 1.0, sym: bool = True, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
    """exp(-(n - c)^2 / (2 std^2)) with c the window's centre.

    >>> [round(v, 4) for v in gaussian(3, std=2.0).tolist()]
    [0.8825, 1.0, 0.8825]
    """
    if std <= 0:
        raise ValueError(f"gaussian: std must be positive, got {std}")
    mid, scale = _span(M, sym) / 2.0, 1 / (std * math.sqrt(2))
    return _made("gaussian", M, (-mid * scale, (M - 1 - mid) * scale), lambda k: np.exp(-k * k), dtype, kwargs)


def kaiser(M: int, *, beta: float = 12.0, sym: bool = True, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
    """I0(beta sqrt(1 - (2n / span - 1)^2)) / I0(beta), I0 the modified Bessel function of order 0.

    >>> [round(v, 4) for v in kaiser(3, beta=5.0).tolist()]
    [0.0367, 1.0, 0.0367]
    """
    if beta < 0:
        raise ValueError(f"kaiser: beta must be non-negative, got {beta}")
    if M == 1:
        return _made("kaiser", M, (0.0, 0.0), np.ones_like, dtype, kwargs)

    def kaiser_shape(k: np.ndarray) -> np.ndarray:
        return np.i0(np.sqrt(np.clip(beta * beta - k * k, 0, None))) / np.i0(beta)

    end = min(beta, -beta + (M - 1) * 2.0 * beta / _span(M, sym))
    return _made("kaiser", M, (-beta, end), kaiser_shape, dtype, kwargs)


def bartlett(M: int, *, sym: bool = True, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
    """The triangle 1 - |2n / span - 1|.

    >>> bartlett(5).tolist()
    [0.0, 0.5, 1.0, 0.5, 0.0]
    """
    if M == 1:
        return _made("bartlett", M, (0.0, 0.0), np.ones_like, dtype, kwargs)
    return _made("bartlett", M, (-1.0, -1 + (M - 1) * 2 / _span(M, sym)), lambda k: 1 - np.abs(k), dtype, kwargs)


def general_cosine(
    M: int, *, a: Iterable[float], sym: bool = True, dtype: DType | str | None = None, **kwargs: Any
) -> Tensor:
    """sum_i (-1)^i a_i cos(2 pi i n / span), a weighted sum of cosines (Hann, Hamming, Blackman, Nuttall).

    >>> general_cosine(3, a=[0.5, 0.5]).tolist()
    [0.0, 1.0, 0.0]
    """
    if not isinstance(a, Iterable):
        raise TypeError("general_cosine: the coefficients a must be a list or tuple")
    coefficients = [float(c) for c in a]
    if M > 1 and not coefficients:
        raise ValueError("general_cosine: the coefficients a can't be empty")

    if M == 1:
        return _made("general_cosine", M, (0.0, 0.0), np.ones_like, dtype, kwargs)

    def cosines(k: np.ndarray) -> np.ndarray:
        return sum((-1) ** i * c * np.cos(i * k) for i, c in enumerate(coefficients))

    return _made("general_cosine", M, (0.0, (M - 1) * 2 * math.pi / _span(M, sym)), cosines, dtype, kwargs)


def general_hamming(
    M: int, *, alpha: float = 0.54, sym: bool = True, dtype: DType | str | None = None, **kwargs: Any
) -> Tensor:
    """alpha - (1 - alpha) cos(2 pi n / span).

    >>> [round(v, 2) for v in general_hamming(3, alpha=0.54).tolist()]
    [0.08, 1.0, 0.08]
    """
    return general_cosine(M, a=[alpha, 1.0 - alpha], sym=sym, dtype=dtype, **kwargs)


def hamming(M: int, *, sym: bool = True, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
    """The Hamming window, general_hamming with alpha 0.54.

    >>> [round(v, 2) for v in hamming(3).tolist()]
    [0.08, 1.0, 0.08]
    """
    return general_hamming(M, sym=sym, dtype=dtype, **kwargs)


def hann(M: int, *, sym: bool = True, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
    """The Hann window, general_hamming with alpha 0.5.

    >>> hann(4, sym=False).tolist()
    [0.0, 0.5, 1.0, 0.5]
    """
    return general_hamming(M, alpha=0.5, sym=sym, dtype=dtype, **kwargs)


def blackman(M: int, *, sym: bool = True, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
    """The Blackman window, general_cosine with a = [0.42, 0.5, 0.08].

    >>> [abs(round(v, 2)) for v in blackman(3).tolist()]
    [0.0, 1.0, 0.0]
    """
    return general_cosine(M, a=[0.42, 0.5, 0.08], sym=sym, dtype=dtype, **kwargs)


def nuttall(M: int, *, sym: bool = True, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
    """Nuttall's minimum 4-term Blackman-Harris window.

    >>> [round(v, 4) for v in nuttall(3).tolist()]
    [0.0004, 1.0, 0.0004]
    """
    return general_cosine(M, a=[0.3635819, 0.4891775, 0.1365995, 0.0106411], sym=sym, dtype=dtype, **kwargs)
