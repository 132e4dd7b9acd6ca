"""The type of a kernel's index arithmetic: int32 where no address, view or loop of the kernel can pass it (small
kernels stay fast), else int64 (`lower_kernel` tries int32 first and checks the lowered addresses)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from uopkit.dtype import dtypes
from uopkit.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from uopkit.codegen.plan import KernelPlan

INT32_MAX = dtypes.max(dtypes.int32)


def exceeds_int32(ast: UOp, plan: KernelPlan) -> bool:
    """Can an index of this kernel pass int32: a buffer, a view (strides and offsets are below its size) or a loop?"""
    padded = [math.prod(p.size for p in parts) for parts in (*plan.out, *plan.red)]
    if math.prod(padded[: plan.n_out]) > INT32_MAX or any(s > INT32_MAX for s in padded):
        return True
    return any(u.shape is not None and math.prod(u.shape) > INT32_MAX for u in ast.toposort())


def addresses_fit(sink: UOp) -> bool:
    """Range analysis of every address computed from loop counters and thread ids: none overflows its type.

    A value that overflows gets the whole range of its dtype from vmin/vmax; addresses computed from loaded data
    (gathers) have that range anyway and are not judged here.
    """
    # (ops and bounds looked up once: this looks at every address node, and on Python 3.11 every `Ops.X` goes
    # through EnumType.__getattr__'s slow hook)
    index, load, alu = Ops.INDEX, Ops.LOAD, GroupOp.ALU
    bounds = {dt: (dtypes.min(dt), dtypes.max(dt)) for dt in (dtypes.int32, dtypes.int64)}
    addresses = [u.src[1] for u in sink.toposort() if u.op is index]
    from_data: set[UOp] = set()
    for u in UOp(Ops.SINK, dtypes.void, tuple(addresses)).toposort(gate=lambda x: x.op is not load):
        if any(s.op is load or s in from_data for s in u.src):
            from_data.add(u)
        elif u.op in alu and u.dtype in bounds:
            lo, hi = bounds[u.dtype]
            if u.vmin <= lo or u.vmax >= hi:
                return False
    return True
