"""The argument handling uopkit.nn.functional's functions share: the input check, torch's window arguments,
its deprecated loss reduction pair and its implicit softmax dim."""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from uopkit.tensor import ArgumentError, ShapeError, Tensor


def _tensor_input(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn with its first argument (torch's `input`) checked to be a Tensor: a numpy array or a torch tensor passed by
    mistake would otherwise fail deep inside with an AttributeError that names no function."""
    first = next(iter(inspect.signature(fn).parameters))

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        value = args[0] if args else kwargs.get(first)
        if not isinstance(value, Tensor):
            raise TypeError(f"{fn.__name__}: {first} must be a uopkit Tensor, got {type(value).__name__}")
        return fn(*args, **kwargs)

    return checked


def _ntuple(value: Any, n: int, name: str, fn: str) -> tuple[int, ...]:
    # torch's int-or-sequence window arguments: an int (or one-element sequence) is the same for every spatial axis
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    if isinstance(value, Sequence) and len(value) in (1, n) and all(isinstance(v, (int, np.integer)) for v in value):
        return tuple(int(v) for v in value) * (n // len(value))
    raise ArgumentError(f"{fn}: {name} must be an int or a sequence of {n} ints, got {value!r}")


def _check_rank(x: Tensor, n: int, fn: str) -> None:
    # torch's n-d spatial functions take (N, C, *spatial) or an unbatched (C, *spatial)
    if x.ndim not in (n + 1, n + 2):
        spatial = ("L", "H, W", "D, H, W")[n - 1]
        raise ShapeError(f"{fn}: expected input (N, C, {spatial}) or (C, {spatial}), got shape {x.shape}")


def _pool_window(
    fn: str, n: int, x: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any = 1
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    # a pool's window arguments as n-tuples, checked as torch checks them (stride None or [] is the kernel)
    _check_rank(x, n, fn)
    k = _ntuple(kernel_size, n, "kernel_size", fn)
    s = k if stride is None or (isinstance(stride, Sequence) and not stride) else _ntuple(stride, n, "stride", fn)
    p, d = _ntuple(padding, n, "padding", fn), _ntuple(dilation, n, "dilation", fn)
    for name, values, low in (("kernel_size", k, 1), ("stride", s, 1), ("dilation", d, 1), ("padding", p, 0)):
        if any(v < low for v in values):
            raise ArgumentError(f"{fn}: every {name} must be >= {low}, got {values}")
    if any(pad > size // 2 for pad, size in zip(p, k, strict=True)):
        raise ArgumentError(f"{fn}: padding {p} must be at most half the kernel_size {k} (as PyTorch)")
    return k, s, p, d


def _reduction(size_average: bool | None, reduce: bool | None, reduction: str, fn: str) -> str:
    # torch's deprecated size_average/reduce pair, when given, decides the reduction (with torch's warning, pointing
    # past this, the loss and its input check at the caller)
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    legacy = "none" if not reduce else "mean" if size_average else "sum"
    warnings.warn(
        f"{fn}: size_average and reduce are deprecated, use reduction='{legacy}' instead", UserWarning, stacklevel=4
    )
    return legacy


def _softmax_dim(fn: str, ndim: int, stacklevel: int) -> int:
    # torch's implicit dim for dim=None (deprecated, with its warning): 0 for 0-, 1- and 3-d inputs, else 1; the
    # warning skips one frame more than torch's _stacklevel says, for the input check around each function
    warnings.warn(
        f"{fn} called without dim: the dim is guessed from the input's ndim (deprecated); pass dim explicitly",
        UserWarning,
        stacklevel=stacklevel + 1,
    )
    return 0 if ndim in (0, 1, 3) else 1
