"""torch.autograd.forward_ad's dual tensors (`dual_level`, `make_dual`, `unpack_dual`, `enter_dual_level`,
`exit_dual_level`, `UnpackedDualTensor`), for code that pushes a tangent through a function, as forward-mode Laplacians
and Jacobian-vector products in physics-informed training do.

uopkit has no forward mode: `make_dual(x, t)` gives a tensor of x's values that the level records with its tangent
(a tensor of its own that requires grad), and `unpack_dual(y)` computes y's tangent, J t summed over the level's duals
that y depends on, by the double-backward trick (two reverse passes, as `autograd.functional.jvp`). The tangent stays
differentiable (with respect to the parameters y was computed from, as torch's). Departures: a dual and what is
computed from it report `requires_grad=True` (torch: only where the primal requires grad), and each `unpack_dual` of a
computed tensor costs two backward passes instead of riding along the forward one.

>>> from uopkit import Tensor
>>> with dual_level():
...     x = make_dual(Tensor([1.0, 2.0]), Tensor([1.0, 0.0]))
...     unpack_dual(x * x).tangent.tolist()
[2.0, 0.0]
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, NamedTuple

from uopkit.tensor import Tensor
from uopkit.tensor.autograd import grad
from uopkit.tensor.grad_mode import enable_grad

__all__ = ["UnpackedDualTensor", "dual_level", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual"]

# the open level (torch allows one at a time): its number, and the duals made in it with their tangents
_level: int | None = None
_duals: list[tuple[Tensor, Tensor]] = []


class UnpackedDualTensor(NamedTuple):
    """`unpack_dual`'s result: the primal values and the tangent (None where the tensor has none)."""

    primal: Tensor
    tangent: Tensor | None


def enter_dual_level() -> int:
    """Open the dual level (one at a time, as torch's: a second raises a RuntimeError) and return its number."""
    global _level
    if _level is not None:
        raise RuntimeError(
            "enter_dual_level: a dual level is already open and only one can be; exit it (or leave its "
            "`with dual_level():` block) before opening another"
        )
    _level = 0
    return _level


def exit_dual_level(*, level: int | None = None) -> None:
    """Close the dual level: the duals made in it lose their tangents."""
    global _level
    if _level is None or (level is not None and level != _level):
        raise RuntimeError(f"exit_dual_level: level {level if level is not None else 0} is not the open dual level")
    _level = None
    _duals.clear()


class dual_level:  # noqa: N801  (torch's name)
    """A context manager (`with dual_level():`) that opens the dual level for its block and closes it after."""

    def __enter__(self) -> int:
        return enter_dual_level()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        exit_dual_level()


def _check_level(level: int | None, fn: str) -> None:
    if _level is None or (level is not None and level != _level):
        raise RuntimeError(f"{fn}: no dual level is open; call it inside `with forward_ad.dual_level():`")


def make_dual(tensor: Tensor, tangent: Tensor, *, level: int | None = None) -> Tensor:
    """A tensor with `tensor`'s values whose tangent (its directional derivative) is `tangent`, of the same shape and
    dtype, as torch.autograd.forward_ad.make_dual; only inside a dual level."""
    _check_level(level, "make_dual")
    if not isinstance(tensor, Tensor) or not isinstance(tangent, Tensor):
        raise TypeError(
            f"make_dual: the primal and the tangent are Tensors, got {type(tensor).__name__} and "
            f"{type(tangent).__name__}"
        )
    if not tensor.is_floating_point():
        raise ValueError(f"make_dual: only float tensors have tangents, got a primal of dtype {tensor.dtype}")
    if tangent.shape != tensor.shape or tangent.dtype != tensor.dtype:
        raise RuntimeError(
            f"make_dual: a tangent of shape {tuple(tangent.shape)} and dtype {tangent.dtype} for a primal of shape "
            f"{tuple(tensor.shape)} and dtype {tensor.dtype}; give the tangent the primal's shape and dtype"
        )
    with enable_grad():
        # a node of its own to differentiate with respect to: the primal itself (through * 1 where it has a graph)
        dual = tensor * 1 if tensor.requires_grad else tensor.detach().clone().requires_grad_(True)
    _duals.append((dual, tangent.detach()))
    return dual


def unpack_dual(tensor: Any, *, level: int | None = None) -> UnpackedDualTensor:
    """(primal, tangent) of `tensor`, as torch.autograd.forward_ad.unpack_dual: the tangent is J t summed over the
    open level's duals it was computed from (None when it depends on none of them, and outside a level)."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"unpack_dual: takes a Tensor, got a {type(tensor).__name__}")
    if _level is None or (level is not None and level != _level) or not _duals:
        return UnpackedDualTensor(tensor, None)
    primal = tensor  # (torch: a view of it without the tangent, with its autograd history)
    for dual, tangent in _duals:
        if tensor is dual:
            return UnpackedDualTensor(primal, tangent)
    if not tensor.requires_grad or not tensor.is_floating_point():
        return UnpackedDualTensor(primal, None)
    duals = [d for d, _ in _duals]
    with enable_grad():
        # u -> J^T u is linear in u, so the gradient of <J^T u, t> with respect to u is J t
        u = Tensor.zeros(tensor.shape, dtype=tensor.dtype, device=tensor.device, requires_grad=True)
        vjps = grad(tensor, duals, u, create_graph=True, allow_unused=True)
        terms = [(g * t).sum() for g, (_, t) in zip(vjps, _duals, strict=True) if g is not None]
        if not terms:
            return UnpackedDualTensor(primal, None)
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        (tangent,) = grad(total, u, create_graph=True, materialize_grads=True)
    return UnpackedDualTensor(primal, tangent)
