"""The optimizer base class, as torch.optim.Optimizer: parameter groups with per-group hyperparameters, per-parameter
state, `state_dict()` / `load_state_dict()` in torch's layout. The update rules are in nn/optim.py (SGD and the Adam
family), nn/optim_more.py (RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, Rprop, ASGD, Adafactor) and
nn/optim_matrix.py (Muon, LARS).

What a TinyJit replay reads: each group's learning rate is a 0-d tensor, so `group["lr"] = x` (what an LR scheduler
does) writes that tensor and the next step, jitted or not, uses it without recompiling. The hyperparameters in an
optimizer's `dynamic` list (SGD's and RMSprop's "momentum", the Adam family's "betas": what OneCycleLR and CyclicLR
cycle) become 0-d tensors too the first time a group's value changes; every other hyperparameter is a constant of the
kernels built at each step (a change recompiles them, and doesn't reach the replays of an earlier TinyJit capture).

>>> from uopkit import Tensor
>>> from uopkit.nn.optim import SGD
>>> w, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([1.0], requires_grad=True)
>>> opt = SGD([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.1)
>>> (w.sum() + b.sum()).backward()
>>> opt.param_groups[0]["lr"] = 0.25
>>> opt.step()
>>> w.tolist(), b.tolist()
([0.75, 1.75], [0.5])
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from uopkit.device import Device
from uopkit.dtype import DType, dtypes, to_numpy_dtype
from uopkit.engine.realize import realize_lock
from uopkit.nn.hooks import RemovableHandle, _add_hook, new_args_and_kwargs
from uopkit.schedule import live_tensors
from uopkit.tensor import Tensor

__all__ = ["Optimizer", "ParamGroup", "required"]


def _state_like(t: Tensor, value: float = 0.0, shape: tuple[int, ...] | None = None) -> Tensor:
    # a fresh buffer per state tensor (lazy constants are hash-consed and could share storage once realized), of t's
    # shape (or `shape`: Adafactor's factored moments), dtype and device; a bfloat16 parameter's state is bfloat16, as
    # PyTorch's (numpy has no bfloat16: made from float32)
    shape = t.shape if shape is None else shape
    if t.dtype == dtypes.bfloat16:
        arr = np.full(shape, value, dtype=np.float32)
        return Tensor(arr, device=t.device).reshape(shape).cast(dtypes.bfloat16).realize().requires_grad_(False)
    arr = np.full(shape, value, dtype=to_numpy_dtype(t.dtype))
    return Tensor(arr, device=t.device).reshape(shape).requires_grad_(False)


def _scalar(value: float, device: str, dtype: DType) -> Tensor:
    # hyperparameters that change between steps live in a buffer, so changing them never recompiles a kernel
    return Tensor(np.array([value], dtype=to_numpy_dtype(dtype)), device=device).reshape(()).requires_grad_(False)


def _write(t: Tensor, value: float) -> None:
    # a new value into a 0-d hyperparameter's buffer (the buffer stays: a TinyJit replay reads it)
    t.assign(Tensor(float(value), device=t.device, dtype=t.dtype)).realize()


def _number(value: Any) -> float:
    # a Python number, a 0-d (or one-element) numpy array, torch tensor or uopkit Tensor as a float
    if isinstance(value, Tensor):
        return float(value.item())
    return float(np.asarray(value).reshape(()))


class _Required:
    """The default of a hyperparameter every param group must give (torch.optim.optimizer.required): a custom
    optimizer's `defaults = dict(lr=required)` makes a group without "lr" a ValueError."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()


def _dedup(ts: list[Tensor]) -> list[Tensor]:
    seen: set[int] = set()
    return [t for t in ts if not (id(t) in seen or seen.add(id(t)))]  # type: ignore[func-returns-value]


class _ParamState(dict):
    """`optimizer.state[p]`: a dict, whose entries set by the program (`opt.state[p]["exp_avg"] = t`) the next step
    takes into the update rule's state, as torch's step reads its state from this dict."""

    def __init__(self, table: _StateTable, p: Tensor, *args: Any) -> None:
        super().__init__(*args)
        self._table, self._key = table, p

    def __setitem__(self, name: str, value: Any) -> None:
        super().__setitem__(name, value)
        self._table.written(self._key, {name: value})

    def __reduce__(self) -> tuple:
        # (a copy or a pickle is a plain dict: the optimizer's __setstate__ makes its table again)
        return (dict, (dict(self),))


class _StateTable(defaultdict):
    """`optimizer.state`, a defaultdict(dict) by parameter as torch's. What the program writes into it (a parameter's
    whole dict set, `del`/`pop` of one, an entry set) is noted in `pending` for the optimizer to take before its next
    step or read: the update rules keep their tensors apart (`Optimizer._slots`), so a write must reach them, as
    torch's state is what its step reads (model surgery that moves a pruned parameter's momentum to its replacement,
    or a state reset with `del opt.state[p]`). `track=False` (an optimizer with a step of its own, whose state is
    this table alone) notes nothing."""

    def __init__(self, items: Any = (), track: bool = True) -> None:
        super().__init__(dict)
        self.track = track
        # by id(parameter): (parameter, whether its state was dropped first, the entries written since)
        self.pending: dict[int, tuple[Tensor, bool, dict[str, Any]]] = {}
        for p, d in dict(items).items():
            dict.__setitem__(self, p, _ParamState(self, p, d))

    def __missing__(self, p: Tensor) -> _ParamState:
        out = _ParamState(self, p)
        dict.__setitem__(self, p, out)
        return out

    def __setitem__(self, p: Tensor, value: dict[str, Any]) -> None:
        dict.__setitem__(self, p, _ParamState(self, p, value))
        if self.track:
            self.pending[id(p)] = (p, True, dict(value))

    def __delitem__(self, p: Tensor) -> None:
        dict.__delitem__(self, p)
        if self.track:
            self.pending[id(p)] = (p, True, {})

    def pop(self, p: Tensor, *default: Any) -> Any:
        """Remove `p`'s state and return its dict; the next step starts `p`'s state afresh, as torch's."""
        if self.track and p in self:
            self.pending[id(p)] = (p, True, {})
        return super().pop(p, *default)

    def written(self, p: Tensor, entries: dict[str, Any]) -> None:
        """Note entries written into `p`'s dict for the optimizer to take."""
        if self.track:
            _, reset, before = self.pending.get(id(p), (p, False, {}))
            self.pending[id(p)] = (p, reset, before | entries)

    def __reduce__(self) -> tuple:
        return (_StateTable, ({p: dict(d) for p, d in self.items()}, self.track))


class ParamGroup(dict):
    """One entry of `optimizer.param_groups`: a dict of "params" and the hyperparameters, as torch's. Setting "lr" (or
    a dynamic hyperparameter, see the module's docstring) writes the 0-d tensor the step reads, on every device the
    group's parameters step on."""

    def __init__(self, owner: Optimizer, values: dict[str, Any]) -> None:
        super().__init__(values)
        # the optimizer's class (its `dynamic` names and its name in errors): a class, not the optimizer, so that a
        # deep copy or a pickle of the group belongs to no one else
        self._kind = type(owner)
        # the 0-d tensors the step reads, on `device`: "lr" always, a dynamic hyperparameter once changed (a tuple's:
        # one per item)
        self.tensors: dict[str, list[Tensor]] = {}
        # their copies on the other devices of the group's parameters (a model split over devices), by device: made at
        # the first step that reads one there, and written with every change
        self._copies: dict[str, dict[str, list[Tensor]]] = {}
        # the names whose tensors the user gave (`opt.lr = tensor`): read where they are, at every step
        self._given: set[str] = set()
        params = self["params"]
        grad_params = [p for p in params if p._requires_grad]
        self.device: str = (grad_params or params)[0].device if params else Device.DEFAULT
        self._set_dtypes()
        self.tensors["lr"] = [_scalar(_number(self["lr"]), self.device, self.hyper_dtype)]

    def _set_dtypes(self) -> None:
        # float32, or float64 where a parameter is: its update then uses the numbers as given, as PyTorch's Python
        # floats (0.1 in float32 is 0.1000000015)
        self.hyper_dtype = dtypes.float64 if any(p.dtype == dtypes.float64 for p in self["params"]) else dtypes.float32
        # float64 where the device has it (the step count, the betas' powers, dynamic hyperparameters), as PyTorch's
        # Python floats: float32(0.999)'s powers were off by 1.3e-5 relative in 1 - b2^t
        self.wide_dtype = self.wide_dtype_on(self.device)

    def wide_dtype_on(self, device: str) -> DType:
        """The dtype of the clocks and dynamic hyperparameters on `device`: float64 where it has it."""
        return dtypes.float64 if _has_float64(device) else self.hyper_dtype

    def __reduce__(self) -> tuple:
        # (a dict subclass is pickled as its items set one by one through __setitem__, before its attributes are)
        return _restored_group, (dict(self), dict(self.__dict__))

    def __setitem__(self, key: str, value: Any) -> None:
        old = self.get(key)
        super().__setitem__(key, value)
        if key == "params":
            return
        if key == "lr":
            if isinstance(value, Tensor) or not isinstance(value, (int, float)):
                value = _number(value)
                super().__setitem__(key, value)
            if value < 0:
                raise ValueError(f"{self._kind.__name__}: learning rate must be >= 0, got {value}")
            if value != old:
                self._write_all(key, [value])
        elif key in self._kind.dynamic and value != old:
            values = list(value) if isinstance(value, (tuple, list)) else [value]
            if key not in self.tensors:
                self.tensors[key] = [_scalar(_number(v), self.device, self.wide_dtype) for v in values]
            else:
                self._write_all(key, values)

    def _write_all(self, key: str, values: list[Any]) -> None:
        # a new value into the tensors of `key`, on every device that has them
        for ts in [self.tensors.get(key), *(copies.get(key) for copies in self._copies.values())]:
            for t, v in zip(ts or (), values, strict=True):
                _write(t, _number(v))

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def hyper(self, key: str, device: str | None = None) -> Any:
        """The value the step uses on `device` (None: the group's): the 0-d tensor of "lr" or of a dynamic
        hyperparameter (a tuple of them for "betas"), else the number."""
        if (ts := self.tensors.get(key)) is None:
            return self[key]
        if device is not None and ts[0].device != device:
            ts = self._on(key, device)
        return ts[0] if key == "lr" or not isinstance(self[key], (tuple, list)) else tuple(ts)

    def lr_on(self, device: str) -> Tensor:
        """The learning rate's 0-d tensor on `device`."""
        return self.hyper("lr", device)

    def take_lr(self, value: Tensor) -> None:
        """Make the tensor `value` this group's learning rate (`opt.lr = tensor`)."""
        dict.__setitem__(self, "lr", _number(value))
        self.tensors["lr"] = [value]
        self._given.add("lr")
        for copies in self._copies.values():
            copies.pop("lr", None)

    def _on(self, key: str, device: str) -> list[Tensor]:
        main = self.tensors[key]
        if key in self._given:
            # (a tensor the user gave may be written in place: read from where it is at each step)
            return [t.to(device) for t in main]
        copies = self._copies.setdefault(device, {})
        if (ts := copies.get(key)) is None:
            values = self[key] if isinstance(self[key], (tuple, list)) else [self[key]]
            dtype = self.hyper_dtype if key == "lr" else self.wide_dtype_on(device)
            if dtype == dtypes.float64 and not _has_float64(device):
                dtype = dtypes.float32
            ts = copies[key] = [_scalar(_number(v), device, dtype) for v in values]
        return ts

    def _retype(self) -> None:
        # the group's parameters changed dtype (a model converted in place after the optimizer was built): the numbers
        # made again in the dtypes a group of these parameters gets
        hyper = self.hyper_dtype
        self._set_dtypes()
        if self.hyper_dtype != hyper and "lr" not in self._given:
            self.tensors["lr"] = [_scalar(_number(self["lr"]), self.device, self.hyper_dtype)]
            for copies in self._copies.values():
                copies.pop("lr", None)


def _restored_group(values: dict[str, Any], attributes: dict[str, Any]) -> ParamGroup:
    group = ParamGroup.__new__(ParamGroup)
    dict.update(group, values)
    group.__dict__.update(attributes)
    return group


def _has_float64(device: str) -> bool:
    return dtypes.float64 in Device[device].renderer.caps.supported_dtypes


def _with_step_hooks(step: Callable[..., Any]) -> Callable[..., Any]:
    """`step` running the optimizer's step pre- and post-hooks around it, as torch's: each gets (optimizer, args,
    kwargs), args starting with the optimizer; a pre-hook may return (new_args, new_kwargs). A step called from
    another (a subclass's `super().step()`) runs them once."""

    @functools.wraps(step)
    def hooked(self: Optimizer, *args: Any, **kwargs: Any) -> Any:
        hooks = self.__dict__.get("_step_hooks")
        if not hooks or not (hooks[0] or hooks[1]) or self.__dict__.get("_in_step"):
            return step(self, *args, **kwargs)
        pre, post = hooks
        full: tuple = (self, *args)
        for hook in list(pre.values()):
            result = new_args_and_kwargs(hook(self, full, kwargs), f"{type(self).__name__}: a step pre-hook")
            if result is not None:
                full, kwargs = result
        self._in_step = True
        try:
            out = step(*full, **kwargs)
        finally:
            self._in_step = False
        for hook in list(post.values()):
            hook(self, full, kwargs)
        return out

    hooked._runs_step_hooks = True  # type: ignore[attr-defined]
    return hooked


class _Clock:
    """The 0-d state a group's parameters share while they step together (the step count, the betas' powers): one
    update per step, not one per parameter. A parameter that has no gradient at a step where others of its clock do
    gets a copy (the clock forks), so every parameter counts its own steps, as torch's per-parameter "step"."""

    def __init__(self, values: dict[str, Tensor], members: set[int]) -> None:
        self.values, self.members = values, members


def _ordered(params: Any, optimizer: str) -> Iterable[Any]:
    # torch refuses a group's set (its order changes between runs, and with it the state dict's parameter indices;
    # torch takes a set given as `params` itself, as a list)
    if isinstance(params, (set, frozenset)):
        raise TypeError(
            f"{optimizer}: params given as a {type(params).__name__}, whose order is not fixed from run to run (and "
            "a state dict keys on that order); pass a list"
        )
    return params


class Optimizer:
    """Base class, as torch.optim.Optimizer: `params` is an iterable of Tensors (or of (name, Tensor) pairs), or of
    dicts {"params": [...], hyperparameter: value, ...} that override `defaults` per group.

    As torch's, a step updates every tensor of the groups that has a `.grad` (whatever its `requires_grad` says now:
    a layer frozen after `zero_grad(set_to_none=False)` keeps a zero gradient and keeps moving), `zero_grad` clears
    every one, and `load_state_dict` loads every one's state. The tensors without a gradient (frozen layers, or
    BatchNorm running statistics given tinygrad's way) are realized with every step so that their pending in-place
    updates land too. A subclass sets `defaults` through `__init__`, names its per-parameter state in `state_names`,
    and implements `_init_state`, `_clock_values`, `_clock_next` and `_update`.
    """

    # hyperparameters that become 0-d tensors once changed (see the module's docstring)
    dynamic: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # a subclass's own step (a custom optimizer's) runs the step hooks too, as torch patches it
        own = cls.__dict__.get("step")
        if callable(own) and not getattr(own, "_runs_step_hooks", False):
            cls.step = _with_step_hooks(own)  # type: ignore[method-assign]

    def __init__(self, params: Tensor | Iterable[Any], defaults: dict[str, Any]) -> None:
        lr = defaults.get("lr", 0.0)
        if not isinstance(lr, (Tensor, _Required)) and lr < 0:
            raise ValueError(f"{type(self).__name__}: learning rate must be >= 0, got {lr}")
        self.defaults = defaults
        self.param_groups: list[ParamGroup] = []
        # per parameter (by id): named state tensors, whether it has stepped, its clock, and the (device, dtype) the
        # parameter had when they were made (a model converted in place afterwards changes it)
        self._slots: dict[int, dict[str, Tensor]] = {}
        self._started: set[int] = set()
        self._clocks: dict[int, _Clock] = {}
        self._placed: dict[int, tuple[str, DType]] = {}
        # `state`'s dicts, kept from read to read: what a torch-style custom optimizer's own step keeps there
        # (`self.state[p]["mu"] = ...`) stays, beside the update rules' own tensors (see `state`)
        self._state_dicts = _StateTable(track=not self._custom_step)
        # torch's hooks by handle id: the step's (pre, post), state_dict's and load_state_dict's (pre, post)
        self._step_hooks: tuple[dict[int, Callable], dict[int, Callable]] = ({}, {})
        self._state_dict_hooks: tuple[dict[int, Callable], dict[int, Callable]] = ({}, {})
        self._load_state_dict_hooks: tuple[dict[int, Callable], dict[int, Callable]] = ({}, {})
        if isinstance(params, Tensor):
            # (torch's TypeError: a lone tensor is iterable over its rows, which aren't parameters)
            raise TypeError(
                f"{type(self).__name__}: params takes an iterable of tensors (or of param-group dicts), got a single "
                f"Tensor of shape {params.shape}: pass [t]"
            )
        # (any iterable, as torch: a generator such as model.parameters() is read once)
        given = list(params)
        if given and isinstance(given[0], dict):
            groups = given
        else:
            groups = [{"params": given}]
        for g in groups:
            self.add_param_group(g)
        if not self.params:
            raise ValueError(f"{type(self).__name__}: got no parameters that require a gradient")

    # ---- groups

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (a dict with "params" and any hyperparameters; the rest come from `defaults`), as torch's."""
        if not isinstance(param_group, dict):
            raise TypeError(f"{type(self).__name__}: a param group must be a dict, got {type(param_group).__name__}")
        group = dict(param_group)
        raw = group.get("params")
        if raw is None:
            raise ValueError(f"{type(self).__name__}: a param group needs 'params'")
        raw = [raw] if isinstance(raw, Tensor) else list(_ordered(raw, type(self).__name__))
        names = None
        if raw and all(isinstance(p, tuple) and len(p) == 2 for p in raw):
            # torch's named form: (name, Tensor) pairs, as model.named_parameters() gives
            names, raw = [n for n, _ in raw], [p for _, p in raw]
        for p in raw:
            if not isinstance(p, Tensor):
                raise TypeError(f"{type(self).__name__}: params must be Tensors, got {type(p).__name__}")
            if p._requires_grad is None:
                if not dtypes.is_float(p.dtype):
                    # (only float tensors can require gradients)
                    raise TypeError(
                        f"{type(self).__name__}: parameter of shape {p.shape} is {p.dtype}, not floating point"
                    )
                p.requires_grad = True
        params = _dedup(raw)
        taken = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in taken for p in params):
            raise ValueError(
                "add_param_group: the new group holds tensors that are already in another group; each tensor belongs "
                "to one group"
            )
        group["params"] = params
        if names is not None:
            group["param_names"] = names
        for k, v in self.defaults.items():
            if v is required and k not in group:
                raise ValueError(f"{type(self).__name__}: a param group gives no {k!r}, a required hyperparameter")
            group.setdefault(k, v)
        if isinstance(group.get("lr"), Tensor):
            if group["lr"].numel() != 1:
                # (torch's ValueError)
                raise ValueError(
                    f"{type(self).__name__}: a Tensor lr must hold one element, got shape {group['lr'].shape}"
                )
            group["lr"] = _number(group["lr"])
        if group["lr"] < 0:
            raise ValueError(f"{type(self).__name__}: learning rate must be >= 0, got {group['lr']}")
        self._check_group(group)
        pg = ParamGroup(self, group)
        self.param_groups.append(pg)
        # the state of the parameters that require a gradient now is made now, so a TinyJit capture finds it; a frozen
        # one's when it first steps (`_prepare`), as torch's: a frozen backbone costs no optimizer memory
        trained = [p for p in params if p._requires_grad]
        for p in trained:
            self._new_state(pg, p)
        self._add_clocks(pg, trained)

    def _check_group(self, group: dict[str, Any]) -> None:
        """Raise for invalid hyperparameters (a subclass's checks)."""

    @property
    def params(self) -> list[Tensor]:
        """Every parameter that requires a gradient, group after group."""
        return [p for g in self.param_groups for p in g["params"] if p._requires_grad]

    @property
    def buffers(self) -> list[Tensor]:
        """The tensors given that don't require a gradient (realized with every step)."""
        return [p for g in self.param_groups for p in g["params"] if not p._requires_grad]

    def _members(self) -> list[Tensor]:
        # every tensor of the groups, frozen or not: torch's zero_grad, step and load_state_dict go by group membership
        return [p for g in self.param_groups for p in g["params"]]

    @property
    def lr(self) -> Tensor:
        """The first group's learning rate, a 0-d float32 tensor (float64 when a parameter is): changing it
        (`opt.lr = 0.01`, which sets every group's, or `param_groups[i]["lr"] = 0.01`) recompiles nothing, and a TinyJit
        replay reads the new value."""
        return self.param_groups[0].tensors["lr"][0]

    @lr.setter
    def lr(self, value: float | Tensor) -> None:
        if isinstance(value, Tensor):
            # (the tensor itself becomes every group's learning rate)
            for g in self.param_groups:
                g.take_lr(value)
            return
        if not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{type(self).__name__}: learning rate must be a number >= 0, got {value!r}")
        for g in self.param_groups:
            g["lr"] = float(value)

    @property
    def state(self) -> defaultdict[Tensor, dict[str, Any]]:
        """torch's `optimizer.state`: a defaultdict(dict) by parameter, the same object and the same per-parameter
        dicts at every read, so what a custom optimizer's own `step` stores there (`self.state[p]["mu"]`, torch's way)
        is there at the next step. Each parameter that has stepped shows its state tensors by torch's names ("step"
        included), the optimizer's own, brought up to date at each read; `opt.state[p]` of one that hasn't is `{}`."""
        out = self._state_dicts
        if self._custom_step:
            return out
        if out.pending:
            self._take_written()
        names = self.clock_state + self.state_names
        for p in self._members():
            if id(p) in self._started:
                out[p].update(self._state_of(p))
            elif p in out:
                # (a state dict loaded without this parameter's state: the update rule's entries are gone)
                for k in names:
                    out[p].pop(k, None)
        return out

    @state.setter
    def state(self, value: dict[Tensor, dict[str, Any]]) -> None:
        # (torch's state is a plain attribute: a custom optimizer may set it)
        # (a custom step's own defaultdict stays that object: a wrapper may share its inner optimizer's)
        shared = isinstance(value, _StateTable) or (self._custom_step and isinstance(value, defaultdict))
        self._state_dicts = value if shared else _StateTable(value, track=not self._custom_step)

    @property
    def _custom_step(self) -> bool:
        """Whether this is a torch-style subclass with a `step` of its own and no update rule of uopkit's
        (`_update`): its state is only what its step keeps in `state`."""
        return type(self)._update is Optimizer._update

    def _state_of(self, p: Tensor) -> dict[str, Tensor]:
        slots = self._slots[id(p)]
        clock = self._clocks[id(p)].values
        named = {k: clock[k] for k in self.clock_state if k in clock}
        return named | {k: slots[k] for k in self.state_names if k in slots}

    def _take_written(self) -> None:
        """Take what the program wrote into `state` (see `_StateTable`) into the update rule's state: a parameter whose
        dict was replaced or removed starts afresh (step 0, fresh state tensors, as torch's step finds its state
        empty), then the entries written (state tensors by torch's names, "step") are its state. Writes for a tensor
        not in a group wait until it is in one (torch keeps its state too)."""
        table = self._state_dicts
        groups = {id(p): g for g in self.param_groups for p in g["params"]}
        names = self.clock_state + self.state_names
        for key, (p, reset, entries) in list(table.pending.items()):
            if (group := groups.get(key)) is None:
                continue
            del table.pending[key]
            if reset:
                self._forget(group, p)
            if own := {k: v for k, v in entries.items() if k in names and v is not None}:
                self._adopt(group, p, own)

    def _forget(self, group: ParamGroup, p: Tensor) -> None:
        # `p`'s state as before its first step: its state tensors written in place (a TinyJit capture reads them), and
        # a clock at step 0 made at its next step
        self._started.discard(id(p))
        if (clock := self._clocks.pop(id(p), None)) is not None:
            clock.members.discard(id(p))
        if id(p) in self._slots and self._placed.get(id(p)) == (p.device, p.dtype):
            for name, t in self._slots[id(p)].items():
                _write_all(t, self._fresh_value(group, name))

    def _adopt(self, group: ParamGroup, p: Tensor, entries: dict[str, Any]) -> None:
        # entries written into `opt.state[p]`, written into its state tensors (torch's checks: the shape must match)
        if id(p) not in self._slots or self._placed.get(id(p)) != (p.device, p.dtype):
            self._new_state(group, p)
        for name in self.state_names:
            if (value := entries.get(name)) is None:
                continue
            target = self._slot(p, name)
            if not isinstance(value, Tensor):
                value = Tensor(np.asarray(value, dtype=np.float32 if target.dtype == dtypes.bfloat16 else None))
            if value.shape != target.shape:
                raise RuntimeError(
                    f"{type(self).__name__}: optimizer.state[p][{name!r}] was set to a tensor of shape {value.shape}, "
                    f"but its parameter has shape {p.shape}: the state must have the parameter's shape"
                )
            if value is not target:
                target.assign(value.to(target.device).cast(target.dtype)).realize()
        clocked = {k: _number(entries[k]) for k in self.clock_state if k in entries}
        if clocked or id(p) not in self._clocks:
            # (a clock of its own: at the step written, else at its clock's step, else at 0)
            if (old := self._clocks.get(id(p))) is not None:
                if "step" not in clocked and "step" in old.values:
                    clocked["step"] = _number(old.values["step"])
                old.members.discard(id(p))
            step = clocked.pop("step", 0.0)
            self._clocks[id(p)] = self._make_clock(group, {id(p)}, step, clocked, p.device)
        self._started.add(id(p))

    # the per-parameter state names (torch's) and those kept in the clock, shared while parameters step together
    state_names: tuple[str, ...] = ()
    clock_state: tuple[str, ...] = ("step",)

    # ---- hooks (torch.optim.Optimizer's: Python calls around the methods, so a TinyJit replay runs none of them)

    def register_step_pre_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """hook(optimizer, args, kwargs) before each `step()` (args start with the optimizer); returning
        (new_args, new_kwargs) replaces them."""
        return _add_hook(self._step_hooks[0], hook)

    def register_step_post_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """hook(optimizer, args, kwargs) after each `step()`."""
        return _add_hook(self._step_hooks[1], hook)

    def register_state_dict_pre_hook(self, hook: Callable[..., Any], prepend: bool = False) -> RemovableHandle:
        """hook(optimizer) before `state_dict()` builds the dict."""
        return _add_hook(self._state_dict_hooks[0], hook, prepend)

    def register_state_dict_post_hook(self, hook: Callable[..., Any], prepend: bool = False) -> RemovableHandle:
        """hook(optimizer, state_dict) on the dict `state_dict()` built; a returned dict is the one returned."""
        return _add_hook(self._state_dict_hooks[1], hook, prepend)

    def register_load_state_dict_pre_hook(self, hook: Callable[..., Any], prepend: bool = False) -> RemovableHandle:
        """hook(optimizer, state_dict) on a shallow copy of the dict given to `load_state_dict()`; a returned dict is
        the one loaded."""
        return _add_hook(self._load_state_dict_hooks[0], hook, prepend)

    def register_load_state_dict_post_hook(self, hook: Callable[..., Any], prepend: bool = False) -> RemovableHandle:
        """hook(optimizer) after `load_state_dict()` loaded."""
        return _add_hook(self._load_state_dict_hooks[1], hook, prepend)

    # ---- stepping

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients (`set_to_none=False`: zero each `.grad` in place, as torch's: the same tensor object, so
        a reference to it sees the zeros and what the next backward adds). Every parameter of the groups, frozen ones
        too, as torch's: a gradient left on a layer frozen for a while would be added to by its next backward."""
        for p in self._members():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                zero_grad_in_place(p.grad)

    @_with_step_hooks
    def step(self, closure: Any = None) -> Any:
        """Update every parameter from its `.grad` (one realize for all parameters and state). `closure`, as torch's:
        called first (with gradients recorded) and its loss returned."""
        loss = None
        if closure is not None:
            loss = closure()
        # a step whose realize raises wrote nothing (its assigns are dropped, `realize_tensors`): the bookkeeping of
        # which parameters stepped and on which clock goes back too, so that a retry is one step, the first one's
        # rules included
        saved = self._bookkeeping()
        try:
            # the step is built and run as one realize of other threads (a thread reading the weights waits): run
            # in the middle of the build, the writes staged so far would overwrite what the rest reads
            with realize_lock:
                if pending := self.schedule_step():
                    Tensor.realize(*pending)
        except BaseException:
            self._restore_bookkeeping(saved)
            raise
        return loss

    def _bookkeeping(self) -> tuple:
        """What a step changes besides tensors (which parameters stepped, their clocks and placements), to put back
        when its realize raises."""
        started, clocks, placed = set(self._started), dict(self._clocks), dict(self._placed)
        members = [(clock, set(clock.members)) for clock in {id(c): c for c in clocks.values()}.values()]
        return started, clocks, placed, members

    def _restore_bookkeeping(self, saved: tuple) -> None:
        # (the placements too: a parameter whose state was made anew for its new device gets it made at the retry)
        self._started, self._clocks, self._placed, members = saved
        for clock, m in members:
            clock.members = m

    def schedule_step(self) -> list[Tensor]:
        """Build the in-place updates without running them; returns the tensors to realize (the updated parameters and
        state, and the gradients, which are realized with them).

        Realize them together with the loss (`Tensor.realize(loss, *opt.schedule_step())`) to read the loss of
        this step: a parameter's buffer is overwritten when the step runs.
        """
        if getattr(self._state_dicts, "pending", None):
            self._take_written()
        out: list[Tensor] = []
        grads: list[Tensor] = []
        for group in self.param_groups:
            # (torch's test: a parameter with a `.grad` steps, frozen or not; one frozen with a zero gradient keeps its
            # momentum and weight decay)
            with_grad = [p for p in group["params"] if p.grad is not None]
            for p in with_grad:
                assert p.grad is not None
                if p.grad.shape != p.shape:
                    raise ValueError(
                        f"{type(self).__name__}.step: gradient shape {p.grad.shape} doesn't match its parameter's "
                        f"{p.shape}"
                    )
                grads.append(p.grad)
            if with_grad:
                self._prepare(group, with_grad)
                out += self._advance_clocks(group, with_grad)
                out += self._update(group, with_grad)
                self._started.update(id(p) for p in with_grad)
        if not grads:
            # (nothing to update, as torch's step: its buffers' pending updates still land)
            return list(self.buffers)
        # the gradients are realized with the step (as PyTorch keeps them after step()): left lazy, they would read the
        # weights the step overwrites, and each step would first copy every weight for them (copy on write)
        return out + self.params + self.buffers + grads

    def _prepare(self, group: ParamGroup, params: list[Tensor]) -> None:
        # state and a clock (at step 0) for the parameters stepping for the first time that were frozen when added (or
        # when a state dict was loaded): made at their first step with a gradient, as torch's; and made again for those
        # moved to another device or dtype in place (`model.to(...)` after the optimizer was built) before they stepped
        placed = self._placed
        moved = [p for p in params if placed.get(id(p)) != (p.device, p.dtype)]
        if moved:
            self._replace_state(group, moved)
        fresh = [p for p in params if id(p) not in self._clocks]
        self._add_clocks(group, fresh)

    def _new_state(self, group: ParamGroup, p: Tensor) -> dict[str, Tensor]:
        # a parameter's state as before its first step, on its device and in its dtype
        slots = self._slots[id(p)] = self._init_state(group, p)
        self._placed[id(p)] = (p.device, p.dtype)
        return slots

    def _add_clocks(self, group: ParamGroup, params: list[Tensor]) -> None:
        # a clock at step 0 for these parameters, one per device (a clock's tensors are on its parameters' device)
        by_device: dict[str, list[Tensor]] = {}
        for p in params:
            by_device.setdefault(p.device, []).append(p)
        for device, ps in by_device.items():
            clock = self._make_clock(group, {id(p) for p in ps}, 0, device=device)
            for p in ps:
                self._clocks[id(p)] = clock

    def _replace_state(self, group: ParamGroup, moved: list[Tensor]) -> None:
        """The parameters whose device or dtype changed since their state was made: state made again where they haven't
        stepped; for those that have, an error (torch's step doesn't move state either; its load_state_dict does)."""
        for p in moved:
            had = self._placed.get(id(p))
            clock = self._clocks.get(id(p))
            if id(p) in self._started and had is not None and (self._slots.get(id(p)) or (clock and clock.values)):
                # (checked for every parameter before any state is replaced)
                index = next(i for i, q in enumerate(group["params"]) if q is p)
                group_index = next(i for i, g in enumerate(self.param_groups) if g is group)
                raise RuntimeError(
                    f"{type(self).__name__}.step: parameter {index} of group {group_index} (shape "
                    f"{p.shape}) is now {p.dtype.name} on {p.device}, but its optimizer state, from the steps it took, "
                    f"is {had[1].name} on {had[0]}: the state doesn't follow a parameter converted in place (nor does "
                    "torch's). Convert the model before its first step, or move the state to the parameters with "
                    "optimizer.load_state_dict(optimizer.state_dict())"
                )
        for p in moved:
            if (clock := self._clocks.get(id(p))) is not None:
                clock.members.discard(id(p))
                del self._clocks[id(p)]
            self._new_state(group, p)
        if any(p.dtype != group.hyper_dtype and dtypes.float64 in (p.dtype, group.hyper_dtype) for p in moved):
            group._retype()

    def _advance_clocks(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        stepping = {id(p) for p in params}
        out: list[Tensor] = []
        seen: set[int] = set()
        for p in params:
            clock = self._clocks[id(p)]
            if id(clock) in seen:
                continue
            seen.add(id(clock))
            if not clock.members <= stepping:
                # some of this clock's parameters skip the step: those that step go on with a copy
                moving = clock.members & stepping
                clock.members -= moving
                copied = {k: _state_like(v) for k, v in clock.values.items()}
                for k, v in copied.items():
                    v.assign(clock.values[k])
                clock = _Clock(copied, moving)
                for q in params:
                    if id(q) in moving:
                        self._clocks[id(q)] = clock
                seen.add(id(clock))
            if not clock.values:
                continue
            new = self._clock_next(group, clock.values)
            for k, v in new.items():
                clock.values[k].assign(v.cast(clock.values[k].dtype))
            out += clock.values.values()
        return out

    def _make_clock(
        self, group: ParamGroup, members: set[int], step: float, extra: dict | None = None, device: str | None = None
    ) -> _Clock:
        device = device or group.device
        values = self._clock_values(group, step) | (extra or {})
        wide = group.wide_dtype_on(device)
        return _Clock({k: _scalar(v, device, wide) for k, v in values.items()}, members)

    def _clock_values(self, group: ParamGroup, step: float) -> dict[str, float]:
        """The clock's numbers after `step` steps (host floats): the step count, and whatever an update rule keeps."""
        return {"step": float(step)}

    def _clock_next(self, group: ParamGroup, clock: dict[str, Tensor]) -> dict[str, Tensor]:
        """The clock's values one step on, from the current ones (0-d tensors)."""
        return {"step": clock["step"] + 1}

    def _init_state(self, group: ParamGroup, p: Tensor) -> dict[str, Tensor]:
        """The per-parameter state tensors, made when the parameter is added (so a TinyJit capture finds them)."""
        return {}

    def _slot(self, p: Tensor, name: str, value: float = 0.0) -> Tensor:
        # a state tensor, made on first use (a hyperparameter changed after construction can need one)
        slots = self._slots[id(p)]
        if (t := slots.get(name)) is None:
            t = slots[name] = _state_like(p, value)
        return t

    def _update(self, group: ParamGroup, params: list[Tensor]) -> list[Tensor]:
        """Assign every parameter's new value and state; returns the state tensors written."""
        raise NotImplementedError

    # ---- state dicts

    def state_dict(self) -> dict[str, Any]:
        """torch's layout: {"state": {index: {name: Tensor}}, "param_groups": [{hyperparameters, "params": [index]}]},
        the indices counting the groups' params in order. The tensors are the optimizer's own (copy them, or save them,
        to keep this step's values), but for the step count and the other values parameters stepping together share:
        each parameter gets a copy, as torch's state has one per parameter (a checkpoint that shared one made torch,
        resuming, count a step once per parameter)."""
        for hook in list(self._state_dict_hooks[0].values()):
            hook(self)
        out = self._state_dict()
        for hook in list(self._state_dict_hooks[1].values()):
            if (result := hook(self, out)) is not None:
                out = result
        return out

    def _state_dict(self) -> dict[str, Any]:
        # the dict `state_dict()` returns, before its post-hooks
        if not self._custom_step and self._state_dicts.pending:
            self._take_written()
        state: dict[int, dict[str, Tensor]] = {}
        groups: list[dict[str, Any]] = []
        index = 0
        custom, names = self._custom_step, self.clock_state + self.state_names
        for g in self.param_groups:
            indices = []
            for p in g["params"]:
                # what a custom step keeps in `state` (torch's state dict holds every entry of it), then the update
                # rule's tensors
                kept = self._state_dicts.get(p)
                if custom:
                    if kept is not None:
                        state[index] = dict(kept)
                elif id(p) in self._started or kept:
                    own = self._state_of(p) if id(p) in self._started else {}
                    extra = {k: v for k, v in (kept or {}).items() if k not in names}
                    state[index] = extra | own | {k: own[k].clone() for k in self.clock_state if k in own}
                indices.append(index)
                index += 1
            groups.append({k: v for k, v in g.items() if k != "params"} | {"params": indices})
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a `state_dict()` (ours, or torch's with its tensors as numpy arrays, torch tensors or numbers): the
        groups' hyperparameters and each parameter's state, by index."""
        # (a shallow copy, as torch's, for the pre-hooks to change)
        state_dict = dict(state_dict)
        for hook in list(self._load_state_dict_hooks[0].values()):
            if (result := hook(self, state_dict)) is not None:
                state_dict = result
        self._load_state(state_dict)
        for hook in list(self._load_state_dict_hooks[1].values()):
            hook(self)

    def _load_state(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups):
            raise ValueError(
                f"load_state_dict: the state dict holds {len(saved)} param groups, this optimizer "
                f"{len(self.param_groups)}"
            )
        if any(len(s["params"]) != len(g["params"]) for s, g in zip(saved, self.param_groups, strict=True)):
            raise ValueError(
                "load_state_dict: a param group of the state dict holds another number of tensors than the optimizer's "
                f"(state dict {[len(s['params']) for s in saved]}, optimizer "
                f"{[len(g['params']) for g in self.param_groups]})"
            )
        states = {int(k): v for k, v in state_dict["state"].items()}
        # `state` is replaced, as torch's: each parameter's saved entries that no update rule here keeps (all of a
        # custom step's) go into its dict, tensors moved onto it as torch's load_state_dict moves them
        custom, names = self._custom_step, self.clock_state + self.state_names
        kept: dict[Tensor, dict[str, Any]] = {}
        for s, g in zip(saved, self.param_groups, strict=True):
            for i, p in zip(s["params"], g["params"], strict=True):
                if (st := states.get(int(i))) is not None and (custom or any(k not in names for k in st)):
                    kept[p] = {k: _loaded_value(v, p, k) for k, v in st.items() if custom or k not in names}
        self._state_dicts = _StateTable(kept, track=not custom)
        for s, g in zip(saved, self.param_groups, strict=True):
            for k, v in s.items():
                if k not in ("params", "param_names"):
                    g[k] = tuple(v) if isinstance(v, list) else v
            if custom:
                continue
            by_clock: dict[tuple, list[Tensor]] = {}
            for i, p in zip(s["params"], g["params"], strict=True):
                # (every parameter's, as torch's: one frozen now and unfrozen later resumes from its saved state)
                st = states.get(int(i), {})
                if id(p) not in self._slots and not st:
                    # frozen when added, nothing saved: its state is made at its first step
                    continue
                if id(p) not in self._slots or self._placed.get(id(p)) != (p.device, p.dtype):
                    # (new state on the parameter's device and in its dtype, as torch's load_state_dict moves the
                    # state saved to them: a model converted in place after the optimizer was built)
                    self._new_state(g, p)
                extra = {k: _number(st[k]) for k in self.clock_state if k in st and k != "step"}
                step = _number(st["step"]) if "step" in st else (1.0 if st else 0.0)
                by_clock.setdefault((step, tuple(sorted(extra.items())), p.device), []).append(p)
                slots = self._slots[id(p)]
                for name in self.state_names:
                    if st.get(name) is None:
                        continue
                    target = self._slot(p, name)
                    value = st[name]
                    if not isinstance(value, Tensor):
                        arr = np.asarray(value, dtype=np.float32 if target.dtype == dtypes.bfloat16 else None)
                        value = Tensor(arr.reshape(target.shape), device=target.device)
                    slots[name].assign(value.to(target.device).cast(target.dtype)).realize()
                if st:
                    self._started.add(id(p))
                else:
                    self._started.discard(id(p))
                    for name, t in slots.items():
                        _write_all(t, self._fresh_value(g, name))
            for (step, extra, device), ps in by_clock.items():
                clock = self._make_clock(g, {id(p) for p in ps}, step, dict(extra), device)
                for p in ps:
                    self._clocks[id(p)] = clock
        for g in self.param_groups:
            if any(p.dtype != g.hyper_dtype and dtypes.float64 in (p.dtype, g.hyper_dtype) for p in g["params"]):
                g._retype()

    def _fresh_value(self, group: ParamGroup, name: str) -> float:
        """A state tensor's value before the first step."""
        return 0.0

    # ---- copies: the per-parameter state is keyed by id(param), and a deep copy's or a pickle's parameters are other
    # tensors, with other ids

    def __copy__(self) -> Optimizer:
        # torch's shallow copy: another optimizer over the same groups and state
        out = type(self).__new__(type(self))
        out.__dict__.update(self.__dict__)
        return out

    def __getstate__(self) -> dict[str, Any]:
        """What `copy.deepcopy` and pickle take: the attributes, the per-parameter state keyed by each parameter's place
        in the groups (`__setstate__` keys it by the copied parameters' ids), as torch's state_dict keys it."""
        place = {id(p): i for i, p in enumerate(self._members())}
        state = dict(self.__dict__)
        state.pop("_in_step", None)
        for name in ("_slots", "_clocks", "_placed"):
            state[name] = {place[k]: v for k, v in state[name].items() if k in place}
        state["_started"] = {place[k] for k in self._started if k in place}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        table = self.__dict__.get("_state_dicts", {})
        self._state_dicts = table if isinstance(table, _StateTable) else _StateTable(table, not self._custom_step)
        ids = [id(p) for p in self._members()]
        for name in ("_slots", "_clocks", "_placed"):
            setattr(self, name, {ids[i]: v for i, v in state[name].items()})
        self._started = {ids[i] for i in state["_started"]}
        # (a clock shared by several parameters is one object in the copy too: its members are the copies' ids)
        for clock in self._clocks.values():
            clock.members = set()
        for k, clock in self._clocks.items():
            clock.members.add(k)

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(g.items()) if k != "params"]
        return "\n".join(lines) + "\n)"


def _loaded_value(value: Any, p: Tensor, key: Any = None) -> Any:
    """A loaded state entry that no update rule here keeps, as torch's load_state_dict takes it: a tensor (ours, or a
    numpy array or torch tensor, made ours) onto the parameter's device and, unless it is the "step" count, into the
    parameter's dtype where that is a float one; dicts, lists and tuples entry by entry; anything else as it is."""
    if isinstance(value, dict):
        return {k: _loaded_value(v, p, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_loaded_value(v, p) for v in value)
    if not isinstance(value, Tensor):
        if not (isinstance(value, np.ndarray) or type(value).__module__.startswith("torch")):
            return value
        value = Tensor(value)
    value = value.to(p.device)
    return value.cast(p.dtype) if key != "step" and dtypes.is_float(p.dtype) else value


def zero_grad_in_place(grad: Tensor) -> None:
    """Make `grad` (a `.grad`) zeros of its shape, detached, keeping the tensor object, as torch's `grad.zero_()` in
    `zero_grad(set_to_none=False)`: its graph becomes a constant, as a backward's accumulation rebinds it (no kernel
    writes zeros into its buffer). A `.grad` set to a view of another tensor gets the zeros written through to the
    storage it shows, as torch's."""
    zeros = Tensor.zeros(*grad.shape, dtype=grad.dtype, device=grad.device)
    if grad._view_of is not None and grad._view_of() is not None:
        grad.assign(zeros)
    else:
        live_tensors.set_uop(grad, zeros.uop)


def _write_all(t: Tensor, value: float) -> None:
    t.assign(Tensor.full(t.shape, value, dtype=t.dtype, device=t.device)).realize()


def _powers(group: ParamGroup, clock: dict[str, Tensor], key: str, index: int) -> Tensor:
    """beta^t for the group's betas[index] as a 0-d tensor of the clock's dtype: the clock's running product while the
    beta is a constant, beta ** step (torch's form, with the beta of this step) once it is a tensor."""
    beta = group.hyper(key, clock["step"].device)[index]
    if isinstance(beta, Tensor):
        return beta.cast(clock["step"].dtype) ** clock["step"]
    return clock[f"b{index + 1}_t"]


def _beta_powers(betas: tuple[float, float], step: float) -> dict[str, float]:
    return {"b1_t": math.pow(betas[0], step), "b2_t": math.pow(betas[1], step)}


def _check_fused(name: str, fused: bool | None, foreach: bool | None, differentiable: bool) -> None:
    """torch's refusals of `fused=True` (a flag that changes nothing here) beside `differentiable` or `foreach`."""
    if fused and differentiable:
        raise RuntimeError(f"{name}: `fused` does not support `differentiable`; drop one of them")
    if fused and foreach:
        raise RuntimeError(f"{name}: `fused` and `foreach` cannot be `True` together; drop one of them")


def _betas(name: str, b1: Any, b2: float, betas: tuple[float, float] | None) -> tuple[float, float]:
    """(b1, b2) from tinygrad's positional b1, b2 or PyTorch's `betas=` (by name: a tuple in b1's place is refused)."""
    if isinstance(b1, (tuple, list)):
        raise TypeError(f"{name}: pass betas by name (betas={tuple(b1)}): the third positional argument is b1")
    return (b1, b2) if betas is None else betas
