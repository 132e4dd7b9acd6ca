"""The CPU backend near Linux's cap on memory mappings (vm.max_map_count): every loaded kernel library takes ~4, and a
process that sees many shapes loads thousands. Each test runs in a subprocess taken to the cap first (every other page
of one anonymous mapping made read-only: each page a mapping of its own)."""

from __future__ import annotations

import os

import pytest

from uopkit.mappings import map_cap, map_count
from uopkit.testing.map_pressure import run_near_cap

CAP = map_cap()
pytestmark = pytest.mark.skipif(
    CAP is None or CAP > 1 << 17 or map_count() is None,
    reason="takes the process to vm.max_map_count (Linux, a cap of at most 131072)",
)


def test_a_realize_at_the_cap_raises_a_clear_error_and_works_once_mappings_are_free(tmp_path: os.PathLike[str]) -> None:
    # new kernels at the cap: the compile queue's thread start waited forever (or dlopen failed, "failed to map
    # segment", reported as a compiler whose output is not loadable)
    out = run_near_cap(
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
        cache_dir=tmp_path,
    )
    first, after = out.strip().splitlines()
    assert first.startswith("MappingLimitError after") and float(first.split()[2]) < 5, out
    assert f"vm.max_map_count={CAP}" in first and "fewer distinct shapes" in first
    assert after == "after: 156.0"


def test_libraries_at_the_cap_are_unloaded_and_load_again(tmp_path: os.PathLike[str]) -> None:
    # the libraries themselves take the process to the cap (a program that maps much besides them, or a limit of
    # loaded libraries above what the cap holds): dlopen failed ("failed to map segment"); now the libraries no call
    # is using are unloaded, and the load done again
    out = run_near_cap(
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
        cache_dir=tmp_path,
    )
    assert out.strip() == "400.0 True True"


def test_a_library_another_thread_is_calling_stays_loaded(tmp_path: os.PathLike[str]) -> None:
    # libraries are unloaded past LOADED_LIBRARIES; one unloaded while another thread ran a kernel in it (ctypes calls
    # run without the GIL) crashed that thread (SIGSEGV)
    out = run_near_cap(
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
        cache_dir=tmp_path,
    )
    assert out.strip() == "ok True"
