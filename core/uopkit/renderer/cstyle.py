"""CStyleRenderer: the renderer shared by C-family backends (C on the CPU, OpenCL, CUDA).

A subclass changes class attributes (type names, qualifiers, math functions, the kernel signature) rather than
the rendering loop. Every value gets its own named variable; constants are written inline.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

from uopkit.dtype import DType, PtrDType, dtypes
from uopkit.renderer import Renderer
from uopkit.uop.ops import GroupOp, Ops, UOp


class RenderError(NotImplementedError):
    pass


def _binop(sym: str) -> Callable[..., str]:
    return lambda a, b, dt: f"({a}{sym}{b})"


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
            raise RenderError(f"{type(self).__name__} has no type for {dt}")
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
            return val if dt in (dtypes.float32, dtypes.float64) else f"(({self.render_dtype(dt)}){val})"
        if dt in (dtypes.int64,):
            return f"{x}ll"
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
        if op is Ops.NEG:
            return f"(-{args[0]})"
        if op is Ops.RECIP:
            return f"(1/{args[0]})" if dt == dtypes.float64 else f"(({self.render_dtype(dt)})1/{args[0]})"
        if op in (Ops.IDIV, Ops.MOD):
            sym = "/" if op is Ops.IDIV else "%"
            divisor = u.src[1]
            if divisor.op is Ops.CONST and divisor.arg not in (0, -1):
                return f"({args[0]}{sym}{args[1]})"
            # integer division by zero (and INT_MIN / -1) traps in C; define x/0 as 0 and x/-1 as -x instead
            a, b = args
            if op is Ops.IDIV:
                return f"(({b})==0?0:(({b})==-1?-({a}):({a})/({b})))"
            return f"(({b})==0||({b})==-1?0:({a})%({b}))"
        if op is Ops.MAX:
            a, b = args
            if dtypes.is_float(dt):
                # NaN in either operand gives NaN, as numpy's maximum
                return f"(({a}>{b}||{a}!={a})?{a}:{b})"
            return f"(({a}>{b})?{a}:{b})"
        if op is Ops.WHERE:
            return f"({args[0]}?{args[1]}:{args[2]})"
        if op is Ops.MULACC:
            return f"(({args[0]}*{args[1]})+{args[2]})"
        if op in self.infix:
            if dt == dtypes.bool and op in (Ops.ADD, Ops.MUL):
                return f"({args[0]}{'|' if op is Ops.ADD else '&'}{args[1]})"
            return f"({args[0]}{self.infix[op]}{args[1]})"
        raise RenderError(f"{type(self).__name__} can't render {op}")

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

    def render_kernel(self, name: str, body: list[str], params: list[str], uops: list[UOp] | None = None) -> str:
        lines = [f"{self.kernel_prefix}void {name}({', '.join(params)}) {{", *body, "}"]
        return "\n".join(lines)

    # ------------------------------------------------------------------------------------------ vectors
    # C uses GCC's vector extensions (typedefs in the preamble); OpenCL overrides these with its own syntax

    def render_vector_type(self, dt: DType) -> str:
        if dt.scalar not in self.type_map or dt.scalar == dtypes.bool:
            raise RenderError(f"{type(self).__name__} has no vector type for {dt}")
        return f"{dt.scalar.name}{dt.count}"

    def vector_typedefs(self, uops: list[UOp]) -> list[str]:
        vecs = sorted({u.dtype for u in uops if not isinstance(u.dtype, PtrDType) and u.dtype.count > 1}, key=str)
        return [
            f"typedef {self.type_map[v.scalar]} {self.render_vector_type(v)} "
            f"__attribute__((vector_size({v.scalar.itemsize * v.count})));"
            for v in vecs
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
        """The expression for a GPU id (gidxN: work-group id, lidxN: id inside the work-group)."""
        raise RenderError(f"{type(self).__name__} has no GPU ids ({u.arg}); it can't run work-group kernels")

    def render_local(self, name: str, dt: DType, size: int) -> str:
        raise RenderError(f"{type(self).__name__} has no local memory")

    def render_wmma(self, u: UOp, args: list[str]) -> str:
        """The expression for a WMMA (tensor core `u.arg`) on the fragments `args` (A, B, C)."""
        raise RenderError(f"{type(self).__name__} has no tensor cores (WMMA {u.arg})")

    def preamble(self, uops: list[UOp]) -> list[str]:
        return ["#include <math.h>", *self.vector_typedefs(uops)]

    # ---------------------------------------------------------------------------------------------- the loop

    def render(self, name: str, uops: list[UOp]) -> str:
        names: dict[UOp, str] = {}
        params: list[tuple[int, str]] = []
        var_params: list[tuple[str, str]] = []
        body: list[str] = []
        depth = 1
        counters: dict[str, int] = {}
        undeclared: dict[UOp, None] = {}

        def new_name(prefix: str) -> str:
            counters[prefix] = counters.get(prefix, 0) + 1
            return f"{prefix}{counters[prefix] - 1}"

        def ref(u: UOp) -> str:
            if u.op is Ops.CONST:
                return self.render_const(u.arg, u.dtype)
            return names[u]

        def emit(line: str) -> None:
            body.append("  " * depth + line)

        split = _split_registers(uops)
        sum_loops = _reduce_loops(uops, Ops.ADD) if self.simd_sum_loop else {}
        max_loops = _reduce_loops(uops, Ops.MAX) if self.simd_max_loop else {}
        # each MAX that updates such an accumulator: (the accumulator's read, the register)
        max_regs = {r for regs in max_loops.values() for r in regs}
        max_updates = {
            u.src[1]: (next(x for x in u.src[1].src if x.op is Ops.LOAD and x.src[0] is u.src[0]), u.src[0].src[0])
            for u in uops
            if u.op is Ops.STORE and u.src[1].op is Ops.MAX and u.src[0].op is Ops.INDEX and u.src[0].src[0] in max_regs
        }
        for u in uops:
            if u.op is Ops.CONST:
                continue
            if u.op is Ops.DEFINE_GLOBAL:
                names[u] = f"data{u.arg}"
                ptr = self.render_dtype(u.dtype.base)
                params.append((u.arg, f"{self.buffer_prefix}{ptr}*{self.buffer_suffix} data{u.arg}"))
            elif u.op is Ops.DEFINE_VAR:
                names[u] = u.arg[0]
                var_params.append((u.arg[0], f"{self.arg_int_prefix} {u.arg[0]}"))
            elif u.op is Ops.DEFINE_REG:
                # declared where it is first written, so each thread of a parallel loop gets its own
                names[u] = f"acc{u.arg}"
                undeclared[u] = None
            elif u.op is Ops.DEFINE_LOCAL:
                # the lowerer names local buffers ("temp0"); hand-built programs may number them
                names[u] = u.arg if isinstance(u.arg, str) else f"temp{u.arg}"
                emit(self.render_local(names[u], u.dtype.base, u.dtype.size))
            elif u.op is Ops.SPECIAL:
                names[u] = u.arg
                emit(f"int {u.arg} = {self.render_special(u)}; /* {ref(u.src[0])} */")
            elif u.op is Ops.BARRIER:
                emit(self.barrier)
            elif u.op is Ops.IF:
                emit(f"if ({ref(u.src[0])}) {{")
                depth += 1
            elif u.op is Ops.ENDIF:
                depth -= 1
                emit("}")
            elif u.op is Ops.NOOP:
                continue
            elif u.op is Ops.RANGE:
                names[u] = f"ridx{u.arg[0]}"
                if u.arg[1] == "thread" and self.parallel_for:
                    emit(self.parallel_for)
                if u in sum_loops:
                    emit(self.simd_sum_loop.format(vars=", ".join(f"acc{r.arg}" for r in sum_loops[u])))
                elif u in max_loops:
                    for r in max_loops[u]:
                        emit(f"int nan{r.arg} = 0;")
                    accs, flags = (", ".join(f"{p}{r.arg}" for r in max_loops[u]) for p in ("acc", "nan"))
                    emit(self.simd_max_loop.format(vars=accs, flags=flags))
                emit(f"for (int {names[u]} = 0; {names[u]} < {ref(u.src[0])}; {names[u]}++) {{")
                depth += 1
            elif u.op is Ops.END:
                depth -= 1
                emit("}")
                for r in max_loops.get(u.src[1], []):
                    emit(f"if (nan{r.arg}) acc{r.arg} = NAN;")
            elif u.op is Ops.INDEX:
                # an INDEX is rendered where it is used: as ptr[offset]; a one-slot register is a plain variable
                if _is_scalar_reg(u.src[0]):
                    names[u] = ref(u.src[0])
                elif u.src[0] in split:
                    names[u] = f"{ref(u.src[0])}_{u.src[1].arg}"
                else:
                    names[u] = f"{ref(u.src[0])}[{ref(u.src[1])}]"
            elif u.op is Ops.LOAD:
                index = u.src[0]
                var = new_name("val")
                names[u] = var
                value = names[index]
                if u.dtype.count > 1 and index.src[0] not in split:
                    value = self.render_vector_load(u.dtype, value)
                if len(index.src) > 2:
                    zero = self.render_const(0, u.dtype.scalar)
                    if u.dtype.count > 1:
                        zero = self.render_vectorize(u.dtype, [zero] * u.dtype.count)
                    value = f"({ref(index.src[2])}?{value}:{zero})"
                emit(f"{self.render_dtype(u.dtype)} {var} = {value};")
            elif u.op is Ops.STORE:
                index, value = u.src[0], u.src[1]
                reg = index.src[0]
                if reg in undeclared:
                    del undeclared[reg]
                    if reg in split:
                        emit(" ".join(f"{self.render_dtype(dt)} {names[reg]}_{off};" for off, dt in split[reg].items()))
                    else:
                        size = "" if _is_scalar_reg(reg) else f"[{max(reg.dtype.size, 1)}]"
                        emit(f"{self.render_dtype(reg.dtype.base)} {names[reg]}{size};")
                if value.dtype.count > 1 and reg not in split:
                    line = self.render_vector_store(names[index], ref(value))
                else:
                    line = f"{names[index]} = {ref(value)};"
                emit(f"if ({ref(index.src[2])}) {line}" if len(index.src) > 2 else line)
            elif u.op is Ops.VECTORIZE:
                var = new_name("vec")
                names[u] = var
                emit(f"{self.render_dtype(u.dtype)} {var} = {self.render_vectorize(u.dtype, [ref(x) for x in u.src])};")
            elif u.op is Ops.GEP:
                names[u] = self.render_gep(ref(u.src[0]), u.arg[0])
            elif u.op in GroupOp.ALU and u.dtype.count > 1 and u.op not in self.infix:
                raise RenderError(f"{type(self).__name__} can't render {u.op.name} on vector type {u.dtype}")
            elif u in max_updates:
                acc_read, reg = max_updates[u]
                other = ref(next(x for x in u.src if x is not acc_read))
                var = new_name("alu")
                names[u] = var
                # MAX without its NaN check: (acc > x) ? acc : x, the compiler's max instruction
                emit(f"{self.render_dtype(u.dtype)} {var} = (({ref(acc_read)}>{other})?{ref(acc_read)}:{other});")
                emit(f"nan{reg.arg} |= ({other}!={other});")
            elif u.op in GroupOp.ALU:
                var = new_name("alu")
                names[u] = var
                emit(f"{self.render_dtype(u.dtype)} {var} = {self.render_alu(u, [ref(s) for s in u.src])};")
            elif u.op is Ops.CAST:
                var = new_name("cast")
                names[u] = var
                emit(f"{self.render_dtype(u.dtype)} {var} = {self.render_cast(u, ref(u.src[0]))};")
            elif u.op is Ops.BITCAST:
                var = new_name("cast")
                names[u] = var
                emit(f"{self.render_dtype(u.dtype)} {var} = {self.render_bitcast(u, ref(u.src[0]))};")
            elif u.op is Ops.WMMA:
                var = new_name("wmma")
                names[u] = var
                emit(f"{self.render_dtype(u.dtype)} {var} = {self.render_wmma(u, [ref(s) for s in u.src])};")
            else:
                raise RenderError(f"{type(self).__name__} can't render {u.op.name}")
        # symbolic values are passed in the order of ProgramSpec.vars: sorted by name
        ordered = [p for _, p in sorted(params)] + [p for _, p in sorted(var_params)]
        return "\n".join(self.preamble(uops) + [self.render_kernel(name, body, ordered, uops)])


def _split_registers(uops: list[UOp]) -> dict[UOp, dict[int, DType]]:
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
        if reg.op is not Ops.DEFINE_REG or _is_scalar_reg(reg):
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


def _is_scalar_reg(u: UOp) -> bool:
    return u.op is Ops.DEFINE_REG and isinstance(u.dtype, PtrDType) and u.dtype.size == 1


def _reduce_loops(uops: list[UOp], op: Ops) -> dict[UOp, list[UOp]]:
    """Innermost loops whose only effect is `acc = op(acc, x)` on one-slot float registers: loop -> registers."""
    found: dict[UOp, list[UOp]] = {}
    for i, u in enumerate(uops):
        if u.op is not Ops.RANGE:
            continue
        end = next((j for j in range(i + 1, len(uops)) if uops[j].op is Ops.END and uops[j].src[1] is u), None)
        if end is None:
            continue
        body = uops[i + 1 : end]
        if any(b.op in (Ops.RANGE, Ops.BARRIER, Ops.IF) for b in body):
            continue
        regs: list[UOp] = []
        ok = True
        for b in body:
            if b.op is not Ops.STORE:
                continue
            reg = b.src[0].src[0]
            value = b.src[1]
            sums_itself = value.op is op and any(s.op is Ops.LOAD and s.src[0] is b.src[0] for s in value.src)
            if not (_is_scalar_reg(reg) and sums_itself and dtypes.is_float(value.dtype)):
                ok = False
                break
            regs.append(reg)
        if ok and regs:
            found[u] = list(dict.fromkeys(regs))
    return found
