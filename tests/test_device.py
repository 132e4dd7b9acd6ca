"""Buffers, allocators, the compile cache and the Device registry (no compiler or renderer needed)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pytest

from uopkit.device import (
    Buffer,
    Compiled,
    CompileError,
    Compiler,
    Device,
    DeviceError,
    LRUAllocator,
    compile_cache_stats,
    device_index,
)
from uopkit.dtype import DType, dtypes, to_numpy_dtype
from uopkit.helpers import Context
from uopkit.plugin import BackendInfo, hookimpl
from uopkit.plugin.manager import get_manager
from uopkit.uop.spec import SPEC_VERSION


class BytesAllocator(LRUAllocator):
    """Host memory as bytearrays: enough to exercise Buffer and the LRU cache without a compiler."""

    def __init__(self) -> None:
        super().__init__()
        self.allocs = 0

    def _alloc(self, size: int) -> bytearray:
        self.allocs += 1
        return bytearray(size)

    def copyin(self, dest: bytearray, src: memoryview) -> None:
        dest[: src.nbytes] = src

    def copyout(self, dest: memoryview, src: bytearray) -> None:
        dest[:] = src[: dest.nbytes]


def _open_testmem(device: str) -> Compiled:
    return Compiled(device, BytesAllocator(), None, Compiler(), lambda name, lib: None)  # type: ignore[arg-type,return-value]


class _OddDevice:
    def __init__(self, device: str) -> None:
        self.device = device

    def synchronize(self) -> None:
        pass


class FakeBackends:
    @hookimpl
    def uopkit_backends(self) -> list[BackendInfo]:
        return [
            BackendInfo("TESTMEM", "0.0", SPEC_VERSION, -100, _open_testmem, lambda: None, "test memory"),
            BackendInfo("TESTOFF", "0.0", SPEC_VERSION, 1000, _open_testmem, lambda: "no widget attached"),
            # open returns something other than a Compiled (it has the protocol's members, nothing else)
            BackendInfo("TESTODD", "0.0", SPEC_VERSION, -100, lambda d: _OddDevice(d), lambda: None),
        ]


@pytest.fixture(scope="module", autouse=True)
def test_backends() -> Iterator[None]:
    # registered through the same hook as installed plugins, on the process-wide manager
    get_manager().register(FakeBackends(), name="test-backends")
    yield
    get_manager().unregister("test-backends")
    for name in ("TESTMEM", "TESTMEM:1"):
        Device._opened.pop(name, None)


@pytest.mark.parametrize(
    "dtype", [dtypes.float32, dtypes.float16, dtypes.float64, dtypes.int8, dtypes.uint8, dtypes.int64, dtypes.bool]
)
@pytest.mark.parametrize("size", [0, 1, 37])
def test_buffer_roundtrip(dtype: DType, size: int) -> None:
    data = (np.arange(size) * 3 - 5).astype(to_numpy_dtype(dtype))
    buf = Buffer("testmem", size, dtype).allocate()
    assert buf.nbytes == size * dtype.itemsize
    buf.copyin(memoryview(data))
    out = buf.as_numpy()
    assert out.dtype == data.dtype and out.shape == (size,)
    np.testing.assert_array_equal(out, data)
    np.testing.assert_array_equal(buf.numpy(), data)


def test_buffer_reads_a_part_through_the_default_copyout_at() -> None:
    # an allocator without copyout_at of its own: the buffer's start copied out, its end kept
    data = np.arange(10, dtype=np.int32) - 4
    buf = Buffer("testmem", 10, dtypes.int32).allocate().copyin(memoryview(data))
    assert not buf.allocator.reads_at_offset
    for start, stop in [(0, 10), (3, 4), (9, 10), (2, 7), (5, 5)]:
        np.testing.assert_array_equal(buf.as_numpy(start, stop), data[start:stop])
    with pytest.raises(AssertionError, match=r"elements \[4, 11\)"):
        buf.as_numpy(4, 11)


def test_buffer_copyin_bytes_and_size_check() -> None:
    buf = Buffer("TESTMEM", 2, dtypes.int32)
    assert not buf.is_allocated()
    buf.copyin(np.array([7, -8], np.int32).tobytes())
    assert buf.is_allocated()
    assert buf.as_numpy().tolist() == [7, -8]
    with pytest.raises(AssertionError, match="copyin of 4 bytes"):
        buf.copyin(b"\0" * 4)


def test_zero_size_buffer() -> None:
    buf = Buffer("TESTMEM", 0, dtypes.float32).allocate()
    assert buf.is_allocated() and buf.nbytes == 0
    assert buf.as_numpy().shape == (0,)
    buf.copy_from(Buffer("TESTMEM", 0, dtypes.float32).allocate())


def test_lru_reuses_freed_buffers() -> None:
    allocator = Device["TESTMEM"].allocator
    assert isinstance(allocator, BytesAllocator)
    allocator.free_cache()
    a = Buffer("TESTMEM", 16, dtypes.float32).allocate()
    opaque, allocs = a.opaque, allocator.allocs
    del a
    assert allocator.cached_bytes == 64
    b = Buffer("TESTMEM", 16, dtypes.int32).allocate()
    # same byte size: the freed memory comes back without a new allocation
    assert b.opaque is opaque and allocator.allocs == allocs
    c = Buffer("TESTMEM", 17, dtypes.float32).allocate()
    assert c.opaque is not opaque and allocator.allocs == allocs + 1
    del b, c
    allocator.free_cache()
    assert allocator.cached_bytes == 0 and allocator.cache == {}


def test_lru_off() -> None:
    allocator = Device["TESTMEM"].allocator
    assert isinstance(allocator, LRUAllocator)
    allocator.free_cache()
    with Context(LRU=0):
        a = Buffer("TESTMEM", 8, dtypes.uint8).allocate()
        del a
    assert allocator.cached_bytes == 0
    # back on: a freed buffer is kept for reuse
    b = Buffer("TESTMEM", 8, dtypes.uint8).allocate()
    del b
    assert allocator.cached_bytes == 8
    allocator.free_cache()


def test_device_names_are_canonicalized_once_and_looked_up_as_written() -> None:
    assert Device.canonicalize(" cpu:0 ") == "CPU" and Device.canonicalize("cpu:1") == "CPU:1"
    # (remembered: the same answer again)
    assert Device.canonicalize(" cpu:0 ") == "CPU" and Device.canonicalize("Cpu") == "CPU"
    assert Device["testmem"] is Device["TESTMEM"] is Device["TESTMEM:0"]


def test_adopted_opaque_is_not_freed() -> None:
    allocator = Device["TESTMEM"].allocator
    assert isinstance(allocator, LRUAllocator)
    allocator.free_cache()
    mem = bytearray(8)
    buf = Buffer("TESTMEM", 2, dtypes.float32, opaque=mem)
    assert buf.opaque is mem
    del buf
    assert allocator.cached_bytes == 0


def test_copy_from_across_devices() -> None:
    src = Buffer("TESTMEM", 4, dtypes.float32).copyin(memoryview(np.array([1, 2, 3, 4], np.float32)))
    dst = Buffer("TESTMEM:1", 4, dtypes.float32).copy_from(src)
    assert Device["TESTMEM:1"] is not Device["TESTMEM"]
    assert dst.as_numpy().tolist() == [1, 2, 3, 4]


class CountingCompiler(Compiler):
    def __init__(self, cache_key: str | None) -> None:
        super().__init__(cache_key)
        self.calls = 0

    def compile(self, src: str) -> bytes:
        self.calls += 1
        return src.encode()[::-1]


def test_compile_cache(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    compiler = CountingCompiler("test-backend 1.0")
    hits, misses = compile_cache_stats.hits, compile_cache_stats.misses
    assert compiler.compile_cached("int main;") == b";niam tni"
    assert (compile_cache_stats.hits, compile_cache_stats.misses) == (hits, misses + 1)
    assert compiler.compile_cached("int main;") == b";niam tni"
    assert (compile_cache_stats.hits, compile_cache_stats.misses) == (hits + 1, misses + 1)
    assert compiler.calls == 1
    assert len(list((tmp_path / "compile").iterdir())) == 1
    # another cache key (other backend version or flags) is another binary
    other = CountingCompiler("test-backend 1.1")
    other.compile_cached("int main;")
    assert other.calls == 1 and compile_cache_stats.misses == misses + 2


def test_compile_cache_off(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    compiler = CountingCompiler("test-backend 1.0")
    with Context(CACHELEVEL=0):
        compiler.compile_cached("x")
        compiler.compile_cached("x")
    assert compiler.calls == 2
    uncached = CountingCompiler(None)
    uncached.compile_cached("x")
    uncached.compile_cached("x")
    assert uncached.calls == 2
    assert not (tmp_path / "compile").exists()


class StrCompiler(Compiler):
    """A newcomer's slip: returns the source text instead of bytes."""

    def compile(self, src: str) -> bytes:
        return src  # type: ignore[return-value]


@pytest.mark.parametrize("cache_key", ["str-backend 1.0", None])
def test_compiler_returning_str_is_named_where_it_returns(
    cache_key: str | None, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UOPKIT_CACHE_DIR", str(tmp_path))
    compiler = StrCompiler(cache_key)
    # with a cache key it used to fail inside the disk cache ("Strings must be encoded before hashing"), without one
    # in the runtime; now at the return, naming the compiler class and what to return
    expected = r"test_device\.StrCompiler\.compile\(\) returned str, not bytes: .* \(for text, return its \.encode\(\)"
    with pytest.raises(TypeError, match=expected):
        compiler.compile_cached("int main;")
    with pytest.raises(TypeError, match=r"StrCompiler\.compile_batch\(\) returned str, not bytes"):
        compiler.compile_cached_batch(["int a;", "int b;"])
    assert not (tmp_path / "compile").exists() or not any((tmp_path / "compile").iterdir())


def test_compile_error_shows_source_and_message() -> None:
    err = CompileError("kernel.c:2:3: error: expected ';'", "void k() {\n  int x\n}", compiler="gcc")
    text = str(err)
    assert "gcc failed" in text
    assert "error: expected ';'" in text
    assert "   2 |   int x" in text
    assert err.src.startswith("void k()")


@pytest.mark.parametrize(
    "name, canonical",
    [("cpu", "CPU"), ("CPU", "CPU"), ("CPU:0", "CPU"), ("cpu:1", "CPU:1"), (" OpenCL:2 ", "OPENCL:2")],
)
def test_canonicalize(name: str, canonical: str) -> None:
    assert Device.canonicalize(name) == canonical


@pytest.mark.parametrize("device, index", [("CUDA", 0), ("CUDA:0", 0), ("OPENCL:3", 3), ("MYDEV:12", 12)])
def test_device_index(device: str, index: int) -> None:
    assert device_index(device) == index


@pytest.mark.parametrize("device", ["CUDA:x", "CUDA:-1", "CUDA:", "CUDA:+1", "CUDA: 1", "CUDA:1_0", "CUDA:1.0"])
def test_device_index_rejects_malformed(device: str) -> None:
    with pytest.raises(ValueError, match=rf"bad CUDA device '{re.escape(device)}': the index after ':' must be"):
        device_index(device)


def test_device_is_cached_per_canonical_name() -> None:
    assert Device["testmem"] is Device["TESTMEM:0"]
    assert Device["TESTMEM"].device == "TESTMEM"
    assert Device["testmem:1"].device == "TESTMEM:1"


def test_unknown_device_lists_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVICE", "NOPE")
    with pytest.raises(DeviceError, match=r"unknown device NOPE; installed backends: .*CPU \(usable\)"):
        _ = Device.DEFAULT
    with pytest.raises(DeviceError, match=r"TESTOFF \(unusable: no widget attached\)"):
        Device["nope"]


def test_unusable_device_by_name_says_why() -> None:
    with pytest.raises(DeviceError, match="cannot be used here: no widget attached") as info:
        Device["testoff"]
    assert "hint:" in str(info.value)


def test_open_must_return_a_compiled() -> None:
    with pytest.raises(DeviceError, match=r"returned _OddDevice from open\('TESTODD'\), not a uopkit.device.Compiled"):
        Device["testodd"]


def test_default_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEVICE", raising=False)
    # TESTOFF has the highest priority but is unusable; CPU (10) beats TESTMEM (-100)
    assert Device.DEFAULT == "CPU"
    monkeypatch.setenv("DEVICE", "testmem:1")
    assert Device.DEFAULT == "TESTMEM:1"
    before = Device._default
    Device.DEFAULT = "TESTMEM"
    try:
        assert Device.DEFAULT == "TESTMEM"
    finally:
        Device.DEFAULT = before


def test_lru_cache_is_bounded_by_the_most_ever_in_use() -> None:
    allocator = BytesAllocator()
    # buffers of sizes never asked for again (a shape that changes every call): the cache keeps no more bytes than
    # were ever in use at once, freeing the ones freed longest ago (it kept one of each size, for good)
    for i in range(12):
        size = 4096 - i
        allocator.free(allocator.alloc(size), size)
        assert allocator.cached_bytes <= allocator.peak_in_use == 4096
    assert list(allocator.cache) == [4096 - 11] and allocator.cached_bytes == 4096 - 11
    assert allocator.in_use == 0
    # a size in use again comes back from the cache
    handle = allocator.cache[4096 - 11][0]
    assert allocator.alloc(4096 - 11) is handle and allocator.cached_bytes == 0


def test_lru_limit_evicts_least_recently_freed() -> None:
    allocator = BytesAllocator()
    with Context(LRU_LIMIT=0):
        allocator.free(allocator.alloc(8), 8)
        assert allocator.cached_bytes == 0
    handles = {n: allocator.alloc(n) for n in (100, 200, 300)}
    allocator.free(handles[200], 200)
    allocator.free(handles[100], 100)
    assert allocator.cached_bytes == 300
    # 200 was freed before 100: it goes first
    allocator.free(handles[300], 300)
    assert allocator.cache_limit == 600 and allocator.cached_bytes == 600
    allocator._evict(450)
    assert list(allocator.cache) == [100, 300] and allocator.cached_bytes == 400
    assert allocator.alloc(100) is handles[100]
    allocator.free_cache()
    assert allocator.cached_bytes == 0 and allocator.cache == {}
