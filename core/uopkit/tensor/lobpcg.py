"""torch.lobpcg: a few extreme eigenpairs of a large symmetric (generalized) eigenproblem A x = e B x by the locally
optimal block preconditioned conjugate gradient method (Knyazev). Each step does Rayleigh-Ritz over the span of the
current block X, its preconditioned residuals W and the previous search directions P.

It runs on the host in float64, one matrix of a batch at a time (the method reads its residual norms back every
iteration; its small projected problems are dense eigh calls). The eigenvalues carry a gradient to A (and B) through
their Rayleigh quotients at the converged eigenvectors; the eigenvectors come back as constants."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import dtypes
from uopkit.tensor.support import ArgumentError, DTypeError, ShapeError

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# Tensor is set by tensor.py once the class exists (this module is imported while it is built)

# default relative residual tolerance: the square root of the dtype's machine epsilon, as torch's
_EPS = {"float32": 1.2e-07, "float64": 2.23e-16}


def _b_orthonormal(s: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """An orthonormal (in the B inner product) basis of the columns of s, dropping directions that are (nearly)
    linearly dependent on the others. The columns are scaled to unit length first (the residuals shrink as the
    method converges), and the orthonormalization through the Gram matrix runs twice: one pass leaves errors of the
    Gram matrix's condition number times the rounding, which would stall the residuals far above it."""
    norms = np.linalg.norm(s, axis=0)
    s = s[:, norms > 0] / norms[norms > 0]
    for _ in range(2):
        gram = s.T @ (s if b is None else b @ s)
        vals, vecs = np.linalg.eigh((gram + gram.T) / 2)
        keep = vals > vals.max(initial=0.0) * 1e-12
        s = s @ (vecs[:, keep] / np.sqrt(vals[keep]))
    return s


def _ritz(a: np.ndarray, basis: np.ndarray, n: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    # the n extreme Ritz pairs of A over a B-orthonormal basis: (values, coefficients)
    small = basis.T @ a @ basis
    vals, vecs = np.linalg.eigh((small + small.T) / 2)
    order = np.argsort(-vals if largest else vals, kind="stable")[:n]
    return vals[order], vecs[:, order]


def _solve_one(
    a: np.ndarray,
    b: np.ndarray | None,
    x: np.ndarray,
    ik: np.ndarray | None,
    k: int,
    largest: bool,
    tol: float,
    niter: int,
) -> tuple[np.ndarray, np.ndarray]:
    # (the block holds n >= k vectors; the iteration ends once the k wanted pairs have converged, as torch's)
    n = x.shape[1]
    basis = _b_orthonormal(x, b)
    vals, coef = _ritz(a, basis, n, largest)
    x = basis @ coef
    p: np.ndarray | None = None
    a_norm = np.linalg.norm(a, 2)
    b_norm = 1.0 if b is None else np.linalg.norm(b, 2)
    for _ in range(niter):
        bx = x if b is None else b @ x
        r = a @ x - bx * vals
        # relative residual of each pair, as torch measures convergence
        rerr = np.linalg.norm(r, axis=0) / (np.linalg.norm(x, axis=0) * (a_norm + np.abs(vals) * b_norm))
        if (rerr[:k] < tol).all():
            break
        w = r if ik is None else ik @ r
        blocks = [x, w] if p is None else [x, w, p]
        basis = _b_orthonormal(np.concatenate(blocks, axis=1), b)
        vals, coef = _ritz(a, basis, n, largest)
        new_x = basis @ coef
        # the new search directions: the part of the step outside the current block
        bnx = new_x if b is None else b @ new_x
        p = new_x - x @ (x.T @ bnx)
        x = new_x
    return vals, x


def lobpcg(
    A: Tensor,  # noqa: N803
    k: int | None = None,
    B: Tensor | None = None,  # noqa: N803
    X: Tensor | None = None,  # noqa: N803
    n: int | None = None,
    iK: Tensor | None = None,  # noqa: N803
    niter: int | None = None,
    tol: float | None = None,
    largest: bool | None = None,
    method: str | None = None,
    tracker: Any = None,
    ortho_iparams: Any = None,
    ortho_fparams: Any = None,
    ortho_bparams: Any = None,
) -> tuple[Tensor, Tensor]:
    """torch.lobpcg's (E, X); see Tensor.lobpcg."""
    op = "lobpcg"
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ShapeError(f"{op}: A must be square matrices (..., m, m), got shape {A.shape}")
    if not dtypes.is_float(A.dtype) or A.dtype in dtypes.halves:
        raise DTypeError(f"{op}: A must be float32 or float64, got {A.dtype}")
    if method not in (None, "basic", "ortho"):
        raise ArgumentError(f"{op}: method must be 'basic' or 'ortho', got {method!r}")
    if tracker is not None:
        raise NotImplementedError(f"{op}: tracker isn't supported (uopkit's iteration runs on the host); pass None")
    m = A.shape[-1]
    if k is None:
        k = 1 if X is None else X.shape[-1]
    n = (k if n is None else n) if X is None else X.shape[-1]
    if k < 1 or n < k:
        raise ArgumentError(f"{op}: needs 1 <= k <= n (eigenpairs asked, block size), got k={k}, n={n}")
    if m < 3 * n:
        raise ValueError(
            f"{op}: A is {m} x {m}, too small for a block of {n} vectors (LOBPCG needs m >= 3 n; use linalg.eigh)"
        )
    for name, t in (("B", B), ("iK", iK)):
        if t is not None and t.shape[-2:] != (m, m):
            raise ShapeError(f"{op}: {name} must be {m} x {m} like A, got shape {t.shape}")
    if X is not None and X.shape[-2] != m:
        raise ShapeError(f"{op}: X must have {m} rows like A, got shape {X.shape}")
    largest = True if largest is None else largest
    niter = 1000 if niter is None else niter
    niter = 10**9 if niter < 0 else niter
    tol = _EPS.get(str(A.dtype).split(".")[-1], _EPS["float32"]) ** 0.5 if tol is None else tol
    batch = A.shape[:-2]
    count = int(np.prod(batch)) if batch else 1

    def host(t: Tensor | None) -> np.ndarray | None:
        if t is None:
            return None
        return np.broadcast_to(t.detach().numpy().astype(np.float64), batch + t.shape[-2:]).reshape(
            (count,) + t.shape[-2:]
        )

    ha, hb, hk = host(A), host(B), host(iK)
    if X is None:
        start = Tensor.randn(*(batch + (m, n)), dtype=dtypes.float64).numpy().reshape(count, m, n)
    else:
        start = host(X)
    assert ha is not None and start is not None
    vals = np.zeros((count, k))
    vecs = np.zeros((count, m, k))
    for i in range(count):
        e, x = _solve_one(
            ha[i],
            None if hb is None else hb[i],
            start[i],
            None if hk is None else hk[i],
            k,
            largest,
            float(tol),
            niter,
        )
        vals[i], vecs[i] = e[:k], x[:, :k]
    X_out = Tensor(vecs.reshape(batch + (m, k)), dtype=A.dtype, device=A.device)
    needs_grad = A.requires_grad or (B is not None and B.requires_grad)
    if not needs_grad:
        return Tensor(vals.reshape(batch + (k,)), dtype=A.dtype, device=A.device), X_out
    # eigenvalues as Rayleigh quotients at the (constant) eigenvectors: their gradient to A is x x^T (and to B,
    # -e x x^T), the first-order change of an eigenvalue
    num = (X_out * (A @ X_out)).sum(-2)
    den = (X_out * (B @ X_out)).sum(-2) if B is not None else 1.0
    return num / den, X_out
