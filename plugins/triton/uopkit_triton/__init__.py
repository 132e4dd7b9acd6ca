"""uopkit Triton backend: kernels rendered as ``@triton.jit`` Python, launched through Triton on a CUDA GPU and run
by Triton's CPU interpreter (on PyTorch CPU tensors) where there is none.

Only hook implementations live here; triton and torch are imported by `availability` (found, not imported) and
`open` (see runtime.open_triton).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from uopkit.plugin import BackendInfo, hookimpl

if TYPE_CHECKING:
    from uopkit.device import Compiled
    from uopkit.renderer import Renderer

__version__ = "0.1.0"

# the UOp spec version this backend's renderer was written against (a literal on purpose)
TARGET_SPEC_VERSION = 3

DESCRIPTION = "Triton kernels: launched by Triton on a CUDA GPU, else run by Triton's CPU interpreter"


def _open(device: str) -> Compiled:
    from uopkit_triton.runtime import open_triton

    return open_triton(device)


def _availability() -> str | None:
    import importlib.util

    for module, hint in (("triton", "pip install triton"), ("torch", "pip install torch")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed ({hint})"
    return None


def _renderer() -> Renderer:
    from uopkit_triton.renderer import TritonRenderer

    return TritonRenderer()


@hookimpl
def uopkit_backends() -> list[BackendInfo]:
    return [
        BackendInfo(
            name="TRITON",
            version=__version__,
            spec_version=TARGET_SPEC_VERSION,
            # below CPU and OpenCL: without a GPU it is an interpreter, never the best default
            priority=1,
            open=_open,
            availability=_availability,
            description=DESCRIPTION,
            renderer=_renderer,
        )
    ]
