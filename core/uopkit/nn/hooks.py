"""The handles torch's `register_*_hook` methods return, shared by modules and optimizers."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any


class RemovableHandle:
    """What the `register_*_hook` methods (a module's, an optimizer's) return, as torch's: `remove()` takes the hook
    away (`extra`: the sets that hold the hook's id besides)."""

    _ids = itertools.count()

    def __init__(self, hooks: dict[int, Callable[..., Any]], extra: tuple[set[int], ...] = ()) -> None:
        self.hooks, self.id, self.extra = hooks, next(RemovableHandle._ids), extra

    def remove(self) -> None:
        self.hooks.pop(self.id, None)
        for ids in self.extra:
            ids.discard(self.id)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _add_hook(
    hooks: dict[int, Callable[..., Any]],
    hook: Callable[..., Any],
    prepend: bool = False,
    extra: tuple[set[int], ...] = (),
) -> RemovableHandle:
    """Register `hook` in `hooks` (run in order; `prepend`: first) with its id in each set of `extra` (its options)."""
    if not callable(hook):
        raise TypeError(f"a hook must be callable, got {type(hook).__name__}")
    handle = RemovableHandle(hooks, extra)
    for ids in extra:
        ids.add(handle.id)
    if prepend:
        # (the same dict, reordered: handles of the hooks already there hold it)
        rest = dict(hooks)
        hooks.clear()
        hooks[handle.id] = hook
        hooks.update(rest)
    else:
        hooks[handle.id] = hook
    return handle


def new_args_and_kwargs(result: Any, what: str) -> tuple[tuple, dict] | None:
    """What a pre-hook that may change the call returned: None (no change) or (new_args, new_kwargs), checked."""
    if result is None:
        return None
    if not (isinstance(result, tuple) and len(result) == 2):
        raise RuntimeError(f"{what} must return None or a tuple (new_args, new_kwargs), got {type(result).__name__}")
    return result


# torch.nn.modules.module's global registration hooks: hook(module, name, value) whenever any module registers a
# buffer, a sub-module or a parameter (register_* or setting the attribute); a non-None return is registered instead
_buffer_registration_hooks: dict[int, Callable[..., Any]] = {}
_module_registration_hooks: dict[int, Callable[..., Any]] = {}
_parameter_registration_hooks: dict[int, Callable[..., Any]] = {}
REGISTRATION_HOOKS = {
    "buffer": _buffer_registration_hooks,
    "module": _module_registration_hooks,
    "parameter": _parameter_registration_hooks,
}


def register_module_buffer_registration_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """hook(module, name, buffer) each time any module registers a buffer (`register_buffer`, or a tensor set under a
    buffer's name); a non-None return is registered in its place. As torch's
    `torch.nn.modules.module.register_module_buffer_registration_hook`."""
    return _add_hook(_buffer_registration_hooks, hook)


def register_module_module_registration_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """hook(module, name, submodule) each time any module registers a sub-module (`add_module`, or a Module set as
    an attribute, None too where a sub-module was); a non-None return is registered in its place. As torch's
    `torch.nn.modules.module.register_module_module_registration_hook`."""
    return _add_hook(_module_registration_hooks, hook)


def register_module_parameter_registration_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """hook(module, name, param) each time any module registers a parameter (`register_parameter`, or a Parameter
    set as an attribute; not None); a non-None return is registered in its place. As torch's
    `torch.nn.modules.module.register_module_parameter_registration_hook`."""
    return _add_hook(_parameter_registration_hooks, hook)


def run_registration_hooks(kind: str, module: Any, name: str, value: Any) -> Any:
    """`value` after the global registration hooks of `kind` ("buffer", "module", "parameter"), in order."""
    for hook in list(REGISTRATION_HOOKS[kind].values()):
        out = hook(module, name, value)
        if out is not None:
            value = out
    return value
