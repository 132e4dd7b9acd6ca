"""The spec: legal graphs pass at every stage, illegal ones fail with a message naming the op."""

import os

import pytest

from uopkit import Tensor, dtypes
from uopkit.codegen import full_rewrite
from uopkit.device import Device
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.uop.ops import Ops, UOp
from uopkit.uop.spec import (
    SPEC_VERSION,
    SpecError,
    verify_kernel_ast,
    verify_program,
    verify_tensor_graph,
)


def test_spec_has_version():
    assert isinstance(SPEC_VERSION, int) and SPEC_VERSION >= 1


def test_tensor_graph_with_store_is_legal():
    buf = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    t = buf.reshape((2, 2)).assign(Tensor.ones(2, 2))
    verify_tensor_graph(UOp(Ops.SINK, src=(t.uop,)))


def test_store_into_expanded_view_is_illegal():
    buf = Tensor([1.0]).realize()
    bad = UOp(Ops.STORE, dtypes.float32, (UOp(Ops.EXPAND, dtypes.float32, (buf.uop,), (4,)), Tensor.ones(4).uop))
    with pytest.raises(SpecError, match="STORE"):
        verify_tensor_graph(UOp(Ops.SINK, src=(bad,)))


def test_alu_with_mixed_dtypes_is_illegal():
    a = Tensor([1, 2]).uop
    b = Tensor([1.0, 2.0]).uop
    with pytest.raises(SpecError, match="ADD"):
        verify_tensor_graph(UOp(Ops.SINK, src=(UOp(Ops.ADD, dtypes.int32, (a, b)),)))


def test_kernel_ast_and_program_of_a_real_kernel_are_legal():
    x = Tensor.ones(8, 8).contiguous()
    (item,) = create_schedule(kernelize_tensors([x.sum(axis=1)]))[-1:]
    verify_kernel_ast(item.ast)
    uops, _ = full_rewrite(item.ast, Device["CPU"].renderer)
    verify_program(uops)
    ops = [u.op for u in uops]
    # a reduce is a register accumulator written by STORE inside its loop, read after the loop's END
    assert Ops.DEFINE_REG in ops
    reg_stores = [i for i, u in enumerate(uops) if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_REG]
    assert len(reg_stores) >= 2
    reg_loads = [i for i, u in enumerate(uops) if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_REG]
    ends = [i for i, u in enumerate(uops) if u.op is Ops.END]
    assert any(load > ends[0] for load in reg_loads)


def test_unclosed_loop_is_illegal():
    r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 4),), (0, "loop"))
    with pytest.raises(SpecError, match="never closed"):
        verify_program([UOp.const(dtypes.int32, 4), r])


def _sum_loop(kind: str, dtype=dtypes.float32):
    """acc = 0; for i in 0..8 (kind): acc = acc + x[i]; y[0] = acc (built by hand, in linear order)."""
    from uopkit.testing.programs import end, global_buf, load, loop, program, store

    x, y = global_buf(1, dtype, 8), global_buf(0, dtype, 1)
    acc = UOp(Ops.DEFINE_REG, dtype.ptr(1), (), 0)
    init = store(acc, 0, UOp.const(dtype, 0))
    i = loop(0, 8, kind, (init,))
    update = store(acc, 0, load(acc, 0).alu(Ops.ADD, load(x, i)))
    return program(store(y, 0, load(acc, 0, dtype=dtype), deps=(end(update, i),)))


def test_linearizer_marks_sum_loops_and_the_spec_checks_kinds():
    from uopkit.renderer.loops import loop_roles

    # a float sum of a register is marked "sum"; an int one stays a plain loop
    uops = _sum_loop("loop")
    (r,) = [u for u in uops if u.op is Ops.RANGE]
    assert r.arg == (0, "sum")
    role = loop_roles(uops)[r]
    assert role.reduce is Ops.ADD and [g.op for g in role.registers] == [Ops.DEFINE_REG]
    assert [u.arg for u in _sum_loop("loop", dtypes.int32) if u.op is Ops.RANGE] == [(0, "loop")]
    # a kind that is not one, or a "max" mark on a sum loop, is refused (program() verifies what it linearized)
    with pytest.raises(SpecError, match="RANGE arg .* is not \\(id, kind\\)"):
        _sum_loop("fast")
    with pytest.raises(SpecError, match="is not an innermost max"):
        _sum_loop("max")
    assert [u.arg for u in _sum_loop("sum") if u.op is Ops.RANGE] == [(0, "sum")]


def test_a_sum_loop_may_store_each_iteration_to_its_own_global_element():
    from uopkit.testing.programs import end, global_buf, load, loop, program, store

    def sum_and_store(at, read_back: bool = False, kind: str = "loop"):
        # acc = 0; for i: e = x[i] * 2; y[at(i)] = e; acc += e (softmax's sum of exp, storing each exp)
        x, y, s = global_buf(1, dtypes.float32, 8), global_buf(0, dtypes.float32, 16), global_buf(2, dtypes.float32, 1)
        acc = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1), (), 0)
        i = loop(0, 8, kind, (store(acc, 0, UOp.const(dtypes.float32, 0)),))
        e = load(x, i) * 2.0 + (load(y, i) if read_back else 0.0)
        update = store(acc, 0, load(acc, 0).alu(Ops.ADD, e))
        spill = store(y, at(i), e, deps=(update,))
        uops = program(store(s, 0, load(acc, 0, dtype=dtypes.float32), deps=(end(spill, i),)))
        return [u.arg[1] for u in uops if u.op is Ops.RANGE]

    # each iteration its own element (the address moves with the loop, by any constant step): still a sum loop
    assert sum_and_store(lambda i: i) == ["sum"]
    assert sum_and_store(lambda i: i * 2 + 1) == ["sum"]
    # the same element every iteration, an address not plainly affine in the loop, or a buffer the loop reads too:
    # a plain loop, and the spec refuses a "sum" mark on it
    assert sum_and_store(lambda i: 3) == ["loop"]
    assert sum_and_store(lambda i: i // 2) == ["loop"]
    assert sum_and_store(lambda i: i, read_back=True) == ["loop"]
    with pytest.raises(SpecError, match="is not an innermost sum"):
        sum_and_store(lambda i: 3, kind="sum")


def test_program_mixing_index_dtypes_is_illegal():
    from uopkit.dtype import index_dtype
    from uopkit.testing.programs import end, global_buf, load, loop, program, store

    var_n = UOp.variable("n", 0, 8)  # made outside the int64 context: int32
    with index_dtype(dtypes.int64):
        assert UOp.variable("m", 0, 8).dtype == dtypes.int64
        out = global_buf(0, dtypes.float32, 8)
        i = loop(0, 8)
        bad = end(store(out, i, load(out, i) + var_n.cast(dtypes.float32)), i)
        with pytest.raises(SpecError, match="mix index dtypes"):
            program(bad)


def test_variable_range_must_fit_int32():
    with pytest.raises(SpecError, match="DEFINE_VAR"):
        verify_program([UOp.variable("big", 0, 2**31, dtypes.int64)])


def test_the_test_run_checks_the_spec():
    # (tests/conftest.py turns the check on; set only in the environment, after uopkit's pytest plugin had imported
    # uopkit, it was off in every test run)
    from uopkit.helpers import SPEC

    if os.environ.get("SPEC") == "0":
        pytest.skip("SPEC=0 was asked for")
    assert SPEC.value


def test_a_clamp_gradient_is_a_legal_tensor_graph():
    # the gradient rules written over UOps built bare constants (mask.where(g, 0.0)), illegal in a tensor graph
    from uopkit.helpers import Context

    x = Tensor([2.5, 3.0, 1.5, 8.0], requires_grad=True)
    with Context(SPEC=1):
        x.clamp(min=2.0).sum().backward()
        assert x.grad.tolist() == [1.0, 1.0, 0.0, 1.0]
