"""torch.nn.utils.parametrize: a module's tensor computed, at each access, from the tensors it is parametrized by.

`register_parametrization(module, "weight", p)` moves the parameter (or buffer) `weight` into
`module.parametrizations.weight.original` (or `original0`, `original1`, ... when `p.right_inverse` returns several
tensors), and `module.weight` becomes a property: `p(original)` each time it is read; assigning it sets the originals
through `right_inverse`. As in torch, the module's class becomes a subclass `Parametrized<Name>` holding that
property, and the state dict keys are torch's ("parametrizations.weight.original0"), so checkpoints load both ways.

>>> from uopkit import Tensor
>>> from uopkit.nn import Linear, Module
>>> class Symmetric(Module):
...     def forward(self, x):
...         return x.triu() + x.triu(1).transpose(0, 1)
>>> layer = register_parametrization(Linear(3, 3), "weight", Symmetric())
>>> type(layer).__name__, (layer.weight == layer.weight.T).all().item()
('ParametrizedLinear', True)
>>> [name for name, _ in layer.named_parameters()]
['bias', 'parametrizations.weight.original']
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from uopkit.nn.module import Module, ModuleDict, Parameter
from uopkit.tensor import Tensor, no_grad

__all__ = [
    "ParametrizationList",
    "cached",
    "is_parametrized",
    "register_parametrization",
    "remove_parametrizations",
    "type_before_parametrizations",
]

# the tensors computed inside `cached()` blocks, by (module, name)
_cache_depth = 0
_cache: dict[tuple[int, str], Tensor] = {}


@contextlib.contextmanager
def cached() -> Iterator[None]:
    """Inside the block, each parametrized tensor is computed once, at its first access, and reused (torch's
    `parametrize.cached()`: for a parametrized weight read many times in one forward, an RNN's for instance)."""
    global _cache_depth
    _cache_depth += 1
    try:
        yield
    finally:
        _cache_depth -= 1
        if not _cache_depth:
            _cache.clear()


class ParametrizationList(Module):
    """The parametrizations of one tensor, as torch's: the modules as entries "0", "1", ... (applied in order), the
    tensor they are computed from as `original` (or `original0`, `original1`, ...). Calling it computes the tensor."""

    def __init__(self, modules: Sequence[Module], original: Tensor, unsafe: bool = False) -> None:
        super().__init__()
        if not modules:
            raise ValueError("ParametrizationList requires one or more modules.")
        for i, m in enumerate(modules):
            setattr(self, str(i), m)
        self.unsafe = unsafe
        shape, dtype = original.shape, original.dtype
        with no_grad():
            new: Any = original
            for m in reversed(modules):
                if hasattr(m, "right_inverse"):
                    with contextlib.suppress(NotImplementedError):
                        new = m.right_inverse(new)
        if not isinstance(new, (Tensor, Sequence)):
            raise ValueError(
                f"register_parametrization: right_inverse returned {type(new).__name__}; it must give a tensor or a "
                "sequence of tensors"
            )
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        trained = bool(original._requires_grad)
        if self.is_tensor:
            if new.dtype != dtype:
                raise ValueError(
                    f"register_parametrization: right_inverse turned the {dtype} tensor into {new.dtype}; a single "
                    "tensor it returns must keep the dtype"
                )
            if new is not original:
                # into the same tensor object, as torch's set_ (an optimizer holding it goes on with it)
                if new.shape == shape:
                    original.assign(new.detach().contiguous())
                else:
                    original = _like(original, new.detach(), trained)
            _keep(self, "original", original)
        else:
            for i, tensor in enumerate(new):
                if not isinstance(tensor, Tensor):
                    raise ValueError(f"'right_inverse' must return a sequence of tensors. Got {type(tensor).__name__}.")
                _keep(self, f"original{i}", _like(original, tensor.detach(), trained))
        if not unsafe:
            _check_output(self(), shape, dtype, "registering a parametrization")

    def _modules_in_order(self) -> list[Module]:
        out = []
        while (m := self.__dict__.get(str(len(out)))) is not None:
            out.append(m)
        return out

    def __getitem__(self, idx: int) -> Module:
        return self._modules_in_order()[idx]

    def __len__(self) -> int:
        return len(self._modules_in_order())

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules_in_order())

    def append(self, module: Module) -> ParametrizationList:
        setattr(self, str(len(self)), module)
        return self

    def originals(self) -> list[Tensor]:
        """The tensors the parametrized one is computed from."""
        if self.is_tensor:
            return [self.original]
        return [getattr(self, f"original{i}") for i in range(self.ntensors)]

    def right_inverse(self, value: Tensor) -> None:
        """Set the originals so that the parametrization gives `value` (what assigning the parametrized tensor
        does), through each module's `right_inverse`, last module first; written in place, as torch's."""
        with no_grad():
            for m in reversed(self._modules_in_order()):
                if not hasattr(m, "right_inverse"):
                    raise RuntimeError(f"parametrization {type(m).__name__} does not implement right_inverse.")
                value = m.right_inverse(value)
            if self.is_tensor:
                if not isinstance(value, Tensor):
                    raise ValueError(f"`right_inverse` should return a tensor. Got {type(value).__name__}")
                _set(self.original, value)
            else:
                if not isinstance(value, Sequence) or len(value) != self.ntensors:
                    raise ValueError(f"'right_inverse' must return a sequence of {self.ntensors} tensors.")
                for t, v in zip(self.originals(), value, strict=True):
                    _set(t, v)

    def extra_repr(self) -> str:
        return ""

    def forward(self) -> Tensor:
        modules = self._modules_in_order()
        x = modules[0](*self.originals())
        for m in modules[1:]:
            x = m(x)
        return x


def _like(original: Tensor, value: Tensor, trained: bool) -> Tensor:
    # a new original: a Parameter where the tensor parametrized was a parameter, else a buffer
    if isinstance(original, Parameter) or original._requires_grad:
        return Parameter(value, requires_grad=trained)
    # (detached: a value computed from a tensor that requires grad is no leaf, and only a leaf's flag changes)
    return value.detach().contiguous().realize().requires_grad_(False)


def _keep(owner: Module, name: str, t: Tensor) -> None:
    # a parameter stays one (a Parameter, or a tensor that requires a gradient), anything else is a buffer
    if isinstance(t, Parameter):
        owner.register_parameter(name, t)
    elif t._requires_grad:
        setattr(owner, name, t)
    else:
        owner.register_buffer(name, t)


def _set(target: Tensor, value: Tensor) -> None:
    # a value into an original, in place (torch's set_)
    if value.shape != target.shape or value.dtype != target.dtype:
        raise ValueError(
            f"right_inverse gave a tensor of shape {value.shape} and dtype {value.dtype} for an original of shape "
            f"{target.shape} and dtype {target.dtype}"
        )
    target.assign(value.detach().contiguous())


def _check_output(value: Any, shape: tuple, dtype: Any, when: str) -> None:
    if not isinstance(value, Tensor):
        raise ValueError(f"A parametrization must return a tensor. Got {type(value).__name__}.")
    if value.shape != shape or value.dtype != dtype:
        raise ValueError(
            f"{when}: the parametrization turns a {dtype} tensor of shape {shape} into a {value.dtype} one of shape "
            f"{value.shape}; it must keep both (or register with unsafe=True)"
        )


_NOT_GIVEN = object()


def _parametrized_property(name: str) -> property:
    def get(self: Module) -> Tensor:
        # a tensor put in the instance's place of the parametrized one (functional_call's): used as it is
        given = self.__dict__.get(name, _NOT_GIVEN)
        if given is not _NOT_GIVEN:
            return given
        plist = self.parametrizations[name]
        if not _cache_depth:
            return plist()
        key = (id(self), name)
        if (value := _cache.get(key)) is None:
            value = _cache[key] = plist()
        return value

    def set_(self: Module, value: Tensor) -> None:
        self.parametrizations[name].right_inverse(value)

    return property(get, set_, doc=f"`{name}`, computed by `parametrizations.{name}` at each access")


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    """Whether `module` has a parametrization (on `tensor_name`, when given)."""
    plists = module.__dict__.get("parametrizations")
    if not isinstance(plists, ModuleDict):
        return False
    return len(plists) > 0 if tensor_name is None else tensor_name in plists


def type_before_parametrizations(module: Module) -> type:
    """The module's class before parametrizations were registered (its class itself if there are none)."""
    return type(module).__bases__[0] if is_parametrized(module) else type(module)


def register_parametrization(
    module: Module, tensor_name: str, parametrization: Module, *, unsafe: bool = False
) -> Module:
    """Parametrize `module.<tensor_name>` (a parameter, a buffer, or an already parametrized tensor) by
    `parametrization`, as torch's: from now on the tensor is `parametrization(original)` (a second registration on the
    same name applies after the first). If `parametrization` has `right_inverse(tensor)`, the original is
    `right_inverse` of the current tensor (several tensors: `original0`, `original1`, ... and `forward` takes them
    all), else the current tensor itself. Unless `unsafe`, the parametrized tensor must keep its shape and dtype.
    Returns `module`."""
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        plist = module.parametrizations[tensor_name]
        if not unsafe:
            current = getattr(module, tensor_name)
            _check_output(parametrization(current), current.shape, current.dtype, "registering a parametrization")
        plist.append(parametrization)
        plist.unsafe |= unsafe
        return module
    original = module.__dict__.get(tensor_name)
    if not isinstance(original, Tensor):
        raise ValueError(
            f"register_parametrization: {type(module).__name__} has no parameter, buffer or parametrized tensor "
            f"named {tensor_name!r}"
        )
    plist = ParametrizationList([parametrization], original, unsafe=unsafe)
    delattr(module, tensor_name)
    if not is_parametrized(module):
        # a class of its own holding the properties, as torch's (the instance's attribute would hide a property that
        # the instance's class doesn't have)
        cls = type(module)
        module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), {})
        module.parametrizations = ModuleDict()
    setattr(type(module), tensor_name, _parametrized_property(tensor_name))
    module.parametrizations[tensor_name] = plist
    return module


def remove_parametrizations(module: Module, tensor_name: str, leave_parametrized: bool = True) -> Module:
    """Undo the parametrizations of `module.<tensor_name>`, as torch's: it becomes a parameter (or buffer) again,
    holding its current parametrized value (`leave_parametrized=False`: the original's, possible only with a single
    original). The module gets its class back once no parametrization is left."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {type(module).__name__} does not have a parametrization on {tensor_name}")
    plist = module.parametrizations[tensor_name]
    if plist.is_tensor:
        original = plist.original
        if leave_parametrized:
            with no_grad():
                value = getattr(module, tensor_name)
            if value.shape == original.shape and value.dtype == original.dtype:
                original.assign(value.detach().contiguous())
            else:
                original = _like(original, value.detach(), bool(original._requires_grad))
    elif leave_parametrized:
        with no_grad():
            value = getattr(module, tensor_name)
        trained = any(bool(t._requires_grad) for t in plist.originals())
        original = _like(plist.originals()[0], value.detach(), trained)
    else:
        raise ValueError(
            f"remove_parametrizations: {tensor_name!r} is built from several original tensors, so there is no "
            "single original to put back; pass leave_parametrized=True"
        )
    delattr(type(module), tensor_name)
    del module.parametrizations[tensor_name]
    if not is_parametrized(module):
        del module.parametrizations
        module.__class__ = type(module).__bases__[0]
    _keep(module, tensor_name, original)
    return module
