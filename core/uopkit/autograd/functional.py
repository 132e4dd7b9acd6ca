"""torch.autograd.functional's names (`from uopkit.autograd.functional import jacobian`): see
uopkit.tensor.autograd_functional."""

from uopkit.tensor.autograd_functional import __all__, hessian, hvp, jacobian, jvp, vhp, vjp  # noqa: F401
