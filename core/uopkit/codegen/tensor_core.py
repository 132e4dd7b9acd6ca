"""Lowering a kernel's matmul onto a tensor core (`OptOps.TC`), exactly as its `TensorCore` description says.

`match_tensor_core` finds, for the optimizer, which kernel axes are M, N and K and which source of the MUL is A.
The lowerer then calls the hooks below:

- `begin_tensor_core` (start of `lower_store`): the lane id (SPECIAL "lidx0", work-group dimension 0, when the core
  has several threads) and placeholders for the tile coordinates M, N, K and the accumulator element.
- `tile_placeholder` (`_output_axes`): the "tc" part of the M and N axes is a placeholder, so the value the kernel
  stores is built for a symbolic position inside the tile.
- `lower_tc_reduce` (`lower_reduce`): the reduce becomes a loop over K tiles around one WMMA. Each fragment element
  of A and B is the MUL's operand lowered with the placeholders replaced by its (row, col) in the A or B layout;
  the accumulator holds the thread's C fragment (one DEFINE_REG slot per element, per upcast lane around it).
- `finish_tensor_core` (end of `lower_store`): the placeholders become the C layout's (row, col) of element e of
  the thread's fragment, with e an upcast lane range; the expander then writes each element where it belongs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from uopkit.dtype import DType, dtypes
from uopkit.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from uopkit.codegen.lowerer import LowererContext
    from uopkit.renderer import TensorCore, TileLayout


class TensorCoreMatchError(ValueError):
    """The kernel is not a matmul this tensor core can compute (the message says why)."""


def _as_dtype_in(u: UOp, dtype_in: DType) -> UOp | None:
    """`u` as a value of `dtype_in`: itself, the source of a CAST from it, or the same view of such a source (the
    front end casts before it reshapes and expands, so the CAST can sit under movement ops). None if it isn't."""
    if u.dtype == dtype_in:
        return u
    if u.op is Ops.CAST and u.src[0].dtype == dtype_in:
        return u.src[0]
    if u.op in GroupOp.Movement:
        inner = _as_dtype_in(u.src[0], dtype_in)
        return None if inner is None else u.replace(dtype=dtype_in, src=(inner,))
    return None


def mul_operands(value: UOp, tc: TensorCore) -> tuple[UOp, UOp]:
    """The two `dtype_in` operands of a reduce source MUL(x, y), MUL(CAST(x), CAST(y)) or CAST(MUL(x, y)).

    With CAST(MUL(x, y)) the tensor core multiplies exactly where the kernel would round the product to
    `dtype_in` first: the result can only be closer to the exact one."""
    mul = value.src[0] if value.op is Ops.CAST and value.src[0].op is Ops.MUL else value
    if mul.op is not Ops.MUL:
        raise TensorCoreMatchError(f"the reduce must sum a product (MUL), not {value.op.name}")
    operands = []
    for s in mul.src:
        operand = _as_dtype_in(s, tc.dtype_in)
        if operand is None:
            raise TensorCoreMatchError(f"a factor of the product has dtype {s.dtype}, not the core's {tc.dtype_in}")
        operands.append(operand)
    return operands[0], operands[1]


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
    from uopkit.codegen.lowerer import lower_kernel
    from uopkit.codegen.opt import main_reduce
    from uopkit.uop.ops import graph_rewrite
    from uopkit.uop.symbolic import pm_symbolic

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


# ---------------------------------------------------------------------------------------------------------------------
# lowering hooks


@dataclass
class TensorCoreLowering:
    """Per-kernel state: the lane id within the core's threads and the placeholders of the tile coordinates."""

    lane: UOp | int
    m: UOp
    n: UOp
    k: UOp
    elem: UOp


def _placeholder(size: int, what: str) -> UOp:
    # a RANGE with a negative id never reaches the program: finish_tensor_core or lower_tc_reduce replace it
    return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size),), (-1, f"tc_{what}"))


def _bits_index(bits: tuple[str, ...], lane: UOp | int, elem: UOp | int) -> UOp:
    """The row or column a TileLayout's bit list names (as `TileLayout.coord`), with each run of consecutive bits
    of one source taken by one shift and mask: ``("t2", "t3", "t4")`` is ``lane // 4`` rather than three bits."""
    runs: list[list] = []
    for position, name in enumerate(bits):
        source, k = name[0], int(name[1:])
        if runs and runs[-1][0] == source and runs[-1][1] + runs[-1][2] == k:
            runs[-1][2] += 1
        else:
            runs.append([source, k, 1, position])
    value = UOp.const(dtypes.index, 0)
    for source, k, length, position in runs:
        x = lane if source == "t" else elem
        if isinstance(x, int):
            term: UOp | int = (x >> k) % (1 << length)
        else:
            term = x // (1 << k) if k else x
            # the top bits need no mask when the id never reaches them
            if x.vmax >= 1 << (k + length):
                term = term % (1 << length)
        value = value + (term * (1 << position) if position else term)
    return value


def _coord(layout: TileLayout, lane: UOp | int, elem: UOp | int) -> tuple[UOp, UOp]:
    return _bits_index(layout.rows, lane, elem), _bits_index(layout.cols, lane, elem)


def begin_tensor_core(ctx: LowererContext) -> None:
    assert ctx.plan.tc is not None
    tc = ctx.plan.tc.tc
    m, n, k = tc.dims
    # the core's threads are work-group dimension 0, so they are consecutive lanes of one warp
    lane: UOp | int = ctx.new_local_id(tc.threads) if tc.threads > 1 else 0
    ctx.tensor_core = TensorCoreLowering(
        lane,
        _placeholder(m, "m"),
        _placeholder(n, "n"),
        _placeholder(k, "k"),
        _placeholder(tc.elements_per_thread[2], "e"),
    )


def tile_placeholder(ctx: LowererContext, axis: int) -> UOp:
    """The position inside the tile along output axis `axis` (M or N), before the C layout is known."""
    tcp, state = ctx.plan.tc, ctx.tensor_core
    assert tcp is not None and state is not None
    if axis == tcp.m_axis:
        return state.m
    if axis == tcp.n_axis:
        return state.n
    raise AssertionError(f"axis {axis} has a tensor core part but is neither M nor N")


def lower_tc_reduce(ctx: LowererContext, node: UOp, idx: tuple[UOp, ...], valid: UOp) -> UOp:
    from uopkit.codegen.lowerer import LANE_KINDS, LOOP_KINDS, _lane_index, _ranges_in, lower_value

    tcp, state = ctx.plan.tc, ctx.tensor_core
    assert tcp is not None and state is not None
    tc = tcp.tc
    ea, eb, ec = tc.elements_per_thread
    outer = _ranges_in(*idx, valid)
    outer_loops = [r for r in outer if r.arg[1] in LOOP_KINDS]
    # other upcast lanes around the core (UPCAST of M or N): one C fragment per lane, each its own WMMA
    lane_index, n_lanes = _lane_index([r for r in outer if r.arg[1] in LANE_KINDS])
    acc = UOp(Ops.DEFINE_REG, tc.dtype_out.ptr(n_lanes * ec), (), next(ctx.reg_ids))

    def slot(e: UOp | int) -> UOp:
        return UOp(Ops.INDEX, acc.dtype, (acc, lane_index * ec + e))

    inits = tuple(UOp(Ops.STORE, dtypes.void, (slot(e), UOp.const(tc.dtype_out, 0), *outer_loops)) for e in range(ec))
    k_parts = ctx.plan.red[tcp.k_axis - ctx.plan.n_out]
    k_tiles = k_parts[0].size if len(k_parts) > 1 else 1
    kt = ctx.new_range(k_tiles, "loop", inits)
    ctx.axis_of[kt.arg[0]] = tcp.k_axis
    inner = list(idx)
    inner[node.arg[1][0]] = kt * tc.dims[2] + state.k

    def fragment(operand: UOp, operand_i: int, count: int) -> UOp:
        elems = []
        for e in range(count):
            row, col = _coord(tc.layouts[operand_i], state.lane, e)
            zero = UOp.const(dtypes.index, 0)
            # A is M x K and does not read N; B is K x N and does not read M
            mapping = (
                {state.m: row, state.n: zero, state.k: col}
                if operand_i == 0
                else {
                    state.m: zero,
                    state.n: col,
                    state.k: row,
                }
            )
            at = tuple(u.substitute(mapping) for u in inner)
            elems.append(lower_value(ctx, operand, at, valid.substitute(mapping)))
        return UOp(Ops.VECTORIZE, tc.dtype_in.vec(count), tuple(elems))

    x, y = mul_operands(node.src[0], tc)
    a_op, b_op = (x, y) if tcp.a_src == 0 else (y, x)
    a_vec, b_vec = fragment(a_op, 0, ea), fragment(b_op, 1, eb)
    c_vec = UOp(
        Ops.VECTORIZE, tc.dtype_out.vec(ec), tuple(UOp(Ops.LOAD, tc.dtype_out, (slot(e), kt)) for e in range(ec))
    )
    d_vec = UOp(Ops.WMMA, tc.dtype_out.vec(ec), (a_vec, b_vec, c_vec), tc)
    # chained stores (each orders after the previous), so one END closes the loop after all of them
    update: UOp | None = None
    for e in range(ec):
        value = UOp(Ops.GEP, tc.dtype_out, (d_vec,), (e,))
        update = UOp(Ops.STORE, dtypes.void, (slot(e), value) + ((update,) if update is not None else ()))
    assert update is not None
    done = UOp(Ops.END, dtypes.void, (update, kt))
    return UOp(Ops.LOAD, tc.dtype_out, (slot(state.elem), done))


def finish_tensor_core(ctx: LowererContext, out: UOp) -> UOp:
    """Place the thread's C fragment: the tile placeholders become the C layout's coordinates of element e."""
    tcp, state = ctx.plan.tc, ctx.tensor_core
    assert tcp is not None and state is not None
    elem = ctx.new_range(tcp.tc.elements_per_thread[2], "upcast")
    row, col = _coord(tcp.tc.c_layout, state.lane, elem)
    return out.substitute({state.m: row, state.n: col, state.elem: elem})
