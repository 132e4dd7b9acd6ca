"""A realized graph's results as templates: what a replay of a cached schedule rebuilds over the call's buffers (the
tensors' new nodes, views of the buffers the kernels wrote), as instructions (`engine/realize.py` records, replays)."""

from __future__ import annotations

from typing import Any

from uopkit.uop.ops import Ops, UOp

# a uop rebuilt on a replay, as instructions: ("slot", i) is the BUFFER in slot i of the call's table, else
# (op, dtype, arg, positions of its sources among the earlier instructions); the last instruction is the uop
Template = tuple[tuple, ...]


class _Fresh(int):
    """A template's arg for a DETACH or CONTIGUOUS whose arg is a fresh id (a leaf's `x.detach().requires_grad_()`):
    the graph's k-th (`_Param.fresh`), so that a replay rebuilds the node with the new graph's id, the leaf's own."""


def template_of(u: UOp, slot: dict[UOp, int], fresh: dict[object, int]) -> Template | None:
    """`u` as instructions over the slots of `slot` (None: it holds a BUFFER outside them, or a STORE or KERNEL)."""
    index: dict[UOp, int] = {}
    out: list[tuple] = []
    for n in u.toposort():
        if n.op is Ops.BUFFER:
            if n not in slot:
                return None
            out.append(("slot", slot[n]))
        elif n.op is Ops.STORE or n.op is Ops.KERNEL:
            # a value that still writes storage: don't guess
            return None
        else:
            arg = n.arg
            if (n.op is Ops.DETACH or n.op is Ops.CONTIGUOUS) and arg in fresh:
                arg = _Fresh(fresh[arg])
            out.append((n.op, n.dtype, arg, tuple([index[s] for s in n.src])))
        index[n] = len(out) - 1
    return tuple(out)


def built_from(template: Template, table: list[UOp], fresh: list[object], args: dict[int, Any] | None = None) -> UOp:
    """The uop `template` stands for over the slots' uops in `table` and the graph's fresh ids `fresh`; `args`: other
    args for some instructions (a window's moved SHRINK bounds), by instruction."""
    if len(template) == 1:
        return table[template[0][1]]
    built: list[UOp] = []
    for j, ins in enumerate(template):
        if ins[0] == "slot":
            built.append(table[ins[1]])
        else:
            arg = args[j] if args and j in args else ins[2]
            if type(arg) is _Fresh:
                arg = fresh[arg]
            built.append(UOp(ins[0], ins[1], tuple([built[i] for i in ins[3]]), arg))
    return built[-1]
