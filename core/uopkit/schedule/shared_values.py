"""Shared values stored once their fused computation is deep or wide (`realize_deep_shared_values`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from uopkit.schedule.gather_index import readers_besides_gathers
from uopkit.uop.ops import GroupOp, UOp

if TYPE_CHECKING:
    from uopkit.schedule.grouper import GrouperContext

# a value read by several kernels is computed in each; past this many fused ops deep it is stored instead
MAX_FUSED_DEPTH = 48
# and past this many fused ALU operations in all, from MIN_WIDE_DEPTH deep (see `realize_deep_shared_values`)
MAX_FUSED_REGION_OPS = 96
MIN_WIDE_DEPTH = 12


def realize_deep_shared_values(
    ctx: GrouperContext, topo: list[UOp], stops: Callable[[GrouperContext, UOp], bool]
) -> None:
    """Store a value several consumers read once its fused computation is MAX_FUSED_DEPTH ops deep.

    Without it a chain like ``x = x + x.sum() * 0``, repeated, gives every reduce a kernel that recomputes the whole
    chain before it from the first buffer: kernel k is k steps long, and the schedule's code (and run time) grows
    with the square of the chain. Cut every MAX_FUSED_DEPTH ops, each kernel stays short and the total is linear.
    A chain can also grow wide faster than deep: a loop of log-domain Sinkhorn steps (``la = la - la.logsumexp(-1,
    keepdim=True)``) adds one op of depth a step and a logsumexp's finish beside it, and its backward reads every step
    again. So a shared value is also stored once its region computes MAX_FUSED_REGION_OPS ALU ops (counted by a walk
    that stops there, for shared values MIN_WIDE_DEPTH deep or more)."""
    depth: dict[UOp, int] = {}
    for u in topo:
        if stops(ctx, u):
            depth[u] = 0
            continue
        depth[u] = 1 + max((depth.get(s, 0) for s in u.src), default=0)
        deep = depth[u] > MAX_FUSED_DEPTH
        if not deep and depth[u] < MIN_WIDE_DEPTH or u.op not in GroupOp.Elementwise:
            continue
        if len(readers_besides_gathers(ctx, u)) > 1 and (deep or _region_ops_past(ctx, u, MAX_FUSED_REGION_OPS, stops)):
            ctx.realize[u] = None
            depth[u] = 0


def _region_ops_past(ctx: GrouperContext, root: UOp, bound: int, stops: Callable[[GrouperContext, UOp], bool]) -> bool:
    # whether the fused region of `root` computes more than `bound` ALU operations (walked no further than that)
    seen: set[UOp] = set()
    stack = [root]
    ops = 0
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if u.op in GroupOp.ALU:
            ops += 1
            if ops > bound:
                return True
        stack.extend(s for s in u.src if s not in seen and not stops(ctx, s))
    return False
