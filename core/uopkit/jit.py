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
from uopkit.tensor import Tensor, _all_tensors, buffers
from uopkit.tensor.creation import random_draws
from uopkit.uop.ops import Ops, UOp

ReturnType = TypeVar("ReturnType")


class JitError(RuntimeError):
    pass


@dataclass(frozen=True)
class _InputSig:
    shape: tuple[int, ...]
    dtype: DType
    device: str


class _Launch:
    """One captured launch with its arguments prepared; `inputs` are (argument position, jit input index) pairs."""

    def __init__(self, ei: ExecItem, inputs: tuple[tuple[int, int], ...]) -> None:
        self.item = ExecItem(ei.runner, list(ei.bufs), dict(ei.var_vals))
        self.inputs = inputs
        runner = ei.runner
        self.program: Any = None
        if runner is not None:
            self.program = runner.program
            self.args = [b.opaque for b in ei.bufs]
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
            if self.inputs:
                args, changed = self.args, False
                for pos, idx in self.inputs:
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
        for pos, idx in self.inputs:
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


@dataclass
class _State:
    buf: UOp
    holders: list[weakref.ref]
    shape: tuple[int, ...]

    def still_held(self) -> bool:
        # some tensor that held the buffer at the capture still does (in-place updates keep the buffer)
        return any((t := ref()) is not None and _plain_buffer(t) is self.buf for ref in self.holders)


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
        # the latest capture, and every capture by Tensor.training and how its Tensor arguments alias each other
        self.captured: _Captured | None = None
        self.captures: dict[tuple[bool, tuple[int, ...]], _Captured] = {}
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
        if last is not None and not kwargs and len(args) == len(last[0]) and last[1].training == training:
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
                cap = self.captures.get((training, _aliasing(plain)))
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
        if self.captured is not None and (cap := self.captures.get((training, _aliasing(input_uops)))) is not None:
            return self._replay(cap, input_uops)
        if self.cnt == 0:
            self.cnt = 1
            ret = self.fn(*args_l, **kwargs_d)
            _map_outputs(ret, lambda t: t.realize())
            return ret
        # the second call, or arguments that alias each other differently from every capture so far, or another
        # Tensor.training (replaying the other mode's kernels would be silently wrong: BatchNorm's batch statistics)
        return self._capture(args_l, kwargs_d, tensors, others, input_uops)

    def _capture(self, args: list, kwargs: dict, tensors: list, others: list, input_uops: list[UOp]) -> Any:
        # in-place writes made before the call and still pending (BatchNorm's running statistics after a forward in
        # training mode with no optimizer step) are done now: captured, every replay would write them again
        pending = [t for t in _all_tensors.snapshot() if _pending_store(t.uop)]
        if pending:
            Tensor.realize(*pending)
        items: list[ExecItem] = []
        held_before = _held_buffers()
        checks: list[Callable[[], None]] = []
        draws: list[tuple[Buffer, Callable[[], np.ndarray]]] = []
        capturing.append(items)
        capturing_checks.append(checks)
        random_draws.append(draws)
        try:
            ret = self.fn(*args, **kwargs)
            _map_outputs(ret, lambda t: t.realize())
            # and in-place writes the call made that nothing realized (BatchNorm's running statistics in a jitted
            # forward): left pending they would be done once, not by every replay
            pending = [t for t in _all_tensors.snapshot() if _pending_store(t.uop)]
            if pending:
                Tensor.realize(*pending)
        finally:
            capturing.pop()
            capturing_checks.pop()
            random_draws.pop()
        input_bufs = {id(buffers[u]): i for i, u in enumerate(input_uops)}
        launches = []
        for ei in _drop_unread_copies(items, ret):
            inputs = tuple((j, input_bufs[id(b)]) for j, b in enumerate(ei.bufs) if id(b) in input_bufs)
            launches.append(_Launch(ei, inputs))
        in_set = set(input_uops)
        outputs = _map_outputs(ret, lambda t: _Output(t.uop, any(n in in_set for n in t.uop.toposort())))
        signature = tuple(_InputSig(t.shape, t.dtype, t.device) for _, t in tensors)
        read = {id(b) for ei in items for b in ei.bufs}
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
        self.captures[(self.captured.training, _aliasing(input_uops))] = self.captured
        self.cnt = 2
        return ret

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
        for buf, draw in cap.draws:
            values = np.ascontiguousarray(draw())
            if values.size:
                buf.copyin(memoryview(values.reshape(-1)).cast("B"))
        for launch in cap.launches:
            launch.run(bufs)
        counters, (kernels, ops, mem) = GlobalCounters, cap.cost
        counters.kernel_count += kernels
        counters.global_ops += ops
        counters.global_mem += mem
        if cap.checks:
            for captured in capturing_checks:
                captured.extend(cap.checks)
            for check in cap.checks:
                check()
        if isinstance(cap.outputs, _Output) and not cap.outputs_read_inputs:
            return Tensor(cap.outputs.uop)
        swap = {old: new for old, new in zip(cap.input_uops, uops, strict=True) if old is not new}
        return _map_outputs_uop(cap.outputs, lambda out: out.tensor(swap))


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

    def tensor(self, swap: dict[UOp, UOp]) -> Tensor:
        if self.reads_input and swap:
            return Tensor(self.uop.substitute(swap, name="jit outputs"))
        return Tensor(self.uop)


def _map_outputs_uop(ret: Any, fn: Callable[[_Output], Any]) -> Any:
    if isinstance(ret, _Output):
        return fn(ret)
    if isinstance(ret, (tuple, list)):
        return type(ret)(_map_outputs_uop(r, fn) for r in ret)
    if isinstance(ret, dict):
        return {k: _map_outputs_uop(v, fn) for k, v in ret.items()}
    return ret


__all__ = ["TinyJit", "JitError"]
