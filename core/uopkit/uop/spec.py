"""The UOp spec: which forms of each op are legal at each stage. A backend codes against `spec_program`.

Stages:
- tensor graph: what `Tensor` builds (shaped values over BUFFER and CONST(DEVICE); STORE(view of BUFFER, value)).
- kernel graph: after kernelize; realized values are STORE(BUFFER | view, KERNEL(inputs...)), a KERNEL's inputs are
  BUFFERs or kernel STOREs and its arg is the AST: SINK(STORE(view of DEFINE_GLOBAL, value)).
- linear program: what a renderer receives; loops are RANGE ... END, memory is INDEX + LOAD/STORE, accumulators are
  DEFINE_REG written by STORE. There is no ASSIGN at any stage.
"""

from __future__ import annotations

from typing import Any

from uopkit.dtype import INDEX_DTYPES, PtrDType, dtypes
from uopkit.helpers import shrink_span
from uopkit.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat

# the version a backend declares (`BackendInfo.spec_version`) must equal this one (see docs/writing-a-backend.md):
# 1: the first spec.
# 2: index arithmetic (RANGE, SPECIAL, INDEX offsets, DEFINE_VAR) is int64 in a kernel whose buffers, views or loops
#    can pass int32, int32 otherwise, one index dtype per program: a DEFINE_VAR has it too. A variable's value is
#    still passed as int32 at launch (its range fits int32): the renderer declares it int32 and widens it.
# 3: a "sum"/"max" loop may also store to global buffers it doesn't read, each iteration to elements of its own (the
#    CPU softmax stores each exp where the output will be, instead of computing it twice).
SPEC_VERSION = 3


class SpecError(RuntimeError):
    pass


# --- what a loop of a linear program is for: the kind in a RANGE's arg (id, kind), set by the core's linearizer.
# Every kind counts 0..end-1 and may be run as a plain sequential loop; a "loop" runs only so (an iteration may read
# what an earlier one stored: a scatter's writes, `uopkit.codegen.scatter`); the others say what more is allowed:
# - "thread": the iterations may run on different CPU threads (OptOps.THREAD, on renderers with caps.has_threads);
#   each writes its own outputs, and every register (DEFINE_REG) it uses is first written inside it.
# - "sum" / "max": an innermost loop whose only effects are updates acc = acc + x (or max(acc, x)) of one-slot float
#   registers, and stores to global buffers the loop doesn't read, at an address that moves with the loop counter
#   (each iteration writes elements of its own): it may be vectorized by reassociating the reduction across lanes; a
#   max loop must still give NaN when any x is NaN (MAX propagates NaN).
LOOP_KINDS = ("loop", "thread", "sum", "max")
REDUCE_KINDS = {"sum": Ops.ADD, "max": Ops.MAX}


def is_scalar_register(u: UOp) -> bool:
    """A DEFINE_REG of one slot: a plain variable for renderers that have them."""
    return u.op is Ops.DEFINE_REG and isinstance(u.dtype, PtrDType) and u.dtype.size == 1


def _step(x: UOp, r: UOp) -> int | None:
    """How much `x` grows per step of loop `r`, when `x` is provably affine in it (r times a constant plus terms
    without r); None when that isn't plain from the expression."""
    if x is r:
        return 1
    if r not in x.toposort():
        return 0
    if x.op is Ops.ADD:
        steps = [_step(s, r) for s in x.src]
        return None if None in steps else sum(s for s in steps if s is not None)
    if x.op is Ops.MUL and any(s.op is Ops.CONST for s in x.src):
        c = next(s for s in x.src if s.op is Ops.CONST)
        other = _step(x.src[1] if x.src[0] is c else x.src[0], r)
        return None if other is None else other * c.arg
    return None


def _own_element_store(b: UOp, body: list[UOp], loop: UOp) -> bool:
    """A store to a global buffer that the loop body never reads, each iteration of `loop` to another element."""
    buf = b.src[0].src[0]
    if buf.op is not Ops.DEFINE_GLOBAL:
        return False
    # (a read of the same element has the same INDEX as the store: look at what is done with each INDEX of buf)
    if any(x.op in (Ops.LOAD, Ops.STORE) and x is not b and x.src[0].src[0] is buf for x in body):
        return False
    return bool(_step(b.src[0].src[1], loop))


def reduce_loop_kind(body: list[UOp], loop: UOp | None = None) -> str | None:
    """ "sum" or "max" when a loop body (the linear UOps between its RANGE and END) has no loop, barrier or IF and its
    only effects are `acc = op(acc, x)` on one-slot float registers, and (given the loop's RANGE) stores to global
    buffers it doesn't read, each iteration to its own element; else None."""
    if any(b.op in (Ops.RANGE, Ops.BARRIER, Ops.IF) for b in body):
        return None
    stores = [b for b in body if b.op is Ops.STORE]
    updates = [b for b in stores if b.src[0].src[0].op is not Ops.DEFINE_GLOBAL]
    spills = [b for b in stores if b.src[0].src[0].op is Ops.DEFINE_GLOBAL]
    if spills and (loop is None or not all(_own_element_store(b, body, loop) for b in spills)):
        return None
    for kind, op in REDUCE_KINDS.items():
        ok = bool(updates)
        for b in updates:
            reg, value = b.src[0].src[0], b.src[1]
            updates_itself = value.op is op and any(s.op is Ops.LOAD and s.src[0] is b.src[0] for s in value.src)
            if not (is_scalar_register(reg) and updates_itself and dtypes.is_float(value.dtype)):
                ok = False
                break
        if ok:
            return kind
    return None


def _same_dtype_alu(x: UOp) -> bool:
    if x.op in GroupOp.Comparison:
        return x.dtype.scalar == dtypes.bool and x.src[0].dtype == x.src[1].dtype
    if x.op is Ops.WHERE:
        return x.src[0].dtype.scalar == dtypes.bool and x.src[1].dtype == x.src[2].dtype == x.dtype
    if x.op in (Ops.SHL, Ops.SHR):
        return x.src[0].dtype == x.dtype
    return all(s.dtype == x.dtype for s in x.src)


def _valid_store_target(x: UOp) -> bool:
    base = x.base
    if base.op is Ops.STORE:
        base = base.src[0].base
    return base.op is Ops.BUFFER and not any(n.op in (Ops.EXPAND, Ops.PAD) for n in x.movement_chain())


def _shaped(x: UOp) -> bool:
    return x.shape is not None


def _iota(x: UOp) -> bool:
    return dtypes.is_int(x.dtype) and isinstance(x.arg, int) and 0 <= x.arg <= dtypes.max(x.dtype) + 1


# ops shared by the tensor graph and the kernel AST: shaped values
_shaped_values = [
    (UPat(GroupOp.ALU, name="x"), lambda x: _same_dtype_alu(x) and _shaped(x)),
    (UPat((Ops.CAST, Ops.BITCAST), src=(UPat(),)), lambda: True),
    (UPat(GroupOp.Movement, src=(UPat(),), name="x"), lambda x: _shaped(x.src[0]) and x.arg is not None),
    (UPat(Ops.REDUCE_AXIS, src=(UPat(),), name="x"), lambda x: x.arg[0] in (Ops.ADD, Ops.MAX, Ops.MUL)),
]

spec_tensor = PatternMatcher(
    [
        (UPat(Ops.SINK), lambda: True),
        (UPat(Ops.DEVICE, src=()), lambda: True),
        (UPat(Ops.BUFFER, src=(), name="x"), lambda x: isinstance(x.arg, tuple) and len(x.arg) == 3),
        (UPat(Ops.CONST, src=(UPat(Ops.DEVICE),)), lambda: True),
        (UPat(Ops.IOTA, src=(UPat(Ops.DEVICE),), name="x"), lambda x: _iota(x)),
        (UPat((Ops.CONTIGUOUS, Ops.DETACH), src=(UPat(),)), lambda: True),
        (UPat(Ops.COPY, src=(UPat(), UPat(Ops.DEVICE))), lambda: True),
        # tensor-level STORE: a value written into a view of a BUFFER (t.assign, t[...] = v)
        (
            UPat(Ops.STORE, src=(UPat(name="target"), UPat(name="value")), name="x"),
            lambda x, target, value: _valid_store_target(target) and target.shape == value.shape,
        ),
        # kernelized values may already be in the graph: STORE(BUFFER | view of BUFFER, KERNEL)
        (UPat(Ops.STORE, src=(UPat(name="target"), UPat(Ops.KERNEL))), lambda target: _valid_store_target(target)),
        (UPat(Ops.KERNEL), lambda: True),
    ]
    + _shaped_values
)


def _window_start(buf: UOp, start: UOp, length: Any) -> bool:
    """A window of `length` elements of `buf` from `start`: a launch value (times a constant), inside the buffer."""
    terms = start.src if start.op is Ops.MUL else (start,)
    return (
        isinstance(length, int)
        and 0 < length <= buf.dtype.size
        and start.dtype == dtypes.index
        and all(t.op is Ops.DEFINE_VAR or (t.op is Ops.CONST and isinstance(t.arg, int)) for t in terms)
        and start.vmin >= 0
        and start.vmax + length <= buf.dtype.size
    )


def _window_store(target: UOp, value: UOp, start: UOp) -> bool:
    chain = target.movement_chain()
    window = chain[-1] if chain else target
    buf = target.base
    return (
        buf.op is Ops.DEFINE_GLOBAL
        and target.shape == value.shape
        and window.op is Ops.SHRINK
        and _window_start(buf, start, _stored_extent(chain))
    )


def _stored_extent(chain: list[UOp]) -> int:
    """How far past a window store's start its target writes: the run's end, or for a strided target (whole rows of
    the buffer shaped and cut, `cache[:, :, pos]`) one past the last element its cut reaches."""
    run = chain[-1].arg[0]
    # (reshapes over the cut keep its elements)
    if len(chain) < 3 or chain[-2].op is not Ops.RESHAPE or chain[-3].op is not Ops.SHRINK:
        return run[1]
    if any(u.op is not Ops.RESHAPE and u.op is not Ops.SHRINK for u in chain[:-3]):
        # (reshapes and cuts over the cut take some of its elements: its span still bounds them)
        return run[1]
    start, span = shrink_span(chain[-2].arg, chain[-3].arg)
    return run[0] + start + span


spec_kernel_ast = PatternMatcher(
    [
        (UPat(Ops.SINK, src=UPat(Ops.STORE)), lambda: True),
        (UPat(Ops.DEFINE_GLOBAL, src=(), name="x"), lambda x: isinstance(x.dtype, PtrDType) and isinstance(x.arg, int)),
        (UPat(Ops.LOAD, src=(UPat(Ops.DEFINE_GLOBAL),)), lambda: True),
        # a windowed load: `arg` elements from `start` on (uopkit.schedule.windows), start a launch value in bounds
        (
            UPat(Ops.LOAD, src=(UPat(Ops.DEFINE_GLOBAL, name="buf"), UPat(name="start")), name="x"),
            lambda x, buf, start: _window_start(buf, start, x.arg),
        ),
        (UPat(Ops.DEFINE_VAR, src=(), name="x"), lambda x: x.dtype == dtypes.index and len(x.arg) == 3),
        (UPat(Ops.MUL, src=(UPat(Ops.DEFINE_VAR), UPat(Ops.CONST)), name="x"), lambda x: x.dtype == dtypes.index),
        (UPat(Ops.CONST, src=()), lambda: True),
        (UPat(Ops.IOTA, src=(), name="x"), lambda x: _iota(x)),
        (
            UPat(Ops.STORE, src=(UPat(name="target"), UPat(name="value"))),
            lambda target, value: target.base.op is Ops.DEFINE_GLOBAL and target.shape == value.shape,
        ),
        # a store into a window: the target views a SHRINK of the buffer from 0, moved to `start` (a launch value)
        (
            UPat(Ops.STORE, src=(UPat(name="target"), UPat(name="value"), UPat(name="start"))),
            lambda target, value, start: _window_store(target, value, start),
        ),
        (UPat(Ops.COPY, src=()), lambda: True),
    ]
    + _shaped_values
)

spec_kernel_graph = PatternMatcher(
    [
        (
            UPat(Ops.KERNEL, name="x"),
            lambda x: (
                all(s.op is Ops.BUFFER or (s.op is Ops.STORE and s.src[1].op is Ops.KERNEL) for s in x.src)
                and x.arg.op in (Ops.SINK, Ops.COPY)
            ),
        ),
    ]
    + spec_tensor.patterns
)

spec_program = PatternMatcher(
    [
        (UPat(Ops.DEFINE_GLOBAL, src=(), name="x"), lambda x: isinstance(x.dtype, PtrDType) and isinstance(x.arg, int)),
        (UPat(Ops.DEFINE_LOCAL, src=(), name="x"), lambda x: isinstance(x.dtype, PtrDType) and x.dtype.local),
        (UPat(Ops.DEFINE_REG, src=(), name="x"), lambda x: isinstance(x.dtype, PtrDType)),
        # launched as int32, so its range fits int32 whatever its dtype
        (
            UPat(Ops.DEFINE_VAR, src=(), name="x"),
            lambda x: x.dtype in INDEX_DTYPES and -(2**31) <= x.arg[1] <= x.arg[2] < 2**31,
        ),
        (UPat(Ops.CONST, src=()), lambda: True),
        (UPat(Ops.SPECIAL, src=(UPat(),)), lambda: True),
        # a loop: RANGE(end[, ordering deps]) ... END(effect, range)
        # index arithmetic is int32, or int64 in a kernel whose buffers, views or loops can exceed int32
        # its arg is (id, kind) with kind one of LOOP_KINDS
        (UPat(Ops.RANGE, src=UPat(), name="x"), lambda x: x.dtype in INDEX_DTYPES and x.src[0].dtype == x.dtype),
        (UPat(Ops.END, src=(UPat(), UPat(Ops.RANGE))), lambda: True),
        # memory: INDEX(pointer, offset[, gate]); LOAD(index, ordering deps...); STORE(index, value, ordering deps...)
        (
            UPat(Ops.INDEX, src=(UPat((Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_REG)), UPat()), name="x"),
            lambda x: x.src[1].dtype in INDEX_DTYPES,
        ),
        (
            UPat(Ops.INDEX, src=(UPat((Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_REG)), UPat(), UPat())),
            lambda: True,
        ),
        (UPat(Ops.LOAD, src=UPat(), name="x"), lambda x: x.src[0].op is Ops.INDEX),
        (UPat(Ops.STORE, src=UPat(), name="x"), lambda x: x.src[0].op is Ops.INDEX and len(x.src) >= 2),
        (UPat(GroupOp.ALU, name="x"), _same_dtype_alu),
        (UPat((Ops.CAST, Ops.BITCAST), src=(UPat(),)), lambda: True),
        (UPat((Ops.VECTORIZE, Ops.GEP, Ops.WMMA, Ops.BARRIER, Ops.IF, Ops.ENDIF, Ops.NOOP)), lambda: True),
        (UPat(Ops.SINK), lambda: True),
    ]
)


def _verify(nodes: list[UOp], spec: PatternMatcher, stage: str) -> None:
    for u in nodes:
        ok = False
        for pat, fn, _ in spec.pdict.get(u.op, spec.any_op):
            if any(fn(**m) for m in pat.match(u, {})):
                ok = True
                break
        if not ok:
            srcs = ", ".join(f"{s.op.name}:{s.dtype}" for s in u.src)
            raise SpecError(
                f"{stage} spec violation: {u.op.name} dtype={u.dtype} arg={u.arg!r} src=({srcs}) is not legal here"
            )


def verify_tensor_graph(sink: UOp) -> None:
    _verify(list(sink.toposort(gate=lambda u: u.op is not Ops.KERNEL)), spec_tensor, "tensor graph")


def verify_kernel_graph(sink: UOp) -> None:
    nodes = list(sink.toposort())
    _verify(nodes, spec_kernel_graph, "kernel graph")
    for k in nodes:
        if k.op is Ops.KERNEL and k.arg.op is Ops.SINK:
            verify_kernel_ast(k.arg)


def verify_kernel_ast(ast: UOp) -> None:
    _verify(list(ast.toposort()), spec_kernel_ast, "kernel AST")


def verify_program(uops: list[UOp]) -> None:
    _verify(uops, spec_program, "linear program")
    # every RANGE is closed by exactly one END, in nesting order
    open_ranges: list[tuple[UOp, int]] = []
    for i, u in enumerate(uops):
        if u.op is Ops.RANGE:
            if not (isinstance(u.arg, tuple) and len(u.arg) == 2 and u.arg[1] in LOOP_KINDS):
                raise SpecError(f"linear program: RANGE arg {u.arg!r} is not (id, kind) with kind in {LOOP_KINDS}")
            open_ranges.append((u, i))
        elif u.op is Ops.END:
            if not open_ranges or open_ranges[-1][0] is not u.src[1]:
                raise SpecError(f"linear program: END of {u.src[1].arg} doesn't close the innermost open loop")
            loop, start = open_ranges.pop()
            # a loop marked "sum" or "max" is one
            if loop.arg[1] in REDUCE_KINDS and reduce_loop_kind(uops[start + 1 : i], loop) != loop.arg[1]:
                raise SpecError(f"linear program: loop {loop.arg} is not an innermost {loop.arg[1]} of registers")
    if open_ranges:
        raise SpecError(f"linear program: {len(open_ranges)} loops are never closed")
    # one index dtype per program: a variable in an int64 kernel is int64 like its loop counters
    index_dtypes = {u.dtype for u in uops if u.op in (Ops.RANGE, Ops.SPECIAL, Ops.DEFINE_VAR)}
    if len(index_dtypes) > 1:
        mixed = ", ".join(f"{u.op.name} {u.arg[0]} {u.dtype}" for u in uops if u.op in (Ops.RANGE, Ops.DEFINE_VAR))
        raise SpecError(f"linear program: loop counters, ids and variables mix index dtypes ({mixed})")
