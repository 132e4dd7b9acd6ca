"""The plugin-facing runtime API: allocators, compilers, programs, devices and buffers.

A backend builds one `Compiled` per device string from four parts:

- an `Allocator` (device memory: alloc/free/copyin/copyout, usually an `LRUAllocator`),
- a renderer (``uopkit.renderer.Renderer``: linear UOps -> source),
- a `Compiler` (source -> binary bytes, cached on disk by the core),
- a runtime: ``runtime(name, lib)`` returns a `Program`.

`Device` is the registry users touch: ``Device["cpu"]`` opens (once) the device through the plugin manager.
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import sys
import tempfile
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from uopkit import diskcache
from uopkit.dtype import DType, to_numpy_dtype
from uopkit.helpers import CACHELEVEL, DEBUG, LRU, LRU_LIMIT, GlobalCounters
from uopkit.plugin.manager import BackendStatus, get_manager, priority

if TYPE_CHECKING:
    import numpy as np

    from uopkit.renderer import Renderer


# ---------------------------------------------------------------- allocators


class Allocator:
    """Device memory. A backend implements `_alloc`, `_free`, `copyin` and `copyout`.

    The opaque handle `_alloc` returns is whatever the backend's programs accept as a buffer argument
    (a pointer, a ``cl.Buffer``, ...); the core never looks inside it. Callers use `alloc` and `free`, which
    an `LRUAllocator` turns into cache lookups. A buffer starts at an address aligned to at least the renderer's
    ``caps.vector_align``: the core's vector loads and stores take that for granted.
    """

    def alloc(self, size: int) -> Any:
        """Allocate `size` bytes (``size >= 1``) and return the backend's opaque handle."""
        return self._alloc(size)

    def free(self, opaque: Any, size: int) -> None:
        """Release a handle from `alloc`; `size` is the size it was allocated with."""
        self._free(opaque, size)

    def _alloc(self, size: int) -> Any:
        """Return a handle to at least `size` bytes of device memory. `size` is in bytes and at least 1: a buffer of
        0 elements gets 1 byte, so a handle's size need not be a multiple of its element size. Less than `size` is
        memory the kernels and `copyin` overrun (the conformance suite's `test_allocator.py` checks it)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _alloc")

    def _free(self, opaque: Any, size: int) -> None:
        # memory owned by Python objects (ctypes, numpy) is freed with them
        pass

    def copyin(self, dest: Any, src: memoryview) -> None:
        """Copy host bytes `src` (format "B", 1-D) to the start of device buffer `dest`."""
        raise NotImplementedError(f"{type(self).__name__} must implement copyin")

    def copyout(self, dest: memoryview, src: Any) -> None:
        """Copy ``dest.nbytes`` bytes from the start of device buffer `src` into host memory `dest` (format "B")."""
        raise NotImplementedError(f"{type(self).__name__} must implement copyout")

    # a backend that can copy out from an offset into a buffer sets this and overrides `copyout_at`
    reads_at_offset: bool = False

    def copyout_at(self, dest: memoryview, src: Any, offset: int) -> None:
        """Copy ``dest.nbytes`` bytes from `offset` bytes into device buffer `src` into host memory `dest` (format
        "B"); called with ``offset + dest.nbytes`` at most the buffer's size. The default copies the buffer's first
        ``offset + dest.nbytes`` bytes out with `copyout` and keeps the last ones (`Tensor.item()` of a view of a
        stored buffer reads only the bytes the view covers this way)."""
        staging = memoryview(bytearray(offset + dest.nbytes))
        self.copyout(staging, src)
        dest[:] = staging[offset:]

    # a backend whose buffers the host can write a part of cheaply (no kernel, no queue: host memory) sets this and
    # implements `copyin_at`: one element stored by `x[i] = number` is then written through it (tensor/direct_write.py)
    writes_at_offset: bool = False

    def copyin_at(self, dest: Any, src: memoryview, offset: int) -> None:
        """Copy host bytes `src` (format "B", 1-D) into device buffer `dest` from `offset` bytes on; called with
        ``offset + src.nbytes`` at most the buffer's size, only when the class sets ``writes_at_offset = True``."""
        raise NotImplementedError(f"{type(self).__name__} must implement copyin_at when writes_at_offset is set")

    # a backend that can copy between two of its devices without the host sets this and implements `transfer`
    supports_transfer: bool = False

    # a backend whose buffers are host memory that the host reads as cheaply as its kernels do (a copy out is a memcpy,
    # no transfer, no queue to wait on) sets this: ops that read their values back anyway (the dense linear algebra:
    # solve, inv, det, eigh, svd, cholesky, qr) then compute them on the host, with numpy's LAPACK
    host_memory: bool = False

    # a backend whose buffers are host memory sets this and implements `adopt_shared`: its tensors can then be moved
    # to memory that other processes map (`Tensor.share_memory_`, `SharedSegment`)
    supports_shared_memory: bool = False

    def adopt_shared(self, segment: SharedSegment) -> Any:
        """The backend's handle for a buffer whose memory is `segment` (``segment.mapping``, ``segment.size`` bytes,
        mapped in this process and shared with others). The handle must hold a reference to `segment`: the memory is
        unmapped when the last reference goes. Called only when the class sets ``supports_shared_memory = True``."""
        raise NotImplementedError(f"{type(self).__name__} can't put buffers in shared memory")

    def transfer(self, dest: Any, src: Any, size: int, src_device: Compiled, dest_device: Compiled) -> None:
        """Copy `size` bytes from `src` (on `src_device`) to `dest` (on `dest_device`, which owns this allocator).

        Called by `Buffer.copy_from` only when this class sets ``supports_transfer = True``, the two devices differ and
        `src_device`'s allocator is of this same class (after ``src_device.synchronize()``); every other copy goes
        through the host (`copyout`, then `copyin`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot transfer between devices")


class LRUAllocator(Allocator):
    """An allocator that keeps freed buffers, by size, and hands them out again instead of allocating.

    Kernels free and allocate buffers of the same sizes over and over (every training step); reusing them
    skips the backend's allocation cost. The cache is bounded: it holds at most as many bytes as were ever in use at
    once through this allocator (`peak_in_use`, so a program never holds more than twice its largest working set), or
    ``LRU_LIMIT`` MiB when that is set; past the bound the buffers freed longest ago are freed for real (shapes that
    change from call to call leave a buffer of each size behind, which are never asked for again). When the backend
    runs out of memory the cache is emptied and the allocation retried once. Set ``LRU=0`` (or ``Context(LRU=0)``)
    to free immediately, `free_cache()` to empty the cache now.
    """

    # (class defaults: a subclass that doesn't call this __init__ still counts)
    in_use = 0
    peak_in_use = 0
    _cached = 0

    def __init__(self) -> None:
        # size -> the freed handles of that size, oldest first; the sizes in the order of their latest free (a size
        # freed again moves to the end), so the front holds what was freed longest ago
        self.cache: dict[int, list[Any]] = {}
        self.in_use = 0
        self.peak_in_use = 0
        self._cached = 0

    def alloc(self, size: int) -> Any:
        cached = self.cache.get(size)
        opaque = None
        if cached:
            try:
                opaque = cached.pop()
                self._cached -= size
            except IndexError:
                # another thread took the last one between the check and the pop
                pass
        if opaque is None:
            try:
                opaque = self._alloc(size)
            except MemoryError:
                self.free_cache()
                opaque = self._alloc(size)
        self.in_use += size
        if self.in_use > self.peak_in_use:
            self.peak_in_use = self.in_use
        return opaque

    def free(self, opaque: Any, size: int) -> None:
        self.in_use -= size
        if not LRU.value:
            self._free(opaque, size)
            return
        # (taken out and put back: the size moves to the end of the order)
        same = self.cache.pop(size, None) or []
        same.append(opaque)
        self.cache[size] = same
        self._cached += size
        if self._cached > self.cache_limit:
            self._evict(self.cache_limit)

    @property
    def cache_limit(self) -> int:
        """The most bytes the cache keeps: ``LRU_LIMIT`` MiB when set (>= 0), else `peak_in_use`."""
        return LRU_LIMIT.value << 20 if LRU_LIMIT.value >= 0 else self.peak_in_use

    def _evict(self, limit: int) -> None:
        # free the buffers freed longest ago until the cache holds at most `limit` bytes
        while self._cached > limit and self.cache:
            size = next(iter(self.cache))
            same = self.cache[size]
            if same:
                opaque = same.pop(0)
                self._cached -= size
                self._free(opaque, size)
            if not same:
                self.cache.pop(size, None)

    def free_cache(self) -> None:
        """Really free every cached buffer."""
        # (swapped out first: a buffer freed by the collector meanwhile goes to the new cache)
        cache, self.cache = self.cache, {}
        self._cached = 0
        for size, opaques in cache.items():
            for opaque in opaques:
                self._free(opaque, size)

    @property
    def cached_bytes(self) -> int:
        """The bytes the cache holds."""
        return self._cached


# ---------------------------------------------------------------- compilers


class CompileError(Exception):
    """A compiler rejected a kernel's source; `str()` shows the compiler's message and the numbered source."""

    def __init__(self, message: str, src: str | bytes, compiler: str = "compiler") -> None:
        super().__init__(message)
        self.message = message
        self.src = src
        self.compiler = compiler

    def __str__(self) -> str:
        if isinstance(self.src, bytes):
            return f"{self.compiler} failed:\n{self.message.rstrip()}\n--- program: {len(self.src)} bytes ---"
        numbered = "\n".join(f"{i:4d} | {line}" for i, line in enumerate(self.src.splitlines(), start=1))
        return f"{self.compiler} failed:\n{self.message.rstrip()}\n--- source ---\n{numbered}"


@dataclass
class CompileCacheStats:
    """Counters of the on-disk compile cache (read by tests and DEBUG output)."""

    hits: int = 0
    misses: int = 0


compile_cache_stats = CompileCacheStats()


class Compiler:
    """Turns a kernel's source into the bytes its runtime loads.

    `compile` gets exactly what the device's renderer returned: a ``str`` of source text for a renderer that writes
    source (every C-like one), or ``bytes`` for one whose `render` returns bytes (bitcode, a serialized module).

    `cache_key` names everything besides the source that changes the binary: backend name and version,
    compiler version and flags, target (GPU arch, host CPU model). It is None to opt out of the disk cache.
    """

    cache_key: str | None = None

    def __init__(self, cache_key: str | None = None) -> None:
        if cache_key is not None:
            self.cache_key = cache_key

    def compile(self, src: str | bytes) -> bytes:
        """Compile `src` (what the renderer returned: str or bytes); raise `CompileError` (with the source and the
        compiler's message) on failure."""
        raise NotImplementedError(f"{type(self).__name__} must implement compile")

    def check(self, lib: bytes) -> None:
        """Raise `CompileError` when `lib` is not something the runtime can load. Called on a fresh compile, before
        the result is cached, so a compiler that wrote garbage never gets it cached. The default only rejects empty
        output; backends override it (the CPU backend loads the library)."""
        if not lib:
            raise CompileError("the compiler returned no output", "", compiler=type(self).__name__)

    def check_cached(self, lib: bytes) -> None:
        """Raise `CompileError` when `lib`, read back from the disk cache, is not something the runtime can load. Its
        header and digest were verified, but an entry written by hand (or a digest forged with it) is loaded without
        `check`: a cache hit is on every realize's path, so this must be cheap (no load). A failure makes the entry a
        miss. The default only rejects empty output; the CPU backend checks the ELF structure (a truncated library
        crashes the loader)."""
        if not lib:
            raise CompileError("the cached output is empty", "", compiler=type(self).__name__)

    def _cached(self, key: str) -> bytes | None:
        # the disk cache's entry for `key` when the backend can load it (`check_cached`), else None (a miss)
        lib = diskcache.get("compile", key)
        if lib is None:
            return None
        try:
            self.check_cached(lib)
        except CompileError as e:
            diskcache.reject("compile", key, e.message)
            return None
        return lib

    def compile_batch(self, srcs: list[str | bytes]) -> list[bytes]:
        """Compile several kernels (distinct sources whose kernels have distinct names) in one go: one output per
        source, in order, each loadable by ``runtime(name, lib)`` for its own kernel (several may share one
        library). On failure raise `CompileError` whose `src` is the failing kernel's source.

        The default compiles each in turn. A backend whose compiler has a high fixed cost per call (a C compiler
        process: driver, startup, assembler, linker) overrides it to build them together."""
        return [self.compile(src) for src in srcs]

    def _returned(self, libs: list[bytes], what: str) -> list[bytes]:
        """`libs` as `what` returned them, after checking each is bytes: a str or a path here would otherwise fail far
        away (hashing for the disk cache, loading in the runtime), without naming the backend."""
        for lib in libs:
            if not isinstance(lib, bytes):
                backend = f"{type(self).__module__}.{type(self).__qualname__}"
                hint = " (for text, return its .encode())" if isinstance(lib, str) else ""
                raise TypeError(
                    f"{backend}.{what} returned {type(lib).__name__}, not bytes: a Compiler returns the bytes its "
                    f"runtime loads{hint}"
                )
        return libs

    def compile_cached_batch(self, srcs: list[str | bytes]) -> list[bytes]:
        """`compile_cached` for several kernels: the disk cache's misses go to one `compile_batch` call, and each
        distinct output is checked once before it is cached (under every source it serves)."""
        if len(srcs) < 2:
            return [self.compile_cached(src) for src in srcs]
        if self.cache_key is None or CACHELEVEL.value == 0:
            return self._returned(self.compile_batch(srcs), "compile_batch()")
        keys = [self._cache_entry_key(src) for src in srcs]
        out: list[bytes | None] = []
        for key in keys:
            out.append(self._cached(key))
            if out[-1] is not None:
                compile_cache_stats.hits += 1
        misses = [i for i, lib in enumerate(out) if lib is None]
        if misses:
            compile_cache_stats.misses += len(misses)
            libs = self._returned(self.compile_batch([srcs[i] for i in misses]), "compile_batch()")
            checked: set[int] = set()
            for i, lib in zip(misses, libs, strict=True):
                if id(lib) not in checked:
                    try:
                        self.check(lib)
                    except CompileError as e:
                        raise CompileError(
                            f"the compiler's output is not loadable: {e.message}", srcs[i], e.compiler
                        ) from None
                    checked.add(id(lib))
                diskcache.put("compile", keys[i], lib)
                out[i] = lib
        return [lib for lib in out if lib is not None]

    def _cache_entry_key(self, src: str | bytes) -> str:
        # a renderer may return bytes: those are keyed by their digest
        text = src if isinstance(src, str) else "bytes:" + hashlib.sha256(src).hexdigest()
        return f"{self.cache_key}\0{text}"

    def compile_cached(self, src: str | bytes) -> bytes:
        """`compile` then `check`, through the disk cache (``uopkit.diskcache``; off with CACHELEVEL=0).

        A cache entry is verified (key and content digest) before it is returned; a corrupt one is a miss, and the
        fresh result overwrites it."""
        if self.cache_key is None or CACHELEVEL.value == 0:
            return self._returned([self.compile(src)], "compile()")[0]
        key = self._cache_entry_key(src)
        cached = self._cached(key)
        if cached is not None:
            compile_cache_stats.hits += 1
            return cached
        compile_cache_stats.misses += 1
        lib = self._returned([self.compile(src)], "compile()")[0]
        try:
            self.check(lib)
        except CompileError as e:
            raise CompileError(f"the compiler's output is not loadable: {e.message}", src, e.compiler) from None
        diskcache.put("compile", key, lib)
        return lib


# ---------------------------------------------------------------- programs and devices


class Program(Protocol):
    """A loaded kernel. ``runtime(name, lib)`` (the backend's program class) builds one from compiled bytes.

    Calling it launches the kernel: buffers are the allocator's opaque handles, in the order of the kernel's
    DEFINE_GLOBALs; `vals` are the int32 values of its symbolic variables, in order. With ``wait=True`` it
    blocks until the kernel finished and returns its run time in seconds, else it may return None.

    Optionally a program also has ``bind(*bufs, global_size=..., local_size=..., vals=...)``, which returns a call
    without arguments that launches the kernel as calling it with those arguments would (``wait=False``): `TinyJit`
    replays, which launch each kernel on the same buffers call after call, use it to prepare the arguments once.
    """

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, int, int] = (1, 1, 1),
        local_size: tuple[int, int, int] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None: ...


ProgramFactory = Callable[[str, bytes], Program]


class Compiled:
    """One opened device: what a backend's ``BackendInfo.open`` returns.

    Subclass it to override `synchronize` (wait for queued work) when the device runs asynchronously.
    """

    def __init__(
        self,
        device: str,
        allocator: Allocator,
        renderer: Renderer | Any,
        compiler: Compiler,
        runtime: ProgramFactory,
    ) -> None:
        self.device = device
        self.allocator = allocator
        self.renderer = renderer
        self.compiler = compiler
        self.runtime = runtime

    def synchronize(self) -> None:
        """Block until all work queued on the device is done (no-op for synchronous devices)."""

    def __repr__(self) -> str:
        return f"<Compiled {self.device}>"


def device_index(device: str) -> int:
    """The index N of a device string "NAME:N" (0 for a plain "NAME"), for a backend's `open` to pick its N-th
    device. Raises ValueError naming the device when N is not a non-negative decimal number ("CUDA:x", "CUDA:-1",
    "CUDA:"). Whether device N exists is the backend's to check: only it knows how many there are."""
    name, colon, index_text = device.partition(":")
    if not colon:
        return 0
    # decimal digits only: int() would also take " 1", "+1", "1_0" and "-1"
    if not (index_text.isascii() and index_text.isdigit()):
        raise ValueError(
            f"bad {name} device {device!r}: the index after ':' must be a non-negative number, as in {name}:1"
        )
    return int(index_text)


class DeviceName(str):
    """A tensor's device: its canonical name ("CPU", "CUDA:1"), a str equal to that name (and hashing as it), that also
    answers torch.device's attributes: `type`, the backend's name in lower case ("cuda", as in
    `autocast(device_type=x.device.type)`), and `index`, the N of "CUDA:N" (0 for a plain name, which is device 0;
    torch's CPU device says None)."""

    __slots__ = ()

    @property
    def type(self) -> str:
        return self.partition(":")[0].lower()

    # (torch.device's attribute: it hides str.index, which a device name has no use for)
    @property
    def index(self) -> int:  # type: ignore[override]
        return device_index(self)


# canonical device names -> their DeviceName (a tensor's `.device` is asked for often)
_device_names: dict[str, DeviceName] = {}


def device_name(device: str) -> DeviceName:
    """`device` (a canonical name) as a DeviceName."""
    named = _device_names.get(device)
    if named is None:
        named = DeviceName(device)
        if len(_device_names) < 1024:
            _device_names[device] = named
    return named


def _device_text(device: object) -> str:
    # a torch.device (or anything with its `type` and `index`) as a device string: torch.device("cuda", 1) -> "cuda:1"
    kind, index = getattr(device, "type", None), getattr(device, "index", None)
    if not isinstance(kind, str) or not (index is None or isinstance(index, int)):
        raise TypeError(
            f"expected a device name ('cpu', 'CUDA:1') or a torch.device, got {device!r} ({type(device).__name__})"
        )
    return kind if index is None else f"{kind}:{index}"


class DeviceError(RuntimeError):
    """A device name that is unknown here, or a backend that cannot run here."""


def _status_line(statuses: dict[str, BackendStatus]) -> str:
    if not statuses:
        return "none (pip install a backend such as ./plugins/cpu)"
    return ", ".join(f"{s.name} ({s.status_text})" for s in statuses.values())


# the backends this repository ships as plugins: device name -> its folder under plugins/ (named when it is missing)
_REPO_PLUGINS = {"CPU": "cpu", "CUDA": "cuda", "OPENCL": "opencl", "TRITON": "triton"}

# device names as written -> canonical names: a Buffer is made per realized value, and each canonicalizes its device
_canonical_names: dict[str, str] = {}


class DeviceRegistry:
    """``Device["cpu:1"]`` -> the opened `Compiled` for "CPU:1" (opened once, then cached)."""

    def __init__(self) -> None:
        self._opened: dict[str, Compiled] = {}
        self._default: str | None = None
        # opening a device is once per device string, even when threads ask for it together
        self._lock = threading.RLock()

    @staticmethod
    def canonicalize(device: str) -> str:
        """The canonical form: "cpu" -> "CPU", "CPU:0" -> "CPU", "cpu:1" -> "CPU:1"; a torch.device (an object with
        `type` and `index`) by its name: torch.device("cuda", 1) -> "CUDA:1"."""
        if not isinstance(device, str):
            device = _device_text(device)
        canonical = _canonical_names.get(device)
        if canonical is None:
            name, _, index = device.strip().partition(":")
            name = name.upper()
            canonical = name if index in ("", "0") else f"{name}:{index}"
            if len(_canonical_names) < 1024:
                _canonical_names[device] = canonical
        return canonical

    def backends(self) -> dict[str, BackendStatus]:
        return get_manager().backends()

    def _usable_status(self, name: str) -> BackendStatus:
        """The status of backend `name` (canonical, no index); raises DeviceError when unknown or unusable. Loads
        only the plugins that may provide `name` when it can (see `uopkit.plugin.manager`)."""
        status = get_manager().status(name)
        if status is None:
            plugin = _REPO_PLUGINS.get(name)
            hint = f"; uopkit's {name} backend installs with `pip install ./plugins/{plugin}`" if plugin else ""
            raise DeviceError(f"unknown device {name}; installed backends: {_status_line(self.backends())}{hint}")
        if not status.usable or status.info is None:
            raise DeviceError(
                f"device {name} (from {status.plugin}) cannot be used here: {status.reason}\n"
                f"hint: run `uopkit devices` to see every backend's status, or choose another with DEVICE=..."
            )
        return status

    def __getitem__(self, device: str) -> Compiled:
        # (a name that is a key is canonical already: every buffer's allocator is looked up by its canonical name)
        opened = self._opened.get(device)
        if opened is not None:
            return opened
        device = self.canonicalize(device)
        opened = self._opened.get(device)
        if opened is not None:
            return opened
        with self._lock:
            if device in self._opened:
                return self._opened[device]
            status = self._usable_status(device.partition(":")[0])
            assert status.info is not None
            try:
                compiled = status.info.open(device)
            except (Exception, SystemExit) as e:
                # SystemExit too: a backend must not end the program while opening; a real Ctrl-C still propagates
                raise DeviceError(
                    f"backend {status.name} ({status.plugin}) failed to open {device}: {type(e).__name__}: {e}"
                ) from e
            if not isinstance(compiled, Compiled):
                raise DeviceError(
                    f"backend {status.name} ({status.plugin}) returned {type(compiled).__name__} from "
                    f"open({device!r}), not a uopkit.device.Compiled"
                )
            if DEBUG >= 1:
                print(f"opened device {device} from {status.plugin} {status.version}")
            self._opened[device] = compiled
            return compiled

    @property
    def DEFAULT(self) -> str:
        """The default device: ``Device.DEFAULT = ...`` if set, else the DEVICE environment variable (read now),
        else the usable backend with the highest priority (an error when two distributions claim a name that
        would outrank it: see UOPKIT_BACKEND_<NAME>)."""
        requested = self._default or os.environ.get("DEVICE")
        if requested:
            device = self.canonicalize(requested)
            self._usable_status(device.partition(":")[0])
            return device
        best, contested = get_manager().best()
        if contested is not None and (best is None or priority(contested) > priority(best)):
            raise DeviceError(f"no default device: {contested.reason}")
        if best is None:
            raise DeviceError(f"no usable device; installed backends: {_status_line(self.backends())}")
        return best.name

    @DEFAULT.setter
    def DEFAULT(self, device: str | None) -> None:
        self._default = None if device is None else self.canonicalize(device)


Device = DeviceRegistry()


# ---------------------------------------------------------------- shared host memory


class SharedSegment:
    """`size` bytes of host memory that other processes can map: an anonymous memory file (Linux's memfd; elsewhere
    a temporary file removed as soon as it is made), mapped shared here. It has no name in any directory, so the OS
    frees it when the last process that maps it or holds its descriptor lets go, a process killed midway included:
    nothing is left behind in /dev/shm. Pickled by multiprocessing (its `ForkingPickler`: a spawned child's arguments,
    a Queue's items) it travels as its file descriptor, duplicated into the receiver (`multiprocessing.reduction.
    DupFd`: handed to a spawned child at its start, else fetched from the sender, which must still be running)."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self.mapping = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        stat = os.fstat(fd)
        # the memory file's identity: the same segment received twice in one process is recognized
        self.key = (stat.st_dev, stat.st_ino)

    @classmethod
    def create(cls, size: int) -> SharedSegment:
        """A new zero-filled segment of `size` bytes (at least 1)."""
        try:
            if hasattr(os, "memfd_create"):
                fd = os.memfd_create("uopkit", os.MFD_CLOEXEC)
            else:
                # a file unlinked at once: only its descriptor (and mappings) keep it
                fd, path = tempfile.mkstemp(prefix="uopkit-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
                os.unlink(path)
        except OSError as e:
            if e.errno != errno.EMFILE:
                raise
            # (each segment holds two descriptors: ours, to send it, and its mapping's)
            raise OSError(
                e.errno,
                f"{e.strerror}: every tensor in shared memory holds two file descriptors; raise the limit "
                "(`ulimit -n`, resource.setrlimit(resource.RLIMIT_NOFILE, ...)) or share fewer, larger tensors",
            ) from e
        try:
            os.ftruncate(fd, size)
            return cls(fd, size)
        except BaseException:
            os.close(fd)
            raise

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        from multiprocessing.reduction import DupFd

        return _received_segment, (DupFd(self.fd), self.size)

    def __del__(self) -> None:
        # (the mapping goes with the last buffer handle over it; the descriptor is ours to close)
        fd = getattr(self, "fd", -1)
        if fd >= 0:
            self.fd = -1
            os.close(fd)

    def __repr__(self) -> str:
        return f"<SharedSegment {self.size} bytes fd={self.fd}>"


def _received_segment(fd: Any, size: int) -> SharedSegment:
    # a segment unpickled in another process: its descriptor, duplicated for this one
    return SharedSegment(fd.detach(), size)


# ---------------------------------------------------------------- buffers


class Buffer:
    """`size` elements of `dtype` on `device`, allocated lazily, freed (back to the allocator's cache) with it."""

    def __init__(self, device: str, size: int, dtype: DType, opaque: Any = None) -> None:
        assert size >= 0, f"buffer size must be >= 0, got {size}"
        self.device = Device.canonicalize(device)
        self.size = size
        self.dtype = dtype
        self._buf: Any = None
        self._owned = False
        # the shared host memory this buffer lies in (`in_shared_memory`), else None
        self.segment: SharedSegment | None = None
        if opaque is not None:
            self.allocate(opaque)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def allocator(self) -> Allocator:
        return Device[self.device].allocator

    def is_allocated(self) -> bool:
        return self._buf is not None

    def allocate(self, opaque: Any = None) -> Buffer:
        """Allocate device memory, or adopt `opaque` (which then stays owned by the caller: it is not freed)."""
        assert self._buf is None, f"{self} is already allocated"
        if opaque is not None:
            self._buf, self._owned = opaque, False
        else:
            # zero-size buffers still get one byte so kernels always receive a valid handle
            self._buf, self._owned = self.allocator.alloc(max(self.nbytes, 1)), True
            GlobalCounters.mem_used += self.nbytes
        return self

    def ensure_allocated(self) -> Buffer:
        return self if self.is_allocated() else self.allocate()

    @property
    def opaque(self) -> Any:
        """The allocator's handle, what programs take as an argument."""
        buf = self._buf
        assert buf is not None, f"{self} is not allocated"
        return buf

    def copyin(self, mv: memoryview | bytes | bytearray) -> Buffer:
        """Copy host data in; it must have exactly `nbytes` bytes."""
        data = _as_bytes_view(mv)
        assert data.nbytes == self.nbytes, f"copyin of {data.nbytes} bytes into {self} of {self.nbytes} bytes"
        self.ensure_allocated()
        if self.nbytes:
            self.allocator.copyin(self._buf, data)
        return self

    def copyout(self, mv: memoryview) -> memoryview:
        """Copy the buffer into host memory `mv` (exactly `nbytes` bytes); returns `mv`."""
        data = _as_bytes_view(mv)
        assert data.nbytes == self.nbytes, f"copyout of {self} ({self.nbytes} bytes) into {data.nbytes} bytes"
        assert self.is_allocated(), f"{self} is not allocated"
        if self.nbytes:
            Device[self.device].synchronize()
            self.allocator.copyout(data, self._buf)
        return mv

    def as_numpy(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """A fresh 1-D numpy array with the buffer's elements [start, stop) (all of them by default)."""
        import numpy as np

        stop = self.size if stop is None else stop
        assert 0 <= start <= stop <= self.size, f"elements [{start}, {stop}) of {self}"
        out = np.empty(stop - start, dtype=to_numpy_dtype(self.dtype))
        if start == 0 and stop == self.size:
            self.copyout(out.data)
        elif out.nbytes:
            assert self.is_allocated(), f"{self} is not allocated"
            Device[self.device].synchronize()
            self.allocator.copyout_at(_as_bytes_view(out.data), self._buf, start * self.dtype.itemsize)
        return out

    numpy = as_numpy

    def copy_from(self, other: Buffer) -> Buffer:
        """Copy `other` (same byte size, any device) into this buffer."""
        assert other.nbytes == self.nbytes, f"copy_from size mismatch: {other} -> {self}"
        self.ensure_allocated()
        if self.nbytes == 0:
            return self
        dest_allocator = self.allocator
        if self.device != other.device and dest_allocator.supports_transfer:
            src_device, dest_device = Device[other.device], Device[self.device]
            if type(src_device.allocator) is type(dest_allocator):
                src_device.synchronize()
                dest_allocator.transfer(self._buf, other.opaque, self.nbytes, src_device, dest_device)
                return self
        # through the host
        staging = memoryview(bytearray(self.nbytes))
        other.copyout(staging)
        dest_allocator.copyin(self._buf, staging)
        return self

    @classmethod
    def in_shared_memory(cls, device: str, size: int, dtype: DType, segment: SharedSegment | None = None) -> Buffer:
        """A buffer whose memory is `segment` (None: a new one of its size), which other processes can map. Raises
        RuntimeError for a device whose allocator can't (``Allocator.supports_shared_memory``)."""
        allocator = Device[device].allocator
        if not allocator.supports_shared_memory:
            raise RuntimeError(
                f"{Device.canonicalize(device)} buffers can't be put in memory other processes map: only a backend "
                "whose memory is the host's (CPU) can"
            )
        if segment is None:
            segment = SharedSegment.create(max(size * dtype.itemsize, 1))
        assert segment.size >= size * dtype.itemsize, f"{segment} is too small for {size} elements of {dtype}"
        out = cls(device, size, dtype, opaque=allocator.adopt_shared(segment))
        out.segment = segment
        return out

    def to_shared_memory(self) -> Buffer:
        """A new buffer in shared memory (`in_shared_memory`) holding this one's contents."""
        out = Buffer.in_shared_memory(self.device, self.size, self.dtype)
        if self.is_allocated():
            out.copy_from(self)
        return out

    def __del__(self) -> None:
        # getattr: __init__ may have failed before _buf existed
        buf = getattr(self, "_buf", None)
        if buf is None or not self._owned:
            return
        self._buf = None
        GlobalCounters.mem_used -= self.nbytes
        opened = Device._opened.get(self.device)
        if opened is not None:
            opened.allocator.free(buf, max(self.nbytes, 1))

    def __repr__(self) -> str:
        return f"<Buffer {self.device} {self.size} {self.dtype}{'' if self.is_allocated() else ' (unallocated)'}>"


def _as_bytes_view(mv: memoryview | bytes | bytearray) -> memoryview:
    """A flat, byte-format view of any C-contiguous buffer (numpy arrays included)."""
    view = mv if isinstance(mv, memoryview) else memoryview(mv)
    if view.format != "B" or view.ndim != 1:
        if not view.c_contiguous:
            raise ValueError("buffer data must be C-contiguous")
        view = view.cast("B")
    return view


# ---------------------------------------------------------------- torch.device

# torch's device types: the names torch.device takes (uopkit's backends' names are taken besides, in either case)
_TORCH_DEVICE_TYPES = frozenset(
    "cpu cuda ipu xpu mkldnn opengl opencl ideep hip ve fpga maia xla lazy vulkan mps meta hpu mtia "
    "privateuseone".split()
)


def _device_type_name(kind: str, given: object) -> str:
    if not kind or not (kind.isascii() and (kind.isalnum() or "_" in kind)):
        raise RuntimeError(f"device: {given!r} is no device name; write one such as 'cpu', 'cuda' or 'cuda:1'")
    lowered = kind.lower()
    if lowered not in _TORCH_DEVICE_TYPES and kind.upper() not in get_manager().backends():
        raise RuntimeError(
            f"device: unknown device type {kind!r} in {given!r}; torch's types (cpu, cuda, mps, ...) and the installed "
            f"backends' names are taken ({_status_line(get_manager().backends())})"
        )
    return lowered


def _device_index_value(index: object, given: object) -> int | None:
    if index is None:
        return None
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"device: the index must be an int, got {type(index).__name__} ({given!r})")
    if index < 0:
        raise RuntimeError(f"device: the index must be a non-negative int, got {index} ({given!r})")
    return index


class _DeviceKind(type):
    # `isinstance(t.device, Tensor.device)` holds, as torch's: a tensor's device is a DeviceName, a str that has
    # torch.device's `type` and `index`
    def __instancecheck__(cls, obj: object) -> bool:
        return type.__instancecheck__(cls, obj) or isinstance(obj, DeviceName)


class TorchDevice(metaclass=_DeviceKind):
    """torch.device, for ported programs: `Tensor.device("cuda")`, `uopkit.device("cuda", 1)`, `("cuda:1")`,
    `("cpu")`, another device object, or an int (the CUDA device of that index). `type` is torch's lowercase type name,
    `index` the number given (None without one), `str()` torch's spelling ('cuda:1'). Every uopkit function that takes
    a device takes one: torch's 'cpu' is uopkit's CPU backend and 'cuda' the CUDA plugin's device (an error that says
    why when that can't run here, at first use, as for the name 'cuda'). Unlike torch's, it compares equal to the
    strings and devices that name the same uopkit device, by canonical name ('cuda' == 'CUDA:0' == `x.device`), and
    hashes as that name. `with Tensor.device("cpu"):` makes it the default device inside the block, as torch's.

    >>> from uopkit import Tensor
    >>> d = Tensor.device("cpu")
    >>> d, str(d), d.type, d.index, d == "CPU", Tensor([1.0], device=d).device == d
    (device(type='cpu'), 'cpu', 'cpu', None, True, True)
    """

    __slots__ = ("_type", "_index", "_saved")

    def __init__(self, type: object, index: object = None) -> None:  # noqa: A002 (torch's argument name)
        given = type if index is None else (type, index)
        if isinstance(type, int) and not isinstance(type, bool):
            # torch's accelerator index: uopkit's accelerator is the CUDA plugin's device
            status = get_manager().status("CUDA")
            if status is None or not status.usable:
                why = "the CUDA backend is not installed" if status is None else status.reason
                raise RuntimeError(
                    f"device({type}): an index alone names a CUDA device, and none can be used here ({why}); name "
                    f"the device, as in device('cpu')"
                )
            type, index = "cuda", type
        elif not isinstance(type, str):
            if index is not None:
                raise TypeError(f"device: give an index only with a type name, got {given!r}")
            type = _device_text(type)
        kind, colon, index_text = type.partition(":")
        if colon:
            if index is not None:
                raise RuntimeError(f"device: {type!r} has an index already; give it there or as `index`, not both")
            if not (index_text.isascii() and index_text.isdigit()) or (len(index_text) > 1 and index_text[0] == "0"):
                raise RuntimeError(f"device: bad index in {type!r}; write a non-negative number, as in 'cuda:1'")
            index = int(index_text)
        self._type = _device_type_name(kind, given)
        self._index = _device_index_value(index, given)
        self._saved: list[str | None] = []

    @property
    def type(self) -> str:
        """torch's type name: 'cpu', 'cuda', ..."""
        return self._type

    @property
    def index(self) -> int | None:
        """The index given ('cuda:1' -> 1), None when none was."""
        return self._index

    @property
    def name(self) -> str:
        """uopkit's canonical name of this device ('CPU', 'CUDA:1'): what a tensor's `.device` says."""
        return DeviceRegistry.canonicalize(str(self))

    def __str__(self) -> str:
        return self._type if self._index is None else f"{self._type}:{self._index}"

    def __repr__(self) -> str:
        index = "" if self._index is None else f", index={self._index}"
        return f"device(type={self._type!r}{index})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                return DeviceRegistry.canonicalize(other) == self.name
            except Exception:
                return False
        if type(other) is TorchDevice or (
            isinstance(getattr(other, "type", None), str) and type(other).__name__ == "device"
        ):
            return DeviceRegistry.canonicalize(other) == self.name  # type: ignore[arg-type]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (TorchDevice, (self._type, self._index))

    def __enter__(self) -> TorchDevice:
        # torch's `with torch.device(...)`: the default device inside the block
        self._saved.append(Device._default)
        Device.DEFAULT = str(self)
        return self

    def __exit__(self, *exc: object) -> None:
        Device._default = self._saved.pop()


class _DeviceModule(types.ModuleType):
    # `uopkit.device` is this module and, called, torch.device (`uopkit.device("cuda")`, `isinstance(d, uopkit.device)`)
    def __call__(self, type: object, index: object = None) -> TorchDevice:  # noqa: A002
        return TorchDevice(type, index)

    def __instancecheck__(self, obj: object) -> bool:
        return isinstance(obj, TorchDevice)


sys.modules[__name__].__class__ = _DeviceModule
