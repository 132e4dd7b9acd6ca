"""Lower a kernel AST to loops: views become index arithmetic over RANGEs, reduces become DEFINE_REG accumulators.

The kernel's `KernelPlan` says how each axis is split (loops, CPU threads, GPU ids, unrolled lanes). Lane ranges
(kind "upcast"/"unroll") stay symbolic here; the expander replaces them by one copy of the code per lane.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from uopkit.codegen.cascade import Cascade, cascade_for, fold_partial, partial_accumulator
from uopkit.codegen.index_width import INT32_MAX, addresses_fit, exceeds_int32
from uopkit.codegen.plan import AxisPart, KernelPlan, OptOps, initial_plan
from uopkit.dtype import DType, dtypes, index_dtype
from uopkit.helpers import strides_for_shape
from uopkit.uop.ops import GroupOp, Ops, UOp, is_one_hot_reduce
from uopkit.uop.symbolic import conjuncts, put_in_place

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
    # the work-group ids of the planned reduce's GROUP parts, by (reduce axis, part): a reduce read at two places
    # (one sum stacked with itself) is lowered twice over the same work-group dimensions
    group_ids: dict[tuple[int, int], UOp] = field(default_factory=dict)
    # the lane ranges of the planned reduce's UPCAST and UNROLL parts, by (reduce axis, part), reused the same way: a
    # kernel has one vector lane, and a second lowering would make a second one (a sigmoid's gradient over both
    # halves of one fused matmul)
    lane_ids: dict[tuple[int, int], UOp] = field(default_factory=dict)
    # a reduce lowered as `deferred_value` (else its identity), and the (index, validity) each read of it was lowered
    # at: a scatter kernel sums its writes into the output first (`uopkit.codegen.scatter`)
    deferred_reduce: UOp | None = None
    deferred_value: UOp | None = None
    deferred_at: list[tuple[Index, UOp]] = field(default_factory=list)
    # long float sums add in blocks, each into a partial accumulator (`uopkit.codegen.cascade`)
    cascade_sums: bool = False

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
        at = idx[0] if len(node.src) == 1 else idx[0] + _window_start(node.src[1])
        index = UOp(Ops.INDEX, buf.dtype, (buf, at) if valid is TRUE else (buf, at, valid))
        return UOp(Ops.LOAD, node.dtype, (index,))
    if node.op is Ops.CONST:
        return node
    if node.op is Ops.DEFINE_VAR:
        # a launch value read as a value (`schedule.launch_consts`), in this kernel's index type like any variable
        return UOp.variable(*node.arg)
    if node.op is Ops.IOTA:
        return idx[0].cast(node.dtype) if idx[0].dtype != node.dtype else idx[0]
    if node.op is Ops.REDUCE_AXIS:
        if node is ctx.deferred_reduce:
            ctx.deferred_at.append((idx, valid))
            return ctx.deferred_value if ctx.deferred_value is not None else reduce_identity(node.arg[0], node.dtype)
        return lower_reduce(ctx, node, idx, valid)
    if node.op in GroupOp.Elementwise:
        return node.replace(src=tuple(lower_value(ctx, s, idx, valid) for s in node.src))
    raise NotImplementedError(f"lowering {node.op} is not supported")


def _window_start(start: UOp) -> UOp:
    """A windowed load's start (a launch value, or one times a constant) in this kernel's index type."""
    if start.dtype == dtypes.index:
        return start
    if start.op is Ops.DEFINE_VAR:
        return UOp.variable(*start.arg)
    return _window_start(start.src[0]) * idx_const(start.src[1].arg)


def _ranges_in(*xs: UOp) -> list[UOp]:
    found: dict[UOp, None] = {}
    loop = Ops.RANGE
    for x in xs:
        for u in x.toposort():
            if u.op is loop:
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
    if (picked := _fold_one_hot(ctx, node, idx, valid)) is not None:
        return picked
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
                r = ctx.lane_ids.get((axis_i, j)) if planned else None
                if r is None:
                    kind = ctx.lane_kind(ctx.plan.n_out + axis_i, j, len(parts), p.kind) if planned else p.kind
                    r = ctx.new_range(p.size, kind)
                    if planned:
                        ctx.lane_ids[(axis_i, j)] = r
                (red_upcast if p.kind == "upcast" else unroll).append(r)
                nodes.append((r, p.size))
            elif p.kind == "group":
                lid = ctx.group_ids.get((axis_i, j)) if planned else None
                if lid is None:
                    lid = ctx.new_local_id(p.size)
                    if planned:
                        ctx.group_ids[(axis_i, j)] = lid
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

    def run_pass(after: UOp, span: LoopSpan | None = None, nest: Cascade | None = None) -> ReducePass:
        lanes = (unroll, red_upcast, outer_loops)
        return _reduce_pass(ctx, node, axes, axis_nodes, idx, valid, slot, after, planned, *lanes, span, nest)

    peel = _padded_tail(ctx, axis_nodes) if planned else None
    outputs = math.prod(ctx.plan.real[: ctx.plan.n_out])
    nest = cascade_for(node, outputs, axis_nodes, n_slots > 1) if ctx.cascade_sums and peel is None else None
    if nest is not None:
        # blocks of the sum add into a partial accumulator each; a tail no block size divides adds first (against a
        # total as small as a block's)
        count = axis_nodes[nest.part[0]][nest.part[1]][1]
        tail = run_pass(init, (nest.part, nest.whole, count - nest.whole)).done if nest.whole < count else init
        done = run_pass(tail, (nest.part, 0, nest.whole), nest).done
    elif peel is None:
        one = run_pass(init)
        done = one.done
        if ctx.reduce_loops is not None and len(one.loops) == 1 and not (unroll or red_upcast or group_ids):
            red = ReduceLoop(src, one.idx, one.valid, one.loops[0], tuple(outer_loops), one.value, one.update, done)
            ctx.reduce_loops.append(red)
    else:
        # a padded axis (PADTO) reads past the row only in its last few iterations: the loop over the others has no
        # bounds check (its loads stay whole vectors), the tail after it does
        part, main, tail = peel
        done = run_pass(init, (part, 0, main)).done
        if tail:
            done = run_pass(done, (part, main, tail)).done
    result = UOp(Ops.LOAD, node.dtype, (slot, done))
    if group_ids:
        result = _combine_group(ctx, node.dtype, op, result, group_ids, acc_index, n_slots, outer_loops)
    if red_upcast:
        result = UOp(Ops.REDUCE_AXIS, result.dtype, (result, *red_upcast), op)
    return result


def _fold_one_hot(ctx: LowererContext, node: UOp, idx: Index, valid: UOp) -> UOp | None:
    """A sum over k of where(v == k, y(k), 0), k counting 0..n-1 (an IOTA): that is y(v) where 0 <= v < n, else 0.
    Indexing, gather and embeddings compare an index with an iota this way: the reduce becomes one load at the index
    instead of a loop over every position (a max of bools, a boolean tensor's indexing, likewise). None: not that."""
    if not is_one_hot_reduce(node):
        return None
    op, axes = node.arg
    src = node.src[0]
    if node is ctx.plan.reduce_op and any(p.kind != "loop" for p in ctx.plan.red[0]):
        return None
    n = src.shape[axes[0]] if src.shape is not None else 0
    r = ctx.new_range(n, "loop")
    value = lower_value(ctx, src, tuple(r if i == axes[0] else x for i, x in enumerate(idx)), valid)
    identity = reduce_identity(op, node.dtype)
    if value.op is not Ops.WHERE or value.src[2].op is not Ops.CONST or value.src[2].arg != identity.arg:
        return None
    cond, picked = value.src[0], value.src[1]
    if cond.op is not Ops.CMPEQ:
        return None
    from uopkit.uop.symbolic import simplify

    def is_k(u: UOp) -> bool:
        u = simplify(u.src[0] if u.op is Ops.CAST and dtypes.is_int(u.src[0].dtype) else u)
        return u is r

    # (only a side computed from the loop's range can be it: the index, which may be a long chain of loads at
    # positions found by earlier gathers, a binary search's, is not simplified once per gather)
    with_r = [r in s.toposort() for s in cond.src]
    sides = [s for s, has in zip(cond.src, with_r, strict=True) if has and is_k(s)]
    index = next((s for s, has in zip(cond.src, with_r, strict=True) if not has), None)
    # (a value read through a nested reduce's loops or registers isn't substituted into)
    if not sides or index is None or any(u.op in (Ops.DEFINE_REG, Ops.END, Ops.STORE) for u in picked.toposort()):
        return None
    in_range = index_in_range(index, n)
    if in_range is None:
        return put_in_place(picked, r, index.cast(r.dtype) if index.dtype != r.dtype else index)
    at = in_range.where(index, index.const_like(0))
    at = at.cast(r.dtype) if at.dtype != r.dtype else at
    return in_range.where(put_in_place(picked, r, at), identity)


def index_in_range(index: UOp, n: int) -> UOp | None:
    """Whether a computed `index` is in [0, n); None when its dtype can't hold a value outside (bounds the dtype
    can't hold are no bounds: -1 for an unsigned index, n past a narrow one's largest)."""
    checks = []
    if n <= dtypes.max(index.dtype):
        checks.append(index.alu(Ops.CMPLT, index.const_like(n)))
    if not dtypes.is_unsigned(index.dtype):
        checks.append(index.const_like(-1).alu(Ops.CMPLT, index))
    if not checks:
        return None
    return checks[0] if len(checks) == 1 else _and(*checks)


# (axis, part) of a padded reduce loop, the iterations run unchecked and the iterations left after them
LoopSpan = tuple[tuple[int, int], int, int]


class ReducePass(NamedTuple):
    """One loop nest of a reduce (`_reduce_pass`): what closes it, its loops, the source's index and validity inside
    them, the value folded in and the accumulator's update."""

    done: UOp
    loops: list[UOp]
    idx: Index
    valid: UOp
    value: UOp
    update: UOp


def _padded_tail(
    ctx: LowererContext, axis_nodes: list[list[tuple[UOp | AxisPart, int]]]
) -> tuple[tuple[int, int], int, int] | None:
    """The loop part of the one padded reduce axis, how many of its first iterations stay inside the real size
    whatever the axis's other parts (work-items, lanes) are, and how many after them still reach it (0: the rest is
    all padding); None when no iteration can run unchecked."""
    padded = [
        i for i, nodes in enumerate(axis_nodes) if math.prod(s for _, s in nodes) > ctx.plan.real[ctx.plan.n_out + i]
    ]
    # a staged reduce (OptOps.STAGE) keeps one loop nest: its copies and barriers are per step, not per pass
    staged = any(isinstance(n, AxisPart) and n.kind == "stage" for nodes in axis_nodes for n, _ in nodes)
    if len(padded) != 1 or staged:
        return None
    axis_i = padded[0]
    nodes = axis_nodes[axis_i]
    loops = [j for j, (n, _) in enumerate(nodes) if isinstance(n, AxisPart)]
    if len(loops) != 1:
        return None
    j = loops[0]
    # the largest index the other parts reach with the loop at 0; iteration k's elements are k * stride + that
    inner = math.prod(s for _, s in nodes[j + 1 :])
    rest_max = sum((s - 1) * math.prod(t for _, t in nodes[k + 1 :]) for k, (_, s) in enumerate(nodes) if k != j)
    real = ctx.plan.real[ctx.plan.n_out + axis_i]
    main = max(0, (real - 1 - rest_max) // inner + 1)
    if not 0 < main < nodes[j][1]:
        return None
    # iterations from `reach` on start past the real size whatever the other parts are
    reach = min(nodes[j][1], -(-real // inner))
    return (axis_i, j), main, reach - main


def _reduce_pass(
    ctx: LowererContext,
    node: UOp,
    axes: tuple[int, ...],
    axis_nodes: list[list[tuple[UOp | AxisPart, int]]],
    idx: Index,
    valid: UOp,
    slot: UOp,
    after: UOp,
    planned: bool,
    unroll: list[UOp],
    red_upcast: list[UOp],
    outer_loops: list[UOp],
    span: LoopSpan | None = None,
    nest: Cascade | None = None,
) -> ReducePass:
    """One loop nest that folds the reduce's source into the accumulator `slot`, opened after `after` (the
    accumulator's reset or an earlier pass). With `span` the loop part it names runs only iterations
    [start, start + count), and the axis's bounds check is left out when those never leave the real size. With
    `nest` the loop part it names runs in blocks, each summed into a partial accumulator (`uopkit.codegen.cascade`)."""
    op = node.arg[0]
    identity = reduce_identity(op, node.dtype)
    loops: list[UOp] = []
    # the partial accumulator's slot and reset, and the loop its blocks are iterations of (`nest`)
    partial: tuple[UOp, UOp, UOp] | None = None
    opened = after
    # OptOps.STAGE: the stage loops open after the step's operands are in local memory (`stage_operands`); until
    # then placeholders stand for them
    staged: list[tuple[UOp, int]] = []
    inner_idx = list(idx)
    in_range = valid
    for axis_i, (a, nodes) in enumerate(zip(axes, axis_nodes, strict=True)):
        built: list[tuple[UOp, int]] = []
        for j, (n, size) in enumerate(nodes):
            if isinstance(n, AxisPart) and n.kind == "stage":
                staged.append((stage_placeholder(len(staged), size), ctx.plan.n_out + axis_i))
                built.append((staged[-1][0], size))
            elif isinstance(n, AxisPart):
                start, count = (span[1], span[2]) if span is not None and span[0] == (axis_i, j) else (0, size)
                if count == 1:
                    built.append((idx_const(start), size))
                    continue
                block, made = nest.block if nest is not None and nest.part == (axis_i, j) else 0, len(loops)
                # each loop opens inside the previous one, all after the accumulator is reset
                r = ctx.new_range(count // block if block else count, "loop", (opened, *loops))
                loops.append(r)
                if block:
                    # a fresh partial accumulator for each block: `block` iterations of this loop (a loop inside it)
                    partial = (*partial_accumulator(slot, next(ctx.reg_ids), identity, (*outer_loops, *loops)), r)
                    opened = partial[1]
                    if block > 1:
                        loops.append(ctx.new_range(block, "loop", (opened, *loops)))
                        r = r * block + loops[-1]
                for loop in loops[made:] if planned else ():
                    ctx.axis_of[loop.arg[0]] = ctx.plan.n_out + axis_i
                built.append((r + start if start else r, size))
            else:
                built.append((n, size))
        axis_idx = _combine(built)
        inner_idx[a] = axis_idx
        real = ctx.plan.real[ctx.plan.n_out + axis_i] if planned else node.src[0].shape[a]
        unchecked = nest is None and span is not None and span[0][0] == axis_i and span[1] == 0
        if math.prod(s for _, s in built) > real and not unchecked:
            # PADTO: the padded tail of the axis contributes the identity
            in_range = _and(in_range, axis_idx.lt(real))
    value = lower_value(ctx, node.src[0], tuple(inner_idx), in_range)
    if in_range is not valid:
        value = in_range.where(value, identity)
    n_steps_loops, shared = len(loops), False
    if staged:
        value, stage_loops, shared = stage_operands(ctx, value, after, loops, staged, outer_loops, unroll + red_upcast)
        loops += stage_loops
    if unroll:
        value = UOp(Ops.REDUCE_AXIS, value.dtype, (value, *unroll), op)
    target = slot if partial is None else partial[0]
    current = UOp(Ops.LOAD, node.dtype, (target, opened, *loops))
    # the update names its loops (and what it follows): a combine that folds to a constant (max(acc, True)) must
    # still run inside them
    deps = loops if loops else [after]
    update = UOp(Ops.STORE, dtypes.void, (target, current.alu(REDUCE_COMBINE[op], value), *deps))
    done = update
    for i in reversed(range(len(loops))):
        if partial is not None and loops[i] is partial[2]:
            # the block is summed: into the accumulator with it
            done = fold_partial(slot, after, partial[0], done, tuple(loops[: i + 1]))
        done = UOp(Ops.END, dtypes.void, (done, loops[i]))
        if shared and i == n_steps_loops and i > 0:
            # every work-item is done reading this step's local copies before the next step overwrites them
            done = UOp(Ops.BARRIER, dtypes.void, (done,))
    return ReducePass(done, loops, tuple(inner_idx), in_range, value, update)


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
    # each work-item of the work-group wrote a partial result; they are combined in local memory as a tree: step k
    # folds the upper half of the slots still live onto the lower half (work-item t: slot t += slot t + s) with a
    # barrier after each, so ceil(log2(n)) steps for n work-items. A work-group that is not a power of two is
    # treated as padded to one: slots past n are never read (t + s < n). Every work-item then reads slot 0 (only
    # one stores it). The work-items of the other work-group dimensions (LOCAL on an output axis) compute other
    # outputs at the same time: each has its own rows
    lid = _combine(group_ids)
    n_group = math.prod(s for _, s in group_ids)
    grouped = {u for u, _ in group_ids}
    others = [(u, u.src[0].arg) for u in ctx.local_specials if u not in grouped]
    row = _combine(others) * n_group if others else idx_const(0)
    size = math.prod(s for _, s in others) * n_group * n_slots
    local = UOp(Ops.DEFINE_LOCAL, dtype.ptr(size, local=True), (), f"temp{next(ctx.local_ids)}")

    def at(i: UOp, gate: UOp = TRUE) -> UOp:
        addr = (row + i) * n_slots + lane_index
        return UOp(Ops.INDEX, local.dtype, (local, addr) if gate is TRUE else (local, addr, gate))

    # (the partial is stored once per iteration of the loops around the reduce, as its accumulator was reset)
    done = UOp(Ops.BARRIER, dtypes.void, (UOp(Ops.STORE, dtypes.void, (at(lid), partial, *outer_loops)),))
    for stride in tree_strides(n_group):
        # the work-items below both the stride and n - stride have a partner slot
        gate = lid.lt(min(stride, n_group - stride))
        mine = UOp(Ops.LOAD, dtype, (at(lid, gate), done))
        theirs = UOp(Ops.LOAD, dtype, (at(lid + stride, gate), done))
        folded = UOp(Ops.STORE, dtypes.void, (at(lid, gate), mine.alu(REDUCE_COMBINE[op], theirs)))
        done = UOp(Ops.BARRIER, dtypes.void, (folded,))
    return UOp(Ops.LOAD, dtype, (at(idx_const(0)), done))


def tree_strides(n: int) -> list[int]:
    """The strides of a tree combine of `n` values: half the next power of two, halving down to 1 ([] for n = 1)."""
    stride, strides = 1, []
    while stride < n:
        stride *= 2
    while stride > 1:
        stride //= 2
        strides.append(stride)
    return strides


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
    # loops nest in the order their ranges are made (the linearizer opens the lowest id first): with a loop order
    # (OptOps.SWAP) the plain loops are made first, in that order
    ordered: dict[tuple[int, int], UOp] = {}
    if plan.loop_order and not ctx.gpu:
        for i in plan.loop_order:
            for j, p in enumerate(plan.out[i]):
                if p.kind == "loop" and p.size > 1:
                    ordered[(i, j)] = ctx.new_range(p.size, "loop")
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
                r = ordered.get((i, j)) or ctx.new_range(p.size, ctx.lane_kind(i, j, len(parts), p.kind))
                ctx.axis_of[r.arg[0]] = i
                if p.kind in LOOP_KINDS:
                    loops.append(r)
                nodes.append((r, p.size))
        axis_idx = _combine(nodes)
        if math.prod(s for _, s in nodes) > plan.real[i]:
            gate = _and(gate, axis_idx.lt(plan.real[i]))
        idx.append(axis_idx)
    return tuple(idx), sorted(loops, key=lambda r: r.arg[0]), gate


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
    """Lower one kernel output STORE(view of DEFINE_GLOBAL, value[, window start]) to its loops."""
    target, value = store.src[:2]
    if ctx.plan.tc is not None:
        begin_tensor_core(ctx)
    idx, loops, gate = _output_axes(ctx)
    lowered = lower_value(ctx, value, idx, gate)
    base, out_idx = view_index(target, idx)
    assert base.op is Ops.DEFINE_GLOBAL, f"kernel output must be a view of a DEFINE_GLOBAL, got {base.op}"
    if len(store.src) == 3:
        # a window of the buffer (uopkit.schedule.windows): the view counts from its start
        out_idx = (out_idx[0] + _window_start(store.src[2]),)
    # with a GROUP every thread of the work-group holds the result: thread 0 writes it
    local = Ops.DEFINE_LOCAL
    for u in lowered.toposort():
        if u.op is local:
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
    outputs: Callable[[LowererContext, UOp], UOp] | None = None,
    cascade_sums: bool = False,
) -> tuple[UOp, LowererContext]:
    """SINK(STORE(...)) kernel AST -> SINK of loop nests over INDEX/LOAD/STORE, and the context (grid sizes).

    With `vector_width` > 1 the first UPCAST (a power of two from 4 up to that width) becomes a "vector" lane. With
    `reuse_reduce_values` (not on GPU-style kernels) an output that recomputes a costly reduced value reads it back
    from the output buffer instead (`_reuse_reduce_value`). `outputs(ctx, ast)` lowers the kernel's stores in another
    way than one loop nest each (`uopkit.codegen.scatter`). With `cascade_sums` a long float sum adds in blocks, each
    into a partial accumulator (`uopkit.codegen.cascade`).
    """
    plan = plan if plan is not None else initial_plan(ast)
    # 32-bit index arithmetic where it provably cannot overflow (small kernels stay fast), else 64-bit
    for dt in (dtypes.int32, dtypes.int64) if not exceeds_int32(ast, plan) else (dtypes.int64,):
        with index_dtype(dt):
            ctx = LowererContext(plan, gpu, index_dtype=dt, cascade_sums=cascade_sums)
            ctx.vector_part = _vector_part(ctx.plan, vector_width)
            if reuse_reduce_values and not gpu and len(ast.src) == 1:
                ctx.reduce_loops = []
            try:
                if outputs is not None:
                    sink = outputs(ctx, ast)
                else:
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


# ---------------------------------------------------------------------------------------------------------------------
# local-memory staging (OptOps.STAGE). The reduce runs in steps: its loops outside the "stage" parts. `lower_reduce`
# lowers the reduce's value with a placeholder for each stage loop, then `stage_operands` moves each load the
# work-items of a work-group share into local memory. Per step:
#
#   every work-item copies its share of the step's tile of each operand to local memory (consecutive work-items,
#   consecutive elements: the tile is laid out in the operand's own memory order, so the reads are coalesced)
#   BARRIER
#   the stage loops and lanes run as before, each load of a staged operand reading its copy
#   BARRIER (`lower_reduce`: before the next step overwrites the copies)
#
# A load's tile is every value of the "tile" ids its address depends on: work-group ids, lanes (UPCAST, UNROLL) and
# stage loops; the rest of its address (group ids, the step's loops) is the same for the whole work-group in a step.


def stage_placeholder(k: int, size: int) -> UOp:
    # a RANGE with a negative id never reaches the program: stage_operands replaces it by the stage loop
    return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size),), (-2 - k, "stage"))


def _ids_in(u: UOp) -> list[UOp]:
    """The loops, lanes and thread ids `u` depends on (a loop's sources only order it: they are not looked into)."""
    found: dict[UOp, None] = {u: None} if u.op is Ops.RANGE else {}
    for x in u.toposort(gate=lambda n: n.op is not Ops.RANGE):
        found.update((s, None) for s in (x, *x.src) if s.op in (Ops.RANGE, Ops.SPECIAL))
    return list(found)


def _step_along(index: UOp, v: UOp) -> int | None:
    """How far `index` moves when `v` goes from 0 to 1, every other id at 0 (None: not a constant)."""
    from uopkit.uop.symbolic import simplify

    zero = {x: x.const_like(0) for x in _ids_in(index) if x is not v}
    at = [simplify(index.substitute({**zero, v: v.const_like(k)})) for k in (0, 1)]
    return at[1].arg - at[0].arg if all(a.op is Ops.CONST for a in at) else None


def _at_element(u: UOp, decode: dict[UOp, UOp]) -> UOp:
    # every id at once (an id's new value may itself hold ids being replaced: a work-item id), and never inside a
    # loop's sources (they hold the accumulator's reset, indexed by lanes): each id is first swapped for a leaf
    ids = _ids_in(u)
    temp = {v: UOp(Ops.RANGE, dtypes.index, v.src[:1], (-1000 - k, "stage")) for k, v in enumerate(ids)}
    return u.substitute(temp).substitute({temp[v]: decode.get(v, v) for v in ids})


def staged_load_axes(ast: UOp) -> list[tuple[frozenset[int], int]]:
    """For each load of global memory in the kernel: the kernel axes its address moves along and its item size
    (`apply_opt` sizes the local memory OptOps.STAGE takes from them; one lowering per kernel, cached)."""
    return _staged_load_axes(ast)


@functools.lru_cache(maxsize=64)
def _staged_load_axes(ast: UOp) -> list[tuple[frozenset[int], int]]:
    lowered, ctx = lower_kernel(ast)
    found = []
    for u in lowered.toposort():
        if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL:
            axes = frozenset(ctx.axis_of[r.arg[0]] for r in _ids_in(u.src[0].src[1]) if r.arg[0] in ctx.axis_of)
            found.append((axes, u.dtype.itemsize))
    return found


def stage_bytes(plan: KernelPlan) -> int:
    """Bytes of local memory the plan's OptOps.STAGE takes: one tile per staged load (a load of the reduce that
    doesn't move along some LOCAL part, so that several work-items read each element)."""
    if plan.ast is None or not any(p.kind == "stage" for parts in plan.red for p in parts):
        return 0
    local_axes = {i for i, parts in enumerate(plan.out) if any(p.kind == "local" and p.size > 1 for p in parts)}
    tile_kinds = ("local", "stage", *LANE_KINDS)
    total = 0
    for axes, itemsize in staged_load_axes(plan.ast):
        if all(a < plan.n_out for a in axes) or local_axes <= axes:
            continue
        sizes = (p.size for a in axes for p in plan.axis_parts(a) if p.kind in tile_kinds)
        total += math.prod(sizes) * itemsize
    return total


def stage_operands(
    ctx: LowererContext,
    value: UOp,
    init: UOp,
    steps: list[UOp],
    staged: list[tuple[UOp, int]],
    outside: list[UOp],
    reduce_lanes: list[UOp],
) -> tuple[UOp, list[UOp], bool]:
    """The reduce's value reading its shared operands from local memory, the stage loops (in order, to close after
    the update) and whether anything was staged. `init`: the accumulator's reset; `steps`: the reduce's loops
    outside the stage parts; `staged`: each stage placeholder and its kernel axis; `outside`: the loops around the
    reduce."""
    placeholders = [p for p, _ in staged]
    reduce_ids = set(steps) | set(placeholders) | set(reduce_lanes)
    tile = set(ctx.local_specials) | set(placeholders)
    tile |= {r for r in value.toposort() if r.op is Ops.RANGE and range_kind(r) in LANE_KINDS}
    uniform = set(steps) | {u for u in value.toposort() if u.op is Ops.SPECIAL and u.arg.startswith("gidx")}
    n_items = math.prod(ctx.local_dims)
    item = _combine([(s, s.src[0].arg) for s in reversed(ctx.local_specials)])
    copies: list[UOp] = []
    reads: dict[UOp, tuple[UOp, UOp, list[UOp]]] = {}
    for u in value.toposort():
        if not (u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL):
            continue
        buf, address = u.src[0].src[:2]
        ids = set(_ids_in(address))
        shared_by_some = not set(ctx.local_specials) <= ids
        if not (ids & reduce_ids and shared_by_some and ids <= tile | uniform):
            continue
        # the tile in the operand's memory order, largest stride outermost
        order = sorted(ids & tile, key=lambda v: -(_step_along(address, v) or INT32_MAX))
        sizes = [v.src[0].arg for v in order]
        n_tile = math.prod(sizes)
        # the gate's conditions on the address's own ids guard the copy; the others (an output axis padded to whole
        # work-groups, say) apply where the copy is read
        gate = conjuncts(u.src[0].src[2]) if len(u.src[0].src) > 2 else []
        at_copy = [c for c in gate if set(_ids_in(c)) <= ids | uniform]
        at_read = [c for c in gate if c not in at_copy]
        local = UOp(Ops.DEFINE_LOCAL, u.dtype.ptr(n_tile, local=True), (), f"temp{next(ctx.local_ids)}")
        # element e of the tile goes to work-item e % n_items: with few copies each, unrolled; else a loop
        n_copies = -(-n_tile // n_items)
        copy = None
        if n_copies > 1:
            copy = ctx.new_range(n_copies, "upcast") if n_copies <= 4 else ctx.new_range(n_copies, "loop", tuple(steps))
        element = item if copy is None else copy * n_items + item
        decode: dict[UOp, UOp] = {}
        inner = n_tile
        for v, size in zip(order, sizes, strict=True):
            inner //= size
            at = element // inner if inner > 1 else element
            decode[v] = at % size if v is not order[0] else at
        in_tile = TRUE if n_tile % n_items == 0 else element.lt(n_tile)
        copy_gate = in_tile
        for c in at_copy:
            copy_gate = _and(copy_gate, _at_element(c, decode))
        src = (buf, _at_element(address, decode)) + (() if copy_gate is TRUE else (copy_gate,))
        loaded = UOp(Ops.LOAD, u.dtype, (UOp(Ops.INDEX, buf.dtype, src),))
        target = (local, element) + (() if in_tile is TRUE else (in_tile,))
        write = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, local.dtype, target), loaded, *steps, *outside))
        if copy is not None and range_kind(copy) == "loop":
            write = UOp(Ops.END, dtypes.void, (write, copy))
        copies.append(write)
        reads[u] = (local, _combine(list(zip(order, sizes, strict=True))), at_read)
    staged_bytes = sum(local.dtype.size * local.dtype.itemsize for local, _, _ in reads.values())
    # apply_opt checked the plan's local memory with `stage_bytes`: it must hold at least what is staged here
    assert staged_bytes <= stage_bytes(ctx.plan), f"{ctx.plan.opts}: stages {staged_bytes} bytes, planned fewer"
    barrier = UOp(Ops.BARRIER, dtypes.void, tuple(copies)) if copies else None
    replace: dict[UOp, UOp] = {}
    for u, (local, at, at_read) in reads.items():
        assert barrier is not None
        read = UOp(Ops.LOAD, u.dtype, (UOp(Ops.INDEX, local.dtype, (local, at)), barrier))
        replace[u] = functools.reduce(_and, at_read, TRUE).where(read, read.const_like(0)) if at_read else read
    # each stage loop opens inside the step's loops, after the accumulator's reset and the copies
    loops: list[UOp] = []
    for p, axis in staged:
        deps = (init, *steps, *loops) if barrier is None else (init, barrier, *steps, *loops)
        loops.append(ctx.new_range(p.src[0].arg, "loop", deps))
        ctx.axis_of[loops[-1].arg[0]] = axis
    value = value.substitute(replace)
    return value.substitute(dict(zip(placeholders, loops, strict=True))), loops, barrier is not None
