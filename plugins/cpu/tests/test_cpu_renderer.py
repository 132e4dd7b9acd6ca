"""The C renderer on the CPU: one-thread tensor cores rendered through the engine's default WMMA helper."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit.device import Device
from uopkit.dtype import to_numpy_dtype
from uopkit.renderer import RendererCaps
from uopkit.renderer.tensor_cores import ONE_THREAD_TENSOR_CORES
from uopkit.testing.programs import run_program, wmma_matmul_program
from uopkit_cpu.renderer import ClangRenderer


class TCClangRenderer(ClangRenderer):
    caps = RendererCaps(**{**vars(ClangRenderer.caps), "tensor_cores": tuple(ONE_THREAD_TENSOR_CORES)})


@pytest.mark.parametrize("tc", ONE_THREAD_TENSOR_CORES, ids=lambda tc: tc.name)
def test_one_thread_wmma_helper_is_exact(tc, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(Device["CPU"], "renderer", TCClangRenderer())
    tiles = (2, 1, 3)
    m, n, k = (d * t for d, t in zip(tc.dims, tiles, strict=True))
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, (m, k)).astype(to_numpy_dtype(tc.dtype_in))
    b = rng.integers(-3, 4, (k, n)).astype(to_numpy_dtype(tc.dtype_in))
    uops = wmma_matmul_program(tc, tiles)
    assert f"{tc.name}(" in Device["CPU"].renderer.render("wmma", uops)
    got = run_program("CPU", uops, [np.zeros((m, n), to_numpy_dtype(tc.dtype_out)), a, b], name=f"wmma_{tc.name}")[0]
    np.testing.assert_array_equal(got, (a.astype(np.int64) @ b.astype(np.int64)).astype(got.dtype))


def test_int_minimums_are_literals_c_reads_as_signed() -> None:
    # 2147483648 and 9223372036854775808 don't fit their types: C reads the negated literal as a negated unsigned
    from uopkit.dtype import dtypes

    r = ClangRenderer()
    assert r.render_const(dtypes.min(dtypes.int32), dtypes.int32) == "(-2147483647-1)"
    assert r.render_const(dtypes.min(dtypes.int64), dtypes.int64) == "(-9223372036854775807ll-1)"
    assert r.render_const(-5, dtypes.int64) == "-5ll"


def test_gated_loads_sharing_a_gate_read_plain_loads() -> None:
    # gcc 12.2 vectorizes `g ? a[2*i] : 0` with `g ? a[2*i+1] : 0` as a masked interleaved group and mixes up the
    # lanes: a padded compare-exchange of pairs (a sort's step) read its neighbour's pair
    from uopkit import Tensor, dtypes
    from uopkit.codegen import get_program
    from uopkit.schedule import create_schedule, kernelize_tensors

    for n, size in ((1024, 2048), (2048, 4096), (8, 16)):
        a = np.arange(n, dtype=np.float32)
        pairs = Tensor(a).pad(((0, size - n),)).reshape(size // 2, 2, 1)
        lo, hi = pairs[:, 0:1], pairs[:, 1:2]
        first = Tensor.arange(2, dtype=dtypes.int32).reshape(2, 1) == 0
        swap = hi > lo
        out = first.where(swap.where(hi, lo), swap.where(lo, hi))
        (item,) = create_schedule(kernelize_tensors([out]))
        assert "&-(int)" in get_program(item.ast, Device["CPU"].renderer).src
        ref = np.concatenate([a, np.zeros(size - n, np.float32)]).reshape(-1, 2)
        np.testing.assert_array_equal(out.reshape(size).numpy(), np.stack([ref.max(1), ref.min(1)], 1).ravel())
    # what it broke: int64 sorts of even lengths past 1024 that aren't powers of two
    values = np.random.default_rng(0).integers(0, 37, 1026)
    np.testing.assert_array_equal(Tensor(values).sort()[0].numpy(), np.sort(values))
    assert Tensor(values).unique().shape == np.unique(values).shape
