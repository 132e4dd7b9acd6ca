"""uopkit.nn: torch.nn's layers by torch's names, each an `nn.Module` holding its Tensors as attributes (so tinygrad's
`get_parameters`/`get_state_dict` find them, and torch's `parameters()`/`state_dict()` work too).

The layers live in modules by concern, all re-exported here: `Module`, `Parameter` and the containers (nn/module.py),
tinygrad's set and torch's basic layers (nn/modules.py), pooling and padding (nn/pooling.py; fractional max pooling
in nn/fractional_pool.py), activations (nn/activations.py), other torch layers and losses (nn/layers.py,
nn/losses.py, nn/spatial.py), the lazy layers (nn/lazy.py), recurrent layers, attention and transformers
(nn/sequence.py); torch.nn.functional's names are `uopkit.nn.functional`, torch.nn.init's `uopkit.nn.init`,
torch.nn.utils' (gradient clipping, rnn padding and packing, parametrizations, weight_norm, spectral_norm,
stateless.functional_call) `uopkit.nn.utils`; torch.nn.attention's (`sdpa_kernel`, the causal biases)
`uopkit.nn.attention`; tinygrad's `nn.datasets.mnist()` is `uopkit.nn.datasets`.

>>> from uopkit import Tensor
>>> from uopkit.nn import Linear
>>> Linear(3, 2)(Tensor.ones(4, 3)).shape
(4, 2)
"""

import sys

from uopkit.nn import (
    activations,
    fractional_pool,
    layers,
    lazy,
    loss,
    losses,
    module,
    modules,
    pooling,
    sequence,
    spatial,
    torch_submodules,
)

# torch's namespaces under their names: `import uopkit.nn.functional as F`, `nn.init.kaiming_uniform_`, `nn.utils`,
# `nn.optim.Adam`, `nn.lr_scheduler.StepLR`
from uopkit.nn import attention as attention
from uopkit.nn import datasets as datasets
from uopkit.nn import functional as functional
from uopkit.nn import init as init
from uopkit.nn import lr_scheduler as lr_scheduler
from uopkit.nn import optim as optim

# (each layer's settings as torch prints them, put into nn/reprs.py's table)
from uopkit.nn import torch_reprs as torch_reprs
from uopkit.nn import utils as utils
from uopkit.nn.activations import *  # noqa: F403
from uopkit.nn.fractional_pool import *  # noqa: F403
from uopkit.nn.layers import *  # noqa: F403
from uopkit.nn.lazy import *  # noqa: F403
from uopkit.nn.losses import *  # noqa: F403
from uopkit.nn.module import *  # noqa: F403
from uopkit.nn.modules import *  # noqa: F403
from uopkit.nn.parameter_containers import *  # noqa: F403
from uopkit.nn.pooling import *  # noqa: F403
from uopkit.nn.sequence import *  # noqa: F403
from uopkit.nn.spatial import *  # noqa: F403

# torch's `nn.modules.loss` (where custom losses find `_Loss` and `_WeightedLoss` to subclass)
modules.loss = loss  # type: ignore[attr-defined]
sys.modules[f"{modules.__name__}.loss"] = loss
# and its other submodules (`nn.modules.batchnorm._BatchNorm`, `nn.modules.conv._ConvNd`, `nn.modules.utils._pair`)
torch_submodules.install()

__all__ = [
    *module.__all__,
    *modules.__all__,
    *pooling.__all__,
    *fractional_pool.__all__,
    *activations.__all__,
    *layers.__all__,
    *lazy.__all__,
    *sequence.__all__,
    *losses.__all__,
    *spatial.__all__,
]
