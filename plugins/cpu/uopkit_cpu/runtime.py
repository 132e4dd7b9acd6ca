"""CPU memory (ctypes byte arrays) and programs (shared objects loaded with ctypes)."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import hashlib
import itertools
import mmap
import operator
import sys
import threading
import time
import weakref
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from uopkit.device import Compiled, LRUAllocator, SharedSegment
from uopkit.hostlib import load_library
from uopkit.mappings import add_reclaimer, map_cap, near_cap

# cache-line and AVX-512 friendly; kernels may use aligned vector loads at the start of a buffer
ALIGNMENT = 64
# buffers from this size get transparent huge pages where the kernel offers them on request (as numpy does from
# 4 MiB): a kernel streaming through 64 MiB on 4 KiB pages misses the TLB every 4 KiB, and reads a 4096x4096 sum
# about 1.5x slower
HUGE_PAGE_MIN = 4 << 20
HUGE_PAGE = 2 << 20


@dataclass(eq=False)
class CPUMemory:
    """A CPU buffer: `raw` keeps the memory alive, `addr` is its ALIGNMENT-aligned start."""

    raw: ctypes.Array[ctypes.c_uint8]
    addr: int
    size: int
    # the mapping `raw` lies in, for large buffers (`raw` keeps it open)
    mapping: mmap.mmap | None = None
    # the shared memory `raw` lies in (`CPUAllocator.adopt_shared`): held so that its descriptor stays open
    segment: SharedSegment | None = None


def _view(mem: CPUMemory, size: int) -> memoryview:
    offset = mem.addr - ctypes.addressof(mem.raw)
    return memoryview(mem.raw).cast("B")[offset : offset + size]


def _alloc_huge(size: int) -> CPUMemory:
    """An anonymous mapping (zero-filled), its start aligned to a huge page, advised to use huge pages."""
    # private: a shared anonymous mapping is shmem, which gets huge pages only if shmem has them on
    mapping = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = (ctypes.c_uint8 * len(mapping)).from_buffer(mapping)
    base = ctypes.addressof(raw)
    try:
        mapping.madvise(mmap.MADV_HUGEPAGE)
    except OSError:
        # a kernel without transparent huge pages (or with them off): ordinary pages, same memory
        pass
    # the buffer starts on a huge page boundary, so its first bytes share a page with nothing else
    return CPUMemory(raw, base + -base % HUGE_PAGE, size, mapping)


def _address_of(mv: memoryview) -> int:
    # the start of writable host memory, through a one-byte c_char over it: `c_char * nbytes` would make a new array
    # type per size, and ctypes keeps those only weakly, so each upload or read-back left a type (a reference cycle)
    # for the garbage collector
    return ctypes.addressof(ctypes.c_char.from_buffer(mv))


class CPUAllocator(LRUAllocator):
    """Zero-initialised, 64-byte aligned host memory (from HUGE_PAGE_MIN: huge-page aligned, on huge pages where
    the OS gives them)."""

    def _alloc(self, size: int) -> CPUMemory:
        try:
            if size >= HUGE_PAGE_MIN and hasattr(mmap, "MADV_HUGEPAGE") and hasattr(mmap, "MAP_ANONYMOUS"):
                return _alloc_huge(size)
            raw = (ctypes.c_uint8 * (size + ALIGNMENT - 1))()
        except (MemoryError, OverflowError, OSError) as e:
            raise MemoryError(
                f"CPU: out of host memory allocating a buffer of {size} bytes ({size / 2**30:.1f} GiB); free "
                "tensors you no longer need or use smaller shapes"
            ) from e
        base = ctypes.addressof(raw)
        addr = (base + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        return CPUMemory(raw, addr, size)

    def copyin(self, dest: CPUMemory, src: memoryview) -> None:
        assert src.nbytes <= dest.size, f"copyin of {src.nbytes} bytes into {dest.size}"
        if src.readonly:
            # ctypes can't take the address of read-only memory (bytes); a memoryview copy is still one memcpy
            _view(dest, src.nbytes)[:] = src
        else:
            ctypes.memmove(dest.addr, _address_of(src), src.nbytes)

    def copyout(self, dest: memoryview, src: CPUMemory) -> None:
        assert dest.nbytes <= src.size, f"copyout of {dest.nbytes} bytes from {src.size}"
        ctypes.memmove(_address_of(dest), src.addr, dest.nbytes)

    # buffers are the process's own memory: the dense linear algebra computes on the host (`Allocator.host_memory`)
    host_memory = True

    # buffers can lie in memory other processes map (`Tensor.share_memory_`): a segment's mapping is page-aligned
    supports_shared_memory = True

    def adopt_shared(self, segment: SharedSegment) -> CPUMemory:
        raw = (ctypes.c_uint8 * segment.size).from_buffer(segment.mapping)
        return CPUMemory(raw, ctypes.addressof(raw), segment.size, segment.mapping, segment)

    reads_at_offset = True

    def copyout_at(self, dest: memoryview, src: CPUMemory, offset: int) -> None:
        assert 0 <= offset and offset + dest.nbytes <= src.size, f"copyout of {dest.nbytes} bytes at {offset}"
        ctypes.memmove(_address_of(dest), src.addr + offset, dest.nbytes)

    writes_at_offset = True

    def copyin_at(self, dest: CPUMemory, src: memoryview, offset: int) -> None:
        assert 0 <= offset and offset + src.nbytes <= dest.size, f"copyin of {src.nbytes} bytes at {offset}"
        if src.readonly:
            _view(dest, offset + src.nbytes)[offset:] = src
        else:
            ctypes.memmove(dest.addr + offset, _address_of(src), src.nbytes)

    # CPU:0 and CPU:1 share the host's memory, so a transfer is a memmove
    supports_transfer = True

    def transfer(self, dest: CPUMemory, src: CPUMemory, size: int, src_device: Compiled, dest_device: Compiled) -> None:
        ctypes.memmove(dest.addr, src.addr, size)


# a CPUMemory's address, in C (map over the buffers without a Python call per buffer)
_addr_of = operator.attrgetter("addr")


def _address(buf: Any) -> int:
    if isinstance(buf, CPUMemory):
        return buf.addr
    if isinstance(buf, int):
        return buf
    raise TypeError(f"CPU programs take CPUMemory buffers, got {type(buf).__name__}")


# per threaded program, the argument arrays of this many recent (buffers, values) launches are kept
ARRAYS_KEPT = 64


def _library_limit() -> int:
    # every loaded library takes 4 (gcc's) to 7 memory mappings, and Linux caps a process at vm.max_map_count of them
    # (65530 by default); a process at the cap fails every mmap (`uopkit.mappings`). The libraries take at most a
    # sixth (gcc's) to under a third of the cap.
    return max(64, min(4096, (map_cap() or 65530) // 24))


# how many kernel libraries stay loaded at once (a long run compiles ever new kernels: ~9,000 libraries in the test
# suite); past it the one loaded first that no bound launch holds is unloaded, and its programs load it again from
# their bytes on their next call
LOADED_LIBRARIES = _library_limit()


@dataclass(eq=False)
class _Library:
    """A loaded shared object (kernels compiled together share one: `ClangCompiler.compile_batch`), the programs
    that call into it, and how many bound launches (`CPUProgram.bind`) hold pointers into it: those keep it loaded."""

    cdll: ctypes.CDLL
    programs: weakref.WeakSet[CPUProgram] = field(default_factory=weakref.WeakSet)
    pins: int = 0


# loaded libraries by content, the first loaded first
_loaded: dict[bytes, _Library] = {}
# (re-entrant: a bound launch collected while the lock is held unpins under it)
_loaded_lock = threading.RLock()
# every this many libraries loaded, the process's memory mappings are counted: within an eighth of the cap (the
# program maps much besides kernels), half the loaded libraries are unloaded
PRESSURE_CHECK_EVERY = 64
_loads = itertools.count(1)


def _load(program: CPUProgram, lib: bytes | None) -> ctypes.CDLL:
    # `program`'s library, loaded from `lib` (else from the program's kept bytes) unless it is loaded
    with _loaded_lock:
        found = _loaded.get(program.digest)
        if found is None:
            if lib is None:
                lib = zlib.decompress(program.packed)
            if len(_loaded) >= LOADED_LIBRARIES:
                # a sixteenth at a time, so that the scan for unpinned libraries comes once per so many loads
                _unload_past(LOADED_LIBRARIES - 1 - LOADED_LIBRARIES // 16)
            elif next(_loads) % PRESSURE_CHECK_EVERY == 0 and near_cap((map_cap() or 0) // 8):
                _unload_past(len(_loaded) // 2)
            # from a private copy of the (verified) bytes, never from a path someone else could swap
            found = _loaded[program.digest] = _Library(load_library(lib, f"kernel {program.name}"))
        found.programs.add(program)
        return found.cdll


def _unload_past(limit: int) -> None:
    # (under _loaded_lock) unload the first loaded libraries that no bound launch holds until at most `limit` are
    # loaded, those no live program calls first (nothing loads them again). Their programs are detached first (they
    # load the library again when next called); then a library another thread is calling into right now stays loaded
    # (a ctypes call runs without the GIL: unmapping its code would crash that thread)
    unused = [digest for digest, library in _loaded.items() if library.pins == 0 and not library.programs]
    unpinned = (digest for digest, library in _loaded.items() if library.pins == 0 and library.programs)
    going = list(itertools.islice(itertools.chain(unused, unpinned), max(0, len(_loaded) - limit)))
    for digest in going:
        for program in list(_loaded[digest].programs):
            program.detach()
    # (after the detach: a thread that calls one of these programs from now on finds it detached and waits for the
    # lock to attach it again; one that got past that check before is in `CPUProgram.__call__` now)
    busy = _called_now()
    for digest in going:
        if digest not in busy:
            library = _loaded.pop(digest)
            with contextlib.suppress(Exception):
                import _ctypes

                _ctypes.dlclose(library.cdll._handle)


def _called_now() -> set[bytes]:
    # the libraries (digests) of the programs other threads are inside `CPUProgram.__call__` of
    me, busy = threading.get_ident(), set()
    for ident, frame in sys._current_frames().items():
        while frame is not None and ident != me:
            program = frame.f_locals.get("self") if frame.f_code is _CALL_CODE else None
            if isinstance(program, CPUProgram):
                busy.add(program.digest)
            frame = frame.f_back
    return busy


def _reclaim() -> None:
    # near the cap on memory mappings (`uopkit.mappings.reclaim`): unload every library no bound launch holds, after
    # a collection (a TinyJit dropped in a reference cycle still holds its bound launches)
    gc.collect()
    with _loaded_lock:
        _unload_past(0)


add_reclaimer(_reclaim)


def _pin(digest: bytes) -> None:
    with _loaded_lock:
        _loaded[digest].pins += 1


def _unpin(digest: bytes) -> None:
    with _loaded_lock:
        library = _loaded.get(digest)
        if library is not None:
            library.pins -= 1


def loaded_libraries() -> int:
    """How many kernel libraries this process has loaded now."""
    return len(_loaded)


class CPUProgram:
    """A kernel in a shared object: ``void name(T0* restrict data0, ..., const int var0, ...)``.

    Buffers are passed first, as pointers, then the symbolic values as int32. The kernel loops over its own
    iteration space, so global and local sizes are accepted and ignored. A kernel with a parallel loop instead exports
    ``name_chunk`` and ``name_chunks`` and runs on the backend's thread pool (`uopkit_cpu.pool`).

    The program keeps its library's bytes (compressed: ~17 KB -> ~4.5 KB): a library unloaded to stay under
    LOADED_LIBRARIES is loaded again on the program's next call.
    """

    def __init__(self, name: str, lib: bytes) -> None:
        self.name = name
        self.packed, self.digest = zlib.compress(lib, 1), hashlib.sha256(lib).digest()
        self.chunks = 0
        self.attach(lib)
        if self.chunks:
            from uopkit_cpu.pool import thread_pool

            self.pool_run = thread_pool().run
            # the (buffer addresses, values) arrays of recent launches: a training step or a replay launches a kernel
            # on the same buffers again (the allocator hands the same memory back), and building two ctypes arrays
            # costs more than the kernel call. Keyed by the addresses themselves, so an entry is never stale.
            self.arrays: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[Any, Any]] = {}

    def attach(self, lib: bytes | None = None) -> None:
        """Load the library (`lib`, else the kept bytes), or find it loaded, and take the kernel's function pointers
        from it (under the lock that unloading takes: a library is never unloaded halfway through)."""
        with _loaded_lock:
            cdll = _load(self, lib)
            try:
                self.chunks = ctypes.c_int.in_dll(cdll, f"{self.name}_chunks").value
            except ValueError:
                self.chunks = 0
            if self.chunks:
                self.entry = ctypes.cast(getattr(cdll, f"{self.name}_chunk"), ctypes.c_void_p)
            else:
                # a function object of its own (attribute access on the library shares one per name): its argument
                # types are this kernel's, set on the first call, so that calls pass plain ints (no c_void_p per
                # buffer). Attached again, it gets the types before it replaces the old one: a call on another thread
                # that checked them already may take either
                fxn = cdll[self.name]
                fxn.restype = None
                if getattr(self, "n_bufs", -1) >= 0:
                    fxn.argtypes = self.fxn.argtypes
                else:
                    self.n_bufs, self.n_vals = -1, -1
                self.fxn = fxn
            self.lib: ctypes.CDLL | None = cdll

    def detach(self) -> None:
        """Forget the library (it is being unloaded): the next call attaches it again. (The function pointers stay
        until then, for a call on another thread that is past its check of `lib`: the library stays loaded while
        such a call runs, see `_unload_past`.)"""
        self.lib = None

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, int, int] = (1, 1, 1),
        local_size: tuple[int, int, int] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        start = time.perf_counter() if wait else 0.0
        if self.lib is None:
            self.attach()
        try:
            addrs = tuple(map(_addr_of, bufs))
        except AttributeError:
            addrs = tuple(map(_address, bufs))
        if self.chunks:
            if type(vals) is not tuple:
                vals = tuple(vals)
            arrays = self.arrays.get((addrs, vals))
            if arrays is None:
                arrays = self._arrays(addrs, vals)
            self.pool_run(self.entry, arrays[0], arrays[1], self.chunks)
        else:
            if len(addrs) != self.n_bufs or len(vals) != self.n_vals:
                self._set_argtypes(len(addrs), len(vals))
            self.fxn(*addrs, *vals)
        return time.perf_counter() - start if wait else None

    def bind(
        self,
        *bufs: Any,
        global_size: tuple[int, int, int] = (1, 1, 1),
        local_size: tuple[int, int, int] | None = None,
        vals: tuple[int, ...] = (),
    ) -> Callable[[], None]:
        """The launch on these buffers and values as a call without arguments (`uopkit.device.Program.bind`): the
        C function with its arguments converted once (a TinyJit replay launches the same kernel on the same buffers
        every call)."""
        addrs = tuple(map(_address, bufs))
        vals = tuple(vals)
        # (attached and pinned under the lock that unloading takes)
        with _loaded_lock:
            if self.lib is None:
                self.attach()
            if self.chunks:
                # (the partial keeps the arrays alive)
                launch = functools.partial(self.pool_run, self.entry, *self._arrays(addrs, vals), self.chunks)
            else:
                if len(addrs) != self.n_bufs or len(vals) != self.n_vals:
                    self._set_argtypes(len(addrs), len(vals))
                launch = functools.partial(self.fxn, *addrs, *vals)
            # the call holds pointers into the library: it stays loaded while the call lives
            _pin(self.digest)
        weakref.finalize(launch, _unpin, self.digest)
        return launch

    def _set_argtypes(self, n_bufs: int, n_vals: int) -> None:
        # the types first: a call on another thread that sees the counts match uses them
        self.fxn.argtypes = [ctypes.c_void_p] * n_bufs + [ctypes.c_int32] * n_vals
        self.n_bufs, self.n_vals = n_bufs, n_vals

    def _arrays(self, addrs: tuple[int, ...], vals: tuple[int, ...]) -> tuple[Any, Any]:
        if len(self.arrays) >= ARRAYS_KEPT:
            self.arrays.clear()
        arrays = self.arrays[(addrs, vals)] = (ctypes.c_void_p * len(addrs))(*addrs), (ctypes.c_int * len(vals))(*vals)
        return arrays


# (what `_called_now` looks for in other threads' stacks)
_CALL_CODE = CPUProgram.__call__.__code__


def open_cpu(device: str) -> Compiled:
    """Build the CPU device (what BackendInfo.open returns)."""
    from uopkit_cpu.compiler import ClangCompiler
    from uopkit_cpu.renderer import ClangRenderer

    return Compiled(device, CPUAllocator(), ClangRenderer(), ClangCompiler(), CPUProgram)
