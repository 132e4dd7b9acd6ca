"""CompileQueue: a schedule's kernels compiled in batches on worker threads (no real compiler: a recording fake)."""

from __future__ import annotations

import threading

import pytest

from uopkit.device import CompileError, Compiler
from uopkit.engine.compile_queue import MAX_BATCH, MIN_BATCH, MIN_SPLIT, CompileQueue


class RecordingCompiler(Compiler):
    def __init__(self, broken: str | None = None) -> None:
        super().__init__(cache_key=None)
        self.batches: list[list[str]] = []
        self.broken = broken
        self.lock = threading.Lock()

    def _build(self, src: str) -> bytes:
        if src == self.broken:
            raise CompileError("syntax error", src, compiler="fake")
        return f"lib:{src}".encode()

    # `batches`: one entry per compiler run
    def compile(self, src: str) -> bytes:  # type: ignore[override]
        with self.lock:
            self.batches.append([src])
        return self._build(src)

    def compile_batch(self, srcs: list[str]) -> list[bytes]:  # type: ignore[override]
        with self.lock:
            self.batches.append(list(srcs))
        return [self._build(src) for src in srcs]


class FakeDevice:
    def __init__(self, compiler: Compiler) -> None:
        self.compiler = compiler


def _run(names: list[str], compiler: RecordingCompiler, workers: int = 2) -> list[tuple[bytes, float]]:
    dev = FakeDevice(compiler)
    with CompileQueue(workers) as queue:
        for i, name in enumerate(names):
            queue.add(name, f"src{i}", dev, "FAKE")  # type: ignore[arg-type]
        return queue.results()


def test_batches_keep_order_and_group_kernels() -> None:
    compiler = RecordingCompiler()
    names = [f"k{i}" for i in range(3 * MIN_BATCH + 1)]
    results = _run(names, compiler)
    assert [lib for lib, _ in results] == [f"lib:src{i}".encode() for i in range(len(names))]
    sizes = [len(b) for b in compiler.batches]
    # every kernel compiled exactly once, in fewer compiler runs than kernels, none larger than MAX_BATCH (but for
    # fewer than MIN_SPLIT left over, which join the last batch)
    assert sorted(s for b in compiler.batches for s in b) == sorted(f"src{i}" for i in range(len(names)))
    assert len(sizes) < len(names) and max(sizes) < MAX_BATCH + MIN_SPLIT


def test_same_name_never_in_one_batch() -> None:
    compiler = RecordingCompiler()
    _run(["E_1"] * (2 * MIN_BATCH) + ["r_2"] * 3, compiler, workers=1)
    for batch in compiler.batches:
        names = ["E_1" if int(s[3:]) < 2 * MIN_BATCH else "r_2" for s in batch]
        assert len(names) == len(set(names))


def test_error_names_the_failing_kernel() -> None:
    compiler = RecordingCompiler(broken="src5")
    with pytest.raises(CompileError) as info:
        _run([f"k{i}" for i in range(12)], compiler)
    assert "kernel k5 failed to compile on FAKE: syntax error" in info.value.message and info.value.src == "src5"
    # (and the compiler that failed keeps its name: "fake failed:", not "compiler failed:")
    assert info.value.compiler == "fake" and str(info.value).startswith("fake failed:")


def test_single_kernel_runs_without_waiting_for_a_full_batch() -> None:
    compiler = RecordingCompiler()
    assert [lib for lib, _ in _run(["only"], compiler)] == [b"lib:src0"]
    assert compiler.batches == [["src0"]]


def test_few_expected_kernels_start_compiling_before_all_are_added() -> None:
    compiler = RecordingCompiler()
    dev = FakeDevice(compiler)
    started = threading.Event()
    compile_batch = compiler.compile_batch

    def recording(srcs: list[str]) -> list[bytes]:
        started.set()
        return compile_batch(srcs)

    compiler.compile_batch = recording  # type: ignore[method-assign]
    # 12 kernels on 2 workers: batches of MIN_SPLIT, the first compiled while the rest are still being generated
    with CompileQueue(2, expected=12) as queue:
        for i in range(MIN_SPLIT):
            queue.add(f"k{i}", f"src{i}", dev, "FAKE")  # type: ignore[arg-type]
        assert started.wait(10), "no compile started with a batch's worth of kernels added"
        for i in range(MIN_SPLIT, 12):
            queue.add(f"k{i}", f"src{i}", dev, "FAKE")  # type: ignore[arg-type]
        assert [lib for lib, _ in queue.results()] == [f"lib:src{i}".encode() for i in range(12)]
    assert compiler.batches[0] == [f"src{i}" for i in range(MIN_SPLIT)]


def test_a_few_kernels_left_are_not_split_among_workers() -> None:
    # 6 kernels expected on 2 workers: at least 4 start compiling together, the rest go together (not one run each)
    compiler = RecordingCompiler()
    with CompileQueue(2, expected=6) as queue:
        dev = FakeDevice(compiler)
        for i in range(6):
            queue.add(f"k{i}", f"src{i}", dev, "FAKE")  # type: ignore[arg-type]
        queue.results()
    assert len(compiler.batches) <= 2 and min(len(b) for b in compiler.batches) >= 2, compiler.batches


def test_a_core_is_left_to_code_generation_until_every_kernel_is_added() -> None:
    # 3 workers: while kernels are still being added at most 2 compiles run at once; after results(), all 3
    compiler = RecordingCompiler()
    dev = FakeDevice(compiler)
    lock, running, most = threading.Lock(), [0], [0]
    release = threading.Event()
    compile_batch = compiler.compile_batch

    def slow(srcs: list[str]) -> list[bytes]:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        release.wait(10)
        with lock:
            running[0] -= 1
        return compile_batch(srcs)

    compiler.compile_batch = slow  # type: ignore[method-assign]
    with CompileQueue(3, expected=6 * MIN_BATCH) as queue:
        for i in range(6 * MIN_BATCH):
            queue.add(f"k{i}", f"src{i}", dev, "FAKE")  # type: ignore[arg-type]
        # every worker had a batch's worth waiting for a while: only two took one
        threading.Event().wait(0.3)
        assert most[0] == 2
        release.set()
        assert len(queue.results()) == 6 * MIN_BATCH


def test_at_the_close_a_busy_worker_counts_in_the_share_of_what_waits() -> None:
    # 2 workers, one busy with the first batch when every kernel is in: the idle one takes half of the 20 waiting,
    # not all of them (the busy one is soon free: the cold MLP step's last 19 kernels went to one worker, 0.55 s of
    # gcc, while the other idled)
    compiler = RecordingCompiler()
    dev = FakeDevice(compiler)
    release, first = threading.Event(), threading.Event()
    compile_batch = compiler.compile_batch

    def held(srcs: list[str]) -> list[bytes]:
        if not first.is_set():
            first.set()
            release.wait(10)
        return compile_batch(srcs)

    compiler.compile_batch = held  # type: ignore[method-assign]
    with CompileQueue(2) as queue:
        for i in range(MIN_BATCH):
            queue.add(f"k{i}", f"src{i}", dev, "FAKE")  # type: ignore[arg-type]
        assert first.wait(5)
        for i in range(MIN_BATCH, MIN_BATCH + 20):
            queue.add(f"k{i}", f"src{i}", dev, "FAKE")  # type: ignore[arg-type]
        waiter = threading.Thread(target=queue.results)
        waiter.start()
        # the idle worker compiles what waits (in shares) while the first batch is held
        for _ in range(500):
            if sum(map(len, compiler.batches)) >= 20:
                break
            threading.Event().wait(0.01)
        release.set()
        waiter.join(10)
    # (the held batch is the first MIN_BATCH kernels)
    assert sum(map(len, compiler.batches)) == MIN_BATCH + 20
    assert max(len(b) for b in compiler.batches) <= 10, compiler.batches


def test_the_last_few_kernels_are_shared_by_idle_workers() -> None:
    # 7 kernels, none started before every one is in: two runs side by side (4 and 3), not one run of 7 on one core
    # while the other idles (the main job's evaluation: 0.38 s of gcc on one core); a lone kernel joins another run
    compiler = RecordingCompiler()
    _run([f"k{i}" for i in range(7)], compiler)
    assert sorted(map(len, compiler.batches)) == [3, 4], compiler.batches
    compiler = RecordingCompiler()
    _run([f"k{i}" for i in range(3)], compiler)
    assert sorted(map(len, compiler.batches)) == [3], compiler.batches


def test_distinct_kernels_of_one_name_are_renamed_and_compile_together() -> None:
    # two different 8-element kernels are both "E_8": one keeps the name, the other becomes E_8n<k>, so they can
    # share a compiler run; the same code again keeps its name (compiled once)
    import numpy as np

    from uopkit import Tensor
    from uopkit.engine.realize import method_cache
    from uopkit.schedule import create_schedule, kernelize_tensors
    from uopkit.uop.ops import Ops

    x = np.arange(8, dtype=np.float32)
    a, b = Tensor(x), Tensor(x + 1)
    outs = [a * 2 + 0.25, b * 3 - 0.5, a.exp2() + 7.0]
    asts = [item.ast for item in create_schedule(kernelize_tensors(outs)) if item.ast.op is not Ops.COPY]
    Tensor.realize(*outs)
    names = [method_cache[(ast, "CPU")].spec.name for ast in asts]
    assert len(names) == 3 and len(set(names)) == 3 and all(n.startswith("E_8") for n in names), names
    np.testing.assert_allclose(outs[0].numpy(), x * 2 + 0.25)
    np.testing.assert_allclose(outs[1].numpy(), (x + 1) * 3 - 0.5)
    np.testing.assert_allclose(outs[2].numpy(), np.exp2(x) + 7.0, rtol=1e-6)
    again = Tensor(x + 5) * 2 + 0.25
    again.realize()
    np.testing.assert_allclose(again.numpy(), (x + 5) * 2 + 0.25)


def test_a_compiler_without_batch_builds_gets_one_kernel_per_run() -> None:
    # the default compile_batch compiles one kernel after another: a batch would only take work from the other
    # workers, so each run gets one kernel, started as soon as it is added
    class OneByOne(Compiler):
        def __init__(self) -> None:
            super().__init__(cache_key=None)
            self.sizes: list[int] = []

        def compile(self, src: str) -> bytes:  # type: ignore[override]
            return f"lib:{src}".encode()

        def compile_cached_batch(self, srcs: list[str | bytes]) -> list[bytes]:
            self.sizes.append(len(srcs))
            return super().compile_cached_batch(srcs)

    compiler = OneByOne()
    dev = FakeDevice(compiler)
    with CompileQueue(2, expected=3 * MIN_BATCH) as queue:
        for i in range(3 * MIN_BATCH):
            queue.add(f"k{i}", f"src{i}", dev, "FAKE")  # type: ignore[arg-type]
        assert [lib for lib, _ in queue.results()] == [f"lib:src{i}".encode() for i in range(3 * MIN_BATCH)]
    assert compiler.sizes == [1] * (3 * MIN_BATCH)


class BlockingCompiler(Compiler):
    """Compiles until `release` is set (at most 10 s); `finished` says whether a compile ran to its end."""

    def __init__(self) -> None:
        super().__init__(cache_key=None)
        self.started, self.release, self.finished = threading.Event(), threading.Event(), threading.Event()

    def compile(self, src: str) -> bytes:  # type: ignore[override]
        self.started.set()
        self.release.wait(10)
        self.finished.set()
        return b"lib"


def test_an_interrupt_while_waiting_for_results_reaches_the_caller_now() -> None:
    # Ctrl-C (here SIGALRM raising KeyboardInterrupt) while the caller waits for a compile in flight: it leaves the
    # queue without waiting for that compile, and the next queue works
    import signal

    compiler = BlockingCompiler()

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        with pytest.raises(KeyboardInterrupt), CompileQueue(2) as queue:
            queue.add("k", "src0", FakeDevice(compiler), "FAKE")  # type: ignore[arg-type]
            assert compiler.started.wait(10)
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            queue.results()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not compiler.finished.is_set()
    compiler.release.set()
    assert [lib for lib, _ in _run(["a", "b", "c"], RecordingCompiler())] == [b"lib:src0", b"lib:src1", b"lib:src2"]


def test_an_error_drops_the_kernels_not_yet_started() -> None:
    compiler = RecordingCompiler()
    with pytest.raises(RuntimeError), CompileQueue(1, expected=100) as queue:
        for i in range(MIN_BATCH - 1):
            queue.add(f"k{i}", f"src{i}", FakeDevice(compiler), "FAKE")  # type: ignore[arg-type]
        raise RuntimeError("code generation failed")
    # the batch was still filling up: nothing compiled after the caller gave up
    assert compiler.batches == []
