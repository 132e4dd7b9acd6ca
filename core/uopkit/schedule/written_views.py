"""Slices of the graphs that in-place writes leave, read past the writes that don't touch them.

A write into a slice of a tensor that backward() follows (`D[i, 1:] = ...`) makes the tensor's graph
`where(pad(True), pad(value), old)`: the value moved back into place and a mask of the positions written
(`uopkit.tensor.view_writes._placed_through`). A row-by-row recurrence (edit distance, DTW, a Viterbi table) writes
row after row, each computed from a slice of the one before, so the graph of row i's value reads row i - 1 through
i - 1 such wheres over the whole table, each with its row as a constant: the gradient's kernels recomputed the table
whole, one kernel per row, and differentiated every where of the chain. A slice reads only the writes that reach it:
where it lies outside a write's region it reads the old graph, where it lies inside, the value written, and where it
straddles the region's edge, the where of the slices of both (`past_writes`). Row i's value then reads row i - 1's
value and the table as it was before the loop, in the same shapes every row: the kernels of the first row serve all.
"""

from __future__ import annotations

from uopkit.uop.ops import Ops, UOp
from uopkit.uop.weak_map import WeakKeyMap

# (module constants: on Python 3.11 every `Ops.X` is a slow lookup)
_SHRINK, _RESHAPE, _WHERE, _PAD = Ops.SHRINK, Ops.RESHAPE, Ops.WHERE, Ops.PAD


# a write's graph -> (the shape its mask's PAD has, per axis the first and past the last position that it and the
# writes under it write, the graph under the last of them): a slice outside that box reads the graph under all of
# them at once (the chain of a table's rows is walked once, not once per row read)
_chains = WeakKeyMap()


def _write_pad(graph: UOp, shape: tuple[int, ...]) -> UOp | None:
    """The PAD of `graph`'s mask, where `graph` is a write's WHERE over a mask padded to `shape`, else None."""
    return _padded(graph.src[0], shape) if graph.op is _WHERE else None


def _chain_box(graph: UOp, shape: tuple[int, ...]) -> tuple[tuple[tuple[int, int], ...], UOp]:
    """(the box, per axis, that write `graph` and the writes under it write, the graph under them) (`_chains`)."""
    walked = []
    below: tuple[tuple[tuple[int, int], ...], UOp] | None = None
    u = graph
    while (pad := _write_pad(u, shape)) is not None:
        known = _chains.get(u)
        if known is not None and known[0] == shape:
            below = known[1:]
            break
        walked.append((u, pad))
        u = u.src[2]
    if below is None:
        below = (tuple((n, 0) for n in shape), u)
    for u, pad in reversed(walked):
        inner = pad.src[0].shape
        assert inner is not None
        spans = zip(below[0], pad.arg, inner, strict=True)
        box = tuple((min(lo, before), max(hi, before + n)) for (lo, hi), (before, _), n in spans)
        below = (box, below[1])
        _chains[u] = (shape, *below)
    return below


def _all_true(u: UOp) -> bool:
    """Whether `u` is the constant True broadcast (through reshapes and expands)."""
    while u.op is _RESHAPE or u.op is Ops.EXPAND:
        u = u.src[0]
    return u.op is Ops.CONST and u.arg is True


def _in_shape(u: UOp, shape: tuple[int, ...]) -> UOp:
    """`u` (a row-major array of the same size) seen in `shape`."""
    return u if u.shape == shape else UOp(_RESHAPE, u.dtype, (u,), shape)


def _padded(u: UOp, shape: tuple[int, ...]) -> UOp | None:
    """The PAD to `shape` that `u` is (maybe under a RESHAPE from that shape), or None."""
    if u.op is _RESHAPE:
        u = u.src[0]
    return u if u.op is _PAD and u.shape == shape else None


def _shrunk(u: UOp, shape: tuple[int, ...], bounds: tuple[tuple[int, int], ...]) -> UOp:
    """The SHRINK by `bounds` of `u` seen in `shape`; of a PAD, as the PAD of the SHRINK of what it pads (its bounds
    relative to the slice, so that slices at other offsets of the same write are the same graph)."""
    pad = _padded(u, shape)
    inner = pad.src[0] if pad is not None else u
    assert inner.shape is not None
    cut, moved = [], []
    if pad is not None:
        for (lo, hi), (before, _), n in zip(bounds, pad.arg, inner.shape, strict=True):
            first, last = max(lo, before), min(hi, before + n)
            cut.append((first - before, last - before))
            moved.append((first - lo, hi - last))
    if pad is None or any(b >= e for b, e in cut):
        # (a slice of anything else, or of none of what the PAD pads: a SHRINK of it as it is)
        return UOp(_SHRINK, u.dtype, (_in_shape(u, shape),), bounds)
    if any(b != 0 or e != n for (b, e), n in zip(cut, inner.shape, strict=True)):
        inner = UOp(_SHRINK, inner.dtype, (inner,), tuple(cut))
    if any(b or e for b, e in moved):
        inner = UOp(_PAD, inner.dtype, (inner,), tuple(moved))
    return inner


def past_writes(view: UOp) -> UOp | None:
    """SHRINK `view`, of a graph in-place writes left (`where(pad(mask), pad(value), old)`, maybe seen through a
    RESHAPE), as the same values read past the writes that don't reach it (see the module's doc); None where it reads
    no such graph, or only ones it straddles."""
    if view.op is not _SHRINK:
        return None
    bounds, seen = view.arg, view.src[0]
    shape = seen.shape
    assert shape is not None
    graph = seen.src[0] if seen.op is _RESHAPE else seen
    # (mask, value) of each write whose edge the slice straddles, the outermost first
    straddled: list[tuple[UOp, UOp]] = []
    bottom, skipped = None, False
    while graph.op is _WHERE:
        mask, value, old = graph.src
        pad = _padded(mask, shape)
        if pad is None:
            break
        inner = pad.src[0].shape
        assert inner is not None
        spans = zip(bounds, pad.arg, inner, strict=True)
        overlap = [(max(lo, before), min(hi, before + n)) for (lo, hi), (before, _), n in spans]
        if any(first >= last for first, last in overlap):
            # (no element of the slice was written: it reads the old graph, and past every write under it that it
            # lies outside of too)
            box, under = _chain_box(old, shape) if _write_pad(old, shape) is not None else ((), old)
            outside = any(min(hi, end) <= max(lo, begin) for (lo, hi), (begin, end) in zip(bounds, box, strict=False))
            graph, skipped = under if outside else old, True
        elif overlap == list(bounds) and _all_true(pad.src[0]):
            # (every element of the slice was written: it reads the value)
            bottom = _shrunk(value, shape, bounds)
            break
        else:
            straddled.append((_shrunk(mask, shape, bounds), _shrunk(value, shape, bounds)))
            graph = old
    if bottom is None:
        if not skipped:
            return None
        bottom = _shrunk(graph, shape, bounds)
    for mask, value in reversed(straddled):
        bottom = UOp(_WHERE, value.dtype, (mask, value, bottom))
    return bottom
