"""Hand-written default opts: register tiles and vectors for the CPU, work-groups for GPU-style backends."""

from __future__ import annotations

import math

from uopkit.codegen.opt import KernelPlan, Opt, OptError, OptOps, apply_opt, initial_plan
from uopkit.helpers import cpu_threads
from uopkit.renderer import Renderer
from uopkit.uop.ops import Ops, UOp


def _try(plan: KernelPlan, opt: Opt, renderer: Renderer) -> KernelPlan:
    try:
        return apply_opt(plan, opt, renderer)
    except OptError:
        return plan


def _divisor(size: int, candidates: tuple[int, ...]) -> int | None:
    return next((c for c in candidates if size % c == 0 and size >= c), None)


def load_axes(ast: UOp, loads: bool = True) -> list[dict[int, int]]:
    """For each load (or store) of the kernel: the kernel axes its address moves along, with their strides."""
    from uopkit.codegen.lowerer import lower_kernel
    from uopkit.uop.ops import graph_rewrite
    from uopkit.uop.symbolic import decompose, pm_symbolic

    lowered, ctx = lower_kernel(ast)
    # only the addresses matter: simplify them, not the whole kernel (its values can be a long chain of ops)
    addresses = [
        u.replace(src=u.src[:2])
        for u in lowered.toposort()
        if u.op is Ops.INDEX and u.src[0].op is Ops.DEFINE_GLOBAL and (u.src[0].arg != 0) == loads
    ]
    simplified = graph_rewrite(UOp(Ops.SINK, src=tuple(addresses)), pm_symbolic, name="symbolic (strides)")
    found: dict[UOp, dict[int, int]] = {}
    for u in simplified.src:
        if u.op is Ops.INDEX:
            axes: dict[int, int] = {}
            nonlinear: dict[int, UOp] = {}
            for coef, term in decompose(u.src[1])[0]:
                if term.op is Ops.RANGE and term.arg[0] in ctx.axis_of:
                    axes[ctx.axis_of[term.arg[0]]] = coef
                elif term.op is not Ops.CONST:
                    # an axis inside a non-linear term (div/mod): it moves the address, with no simple stride
                    for r in term.toposort():
                        if r.op is Ops.RANGE and r.arg[0] in ctx.axis_of:
                            axes.setdefault(ctx.axis_of[r.arg[0]], 0)
                            nonlinear[ctx.axis_of[r.arg[0]]] = r
            for axis, r in nonlinear.items():
                # its first step from 0 (a panel layout, (n // p) * big + n % p, steps by 1)
                axes[axis] = _first_step(u.src[1], r)
            found[u] = axes
    return list(found.values())


def _first_step(index: UOp, r: UOp) -> int:
    """How far `index` moves when range `r` goes from 0 to 1, every other range at 0 (0 if that isn't a constant)."""
    from uopkit.uop.symbolic import simplify

    others = {x: x.const_like(0) for x in index.toposort() if x.op is Ops.RANGE and x is not r}
    at = [simplify(index.substitute({**others, r: r.const_like(v)})) for v in (0, 1)]
    return at[1].arg - at[0].arg if all(a.op is Ops.CONST for a in at) else 0


def memory_strides(ast: UOp, loads: bool = True) -> dict[int, set[int]]:
    """For each kernel axis, the strides with which the kernel's loads (or its stores) walk memory along it."""
    strides: dict[int, set[int]] = {}
    for axes in load_axes(ast, loads):
        for axis, stride in axes.items():
            strides.setdefault(axis, set()).add(stride)
    return strides


def hand_coded_opts(ast: UOp, renderer: Renderer) -> list[Opt]:
    plan = initial_plan(ast)
    if renderer.caps.has_local:
        return _gpu_opts(plan, renderer)
    out_sizes = [parts[0].size for parts in plan.out]
    red_sizes = [parts[0].size for parts in plan.red]
    red_axis_ids = set(range(plan.n_out, plan.n_out + len(red_sizes)))
    all_loads = load_axes(ast)
    # in a reduce kernel the loads inside the reduce loop are the ones that count (an epilogue's reads run once)
    hot_loads = [la for la in all_loads if red_axis_ids & set(la)] or all_loads
    contiguous = sorted({a for la in hot_loads for a, st in la.items() if st == 1})
    if not contiguous or not red_sizes:
        contiguous += [a for a, st in memory_strides(ast, loads=False).items() if 1 in st]
    width = max(1, renderer.caps.max_vector_width)
    out_axes = [i for i, s in enumerate(out_sizes) if s > 1]
    red_axes = [plan.n_out + i for i, s in enumerate(red_sizes) if s > 1]
    vec_out = [a for a in out_axes if a in contiguous]
    vec_red = [a for a in red_axes if a in contiguous]
    total_out = 1
    for s in out_sizes:
        total_out *= s
    loads = hot_loads
    # output axes that some load doesn't move along: tiling them reuses that load across the tile
    reuse_axes = [a for a in out_axes if any(a not in la for la in loads)]
    store_contiguous = [a for a, st in memory_strides(ast, loads=False).items() if 1 in st]
    if not red_sizes:
        # elementwise: the C compiler vectorizes the innermost loop by itself; lanes only add code
        pass
    elif not vec_out and vec_red and len(reuse_axes) >= 2:
        # both operands run along the reduce (a @ b.T): vectors along the reduce, one accumulator vector per output
        # of a small tile, combined across the vector's lanes after the loop
        axis = vec_red[-1]
        amt = _divisor(red_sizes[axis - plan.n_out], (width, 8, 4))
        if amt:
            plan = _try(plan, Opt(OptOps.UPCAST, axis, amt), renderer)
        for other, want in zip(reversed(reuse_axes[-2:]), (2, 4), strict=False):
            amt2 = _divisor(out_sizes[other], (want, 2))
            if amt2:
                plan = _try(plan, Opt(OptOps.UPCAST, other, amt2), renderer)
    elif vec_out or len(reuse_axes) >= 2:
        # vectors along a contiguous output axis; big outputs get two vectors
        pick = [a for a in reuse_axes if a in vec_out] or vec_out or [a for a in reuse_axes if a in store_contiguous]
        axis = (pick or reuse_axes)[-1]
        big = total_out >= 64 * 64
        vector_loads = [la for la in loads if axis in la]
        reusing = [a for a in out_axes if a != axis and not any(a in la for la in vector_loads)]
        amt = _divisor(out_sizes[axis], (width, 8, 4, 2))
        if amt:
            plan = _try(plan, Opt(OptOps.UPCAST, axis, amt), renderer)
            if big and amt == width and not reusing:
                # nothing to reuse (a sum over a strided axis): many vectors per pass keep the memory streams long,
                # as long as enough passes are left to give every thread one
                passes = out_sizes[axis] // amt
                more = _divisor(passes, tuple(m for m in (16, 8, 4, 2) if passes // m >= kernel_threads(plan)))
                if more:
                    plan = _try(plan, Opt(OptOps.UPCAST, axis, more), renderer)
            elif big and amt == width and out_sizes[axis] % (2 * width) == 0:
                # big outputs: two vectors per row of the tile
                plan = _try(plan, Opt(OptOps.UPCAST, axis, 2), renderer)
        # a register tile: another output axis that the vector's loads don't move along reuses each loaded vector
        # (the rows of a matmul, the output channels of a convolution)
        for other in reversed(reusing or [a for a in out_axes if a != axis]):
            amt2 = _divisor(out_sizes[other], (8, 6, 4, 3, 2) if big else (4, 3, 2))
            if amt2:
                plan = _try(plan, Opt(OptOps.UPCAST, other, amt2), renderer)
                break
    elif vec_red and Ops.ADD in renderer.caps.simd_reduce_ops:
        # a reduce along contiguous memory, on a renderer that marks such loops for SIMD: the C compiler vectorizes
        # the loop body (exp and all) and the sum; explicit lanes would leave the body scalar
        pass
    elif vec_red:
        # a reduce along contiguous memory: one accumulator per vector lane, combined after the loop
        axis = vec_red[-1]
        amt = _divisor(red_sizes[axis - plan.n_out], (width, 8, 4, 2))
        if amt and red_sizes[axis - plan.n_out] >= 4 * amt:
            plan = _try(plan, Opt(OptOps.UPCAST, axis, amt), renderer)
    elif out_axes:
        amt = _divisor(out_sizes[out_axes[-1]], (width, 8, 4, 2))
        if amt:
            plan = _try(plan, Opt(OptOps.UPCAST, out_axes[-1], amt), renderer)
    return list(_thread_opts(plan, renderer).opts)


# a thread is woken only for at least this many iterations of the kernel's loops (output elements times reduce length):
# below it, starting the thread costs about what it saves
MIN_WORK_PER_THREAD = 1 << 14
# the parallel loop's blocks keep the threads at least this busy: blocks / (threads * rounds of blocks per thread)
MIN_BALANCE = 0.9


def thread_balance(blocks: int, threads: int) -> float:
    """The share of `threads` kept busy by `blocks` equal blocks dealt out statically (the last round may be short)."""
    return blocks / (threads * -(-blocks // threads))


def kernel_threads(plan: KernelPlan) -> int:
    """How many threads a kernel's work is worth: every one the process may use, fewer for a small kernel."""
    work = math.prod(plan.real)
    return max(1, min(cpu_threads(), work // MIN_WORK_PER_THREAD))


def _thread_opts(plan: KernelPlan, renderer: Renderer) -> KernelPlan:
    """Share the output among the threads: the outer loops of the output axes, outermost first, become one parallel
    loop of blocks until there are enough blocks to keep every thread busy (a matmul with few rows of tiles is split
    over its columns of tiles too)."""
    threads = kernel_threads(plan)
    if threads < 2 or not renderer.caps.has_threads:
        return plan
    loops = [(i, parts[0].size) for i, parts in enumerate(plan.out) if parts[0].kind == "loop" and parts[0].size > 1]
    best: tuple[float, int] = (0.0, 0)
    blocks = 1
    for n, (_, size) in enumerate(loops):
        blocks *= size
        balance = thread_balance(blocks, threads)
        # another axis only for a clear gain: each one adds a division to find the block's coordinates
        if balance > best[0] + 0.02:
            best = (balance, n + 1)
        if balance >= MIN_BALANCE:
            break
    chosen = loops[: best[1]]
    blocks = math.prod(size for _, size in chosen[:-1])
    for k, (axis, size) in enumerate(chosen):
        amount = 0
        if k == len(chosen) - 1 and threads < cpu_threads():
            # a kernel worth fewer threads than there are: about as many blocks as its threads (the renderer starts
            # one thread per block, up to every core), each a run of the loop
            fit = [d for d in range(2, size) if size % d == 0 and blocks * d >= threads]
            amount = next((d for d in fit if thread_balance(blocks * d, threads) >= MIN_BALANCE), 0)
        plan = _try(plan, Opt(OptOps.THREAD, axis, amount), renderer)
    return plan


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


def _gpu_opts(plan: KernelPlan, renderer: Renderer) -> list[Opt]:
    # a matmul the renderer's tensor cores can compute goes to them
    tc_opts = tensor_core_opts(plan, renderer)
    if tc_opts is not None:
        return tc_opts
    out_sizes = [parts[0].size for parts in plan.out]
    red_sizes = [parts[0].size for parts in plan.red]
    total = 1
    for s in out_sizes:
        total *= s
    # a large reduce into few outputs: split it across the threads of a work-group (local memory + barrier)
    if red_sizes and total <= 2048 and red_sizes[-1] >= 256:
        last_red = plan.n_out + len(red_sizes) - 1
        amt = _divisor(red_sizes[-1], (256, 128, 64, 32, 16))
        if amt:
            plan = _try(plan, Opt(OptOps.GROUPTOP, last_red, amt), renderer)
        return list(plan.opts)
    inner = max((i for i, s in enumerate(out_sizes) if s > 1), default=None)
    if inner is not None:
        amt = _divisor(out_sizes[inner], (64, 32, 16, 8, 4, 2))
        if amt:
            plan = _try(plan, Opt(OptOps.LOCAL, inner, amt), renderer)
    return list(plan.opts)
