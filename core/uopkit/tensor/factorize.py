"""Matrix factorizations built from tensor ops: `qr` (Householder reflections) and `svd` (one-sided Jacobi).

Both work on the last two axes (the others are a batch) in the input's float dtype (ints promote), and differentiate
through the ops they are made of. The loops run in Python over the columns (QR) and over the rotation rounds (SVD):
each step's kernels are the same code for every step, so a factorization compiles a handful of kernels, once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from uopkit.dtype import dtypes
from uopkit.tensor.support import ArgumentError, ShapeError, UnknownModeError

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# Jacobi sweeps at most (each pairs every two columns once): from a random matrix the rotations reach the dtype's
# precision in 6-10
MAX_SWEEPS = 30


def _matrices(t: Tensor, op: str) -> Tensor:
    if t.ndim < 2:
        raise ShapeError(f"{op}: needs a matrix or a batch of matrices (2 or more dims), got shape {t.shape}")
    return t._float()


def _step_index(t: Tensor, j: int) -> Tensor:
    """j as a 1-element int32 tensor on t's device: masks built from it keep each step's kernels the same code (a
    Python int would be a constant, a new kernel to compile per step)."""
    return Tensor([j], dtype=dtypes.int32, device=t.device)


def householder_qr(a: Tensor, complete: bool) -> tuple[Tensor, Tensor]:
    """Q and R of float matrices `a` (..., m, n), LAPACK's conventions (geqrf): the reflector of column j maps it to
    beta e_j with beta = -sign(a_jj) |column|, none when the column is zero below the diagonal (R keeps a_jj). Q is
    (..., m, m) when `complete`, else (..., m, k) and R (..., k, n), k = min(m, n)."""
    q, r, _ = _householder(a, complete)
    return q, r


def _householder(a: Tensor, complete: bool, count: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """`householder_qr`'s Q and R, and with `count` how many reflections Q is made of (int32, (...)): det(Q) is -1
    to that power (a kernel more per column, so only for the determinants)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    rows = Tensor.arange(m, dtype=dtypes.int32, device=a.device)
    cols = Tensor.arange(n, dtype=dtypes.int32, device=a.device)
    r = a
    q = Tensor.eye(m, dtype=a.dtype, device=a.device).expand(*a.shape[:-2], m, m)
    reflections = Tensor.zeros(a.shape[:-2], dtype=dtypes.int32, device=a.device) if count else None
    for j in range(k):
        step = _step_index(a, j)
        at, below = rows == step, rows > step
        col = (r * (cols == step).cast(a.dtype)).sum(-1)  # column j, (..., m)
        alpha = (col * at.cast(a.dtype)).sum(-1, keepdim=True)
        x = below.where(col, 0)
        # |x| and |(alpha, x)| scaled by the largest entry: squares of large or tiny values over- or underflow
        scale = (at | below).where(col.abs(), 0).max(-1, keepdim=True)
        safe = (scale == 0).where(1, scale)
        rest = (x / safe).square().sum(-1, keepdim=True)
        reflect = rest != 0
        beta = -(((alpha / safe).square() + rest).sqrt() * safe).copysign(alpha)
        tau = reflect.where((beta - alpha) / beta, 0)
        v = at.where(1, x / reflect.where(alpha - beta, 1))
        # R <- H R and Q <- Q H, H = I - tau v v^T; column j becomes (beta or alpha) e_j, exactly
        vr = (v.unsqueeze(-1) * r).sum(-2, keepdim=True)
        r = r - (tau * v).unsqueeze(-1) * vr
        on_col = (cols == step).unsqueeze(0)
        r = (on_col & below.unsqueeze(-1)).where(
            0, (on_col & at.unsqueeze(-1)).where(reflect.where(beta, alpha).unsqueeze(-1), r)
        )
        qv = (q * v.unsqueeze(-2)).sum(-1, keepdim=True)
        q = q - qv * (tau.unsqueeze(-1) * v.unsqueeze(-2))
        # stored each step: fused into the next step's reads, R and Q would be recomputed there, in a new kernel
        r, q = r.contiguous(), q.contiguous()
        if reflections is not None:
            reflections = (reflections + reflect.squeeze(-1).cast(dtypes.int32)).contiguous()
    r = r.triu()
    return (q, r, reflections) if complete else (q[..., :, :k], r[..., :k, :], reflections)


def _square(t: Tensor, op: str) -> Tensor:
    a = _matrices(t, op)
    if a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{op}: needs square matrices, got shape {t.shape}")
    return a


def _diagonal(r: Tensor) -> Tensor:
    n = r.shape[-1]
    return (r * Tensor.eye(n, dtype=r.dtype, device=r.device)).sum(-1)


def _upper_solve(r: Tensor, y: Tensor) -> Tensor:
    """x with r @ x = y for upper triangular r (..., n, n) and y (..., n, k), by back substitution: row n-1 first,
    each row from the rows below it (a zero on r's diagonal gives inf or nan)."""
    n = r.shape[-1]
    rows = Tensor.arange(n, dtype=dtypes.int32, device=r.device).unsqueeze(-1)
    x = Tensor.zeros(y.shape, dtype=r.dtype, device=r.device)
    for i in reversed(range(n)):
        at = rows == _step_index(r, i)
        row = at.where(r, 0).sum(-2, keepdim=True)  # (..., 1, n): row i of r
        done = (row.transpose(-1, -2) * x).sum(-2, keepdim=True)  # sum over j > i of r_ij x_j (x_j = 0 for j <= i)
        pivot = (row * at.transpose(-1, -2).cast(r.dtype)).sum(-1, keepdim=True)
        x = at.where((at.where(y, 0).sum(-2, keepdim=True) - done) / pivot, x).contiguous()
    return x


def _tournament(n: int) -> list[list[int]]:
    """The rounds of a round-robin over n (even) columns, each a list of n/2 disjoint pairs flattened as
    [p_0 .. p_h-1, q_0 .. q_h-1]: every pair of columns meets once in n - 1 rounds (the circle method)."""
    rounds = []
    ring = list(range(1, n))
    for _ in range(n - 1):
        seats = [0, *ring]
        rounds.append(seats[: n // 2] + seats[n // 2 :][::-1])
        ring = ring[-1:] + ring[:-1]
    return rounds


def _moving(source: list[int], target: list[int], width: int) -> np.ndarray:
    """The 0/1 matrix M (width, len(target)) that takes columns in `source` order to `target` order: (W @ M)[:, i] is
    the column labelled target[i]."""
    where = {c: i for i, c in enumerate(source)}
    out = np.zeros((width, len(target)), np.float32)
    out[[where[c] for c in target], np.arange(len(target))] = 1
    return out


def jacobi_svd(a: Tensor, full_matrices: bool) -> tuple[Tensor, Tensor, Tensor]:
    """U, S, Vh of float matrices `a` (..., m, n) with m >= n: one-sided Jacobi (Hestenes) rotates pairs of a's
    columns until every pair is orthogonal (to the dtype's precision, at most MAX_SWEEPS sweeps), accumulating the
    rotations in V; the columns' norms are S, sorted descending; U is the Q of a QR of the rotated columns (so it has
    orthonormal columns also where S is 0, and its complete basis when `full_matrices`)."""
    m, n = a.shape[-2:]
    batch = a.shape[:-2]
    # scaled to a largest entry of 1: the columns' squared norms of large (or tiny) entries over- (under)flow
    scale = a.abs().max((-2, -1), keepdim=True)
    scale = (scale == 0).where(1, scale)
    width = n + n % 2  # a zero column makes the count even; it stays zero (nothing rotates with it)
    w = (a / scale).pad(((0, 0),) * (a.ndim - 1) + ((0, width - n),))
    v = Tensor.eye(width, dtype=a.dtype, device=a.device).expand(*batch, width, width)
    tol = (m**0.5 if m else 1.0) * (2.220446049250313e-16 if a.dtype == dtypes.float64 else 1.1920929e-07)
    # the columns move as permutation matrices (a product with a 0/1 matrix is exact; an index would be read back to
    # check its range): each round leaves them in its pairs' order, the last round's at the end of a sweep
    rounds = _tournament(width)
    moves = Tensor(np.stack([_moving(rounds[i - 1], rounds[i], width) for i in range(len(rounds))]), device=a.device)
    moves = moves.cast(a.dtype).realize()
    start = Tensor(_moving(list(range(width)), rounds[-1], width), device=a.device).cast(a.dtype)
    w, v = w @ start, v @ start
    half = width // 2
    for _ in range(MAX_SWEEPS):
        worst: Tensor | None = None
        for i in range(len(rounds)):
            w, v = w @ moves[i], v @ moves[i]
            p, q = w[..., :, :half], w[..., :, half:]
            alpha, beta, gamma = p.square().sum(-2), q.square().sum(-2), (p * q).sum(-2)
            # the rotation that zeroes gamma: t = tan(theta), the smaller root of t^2 + 2 zeta t - 1 = 0
            still = gamma != 0
            zeta = (beta - alpha) / still.where(2 * gamma, 1)
            t = (zeta >= 0).where(1.0, -1.0) / (zeta.abs() + (1 + zeta.square()).sqrt())
            c = still.where((1 + t.square()).rsqrt(), 1).unsqueeze(-2)
            s = still.where(t, 0).unsqueeze(-2) * c
            vp, vq = v[..., :, :half], v[..., :, half:]
            w = (c * p - s * q).cat(s * p + c * q, dim=-1)
            v = (c * vp - s * vq).cat(s * vp + c * vq, dim=-1)
            off = gamma.abs() / (alpha * beta).sqrt()
            off = (still & (alpha * beta != 0)).where(off, 0).max()
            worst = off if worst is None else worst.maximum(off)
            # realized each round: the rounds after the first replay its cached schedule (a graph of a whole sweep
            # costs the scheduler more than its kernels)
            Tensor.realize(w, v, worst)
        assert worst is not None
        if (worst_value := worst.item()) != worst_value:
            raise ArgumentError(f"svd: the input has values that aren't finite (nan or inf), shape {a.shape}")
        if worst_value <= tol:
            break
    # back in the original column order, the padding column dropped, then sorted by norm, largest first
    back = Tensor(_moving(rounds[-1], list(range(n)), width), device=a.device).cast(a.dtype)
    w, v = w @ back, (v @ back)[..., :n, :]
    norms = w.square().sum(-2).sqrt()
    sv, rank = norms.sort(-1, descending=True)
    sv = sv * scale.squeeze(-1)
    w = w.gather(-1, rank.unsqueeze(-2).expand(*batch, m, n))
    v = v.gather(-1, rank.unsqueeze(-2).expand(*batch, n, n))
    u, r = householder_qr(w, complete=full_matrices)
    # Q's columns point as w's up to a sign: the one of R's diagonal (a zero column keeps Q's)
    flip = (_diagonal(r[..., :n, :]) < 0).where(-1.0, 1.0).cast(a.dtype)
    u = u * (
        flip.pad(((0, 0),) * len(batch) + ((0, u.shape[-1] - n),), value=1.0) if u.shape[-1] != n else flip
    ).unsqueeze(-2)
    return u, sv, v.transpose(-1, -2)


class FactorizeMixin:
    __slots__ = ()

    def qr(self: Tensor, mode: str = "reduced") -> tuple[Tensor, Tensor]:  # type: ignore[misc]
        """QR factorization of a matrix or a batch of them (torch.linalg.qr): Q with orthonormal columns and R upper
        triangular, Q @ R = self. `mode`: "reduced" (Q (m, k), R (k, n), k = min(m, n)), "complete" (Q (m, m),
        R (m, n)) or "r" (R alone; Q is an empty tensor). Signs as LAPACK's (and PyTorch's CPU).

        >>> q, r = Tensor([[3.0, 1.0], [4.0, 2.0]]).qr()
        >>> [round(v, 4) for v in r.flatten().tolist()]
        [-5.0, -2.2, 0.0, 0.4]
        """
        if mode not in ("reduced", "complete", "r"):
            raise UnknownModeError(f"qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
        a = _matrices(self, "qr")
        q, r = householder_qr(a, complete=mode == "complete")
        if mode == "r":
            return Tensor.empty(0, dtype=a.dtype, device=a.device), r
        return q, r

    def svd(self: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:  # type: ignore[misc]
        """Singular value decomposition of a matrix or a batch of them (torch.linalg.svd): U, S, Vh with
        U @ diag(S) @ Vh = self, S descending, U and Vh with orthonormal columns and rows. U is (m, m) and Vh (n, n)
        when `full_matrices`, else (m, k) and (k, n), k = min(m, n). The signs of the singular vectors are not
        PyTorch's (they are arbitrary there too). Reads the convergence back after each Jacobi sweep (a realize), so
        it can't run inside a TinyJit.

        >>> u, s, vh = Tensor([[3.0, 0.0], [0.0, -4.0]]).svd()
        >>> [round(x, 4) for x in s.tolist()]
        [4.0, 3.0]
        """
        a = _matrices(self, "svd")
        m, n = a.shape[-2:]
        if min(m, n) == 0:
            return _empty_svd(a, full_matrices)
        if m >= n:
            return jacobi_svd(a, full_matrices)
        u, s, vh = jacobi_svd(a.transpose(-1, -2), full_matrices)
        return vh.transpose(-1, -2), s, u.transpose(-1, -2)

    def det(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Determinant of a square matrix or a batch of them (torch.linalg.det), from a QR factorization: the product
        of R's diagonal, negated for an odd number of reflections.

        >>> round(Tensor([[1.0, 2.0], [3.0, 4.0]]).det().item(), 4)
        -2.0
        """
        a = _square(self, "det")
        _, r, reflections = _householder(a, complete=False, count=True)
        assert reflections is not None
        return _diagonal(r).prod(-1) * (1 - 2 * (reflections & 1)).cast(a.dtype)

    def slogdet(self: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
        """(sign, log|det|) of square matrices (torch.linalg.slogdet): sign 0 and -inf for a singular one."""
        a = _square(self, "slogdet")
        _, r, reflections = _householder(a, complete=False, count=True)
        assert reflections is not None
        d = _diagonal(r)
        sign = d.sign().prod(-1) * (1 - 2 * (reflections & 1)).cast(a.dtype)
        return sign, d.abs().log().sum(-1)

    def logdet(self: Tensor) -> Tensor:  # type: ignore[misc]
        """log(det) of square matrices (torch.logdet): NaN for a negative determinant, -inf for a zero one."""
        sign, log_abs = self.slogdet()
        return (sign < 0).where(float("nan"), log_abs)

    def inverse(self: Tensor) -> Tensor:  # type: ignore[misc]
        """The inverse of square matrices (torch.linalg.inv): R^-1 Q^T from a QR factorization. Reads R's diagonal
        back to refuse a singular matrix (an exact zero there, as PyTorch's LU pivot check), so it can't run inside a
        TinyJit.

        >>> Tensor([[2.0, 0.0], [0.0, 4.0]]).inverse().tolist()
        [[0.5, 0.0], [0.0, 0.25]]
        """
        a = _square(self, "inverse")
        q, r, _ = _householder(a, complete=False)
        if (_diagonal(r) == 0).any().item():
            raise ArgumentError(f"inverse: a matrix (shape {self.shape}) is singular: it has no inverse")
        return _upper_solve(r, q.transpose(-1, -2))


def _empty_svd(a: Tensor, full_matrices: bool) -> tuple[Tensor, Tensor, Tensor]:
    """The SVD of matrices with no rows or no columns: no singular values, identity bases when `full_matrices`."""
    m, n = a.shape[-2:]
    batch = a.shape[:-2]

    def basis(size: int) -> Tensor:
        if full_matrices:
            return Tensor.eye(size, dtype=a.dtype, device=a.device).expand(*batch, size, size).contiguous()
        return Tensor.zeros(*batch, size, 0, dtype=a.dtype, device=a.device)

    return basis(m), Tensor.zeros(*batch, 0, dtype=a.dtype, device=a.device), basis(n).transpose(-1, -2)
