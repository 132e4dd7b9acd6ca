"""TinyJit: capture the kernels a function runs once, then replay them with new input buffers.

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        loss = model(x).cross_entropy(y)
        ...
        return loss.realize()

The first call runs `step` normally (it compiles its kernels and creates lazily built state such as optimizer
buffers); the second runs it again while recording every kernel launch with its buffers; from the third call on the
recorded launches run directly, with the buffers of the new Tensor arguments put where the captured ones were. No
graph is built, kernelized or scheduled on a replay.

What the function does besides launching kernels is *not* replayed: Python side effects, host data it turns into
tensors (e.g. `Tensor(np.random...)` inside the function is frozen at its captured value; the values of `Tensor.rand`,
`randn`, `randint`, `randperm` and dropout's mask are drawn again by every replay), and non-Tensor arguments,
which therefore must not change between calls. Returned tensors are views of the captured output buffers, which every
replay overwrites: copy them (`.numpy()`) to keep a value across calls.

Which Tensor arguments are the same tensor is part of a capture: `f(x, x)` may compile to different kernels than
`f(x, y)` (x - x folds to zero), so a call whose arguments alias differently from every capture so far is captured
anew. Tensors the kernels read that are not arguments (weights, optimizer state) are read from the buffers they had at
the capture: update them in place with `.assign()`; a replay after such a tensor was rebound to new storage (or freed)
raises JitError instead of reading stale values. In-place writes (`.assign()`) the function makes are part of the
capture even when nothing in it realizes them (BatchNorm's running statistics): every replay does them once; those
pending from before the capturing call are done first, outside it.

`.grad` is part of what a call reads and leaves, as without the JIT: the kernels read the `.grad` each tensor has at
the call (calls without `zero_grad()` between them accumulate, the second adding into the first's gradient), and after
a replay every tensor whose `.grad` the function set (its `backward()`) has `.grad` bound to the replayed gradient, the
same object where the call kept it (`zero_grad(set_to_none=False)`, accumulation), or None where the call left none. So
`backward()` may be inside the function and `zero_grad()` / `step()` outside it (a torch training loop), or the step
inside and `zero_grad()` outside, or everything inside (tinygrad's). What kind of `.grad` a call finds (none, a
constant such as `zero_grad(set_to_none=False)`'s zeros, or a stored value) is part of a capture: a call that finds
another is captured anew (accumulation over micro-batches has two captures), and past MAX_GRAD_VARIANTS of them the call
raises JitError. A `.grad` a replay binds is a view of the capture's buffer, which the next replay overwrites (copy it
to keep it). Hooks are Python calls, not replayed; what they compute into gradients is. Other tensors the function
binds to attributes or containers are not bound again by a replay: return them instead.

`Tensor.training` is part of a capture too (BatchNorm's and dropout's kernels differ by mode): a call in the other
mode is captured anew, and so is a call after an `nn.Module`'s `train()`/`eval()` changed a layer's own mode.

Tensors inside list, tuple and dict arguments are Tensor arguments too (`step([x, y])`, `f(batch={"x": x})`); the
containers' types and keys must stay the same. As a method decorator (`@TinyJit def __call__(self, x)`), each
instance gets captures of its own: the instance's tensors are read as a function's globals are (another model's
weights are other buffers), and the decorator doesn't keep the instance alive.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from uopkit.device import Buffer
from uopkit.dtype import DType
from uopkit.engine.realize import ExecItem, capturing, capturing_checks, copy_on_write_buffers, launch_cost
from uopkit.helpers import GlobalCounters
from uopkit.schedule.history import overwriting, recording_writes
from uopkit.tensor import Tensor, _all_tensors, buffers
from uopkit.tensor.creation import random_draws
from uopkit.uop.ops import Ops, UOp

ReturnType = TypeVar("ReturnType")
# how many captures one mode and aliasing of the arguments may have for `.grad`s of different kinds (gradient
# accumulation has two: the first micro-batch finds no `.grad`, the others one): past it the `.grad`s differ every call
MAX_GRAD_VARIANTS = 8


class JitError(RuntimeError):
    pass


@dataclass(frozen=True)
class _InputSig:
    shape: tuple[int, ...]
    dtype: DType
    device: str


class _Launch:
    """One captured launch with its arguments prepared; `inputs` are (buffer position, jit input index) pairs, and
    `arg_inputs` the same for the program's arguments (it takes only the buffers its code uses,
    `ProgramSpec.params`)."""

    def __init__(self, ei: ExecItem, inputs: tuple[tuple[int, int], ...]) -> None:
        self.item = ExecItem(ei.runner, list(ei.bufs), dict(ei.var_vals))
        self.inputs = self.arg_inputs = inputs
        runner = ei.runner
        self.program: Any = None
        if runner is not None:
            self.program = runner.program
            params = runner.spec.params
            if params is not None:
                place = {p: i for i, p in enumerate(params)}
                self.arg_inputs = tuple((place[pos], idx) for pos, idx in inputs if pos in place)
            self.args = [b.opaque for b in runner.spec.take(ei.bufs)]
            self.kwargs = {
                "global_size": runner.spec.global_size,
                "local_size": runner.spec.local_size,
                "vals": runner.spec.launch_values(ei.var_vals),
            }
            self.launch = self._bound()

    def _bound(self) -> Callable[[], Any]:
        # the kernel on the current arguments as one call without arguments: the backend's own (`Program.bind`, which
        # prepares them once) when it has one
        bind = getattr(self.program, "bind", None)
        if bind is not None:
            return bind(*self.args, **self.kwargs)
        return functools.partial(self.program, *self.args, **self.kwargs)

    def run(self, bufs: list[Buffer]) -> None:
        if self.program is not None and not capturing:
            # a kernel, with no enclosing capture to record it: only the input arguments change, and the prepared
            # call is kept while they are the same buffers
            if self.arg_inputs:
                args, changed = self.args, False
                for pos, idx in self.arg_inputs:
                    opaque = bufs[idx].opaque
                    if args[pos] is not opaque:
                        args[pos], changed = opaque, True
                if changed:
                    self.launch = self._bound()
            self.launch()
            return
        item = self.item
        for pos, idx in self.inputs:
            item.bufs[pos] = bufs[idx]
        for captured in capturing:
            # an enclosing TinyJit is capturing: it records this launch too
            captured.append(ExecItem(item.runner, list(item.bufs), item.var_vals))
        if item.runner is None:
            item.run()
            return
        # (a copy: `self.args` stay what `self.launch` was prepared with)
        args = list(self.args)
        for pos, idx in self.arg_inputs:
            args[pos] = bufs[idx].opaque
        self.program(*args, **self.kwargs)


@dataclass
class _Captured:
    launches: list[_Launch]
    input_uops: list[UOp]
    # the returned structure with each Tensor replaced by (its uop, whether that uop views an input buffer)
    outputs: Any
    signature: tuple[_InputSig, ...]
    others: tuple[Any, ...]
    # buffers the launches read that tensors outside the call held at the capture, with those tensors
    state: list[_State]
    # host-side checks of device-computed values (index ranges) that ran during the capture: replays repeat them
    checks: list[Callable[[], None]] = field(default_factory=list)
    # (shape, dtype, device) per Tensor argument, compared at once on a call
    sig_list: list = field(default_factory=list)
    # whether some returned tensor views an input buffer (then it is rebuilt over the call's inputs)
    outputs_read_inputs: bool = True
    # the training mode at the capture (`_mode_key`): the kernels of BatchNorm and dropout differ by mode
    training: tuple[bool, int] = (False, 0)
    # buffers of host random values (Tensor.rand, dropout's mask) the launches read, each with its draw: refilled with
    # new values by every replay, as a call without the JIT draws new ones
    draws: list[tuple[Buffer, Callable[[], np.ndarray]]] = field(default_factory=list)
    # what a replay adds to GlobalCounters: kernels, their estimated operations, their bytes and the bytes copied
    cost: tuple[int, int, int] = (0, 0, 0)
    # the `.grad`s the call set or its kernels read (after the Tensor arguments among `input_uops`, the buffers of those
    # read, in order), and the ids of every buffer the launches use (a `.grad` stored in one is copied before a replay)
    grads: list[_GradBinding] = field(default_factory=list)
    used: frozenset[int] = frozenset()
    # the buffers the launches overwrite (assigns): a replay stamps them as a realize does, so that backward() through
    # a value realized before it doesn't read their new contents as the old ones
    overwrites: list[UOp] = field(default_factory=list)


@dataclass
class _State:
    buf: UOp
    holders: list[weakref.ref]
    shape: tuple[int, ...]

    def still_held(self) -> bool:
        # some tensor that held the buffer at the capture still does (in-place updates keep the buffer)
        return any((t := ref()) is not None and _plain_buffer(t) is self.buf for ref in self.holders)


@dataclass
class _GradBinding:
    """A tensor whose `.grad` the captured call set (`changed`) or whose `.grad` its kernels read: a replay reads the
    `.grad` of the time and binds `.grad` to the replayed value, as the call would have."""

    tensor: weakref.ref
    # the `.grad` the call found (`_grad_kind`): a replay needs the same kind, else the call is captured anew (backward
    # sets a missing gradient but adds into one that is there, and the kernels differ)
    before: Any
    # the position among the capture's inputs of the buffer of that `.grad`, when the kernels read it
    input_index: int | None
    changed: bool
    # whether the call kept the `.grad` object (backward adds in place, `zero_grad(set_to_none=False)`), and the
    # `.grad` it left (None: it set none)
    same_object: bool = False
    after: _Output | None = None
    # the latest `.grad` graph found to be of the kind (weakly): a replay's own result is, at the next call
    seen: weakref.ref | None = None

    def holds(self) -> bool:
        t = self.tensor()
        if t is None:
            return True
        g = t.grad
        if g is None:
            return self.before is None
        uop = g.uop
        if self.seen is not None and self.seen() is uop:
            return True
        if not _same_kind(_grad_kind(g), self.before):
            return False
        self.seen = weakref.ref(uop)
        return True


def _grad_kind(g: Any) -> Any:
    """What a captured call may assume about a `.grad` it finds: None, a constant graph (its uop, the same for the same
    constant: `zero_grad(set_to_none=False)`'s zeros) or a value in storage (its shape, dtype and device)."""
    if g is None:
        return None
    uop = g.uop
    if uop.base.op is not _BUFFER and not any(u.op is _BUFFER for u in uop.toposort()):
        return uop
    return (uop.shape, uop.dtype, uop.device)


def _same_kind(a: Any, b: Any) -> bool:
    return a is b or (type(a) is tuple and a == b)


def _plain_grads() -> list[tuple[weakref.ref, Any, UOp | None, Any]]:
    """Every tensor with a `.grad` or requires_grad, with its `.grad`, that tensor's uop and its `_grad_kind`. A
    `.grad` that is neither a constant nor in storage of its own (a lazy gradient, a view of a buffer) is stored first,
    its value unchanged: a kernel of the capture then reads a plain buffer, which a replay swaps for the `.grad` of the
    time."""
    found = [t for t in _all_tensors.snapshot() if t.grad is not None or t._requires_grad]
    unstored = [t.grad for t in found if t.grad is not None and type(_grad_kind(t.grad)) is tuple]
    unstored = [g for g in unstored if _stored(g) is None]
    if unstored:
        Tensor.realize(*unstored)
        for g in unstored:
            if _stored(g) is None:
                _all_tensors.set_uop(g, g.contiguous().realize().uop)
    return [(weakref.ref(t), t.grad, None if t.grad is None else t.grad.uop, _grad_kind(t.grad)) for t in found]


def _grad_set(t: Any, g: Any, uop: UOp | None) -> bool:
    # whether the call bound `t.grad` to another tensor or gave the `.grad` object another value
    return t.grad is not g or (g is not None and g.uop is not uop)


def _grad_bindings(before: list, grads_set: list, read: set[int], input_uops: list[UOp], n_args: int) -> list:
    """A binding per `.grad` the call set (in `grads_set`'s order), then one per other `.grad` whose buffer the kernels
    read; a `.grad` buffer the kernels read joins `input_uops`, after the arguments."""

    def input_index(uop: UOp | None) -> int | None:
        found = None if uop is None else _stored_uop(uop)
        if found is None or id(found[1]) not in read or found[0] in input_uops[:n_args]:
            return None
        if found[0] not in input_uops:
            input_uops.append(found[0])
        return input_uops.index(found[0])

    bindings = []
    for t, g, uop, kind in grads_set:
        bindings.append(_GradBinding(weakref.ref(t), kind, input_index(uop), True, g is not None and t.grad is g))
    set_ids = {id(t) for t, _, _, _ in grads_set}
    for ref, g, uop, kind in before:
        t = ref()
        if t is not None and id(t) not in set_ids and g is not None and (index := input_index(uop)) is not None:
            bindings.append(_GradBinding(ref, kind, index, False))
    return bindings


def _mode_key() -> tuple[bool, int]:
    # the global Tensor.training and how many times an nn.Module's own mode changed: a module's `eval()` changes what
    # its layers compute without touching the global flag, so a capture is made anew after it
    return bool(Tensor.training), Tensor._modes_changed


def _aliasing(uops: list[UOp]) -> tuple[int, ...]:
    """For each argument, the position of the first argument holding the same buffer (its own when none)."""
    return (0,) if len(uops) == 1 else tuple(uops.index(u) for u in uops)


def _held_buffers() -> dict[UOp, list[Tensor]]:
    """Every plain buffer some live tensor holds, with those tensors."""
    held: dict[UOp, list[Tensor]] = {}
    for t in list(_all_tensors):
        if (uop := _plain_buffer(t)) is not None:
            held.setdefault(uop, []).append(t)
    return held


def _flatten_args(args: tuple, kwargs: dict) -> tuple[list[tuple[Any, Any]], list[Any]]:
    """(where, tensor) for every Tensor argument, also inside lists, tuples and dicts (`where`: the position or
    keyword, or for one inside a container a tuple of it and the keys down to the tensor), and every other argument
    (positional then sorted keywords; a container by its type and keys, its other items in their own right)."""
    tensors: list[tuple[Any, Any]] = []
    others: list[Any] = []
    for i, a in enumerate(args):
        _collect(a, (i,), tensors, others)
    for k in sorted(kwargs):
        _collect(kwargs[k], (k,), tensors, others)
    return tensors, others


def _collect(v: Any, path: tuple, tensors: list[tuple[Any, Any]], others: list[Any]) -> None:
    where = path[0] if len(path) == 1 else path
    if isinstance(v, Tensor):
        tensors.append((where, v))
    elif type(v) in (list, tuple) and any(isinstance(x, (Tensor, list, tuple, dict)) for x in v):
        others.append((where, type(v), len(v)))
        for j, x in enumerate(v):
            _collect(x, (*path, j), tensors, others)
    elif type(v) is dict and any(isinstance(x, (Tensor, list, tuple, dict)) for x in v.values()):
        keys = list(v)
        others.append((where, dict, tuple(keys)))
        for key in keys:
            _collect(v[key], (*path, key), tensors, others)
    else:
        others.append(v if type(path[0]) is int and len(path) == 1 else (where, v))


def _replaced(container: Any, path: tuple, value: Any) -> Any:
    # `container` with the item at `path` (keys down into it) replaced: lists and dicts copied, tuples rebuilt
    key = path[0]
    item = value if len(path) == 1 else _replaced(container[key], path[1:], value)
    if type(container) is tuple:
        return container[:key] + (item,) + container[key + 1 :]
    out = container.copy()
    out[key] = item
    return out


# module constants: on Python 3.11 every `Ops.X` is a lookup through EnumType.__getattr__'s slow hook (~0.2 us), and
# a replay looks at every argument and every tensor holding state
_RESHAPE, _BUFFER = Ops.RESHAPE, Ops.BUFFER


def _stored(t: Any) -> tuple[UOp, Buffer] | None:
    """The BUFFER holding exactly `t`'s values in order (the tensor is the buffer or a reshape of it) and its
    allocated Buffer, else None."""
    node = t.uop
    while node.op is _RESHAPE:
        node = node.src[0]
    buf = buffers.get(node) if node.op is _BUFFER else None
    return None if buf is None else (node, buf)


def _stored_uop(node: UOp) -> tuple[UOp, Buffer] | None:
    # `_stored` of a tensor whose graph is `node` (one a `.grad` had before the call changed it)
    while node.op is _RESHAPE:
        node = node.src[0]
    buf = buffers.get(node) if node.op is _BUFFER else None
    return None if buf is None else (node, buf)


def _plain_buffer(t: Any) -> UOp | None:
    """The BUFFER holding exactly `t`'s values in order, else None (see `_stored`)."""
    found = _stored(t)
    return None if found is None else found[0]


def _pending_store(uop: UOp) -> bool:
    # an assign not yet realized: the tensor is the STORE (a bfloat16 one a BITCAST of it)
    return uop.op is Ops.STORE or (uop.op is Ops.BITCAST and uop.src[0].op is Ops.STORE)


def _input_buffer(t: Any) -> tuple[Any, UOp]:
    """The tensor as a plain realized buffer (a contiguous copy when it is a view) and its BUFFER uop."""
    uop = _plain_buffer(t)
    if uop is None:
        t.realize()
        uop = _plain_buffer(t)
    if uop is None:
        t = t.contiguous().realize()
        uop = _plain_buffer(t)
    assert uop is not None, "a realized contiguous tensor is a plain buffer"
    return t, uop


def _map_outputs(ret: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(ret, Tensor):
        return fn(ret)
    if isinstance(ret, (tuple, list)):
        return type(ret)(_map_outputs(r, fn) for r in ret)
    if isinstance(ret, dict):
        return {k: _map_outputs(v, fn) for k, v in ret.items()}
    return ret


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a is b or a == b)
    except Exception:
        return False


class TinyJit(Generic[ReturnType]):
    """Decorator: run `fn` twice normally (warm-up, then capture) and replay its captured kernels afterwards."""

    def __init__(self, fn: Callable[..., ReturnType]) -> None:
        self.fn = fn
        self.cnt = 0
        # the latest capture, and every capture by Tensor.training and how its Tensor arguments alias each other (more
        # than one where they differ in the `.grad`s they found: `_GradBinding`)
        self.captured: _Captured | None = None
        self.captures: dict[tuple[bool, tuple[int, ...]], list[_Captured]] = {}
        # the latest replay whose arguments were all Tensors, positional: per argument weak references to its uop, the
        # BUFFER under it and that Buffer, and the capture it replayed. A call whose tensors hold the same uops replays
        # that capture at once: shapes, dtypes, devices, storage and aliasing are all the uops', so the checks would
        # find what they found then.
        self.last: tuple[tuple[tuple[weakref.ref, ...], ...], _Captured] | None = None
        # as a method decorator: each instance's own TinyJit (see __get__)
        self._per_instance: weakref.WeakKeyDictionary[Any, TinyJit[ReturnType]] = weakref.WeakKeyDictionary()
        functools.update_wrapper(self, fn)

    def reset(self) -> None:
        """Forget the captures: the next call runs the function normally again."""
        self.cnt, self.captured, self.captures, self.last = 0, None, {}, None

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # used as a method decorator: each instance gets a TinyJit of its own, whose function is the method bound to it
        # (weakly), so two models' calls capture and replay their own weights; the instance's tensors are read as a
        # function's globals are. An instance that can't be a weak key (unhashable, no __weakref__) is passed as the
        # first argument of this one, as before: a second such instance is refused (JitError), not replayed with
        # the first one's weights
        if obj is None:
            return self
        try:
            jit = self._per_instance.get(obj)
        except TypeError:
            return functools.partial(self.__call__, obj)
        if jit is None:
            instance, fn = weakref.ref(obj), self.fn

            def method(*args: Any, **kwargs: Any) -> ReturnType:
                return fn(instance(), *args, **kwargs)

            jit = self._per_instance[obj] = TinyJit(method)
        return jit

    @property
    def kernel_count(self) -> int:
        return 0 if self.captured is None else len(self.captured.launches)

    def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
        last = self.last
        training = _mode_key()
        if (
            last is not None
            and not kwargs
            and len(args) == len(last[0])
            and last[1].training == training
            and all(binding.holds() for binding in last[1].grads)
        ):
            # the arguments of the latest replay again (a training loop's fixed inputs, or in-place updated ones)
            last_uops: list[UOp] = []
            last_bufs: list[Buffer] = []
            for a, (uop_ref, plain_ref, buf_ref) in zip(args, last[0], strict=True):
                if type(a) is not Tensor or a.uop is not uop_ref():
                    break
                last_uops.append(plain_ref())
                last_bufs.append(buf_ref())
            else:
                return self._replay(last[1], last_uops, last_bufs)
        tensors, others = _flatten_args(args, kwargs)
        if self.captured is not None:
            self._check_call(tensors, others)
            # the usual replay: every argument is already a plain buffer
            plain: list[UOp] = []
            bufs: list[Buffer] = []
            for _, t in tensors:
                found = _stored(t)
                if found is None:
                    break
                plain.append(found[0])
                bufs.append(found[1])
            else:
                cap = self._find((training, _aliasing(plain)))
                if cap is not None:
                    if not kwargs and len(tensors) == len(args) and all(type(a) is Tensor for a in args):
                        refs = [weakref.ref(a.uop) for a in args], map(weakref.ref, plain), map(weakref.ref, bufs)
                        self.last = (tuple(zip(*refs, strict=True)), cap)
                    return self._replay(cap, plain, bufs)
        # inputs become plain buffers first, so their kernels are not part of the capture
        args_l, kwargs_d = list(args), dict(kwargs)
        input_uops = []
        for where, t in tensors:
            t2, uop = _input_buffer(t)
            input_uops.append(uop)
            top, inner = (where[0], where[1:]) if isinstance(where, tuple) else (where, ())
            into: Any = args_l if isinstance(top, int) else kwargs_d
            into[top] = _replaced(into[top], inner, t2) if inner else t2
        if self.captured is not None and (cap := self._find((training, _aliasing(input_uops)))) is not None:
            return self._replay(cap, input_uops)
        if self.cnt == 0:
            self.cnt = 1
            ret = self.fn(*args_l, **kwargs_d)
            _map_outputs(ret, lambda t: t.realize())
            return ret
        # the second call, or arguments that alias each other differently from every capture so far, or another
        # Tensor.training (replaying the other mode's kernels would be silently wrong: BatchNorm's batch statistics),
        # or `.grad`s of other kinds than every capture's found
        if len(self.captures.get((training, _aliasing(input_uops)), ())) >= MAX_GRAD_VARIANTS:
            raise JitError(
                f"TinyJit: the .grad tensors this function finds differ from all {MAX_GRAD_VARIANTS} captures made "
                "for them (a missing .grad, a constant or a stored gradient: each is captured apart); give them the "
                "same kind at every call, e.g. zero_grad() before every call or inside the function"
            )
        return self._capture(args_l, kwargs_d, tensors, others, input_uops)

    def _capture(self, args: list, kwargs: dict, tensors: list, others: list, input_uops: list[UOp]) -> Any:
        # in-place writes made before the call and still pending (BatchNorm's running statistics after a forward in
        # training mode with no optimizer step) are done now: captured, every replay would write them again
        pending = [t for t in _all_tensors.snapshot() if _pending_store(t.uop)]
        if pending:
            Tensor.realize(*pending)
        grads_before = _plain_grads()
        items: list[ExecItem] = []
        held_before = _held_buffers()
        checks: list[Callable[[], None]] = []
        draws: list[tuple[Buffer, Callable[[], np.ndarray]]] = []
        capturing.append(items)
        capturing_checks.append(checks)
        random_draws.append(draws)
        writes: list[UOp] = []
        recording_writes.append(writes)
        try:
            ret = self.fn(*args, **kwargs)
            _map_outputs(ret, lambda t: t.realize())
            # and in-place writes the call made that nothing realized (BatchNorm's running statistics in a jitted
            # forward): left pending they would be done once, not by every replay; likewise the gradients it set
            # (backward() with the optimizer step outside the function): a replay binds `.grad` to their buffers
            pending = [t for t in _all_tensors.snapshot() if _pending_store(t.uop)]
            grads_set = [
                (t, g, u, k) for ref, g, u, k in grads_before if (t := ref()) is not None and _grad_set(t, g, u)
            ]
            pending += [t.grad for t, _, _, _ in grads_set if t.grad is not None]
            if pending:
                Tensor.realize(*pending)
        finally:
            capturing.pop()
            capturing_checks.pop()
            random_draws.pop()
            recording_writes.pop()
        read = {id(b) for ei in items for b in ei.bufs}
        n_args = len(input_uops)
        input_uops = list(input_uops)
        grads = _grad_bindings(grads_before, grads_set, read, input_uops, n_args)
        input_bufs = {id(buffers[u]): i for i, u in enumerate(input_uops)}
        launches = []
        set_grads = [t.grad for t, _, _, _ in grads_set if t.grad is not None]
        for ei in _drop_unread_copies(items, (ret, set_grads)):
            inputs = tuple((j, input_bufs[id(b)]) for j, b in enumerate(ei.bufs) if id(b) in input_bufs)
            launches.append(_Launch(ei, inputs))
        in_set = set(input_uops)

        def as_output(t: Tensor) -> _Output:
            return _Output(t.uop, any(n in in_set for n in t.uop.toposort()))

        outputs = _map_outputs(ret, as_output)
        for binding, (t, _, _, _) in zip(grads, grads_set, strict=False):
            binding.after = None if t.grad is None else as_output(t.grad)
        signature = tuple(_InputSig(t.shape, t.dtype, t.device) for _, t in tensors)
        state = [
            _State(uop, [weakref.ref(t) for t in holders], holders[0].shape)
            for uop, holders in held_before.items()
            if uop not in in_set and (b := buffers.get(uop)) is not None and id(b) in read
        ]
        self.captured = _Captured(launches, input_uops, outputs, signature, tuple(others), state, checks)
        self.captured.sig_list = [(sig.shape, sig.dtype, sig.device) for sig in signature]
        reads: list[bool] = []
        _map_outputs_uop(outputs, lambda out: reads.append(out.reads_input))
        self.captured.outputs_read_inputs = any(reads)
        self.captured.training = _mode_key()
        # (a draw returned as it is, `return Tensor.rand(3)`, is read by no kernel but is still drawn again)
        _map_outputs(ret, lambda t: read.add(id(b)) if (b := buffers.get(t.uop.base)) is not None else None)
        self.captured.draws = [(b, draw) for b, draw in draws if id(b) in read]
        runners = [launch.item.runner for launch in launches]
        copied = sum(launch.item.bufs[0].nbytes for launch in launches if launch.item.runner is None)
        ops, mem = launch_cost(runners)
        self.captured.cost = (sum(r is not None for r in runners), ops, mem + copied)
        self.captured.grads = grads
        self.captured.overwrites = list(dict.fromkeys(writes))
        self.captured.used = frozenset(id(b) for launch in launches for b in launch.item.bufs)
        self.captures.setdefault((self.captured.training, _aliasing(input_uops[:n_args])), []).append(self.captured)
        self.cnt = 2
        return ret

    def _find(self, key: tuple[bool, tuple[int, ...]]) -> _Captured | None:
        # the capture for this mode and aliasing whose `.grad`s are of the kinds it found
        for cap in self.captures.get(key, ()):
            if all(binding.holds() for binding in cap.grads):
                return cap
        return None

    def _check_call(self, tensors: list, others: list) -> None:
        cap = self.captured
        assert cap is not None
        if len(tensors) != len(cap.signature):
            raise JitError(f"TinyJit: captured with {len(cap.signature)} Tensor arguments, called with {len(tensors)}")
        if (others or cap.others) and (
            len(others) != len(cap.others) or not all(_same(a, b) for a, b in zip(others, cap.others, strict=True))
        ):
            raise JitError("TinyJit: non-Tensor arguments changed since the capture; they are baked into the kernels")
        if [(t.uop.shape, t.uop.dtype, t.uop.device) for _, t in tensors] == cap.sig_list:
            return
        for (where, t), sig in zip(tensors, cap.signature, strict=True):
            if t.shape != sig.shape or t.dtype != sig.dtype or t.device != sig.device:
                raise JitError(
                    f"TinyJit: Tensor argument {where!r} changed from shape {sig.shape} {sig.dtype} on {sig.device} "
                    f"to shape {t.shape} {t.dtype} on {t.device}; a jitted function replays fixed kernels, "
                    "call reset() or use a new TinyJit for new shapes"
                )

    def _replay(self, cap: _Captured, uops: list[UOp], bufs: list[Buffer] | None = None) -> Any:
        for st in cap.state:
            if not st.still_held():
                raise JitError(
                    f"TinyJit: a tensor of shape {st.shape} {st.buf.dtype} that the captured kernels read (not an "
                    "argument) was rebound to new storage or freed since the capture, and a replay would read its old "
                    "values; update it in place with .assign(), pass it as an argument, or call reset() to capture "
                    "again"
                )
        if bufs is None:
            bufs = [buffers[uop] for uop in uops]
        if cap.grads:
            # the `.grad`s the kernels read are the ones of now (a gradient accumulated over two calls)
            grad_uops, grad_bufs = _grad_inputs(cap)
            uops, bufs = uops + grad_uops, bufs + grad_bufs
        for buf, draw in cap.draws:
            values = np.ascontiguousarray(draw())
            if values.size:
                buf.copyin(memoryview(values.reshape(-1)).cast("B"))
        for launch in cap.launches:
            launch.run(bufs)
        if cap.overwrites:
            moved = dict(zip(cap.input_uops, uops, strict=True))
            overwriting([moved.get(b, b) for b in cap.overwrites])
        counters, (kernels, ops, mem) = GlobalCounters, cap.cost
        counters.kernel_count += kernels
        counters.global_ops += ops
        counters.global_mem += mem
        if cap.checks:
            for captured in capturing_checks:
                captured.extend(cap.checks)
            for check in cap.checks:
                check()
        if isinstance(cap.outputs, _Output) and not cap.outputs_read_inputs and not cap.grads:
            return Tensor(cap.outputs.uop)
        swap = {old: new for old, new in zip(cap.input_uops, uops, strict=True) if old is not new}
        for binding in cap.grads:
            if binding.changed and (t := binding.tensor()) is not None:
                # `.grad` as the call leaves it: the same object given the new value where the call kept it
                if binding.after is None:
                    t.grad = None
                    continue
                uop = binding.after.bound(swap)
                if t.grad is None:
                    t.grad = Tensor(uop)
                elif t.grad.uop is not uop:
                    # (a `.grad` the previous replay bound already shows the new values)
                    if binding.same_object:
                        _all_tensors.set_uop(t.grad, uop)
                    else:
                        t.grad = Tensor(uop)
        return _map_outputs_uop(cap.outputs, lambda out: out.tensor(swap))


def _grad_inputs(cap: _Captured) -> tuple[list[UOp], list[Buffer]]:
    """The plain buffers of the `.grad`s the kernels read, in the order of the capture's inputs: a `.grad` not in
    storage of its own is stored first (its value unchanged), one in a buffer the launches use (the previous replay's
    gradient) is copied, since a launch may write that buffer before another reads it."""
    found: dict[int, tuple[UOp, Buffer]] = {}
    for binding in cap.grads:
        if binding.input_index is None:
            continue
        t = binding.tensor()
        if t is None:
            raise JitError("TinyJit: a tensor whose .grad the captured kernels read was freed; call reset()")
        g = t.grad
        if _stored(g) is None:
            g.realize()
        stored = _stored(g)
        if stored is None or id(stored[1]) in cap.used:
            stored = _stored(g.contiguous().realize())
        assert stored is not None, "a realized contiguous tensor is a plain buffer"
        found[binding.input_index] = stored
    at = sorted(found)
    return [found[i][0] for i in at], [found[i][1] for i in at]


def _drop_unread_copies(items: list[ExecItem], ret: Any) -> list[ExecItem]:
    # a copy on write keeps a buffer's old contents for lazy tensors that outlive an assign (the gradients after an
    # optimizer step): a replay updates no tensor graph, so a copy that no later launch and no output reads is dead
    returned: set[int] = set()
    _map_outputs(ret, lambda t: returned.update(id(buffers[u]) for u in t.uop.toposort() if u in buffers))
    read: set[int] = set(returned)
    kept: list[ExecItem] = []
    for ei in reversed(items):
        out = ei.bufs[0]
        if out in copy_on_write_buffers and id(out) not in read:
            continue
        kept.append(ei)
        read.update(id(b) for b in ei.bufs[1:])
    return kept[::-1]


@dataclass(frozen=True)
class _Output:
    """A returned tensor's uop; `reads_input`: it views an input buffer, which the next call's input replaces."""

    uop: UOp
    reads_input: bool

    def bound(self, swap: dict[UOp, UOp]) -> UOp:
        if self.reads_input and swap:
            return self.uop.substitute(swap, name="jit outputs")
        return self.uop

    def tensor(self, swap: dict[UOp, UOp]) -> Tensor:
        return Tensor(self.bound(swap))


def _map_outputs_uop(ret: Any, fn: Callable[[_Output], Any]) -> Any:
    if isinstance(ret, _Output):
        return fn(ret)
    if isinstance(ret, (tuple, list)):
        return type(ret)(_map_outputs_uop(r, fn) for r in ret)
    if isinstance(ret, dict):
        return {k: _map_outputs_uop(v, fn) for k, v in ret.items()}
    return ret


__all__ = ["TinyJit", "JitError"]
