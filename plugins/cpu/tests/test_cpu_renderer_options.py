"""Per-kernel compiler options the CPU renderer adds (uopkit_cpu.renderer.ClangRenderer.render_kernel)."""

import numpy as np

from uopkit import Device, Tensor
from uopkit.codegen import get_program
from uopkit.schedule import create_schedule, kernelize_tensors


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
