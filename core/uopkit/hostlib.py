"""Services for backends that compile host shared libraries with a C compiler (the CPU backend, the scaffold from
``uopkit new-backend``): running the compiler with a time limit, and loading its output safely.

Loading. ``dlopen`` needs a path, and a path can be swapped by anyone who can write its folder between the moment
the bytes were checked and the moment they are mapped. So `load_library` never loads a cache file or a shared
temporary name: the (already verified) bytes are written to a new file, created exclusively (O_EXCL, mode 0700),
in a folder this process created with ``mkdtemp`` (mode 0700, owner and mode checked through its open descriptor),
and loaded through that descriptor (``/proc/self/fd/<dirfd>/<name>`` on Linux), so the path resolves to our folder
even if someone renamed things in TMPDIR meanwhile. Each library gets a name unique in the process (the dynamic
loader returns an already loaded library for a name it has seen), and the file is unlinked right after loading.

A TMPDIR mounted noexec can't hold libraries to load; `noexec_problem` says so, naming the folder (the CPU
backend reports it as its availability), instead of the loader's "failed to map segment".

Temporary folders (`compile_tempdir`, the library folder) carry the pid of the process that made them; the next
process deletes those whose process is gone (a compile killed by a signal or a timeout leaves nothing behind for
long).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from uopkit.device import CompileError
from uopkit.diskcache import pid_alive
from uopkit.helpers import run_in_thread
from uopkit.mappings import ensure_headroom, near_cap

TMP_PREFIX = "uopkit-"
T = TypeVar("T")
DEFAULT_COMPILE_TIMEOUT = 300.0
# mappings that must be free to load a library: its segments (4 to 7) and the loader's own allocations
LOAD_MARGIN = 32

_lock = threading.Lock()
_counter = itertools.count()
# pid -> (folder path, descriptor of the folder): a forked child makes its own
_lib_dirs: dict[int, tuple[str, int]] = {}
_cleaned = False
# uopkit-<kind>-<pid>-<random>: what compile_tempdir and the library folder are called
_TMP_NAME = re.compile(r"^uopkit-[a-z]+-(\d+)-")


def compile_timeout() -> float | None:
    """Seconds a compiler may run: ``UOPKIT_COMPILE_TIMEOUT`` (default 300; 0 means no limit)."""
    text = os.environ.get("UOPKIT_COMPILE_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_COMPILE_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"UOPKIT_COMPILE_TIMEOUT={text!r} is not a number of seconds (0 means no limit)") from None
    return None if value <= 0 else value


def run_compiler(cmd: Sequence[str], src: str, compiler: str) -> subprocess.CompletedProcess[str]:
    """Run a compiler command (capturing its output) under `compile_timeout`; a compiler that runs longer is killed
    and raises `CompileError`."""
    timeout = compile_timeout()
    # in a session of its own: a compiler driver (gcc, clang) runs its passes as children (cc1), which killing the
    # driver alone leaves running, for as long as the kernel takes them (found after timeouts: cc1s 33 minutes on)
    posix = os.name == "posix"
    with subprocess.Popen(
        list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=posix
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException as e:
            # (a timeout, or the caller interrupted: the whole group goes, then the pipes are drained)
            _kill_group(proc, posix)
            proc.communicate()
            if not isinstance(e, subprocess.TimeoutExpired):
                raise
            message = (
                f"the compiler did not finish within {timeout:g} s and was stopped; "
                "raise UOPKIT_COMPILE_TIMEOUT (seconds, 0 for no limit) if this kernel really needs longer"
            )
            raise CompileError(message, src, compiler=compiler) from None
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen[str], posix: bool) -> None:
    # the compiler and every process it started (its session's group)
    try:
        if posix:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except ProcessLookupError:
        pass


def call_with_timeout(fn: Callable[[], T], src: str, compiler: str) -> T:
    """Run an in-process compiler call `fn` (a driver's build call, which can't be killed) under `compile_timeout`,
    in a daemon thread; when it runs longer, raise `CompileError` and abandon the thread (it may finish later, its
    result unused)."""
    timeout = compile_timeout()
    finished, error, result = run_in_thread(fn, timeout, f"uopkit compile: {compiler}")
    if not finished:
        message = (
            f"the compiler did not finish within {timeout:g} s and was abandoned (still running in the background); "
            "raise UOPKIT_COMPILE_TIMEOUT (seconds, 0 for no limit) if this kernel really needs longer"
        )
        raise CompileError(message, src, compiler=compiler)
    if error is not None:
        raise error
    return result  # type: ignore[return-value]


def clean_stale_tempdirs() -> None:
    """Delete our temporary folders in TMPDIR whose process is gone (once per process)."""
    global _cleaned
    if _cleaned:
        return
    _cleaned = True
    tmp = tempfile.gettempdir()
    uid = os.geteuid()
    with contextlib.suppress(OSError):
        for entry in os.scandir(tmp):
            if not entry.name.startswith(TMP_PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            match = _TMP_NAME.match(entry.name)
            with contextlib.suppress(OSError):
                if match is not None and entry.stat(follow_symlinks=False).st_uid == uid:
                    if not pid_alive(int(match.group(1))):
                        shutil.rmtree(entry.path, ignore_errors=True)


@contextlib.contextmanager
def compile_tempdir(kind: str = "cc") -> Iterator[str]:
    """A private temporary folder for one compile, deleted afterwards (or by the next process if this one dies).
    `kind` is lower-case letters."""
    assert kind.isalpha() and kind.islower(), f"compile_tempdir kind must be lower-case letters, got {kind!r}"
    clean_stale_tempdirs()
    with tempfile.TemporaryDirectory(prefix=f"{TMP_PREFIX}{kind}-{os.getpid()}-") as tmp:
        yield tmp


def noexec_problem(folder: str | None = None) -> str | None:
    """None when libraries can be loaded from `folder` (default: TMPDIR), else why not, naming the folder."""
    folder = folder or tempfile.gettempdir()
    try:
        flags = os.statvfs(folder).f_flag
    except OSError as e:
        return f"can't use the temporary folder {folder} ({e.strerror or e}); set TMPDIR to a writable folder"
    if flags & getattr(os, "ST_NOEXEC", 0):
        return (
            f"the temporary folder {folder} (TMPDIR) is on a filesystem mounted noexec, so compiled kernels can't be "
            "loaded from it; set TMPDIR to a folder on a filesystem that allows executables"
        )
    return None


def _lib_dir() -> tuple[str, int]:
    pid = os.getpid()
    with _lock:
        if pid not in _lib_dirs:
            clean_stale_tempdirs()
            path = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}lib-{pid}-")
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC)
            st = os.fstat(fd)
            if st.st_uid != os.geteuid() or st.st_mode & 0o077:
                os.close(fd)
                raise OSError(f"the private folder {path} is not private (uid {st.st_uid}, mode {st.st_mode:o})")
            _lib_dirs[pid] = (path, fd)
            # the folder is empty between loads; remove it at exit (a killed process's is removed by the next one)
            import atexit

            atexit.register(shutil.rmtree, path, True)
        return _lib_dirs[pid]


def load_library(lib: bytes, what: str = "kernel") -> ctypes.CDLL:
    """Load shared-library bytes (already checked by the caller) with ctypes, from a private copy (see the module
    docstring). Raises OSError naming the problem (a noexec TMPDIR, a library the loader rejects), and
    `uopkit.mappings.MappingLimitError` at the cap on memory mappings when the backends can't give enough back."""
    path, dirfd = _lib_dir()
    name = f"{os.getpid()}-{next(_counter)}.so"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
    fd = os.open(name, flags, 0o700, dir_fd=dirfd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(lib)
        via_fd = f"/proc/self/fd/{dirfd}/{name}"
        target = via_fd if os.path.exists(via_fd) else os.path.join(path, name)
        try:
            return ctypes.CDLL(target)
        except OSError as e:
            error = e
        if near_cap(LOAD_MARGIN):
            # at the cap on memory mappings (the loader says "failed to map segment"): load again once the backends
            # gave some back, else say so (MappingLimitError)
            ensure_headroom(f"loading the compiled {what}", LOAD_MARGIN)
            try:
                return ctypes.CDLL(target)
            except OSError as e:
                error = e
        problem = noexec_problem(path)
        if problem is not None:
            raise OSError(f"cannot load the compiled {what}: {problem}") from None
        raise OSError(f"cannot load the compiled {what}: {error}") from None
    finally:
        os.unlink(name, dir_fd=dirfd)


@functools.cache
def _host_machine() -> int | None:
    """The ELF machine of this interpreter (what a library must be built for), None when it isn't ELF."""
    try:
        with open(sys.executable, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if not head.startswith(b"\x7fELF"):
        return None
    endian = "<" if head[5] == 1 else ">"
    return int(struct.unpack_from(f"{endian}H", head, 18)[0])


def elf_problem(lib: bytes) -> str | None:
    """None when `lib` is a structurally whole ELF shared library for this machine, else what is wrong.

    The dynamic loader maps the file's segments and reads its headers without bounds checks: a truncated library
    dies with SIGBUS inside dlopen, so the file's extent is checked here first (every header table, segment and
    section inside the file, the section names present), in Python."""
    if not lib:
        return "the output is empty"
    if len(lib) < 64 or not lib.startswith(b"\x7fELF"):
        return "not an ELF file"
    if lib[4] not in (1, 2) or lib[5] not in (1, 2):
        return "bad ELF class or byte order"
    wide, endian = lib[4] == 2, "<" if lib[5] == 1 else ">"
    head = struct.unpack_from(f"{endian}HHIQQQIHHHHHH" if wide else f"{endian}HHIIIIIHHHHHH", lib, 16)
    e_type, e_machine, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, shstrndx = head
    if e_type != 3:
        return f"ELF type {e_type}, expected a shared object (3)"
    host = _host_machine()
    if host is not None and e_machine != host:
        return f"built for ELF machine {e_machine}, this process runs on {host}"
    size = len(lib)
    if phnum == 0 or phoff + phnum * phentsize > size or shoff + shnum * shentsize > size:
        return "header tables reach past the end of the file (truncated?)"
    for i in range(phnum):
        if wide:
            _, _, p_offset, _, _, p_filesz, _, _ = struct.unpack_from(f"{endian}IIQQQQQQ", lib, phoff + i * phentsize)
        else:
            _, p_offset, _, _, p_filesz, _, _, _ = struct.unpack_from(f"{endian}IIIIIIII", lib, phoff + i * phentsize)
        if p_offset + p_filesz > size:
            return f"segment {i} reaches past the end of the file (truncated?)"
    for i in range(shnum):
        fields = struct.unpack_from(
            f"{endian}IIQQQQIIQQ" if wide else f"{endian}IIIIIIIIII", lib, shoff + i * shentsize
        )
        sh_type, sh_offset, sh_size = fields[1], fields[4], fields[5]
        # SHT_NOBITS (8) takes no room in the file
        if sh_type != 8 and sh_offset + sh_size > size:
            return f"section {i} reaches past the end of the file (truncated?)"
    if shnum and (shstrndx >= shnum or struct.unpack_from(f"{endian}I", lib, shoff + shstrndx * shentsize + 4)[0] != 3):
        return "the section name table is missing (damaged file?)"
    return None


def check_library(lib: bytes) -> str | None:
    """None when `lib` is a shared library this process can load, else why not: `elf_problem`, then a real load of
    a private copy (unloaded again). The CPU backend's `Compiler.check`, run before a library is cached."""
    problem = elf_problem(lib)
    if problem is not None:
        return problem
    try:
        handle = load_library(lib, "library")
    except OSError as e:
        return str(e)
    with contextlib.suppress(Exception):
        import _ctypes

        _ctypes.dlclose(handle._handle)
    return None
