"""What each loop of a linear program is for, so that any renderer (C or not) can thread and vectorize it.

`loop_roles(uops)` maps every RANGE of a linear program to a `LoopRole`:

- ``parallel``: the loop's iterations may run on different CPU threads (RANGE kind ``"thread"``, from
  OptOps.THREAD; only on renderers with ``caps.has_threads``). Each iteration writes its own outputs, and every
  register (DEFINE_REG) it uses is first written inside it, so each thread needs its own copy.
- ``reduce``: ``Ops.ADD`` or ``Ops.MAX`` for an innermost loop whose only effects are updates
  ``acc = op(acc, x)`` of one-slot float registers (`registers`): a sum loop or a max loop. Such a loop may be
  vectorized by reassociating the reduction across lanes (like split accumulators); a max loop must still give
  NaN when any x is NaN (MAX propagates NaN). None for every other loop.

The roles are computed from the program alone (by the core, the same way for every backend); ``caps.simd_reduce_ops``
tells the optimizer which reduce loops the backend vectorizes itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from uopkit.dtype import PtrDType, dtypes
from uopkit.uop.ops import Ops, UOp


@dataclass(frozen=True)
class LoopRole:
    """What one RANGE ... END loop is for (see the module docstring)."""

    end: UOp
    parallel: bool = False
    reduce: Ops | None = None
    registers: tuple[UOp, ...] = ()


def is_scalar_register(u: UOp) -> bool:
    """A DEFINE_REG of one slot: a plain variable for renderers that have them."""
    return u.op is Ops.DEFINE_REG and isinstance(u.dtype, PtrDType) and u.dtype.size == 1


def loop_roles(uops: list[UOp]) -> dict[UOp, LoopRole]:
    """Every RANGE of the linear program `uops` -> its `LoopRole`."""
    ends = {u.src[1]: i for i, u in enumerate(uops) if u.op is Ops.END}
    roles: dict[UOp, LoopRole] = {}
    for i, u in enumerate(uops):
        if u.op is not Ops.RANGE or u not in ends:
            continue
        body = uops[i + 1 : ends[u]]
        reduce, regs = _reduction(body)
        roles[u] = LoopRole(uops[ends[u]], parallel=u.arg[1] == "thread", reduce=reduce, registers=regs)
    return roles


def _reduction(body: list[UOp]) -> tuple[Ops | None, tuple[UOp, ...]]:
    """(op, registers) when the loop body's only effects are `acc = op(acc, x)` on one-slot float registers."""
    if any(b.op in (Ops.RANGE, Ops.BARRIER, Ops.IF) for b in body):
        return None, ()
    stores = [b for b in body if b.op is Ops.STORE]
    for op in (Ops.ADD, Ops.MAX):
        regs: list[UOp] = []
        for b in stores:
            reg, value = b.src[0].src[0], b.src[1]
            updates_itself = value.op is op and any(s.op is Ops.LOAD and s.src[0] is b.src[0] for s in value.src)
            if not (is_scalar_register(reg) and updates_itself and dtypes.is_float(value.dtype)):
                break
            regs.append(reg)
        else:
            if regs:
                return op, tuple(dict.fromkeys(regs))
    return None, ()
