"""Kernel optimizations as data: a list of `Opt(op, axis, amount)` turns a kernel's axes into a `KernelPlan`.

Axes are numbered as the kernel sees them: output axes 0..n-1 (the shape of the value the kernel stores), then
the axes of its reduce, n..n+m-1. Each axis is split into parts, outer to inner, each with a kind:

- "loop": a for loop (a grid dimension on GPU-style backends)
- "thread": the outermost part of an axis, shared among CPU threads. The thread parts of all output axes make one
  parallel loop (the outermost) over their combinations, each iteration one block of the output; the renderer
  spreads the blocks over the threads
- "local": a work-group dimension (GPU)
- "upcast": unrolled into independent lanes (registers, vectors); on a reduce axis: one accumulator per lane
- "unroll": reduce lanes summed into the same accumulator inside the loop
- "group": a reduce split among the threads of a work-group, combined through local memory
- "stage": a reduce loop run inside one step of a reduce staged in local memory (`OptOps.STAGE`): each step, the
  work-group first loads the elements its work-items will read (every "stage", lane and work-group part) into local
  memory together, then each work-item runs the step's loops reading them from there
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
    from uopkit.renderer import TensorCore


class OptOps(Enum):
    """What an `Opt(op, axis, amount)` does to kernel axis `axis`.

    - UPCAST / UNROLL / LOCAL / GROUP / GROUPTOP / THREAD split `amount` off the axis (see the module docstring);
      THREAD splits it off the outer end of the axis's outermost loop (amount 0: the whole loop), once per axis,
      on any number of output axes.
    - PADTO rounds the axis size up to a multiple of `amount`.
    - TC runs the kernel's matmul on a tensor core: `axis` is the kernel axis of the reduce to run on it (the
      first reduce axis, ``n_out``, for ``a @ b``) and `amount` the index of the `TensorCore` in
      ``renderer.caps.tensor_cores``. The reduce must be ADD over MUL of two operands of the core's ``dtype_in``
      (either side may be CAST from it, or the product CAST to ``dtype_out``) accumulating in ``dtype_out``; the
      output axes M and N are found as the ones only the first (resp. only the second) operand depends on, and
      M, N and the reduce axis must be untouched by earlier opts and divisible by the core's tile. The three axes
      get a "tc" part of the tile's size; later opts may still UPCAST, LOCAL or THREAD the loops left on M and N,
      but not touch the reduce axis.
    - STAGE stages the reduce's operands in local memory: it splits `amount` off the last loop of reduce axis
      `axis` as a "stage" loop. The reduce then runs in steps (its loops outside every stage part). At each step the
      work-group copies, together and coalesced, the part of each operand its work-items read in the step (a load
      of the reduce that some work-items share: one that doesn't move along some LOCAL part) into local memory, waits
      at a barrier, runs the step's stage loops and lanes reading the copies, and waits again before the next step
      overwrites them. It needs a renderer with local memory, a LOCAL split already made and no GROUP or TC; one
      STAGE per reduce axis.
    - SWAP trades the places of output axes `axis` and `amount` in the nest of plain loops (CPU-style renderers:
      a GPU grid has no nesting). The loops of a matmul's columns outside those of its rows keep one panel of the
      right operand in cache while every row of the left one streams past it, instead of streaming all of the
      right operand once per row tile. The parallel loop of THREAD parts stays outermost.
    """

    UPCAST = auto()
    UNROLL = auto()
    LOCAL = auto()
    GROUP = auto()
    GROUPTOP = auto()
    THREAD = auto()
    PADTO = auto()
    TC = auto()
    STAGE = auto()
    SWAP = auto()

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
    # iterations of the parallel loop (the product of the "thread" parts; 0: no THREAD)
    threads: int = 0
    reduce_op: UOp | None = field(default=None, compare=False)
    tc: TCPlan | None = None
    # the output axes in the order their loops nest, outermost first (OptOps.SWAP; empty: in axis order)
    loop_order: tuple[int, ...] = ()
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


def work_group_dims(plan: KernelPlan) -> list[int]:
    """The work-group dimensions (lidx0, lidx1, ...) the lowerer gives a GPU-style kernel with this plan, in the
    order it makes them: the tensor core's threads, each LOCAL part of the output axes from the innermost out (so
    dimension 0 runs along the innermost axis), each GROUP part of the reduce axes."""
    dims = [plan.tc.tc.threads] if plan.tc is not None and plan.tc.tc.threads > 1 else []
    dims += reversed([p.size for parts in plan.out for p in parts if p.kind == "local" and p.size > 1])
    dims += [p.size for parts in plan.red for p in parts if p.kind == "group" and p.size > 1]
    return dims


def grid_dims(plan: KernelPlan) -> list[int]:
    """The work-groups per grid dimension (gidx0, gidx1, gidx2) the lowerer gives a GPU-style kernel with this plan:
    the loop parts of the output axes, the innermost as dimension 0; beyond three, all but the innermost two share
    dimension 2."""
    parts = [p.size for parts in plan.out for p in parts if p.kind == "loop"]
    inner, outer = (parts[-2:], parts[:-2]) if len(parts) > 3 else (parts, [])
    return list(reversed(inner)) + ([math.prod(outer)] if outer else [])


def local_memory_bytes(plan: KernelPlan) -> int:
    """Bytes of local memory a GROUP takes (at most): one slot per work-item for each of its accumulator lanes."""
    if plan.reduce_op is None or not any(p.kind == "group" for parts in plan.red for p in parts):
        return 0
    lanes = math.prod(p.size for parts in plan.out + plan.red for p in parts if p.kind == "upcast")
    return math.prod(work_group_dims(plan)) * lanes * plan.reduce_op.dtype.itemsize
