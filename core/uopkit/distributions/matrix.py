"""Distributions over matrices: LKJCholesky (Cholesky factors of correlation matrices, drawn by the onion method) and
Wishart (positive-definite matrices, drawn by the Bartlett decomposition).

LKJCholesky(n, eta): the correlation matrix C = L L^T has density proportional to det(C)^(eta - 1); over the strict
lower triangle of L that is proportional to prod_{i >= 2} L_ii^(n - i + 2 eta - 2) (rows counted from 1). The onion
method (Lewandowski, Kurowicka and Joe, 2009, section 3.2) builds L row by row: row i (from 0) puts sqrt(y) u below
the diagonal, u uniform on the unit sphere of R^i and y ~ Beta(i / 2, eta + (n - 2) / 2 - (i - 1) / 2), and
sqrt(1 - y) on it.

Wishart(df, Sigma): the sum of df outer products of N(0, Sigma) vectors, for real df > n - 1. Bartlett: with
Sigma = L L^T and A lower triangular, A_ii = sqrt(chi2(df - i)) (i from 0) and A_ij ~ N(0, 1) below the diagonal,
(L A)(L A)^T is a draw; its gradient flows to Sigma's factor and, through the chi2 draws' implicit gradient, to df.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

from uopkit.distributions import constraints
from uopkit.distributions.distribution import (
    Distribution,
    _broadcast_shape,
    as_tensor,
    broadcast_all,
    finfo_tiny_eps,
    standard_normal,
)
from uopkit.distributions.gamma import Beta, Chi2
from uopkit.tensor import Tensor, no_grad

__all__ = ["LKJCholesky", "Wishart"]

LOG_2 = math.log(2.0)


class LKJCholesky(Distribution):
    """The LKJ distribution over the lower Cholesky factors L of `dim` x `dim` correlation matrices, with
    `concentration` eta: L L^T has density proportional to det(L L^T)^(eta - 1) (eta = 1: uniform over correlation
    matrices). Draws by the onion method (see the module's docstring); no rsample.

    >>> from uopkit import Tensor
    >>> round(LKJCholesky(2, 1.0).log_prob(Tensor.eye(2)).item(), 4)
    -0.6931
    """

    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky
    _expanded = ("concentration",)

    def __init__(self, dim: int, concentration: Any = 1.0, validate_args: bool | None = None):
        if dim < 2:
            raise ValueError(f"LKJCholesky: dim must be an int >= 2, got {dim}")
        self.dim = dim
        (self.concentration,) = broadcast_all(concentration)
        super().__init__(self.concentration.shape, (dim, dim), validate_args)

    def _row_betas(self) -> Beta:
        # y of rows 1 .. n-1 (their last axis): Beta(i / 2, eta + (n - 2) / 2 - (i - 1) / 2)
        eta = self.concentration
        i = Tensor.arange(1, self.dim, device=eta.device).cast(eta.dtype)
        return Beta(0.5 * i, eta.unsqueeze(-1) + 0.5 * (self.dim - 2) - 0.5 * (i - 1), validate_args=False)

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        with no_grad():
            eta = self.concentration
            # row 0 is e_0: its y is 0 and its direction all zeros
            y = self._row_betas().sample(tuple(sample_shape)).pad((1, 0)).unsqueeze(-1)
            z = standard_normal(self._extended_shape(sample_shape), eta).tril(-1)
            norm = (z * z).sum(-1, keepdim=True).sqrt()
            w = y.sqrt() * (z / (norm > 0).where(norm, 1.0))
            diagonal = (1 - (w * w).sum(-1)).clamp(min=finfo_tiny_eps(w.dtype)[0]).sqrt()
            return (w + diagonal.diag_embed()).detach()

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        n, eta = self.dim, self.concentration
        diagonal = value.diagonal(dim1=-2, dim2=-1)[..., 1:]
        # the exponent of L_ii, rows counted from 1: n - i + 2 (eta - 1) for i = 2 .. n
        i = Tensor.arange(2, n + 1, device=eta.device).cast(eta.dtype)
        exponent = 2 * (eta - 1).unsqueeze(-1) + n - i
        unnormalized = (exponent * diagonal.log()).sum(-1)
        # the normalizer (LKJ 2009, with the Jacobian of C -> L folded in)
        alpha = eta + 0.5 * (n - 1)
        log_normalizer = 0.5 * (n - 1) * math.log(math.pi) + (alpha - 0.5).mvlgamma(n - 1) - (n - 1) * alpha.lgamma()
        return unnormalized - log_normalizer

    def __repr__(self) -> str:
        return f"LKJCholesky(dim: {self.dim}, concentration: {tuple(self.concentration.shape)})"


class _WishartArgumentError(ValueError, AssertionError):
    # torch raises AssertionError for a Wishart given none or several of its matrices (ValueError for the others):
    # either `except` catches this one
    pass


def _mvdigamma(x: Tensor, p: int) -> Tensor:
    # sum of digamma(x - j / 2) for j < p: the derivative of mvlgamma(x, p)
    offsets = Tensor.arange(p, device=x.device).cast(x.dtype) * 0.5
    return (x.unsqueeze(-1) - offsets).digamma().sum(-1)


class Wishart(Distribution):
    """Wishart(df, Sigma) over n x n positive-definite matrices, Sigma given as exactly one of `covariance_matrix`,
    `precision_matrix` or its Cholesky factor `scale_tril`, and real `df` > n - 1 (a number or a Tensor broadcast
    with the matrices' batch). rsample by the Bartlett decomposition (see the module's docstring).

    >>> from uopkit import Tensor
    >>> Wishart(3.0, covariance_matrix=Tensor.eye(2)).mean.tolist()
    [[3.0, 0.0], [0.0, 3.0]]
    """

    support = constraints.positive_definite
    has_rsample = True

    def __init__(
        self,
        df: Any,
        covariance_matrix: Tensor | None = None,
        precision_matrix: Tensor | None = None,
        scale_tril: Tensor | None = None,
        validate_args: bool | None = None,
    ):
        given = [(n, m) for n, m in (("covariance_matrix", covariance_matrix), ("precision_matrix", precision_matrix),
                                     ("scale_tril", scale_tril)) if m is not None]  # fmt: skip
        if len(given) != 1:
            raise _WishartArgumentError(
                f"Wishart: give exactly one of covariance_matrix, precision_matrix, scale_tril (got {len(given)})"
            )
        self._given_name, matrix = given[0]
        if not isinstance(matrix, Tensor):
            raise TypeError(f"Wishart: {self._given_name} must be a Tensor, got {type(matrix).__name__}")
        if matrix.ndim < 2:
            raise ValueError(
                f"Wishart: {self._given_name} must be a matrix or a batch of them (at least 2-D), got shape "
                f"{matrix.shape}"
            )
        if matrix.shape[-1] != matrix.shape[-2]:
            raise ValueError(f"Wishart: {self._given_name} must be square matrices, got shape {matrix.shape}")
        p = matrix.shape[-1]
        if isinstance(df, Tensor):
            batch_shape = _broadcast_shape(matrix.shape[:-2], df.shape)
            self.df = df.expand(batch_shape) if df.shape != batch_shape else df
        else:
            batch_shape = tuple(matrix.shape[:-2])
            self.df = as_tensor(float(df), matrix)
        # (read back: the df bound is checked whatever validate_args says, as torch's)
        if bool((self.df <= p - 1).any().item()):
            raise ValueError(f"Wishart: df must exceed {p - 1} (the matrix size minus 1), got df={df}")
        if bool((self.df < p).any().item()):
            warnings.warn(
                f"Wishart: df below {p} (the matrix size) makes singular samples likely",
                stacklevel=2,
            )
        setattr(self, self._given_name, matrix.expand((*batch_shape, p, p)))
        super().__init__(batch_shape, (p, p), validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = matrix
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = matrix.cholesky()
        else:
            self._unbroadcasted_scale_tril = matrix.inverse().cholesky()

    @property
    def arg_constraints(self) -> dict[str, constraints.Constraint]:  # type: ignore[override]
        return {
            "covariance_matrix": constraints.positive_definite,
            "precision_matrix": constraints.positive_definite,
            "scale_tril": constraints.lower_cholesky,
            "df": constraints.greater_than(self.event_shape[-1] - 1),
        }

    def _given(self) -> tuple[str, ...]:
        return ("df", self._given_name)

    def _like(self) -> Tensor | None:
        return self._unbroadcasted_scale_tril if "_unbroadcasted_scale_tril" in self.__dict__ else self.df

    def expand(self, batch_shape: Sequence[int], _instance: Distribution | None = None) -> Distribution:
        batch_shape = tuple(batch_shape)
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        p = self.event_shape[-1]
        new.df = self.df.expand(batch_shape)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril.expand((*batch_shape, p, p))
        for name in ("covariance_matrix", "precision_matrix", "scale_tril"):
            if name in self.__dict__:
                new.__dict__[name] = self.__dict__[name].expand((*batch_shape, p, p))
        new._batch_shape = batch_shape
        return new

    def _full(self, matrix: Tensor) -> Tensor:
        return matrix.expand((*self.batch_shape, *self.event_shape))

    @property
    def scale_tril(self) -> Tensor:
        if "scale_tril" in self.__dict__:
            return self.__dict__["scale_tril"]
        return self._full(self._unbroadcasted_scale_tril)

    @scale_tril.setter
    def scale_tril(self, value: Tensor) -> None:
        self.__dict__["scale_tril"] = value

    @property
    def covariance_matrix(self) -> Tensor:
        if "covariance_matrix" in self.__dict__:
            return self.__dict__["covariance_matrix"]
        low = self._unbroadcasted_scale_tril
        return self._full(low @ low.mT)

    @covariance_matrix.setter
    def covariance_matrix(self, value: Tensor) -> None:
        self.__dict__["covariance_matrix"] = value

    @property
    def precision_matrix(self) -> Tensor:
        if "precision_matrix" in self.__dict__:
            return self.__dict__["precision_matrix"]
        return self._full(self._unbroadcasted_scale_tril.cholesky_inverse())

    @precision_matrix.setter
    def precision_matrix(self, value: Tensor) -> None:
        self.__dict__["precision_matrix"] = value

    def _df_matrix(self) -> Tensor:
        return self.df.reshape(*self.batch_shape, 1, 1)

    @property
    def mean(self) -> Tensor:
        return self._df_matrix() * self.covariance_matrix

    @property
    def mode(self) -> Tensor:
        # (df - n - 1) Sigma, NaN where df <= n + 1 (no mode inside the cone), as torch
        factor = self._df_matrix() - self.event_shape[-1] - 1
        return (factor > 0).where(factor, float("nan")) * self.covariance_matrix

    @property
    def variance(self) -> Tensor:
        cov = self.covariance_matrix
        diagonal = cov.diagonal(dim1=-2, dim2=-1)
        return self._df_matrix() * (cov * cov + diagonal.unsqueeze(-1) * diagonal.unsqueeze(-2))

    def rsample(self, sample_shape: Sequence[int] = (), max_try_correction: int | None = None) -> Tensor:
        """Draws of shape sample_shape + batch_shape + (n, n) by the Bartlett decomposition. `max_try_correction` is
        accepted for torch's signature: nothing is redrawn (see docs/semantics.md)."""
        sample_shape = tuple(sample_shape)
        p = self.event_shape[-1]
        low = self._unbroadcasted_scale_tril
        chi2_df = self.df.unsqueeze(-1) - Tensor.arange(p, device=low.device).cast(low.dtype)
        eps = finfo_tiny_eps(low.dtype)[1]
        bartlett_diagonal = Chi2(chi2_df, validate_args=False).rsample(sample_shape).sqrt().clamp(min=eps)
        below = standard_normal(self._extended_shape(sample_shape), low).tril(-1)
        factor = low @ (below + bartlett_diagonal.diag_embed())
        return factor @ factor.mT

    def _half_log_det_scale(self) -> Tensor:
        # n log 2 / 2 + log det(L)
        p = self.event_shape[-1]
        return p * LOG_2 / 2 + self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    def log_prob(self, value: Any) -> Tensor:
        value = self._checked(value)
        nu, p = self.df, self.event_shape[-1]
        trace = value.cholesky_solve(self._unbroadcasted_scale_tril).diagonal(dim1=-2, dim2=-1).sum(-1)
        log_det_value = value.slogdet()[1]
        return -nu * self._half_log_det_scale() - (nu / 2).mvlgamma(p) + (nu - p - 1) / 2 * log_det_value - trace / 2

    def entropy(self) -> Tensor:
        nu, p = self.df, self.event_shape[-1]
        half_nu = nu / 2
        return (
            (p + 1) * self._half_log_det_scale()
            + half_nu.mvlgamma(p)
            - (nu - p - 1) / 2 * _mvdigamma(half_nu, p)
            + nu * p / 2
        )
