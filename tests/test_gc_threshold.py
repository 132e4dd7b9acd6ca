"""engine/gc_threshold.py: uopkit paces Python's collector where the program left the default thresholds."""

from __future__ import annotations

import subprocess
import sys


def _thresholds(setup: str, env: dict[str, str]) -> str:
    code = f"import gc; {setup}; import uopkit.engine.realize; print(gc.get_threshold())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout


def test_default_thresholds_are_raised_and_a_programs_own_are_kept() -> None:
    assert _thresholds("pass", {}).strip() == "(50000, 20, 10)"
    assert _thresholds("gc.set_threshold(1000, 5, 5)", {}).strip() == "(1000, 5, 5)"
    assert _thresholds("pass", {"UOPKIT_GC_THRESHOLD": "0"}).strip() == "(700, 10, 10)"


def test_cycles_are_still_collected() -> None:
    code = (
        "import gc, weakref, uopkit.engine.realize\n"
        "class Node: pass\n"
        "a, b = Node(), Node(); a.other, b.other = b, a; ref = weakref.ref(a); del a, b\n"
        "gc.collect(); print(ref() is None)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={}, check=True)
    assert out.stdout.strip() == "True"
