"""uopkit CPU backend: kernels rendered as C, compiled with clang or gcc, run through ctypes.

Only hook implementations live here; the device is built lazily by `open` (see runtime.open_cpu).
"""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING

from uopkit.plugin import BackendInfo, hookimpl

if TYPE_CHECKING:
    from uopkit.device import Compiled

# one source for the version: pyproject.toml, read back from the installed distribution's metadata
__version__ = importlib.metadata.version("uopkit-cpu")

# the UOp spec version this backend's renderer was written against (a literal on purpose)
TARGET_SPEC_VERSION = 3


def _open(device: str) -> Compiled:
    from uopkit_cpu.runtime import open_cpu

    return open_cpu(device)


def _availability() -> str | None:
    from uopkit_cpu.compiler import compiler_problem

    return compiler_problem()


@hookimpl
def uopkit_backends() -> list[BackendInfo]:
    return [
        BackendInfo(
            name="CPU",
            version=__version__,
            spec_version=TARGET_SPEC_VERSION,
            priority=10,
            open=_open,
            availability=_availability,
            description="C source compiled with clang/gcc, run through ctypes",
        )
    ]
