"""Which kernel axes a tensor core can run (`OptOps.TC`): `match_tensor_core` finds, for the optimizer, which kernel
axes are M, N and K and which source of the MUL is A. The lowering itself is in `uopkit.codegen.lowerer`."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from uopkit.codegen.lowerer import TensorCoreMatchError, lower_kernel, mul_operands
from uopkit.codegen.plan import main_reduce
from uopkit.dtype import dtypes
from uopkit.uop.ops import Ops, UOp, graph_rewrite
from uopkit.uop.symbolic import pm_symbolic

if TYPE_CHECKING:
    from uopkit.renderer import TensorCore


def _ranges(u: UOp) -> set[int]:
    """Ids of the loops a value's index math uses (not the ones a loop it uses merely opens inside)."""
    found: set[int] = set()
    stack, seen = [u], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op is Ops.RANGE:
            found.add(n.arg[0])
        else:
            stack.extend(n.src)
    return found


def match_tensor_core(ast: UOp, tc: TensorCore, red_axis: int) -> tuple[int, int, int]:
    """(M axis, N axis, which MUL source is A) for running the kernel's reduce axis `red_axis` (0-based among the
    reduce's axes) on `tc`. Raises `TensorCoreMatchError` with the reason when the kernel does not fit."""
    found = _match_cached(ast, tc, red_axis)
    if isinstance(found, str):
        raise TensorCoreMatchError(found)
    return found


# the search asks again for every candidate: remember the answers, refusals included
@functools.lru_cache(maxsize=256)
def _match_cached(ast: UOp, tc: TensorCore, red_axis: int) -> tuple[int, int, int] | str:
    try:
        return _match(ast, tc, red_axis)
    except TensorCoreMatchError as e:
        return str(e)


def _match(ast: UOp, tc: TensorCore, red_axis: int) -> tuple[int, int, int]:
    red = main_reduce(ast)
    if red is None:
        raise TensorCoreMatchError("the kernel needs exactly one reduce")
    if len(ast.src) != 1:
        raise TensorCoreMatchError("the kernel must have a single output")
    op, axes = red.arg
    if op is not Ops.ADD:
        raise TensorCoreMatchError(f"the reduce must be a sum, not {op.name}")
    if len(axes) != 1 or red_axis != 0:
        raise TensorCoreMatchError(f"the reduce must have exactly one axis (it has {len(axes)})")
    if red.dtype != tc.dtype_out:
        raise TensorCoreMatchError(f"the reduce accumulates in {red.dtype}, the core in {tc.dtype_out}")
    mul_operands(red.src[0], tc)
    # which kernel axes each operand reads: lower the kernel as plain loops and look at the loads' indices
    lowered, lctx = lower_kernel(ast)
    updates = [
        u.src[1].src[1]
        for u in lowered.toposort()
        if u.op is Ops.STORE
        and u.src[0].op is Ops.INDEX
        and u.src[0].src[0].op is Ops.DEFINE_REG
        and u.src[1].op is Ops.ADD
    ]
    if len(updates) != 1:
        raise TensorCoreMatchError(f"expected one accumulator update in the lowered kernel, found {len(updates)}")
    value = updates[0]
    x, y = mul_operands(value, tc)
    simplified = graph_rewrite(UOp(Ops.SINK, dtypes.void, (x, y)), pm_symbolic, name="tensor core operands")
    reads = [{lctx.axis_of[r] for r in _ranges(s) if r in lctx.axis_of} for s in simplified.src]
    store = ast.src[0]
    shape = store.src[1].shape
    assert shape is not None
    n_out = len(shape)
    k_axis = n_out + red_axis
    src_shape = red.src[0].shape
    assert src_shape is not None
    k_size = src_shape[axes[0]]
    if k_axis not in reads[0] or k_axis not in reads[1]:
        raise TensorCoreMatchError("both factors of the product must read the reduce axis")
    if k_size % tc.dims[2]:
        raise TensorCoreMatchError(f"the reduce axis (size {k_size}) is not a multiple of the tile's K {tc.dims[2]}")
    m, n = tc.dims[0], tc.dims[1]
    found = []
    for a_src in (0, 1):
        only_a = sorted(a for a in reads[a_src] - reads[1 - a_src] if a < n_out)
        only_b = sorted(a for a in reads[1 - a_src] - reads[a_src] if a < n_out)
        found.append((only_a, only_b))
        m_axes = [a for a in only_a if shape[a] % m == 0]
        n_axes = [a for a in only_b if shape[a] % n == 0]
        if m_axes and n_axes:
            # the innermost candidates: they are the ones contiguous in memory for row-major operands
            return m_axes[-1], n_axes[-1], a_src
    only_x, only_y = found[0]
    if not only_x or not only_y:
        raise TensorCoreMatchError(
            "not a matmul: each factor needs an output axis that only it reads "
            f"(first factor only: {only_x}, second only: {only_y})"
        )
    sizes = {a: shape[a] for a in only_x + only_y}
    raise TensorCoreMatchError(
        f"no output axes fit the {m}x{n} tile: M and N must be multiples of {m} and {n} "
        f"(sizes of the candidate axes: {sizes})"
    )


__all__ = ["TensorCoreMatchError", "match_tensor_core"]
