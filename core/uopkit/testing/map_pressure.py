"""Test support: run a script in a fresh interpreter taken close to Linux's cap on memory mappings
(``vm.max_map_count``, `uopkit.mappings`). The script gets ``fill(leave)``, which maps until `leave` mappings are left
under the cap (every other page of one anonymous mapping made read-only: each page a mapping of its own; close the
mapping it returns to give them back), and ``maps()``, the process's mapping count."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

FILL = textwrap.dedent(
    """
    import ctypes, mmap

    def fill(leave):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        cap = int(open("/proc/sys/vm/max_map_count").read())
        n = cap - open("/proc/self/maps", "rb").read().count(b"\\n") - leave
        m = mmap.mmap(-1, (n + 2) * mmap.PAGESIZE)
        start = ctypes.c_char.from_buffer(m)
        base = ctypes.addressof(start)
        del start
        # (neighbours of equal protection would merge into one mapping)
        for i in range(1, n, 2):
            assert libc.mprotect(base + i * mmap.PAGESIZE, mmap.PAGESIZE, mmap.PROT_READ) == 0
        return m

    def maps():
        return open("/proc/self/maps", "rb").read().count(b"\\n")
    """
)


def run_near_cap(script: str, timeout: float = 30, cache_dir: str | os.PathLike[str] | None = None) -> str:
    """Run `script` (with `fill` and `maps` defined) in a fresh interpreter with this one's import path (and a compile
    cache of its own in `cache_dir`), return its output; fail on a non-zero exit (a crash) or a timeout (a hang)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    if cache_dir is not None:
        env["XDG_CACHE_HOME"] = str(cache_dir)
    done = subprocess.run(
        [sys.executable, "-c", FILL + textwrap.dedent(script)], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
