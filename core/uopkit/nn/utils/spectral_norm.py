"""torch.nn.utils.spectral_norm and remove_spectral_norm, the older (hook-based) form of spectral normalization, still
the one most SN-GAN code calls: the parameter `<name>_orig`, the buffers `<name>_u` and `<name>_v` of the power
iteration, and a forward pre-hook that sets `<name>` = `<name>_orig` / sigma before each call, so torch's state dicts
(those keys) load as they are. The newer form is `nn.utils.parametrizations.spectral_norm`.

>>> from uopkit.nn import Linear
>>> layer = spectral_norm(Linear(3, 4))
>>> list(layer.state_dict()), layer.weight_u.shape, layer.weight_v.shape
(['bias', 'weight_orig', 'weight_u', 'weight_v'], (4,), (3,))
"""

from __future__ import annotations

from typing import Any

from uopkit.nn.module import Module, Parameter, RemovableHandle
from uopkit.nn.utils.parametrizations import (
    _check_power_iterations,
    _default_dim,
    _power_iteration,
    _unit_vector,
    _weight_matrix,
)
from uopkit.tensor import Tensor, no_grad

__all__ = ["spectral_norm", "remove_spectral_norm"]


class SpectralNorm:
    """The forward pre-hook of `spectral_norm`: before each call, in training mode, `n_power_iterations` steps of the
    power iteration (v, then u, as torch's) update the buffers in place; then `module.<name>` is set to
    `<name>_orig` / sigma, sigma = u . (W v) with u and v constants to the gradient."""

    def __init__(self, name: str, n_power_iterations: int, dim: int, eps: float) -> None:
        _check_power_iterations(n_power_iterations)
        self.name, self.n_power_iterations, self.dim, self.eps = name, n_power_iterations, dim, eps
        self.handle: RemovableHandle | None = None

    def compute_weight(self, module: Module, do_power_iteration: bool) -> Tensor:
        weight = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        mat = _weight_matrix(weight, self.dim)
        if do_power_iteration:
            u, v = _power_iteration(mat, u, v, self.n_power_iterations, self.eps, v_first=True)
        sigma = u.detach().dot(mat.mv(v.detach()))
        return weight / sigma

    def __call__(self, module: Module, inputs: Any) -> None:
        training = module.training
        # (a plain attribute, recomputed at each call: not state, as torch's)
        object.__setattr__(module, self.name, self.compute_weight(module, do_power_iteration=bool(training)))


def _hooks_of(module: Module) -> list[SpectralNorm]:
    return [h for h in module._state().pre_hooks.values() if isinstance(h, SpectralNorm)]


def spectral_norm(
    module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim: int | None = None
) -> Module:
    """Spectral normalization (Miyato et al.), torch.nn.utils.spectral_norm: the parameter `module.<name>` moves to
    `<name>_orig` (the same tensor object: an optimizer holding it goes on with it), and before each forward `<name>`
    is set to `<name>_orig` / sigma, sigma its largest singular value estimated by power iteration on the weight as a
    matrix with rows along `dim` (None: 1 for a transposed convolution, else 0). The iteration's vectors are the
    buffers `<name>_u` and `<name>_v`, drawn at random (N(0, 1), normalized); training mode runs `n_power_iterations`
    steps per forward and updates them in place, eval mode uses them as they are. Returns `module`.

    Departure: a checkpoint from torch before 1.1 (`weight`, `weight_orig` and `weight_u`, no `weight_v`) isn't
    converted on loading, as torch's load hook does."""
    if any(h.name == name for h in _hooks_of(module)):
        raise RuntimeError(f"spectral_norm: {name!r} of {type(module).__name__} already has a spectral_norm hook")
    weight = module.__dict__.get(name)
    if not isinstance(weight, Tensor):
        raise ValueError(f"`SpectralNorm` cannot be applied as {type(module).__name__} has no parameter `{name}`")
    if dim is None:
        dim = _default_dim(module)
    ndim = weight.ndim
    if not -ndim <= dim < ndim:
        raise IndexError(f"spectral_norm: dim={dim} is not a dim of the {ndim}-D weight (valid: {-ndim} to {ndim - 1})")
    hook = SpectralNorm(name, n_power_iterations, dim % ndim, eps)
    with no_grad():
        h, w = _weight_matrix(weight.detach(), hook.dim).shape
        u, v = _unit_vector(h, weight, eps), _unit_vector(w, weight, eps)
    delattr(module, name)
    # the weight itself, kept as it was (a parameter: a Parameter, or a tensor that requires a gradient)
    setattr(module, name + "_orig", weight)
    object.__setattr__(module, name, weight.detach())
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)
    hook.handle = module.register_forward_pre_hook(hook)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Undo `spectral_norm`: `module.<name>` is a parameter again, holding `<name>_orig` / sigma with the current u
    and v (no power iteration). Returns `module`."""
    for hook in _hooks_of(module):
        if hook.name == name:
            with no_grad():
                weight = hook.compute_weight(module, do_power_iteration=False).detach()
            assert hook.handle is not None
            hook.handle.remove()
            st = module._state()
            for suffix in ("", "_u", "_v", "_orig"):
                if name + suffix in module.__dict__:
                    delattr(module, name + suffix)
                st.buffers.discard(name + suffix)
            module.register_parameter(name, Parameter(weight))
            return module
    raise ValueError(f"spectral_norm of '{name}' not found in {module}")
