"""torch.nn.utils.weight_norm and remove_weight_norm, the older form of weight normalization (torch deprecates it for
nn.utils.parametrizations.weight_norm, and still has it): the parameters `<name>_g` and `<name>_v`, and a forward
pre-hook that computes `<name>` from them before each call, so state dicts holding `weight_g` / `weight_v` (common in
older checkpoints) load as they are.

>>> from uopkit.nn import Linear
>>> layer = weight_norm(Linear(3, 4))
>>> [name for name, _ in layer.named_parameters()], layer.weight_g.shape
(['bias', 'weight_g', 'weight_v'], (4, 1))
"""

from __future__ import annotations

from typing import Any

from uopkit.nn.module import Module, Parameter, RemovableHandle
from uopkit.nn.utils.parametrizations import _norm_except_dim, _weight_norm
from uopkit.tensor import Tensor

__all__ = ["weight_norm", "remove_weight_norm"]


class WeightNorm:
    """The forward pre-hook of `weight_norm`: sets `module.<name>` to g * v / ||v|| before each call."""

    def __init__(self, name: str, dim: int) -> None:
        self.name, self.dim = name, dim
        self.handle: RemovableHandle | None = None

    def compute_weight(self, module: Module) -> Tensor:
        return _weight_norm(getattr(module, f"{self.name}_v"), getattr(module, f"{self.name}_g"), self.dim)

    def __call__(self, module: Module, inputs: Any) -> None:
        # (a plain attribute, recomputed at each call: not state, as torch's)
        object.__setattr__(module, self.name, self.compute_weight(module))


def _hooks_of(module: Module) -> list[WeightNorm]:
    return [h for h in module._state().pre_hooks.values() if isinstance(h, WeightNorm)]


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Weight normalization (Salimans & Kingma), torch.nn.utils.weight_norm: the parameter `module.<name>` is replaced
    by `<name>_g` (its norm over every dimension but `dim`, kept as size-1 dimensions; `dim=None` or -1: the whole
    tensor's norm, 0-d) and `<name>_v` (its direction), and `<name>` = g * v / ||v|| is computed from them before each
    forward. torch deprecates this form for `nn.utils.parametrizations.weight_norm` (other state dict keys). Returns
    `module`."""
    dim = -1 if dim is None else dim
    if any(h.name == name for h in _hooks_of(module)):
        raise RuntimeError(f"weight_norm: {name!r} of {type(module).__name__} already has a weight_norm hook")
    weight = module.__dict__.get(name)
    if not isinstance(weight, Tensor):
        raise AttributeError(f"{type(module).__name__} has no parameter named {name!r}")
    trained = bool(weight._requires_grad) or isinstance(weight, Parameter)
    delattr(module, name)
    module.register_parameter(f"{name}_g", Parameter(_norm_except_dim(weight.detach(), dim), requires_grad=trained))
    module.register_parameter(f"{name}_v", Parameter(weight.detach(), requires_grad=trained))
    hook = WeightNorm(name, dim)
    object.__setattr__(module, name, hook.compute_weight(module))
    hook.handle = module.register_forward_pre_hook(hook)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Undo `weight_norm`: `module.<name>` is a parameter again, holding g * v / ||v||. Returns `module`."""
    for hook in _hooks_of(module):
        if hook.name == name:
            weight = hook.compute_weight(module).detach()
            assert hook.handle is not None
            hook.handle.remove()
            for suffix in ("_g", "_v"):
                delattr(module, name + suffix)
            if name in module.__dict__:
                delattr(module, name)
            module.register_parameter(name, Parameter(weight))
            return module
    raise ValueError(f"weight_norm of '{name}' not found in {module}")
