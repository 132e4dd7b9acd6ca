"""CStyleRenderer: the table-driven renderer shared by C-family backends (C on the CPU, OpenCL, CUDA).

The engine (`CStyleRenderer.render`) walks the linear program once and asks `render_rules`, a PatternMatcher of
``(ctx, x) -> code`` rules, for each UOp's code; `pm_cstyle` holds the rules for every op of the program spec (IF,
WMMA, kernel-scope local memory, barriers, vectors, parallel/sum/max loops from `uopkit.renderer.loops`). A backend is
its capabilities (``caps``) plus class attributes (type names, qualifiers, math functions, pragmas), a few overridden
``render_*`` methods, and, where an op needs other code, its own rules in front: ``render_rules = pm_mine + pm_cstyle``.
Every value gets its own named variable; constants are written inline.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from uopkit.dtype import DType, PtrDType, dtypes
from uopkit.renderer import Renderer, TensorCore, mask_bytes
from uopkit.renderer.loops import is_scalar_register, loop_roles
from uopkit.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat


class RenderError(NotImplementedError):
    pass


def _binop(sym: str) -> Callable[..., str]:
    return lambda a, b, dt: f"({a}{sym}{b})"


# what `CStyleRenderer.render` skips (constants are written where used), and the ops that close and open a block
_NOT_RENDERED = frozenset({Ops.CONST, Ops.NOOP})
_CLOSES_BLOCK = frozenset({Ops.END, Ops.ENDIF})
_OPENS_BLOCK = frozenset({Ops.RANGE, Ops.IF})
# the ops the per-op rendering (`render_alu`, `ref`, `do_alu`) tests for, as module constants for the same reason
_ADD, _MUL, _SUB, _NEG, _RECIP, _SHL = Ops.ADD, Ops.MUL, Ops.SUB, Ops.NEG, Ops.RECIP, Ops.SHL
_IDIV, _MOD, _MAX, _WHERE, _MULACC, _CONST = Ops.IDIV, Ops.MOD, Ops.MAX, Ops.WHERE, Ops.MULACC, Ops.CONST
_DIV_MOD = frozenset({Ops.IDIV, Ops.MOD})
# (ops that render as operators on vectors too: ?: or a mask's bits, (a*b)+c, -a, 1/a)
_OPERATOR_LIKE = frozenset({Ops.WHERE, Ops.MULACC, Ops.NEG, Ops.RECIP})


class CStyleRenderer(Renderer):
    kernel_prefix: ClassVar[str] = ""
    buffer_prefix: ClassVar[str] = ""
    buffer_suffix: ClassVar[str] = " restrict"
    arg_int_prefix: ClassVar[str] = "const int"
    barrier: ClassVar[str] = ""
    # how a parallel loop is marked (CPU threads); empty when the backend has none
    parallel_for: ClassVar[str] = ""
    # how a loop that only sums into scalar accumulators is marked for SIMD (the sum may then be reassociated
    # across vector lanes, like split accumulators); "{vars}" is replaced by the accumulators; empty: not marked
    simd_sum_loop: ClassVar[str] = ""
    # the same for loops that only take the max into float accumulators: "{vars}" the accumulators, "{flags}" an int
    # per accumulator that records a NaN. In those loops MAX is rendered as a plain compare (one max instruction,
    # a short dependency chain) and the flag puts the NaN back after the loop, so the result is MAX's
    simd_max_loop: ClassVar[str] = ""
    float_suffix: ClassVar[str] = "f"
    # registers as C variables: a one-slot register is a plain variable, a register only indexed by constants one
    # variable per slot (see `split_registers`), declared where first written (each thread of a parallel loop gets
    # its own); False: every register is an array declared where the program defines it
    register_variables: ClassVar[bool] = True
    # math functions (and every ALU op) apply to whole vectors; False: only the `infix` operators do
    vector_math: ClassVar[bool] = False
    # op -> code rules run by `render` (set to `pm_cstyle` below the class)
    render_rules: ClassVar[PatternMatcher]
    type_map: ClassVar[dict[DType, str]] = {
        dtypes.bool: "_Bool",
        dtypes.int8: "signed char",
        dtypes.uint8: "unsigned char",
        dtypes.int16: "short",
        dtypes.uint16: "unsigned short",
        dtypes.int32: "int",
        dtypes.uint32: "unsigned int",
        dtypes.int64: "long long",
        dtypes.uint64: "unsigned long long",
        dtypes.float16: "_Float16",
        dtypes.float32: "float",
        dtypes.float64: "double",
    }
    # math functions by dtype; float16 computes in float32
    math_funcs: ClassVar[dict[Ops, str]] = {
        Ops.EXP2: "exp2",
        Ops.LOG2: "log2",
        Ops.SIN: "sin",
        Ops.SQRT: "sqrt",
        Ops.TRUNC: "trunc",
        Ops.POW: "pow",
    }
    infix: ClassVar[dict[Ops, str]] = {
        Ops.ADD: "+",
        Ops.SUB: "-",
        Ops.MUL: "*",
        Ops.FDIV: "/",
        Ops.CMPLT: "<",
        Ops.CMPNE: "!=",
        Ops.CMPEQ: "==",
        Ops.XOR: "^",
        Ops.OR: "|",
        Ops.AND: "&",
        Ops.SHL: "<<",
        Ops.SHR: ">>",
    }

    # ---------------------------------------------------------------------------------------------- pieces

    def render_dtype(self, dt: DType) -> str:
        if isinstance(dt, PtrDType):
            return self.render_dtype(dt.base) + "*"
        if dt.count > 1:
            return self.render_vector_type(dt)
        if dt not in self.type_map:
            raise RenderError(
                f"{type(self).__name__} has no type for {dt}: add it to type_map (or drop it from supported_dtypes)"
            )
        return self.type_map[dt]

    def render_const(self, x: object, dt: DType) -> str:
        if dt == dtypes.bool:
            return "1" if x else "0"
        if dtypes.is_float(dt):
            assert isinstance(x, float | int)
            fx = float(x)
            if math.isnan(fx):
                val = "NAN"
            elif math.isinf(fx):
                val = "INFINITY" if fx > 0 else "-INFINITY"
            else:
                val = repr(fx) + (self.float_suffix if dt != dtypes.float64 else "")
            # (NAN and INFINITY are float: a double one is cast, else a bit cast of it reads 4 bytes as 8)
            plain = dt == dtypes.float32 or (dt == dtypes.float64 and math.isfinite(fx))
            return val if plain else f"(({self.render_dtype(dt)}){val})"
        if dt in (dtypes.int64,):
            # -2**63 has no literal: 9223372036854775808 doesn't fit a long long (C reads it as unsigned)
            return "(-9223372036854775807ll-1)" if x == dtypes.min(dtypes.int64) else f"{x}ll"
        if dt in (dtypes.uint64,):
            return f"{x}ull"
        if dt in (dtypes.uint32,):
            return f"{x}u"
        if dt == dtypes.int32 and x == dtypes.min(dtypes.int32):
            return "(-2147483647-1)"
        return f"(({self.render_dtype(dt)}){x})" if dt.itemsize < 4 else str(x)

    def render_math(self, op: Ops, dt: DType, args: list[str]) -> str:
        name = self.math_funcs[op]
        if dt == dtypes.float64:
            return f"{name}({', '.join(args)})"
        call = f"{name}f({', '.join(f'(float){a}' if dt != dtypes.float32 else a for a in args)})"
        return call if dt == dtypes.float32 else f"(({self.render_dtype(dt)}){call})"

    def render_alu(self, u: UOp, args: list[str]) -> str:
        dt, op = u.dtype, u.op
        if op in self.math_funcs:
            return self.render_math(op, dt, args)
        if op is _NEG:
            return f"(-{args[0]})"
        if op is _RECIP and dt.count > 1:
            # (a scalar operand of a vector operator is each lane's)
            return f"({self.render_const(1.0, dt.scalar)}/{args[0]})"
        if op is _RECIP:
            return f"(1/{args[0]})" if dt == dtypes.float64 else f"(({self.render_dtype(dt)})1/{args[0]})"
        if op in _DIV_MOD:
            sym = "/" if op is _IDIV else "%"
            divisor = u.src[1]
            if divisor.op is _CONST and divisor.arg not in (0, -1):
                return f"({args[0]}{sym}{args[1]})"
            # integer division by zero (and INT_MIN / -1) traps in C; define x/0 as 0 and x/-1 as -x instead (an
            # unsigned divisor can't be -1: `b == -1` would be true for its all-ones value)
            a, b = args
            if dtypes.is_unsigned(divisor.dtype.scalar):
                return f"(({b})==0?0:({a}){sym}({b}))"
            if op is _IDIV:
                return f"(({b})==0?0:(({b})==-1?-({a}):({a})/({b})))"
            return f"(({b})==0||({b})==-1?0:({a})%({b}))"
        if op is _MAX:
            a, b = args
            if dtypes.is_float(dt):
                # NaN in either operand gives NaN, as numpy's maximum
                return f"(({a}>{b}||{a}!={a})?{a}:{b})"
            return f"(({a}>{b})?{a}:{b})"
        if op is _WHERE and u.src[0].dtype.count > 1:
            # a mask of lanes as wide as the values (a vector comparison's -1/0) picks lanes by their bits: C's ?:
            # takes no vector
            mask, vec = self.render_mask_type(u.src[0].dtype, dt.scalar.itemsize), self.render_vector_type(dt)
            return f"(({vec})((({mask}){args[1]}&{args[0]})|(({mask}){args[2]}&~{args[0]})))"
        if op is _WHERE:
            return f"({args[0]}?{args[1]}:{args[2]})"
        if op in _WRAPPING_OPS and dt in _UNSIGNED_OF and _may_wrap(u):
            return self.render_wrapping(u, args)
        if op is _MULACC:
            return f"(({args[0]}*{args[1]})+{args[2]})"
        if op in self.infix:
            if dt == dtypes.bool and op in (_ADD, _MUL):
                return f"({args[0]}{'|' if op is _ADD else '&'}{args[1]})"
            return f"({args[0]}{self.infix[op]}{args[1]})"
        raise RenderError(f"{type(self).__name__} can't render {op}")

    def render_wrapping(self, u: UOp, args: list[str]) -> str:
        """A signed int32/int64 +, -, *, negation, shift or multiply-add that may overflow, computed in the unsigned
        type of its width and converted back: it wraps around as torch's integers do, where C leaves signed overflow
        undefined and compilers assume it away (an int32 hash `(c * 805459861 + k) & 0x7FFFFFFF` lost its mask)."""
        ut, st = self.render_dtype(_UNSIGNED_OF[u.dtype]), self.render_dtype(u.dtype)
        a = [f"({ut})({x})" for x in args]
        if u.op is Ops.NEG:
            return f"(({st})(0-{a[0]}))"
        if u.op is Ops.MULACC:
            return f"(({st})({a[0]}*{a[1]}+{a[2]}))"
        return f"(({st})({a[0]}{self.infix[u.op]}{a[1]}))"

    def render_cast(self, u: UOp, arg: str) -> str:
        src_dt = u.src[0].dtype
        if u.dtype == dtypes.bool:
            return f"({arg}!=0)"
        if dtypes.is_int(u.dtype) and dtypes.is_float(src_dt):
            # NaN/inf to int is undefined in C: make it 0 like a masked value rather than garbage
            return f"(({arg})!=({arg})?0:({self.render_dtype(u.dtype)})({arg}))"
        return f"(({self.render_dtype(u.dtype)})({arg}))"

    def render_bitcast(self, u: UOp, arg: str) -> str:
        src = self.render_dtype(u.src[0].dtype)
        dst = self.render_dtype(u.dtype)
        return f"({{ {src} bc_in = {arg}; {dst} bc_out; __builtin_memcpy(&bc_out, &bc_in, sizeof(bc_out)); bc_out; }})"

    def render_parallel_for(self, iterations: int | None) -> str:
        """The line that marks a parallel loop of `iterations` iterations (None: a symbolic count): `parallel_for`."""
        return self.parallel_for

    def render_loop(self, ctx: RenderContext, x: UOp, name: str, parallel: bool) -> str:
        """The line that opens the loop RANGE `x`: counter `name` from 0 up to its bound. `parallel`: its iterations
        may run on different threads (the CPU backend runs a share of them per call)."""
        return f"for ({self.render_dtype(x.dtype)} {name} = 0; {name} < {ctx.ref(x.src[0])}; {name}++) {{"

    def render_kernel(self, name: str, body: list[str], params: list[str], uops: list[UOp] | None = None) -> str:
        lines = [f"{self.kernel_prefix}void {name}({', '.join(params)}) {{", *body, "}"]
        return "\n".join(lines)

    # ------------------------------------------------------------------------------------------ vectors
    # C uses GCC's vector extensions (typedefs in the preamble); OpenCL overrides these with its own syntax

    def render_vector_type(self, dt: DType) -> str:
        if dt.scalar not in self.type_map:
            raise RenderError(f"{type(self).__name__} has no vector type for {dt}")
        return f"{dt.scalar.name}{dt.count}"

    def render_mask_type(self, dt: DType, lane_bytes: int) -> str:
        """The type of a mask (a bool vector `dt`, see `RendererCaps.vector_ops`) of `lane_bytes`-wide lanes: boolN
        for 4-byte lanes, boolN_64 for 8-byte ones."""
        name = self.render_vector_type(dt)
        return name if lane_bytes == 4 else f"{name}_{8 * lane_bytes}"

    def vector_typedefs(self, uops: list[UOp]) -> list[str]:
        vecs = {u.dtype for u in uops if not isinstance(u.dtype, PtrDType) and u.dtype.count > 1}
        # a bool vector is a vector comparison's result: a mask of lanes as wide as those compared, -1 true and 0 false
        # (RendererCaps), one C type per width (a WHERE's mask is cast to its values' width)
        masks = {(u.dtype, mask_bytes(u)) for u in uops if _is_mask(u.dtype)}
        selects = [u for u in uops if u.op is Ops.WHERE and _is_mask(u.src[0].dtype)]
        masks |= {(u.src[0].dtype, u.dtype.scalar.itemsize) for u in selects}
        lines = [
            f"typedef {_MASK_LANE[size]} {self.render_mask_type(v, size)} "
            f"__attribute__((vector_size({size * v.count})));"
            for v, size in sorted(masks, key=str)
        ]
        return lines + [
            f"typedef {self.type_map[v.scalar]} {self.render_vector_type(v)} "
            f"__attribute__((vector_size({v.scalar.itemsize * v.count})));"
            for v in sorted(vecs, key=str)
            if v.scalar != dtypes.bool
        ]

    def render_vectorize(self, dt: DType, items: list[str]) -> str:
        return f"(({self.render_vector_type(dt)}){{{', '.join(items)}}})"

    def render_gep(self, vec: str, i: int) -> str:
        return f"{vec}[{i}]"

    def render_vector_load(self, dt: DType, address: str) -> str:
        t = self.render_vector_type(dt)
        return f"({{ {t} vl; __builtin_memcpy(&vl, &{address}, sizeof(vl)); vl; }})"

    def render_vector_store(self, address: str, value: str) -> str:
        return f"{{ __typeof__({value}) vs = {value}; __builtin_memcpy(&{address}, &vs, sizeof(vs)); }}"

    def render_special(self, u: UOp) -> str:
        """The expression for a GPU id (`special_name`: gidxN work-group id, lidxN id inside the work-group)."""
        raise RenderError(
            f"{type(self).__name__} has no GPU ids ({u.arg}); it can't run work-group kernels: a renderer with "
            "caps.has_local overrides render_special(u) to give gidx<d>/lidx<d> as the device's ids"
        )

    def render_local(self, name: str, dt: DType, size: int) -> str:
        raise RenderError(f"{type(self).__name__} has no local memory")

    def preamble(self, uops: list[UOp]) -> list[str]:
        return ["#include <math.h>", *self.vector_typedefs(uops)]

    # ------------------------------------------------------------------------------------------ memory

    def render_param(self, u: UOp) -> str:
        """A DEFINE_GLOBAL's kernel parameter."""
        return f"{self.buffer_prefix}{self.render_dtype(u.dtype)}{self.buffer_suffix} data{u.arg}"

    def render_load(self, acc: Access, dt: DType) -> str:
        """The value of a LOAD of `dt` through `acc` (a gated load gives 0 where the gate is false)."""
        value = acc.lvalue
        if dt.count > 1 and not acc.is_variable:
            value = self.render_vector_load(dt, value)
        if acc.gate is None:
            return value
        zero = self.render_const(0, dt.scalar)
        if dt.count > 1:
            zero = self.render_vectorize(dt, [zero] * dt.count)
        return f"({acc.gate}?{value}:{zero})"

    def render_store(self, acc: Access, value: str, dt: DType) -> str:
        """The statement of a STORE of `value` (of `dt`) through `acc`."""
        if dt.count > 1 and not acc.is_variable:
            line = self.render_vector_store(acc.lvalue, value)
        else:
            line = f"{acc.lvalue} = {value};"
        return line if acc.gate is None else f"if ({acc.gate}) {line}"

    def render_register(self, ctx: RenderContext, reg: UOp) -> str:
        """The declaration of a DEFINE_REG: one variable per slot where `ctx` split it, else an array."""
        name = ctx.names[reg]
        if reg in ctx.split:
            return " ".join(f"{self.render_dtype(dt)} {name}_{off};" for off, dt in ctx.split[reg].items())
        size = "" if self.register_variables and is_scalar_register(reg) else f"[{max(reg.dtype.size, 1)}]"
        return f"{self.render_dtype(reg.dtype.base)} {name}{size};"

    # ------------------------------------------------------------------------------------------ tensor cores

    def render_wmma_helper(self, tc: TensorCore) -> str:
        """The definition of the function a WMMA calls (``tc.name(a, b, c)``: A's, B's and C's fragments -> D's).

        This default computes a one-thread tensor core lane by lane from its layouts; a GPU backend overrides it
        with its intrinsic (e.g. CUDA's ``mma.sync`` in inline PTX)."""
        if tc.threads != 1:
            raise RenderError(f"{type(self).__name__} has no {tc.threads}-thread tensor core ({tc.name})")
        m, n, k = tc.dims
        where: list[dict[tuple[int, int], int]] = []
        for layout, count in zip(tc.layouts, tc.elements_per_thread, strict=True):
            where.append({layout.coord(0, e): e for e in range(count)})
        a_t, b_t = (self.render_dtype(tc.dtype_in.vec(tc.elements_per_thread[i])) for i in (0, 1))
        c_t = self.render_dtype(tc.dtype_out.vec(tc.elements_per_thread[2]))
        acc = self.render_dtype(tc.dtype_out)
        lines = [f"static inline {c_t} {tc.name}({a_t} a, {b_t} b, {c_t} c) {{", f"  {c_t} d = c;"]
        for i in range(m):
            for j in range(n):
                terms = [
                    f"({acc}){self.render_gep('a', where[0][(i, x)])}*({acc}){self.render_gep('b', where[1][(x, j)])}"
                    for x in range(k)
                ]
                lane = self.render_gep("d", where[2][(i, j)])
                lines.append(f"  {lane} = {lane} + {' + '.join(terms)};")
        return "\n".join([*lines, "  return d;", "}"])

    # ---------------------------------------------------------------------------------------------- the engine

    def render(self, name: str, uops: list[UOp]) -> str:
        """Run `render_rules` on each UOp in order. A rule returns the code the UOp adds at the current depth ("" for
        none); the engine indents it, closes a block before END/ENDIF and opens one after RANGE/IF."""
        ctx = RenderContext(self, uops)
        rewrite = self.render_rules.rewrite
        for u in uops:
            # (the op sets are module constants: an `Ops.X` read per op of every kernel is a slow lookup on 3.11)
            op = u.op
            if op in _NOT_RENDERED:
                continue
            if op in _CLOSES_BLOCK:
                ctx.depth -= 1
            code = rewrite(u, ctx)
            if code is None:
                raise RenderError(f"{type(self).__name__} can't render {u.op.name} ({u.dtype})")
            if code:
                for line in code.splitlines():
                    ctx.emit(line)
            if op in _OPENS_BLOCK:
                ctx.depth += 1
        # symbolic values are passed in the order of ProgramSpec.vars: sorted by name
        params = [p for _, p in sorted(ctx.params)] + [p for _, p in sorted(ctx.var_params)]
        tcs = dict.fromkeys(wmma_core(u) for u in uops if u.op is Ops.WMMA)
        helpers = [self.render_wmma_helper(tc) for tc in tcs]
        body = ["  " + d for d in ctx.kernel_decls] + ctx.body
        head = self.preamble(uops) + helpers
        src = "\n".join([*head, self.render_kernel(name, body, params, uops)])
        # what doesn't depend on the name, kept for `rename` (a kernel renamed is renamed right after its render)
        self._last_render = (src, head, body, params, uops)
        return src

    _last_render: tuple[str, list[str], list[str], list[str], list[UOp]] | None = None

    def rename(self, src: str | bytes, name: str, uops: list[UOp]) -> str | bytes:
        # only the kernel's own lines hold its name: the rest of the program this renderer just rendered is kept
        last = self._last_render
        if last is None or last[0] is not src:
            return super().rename(src, name, uops)
        _, head, body, params, rendered = last
        return "\n".join([*head, self.render_kernel(name, body, params, rendered)])


@dataclass
class Access:
    """A rendered INDEX: the pointer's name, the offset and gate expressions, the pointer's dtype, whether it is
    global memory, and `lvalue`, the element as C writes it (``ptr[offset]``, or a register's own variable when
    `is_variable`)."""

    ptr: str
    offset: str
    gate: str | None
    ptr_dtype: PtrDType
    is_global: bool
    lvalue: str
    is_variable: bool = False


class RenderContext:
    """The state of one `render` call, passed to every rule as ``ctx``: the names given to UOps, the kernel's
    parameters, kernel-scope declarations (local memory), the body and its depth, and facts about the program
    (loop roles, registers split into variables)."""

    def __init__(self, renderer: CStyleRenderer, uops: list[UOp]) -> None:
        self.r = renderer
        self.uops = uops
        self.names: dict[UOp, str] = {}
        self.access: dict[UOp, Access] = {}
        self.params: list[tuple[int, str]] = []
        self.var_params: list[tuple[str, str]] = []
        self.kernel_decls: list[str] = []
        self.body: list[str] = []
        self.depth = 1
        self.counters: dict[str, int] = {}
        self.loops = loop_roles(uops)
        self.split = split_registers(uops) if renderer.register_variables else {}
        # registers declared where they are first written, so each thread of a parallel loop gets its own
        self.undeclared: dict[UOp, None] = {}
        # each MAX that updates the accumulator of a max loop rendered for SIMD: (the accumulator's read, register)
        self.max_updates: dict[UOp, tuple[UOp, UOp]] = {}
        self.simd_max_loops: set[UOp] = set()
        # what a backend's own rules work out once per program (keyed by a name of theirs)
        self.memo: dict[str, Any] = {}
        if renderer.simd_max_loop and Ops.MAX in renderer.caps.simd_reduce_ops:
            max_loops = {x: role for x, role in self.loops.items() if role.reduce is Ops.MAX}
            # only the updates inside a max loop: a padded tail's update after the loop is a plain MAX
            open_regs: list[set[UOp]] = [set()]
            for u in uops:
                if u.op is Ops.RANGE and u in max_loops:
                    open_regs.append(open_regs[-1] | set(max_loops[u].registers))
                elif u.op is Ops.END and u.src[1] in max_loops:
                    open_regs.pop()
                regs = open_regs[-1]
                if u.op is Ops.STORE and u.src[1].op is Ops.MAX and u.src[0].src[0] in regs:
                    read = next(x for x in u.src[1].src if x.op is Ops.LOAD and x.src[0] is u.src[0])
                    self.max_updates[u.src[1]] = (read, u.src[0].src[0])

    def new_name(self, prefix: str) -> str:
        self.counters[prefix] = self.counters.get(prefix, 0) + 1
        return f"{prefix}{self.counters[prefix] - 1}"

    def ref(self, u: UOp) -> str:
        """How `u`'s value is written where it is used: a constant inline, anything else by its name."""
        if u.op is _CONST:
            return self.r.render_const(u.arg, u.dtype)
        if u not in self.names:
            raise RenderError(f"{u.op.name} is used before it is defined")
        return self.names[u]

    def emit(self, line: str) -> None:
        self.body.append("  " * self.depth + line)

    def value(self, u: UOp, prefix: str, expr: str) -> str:
        """Name `u`'s value with a fresh ``<prefix>N`` and return its declaration."""
        var = self.new_name(prefix)
        self.names[u] = var
        dt = self.r.render_mask_type(u.dtype, mask_bytes(u)) if _is_mask(u.dtype) else self.r.render_dtype(u.dtype)
        return f"{dt} {var} = {expr};"

    def bind(self, u: UOp, name: str) -> str:
        """Name `u` without code (an inline expression, a parameter); returns ""."""
        self.names[u] = name
        return ""


# ---------------------------------------------------------------------------------------------- the rules


def do_define_global(ctx: RenderContext, x: UOp) -> str:
    ctx.params.append((x.arg, ctx.r.render_param(x)))
    return ctx.bind(x, f"data{x.arg}")


def do_define_var(ctx: RenderContext, x: UOp) -> str:
    ctx.var_params.append((x.arg[0], f"{ctx.r.arg_int_prefix} {x.arg[0]}"))
    return ctx.bind(x, x.arg[0])


def do_define_local(ctx: RenderContext, x: UOp) -> str:
    # local memory is declared at kernel scope (OpenCL and CUDA require it), whatever loop it appears in
    name = x.arg if isinstance(x.arg, str) else f"temp{x.arg}"
    ctx.kernel_decls.append(ctx.r.render_local(name, x.dtype.base, x.dtype.size))
    return ctx.bind(x, name)


def do_define_reg(ctx: RenderContext, x: UOp) -> str:
    ctx.bind(x, f"acc{x.arg}")
    if ctx.r.register_variables:
        ctx.undeclared[x] = None
        return ""
    return ctx.r.render_register(ctx, x)


def do_special(ctx: RenderContext, x: UOp) -> str:
    name = special_name(x)
    ctx.bind(x, name)
    return f"{ctx.r.render_dtype(x.dtype)} {name} = {ctx.r.render_special(x)}; /* {ctx.ref(x.src[0])} */"


def do_barrier(ctx: RenderContext) -> str:
    if not ctx.r.barrier:
        raise RenderError(f"{type(ctx.r).__name__} has no barriers")
    return ctx.r.barrier


def do_range(ctx: RenderContext, x: UOp) -> str:
    r, name = ctx.r, f"ridx{x.arg[0]}"
    ctx.bind(x, name)
    role, lines = ctx.loops[x], []
    if role.parallel and r.parallel_for:
        lines.append(r.render_parallel_for(x.src[0].arg if x.src[0].op is Ops.CONST else None))
    simd = role.reduce in r.caps.simd_reduce_ops
    if simd and role.reduce is Ops.ADD and r.simd_sum_loop:
        lines.append(r.simd_sum_loop.format(vars=", ".join(ctx.names[g] for g in role.registers)))
    elif simd and role.reduce is Ops.MAX and r.simd_max_loop:
        # MAX is a plain compare in the loop (see do_max_update); the int flag puts a NaN back after it
        ctx.simd_max_loops.add(x)
        # (an accumulator that is NaN already, from an outer loop's earlier pass, stays NaN: the compare would drop it)
        # in a block of its own: a reduce run as two loops (a padded tail) declares its flags twice
        lines.append("{")
        lines += [f"int nan{g.arg} = (acc{g.arg}!=acc{g.arg});" for g in role.registers]
        accs, flags = (", ".join(f"{p}{g.arg}" for g in role.registers) for p in ("acc", "nan"))
        lines.append(r.simd_max_loop.format(vars=accs, flags=flags))
    lines.append(r.render_loop(ctx, x, name, role.parallel))
    return "\n".join(lines)


def do_end(ctx: RenderContext, x: UOp) -> str:
    role = ctx.loops.get(x.src[1])
    if role is None or x.src[1] not in ctx.simd_max_loops:
        return "}"
    # a max loop rendered with plain compares: its NaN flags put a NaN back into the accumulators
    return "\n".join(["}", *(f"if (nan{g.arg}) acc{g.arg} = NAN;" for g in role.registers), "}"])


def do_index(ctx: RenderContext, x: UOp) -> str:
    buf, offset = x.src[0], ctx.ref(x.src[1])
    gate = ctx.ref(x.src[2]) if len(x.src) > 2 else None
    assert isinstance(buf.dtype, PtrDType)
    ptr = ctx.ref(buf)
    if ctx.r.register_variables and is_scalar_register(buf):
        lvalue, variable = ptr, True
    elif buf in ctx.split:
        lvalue, variable = f"{ptr}_{x.src[1].arg}", True
    else:
        lvalue, variable = f"{ptr}[{offset}]", False
    ctx.access[x] = Access(ptr, offset, gate, buf.dtype, buf.op is Ops.DEFINE_GLOBAL, lvalue, variable)
    return ctx.bind(x, lvalue)


def do_store(ctx: RenderContext, x: UOp) -> str:
    index, value = x.src[0], x.src[1]
    reg = index.src[0]
    lines = []
    if reg in ctx.undeclared:
        del ctx.undeclared[reg]
        lines.append(ctx.r.render_register(ctx, reg))
    lines.append(ctx.r.render_store(ctx.access[index], ctx.ref(value), value.dtype))
    return "\n".join(lines)


def do_max_update(ctx: RenderContext, x: UOp) -> str | None:
    if x not in ctx.max_updates:
        return None
    acc_read, reg = ctx.max_updates[x]
    acc, other = ctx.ref(acc_read), ctx.ref(next(s for s in x.src if s is not acc_read))
    # MAX without its NaN check: (acc > x) ? acc : x, the compiler's max instruction; the flag records a NaN
    return ctx.value(x, "alu", f"(({acc}>{other})?{acc}:{other})") + f"\nnan{reg.arg} |= ({other}!={other});"


def _is_mask(dt: DType) -> bool:
    return not isinstance(dt, PtrDType) and dt.scalar == dtypes.bool and dt.count > 1


# the C type of a mask's lanes, by their size
_MASK_LANE = {4: "int", 8: "long long"}


# signed integer ops C leaves undefined on overflow, and the unsigned type each computes in instead when it may
_WRAPPING_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.SHL, Ops.MULACC})
_UNSIGNED_OF = {dtypes.int32: dtypes.uint32, dtypes.int64: dtypes.uint64}


def _may_wrap(u: UOp) -> bool:
    """Whether the exact result of `u` (its operands over their ranges) can leave its dtype: data values, whose range
    is the dtype's; an address's arithmetic over loop counters stays in range and renders as plain C."""
    lo, hi = dtypes.min(u.dtype), dtypes.max(u.dtype)
    r = [(s.vmin, s.vmax) for s in u.src]
    if u.op is _NEG:
        ends = [-r[0][0], -r[0][1]]
    elif u.op is _ADD:
        ends = [r[0][0] + r[1][0], r[0][1] + r[1][1]]
    elif u.op is _SUB:
        ends = [r[0][0] - r[1][1], r[0][1] - r[1][0]]
    elif u.op is _SHL:
        if r[1][0] < 0 or r[1][1] >= 8 * u.dtype.itemsize:
            return True
        ends = [r[0][0] << r[1][1], r[0][1] << r[1][1], r[0][0], r[0][1]]
    else:
        ends = [x * y for x in r[0] for y in r[1]]
        if u.op is _MULACC:
            ends = [min(ends) + r[2][0], max(ends) + r[2][1]]
    return min(ends) < lo or max(ends) > hi


def do_alu(ctx: RenderContext, x: UOp) -> str:
    # (WHERE, MULACC, NEG and RECIP render as operators too: ?: or a mask's bits, (a*b)+c, -a, 1/a)
    if x.dtype.count > 1 and not (x.op in ctx.r.infix or x.op in _OPERATOR_LIKE or ctx.r.vector_math):
        raise RenderError(f"{type(ctx.r).__name__} can't render {x.op.name} on vector type {x.dtype}")
    return ctx.value(x, "alu", ctx.r.render_alu(x, [ctx.ref(s) for s in x.src]))


def wmma_core(u: UOp) -> TensorCore:
    """The TensorCore a WMMA runs: its arg, or the TensorCore inside a tuple arg."""
    found = (
        u.arg if isinstance(u.arg, TensorCore) else next((a for a in u.arg or () if isinstance(a, TensorCore)), None)
    )
    if found is None or len(u.src) != 3:
        raise RenderError(
            f"can't render WMMA: it needs three fragments and a TensorCore arg, got {len(u.src)} sources, arg {u.arg!r}"
        )
    return found


def do_wmma(ctx: RenderContext, x: UOp) -> str:
    return ctx.value(x, "wmma", f"{wmma_core(x).name}({', '.join(ctx.ref(s) for s in x.src)})")


# the C-family rules; a backend puts its own rules in front (`render_rules = pm_mine + pm_cstyle`)
pm_cstyle = PatternMatcher(
    [
        # kernel parameters, local memory, registers and GPU ids
        (UPat(Ops.DEFINE_GLOBAL, name="x"), do_define_global),
        (UPat(Ops.DEFINE_VAR, name="x"), do_define_var),
        (UPat(Ops.DEFINE_LOCAL, name="x"), do_define_local),
        (UPat(Ops.DEFINE_REG, name="x"), do_define_reg),
        (UPat(Ops.SPECIAL, name="x"), do_special),
        # control flow: the engine indents after RANGE/IF and closes the block before END/ENDIF
        (UPat(Ops.RANGE, name="x"), do_range),
        (UPat(Ops.END, name="x"), do_end),
        (UPat(Ops.IF, name="x"), lambda ctx, x: f"if ({ctx.ref(x.src[0])}) {{"),
        (UPat(Ops.ENDIF), lambda: "}"),
        (UPat(Ops.BARRIER), do_barrier),
        # memory: an INDEX is rendered where it is used (ptr[offset], or a register's variable)
        (UPat(Ops.INDEX, name="x"), do_index),
        (
            UPat(Ops.LOAD, name="x"),
            lambda ctx, x: ctx.value(x, "val", ctx.r.render_load(ctx.access[x.src[0]], x.dtype)),
        ),
        (UPat(Ops.STORE, name="x"), do_store),
        # values
        (
            UPat(Ops.VECTORIZE, name="x"),
            lambda ctx, x: ctx.value(x, "vec", ctx.r.render_vectorize(x.dtype, [ctx.ref(s) for s in x.src])),
        ),
        # a lane of a mask is -1 or 0: != 0 makes it C's 1 or 0
        (
            UPat(Ops.GEP, dtype=dtypes.bool, name="x"),
            lambda ctx, x: ctx.bind(x, f"({ctx.r.render_gep(ctx.ref(x.src[0]), x.arg[0])}!=0)"),
        ),
        (UPat(Ops.GEP, name="x"), lambda ctx, x: ctx.bind(x, ctx.r.render_gep(ctx.ref(x.src[0]), x.arg[0]))),
        (UPat(Ops.MAX, name="x"), do_max_update),
        (UPat(GroupOp.ALU, name="x"), do_alu),
        (UPat(Ops.CAST, name="x"), lambda ctx, x: ctx.value(x, "cast", ctx.r.render_cast(x, ctx.ref(x.src[0])))),
        (UPat(Ops.BITCAST, name="x"), lambda ctx, x: ctx.value(x, "cast", ctx.r.render_bitcast(x, ctx.ref(x.src[0])))),
        (UPat(Ops.WMMA, name="x"), do_wmma),
    ]
)
CStyleRenderer.render_rules = pm_cstyle


def special_name(u: UOp) -> str:
    """A SPECIAL's name (``gidx0``, ``lidx1``, ...): its arg, or the first item of a (name, size) arg."""
    name = u.arg[0] if isinstance(u.arg, tuple) else u.arg
    if not isinstance(name, str):
        raise RenderError(f"SPECIAL needs a name like 'gidx0', got arg {u.arg!r}")
    return name


def split_registers(uops: list[UOp]) -> dict[UOp, dict[int, DType]]:
    """Registers read and written only at constant offsets, each offset always with the same width and no two
    overlapping: offset -> type of each slot. Each slot becomes a variable of its own; as an array (vectors copied
    in and out with memcpy) a register tile leaves gcc spilling and shuffling registers in the hot loop."""
    slots: dict[UOp, dict[int, DType]] = {}
    bad: set[UOp] = set()
    for u in uops:
        if u.op not in (Ops.LOAD, Ops.STORE) or u.src[0].op is not Ops.INDEX:
            continue
        index = u.src[0]
        reg = index.src[0]
        if reg.op is not Ops.DEFINE_REG or is_scalar_register(reg):
            continue
        dt = u.dtype if u.op is Ops.LOAD else u.src[1].dtype
        if (
            index.src[1].op is not Ops.CONST
            or len(index.src) > 2
            or slots.setdefault(reg, {}).get(index.src[1].arg, dt) != dt
        ):
            bad.add(reg)
            continue
        slots[reg][index.src[1].arg] = dt
    for reg, by_offset in slots.items():
        ends = sorted((off, off + dt.count) for off, dt in by_offset.items())
        if any(a[1] > b[0] for a, b in zip(ends, ends[1:], strict=False)):
            bad.add(reg)
    return {reg: dict(sorted(by_offset.items())) for reg, by_offset in slots.items() if reg not in bad}
