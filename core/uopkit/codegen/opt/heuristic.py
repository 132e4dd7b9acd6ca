"""Hand-written default opts: register tiles and vectors for the CPU, work-groups for GPU-style backends."""

from __future__ import annotations

import os

from uopkit.codegen.opt import KernelPlan, Opt, OptError, OptOps, apply_opt, initial_plan
from uopkit.renderer import Renderer
from uopkit.uop.ops import UOp


def _try(plan: KernelPlan, opt: Opt, renderer: Renderer) -> KernelPlan:
    try:
        return apply_opt(plan, opt, renderer)
    except OptError:
        return plan


def _largest_divisor(size: int, candidates: tuple[int, ...]) -> int | None:
    return next((c for c in candidates if size % c == 0 and size >= c), None)


def cpu_threads() -> int:
    env = os.getenv("UOPKIT_THREADS") or os.getenv("OMP_NUM_THREADS")
    return int(env) if env else (os.cpu_count() or 1)


def hand_coded_opts(ast: UOp, renderer: Renderer) -> list[Opt]:
    plan = initial_plan(ast)
    out_sizes = [parts[0].size for parts in plan.out]
    red_sizes = [parts[0].size for parts in plan.red]
    total = 1
    for s in out_sizes:
        total *= s
    work = total * max(1, *(red_sizes or [1]))
    if renderer.has_local:
        return _gpu_opts(plan, out_sizes, red_sizes, renderer)
    width = max(1, renderer.max_vector_width)
    # the innermost output axis with more than one element gets the vector lanes
    inner = max((i for i, s in enumerate(out_sizes) if s > 1), default=None)
    if red_sizes and inner is not None:
        # register tile: lanes on the two innermost output axes, a short unroll of the reduce
        amt = _largest_divisor(out_sizes[inner], (width, 8, 4, 2))
        if amt:
            plan = _try(plan, Opt(OptOps.UPCAST, inner, amt), renderer)
        others = [i for i, s in enumerate(out_sizes) if s > 1 and i != inner]
        if others:
            second = others[-1]
            amt2 = _largest_divisor(out_sizes[second], (4, 3, 2))
            if amt2:
                plan = _try(plan, Opt(OptOps.UPCAST, second, amt2), renderer)
        last_red = plan.n_out + len(red_sizes) - 1
        amt3 = _largest_divisor(red_sizes[-1], (4, 2))
        if amt3 and red_sizes[-1] >= 16:
            plan = _try(plan, Opt(OptOps.UNROLL, last_red, amt3), renderer)
    elif red_sizes:
        # a reduce into few outputs (a sum over the innermost axis): split the accumulator into vector lanes
        last_red = plan.n_out + len(red_sizes) - 1
        amt = _largest_divisor(red_sizes[-1], (width, 8, 4, 2))
        if amt and red_sizes[-1] >= 4 * amt:
            plan = _try(plan, Opt(OptOps.UPCAST, last_red, amt), renderer)
    elif inner is not None:
        amt = _largest_divisor(out_sizes[inner], (width, 8, 4, 2))
        if amt:
            plan = _try(plan, Opt(OptOps.UPCAST, inner, amt), renderer)
    # share the outermost loop among the cores when there is enough work
    if work >= 1 << 16 and cpu_threads() > 1:
        outer = next((i for i, parts in enumerate(plan.out) if parts[0].kind == "loop" and parts[0].size > 1), None)
        if outer is not None:
            plan = _try(plan, Opt(OptOps.THREAD, outer, cpu_threads()), renderer)
    return list(plan.opts)


def _gpu_opts(plan: KernelPlan, out_sizes: list[int], red_sizes: list[int], renderer: Renderer) -> list[Opt]:
    total = 1
    for s in out_sizes:
        total *= s
    # a large reduce into few outputs: split it across the threads of a work-group (local memory + barrier)
    if red_sizes and total <= 2048 and red_sizes[-1] >= 256:
        last_red = plan.n_out + len(red_sizes) - 1
        amt = _largest_divisor(red_sizes[-1], (256, 128, 64, 32, 16))
        if amt:
            plan = _try(plan, Opt(OptOps.GROUPTOP, last_red, amt), renderer)
        return list(plan.opts)
    inner = max((i for i, s in enumerate(out_sizes) if s > 1), default=None)
    if inner is not None:
        amt = _largest_divisor(out_sizes[inner], (64, 32, 16, 8, 4, 2))
        if amt:
            plan = _try(plan, Opt(OptOps.LOCAL, inner, amt), renderer)
    return list(plan.opts)
