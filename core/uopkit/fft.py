"""torch.fft's functions by torch.fft's names (`uopkit.fft.rfft(x, n=64, dim=-1, norm="ortho")`): discrete Fourier
transforms of real tensors and of complex ones (`ComplexTensor`, tensor/complex_tensor.py), with torch's `n=`/`s=`
(zero padding or trimming of the input), `dim=` and `norm=` ("backward": the inverse scales by 1/n, "ortho": both by
1/sqrt(n), "forward": the forward one by 1/n).

Each 1-D transform is a product with cos and sin matrices of the axis (built in float64, exact angles from the integer
j*k mod n, then cast to the input's float dtype, and kept for reuse): every kernel is a real matmul, any n works, and
gradients are the matmuls' (for a real loss L, a complex input's gradient is dL/dRe + i dL/dIm, as torch's). The cost
is O(n^2) per axis, so an axis longer than 1024 with a factor n = n1 n2 is split (the "four-step" transform: n2
transforms of length n1, a twiddle product, n1 transforms of length n2, each split again while long): O(n (n1 + n2))
work and matrices of n1^2 and n2^2 entries. A long prime axis stays one O(n^2) product.

>>> from uopkit import Tensor, fft
>>> [round(abs(v), 4) for v in fft.fft(Tensor([1.0, 0.0, 0.0, 0.0])).tolist()]
[1.0, 1.0, 1.0, 1.0]
>>> [round(v, 4) for v in fft.irfft(fft.rfft(Tensor([1.0, 2.0, 3.0])), n=3).tolist()]
[1.0, 2.0, 3.0]
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from uopkit.dtype import DType, dtypes
from uopkit.tensor import Tensor
from uopkit.tensor.complex_tensor import ComplexOpError, ComplexTensor
from uopkit.tensor.support import ArgumentError, ShapeError

__all__ = [
    "fft",
    "ifft",
    "rfft",
    "irfft",
    "hfft",
    "ihfft",
    "fft2",
    "ifft2",
    "rfft2",
    "irfft2",
    "fftn",
    "ifftn",
    "rfftn",
    "irfftn",
    "fftfreq",
    "rfftfreq",
    "fftshift",
    "ifftshift",
    "stft",
    "istft",
]

# the matrices of recent transforms, realized: (kind, n, scale, dtype, device) -> (cos, sin), the latest kept up to
# a total of _MATRICES_KEPT_BYTES (the newest always)
_MATRICES: OrderedDict[tuple, tuple[Tensor, Tensor]] = OrderedDict()
_MATRICES_KEPT_BYTES = 256 << 20
# an axis longer than this with a factor is split into shorter transforms (_dft_last)
_DIRECT_MAX = 1024
_NORMS = ("backward", "ortho", "forward")


def _scale(norm: str | None, n: int, inverse: bool, op: str) -> float:
    norm = "backward" if norm is None else norm
    if norm not in _NORMS:
        raise ArgumentError(f"{op}: norm must be one of {', '.join(_NORMS)} (or None), got {norm!r}")
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    return 1.0 / n if (norm == "backward") == inverse else 1.0


def _dual(norm: str | None) -> str:
    # hfft/ihfft are irfft/rfft of the conjugate with the scaling of the other direction
    return {"backward": "forward", "forward": "backward"}.get(norm or "backward", norm or "backward")


def _matrices(kind: str, n: int, scale: float, dt: DType, device: str, sign: float = 1.0) -> tuple[Tensor, Tensor]:
    """(C, S) for a transform of length n: "c2c" (n, n) and "r2c" (n, n//2+1) have C[j, k] = cos(2 pi j k / n) and S
    its sin, times `scale`; "c2r" (n//2+1, n) has rows k weighted 1 (k = 0 and, n even, n/2) or 2 (the others, which
    stand for their conjugate mirror too), and S zero in the rows whose sin is 0. S is times `sign` (-1: a forward
    transform's e^(-i theta)), its zeros +0.0, so that no bin's part is a -0.0 that torch's isn't (the angle of a
    negative real bin is pi, not -pi)."""
    key = (kind, n, scale, dt, device, sign)
    got = _MATRICES.get(key)
    if got is not None:
        _MATRICES.move_to_end(key)
        return got
    half = n // 2 + 1
    rows, cols = (n, n) if kind == "c2c" else (n, half) if kind == "r2c" else (half, n)
    jk = np.outer(np.arange(rows, dtype=np.int64), np.arange(cols, dtype=np.int64)) % n
    c, s = _cos_sin(jk, n)
    c, s = c * scale, s * scale
    if kind == "c2r":
        w = np.full((rows, 1), 2.0)
        w[0] = 1.0
        if n % 2 == 0:
            w[n // 2] = 1.0
            s[n // 2] = 0.0
        s[0] = 0.0
        c, s = c * w, s * w
    return _kept(key, c, 0.0 + s * sign, dt, device)


def _twiddles(n2: int, n1: int, n: int, inverse: bool, dt: DType, device: str) -> tuple[Tensor, Tensor]:
    """(cos, sin) of the four-step transform's twiddle factors e^(-+2 pi i j2 k1 / n), an (n2, n1) matrix."""
    key = ("twiddle", n, n1, inverse, dt, device)
    got = _MATRICES.get(key)
    if got is not None:
        _MATRICES.move_to_end(key)
        return got
    c, s = _cos_sin(np.outer(np.arange(n2, dtype=np.int64), np.arange(n1, dtype=np.int64)) % n, n)
    return _kept(key, c, s if inverse else -s, dt, device)


def _cos_sin(jk: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    # cos and sin of the angles 2 pi jk / n (jk in 0..n-1), in float64; at the multiples of pi/2 exactly 0 and +-1 (the
    # float64 pi makes sin(pi) 1.2e-16: a real input's Nyquist bin got a tiny imaginary part, so its angle read -pi
    # or pi by the sign of rounding, and isreal False, where torch's are exactly pi and True)
    angle = (2.0 * np.pi / n) * jk.astype(np.float64)
    c, s = np.cos(angle), np.sin(angle)
    quarter = (4 * jk) % n == 0
    c[quarter], s[quarter] = np.round(c[quarter]), np.round(s[quarter])
    return c, s


def _kept(key: tuple, c: np.ndarray, s: np.ndarray, dt: DType, device: str) -> tuple[Tensor, Tensor]:
    # the pair realized in the transform's dtype and kept, the oldest dropped past the byte budget
    np_dt = np.float64 if dt == dtypes.float64 else np.float32
    made = (
        Tensor(c.astype(np_dt), device=device).realize(),
        Tensor(s.astype(np_dt), device=device).realize(),
    )
    _MATRICES[key] = made
    while len(_MATRICES) > 1 and sum(a.nbytes + b.nbytes for a, b in _MATRICES.values()) > _MATRICES_KEPT_BYTES:
        _MATRICES.popitem(last=False)
    return made


def _factor(n: int) -> int | None:
    # the factor of n nearest below sqrt(n) (> 1), or None where n is short enough or prime
    if n <= _DIRECT_MAX:
        return None
    return next((f for f in range(math.isqrt(n), 1, -1) if n % f == 0), None)


def _dft_last(xr: Tensor, xi: Tensor | None, n: int, scale: float, inverse: bool) -> tuple[Tensor, Tensor]:
    """The complex transform of the last axis (length n) of xr + i xi (xi None: zero), scaled by `scale`: one product
    with the (n, n) matrices, or for a long composite n the four-step split with index j = n2 j1 + j2 in and
    k = k1 + n1 k2 out."""
    n1 = _factor(n)
    if n1 is None:
        # forward e^{-i theta}: (xr + i xi)(C - i S); inverse (xr + i xi)(C + i S); s is -S or S
        c, s = _matrices("c2c", n, scale, xr.dtype, xr.device, 1.0 if inverse else -1.0)
        re, im = xr.matmul(c), xr.matmul(s)
        if xi is not None:
            re, im = re - xi.matmul(s), im + xi.matmul(c)
        return re, im
    n2, lead = n // n1, xr.shape[:-1]

    def rows(t: Tensor) -> Tensor:  # (..., n) -> (..., n2, n1): [j2, j1]
        return t.reshape(*lead, n1, n2).transpose(-1, -2)

    ar, ai = _dft_last(rows(xr), rows(xi) if xi is not None else None, n1, scale, inverse)  # [j2, k1]
    tc, ts = _twiddles(n2, n1, n, inverse, xr.dtype, xr.device)
    ar, ai = ar * tc - ai * ts, ar * ts + ai * tc
    br, bi = _dft_last(ar.transpose(-1, -2), ai.transpose(-1, -2), n2, 1.0, inverse)  # [k1, k2]
    return br.transpose(-1, -2).reshape(*lead, n), bi.transpose(-1, -2).reshape(*lead, n)


def _part_dtype(t: Tensor) -> Tensor:
    # a real input's values as the float dtype the transform computes in (float32 or float64, as torch's)
    if t.dtype == dtypes.float64 or t.dtype == dtypes.float32:
        return t
    return t.cast(dtypes.float32)


def _real_input(x: Any, op: str) -> Tensor:
    if isinstance(x, ComplexTensor):
        raise ComplexOpError(f"{op}: expects a real input tensor, got {x.dtype} (use fft for complex input)")
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expects a Tensor, got {type(x).__name__}")
    return _part_dtype(x)


def _parts(x: Any, op: str) -> tuple[Tensor, Tensor | None]:
    # (real part, imaginary part or None) of a real or complex input
    if isinstance(x, ComplexTensor):
        return x.real, x.imag
    return _real_input(x, op), None


def _fit(t: Tensor, dim: int, length: int) -> Tensor:
    # t trimmed or zero padded along dim to `length` (torch's n=/s=)
    size = t.shape[dim]
    if size == length:
        return t
    if size > length:
        return t.narrow(dim, 0, length)
    return t.pad(tuple((0, length - size) if i == dim else (0, 0) for i in range(t.ndim)))


def _norm_dim(dim: int, ndim: int, op: str) -> int:
    if not -ndim <= dim < max(ndim, 1):
        raise ShapeError(f"{op}: dim {dim} is out of range for a tensor of {ndim} dims")
    return dim % ndim if ndim else 0


def _length(n: int | None, default: int, op: str) -> int:
    n = default if n is None or n == -1 else int(n)
    if n < 1:
        raise ArgumentError(f"{op}: the signal length must be at least 1, got {n}")
    return n


def _last(t: Tensor, dim: int) -> Tensor:
    return t if dim == t.ndim - 1 else t.movedim(dim, -1)


def _back(t: Tensor, dim: int) -> Tensor:
    return t if dim == t.ndim - 1 else t.movedim(-1, dim)


def _c2c(xr: Tensor, xi: Tensor | None, n: int | None, dim: int, norm: str | None, inverse: bool, op: str):
    if xr.ndim == 0:
        raise ShapeError(f"{op}: expects a tensor of at least 1 dim, got a scalar")
    dim = _norm_dim(dim, xr.ndim, op)
    n = _length(n, xr.shape[dim], op)
    xr = _last(_fit(xr, dim, n), dim)
    xi = _last(_fit(xi, dim, n), dim) if xi is not None else None
    re, im = _dft_last(xr, xi, n, _scale(norm, n, inverse, op), inverse)
    return ComplexTensor(_back(re, dim), _back(im, dim))


def _r2c(x: Tensor, n: int | None, dim: int, norm: str | None, op: str) -> ComplexTensor:
    if x.ndim == 0:
        raise ShapeError(f"{op}: expects a tensor of at least 1 dim, got a scalar")
    dim = _norm_dim(dim, x.ndim, op)
    n = _length(n, x.shape[dim], op)
    x = _last(_fit(x, dim, n), dim)
    scale = _scale(norm, n, False, op)
    if _factor(n) is not None:  # long: the complex transform's first n // 2 + 1 bins
        re, im = _dft_last(x, None, n, scale, False)
        return ComplexTensor(_back(re[..., : n // 2 + 1], dim), _back(im[..., : n // 2 + 1], dim))
    c, s = _matrices("r2c", n, scale, x.dtype, x.device, -1.0)
    return ComplexTensor(_back(x.matmul(c), dim), _back(x.matmul(s), dim))


def _c2r(xr: Tensor, xi: Tensor | None, n: int | None, dim: int, norm: str | None, op: str) -> Tensor:
    if xr.ndim == 0:
        raise ShapeError(f"{op}: expects a tensor of at least 1 dim, got a scalar")
    dim = _norm_dim(dim, xr.ndim, op)
    n = _length(n, 2 * (xr.shape[dim] - 1), op)
    bins = n // 2 + 1
    xr = _last(_fit(xr, dim, bins), dim)
    xi = _last(_fit(xi, dim, bins), dim) if xi is not None else None
    scale = _scale(norm, n, True, op)
    if _factor(n) is not None:
        # long: the inverse complex transform of the Hermitian spectrum (X[n - k] = conj X[k]), its real part (the
        # zero and Nyquist bins' imaginary parts meet only sin(0) and sin(pi j) there, so they drop out as torch's)
        def whole(t: Tensor, sign: float) -> Tensor:
            return t.cat(t[..., 1 : n - bins + 1].flip(-1) * sign, dim=-1)

        re, _ = _dft_last(whole(xr, 1.0), whole(xi, -1.0) if xi is not None else None, n, scale, True)
        return _back(re, dim)
    c, s = _matrices("c2r", n, scale, xr.dtype, xr.device)
    out = xr.matmul(c)
    if xi is not None:
        out = out - xi.matmul(s)
    return _back(out, dim)


def fft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> ComplexTensor:  # noqa: A002
    """torch.fft.fft: the 1-D discrete Fourier transform along `dim` of a real or complex tensor, the input zero
    padded or trimmed to `n` first."""
    xr, xi = _parts(input, "fft")
    return _c2c(xr, xi, n, dim, norm, False, "fft")


def ifft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> ComplexTensor:  # noqa: A002
    """torch.fft.ifft: the inverse of `fft` (scaled by 1/n with the default norm)."""
    xr, xi = _parts(input, "ifft")
    return _c2c(xr, xi, n, dim, norm, True, "ifft")


def rfft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> ComplexTensor:  # noqa: A002
    """torch.fft.rfft: the Fourier transform of a real tensor, its n//2 + 1 non-negative frequencies."""
    return _r2c(_real_input(input, "rfft"), n, dim, norm, "rfft")


def irfft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """torch.fft.irfft: the real signal of length n (default 2 * (bins - 1)) whose rfft is `input`; the imaginary parts
    of the zero (and, n even, the n/2) frequency are ignored, as torch's."""
    xr, xi = _parts(input, "irfft")
    return _c2r(xr, xi, n, dim, norm, "irfft")


def hfft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """torch.fft.hfft: the real Fourier transform of a Hermitian-symmetric signal given by its first half (length n
    output, default 2 * (len - 1))."""
    xr, xi = _parts(input, "hfft")
    return _c2r(xr, -xi if xi is not None else None, n, dim, _dual(norm), "hfft")


def ihfft(input: Any, n: int | None = None, dim: int = -1, norm: str | None = None) -> ComplexTensor:  # noqa: A002
    """torch.fft.ihfft: the inverse of `hfft` of a real signal, its n//2 + 1 non-negative frequencies."""
    return _r2c(_real_input(input, "ihfft"), n, dim, _dual(norm), "ihfft").conj()


def _dims_and_sizes(
    x: Tensor, s: Sequence[int] | None, dim: int | Sequence[int] | None, op: str
) -> tuple[list[int], list[int | None]]:
    # torch's rules: dims given or the last len(s) (all without s); sizes given or each dim's own (-1: its own)
    if isinstance(dim, int):
        dim = [dim]
    if dim is None:
        dims = list(range(x.ndim - len(s), x.ndim)) if s is not None else list(range(x.ndim))
        if s is not None and len(s) > x.ndim:
            raise ShapeError(f"{op}: s has {len(s)} sizes for a tensor of {x.ndim} dims")
    else:
        dims = [_norm_dim(d, x.ndim, op) for d in dim]
    if len(set(dims)) != len(dims):
        raise ArgumentError(f"{op}: dims must be distinct, got {list(dims)}")
    if s is not None and len(s) != len(dims):
        raise ArgumentError(f"{op}: s has {len(s)} sizes and dim {len(dims)} dims; give one size per dim")
    sizes: list[int | None] = [None] * len(dims) if s is None else [None if v == -1 else int(v) for v in s]
    if not dims:
        raise ArgumentError(f"{op}: needs at least one dim to transform")
    return dims, sizes


def fftn(
    input: Any,
    s: Sequence[int] | None = None,
    dim: Sequence[int] | None = None,
    norm: str | None = None,  # noqa: A002
) -> ComplexTensor:
    """torch.fft.fftn: the N-D Fourier transform over `dim` (all dims by default, or the last len(s)), each padded or
    trimmed to its size in `s`."""
    xr, xi = _parts(input, "fftn")
    dims, sizes = _dims_and_sizes(xr, s, dim, "fftn")
    for d, n in zip(dims, sizes, strict=True):
        z = _c2c(xr, xi, n, d, norm, False, "fftn")
        xr, xi = z.real, z.imag
    return ComplexTensor(xr, xi if xi is not None else xr.zeros_like())


def ifftn(
    input: Any,
    s: Sequence[int] | None = None,
    dim: Sequence[int] | None = None,
    norm: str | None = None,  # noqa: A002
) -> ComplexTensor:
    """torch.fft.ifftn: the inverse of `fftn`."""
    xr, xi = _parts(input, "ifftn")
    dims, sizes = _dims_and_sizes(xr, s, dim, "ifftn")
    for d, n in zip(dims, sizes, strict=True):
        z = _c2c(xr, xi, n, d, norm, True, "ifftn")
        xr, xi = z.real, z.imag
    return ComplexTensor(xr, xi if xi is not None else xr.zeros_like())


def rfftn(
    input: Any,
    s: Sequence[int] | None = None,
    dim: Sequence[int] | None = None,
    norm: str | None = None,  # noqa: A002
) -> ComplexTensor:
    """torch.fft.rfftn: the N-D Fourier transform of a real tensor: rfft over the last of `dim`, then fft over the
    others."""
    x = _real_input(input, "rfftn")
    dims, sizes = _dims_and_sizes(x, s, dim, "rfftn")
    z = _r2c(x, sizes[-1], dims[-1], norm, "rfftn")
    for d, n in zip(dims[:-1], sizes[:-1], strict=True):
        z = _c2c(z.real, z.imag, n, d, norm, False, "rfftn")
    return z


def irfftn(
    input: Any,
    s: Sequence[int] | None = None,
    dim: Sequence[int] | None = None,
    norm: str | None = None,  # noqa: A002
) -> Tensor:
    """torch.fft.irfftn: the inverse of `rfftn`: ifft over all but the last of `dim`, then irfft over the last (its
    output size s[-1], by default 2 * (bins - 1))."""
    xr, xi = _parts(input, "irfftn")
    dims, sizes = _dims_and_sizes(xr, s, dim, "irfftn")
    for d, n in zip(dims[:-1], sizes[:-1], strict=True):
        z = _c2c(xr, xi, n, d, norm, True, "irfftn")
        xr, xi = z.real, z.imag
    return _c2r(xr, xi, sizes[-1], dims[-1], norm, "irfftn")


def fft2(
    input: Any,
    s: Sequence[int] | None = None,
    dim: Sequence[int] = (-2, -1),
    norm: str | None = None,  # noqa: A002
) -> ComplexTensor:
    """torch.fft.fft2: `fftn` over the last two dims."""
    return fftn(input, s, dim, norm)


def ifft2(
    input: Any,
    s: Sequence[int] | None = None,
    dim: Sequence[int] = (-2, -1),
    norm: str | None = None,  # noqa: A002
) -> ComplexTensor:
    """torch.fft.ifft2: `ifftn` over the last two dims."""
    return ifftn(input, s, dim, norm)


def rfft2(
    input: Any,
    s: Sequence[int] | None = None,
    dim: Sequence[int] = (-2, -1),
    norm: str | None = None,  # noqa: A002
) -> ComplexTensor:
    """torch.fft.rfft2: `rfftn` over the last two dims."""
    return rfftn(input, s, dim, norm)


def irfft2(
    input: Any,
    s: Sequence[int] | None = None,
    dim: Sequence[int] = (-2, -1),
    norm: str | None = None,  # noqa: A002
) -> Tensor:
    """torch.fft.irfft2: `irfftn` over the last two dims."""
    return irfftn(input, s, dim, norm)


def _frequencies(values: np.ndarray, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    out = Tensor(values.astype(np.float64), device=device).cast(dtypes.default_float if dtype is None else dtype)
    return out.requires_grad_(True) if requires_grad else out


def fftfreq(n: int, d: float = 1.0, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """torch.fft.fftfreq: the frequencies of fft's bins for a signal of n samples spaced d apart: [0, 1, ...,
    (n - 1) // 2, -(n // 2), ..., -1] / (d n), in the default float dtype."""
    if n < 1:
        raise ArgumentError(f"fftfreq: n must be at least 1, got {n}")
    k = np.concatenate([np.arange(0, (n - 1) // 2 + 1), np.arange(-(n // 2), 0)])
    return _frequencies(k / (d * n), dtype, device, requires_grad)


def rfftfreq(n: int, d: float = 1.0, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """torch.fft.rfftfreq: the frequencies of rfft's bins for n samples spaced d apart: [0, 1, ..., n // 2] / (d n)."""
    if n < 1:
        raise ArgumentError(f"rfftfreq: n must be at least 1, got {n}")
    return _frequencies(np.arange(0, n // 2 + 1) / (d * n), dtype, device, requires_grad)


def _shifted(x: Any, dim: int | Sequence[int] | None, back: bool) -> Any:
    dims = list(range(x.ndim)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return x
    shifts = [(-(x.shape[d] // 2) if back else x.shape[d] // 2) for d in dims]
    return x.roll(shifts, dims)


def fftshift(input: Any, dim: int | Sequence[int] | None = None) -> Any:  # noqa: A002
    """torch.fft.fftshift: the zero frequency moved to the middle (each of `dim`, all by default, rolled by n // 2);
    real or complex."""
    return _shifted(input, dim, False)


def ifftshift(input: Any, dim: int | Sequence[int] | None = None) -> Any:  # noqa: A002
    """torch.fft.ifftshift: the inverse of `fftshift` (rolled by -(n // 2))."""
    return _shifted(input, dim, True)


# ---------------------------------------------------------------------------------------------------------------------
# short-time Fourier transforms (torch.stft, torch.istft)


def _stft_window(window: Tensor | None, n_fft: int, win_length: int | None, dt: DType, device: str, op: str) -> Tensor:
    # the window, centered in n_fft (zeros around it), as torch's; none is a rectangle of win_length
    win_length = n_fft if win_length is None else int(win_length)
    if not 0 < win_length <= n_fft:
        raise ArgumentError(f"{op}: win_length must be in (0, n_fft={n_fft}], got {win_length}")
    if window is None:
        window = Tensor.ones(win_length, dtype=dt, device=device)
    elif not isinstance(window, Tensor) or window.shape != (win_length,):
        got = window.shape if isinstance(window, Tensor) else type(window).__name__
        raise ShapeError(f"{op}: window must be a real 1-D tensor of win_length={win_length} elements, got {got}")
    left = (n_fft - win_length) // 2
    return _part_dtype(window).pad(((left, n_fft - win_length - left),))


def stft(
    input: Any,  # noqa: A002
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Tensor | None = None,
    center: bool = True,
    pad_mode: str = "reflect",
    normalized: bool = False,
    onesided: bool | None = None,
    return_complex: bool | None = None,
) -> Any:
    """torch.stft: the Fourier transforms of the frames of a signal (1-D, or 2-D: a batch of signals), real or
    complex: frames of `n_fft` samples `hop_length` apart (n_fft // 4 by default), each times `window` (of
    `win_length`, centered in n_fft; ones by default). `center` pads the signal by n_fft // 2 at both ends first
    (`pad_mode` "reflect", "constant", "replicate" or "circular"). The result is complex, (batch,) n_freq x n_frames,
    with n_freq = n_fft // 2 + 1 when `onesided` (the default for a real signal and window), else n_fft;
    `normalized` scales it by 1/sqrt(n_fft). `return_complex=False` gives torch's older real form (a last dim of 2).

    >>> x = Tensor([0.0, 1.0, 0.0, -1.0] * 4)
    >>> stft(x, 4, hop_length=4, center=False).shape
    (3, 4)
    """
    op = "stft"
    xr, xi = _parts(input, op)
    if xr.ndim not in (1, 2):
        raise ShapeError(f"{op}: expects a 1-D signal or a 2-D batch of them, got shape {xr.shape}")
    n_fft = int(n_fft)
    hop = n_fft // 4 if hop_length is None else int(hop_length)
    if n_fft < 1 or hop < 1:
        raise ArgumentError(f"{op}: n_fft and hop_length must be positive, got {n_fft} and {hop}")
    if onesided is None:
        onesided = xi is None
    if onesided and xi is not None:
        raise ArgumentError(f"{op}: onesided=True needs a real signal (a complex one's spectrum isn't symmetric)")
    w = _stft_window(window, n_fft, win_length, xr.dtype, xr.device, op)
    parts = [xr] if xi is None else [xr, xi]
    if center:
        half = n_fft // 2
        pads = tuple((0, 0) for _ in range(xr.ndim - 1)) + ((half, half),)
        parts = [p.pad(pads, mode=pad_mode) for p in parts]
    length = parts[0].shape[-1]
    if length < n_fft:
        raise ShapeError(f"{op}: the signal ({length} samples, padded) is shorter than n_fft={n_fft}")
    frames = [p.unfold(-1, n_fft, hop) * w for p in parts]  # (..., n_frames, n_fft)
    norm = "ortho" if normalized else "backward"
    if onesided:
        spec = rfft(frames[0], dim=-1, norm=norm)
    else:
        spec = fft(frames[0] if xi is None else ComplexTensor(frames[0], frames[1]), dim=-1, norm=norm)
    out = spec.transpose(-1, -2)
    if return_complex is False:
        return Tensor.view_as_real(out)
    return out


def _overlap_add(frames: Tensor, hop: int) -> Tensor:
    # (..., T, n) frames, hop apart -> (..., n + hop (T - 1)) sums: each frame cut into blocks of hop samples (the last
    # zero padded), block j of frame t landing on block t + j of the output: ceil(n / hop) shifted sums
    *lead, t, n = frames.shape
    blocks = -(-n // hop)
    padded = frames.pad(tuple((0, 0) for _ in lead) + ((0, 0), (0, blocks * hop - n)))
    cut = padded.reshape(*lead, t, blocks, hop)
    out: Tensor | None = None
    for j in range(blocks):
        shifted = cut[..., j, :].pad(tuple((0, 0) for _ in lead) + ((j, blocks - 1 - j), (0, 0)))
        out = shifted if out is None else out + shifted
    assert out is not None
    return out.reshape(*lead, (t + blocks - 1) * hop)[..., : n + hop * (t - 1)]


def istft(
    input: Any,  # noqa: A002
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Tensor | None = None,
    center: bool = True,
    normalized: bool = False,
    onesided: bool | None = None,
    length: int | None = None,
    return_complex: bool = False,
) -> Any:
    """torch.istft: the signal whose `stft` (with the same n_fft, hop_length, win_length, window, center,
    normalized, onesided) is `input` (complex, (batch,) n_freq x n_frames): each frame's inverse transform times the
    window, overlapped and added, divided by the sum of the squared windows over each sample (which must not be 0:
    the window must overlap enough, as torch's check). `length` trims or zero pads the result; `return_complex` keeps
    the complex signal (for a two-sided input).

    >>> x = Tensor([0.0, 1.0, 2.0, 3.0, 2.0, 1.0, 0.0, -1.0])
    >>> [round(v, 4) for v in istft(stft(x, 4, hop_length=1), 4, hop_length=1, length=8).tolist()]
    [0.0, 1.0, 2.0, 3.0, 2.0, 1.0, 0.0, -1.0]
    """
    op = "istft"
    if not isinstance(input, ComplexTensor):
        raise ComplexOpError(f"{op}: expects a complex spectrum (stft's result), got {getattr(input, 'dtype', input)}")
    if input.ndim not in (2, 3):
        raise ShapeError(f"{op}: expects (n_freq, n_frames) or a batch of them, got shape {input.shape}")
    n_fft = int(n_fft)
    hop = n_fft // 4 if hop_length is None else int(hop_length)
    n_freq, n_frames = input.shape[-2], input.shape[-1]
    if onesided is None:
        onesided = n_freq != n_fft
    if onesided and n_freq != n_fft // 2 + 1:
        raise ShapeError(f"{op}: a onesided spectrum of n_fft={n_fft} has {n_fft // 2 + 1} bins, got {n_freq}")
    if not onesided and n_freq != n_fft:
        raise ShapeError(f"{op}: a two-sided spectrum of n_fft={n_fft} has {n_fft} bins, got {n_freq}")
    if onesided and return_complex:
        raise ArgumentError(f"{op}: return_complex=True needs a two-sided spectrum (onesided=False)")
    w = _stft_window(window, n_fft, win_length, input.real.dtype, input.device, op)
    norm = "ortho" if normalized else "backward"
    spec = input.transpose(-1, -2)  # (..., n_frames, n_freq)
    if onesided:
        frames = [irfft(spec, n=n_fft, dim=-1, norm=norm)]
    else:
        z = ifft(spec, dim=-1, norm=norm)
        frames = [z.real, z.imag] if return_complex else [z.real]
    signal = [_overlap_add(f * w, hop) for f in frames]
    envelope = _overlap_add((w * w).reshape(1, n_fft).expand(n_frames, n_fft), hop)
    start = n_fft // 2 if center else 0
    end = envelope.shape[-1] - (n_fft // 2 if center else 0)
    if length is not None:
        end = start + int(length)
    end_kept = min(end, envelope.shape[-1])
    envelope = envelope[start:end_kept]
    if float(envelope.abs().min().item()) < 1e-11:
        raise ArgumentError(
            f"{op}: the window's overlap-add is (near) 0 somewhere (window too short for hop_length={hop}?); "
            "use a window that overlaps so every sample is covered"
        )
    out = [s[..., start:end_kept] / envelope for s in signal]
    if end > end_kept:
        out = [s.pad(tuple((0, 0) for _ in range(s.ndim - 1)) + ((0, end - end_kept),)) for s in out]
    return ComplexTensor(out[0], out[1]) if len(out) == 2 else out[0]
