"""The Tensor front end (see `uopkit.tensor.tensor`); the operations live in one module per concern."""

from uopkit.engine.realize import buffers
from uopkit.schedule import live_tensors as _all_tensors
from uopkit.tensor.support import ArgumentError, DTypeError, EmptyReduceError, ShapeError, _contiguous_ids
from uopkit.tensor.tensor import Tensor

__all__ = [
    "Tensor",
    "ShapeError",
    "ArgumentError",
    "DTypeError",
    "EmptyReduceError",
    "buffers",
    "_all_tensors",
    "_contiguous_ids",
]
