"""torch.nn.utils.parametrizations: `weight_norm`, as a parametrization (nn/utils/parametrize.py).

>>> from uopkit.nn import Linear
>>> layer = weight_norm(Linear(3, 4))
>>> [name for name, _ in layer.named_parameters()]
['bias', 'parametrizations.weight.original0', 'parametrizations.weight.original1']
>>> layer.parametrizations.weight.original0.shape
(4, 1)
"""

from __future__ import annotations

from uopkit.nn.module import Module
from uopkit.nn.utils.parametrize import register_parametrization
from uopkit.tensor import Tensor

__all__ = ["weight_norm"]


def _norm_except_dim(v: Tensor, dim: int) -> Tensor:
    """torch's norm_except_dim(v, 2, dim): the Euclidean norm over every dimension but `dim`, keeping them as 1s; dim -1
    is the whole tensor's norm (a 0-d tensor), as torch's (not the last dimension)."""
    if dim == -1:
        return v.norm()
    keep = dim % v.ndim
    return v.norm(dim=tuple(i for i in range(v.ndim) if i != keep), keepdim=True)


def _weight_norm(v: Tensor, g: Tensor, dim: int) -> Tensor:
    # torch's _weight_norm: v scaled so that its norm over every dimension but `dim` is g
    return v * (g / _norm_except_dim(v, dim))


class _WeightNorm(Module):
    """The weight-norm parametrization, as torch's: forward(g, v) = v * g / ||v|| (the norm over every dimension but
    `dim`), right_inverse(weight) = (||weight||, weight)."""

    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight: Tensor) -> tuple[Tensor, Tensor]:
        return _norm_except_dim(weight, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Weight normalization (Salimans & Kingma), torch.nn.utils.parametrizations.weight_norm: `module.<name>` becomes
    g * v / ||v||, computed at each access from the parameters `parametrizations.<name>.original0` (g, the magnitude:
    the norm over every dimension but `dim`, kept as size-1 dimensions) and `original1` (v, the direction), torch's
    names, so the state dicts load both ways. `dim=None` (or -1, as torch's) takes the norm of the whole tensor (g is
    0-d). Undo it with `parametrize.remove_parametrizations(module, name)`. Returns `module`.

    Departure: a state dict with the older `weight_norm`'s keys (`weight_g`, `weight_v`) isn't renamed on loading
    (torch's load hook does that); rename them to `parametrizations.weight.original0` / `original1` first.
    """
    return register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
