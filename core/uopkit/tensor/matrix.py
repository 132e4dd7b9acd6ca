"""torch.linalg's functions of matrices and vectors built on the factorizations (`tensor/factorize.py`): norms,
condition numbers and ranks, least squares, triangular solves, the matrix exponential, chained products.

Each is a Tensor method named as in torch.linalg, with its arguments and results (named tuples where torch returns
them); it works on the last two axes (the others are a batch) and differentiates through the ops it is made of.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from uopkit.dtype import dtypes
from uopkit.tensor import lapack
from uopkit.tensor.autocast import FLOAT32, GPU, LOWER, autocast_op
from uopkit.tensor.factorize import (
    _matrices,
    _square,
    _with_right_side,
    epsilon,
    pinv_from_svd,
    with_pinv_gradient,
)
from uopkit.tensor.support import (
    ArgumentError,
    DTypeError,
    LinAlgError,
    ShapeError,
    UnknownModeError,
    _normalize_axis,
    _sum_acc_dtype,
    tied_to_empty,
)
from uopkit.tensor.triangular import triangular_solve

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# the matrix norms matrix_norm and cond take, besides "fro" and "nuc"
_MATRIX_ORDS = (math.inf, -math.inf, 1, -1, 2, -2)
# Taylor terms of the matrix exponential once the matrix is scaled to norm <= 1: the remainder is below 1/19! (8e-18)
_EXP_TERMS = 18


class LstsqResult(NamedTuple):
    """torch.linalg.lstsq's result; which fields are filled depends on the driver (see Tensor.lstsq)."""

    solution: Tensor
    residuals: Tensor
    rank: Tensor
    singular_values: Tensor


class MatrixMixin:
    __slots__ = ()

    @autocast_op(FLOAT32, GPU)
    def vector_norm(  # type: ignore[misc]
        self: Tensor, ord: float = 2, dim: int | Sequence[int] | None = None, keepdim: bool = False
    ) -> Tensor:
        """torch.linalg.vector_norm: the ord-norm over `dim` (all elements when None); inf is max |x|, -inf min |x|,
        0 the count of nonzeros.

        >>> Tensor([3.0, -4.0]).vector_norm(ord=1).item()
        7.0
        """
        if isinstance(ord, str):
            raise ArgumentError(f"vector_norm: ord must be a number, got {ord!r} (matrix_norm takes 'fro' and 'nuc')")
        return self.norm(p=float(ord), dim=dim, keepdim=keepdim)

    @autocast_op(FLOAT32, GPU)
    def matrix_norm(  # type: ignore[misc]
        self: Tensor, ord: float | str = "fro", dim: tuple[int, int] = (-2, -1), keepdim: bool = False
    ) -> Tensor:
        """torch.linalg.matrix_norm over the two axes `dim` (rows, columns): "fro", "nuc" (sum of the singular
        values), inf / -inf (largest / smallest sum of |x| along a row), 1 / -1 (along a column), 2 / -2 (largest /
        smallest singular value).

        >>> Tensor([[1.0, -2.0], [3.0, 4.0]]).matrix_norm(ord=1).item()
        6.0
        """
        if not (ord in ("fro", "nuc") or ord in _MATRIX_ORDS):
            raise ArgumentError(f"matrix_norm: ord must be 'fro', 'nuc', inf, -inf, 1, -1, 2 or -2, got {ord!r}")
        if not isinstance(dim, (tuple, list)) or len(dim) != 2:
            raise ArgumentError(f"matrix_norm: dim must be two axes, got {dim!r}")
        if not dtypes.is_float(self.dtype):
            raise DTypeError(f"matrix_norm: needs a floating-point tensor, got {self.dtype}; cast with .float()")
        if self.ndim < 2:
            raise ShapeError(f"matrix_norm: needs 2 or more dims, got shape {self.shape}")
        rows, cols = (_normalize_axis(d, self.ndim, "matrix_norm", self.shape) for d in dim)
        if rows == cols:
            raise ArgumentError(f"matrix_norm: dim must be two different axes, got {dim!r}")
        # the two axes moved last, rows then columns
        order = [a for a in range(self.ndim) if a not in (rows, cols)] + [rows, cols]
        x = self.permute(order)
        if ord == "fro":
            # (vector_norm's: half floats summed in float32, as torch's; x * x overflows float16 from 256)
            out = x.norm(dim=(-2, -1)) if x.numel() else x.sum((-2, -1))
        elif ord in ("nuc", 2, -2):
            sv = x.svd(full_matrices=False)[1]
            # (the largest of no singular values is 0, as torch's; the smallest raises, as there)
            out = (
                sv.sum(-1)
                if ord == "nuc" or (ord == 2 and not sv.shape[-1])
                else sv.max(axis=-1)
                if ord == 2
                else sv.min(axis=-1)
            )
        else:
            along = -1 if abs(ord) == math.inf else -2  # inf: a row's sum of |x|, 1: a column's
            sums = x.abs().sum(along)
            # (the largest of no sums is 0, as torch's: the sum of none)
            out = (
                sums.sum(-1) if ord > 0 and not sums.shape[-1] else sums.max(axis=-1) if ord > 0 else sums.min(axis=-1)
            )
        if keepdim:
            for axis in sorted((rows, cols)):
                out = out.unsqueeze(axis)
        return out

    @autocast_op(FLOAT32)
    def cond(self: Tensor, p: float | str | None = None) -> Tensor:  # type: ignore[misc]
        """torch.linalg.cond: ||A||_p ||A^-1||_p; p None or 2 (and -2) from the singular values (inf for a singular
        matrix), others ("fro", "nuc", inf, -inf, 1, -1) of square matrices through the inverse (inf for a singular
        one, as torch; no read-back).

        >>> round(Tensor([[2.0, 0.0], [0.0, 0.5]]).cond().item(), 4)
        4.0
        """
        a = _matrices(self, "cond")
        if p is not None and p not in (2, -2):
            a = _square(a, "cond")
        if a.numel() == 0:
            # (no entries: 0, as torch's, whatever the norm, and not requiring grad)
            return Tensor.zeros(a.shape[:-2], dtype=a.dtype, device=a.device)
        if p is None or p in (2, -2):
            sv = a.svd(full_matrices=False)[1]
            big, small = sv.max(axis=-1), sv.min(axis=-1)
            return small / big if p == -2 else big / small
        # the inverse from an LU without the read-back that refuses a singular matrix: its condition number is inf,
        # as torch's (which masks by inv_ex's info)
        packed, pivots, info = a.lu_factor_ex()
        eye = Tensor.eye(a.shape[-1], dtype=a.dtype, device=a.device).expand(*a.shape)
        inverse = eye.lu_solve(packed, pivots)
        return (info > 0).where(float("inf"), a.matrix_norm(p) * inverse.matrix_norm(p))

    @autocast_op(FLOAT32)
    def matrix_rank(  # type: ignore[misc]
        self: Tensor, atol: float | None = None, rtol: float | None = None, hermitian: bool = False
    ) -> Tensor:
        """torch.linalg.matrix_rank: how many singular values (|eigenvalues| when `hermitian`) are above
        max(atol, rtol * the largest); with neither given, rtol = max(m, n) * eps (int64).

        >>> Tensor([[1.0, 2.0], [2.0, 4.0]]).matrix_rank().item()
        1
        """
        a = _matrices(self, "matrix_rank")
        m, n = a.shape[-2:]
        if rtol is None:
            rtol = max(m, n) * epsilon(a.dtype) if atol is None or atol == 0 else 0.0
        if min(m, n) == 0:
            return Tensor.zeros(a.shape[:-2], dtype=dtypes.int64, device=a.device)
        sv = a.eigvalsh().abs() if hermitian else a.svd(full_matrices=False)[1]
        cut = (sv.max(axis=-1, keepdim=True) * rtol).maximum(atol or 0.0)
        return (sv > cut).sum(-1).cast(dtypes.int64)

    @autocast_op(FLOAT32)
    def lstsq(  # type: ignore[misc]
        self: Tensor, b: Tensor, rcond: float | None = None, driver: str | None = None
    ) -> LstsqResult:
        """torch.linalg.lstsq(A, B, rcond, driver=) on the CPU: the X minimizing ||A X - B|| (of least norm where A
        has deficient rank). B is (..., m, k) or, for a single vector, (..., m) where torch takes it so; batch axes
        broadcast. The drivers fill the results as LAPACK's do under torch:

        - "gelsy" (the default), "gelsd", "gelss": from an SVD, singular values at or below rcond * the largest
          counting as zero (default max(m, n) * eps), and `rank` A's rank. "gelsd" and "gelss" give the singular
          values (no gradient, as torch's) and, where m > n and every matrix has full rank (read back), the residuals
          ||A X - B||^2 of each column; "gelsy" neither.
        - "gels": from a QR of A (of A^T where m < n), for A of full rank (a zero on R's diagonal raises LinAlgError,
          read back); no rank or singular values (empty), and the residuals wherever m > n.

        >>> round(Tensor([[1.0], [1.0]]).lstsq(Tensor([[1.0], [3.0]])).solution.item(), 4)
        2.0
        """
        driver = "gelsy" if driver is None else driver
        if driver not in ("gels", "gelsy", "gelsd", "gelss"):
            raise UnknownModeError(f"lstsq: driver must be one of 'gels', 'gelsy', 'gelsd', 'gelss', got {driver!r}")
        a = _matrices(self, "lstsq")
        if not isinstance(b, Tensor):
            raise TypeError(f"lstsq: B must be a Tensor, got {type(b).__name__}")
        m, n = a.shape[-2:]
        vector = b.ndim == a.ndim - 1
        rhs = b.unsqueeze(-1) if vector else b
        if rhs.ndim < 2 or rhs.shape[-2] != m:
            raise ShapeError(f"lstsq: A {self.shape} has {m} rows, B {b.shape} needs them too (..., {m}, k)")
        a, rhs = _with_right_side(a, rhs, "lstsq")
        batch, dtype = a.shape[:-2], a.dtype
        cut = max(m, n) * epsilon(dtype) if rcond is None or rcond < 0 else rcond
        empty = Tensor.empty(0, dtype=dtype, device=a.device)
        rank, singular_values = Tensor.empty(0, dtype=dtypes.int64, device=a.device), empty
        if min(m, n) == 0:
            solution = tied_to_empty(Tensor.zeros(*batch, n, rhs.shape[-1], dtype=dtype, device=a.device), a, rhs)
            if driver != "gels":
                rank = Tensor.zeros(batch, dtype=dtypes.int64, device=a.device)
                singular_values = Tensor.zeros(*batch, 0, dtype=dtype, device=a.device)
        elif driver == "gels":
            solution = _full_rank_solution(a, rhs)
        else:
            # one SVD for the solution and the rank (each is a Jacobi iteration with a realize per round)
            u, sv, vh = a.svd(full_matrices=False)
            solution = with_pinv_gradient(pinv_from_svd(u, sv, vh, cut), a) @ rhs
            rank = (sv > sv.max(axis=-1, keepdim=True) * cut).sum(-1).cast(dtypes.int64)
            singular_values = sv.detach()
        if driver == "gelsy":
            singular_values = empty
        # the residuals of tall matrices, for the SVD drivers only where all have full rank (LAPACK's rows past n)
        if m > n and driver == "gels" and n == 0:
            # (torch's gels gives an A of no columns zeros, where the SVD drivers give ||B||^2)
            residuals = tied_to_empty(Tensor.zeros(*batch, rhs.shape[-1], dtype=dtype, device=a.device), a)
        elif m > n and (driver == "gels" or (driver != "gelsy" and bool((rank == n).all().item()))):
            residuals = (a @ solution - rhs).square().sum(-2)
        else:
            # (torch's empty residuals come from A and B: they require grad where those do)
            residuals = tied_to_empty(empty, a) if min(m, n) == 0 or a.numel() == 0 else empty
        return LstsqResult(solution.squeeze(-1) if vector else solution, residuals, rank, singular_values)

    @autocast_op(FLOAT32)
    def solve_triangular(  # type: ignore[misc]
        self: Tensor, b: Tensor, *, upper: bool, left: bool = True, unitriangular: bool = False
    ) -> Tensor:
        """torch.linalg.solve_triangular(A, B, upper=...): X with A @ X = B (`left=False`: X @ A = B) for triangular
        A, its other triangle not read; `unitriangular` takes A's diagonal as ones. Batch axes broadcast.

        >>> Tensor([[2.0, 1.0], [0.0, 4.0]]).solve_triangular(Tensor([[4.0], [8.0]]), upper=True).tolist()
        [[1.0], [2.0]]
        """
        a = _square(self, "solve_triangular")
        if not isinstance(b, Tensor) or b.ndim < 2:
            raise ShapeError(f"solve_triangular: B must be a matrix or a batch of them (..., n, k), got {b!r}")
        if not left:
            return (
                a.transpose(-1, -2)
                .solve_triangular(b.transpose(-1, -2), upper=not upper, unitriangular=unitriangular)
                .transpose(-1, -2)
            )
        n = a.shape[-1]
        if b.shape[-2] != n:
            raise ShapeError(f"solve_triangular: A {self.shape} and B {b.shape}: B needs {n} rows")
        a, b = _with_right_side(a, b, "solve_triangular")
        if lapack.on_host(a, b) and (x := lapack.triangular(a, b, upper, unitriangular)) is not None:
            return x
        return triangular_solve(a, b, upper=upper, unit=unitriangular)

    @autocast_op(FLOAT32)
    def cholesky_inverse(self: Tensor, upper: bool = False) -> Tensor:  # type: ignore[misc]
        """torch.cholesky_inverse: (L L^T)^-1 from a Cholesky factor L (`upper`: from U, (U^T U)^-1)."""
        factor = _square(self, "cholesky_inverse")
        low = factor.transpose(-1, -2) if upper else factor
        n = low.shape[-1]
        eye = Tensor.eye(n, dtype=low.dtype, device=low.device).expand(*low.shape[:-2], n, n)
        inv = triangular_solve(low, eye, upper=False, unit=False)  # L^-1
        return inv.transpose(-1, -2) @ inv

    @autocast_op(FLOAT32)
    def matrix_exp(self: Tensor) -> Tensor:  # type: ignore[misc]
        """torch.linalg.matrix_exp: e^A by scaling and squaring, A / 2^s with norm at most 1, its Taylor series to
        18 terms, squared s times. Reads the norm back to choose s (so it can't run inside a TinyJit).

        >>> [round(v, 4) for v in Tensor([[0.0, 1.0], [0.0, 0.0]]).matrix_exp().flatten().tolist()]
        [1.0, 1.0, 0.0, 1.0]
        """
        if self.dtype in (dtypes.float16, dtypes.bfloat16):
            # computed in float32, as torch's half results are (rounded once at the end)
            return self.float().matrix_exp().cast(self.dtype)
        a = _square(self, "matrix_exp")
        n = a.shape[-1]
        if a.numel() == 0:
            return a
        # a matrix with a NaN or inf gives NaN, as torch's: the others' norm chooses the squarings, it is 0 meanwhile
        finite = a.isfinite().all((-2, -1), keepdim=True)
        a = finite.where(a, 0.0)
        norm = a.abs().sum(-2).max().item()  # the largest 1-norm of the batch's matrices
        if norm == math.inf:
            raise ArgumentError(
                f"matrix_exp: a matrix's 1-norm overflows {a.dtype} (its entries are finite), shape {a.shape}"
            )
        squarings = max(0, math.ceil(math.log2(norm))) if norm > 1 else 0
        x = a / 2.0**squarings
        eye = Tensor.eye(n, dtype=a.dtype, device=a.device)
        # Horner: I + x (I + x/2 (I + x/3 (...)))
        out = eye + x / _EXP_TERMS
        for k in range(_EXP_TERMS - 1, 0, -1):
            out = eye + (x @ out) / k
        for _ in range(squarings):
            out = out @ out
        return finite.where(out, math.nan)

    @staticmethod
    def multi_dot(tensors: Sequence[Tensor]) -> Tensor:
        """torch.linalg.multi_dot: the product of two or more matrices, the first may be a vector (a row) and the
        last a vector (a column), taken in the order that costs the fewest multiplications (so its rounding can
        differ from a left-to-right product's, as torch's).

        >>> Tensor.multi_dot([Tensor([1.0, 2.0]), Tensor([[1.0, 0.0], [0.0, 1.0]]), Tensor([3.0, 4.0])]).item()
        11.0
        """
        ts = list(tensors)
        if len(ts) < 2:
            raise ArgumentError(f"multi_dot: needs at least 2 tensors, got {len(ts)}")
        first_vector, last_vector = ts[0].ndim == 1, ts[-1].ndim == 1
        first = ts[0].unsqueeze(0) if first_vector else ts[0]
        mats = [first, *ts[1:-1], ts[-1].unsqueeze(-1) if last_vector else ts[-1]]
        for i, t in enumerate(mats):
            if t.ndim != 2:
                raise ShapeError(
                    f"multi_dot: tensor {i} must be a matrix (the first and last may be vectors), got {ts[i].shape}"
                )
        for i in range(len(mats) - 1):
            if mats[i].shape[1] != mats[i + 1].shape[0]:
                raise ShapeError(
                    f"multi_dot: tensors {i} {ts[i].shape} and {i + 1} {ts[i + 1].shape} can't be multiplied"
                )
        out = _chain_product(mats)
        if first_vector:
            out = out.squeeze(0)
        return out.squeeze(-1) if last_vector else out

    @autocast_op(LOWER)
    def vecdot(self: Tensor, other: Tensor, dim: int = -1) -> Tensor:  # type: ignore[misc]
        """torch.linalg.vecdot: sum(x * y) along `dim`, the operands broadcast (real tensors: no conjugate).

        >>> Tensor([1.0, 2.0]).vecdot(Tensor([3.0, 4.0])).item()
        11.0
        """
        x, y = self._broadcasted(other, op="vecdot")
        return (x * y).sum(_normalize_axis(dim, x.ndim, "vecdot", x.shape))

    def vander(self: Tensor, N: int | None = None, increasing: bool = False) -> Tensor:  # type: ignore[misc]  # noqa: N803
        """torch.vander: the powers of a 1-D tensor's values in the columns, x^(N-1) .. x^0 (x^0 .. x^(N-1) with
        `increasing=True`); N defaults to the number of values and may be 0. Bool and small ints give int32 (uint32
        for unsigned ones), as sum's (torch: int64); half floats multiply in float32 and round each power once, as
        torch's cumprod. `uopkit.linalg.vander` is torch.linalg's (increasing, any batch, N at least 2).

        >>> Tensor([1, 2, 3]).vander().tolist()
        [[1, 1, 1], [4, 2, 1], [9, 3, 1]]
        """
        if self.ndim != 1:
            raise ShapeError(f"vander: x must be a one-dimensional tensor, as torch.vander's, got shape {self.shape}")
        if N is not None and N < 0:
            raise ArgumentError(f"vander: N must be non-negative, got N={N}")
        count = self.shape[0] if N is None else N
        out_dtype = self.dtype if dtypes.is_float(self.dtype) else _sum_acc_dtype(self.dtype)
        powers = _increasing_powers(self.cast(_sum_acc_dtype(self.dtype)), count).cast(out_dtype)
        return powers if increasing else powers.flip(-1)


def _increasing_powers(x: Tensor, count: int) -> Tensor:
    # x^0 .. x^(count-1) of the last axis' values in a new last axis, each power the one before times x
    x = x.unsqueeze(-1)
    powers = [Tensor.ones_like(x)]
    for _ in range(count - 1):
        powers.append(powers[-1] * x)
    return powers[0].cat(*powers[1:], dim=-1)[..., :count]


def linalg_vander(x: Tensor, N: int | None = None) -> Tensor:  # noqa: N803
    """torch.linalg.vander: the powers x^0 .. x^(N-1) of the last axis' values, in a new last axis (N defaults to its
    size). N must be at least 2, as torch's (so a last axis of 0 or 1 values needs an N); bool raises."""
    if x.ndim < 1:
        raise ShapeError(f"vander: needs at least one dim (the values along the last), got shape {x.shape}")
    if x.dtype == dtypes.bool:
        raise DTypeError("vander: takes float and integer tensors, got bool (as torch.linalg.vander); cast first")
    count = x.shape[-1] if N is None else N
    if count <= 1:
        given = f"N={N}" if N is not None else f"no N, and the last axis holds {count} values"
        raise ArgumentError(f"vander: N must be greater than 1, as torch.linalg.vander's, got {given}")
    return _increasing_powers(x, count)


def _full_rank_solution(a: Tensor, rhs: Tensor) -> Tensor:
    """lstsq's "gels": X from a QR of A (..., m, n), R X = Q^T B where m >= n; where m < n the least-norm solution
    X = Q R^-T B of A^T = Q R. A zero on R's diagonal (A not of full rank) raises LinAlgError, as LAPACK's trtrs."""
    tall = a.shape[-2] >= a.shape[-1]
    q, r = (a if tall else a.transpose(-1, -2)).qr()
    pivots = r.diagonal(dim1=-2, dim2=-1)
    zero = (pivots == 0).cast(dtypes.int32).numpy().reshape(-1, pivots.shape[-1])
    if zero.any():
        which = int(zero.any(-1).argmax())
        matrix = f"matrix {which} of A {a.shape}" if a.ndim > 2 else f"A {a.shape}"
        raise LinAlgError(
            f"lstsq: driver 'gels' needs A of full rank: {matrix} is not (R's diagonal element "
            f"{int(zero[which].argmax()) + 1} is zero); the SVD drivers 'gelsd', 'gelss', 'gelsy' take any rank"
        )
    if tall:
        return triangular_solve(r, q.transpose(-1, -2) @ rhs, upper=True, unit=False)
    return q @ triangular_solve(r.transpose(-1, -2), rhs, upper=False, unit=False)


def _chain_product(mats: list[Tensor]) -> Tensor:
    """The product of matrices in the order with the fewest scalar multiplications (the textbook dynamic program)."""
    dims = [mats[0].shape[0]] + [m.shape[1] for m in mats]
    count = len(mats)
    cost = [[0] * count for _ in range(count)]
    split = [[0] * count for _ in range(count)]
    for length in range(1, count):
        for i in range(count - length):
            j = i + length
            cost[i][j] = math.inf  # type: ignore[call-overload]
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k

    def product(i: int, j: int) -> Tensor:
        return mats[i] if i == j else product(i, split[i][j]) @ product(split[i][j] + 1, j)

    return product(0, count - 1)
