"""The CPU backend's compiler and runtime, with hand-written C kernels (no renderer needed)."""

from __future__ import annotations

import ctypes
import gc
import math
import os
import shutil

import numpy as np
import pytest

from uopkit.device import CompileError, compile_cache_stats
from uopkit.uop.spec import SPEC_VERSION
from uopkit_cpu import runtime, uopkit_backends
from uopkit_cpu.compiler import CFLAGS, GCC_FLAGS, ClangCompiler, compiler_problem, find_cc, host_cpu_model
from uopkit_cpu.runtime import ALIGNMENT, HUGE_PAGE, HUGE_PAGE_MIN, CPUAllocator, CPUProgram

ADD_SRC = """
void add(float* restrict data0, const float* restrict data1, const int var0) {
  for (int i = 0; i < var0; i++) {
    data0[i] = data0[i] + data1[i];
  }
}
"""


def _to_device(allocator: CPUAllocator, arr: np.ndarray):  # noqa: ANN202
    mem = allocator.alloc(arr.nbytes)
    allocator.copyin(mem, memoryview(arr).cast("B"))
    return mem


def _from_device(allocator: CPUAllocator, mem, like: np.ndarray) -> np.ndarray:  # noqa: ANN001
    out = np.empty_like(like)
    allocator.copyout(memoryview(out).cast("B"), mem)
    return out


def test_add_kernel() -> None:
    lib = ClangCompiler().compile(ADD_SRC)
    assert lib[:4] == b"\x7fELF"
    prg = CPUProgram("add", lib)
    allocator = CPUAllocator()
    a = np.arange(10, dtype=np.float32)
    b = np.full(10, 0.5, dtype=np.float32)
    buf_a, buf_b = _to_device(allocator, a), _to_device(allocator, b)
    # only the first 7 elements: var0 bounds the loop
    elapsed = prg(buf_a, buf_b, global_size=(1, 1, 1), vals=(7,), wait=True)
    assert isinstance(elapsed, float) and elapsed >= 0
    expected = a.copy()
    expected[:7] += 0.5
    np.testing.assert_array_equal(_from_device(allocator, buf_a, a), expected)
    assert prg(buf_a, buf_b, vals=(0,)) is None


def test_allocator_alignment_and_readonly_copyin() -> None:
    allocator = CPUAllocator()
    for size in (1, 3, 64, 1000):
        mem = allocator.alloc(size)
        assert mem.addr % ALIGNMENT == 0 and mem.size == size
    mem = allocator.alloc(4)
    allocator.copyin(mem, memoryview(b"\x01\x02\x03\x04"))
    assert ctypes.string_at(mem.addr, 4) == b"\x01\x02\x03\x04"


def test_allocation_beyond_memory_says_how_much() -> None:
    # 2**62 bytes can't be had on any host: a MemoryError naming the device and the size, not a bare one
    with pytest.raises(MemoryError, match=r"CPU: out of host memory allocating a buffer of 4611686018427387904 bytes"):
        CPUAllocator().alloc(2**62)


def _vm_flags(addr: int) -> list[str] | None:
    """The VmFlags of the mapping of this process that holds `addr` (Linux), None if /proc has no smaps."""
    try:
        lines = open("/proc/self/smaps").read().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= addr < hi
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    return None


def test_large_buffers_are_zeroed_huge_page_aligned_and_advised() -> None:
    alloc = CPUAllocator()
    size = HUGE_PAGE_MIN + 12345
    buf = alloc._alloc(size)
    assert buf.addr % HUGE_PAGE == 0 and buf.size == size
    out = bytearray(size)
    out[-1] = 7
    alloc.copyout(memoryview(out), buf)
    assert not any(out)
    data = np.arange(size // 4, dtype=np.int32)
    alloc.copyin(buf, memoryview(data.tobytes()))
    back = bytearray(data.nbytes)
    alloc.copyout(memoryview(back), buf)
    assert bytes(back) == data.tobytes()
    flags = _vm_flags(buf.addr)
    thp = "/sys/kernel/mm/transparent_hugepage/enabled"
    try:
        offered = "[never]" not in open(thp).read()
    except OSError:
        offered = False
    if flags is not None and offered:
        # "hg": the mapping was advised MADV_HUGEPAGE (the pages themselves depend on free memory)
        assert "hg" in flags
    small = alloc._alloc(HUGE_PAGE_MIN - 1)
    assert small.mapping is None and small.addr % ALIGNMENT == 0


def test_compile_error_has_source_and_stderr() -> None:
    with pytest.raises(CompileError) as info:
        ClangCompiler().compile("void broken(float* data0) { data0[0] = ; }")
    text = str(info.value)
    assert "error" in info.value.message
    assert "kernel.c" in text and "void broken" in text


def test_compile_cache_hit(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    compiler = ClangCompiler()
    hits = compile_cache_stats.hits
    first = compiler.compile_cached(ADD_SRC)
    second = ClangCompiler().compile_cached(ADD_SRC)
    assert first == second and compile_cache_stats.hits == hits + 1


def test_cache_key_and_flags() -> None:
    compiler = ClangCompiler()
    assert compiler.cache_key is not None
    assert host_cpu_model() in compiler.cache_key and "-march=native" in compiler.cache_key
    assert compiler.cc[0] in compiler.cache_key
    # kernels keep IEEE semantics
    assert "-ffast-math" not in CFLAGS and "-fno-math-errno" in CFLAGS


# sinf from libm, memset and (with a stack protector) __stack_chk_fail from libc, 128-bit division from libgcc
NO_STDLIB_SRC = """
#include <math.h>
#include <string.h>
double calls(int n) {
  volatile char buf[64];
  memset((char*)buf, 3, sizeof buf);
  volatile _Float16 h = 1.5f;
  volatile __int128 big = (__int128)1e30;
  return sinf(0.5f) + n * buf[n] + (float)h + (double)(big / n);
}
"""


def test_gcc_only_flags_go_to_gcc_alone(tmp_path) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc on PATH")
    compiler = ClangCompiler(cc=[gcc])
    assert set(GCC_FLAGS) <= set(compiler.flags) and compiler.libs[-1] == "-lgcc"
    # a library linked without the C runtime's start files still loads and calls libm, libc and libgcc
    lib_path = tmp_path / "k.so"
    lib_path.write_bytes(compiler.compile(NO_STDLIB_SRC))
    lib = ctypes.CDLL(str(lib_path))
    lib.calls.restype, lib.calls.argtypes = ctypes.c_double, [ctypes.c_int]
    assert lib.calls(7) == pytest.approx(math.sin(0.5) + 7 * 3 + 1.5 + 1e30 // 7)
    # a compiler that says it is clang gets the common flags only (clang rejects gcc's -fsimd-cost-model)
    fake_clang = tmp_path / "clang"
    fake_clang.write_text("#!/bin/sh\necho 'Debian clang version 16.0.6'\n")
    fake_clang.chmod(0o755)
    assert ClangCompiler(cc=[str(fake_clang)]).flags == CFLAGS
    # flags given explicitly are used as they are
    assert ClangCompiler(cc=[gcc], flags=("-shared", "-O1")).flags == ("-shared", "-O1")


def test_cc_override(monkeypatch: pytest.MonkeyPatch) -> None:
    cc = find_cc()
    assert cc is not None
    monkeypatch.setenv("CC", f"{cc[0]} -Wall")
    assert find_cc() == [cc[0], "-Wall"]
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert find_cc() is None
    assert compiler_problem() == "CC='/nonexistent/cc' is not an executable"
    info = uopkit_backends()[0]
    assert info.availability() == compiler_problem()


def test_backend_info() -> None:
    (info,) = uopkit_backends()
    assert info.name == "CPU" and info.priority == 10 and info.spec_version == SPEC_VERSION
    assert info.availability() is None


def test_cpu_device_buffers() -> None:
    # needs the renderer (the full device); written separately from this runtime
    pytest.importorskip("uopkit_cpu.renderer")
    from uopkit.device import Buffer, Device
    from uopkit.dtype import dtypes

    dev = Device["cpu"]
    assert dev.device == "CPU" and Device["CPU:0"] is dev
    a = Buffer("CPU", 5, dtypes.float32).copyin(memoryview(np.arange(5, dtype=np.float32)))
    b = Buffer("CPU:1", 5, dtypes.float32).copy_from(a)
    np.testing.assert_array_equal(b.as_numpy(), np.arange(5, dtype=np.float32))
    lib = dev.compiler.compile_cached(ADD_SRC)
    dev.runtime("add", lib)(b.opaque, a.opaque, vals=(5,))
    np.testing.assert_array_equal(b.as_numpy(), 2 * np.arange(5, dtype=np.float32))


SCALE_SRC = """
void scale(float* restrict data0, const int var0) {
  for (int i = 0; i < var0; i++) data0[i] = data0[i] * 3.0f;
}
"""


def test_compile_batch_builds_one_library_for_all(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    compiler = ClangCompiler()
    runs: list[str] = []
    original = ClangCompiler.compile
    monkeypatch.setattr(ClangCompiler, "compile", lambda self, src: runs.append(src) or original(self, src))
    misses = compile_cache_stats.misses
    libs = compiler.compile_cached_batch([ADD_SRC, SCALE_SRC])
    # one compiler run for both kernels, and each is cached on its own
    assert len(runs) == 1 and libs[0] == libs[1] and compile_cache_stats.misses == misses + 2
    allocator = CPUAllocator()
    a, b = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    buf_a, buf_b = _to_device(allocator, a), _to_device(allocator, b)
    CPUProgram("add", libs[0])(buf_a, buf_b, vals=(4,))
    CPUProgram("scale", libs[1])(buf_a, vals=(4,))
    np.testing.assert_array_equal(_from_device(allocator, buf_a, a), (a + 1) * 3)
    assert compiler.compile_cached(SCALE_SRC) == libs[1] and len(runs) == 1


def test_compile_batch_error_names_the_broken_kernel() -> None:
    broken = "void broken(float* data0) { data0[0] = ; }"
    with pytest.raises(CompileError) as info:
        ClangCompiler().compile_batch([ADD_SRC, broken, SCALE_SRC])
    # the batch failed, then each kernel was compiled alone: the error carries only the broken one's source
    assert info.value.src == broken and "error" in info.value.message


CHUNKED_SCALE_SRC = """
const int chunked_scale_chunks = 4;
void chunked_scale_chunk(void **bufs, const int *vals, int chunk, int chunks) {
  float *out = (float *)bufs[0];
  const float *in = (const float *)bufs[1];
  for (int i = chunk; i < vals[0]; i += chunks) out[i] = in[i] * vals[1];
}
"""


def test_threaded_launches_keep_their_argument_arrays_by_address() -> None:
    # the arrays of buffer addresses and values are kept per (addresses, values): a launch on other buffers or with
    # other values gets arrays of its own, a launch like an earlier one reuses that one's (and computes the same)
    prg = CPUProgram("chunked_scale", ClangCompiler(flags=(*CFLAGS, "-pthread")).compile(CHUNKED_SCALE_SRC))
    assert prg.chunks == 4
    allocator = CPUAllocator()
    x = np.arange(10, dtype=np.float32)
    src, out1, out2 = _to_device(allocator, x), allocator.alloc(x.nbytes), allocator.alloc(x.nbytes)
    prg(out1, src, vals=(10, 2))
    prg(out2, src, vals=(10, 3))
    prg(out1, src, vals=(7, 5))
    assert len(prg.arrays) == 3
    np.testing.assert_array_equal(_from_device(allocator, out2, x), x * 3)
    expected = x * 5
    expected[7:] = x[7:] * 2
    np.testing.assert_array_equal(_from_device(allocator, out1, x), expected)
    allocator.copyin(src, memoryview(x + 1).cast("B"))
    prg(out2, src, vals=[10, 3])
    assert len(prg.arrays) == 3
    np.testing.assert_array_equal(_from_device(allocator, out2, x), (x + 1) * 3)
    # raw addresses are buffers too
    prg(out1.addr, src.addr, vals=(10, 1))
    np.testing.assert_array_equal(_from_device(allocator, out1, x), x + 1)


def test_plain_kernel_takes_its_argument_types_from_the_first_call() -> None:
    prg = CPUProgram("add", ClangCompiler().compile(ADD_SRC))
    allocator = CPUAllocator()
    a, b = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    buf_a, buf_b = _to_device(allocator, a), _to_device(allocator, b)
    prg(buf_a, buf_b, vals=(4,))
    assert prg.fxn.argtypes == [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32]
    prg(buf_a.addr, buf_b, vals=(2,))
    np.testing.assert_array_equal(_from_device(allocator, buf_a, a), a + [2, 2, 1, 1])
    with pytest.raises(TypeError, match="CPUMemory"):
        prg(buf_a, "not a buffer", vals=(1,))


def test_bound_launch_does_what_the_call_does() -> None:
    allocator = CPUAllocator()
    x = np.arange(10, dtype=np.float32)
    plain = CPUProgram("add", ClangCompiler().compile(ADD_SRC))
    buf_a, buf_b = _to_device(allocator, x), _to_device(allocator, np.ones(10, np.float32))
    launch = plain.bind(buf_a, buf_b, vals=(6,))
    launch()
    launch()
    np.testing.assert_array_equal(_from_device(allocator, buf_a, x), x + np.array([2] * 6 + [0] * 4))
    chunked = CPUProgram("chunked_scale", ClangCompiler(flags=(*CFLAGS, "-pthread")).compile(CHUNKED_SCALE_SRC))
    out = allocator.alloc(x.nbytes)
    chunked.bind(out, buf_b.addr, vals=[10, 7])()
    np.testing.assert_array_equal(_from_device(allocator, out, x), np.full(10, 7.0, np.float32))


def _maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def _add_const_program(k: int, chunked: bool = False) -> CPUProgram:
    # a kernel of its own library (the constant makes the bytes differ): out[i] += k
    if chunked:
        src = f"""const int add{k}_chunks = 2;
void add{k}_chunk(void **bufs, const int *vals, int chunk, int chunks) {{
  float *out = (float *)bufs[0];
  for (int i = chunk; i < vals[0]; i += chunks) out[i] += {k}.0f;
}}"""
        return CPUProgram(f"add{k}", ClangCompiler(flags=(*CFLAGS, "-pthread")).compile(src))
    src = f"void add{k}(float *restrict out, const int n) {{ for (int i = 0; i < n; i++) out[i] += {k}.0f; }}"
    return CPUProgram(f"add{k}", ClangCompiler().compile(src))


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="counts memory mappings in /proc/self/maps (Linux)")
def test_loaded_libraries_stay_under_the_limit_and_unloaded_ones_load_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # a long run loads ever new kernels; every library takes memory mappings, and a process at vm.max_map_count fails
    # every mmap (dlopen, malloc, thread stacks): past LOADED_LIBRARIES the first loaded are unloaded, and a program
    # whose library went loads it again when called. A bound launch (a TinyJit replay's) keeps its library loaded.
    monkeypatch.setattr(runtime, "LOADED_LIBRARIES", 16)
    allocator = CPUAllocator()
    x = np.zeros(8, dtype=np.float32)
    buf = _to_device(allocator, x)
    first, first_chunked = _add_const_program(1000), _add_const_program(2000, chunked=True)
    bound = _add_const_program(3000).bind(buf, vals=(8,))
    before = _maps()
    programs = [_add_const_program(k) for k in range(1, 61)]
    assert runtime.loaded_libraries() <= 16
    # the libraries unloaded gave their mappings back (60 libraries kept would take ~400 more)
    assert _maps() - before < 16 * 10
    assert first.lib is None and first_chunked.lib is None
    first(buf, vals=(8,))
    first_chunked(buf, vals=(8,))
    for p in programs:
        p(buf, vals=(8,))
    bound()
    assert runtime.loaded_libraries() <= 16
    expected = 1000 + 2000 + sum(range(1, 61)) + 3000
    np.testing.assert_array_equal(_from_device(allocator, buf, x), np.full(8, expected, np.float32))
    # the bound launch's library was never unloaded; once the launch is gone it can be
    digest = next(d for d, lib in runtime._loaded.items() if lib.pins)
    del bound
    gc.collect()
    assert runtime._loaded[digest].pins == 0
