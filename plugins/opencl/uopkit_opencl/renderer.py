"""OpenCL C: the core's C-style renderer with OpenCL types, qualifiers, work-item ids, local memory and vectors.

What the renderer may use depends on the device, so it is built from the device's `CLCaps` (read by the runtime
from the driver): `half` is real arithmetic only with cl_khr_fp16, otherwise it is a storage format (values live
in `float` registers, read with `vload_half`, written with `vstore_half`, rounded to half after every op);
`double` needs cl_khr_fp64; work-group and local memory limits become the renderer's `local_max`, `workgroup_max`,
`subgroup_width` and `shared_max`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

from uopkit.dtype import DType, PtrDType, dtypes
from uopkit.renderer import RendererCaps
from uopkit.renderer.cstyle import Access, CStyleRenderer, RenderContext, RenderError, pm_cstyle, special_name
from uopkit.uop.ops import Ops, PatternMatcher, UOp, UPat


@dataclass(frozen=True)
class CLCaps:
    """What an OpenCL device can do, as the renderer and runtime need it (see `runtime.read_caps`)."""

    name: str = "generic OpenCL 1.2 device"
    platform: str = ""
    max_work_group_size: int = 256
    max_work_item_sizes: tuple[int, int, int] = (256, 256, 64)
    local_mem_size: int = 32768
    # work-items that run in lockstep: NVIDIA's warp (cl_nv_device_attribute_query), AMD's wavefront
    # (cl_amd_device_attribute_query); 1 where the driver doesn't say
    subgroup_width: int = 1
    extensions: frozenset[str] = field(default_factory=frozenset)
    # CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT in the device's single_fp_config
    correctly_rounded_sqrt: bool = False
    # CL_DEVICE_LOCAL_MEM_TYPE is CL_LOCAL (dedicated on-chip memory), not CL_GLOBAL (as on PoCL's CPU device)
    local_mem_on_chip: bool = True

    @property
    def fp16(self) -> bool:
        return "cl_khr_fp16" in self.extensions

    @property
    def fp64(self) -> bool:
        return "cl_khr_fp64" in self.extensions


# vector widths OpenCL C has types for (3 exists but is stored as 4, so vload3/vstore3 are used for it)
VECTOR_WIDTHS = (2, 3, 4, 8, 16)

# float16 ops whose exact result may not be a half: rounded back to half when half is storage-only
HALF_ROUNDED_OPS = {
    Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MULACC, Ops.RECIP, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW,
}  # fmt: skip

# float -> nearest half (ties to even, overflow to inf) -> float, and the bits of a half, for devices without
# cl_khr_fp16: a private ushort is the half's storage, vstore_half/vload_half convert through it
HALF_HELPERS = """\
inline float uk_half(float x) {
  ushort bits;
  vstore_half_rte(x, 0, (__private half*)&bits);
  return vload_half(0, (__private half*)&bits);
}
inline ushort uk_half_bits(float x) {
  ushort bits;
  vstore_half_rte(x, 0, (__private half*)&bits);
  return bits;
}
inline float uk_half_from_bits(ushort bits) {
  return vload_half(0, (__private half*)&bits);
}"""


def half_vector_helper(n: int) -> str:
    """uk_halfN: uk_half on each lane of a floatN (OpenCL C has no overloading)."""
    return (
        f"inline float{n} uk_half{n}(float{n} x) {{\n"
        f"  ushort{n} bits;\n"
        f"  vstore_half{n}_rte(x, 0, (__private half*)&bits);\n"
        f"  return vload_half{n}(0, (__private half*)&bits);\n"
        "}"
    )


# OpenCL's work-item functions by the prefix of a SPECIAL's name
SPECIAL_FUNCS = {"gidx": "get_group_id", "lidx": "get_local_id", "idx": "get_global_id"}


class OpenCLRenderer(CStyleRenderer):
    """Renders a linear program as one OpenCL C `__kernel`.

    Beyond the C renderer: SPECIAL -> ``get_group_id``/``get_local_id``/``get_global_id``, DEFINE_LOCAL ->
    ``__local T name[N]`` (declared at kernel scope), BARRIER -> ``barrier(CLK_LOCAL_MEM_FENCE)``, IF/ENDIF,
    vector dtypes (``float4`` ...) with VECTORIZE/GEP, and vector LOAD/STORE on scalar pointers through
    ``vloadN``/``vstoreN``. ``bool`` buffers are passed as ``uchar`` (OpenCL forbids ``bool`` kernel pointers).
    """

    device: ClassVar[str] = "OPENCL"
    # OpenCL C has vector types up to 16 elements, with its arithmetic operators and math builtins on them: an UPCAST
    # lane becomes one vector value, loaded and stored with vloadN/vstoreN (which need only element alignment)
    # (MAX too: its compares and ?: act on each lane of a vector, so a vector max loop needs no lane-by-lane code)
    caps = RendererCaps(
        has_local=True,
        has_shared=True,
        max_vector_width=16,
        vector_ops=frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.EXP2, Ops.LOG2, Ops.SQRT}),
    )
    # registers are arrays declared where they are defined; math builtins are overloaded for vectors
    register_variables: ClassVar[bool] = False
    vector_math: ClassVar[bool] = True
    kernel_prefix: ClassVar[str] = "__kernel "
    buffer_prefix: ClassVar[str] = "__global "
    buffer_suffix: ClassVar[str] = " restrict"
    arg_int_prefix: ClassVar[str] = "const int"
    barrier: ClassVar[str] = "barrier(CLK_LOCAL_MEM_FENCE);"
    type_map: ClassVar[dict[DType, str]] = {
        dtypes.bool: "bool",
        dtypes.int8: "char",
        dtypes.uint8: "uchar",
        dtypes.int16: "short",
        dtypes.uint16: "ushort",
        dtypes.int32: "int",
        dtypes.uint32: "uint",
        dtypes.int64: "long",
        dtypes.uint64: "ulong",
        dtypes.float16: "half",
        dtypes.float32: "float",
        dtypes.float64: "double",
    }

    def __init__(self, cl_caps: CLCaps | None = None) -> None:
        self.cl_caps = cl_caps if cl_caps is not None else CLCaps()
        # the device's limits replace the class defaults for this instance:
        # a work-group dimension is bounded both by its own limit and by the group's total,
        # float64 only where the device has cl_khr_fp64 (half is always there: as storage without cl_khr_fp16)
        self.caps = replace(
            type(self).caps,
            local_max=tuple(min(s, self.cl_caps.max_work_group_size) for s in self.cl_caps.max_work_item_sizes),
            workgroup_max=self.cl_caps.max_work_group_size,
            subgroup_width=self.cl_caps.subgroup_width,
            shared_max=self.cl_caps.local_mem_size,
            shared_on_chip=self.cl_caps.local_mem_on_chip,
            global_max=(2**31 - 1, 2**31 - 1, 2**31 - 1),
            supported_dtypes=tuple(
                d for d in type(self).caps.supported_dtypes if d != dtypes.float64 or self.cl_caps.fp64
            ),
        )

    @property
    def half_is_storage(self) -> bool:
        """True when float16 values are computed in float (the device lacks cl_khr_fp16)."""
        return not self.cl_caps.fp16

    # ---------------------------------------------------------------------------------------------- types

    def render_dtype(self, dt: DType) -> str:
        if isinstance(dt, PtrDType):
            base = dt.base
            # memory keeps its real element type: half stays half (read through vload_half), bool is a byte
            if base.scalar == dtypes.bool:
                return "uchar" + (str(base.count) if base.count > 1 else "") + "*"
            if base.scalar == dtypes.float16:
                return "half" + (str(base.count) if base.count > 1 else "") + "*"
            return self.render_dtype(base) + "*"
        scalar = dt.scalar
        if scalar == dtypes.float64 and not self.cl_caps.fp64:
            raise RenderError(f"{self.cl_caps.name} has no cl_khr_fp64: float64 is not supported on this device")
        if scalar not in self.type_map:
            raise RenderError(f"{type(self).__name__} has no type for {dt}")
        name = "float" if scalar == dtypes.float16 and self.half_is_storage else self.type_map[scalar]
        if dt.count == 1:
            return name
        if scalar == dtypes.bool:
            raise RenderError(f"OpenCL has no bool vectors ({dt})")
        if dt.count not in VECTOR_WIDTHS:
            raise RenderError(f"OpenCL has no vector type with {dt.count} elements ({dt})")
        return f"{name}{dt.count}"

    def render_vectorize(self, dt: DType, items: list[str]) -> str:
        return f"({self.render_dtype(dt)})({', '.join(items)})"

    def render_gep(self, vec: str, i: int) -> str:
        return f"{vec}.s{'0123456789abcdef'[i]}"

    def render_const(self, x: object, dt: DType) -> str:
        if dt.count > 1:
            return f"(({self.render_dtype(dt)})({self.render_const(x, dt.scalar)}))"
        if dt == dtypes.float16 and self.half_is_storage:
            return super().render_const(x, dtypes.float32)
        if dt == dtypes.int64:
            # -2**63 has no literal: 9223372036854775808 does not fit a long
            return "(-9223372036854775807l-1)" if x == dtypes.min(dtypes.int64) else f"{x}l"
        if dt == dtypes.uint64:
            return f"{x}ul"
        if dt == dtypes.bool:
            return "true" if x else "false"
        return super().render_const(x, dt)

    # ---------------------------------------------------------------------------------------------- ALU

    def render_math(self, op: Ops, dt: DType, args: list[str]) -> str:
        # OpenCL's math builtins are overloaded for float, double (and half with cl_khr_fp16) and their vectors
        return f"{self.math_funcs[op]}({', '.join(args)})"

    def render_alu(self, u: UOp, args: list[str]) -> str:
        if u.op is Ops.RECIP:
            one = self.render_const(1.0, u.dtype.scalar)
            expr = f"({one}/{args[0]})"
        else:
            expr = super().render_alu(u, args)
        if u.dtype.scalar == dtypes.float16 and self.half_is_storage and u.op in HALF_ROUNDED_OPS:
            # computed in float, then rounded to the half the op would have produced
            return f"uk_half{u.dtype.count if u.dtype.count > 1 else ''}({expr})"
        return expr

    def render_cast(self, u: UOp, arg: str) -> str:
        src_dt, dst_dt = u.src[0].dtype, u.dtype
        if dst_dt.count > 1:
            if dst_dt.scalar == dtypes.float16 and self.half_is_storage:
                source = arg if src_dt.scalar == dtypes.float16 else f"convert_float{dst_dt.count}({arg})"
                return source if src_dt.scalar == dtypes.float16 else f"uk_half{dst_dt.count}({source})"
            if dtypes.is_int(dst_dt) and dtypes.is_float(src_dt):
                # _sat: NaN becomes 0, as the scalar cast makes it
                return f"convert_{self.render_dtype(dst_dt)}_sat({arg})"
            return f"convert_{self.render_dtype(dst_dt)}({arg})"
        if dst_dt == dtypes.float16 and self.half_is_storage:
            if src_dt == dtypes.float16:
                return arg
            return f"uk_half((float)({arg}))"
        return super().render_cast(u, arg)

    def render_bitcast(self, u: UOp, arg: str) -> str:
        src_dt, dst_dt = u.src[0].dtype, u.dtype
        if src_dt.itemsize != dst_dt.itemsize:
            raise RenderError(f"bitcast between sizes {src_dt.itemsize} and {dst_dt.itemsize}")
        if self.half_is_storage and dst_dt.scalar == dtypes.float16:
            if dst_dt.count > 1:
                raise RenderError("vector bitcasts to half need cl_khr_fp16")
            return f"uk_half_from_bits(as_ushort({arg}))"
        if self.half_is_storage and src_dt.scalar == dtypes.float16:
            if src_dt.count > 1:
                raise RenderError("vector bitcasts from half need cl_khr_fp16")
            return f"as_{self.render_dtype(dst_dt)}(uk_half_bits({arg}))"
        return f"as_{self.render_dtype(dst_dt)}({arg})"

    # ---------------------------------------------------------------------------------------------- memory

    def render_load(self, acc: Access, dt: DType) -> str:
        scalar_ptr = acc.ptr_dtype.base.count == 1
        half_memory = acc.is_global and acc.ptr_dtype.base.scalar == dtypes.float16 and self.half_is_storage
        if dt.count > 1 and scalar_ptr:
            n = dt.count
            value = (
                f"vload_half{n}(0, {acc.ptr}+{acc.offset})" if half_memory else f"vload{n}(0, {acc.ptr}+{acc.offset})"
            )
        elif half_memory:
            value = f"vload_half({acc.offset}, {acc.ptr})"
        else:
            value = f"{acc.ptr}[{acc.offset}]"
        if acc.gate is None:
            return value
        return f"({acc.gate}?{value}:{self.render_const(0, dt)})"

    def render_store(self, acc: Access, value: str, dt: DType) -> str:
        scalar_ptr = acc.ptr_dtype.base.count == 1
        half_memory = acc.is_global and acc.ptr_dtype.base.scalar == dtypes.float16 and self.half_is_storage
        if dt.count > 1 and scalar_ptr:
            n = dt.count
            fn = f"vstore_half{n}" if half_memory else f"vstore{n}"
            line = f"{fn}({value}, 0, {acc.ptr}+{acc.offset});"
        elif half_memory:
            line = f"vstore_half({value}, {acc.offset}, {acc.ptr});"
        else:
            line = f"{acc.ptr}[{acc.offset}] = {value};"
        return line if acc.gate is None else f"if ({acc.gate}) {line}"

    # ---------------------------------------------------------------------------------------------- kernel

    def preamble(self, uops: list[UOp]) -> list[str]:
        scalars = {u.dtype.base.scalar if isinstance(u.dtype, PtrDType) else u.dtype.scalar for u in uops}
        lines = []
        if dtypes.float64 in scalars:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        if dtypes.float16 in scalars and not self.half_is_storage:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
        elif dtypes.float16 in scalars:
            lines.append(HALF_HELPERS)
            widths = {u.dtype.count for u in uops if not isinstance(u.dtype, PtrDType) and u.dtype.count > 1}
            lines += [half_vector_helper(n) for n in sorted(widths)]
        return lines

    # ---------------------------------------------------------------------------------------------- helpers

    def render_special(self, u: UOp, grouped: bool = True) -> str:
        """gidxN -> the work-group id (or, when `grouped` is False, the global id), lidxN -> the local id."""
        name = special_name(u)
        prefix = name.rstrip("0123456789")
        dim = name[len(prefix) :]
        if prefix not in SPECIAL_FUNCS or dim not in ("0", "1", "2"):
            raise RenderError(f"unknown SPECIAL {name!r}: expected gidx/lidx/idx followed by a dimension 0-2")
        func = SPECIAL_FUNCS["idx"] if prefix == "gidx" and not grouped else SPECIAL_FUNCS[prefix]
        return f"(int){func}({dim})"

    def render_local(self, name: str, dt: DType, size: int) -> str:
        return f"__local {self.render_dtype(dt)} {name}[{max(size, 1)}];"

    @staticmethod
    def gep_swizzle(u: UOp) -> str:
        idx = u.arg if isinstance(u.arg, tuple) else (u.arg,)
        count = u.src[0].dtype.count
        if not idx or any(not isinstance(i, int) or not 0 <= i < count for i in idx):
            raise RenderError(f"GEP index {u.arg!r} out of range for {u.src[0].dtype}")
        # OpenCL names vector components s0..s9, sa..sf
        return "".join("0123456789abcdef"[i] for i in idx)


def do_cl_special(ctx: RenderContext, x: UOp) -> str:
    # gidxN counts work-groups when the kernel has work-group-local ids; without them the runtime lets the driver
    # choose the groups, so gidxN is the work-item's global id
    assert isinstance(ctx.r, OpenCLRenderer)
    grouped = any(u.op is Ops.SPECIAL and special_name(u).startswith("lidx") for u in ctx.uops)
    ctx.bind(x, special_name(x))
    decl = f"{ctx.r.render_dtype(x.dtype)} {ctx.names[x]}"
    return f"{decl} = {ctx.r.render_special(x, grouped)}; /* {ctx.ref(x.src[0])} */"


# OpenCL's own forms in front of the C rules: GPU ids, and GEPs as named swizzles (.s0, .s3, ...)
pm_opencl = PatternMatcher(
    [
        (UPat(Ops.SPECIAL, name="x"), do_cl_special),
        (
            UPat(Ops.GEP, name="x"),
            lambda ctx, x: ctx.value(x, "gep", f"{ctx.ref(x.src[0])}.s{OpenCLRenderer.gep_swizzle(x)}"),
        ),
    ]
)
OpenCLRenderer.render_rules = pm_opencl + pm_cstyle
