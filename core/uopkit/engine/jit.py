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
tensors (e.g. `Tensor(np.random...)` inside the function is frozen at its captured value), and non-Tensor arguments,
which therefore must not change between calls. Returned tensors are views of the captured output buffers, which every
replay overwrites: copy them (`.numpy()`) to keep a value across calls.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from uopkit.device import Buffer
from uopkit.dtype import DType
from uopkit.engine.realize import ExecItem, capturing, capturing_checks
from uopkit.tensor import Tensor, buffers
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
        if runner is not None:
            self.program = runner.program
            self.args = [b.opaque for b in ei.bufs]
            self.kwargs = {
                "global_size": runner.spec.global_size,
                "local_size": runner.spec.local_size,
                "vals": tuple(ei.var_vals[v] for v in runner.spec.vars),
            }

    def run(self, bufs: list[Buffer]) -> None:
        item = self.item
        for pos, idx in self.inputs:
            item.bufs[pos] = bufs[idx]
        for captured in capturing:
            # an enclosing TinyJit is capturing: it records this launch too
            captured.append(ExecItem(item.runner, list(item.bufs), item.var_vals))
        if item.runner is None:
            item.run()
            return
        args = self.args
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
    # host-side checks of device-computed values (index ranges) that ran during the capture: replays repeat them
    checks: list[Callable[[], None]] = field(default_factory=list)


def _flatten_args(args: tuple, kwargs: dict) -> tuple[list[tuple[Any, Any]], list[Any]]:
    """(where, tensor) for every Tensor argument, and every other argument (positional then sorted keywords)."""
    tensors: list[tuple[Any, Any]] = []
    others: list[Any] = []
    for i, a in enumerate(args):
        (tensors if isinstance(a, Tensor) else others).append((i, a) if isinstance(a, Tensor) else a)
    for k in sorted(kwargs):
        v = kwargs[k]
        (tensors if isinstance(v, Tensor) else others).append((k, v) if isinstance(v, Tensor) else (k, v))
    return tensors, others


def _plain_buffer(t: Any) -> UOp | None:
    """The BUFFER holding exactly `t`'s values in order (the tensor is the buffer or a reshape of it), else None."""
    node = t.uop
    while node.op is Ops.RESHAPE:
        node = node.src[0]
    return node if node.op is Ops.BUFFER and node in buffers else None


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
        self.captured: _Captured | None = None
        functools.update_wrapper(self, fn)

    def reset(self) -> None:
        """Forget the capture: the next call runs the function normally again."""
        self.cnt, self.captured = 0, None

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # used as a method decorator: bind the instance as the first argument
        return self if obj is None else functools.partial(self.__call__, obj)

    @property
    def kernel_count(self) -> int:
        return 0 if self.captured is None else len(self.captured.launches)

    def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
        tensors, others = _flatten_args(args, kwargs)
        if self.captured is not None:
            return self._replay(tensors, others)
        # inputs become plain buffers first, so their kernels are not part of the capture
        args_l, kwargs_d = list(args), dict(kwargs)
        input_uops = []
        for where, t in tensors:
            t2, uop = _input_buffer(t)
            input_uops.append(uop)
            if isinstance(where, int):
                args_l[where] = t2
            else:
                kwargs_d[where] = t2
        if self.cnt == 0:
            self.cnt = 1
            ret = self.fn(*args_l, **kwargs_d)
            _map_outputs(ret, lambda t: t.realize())
            return ret
        return self._capture(args_l, kwargs_d, tensors, others, input_uops)

    def _capture(self, args: list, kwargs: dict, tensors: list, others: list, input_uops: list[UOp]) -> Any:
        items: list[ExecItem] = []
        checks: list[Callable[[], None]] = []
        capturing.append(items)
        capturing_checks.append(checks)
        try:
            ret = self.fn(*args, **kwargs)
            _map_outputs(ret, lambda t: t.realize())
        finally:
            capturing.pop()
            capturing_checks.pop()
        input_bufs = {id(buffers[u]): i for i, u in enumerate(input_uops)}
        launches = []
        for ei in items:
            inputs = tuple((j, input_bufs[id(b)]) for j, b in enumerate(ei.bufs) if id(b) in input_bufs)
            launches.append(_Launch(ei, inputs))
        in_set = set(input_uops)
        outputs = _map_outputs(ret, lambda t: _Output(t.uop, any(n in in_set for n in t.uop.toposort())))
        signature = tuple(_InputSig(t.shape, t.dtype, t.device) for _, t in tensors)
        self.captured = _Captured(launches, input_uops, outputs, signature, tuple(others), checks)
        self.cnt = 2
        return ret

    def _replay(self, tensors: list, others: list) -> Any:
        cap = self.captured
        assert cap is not None
        if len(tensors) != len(cap.signature):
            raise JitError(f"TinyJit: captured with {len(cap.signature)} Tensor arguments, called with {len(tensors)}")
        if len(others) != len(cap.others) or not all(_same(a, b) for a, b in zip(others, cap.others, strict=True)):
            raise JitError("TinyJit: non-Tensor arguments changed since the capture; they are baked into the kernels")
        bufs: list[Buffer] = []
        uops: list[UOp] = []
        for (where, t), sig in zip(tensors, cap.signature, strict=True):
            _, uop = _input_buffer(t)
            if t.uop.shape != sig.shape or uop.dtype != sig.dtype or uop.arg[1] != sig.device:
                raise JitError(
                    f"TinyJit: Tensor argument {where!r} changed from shape {sig.shape} {sig.dtype} on {sig.device} "
                    f"to shape {t.shape} {t.dtype} on {t.device}; a jitted function replays fixed kernels, "
                    "call reset() or use a new TinyJit for new shapes"
                )
            uops.append(uop)
            bufs.append(buffers[uop])
        for launch in cap.launches:
            launch.run(bufs)
        for captured in capturing_checks:
            captured.extend(cap.checks)
        for check in cap.checks:
            check()
        swap = {old: new for old, new in zip(cap.input_uops, uops, strict=True) if old is not new}
        return _map_outputs_uop(cap.outputs, lambda out: out.tensor(swap))


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
