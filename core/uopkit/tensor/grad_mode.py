"""Gradient recording on and off, as torch's `no_grad`, `enable_grad`, `set_grad_enabled` and `inference_mode`: each
is a context manager and a decorator. While recording is off, every value computed is cut from the gradient (its node
is wrapped in a DETACH, views excepted, so they stay views): `backward()` sends nothing through it, as torch's.

The mode is per thread, as torch's: a switch in one thread leaves the others as they are, and a new thread starts with
gradients recorded. tinygrad's `Tensor.no_grad` flag reads and sets the calling thread's mode.

>>> from uopkit import Tensor
>>> w = Tensor([1.0, 2.0], requires_grad=True)
>>> with no_grad():
...     target = (w * 3).sum()
>>> _ = ((w * w).sum() - target).backward(); w.grad.tolist()
[2.0, 4.0]
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Generator
from typing import Any, TypeVar

__all__ = [
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
]

F = TypeVar("F", bound=Callable[..., Any])


class _Mode(threading.local):
    # (a class attribute: what a thread reads until it sets its own, so every new thread starts recording)
    off = False
    # inside `inference_mode()` (torch.is_inference_mode_enabled), apart from recording: enable_grad inside it leaves it
    inference = False


# the calling thread's mode, `off` while gradients aren't recorded: every Tensor built from a graph reads it (one
# thread-local read), and `Tensor.no_grad` is it
thread_mode = _Mode()


class _GradSwitch:
    """Sets gradient recording to `enabled` (None: leaves it as it is) for a `with` block or each call of a decorated
    function, then puts back what was there before."""

    enabled: bool | None = None
    # inference_mode's: whether the block is in inference mode (None: leaves it as it is)
    inference: bool | None = None

    def __enter__(self) -> None:
        self._before = (thread_mode.off, thread_mode.inference)
        if self.enabled is not None:
            thread_mode.off = not self.enabled
        if self.inference is not None:
            thread_mode.inference = self.inference

    def __exit__(self, *exc: object) -> None:
        thread_mode.off, thread_mode.inference = self._before

    def __call__(self, fn: F) -> F:
        enabled, inference = self.enabled, self.inference
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def run_generator(*args: Any, **kwargs: Any) -> Any:
                return (yield from _switched_resumes(fn(*args, **kwargs), enabled, inference))

            return run_generator  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with _switch(enabled, inference):
                return fn(*args, **kwargs)

        return run  # type: ignore[return-value]


def _switch(enabled: bool | None, inference: bool | None = None) -> _GradSwitch:
    # a switch of its own per call or resume (a decorated function may call itself, from several threads)
    switch = _GradSwitch()
    switch.enabled, switch.inference = enabled, inference
    return switch


def _switched_resumes(gen: Generator, enabled: bool | None, inference: bool | None) -> Generator:
    """`gen`, with the switch on while its body runs: creating a generator runs none of it, so a decorated generator
    function switches at each resume (next, send, throw, close), as torch's, and the caller's mode is back each time
    it yields."""
    resume: Callable[[Any], Any] = gen.send
    value: Any = None
    while True:
        with _switch(enabled, inference):
            try:
                out = resume(value)
            except StopIteration as stop:
                return stop.value
        try:
            value = yield out
            resume = gen.send
        except GeneratorExit:
            with _switch(enabled, inference):
                gen.close()
            raise
        except BaseException as e:
            # (thrown in by the caller: the generator's body gets it, inside the switch)
            resume, value = gen.throw, e


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
            switch.enabled, switch.inference = False, True
            return switch(mode)
        return switch

    def __init__(self, mode: Any = True) -> None:
        if callable(mode):
            return
        if not isinstance(mode, bool):
            raise TypeError(f"inference_mode: mode must be a bool, got {mode!r}")
        self.enabled, self.inference = not mode, mode


class set_grad_enabled(_GradSwitch):
    """Record gradients or not: at once when called (as torch's), and back to before at the end of a `with` block."""

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled: mode must be a bool, got {mode!r}")
        self.enabled = mode
        self._before = (thread_mode.off, thread_mode.inference)
        thread_mode.off = not mode

    def __enter__(self) -> None:
        # (already switched by the call; the block ends with the mode from before it)
        pass

    def __call__(self, fn: F) -> F:
        # as a decorator it switches for each call only: the switch its own call made is undone (as torch's)
        thread_mode.off = self._before[0]
        return super().__call__(fn)


def is_grad_enabled() -> bool:
    """Whether gradients are recorded now, in the calling thread."""
    return not thread_mode.off


def is_inference_mode_enabled() -> bool:
    """Whether the calling thread is inside `inference_mode()` (and not an `inference_mode(False)` within it), as
    torch.is_inference_mode_enabled: `no_grad()` isn't inference mode, and `enable_grad()` inside it leaves it on."""
    return thread_mode.inference
