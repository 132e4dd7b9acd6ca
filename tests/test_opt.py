"""Kernel opts: every random, valid combination must compute exactly what the unoptimized kernel computes."""

import math
import random
from typing import Any

import numpy as np
import pytest

from uopkit import Device, Tensor
from uopkit.codegen import get_program
from uopkit.codegen.opt import Opt, OptError, OptOps, apply_opt, apply_opts, initial_plan
from uopkit.codegen.opt.search import beam_search, candidate_actions, load_cached
from uopkit.engine.realize import _buffer_for
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.testing.optfuzz import kernel_form, random_opts
from uopkit.uop.ops import Ops


def _kernels():
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal((12, 20)).astype(np.float32))
    b = Tensor(rng.standard_normal((20, 8)).astype(np.float32))
    c = Tensor(rng.standard_normal((6, 10, 4)).astype(np.float32))
    i = Tensor(rng.integers(-50, 50, (9, 16)).astype(np.int32))
    return {
        "matmul": a @ b,
        "sum_axis0": c.sum(axis=0),
        "sum_axis12": c.sum(axis=(1, 2)),
        "max_axis2": c.max(axis=2),
        "elementwise_pad": (c.pad(((1, 1), (0, 2), (1, 0))) * 2 + 1).relu(),
        "reduce_of_pad": c.pad(((0, 0), (2, 1), (0, 0))).sum(axis=1),
        "int_sum": i.sum(axis=1),
        "permuted": (c.permute(2, 0, 1) + 1).exp2(),
        # one kernel with two row reduces (max, sum) and the output loop
        "softmax_rows": (c * 3).softmax(-1),
        # the right operand read from its panel copy (schedule/packing.py)
        "panel_matmul": Tensor(rng.standard_normal((64, 256)).astype(np.float32))
        @ Tensor(rng.standard_normal((256, 256)).astype(np.float32)),
        # windows over a stored padded input
        "conv": Tensor(rng.standard_normal((2, 3, 9, 9)).astype(np.float32)).conv2d(
            Tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32)), padding=1
        ),
    }


def _run(item, opts, ast=None):
    dev = Device["CPU"]
    spec = get_program(item.ast if ast is None else ast, dev.renderer, opts)
    prg = dev.runtime(spec.name, dev.compiler.compile_cached(spec.src))
    bufs = [_buffer_for(b) for b in item.bufs]
    prg(*[b.opaque for b in bufs], global_size=spec.global_size, local_size=spec.local_size)
    return bufs[0].numpy().copy()


@pytest.mark.parametrize("name", list(_kernels()))
def test_random_opts_match_unoptimized(name):
    t = _kernels()[name]
    schedule = create_schedule(kernelize_tensors([t]))
    item = schedule[-1]
    for earlier in schedule[:-1]:
        _run(earlier, [])
    expected = _run(item, [])
    renderer = Device["CPU"].renderer
    rng = random.Random(sum(map(ord, name)))
    for _ in range(6):
        # (drawn on the kernel's merged axes, as the heuristic's are; the expected values are of its own axes)
        opts = random_opts(item.ast, renderer, rng, rng.randint(1, 4))
        got = _run(item, opts, kernel_form(item.ast))
        # (a 256-long reduce reassociated by unrolls and vector lanes differs in its last bits)
        atol = 1e-4 if name == "panel_matmul" else 1e-5
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=atol, err_msg=f"{name} with {opts}")


def test_invalid_opts_raise_clear_errors():
    t = Tensor.ones(12, 20).contiguous().sum(axis=1)
    item = create_schedule(kernelize_tensors([t]))[-1]
    plan = initial_plan(item.ast)
    renderer = Device["CPU"].renderer
    with pytest.raises(OptError, match="divide"):
        apply_opt(plan, Opt(OptOps.UPCAST, 0, 7), renderer)
    with pytest.raises(OptError, match="out of range"):
        apply_opt(plan, Opt(OptOps.UPCAST, 9, 2), renderer)
    with pytest.raises(OptError, match="reduce axes"):
        apply_opt(plan, Opt(OptOps.UNROLL, 0, 2), renderer)
    with pytest.raises(OptError, match="work-groups"):
        apply_opt(plan, Opt(OptOps.LOCAL, 0, 4), renderer)


def test_beam_search_caches_result(tmp_path, monkeypatch):
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    t = Tensor.ones(32, 64).contiguous().sum(axis=1)
    item = create_schedule(kernelize_tensors([t]))[-1]
    renderer = Device["CPU"].renderer
    calls = []

    def fake_timer(opts):
        # prefer more lanes, deterministically: the search must follow the timings it is given
        calls.append(opts)
        plan = initial_plan(item.ast)
        for o in opts:
            plan = apply_opt(plan, o, renderer)
        return 1.0 / plan.lanes()

    best = beam_search(item.ast, renderer, 2, timer=fake_timer)
    assert calls and best
    plan = initial_plan(item.ast)
    for o in best:
        plan = apply_opt(plan, o, renderer)
    assert plan.lanes() > 1
    n_calls = len(calls)
    from uopkit.codegen.opt.search import ast_key

    assert load_cached(ast_key(item.ast, renderer)) == best
    assert beam_search(item.ast, renderer, 2, timer=fake_timer) == best
    assert len(calls) == n_calls


def test_beam_final_pick_keeps_the_heuristic_unless_clearly_beaten():
    from uopkit.codegen.opt.search import MARGIN, final_pick

    heuristic = [Opt(OptOps.UPCAST, 0, 4)]
    other = (Opt(OptOps.UPCAST, 0, 8),)
    # the search saw `other` as faster, but timed again in turns it is within the margin: the heuristic stays
    times = {tuple(heuristic): 1.0, other: 1.0 / (1 + MARGIN / 2)}
    scored = {tuple(heuristic): 1.2, other: 0.9}
    rounds: list[tuple[Opt, ...]] = []

    def timer(opts):
        rounds.append(tuple(opts))
        return times[tuple(opts)]

    assert final_pick(scored, heuristic, timer) == tuple(heuristic)
    # both were timed again, alternately
    assert rounds[:2] in ([tuple(heuristic), other], [other, tuple(heuristic)]) and len(rounds) >= 4
    times[other] = 1.0 / (1 + 3 * MARGIN)
    assert final_pick(scored, heuristic, timer) == other


def test_beam_env_runs_real_search(tmp_path, monkeypatch):
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    from uopkit.helpers import Context

    x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8))
    with Context(BEAM=1):
        from uopkit.engine.realize import method_cache

        method_cache.clear()
        out = (x * 3).sum(axis=0).numpy()
    np.testing.assert_allclose(out, np.arange(64, dtype=np.float32).reshape(8, 8).sum(0) * 3)
    assert list((tmp_path / "beam").glob("*.entry"))


def _emulator_item(t):
    item = create_schedule(kernelize_tensors([t]))[-1]
    return item, Device["EMULATOR"]


def _fast_program(dev, monkeypatch, fast_name):
    """Programs named `fast_name` report a tiny time (they still run), every other one 1.0."""
    real = dev.runtime

    def runtime(name, lib):
        prg = real(name, lib)

        def timed(*args, **kwargs):
            prg(*args, **kwargs)
            return 1e-9 if name == fast_name else 1.0

        return timed

    monkeypatch.setattr(dev, "runtime", runtime)


@pytest.mark.parametrize("corrupt", [False, True])
def test_beam_drops_a_candidate_with_wrong_values(tmp_path, monkeypatch, capsys, corrupt):
    from uopkit.codegen.opt import apply_opts
    from uopkit.codegen.opt.heuristic import hand_coded_opts
    from uopkit.codegen.opt.search import ast_key
    from uopkit.helpers import Context

    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(0)
    item, dev = _emulator_item(Tensor(rng.standard_normal((8, 16)).astype(np.float32), device="EMULATOR").sum(axis=1))
    renderer = dev.renderer
    heuristic = hand_coded_opts(item.ast, renderer)
    target = [*heuristic, candidate_actions(apply_opts(item.ast, heuristic, renderer), renderer)[0]]
    store = item.ast.src[0]
    # the same kernel storing value + 1: what a miscompiled candidate would compute
    bad_ast = item.ast.replace(src=(store.replace(src=(store.src[0], store.src[1] + 1.0)),))

    def build(ast, renderer, opts):
        if opts == target:
            return get_program(bad_ast if corrupt else ast, renderer, opts, name="target")
        return get_program(ast, renderer, opts)

    # the target is by far the fastest: the search picks it unless it is caught
    _fast_program(dev, monkeypatch, "target")
    with Context(DEBUG=2):
        best = beam_search(item.ast, renderer, 2, device="EMULATOR", build=build)
    err = capsys.readouterr().err
    if not corrupt:
        assert best == target and "dropped" not in err
        return
    assert best != target and load_cached(ast_key(item.ast, renderer)) == best
    assert f"BEAM: dropped {target}: data0 differs from the unoptimized kernel's by" in err
    assert err.count("BEAM: dropped") == 1


def test_beam_candidates_of_an_in_place_kernel_see_the_same_inputs():
    """x[2:6] = x[2:6] * 2 + 1 reads and writes data0: each candidate starts from the same contents."""
    from uopkit.codegen.opt.search import Timer

    x = Tensor(np.zeros((8, 16), np.float32), device="EMULATOR").realize()[2:6]
    item, dev = _emulator_item(x.assign(x * 2 + 1))
    assert len(item.bufs) == 1, "one buffer, read and written"
    timer = Timer(item.ast, "EMULATOR", get_program)
    timer.reference()
    before = np.frombuffer(timer.initial[0], np.float32).reshape(8, 16)
    expected = before.copy()
    # the window's start (row 2) is the kernel's launch value: the search runs it at its least start, row 0
    assert dict(item.var_vals) == {"window0": 32}
    expected[0:4] = before[0:4] * 2 + 1
    np.testing.assert_allclose(timer.expected[0].reshape(8, 16), expected)
    for opts in ([Opt(OptOps.UPCAST, 1, 4)], [Opt(OptOps.UPCAST, 0, 2)], [Opt(OptOps.UPCAST, 1, 8)]):
        assert timer(opts) < float("inf")
    assert not timer.rejected and not timer.failed
    # the search inputs are not trivial: no zeros, and different values
    assert np.all(before != 0) and len(np.unique(before)) > 100


def test_output_error_by_dtype():
    from uopkit.codegen.opt.verify import output_error, tolerance
    from uopkit.dtype import dtypes

    ref = np.array([1.0, -2.0, np.nan, np.inf, 0.0], np.float32)
    assert output_error(ref.copy(), ref) == 0.0
    assert 0 < output_error(ref + np.float32(1e-6), ref) < tolerance(dtypes.float32)
    moved_nan = np.array([1.0, np.nan, -2.0, np.inf, 0.0], np.float32)
    assert output_error(moved_nan, ref) == float("inf")
    assert output_error(np.array([1.0, -2.0, np.nan, -np.inf, 0.0], np.float32), ref) == float("inf")
    assert output_error(np.array([1.0, -1.0, np.nan, np.inf, 0.0], np.float32), ref) > tolerance(dtypes.float32)
    ints = np.arange(5, dtype=np.int32)
    assert output_error(ints + 0, ints) == 0.0 and output_error(ints + 1, ints) == float("inf")
    assert tolerance(dtypes.int32) == 0.0 and tolerance(dtypes.bool) == 0.0


@pytest.mark.parametrize("target, seeds", [("OPENCL", 1), ("CUDA", 1)])
def test_gpu_style_random_opts_on_the_emulator(target, seeds):
    """The random-opt fuzzer (uopkit.testing.optfuzz) on a GPU-style renderer: work-groups, local memory and, with
    CUDA's settings, tensor cores; the emulator also fails on local-memory races and out-of-bounds accesses. CI runs
    more seeds, there and on PoCL."""
    pytest.importorskip(f"uopkit_{target.lower()}")
    from uopkit.device import Device
    from uopkit.emulator import open_emulator
    from uopkit.testing.optfuzz import fuzz

    # a device of its own runs the programs, so the target's alignment rule for vector accesses is checked too
    name = f"EMULATOR:{50 + ['OPENCL', 'CUDA'].index(target)}"
    Device._opened[name] = dev = open_emulator(name, emulate=target)
    try:
        report = fuzz(name, 0, seeds, renderer=dev.renderer)
    finally:
        Device._opened.pop(name, None)
    assert not report.failures, "\n".join(report.failures)
    gpu_opts = {"LOCAL", "UPCAST", "UNROLL", "PADTO"} | ({"TC"} if target == "CUDA" else set())
    assert gpu_opts <= set(report.drawn) and {"GROUP", "GROUPTOP"} & set(report.drawn), report.drawn


def _emulated(target):
    pytest.importorskip(f"uopkit_{target.lower()}")
    from uopkit.emulator import open_emulator

    return open_emulator("EMULATOR", emulate=target).renderer


def test_group_with_local_output_axis_on_emulated_opencl():
    """GROUPTOP on the reduce with LOCAL on the output (issue 10): the threads of each LOCAL position combine their
    own partial sums (they shared one local row before: a race the emulator reports)."""
    from uopkit.uop.ops import Ops

    renderer = _emulated("OPENCL")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 64)).astype(np.float32)
    item, dev = _emulator_item(Tensor(a, device="EMULATOR").realize().sum(axis=0))
    opts = [Opt(OptOps.GROUPTOP, 2, 16), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.UNROLL, 2, 8)]
    spec = get_program(item.ast, renderer, [*opts, Opt(OptOps.UPCAST, 1, 2)])
    (local,) = [u for u in spec.uops if u.op is Ops.DEFINE_LOCAL]
    # 4 LOCAL x 16 GROUP threads, 16 upcast lanes each
    assert local.dtype.size == 4 * 16 * 16 and spec.local_size == (4, 16, 1)
    prg = dev.runtime(spec.name, dev.compiler.compile_cached(spec.src))
    bufs = [_buffer_for(b) for b in item.bufs]
    prg(*[b.opaque for b in bufs], global_size=spec.global_size, local_size=spec.local_size)
    np.testing.assert_allclose(bufs[0].numpy(), a.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_a_grouped_sum_read_at_two_places_shares_its_work_group_on_emulated_opencl():
    # one sum stacked with itself is lowered twice: both lowerings split the reduce over the same GROUP threads (each
    # made work-group dimensions of its own before, more than apply_opt had checked)
    renderer = _emulated("OPENCL")
    x = np.random.default_rng(1).standard_normal((4, 6, 8)).astype(np.float32)
    t = Tensor(x, device="EMULATOR").realize()
    item, dev = _emulator_item(t.sum(1).flatten().stack(t.sum(1).flatten(), dim=-1))
    opts = [Opt(OptOps.GROUP, 2, 6), Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.PADTO, 1, 4)]
    spec = get_program(item.ast, renderer, opts)
    assert spec.local_size == (4, 6, 1)
    prg = dev.runtime(spec.name, dev.compiler.compile_cached(spec.src))
    bufs = [_buffer_for(b) for b in item.bufs]
    prg(*[b.opaque for b in bufs], global_size=spec.global_size, local_size=spec.local_size)
    expected = np.stack([x.sum(1).ravel()] * 2, -1)
    np.testing.assert_allclose(bufs[0].numpy().reshape(expected.shape), expected, rtol=1e-5, atol=1e-5)


def test_apply_opt_enforces_the_renderers_launch_limits():
    """Emulated generic OpenCL device: work-groups of at most 256 threads (256, 256, 64 per dimension), 32 KiB of
    local memory, 3 work-group dimensions."""
    renderer = _emulated("OPENCL")
    assert renderer.caps.local_max == (256, 256, 64) and renderer.caps.shared_max == 32768

    def plan_of(t):
        return initial_plan(create_schedule(kernelize_tensors([t]))[-1].ast)

    def apply(plan, *opts):
        for o in opts:
            plan = apply_opt(plan, o, renderer)
        return plan

    cols = plan_of(Tensor.ones(2048, 64).contiguous().sum(axis=0))
    with pytest.raises(OptError, match="work-group dimension 0 of 512 threads exceeds its limit 256"):
        apply(cols, Opt(OptOps.GROUPTOP, 2, 512))
    with pytest.raises(OptError, match=r"work-group of 512 threads exceeds 256 \(\[16, 32\]\)"):
        apply(cols, Opt(OptOps.LOCAL, 1, 16), Opt(OptOps.GROUP, 2, 32))
    # 256 threads x 32 float lanes fit 32 KiB exactly; 64 lanes don't
    fits = apply(cols, Opt(OptOps.GROUPTOP, 2, 256), Opt(OptOps.UPCAST, 1, 32))
    with pytest.raises(OptError, match="65536 bytes of local memory exceed the renderer's 32768"):
        apply(fits, Opt(OptOps.UPCAST, 1, 2))
    four = plan_of(Tensor.ones(4, 8, 16, 128).contiguous().sum(axis=3))
    three = apply(four, Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.LOCAL, 2, 2))
    with pytest.raises(OptError, match="4 work-group dimensions"):
        apply(three, Opt(OptOps.GROUP, 4, 4))
    with pytest.raises(OptError, match="work-group dimension 2 of 128 threads exceeds its limit 64"):
        apply(four, Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.GROUP, 4, 128))


def test_beam_checks_every_output_of_a_kernel():
    """A kernel with two STOREs (data0 = x * 2, data2 = x + 1): a candidate wrong in the second one only is dropped."""
    from uopkit.codegen.opt.search import Timer
    from uopkit.uop.ops import Ops, UOp

    x = Tensor(np.ones((4, 8), np.float32), device="EMULATOR").realize()
    item, _ = _emulator_item(x * 2)
    (store,) = item.ast.src
    value = store.src[1]
    loaded = value.src[0]
    view = store.src[0]
    second = view.replace(src=(UOp(Ops.DEFINE_GLOBAL, view.src[0].dtype, (), 2),))

    def two_outputs(plus: float) -> UOp:
        return UOp(Ops.SINK, item.ast.dtype, (store, UOp(Ops.STORE, store.dtype, (second, loaded + plus))))

    target = [Opt(OptOps.UPCAST, 1, 4)]

    def build(ast, renderer, opts):
        return get_program(two_outputs(1.5) if opts == target else ast, renderer, opts)

    timer = Timer(two_outputs(1.0), "EMULATOR", build)
    assert timer.written == [0, 2]
    timer.reference()
    inputs = np.frombuffer(timer.initial[1], np.float32)
    np.testing.assert_allclose(timer.expected[0], inputs * 2)
    np.testing.assert_allclose(timer.expected[1], inputs + 1)
    assert timer([Opt(OptOps.UPCAST, 1, 2)]) < float("inf")
    assert timer(target) == float("inf") and list(timer.rejected) == [tuple(target)]


# ---------------------------------------------------------------------------------------------------------------------
# CPU threads: how many, and which loops the heuristic shares among them


def test_cpu_threads_from_env_then_affinity_mask(monkeypatch):
    import os

    from uopkit import helpers
    from uopkit.helpers import cpu_threads

    monkeypatch.delenv("UOPKIT_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    # a process limited to 3 cores of a bigger machine (taskset, a container's cpuset) uses 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 5, 7}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(helpers, "cgroup_cpu_limit", lambda: None)
    assert cpu_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "4,2")
    assert cpu_threads() == 4
    monkeypatch.setenv("UOPKIT_THREADS", "6")
    assert cpu_threads() == 6
    monkeypatch.setenv("UOPKIT_THREADS", "many")
    with pytest.raises(ValueError, match="positive integer"):
        cpu_threads()


def test_cpu_threads_within_the_cgroup_cpu_quota(tmp_path, monkeypatch):
    import os

    from uopkit import helpers

    def cgroup(lines, files):
        proc = tmp_path / "cgroup"
        proc.write_text(lines)
        for name, text in files.items():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(text)
        # (read once per process: the limit doesn't change while it runs)
        helpers.cgroup_cpu_limit.cache_clear()
        return helpers.cgroup_cpu_limit(str(proc), str(tmp_path))

    # v2, a container limited to 2.5 CPUs (its group is the mount's root): 3 threads' worth of time
    assert cgroup("0::/job\n", {"cpu.max": "250000 100000\n"}) == 3
    assert cgroup("0::/\n", {"cpu.max": "max 100000\n"}) is None
    # v1: a group below the mount, under a parent with a tighter quota
    files = {"cpu/a/b/cpu.cfs_quota_us": "800000", "cpu/a/b/cpu.cfs_period_us": "100000"}
    files |= {"cpu/a/cpu.cfs_quota_us": "400000", "cpu/a/cpu.cfs_period_us": "100000"}
    assert cgroup("4:memory:/x\n1:cpu:/a/b\n", files) == 4
    monkeypatch.delenv("UOPKIT_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(192)), raising=False)
    monkeypatch.setattr(helpers, "cgroup_cpu_limit", lambda: 16)
    assert helpers.cpu_threads() == 16


def _thread_axes(t, threads, monkeypatch):
    """The opts the heuristic gives the last kernel of `t` with `threads` threads: (THREAD axes, all opts)."""
    from uopkit.codegen.opt.heuristic import hand_coded_opts

    monkeypatch.setenv("UOPKIT_THREADS", str(threads))
    item = create_schedule(kernelize_tensors([t]))[-1]
    opts = hand_coded_opts(item.ast, Device["CPU"].renderer)
    return [o.axis for o in opts if o.op is OptOps.THREAD], opts


def test_heuristic_threads_matmul_over_rows_then_columns_of_tiles(monkeypatch):
    a, b = Tensor.empty(256, 256), Tensor.empty(256, 256)
    # 64 rows of 4x64 tiles: enough for 16 or 32 threads, row blocks only
    assert _thread_axes(a @ b, 16, monkeypatch)[0] == [0]
    assert _thread_axes(a @ b, 32, monkeypatch)[0] == [0]
    # 12 threads share 64 rows unevenly (6 rounds for 5.3): the columns of tiles are split too (256 blocks)
    assert _thread_axes(a @ b, 12, monkeypatch)[0] == [0, 1]
    # 128 rows by 8 columns of tiles at 256 threads: both axes
    assert _thread_axes(Tensor.empty(512, 256) @ Tensor.empty(256, 512), 256, monkeypatch)[0] == [0, 1]


def test_heuristic_small_kernels_use_fewer_threads_or_none(monkeypatch):
    from uopkit.codegen.opt.heuristic import MIN_WORK_PER_THREAD, kernel_threads

    small = Tensor.empty(16, 16).contiguous() + 1
    assert _thread_axes(small, 16, monkeypatch)[0] == []
    item = create_schedule(kernelize_tensors([Tensor.empty(64, 1024).contiguous() * 2]))[-1]
    monkeypatch.setenv("UOPKIT_THREADS", "64")
    # 64K elements are worth 64K / MIN_WORK_PER_THREAD threads, not 64: as many blocks, and as many threads start
    wanted = 64 * 1024 // MIN_WORK_PER_THREAD
    assert kernel_threads(initial_plan(item.ast)) == wanted < 64
    src = get_program(item.ast, Device["CPU"].renderer).src
    assert f"_chunks = {wanted};" in src


def test_heuristic_column_sums_keep_a_block_per_thread(monkeypatch):
    t = Tensor.empty(4096, 4096).sum(axis=0)
    for threads in (2, 16, 64):
        axes, opts = _thread_axes(t, threads, monkeypatch)
        plan = initial_plan(create_schedule(kernelize_tensors([t]))[-1].ast)
        for o in opts:
            plan = apply_opt(plan, o, Device["CPU"].renderer)
        # wide vector passes over the rows, but still at least one pass for each thread
        assert axes == [1] and plan.threads >= threads and plan.lanes() >= 64


def test_thread_opt_splits_and_merges_axes_into_one_parallel_loop(monkeypatch):
    monkeypatch.setenv("UOPKIT_THREADS", "4")
    item = create_schedule(kernelize_tensors([Tensor.empty(12, 40).contiguous() * 3]))[-1]
    renderer = Device["CPU"].renderer
    plan = initial_plan(item.ast)
    plan = apply_opt(plan, Opt(OptOps.THREAD, 0, 3), renderer)
    plan = apply_opt(plan, Opt(OptOps.THREAD, 1, 0), renderer)
    assert plan.out[0][0].kind == "thread" and plan.out[0][0].size == 3 and plan.out[1][0].size == 40
    assert plan.threads == 3 * 40
    with pytest.raises(OptError, match="already split among threads"):
        apply_opt(plan, Opt(OptOps.THREAD, 0, 2), renderer)
    src = get_program(item.ast, renderer, [Opt(OptOps.THREAD, 0, 3), Opt(OptOps.THREAD, 1, 0)]).src
    # one parallel loop over the 120 blocks, in chunks for the 4 threads asked for
    assert src.count("_chunk(void **bufs") == 1 and "_chunks = 4;" in src and "((120)*(long long)(chunk)/chunks)" in src
    # a loop of fewer blocks than threads is split only as many ways
    src = get_program(item.ast, renderer, [Opt(OptOps.THREAD, 0, 3)]).src
    assert "_chunks = 3;" in src


def test_swap_reorders_the_output_loops_and_keeps_the_values():
    rng = np.random.default_rng(3)
    a, b = (Tensor(rng.standard_normal(shape).astype(np.float32)) for shape in ((16, 24), (24, 32)))
    t = a @ b
    item = create_schedule(kernelize_tensors([t]))[-1]
    renderer = Device["CPU"].renderer
    base = [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 2)]
    src = get_program(item.ast, renderer, base).src
    swapped = get_program(item.ast, renderer, [*base, Opt(OptOps.SWAP, 0, 1)]).src
    # the row loop (8 tiles of 2) opens first without SWAP, the column loop (4 vectors of 8) first with it
    assert src.index("< 8") < src.index("< 4")
    assert swapped.index("< 4") < swapped.index("< 8")
    expected = _run(item, base)
    np.testing.assert_allclose(_run(item, [*base, Opt(OptOps.SWAP, 0, 1)]), expected, rtol=1e-6)
    # with a thread split of the rows, the parallel loop stays outermost
    threaded = [*base, Opt(OptOps.SWAP, 0, 1), Opt(OptOps.THREAD, 0, 2)]
    np.testing.assert_allclose(_run(item, threaded), expected, rtol=1e-6)
    plan = initial_plan(item.ast)
    with pytest.raises(OptError, match="two output axes"):
        apply_opt(plan, Opt(OptOps.SWAP, 1, 0), renderer)
    with pytest.raises(OptError, match="no loop left"):
        apply_opt(apply_opt(plan, Opt(OptOps.UPCAST, 1, 32), renderer), Opt(OptOps.SWAP, 0, 1), renderer)
    # a GPU-style renderer's output loops are a grid: nothing to reorder
    with pytest.raises(OptError, match="grid"):
        apply_opt(plan, Opt(OptOps.SWAP, 0, 1), _emulated("OPENCL"))


def test_heuristic_puts_a_big_matmuls_column_loop_outside_its_rows(monkeypatch):
    # the panel of the right operand one column of tiles reads stays in cache while the row tiles pass
    axes, opts = _thread_axes(Tensor.empty(1024, 1024) @ Tensor.empty(1024, 1024), 2, monkeypatch)
    assert Opt(OptOps.SWAP, 0, 1) in opts and axes == [0]


def test_swap_refused_where_a_reduce_is_broadcast_along_the_output():
    t = Tensor.empty(16, 24) - Tensor.empty(16, 24).sum(1, keepdim=True)
    item = create_schedule(kernelize_tensors([t]))[-1]
    with pytest.raises(OptError, match="broadcast along the output"):
        apply_opt(initial_plan(item.ast), Opt(OptOps.SWAP, 0, 1), Device["CPU"].renderer)


def test_padded_max_tail_after_a_simd_max_loop_keeps_nan():
    # PADTO + UNROLL runs the last element of each row after the loop: that update is a plain MAX (it once used the
    # loop's NaN flag outside its block: a compile error)
    x = np.arange(16 * 75, dtype=np.float32).reshape(16, 75)
    x[3, 74] = np.nan
    x[5, 10] = np.nan
    t = Tensor(x).max(axis=1)
    schedule = create_schedule(kernelize_tensors([t]))
    for earlier in schedule[:-1]:
        _run(earlier, [])
    r = initial_plan(schedule[-1].ast).n_out
    got = _run(schedule[-1], [Opt(OptOps.PADTO, r, 8), Opt(OptOps.UNROLL, r, 2)])
    np.testing.assert_array_equal(got.reshape(-1), x.max(axis=1))


def _tile(t, monkeypatch, registers=None, width=16):
    """(vectors per row, rows) of the register tile the CPU heuristic gives the last kernel of `t`, for a CPU with
    `registers` SIMD registers of `width` floats."""
    from dataclasses import replace

    from uopkit.codegen.opt.heuristic import hand_coded_opts

    monkeypatch.setenv("UOPKIT_THREADS", "2")
    renderer = Device["CPU"].renderer
    if registers is not None:
        renderer = type(renderer)()
        renderer.caps = replace(renderer.caps, vector_registers=registers, max_vector_width=width)
    item = create_schedule(kernelize_tensors([t]))[-1]
    plan = apply_opts(item.ast, hand_coded_opts(item.ast, renderer), renderer)
    width = renderer.caps.max_vector_width
    ups = [math.prod(p.size for p in parts if p.kind == "upcast") for parts in plan.out]
    return max(ups) // width, min(u for u in ups if u > 1)


def test_register_tile_fits_the_cpus_registers(monkeypatch):
    mm = Tensor.empty(768, 768) @ Tensor.empty(768, 768)
    # AVX-512 (32 registers of 16 floats): 6 rows of 4 vectors, 24 accumulators
    assert _tile(mm, monkeypatch, registers=32) == (4, 6)
    # AVX2's registers hold 8 vectors of 16 floats: a 2x2 tile, not 16 accumulators spilled to memory
    vectors, rows = _tile(mm, monkeypatch, registers=8)
    assert vectors * rows + min(vectors, rows) + 1 <= 8
    # and 16 of its own 8-float vectors (the CPU renderer's width there): 12 accumulators
    vectors, rows = _tile(mm, monkeypatch, registers=16, width=8)
    assert vectors * rows == 12 and vectors * rows + min(vectors, rows) + 1 <= 16
    # 784 columns are 49 vectors: 7 per row of the tile rather than 1
    assert _tile(Tensor.empty(512, 256) @ Tensor.empty(256, 784), monkeypatch, registers=32) == (7, 2)


def test_a_sum_over_a_strided_axis_reads_rows_in_flight(monkeypatch):
    # column sums: 256 columns of accumulators per pass read one short run of each row; four rows at a time keep more
    # of the memory's reads in flight (4096x4096 on 2 threads: 4.2-4.5 -> 2.8-3.5 ms)
    from uopkit.codegen.opt.heuristic import ROWS_IN_FLIGHT, hand_coded_opts

    monkeypatch.setenv("UOPKIT_THREADS", "2")
    x = np.random.default_rng(0).standard_normal((96, 4096)).astype(np.float32)
    t = Tensor(x).sum(axis=0)
    item = create_schedule(kernelize_tensors([t]))[-1]
    opts = hand_coded_opts(item.ast, Device["CPU"].renderer)
    assert Opt(OptOps.UNROLL, 2, ROWS_IN_FLIGHT) in opts
    np.testing.assert_allclose(t.numpy(), x.sum(axis=0, dtype=np.float64), rtol=1e-5, atol=1e-4)
    # a reduce too short for four rows a few times over keeps its loop
    short = Tensor.empty(8, 4096).sum(axis=0)
    assert not any(
        o.op is OptOps.UNROLL
        for o in hand_coded_opts(create_schedule(kernelize_tensors([short]))[-1].ast, Device["CPU"].renderer)
    )


def test_unrolled_lanes_have_a_limit_of_their_own():
    # the output tile's lanes (registers held) stay within MAX_LANES; unrolling the reduce as well within
    # MAX_UNROLLED_LANES (loads and adds in flight)
    from uopkit.codegen.opt import MAX_LANES, MAX_UNROLLED_LANES

    renderer = Device["CPU"].renderer
    ast = create_schedule(kernelize_tensors([Tensor.empty(64, 4096).sum(axis=0)]))[-1].ast
    tile = [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 1, 16)]
    assert 256 * 4 <= MAX_UNROLLED_LANES and 256 <= MAX_LANES < 512
    apply_opts(ast, [*tile, Opt(OptOps.UNROLL, 2, 4)], renderer)
    with pytest.raises(OptError, match="unrolled lanes"):
        apply_opts(ast, [*tile, Opt(OptOps.UNROLL, 2, 8)], renderer)
    with pytest.raises(OptError, match="lanes of outputs"):
        apply_opts(ast, [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 1, 32)], renderer)


def test_simd_registers_from_cpu_flags():
    simd = pytest.importorskip("uopkit_cpu.renderer").simd_registers
    assert simd(16, "flags\t: fpu sse2 avx avx2 avx512f avx512bw") == 32
    assert simd(16, "flags\t: fpu sse2 avx avx2 fma") == 8
    assert simd(16, "flags\t: fpu sse sse2") == 4
    assert simd(16, "Features\t: fp asimd evtstrm") == 8
    # a kernel's vectors are one register wide (gcc splits wider ones badly: a matmul tile 40x slower on AVX2)
    cpu = pytest.importorskip("uopkit_cpu.renderer")
    assert cpu.native_floats("flags\t: fpu sse2 avx avx2 avx512f avx512bw") == 16
    assert cpu.native_floats("flags\t: fpu sse2 avx avx2 fma") == 8
    assert cpu.native_floats("flags\t: fpu sse sse2") == 4
    caps = cpu.ClangRenderer.caps
    assert caps.max_vector_width == cpu.native_floats()
    assert caps.vector_registers == simd(caps.max_vector_width)


def _weight_gradient(out_channels, monkeypatch):
    """A 3x3 conv's weight gradient over 4x8x16x16 inputs: the sum over the batch and the image of the input's windows
    times the output's gradient; (the kernel's opts, its initial plan)."""
    x = Tensor.empty(4, 8, 16, 16).pad(((0, 0), (0, 0), (1, 1), (1, 1))).contiguous()
    g = Tensor.empty(4, out_channels, 16, 16)
    windows = x._pool((3, 3)).reshape(4, 1, 8, 16, 16, 3, 3)
    dw = (windows * g.reshape(4, out_channels, 1, 16, 16, 1, 1)).sum((0, 3, 4))
    _, opts = _thread_axes(dw, 1, monkeypatch)
    return opts, initial_plan(create_schedule(kernelize_tensors([dw]))[-1].ast)


def test_rows_of_narrower_vectors_get_register_tiles(monkeypatch):
    # image rows 56 long are vectors of 8, not 16: they are register-tiled all the same (a lone accumulator is a chain
    # of dependent FMAs: a 56x56 conv's weight gradient ran at ~10 GFLOP/s on one core). The weight gradient: output
    # channels x kernel rows over vectors along the row (the reduce); the convolution: rows of output channels
    x = Tensor.empty(2, 8, 56, 56).pad(((0, 0), (0, 0), (1, 1), (1, 1))).contiguous()
    g = Tensor.empty(2, 16, 56, 56)
    windows = x._pool((3, 3)).reshape(2, 1, 8, 56, 56, 3, 3)
    dw = (windows * g.reshape(2, 16, 1, 56, 56, 1, 1)).sum((0, 3, 4))
    _, opts = _thread_axes(dw, 1, monkeypatch)
    plan = initial_plan(create_schedule(kernelize_tensors([dw]))[-1].ast)
    assert [o.amount for o in opts if o.op is OptOps.UPCAST and o.axis >= plan.n_out] == [8]
    assert len({o.axis for o in opts if o.op is OptOps.UPCAST and o.axis < plan.n_out}) == 2
    conv = Tensor.empty(2, 8, 56, 56).conv2d(Tensor.empty(16, 8, 3, 3), padding=1)
    _, opts = _thread_axes(conv, 1, monkeypatch)
    plan = initial_plan(create_schedule(kernelize_tensors([conv]))[-1].ast)
    ups = [o for o in opts if o.op is OptOps.UPCAST]
    assert ups[0].amount == 8 and len({o.axis for o in ups}) == 2


def test_short_output_axis_is_not_a_vector_axis(monkeypatch):
    # a 3x3 weight gradient: the kernel column (3 long) is contiguous in the input, but a vector along it would be
    # gathered lane by lane; the reduce along the image row (contiguous in both operands) takes the vectors instead
    opts, plan = _weight_gradient(8, monkeypatch)
    ups = [o for o in opts if o.op is OptOps.UPCAST]
    # the first UPCAST is the vector: along the reduce (the image row), not along the output channels
    assert ups and ups[0].axis >= plan.n_out


def test_weight_gradient_tiles_output_channels_by_kernel_rows(monkeypatch, avx512_cpu):
    # both operands are read in vectors along the image row (the reduce): a register tile needs one axis that leaves
    # the gradient's load in place (a kernel row: its loads move by whole rows) and one that leaves the input's (the
    # output channels). The kernel column moves the input by one float: its vectors would overlap, so it is no tile axis
    opts, plan = _weight_gradient(16, monkeypatch)
    sizes = [parts[0].size for parts in plan.out]
    tiled = {o.axis: o.amount for o in opts if o.op is OptOps.UPCAST and o.axis < plan.n_out}
    co, kh = sizes.index(16), len(sizes) - 2
    assert tiled == {co: 8, kh: 3}


def test_an_embedding_gradient_too_small_for_a_scatter_kernel_branches_once_per_lookup_and_table_row(monkeypatch):
    # the gradient of table[idx] sums, for each table row k, the rows of the upstream gradient whose index is k: a
    # one-hot select over an output axis. The CPU adds the lookups one by one (`uopkit.codegen.scatter`); where that
    # doesn't apply (here: forced off), each table row's updates go under one branch on "this lookup is this row"
    # (the linearizer's `branch_one_hot_updates`) with the row in vectors
    import uopkit.codegen as codegen
    import uopkit.codegen.opt.heuristic as heuristic

    monkeypatch.setattr(codegen, "lower_scatter_kernel", lambda *args: None)
    monkeypatch.setattr(heuristic, "lowers_as_scatter", lambda ast: False)
    rng = np.random.default_rng(0)
    table = Tensor(rng.standard_normal((40, 64)).astype(np.float32), requires_grad=True)
    idx = rng.integers(-40, 40, (96,)).astype(np.int32)
    g = rng.standard_normal((96, 64)).astype(np.float32)
    g[0, 3], g[7, 9] = math.nan, math.inf
    (table[Tensor(idx)] * Tensor(g)).sum().backward()
    assert table.grad is not None
    _, opts = _thread_axes(table.grad, 1, monkeypatch)
    ast = create_schedule(kernelize_tensors([table.grad]))[-1].ast
    plan = initial_plan(ast)
    assert len({o.axis for o in opts if o.op is OptOps.UPCAST and o.axis < plan.n_out}) == 1
    program = get_program(ast, Device["CPU"].renderer, opts)
    assert sum(u.op is Ops.IF for u in program.uops) == 1 and "if (" in program.src
    want = np.zeros((40, 64), np.float32)
    np.add.at(want, idx % 40, g)
    np.testing.assert_allclose(table.grad.numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_count_of_matches_stays_a_vectorizable_sum():
    # where(pred == label, 1, 0) summed tests only the reduce's own counter: true for most elements, it is no branch
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 3, 5000).astype(np.int32), rng.integers(0, 3, 5000).astype(np.int32)
    out = (Tensor(a) == Tensor(b)).where(1, 0).sum()
    ast = create_schedule(kernelize_tensors([out]))[-1].ast
    assert not any(u.op is Ops.IF for u in get_program(ast, Device["CPU"].renderer).uops)
    assert out.item() == int((a == b).sum())


@pytest.mark.parametrize(
    "shape, perm, dtype",
    [((64, 4096), (1, 0), np.float32), ((32, 8192), (1, 0), np.float16), ((64, 4096), (1, 0), np.int8)],
)
def test_transposing_copy_reads_whole_cache_lines(shape, perm, dtype, monkeypatch):
    # source rows 16 KB or more (a multiple of 1 KB) apart: lanes along the load's contiguous axis, a cache line's
    # worth
    a = (np.arange(math.prod(shape)) % 251).astype(dtype).reshape(shape)
    t = Tensor(a).permute(*perm).contiguous()
    _, opts = _thread_axes(t, 2, monkeypatch)
    line = 64 // np.dtype(dtype).itemsize
    assert Opt(OptOps.UPCAST, perm.index(len(shape) - 1), line) in opts
    np.testing.assert_array_equal(t.numpy(), a.transpose(perm))


def test_transposing_copy_of_rows_at_other_distances_keeps_its_loop_order(monkeypatch):
    # rows 512 B apart stay in cache between passes: the lanes' scattered stores would only cost
    t = Tensor.empty(64, 64, 64, 128).permute(0, 3, 1, 2).contiguous()
    assert not [o for o in _thread_axes(t, 2, monkeypatch)[1] if o.op is OptOps.UPCAST]


@pytest.mark.parametrize("shape, dtype", [((512, 512), np.float32), ((256, 1024), np.int8), ((128, 2048), np.float16)])
def test_transposes_store_eight_gathered_rows_at_a_time(shape, dtype, monkeypatch):
    # the loop outside the stored run walks the source rows: each step stores 8 rows' elements as one vector
    a = (np.arange(math.prod(shape)) % 251).astype(dtype).reshape(shape)
    t = Tensor(a).T.contiguous()
    assert Opt(OptOps.UPCAST, 1, 8) in _thread_axes(t, 2, monkeypatch)[1]
    np.testing.assert_array_equal(t.numpy(), a.T)


@pytest.mark.parametrize("shape, dtype", [((512, 768), np.float32), ((128, 2048), np.float16)])
def test_gathered_transposes_read_a_cache_line_of_each_row_per_step(shape, dtype, monkeypatch):
    # a 2-D tile: 8 source rows by a cache line of each (16 floats, 32 halves), so a source line is read once
    a = (np.arange(math.prod(shape)) % 251).astype(dtype).reshape(shape)
    t = Tensor(a).T.contiguous()
    line = 64 // np.dtype(dtype).itemsize
    assert {Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, line)} <= set(_thread_axes(t, 2, monkeypatch)[1])
    np.testing.assert_array_equal(t.numpy(), a.T)


@pytest.mark.parametrize("lookup", ["index_select1", "transposed_rows", "index_select_last", "rows", "gather_columns"])
def test_a_gather_across_rows_loops_over_its_index_inside_a_few_rows(lookup, monkeypatch):
    # x.index_select(1, idx) (out[b, r] = x[r, idx[b]]): with the rows r innermost each element read a new cache line
    # of x, and the next index came back to rows long evicted (17x torch). Lanes of 8 rows, the index's loop moved in
    # past the others: one run of 8 stored per step, the next indices reading on in the same rows. Lookups that walk
    # their rows along (an embedding's) or along the index keep their order
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, idx = rng.standard_normal((512, 1024)).astype(np.float32), rng.integers(0, 512, 256)
    x3 = rng.standard_normal((8, 64, 512)).astype(np.float32)
    # (the lookup, the kernel's inner output axis if it gets the lanes and the order)
    lookups = {
        "index_select1": (lambda a, a3, i: a.index_select(1, i), 1),
        "transposed_rows": (lambda a, a3, i: a.T[i], 1),
        "index_select_last": (lambda a, a3, i: a3.index_select(2, i), 2),
        "rows": (lambda a, a3, i: a[i], None),
        "gather_columns": (lambda a, a3, i: a.gather(1, i.reshape(-1, 2)), None),
    }
    f, inner = lookups[lookup]
    out = f(Tensor(x), Tensor(x3), Tensor(idx))
    _, opts = _thread_axes(out, 2, monkeypatch)
    swaps = [o for o in opts if o.op is OptOps.SWAP]
    if inner is None:
        assert not swaps, opts
    else:
        assert Opt(OptOps.UPCAST, inner, 8) in opts and swaps == [Opt(OptOps.SWAP, 0, a) for a in range(1, inner + 1)]
    want = f(torch.from_numpy(x), torch.from_numpy(x3), torch.from_numpy(idx))
    np.testing.assert_array_equal(out.numpy(), want.numpy())


def test_a_tile_stored_lane_by_lane_takes_one_vector_per_row(monkeypatch, avx512_cpu):
    # h.T @ g for 10 classes: vectors along the 512 rows of h, which the (512, 10) output is not stored along, so each
    # vector's lanes are stored apart: one vector per row of the tile (four wrote 320 scalar stores, a third of a
    # second of gcc for no speed), rows along the classes; values checked
    rng = np.random.default_rng(0)
    h, g = rng.standard_normal((256, 512)).astype(np.float32), rng.standard_normal((256, 10)).astype(np.float32)
    out = Tensor(h).T @ Tensor(g)
    _, opts = _thread_axes(out, 2, monkeypatch)
    upcasts = [o for o in opts if o.op is OptOps.UPCAST]
    assert upcasts == [Opt(OptOps.UPCAST, 0, 16), Opt(OptOps.UPCAST, 1, 5)], opts
    np.testing.assert_allclose(out.numpy(), h.T @ g, rtol=1e-4, atol=1e-4)
    # a tile stored along its vectors keeps several per row (x.T @ g for 512 columns: 4 vectors of 16)
    wide = Tensor(h).T @ Tensor(rng.standard_normal((256, 512)).astype(np.float32))
    assert Opt(OptOps.UPCAST, 1, 4) in _thread_axes(wide, 2, monkeypatch)[1]


def test_short_gathered_runs_store_four_rows_at_a_time(monkeypatch):
    # a transposed operand packed into panels, (1, N/32, K, 32) read from (N, K) rows, K the next loop out: each step
    # stores 4 rows' elements as one vector, and the next steps read on along those rows (rows 2 KB apart or not)
    from uopkit.codegen.opt.heuristic import hand_coded_opts

    for n, k in ((512, 512), (512, 784)):
        x, w = Tensor.empty(256, k), Tensor.empty(n, k)
        pack = create_schedule(kernelize_tensors([x @ w.T]))[0]
        assert Opt(OptOps.UPCAST, 3, 4) in hand_coded_opts(pack.ast, Device["CPU"].renderer), (n, k)
    # the same for attention's k.T and a 64-channel NCHW -> NHWC copy; values checked
    a = (np.arange(2 * 64 * 16 * 16) % 251).astype(np.float32).reshape(2, 64, 16, 16)
    t = Tensor(a).permute(0, 2, 3, 1).contiguous()
    assert Opt(OptOps.UPCAST, 3, 4) in _thread_axes(t, 2, monkeypatch)[1]
    np.testing.assert_array_equal(t.numpy(), a.transpose(0, 2, 3, 1))
    rng = np.random.default_rng(0)
    q, kk = rng.standard_normal((2, 128, 64)).astype(np.float32), rng.standard_normal((2, 128, 64)).astype(np.float32)
    scores = Tensor(q) @ Tensor(kk).transpose(-1, -2)
    pack = create_schedule(kernelize_tensors([scores]))[0]
    assert Opt(OptOps.UPCAST, 4, 4) in hand_coded_opts(pack.ast, Device["CPU"].renderer)
    np.testing.assert_allclose(scores.numpy(), q @ kk.transpose(0, 2, 1), rtol=1e-5, atol=1e-4)


def test_strided_convolution_vectors_its_output_columns_and_unrolls_the_kernel_row(monkeypatch, avx512_cpu):
    # stride 2: the only contiguous loads run along the 3-wide kernel row, too short for vectors. Vectors along the
    # output columns (their input columns gathered) in a tile of output channels, the kernel row unrolled so that its
    # three gathers read the same lines; it was a scalar 2x4 tile (one thread: 17.9 -> 1.2-1.3 ms)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 16, 32, 32)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    out = Tensor(x).conv2d(Tensor(w), stride=2, padding=1)
    _, opts = _thread_axes(out, 2, monkeypatch)
    # (axes: batch, group, out channels, 1, rows, columns, 1, 1 | in channels, kernel rows, kernel columns)
    assert {Opt(OptOps.UPCAST, 5, 16), Opt(OptOps.UPCAST, 2, 8), Opt(OptOps.UNROLL, 10, 3)} <= set(opts), opts
    import torch

    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=2, padding=1).numpy()
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)


def test_a_matmul_whose_operand_is_read_through_div_and_mod_gets_a_register_tile(monkeypatch, avx512_cpu):
    # attention's input gradient: (dq, dk, dv) concatenated from per-head layouts, dq transposed, times the qkv
    # weight. The operand's addresses divide and take remainders of the reduce's index, and the reduce's range lists
    # the store that sets its accumulators first, indexed by the output's ranges: the analysis walked into it and
    # saw the operand move along the output's columns, so no register tile: 256 lanes stored one by one over four
    # rows unrolled, 377 KB of C that took gcc 14-16 s (the transformer's first training step, 39 -> 13 s)
    from uopkit.codegen import prepare_ast
    from uopkit.codegen.merge import merge_axes
    from uopkit.codegen.opt.analysis import load_axes

    b, h, t, d = 2, 2, 64, 32
    rng = np.random.default_rng(0)
    qt = rng.standard_normal((b, h, d, t)).astype(np.float32)
    k = rng.standard_normal((b, h, t, d)).astype(np.float32)
    w = rng.standard_normal((64, 3 * h * d)).astype(np.float32)

    def rows(x):
        return x.transpose(1, 2).reshape(b * t, h * d)

    kk = Tensor(k)
    out = rows(Tensor(qt).transpose(-1, -2)).cat(rows(kk), rows(kk * 2), dim=-1) @ Tensor(w).T
    ast = create_schedule(kernelize_tensors([out]))[-1].ast
    # (axes: 128 rows, 64 columns, 1 | 192 reduced): only the weight's load moves along the columns
    loads = load_axes(merge_axes(prepare_ast(ast)))
    assert [la for la in loads if 1 in la] == [{1: 1, 3: 32}], loads
    _, opts = _thread_axes(out, 2, monkeypatch)
    assert opts[:3] == [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4)], opts
    kt = k.transpose(0, 2, 1, 3).reshape(b * t, h * d)
    want = np.concatenate([qt.transpose(0, 3, 1, 2).reshape(b * t, h * d), kt, kt * 2], axis=-1) @ w.T
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


def test_beam_cache_key_is_the_same_in_every_process() -> None:
    # the key held the renderer's caps as their repr, whose sets of ops are listed in an order that changes with the
    # string hash seed: a search's result was found again only by a process with the same seed
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from uopkit import Device, Tensor\n"
        "from uopkit.codegen.opt.search import ast_key\n"
        "from uopkit.schedule import create_schedule, kernelize_tensors\n"
        "t = Tensor(np.ones((4, 8), dtype=np.float32)).sum(axis=1)\n"
        "print(ast_key(create_schedule(kernelize_tensors([t]))[-1].ast, Device['CPU'].renderer))\n"
    )
    keys = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        keys.add(out.stdout.split()[-1])
    assert len(keys) == 1


def test_a_register_tile_of_a_long_body_stays_within_the_code_limit(avx512_cpu) -> None:
    # an SSIM and image-gradient loss at a pixel-shuffled convolution's output: the output's gradient, which the
    # weight's and the bias's gradients both read, is one kernel of ~110 ops and loads per element (7x7 windows of
    # several pooled statistics). The register tile copied that body 256 times, 64k lines of C that gcc did not
    # finish in 300 s (a super-resolution model's first training step); lanes now stop where lanes times the body
    # would pass the limit (a tile of 32 lanes here, 9k lines)
    import torch

    import uopkit.nn.functional as UF
    from uopkit.codegen.opt.heuristic import hand_coded_opts
    from uopkit.uop.ops import GroupOp

    def loss(F: Any, x: Any, y: Any, kx: Any) -> Any:
        def pool(v: Any) -> Any:
            return F.avg_pool2d(v, 7, 1)

        mx, my = pool(x), pool(y)
        sxx, syy, sxy = pool(x * x) - mx**2, pool(y * y) - my**2, pool(x * y) - mx * my
        s = ((2 * mx * my + 1e-4) * (2 * sxy + 9e-4)) / ((mx**2 + my**2 + 1e-4) * (sxx + syy + 9e-4))
        edges = F.l1_loss(F.conv2d(x, kx), F.conv2d(y, kx)) + F.l1_loss(F.conv2d(x, kx.mT), F.conv2d(y, kx.mT))
        return 0.5 * (1 - s.mean()) + 0.1 * edges

    rng = np.random.default_rng(0)
    x0, y, w, b = (rng.random(s).astype(np.float32) for s in ((4, 4, 16, 16), (4, 1, 32, 32), (4, 4, 3, 3), (4,)))
    kx = np.array([[[[-1.0, 0.0, 1.0]]]], np.float32)
    grads = []
    for T, F in ((torch, torch.nn.functional), (Tensor, UF)):
        tw, tb = (T.tensor(a, requires_grad=True) if T is torch else Tensor(a, requires_grad=True) for a in (w, b))
        out = F.pixel_shuffle(F.conv2d(T.tensor(x0) if T is torch else Tensor(x0), tw, tb, padding=1), 2)
        loss(F, out, T.tensor(y) if T is torch else Tensor(y), T.tensor(kx) if T is torch else Tensor(kx)).backward()
        grads.append((tw.grad, tb.grad))
    bodies = []
    for item in create_schedule(kernelize_tensors(list(grads[1]))):
        body = sum(1 for u in item.ast.toposort() if u.op in GroupOp.ALU or u.op is Ops.LOAD)
        lanes = apply_opts(item.ast, hand_coded_opts(item.ast, avx512_cpu), avx512_cpu).lanes()
        bodies.append((body, lanes))
        assert lanes * body <= 16384, (body, lanes)
    # (the long body is there, and still gets vectors)
    assert max(bodies) >= (100, 16), bodies
    for ours, theirs in zip(grads[1], grads[0], strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-4, atol=1e-6)


def test_heuristic_gives_no_lanes_to_few_outputs_of_a_long_reduce_body(monkeypatch):
    # a column logsumexp over a long fused computation (the backward of a loop of log-domain Sinkhorn steps
    # recomputes the steps since the last stored one): lanes would copy the whole body once per lane for 40 outputs
    from uopkit.codegen.opt.heuristic import hand_coded_opts
    from uopkit.uop.ops import GroupOp

    monkeypatch.setenv("UOPKIT_THREADS", "2")
    x = Tensor.empty(4, 10, 10)
    for k in range(12):
        x = (x * (1 + k / 100)).sin() + x.cos()
    item = create_schedule(kernelize_tensors([x.exp().sum(axis=1)]))[-1]
    red = next(u for u in item.ast.toposort() if u.op is Ops.REDUCE_AXIS)
    assert sum(u.op in GroupOp.ALU for u in red.src[0].toposort()) > 64
    assert not any(o.op in (OptOps.UPCAST, OptOps.UNROLL) for o in hand_coded_opts(item.ast, Device["CPU"].renderer))
    # a short body over the same shape keeps its lanes
    short = create_schedule(kernelize_tensors([Tensor.empty(4, 10, 10).exp().sum(axis=1)]))[-1]
    assert any(o.op is OptOps.UPCAST for o in hand_coded_opts(short.ast, Device["CPU"].renderer))
