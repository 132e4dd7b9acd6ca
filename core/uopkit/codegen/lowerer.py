"""Lower a kernel AST to loops: views become index arithmetic over RANGEs, reduces become DEFINE_REG accumulators."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from uopkit.dtype import dtypes
from uopkit.helpers import strides_for_shape
from uopkit.uop.ops import GroupOp, Ops, UOp

Index = tuple[UOp, ...]
TRUE = UOp.const(dtypes.bool, True)


def idx_const(v: int) -> UOp:
    return UOp.const(dtypes.index, v)


@dataclass
class LowererContext:
    range_ids: itertools.count = field(default_factory=itertools.count)
    reg_ids: itertools.count = field(default_factory=itertools.count)
    memo: dict[tuple[UOp, Index, UOp], UOp] = field(default_factory=dict)

    def new_range(self, size: int, kind: str, deps: tuple[UOp, ...] = ()) -> UOp:
        return UOp(Ops.RANGE, dtypes.index, (idx_const(size), *deps), (next(self.range_ids), kind))


def _and(a: UOp, b: UOp) -> UOp:
    if a is TRUE:
        return b
    if b is TRUE:
        return a
    return a.alu(Ops.AND, b)


def move_index(node: UOp, idx: Index) -> Index:
    """The index into `node`'s source that one movement op (not PAD) maps `idx` to."""
    in_shape = node.src[0].shape
    assert in_shape is not None
    if node.op is Ops.RESHAPE:
        flat = idx_const(0)
        for i, st in zip(idx, strides_for_shape(node.arg), strict=True):
            if st:
                flat = flat + i * st
        return tuple(
            (flat // st) % s if s != 1 else idx_const(0)
            for s, st in zip(in_shape, _dense_strides(in_shape), strict=True)
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


def _dense_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def pad_index(node: UOp, idx: Index) -> tuple[Index, UOp]:
    """Index into a PAD's source and the condition that the element is not padding."""
    in_shape = node.src[0].shape
    assert in_shape is not None
    new_idx, ok = [], TRUE
    for i, (b, _), s in zip(idx, node.arg, in_shape, strict=True):
        shifted = i + (-b) if b else i
        if b:
            ok = _and(ok, shifted.alu(Ops.CMPLT, 0).alu(Ops.CMPNE, True))
        if i.vmax - b >= s:
            ok = _and(ok, shifted.lt(s))
        new_idx.append(shifted)
    return tuple(new_idx), ok


def lower_value(ctx: LowererContext, node: UOp, idx: Index, valid: UOp) -> UOp:
    key = (node, idx, valid)
    if key in ctx.memo:
        return ctx.memo[key]
    ret = _lower_value(ctx, node, idx, valid)
    ctx.memo[key] = ret
    return ret


def _lower_value(ctx: LowererContext, node: UOp, idx: Index, valid: UOp) -> UOp:
    if node.op is Ops.PAD:
        inner_idx, ok = pad_index(node, idx)
        inner = lower_value(ctx, node.src[0], inner_idx, _and(valid, ok))
        return inner if ok is TRUE else ok.where(inner, inner.const_like(0))
    if node.op in GroupOp.Movement:
        # move the index through movement ops until a PAD or a value
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


def reduce_identity(op: Ops, dtype: dtypes) -> UOp:  # type: ignore[valid-type]
    if op is Ops.ADD:
        return UOp.const(dtype, 0)
    if op is Ops.MUL:
        return UOp.const(dtype, 1)
    return UOp.const(dtype, dtypes.min(dtype))


def lower_reduce(ctx: LowererContext, node: UOp, idx: Index, valid: UOp) -> UOp:
    op, axes = node.arg
    src = node.src[0]
    in_shape = src.shape
    assert in_shape is not None
    outer = _ranges_in(*idx, valid)
    acc = UOp(Ops.DEFINE_REG, node.dtype.ptr(1), (), next(ctx.reg_ids))
    acc_slot = UOp(Ops.INDEX, node.dtype.ptr(1), (acc, idx_const(0)))
    # the accumulator starts over wherever the reduce's value changes: inside the loops its index uses
    init = UOp(Ops.STORE, dtypes.void, (acc_slot, reduce_identity(op, node.dtype), *outer))
    red_ranges = []
    inner_idx = list(idx)
    for a in axes:
        if in_shape[a] == 1:
            inner_idx[a] = idx_const(0)
            continue
        r = ctx.new_range(in_shape[a], "reduce", (init,))
        red_ranges.append(r)
        inner_idx[a] = r
    value = lower_value(ctx, src, tuple(inner_idx), valid)
    if not red_ranges:
        return value
    current = UOp(Ops.LOAD, node.dtype, (acc_slot, *red_ranges))
    update = UOp(Ops.STORE, dtypes.void, (acc_slot, current.alu(REDUCE_COMBINE[op], value)))
    done = update
    for r in reversed(red_ranges):
        done = UOp(Ops.END, dtypes.void, (done, r))
    return UOp(Ops.LOAD, node.dtype, (acc_slot, done))


def lower_store(ctx: LowererContext, store: UOp) -> UOp:
    """Lower one kernel output STORE(view of DEFINE_GLOBAL, value) to its loops."""
    target, value = store.src
    shape = value.shape
    assert shape is not None
    ranges = [ctx.new_range(s, "global") if s != 1 else None for s in shape]
    idx = tuple(r if r is not None else idx_const(0) for r in ranges)
    lowered = lower_value(ctx, value, idx, TRUE)
    base, out_idx = view_index(target, idx)
    assert base.op is Ops.DEFINE_GLOBAL, f"kernel output must be a view of a DEFINE_GLOBAL, got {base.op}"
    out = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, base.dtype, (base, out_idx[0])), lowered))
    for r in reversed([r for r in ranges if r is not None]):
        out = UOp(Ops.END, dtypes.void, (out, r))
    return out


def lower_kernel(ast: UOp) -> UOp:
    """SINK(STORE(...)...) kernel AST -> SINK of loop nests over INDEX/LOAD/STORE."""
    ctx = LowererContext()
    return UOp(Ops.SINK, dtypes.void, tuple(lower_store(ctx, s) for s in ast.src))
