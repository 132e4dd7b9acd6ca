"""C source -> shared object, with clang (preferred) or gcc."""

from __future__ import annotations

import functools
import os
import pathlib
import platform
import shlex
import shutil
import subprocess

from uopkit.device import CompileError, Compiler
from uopkit.hostlib import check_library, compile_tempdir, elf_problem, noexec_problem, run_compiler

# no -ffast-math: kernels keep IEEE results (nan, inf, signed zero, no reassociation). -fno-math-errno lets sqrt
# compile to one instruction; -fno-trapping-math (we never read FP exception flags) lets gcc vectorize loops with
# truncation and float<->int conversions; -fopenmp-simd reads the sum and max loops' `omp simd` pragmas (threads are the
# backend's own pool, `pool.py`, so no OpenMP runtime is linked); -pipe: no temporary files between the compiler's
# stages. -mprefer-vector-width=512: gcc's tuning for AVX-512 server cores vectorizes loops 256 bits wide unless told
# (our register tiles are 512-bit vectors already; an exp loop, softmax's middle pass, runs ~1.2x faster 512 wide
# on one Ice Lake core); without AVX-512 the flag changes nothing. -ffp-contract=off: gcc fuses no a*b+c into one
# multiply-add of its own accord, so a value computed in two kernels rounds the same in both (contracted in a large
# -O3 kernel and not in a small -O1 one, `iou == iou.max(1)` found no maximum in a row); the renderer writes the
# multiply-adds it wants (an accumulator's acc + a*b, MULACC) as explicit fmas.
CFLAGS: tuple[str, ...] = (
    "-shared",
    "-fPIC",
    "-O3",
    "-march=native",
    "-mprefer-vector-width=512",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fopenmp-simd",
    "-pipe",
)
LIBS: tuple[str, ...] = ("-lm",)
# gcc only. -fsimd-cost-model=cheap (clang rejects it): gcc 12 vectorizes an `omp simd` loop at any cost by default,
# and on AVX2 a reduce unrolled 8x over strided loads (an UNROLL of a matmul's K) then took 119 s to compile, 0.09 s
# with this flag; the kernels of the test suite and the main job compile to the same assembly with it.
# -nostdlib -fno-use-linker-plugin: the link is a third of a small kernel's ~50 ms gcc run, and most of it is the C
# runtime's start files and the LTO plugin, which a kernel library never uses (its libc calls, memset or
# __stack_chk_fail, bind to the process's libc when it is loaded); cuts a compile by ~20%. libgcc stays (-lgcc,
# static), for the helpers gcc may call: half-float conversions without F16C, 128-bit division.
GCC_FLAGS: tuple[str, ...] = ("-fsimd-cost-model=cheap", "-nostdlib", "-fno-use-linker-plugin")
GCC_LIBS: tuple[str, ...] = ("-lgcc",)


def find_cc() -> list[str] | None:
    """The C compiler command: $CC if set (it may carry arguments), else clang, else gcc, else cc."""
    cc = os.environ.get("CC")
    if cc:
        parts = shlex.split(cc)
        return parts if parts and shutil.which(parts[0]) else None
    for name in ("clang", "gcc", "cc"):
        path = shutil.which(name)
        if path is not None:
            return [path]
    return None


def compiler_problem() -> str | None:
    """None when a C compiler is found and compiled kernels can be loaded, else why not (the backend's
    availability)."""
    if find_cc() is not None:
        return noexec_problem()
    if os.environ.get("CC"):
        return f"CC={os.environ['CC']!r} is not an executable"
    return "no C compiler found (install clang or gcc, or set CC)"


@functools.cache
def _compiler_version(cc: tuple[str, ...]) -> str:
    out = subprocess.run([*cc, "--version"], capture_output=True, text=True, check=False)
    lines = out.stdout.splitlines()
    return lines[0] if lines else "unknown"


@functools.cache
def host_cpu_model() -> str:
    """The CPU model, part of the cache key because -march=native binaries don't run on older CPUs."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class ClangCompiler(Compiler):
    """Compiles a C kernel to a shared object and returns the .so bytes."""

    def __init__(self, cc: list[str] | None = None, flags: tuple[str, ...] | None = None) -> None:
        """`flags` replace the kernels' flags (CFLAGS, and GCC_FLAGS and GCC_LIBS when the compiler is gcc)."""
        found = cc if cc is not None else find_cc()
        if found is None:
            raise RuntimeError(compiler_problem())
        self.cc = list(found)
        self.flags, self.libs = (CFLAGS, LIBS) if flags is None else (tuple(flags), LIBS)
        if flags is None and "clang" not in _compiler_version(tuple(self.cc)).lower():
            self.flags, self.libs = CFLAGS + GCC_FLAGS, LIBS + GCC_LIBS
        from uopkit_cpu import __version__

        key = [f"cpu {__version__}", shlex.join(self.cc), _compiler_version(tuple(self.cc))]
        key += [" ".join(self.flags + self.libs), host_cpu_model()]
        super().__init__(cache_key="\n".join(key))

    def compile_batch(self, srcs: list[str]) -> list[bytes]:
        """Several kernels as one C file into one shared object, which serves each of them: a gcc run costs ~30 ms
        of startup, assembler and linker before any kernel, more than most kernels' own compile time. Kernels
        whose preambles clash (or one that doesn't compile) make the batch fail: then each is compiled alone, so
        an error names the one kernel at fault."""
        if len(srcs) < 2:
            return [self.compile(src) for src in srcs]
        try:
            lib = self.compile("\n".join(srcs))
        except CompileError:
            return [self.compile(src) for src in srcs]
        return [lib] * len(srcs)

    def compile(self, src: str) -> bytes:
        with compile_tempdir() as tmp:
            src_path = pathlib.Path(tmp) / "kernel.c"
            out_path = pathlib.Path(tmp) / "kernel.so"
            src_path.write_text(src)
            cmd = [*self.cc, *self.flags, "-o", str(out_path), str(src_path), *self.libs]
            result = run_compiler(cmd, src, compiler=shlex.join(self.cc))
            if result.returncode != 0 or not out_path.is_file():
                # the temp path in messages is noise; show the file as kernel.c
                message = (result.stderr or result.stdout).replace(str(src_path), "kernel.c")
                raise CompileError(message, src, compiler=shlex.join(self.cc))
            return out_path.read_bytes()

    def check_cached(self, lib: bytes) -> None:
        # the structure only (no load, a cache hit is on the hot path): a truncated library would crash the loader
        problem = elf_problem(lib)
        if problem is not None:
            raise CompileError(problem, "", compiler=shlex.join(self.cc))

    def check(self, lib: bytes) -> None:
        # loaded once here (structure first, so a truncated file can't crash the loader) before the core caches it
        problem = check_library(lib)
        if problem is not None:
            raise CompileError(problem, "", compiler=shlex.join(self.cc))
