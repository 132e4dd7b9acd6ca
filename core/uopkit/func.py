"""uopkit.func: torch.func's `functional_call` only (a module called with some of its parameters and buffers replaced
by given tensors, nn/utils/stateless.py). torch.func's transforms (`grad`, `vmap`, `jacrev`, `jvp`, ...) are not
here: `uopkit.autograd.grad` and `uopkit.autograd.functional` (jacobian, hessian, vjp, jvp, hvp) give the derivatives
they compute, without vectorizing over a batch.

>>> from uopkit import Tensor
>>> from uopkit.nn import Linear
>>> layer = Linear(2, 1, bias=False)
>>> functional_call(layer, ({"weight": Tensor([[1.0, 2.0]])},), (Tensor([[3.0, 4.0]]),)).tolist()
[[11.0]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from uopkit.nn.module import Module
from uopkit.nn.utils.stateless import _functional_call
from uopkit.tensor import Tensor

__all__ = ["functional_call"]


def functional_call(
    module: Module,
    parameter_and_buffer_dicts: dict[str, Tensor] | Sequence[dict[str, Tensor]],
    args: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
) -> Any:
    """`module(*args, **kwargs)` with the parameters and buffers named in `parameter_and_buffer_dicts` (a dict, or a
    list or tuple of dicts naming different tensors: `(params, buffers)`) replaced by the given tensors for this call,
    as torch.func.functional_call; gradients flow to the given tensors and the module's own are back afterwards. The
    rest (args, kwargs, tie_weights, strict, parametrized modules) is `uopkit.nn.utils.stateless.functional_call`'s.

    A MAML inner step (the meta-gradient reaches `params` through the fast weights):

    >>> from uopkit import Tensor, autograd
    >>> from uopkit.nn import Linear
    >>> net = Linear(3, 1)
    >>> params = dict(net.named_parameters())
    >>> x = Tensor.ones(4, 3)
    >>> loss = functional_call(net, params, x).square().mean()
    >>> grads = autograd.grad(loss, list(params.values()), create_graph=True)
    >>> fast = {name: p - 0.1 * g for (name, p), g in zip(params.items(), grads)}
    >>> functional_call(net, fast, x).shape
    (4, 1)
    """
    if isinstance(parameter_and_buffer_dicts, dict):
        tensors = parameter_and_buffer_dicts
    elif isinstance(parameter_and_buffer_dicts, Sequence) and not isinstance(parameter_and_buffer_dicts, str):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError("Expected all elements of parameter_and_buffer_dicts to be dictionaries")
        counts: dict[str, int] = {}
        for d in parameter_and_buffer_dicts:
            for k in d:
                counts[k] = counts.get(k, 0) + 1
        repeated = [k for k, n in counts.items() if n > 1]
        if repeated:
            raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of functional call is ambiguous")
        tensors = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError(
            "Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, but got "
            f"{type(parameter_and_buffer_dicts).__name__}"
        )
    return _functional_call(module, tensors, args, kwargs, tie_weights=tie_weights, strict=strict)
