"""Kernel opts: every random, valid combination must compute exactly what the unoptimized kernel computes."""

import random

import numpy as np
import pytest

from uopkit import Device, Tensor
from uopkit.codegen import get_program
from uopkit.codegen.opt import Opt, OptError, OptOps, apply_opt, initial_plan
from uopkit.codegen.opt.search import beam_search, candidate_actions, load_cached
from uopkit.engine.realize import _buffer_for
from uopkit.schedule import create_schedule, kernelize_tensors


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


def _run(item, opts):
    dev = Device["CPU"]
    spec = get_program(item.ast, dev.renderer, opts)
    prg = dev.runtime(spec.name, dev.compiler.compile_cached(spec.src))
    bufs = [_buffer_for(b) for b in item.bufs]
    prg(*[b.opaque for b in bufs], global_size=spec.global_size, local_size=spec.local_size)
    return bufs[0].numpy().copy()


def _random_opts(item, renderer, rng, n):
    plan = initial_plan(item.ast)
    opts = []
    for _ in range(n):
        actions = candidate_actions(plan, renderer)
        # PADTO is not in the search space; try it too
        actions += [Opt(OptOps.PADTO, ax, amt) for ax in range(plan.n_out + len(plan.red)) for amt in (3, 4, 8)]
        rng.shuffle(actions)
        for act in actions:
            try:
                plan = apply_opt(plan, act, renderer)
            except OptError:
                continue
            opts.append(act)
            break
    return opts


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
        opts = _random_opts(item, renderer, rng, rng.randint(1, 4))
        got = _run(item, opts)
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
    # 32 rows of 8x32 tiles: enough for 16 or 32 threads, row blocks only
    assert _thread_axes(a @ b, 16, monkeypatch)[0] == [0]
    assert _thread_axes(a @ b, 32, monkeypatch)[0] == [0]
    # 12 threads share 32 rows unevenly (3 rounds for 2.7): the columns of tiles are split too (256 blocks)
    assert _thread_axes(a @ b, 12, monkeypatch)[0] == [0, 1]
    # 64 rows by 16 columns of tiles at 128 threads: both axes
    assert _thread_axes(Tensor.empty(512, 256) @ Tensor.empty(256, 512), 128, monkeypatch)[0] == [0, 1]


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
    assert f"num_threads({wanted})" in src


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
    # one parallel loop over the 120 blocks, on the 4 threads asked for
    assert src.count("#pragma omp parallel for") == 1 and "num_threads(4)" in src and "< 120;" in src
    # a loop of fewer blocks than threads starts only as many
    src = get_program(item.ast, renderer, [Opt(OptOps.THREAD, 0, 3)]).src
    assert "num_threads(3)" in src
