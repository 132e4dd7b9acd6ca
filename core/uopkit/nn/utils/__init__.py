"""uopkit.nn.utils: torch.nn.utils' training helpers: gradient clipping and parameter vectors (nn/utils/clip_grad.py),
and variable-length sequences as `uopkit.nn.utils.rnn` (nn/utils/rnn.py).

>>> from uopkit import Tensor
>>> from uopkit.nn.utils import parameters_to_vector
>>> parameters_to_vector([Tensor([[1.0, 2.0]]), Tensor([3.0])]).tolist()
[1.0, 2.0, 3.0]
"""

from uopkit.nn.utils import clip_grad, rnn
from uopkit.nn.utils.clip_grad import *  # noqa: F403

__all__ = [*clip_grad.__all__, "rnn"]
