"""TritonRenderer on hand-built linear programs: work-groups as programs, local ids as block axes (padded to powers
of two and masked), registers as assignments, C integer division, and what it refuses; each program also runs on
TRITON (Triton's CPU interpreter here, the GPU where there is one)."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit.codegen import get_program
from uopkit.dtype import dtypes
from uopkit.renderer.cstyle import RenderError
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.tensor import Tensor
from uopkit.testing.programs import chain, end, global_buf, idx, load, loop, program, run_program, store
from uopkit.uop.ops import Ops, UOp
from uopkit_triton.renderer import TritonRenderer

DEV = "TRITON"


def _ast(t: Tensor) -> UOp:
    return create_schedule(kernelize_tensors([t]))[-1].ast


def special(name: str, size: int) -> UOp:
    return UOp(Ops.SPECIAL, dtypes.index, (idx(size),), name)


def test_elementwise_kernel_is_a_block_per_work_group() -> None:
    a = Tensor(np.zeros(1024, np.float32), device=DEV)
    src = get_program(_ast(a * 2 + 1), TritonRenderer()).src
    assert "@triton.jit" in src and "tl.program_id(0)" in src and "tl.arange(0, 256)" in src
    # one block per work-group, no loop over the work-items
    assert "for " not in src and "tl.store(" in src


def test_reduce_loop_is_block_reductions() -> None:
    a = Tensor(np.zeros((4, 9), np.float32), device=DEV)
    src = get_program(_ast(a.sum(1)), TritonRenderer()).src
    # the loop runs a chunk of 16 iterations as one block (the last 7 masked), reduced into the register
    assert "for chunk0 in range(1):" in src and "tl.arange(0, 16)" in src and "(ridx0 < 9)" in src
    assert "tl.reduce(" in src and "tl.standard._sum_combine" in src and "acc0_0 = (acc0_0 + red0)" in src
    assert src.count("tl.store(") == 1


def _reduce_program(op: Ops, dt, n: int | UOp, rows: int) -> list[UOp]:  # noqa: ANN001
    """out[r] = op-reduce of a[r, :n] into a register, n a constant or a variable."""
    out, a = global_buf(0, dt, rows), global_buf(1, dt, rows * 64)
    r = loop(0, rows)
    acc = UOp(Ops.DEFINE_REG, dt.ptr(1), (), 0)
    slot = UOp(Ops.INDEX, acc.dtype, (acc, idx(0)))
    identity = 0 if op is not Ops.MAX else (-np.inf if dtypes.is_float(dt) else dtypes.min(dt))
    init = UOp(Ops.STORE, dtypes.void, (slot, UOp.const(dt, identity if op is not Ops.MUL else 1), r))
    c = loop(1, n, deps=(init,))
    update = UOp(Ops.STORE, dtypes.void, (slot, UOp(op, dt, (UOp(Ops.LOAD, dt, (slot, c)), load(a, r * 64 + c)))))
    return program(end(store(out, r, UOp(Ops.LOAD, dt, (slot, end(update, c)))), r))


@pytest.mark.parametrize("n", [1, 37, 64])
def test_block_reductions_match_numpy(n: int) -> None:
    """Sums and NaN-propagating maxes over blocks, int8 sums that wrap, and a symbolic loop end (masked chunks)."""
    rng = np.random.default_rng(n)
    rows = 5
    data = rng.standard_normal((rows, 64)).astype(np.float32)
    data[2, n // 2] = np.nan
    got = run_program(DEV, _reduce_program(Ops.MAX, dtypes.float32, n, rows), [np.zeros(rows, np.float32), data])[0]
    np.testing.assert_array_equal(got, data[:, :n].max(1))
    ints = rng.integers(-128, 128, (rows, 64)).astype(np.int8)
    got = run_program(DEV, _reduce_program(Ops.ADD, dtypes.int8, n, rows), [np.zeros(rows, np.int8), ints])[0]
    np.testing.assert_array_equal(got, ints[:, :n].sum(1, dtype=np.int8))
    var = UOp.variable("n", 0, 64)
    uops = _reduce_program(Ops.ADD, dtypes.float32, var, rows)
    assert "tl.reduce(" in TritonRenderer().render("sym", uops)
    clean = rng.standard_normal((rows, 64)).astype(np.float32)
    got = run_program(DEV, uops, [np.zeros(rows, np.float32), clean], vals=(n,))[0]
    np.testing.assert_allclose(got, clean[:, :n].sum(1), rtol=1e-5, atol=1e-6)


def test_other_reduces_stay_loops() -> None:
    """A product is no block reduction here: the loop runs iteration by iteration."""
    rows = 3
    uops = _reduce_program(Ops.MUL, dtypes.float32, 6, rows)
    src = TritonRenderer().render("prod", uops)
    assert "tl.reduce(" not in src and "for ridx1 in range(6):" in src
    data = np.random.default_rng(0).uniform(0.5, 1.5, (rows, 64)).astype(np.float32)
    got = run_program(DEV, uops, [np.zeros(rows, np.float32), data])[0]
    np.testing.assert_allclose(got, data[:, :6].prod(1), rtol=1e-6)


def test_padded_work_group_lanes_are_masked() -> None:
    """A work-group of 3 x 5 work-items is a 8 x 4 block; the padding lanes neither load nor store."""
    groups, rows, cols = 2, 5, 3
    n = groups * rows * cols
    out, a = global_buf(0, dtypes.float32, n), global_buf(1, dtypes.float32, n)
    g, l0, l1 = special("gidx0", groups), special("lidx0", cols), special("lidx1", rows)
    offset = g * (rows * cols) + l1 * cols + l0
    uops = program(store(out, offset, load(a, offset) * 3.0 + l1.cast(dtypes.float32)))
    src = TritonRenderer().render("padded", uops)
    assert "tl.arange(0, 4)[None, :]" in src and "tl.arange(0, 8)[:, None]" in src
    assert "(lidx0 < 3)" in src and "(lidx1 < 5)" in src
    data = np.arange(n, dtype=np.float32)
    got = run_program(DEV, uops, [np.full(n, -1, np.float32), data])[0]
    expected = data * 3 + np.tile(np.repeat(np.arange(rows), cols), groups)
    np.testing.assert_array_equal(got, expected)


def test_register_with_lanes_is_a_block() -> None:
    """Each work-item sums its own column in a loop: the accumulator has the work-group's lanes."""
    rows, cols = 6, 8
    out, a = global_buf(0, dtypes.float32, cols), global_buf(1, dtypes.float32, rows * cols)
    lane = special("lidx0", cols)
    acc = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1), (), 0)
    slot = UOp(Ops.INDEX, acc.dtype, (acc, idx(0)))
    init = UOp(Ops.STORE, dtypes.void, (slot, UOp.const(dtypes.float32, 0.0)))
    r = loop(0, rows, deps=(init,))
    update = UOp(Ops.STORE, dtypes.void, (slot, UOp(Ops.LOAD, dtypes.float32, (slot, r)) + load(a, r * cols + lane)))
    total = UOp(Ops.LOAD, dtypes.float32, (slot, end(update, r)))
    uops = program(store(out, lane, total))
    src = TritonRenderer().render("columns", uops)
    # the register has the work-group's axis and the block loop's (size 1 in it)
    assert "acc0_0 = tl.full([8, 1], 0.0, tl.float32)" in src
    data = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    got = run_program(DEV, uops, [np.zeros(cols, np.float32), data])[0]
    np.testing.assert_allclose(got, data.sum(0), rtol=1e-6)


def test_gated_register_store_keeps_the_old_value() -> None:
    n = 10
    out, a = global_buf(0, dtypes.int32, 1), global_buf(1, dtypes.int32, n)
    acc = UOp(Ops.DEFINE_REG, dtypes.int32.ptr(1), (), 0)
    init = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, acc.dtype, (acc, idx(0))), UOp.const(dtypes.int32, 0)))
    r = loop(0, n, deps=(init,))
    x = load(a, r)
    even = (x % 2).alu(Ops.CMPEQ, 0)
    gated = UOp(Ops.INDEX, acc.dtype, (acc, idx(0), even))
    plain = UOp(Ops.INDEX, acc.dtype, (acc, idx(0)))
    update = UOp(Ops.STORE, dtypes.void, (gated, UOp(Ops.LOAD, dtypes.int32, (plain, r)) + x))
    uops = program(store(out, 0, UOp(Ops.LOAD, dtypes.int32, (plain, end(update, r)))))
    assert "tl.where(" in TritonRenderer().render("gated", uops)
    data = np.arange(n, dtype=np.int32) * 3 + 1
    got = run_program(DEV, uops, [np.zeros(1, np.int32), data])[0]
    assert got[0] == data[data % 2 == 0].sum()


def test_integer_division_is_guarded_unless_the_divisor_is_safe() -> None:
    n = 8
    out, a, b = (global_buf(i, dtypes.int8, n) for i in range(3))
    i = loop(0, n)
    q = load(a, i).alu(Ops.IDIV, load(b, i))
    uops = program(end(store(out, i, q), i))
    src = TritonRenderer().render("div", uops)
    assert "== -1" in src and "== 0" in src
    const_div = program(end(store(out, i, load(a, i).alu(Ops.MOD, UOp.const(dtypes.int8, 3))), i))
    assert "tl.where" not in TritonRenderer().render("mod3", const_div)
    x = np.array([-128, -7, 7, 100, -128, 5, 0, 127], np.int8)
    y = np.array([-1, 2, -2, 0, 3, -1, 5, 1], np.int8)
    got = run_program(DEV, uops, [np.zeros(n, np.int8), x, y])[0]
    np.testing.assert_array_equal(got, np.array([-128, -3, -3, 0, -42, -5, 0, 127], np.int8))


def test_refuses_local_memory_and_vectors() -> None:
    shared = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(8, local=True), (), 0)
    lane = special("lidx0", 8)
    out = global_buf(0, dtypes.float32, 8)
    staged = store(shared, lane, UOp.const(dtypes.float32, 1.0))
    barrier = UOp(Ops.BARRIER, dtypes.void, (staged,))
    back = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, shared.dtype, (shared, lane)), barrier))
    uops = program(store(out, lane, back))
    with pytest.raises(RenderError, match="has_shared=False"):
        TritonRenderer().render("locals", uops)
    vec = dtypes.float32.vec(2)
    a = global_buf(1, dtypes.float32, 8)
    r = loop(0, 4)
    v = load(a, r * 2, dtype=vec)
    with pytest.raises(RenderError, match="vector"):
        TritonRenderer().render("vec", program(end(store(out, r * 2, v + v), r)))


def test_constants_keep_their_dtype() -> None:
    """Constants that stand alone are typed scalars: int64's minimum, uint64's maximum, NaN in float16."""
    outs = [global_buf(0, dtypes.int64, 1), global_buf(1, dtypes.uint64, 1), global_buf(2, dtypes.float16, 1)]
    values = [UOp.const(dtypes.int64, -(2**63)), UOp.const(dtypes.uint64, 2**64 - 1), UOp.const(dtypes.float16, np.nan)]
    stores = [store(o, 0, v) for o, v in zip(outs, values, strict=True)]
    uops = program(chain(stores))
    got = run_program(DEV, uops, [np.zeros(1, np.int64), np.zeros(1, np.uint64), np.zeros(1, np.float16)])
    assert got[0][0] == -(2**63) and got[1][0] == 2**64 - 1 and np.isnan(got[2][0])


def test_scalar_and_block_bools_combine() -> None:
    """A bool loaded by the work-group (scalar) with a bool of each work-item (block), by &, |, ^ and a constant."""
    groups, lanes = 3, 4
    n = groups * lanes
    outs = [global_buf(k, dtypes.bool, n) for k in range(4)]
    flags = global_buf(4, dtypes.float32, groups)
    g, lane = special("gidx0", groups), special("lidx0", lanes)
    # a NaN check of a float the group loads (the form float MAX takes), true for group 0
    group_value = load(flags, g)
    group_bool, lane_bool = group_value.alu(Ops.CMPNE, group_value), lane.lt(2)
    values = [
        group_bool.alu(Ops.AND, lane_bool),
        lane_bool.alu(Ops.OR, group_bool),
        group_bool.alu(Ops.XOR, lane_bool),
        lane_bool.alu(Ops.OR, UOp.const(dtypes.bool, True)),
    ]
    uops = program(chain([store(o, g * lanes + lane, v) for o, v in zip(outs, values, strict=True)]))
    got = run_program(DEV, uops, [*(np.zeros(n, bool) for _ in outs), np.array([np.nan, 1, 2], np.float32)])
    gb, lb = np.repeat(np.arange(groups) < 1, lanes), np.tile(np.arange(lanes) < 2, groups)
    for result, expected in zip(got[:4], [gb & lb, gb | lb, gb ^ lb, np.ones(n, bool)], strict=True):
        np.testing.assert_array_equal(result, expected)
