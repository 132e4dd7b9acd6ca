"""Kernel optimizations: `apply_opt` checks one `Opt` against the kernel and the renderer and returns the new
`KernelPlan` (the plan's data types and axis kinds are described in `uopkit.codegen.plan`)."""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import TYPE_CHECKING

from uopkit.codegen.plan import (
    AxisPart,
    KernelPlan,
    Opt,
    OptError,
    OptOps,
    TCPlan,
    grid_dims,
    initial_plan,
    local_memory_bytes,
    main_reduce,
    work_group_dims,
)
from uopkit.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from uopkit.renderer import Renderer

# lanes of the output tile, accumulators and their vectors (a CPU matmul tile of 6 rows by 4 vectors of 16 floats is
# 384)
MAX_LANES = 384
# lanes in all, with the reduce unrolled too (unrolled lanes are loads and adds in flight, not registers held: a sum
# over a strided axis holds 256 columns and reads 4 rows at once)
MAX_UNROLLED_LANES = 1024
# lanes times the ALU ops and loads of the kernel's body: each lane of an upcast or an unroll is a copy of the body in
# the code the compiler gets. A matmul's or a convolution's tile copies a few ops (a digit classifier's largest: 1600);
# an SSIM loss's gradient fused into one kernel (7x7 windows of several pooled statistics, ~110 ops) in a register
# tile of 256 lanes was 64k lines of C that gcc did not finish in 300 s
MAX_BODY_COPIES = 16384


@functools.lru_cache(maxsize=64)
def _body_ops(ast: UOp) -> int:
    """The ALU ops and loads of a kernel's AST: the code each lane of an upcast or unroll copies."""
    return sum(1 for u in ast.toposort() if u.op in GroupOp.ALU or u.op is Ops.LOAD)


def _split_last_loop(plan: KernelPlan, axis: int, amount: int, kind: str, opt: Opt, outer: bool = False) -> KernelPlan:
    parts = list(plan.axis_parts(axis))
    loops = [i for i, p in enumerate(parts) if p.kind == "loop"]
    if not loops:
        raise OptError(f"{opt}: axis {axis} has no loop left to split (parts {[(p.size, p.kind) for p in parts]})")
    i = loops[0] if outer else loops[-1]
    size = parts[i].size
    amount = size if amount == 0 else amount
    if amount <= 1 or size % amount:
        raise OptError(f"{opt}: amount {amount} must be > 1 and divide the axis size {size}")
    rest = [AxisPart(size // amount, "loop")] if size // amount > 1 else []
    new = [AxisPart(amount, kind)]
    parts[i : i + 1] = (new + rest) if outer else (rest + new)
    return plan.with_axis(axis, tuple(parts))


def apply_opt(plan: KernelPlan, opt: Opt, renderer: Renderer) -> KernelPlan:
    """Apply one opt, checking it against the kernel and the renderer's capabilities."""
    n_axes = plan.n_out + len(plan.red)
    if not 0 <= opt.axis < n_axes:
        raise OptError(f"{opt}: axis {opt.axis} out of range (kernel has {plan.n_out} output + {len(plan.red)} reduce)")
    is_reduce = opt.axis >= plan.n_out
    if plan.tc is not None and opt.axis == plan.tc.k_axis and opt.op is not OptOps.TC:
        raise OptError(f"{opt}: axis {opt.axis} is the reduce of the tensor core; no other opt can change it")
    if opt.op is OptOps.TC:
        new = _apply_tc(plan, opt, renderer)
    elif opt.op is OptOps.UPCAST:
        new = _split_last_loop(plan, opt.axis, opt.amount, "upcast", opt)
    elif opt.op is OptOps.UNROLL:
        if not is_reduce:
            raise OptError(f"{opt}: UNROLL applies to reduce axes (>= {plan.n_out})")
        new = _split_last_loop(plan, opt.axis, opt.amount, "unroll", opt)
    elif opt.op is OptOps.THREAD:
        if is_reduce:
            raise OptError(f"{opt}: THREAD applies to output axes")
        if not renderer.caps.has_threads:
            raise OptError(f"{opt}: the {renderer.device or type(renderer).__name__} renderer has no CPU threads")
        if any(p.kind == "thread" for p in plan.out[opt.axis]):
            raise OptError(f"{opt}: axis {opt.axis} is already split among threads")
        if plan.out[opt.axis][0].kind != "loop":
            raise OptError(f"{opt}: the outermost part of axis {opt.axis} is not a loop")
        # the parallel loop is the outermost one: the axes outside this one must be shared out whole first (a row
        # reduce fused along an inner axis could not be placed inside a parallel loop that skips the outer ones)
        outside = [i for i in range(opt.axis) if plan.out[i][0].kind == "loop" and plan.out[i][0].size > 1]
        if outside:
            raise OptError(f"{opt}: THREAD takes the output axes outermost first; axis {outside[0]} is not shared out")
        new = _split_last_loop(plan, opt.axis, opt.amount, "thread", opt, outer=True)
        new = replace(new, threads=math.prod(p.size for parts in new.out for p in parts if p.kind == "thread"))
    elif opt.op is OptOps.LOCAL:
        if is_reduce or not renderer.caps.has_local:
            raise OptError(f"{opt}: LOCAL needs an output axis and a renderer with work-groups")
        new = _split_last_loop(plan, opt.axis, opt.amount, "local", opt)
    elif opt.op in (OptOps.GROUP, OptOps.GROUPTOP):
        if not is_reduce or not (renderer.caps.has_local and renderer.caps.has_shared):
            raise OptError(f"{opt}: GROUP needs a reduce axis and a renderer with work-groups and local memory")
        if any(p.kind == "group" for parts in plan.red for p in parts):
            raise OptError(f"{opt}: only one GROUP per kernel")
        if _has_stage(plan):
            raise OptError(f"{opt}: a reduce staged in local memory (STAGE) can't also be split by GROUP")
        new = _split_last_loop(plan, opt.axis, opt.amount, "group", opt, outer=opt.op is OptOps.GROUPTOP)
    elif opt.op is OptOps.STAGE:
        new = _apply_stage(plan, opt, renderer)
    elif opt.op is OptOps.SWAP:
        new = _apply_swap(plan, opt, renderer)
    elif opt.op is OptOps.PADTO:
        parts = plan.axis_parts(opt.axis)
        if len(parts) != 1 or parts[0].kind != "loop":
            raise OptError(f"{opt}: PADTO must come before other opts on axis {opt.axis}")
        size = parts[0].size
        padded = -(-size // opt.amount) * opt.amount
        if opt.amount <= 1 or padded > size * 2:
            raise OptError(f"{opt}: padding {size} to a multiple of {opt.amount} wastes too much")
        new = plan.with_axis(opt.axis, (AxisPart(padded, "loop"),))
    else:
        raise OptError(f"{opt}: {opt.op.name} is not supported by this kernel optimizer")
    lanes = new.lanes()
    unrolled = math.prod(p.size for parts in new.red for p in parts if p.kind == "unroll")
    if lanes // unrolled > MAX_LANES:
        raise OptError(f"{opt}: {lanes // unrolled} lanes of outputs is more than the limit {MAX_LANES}")
    if lanes > MAX_UNROLLED_LANES:
        raise OptError(f"{opt}: {lanes} unrolled lanes is more than the limit {MAX_UNROLLED_LANES}")
    if lanes > 1 and new.ast is not None and lanes * _body_ops(new.ast) > MAX_BODY_COPIES:
        raise OptError(
            f"{opt}: {lanes} lanes of a body of {_body_ops(new.ast)} ops is more code than the limit {MAX_BODY_COPIES}"
        )
    _check_launch(new, opt, renderer)
    _check_grid(plan, new, opt, renderer)
    return replace(new, opts=plan.opts + (opt,))


def _check_launch(plan: KernelPlan, opt: Opt, renderer: Renderer) -> None:
    """The work-group and local memory the plan needs fit what the renderer declares (a launch beyond them fails on
    the device, or worse, runs wrong)."""
    caps = renderer.caps
    dims = work_group_dims(plan)
    if len(dims) > 3:
        raise OptError(f"{opt}: {len(dims)} work-group dimensions {dims} (tensor core, LOCAL and GROUP): at most 3")
    if dims and caps.local_max is not None:
        for d, (size, limit) in enumerate(zip(dims, caps.local_max, strict=False)):
            if size > limit:
                raise OptError(f"{opt}: work-group dimension {d} of {size} threads exceeds its limit {limit}")
        # each dimension's limit is capped by the device's total, so the largest is a total the device allows
        if math.prod(dims) > max(caps.local_max):
            raise OptError(f"{opt}: work-group of {math.prod(dims)} threads exceeds {max(caps.local_max)} ({dims})")
    from uopkit.codegen.lowerer import stage_bytes

    shared = local_memory_bytes(plan) + stage_bytes(plan)
    if shared and caps.shared_max and shared > caps.shared_max:
        raise OptError(f"{opt}: {shared} bytes of local memory exceed the renderer's {caps.shared_max}")


def _apply_swap(plan: KernelPlan, opt: Opt, renderer: Renderer) -> KernelPlan:
    if renderer.caps.has_local:
        who = renderer.device or type(renderer).__name__
        raise OptError(f"{opt}: the {who} renderer runs output loops as a grid, which has no loop order to change")
    a, b = opt.axis, opt.amount
    if not (a < b < plan.n_out):
        raise OptError(f"{opt}: SWAP takes two output axes, the smaller first (kernel has {plan.n_out} output axes)")
    for axis in (a, b):
        if not any(p.kind == "loop" and p.size > 1 for p in plan.out[axis]):
            raise OptError(f"{opt}: output axis {axis} has no loop left to move")
    # a reduce with fewer values than the output (a row's sum used along the row) runs between the loops of the
    # axes it depends on and those it is broadcast along: their order is fixed
    if plan.ast is None:
        raise OptError(f"{opt}: SWAP needs a plan built by initial_plan")
    outputs = math.prod(plan.real[: plan.n_out])
    for u in plan.ast.toposort():
        if u.op is Ops.REDUCE_AXIS and math.prod(u.shape or ()) != outputs:
            raise OptError(f"{opt}: a reduce of shape {u.shape} is broadcast along the output (loop order fixed)")
    order = list(plan.loop_order or range(plan.n_out))
    i, j = order.index(a), order.index(b)
    order[i], order[j] = order[j], order[i]
    return replace(plan, loop_order=tuple(order))


def _has_stage(plan: KernelPlan) -> bool:
    return any(p.kind == "stage" for parts in plan.red for p in parts)


def _apply_stage(plan: KernelPlan, opt: Opt, renderer: Renderer) -> KernelPlan:
    who = renderer.device or type(renderer).__name__
    if opt.axis < plan.n_out:
        raise OptError(f"{opt}: STAGE applies to reduce axes (>= {plan.n_out})")
    if not (renderer.caps.has_local and renderer.caps.has_shared):
        raise OptError(f"{opt}: STAGE needs work-groups and local memory; the {who} renderer has not both")
    if plan.tc is not None:
        raise OptError(f"{opt}: the kernel runs on tensor core {plan.tc.tc.name}; STAGE can't stage its operands")
    if any(p.kind == "group" for parts in plan.red for p in parts):
        raise OptError(f"{opt}: the reduce is split by GROUP; STAGE can't also stage it")
    # without a work-group no two work-items share an element: staging would only add copies and barriers
    if not any(p.kind == "local" and p.size > 1 for parts in plan.out for p in parts):
        raise OptError(f"{opt}: STAGE needs a LOCAL split first (a work-group whose work-items share operands)")
    if any(p.kind == "stage" for p in plan.axis_parts(opt.axis)):
        raise OptError(f"{opt}: axis {opt.axis} is already staged")
    return _split_last_loop(plan, opt.axis, opt.amount, "stage", opt)


def _over_grid(plan: KernelPlan, renderer: Renderer) -> str | None:
    limits = renderer.caps.global_max
    if not renderer.caps.has_local or limits is None:
        return None
    dims = grid_dims(plan)
    for d, (size, limit) in enumerate(zip(dims, limits, strict=False)):
        if size > limit:
            return f"grid dimension {d} of {size} work-groups exceeds the renderer's global_max {limit} (grid {dims})"
    return None


def _check_grid(old: KernelPlan, new: KernelPlan, opt: Opt, renderer: Renderer) -> None:
    """The grid of work-groups fits `global_max` (PADTO grows an axis; a split that empties an axis's loop moves the
    axes outside it to other grid dimensions, whose limits can be lower). A kernel whose grid is already over it
    before the opt (the renderer copes, or the launch fails) is not held to it."""
    over = _over_grid(new, renderer)
    if over is not None and _over_grid(old, renderer) is None:
        raise OptError(f"{opt}: {over}")


def _apply_tc(plan: KernelPlan, opt: Opt, renderer: Renderer) -> KernelPlan:
    from uopkit.codegen.opt.tc import TensorCoreMatchError, match_tensor_core

    who = renderer.device or type(renderer).__name__
    if plan.tc is not None:
        raise OptError(f"{opt}: the kernel already uses tensor core {plan.tc.tc.name}")
    if opt.axis < plan.n_out:
        raise OptError(f"{opt}: TC's axis is the kernel's reduce axis (>= {plan.n_out}), got output axis {opt.axis}")
    if not 0 <= opt.amount < len(renderer.caps.tensor_cores):
        raise OptError(
            f"{opt}: the {who} renderer declares {len(renderer.caps.tensor_cores)} tensor cores, no index {opt.amount}"
        )
    tc = renderer.caps.tensor_cores[opt.amount]
    if tc.threads > 1 and not renderer.caps.has_local:
        raise OptError(f"{opt}: {tc.name} needs {tc.threads} threads per tile, but the {who} renderer has no locals")
    if plan.ast is None or plan.reduce_op is None:
        raise OptError(f"{opt}: TC needs a kernel with exactly one reduce (and a plan built by initial_plan)")
    try:
        m_axis, n_axis, a_src = match_tensor_core(plan.ast, tc, opt.axis - plan.n_out)
    except TensorCoreMatchError as e:
        raise OptError(f"{opt}: {tc.name}: {e}") from None
    new = plan
    for axis, tile in ((m_axis, tc.dims[0]), (n_axis, tc.dims[1]), (opt.axis, tc.dims[2])):
        parts = plan.axis_parts(axis)
        if len(parts) != 1 or parts[0].kind != "loop" or parts[0].size != plan.real[axis]:
            shown = [(p.size, p.kind) for p in parts]
            raise OptError(f"{opt}: TC must come before other opts on axis {axis} (it is split into {shown})")
        size = parts[0].size
        if size % tile:
            raise OptError(f"{opt}: {tc.name} needs axis {axis} (size {size}) to be a multiple of its tile {tile}")
        rest = (AxisPart(size // tile, "loop"),) if size > tile else ()
        new = new.with_axis(axis, rest + (AxisPart(tile, "tc"),))
    return replace(new, tc=TCPlan(opt.amount, tc, m_axis, n_axis, opt.axis, a_src))


def apply_opts(ast: UOp, opts: list[Opt] | tuple[Opt, ...], renderer: Renderer) -> KernelPlan:
    plan = initial_plan(ast)
    for opt in opts:
        plan = apply_opt(plan, opt, renderer)
    return plan


__all__ = [
    "AxisPart",
    "KernelPlan",
    "Opt",
    "OptError",
    "OptOps",
    "TCPlan",
    "apply_opt",
    "apply_opts",
    "initial_plan",
    "main_reduce",
]
