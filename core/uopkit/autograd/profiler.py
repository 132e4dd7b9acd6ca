"""torch.autograd.profiler's `record_function`, so code that labels its phases for torch's profiler runs here.

torch's `record_function(name)` marks a range that its profiler, when one is running, reports under `name`; with no
profiler running it does nothing. uopkit has no such profiler (`DEBUG=2` prints each kernel's time, and
`GlobalCounters` counts what ran), so the range marks nothing: it is taken as a context manager and as a decorator,
as torch's (StyleGAN2-ADA's training loop wraps each phase in one), and changes nothing that runs inside it.

>>> from uopkit import Tensor
>>> with record_function("Gmain_forward"):
...     y = Tensor([1.0, 2.0]) * 2
>>> y.tolist()
[2.0, 4.0]
"""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["record_function"]


class record_function(contextlib.ContextDecorator):
    """torch.autograd.profiler.record_function(name, args=None): a labelled range, as a context manager or a
    decorator; it records nothing here (see the module docstring)."""

    def __init__(self, name: str, args: str | None = None) -> None:
        if not isinstance(name, str):
            raise TypeError(f"record_function: the range's name must be a str, got {type(name).__name__}")
        self.name, self.args = name, args

    def __enter__(self) -> record_function:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None
