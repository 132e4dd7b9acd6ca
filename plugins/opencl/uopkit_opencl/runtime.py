"""OpenCL devices, memory and programs through pyopencl.

Device numbering: every available device of every platform (only the platforms whose name and version contain
``OPENCL_PLATFORM``, when it is set), in this order: devices whose compiler builds a trivial kernel before those
whose compiler fails (a PoCL whose LLVM does not know the host CPU fails so), then GPUs and accelerators before the
rest, then the driver's order. ``OPENCL`` is the first of them, ``OPENCL:N`` the N-th. Opened devices of one
platform share a context, so buffers move between them without the host.
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl

from uopkit.device import Compiled, LRUAllocator, device_index
from uopkit_opencl.renderer import CLCaps

# ------------------------------------------------------------------------------------------------ discovery


class NoOpenCLDevice(RuntimeError):
    """No OpenCL platform or device can be used here; the message says why."""


def _platforms() -> list[Any]:
    try:
        return list(cl.get_platforms())
    except cl.Error as e:
        # the ICD loader reports "no platform" as an error
        raise NoOpenCLDevice(
            f"no OpenCL platform found ({e}); install an OpenCL driver, for the CPU e.g. "
            "`pip install 'pyopencl[pocl]'` or `apt-get install pocl-opencl-icd`"
        ) from None


def _usable(device: Any) -> bool:
    return bool(device.available) and bool(device.compiler_available)


def platform_label(platform: Any) -> str:
    """What OPENCL_PLATFORM is matched against: the platform's name and version."""
    return f"{platform.name.strip()} ({platform.version.strip()})"


def available_devices() -> list[Any]:
    """Every available device with a compiler, on the platforms OPENCL_PLATFORM selects, in the driver's order.

    Cheap (no context, no build): this is what the backend's availability checks. Raises NoOpenCLDevice if none.
    """
    platforms = _platforms()
    if not platforms:
        raise NoOpenCLDevice("no OpenCL platform found; install an OpenCL driver (ICD), e.g. pocl-opencl-icd")
    wanted = os.environ.get("OPENCL_PLATFORM", "").strip()
    if wanted:
        matching = [p for p in platforms if wanted.lower() in platform_label(p).lower()]
        if not matching:
            labels = ", ".join(repr(platform_label(p)) for p in platforms)
            raise NoOpenCLDevice(f"no OpenCL platform matches OPENCL_PLATFORM={wanted!r}; platforms here: {labels}")
        platforms = matching
    devices: list[Any] = []
    for platform in platforms:
        try:
            devices += [d for d in platform.get_devices() if _usable(d)]
        except cl.Error:
            # a platform with no devices reports DEVICE_NOT_FOUND
            continue
    if not devices:
        labels = ", ".join(repr(platform_label(p)) for p in platforms)
        raise NoOpenCLDevice(f"no available OpenCL device with a compiler on platform(s) {labels}")
    return devices


PROBE_SRC = "__kernel void uopkit_probe(__global int* out) { out[get_global_id(0)] = 1; }"


@functools.cache
def probe_build(device: Any) -> str | None:
    """None when the device's compiler builds a trivial kernel, else its error (checked once per process)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            cl.Program(_context_for(device), PROBE_SRC).build(devices=[device], cache_dir=False)
    except cl.Error as e:
        # the build log is enough; pyopencl's message repeats itself and names temp files
        message = " ".join(str(e).split())
        return message.split("(options:")[0].strip()
    return None


def list_devices() -> list[Any]:
    """The usable OpenCL devices in uopkit's order (see the module docstring); raises NoOpenCLDevice if none."""
    gpu_like = cl.device_type.GPU | cl.device_type.ACCELERATOR

    def order(device: Any) -> tuple[bool, bool]:
        return (probe_build(device) is not None, not device.type & gpu_like)

    return sorted(available_devices(), key=order)


def describe_devices() -> str:
    """One line: each usable device as ``OPENCL:N name (platform)``, or why there is none."""
    try:
        devices = list_devices()
    except NoOpenCLDevice as e:
        return str(e)
    lines = []
    for i, d in enumerate(devices):
        problem = probe_build(d)
        status = f" [cannot build kernels: {problem}]" if problem else ""
        # the version's first words ("OpenCL 3.0 PoCL 3.1+debian"), not its build details
        version = " ".join(d.platform.version.split()[:4])
        lines.append(f"{_device_string(i)} {d.name.strip()} on {d.platform.name.strip()} ({version}){status}")
    return "; ".join(lines)


def _device_string(index: int) -> str:
    return "OPENCL" if index == 0 else f"OPENCL:{index}"


def _subgroup_width(device: Any) -> int:
    extensions = device.extensions.split()
    if "cl_nv_device_attribute_query" in extensions:
        return int(device.warp_size_nv)
    if "cl_amd_device_attribute_query" in extensions:
        return int(device.wavefront_width_amd)
    return 1


def read_caps(device: Any) -> CLCaps:
    """The capabilities the renderer and runtime use, read from the driver."""
    sizes = tuple(device.max_work_item_sizes)[:3]
    return CLCaps(
        name=device.name.strip(),
        platform=device.platform.name.strip(),
        max_work_group_size=int(device.max_work_group_size),
        max_work_item_sizes=(int(sizes[0]), int(sizes[1]), int(sizes[2])),
        local_mem_size=int(device.local_mem_size),
        subgroup_width=_subgroup_width(device),
        extensions=frozenset(device.extensions.split()),
        correctly_rounded_sqrt=bool(device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT),
        local_mem_on_chip=int(device.local_mem_type) == cl.device_local_mem_type.LOCAL,
    )


# a context per platform, shared by the devices opened on it (direct copies need both buffers in one context)
_contexts: dict[Any, Any] = {}


def _context_for(device: Any) -> Any:
    platform = device.platform
    if platform not in _contexts:
        _contexts[platform] = cl.Context([d for d in platform.get_devices() if _usable(d)])
    return _contexts[platform]


# ------------------------------------------------------------------------------------------------ memory


class CLAllocator(LRUAllocator):
    """``cl.Buffer`` memory in the device's context; copies go through the device's in-order queue.

    Buffers are not zero-initialised (kernels write every output element).
    """

    def __init__(self, device: CLDevice) -> None:
        super().__init__()
        self.device = device

    def _alloc(self, size: int) -> Any:
        limit = self.device.cl_device.max_mem_alloc_size
        if size > limit:
            raise MemoryError(f"{self.device.device}: {size} bytes exceeds the device's max allocation of {limit}")
        try:
            return cl.Buffer(self.device.context, cl.mem_flags.READ_WRITE, size)
        except cl.MemoryError as e:
            raise MemoryError(f"{self.device.device}: out of memory allocating {size} bytes: {e}") from e

    def _free(self, opaque: Any, size: int) -> None:
        opaque.release()

    def copyin(self, dest: Any, src: memoryview) -> None:
        if src.readonly:
            # pyopencl wants writable host memory for the copy; bytes objects are read-only
            src = memoryview(bytearray(src))
        cl.enqueue_copy(self.device.queue, dest, src, is_blocking=True)

    def copyout(self, dest: memoryview, src: Any) -> None:
        cl.enqueue_copy(self.device.queue, dest, src, is_blocking=True)

    supports_transfer = True

    def transfer(self, dest: Any, src: Any, size: int, src_device: Compiled, dest_device: Compiled) -> None:
        assert isinstance(src_device, CLDevice) and isinstance(dest_device, CLDevice)
        if src_device.context is dest_device.context:
            # one context: the copy runs on the destination's queue (the source was synchronized by the caller)
            cl.enqueue_copy(dest_device.queue, dest, src, byte_count=size)
            return
        # different platforms: through host memory
        staging = np.empty(size, dtype=np.uint8)
        cl.enqueue_copy(src_device.queue, staging, src, is_blocking=True)
        cl.enqueue_copy(dest_device.queue, dest, staging, is_blocking=True)


# ------------------------------------------------------------------------------------------------ programs


@dataclass(frozen=True)
class LaunchSizes:
    """What `CLProgram` hands to clEnqueueNDRangeKernel: total work-items per dimension and the group size."""

    global_work: tuple[int, ...]
    local_work: tuple[int, ...] | None


def launch_sizes(
    global_size: tuple[int, int, int], local_size: tuple[int, int, int] | None, max_group: int
) -> LaunchSizes:
    """ProgramSpec sizes -> OpenCL sizes.

    `global_size` counts work-groups (what a kernel's ``gidx`` SPECIALs range over) and `local_size` the work-items
    in a group (``lidx``), so OpenCL's global work size is their product. Without `local_size` the kernel uses
    global ids only and the driver picks the groups.
    """
    if any(g < 0 for g in global_size) or (local_size is not None and any(x < 1 for x in local_size)):
        raise ValueError(f"invalid launch sizes global={global_size} local={local_size}")
    if local_size is None:
        return LaunchSizes(tuple(global_size), None)
    group = local_size[0] * local_size[1] * local_size[2]
    if group > max_group:
        raise ValueError(f"local size {local_size} has {group} work-items, the device allows {max_group} per group")
    return LaunchSizes(tuple(g * l for g, l in zip(global_size, local_size, strict=True)), tuple(local_size))


class CLProgram:
    """One kernel from a program binary: ``prg(*bufs, global_size, local_size, vals, wait)``.

    Buffers are the allocator's ``cl.Buffer``s in the order of the kernel's parameters, then the symbolic values as
    int32. With ``wait=True`` it waits for the kernel and returns its run time from the queue's profiling events.
    """

    def __init__(self, device: CLDevice, name: str, lib: bytes) -> None:
        self.device = device
        self.name = name
        with warnings.catch_warnings():
            # a non-empty build log (warnings) is not an error here
            warnings.simplefilter("ignore", cl.CompilerWarning)
            self.program = cl.Program(device.context, [device.cl_device], [lib]).build()
        self.kernel = cl.Kernel(self.program, name)

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, int, int] = (1, 1, 1),
        local_size: tuple[int, int, int] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        sizes = launch_sizes(global_size, local_size, self.device.caps.max_work_group_size)
        for i, buf in enumerate(bufs):
            if not isinstance(buf, cl.MemoryObjectHolder):
                raise TypeError(f"OpenCL programs take cl.Buffer arguments, got {type(buf).__name__} for argument {i}")
            self.kernel.set_arg(i, buf)
        for i, v in enumerate(vals, start=len(bufs)):
            self.kernel.set_arg(i, np.int32(v))
        if any(g == 0 for g in sizes.global_work):
            return 0.0 if wait else None
        event = cl.enqueue_nd_range_kernel(self.device.queue, self.kernel, sizes.global_work, sizes.local_work)
        if not wait:
            return None
        event.wait()
        return (event.profile.end - event.profile.start) * 1e-9


# ------------------------------------------------------------------------------------------------ the device


class CLDevice(Compiled):
    """An opened OpenCL device: its context (shared per platform), an in-order profiling queue and its caps."""

    def __init__(self, device: str, cl_device: Any, context: Any | None = None) -> None:
        from uopkit_opencl.compiler import CLCompiler
        from uopkit_opencl.renderer import OpenCLRenderer

        self.cl_device = cl_device
        self.context = context if context is not None else _context_for(cl_device)
        self.queue = cl.CommandQueue(self.context, cl_device, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.caps = read_caps(cl_device)
        super().__init__(
            device,
            CLAllocator(self),
            OpenCLRenderer(self.caps),
            CLCompiler(self.context, cl_device, self.caps),
            self.program,
        )

    def program(self, name: str, lib: bytes) -> CLProgram:
        return CLProgram(self, name, lib)

    def synchronize(self) -> None:
        self.queue.finish()

    def __repr__(self) -> str:
        return f"<CLDevice {self.device} {self.caps.name!r} ({self.caps.platform})>"


def open_opencl(device: str) -> CLDevice:
    """Open ``OPENCL`` or ``OPENCL:N`` (what BackendInfo.open returns)."""
    index = device_index(device)
    devices = list_devices()
    if not 0 <= index < len(devices):
        raise ValueError(f"{device} does not exist: {len(devices)} OpenCL device(s) here: {describe_devices()}")
    problem = probe_build(devices[index])
    if problem is not None:
        raise ValueError(f"{device} ({devices[index].name.strip()}) cannot build kernels: {problem}")
    return CLDevice(device, devices[index])
