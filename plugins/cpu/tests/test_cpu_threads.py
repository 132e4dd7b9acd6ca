"""CPU threads: the heuristic's parallel loops compute the same results at any thread count (more threads than
cores included), and the OpenMP team is the one asked for."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Device, Tensor
from uopkit.codegen import get_program
from uopkit.engine.realize import method_cache
from uopkit.helpers import Context
from uopkit.schedule import create_schedule, kernelize_tensors


def _cases(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, ...]]:
    f32 = np.float32
    return {
        # 13 rows of 8-row tiles don't divide among threads: the columns of tiles are split too
        "matmul": (rng.standard_normal((104, 96)).astype(f32), rng.standard_normal((96, 160)).astype(f32)),
        # few output tiles, long reduce
        "matmul_few_rows": (rng.standard_normal((8, 512)).astype(f32), rng.standard_normal((512, 64)).astype(f32)),
        "sum": (rng.standard_normal((192, 320)).astype(f32),),
        "softmax": (rng.standard_normal((128, 512)).astype(f32),),
        "conv": (rng.standard_normal((3, 3, 20, 20)).astype(f32), rng.standard_normal((16, 3, 3, 3)).astype(f32)),
    }


def _run(name: str, arrays: tuple[np.ndarray, ...]) -> list[np.ndarray]:
    ts = [Tensor(a) for a in arrays]
    if name.startswith("matmul"):
        return [(ts[0] @ ts[1]).numpy()]
    if name == "sum":
        return [ts[0].sum(axis=0).numpy(), ts[0].sum(axis=1).numpy()]
    if name == "softmax":
        return [ts[0].softmax(-1).numpy()]
    return [ts[0].conv2d(ts[1], padding=1).numpy()]


def _reference(name: str, arrays: tuple[np.ndarray, ...]) -> list[np.ndarray]:
    a = [x.astype(np.float64) for x in arrays]
    if name.startswith("matmul"):
        return [a[0] @ a[1]]
    if name == "sum":
        return [a[0].sum(axis=0), a[0].sum(axis=1)]
    if name == "softmax":
        e = np.exp(a[0] - a[0].max(axis=1, keepdims=True))
        return [e / e.sum(axis=1, keepdims=True)]
    x, w = a
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    return [np.einsum("nchwij,ocij->nohw", cols, w)]


@pytest.mark.parametrize("threads", [1, 2, 4, 16])
def test_kernels_agree_at_any_thread_count(threads, monkeypatch):
    monkeypatch.setenv("UOPKIT_THREADS", str(threads))
    rng = np.random.default_rng(threads)
    # kernels chosen for another thread count must not be reused
    method_cache.clear()
    with Context(SCHEDULE_CACHE=0):
        for name, arrays in _cases(rng).items():
            for got, want in zip(_run(name, arrays), _reference(name, arrays), strict=True):
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{name} at {threads} threads")
    method_cache.clear()


def test_parallel_loop_starts_the_threads_asked_for(monkeypatch):
    t = Tensor.empty(512, 256) @ Tensor.empty(256, 512)
    item = create_schedule(kernelize_tensors([t]))[-1]
    for threads in (3, 16):
        monkeypatch.setenv("UOPKIT_THREADS", str(threads))
        src = get_program(item.ast, Device["CPU"].renderer).src
        assert src.count("#pragma omp parallel for") == 1 and f"num_threads({threads})" in src
