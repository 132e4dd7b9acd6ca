"""torch.backends.cudnn: uopkit uses no cuDNN (its convolutions are kernels it compiles itself, the same whatever these
say), so `is_available()` is False and `version()` None; `benchmark`, `deterministic`, `enabled` and `allow_tf32` are
flags kept as set (torch's defaults: False, False, True, True) that change no kernel. uopkit's kernels are deterministic
without a switch (`Tensor.use_deterministic_algorithms` says how)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

# (module attributes, as torch's: `torch.backends.cudnn.benchmark = True`)
benchmark = False
deterministic = False
enabled = True
allow_tf32 = True
benchmark_limit = 10


def is_available() -> bool:
    """torch.backends.cudnn.is_available: False, uopkit calls no cuDNN."""
    return False


def version() -> int | None:
    """torch.backends.cudnn.version: None, uopkit calls no cuDNN."""
    return None


@contextmanager
def flags(
    enabled: bool = False, benchmark: bool = False, deterministic: bool = False, allow_tf32: bool = True
) -> Iterator[None]:
    """torch.backends.cudnn.flags: the four flags set as given inside the block, as they were after it."""
    names = ("enabled", "benchmark", "deterministic", "allow_tf32")
    saved = {name: globals()[name] for name in names}
    globals().update(zip(names, (enabled, benchmark, deterministic, allow_tf32), strict=True))
    try:
        yield
    finally:
        globals().update(saved)
