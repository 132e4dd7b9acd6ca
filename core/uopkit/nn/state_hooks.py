"""torch.nn.Module's state-dict hooks, extra state and `set_submodule` (a base class of `nn.Module`, kept here so that
nn/module.py stays small), and `load_module_state`, the body of `Module.load_state_dict`.

The walk of a module's state (`Module._tensors`) yields, besides its tensors, three marks for a module that has such
hooks or extra state (one check per module; a model without them walks as before): "pre_hooks" (before the module's
own tensors), "extra_state" (after them) and "post_hooks" (after its sub-modules'), each as (mark, prefix, module).

>>> from uopkit.nn import Linear
>>> layer = Linear(2, 1)
>>> def drop_bias(module, state_dict, prefix, local_metadata):
...     del state_dict[prefix + "bias"]
>>> handle = layer.register_state_dict_post_hook(drop_bias)
>>> list(layer.state_dict())
['weight']
>>> handle.remove()
>>> list(layer.state_dict())
['weight', 'bias']
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from uopkit.engine.realize import realize_lock
from uopkit.nn import state
from uopkit.nn.hooks import RemovableHandle, _add_hook

if TYPE_CHECKING:
    from uopkit.nn.module import Module

__all__ = ["StateHooks", "load_module_state"]

EXTRA_STATE_KEY = "_extra_state"
# the marks `Module._tensors` yields for a hooked module (see the module docstring); the other kinds are tensors'
MARKS = ("pre_hooks", "extra_state", "post_hooks")


class _IncompatibleKeys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]

    def __repr__(self) -> str:
        # torch's: `print(model.load_state_dict(sd))` says all matched when nothing is missing or unexpected
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return f"_IncompatibleKeys(missing_keys={self.missing_keys}, unexpected_keys={self.unexpected_keys})"


class _StateDictHooks:
    # one module's hooks of state_dict and load_state_dict, made at the first registration (`_ModuleState.state_hooks`)
    __slots__ = ("save_pre", "save_post", "load_pre", "load_post")

    def __init__(self) -> None:
        self.save_pre: dict[int, Callable[..., Any]] = {}
        self.save_post: dict[int, Callable[..., Any]] = {}
        self.load_pre: dict[int, Callable[..., Any]] = {}
        self.load_post: dict[int, Callable[..., Any]] = {}


class StateHooks:
    """The part of `nn.Module` that is torch's state-dict hooks, extra state and `set_submodule`."""

    # whether the class defines get_extra_state or set_extra_state (set for each subclass): its walk yields marks
    _extra_state = False
    # torch's version of the layer's state-dict layout, kept in `state_dict()._metadata` (a layer that changed its
    # layout, BatchNorm, has a higher one, and reads an older checkpoint's by it in `_fill_old_state`)
    _version: int = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # (a class with its own `_load_from_state_dict` marks its place in the walk too, to be called there)
        cls._extra_state = _saves_extra_state(cls) or _loads_extra_state(cls) or _own_load(cls)

    def _state_hooks(self) -> _StateDictHooks:
        st = self._state()  # type: ignore[attr-defined]
        if st.state_hooks is None:
            st.state_hooks = _StateDictHooks()
        return st.state_hooks

    def register_state_dict_pre_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """hook(module, prefix, keep_vars) before `state_dict` takes this module's entries (`prefix`: the module's,
        "layer1.0." for an inner one), as torch's; its return value is ignored."""
        return _add_hook(self._state_hooks().save_pre, hook)

    def register_state_dict_post_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """hook(module, state_dict, prefix, local_metadata) once `state_dict` has this module's entries and its
        sub-modules': it may change `state_dict` in place and must return None (RuntimeError otherwise, as torch's)."""
        return _add_hook(self._state_hooks().save_post, hook)

    def register_load_state_dict_pre_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs) before
        `load_state_dict` loads this module: `state_dict` holds the entries under `prefix`, and what the hook makes of
        them (keys of an old checkpoint renamed) is loaded; a message appended to `error_msgs` fails the load
        (RuntimeError). As torch's, `strict` is always True here."""
        return _add_hook(self._state_hooks().load_pre, hook)

    def _register_load_state_dict_pre_hook(
        self, hook: Callable[..., Any], with_module: bool = False
    ) -> RemovableHandle:
        """torch's private form of `register_load_state_dict_pre_hook`: the hook takes no module first unless
        `with_module` (hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs))."""
        if with_module:
            return self.register_load_state_dict_pre_hook(hook)
        return self.register_load_state_dict_pre_hook(lambda module, *args: hook(*args))

    def register_load_state_dict_post_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """hook(module, incompatible_keys) after `load_state_dict` loaded this module: it may take keys out of
        `incompatible_keys.missing_keys`/`.unexpected_keys` in place (a strict load checks what is left) and must
        return None (AssertionError otherwise, as torch's)."""
        return _add_hook(self._state_hooks().load_post, hook)

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        """torch's per-module loading step, which a subclass overrides to rework its entries (those under `prefix`:
        a key of an old checkpoint renamed, one no longer used dropped) and then calls `super()._load_from_state_dict`
        with the same arguments, as torch code does. `load_state_dict` calls it after the module's load pre-hooks; the
        module's tensors are then loaded from what it left, by `load_state_dict` itself (so this base does nothing)."""

    def get_extra_state(self) -> Any:
        """Define it (with `set_extra_state`) to keep any other value in the state dict, under "<prefix>_extra_state"
        after the module's own tensors, as torch's."""
        raise RuntimeError(f"{type(self).__name__}.get_extra_state: define it in the subclass to keep extra state")

    def set_extra_state(self, state: Any) -> None:
        """Define it to take back, in `load_state_dict`, what `get_extra_state` gave."""
        raise RuntimeError(f"{type(self).__name__}.set_extra_state: define it in the subclass to load extra state")

    def set_submodule(self, target: str, module: Module, strict: bool = False) -> None:
        """Put `module` at dotted path `target` ("net_b.conv"): its parent must exist; an attribute there must be a
        module (strict: one must be there), as torch's."""
        layer = type(self).__name__
        if not isinstance(target, str) or target == "":
            raise ValueError(f"{layer}.set_submodule: the target must be a non-empty dotted path, got {target!r}")
        # (StateHooks is a base of Module only: this module can't import nn/module.py, which imports it)
        if not isinstance(module, StateHooks):
            raise ValueError(f"{layer}.set_submodule: `module` is not an nn.Module, found {type(module).__name__}")
        path, _, name = target.rpartition(".")
        parent: Any = self
        for part in path.split(".") if path else []:
            child = _child(parent, part)
            if not isinstance(child, (StateHooks, list, dict)):
                raise AttributeError(f"{layer}.set_submodule: {target!r} has no module at {part!r}")
            parent = child
        if isinstance(parent, list):
            if not (name.lstrip("-").isdigit() and -len(parent) <= int(name) < len(parent)):
                raise AttributeError(f"{layer}.set_submodule: {path!r} has no entry {name!r}")
            old = parent[int(name)]
        elif isinstance(parent, dict):
            old = parent.get(name)
            if strict and name not in parent:
                raise AttributeError(f"{layer}.set_submodule: {path!r} has no entry {name!r}")
        else:
            if strict and not hasattr(parent, name):
                raise AttributeError(f"{type(parent).__name__} has no attribute `{name}`")
            old = getattr(parent, name, None)
        if old is not None and not isinstance(old, StateHooks):
            raise AttributeError(f"{layer}.set_submodule: `{name}` is not an nn.Module (it is {type(old).__name__})")
        if isinstance(parent, list):
            parent[int(name)] = module
        elif isinstance(parent, dict):
            parent[name] = module
        else:
            setattr(parent, name, module)


def _child(module: Any, part: str) -> Any:
    """The entry `part` of one step of a dotted path: a list's index, a dict's key, an attribute."""
    if isinstance(module, (list, tuple)) and part.lstrip("-").isdigit():
        return module[int(part)]
    if isinstance(module, dict):
        return module.get(part)
    return getattr(module, part, None)


def _saves_extra_state(cls: type) -> bool:
    return getattr(cls, "get_extra_state", None) is not StateHooks.get_extra_state


def _loads_extra_state(cls: type) -> bool:
    return getattr(cls, "set_extra_state", None) is not StateHooks.set_extra_state


def _own_load(cls: type) -> bool:
    return getattr(cls, "_load_from_state_dict", None) is not StateHooks._load_from_state_dict


def _load_steps(module: Any) -> list[Callable[..., Any]]:
    # what a load runs at the module's place, as torch's: its load pre-hooks, then its own `_load_from_state_dict`
    hooks = _hooks(module)
    steps = list(hooks.load_pre.values()) if hooks is not None else []
    if _own_load(type(module)):
        steps.append(lambda m, *args: m._load_from_state_dict(*args))
    return steps


def _hooks(module: Any) -> _StateDictHooks | None:
    st = module.__dict__.get("_module_state")
    return None if st is None else st.state_hooks


def save_mark(
    mark: str, prefix: str, module: Any, out: dict[str, Any], keep_vars: bool, metadata: dict[str, Any] | None
) -> None:
    """What `state_dict` does at a mark of its walk: run the module's hooks (a post-hook gets the module's entry of
    `metadata`, the state dict's `_metadata`, as torch's), or add its extra state."""
    if mark == "extra_state":
        if _saves_extra_state(type(module)):
            out[prefix + EXTRA_STATE_KEY] = module.get_extra_state()
        return
    hooks = _hooks(module)
    if hooks is None:
        return
    if mark == "pre_hooks":
        for hook in list(hooks.save_pre.values()):
            hook(module, prefix, keep_vars)
        return
    local_metadata = metadata.get(prefix[:-1]) if metadata is not None else None
    if local_metadata is None:
        local_metadata = {"version": module._version}
    for hook in list(hooks.save_post.values()):
        if hook(module, out, prefix, local_metadata) is not None:
            raise RuntimeError(f"{type(module).__name__}: a state_dict post-hook must return None (change it in place)")


def load_module_state(module: Module, state_dict: Mapping[str, Any], strict: bool, assign: bool) -> _IncompatibleKeys:
    """`module.load_state_dict(state_dict, strict, assign)`. A model without load hooks is loaded in one walk that
    checks every key first (a strict load that fails writes nothing); one with load hooks as torch's recursion: each
    module in turn (top down) runs its pre-hooks, takes its entries and finds its missing and unexpected keys, and
    once its sub-modules are done runs its post-hooks, which see the keys found so far."""
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"load_state_dict: expected state_dict to be dict-like, got {type(state_dict).__name__}")
    # (torch's `_metadata`: each module's version of its layout, by the module's name)
    metadata = getattr(state_dict, "_metadata", None)
    metadata = metadata if isinstance(metadata, Mapping) else None
    result = _load_without_hooks(module, state_dict, metadata or {}, strict, assign)
    if result is None:
        result = _load_with_hooks(module, state_dict, metadata, strict, assign)
    return result


def _load_without_hooks(
    module: Module, state_dict: Mapping[str, Any], metadata: Mapping[str, Any], strict: bool, assign: bool
) -> _IncompatibleKeys | None:
    # None (having written nothing) where a module has load hooks
    given = dict(state_dict)
    # (torch's per-layer `_load_from_state_dict`: a layer fills in what an older checkpoint lacks, by its version)
    for name, m in module.named_modules():
        m._fill_old_state(given, name + "." if name else "", metadata.get(name, {}))
    targets: dict[str, Any] = {}
    keys: list[str] = []
    extras: list[tuple[str, Any]] = []
    # (under the realize lock, as state_dict walks)
    with realize_lock:
        for kind, name, value in module._tensors("", set(), again=True):
            if kind in ("parameter", "buffer"):
                targets[name] = value
                keys.append(name)
            elif kind == "extra_state" and _loads_extra_state(type(value)):
                keys.append(name + EXTRA_STATE_KEY)
                extras.append((name + EXTRA_STATE_KEY, value))
            elif kind == "pre_hooks" and (
                ((hooks := _hooks(value)) is not None and (hooks.load_pre or hooks.load_post)) or _own_load(type(value))
            ):
                return None
    known = set(keys)
    result = _IncompatibleKeys([k for k in keys if k not in given], [k for k in given if k not in known])
    _check(module, result, [], strict)
    _write(module, targets, given, extras, assign)
    return result


def _load_with_hooks(
    module: Module, state_dict: Mapping[str, Any], metadata: Mapping[str, Any] | None, strict: bool, assign: bool
) -> _IncompatibleKeys:
    # the root's pre-hooks get this copy (with the `_metadata`), an inner module's those of its entries (its prefix's)
    given: Any = OrderedDict(state_dict)
    if metadata is not None:
        given._metadata = metadata
    # a first walk (no hooks run) finds the modules' prefixes and the keys to load, which decide which module a key
    # unexpected is found at (the innermost of its prefix, as torch's recursion), and whether a post-hook needs each
    # module written in turn (else nothing is written before the strict check passes)
    prefixes: set[str] = set()
    planned: set[str] = set()
    in_turn = False
    for kind, name, value in module._tensors("", set(), again=True, every=True):
        if kind == "pre_hooks":
            prefixes.add(name)
            in_turn = in_turn or ((hooks := _hooks(value)) is not None and bool(hooks.load_post))
        elif kind in ("parameter", "buffer"):
            planned.add(name)
        elif kind == "extra_state" and _loads_extra_state(type(value)):
            planned.add(name + EXTRA_STATE_KEY)
    found_at: dict[str, list[str]] = {}
    _sort_keys(given, "", prefixes, found_at)
    missing: list[str] = []
    unexpected: list[str] = []
    errors: list[str] = []
    targets: dict[str, Any] = {}
    extras: list[tuple[str, Any]] = []
    with realize_lock:
        for kind, name, value in module._tensors("", set(), again=True, every=True):
            if kind in ("parameter", "buffer"):
                if name in given:
                    targets[name] = value
                else:
                    missing.append(name)
            elif kind == "extra_state" and _loads_extra_state(type(value)):
                if name + EXTRA_STATE_KEY in given:
                    extras.append((name + EXTRA_STATE_KEY, value))
                else:
                    missing.append(name + EXTRA_STATE_KEY)
            elif kind == "pre_hooks":
                local_metadata = dict(metadata.get(name[:-1], {})) if metadata is not None else {}
                if assign:
                    local_metadata["assign_to_params_buffers"] = True
                value._fill_old_state(given, name, local_metadata)
                if steps := _load_steps(value):
                    if in_turn:
                        _write(module, targets, given, extras, assign)
                    _run_load_pre_hooks(value, steps, given, name, local_metadata, missing, unexpected, errors)
                    _sort_keys(given, name, prefixes, found_at)
                unexpected += [k for k in found_at.get(name, ()) if k in given and k not in planned]
            elif kind == "post_hooks" and (hooks := _hooks(value)) is not None and hooks.load_post:
                _write(module, targets, given, extras, assign)
                # (the lists themselves: a hook may take keys out of them, as torch's)
                result = _IncompatibleKeys(missing, unexpected)
                for hook in list(hooks.load_post.values()):
                    if hook(value, result) is not None:
                        raise AssertionError(
                            f"{type(value).__name__}: a load_state_dict post-hook must return None (change "
                            "incompatible_keys in place)"
                        )
        result = _IncompatibleKeys(missing, unexpected)
        if in_turn:
            _write(module, targets, given, extras, assign)
        _check(module, result, errors, strict)
        _write(module, targets, given, extras, assign)
    return result


def _sort_keys(given: Mapping[str, Any], prefix: str, prefixes: set[str], found_at: dict[str, list[str]]) -> None:
    # the keys under `prefix` by the module that checks them: the innermost module whose prefix the key starts with
    for p in [p for p in found_at if p.startswith(prefix)]:
        del found_at[p]
    for key in given:
        if not key.startswith(prefix):
            continue
        at = key.rfind(".")
        while at >= 0 and key[: at + 1] not in prefixes:
            at = key.rfind(".", 0, at)
        found_at.setdefault(key[: at + 1], []).append(key)


def _write(
    module: Module, targets: dict[str, Any], given: Mapping[str, Any], extras: list[tuple[str, Any]], assign: bool
) -> None:
    # write (or assign) the tensors of `targets` and set the extra states, which are then done with
    _, _, pairs = state.matched_tensors(targets, given, strict=False)
    targets.clear()
    if assign:
        module._assign_tensors(pairs)
    else:
        state.write_tensors(pairs)
    for key, m in extras:
        if key in given:
            m.set_extra_state(given[key])
    extras.clear()


def _run_load_pre_hooks(
    module: Any,
    steps: list[Callable[..., Any]],
    given: dict[str, Any],
    prefix: str,
    local_metadata: dict[str, Any],
    missing: list[str],
    unexpected: list[str],
    errors: list[str],
) -> None:
    # the root's hooks get the copy itself; an inner module's a copy of the entries under its prefix, as torch's, and
    # what they leave under the prefix replaces those entries (a key they add elsewhere is dropped, as torch's loading
    # never sees it)
    if prefix == "":
        for hook in steps:
            hook(module, given, prefix, local_metadata, True, missing, unexpected, errors)
        return
    local = {k: v for k, v in given.items() if k.startswith(prefix)}
    for hook in steps:
        hook(module, local, prefix, local_metadata, True, missing, unexpected, errors)
    for k in [k for k in given if k.startswith(prefix)]:
        del given[k]
    given.update((k, v) for k, v in local.items() if k.startswith(prefix))


def _check(module: Any, result: _IncompatibleKeys, errors: list[str], strict: bool) -> None:
    if strict and (result.missing_keys or result.unexpected_keys):
        raise state.StateDictKeyError(
            f"load_state_dict: missing keys {result.missing_keys}, unexpected keys {result.unexpected_keys}"
        )
    if errors:
        raise RuntimeError(f"Error(s) in loading state_dict for {type(module).__name__}:\n\t" + "\n\t".join(errors))
