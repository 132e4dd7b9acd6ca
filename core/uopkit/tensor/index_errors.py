"""The errors of a bad index: PyTorch raises IndexError for some ops and RuntimeError for others, so uopkit's are
both, and code written for PyTorch catches them by the type it expects."""

from __future__ import annotations

from typing import Any


class IndexRangeError(IndexError, RuntimeError):
    """An index outside its axis: PyTorch raises IndexError for some ops (indexing, `index_put_`, `take`, `put_`,
    `index_copy_`) and RuntimeError for others (`gather`, `scatter*`, `index_select`, `index_add_`, `narrow`): caught
    as either."""


class IndexTensorError(TypeError, IndexError, RuntimeError):
    """An index tensor an op can't take (not of an integer dtype, or not 0-d/1-D where the op wants a vector):
    PyTorch raises RuntimeError or IndexError there, depending on the op; caught as either, or as a TypeError."""


def described(x: Any) -> str:
    """An argument as an error message names it: a tensor by its dtype and shape, anything else by its type."""
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    return f"a {dtype} tensor of shape {shape}" if shape is not None and dtype is not None else type(x).__name__
