"""uopkit.nn: layers as plain classes holding Tensors (tinygrad style); `get_parameters` finds them.

The layers live in modules by concern, all re-exported here: tinygrad's set and torch's basic layers (nn/modules.py),
pooling and padding (nn/pooling.py), activations (nn/activations.py), other torch layers and losses (nn/layers.py),
recurrent layers, attention and transformers (nn/sequence.py).

>>> from uopkit import Tensor
>>> from uopkit.nn import Linear
>>> Linear(3, 2)(Tensor.ones(4, 3)).shape
(4, 2)
"""

from uopkit.nn import activations, layers, modules, pooling, sequence
from uopkit.nn.activations import *  # noqa: F403
from uopkit.nn.layers import *  # noqa: F403
from uopkit.nn.modules import *  # noqa: F403
from uopkit.nn.pooling import *  # noqa: F403
from uopkit.nn.sequence import *  # noqa: F403

__all__ = [*modules.__all__, *pooling.__all__, *activations.__all__, *layers.__all__, *sequence.__all__]
