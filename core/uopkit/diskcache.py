"""The on-disk cache (compiled kernels, BEAM search results): what it trusts and what it checks.

Guarantees (docs/cache-and-plugins.md says the same for users):

- The folder (``UOPKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/uopkit``, else ``~/.cache/uopkit``) is used only when it
  is a directory owned by this user and not writable by group or others, and its ancestors are owned by this user
  or root and not writable by others (unless sticky, like /tmp): whoever can write the cache could otherwise put
  code into this process. A folder that fails the check, or that can't be created or written (no writable HOME),
  is not used: one warning, and the process runs without a cache. ``CACHELEVEL=0`` turns the cache off silently.
- An entry is raw bytes behind a two-line header: a magic line and a JSON line with the table, the SHA-256 of the
  entry's key and the size and SHA-256 of the payload. Nothing is unpickled or executed to read it. Every field is
  checked before the payload is returned, so a truncated, zeroed, bit-flipped or swapped entry is a miss (one
  warning), and the caller recomputes and overwrites it.
- Writes are atomic: a temporary file in the same folder, then ``os.replace``. Temporary files of a process that
  died before renaming (its pid is in the name) are deleted the next time a process opens the cache.
- The cache stays under ``UOPKIT_CACHE_MAX_MB`` (default 4096; 0: no limit): a read marks its entry used (its
  mtime), and at most once per TRIM_EVERY_SECONDS (across processes, by a stamp file) a process that writes an entry
  deletes the entries used longest ago, in a background thread, until the cache is at TRIM_TO of the limit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import json
import os
import pathlib
import stat
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

from uopkit.dtype import DType, PtrDType
from uopkit.helpers import CACHELEVEL, start_thread

MAGIC = b"uopkit-cache-entry 1\n"
TMP_PREFIX = ".tmp-"
# a temporary file older than this is stale even if a process with its pid is alive (pids get reused)
STALE_TMP_SECONDS = 24 * 3600
# the size limit's default (MiB), how often a writer looks at the size, and how far a trim goes below the limit
CACHE_MAX_MB = 4096
TRIM_EVERY_SECONDS = 3600
TRIM_TO = 0.8
TRIM_STAMP = ".last-trim"
HINT = "set UOPKIT_CACHE_DIR to a folder only you can write, or CACHELEVEL=0 to run without a cache"


class CacheWarning(UserWarning):
    """The cache folder was refused or an entry was corrupt; the process goes on without that cache entry."""


@dataclass
class CacheStats:
    """Counters for tests and DEBUG output."""

    corrupt: int = 0
    refused: int = 0
    write_errors: int = 0


stats = CacheStats()
_lock = threading.Lock()
# resolved folder path -> the usable folder, or None when refused (so each folder is checked and warned about once)
_roots: dict[str, pathlib.Path | None] = {}
_warned: set[str] = set()


def _warn_once(kind: str, message: str) -> None:
    if kind in _warned:
        return
    _warned.add(kind)
    warnings.warn(message, CacheWarning, stacklevel=3)


def cache_path() -> pathlib.Path:
    """Where the cache lives (not checked, not created): UOPKIT_CACHE_DIR, else XDG_CACHE_HOME/uopkit, else
    ~/.cache/uopkit."""
    base = os.getenv("UOPKIT_CACHE_DIR") or os.path.join(
        os.getenv("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "uopkit"
    )
    return pathlib.Path(base).absolute()


def folder_problem(path: pathlib.Path) -> str | None:
    """None when `path` (an existing folder) is safe to load code from, else why not."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    uid = os.geteuid()
    if st.st_uid != uid:
        return f"it is owned by uid {st.st_uid}, not by you (uid {uid})"
    if st.st_mode & 0o022:
        return f"it is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}; chmod go-w {path} fixes it)"
    # an ancestor another user can write lets that user rename the folder away and put their own in its place
    for parent in path.resolve().parents:
        pst = os.stat(parent)
        if pst.st_uid not in (uid, 0):
            return f"its parent {parent} is owned by uid {pst.st_uid}, who could replace it"
        if pst.st_mode & 0o002 and not pst.st_mode & stat.S_ISVTX:
            return f"its parent {parent} is writable by others and not sticky, so anyone could replace it"
    return None


def cache_root() -> pathlib.Path | None:
    """The checked cache folder (created if missing), or None when the cache is off or the folder is refused."""
    if CACHELEVEL.value == 0:
        return None
    path = cache_path()
    with _lock:
        key = str(path)
        if key not in _roots:
            _roots[key] = _open_root(path)
        return _roots[key]


def _open_root(path: pathlib.Path) -> pathlib.Path | None:
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        problem = folder_problem(path)
    except OSError as e:
        problem = f"it can't be created or read ({e.strerror or e})"
    if problem is None and not os.access(path, os.W_OK | os.X_OK):
        problem = "it is not writable"
    if problem is not None:
        stats.refused += 1
        _warn_once(
            f"root {path}", f"uopkit: not using the cache folder {path}: {problem}; running without a cache ({HINT})"
        )
        return None
    _clean_stale_tmp(path)
    return path


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clean_stale_tmp(root: pathlib.Path) -> None:
    """Delete temporary files that processes killed mid-write left behind (theirs, not a live process's)."""
    now = time.time()
    for folder in [root, *(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())]:
        for entry in folder.glob(f"{TMP_PREFIX}*"):
            pid_text = entry.name[len(TMP_PREFIX) :].split("-", 1)[0]
            with contextlib.suppress(OSError):
                old = now - entry.lstat().st_mtime > STALE_TMP_SECONDS
                if old or not pid_text.isdigit() or not pid_alive(int(pid_text)):
                    entry.unlink()


def _table_folder(table: str, create: bool) -> pathlib.Path | None:
    root = cache_root()
    if root is None:
        return None
    folder = root / table
    if create:
        try:
            folder.mkdir(exist_ok=True, mode=0o700)
        except OSError as e:
            _write_failed(folder, e)
            return None
    return folder


class Unkeyable(Exception):
    """A value `key_text` can't write exactly (what it is part of is not cached)."""


def key_text(x: Any) -> str:
    """`x` as a cache key's text: the same in every process (a repr is not: a frozenset's order changes with the string
    hash seed), and never the same for two values of the types a kernel AST and a renderer's caps hold. Floats by
    their exact hex form (0.0 and -0.0 differ), sets sorted, dataclasses field by field; raises `Unkeyable` for any
    other type (its repr may leave something out or differ between processes)."""
    t = type(x)
    if x is None:
        return "N"
    if t is bool:
        return "T" if x else "F"
    if t is int:
        return f"i{x}"
    if t is float:
        return f"f{x.hex()}"
    if t is str:
        return f"s{json.dumps(x)}"
    if t is tuple or t is list:
        return "(" + ",".join(key_text(v) for v in x) + ")"
    if t is frozenset or t is set:
        return "{" + ",".join(sorted(key_text(v) for v in x)) + "}"
    if isinstance(x, enum.Enum):
        return f"e{t.__module__}.{t.__qualname__}.{x.name}"
    if t is DType or t is PtrDType:
        return f"d{x!r}"
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        fields = ",".join(f"{f.name}={key_text(getattr(x, f.name))}" for f in dataclasses.fields(x))
        return f"c{t.__module__}.{t.__qualname__}[{fields}]"
    raise Unkeyable(f"{t.__module__}.{t.__qualname__}")


def key_digest(table: str, key: str) -> str:
    return hashlib.sha256(f"{table}\0{key}".encode()).hexdigest()


def entry_path(table: str, key: str) -> pathlib.Path | None:
    """The file of an entry (for tests and tools); None when the cache is off or refused."""
    folder = _table_folder(table, create=False)
    return None if folder is None else folder / f"{key_digest(table, key)}.entry"


def _header(table: str, digest: str, payload: bytes) -> bytes:
    fields = {"table": table, "key": digest, "size": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
    return MAGIC + json.dumps(fields, sort_keys=True).encode() + b"\n"


def _read(path: pathlib.Path) -> bytes:
    # O_NOFOLLOW: an entry is a regular file written by us, never a link to somewhere else
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        return f.read()


def _verify(data: bytes, table: str, digest: str) -> tuple[bytes | None, str]:
    """(payload, "") when `data` is an intact entry of `table` for the key with `digest`, else (None, why not)."""
    if not data.startswith(MAGIC):
        return None, "bad header" if data else "empty file"
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        return None, "truncated header"
    try:
        fields = json.loads(data[len(MAGIC) : end])
    except ValueError:
        return None, "unreadable header"
    if not isinstance(fields, dict) or fields.get("table") != table or fields.get("key") != digest:
        return None, "it belongs to another key"
    payload = data[end + 1 :]
    if fields.get("size") != len(payload):
        return None, f"size {len(payload)}, header says {fields.get('size')}"
    if fields.get("sha256") != hashlib.sha256(payload).hexdigest():
        return None, "content digest mismatch"
    return payload, ""


def get(table: str, key: str) -> bytes | None:
    """The payload stored for `key` in `table`, or None (a miss: absent, corrupt, cache off or refused)."""
    path = entry_path(table, key)
    if path is None:
        return None
    try:
        data = _read(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        why = f"unreadable: {e}"
    else:
        payload, why = _verify(data, table, key_digest(table, key))
        if payload is not None:
            # (used now: a trim deletes the entries used longest ago)
            with contextlib.suppress(OSError):
                os.utime(path)
            return payload
    stats.corrupt += 1
    _warn_once("corrupt", f"uopkit: ignoring corrupt cache entry {path} ({why}); it is recomputed and overwritten")
    return None


def reject(table: str, key: str, why: str) -> None:
    """Count and warn about an entry `get` returned that its reader found unusable (a payload whose digest matches but
    that the backend can't load): a miss like a corrupt entry, recomputed and overwritten by the caller."""
    stats.corrupt += 1
    _warn_once(
        "corrupt",
        f"uopkit: ignoring corrupt cache entry {entry_path(table, key)} ({why}); it is recomputed and overwritten",
    )


def put(table: str, key: str, payload: bytes) -> None:
    """Store `payload` for `key` in `table` (atomically); a cache that can't be written is skipped with a warning."""
    folder = _table_folder(table, create=True)
    if folder is None:
        return
    digest = key_digest(table, key)
    tmp = None
    try:
        # the pid in the name lets the next process tell a dead writer's leftover from a live writer's file
        fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(_header(table, digest, payload))
            f.write(payload)
        os.replace(tmp, folder / f"{digest}.entry")
    except OSError as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _write_failed(folder, e)
        return
    _trim_when_due(folder.parent)


def size_limit() -> int | None:
    """The cache's size limit in bytes (UOPKIT_CACHE_MAX_MB), None for no limit."""
    text = os.getenv("UOPKIT_CACHE_MAX_MB", "")
    try:
        mb = float(text) if text else CACHE_MAX_MB
    except ValueError:
        _warn_once("max", f"uopkit: UOPKIT_CACHE_MAX_MB={text!r} is not a number; using {CACHE_MAX_MB}")
        mb = CACHE_MAX_MB
    return None if mb <= 0 else int(mb * (1 << 20))


# when this process last looked at each root's stamp (time.monotonic)
_looked: dict[pathlib.Path, float] = {}


def _trim_when_due(root: pathlib.Path) -> None:
    # (after a write: the stamp's mtime says when a process last trimmed; the one that renews it trims)
    limit = size_limit()
    now = time.monotonic()
    if limit is None or now - _looked.get(root, -TRIM_EVERY_SECONDS) < TRIM_EVERY_SECONDS:
        return
    _looked[root] = now
    stamp = root / TRIM_STAMP
    try:
        if time.time() - stamp.stat().st_mtime < TRIM_EVERY_SECONDS:
            return
    except FileNotFoundError:
        pass
    except OSError:
        return
    # (a thread that can't be started, RuntimeError or MemoryError at the cap on memory mappings, leaves the trim to a
    # later writer: the write itself succeeded)
    with contextlib.suppress(OSError, RuntimeError, MemoryError):
        stamp.touch()
        start_thread(threading.Thread(target=trim, args=(root, limit), name="uopkit cache trim", daemon=True))


def trim(root: pathlib.Path, limit: int) -> tuple[int, int]:
    """Delete the entries of the cache in `root` used longest ago until they take at most TRIM_TO of `limit` bytes
    (nothing while they take at most `limit`). Returns (entries deleted, bytes freed). Safe beside other processes:
    a reader that loses an entry sees a miss and compiles again."""
    found: list[tuple[float, int, str]] = []
    with contextlib.suppress(OSError), os.scandir(root) as tables:
        for table in tables:
            if not table.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError), os.scandir(table.path) as files:
                for f in files:
                    if f.name.endswith(".entry"):
                        with contextlib.suppress(OSError):
                            st = f.stat(follow_symlinks=False)
                            found.append((st.st_mtime, st.st_size, f.path))
    total = sum(size for _, size, _ in found)
    if total <= limit:
        return 0, 0
    deleted = freed = 0
    for _, size, path in sorted(found):
        if total - freed <= limit * TRIM_TO:
            break
        with contextlib.suppress(OSError):
            os.unlink(path)
            deleted, freed = deleted + 1, freed + size
    return deleted, freed


def _write_failed(folder: pathlib.Path, e: OSError) -> None:
    stats.write_errors += 1
    _warn_once(
        f"write {folder}", f"uopkit: can't write the cache folder {folder} ({e.strerror or e}); not caching ({HINT})"
    )


def reset() -> None:
    """Forget checked folders and given warnings (tests change UOPKIT_CACHE_DIR and permissions)."""
    with _lock:
        _roots.clear()
        _warned.clear()
        _looked.clear()
