"""torch.nn's `ParameterList` and `ParameterDict`: containers of a module's parameters (nn/module.py's `ModuleList`
and `ModuleDict` underneath, so their entries are attributes named "0", "1", ... or by key, and state dict keys are
torch's). A Tensor given to either becomes a `Parameter`; any other value is kept as it is, as torch's (listed among
the entries, not among the parameters).

A `ParameterDict` orders its entries as torch's: a plain dict (any mapping but an `OrderedDict` or another
`ParameterDict`) given to the constructor, `update` or `|` is taken in key order, an `OrderedDict`, a `ParameterDict`
or a sequence of (key, value) pairs in its own order. That order is the order of `parameters()`, so of an optimizer's
state and of `parameters_to_vector`.

>>> from uopkit import Tensor
>>> d = ParameterDict({"scale": Tensor.ones(2), "bias": Tensor.zeros(2)})
>>> list(d.keys())
['bias', 'scale']
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from uopkit.nn import reprs
from uopkit.nn.module import ModuleDict, ModuleList, Parameter
from uopkit.tensor import Tensor

__all__ = ["ParameterList", "ParameterDict"]


class ParameterList(ModuleList):
    """A list of parameters (torch.nn.ParameterList): a Tensor entry becomes a Parameter, another value stays."""

    def _check(self, value: Any) -> Any:
        # (any other object is kept as it is, not a parameter, as torch's: a float, a string, None)
        if isinstance(value, Tensor) and not isinstance(value, Parameter):
            return Parameter(value)
        return value

    def extra_repr(self) -> str:
        return reprs.parameters_repr(enumerate(self), False, Parameter)

    def __repr__(self) -> str:
        return reprs.module_repr(self)


class ParameterDict(ModuleDict):
    """A dict of parameters (torch.nn.ParameterDict): a Tensor value becomes a Parameter; a plain dict's entries are
    taken in key order (see the module docstring)."""

    _check = ParameterList._check  # type: ignore[assignment]

    def update(self, parameters: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        """Set each (key, value) of `parameters`: a plain dict's in key order, an OrderedDict's, a ParameterDict's or a
        sequence of pairs' in the order given (torch's)."""
        if isinstance(parameters, Mapping) and not isinstance(parameters, (OrderedDict, ParameterDict)):
            parameters = sorted(parameters.items())
        super().update(parameters)

    def get(self, key: str, default: Any = None) -> Any:
        """The entry named `key`, or `default` where there is none."""
        return self[key] if key in self else default

    def setdefault(self, key: str, default: Any = None) -> Any:
        """The entry named `key`; where there is none, `default` is set there first (a Tensor becomes a Parameter)."""
        if key not in self:
            self[key] = default
        return self[key]

    def popitem(self) -> tuple[str, Any]:
        """Remove the entry set last and return its (key, value); a KeyError on an empty dict."""
        keys = self.keys()
        if not keys:
            raise KeyError("ParameterDict.popitem: the dict is empty")
        return keys[-1], self.pop(keys[-1])

    def copy(self) -> ParameterDict:
        """A new ParameterDict holding the same Parameters under the same keys, in the same order."""
        return ParameterDict(OrderedDict(self.items()))

    def fromkeys(self, keys: Iterable[str], default: Any = None) -> ParameterDict:
        """A new ParameterDict with each of `keys` set to `default` (a Tensor becomes a Parameter for each key)."""
        return ParameterDict([(k, default) for k in keys])

    def __reversed__(self) -> Iterator[str]:
        return reversed(self.keys())

    def __or__(self, other: Mapping[str, Any]) -> ParameterDict:
        out = self.copy()
        out.update(other)
        return out

    def __ror__(self, other: Mapping[str, Any]) -> Any:
        out = other.copy()  # type: ignore[attr-defined]
        out.update(self)
        return out

    def __ior__(self, other: Mapping[str, Any]) -> ParameterDict:
        self.update(other)
        return self

    def extra_repr(self) -> str:
        return reprs.parameters_repr(self.items(), True, Parameter)
