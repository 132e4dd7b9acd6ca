"""C for the host CPU: the core's C-style renderer with C99 types and libm."""

from __future__ import annotations

import functools
import pathlib
import platform
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from uopkit.dtype import DType, PtrDType, dtypes
from uopkit.helpers import cpu_threads
from uopkit.renderer import RendererCaps
from uopkit.renderer.cstyle import CStyleRenderer, RenderContext, pm_cstyle
from uopkit.renderer.loops import mark_reduce_loops
from uopkit.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat


def _cpu_flags(cpuinfo: str) -> frozenset[str]:
    for line in cpuinfo.splitlines():
        if line.startswith(("flags", "Features")):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


@functools.cache
def _host_cpu_flags() -> frozenset[str]:
    # read once: every kernel's render asks (the file is tens of kilobytes on a many-core machine)
    try:
        return _cpu_flags(pathlib.Path("/proc/cpuinfo").read_text())
    except OSError:
        return frozenset()


def simd_register_bytes(cpuinfo: str | None = None) -> tuple[int, int]:
    """(how many SIMD registers, bytes each): 32 zmm on AVX-512, 16 ymm on AVX, 16 xmm on older x86, 32 NEON on
    arm64; (0, 0) unknown."""
    flags = _host_cpu_flags() if cpuinfo is None else _cpu_flags(cpuinfo)
    if "avx512f" in flags:
        return 32, 64
    if "avx" in flags:
        return 16, 32
    if "sse2" in flags:
        return 16, 16
    if "asimd" in flags or platform.machine() in ("aarch64", "arm64"):
        return 32, 16
    return 0, 0


def native_floats(cpuinfo: str | None = None) -> int:
    """The floats one SIMD register holds (16 on AVX-512, 8 on AVX2): the width of a kernel's vectors. Wider vectors
    are split by the compiler, and gcc 12 does it badly: on an AVX2 EPYC core a 256x64 @ 64x192 matmul's tile of
    16-float vectors took 7.1 ms (broadcasts and accumulators went through the stack), of 8-float ones 0.16 ms; the
    2048 matmul on 2 threads 11.6 s -> 0.34 s."""
    _, size = simd_register_bytes(cpuinfo)
    return size // 4 if size else 16


def simd_registers(width: int, cpuinfo: str | None = None) -> int:
    """How many vectors of `width` floats this CPU's SIMD registers hold (0: unknown)."""
    count, size = simd_register_bytes(cpuinfo)
    return max(1, count * size // (4 * width)) if count else 0


# the inline-asm operand constraint of a SIMD register, by architecture (see `held_vector_loads`)
SIMD_CONSTRAINT = {"x86_64": "v", "AMD64": "v", "aarch64": "w", "arm64": "w"}
# this host's (None: no register is held)
_HOST_CONSTRAINT = SIMD_CONSTRAINT.get(platform.machine())


def held_vector_loads(uops: list[UOp], vector_accumulators: int, registers: int, register_bytes: int) -> set[UOp]:
    """The vector loads of memory that a register tile's inner loop reuses (a matmul's column vectors, each
    multiplied by every row's broadcast), to be held in registers.

    gcc folds such a load into each FMA that uses it as a memory operand: a 4x4 tile of 16-float vectors then issues
    20 loads per 16 FMAs instead of 8, and on a core that loads one 512-bit vector per cycle (AMD Zen 4) the loop
    waits on loads (a 2048 matmul on one core: 53 -> 95-98 GFLOP/s held). Only where the accumulators, the held
    vectors and two more (a broadcast, a spare) fit in the registers, and only vectors one register holds."""
    if not vector_accumulators or not registers:
        return set()
    uses: dict[UOp, int] = {}
    for u in uops:
        for s in u.src:
            uses[s] = uses.get(s, 0) + 1
    loops: list[UOp | None] = [None]
    groups: dict[UOp | None, list[UOp]] = {}
    for u in uops:
        if u.op is Ops.RANGE:
            loops.append(u)
        elif u.op is Ops.END:
            loops.pop()
        elif (
            u.op is Ops.LOAD
            and u.dtype.count > 1
            and u.dtype.itemsize <= register_bytes
            and u.src[0].op is Ops.INDEX
            and u.src[0].src[0].op is Ops.DEFINE_GLOBAL
            and uses.get(u, 0) >= 2
        ):
            groups.setdefault(loops[-1], []).append(u)
    return {u for group in groups.values() if vector_accumulators + len(group) + 2 <= registers for u in group}


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


# ---------------------------------------------------------------------------------------------------------------------
# float16: gcc has no vector type for _Float16 without AVX512-FP16, so every half value and conversion stays scalar (a
# loop converting halves runs one vcvtph2ps per element, even under `omp simd`). Kernels keep halves as their bits
# (unsigned short), which gcc vectorizes: every op on halves computes in float32 and rounds back (what C's _Float16
# arithmetic does, op by op), and the conversions are the integer code below. One Ice Lake core, 16K halves in cache:
# a dot product 3.3x and an add 2.3x faster than with _Float16. Both conversions were checked against gcc's own on
# every half and every float (NaN payloads aside: a float NaN becomes the quiet half NaN).

_HALF = dtypes.float16
HALF_CONVERSIONS = (
    # half bits -> float: a normal half's exponent rebiased by an integer add, a subnormal's mantissa scaled by 2^-24
    # (exact, and not flushed under denormals-are-zero), inf and NaN keep an all-ones exponent
    "static inline float uk_h2f(unsigned short h) {",
    "  unsigned int x = h, e = x & 0x7c00u, sign = (x & 0x8000u) << 16;",
    "  unsigned int normal = ((x & 0x7fffu) << 13) + (112u << 23), special = ((x & 0x7fffu) << 13) | 0x7f800000u;",
    "  float sub = (float)(x & 0x3ffu) * 0x1p-24f;",
    "  unsigned int subbits; __builtin_memcpy(&subbits, &sub, 4);",
    "  unsigned int r = (e == 0x7c00u ? special : (e == 0u ? subbits : normal)) | sign;",
    "  float f; __builtin_memcpy(&f, &r, 4);",
    "  return f;",
    "}",
    # float -> half bits, to nearest even: a normal half drops 13 mantissa bits (a carry into the exponent is right,
    # up to inf); below 2^-14 the float add of 0.5 rounds the value to a multiple of 2^-24, the subnormal half's unit
    "static inline unsigned short uk_f2h(float f) {",
    "  unsigned int x; __builtin_memcpy(&x, &f, 4);",
    "  unsigned int sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;",
    "  unsigned int normal = (a + 0xfffu + ((a >> 13) & 1u) - (112u << 23)) >> 13;",
    "  float af; __builtin_memcpy(&af, &a, 4);",
    "  float s = af + 0.5f;",
    "  unsigned int sb; __builtin_memcpy(&sb, &s, 4);",
    "  unsigned int big = a > 0x7f800000u ? 0x7e00u : 0x7c00u, small = sb - 0x3f000000u;",
    "  unsigned int r = a >= 0x47800000u ? big : (a < 0x38800000u ? small : normal);",
    "  return (unsigned short)(r | sign);",
    "}",
    # double -> half rounds once (through float it could round twice): gcc's own conversion, scalar
    "static inline unsigned short uk_d2h(double d) {",
    "  _Float16 h = (_Float16)d; unsigned short b; __builtin_memcpy(&b, &h, 2); return b;",
    "}",
)


def half_vector_conversions(widths: list[int]) -> list[str]:
    """The conversions above on GCC vectors of `widths` lanes (the casts in `vector_casts`): the same integer code,
    lane selects by comparison masks."""
    lines = []
    for n in widths:
        h, f, u = f"half{n}", f"float{n}", f"uk_u32x{n}"
        lines += [
            f"typedef unsigned int {u} __attribute__((vector_size({4 * n})));",
            f"static inline {f} uk_h2f_{n}({h} h) {{",
            f"  {u} x = __builtin_convertvector(h, {u}), e = x & 0x7c00u, sign = (x & 0x8000u) << 16;",
            f"  {u} normal = ((x & 0x7fffu) << 13) + (112u << 23), special = ((x & 0x7fffu) << 13) | 0x7f800000u;",
            f"  {u} sub = ({u})(__builtin_convertvector(x & 0x3ffu, {f}) * 0x1p-24f);",
            f"  {u} is_special = ({u})(e == 0x7c00u), is_sub = ({u})(e == 0u);",
            f"  {u} r = (special & is_special) | (sub & is_sub) | (normal & ~(is_special | is_sub));",
            f"  return ({f})(r | sign);",
            "}",
            f"static inline {h} uk_f2h_{n}({f} f) {{",
            f"  {u} x = ({u})f, sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;",
            f"  {u} normal = (a + 0xfffu + ((a >> 13) & 1u) - (112u << 23)) >> 13;",
            f"  {u} small = ({u})(({f})a + 0.5f) - 0x3f000000u;",
            f"  {u} big = ({u})(a > 0x7f800000u), is_big = ({u})(a >= 0x47800000u), is_small = ({u})(a < 0x38800000u);",
            f"  {u} wide = (((0x7e00u & big) | (0x7c00u & ~big)) & is_big) | (small & is_small & ~is_big)",
            "    | (normal & ~(is_big | is_small));",
            f"  return __builtin_convertvector(wide | sign, {h});",
            "}",
        ]
    return lines


def _as(u: UOp, to: DType) -> UOp:
    return u.cast(to.vec(u.dtype.count) if u.dtype.count > 1 else to)


def _half_op_in_float(x: UOp) -> UOp | None:
    """An ALU op on halves as the same op on float32 (its result rounded back to half): a select keeps the bits."""
    if x.op is Ops.WHERE or not any(s.dtype.scalar == _HALF for s in x.src):
        return None
    srcs = tuple(_as(s, dtypes.float32) if s.dtype.scalar == _HALF else s for s in x.src)
    if x.dtype.scalar != _HALF:
        return UOp(x.op, x.dtype, srcs, x.arg)
    wide = dtypes.float32.vec(x.dtype.count) if x.dtype.count > 1 else dtypes.float32
    return _as(UOp(x.op, wide, srcs, x.arg), _HALF)


def half_ops_in_float(uops: list[UOp]) -> list[UOp]:
    """The linear program with every ALU op on halves computed in float32 (`_half_op_in_float`): the op and its
    rounding back in its place, each conversion of a half just after that half is computed (where every use of it
    can see it). The sum and max loops are marked again: an update of a half register is no longer a plain sum or max
    (OpenMP would reduce its bits)."""
    # (a program with no half at all, most, is told by one look at each op)
    if not _uses_half(uops) or not any(
        u.op in GroupOp.ALU and u.op is not Ops.WHERE and _uses_half(u.src) for u in uops
    ):
        return uops
    new: dict[UOp, UOp] = {}
    body: list[tuple[UOp, ...]] = []
    after: dict[UOp, list[UOp]] = {}
    for u in uops:
        src = tuple(new.get(s, s) for s in u.src)
        arg = (u.arg[0], "loop") if u.op is Ops.RANGE and u.arg[1] in ("sum", "max") else u.arg
        v = u if src == u.src and arg is u.arg else u.replace(src=src, arg=arg)
        w = _half_op_in_float(v) if v.op in GroupOp.ALU else None
        if w is None:
            new[u] = v
            body.append((v,))
            continue
        # w is CAST(half, op(...)) or op(...), the op's half sources each under a CAST to float
        op = w.src[0] if w.op is Ops.CAST and w.src[0].op is v.op else w
        for c in op.src:
            if c.op is Ops.CAST and c.src[0] in v.src:
                after.setdefault(c.src[0], []).append(c)
        new[u] = w
        body.append((op, w) if op is not w else (w,))
    out: list[UOp] = []
    placed: set[UOp] = set()

    def place(n: UOp) -> None:
        if n in placed:
            return
        placed.add(n)
        out.append(n)
        for c in after.get(n, ()):
            place(c)

    for group in body:
        for n in group:
            place(n)
    # (a half constant converted: placed first, constants are written where used)
    for n in after:
        if n not in placed:
            out[:0] = [c for c in after[n] if c not in placed]
    return mark_reduce_loops(out)


def _uses_half(uops: Sequence[UOp]) -> bool:
    return any((u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype).scalar == _HALF for u in uops)


def _is_half_vector_cast(u: UOp) -> bool:
    return u.op is Ops.CAST and u.dtype.count > 1 and _HALF in (u.dtype.scalar, u.src[0].dtype.scalar)


def _half_cast_widths(uops: list[UOp]) -> list[int]:
    return sorted({u.dtype.count for u in uops if _is_half_vector_cast(u)})


class ClangRenderer(CStyleRenderer):
    device: ClassVar[str] = "CPU"
    buffer_suffix: ClassVar[str] = " restrict"
    caps = RendererCaps(
        has_threads=True,
        max_vector_width=native_floats(),
        vector_registers=simd_registers(native_floats()),
        # GCC vector extensions: arithmetic, bitwise operators and shifts work on whole vectors, comparisons give
        # masks (-1/0 lanes as wide as those compared) that | and & combine and WHERE selects lanes by, and a cast
        # between vector types of one size is a bitcast. With them the core's exp and log (transcendental.py: clamps,
        # a polynomial, exponent bits) stay whole vectors: lane by lane, a float64 tanh after a matmul's 8x32 tile
        # was 1.6 MB of C, 40 s of gcc
        vector_ops=frozenset(
            {
                Ops.ADD,
                Ops.SUB,
                Ops.MUL,
                Ops.FDIV,
                Ops.RECIP,
                Ops.MULACC,
                Ops.NEG,
                Ops.CMPLT,
                Ops.CMPNE,
                Ops.CMPEQ,
                Ops.WHERE,
                Ops.OR,
                Ops.AND,
                Ops.XOR,
                Ops.SHL,
                Ops.SHR,
                Ops.BITCAST,
            }
        ),
        vector_mask_bytes=frozenset({4, 8}),
        # halves <-> float32 on whole vectors (`half_vector_conversions`): a half matmul's loaded panel stays a vector;
        # 4- and 8-byte ints to floats of their size (a log's exponent)
        vector_casts=frozenset(
            {
                (_HALF, dtypes.float32),
                (dtypes.float32, _HALF),
                (dtypes.int32, dtypes.float32),
                (dtypes.int64, dtypes.float64),
            }
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

    # halves are their bits in kernels (see HALF_CONVERSIONS)
    type_map: ClassVar[dict[DType, str]] = {**CStyleRenderer.type_map, _HALF: "unsigned short"}

    def render(self, name: str, uops: list[UOp]) -> str:
        return super().render(name, half_ops_in_float(uops))

    def preamble(self, uops: list[UOp]) -> list[str]:
        fmas = fma_helpers(self, uops)
        if not _uses_half(uops):
            return [*self.libm, *self.vector_typedefs(uops), *fmas]
        # (the vector conversions use the kernel's half and float vector types)
        conversions = half_vector_conversions(_half_cast_widths(uops))
        return [*self.libm, *HALF_CONVERSIONS, *self.vector_typedefs(uops), *conversions, *fmas]

    def render_const(self, x: object, dt: DType) -> str:
        if dt != _HALF:
            return super().render_const(x, dt)
        assert isinstance(x, float | int)
        return f"((unsigned short)0x{int(np.array(x, np.float16).view(np.uint16)):04x})"

    def render_alu(self, u: UOp, args: list[str]) -> str:
        # (a polynomial step of the core's transcendentals: fused, as gcc fused it before -ffp-contract=off)
        if u.op is Ops.MULACC and u.dtype.scalar in (dtypes.float32, dtypes.float64):
            return render_fma(self, u.dtype, *args)
        return super().render_alu(u, args)

    def render_bitcast(self, u: UOp, arg: str) -> str:
        if u.dtype.count == 1:
            return super().render_bitcast(u, arg)
        # a C cast between GCC vector types of one size keeps the bits
        return f"(({self.render_vector_type(u.dtype)})({arg}))"

    def render_cast(self, u: UOp, arg: str) -> str:
        src, dst = u.src[0].dtype, u.dtype
        if _is_half_vector_cast(u):
            # (one of `vector_casts`: half <-> float32)
            return f"uk_{'h2f' if src.scalar == _HALF else 'f2h'}_{dst.count}({arg})"
        if dst.count > 1:
            # (one of `vector_casts`: an int to a float, lane by lane; a C cast of a vector would keep its bits)
            return f"__builtin_convertvector({arg}, {self.render_vector_type(dst)})"
        if src == _HALF and dst != _HALF:
            value = f"uk_h2f({arg})"
            if dst == dtypes.float32:
                return value
            return super().render_cast(u.src[0].cast(dtypes.float32).cast(dst), value)
        if dst == _HALF and src != _HALF:
            if src == dtypes.float64:
                return f"uk_d2h({arg})"
            return f"uk_f2h({arg})" if src == dtypes.float32 else f"uk_f2h((float)({arg}))"
        return super().render_cast(u, arg)

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


def do_held_load(ctx: RenderContext, x: UOp) -> str | None:
    """A reused vector load of a register tile (`held_vector_loads`) kept in a register: an empty asm statement that
    takes the value in a SIMD register and may change it, so gcc can't fold the load into each use. None: the
    C rules' plain load."""
    held = ctx.memo.get("held_loads")
    if held is None:
        registers, size = simd_register_bytes()
        accumulators = sum(dt.count > 1 for slots in ctx.split.values() for dt in slots.values())
        held = set() if _HOST_CONSTRAINT is None else held_vector_loads(ctx.uops, accumulators, registers, size)
        ctx.memo["held_loads"] = held
    if x not in held:
        return None
    line = ctx.value(x, "val", ctx.r.render_load(ctx.access[x.src[0]], x.dtype))
    return f'{line}\n__asm__("" : "+{_HOST_CONSTRAINT}"({ctx.names[x]}));'


def _grouped_gated_loads(uops: list[UOp]) -> set[UOp]:
    """The scalar loads of global memory that share their gate with another load of the same buffer (`do_load`)."""
    groups: dict[tuple[UOp, UOp], list[UOp]] = {}
    for u in uops:
        if u.op is Ops.LOAD and u.dtype.count == 1 and (index := u.src[0]).op is Ops.INDEX and len(index.src) > 2:
            if index.src[0].op is Ops.DEFINE_GLOBAL:
                groups.setdefault((index.src[0], index.src[2]), []).append(u)
    return {u for loads in groups.values() if len(loads) > 1 for u in loads}


def do_load(ctx: RenderContext, x: UOp) -> str | None:
    """A load of the CPU's C: a held register tile load (`do_held_load`), or a gated load that shares its gate with
    another of the same buffer, read unconditionally from a clamped index and then selected.

    Why the second: gcc 12.2 (Debian 12's) vectorizes such loads at strided places (`g ? a[2*i] : 0` and
    `g ? a[2*i+1] : 0`) as a masked interleaved group and gets the lanes wrong: an int64 sort of 1026 values came
    back unsorted, and `unique` and `median` wrong with it. Loaded from `a[k & -g]` (always in bounds) they are plain
    loads."""
    if (held := do_held_load(ctx, x)) is not None:
        return held
    grouped = ctx.memo.get("grouped_gated_loads")
    if grouped is None:
        grouped = ctx.memo["grouped_gated_loads"] = _grouped_gated_loads(ctx.uops)
    if x not in grouped:
        return None
    acc = ctx.access[x.src[0]]
    raw = ctx.new_name("raw")
    # (the index masked by bits: gcc turns `g ? a[g ? k : 0] : 0` back into the masked load)
    ctx.emit(f"{ctx.r.render_dtype(x.dtype)} {raw} = {acc.ptr}[({acc.offset})&-(int)({acc.gate})];")
    return ctx.value(x, "val", f"({acc.gate}?{raw}:{ctx.r.render_const(0, x.dtype)})")


def render_fma(renderer: CStyleRenderer, dt: DType, a: str, b: str, c: str) -> str:
    """a*b+c rounded once (kernels are compiled with -ffp-contract=off: gcc fuses nothing itself); a vector's through
    its `fma_helpers` function."""
    if dt.count == 1:
        return f"{'__builtin_fma' if dt.scalar == dtypes.float64 else '__builtin_fmaf'}({a},{b},{c})"
    return f"uk_fma_{renderer.render_vector_type(dt)}({a},{b},{c})"


# x86's vector fma builtins (what immintrin.h's _mm*_fmadd_p* call, in gcc and clang), by (scalar, lanes): the macro
# that says the CPU has them, and the call
_X86_FMA = {
    (dtypes.float32, 4): ("__FMA__", "__builtin_ia32_vfmaddps(a,b,c)"),
    (dtypes.float32, 8): ("__FMA__", "__builtin_ia32_vfmaddps256(a,b,c)"),
    (dtypes.float32, 16): ("__AVX512F__", "__builtin_ia32_vfmaddps512_mask(a,b,c,(unsigned short)-1,4)"),
    (dtypes.float64, 2): ("__FMA__", "__builtin_ia32_vfmaddpd(a,b,c)"),
    (dtypes.float64, 4): ("__FMA__", "__builtin_ia32_vfmaddpd256(a,b,c)"),
    (dtypes.float64, 8): ("__AVX512F__", "__builtin_ia32_vfmaddpd512_mask(a,b,c,(unsigned char)-1,4)"),
}


def fma_helpers(renderer: CStyleRenderer, uops: list[UOp]) -> list[str]:
    """`uk_fma_<vector type>(a, b, c)` for each float vector type of the kernel: x86's vector fma instruction where the
    CPU has it, else an fma per lane (which gcc's SLP vectorizer joins at -O3; as the only form it made matmul kernels'
    sources twice as long and their compile 30% slower)."""
    lines = []
    for dt in sorted({u.dtype for u in uops if not isinstance(u.dtype, PtrDType) and u.dtype.count > 1}, key=str):
        if dt.scalar not in (dtypes.float32, dtypes.float64):
            continue
        vt = renderer.render_vector_type(dt)
        fn = "__builtin_fma" if dt.scalar == dtypes.float64 else "__builtin_fmaf"
        lanes = ",".join(f"{fn}(a[{i}],b[{i}],c[{i}])" for i in range(dt.count))
        generic = f"static inline {vt} uk_fma_{vt}({vt} a, {vt} b, {vt} c) {{ return ({vt}){{{lanes}}}; }}"
        if (x86 := _X86_FMA.get((dt.scalar, dt.count))) is None:
            lines.append(generic)
            continue
        guard, call = x86
        lines += [f"#if defined({guard})", f"#define uk_fma_{vt}(a,b,c) {call}", "#else", generic, "#endif"]
    return lines


def _fma_updates(ctx: RenderContext) -> dict[UOp, tuple[UOp, UOp, UOp]]:
    # the float accumulator updates acc + a*b (a matmul's register tile, a convolution's): ADD -> (a, b, the
    # accumulator's read). Not a sum loop's: its `omp simd` reduction vectorizes a plain + better (softmax's sum of
    # exps, whose last step is a product: 0.98 -> 1.16 ms fused)
    summed = {r for role in ctx.loops.values() if role.reduce is Ops.ADD for r in role.registers}
    found: dict[UOp, tuple[UOp, UOp, UOp]] = {}
    for u in ctx.uops:
        if u.op is not Ops.STORE or u.src[0].op is not Ops.INDEX or u.src[0].src[0].op is not Ops.DEFINE_REG:
            continue
        if u.src[0].src[0] in summed:
            continue
        value = u.src[1]
        if value.op is not Ops.ADD or value.dtype.scalar not in (dtypes.float32, dtypes.float64):
            continue
        acc = [s for s in value.src if s.op is Ops.LOAD and s.src[0] is u.src[0]]
        mul = [s for s in value.src if s.op is Ops.MUL]
        if len(acc) == 1 and len(mul) == 1:
            found[value] = (mul[0].src[0], mul[0].src[1], acc[0])
    return found


def do_fma_update(ctx: RenderContext, x: UOp) -> str | None:
    """An accumulator's acc + a*b as one fused multiply-add (a matmul's inner step)."""
    updates = ctx.memo.get("fma_updates")
    if updates is None:
        updates = ctx.memo["fma_updates"] = _fma_updates(ctx)
    if x not in updates:
        return None
    a, b, acc = updates[x]
    return ctx.value(x, "alu", render_fma(ctx.r, x.dtype, ctx.ref(a), ctx.ref(b), ctx.ref(acc)))


# the CPU's own rules in front of the C rules: register tiles' reused vector loads held in registers, gated loads
# around a gcc bug; accumulators' multiply-adds fused
pm_clang = PatternMatcher([(UPat(Ops.LOAD, name="x"), do_load), (UPat(Ops.ADD, name="x"), do_fma_update)])
ClangRenderer.render_rules = pm_clang + pm_cstyle
