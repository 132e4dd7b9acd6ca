"""Per-kernel compiler options the CPU renderer adds (uopkit_cpu.renderer.ClangRenderer.render_kernel)."""

import numpy as np

from uopkit import Device, Tensor
from uopkit.codegen import get_program
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.uop.ops import Ops


def _src(t: Tensor) -> str:
    item = create_schedule(kernelize_tensors([t]))[-1]
    return get_program(item.ast, Device["CPU"].renderer).src


def test_conditions_combined_with_and_turn_off_gccs_pre():
    # expm1 selects on (u > 0.5) & (u < 2): with gcc's PRE on, the loop is left scalar (tanh, elu, mish too)
    x = Tensor(np.linspace(-3, 3, 4096, dtype=np.float32))
    assert '"no-tree-pre"' in _src(x.expm1())
    assert "no-tree-pre" not in _src(x.exp()) and "no-tree-pre" not in _src(x.softmax())
    np.testing.assert_allclose(x.tanh().numpy(), np.tanh(x.numpy()), rtol=1e-6, atol=1e-7)


def test_kernels_doing_little_work_compile_at_O1():
    # an update of a small weight runs in microseconds at any level: -O1 compiles it several times faster
    small = Tensor(np.arange(64, dtype=np.float32))
    src = _src(small * 2 + 1)
    assert '"O1"' in src
    np.testing.assert_allclose((small * 2 + 1).numpy(), np.arange(64) * 2 + 1)
    big = Tensor(np.ones((256, 256), dtype=np.float32))
    assert '"O1"' not in _src(big * 2 + 1)
    assert '"O1"' not in _src(big.sum(axis=1))


def test_executed_ops_counts_ops_times_the_loops_around_them():
    from uopkit_cpu.renderer import executed_ops

    a = Tensor(np.ones((8, 32), dtype=np.float32))
    uops = list(get_program(create_schedule(kernelize_tensors([a + 1]))[-1].ast, Device["CPU"].renderer).uops)
    # a load, an add and a store (and their index arithmetic) for each of the 256 elements
    assert 3 * 256 <= executed_ops(uops) <= 20 * 256


def _matmul_program(n: int):
    a, b = Tensor(np.ones((n, n), dtype=np.float32)), Tensor(np.ones((n, n), dtype=np.float32))
    return get_program(create_schedule(kernelize_tensors([a @ b]))[-1].ast, Device["CPU"].renderer)


def test_a_register_tiles_reused_vector_loads_are_held_only_where_they_fit():
    from uopkit_cpu.renderer import held_vector_loads

    uops = list(_matmul_program(256).uops)
    vector_loads = [
        u for u in uops if u.op is Ops.LOAD and u.dtype.count > 1 and u.src[0].src[0].op is Ops.DEFINE_GLOBAL
    ]
    assert vector_loads, "the matmul has no vector loads of its operand"
    # (the host's vectors: 16 floats with AVX-512, 8 with AVX2)
    size = vector_loads[0].dtype.count * 4
    # 16 accumulators: 32 registers of the vectors' size hold them, the reused vectors and two more
    held = held_vector_loads(uops, 16, 32, size)
    assert held and held <= set(vector_loads)
    # each held load feeds several FMAs (one per row of the tile)
    assert all(sum(u in x.src for x in uops) >= 2 for u in held)
    # not when they'd spill (16 registers), not when one register can't hold a vector, not without a register tile
    assert not held_vector_loads(uops, 16, 16, size)
    assert not held_vector_loads(uops, 16, 32, size // 2)
    assert not held_vector_loads(uops, 0, 32, size)


def test_held_loads_compute_the_same_products():
    import platform

    from uopkit_cpu.renderer import SIMD_CONSTRAINT, simd_register_bytes

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((128, 96), dtype=np.float32), rng.standard_normal((96, 256), dtype=np.float32)
    product = Tensor(x) @ Tensor(y)
    if platform.machine() in SIMD_CONSTRAINT and simd_register_bytes() == (32, 64):
        # on an AVX-512 core the tile's column vectors are loaded once per step, not folded into each FMA
        assert '__asm__("" : "+v"(' in _src(product)
    np.testing.assert_allclose(product.numpy(), x @ y, rtol=1e-5, atol=1e-5)
