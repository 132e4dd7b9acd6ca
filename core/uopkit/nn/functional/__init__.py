"""torch.nn.functional's names over Tensor methods: `import uopkit.nn.functional as F` then `F.relu(x)`,
`F.cross_entropy(logits, target)`, `F.conv2d(x, w, b, stride=2)`, with torch's argument names and defaults;
compared with torch in tests/test_nn_functional.py.

Each function forwards to the Tensor method of the same (or a tinygrad) name, adapting torch's argument order and
names; the few that no method offers (batch_norm, instance_norm, layer_norm, rms_norm, unfold, conv_tbc) are short
compositions of public methods. Where a result departs from torch's, the function's docstring says so. The functions
live by concern in layers.py (convolutions, pools, norms, linear maps, lookups, attention, distances, resampling),
activations.py (activations, softmaxes, dropouts) and losses.py (fractional max pooling, with its layers, in
uopkit/nn/fractional_pool.py); arguments.py holds the argument handling they share.

>>> import uopkit.nn.functional as F
>>> from uopkit import Tensor
>>> F.relu(Tensor([-1.0, 2.0])).tolist()
[0.0, 2.0]
"""

from __future__ import annotations

from uopkit.nn import fractional_pool
from uopkit.nn.fractional_pool import fractional_max_pool2d as fractional_max_pool2d
from uopkit.nn.fractional_pool import fractional_max_pool2d_with_indices as fractional_max_pool2d_with_indices
from uopkit.nn.fractional_pool import fractional_max_pool3d as fractional_max_pool3d
from uopkit.nn.fractional_pool import fractional_max_pool3d_with_indices as fractional_max_pool3d_with_indices
from uopkit.nn.functional import activations, layers, losses
from uopkit.nn.functional.activations import *  # noqa: F403
from uopkit.nn.functional.layers import *  # noqa: F403
from uopkit.nn.functional.losses import *  # noqa: F403

__all__ = [*layers.__all__, *activations.__all__, *losses.__all__, *fractional_pool.FUNCTIONS]
