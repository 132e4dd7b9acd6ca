"""torch's fractional max pooling (Graham's pseudo-random pools): `fractional_max_pool2d/3d` (re-exported by
uopkit.nn.functional, with their `_with_indices` forms) and the layers `FractionalMaxPool2d/3d` (re-exported by
uopkit.nn); compared with torch in tests/test_nn_fractional_pool.py.

Along each pooled axis of length L, output i of O takes the max over the `k` inputs from start(i), where with
u the plane's sample for that axis and alpha = (L - k) / (O - 1), computed in the input's dtype as torch does,
start(i) = trunc((i + u) alpha) - trunc(u alpha) for i < O - 1 and start(O - 1) = L - k. So the same samples
(`_random_samples`, shaped (N, C, 2) or (N, C, 3), torch's W-then-H and T-H-W orders) give torch's windows, values,
indices and gradients bit for bit; without them the samples are drawn from uopkit's generator (`Tensor.manual_seed`),
so they match torch's distribution, not its draws.

>>> from uopkit import Tensor
>>> x = Tensor.arange(16.0).reshape(1, 1, 4, 4)
>>> fractional_max_pool2d(x, 2, output_size=2, _random_samples=Tensor([[[0.5, 0.5]]])).tolist()
[[[[5.0, 7.0], [13.0, 15.0]]]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from uopkit.dtype import DTypeError, dtypes, to_numpy_dtype
from uopkit.helpers import prod
from uopkit.nn.arguments import _SPATIAL
from uopkit.nn.module import Module
from uopkit.tensor import ArgumentError, ShapeError, Tensor

__all__ = ["FractionalMaxPool2d", "FractionalMaxPool3d"]

FUNCTIONS = [
    "fractional_max_pool2d",
    "fractional_max_pool3d",
    "fractional_max_pool2d_with_indices",
    "fractional_max_pool3d_with_indices",
]

# which of a plane's samples each pooled axis reads (torch's kernels: W from the first of two, T, H, W from three)
_SAMPLE_OF_AXIS = {2: (1, 0), 3: (0, 1, 2)}


def _sizes(value: Any, n: int, name: str, fn: str) -> tuple[int, ...]:
    # an int, or n ints, as torch's kernel_size / output_size
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),) * n
    if isinstance(value, Sequence) and len(value) == n and all(isinstance(v, (int, np.integer)) for v in value):
        return tuple(int(v) for v in value)
    raise ArgumentError(f"{fn}: {name} must be an int or a sequence of {n} ints, got {value!r}")


def _ratios(value: Any, n: int, fn: str) -> tuple[float, ...]:
    # a number, or n numbers, as torch's output_ratio
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return (float(value),) * n
    if isinstance(value, Sequence) and len(value) == n and all(isinstance(v, (int, float)) for v in value):
        return tuple(float(v) for v in value)
    raise ArgumentError(f"{fn}: output_ratio must be a number or a sequence of {n} numbers, got {value!r}")


def _in_dtype(values: np.ndarray, dtype: Any) -> np.ndarray:
    # torch computes the interval sequence in the input's dtype, rounding after every operation: numpy's float16,
    # float32 and float64 do; bfloat16 is float32 rounded to its 8 bits of mantissa (to nearest even)
    if dtype == dtypes.bfloat16:
        bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return rounded.astype(np.uint32).view(np.float32)
    return np.asarray(values, dtype=to_numpy_dtype(dtype))


def _interval_starts(samples: np.ndarray, length: int, out: int, k: int, dtype: Any) -> np.ndarray:
    """Each plane's window starts along one axis, (planes, out), from its samples (planes,) as torch's kernels."""
    starts = np.full((samples.shape[0], out), length - k, dtype=np.int64)
    if out > 1:
        alpha = _in_dtype(_in_dtype(length - k, dtype) / _in_dtype(out - 1, dtype), dtype)
        u = _in_dtype(samples, dtype)[:, None]
        i = _in_dtype(np.arange(out - 1), dtype)[None, :]
        first = _in_dtype(_in_dtype(i + u, dtype) * alpha, dtype)
        starts[:, :-1] = first.astype(np.int64) - _in_dtype(u * alpha, dtype).astype(np.int64)
    return starts


def _sample_array(samples: Tensor, x: Tensor, planes: tuple[int, int], n: int, fn: str) -> np.ndarray:
    # torch's checks of `_random_samples`: 3-d (batch, C, n) in the input's dtype, at least the input's batch
    if not isinstance(samples, Tensor):
        raise TypeError(f"{fn}: _random_samples must be a uopkit Tensor, got {type(samples).__name__}")
    batch, channels = planes
    if samples.dtype != x.dtype:
        raise DTypeError(f"{fn}: _random_samples ({samples.dtype}) must have the input's dtype ({x.dtype})")
    if samples.ndim != 3 or samples.shape[2] != n or samples.shape[1] != channels or samples.shape[0] < batch:
        raise ShapeError(
            f"{fn}: _random_samples must be shaped (N, C, {n}) = (>= {batch}, {channels}, {n}) for the input "
            f"{x.shape}, got {samples.shape}"
        )
    host = samples[:batch].cast(dtypes.float32 if samples.dtype == dtypes.bfloat16 else samples.dtype).numpy()
    return host.reshape(batch * channels, n)


def _window_positions(starts: list[np.ndarray], spatial: tuple[int, ...], kernel: tuple[int, ...]) -> np.ndarray:
    """The flat in-plane position of every tap of every window, (planes, windows, taps) in torch's scan order."""
    planes = starts[0].shape[0]
    strides = [prod(spatial[a + 1 :]) for a in range(len(spatial))]
    pos = np.zeros((planes,) + tuple(s.shape[1] for s in starts) + tuple(kernel), dtype=np.int64)
    n = len(spatial)
    for a in range(n):
        # start of the window along axis a, plus the tap's offset along it, times the axis' stride
        start_shape = [planes] + [1] * (2 * n)
        start_shape[1 + a] = starts[a].shape[1]
        tap_shape = [1] * (1 + 2 * n)
        tap_shape[1 + n + a] = kernel[a]
        along = starts[a].reshape(start_shape) + np.arange(kernel[a]).reshape(tap_shape)
        pos = pos + along * strides[a]
    return pos.reshape(planes, -1, prod(kernel))


def _fractional_max_pool(
    n: int, fn: str, x: Tensor, kernel_size: Any, output_size: Any, output_ratio: Any, samples: Tensor | None
) -> tuple[Tensor, Tensor]:
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}: input must be a uopkit Tensor, got {type(x).__name__}")
    if x.ndim not in (n + 1, n + 2):
        raise ShapeError(f"{fn}: expected input (N, C, {_SPATIAL[n]}) or (C, {_SPATIAL[n]}), got shape {x.shape}")
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"{fn}: the input must be a float tensor, got {x.dtype} (cast it, e.g. x.float())")
    kernel = _sizes(kernel_size, n, "kernel_size", fn)
    if any(k < 1 for k in kernel):
        raise ArgumentError(f"{fn}: every kernel_size must be >= 1, got {kernel}")
    spatial = x.shape[-n:]
    if output_size is not None:
        out = _sizes(output_size, n, "output_size", fn)
    elif output_ratio is not None:
        out = tuple(int(size * r) for size, r in zip(spatial, _ratios(output_ratio, n, fn), strict=True))
    else:
        raise ArgumentError(f"{fn}: give output_size or output_ratio (neither was given)")
    if any(o < 0 for o in out):
        raise ArgumentError(f"{fn}: every output size must be >= 0, got {out}")
    if 0 in x.shape[-n - 1 :]:
        raise ShapeError(f"{fn}: the input {x.shape} is empty along a channel or pooled axis (as torch, refused)")
    for o, k, size in zip(out, kernel, spatial, strict=True):
        if o + k - 1 > size:
            raise ShapeError(
                f"{fn}: output size {out} with kernel_size {kernel} needs each output + kernel - 1 <= the input's "
                f"{spatial} (the windows would run past the input); use a smaller output or kernel"
            )
    batched = x.ndim == n + 2
    batch, channels = (x.shape[0] if batched else 1), x.shape[-n - 1]
    if samples is None:
        samples = Tensor.rand(batch, channels, n, dtype=x.dtype, device=x.device)
    drawn = _sample_array(samples, x, (batch, channels), n, fn)
    result_shape = x.shape[: x.ndim - n] + out
    if batch == 0 or 0 in out:
        empty = Tensor.zeros(*result_shape, dtype=x.dtype, device=x.device)
        return empty, empty.cast(dtypes.positions(prod(spatial)))
    if not np.isfinite(drawn).all():
        # (torch's kernel reads outside the input then: casting NaN to an int is undefined)
        raise ArgumentError(f"{fn}: _random_samples must lie in [0, 1), got NaN or inf")
    order = _SAMPLE_OF_AXIS[n]
    starts = [_interval_starts(drawn[:, order[a]], spatial[a], out[a], kernel[a], x.dtype) for a in range(n)]
    positions = _window_positions(starts, spatial, kernel)
    planes, windows, taps = positions.shape
    plane = prod(spatial)
    index_dtype = dtypes.positions(plane)
    flat = x.reshape(planes, plane)
    where = Tensor(positions.astype(np.int64), device=x.device).cast(index_dtype)
    # which tap each window picks, as torch's scan: the last NaN if there is one, else the first maximum (a window of
    # -inf its first tap)
    values = flat.detach().gather(1, where.reshape(planes, windows * taps)).reshape(planes, windows, taps)
    tap = Tensor.arange(taps, device=x.device).reshape(1, 1, taps)
    top = values.max(axis=-1, keepdim=True)
    score = values.isnan().where(2 * taps + tap, (values == top).where(taps - tap, 0))
    best = score.max(axis=-1, keepdim=True)
    chosen = (best >= 2 * taps).where(best - 2 * taps, taps - best)
    indices = where.gather(2, chosen.cast(index_dtype)).reshape(planes, windows)
    # the value at each index, so the gradient goes to that one input, as torch's backward
    pooled = flat.gather(1, indices)
    return pooled.reshape(result_shape), indices.reshape(result_shape)


def fractional_max_pool2d(
    input: Tensor,  # noqa: A002
    kernel_size: int | Sequence[int],
    output_size: int | Sequence[int] | None = None,
    output_ratio: float | Sequence[float] | None = None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
) -> Any:
    """torch.nn.functional.fractional_max_pool2d over (N, C, H, W) or (C, H, W): `output_size`, or
    `output_ratio` (the output int(L * ratio)), a number or one per axis; `_random_samples` (N, C, 2) in [0, 1), the
    W sample first, as torch's (drawn from uopkit's generator when None). The indices are int32 (torch's int64).

    >>> fractional_max_pool2d(Tensor.ones(1, 4, 4), 2, output_ratio=0.5).shape
    (1, 2, 2)
    """
    pooled, indices = _fractional_max_pool(
        2, "fractional_max_pool2d", input, kernel_size, output_size, output_ratio, _random_samples
    )
    return (pooled, indices) if return_indices else pooled


def fractional_max_pool3d(
    input: Tensor,  # noqa: A002
    kernel_size: int | Sequence[int],
    output_size: int | Sequence[int] | None = None,
    output_ratio: float | Sequence[float] | None = None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
) -> Any:
    """torch.nn.functional.fractional_max_pool3d over (N, C, T, H, W) or (C, T, H, W), as fractional_max_pool2d;
    `_random_samples` (N, C, 3) in [0, 1), in T, H, W order.

    >>> fractional_max_pool3d(Tensor.ones(1, 4, 4, 4), 2, output_size=2).shape
    (1, 2, 2, 2)
    """
    pooled, indices = _fractional_max_pool(
        3, "fractional_max_pool3d", input, kernel_size, output_size, output_ratio, _random_samples
    )
    return (pooled, indices) if return_indices else pooled


def fractional_max_pool2d_with_indices(
    input: Tensor,  # noqa: A002
    kernel_size: int | Sequence[int],
    output_size: int | Sequence[int] | None = None,
    output_ratio: float | Sequence[float] | None = None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """torch.nn.functional.fractional_max_pool2d_with_indices: (values, indices) whatever return_indices says."""
    return _fractional_max_pool(
        2, "fractional_max_pool2d_with_indices", input, kernel_size, output_size, output_ratio, _random_samples
    )


def fractional_max_pool3d_with_indices(
    input: Tensor,  # noqa: A002
    kernel_size: int | Sequence[int],
    output_size: int | Sequence[int] | None = None,
    output_ratio: float | Sequence[float] | None = None,
    return_indices: bool = False,
    _random_samples: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """torch.nn.functional.fractional_max_pool3d_with_indices: (values, indices) whatever return_indices says."""
    return _fractional_max_pool(
        3, "fractional_max_pool3d_with_indices", input, kernel_size, output_size, output_ratio, _random_samples
    )


class FractionalMaxPool2d(Module):
    """torch.nn.FractionalMaxPool2d: fractional_max_pool2d with its arguments fixed; exactly one of `output_size` and
    `output_ratio` (each ratio in (0, 1)); `_random_samples`, when given, is a buffer and serves every call (else
    each call draws its own).

    >>> FractionalMaxPool2d(2, output_ratio=0.5)(Tensor.ones(1, 1, 6, 6)).shape
    (1, 1, 3, 3)
    """

    spatial_dims = 2

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        output_size: int | Sequence[int] | None = None,
        output_ratio: float | Sequence[float] | None = None,
        return_indices: bool = False,
        _random_samples: Tensor | None = None,
    ) -> None:
        n, name = self.spatial_dims, type(self).__name__
        self.kernel_size = _sizes(kernel_size, n, "kernel_size", name)
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name}: give output_size or output_ratio (neither was given)")
        if output_size is not None and output_ratio is not None:
            raise ValueError(f"{name}: give only one of output_size and output_ratio, got both")
        self.output_size = None if output_size is None else _sizes(output_size, n, "output_size", name)
        self.output_ratio = None if output_ratio is None else _ratios(output_ratio, n, name)
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"{name}: every output_ratio must be between 0 and 1 (exclusive), got {output_ratio}")
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)

    def __call__(self, x: Tensor) -> Any:
        pooled, indices = _fractional_max_pool(
            self.spatial_dims,
            type(self).__name__,
            x,
            self.kernel_size,
            self.output_size,
            self.output_ratio,
            self._random_samples,
        )
        return (pooled, indices) if self.return_indices else pooled


class FractionalMaxPool3d(FractionalMaxPool2d):
    """torch.nn.FractionalMaxPool3d: fractional_max_pool3d with its arguments fixed, as FractionalMaxPool2d.

    >>> FractionalMaxPool3d(2, output_size=(2, 3, 2))(Tensor.ones(1, 4, 5, 4)).shape
    (1, 2, 3, 2)
    """

    spatial_dims = 3
