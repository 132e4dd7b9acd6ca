"""torch.autograd.Variable, the name from before tensors carried autograd themselves, still used by older programs
(`Variable(torch.zeros(3))`, `Variable(x, requires_grad=True)`, `isinstance(t, Variable)`).

As torch's: `Variable(t)` is `t.detach()` (the same storage, no graph) with `requires_grad` set, `Variable()` an empty
float32 tensor, a non-tensor a TypeError, and every Tensor counts as an instance; `volatile=` was removed (it warns).
"""

from __future__ import annotations

import warnings
from typing import Any

from uopkit.tensor import Tensor

__all__ = ["Variable"]


class _VariableMeta(type):
    def __instancecheck__(cls, other: Any) -> bool:
        return isinstance(other, Tensor)

    def __call__(cls, data: Any = None, requires_grad: bool = False, volatile: bool = False) -> Tensor:  # type: ignore[override]
        if volatile:
            warnings.warn(
                "Variable: volatile was removed and now has no effect; use `with no_grad():` instead",
                UserWarning,
                stacklevel=2,
            )
        if data is None:
            data = Tensor.empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        out = data.detach()
        if requires_grad:
            out.requires_grad_(True)
        return out


class Variable(metaclass=_VariableMeta):
    """torch.autograd.Variable(data, requires_grad=False, volatile=False): `data.detach()` with `requires_grad` set
    (see the module docstring); never an object of its own class.

    >>> from uopkit.autograd import Variable
    >>> v = Variable(Tensor([1.0, 2.0]), requires_grad=True)
    >>> v.requires_grad, isinstance(v, Variable)
    (True, True)
    """
