"""C for the host CPU: the core's C-style renderer with C99 types and libm."""

from __future__ import annotations

from typing import ClassVar

from uopkit.renderer.cstyle import CStyleRenderer
from uopkit.uop.ops import Ops


class ClangRenderer(CStyleRenderer):
    device: ClassVar[str] = "CPU"
    buffer_suffix: ClassVar[str] = " restrict"
    has_threads: ClassVar[bool] = True
    parallel_for: ClassVar[str] = "#pragma omp parallel for schedule(static)"
    # AVX-512 holds 16 floats; gcc turns independent lanes into vector instructions
    max_vector_width: ClassVar[int] = 16
    # libm's exp2f/log2f are scalar calls gcc can't vectorize; the core's polynomial versions vectorize
    transcendental_ops: ClassVar[frozenset[Ops]] = frozenset({Ops.SIN, Ops.SQRT})
