"""CPU threads: the heuristic's parallel loops compute the same results at any thread count (more threads than
cores included), the parallel loop is split into the chunks asked for, and the thread pool never waits on a worker
that doesn't come."""

from __future__ import annotations

import numpy as np
import pytest

from uopkit import Device, Tensor
from uopkit.codegen import get_program
from uopkit.engine.realize import SCHEDULE_CACHE, method_cache
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
        assert src.count("_chunk(void **bufs") == 1 and f"_chunks = {threads};" in src


def _matmul_check(seed: int, context: bool = True) -> float:
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((96, 64)).astype(np.float32), rng.standard_normal((64, 128)).astype(np.float32)
    if not context:
        got = (Tensor(a) @ Tensor(b)).numpy()
    else:
        with Context(SCHEDULE_CACHE=0):
            got = (Tensor(a) @ Tensor(b)).numpy()
    return float(np.abs(got - a.astype(np.float64) @ b.astype(np.float64)).max())


def test_pool_serves_callers_on_several_threads(monkeypatch):
    # two Python threads launch threaded kernels at once (ctypes drops the GIL): one gets the pool, the other runs
    # its chunks itself; both are right
    import threading

    monkeypatch.setenv("UOPKIT_THREADS", "2")
    method_cache.clear()
    _matmul_check(0)  # compile first, so the threads below only run kernels
    errors: list[float] = []

    def work(seed: int) -> None:
        errors.extend(_matmul_check(seed, context=False) for _ in range(20))

    # (flags are process-wide: set once here, not entered and left by three threads at once, whose interleaved exits
    # could leave SCHEDULE_CACHE=0 behind for the tests that run after this one)
    threads = [threading.Thread(target=work, args=(s,)) for s in (1, 2, 3)]
    before = SCHEDULE_CACHE.value
    with Context(SCHEDULE_CACHE=0):
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert SCHEDULE_CACHE.value == before
    assert not any(t.is_alive() for t in threads), "a kernel launch hung"
    assert len(errors) == 60 and max(errors) < 1e-3
    method_cache.clear()


def test_pool_runs_in_a_forked_child(monkeypatch):
    # a child forked after the pool started has none of its workers: its kernels still run (on the child's own
    # workers, started afresh) and don't hang
    import multiprocessing as mp

    monkeypatch.setenv("UOPKIT_THREADS", "2")
    method_cache.clear()
    assert _matmul_check(4) < 1e-3
    ctx = mp.get_context("fork")
    with ctx.Pool(1) as pool:
        assert pool.apply_async(_matmul_check, (5,)).get(timeout=60) < 1e-3
    method_cache.clear()


def test_pool_finishes_without_its_workers():
    # the caller claims chunks too and waits only for chunks a worker started: with more chunks than workers could
    # take (here 64 chunks on at most 255 workers, some never scheduled in time on 2 cores) every chunk runs once
    import ctypes

    from uopkit_cpu.compiler import ClangCompiler
    from uopkit_cpu.pool import thread_pool

    src = (
        "void count_chunk(void **bufs, const int *vals, int chunk, int chunks) {"
        " __atomic_fetch_add((int *)bufs[0] + chunk, 1, __ATOMIC_RELAXED); }"
    )
    from uopkit.hostlib import load_library

    lib = load_library(ClangCompiler().compile(src), "test kernel")
    counts = (ctypes.c_int * 64)()
    bufs = (ctypes.c_void_p * 1)(ctypes.addressof(counts))
    run = thread_pool().run
    for _ in range(200):
        run(ctypes.cast(lib.count_chunk, ctypes.c_void_p), bufs, None, 64)
    assert list(counts) == [200] * 64
