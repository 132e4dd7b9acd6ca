"""uopkit.func: torch.func. `functional_call` (a module called with some of its parameters and buffers replaced by given
tensors, nn/utils/stateless.py), the derivative transforms `grad`, `grad_and_value`, `vjp`, `jvp`, `jacrev`, `jacfwd`
and `hessian` (func/transforms.py: reverse mode on uopkit.autograd, composable), `vmap` (func/vmapping.py: per slice,
not vectorized; the slices' lazy graphs realize together), `stack_module_state` for ensembles and
`replace_all_batch_norm_modules_` (batch norms that keep no running statistics, for vmapped ensembles and per-sample
gradients of models that have them). Per-sample gradients as torch's tutorial computes them:

>>> from uopkit import Tensor
>>> from uopkit.nn import Linear
>>> layer = Linear(2, 1, bias=False)
>>> functional_call(layer, ({"weight": Tensor([[1.0, 2.0]])},), (Tensor([[3.0, 4.0]]),)).tolist()
[[11.0]]
>>> params = {"weight": Tensor([[1.0, 2.0]])}
>>> def loss(p, x):
...     return functional_call(layer, p, (x,)).square().sum()
>>> vmap(grad(loss), in_dims=(None, 0))(params, Tensor([[1.0, 0.0], [0.0, 1.0]]))["weight"].tolist()
[[[2.0, 0.0]], [[0.0, 4.0]]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from uopkit.func.transforms import grad, grad_and_value, hessian, jacfwd, jacrev, jvp, linearize, vjp
from uopkit.func.vmapping import stack_module_state, vmap
from uopkit.nn.module import Module
from uopkit.nn.modules import BatchNorm
from uopkit.nn.utils.stateless import _functional_call
from uopkit.tensor import Tensor

__all__ = [
    "functional_call",
    "grad",
    "grad_and_value",
    "vjp",
    "jvp",
    "linearize",
    "jacrev",
    "jacfwd",
    "hessian",
    "vmap",
    "stack_module_state",
    "replace_all_batch_norm_modules_",
]


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
            raise ValueError(
                "functional_call: every entry of a list/tuple of tensor dicts must itself be a dict, got "
                f"{[type(d).__name__ for d in parameter_and_buffer_dicts]}"
            )
        counts: dict[str, int] = {}
        for d in parameter_and_buffer_dicts:
            for k in d:
                counts[k] = counts.get(k, 0) + 1
        repeated = [k for k, n in counts.items() if n > 1]
        if repeated:
            raise ValueError(
                f"functional_call: the names {repeated} are given by more than one of the dicts; give each name in "
                "one dict only"
            )
        tensors = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError(
            "functional_call: the tensors to use take a dict of name -> tensor (or a list/tuple of such dicts), got "
            f"{type(parameter_and_buffer_dicts).__name__}"
        )
    return _functional_call(module, tensors, args, kwargs, tie_weights=tie_weights, strict=strict)


def replace_all_batch_norm_modules_(root: Module) -> Module:
    """Make every batch norm in `root` (itself included) keep no running statistics, in place, as
    torch.func.replace_all_batch_norm_modules_: its `running_mean`, `running_var` and `num_batches_tracked` become None
    (gone from the state dict) and `track_running_stats` False, so it normalizes with the batch's own statistics in
    training and in eval mode alike, and a vmapped call has no buffer to update. Returns `root`.

    >>> from uopkit.nn import BatchNorm1d, Linear, Sequential
    >>> net = replace_all_batch_norm_modules_(Sequential(Linear(3, 4), BatchNorm1d(4)))
    >>> net[1].running_mean is None, net[1].track_running_stats, sorted(net.state_dict())
    (True, False, ['0.bias', '0.weight', '1.bias', '1.weight'])
    """
    for m in root.modules():
        if isinstance(m, BatchNorm) and m.track_running_stats:
            m.running_mean = m.running_var = m.num_batches_tracked = None
            m.track_running_stats = False
    return root
