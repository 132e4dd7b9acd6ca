"""uopkit.nn.utils: torch.nn.utils' training helpers: gradient clipping and parameter vectors (nn/utils/clip_grad.py),
variable-length sequences as `uopkit.nn.utils.rnn` (nn/utils/rnn.py), parametrizations as
`uopkit.nn.utils.parametrize` and `uopkit.nn.utils.parametrizations` (weight_norm, spectral_norm), the older
`weight_norm` / `remove_weight_norm` (nn/utils/weight_norm.py) and `spectral_norm` / `remove_spectral_norm`
(nn/utils/spectral_norm.py), and `uopkit.nn.utils.stateless.functional_call` (torch's older name of
`uopkit.func.functional_call`).

>>> from uopkit import Tensor
>>> from uopkit.nn.utils import parameters_to_vector
>>> parameters_to_vector([Tensor([[1.0, 2.0]]), Tensor([3.0])]).tolist()
[1.0, 2.0, 3.0]
"""

from uopkit.nn.utils import clip_grad, parametrizations, parametrize, rnn, stateless
from uopkit.nn.utils.clip_grad import *  # noqa: F403
from uopkit.nn.utils.spectral_norm import remove_spectral_norm, spectral_norm
from uopkit.nn.utils.weight_norm import remove_weight_norm, weight_norm

__all__ = [
    *clip_grad.__all__,
    "rnn",
    "parametrize",
    "parametrizations",
    "stateless",
    "weight_norm",
    "remove_weight_norm",
    "spectral_norm",
    "remove_spectral_norm",
]
