"""torch.linalg's functions by torch.linalg's names (`uopkit.linalg.det(a)` for `torch.linalg.det(a)`): thin
functions over the Tensor methods of tensor/factorize.py and tensor/matrix.py, with torch.linalg's argument order and
defaults where a method's differ (`cross` on the last axis, `diagonal` of the last two, `norm` choosing a vector or a
matrix norm from `dim`). What has no method here (`eig`, `eigvals`, `householder_product`, `tensorsolve`, ...) is not
defined.

>>> from uopkit import Tensor, linalg
>>> linalg.det(Tensor([[2.0, 1.0], [1.0, 3.0]])).item()
5.0
>>> linalg.cross(Tensor([[1.0, 0.0, 0.0]] * 3), Tensor([[0.0, 1.0, 0.0]] * 3))[0].tolist()
[0.0, 0.0, 1.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from uopkit.dtype import DType, dtypes
from uopkit.tensor import Tensor
from uopkit.tensor.factorize import PLU, QR, SVD, CholeskyEx, Eigh, LUFactor, LUFactorEx, SlogDet
from uopkit.tensor.matrix import LstsqResult
from uopkit.tensor.support import ArgumentError

__all__ = [
    "cholesky",
    "cholesky_ex",
    "cond",
    "cross",
    "det",
    "diagonal",
    "eigh",
    "eigvalsh",
    "inv",
    "inv_ex",
    "lstsq",
    "lu",
    "lu_factor",
    "lu_factor_ex",
    "lu_solve",
    "matmul",
    "matrix_exp",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "multi_dot",
    "norm",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "solve_ex",
    "solve_triangular",
    "svd",
    "svdvals",
    "vander",
    "vecdot",
    "vector_norm",
]


class SolveEx(NamedTuple):
    """torch.linalg.solve_ex's (result, info)."""

    result: Tensor
    info: Tensor


class InvEx(NamedTuple):
    """torch.linalg.inv_ex's (inverse, info)."""

    inverse: Tensor
    info: Tensor


def _cast(x: Tensor, dtype: DType | str | None) -> Tensor:
    # torch's `dtype=` of the norms: the input cast to it first
    return x if dtype is None else x.cast(dtype)


def vector_norm(
    x: Tensor, ord: float = 2, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, dtype=None
) -> Tensor:
    """torch.linalg.vector_norm: the `ord`-norm over `dim` (all elements when None)."""
    return _cast(x, dtype).vector_norm(ord, dim, keepdim)


def matrix_norm(
    A: Tensor, ord: float | str = "fro", dim: tuple[int, int] = (-2, -1), keepdim: bool = False, *, dtype=None
) -> Tensor:
    """torch.linalg.matrix_norm: "fro", "nuc", inf, -inf, 1, -1, 2, -2 over the two axes `dim`."""
    return _cast(A, dtype).matrix_norm(ord, dim, keepdim)


def norm(
    A: Tensor,
    ord: float | str | None = None,
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
    *,
    dtype=None,
) -> Tensor:
    """torch.linalg.norm: a vector norm over an int `dim`, a matrix norm over two; with no `dim`, `ord` None is the
    2-norm of all elements, and another `ord` needs a 1-d (vector norm) or 2-d (matrix norm) input."""
    x = _cast(A, dtype)
    if dim is not None:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        if len(dims) == 2:
            return x.matrix_norm("fro" if ord is None else ord, dims, keepdim)
        if len(dims) != 1:
            raise ArgumentError(f"linalg.norm: dim must be an int or 2 ints, got {dim!r}")
        return x.vector_norm(2 if ord is None else ord, dims, keepdim)
    if ord is None:
        return x.vector_norm(2, None, keepdim)
    if x.ndim == 2:
        return x.matrix_norm(ord, (-2, -1), keepdim)
    if x.ndim == 1:
        return x.vector_norm(ord, None, keepdim)
    raise ArgumentError(f"linalg.norm: an ord without dim needs a 1-d or 2-d input, got {x.ndim} dims")


def det(A: Tensor) -> Tensor:
    """torch.linalg.det."""
    return A.det()


def slogdet(A: Tensor) -> SlogDet:
    """torch.linalg.slogdet: (sign, logabsdet)."""
    return A.slogdet()


def solve(A: Tensor, B: Tensor, *, left: bool = True) -> Tensor:
    """torch.linalg.solve: X with A @ X = B (`left=False`: X @ A = B); raises for a singular A."""
    return A.solve(B, left=left)


def solve_ex(A: Tensor, B: Tensor, *, left: bool = True, check_errors: bool = False) -> SolveEx:
    """torch.linalg.solve_ex: (result, info) from an LU factorization, no read-back: info is LAPACK getrf's (0, or
    the 1-based index of U's first zero pivot), and a singular A's result is inf/NaN. `check_errors` raises as
    `solve`."""
    if check_errors:
        return SolveEx(A.solve(B, left=left), Tensor.zeros(A.shape[:-2], dtype=dtypes.int32, device=A.device))
    a = A if left else A.transpose(-1, -2)
    if not left and B.ndim < 2:
        raise ArgumentError(f"linalg.solve_ex: left=False needs a matrix B (..., k, n), got {B.shape}")
    b = B if left else B.transpose(-1, -2)
    vector = left and (b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1]))
    packed, pivots, info = a.lu_factor_ex()
    x = (b.unsqueeze(-1) if vector else b).lu_solve(packed, pivots)
    x = x.squeeze(-1) if vector else x
    return SolveEx(x if left else x.transpose(-1, -2), info)


def inv(A: Tensor) -> Tensor:
    """torch.linalg.inv; raises for a singular A."""
    return A.inverse()


def inv_ex(A: Tensor, *, check_errors: bool = False) -> InvEx:
    """torch.linalg.inv_ex: (inverse, info) as `solve_ex` with the identity, no read-back. `check_errors` raises as
    `inv`."""
    n = A.shape[-1]
    eye = Tensor.eye(n, dtype=A.dtype, device=A.device).expand(*A.shape[:-2], n, n)
    result = solve_ex(A, eye, check_errors=check_errors)
    return InvEx(result.result if not check_errors else A.inverse(), result.info)


def cholesky(A: Tensor, *, upper: bool = False) -> Tensor:
    """torch.linalg.cholesky."""
    return A.cholesky(upper=upper)


def cholesky_ex(A: Tensor, *, upper: bool = False, check_errors: bool = False) -> CholeskyEx:
    """torch.linalg.cholesky_ex: (L, info)."""
    return A.cholesky_ex(upper=upper, check_errors=check_errors)


def eigh(A: Tensor, UPLO: str = "L") -> Eigh:  # noqa: N803
    """torch.linalg.eigh: (eigenvalues ascending, eigenvectors as columns)."""
    return A.eigh(UPLO)


def eigvalsh(A: Tensor, UPLO: str = "L") -> Tensor:  # noqa: N803
    """torch.linalg.eigvalsh."""
    return A.eigvalsh(UPLO)


def svd(A: Tensor, full_matrices: bool = True) -> SVD:
    """torch.linalg.svd: (U, S, Vh)."""
    return A.svd(full_matrices=full_matrices)


def svdvals(A: Tensor) -> Tensor:
    """torch.linalg.svdvals: the singular values, descending."""
    return A.svd(full_matrices=False).S


def qr(A: Tensor, mode: str = "reduced") -> QR:
    """torch.linalg.qr: (Q, R)."""
    return A.qr(mode)


def lu(A: Tensor, *, pivot: bool = True) -> PLU:
    """torch.linalg.lu: (P, L, U)."""
    return A.lu(pivot=pivot)


def lu_factor(A: Tensor, *, pivot: bool = True) -> LUFactor:
    """torch.linalg.lu_factor: (LU, pivots)."""
    return A.lu_factor(pivot=pivot)


def lu_factor_ex(A: Tensor, *, pivot: bool = True, check_errors: bool = False) -> LUFactorEx:
    """torch.linalg.lu_factor_ex: (LU, pivots, info)."""
    return A.lu_factor_ex(pivot=pivot, check_errors=check_errors)


def lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True, adjoint: bool = False) -> Tensor:  # noqa: N803
    """torch.linalg.lu_solve: X with A @ X = B for A = P L U given by `lu_factor`'s (LU, pivots); only `left=True`,
    `adjoint=False` (NotImplementedError otherwise)."""
    if not left or adjoint:
        raise NotImplementedError("linalg.lu_solve: only left=True, adjoint=False (use linalg.solve on A's transpose)")
    return B.lu_solve(LU, pivots)


def solve_triangular(A: Tensor, B: Tensor, *, upper: bool, left: bool = True, unitriangular: bool = False) -> Tensor:
    """torch.linalg.solve_triangular."""
    return A.solve_triangular(B, upper=upper, left=left, unitriangular=unitriangular)


def pinv(A: Tensor, *, atol: float | None = None, rtol: float | None = None, hermitian: bool = False) -> Tensor:
    """torch.linalg.pinv with a relative cut `rtol` (an absolute `atol` is not supported: NotImplementedError)."""
    if atol is not None:
        raise NotImplementedError("linalg.pinv: atol= is not supported, give rtol= (relative to the largest value)")
    return A.pinv(rtol=rtol, hermitian=hermitian)


def lstsq(A: Tensor, B: Tensor, rcond: float | None = None, *, driver: str | None = None) -> LstsqResult:
    """torch.linalg.lstsq as the CPU's default driver, gelsy (another `driver` raises)."""
    if driver not in (None, "gelsy"):
        raise NotImplementedError(f"linalg.lstsq: only the gelsy driver (torch's CPU default), got {driver!r}")
    return A.lstsq(B, rcond)


def matrix_exp(A: Tensor) -> Tensor:
    """torch.linalg.matrix_exp."""
    return A.matrix_exp()


def matrix_power(A: Tensor, n: int) -> Tensor:
    """torch.linalg.matrix_power."""
    return A.matrix_power(n)


def matrix_rank(A: Tensor, *, atol: float | None = None, rtol: float | None = None, hermitian: bool = False) -> Tensor:
    """torch.linalg.matrix_rank."""
    return A.matrix_rank(atol=atol, rtol=rtol, hermitian=hermitian)


def cond(A: Tensor, p: float | str | None = None) -> Tensor:
    """torch.linalg.cond."""
    return A.cond(p)


def multi_dot(tensors: Sequence[Tensor]) -> Tensor:
    """torch.linalg.multi_dot: the product in the cheapest order."""
    return Tensor.multi_dot(tensors)


def matmul(A: Tensor, B: Tensor) -> Tensor:
    """torch.linalg.matmul (torch.matmul)."""
    return A.matmul(B)


def vecdot(x: Tensor, y: Tensor, *, dim: int = -1) -> Tensor:
    """torch.linalg.vecdot: sum(x * y) over `dim`."""
    return x.vecdot(y, dim=dim)


def cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:  # noqa: A002
    """torch.linalg.cross: on the last axis by default (Tensor.cross's, as torch.cross's, is the first of size 3)."""
    return input.cross(other, dim=dim)


def diagonal(A: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """torch.linalg.diagonal: of the last two axes by default (Tensor.diagonal's are the first two)."""
    return A.diagonal(offset=offset, dim1=dim1, dim2=dim2)


def vander(x: Tensor, *, N: int | None = None) -> Tensor:  # noqa: N803
    """torch.linalg.vander: increasing powers x^0 ... x^(N-1)."""
    return x.vander(N)
