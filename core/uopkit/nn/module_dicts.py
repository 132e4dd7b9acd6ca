"""torch.nn.Module's own dicts, `_parameters`, `_buffers` and `_modules` (a base class of `nn.Module`, kept here so
that nn/module.py stays small).

A uopkit Module keeps its tensors and layers as plain attributes (nn/module.py), so these are live views of them, not
dicts it stores: each lists the module's own entries of its kind, in the order `named_parameters(recurse=False)`,
`named_buffers(recurse=False)` and `named_children()` give them, and a write through one is the same write made on the
module. That is what torch code that reaches into them does: an equalized learning rate hook that moves a weight aside
(`del module._parameters["weight"]`, then `register_parameter("weight_orig", ...)`), a meta-learning update that puts
the stepped tensors back in place (`module._parameters[name] = p - lr * g`), a feature extractor that walks
`model._modules.items()`.

>>> from uopkit.nn import Linear
>>> layer = Linear(3, 2)
>>> list(layer._parameters)
['weight', 'bias']
>>> del layer._parameters["bias"]
>>> [name for name, _ in layer.named_parameters()]
['weight']
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

__all__ = ["ModuleDicts"]


class _OwnEntries(MutableMapping):
    """The live view of one kind of a module's own entries (see the module docstring)."""

    __slots__ = ("_module", "_kind")

    def __init__(self, module: Any, kind: str) -> None:
        self._module, self._kind = module, kind

    def _names(self) -> list[str]:
        m = self._module
        if self._kind == "modules":
            return [name for name, child in m._entries() if isinstance(child, ModuleDicts)]
        own = m.named_parameters if self._kind == "parameters" else m.named_buffers
        return [name for name, _ in own(recurse=False, remove_duplicate=False)]

    def __getitem__(self, name: str) -> Any:
        if name not in self._names():
            raise KeyError(name)
        return getattr(self._module, name)

    def __setitem__(self, name: str, value: Any) -> None:
        m = self._module
        if self._kind == "buffers":
            # a buffer set again keeps whether it is saved in the state dict, as torch's dict entry does
            st = m.__dict__.get("_module_state")
            m.register_buffer(name, value, persistent=st is None or name not in st.non_persistent)
        else:
            # the module's own rules for a parameter or a layer set as an attribute (`setattr`)
            setattr(m, name, value)

    def __delitem__(self, name: str) -> None:
        if name not in self._names():
            raise KeyError(name)
        delattr(self._module, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __repr__(self) -> str:
        return f"OrderedDict({list(self.items())!r})"


class ModuleDicts:
    """torch's `_parameters`, `_buffers` and `_modules` of a Module, as live views of its attributes."""

    @property
    def _parameters(self) -> MutableMapping[str, Any]:
        """The module's own parameters by name (a live view: `del m._parameters[name]` removes one)."""
        return _OwnEntries(self, "parameters")

    @property
    def _buffers(self) -> MutableMapping[str, Any]:
        """The module's own buffers by name, persistent or not (a live view)."""
        return _OwnEntries(self, "buffers")

    @property
    def _modules(self) -> MutableMapping[str, Any]:
        """The modules directly inside this one, by attribute name (a live view)."""
        return _OwnEntries(self, "modules")
