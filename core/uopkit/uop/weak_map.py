"""`WeakKeyMap`: a map from UOps, held weakly, whose entries go with their nodes."""

from __future__ import annotations

import operator
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from uopkit.uop.ops import UOp


class WeakKeyMap:
    """A map from UOps, held weakly, to values: an entry goes when its node does.

    The keys are weak references whose callback drops their entry, so setting, reading and dropping entries are C
    calls, where `weakref.WeakKeyDictionary` runs Python code for each (the realize path sets and drops entries for
    every buffer and realized value). A key set again keeps its first reference: the new one is dropped unused."""

    __slots__ = ("_data", "_remove")

    def __init__(self) -> None:
        self._data: dict[weakref.ref, Any] = {}
        self._remove = self._data.pop

    def __setitem__(self, key: UOp, value: Any) -> None:
        self._data[weakref.ref(key, self._remove)] = value

    def __getitem__(self, key: UOp) -> Any:
        return self._data[weakref.ref(key)]

    def get(self, key: UOp, default: Any = None) -> Any:
        return self._data.get(weakref.ref(key), default)

    def pop(self, key: UOp, default: Any = None) -> Any:
        return self._data.pop(weakref.ref(key), default)

    def __contains__(self, key: object) -> bool:
        try:
            return weakref.ref(key) in self._data
        except TypeError:
            return False

    def __len__(self) -> int:
        return len(self._data)

    def keys(self) -> list[UOp]:
        """The keys still alive, as a list (entries can go while it is read)."""
        return [k for k in map(operator.call, list(self._data)) if k is not None]
