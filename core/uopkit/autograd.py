"""torch.autograd's names (`from uopkit.autograd import Function, grad`): uopkit.tensor.autograd's."""

from uopkit.tensor.autograd import *  # noqa: F403
from uopkit.tensor.autograd import __all__  # noqa: F401
