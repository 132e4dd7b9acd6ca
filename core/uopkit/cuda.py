"""torch.cuda's questions and switches, for ported programs (`Tensor.cuda.is_available()`, `uopkit.cuda.synchronize()`):
answered by uopkit's CUDA backend (the `uopkit-cuda` plugin, ./plugins/cuda) where it is installed and can run here,
else as torch answers on a machine without CUDA: `is_available()` False, `device_count()` 0, the memory figures 0,
`manual_seed`, `empty_cache` nothing; what needs a GPU (`synchronize`, `current_device`, `get_device_name`,
`set_device`) raises a RuntimeError that says why CUDA can't be used and what to install.

>>> import uopkit
>>> uopkit.cuda.is_available() == (uopkit.cuda.device_count() > 0)
True
"""

from __future__ import annotations

import warnings
from typing import Any

from uopkit import amp as _amp
from uopkit.device import Compiled, Device, DeviceError, TorchDevice
from uopkit.plugin.manager import get_manager
from uopkit.tensor.tensor import Tensor

__all__ = [
    "is_available",
    "is_initialized",
    "device_count",
    "current_device",
    "set_device",
    "get_device_name",
    "get_device_capability",
    "is_bf16_supported",
    "manual_seed",
    "manual_seed_all",
    "synchronize",
    "empty_cache",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "amp",
]


def _problem() -> str | None:
    # why uopkit's CUDA device can't be used here, or None when it can
    status = get_manager().status("CUDA")
    if status is None:
        return "uopkit's CUDA backend is not installed (pip install ./plugins/cuda)"
    return None if status.usable else f"{status.reason} (run `uopkit devices` for every backend's status)"


def is_available() -> bool:
    """torch.cuda.is_available: whether uopkit's CUDA backend is installed and can run here (a driver, a GPU, NVRTC).

    >>> isinstance(is_available(), bool)
    True
    """
    return _problem() is None


def _index(device: Any, op: str) -> int:
    # torch's ways to name a CUDA device (None: the current one, an int, 'cuda:1', a device) -> its index
    if device is None:
        default = Device._default or ""
        return int(default.partition(":")[2] or 0) if default.startswith("CUDA") else 0
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        named = device if isinstance(device, TorchDevice) else TorchDevice(device)
        if named.type != "cuda":
            raise ValueError(f"cuda.{op}: expected a CUDA device, got {device!r}")
        index = named.index or 0
    if index < 0:
        raise ValueError(f"cuda.{op}: a device index is non-negative, got {index}")
    return index


def _opened(device: Any, op: str) -> Compiled:
    # the CUDA device named, opened; an error that says why when CUDA can't be used here
    problem = _problem()
    if problem is not None:
        raise DeviceError(f"cuda.{op}: no CUDA device can be used here: {problem}")
    index = _index(device, op)
    return Device["CUDA" if index == 0 else f"CUDA:{index}"]


def _opened_devices() -> list[Compiled]:
    return [compiled for name, compiled in list(Device._opened.items()) if name.partition(":")[0] == "CUDA"]


def is_initialized() -> bool:
    """torch.cuda.is_initialized: whether a CUDA device has been opened in this process."""
    return bool(_opened_devices())


def device_count() -> int:
    """torch.cuda.device_count: the GPUs uopkit's CUDA backend sees, 0 where it can't run."""
    if _problem() is not None:
        return 0
    driver = getattr(Device["CUDA"], "driver", None)
    return int(driver.device_count()) if driver is not None else 1


def current_device() -> int:
    """torch.cuda.current_device: the index of the CUDA device 'cuda' means (the default device's when that is a CUDA
    device, else 0). Raises a RuntimeError where no CUDA device can be used."""
    _opened(None, "current_device")
    return _index(None, "current_device")


def set_device(device: Any) -> None:
    """torch.cuda.set_device: uopkit has no current CUDA device apart from the default device, so this makes the CUDA
    device named (an index, 'cuda:1', a device) the default device, where tensors made without one go."""
    compiled = _opened(device, "set_device")
    Device.DEFAULT = compiled.device


def _caps(device: Any, op: str) -> Any:
    return getattr(_opened(device, op), "caps", None)


def get_device_name(device: Any = None) -> str:
    """torch.cuda.get_device_name: the GPU's name as its driver gives it ('NVIDIA H100 80GB HBM3')."""
    caps = _caps(device, "get_device_name")
    return str(getattr(caps, "name", "CUDA"))


def get_device_capability(device: Any = None) -> tuple[int, int]:
    """torch.cuda.get_device_capability: the GPU's compute capability as (major, minor), (9, 0) for an sm_90 GPU."""
    arch = str(getattr(_caps(device, "get_device_capability"), "arch", "sm_00")).removeprefix("sm_")
    return int(arch[:-1] or 0), int(arch[-1:] or 0)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """torch.cuda.is_bf16_supported: whether the CUDA device computes in bfloat16 (sm_80 and newer); False where
    no CUDA device can be used."""
    if _problem() is not None:
        return False
    return get_device_capability() >= (8, 0)


def manual_seed(seed: int) -> None:
    """torch.cuda.manual_seed: uopkit draws the random values of every device from one stream, so where a CUDA device
    can be used this seeds that stream (`Tensor.manual_seed`); elsewhere nothing draws on CUDA and, as torch's, it
    changes nothing (the seed is still checked)."""
    if _problem() is None:
        Tensor.manual_seed(seed)
    elif isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"cuda.manual_seed: seed must be an int, got {type(seed).__name__}")


def manual_seed_all(seed: int) -> None:
    """torch.cuda.manual_seed_all: as `manual_seed` (uopkit's one stream serves every CUDA device)."""
    manual_seed(seed)


def synchronize(device: Any = None) -> None:
    """torch.cuda.synchronize: wait until the CUDA device has finished the work queued on it. Raises a RuntimeError
    where no CUDA device can be used, as torch's."""
    _opened(device, "synchronize").synchronize()


def empty_cache() -> None:
    """torch.cuda.empty_cache: free the buffers the opened CUDA devices' allocators keep for reuse (nothing when none
    was opened)."""
    for compiled in _opened_devices():
        free_cache = getattr(compiled.allocator, "free_cache", None)
        if free_cache is not None:
            free_cache()


def _allocator(device: Any, op: str) -> Any:
    # the allocator of the CUDA device named when that device was opened, else None (nothing allocated on it)
    if not _opened_devices():
        return None
    index = _index(device, op)
    compiled = Device._opened.get("CUDA" if index == 0 else f"CUDA:{index}")
    return None if compiled is None else compiled.allocator


def memory_allocated(device: Any = None) -> int:
    """torch.cuda.memory_allocated: the bytes of the CUDA device's buffers in use now (0 when it was never opened)."""
    return int(getattr(_allocator(device, "memory_allocated"), "in_use", 0))


def max_memory_allocated(device: Any = None) -> int:
    """torch.cuda.max_memory_allocated: the most bytes in use at once since the start or `reset_peak_memory_stats`."""
    return int(getattr(_allocator(device, "max_memory_allocated"), "peak_in_use", 0))


def memory_reserved(device: Any = None) -> int:
    """torch.cuda.memory_reserved: the bytes in use plus those the allocator keeps for reuse."""
    allocator = _allocator(device, "memory_reserved")
    return int(getattr(allocator, "in_use", 0)) + int(getattr(allocator, "cached_bytes", 0))


def max_memory_reserved(device: Any = None) -> int:
    """torch.cuda.max_memory_reserved: uopkit's allocator keeps no more than its peak in use cached, so this is the
    peak in use plus what it caches now."""
    allocator = _allocator(device, "max_memory_reserved")
    return int(getattr(allocator, "peak_in_use", 0)) + int(getattr(allocator, "cached_bytes", 0))


def reset_peak_memory_stats(device: Any = None) -> None:
    """torch.cuda.reset_peak_memory_stats: the peak counts again from the bytes in use now."""
    allocator = _allocator(device, "reset_peak_memory_stats")
    if allocator is not None and hasattr(allocator, "peak_in_use"):
        allocator.peak_in_use = allocator.in_use


class _Amp:
    """torch.cuda.amp: `autocast(...)` is `uopkit.amp.autocast("cuda", ...)` and `GradScaler(...)`
    `uopkit.amp.GradScaler("cuda", ...)`; as torch's, both are disabled, with a warning, where no CUDA device can be
    used."""

    @staticmethod
    def _enabled(enabled: bool, what: str) -> bool:
        if enabled and not is_available():
            warnings.warn(f"cuda.amp.{what}: no CUDA device can be used here, so it is disabled", UserWarning, 3)
            return False
        return enabled

    @staticmethod
    def autocast(enabled: bool = True, dtype: Any = None, cache_enabled: bool | None = None) -> _amp.autocast:
        """torch.cuda.amp.autocast: `uopkit.amp.autocast("cuda", dtype, enabled)` (disabled without CUDA)."""
        return _amp.autocast("cuda", dtype, _Amp._enabled(enabled, "autocast"), cache_enabled)

    @staticmethod
    def GradScaler(  # noqa: N802 (torch's name)
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> _amp.GradScaler:
        """torch.cuda.amp.GradScaler: `uopkit.amp.GradScaler("cuda", ...)` (disabled without CUDA)."""
        return _amp.GradScaler(
            "cuda", init_scale, growth_factor, backoff_factor, growth_interval, _Amp._enabled(enabled, "GradScaler")
        )

    custom_fwd = staticmethod(_amp.custom_fwd)
    custom_bwd = staticmethod(_amp.custom_bwd)


amp = _Amp()
