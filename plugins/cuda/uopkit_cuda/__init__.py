"""uopkit CUDA backend: kernels rendered as CUDA C, compiled to CUBIN by NVRTC, run through cuda-bindings (default)
or pycuda (UOPKIT_CUDA_RUNTIME=pycuda).

Only hook implementations live here; the driver is touched only by `availability` and `open` (see runtime.py).
The renderer needs no driver, so ``EMULATE=CUDA`` runs CUDA's programs (tensor cores included) on any machine.
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


def _open(device: str) -> Compiled:
    from uopkit_cuda.runtime import open_cuda

    return open_cuda(device)


def _availability() -> str | None:
    from uopkit_cuda.runtime import cuda_problem

    return cuda_problem()


def _renderer() -> Renderer:
    from uopkit_cuda.renderer import CUDARenderer

    return CUDARenderer()


@hookimpl
def uopkit_backends() -> list[BackendInfo]:
    return [
        BackendInfo(
            name="CUDA",
            version=__version__,
            spec_version=TARGET_SPEC_VERSION,
            # above CPU (10) and OpenCL (5): a GPU when there is one
            priority=20,
            open=_open,
            availability=_availability,
            description="CUDA C with tensor cores, compiled by NVRTC, run through cuda-bindings or pycuda",
            renderer=_renderer,
        )
    ]
