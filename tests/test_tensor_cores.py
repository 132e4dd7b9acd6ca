"""TensorCore descriptions: validation, their layouts, and WMMA matmuls run through the emulator for each one."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from uopkit.dtype import dtypes, to_numpy_dtype
from uopkit.emulator import run_uops
from uopkit.renderer import Renderer, TensorCore, TileLayout
from uopkit.renderer.tensor_cores import (
    AMD_RDNA3_TENSOR_CORES,
    CUDA_TENSOR_CORES,
    IN_TREE_TENSOR_CORES,
    TensorCoreError,
    fragment_coords,
    fragments_to_tile,
    tile_to_fragments,
    validate_for_renderer,
    wmma_matmul_program,
)
from uopkit.uop.ops import Ops

ALL = [tc for tcs in IN_TREE_TENSOR_CORES.values() for tc in tcs]


@pytest.mark.parametrize("tc", ALL, ids=[tc.name for tc in ALL])
@pytest.mark.parametrize("tiles", [(1, 1, 1), (2, 3, 2)])
def test_wmma_matmul_through_emulator(tc: TensorCore, tiles: tuple[int, int, int]) -> None:
    m, n, k = (d * t for d, t in zip(tc.dims, tiles, strict=True))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(to_numpy_dtype(tc.dtype_in))
    b = rng.standard_normal((k, n)).astype(to_numpy_dtype(tc.dtype_in))
    out = np.zeros((m, n), to_numpy_dtype(tc.dtype_out))
    uops = wmma_matmul_program(tc, tiles)
    assert sum(u.op is Ops.WMMA for u in uops) == 1
    run_uops(uops, [out, a, b])
    expected = a.astype(np.float64) @ b.astype(np.float64)
    tol = 2e-2 if tc.dtype_out == dtypes.float16 else 1e-5
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)


def test_cuda_layout_matches_ptx() -> None:
    # PTX mma.m16n8k16 .f16: groupID = lane >> 2, threadID_in_group = lane % 4
    tc = CUDA_TENSOR_CORES[0]
    for lane in range(32):
        group, tig = lane >> 2, lane % 4
        for i in range(8):
            row = group + 8 * ((i >> 1) & 1)
            col = tig * 2 + (i & 1) + (8 if i >= 4 else 0)
            assert tc.a_layout.coord(lane, i) == (row, col)
        for i in range(4):
            assert tc.b_layout.coord(lane, i) == (tig * 2 + (i & 1) + (8 if i >= 2 else 0), group)
            assert tc.c_layout.coord(lane, i) == (group + (8 if i >= 2 else 0), tig * 2 + (i & 1))


def test_rdna3_layout_and_replication() -> None:
    tc = AMD_RDNA3_TENSOR_CORES[0]
    for lane in range(32):
        for v in range(8):
            assert tc.c_layout.coord(lane, v) == (2 * v + lane // 16, lane % 16)
    tile = np.arange(256, dtype=np.float32).reshape(16, 16)
    frags = tile_to_fragments(tc, 0, tile)
    # lanes 16-31 hold copies of lanes 0-15
    np.testing.assert_array_equal(frags[:16], frags[16:])
    np.testing.assert_array_equal(fragments_to_tile(tc, 0, frags), tile)


@pytest.mark.parametrize("tc", ALL, ids=[tc.name for tc in ALL])
def test_fragments_roundtrip_and_cover(tc: TensorCore) -> None:
    for operand, shape in enumerate([(tc.dims[0], tc.dims[2]), (tc.dims[2], tc.dims[1]), tc.dims[:2]]):
        rows, cols = fragment_coords(tc, operand)
        covered = np.zeros(shape, bool)
        covered[rows, cols] = True
        assert covered.all(), f"{tc.name} operand {operand} leaves tile elements unowned"
        tile = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
        np.testing.assert_array_equal(fragments_to_tile(tc, operand, tile_to_fragments(tc, operand, tile)), tile)


def test_emulator_follows_the_description() -> None:
    """A WMMA whose description disagrees with how its fragments were loaded gives a wrong product: the emulator
    executes the layout it is given, it does not guess."""
    tc = CUDA_TENSOR_CORES[0]
    wrong = dataclasses.replace(
        tc, a_layout=TileLayout(("t2", "t3", "t4", "e2"), ("e0", "t0", "t1", "e1")), name="wrong"
    )
    uops = wmma_matmul_program(tc, (1, 1, 1))
    rebuilt: dict = {}
    for u in uops:
        new = u.replace(src=tuple(rebuilt.get(s, s) for s in u.src))
        rebuilt[u] = new.replace(arg=wrong) if u.op is Ops.WMMA else new
    swapped = [rebuilt[u] for u in uops]
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((16, 16)).astype(np.float16), rng.standard_normal((16, 8)).astype(np.float16)
    out = np.zeros((16, 8), np.float32)
    run_uops(swapped, [out, a, b])
    assert not np.allclose(out, a.astype(np.float32) @ b.astype(np.float32), atol=1e-2)


def _tc(**changes: object) -> TensorCore:
    base = dict(
        dims=(4, 4, 4),
        dtype_in=dtypes.float32,
        dtype_out=dtypes.float32,
        threads=4,
        elements_per_thread=(4, 4, 4),
        a_layout=TileLayout(("t0", "t1"), ("e0", "e1")),
        b_layout=TileLayout(("e0", "e1"), ("t0", "t1")),
        c_layout=TileLayout(("t0", "t1"), ("e0", "e1")),
    )
    base.update(changes)
    return TensorCore(**base)  # type: ignore[arg-type]


def test_a_valid_small_description() -> None:
    tc = _tc()
    assert tc.name == "WMMA_4_4_4_float_float" and tc.validate() is tc


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"dims": (4, 3, 4)}, "dim N must be a positive power of two, got 3"),
        ({"threads": 6}, "threads must be a positive power of two"),
        ({"elements_per_thread": (4, 4)}, "elements_per_thread must be (A, B, C)"),
        ({"dtype_in": dtypes.float32.vec(2)}, "dtype_in must be a scalar dtype"),
        ({"a_layout": TileLayout(("t0",), ("e0", "e1"))}, "A layout: rows names 1 bits, but 4 rows need 2"),
        ({"a_layout": TileLayout(("t0", "t0"), ("e0", "e1"))}, "A layout: bits ['t0'] are used twice"),
        ({"b_layout": TileLayout(("e0", "e1"), ("t0", "x1"))}, "B layout: bit 'x1' does not exist"),
        ({"b_layout": TileLayout(("e0", "e1"), ("t0", "t2"))}, "B layout: bit 't2' does not exist"),
        ({"elements_per_thread": (8, 4, 4)}, "A layout: element bits ['e2'] are unused"),
        ({"c_layout": ("t0", "t1")}, "C layout: expected a TileLayout"),
    ],
)
def test_invalid_descriptions_are_refused(changes: dict, message: str) -> None:
    with pytest.raises(TensorCoreError, match=_escape(message)):
        _tc(**changes)


def test_c_needs_exactly_one_owner_per_element() -> None:
    # 8 threads x 4 elements of C = 32 slots for a 16-element tile: t2 would replicate C, which is not allowed
    with pytest.raises(TensorCoreError, match="each element of C needs one owner"):
        _tc(
            threads=8,
            a_layout=TileLayout(("t0", "t1"), ("e0", "e1")),
            b_layout=TileLayout(("e0", "e1"), ("t0", "t1")),
            c_layout=TileLayout(("t0", "t1"), ("e0", "e1")),
        )


def _escape(text: str) -> str:
    import re

    return re.escape(text)


class NoLocals(Renderer):
    device = "NOLOCALS"
    tensor_cores = CUDA_TENSOR_CORES


class GPUish(Renderer):
    device = "GPUISH"
    has_local = True
    local_max = (1024, 1024, 64)
    tensor_cores = CUDA_TENSOR_CORES + AMD_RDNA3_TENSOR_CORES


class NoHalf(GPUish):
    supported_dtypes = (dtypes.float32,)


def test_validate_for_renderer() -> None:
    validate_for_renderer(GPUish())
    with pytest.raises(TensorCoreError, match="needs 32 threads per tile, but the renderer has no local threads"):
        validate_for_renderer(NoLocals())
    with pytest.raises(TensorCoreError, match="uses dtypes.half, which the renderer's supported_dtypes does not list"):
        validate_for_renderer(NoHalf())
