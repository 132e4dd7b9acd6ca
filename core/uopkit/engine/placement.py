"""Where a schedule's new buffers live: a value no later kernel reads gives its memory to the next one computed.

A network of kernels (a sort's 200 exchanges, a factorization's columns, a training step's backward) writes a fresh
value at each step and reads it at the next few. Given a buffer each, all of them are allocated at once: a sort of 1M
float32 (4 MB) held 1.7 GB, and the first touch of those fresh pages was most of its first call. Placed here, a value
that no step reads after step i holds the next value of its device, size and dtype that a step after i writes first,
and the steps run over a handful of buffers (that stay in the caches). A cached schedule's replay places its buffers
with `share_buffers` (`CachedSchedule.placement`), the first run with `first_run_buffers`.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence

from uopkit.device import Buffer
from uopkit.dtype import DType
from uopkit.schedule import ScheduleItem, live_tensors
from uopkit.schedule.grouper import is_kernel_store
from uopkit.uop.ops import Ops, UOp


def share_buffers(
    n_leaves: int, new_buffers: Sequence[tuple[str, int, DType]], steps: Sequence[Sequence[int]], named: Container[int]
) -> tuple[tuple[int, ...], list[tuple[str, int, DType]]]:
    """Per new buffer, its place among the buffers to allocate, and those buffers (`(), []` where none shares one).

    `steps`: the slots each step uses, its output first; slots below `n_leaves` are existing buffers, slot
    `n_leaves + k` is `new_buffers[k]` (device, size, dtype). A buffer in `named` (one left after the call: what a
    template names, what a tensor holds) or that a step reads before any writes it keeps a place of its own; any
    other shares its place with the values of its kind written first after its last reader."""
    last: dict[int, int] = {}
    for i, slots in enumerate(steps):
        for s in slots:
            last[s] = i
    placement = [-1] * len(new_buffers)
    placed_in: list[tuple[str, int, DType]] = []
    free: dict[tuple[str, int, DType], list[int]] = {}
    # places free from the step after the one a value is last read in
    released: dict[int, list[int]] = {}
    for i, slots in enumerate(steps):
        for pos, s in enumerate(slots):
            k = s - n_leaves
            if k < 0 or placement[k] >= 0:
                continue
            kind = new_buffers[k]
            shared = pos == 0 and s not in named
            pool = free.get(kind)
            placement[k] = pool.pop() if shared and pool else len(placed_in)
            if placement[k] == len(placed_in):
                placed_in.append(kind)
            if shared:
                released.setdefault(last[s], []).append(placement[k])
        for place in released.pop(i, ()):
            free.setdefault(placed_in[place], []).append(place)
    if len(placed_in) == len(new_buffers):
        # (none shares a place: each gets a buffer of its own, as without placing)
        return (), []
    return tuple(placement), placed_in


def share_buffers_apart(
    n_leaves: int,
    new_buffers: Sequence[tuple[str, int, DType]],
    steps: Sequence[Sequence[int]],
    named: Sequence[bool],
    apart: set[int],
) -> tuple[tuple[int, ...], tuple[tuple[str, int, DType], ...], tuple[bool, ...]]:
    """`share_buffers` for the new buffers `named` says keep a place of their own (one flag each) and the slots
    `apart`: the places, the buffers to allocate, and the new flags."""
    keep = {n_leaves + k for k, own in enumerate(named) if own} | apart
    placement, placed_in = share_buffers(n_leaves, new_buffers, steps, keep)
    return placement, tuple(placed_in), tuple(n_leaves + k in keep for k in range(len(new_buffers)))


def first_run_buffers(
    schedule: Sequence[ScheduleItem], made_since: int, allocated: Container[UOp]
) -> dict[UOp, Buffer]:
    """Allocated buffers for the BUFFERs that kernelizing made for `schedule` (the ones built after node number
    `made_since`, none of them in `allocated`), placed as a replay places them (`share_buffers`): the first run of a
    sort peaks where its replays do, not at the sum of its values. (Empty where none shares a place.)

    Shared only: a value no live tensor holds once the run is over (`_held_buffers`; what the realized tensors are,
    what other tensors read of the graph, each one's views), written by a kernel on its own device and read by kernels
    on it alone (one in-order queue: a kernel can't overtake the last reader of the memory it gets), not by a copy
    (one between devices may run beside the kernels)."""
    order: dict[UOp, None] = {}
    for item in schedule:
        order.update(dict.fromkeys(item.bufs))
    new = [b for b in order if b.seq > made_since and b.op is Ops.BUFFER and b not in allocated]
    if len(new) < 2:
        return {}
    fresh = set(new)
    kept = _held_buffers(schedule, made_since)
    for item in schedule:
        device = item.bufs[0].arg[1]
        if item.ast.op is Ops.COPY or any(b.arg[1] != device for b in item.bufs):
            kept.update(item.bufs)
    slot = {b: i for i, b in enumerate([b for b in order if b not in fresh] + new)}
    n_leaves = len(order) - len(new)
    placement, placed_in = share_buffers(
        n_leaves,
        [(b.arg[1], b.arg[2], b.dtype) for b in new],
        [[slot[b] for b in item.bufs] for item in schedule],
        {slot[b] for b in kept if b in fresh},
    )
    if not placement:
        return {}
    places = [Buffer(device, size, dtype).allocate() for device, size, dtype in placed_in]
    return {b: places[place] for b, place in zip(new, placement, strict=True)}


def _held_buffers(schedule: Sequence[ScheduleItem], made_since: int) -> set[UOp]:
    """The new BUFFERs of `schedule` that live tensors will hold once it ran: the ones whose kernel STOREs their graphs
    hold now (kernelizing moved every tensor that holds a node given a kernel onto its STORE, and stamped it)."""
    roots = [t.uop for t in live_tensors.changed_since(made_since)]
    held = held_by(roots, lambda u: u.op is Ops.BUFFER or is_kernel_store(u), made_since)
    out = {item.bufs[0] for item in schedule if item.store in held}
    out.update(u for u in held if u.op is Ops.BUFFER)
    return out


def held_by(roots: Iterable[UOp], stop: Callable[[UOp], bool], oldest: int) -> set[UOp]:
    """The nodes `stop` is true for that the graphs of `roots` hold, not looking below them nor below the nodes built
    before node number `oldest` (which hold no newer one)."""
    found: set[UOp] = set()
    seen: set[UOp] = set()
    stack = list(roots)
    while stack:
        u = stack.pop()
        if u in seen or u.seq < oldest:
            continue
        seen.add(u)
        if stop(u):
            found.add(u)
        else:
            stack.extend(u.src)
    return found


__all__ = ["first_run_buffers", "held_by", "share_buffers", "share_buffers_apart"]
