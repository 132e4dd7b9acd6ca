"""Linearize a lowered kernel graph into the ordered list of UOps a renderer consumes.

Each op lives inside the loops of the RANGEs it depends on (minus those an END it depends on has closed).
Side effects (STOREs, register reads, loops that must start fresh) are placed in exactly those loops; pure ops
may sit deeper, and are emitted as early as possible so loop-invariant work stays outside inner loops.
"""

from __future__ import annotations

from uopkit.uop.ops import Ops, UOp


class LinearizeError(RuntimeError):
    pass


def _open_ranges(topo: list[UOp]) -> dict[UOp, frozenset[UOp]]:
    ctx: dict[UOp, frozenset[UOp]] = {}
    for u in topo:
        inner: frozenset[UOp] = frozenset().union(*(ctx[s] for s in u.src))
        if u.op is Ops.RANGE:
            inner = inner | {u}
        elif u.op is Ops.END:
            inner = ctx[u.src[0]] - {u.src[1]}
        ctx[u] = inner
    return ctx


def _is_exact(u: UOp) -> bool:
    # ops whose position is part of their meaning
    if u.op in (Ops.STORE, Ops.END, Ops.BARRIER):
        return True
    if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_REG:
        return True
    return u.op is Ops.RANGE and len(u.src) > 1


def linearize(sink: UOp) -> list[UOp]:
    topo = [u for u in sink.toposort() if u.op is not Ops.SINK]
    ctx = _open_ranges(topo)
    emitted: dict[UOp, None] = {}
    open_stack: list[UOp] = []
    pending = list(topo)

    def ready(u: UOp) -> bool:
        return all(s in emitted or s.op is Ops.SINK for s in u.src)

    while pending:
        progress = True
        while progress:
            progress = False
            still: list[UOp] = []
            open_set = frozenset(open_stack)
            for u in pending:
                if u.op not in (Ops.RANGE, Ops.END) and ready(u):
                    fits = ctx[u] == open_set if _is_exact(u) else ctx[u] <= open_set
                    if fits:
                        emitted[u] = None
                        progress = True
                        continue
                still.append(u)
            pending = still
        if not pending:
            break
        open_set = frozenset(open_stack)
        # close the innermost loop once nothing left needs it
        if open_stack:
            inner = open_stack[-1]
            ends = [u for u in pending if u.op is Ops.END and u.src[1] is inner and ready(u)]
            needs_inner = any(inner in ctx[u] and u.op is not Ops.END for u in pending)
            if ends and not needs_inner:
                emitted[ends[0]] = None
                pending.remove(ends[0])
                open_stack.pop()
                continue
        # open the loop that lets the most pending work proceed
        candidates = []
        for r in pending:
            if r.op is not Ops.RANGE or not ready(r):
                continue
            outside = ctx[r] - {r}
            if (outside != open_set) if _is_exact(r) else not (outside <= open_set):
                continue
            want = open_set | {r}
            if any(want <= ctx[u] for u in pending if u is not r):
                candidates.append(r)
        if not candidates:
            left = ", ".join(f"{u.op.name}{u.arg if u.op is Ops.RANGE else ''}" for u in pending[:8])
            raise LinearizeError(f"can't place {len(pending)} ops (open loops {[r.arg for r in open_stack]}): {left}")
        best = min(candidates, key=lambda r: (not _is_exact(r), r.arg[0]))
        emitted[best] = None
        pending.remove(best)
        open_stack.append(best)
    return list(emitted)
