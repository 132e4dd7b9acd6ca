"""Python's cyclic garbage collector, paced for programs that build graphs every step.

Eager training and decoding make thousands of objects a step (graph nodes, tensors) that live through the step, so
under Python's default pace (a young collection every 700 allocations) many of them reach the oldest generation and
trigger a full collection every few steps, each walking every tracked object: uopkit's caches (kernel ASTs, schedules,
programs) are a few hundred thousand of them after a model or two. A small LSTM's eager training step spent half its
time there (full collections of 140 ms that freed nothing). Where the program left Python's default thresholds,
uopkit sets the young generation's to `YOUNG` allocations and the middle's to `MIDDLE` collections: full collections
become rarer by two orders of magnitude, and cycles are still collected (later, by up to that many allocations;
`gc.collect()` still collects everything). `UOPKIT_GC_THRESHOLD=0` leaves the collector as it was.
"""

from __future__ import annotations

import gc
import os

PYTHON_DEFAULT = (700, 10, 10)
YOUNG, MIDDLE = 50_000, 20


def enabled() -> bool:
    return os.environ.get("UOPKIT_GC_THRESHOLD", "1").strip() != "0"


def pace_collector() -> bool:
    """Set the thresholds (see the module's doc) unless the program chose its own; returns whether it did."""
    if not enabled() or gc.get_threshold() != PYTHON_DEFAULT:
        return False
    gc.set_threshold(YOUNG, MIDDLE, PYTHON_DEFAULT[2])
    return True


pace_collector()
