"""CUDA C: the core's C-style renderer with CUDA's types, qualifiers, thread ids, shared memory and tensor cores.

A small subclass of `CStyleRenderer`: class attributes name the types and qualifiers, and the override points
(`render_special`, `render_local`, `render_cast`, `render_bitcast`, the vector hooks, `render_wmma_helper`,
`render_kernel`, `preamble`) say what differs from C. There is no render loop here.

What the renderer may use depends on the GPU's architecture (``sm_XY``): tensor cores (``mma.sync``) need sm_80,
native half arithmetic sm_53, native bfloat16 sm_80 (below it cuda_bf16.h emulates it in float). The device's
limits (`CUDACaps`, read by the runtime) become `local_max`, `workgroup_max`, `subgroup_width` and `shared_max`.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import ClassVar

from uopkit.dtype import DType, PtrDType, dtypes
from uopkit.renderer import TensorCore, vector_alignment
from uopkit.renderer.cstyle import CStyleRenderer, RenderContext, RenderError
from uopkit.renderer.loops import is_scalar_register
from uopkit.renderer.tensor_cores import CUDA_BF16_TENSOR_CORES, CUDA_TENSOR_CORES, CUDA_TF32_TENSOR_CORES
from uopkit.uop.ops import Ops, UOp

# the arch kernels are built for when no GPU says otherwise (compile-only checks, EMULATE=CUDA)
DEFAULT_ARCH = "sm_90"

# threads per block the runtime launches a kernel without local ids with (its `__launch_bounds__` too)
DEFAULT_BLOCK = 128

# the widest load or store one thread issues (ld.global.v4.f32): a vector access's address must be aligned to its
# size up to this (a misaligned one faults). cuMemAlloc aligns buffers to 256 bytes; __shared__ and register arrays
# are declared aligned to it
VECTOR_ALIGN = 16


def parse_arch(arch: str) -> int:
    """``"sm_90"`` (or ``"sm_90a"``, ``"compute_80"``) -> 90; a clear ValueError for anything else."""
    match = re.fullmatch(r"(?:sm|compute)_(\d{2,3})[af]?", arch.strip())
    if match is None:
        raise ValueError(f"bad CUDA arch {arch!r}: expected sm_XY such as sm_80 or sm_90 (CUDA_ARCH=sm_90)")
    return int(match.group(1))


@dataclass(frozen=True)
class CUDACaps:
    """What a CUDA device can do, as the renderer and the runtime need it (see `runtime.read_caps`)."""

    name: str = "compile-only CUDA target"
    arch: str = DEFAULT_ARCH
    max_threads_per_block: int = 1024
    # threads of a warp (every NVIDIA GPU so far: 32)
    warp_size: int = 32
    max_block: tuple[int, int, int] = (1024, 1024, 64)
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    # static __shared__ memory per block (more needs dynamic shared memory and an opt-in)
    shared_per_block: int = 48 * 1024
    registers_per_block: int = 65536
    total_memory: int = 0

    @property
    def sm(self) -> int:
        return parse_arch(self.arch)


def tf32_enabled() -> bool:
    """TF32=1 lets float32 matmuls use TF32 tensor cores (inputs rounded to a 10-bit mantissa; off by default)."""
    return os.environ.get("TF32", "0") not in ("", "0")


# CUDA's scalar types: C's, except bool and the half types (half and bfloat16 come from cuda_fp16.h and cuda_bf16.h)
CUDA_TYPES: dict[DType, str] = {
    **CStyleRenderer.type_map,
    dtypes.bool: "bool",
    dtypes.float16: "half",
    dtypes.bfloat16: "__nv_bfloat16",
}

HALF_TYPES = (dtypes.float16, dtypes.bfloat16)
HEADERS = {dtypes.float16: "cuda_fp16.h", dtypes.bfloat16: "cuda_bf16.h"}

# PTX type names of the mma.sync operands, by dtype
PTX_TYPES = {dtypes.float16: "f16", dtypes.bfloat16: "bf16", dtypes.float32: "f32"}

# every dtype the CUDA renderer computes in. bfloat16 is not one: the core keeps a bfloat16 tensor as uint16 bits and
# computes in float32, so no Tensor program reaches __nv_bfloat16 above, and the bf16 tensor core
# (CUDA_BF16_TENSOR_CORES) is kept out of tensor_cores_for
CUDA_DTYPES: tuple[DType, ...] = (dtypes.bool, *dtypes.ints, dtypes.float16, dtypes.float32, dtypes.float64)

# math.h's INFINITY and NAN (NVRTC has no math.h), and bit casts between types of one size
PREAMBLE = [
    "#define INFINITY (__int_as_float(0x7f800000))",
    "#define NAN (__int_as_float(0x7fffffff))",
    "template <class T, class F> __device__ __forceinline__ T uk_bitcast(F x) {",
    '  static_assert(sizeof(T) == sizeof(F), "bitcast between sizes");',
    "  T y;",
    "  memcpy(&y, &x, sizeof(T));",
    "  return y;",
    "}",
]


def tensor_cores_for(sm: int, tf32: bool) -> list[TensorCore]:
    """The tensor cores the renderer offers the optimizer on compute capability `sm` (mma.sync needs sm_80)."""
    if sm < 80:
        return []
    return CUDA_TENSOR_CORES + (CUDA_TF32_TENSOR_CORES if tf32 else [])


def mma_helper(tc: TensorCore) -> str:
    """A device function computing one WMMA with ``mma.sync`` on the warp's fragments (see tensor_cores.py)."""
    m, n, k = tc.dims
    ea, eb, ec = tc.elements_per_thread
    a_t, b_t, c_t = (
        CUDARenderer.vector_name(dt) for dt in (tc.dtype_in.vec(ea), tc.dtype_in.vec(eb), tc.dtype_out.vec(ec))
    )
    in_ptx = "tf32" if tc.dtype_in == dtypes.float32 else PTX_TYPES[tc.dtype_in]
    out_ptx = PTX_TYPES[tc.dtype_out]
    # operands travel in 32-bit registers: two halves (or one float) each
    a_regs, b_regs = ea * tc.dtype_in.itemsize // 4, eb * tc.dtype_in.itemsize // 4
    c_regs = ec * tc.dtype_out.itemsize // 4
    out_constraint = "+f" if tc.dtype_out == dtypes.float32 else "+r"
    d = ", ".join(f"%{i}" for i in range(c_regs))
    a = ", ".join(f"%{c_regs + i}" for i in range(a_regs))
    b = ", ".join(f"%{c_regs + a_regs + i}" for i in range(b_regs))
    c_cpp = "float" if tc.dtype_out == dtypes.float32 else "unsigned"
    lines = [
        f"__device__ __forceinline__ {c_t} {tc.name}({a_t} a, {b_t} b, {c_t} c) {{",
        f"  unsigned ra[{a_regs}], rb[{b_regs}];",
        f"  {c_cpp} rc[{c_regs}];",
        "  memcpy(ra, &a, sizeof(ra));",
        "  memcpy(rb, &b, sizeof(rb));",
        "  memcpy(rc, &c, sizeof(rc));",
    ]
    if tc.dtype_in == dtypes.float32:
        # TF32 operands: round each float to the nearest tf32 (the hardware would truncate)
        lines += [
            f'  for (int i = 0; i < {a_regs}; i++) asm("cvt.rna.tf32.f32 %0, %0;" : "+r"(ra[i]));',
            f'  for (int i = 0; i < {b_regs}; i++) asm("cvt.rna.tf32.f32 %0, %0;" : "+r"(rb[i]));',
        ]
    outs = ", ".join(f'"{out_constraint}"(rc[{i}])' for i in range(c_regs))
    ins = ", ".join([f'"r"(ra[{i}])' for i in range(a_regs)] + [f'"r"(rb[{i}])' for i in range(b_regs)])
    lines += [
        f'  asm volatile("mma.sync.aligned.m{m}n{n}k{k}.row.col.{out_ptx}.{in_ptx}.{in_ptx}.{out_ptx} '
        f'{{{d}}}, {{{a}}}, {{{b}}}, {{{d}}};"',
        f"      : {outs}",
        f"      : {ins});",
        f"  {c_t} d;",
        "  memcpy(&d, rc, sizeof(d));",
        "  return d;",
        "}",
    ]
    return "\n".join(lines)


class CUDARenderer(CStyleRenderer):
    """Renders a linear program as one ``extern "C" __global__`` CUDA C kernel.

    SPECIAL gidxN/lidxN -> ``blockIdx``/``threadIdx`` (a kernel without local ids uses global thread ids, launched
    in blocks of `DEFAULT_BLOCK`), DEFINE_LOCAL -> ``__shared__``, BARRIER -> ``__syncthreads()``, vectors are small
    aligned structs, WMMA -> ``mma.sync`` through a device function per tensor core.
    """

    device: ClassVar[str] = "CUDA"
    has_local: ClassVar[bool] = True
    has_shared: ClassVar[bool] = True
    max_vector_width: ClassVar[int] = 8
    # vectors are structs (below): the infix operators work on them lane by lane. What vectors buy on CUDA is one
    # 16-byte load or store per vector, which the core makes only where it proves the address aligned
    vector_ops: ClassVar[frozenset[Ops]] = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV})
    vector_align: ClassVar[int] = VECTOR_ALIGN
    kernel_prefix: ClassVar[str] = 'extern "C" __global__ '
    buffer_suffix: ClassVar[str] = " __restrict__"
    arg_int_prefix: ClassVar[str] = "const int"
    barrier: ClassVar[str] = "__syncthreads();"
    type_map: ClassVar[dict[DType, str]] = CUDA_TYPES
    supported_dtypes: ClassVar[tuple[DType, ...]] = CUDA_DTYPES

    def __init__(self, caps: CUDACaps | None = None, tf32: bool | None = None) -> None:
        self.cuda_caps = caps if caps is not None else CUDACaps(arch=os.environ.get("CUDA_ARCH", DEFAULT_ARCH))
        sm = self.cuda_caps.sm
        # the device's limits replace the class defaults for this instance
        self.local_max = tuple(min(s, self.cuda_caps.max_threads_per_block) for s in self.cuda_caps.max_block)
        self.workgroup_max = self.cuda_caps.max_threads_per_block
        self.subgroup_width = self.cuda_caps.warp_size
        self.global_max = self.cuda_caps.max_grid
        self.shared_max = self.cuda_caps.shared_per_block
        self.tensor_cores = tensor_cores_for(sm, tf32_enabled() if tf32 is None else tf32)

    @property
    def arch(self) -> str:
        return self.cuda_caps.arch

    # ---------------------------------------------------------------------------------------------- types

    @staticmethod
    def vector_name(dt: DType) -> str:
        return f"uk_{dt.scalar.name}{dt.count}"

    def render_vector_type(self, dt: DType) -> str:
        if dt.scalar not in self.type_map or dt.scalar == dtypes.bool:
            raise RenderError(f"CUDA has no vector type for {dt}")
        return self.vector_name(dt)

    def vector_typedefs(self, uops: list[UOp]) -> list[str]:
        vecs = {u.dtype for u in uops if not isinstance(u.dtype, PtrDType) and u.dtype.count > 1}
        vecs |= {v for u in uops if u.op is Ops.WMMA for v in (s.dtype for s in u.src)}
        lines = []
        for v in sorted(vecs, key=lambda d: (d.scalar.name, d.count)):
            # the widest power of two that divides the size, at most 16 bytes (one vector load): what the core proves
            align = vector_alignment(VECTOR_ALIGN, v.scalar.itemsize * v.count)
            lines.append(
                f"struct __align__({align}) {self.vector_name(v)} {{ {self.type_map[v.scalar]} v[{v.count}]; }};"
            )
        return lines

    def render_vectorize(self, dt: DType, items: list[str]) -> str:
        return f"{self.render_vector_type(dt)}{{{', '.join(items)}}}"

    def render_gep(self, vec: str, i: int) -> str:
        return f"{vec}.v[{i}]"

    def render_vector_load(self, dt: DType, address: str) -> str:
        return f"(*(({self.render_vector_type(dt)}*)&{address}))"

    def render_vector_store(self, address: str, value: str) -> str:
        return f"*((decltype({value})*)&{address}) = {value};"

    # ---------------------------------------------------------------------------------------------- ALU

    def render_alu(self, u: UOp, args: list[str]) -> str:
        dt = u.dtype
        if dt.count > 1:
            # vectors are structs: infix ops (the only ones the render loop lets through on vectors) lane by lane
            lanes = [f"({args[0]}.v[{i}]{self.infix[u.op]}{args[1]}.v[{i}])" for i in range(dt.count)]
            if dt.scalar.itemsize < 4 and dtypes.is_int(dt.scalar):
                # (C promotes 8- and 16-bit lanes to int: back to the lane type, as the brace init may not narrow)
                scalar = self.render_dtype(dt.scalar)
                lanes = [f"({scalar}){lane}" for lane in lanes]
            return self.render_vectorize(dt, lanes)
        if u.op in (Ops.IDIV, Ops.MOD) and dtypes.is_unsigned(dt) and not (u.src[1].op is Ops.CONST and u.src[1].arg):
            # no -1 among unsigned divisors (comparing with it is a warning): only x/0 = x%0 = 0 is special
            a, b = args
            return f"(({b})==0?0:({a}){'/' if u.op is Ops.IDIV else '%'}({b}))"
        return super().render_alu(u, args)

    def render_cast(self, u: UOp, arg: str) -> str:
        src_dt, dst_dt = u.src[0].dtype, u.dtype
        if dst_dt.count > 1:
            raise RenderError(f"CUDA casts vectors lane by lane; got a cast to {dst_dt}")
        if src_dt in HALF_TYPES and dst_dt in HALF_TYPES and src_dt != dst_dt:
            return f"(({self.render_dtype(dst_dt)})((float)({arg})))"
        if dst_dt in HALF_TYPES and src_dt == dtypes.float64:
            # one rounding, double -> half (through float it would round twice)
            return f"{'__double2half' if dst_dt == dtypes.float16 else '__double2bfloat16'}({arg})"
        if dst_dt in HALF_TYPES and src_dt not in (dtypes.float32, dst_dt):
            # ints and bool reach half through float: half's constructors from them are ambiguous or missing
            return f"(({self.render_dtype(dst_dt)})((float)({arg})))"
        if src_dt in HALF_TYPES and dst_dt not in (dtypes.float32, src_dt):
            # the same on the way out: the C casts then see a float
            widened = UOp(Ops.CAST, dst_dt, (UOp(Ops.NOOP, dtypes.float32),))
            return super().render_cast(widened, f"((float)({arg}))")
        return super().render_cast(u, arg)

    def render_bitcast(self, u: UOp, arg: str) -> str:
        if u.src[0].dtype.itemsize != u.dtype.itemsize:
            raise RenderError(f"bitcast between sizes {u.src[0].dtype.itemsize} and {u.dtype.itemsize}")
        return f"uk_bitcast<{self.render_dtype(u.dtype)}>({arg})"

    # ---------------------------------------------------------------------------------------------- GPU parts

    def render_special(self, u: UOp) -> str:
        name = u.arg if isinstance(u.arg, str) else u.arg[0]
        prefix, dim = name.rstrip("012"), name[-1:]
        if prefix not in ("gidx", "lidx") or dim not in ("0", "1", "2"):
            raise RenderError(f"unknown SPECIAL {name!r}: expected gidx or lidx followed by a dimension 0-2")
        axis = "xyz"[int(dim)]
        if prefix == "lidx":
            return f"(int)threadIdx.{axis}"
        # gidxN counts blocks when the kernel has local ids; without them it is the thread's global id, and the
        # runtime launches global_size threads in blocks it chooses (as OpenCL's driver would)
        if self._grouped:
            return f"(int)blockIdx.{axis}"
        return f"(int)(blockIdx.{axis}*blockDim.{axis}+threadIdx.{axis})"

    def render_local(self, name: str, dt: DType, size: int) -> str:
        # aligned for the vector loads and stores the core may make into it (it assumes every base is)
        return f"__shared__ __align__({VECTOR_ALIGN}) {self.render_dtype(dt)} {name}[{max(size, 1)}];"

    def render_register(self, ctx: RenderContext, reg: UOp) -> str:
        line = super().render_register(ctx, reg)
        # a register kept as an array (not split into variables) may be read and written in vectors: aligned like
        # __shared__ memory
        as_array = reg not in ctx.split and not (self.register_variables and is_scalar_register(reg))
        return f"__align__({VECTOR_ALIGN}) {line}" if as_array else line

    def render_wmma_helper(self, tc: TensorCore) -> str:
        if tc.name not in {t.name for t in ALL_CUDA_TENSOR_CORES}:
            raise RenderError(f"CUDA has no tensor core {tc.name!r}")
        if self.cuda_caps.sm < 80:
            raise RenderError(f"tensor core {tc.name} needs sm_80 or newer, the target is {self.arch}")
        return mma_helper(tc)

    # ---------------------------------------------------------------------------------------------- kernel

    _grouped: bool = True

    def render(self, name: str, uops: list[UOp]) -> str:
        check_shared_memory(name, uops, self.shared_max)
        # whether gidx counts blocks depends on the whole kernel: a copy carries it, so renders can run in parallel
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view._grouped = any(u.op is Ops.SPECIAL and str(u.arg).startswith("lidx") for u in uops)
        return CStyleRenderer.render(view, name, uops)

    def preamble(self, uops: list[UOp]) -> list[str]:
        scalars = {(u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype).scalar for u in uops}
        scalars |= {s.dtype.scalar for u in uops if u.op is Ops.WMMA for s in u.src}
        # the fp16/bf16 headers are large: a kernel includes them only when it uses the type (NVRTC is faster)
        includes = [f"#include <{h}>" for dt, h in HEADERS.items() if dt in scalars]
        return [*includes, *PREAMBLE, *self.vector_typedefs(uops)]

    def render_kernel(self, name: str, body: list[str], params: list[str], uops: list[UOp] | None = None) -> str:
        threads = block_threads(uops or [])
        bounds = f"__launch_bounds__({threads if threads is not None else DEFAULT_BLOCK}) "
        # grids have at most 65535 blocks in y and z: those ids step through their range by the grid's size (the
        # runtime clamps the grid), from their definition to the end of the kernel (the ids are block-uniform)
        looped: list[str] = []
        closing = 0
        for line in body:
            match = GRID_STRIDE_ID.match(line)
            if match is None:
                looped.append("  " * closing + line)
                continue
            indent, var, start, size = match.groups()
            axis = "xyz"[int(var[-1])]
            step = f"gridDim.{axis}" if start.endswith(f"blockIdx.{axis}") else f"gridDim.{axis}*blockDim.{axis}"
            looped.append(f"{'  ' * closing}{indent}for (int {var} = {start}; {var} < {size}; {var} += {step}) {{")
            closing += 1
        ends = ["  " * (depth + 1) + "}" for depth in reversed(range(closing))]
        lines = [f"{self.kernel_prefix}void {bounds}{name}({', '.join(params)}) {{", *looped, *ends, "}"]
        return "\n".join(lines)


# the statement the render loop writes for a y or z block id: `int gidx1 = <start>; /* <size> */`
GRID_STRIDE_ID = re.compile(r"^(\s*)int (gidx[12]) = \(int\)\(?(.*?)\)?; /\* (.+) \*/$")

ALL_CUDA_TENSOR_CORES: list[TensorCore] = CUDA_TENSOR_CORES + CUDA_BF16_TENSOR_CORES + CUDA_TF32_TENSOR_CORES


def block_threads(uops: list[UOp]) -> int | None:
    """Threads per block of a kernel with local ids (the product of its lidx sizes); None without them."""
    sizes = {str(u.arg): u.src[0].arg for u in uops if u.op is Ops.SPECIAL and str(u.arg).startswith("lidx")}
    if not sizes:
        return None
    if not all(isinstance(s, int) for s in sizes.values()):
        raise RenderError(f"local sizes must be constants in CUDA, got {sizes}")
    return math.prod(sizes.values())


def check_shared_memory(name: str, uops: list[UOp], limit: int) -> None:
    """A clear error for a kernel whose ``__shared__`` arrays don't fit the block's shared memory."""
    used = sum(max(u.dtype.size, 1) * u.dtype.base.itemsize for u in uops if u.op is Ops.DEFINE_LOCAL)
    if used > limit:
        raise RenderError(
            f"kernel {name} needs {used} bytes of __shared__ memory, but a CUDA block has {limit}; "
            "use fewer or smaller local/group opts"
        )
