"""Gradient recording on and off, as torch's `no_grad`, `enable_grad`, `set_grad_enabled` and `inference_mode`: each
is a context manager and a decorator. While recording is off, every value computed is cut from the gradient (its node
is wrapped in a DETACH, views excepted, so they stay views): `backward()` sends nothing through it, as torch's.

The switch is tinygrad's `Tensor.no_grad` class flag, which these set and restore.

>>> from uopkit import Tensor
>>> w = Tensor([1.0, 2.0], requires_grad=True)
>>> with no_grad():
...     target = (w * 3).sum()
>>> _ = ((w * w).sum() - target).backward(); w.grad.tolist()
[2.0, 4.0]
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from uopkit.tensor.tensor import Tensor

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled"]

F = TypeVar("F", bound=Callable[..., Any])


class _GradSwitch:
    """Sets gradient recording to `enabled` (None: leaves it as it is) for a `with` block or each call of a decorated
    function, then puts back what was there before."""

    enabled: bool | None = None

    def __enter__(self) -> None:
        self._before = Tensor.no_grad
        if self.enabled is not None:
            Tensor.no_grad = not self.enabled

    def __exit__(self, *exc: object) -> None:
        Tensor.no_grad = self._before

    def __call__(self, fn: F) -> F:
        enabled = self.enabled

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            # a switch of its own per call (the function may call itself)
            switch = _GradSwitch()
            switch.enabled = enabled
            with switch:
                return fn(*args, **kwargs)

        return run  # type: ignore[return-value]


class _BareDecorator(_GradSwitch):
    # `@no_grad` without the call works too, as torch's: given a function, the class gives it decorated
    def __new__(cls, fn: Callable[..., Any] | None = None) -> Any:
        switch = super().__new__(cls)
        return switch if fn is None else switch(fn)

    def __init__(self, fn: Callable[..., Any] | None = None) -> None:
        pass


class no_grad(_BareDecorator):
    """Compute without recording gradients: `with no_grad():`, `@no_grad()` or `@no_grad`."""

    enabled = False


class enable_grad(_BareDecorator):
    """Record gradients inside a `no_grad` block: `with enable_grad():`, `@enable_grad()` or `@enable_grad`."""

    enabled = True


class inference_mode(_GradSwitch):
    """torch's inference_mode: here `no_grad`. `inference_mode(False)` turns recording on, as torch's (inside an
    `inference_mode()` or `no_grad()` block too), until the block or the decorated call ends."""

    def __new__(cls, mode: Any = True) -> Any:
        # (`@inference_mode` without the call: the function comes as `mode`)
        switch = super().__new__(cls)
        if callable(mode):
            switch.enabled = False
            return switch(mode)
        return switch

    def __init__(self, mode: Any = True) -> None:
        if callable(mode):
            return
        if not isinstance(mode, bool):
            raise TypeError(f"inference_mode: mode must be a bool, got {mode!r}")
        self.enabled = not mode


class set_grad_enabled(_GradSwitch):
    """Record gradients or not: at once when called (as torch's), and back to before at the end of a `with` block."""

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled: mode must be a bool, got {mode!r}")
        self.enabled = mode
        self._before = Tensor.no_grad
        Tensor.no_grad = not mode

    def __enter__(self) -> None:
        # (already switched by the call; the block ends with the mode from before it)
        pass


def is_grad_enabled() -> bool:
    """Whether gradients are recorded now."""
    return not Tensor.no_grad
