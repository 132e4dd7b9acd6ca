"""torch.nn.utils.parametrizations.orthogonal: a matrix (or a batch of them) kept orthogonal, as a parametrization
(nn/utils/parametrize.py) with torch's maps, defaults, state and gradients (compared in tests/test_nn_utils.py)."""

from __future__ import annotations

import numpy as np

from uopkit.dtype import dtypes, finfo
from uopkit.nn.module import Module
from uopkit.nn.utils.parametrize import register_parametrization
from uopkit.tensor import Tensor, no_grad

_MAPS = ("matrix_exp", "cayley", "householder")


def _is_orthogonal(Q: Tensor) -> bool:
    # torch's check: Q^T Q is the identity to within 10 n eps
    n, k = Q.shape[-2], Q.shape[-1]
    eps = 10 * n * finfo(Q.dtype).eps
    return bool(((Q.mT @ Q) - Tensor.eye(k, dtype=Q.dtype, device=Q.device)).abs().max().item() <= eps)


def _make_orthogonal(A: Tensor) -> Tensor:
    # the Q of A's QR factorization whose R has a positive diagonal (torch's geqrf, householder_product, sgn)
    Q, R = A.qr()
    return Q * R.diagonal(dim1=-2, dim2=-1).sign().unsqueeze(-2)


def _householder_product(A: Tensor, tau: Tensor) -> Tensor:
    # torch.linalg.householder_product of a tall A (uopkit.linalg's, which checks its arguments, sits above nn): the
    # reflectors H_i = I - tau_i v_i v_i^T applied right to left to the identity's first columns
    m, n = A.shape[-2:]
    rows = Tensor.arange(m, device=A.device).unsqueeze(-1)
    q = Tensor.eye(m, n, dtype=A.dtype, device=A.device).expand(*A.shape[:-2], m, n)
    for i in reversed(range(tau.shape[-1])):
        v = (rows > i).where(A[..., :, i : i + 1], (rows == i).cast(A.dtype))
        q = q - tau[..., i : i + 1].unsqueeze(-1) * v * (v.mT @ q)
    return q


def _geqrf(Q: Tensor) -> tuple[np.ndarray, np.ndarray]:
    # LAPACK's geqrf of each matrix (the reflectors below the diagonal, R on and above it, and tau), on the host
    host = Q.detach().numpy().astype(np.float64)
    flat = host.reshape(-1, *host.shape[-2:])
    out, taus = np.empty_like(flat), np.empty((flat.shape[0], min(flat.shape[-2:])))
    for i, m in enumerate(flat):
        h, tau = np.linalg.qr(m, mode="raw")
        out[i], taus[i] = h.T, tau
    return out.reshape(host.shape), taus.reshape(*host.shape[:-2], -1)


class _Orthogonal(Module):
    """torch's orthogonal parametrization. forward(X) for a tall X (n >= k; a wide one is transposed first): with
    "matrix_exp"/"cayley", the first k columns of exp(A) or (I - A/2)^-1 (I + A/2) for the skew-symmetric A made of
    X's lower triangle; with "householder", the product of the reflectors below X's diagonal, each column signed by
    that diagonal. With `use_trivialization`, the result is multiplied by the buffer `base` (set by right_inverse)."""

    def __init__(self, weight: Tensor, orthogonal_map: str, *, use_trivialization: bool = True) -> None:
        super().__init__()
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        self.use_trivialization = use_trivialization
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X: Tensor) -> Tensor:
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X, n, k = X.mT, k, n
        if self.orthogonal_map in ("matrix_exp", "cayley"):
            X = X.tril()
            if n != k:
                # (the square matrix the tall one is the first columns of)
                X = X.cat(Tensor.zeros(*X.shape[:-1], n - k, dtype=X.dtype, device=X.device), dim=-1)
            A = X - X.mT
            if self.orthogonal_map == "matrix_exp":
                Q = A.matrix_exp()
            else:
                eye = Tensor.eye(n, dtype=A.dtype, device=A.device)
                Q = (eye - 0.5 * A).solve(eye + 0.5 * A)
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(-1)
            tau = 2.0 / (1.0 + (A * A).sum(axis=-2))
            Q = _householder_product(A, tau)
            # (the diagonal of X is 1s and -1s; cast to int, it takes no gradient and isn't updated, as torch's)
            Q = Q * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        if self.use_trivialization:
            Q = self.base @ Q
        return Q.mT if transposed else Q

    def right_inverse(self, Q: Tensor) -> Tensor:
        if Q.shape != self.shape:
            raise ValueError(
                f"orthogonal: expected a matrix or batch of matrices of shape {self.shape}, got a tensor of shape "
                f"{Q.shape}"
            )
        with no_grad():
            Q_init = Q
            n, k = Q.shape[-2], Q.shape[-1]
            transpose = n < k
            if transpose:
                Q, n, k = Q.mT, k, n
            if not self.use_trivialization:
                if self.orthogonal_map != "householder":
                    raise NotImplementedError(
                        "orthogonal: it is not possible to assign to the matrix exponential or the Cayley "
                        "parametrizations when use_trivialization=False"
                    )
                # the reflectors of Q's QR factorization, the diagonal its R's signs (torch's geqrf, where a tau of
                # exactly 0, a reflection LAPACK skipped, flips the sign)
                A, tau = _geqrf(Q)
                diag = np.sign(np.diagonal(A, axis1=-2, axis2=-1)) * np.where(tau == 0.0, -1.0, 1.0)
                idx = np.arange(k)
                A[..., idx, idx] = diag
                out = Tensor(A, device=Q.device).cast(Q.dtype)
                return out.mT.contiguous() if transpose else out
            if n == k:
                Q = Q.clone() if _is_orthogonal(Q) else _make_orthogonal(Q)
            else:
                # completed into an n x n orthogonal matrix by random columns, as torch's
                N = Tensor.randn(*Q.shape[:-2], n, n - k, dtype=Q.dtype, device=Q.device)
                Q = _make_orthogonal(Q.cat(N, dim=-1))
            self.base = Q.contiguous().realize()
            # -Id: the diagonal the householder map reads its signs from (householder(zeros) is eye(n, k))
            neg_id = Tensor.eye(*Q_init.shape[-2:], dtype=Q_init.dtype, device=Q_init.device) * -1.0
            return neg_id.expand(Q_init.shape).contiguous()


def orthogonal(
    module: Module, name: str = "weight", orthogonal_map: str | None = None, *, use_trivialization: bool = True
) -> Module:
    """Keep `module.<name>` (a matrix or a batch of them, at least 2-D) orthogonal, as
    torch.nn.utils.parametrizations.orthogonal: the parametrization `parametrizations.<name>` maps its original
    through `orthogonal_map` ("matrix_exp" for a square matrix and "householder" otherwise by default, or "cayley"),
    and with `use_trivialization` (torch's default) keeps the orthogonal matrix the weight started from in the buffer
    `parametrizations.<name>.0.base`, the original starting at -Id. A tall or wide weight is completed by random
    columns from the global stream (torch: its own), so only the base's first columns are torch's. Returns the
    module.

    >>> from uopkit.nn import Linear
    >>> layer = orthogonal(Linear(3, 3))
    >>> w = layer.weight; bool(((w @ w.T) - Tensor.eye(3)).abs().max().item() < 1e-5)
    True
    """
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"orthogonal: module {type(module).__name__} has no parameter or buffer with name {name!r}")
    if weight.ndim < 2:
        raise ValueError(
            f"orthogonal: expected a matrix or batch of matrices, got a tensor of {weight.ndim} dimensions"
        )
    if not dtypes.is_float(weight.dtype):
        raise TypeError(f"orthogonal: the weight must be a float tensor, got {weight.dtype}")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    if orthogonal_map not in _MAPS:
        raise ValueError(
            f'orthogonal_map has to be one of "matrix_exp", "cayley", "householder". Got: {orthogonal_map}'
        )
    orth = _Orthogonal(weight, orthogonal_map, use_trivialization=use_trivialization)
    register_parametrization(module, name, orth, unsafe=True)
    return module
