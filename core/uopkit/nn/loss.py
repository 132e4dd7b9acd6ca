"""torch.nn.modules.loss by its name, `uopkit.nn.modules.loss`: every loss layer, and the bases `_Loss` (a
`reduction`) and `_WeightedLoss` (a `weight` buffer too) that custom losses subclass as they do torch's.

>>> from uopkit import Tensor
>>> from uopkit.nn.modules.loss import _WeightedLoss
>>> class Weighted(_WeightedLoss):
...     def forward(self, input, target):
...         return ((input - target).square() * self.weight).sum()
>>> Weighted(weight=Tensor([1.0, 2.0]))(Tensor([1.0, 1.0]), Tensor([0.0, 0.0])).item()
3.0
"""

from uopkit.nn.layers import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
    _Loss,
    _WeightedLoss,
)
from uopkit.nn.losses import *  # noqa: F403
from uopkit.nn.losses import __all__ as _losses

__all__ = [
    "_Loss",
    "_WeightedLoss",
    "L1Loss",
    "MSELoss",
    "SmoothL1Loss",
    "HuberLoss",
    "BCELoss",
    "BCEWithLogitsLoss",
    "CrossEntropyLoss",
    "NLLLoss",
    "KLDivLoss",
    *_losses,
]
