"""An order statistic (sort, topk, kthvalue, median) of an input whose signature was seen before: its kernels
launched again.

Such an op is a fixed handful of kernels whose graph depends only on the input's signature and the op's scalar
arguments, yet building that graph in Python, keying it and replaying its cached schedule cost ~10x the kernels:
argsort of 1000 floats ~1 ms for ~50 us of kernels, topk 50 of a 32000-long row ~3 ms for ~0.35 ms. So, as `Rounds`
does for the rounds of a factorization, the op's kernels are captured as they run and launched again on the next
input of the same signature, into new buffers for the results, without a graph.

The first call with a signature builds the lazy graph as before (its kernels may fuse with what reads the results);
the second stores the input (if it is not a buffer already) and realizes the results while capturing the launches;
later ones launch them. Not where a gradient flows from the input, inside a TinyJit's capture, for bfloat16 (kept as
bits) or empty inputs: the graph is built then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from uopkit.device import Buffer
from uopkit.dtype import DType, dtypes
from uopkit.engine.realize import ExecItem, buffers, capturing
from uopkit.tensor.autocast import replay_key as autocast_replay_key
from uopkit.tensor.grad_mode import is_grad_enabled
from uopkit.tensor.rounds import _Capture, _captured, _keep
from uopkit.uop.ops import GroupOp, Ops, UOp, const_identity, replay_movement

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# whether ops go through `relaunched` at all (tests that count the kernels of the lazy graph turn it off)
ENABLED = True
# inputs of more elements build the graph (their kernels take longer than it; the capture would hold all of their
# intermediate buffers, which a schedule shares)
MAX_ELEMENTS = 1 << 18
# signatures seen (their next call captures), the least recently seen first, at most this many; True: the capture was
# not kept (a copy among its launches, or its buffers past `rounds.MAX_CAPTURED_BYTES`), the graph is built
MAX_SEEN = 256
_seen: dict[tuple, bool] = {}


@dataclass
class _OpCapture(_Capture):
    """The op's launches (slot 0 its input, 1, 2, ... its results' buffers), and its results: each a buffer's
    (device, size, dtype) and the movement ops that view it as the result, (op, arg, shape) as `replay_movement`
    takes them; and the tuple type they come in (None: a single tensor)."""

    results: list[tuple[tuple[str, int, DType], tuple[tuple[Ops, Any, tuple[int, ...]], ...]]] = field(
        default_factory=list
    )
    kind: type | None = None


def relaunched(fn: Callable[..., Any], x: Tensor, *args: Any) -> Any:
    """`fn(x, *args)`: a tensor or a tuple (a NamedTuple too) of tensors, new values computed from x alone whose graph
    depends only on x's shape, dtype and device, the scalar `args` and the defaults. Built as a lazy graph the first
    time; after that launched from the kernels captured on the second call (see the module docstring)."""
    if not ENABLED or capturing or x.dtype == dtypes.bfloat16 or not 0 < x.numel() <= MAX_ELEMENTS:
        return fn(x, *args)
    if not isinstance(x.device, str):
        # (sharded over several devices)
        return fn(x, *args)
    if is_grad_enabled() and x.requires_grad:
        return fn(x, *args)
    scalars = tuple((type(a), const_identity(a)) for a in args)
    context = (dtypes.default_float, dtypes.default_int, autocast_replay_key())
    key = ("relaunched", fn, x.shape, x.dtype, x.device, scalars, context)
    capture = _captured.pop(key, None)
    if capture is None and _seen.get(key, True):
        # (first seen, or refused: a refusal is forgotten with the oldest signatures, and tried again after that)
        if key not in _seen:
            _seen[key] = False
            while len(_seen) > MAX_SEEN:
                _seen.pop(next(iter(_seen)))
        return fn(x, *args)
    if not x._is_plain_buffer():
        # (a lazy input or a view: stored in order first, outside the capture)
        x = x.contiguous().realize()
    if not isinstance(capture, _OpCapture):
        return _first(key, fn, x, args)
    # (put back last: the most recently used)
    _captured[key] = capture
    fresh = [Buffer(*signature).allocate() for signature, _ in capture.results]
    capture.launch(x._buffer(), *fresh)
    outs = []
    for buf, (_, recipe) in zip(fresh, capture.results, strict=True):
        node = UOp.new_buffer(buf.device, buf.size, buf.dtype)
        buffers[node] = buf
        outs.append(Tensor(replay_movement(node, recipe)))
    return _packed(capture.kind, outs)


def _first(key: tuple, fn: Callable[..., Any], x: Tensor, args: tuple) -> Any:
    # the op's graph realized while its launches are captured; kept where it read x and wrote each result into a
    # buffer of its own (which the result views), by kernels alone
    launches: list[ExecItem] = []
    capturing.append(launches)
    try:
        result = fn(x, *args)
        kind = None if not isinstance(result, tuple) else type(result)
        outs = [result] if kind is None else list(result)
        outs[0].realize(*outs[1:])
    finally:
        # (by identity: lists compare by their items)
        del capturing[next(i for i, c in enumerate(capturing) if c is launches)]
    views = [_view_of_buffer(t.uop) for t in outs]
    read = x._buffer()
    wrote = [buffers.get(v[0]) if v is not None else None for v in views]
    ids = [id(read), *map(id, wrote)]
    kept = None not in wrote and len(set(ids)) == len(ids) and launches
    if kept and all(item.runner is not None for item in launches):
        slot = {b: i for i, b in enumerate(ids)}
        runs = _sharing_buffers(
            [(item.runner, [slot.get(id(b), b) for b in item.bufs], item.var_vals) for item in launches]
        )
        own = {id(b): b.nbytes for _, bufs, _ in runs for b in bufs if not isinstance(b, int)}
        results = [((b.device, b.size, b.dtype), v[1]) for b, v in zip(wrote, views, strict=True)]  # type: ignore
        _keep(key, _OpCapture(runs, sum(own.values()), results, kind))  # type: ignore[arg-type]
    # (not kept, or dropped at once for its size: the graph from now on)
    _seen[key] = key not in _captured
    return result


def _sharing_buffers(runs: list[tuple[Any, list[Buffer | int], dict[str, int]]]) -> list:
    """`runs` with their own intermediate values in as few buffers as their lifetimes allow: a value a launch writes
    first (its output, bufs[0], not also read there) goes into a buffer of its signature whose last value has no
    launch reading it from then on. The launches run in order, so the capture holds a few buffers instead of one per
    kernel (argsort of 1e5 floats: 83 buffers of 1 MB, past `rounds.MAX_CAPTURED_BYTES`, so it was never kept). A
    buffer first read in the capture (its value from before it) keeps its own."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, (_, bufs, _) in enumerate(runs):
        for b in bufs:
            if not isinstance(b, int):
                first.setdefault(id(b), i)
                last[id(b)] = i
    fresh = {
        id(bufs[0])
        for i, (_, bufs, _) in enumerate(runs)
        if not isinstance(bufs[0], int) and first[id(bufs[0])] == i and all(b is not bufs[0] for b in bufs[1:])
    }
    # buffers whose value no later launch reads, by signature; and what each fresh value was put in
    free: dict[tuple, list[Buffer]] = {}
    placed: dict[int, Buffer] = {}
    out = []
    for i, (runner, bufs, var_vals) in enumerate(runs):
        target = bufs[0]
        if not isinstance(target, int) and id(target) in fresh and first[id(target)] == i:
            spare = free.get((target.device, target.size, target.dtype))
            placed[id(target)] = spare.pop() if spare else target
        out.append((runner, [placed.get(id(b), b) if not isinstance(b, int) else b for b in bufs], var_vals))
        for b in {id(b): b for b in bufs if not isinstance(b, int)}.values():
            if last[id(b)] == i and id(b) in fresh:
                free.setdefault((b.device, b.size, b.dtype), []).append(placed[id(b)])
    return out


def _view_of_buffer(u: UOp) -> tuple[UOp, tuple[tuple[Ops, Any, tuple[int, ...]], ...]] | None:
    # the BUFFER a realized result is a chain of movement ops over, and that chain from the buffer up; None otherwise
    chain = []
    while u.op in GroupOp.Movement:
        chain.append((u.op, u.arg, u.shape))
        u = u.src[0]
    return (u, tuple(reversed(chain))) if u.op is Ops.BUFFER else None


def _packed(kind: type | None, outs: list[Tensor]) -> Any:
    if kind is None:
        return outs[0]
    return tuple(outs) if kind is tuple else kind(*outs)
