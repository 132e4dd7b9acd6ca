"""The process's memory mappings against Linux's cap on them, ``vm.max_map_count`` (65530 by default).

Every ``mmap`` takes a mapping: a loaded kernel library several, a thread's stack one or two, each of Python's
object arenas one, and a new thread's first Python frame one. Past the cap every one of them fails, and a process
there fails in odd places: ``dlopen`` says "failed to map segment", and ``threading.Thread.start`` waits forever
(the new thread can't map its first frame, reports a MemoryError of its own and never tells its starter it began).

So uopkit counts the mappings where it would otherwise hang or fail obscurely: before it starts a thread
(`uopkit.helpers.start_thread`) and after a library failed to load (`uopkit.hostlib.load_library`). Near the cap it
first asks the backends to give mappings back (`add_reclaimer`: the CPU backend unloads the kernel libraries no
call is using, to load them again when they are next called), and when that is not enough raises
`MappingLimitError`, naming the count, the cap and what to do.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

# mappings that must be free to start a thread: its stack and guard page, its first Python frame, a malloc arena,
# and room for what it then allocates
THREAD_MARGIN = 128

_reclaimers: list[Callable[[], None]] = []
_lock = threading.Lock()
_count_buffer = bytearray(1 << 16)
_count_lock = threading.Lock()


class MappingLimitError(MemoryError):
    """The process is at Linux's cap on memory mappings (``vm.max_map_count``): a thread could not be started or a
    library loaded, and nothing uopkit holds could be given back."""


@functools.cache
def map_cap() -> int | None:
    """``vm.max_map_count``: how many memory mappings this process may have; None where it can't be read (not
    Linux)."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def map_count() -> int | None:
    """How many memory mappings this process has now (a line of /proc/self/maps each: ~80 us at a few hundred,
    ~50 ms at 60,000); None where it can't be read."""
    # read through one buffer made beforehand: at the cap, reading the file whole (~6 MB at 60,000 mappings) would
    # need a mapping of its own
    count = 0
    with _count_lock:
        try:
            with open("/proc/self/maps", "rb", buffering=0) as f:
                while n := f.readinto(_count_buffer):
                    count += _count_buffer.count(b"\n", 0, n)
        except OSError:
            return None
    return count


def add_reclaimer(fn: Callable[[], None]) -> None:
    """Register `fn`, called when the process nears the cap: it releases what mappings it can (the CPU backend
    unloads kernel libraries no call is using). It may be called on any thread."""
    with _lock:
        if fn not in _reclaimers:
            _reclaimers.append(fn)


def reclaim() -> None:
    """Ask every registered reclaimer to give mappings back."""
    with _lock:
        fns = list(_reclaimers)
    for fn in fns:
        fn()


def ensure_headroom(what: str, need: int = THREAD_MARGIN) -> None:
    """Make sure `need` more mappings fit under the cap before doing `what` (releasing what the reclaimers can when
    they don't); raise `MappingLimitError` when they still don't. Does nothing where the cap or the count can't be
    read."""
    cap = map_cap()
    count = map_count() if cap is not None else None
    if cap is None or count is None or count + need <= cap:
        return
    reclaim()
    count = map_count() or count
    if count + need <= cap:
        return
    raise MappingLimitError(limit_message(what, count, cap))


def near_cap(need: int = THREAD_MARGIN) -> bool:
    """Whether fewer than `need` mappings are left under the cap (False where it can't be told)."""
    cap, count = map_cap(), map_count()
    return cap is not None and count is not None and count + need > cap


def limit_message(what: str, count: int, cap: int) -> str:
    return (
        f"{what}: this process has {count} memory mappings, at Linux's per-process limit vm.max_map_count={cap}, so "
        "no more memory can be mapped (for a thread's stack, a kernel library, a large allocation). Every distinct "
        "kernel shape compiles to a library that takes mappings while it is loaded; uopkit unloads those no call "
        "is using, but what else the process maps counts too. Raise the limit (as root: sysctl -w "
        "vm.max_map_count=262144), or run fewer distinct shapes in one process (pad variable-length batches to a "
        "few sizes), or release what holds mappings (TinyJit captures keep their kernels loaded, mmap'd files)"
    )
