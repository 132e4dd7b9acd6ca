"""The CUDA runtime without a GPU: availability and DEVICE=CUDA errors on this machine, and everything above the
driver interface (allocator, pinned staging, launch sizes, register limits, timings, copies between GPUs) on a
fake driver that keeps device memory in numpy arrays. On a GPU, scripts/gpu_check.sh runs the real thing."""

from __future__ import annotations

import ctypes
import itertools
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from uopkit.device import Buffer, Device, DeviceError
from uopkit.dtype import dtypes
from uopkit_cuda import runtime
from uopkit_cuda.compiler import nvrtc_problem
from uopkit_cuda.renderer import CUDACaps
from uopkit_cuda.runtime import CUDADevice, CUDADriver, Launch, launch_dims, open_cuda


def _no_libcuda() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return True
    return False


no_driver = pytest.mark.skipif(not _no_libcuda(), reason="this machine has an NVIDIA driver (libcuda.so.1)")
needs_nvrtc = pytest.mark.skipif(nvrtc_problem() is not None, reason=f"NVRTC unusable here: {nvrtc_problem()}")


@no_driver
def test_backend_is_listed_unusable_with_the_reason() -> None:
    status = Device.backends()["CUDA"]
    assert not status.usable
    assert status.reason is not None and "no CUDA driver (libcuda.so.1 not found)" in status.reason


@no_driver
def test_device_cuda_fails_with_the_reason() -> None:
    code = "from uopkit import Tensor; Tensor([1.0]).numpy()"
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, DEVICE="CUDA"), capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode != 0
    assert "device CUDA (from uopkit-cuda) cannot be used here: no CUDA driver (libcuda.so.1 not found)" in done.stderr


def test_unknown_runtime_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UOPKIT_CUDA_RUNTIME", "hip")
    with pytest.raises(runtime.NoCUDADevice, match="'hip' is not a CUDA runtime; choose cuda-bindings or pycuda"):
        runtime.runtime_name()


# ------------------------------------------------------------------------------------------------ a fake driver


class FakeDriver(CUDADriver):
    """Device memory in numpy; programs are recorded, not run; `gpus` GPUs of `memory` bytes each."""

    name = "fake"

    def __init__(self, gpus: int = 2, memory: int = 1 << 20, max_threads: int = 1024) -> None:
        self.gpus, self.memory, self.func_max_threads = gpus, memory, max_threads
        self.ids = itertools.count(1)
        self.mem: dict[int, np.ndarray] = {}
        self.owner: dict[int, int] = {}
        self.current: int | None = None
        self.launches: list[tuple[str, Launch, tuple[Any, ...], tuple[int, ...]]] = []
        self.peer_copies = 0
        self.host_allocs = 0

    def device_count(self) -> int:
        return self.gpus

    def read_caps(self, index: int) -> CUDACaps:
        return CUDACaps(name=f"Fake GPU {index}", arch="sm_90", total_memory=self.memory)

    def open_context(self, index: int) -> Any:
        self.current = index
        return index

    def set_current(self, ctx: Any) -> None:
        self.current = ctx

    def alloc(self, size: int) -> Any:
        used = sum(a.nbytes for p, a in self.mem.items() if self.owner[p] == self.current)
        if used + size > self.memory:
            raise MemoryError(f"CUDA: cuMemAlloc({size}): out of memory (fake)")
        # cuMemAlloc's pointers are aligned to 256 bytes
        ptr = next(self.ids) * 256
        self.mem[ptr], self.owner[ptr] = np.zeros(size, np.uint8), self.current
        return ptr

    def free(self, ptr: Any) -> None:
        del self.mem[ptr], self.owner[ptr]

    def alloc_host(self, size: int) -> Any:
        self.host_allocs += 1
        return np.zeros(size, np.uint8)

    def free_host(self, host: Any) -> None:
        pass

    def copy_htod(self, dst: Any, host: Any, size: int) -> None:
        assert self.owner[dst] == self.current, "copy into another GPU's memory without its context"
        self.mem[dst][:size] = host[:size]

    def copy_dtoh(self, host: Any, src: Any, size: int) -> None:
        host[:size] = self.mem[src][:size]

    def copy_dtod(self, dst: Any, src: Any, size: int) -> None:
        self.mem[dst][:size] = self.mem[src][:size]

    def copy_peer(self, dst: Any, dst_ctx: Any, src: Any, src_ctx: Any, size: int) -> None:
        assert (self.owner[dst], self.owner[src]) == (dst_ctx, src_ctx)
        self.peer_copies += 1
        self.mem[dst][:size] = self.mem[src][:size]

    def load_module(self, cubin: bytes) -> Any:
        assert cubin[:4] == b"\x7fELF", "not a CUBIN"
        return cubin

    def get_function(self, module: Any, name: str) -> Any:
        return name

    def function_limits(self, func: Any) -> tuple[int, int]:
        return 64, self.func_max_threads

    def launch(self, func: Any, launch: Launch, bufs: tuple[Any, ...], vals: tuple[int, ...]) -> None:
        self.launches.append((func, launch, bufs, vals))

    def event(self) -> Any:
        return [0.0]

    def record(self, event: Any) -> None:
        event[0] = float(len(self.launches))

    def elapsed_seconds(self, start: Any, end: Any) -> float:
        return (end[0] - start[0]) * 1e-3

    def synchronize(self) -> None:
        pass


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """CUDA and CUDA:1 opened on a FakeDriver (registered in Device under their names for the test)."""
    driver = FakeDriver()
    opened = {name: open_cuda(name, driver) for name in ("CUDA", "CUDA:1")}
    for name, dev in opened.items():
        monkeypatch.setitem(Device._opened, name, dev)
    return driver, opened


@needs_nvrtc
def test_open_reads_caps_and_builds_for_the_arch(fake, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    driver, opened = fake
    dev = opened["CUDA:1"]
    assert isinstance(dev, CUDADevice) and dev.index == 1 and dev.caps.name == "Fake GPU 1"
    assert dev.compiler.arch == "sm_90" and dev.renderer.arch == "sm_90"
    monkeypatch.setenv("CUDA_ARCH", "sm_75")
    older = open_cuda("CUDA", driver)
    assert (older.compiler.arch, older.renderer.arch, older.renderer.tensor_cores) == ("sm_75", "sm_75", [])
    monkeypatch.setenv("CUDA_ARCH", "sm_12")
    with pytest.raises(ValueError, match="can't compile for 'sm_12'"):
        open_cuda("CUDA", driver)
    with pytest.raises(ValueError, match=r"CUDA:2 does not exist: 2 CUDA GPU\(s\) here"):
        open_cuda("CUDA:2", driver)
    with pytest.raises(ValueError, match="the index after ':' must be a non-negative number"):
        open_cuda("CUDA:x", driver)


def test_copies_through_pinned_staging_and_lru_reuse(fake) -> None:  # noqa: ANN001
    driver, opened = fake
    data = np.arange(10, dtype=np.float32)
    buf = Buffer("CUDA", 10, dtypes.float32).copyin(data.data)
    np.testing.assert_array_equal(buf.as_numpy(), data)
    # one pinned staging buffer serves every small copy
    assert driver.host_allocs == 1
    ptr = buf.opaque
    del buf
    again = Buffer("CUDA", 10, dtypes.float32).ensure_allocated()
    assert again.opaque == ptr, "a freed buffer of the same size is reused"


def test_copy_between_gpus_uses_peer_copies(fake) -> None:  # noqa: ANN001
    driver, _ = fake
    data = np.arange(6, dtype=np.int32)
    a = Buffer("CUDA", 6, dtypes.int32).copyin(data.data)
    b = Buffer("CUDA:1", 6, dtypes.int32).copy_from(a)
    np.testing.assert_array_equal(b.as_numpy(), data)
    assert driver.peer_copies == 1


def test_out_of_memory_is_clear_and_the_device_stays_usable(fake) -> None:  # noqa: ANN001
    driver, opened = fake
    allocator = opened["CUDA"].allocator
    with pytest.raises(MemoryError, match=r"CUDA: out of memory allocating 2097152 bytes \(the GPU has 1048576"):
        allocator.alloc(2 << 20)
    # freed buffers in the cache are released and the allocation retried before giving up
    held = allocator.alloc(600 << 10)
    allocator.free(held, 600 << 10)
    assert allocator.alloc(700 << 10) is not None


def test_launch_dims() -> None:
    caps = CUDACaps()
    assert launch_dims((4, 2, 1), (32, 4, 1), caps) == Launch((4, 2, 1), (32, 4, 1))
    # without local ids: blocks of at most 128 threads whose sizes divide the global size
    assert launch_dims((1000, 3, 1), None, caps) == Launch((8, 3, 1), (125, 1, 1))
    assert launch_dims((97, 1, 1), None, caps) == Launch((1, 1, 1), (97, 1, 1))
    with pytest.raises(ValueError, match=r"block \(2048, 1, 1\) \(2048 threads\) exceeds the device's limits"):
        launch_dims((1, 1, 1), (2048, 1, 1), caps)
    # y and z beyond the grid's limit are clamped: the kernel's ids step through the rest
    assert launch_dims((1, 70000, 1), (1, 1, 1), caps) == Launch((1, 65535, 1), (1, 1, 1))
    with pytest.raises(ValueError, match="exceeds the device's limit"):
        launch_dims((2**31, 1, 1), (1, 1, 1), caps)


@needs_nvrtc
def test_program_launch_vals_timing_and_register_limit(fake) -> None:  # noqa: ANN001
    driver, opened = fake
    dev = opened["CUDA"]
    src = 'extern "C" __global__ void k(float* a, const int n) { if (threadIdx.x < n) a[threadIdx.x] = 1.0f; }'
    prg = dev.runtime("k", dev.compiler.compile(src))
    ptr = dev.allocator.alloc(64)
    assert prg(ptr, global_size=(1, 1, 1), local_size=(16, 1, 1), vals=(7,)) is None
    assert driver.launches[-1] == ("k", Launch((1, 1, 1), (16, 1, 1)), (ptr,), (7,))
    assert prg(ptr, global_size=(2, 1, 1), local_size=(16, 1, 1), vals=(7,), wait=True) == pytest.approx(1e-3)
    # a kernel whose registers allow fewer threads per block than asked is refused with the reason
    driver.func_max_threads = 256
    tight = dev.runtime("k", dev.compiler.compile(src))
    with pytest.raises(ValueError, match=r"uses 64 registers per thread, so CUDA runs at most 256 threads per block"):
        tight(ptr, global_size=(1, 1, 1), local_size=(512, 1, 1), vals=(7,))
    # an empty grid launches nothing
    count = len(driver.launches)
    assert prg(ptr, global_size=(0, 1, 1), local_size=(16, 1, 1), vals=(0,), wait=True) == 0.0
    assert len(driver.launches) == count
    # a buffer not aligned to 16 bytes (not from the allocator) is refused before it could fault in a vector load
    with pytest.raises(ValueError, match=r"kernel k: buffer 0 at 0x[0-9a-f]+4 is not aligned to 16 bytes"):
        prg(ptr + 4, global_size=(1, 1, 1), local_size=(16, 1, 1), vals=(7,))
    assert len(driver.launches) == count


@no_driver
def test_get_driver_without_libcuda_raises_the_reason() -> None:
    runtime.get_driver.cache_clear()
    with pytest.raises(runtime.NoCUDADevice, match=r"libcuda.so.1 not found"):
        runtime.get_driver()
    with pytest.raises(DeviceError, match="libcuda.so.1 not found"):
        Device["CUDA:3"]
