"""torch.nn.parameter's `Parameter` (kept apart from nn/module.py, which imports it), and the module's rules for what
a tensor attribute is: a parameter (a `Parameter`, or any tensor that requires a gradient) or a buffer."""

from __future__ import annotations

from typing import Any

from uopkit.tensor import Tensor
from uopkit.tensor.copies import deep_copy
from uopkit.tensor.support import _mark_view
from uopkit.tensor.tensor import _unpickled_tensor
from uopkit.uop.ops import Ops

__all__ = ["Parameter"]


class Parameter(Tensor):
    """A tensor that is a module's parameter (torch.nn.Parameter): it requires a gradient unless told otherwise and
    shows `data`'s contents (an in-place write into either shows in the other). Operations on it give plain Tensors.

    >>> p = Parameter(Tensor([1.0, 2.0]))
    >>> p.requires_grad, isinstance(p, Tensor)
    (True, True)
    """

    __slots__ = ()

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True) -> None:
        if data is None:
            data = Tensor.empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter: data must be a Tensor, got {type(data).__name__}")
        if data.uop.base.op is Ops.BUFFER:
            # stored data: the parameter shows it (torch's Parameter shares its storage)
            super().__init__(data.detach())
            _mark_view(self, data)
        else:
            # a lazy value gets a buffer of its own: equal lazy values are one node, and two parameters made from
            # `Tensor.ones(3)` would share a gradient
            super().__init__(data.detach().contiguous())
        self.requires_grad = requires_grad

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    # copies of a Parameter are Parameters, as torch's (`copy.deepcopy(model)` for an EMA model, a pickled model)

    def __copy__(self) -> Tensor:
        return _as_parameter(super().__copy__())

    def __deepcopy__(self, memo: dict[int, Any]) -> Tensor:
        # without its .grad, as torch's Parameter (a plain tensor's copy keeps it): a model copied after backward()
        # (a target network, a copy to fine-tune) starts with no gradients, and its first backward() isn't added to
        # the original's
        return _as_parameter(deep_copy(self, memo, with_grad=False))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        _, args = super().__reduce__()
        return _unpickled_parameter, args


def _as_parameter(t: Tensor) -> Tensor:
    """`t`, a plain tensor just made that no one else holds (a layer's new weight, a copy of a parameter), turned into a
    Parameter in place: no copy, no view, no kernel (a Parameter holds nothing a Tensor doesn't)."""
    if type(t) is Tensor:
        t.__class__ = Parameter
    return t


def _unpickled_parameter(*args: Any) -> Tensor:
    return _as_parameter(_unpickled_tensor(*args))


def _is_parameter(t: Tensor) -> bool:
    # a Parameter, or a tensor that requires (or once required: a frozen layer's weight) a gradient
    return isinstance(t, Parameter) or bool(t._requires_grad) or t._wanted_grad


def _described(value: Any) -> str:
    # what an error names a value by: a tensor by its shape, dtype and whether it requires grad
    if isinstance(value, Tensor):
        kind = type(value).__name__
        return f"a {kind} of shape {value.shape} and dtype {value.dtype.name} (requires_grad={value.requires_grad})"
    return f"{type(value).__name__!r}"


def _is_state_tensor(t: Tensor) -> bool:
    # a parameter, or a buffer the built-in layers mark by requires_grad=False; a plain tensor (None) is not state
    return isinstance(t, Parameter) or t._requires_grad is not None
