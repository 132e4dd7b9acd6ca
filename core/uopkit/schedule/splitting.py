"""Split a long reduce into few outputs in two, so that its work can be shared among CPU threads.

A kernel shares its *output* among threads (`OptOps.THREAD`): a sum of 16M elements into one number, or a matmul of
a few rows and columns over a long K, has one or a handful of output blocks and runs on one core. Rewritten as
partial reduces over `parts` slices of the reduce axis (a kernel with `parts` times more outputs, threaded like any
other), then a reduce over the partials (a small second kernel), it uses every core.

The split depends only on the shapes, never on the thread count: a sum gives the same bits on every machine. The
scheduler decides, once the graph is complete and before it kernelizes (like `packing.pack_panels`), and only for
devices whose renderer runs threads.
"""

from __future__ import annotations

import math

from uopkit.dtype import dtypes
from uopkit.uop.ops import Ops, UOp

# split only a reduce into at most this many outputs (more outputs are already blocks enough for the threads) ...
MAX_OUTPUTS = 256
# ... of at least this much work (outputs times reduce length): the second kernel's launch (a few us) must be small
# against what the threads save ...
MIN_WORK = 1 << 22
# ... into enough blocks of partial results for this many threads (a kernel's register tile holds up to
# TILE outputs: a block) ...
PARTIAL_BLOCKS = 64
TILE = 64
# ... each at least this long (a partial reduce keeps long vector loops), and at most this many
MIN_SLICE = 1024
MAX_PARTS = 256


def _threads_device(device: str) -> bool:
    from uopkit.device import Device

    try:
        return bool(Device[device].renderer.caps.has_threads)
    except Exception:  # noqa: BLE001 - a device that can't open here gets no split
        return False


def split_parts(outputs: int, length: int) -> int:
    """How many slices to cut a reduce of `length` elements into, for `outputs` outputs (1: leave it whole)."""
    if outputs > MAX_OUTPUTS or outputs * length < MIN_WORK:
        return 1
    want = -(-PARTIAL_BLOCKS // -(-outputs // TILE))
    # the fewest slices that give the blocks wanted, each still long; else the most slices that stay long
    fits = [p for p in range(2, min(MAX_PARTS, length // MIN_SLICE) + 1) if length % p == 0]
    enough = [p for p in fits if p >= want]
    return enough[0] if enough else (fits[-1] if fits else 1)


def split_reduce(red: UOp) -> UOp | None:
    """`red` (REDUCE_AXIS ADD or MAX) as a reduce over partial reduces of slices of its first reduce axis, or None."""
    op, axes = red.arg
    src = red.src[0]
    shape, out_shape = src.shape, red.shape
    if op not in (Ops.ADD, Ops.MAX) or shape is None or out_shape is None or not axes:
        return None
    if not (dtypes.is_float(red.dtype) or dtypes.is_int(red.dtype)) or red.dtype.itemsize < 4:
        return None
    if not _threads_device(src.device):
        return None
    outputs = math.prod(out_shape)
    # the longest reduce axis is cut: (..., n, ...) -> (..., parts, n // parts, ...)
    axis = max(axes, key=lambda a: shape[a])
    parts = split_parts(outputs, math.prod(shape[a] for a in axes))
    if parts == 1 or shape[axis] % parts:
        return None
    # a reduce over padding (up to the stored values it reads) is left to codegen, which drops the padding from the
    # loop (a sum over 10**12 padded zeros and two values runs over two)
    if any(u.op is Ops.PAD for u in src.toposort(gate=lambda u: u.op not in (Ops.BUFFER, Ops.CONTIGUOUS))):
        return None
    cut = shape[:axis] + (parts, shape[axis] // parts) + shape[axis + 1 :]
    moved = tuple(a + 1 if a >= axis else a for a in axes)
    sliced = UOp(Ops.RESHAPE, src.dtype, (src,), cut)
    # the partials are stored (a kernel of their own, `parts` blocks per output to share among threads) ...
    partial = UOp(Ops.REDUCE_AXIS, red.dtype, (sliced,), (op, moved))
    stored = UOp(Ops.CONTIGUOUS, red.dtype, (partial,))
    # ... and reduced by a small second kernel, in a fixed order
    total = UOp(Ops.REDUCE_AXIS, red.dtype, (stored,), (op, (axis,)))
    return UOp(Ops.RESHAPE, red.dtype, (total,), out_shape)


def split_reduces(sink: UOp) -> dict[UOp, UOp]:
    """{REDUCE_AXIS: its two-stage form} for the long reduces into few outputs under `sink` (see the module doc)."""
    mapping: dict[UOp, UOp] = {}
    for u in sink.toposort():
        if u.op is Ops.REDUCE_AXIS:
            new = split_reduce(u)
            if new is not None:
                mapping[u] = new
    return mapping
