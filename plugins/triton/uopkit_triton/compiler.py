"""Triton kernel source -> the bytes the runtime loads, checked by importing it and compiling it with triton.compile.

What the core caches is the source itself: Triton compiles a kernel for the GPU it is launched on (and keeps its own
cache of those binaries), and the interpreter runs the source. The compile step is the check that the kernel is
valid: the module is written under the cache folder and imported (Python syntax, the module's contract), then
compiled by ``triton.compile`` for each target asked for: the GPU's own when there is one, and every target named in
``UOPKIT_TRITON_TARGETS`` (e.g. ``sm_90,sm_80``), which needs ptxas (the triton wheel ships one) but no GPU.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from uopkit import diskcache
from uopkit.device import CompileError, Compiler

# the module attributes a rendered kernel module must define (see renderer.TritonRenderer)
MODULE_CONTRACT = ("KERNEL", "SIGNATURE", "NUM_WARPS")
# module globals bound to triton's standard library (the renderer's HEADER)
STDLIB_FUNCTIONS = ("SUM_COMBINE", "MAX_COMBINE")


def parse_targets(text: str) -> tuple[tuple[str, int, int], ...]:
    """``"sm_90,sm_80"`` (or ``"cuda:90"``) -> ``(("cuda", 90, 32), ("cuda", 80, 32))``; raises ValueError."""
    targets = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        digits = item.removeprefix("sm_").removeprefix("cuda:")
        if not digits.isdigit():
            raise ValueError(f"UOPKIT_TRITON_TARGETS: {item!r} is not a CUDA target like sm_90 or cuda:80")
        targets.append(("cuda", int(digits), 32))
    return tuple(targets)


_private_folder: list[Path] = []


def _module_folder() -> Path:
    # the checked cache folder (owned by the user, not group/other writable); with the cache off or refused, a private
    # folder of this process: kernel modules are imported, so they never come from a folder others can write
    root = diskcache.cache_root()
    if root is not None:
        return root / "triton"
    if not _private_folder:
        _private_folder.append(Path(tempfile.mkdtemp(prefix="uopkit-triton-")))
    return _private_folder[0]


def module_path(src: str) -> Path:
    """Where a kernel's source lives: under the cache folder, named by its hash (Triton reads it back from there
    for error messages and for its own cache key)."""
    digest = hashlib.sha256(src.encode()).hexdigest()[:24]
    folder = _module_folder()
    path = folder / f"uk_{digest}.py"
    if not path.is_file() or path.read_text() != src:
        folder.mkdir(parents=True, exist_ok=True)
        # write then rename, so a concurrent reader never imports half a file
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(src)
        os.replace(tmp, path)
    return path


def load_module(src: str) -> ModuleType:
    """Import a kernel module from its source (a fresh module object each call). Errors propagate."""
    path = module_path(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # inspect.getsource (Triton reads the kernel's source) finds the file through sys.modules
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    missing = [name for name in MODULE_CONTRACT if not hasattr(module, name)]
    if missing or not hasattr(module, str(module.KERNEL)):
        raise ValueError(f"not a uopkit Triton kernel module: it lacks {missing or [module.KERNEL]}")
    return module


def rebind_kernels(module: ModuleType, interpreted: bool) -> Any:
    """Make every Triton function of `module` a JITFunction (for triton.compile and GPU launches) or an
    InterpretedFunction (for the CPU interpreter), whatever TRITON_INTERPRET said when it was imported; the kernel
    calls its helpers through the module's globals, so they change with it. Returns the kernel."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    wanted = InterpretedFunction if interpreted else JITFunction
    for name, value in list(vars(module).items()):
        if not isinstance(value, JITFunction | InterpretedFunction) or isinstance(value, wanted):
            continue
        # the interpreter knows the standard library's combine functions by identity (and never calls them)
        if interpreted and name in STDLIB_FUNCTIONS:
            continue
        setattr(module, name, wanted(value.fn))
    return getattr(module, module.KERNEL)


def compile_for_target(module: ModuleType, target: tuple[str, int, int]) -> Any:
    """triton.compile the module's kernel for one (backend, arch, warp size) target; returns Triton's result."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = rebind_kernels(module, interpreted=False)
    source = ASTSource(fn=kernel, signature=dict(module.SIGNATURE), constexprs={})
    options = {"num_warps": int(module.NUM_WARPS), "enable_fp_fusion": False}
    return triton.compile(source, target=GPUTarget(*target), options=options)


class TritonCompiler(Compiler):
    """Checks a kernel module (import + triton.compile for `targets`) and returns its source as bytes.

    The cache key names this plugin's version, Triton's version and the targets checked.
    """

    def __init__(self, targets: tuple[tuple[str, int, int], ...] = ()) -> None:
        import triton

        from uopkit_triton import __version__

        self.targets = targets
        names = ",".join(f"{b}:{arch}" for b, arch, _ in targets) or "interpreter"
        super().__init__(cache_key=f"triton-plugin {__version__}\ntriton {triton.__version__}\ntargets {names}")

    def compile(self, src: str) -> bytes:
        try:
            module = load_module(src)
        except Exception as e:
            message = "".join(traceback.format_exception_only(type(e), e))
            raise CompileError(message, src, compiler="python import of the Triton kernel module") from None
        for target in self.targets:
            try:
                compile_for_target(module, target)
            except Exception as e:
                message = "".join(traceback.format_exception_only(type(e), e))
                raise CompileError(message, src, compiler=f"triton.compile for {target[0]} sm_{target[1]}") from None
        return src.encode()
