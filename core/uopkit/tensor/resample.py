"""The weights `interpolate` resamples an axis with, computed on the host from the sizes alone: PyTorch's cubic
convolution taps, its antialiasing filter and its uint8 kernels' fixed point. A table is an (output, input) matrix,
so that the tensor side is one matrix product per axis. Also the pattern of a nearest-neighbour index table (a
repeated arithmetic progression), which the tensor side takes as a strided view instead of a gather, and the
positions the linear modes read."""

from __future__ import annotations

import numpy as np

from uopkit.tensor.support import ShapeError


class UnsupportedRankError(ShapeError, NotImplementedError):
    """An input of a rank an interpolation mode doesn't take (PyTorch's interpolate raises NotImplementedError)."""


# the most fraction bits a fixed-point weight gets (PyTorch's uint8 kernels: a sum of 255 * weights stays in int32)
MAX_FIXED_POINT_BITS = 22


def triangle(d: np.ndarray) -> np.ndarray:
    """The linear interpolation kernel: 1 - |d| inside (-1, 1)."""
    return np.maximum(0.0, 1.0 - np.abs(d))


def keys_cubic(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter `a` (PyTorch's bicubic takes -0.75, its antialiasing -0.5, as
    Pillow's): zero from |d| = 2 on."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d < 1, near, np.where(d < 2, far, 0.0))


def cubic_taps(src: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """PyTorch's bicubic at the input coordinates `src`: the first of four consecutive taps (floor(src) - 1, may lie
    past the border) and the four taps' weights (Keys, a = -0.75)."""
    base = np.floor(src)
    t = src - base
    weights = [keys_cubic(d, -0.75) for d in (1 + t, t, 1 - t, 2 - t)]
    return base.astype(np.int64) - 1, weights


def clamped_cubic_table(L: int, src: np.ndarray) -> np.ndarray:
    """`cubic_taps` as an (O, L) table, the taps past a border moved onto it (their weights added there): the
    bicubic PyTorch's float kernel computes, and its uint8 kernel quantizes."""
    first, weights = cubic_taps(src)
    table = np.zeros((len(src), L))
    rows = np.arange(len(src))
    for k, w in enumerate(weights):
        np.add.at(table, (rows, np.clip(first + k, 0, L - 1)), w)
    return table


def antialias_table(L: int, O: int, scale: float, mode: str) -> np.ndarray:
    """PyTorch's antialiasing filter for resizing L inputs to O outputs (`scale` input pixels an output pixel) as an
    (O, L) table: output i centred on input coordinate scale * (i + 0.5), input j on j + 0.5; the triangle
    ("bilinear") or Keys' cubic with a = -0.5 ("bicubic") stretched by the scale when it is over 1 (downsampling:
    each output then averages all the inputs it covers, so nothing between the taps is skipped), and each row
    normalized to sum 1 (taps past the border dropped, not clamped: this differs from the plain modes' borders)."""
    stretch = max(scale, 1.0)
    centers = scale * (np.arange(O) + 0.5)
    d = (np.arange(L) + 0.5 - centers[:, None]) / stretch
    table = triangle(d) if mode == "bilinear" else keys_cubic(d, -0.5)
    total = table.sum(1, keepdims=True)
    return np.divide(table, total, out=np.zeros_like(table), where=total != 0)


def fixed_point(weights: np.ndarray) -> tuple[np.ndarray, int]:
    """`weights` as PyTorch's uint8 kernels hold them: int32 with as many fraction bits as keep the largest weight
    below 2**15 (at most MAX_FIXED_POINT_BITS), each rounded to the nearest (halves away from zero); and the bits."""
    largest = float(weights.max())
    bits = 0
    while bits < MAX_FIXED_POINT_BITS and int(0.5 + largest * (1 << (bits + 1))) < (1 << 15):
        bits += 1
    scaled = weights * (1 << bits)
    return (np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)).astype(np.int32), bits


def repeated_progression(idx: np.ndarray) -> tuple[int, int, int, int] | None:
    """(start, step, count, repeat) with idx[i] == start + step * (i // repeat) for i < count * repeat == len(idx),
    step >= 1 (or count == 1), or None."""
    n = len(idx)
    if n == 0:
        return None
    repeat = int(np.argmax(idx != idx[0])) or n
    if n % repeat:
        return None
    rows = idx.reshape(n // repeat, repeat)
    if not np.all(rows == rows[:, :1]):
        return None
    firsts = rows[:, 0]
    steps = np.diff(firsts)
    if len(steps) and (steps[0] < 1 or np.any(steps != steps[0])):
        return None
    return int(firsts[0]), int(steps[0]) if len(steps) else 1, len(firsts), repeat


def linear_source_positions(L: int, O: int, ratio: float, align_corners: bool, np_dt: type) -> np.ndarray:
    """Where each of O outputs reads an axis of L inputs in the linear modes, computed in the weights' dtype as
    PyTorch's kernels do (float32 for a float32 input: the scale rounded to float32, then one rounding of
    scale * (i + 0.5) - 0.5, its fused multiply-add). Positions in float64 put a 4000-sample signal resampled to
    2999 up to 6e-4 away from PyTorch's values: float32 rounds a position near 4000 by up to 2.4e-4 of a sample."""
    i = np.arange(O, dtype=np_dt)
    if align_corners:
        return i * (np_dt(L - 1) / np_dt(O - 1)) if O > 1 else np.zeros(O, np_dt)
    src = (np.float64(np_dt(ratio)) * (i + np_dt(0.5)).astype(np.float64) - 0.5).astype(np_dt)
    return np.maximum(src, np_dt(0))
