"""Argument checks the torch.nn layers share (the spatial layers' input ranks, sizes, probabilities, inplace)."""

from __future__ import annotations

from collections.abc import Callable

from uopkit.dtype import DType, dtypes, is_dtype_like, to_dtype
from uopkit.tensor import ShapeError, Tensor
from uopkit.tensor.memory_format import as_memory_format
from uopkit.tensor.support import _is_device_object

# ---------------------------------------------------------------------------------------------------------------------


# the spatial axes' names, by their number
_SPATIAL = {1: "L", 2: "H, W", 3: "D, H, W"}


def _check_rank(x: Tensor, spatial_dims: int, layer: str) -> None:
    # torch's spatial layers take (N, C, *spatial) or an unbatched (C, *spatial)
    if x.ndim not in (spatial_dims + 1, spatial_dims + 2):
        spatial = _SPATIAL[spatial_dims]
        raise ShapeError(f"{layer}: expected input (N, C, {spatial}) or (C, {spatial}), got shape {x.shape}")


def _positive(values: tuple[int, ...], name: str, layer: str, allow_zero: bool = False) -> None:
    if any(v < 0 or (v == 0 and not allow_zero) for v in values):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{layer}: every {name} must be {bound}, got {values}")


def _probability(p: float, layer: str) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{layer}: p must be a probability in [0, 1], got {p}")


def _maybe_in_place(x: Tensor, inplace: bool, compute: Callable[[], Tensor], op: str) -> Tensor:
    # inplace=True writes the result into x (as torch's inplace activations), else a new tensor
    return x._update_in_place(compute, op) if inplace else compute()


def _to_arguments(layer: str, args: tuple, kwargs: dict) -> tuple[str | None, DType | None]:
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    if "memory_format" in kwargs:
        # (checked, and changes nothing: uopkit lays out buffers itself, uopkit/tensor/memory_format.py)
        as_memory_format(kwargs.pop("memory_format"), f"{layer}.to")
    if kwargs:
        raise TypeError(f"{layer}.to: unexpected arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif isinstance(a, DType) or (is_dtype_like(a) and not isinstance(a, str)):
            # (a DType, torch.float16, Python's float)
            dtype = to_dtype(a)
        elif _is_device_object(a):
            device = a
        elif isinstance(a, str) and a.split(":")[0].upper() in ("CPU", "CUDA", "OPENCL", "TRITON", "GPU", "CL", "META"):
            device = a
        elif isinstance(a, str):
            dtype = to_dtype(a)
        elif a is not None and not isinstance(a, bool):
            raise TypeError(f"{layer}.to: can't move to {a!r} (give a device string, a dtype or a tensor)")
    if device is not None and str(device).split(":")[0].lower() == "meta":
        # there is no meta device: torch's stateless copy for functional_call (`deepcopy(m).to("meta")`) keeps its
        # tensors where they are
        device = None
    dtype = None if dtype is None else to_dtype(dtype)
    if dtype is not None and not dtypes.is_float(dtype):
        raise TypeError(f"{layer}.to: only floating-point dtypes are accepted, got {dtype}")
    return device, dtype
