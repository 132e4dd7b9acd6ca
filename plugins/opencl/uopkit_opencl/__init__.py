"""uopkit OpenCL backend: kernels rendered as OpenCL C, built and run through pyopencl.

Only hook implementations live here; pyopencl is imported and the driver touched only by `availability` and
`open` (see runtime.open_opencl).
"""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING

from uopkit.plugin import BackendInfo, hookimpl

if TYPE_CHECKING:
    from uopkit.device import Compiled
    from uopkit.renderer import Renderer

# one source for the version: pyproject.toml, read back from the installed distribution's metadata
__version__ = importlib.metadata.version("uopkit-opencl")

# the UOp spec version this backend's renderer was written against (a literal on purpose)
TARGET_SPEC_VERSION = 3

DESCRIPTION = "OpenCL C built and run through pyopencl"


def _open(device: str) -> Compiled:
    from uopkit_opencl.runtime import open_opencl

    return open_opencl(device)


def _availability() -> str | None:
    try:
        from uopkit_opencl.runtime import NoOpenCLDevice, available_devices
    except ImportError as e:
        return f"pyopencl is not importable ({e}); pip install pyopencl (or pyopencl[pocl] for a CPU OpenCL)"
    try:
        available_devices()
    except NoOpenCLDevice as e:
        return str(e)
    return None


class _DeviceListDescription(str):
    """The backend's description; formatted (``f"{d}"``, ``str(d)``) it also lists the OpenCL devices.

    `uopkit devices -v` formats descriptions after every backend's availability ran, so listing the platforms then
    costs nothing extra, while the hook itself (which must not touch the driver) only builds this string.
    """

    def _full(self) -> str:
        from uopkit_opencl.runtime import describe_devices

        try:
            return f"{str.__str__(self)}: {describe_devices()}"
        except ImportError:
            return str.__str__(self)

    def __str__(self) -> str:
        return self._full()

    def __format__(self, spec: str) -> str:
        return format(self._full(), spec)


def _renderer() -> Renderer:
    # a generic OpenCL 1.2 device's limits (`CLCaps` defaults): EMULATE=OPENCL needs no OpenCL driver
    from uopkit_opencl.renderer import OpenCLRenderer

    return OpenCLRenderer()


@hookimpl
def uopkit_backends() -> list[BackendInfo]:
    return [
        BackendInfo(
            name="OPENCL",
            version=__version__,
            spec_version=TARGET_SPEC_VERSION,
            # below CPU (10): on a machine without a GPU OpenCL is usually PoCL, the same cores less directly
            priority=5,
            open=_open,
            availability=_availability,
            description=_DeviceListDescription(DESCRIPTION),
            renderer=_renderer,
        )
    ]
