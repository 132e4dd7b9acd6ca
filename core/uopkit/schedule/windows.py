"""Kernels that read a window of a buffer take the window's start as a launch value.

A training loop reads batch after batch of a dataset (`X[i:i+64]`), a recurrent network step after step of its input
(`xs[t]`, or `x[:, t]` batch first): the same work at another offset into the same buffer. With the offset written
into the kernel each of them is a kernel of its own, compiled again (a first epoch of 100 batches compiled 615
kernels). Here an input that a kernel reads only through SHRINKs of it (any slice of the buffer, seen flat or in one
shape) becomes a *windowed* load: `LOAD(DEFINE_GLOBAL, start)` of the elements from the window's first to its last,
their count as its arg, where `start` is a DEFINE_VAR (on a renderer whose vectors need aligned addresses, times the
start's largest power-of-two factor up to `ALIGN`, so that vector accesses know the alignment a constant start gave
them; with several windows of a buffer, times what any start of its shape is a multiple of). The slice becomes a view
of that run (`_window_view`). Likewise the output buffer, when the kernel stores into runs of it only (`out[i] = ...`,
a cache's next position): its STORE gets the start as a third source, and its target views the buffer from 0. The
kernel's AST no longer holds the offset; the schedule item carries the variable's value, passed at launch like any
other variable of the renderer contract.

The schedule cache (`uopkit.engine.realize`) keys such a slice of a stored buffer by its shape alone and moves the
starts (and the bounds of the views it hands back) on a replay: the next batch reuses the first one's schedule.

Each window a kernel reads of an input buffer takes a start of its own (`window1`, `window1_1`, ...): a batch stacked
from rows of a dataset (`stack([data[i:i+n] for i in ix])`) reads a window per row, and the next batch's rows lie at
other distances from each other, so one start per buffer would bake the distances into the kernel and compile one
per batch. The output buffer keeps one start for all its windows (an in-place update reads and writes it at fixed
distances). A buffer that a kernel reads through any other view is left as it was; a dataset's buffer read whole beside
its windows (`Y[i] - Y`) keeps that read as it is and takes its windows' starts, as long as nothing computed from the
whole read is sliced or mirrored (such an offset would be a constant a replay can't move).
"""

from __future__ import annotations

import math
import re

from uopkit.dtype import dtypes
from uopkit.helpers import shrink_span
from uopkit.uop.ops import GroupOp, Ops, UOp

INT32_MAX = 2**31 - 1
# a window's start is known to be a multiple of gcd(start, ALIGN) elements: enough for any vector access (64 lanes)
ALIGN = 64


# a kernel takes at most this many window starts of its inputs (launch values are kernel arguments, which a device
# limits: OpenCL promises 1 KiB of them); past it, an input's windows share one start
MAX_WINDOW_STARTS = 64


def window_name(arg: int, k: int = 0) -> str:
    """The launch value's name for the `k`th window of buffer argument `arg`."""
    return f"window{arg}" if k == 0 else f"window{arg}_{k}"


def _window_view(part: UOp, shape: tuple[int, ...], lengths: tuple[int, ...]) -> UOp:
    """The view a SHRINK to `lengths` of a row-major array of `shape` takes, over `part`: the flat run of its span from
    its first element on. A run of whole rows is a RESHAPE of it; else (a column `x[:, t]`, a crop) it is padded to
    whole outer rows, shaped as the array and cut (the pad lies past the last element read: no element reads it)."""
    span = part.shape[0] if part.shape else 1
    if span == math.prod(lengths):
        return part if lengths == (span,) else UOp(Ops.RESHAPE, part.dtype, (part,), lengths)
    rows = lengths[0] * math.prod(shape[1:])
    if rows > span:
        part = UOp(Ops.PAD, part.dtype, (part,), ((0, rows - span),))
    grid = UOp(Ops.RESHAPE, part.dtype, (part,), (lengths[0], *shape[1:]))
    return UOp(Ops.SHRINK, part.dtype, (grid,), tuple((0, n) for n in lengths))


def _is_load_view(view: UOp) -> bool:
    """Whether window `view` reads a load of the buffer (else it is a store target, a view of the buffer itself)."""
    under = view.src[0].src[0] if view.src[0].op is Ops.RESHAPE else view.src[0]
    return under.op is Ops.LOAD


def _store_rows(view: UOp) -> int:
    """How many elements the whole outer rows of SHRINK `view`'s source hold that it cuts from (`_window_view`'s grid
    without padding)."""
    shape, lengths = view.src[0].shape, view.shape
    assert shape is not None and lengths is not None
    return lengths[0] * math.prod(shape[1:])


def _stride_gcd(view: UOp) -> int:
    """What the start of SHRINK `view` is a multiple of, whatever its bounds: the strides of the axes it cuts (0:
    none)."""
    shape = view.src[0].shape
    assert shape is not None
    g, stride = 0, 1
    for size, bounds in zip(reversed(shape), reversed(view.arg), strict=True):
        if bounds != (0, size):
            g = math.gcd(g, stride)
        stride *= size
    return g


def _over_buffer(u: UOp) -> bool:
    """Whether `u` is a whole buffer as a kernel sees it (an input's load, the output itself) or a RESHAPE of one."""
    if u.op is Ops.RESHAPE:
        u = u.src[0]
    return u.op is Ops.DEFINE_GLOBAL or (u.op is Ops.LOAD and len(u.src) == 1 and u.src[0].op is Ops.DEFINE_GLOBAL)


def _shrunk(u: UOp, bounds: tuple[tuple[int, int], ...]) -> UOp | None:
    """SHRINK by `bounds` of `u`, an elementwise expression of whole buffers and of broadcast values, as that expression
    of the buffers' SHRINKs (the broadcasts only take the smaller shape); None where `u` computes from anything else."""
    if _over_buffer(u):
        return UOp(Ops.SHRINK, u.dtype, (u,), bounds)
    if u.op is Ops.EXPAND:
        # (a broadcast along every axis that is cut: the same value, in the smaller shape)
        inner, shape = u.src[0].shape, u.shape
        if inner is None or shape is None or len(inner) != len(shape):
            return None
        if any(n != 1 and b != (0, size) for n, size, b in zip(inner, shape, bounds, strict=True)):
            return None
        return UOp(Ops.EXPAND, u.dtype, (u.src[0],), tuple(e - b for b, e in bounds))
    # (a BITCAST may change the element size, and with it the shape)
    if u.op not in GroupOp.Elementwise or u.op is Ops.BITCAST or any(s.shape != u.shape for s in u.src):
        return None
    srcs = [_shrunk(s, bounds) for s in u.src]
    if any(s is None for s in srcs):
        return None
    return u.replace(src=srcs)


def _windows_of(
    base: UOp, users: dict[UOp, list[UOp]], skip: Ops | None = None, whole: set[UOp] | None = None
) -> dict[UOp, tuple[int, int]] | None:
    """Each view through which `base` (a whole buffer, flat) is read or written, mapped to the window it takes,
    (start, span): SHRINKs of the buffer or of a RESHAPE of it (users of op `skip` aside). None when any use is
    through something else, except, with `whole` given (a set of the users that read no window, `_reads_whole`), a
    use that reads all of the buffer at offsets no window moves: the kernel keeps that read as it is."""
    found: dict[UOp, tuple[int, int]] = {}
    for u in users.get(base, []):
        if u.op is skip:
            continue
        if u.op is Ops.SHRINK:
            found[u] = shrink_span(base.shape or (), u.arg)
            continue
        if u.op is not Ops.RESHAPE or not users.get(u):
            if whole is not None and _reads_whole(u, users, whole):
                continue
            return None
        for v in users[u]:
            if v.op is not Ops.SHRINK:
                if whole is not None and _reads_whole(v, users, whole):
                    continue
                return None
            found[v] = shrink_span(u.arg, v.arg)
    return found


def _reads_whole(u: UOp, users: dict[UOp, list[UOp]], whole: set[UOp]) -> bool:
    """Whether nothing computed from `u` takes a slice or a mirror of it (no SHRINK or FLIP among its users, however
    far): then `u` reads its buffer at offsets that are constants of the kernel's, not a window's that a replay moves
    (`Y[i] - Y`, the row of a buffer against all of it). `whole`: the nodes known to pass, added to."""
    stack = [u]
    while stack:
        n = stack.pop()
        if n in whole:
            continue
        if n.op is Ops.SHRINK or n.op is Ops.FLIP:
            return False
        whole.add(n)
        stack.extend(users.get(n, ()))
    return True


def _buffer_windows(
    buf: UOp, users: dict[UOp, list[UOp]], existing: frozenset[int] = frozenset()
) -> tuple[list[UOp], dict[UOp, tuple[int, int]]] | None:
    """The loads of kernel buffer `buf` and every window the kernel takes of it (of a load, or of the output
    buffer itself to store into), or None when it reads or writes any of it otherwise. An input that holds data from
    before the schedule (`existing`) may also be read whole beside its windows (`_windows_of`)."""
    loads = [u for u in users.get(buf, []) if u.op is Ops.LOAD]
    if any(len(u.src) != 1 for u in loads) or (buf.arg != 0 and len(users.get(buf, [])) != len(loads)):
        return None
    whole: set[UOp] | None = set() if buf.arg != 0 and buf.arg in existing else None
    windows: dict[UOp, tuple[int, int]] = {}
    for load in loads:
        found = _windows_of(load, users, whole=whole)
        if found is None:
            return None
        windows.update(found)
    if buf.arg == 0:
        # the output's STORE targets (`window_inputs` checks that a strided one, `cache[:, :, pos]`, has its rows)
        stored = _windows_of(buf, users, skip=Ops.LOAD)
        if stored is None:
            return None
        windows.update(stored)
    return (loads, windows) if windows else None


def window_inputs(
    ast: UOp, vector_align: int = 0, existing: frozenset[int] = frozenset()
) -> tuple[UOp, dict[UOp, int]]:
    """`ast` with each buffer it reads (or stores into) only through SHRINKs of it taken as a window: read through a
    windowed load, written by a STORE with the window's start as its third source; and the values of the window
    starts' variables. `vector_align`: the renderer's (`RendererCaps.vector_align`); where it is 0 a vector access
    needs no alignment and every start is just a variable (one kernel for all starts). `existing`: the buffer
    arguments that hold data from before the schedule (a dataset), whose windows in runs of memory each take a
    start; the windows of any other buffer share one."""
    if ast.op is not Ops.SINK:
        return ast, {}
    topo = list(ast.toposort())
    # a slice of a value computed elementwise from a buffer (the backward of `stack` of a REINFORCE episode's per-step
    # log-probs: step t reads element t of `-returns`, fused as SHRINK(MUL(LOAD, -1))) reads a window of that buffer:
    # the slice moves down onto its load, so that the start is a launch value, not one kernel per step
    pushed = {
        u: moved
        for u in topo
        if u.op is Ops.SHRINK and u.src[0].op in GroupOp.Elementwise and (moved := _shrunk(u.src[0], u.arg)) is not None
    }
    if pushed:
        new, values = _window_inputs(ast.substitute(pushed, name="slices onto loads"), vector_align, existing)
        if values:
            return new, values
    return _window_inputs(ast, vector_align, existing, topo)


def _window_inputs(
    ast: UOp, vector_align: int, existing: frozenset[int], topo: list[UOp] | None = None
) -> tuple[UOp, dict[UOp, int]]:
    if topo is None:
        topo = list(ast.toposort())
    # (most kernels take no window: one look at each SHRINK tells, before any map of users is built)
    if not any(u.op is Ops.SHRINK and _over_buffer(u.src[0]) for u in topo):
        return ast, {}
    users: dict[UOp, list[UOp]] = {}
    for u in topo:
        for s in u.src:
            users.setdefault(s, []).append(u)
    replace: dict[UOp, UOp] = {}
    values: dict[UOp, int] = {}
    store_starts: dict[int, UOp] = {}
    found_all = [
        (buf, found) for buf in topo if buf.op is Ops.DEFINE_GLOBAL and (found := _buffer_windows(buf, users, existing))
    ]
    starts_left = MAX_WINDOW_STARTS
    for buf, (_, windows) in found_all:
        size = buf.dtype.size
        spans = [span for _, span in windows.values()]
        if max(spans) >= size or size > INT32_MAX or min(spans) <= 0:
            # (all of it is no window; launch values are 32-bit: a start past them stays a constant; an empty slice
            # reads nothing, wherever it starts)
            continue
        # an input's windows each start where they will (the output's keep their distances, see the module's doc)
        runs = list(dict.fromkeys(windows.values()))
        # (a buffer this schedule computes is read where it was written: its windows never move, and known distances
        # between them keep the index arithmetic simple; a strided window keeps them too)
        shared = (
            buf.arg not in existing
            or len(runs) > starts_left
            or any(span != math.prod(view.shape or ()) for view, (_, span) in windows.items())
        )
        if shared:
            lo = min(start for start, _ in runs)
            runs = [(lo, max(start + span for start, span in runs) - lo)]
            if runs[0][1] >= size:
                continue
        if buf.arg == 0 and any(
            begin - (runs[0][0] if shared else begin) + _store_rows(view) > size
            for view, (begin, span) in windows.items()
            if span != math.prod(view.shape or ()) and not _is_load_view(view)
        ):
            # (a store writes through no pad: a strided window is whole rows of the buffer from its start, which
            # must lie inside it)
            continue
        starts_left -= 0 if buf.arg == 0 else len(runs)
        starts: dict[tuple[int, int], tuple[UOp, UOp]] = {}
        for k, (lo, extent) in enumerate(runs):
            if vector_align <= 0:
                align = 1
            elif len(runs) == 1:
                align = math.gcd(lo, ALIGN)
            else:
                # what every start of this shape is a multiple of: the next batch's rows start elsewhere, each at its
                # own power of two, and a kernel per combination would compile again and again
                align = math.gcd(ALIGN, *(_stride_gcd(v) for v, run in windows.items() if run == (lo, extent)))
            var = UOp.variable(window_name(buf.arg, k), 0, (size - extent) // align, dtypes.index)
            start = var if align == 1 else var * align
            values[var] = lo // align
            starts[(lo, extent)] = start, UOp(Ops.LOAD, buf.dtype.base, (buf, start), extent)
        if buf.arg == 0:
            store_starts[buf.arg] = starts[runs[0]][0]
        for view, (begin, span) in windows.items():
            lo, extent = runs[0] if shared else (begin, span)
            if _is_load_view(view):
                part = starts[(lo, extent)][1]
                if span != extent:
                    part = UOp(Ops.SHRINK, part.dtype, (part,), ((begin - lo, begin - lo + span),))
            else:
                # a store target: a view of the buffer itself, at offsets from the window's start (a strided one
                # through whole rows of it, as a store writes through no pad: `cache[:, :, pos] = k`)
                rows = span if span == math.prod(view.shape or ()) else _store_rows(view)
                part = UOp(Ops.SHRINK, buf.dtype.base, (buf,), ((begin - lo, begin - lo + rows),))
            shape = view.src[0].shape
            assert shape is not None and view.shape is not None
            replace[view] = _window_view(part, shape, view.shape)
    if not replace:
        return ast, {}
    new = ast.substitute(replace, name="window inputs")
    if store_starts:
        new = new.replace(
            src=tuple(
                st.replace(src=(*st.src, store_starts[base.arg]))
                if (base := st.src[0].base).op is Ops.DEFINE_GLOBAL and base.arg in store_starts
                else st
                for st in new.src
            )
        )
    return new, values


def buffer_window(shrink: UOp) -> tuple[int, int] | None:
    """(start, span) in elements of the window a tensor-graph SHRINK takes of a BUFFER seen in some shape (under a
    chain of RESHAPEs: a realized cumsum's or matmul's result is a reshape of a reshape of its buffer) or of a FLIP of
    one (`mirror_bounds`), the window a kernel reading it gets as a launch value; None for any other SHRINK. (The
    schedule cache keys such a SHRINK by its shape alone: the next batch's graph replays the same schedule with other
    starts.)"""
    src, bounds = shrink.src[0], shrink.arg
    if src.op is Ops.FLIP:
        bounds = mirror_bounds(bounds, src.arg, src.shape or ())
        src = src.src[0]
    shape = src.shape
    while src.op is Ops.RESHAPE:
        src = src.src[0]
    if src.op is not Ops.BUFFER or src.arg[2] > INT32_MAX:
        return None
    assert shape is not None
    return shrink_span(shape, bounds)


def mirror_bounds(
    bounds: tuple[tuple[int, int], ...], flips: tuple[bool, ...], shape: tuple[int, ...]
) -> tuple[tuple[int, int], ...]:
    """The bounds of the SHRINK of an array of `shape` that a SHRINK by `bounds` of its FLIP by `flips` reads (a slice
    of a flipped array is the flipped slice mirrored along the flipped axes); its own inverse."""
    return tuple((n - e, n - b) if f else (b, e) for (b, e), f, n in zip(bounds, flips, shape, strict=True))


def window_extent(ast: UOp, name: str) -> tuple[int, int]:
    """(what its start is a multiple of, how many elements it spans) of the window of kernel `ast` whose start is the
    launch value `name` (its value counts in the first)."""
    for u in ast.toposort():
        if u.op is Ops.LOAD and len(u.src) == 2 and u.src[0].op is Ops.DEFINE_GLOBAL:
            start, span = u.src[1], u.arg
        elif u.op is Ops.STORE and len(u.src) == 3:
            start, span = u.src[2], -1
        else:
            continue
        var = start.src[0] if start.op is Ops.MUL else start
        if var.arg[0] == name:
            return (start.src[1].arg if start.op is Ops.MUL else 1), span
    raise ValueError(f"the kernel has no window start {name}")


# `window_name`'s forms: window<arg> and window<arg>_<k>
_WINDOW_NAME = re.compile(r"window(\d+)(?:_\d+)?")


def window_arg(name: str) -> int | None:
    """The buffer argument whose window start the variable `name` is (`window_name`'s inverse), None for another."""
    found = _WINDOW_NAME.fullmatch(name)
    return int(found[1]) if found else None


def window_start(shape: tuple[int, ...], bounds: tuple[tuple[int, int], ...]) -> int:
    """The first element (flat, in elements) of a SHRINK by `bounds` of a row-major array of `shape`."""
    return shrink_span(shape, bounds)[0]


def window_span(shape: tuple[int, ...], bounds: tuple[tuple[int, int], ...]) -> int:
    """How far past its first element the last one of a SHRINK by `bounds` of a row-major array of `shape` lies, plus
    one."""
    return shrink_span(shape, bounds)[1]


def window_bounds(shape: tuple[int, ...], lengths: tuple[int, ...], start: int) -> tuple[tuple[int, int], ...] | None:
    """The bounds of the SHRINK to `lengths` of a row-major array of `shape` whose first element is `start` (the
    inverse of `window_start`), None when there is no such SHRINK."""
    firsts = []
    for size in reversed(shape):
        start, first = divmod(start, size)
        firsts.append(first)
    firsts.reverse()
    if start or any(b + n > size for b, n, size in zip(firsts, lengths, shape, strict=True)):
        return None
    return tuple((b, b + n) for b, n in zip(firsts, lengths, strict=True))
