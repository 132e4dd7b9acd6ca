"""Default opts for GPU-style renderers (``caps.has_local``: a grid of work-groups), sized from the renderer's caps.

- a matmul the renderer's tensor cores fit runs on them (OptOps.TC);
- a matmul-like reduce (two output axes, each reused by a load that doesn't move along it: a matmul, a convolution)
  gets a 2-D work-group tile with a register tile per work-item on both output axes (UPCAST both, the first one
  along the contiguous axis, so it loads and stores vectors) and an unrolled reduce; a large float32 one with one
  reduce axis also stages its operands in local memory (OptOps.STAGE) where they fit;
- a reduction is split across the work-items of a work-group (OptOps.GROUP, combined through local memory): along
  a contiguous row the work-items read side by side (coalesced), in vectors; over a strided axis (a column sum) each
  work-item reads a few whole vectors of the contiguous output axis per row;
- an elementwise kernel (or a gather: a one-hot sum the lowerer folds into a load at the index) loads and stores
  vectors, the work-group along the contiguous axis; a large one on a device with warps takes several vectors per
  work-item, each a work-group apart.

Every choice goes through `apply_opt`, so an opt the kernel or the renderer refuses is left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from uopkit.codegen.opt import KernelPlan, Opt, OptError, OptOps, apply_opt, initial_plan
from uopkit.codegen.opt.analysis import divisor as _divisor
from uopkit.codegen.opt.analysis import load_axes, memory_strides, reduce_folds_away
from uopkit.codegen.opt.analysis import try_opt as _try
from uopkit.dtype import dtypes
from uopkit.renderer import Renderer
from uopkit.uop.ops import Ops, UOp, is_one_hot_reduce

# the work-group size aimed at: enough warps to hide memory latency, few enough registers per thread to fit
TARGET_THREADS = 256
# bytes one work-item loads at once: a 16-byte vector is one memory transaction on every GPU we know of
VECTOR_BYTES = 16
# ops that cost tens of instructions per element (polynomials, or a special-function unit's few per cycle)
COSTLY_OPS = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})


@dataclass(frozen=True)
class GPULimits:
    """What the heuristic reads from the renderer's caps."""

    threads: int
    subgroup: int
    shared_bytes: int
    vector_width: int
    can_group: bool

    @staticmethod
    def of(renderer: Renderer) -> GPULimits:
        caps = renderer.caps
        limits = [TARGET_THREADS]
        if caps.workgroup_max is not None:
            limits.append(caps.workgroup_max)
        if caps.local_max is not None:
            limits.append(caps.local_max[0])
        threads = 1 << (min(limits).bit_length() - 1)
        vector_width = caps.max_vector_width if caps.vector_ops else 1
        return GPULimits(threads, max(1, caps.subgroup_width), caps.shared_max, vector_width, caps.has_shared)

    def vector(self, itemsize: int) -> int:
        """Lanes of one vector load of `itemsize`-byte elements (0: the renderer has no vectors worth using)."""
        amount = min(self.vector_width, VECTOR_BYTES // max(1, itemsize))
        # the lowerer makes a vector of a first UPCAST that is a power of two from 4 up
        return amount if amount >= 4 else 0


@dataclass
class KernelInfo:
    plan: KernelPlan
    out_sizes: list[int]
    red_sizes: list[int]
    loads: list[dict[int, int]]
    hot: list[dict[int, int]]
    store_contiguous: list[int]
    itemsize: int
    # the reduce computes a costly op (COSTLY_OPS) per element: its time goes to arithmetic rather than loads
    costly_reduce: bool = False

    @staticmethod
    def of(ast: UOp, plan: KernelPlan) -> KernelInfo:
        red_ids = set(range(plan.n_out, plan.n_out + len(plan.red)))
        loads = load_axes(ast)
        # in a reduce kernel the loads inside the reduce loop are the ones that count
        hot = [la for la in loads if red_ids & set(la)] or loads
        stores = memory_strides(ast, loads=False)
        globals_ = [u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL]
        itemsize = max((u.dtype.itemsize for u in globals_), default=4)
        return KernelInfo(
            plan,
            [parts[0].size for parts in plan.out],
            [parts[0].size for parts in plan.red],
            loads,
            hot,
            sorted(a for a, st in stores.items() if 1 in st),
            itemsize,
            plan.reduce_op is not None and any(u.op in COSTLY_OPS for u in plan.reduce_op.toposort()),
        )

    @property
    def total_out(self) -> int:
        return math.prod(self.out_sizes)

    def out_axes(self) -> list[int]:
        return [i for i, s in enumerate(self.out_sizes) if s > 1]

    def contiguous_in(self, loads: list[dict[int, int]]) -> list[int]:
        return sorted({a for la in loads for a, st in la.items() if st == 1})


def gpu_opts(ast: UOp, renderer: Renderer) -> list[Opt]:
    plan = initial_plan(ast)
    tc_opts = tensor_core_opts(plan, renderer)
    if tc_opts is not None:
        return tc_opts
    info = KernelInfo.of(ast, plan)
    limits = GPULimits.of(renderer)
    # (a gather's one-hot sum the lowerer folds into a load at the index, as long as its axis stays one loop: split
    # across a work-group it was a real sum of n selects per element, and -0.0 + 0.0 gave back +0.0)
    gather = plan.reduce_op is not None and is_one_hot_reduce(plan.reduce_op) and reduce_folds_away(ast)
    if not info.red_sizes or gather:
        plan = _elementwise(plan, info, limits, renderer)
    elif (tile := _matmul_axes(info)) is not None:
        plan = _matmul(plan, info, limits, renderer, *tile)
    else:
        plan = _reduction(plan, info, limits, renderer)
    return list(plan.opts)


def tensor_core_opts(plan: KernelPlan, renderer: Renderer) -> list[Opt] | None:
    """A matmul on the first of the renderer's tensor cores that fits it, or None when none does."""
    if not renderer.caps.tensor_cores or len(plan.red) != 1:
        return None
    for i in range(len(renderer.caps.tensor_cores)):
        try:
            tc_plan = apply_opt(plan, Opt(OptOps.TC, plan.n_out, i), renderer)
        except OptError:
            continue
        assert tc_plan.tc is not None
        # two tiles along M per thread share each B fragment, when enough tiles are left for the grid
        if tc_plan.axis_size(tc_plan.tc.m_axis) // tc_plan.tc.tc.dims[0] >= 4:
            tc_plan = _try(tc_plan, Opt(OptOps.UPCAST, tc_plan.tc.m_axis, 2), renderer)
        return list(tc_plan.opts)
    return None


def _loop_size(plan: KernelPlan, axis: int) -> int:
    """The size of the axis's last loop part (what the next split divides), 1 if none is left."""
    loops = [p.size for p in plan.axis_parts(axis) if p.kind == "loop"]
    return loops[-1] if loops else 1


def _powers_of_two(top: int, bottom: int = 2) -> tuple[int, ...]:
    out = []
    while top >= bottom:
        out.append(top)
        top //= 2
    return tuple(out)


def _local_spread(plan: KernelPlan, axes: list[int], threads: int, renderer: Renderer) -> KernelPlan:
    """Work-groups of up to `threads` work-items over `axes`, innermost first (adjacent work-items, adjacent
    elements along the first axis)."""
    for axis in axes:
        # (at most three work-group dimensions)
        if threads < 2 or _work_group_dims(plan) >= 3:
            break
        amount = _divisor(_loop_size(plan, axis), _powers_of_two(threads))
        if amount:
            plan = _try(plan, Opt(OptOps.LOCAL, axis, amount), renderer)
            threads //= amount
    return plan


def _work_group_dims(plan: KernelPlan) -> int:
    return sum(p.kind in ("local", "group") for parts in plan.out + plan.red for p in parts)


def _elementwise(plan: KernelPlan, info: KernelInfo, limits: GPULimits, renderer: Renderer) -> KernelPlan:
    axes = info.out_axes()
    if not axes:
        return plan
    stored = [a for a in info.store_contiguous if a in axes]
    contiguous = stored or [a for a in info.contiguous_in(info.loads) if a in axes]
    axis = (contiguous or axes)[-1]
    order = [axis] + [a for a in reversed(axes) if a != axis]
    vec = limits.vector(info.itemsize)
    # an axis of an awkward length (a prime, as in softmax over 100003) padded to whole work-groups (stores past
    # the end are gated off), at most 1/8 extra: without, it gets no work-group at all, and one work-item per
    # work-group crawls
    block = max(vec, 1) * limits.threads
    size = _loop_size(plan, axis)
    if size % block and size >= 8 * block:
        plan = _try(plan, Opt(OptOps.PADTO, axis, block), renderer)
    padded = _loop_size(plan, axis) != size
    # a padded axis has a bounds check per element, the same for a vector's lanes only where the real length is a
    # multiple of the vector: else its elements are spread as scalar loads are (PoCL: softmax's E_3_100003 0.63 ms
    # -> 0.21 ms)
    vectors = bool(vec) and _loop_size(plan, axis) % vec == 0 and (not padded or size % vec == 0)
    if vectors:
        # vector loads and stores: each work-item handles a vector of elements along the contiguous axis, the
        # work-group's work-items the vectors side by side (one 16-byte load per work-item and operand)
        plan = _try(plan, Opt(OptOps.UPCAST, axis, vec), renderer)
    # the work-group's work-items side by side (each load instruction of a warp reads one contiguous run)
    plan = _local_spread(plan, order, limits.threads, renderer)
    if limits.subgroup > 1:
        return _more_per_work_item(plan, order, renderer)
    # no warps (a CPU's OpenCL, which vectorizes across the work-items: more work per work-item made PoCL 2-3x
    # slower on 16M floats): scalar kernels only, each work-item a few elements a work-group apart
    amount = _divisor(_loop_size(plan, axis), (4, 2))
    if not vectors and amount and info.total_out >= 64 * limits.threads:
        plan = _try(plan, Opt(OptOps.UPCAST, axis, amount), renderer)
    return plan


# work-groups an elementwise kernel keeps when its work-items take more elements each: enough for every compute unit
# of a large GPU (an H200: 132 SMs, 8 work-groups of 256 each at once) several times over
GRID_FILL = 1024


def _more_per_work_item(plan: KernelPlan, order: list[int], renderer: Renderer) -> KernelPlan:
    """A large elementwise kernel on a GPU (warps): 4 (else 2) times the elements per work-item, each further vector
    (or element) a work-group apart, so that every load instruction of a warp still reads one contiguous run; more
    loads in flight per work-item and fewer work-groups to schedule. Taken from the contiguous axis first, and only
    while at least GRID_FILL work-groups are left."""
    groups = math.prod(_loop_size(plan, a) for a in order)
    for axis in order:
        size = _loop_size(plan, axis)
        amount = _divisor(size, tuple(k for k in (4, 2) if groups // k >= GRID_FILL))
        if amount:
            return _try(plan, Opt(OptOps.UPCAST, axis, amount), renderer)
    return plan


def _matmul_axes(info: KernelInfo) -> tuple[int, int, int] | None:
    """(n, m, reduce) axes of a matmul-like kernel: two output axes each reused by a load that doesn't move along
    it, n the contiguous one; None if the kernel is not one."""
    if len(info.red_sizes) == 0 or info.total_out < 64:
        return None
    axes = info.out_axes()
    reuse = [a for a in axes if any(a not in la for la in info.hot)]
    if len(reuse) < 2:
        return None
    n_pick = [a for a in reuse if a in info.store_contiguous] or reuse
    n = n_pick[-1]
    # m: an axis that the loads moving along n don't move along (the rows of a matmul, a convolution's channels)
    along_n = [la for la in info.hot if n in la]
    m_pick = [a for a in reuse if a != n and not any(a in la for la in along_n)] or [a for a in reuse if a != n]
    m = m_pick[-1]
    red = [info.plan.n_out + i for i, s in enumerate(info.red_sizes) if s > 1]
    if not red:
        return None
    return n, m, red[-1]


def _matmul(
    plan: KernelPlan, info: KernelInfo, limits: GPULimits, renderer: Renderer, n: int, m: int, red: int
) -> KernelPlan:
    # a register tile per work-item, 4 x 4 over n and m: each loaded element of one operand is used 4 times; and a
    # 2-D work-group over the tiles, n first (adjacent work-items, adjacent columns). With vectors the work-item's 4
    # columns are one vector (split first, innermost); without, they are a work-group apart, so that each load
    # instruction of a warp reads one contiguous run
    vectors = limits.vector(info.itemsize) >= 4
    side = 1 << ((limits.threads.bit_length() - 1) // 2)
    # sides of awkward length (250 rows) padded to whole work-group tiles, at most 1/8 extra: without, they get small
    # work-groups or none (the padding's rows and columns are gated off, its reduce steps add nothing)
    for axis, block in ((n, side * 4), (m, side * 4), (red, 16)):
        size = _loop_size(plan, axis)
        if size % block and size >= block and -size % block <= size * MAX_PADDING:
            plan = _try(plan, Opt(OptOps.PADTO, axis, block), renderer)
    plan, local_n = _thread_tile(plan, n, side, vectors, renderer)
    # (the rows of one work-item are a work-group apart either way: rows are never one vector)
    plan, _ = _thread_tile(plan, m, limits.threads // local_n, False, renderer)
    # the reduce unrolled: several products per loop iteration, independent loads in flight
    unroll = _divisor(_loop_size(plan, red), (4, 2))
    if unroll:
        plan = _try(plan, Opt(OptOps.UNROLL, red, unroll), renderer)
    return _stage_matmul(plan, info, limits, renderer, (n, m, red))


# a float32 matmul at least this large on each side (rows, columns, reduce) stages its operands in local memory
STAGE_MIN_SIDE = 64


def _stage_matmul(
    plan: KernelPlan, info: KernelInfo, limits: GPULimits, renderer: Renderer, axes: tuple[int, int, int]
) -> KernelPlan:
    # where local memory is on-chip, the work-group copies each step's tiles of A and B into it once, coalesced
    # (OptOps.STAGE; PoCL's CPU device keeps it in global memory: each step's barriers cost more there), and every
    # work-item reads its register tile from there: without, each element is read from global memory by every
    # work-item of its row (or column) of the work-group. Steps of 16 reduce elements (4 stage loops of the 4
    # unrolled) take (64 + 64) x 16 floats, 8 KB, for a 16 x 16 work-group of 4 x 4 tiles
    reduce_op = plan.reduce_op
    if not (limits.can_group and renderer.caps.shared_on_chip) or len(info.red_sizes) != 1:
        return plan
    if reduce_op is None or reduce_op.dtype != dtypes.float32:
        return plan
    n, m, red = axes
    if min(info.out_sizes[n], info.out_sizes[m], info.red_sizes[0]) < STAGE_MIN_SIDE:
        return plan
    amount = _divisor(_loop_size(plan, red), (4, 2))
    return _try(plan, Opt(OptOps.STAGE, red, amount), renderer) if amount else plan


def _thread_tile(
    plan: KernelPlan, axis: int, threads: int, vectors: bool, renderer: Renderer
) -> tuple[KernelPlan, int]:
    """4 (else 2) elements of `axis` per work-item and up to `threads` work-items along it; returns the plan and the
    work-items it got. With `vectors` a work-item's elements are adjacent (one vector), else a work-group apart."""
    size = _loop_size(plan, axis)
    amount = _divisor(size, (4, 2)) or 1
    local = _divisor(size // amount, _powers_of_two(threads)) or 1
    splits = [(OptOps.UPCAST, amount), (OptOps.LOCAL, local)]
    for op, k in splits if vectors else reversed(splits):
        if k > 1:
            plan = _try(plan, Opt(op, axis, k), renderer)
    return plan, math.prod(p.size for p in plan.axis_parts(axis) if p.kind == "local")


def _reduction(plan: KernelPlan, info: KernelInfo, limits: GPULimits, renderer: Renderer) -> KernelPlan:
    n_out = info.plan.n_out
    red_axes = [n_out + i for i, s in enumerate(info.red_sizes) if s > 1]
    if not red_axes:
        return _elementwise(plan, info, limits, renderer)
    contiguous = [a for a in red_axes if a in info.contiguous_in(info.hot)]
    vec = limits.vector(info.itemsize)
    out_contiguous = [a for a in info.out_axes() if a in info.store_contiguous]
    if limits.can_group and contiguous:
        axis = contiguous[-1]
        new = _group_row(plan, info, limits, renderer, axis, info.red_sizes[axis - n_out], vec)
        if new is not plan:
            return _local_rows(new, info, limits, renderer)
    if limits.can_group:
        # the largest reduce axis that is not contiguous in memory (a column sum's, or the rows of a whole-tensor sum)
        for axis in sorted((a for a in red_axes if a not in contiguous), key=lambda a: -info.red_sizes[a - n_out]):
            size = info.red_sizes[axis - n_out]
            new = _local_group_columns(plan, info, limits, renderer, axis, size, vec, out_contiguous)
            if new is plan:
                new = _group_columns(plan, info, limits, renderer, axis, size, vec, out_contiguous)
            if new is not plan:
                return new
    # short reduces: one work-item per output, the work-group along the contiguous output axis
    return _elementwise(plan, info, limits, renderer)


def _group_row(
    plan: KernelPlan, info: KernelInfo, limits: GPULimits, renderer: Renderer, axis: int, size: int, vec: int
) -> KernelPlan:
    # a work-group per output, its work-items side by side along the row, each reading a vector at a time (element
    # (i * threads + lid) * vec + lane) or one element at a time (i * threads + lid): a warp reads one contiguous run.
    # A reduce of a costly op per element (softmax's sum of exp) takes two vectors' worth a step: twice the independent
    # arithmetic in flight per work-item (PoCL: 0.33 -> 0.20 ms for softmax's sum of exp over 3 x 100003)
    if vec and info.costly_reduce and vec * 2 <= limits.vector_width:
        vec *= 2
    picked = _group_size(limits, size, max(vec, 1), max(vec, 1), info.itemsize)
    if picked is None:
        return plan
    threads, block = picked
    if size % block:
        # a row of a prime length (softmax over 100003): padded with the reduce's identity to whole blocks
        plan = _try(plan, Opt(OptOps.PADTO, axis, block), renderer)
    if vec:
        plan = _try(plan, Opt(OptOps.UPCAST, axis, vec), renderer)
    return _try(plan, Opt(OptOps.GROUP, axis, threads), renderer)


def _group_columns(
    plan: KernelPlan,
    info: KernelInfo,
    limits: GPULimits,
    renderer: Renderer,
    axis: int,
    size: int,
    vec: int,
    out_contiguous: list[int],
) -> KernelPlan:
    # a reduce over a strided axis (a column sum): each work-item reads 8 consecutive elements of the contiguous
    # output axis per row (a whole 32-byte sector of floats; two vectors where the renderer has them), the
    # work-group's work-items take different rows, each at least 4 of them
    start = plan
    if out_contiguous:
        out = out_contiguous[-1]
        for amount in (vec or 4, 2):
            if _loop_size(plan, out) % amount == 0:
                plan = _try(plan, Opt(OptOps.UPCAST, out, amount), renderer)
    slots = math.prod(p.size for parts in plan.out for p in parts if p.kind == "upcast")
    picked = _group_size(limits, size, 1, slots, info.itemsize, steps=4)
    if picked is None:
        return start
    threads, _ = picked
    if size % threads:
        plan = _try(plan, Opt(OptOps.PADTO, axis, threads), renderer)
    return _try(plan, Opt(OptOps.GROUP, axis, threads), renderer)


# a reduce keeps at least this many work-groups when LOCAL packs several outputs into one
MIN_WORK_GROUPS = 256


def _local_rows(plan: KernelPlan, info: KernelInfo, limits: GPULimits, renderer: Renderer) -> KernelPlan:
    # many short rows, each a GROUP narrower than the work-group aimed at (a row of 4096 gets 32 work-items): LOCAL
    # over the rows fills the work-group (each row's work-items still read side by side), while enough work-groups
    # stay to spread over the GPU. A GPU holds only so many work-groups per multiprocessor at once, so narrow ones
    # leave it underused
    group = math.prod(p.size for parts in plan.red for p in parts if p.kind == "group")
    room = limits.threads // max(group, 1)
    if room < 2 or _work_group_dims(plan) >= 3:
        return plan
    for axis in reversed(info.out_axes()):
        size = _loop_size(plan, axis)
        amount = _divisor(size, tuple(a for a in _powers_of_two(room) if size // a >= MIN_WORK_GROUPS))
        if amount:
            return _try(plan, Opt(OptOps.LOCAL, axis, amount), renderer)
    return plan


# bytes of one row that the adjacent work-items of a column reduce read together: a 128-byte line, four 32-byte
# sectors (what a warp's load instruction fetches at best on NVIDIA and AMD GPUs)
LINE_BYTES = 128


def _local_group_columns(
    plan: KernelPlan,
    info: KernelInfo,
    limits: GPULimits,
    renderer: Renderer,
    axis: int,
    size: int,
    vec: int,
    out_contiguous: list[int],
) -> KernelPlan:
    # a column reduce with a 2-D work-group: LOCAL along the contiguous output axis (adjacent work-items, adjacent
    # columns: a vector each where the renderer has them), so that each row's load reads a whole line, and GROUP over
    # the rows with the rest of the work-group, each work-item at least 4 rows. Unchanged when the output axis can't
    # hold a line (then `_group_columns` reads a sector per work-item and row)
    if not out_contiguous:
        return plan
    out = out_contiguous[-1]
    per_item = max(vec, 1)
    across = max(2, LINE_BYTES // (per_item * info.itemsize))
    rows = limits.threads // across
    if rows < 2 or _loop_size(plan, out) % (per_item * across) or size < 4 * rows:
        return plan
    new = plan
    if vec:
        new = _try(new, Opt(OptOps.UPCAST, out, vec), renderer)
    new = _try(new, Opt(OptOps.LOCAL, out, across), renderer)
    # the most rows (a power of two) that divide the reduce, or pad it by little
    for group in _powers_of_two(rows):
        if -size % group <= size * MAX_PADDING:
            if size % group:
                new = _try(new, Opt(OptOps.PADTO, axis, group), renderer)
            new = _try(new, Opt(OptOps.GROUP, axis, group), renderer)
            break
    kinds = [o.op for o in new.opts[len(plan.opts) :]]
    return new if OptOps.LOCAL in kinds and OptOps.GROUP in kinds else plan


# a reduce axis may be padded by at most this fraction of its size to fit whole work-group blocks
MAX_PADDING = 1 / 8


def _group_size(
    limits: GPULimits, size: int, chunk: int, slots: int, itemsize: int, steps: int = 1
) -> tuple[int, int] | None:
    """Work-items of a GROUP over `size` elements, `chunk` per work-item and step, at least `steps` steps: the largest
    power of two up to the target whose partial results (`slots` each) fit the local memory and whose block
    (work-items x chunk) divides the size, or pads it by little. Returns (work-items, block), or None if none of at
    least 16 (and a subgroup) fits.

    The partial results are combined after the barrier by a tree in local memory (`lowerer._combine_group`: log2 of
    the work-group's width steps, each with a barrier); the work-group is kept no wider than each work-item's share
    of the reduce, so that reading the data, not the combine, is most of the work."""
    # (below 16 work-items a work-group reduction costs more in barriers and combining than it saves)
    smallest = min(max(16, limits.subgroup), limits.threads)
    for threads in _powers_of_two(limits.threads, smallest):
        block = threads * chunk
        fits = limits.shared_bytes <= 0 or threads * slots * max(itemsize, 4) <= limits.shared_bytes
        balanced = threads * threads <= size // chunk or threads == smallest
        if block * steps <= size and fits and balanced and -size % block <= size * MAX_PADDING:
            return threads, block
    return None
