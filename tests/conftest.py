import os

# check the UOp spec in every test run; set before uopkit (and its flags) is imported
os.environ.setdefault("SPEC", "1")


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
