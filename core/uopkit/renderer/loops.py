"""What each loop of a linear program is for, so that any renderer (C or not) can thread and vectorize it.

The core's linearizer writes it into each RANGE's arg, ``(id, kind)`` (`uopkit.uop.spec.LOOP_KINDS`);
`loop_roles(uops)` reads it back as a `LoopRole` per RANGE:

- ``parallel``: kind ``"thread"``: the loop's iterations may run on different CPU threads (from OptOps.THREAD; only
  on renderers with ``caps.has_threads``). Each iteration writes its own outputs, and every register (DEFINE_REG)
  it uses is first written inside it, so each thread needs its own copy.
- ``reduce``: ``Ops.ADD`` for kind ``"sum"``, ``Ops.MAX`` for ``"max"``: an innermost loop whose only effects are
  updates ``acc = op(acc, x)`` of one-slot float registers (`registers`), and stores to global buffers the loop
  doesn't read, each iteration to elements of its own (softmax's sum of exp also stores each exp). Such a loop may
  be vectorized by reassociating the reduction across lanes (like split accumulators); a max loop must still give
  NaN when any x is NaN (MAX propagates NaN). None for every other loop.

The kinds are set by the core, the same way for every backend (and checked by `verify_program`); a renderer that
rewrites a program before rendering it (the CPU's half floats) sets them again with `mark_reduce_loops`;
``caps.simd_reduce_ops`` tells the optimizer which reduce loops the backend vectorizes itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from uopkit.uop.ops import Ops, UOp
from uopkit.uop.spec import REDUCE_KINDS, is_scalar_register, reduce_loop_kind

__all__ = ["LoopRole", "is_scalar_register", "loop_roles", "mark_reduce_loops"]


@dataclass(frozen=True)
class LoopRole:
    """What one RANGE ... END loop is for (see the module docstring)."""

    end: UOp
    parallel: bool = False
    reduce: Ops | None = None
    registers: tuple[UOp, ...] = ()


def loop_roles(uops: list[UOp]) -> dict[UOp, LoopRole]:
    """Every RANGE of the linear program `uops` -> its `LoopRole`, from the kind in its arg."""
    ends = {u.src[1]: i for i, u in enumerate(uops) if u.op is Ops.END}
    roles: dict[UOp, LoopRole] = {}
    for i, u in enumerate(uops):
        if u.op is not Ops.RANGE or u not in ends:
            continue
        kind = u.arg[1]
        reduce = REDUCE_KINDS.get(kind)
        # the registers a sum or max loop updates, in the order of their first update (its other stores write global
        # memory)
        body = uops[i + 1 : ends[u]] if reduce is not None else []
        regs = (b.src[0].src[0] for b in body if b.op is Ops.STORE and b.src[0].src[0].op is Ops.DEFINE_REG)
        roles[u] = LoopRole(
            uops[ends[u]], parallel=kind == "thread", reduce=reduce, registers=tuple(dict.fromkeys(regs))
        )
    return roles


def mark_reduce_loops(uops: list[UOp]) -> list[UOp]:
    """Each plain loop that is an innermost sum or max of registers (`uopkit.uop.spec.reduce_loop_kind`, read in the
    final order) gets the kind "sum" or "max" in its RANGE's arg, so every renderer can read what it is for; the ops
    that use a marked RANGE are rebuilt on the new one."""
    ends = {u.src[1]: i for i, u in enumerate(uops) if u.op is Ops.END}
    replace: dict[UOp, UOp] = {}
    for i, u in enumerate(uops):
        if u.op is Ops.RANGE and u.arg[1] == "loop" and u in ends:
            kind = reduce_loop_kind(uops[i + 1 : ends[u]], u)
            if kind is not None:
                replace[u] = u.replace(arg=(u.arg[0], kind))
    if not replace:
        return uops
    out = []
    for u in uops:
        new = replace.get(u, u)
        src = tuple(replace.get(s, s) for s in new.src)
        if src != new.src:
            new = new.replace(src=src)
        replace[u] = new
        out.append(new)
    return out
