"""Scatter kernels: a sum (or max, or product) over writes e of where(key(e) == t, v(e), identity), t an output axis,
lowered as the writes themselves instead of a compare per output element and write.

The front end builds scatter_add, index_add, scatter_reduce, an embedding's or a gather's gradient as such a one-hot
reduce; lowered as a reduce it costs outputs x writes compares (a 2708-node graph's 10556 edges, 16 features: 457M,
~100 ms on two cores). Lowered here (`lower_scatter`) it is loop nests in one kernel, in order:

1. every output element holds the reduce's identity, or x where the output is x combined with the reduce by the
   reduce's own op (x + the sum: x may read the output's own element, an in-place index_add_);
2. for each write e, in order and one at a time (two writes may hit one target), and each other output position: the
   target t = key(e), and out[t] = out[t] + v(e) where 0 <= t < size (max and product likewise);
3. (when the output is some other function of the sum) each output element computed from the sum it holds.

A kernel qualifies when that reduce is its only one and the output has its dtype (`scatter_reduce`), on CPU-style
renderers only, whose loops run in order: a GPU-style kernel keeps the one-hot reduce (its writes would need atomics).
It gets no opts (`uopkit.codegen.opt.heuristic`): the writes' loop must not be split into lanes or threads. The
scheduler gives a large scatter a kernel with no other reduce (`uopkit.schedule.grouper._realize_lone_scatters`).
"""

from __future__ import annotations

import functools

from uopkit.codegen.lowerer import (
    TRUE,
    LowererContext,
    index_in_range,
    lower_kernel,
    lower_store,
    lower_value,
    reduce_identity,
)
from uopkit.codegen.opt.analysis import reduce_folds_away
from uopkit.codegen.plan import KernelPlan
from uopkit.dtype import dtypes
from uopkit.uop.ops import Ops, UOp, is_one_hot_reduce
from uopkit.uop.symbolic import simplify


class NotAScatter(ValueError):
    """The kernel's lowered reduce is not a compare of a computed key with an output position."""


def scatter_reduce(ast: UOp) -> UOp | None:
    """The one-hot sum, max or product of a one-output kernel that stores a value of the reduce's dtype, when it is the
    only reduce (its source may hold none); None when the kernel has no such form."""
    if len(ast.src) != 1 or ast.src[0].src[1].dtype.base.count != 1:
        return None
    reduces = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
    if len(reduces) != 1:
        return None
    red = reduces[0]
    # (a product over where(key == t, v, 1) is one too: scatter_reduce's "prod")
    one_hot = (
        is_one_hot_reduce(red.replace(arg=(Ops.ADD, red.arg[1]))) if red.arg[0] is Ops.MUL else is_one_hot_reduce(red)
    )
    return red if one_hot and red.dtype == ast.src[0].src[1].dtype else None


def lower_scatter(ctx: LowererContext, ast: UOp) -> UOp:
    """`lower_kernel`'s `outputs` for a scatter kernel (see the module docstring); raises NotAScatter when the
    reduce, lowered, isn't a compare of a key with one output position."""
    red = scatter_reduce(ast)
    if red is None or ctx.gpu or ctx.plan.opts:
        raise NotAScatter("not a scatter kernel")
    # the output as it would be stored, the reduce's value a placeholder
    scattered = UOp(Ops.NOOP, red.dtype, (), "scattered")
    ctx.deferred_reduce = red
    ctx.deferred_value = scattered
    nest = lower_store(ctx, ast.src[0])
    if len(ctx.deferred_at) != 1 or ctx.deferred_at[0][1] is not TRUE:
        raise NotAScatter("the reduce is read more than once, or under a condition")
    at_red, _ = ctx.deferred_at[0]
    loops = sorted((u for u in nest.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])
    stores = [u for u in nest.toposort() if u.op is Ops.STORE]
    if len(stores) != 1 or len(stores[0].src[0].src) != 2:
        raise NotAScatter("the output is stored under a gate")
    out, value = stores[0].src
    base, address = out.src
    identity = reduce_identity(red.arg[0], red.dtype)
    rest = _combined_with(value, scattered, red.arg[0])
    if rest is not None:
        # the output is x + the sum (x max the max): x first, then the writes added into it, as PyTorch's index_add
        # adds into a copy of self (x may read the output's own element: an in-place index_add_)
        first = nest.substitute({stores[0]: stores[0].replace(src=(out, rest))})
        writes, update = _scatter_writes(ctx, red, at_red, loops, base, address, first)
        return UOp(Ops.SINK, dtypes.void, (UOp(Ops.END, dtypes.void, (update, writes)),))
    if any(u.op is Ops.INDEX and u.src[0] is base for u in value.toposort()):
        # (the fill below would overwrite what the output computed from the writes reads)
        raise NotAScatter("the output reads its own buffer")
    # 1. every output element holds the reduce's identity
    fill = nest.substitute({stores[0]: stores[0].replace(src=(out, identity))})
    # 2. the writes, in order: the reduce's source at each write e and each output position
    writes, update = _scatter_writes(ctx, red, at_red, loops, base, address, fill)
    done = UOp(Ops.END, dtypes.void, (update, writes))
    if value is scattered:
        return UOp(Ops.SINK, dtypes.void, (done,))
    # 3. the output computed from what the writes summed, element by element, in loops of its own after them
    again = {r: ctx.new_range(r.src[0].arg, "loop") for r in loops}
    outer = again[loops[0]]
    after_writes = {outer: outer.replace(src=(*outer.src, done))}
    summed = UOp(Ops.LOAD, red.dtype, (out.substitute(again).substitute(after_writes), done))
    return UOp(Ops.SINK, dtypes.void, (nest.substitute(again).substitute({**after_writes, scattered: summed}),))


def _combined_with(value: UOp, scattered: UOp, op: Ops) -> UOp | None:
    """x where the lowered output `value` is x `op` scattered (either way round) and x doesn't read it, else None."""
    if value.op is not op:
        return None
    for a, b in (value.src, value.src[::-1]):
        if b is scattered and scattered not in a.toposort():
            return a
    return None


def _scatter_writes(
    ctx: LowererContext, red: UOp, at_red: tuple[UOp, ...], loops: list[UOp], base: UOp, address: UOp, after: UOp
) -> tuple[UOp, UOp]:
    # the writes' loop (after `after`) and, inside it and a loop per other output position, the update of the target
    op, axes = red.arg
    src_shape = red.src[0].shape
    assert src_shape is not None and len(axes) == 1
    # (ordered after `after` once the update is built: the checks below look for the target in what it reads)
    writes = ctx.new_range(src_shape[axes[0]], "loop")
    value = lower_value(ctx, red.src[0], tuple(writes if i == axes[0] else x for i, x in enumerate(at_red)), TRUE)
    identity = reduce_identity(op, red.dtype)
    if value.op is not Ops.WHERE or value.src[2].op is not Ops.CONST or value.src[2].arg != identity.arg:
        raise NotAScatter("the reduce's source is not a select of its identity")
    cond, picked = value.src[0], value.src[1]
    if cond.op is not Ops.CMPEQ:
        raise NotAScatter("the select's condition is not a compare")
    target = next((r for r in loops if any(_is_range(side, r) for side in cond.src)), None)
    if target is None:
        raise NotAScatter("no side of the compare is an output position")
    # (the views' index arithmetic simplified: a reshape round trip leaves (t * 16 + f) // 16 where t is meant)
    key = next((k for k in map(simplify, cond.src) if target not in k.toposort()), None)
    if key is None:
        raise NotAScatter("the key depends on the output position")
    reads = [*key.toposort(), *picked.toposort()]
    if any(u.op in (Ops.DEFINE_REG, Ops.END, Ops.STORE) for u in reads):
        # (a value read through a nested reduce's loops or registers isn't substituted into)
        raise NotAScatter("the written value reads a nested reduce")
    if any(u.op is Ops.INDEX and u.src[0] is base for u in reads):
        raise NotAScatter("the written values read the output")
    # the other output positions get loops of their own inside the writes' loop (made after it: nested in it)
    moved = {r: ctx.new_range(r.src[0].arg, "loop") for r in loops if r is not target}
    key = key.substitute(moved) if moved else key
    in_range = index_in_range(key, target.src[0].arg)
    at = key if in_range is None else in_range.where(key, key.const_like(0))
    inner = sorted(moved.values(), key=lambda r: -r.arg[0])
    moved[target] = at.cast(target.dtype) if at.dtype != target.dtype else at
    here = UOp(Ops.INDEX, base.dtype, (base, address.substitute(moved)) + (() if in_range is None else (in_range,)))
    # the update names its loops: the target is carried through memory from one write to the next, so its load and
    # store run once per write even where neither the target nor the value depends on the write (an expanded index,
    # an empty one); else the load is hoisted out of the loop and the last write wins, or nothing opens the loop
    loops_in = (writes, *reversed(inner))
    old = UOp(Ops.LOAD, red.dtype, (here, after, *loops_in))
    update = UOp(Ops.STORE, dtypes.void, (here, old.alu(op, picked.substitute(moved)), *loops_in))
    for r in inner:
        update = UOp(Ops.END, dtypes.void, (update, r))
    ordered = writes.replace(src=(*writes.src, after))
    return ordered, update.substitute({writes: ordered})


def _is_range(side: UOp, r: UOp) -> bool:
    inner = side.src[0] if side.op is Ops.CAST and dtypes.is_int(side.src[0].dtype) else side
    return simplify(inner) is r


@functools.lru_cache(maxsize=64)
def lowers_as_scatter(ast: UOp, gpu: bool = False) -> bool:
    """Whether the kernel (no opts) lowers as a scatter: the heuristic then gives it none."""
    return lower_scatter_kernel(ast, None, gpu) is not None


def lower_scatter_kernel(ast: UOp, plan: KernelPlan | None, gpu: bool) -> tuple[UOp, LowererContext] | None:
    """`lower_kernel` for a scatter kernel, or None when the kernel isn't one (or has opts, or is GPU-style)."""
    if gpu or scatter_reduce(ast) is None or (plan is not None and plan.opts):
        return None
    # (a gather's one-hot sum folds into a load at the index: no scatter, and no lowering spent finding that out)
    if reduce_folds_away(ast):
        return None
    try:
        return lower_kernel(ast, plan, gpu=False, outputs=lower_scatter)
    except NotAScatter:
        return None
