"""Triton devices, memory and programs. Buffers are PyTorch uint8 tensors: on a CUDA GPU they live there and kernels
are launched by Triton's own driver; without one (or with TRITON_INTERPRET=1) they are CPU tensors and kernels run
in Triton's CPU interpreter, which reads and writes them in place.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch

from uopkit.device import Compiled, LRUAllocator, device_index
from uopkit_triton.compiler import TritonCompiler, load_module, parse_targets, rebind_kernels
from uopkit_triton.renderer import TritonRenderer


def gpu_available() -> bool:
    """A CUDA GPU that torch can use, unless TRITON_INTERPRET=1 asks for the interpreter."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return False
    return bool(torch.cuda.is_available())


class TorchAllocator(LRUAllocator):
    """Device memory as flat uint8 torch tensors on `torch_device` ("cuda:N" or "cpu")."""

    def __init__(self, torch_device: str) -> None:
        super().__init__()
        self.torch_device = torch_device

    def _alloc(self, size: int) -> torch.Tensor:
        try:
            return torch.empty(size, dtype=torch.uint8, device=self.torch_device)
        except torch.OutOfMemoryError as e:
            raise MemoryError(str(e)) from e

    def copyin(self, dest: torch.Tensor, src: memoryview) -> None:
        host = torch.from_numpy(np.frombuffer(src, dtype=np.uint8).copy())
        dest[: host.numel()].copy_(host)

    def copyout(self, dest: memoryview, src: torch.Tensor) -> None:
        out = np.frombuffer(dest, dtype=np.uint8)
        out[:] = src[: out.size].cpu().numpy()


def _typed(buf: torch.Tensor, sig: str) -> Any:
    """The uint8 buffer as a pointer to the kernel argument's element type. triton.reinterpret (not a torch view):
    torch's uint16/32/64 are shell types its interpreter path can't copy, and a 1-byte buffer (what a zero-size
    buffer gets) has no float32 view."""
    import triton
    import triton.language as tl

    return triton.reinterpret(buf, getattr(tl, TL_NAMES[sig.removeprefix("*")]))


# triton.language's dtype names by signature type
TL_NAMES = {
    "i8": "int8", "u8": "uint8", "i16": "int16", "u16": "uint16", "i32": "int32", "u32": "uint32",
    "i64": "int64", "u64": "uint64", "fp16": "float16", "fp32": "float32", "fp64": "float64",
}  # fmt: skip


class TritonProgram:
    """One kernel: ``prg(*bufs, global_size, local_size, vals, wait)``.

    `global_size` is the grid (one program per work-group); the work-group's shape is compiled into the kernel as
    its block, so `local_size` is not needed. Buffers are the allocator's tensors, viewed with the kernel's argument
    types; `vals` are the symbolic values, as int32 arguments after them.
    """

    def __init__(self, device: TritonDevice, name: str, lib: bytes) -> None:
        self.device = device
        self.name = name
        self.module = load_module(lib.decode())
        self.kernel = rebind_kernels(self.module, interpreted=not device.gpu)
        self.signature = list(self.module.SIGNATURE.values())

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, int, int] = (1, 1, 1),
        local_size: tuple[int, int, int] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        if len(bufs) + len(vals) != len(self.signature):
            raise TypeError(
                f"{self.name} takes {len(self.signature)} arguments ({self.signature}), got {len(bufs)} buffers and "
                f"{len(vals)} values"
            )
        args: list[Any] = []
        for i, (buf, sig) in enumerate(zip(bufs, self.signature, strict=False)):
            if not isinstance(buf, torch.Tensor):
                raise TypeError(f"Triton programs take torch tensors, got {type(buf).__name__} for argument {i}")
            args.append(_typed(buf, sig))
        args += [int(v) for v in vals]
        grid = tuple(int(g) for g in global_size)
        if any(g == 0 for g in grid):
            return 0.0 if wait else None
        if not self.device.gpu:
            start = time.perf_counter()
            self.kernel[grid](*args)
            return time.perf_counter() - start if wait else None
        options = {"num_warps": int(self.module.NUM_WARPS), "enable_fp_fusion": False}
        if not wait:
            self.kernel[grid](*args, **options)
            return None
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        self.kernel[grid](*args, **options)
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) * 1e-3


class TritonDevice(Compiled):
    """An opened Triton device: a CUDA GPU, or the CPU interpreter."""

    def __init__(self, device: str, index: int, gpu: bool) -> None:
        self.gpu = gpu
        self.index = index
        targets = parse_targets(os.environ.get("UOPKIT_TRITON_TARGETS", ""))
        if gpu:
            major, minor = torch.cuda.get_device_capability(index)
            own = ("cuda", major * 10 + minor, 32)
            targets = (own, *(t for t in targets if t != own))
        torch_device = f"cuda:{index}" if gpu else "cpu"
        super().__init__(device, TorchAllocator(torch_device), TritonRenderer(), TritonCompiler(targets), self.program)

    def program(self, name: str, lib: bytes) -> TritonProgram:
        return TritonProgram(self, name, lib)

    def synchronize(self) -> None:
        if self.gpu:
            torch.cuda.synchronize(self.index)

    @property
    def description(self) -> str:
        return f"CUDA GPU {torch.cuda.get_device_name(self.index)}" if self.gpu else "Triton's CPU interpreter"

    def __repr__(self) -> str:
        return f"<TritonDevice {self.device} ({self.description})>"


def open_triton(device: str) -> TritonDevice:
    """Open ``TRITON`` or ``TRITON:N`` (what BackendInfo.open returns): CUDA GPU N, or the interpreter."""
    index = device_index(device)
    gpu = gpu_available()
    count = torch.cuda.device_count() if gpu else 1
    if not 0 <= index < count:
        where = f"{count} CUDA GPU(s)" if gpu else "no CUDA GPU, so only TRITON (Triton's CPU interpreter)"
        raise ValueError(f"{device} does not exist: there is {where}")
    return TritonDevice(device, index, gpu)
