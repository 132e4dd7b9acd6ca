"""torch.nn's pooling and padding layers over the Tensor's pools and pads, with torch's arguments; compared with
torch in tests/test_nn_layers.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from uopkit.nn.arguments import _check_rank, _positive
from uopkit.nn.module import Module
from uopkit.nn.modules import _ntuple
from uopkit.tensor import ArgumentError, ShapeError, Tensor

__all__ = [
    "MaxPool2d",
    "MaxPool1d",
    "MaxPool3d",
    "AvgPool2d",
    "AvgPool1d",
    "AvgPool3d",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool3d",
    "MaxUnpool2d",
    "MaxUnpool1d",
    "MaxUnpool3d",
    "ConstantPad2d",
    "ConstantPad1d",
    "ConstantPad3d",
    "ZeroPad2d",
    "ZeroPad1d",
    "ZeroPad3d",
    "ReflectionPad2d",
    "ReflectionPad1d",
    "ReflectionPad3d",
    "ReplicationPad2d",
    "ReplicationPad1d",
    "ReplicationPad3d",
    "CircularPad2d",
    "CircularPad1d",
    "CircularPad3d",
]


# ---------------------------------------------------------------------------------------------------------------------
# pooling: the Tensor's pools take a kernel of any length and pool that many trailing axes


class _Pool(Module):
    spatial_dims = 2

    def _window(
        self, kernel_size: Any, stride: Any, padding: Any, dilation: Any = 1
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        # torch's arguments (ints or sequences of spatial_dims) as tuples, checked as torch checks them at the call
        layer, n = type(self).__name__, self.spatial_dims
        k = _ntuple(kernel_size, n, "kernel_size", layer)
        s = _ntuple(stride, n, "stride", layer) if stride is not None else k
        p = _ntuple(padding, n, "padding", layer)
        d = _ntuple(dilation, n, "dilation", layer)
        _positive(k, "kernel_size", layer)
        _positive(s, "stride", layer)
        _positive(d, "dilation", layer)
        _positive(p, "padding", layer, allow_zero=True)
        if any(pad > size // 2 for pad, size in zip(p, k, strict=True)):
            # (a ValueError that is a RuntimeError too: torch's, raised at the call)
            raise ArgumentError(f"{layer}: padding {p} must be at most half the kernel_size {k} (as PyTorch)")
        return k, s, p, d


class MaxPool2d(_Pool):
    """Max over windows of the last two axes of (N, C, H, W) or (C, H, W), as torch.nn.MaxPool2d (padding counts as
    -inf; return_indices also gives each max's flat index in its H*W plane, int32 where torch's are int64).

    >>> MaxPool2d(2)(Tensor.arange(16).reshape(1, 4, 4).float()).tolist()
    [[[5.0, 7.0], [13.0, 15.0]]]
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        self._args = self._window(kernel_size, stride, padding, dilation)
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.dilation, self.return_indices, self.ceil_mode = padding, dilation, return_indices, ceil_mode

    def __call__(self, x: Tensor) -> Any:
        _check_rank(x, self.spatial_dims, type(self).__name__)
        k, s, p, d = self._args
        return x.max_pool2d(k, s, p, d, self.ceil_mode, self.return_indices)


class MaxPool1d(MaxPool2d):
    """Max over windows of the last axis of (N, C, L) or (C, L), as torch.nn.MaxPool1d.

    >>> MaxPool1d(2)(Tensor([[1.0, 3.0, 2.0, 0.0]])).tolist()
    [[3.0, 2.0]]
    """

    spatial_dims = 1


class MaxPool3d(MaxPool2d):
    """Max over windows of the last three axes of (N, C, D, H, W) or (C, D, H, W), as torch.nn.MaxPool3d.

    >>> MaxPool3d(2)(Tensor.ones(1, 1, 4, 4, 4)).shape
    (1, 1, 2, 2, 2)
    """

    spatial_dims = 3


class AvgPool2d(_Pool):
    """Mean over windows of the last two axes, as torch.nn.AvgPool2d (count_include_pad: the zero padding counts in
    the divisor; divisor_override: every window's sum divided by it).

    >>> AvgPool2d(2)(Tensor.arange(16).reshape(1, 4, 4).float()).tolist()
    [[[2.5, 4.5], [10.5, 12.5]]]
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        self._args = self._window(kernel_size, stride, padding)
        if divisor_override is not None and (not isinstance(divisor_override, int) or divisor_override <= 0):
            raise ArgumentError(
                f"{type(self).__name__}: divisor_override must be a positive int, got {divisor_override!r}"
            )
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode, self.count_include_pad = padding, ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def __call__(self, x: Tensor) -> Tensor:
        _check_rank(x, self.spatial_dims, type(self).__name__)
        k, s, p, _ = self._args
        return x.avg_pool2d(k, s, p, self.ceil_mode, self.count_include_pad, self.divisor_override)


class AvgPool1d(AvgPool2d):
    """Mean over windows of the last axis of (N, C, L) or (C, L), as torch.nn.AvgPool1d (which has no
    divisor_override).

    >>> AvgPool1d(2)(Tensor([[1.0, 3.0, 2.0, 0.0]])).tolist()
    [[2.0, 1.0]]
    """

    spatial_dims = 1

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> None:
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)


class AvgPool3d(AvgPool2d):
    """Mean over windows of the last three axes of (N, C, D, H, W) or (C, D, H, W), as torch.nn.AvgPool3d.

    >>> AvgPool3d(2)(Tensor.ones(1, 1, 4, 4, 4)).shape
    (1, 1, 2, 2, 2)
    """

    spatial_dims = 3


class _AdaptivePool(Module):
    spatial_dims = 2

    def __init__(self, output_size: int | None | Sequence[int | None]) -> None:
        layer, n = type(self).__name__, self.spatial_dims
        given: tuple[Any, ...] = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,) * n
        if len(given) != n or any(s is not None and (not isinstance(s, (int, np.integer)) or s < 0) for s in given):
            raise ValueError(
                f"{layer}: output_size must be {n} sizes >= 0 (or None: keep the axis), got {output_size!r}"
            )
        self.output_size = output_size
        self._sizes: tuple[int | None, ...] = tuple(None if s is None else int(s) for s in given)

    def _out(self, x: Tensor) -> tuple[int, ...]:
        _check_rank(x, self.spatial_dims, type(self).__name__)
        spatial = x.shape[-self.spatial_dims :]
        return tuple(L if O is None else O for L, O in zip(spatial, self._sizes, strict=True))


class AdaptiveAvgPool2d(_AdaptivePool):
    """Mean over windows that split each of the last two axes into `output_size` parts (None keeps an axis), as
    torch.nn.AdaptiveAvgPool2d.

    >>> AdaptiveAvgPool2d(1)(Tensor.arange(8).reshape(2, 2, 2).float()).tolist()
    [[[1.5]], [[5.5]]]
    """

    def __call__(self, x: Tensor) -> Tensor:
        return x.adaptive_avg_pool2d(self._out(x))


class AdaptiveAvgPool1d(AdaptiveAvgPool2d):
    """Mean over windows that split the last axis of (N, C, L) or (C, L) into `output_size` parts.

    >>> AdaptiveAvgPool1d(2)(Tensor([[1.0, 2.0, 3.0]])).tolist()
    [[1.5, 2.5]]
    """

    spatial_dims = 1


class AdaptiveAvgPool3d(AdaptiveAvgPool2d):
    """Mean over windows that split each of the last three axes into `output_size` parts.

    >>> AdaptiveAvgPool3d((1, 2, None))(Tensor.ones(1, 1, 3, 4, 5)).shape
    (1, 1, 1, 2, 5)
    """

    spatial_dims = 3


class AdaptiveMaxPool2d(_AdaptivePool):
    """Max over the windows of AdaptiveAvgPool2d, as torch.nn.AdaptiveMaxPool2d; return_indices also gives each max's
    flat index in its plane (the first one on a tie; int32 where torch's are int64).

    >>> AdaptiveMaxPool2d(1, return_indices=True)(Tensor([[[1.0, 4.0], [3.0, 2.0]]]))[1].tolist()
    [[[1]]]
    """

    def __init__(self, output_size: int | None | Sequence[int | None], return_indices: bool = False) -> None:
        super().__init__(output_size)
        self.return_indices = return_indices

    def __call__(self, x: Tensor) -> Any:
        return x.adaptive_max_pool2d(self._out(x), self.return_indices)


class AdaptiveMaxPool1d(AdaptiveMaxPool2d):
    """Max over windows that split the last axis of (N, C, L) or (C, L) into `output_size` parts.

    >>> AdaptiveMaxPool1d(2)(Tensor([[1.0, 5.0, 3.0]])).tolist()
    [[5.0, 5.0]]
    """

    spatial_dims = 1


class AdaptiveMaxPool3d(AdaptiveMaxPool2d):
    """Max over windows that split each of the last three axes into `output_size` parts.

    >>> AdaptiveMaxPool3d(2)(Tensor.ones(1, 1, 3, 4, 5)).shape
    (1, 1, 2, 2, 2)
    """

    spatial_dims = 3


class MaxUnpool2d(_Pool):
    """The inverse of MaxPool2d(return_indices=True): zeros with each value put back at its index, as
    torch.nn.MaxUnpool2d; `output_size` (optionally with the leading axes) picks among the sizes that pool back.

    >>> values, indices = MaxPool2d(2, return_indices=True)(Tensor([[[1.0, 2.0], [4.0, 3.0]]]))
    >>> MaxUnpool2d(2)(values, indices).tolist()
    [[[0.0, 0.0], [4.0, 0.0]]]
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
    ) -> None:
        self._args = self._window(kernel_size, stride, padding)
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding = padding

    def __call__(self, x: Tensor, indices: Tensor, output_size: Sequence[int] | None = None) -> Tensor:
        _check_rank(x, self.spatial_dims, type(self).__name__)
        k, s, p, _ = self._args
        n = self.spatial_dims
        if output_size is not None and len(output_size) not in (n, x.ndim):
            raise ValueError(f"{type(self).__name__}: output_size must have {n} or {x.ndim} sizes, got {output_size}")
        return x.max_unpool2d(indices, k, s, p, output_size)


class MaxUnpool1d(MaxUnpool2d):
    """The inverse of MaxPool1d(return_indices=True), as torch.nn.MaxUnpool1d.

    >>> values, indices = MaxPool1d(2, return_indices=True)(Tensor([[1.0, 2.0, 4.0, 3.0]]))
    >>> MaxUnpool1d(2)(values, indices).tolist()
    [[0.0, 2.0, 4.0, 0.0]]
    """

    spatial_dims = 1


class MaxUnpool3d(MaxUnpool2d):
    """The inverse of MaxPool3d(return_indices=True), as torch.nn.MaxUnpool3d.

    >>> values, indices = MaxPool3d(2, return_indices=True)(Tensor.rand(1, 1, 2, 2, 2))
    >>> MaxUnpool3d(2)(values, indices).shape
    (1, 1, 2, 2, 2)
    """

    spatial_dims = 3


# ---------------------------------------------------------------------------------------------------------------------
# padding: torch's flat padding tuple (last axis first: left, right, top, bottom, front, back), as Tensor.pad takes it


class _Pad(Module):
    spatial_dims = 2
    mode = "constant"

    def __init__(self, padding: int | Sequence[int]) -> None:
        n = 2 * self.spatial_dims
        pads = (padding,) * n if isinstance(padding, (int, np.integer)) else tuple(padding)
        if len(pads) != n or not all(isinstance(p, (int, np.integer)) for p in pads):
            raise ValueError(f"{type(self).__name__}: padding must be an int or {n} ints, got {padding!r}")
        self.padding = tuple(int(p) for p in pads)
        self.value = 0.0

    def __call__(self, x: Tensor) -> Tensor:
        if self.mode != "constant":
            # (a constant pad takes any rank that has the padded axes, as torch's)
            _check_rank(x, self.spatial_dims, type(self).__name__)
        elif x.ndim < self.spatial_dims:
            needs = f"needs an input of {self.spatial_dims} or more dims"
            raise ShapeError(f"{type(self).__name__}: padding {self.padding} {needs}, got shape {x.shape}")
        return x.pad(self.padding, mode=self.mode, value=self.value)


class ConstantPad2d(_Pad):
    """Pad the last two axes with `value`; padding an int or (left, right, top, bottom), negative crops, as
    torch.nn.ConstantPad2d.

    >>> ConstantPad2d((1, 0, 0, 1), 9.0)(Tensor([[1.0]])).tolist()
    [[9.0, 1.0], [9.0, 9.0]]
    """

    def __init__(self, padding: int | Sequence[int], value: float) -> None:
        super().__init__(padding)
        self.value = value


class ConstantPad1d(ConstantPad2d):
    """Pad the last axis with `value`; padding an int or (left, right), as torch.nn.ConstantPad1d.

    >>> ConstantPad1d((1, 2), -1.0)(Tensor([1.0])).tolist()
    [-1.0, 1.0, -1.0, -1.0]
    """

    spatial_dims = 1


class ConstantPad3d(ConstantPad2d):
    """Pad the last three axes with `value`; padding an int or (left, right, top, bottom, front, back).

    >>> ConstantPad3d(1, 0.5)(Tensor.ones(1, 1, 1)).shape
    (3, 3, 3)
    """

    spatial_dims = 3


class ZeroPad2d(_Pad):
    """Pad the last two axes with zeros; padding an int or (left, right, top, bottom), as torch.nn.ZeroPad2d.

    >>> ZeroPad2d((1, 1, 0, 0))(Tensor([[1.0]])).tolist()
    [[0.0, 1.0, 0.0]]
    """


class ZeroPad1d(_Pad):
    """Pad the last axis with zeros; padding an int or (left, right), as torch.nn.ZeroPad1d.

    >>> ZeroPad1d((0, 2))(Tensor([1.0])).tolist()
    [1.0, 0.0, 0.0]
    """

    spatial_dims = 1


class ZeroPad3d(_Pad):
    """Pad the last three axes with zeros, as torch.nn.ZeroPad3d.

    >>> ZeroPad3d(1)(Tensor.ones(1, 1, 1, 1)).shape
    (1, 3, 3, 3)
    """

    spatial_dims = 3


class ReflectionPad2d(_Pad):
    """Pad the last two axes of (N, C, H, W) or (C, H, W) with their reflection (the edge not repeated; each padding
    smaller than its axis), as torch.nn.ReflectionPad2d.

    >>> ReflectionPad2d((1, 1, 0, 0))(Tensor([[[1.0, 2.0]]])).tolist()
    [[[2.0, 1.0, 2.0, 1.0]]]
    """

    mode = "reflect"


class ReflectionPad1d(ReflectionPad2d):
    """Pad the last axis of (N, C, L) or (C, L) with its reflection, as torch.nn.ReflectionPad1d.

    >>> ReflectionPad1d(2)(Tensor([[1.0, 2.0, 3.0]])).tolist()
    [[3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]]
    """

    spatial_dims = 1


class ReflectionPad3d(ReflectionPad2d):
    """Pad the last three axes of (N, C, D, H, W) or (C, D, H, W) with their reflection.

    >>> ReflectionPad3d(1)(Tensor.ones(1, 2, 2, 2)).shape
    (1, 4, 4, 4)
    """

    spatial_dims = 3


class ReplicationPad2d(_Pad):
    """Pad the last two axes of (N, C, H, W) or (C, H, W) with copies of their edge, as torch.nn.ReplicationPad2d.

    >>> ReplicationPad2d((2, 0, 0, 0))(Tensor([[[1.0, 2.0]]])).tolist()
    [[[1.0, 1.0, 1.0, 2.0]]]
    """

    mode = "replicate"


class ReplicationPad1d(ReplicationPad2d):
    """Pad the last axis of (N, C, L) or (C, L) with copies of its edge, as torch.nn.ReplicationPad1d.

    >>> ReplicationPad1d((0, 2))(Tensor([[1.0, 2.0]])).tolist()
    [[1.0, 2.0, 2.0, 2.0]]
    """

    spatial_dims = 1


class ReplicationPad3d(ReplicationPad2d):
    """Pad the last three axes of (N, C, D, H, W) or (C, D, H, W) with copies of their edge.

    >>> ReplicationPad3d(1)(Tensor.ones(1, 1, 1, 1)).shape
    (1, 3, 3, 3)
    """

    spatial_dims = 3


class CircularPad2d(_Pad):
    """Pad the last two axes of (N, C, H, W) or (C, H, W) by wrapping around (each padding at most its axis), as
    torch.nn.CircularPad2d.

    >>> CircularPad2d((1, 1, 0, 0))(Tensor([[[1.0, 2.0, 3.0]]])).tolist()
    [[[3.0, 1.0, 2.0, 3.0, 1.0]]]
    """

    mode = "circular"


class CircularPad1d(CircularPad2d):
    """Pad the last axis of (N, C, L) or (C, L) by wrapping around, as torch.nn.CircularPad1d.

    >>> CircularPad1d((2, 0))(Tensor([[1.0, 2.0, 3.0]])).tolist()
    [[2.0, 3.0, 1.0, 2.0, 3.0]]
    """

    spatial_dims = 1


class CircularPad3d(CircularPad2d):
    """Pad the last three axes of (N, C, D, H, W) or (C, D, H, W) by wrapping around.

    >>> CircularPad3d(1)(Tensor.ones(1, 2, 2, 2)).shape
    (1, 4, 4, 4)
    """

    spatial_dims = 3
