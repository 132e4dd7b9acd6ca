"""C for the host CPU: the core's C-style renderer with C99 types and libm."""

from __future__ import annotations

from typing import ClassVar

from uopkit.renderer.cstyle import CStyleRenderer


class ClangRenderer(CStyleRenderer):
    device: ClassVar[str] = "CPU"
    buffer_suffix: ClassVar[str] = " restrict"
