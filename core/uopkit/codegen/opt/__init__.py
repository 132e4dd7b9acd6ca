"""Kernel optimizations as data: a list of `Opt(op, axis, amount)` turns a kernel's axes into a `KernelPlan`.

Axes are numbered as the kernel sees them: output axes 0..n-1 (the shape of the value the kernel stores), then
the axes of its reduce, n..n+m-1. Each axis is split into parts, outer to inner, each with a kind:

- "loop": a for loop (a grid dimension on GPU-style backends)
- "thread": the loop is shared among CPU threads
- "local": a work-group dimension (GPU)
- "upcast": unrolled into independent lanes (registers, vectors); on a reduce axis: one accumulator per lane
- "unroll": reduce lanes summed into the same accumulator inside the loop
- "group": a reduce split among the threads of a work-group, combined through local memory
- "tc": one tile dimension of a tensor core (see `OptOps.TC`); the lowerer maps it onto the tensor core's threads
  and fragment elements as its `TensorCore` description says
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum, auto
from typing import TYPE_CHECKING

from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.renderer import Renderer, TensorCore


class OptOps(Enum):
    """What an `Opt(op, axis, amount)` does to kernel axis `axis`.

    - UPCAST / UNROLL / LOCAL / GROUP / GROUPTOP / THREAD split `amount` off the axis (see the module docstring).
    - PADTO rounds the axis size up to a multiple of `amount`.
    - TC runs the kernel's matmul on a tensor core: `axis` is the kernel axis of the reduce to run on it (the
      first reduce axis, ``n_out``, for ``a @ b``) and `amount` the index of the `TensorCore` in
      ``renderer.caps.tensor_cores``. The reduce must be ADD over MUL of two operands of the core's ``dtype_in``
      (either side may be CAST from it, or the product CAST to ``dtype_out``) accumulating in ``dtype_out``; the
      output axes M and N are found as the ones only the first (resp. only the second) operand depends on, and
      M, N and the reduce axis must be untouched by earlier opts and divisible by the core's tile. The three axes
      get a "tc" part of the tile's size; later opts may still UPCAST, LOCAL or THREAD the loops left on M and N,
      but not touch the reduce axis.
    """

    UPCAST = auto()
    UNROLL = auto()
    LOCAL = auto()
    GROUP = auto()
    GROUPTOP = auto()
    THREAD = auto()
    PADTO = auto()
    TC = auto()

    def __repr__(self) -> str:
        return f"OptOps.{self.name}"


@dataclass(frozen=True, order=True)
class Opt:
    op: OptOps
    axis: int
    amount: int

    def __repr__(self) -> str:
        return f"Opt({self.op!r}, {self.axis}, {self.amount})"


class OptError(ValueError):
    pass


@dataclass(frozen=True)
class AxisPart:
    size: int
    kind: str


@dataclass(frozen=True)
class TCPlan:
    """Where a kernel's matmul runs on tensor core `tc` (``renderer.caps.tensor_cores[index]``): output axes `m_axis`
    and `n_axis`, reduce axis `k_axis` (kernel axis numbers), and which source of the MUL is the A operand."""

    index: int
    tc: TensorCore
    m_axis: int
    n_axis: int
    k_axis: int
    a_src: int


@dataclass(frozen=True)
class KernelPlan:
    """How each axis of a kernel is split. `real` holds the unpadded sizes (PADTO may round a size up)."""

    out: tuple[tuple[AxisPart, ...], ...]
    red: tuple[tuple[AxisPart, ...], ...]
    real: tuple[int, ...]
    opts: tuple[Opt, ...] = ()
    threads: int = 0
    reduce_op: UOp | None = field(default=None, compare=False)
    tc: TCPlan | None = None
    # the kernel the plan is for (OptOps.TC inspects it)
    ast: UOp | None = field(default=None, compare=False)

    @property
    def n_out(self) -> int:
        return len(self.out)

    def axis_parts(self, axis: int) -> tuple[AxisPart, ...]:
        return self.out[axis] if axis < self.n_out else self.red[axis - self.n_out]

    def axis_size(self, axis: int) -> int:
        return math.prod(p.size for p in self.axis_parts(axis))

    def lanes(self) -> int:
        lanes = math.prod(p.size for parts in self.out + self.red for p in parts if p.kind in ("upcast", "unroll"))
        # each thread of a tensor core holds a fragment of the accumulator: that many lanes
        return lanes * self.tc.tc.elements_per_thread[2] if self.tc is not None else lanes

    def with_axis(self, axis: int, parts: tuple[AxisPart, ...]) -> KernelPlan:
        if axis < self.n_out:
            out = self.out[:axis] + (parts,) + self.out[axis + 1 :]
            return replace(self, out=out)
        r = axis - self.n_out
        return replace(self, red=self.red[:r] + (parts,) + self.red[r + 1 :])


def main_reduce(ast: UOp) -> UOp | None:
    """The one reduce whose axes opts may split (kernels with several reduces only get output opts)."""
    reduces = [u for u in ast.toposort() if u.op is Ops.REDUCE_AXIS]
    return reduces[0] if len(reduces) == 1 else None


def initial_plan(ast: UOp) -> KernelPlan:
    store = ast.src[0]
    shape = store.src[1].shape
    assert shape is not None
    red = main_reduce(ast)
    red_sizes: tuple[int, ...] = ()
    if red is not None:
        src_shape = red.src[0].shape
        assert src_shape is not None
        red_sizes = tuple(src_shape[a] for a in red.arg[1])
    return KernelPlan(
        out=tuple((AxisPart(s, "loop"),) for s in shape),
        red=tuple((AxisPart(s, "loop"),) for s in red_sizes),
        real=tuple(shape) + red_sizes,
        reduce_op=red,
        ast=ast,
    )


MAX_LANES = 256


def _split_last_loop(plan: KernelPlan, axis: int, amount: int, kind: str, opt: Opt, outer: bool = False) -> KernelPlan:
    parts = list(plan.axis_parts(axis))
    loops = [i for i, p in enumerate(parts) if p.kind == "loop"]
    if not loops:
        raise OptError(f"{opt}: axis {axis} has no loop left to split (parts {[(p.size, p.kind) for p in parts]})")
    i = loops[0] if outer else loops[-1]
    size = parts[i].size
    amount = size if amount == 0 else amount
    if amount <= 1 or size % amount:
        raise OptError(f"{opt}: amount {amount} must be > 1 and divide the axis size {size}")
    rest = [AxisPart(size // amount, "loop")] if size // amount > 1 else []
    new = [AxisPart(amount, kind)]
    parts[i : i + 1] = (new + rest) if outer else (rest + new)
    return plan.with_axis(axis, tuple(parts))


def apply_opt(plan: KernelPlan, opt: Opt, renderer: Renderer) -> KernelPlan:
    """Apply one opt, checking it against the kernel and the renderer's capabilities."""
    n_axes = plan.n_out + len(plan.red)
    if not 0 <= opt.axis < n_axes:
        raise OptError(f"{opt}: axis {opt.axis} out of range (kernel has {plan.n_out} output + {len(plan.red)} reduce)")
    is_reduce = opt.axis >= plan.n_out
    if plan.tc is not None and opt.axis == plan.tc.k_axis and opt.op is not OptOps.TC:
        raise OptError(f"{opt}: axis {opt.axis} is the reduce of the tensor core; no other opt can change it")
    if opt.op is OptOps.TC:
        new = _apply_tc(plan, opt, renderer)
    elif opt.op is OptOps.UPCAST:
        new = _split_last_loop(plan, opt.axis, opt.amount, "upcast", opt)
    elif opt.op is OptOps.UNROLL:
        if not is_reduce:
            raise OptError(f"{opt}: UNROLL applies to reduce axes (>= {plan.n_out})")
        new = _split_last_loop(plan, opt.axis, opt.amount, "unroll", opt)
    elif opt.op is OptOps.THREAD:
        if is_reduce:
            raise OptError(f"{opt}: THREAD applies to output axes")
        if not renderer.caps.has_threads:
            raise OptError(f"{opt}: the {renderer.device or type(renderer).__name__} renderer has no CPU threads")
        if any(p.kind == "thread" for parts in plan.out for p in parts):
            raise OptError(f"{opt}: only one axis can be split among threads")
        parts = list(plan.out[opt.axis])
        if parts[0].kind != "loop":
            raise OptError(f"{opt}: the outermost part of axis {opt.axis} is not a loop")
        parts[0] = AxisPart(parts[0].size, "thread")
        new = replace(plan.with_axis(opt.axis, tuple(parts)), threads=opt.amount)
    elif opt.op is OptOps.LOCAL:
        if is_reduce or not renderer.caps.has_local:
            raise OptError(f"{opt}: LOCAL needs an output axis and a renderer with work-groups")
        new = _split_last_loop(plan, opt.axis, opt.amount, "local", opt)
    elif opt.op in (OptOps.GROUP, OptOps.GROUPTOP):
        if not is_reduce or not (renderer.caps.has_local and renderer.caps.has_shared):
            raise OptError(f"{opt}: GROUP needs a reduce axis and a renderer with work-groups and local memory")
        if any(p.kind == "group" for parts in plan.red for p in parts):
            raise OptError(f"{opt}: only one GROUP per kernel")
        new = _split_last_loop(plan, opt.axis, opt.amount, "group", opt, outer=opt.op is OptOps.GROUPTOP)
    elif opt.op is OptOps.PADTO:
        parts = plan.axis_parts(opt.axis)
        if len(parts) != 1 or parts[0].kind != "loop":
            raise OptError(f"{opt}: PADTO must come before other opts on axis {opt.axis}")
        size = parts[0].size
        padded = -(-size // opt.amount) * opt.amount
        if opt.amount <= 1 or padded > size * 2:
            raise OptError(f"{opt}: padding {size} to a multiple of {opt.amount} wastes too much")
        new = plan.with_axis(opt.axis, (AxisPart(padded, "loop"),))
    else:
        raise OptError(f"{opt}: {opt.op.name} is not supported by this kernel optimizer")
    if new.lanes() > MAX_LANES:
        raise OptError(f"{opt}: {new.lanes()} unrolled lanes is more than the limit {MAX_LANES}")
    local_parts = [p.size for parts in new.out + new.red for p in parts if p.kind in ("local", "group")]
    if new.tc is not None and new.tc.tc.threads > 1:
        # the tensor core's threads are work-group dimension 0; LOCAL parts take the other (at most two)
        local_parts.append(new.tc.tc.threads)
        if len(local_parts) > 3:
            raise OptError(f"{opt}: a tensor core and {len(local_parts) - 1} LOCAL splits need more than 3 dimensions")
    if (
        local_parts
        and renderer.caps.local_max is not None
        and math.prod(local_parts) > math.prod(renderer.caps.local_max[:1])
    ):
        raise OptError(f"{opt}: work-group of {math.prod(local_parts)} threads exceeds {renderer.caps.local_max[0]}")
    return replace(new, opts=plan.opts + (opt,))


def _apply_tc(plan: KernelPlan, opt: Opt, renderer: Renderer) -> KernelPlan:
    from uopkit.codegen.tensor_core import TensorCoreMatchError, match_tensor_core

    who = renderer.device or type(renderer).__name__
    if plan.tc is not None:
        raise OptError(f"{opt}: the kernel already uses tensor core {plan.tc.tc.name}")
    if opt.axis < plan.n_out:
        raise OptError(f"{opt}: TC's axis is the kernel's reduce axis (>= {plan.n_out}), got output axis {opt.axis}")
    if not 0 <= opt.amount < len(renderer.caps.tensor_cores):
        raise OptError(
            f"{opt}: the {who} renderer declares {len(renderer.caps.tensor_cores)} tensor cores, no index {opt.amount}"
        )
    tc = renderer.caps.tensor_cores[opt.amount]
    if tc.threads > 1 and not renderer.caps.has_local:
        raise OptError(f"{opt}: {tc.name} needs {tc.threads} threads per tile, but the {who} renderer has no locals")
    if plan.ast is None or plan.reduce_op is None:
        raise OptError(f"{opt}: TC needs a kernel with exactly one reduce (and a plan built by initial_plan)")
    try:
        m_axis, n_axis, a_src = match_tensor_core(plan.ast, tc, opt.axis - plan.n_out)
    except TensorCoreMatchError as e:
        raise OptError(f"{opt}: {tc.name}: {e}") from None
    new = plan
    for axis, tile in ((m_axis, tc.dims[0]), (n_axis, tc.dims[1]), (opt.axis, tc.dims[2])):
        parts = plan.axis_parts(axis)
        if len(parts) != 1 or parts[0].kind != "loop" or parts[0].size != plan.real[axis]:
            shown = [(p.size, p.kind) for p in parts]
            raise OptError(f"{opt}: TC must come before other opts on axis {axis} (it is split into {shown})")
        size = parts[0].size
        if size % tile:
            raise OptError(f"{opt}: {tc.name} needs axis {axis} (size {size}) to be a multiple of its tile {tile}")
        rest = (AxisPart(size // tile, "loop"),) if size > tile else ()
        new = new.with_axis(axis, rest + (AxisPart(tile, "tc"),))
    return replace(new, tc=TCPlan(opt.amount, tc, m_axis, n_axis, opt.axis, a_src))


def apply_opts(ast: UOp, opts: list[Opt] | tuple[Opt, ...], renderer: Renderer) -> KernelPlan:
    plan = initial_plan(ast)
    for opt in opts:
        plan = apply_opt(plan, opt, renderer)
    return plan
