"""Smoke test of the digits example: a few training steps learn something and the report lines are printed."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("sklearn")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_digits.py"


def test_train_digits_few_steps(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    accuracy = module.main(["--steps", "40"])
    out, err = capsys.readouterr()
    # well above chance (10%) after 40 steps; the full run (the README command) reaches >= 95%
    assert accuracy > 0.4
    assert re.search(r"held-out accuracy: \d+\.\d\d% \(\d+/360\)", out)
    assert re.search(r"kernels compiled: \d+, compile time: \d+\.\d\d s", out)
    # the progress bar shows the loss and the throughput
    assert re.search(r"40/40 loss \d+\.\d{4} +\d+ img/s", err)
