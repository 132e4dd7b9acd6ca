"""uopkit.nn.utils: torch.nn.utils' training helpers: gradient clipping and parameter vectors (nn/utils/clip_grad.py),
variable-length sequences as `uopkit.nn.utils.rnn` (nn/utils/rnn.py), parametrizations as
`uopkit.nn.utils.parametrize` and `uopkit.nn.utils.parametrizations` (weight_norm, spectral_norm), pruning as
`uopkit.nn.utils.prune` (nn/utils/prune.py), the older
`weight_norm` / `remove_weight_norm` (nn/utils/weight_norm.py) and `spectral_norm` / `remove_spectral_norm`
(nn/utils/spectral_norm.py), `uopkit.nn.utils.stateless.functional_call` (torch's older name of
`uopkit.func.functional_call`), BatchNorm folded into the layer before it (`fuse_conv_bn_eval` and the others of
nn/utils/fusion.py) and `skip_init` (nn/utils/init.py).

>>> from uopkit import Tensor
>>> from uopkit.nn.utils import parameters_to_vector
>>> parameters_to_vector([Tensor([[1.0, 2.0]]), Tensor([3.0])]).tolist()
[1.0, 2.0, 3.0]
"""

from uopkit.nn.utils import clip_grad, fusion, parametrizations, parametrize, prune, rnn, stateless
from uopkit.nn.utils.clip_grad import *  # noqa: F403
from uopkit.nn.utils.fusion import *  # noqa: F403
from uopkit.nn.utils.init import skip_init
from uopkit.nn.utils.spectral_norm import remove_spectral_norm, spectral_norm
from uopkit.nn.utils.weight_norm import remove_weight_norm, weight_norm

__all__ = [
    *clip_grad.__all__,
    *fusion.__all__,
    "skip_init",
    "rnn",
    "parametrize",
    "parametrizations",
    "prune",
    "stateless",
    "weight_norm",
    "remove_weight_norm",
    "spectral_norm",
    "remove_spectral_norm",
]
