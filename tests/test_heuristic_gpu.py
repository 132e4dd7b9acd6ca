"""The GPU heuristic (codegen/opt/heuristic_gpu.py) and row reduces on GPU-style renderers: which opts it picks
(their structure, from the renderer's caps), and that the kernels compute the right values on the emulator with
OpenCL's and CUDA's renderer settings."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest

from uopkit import Device, Tensor, dtypes
from uopkit.codegen import get_program
from uopkit.codegen.opt import Opt, OptOps, apply_opts
from uopkit.codegen.opt.heuristic import hand_coded_opts
from uopkit.emulator import emulator_device
from uopkit.renderer import Renderer
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.schedule.grouper import fuses_row_reduces
from uopkit.uop.ops import Ops, UOp

opencl = pytest.importorskip("uopkit_opencl.renderer")
cuda = pytest.importorskip("uopkit_cuda.renderer")


def _targets() -> dict[str, Renderer]:
    # fixed caps (not the local device's): OpenCL with vectors and no subgroup size, CUDA with warps of 32 and vectors
    # that need aligned addresses
    return {"OPENCL": opencl.OpenCLRenderer(opencl.CLCaps()), "CUDA": cuda.CUDARenderer(cuda.CUDACaps())}


@pytest.fixture(params=["OPENCL", "CUDA"])
def gpu(request: pytest.FixtureRequest) -> Iterator[str]:
    """An emulator device that builds the programs OpenCL's (or CUDA's) renderer would get, and runs them."""
    name = f"EMULATOR:{60 + ['OPENCL', 'CUDA'].index(request.param)}"
    Device._opened[name] = emulator_device(name, _targets()[request.param])
    yield name
    Device._opened.pop(name, None)


def _asts(t: Tensor) -> list[UOp]:
    return [item.ast for item in create_schedule(kernelize_tensors([t]))]


def _global_loads(uops: tuple[UOp, ...]) -> int:
    """Loads of global memory the whole launch executes: each LOAD of a DEFINE_GLOBAL once per iteration of the loops
    around it, in every work-item (a vector load counts once)."""
    items = math.prod(u.src[0].arg for u in uops if u.op is Ops.SPECIAL)
    trips: list[int] = []
    total = 0
    for u in uops:
        if u.op is Ops.RANGE:
            trips.append(u.src[0].arg)
        elif u.op is Ops.END:
            trips.pop()
        elif u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL:
            total += math.prod(trips)
    return total * items


def test_softmax_on_a_gpu_style_renderer_reads_each_row_a_few_times(gpu: str) -> None:
    # fused into the output's kernel, every work-item (one per element) would compute its row's max and sum again:
    # 2 * 1003 loads per work-item. Stored by kernels of their own (work-group reductions), the whole softmax reads
    # each element a few times
    x = np.random.default_rng(0).standard_normal((3, 1003)).astype(np.float32)
    t = Tensor(x, device=gpu).softmax(-1)
    asts = _asts(t)
    renderer = Device[gpu].renderer
    loads = [_global_loads(get_program(ast, renderer).uops) for ast in asts]
    # each kernel reads x once (plus the row's max and sum: padded to whole work-group blocks at most 1/8 more)
    assert all(n <= 3 * 1003 * 3 for n in loads), loads
    assert len(asts) == 3
    reduces = [get_program(ast, renderer).opts for ast in asts[:2]]
    assert all(any(o.op is OptOps.GROUP for o in opts) for opts in reduces), reduces
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(t.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def _loop_loads(uops: tuple[UOp, ...]) -> tuple[list[UOp], list[UOp]]:
    """The loads of global memory inside the kernel's loops, and those outside them."""
    depth, inside, outside = 0, [], []
    for u in uops:
        depth += (u.op is Ops.RANGE) - (u.op is Ops.END)
        if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL:
            (inside if depth else outside).append(u)
    return inside, outside


def test_padded_row_reduces_check_bounds_only_after_their_loop(gpu: str) -> None:
    # softmax over a prime length: its reduces are padded to whole work-group blocks. Only the last block reads past
    # the row: the loop over the others loads with no bounds check (whole vectors where the renderer has them), the
    # last block, after the loop, with one
    x = np.random.default_rng(0).standard_normal((3, 100003)).astype(np.float32)
    t = Tensor(x, device=gpu).softmax(-1)
    renderer = Device[gpu].renderer
    # (CUDA's vectors need aligned addresses: rows 100003 long start at odd offsets, so its loads stay scalar)
    vectors = bool(renderer.caps.vector_ops) and not renderer.caps.vector_align
    for ast in _asts(t)[:2]:
        prg = get_program(ast, renderer)
        assert any(o.op is OptOps.PADTO for o in prg.opts), prg.opts
        inside, outside = _loop_loads(prg.uops)
        row = [u for u in inside if u.dtype.count > 1 or not vectors]
        assert row and all(len(u.src[0].src) == 2 for u in inside), prg.src
        assert any(len(u.src[0].src) == 3 for u in outside), prg.src
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(t.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_cpu_fuses_the_row_reduce_and_gpu_style_does_not(gpu: str) -> None:
    assert fuses_row_reduces("CPU") and not fuses_row_reduces(gpu)


def _opts(t: Tensor, target: str) -> list[Opt]:
    return hand_coded_opts(_asts(t)[-1], _targets()[target])


def _parts(opts: list[Opt], ast: UOp, target: str, axis: int) -> list[str]:
    return [p.kind for p in apply_opts(ast, opts, _targets()[target]).axis_parts(axis)]


@pytest.mark.parametrize("target", ["OPENCL", "CUDA"])
def test_matmul_gets_a_work_group_tile_and_register_tiles_on_both_axes(target: str) -> None:
    a, b = Tensor.empty(256, 128), Tensor.empty(128, 256)
    ast = _asts(a @ b)[-1]
    opts = hand_coded_opts(ast, _targets()[target])
    for axis in (0, 1):
        kinds = _parts(opts, ast, target, axis)
        assert "upcast" in kinds and "local" in kinds, (axis, opts)
    # the reduce axis follows the output axes (the output is (256, 256, 1))
    assert any(o.op is OptOps.UNROLL and o.axis == 3 for o in opts), opts
    # both render vectors: the first UPCAST (the vector) is along the contiguous columns, the work-item's 4 columns
    # are adjacent
    first = next(o for o in opts if o.op is OptOps.UPCAST)
    assert first.axis == 1
    assert _parts(opts, ast, target, 1)[-1] == "upcast"


def test_half_matmul_goes_to_the_tensor_cores() -> None:
    a, b = Tensor.empty(128, 64, dtype=dtypes.float16), Tensor.empty(64, 128, dtype=dtypes.float16)
    opts = _opts((a @ b).float(), "CUDA")
    assert opts[0].op is OptOps.TC, opts


@pytest.mark.parametrize("target", ["OPENCL", "CUDA"])
def test_row_sum_is_a_coalesced_work_group_reduction(target: str) -> None:
    ast = _asts(Tensor.empty(64, 4096).sum(1))[-1]
    opts = hand_coded_opts(ast, _targets()[target])
    # the work-group's work-items side by side along the row: the GROUP part is the innermost but for a vector
    kinds = _parts(opts, ast, target, 2)
    assert kinds[-1] == "group" or kinds[-2:] == ["group", "upcast"], (kinds, opts)
    assert any(o.op is OptOps.GROUP and o.amount >= 32 for o in opts), opts


def test_a_reduce_of_a_costly_op_takes_two_vectors_a_step(gpu: str) -> None:
    # softmax's sum of exp spends its time on the exp's arithmetic: two vectors per work-item and step where the
    # renderer has vectors; its max (a compare per element) stays at one vector
    renderer = Device[gpu].renderer
    asts = _asts(Tensor.empty(3, 4096, device=gpu).softmax(-1))
    lanes = [math.prod(o.amount for o in hand_coded_opts(ast, renderer) if o.op is OptOps.UPCAST) for ast in asts[:2]]
    assert lanes == ([4, 8] if renderer.caps.vector_ops else [1, 1]), lanes


@pytest.mark.parametrize("target", ["OPENCL", "CUDA"])
def test_column_sum_splits_the_rows_over_a_work_group_and_reads_whole_sectors(target: str) -> None:
    # (too few columns for a line of adjacent work-items: tests/test_gpu_reduce.py has the LOCAL + GROUP form)
    ast = _asts(Tensor.empty(4096, 24).sum(0))[-1]
    opts = hand_coded_opts(ast, _targets()[target])
    assert any(o.op is OptOps.GROUP and o.axis == 2 for o in opts), opts
    # 8 adjacent columns per work-item
    assert math.prod(o.amount for o in opts if o.op is OptOps.UPCAST and o.axis == 1) == 8, opts


@pytest.mark.parametrize("target", ["OPENCL", "CUDA"])
def test_elementwise_gets_vectors_and_several_elements_per_work_item(target: str) -> None:
    ast = _asts(Tensor.empty(1024, 1024) * 2 + 1)[-1]
    opts = hand_coded_opts(ast, _targets()[target])
    # a vector of 4 floats per work-item, the work-group's work-items side by side; a million elements leave too few
    # work-groups to give each work-item more
    assert opts == [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.LOCAL, 1, 256)], opts
    # the 64M elements on a GPU (warps of 32: CUDA, NVIDIA's OpenCL): 4 vectors per work-item, each a
    # work-group apart (one contiguous run per warp load)
    renderer = _targets()[target]
    if target == "OPENCL":
        renderer = opencl.OpenCLRenderer(opencl.CLCaps(subgroup_width=32))
    a, b, c = (Tensor.empty(1 << 26) for _ in range(3))
    big = _asts((a * b + c).relu() * 2)[-1]
    plan = apply_opts(big, hand_coded_opts(big, renderer), renderer)
    assert [(p.kind, p.size) for p in plan.axis_parts(0)] == [
        ("loop", (1 << 26) // (4 * 256 * 4)),
        ("upcast", 4),
        ("local", 256),
        ("upcast", 4),
    ], plan.opts
    # doubles (no 16-byte vector of 4): scalar elements a work-group apart
    d = Tensor.empty(1 << 22, dtype=dtypes.float64)
    plan = apply_opts(_asts(d * 2)[-1], hand_coded_opts(_asts(d * 2)[-1], renderer), renderer)
    assert [p.kind for p in plan.axis_parts(0)] == ["loop", "upcast", "local"], plan.opts


def test_elementwise_on_a_cpu_opencl_keeps_one_vector_per_work_item() -> None:
    # no warps (PoCL: subgroup_width 1): more work per work-item only costs there
    a, b, c = (Tensor.empty(1 << 26) for _ in range(3))
    opts = _opts((a * b + c).relu() * 2, "OPENCL")
    assert opts == [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 256)], opts


@pytest.mark.parametrize("target", ["OPENCL", "CUDA"])
def test_elementwise_of_a_prime_length_is_padded_to_whole_work_groups(target: str) -> None:
    ast = _asts(Tensor.empty(3, 100003) * 2)[-1]
    plan = apply_opts(ast, hand_coded_opts(ast, _targets()[target]), _targets()[target])
    assert plan.opts[0].op is OptOps.PADTO and plan.opts[0].axis == 1, plan.opts
    threads = math.prod(p.size for parts in plan.out for p in parts if p.kind == "local")
    assert threads >= 64, plan.opts
    # its bounds check differs element by element, so no whole vectors: the work-items side by side (each load
    # instruction reads one contiguous run), a work-item's elements a work-group apart
    assert [p.kind for p in plan.axis_parts(1)][-1] == "local", plan.opts


def test_work_groups_fit_the_renderers_limits() -> None:
    small = opencl.OpenCLRenderer(opencl.CLCaps(max_work_group_size=64, max_work_item_sizes=(64, 64, 64)))
    for t in (
        Tensor.empty(256, 128) @ Tensor.empty(128, 256),
        Tensor.empty(64, 4096).sum(1),
        Tensor.empty(512, 512) + 1,
    ):
        ast = _asts(t)[-1]
        plan = apply_opts(ast, hand_coded_opts(ast, small), small)
        threads = math.prod(p.size for parts in plan.out + plan.red for p in parts if p.kind in ("local", "group"))
        assert 1 < threads <= 64, plan.opts


CASES = {
    "matmul": lambda r, d: (Tensor(r(96, 80), device=d) @ Tensor(r(80, 72), device=d), lambda a, b: a @ b),
    "matmul_fp16": lambda r, d: (
        (Tensor(r(64, 48).astype(np.float16), device=d) @ Tensor(r(48, 32).astype(np.float16), device=d)).float(),
        lambda a, b: a.astype(np.float64) @ b.astype(np.float64),
    ),
    "sum0": lambda r, d: (Tensor(r(700, 24), device=d).sum(0), lambda a: a.sum(0)),
    "sum1": lambda r, d: (Tensor(r(24, 700), device=d).sum(1), lambda a: a.sum(1)),
    "max_all": lambda r, d: (Tensor(r(300, 130), device=d).max(), lambda a: a.max()),
    "conv2d": lambda r, d: (
        Tensor(r(2, 3, 10, 10), device=d).conv2d(Tensor(r(8, 3, 3, 3), device=d), padding=1),
        None,
    ),
    "elementwise": lambda r, d: ((Tensor(r(64, 128), device=d) * 3 + 1).relu(), lambda a: np.maximum(a * 3 + 1, 0)),
    "elementwise_prime": lambda r, d: (Tensor(r(2, 4099), device=d) * 3 - 1, lambda a: a * 3 - 1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_heuristic_opts_compute_the_right_values(gpu: str, case: str) -> None:
    rng = np.random.default_rng(1)
    inputs: list[np.ndarray] = []

    def r(*shape: int) -> np.ndarray:
        inputs.append(rng.standard_normal(shape).astype(np.float32))
        return inputs[-1]

    t, ref = CASES[case](r, gpu)
    got = t.numpy()
    if ref is None:
        torch = pytest.importorskip("torch")
        x, w = (torch.tensor(a, dtype=torch.float64) for a in inputs)
        expected = torch.nn.functional.conv2d(x, w, padding=1).numpy()
    else:
        expected = ref(*(a.astype(np.float64) if case != "matmul_fp16" else a for a in inputs))
    tol = 2e-2 if case == "matmul_fp16" else 1e-4
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_a_gather_is_loads_at_the_index_and_keeps_the_bits(gpu: str, dtype: type) -> None:
    # a gather's one-hot sum folds into a load at the index while its axis stays one loop: split over a work-group
    # (GROUP) it was a real sum of n selects per element, and a picked -0.0 came back +0.0 (sort, topk, kthvalue and
    # the rest pick their values by a gather)
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 300)).astype(dtype)
    x[:, ::3] = -0.0
    index = np.stack([rng.permutation(300) for _ in range(2)]).astype(np.int32)
    t = Tensor(x, device=gpu).gather(1, Tensor(index, device=gpu))
    opts = hand_coded_opts(_asts(t)[-1], Device[gpu].renderer)
    want = torch.tensor(x).gather(1, torch.tensor(index).long()).numpy()
    np.testing.assert_array_equal(np.signbit(t.numpy()), np.signbit(want))
    np.testing.assert_array_equal(t.numpy(), want)
    assert not any(o.op is OptOps.GROUP for o in opts), opts
    v, i = Tensor(x, device=gpu).sort(-1, descending=True)
    tv, ti = torch.tensor(x).sort(dim=-1, descending=True, stable=True)
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    np.testing.assert_array_equal(np.signbit(v.numpy()), np.signbit(tv.numpy()))
