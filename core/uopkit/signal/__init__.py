"""torch.signal's names: `uopkit.signal.windows` holds its window functions."""

from uopkit.signal import windows

__all__ = ["windows"]
