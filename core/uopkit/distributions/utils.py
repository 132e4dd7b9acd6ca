"""torch.distributions.utils' helpers, for programs (and custom distributions) that import them: broadcast_all,
logits_to_probs, probs_to_logits, clamp_probs, lazy_property, tril_matrix_to_vec and vec_to_tril_matrix.

>>> from uopkit import Tensor
>>> vec_to_tril_matrix(Tensor([1.0, 2.0, 3.0])).tolist()
[[1.0, 0.0], [2.0, 3.0]]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from uopkit.distributions.discrete import probs_to_logits
from uopkit.distributions.distribution import broadcast_all, clamp_probs, finfo_tiny_eps
from uopkit.tensor import Tensor, enable_grad

__all__ = [
    "broadcast_all",
    "logits_to_probs",
    "clamp_probs",
    "probs_to_logits",
    "lazy_property",
    "tril_matrix_to_vec",
    "vec_to_tril_matrix",
]

# the Euler-Mascheroni constant, as torch.distributions.utils.euler_constant
euler_constant = 0.57721566490153286060


def logits_to_probs(logits: Tensor, is_binary: bool = False) -> Tensor:
    """Probabilities from log-odds (is_binary: a sigmoid) or from log-probabilities along the last axis (a softmax)."""
    return logits.sigmoid() if is_binary else logits.softmax(-1)


class lazy_property:  # noqa: N801  (torch's name)
    """A property computed on first access (with gradients recorded) and then stored on the instance, as torch's:
    a distribution's `probs` from its `logits`, or the other way round."""

    def __init__(self, wrapped: Callable[[Any], Any]):
        self.wrapped = wrapped
        self.__doc__ = wrapped.__doc__
        self.__name__ = wrapped.__name__

    def __get__(self, instance: Any, obj_type: Any = None) -> Any:
        if instance is None:
            return self
        with enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


def _tril_mask(n: int, diag: int) -> np.ndarray:
    # True at (row, col) with col < row + diag + 1: the lower triangle, shifted by diag
    arange = np.arange(n)
    return arange[None, :] < arange[:, None] + (diag + 1)


def tril_matrix_to_vec(mat: Tensor, diag: int = 0) -> Tensor:
    """The lower-triangular elements of a (batch of) n x n matrix, row by row (diag shifts the triangle)."""
    n = mat.shape[-1]
    if diag < -n or diag >= n:
        raise ValueError(f"tril_matrix_to_vec: diag ({diag}) provided is outside [{-n}, {n - 1}].")
    rows, cols = np.nonzero(_tril_mask(n, diag))
    flat = mat.reshape(*mat.shape[:-2], mat.shape[-2] * n)
    return flat[..., Tensor((rows * n + cols).astype(np.int32), device=mat.device)]


def vec_to_tril_matrix(vec: Tensor, diag: int = 0) -> Tensor:
    """The (batch of) n x n lower-triangular matrix whose triangle (shifted by diag) is vec, row by row, zeros
    elsewhere; vec's length must be such a triangle's size."""
    m = vec.shape[-1]
    n = (-(1 + 2 * diag) + math.sqrt((1 + 2 * diag) ** 2 + 8 * m + 4 * abs(diag) * (diag + 1))) / 2
    if round(n) - n > finfo_tiny_eps(vec.dtype)[1]:
        raise ValueError(
            f"vec_to_tril_matrix: The size of last dimension is {m} which cannot be expressed as the lower "
            "triangular part of a square D x D matrix."
        )
    n = round(n)
    # each matrix element reads its place in vec, or the zero appended after vec's last element
    source = np.full((n, n), m, dtype=np.int32)
    source[_tril_mask(n, diag)] = np.arange(m, dtype=np.int32)
    padded = vec.pad((0, 1))
    out = padded[..., Tensor(source.reshape(-1), device=vec.device)]
    return out.reshape(*vec.shape[:-1], n, n)
