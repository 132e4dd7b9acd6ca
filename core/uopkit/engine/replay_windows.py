"""Windows of a BUFFER in a cached schedule (the next batch of a dataset, a slice that moves each step): what a replay
needs to move them, recorded with the schedule (`record_windows`), and the launch values and bounds that move them
on a replay (`window_values`). The schedule cache keys such a window by its shape alone (`_parameterize`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from uopkit.schedule import ScheduleItem
from uopkit.schedule.windows import (
    buffer_window,
    mirror_bounds,
    window_arg,
    window_bounds,
    window_extent,
    window_span,
    window_start,
)
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.engine.realize import CachedSchedule, CachedStep
    from uopkit.engine.realize import _Param as Param
    from uopkit.engine.replay_templates import Template


def record_windows(
    schedule: list[ScheduleItem],
    param: Param,
    slot: dict[UOp, int],
    steps: list[CachedStep],
    templates: list[Template],
) -> tuple[Any, ...]:
    """What a replay needs to move the graph's windows of its BUFFERs (the fields `window_slots` to
    `template_windows`)."""
    if not param.windows:
        return (), (), frozenset(), (), ()
    window_slots = tuple(slot[b] for b, _, _ in param.windows)
    windowed = set(window_slots)
    groups = _window_groups(param, window_slots)
    fixed: set[int] = {slot[b] for b in _sliced_otherwise(param)}
    window_vars = []
    for i, (item, step) in enumerate(zip(schedule, steps, strict=True)):
        starts: dict[int, list[tuple[str, int]]] = {}
        for name, value in step.var_vals:
            if (arg := window_arg(name)) is not None:
                starts.setdefault(arg, []).append((name, value))
        for arg, s in enumerate(step.slots):
            if s not in windowed:
                continue
            if arg not in starts:
                # written, or read whole or through another view: at a constant offset
                fixed.add(s)
                continue
            for name, value in starts[arg]:
                align, span = window_extent(item.ast, name)
                # (the output's windows keep their distances: they move with all of the buffer's)
                group = groups[s].get((value * align, span), ()) if arg != 0 else ()
                window_vars.append((i, name, s, value * align, align, group))
    template_windows = []
    for t, template in enumerate(templates):
        for j, ins in enumerate(template):
            if ins[0] is not Ops.SHRINK:
                continue
            # (the SHRINKs `buffer_window` keys by their shape: of a slot under RESHAPEs, or of a FLIP of that)
            bounds, src, flips = ins[2], template[ins[3][0]], None
            if src[0] is Ops.FLIP:
                flips, src = src[2], template[src[3][0]]
            shape = src[2] if src[0] is Ops.RESHAPE else None
            while src[0] is Ops.RESHAPE:
                src = template[src[3][0]]
            if src[0] != "slot" or src[1] not in windowed:
                continue
            s = src[1]
            shape = shape or (param.leaves[s].arg[2],)
            if flips is not None:
                bounds = mirror_bounds(bounds, flips, shape)
            lengths = tuple(e - b for b, e in bounds)
            start = window_start(shape, bounds)
            group = groups[s].get((start, window_span(shape, bounds)), ())
            template_windows.append((t, j, s, shape, lengths, start, group, flips))
    return (
        window_slots,
        tuple(start for _, start, _ in param.windows),
        frozenset(fixed),
        tuple(window_vars),
        tuple(template_windows),
    )


def _sliced_otherwise(param: Param) -> set[UOp]:
    """The windowed BUFFERs of the graph that it also slices otherwise: a value computed from the buffer is sliced or
    mirrored further on (`(y * 2)[1:3]` beside the window `y[i]`). A kernel may read such a slice as a window of the
    buffer (`schedule.windows` moves slices of elementwise values onto the loads), at a start the graph's key holds
    as a constant, and it may even coincide with a window that moves: a replay can't tell them apart, so a graph whose
    windows of such a buffer moved is scheduled again. A buffer also read whole (`y[i] - y`) is not one of them."""
    bufs = {b for b, _, _ in param.windows}
    users: dict[UOp, list[UOp]] = {}
    for u in param.topo:
        for src in u.src:
            users.setdefault(src, []).append(u)
    # (the nodes from which no slice is reached, shared by the walks)
    clean: set[UOp] = set()
    sliced: set[UOp] = set()
    for b in bufs:
        views, reads = [b], []
        while views:
            v = views.pop()
            for u in users.get(v, ()):
                if u.op is Ops.RESHAPE or u.op is Ops.FLIP:
                    views.append(u)
                elif u.op is not Ops.SHRINK or buffer_window(u) is None:
                    reads.append(u)
        seen: set[UOp] = set()
        while reads:
            n = reads.pop()
            if n in clean or n in seen:
                continue
            if n.op is Ops.SHRINK or n.op is Ops.FLIP:
                sliced.add(b)
                break
            seen.add(n)
            reads.extend(users.get(n, ()))
        else:
            clean |= seen
    return sliced


def _window_groups(param: Param, window_slots: tuple[int, ...]) -> dict[int, dict[tuple[int, int], tuple[int, ...]]]:
    """Per slot, the graph's windows (by place in `param.windows`) over each run of its elements (start, span): a
    kernel's or a template's window over exactly those elements moves with them on a replay, any other with all of
    the slot's windows alike (a window of a window). A slot where some window lies inside another has no runs: a
    window taken of the outer one could match the inner one by its elements."""
    groups: dict[int, dict[tuple[int, int], tuple[int, ...]]] = {}
    for k, ((_, b, n), s) in enumerate(zip(param.windows, window_slots, strict=True)):
        runs = groups.setdefault(s, {})
        runs[(b, n)] = (*runs.get((b, n), ()), k)
    for s, runs in groups.items():
        # by start, the longest first: a run lies inside another one exactly when it ends before the furthest end yet
        furthest = -1
        for b, n in sorted(runs, key=lambda r: (r[0], -r[1])):
            if b + n <= furthest:
                groups[s] = {}
                break
            furthest = b + n
    return groups


# a replay's moved windows: the launch values of the steps that take one, by step; the SHRINK bounds of the templates
# that hold one, by template (numbered results first) and instruction
Moved = tuple[dict[int, dict[str, int]], dict[int, dict[int, tuple[tuple[int, int], ...]]]]
# a slot whose windows moved by different amounts: a window that moves with all of them can't replay
_APART = object()


def window_values(entry: CachedSchedule, param: Param) -> Moved | None:
    """What moved since `entry` was recorded (nothing when no window did), or None when the entry can't replay this
    graph: a window moved where a step holds its offset, windows that a kernel reads at fixed distances moved apart,
    or a start lost the alignment its kernel counts on."""
    if not param.windows:
        # (most graphs: the same key has as many windows, none)
        return {}, {}
    starts = [start for _, start, _ in param.windows]
    if len(starts) == len(entry.window_starts) and all(map(int.__eq__, starts, entry.window_starts)):
        return {}, {}
    shifts = [now - then for now, then in zip(starts, entry.window_starts, strict=True)]
    by_slot: dict[int, Any] = {}
    for s, shift in zip(entry.window_slots, shifts, strict=True):
        if shift and s in entry.fixed_slots:
            return None
        if by_slot.setdefault(s, shift) != shift:
            by_slot[s] = _APART

    def moved_by(s: int, group: tuple[int, ...]) -> Any:
        if not group:
            return by_slot.get(s, 0)
        shift = shifts[group[0]]
        return shift if all(shifts[k] == shift for k in group) else _APART

    values: dict[int, dict[str, int]] = {}
    for i, name, s, start, align, group in entry.window_vars:
        shift = moved_by(s, group)
        if shift is _APART or (start + shift) % align:
            return None
        if shift:
            values.setdefault(i, dict(entry.steps[i].var_vals))[name] = (start + shift) // align
    bounds: dict[int, dict[int, tuple[tuple[int, int], ...]]] = {}
    for t, j, s, shape, lengths, start, group, flips in entry.template_windows:
        shift = moved_by(s, group)
        if shift is _APART:
            return None
        if shift:
            moved_bounds = window_bounds(shape, lengths, start + shift)
            if moved_bounds is None:
                return None
            if flips is not None:
                moved_bounds = mirror_bounds(moved_bounds, flips, shape)
            bounds.setdefault(t, {})[j] = moved_bounds
    return values, bounds
