"""torch.nn's containers: `Module` (the base of every uopkit.nn layer), `Parameter`, `ModuleList`, `ModuleDict`
(`ParameterList`, `ParameterDict`: nn/parameter_containers.py); compared with torch in tests/test_nn_module.py.

A Module keeps its tensors and sub-layers as plain attributes (tinygrad's way: `get_state_dict` finds them). What a
tensor attribute is follows torch: a *parameter* is a `Parameter` or any tensor that requires a gradient; a *buffer* is
one given to `register_buffer`, or one marked ``requires_grad=False`` (how the built-in layers keep running statistics
and loss weights); any other tensor attribute is not part of the module's state, as in torch. Lists, tuples and dicts
of layers and tensors held by a module are walked too (torch asks for a ModuleList there; tinygrad-style models use
plain lists), their entries named "attr.0", "attr.key".

Training mode: every module, a built-in layer made on its own too, is in training mode (`training` True) until
`eval()` / `train(False)`, as torch's; its own mode decides how it computes. While a module runs, `Tensor.training` is
its mode (layers read it, and so does `Tensor.dropout` inside a `forward`); outside any module the global
`Tensor.training` (`with Tensor.train():`, tinygrad's way) still drives the tensor-level ops (`x.dropout(p)`), but no
longer a layer, which follows its own mode.

>>> from uopkit import Tensor
>>> from uopkit.nn import Linear
>>> class Net(Module):
...     def __init__(self):
...         super().__init__()
...         self.fc = Linear(3, 2)
...     def forward(self, x):
...         return self.fc(x).relu()
>>> net = Net()
>>> net(Tensor.ones(4, 3)).shape, [name for name, _ in net.named_parameters()]
((4, 2), ['fc.weight', 'fc.bias'])
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from uopkit.distributions.distribution import Distribution
from uopkit.dtype import DType, dtypes, to_dtype
from uopkit.engine.realize import realize_lock
from uopkit.nn import reprs, state
from uopkit.nn.arguments import _to_arguments
from uopkit.nn.backward_hooks import ModuleBackwardCall
from uopkit.nn.hooks import (  # noqa: F401  (the registration hooks: torch.nn.modules.module's names)
    RemovableHandle,
    _add_hook,
    _buffer_registration_hooks,
    _module_registration_hooks,
    _parameter_registration_hooks,
    new_args_and_kwargs,
    register_module_buffer_registration_hook,
    register_module_module_registration_hook,
    register_module_parameter_registration_hook,
    run_registration_hooks,
)
from uopkit.nn.module_dicts import ModuleDicts
from uopkit.nn.parameter import (  # noqa: F401  (_unpickled_parameter: pickles made before it moved name it here)
    Parameter,
    _as_parameter,
    _described,
    _is_parameter,
    _is_state_tensor,
    _unpickled_parameter,
)
from uopkit.nn.state_hooks import MARKS, StateHooks, _child, _StateDictHooks, load_module_state, save_mark
from uopkit.tensor import Tensor
from uopkit.tensor.support import _canonical_device
from uopkit.uop.ops import Ops

__all__ = ["Module", "Parameter", "ModuleList", "ModuleDict"]


class _ModuleState:
    # a module's bookkeeping, kept in one slotted object: `get_state_dict` walks attributes' __dict__s, and this one
    # has none, so it is never mistaken for model state
    __slots__ = (
        "training",
        "buffers",
        "non_persistent",
        "pre_hooks",
        "hooks",
        "with_kwargs",
        "always_call",
        "backward_pre_hooks",
        "backward_hooks",
        "full_backward",
        "state_hooks",
        "none_kinds",
    )

    def __init__(self) -> None:
        # (every module trains until eval(), as torch's)
        self.training: bool = True
        self.buffers: set[str] = set()
        self.non_persistent: set[str] = set()
        self.pre_hooks: dict[int, Callable[..., Any]] = {}
        self.hooks: dict[int, Callable[..., Any]] = {}
        # the ids of the hooks registered with_kwargs=True (pre-hooks and hooks) and always_call=True, as torch's
        self.with_kwargs: set[int] = set()
        self.always_call: set[int] = set()
        self.backward_pre_hooks: dict[int, Callable[..., Any]] = {}
        self.backward_hooks: dict[int, Callable[..., Any]] = {}
        # which kind `backward_hooks` holds, as torch's `_is_full_backward_hook`: None until a hook is registered,
        # True for register_full_backward_hook's, False for the deprecated register_backward_hook's (never both)
        self.full_backward: bool | None = None
        # the hooks of state_dict and load_state_dict (nn/state_hooks.py), made at the first registration
        self.state_hooks: _StateDictHooks | None = None
        # the kind ("parameter", "module") of each such slot set to None, which keeps its place (Module._reorder)
        self.none_kinds: dict[str, str] | None = None


_MIXED_BACKWARD_HOOKS = (
    "this module already has backward hooks of the other kind: register_backward_hook and "
    "register_full_backward_hook don't mix on one module; use one of them (the full one)"
)


_MIXED_GLOBAL_BACKWARD_HOOKS = (
    "global module backward hooks of the other kind are already registered: register_module_backward_hook and "
    "register_module_full_backward_hook don't mix; use one of them (the full one)"
)


# the hooks of every module's call (torch.nn.modules.module's register_module_forward_pre_hook and
# register_module_forward_hook): they run before each module's own, as torch's
_GLOBAL = _ModuleState()
# what a module without a state of its own (a built-in layer never hooked nor given a mode: in training mode) runs
# with under them, or when the global flag differs from its mode
_NO_STATE = _ModuleState()


def register_module_forward_pre_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """hook(module, args) before every module's forward (and before the module's own pre-hooks); a non-None return
    replaces args. As torch's `torch.nn.modules.module.register_module_forward_pre_hook`."""
    return _add_hook(_GLOBAL.pre_hooks, hook)


def register_module_forward_hook(
    hook: Callable[..., Any], *, with_kwargs: bool = False, always_call: bool = False
) -> RemovableHandle:
    """hook(module, args, output) after every module's forward (and before the module's own hooks); a non-None
    return replaces the output. with_kwargs and always_call as `Module.register_forward_hook`'s. As torch's
    `torch.nn.modules.module.register_module_forward_hook`."""
    extra = ((_GLOBAL.with_kwargs,) if with_kwargs else ()) + ((_GLOBAL.always_call,) if always_call else ())
    return _add_hook(_GLOBAL.hooks, hook, extra=extra)


def register_module_full_backward_pre_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """hook(module, grad_output) for every module's call when a backward pass reaches its outputs (before the
    module's own pre-hooks); a non-None return replaces grad_output. As torch's
    `torch.nn.modules.module.register_module_full_backward_pre_hook`; see `Module.register_full_backward_pre_hook`."""
    return _add_hook(_GLOBAL.backward_pre_hooks, hook)


def register_module_full_backward_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """hook(module, grad_input, grad_output) for every module's call when a backward pass has the gradients of its
    inputs (before the module's own hooks); a non-None return replaces grad_input. As torch's
    `torch.nn.modules.module.register_module_full_backward_hook`; see `Module.register_full_backward_hook`."""
    if _GLOBAL.full_backward is False:
        raise RuntimeError(_MIXED_GLOBAL_BACKWARD_HOOKS)
    _GLOBAL.full_backward = True
    return _add_hook(_GLOBAL.backward_hooks, hook)


def register_module_backward_hook(hook: Callable[..., Any]) -> RemovableHandle:
    """torch's deprecated global backward hook (`Module.register_backward_hook`'s kind, for every module's call);
    it can't be registered beside the full one, as torch's."""
    if _GLOBAL.full_backward is True:
        raise RuntimeError(_MIXED_GLOBAL_BACKWARD_HOOKS)
    _GLOBAL.full_backward = False
    return _add_hook(_GLOBAL.backward_hooks, hook)


def _backward_calls(module: Module, st: _ModuleState) -> list[ModuleBackwardCall]:
    """The backward hooks of one call (the global ones first, as torch's), as the calls that wrap its inputs and
    outputs: one for the full hooks and pre-hooks, one for the deprecated kind's, where there are such."""
    full: list[Callable[..., Any]] = []
    deprecated: list[Callable[..., Any]] = []
    for owner in (_GLOBAL, st):
        (deprecated if owner.full_backward is False else full).extend(owner.backward_hooks.values())
    pre_hooks = [*_GLOBAL.backward_pre_hooks.values(), *st.backward_pre_hooks.values()]
    # (the hooks as they are at this call run in its backward, as torch's)
    calls = [ModuleBackwardCall(module, full, pre_hooks, True)] if full or pre_hooks else []
    if deprecated:
        calls.append(ModuleBackwardCall(module, deprecated, [], False))
    return calls


def _run(module: Module, forward: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """One call of a module: its pre-hooks, `forward` under the module's training mode, its hooks. A `forward` set on
    the instance (`m.forward = fn`, how patching code wraps a layer) is the one called, as torch's."""
    own = module.__dict__.get("forward")
    if own is not None:
        forward = _unbound(own)
    st: _ModuleState | None = module.__dict__.get("_module_state")
    if st is None:
        # (no state: a layer in training mode, its default; one that computes the same in either mode runs as it is)
        hooked = _GLOBAL.pre_hooks or _GLOBAL.hooks or _GLOBAL.backward_hooks or _GLOBAL.backward_pre_hooks
        if (Tensor.training or forward in _MODE_FREE_FORWARDS) and not hooked:
            return forward(module, *args, **kwargs)
        st = _NO_STATE
    calling = _calling.__dict__.setdefault("modules", [])
    calling.append(module)
    try:
        return _run_hooked(module, st, forward, args, kwargs)
    finally:
        calling.pop()


# the forwards of built-in layers that read no training mode (filled by nn.activations): a lone one runs without
# Tensor.training set for the call (a class attribute write: every tensor op's method cache lost, ~15 us a call)
_MODE_FREE_FORWARDS: set[Callable[..., Any]] = set()


# the modules being called on this thread, innermost last: a built-in layer's call that reaches its parent's
# (BatchNorm1d's checks, then BatchNorm's) or itself again (an unbatched input made a batch of one) is one call, hooked
# once
_calling = threading.local()


def _in_own_call(module: Module) -> bool:
    calling = _calling.__dict__.get("modules")
    return bool(calling) and calling[-1] is module


def _run_hooked(module: Module, st: _ModuleState, forward: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    if not (st.always_call or _GLOBAL.always_call):
        return _run_hooks_and_forward(module, st, forward, args, kwargs, set())
    called: set[int] = set()
    try:
        return _run_hooks_and_forward(module, st, forward, args, kwargs, called)
    except Exception:
        # the always_call hooks not run yet, with None as the output, as torch's; an error they raise is only warned
        # about (the forward's is the one raised)
        for owner, hook_id, hook in _hooks_of(st, "hooks"):
            if hook_id in owner.always_call and hook_id not in called:
                try:
                    hook(module, args, kwargs, None) if hook_id in owner.with_kwargs else hook(module, args, None)
                except Exception as e:
                    warnings.warn(
                        f"an always_call forward hook failed while forward's own error was on its way out; the forward "
                        f"error is raised, the hook's was: {e}",
                        stacklevel=2,
                    )
        raise


def _hooks_of(st: _ModuleState, kind: str) -> list[tuple[_ModuleState, int, Callable[..., Any]]]:
    # the global hooks of that kind, then the module's, each with the state holding its options
    return [(owner, i, hook) for owner in (_GLOBAL, st) for i, hook in list(getattr(owner, kind).items())]


def _run_hooks_and_forward(
    module: Module, st: _ModuleState, forward: Callable[..., Any], args: tuple, kwargs: dict, called: set[int]
) -> Any:
    for owner, hook_id, hook in _hooks_of(st, "pre_hooks"):
        if hook_id in owner.with_kwargs:
            changed = new_args_and_kwargs(hook(module, args, kwargs), "a forward pre-hook registered with_kwargs=True")
            if changed is not None:
                args, kwargs = changed
        else:
            changed = hook(module, args)
            if changed is not None:
                args = changed if isinstance(changed, tuple) else (changed,)
    backward_calls = []
    if st.backward_hooks or st.backward_pre_hooks or _GLOBAL.backward_hooks or _GLOBAL.backward_pre_hooks:
        backward_calls = _backward_calls(module, st)
        for call in backward_calls:
            args = call.inputs(args)
    mode = st.training
    if mode == Tensor.training:
        out = forward(module, *args, **kwargs)
    else:
        previous, Tensor.training = Tensor.training, mode
        try:
            out = forward(module, *args, **kwargs)
        finally:
            Tensor.training = previous
    for call in reversed(backward_calls):
        call.after_forward()
    for owner, hook_id, hook in _hooks_of(st, "hooks"):
        if hook_id in owner.always_call:
            called.add(hook_id)
        changed = hook(module, args, kwargs, out) if hook_id in owner.with_kwargs else hook(module, args, out)
        if changed is not None:
            out = changed
    for call in reversed(backward_calls):
        out = call.outputs(out)
    return out


def _unbound(fn: Callable[..., Any]) -> Callable[..., Any]:
    # an instance's own forward takes no module argument
    return lambda _module, *args, **kwargs: fn(*args, **kwargs)


class Module(StateHooks, ModuleDicts):
    """The base of every layer (torch.nn.Module): subclass it, set layers and parameters as attributes in `__init__`,
    compute in `forward`; call the module to run it. See the module docstring for what counts as a parameter, a buffer
    and a sub-module, and for the training mode."""

    def __init__(self) -> None:
        # (the built-in layers don't call this: a layer without a state is in training mode, as one with a new state)
        self._state()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # a layer written with `__call__` (tinygrad's way, the built-in layers): that is its forward; the call is
        # wrapped to apply the module's hooks and training mode, as Module.__call__ does for `forward`
        call = cls.__dict__.get("__call__")
        if call is None and "forward" in cls.__dict__ and cls.__call__ is not Module.__call__:
            # a subclass of such a layer that overrides forward (a masked convolution, torch's way): calling it runs
            # that forward, as torch's; the layer's own call is its `forward`, for `super().forward(x)`
            cls.__call__ = Module.__call__  # type: ignore[method-assign]
        if call is not None and not getattr(call, "_runs_module", False):
            if "forward" not in cls.__dict__:
                cls.forward = call  # type: ignore[method-assign]

            @functools.wraps(call)
            def run(self: Module, *args: Any, **kwargs: Any) -> Any:
                if _in_own_call(self):
                    return call(self, *args, **kwargs)
                return _run(self, call, args, kwargs)

            run._runs_module = True  # type: ignore[attr-defined]
            cls.__call__ = run  # type: ignore[method-assign]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _run(self, type(self).forward, args, kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}: a Module subclass must define forward(...)")

    def __setattr__(self, name: str, value: Any) -> None:
        st = self.__dict__.get("_module_state")
        if isinstance(value, (Parameter, Module)):
            if isinstance(value, Module) and self._kind_of_held(name, st) == "parameter":
                raise TypeError(
                    f"{type(self).__name__}: cannot assign module {type(value).__name__} as parameter {name!r} (a "
                    "Parameter or None expected): `del` the parameter first"
                )
            if st is not None and name in st.buffers:
                # a parameter or a module takes the name over from a buffer, as torch's
                st.buffers.discard(name)
                st.non_persistent.discard(name)
        elif value is not None:
            self._check_replacement(name, value, st)
        if _buffer_registration_hooks or _module_registration_hooks or _parameter_registration_hooks:
            kind = self._registered_kind(name, value)
            if kind is not None:
                value = run_registration_hooks(kind, self, name, value)
        if name in self.__dict__ and (value is None or isinstance(value, (Tensor, Module))):
            self._reorder(name, value, st)
        elif value is None and st is not None and name not in st.buffers:
            # a new plain attribute set to None in a module made by Module.__init__ (torch-style code): no slot of
            # state, so register_buffer & co. refuse the name, as torch's (the built-in layers' `self.bias = None`
            # made without the state stays free for any kind)
            self._none_slot(name, "attribute")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        object.__delattr__(self, name)
        st = self.__dict__.get("_module_state")
        if st is not None:
            if st.none_kinds is not None:
                st.none_kinds.pop(name, None)
            # a buffer deleted is no longer one: a tensor set under its name later is a plain attribute, as torch's
            st.buffers.discard(name)
            st.non_persistent.discard(name)

    def _state_kind(self, name: str, value: Any, st: _ModuleState | None) -> str | None:
        """The kind of state `value` is under `name`: "parameter", "buffer", "module", or None (a plain attribute;
        None itself is of the kind its slot was, as torch's `self.bias = None` keeps a parameter's slot)."""
        if isinstance(value, Module):
            return "module"
        if value is None:
            if st is None:
                return None
            return "buffer" if name in st.buffers else None if st.none_kinds is None else st.none_kinds.get(name)
        if not isinstance(value, Tensor):
            return None
        if st is not None and name in st.buffers:
            return "buffer"
        if _is_parameter(value):
            return "parameter"
        return "buffer" if _is_state_tensor(value) else None

    def _kind_of_held(self, name: str, st: _ModuleState | None) -> str | None:
        """The kind of state `name` holds now: "parameter", "buffer", "module", "attribute" (a plain None set by
        torch-style code), or None (unset, a plain value, or a None of no known kind)."""
        if name not in self.__dict__:
            return None
        return self._state_kind(name, self.__dict__[name], st)

    def _reorder(self, name: str, value: Any, st: _ModuleState | None) -> None:
        """Before held `name` is set to `value` (a tensor, module or None): torch keeps each kind of state in a dict
        of its own, so a value that becomes state of a kind the name didn't hold (a Parameter where `__init__` left
        `self.prefix = None`) goes last among its kind (parameters(), state_dict() and optimizer order, as torch's);
        a slot of state set to None keeps its kind."""
        old = self._state_kind(name, self.__dict__[name], st)
        if value is None:
            if old is not None:
                self._none_slot(name, old)
            return
        new = self._state_kind(name, value, st)
        if new is not None and new != old:
            del self.__dict__[name]
            if st is not None and st.none_kinds is not None:
                st.none_kinds.pop(name, None)

    def _registered_kind(self, name: str, value: Any) -> str | None:
        """What setting `name` to `value` registers, for the global registration hooks: "parameter", "buffer",
        "module" (None where a sub-module was, as torch's), or None for a plain attribute or a parameter set to None."""
        st, old = self.__dict__.get("_module_state"), self.__dict__.get(name)
        if isinstance(value, Module) or (value is None and isinstance(old, Module)):
            return "module"
        if isinstance(value, Tensor) and _is_parameter(value):
            return "parameter"
        if (st is not None and name in st.buffers) or (isinstance(value, Tensor) and _is_state_tensor(value)):
            return "buffer"
        return None

    def _check_replacement(self, name: str, value: Any, st: _ModuleState | None) -> None:
        """torch's rules for a value (not a Parameter, a Module or None) set under the name of a parameter, a buffer
        or a sub-module: a parameter takes a parameter (uopkit's: any tensor that requires grad, and a plain tensor,
        which becomes one), a buffer a tensor
        (which stays a buffer), a sub-module a module (or, as uopkit's layers, a function); else TypeError.
        Any other attribute takes anything, so tinygrad-style code setting tensors as attributes works as before."""
        old = self.__dict__.get(name)
        layer = type(self).__name__
        if (st is not None and name in st.buffers) or (
            isinstance(old, Tensor) and _is_state_tensor(old) and not _is_parameter(old)
        ):
            if not isinstance(value, Tensor):
                raise TypeError(
                    f"{layer}: cannot assign {_described(value)} as buffer {name!r} (a Tensor or None expected)"
                )
            # (a buffer marked only by requires_grad=False, as the built-in layers keep their running statistics,
            # is registered now, so a plain tensor set in its place is a buffer too, as torch's)
            (st if st is not None else self._state()).buffers.add(name)
        elif isinstance(old, Tensor) and _is_parameter(old):
            if value.__class__ is not Parameter and isinstance(value, Tensor) and value._requires_grad is None:
                # a plain tensor, as tinygrad programs load weights (`layer.weight = Tensor(w)`), takes the parameter's
                # place and is one: it requires grad, as a Parameter made of it would (torch raises TypeError; the
                # parameter used to drop out of parameters() and the state dict silently)
                if dtypes.is_float(value.dtype):
                    value.requires_grad_()
                return
            # (a tensor computed from the parameter, `layer.weight = layer.weight.cast(dtypes.half)` as tinygrad-style
            # code converts a layer, is taken too: it requires grad, though as no leaf it is no longer state)
            if not (isinstance(value, Tensor) and (_is_parameter(value) or value.requires_grad)):
                raise TypeError(
                    f"{layer}: cannot assign {_described(value)} as parameter {name!r} (nn.Parameter, a tensor that "
                    f"requires grad, or None expected: wrap it as nn.Parameter(t), or `del` the parameter first)"
                )
        elif isinstance(old, Module) and (isinstance(value, Tensor) or not callable(value)):
            raise TypeError(
                f"{layer}: cannot assign {_described(value)} as child module {name!r} (a Module, a function of "
                "tensors, or None expected)"
            )

    def _state(self) -> _ModuleState:
        st = self.__dict__.get("_module_state")
        if st is None:
            st = self.__dict__["_module_state"] = _ModuleState()
        return st

    # ------------------------------------------------------------------------------------------------------------
    # training mode

    @property
    def training(self) -> bool:
        """Whether this module is in training mode (torch's flag): True from construction until `eval()`."""
        st = self.__dict__.get("_module_state")
        return True if st is None else st.training

    @training.setter
    def training(self, mode: bool) -> None:
        st = self._state()
        if st.training is not bool(mode):
            st.training = bool(mode)
            Tensor._modes_changed += 1

    def train(self, mode: bool = True) -> Module:
        """Set training mode on this module and every module inside it (torch's train)."""
        if not isinstance(mode, bool):
            raise ValueError(f"{type(self).__name__}.train: mode must be a bool, got {mode!r}")
        for m in self.modules():
            m.training = mode
        return self

    def eval(self) -> Module:
        """train(False): BatchNorm uses its running statistics, dropout passes its input through."""
        return self.train(False)

    # ------------------------------------------------------------------------------------------------------------
    # registration

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Keep `tensor` as state that isn't a parameter (in `state_dict` unless not persistent)."""
        self._check_name(name, "register_buffer", "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"{type(self).__name__}.register_buffer: {name!r} must be a Tensor or None, got {tensor!r}")
        st = self._state()
        st.buffers.add(name)
        (st.non_persistent.add if not persistent else st.non_persistent.discard)(name)
        if tensor is not None and tensor.uop.base.op not in (Ops.BUFFER, Ops.CONST):
            # computed here (a RoPE table, a causal mask): stored now, as torch's, not recomputed by every forward
            # (and a slice of it at a step's position reads a window of storage: one kernel for every position)
            tensor.realize()
        setattr(self, name, tensor)

    def register_parameter(self, name: str, param: Tensor | None) -> None:
        """Keep `param` (a Parameter, or None) as a parameter named `name`."""
        self._check_name(name, "register_parameter", "parameter")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"{type(self).__name__}.register_parameter: {name!r} must be a Parameter or None, got "
                f"{type(param).__name__} (wrap it: nn.Parameter(t))"
            )
        setattr(self, name, param)
        if param is None:
            self._none_slot(name, "parameter")

    def add_module(self, name: str, module: Any) -> None:
        """Add a sub-module named `name` (as `setattr`)."""
        self._check_name(name, "add_module", "module")
        if module is not None and not callable(module):
            raise TypeError(f"{type(self).__name__}.add_module: {name!r} is a {type(module).__name__}, not a module")
        setattr(self, name, module)
        if module is None:
            self._none_slot(name, "module")

    register_module = add_module

    def _none_slot(self, name: str, kind: str) -> None:
        # register_parameter(name, None) / add_module(name, None): the slot is of that kind, as torch's
        st = self._state()
        if st.none_kinds is None:
            st.none_kinds = {}
        st.none_kinds[name] = kind

    def _check_name(self, name: str, method: str, kind: str | None = None) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{type(self).__name__}.{method}: name should be a string, got {type(name).__name__}")
        if not name or "." in name:
            raise KeyError(f"{type(self).__name__}.{method}: name must be a non-empty string without '.', got {name!r}")
        if kind is not None and not self._holds(name, kind):
            raise KeyError(
                f"{type(self).__name__}.{method}: attribute {name!r} already exists (and is no {kind}): `del` it first"
            )

    def _holds(self, name: str, kind: str) -> bool:
        """Whether `name` is free for a `kind` ("parameter", "buffer", "module") to be registered under: unset, None,
        or already of that kind (torch's register_* raise KeyError for any other attribute, a class' too)."""
        if name not in self.__dict__:
            return not hasattr(type(self), name)
        old = self.__dict__[name]
        if old is None:
            held = self._kind_of_held(name, self.__dict__.get("_module_state"))
            return held is None or held == kind
        if kind == "module":
            return isinstance(old, Module) or (callable(old) and not isinstance(old, Tensor))
        if not isinstance(old, Tensor):
            return False
        st = self.__dict__.get("_module_state")
        if st is not None and name in st.buffers:
            return kind == "buffer"
        if _is_parameter(old):
            return kind == "parameter"
        return kind == "buffer" and _is_state_tensor(old)

    # ------------------------------------------------------------------------------------------------------------
    # walking

    def _entries(self) -> Iterator[tuple[str, Any]]:
        return ((k, v) for k, v in vars(self).items() if k != "_module_state")

    def _tensors(
        self, prefix: str, seen: set[int], again: bool = False, every: bool = False, versions: dict | None = None
    ) -> Iterator[tuple[str, str, Tensor]]:
        """(kind, dotted name, tensor) of every state tensor in torch's order: the module's own parameters, its own
        buffers, then each sub-module's (attribute order, depth first). kind: "parameter", "buffer" or
        "non_persistent" (a buffer left out of state_dict). A module reached twice is walked once; `again`: under
        each of its names (torch's remove_duplicate=False), `seen` then holding only the modules being walked.
        `every`: each module's "pre_hooks" mark is yielded, hooks or not (nn/state_hooks.py); `versions` (a state
        dict's `_metadata`): each module's {"version": _version} is put in it by its name, as torch's."""
        if id(self) in seen:
            return
        seen.add(id(self))
        if again:
            yield from self._own_and_inner(prefix, seen, again, every, versions)
            seen.discard(id(self))
            return
        yield from self._own_and_inner(prefix, seen, again, every, versions)

    def _own_and_inner(
        self, prefix: str, seen: set[int], again: bool, every: bool, versions: dict | None
    ) -> Iterator[tuple[str, str, Any]]:
        if versions is not None:
            versions[prefix[:-1]] = {"version": self._version}
        st = self.__dict__.get("_module_state")
        # a module with state-dict hooks or extra state marks its place in the walk (nn/state_hooks.py)
        marked = self._extra_state or (st is not None and st.state_hooks is not None)
        if marked or every:
            yield "pre_hooks", prefix, self
        own: list[tuple[str, str, Tensor]] = []
        inner: list[tuple[str, Any]] = []
        for name, value in self._entries():
            if not isinstance(value, Tensor):
                inner.append((name, value))
            elif st is not None and name in st.buffers:
                own.append(("non_persistent" if name in st.non_persistent else "buffer", prefix + name, value))
            elif _is_parameter(value):
                own.append(("parameter", prefix + name, value))
            elif _is_state_tensor(value):
                own.append(("buffer", prefix + name, value))
        yield from (entry for entry in own if entry[0] == "parameter")
        yield from (entry for entry in own if entry[0] != "parameter")
        if marked:
            yield "extra_state", prefix, self
        for name, value in inner:
            yield from _tensors_in(value, f"{prefix}{name}.", seen, again, every, versions)
        if marked:
            yield "post_hooks", prefix, self

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """(name, parameter) pairs, torch's order (attribute order, depth first). remove_duplicate=False: a tensor
        (a tied weight, a shared sub-module's) under each of its names, as torch's."""
        return self._named("parameter", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        """The parameters (what an optimizer takes): `optim.SGD(model.parameters(), lr=0.1)`."""
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """(name, buffer) pairs, persistent or not."""
        return self._named(("buffer", "non_persistent"), prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        return (b for _, b in self.named_buffers(recurse=recurse))

    def _named(
        self, kinds: str | tuple[str, ...], prefix: str, recurse: bool, remove_duplicate: bool
    ) -> Iterator[tuple[str, Tensor]]:
        prefix = prefix + "." if prefix else ""
        seen: set[int] = set()
        for kind, name, t in self._tensors(prefix, set(), again=not remove_duplicate):
            if kind not in kinds or (not recurse and "." in name[len(prefix) :]):
                continue
            if remove_duplicate:
                if id(t) in seen:
                    continue
                seen.add(id(t))
            yield name, t

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(name, module) of the modules directly inside this one (in lists and dicts too, named "attr.i")."""
        seen: set[int] = set()
        for name, m in _modules_in(self._entries(), ""):
            if id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator[Module]:
        return (m for _, m in self.named_children())

    def named_modules(
        self, memo: set[int] | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """(name, module) of this module ("") and every module inside it, depth first."""
        memo = set() if memo is None else memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, child in _modules_in(self._entries(), ""):
            yield from child.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self) -> Iterator[Module]:
        return (m for _, m in self.named_modules())

    def get_submodule(self, target: str) -> Module:
        """The module at dotted path `target` ("" is this one)."""
        module: Any = self
        for part in target.split(".") if target else []:
            child = _child(module, part)
            if not isinstance(child, Module):
                raise AttributeError(f"{type(self).__name__}.get_submodule: {target!r} has no module at {part!r}")
            module = child
        return module

    def get_parameter(self, target: str) -> Tensor:
        return self._get_tensor(target, dict(self.named_parameters(remove_duplicate=False)), "parameter")

    def get_buffer(self, target: str) -> Tensor:
        return self._get_tensor(target, dict(self.named_buffers(remove_duplicate=False)), "buffer")

    def _get_tensor(self, target: str, known: dict[str, Tensor], kind: str) -> Tensor:
        if target not in known:
            raise AttributeError(f"{type(self).__name__}: no {kind} named {target!r}")
        return known[target]

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call `fn` on every sub-module, then on this one (torch's order: children first)."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------------------------------------------------------
    # state

    def state_dict(self, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> dict[str, Any]:
        """Parameters and persistent buffers by dotted name (torch's keys, so torch's state dicts load here and ours
        there); the values are detached views of the module's tensors (keep_vars=True: the tensors themselves). A
        module's `get_extra_state()` is under "<prefix>_extra_state", and its state-dict hooks run, as torch's. A new
        state dict's `_metadata` holds each module's `{"version": _version}` by its name, as torch's (what
        `load_state_dict` passes on as `local_metadata`)."""
        if destination is None:
            out: Any = OrderedDict()
            out._metadata = OrderedDict()
        else:
            out = destination
        metadata = getattr(out, "_metadata", None)
        # a sub-module or tensor held under several names is listed under each (torch's recursion doesn't dedupe, so
        # a TCN's `self.net = Sequential(self.conv1, ...)` has both "conv1.weight" and "net.0.weight")
        # (under the realize lock: a thread saving a checkpoint while another steps an optimizer sees the weights of
        # a whole step, never its writes staged but not yet run)
        with realize_lock:
            for kind, name, t in self._tensors(prefix, set(), again=True, versions=metadata):
                if kind in MARKS:
                    save_mark(kind, name, t, out, keep_vars, metadata)
                elif kind != "non_persistent":
                    # (a lazy layer's uninitialized tensor is listed as itself: it has no values to detach)
                    out[name] = t if keep_vars or getattr(t, "uninitialized", False) else t.detach()
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Write each entry into the tensor of the same name, in place; returns (missing_keys, unexpected_keys).
        strict: a missing or unexpected key raises (RuntimeError, as torch); a shape mismatch always raises.
        assign=True: the state dict's tensors replace the module's instead, as torch's."""
        return load_module_state(self, state_dict, strict, assign)

    def _assign_tensors(self, pairs: dict[str, tuple[Tensor, Tensor]]) -> None:
        # load_state_dict(assign=True): the state dict's tensors take the places of the module's, as torch's (a
        # parameter as a Parameter value itself or one sharing the value's storage, with the requires_grad of the one it
        # replaces; a buffer the value itself), in the value's dtype and device; tied tensors are no longer shared
        for name, (target, value) in pairs.items():
            new = value if isinstance(value, Parameter) or not _is_parameter(target) else Parameter(value)
            if _is_parameter(target):
                new.requires_grad_(target.requires_grad)
            path, _, attr = name.rpartition(".")
            owner: Any = self
            for part in path.split(".") if path else []:
                owner = _child(owner, part)
            if isinstance(owner, (list, dict)):
                owner[int(attr) if isinstance(owner, list) else attr] = new
            else:
                setattr(owner, attr, new)

    def _fill_old_state(self, state_dict: dict[str, Any], prefix: str, local_metadata: dict[str, Any]) -> None:
        """Add to `state_dict` (a copy) the entries of this layer (named `prefix`...) that a checkpoint of an older
        version of it lacks (a layer's own; `local_metadata`: torch's for this layer, its "version")."""

    def _state_tensors(self) -> dict[str, Tensor]:
        # what `nn.state.get_state_dict` lists for a module (duck-typed there, so that state.py needn't import this):
        # its persistent tensors, as state_dict(keep_vars=True) has them, without running state-dict hooks
        with realize_lock:
            return {
                name: t for kind, name, t in self._tensors("", set(), again=True) if kind in ("parameter", "buffer")
            }

    # ------------------------------------------------------------------------------------------------------------
    # gradients, devices and dtypes

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient (set_to_none=False: zero each `.grad` in place, the same tensor object, as
        torch's)."""
        from uopkit.nn.optimizer import zero_grad_in_place

        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                zero_grad_in_place(p.grad)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """Move every parameter and buffer to a device and/or cast the floating ones to a dtype, in place, as torch's
        `module.to(device)`, `to(dtype)`, `to(device, dtype)`, `to(tensor)`: each stays the same tensor object, its
        storage (and its `.grad`'s) replaced, so an optimizer built before keeps training them (torch swaps `.data`).
        `to("meta")` moves nothing: there is no meta device (docs/semantics.md).

        >>> from uopkit.nn import Linear
        >>> layer = Linear(2, 1)
        >>> w = layer.weight
        >>> layer.double().weight is w, w.dtype.name
        (True, 'double')
        """
        device, dtype = _to_arguments(type(self).__name__, args, kwargs)
        # (a tensor held by several modules, a tied weight, is converted once)
        tensors = {id(t): t for kind, _, t in self._tensors("", set()) if kind not in MARKS}
        for t in tensors.values():
            _convert_in_place(t, device, dtype if dtypes.is_float(t.dtype) else None)
        return self

    def to_empty(self, *, device: Any, recurse: bool = True) -> Module:
        """Every parameter and buffer (this module's own only, without `recurse`) moved to `device` without its values,
        in place (the same tensor objects, their shapes, dtypes and requires_grad kept; the values are whatever the new
        memory holds), as torch's; initialize them next (`reset_parameters`, or `load_state_dict`).

        >>> from uopkit.nn import Linear
        >>> layer = Linear(2, 3)
        >>> layer.to_empty(device="CPU").weight.shape
        (3, 2)
        """
        device = _canonical_device(device)
        # (a tensor held by several modules, a tied weight, is moved once)
        own = [*self.parameters(recurse=recurse), *self.buffers(recurse=recurse)]
        tensors = {id(t): t for t in own}
        for t in tensors.values():
            t._hold_in_place(Tensor.empty(*t.shape, device=device, dtype=t.dtype))
        return self

    def share_memory(self) -> Module:
        """Move every parameter and buffer (and their `.grad`s) to shared memory (`Tensor.share_memory_`), in place, as
        torch's: processes started after this (fork or spawn) and those the module is sent to train the same weights
        (Hogwild). Returns the module.

        >>> from uopkit.nn import Linear
        >>> Linear(2, 1).share_memory().weight.is_shared()
        True
        """
        # (a tensor held by several modules, a tied weight, is shared once)
        tensors = {id(t): t for kind, _, t in self._tensors("", set()) if kind not in MARKS}
        for t in tensors.values():
            t.share_memory_()
            if t.grad is not None:
                t.grad.share_memory_()
        return self

    def cpu(self) -> Module:
        return self.to("CPU")

    def cuda(self, device: int | None = None) -> Module:
        return self.to("CUDA" if device is None else f"CUDA:{device}")

    def float(self) -> Module:
        return self.to(dtypes.float32)

    def double(self) -> Module:
        return self.to(dtypes.float64)

    def half(self) -> Module:
        return self.to(dtypes.float16)

    def bfloat16(self) -> Module:
        return self.to(dtypes.bfloat16)

    def type(self, dst_type: DType | str) -> Module:
        return self.to(to_dtype(dst_type))

    # ------------------------------------------------------------------------------------------------------------
    # hooks and printing

    def register_forward_pre_hook(
        self, hook: Callable[..., Any], *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """hook(module, args) before each forward; a non-None return replaces the arguments (a non-tuple: the one
        argument). with_kwargs=True: hook(module, args, kwargs), returning None or (new_args, new_kwargs).
        prepend=True: runs before the hooks registered so far. As torch's."""
        st = self._state()
        return _add_hook(st.pre_hooks, hook, prepend, (st.with_kwargs,) if with_kwargs else ())

    def register_forward_hook(
        self, hook: Callable[..., Any], *, prepend: bool = False, with_kwargs: bool = False, always_call: bool = False
    ) -> RemovableHandle:
        """hook(module, args, output) after each forward; a non-None return replaces the output. with_kwargs=True:
        hook(module, args, kwargs, output); prepend=True: runs before the hooks registered so far; always_call=True:
        runs (with output None) when the forward or a hook before it raises too. As torch's."""
        st = self._state()
        extra = ((st.with_kwargs,) if with_kwargs else ()) + ((st.always_call,) if always_call else ())
        return _add_hook(st.hooks, hook, prepend, extra)

    def register_full_backward_pre_hook(self, hook: Callable[..., Any], prepend: bool = False) -> RemovableHandle:
        """hook(module, grad_output) when a backward pass reaches the module's outputs (grad_output: one entry per
        output, None for a non-tensor or one without a gradient); a non-None return, a tuple as long, replaces
        grad_output. prepend=True: runs before the pre-hooks registered so far. As torch's; the forward reads its
        tensor inputs through a copy, and an in-place write into an input or output is an error, as torch's.

        >>> from uopkit.nn import Linear
        >>> layer = Linear(2, 1)
        >>> _ = layer.register_full_backward_pre_hook(lambda m, grad_output: (grad_output[0] * 10,))
        >>> x = Tensor.ones(1, 2, requires_grad=True)
        >>> _ = layer(x).sum().backward(); layer.weight.grad.tolist()
        [[10.0, 10.0]]
        """
        return _add_hook(self._state().backward_pre_hooks, hook, prepend)

    def register_full_backward_hook(self, hook: Callable[..., Any], prepend: bool = False) -> RemovableHandle:
        """hook(module, grad_input, grad_output) when a backward pass has the gradients of the module's positional
        inputs (grad_input: one entry per positional argument, None for a non-tensor; grad_output as the pre-hook's);
        a non-None return, a tuple as long, replaces grad_input. Where no input needs a gradient the hook runs when
        the outputs' gradients are there, with grad_input all None (with torch's warning), and must return None.
        prepend=True: runs before the hooks registered so far. As torch's (Grad-CAM keeps grad_output[0]).

        >>> from uopkit.nn import Linear
        >>> layer, seen = Linear(2, 1), []
        >>> _ = layer.register_full_backward_hook(lambda m, grad_input, grad_output: seen.append(grad_input[0].shape))
        >>> _ = layer(Tensor.ones(3, 2, requires_grad=True)).sum().backward(); seen
        [(3, 2)]
        """
        st = self._state()
        if st.full_backward is False:
            raise RuntimeError(_MIXED_BACKWARD_HOOKS)
        st.full_backward = True
        return _add_hook(st.backward_hooks, hook, prepend)

    def register_backward_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """torch's deprecated backward hook, hook(module, grad_input, grad_output), which torch 2.13 still keeps apart
        from the full hook. torch hooks it on the autograd node of the module's last op, so its grad_input are that
        op's input gradients; uopkit has no such per-op nodes and gives the module's input gradients, what torch gives
        where the forward is one op of its inputs (ReLU, a pooling). Unlike the full hook, forward may write its
        inputs in place (the caller's tensor gets the write). torch's FutureWarnings for outputs or inputs that are not
        tensors are given too. A module can't have both kinds (torch's error)."""
        st = self._state()
        if st.full_backward is True:
            raise RuntimeError(_MIXED_BACKWARD_HOOKS)
        st.full_backward = False
        return _add_hook(st.backward_hooks, hook)

    def extra_repr(self) -> str:
        """The part of repr() between the parentheses (torch's): a built-in layer's settings as torch's twin shows
        them; nothing for a module of one's own (override this to show some, one or several lines)."""
        return reprs.extra_repr_of(self, Module)

    def __repr__(self) -> str:
        """The layer's name, its extra_repr and its sub-modules one per line, indented, as torch's (see nn/reprs.py)."""
        return reprs.module_repr(self)


def _tensors_in(
    value: Any, prefix: str, seen: set[int], again: bool = False, every: bool = False, versions: dict | None = None
) -> Iterator[tuple[str, str, Tensor]]:
    """The state tensors inside an attribute that isn't a Tensor: a module's own, a list's or dict's entries, a plain
    (tinygrad-style) object's every tensor (as `get_state_dict` finds them, all counted as parameters when they
    require a gradient, else buffers)."""
    if isinstance(value, Module):
        yield from value._tensors(prefix, seen, again, every, versions)
        return
    if isinstance(value, (list, tuple)):
        items: Iterable[tuple[Any, Any]] = enumerate(value)
    elif isinstance(value, dict):
        items = value.items()
    elif hasattr(value, "__dict__") and not isinstance(value, type) and not callable(getattr(value, "__func__", None)):
        # (a distribution held as a prior or a flow's base is no state in torch: its tensors aren't walked)
        if id(value) in seen or isinstance(value, (functools.partial, Distribution)):
            return
        seen.add(id(value))
        for name, t in state.get_state_dict(value, prefix).items():
            yield ("parameter" if _is_parameter(t) else "buffer"), name, t
        if again:
            seen.discard(id(value))
        return
    else:
        return
    for k, v in items:
        if isinstance(v, Tensor):
            if _is_state_tensor(v):
                yield ("parameter" if _is_parameter(v) else "buffer"), f"{prefix}{k}", v
        else:
            yield from _tensors_in(v, f"{prefix}{k}.", seen, again, every, versions)


def _convert_in_place(t: Tensor, device: str | None, dtype: DType | None) -> None:
    """`t` (and its `.grad`) moved to `device` and/or cast to `dtype` in place: the same object, its values now in a
    buffer of their own there (torch's `module._apply`: `param.data = fn(param)`, the same for its grad)."""
    if device is not None:
        t.to_(device)
    for x in (t, t.grad):
        if x is not None and dtype is not None and x.dtype != dtype:
            x._hold_in_place(x.detach().cast(dtype))


def _modules_in(items: Iterable[tuple[Any, Any]], prefix: str) -> Iterator[tuple[str, Module]]:
    for k, v in items:
        if isinstance(v, Module):
            yield f"{prefix}{k}", v
        elif isinstance(v, (list, tuple)):
            yield from _modules_in(enumerate(v), f"{prefix}{k}.")
        elif isinstance(v, dict):
            yield from _modules_in(v.items(), f"{prefix}{k}.")


class _Container(Module):
    """A module holding its entries as attributes named "0", "1", ... or by key (so state dict keys are torch's)."""

    def __init__(self) -> None:
        super().__init__()

    def _values(self) -> list[Any]:
        return [v for _, v in self._entries()]

    def __len__(self) -> int:
        return sum(1 for _ in self._entries())

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values())

    def _renumber(self, values: list[Any]) -> None:
        for k, _ in list(self._entries()):
            delattr(self, k)
        for i, v in enumerate(values):
            setattr(self, str(i), v)

    def _index(self, idx: int) -> int:
        n = len(self)
        if not isinstance(idx, int) or not -n <= idx < n:
            raise IndexError(f"{type(self).__name__}: index {idx!r} is out of range for {n} entries")
        return idx % n


class ModuleList(_Container):
    """A list of modules whose parameters the owner finds (torch.nn.ModuleList): append, extend, insert, index,
    slice (a ModuleList), len, iteration; it has no forward."""

    def __init__(self, modules: Iterable[Any] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _check(self, module: Any) -> Any:
        if not isinstance(module, Module):
            raise TypeError(f"{type(self).__name__}: entries must be Modules, got {type(module).__name__}")
        return module

    def append(self, module: Any) -> ModuleList:
        setattr(self, str(len(self)), self._check(module))
        return self

    def extend(self, modules: Iterable[Any]) -> ModuleList:
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Any) -> None:
        values = self._values()
        values.insert(index, self._check(module))
        self._renumber(values)

    def pop(self, idx: int | slice) -> Any:
        """Remove the entry (or the ModuleList of entries) at `idx`, renumbering the rest, and return it."""
        value = self[idx]
        del self[idx]
        return value

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return type(self)(self._values()[idx])
        return self._values()[self._index(idx)]

    def __setitem__(self, idx: int, module: Any) -> None:
        setattr(self, str(self._index(idx)), self._check(module))

    def __delitem__(self, idx: int | slice) -> None:
        values = self._values()
        del values[idx if isinstance(idx, slice) else self._index(idx)]
        self._renumber(values)

    def __iadd__(self, modules: Iterable[Any]) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other: Iterable[Any]) -> ModuleList:
        return type(self)([*self, *other])

    def __repr__(self) -> str:
        # (consecutive layers that print alike are one line, torch's `(0-2): 3 x Linear(...)`)
        return reprs.module_list_repr(self)


class ModuleDict(_Container):
    """A dict of modules whose parameters the owner finds (torch.nn.ModuleDict), in insertion order."""

    def __init__(self, modules: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def _check(self, value: Any) -> Any:
        if not isinstance(value, Module):
            raise TypeError(f"{type(self).__name__}: values must be Modules, got {type(value).__name__}")
        return value

    def __getitem__(self, key: str) -> Any:
        if key == "_module_state" or key not in vars(self):
            raise KeyError(key)
        return vars(self)[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._check_name(key, "__setitem__")
        if key == "training" or key.startswith("_"):
            raise KeyError(f"{type(self).__name__}: {key!r} can't be a key (it is an attribute of the container)")
        setattr(self, key, self._check(value))

    def __delitem__(self, key: str) -> None:
        self[key]
        delattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key != "_module_state" and key in vars(self)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def keys(self) -> list[str]:
        return [k for k, _ in self._entries()]

    def values(self) -> list[Any]:
        return self._values()

    def items(self) -> list[tuple[str, Any]]:
        return list(self._entries())

    def pop(self, key: str) -> Any:
        value = self[key]
        del self[key]
        return value

    def clear(self) -> None:
        for k in self.keys():
            delattr(self, k)

    def update(self, modules: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        # (another ModuleDict or ParameterDict, not a Mapping, gives its entries as a dict's: torch's)
        for k, v in modules.items() if isinstance(modules, (Mapping, ModuleDict)) else modules:
            self[k] = v
