"""Work-group reductions on GPU-style renderers (issue 10): the tree combine of GROUP partials in local memory, and
the opts the GPU heuristic picks for reductions. Structure only (no timings); values on the emulator, which also
fails on local-memory races, partial barriers and out-of-bounds accesses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uopkit import Device, Tensor
from uopkit.codegen import get_program
from uopkit.codegen.lowerer import tree_strides
from uopkit.codegen.opt import Opt, OptOps, apply_opts, initial_plan
from uopkit.codegen.opt.heuristic import hand_coded_opts
from uopkit.codegen.plan import grid_dims, work_group_dims
from uopkit.renderer import RendererCaps
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.schedule.splitting import CPU_RULE, gpu_rule, split_parts
from uopkit.uop.ops import Ops, UOp

from .test_heuristic_gpu import _targets, gpu  # noqa: F401 - the fixture, an emulator with OpenCL's or CUDA's caps


def _asts(t: Tensor) -> list[UOp]:
    return [item.ast for item in create_schedule(kernelize_tensors([t]))]


def test_tree_strides_halve_from_half_the_next_power_of_two() -> None:
    assert tree_strides(1) == []
    assert tree_strides(2) == [1]
    assert tree_strides(5) == [4, 2, 1]
    assert tree_strides(8) == [4, 2, 1]
    assert tree_strides(256) == [128, 64, 32, 16, 8, 4, 2, 1]


@pytest.mark.parametrize("target", ["OPENCL", "CUDA"])
@pytest.mark.parametrize("threads", [5, 16, 256])
def test_group_partials_combine_as_a_tree_with_log2_barriers(target: str, threads: int) -> None:
    # one barrier after the partials are written, then one per halving step: ceil(log2(threads)) of them
    ast = _asts(Tensor.empty(8, 1280).sum(1))[-1]
    red = initial_plan(ast).n_out
    uops = get_program(ast, _targets()[target], [Opt(OptOps.GROUP, red, threads)]).uops
    barriers = [u for u in uops if u.op is Ops.BARRIER]
    assert len(barriers) == 1 + (threads - 1).bit_length(), [u.op for u in uops]
    # no loop over the partials: the only loop left is the work-item's own share of the row
    assert sum(u.op is Ops.RANGE for u in uops) == 1


@pytest.mark.parametrize(
    "what",
    ["int_sum", "max_nan", "bool_any"],
)
def test_tree_combine_of_a_padded_group_is_exact(gpu: str, what: str) -> None:  # noqa: F811
    # on the emulator: int sums exact, NaN kept, bools
    rng = np.random.default_rng(0)
    if what == "int_sum":
        x = rng.integers(-(2**20), 2**20, (6, 70)).astype(np.int32)
        t, want = Tensor(x, device=gpu).sum(1), x.sum(1)
    elif what == "max_nan":
        x = rng.standard_normal((6, 70)).astype(np.float32)
        x[2, 69] = x[4, 0] = np.nan
        t, want = Tensor(x, device=gpu).max(axis=1), x.max(1)
    else:
        x = rng.standard_normal((6, 70)) > 1.8
        t, want = Tensor(x, device=gpu).any(1), x.any(1)
    (item,) = create_schedule(kernelize_tensors([t]))
    red = initial_plan(item.ast).n_out
    # 5, 7 and 6 work-items (a row of 70 padded to 72 for the last): trees padded to 8
    for opts in (
        [Opt(OptOps.GROUP, red, 5)],
        [Opt(OptOps.GROUPTOP, red, 7)],
        [Opt(OptOps.PADTO, red, 3), Opt(OptOps.GROUP, red, 6)],
    ):
        np.testing.assert_array_equal(_run(item, gpu, opts), want, err_msg=str(opts))


def _run(item, device: str, opts: list[Opt]) -> np.ndarray:  # noqa: ANN001
    from uopkit.engine.realize import _buffer_for

    dev = Device[device]
    spec = get_program(item.ast, dev.renderer, opts)
    assert any(u.op is Ops.BARRIER for u in spec.uops)
    prg = dev.runtime(spec.name, dev.compiler.compile_cached(spec.src))
    bufs = [_buffer_for(b) for b in item.bufs]
    prg(*[b.opaque for b in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
    return bufs[0].numpy().copy()


def test_apply_opt_rejects_a_grid_over_global_max() -> None:
    from dataclasses import replace

    from uopkit.codegen.opt import OptError

    renderer = _targets()["OPENCL"]
    renderer.caps = replace(renderer.caps, global_max=(1000, 64, 64))
    ast = _asts(Tensor.empty(20, 1000) * 2)[-1]
    assert grid_dims(apply_opts(ast, [], renderer)) == [1000, 20]
    # padding the 1000 columns to 1008 would launch 1008 work-groups along dimension 0
    with pytest.raises(OptError, match="grid dimension 0 of 1008 work-groups exceeds the renderer's global_max 1000"):
        apply_opts(ast, [Opt(OptOps.PADTO, 1, 24)], renderer)
    assert grid_dims(apply_opts(ast, [Opt(OptOps.PADTO, 1, 24), Opt(OptOps.LOCAL, 1, 8)], _targets()["OPENCL"])) == [
        126,
        20,
    ]
    # a grid already over the limit without opts is the renderer's to launch: opts on it are not refused for it
    wide = _asts(Tensor.empty(100, 1000) * 2)[-1]
    assert apply_opts(wide, [Opt(OptOps.UPCAST, 1, 4)], renderer).opts == (Opt(OptOps.UPCAST, 1, 4),)


def test_a_whole_tensor_reduce_on_a_gpu_renderer_runs_on_hundreds_of_work_groups(gpu: str) -> None:  # noqa: F811
    renderer = Device[gpu].renderer
    for t in (Tensor.empty(8192, 4096, device=gpu).sum(), Tensor.empty(8192, 4096, device=gpu).max()):
        items = create_schedule(kernelize_tensors([t]))
        # the partial reduces, then one small kernel combines them
        assert len(items) == 2
        launched = [math.prod(get_program(item.ast, renderer).global_size) for item in items]
        assert launched[0] >= 256 and launched[1] == 1, launched
    # the split follows the renderer's work-group limit: narrower work-groups, more of them
    wide, narrow = gpu_rule(renderer.caps), gpu_rule(RendererCaps(has_local=True, local_max=(64,)))
    assert narrow.blocks == 4 * wide.blocks and narrow.min_slice * 4 == wide.min_slice
    assert split_parts(1, 8192 * 4096, wide) >= 256 and split_parts(1, 8192 * 4096) == 64
    # a reduce into many outputs already has its work-groups, a short one is not worth a second kernel
    assert split_parts(4096, 8192, wide) == 1 and split_parts(1, 1 << 16, wide) == 1
    assert CPU_RULE.tile > wide.tile == 1


@pytest.mark.parametrize("target", ["OPENCL", "CUDA"])
def test_column_sum_gets_local_columns_and_grouped_rows(target: str) -> None:
    # LOCAL along the contiguous columns, GROUP over the rows: the adjacent work-items of a work-group read a whole
    # 128-byte line of each row (8 work-items x float4 on both, CUDA's float4 loads proven aligned)
    renderer = _targets()[target]
    ast = _asts(Tensor.empty(8192, 4096).sum(0))[-1]
    plan = apply_opts(ast, hand_coded_opts(ast, renderer), renderer)
    kinds = [p.kind for p in plan.axis_parts(1)]
    assert kinds[-1] == "upcast" and "local" in kinds, plan.opts
    line = math.prod(p.size for p in plan.axis_parts(1) if p.kind in ("local", "upcast")) * 4
    assert line == 128, plan.opts
    assert any(p.kind == "group" for p in plan.axis_parts(2)) and len(work_group_dims(plan)) == 2, plan.opts
    assert math.prod(work_group_dims(plan)) == 256


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_local_and_grouped_column_sum_values(gpu: str, dtype: type) -> None:  # noqa: F811
    # 300 rows: padded to whole groups of rows; 64 columns: two lines
    x = np.random.default_rng(0).standard_normal((300, 64)) * 100
    x = x.astype(dtype)
    t = Tensor(x, device=gpu).sum(0)
    (item,) = create_schedule(kernelize_tensors([t]))
    opts = get_program(item.ast, Device[gpu].renderer).opts
    assert {OptOps.LOCAL, OptOps.GROUP, OptOps.PADTO} <= {o.op for o in opts}, opts
    np.testing.assert_allclose(t.numpy(), x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-2)


@pytest.mark.parametrize("target", ["OPENCL", "CUDA"])
def test_many_rows_narrower_than_a_work_group_share_one(target: str) -> None:
    renderer = _targets()[target]
    ast = _asts(Tensor.empty(8192, 4096).sum(1))[-1]
    plan = apply_opts(ast, hand_coded_opts(ast, renderer), renderer)
    # each row's work-items side by side (GROUP), several rows per work-group (LOCAL), hundreds of work-groups
    assert any(p.kind == "group" for p in plan.axis_parts(2)), plan.opts
    assert any(p.kind == "local" for p in plan.axis_parts(0)), plan.opts
    assert math.prod(work_group_dims(plan)) == 256 and math.prod(grid_dims(plan)) >= 256, plan.opts
    # a few long rows (softmax's) keep one work-group per row
    few = _asts(Tensor.empty(3, 100003).sum(1))[-1]
    assert not any(p.kind == "local" for p in apply_opts(few, hand_coded_opts(few, renderer), renderer).out[0])


def test_local_rows_values(gpu: str) -> None:  # noqa: F811
    x = np.random.default_rng(0).standard_normal((2048, 128)).astype(np.float32)
    t = Tensor(x, device=gpu).sum(1)
    (item,) = create_schedule(kernelize_tensors([t]))
    opts = get_program(item.ast, Device[gpu].renderer).opts
    assert {OptOps.LOCAL, OptOps.GROUP} <= {o.op for o in opts}, opts
    np.testing.assert_allclose(t.numpy(), x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)
