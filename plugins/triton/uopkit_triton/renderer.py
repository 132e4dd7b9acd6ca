"""Linear programs as Triton kernels: a Python module holding one ``@triton.jit`` function.

The linear program is SIMT: every value belongs to one work-item. Here one Triton program is one work-group, and a
value is a block with one lane per work-item of the group:

- ``gidx<d>`` is ``tl.program_id(d)``: one program per work-group;
- ``lidx<d>`` is a ``tl.arange`` along its own block axis (``lidx0`` the last, so it is the contiguous one), padded
  to a power of two; a value has the axes of the local ids it depends on and broadcasts to the others, so a value
  that no local id reaches stays a scalar;
- an INDEX is a pointer expression, LOAD/STORE are ``tl.load``/``tl.store`` masked by the gate and by the padding
  lanes (``other=0``: a gated load reads 0);
- a register (DEFINE_REG, read and written at constant offsets) is one Python variable per slot, with the axes of
  every value stored into it; a register STORE is an assignment (``tl.where`` with a gate);
- RANGE ... END is ``for ridx in range(end):``, which Triton compiles to a loop whose carried values are the
  registers assigned in it; an innermost loop whose only effects are ``acc = acc + x`` / ``acc = max(acc, x)`` runs
  a chunk of iterations at a time instead, as one more block axis (the last), and each update reduces the chunk
  (``tl.reduce`` with the standard library's sum/max combine functions) before combining it with the register.

Semantics follow the reference emulator: integers wrap, IDIV/MOD truncate toward zero with x/0 = 0 and x/-1 = -x,
MAX propagates NaN, a float cast to an integer maps NaN (and inf) to 0, float32 division and sqrt are correctly
rounded (``div_rn``/``sqrt_rn``). Work-items never share local memory (`has_shared` is False), so the optimizer
never asks for DEFINE_LOCAL or BARRIER (`apply_opt` refuses GROUP, GROUPTOP and STAGE here); vectors and tensor
cores are not declared either.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar

from uopkit.dtype import DType, PtrDType, dtypes
from uopkit.renderer import Renderer
from uopkit.renderer.cstyle import RenderError
from uopkit.uop.ops import GroupOp, Ops, UOp

# Triton's names of uopkit's scalar types
TL_TYPES: dict[DType, str] = {
    dtypes.bool: "tl.int1",
    dtypes.int8: "tl.int8",
    dtypes.uint8: "tl.uint8",
    dtypes.int16: "tl.int16",
    dtypes.uint16: "tl.uint16",
    dtypes.int32: "tl.int32",
    dtypes.uint32: "tl.uint32",
    dtypes.int64: "tl.int64",
    dtypes.uint64: "tl.uint64",
    dtypes.float16: "tl.float16",
    dtypes.float32: "tl.float32",
    dtypes.float64: "tl.float64",
}

# the element types of kernel arguments, as triton.compile's signature writes them (bool memory is bytes)
SIGNATURE_TYPES: dict[DType, str] = {
    dtypes.bool: "u8",
    dtypes.int8: "i8",
    dtypes.uint8: "u8",
    dtypes.int16: "i16",
    dtypes.uint16: "u16",
    dtypes.int32: "i32",
    dtypes.uint32: "u32",
    dtypes.int64: "i64",
    dtypes.uint64: "u64",
    dtypes.float16: "fp16",
    dtypes.float32: "fp32",
    dtypes.float64: "fp64",
}

# the ops a bool result is rendered with & | ^ for
BOOL_BITWISE = {Ops.AND, Ops.OR, Ops.XOR, Ops.ADD, Ops.MUL, Ops.MAX}
# Triton's math functions take float32 and float64; float16 goes through float32 and is rounded back
MATH_FUNCS = {Ops.EXP2: "tl.exp2", Ops.LOG2: "tl.log2", Ops.SIN: "tl.sin"}
INFIX = {
    Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==",
    Ops.XOR: "^", Ops.OR: "|", Ops.AND: "&", Ops.SHL: "<<", Ops.SHR: ">>",
}  # fmt: skip

# module-level constants the kernels use: Triton kernels may read globals only when they are constexpr. There is no NaN
# global: before each GPU launch Triton checks that every global a kernel read still equals the value it compiled
# with, and NaN never equals itself ("Global variable NAN has changed"); NaN is written INF - INF, folded at compile
HEADER = """\
import triton
import triton.language as tl

INF = tl.constexpr(float("inf"))
# what tl.sum and tl.max combine with (see TritonRenderer.block_reduce)
SUM_COMBINE = tl.standard._sum_combine
MAX_COMBINE = tl.standard._elementwise_max
"""

# x ** y for float64 x, y with C's pow semantics at the edges (negative bases with integer exponents, pow(x, 0) = 1,
# pow(1, y) = 1); float16 and float32 compute in float64, so exp2(y * log2|x|) is accurate after rounding. x and y
# get one shape first: the interpreter mishandles `scalar bool & block bool`
POW_HELPER = """
@triton.jit
def uk_pow(x, y):
    x, y = tl.broadcast(x, y)
    r = tl.exp2(y * tl.log2(tl.abs(x)))
    whole = tl.floor(y) == y
    # whole exponents below 128 by repeated squaring: exact where the result is (exp2/log2 may miss an integer)
    small = whole & (tl.abs(y) < 128.0)
    e = tl.where(small, tl.abs(y), 0.0).to(tl.int32)
    p = tl.full(x.shape, 1.0, tl.float64)
    b = tl.abs(x)
    for _ in tl.static_range(7):
        p = tl.where((e & 1) == 1, p * b, p)
        b = b * b
        e = e >> 1
    r = tl.where(small, tl.where(y < 0.0, 1.0 / p, p), r)
    odd = whole & (tl.floor(y * 0.5) * 2.0 != y)
    r = tl.where((x < 0.0) & odd, -r, r)
    r = tl.where((x < 0.0) & (whole == 0), tl.full([], INF - INF, tl.float64), r)
    return tl.where((y == 0.0) | (x == 1.0), tl.full([], 1.0, tl.float64), r)
"""


# the combine functions of block reductions: module globals bound to the standard library's (see HEADER)
COMBINE = {Ops.ADD: "SUM_COMBINE", Ops.MAX: "MAX_COMBINE"}
# the block axis of a reduce loop rendered as block reductions (see _block_loops): one id for all of them, since they
# are innermost loops and never open together; it is the last (contiguous) axis of every block
BLOCK_DIM = -1
# how many elements (work-group lanes x loop lanes) one chunk of such a loop holds
CHUNK_ELEMENTS = 4096


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def kernel_identifier(name: str) -> str:
    """A Python identifier for the kernel's name (uopkit names are already identifiers; be safe anyway)."""
    ident = re.sub(r"\W", "_", name)
    return ident if ident and not ident[0].isdigit() else f"k_{ident}"


@dataclass(frozen=True)
class _Access:
    """A rendered INDEX: the pointer expression, its gate (or None), what it points into, and its lanes."""

    ptr: str
    gate: str | None
    target: UOp
    # the lanes of the pointer expression (the offset's)
    ptr_dims: frozenset[int]
    # the gate is a comparison (a bool the interpreter keeps as bool) or absent
    gate_is_compare: bool = True
    # the lanes of the gate
    gate_dims: frozenset[int] = frozenset()


@dataclass(frozen=True)
class _BlockLoop:
    """An innermost loop whose only effects are `acc = acc + x` or `acc = max(acc, x)`: it runs in chunks of `size`
    iterations as one block each, and every update becomes ``tl.sum``/``tl.max`` of the chunk's values."""

    size: int
    # the iterations past the loop's end in its last chunk must be masked
    masked: bool
    # each update STORE -> (op, x, the register's current value LOAD, the op's value)
    updates: dict[UOp, tuple[Ops, UOp, UOp, UOp]]


class TritonRenderer(Renderer):
    """Renders a linear program as a Python module with one ``@triton.jit`` kernel (see the module docstring).

    The module also holds what the compiler and runtime need: ``KERNEL`` (the function's name), ``SIGNATURE`` (the
    argument types for ``triton.compile``), ``NUM_WARPS`` and ``BLOCK`` (the padded work-group shape).
    """

    device: ClassVar[str] = "TRITON"
    # work-groups are programs and their work-items the lanes of a block
    has_local: ClassVar[bool] = True
    # Triton has no addressable shared memory or barrier between lanes: the optimizer never emits them
    has_shared: ClassVar[bool] = False
    # CUDA's grid limits; a block holds at most 1024 lanes
    global_max: ClassVar[tuple[int, ...] | None] = (2**31 - 1, 65535, 65535)
    local_max: ClassVar[tuple[int, ...] | None] = (1024, 1024, 64)
    workgroup_max: ClassVar[int | None] = 1024
    # a block's lanes run as warps of 32 threads
    subgroup_width: ClassVar[int] = 32
    max_vector_width: ClassVar[int] = 1
    transcendental_ops: ClassVar[frozenset[Ops]] = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT})
    supported_dtypes: ClassVar[tuple[DType, ...]] = (
        dtypes.bool,
        *dtypes.ints,
        dtypes.float16,
        dtypes.float32,
        dtypes.float64,
    )

    # ---------------------------------------------------------------------------------------------- pieces

    @staticmethod
    def tl_type(dt: DType) -> str:
        if dt.count > 1:
            raise RenderError(f"TritonRenderer renders no vector types ({dt}): it declares max_vector_width=1")
        if dt.scalar not in TL_TYPES:
            raise RenderError(f"TritonRenderer has no type for {dt}")
        return TL_TYPES[dt.scalar]

    def render_full(self, shape: str, x: object, dt: DType) -> str:
        """A block of `shape` (``"[]"``: a scalar) filled with the constant `x` of dtype `dt`."""
        if dt == dtypes.uint64 and isinstance(x, int) and x >= 2**63:
            # above int64's range: Triton builds integer constants through int64, so write the bits and reinterpret
            return f"tl.full({shape}, {x - 2**64}, tl.int64).to(tl.uint64, bitcast=True)"
        return f"tl.full({shape}, {self.literal(x, dt)}, {self.tl_type(dt)})"

    @staticmethod
    def literal(x: object, dt: DType) -> str:
        """The constant as a Python literal (inf is the module's constexpr INF, NaN is INF - INF: see HEADER)."""
        if dt == dtypes.bool:
            return "True" if x else "False"
        if dtypes.is_float(dt):
            assert isinstance(x, float | int)
            fx = float(x)
            if math.isnan(fx):
                return "(INF - INF)"
            if math.isinf(fx):
                return "INF" if fx > 0 else "-INF"
            return repr(fx)
        assert isinstance(x, int)
        # -2**63 written as a literal would go through 2**63, which int64 can't hold
        return f"({x + 1} - 1)" if x == -(2**63) else str(x) if x >= 0 else f"({x})"

    def render_const(self, x: object, dt: DType, weak: bool = False) -> str:
        """A constant. `weak`: it is an operand next to a value of its own dtype, so a Python literal takes that
        dtype (Triton's weak scalars); otherwise it is a typed scalar, ``tl.full([], value, dtype)``."""
        finite = not (dtypes.is_float(dt) and not math.isfinite(float(x)))  # type: ignore[arg-type]
        fits = not (dt == dtypes.uint64 and isinstance(x, int) and x >= 2**63)
        if weak and finite and fits:
            return self.literal(x, dt)
        return self.render_full("[]", x, dt)

    def render_alu(self, u: UOp, args: list[str]) -> str:
        op, dt = u.op, u.dtype
        if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
            return f"({args[0]} {INFIX[op]} {args[1]})"
        if dt == dtypes.bool and op in (Ops.ADD, Ops.MUL, Ops.MAX):
            # a bool sum is an OR, a product an AND, as the C cast of the integer result gives
            return f"({args[0]} {'&' if op is Ops.MUL else '|'} {args[1]})"
        if op in INFIX:
            return f"({args[0]} {INFIX[op]} {args[1]})"
        if op is Ops.NEG:
            # -True is -1, which is True again
            return args[0] if dt == dtypes.bool else f"(-{args[0]})"
        if op is Ops.WHERE:
            return f"tl.where({args[0]}, {args[1]}, {args[2]})"
        if op is Ops.MULACC:
            return (
                f"tl.fma({args[0]}, {args[1]}, {args[2]})"
                if dtypes.is_float(dt)
                else f"({args[0]} * {args[1]} + {args[2]})"
            )
        if op is Ops.MAX:
            a, b = args
            if dtypes.is_float(dt):
                # NaN in either operand gives NaN, as the emulator's MAX (a comparison with NaN is false: b)
                return f"tl.where({a} != {a}, {a}, tl.where({a} > {b}, {a}, {b}))"
            return f"tl.maximum({a}, {b})"
        if op in (Ops.IDIV, Ops.MOD):
            return self.render_int_division(u, args)
        if op is Ops.POW:
            if dt == dtypes.float64:
                return f"uk_pow({args[0]}, {args[1]})"
            return f"uk_pow({args[0]}.to(tl.float64), {args[1]}.to(tl.float64)).to({self.tl_type(dt)})"
        if not dtypes.is_float(dt):
            raise RenderError(f"TritonRenderer can't render {op.name} on {dt}")
        # float-only ops: float16 is computed in float32 and rounded back
        wide = [a if dt != dtypes.float16 else f"{a}.to(tl.float32)" for a in args]
        expr = self.render_float_op(op, dtypes.float64 if dt == dtypes.float64 else dtypes.float32, wide)
        return expr if dt != dtypes.float16 else f"{expr}.to(tl.float16)"

    def render_float_op(self, op: Ops, dt: DType, args: list[str]) -> str:
        """A float-only op on float32 or float64 operands."""
        single = dt == dtypes.float32
        if op in MATH_FUNCS:
            return f"{MATH_FUNCS[op]}({args[0]})"
        if op is Ops.SQRT:
            # tl.sqrt is an approximation on float32; sqrt_rn is correctly rounded
            return f"tl.sqrt_rn({args[0]})" if single else f"tl.sqrt({args[0]})"
        if op is Ops.FDIV:
            # `/` on float32 is div.full (2 ulp); div_rn is correctly rounded
            return f"tl.math.div_rn({args[0]}, {args[1]})" if single else f"({args[0]} / {args[1]})"
        if op is Ops.RECIP:
            one = "tl.full([], 1.0, tl.float32)" if single else "tl.full([], 1.0, tl.float64)"
            return f"tl.math.div_rn({one}, {args[0]})" if single else f"({one} / {args[0]})"
        if op is Ops.TRUNC:
            return f"tl.where({args[0]} < 0, tl.ceil({args[0]}), tl.floor({args[0]}))"
        raise RenderError(f"TritonRenderer can't render {op.name}")

    def render_int_division(self, u: UOp, args: list[str]) -> str:
        # Triton's // and % on integers are C's (truncation toward zero); x/0 and INT_MIN/-1 are undefined there,
        # so the spec's x/0 = 0, x%0 = 0 and x/-1 = -x are selected around a divisor that is never 0 or -1
        a, b = args
        divisor = u.src[1]
        sym = "//" if u.op is Ops.IDIV else "%"
        signed = not dtypes.is_unsigned(u.dtype)
        if divisor.op is Ops.CONST and divisor.arg not in (0, -1):
            return f"({a} {sym} {b})"
        bad = f"(({b} == 0) | ({b} == -1))" if signed else f"({b} == 0)"
        safe = f"({a} {sym} tl.where({bad}, 1, {b}))"
        if u.op is Ops.MOD:
            return f"tl.where({bad}, 0, {safe})"
        if not signed:
            return f"tl.where({bad}, 0, {safe})"
        return f"tl.where({b} == 0, 0, tl.where({b} == -1, -{a}, {safe}))"

    def render_cast(self, u: UOp, arg: str) -> str:
        src_dt, dst_dt = u.src[0].dtype, u.dtype
        if dst_dt == dtypes.bool:
            return f"({arg} != 0)"
        if dtypes.is_int(dst_dt) and dtypes.is_float(src_dt):
            # NaN and inf have no integer value: the spec makes them 0 (LLVM leaves them undefined)
            return f"tl.where(({arg} != {arg}) | ({arg} == INF) | ({arg} == -INF), 0, {arg}).to({self.tl_type(dst_dt)})"
        return f"{arg}.to({self.tl_type(dst_dt)})"

    def render_bitcast(self, u: UOp, arg: str) -> str:
        src_dt, dst_dt = u.src[0].dtype, u.dtype
        if src_dt.itemsize != dst_dt.itemsize:
            raise RenderError(f"bitcast between sizes {src_dt.itemsize} and {dst_dt.itemsize}")
        return f"{arg}.to({self.tl_type(dst_dt)}, bitcast=True)"

    # ---------------------------------------------------------------------------------------------- the loop

    def render(self, name: str, uops: list[UOp]) -> str:
        return _KernelWriter(self, kernel_identifier(name), uops).write()


class _KernelWriter:
    """The state of rendering one kernel: names, the lanes of each value, the lines written so far."""

    def __init__(self, renderer: TritonRenderer, name: str, uops: list[UOp]) -> None:
        self.r = renderer
        self.name = name
        self.uops = uops
        self.names: dict[UOp, str] = {}
        self.accesses: dict[UOp, _Access] = {}
        self.counters: dict[str, int] = {}
        self.body: list[str] = []
        self.depth = 1
        # lines written at each open loop's depth, to put `pass` into an empty loop
        self.loop_starts: list[int] = []
        self.helpers: set[str] = set()
        # the work-group's local ids: dimension -> (size, padded size)
        self.local: dict[int, tuple[int, int]] = {}
        for u in uops:
            if u.op is Ops.SPECIAL and _special_name(u).startswith("lidx"):
                dim = _special_dim(u)
                if u.src[0].op is not Ops.CONST:
                    raise RenderError(f"{_special_name(u)} needs a constant size to be a Triton block dimension")
                self.local[dim] = (int(u.src[0].arg), next_pow2(int(u.src[0].arg)))
        if self.local and sorted(self.local) != list(range(len(self.local))):
            raise RenderError(f"local ids {sorted(self.local)} are not numbered 0..n-1")
        self.rank = len(self.local)
        lanes = math.prod(padded for _, padded in self.local.values())
        self.block_loops = _block_loops(uops, max(1, CHUNK_ELEMENTS // lanes))
        # block axes, outermost first: the local ids from the last to lidx0, then the reduce loops' block axis
        self.axes = [*reversed(range(self.rank)), *([BLOCK_DIM] if self.block_loops else [])]
        self.open_block: tuple[UOp, _BlockLoop] | None = None
        # the ops that only feed a block loop's update (rendered by the update itself)
        self.folded = {value for loop in self.block_loops.values() for _, _, _, value in loop.updates.values()}
        self.dims = _lane_dims(uops, self.block_loops)

    # ------------------------------------------------------------------------------------------ helpers

    def new_name(self, prefix: str) -> str:
        self.counters[prefix] = self.counters.get(prefix, 0) + 1
        return f"{prefix}{self.counters[prefix] - 1}"

    def emit(self, line: str) -> None:
        self.body.append("    " * self.depth + line)

    def ref(self, u: UOp, weak: bool = False) -> str:
        if u.op is Ops.CONST:
            return self.r.render_const(u.arg, u.dtype, weak)
        if u not in self.names:
            raise RenderError(f"{u.op.name} is used before it is defined")
        return self.names[u]

    def operands(self, u: UOp) -> list[str]:
        """The ALU op's operands; a constant is a weak literal when a non-constant operand of its dtype sets it."""
        srcs = u.src[1:] if u.op is Ops.WHERE else u.src
        # float-only ops go through tl.math functions and .to(): their constants are typed scalars
        weak_ok = u.op in INFIX or u.op in (Ops.WHERE, Ops.MAX, Ops.NEG) or not dtypes.is_float(u.dtype)
        typed = {s.dtype for s in srcs if s.op is not Ops.CONST} if weak_ok else set()
        args = [self.ref(s, weak=s.dtype in typed) for s in srcs]
        return [self.ref(u.src[0]), *args] if u.op is Ops.WHERE else args

    def widened_bools(self, u: UOp, args: list[str]) -> list[str]:
        """Bool operands of a bitwise op, widened to the result's lanes: Triton's interpreter makes int32 data of a
        scalar bool it broadcasts, which numpy's bitwise ops then refuse next to a bool block."""
        if u.dtype != dtypes.bool or u.op not in BOOL_BITWISE or not self.dims[u]:
            return args
        shape = self.shape(self.dims[u])
        widened = []
        for src, arg in zip(u.src, args, strict=True):
            if src.op is Ops.CONST:
                arg = self.r.render_full(shape, src.arg, dtypes.bool)
            elif self.dims.get(src, frozenset()) != self.dims[u]:
                arg = f"(tl.broadcast_to(({arg}).to(tl.int8), {shape}) != 0)"
            widened.append(arg)
        return widened

    def shape(self, dims: frozenset[int]) -> str:
        """The block shape of a value with lanes along `dims` (1 along the other axes); lidx0 is the last axis."""
        if not dims:
            return "[]"
        return "[" + ", ".join(str(self.axis_size(d)) if d in dims else "1" for d in self.axes) + "]"

    def axis_size(self, dim: int) -> int:
        if dim == BLOCK_DIM:
            assert self.open_block is not None, "a block value outside its loop"
            return self.open_block[1].size
        return self.local[dim][1]

    def arange(self, size: int, dim: int) -> str:
        """``tl.arange(0, size)`` along the axis of `dim`."""
        if len(self.axes) == 1:
            return f"tl.arange(0, {size})"
        return f"tl.arange(0, {size})[{', '.join(':' if d == dim else 'None' for d in self.axes)}]"

    def lane_mask(self, dims: frozenset[int]) -> str | None:
        """The padding lanes of `dims` (a local size that is not a power of two) are masked out of memory ops."""
        parts = [
            f"(lidx{d} < {self.local[d][0]})" for d in sorted(dims) if d >= 0 and self.local[d][0] != self.local[d][1]
        ]
        if BLOCK_DIM in dims and self.open_block is not None and self.open_block[1].masked:
            loop = self.open_block[0]
            parts.append(f"({self.names[loop]} < {self.ref(loop.src[0], weak=True)})")
        return " & ".join(parts) if parts else None

    def assign(self, u: UOp, prefix: str, expr: str) -> None:
        var = self.new_name(prefix)
        self.names[u] = var
        self.emit(f"{var} = {expr}")

    # ------------------------------------------------------------------------------------------ ops

    def special(self, u: UOp) -> None:
        name = _special_name(u)
        self.names[u] = name
        dim = _special_dim(u)
        # ids of a 64-bit index kernel are widened at once, so no index arithmetic is done in int32
        wide = ".to(tl.int64)" if u.dtype == dtypes.int64 else ""
        if name.startswith("gidx"):
            self.emit(f"{name} = tl.program_id({dim}){wide}")
            return
        if not name.startswith("lidx"):
            raise RenderError(f"unknown SPECIAL {name!r}: expected gidx or lidx followed by a dimension 0-2")
        self.emit(f"{name} = {self.arange(self.local[dim][1], dim)}{wide}")

    def index(self, u: UOp) -> None:
        target = u.src[0]
        gate = self.ref(u.src[2]) if len(u.src) > 2 else None
        if target.op is Ops.DEFINE_REG:
            if u.src[1].op is not Ops.CONST:
                raise RenderError("TritonRenderer needs registers indexed by constants (one variable per slot)")
            self.accesses[u] = _Access(f"{self.names[target]}_{u.src[1].arg}", gate, target, frozenset())
            return
        if target.op is not Ops.DEFINE_GLOBAL:
            raise RenderError(f"TritonRenderer has no local memory ({target.op.name}): it declares has_shared=False")
        ptr = f"{self.names[target]} + {self.ref(u.src[1], weak=True)}"
        ptr_dims = self.dims.get(u.src[1], frozenset())
        compare = len(u.src) < 3 or u.src[2].op in GroupOp.Comparison
        gate_dims = self.dims.get(u.src[2], frozenset()) if len(u.src) > 2 else frozenset()
        self.accesses[u] = _Access(ptr, gate, target, ptr_dims, compare, gate_dims)

    def memory_pointer(self, acc: _Access, dims: frozenset[int]) -> tuple[str, str | None]:
        """The pointer broadcast to the lanes of the access (`dims`) and the mask: gate and padding lanes."""
        ptr = acc.ptr
        if dims != acc.ptr_dims:
            ptr = f"tl.broadcast_to({ptr}, {self.shape(dims)})"
        lanes = self.lane_mask(dims)
        masks = [m for m in (acc.gate, lanes) if m is not None]
        if not masks:
            return ptr, None
        mask = " & ".join(f"({m})" for m in masks)
        mask_dims = acc.gate_dims | (dims if lanes is not None else frozenset())
        # Triton's interpreter splats a scalar bool into int32 data, and its loads and stores want bool masks: a mask
        # is widened as int32 and compared, and a mask made by & or | is compared again (both fold away on the GPU)
        if mask_dims != dims:
            return ptr, f"tl.broadcast_to(({mask}).to(tl.int32), {self.shape(dims)}) != 0"
        return ptr, mask if len(masks) == 1 and acc.gate_is_compare else f"({mask}) != 0"

    def load(self, u: UOp) -> None:
        acc = self.accesses[u.src[0]]
        if acc.target.op is Ops.DEFINE_REG:
            # a copy: the register may be assigned again while this value is still read
            self.assign(u, "val", acc.ptr)
            return
        ptr, mask = self.memory_pointer(acc, self.dims[u])
        expr = f"tl.load({ptr})" if mask is None else f"tl.load({ptr}, mask={mask}, other=0)"
        # bool memory is bytes
        self.assign(u, "val", f"({expr} != 0)" if u.dtype == dtypes.bool else expr)

    def block_range(self, u: UOp, loop: _BlockLoop) -> None:
        name = self.names[u] = f"ridx{u.arg[0]}"
        end = u.src[0]
        count = (
            str(-(-end.arg // loop.size))
            if end.op is Ops.CONST
            else f"({self.ref(end)} + {loop.size - 1}) // {loop.size}"
        )
        self.emit(f"for chunk{u.arg[0]} in range({count}):")
        self.depth += 1
        self.loop_starts.append(len(self.body) + 1)
        self.open_block = (u, loop)
        chunk = f"tl.cast(chunk{u.arg[0]}, tl.int64)" if u.dtype == dtypes.int64 else f"chunk{u.arg[0]}"
        self.emit(f"{name} = {chunk} * {loop.size} + {self.arange(loop.size, BLOCK_DIM)}")

    def block_reduce(self, value: str, dims: frozenset[int], op: Ops) -> str:
        """Combine `value` along the block axis: into a scalar when it has no other lanes, else keeping the axis
        (size 1: every block of the kernel has the same rank)."""
        if dims == {BLOCK_DIM}:
            return f"tl.reduce({value}, None, {COMBINE[op]})"
        return f"tl.reduce({value}, {len(self.axes) - 1}, {COMBINE[op]}, keep_dims=True)"

    def block_update(self, u: UOp, reg: str) -> None:
        """`acc = op(acc, x)` for a whole chunk: the chunk's x reduced (a sum or a max), then combined with acc."""
        assert self.open_block is not None
        op, x, _, value = self.open_block[1].updates[u]
        dt = value.dtype
        dims = self.dims[x] | {BLOCK_DIM}
        xs = self.r.render_full(self.shape(dims), x.arg, dt) if x.op is Ops.CONST else self.ref(x)
        if self.dims.get(x, frozenset()) != dims and x.op is not Ops.CONST:
            xs = f"tl.broadcast_to({xs}, {self.shape(dims)})"
        identity = 0 if op is Ops.ADD else dtypes.min(dt)
        mask = self.lane_mask(frozenset({BLOCK_DIM}))
        if mask is not None:
            xs = f"tl.where({mask}, {xs}, {self.r.render_const(identity, dt, weak=True)})"
        chunk = self.new_name("part")
        self.emit(f"{chunk} = {xs}")
        # tl.reduce with the standard library's combine functions (what tl.sum and tl.max use): the interpreter
        # recognizes them and reduces with numpy, whether or not TRITON_INTERPRET was set when triton was imported
        # (without it tl.sum is a JIT function the interpreter can't call). The sum stays in the register's dtype
        # (wrapping, for integers)
        red = self.new_name("red")
        self.emit(f"{red} = {self.block_reduce(chunk, dims, op)}.to({self.r.tl_type(dt)})")
        if op is Ops.MAX and dtypes.is_float(dt):
            # the max combine skips NaN; MAX propagates it
            nan = f"{self.block_reduce(f'({chunk} != {chunk}).to(tl.int32)', dims, Ops.MAX)} > 0"
            self.emit(f"{red} = tl.where({nan}, {self.r.render_const(math.nan, dt)}, {red})")
        self.emit(f"{reg} = {self.r.render_alu(value, [reg, red])}")

    def store(self, u: UOp) -> None:
        acc = self.accesses[u.src[0]]
        value_uop = u.src[1]
        if self.open_block is not None and u in self.open_block[1].updates:
            self.block_update(u, acc.ptr)
            return
        if acc.target.op is Ops.DEFINE_REG:
            reg_dims = self.dims[acc.target]
            if value_uop.op is Ops.CONST:
                value = self.r.render_full(self.shape(reg_dims), value_uop.arg, value_uop.dtype)
            elif self.dims[value_uop] != reg_dims:
                value = f"tl.broadcast_to({self.ref(value_uop)}, {self.shape(reg_dims)})"
            else:
                value = self.ref(value_uop)
            self.emit(
                f"{acc.ptr} = {value}" if acc.gate is None else f"{acc.ptr} = tl.where({acc.gate}, {value}, {acc.ptr})"
            )
            return
        dims = self.dims[u]
        ptr, mask = self.memory_pointer(acc, dims)
        value = self.ref(value_uop)
        if value_uop.dtype == dtypes.bool:
            value = f"{value}.to(tl.uint8)"
        self.emit(f"tl.store({ptr}, {value})" if mask is None else f"tl.store({ptr}, {value}, mask={mask})")

    # ------------------------------------------------------------------------------------------ kernel

    def write(self) -> str:
        params: list[tuple[int, str]] = []
        var_params: list[tuple[str, str]] = []
        signature: dict[str, str] = {}
        for u in self.uops:
            if u.op in (Ops.CONST, Ops.NOOP):
                continue
            if not isinstance(u.dtype, PtrDType) and u.dtype.count > 1:
                raise RenderError(f"TritonRenderer renders no vectors ({u.op.name} of {u.dtype}): max_vector_width=1")
            if u.op is Ops.DEFINE_GLOBAL:
                assert isinstance(u.dtype, PtrDType)
                self.names[u] = f"data{u.arg}"
                if u.dtype.base.scalar not in SIGNATURE_TYPES or u.dtype.base.count > 1:
                    raise RenderError(f"TritonRenderer has no pointer type for {u.dtype.base}")
                params.append((u.arg, self.names[u]))
                signature[self.names[u]] = "*" + SIGNATURE_TYPES[u.dtype.base.scalar]
            elif u.op is Ops.DEFINE_VAR:
                name = self.names[u] = "var_" + re.sub(r"\W", "_", u.arg[0])
                # the value comes as int32; in a 64-bit index kernel it is widened before any arithmetic
                param = f"{name}_i32" if u.dtype == dtypes.int64 else name
                var_params.append((u.arg[0], param))
                signature[param] = "i32"
                if param != name:
                    self.emit(f"{name} = {param}.to(tl.int64)")
            elif u.op is Ops.DEFINE_REG:
                self.names[u] = f"acc{u.arg}"
            elif u.op is Ops.SPECIAL:
                self.special(u)
            elif u.op is Ops.RANGE and u in self.block_loops:
                self.block_range(u, self.block_loops[u])
            elif u.op is Ops.RANGE:
                name = self.names[u] = f"ridx{u.arg[0]}"
                if u.dtype == dtypes.int64:
                    # a 64-bit index kernel: the counter is widened before any arithmetic (Triton's loop variable is
                    # int32, and a constant past 2**31 combined with it would not fit)
                    self.emit(f"for {name}_i32 in range({self.ref(u.src[0], weak=True)}):")
                    self.depth += 1
                    self.loop_starts.append(len(self.body) + 1)
                    self.emit(f"{name} = tl.cast({name}_i32, tl.int64)")
                else:
                    self.emit(f"for {name} in range({self.ref(u.src[0], weak=True)}):")
                    self.depth += 1
                    self.loop_starts.append(len(self.body))
            elif u.op is Ops.END:
                if self.loop_starts.pop() == len(self.body):
                    self.emit("pass")
                self.depth -= 1
                if self.open_block is not None and self.open_block[0] is u.src[1]:
                    self.open_block = None
            elif u in self.folded:
                continue
            elif u.op is Ops.INDEX:
                self.index(u)
            elif u.op is Ops.LOAD:
                self.load(u)
            elif u.op is Ops.STORE:
                self.store(u)
            elif u.op in GroupOp.ALU:
                if u.op is Ops.POW:
                    self.helpers.add(POW_HELPER)
                self.assign(u, "alu", self.r.render_alu(u, self.widened_bools(u, self.operands(u))))
            elif u.op is Ops.CAST:
                self.assign(u, "cast", self.r.render_cast(u, self.ref(u.src[0])))
            elif u.op is Ops.BITCAST:
                self.assign(u, "cast", self.r.render_bitcast(u, self.ref(u.src[0])))
            elif u.op in (Ops.DEFINE_LOCAL, Ops.BARRIER):
                raise RenderError(f"TritonRenderer has no local memory or barriers ({u.op.name}): has_shared=False")
            elif u.op in (Ops.VECTORIZE, Ops.GEP):
                raise RenderError(f"TritonRenderer renders no vectors ({u.op.name}): max_vector_width=1")
            else:
                raise RenderError(f"TritonRenderer can't render {u.op.name}")
        # symbolic values are passed in the order of ProgramSpec.vars: sorted by name
        ordered = [p for _, p in sorted(params)] + [p for _, p in sorted(var_params)]
        # in the kernel's parameter order: the runtime pairs it with the arguments
        signature = {p: signature[p] for p in ordered}
        block = [self.local[d][1] for d in sorted(self.local)]
        # the largest block: the work-group's lanes times the widest chunk of a block loop
        elements = math.prod(block) * max((loop.size for loop in self.block_loops.values()), default=1)
        # a warp per 256 elements (8 a thread), from 1 to 8 warps
        num_warps = max(1, min(8, elements // 256))
        lines = [
            HEADER,
            f"KERNEL = {self.name!r}",
            f"SIGNATURE = {signature!r}",
            f"BLOCK = {tuple(block)!r}",
            f"NUM_WARPS = {num_warps}",
            *sorted(self.helpers),
            "",
            "@triton.jit",
            f"def {self.name}({', '.join(ordered)}):",
            *(self.body or ["    pass"]),
            "",
        ]
        return "\n".join(lines)


# -------------------------------------------------------------------------------------------------- analysis


def _special_name(u: UOp) -> str:
    name = u.arg[0] if isinstance(u.arg, tuple) else u.arg
    if not isinstance(name, str):
        raise RenderError(f"SPECIAL needs a name like 'gidx0', got arg {u.arg!r}")
    return name


def _special_dim(u: UOp) -> int:
    name = _special_name(u)
    digits = name.lstrip("gidxl")
    if digits not in ("0", "1", "2"):
        raise RenderError(f"unknown SPECIAL {name!r}: expected gidx or lidx followed by a dimension 0-2")
    return int(digits)


def _reduce_update(store: UOp) -> tuple[Ops, UOp, UOp, UOp] | None:
    """(op, x, current, value) when `store` is `reg[k] = op(reg[k], x)` with op ADD or MAX, else None."""
    index, value = store.src[0], store.src[1]
    if index.src[0].op is not Ops.DEFINE_REG or len(index.src) != 2 or index.src[1].op is not Ops.CONST:
        return None
    # (a store's sources past the value are ordering deps: the loops an update runs in are fine, a gate is not)
    if (
        value.op not in (Ops.ADD, Ops.MAX)
        or value.dtype == dtypes.bool
        or any(d.op is not Ops.RANGE for d in store.src[2:])
    ):
        return None
    currents = [s for s in value.src if s.op is Ops.LOAD and s.src[0] is index]
    if len(currents) != 1:
        return None
    x = value.src[1] if value.src[0] is currents[0] else value.src[0]
    return value.op, x, currents[0], value


def _block_loops(uops: list[UOp], max_size: int) -> dict[UOp, _BlockLoop]:
    """The innermost loops whose only effects are reduce updates of registers (each register read in the loop only
    by its own update, and no update's x reading one): they can run a block of iterations at a time."""
    found: dict[UOp, _BlockLoop] = {}
    ends = {u.src[1]: i for i, u in enumerate(uops) if u.op is Ops.END}
    for i, u in enumerate(uops):
        if u.op is not Ops.RANGE or u not in ends or max_size < 2:
            continue
        body = uops[i + 1 : ends[u]]
        if any(b.op in (Ops.RANGE, Ops.IF, Ops.BARRIER) for b in body):
            continue
        updates = {b: _reduce_update(b) for b in body if b.op is Ops.STORE}
        if not updates or any(v is None for v in updates.values()):
            continue
        found_updates = {b: v for b, v in updates.items() if v is not None}
        currents = {v[2] for v in found_updates.values()}
        values = {v[3] for v in found_updates.values()}
        reads_register = any(
            b.op is Ops.LOAD and b.src[0].src[0].op is Ops.DEFINE_REG and b not in currents for b in body
        )
        # the current value and the op feed only the update
        shared = any(
            s in currents and b not in values or s in values and b not in found_updates for b in body for s in b.src
        )
        if reads_register or shared or any(c in v[1].toposort() for v in found_updates.values() for c in currents):
            continue
        end = u.src[0]
        size = min(next_pow2(end.arg), max_size) if end.op is Ops.CONST else max_size
        if size < 2:
            continue
        masked = end.op is not Ops.CONST or end.arg % size != 0
        found[u] = _BlockLoop(size, masked, found_updates)
    return found


def _lane_dims(uops: list[UOp], block_loops: dict[UOp, _BlockLoop]) -> dict[UOp, frozenset[int]]:
    """For every value: the local dimensions (lidx<d>) it varies along, and BLOCK_DIM inside a block loop. A register
    gets the union of everything stored into it (less BLOCK_DIM: the updates reduce it away), which can depend on its
    own earlier value, so the walk repeats until nothing grows."""
    dims: dict[UOp, frozenset[int]] = {u: frozenset() for u in uops if u.op is Ops.DEFINE_REG}
    empty: frozenset[int] = frozenset()
    while True:
        changed = False
        for u in uops:
            if u.op is Ops.SPECIAL:
                dims[u] = frozenset({_special_dim(u)}) if _special_name(u).startswith("lidx") else empty
            elif u.op is Ops.DEFINE_REG:
                continue
            elif u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_REG:
                dims[u] = dims[u.src[0].src[0]]
            elif u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_REG:
                reg = u.src[0].src[0]
                grown = (dims[reg] | dims.get(u.src[1], empty) | dims.get(u.src[0], empty)) - {BLOCK_DIM}
                if grown != dims[reg]:
                    dims[reg] = grown
                    changed = True
                dims[u] = grown
            elif u.op is Ops.INDEX and u.src[0].op is Ops.DEFINE_REG:
                # the gate's lanes only: the slot is a constant
                dims[u] = dims.get(u.src[2], empty) if len(u.src) > 2 else empty
            elif u.op is Ops.LOAD:
                dims[u] = dims.get(u.src[0], empty)
            elif u.op is Ops.STORE:
                dims[u] = dims.get(u.src[0], empty) | dims.get(u.src[1], empty)
            elif u.op is Ops.RANGE:
                dims[u] = frozenset({BLOCK_DIM}) if u in block_loops else empty
            elif u.op is Ops.END:
                dims[u] = empty
            else:
                dims[u] = frozenset().union(*(dims.get(s, empty) for s in u.src))
        if not changed:
            return dims
