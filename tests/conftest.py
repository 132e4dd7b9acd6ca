import os

# check the UOp spec in every test run. uopkit's pytest plugin (an entry point) has imported uopkit before this file, so
# the flag it read from the environment is set here too; the environment carries it to the tests' subprocesses
os.environ.setdefault("SPEC", "1")
from uopkit.helpers import SPEC  # noqa: E402

SPEC.value = int(os.environ["SPEC"])


import pytest  # noqa: E402


@pytest.fixture
def avx512_cpu(monkeypatch):
    """The CPU renderer with AVX-512's vectors and registers (32 of 16 floats) whatever the host's: the tests of the
    heuristic's choices that were tuned there (an AVX2 host renders 8-float vectors, 16 registers)."""
    from dataclasses import replace

    from uopkit import Device

    renderer = Device["CPU"].renderer
    monkeypatch.setattr(renderer, "caps", replace(renderer.caps, max_vector_width=16, vector_registers=32))
    return renderer


@pytest.fixture
def gc_of_this_test():
    """For tests that call gc.collect() to see their own objects go: what existed before the test is frozen
    (gc.freeze), so a collect scans what the test made, not the session's heap (by the end of the suite over a million
    objects, mostly the schedule and kernel caches: ~2 s a collect). Frozen objects are never collected, so garbage
    left by earlier tests stays put during the test, as it would between two collects."""
    import gc

    gc.freeze()
    yield
    gc.unfreeze()
