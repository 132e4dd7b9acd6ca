"""Small shared helpers and the environment flags (as ContextVars that `Context` can override)."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


class ContextVar:
    """An integer flag read once from the environment, overridable with `Context(NAME=value)`."""

    _registry: dict[str, ContextVar] = {}

    def __init__(self, key: str, default: int) -> None:
        self.key = key
        self.value = int(os.getenv(key, str(default)) or default)
        ContextVar._registry[key] = self

    def __bool__(self) -> bool:
        return bool(self.value)

    def __ge__(self, x: int) -> bool:
        return self.value >= x

    def __gt__(self, x: int) -> bool:
        return self.value > x

    def __lt__(self, x: int) -> bool:
        return self.value < x

    def __le__(self, x: int) -> bool:
        return self.value <= x

    def __eq__(self, x: object) -> bool:
        return self.value == x

    def __hash__(self) -> int:
        return hash(self.key)


class Context(contextlib.ContextDecorator):
    """`with Context(DEBUG=4): ...` temporarily sets flags."""

    def __init__(self, **kwargs: int) -> None:
        self.kwargs = kwargs

    def __enter__(self) -> None:
        self.old = {k: ContextVar._registry[k].value for k in self.kwargs}
        for k, v in self.kwargs.items():
            ContextVar._registry[k].value = v

    def __exit__(self, *exc: object) -> None:
        for k, v in self.old.items():
            ContextVar._registry[k].value = v


class _GlobalCounters:
    """What the engine ran, summed since the last `reset()` (tinygrad's counters; read them after a step, e.g.
    `GlobalCounters.global_ops / 1e9` GFLOPs):
    - `kernel_count`: compiled kernels launched (a copy between buffers or devices is no kernel), TinyJit replays and
      the schedule cache's replays included;
    - `global_ops`: the launched kernels' estimated operations (each ALU op and each reduced element, times the
      elements it runs over: `codegen.estimate_cost`, the figure DEBUG=2 prints as GFLOP/s);
    - `global_mem`: the launched kernels' estimated bytes (every buffer a kernel takes, whole, once) plus the bytes
      copied between buffers;
    - `time_sum_s`: seconds the kernels and copies took, measured only with DEBUG=2 or more (which waits for each);
      otherwise it stays 0.0, as measuring would wait for the device after every launch;
    - `mem_used`: bytes of device buffers allocated now (an allocator's cache of freed buffers is not counted), not
      reset by `reset()`.
    Added to once per launch or per replay: counting costs no device time. One instance, `GlobalCounters`, read as
    tinygrad's class (its attributes are slots: a class attribute written per launch would invalidate the class's
    attribute caches each time, measurably on a tiny op)."""

    __slots__ = ("global_ops", "global_mem", "kernel_count", "time_sum_s", "mem_used")

    def __init__(self) -> None:
        self.global_ops = self.global_mem = self.kernel_count = self.mem_used = 0
        self.time_sum_s = 0.0

    def reset(self) -> None:
        """Zero every counter but `mem_used` (what is allocated stays allocated)."""
        self.global_ops = self.global_mem = self.kernel_count = 0
        self.time_sum_s = 0.0

    def count(self, kernels: int, ops: int, mem: int) -> None:
        """Add launches that ran: `kernels` kernels, their estimated `ops` and bytes `mem`."""
        self.kernel_count += kernels
        self.global_ops += ops
        self.global_mem += mem


GlobalCounters = _GlobalCounters()


DEBUG = ContextVar("DEBUG", 0)
SPEC = ContextVar("SPEC", 0)
BEAM = ContextVar("BEAM", 0)
NOOPT = ContextVar("NOOPT", 0)
# the compile cache; CACHELEVEL=0 disables it
CACHELEVEL = ContextVar("CACHELEVEL", 1)
# indices computed on the device (gather, getitem, one_hot, cross_entropy targets), and binary_cross_entropy's
# probabilities, are range-checked with one small min/max read back; CHECK_INDEX=0 skips that sync in hot loops (an
# index out of range then reads as 0, and a setitem's write to one is dropped)
CHECK_INDEX = ContextVar("CHECK_INDEX", 1)
# LRU=0: device buffers are freed at once instead of kept by size for reuse (`uopkit.device.LRUAllocator`)
LRU = ContextVar("LRU", 1)
# LRU_LIMIT=n: an allocator's cache of freed buffers keeps at most n MiB (default -1: as many bytes as were ever in
# use at once through that allocator)
LRU_LIMIT = ContextVar("LRU_LIMIT", -1)
# LAPACK=0: the dense linear algebra (solve, inv, det, eigh, svd, cholesky, qr) runs its device kernels on a device
# whose buffers are host memory too, instead of numpy's LAPACK on the host (`uopkit.tensor.lapack`)
LAPACK = ContextVar("LAPACK", 1)


def getenv(key: str, default: T = 0) -> T:  # type: ignore[assignment]
    """The environment variable `key` parsed as the type of `default` (tinygrad's): an int default gives an int, a
    float default a float, a bool default a bool (an integer or true/false/yes/no/on/off), a str or None default the
    string; unset (or set to nothing, for a number or a bool) gives `default`. A value that doesn't parse raises a
    ValueError naming the variable. A batch size from the environment: `batch = getenv(name, 512)`.

    >>> getenv("uopkit doctest: surely unset", 512)
    512
    """
    raw = os.environ.get(key)
    if raw is None or default is None or isinstance(default, str):
        return default if raw is None else raw  # type: ignore[return-value]
    if raw.strip() == "":
        return default
    kind = type(default)
    try:
        if kind is bool:
            word = raw.strip().lower()
            if word in ("true", "yes", "on"):
                return True  # type: ignore[return-value]
            if word in ("false", "no", "off"):
                return False  # type: ignore[return-value]
            return bool(int(word))  # type: ignore[return-value]
        return kind(raw.strip())  # type: ignore[call-arg]
    except (TypeError, ValueError):
        raise ValueError(
            f"environment variable {key}={raw!r} is not a valid {kind.__name__} (getenv's default {default!r} says the "
            f"type it must be)"
        ) from None


# the thread count a program chose (torch's set_num_threads: `Tensor.set_num_threads`,
# tensor/torch_copies_settings.py); None: the environment and the cores decide
threads_chosen: int | None = None


def cpu_threads() -> int:
    """Threads a CPU kernel may use: what `Tensor.set_num_threads` chose, else UOPKIT_THREADS, else OMP_NUM_THREADS,
    else the cores this process may run on: its affinity mask (`taskset`, a container's cpuset), and no more than its
    cgroup's CPU quota (a container's `--cpus`: more threads than the quota only wait for each other at every
    barrier)."""
    if threads_chosen is not None:
        return threads_chosen
    env = os.getenv("UOPKIT_THREADS") or os.getenv("OMP_NUM_THREADS")
    if env:
        first = env.split(",")[0].strip()
        if not first.isdigit():
            raise ValueError(f"UOPKIT_THREADS / OMP_NUM_THREADS must be a positive integer, got {env!r}")
        return max(1, int(first))
    return usable_cores()


def usable_cores() -> int:
    """The cores this process may run on: its affinity mask (`taskset`, a container's cpuset), and no more than its
    cgroup's CPU quota. What parallel work (CPU kernel threads, compiler runs) should count on, not the machine's."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        # no affinity masks on this OS (macOS, Windows)
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_limit()
    return max(1, min(cores, quota) if quota is not None else cores)


@functools.cache
def cgroup_cpu_limit(proc: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int | None:
    """CPUs' worth of time the process's cgroups allow per period (rounded up), or None without a quota."""
    try:
        with open(proc) as f:
            entries = [line.strip().split(":", 2) for line in f if line.count(":") >= 2]
    except OSError:
        return None
    limits: list[int] = []
    for _, controllers, path in entries:
        # cgroup v2 (no controller list): cpu.max "quota period"; v1: the cpu controller's cfs files
        if controllers == "":
            mounts, files = [root], ("cpu.max",)
        elif "cpu" in controllers.split(","):
            mounts, files = [f"{root}/cpu", f"{root}/cpu,cpuacct"], ("cpu.cfs_quota_us", "cpu.cfs_period_us")
        else:
            continue
        for mount in mounts:
            # the group itself and every group above it (inside a container the group is often the mount's root)
            parts = [p for p in path.split("/") if p]
            for depth in range(len(parts), -1, -1):
                limit = _cgroup_quota(os.path.join(mount, *parts[:depth]), files)
                if limit is not None:
                    limits.append(limit)
    return min(limits) if limits else None


def _cgroup_quota(folder: str, files: tuple[str, ...]) -> int | None:
    try:
        words = []
        for name in files:
            with open(os.path.join(folder, name)) as f:
                words += f.read().split()
        quota, period = words[0], words[1]
        if quota in ("max", "-1"):
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, IndexError, ValueError):
        return None


def prod(xs: Iterable[T], start: int = 1) -> T:
    return functools.reduce(lambda a, b: a * b, xs, start)  # type: ignore[arg-type,return-value]


def argsort(xs: Sequence) -> list[int]:
    return sorted(range(len(xs)), key=xs.__getitem__)


def all_same(xs: Sequence) -> bool:
    return all(x == xs[0] for x in xs)


def flatten(xss: Iterable[Iterable[T]]) -> list[T]:
    return [x for xs in xss for x in xs]


def dedup(xs: Iterable[T]) -> list[T]:
    return list(dict.fromkeys(xs))


def ceildiv(num: int, amt: int) -> int:
    return -(num // -amt)


def round_up(num: int, amt: int) -> int:
    return ceildiv(num, amt) * amt


def strides_for_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides, with 0 for size-1 axes."""
    strides: list[int] = []
    acc = 1
    for s in reversed(shape):
        strides.append(acc if s != 1 else 0)
        acc *= s
    return tuple(reversed(strides))


def is_finite(x: float) -> bool:
    return not (math.isinf(x) or math.isnan(x))


@contextlib.contextmanager
def timed(label: str, enabled: bool = True) -> Iterator[None]:
    import time

    st = time.perf_counter()
    yield
    if enabled:
        print(f"{label}: {(time.perf_counter() - st) * 1e3:.2f} ms")


_gc_pause_lock = threading.Lock()
_gc_pause_depth = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a compile-heavy phase (scheduling, code generation).

    Those phases make millions of short-lived objects that reference counting frees (UOps and their tuples; a UOp
    graph has no cycles), and each of them counts towards the collector's next pass: with a model's long-lived
    objects in the heap, its full passes cost as much as the work (a small GPT's first step: 1547 passes, 2.3 s;
    its code generation 7.0 s with them, 3.5 s without). Cycles made meanwhile are collected once it is back on.
    Nested and concurrent phases share one pause; a collector the program turned off stays off."""
    global _gc_pause_depth, _gc_was_enabled
    import gc

    with _gc_pause_lock:
        if _gc_pause_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pause_depth += 1
    try:
        yield
    finally:
        with _gc_pause_lock:
            _gc_pause_depth -= 1
            if _gc_pause_depth == 0 and _gc_was_enabled:
                gc.enable()


def start_thread(thread: threading.Thread) -> None:
    """`thread.start()`, unless the process is at Linux's cap on memory mappings: there the new thread can't map its
    first frame and `Thread.start` would wait for it forever, so this raises `uopkit.mappings.MappingLimitError`
    (after asking the backends to give mappings back: `uopkit.mappings.ensure_headroom`)."""
    from uopkit.mappings import ensure_headroom

    ensure_headroom(f"starting the thread {thread.name!r}")
    thread.start()


def run_in_thread(fn: Callable[[], T], timeout: float | None, name: str) -> tuple[bool, BaseException | None, T | None]:
    """Run `fn` in a daemon thread for at most `timeout` seconds: (finished, what it raised, what it returned).

    For code that may hang (plugins, in-process compilers): Python can't stop a thread, so one that runs past the
    timeout is abandoned, still running; being a daemon, it does not keep the process alive at exit. Every
    BaseException `fn` raises (SystemExit too) is caught and returned, never raised in this thread."""
    outcome: list[tuple[BaseException | None, T | None]] = []

    def target() -> None:
        try:
            outcome.append((None, fn()))
        except BaseException as e:  # noqa: BLE001 - handed back to the caller
            outcome.append((e, None))

    thread = threading.Thread(target=target, name=name, daemon=True)
    start_thread(thread)
    thread.join(timeout)
    if not outcome:
        return False, None, None
    return True, outcome[0][0], outcome[0][1]


def shrink_span(shape: tuple[int, ...], bounds: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """(start, span) in elements of what a SHRINK by `bounds` of a row-major array of `shape` reads: its first element,
    and how far its last one lies past it, plus one (its size when the elements it keeps are one run of memory)."""
    start, span, stride = 0, 1, 1
    for size, (b, e) in zip(reversed(shape), reversed(bounds), strict=True):
        start += b * stride
        span += (e - b - 1) * stride
        stride *= size
    return start, span
