"""The `Tensor` class's own type and the small int types its attributes read as: what a port that renamed `torch.` to
`Tensor.` finds on the class besides methods (dtypes, torch's namespaces and top-level functional names, memory
formats, gradient switches, the `no_grad` flag that is also torch's switch), and `t.nbytes` (torch's int, tinygrad's
method)."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

from uopkit.dtype import COMPLEX_DTYPES, DTYPES_BY_NAME, dtypes
from uopkit.tensor import grad_mode as _grad_modes
from uopkit.tensor import memory_format as _memory_format
from uopkit.tensor.grad_mode import no_grad as _no_grad_switch
from uopkit.tensor.grad_mode import thread_mode as _grad_mode
from uopkit.tensor.torch_functions import TOP_LEVEL_FUNCTIONAL, top_level_function


class _GradFlag(int):
    # what `Tensor.no_grad` reads as: tinygrad's flag (truthy while recording is off, 0 or 1 as a bool), and callable
    # as torch's `no_grad` for a port that renamed `torch.` to `Tensor.`: `with Tensor.no_grad():`, `@Tensor.no_grad`
    def __call__(self, fn: Callable[..., Any] | None = None) -> Any:
        return _no_grad_switch(fn)

    def __repr__(self) -> str:
        return repr(bool(self))


_GRAD_FLAGS = (_GradFlag(0), _GradFlag(1))


class _OnTheClass:
    # a metaclass attribute for a name the class uses for instances (`t.device`, `t.cuda()`): `Tensor.X` on the class
    # gives torch's module-level object of that name (torch.device, the torch.cuda namespace), loaded on first use,
    # while instances still find the class's own attribute (a metaclass attribute is never looked up from instances,
    # so `t.device` costs what it did)
    __slots__ = ("name", "module", "attr")

    def __init__(self, name: str, module: str, attr: str | None = None) -> None:
        self.name, self.module, self.attr = name, module, attr

    def __get__(self, cls: Any, meta: Any = None) -> Any:
        if cls is None:
            return self
        module = importlib.import_module(self.module)
        return module if self.attr is None else getattr(module, self.attr)

    # (a data descriptor, so that it wins over the class's own attribute; setting or deleting the name on the class,
    # as monkeypatch.setattr(Tensor, "device", ...) does, changes the class's own attribute: this one is lifted
    # meanwhile)
    def __set__(self, cls: Any, value: Any) -> None:
        self._lifted(lambda: type.__setattr__(cls, self.name, value))

    def __delete__(self, cls: Any) -> None:
        self._lifted(lambda: type.__delattr__(cls, self.name))

    def _lifted(self, change: Callable[[], None]) -> None:
        with _LIFT_LOCK:
            delattr(_TensorType, self.name)
            try:
                change()
            finally:
                setattr(_TensorType, self.name, self)


_LIFT_LOCK = threading.Lock()


class _TensorType(type):
    # torch.device and the torch.cuda namespace, on the class (`Tensor.device("cuda")`, `Tensor.cuda.is_available()`)
    device = _OnTheClass("device", "uopkit.device", "TorchDevice")
    cuda = _OnTheClass("cuda", "uopkit.cuda")

    # tinygrad's switch for gradient recording, `Tensor.no_grad` (torch's no_grad; see tensor/grad_mode.py), is the
    # calling thread's mode: values computed while it is set are detached
    @property
    def no_grad(cls) -> _GradFlag:
        return _GRAD_FLAGS[_grad_mode.off]

    @no_grad.setter
    def no_grad(cls, value: bool) -> None:
        _grad_mode.off = bool(value)

    def __getattr__(cls, name: str) -> Any:
        # what a port spells `torch.X` as `Tensor.X` besides functions: a dtype (`dtype=Tensor.float32`; the cast
        # methods `Tensor.long`, `Tensor.half`, ... stand for theirs too, `_CAST_METHOD_DTYPES`), torch's namespaces
        # (`Tensor.linalg.qr(a)`), memory formats and gradient switches; looked up on the class only, after its own
        # attributes
        if name in DTYPES_BY_NAME:
            return DTYPES_BY_NAME[name]
        if name in COMPLEX_DTYPES:
            return COMPLEX_DTYPES[name]
        if name in _TORCH_NAMESPACES:
            return importlib.import_module(f"uopkit.{name}")
        if name in _TORCH_TOP_LEVEL_OBJECTS:
            # torch's memory formats (`x.contiguous(memory_format=Tensor.channels_last_3d)`), gradient switches
            # (`with Tensor.enable_grad():` inside a sampler's no_grad loop): uopkit's objects of those names
            module, attr = _TORCH_TOP_LEVEL_OBJECTS[name]
            return attr if module is None else getattr(importlib.import_module(module), attr)
        if name in TOP_LEVEL_FUNCTIONAL:
            # torch's top-level functional names (`Tensor.layer_norm` for torch.layer_norm): tensor/torch_functions.py
            return top_level_function(name)
        raise AttributeError(f"type object 'Tensor' has no attribute {name!r}")


# torch's namespaces that uopkit has under the same name (`torch.linalg` -> `uopkit.linalg`)
_TORCH_NAMESPACES = frozenset(
    {"linalg", "special", "autograd", "distributions", "func", "signal", "random", "nn", "amp", "fft", "backends"}
)
# torch's top-level objects that are no functions of tensors, for a port that spells them `Tensor.X`: name -> (the
# module to take it from lazily, its name there), or (None, the object) (`no_grad` is the class's property above)
_TORCH_TOP_LEVEL_OBJECTS: dict[str, tuple[str | None, Any]] = {
    **{name: (None, getattr(_memory_format, name)) for name in _memory_format.__all__},
    **{name: (None, getattr(_grad_modes, name)) for name in _grad_modes.__all__ if name != "no_grad"},
    "Generator": ("uopkit.tensor.generator", "Generator"),
    "autocast": ("uopkit.amp", "autocast"),
    "vmap": ("uopkit.func", "vmap"),
}
# the cast methods named as torch's dtypes (`torch.long` is int64): `dtype=Tensor.long` means that dtype (to_dtype)
_CAST_METHOD_DTYPES = {
    "long": dtypes.int64,
    "int": dtypes.int32,
    "short": dtypes.int16,
    "char": dtypes.int8,
    "byte": dtypes.uint8,
    "bool": dtypes.bool,
    "half": dtypes.float16,
    "bfloat16": dtypes.bfloat16,
    "float": dtypes.float32,
    "double": dtypes.float64,
}


class _ByteCount(int):
    """What `Tensor.nbytes` gives: torch's int that, called, is tinygrad's `nbytes()` (the same int)."""

    __slots__ = ()

    def __call__(self) -> int:
        return int(self)
