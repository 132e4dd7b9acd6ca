"""CUDA devices, memory and programs: one small driver interface (`CUDADriver`), two implementations.

- `BindingsDriver` (default): NVIDIA's cuda-bindings (``cuda.bindings.driver``), binary wheels.
- `PyCUDADriver` (``UOPKIT_CUDA_RUNTIME=pycuda``, ``pip install uopkit-cuda[pycuda]``): ``pycuda.driver``.

Everything above the interface (the LRU allocator with pinned staging memory, launch-size checks, timings with
events, copies between GPUs, the device object) is written once against `CUDADriver`, so it is tested without a
GPU on a fake driver (plugins/cuda/tests/test_cuda_runtime.py).

Device numbering: ``CUDA`` is GPU 0, ``CUDA:N`` GPU N in the driver's order; each has its own (primary) context.
"""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import functools
import os
from dataclasses import dataclass
from typing import Any

from uopkit.device import Compiled, LRUAllocator, device_index
from uopkit_cuda.renderer import DEFAULT_BLOCK, VECTOR_ALIGN, CUDACaps

# ------------------------------------------------------------------------------------------------ errors


class NoCUDADevice(RuntimeError):
    """No CUDA driver or GPU can be used here; the message says why."""


class CUDAError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


# ------------------------------------------------------------------------------------------------ the interface


@dataclass(frozen=True)
class Launch:
    """A kernel launch as the driver takes it: blocks per grid, threads per block."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]


class CUDADriver:
    """The driver operations the backend uses. Handles are opaque to the code above (ints, pycuda objects)."""

    name = "?"

    def device_count(self) -> int:
        raise NotImplementedError

    def read_caps(self, index: int) -> CUDACaps:
        raise NotImplementedError

    def open_context(self, index: int) -> Any:
        """The GPU's primary context (made current)."""
        raise NotImplementedError

    def set_current(self, ctx: Any) -> None:
        raise NotImplementedError

    def alloc(self, size: int) -> Any:
        """Device memory; raises MemoryError when the GPU is out of memory."""
        raise NotImplementedError

    def free(self, ptr: Any) -> None:
        raise NotImplementedError

    def alloc_host(self, size: int) -> Any:
        """Pinned (page-locked) host memory of `size` bytes, as a writable uint8 numpy array."""
        raise NotImplementedError

    def free_host(self, host: Any) -> None:
        raise NotImplementedError

    def copy_htod(self, dst: Any, host: Any, size: int) -> None:
        raise NotImplementedError

    def copy_dtoh(self, host: Any, src: Any, size: int) -> None:
        raise NotImplementedError

    def copy_dtod(self, dst: Any, src: Any, size: int) -> None:
        raise NotImplementedError

    def copy_peer(self, dst: Any, dst_ctx: Any, src: Any, src_ctx: Any, size: int) -> None:
        raise NotImplementedError

    def load_module(self, cubin: bytes) -> Any:
        raise NotImplementedError

    def get_function(self, module: Any, name: str) -> Any:
        raise NotImplementedError

    def function_limits(self, func: Any) -> tuple[int, int]:
        """(registers per thread, most threads per block it can launch with)."""
        raise NotImplementedError

    def launch(self, func: Any, launch: Launch, bufs: tuple[Any, ...], vals: tuple[int, ...]) -> None:
        raise NotImplementedError

    def event(self) -> Any:
        raise NotImplementedError

    def record(self, event: Any) -> None:
        raise NotImplementedError

    def elapsed_seconds(self, start: Any, end: Any) -> float:
        """Seconds between two recorded events (waits for `end`)."""
        raise NotImplementedError

    def synchronize(self) -> None:
        raise NotImplementedError


def _host_array(address: int, size: int) -> Any:
    import numpy as np

    return np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(address))


class BindingsDriver(CUDADriver):
    """`CUDADriver` on cuda-bindings (``cuda.bindings.driver``); every call's error is checked."""

    name = "cuda-bindings"

    def __init__(self) -> None:
        from cuda.bindings import driver

        self.cu = driver
        self.check(driver.cuInit(0), "cuInit")

    def check(self, result: Any, what: str) -> Any:
        err, *rest = result if isinstance(result, tuple) else (result,)
        if err != self.cu.CUresult.CUDA_SUCCESS:
            _, text = self.cu.cuGetErrorString(err)
            message = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
            if err == self.cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
                raise MemoryError(f"CUDA: {what}: out of memory ({message})")
            raise CUDAError(f"{what} failed: {getattr(err, 'name', err)}: {message}")
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else tuple(rest)

    def device_count(self) -> int:
        return int(self.check(self.cu.cuDeviceGetCount(), "cuDeviceGetCount"))

    def _device(self, index: int) -> Any:
        return self.check(self.cu.cuDeviceGet(index), f"cuDeviceGet({index})")

    def read_caps(self, index: int) -> CUDACaps:
        dev = self._device(index)
        attr = self.cu.CUdevice_attribute

        def get(name: str) -> int:
            return int(self.check(self.cu.cuDeviceGetAttribute(getattr(attr, name), dev), name))

        raw_name = self.check(self.cu.cuDeviceGetName(256, dev), "cuDeviceGetName")
        major = get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
        minor = get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
        total = int(self.check(self.cu.cuDeviceTotalMem(dev), "cuDeviceTotalMem"))
        return CUDACaps(
            name=raw_name.split(b"\0")[0].decode(errors="replace").strip(),
            arch=f"sm_{major}{minor}",
            max_threads_per_block=get("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
            warp_size=get("CU_DEVICE_ATTRIBUTE_WARP_SIZE"),
            max_block=tuple(get(f"CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_{a}") for a in "XYZ"),  # type: ignore[arg-type]
            max_grid=tuple(get(f"CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_{a}") for a in "XYZ"),  # type: ignore[arg-type]
            shared_per_block=get("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK"),
            registers_per_block=get("CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK"),
            total_memory=total,
        )

    def open_context(self, index: int) -> Any:
        ctx = self.check(self.cu.cuDevicePrimaryCtxRetain(self._device(index)), "cuDevicePrimaryCtxRetain")
        self.set_current(ctx)
        return ctx

    def set_current(self, ctx: Any) -> None:
        self.check(self.cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def alloc(self, size: int) -> Any:
        return self.check(self.cu.cuMemAlloc(size), f"cuMemAlloc({size})")

    def free(self, ptr: Any) -> None:
        self.check(self.cu.cuMemFree(ptr), "cuMemFree")

    def alloc_host(self, size: int) -> Any:
        address = self.check(self.cu.cuMemHostAlloc(size, 0), f"cuMemHostAlloc({size})")
        return _host_array(int(address), size)

    def free_host(self, host: Any) -> None:
        self.check(self.cu.cuMemFreeHost(host.ctypes.data), "cuMemFreeHost")

    def copy_htod(self, dst: Any, host: Any, size: int) -> None:
        self.check(self.cu.cuMemcpyHtoD(dst, host.ctypes.data, size), "cuMemcpyHtoD")

    def copy_dtoh(self, host: Any, src: Any, size: int) -> None:
        self.check(self.cu.cuMemcpyDtoH(host.ctypes.data, src, size), "cuMemcpyDtoH")

    def copy_dtod(self, dst: Any, src: Any, size: int) -> None:
        self.check(self.cu.cuMemcpyDtoD(dst, src, size), "cuMemcpyDtoD")

    def copy_peer(self, dst: Any, dst_ctx: Any, src: Any, src_ctx: Any, size: int) -> None:
        self.check(self.cu.cuMemcpyPeer(dst, dst_ctx, src, src_ctx, size), "cuMemcpyPeer")

    def load_module(self, cubin: bytes) -> Any:
        return self.check(self.cu.cuModuleLoadData(cubin), "cuModuleLoadData")

    def get_function(self, module: Any, name: str) -> Any:
        return self.check(self.cu.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")

    def function_limits(self, func: Any) -> tuple[int, int]:
        attr = self.cu.CUfunction_attribute
        regs = self.check(self.cu.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_NUM_REGS, func), "cuFuncGetAttribute")
        most = self.check(
            self.cu.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func), "cuFuncGetAttribute"
        )
        return int(regs), int(most)

    def launch(self, func: Any, launch: Launch, bufs: tuple[Any, ...], vals: tuple[int, ...]) -> None:
        # kernelParams is an array of pointers, one per parameter, each to the parameter's value
        values = [ctypes.c_uint64(int(b)) for b in bufs] + [ctypes.c_int32(v) for v in vals]
        pointers = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
        self.check(
            self.cu.cuLaunchKernel(func, *launch.grid, *launch.block, 0, 0, ctypes.addressof(pointers), 0),
            "cuLaunchKernel",
        )

    def event(self) -> Any:
        return self.check(self.cu.cuEventCreate(self.cu.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")

    def record(self, event: Any) -> None:
        self.check(self.cu.cuEventRecord(event, 0), "cuEventRecord")

    def elapsed_seconds(self, start: Any, end: Any) -> float:
        self.check(self.cu.cuEventSynchronize(end), "cuEventSynchronize")
        return float(self.check(self.cu.cuEventElapsedTime(start, end), "cuEventElapsedTime")) * 1e-3

    def synchronize(self) -> None:
        self.check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")


class PyCUDADriver(CUDADriver):
    """`CUDADriver` on pycuda (``pycuda.driver``)."""

    name = "pycuda"

    def __init__(self) -> None:
        import pycuda.driver as cuda

        self.cu = cuda
        cuda.init()
        self._contexts: list[Any] = []
        # pycuda reports an error at exit when a context is still on its stack
        atexit.register(self._pop_current)

    def _pop_current(self) -> None:
        while self.cu.Context.get_current() is not None:
            self.cu.Context.pop()

    def device_count(self) -> int:
        return int(self.cu.Device.count())

    def read_caps(self, index: int) -> CUDACaps:
        dev = self.cu.Device(index)
        a = self.cu.device_attribute
        major, minor = dev.compute_capability()
        return CUDACaps(
            name=dev.name(),
            arch=f"sm_{major}{minor}",
            max_threads_per_block=dev.get_attribute(a.MAX_THREADS_PER_BLOCK),
            warp_size=dev.get_attribute(a.WARP_SIZE),
            max_block=(dev.get_attribute(a.MAX_BLOCK_DIM_X), dev.get_attribute(a.MAX_BLOCK_DIM_Y),
                       dev.get_attribute(a.MAX_BLOCK_DIM_Z)),
            max_grid=(dev.get_attribute(a.MAX_GRID_DIM_X), dev.get_attribute(a.MAX_GRID_DIM_Y),
                      dev.get_attribute(a.MAX_GRID_DIM_Z)),
            shared_per_block=dev.get_attribute(a.MAX_SHARED_MEMORY_PER_BLOCK),
            registers_per_block=dev.get_attribute(a.MAX_REGISTERS_PER_BLOCK),
            total_memory=dev.total_memory(),
        )  # fmt: skip

    def open_context(self, index: int) -> Any:
        ctx = self.cu.Device(index).retain_primary_context()
        self._contexts.append(ctx)
        self.set_current(ctx)
        return ctx

    def set_current(self, ctx: Any) -> None:
        # pycuda keeps a stack of current contexts: keep exactly one on it
        current = self.cu.Context.get_current()
        if current is not None and current == ctx:
            return
        if current is not None:
            self.cu.Context.pop()
        ctx.push()

    def alloc(self, size: int) -> Any:
        try:
            return self.cu.mem_alloc(size)
        except self.cu.MemoryError as e:
            raise MemoryError(f"CUDA: mem_alloc({size}): out of memory ({e})") from e

    def free(self, ptr: Any) -> None:
        ptr.free()

    def alloc_host(self, size: int) -> Any:
        import numpy as np

        return self.cu.pagelocked_empty(size, np.uint8)

    def free_host(self, host: Any) -> None:
        host.base.free()

    def copy_htod(self, dst: Any, host: Any, size: int) -> None:
        self.cu.memcpy_htod(dst, host[:size])

    def copy_dtoh(self, host: Any, src: Any, size: int) -> None:
        self.cu.memcpy_dtoh(host[:size], src)

    def copy_dtod(self, dst: Any, src: Any, size: int) -> None:
        self.cu.memcpy_dtod(dst, src, size)

    def copy_peer(self, dst: Any, dst_ctx: Any, src: Any, src_ctx: Any, size: int) -> None:
        self.cu.memcpy_peer(dst, src, size, dst_ctx, src_ctx)

    def load_module(self, cubin: bytes) -> Any:
        return self.cu.module_from_buffer(cubin)

    def get_function(self, module: Any, name: str) -> Any:
        return module.get_function(name)

    def function_limits(self, func: Any) -> tuple[int, int]:
        return int(func.num_regs), int(func.max_threads_per_block)

    def launch(self, func: Any, launch: Launch, bufs: tuple[Any, ...], vals: tuple[int, ...]) -> None:
        import numpy as np

        func(*bufs, *(np.int32(v) for v in vals), grid=launch.grid, block=launch.block)

    def event(self) -> Any:
        return self.cu.Event()

    def record(self, event: Any) -> None:
        event.record()

    def elapsed_seconds(self, start: Any, end: Any) -> float:
        end.synchronize()
        return float(end.time_since(start)) * 1e-3

    def synchronize(self) -> None:
        self.cu.Context.synchronize()


RUNTIMES = {"cuda-bindings": BindingsDriver, "bindings": BindingsDriver, "pycuda": PyCUDADriver}


def runtime_name() -> str:
    """UOPKIT_CUDA_RUNTIME: "cuda-bindings" (default) or "pycuda"; anything else is an error naming the choices."""
    name = os.environ.get("UOPKIT_CUDA_RUNTIME", "cuda-bindings").strip().lower() or "cuda-bindings"
    if name not in RUNTIMES:
        raise NoCUDADevice(f"UOPKIT_CUDA_RUNTIME={name!r} is not a CUDA runtime; choose cuda-bindings or pycuda")
    return name


def libcuda_problem() -> str | None:
    """None when the NVIDIA driver library can be loaded, else the reason."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA driver (libcuda.so.1 not found); kernels still compile with NVRTC (CUDA_ARCH=sm_90)"
    return None


@functools.cache
def get_driver() -> CUDADriver:
    """The process's driver (chosen by UOPKIT_CUDA_RUNTIME), initialised once; raises NoCUDADevice with the reason."""
    problem = libcuda_problem()
    if problem is not None:
        raise NoCUDADevice(problem)
    name = runtime_name()
    try:
        driver = RUNTIMES[name]()
    except ImportError as e:
        hint = (
            "pip install 'uopkit-cuda[pycuda]' (builds against a CUDA toolkit)"
            if name == "pycuda"
            else ("pip install cuda-bindings")
        )
        raise NoCUDADevice(f"the {name} runtime is not importable ({e}); {hint}") from None
    except (CUDAError, MemoryError, RuntimeError) as e:
        raise NoCUDADevice(f"the CUDA driver failed to initialise ({name}): {e}") from None
    except Exception as e:
        # pycuda raises its own error types (pycuda._driver.Error) from init
        raise NoCUDADevice(f"the CUDA driver failed to initialise ({name}): {type(e).__name__}: {e}") from None
    if driver.device_count() == 0:
        raise NoCUDADevice("the CUDA driver found no GPU")
    return driver


def cuda_problem() -> str | None:
    """Why the CUDA backend can't run here (no driver, no GPU, no NVRTC), or None. Cheap enough for availability."""
    from uopkit_cuda.compiler import nvrtc_problem

    try:
        get_driver()
    except NoCUDADevice as e:
        return str(e)
    return nvrtc_problem()


# ------------------------------------------------------------------------------------------------ memory


class CUDAAllocator(LRUAllocator):
    """Device memory of one GPU; host copies go through a pinned staging buffer (grown as needed).

    Buffers are not zero-initialised (kernels write every output element).
    """

    def __init__(self, device: CUDADevice) -> None:
        super().__init__()
        self.device = device
        self.driver = device.driver
        self._staging: Any = None

    def _alloc(self, size: int) -> Any:
        self.device.make_current()
        try:
            return self.driver.alloc(size)
        except MemoryError as e:
            total = self.device.caps.total_memory
            raise MemoryError(
                f"{self.device.device}: out of memory allocating {size} bytes (the GPU has {total} bytes; "
                f"{self.cached_bytes} are held by the allocator's cache): {e}"
            ) from e

    def _free(self, opaque: Any, size: int) -> None:
        self.device.make_current()
        self.driver.free(opaque)

    def staging(self, size: int) -> Any:
        """The pinned host buffer, at least `size` bytes."""
        if self._staging is None or len(self._staging) < size:
            if self._staging is not None:
                self.driver.free_host(self._staging)
                self._staging = None
            self._staging = self.driver.alloc_host(max(size, 1 << 20))
        return self._staging

    def copyin(self, dest: Any, src: memoryview) -> None:
        import numpy as np

        self.device.make_current()
        host = self.staging(src.nbytes)
        host[: src.nbytes] = np.frombuffer(src, dtype=np.uint8)
        self.driver.copy_htod(dest, host, src.nbytes)

    def copyout(self, dest: memoryview, src: Any) -> None:
        import numpy as np

        self.device.make_current()
        host = self.staging(dest.nbytes)
        self.driver.copy_dtoh(host, src, dest.nbytes)
        np.frombuffer(dest, dtype=np.uint8)[:] = host[: dest.nbytes]

    supports_transfer = True

    def transfer(self, dest: Any, src: Any, size: int, src_device: Compiled, dest_device: Compiled) -> None:
        assert isinstance(src_device, CUDADevice) and isinstance(dest_device, CUDADevice)
        self.device.make_current()
        if src_device.index == dest_device.index:
            self.driver.copy_dtod(dest, src, size)
        else:
            self.driver.copy_peer(dest, dest_device.context, src, src_device.context, size)


# ------------------------------------------------------------------------------------------------ programs


def _divisor_at_most(n: int, limit: int) -> int:
    """The largest divisor of `n` that is at most `limit` (1 for n <= 1)."""
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1


def launch_dims(global_size: tuple[int, int, int], local_size: tuple[int, int, int] | None, caps: CUDACaps) -> Launch:
    """ProgramSpec sizes -> CUDA grid and block.

    With `local_size` the kernel's gidx count blocks and lidx threads: grid = global_size, block = local_size.
    Without it gidx are global thread ids (see the renderer): up to DEFAULT_BLOCK threads per block, each block
    dimension a divisor of the global size so no thread falls outside it.
    """
    if any(g < 0 for g in global_size) or (local_size is not None and any(x < 1 for x in local_size)):
        raise ValueError(f"invalid launch sizes global={global_size} local={local_size}")
    if local_size is None:
        block = [1, 1, 1]
        room = DEFAULT_BLOCK
        for i, g in enumerate(global_size):
            block[i] = _divisor_at_most(g, min(room, caps.max_block[i]))
            room //= block[i]
        grid = tuple(g // b for g, b in zip(global_size, block, strict=True))
        launch = Launch(grid, tuple(block))  # type: ignore[arg-type]
    else:
        launch = Launch(tuple(global_size), tuple(local_size))  # type: ignore[arg-type]
    threads = launch.block[0] * launch.block[1] * launch.block[2]
    if threads > caps.max_threads_per_block or any(b > m for b, m in zip(launch.block, caps.max_block, strict=True)):
        raise ValueError(
            f"block {launch.block} ({threads} threads) exceeds the device's limits: {caps.max_threads_per_block} "
            f"threads per block, {caps.max_block} per dimension"
        )
    if launch.grid[0] > caps.max_grid[0]:
        raise ValueError(f"grid {launch.grid} exceeds the device's limit {caps.max_grid}")
    # more blocks than the grid holds in y or z: the kernel's ids step through the rest (see the renderer)
    grid = (launch.grid[0], min(launch.grid[1], caps.max_grid[1]), min(launch.grid[2], caps.max_grid[2]))
    return Launch(grid, launch.block)


class CUDAProgram:
    """One kernel of a CUBIN: ``prg(*bufs, global_size, local_size, vals, wait)``.

    Buffers are the allocator's device pointers in the order of the kernel's parameters, then the symbolic values
    as int32. With ``wait=True`` it times the kernel with two events and returns the seconds.
    """

    def __init__(self, device: CUDADevice, name: str, lib: bytes) -> None:
        self.device = device
        self.name = name
        driver = device.driver
        device.make_current()
        try:
            self.module = driver.load_module(lib)
        except CUDAError as e:
            raise CUDAError(f"{device.device} can't load kernel {name} ({device.caps.arch}): {e}") from None
        self.function = driver.get_function(self.module, name)
        self.registers, self.max_threads = driver.function_limits(self.function)

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, int, int] = (1, 1, 1),
        local_size: tuple[int, int, int] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        launch = launch_dims(global_size, local_size, self.device.caps)
        threads = launch.block[0] * launch.block[1] * launch.block[2]
        if threads > self.max_threads:
            raise ValueError(
                f"kernel {self.name} uses {self.registers} registers per thread, so {self.device.device} runs at "
                f"most {self.max_threads} threads per block; it was launched with {threads} {launch.block}: "
                "use smaller local opts"
            )
        if any(g == 0 for g in launch.grid):
            return 0.0 if wait else None
        # the renderer's vector loads and stores take every buffer's base as aligned (cuMemAlloc's are, to 256
        # bytes); a pointer adopted from elsewhere that isn't would fault on the GPU and poison the context
        for i, b in enumerate(bufs):
            if int(b) % VECTOR_ALIGN:
                raise ValueError(
                    f"kernel {self.name}: buffer {i} at {int(b):#x} is not aligned to {VECTOR_ALIGN} bytes, which "
                    "its vector loads and stores need; pass buffers from the device's allocator"
                )
        driver = self.device.driver
        self.device.make_current()
        if not wait:
            driver.launch(self.function, launch, bufs, vals)
            return None
        start, end = driver.event(), driver.event()
        driver.record(start)
        driver.launch(self.function, launch, bufs, vals)
        driver.record(end)
        return driver.elapsed_seconds(start, end)


# ------------------------------------------------------------------------------------------------ the device


class CUDADevice(Compiled):
    """An opened GPU: its primary context, caps, an allocator, a renderer and an NVRTC compiler for its arch."""

    def __init__(self, device: str, index: int, driver: CUDADriver) -> None:
        from uopkit_cuda.compiler import NVRTCCompiler
        from uopkit_cuda.renderer import CUDARenderer

        self.index = index
        self.driver = driver
        self.caps = driver.read_caps(index)
        self.context = driver.open_context(index)
        # CUDA_ARCH builds for another arch than the device's (an older one the GPU also runs): the renderer then
        # offers only what that arch has (tensor cores need sm_80)
        arch = os.environ.get("CUDA_ARCH") or self.caps.arch
        compiler = NVRTCCompiler(arch)
        renderer = CUDARenderer(dataclasses.replace(self.caps, arch=compiler.arch))
        super().__init__(device, CUDAAllocator(self), renderer, compiler, self.program)

    def make_current(self) -> None:
        self.driver.set_current(self.context)

    def program(self, name: str, lib: bytes) -> CUDAProgram:
        return CUDAProgram(self, name, lib)

    def synchronize(self) -> None:
        self.make_current()
        self.driver.synchronize()

    def __repr__(self) -> str:
        return f"<CUDADevice {self.device} {self.caps.name!r} {self.caps.arch} ({self.driver.name})>"


def open_cuda(device: str, driver: CUDADriver | None = None) -> CUDADevice:
    """Open ``CUDA`` or ``CUDA:N`` (what BackendInfo.open returns)."""
    index = device_index(device)
    driver = driver if driver is not None else get_driver()
    count = driver.device_count()
    if not 0 <= index < count:
        raise ValueError(f"{device} does not exist: {count} CUDA GPU(s) here (CUDA .. CUDA:{count - 1})")
    return CUDADevice(device, index, driver)
