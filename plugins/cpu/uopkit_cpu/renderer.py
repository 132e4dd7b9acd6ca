"""C for the host CPU: the core's C-style renderer with C99 types and libm."""

from __future__ import annotations

from typing import ClassVar

from uopkit.helpers import cpu_threads
from uopkit.renderer import RendererCaps
from uopkit.renderer.cstyle import CStyleRenderer
from uopkit.uop.ops import Ops, UOp


class ClangRenderer(CStyleRenderer):
    device: ClassVar[str] = "CPU"
    buffer_suffix: ClassVar[str] = " restrict"
    caps = RendererCaps(
        has_threads=True,
        # AVX-512 holds 16 floats; gcc turns independent lanes into vector instructions
        max_vector_width=16,
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
    parallel_for: ClassVar[str] = "#pragma omp parallel for schedule(static)"
    simd_sum_loop: ClassVar[str] = "#pragma omp simd reduction(+:{vars})"
    # max loops: OpenMP's max reduction on the plain compare, NaNs tracked by an int flag per accumulator
    simd_max_loop: ClassVar[str] = "#pragma omp simd reduction(max:{vars}) reduction(|:{flags})"

    def render_parallel_for(self, iterations: int | None) -> str:
        # the team OpenMP starts is the kernel's (UOPKIT_THREADS, not OpenMP's default of every core), and no larger
        # than the loop: a small kernel's few blocks wake only as many threads
        threads = cpu_threads() if iterations is None else max(1, min(iterations, cpu_threads()))
        return f"{self.parallel_for} num_threads({threads})"

    def render_kernel(self, name: str, body: list[str], params: list[str], uops: list[UOp] | None = None) -> str:
        src = super().render_kernel(name, body, params)
        # a register tile (many accumulator lanes) is already laid out for SLP vectorization; gcc's loop vectorizer
        # on top of it takes seconds to compile and gains nothing
        # (also any very long kernel: many unrolled lanes, where the loop vectorizer mostly costs compile time)
        if uops is not None and (len(uops) > 1500 or any(u.op is Ops.DEFINE_REG and u.dtype.size > 1 for u in uops)):
            src = '__attribute__((optimize("no-tree-loop-vectorize"))) ' + src
        return src
