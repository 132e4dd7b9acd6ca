"""OpenCLRenderer on hand-built linear programs: vectors, work-item ids, IF, local memory, device capabilities.

The programs are written out as the linearizer would order them, so forms the optimizer does not produce yet
(vector loads, GEP swizzles) are covered too; the ones with a `dev` fixture also run on the device.
"""

from __future__ import annotations

import numpy as np
import pytest

from uopkit.dtype import dtypes
from uopkit.renderer.cstyle import RenderError
from uopkit.uop.ops import Ops, UOp
from uopkit_opencl.renderer import CLCaps, OpenCLRenderer

# only the tests that take the `dev` fixture need an OpenCL device (see conftest.py)
needs_device = False

f4 = dtypes.float32.vec(4)


def _c(dt, x) -> UOp:  # noqa: ANN001
    return UOp.const(dt, x)


def _global(i: int, dt=dtypes.float32, size: int = 16) -> UOp:  # noqa: ANN001
    return UOp(Ops.DEFINE_GLOBAL, dt.ptr(size), (), i)


def _vector_program() -> list[UOp]:
    """out[4i:4i+4] = in[4i:4i+4] * 2; lanes[i] = (in*2).s0 + (in*2).s3 when i < 2; float4 throughout."""
    out, inp, lanes = _global(0), _global(1), _global(2, size=4)
    gid = UOp(Ops.SPECIAL, dtypes.int32, (_c(dtypes.int32, 4),), "gidx0")
    off = UOp(Ops.MUL, dtypes.int32, (gid, _c(dtypes.int32, 4)))
    idx_in = UOp(Ops.INDEX, inp.dtype, (inp, off))
    ld = UOp(Ops.LOAD, f4, (idx_in,))
    two = UOp(Ops.VECTORIZE, f4, tuple(_c(dtypes.float32, 2.0) for _ in range(4)))
    mul = UOp(Ops.MUL, f4, (ld, two))
    idx_out = UOp(Ops.INDEX, out.dtype, (out, off))
    st = UOp(Ops.STORE, dtypes.void, (idx_out, mul))
    lane0 = UOp(Ops.GEP, dtypes.float32, (mul,), (0,))
    lane3 = UOp(Ops.GEP, dtypes.float32, (mul,), 3)
    total = UOp(Ops.ADD, dtypes.float32, (lane0, lane3))
    cond = UOp(Ops.CMPLT, dtypes.bool, (gid, _c(dtypes.int32, 2)))
    if_ = UOp(Ops.IF, dtypes.void, (cond,))
    idx_lanes = UOp(Ops.INDEX, lanes.dtype, (lanes, gid))
    st2 = UOp(Ops.STORE, dtypes.void, (idx_lanes, total))
    endif = UOp(Ops.ENDIF, dtypes.void, (if_,))
    return [out, inp, lanes, gid, off, idx_in, ld, two, mul, idx_out, st, lane0, lane3, total, cond, if_, idx_lanes,
            st2, endif]  # fmt: skip


def _half_vector_program() -> list[UOp]:
    """out[4i:4i+4] (float) = in[4i:4i+4] (half) + 1 through a half4 load; sq[4i:4i+4] (half) = in * in in half4."""
    out, inp, sq = _global(0), _global(1, dtypes.float16), _global(2, dtypes.float16)
    gid = UOp(Ops.SPECIAL, dtypes.int32, (_c(dtypes.int32, 2),), "gidx0")
    off = UOp(Ops.MUL, dtypes.int32, (gid, _c(dtypes.int32, 4)))
    idx_in = UOp(Ops.INDEX, inp.dtype, (inp, off))
    ld = UOp(Ops.LOAD, dtypes.float16.vec(4), (idx_in,))
    as_float = UOp(Ops.CAST, f4, (ld,))
    one = UOp(Ops.VECTORIZE, f4, tuple(_c(dtypes.float32, 1.0) for _ in range(4)))
    add = UOp(Ops.ADD, f4, (as_float, one))
    idx_out = UOp(Ops.INDEX, out.dtype, (out, off))
    st = UOp(Ops.STORE, dtypes.void, (idx_out, add))
    square = UOp(Ops.MUL, ld.dtype, (ld, ld))
    idx_sq = UOp(Ops.INDEX, sq.dtype, (sq, off))
    st_sq = UOp(Ops.STORE, dtypes.void, (idx_sq, square))
    return [out, inp, sq, gid, off, idx_in, ld, as_float, one, add, idx_out, st, square, idx_sq, st_sq]


def test_vector_source() -> None:
    src = OpenCLRenderer().render("vec", _vector_program())
    assert "__kernel void vec(__global float* restrict data0" in src
    assert "float4 val0 = vload4(0, data1+alu0);" in src
    assert "vstore4(alu1, 0, data0+alu0);" in src
    assert "(float4)(2.0f, 2.0f, 2.0f, 2.0f)" in src
    assert ".s0;" in src and ".s3;" in src
    # no local ids: the driver picks the work-groups, so gidx0 is the global id
    assert "get_global_id(0)" in src and "if (alu3) {" in src


def test_vector_program_runs(dev) -> None:  # noqa: ANN001
    src = dev.renderer.render("vec", _vector_program())
    prg = dev.runtime("vec", dev.compiler.compile_cached(src))
    x = np.arange(16, dtype=np.float32)
    bufs = [dev.allocator.alloc(n * 4) for n in (16, 16, 4)]
    dev.allocator.copyin(bufs[1], memoryview(x).cast("B"))
    dev.allocator.copyin(bufs[2], memoryview(np.full(4, -1, dtype=np.float32)).cast("B"))
    prg(*bufs, global_size=(4, 1, 1), wait=True)
    out, lanes = np.empty(16, dtype=np.float32), np.empty(4, dtype=np.float32)
    dev.allocator.copyout(memoryview(out).cast("B"), bufs[0])
    dev.allocator.copyout(memoryview(lanes).cast("B"), bufs[2])
    np.testing.assert_array_equal(out, x * 2)
    rows = (x * 2).reshape(4, 4)
    np.testing.assert_array_equal(lanes, [rows[0, 0] + rows[0, 3], rows[1, 0] + rows[1, 3], -1, -1])


def test_half_vector_load_runs(dev) -> None:  # noqa: ANN001
    src = dev.renderer.render("hvec", _half_vector_program())
    if dev.renderer.half_is_storage:
        assert "vload_half4(0, data1+alu0)" in src and "uk_half4((val0*val0))" in src
        assert "vstore_half4(alu2, 0, data2+alu0);" in src
    prg = dev.runtime("hvec", dev.compiler.compile_cached(src))
    # squares that are not halves: each lane must be rounded to the nearest half
    h = (np.arange(8) * 1.37 - 3.1).astype(np.float16)
    out_buf, in_buf, sq_buf = dev.allocator.alloc(32), dev.allocator.alloc(16), dev.allocator.alloc(16)
    dev.allocator.copyin(in_buf, memoryview(h).cast("B"))
    prg(out_buf, in_buf, sq_buf, global_size=(2, 1, 1), wait=True)
    out, sq = np.empty(8, dtype=np.float32), np.empty(8, dtype=np.float16)
    dev.allocator.copyout(memoryview(out).cast("B"), out_buf)
    dev.allocator.copyout(memoryview(sq).cast("B"), sq_buf)
    np.testing.assert_array_equal(out, h.astype(np.float32) + 1)
    np.testing.assert_array_equal(sq, h * h)


def test_vector_max_keeps_nans_lane_by_lane(dev) -> None:  # noqa: ANN001
    # MAX is one of OpenCL's vector ops (a row max loads and compares whole vectors): its compares and ?: act on
    # each lane, and a NaN in either operand gives NaN in that lane only
    out, a, b = _global(0, size=8), _global(1, size=8), _global(2, size=8)
    gid = UOp(Ops.SPECIAL, dtypes.int32, (_c(dtypes.int32, 2),), "gidx0")
    off = UOp(Ops.MUL, dtypes.int32, (gid, _c(dtypes.int32, 4)))
    loads = [UOp(Ops.LOAD, f4, (UOp(Ops.INDEX, buf.dtype, (buf, off)),)) for buf in (a, b)]
    mx = UOp(Ops.MAX, f4, tuple(loads))
    st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, off)), mx))
    prog = [out, a, b, gid, off, *(x for ld in loads for x in (ld.src[0], ld)), mx, st.src[0], st]
    assert Ops.MAX in dev.renderer.caps.vector_ops
    src = dev.renderer.render("vmax", prog)
    assert "float4 alu1 = (" in src, src
    prg = dev.runtime("vmax", dev.compiler.compile_cached(src))
    xa = np.array([1, np.nan, -np.inf, 3, 0, 5, np.nan, -1], dtype=np.float32)
    xb = np.array([2, 0, np.nan, -np.inf, -0.5, np.inf, np.nan, -2], dtype=np.float32)
    bufs = [dev.allocator.alloc(32) for _ in range(3)]
    for buf, x in zip(bufs[1:], (xa, xb), strict=True):
        dev.allocator.copyin(buf, memoryview(x).cast("B"))
    prg(*bufs, global_size=(2, 1, 1), wait=True)
    res = np.empty(8, dtype=np.float32)
    dev.allocator.copyout(memoryview(res).cast("B"), bufs[0])
    np.testing.assert_array_equal(res, np.maximum(xa, xb))


def test_work_group_ids_local_memory_and_barrier() -> None:
    g = UOp(Ops.SPECIAL, dtypes.int32, (_c(dtypes.int32, 4),), "gidx0")
    lid = UOp(Ops.SPECIAL, dtypes.int32, (_c(dtypes.int32, 16),), "lidx0")
    temp = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(16, local=True), (), "temp0")
    idx = UOp(Ops.INDEX, temp.dtype, (temp, lid))
    st = UOp(Ops.STORE, dtypes.void, (idx, _c(dtypes.float32, 1.0)))
    bar = UOp(Ops.BARRIER, dtypes.void, (st,))
    src = OpenCLRenderer().render("k", [g, lid, temp, idx, st, bar])
    lines = src.splitlines()
    # __local arrays are declared at kernel scope, first
    assert lines[1].strip() == "__local float temp0[16];"
    assert "int gidx0 = (int)get_group_id(0);" in src and "int lidx0 = (int)get_local_id(0);" in src
    assert "barrier(CLK_LOCAL_MEM_FENCE);" in src


def test_half_with_and_without_cl_khr_fp16() -> None:
    a, b = _global(0, dtypes.float16), _global(1, dtypes.float16)
    idx_b = UOp(Ops.INDEX, b.dtype, (b, _c(dtypes.int32, 0)))
    ld = UOp(Ops.LOAD, dtypes.float16, (idx_b,))
    add = UOp(Ops.ADD, dtypes.float16, (ld, ld))
    ex = UOp(Ops.EXP2, dtypes.float16, (add,))
    idx_a = UOp(Ops.INDEX, a.dtype, (a, _c(dtypes.int32, 0)))
    st = UOp(Ops.STORE, dtypes.void, (idx_a, ex))
    prog = [a, b, idx_b, ld, add, ex, idx_a, st]
    storage = OpenCLRenderer(CLCaps()).render("h", prog)
    assert "cl_khr_fp16" not in storage and "__global half* restrict data0" in storage
    assert "float val0 = vload_half(0, data1);" in storage
    assert "float alu0 = uk_half((val0+val0));" in storage and "uk_half(exp2(alu0))" in storage
    assert "vstore_half(alu1, 0, data0);" in storage
    native = OpenCLRenderer(CLCaps(extensions=frozenset({"cl_khr_fp16"}))).render("h", prog)
    assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in native
    assert "half val0 = data1[0];" in native and "half alu1 = exp2(alu0);" in native and "uk_half" not in native


def test_float64_needs_cl_khr_fp64() -> None:
    a = _global(0, dtypes.float64)
    idx = UOp(Ops.INDEX, a.dtype, (a, _c(dtypes.int32, 0)))
    st = UOp(Ops.STORE, dtypes.void, (idx, _c(dtypes.float64, 0.5)))
    with_fp64 = OpenCLRenderer(CLCaps(extensions=frozenset({"cl_khr_fp64"}))).render("d", [a, idx, st])
    assert with_fp64.startswith("#pragma OPENCL EXTENSION cl_khr_fp64 : enable") and "data0[0] = 0.5;" in with_fp64
    with pytest.raises(RenderError, match="no cl_khr_fp64"):
        OpenCLRenderer(CLCaps(name="tiny gpu")).render("d", [a, idx, st])
    # the conformance suite tests what a renderer claims: no float64 without the extension
    assert dtypes.float64 not in OpenCLRenderer(CLCaps()).supported_dtypes
    assert dtypes.float64 in OpenCLRenderer(CLCaps(extensions=frozenset({"cl_khr_fp64"}))).supported_dtypes


def test_constants_and_bool_buffers() -> None:
    r = OpenCLRenderer()
    assert r.render_const(-(2**63), dtypes.int64) == "(-9223372036854775807l-1)"
    assert r.render_const(2**64 - 1, dtypes.uint64) == "18446744073709551615ul"
    assert r.render_const(True, dtypes.bool) == "true"
    assert r.render_dtype(dtypes.bool.ptr(4)) == "uchar*"
    assert r.render_dtype(dtypes.int8.vec(8)) == "char8"
    with pytest.raises(RenderError, match="no bool vectors"):
        r.render_dtype(dtypes.bool.vec(4))
    with pytest.raises(RenderError, match="no vector type with 5 elements"):
        r.render_dtype(dtypes.float32.vec(5))


def test_unsupported_forms_raise() -> None:
    bad = UOp(Ops.SPECIAL, dtypes.int32, (_c(dtypes.int32, 4),), "tidx0")
    with pytest.raises(RenderError, match="unknown SPECIAL 'tidx0'"):
        OpenCLRenderer().render("k", [bad])
    wmma = UOp(Ops.WMMA, dtypes.float32, (), None)
    with pytest.raises(RenderError, match="can't render WMMA"):
        OpenCLRenderer().render("k", [wmma])


def test_work_group_caps_and_vectors_from_the_device() -> None:
    cl_caps = CLCaps(max_work_group_size=1024, max_work_item_sizes=(1024, 1024, 64), subgroup_width=32)
    caps = OpenCLRenderer(cl_caps).caps
    assert caps.workgroup_max == 1024 and caps.local_max == (1024, 1024, 64) and caps.subgroup_width == 32
    # OpenCL C computes on vectors: UPCAST lanes become vectors, loaded and stored with vloadN/vstoreN
    assert caps.max_vector_width == 16 and Ops.ADD in caps.vector_ops and Ops.MUL in caps.vector_ops
