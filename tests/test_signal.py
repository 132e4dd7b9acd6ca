"""signal/windows.py: torch.signal.windows' functions, values compared with PyTorch's."""

from __future__ import annotations

import numpy as np
import pytest

import uopkit
from uopkit import Tensor, dtypes

torch = pytest.importorskip("torch")

OPTIONS = {"gaussian": {"std": 3.5}, "kaiser": {"beta": 8.6}, "exponential": {"tau": 3.0}, "general_hamming": {}}


@pytest.mark.parametrize("name", uopkit.signal.windows.__all__)
def test_windows_as_torchs(name: str) -> None:
    # a spectrogram's analysis window by torch.signal.windows' name: every length (the empty and one-point ones
    # too), symmetric and periodic, float32 and float64
    kw = OPTIONS.get(name, {"a": [0.4, 0.3, 0.2, 0.1]} if name == "general_cosine" else {})
    for M in (0, 1, 2, 7, 400):
        for sym in (True, False):
            for dt, tdt in ((dtypes.float32, torch.float32), (dtypes.float64, torch.float64)):
                want = getattr(torch.signal.windows, name)(M, sym=sym, dtype=tdt, **kw)
                got = getattr(uopkit.signal.windows, name)(M, sym=sym, dtype=dt, **kw)
                assert got.dtype == dt and got.shape == tuple(want.shape), (name, M, sym, dt)
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=2e-6, err_msg=f"{name} {M} {sym}")


def test_window_options_and_errors_as_torchs() -> None:
    windows = uopkit.signal.windows
    # a periodic exponential window centred where asked; the default dtype and requires_grad
    want = torch.signal.windows.exponential(10, center=3.0, tau=2.0, sym=False)
    np.testing.assert_allclose(windows.exponential(10, center=3.0, tau=2.0, sym=False).numpy(), want.numpy(), atol=1e-7)
    assert windows.hann(4).dtype == dtypes.float32
    assert windows.hann(4, requires_grad=True).requires_grad
    # torch's ValueErrors
    for bad in (
        lambda w: w.gaussian(4, std=0.0),
        lambda w: w.hann(-1),
        lambda w: w.exponential(4, center=1.0),
        lambda w: w.kaiser(4, beta=-1.0),
        lambda w: w.general_cosine(4, a=[]),
        lambda w: w.blackman(4, dtype=dtypes.float16 if w is windows else torch.float16),
    ):
        with pytest.raises(ValueError):
            bad(torch.signal.windows)
        with pytest.raises(ValueError):
            bad(windows)
    # reached from a bare import, as torch.signal.windows
    assert isinstance(uopkit.signal.windows.cosine(3), Tensor)
