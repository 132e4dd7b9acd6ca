"""Vector loads and stores on a backend whose vectors need aligned addresses (`RendererCaps.vector_align`, CUDA's
16-byte loads): the core makes a vector access only where it proves the offset aligned, the lanes load one by one
elsewhere, and the emulator reports a misaligned vector access (so a wrong proof fails in CI, not on a GPU)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from uopkit import Device, Tensor, dtypes
from uopkit.codegen import get_program
from uopkit.codegen.expander import Expander, known_multiple
from uopkit.codegen.opt import Opt, OptOps
from uopkit.emulator import EmulatorError, EmulatorRenderer, emulator_device, run_uops
from uopkit.renderer import Renderer, RendererCaps, vector_alignment
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.testing.programs import end, global_buf, idx, load, loop, program, store
from uopkit.uop.ops import Ops, UOp

VECTOR_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV})


class AlignedGPU(Renderer):
    """A GPU-style target like CUDA: vectors of up to 8, 16-byte accesses that must be aligned."""

    device = "ALIGNEDGPU"
    caps = RendererCaps(
        has_local=True,
        has_shared=True,
        local_max=(1024, 1024, 64),
        workgroup_max=1024,
        subgroup_width=32,
        shared_max=48 * 1024,
        max_vector_width=8,
        vector_ops=VECTOR_OPS,
        vector_align=16,
    )


class UnalignedGPU(AlignedGPU):
    """The same with vectors that need only element alignment (OpenCL's vloadN)."""

    caps = replace(AlignedGPU.caps, vector_align=0)


@pytest.fixture
def aligned() -> Iterator[str]:
    name = "EMULATOR:40"
    Device._opened[name] = emulator_device(name, AlignedGPU())
    yield name
    Device._opened.pop(name, None)


def _vector_accesses(uops: tuple[UOp, ...]) -> tuple[list[int], list[int]]:
    """(buffer numbers of the global vector loads, of the global vector stores)."""
    loads = [u.src[0].src[0].arg for u in uops if u.op is Ops.LOAD and u.dtype.count > 1 and _global(u)]
    stores = [u.src[0].src[0].arg for u in uops if u.op is Ops.STORE and u.src[1].dtype.count > 1 and _global(u)]
    return sorted(loads), sorted(stores)


def _global(u: UOp) -> bool:
    return u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL


def _program(t: Tensor, target: Renderer, opts: list[Opt]):  # noqa: ANN202
    """The program of `t`'s last kernel as `target` would get it (built from Tensor.empty inputs)."""
    item = create_schedule(kernelize_tensors([t]))[-1]
    return get_program(item.ast, EmulatorRenderer(target), opts)


def test_alignment_rule() -> None:
    # the largest power of two dividing the access's size, at most the cap; 0: anything goes
    assert vector_alignment(16, 16) == 16 and vector_alignment(16, 32) == 16 and vector_alignment(16, 8) == 8
    assert vector_alignment(16, 12) == 4 and vector_alignment(0, 16) == 1


def test_known_multiple() -> None:
    g = UOp(Ops.SPECIAL, dtypes.index, (idx(8),), "gidx0")
    lane = UOp(Ops.SPECIAL, dtypes.index, (idx(32),), "lidx0")
    assert known_multiple(g * 1024 + lane * 4) == 4
    assert known_multiple(g * 1024 + lane * 4 + 2) == 2
    assert known_multiple((g * 12) % 8) == 4
    assert known_multiple(g * 6 * (lane * 2)) == 12
    assert known_multiple(g + 4) == 1 and known_multiple(idx(0)) == 0


def _shifted(x: Tensor, y: Tensor) -> Tensor:
    return x[1:1025] * y[4:]


def _rows(x: Tensor) -> Tensor:
    return x[: 33 * 31].reshape(33, 31)[:, :28] + 1


def test_aligned_views_get_vectors_and_offset_views_scalar_lanes(aligned: str) -> None:
    opts = [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 32)]
    # data1 = x[1:], at an odd offset: its lanes load one by one; y[4:] is aligned, and so is the output
    # (scheduled for the aligned device: a window's start keeps the alignment its constant start had)
    shifted = _shifted(Tensor.empty(1028, device=aligned), Tensor.empty(1028, device=aligned))
    assert _vector_accesses(_program(shifted, AlignedGPU(), opts).uops) == ([2], [0])
    # where vectors need only element alignment both loads are vectors
    assert _vector_accesses(_program(shifted, UnalignedGPU(), opts).uops) == ([1, 2], [0])
    # rows of an odd length: no row but the first starts aligned, while the output's rows of 28 all do
    rows = _rows(Tensor.empty(1028, device=aligned))
    assert _vector_accesses(_program(rows, AlignedGPU(), [Opt(OptOps.UPCAST, 1, 4)]).uops) == ([], [0])
    # and the results, with the default opts (which vectorize) on the emulator checking every vector's alignment
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(1028).astype(np.float32), rng.standard_normal(1028).astype(np.float32)
    X, Y = Tensor(x, device=aligned), Tensor(y, device=aligned)
    np.testing.assert_array_equal(_shifted(X, Y).numpy(), _shifted(x, y))  # type: ignore[arg-type]
    np.testing.assert_array_equal(_rows(X).numpy(), x[: 33 * 31].reshape(33, 31)[:, :28] + 1)


@pytest.mark.parametrize("n", [1028, 1030])
def test_padded_length(aligned: str, n: int) -> None:
    """An axis padded to whole work-groups: its gate `i + lane < n` is the same in every lane of a vector when n is a
    multiple of the width (vector loads and stores, gated as a whole), else the lanes go one by one."""
    opts = [Opt(OptOps.PADTO, 0, 128), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 32)]
    expected = ([1], [0]) if n % 4 == 0 else ([], [])
    spec = _program(Tensor.empty(n) * 2 + 1, AlignedGPU(), opts)
    assert _vector_accesses(spec.uops) == expected
    x, got = np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
    run_uops(list(spec.uops), [got, x], vector_align=16)
    np.testing.assert_array_equal(got, x * 2 + 1)


def test_a_wrong_proof_is_caught_by_the_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Expander, "_aligned", lambda self, index: True)
    x = Tensor.empty(260)
    spec = _program(x[1:257] * 2, AlignedGPU(), [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 16)])
    bufs = [np.zeros(256, np.float32), np.zeros(260, np.float32)]
    # x[1:257] is a window of x: its start, element 1, is the kernel's launch value
    assert [v.arg[0] for v in spec.vars] == ["window1"]
    with pytest.raises(
        EmulatorError,
        match=r"LOAD of 4 elements misaligned: element 1 of global data1 is at byte offset 4, not a multiple of 16 "
        r"\(op \d+, work-item gidx=\(0, 0, 0\) lidx=\(0, 0, 0\)\)",
    ):
        run_uops(list(spec.uops), bufs, vals=(1,), vector_align=16)


def test_emulator_checks_vector_alignment() -> None:
    out, a = global_buf(0, dtypes.float32, 20), global_buf(1, dtypes.float32, 18)
    i = loop(0, 4)
    vec = dtypes.float32.vec(4)
    uops = program(end(store(out, i * 4, load(a, i * 4 + 2, dtype=vec)), i))
    data, got = np.arange(18, dtype=np.float32), np.zeros(20, np.float32)
    # element alignment is enough without a vector_align
    run_uops(uops, [got, data])
    np.testing.assert_array_equal(got[:16], data[2:])
    with pytest.raises(
        EmulatorError,
        match=r"LOAD of 4 elements misaligned: element 2 of global data1 is at byte "
        r"offset 8, not a multiple of 16",
    ):
        run_uops(uops, [got, data], vector_align=16)
    # 8 bytes (a float2) need 8-byte alignment only
    uops2 = program(end(store(out, i * 2, load(a, i * 2 + 2, dtype=dtypes.float32.vec(2))), i))
    run_uops(uops2, [got, data], vector_align=16)
    # a store, and lanes gated off are not checked
    gate = i.lt(1)
    stored = store(out, i * 4 + 1, load(a, i * 4, dtype=vec))
    with pytest.raises(EmulatorError, match=r"STORE of 4 elements misaligned: element 1 of global data0"):
        run_uops(program(end(stored, i)), [got, data], vector_align=16)
    gated = store(out, gate.where(i * 4, i * 4 + 1), load(a, i * 4, dtype=vec), gate=gate)
    run_uops(program(end(gated, i)), [got, data], vector_align=16)
