"""Matrix factorizations built from tensor ops: `qr` (Householder reflections), `svd` (one-sided Jacobi), `eigh`
(two-sided Jacobi), `cholesky`, `lu` (partial pivoting), and what is solved with them (`det`, `inverse`, `solve`,
`lu_solve`, `pinv`).

All work on the last two axes (the others are a batch) in the input's float dtype (ints promote), and differentiate
through the ops they are made of (Cholesky and triangular solves, blocked in `triangular`, by their own rules). The
loops run in Python over the columns (QR, LU and Gauss-Jordan: three kernels a column) and over the rotation
rounds (SVD, eigh): each step's kernels are the same code for every step, so a factorization compiles a handful of
kernels, once. A rotation round's or an elimination step's graph is built once (once per shape: a later call of the
same shape builds none); the later ones launch its kernels again (`rounds.Rounds`), unless the input needs a
gradient (then each one's graph is replayed, and backward runs through them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from uopkit.dtype import DTypeError, dtypes, least_upper_dtype
from uopkit.engine.realize import capturing
from uopkit.gradient import set_gradient
from uopkit.tensor import lapack
from uopkit.tensor.autocast import FLOAT32, autocast_op
from uopkit.tensor.grad_mode import is_grad_enabled
from uopkit.tensor.replay import replay_call
from uopkit.tensor.rounds import Rounds, repeated
from uopkit.tensor.support import (
    ArgumentError,
    LinAlgError,
    ShapeError,
    UnknownModeError,
    _broadcast_shape,
    _check_values_in,
    tied_to_empty,
)
from uopkit.tensor.triangular import cholesky_lower, triangular_solve
from uopkit.uop.ops import UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


# torch.linalg's named results: each unpacks as a tuple, or by name
class QR(NamedTuple):
    Q: Tensor
    R: Tensor


class SVD(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


class SVDV(NamedTuple):
    # torch.svd's: V itself, not its transpose
    U: Tensor
    S: Tensor
    V: Tensor


class Eigh(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


class SlogDet(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


class PLU(NamedTuple):
    P: Tensor
    L: Tensor
    U: Tensor


class LUFactor(NamedTuple):
    LU: Tensor
    pivots: Tensor


class LUFactorEx(NamedTuple):
    LU: Tensor
    pivots: Tensor
    info: Tensor


class CholeskyEx(NamedTuple):
    L: Tensor
    info: Tensor


class Geqrf(NamedTuple):
    a: Tensor
    tau: Tensor


# Jacobi sweeps at most (each pairs every two columns once): from a random matrix the rotations reach the dtype's
# precision in 6-10
MAX_SWEEPS = 30


def _matrices(t: Tensor, op: str) -> Tensor:
    if t.ndim < 2:
        raise ShapeError(f"{op}: needs a matrix or a batch of matrices (2 or more dims), got shape {t.shape}")
    if t.dtype in (dtypes.float16, dtypes.bfloat16):
        # (the rotations and substitutions stop at float32's precision: in half they would never converge)
        raise TypeError(f"{op}: {t.dtype} isn't supported, as in torch.linalg; cast to float32 first (.float())")
    return t._float()


def _step_index(t: Tensor, j: int) -> Tensor:
    """j as a 1-element int32 tensor on t's device: masks built from it keep each step's kernels the same code (a
    Python int would be a constant, a new kernel to compile per step)."""
    return Tensor([j], dtype=dtypes.int32, device=t.device)


def householder_qr(a: Tensor, complete: bool) -> tuple[Tensor, Tensor]:
    """Q and R of float matrices `a` (..., m, n), LAPACK's conventions (geqrf): the reflector of column j maps it to
    beta e_j with beta = -sign(a_jj) |column|, none when the column is zero below the diagonal (R keeps a_jj). Q is
    (..., m, m) when `complete`, else (..., m, k) and R (..., k, n), k = min(m, n).

    Q = H_0 .. H_k-1 times the first columns of the identity, the reflections applied last to first (orgqr's order):
    m x k values a step where Q's reduced form is wanted, not m x m. Each step is realized: its graph is the same for
    every step (replayed), and so is its schedule."""
    m, n = a.shape[-2:]
    k = min(m, n)
    r, reflections = _householder_reflections(a)
    q = Tensor.eye(m, m if complete else k, dtype=a.dtype, device=a.device).expand(
        *a.shape[:-2], m, m if complete else k
    )
    for v, tau in reversed(reflections):
        q = replay_call(_reflected, (q, v, tau)).contiguous().realize()
    r = r.triu()
    q = tied_to_empty(q, a)
    return (q, r) if complete else (q, r[..., :k, :])


def _householder_reflections(a: Tensor) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
    """`householder_qr`'s reflections of `a` (..., m, n): R (zeros below the diagonal of its first k = min(m, n)
    columns) and each step's v (..., m) (1 at row j, zeros above) and tau (..., 1)."""
    r = a
    reflections = []
    for j in range(min(a.shape[-2:])):
        # (replayed: each step's graph is the same over the previous step's R and the step's index)
        r, v, tau = replay_call(_householder_step, (r, _step_index(a, j)))
        r, v, tau = r.contiguous(), v.contiguous(), tau.contiguous()
        Tensor.realize(r, v, tau)
        reflections.append((v, tau))
    return r, reflections


def householder_product_of(A: Tensor, tau: Tensor, op: str) -> Tensor:
    """The first n columns of H_1 ... H_k for A (..., m, n), m >= n, and tau (..., k), k <= n (torch.orgqr and
    torch.linalg.householder_product; `op` names the caller in errors)."""
    if A.ndim < 2:
        raise ShapeError(f"{op}: A must have at least 2 dimensions (..., m, n), got shape {A.shape}")
    m, n = A.shape[-2:]
    k = tau.shape[-1] if tau.ndim else -1
    if m < n:
        raise ShapeError(f"{op}: A (..., m, n) needs m >= n, got shape {A.shape}")
    if tau.ndim != A.ndim - 1 or tau.shape[:-1] != A.shape[:-2] or k > n:
        raise ShapeError(f"{op}: tau must be shaped (*A.shape[:-2], k) with k <= n = {n}, got {tau.shape}, A {A.shape}")
    if not dtypes.is_float(A.dtype) or A.dtype in dtypes.halves or tau.dtype != A.dtype:
        raise DTypeError(f"{op}: A and tau must both be float32 or float64, got {A.dtype} and {tau.dtype}")
    rows = Tensor.arange(m, device=A.device).unsqueeze(-1)
    q = Tensor.eye(m, n, dtype=A.dtype, device=A.device).expand(*A.shape[:-2], m, n)
    # applied right to left to the identity's first n columns: q <- q - tau_i v_i (v_i^T q)
    for i in reversed(range(k)):
        v = (rows > i).where(A[..., :, i : i + 1], (rows == i).cast(A.dtype))
        q = q - tau[..., i : i + 1].unsqueeze(-1) * v * (v.transpose(-1, -2) @ q)
    return q


def _reflected(q: Tensor, v: Tensor, tau: Tensor) -> Tensor:
    """H q, H = I - tau v v^T."""
    return q - (tau * v).unsqueeze(-1) * (v.unsqueeze(-1) * q).sum(-2, keepdim=True)


def _householder_step(r: Tensor, step: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Step j of `householder_qr` (j in `step`, a 1-element int32 tensor): column j of R reflected onto e_j, the
    reflection applied to R's other columns. Returns R, and the reflection's v (..., m) and tau (..., 1)."""
    m, n = r.shape[-2:]
    rows = Tensor.arange(m, dtype=dtypes.int32, device=r.device)
    cols = Tensor.arange(n, dtype=dtypes.int32, device=r.device)
    at, below = rows == step, rows > step
    col = (r * (cols == step).cast(r.dtype)).sum(-1)  # column j, (..., m)
    alpha = (col * at.cast(r.dtype)).sum(-1, keepdim=True)
    x = below.where(col, 0)
    # |x| and |(alpha, x)| scaled by the largest entry: squares of large or tiny values over- or underflow
    scale = (at | below).where(col.abs(), 0).max(axis=-1, keepdim=True)
    safe = (scale == 0).where(1, scale)
    rest = (x / safe).square().sum(-1, keepdim=True)
    reflect = rest != 0
    beta = -(((alpha / safe).square() + rest).sqrt() * safe).copysign(alpha)
    tau = reflect.where((beta - alpha) / beta, 0)
    v = at.where(1, x / reflect.where(alpha - beta, 1))
    # R <- H R, H = I - tau v v^T; column j becomes (beta or alpha) e_j, exactly
    vr = (v.unsqueeze(-1) * r).sum(-2, keepdim=True)
    r = r - (tau * v).unsqueeze(-1) * vr
    on_col = (cols == step).unsqueeze(0)
    r = (on_col & below.unsqueeze(-1)).where(
        0, (on_col & at.unsqueeze(-1)).where(reflect.where(beta, alpha).unsqueeze(-1), r)
    )
    return r, v, tau


def _square(t: Tensor, op: str) -> Tensor:
    a = _matrices(t, op)
    if a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{op}: needs square matrices, got shape {t.shape}")
    return a


def _with_right_side(a: Tensor, b: Tensor, op: str) -> tuple[Tensor, Tensor]:
    """Matrices `a` (..., m, n) and right-hand sides `b` (..., m, k) in their common float dtype, their batch axes
    broadcast together."""
    dtype = least_upper_dtype(a._float().dtype, b._float().dtype)
    batch = _broadcast_shape(a.shape[:-2], b.shape[:-2], op)
    a, b = a.cast(dtype), b.cast(dtype)
    # (an expand to its own shape changes nothing but costs a view's Python: a small solve's overhead)
    if a.shape[:-2] != batch:
        a = a.expand(*batch, *a.shape[-2:])
    if b.shape[:-2] != batch:
        b = b.expand(*batch, *b.shape[-2:])
    return a, b


def _diagonal(r: Tensor) -> Tensor:
    n = r.shape[-1]
    return (r * Tensor.eye(n, dtype=r.dtype, device=r.device)).sum(-1)


def _swapped(rows: Tensor, step: Tensor, p: Tensor) -> Tensor:
    """The row index that trades rows `step` and `p` (`rows`: 0 .. n-1): gathering by it is the swap."""
    return (rows == step).where(p, (rows == p).where(step, rows))


def lu_pivoted(a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """LAPACK's getrf on float matrices `a` (..., m, n): partial pivoting (the first largest |entry| on or below the
    diagonal, no swap and no elimination for a zero column), L (unit diagonal) and U packed in one matrix, and the
    row permutation (row i of P^T a is row perm[i] of a, int32 (..., m)) and LAPACK's 1-based pivots (int32
    (..., min(m, n)): step j swapped rows j and pivots[j] - 1)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    z, position = _eliminate(a, None, jordan=False)
    rows = Tensor.arange(m, dtype=a.dtype, device=a.device)
    # row j of the result is the row that became pivot j (its place in LAPACK's swapped order)
    at = position.unsqueeze(-2) == rows.unsqueeze(-1)  # (..., m (j), m (i))
    packed = at.unsqueeze(-1).where(z[..., :m, :n].unsqueeze(-3), 0).sum(-2)
    perm = at.where(rows.unsqueeze(-2), 0).sum(-1).cast(dtypes.int32)
    ipiv = z[..., m, :k].cast(dtypes.int32) + 1
    return tied_to_empty(packed, a), perm, ipiv


def _eliminate(a: Tensor, rhs: Tensor | None, jordan: bool, graph: bool | None = None) -> tuple[Tensor, Tensor]:
    """Gaussian elimination with LAPACK's partial pivoting on `a` (..., m, n), its row operations applied to `rhs`
    (..., m, k) too. The rows are never swapped: each carries its place in LAPACK's swapped order, and step j picks
    the first largest |entry| of column j among the rows placed at j or after (the same pivot getrf picks, ties
    included). `jordan`: every other row is eliminated too (Gauss-Jordan: a's part ends diagonal up to the row order),
    else the rows placed before j keep their U entries and the eliminated ones get L's multipliers.

    Returns z (..., m + 1, n + k + 1): a's part, rhs's part, then each row's place (as a float); the last row holds
    each step's pivot place (LAPACK's 0-based pivots) under a's columns. And the places (..., m).

    One step is the same few kernels for every j: a's columns rotate left by one per step (the column being eliminated
    is always column 0, the finished one goes to the end), so no step reads a column by a number of its own, and the
    record row's place counts the steps (-1 - j). `graph`: each step's graph is built (by default where a gradient
    flows through them), else the first step's kernels run again (`rounds.repeated`)."""
    m, n = a.shape[-2:]
    batch, dtype, device = a.shape[:-2], a.dtype, a.device
    places = Tensor.arange(m, dtype=dtype, device=device).unsqueeze(-1).expand(*batch, m, 1)
    parts = [a] if rhs is None else [a, rhs]
    z = parts[0].cat(*parts[1:], places, dim=-1)
    width = z.shape[-1]
    # the record row: no place (-1), so never a candidate
    record = Tensor.zeros(*batch, 1, width - 1, dtype=dtype, device=device).cat(
        Tensor.full((*batch, 1, 1), -1.0, dtype=dtype, device=device), dim=-1
    )
    z = z.cat(record, dim=-2).contiguous()
    if graph is None:
        graph = _differentiated(a) or (rhs is not None and _differentiated(rhs))
    # (each step's graph is the same over the previous step's z, which counts the steps: its kernels run again)
    z = repeated(_elimination_step, z, min(m, n), (n, jordan), graph)
    # a's columns back in their order (a wide matrix rotated fewer times than it has columns)
    turns = min(m, n) % n if n else 0
    if turns:
        z = z[..., :, n - turns : n].cat(z[..., :, : n - turns], z[..., :, n:], dim=-1)
    return z, z[..., :m, width - 1]


def _elimination_step(z: Tensor, n: int, jordan: bool) -> Tensor:
    """One step of `_eliminate` on z (..., m + 1, width), its column 0 the one being eliminated, the step number j
    read from the record row's place (-1 - j); z's columns rotate left by one."""
    m, width = z.shape[-2] - 1, z.shape[-1]
    dtype, device = z.dtype, z.device
    # body columns (a's columns 1.., then rhs's): a's column b + 1 is still to eliminate at step j while b < n - 1 - j
    body = Tensor.arange(width - 2, dtype=dtype, device=device)
    column, place = z[..., :, 0], z[..., :, width - 1]
    at = -1 - place[..., m:]
    candidate = place >= at
    # |entry|, NaN as the largest (so that some row is picked); the second is the same number written apart: one
    # node read by both reductions would be stored in a kernel of its own
    nan = column != column
    largest = candidate.where(nan.where(math.inf, column.abs()), -1).max(axis=-1, keepdim=True)
    size = nan.where(math.inf, column.maximum(-column))
    # the pivot's place, negated (a max; -max would be a kernel of its own, as would any value computed from a
    # reduction that two kernels read: each kernel below writes its own comparison)
    negated = (candidate & (size == largest)).where(-place, -m).max(axis=-1, keepdim=True)
    pivot_row = (-place == negated).unsqueeze(-1).where(z, 0).sum(-2, keepdim=True)  # (..., 1, width)
    pivot_place = -negated
    is_pivot = place == pivot_place
    value = pivot_row[..., :, :1]
    eliminated = ~is_pivot & ((place >= 0) if jordan else candidate)
    # (a zero column: nothing to eliminate, as getrf)
    eliminated = eliminated & (value.squeeze(-1) != 0)
    factor = (column / (value == 0).where(1, value).squeeze(-1)).unsqueeze(-1)
    live = ((body < (n - 1) - at) | (body >= n - 1)).unsqueeze(-2)
    rest = z[..., :, 1 : width - 1]
    rest = (eliminated.unsqueeze(-1) & live).where(rest - factor * pivot_row[..., :, 1 : width - 1], rest)
    # the finished column: L's multipliers (Gauss-Jordan: exact zeros), the others keep theirs; the record row
    # takes the pivot's place
    finished = eliminated.where(0 if jordan else factor.squeeze(-1), column)
    finished = (place < 0).where(pivot_place, finished)
    # (the record row counts the step)
    moved = (place < 0).where(place - 1, is_pivot.where(at, (place == at).where(pivot_place, place)))
    return rest[..., :, : n - 1].cat(finished.unsqueeze(-1), rest[..., :, n - 1 :], moved.unsqueeze(-1), dim=-1)


def _pivots_and_parity(a: Tensor) -> tuple[Tensor, Tensor]:
    """U's diagonal of LAPACK's pivoted LU of square matrices `a` (in the rows' own order) and the parity of its row
    swaps (1 for an odd number, as the dtype): det(a) = prod(diagonal) (-1)^parity."""
    n = a.shape[-1]
    z, place = _eliminate(a, None, jordan=False)
    columns = Tensor.arange(n, dtype=a.dtype, device=a.device)
    diagonal = (columns == place.unsqueeze(-1)).where(z[..., :n, :n], 0).sum(-1)
    swaps = (z[..., n, :n] != columns).sum(-1)
    return tied_to_empty(diagonal, a), (swaps & 1).cast(a.dtype)


def _gauss_jordan(a: Tensor, rhs: Tensor, refusal: str) -> Tensor:
    """x with a @ x = rhs for square `a` (..., n, n) and `rhs` (..., n, k), by Gauss-Jordan elimination with getrf's
    pivots; reads the pivots back to raise LinAlgError(`refusal`) for an exact zero (a singular matrix, as
    PyTorch's check)."""
    n = a.shape[-1]
    z, place = _eliminate(a, rhs, jordan=True)
    # each row of a's part has one nonzero left, its pivot: exact zeros elsewhere
    pivots = z[..., :n, :n].sum(-1)
    if (pivots == 0).any().item():
        raise LinAlgError(refusal)
    solved = z[..., :n, n : z.shape[-1] - 1] / pivots.unsqueeze(-1)
    # row i solves for the unknown of its place
    at = place.unsqueeze(-2) == Tensor.arange(n, dtype=a.dtype, device=a.device).unsqueeze(-1)
    return tied_to_empty(at.unsqueeze(-1).where(solved.unsqueeze(-3), 0).sum(-2), a, rhs)


def _scaled(a: Tensor) -> tuple[Tensor, Tensor]:
    """(a / scale, scale) with scale the largest |entry| of each matrix (1 for a zero one): squares of large (or tiny)
    entries over- (under)flow."""
    scale = a.abs().max(axis=(-2, -1), keepdim=True)
    scale = (scale == 0).where(1, scale)
    return a / scale, scale


def epsilon(dtype: object) -> float:
    """The machine epsilon of float64, else of float32 (the dtypes these factorizations compute in)."""
    return 2.220446049250313e-16 if dtype == dtypes.float64 else 1.1920929e-07


def _tolerance(size: int, dtype: object) -> float:
    # what the rotations stop at: the dtype's epsilon, times sqrt(size)
    return (size**0.5 if size else 1.0) * epsilon(dtype)


def _part(x: Tensor, dim: int, start: int, stop: int) -> Tensor:
    return x[..., start:stop] if dim == -1 else x[..., start:stop, :]


def _paired(x: Tensor, dim: int) -> Tensor:
    """The columns (`dim` -1) or rows (-2) of `x`, an even number, in the first round's layout: 0 .. h-1 (the p
    halves of the pairs), then width-1 down to h (the q halves), h = width / 2. The order is its own inverse."""
    half = x.shape[dim] // 2
    return _part(x, dim, 0, half).cat(_part(x, dim, half, 2 * half).flip(dim), dim=dim)


def _next_round(p: Tensor, q: Tensor, dim: int) -> Tensor:
    """The pairs (p_j, q_j) of one round, the halves `p` and `q` along `dim`, moved to the next round's: p_0 stays,
    the others step around a ring (p' = p_0, q_0, p_1 .. p_h-2 and q' = q_1 .. q_h-1, p_h-1). From the first round's
    layout every two columns meet once in width - 1 rounds (the circle method of a round-robin), which end in that
    layout again. A fixed move, so every round is the same graph: no permutation matrix or index to read."""
    half = p.shape[dim]
    if half == 1:
        return p.cat(q, dim=dim)
    ends = (_part(p, dim, 0, 1), _part(q, dim, 0, 1), _part(p, dim, 1, half - 1))
    return ends[0].cat(*ends[1:], _part(q, dim, 1, half), _part(p, dim, half - 1, half), dim=dim)


def _zeroing_rotation(a_pp: Tensor, a_qq: Tensor, a_pq: Tensor) -> tuple[Tensor, Tensor]:
    """(c, s): the Jacobi rotation of each pair that zeroes its a_pq, t = tan(theta) the smaller root of
    t^2 + 2 zeta t - 1 = 0 (no rotation, c = 1 and s = 0, where a_pq is already 0)."""
    still = a_pq != 0
    zeta = (a_qq - a_pp) / still.where(2 * a_pq, 1)
    t = (zeta >= 0).where(1.0, -1.0) / (zeta.abs() + (1 + zeta.square()).sqrt())
    c = still.where((1 + t.square()).rsqrt(), 1)
    return c, still.where(t, 0) * c


def _rotated(p: Tensor, q: Tensor, c: Tensor, s: Tensor, dim: int) -> Tensor:
    """The pairs' halves `p` and `q` along `dim` rotated by (c, s), one per pair (broadcast along the other axis),
    then moved to the next round's pairs."""
    c, s = (c.unsqueeze(-2), s.unsqueeze(-2)) if dim == -1 else (c.unsqueeze(-1), s.unsqueeze(-1))
    return _next_round(c * p - s * q, s * p + c * q, dim)


def _svd_round(z: Tensor, m: int) -> Tensor:
    """One rotation round of `jacobi_svd` on z (..., m + width, width), w's rows over V's: every pair of w's columns
    rotated to be orthogonal, V's columns with them, then moved to the next round's pairs."""
    half = z.shape[-1] // 2
    p, q = z[..., :, :half], z[..., :, half:]
    pw, qw = p[..., :m, :], q[..., :m, :]
    # the pairs' squared norms and dot products: one reduction
    sums = pw.square().stack(qw.square(), pw * qw, dim=-3).sum(-2)
    c, s = _zeroing_rotation(sums[..., 0, :], sums[..., 1, :], sums[..., 2, :])
    return _rotated(p, q, c, s, -1)


def _eigh_round(z: Tensor) -> Tensor:
    """One rotation round of `jacobi_eigh` on z (..., 2 width, width), w over V: the rotation of each pair that
    zeroes its entry of w applied to w's columns and rows and to V's columns, then all moved to the next round's
    pairs."""
    width = z.shape[-1]
    half = width // 2
    w = z[..., :width, :]
    # the pairs' entries: the diagonals of w's (p, p), (q, q) and (p, q) blocks
    app = w[..., :half, :half].diagonal(dim1=-2, dim2=-1)
    aqq = w[..., half:, half:].diagonal(dim1=-2, dim2=-1)
    apq = w[..., :half, half:].diagonal(dim1=-2, dim2=-1)
    c, s = _zeroing_rotation(app, aqq, apq)
    cols = _rotated(z[..., :, :half], z[..., :, half:], c, s, -1)
    rows = _rotated(cols[..., :half, :], cols[..., half:width, :], c, s, -2)
    # (the rotations of columns then rows round the two triangles apart; apart, each rotation is measured and chosen
    # by one of them, and the other's error stays: the largest eigenvalue's rounding over the smallest)
    rows = (rows + rows.transpose(-1, -2)) / 2
    return rows.cat(cols[..., width:, :], dim=-2)


def _converged(worst: Tensor, tol: float, op: str, shape: tuple[int, ...]) -> bool:
    """Whether the largest off-diagonal measure after a sweep, `worst`, ends the rotations (read back)."""
    if (worst_value := worst.item()) != worst_value:
        raise ArgumentError(f"{op}: the input has values that aren't finite (nan or inf), shape {shape}")
    return worst_value <= tol


def _off_diagonal(g: Tensor, diagonal: Tensor) -> Tensor:
    """The largest |g_ij| / sqrt(|g_ii g_jj|) over i != j of all matrices `g` (|g_ij| where that is 0)."""
    root = diagonal.abs().sqrt()
    both = root.unsqueeze(-1) * root.unsqueeze(-2)
    n = g.shape[-1]
    off = (both != 0).where(g.abs() / (both == 0).where(1, both), g.abs())
    return Tensor.eye(n, dtype=dtypes.bool, device=g.device).where(0, off).max()


def _sweeps(
    z: Tensor,
    round_fn: Callable[..., Tensor],
    args: tuple,
    off: Callable[[Tensor], Tensor],
    graph: bool,
    why: tuple[str, tuple[int, ...], float],
) -> Tensor:
    """Jacobi sweeps of `round_fn` (width - 1 rounds each, width = z's columns) over z until `off` of z, read back
    after each sweep, is at most the tolerance (at most MAX_SWEEPS sweeps); `why`: (the op, the input's shape, the
    tolerance). Every round is the same graph over the previous round's z: built and realized once (replayed,
    `replay_call`), its kernels then run again on the next z (`Rounds`), unless a gradient needs the graph of every
    round (`graph`)."""
    op, shape, tol = why
    z = z.contiguous().realize()
    rounds = None if graph or capturing else Rounds(z, round_fn, args)
    for _ in range(MAX_SWEEPS):
        if rounds is not None:
            z = rounds.run(z.shape[-1] - 1)
        else:
            for _ in range(z.shape[-1] - 1):
                # (realized each round: the rounds after the first replay its cached schedule)
                z = replay_call(round_fn, (z,), *args).contiguous().realize()
        if _converged(off(z), tol, op, shape):
            break
    return z


def _differentiated(a: Tensor) -> bool:
    """Whether a gradient may flow from the rotations to `a` (then each round needs a graph of its own)."""
    return is_grad_enabled() and a.requires_grad


def jacobi_svd(a: Tensor, full_matrices: bool) -> tuple[Tensor, Tensor, Tensor]:
    """U, S, Vh of float matrices `a` (..., m, n) with m >= n: one-sided Jacobi (Hestenes) rotates pairs of a's
    columns until every pair is orthogonal (to the dtype's precision, at most MAX_SWEEPS sweeps), accumulating the
    rotations in V; the columns' norms are S, sorted descending; U is the Q of a QR of the rotated columns (so it has
    orthonormal columns also where S is 0, and its complete basis when `full_matrices`).

    Each round rotates width / 2 disjoint pairs at once (width = n, or n + 1 to make it even: a zero column, which
    nothing rotates with) and moves the columns to the next round's pairs (`_next_round`): two kernels a round, the
    same for every round; after each sweep the largest |cos| of the angle between two columns is read back."""
    m, n = a.shape[-2:]
    batch = a.shape[:-2]
    w, scale = _scaled(a)
    width = n + n % 2
    w = w.pad(((0, 0),) * (a.ndim - 1) + ((0, width - n),))
    v = Tensor.eye(width, dtype=a.dtype, device=a.device).expand(*batch, width, width)
    # V's rows under w's: one matrix whose columns rotate together
    z = _paired(w.cat(v, dim=-2), -1)

    def off(z: Tensor) -> Tensor:
        w = z[..., :m, :]
        g = w.transpose(-1, -2) @ w
        return _off_diagonal(g, g.diagonal(dim1=-2, dim2=-1))

    why = ("svd", a.shape, _tolerance(m, a.dtype))
    z = _paired(_sweeps(z, _svd_round, (m,), off, _differentiated(a), why), -1)
    # in the original column order, the padding column dropped, then sorted by norm, largest first
    w, v = z[..., :m, :n], z[..., m : m + n, :n]
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


def _mirrored(a: Tensor, upper: bool, op: str) -> Tensor:
    """The symmetric matrices torch.linalg's routines for symmetric input read from `a`: its lower triangle (`upper`:
    its upper one) mirrored, the other triangle ignored. The gradient is torch's, symmetric, (g + g^T) / 2 for `a`, as
    if the input were (a + a^T) / 2; the node is a fresh CONTIGUOUS, so the rule is this call's alone."""
    a = _square(a, op)
    triangle, strict = (a.triu(), a.triu(1)) if upper else (a.tril(), a.tril(-1))
    out = (triangle + strict.transpose(-1, -2)).contiguous()

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
        grad = Tensor(g)
        return (((grad + grad.transpose(-1, -2)) / 2).uop,)

    set_gradient(out.uop, (a.uop,), rule)
    return out


def jacobi_eigh(a: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (ascending) and eigenvectors (columns) of symmetric float matrices `a` (..., n, n): two-sided
    (classical) Jacobi, every round rotating width/2 disjoint pairs of rows and columns at once (the rounds of
    `jacobi_svd`) until the off-diagonal entries vanish to the dtype's precision, the rotations accumulated in V."""
    n = a.shape[-1]
    batch = a.shape[:-2]
    w, scale = _scaled(a)
    width = n + n % 2  # a zero row and column make the count even; nothing rotates with them
    w = w.pad(((0, 0),) * (a.ndim - 2) + ((0, width - n), (0, width - n)))
    v = Tensor.eye(width, dtype=a.dtype, device=a.device).expand(*batch, width, width)
    # w's rows and columns and V's columns in the first round's layout, V's rows under w's
    z = _paired(_paired(w, -2).cat(v, dim=-2), -1)

    def off(z: Tensor) -> Tensor:
        w = z[..., :width, :]
        return _off_diagonal(w, w.diagonal(dim1=-2, dim2=-1))

    z = _sweeps(z, _eigh_round, (), off, _differentiated(a), ("eigh", a.shape, _tolerance(n, a.dtype)))
    # in the original order, the padding dropped
    values = _paired(z[..., :width, :].diagonal(dim1=-2, dim2=-1), -1)[..., :n] * scale.squeeze(-1)
    vectors = _paired(z[..., width : width + n, :], -1)[..., :n]
    values, order = values.sort(-1)
    return values, vectors.gather(-1, order.unsqueeze(-2).expand(*batch, n, n))


def _range_basis(a: Tensor, q: int, niter: int) -> Tensor:
    """An orthonormal basis (..., m, q) approximating the range of `a` (..., m, n): `a` times a Gaussian (n, q) test
    matrix, refined by `niter` rounds of multiplying by a.mT and a, each product orthonormalized (QR) so the leading
    directions don't swamp the others in floating point."""
    test = Tensor.randn(a.shape[-1], q, dtype=a.dtype, device=a.device)
    basis = (a @ test).qr().Q
    for _ in range(niter):
        basis = (a.mT @ basis).qr().Q
        basis = (a @ basis).qr().Q
    return basis


class FactorizeMixin:
    __slots__ = ()

    @autocast_op(FLOAT32)
    def qr(self: Tensor, mode: str = "reduced") -> QR:  # type: ignore[misc]
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
        host = lapack.qr(a, complete=mode == "complete") if lapack.on_host(a) else None
        q, r = householder_qr(a, complete=mode == "complete") if host is None else host
        if mode == "r":
            return QR(Tensor.empty(0, dtype=a.dtype, device=a.device), r)
        return QR(q, r)

    def svd(  # type: ignore[misc]
        self: Tensor, some: bool = True, compute_uv: bool = True, *, full_matrices: bool | None = None
    ) -> Any:
        """torch.svd (`A.svd()`): U, S, V with U @ diag(S) @ V.mT = self, S descending; reduced, (m, k) and (n, k)
        with k = min(m, n), when `some`, else (m, m) and (n, n); with `compute_uv=False` U and V are zeros of (m, m)
        and (n, n), as torch's. Given torch.linalg.svd's keyword `full_matrices`, linalg.svd's U, S, Vh (Vh = V.mT)
        instead, U (m, m) and Vh (n, n) when full. The signs of the singular vectors are not PyTorch's (they are
        arbitrary there too). Reads the convergence back after each Jacobi sweep (a realize), so it can't run inside a
        TinyJit.

        >>> u, s, v = Tensor([[3.0, 0.0], [0.0, -4.0]]).svd()
        >>> [round(x, 4) for x in s.tolist()]
        [4.0, 3.0]
        """
        if full_matrices is not None:
            return self._linalg_svd(full_matrices)
        u, s, vh = self._linalg_svd(not some)
        if not compute_uv:
            m, n = self.shape[-2:]
            u, vh = (Tensor.zeros(*self.shape[:-2], k, k, dtype=s.dtype, device=s.device) for k in (m, n))
        return SVDV(u, s, vh.transpose(-1, -2))

    @autocast_op(FLOAT32)
    def _linalg_svd(self: Tensor, full_matrices: bool) -> SVD:  # type: ignore[misc]
        a = _matrices(self, "svd")
        m, n = a.shape[-2:]
        if min(m, n) == 0:
            return SVD(*(tied_to_empty(x, a) for x in _empty_svd(a, full_matrices)))
        if a.numel() == 0:
            # an empty batch: nothing to rotate (and no largest entry to scale by)
            k = min(m, n)
            u_cols, v_rows = (m, n) if full_matrices else (k, k)
            shapes = ((m, u_cols), (k,), (v_rows, n))
            zeros = (Tensor.zeros(*a.shape[:-2], *s, dtype=a.dtype, device=a.device) for s in shapes)
            return SVD(*(tied_to_empty(x, a) for x in zeros))
        if lapack.on_host(a):
            return SVD(*lapack.svd(a, full_matrices))
        if m >= n:
            return SVD(*jacobi_svd(a, full_matrices))
        u, s, vh = jacobi_svd(a.transpose(-1, -2), full_matrices)
        return SVD(vh.transpose(-1, -2), s, u.transpose(-1, -2))

    def svd_lowrank(  # type: ignore[misc]
        self: Tensor, q: int | None = 6, niter: int = 2, M: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """torch.svd_lowrank: an approximate rank-q SVD (U, S, V) of `self - M` (M: None, or a tensor broadcast to
        the matrices) by a randomized range finder (Halko, Martinsson and Tropp, 2011): a Gaussian test matrix drawn
        from the global stream, then `niter` power iterations, each orthonormalized by QR. V, not Vh, as torch's
        (`U @ S.diag() @ V.mT` approximates the matrix); exact, up to the signs, where q reaches its rank. A batch of
        matrices shares one test matrix, as torch's.

        >>> u, s, v = Tensor([[3.0, 0.0], [0.0, 1.0], [0.0, 0.0]]).svd_lowrank(q=2)
        >>> [round(x, 4) for x in s.tolist()]
        [3.0, 1.0]
        """
        a = _matrices(self, "svd_lowrank")
        q = 6 if q is None else q
        if not isinstance(q, int) or q < 0 or not isinstance(niter, int) or niter < 0:
            raise ArgumentError(f"svd_lowrank: q and niter must be non-negative ints, got q={q!r}, niter={niter!r}")
        if M is not None:
            a = a - M
        m, n = a.shape[-2:]
        if m < n or n > q:
            # (the range of the transpose: the matrix left to factor, a times that basis, is (m, q))
            basis = _range_basis(a.mT, q, niter)
            u, s, vh = (a @ basis).svd(full_matrices=False)
            return u, s, basis @ vh.mT
        basis = _range_basis(a, q, niter)
        u, s, vh = (basis.mT @ a).svd(full_matrices=False)
        return basis @ u, s, vh.mT

    def pca_lowrank(  # type: ignore[misc]
        self: Tensor, q: int | None = None, center: bool = True, niter: int = 2
    ) -> tuple[Tensor, Tensor, Tensor]:
        """torch.pca_lowrank: `svd_lowrank` of the data matrix with each column's mean taken off (`center`), so V's
        columns are the q leading principal directions and S**2 / (m - 1) their variances. `q` defaults to
        min(6, m, n) and may not exceed min(m, n) (a `ValueError`, as torch's).

        >>> u, s, v = Tensor([[1.0, 2.0], [3.0, 6.0], [5.0, 10.0]]).pca_lowrank(q=1)
        >>> round(abs(v[1, 0].item() / v[0, 0].item()), 4)
        2.0
        """
        a = _matrices(self, "pca_lowrank")
        m, n = a.shape[-2:]
        q = min(6, m, n) if q is None else q
        if not isinstance(q, int) or not 0 <= q <= min(m, n):
            raise ValueError(
                f"pca_lowrank: q must be an int from 0 to min(m, n) = {min(m, n)} for shape {a.shape}, got {q!r}"
            )
        if not isinstance(niter, int) or niter < 0:
            raise ValueError(f"pca_lowrank: niter must be a non-negative int, got {niter!r}")
        if center:
            a = a - a.mean(-2, keepdim=True)
        return a.svd_lowrank(q=q, niter=niter)

    @autocast_op(FLOAT32)
    def det(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Determinant of a square matrix or a batch of them (torch.linalg.det), from the pivoted LU (getrf's, as
        PyTorch): the product of U's diagonal, negated for an odd number of row swaps.

        >>> round(Tensor([[1.0, 2.0], [3.0, 4.0]]).det().item(), 4)
        -2.0
        """
        # of the transpose, as PyTorch (LAPACK reads its row-major matrix as column-major: A^T), so the same roundings
        # and the same exact zeros ([[1, 2, 3], [4, 5, 6], [7, 8, 9]] has determinant 0 there, 6.7e-16 from A's LU)
        if lapack.on_host(square := _square(self, "det")):
            return lapack.det(square)
        a = square.transpose(-1, -2)
        diagonal, parity = _pivots_and_parity(a)
        return diagonal.prod(-1) * (1 - 2 * parity)

    @autocast_op(FLOAT32)
    def slogdet(self: Tensor) -> SlogDet:  # type: ignore[misc]
        """(sign, log|det|) of square matrices (torch.linalg.slogdet): sign 0 and -inf for a singular one."""
        # (of the transpose, as det)
        if lapack.on_host(square := _square(self, "slogdet")):
            return SlogDet(*lapack.slogdet(square))
        a = square.transpose(-1, -2)
        d, parity = _pivots_and_parity(a)
        return SlogDet(d.sign().prod(-1) * (1 - 2 * parity), d.abs().log().sum(-1))

    @autocast_op(FLOAT32)
    def logdet(self: Tensor) -> Tensor:  # type: ignore[misc]
        """log(det) of square matrices (torch.logdet): NaN for a negative determinant, -inf for a zero one."""
        sign, log_abs = self.slogdet()
        return (sign < 0).where(float("nan"), log_abs)

    @autocast_op(FLOAT32)
    def inverse(self: Tensor) -> Tensor:  # type: ignore[misc]
        """The inverse of square matrices (torch.linalg.inv), by Gauss-Jordan elimination with getrf's pivots.
        Reads the pivots back to refuse a singular matrix (an exact zero, as PyTorch's LU pivot check), so it can't
        run inside a TinyJit.

        >>> Tensor([[2.0, 0.0], [0.0, 4.0]]).inverse().tolist()
        [[0.5, 0.0], [0.0, 0.25]]
        """
        a = _square(self, "inverse")
        n = a.shape[-1]
        refusal = f"inverse: a matrix (shape {self.shape}) is singular: it has no inverse"
        if lapack.on_host(a):
            return lapack.inverse(a, refusal)
        eye = Tensor.eye(n, dtype=a.dtype, device=a.device).expand(*a.shape[:-2], n, n)
        return _gauss_jordan(a, eye, refusal)

    @autocast_op(FLOAT32)
    def solve(self: Tensor, other: Tensor, left: bool = True) -> Tensor:  # type: ignore[misc]
        """X with self @ X = other (torch.linalg.solve(self, other)); `left=False`: X @ self = other. `other` is a
        batch of vectors (..., n) when it is 1-d or has exactly self's shape without its last axis, else of matrices
        (..., n, k); batch axes broadcast. By Gauss-Jordan elimination with getrf's pivots; reads the pivots back
        to refuse a singular matrix (an exact zero), so it can't run inside a TinyJit.

        >>> Tensor([[2.0, 0.0], [0.0, 4.0]]).solve(Tensor([2.0, 2.0])).tolist()
        [1.0, 0.5]
        """
        a = _square(self, "solve")
        if not isinstance(other, Tensor):
            raise TypeError(f"solve: the right-hand side must be a Tensor, got {type(other).__name__}")
        n = a.shape[-1]
        vector = other.ndim == 1 or (other.ndim == a.ndim - 1 and other.shape == a.shape[:-1])
        if not left:
            if vector or other.ndim < 2:
                raise ShapeError(f"solve: left=False needs a matrix right-hand side (..., k, {n}), got {other.shape}")
            return a.transpose(-1, -2).solve(other.transpose(-1, -2)).transpose(-1, -2)
        b = other.unsqueeze(-1) if vector else other
        if b.ndim < 2 or b.shape[-2] != n:
            raise ShapeError(f"solve: A {self.shape} and B {other.shape}: B needs {n} rows (..., {n}) or (..., {n}, k)")
        a, b = _with_right_side(a, b, "solve")
        refusal = f"solve: a matrix of A (shape {self.shape}) is singular: no unique solution"
        x = lapack.solve(a, b, refusal) if lapack.on_host(a, b) else _gauss_jordan(a, b, refusal)
        return x.squeeze(-1) if vector else x

    @autocast_op(FLOAT32)
    def cholesky(self: Tensor, upper: bool = False) -> Tensor:  # type: ignore[misc]
        """The Cholesky factor of symmetric positive-definite matrices (torch.linalg.cholesky): lower triangular L with
        L @ L.T = self, or with `upper` the upper triangular L.T. Reads only the lower (`upper`: the upper) triangle,
        as torch; its gradient is torch's (symmetric). Raises when a matrix is not positive definite (read back once,
        so it can't run inside a TinyJit).

        >>> Tensor([[4.0, 2.0], [2.0, 5.0]]).cholesky().tolist()
        [[2.0, 0.0], [1.0, 2.0]]
        """
        if lapack.on_host(self):
            # (None: a matrix is not positive definite, which the device path finds and names)
            low = lapack.cholesky(_mirrored(self, upper, "cholesky"))
            if low is not None:
                return low.transpose(-1, -2) if upper else low
        low, info = _cholesky(self, upper, "cholesky")
        _refuse_not_positive_definite(info, self.shape)
        return low

    @autocast_op(FLOAT32)
    def cholesky_ex(self: Tensor, upper: bool = False, check_errors: bool = False) -> CholeskyEx:  # type: ignore[misc]
        """(L, info) as torch.linalg.cholesky_ex: no read-back (so it runs inside a TinyJit); info is 0, or for a
        matrix that is not positive definite the order of its first leading minor that is not (LAPACK's potrf),
        int32; L's columns from there on are not meaningful. `check_errors=True` raises as `cholesky`."""
        low, info = _cholesky(self, upper, "cholesky_ex")
        if check_errors:
            _refuse_not_positive_definite(info, self.shape)
        return CholeskyEx(low, info)

    @autocast_op(FLOAT32)
    def eigh(self: Tensor, UPLO: str = "L") -> Eigh:  # type: ignore[misc]  # noqa: N803
        """Eigenvalues (ascending) and orthonormal eigenvectors (columns) of symmetric matrices (torch.linalg.eigh):
        self = V @ diag(w) @ V.T. Reads only the lower triangle (UPLO="U": the upper), as torch. The eigenvectors'
        signs are arbitrary (torch's too). Reads the convergence back after each Jacobi sweep, so it can't run inside
        a TinyJit.

        >>> w, v = Tensor([[2.0, 1.0], [1.0, 2.0]]).eigh()
        >>> [round(x, 4) for x in w.tolist()]
        [1.0, 3.0]
        """
        if UPLO not in ("L", "U"):
            raise UnknownModeError(f"eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
        s = _mirrored(self, UPLO == "U", "eigh")
        if s.numel() == 0:
            # no matrices, or 0 x 0 ones
            return Eigh(tied_to_empty(Tensor.zeros(s.shape[:-1], dtype=s.dtype, device=s.device), s), s)
        if lapack.on_host(s):
            return Eigh(*lapack.eigh(s))
        # a matrix with a NaN or inf gets NaN eigenvalues and vectors, as torch's: the rotations see the identity in
        # its place (converged at once; a NaN they saw would never converge)
        finite = s.isfinite().all((-2, -1), keepdim=True)
        eye = Tensor.eye(s.shape[-1], dtype=s.dtype, device=s.device)
        values, vectors = jacobi_eigh(finite.where(s, eye))
        return Eigh(finite.squeeze(-1).where(values, math.nan), finite.where(vectors, math.nan))

    @autocast_op(FLOAT32)
    def eigvalsh(self: Tensor, UPLO: str = "L") -> Tensor:  # type: ignore[misc]  # noqa: N803
        """The eigenvalues of symmetric matrices, ascending (torch.linalg.eigvalsh); see eigh."""
        return self.eigh(UPLO)[0]

    @autocast_op(FLOAT32)
    def pinv(  # type: ignore[misc]
        self: Tensor, rtol: float | Tensor | None = None, hermitian: bool = False, *, atol: float | Tensor | None = None
    ) -> Tensor:
        """The Moore-Penrose pseudo-inverse (torch.linalg.pinv) from an SVD: singular values at or below
        max(atol, rtol * the largest) count as zero. `rtol` defaults to max(m, n) * the dtype's epsilon, or to 0 where
        `atol` is given and above 0, as torch's; either may be a tensor of one cut per matrix of the batch.
        `hermitian`: self is symmetric (its lower triangle is read, as torch), through eigh.

        >>> Tensor([[2.0, 0.0], [0.0, 0.0]]).pinv().tolist()
        [[0.5, 0.0], [0.0, 0.0]]
        >>> Tensor([[2.0, 0.0], [0.0, 0.01]]).pinv(atol=0.1).tolist()
        [[0.5, 0.0], [0.0, 0.0]]
        """
        a = _matrices(self, "pinv")
        m, n = a.shape[-2:]
        if min(m, n) == 0:
            return tied_to_empty(Tensor.zeros(*a.shape[:-2], n, m, dtype=a.dtype, device=a.device), a)
        cut, floor = _pinv_cuts(rtol, atol, max(m, n) * epsilon(a.dtype))
        if hermitian:
            w, v = a.eigh()
            big = (w.abs().max(axis=-1, keepdim=True) * cut).maximum(floor)
            inv = (w.abs() > big).where(1 / w, 0)
            return with_pinv_gradient((v * inv.unsqueeze(-2)) @ v.transpose(-1, -2), a)
        return with_pinv_gradient(pinv_from_svd(*a.svd(full_matrices=False), cut, floor), a)

    @autocast_op(FLOAT32)
    def pinverse(self: Tensor, rcond: float = 1e-15) -> Tensor:  # type: ignore[misc]
        """torch.pinverse: pinv with `rcond` as its rtol."""
        return self.pinv(rtol=rcond)

    @autocast_op(FLOAT32)
    def lu(self: Tensor, pivot: bool = True) -> PLU:  # type: ignore[misc]
        """P, L, U with self = P @ L @ U (torch.linalg.lu): LAPACK's partial pivoting (getrf), so the same factors
        as PyTorch's CPU; L (..., m, k) unit lower triangular, U (..., k, n), k = min(m, n). A singular matrix
        factors too (U has a zero on its diagonal).

        >>> p, l, u = Tensor([[1.0, 2.0], [3.0, 4.0]]).lu()
        >>> [round(v, 4) for v in u.flatten().tolist()]
        [3.0, 4.0, 0.0, 0.6667]
        """
        _need_pivoting(pivot, "lu")
        a = _matrices(self, "lu")
        m, n = a.shape[-2:]
        k = min(m, n)
        host = lapack.lu_factor(a) if lapack.on_host(a) else None
        if host is not None:
            return PLU(*lapack.unpacked_lu(host[0], host[3], a))
        packed, perm, _ = lu_pivoted(a)
        p = perm.one_hot(m).cast(a.dtype).transpose(-1, -2) if m else Tensor.zeros(*a.shape[:-2], 0, 0, dtype=a.dtype)
        eye = Tensor.eye(m, k, dtype=a.dtype, device=a.device)
        return PLU(p, packed[..., :, :k].tril(-1) + eye, packed[..., :k, :].triu())

    @autocast_op(FLOAT32)
    def lu_factor(self: Tensor, pivot: bool = True) -> LUFactor:  # type: ignore[misc]
        """(LU, pivots) as torch.linalg.lu_factor: L and U packed in one matrix (L's unit diagonal implied) and
        LAPACK's 1-based row swaps (int32). Reads U's diagonal back and refuses a zero there, as PyTorch (a singular
        matrix: use `lu`), so it can't run inside a TinyJit."""
        packed, pivots, info = _lu_factor(self, pivot, "lu_factor")
        _refuse_singular_lu(info, self.shape)
        return LUFactor(packed, pivots)

    @autocast_op(FLOAT32)
    def lu_factor_ex(self: Tensor, pivot: bool = True, check_errors: bool = False) -> LUFactorEx:  # type: ignore[misc]
        """(LU, pivots, info) as torch.linalg.lu_factor_ex: no read-back (so it runs inside a TinyJit); info is 0, or
        the 1-based index of U's first zero diagonal entry (LAPACK's getrf), int32. `check_errors=True` raises as
        `lu_factor`."""
        packed, pivots, info = _lu_factor(self, pivot, "lu_factor_ex")
        if check_errors:
            _refuse_singular_lu(info, self.shape)
        return LUFactorEx(packed, pivots, info)

    @autocast_op(FLOAT32)
    def lu_solve(self: Tensor, LU_data: Tensor, LU_pivots: Tensor) -> Tensor:  # type: ignore[misc]  # noqa: N803
        """X with A @ X = self, A given by `lu_factor`'s (LU, pivots) (torch.Tensor.lu_solve: self is the right-hand
        side, (..., n, k)).

        >>> a = Tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> [round(v, 4) for v in Tensor([[5.0], [6.0]]).lu_solve(*a.lu_factor()).flatten().tolist()]
        [-4.0, 4.5]
        """
        lu = _square(LU_data, "lu_solve")
        n = lu.shape[-1]
        if self.ndim < 2 or self.shape[-2] != n or LU_pivots.shape[-1:] != (n,):
            raise ShapeError(
                f"lu_solve: right-hand side {self.shape} needs {n} rows (..., {n}, k) for LU {LU_data.shape} and "
                f"pivots (..., {n}), got pivots {LU_pivots.shape}"
            )
        lu, b = _with_right_side(lu, self, "lu_solve")
        batch = _broadcast_shape(lu.shape[:-2], LU_pivots.shape[:-1], "lu_solve")
        if lapack.on_host(lu, b, LU_pivots) and (x := lapack.lu_solve(lu, LU_pivots, b)) is not None:
            return x
        lu, b = lu.expand(*batch, n, n), b.expand(*batch, n, b.shape[-1])
        pivots = LU_pivots.cast(dtypes.int32).expand(*batch, n) - 1
        rows = Tensor.arange(n, dtype=dtypes.int32, device=lu.device)
        for j in range(n):
            step = _step_index(lu, j)
            p = (pivots * (rows == step).cast(dtypes.int32)).sum(-1, keepdim=True)
            swap = _swapped(rows, step, p)
            b = b.gather(-2, swap.unsqueeze(-1).expand(*b.shape)).contiguous()
        y = triangular_solve(lu, b, upper=False, unit=True)
        return triangular_solve(lu, y, upper=True, unit=False)

    def lu_unpack(  # type: ignore[misc]
        self: Tensor,
        LU_pivots: Tensor,  # noqa: N803
        unpack_data: bool = True,
        unpack_pivots: bool = True,
    ) -> PLU:
        """torch.lu_unpack: P, L, U from `lu_factor`'s packed LU (self, (..., m, n)) and 1-based pivots, so that
        A = P @ L @ U. `unpack_data=False` leaves L and U empty, `unpack_pivots=False` P. The gradient reaches the
        packed LU through L and U.

        >>> p, l, u = Tensor.lu_unpack(*Tensor([[1.0, 2.0], [3.0, 4.0]]).lu_factor())
        >>> (p @ l @ u).tolist()
        [[1.0, 2.0], [3.0, 4.0]]
        """
        lu = _matrices(self, "lu_unpack")
        m, n = lu.shape[-2:]
        k = min(m, n)
        if not dtypes.is_int(LU_pivots.dtype) or LU_pivots.shape != lu.shape[:-2] + (k,):
            raise ArgumentError(
                f"lu_unpack: pivots must be lu_factor's, an int tensor of shape {lu.shape[:-2] + (k,)} for LU "
                f"{lu.shape}; got {LU_pivots.dtype} {LU_pivots.shape}"
            )
        empty = Tensor.zeros(0, dtype=lu.dtype, device=lu.device)
        el, u = empty, empty
        if unpack_data:
            el = lu[..., :, :k].tril(-1) + Tensor.eye(m, k, dtype=lu.dtype, device=lu.device)
            u = lu[..., :k, :].triu()
        if not unpack_pivots:
            return PLU(empty, el, u)
        _check_values_in(
            LU_pivots,
            1,
            m + 1,
            lambda bad: f"lu_unpack: pivot {bad} is outside 1..{m} (LU {lu.shape}): pass lu_factor's",
        )
        # LAPACK's swaps in order: step j trades rows j and pivots[j] - 1; row i of P^T A is row perm[i] of A
        rows = Tensor.arange(m, dtype=dtypes.int32, device=lu.device)
        perm = rows.expand(*lu.shape[:-2], m)
        pivots = LU_pivots.cast(dtypes.int32) - 1
        for j in range(k):
            step = _step_index(lu, j)
            p = (pivots * (rows[:k] == step).cast(dtypes.int32)).sum(-1, keepdim=True)
            at_step = (perm * (rows == step).cast(dtypes.int32)).sum(-1, keepdim=True)
            at_p = (perm * (rows == p).cast(dtypes.int32)).sum(-1, keepdim=True)
            perm = (rows == step).where(at_p, (rows == p).where(at_step, perm)).contiguous()
        return PLU(perm.one_hot(m).cast(lu.dtype).transpose(-1, -2), el, u)

    def geqrf(self: Tensor) -> Geqrf:  # type: ignore[misc]
        """torch.geqrf: the QR factorization of (..., m, n) in LAPACK's packed form: R on and above the diagonal, and
        below it the Householder vectors v_j (their 1 on the diagonal left out), with their scales tau (..., min(m, n));
        Q = H_0 ... H_k-1, H_j = I - tau_j v_j v_j^T (`orgqr` builds it, `ormqr` multiplies by it). The reflections
        are `qr`'s device path's (LAPACK's signs). Differentiable through its ops (torch's has no gradient).

        >>> a, tau = Tensor([[3.0, 1.0], [4.0, 2.0]]).geqrf()
        >>> [round(v, 4) for v in a.flatten().tolist()], [round(v, 4) for v in tau.tolist()]
        ([-5.0, -2.2, 0.5, 0.4], [1.6, 0.0])
        """
        a = _matrices(self, "geqrf")
        m, n = a.shape[-2:]
        k = min(m, n)
        if k == 0:
            return Geqrf(a.contiguous(), Tensor.zeros(*a.shape[:-2], 0, dtype=a.dtype, device=a.device))
        r, reflections = _householder_reflections(a)
        vectors = (
            Tensor.stack(*(v for v, _ in reflections), dim=-1).tril(-1).pad(((0, 0),) * (a.ndim - 1) + ((0, n - k),))
        )
        tau = Tensor.cat(*(t for _, t in reflections), dim=-1)
        return Geqrf(r.triu() + vectors, tau)

    def ormqr(  # type: ignore[misc]
        self: Tensor, tau: Tensor, other: Tensor, left: bool = True, transpose: bool = False
    ) -> Tensor:
        """torch.ormqr: `other` (..., m, n) multiplied by Q, the product of the Householder reflections that `geqrf`
        packs into self (..., mn, k) and tau (..., r), r <= k, mn = m when `left` else n: Q @ other (left), other @ Q
        (not left), with Q^T for `transpose`. Q is never formed: the reflections are applied to `other` one by one.

        >>> a, tau = Tensor([[3.0, 1.0], [4.0, 2.0]]).geqrf()
        >>> [round(v, 4) for v in Tensor.ormqr(a, tau, Tensor.eye(2)).flatten().tolist()]
        [-0.6, -0.8, -0.8, 0.6]
        """
        op = "ormqr"
        if not isinstance(tau, Tensor) or not isinstance(other, Tensor):
            raise TypeError(f"{op}: tau and other must be Tensors, got {type(tau).__name__} and {type(other).__name__}")
        if self.ndim < 2 or other.ndim < 2:
            raise ShapeError(f"{op}: input and other must be matrices (..., m, n), got {self.shape} and {other.shape}")
        mn, k = self.shape[-2:]
        r = tau.shape[-1] if tau.ndim else -1
        side = other.shape[-2] if left else other.shape[-1]
        if side != mn:
            which = "rows" if left else "columns"
            raise ShapeError(f"{op}: other {other.shape} must have {mn} {which}, input's rows {self.shape}")
        if tau.ndim != self.ndim - 1 or tau.shape[:-1] != self.shape[:-2] or r > min(mn, k):
            raise ShapeError(f"{op}: tau must be shaped (*input.shape[:-2], r), r <= {min(mn, k)}, got {tau.shape}")
        if other.shape[:-2] != self.shape[:-2]:
            raise ShapeError(f"{op}: input {self.shape} and other {other.shape} must have the same batch shape")
        for name, t in (("input", self), ("tau", tau), ("other", other)):
            if not dtypes.is_float(t.dtype) or t.dtype in dtypes.halves or t.dtype != self.dtype:
                raise DTypeError(f"{op}: input, tau and other must share float32 or float64, {name} is {t.dtype}")
        rows = Tensor.arange(mn, device=self.device).unsqueeze(-1)
        out = other
        # Q = H_0 .. H_r-1: Q C and C Q^T apply the last reflection first, Q^T C and C Q the first
        order = range(r) if left == transpose else reversed(range(r))
        for i in order:
            v = (rows > i).where(self[..., :, i : i + 1], (rows == i).cast(self.dtype))
            scale = tau[..., i : i + 1].unsqueeze(-1)
            if left:
                out = out - scale * v * (v.transpose(-1, -2) @ out)
            else:
                out = out - scale * (out @ v) * v.transpose(-1, -2)
        return out

    def orgqr(self: Tensor, tau: Tensor) -> Tensor:  # type: ignore[misc]
        """torch.orgqr (torch.linalg.householder_product): the first n columns of Q = H_0 ... H_k-1 for self
        (..., m, n), m >= n, and tau (..., k), k <= n, as `geqrf` packs them.

        >>> [round(v, 4) for v in Tensor.orgqr(*Tensor([[3.0], [4.0]]).geqrf()).flatten().tolist()]
        [-0.6, -0.8]
        """
        return householder_product_of(self, tau, "orgqr")


def _pinv_cuts(
    rtol: float | Tensor | None, atol: float | Tensor | None, default_rtol: float
) -> tuple[float | Tensor, float | Tensor]:
    """pinv's relative and absolute cuts, each a number or a tensor with an axis to broadcast over the singular
    values: rtol defaults to `default_rtol`, or to 0 where atol is above 0 (torch.linalg.pinv's rule)."""
    if isinstance(atol, Tensor):
        atol = atol.unsqueeze(-1)
    if isinstance(rtol, Tensor):
        rtol = rtol.unsqueeze(-1)
    if rtol is None:
        if isinstance(atol, Tensor):
            rtol = (atol > 0).where(0.0, default_rtol)
        else:
            rtol = 0.0 if atol is not None and atol > 0 else default_rtol
    return rtol, 0.0 if atol is None else atol


def pinv_from_svd(u: Tensor, sv: Tensor, vh: Tensor, cut: float | Tensor, floor: float | Tensor = 0.0) -> Tensor:
    """V diag(1 / S) U^T, singular values at or below max(`floor`, `cut` times the largest) taken as zero."""
    inv = (sv > (sv.max(axis=-1, keepdim=True) * cut).maximum(floor)).where(1 / sv, 0)
    return (vh.transpose(-1, -2) * inv.unsqueeze(-2)) @ u.transpose(-1, -2)


def with_pinv_gradient(p: Tensor, a: Tensor) -> Tensor:
    """`p`, the pseudo-inverse of `a`, with torch's gradient for it: the derivative of a pseudo-inverse of constant
    rank (Golub and Pereyra), dP = -P dA P + P P^T dA^T (I - A P) + (I - P A) dA^T P^T P, taken at `a` as given, so
    the same with `hermitian` (whose P reads a's lower triangle; the chain through eigh's rotations would give the
    symmetric part of it), and finite where the rank is deficient (the chain through 1 / S divides by the zeros)."""
    out = p.contiguous()

    def rule(g: UOp, wanted: tuple[bool, ...]) -> tuple[UOp]:
        grad_t = Tensor(g).transpose(-1, -2)
        p_t = p.transpose(-1, -2)
        # <G, dP> as <gA, dA>: the three terms of dP in turn
        spread = grad_t @ p @ p_t
        gathered = p_t @ p @ grad_t
        grad = -(p_t @ grad_t.transpose(-1, -2) @ p_t) + spread - a @ (p @ spread) + gathered - (gathered @ p) @ a
        return (grad.uop,)

    set_gradient(out.uop, (a.uop,), rule)
    return out


def _cholesky(t: Tensor, upper: bool, op: str) -> tuple[Tensor, Tensor]:
    """The Cholesky factor of `t`'s triangle (lower, or upper with `upper`) and potrf's info (see `cholesky_lower`)."""
    low, info = cholesky_lower(_mirrored(t, upper, op))
    return (low.transpose(-1, -2) if upper else low), info


def _refuse_not_positive_definite(info: Tensor, shape: tuple[int, ...]) -> None:
    """Read `info` back and raise for the first matrix that is not positive definite."""
    bad = info.numpy().reshape(-1)
    if (bad > 0).any():
        element = int(np.flatnonzero(bad)[0])
        which = f"batch element {element} of shape {shape}" if len(shape) > 2 else f"shape {shape}"
        raise LinAlgError(
            f"cholesky: the matrix of {which} is not positive-definite (its leading minor of order {bad[element]} "
            "is not)"
        )


def _need_pivoting(pivot: bool, op: str) -> None:
    if not pivot:
        raise ArgumentError(f"{op}: pivot=False (LU without pivoting) is not implemented, as on PyTorch's CPU")


def _lu_factor(t: Tensor, pivot: bool, op: str) -> tuple[Tensor, Tensor, Tensor]:
    """getrf on `t`: packed LU, 1-based pivots and info (the 1-based index of U's first zero on the diagonal, else
    0; int32)."""
    _need_pivoting(pivot, op)
    a = _matrices(t, op)
    host = lapack.lu_factor(a) if lapack.on_host(a) else None
    if host is not None:
        return host[:3]
    packed, _, pivots = lu_pivoted(a)
    k = min(a.shape[-2:])
    if not k:
        return packed, pivots, Tensor.zeros(a.shape[:-2], dtype=dtypes.int32, device=a.device)
    zero = _diagonal(packed[..., :k, :k]) == 0
    index = Tensor.arange(1, k + 1, dtype=dtypes.int32, device=a.device)
    # the first zero: the smallest index among the zeros (k + 1 where there is none, then 0)
    first = zero.where(index, k + 1).min(axis=-1)
    return packed, pivots, (first == k + 1).where(0, first).cast(dtypes.int32)


def _refuse_singular_lu(info: Tensor, shape: tuple[int, ...]) -> None:
    """Read `info` back and raise when U has a zero on its diagonal."""
    # (read as a whole: a stored info, the host path's, needs no kernel to reduce it)
    if np.any(info.numpy()):
        raise LinAlgError(
            f"lu_factor: a matrix (shape {shape}) is singular: U has a zero on its diagonal, and lu_solve would divide "
            "by it (lu() factors it)"
        )


def _empty_svd(a: Tensor, full_matrices: bool) -> tuple[Tensor, Tensor, Tensor]:
    """The SVD of matrices with no rows or no columns: no singular values, identity bases when `full_matrices`."""
    m, n = a.shape[-2:]
    batch = a.shape[:-2]

    def basis(size: int) -> Tensor:
        if full_matrices:
            return Tensor.eye(size, dtype=a.dtype, device=a.device).expand(*batch, size, size).contiguous()
        return Tensor.zeros(*batch, size, 0, dtype=a.dtype, device=a.device)

    return basis(m), Tensor.zeros(*batch, 0, dtype=a.dtype, device=a.device), basis(n).transpose(-1, -2)
