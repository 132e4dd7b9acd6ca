"""The CPU backend near Linux's cap on memory mappings (vm.max_map_count): every loaded kernel library takes ~4, and a
process that sees many shapes loads thousands. Each test runs in a subprocess taken to the cap first (every other page
of one anonymous mapping made read-only: each page a mapping of its own)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from uopkit.mappings import map_cap, map_count

CAP = map_cap()
pytestmark = pytest.mark.skipif(
    CAP is None or CAP > 1 << 17 or map_count() is None,
    reason="takes the process to vm.max_map_count (Linux, a cap of at most 131072)",
)

# fill(leave): map until `leave` mappings are left under the cap; the mapping returned gives them back on close()
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
        for i in range(1, n, 2):
            assert libc.mprotect(base + i * mmap.PAGESIZE, mmap.PAGESIZE, mmap.PROT_READ) == 0
        return m

    def maps():
        return open("/proc/self/maps", "rb").read().count(b"\\n")
    """
)


def run_script(script: str, tmp_path: os.PathLike[str], timeout: float = 30) -> str:
    """Run `script` in a fresh interpreter (this one's import path, a compile cache of its own), return its output;
    fail on a non-zero exit (a crash) or a timeout (a hang)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", FILL + textwrap.dedent(script)], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_realize_at_the_cap_raises_a_clear_error_and_works_once_mappings_are_free(tmp_path: os.PathLike[str]) -> None:
    # new kernels at the cap: the compile queue's thread start waited forever (or dlopen failed, "failed to map
    # segment", reported as a compiler whose output is not loadable)
    out = run_script(
        """
        import time
        from uopkit import Tensor
        Tensor.arange(5).float().sum().numpy()
        m = fill(2)
        start = time.perf_counter()
        try:
            Tensor.realize(*[(Tensor.arange(n).float() * 1.5).sum() for n in (7, 9, 11)])
            print("no error")
        except Exception as e:
            print(f"{type(e).__name__} after {time.perf_counter() - start:.2f} s: {e}")
        m.close()
        print("after:", (Tensor.arange(13).float() * 2).sum().item())
        """,
        tmp_path,
    )
    first, after = out.strip().splitlines()
    assert first.startswith("MappingLimitError after") and float(first.split()[2]) < 5, out
    assert f"vm.max_map_count={CAP}" in first and "fewer distinct shapes" in first
    assert after == "after: 156.0"


def test_libraries_at_the_cap_are_unloaded_and_load_again(tmp_path: os.PathLike[str]) -> None:
    # the libraries themselves take the process to the cap (a program that maps much besides them, or a limit of
    # loaded libraries above what the cap holds): dlopen failed ("failed to map segment"); now the libraries no call
    # is using are unloaded, and the load done again
    out = run_script(
        """
        import numpy as np
        from uopkit_cpu import runtime
        from uopkit_cpu.compiler import ClangCompiler
        from uopkit_cpu.runtime import CPUAllocator, CPUProgram
        runtime.LOADED_LIBRARIES = 1 << 30
        lib = ClangCompiler().compile("void add1(float *restrict out, const int n) { out[0] += 1.0f; }")
        allocator = CPUAllocator()
        buf = allocator.alloc(4)
        m = fill(300)
        # 400 libraries of ~4 mappings (bytes after the end of the file make each a library of its own)
        programs = [CPUProgram("add1", lib + k.to_bytes(4, "little")) for k in range(400)]
        for p in programs:
            p(buf, vals=(1,))
        out = np.zeros(1, np.float32)
        allocator.copyout(memoryview(out).cast("B"), buf)
        cap = int(open("/proc/sys/vm/max_map_count").read())
        print(out[0], runtime.loaded_libraries() < 300, maps() <= cap)
        """,
        tmp_path,
    )
    assert out.strip() == "400.0 True True"


def test_a_library_another_thread_is_calling_stays_loaded(tmp_path: os.PathLike[str]) -> None:
    # libraries are unloaded past LOADED_LIBRARIES; one unloaded while another thread ran a kernel in it (ctypes calls
    # run without the GIL) crashed that thread (SIGSEGV)
    out = run_script(
        """
        import threading
        from uopkit_cpu import runtime
        from uopkit_cpu.compiler import ClangCompiler
        from uopkit_cpu.runtime import CPUAllocator, CPUProgram
        runtime.LOADED_LIBRARIES = 4
        cc = ClangCompiler()
        src = "void slow(float *restrict out, const int n) { for (int j = 0; j < 20000; j++) "
        src += "for (int i = 0; i < n; i++) out[i] = out[i] * 0.5f + 1.0f; }"
        slow = [CPUProgram("slow", cc.compile(src) + bytes([k])) for k in range(3)]
        other = cc.compile("void f(float *restrict out, const int n) { out[0] = 1.0f; }")
        buf = CPUAllocator().alloc(64 * 4)
        stop, calls = threading.Event(), []

        def caller():
            while not stop.is_set():
                for p in slow:
                    p(buf, vals=(64,))
                    calls.append(1)

        threads = [threading.Thread(target=caller) for _ in range(2)]
        for t in threads:
            t.start()
        kept = []
        for k in range(200):
            kept = [*kept[-8:], CPUProgram("f", other + k.to_bytes(4, "little"))]
        stop.set()
        for t in threads:
            t.join()
        print("ok", len(calls) > 0)
        """,
        tmp_path,
    )
    assert out.strip() == "ok True"
