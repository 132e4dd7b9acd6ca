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
