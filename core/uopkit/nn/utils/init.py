"""torch.nn.utils.skip_init: a module made without its usual parameter initialization, to be filled in by the caller.

torch makes the module on the "meta" device and then gives it empty (uninitialized) storage, and asks the module to
take a `device` argument for that. uopkit's layers take none and have no meta device, so the module is made as usual:
its parameters hold the usual initial values, which is one of the values uninitialized storage may hold; the cost of
the initialization is not skipped.

>>> from uopkit.nn import Linear
>>> skip_init(Linear, 5, 1).weight.shape
(1, 5)
"""

from __future__ import annotations

import inspect
from typing import Any, TypeVar

from uopkit.nn.module import Module

__all__ = ["skip_init"]

ModuleT = TypeVar("ModuleT", bound=Module)


def skip_init(module_cls: type[ModuleT], *args: Any, **kwargs: Any) -> ModuleT:
    """`module_cls(*args, **kwargs)`, its parameters not to be relied on (see the module docstring). A `device` given
    goes to a class that takes one, else the module is moved there."""
    if not (isinstance(module_cls, type) and issubclass(module_cls, Module)):
        raise RuntimeError(f"skip_init: Expected a Module; got {module_cls!r}")
    device = None
    if "device" in kwargs and "device" not in inspect.signature(module_cls).parameters:
        device = kwargs.pop("device")
    module = module_cls(*args, **kwargs)
    return module if device is None else module.to(device)
