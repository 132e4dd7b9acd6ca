"""Long reduces into few outputs split in two so that threads can share them (schedule/splitting.py)."""

import numpy as np
import pytest

from uopkit import Device, Tensor
from uopkit.engine.realize import method_cache
from uopkit.helpers import Context
from uopkit.schedule import create_schedule, kernelize_tensors
from uopkit.schedule.splitting import CPU_RULE, split_parts

pytestmark = pytest.mark.skipif(not Device["CPU"].renderer.caps.has_threads, reason="the CPU renderer has no threads")


def _shapes(t: Tensor) -> list:
    return [item.ast.src[0].src[1].shape for item in create_schedule(kernelize_tensors([t]))]


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_split_parts_depend_on_shapes_only():
    # one output: 64 slices
    assert split_parts(1, 1 << 24) == 64
    # a few blocks of outputs (a 16x16 matmul over a long K): fewer slices
    assert split_parts(256, 1 << 16) == 16
    # every slice stays long
    for outputs, length in ((1, 1 << 22), (4, 1 << 20), (64, 1 << 16), (100, 3 * (1 << 15))):
        parts = split_parts(outputs, length)
        assert parts > 1 and length % parts == 0 and length // parts >= CPU_RULE.min_slice
    # small work, many outputs, or no divisor: left whole
    assert split_parts(1, 1 << 20) == 1
    assert split_parts(4096, 4096) == 1
    assert split_parts(1, 16_000_057) == 1


def test_full_sum_is_partial_sums_then_their_sum():
    x = _rand(1024, 4096)
    # the partial sums (64 slices of the longer axis, shared among threads), then one kernel adds them up
    assert _shapes(Tensor(x).sum()) == [(1, 64, 1), (1, 1, 1)]
    assert _shapes(Tensor(x).sum(axis=1)) == [(1024, 1)]
    np.testing.assert_allclose(Tensor(x).sum().numpy(), x.astype(np.float64).sum(), rtol=1e-5)


@pytest.mark.parametrize(
    "name",
    ["sum", "mean", "max", "min", "int_sum", "few_rows_sum", "small_matmul", "grad"],
)
def test_split_reduces_agree_with_numpy(name):
    x = _rand(1024, 4096)
    if name == "sum":
        got, want = Tensor(x).sum().numpy(), x.astype(np.float64).sum()
    elif name == "mean":
        got, want = Tensor(x).mean().numpy(), x.astype(np.float64).mean()
    elif name == "max":
        x[17, 900] = 50.0
        got, want = Tensor(x).max().numpy(), x.max()
    elif name == "min":
        got, want = Tensor(x).min().numpy(), x.min()
    elif name == "int_sum":
        xi = np.random.default_rng(1).integers(-1000, 1000, (1024, 4096)).astype(np.int32)
        got, want = Tensor(xi).sum().numpy(), xi.astype(np.int64).sum()
    elif name == "few_rows_sum":
        got, want = Tensor(x.reshape(4, -1)).sum(axis=1).numpy(), x.reshape(4, -1).astype(np.float64).sum(axis=1)
    elif name == "small_matmul":
        a, b = _rand(16, 32768, seed=2), _rand(32768, 8, seed=3)
        assert len(_shapes(Tensor(a) @ Tensor(b))) == 2
        got, want = (Tensor(a) @ Tensor(b)).numpy(), a.astype(np.float64) @ b
    else:
        t = Tensor(x, requires_grad=True)
        (t * t).sum().backward()
        got, want = t.grad.numpy(), 2 * x
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_a_nan_still_wins_a_split_max():
    x = _rand(1024, 4096)
    x[200, 3] = np.nan
    assert np.isnan(Tensor(x).max().numpy())
    # unsplit, over two axes (two nested max loops: a NaN found in one row must survive the next row's loop)
    y = _rand(8, 64)
    y[2, 5] = np.nan
    assert np.isnan(Tensor(y).max().numpy()) and np.isnan(Tensor(y).max(axis=(0, 1)).numpy())


def test_split_sum_gives_the_same_bits_at_any_thread_count(monkeypatch):
    x = _rand(1024, 4096)
    results = []
    for threads in (1, 2, 16):
        monkeypatch.setenv("UOPKIT_THREADS", str(threads))
        method_cache.clear()
        with Context(SCHEDULE_CACHE=0):
            results.append(Tensor(x).sum().numpy())
    method_cache.clear()
    assert results[0] == results[1] == results[2]
