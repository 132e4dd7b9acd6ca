"""The argument forms of the movement ops (tensor/movement.py): cat's and stack's tensors and dim (complex ones
answered by ComplexTensor's), shapes to broadcast, pad_to's sizes, pixel_shuffle's factor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from uopkit.tensor.complex_tensor import ComplexTensor
from uopkit.tensor.support import ArgumentError, ShapeError, _broadcast_shape

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def _target_shape(cur: tuple[int, ...], shape: Any, args: tuple, op: str) -> tuple[int, ...]:
    # tinygrad's argument forms: pad_to(4, 5) or pad_to((4, 5)); None keeps the axis's size
    wanted = tuple(shape) if isinstance(shape, (tuple, list)) else (shape, *args)
    if len(wanted) != len(cur):
        raise ShapeError(f"{op}: {len(wanted)} sizes for a tensor of shape {cur}")
    return tuple(s if n is None else int(n) for n, s in zip(wanted, cur, strict=True))


def _check_output_size(given: int | None, size: int) -> None:
    # repeat_interleave's output_size: torch's hint of the length, which must be the one the repeats give
    if given is not None and given != size:
        raise ArgumentError(f"repeat_interleave: output_size is {given}, but the repeats give {size} elements")


def _common_shape(shapes: Sequence[int | Sequence[int]], op: str) -> tuple[int, ...]:
    # the broadcast shape of `shapes` (an int is a 1-D shape), naming them all when they don't broadcast
    given = [(n,) if isinstance(n, (int, np.integer)) else tuple(n) for n in shapes]
    for shape in given:
        if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0 for n in shape):
            raise ShapeError(f"{op}: a shape holds sizes >= 0, got {shape}")
    out: tuple[int, ...] = ()
    try:
        for shape in given:
            out = _broadcast_shape(out, tuple(int(n) for n in shape), op)
    except ShapeError:
        raise ShapeError(f"{op}: shapes {given} can't be broadcast together") from None
    return out


def _tensors_and_dim(first: Any, args: tuple, dim: int | None, op: str) -> tuple[list[Tensor], int]:
    # the tensors of a.cat(b, c), Tensor.cat(a, b) or torch's Tensor.cat([a, b], dim): a trailing int is the dim
    one = isinstance(first, Tensor) or type(first) is ComplexTensor
    tensors = [first] if one else list(first)
    rest = list(args)
    if not one and rest and not isinstance(rest[-1], (int, np.integer)):
        # torch's form: a sequence of tensors, then at most the dim
        raise TypeError(f"{op}: after a sequence of tensors comes the dim (an int), got {type(rest[-1]).__name__}")
    if rest and isinstance(rest[-1], (int, np.integer)) and not isinstance(rest[-1], bool):
        if dim is not None:
            raise TypeError(f"{op}: dim given twice ({rest[-1]} and dim={dim})")
        dim = int(rest.pop())
    tensors += list(rest[0]) if len(rest) == 1 and isinstance(rest[0], (list, tuple)) else rest
    if not tensors:
        raise ArgumentError(f"{op}: needs at least one tensor")
    for t in tensors:
        if not isinstance(t, Tensor):
            if any(type(u) is ComplexTensor for u in tensors):
                raise _ComplexParts(tensors, 0 if dim is None else dim)
            raise TypeError(f"{op}: expects tensors, got {type(t).__name__}")
    return tensors, 0 if dim is None else dim


class _ComplexParts(Exception):  # noqa: N818
    # complex tensors among cat's or stack's: they catch it and answer with ComplexTensor.concat / stacked
    def __init__(self, tensors: list[Any], dim: int) -> None:
        super().__init__("complex tensors")
        self.tensors, self.dim = tensors, dim


def _pixel_factor(r: Any, op: str, name: str) -> int:
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
        raise TypeError(f"{op}: {name} must be an int, got {type(r).__name__}")
    if r <= 0:
        raise ArgumentError(f"{op}: {name} must be positive, got {r}")
    return int(r)
