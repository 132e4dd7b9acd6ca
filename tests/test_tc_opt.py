"""OptOps.TC: matmuls lowered onto each in-tree tensor core, run through the emulator and compared with numpy."""

from __future__ import annotations

import random

import numpy as np
import pytest

from uopkit import Device, Tensor
from uopkit.codegen import get_program
from uopkit.codegen.opt import Opt, OptError, OptOps, apply_opt, apply_opts, initial_plan
from uopkit.codegen.opt.heuristic import hand_coded_opts
from uopkit.codegen.opt.search import candidate_actions
from uopkit.device import Compiled
from uopkit.dtype import DType, dtypes, to_numpy_dtype
from uopkit.emulator import (
    EmulatorAllocator,
    EmulatorCompiler,
    EmulatorProgram,
    EmulatorRenderer,
    run_uops,
)
from uopkit.renderer import TensorCore
from uopkit.renderer.tensor_cores import CUDA_TENSOR_CORES, IN_TREE_TENSOR_CORES, ONE_THREAD_TENSOR_CORES
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.uop.ops import Ops

ALL = [tc for tcs in IN_TREE_TENSOR_CORES.values() for tc in tcs]
IDS = [tc.name for tc in ALL]


def _renderer(tcs: list[TensorCore], gpu: bool, local_max: tuple[int, ...] = (1024, 1024, 64)) -> EmulatorRenderer:
    """An emulator renderer declaring `tcs`, GPU-style (work-groups, SPECIAL ids) or with loops."""
    settings = {"has_local": gpu, "local_max": local_max, "tensor_cores": tcs}
    return type("TCRenderer", (EmulatorRenderer,), settings)()


def _for(tc: TensorCore) -> tuple[EmulatorRenderer, int]:
    """An emulator renderer declaring the family of `tc` (GPU-style when it has threads), and its index there."""
    tcs = next(tcs for tcs in IN_TREE_TENSOR_CORES.values() if tc in tcs)
    return _renderer(tcs, tc.threads > 1), tcs.index(tc)


def _inputs(tc: TensorCore, shapes: tuple[tuple[int, ...], ...], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(to_numpy_dtype(tc.dtype_in)) for s in shapes]


def _product(a: Tensor, b: Tensor, out: DType) -> Tensor:
    """a @ b accumulating in `out`; f16 @ f16 accumulates in f32 and returns f16, so other cases are spelled out."""
    if a.dtype == dtypes.float16 and out == dtypes.float32:
        return a @ b
    k, n = b.shape[-2], b.shape[-1]
    prods = a.reshape(*a.shape, 1) * b.reshape(*b.shape[:-2], 1, k, n)
    return prods.sum(axis=-2, acc_dtype=out)


def _item(t: Tensor):  # noqa: ANN202
    schedule = create_schedule(kernelize_tensors([t]))
    assert len(schedule) == 1, "inputs are realized: the matmul is one kernel"
    return schedule[0]


def _run(item, renderer: EmulatorRenderer, opts: list[Opt] | None, arrays: list[np.ndarray]):  # noqa: ANN202
    """Compile with `opts` (None: the heuristic's), run on the emulator; returns (output, the program)."""
    spec = get_program(item.ast, renderer, opts)
    out = np.zeros(item.bufs[0].size, to_numpy_dtype(item.bufs[0].dtype))
    run_uops(list(spec.uops), [out, *(np.ascontiguousarray(x).reshape(-1) for x in arrays)])
    return out, spec


def _tol(dt: DType) -> float:
    return 2e-2 if dt == dtypes.float16 else 1e-4


def _wmmas(spec) -> int:  # noqa: ANN001
    return sum(u.op is Ops.WMMA for u in spec.uops)


@pytest.mark.parametrize("tc", ALL, ids=IDS)
def test_tc_matmul_matches_numpy(tc: TensorCore) -> None:
    renderer, index = _for(tc)
    m, n, k = (d * t for d, t in zip(tc.dims, (2, 3, 2), strict=True))
    a, b = _inputs(tc, ((m, k), (k, n)))
    t = _product(Tensor(a), Tensor(b), tc.dtype_out)
    item = _item(t)
    n_out = initial_plan(item.ast).n_out
    got, spec = _run(item, renderer, [Opt(OptOps.TC, n_out, index)], [a, b])
    assert _wmmas(spec) == 1
    if tc.threads > 1:
        assert spec.local_size is not None and spec.local_size[0] == tc.threads
    expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got.reshape(m, n), expected, rtol=_tol(t.dtype), atol=_tol(t.dtype))
    # the default heuristic on a GPU-style renderer picks the tensor core by itself
    gpu = renderer if renderer.has_local else _renderer([tc], True)
    heuristic = hand_coded_opts(item.ast, gpu)
    assert any(o.op is OptOps.TC for o in heuristic), heuristic
    got, spec = _run(item, gpu, heuristic, [a, b])
    assert _wmmas(spec) >= 1
    np.testing.assert_allclose(got.reshape(m, n), expected, rtol=_tol(t.dtype), atol=_tol(t.dtype))


@pytest.mark.parametrize("tc", [CUDA_TENSOR_CORES[0], ONE_THREAD_TENSOR_CORES[0]], ids=lambda tc: tc.name)
def test_tc_with_batch_casts_transposes_and_epilogue(tc: TensorCore) -> None:
    """A batched product of transposed views, with MUL(CAST(a), CAST(b)) and a fused epilogue reading another
    buffer at the C layout's positions."""
    renderer, index = _for(tc)
    m, n, k = (d * 2 for d in tc.dims)
    a, b, c = _inputs(tc, ((3, k, m), (3, n, k), (3, m, n)), seed=1)
    out_dt = dtypes.float32
    ta, tb, tcc = Tensor(a), Tensor(b), Tensor(c)
    t = ((ta.transpose(-1, -2).cast(out_dt) @ tb.transpose(-1, -2).cast(out_dt)) + tcc.cast(out_dt)).relu()
    item = _item(t)
    n_out = initial_plan(item.ast).n_out
    opts = [Opt(OptOps.TC, n_out, index)]
    got, spec = _run(item, renderer, opts, [a, b, c])
    assert _wmmas(spec) == 1
    expected = np.maximum(np.swapaxes(a, -1, -2).astype(np.float64) @ np.swapaxes(b, -1, -2).astype(np.float64) + c, 0)
    np.testing.assert_allclose(got.reshape(3, m, n), expected, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    "tc, extra",
    [
        (CUDA_TENSOR_CORES[0], [("m", OptOps.UPCAST, 2), ("n", OptOps.UPCAST, 2)]),
        (CUDA_TENSOR_CORES[0], [("n", OptOps.LOCAL, 2), ("m", OptOps.UPCAST, 2)]),
        (IN_TREE_TENSOR_CORES["AMD_RDNA3"][0], [("m", OptOps.LOCAL, 2), ("n", OptOps.LOCAL, 2)]),
        (ONE_THREAD_TENSOR_CORES[0], [("n", OptOps.UPCAST, 4), ("m", OptOps.UPCAST, 2)]),
    ],
    ids=["cuda-upcast-mn", "cuda-local-upcast", "rdna3-locals", "one-thread-upcasts"],
)
def test_tc_combined_with_other_opts(tc: TensorCore, extra: list[tuple[str, OptOps, int]]) -> None:
    renderer, index = _for(tc)
    m, n, k = (d * 4 for d in tc.dims)
    a, b = _inputs(tc, ((m, k), (k, n)), seed=2)
    item = _item(_product(Tensor(a), Tensor(b), tc.dtype_out))
    tc_opt = Opt(OptOps.TC, initial_plan(item.ast).n_out, index)
    plan = apply_opts(item.ast, [tc_opt], renderer)
    assert plan.tc is not None
    axes = {"m": plan.tc.m_axis, "n": plan.tc.n_axis}
    opts = [tc_opt] + [Opt(op, axes[which], amt) for which, op, amt in extra]
    got, spec = _run(item, renderer, opts, [a, b])
    upcasts = np.prod([amt for _, op, amt in extra if op is OptOps.UPCAST], dtype=int)
    assert _wmmas(spec) == upcasts
    expected = a.astype(np.float64) @ b.astype(np.float64)
    out_dt = dtypes.float16 if tc.dtype_in == dtypes.float16 else dtypes.float32
    np.testing.assert_allclose(got.reshape(m, n), expected, rtol=_tol(out_dt), atol=_tol(out_dt))


def test_random_opts_after_tc_match_numpy() -> None:
    """Whatever valid opts the search may add after TC, the result stays right."""
    tc = CUDA_TENSOR_CORES[2]
    renderer = _renderer(CUDA_TENSOR_CORES, True)
    a, b = _inputs(tc, ((64, 32), (32, 32)), seed=3)
    item = _item(Tensor(a) @ Tensor(b))
    expected = a.astype(np.float64) @ b.astype(np.float64)
    rng = random.Random(4)
    for _ in range(4):
        plan = apply_opt(initial_plan(item.ast), Opt(OptOps.TC, 2, 2), renderer)
        for _ in range(2):
            actions = [x for x in candidate_actions(plan, renderer) if x.op is not OptOps.TC]
            assert not any(x.axis == 2 for x in actions), "the tensor core's reduce axis is off limits"
            plan = apply_opt(plan, rng.choice(actions), renderer)
        got, spec = _run(item, renderer, list(plan.opts), [a, b])
        assert _wmmas(spec) >= 1
        np.testing.assert_allclose(got.reshape(64, 32), expected, rtol=2e-2, atol=2e-2, err_msg=str(plan.opts))


def test_search_offers_tc_only_where_it_fits() -> None:
    renderer = _renderer(CUDA_TENSOR_CORES, True)
    half = Tensor(np.ones((32, 16), np.float16)) @ Tensor(np.ones((16, 16), np.float16))
    actions = candidate_actions(initial_plan(_item(half).ast), renderer)
    # the f16 -> f32 cores fit; the f16 -> f16 one does not (this product accumulates in f32)
    assert [a for a in actions if a.op is OptOps.TC] == [Opt(OptOps.TC, 2, 0), Opt(OptOps.TC, 2, 2)]
    single = Tensor(np.ones((32, 16), np.float32)) @ Tensor(np.ones((16, 16), np.float32))
    assert not [a for a in candidate_actions(initial_plan(_item(single).ast), renderer) if a.op is OptOps.TC]


def test_non_divisible_shape_refuses_and_falls_back() -> None:
    tc = CUDA_TENSOR_CORES[0]
    renderer = _renderer(CUDA_TENSOR_CORES, True)
    a, b = _inputs(tc, ((20, 16), (16, 8)))
    item = _item(Tensor(a) @ Tensor(b))
    with pytest.raises(OptError, match=r"no output axes fit the 16x8 tile: M and N must be multiples of 16 and 8"):
        apply_opt(initial_plan(item.ast), Opt(OptOps.TC, 2, 0), renderer)
    # K not a multiple of 16 (but of 8): the k8 core still fits, the k16 ones refuse
    a2, b2 = _inputs(tc, ((16, 24), (24, 8)))
    item2 = _item(Tensor(a2) @ Tensor(b2))
    with pytest.raises(OptError, match=r"the reduce axis \(size 24\) is not a multiple of the tile's K 16"):
        apply_opt(initial_plan(item2.ast), Opt(OptOps.TC, 2, 0), renderer)
    assert hand_coded_opts(item2.ast, renderer)[0] == Opt(OptOps.TC, 2, 2)
    # the heuristic falls back to ordinary opts, and the result is still right
    opts = hand_coded_opts(item.ast, renderer)
    assert not any(o.op is OptOps.TC for o in opts)
    got, spec = _run(item, renderer, None, [a, b])
    assert _wmmas(spec) == 0
    np.testing.assert_allclose(got.reshape(20, 8), a.astype(np.float64) @ b, rtol=2e-2, atol=2e-2)


def test_tc_opt_validation_errors() -> None:
    gpu = _renderer(CUDA_TENSOR_CORES, True)
    half = _item(Tensor(np.ones((32, 16), np.float16)) @ Tensor(np.ones((16, 16), np.float16))).ast
    plan = initial_plan(half)
    with pytest.raises(OptError, match="declares 3 tensor cores, no index 3"):
        apply_opt(plan, Opt(OptOps.TC, 2, 3), gpu)
    with pytest.raises(OptError, match="TC's axis is the kernel's reduce axis"):
        apply_opt(plan, Opt(OptOps.TC, 0, 0), gpu)
    with pytest.raises(OptError, match="needs 32 threads per tile, but the .* renderer has no locals"):
        apply_opt(plan, Opt(OptOps.TC, 2, 0), _renderer(CUDA_TENSOR_CORES, False))
    with pytest.raises(OptError, match="declares 0 tensor cores"):
        apply_opt(plan, Opt(OptOps.TC, 2, 0), Device["CPU"].renderer)
    with pytest.raises(OptError, match=r"the reduce accumulates in dtypes.float, the core in dtypes.half"):
        apply_opt(plan, Opt(OptOps.TC, 2, 1), gpu)
    with pytest.raises(OptError, match="TC must come before other opts on axis 1"):
        apply_opt(apply_opt(plan, Opt(OptOps.UPCAST, 1, 2), gpu), Opt(OptOps.TC, 2, 0), gpu)
    tc_plan = apply_opt(plan, Opt(OptOps.TC, 2, 0), gpu)
    with pytest.raises(OptError, match="already uses tensor core mma_m16n8k16_f16_f32"):
        apply_opt(tc_plan, Opt(OptOps.TC, 2, 2), gpu)
    with pytest.raises(OptError, match="is the reduce of the tensor core"):
        apply_opt(tc_plan, Opt(OptOps.UNROLL, 2, 2), gpu)
    # 16 = 2 tiles of 8 along N: what is left to split is the loop over the 2 tiles
    with pytest.raises(OptError, match="must be > 1 and divide the axis size 2"):
        apply_opt(tc_plan, Opt(OptOps.UPCAST, 1, 4), gpu)
    with pytest.raises(OptError, match="no loop left to split"):
        apply_opt(apply_opt(tc_plan, Opt(OptOps.UPCAST, 1, 2), gpu), Opt(OptOps.LOCAL, 1, 2), gpu)
    # the core's 32 threads count towards the work-group
    small = _renderer(CUDA_TENSOR_CORES, True, local_max=(32, 32, 32))
    with pytest.raises(OptError, match="work-group of 64 threads exceeds 32"):
        apply_opt(apply_opt(plan, Opt(OptOps.TC, 2, 0), small), Opt(OptOps.LOCAL, 0, 2), small)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda x, y: (x * x).sum(axis=1), "not a matmul: each factor needs an output axis that only it reads"),
        (lambda x, y: (x.reshape(32, 1, 16) + y.T.reshape(1, 16, 16)).sum(axis=2), "must sum a product"),
        (lambda x, y: (x.reshape(32, 1, 16) * y.T.reshape(1, 16, 16)).max(axis=2), "must be a sum, not MAX"),
        (lambda x, y: x.sum(axis=1) + x.max(axis=1), "axis 1 out of range"),
        (lambda x, y: (x.reshape(4, 8, 16) * y[0]).sum(axis=(0, 2)), "the reduce must have exactly one axis"),
    ],
    ids=["square", "add", "max", "two-reduces", "two-axes"],
)
def test_tc_refuses_kernels_that_are_not_matmuls(build, message: str) -> None:  # noqa: ANN001
    renderer = _renderer(ONE_THREAD_TENSOR_CORES, False)
    x = Tensor(np.ones((32, 16), np.float32))
    y = Tensor(np.ones((16, 16), np.float32))
    schedule = create_schedule(kernelize_tensors([build(x, y)]))
    plans = [initial_plan(s.ast) for s in schedule]
    item, plan = next(((s, p) for s, p in zip(schedule, plans, strict=True) if p.red), (schedule[-1], plans[-1]))
    with pytest.raises(OptError, match=message):
        apply_opt(plan, Opt(OptOps.TC, plan.n_out, 0), renderer)


def test_default_heuristic_end_to_end_on_a_gpu_style_emulator() -> None:
    """Tensor code on an emulator device with CUDA's settings: the default opts put the matmul on a tensor core."""
    target = _renderer(CUDA_TENSOR_CORES, True)
    name = "EMULATOR:71"
    Device._opened[name] = Compiled(name, EmulatorAllocator(), target, EmulatorCompiler(), EmulatorProgram)
    try:
        a, b = _inputs(CUDA_TENSOR_CORES[0], ((64, 32), (32, 16)), seed=5)
        got = (Tensor(a, device=name) @ Tensor(b, device=name)).float().numpy()
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=2e-2, atol=2e-2)
        from uopkit.engine.realize import method_cache

        # (a compiled runner keeps no linear program: it is built again from the kernel's AST)
        specs = [get_program(ast, target) for (ast, device) in method_cache if device == name]
        assert any(_wmmas(s) for s in specs)
    finally:
        Device._opened.pop(name, None)


def test_cpu_style_heuristic_is_unchanged_by_tensor_cores() -> None:
    item = _item(Tensor(np.ones((32, 16), np.float32)) @ Tensor(np.ones((16, 16), np.float32)))
    plain = _renderer([], False)
    with_tc = _renderer(ONE_THREAD_TENSOR_CORES, False)
    assert hand_coded_opts(item.ast, with_tc) == hand_coded_opts(item.ast, plain)
    assert not any(o.op is OptOps.TC for o in hand_coded_opts(item.ast, with_tc))
