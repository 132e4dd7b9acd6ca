"""`_creates_leaf`, the wrapper of Tensor's constructors (`zeros`, `full`, `randn`, ...): `requires_grad=` and torch's
`size=`, and a complex dtype, which makes a ComplexTensor (tensor/complex_creation.py) without a check on the real path.

`Tensor` is bound in this module by `uopkit.tensor.tensor` once the class exists."""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any

from uopkit.dtype import ComplexDTypeRequest
from uopkit.uop.ops import Ops

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def _creates_leaf(fn: Any) -> Any:
    """A constructor taking `requires_grad=`: the tensor it returns is a leaf of its own. Constants are hash-consed
    (two `Tensor.ones(3)` are one node), so a leaf built from one gets a node of its own (a CONTIGUOUS with a fresh
    arg) and `backward()` gives every such tensor its own gradient."""

    params = inspect.signature(fn).parameters
    takes = {"dtype", "device"} | {n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    # torch's keyword for the shape, `zeros(size=(2, 3))`, where the constructor has no `size` of its own
    shape_param = params.get("shape") if "size" not in params else None
    if shape_param is not None:
        takes.add("size")

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Tensor:
        requires_grad = kwargs.pop("requires_grad", None)
        if shape_param is not None and "size" in kwargs:
            size = kwargs.pop("size")
            if args or "shape" in kwargs:
                raise TypeError(f"{fn.__name__}() got the shape twice: as arguments and as size={size!r}")
            if shape_param.kind is inspect.Parameter.VAR_POSITIONAL:
                args = (size,)
            else:
                kwargs["shape"] = size
        if unknown := [k for k in kwargs if k not in takes]:
            # (PyTorch's generator=, layout=, pin_memory=, out= ...: named here, not as a Tensor() argument deep inside)
            raise TypeError(
                f"{fn.__name__}() got an unexpected keyword argument {unknown[0]!r}; it takes "
                f"{', '.join(sorted(takes - {'self', 'shape', 'args'}))} and requires_grad"
            )
        try:
            t = fn(*args, **kwargs)
        except ComplexDTypeRequest as e:  # a complex dtype: a ComplexTensor (ComplexMixin._complex_created)
            t = Tensor._complex_created(fn, args, kwargs, e)
        if requires_grad is None:
            return t
        if requires_grad and (type(t) is not Tensor or t.uop.base.op is not Ops.BUFFER):
            t = t.contiguous()  # (a ComplexTensor, from an inner constructor: its parts)
        t.requires_grad = requires_grad
        return t

    return wrapper
