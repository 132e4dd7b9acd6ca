"""Gradient clipping and parameter vectors (torch.nn.utils' clip_grad_norm_, clip_grad_value_, get_total_norm,
clip_grads_with_norm_, parameters_to_vector, vector_to_parameters).

The clipping functions scale or clamp each `.grad` in place (the same gradient tensors), outside autograd, as torch's.

>>> from uopkit import Tensor
>>> w = Tensor([3.0, 4.0], requires_grad=True)
>>> _ = (w * w).sum().backward()
>>> clip_grad_norm_([w], max_norm=1.0).item(), [round(g, 4) for g in w.grad.tolist()]
(10.0, [0.6, 0.8])
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from uopkit.dtype import dtypes
from uopkit.tensor import Tensor, no_grad

__all__ = [
    "clip_grad_norm_",
    "clip_grad_value_",
    "get_total_norm",
    "clip_grads_with_norm_",
    "parameters_to_vector",
    "vector_to_parameters",
]


def _as_list(tensors: Tensor | Iterable[Tensor]) -> list[Tensor]:
    # torch takes one tensor or any iterable of them (a generator from model.parameters() is read once)
    return [tensors] if isinstance(tensors, Tensor) else list(tensors)


def _grads(parameters: Tensor | Iterable[Tensor]) -> list[Tensor]:
    return [p.grad for p in _as_list(parameters) if p.grad is not None]


def _vector_norm(x: Tensor, ord: float) -> Tensor:  # noqa: A002 - torch.linalg.vector_norm's name
    # torch.linalg.vector_norm of the flattened tensor: max |x| for inf, min |x| for -inf, the count of nonzeros for 0;
    # a half float's in float32 and rounded once, as torch's (x * x overflows float16 from 256: a gradient of norm
    # 800 came out inf, and clip_grad_norm_ zeroed it)
    if x.dtype in dtypes.halves:
        return _vector_norm(x.float(), ord).cast(x.dtype)
    x = x.reshape(-1)
    if ord == math.inf:
        return x.abs().max()
    if ord == -math.inf:
        return x.abs().min()
    if ord == 0:
        return (x != 0).sum().cast(x.dtype)
    if ord == 1:
        return x.abs().sum()
    if ord == 2:
        return (x * x).sum().sqrt()
    return x.abs().pow(ord).sum().pow(1.0 / ord)


def get_total_norm(
    tensors: Tensor | Iterable[Tensor],
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """The `norm_type` norm of the tensors' norms, as if they were one vector (torch.nn.utils.get_total_norm), a 0-d
    Tensor; 0.0 for no tensors. `error_if_nonfinite` raises a RuntimeError on a nan or inf total; `foreach` is
    accepted and ignored (the norms are fused by the scheduler either way)."""
    norm_type = float(norm_type)
    tensors = _as_list(tensors)
    if not tensors:
        return Tensor(0.0)
    with no_grad():
        norms = [_vector_norm(t, norm_type) for t in tensors]
        total = _vector_norm(Tensor.stack(*norms), norm_type)
        if error_if_nonfinite and not math.isfinite(total.item()):
            raise RuntimeError(
                f"clip_grad_norm_: the {norm_type}-norm of the gradients is {total.item()}, which can't scale them; "
                "pass error_if_nonfinite=False to scale by it all the same"
            )
    return total


def clip_grads_with_norm_(
    parameters: Tensor | Iterable[Tensor], max_norm: float, total_norm: Tensor, foreach: bool | None = None
) -> None:
    """Scale every `.grad` in place by min(1, max_norm / (total_norm + 1e-6)) (torch.nn.utils.clip_grads_with_norm_).
    The gradients are always multiplied, as torch's: a nan total norm makes them nan."""
    grads = _grads(parameters)
    if not grads:
        return
    if not isinstance(total_norm, Tensor):
        total_norm = Tensor(float(total_norm), device=grads[0].device)
    with no_grad():
        scale = (Tensor(float(max_norm), device=total_norm.device) / (total_norm + 1e-6)).minimum(1.0)
        # (rounded to the total's dtype, as torch's: the norm of half-float gradients is a half float)
        scale = scale.cast(total_norm.dtype)
        for g in grads:
            # a half-float gradient is scaled in float32 and rounded once, as torch's
            g.copy_(g.float() * scale.to(g.device) if g.dtype.itemsize < 4 else g * scale.to(g.device))


def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """Scale the gradients of `parameters` in place so that their total `norm_type` norm (taken as if they were one
    vector; `inf` for the largest magnitude) is at most `max_norm`, and return the total norm before clipping as a
    0-d Tensor (torch.nn.utils.clip_grad_norm_). Parameters without a `.grad` are skipped."""
    parameters = _as_list(parameters)
    grads = _grads(parameters)
    try:
        total = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    except RuntimeError as error:
        raise RuntimeError(str(error).replace("get_total_norm:", "clip_grad_norm_:", 1)) from None
    clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float, foreach: bool | None = None) -> None:
    """Clamp every `.grad` of `parameters` to [-clip_value, clip_value] in place (torch.nn.utils.clip_grad_value_)."""
    clip_value = float(clip_value)
    with no_grad():
        for g in _grads(parameters):
            g.clamp_(-clip_value, clip_value)


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """The parameters flattened and concatenated into one 1-D tensor (torch.nn.utils.parameters_to_vector)."""
    parameters = _as_list(parameters)
    devices = {p.device for p in parameters}
    if len(devices) > 1:
        raise TypeError(f"parameters_to_vector: found parameters on different devices {sorted(devices)}")
    return Tensor.cat(*[p.reshape(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of the 1-D `vec` into the parameters, in place and outside autograd
    (torch.nn.utils.vector_to_parameters; torch makes each parameter a view of `vec` instead, so a later write into
    `vec` shows in torch's parameters, not in these)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"vector_to_parameters: expected a Tensor, but got {type(vec).__name__}")
    parameters = _as_list(parameters)
    needed = sum(p.numel() for p in parameters)
    if vec.ndim != 1 or vec.shape[0] < needed:
        raise ValueError(
            f"vector_to_parameters: vec must be 1-D with at least {needed} elements, got shape {vec.shape}"
        )
    offset = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[offset : offset + n].reshape(p.shape).to(p.device).cast(p.dtype))
            offset += n
