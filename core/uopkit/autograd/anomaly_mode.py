"""torch.autograd's anomaly-mode switches (torch.autograd.anomaly_mode): `detect_anomaly` turns the mode on for a
`with` block, `set_detect_anomaly(mode)` sets it at once (a plain call, as a
statement) and, used as a context manager, puts back the mode it found when the block ends.

uopkit's anomaly mode is a flag (`Tensor.set_anomaly_enabled`, read by `Tensor.is_anomaly_enabled` and
`Tensor.is_anomaly_check_nan_enabled`): its backward records no forward traces and doesn't check gradients for NaN,
so a program that turns the mode on while debugging runs as it would without it (torch's raises at the first
backward op that returns NaN).

>>> from uopkit import Tensor
>>> with detect_anomaly():
...     on = Tensor.is_anomaly_enabled()
>>> on, Tensor.is_anomaly_enabled()
(True, False)
"""

from __future__ import annotations

import warnings

from uopkit.tensor import Tensor

__all__ = ["detect_anomaly", "set_detect_anomaly"]


class _AnomalySwitch:
    """Keeps the anomaly mode found on creation and puts it back on leaving a `with` block."""

    def __init__(self) -> None:
        self._before = (Tensor.is_anomaly_enabled(), Tensor.is_anomaly_check_nan_enabled())

    def __exit__(self, *exc: object) -> None:
        Tensor.set_anomaly_enabled(*self._before)


class detect_anomaly(_AnomalySwitch):
    """torch.autograd.detect_anomaly(check_nan=True): anomaly mode on (with `check_nan`) inside the `with` block,
    the mode found before back after it. Warns once made, as torch's, that the mode is for
    debugging; here it only sets the flag (see the module docstring)."""

    def __init__(self, check_nan: bool = True) -> None:
        super().__init__()
        self.check_nan = check_nan
        warnings.warn(
            "detect_anomaly: anomaly mode is on; uopkit records no forward traces and checks no gradients for NaN "
            "in it, so it only sets the flag Tensor.is_anomaly_enabled() reads",
            UserWarning,
            stacklevel=2,
        )

    def __enter__(self) -> None:
        Tensor.set_anomaly_enabled(True, self.check_nan)


class set_detect_anomaly(_AnomalySwitch):
    """torch.autograd.set_detect_anomaly(mode, check_nan=True): sets anomaly mode to `mode` (and `check_nan`) when
    called; as a context manager, the mode found before the call is back when the block ends."""

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        super().__init__()
        self.mode, self.check_nan = mode, check_nan
        Tensor.set_anomaly_enabled(mode, check_nan)

    def __enter__(self) -> None:
        pass
