"""OptOps.STAGE (a reduce's shared operands staged in local memory, `lowerer.stage_operands`): what apply_opt accepts,
the program it gives (a local buffer per staged operand, barriers around each step), and that staged matmuls of
several shapes, awkward ones included, equal numpy on the emulator with OpenCL's and CUDA's renderer settings (the
emulator also reports any local-memory race, partial barrier or access out of bounds as an error)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from uopkit import Device, Tensor
from uopkit.codegen import get_program, prepare_ast
from uopkit.codegen.opt import Opt, OptError, OptOps, apply_opts
from uopkit.codegen.opt.heuristic import hand_coded_opts
from uopkit.device import Compiled
from uopkit.emulator import EmulatorAllocator, EmulatorCompiler, EmulatorProgram, EmulatorRenderer
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.testing.optfuzz import _run
from uopkit.uop.ops import Ops, UOp

opencl = pytest.importorskip("uopkit_opencl.renderer")
cuda = pytest.importorskip("uopkit_cuda.renderer")
TARGETS = {"OPENCL": lambda: opencl.OpenCLRenderer(opencl.CLCaps()), "CUDA": lambda: cuda.CUDARenderer(cuda.CUDACaps())}


@pytest.fixture(params=list(TARGETS))
def gpu(request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"EMULATOR:{70 + list(TARGETS).index(request.param)}"
    renderer = EmulatorRenderer(TARGETS[request.param]())
    Device._opened[name] = Compiled(name, EmulatorAllocator(), renderer, EmulatorCompiler(), EmulatorProgram)
    yield name
    Device._opened.pop(name, None)


def _matmul_ast(m: int, k: int, n: int) -> UOp:
    t = Tensor.empty(m, k) @ Tensor.empty(k, n)
    return prepare_ast(create_schedule(kernelize_tensors([t]))[-1].ast)


# the matmul's output is (M, N, 1): axis 0 the rows, 1 the columns, 3 the reduce
HEURISTIC_LIKE = [
    Opt(OptOps.UPCAST, 1, 4),
    Opt(OptOps.LOCAL, 1, 16),
    Opt(OptOps.LOCAL, 0, 16),
    Opt(OptOps.UPCAST, 0, 4),
    Opt(OptOps.UNROLL, 3, 4),
    Opt(OptOps.STAGE, 3, 4),
]
SHAPES = {
    # each work-item copies 4 elements of each tile per step (unrolled)
    "64x64x64": ((64, 64, 64), HEURISTIC_LIKE),
    # rows and columns padded to whole work-groups (the padding's rows are gated where read), the reduce padded too
    "33x21x27": (
        (33, 21, 27),
        [Opt(OptOps.PADTO, 0, 8), Opt(OptOps.PADTO, 3, 4), Opt(OptOps.LOCAL, 1, 3), Opt(OptOps.LOCAL, 0, 4)]
        + [Opt(OptOps.UPCAST, 1, 3), Opt(OptOps.STAGE, 3, 2)],
    ),
    # a tile that is not a whole number of work-groups (gated copies), the stage loop outside the unrolled lanes
    "20x30x12": (
        (20, 30, 12),
        [Opt(OptOps.LOCAL, 0, 5), Opt(OptOps.LOCAL, 1, 3), Opt(OptOps.STAGE, 3, 5), Opt(OptOps.UNROLL, 3, 3)],
    ),
    # tiles of many copies per work-item (a copy loop), the whole reduce in one step, or in two
    "8x48x16": ((8, 48, 16), [Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.STAGE, 3, 48), Opt(OptOps.UPCAST, 0, 4)]),
    "8x96x16": ((8, 96, 16), [Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.STAGE, 3, 48), Opt(OptOps.UPCAST, 0, 4)]),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_staged_matmul_equals_numpy(gpu: str, shape: str) -> None:
    (m, k, n), opts = SHAPES[shape]
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    out = Tensor(a, device=gpu).realize() @ Tensor(b, device=gpu).realize()
    item = create_schedule(kernelize_tensors([out]))[-1]
    renderer = Device[gpu].renderer
    assert [u for u in get_program(item.ast, renderer, opts).uops if u.op is Ops.DEFINE_LOCAL], opts
    got = _run(item, gpu, renderer, opts)[0].reshape(m, n)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_rendered_source_stages_both_operands_between_barriers() -> None:
    renderer = TARGETS["OPENCL"]()
    src = get_program(_matmul_ast(64, 64, 64), renderer, HEURISTIC_LIKE).src
    assert isinstance(src, str)
    # a step of 16 reduce elements: 64 rows of A and 64 columns of B
    assert src.count("__local float temp") == 2 and "temp0[1024]" in src and "temp1[1024]" in src, src
    # one barrier after the copies, one before the next step overwrites them
    assert src.count("barrier(CLK_LOCAL_MEM_FENCE)") == 2, src
    body = src[src.index("for (") :]
    assert body.index("temp0[") < body.index("barrier(") < body.rindex("barrier("), src


@pytest.mark.parametrize("target", list(TARGETS))
def test_heuristic_stages_large_float32_matmuls(target: str) -> None:
    renderer = TARGETS[target]()
    assert any(o.op is OptOps.STAGE for o in hand_coded_opts(_matmul_ast(256, 128, 256), renderer))
    # too few rows to pay
    assert not any(o.op is OptOps.STAGE for o in hand_coded_opts(_matmul_ast(32, 128, 256), renderer))
    # local memory that is really global memory (OpenCL on a CPU): the copies and barriers would only cost
    off_chip = type(renderer)()
    off_chip.caps = replace(renderer.caps, shared_on_chip=False)
    assert not any(o.op is OptOps.STAGE for o in hand_coded_opts(_matmul_ast(256, 128, 256), off_chip))


@pytest.mark.parametrize(
    ("opts", "why"),
    [
        ([Opt(OptOps.STAGE, 3, 4)], "needs a LOCAL split first"),
        ([Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.STAGE, 1, 4)], "applies to reduce axes"),
        ([Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 3, 4), Opt(OptOps.STAGE, 3, 4)], "split by GROUP"),
        ([Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.STAGE, 3, 4), Opt(OptOps.GROUP, 3, 4)], "can't also be split by GROUP"),
        ([Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.STAGE, 3, 4), Opt(OptOps.STAGE, 3, 2)], "already staged"),
    ],
)
def test_apply_opt_refuses_stage_where_it_cannot_work(opts: list[Opt], why: str) -> None:
    with pytest.raises(OptError, match=why):
        apply_opts(_matmul_ast(64, 64, 64), opts, TARGETS["OPENCL"]())


def test_stage_fits_the_local_memory() -> None:
    # 64 rows x 64 reduce elements of A and 64 x 64 of B: 32 KB, over a 16 KB device's local memory
    small = opencl.OpenCLRenderer(opencl.CLCaps(local_mem_size=16384))
    opts = [Opt(OptOps.LOCAL, 0, 16), Opt(OptOps.LOCAL, 1, 16), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4)]
    apply_opts(_matmul_ast(64, 128, 64), [*opts, Opt(OptOps.STAGE, 3, 32)], small)
    with pytest.raises(OptError, match="bytes of local memory exceed"):
        apply_opts(_matmul_ast(64, 128, 64), [*opts, Opt(OptOps.STAGE, 3, 64)], small)


def test_triton_has_no_local_memory_to_stage_in() -> None:
    triton = pytest.importorskip("uopkit_triton.renderer")
    with pytest.raises(OptError, match="needs work-groups and local memory"):
        apply_opts(_matmul_ast(64, 64, 64), [Opt(OptOps.STAGE, 3, 4)], triton.TritonRenderer())


def test_heuristic_pads_an_awkward_matmul_to_whole_tiles_and_stages_it(gpu: str) -> None:
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((120, 75)).astype(np.float32), rng.standard_normal((75, 120)).astype(np.float32)
    out = Tensor(a, device=gpu) @ Tensor(b, device=gpu)
    opts = get_program(create_schedule(kernelize_tensors([out]))[-1].ast, Device[gpu].renderer).opts
    # rows and columns to 128 (whole 64-wide tiles), the reduce to 80 (whole steps of 16)
    assert {o for o in opts if o.op is OptOps.PADTO} == {
        Opt(OptOps.PADTO, axis, k) for axis, k in ((0, 64), (1, 64), (3, 16))
    }
    assert any(o.op is OptOps.STAGE for o in opts), opts
    np.testing.assert_allclose(out.numpy(), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
