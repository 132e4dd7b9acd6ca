"""C for the host CPU: the core's C-style renderer with C99 types and libm."""

from __future__ import annotations

import pathlib
import platform
from typing import ClassVar

from uopkit.dtype import dtypes
from uopkit.helpers import cpu_threads
from uopkit.renderer import RendererCaps
from uopkit.renderer.cstyle import CStyleRenderer, RenderContext
from uopkit.uop.ops import GroupOp, Ops, UOp


def simd_registers(width: int, cpuinfo: str | None = None) -> int:
    """How many vectors of `width` floats this CPU's SIMD registers hold: 32 zmm on AVX-512, 16 ymm on AVX, 16 xmm
    on older x86, 32 NEON on arm64 (0: unknown)."""
    if cpuinfo is None:
        try:
            cpuinfo = pathlib.Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith(("flags", "Features")):
            flags = set(line.split(":", 1)[1].split())
            break
    if "avx512f" in flags:
        total = 32 * 64
    elif "avx" in flags:
        total = 16 * 32
    elif "sse2" in flags:
        total = 16 * 16
    elif "asimd" in flags or platform.machine() in ("aarch64", "arm64"):
        total = 32 * 16
    else:
        return 0
    return max(1, total // (4 * width))


def libmvec_available(machine: str | None = None, libc: tuple[str, str] | None = None) -> bool:
    """Whether glibc's vector math library is here: libmvec (x86-64 glibc since 2.22) has sin and pow for 4, 8 and 16
    lanes, within 4 ulp (measured for floats: sin 2, pow 1), and libm's link script pulls it in when a kernel calls
    one."""
    machine = machine if machine is not None else platform.machine()
    lib, version = libc if libc is not None else platform.libc_ver()
    if machine not in ("x86_64", "AMD64") or lib != "glibc":
        return False
    try:
        major, minor = (int(v) for v in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (2, 22)


# the <math.h> functions libmvec has vector variants of (of those kernels call)
LIBMVEC_FUNCTIONS = ("sin", "pow")


def libm_declarations(vector_math: bool) -> tuple[str, ...]:
    """What kernels use of <math.h>, declared: parsing the header costs ~10-20 ms of every compiler run (these are
    the compilers' builtins, inlined where the CPU has an instruction). With `vector_math`, sin and pow are declared
    to have vector variants (OpenMP's declare simd, read under -fopenmp-simd): gcc vectorizes loops that call them,
    through libmvec's, where libm's scalar calls left the loop scalar (1M floats: sin ~20x, pow ~4x faster on one
    AVX-512 core)."""
    lines = ['#define NAN __builtin_nanf("")', "#define INFINITY __builtin_inff()"]
    for t, s in (("float", "f"), ("double", "")):
        for name in ("sqrt", "sin", "trunc", "pow", "exp2", "log2"):
            if name in LIBMVEC_FUNCTIONS and vector_math:
                lines.append("#pragma omp declare simd notinbranch")
            lines.append(f"{t} {name}{s}({t}{', ' + t if name == 'pow' else ''});")
    return tuple(lines)


# kernels that execute fewer operations than this are compiled at -O1 (see `ClangRenderer.render_kernel`)
O1_MAX_OPS = 20_000


def executed_ops(uops: list[UOp]) -> int:
    """About how many operations a linear program executes: each op (a vector op counting one per lane) times the
    trip counts of the loops around it; a loop with a symbolic bound counts its largest."""
    # (the ops looked up once: on Python 3.11 every `Ops.X` goes through EnumType.__getattr__'s slow hook)
    loop, end, not_run = Ops.RANGE, Ops.END, GroupOp.Meta | {Ops.CONST, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR}
    trips = [1]
    total = 0
    for u in uops:
        if u.op is loop:
            trips.append(trips[-1] * max(int(u.src[0].vmax), 1))
        elif u.op is end:
            trips.pop()
        elif u.op not in not_run:
            total += trips[-1] * u.dtype.count
    return total


class ClangRenderer(CStyleRenderer):
    device: ClassVar[str] = "CPU"
    buffer_suffix: ClassVar[str] = " restrict"
    caps = RendererCaps(
        has_threads=True,
        # AVX-512 holds 16 floats; gcc turns independent lanes into vector instructions (two AVX2 registers each)
        max_vector_width=16,
        vector_registers=simd_registers(16),
        # GCC vector extensions: arithmetic operators work on whole vectors, comparisons give masks (-1/0 lanes)
        # that WHERE selects lanes by
        vector_ops=frozenset(
            {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE}
        ),
        # a matmul's row-major right operand is read in panels two vectors wide: stored that way, each is one stream
        pack_panel=32,
        # libm's exp2f/log2f are scalar calls gcc can't vectorize; the core's polynomial versions vectorize
        transcendental_ops=frozenset({Ops.SIN, Ops.SQRT}),
        # sum and max loops get OpenMP simd pragmas (below): gcc vectorizes them, lanes and all
        simd_reduce_ops=frozenset({Ops.ADD, Ops.MAX}),
    )
    simd_sum_loop: ClassVar[str] = "#pragma omp simd reduction(+:{vars})"
    # max loops: OpenMP's max reduction on the plain compare, NaNs tracked by an int flag per accumulator
    simd_max_loop: ClassVar[str] = "#pragma omp simd reduction(max:{vars}) reduction(|:{flags})"

    libm: ClassVar[tuple[str, ...]] = libm_declarations(vector_math=libmvec_available())

    def preamble(self, uops: list[UOp]) -> list[str]:
        return [*self.libm, *self.vector_typedefs(uops)]

    # a parallel loop is run by the backend's thread pool (`uopkit_cpu.pool`), a chunk of its iterations per call:
    # the kernel gets two more parameters, which chunk and of how many
    def render_loop(self, ctx: RenderContext, x: UOp, name: str, parallel: bool) -> str:
        if not parallel or not _chunkable(ctx.uops, x):
            return super().render_loop(ctx, x, name, parallel)
        dt, n = self.render_dtype(x.dtype), ctx.ref(x.src[0])
        first, end = (f"({dt})(({n})*(long long)({c})/chunks)" for c in ("chunk", "chunk+1"))
        return f"for ({dt} {name} = {first}, {name}_end = {end}; {name} < {name}_end; {name}++) {{"

    def render_kernel(self, name: str, body: list[str], params: list[str], uops: list[UOp] | None = None) -> str:
        options = []
        # a kernel doing little work (an optimizer update of a small weight, a loss over a batch) runs in a few
        # microseconds, mostly the call, whatever gcc does with it; -O1 compiles it in a fraction of -O3's time (the
        # main job's kernels under this bound: 2-8 us per call at -O3, at most ~4 us more at -O1; ~0.15 s less gcc)
        if uops is not None and executed_ops(uops) < O1_MAX_OPS:
            options.append("O1")
        # a register tile (many accumulator lanes) is already laid out for SLP vectorization; gcc's loop vectorizer
        # on top of it takes seconds to compile and gains nothing
        # (also any very long kernel: many unrolled lanes, where the loop vectorizer mostly costs compile time)
        register = Ops.DEFINE_REG
        if uops is not None and (len(uops) > 1500 or any(u.op is register and u.dtype.size > 1 for u in uops)):
            options.append("no-tree-loop-vectorize")
        # conditions combined with & or | (expm1's, log's special cases): gcc 12's partial redundancy elimination turns
        # them into selects between masks of two widths, which its vectorizer can't do, and the whole loop stays
        # scalar (tanh, expm1, elu, mish: 13-20x slower); without it they vectorize
        and_or = (Ops.AND, Ops.OR)
        if uops is not None and any(u.op in and_or and u.dtype.scalar == dtypes.bool for u in uops):
            options.append("no-tree-pre")
        quoted = ", ".join(f'"{o}"' for o in options)
        attrs = f"__attribute__((optimize({quoted}))) " if options else ""
        loop = _parallel_loop(uops) if uops is not None else None
        if uops is None or loop is None or not _chunkable(uops, loop):
            return attrs + super().render_kernel(name, body, params, uops)
        # the kernel runs one chunk of its parallel loop per call; the pool calls `<name>_chunk` with the buffers and
        # symbolic values in arrays, `<name>_chunks` times
        bound = loop.src[0]
        chunks = cpu_threads() if bound.op is not Ops.CONST else max(1, min(bound.arg, cpu_threads()))
        inner = [*params, "const int chunk", "const int chunks"]
        args = [
            f"vals[{sum(q.startswith(self.arg_int_prefix) for q in params[:i])}]"
            if p.startswith(self.arg_int_prefix)
            else f"({p.rsplit(' ', 1)[0].replace(' restrict', '')})bufs[{i}]"
            for i, p in enumerate(params)
        ]
        return "\n".join(
            [
                f"static {attrs}void {name}_body({', '.join(inner)}) {{",
                *body,
                "}",
                f"void {name}_chunk(void **bufs, const int *vals, int chunk, int chunks) {{",
                f"  {name}_body({', '.join([*args, 'chunk', 'chunks'])});",
                "}",
                f"const int {name}_chunks = {chunks};",
            ]
        )


def _parallel_loop(uops: list[UOp]) -> UOp | None:
    return next((u for u in uops if u.op is Ops.RANGE and u.arg[1] == "thread"), None)


def _chunkable(uops: list[UOp], loop: UOp) -> bool:
    """Whether the program's parallel loop `loop` can run as chunks, each call doing the rest of the program again:
    nothing outside the loop stores (the code around it only computes values the loop reads)."""
    start = uops.index(loop)
    end = next(i for i, u in enumerate(uops) if u.op is Ops.END and u.src[1] is loop)
    return not any(u.op is Ops.STORE for u in uops[:start] + uops[end + 1 :])
