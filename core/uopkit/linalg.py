"""torch.linalg's functions by torch.linalg's names (`uopkit.linalg.det(a)` for `torch.linalg.det(a)`): thin
functions over the Tensor methods of tensor/factorize.py and tensor/matrix.py, with torch.linalg's argument order and
defaults where a method's differ (`cross` on the last axis, `diagonal` of the last two, `norm` choosing a vector or a
matrix norm from `dim`); `householder_product`, `tensorinv` and `tensorsolve` are compositions of those methods, and
`ldl_factor`/`ldl_solve` LAPACK's sytrf/sytrs (tensor/ldl.py). `eig` and `eigvals` of a general real matrix are
LAPACK's geev on the host (complex results, `ComplexTensor`s; no gradient). A singular or not positive-definite
input raises `LinAlgError` (torch.linalg.LinAlgError).

>>> from uopkit import Tensor, linalg
>>> linalg.det(Tensor([[2.0, 1.0], [1.0, 3.0]])).item()
5.0
>>> linalg.cross(Tensor([[1.0, 0.0, 0.0]] * 3), Tensor([[0.0, 1.0, 0.0]] * 3))[0].tolist()
[0.0, 0.0, 1.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from uopkit.dtype import DType, UnsupportedDTypeError, dtypes
from uopkit.helpers import prod
from uopkit.tensor import Tensor
from uopkit.tensor import ldl as _ldl
from uopkit.tensor.complex_tensor import ComplexTensor, from_complex_numpy
from uopkit.tensor.factorize import (
    PLU,
    QR,
    SVD,
    CholeskyEx,
    Eigh,
    LUFactor,
    LUFactorEx,
    SlogDet,
    householder_product_of,
)
from uopkit.tensor.matrix import LstsqResult, linalg_vander
from uopkit.tensor.support import ArgumentError, LinAlgError, ShapeError

__all__ = [
    "LinAlgError",
    "cholesky",
    "cholesky_ex",
    "cond",
    "cross",
    "det",
    "diagonal",
    "eig",
    "eigh",
    "eigvals",
    "eigvalsh",
    "inv",
    "householder_product",
    "inv_ex",
    "ldl_factor",
    "ldl_factor_ex",
    "ldl_solve",
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
    "tensorinv",
    "tensorsolve",
    "vander",
    "vecdot",
    "vector_norm",
]


class SolveEx(NamedTuple):
    """torch.linalg.solve_ex's (result, info)."""

    result: Tensor
    info: Tensor


class LDLFactor(NamedTuple):
    """torch.linalg.ldl_factor's (LD, pivots)."""

    LD: Tensor
    pivots: Tensor


class LDLFactorEx(NamedTuple):
    """torch.linalg.ldl_factor_ex's (LD, pivots, info)."""

    LD: Tensor
    pivots: Tensor
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


def pinv(
    A: Tensor,
    rcond: float | Tensor | None = None,
    hermitian: bool = False,
    *,
    atol: float | Tensor | None = None,
    rtol: float | Tensor | None = None,
) -> Tensor:
    """torch.linalg.pinv: singular values at or below max(atol, rtol * the largest) count as zero. `rcond` is torch's
    older form, positional as `pinv(A, 1e-4)` or by name: a relative cut alone (rtol=rcond, atol=0)."""
    if rcond is not None:
        if atol is not None or rtol is not None:
            raise TypeError("linalg.pinv: give either rcond (the older form) or atol/rtol, not both")
        return A.pinv(rtol=rcond, hermitian=hermitian, atol=0.0)
    return A.pinv(rtol=rtol, hermitian=hermitian, atol=atol)


def lstsq(A: Tensor, B: Tensor, rcond: float | None = None, *, driver: str | None = None) -> LstsqResult:
    """torch.linalg.lstsq with the CPU's drivers: "gelsy" (the default), "gelsd", "gelss" (from an SVD) and "gels"
    (from a QR, for A of full rank); see Tensor.lstsq for what each fills."""
    return A.lstsq(B, rcond, driver=driver)


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
    """torch.linalg.vander: increasing powers x^0 ... x^(N-1) of the last axis (Tensor.vander is torch.vander's,
    decreasing by default and of a 1-D tensor only)."""
    return linalg_vander(x, N)


class Eig(NamedTuple):
    """linalg.eig's result: complex `eigenvalues` and `eigenvectors` (columns)."""

    eigenvalues: ComplexTensor
    eigenvectors: ComplexTensor


def _general_eig(A: Tensor, op: str, vectors: bool) -> tuple[np.ndarray, np.ndarray | None]:
    # LAPACK's geev through numpy on the host: float32 in complex64 out, float64 in complex128 out (ints as float32)
    if isinstance(A, ComplexTensor):
        raise UnsupportedDTypeError(f"linalg.{op}: a complex matrix is not supported (a real one is)")
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ShapeError(f"linalg.{op}: expects a square matrix (or a batch of them), got shape {A.shape}")
    if A.requires_grad:
        raise NotImplementedError(
            f"linalg.{op}: no gradient here for the eigendecomposition of a general matrix; call it on A.detach(), "
            "or use linalg.eigh for a symmetric matrix (which has one)"
        )
    a = A.numpy() if A.dtype in (dtypes.float32, dtypes.float64) else A.numpy().astype(np.float32)
    cdt = np.complex128 if a.dtype == np.float64 else np.complex64
    if not np.isfinite(a).all():
        raise LinAlgError(f"linalg.{op}: the matrix has infinite or NaN elements")
    if vectors:
        w, v = np.linalg.eig(a)
        return np.asarray(w, cdt), np.ascontiguousarray(v, cdt)
    return np.asarray(np.linalg.eigvals(a), cdt), None


def eig(A: Tensor) -> Eig:
    """torch.linalg.eig of a real square matrix (or a batch): its eigenvalues and eigenvectors (unit-norm columns),
    complex tensors (complex64 for float32, complex128 for float64), from LAPACK's geev on the host, in its order and
    with its phases, as torch's CPU result. No gradient: an A that requires one raises NotImplementedError.

    >>> w, v = eig(Tensor([[0.0, -1.0], [1.0, 0.0]]))
    >>> sorted(w.tolist(), key=lambda c: c.imag)
    [-1j, 1j]
    """
    w, v = _general_eig(A, "eig", True)
    assert v is not None
    return Eig(from_complex_numpy(w, A.device), from_complex_numpy(v, A.device))


def eigvals(A: Tensor) -> ComplexTensor:
    """torch.linalg.eigvals: the eigenvalues of a real square matrix (or a batch), complex, as `eig`'s.

    >>> sorted(eigvals(Tensor([[2.0, 0.0], [0.0, 3.0]])).tolist(), key=lambda c: c.real)
    [(2+0j), (3+0j)]
    """
    return from_complex_numpy(_general_eig(A, "eigvals", False)[0], A.device)


def householder_product(A: Tensor, tau: Tensor) -> Tensor:
    """torch.linalg.householder_product: the first n columns of H_1 H_2 ... H_k for A (..., m, n), m >= n, and tau
    (..., k), k <= n, where H_i = I - tau_i v_i v_i^T and v_i is column i of A below the diagonal, with a 1 on it
    (geqrf's packing: Q from `qr`'s reflections). Differentiable in A and tau.

    >>> householder_product(Tensor([[1.0], [0.0]]), Tensor([2.0])).tolist()
    [[-1.0], [0.0]]
    """
    return householder_product_of(A, tau, "linalg.householder_product")


def tensorinv(A: Tensor, ind: int = 2) -> Tensor:
    """torch.linalg.tensorinv: the inverse of A as the matrix (prod(A.shape[:ind]), prod(A.shape[ind:])), shaped
    A.shape[ind:] + A.shape[:ind]; raises LinAlgError for a singular one.

    >>> tensorinv(Tensor.eye(4).reshape(4, 2, 2), ind=1).shape
    (2, 2, 4)
    """
    if isinstance(ind, bool) or not isinstance(ind, int) or not 0 < ind <= A.ndim:
        raise ArgumentError(f"linalg.tensorinv: ind must be an int in 1 .. {A.ndim} (A's dims), got {ind!r}")
    rows, cols = prod(A.shape[:ind]), prod(A.shape[ind:])
    if rows != cols:
        raise ShapeError(
            f"linalg.tensorinv: A {A.shape} must be square as the matrix of its first {ind} dims by the rest, got "
            f"{rows} x {cols}"
        )
    return A.reshape(rows, cols).inverse().reshape(A.shape[ind:] + A.shape[:ind])


def tensorsolve(A: Tensor, B: Tensor, dims: Sequence[int] | None = None) -> Tensor:
    """torch.linalg.tensorsolve: X with tensordot(A, X, X.ndim) = B, X shaped A.shape[B.ndim:] (after moving A's
    `dims` to the end); A as a matrix (prod(B.shape), prod(X.shape)) must be square. Raises LinAlgError for a
    singular one.

    >>> tensorsolve(Tensor.eye(6).reshape(2, 3, 6), Tensor.ones(2, 3)).tolist()
    [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    """
    if dims is not None:
        axes = [d % A.ndim if -A.ndim <= d < A.ndim else None for d in dims]
        if None in axes or len(set(axes)) != len(axes):
            raise ArgumentError(f"linalg.tensorsolve: dims must be distinct axes of A ({A.ndim} dims), got {dims}")
        A = A.permute(*[a for a in range(A.ndim) if a not in axes], *axes)
    shape = A.shape[B.ndim :]
    rows, cols = prod(A.shape[: B.ndim]), prod(shape)
    if B.ndim > A.ndim or rows != cols or B.numel() != rows:
        raise ShapeError(
            f"linalg.tensorsolve: A {A.shape} must be B's shape {B.shape} followed by the solution's, with as many "
            f"elements in each (a square matrix), got {rows} x {cols} for B's {B.numel()} elements"
        )
    return A.reshape(rows, cols).solve(B.reshape(rows)).reshape(shape)


def ldl_factor_ex(A: Tensor, *, hermitian: bool = False, check_errors: bool = False) -> LDLFactorEx:
    """torch.linalg.ldl_factor_ex: (LD, pivots, info) of the lower triangles of symmetric A (..., n, n), as LAPACK's
    sytrf (Bunch-Kaufman pivoting; `hermitian` is the same for real matrices). info > 0 is the 1-based index of D's
    first exact zero (the factors are complete, D singular); `check_errors` raises LinAlgError then. Computed on the
    host; there is no gradient, as torch's.

    >>> ldl_factor_ex(Tensor([[4.0, 2.0], [2.0, 5.0]])).LD.tolist()
    [[4.0, 0.0], [0.5, 4.0]]
    """
    ld, pivots, info = _ldl.ldl_factor(A, "linalg.ldl_factor_ex")
    if check_errors:
        _refuse_singular_d(info, "linalg.ldl_factor_ex")
    return LDLFactorEx(ld, pivots, info)


def ldl_factor(A: Tensor, *, hermitian: bool = False) -> LDLFactor:
    """torch.linalg.ldl_factor: (LD, pivots) as `ldl_factor_ex`; raises LinAlgError where D is singular."""
    ld, pivots, info = _ldl.ldl_factor(A, "linalg.ldl_factor")
    _refuse_singular_d(info, "linalg.ldl_factor")
    return LDLFactor(ld, pivots)


def _refuse_singular_d(info: Tensor, op: str) -> None:
    bad = info.numpy().reshape(-1)
    if (bad > 0).any():
        raise LinAlgError(
            f"{op}: D is singular (its diagonal element {int(bad[bad > 0][0])} is exactly zero); the factors are in "
            "ldl_factor_ex's LD, with info"
        )


def ldl_solve(LD: Tensor, pivots: Tensor, B: Tensor, *, hermitian: bool = False) -> Tensor:  # noqa: N803
    """torch.linalg.ldl_solve: X with A X = B for A factored by `ldl_factor` (LD, pivots); B (..., n, k), batch axes
    broadcast. Computed on the host, no gradient, as torch's.

    >>> LD, pivots = ldl_factor(Tensor([[4.0, 2.0], [2.0, 5.0]]))
    >>> ldl_solve(LD, pivots, Tensor([[6.0], [7.0]])).tolist()
    [[1.0], [1.0]]
    """
    return _ldl.ldl_solve(LD, pivots, B, "linalg.ldl_solve")
