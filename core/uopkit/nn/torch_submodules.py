"""torch.nn.modules' submodules by their names, as submodules of `uopkit.nn.modules` (`uopkit.nn.modules.loss` is
nn/loss.py): `batchnorm`, `instancenorm`, `conv`, `linear`, `normalization`, `dropout`, `activation`, `pooling`,
`container`, `module` and `utils`, each holding the layers torch's holds, and the private bases torch code checks a
layer's kind with: `isinstance(m, nn.modules.batchnorm._BatchNorm)` to freeze the batch norms or keep them out of
weight decay, `_NormBase` for batch and instance norms both, `conv._ConvNd` (and `_ConvTransposeNd`) to find the
convolutions a pruning pass rebuilds, `instancenorm._InstanceNorm`, `dropout._DropoutNd`; `utils._pair` and its
siblings turn an int into a tuple, as custom layers call them.

`_NormBase`, `_BatchNorm` and `_InstanceNorm` answer `isinstance` for every layer of their kind and are bases to
subclass with torch's arguments (num_features, eps, momentum, affine, track_running_stats): a subclass's call checks
the input with its `_check_input_dim`, which it defines (as torch's subclasses do), then normalizes.

>>> import uopkit.nn as nn
>>> isinstance(nn.BatchNorm2d(3), nn.modules.batchnorm._BatchNorm), nn.modules.utils._pair(3)
(True, (3, 3))
"""

from __future__ import annotations

import collections.abc
import sys
import types
from typing import Any

from uopkit.nn import (
    activations,
    fractional_pool,
    layers,
    lazy,
    module,
    modules,
    parameter_containers,
    pooling,
    sequence,
    spatial,
)
from uopkit.nn.layers import BatchNorm1d
from uopkit.nn.modules import BatchNorm, InstanceNorm, InstanceNorm1d
from uopkit.tensor import Tensor

__all__: list[str] = []


class _Covers(type):
    """The metaclass of a base that also counts the layers of `covers` (declared on the base itself, not inherited by
    its subclasses) as its instances and subclasses: torch's private bases over uopkit's own class tree."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return cls.__subclasscheck__(type(obj))

    def __subclasscheck__(cls, sub: type) -> bool:
        return type.__subclasscheck__(cls, sub) or issubclass(sub, cls.__dict__.get("covers", ()))


def _check_then_normalize(self: Any, x: Tensor, norm: Any) -> Tensor:
    self._check_input_dim(x)
    return norm(self, x)


class _NormBase(BatchNorm1d, metaclass=_Covers):
    """torch.nn.modules.batchnorm._NormBase: every batch and instance norm is one (isinstance); a subclass takes torch's
    arguments and defines `_check_input_dim(x)`, which its call runs before it normalizes as a batch norm."""

    covers = (BatchNorm, InstanceNorm)

    def _check_input_dim(self, x: Tensor) -> None:
        raise NotImplementedError(
            f"{type(self).__name__}: a subclass of _NormBase/_BatchNorm defines _check_input_dim(input) (got an input "
            f"of shape {x.shape}), as torch's"
        )

    def __call__(self, x: Tensor) -> Tensor:
        return _check_then_normalize(self, x, BatchNorm.__call__)


class _BatchNorm(_NormBase):
    """torch.nn.modules.batchnorm._BatchNorm: every batch norm (BatchNorm1d/2d/3d, SyncBatchNorm, the lazy ones) is one;
    a base to subclass, as `_NormBase`."""

    covers = (BatchNorm,)


class _InstanceNorm(InstanceNorm1d, metaclass=_Covers):
    """torch.nn.modules.instancenorm._InstanceNorm: every instance norm is one; a subclass takes torch's arguments
    (affine=False by default) and its call runs its `_check_input_dim(x)`, then normalizes over the positions."""

    covers = (InstanceNorm,)
    spatial_dims = None

    def _check_input_dim(self, x: Tensor) -> None:
        raise NotImplementedError(
            f"{type(self).__name__}: a subclass of _InstanceNorm defines _check_input_dim(input) (got an input of "
            f"shape {x.shape}), as torch's"
        )

    def __call__(self, x: Tensor) -> Tensor:
        return _check_then_normalize(self, x, InstanceNorm.__call__)


class _DropoutNd(modules.Dropout, metaclass=_Covers):
    """torch.nn.modules.dropout._DropoutNd: every dropout layer (Dropout, Dropout1d/2d/3d, AlphaDropout,
    FeatureAlphaDropout) is one; a subclass takes (p, inplace) and drops elements as Dropout."""

    covers = (modules.Dropout, layers._ChannelDropout, layers.AlphaDropout, spatial.FeatureAlphaDropout)


def _ntuple(n: int, name: str = "parse") -> Any:
    """torch.nn.modules.utils._ntuple: a function that repeats a single value n times and passes an iterable on as a
    tuple."""

    def parse(x: Any) -> tuple:
        if isinstance(x, collections.abc.Iterable) and not isinstance(x, str):
            return tuple(x)
        return tuple([x] * n)

    parse.__name__ = name
    return parse


def _public(mod: types.ModuleType) -> dict[str, Any]:
    return {k: getattr(mod, k) for k in getattr(mod, "__all__", ())}


def _pick(*names: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in names:
        for mod in (modules, layers, lazy, spatial, sequence, pooling, activations, module, parameter_containers):
            if hasattr(mod, name):
                found[name] = getattr(mod, name)
                break
    return found


_TABLE: dict[str, dict[str, Any]] = {
    "batchnorm": {"_NormBase": _NormBase, "_BatchNorm": _BatchNorm}
    | _pick("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")
    | _pick("LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d"),
    "instancenorm": {"_InstanceNorm": _InstanceNorm, "_NormBase": _NormBase}
    | _pick("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d")
    | _pick("LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d"),
    "conv": {"_ConvNd": modules._ConvLayer, "_ConvTransposeNd": modules.ConvTranspose2d}
    | _pick("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")
    | _pick("LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d")
    | _pick("LazyConvTranspose3d"),
    "linear": _pick("Linear", "Identity", "Bilinear", "LazyLinear"),
    "normalization": _pick("LayerNorm", "GroupNorm", "RMSNorm", "LocalResponseNorm", "CrossMapLRN2d"),
    "dropout": {"_DropoutNd": _DropoutNd}
    | _pick("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"),
    "activation": _public(activations) | _pick("ReLU", "Sigmoid", "Tanh", "SiLU", "GELU", "MultiheadAttention"),
    "pooling": _public(pooling) | _public(fractional_pool) | _pick("LPPool1d", "LPPool2d", "LPPool3d"),
    "container": _pick("Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Container"),
    "module": _pick("Module"),
    "utils": {
        "_ntuple": _ntuple,
        "_single": _ntuple(1, "_single"),
        "_pair": _ntuple(2, "_pair"),
        "_triple": _ntuple(3, "_triple"),
        "_quadruple": _ntuple(4, "_quadruple"),
    },
}


def install() -> None:
    """Make each of the table's modules `uopkit.nn.modules.<name>` (an attribute, and importable by that name)."""
    for name, members in _TABLE.items():
        full = f"{modules.__name__}.{name}"
        mod = types.ModuleType(full, f"torch.nn.modules.{name}'s names (uopkit.nn.torch_submodules).")
        mod.__dict__.update(members)
        mod.__all__ = sorted(members)  # type: ignore[attr-defined]
        setattr(modules, name, mod)
        sys.modules[full] = mod
