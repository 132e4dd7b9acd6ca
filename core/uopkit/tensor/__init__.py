"""The Tensor front end (see `uopkit.tensor.tensor`); the operations live in one module per concern."""

from uopkit.dtype import ValueOverflowError
from uopkit.engine.realize import buffers
from uopkit.schedule import live_tensors as _all_tensors
from uopkit.tensor.division import ZeroDivisorError
from uopkit.tensor.generator import Generator
from uopkit.tensor.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from uopkit.tensor.support import (
    ArgumentError,
    DTypeError,
    EmptyReduceError,
    IndexRangeError,
    IndexTensorError,
    LinAlgError,
    ShapeError,
    UnsupportedDTypeError,
    _contiguous_ids,
)
from uopkit.tensor.tensor import Tensor

__all__ = [
    "Tensor",
    "Generator",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "ShapeError",
    "ArgumentError",
    "DTypeError",
    "UnsupportedDTypeError",
    "EmptyReduceError",
    "IndexRangeError",
    "IndexTensorError",
    "LinAlgError",
    "ZeroDivisorError",
    "ValueOverflowError",
    "buffers",
    "_all_tensors",
    "_contiguous_ids",
]
