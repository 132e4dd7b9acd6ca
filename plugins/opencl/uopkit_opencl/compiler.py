"""OpenCL C source -> program binary, with clBuildProgram through pyopencl."""

from __future__ import annotations

import warnings
from typing import Any

import pyopencl as cl

from uopkit.device import CompileError, Compiler
from uopkit.hostlib import call_with_timeout
from uopkit_opencl.renderer import CLCaps


def build_options(caps: CLCaps) -> tuple[str, ...]:
    """clBuildProgram options: no fast-math flags (kernels keep IEEE semantics, like the CPU backend's)."""
    # division and sqrt may otherwise be off by a few ulp on OpenCL; ask for correct rounding where offered
    return ("-cl-fp32-correctly-rounded-divide-sqrt",) if caps.correctly_rounded_sqrt else ()


class CLCompiler(Compiler):
    """Builds a kernel for one device and returns ``program.binaries[0]``.

    The cache key names everything that changes the binary besides the source: this plugin's version, the
    platform (name and version), the device, its driver version and the build options.
    """

    def __init__(self, context: Any, device: Any, caps: CLCaps, options: tuple[str, ...] | None = None) -> None:
        from uopkit_opencl import __version__

        self.context = context
        self.device = device
        self.options = build_options(caps) if options is None else tuple(options)
        platform = device.platform
        key = [
            f"opencl {__version__}",
            f"{platform.name.strip()} {platform.version.strip()}",
            device.name.strip(),
            f"driver {device.driver_version.strip()}",
            " ".join(self.options),
        ]
        super().__init__(cache_key="\n".join(key))

    def compile(self, src: str) -> bytes:
        program = cl.Program(self.context, src)

        def build() -> None:
            with warnings.catch_warnings():
                # pyopencl warns with the build log when it is not empty; the log is only wanted on failure
                warnings.simplefilter("ignore", cl.CompilerWarning)
                # cache_dir=False: the core caches binaries, pyopencl's own cache would be a second copy
                program.build(options=list(self.options), devices=[self.device], cache_dir=False)

        try:
            # the driver's compiler runs in this process: under UOPKIT_COMPILE_TIMEOUT, abandoned when it hangs
            call_with_timeout(build, src, compiler=f"clBuildProgram ({self.device.name.strip()})")
        except cl.RuntimeError as e:
            raise CompileError(
                self._build_log(program, e), src, compiler=f"clBuildProgram ({self.device.name.strip()})"
            ) from None
        binaries = program.get_info(cl.program_info.BINARIES)
        if not binaries or not binaries[0]:
            raise CompileError("the driver returned no program binary", src, compiler="clBuildProgram")
        return bytes(binaries[0])

    def _build_log(self, program: Any, error: Exception) -> str:
        try:
            log = program.get_build_info(self.device, cl.program_build_info.LOG)
        except Exception:
            # some drivers only report the log inside the exception
            log = ""
        return (log or str(error)).strip() or "build failed without a log"
