"""Hand-written default opts: register tiles and vectors for the CPU (GPU-style backends: `heuristic_gpu`)."""

from __future__ import annotations

import math

from uopkit.codegen.opt import MAX_LANES, KernelPlan, Opt, OptOps, initial_plan
from uopkit.codegen.opt.analysis import divisor as _divisor
from uopkit.codegen.opt.analysis import load_axes, memory_strides, picked_axes, reduce_folds_away
from uopkit.codegen.opt.analysis import try_opt as _try
from uopkit.codegen.scatter import lowers_as_scatter
from uopkit.dtype import dtypes
from uopkit.helpers import cpu_threads
from uopkit.renderer import Renderer
from uopkit.uop.ops import GroupOp, Ops, UOp, is_one_hot_reduce

# rows of a sum over a strided axis read at once (see `hand_coded_opts`)
ROWS_IN_FLIGHT = 4
# a kernel of at most this many outputs whose reduces compute more than MAX_TILED_REDUCE_BODY operations per reduced
# element gets no lanes (see `hand_coded_opts`)
SMALL_KERNEL_OUTPUTS = 4096
MAX_TILED_REDUCE_BODY = 64


def hand_coded_opts(ast: UOp, renderer: Renderer) -> list[Opt]:
    if renderer.caps.has_local:
        from uopkit.codegen.opt.heuristic_gpu import gpu_opts

        return gpu_opts(ast, renderer)
    if lowers_as_scatter(ast):
        # its writes run one by one, in order (`uopkit.codegen.scatter`): no lanes or threads
        return []
    plan = initial_plan(ast)
    out_sizes = [parts[0].size for parts in plan.out]
    red_sizes = [parts[0].size for parts in plan.red]
    one_hot = plan.reduce_op is not None and is_one_hot_reduce(plan.reduce_op) and reduce_folds_away(ast)
    if not red_sizes or one_hot:
        # elementwise (or a one-hot pick, which the lowerer turns into a load at the index): the C compiler
        # vectorizes the innermost loop by itself; lanes only add code (and the loads' strides, which take a lowering
        # and a simplification to find, are not needed), except in a transposing copy and a gather across rows
        plan = _transpose_lanes(plan, ast, renderer) if not red_sizes else _gather_lanes(plan, ast, renderer)
        return list(_thread_opts(plan, renderer).opts)
    red_axis_ids = set(range(plan.n_out, plan.n_out + len(red_sizes)))
    all_loads = load_axes(ast)
    # in a reduce kernel the loads inside the reduce loop are the ones that count (an epilogue's reads run once)
    hot_loads = [la for la in all_loads if red_axis_ids & set(la)] or all_loads
    contiguous = sorted({a for la in hot_loads for a, st in la.items() if st == 1})
    if not contiguous or not red_sizes:
        contiguous += [a for a, st in memory_strides(ast, loads=False).items() if 1 in st]
    total_out = math.prod(out_sizes)
    if total_out <= SMALL_KERNEL_OUTPUTS and _reduce_body_ops(ast) > MAX_TILED_REDUCE_BODY:
        # a few outputs, each a reduce over a long fused computation (a loop of log-domain Sinkhorn steps, recomputed
        # from the last stored one in its backward): lanes copy that computation once per lane, for outputs that take
        # microseconds either way. A 40-output column logsumexp in 4x2 lanes was 2600 lines of C, 2 s of codegen and
        # compile a kernel (a 15-step Sinkhorn's gradient: 92 of them, 210 s); without lanes, an eighth of that
        return list(_thread_opts(plan, renderer).opts)
    width = vector_lanes(ast, renderer)
    out_axes = [i for i, s in enumerate(out_sizes) if s > 1]
    red_axes = [plan.n_out + i for i, s in enumerate(red_sizes) if s > 1]
    # (an output axis too short for a vector, a 3x3 kernel's column in a weight gradient, is no vector axis: its
    # vectors would be gathered lane by lane)
    vec_out = [a for a in out_axes if a in contiguous and out_sizes[a] >= 4]
    vec_red = [a for a in red_axes if a in contiguous]
    loads = hot_loads
    # output axes that some load doesn't move along: tiling them reuses that load across the tile
    reuse_axes = [a for a in out_axes if any(a not in la for la in loads)]
    store_contiguous = [a for a, st in memory_strides(ast, loads=False).items() if 1 in st]
    short_reduce = vec_red and not _divisor(red_sizes[vec_red[-1] - plan.n_out], (width, 8, 4))
    if not vec_out and short_reduce and total_out >= 64 * 64 and [a for a in reuse_axes if a in store_contiguous]:
        # the only contiguous loads run along a reduce too short for a vector (a strided convolution's 3-wide kernel
        # rows): vectors along the stored output axis instead, their loads gathered, in a register tile below
        vec_red = []
    if not vec_out and vec_red and len(reuse_axes) >= 2:
        # both operands run along the reduce (a @ b.T): vectors along the reduce, one accumulator vector per output
        # of a small tile, combined across the vector's lanes after the loop
        axis = vec_red[-1]
        amt = _divisor(red_sizes[axis - plan.n_out], (width, 8, 4))
        if amt:
            plan = _try(plan, Opt(OptOps.UPCAST, axis, amt), renderer)
        # (vectors narrower than the widest, a 56-wide image row in 8s, tile the same way: one accumulator alone is a
        # chain of dependent adds, a vector FMA's latency per step)
        tile = _dot_tile(out_sizes, reuse_axes, loads, renderer, amt) if amt else []
        # (a reduce too short for any vector: a small tile of scalar accumulators)
        for other, rows in tile or zip(reversed(reuse_axes[-2:]), (2, 4), strict=False):
            amt2 = rows if tile else _divisor(out_sizes[other], (rows, 2))
            if amt2:
                plan = _try(plan, Opt(OptOps.UPCAST, other, amt2), renderer)
    elif plan.reduce_op is not None and is_one_hot_reduce(plan.reduce_op) and vec_out:
        # a one-hot sum that doesn't fold into a load and isn't a scatter kernel (an embedding's gradient fused with
        # another reduce, or stored in another dtype): each output row's updates go under one branch (the
        # linearizer's `branch_one_hot_updates`), taken for few iterations, so a tile of rows would only add
        # branches: one row of vectors, as many as the lanes allow
        axis = vec_out[-1]
        amt = _divisor(out_sizes[axis], (width, 8, 4, 2))
        if amt:
            plan = _try(plan, Opt(OptOps.UPCAST, axis, amt), renderer)
            more = _divisor(out_sizes[axis] // amt, tuple(m for m in (32, 24, 16, 8, 4, 2) if amt * m <= MAX_LANES))
            if more:
                plan = _try(plan, Opt(OptOps.UPCAST, axis, more), renderer)
    elif vec_out or len(reuse_axes) >= 2:
        # vectors along a contiguous output axis; big outputs get two vectors
        pick = [a for a in reuse_axes if a in vec_out] or vec_out or [a for a in reuse_axes if a in store_contiguous]
        pick = pick or reuse_axes
        big = total_out >= 64 * 64
        # the innermost candidate, unless only another one is long enough for a register tile's vectors (x.T @ g
        # with 10 classes: the 10 columns take pairs and the tile stays scalar, the 512 rows take whole vectors)
        wide = [a for a in pick if (_divisor(out_sizes[a], (width, 8, 4)) or 0) >= 4] if big else []
        axis = pick[-1] if not wide or pick[-1] in wide else wide[-1]
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
                # and rows in flight: each step reads one short run per row (a KB of a 16 KB row), which a core's
                # prefetchers follow poorly; four rows' runs at a time (the column sums of a 4096x4096 matrix on 2
                # threads, Zen 4: 4.2-4.5 -> 2.8-3.5 ms)
                rows = [a for a in red_axes if red_sizes[a - plan.n_out] % ROWS_IN_FLIGHT == 0]
                if rows and red_sizes[rows[-1] - plan.n_out] >= 4 * ROWS_IN_FLIGHT:
                    plan = _try(plan, Opt(OptOps.UNROLL, rows[-1], ROWS_IN_FLIGHT), renderer)
        if big and (amt or 0) >= 4 and reusing:
            # a register tile: rows along an axis that the vector's loads don't move along reuse each loaded vector
            # (the rows of a matmul, the output channels of a convolution; narrower vectors where the row isn't
            # whole widest ones, a 56-wide image row in 8s)
            # (a vector axis the output isn't stored along, x.T @ g for 10 classes with vectors along the 512 rows,
            # stores each lane apart: one vector per row of the tile. Four vectors by five rows wrote 320 scalar stores,
            # which took gcc 0.35-0.5 s of the 0.45 s it spent on the kernel, and the kernel ran no faster than with one
            # vector (22.8 against 21.9 us, 0.14 s to compile))
            scattered = axis not in store_contiguous
            tile = _register_tile(out_sizes, axis, reusing, renderer, amt, max_vectors=1 if scattered else 8)
            if tile is not None:
                vectors, other, rows = tile
                if vectors > 1:
                    plan = _try(plan, Opt(OptOps.UPCAST, axis, vectors), renderer)
                plan = _try(plan, Opt(OptOps.UPCAST, other, rows), renderer)
                if other < axis:
                    # the vector axis's loop outside the rows': the slice of the vector's operand one column of
                    # tiles reads stays in cache while every row tile passes, and only the rows' (narrower)
                    # operand streams from farther out
                    plan = _try(plan, Opt(OptOps.SWAP, other, axis), renderer)
            # vectors gathered with a stride (a strided convolution's output columns read every other input
            # column): the short row of taps along which that load is contiguous unrolled, so that one step's
            # gathers read the same lines (a 3x3 stride-2 convolution, one thread: 3.4-4.9 -> 1.2-1.3 ms)
            gathered = [la for la in vector_loads if abs(la.get(axis, 0)) > 1]
            taps = [a for la in gathered for a in red_axes if la.get(a) == 1 and red_sizes[a - plan.n_out] <= 4]
            if taps:
                plan = _try(plan, Opt(OptOps.UNROLL, taps[-1], red_sizes[taps[-1] - plan.n_out]), renderer)
        else:
            # a small tile along another output axis
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


def _reduce_body_ops(ast: UOp) -> int:
    # the ALU operations computed per reduced element, over every reduce of the kernel
    body: set[UOp] = set()
    for red in (u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS):
        body.update(u for u in red.src[0].toposort() if u.op in GroupOp.ALU)
    return len(body)


def vector_lanes(ast: UOp, renderer: Renderer) -> int:
    """The lanes of the kernel's vectors: as many of its widest elements as `max_vector_width` floats take (8 doubles
    in an AVX-512 register). A wider vector is split by the C compiler, badly: on an AVX-512 core a 512x512 float64
    matmul's tile of 16-double vectors (two registers each, their fma a helper gcc joins lane by lane) ran 187 ms,
    of 8-double ones 9-17 ms, and with a tanh after a small one gcc took 51 s against 1.9 s. (Halves compute in
    float32: no wider than floats.)"""
    # (by the floats where there are any: an int64 index buffer beside float32 values doesn't halve their vectors)
    elements = [u.dtype.base for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL]
    floats = [dt for dt in elements if dtypes.is_float(dt)]
    itemsize = max((dt.itemsize for dt in floats or elements), default=4)
    return max(1, renderer.caps.max_vector_width * 4 // max(4, itemsize))


# a cache line: a transposing copy reads this many bytes of each source row per pass
CACHE_LINE = 64
# source rows this many bytes apart (or a multiple) share at most 4 of an L1 cache's 64 sets
CONFLICT_STRIDE = 1024
# smaller outputs stay in cache whatever the order (and skip the analysis, a lowering of the kernel)
MIN_TRANSPOSE_ELEMENTS = 64 * 64
# a stored run gathered from source rows less than MAX_GATHER_STRIDE elements apart is written SHORT_RUN_LANES rows
# at a time when it is at most SHORT_STORE_RUN long (a matmul panel's 32 columns, a pixel's 64 channels), else
# LONG_RUN_LANES rows at a time (a transpose's rows)
SHORT_STORE_RUN = 64
SHORT_RUN_LANES = 4
LONG_RUN_LANES = 8
MAX_GATHER_STRIDE = 4096


def _transpose_lanes(plan: KernelPlan, ast: UOp, renderer: Renderer) -> KernelPlan:
    """A kernel that stores along one axis and loads along another (a transpose, a matmul operand packed into
    panels) reads one element of each source row per step of its inner loop, and comes back for the next element of
    those rows on the next pass. When the loop outside the stored run walks the source rows, lanes along the run
    gather a few rows at a time, a cache line of each (a 2-D tile), and the next steps read on along the same rows.
    Else, when the rows are a multiple of
    1 KB apart their lines share a few cache sets and are evicted before the next pass: lanes along the load's
    contiguous axis read each line whole, once, and the stores stay runs along the inner loop. (Rows at other
    distances stay in cache between passes, and the lanes' scattered stores would only cost: a (64, 64, 64, 128)
    NHWC -> NCHW copy took 2x longer with them.)"""
    if math.prod(plan.real) < MIN_TRANSPOSE_ELEMENTS:
        return plan
    stores = load_axes(ast, loads=False)
    store_contiguous = {a for la in stores for a, st in la.items() if st == 1}
    if not store_contiguous:
        return plan
    # (the stored value's element size: a copy loads what it stores)
    itemsize = ast.src[0].src[-1].dtype.scalar.itemsize
    line = max(1, CACHE_LINE // itemsize)
    loads = load_axes(ast)
    # a run of the output gathered from rows that the next loop out walks along: lanes along the run store a vector of
    # 4 or 8 rows' elements per step, and the next steps read on along the same rows' lines. One thread: a 784x512
    # weight gathered into panels 645 -> 136 us, attention's k.T 80 -> 39 us, a 64-channel NCHW -> NHWC copy 603 ->
    # 374 us, 1024x1024 float transposes 2511 -> 662 us (int8: 2463 -> 416), 3072x768 6426 -> 3119 us. (Rows 16 KB
    # or more apart keep the lanes along the rows below; with another loop in between nothing gained.)
    inner = len(plan.real) - 1
    lanes = SHORT_RUN_LANES if plan.real[inner] <= SHORT_STORE_RUN else LONG_RUN_LANES
    if inner in store_contiguous and plan.real[inner] % lanes == 0:
        gathered = [la.get(inner - 1) == 1 and line <= abs(la.get(inner, 0)) < MAX_GATHER_STRIDE for la in loads]
        if any(gathered) and all(g or la.get(inner, 0) in (0, 1) for g, la in zip(gathered, loads, strict=True)):
            tile = _try(plan, Opt(OptOps.UPCAST, inner, lanes), renderer)
            # and a whole cache line of each of those rows per step, a 2-D tile transposed in registers: each source
            # line is read once, not once per pass (two threads, Zen 4: 2048x2048 13.3-13.5 -> 3.2-3.3 ms, 784x512
            # 547-562 -> 63-87 us, a 512x512 weight into panels 117 -> 36 us, attention's k.T 39 -> 25 us)
            amt = _divisor(plan.real[inner - 1], (line,))
            return _try(tile, Opt(OptOps.UPCAST, inner - 1, amt), renderer) if amt else tile
    for la in loads:
        if not any(la.get(s, 0) and (la[s] * itemsize) % CONFLICT_STRIDE == 0 for s in store_contiguous):
            continue
        for axis, stride in la.items():
            if stride != 1 or axis in store_contiguous or any(abs(st.get(axis, 0)) < line for st in stores):
                continue
            amt = _divisor(plan.real[axis], (line, line // 2, 4))
            if amt:
                return _try(plan, Opt(OptOps.UPCAST, axis, amt), renderer)
    return plan


def _gather_lanes(plan: KernelPlan, ast: UOp, renderer: Renderer) -> KernelPlan:
    """A gather whose innermost output loop walks the table across its rows, the index's loop outside it
    (`x.index_select(1, idx)`: out[b, r] = x[r, idx[b]]), reads a cache line per element and comes back to the same
    rows for the next index, long evicted. Lanes along the inner axis (the output stored along it) with the index's
    loop moved inside the rest of it: each step reads a few rows at the picked column and stores them as one run, and
    the next indices read on in the same rows, still in cache (x 4096x1024, 256 indices, two threads: 13-14 -> 5-6
    ms of CPU time a call)."""
    out_sizes = [parts[0].size for parts in plan.out]
    out_axes = [a for a, size in enumerate(out_sizes) if size > 1]
    if math.prod(out_sizes) < MIN_TRANSPOSE_ELEMENTS or len(out_axes) < 2:
        return plan
    inner = out_axes[-1]
    line = max(1, CACHE_LINE // ast.src[0].src[-1].dtype.scalar.itemsize)
    stores = load_axes(ast, loads=False)
    if not stores or any(st.get(inner) != 1 for st in stores):
        return plan
    # the index's axes of the loads that step across rows along the inner axis
    index_axes: list[int] = []
    for la, picks in zip(load_axes(ast), picked_axes(ast), strict=True):
        if abs(la.get(inner, 0)) >= line:
            index_axes += [a for a in sorted(picks) if a in out_axes and a != inner]
    lanes = _divisor(out_sizes[inner], (LONG_RUN_LANES, SHORT_RUN_LANES, 2))
    if not index_axes or not lanes:
        return plan
    tile = _try(plan, Opt(OptOps.UPCAST, inner, lanes), renderer)
    # the index's loop moved in past each later output loop, the others kept in their order (an image's batch and
    # channels stay outside: the rows each pass reads are those of one channel)
    index, moved = index_axes[-1], tile
    for axis in (a for a in out_axes if a > index):
        moved = _try(moved, Opt(OptOps.SWAP, index, axis), renderer)
    # (both or neither: the lanes alone only gather, the order alone strides the stores)
    return moved if [a for a in moved.loop_order if a in out_axes][-1:] == [index] else plan


def _register_tile(
    out_sizes: list[int], axis: int, reusing: list[int], renderer: Renderer, lanes: int, max_vectors: int = 8
) -> tuple[int, int, int] | None:
    """(vectors per row, row axis, rows) of the register tile of a kernel whose output axis `axis` is loaded in
    vectors that the `reusing` axes' rows share: each step of the reduce loads `vectors` vectors and `rows` broadcast
    values for vectors * rows FMAs, so the tile with the most FMAs per load wins, among those whose accumulators, the
    loaded vectors (or broadcasts, whichever are fewer) and one spare fit in the registers (an AVX-512 core: 6 rows of
    4 vectors of 16 floats; AVX2: 3 rows of 4 vectors of 8), at most `max_vectors` per row. Fewer vectors first on a tie
    (a narrower column panel)."""
    per_row = out_sizes[axis] // lanes
    best: tuple[float, int, int, int] | None = None
    for other in reversed(reusing):
        for vectors in (v for v in range(1, max_vectors + 1) if per_row % v == 0):
            for rows in (r for r in range(2, 9) if out_sizes[other] % r == 0):
                score = _tile_score(vectors, rows, renderer, lanes)
                if score and (best is None or score > best[0] + 1e-9):
                    best = (score, vectors, other, rows)
    return best[1:] if best is not None else None


def _tile_score(a: int, b: int, renderer: Renderer, lanes: int) -> float:
    """FMAs per load of an a x b register tile of `lanes`-wide vectors (a step loads a and b values for a*b FMAs), 0
    where its accumulators, the smaller side's loads and one spare don't fit in the registers or the lanes pass
    MAX_LANES."""
    registers = renderer.caps.vector_registers or 32
    if a * b + min(a, b) + 1 > registers or a * b * lanes > MAX_LANES:
        return 0.0
    return a * b / (a + b)


def _dot_tile(
    out_sizes: list[int], reuse_axes: list[int], loads: list[dict[int, int]], renderer: Renderer, width: int
) -> list[tuple[int, int]]:
    """The register tile, as (axis, amount) pairs, of a kernel whose operands are both loaded in vectors along the
    reduce (one accumulator vector per output, its lanes summed after the loop): two output axes that each leave a
    different operand's load in place, so a step's loads serve every accumulator of the tile (a @ b.T: rows of a times
    rows of b; a convolution's weight gradient: output channels times kernel rows). The most accumulators per load
    that fit in the registers wins. An axis that moves its operand by less than a vector (a kernel column, stride 1)
    is left out: its loads would be unaligned and overlap. `width`: the vectors' lanes."""

    def reuses(a: int, b: int) -> bool:
        # some load stays put along `a` but moves along `b`, by whole vectors
        return any(a not in la and b in la and abs(la[b]) >= width for la in loads)

    best: tuple[float, list[tuple[int, int]]] = (0.0, [])
    for b in reversed(reuse_axes):
        for a in reversed(reuse_axes):
            if a == b or not (reuses(a, b) and reuses(b, a)):
                continue
            for na in (n for n in range(2, 9) if out_sizes[a] % n == 0):
                for nb in (n for n in range(2, 9) if out_sizes[b] % n == 0):
                    score = _tile_score(na, nb, renderer, width)
                    if score > best[0] + 1e-9:
                        best = (score, [(b, nb), (a, na)])
    return best[1]


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
        if k == len(chosen) - 1 and (threads < cpu_threads() or plan.loop_order):
            # a kernel worth fewer threads than there are: about as many blocks as its threads (the renderer starts
            # one thread per block, up to every core), each a run of the loop; with a loop order (SWAP) the loop
            # left inside each block is what the order moves
            fit = [d for d in range(2, size) if size % d == 0 and blocks * d >= threads]
            amount = next((d for d in fit if thread_balance(blocks * d, threads) >= MIN_BALANCE), 0)
        plan = _try(plan, Opt(OptOps.THREAD, axis, amount), renderer)
    return plan
