"""The LDL^T factorization of symmetric (indefinite) matrices as LAPACK's sytrf / sytrs (torch.linalg.ldl_factor_ex
and ldl_solve): Bunch-Kaufman diagonal pivoting with 1 x 1 and 2 x 2 blocks on the lower triangle, and LAPACK's
packed result (L below the diagonal, D's blocks on and just below it) and pivots (1-based; a 2 x 2 block's two
entries both -p). Computed on the host in the input's dtype, one matrix at a time (torch has no gradient for either).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from uopkit.dtype import DTypeError, dtypes, to_numpy_dtype
from uopkit.tensor.support import ShapeError, _broadcast_shape

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# Bunch and Kaufman's pivot threshold, (1 + sqrt(17)) / 8: it bounds the growth of the entries of L
_ALPHA = (1.0 + np.sqrt(17.0)) / 8.0


def _factor_one(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """sytf2 on the lower triangle of one square matrix (a copy, overwritten): (LD, 1-based pivots, info)."""
    n = a.shape[0]
    pivots = np.zeros(n, dtype=np.int32)
    info = 0
    k = 0
    while k < n:
        step = 1
        diagonal = abs(a[k, k])
        if k + 1 < n:
            below = np.abs(a[k + 1 :, k])
            imax = k + 1 + int(np.argmax(below))
            colmax = below.max()
        else:
            imax, colmax = k, 0.0
        if max(diagonal, colmax) == 0 or np.isnan(diagonal):
            # a zero column: D is singular here (info: its first such column), nothing to eliminate
            info = info or k + 1
            pivot = k
        else:
            if diagonal >= _ALPHA * colmax:
                pivot = k
            else:
                # the largest off-diagonal entry of row/column imax in the trailing matrix
                rowmax = np.abs(a[imax, k:imax]).max()
                if imax + 1 < n:
                    rowmax = max(rowmax, np.abs(a[imax + 1 :, imax]).max())
                if diagonal >= _ALPHA * colmax * (colmax / rowmax):
                    pivot = k
                elif abs(a[imax, imax]) >= _ALPHA * rowmax:
                    pivot = imax
                else:
                    pivot, step = imax, 2
            last = k + step - 1
            if pivot != last:
                # swap rows and columns `last` and `pivot` of the trailing matrix (its lower triangle)
                a[pivot + 1 :, [last, pivot]] = a[pivot + 1 :, [pivot, last]]
                between = a[last + 1 : pivot, last].copy()
                a[last + 1 : pivot, last] = a[pivot, last + 1 : pivot]
                a[pivot, last + 1 : pivot] = between
                a[last, last], a[pivot, pivot] = a[pivot, pivot], a[last, last]
                if step == 2:
                    a[k + 1, k], a[pivot, k] = a[pivot, k], a[k + 1, k]
            if step == 1:
                if k + 1 < n:
                    # the rank-1 update of the trailing lower triangle, then L's column
                    r = 1 / a[k, k]
                    x = a[k + 1 :, k].copy()
                    a[k + 1 :, k + 1 :] -= np.tril(r * np.outer(x, x))
                    a[k + 1 :, k] = r * x
            elif k + 2 < n:
                # the rank-2 update by the inverse of D's 2 x 2 block, as sytf2 writes it
                d21 = a[k + 1, k]
                d11 = a[k + 1, k + 1] / d21
                d22 = a[k, k] / d21
                t = 1 / (d11 * d22 - 1)
                d21 = t / d21
                wk = d21 * (d11 * a[k + 2 :, k] - a[k + 2 :, k + 1])
                wkp1 = d21 * (d22 * a[k + 2 :, k + 1] - a[k + 2 :, k])
                a[k + 2 :, k + 2 :] -= np.tril(np.outer(a[k + 2 :, k], wk) + np.outer(a[k + 2 :, k + 1], wkp1))
                a[k + 2 :, k] = wk
                a[k + 2 :, k + 1] = wkp1
        if step == 1:
            pivots[k] = pivot + 1
        else:
            pivots[k] = pivots[k + 1] = -(pivot + 1)
        k += step
    return np.tril(a), pivots, info


def _solve_one(ld: np.ndarray, pivots: np.ndarray, b: np.ndarray) -> np.ndarray:
    """sytrs on one factored matrix: x with A x = b (b (n, k), a copy, overwritten)."""
    n = ld.shape[0]
    # L D y = P^T b, forward
    k = 0
    while k < n:
        if pivots[k] > 0:
            p = pivots[k] - 1
            b[[k, p]] = b[[p, k]]
            b[k + 1 :] -= np.outer(ld[k + 1 :, k], b[k])
            b[k] = b[k] / ld[k, k]
            k += 1
        else:
            p = -pivots[k] - 1
            b[[k + 1, p]] = b[[p, k + 1]]
            b[k + 2 :] -= np.outer(ld[k + 2 :, k], b[k]) + np.outer(ld[k + 2 :, k + 1], b[k + 1])
            off = ld[k + 1, k]
            first, second = ld[k, k] / off, ld[k + 1, k + 1] / off
            denominator = first * second - 1
            top, bottom = b[k] / off, b[k + 1] / off
            b[k] = (second * top - bottom) / denominator
            b[k + 1] = (first * bottom - top) / denominator
            k += 2
    # L^T x = y, backward, undoing the swaps
    k = n - 1
    while k >= 0:
        if pivots[k] > 0:
            b[k] -= ld[k + 1 :, k] @ b[k + 1 :]
            p = pivots[k] - 1
            b[[k, p]] = b[[p, k]]
            k -= 1
        else:
            b[k] -= ld[k + 1 :, k] @ b[k + 1 :]
            b[k - 1] -= ld[k + 1 :, k - 1] @ b[k + 1 :]
            p = -pivots[k] - 1
            b[[k, p]] = b[[p, k]]
            k -= 2
    return b


def _float_matrices(t: Tensor, op: str, name: str) -> None:
    if t.ndim < 2:
        raise ShapeError(f"{op}: {name} must have at least 2 dimensions (..., n, n), got shape {t.shape}")
    if not dtypes.is_float(t.dtype) or t.dtype in dtypes.halves:
        raise DTypeError(f"{op}: {name} must be float32 or float64 (as LAPACK's sytrf), got {t.dtype}")


def ldl_factor(a: Tensor, op: str) -> tuple[Tensor, Tensor, Tensor]:
    """(LD, pivots, info) of the lower triangles of `a` (..., n, n), as torch.linalg.ldl_factor_ex: info is 0, or
    the 1-based index of D's first exact zero column (the factorization completes; D is singular)."""
    from uopkit.tensor.tensor import Tensor

    _float_matrices(a, op, "A")
    if a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{op}: A must be square matrices (..., n, n), got shape {a.shape}")
    n, batch = a.shape[-1], a.shape[:-2]
    host = a.detach().numpy().reshape(-1, n, n)
    factors, pivots = np.zeros_like(host), np.zeros((host.shape[0], n), dtype=np.int32)
    info = np.zeros(host.shape[0], dtype=np.int32)
    for i, matrix in enumerate(host):
        factors[i], pivots[i], info[i] = _factor_one(matrix.copy())
    device = a.device
    return (
        Tensor(factors.reshape(a.shape), dtype=a.dtype, device=device),
        Tensor(pivots.reshape(batch + (n,)), dtype=dtypes.int32, device=device),
        Tensor(info.reshape(batch), dtype=dtypes.int32, device=device),
    )


def ldl_solve(ld: Tensor, pivots: Tensor, b: Tensor, op: str) -> Tensor:
    """x with A x = b for A factored by `ldl_factor` into (LD, pivots); batch axes broadcast."""
    from uopkit.tensor.tensor import Tensor

    _float_matrices(ld, op, "LD")
    _float_matrices(b, op, "B")
    n = ld.shape[-1]
    if ld.shape[-2] != n or b.shape[-2] != n:
        raise ShapeError(f"{op}: each LD matrix must be n x n and each B matrix n x k, got {ld.shape} and {b.shape}")
    if pivots.shape != ld.shape[:-1] or not dtypes.is_int(pivots.dtype):
        raise ShapeError(f"{op}: pivots must be ints shaped {ld.shape[:-1]} (ldl_factor's), got {pivots.shape}")
    if b.dtype != ld.dtype:
        raise DTypeError(f"{op}: B ({b.dtype}) and LD ({ld.dtype}) must have the same dtype")
    batch = _broadcast_shape(ld.shape[:-2], b.shape[:-2], op)
    k = b.shape[-1]
    host_ld = np.broadcast_to(ld.detach().numpy(), batch + (n, n)).reshape(-1, n, n)
    host_pivots = np.broadcast_to(pivots.numpy(), batch + (n,)).reshape(-1, n)
    host_b = np.broadcast_to(b.detach().numpy(), batch + (n, k)).reshape(-1, n, k)
    bad = (host_pivots == 0) | (np.abs(host_pivots) > n)
    if bad.any():
        raise ShapeError(f"{op}: pivots must be ldl_factor's (1-based, +-1 .. +-{n}), got {host_pivots[bad][0]}")
    out = np.empty(host_b.shape, dtype=to_numpy_dtype(b.dtype))
    for i in range(host_b.shape[0]):
        out[i] = _solve_one(host_ld[i], host_pivots[i], host_b[i].copy())
    return Tensor(out.reshape(batch + (n, k)), dtype=b.dtype, device=b.device)
