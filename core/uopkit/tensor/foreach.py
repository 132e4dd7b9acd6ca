"""torch's `_foreach_*` functions: one op over a list of tensors (an optimizer's or an EMA's parameters), as
`uopkit._foreach_add_(params, grads, alpha=-lr)` or `uopkit._foreach_lerp_(ema, params, 1 - decay)`.

The out-of-place forms return a tuple of the per-tensor results (lazy, differentiable as the single ops). The in-place
forms (`name_`) write every tensor with ONE realize (`update_all_in_place`) where a loop of single in-place ops
realizes each write at once (storage must show it: views of the tensor see it); they return the list of tensors, as
torch's. Each value is computed after the writes before it are staged, so a list that repeats a tensor, or reads one
it writes, gives what torch's loop gives. The second operand is what torch takes: a number, a 0-d tensor, a list of
numbers or a list of tensors (each broadcast, promoted and, in place, cast as the single op does), with torch's errors
for empty lists and lists of other lengths.

>>> from uopkit import Tensor
>>> ema, params = [Tensor([0.0, 0.0]), Tensor([1.0])], [Tensor([1.0, 2.0]), Tensor([3.0])]
>>> [t.tolist() for t in _foreach_lerp_(ema, params, 0.5)]
[[0.5, 1.0], [2.0]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from uopkit.dtype import DType, dtypes, to_dtype
from uopkit.tensor.indexing import update_all_in_place
from uopkit.tensor.support import ArgumentError, DTypeError, ShapeError, _broadcast_shape
from uopkit.tensor.tensor import Tensor

_NUMBERS = (bool, int, float, np.bool_, np.integer, np.floating)


def _tensor_list(tensors: Any, op: str, what: str = "self") -> list[Tensor]:
    if not isinstance(tensors, (list, tuple)) or not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError(f"{op}: {what} takes a list or tuple of Tensors, got {type(tensors).__name__}")
    if not tensors:
        raise ArgumentError(f"{op}: got an empty list of tensors")
    return list(tensors)


def _same_length(tensors: list[Tensor], others: Any, op: str, what: str) -> list[Tensor]:
    others = _tensor_list(others, op, what)
    if len(others) != len(tensors):
        counts = f"got {len(tensors)} and {len(others)}"
        raise ArgumentError(f"{op}: the tensor lists differ in length, {counts}; pair each tensor with one other")
    return others


def _operands(tensors: list[Tensor], other: Any, op: str, alpha: Any = 1) -> list[Any]:
    """The second operand of each tensor: a number or 0-d tensor for all, or one of a list of numbers or of tensors.
    `alpha` (add, sub) goes with tensor operands only, as torch's overloads."""
    n = len(tensors)
    if isinstance(other, (list, tuple)):
        if other and all(isinstance(o, Tensor) for o in other):
            return _same_length(tensors, other, op, "other")
        if not all(isinstance(o, _NUMBERS) for o in other):
            raise TypeError(f"{op}: a list operand must hold only Tensors or only numbers")
        if alpha != 1:
            raise TypeError(f"{op}: alpha goes with a Tensor or a list of Tensors, not a list of numbers")
        if len(other) != n:
            raise ArgumentError(f"{op}: {n} tensors but {len(other)} scalars; give one scalar per tensor")
        return list(other)
    if isinstance(other, Tensor):
        if other.ndim != 0:
            raise ShapeError(f"{op}: a tensor given as the scalar must be 0-D, got shape {other.shape}")
        return [other] * n
    if isinstance(other, _NUMBERS):
        if alpha != 1:
            raise TypeError(f"{op}: alpha goes with a Tensor or a list of Tensors, not a number")
        return [other] * n
    raise TypeError(f"{op}: the operand must be a number, a 0-d Tensor or a list, got {type(other).__name__}")


def _scalars(tensors: list[Tensor], value: Any, op: str) -> list[Any]:
    # addcmul's / addcdiv's `value`: a number, a list of numbers, or a 1-D tensor of one number per tensor (read back,
    # as torch's host-side scalars)
    if isinstance(value, Tensor):
        if value.ndim != 1 or value.shape[0] != len(tensors):
            raise ShapeError(
                f"{op}: the scalars tensor must be 1-D with one value per tensor ({len(tensors)}), got shape "
                f"{value.shape}"
            )
        return value.tolist()
    return _operands(tensors, value, op)


def _run(name: str, tensors: list[Tensor], compute: Callable[[Tensor, int], Tensor], in_place: bool) -> Any:
    # each tensor's result (`compute(t, i)`): returned as a tuple, or written into the tensors with one realize
    if not in_place:
        return tuple(compute(t, i) for i, t in enumerate(tensors))
    update_all_in_place(tensors, [lambda t=t, i=i: compute(t, i) for i, t in enumerate(tensors)], name)
    return tensors


def _unary(method: str, in_place: bool) -> Callable[..., Any]:
    name = f"_foreach_{method}{'_' if in_place else ''}"

    def foreach(self: Sequence[Tensor]) -> Any:
        tensors = _tensor_list(self, name)
        return _run(name, tensors, lambda t, i: getattr(t, method)(), in_place)

    foreach.__name__ = foreach.__qualname__ = name
    foreach.__doc__ = f"torch.{name}: `{method}` of each tensor{' written into it (one realize)' if in_place else ''}."
    return foreach


def _binary(method: str, in_place: bool, with_alpha: bool = False) -> Callable[..., Any]:
    name = f"_foreach_{method}{'_' if in_place else ''}"

    def foreach(self: Sequence[Tensor], other: Any, **kwargs: Any) -> Any:
        if kwargs and (not with_alpha or set(kwargs) != {"alpha"}):
            raise TypeError(f"{name}: unexpected keyword arguments {sorted(kwargs)}")
        tensors = _tensor_list(self, name)
        alpha = kwargs.get("alpha", 1)
        others = _operands(tensors, other, name, alpha)
        if with_alpha:
            return _run(name, tensors, lambda t, i: getattr(t, method)(others[i], alpha=alpha), in_place)
        return _run(name, tensors, lambda t, i: getattr(t, method)(others[i]), in_place)

    foreach.__name__ = foreach.__qualname__ = name
    foreach.__doc__ = (
        f"torch.{name}: `{method}` of each tensor with a number, a 0-d tensor, or its own entry of a list of numbers "
        f"or of tensors{' (alpha= scales a tensor operand)' if with_alpha else ''}"
        f"{', written into it (one realize)' if in_place else ''}."
    )
    return foreach


def _lerp(in_place: bool) -> Callable[..., Any]:
    name = f"_foreach_lerp{'_' if in_place else ''}"

    def foreach(self: Sequence[Tensor], tensors1: Sequence[Tensor], weight: Any) -> Any:
        tensors = _tensor_list(self, name)
        ends = _same_length(tensors, tensors1, name, "tensors1")
        weights = _operands(tensors, weight, name)
        return _run(name, tensors, lambda t, i: t.lerp(ends[i], weights[i]), in_place)

    foreach.__name__ = foreach.__qualname__ = name
    foreach.__doc__ = (
        f"torch.{name}: self + weight * (end - self) for each tensor, weight a number, a 0-d tensor, or one of a list "
        f"of numbers or of tensors{', written into it (one realize)' if in_place else ''}."
    )
    return foreach


def _addc(method: str, in_place: bool) -> Callable[..., Any]:
    name = f"_foreach_{method}{'_' if in_place else ''}"

    def foreach(self: Sequence[Tensor], tensor1: Sequence[Tensor], tensor2: Sequence[Tensor], value: Any = 1) -> Any:
        tensors = _tensor_list(self, name)
        firsts = _same_length(tensors, tensor1, name, "tensor1")
        seconds = _same_length(tensors, tensor2, name, "tensor2")
        values = _scalars(tensors, value, name)
        return _run(name, tensors, lambda t, i: getattr(t, method)(firsts[i], seconds[i], value=values[i]), in_place)

    foreach.__name__ = foreach.__qualname__ = name
    foreach.__doc__ = (
        f"torch.{name}: `{method}` of each tensor, value a number, a list of numbers or a 1-D tensor of one per "
        f"tensor{', written into it (one realize)' if in_place else ''}."
    )
    return foreach


def _foreach_copy_(self: Sequence[Tensor], src: Sequence[Tensor], non_blocking: bool = False) -> list[Tensor]:
    """torch._foreach_copy_: each `src` tensor (broadcast to its target's shape, cast to its dtype, moved to its
    device) written into the matching tensor, all with one realize."""
    tensors = _tensor_list(self, "_foreach_copy_")
    sources = _same_length(tensors, src, "_foreach_copy_", "src")

    def copied(t: Tensor, i: int) -> Tensor:
        s = sources[i] if sources[i].device == t.device else sources[i].to(t.device)
        return s._broadcast_to(_broadcast_shape(t.shape, s.shape, "_foreach_copy_")).cast(t.dtype)

    return _run("_foreach_copy_", tensors, copied, True)


def _foreach_zero_(self: Sequence[Tensor]) -> list[Tensor]:
    """torch._foreach_zero_: every element of every tensor set to zero, with one realize."""
    tensors = _tensor_list(self, "_foreach_zero_")
    return _run("_foreach_zero_", tensors, lambda t, i: Tensor.zeros(t.shape, device=t.device, dtype=t.dtype), True)


def _foreach_norm(self: Sequence[Tensor], ord: float = 2, dtype: DType | str | None = None) -> tuple[Tensor, ...]:
    """torch._foreach_norm: each tensor's `ord`-norm over all its elements (linalg.vector_norm), a 0-d tensor, computed
    in `dtype` when given; float tensors only, as torch's."""
    tensors = _tensor_list(self, "_foreach_norm")
    if isinstance(ord, (str, bool)) or not isinstance(ord, _NUMBERS):
        raise TypeError(f"_foreach_norm: ord must be a number, got {type(ord).__name__}")
    dt = to_dtype(dtype) if dtype is not None else None
    for t in tensors:
        if not dtypes.is_float(t.dtype):
            raise DTypeError(f"_foreach_norm: expected a floating point tensor as input, got {t.dtype}")
    return tuple((t if dt is None else t.cast(dt)).vector_norm(ord) for t in tensors)


# torch's unary foreach ops that uopkit computes
_UNARY = (
    "abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac", "lgamma",
    "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt",
    "tan", "tanh", "trunc",
)  # fmt: skip
# torch's binary ones (add and sub also take alpha=)
_BINARY = ("mul", "div", "maximum", "minimum", "clamp_min", "clamp_max", "pow")

_foreach_add = _binary("add", False, with_alpha=True)
_foreach_add_ = _binary("add", True, with_alpha=True)
_foreach_sub = _binary("sub", False, with_alpha=True)
_foreach_sub_ = _binary("sub", True, with_alpha=True)
_foreach_lerp = _lerp(False)
_foreach_lerp_ = _lerp(True)
_foreach_addcmul = _addc("addcmul", False)
_foreach_addcmul_ = _addc("addcmul", True)
_foreach_addcdiv = _addc("addcdiv", False)
_foreach_addcdiv_ = _addc("addcdiv", True)

__all__ = [
    "_foreach_add", "_foreach_add_", "_foreach_sub", "_foreach_sub_", "_foreach_lerp", "_foreach_lerp_",
    "_foreach_addcmul", "_foreach_addcmul_", "_foreach_addcdiv", "_foreach_addcdiv_", "_foreach_copy_",
    "_foreach_zero_", "_foreach_norm",
]  # fmt: skip
for _method in _UNARY:
    for _in_place in (False, True):
        _fn = _unary(_method, _in_place)
        globals()[_fn.__name__] = _fn
        __all__.append(_fn.__name__)
for _method in _BINARY:
    for _in_place in (False, True):
        _fn = _binary(_method, _in_place)
        globals()[_fn.__name__] = _fn
        __all__.append(_fn.__name__)
