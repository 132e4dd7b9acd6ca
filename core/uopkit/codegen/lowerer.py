"""Lower a kernel AST to loops: views become index arithmetic over RANGEs, reduces become DEFINE_REG accumulators.

The kernel's `KernelPlan` says how each axis is split (loops, CPU threads, GPU ids, unrolled lanes). Lane ranges
(kind "upcast"/"unroll") stay symbolic here; the expander replaces them by one copy of the code per lane.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from uopkit.codegen.plan import AxisPart, KernelPlan, OptOps, initial_plan
from uopkit.dtype import DType, dtypes, index_dtype
from uopkit.helpers import strides_for_shape
from uopkit.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from uopkit.renderer import TensorCore, TileLayout

Index = tuple[UOp, ...]
TRUE = UOp.const(dtypes.bool, True)
LOOP_KINDS = ("loop", "thread")
LANE_KINDS = ("upcast", "unroll", "vector")


class IndexOverflow(ArithmeticError):
    """An index constant does not fit the kernel's index type (lowering retries with 64-bit indices)."""


def idx_const(v: int) -> UOp:
    dt = dtypes.index
    if not dtypes.min(dt) <= v <= dtypes.max(dt):
        # a wrapped bound or offset would silently read and write the wrong elements
        raise IndexOverflow(f"index constant {v} does not fit {dt}")
    return UOp.const(dt, v)


def range_kind(u: UOp) -> str:
    return u.arg[1]


@dataclass
class LowererContext:
    plan: KernelPlan
    gpu: bool = False
    range_ids: itertools.count = field(default_factory=itertools.count)
    reg_ids: itertools.count = field(default_factory=itertools.count)
    local_ids: itertools.count = field(default_factory=itertools.count)
    memo: dict[tuple[UOp, Index, UOp], UOp] = field(default_factory=dict)
    global_dims: list[int] = field(default_factory=list)
    # which kernel axis each loop range (by id) belongs to (used by the heuristics to find contiguous axes)
    axis_of: dict[int, int] = field(default_factory=dict)
    local_dims: list[int] = field(default_factory=list)
    # the SPECIAL of each work-group dimension, in order (local memory is indexed by all of them)
    local_specials: list[UOp] = field(default_factory=list)
    # per-kernel state of the tensor-core lowering (the end of this file), when the plan has OptOps.TC
    tensor_core: TensorCoreLowering | None = None
    # the upcast part that becomes a vector: (axis, position of the part counted from the end of the axis's parts)
    vector_part: tuple[int, int] | None = None
    # the type of the kernel's index arithmetic: int32, or int64 where a buffer, view or loop can exceed it
    index_dtype: DType = dtypes.int32
    # reduces over one plain loop whose summed value the output may reuse (see `_reuse_reduce_value`); None: not
    # collected (GPU-style kernels, or a caller that doesn't want the rewrite)
    reduce_loops: list[ReduceLoop] | None = None

    def lane_kind(self, axis: int, part_index: int, n_parts: int, kind: str) -> str:
        if kind == "upcast" and self.vector_part == (axis, n_parts - part_index):
            return "vector"
        return kind

    def new_range(self, size: int, kind: str, deps: tuple[UOp, ...] = ()) -> UOp:
        return UOp(Ops.RANGE, dtypes.index, (idx_const(size), *deps), (next(self.range_ids), kind))

    def new_local_id(self, size: int) -> UOp:
        dim = len(self.local_dims)
        if dim >= 3:
            raise NotImplementedError("more than 3 work-group dimensions")
        self.local_dims.append(size)
        special = UOp(Ops.SPECIAL, dtypes.index, (idx_const(size),), f"lidx{dim}")
        self.local_specials.append(special)
        return special


@dataclass(frozen=True)
class ReduceLoop:
    """A lowered reduce over one plain loop: `value` (its source `src` lowered at `idx`, `valid`) is combined into the
    accumulator by `update` inside `loop`, which `end` closes; the reduce runs inside the loops `outer`."""

    src: UOp
    idx: Index
    valid: UOp
    loop: UOp
    outer: tuple[UOp, ...]
    value: UOp
    update: UOp
    end: UOp


def _and(a: UOp, b: UOp) -> UOp:
    if a is TRUE:
        return b
    if b is TRUE:
        return a
    return a.alu(Ops.AND, b)


def _combine(nodes: list[tuple[UOp, int]]) -> UOp:
    """Index of an axis from its parts: sum of part * (product of the sizes inside it)."""
    ret = idx_const(0)
    inner = 1
    for node, size in reversed(nodes):
        ret = node * inner + ret if inner != 1 else node + ret
        inner *= size
    return ret


# ---------------------------------------------------------------------------------------------------------------------
# views: move an index through movement ops


def _dense_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def move_index(node: UOp, idx: Index) -> Index:
    """The index into `node`'s source that one movement op (not PAD) maps `idx` to."""
    in_shape = node.src[0].shape
    assert in_shape is not None
    if node.op is Ops.RESHAPE:
        flat = idx_const(0)
        for i, st in zip(idx, strides_for_shape(node.arg), strict=True):
            if st:
                flat = flat + i * st
        # the outermost axis needs no modulo: an in-bounds flat index is below the total size (and an out-of-bounds
        # one is masked, so its value never matters)
        return tuple(
            idx_const(0) if s == 1 else (flat // st if i == 0 else (flat // st) % s)
            for i, (s, st) in enumerate(zip(in_shape, _dense_strides(in_shape), strict=True))
        )
    if node.op is Ops.PERMUTE:
        new = [idx_const(0)] * len(idx)
        for out_axis, in_axis in enumerate(node.arg):
            new[in_axis] = idx[out_axis]
        return tuple(new)
    if node.op is Ops.EXPAND:
        return tuple(idx_const(0) if s == 1 else i for i, s in zip(idx, in_shape, strict=True))
    if node.op is Ops.SHRINK:
        return tuple(i + b if b else i for i, (b, _) in zip(idx, node.arg, strict=True))
    if node.op is Ops.FLIP:
        return tuple((s - 1) - i if f else i for i, s, f in zip(idx, in_shape, node.arg, strict=True))
    raise AssertionError(f"move_index: {node.op} is not a movement op without masking")


def view_index(node: UOp, idx: Index) -> tuple[UOp, Index]:
    """Push an index through a chain of movement ops (no PAD): returns (base node, index into it)."""
    while node.op in GroupOp.Movement:
        idx = move_index(node, idx)
        node = node.src[0]
    return node, idx


def pad_index(node: UOp, idx: Index) -> tuple[Index, UOp]:
    """Index into a PAD's source and the condition that the element is not padding."""
    in_shape = node.src[0].shape
    assert in_shape is not None
    new_idx, ok = [], TRUE
    for i, (b, _), s in zip(idx, node.arg, in_shape, strict=True):
        shifted = i + (-b) if b else i
        if b and i.vmin < b:
            ok = _and(ok, shifted.alu(Ops.CMPLT, 0).alu(Ops.CMPNE, True))
        if i.vmax - b >= s:
            ok = _and(ok, shifted.lt(s))
        new_idx.append(shifted)
    return tuple(new_idx), ok


# ---------------------------------------------------------------------------------------------------------------------
# values


def lower_value(ctx: LowererContext, node: UOp, idx: Index, valid: UOp) -> UOp:
    # iterative post-order (a chain of ops can be deeper than Python's stack): a value is lowered once the values it
    # reads are, left to right as a recursive walk would, so ranges are numbered in the same order
    root = (node, idx, valid)
    stack: list[tuple[tuple[UOp, Index, UOp], bool]] = [(root, False)]
    while stack:
        key, ready = stack.pop()
        if key in ctx.memo:
            continue
        pending = [] if ready else [k for k in _value_reads(*key) if k not in ctx.memo]
        if pending:
            stack.append((key, True))
            stack.extend((k, False) for k in reversed(pending))
            continue
        ctx.memo[key] = _lower_value(ctx, *key)
    return ctx.memo[root]


def _value_reads(node: UOp, idx: Index, valid: UOp) -> list[tuple[UOp, Index, UOp]]:
    # what _lower_value lowers first (a reduce lowers its source itself, after opening its loops)
    if node.op is Ops.PAD:
        inner_idx, ok = pad_index(node, idx)
        return [(node.src[0], inner_idx, _and(valid, ok))]
    if node.op in GroupOp.Movement:
        return [(node.src[0], move_index(node, idx), valid)]
    if node.op in GroupOp.Elementwise:
        return [(s, idx, valid) for s in node.src]
    return []


def _lower_value(ctx: LowererContext, node: UOp, idx: Index, valid: UOp) -> UOp:
    if node.op is Ops.PAD:
        inner_idx, ok = pad_index(node, idx)
        inner = lower_value(ctx, node.src[0], inner_idx, _and(valid, ok))
        return inner if ok is TRUE else ok.where(inner, inner.const_like(0))
    if node.op in GroupOp.Movement:
        return lower_value(ctx, node.src[0], move_index(node, idx), valid)
    if node.op is Ops.LOAD:
        buf = node.src[0]
        index = UOp(Ops.INDEX, buf.dtype, (buf, idx[0]) if valid is TRUE else (buf, idx[0], valid))
        return UOp(Ops.LOAD, node.dtype, (index,))
    if node.op is Ops.CONST:
        return node
    if node.op is Ops.REDUCE_AXIS:
        return lower_reduce(ctx, node, idx, valid)
    if node.op in GroupOp.Elementwise:
        return node.replace(src=tuple(lower_value(ctx, s, idx, valid) for s in node.src))
    raise NotImplementedError(f"lowering {node.op} is not supported")


def _ranges_in(*xs: UOp) -> list[UOp]:
    found: dict[UOp, None] = {}
    for x in xs:
        for u in x.toposort():
            if u.op is Ops.RANGE:
                found[u] = None
    return sorted(found, key=lambda r: r.arg[0])


REDUCE_COMBINE = {Ops.ADD: Ops.ADD, Ops.MAX: Ops.MAX, Ops.MUL: Ops.MUL}


def reduce_identity(op: Ops, dtype: DType) -> UOp:
    if op is Ops.ADD:
        return UOp.const(dtype, 0)
    if op is Ops.MUL:
        return UOp.const(dtype, 1)
    return UOp.const(dtype, dtypes.min(dtype))


def _lane_index(lanes: list[UOp]) -> tuple[UOp, int]:
    """A mixed-radix index over lane ranges and the number of lanes."""
    sizes = [r.src[0].arg for r in lanes]
    return _combine(list(zip(lanes, sizes, strict=True))), math.prod(sizes)


def lower_reduce(ctx: LowererContext, node: UOp, idx: Index, valid: UOp) -> UOp:
    op, axes = node.arg
    src = node.src[0]
    in_shape = src.shape
    assert in_shape is not None
    planned = node is ctx.plan.reduce_op
    if planned and ctx.plan.tc is not None:
        return lower_tc_reduce(ctx, node, idx, valid)
    parts_per_axis = ctx.plan.red if planned else tuple((AxisPart(in_shape[a], "loop"),) for a in axes)
    outer = _ranges_in(*idx, valid)
    outer_loops = [r for r in outer if range_kind(r) in LOOP_KINDS]
    outer_lanes = [r for r in outer if range_kind(r) in LANE_KINDS]
    # lanes first: the accumulator has one slot per lane that keeps its own sum
    axis_nodes: list[list[tuple[UOp | AxisPart, int]]] = []
    red_upcast: list[UOp] = []
    unroll: list[UOp] = []
    group_ids: list[tuple[UOp, int]] = []
    for axis_i, parts in enumerate(parts_per_axis):
        nodes: list[tuple[UOp | AxisPart, int]] = []
        for j, p in enumerate(parts):
            if p.size == 1:
                nodes.append((idx_const(0), 1))
            elif p.kind in LANE_KINDS:
                kind = ctx.lane_kind(ctx.plan.n_out + axis_i, j, len(parts), p.kind) if planned else p.kind
                r = ctx.new_range(p.size, kind)
                (red_upcast if p.kind == "upcast" else unroll).append(r)
                nodes.append((r, p.size))
            elif p.kind == "group":
                lid = ctx.new_local_id(p.size)
                group_ids.append((lid, p.size))
                nodes.append((lid, p.size))
            else:
                nodes.append((p, p.size))
        axis_nodes.append(nodes)
    # a vector lane goes last: its accumulator slots are consecutive, so they load and store as one vector
    acc_lanes = sorted(outer_lanes + red_upcast, key=lambda r: range_kind(r) == "vector")
    acc_index, n_slots = _lane_index(acc_lanes)
    acc = UOp(Ops.DEFINE_REG, node.dtype.ptr(n_slots), (), next(ctx.reg_ids))
    slot = UOp(Ops.INDEX, node.dtype.ptr(n_slots), (acc, acc_index))
    identity = reduce_identity(op, node.dtype)
    # the accumulator starts over wherever the reduce's value changes: inside the loops its index uses
    init = UOp(Ops.STORE, dtypes.void, (slot, identity, *outer_loops))
    loops: list[UOp] = []
    inner_idx = list(idx)
    in_range = valid
    for axis_i, (a, nodes) in enumerate(zip(axes, axis_nodes, strict=True)):
        built: list[tuple[UOp, int]] = []
        for n, size in nodes:
            if isinstance(n, AxisPart):
                # each loop opens inside the previous one, all after the accumulator is reset
                r = ctx.new_range(size, "loop", (init, *loops))
                if planned:
                    ctx.axis_of[r.arg[0]] = ctx.plan.n_out + axis_i
                loops.append(r)
                built.append((r, size))
            else:
                built.append((n, size))
        axis_idx = _combine(built)
        inner_idx[a] = axis_idx
        real = ctx.plan.real[ctx.plan.n_out + axis_i] if planned else in_shape[a]
        if math.prod(s for _, s in built) > real:
            # PADTO: the padded tail of the axis contributes the identity
            in_range = _and(in_range, axis_idx.lt(real))
    value = lower_value(ctx, src, tuple(inner_idx), in_range)
    if in_range is not valid:
        value = in_range.where(value, identity)
    if unroll:
        value = UOp(Ops.REDUCE_AXIS, value.dtype, (value, *unroll), op)
    current = UOp(Ops.LOAD, node.dtype, (slot, init, *loops))
    # the update names its loops: a combine that folds to a constant (max(acc, True)) must still run inside them
    update = UOp(Ops.STORE, dtypes.void, (slot, current.alu(REDUCE_COMBINE[op], value), *loops))
    done = update
    for r in reversed(loops):
        done = UOp(Ops.END, dtypes.void, (done, r))
    if ctx.reduce_loops is not None and len(loops) == 1 and not (unroll or red_upcast or group_ids):
        key_idx = tuple(inner_idx)
        ctx.reduce_loops.append(ReduceLoop(src, key_idx, in_range, loops[0], tuple(outer_loops), value, update, done))
    result = UOp(Ops.LOAD, node.dtype, (slot, done))
    if group_ids:
        result = _combine_group(ctx, node.dtype, op, result, group_ids, acc_index, n_slots, outer_loops)
    if red_upcast:
        result = UOp(Ops.REDUCE_AXIS, result.dtype, (result, *red_upcast), op)
    return result


def _combine_group(
    ctx: LowererContext,
    dtype: DType,
    op: Ops,
    partial: UOp,
    group_ids: list[tuple[UOp, int]],
    lane_index: UOp,
    n_slots: int,
    outer_loops: list[UOp],
) -> UOp:
    # each thread of the work-group wrote a partial result; share them through local memory, then every thread
    # combines all of them (all threads get the same answer; only one stores it). The threads of the other work-group
    # dimensions (LOCAL on an output axis) compute other outputs at the same time: each has its own rows
    lid = _combine(group_ids)
    n_group = math.prod(s for _, s in group_ids)
    grouped = {u for u, _ in group_ids}
    others = [(u, u.src[0].arg) for u in ctx.local_specials if u not in grouped]
    row = _combine(others) * n_group if others else idx_const(0)
    size = math.prod(s for _, s in others) * n_group * n_slots
    local = UOp(Ops.DEFINE_LOCAL, dtype.ptr(size, local=True), (), f"temp{next(ctx.local_ids)}")
    mine = UOp(Ops.INDEX, local.dtype, (local, (row + lid) * n_slots + lane_index))
    write = UOp(Ops.STORE, dtypes.void, (mine, partial))
    barrier = UOp(Ops.BARRIER, dtypes.void, (write,))
    acc = UOp(Ops.DEFINE_REG, dtype.ptr(n_slots), (), next(ctx.reg_ids))
    slot = UOp(Ops.INDEX, dtype.ptr(n_slots), (acc, lane_index))
    init = UOp(Ops.STORE, dtypes.void, (slot, reduce_identity(op, dtype), barrier, *outer_loops))
    g = ctx.new_range(n_group, "loop", (init,))
    shared = UOp(Ops.LOAD, dtype, (UOp(Ops.INDEX, local.dtype, (local, (row + g) * n_slots + lane_index)), barrier))
    current = UOp(Ops.LOAD, dtype, (slot, init, g))
    update = UOp(Ops.STORE, dtypes.void, (slot, current.alu(REDUCE_COMBINE[op], shared)))
    return UOp(Ops.LOAD, dtype, (slot, UOp(Ops.END, dtypes.void, (update, g))))


# ---------------------------------------------------------------------------------------------------------------------
# outputs


def _vector_part(plan: KernelPlan, width: int) -> tuple[int, int] | None:
    if width < 4 or plan.tc is not None:
        return None
    first = next((o for o in plan.opts if o.op is OptOps.UPCAST), None)
    if first is None or first.amount & (first.amount - 1) or not 4 <= first.amount <= width:
        return None
    # later opts only split the loop parts in front of it: it is the axis's last upcast part
    parts = plan.axis_parts(first.axis)
    for j in range(len(parts) - 1, -1, -1):
        if parts[j].kind == "upcast":
            return (first.axis, len(parts) - j) if parts[j].size == first.amount else None
    return None


def _output_axes(ctx: LowererContext) -> tuple[Index, list[UOp], UOp]:
    """The index of each output axis, the loops to close after the store, and the store's gate."""
    plan = ctx.plan
    loops: list[UOp] = []
    gate = TRUE
    # GPU-style backends launch a grid: loop parts become group ids (innermost part -> dimension 0)
    grid_parts = [(i, j) for i, parts in enumerate(plan.out) for j, p in enumerate(parts) if p.kind == "loop"]
    grid_ids: dict[tuple[int, int], UOp] = {}
    if ctx.gpu and grid_parts:
        grid_ids = _grid_ids(ctx, [(ij, plan.out[ij[0]][ij[1]].size) for ij in grid_parts])
    # work-group ids the same way round: the innermost LOCAL part is the lowest free dimension, so work-items side by
    # side in a warp (dimension 0 varies fastest) are side by side along the innermost, usually contiguous, axis
    local_parts = [
        (i, j) for i, parts in enumerate(plan.out) for j, p in enumerate(parts) if p.kind == "local" and p.size > 1
    ]
    local_ids = {ij: ctx.new_local_id(plan.out[ij[0]][ij[1]].size) for ij in reversed(local_parts)}
    # CPU threads: the "thread" parts of all axes are one loop (the outermost), its counter decoded per axis
    thread_parts = [
        ((i, j), p.size) for i, parts in enumerate(plan.out) for j, p in enumerate(parts) if p.kind == "thread"
    ]
    if thread_parts:
        thread_ids, thread_loop = _thread_ids(ctx, thread_parts)
        grid_ids.update(thread_ids)
        loops.append(thread_loop)
    idx = []
    for i, parts in enumerate(plan.out):
        nodes: list[tuple[UOp, int]] = []
        for j, p in enumerate(parts):
            if p.size == 1:
                nodes.append((idx_const(0), 1))
            elif (i, j) in grid_ids:
                nodes.append((grid_ids[(i, j)], p.size))
            elif p.kind == "local":
                nodes.append((local_ids[(i, j)], p.size))
            elif p.kind == "tc":
                nodes.append((tile_placeholder(ctx, i), p.size))
            else:
                r = ctx.new_range(p.size, ctx.lane_kind(i, j, len(parts), p.kind))
                ctx.axis_of[r.arg[0]] = i
                if p.kind in LOOP_KINDS:
                    loops.append(r)
                nodes.append((r, p.size))
        axis_idx = _combine(nodes)
        if math.prod(s for _, s in nodes) > plan.real[i]:
            gate = _and(gate, axis_idx.lt(plan.real[i]))
        idx.append(axis_idx)
    return tuple(idx), loops, gate


# values worth computing once and storing: the core decomposes these into tens of ops on backends without them natively
COSTLY_OPS = (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT)


def _reuse_reduce_value(ctx: LowererContext, lowered: UOp, base: UOp, out_index: UOp, loops: list[UOp]) -> UOp:
    """Compute a costly reduced value once where the output needs it again at the same positions (softmax's
    exp(x - max), summed along the row and then scaled by 1/sum): the reduce's loop also stores each value into the
    output element it belongs to, and the output loop reads it back (from cache: the row was just written) instead
    of computing it again.

    Only when it is plainly safe: one reduce loop and one output loop `r_out` of the same length with nothing else
    between them (no lanes, padding or gates), the kernel never reads its output buffer, the value has the output's
    dtype, and every loop the output index uses other than `r_out` is open around the reduce (the reduce is not
    repeated inside the output loop, so each element is written once, then read once, then overwritten with the
    result). The reduce loop stays a "sum"/"max" loop: each iteration stores to its own output element."""
    assert ctx.reduce_loops is not None
    nodes = set(lowered.toposort())
    if any(u.op is Ops.INDEX and u.src[0] is base for u in nodes):
        return lowered
    out_ranges = set(_ranges_in(out_index))
    for red in ctx.reduce_loops:
        if red.end not in nodes or red.value.dtype != base.dtype.base or red.loop not in red.value.toposort():
            continue
        if not any(u.op in COSTLY_OPS for u in red.value.toposort()):
            continue
        for r_out in loops:
            if range_kind(r_out) != "loop" or r_out.src[0].arg != red.loop.src[0].arg or r_out in red.outer:
                continue
            if r_out not in out_ranges or not out_ranges - {r_out} <= set(red.outer):
                continue
            swap = {red.loop: r_out}
            key = (red.src, tuple(i.substitute(swap) for i in red.idx), red.valid.substitute(swap))
            again = ctx.memo.get(key)
            if again is None or again not in nodes:
                continue
            here = UOp(Ops.INDEX, base.dtype, (base, out_index.substitute({r_out: red.loop})))
            spill = UOp(Ops.STORE, dtypes.void, (here, red.value, red.update))
            end = UOp(Ops.END, dtypes.void, (spill, red.loop))
            reload = UOp(Ops.LOAD, red.value.dtype, (UOp(Ops.INDEX, base.dtype, (base, out_index)), end))
            return lowered.substitute({red.end: end, again: reload})
    return lowered


def _grid_ids(ctx: LowererContext, parts: list[tuple[tuple[int, int], int]]) -> dict[tuple[int, int], UOp]:
    # at most 3 grid dimensions: the outer parts beyond two share dimension 2 and are decoded with div/mod
    ids: dict[tuple[int, int], UOp] = {}
    inner = parts[-2:] if len(parts) > 3 else parts
    outer = parts[:-2] if len(parts) > 3 else []
    for dim, (key, size) in enumerate(reversed(inner)):
        ctx.global_dims.append(size)
        ids[key] = UOp(Ops.SPECIAL, dtypes.index, (idx_const(size),), f"gidx{dim}")
    if outer:
        total = math.prod(s for _, s in outer)
        ctx.global_dims.append(total)
        merged = UOp(Ops.SPECIAL, dtypes.index, (idx_const(total),), "gidx2")
        stride = total
        for key, size in outer:
            stride //= size
            ids[key] = (merged // stride) % size if stride > 1 else merged % size
    return ids


def _thread_ids(
    ctx: LowererContext, parts: list[tuple[tuple[int, int], int]]
) -> tuple[dict[tuple[int, int], UOp], UOp]:
    # one parallel loop over every combination of the thread parts (like OpenMP's collapse): each iteration is one
    # block of the output, and the blocks are spread evenly over the threads however the parts are shaped
    loop = ctx.new_range(math.prod(size for _, size in parts), "thread")
    if len(parts) == 1:
        ctx.axis_of[loop.arg[0]] = parts[0][0][0]
    ids: dict[tuple[int, int], UOp] = {}
    stride = loop.src[0].arg
    for n, (key, size) in enumerate(parts):
        stride //= size
        part = loop // stride if stride > 1 else loop
        ids[key] = part % size if n > 0 else part
    return ids, loop


def lower_store(ctx: LowererContext, store: UOp) -> UOp:
    """Lower one kernel output STORE(view of DEFINE_GLOBAL, value) to its loops."""
    target, value = store.src
    if ctx.plan.tc is not None:
        begin_tensor_core(ctx)
    idx, loops, gate = _output_axes(ctx)
    lowered = lower_value(ctx, value, idx, gate)
    base, out_idx = view_index(target, idx)
    assert base.op is Ops.DEFINE_GLOBAL, f"kernel output must be a view of a DEFINE_GLOBAL, got {base.op}"
    # with a GROUP every thread of the work-group holds the result: thread 0 writes it
    for u in lowered.toposort():
        if u.op is Ops.DEFINE_LOCAL:
            for special in {s for s in lowered.toposort() if s.op is Ops.SPECIAL and s.arg.startswith("lidx")}:
                if not any(special in n.toposort() for n in idx):
                    gate = _and(gate, special.alu(Ops.CMPEQ, 0))
            break
    if ctx.reduce_loops and gate is TRUE:
        lowered = _reuse_reduce_value(ctx, lowered, base, out_idx[0], loops)
    index_src = (base, out_idx[0]) if gate is TRUE else (base, out_idx[0], gate)
    out = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, base.dtype, index_src), lowered))
    if ctx.plan.tc is not None:
        out = finish_tensor_core(ctx, out)
    for r in reversed(loops):
        out = UOp(Ops.END, dtypes.void, (out, r))
    return out


def lower_kernel(
    ast: UOp,
    plan: KernelPlan | None = None,
    gpu: bool = False,
    vector_width: int = 1,
    reuse_reduce_values: bool = False,
) -> tuple[UOp, LowererContext]:
    """SINK(STORE(...)) kernel AST -> SINK of loop nests over INDEX/LOAD/STORE, and the context (grid sizes).

    With `vector_width` > 1 the first UPCAST (a power of two from 4 up to that width) becomes a "vector" lane. With
    `reuse_reduce_values` (not on GPU-style kernels) an output that recomputes a costly reduced value reads it back
    from the output buffer instead (`_reuse_reduce_value`).
    """
    plan = plan if plan is not None else initial_plan(ast)
    # 32-bit index arithmetic where it provably cannot overflow (small kernels stay fast), else 64-bit
    for dt in (dtypes.int32, dtypes.int64) if not _exceeds_int32(ast, plan) else (dtypes.int64,):
        with index_dtype(dt):
            ctx = LowererContext(plan, gpu, index_dtype=dt)
            ctx.vector_part = _vector_part(ctx.plan, vector_width)
            if reuse_reduce_values and not gpu and len(ast.src) == 1:
                ctx.reduce_loops = []
            try:
                sink = UOp(Ops.SINK, dtypes.void, tuple(lower_store(ctx, s) for s in ast.src))
            except IndexOverflow:
                continue
            if dt == dtypes.int64 or addresses_fit(sink):
                return sink, ctx
    raise AssertionError("64-bit index arithmetic is the last resort and always fits")


# ---------------------------------------------------------------------------------------------------------------------
# tensor cores (OptOps.TC): the matmul lowered onto the core exactly as its `TensorCore` description says.
# (`uopkit.codegen.opt.tc.match_tensor_core` found, for the optimizer, which axes are M, N and K.) `lower_kernel` calls:
#
# - `begin_tensor_core` (start of `lower_store`): the lane id (SPECIAL "lidx0", work-group dimension 0, when the core
#   has several threads) and placeholders for the tile coordinates M, N, K and the accumulator element.
# - `tile_placeholder` (`_output_axes`): the "tc" part of the M and N axes is a placeholder, so the value the kernel
#   stores is built for a symbolic position inside the tile.
# - `lower_tc_reduce` (`lower_reduce`): the reduce becomes a loop over K tiles around one WMMA. Each fragment element
#   of A and B is the MUL's operand lowered with the placeholders replaced by its (row, col) in the A or B layout;
#   the accumulator holds the thread's C fragment (one DEFINE_REG slot per element, per upcast lane around it).
# - `finish_tensor_core` (end of `lower_store`): the placeholders become the C layout's (row, col) of element e of
#   the thread's fragment, with e an upcast lane range; the expander then writes each element where it belongs.


class TensorCoreMatchError(ValueError):
    """The kernel is not a matmul this tensor core can compute (the message says why)."""


def _as_dtype_in(u: UOp, dtype_in: DType) -> UOp | None:
    """`u` as a value of `dtype_in`: itself, the source of a CAST from it, or the same view of such a source (the
    front end casts before it reshapes and expands, so the CAST can sit under movement ops). None if it isn't."""
    if u.dtype == dtype_in:
        return u
    if u.op is Ops.CAST and u.src[0].dtype == dtype_in:
        return u.src[0]
    if u.op in GroupOp.Movement:
        inner = _as_dtype_in(u.src[0], dtype_in)
        return None if inner is None else u.replace(dtype=dtype_in, src=(inner,))
    return None


def mul_operands(value: UOp, tc: TensorCore) -> tuple[UOp, UOp]:
    """The two `dtype_in` operands of a reduce source MUL(x, y), MUL(CAST(x), CAST(y)) or CAST(MUL(x, y)).

    With CAST(MUL(x, y)) the tensor core multiplies exactly where the kernel would round the product to
    `dtype_in` first: the result can only be closer to the exact one."""
    mul = value.src[0] if value.op is Ops.CAST and value.src[0].op is Ops.MUL else value
    if mul.op is not Ops.MUL:
        raise TensorCoreMatchError(f"the reduce must sum a product (MUL), not {value.op.name}")
    operands = []
    for s in mul.src:
        operand = _as_dtype_in(s, tc.dtype_in)
        if operand is None:
            raise TensorCoreMatchError(f"a factor of the product has dtype {s.dtype}, not the core's {tc.dtype_in}")
        operands.append(operand)
    return operands[0], operands[1]


@dataclass
class TensorCoreLowering:
    """Per-kernel state: the lane id within the core's threads and the placeholders of the tile coordinates."""

    lane: UOp | int
    m: UOp
    n: UOp
    k: UOp
    elem: UOp


def _placeholder(size: int, what: str) -> UOp:
    # a RANGE with a negative id never reaches the program: finish_tensor_core or lower_tc_reduce replace it
    return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size),), (-1, f"tc_{what}"))


def _bits_index(bits: tuple[str, ...], lane: UOp | int, elem: UOp | int) -> UOp:
    """The row or column a TileLayout's bit list names (as `TileLayout.coord`), with each run of consecutive bits
    of one source taken by one shift and mask: ``("t2", "t3", "t4")`` is ``lane // 4`` rather than three bits."""
    runs: list[list] = []
    for position, name in enumerate(bits):
        source, k = name[0], int(name[1:])
        if runs and runs[-1][0] == source and runs[-1][1] + runs[-1][2] == k:
            runs[-1][2] += 1
        else:
            runs.append([source, k, 1, position])
    value = UOp.const(dtypes.index, 0)
    for source, k, length, position in runs:
        x = lane if source == "t" else elem
        if isinstance(x, int):
            term: UOp | int = (x >> k) % (1 << length)
        else:
            term = x // (1 << k) if k else x
            # the top bits need no mask when the id never reaches them
            if x.vmax >= 1 << (k + length):
                term = term % (1 << length)
        value = value + (term * (1 << position) if position else term)
    return value


def _coord(layout: TileLayout, lane: UOp | int, elem: UOp | int) -> tuple[UOp, UOp]:
    return _bits_index(layout.rows, lane, elem), _bits_index(layout.cols, lane, elem)


def begin_tensor_core(ctx: LowererContext) -> None:
    assert ctx.plan.tc is not None
    tc = ctx.plan.tc.tc
    m, n, k = tc.dims
    # the core's threads are work-group dimension 0, so they are consecutive lanes of one warp
    lane: UOp | int = ctx.new_local_id(tc.threads) if tc.threads > 1 else 0
    ctx.tensor_core = TensorCoreLowering(
        lane,
        _placeholder(m, "m"),
        _placeholder(n, "n"),
        _placeholder(k, "k"),
        _placeholder(tc.elements_per_thread[2], "e"),
    )


def tile_placeholder(ctx: LowererContext, axis: int) -> UOp:
    """The position inside the tile along output axis `axis` (M or N), before the C layout is known."""
    tcp, state = ctx.plan.tc, ctx.tensor_core
    assert tcp is not None and state is not None
    if axis == tcp.m_axis:
        return state.m
    if axis == tcp.n_axis:
        return state.n
    raise AssertionError(f"axis {axis} has a tensor core part but is neither M nor N")


def lower_tc_reduce(ctx: LowererContext, node: UOp, idx: tuple[UOp, ...], valid: UOp) -> UOp:
    tcp, state = ctx.plan.tc, ctx.tensor_core
    assert tcp is not None and state is not None
    tc = tcp.tc
    ea, eb, ec = tc.elements_per_thread
    outer = _ranges_in(*idx, valid)
    outer_loops = [r for r in outer if r.arg[1] in LOOP_KINDS]
    # other upcast lanes around the core (UPCAST of M or N): one C fragment per lane, each its own WMMA
    lane_index, n_lanes = _lane_index([r for r in outer if r.arg[1] in LANE_KINDS])
    acc = UOp(Ops.DEFINE_REG, tc.dtype_out.ptr(n_lanes * ec), (), next(ctx.reg_ids))

    def slot(e: UOp | int) -> UOp:
        return UOp(Ops.INDEX, acc.dtype, (acc, lane_index * ec + e))

    inits = tuple(UOp(Ops.STORE, dtypes.void, (slot(e), UOp.const(tc.dtype_out, 0), *outer_loops)) for e in range(ec))
    k_parts = ctx.plan.red[tcp.k_axis - ctx.plan.n_out]
    k_tiles = k_parts[0].size if len(k_parts) > 1 else 1
    kt = ctx.new_range(k_tiles, "loop", inits)
    ctx.axis_of[kt.arg[0]] = tcp.k_axis
    inner = list(idx)
    inner[node.arg[1][0]] = kt * tc.dims[2] + state.k

    def fragment(operand: UOp, operand_i: int, count: int) -> UOp:
        elems = []
        for e in range(count):
            row, col = _coord(tc.layouts[operand_i], state.lane, e)
            zero = UOp.const(dtypes.index, 0)
            # A is M x K and does not read N; B is K x N and does not read M
            mapping = (
                {state.m: row, state.n: zero, state.k: col}
                if operand_i == 0
                else {
                    state.m: zero,
                    state.n: col,
                    state.k: row,
                }
            )
            at = tuple(u.substitute(mapping) for u in inner)
            elems.append(lower_value(ctx, operand, at, valid.substitute(mapping)))
        return UOp(Ops.VECTORIZE, tc.dtype_in.vec(count), tuple(elems))

    x, y = mul_operands(node.src[0], tc)
    a_op, b_op = (x, y) if tcp.a_src == 0 else (y, x)
    a_vec, b_vec = fragment(a_op, 0, ea), fragment(b_op, 1, eb)
    c_vec = UOp(
        Ops.VECTORIZE, tc.dtype_out.vec(ec), tuple(UOp(Ops.LOAD, tc.dtype_out, (slot(e), kt)) for e in range(ec))
    )
    d_vec = UOp(Ops.WMMA, tc.dtype_out.vec(ec), (a_vec, b_vec, c_vec), tc)
    # chained stores (each orders after the previous), so one END closes the loop after all of them
    update: UOp | None = None
    for e in range(ec):
        value = UOp(Ops.GEP, tc.dtype_out, (d_vec,), (e,))
        update = UOp(Ops.STORE, dtypes.void, (slot(e), value) + ((update,) if update is not None else ()))
    assert update is not None
    done = UOp(Ops.END, dtypes.void, (update, kt))
    return UOp(Ops.LOAD, tc.dtype_out, (slot(state.elem), done))


def finish_tensor_core(ctx: LowererContext, out: UOp) -> UOp:
    """Place the thread's C fragment: the tile placeholders become the C layout's coordinates of element e."""
    tcp, state = ctx.plan.tc, ctx.tensor_core
    assert tcp is not None and state is not None
    elem = ctx.new_range(tcp.tc.elements_per_thread[2], "upcast")
    row, col = _coord(tcp.tc.c_layout, state.lane, elem)
    return out.substitute({state.m: row, state.n: col, state.elem: elem})


INT32_MAX = dtypes.max(dtypes.int32)


def _exceeds_int32(ast: UOp, plan: KernelPlan) -> bool:
    """Can an index of this kernel pass int32: a buffer, a view (strides and offsets are below its size) or a loop?"""
    padded = [math.prod(p.size for p in parts) for parts in (*plan.out, *plan.red)]
    if math.prod(padded[: plan.n_out]) > INT32_MAX or any(s > INT32_MAX for s in padded):
        return True
    return any(u.shape is not None and math.prod(u.shape) > INT32_MAX for u in ast.toposort())


def addresses_fit(sink: UOp) -> bool:
    """Range analysis of every address computed from loop counters and thread ids: none overflows its type.

    A value that overflows gets the whole range of its dtype from vmin/vmax; addresses computed from loaded data
    (gathers) have that range anyway and are not judged here.
    """
    addresses = [u.src[1] for u in sink.toposort() if u.op is Ops.INDEX]
    from_data: set[UOp] = set()
    for u in UOp(Ops.SINK, dtypes.void, tuple(addresses)).toposort(gate=lambda x: x.op is not Ops.LOAD):
        if any(s.op is Ops.LOAD or s in from_data for s in u.src):
            from_data.add(u)
        elif u.op in GroupOp.ALU and u.dtype in (dtypes.int32, dtypes.int64):
            if u.vmin <= dtypes.min(u.dtype) or u.vmax >= dtypes.max(u.dtype):
                return False
    return True
