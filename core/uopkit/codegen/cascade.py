"""A long float sum added in two levels inside its kernel, where each output is added in one running loop (kernels
lowered with `lower_kernel(cascade_sums=True)`: the CPU's; a GPU's work-group reduce adds in a tree).

A float32 running sum of n values drifts by about eps * sqrt(n / 3) relative, each addition rounding against an ever
larger total: 4e-6 for a column mean over 16384 rows, where torch's cascade stays near 1.5e-7. Here each block of b
of the reduce's iterations is summed into a fresh partial accumulator, which is added to the output's accumulator
when the block ends: the partials round against totals of at most b values, their errors are independent and
average out, and the output's accumulator takes n / b additions. The error is about
eps * (b / sqrt(n) + sqrt(n / b)) / sqrt(3), least near b = (n / 2) ** (2 / 3) (~400 of 16384: 10x less than one
pass). A block costs a reset and an add per accumulator, and its loop's exit.

The block is cut at a boundary of the reduce's loops (each iteration of an outer loop sums the loops inside it) or
inside one of them (the loop split into blocks of b of its iterations; where no b near the best divides its count,
its last iterations stay out of the blocks and are added straight to the output's accumulator first, while its total
is small). The innermost loop of a one-slot accumulator is never cut: the renderer adds it in SIMD lanes already (an
`omp simd` reduction, which is why row sums are accurate), and cut, each block would end in a horizontal sum. The
cut depends only on the kernel's shapes and opts: a sum gives the same bits on every machine with the same vector
width.

Sums of products into many outputs (a matmul's, a convolution's) keep their one pass: their accumulator tiles fill
the registers, which a second set would spill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from uopkit.codegen.plan import AxisPart
from uopkit.dtype import dtypes
from uopkit.uop.ops import Ops, UOp

# a running sum into one accumulator of at most this many additions stays in one pass (each SIMD lane of a row sum of
# 16384 adds about as many: 2.3e-7 relative, torch's 1e-7)
SUM_CHAIN = 256
# a sum of products is a matmul's or a convolution's (left in one pass) beyond this many outputs; into fewer (a
# squared error, a dot product) it is cut like any sum (the scheduler cuts its long ones in slices likewise)
SUM_OF_PRODUCTS_OUTPUTS = 1024
# a cut that needs a tail loop (its count has no divisor near the best block) counts as this much worse: the tail is
# a second copy of the loop's code
TAIL_COST = 1.25

# a loop of the reduce: (reduce axis, part) as the lowerer numbers its axis parts
Part = tuple[int, int]


@dataclass(frozen=True)
class Cascade:
    """Where a sum's blocks are cut: `block` iterations of loop `part` (with the loops inside it) make a block, over
    its first `whole` iterations (the rest: its tail). `block` 1 cuts at the loop's boundary."""

    part: Part
    block: int
    whole: int


def _error(total: int, block: int) -> float:
    # the relative error of a sum of `total` in blocks of `block`, in units of eps / sqrt(3) (the module doc)
    return block / math.sqrt(total) + math.sqrt(total / block)


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def cascade_for(red: UOp, outputs: int, axis_nodes: list[list[tuple[Any, int]]], lanes: bool) -> Cascade | None:
    """Where the lowerer cuts reduce `red` (into `outputs` outputs) into blocks: `axis_nodes` holds each reduce
    axis's parts (an `AxisPart` for each loop, outer to inner) and their sizes, `lanes` whether its accumulator has
    several lanes. None: one pass (not a float sum, a matmul's, or short enough)."""
    # (a float64 running sum drifts by ~1e-14 over 16384 additions: far below any float32 result's rounding, as in a
    # float32 variance computed in float64)
    if red.arg[0] is not Ops.ADD or not dtypes.is_float(red.dtype) or red.dtype.itemsize > 4:
        return None
    if is_many_output_product(red.src[0], outputs):
        return None
    loops = [
        ((i, j), size)
        for i, nodes in enumerate(axis_nodes)
        for j, (n, size) in enumerate(nodes)
        if isinstance(n, AxisPart) and n.kind == "loop"
    ]
    return best_cut(loops, cut_innermost=lanes)


def best_cut(loops: list[tuple[Part, int]], cut_innermost: bool) -> Cascade | None:
    """The cut for a sum over `loops` (each loop's part and count, outermost first), or None when one pass is
    accurate enough. `cut_innermost`: the innermost loop may be split (the accumulator has several lanes)."""
    counts = [n for _, n in loops]
    total = math.prod(counts)
    if total <= SUM_CHAIN:
        return None
    best: tuple[float, Cascade] | None = None
    ideal = (total / 2) ** (2 / 3)
    for i, (part, count) in enumerate(loops):
        inner = math.prod(counts[i + 1 :])
        innermost = i == len(loops) - 1
        if innermost and not cut_innermost:
            continue
        options = [(b, count) for b in _divisors(count) if b < count and (b > 1 or not innermost)]
        near = min(max(1, round(ideal / inner)), count // 2)
        if count % near and (near > 1 or not innermost):
            options.append((near, count - count % near))
        for block, whole in options:
            size = block * inner
            if size < 2 or whole // block < 2:
                continue
            cost = _error(total, size) * (TAIL_COST if whole < count else 1)
            if best is None or cost < best[0]:
                best = (cost, Cascade(part, block, whole))
    return best[1] if best is not None else None


def is_many_output_product(value: UOp, outputs: int) -> bool:
    """Whether a sum of `value` into `outputs` outputs is a matmul's or a convolution's (a product, possibly cast)."""
    while value.op is Ops.CAST:
        value = value.src[0]
    return value.op is Ops.MUL and outputs > SUM_OF_PRODUCTS_OUTPUTS


def partial_accumulator(slot: UOp, reg_id: int, identity: UOp, loops: tuple[UOp, ...]) -> tuple[UOp, UOp]:
    """A fresh accumulator with the lanes of accumulator slot `slot` (its slot), and its reset inside `loops`."""
    acc = slot.src[0]
    partial = slot.replace(src=(UOp(Ops.DEFINE_REG, acc.dtype, (), reg_id), *slot.src[1:]))
    return partial, UOp(Ops.STORE, dtypes.void, (partial, identity, *loops))


def fold_partial(slot: UOp, after: UOp, partial: UOp, done: UOp, loops: tuple[UOp, ...]) -> UOp:
    """Add the partial accumulator's sum (once `done`) into accumulator `slot` (reset by `after`), inside `loops`."""
    dtype = slot.dtype.base
    total = UOp(Ops.LOAD, dtype, (slot, after, *loops)) + UOp(Ops.LOAD, dtype, (partial, done))
    return UOp(Ops.STORE, dtypes.void, (slot, total, *loops))
