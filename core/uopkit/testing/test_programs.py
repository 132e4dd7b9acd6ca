"""Conformance: hand-built linear programs for each form of the program spec — loops of edge sizes, register
accumulators, gated loads and stores, symbolic bounds, vectors, locals and barriers, tensor cores."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit.device import Device
from uopkit.dtype import dtypes, to_numpy_dtype
from uopkit.renderer.tensor_cores import validate_for_renderer
from uopkit.testing.programs import (
    VECTOR_WIDTHS,
    chain,
    end,
    global_buf,
    idx,
    load,
    loop,
    program,
    run_program,
    store,
    wmma_matmul_program,
)
from uopkit.uop.ops import Ops, UOp


@pytest.mark.parametrize("n", [0, 1, 7, 4096 + 3])
def test_loop_sizes(uopkit_device: str, n: int) -> None:
    out, a = global_buf(0, dtypes.float32, n), global_buf(1, dtypes.float32, n)
    i = loop(0, n)
    uops = program(end(store(out, i, load(a, i) * 2.0 + 1.0), i))
    data = np.arange(n, dtype=np.float32) - 3
    got = run_program(uopkit_device, uops, [np.zeros(n, np.float32), data])[0]
    np.testing.assert_array_equal(got, data * 2 + 1)


@pytest.mark.parametrize("rows, cols", [(3, 0), (1, 1), (5, 7), (2, 1031)])
def test_register_accumulator(uopkit_device: str, rows: int, cols: int) -> None:
    """out[r] = sum(a[r, :]) + max(a[r, :]) through two DEFINE_REG accumulators written with STOREs."""
    out, a = global_buf(0, dtypes.float32, rows), global_buf(1, dtypes.float32, rows * cols)
    r = loop(0, rows)
    acc_sum = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1), (), 0)
    acc_max = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1), (), 1)
    slot_sum = UOp(Ops.INDEX, acc_sum.dtype, (acc_sum, idx(0)))
    slot_max = UOp(Ops.INDEX, acc_max.dtype, (acc_max, idx(0)))
    init_sum = UOp(Ops.STORE, dtypes.void, (slot_sum, UOp.const(dtypes.float32, 0.0), r))
    init_max = UOp(Ops.STORE, dtypes.void, (slot_max, UOp.const(dtypes.float32, -np.inf), r))
    c = loop(1, cols, "loop", (init_sum, init_max))
    x = load(a, r * cols + c)
    upd_sum = UOp(Ops.STORE, dtypes.void, (slot_sum, UOp(Ops.LOAD, dtypes.float32, (slot_sum, c)) + x))
    upd_max = UOp(Ops.STORE, dtypes.void, (slot_max, UOp(Ops.LOAD, dtypes.float32, (slot_max, c)).maximum(x)))
    done = end(chain([upd_sum, upd_max]), c)
    total = UOp(Ops.LOAD, dtypes.float32, (slot_sum, done)) + UOp(Ops.LOAD, dtypes.float32, (slot_max, done))
    uops = program(end(store(out, r, total), r))
    data = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    got = run_program(uopkit_device, uops, [np.zeros(rows, np.float32), data])[0]
    expected = data.sum(axis=1) + (data.max(axis=1) if cols else -np.inf)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_gated_load_and_store(uopkit_device: str) -> None:
    """Loads past the end of the input read 0 through a gate; only even positions are stored."""
    n, m = 11, 6
    out, a = global_buf(0, dtypes.int32, n), global_buf(1, dtypes.int32, m)
    i = loop(0, n)
    in_bounds = i.lt(m)
    value = load(a, in_bounds.where(i, idx(0)), gate=in_bounds) + 100
    even = (i % 2).alu(Ops.CMPEQ, 0)
    uops = program(end(store(out, i, value, gate=even), i))
    data = np.arange(1, m + 1, dtype=np.int32)
    got = run_program(uopkit_device, uops, [np.full(n, -1, np.int32), data])[0]
    expected = np.full(n, -1, np.int32)
    padded = np.concatenate([data, np.zeros(n - m, np.int32)]) + 100
    expected[::2] = padded[::2]
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("n", [0, 1, 5, 16])
def test_symbolic_bound(uopkit_device: str, n: int) -> None:
    """A loop bound and an index that depend on DEFINE_VARs, given at launch."""
    size = 16
    var_n = UOp.variable("n", 0, size)
    var_k = UOp.variable("k", 0, 10)
    out, a = global_buf(0, dtypes.int32, size), global_buf(1, dtypes.int32, size)
    i = loop(0, var_n)
    uops = program(end(store(out, i, load(a, i) * var_k + var_n), i))
    data = np.arange(size, dtype=np.int32)
    # values go in the order of the variables' names: k, n
    got = run_program(uopkit_device, uops, [np.zeros(size, np.int32), data], vals=(3, n))[0]
    expected = np.zeros(size, np.int32)
    expected[:n] = data[:n] * 3 + n
    np.testing.assert_array_equal(got, expected)


def test_nested_loops_odd_shape(uopkit_device: str) -> None:
    rows, cols = 3, 5
    out, a = global_buf(0, dtypes.float32, rows * cols), global_buf(1, dtypes.float32, rows * cols)
    r, c = loop(0, rows), loop(1, cols)
    # transpose: out[c, r] = a[r, c]
    uops = program(end(store(out, c * rows + r, load(a, r * cols + c)), c, r))
    data = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    got = run_program(uopkit_device, uops, [np.zeros(rows * cols, np.float32), data.reshape(-1)])[0]
    np.testing.assert_array_equal(got.reshape(cols, rows), data.T)


@pytest.mark.parametrize("width", VECTOR_WIDTHS)
def test_vectors(uopkit_device: str, width: int) -> None:
    """Vector LOAD/STORE of `width` consecutive elements, vector ALU, GEP and VECTORIZE."""
    renderer = Device[uopkit_device].renderer
    if width > renderer.max_vector_width:
        pytest.skip(f"{uopkit_device} declares max_vector_width={renderer.max_vector_width}")
    n = 3 * width
    vec = dtypes.float32.vec(width)
    out, a = global_buf(0, dtypes.float32, n), global_buf(1, dtypes.float32, n)
    i = loop(0, n // width)
    x = load(a, i * width, dtype=vec)
    doubled = x + x
    # reverse the lanes: GEP each one, VECTORIZE them back in the other order
    reversed_vec = UOp(
        Ops.VECTORIZE, vec, tuple(UOp(Ops.GEP, dtypes.float32, (doubled,), (k,)) for k in range(width))[::-1]
    )
    uops = program(end(store(out, i * width, reversed_vec), i))
    data = np.arange(n, dtype=np.float32)
    got = run_program(
        uopkit_device,
        uops,
        [np.zeros(n, np.float32), data],
        feature=f"vectors of {width}",
        claimed=f"caps.max_vector_width={renderer.max_vector_width}",
    )[0]
    np.testing.assert_array_equal(got, (data * 2).reshape(-1, width)[:, ::-1].reshape(-1))


def test_locals_and_barrier(uopkit_device: str) -> None:
    """Each workgroup stages its slice in local memory, waits at a barrier, and reads it back reversed."""
    renderer = Device[uopkit_device].renderer
    if not (renderer.has_local and renderer.has_shared):
        pytest.skip(f"{uopkit_device} has no local threads and shared memory (has_local/has_shared)")
    groups, threads = 3, 8
    out, a = global_buf(0, dtypes.float32, groups * threads), global_buf(1, dtypes.float32, groups * threads)
    g = UOp(Ops.SPECIAL, dtypes.index, (idx(groups),), "gidx0")
    lane = UOp(Ops.SPECIAL, dtypes.index, (idx(threads),), "lidx0")
    shared = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(threads, local=True), (), 0)
    staged = store(shared, lane, load(a, g * threads + lane))
    barrier = UOp(Ops.BARRIER, dtypes.void, (staged,))
    back = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.INDEX, shared.dtype, (shared, (threads - 1) - lane)), barrier))
    uops = program(store(out, g * threads + lane, back))
    data = np.arange(groups * threads, dtype=np.float32)
    got = run_program(
        uopkit_device,
        uops,
        [np.zeros_like(data), data],
        feature="locals and barriers",
        claimed="caps.has_local and caps.has_shared",
    )[0]
    np.testing.assert_array_equal(got, data.reshape(groups, threads)[:, ::-1].reshape(-1))


def test_tensor_cores(uopkit_device: str) -> None:
    """Every tensor core the renderer declares is valid for it, and a WMMA matmul built from it is exact."""
    renderer = Device[uopkit_device].renderer
    if not renderer.tensor_cores:
        pytest.skip(f"{uopkit_device} declares no tensor cores")
    validate_for_renderer(renderer)
    rng = np.random.default_rng(1)
    for tc in renderer.tensor_cores:
        tiles = (2, 1, 3)
        m, n, k = (d * t for d, t in zip(tc.dims, tiles, strict=True))
        in_np, out_np = to_numpy_dtype(tc.dtype_in), to_numpy_dtype(tc.dtype_out)
        a = rng.integers(-3, 4, (m, k)).astype(in_np)
        b = rng.integers(-3, 4, (k, n)).astype(in_np)
        uops = wmma_matmul_program(tc, tiles)
        arrays = [np.zeros((m, n), out_np), a, b]
        feature, claim = f"WMMA ({tc.name})", f"caps.tensor_cores holds {tc.name}"
        got = run_program(uopkit_device, uops, arrays, feature=feature, claimed=claim)[0]
        # small integers: every product and sum is exact in any dtype, so the result must be too
        np.testing.assert_array_equal(got, (a.astype(np.int64) @ b.astype(np.int64)).astype(out_np), err_msg=str(tc))


def test_64bit_index_arithmetic(uopkit_device: str) -> None:
    """A kernel whose index arithmetic is int64: an int64 loop counter and an address through values past 2**31."""
    from uopkit.dtype import index_dtype

    n = 5
    with index_dtype(dtypes.int64):
        out, a = global_buf(0, dtypes.float32, n), global_buf(1, dtypes.float32, n)
        i = loop(0, n)
        # (i * 2**32 + 2**33) // 2**32 - 2 is i in 64-bit arithmetic and 0 - 2 wrapped in 32 bits
        address = (i * 2**32 + 2**33) // 2**32 + -2
        uops = program(end(store(out, i, load(a, address) + 1.0), i))
    assert i.dtype == dtypes.int64 and address.dtype == dtypes.int64
    data = np.arange(n, dtype=np.float32) * 10
    got = run_program(uopkit_device, uops, [np.zeros(n, np.float32), data], name="index64")[0]
    np.testing.assert_array_equal(got, data + 1)


def test_64bit_index_with_variable(uopkit_device: str) -> None:
    """A variable in an int64 kernel is int64 like the loop counter (its value is still passed as int32)."""
    from uopkit.dtype import index_dtype

    n = 5
    with index_dtype(dtypes.int64):
        var_n = UOp.variable("n", 0, n)
        out, a = global_buf(0, dtypes.float32, n), global_buf(1, dtypes.float32, n)
        i = loop(0, var_n)
        # (i * 2**32 + n * 2**32) // 2**32 - n is i in 64-bit arithmetic, not in 32 bits
        address = (i * 2**32 + var_n * 2**32) // 2**32 - var_n
        uops = program(end(store(out, i, load(a, address) + 1.0), i))
    assert var_n.dtype == dtypes.int64 and address.dtype == dtypes.int64
    data = np.arange(n, dtype=np.float32) * 10
    got = run_program(uopkit_device, uops, [np.zeros(n, np.float32), data], vals=(3,), name="index64var")[0]
    np.testing.assert_array_equal(got, np.concatenate([data[:3] + 1, np.zeros(n - 3, np.float32)]))
