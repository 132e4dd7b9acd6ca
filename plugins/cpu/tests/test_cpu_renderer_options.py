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
