"""Indices computed only to pick gathers: the grouper keeps them in the kernel of the gathers they feed.

A gather is a one-hot reduce (`is_one_hot_reduce`) that the lowerer folds into one load at the index, so an index
broadcast along the gathered axis and compared with an iota is computed once per gathered element there, not once per
expanded one: a binary search's steps (each loads at the last one's position) stay in one kernel.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from uopkit.uop.ops import GroupOp, Ops, UOp, is_one_hot_reduce

if TYPE_CHECKING:
    from uopkit.schedule.grouper import GrouperContext


def indexes_gathers(ctx: GrouperContext, expand: UOp) -> bool:
    """Whether `expand` broadcasts an index only along the axis of the gathers it picks from: each reader compares it
    with an iota and selects for a one-hot reduce over the expanded axes, which the lowerer folds into one load at
    the index. The index is then computed once per gathered element, not once per expanded one, so one computed from
    other gathers (a binary search: each step loads at the last one's position) stays in their kernel."""
    expanded = {a for a, (x, y) in enumerate(zip(expand.src[0].shape, expand.shape, strict=True)) if x != y}
    for cmp in _readers_past(ctx, expand, Ops.CAST):
        if cmp.op is not Ops.CMPEQ:
            return False
        for sel in ctx.children.get(cmp, []):
            if sel.op is not Ops.WHERE or sel.src[0] is not cmp:
                return False
            for red in _readers_past(ctx, sel, Ops.DETACH):
                if red.op is not Ops.REDUCE_AXIS or not is_one_hot_reduce(red) or not expanded <= set(red.arg[1]):
                    return False
    return True


def _readers_past(ctx: GrouperContext, u: UOp, skip: Ops) -> Iterator[UOp]:
    # the nodes that read `u`, looked through where they are `skip` ops (a cast of the index, a detach of the select)
    stack = list(ctx.children.get(u, []))
    while stack:
        n = stack.pop()
        if n.op is skip:
            stack.extend(ctx.children.get(n, []))
        else:
            yield n


def readers_besides_gathers(ctx: GrouperContext, u: UOp) -> set[UOp]:
    # the nodes that read `u`, but for those that only index gathers (a binary search's position, read by the next
    # step and by its load there: folded, that load is computed with the step, not by a kernel of its own) or that
    # select for them (one index compared with an iota, the mask of gathers from several columns)
    return {
        c
        for c in ctx.children.get(u, [])
        if not indexes_gathers_in(ctx, c, None) and not selects_for_gathers(ctx, u, c)
    }


def selects_for_gathers(ctx: GrouperContext, mask: UOp, sel: UOp) -> bool:
    readers = ctx.children.get(sel, [])
    return (
        sel.op is Ops.WHERE
        and sel.src[0] is mask
        and bool(readers)
        and all(r.op is Ops.REDUCE_AXIS and is_one_hot_reduce(r) for r in readers)
    )


def reads_same_index(ctx: GrouperContext, n: UOp) -> bool:
    # a movement op that reads each element of its source where its reader does: a reshape that only adds or drops
    # axes of size 1, or an index broadcast into gathers (folded into loads, at the gathered element's index)
    if n.op is Ops.RESHAPE:
        return [d for d in n.shape if d != 1] == [d for d in n.src[0].shape if d != 1]
    return n.op is Ops.EXPAND and indexes_gathers(ctx, n)


# how far `indexes_gathers_in` follows an index to the gathers it feeds
MAX_INDEX_WALK = 16


def indexes_gathers_in(ctx: GrouperContext, u: UOp, region: set[UOp] | None) -> bool:
    """Whether `u` is computed only as the index of gathers in `region` (None: anywhere), folded into loads there:
    the index is computed in the same loop as the rest of the region, not again. Followed MAX_INDEX_WALK nodes."""
    seen: set[UOp] = set()
    stack, through = [u], False
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op is Ops.REDUCE_AXIS:
            if (region is not None and n not in region) or not is_one_hot_reduce(n):
                return False
            continue
        if len(seen) > MAX_INDEX_WALK or not (n.op in GroupOp.Elementwise or n.op in GroupOp.Movement):
            return False
        if n.op is Ops.EXPAND:
            if not indexes_gathers(ctx, n):
                return False
            through = True
        stack.extend(ctx.children.get(n, []))
    return through
