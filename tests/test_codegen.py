"""The codegen pipeline end to end: the C a kernel becomes, and what DEBUG prints."""

import re

import numpy as np
import pytest

from uopkit import Device, Tensor, dtypes
from uopkit.codegen import get_program
from uopkit.engine.realize import method_cache
from uopkit.helpers import Context
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.uop.ops import Ops, UOp


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
    assert "_chunk(void **bufs, const int *vals, int chunk, int chunks)" in src
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
    # (E_10, or E_10n<k> when another 10-element kernel took the name first in this process)
    assert re.search(r"void E_10(n\d+)?\(", out)
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


# ---------------------------------------------------------------------------------------------------------------------
# 64-bit index arithmetic: only where a buffer, a view or a loop can pass int32


def _index_dtypes(uops):
    from uopkit.uop.ops import Ops

    return {u.dtype for u in uops if u.op in (Ops.RANGE, Ops.SPECIAL)}


def test_small_kernels_keep_32bit_indices():
    from uopkit.dtype import dtypes

    for renderer in (Device["CPU"].renderer, Device["OPENCL"].renderer):
        prg = get_program(_item(Tensor.ones(64, 48).contiguous().sum(axis=1)).ast, renderer)
        assert _index_dtypes(prg.uops) == {dtypes.int32}
        assert "long" not in prg.src


def test_views_past_int32_get_64bit_indices_and_exact_bounds():
    from uopkit.dtype import dtypes

    # the loop bound of a 10**12 + 2 element reduce renders as itself, not wrapped to 32 bits
    ast = _item((Tensor.ones(2).pad(((10**12, 0),)) * 2).sum()).ast
    cpu = get_program(ast, Device["CPU"].renderer, opts=[])
    assert _index_dtypes(cpu.uops) == {dtypes.int64}
    assert "for (long long ridx0 = 0; ridx0 < 1000000000002ll; ridx0++)" in cpu.src
    ocl = get_program(ast, Device["OPENCL"].renderer, opts=[])
    assert "1000000000002l" in ocl.src and "long ridx0" in ocl.src
    # an elementwise kernel over 2**31 + 6 elements: its thread ids on a GPU-style backend are 64-bit too
    ast = _item(Tensor.arange(6).reshape(1, 6).expand(2**31 // 6 + 1, 6).contiguous()).ast
    assert _index_dtypes(get_program(ast, Device["OPENCL"].renderer, opts=[]).uops) == {dtypes.int64}


def test_index_constants_never_wrap():
    import pytest

    from uopkit.codegen.lowerer import IndexOverflow, idx_const
    from uopkit.dtype import dtypes, index_dtype

    assert idx_const(2**31 - 1).arg == 2**31 - 1
    with pytest.raises(IndexOverflow, match="2147483648 does not fit"):
        idx_const(2**31)
    with index_dtype(dtypes.int64):
        assert idx_const(10**12).dtype == dtypes.int64 and idx_const(10**12).arg == 10**12
    with pytest.raises(ValueError, match="int32 or int64"), index_dtype(dtypes.int16):
        pass


def test_range_analysis_finds_addresses_that_overflow():
    from uopkit.codegen.lowerer import addresses_fit
    from uopkit.dtype import dtypes
    from uopkit.testing.programs import end, global_buf, load, loop, store
    from uopkit.uop.ops import Ops, UOp

    out, a = global_buf(0, dtypes.float32, 4), global_buf(1, dtypes.float32, 4)
    i = loop(0, 4)
    fits = UOp(Ops.SINK, dtypes.void, (end(store(out, i, load(a, i * 2**28)), i),))
    overflows = UOp(Ops.SINK, dtypes.void, (end(store(out, i, load(a, i * 2**30)), i),))
    # an address computed from loaded data (a gather) is not judged: its range is the dtype's anyway
    gather = UOp(Ops.SINK, dtypes.void, (end(store(out, i, load(a, load(a, i).cast(dtypes.int32) * 7)), i),))
    assert addresses_fit(fits) and addresses_fit(gather)
    assert not addresses_fit(overflows)


def test_real_buffer_past_int32():
    """A sum and an in-place x + 1 on a real 65536 x 32776 uint8 tensor (2.1 GiB): loads and stores past 2**31 bytes
    (one buffer: the in-place add writes where it reads, which halves the test's first-touch page faults)."""
    import os

    import pytest

    from uopkit import dtypes

    free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if free < 6 * 2**30:
        pytest.skip(f"needs 6 GiB of free memory for a 2.1 GiB buffer, {free / 2**30:.1f} GiB free")
    x = Tensor.full((65536, 32776), 7, dtype=dtypes.uint8).contiguous().realize()
    # a sum over the whole buffer (it read 0 elements with a wrapped loop bound)
    assert x.cast(dtypes.int64).sum().item() == 65536 * 32776 * 7
    buffer = x._buffer()
    x.add_(1).realize()
    assert x._buffer() is buffer, "the in-place add was meant to store into the same 2.1 GiB buffer"
    assert x[-1, -3:].tolist() == [8, 8, 8]
    assert x[0, :2].tolist() == [8, 8] and x[40000, 12345].item() == 8
    assert x.cast(dtypes.int64).sum().item() == 65536 * 32776 * 8


def test_sum_over_padding_past_int32():
    # the padding adds zeros: the sum runs over the padded tensor's own elements, not 10**12 of them
    assert Tensor.ones(2).pad(((10**12, 0),)).sum().item() == 2.0
    np.testing.assert_array_equal(Tensor.ones(2, 3).pad(((10**10, 1), (0, 0))).sum(0).numpy(), [2, 2, 2])
    # padding of an axis that is kept stays
    np.testing.assert_array_equal(Tensor.ones(2, 3).pad(((1, 1), (2, 0))).sum(0).numpy(), [0, 0, 2, 2, 2])
    # a loop over 2**31 + 2 elements (no shortcut: the padding is multiplied before the sum)
    assert (Tensor.ones(2).pad(((2**31, 0),)) * 2).sum().item() == 4.0


def test_cpu_softmax_computes_exp_once_and_reads_it_back():
    from uopkit.uop.ops import Ops

    x = np.random.default_rng(3).standard_normal((64, 200)).astype(np.float32) * 30
    x[1, 5], x[2, :] = np.inf, -np.inf
    x[3, 7], x[4, :] = np.nan, -200.0
    t = Tensor(x)
    prog = get_program(_item(t.softmax(-1)).ast, Device["CPU"].renderer)
    uops = list(prog.uops)
    # the exp's bit tricks (3 BITCASTs: 2**n from the exponent bits) appear once, in the sum loop, which stores each
    # exp into the output (and stays a SIMD sum loop); the output loop reads it back and scales it
    assert sum(u.op is Ops.BITCAST for u in uops) == 3
    sum_loop = next(i for i, u in enumerate(uops) if u.op is Ops.RANGE and u.arg[1] == "sum")
    out_loads = [
        i
        for i, u in enumerate(uops)
        if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL and u.src[0].src[0].arg == 0
    ]
    assert len(out_loads) == 1 and out_loads[0] > sum_loop
    assert "#pragma omp simd reduction(+:" in prog.src
    with np.errstate(invalid="ignore"):
        # (x - max rounded to float32 as the kernel does: exp(-40) moves 3e-6 relative per float32 ulp of its input)
        e = np.exp((x - x.max(axis=1, keepdims=True)).astype(np.float64))
        ref = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(t.softmax(-1).numpy(), ref, rtol=2e-6, atol=1e-30)
    # a kernel that reads the buffer it writes (here made by hand: its input is its output) computes exp twice:
    # storing early could overwrite elements it has yet to read
    prog_ast = _item(t.softmax(-1)).ast
    (inp,) = [u for u in prog_ast.toposort() if u.op is Ops.DEFINE_GLOBAL and u.arg == 1]
    (out,) = [u for u in prog_ast.toposort() if u.op is Ops.DEFINE_GLOBAL and u.arg == 0]
    ast = prog_ast.substitute({inp: out})
    in_place = list(get_program(ast, Device["CPU"].renderer).uops)
    assert sum(u.op is Ops.BITCAST for u in in_place) == 6


def test_padded_reads_are_one_gated_load():
    # a view padded twice is read by one gated load: no where(c, ., 0) per padding level around it, no where with a
    # constant condition
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    t = Tensor(x).pad(((0, 0), (0, 0), (1, 1), (2, 2))).pad(((0, 0), (0, 0), (1, 0), (0, 3))) * 2
    src = get_program(_item(t.contiguous()).ast, Device["CPU"].renderer, opts=[]).src
    assert "(1?" not in src and "(0?" not in src
    assert src.count("?") == 1
    want = np.pad(np.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2))), ((0, 0), (0, 0), (1, 0), (0, 3))) * 2
    np.testing.assert_allclose(t.numpy(), want)


def _run_cpu(t, opts):
    from uopkit.engine.realize import _buffer_for

    dev = Device["CPU"]
    item = _item(t)
    spec = get_program(item.ast, dev.renderer, opts)
    prg = dev.runtime(spec.name, dev.compiler.compile_cached(spec.src))
    bufs = [_buffer_for(b) for b in item.bufs]
    prg(*[b.opaque for b in bufs], global_size=spec.global_size, local_size=spec.local_size)
    return spec.src, bufs[0].numpy().reshape(t.shape)


def test_vector_comparisons_give_masks_that_select_lanes():
    from uopkit.codegen.opt import Opt, OptOps

    x = np.array([[-1.5, 0.0, 2.0, np.nan, -0.0, 3.5, -2.0, np.inf]] * 4, dtype=np.float32)
    xt = Tensor(x)
    # a mask selects (with NaN: 0 < NaN is false), a mask's lanes are C's 1 and 0 where read one by one (the cast),
    # and a uniform 0 picked by a mask
    t = (xt > 0).where(xt, 0.0) + (xt > 0).cast(dtypes.float32) * 10 + (xt != xt).where(100.0, 0.0)
    src, got = _run_cpu(t, [Opt(OptOps.UPCAST, 1, 8)])
    assert "bool8" in src and "_Bool" not in src.split("{", 1)[1].replace("(_Bool", "")
    want = np.where(x > 0, x, 0) + (x > 0) * 10 + np.where(x != x, 100, 0)
    np.testing.assert_array_equal(got, want.astype(np.float32))
    # 4-byte integer lanes too
    i = np.arange(-8, 8, dtype=np.int32).reshape(2, 8)
    it = Tensor(i)
    src, got = _run_cpu((it < 3).where(it, -it), [Opt(OptOps.UPCAST, 1, 8)])
    assert "bool8" in src
    np.testing.assert_array_equal(got, np.where(i < 3, i, -i))
    # 8-byte lanes give masks of 8-byte lanes (float64 and int64), combined and selecting whole vectors
    d = Tensor(x.astype(np.float64))
    src, got = _run_cpu(((d > 0) | (d < -1.8)).where(d, 0.0), [Opt(OptOps.UPCAST, 1, 4)])
    assert "typedef long long bool4_64" in src and "_Bool" not in src.split("{", 1)[1].replace("(_Bool", "")
    np.testing.assert_array_equal(got, np.where((x > 0) | (x < -1.8), x, 0).astype(np.float64))
    q = Tensor(i.astype(np.int64))
    src, got = _run_cpu((q < 3).where(q, -q), [Opt(OptOps.UPCAST, 1, 8)])
    assert "bool8_64" in src
    np.testing.assert_array_equal(got, np.where(i < 3, i, -i).astype(np.int64))
    # a mask of another width than the values selected (float32 lanes choosing float64 values) is read lane by lane
    src, got = _run_cpu((xt > 0).where(d, 1.0), [Opt(OptOps.UPCAST, 1, 4)])
    assert "bool4_64" not in src and "[3]!=0)" in src
    np.testing.assert_array_equal(got, np.where(x > 0, x, 1).astype(np.float64))


def _float32_around_every_half() -> np.ndarray:
    # every half's value, the midpoints to the next half (ties round to even) and the floats just either side of
    # them, past the largest half (65504, 65520 rounds to inf), float subnormals, infs and NaN, both signs
    halves = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32)
    with np.errstate(over="ignore"):
        nxt = np.nextafter(halves.astype(np.float16), np.float16(np.inf)).astype(np.float32)
    mids = (halves + nxt) / 2
    edges = [halves, mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf))]
    extra = np.array([65504, 65519.996, 65520, 1e6, np.inf, np.nan, 1e-45, 1e-40, 2.0**-25, 2.0**-24], np.float32)
    x = np.concatenate([*edges, extra])
    x = np.concatenate([x, -x])
    return np.concatenate([x, np.zeros(-len(x) % 16, np.float32)]).reshape(-1, 16)


def test_half_floats_convert_exactly_as_their_bits_scalar_and_on_vectors():
    # the CPU keeps halves as their bits and converts them with integer code (uopkit_cpu.renderer.HALF_CONVERSIONS),
    # one lane at a time and on whole vectors (an UPCAST): every half to float32 and floats around every rounding
    # boundary to half give numpy's bits (a NaN: a NaN)
    from uopkit.codegen.opt import Opt, OptOps

    halves = np.arange(65536, dtype=np.uint16).view(np.float16).reshape(-1, 16)
    want = halves.astype(np.float32)
    floats = _float32_around_every_half()
    with np.errstate(over="ignore"):
        want_h = floats.astype(np.float16)
    # (vectors as wide as the host's registers: 16 floats with AVX-512, 8 with AVX2)
    width = Device["CPU"].renderer.caps.max_vector_width
    for opts in ([], [Opt(OptOps.UPCAST, 1, width)]):
        src, got = _run_cpu(Tensor(halves).cast(dtypes.float32), opts)
        # (_Float16 only in the double -> half helper)
        assert (f"uk_h2f_{width}(" in src) == bool(opts) and src.count("_Float16") == 2
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        src, got_h = _run_cpu(Tensor(floats).cast(dtypes.float16), opts)
        assert (f"uk_f2h_{width}(" in src) == bool(opts)
        nan = np.isnan(want_h)
        np.testing.assert_array_equal(np.isnan(got_h), nan)
        np.testing.assert_array_equal(got_h[~nan].view(np.uint16), want_h[~nan].view(np.uint16))
    # the other casts go through float32 exactly: float64 as torch's, rounded to float32 first (numpy rounds once:
    # 1 + 2**-11 + 2**-40 is 1.0009766 there, 1.0 in torch; 65519.99999 is 65504 there, inf in torch), integers and
    # bools
    d = np.array([1 + 2.0**-11 + 2.0**-40, 65519.99999, -1e-8, 0.1], np.float64)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(Tensor(d).cast(dtypes.float16).numpy(), d.astype(np.float32).astype(np.float16))
    i = np.array([0, -1, 2049, 65504, 65519, 65520, 70000, -(2**31)], np.int32)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(Tensor(i).cast(dtypes.float16).numpy(), i.astype(np.float16))
    h = np.array([-0.0, 0.0, np.nan, 1.5, -2.5, 65504, np.inf], np.float16)
    assert Tensor(h).cast(dtypes.bool).tolist() == [False, False, True, True, True, True, True]
    np.testing.assert_array_equal(Tensor(h[3:6]).cast(dtypes.int32).numpy(), h[3:6].astype(np.int32))


def test_a_vectorized_reduce_read_at_two_places_shares_its_vector_lane():
    # a matmul whose two halves meet in the next product (an LSTM's gates, or their gradient): the kernel lowers the
    # fused matmul's reduce twice, and each lowering made a vector lane of its own ("one vector lane per kernel")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((8, 4)).astype(np.float32)
    g = Tensor(x) @ Tensor(w).T
    got = ((g[:, :4] * g[:, 4:]).T @ Tensor(x)).numpy()
    ref = x @ w.T
    np.testing.assert_allclose(got, (ref[:, :4] * ref[:, 4:]).T @ x, rtol=1e-5, atol=1e-5)


def test_combined_comparisons_stay_masks_on_vectors():
    # ReLU's gradient x <= 0 is (x < 0) | (x == 0): read after a matmul's vector tile, the two masks are combined as
    # vectors, and WHERE selects by the result (each lane took a scalar compare, an or and a select before: 6x slower)
    from uopkit.codegen.opt import Opt, OptOps

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 32)).astype(np.float32)
    x[0, :4] = [0.0, -0.0, np.nan, -np.inf]
    g, w = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((4, 32)).astype(np.float32)
    tx, y = Tensor(x), Tensor(g) @ Tensor(w)
    outs = {
        "or": ((tx <= 0).where(0.0, y), np.where(x <= 0, 0.0, g @ w)),
        "and": (((tx > -1) & (tx < 1)).where(y, 2.0), np.where((x > -1) & (x < 1), g @ w, 2.0)),
    }
    for name, (t, want) in outs.items():
        item = _item(t)
        renderer = Device["CPU"].renderer
        width = renderer.caps.max_vector_width
        prg = get_program(item.ast, renderer, opts=[Opt(OptOps.UPCAST, 1, width), Opt(OptOps.UPCAST, 0, 2)])
        combined = [u for u in prg.uops if u.op in (Ops.OR, Ops.AND)]
        assert combined and all(u.dtype.count == width for u in combined), name
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_loads_inside_their_buffer_under_a_pad_read_without_a_gate():
    # (x - mean) * scale, ReLU, padded for a convolution: the activation's address leaves its buffer in the padding and
    # keeps its gate; the per-channel values' addresses stay inside everywhere: read unconditionally, a select gives
    # the padding's 0 (each was a conditional load, and gcc left the loop scalar: 3.5x slower)
    rng = np.random.default_rng(0)
    x, m, s = (rng.standard_normal(shape).astype(np.float32) for shape in ((2, 3, 4, 4), (3,), (3,)))
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    per_channel = (1, 3, 1, 1)
    act = ((Tensor(x) - Tensor(m).reshape(per_channel)) * Tensor(s).reshape(per_channel)).relu()
    padded = create_schedule(kernelize_tensors([act.conv2d(Tensor(w), padding=1)]))[0]
    assert padded.ast.src[0].src[1].shape == (2, 3, 6, 6)
    prg = get_program(padded.ast, Device["CPU"].renderer)
    gated = [u for u in prg.uops if u.op is Ops.INDEX and len(u.src) > 2]
    assert [u.src[0].arg for u in gated] == [1], gated
    import torch

    ta = torch.relu(
        (torch.from_numpy(x) - torch.from_numpy(m).reshape(per_channel)) * torch.from_numpy(s).reshape(per_channel)
    )
    want = torch.nn.functional.conv2d(ta, torch.from_numpy(w), padding=1).numpy()
    np.testing.assert_allclose(act.conv2d(Tensor(w), padding=1).numpy(), want, rtol=1e-5, atol=1e-5)


def test_linearizing_many_reduce_loops_looks_at_each_op_a_bounded_number_of_times(monkeypatch):
    # one kernel of many independent sums (a metric summed over many batches): placing each loop rescanned every
    # pending op, so the work grew with loops x ops. Counted as the linearizer's lookups of an op's loops, per op
    from uopkit.codegen import linearizer
    from uopkit.schedule import grouper

    monkeypatch.setattr(grouper, "MAX_KERNEL_REDUCES", 1 << 20)
    lookups = [0]

    class CountingLoops(dict):
        def __getitem__(self, u):
            lookups[0] += 1
            return super().__getitem__(u)

    open_ranges = linearizer._open_ranges
    monkeypatch.setattr(linearizer, "_open_ranges", lambda topo: CountingLoops(open_ranges(topo)))

    def lookups_per_op(n: int) -> float:
        xs = [Tensor.full((4, 8), float(i)).contiguous().realize() for i in range(n)]
        total = Tensor(0.0)
        for x in xs:
            total = total + (x.max(axis=1) * 2).sum()
        item = _item(total)
        lookups[0] = 0
        uops = get_program(item.ast, Device["CPU"].renderer, opts=[]).uops
        assert sum(u.op is Ops.RANGE for u in uops) >= 2 * n
        return lookups[0] / len(uops)

    few, many = lookups_per_op(12), lookups_per_op(48)
    assert many < 1.3 * few, (few, many)


def _linear(t):
    return get_program(_item(t).ast, Device["CPU"].renderer).uops


def test_a_max_over_the_leading_axis_runs_on_vectors_as_a_sum_does():
    # amax(0): the optimizer upcasts the output columns into vectors, as for sum(0). The CPU renderer has no vector
    # MAX: each lane's max was one scalar compare (a 256-column tile, unrolled by 4: 1,300 lines of C, 8 s in gcc and
    # 20x slower than sum(0)); a MAX of vectors is a vector compare and select
    x = Tensor(np.zeros((256, 256), np.float32)).realize()
    maxed, summed = _linear(x.amax(0)), _linear(x.sum(0))
    assert not any(u.op is Ops.MAX and u.dtype.count == 1 and dtypes.is_float(u.dtype) for u in maxed)
    assert any(u.op is Ops.WHERE and u.dtype.count > 1 for u in maxed)
    assert len(maxed) < 2 * len(summed), (len(maxed), len(summed))


def test_a_max_of_vectors_keeps_nans_and_signed_zeros_as_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((67, 300)).astype(np.float32)
    x[3, 5] = x[10, 7] = np.nan
    x[:, 9], x[5, 9] = -0.0, 0.0
    x[0, 11], x[2, 12] = np.inf, -np.inf
    y = rng.standard_normal((67, 300)).astype(np.float32)
    y[4, 4] = y[3, 5] = np.nan
    # (relu is compared as values only: relu(-0.0) is 0.0 here and -0.0 in torch, with or without vectors)
    np.testing.assert_array_equal(Tensor(x).relu().numpy(), torch.relu(torch.from_numpy(x)).numpy())
    pairs = [
        (Tensor(x).amax(0), torch.from_numpy(x).amax(0)),
        (Tensor(x).maximum(Tensor(y)), torch.maximum(torch.from_numpy(x), torch.from_numpy(y))),
    ]
    ints = rng.integers(-100, 100, (67, 300)).astype(np.int32)
    pairs.append((Tensor(ints).amax(0), torch.from_numpy(ints).amax(0)))
    for got, want in pairs:
        got, want = got.numpy(), want.numpy()
        np.testing.assert_array_equal(got, want)
        finite = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(want[finite]))


def _above_diagonal(n):
    return Tensor.arange(n).reshape(1, n) > Tensor.arange(n).reshape(n, 1)


CAUSAL_MASKS = {
    # a comparison of the lanes' indices, as F.scaled_dot_product_attention(is_causal=True) builds it
    "compare": lambda s, n: s.masked_fill(_above_diagonal(n), float("-inf")),
    # triu(1) of ones: a select of 1.0 and 0.0 by that comparison, cast back to bool
    "triu": lambda s, n: s.masked_fill(Tensor.ones(n, n).triu(1).bool(), float("-inf")),
}


@pytest.mark.parametrize("mask", CAUSAL_MASKS)
def test_a_causal_mask_on_a_matmul_tile_selects_by_vector_masks(mask):
    # a condition on the register tile's own indices (attention's causal mask) left each lane's index lane by lane:
    # every lane of the tile was a scalar compare and a scalar select. The attention scores of a small transformer's
    # training step were 51 KB of C and 0.5 s of gcc CPU (87 KB for the triu form); as vector compares 19 KB, 0.12 s
    torch = pytest.importorskip("torch")
    n = 256
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, 64)).astype(np.float32), rng.standard_normal((64, n)).astype(np.float32)
    got = CAUSAL_MASKS[mask](Tensor(a) @ Tensor(b), n)
    src = get_program(_item(got).ast, Device["CPU"].renderer).src
    assert "?" not in src.split("void r_", 1)[1]
    want = (torch.from_numpy(a) @ torch.from_numpy(b)).masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf"))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def _view(op, u, arg):
    return UOp(op, u.dtype, (u,), arg)


def _full(value, shape, dtype=dtypes.float):
    return _view(Ops.EXPAND, _view(Ops.RESHAPE, UOp.const(dtype, value), (1,) * len(shape)), shape)


def _rows_max_gathered_kernel():
    # x - x.max(dim=1, keepdim=True)[0] for x = cat of three row windows of one buffer, each scaled by a (6,) weight
    # (a ghost batch norm's chunks, then entmax): the max's index is an argmax over the rows' pieces, read back from
    # its accumulator after the loop ends, and the value at it is gathered from each piece, whose loads are gated by
    # the piece's rows
    f32, i32 = dtypes.float, dtypes.int
    src = UOp(Ops.DEFINE_GLOBAL, f32.ptr(60), (), 1)
    weight = _view(Ops.RESHAPE, UOp(Ops.LOAD, f32, (UOp(Ops.DEFINE_GLOBAL, f32.ptr(6), (), 2),)), (1, 6))
    x, start = None, 0
    for k, rows in enumerate((4, 4, 2)):
        window = UOp.variable("window1" if k == 0 else f"window1_{k}", 0, 60 - 6 * rows)
        piece = _view(Ops.RESHAPE, UOp(Ops.LOAD, f32, (src, window), 6 * rows), (rows, 6))
        piece = _view(Ops.RESHAPE, piece * _view(Ops.EXPAND, weight, (rows, 6)), (rows, 6))
        pad = ((start, 10 - start - rows), (0, 0))
        mask = _view(Ops.PAD, _full(True, (rows, 6), dtypes.bool), pad)
        piece = mask.where(_view(Ops.PAD, piece, pad), _full(-0.0, (10, 6)))
        x, start = piece if x is None else x + piece, start + rows
    row_max = UOp(Ops.LOAD, f32, (UOp(Ops.DEFINE_GLOBAL, f32.ptr(10), (), 3),))
    hit = UOp(Ops.CMPEQ, dtypes.bool, (x, _view(Ops.EXPAND, _view(Ops.RESHAPE, row_max, (10, 1)), (10, 6))))
    iota = _view(Ops.EXPAND, _view(Ops.RESHAPE, UOp(Ops.IOTA, i32, (), 6), (1, 6)), (10, 6))
    countdown = hit.where(_full(6, (10, 6), i32) - iota, _full(0, (10, 6), i32))
    index = _full(6, (10, 1), i32) - UOp(Ops.REDUCE_AXIS, i32, (countdown,), (Ops.MAX, (1,)))
    first = UOp(Ops.CMPEQ, dtypes.bool, (_view(Ops.EXPAND, index, (10, 6)), iota))
    picked = UOp(Ops.REDUCE_AXIS, f32, (first.where(x, _full(-0.0, (10, 6))),), (Ops.ADD, (1,)))
    out = _view(Ops.RESHAPE, UOp(Ops.DEFINE_GLOBAL, f32.ptr(60), (), 0), (10, 6))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, x - _view(Ops.EXPAND, picked, (10, 6)))),))


def test_gather_at_an_argmax_over_gated_pieces_closes_each_loop_once():
    # simplifying a gated load's address knowing its gate holds (the piece's rows) must not rebuild what the address
    # reads from a finished loop (the argmax's accumulator): the copy was a second END of the argmax's loop, and no
    # order of the code could place it (LinearizeError from a ghost-batch-norm TabNet's backward pass)
    uops = get_program(_rows_max_gathered_kernel(), Device["CPU"].renderer).uops
    ended = [u.src[1] for u in uops if u.op is Ops.END]
    assert len(ended) == len(set(ended)) == sum(u.op is Ops.RANGE for u in uops)


def test_renaming_a_kernel_keeps_its_code_without_rendering_again(monkeypatch):
    # kernels of one name and different code get distinct names (one library holds them): the renamed program is what
    # rendering under the new name gives, chunked parallel kernel included (its name is in three places), and the
    # renderer doesn't walk the program a second time for it
    from uopkit.codegen.opt import Opt, OptOps
    from uopkit.engine.kernel_names import unique_name
    from uopkit.renderer.cstyle import CStyleRenderer

    dev = Device["CPU"]
    item = _item(Tensor.ones(64, 64).contiguous() * 3)
    calls = []
    original = CStyleRenderer.render

    def counted(self, *args):
        calls.append(args)
        return original(self, *args)

    for opts in ([], [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.THREAD, 0, 2)]):
        spec = get_program(item.ast, dev.renderer, opts=opts, name="E_renamed_probe")
        calls.clear()
        monkeypatch.setattr(CStyleRenderer, "render", counted)
        renamed = dev.renderer.rename(spec.src, "E_renamed_probe_2", list(spec.uops))
        assert calls == []
        monkeypatch.undo()
        assert renamed == dev.renderer.render("E_renamed_probe_2", list(spec.uops)) != spec.src
    # through `unique_name`: the first kernel of a name keeps it, another program under that name gets a new one
    first = get_program(item.ast, dev.renderer, opts=[], name="E_unique_probe")
    other = get_program(_item(Tensor.ones(64, 64).contiguous() + 5).ast, dev.renderer, opts=[], name="E_unique_probe")
    assert unique_name(first, dev).src == first.src
    renamed = unique_name(other, dev)
    assert renamed.name == "E_unique_proben1"
    assert renamed.src == dev.renderer.render("E_unique_proben1", list(other.uops))
    # a source the renderer didn't just render is rendered again: still the right program
    assert dev.renderer.rename(first.src, "E_unique_probe_3", list(first.uops)) == dev.renderer.render(
        "E_unique_probe_3", list(first.uops)
    )


def test_passes_whose_rules_cannot_fire_are_skipped(monkeypatch):
    # a pass whose rules' ops (and their sources' ops) are not in the kernel is not walked: same program
    import uopkit.codegen as codegen
    from uopkit.codegen import may_fire
    from uopkit.codegen.transcendental import exp_rules

    ops = {Ops.MUL, Ops.CONST, Ops.LOAD}
    assert not may_fire(exp_rules(), ops) and may_fire(exp_rules(), ops | {Ops.EXP2})
    # a rule needs its source patterns' ops too: EXP2 of no MUL can't be e**x
    assert not may_fire(exp_rules(), {Ops.EXP2, Ops.LOAD})
    item = _item(Tensor.ones(8, 8).contiguous() * 3)
    names = []
    original = codegen.graph_rewrite
    monkeypatch.setattr(codegen, "graph_rewrite", lambda *a, **k: names.append(k.get("name")) or original(*a, **k))
    src = get_program(item.ast, Device["CPU"].renderer, opts=[]).src
    assert "exp" not in names and "sum of padding" not in names and "symbolic" in names
    monkeypatch.undo()
    assert src == get_program(item.ast, Device["CPU"].renderer, opts=[]).src
    names.clear()
    monkeypatch.setattr(codegen, "graph_rewrite", lambda *a, **k: names.append(k.get("name")) or original(*a, **k))
    get_program(_item(Tensor.ones(8, 8).contiguous().exp()).ast, Device["CPU"].renderer, opts=[])
    assert "exp" in names


def _half_padded(x, top):
    # a (2, 4) view of x in the top or bottom half of a (4, 4) of zeros
    return x.reshape(2, 4).pad(((2, 0), (0, 0)) if top else ((0, 2), (0, 0)))


def test_buffers_the_code_never_reads_are_not_parameters():
    # the top half of `b`'s padding is zeros: reading rows 0..1 of it, the kernel's code loads nothing from `b`
    # (the gated load folds away), and `b` is not one of the program's parameters; a kernel differing only in how
    # many such buffers it had is the same program, and the launches (eager, a replayed schedule, TinyJit) pass the
    # buffers the code uses in their places
    from uopkit.jit import TinyJit

    rng = np.random.default_rng(0)
    a_np, b_np, c_np = (rng.standard_normal(8).astype(np.float32) for _ in range(3))

    def one_dead(a, b):
        return Tensor.maximum(_half_padded(b, True), _half_padded(a, False))[:2].contiguous()

    def two_dead(a, b, c):
        return Tensor.maximum(_half_padded(b, True) + _half_padded(c, True), _half_padded(a, False))[:2].contiguous()

    a, b, c = (Tensor(x).realize() for x in (a_np, b_np, c_np))
    items = [_item(one_dead(a, b)), _item(two_dead(a, b, c))]
    specs = [get_program(item.ast, Device["CPU"].renderer) for item in items]
    assert items[0].ast is not items[1].ast and [len(item.bufs) for item in items] == [3, 4]
    # (output, then `a`: the dead buffers were inputs before it)
    assert [spec.params for spec in specs] == [(0, 2), (0, 3)]
    assert specs[0].src == specs[1].src and "data2" not in specs[0].src
    jitted = TinyJit(lambda a, b, c: two_dead(a, b, c).realize())
    for _ in range(3):
        a_np = rng.standard_normal(8).astype(np.float32)
        expected = np.maximum(a_np, 0).reshape(2, 4)
        args = [Tensor(x).realize() for x in (a_np, b_np, c_np)]
        np.testing.assert_array_equal(one_dead(*args[:2]).numpy(), expected)
        np.testing.assert_array_equal(two_dead(*args).numpy(), expected)
        np.testing.assert_array_equal(jitted(*args).numpy(), expected)
