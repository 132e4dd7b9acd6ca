"""A step applied over and over to its own result (a Jacobi rotation round, a column of an elimination, a panel of a
Cholesky factorization), where every step is the same graph over the previous step's output: the first step's
kernels are captured as they run and launched again for the later steps (`Rounds`), without building, keying or
scheduling a graph per step (that costs ~100x the step's kernels in Python). Where a gradient needs each step's graph,
or a TinyJit is capturing, `repeated` builds the steps' graphs instead (replayed: built once, rebuilt over each
input). As for `replay_call`, a step's graph may depend on nothing but its input's signature, its scalar arguments
and the default dtypes (the capture is kept by those).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from uopkit.device import Buffer
from uopkit.dtype import dtypes
from uopkit.engine.realize import CompiledRunner, ExecItem, buffers, capturing, exec_item
from uopkit.tensor.autocast import replay_key as autocast_replay_key
from uopkit.tensor.replay import replay_call
from uopkit.tensor.support import _reshape_uop
from uopkit.uop.ops import UOp, const_identity

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def repeated(step: Callable[..., Tensor], z: Tensor, count: int, args: tuple = (), graph: bool = False) -> Tensor:
    """`step(z, *args)` applied `count` times, each to the last one's result: by relaunching the first step's kernels
    (`Rounds`), or, with `graph` (a gradient flows through the steps) or inside a TinyJit's capture, as a lazy graph
    of the steps (each built by replaying the first's)."""
    if graph or capturing:
        for _ in range(count):
            z = replay_call(step, (z,), *args).contiguous()
        return z
    if count == 0 or z.numel() == 0:
        # (a step keeps its input's shape: of an empty one, nothing to compute)
        return z
    return Rounds(z, step, args).run(count)


# captured rounds kept at most, and the bytes of their own buffers at most (the least recently used go first): a
# capture holds its round's intermediate values for the next call
MAX_CAPTURED = 64
MAX_CAPTURED_BYTES = 64 << 20


@dataclass
class _Capture:
    """A round's launches, its input's buffer and its output's named by slot (0 and 1) so that the capture holds
    neither; the other buffers are the round's own (values it writes and reads within it). (`relaunch` names its
    op's input and results by slots 0, 1, ...)"""

    launches: list[tuple[CompiledRunner, list[Buffer | int], dict[str, int]]]
    nbytes: int = 0
    # held while launching: two threads running one capture at once would share its own buffers mid-run
    lock: threading.Lock = field(default_factory=threading.Lock, init=False, compare=False, repr=False)

    def launch(self, *slots: Buffer) -> None:
        with self.lock:
            for runner, bufs, var_vals in self.launches:
                exec_item(ExecItem(runner, [slots[b] if isinstance(b, int) else b for b in bufs], var_vals))


# (function, input signature, arguments) -> _Capture, the least recently used first
_captured: dict[tuple, _Capture] = {}


class Rounds:
    """Rounds run as the kernels of the first one, captured as it runs (once per function, input signature and
    arguments: a later call with the same ones builds no graph at all) and launched again on the buffer the last
    round wrote. Two buffers of its own take turns as a round's input and output."""

    def __init__(self, z: Tensor, round_fn: Callable[..., Tensor], args: tuple) -> None:
        self.shape, self.round_fn, self.args = z.shape, round_fn, args
        scalars = tuple((type(a), const_identity(a)) for a in args)
        # (the defaults and an autocast block's casts make other graphs of the same step, as `replay_call` keys them)
        context = (dtypes.default_float, dtypes.default_int, autocast_replay_key())
        self.key = (round_fn, z.shape, z.dtype, z.device, scalars, context)
        self.capture = _captured.pop(self.key, None)
        if self.capture is not None:
            # (put back last: the most recently used)
            _captured[self.key] = self.capture
        # the buffer that holds z (realized, or stored in order where it is a view), whether it is one of ours (else
        # the caller's: never written), and a spare one
        self.current, self.owned, self.spare = z._buffer(), False, None
        self.z: Tensor | None = z if z._is_plain_buffer() else wrapped(self.current, z.shape)

    def run(self, count: int) -> Tensor:
        """z after `count` more rounds."""
        for _ in range(count):
            if self.capture is None:
                self._first()
                continue
            out = self.spare if self.spare is not None else _new_like(self.current)
            self.capture.launch(self.current, out)
            self.spare = self.current if self.owned else None
            self.current, self.owned, self.z = out, True, None
        if self.z is None:
            self.z = wrapped(self.current, self.shape)
        return self.z

    def _first(self) -> None:
        assert self.z is not None
        launches: list[ExecItem] = []
        capturing.append(launches)
        try:
            out = replay_call(self.round_fn, (self.z,), *self.args).contiguous().realize()
        finally:
            # (by identity: lists compare by their items)
            del capturing[next(i for i, c in enumerate(capturing) if c is launches)]
        read, wrote = self.current, out._buffer()
        if wrote is not read and all(item.runner is not None for item in launches):
            # (a copy is never in a round's graph; were there one, the plain graph would run each round)
            slot = {id(read): 0, id(wrote): 1}
            runs = [(item.runner, [slot.get(id(b), b) for b in item.bufs], item.var_vals) for item in launches]
            own = {id(b): b.nbytes for _, bufs, _ in runs for b in bufs if not isinstance(b, int)}
            self.capture = _Capture(runs, sum(own.values()))  # type: ignore[arg-type]
            _keep(self.key, self.capture)
        self.current, self.owned, self.z = wrote, True, out


def _keep(key: tuple, capture: _Capture) -> None:
    _captured[key] = capture
    held = sum(c.nbytes for c in _captured.values())
    while len(_captured) > MAX_CAPTURED or (held > MAX_CAPTURED_BYTES and len(_captured) > 1):
        held -= _captured.pop(next(iter(_captured))).nbytes
    if held > MAX_CAPTURED_BYTES:
        # (one round's values alone past the limit: run again from its graph next call)
        _captured.clear()


def _new_like(buffer: Buffer) -> Buffer:
    out = Buffer(buffer.device, buffer.size, buffer.dtype)
    out.allocate()
    return out


def wrapped(buffer: Buffer, shape: tuple[int, ...]) -> Tensor:
    """A tensor of `shape` whose values are `buffer`'s."""
    node = UOp.new_buffer(buffer.device, buffer.size, buffer.dtype)
    buffers[node] = buffer
    return Tensor(_reshape_uop(node, shape))
