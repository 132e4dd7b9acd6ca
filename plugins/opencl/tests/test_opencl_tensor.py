"""Tensor programs on DEVICE=OPENCL compared with numpy: dtypes, half without cl_khr_fp16, reductions, matmul."""

from __future__ import annotations

import contextlib
import io
import math
import re

import numpy as np
import pytest

from uopkit import Device, Tensor
from uopkit.dtype import dtypes
from uopkit.helpers import Context

DEV = "OPENCL"


@pytest.fixture(autouse=True)
def _opencl_default():
    old = Device._default
    Device.DEFAULT = DEV
    yield
    Device.DEFAULT = old


def _t(x: np.ndarray) -> Tensor:
    return Tensor(x, device=DEV)


def test_elementwise_broadcast_and_math() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal((1, 7)).astype(np.float32)
    out = ((_t(a) * _t(b) + 2) / (_t(b).abs() + 1)).numpy()
    np.testing.assert_allclose(out, (a * b + 2) / (np.abs(b) + 1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_t(a).exp2().numpy(), np.exp2(a), rtol=1e-6)
    np.testing.assert_allclose(_t(np.abs(a)).sqrt().numpy(), np.sqrt(np.abs(a)), rtol=1e-6)
    np.testing.assert_allclose(_t(a).sin().numpy(), np.sin(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_t(np.abs(a) + 0.1).log2().numpy(), np.log2(np.abs(a) + 0.1), rtol=1e-6, atol=1e-6)


def test_nan_inf_semantics() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5], dtype=np.float32)
    np.testing.assert_array_equal(_t(x).maximum(0.0).numpy(), np.maximum(x, 0.0))
    np.testing.assert_array_equal(_t(x).max().numpy(), np.max(x))
    # float -> int of NaN/inf is defined as 0 by the C-style renderer, like on the CPU
    assert _t(x).cast(dtypes.int32).numpy()[0] == 0


def test_reductions_and_matmul() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((33, 65)).astype(np.float32)
    b = rng.standard_normal((65, 17)).astype(np.float32)
    np.testing.assert_allclose(_t(a).sum(axis=1).numpy(), a.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_t(a).max(axis=0).numpy(), a.max(axis=0))
    np.testing.assert_allclose(_t(a).mean().numpy(), a.mean(), rtol=1e-5)
    np.testing.assert_allclose((_t(a) @ _t(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_large_reduction_uses_local_memory_and_barrier() -> None:
    # a few long rows: the reduce is split across the work-items of a group, combined through __local memory
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 8192)).astype(np.float32)
    out = io.StringIO()
    with Context(DEBUG=4), contextlib.redirect_stdout(out):
        got = _t(x).sum(axis=1).numpy()
    src = out.getvalue()
    assert "__local float" in src and "barrier(CLK_LOCAL_MEM_FENCE);" in src and "get_local_id(0)" in src
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=1), rtol=1e-4, atol=1e-3)
    # max through the same path
    np.testing.assert_array_equal(_t(x).max(axis=1).numpy(), x.max(axis=1))


def test_softmax_of_long_rows_is_work_group_reductions() -> None:
    # the row's max and sum are kernels of their own, each a work-group reduction (not recomputed by every work-item
    # of the output, which took minutes here); a prime row length is padded to whole work-group blocks
    x = np.random.default_rng(3).standard_normal((3, 100003)).astype(np.float32)
    out = io.StringIO()
    with Context(DEBUG=3), contextlib.redirect_stdout(out):
        got = _t(x).softmax(-1).numpy()
    opts = [line for line in out.getvalue().splitlines() if line.startswith("opts:")]
    assert len(opts) == 3 and all("GROUP" in line for line in opts[:2]), opts
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-9)


INT_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


@pytest.mark.parametrize("npdt", INT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_integer_dtypes(npdt) -> None:  # noqa: ANN001
    info = np.iinfo(npdt)
    rng = np.random.default_rng(3)
    a = rng.integers(max(info.min, -100), min(info.max, 100), 37).astype(npdt)
    b = rng.integers(1, min(info.max, 50), 37).astype(npdt)
    ta, tb = _t(a), _t(b)
    np.testing.assert_array_equal((ta + tb).numpy(), a + b)
    np.testing.assert_array_equal((ta * tb).numpy(), a * b)
    np.testing.assert_array_equal((ta < tb).numpy(), a < b)
    np.testing.assert_array_equal(ta.max().numpy(), a.max())
    # wrap-around at the type's limits is the C (and numpy) one
    edge = np.array([info.min, info.max], dtype=npdt)
    np.testing.assert_array_equal((_t(edge) + 1).numpy(), edge + npdt(1))


def test_bool_buffers() -> None:
    a = np.array([True, False, True, True, False])
    b = np.array([False, False, True, False, True])
    np.testing.assert_array_equal((_t(a) & _t(b)).numpy(), a & b)
    np.testing.assert_array_equal((_t(a) | _t(b)).numpy(), a | b)
    np.testing.assert_array_equal(_t(a).where(1.5, -1.0).numpy(), np.where(a, 1.5, -1.0).astype(np.float32))


def test_float64() -> None:
    if not Device[DEV].renderer.cl_caps.fp64:
        pytest.skip("device has no cl_khr_fp64")
    a = np.linspace(-3, 3, 41)
    np.testing.assert_allclose((_t(a) * 1e-300 * 1e300 + 1 / 3).numpy(), a * 1e-300 * 1e300 + 1 / 3, rtol=1e-13)
    np.testing.assert_allclose(_t(a).exp2().numpy(), np.exp2(a), rtol=1e-13)


def test_half_is_rounded_like_numpy() -> None:
    rng = np.random.default_rng(4)
    a = (rng.standard_normal(999) * 100).astype(np.float32)
    b = (rng.standard_normal(999) * 100).astype(np.float32)
    # float -> half rounds to nearest even, overflow goes to inf
    edges = np.array([65504.0, 65520.0, -65520.0, 1e-8, 6e-8, 2049.0, 2051.0, np.nan, np.inf], dtype=np.float32)
    got = _t(edges).cast(dtypes.float16).numpy()
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, edges.astype(np.float16))
    ha, hb = a.astype(np.float16), b.astype(np.float16)
    # every op's result is a half, exactly as numpy's float16 ops give it
    np.testing.assert_array_equal((_t(ha) + _t(hb)).numpy(), ha + hb)
    np.testing.assert_array_equal((_t(ha) * _t(hb)).numpy(), ha * hb)
    np.testing.assert_array_equal((_t(ha) / _t(hb)).numpy(), ha / hb)
    np.testing.assert_array_equal(_t(ha).cast(dtypes.float32).numpy(), ha.astype(np.float32))
    np.testing.assert_array_equal(_t(ha).bitcast(dtypes.int16).numpy(), ha.view(np.int16))
    bits = np.array([0x3C00, 0x7C00, 0x0001, 0xC000], dtype=np.uint16)
    np.testing.assert_array_equal(_t(bits).bitcast(dtypes.float16).numpy(), bits.view(np.float16))


def test_half_source_uses_vload_half_without_fp16() -> None:
    renderer = Device[DEV].renderer
    if renderer.cl_caps.fp16:
        pytest.skip("the device has cl_khr_fp16: half is real arithmetic")
    out = io.StringIO()
    h = np.arange(8, dtype=np.float16)
    with Context(DEBUG=4), contextlib.redirect_stdout(out):
        got = (_t(h) * 2).numpy()
    np.testing.assert_array_equal(got, h * 2)
    src = out.getvalue()
    # (vload_halfN/vstore_halfN where the kernel reads and writes vectors)
    assert re.search(r"vload_half\d*\(", src) and re.search(r"vstore_half\d*\(", src) and "cl_khr_fp16" not in src


def test_assign_and_setitem() -> None:
    t = _t(np.zeros((4, 4), dtype=np.float32)).contiguous().realize()
    t[1:3] = 5.0
    t.assign(t + 1).realize()
    expected = np.ones((4, 4), dtype=np.float32)
    expected[1:3] = 6.0
    np.testing.assert_array_equal(t.numpy(), expected)


def test_copy_between_cpu_and_opencl() -> None:
    x = np.arange(10, dtype=np.float32)
    on_opencl = Tensor(x, device="CPU").to(DEV).realize()
    np.testing.assert_array_equal(on_opencl.numpy(), x)
    back = (_t(x) * 3).realize().to("CPU").realize()
    np.testing.assert_array_equal(back.numpy(), x * 3)


def test_ops_after_copy_run_on_the_target() -> None:
    x = np.arange(10, dtype=np.float32)
    moved = Tensor(x, device="CPU").to(DEV) * 3
    assert moved.device == DEV
    np.testing.assert_array_equal(moved.numpy(), x * 3)


def test_debug2_reports_kernel_time() -> None:
    out = io.StringIO()
    x = np.arange(64, dtype=np.float32)
    with Context(DEBUG=2), contextlib.redirect_stdout(out):
        (_t(x) + 1).realize()
    assert " us " in out.getvalue() and "GFLOP/s" in out.getvalue()


def test_group_with_local_output_axis_issue_10() -> None:
    """sum(axis=0) of 2048x1024 with the opts BEAM picked in issue 10: 4 LOCAL threads per group of 256 shared one
    local-memory row each (max relative error 1.14); each now has its own."""
    from uopkit.codegen import get_program
    from uopkit.codegen.opt import Opt, OptOps
    from uopkit.engine.realize import _buffer_for
    from uopkit.schedule import create_schedule, kernelize_tensors

    rng = np.random.default_rng(0)
    a = rng.standard_normal((2048, 1024)).astype(np.float32)
    (item,) = create_schedule(kernelize_tensors([_t(a).realize().sum(axis=0)]))
    dev = Device[DEV]
    if dev.renderer.caps.local_max[0] < 1024 or dev.renderer.caps.shared_max < 65536:
        pytest.skip(f"the device's work-groups ({dev.renderer.caps.local_max}) can't hold the issue's opts")
    opts = [Opt(OptOps.GROUPTOP, 2, 256), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.LOCAL, 1, 4)]
    opts += [Opt(OptOps.UNROLL, 2, 8), Opt(OptOps.UPCAST, 1, 2)]
    spec = get_program(item.ast, dev.renderer, opts)
    assert "__local float temp0[16384];" in spec.src
    prg = dev.runtime(spec.name, dev.compiler.compile_cached(spec.src))
    bufs = [_buffer_for(b) for b in item.bufs]
    prg(*[b.opaque for b in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
    np.testing.assert_allclose(bufs[0].numpy(), a.sum(axis=0), rtol=1e-4, atol=1e-4)


def test_whole_tensor_reduces_split_over_work_groups_stay_exact() -> None:
    # a whole-tensor reduce is partial reduces on many work-groups, then a combine (schedule/splitting.py): int sums
    # stay exact, a NaN anywhere wins the max
    from uopkit.codegen import get_program
    from uopkit.schedule import create_schedule, kernelize_tensors

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 2048)).astype(np.float32)
    xi = rng.integers(-1000, 1000, (1024, 2048)).astype(np.int32)
    items = create_schedule(kernelize_tensors([_t(x).sum()]))
    assert len(items) == 2
    assert math.prod(get_program(items[0].ast, Device[DEV].renderer).global_size) >= 64
    np.testing.assert_allclose(_t(x).sum().numpy(), x.astype(np.float64).sum(), rtol=1e-5)
    assert _t(xi).sum().numpy() == xi.astype(np.int64).sum()
    assert _t(x).max().numpy() == x.max() and _t(x).min().numpy() == x.min()
    x[700, 3] = np.nan
    assert np.isnan(_t(x).max().numpy())
