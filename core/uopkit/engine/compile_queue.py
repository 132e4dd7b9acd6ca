"""Compiling a schedule's new kernels side by side, in batches, while the next ones are generated.

`CompileQueue.add` takes a kernel whose code was just generated (Python, on the caller's thread); worker threads
(one per core) take what is waiting and hand it to the device's compiler as one `Compiler.compile_cached_batch` call.
For a compiler that builds a batch in one run (the CPU's: one C file, one library), workers take a batch at a time
and, while kernels are still being added, one fewer compiles at a time, leaving a core to the code generator: a C
compiler's fixed cost per run (process startup, assembler, linker) is paid once per batch instead of once per
kernel. Other compilers get one kernel per run, started as soon as it is added, on every worker. A batch never
holds two kernels of the same name (they would clash in one library) nor kernels of two devices.

`results` waits for every compile and returns the libraries in the order the kernels were added; a failure is a
`CompileError` naming the kernel and device, the first failing kernel in that order, whatever finished first.

Ctrl-C on the caller's thread: the caller never enters a lock through Python code (a `threading.Condition`'s
`__enter__`, a `Future`'s): an interrupt taken between the lock's acquire and the `with` block would leave it held, and
the workers waiting for it would never finish (the caller then hung joining them). It takes the queue's lock with a
`with` on the C lock itself and waits for each result on a lock of its own; on the way out of an error the kernels not
yet started are dropped, and on an interrupt the caller doesn't wait for the compiles in flight. The workers are
daemon threads of the queue's own (an executor's worker waits on a semaphore the caller's `submit` takes in Python
code, and the executor joins its workers at exit): one left waiting by an interrupt can't hang the process.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from uopkit.device import Compiled, CompileError, Compiler
from uopkit.helpers import start_thread, usable_cores
from uopkit.mappings import MappingLimitError

# a batch this large already pays the compiler's fixed cost ~1/MAX_BATCH per kernel; larger ones only delay the
# first results and leave other workers idle
MAX_BATCH = 16
# while kernels are still being added, a worker waits for this many before it starts a compile
MIN_BATCH = 8
# fewer kernels than this are not split among workers (nor started before this many are in): each compiler run costs
# tens of milliseconds before any kernel, more than a few small kernels' own compile time
MIN_SPLIT = 4
# once every kernel is in, a worker's share is at least this many: the workers take their shares side by side, so
# a share's fixed cost is paid on a core that would idle, but a lone kernel is better in another's run
MIN_SHARE = 2


def _held_lock() -> threading.Lock:
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclass
class _Job:
    name: str
    src: str | bytes
    dev: Compiled
    device: str
    # (library, compile seconds), or the error; `done` is released once either is set
    result: tuple[bytes, float] | None = None
    error: BaseException | None = None
    done: threading.Lock = field(default_factory=_held_lock)

    def finish(self, result: tuple[bytes, float] | None = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        self.done.release()

    def wait(self) -> tuple[bytes, float]:
        # (a C lock's acquire: an interrupt ends the wait, and nothing else ever takes this lock)
        self.done.acquire()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def _builds_batches(dev: Compiled) -> bool:
    """Whether the device's compiler builds several kernels in one run (overrides `Compiler.compile_batch`), which
    pays its fixed cost per run once per batch."""
    return type(dev.compiler).compile_batch is not Compiler.compile_batch


def _fail(job: _Job, e: CompileError) -> None:
    job.finish(
        error=CompileError(
            f"kernel {job.name} failed to compile on {job.device}: {e.message}", job.src, compiler=e.compiler
        )
    )


class CompileQueue:
    """Compile kernels in batches on worker threads; see the module docstring."""

    def __init__(self, workers: int | None = None, expected: int | None = None) -> None:
        self.workers = max(1, workers if workers is not None else usable_cores())
        # `expected`: how many kernels will be added. A few kernels don't wait for MIN_BATCH of them (that would be all
        # of them, leaving nothing to compile while code is generated): each worker gets about two batches, of at
        # least MIN_SPLIT kernels
        self.expected = expected
        self.min_batch = MIN_BATCH
        if expected is not None:
            self.min_batch = max(min(MIN_SPLIT, expected), min(MIN_BATCH, -(-expected // (2 * self.workers))))
        self._threads: list[threading.Thread] = []
        # the caller's thread takes `_lock` itself (see the module docstring); the workers wait on `_cond` over it
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._pending: list[_Job] = []
        self._started = 0
        # compiles running now: while kernels are still being added, one core is left to the caller's code generation
        # (a compiler taking it would only slow the code generation the later batches wait for)
        self._running = 0
        self._closed = False
        self._jobs: list[_Job] = []

    def add(self, name: str, src: str | bytes, dev: Compiled, device: str) -> None:
        job = _Job(name, src, dev, device)
        with self._lock:
            assert not self._closed, "CompileQueue.add after results()"
            self._jobs.append(job)
            self._pending.append(job)
            start = self._started < self.workers
            if start:
                self._started += 1
            self._cond.notify()
        if start:
            worker = threading.Thread(target=self._drain, name=f"uopkit-compile-{self._started}", daemon=True)
            try:
                start_thread(worker)
            except MappingLimitError:
                # at the cap on memory mappings: the workers already running compile everything; with none, the
                # caller gets the error (nothing would ever compile what it waits for)
                with self._lock:
                    self._started -= 1
                    self.workers = max(1, self._started)
                if not self._threads:
                    raise
                return
            self._threads.append(worker)

    def _take(self) -> list[_Job]:
        # under the lock: the oldest waiting kernel and more of its device with names not yet in the batch; once
        # every kernel is in, at most a fair share of what waits among all the workers, those compiling now too: they
        # are soon free and take the rest (a share among the idle ones alone gave one worker the cold MLP step's last
        # 19 kernels, 0.55 s of gcc, while the other sat idle for 0.4 s of it). A compiler without a batch build of
        # its own compiles a batch one kernel after another: one kernel at a time keeps every worker busy
        if not _builds_batches(self._pending[0].dev):
            return [self._pending.pop(0)]
        fair = max(MIN_SHARE, -(-len(self._pending) // self.workers))
        share = MAX_BATCH if not self._closed else min(MAX_BATCH, fair)
        if self._closed and len(self._pending) - share < MIN_SHARE:
            # one left over would be a compiler run of its own
            share = len(self._pending)
        batch: list[_Job] = []
        names: set[str] = set()
        for job in self._pending:
            if len(batch) == share:
                break
            if job.dev is self._pending[0].dev and job.name not in names:
                batch.append(job)
                names.add(job.name)
        self._pending = [job for job in self._pending if job not in batch]
        return batch

    def _drain(self) -> None:
        while True:
            with self._cond:
                # while kernels are still being generated, wait until a batch's worth is in: the caller needs all of
                # them before running any, so a compile started early for one kernel only costs a compiler run
                while not (self._pending and (self._closed or self._may_start())):
                    if self._closed and not self._pending:
                        return
                    self._cond.wait()
                batch = self._take()
                self._running += 1
            try:
                self._compile(batch)
            finally:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    def _may_start(self) -> bool:
        # under the lock, while kernels are still being added: a batch's worth waits and a core is free of compiles,
        # and not just a few more kernels are still to come (they would be left for a compiler run of their own).
        # Batching is only worth the wait for a compiler that builds a batch in one run
        if not _builds_batches(self._pending[0].dev):
            return True
        to_come = self.expected - len(self._jobs) if self.expected is not None else MIN_SPLIT
        if 0 < to_come < MIN_SPLIT:
            return False
        return len(self._pending) >= self.min_batch and self._running < max(1, self.workers - 1)

    def _compile(self, batch: list[_Job]) -> None:
        st = time.perf_counter()
        try:
            libs = batch[0].dev.compiler.compile_cached_batch([job.src for job in batch])
        except CompileError as e:
            failed = next((job for job in batch if job.src is e.src or job.src == e.src), None)
            for job in batch:
                if job is failed:
                    _fail(job, e)
                else:
                    # not at fault: compiled alone, so its own result (or error) is exact
                    self._compile_one(job)
            return
        except BaseException as e:  # anything else (a bug, an interrupt) reaches every waiting caller
            for job in batch:
                job.finish(error=e)
            return
        # each kernel's share of the batch's time, so the per-kernel figures add up to the compiler's time
        share = (time.perf_counter() - st) / len(batch)
        for job, lib in zip(batch, libs, strict=True):
            job.finish((lib, share))

    def _compile_one(self, job: _Job) -> None:
        st = time.perf_counter()
        try:
            lib = job.dev.compiler.compile_cached(job.src)
        except CompileError as e:
            _fail(job, e)
            return
        except BaseException as e:
            job.finish(error=e)
            return
        job.finish((lib, time.perf_counter() - st))

    def results(self) -> list[tuple[bytes, float]]:
        """Wait for every kernel added; (library, compile seconds) per kernel, in the order added."""
        with self._lock:
            self._closed = True
            self._cond.notify_all()
        return [job.wait() for job in self._jobs]

    def __enter__(self) -> CompileQueue:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        with self._lock:
            self._closed = True
            if exc_type is not None:
                # the caller is leaving with an error: nobody waits for the kernels not started yet
                self._pending.clear()
            self._cond.notify_all()
        # compiles in flight finish (a compiler process is never left running behind the caller's back), except on an
        # interrupt, which must reach the caller now: they end on their own, their workers then exit
        if exc_type is None or issubclass(exc_type, Exception):
            for worker in self._threads:
                worker.join()
