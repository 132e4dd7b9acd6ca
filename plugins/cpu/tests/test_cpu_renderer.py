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


# the fused epilogues of a Linear layer: e**x and log's clamps, polynomials and exponent bits
EPILOGUES = {
    "tanh": lambda h: h.tanh(),
    "sigmoid": lambda h: h.sigmoid(),
    "log": lambda h: h.abs().log(),
    "softplus": lambda h: h.softplus(),
}


@pytest.mark.parametrize("name", EPILOGUES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_transcendental_epilogue_of_a_matmul_stays_whole_vectors(name: str, dtype: str) -> None:
    # a matmul's register tile then its epilogue: each of the epilogue's ops runs on the tile's vectors (comparisons
    # give masks of the lanes' width, bitcasts and shifts of exponent bits on whole vectors), in vectors no wider than a
    # register. Lane by lane, a float64 tanh after an 8x32 tile of 16-double vectors was 1.6 MB of C and 40 s of gcc
    torch = pytest.importorskip("torch")
    from uopkit import Tensor
    from uopkit.codegen import get_program
    from uopkit.schedule import create_schedule, kernelize_tensors
    from uopkit_cpu.renderer import native_floats

    fn = EPILOGUES[name]
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (256, 2)).astype(dtype)
    w, b = rng.standard_normal((2, 32)).astype(dtype), rng.standard_normal(32).astype(dtype)
    y = fn(Tensor(x) @ Tensor(w) + Tensor(b))
    (item,) = create_schedule(kernelize_tensors([y]))
    src = get_program(item.ast, Device["CPU"].renderer).src
    assert isinstance(src, str)
    # (before: 270-800 KB for float32, 680 KB-1.6 MB for float64; now 35-105 KB)
    assert len(src) < 160_000, len(src)
    # no scalar bitcast (a lane's exponent bits) and no scalar select, and no double vector wider than a register
    assert "bc_out" not in src and "?" not in src.split("void r_", 1)[1]
    assert f"double{native_floats()} " not in src or dtype == "float32"
    h = torch.tensor(x) @ torch.tensor(w) + torch.tensor(b)
    want = torch.nn.functional.softplus(h) if name == "softplus" else fn(h)
    tol = 1e-6 if dtype == "float32" else 1e-14
    np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=tol, atol=tol)
