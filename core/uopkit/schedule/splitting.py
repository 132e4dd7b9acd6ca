"""Split a long reduce into few outputs in two, so that its work can be shared among CPU threads or GPU work-groups.

A kernel shares its *output* among threads (`OptOps.THREAD`): a sum of 16M elements into one number, or a matmul of
a few rows and columns over a long K, has one or a handful of output blocks and runs on one core. Rewritten as
partial reduces over `parts` slices of the reduce axis (a kernel with `parts` times more outputs, threaded like any
other), then a reduce over the partials (a small second kernel), it uses every core.

A GPU renderer has the same problem at a larger scale: a reduce gets at most one work-group per output (its work-items
share the reduce, `OptOps.GROUP`), so a whole-tensor sum runs on one of a GPU's hundred multiprocessors. There the
partials are as many work-groups as fill the GPU (`gpu_rule`).

A float sum is also split for accuracy where a device sums each output in one running loop (the CPU: a kernel's
vector lanes each add a long stretch in turn): one running float32 sum of a million elements drifts by ~1e-3
relative, where torch's cascade and numpy's pairwise sums stay near 1e-7. A float sum longer than
`SUM_IN_ONE_PASS` per output is cut into slices of at most about `SUM_SLICE` elements (`accurate_parts`), which the
partials sum exactly as before; an axis no slice count near that divides keeps its last few rows apart (summed on
their own and added), since padding it would mask every load of the hot loop. Sums of products into many outputs
(matmuls, convolutions) are left whole: their partials would be a copy of the output per slice; into few
(`SUM_OF_PRODUCTS_OUTPUTS`: a squared error, a dot product) they are cut too. A GPU's work-group reduce already adds
in a tree. A shorter float sum stays in its kernel, which adds it in blocks of a few hundred where its running sum
would be long (`uopkit.codegen.cascade`: a column sum's accumulators run down the rows).

The split depends only on the shapes and the renderer's caps, never on the thread count: a sum gives the same bits
on every machine (on GPUs, on every one with the same work-group limit). The scheduler decides, once the graph is
complete and before it kernelizes (like `packing.pack_panels`), for devices whose renderer runs threads or a grid of
work-groups. Sums of ints stay exact (in any order) and a NaN anywhere still wins a max (it wins its partial, then
the combine).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from uopkit.codegen.cascade import SUM_OF_PRODUCTS_OUTPUTS
from uopkit.dtype import dtypes
from uopkit.uop.ops import Ops, UOp, is_one_hot_reduce

if TYPE_CHECKING:
    from uopkit.renderer import RendererCaps


@dataclass(frozen=True)
class SplitRule:
    """When and how far a device splits a reduce: only one into at most `max_outputs` outputs with at least
    `min_work` elements in all; into enough slices for `blocks` blocks of partial results (`tile` outputs make a
    block), each slice at least `min_slice` long, at most `max_parts` of them; of the outermost reduce axis they
    divide (`outermost`) or of the longest."""

    max_outputs: int
    min_work: int
    blocks: int
    tile: int
    min_slice: int
    max_parts: int
    outermost: bool = False


# CPU threads: a reduce into at most 256 outputs (more are already blocks enough for the threads) of at least 4M
# elements (the second kernel's launch, a few us, must be small against what the threads save), into blocks for 64
# threads (a kernel's register tile holds up to 64 outputs: a block), each slice at least 1024 long (a partial
# reduce keeps long vector loops)
CPU_RULE = SplitRule(max_outputs=256, min_work=1 << 22, blocks=64, tile=64, min_slice=1024, max_parts=256)
# GPUs: work-items resident at once on a large GPU (an H200: 132 multiprocessors x 2048), the grid a partial reduce
# aims to fill. The caps carry no multiprocessor count; a smaller GPU just runs the partials in a few waves
GPU_RESIDENT_ITEMS = 1 << 18
# each work-item of a partial's work-group reads at least this many elements (a few vector loads), else the partials
# are mostly barriers and combines
GPU_ITEM_ELEMENTS = 16
# the work-group width the GPU heuristic aims at (codegen/opt/heuristic_gpu.py TARGET_THREADS)
GPU_WORKGROUP = 256


# a float sum per output longer than this is cut into slices of at most about SUM_SLICE (where no work-group reduce adds
# in a tree): 64 additions per vector lane of a CPU kernel
SUM_IN_ONE_PASS = 16384
SUM_SLICE = 1024


def gpu_rule(caps: RendererCaps) -> SplitRule:
    """The split for a GPU-style renderer: partials as work-groups, GPU_RESIDENT_ITEMS work-items of them in all
    (1024 work-groups of 256: hundreds of partials for a whole-tensor reduce), each work-item reading at least
    GPU_ITEM_ELEMENTS. A reduce of at least 1M elements into fewer outputs than half that many work-groups."""
    limits = [caps.workgroup_max or GPU_WORKGROUP, caps.local_max[0] if caps.local_max else GPU_WORKGROUP]
    width = min(GPU_WORKGROUP, *limits)
    groups = GPU_RESIDENT_ITEMS // width
    return SplitRule(
        max_outputs=groups // 2,
        min_work=1 << 20,
        blocks=groups,
        tile=1,
        min_slice=width * GPU_ITEM_ELEMENTS,
        max_parts=groups,
        outermost=True,
    )


def split_rule(device: str) -> tuple[SplitRule | None, bool]:
    """How `device` splits long reduces (CPU_RULE with threads, `gpu_rule` with a grid of work-groups, else None), and
    whether it splits long float sums for accuracy (no work-group reduce)."""
    from uopkit.device import Device

    try:
        caps = Device[device].renderer.caps
    except Exception:  # noqa: BLE001 - a device that can't open here gets no split
        return None, False
    if caps.has_threads:
        return CPU_RULE, not caps.has_local
    return (gpu_rule(caps), False) if caps.has_local else (None, True)


def split_parts(outputs: int, length: int, rule: SplitRule = CPU_RULE) -> int:
    """How many slices to cut a reduce of `length` elements into, for `outputs` outputs (1: leave it whole)."""
    if outputs > rule.max_outputs or outputs * length < rule.min_work:
        return 1
    want = -(-rule.blocks // -(-outputs // rule.tile))
    # the fewest slices that give the blocks wanted, each still long; else the most slices that stay long
    fits = [p for p in range(2, min(rule.max_parts, length // rule.min_slice) + 1) if length % p == 0]
    enough = [p for p in fits if p >= want]
    return enough[0] if enough else (fits[-1] if fits else 1)


def accurate_parts(size: int, length: int) -> int:
    """How many slices to cut an axis of `size` (of a float sum of `length` elements per output) into, so that each is
    about SUM_SLICE elements long (its rows a count that divides `size` if one near does; else the rows left over,
    fewer than a slice holds, are summed apart); 1 for a sum short enough in one pass."""
    if length <= SUM_IN_ONE_PASS:
        return 1
    row = length // size
    rows = max(1, SUM_SLICE // row)
    rows = next((r for r in range(rows, max(1, rows // 2) - 1, -1) if size % r == 0), rows)
    return max(1, size // rows)


def _undetached(u: UOp) -> UOp:
    # the value under the DETACH that no_grad wraps each computed value in (a sum's product is still a product)
    return u.src[0] if u.op is Ops.DETACH else u


def split_reduce(red: UOp) -> UOp | None:
    """`red` (REDUCE_AXIS ADD or MAX) as a reduce over partial reduces of slices of one of its reduce axes, or None."""
    op, axes = red.arg
    src = red.src[0]
    shape, out_shape = src.shape, red.shape
    if op not in (Ops.ADD, Ops.MAX) or shape is None or out_shape is None or not axes:
        return None
    if not (dtypes.is_float(red.dtype) or dtypes.is_int(red.dtype)) or red.dtype.itemsize < 4:
        return None
    if is_one_hot_reduce(red):
        # indexing's pick (a sum of where(index == iota, x, 0)) becomes one load at the index in codegen, as long as
        # its loop stays whole: cut into slices it would read every position
        return None
    rule, accurate = split_rule(src.device)
    outputs, length = math.prod(out_shape), math.prod(shape[a] for a in axes)
    parts = split_parts(outputs, length, rule) if rule is not None else 1
    # a reduce axis is cut: (..., n, ...) -> (..., parts, n // parts, ...). The CPU cuts the longest; a GPU the
    # outermost the parts divide, so that each partial reads one contiguous block (its work-items side by side)
    fits = [a for a in axes if shape[a] % parts == 0]
    longest = max(axes, key=lambda a: shape[a])
    if parts == 1 or not fits:
        parts, axis = 1, longest
    else:
        axis = fits[0] if rule is not None and rule.outermost else longest
    if (
        accurate
        and op is Ops.ADD
        and dtypes.is_float(red.dtype)
        and (_undetached(src).op is not Ops.MUL or outputs <= SUM_OF_PRODUCTS_OUTPUTS)
    ):
        # slices short enough to sum accurately (more of them than threads want is fine: more outputs to share)
        parts = max(parts, accurate_parts(shape[axis], length))
    if parts == 1:
        return None
    # a reduce over padding (up to the stored values it reads) is left to codegen, which drops the padding from the
    # loop (a sum over 10**12 padded zeros and two values runs over two)
    if any(u.op is Ops.PAD for u in src.toposort(gate=lambda u: u.op not in (Ops.BUFFER, Ops.CONTIGUOUS))):
        return None
    size = shape[axis]
    whole = size - size % parts
    main = src if whole == size else _rows(src, axis, 0, whole)
    cut = shape[:axis] + (parts, whole // parts) + shape[axis + 1 :]
    moved = tuple(a + 1 if a >= axis else a for a in axes)
    sliced = UOp(Ops.RESHAPE, src.dtype, (main,), cut)
    # the partials are stored (a kernel of their own: `parts` blocks per output for threads or work-groups) ...
    partial = UOp(Ops.REDUCE_AXIS, red.dtype, (sliced,), (op, moved))
    stored = UOp(Ops.CONTIGUOUS, red.dtype, (partial,))
    # ... and reduced by a small second kernel, in a fixed order
    total = UOp(Ops.REDUCE_AXIS, red.dtype, (stored,), (op, (axis,)))
    # (a sum of so many partials that it is long itself is split again)
    total = split_reduce(total) or total
    kept = tuple(1 if i in axes else n for i, n in enumerate(shape))
    if whole != size:
        # the last rows no slice count divides, reduced on their own (fewer than `parts` of them) and combined
        rest = UOp(Ops.REDUCE_AXIS, red.dtype, (_rows(src, axis, whole, size),), (op, axes))
        total = UOp(op, red.dtype, (UOp(Ops.RESHAPE, red.dtype, (total,), kept), rest))
    return UOp(Ops.RESHAPE, red.dtype, (total,), out_shape)


def _rows(src: UOp, axis: int, start: int, stop: int) -> UOp:
    # src's rows start..stop along `axis`
    bounds = tuple((start, stop) if i == axis else (0, n) for i, n in enumerate(src.shape))
    return UOp(Ops.SHRINK, src.dtype, (src,), bounds)


def split_reduces(sink: UOp, nodes: Iterable[UOp] | None = None) -> dict[UOp, UOp]:
    """{REDUCE_AXIS: its two-stage form} for the long reduces into few outputs under `sink` (see the module doc).
    `nodes`: sink's nodes in toposort order, when the caller has them already."""
    mapping: dict[UOp, UOp] = {}
    for u in sink.toposort() if nodes is None else nodes:
        if u.op is Ops.REDUCE_AXIS:
            new = split_reduce(u)
            if new is not None:
                mapping[u] = new
    return mapping
