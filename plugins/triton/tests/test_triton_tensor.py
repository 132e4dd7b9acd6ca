"""Tensor programs on DEVICE=TRITON compared with numpy: math, dtypes, reductions, softmax, matmul, assign."""

from __future__ import annotations

import numpy as np

from uopkit import Device, Tensor
from uopkit_triton.runtime import TritonDevice

DEV = "TRITON"


def _t(x: np.ndarray) -> Tensor:
    return Tensor(x, device=DEV)


def test_device_opens_and_says_what_it_runs_on() -> None:
    dev = Device[DEV]
    assert isinstance(dev, TritonDevice)
    assert ("CUDA GPU" in dev.description) == dev.gpu


def test_elementwise_math() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((33, 17)).astype(np.float32)
    b = rng.standard_normal((1, 17)).astype(np.float32)
    np.testing.assert_allclose(
        ((_t(a) * _t(b) + 2) / (_t(b).abs() + 1)).numpy(), (a * b + 2) / (np.abs(b) + 1), rtol=1e-6
    )
    np.testing.assert_allclose(_t(a).exp().numpy(), np.exp(a), rtol=1e-5)
    np.testing.assert_allclose(_t(np.abs(a)).sqrt().numpy(), np.sqrt(np.abs(a)), rtol=1e-6)
    np.testing.assert_allclose(_t(a).sin().numpy(), np.sin(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_t(np.abs(a) + 0.5).pow(_t(b)).numpy(), (np.abs(a) + 0.5) ** b, rtol=1e-5)


def test_integer_and_half_programs() -> None:
    x = np.arange(-20, 20, dtype=np.int64) * 7
    np.testing.assert_array_equal((_t(x) // 3).numpy(), x // 3)
    h = np.linspace(-3, 3, 50, dtype=np.float16)
    np.testing.assert_allclose((_t(h) * _t(h) + 1).numpy(), h * h + 1, rtol=1e-3)
    np.testing.assert_array_equal((_t(x) > 10).numpy(), x > 10)


def test_softmax_rows() -> None:
    x = np.random.default_rng(1).standard_normal((3, 20)).astype(np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(_t(x).softmax(1).numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_matmul_and_assign() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((24, 40)).astype(np.float32), rng.standard_normal((40, 10)).astype(np.float32)
    np.testing.assert_allclose((_t(a) @ _t(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    t = _t(np.zeros((4, 6), np.float32)).contiguous().realize()
    t[1:3, 2:5] = _t(np.full((2, 3), 5.0, np.float32))
    t.assign(t * 2).realize()
    expected = np.zeros((4, 6), np.float32)
    expected[1:3, 2:5] = 10
    np.testing.assert_array_equal(t.numpy(), expected)
