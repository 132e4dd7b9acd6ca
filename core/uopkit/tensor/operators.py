"""Python's operators on a Tensor (a mixin of `Tensor`): `+ - * / // % @`, their reflected forms, `==` and `!=`, and
the conversions bool(), int(), float() and operator.index().

An operand that no tensor op takes gives NotImplemented, so that Python falls back as it does for torch's tensors:
`[1, 2] * n` repeats the list by a 0-d int tensor's `__index__`, and `t == "auto"` is Python's identity test, False."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.dtype import DTypeError, dtypes
from uopkit.tensor.elementwise import ElementwiseMixin
from uopkit.uop.ops import Ops

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# what `*` repeats in Python rather than multiplying elementwise (torch's tensors leave them to Python too)
_SEQUENCE_TYPES = frozenset({list, tuple, str, bytes, bytearray})
_mul = ElementwiseMixin.mul
# what an elementwise comparison takes besides a tensor (`Tensor._broadcasted`)
_COMPARABLE = (bool, int, float, np.integer, np.floating, np.bool_, np.ndarray, list, tuple)


def _repeats_by(t: Tensor, seq: Any) -> Any:
    """`seq * t`: NotImplemented, for Python to repeat the sequence by int(t), when t is one integer; else a
    TypeError that says why (Python's own would be __index__'s)."""
    if (dtypes.is_int(t.dtype) or t.dtype == dtypes.bool) and t.numel() == 1:
        return NotImplemented
    kind = type(seq).__name__
    raise TypeError(
        f"can't multiply a {kind} by a {t.dtype} Tensor of shape {t.shape}: `*` repeats a Python sequence by one "
        f"integer, as for torch's tensors; for an elementwise product make the {kind} a Tensor first"
    )


class OperatorsMixin:
    __add__ = ElementwiseMixin.add
    __sub__ = ElementwiseMixin.sub
    __truediv__ = ElementwiseMixin.div
    __neg__ = ElementwiseMixin.neg
    __mod__ = ElementwiseMixin.mod

    # (`a * b` is on every model's path: the check and the call without a method lookup)
    def __mul__(self, x: Any) -> Tensor:
        return _mul(self, x) if type(x) not in _SEQUENCE_TYPES else _repeats_by(self, x)

    def __rmul__(self, x: Any) -> Tensor:
        return _mul(self, x, True) if type(x) not in _SEQUENCE_TYPES else _repeats_by(self, x)

    def __abs__(self) -> Tensor:
        return self.abs()

    def __pos__(self) -> Tensor:
        # +t is t itself, as PyTorch's (which refuses it on bool tensors)
        if self.dtype == dtypes.bool:
            # (DTypeError: a TypeError, as Python's unary + of an unsupported type, and torch's RuntimeError)
            raise DTypeError("unary + (positive): not supported on a bool tensor (as PyTorch); use .int() first")
        return self

    def __radd__(self, x: Any) -> Tensor:
        return self.add(x, True)

    def __rsub__(self, x: Any) -> Tensor:
        return self.sub(x, True)

    def __rtruediv__(self, x: Any) -> Tensor:
        return self.div(x, True)

    def __rmod__(self, x: Any) -> Tensor:
        return self.mod(x, True)

    def __floordiv__(self, x: Any) -> Tensor:
        return self.div(x, rounding_mode="floor")

    def __rfloordiv__(self, x: Any) -> Tensor:
        return self.div(x, True, rounding_mode="floor")

    # an ndarray is taken as `*` takes it (numpy defers `ndarray @ t` here, as `ndarray * t`): a Tensor on the
    # tensor's device, in the product's graph; other operands get Python's TypeError
    def __matmul__(self, x: Any) -> Tensor:
        if isinstance(x, np.ndarray):
            x = Tensor(x, device=self.device)
        return self.matmul(x) if isinstance(x, Tensor) else NotImplemented

    def __rmatmul__(self, x: Any) -> Tensor:
        if isinstance(x, np.ndarray):
            x = Tensor(x, device=self.device)
        return self.matmul(x, True) if isinstance(x, Tensor) else NotImplemented

    # `t == None`, `t == "auto"`: Python's identity test (False; True for !=), as PyTorch's: `x in (None, t)` and
    # `if mode == "auto"` guards work
    def __eq__(self, x: Any) -> Tensor | bool:  # type: ignore[override]
        return self._cmp(Ops.CMPEQ, x) if isinstance(x, Tensor) or isinstance(x, _COMPARABLE) else NotImplemented

    def __ne__(self, x: Any) -> Tensor | bool:  # type: ignore[override]
        return self._cmp(Ops.CMPNE, x) if isinstance(x, Tensor) or isinstance(x, _COMPARABLE) else NotImplemented

    __hash__ = object.__hash__

    # Python scalars from one-element tensors, as PyTorch (each realizes the tensor and reads it back)
    def _python_scalar(self, kind: str) -> Any:
        if self.numel() != 1:
            raise TypeError(
                f"{kind}() of a Tensor of shape {self.shape} ({self.numel()} elements) is ambiguous; only a "
                "one-element tensor converts to a Python scalar (use .any(), .all(), .item() or .numpy())"
            )
        return self.item()

    def __bool__(self) -> bool:
        return bool(self._python_scalar("bool"))

    def __float__(self) -> float:
        return float(self._python_scalar("float"))

    def __int__(self) -> int:
        return int(self._python_scalar("int"))

    def __index__(self) -> int:
        if not (dtypes.is_int(self.dtype) or self.dtype == dtypes.bool):
            raise TypeError(f"only integer tensors can be used as an index, this one is {self.dtype}")
        return int(self._python_scalar("index"))
