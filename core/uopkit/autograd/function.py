"""torch.autograd.function's names (`from uopkit.autograd.function import Function, once_differentiable`), as torch
programs import them: uopkit.tensor.autograd's `Function`, `FunctionCtx` and `once_differentiable`."""

from uopkit.tensor.autograd import Function, FunctionCtx, once_differentiable

__all__ = ["Function", "FunctionCtx", "once_differentiable"]
