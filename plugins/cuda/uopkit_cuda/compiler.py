"""CUDA C source -> CUBIN for one GPU architecture, with NVRTC in-process (the ``nvidia-cuda-nvrtc`` wheel, through
``cuda.bindings.nvrtc``). No CUDA toolkit and no GPU are needed: the headers cuda_fp16.h and cuda_bf16.h come from
the ``nvidia-cuda-runtime`` wheel (or a toolkit's include folder), and the arch from the device or CUDA_ARCH.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import pathlib
from typing import Any

from uopkit.device import CompileError, Compiler
from uopkit_cuda.renderer import parse_arch

# what a kernel includes; a folder holding both is a usable include path
NEEDED_HEADERS = ("cuda_fp16.h", "cuda_bf16.h")


class NVRTCUnavailable(RuntimeError):
    """NVRTC or the CUDA headers can't be found; the message says what to install."""


def _wheel_include_dirs() -> list[pathlib.Path]:
    # the nvidia-* wheels share the `nvidia` namespace package: CUDA 13 puts headers in nvidia/cu13/include,
    # CUDA 12 in nvidia/cuda_runtime/include
    spec = importlib.util.find_spec("nvidia")
    roots = [pathlib.Path(p) for p in (spec.submodule_search_locations or [])] if spec is not None else []
    found = []
    for root in roots:
        found += sorted(root.glob("cu*/include")) + sorted(root.glob("cuda_runtime/include"))
    return found


@functools.cache
def include_dirs() -> tuple[str, ...]:
    """Folders holding cuda_fp16.h and cuda_bf16.h: CUDA_INCLUDE_PATH, the pip wheels, then CUDA_PATH / a toolkit."""
    candidates = [pathlib.Path(p) for p in os.environ.get("CUDA_INCLUDE_PATH", "").split(os.pathsep) if p]
    candidates += _wheel_include_dirs()
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(var):
            candidates.append(pathlib.Path(os.environ[var]) / "include")
    candidates.append(pathlib.Path("/usr/local/cuda/include"))
    for folder in candidates:
        if all((folder / h).is_file() for h in NEEDED_HEADERS):
            # cuda_fp16.h may include headers of its own (crt/...): the folder of the headers found goes first
            return (str(folder),)
    searched = ", ".join(str(c) for c in candidates) or "nothing"
    raise NVRTCUnavailable(
        f"CUDA headers {' and '.join(NEEDED_HEADERS)} not found (searched {searched}); "
        "pip install nvidia-cuda-runtime, or set CUDA_INCLUDE_PATH to a CUDA toolkit's include folder"
    )


def _nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise NVRTCUnavailable(f"cuda.bindings is not importable ({e}); pip install cuda-bindings") from None
    return nvrtc


def _check(result: Any, what: str) -> Any:
    """cuda.bindings returns (error, values...): the values when the error is NVRTC_SUCCESS, else raise."""
    nvrtc = _nvrtc()
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise NVRTCUnavailable(f"{what} failed: {text.decode(errors='replace') if isinstance(text, bytes) else text}")
    return rest[0] if len(rest) == 1 else tuple(rest)


@functools.cache
def nvrtc_version() -> str:
    """NVRTC's version, e.g. "13.5"; raises NVRTCUnavailable when the library can't be loaded."""
    nvrtc = _nvrtc()
    try:
        major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    except NVRTCUnavailable:
        raise
    except Exception as e:
        # cuda.bindings loads libnvrtc on first use: a missing library surfaces here
        raise NVRTCUnavailable(f"NVRTC can't be loaded ({e}); pip install nvidia-cuda-nvrtc") from None
    return f"{major}.{minor}"


@functools.cache
def supported_archs() -> tuple[int, ...]:
    """The compute capabilities this NVRTC compiles for (e.g. 75, 80, ..., 120)."""
    return tuple(int(a) for a in _check(_nvrtc().nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


def nvrtc_problem() -> str | None:
    """None when NVRTC and the headers are usable, else why not."""
    try:
        nvrtc_version()
        include_dirs()
    except NVRTCUnavailable as e:
        return str(e)
    return None


def check_arch(arch: str) -> str:
    """`arch` normalised to ``sm_XY`` when NVRTC knows it; a ValueError naming the known ones otherwise."""
    sm = parse_arch(arch)
    known = supported_archs()
    if sm not in known:
        names = ", ".join(f"sm_{a}" for a in known)
        raise ValueError(f"NVRTC {nvrtc_version()} can't compile for {arch!r}; it knows {names}")
    return f"sm_{sm}"


def nvrtc_options(arch: str) -> list[str]:
    """NVRTC flags: the target's real arch (so the result is CUBIN), the headers, IEEE float (no fast math)."""
    return [f"--gpu-architecture={arch}", *(f"--include-path={d}" for d in include_dirs()), "--std=c++17"]


class NVRTCCompiler(Compiler):
    """Compiles with NVRTC to a CUBIN for `arch` (``sm_90``); the cache key holds the arch and NVRTC's version.

    NVRTC's warnings are errors too (``warnings_as_errors``): generated code should compile cleanly, and a warning
    (an unused variable aside) usually means a wrong conversion.
    """

    def __init__(self, arch: str, warnings_as_errors: bool = False) -> None:
        from uopkit_cuda import __version__

        self.arch = check_arch(arch)
        self.options = nvrtc_options(self.arch)
        self.warnings_as_errors = warnings_as_errors
        key = [
            f"cuda {__version__}",
            f"nvrtc {nvrtc_version()}",
            self.arch,
            " ".join(self.options[:1] + self.options[2:]),
        ]
        super().__init__(cache_key="\n".join(key))

    def compile_with_log(self, src: str) -> tuple[bytes, str]:
        """(CUBIN, NVRTC's log); raises CompileError with the numbered source and the log when NVRTC fails."""
        nvrtc = _nvrtc()
        prog = _check(nvrtc.nvrtcCreateProgram(src.encode(), b"kernel.cu", 0, [], []), "nvrtcCreateProgram")
        try:
            options = [o.encode() for o in self.options]
            (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
            log = self._log(prog)
            if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
                raise CompileError(log or str(err), src, compiler=f"NVRTC {nvrtc_version()} ({self.arch})")
            if self.warnings_as_errors and log:
                raise CompileError(log, src, compiler=f"NVRTC {nvrtc_version()} ({self.arch}), warnings")
            size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
            cubin = b" " * size
            _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
            return cubin, log
        finally:
            nvrtc.nvrtcDestroyProgram(prog)

    def compile(self, src: str) -> bytes:
        return self.compile_with_log(src)[0]

    def ptx(self, src: str) -> str:
        """The PTX NVRTC makes of `src` for the virtual arch of this compiler's target (``compute_90`` for sm_90): to
        read which instructions a kernel gets (``ld.global.v4.f32``: one 16-byte load), no GPU needed."""
        nvrtc = _nvrtc()
        prog = _check(nvrtc.nvrtcCreateProgram(src.encode(), b"kernel.cu", 0, [], []), "nvrtcCreateProgram")
        try:
            virtual = self.arch.replace("sm_", "compute_")
            options = [o.encode() for o in [f"--gpu-architecture={virtual}", *self.options[1:]]]
            (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
            if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
                raise CompileError(self._log(prog) or str(err), src, compiler=f"NVRTC {nvrtc_version()} ({virtual})")
            size = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            buf = b" " * size
            _check(nvrtc.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
            return buf.rstrip(b"\x00").decode()
        finally:
            nvrtc.nvrtcDestroyProgram(prog)

    @staticmethod
    def _log(prog: Any) -> str:
        nvrtc = _nvrtc()
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = b" " * size
        _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        return buf.rstrip(b"\x00").decode(errors="replace").strip()
