"""The codegen pipeline end to end: the C a kernel becomes, and what DEBUG prints."""

import numpy as np

from uopkit import Device, Tensor
from uopkit.codegen import get_program
from uopkit.engine.realize import method_cache
from uopkit.helpers import Context
from uopkit.schedule import create_schedule, kernelize_tensors


def _item(t):
    return create_schedule(kernelize_tensors([t]))[-1]


def test_reduce_renders_accumulator_and_loops():
    item = _item(Tensor.ones(16, 16).contiguous().sum(axis=1))
    src = get_program(item.ast, Device["CPU"].renderer, opts=[]).src
    assert "for (int ridx" in src
    # a one-slot accumulator is a plain variable, and its loop is marked for SIMD (the sum may be reassociated)
    assert "float acc0;" in src
    assert "#pragma omp simd reduction(+:acc0)" in src
    assert src.count("{") == src.count("}")


def test_upcast_lanes_unroll_code_and_thread_pragma():
    from uopkit.codegen.opt import Opt, OptOps

    item = _item(Tensor.ones(64, 64).contiguous() * 3)
    src = get_program(item.ast, Device["CPU"].renderer, opts=[Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.THREAD, 0, 2)]).src
    assert "#pragma omp parallel for" in src
    # a power-of-two upcast becomes a vector: one vector store
    assert "vector_size(16)" in src and src.count("data0[") == 1
    # three lanes are three scalar copies
    src = get_program(item.ast, Device["CPU"].renderer, opts=[Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4)]).src
    assert "vector_size(32)" in src and src.count("data0[") == 4


def test_debug_levels_print_kernel_time_and_source(capsys):
    method_cache.clear()
    x = Tensor(np.arange(10, dtype=np.float32))
    with Context(DEBUG=4):
        (x * 2 + 1).realize()
    out = capsys.readouterr().out
    assert "void E_10(" in out
    assert " us " in out and "E_10" in out


def test_debug_3_prints_opts(capsys):
    method_cache.clear()
    with Context(DEBUG=3):
        (Tensor.ones(64, 64).contiguous() + 1).realize()
    assert "opts: [" in capsys.readouterr().out


def test_noopt_gives_plain_loops():
    method_cache.clear()
    with Context(NOOPT=1):
        item = _item(Tensor.ones(64, 64).contiguous() * 2)
        from uopkit.codegen import choose_opts

        assert choose_opts(item.ast, Device["CPU"].renderer) == []


def test_integer_division_by_zero_does_not_crash():
    a = Tensor([7, -7, 5, 0])
    b = Tensor([0, 2, -1, 0])
    assert a.idiv(b).tolist() == [0, -3, -5, 0]
