"""The grouper's choices on a graph seen without its DETACHes, and the nodes of the graph itself that carry them out.

A DETACH stops gradients and changes no value, but every result computed under no_grad is one, and the realize rules
look for the op that computes a value (a replicate pad's select under the windows of a convolution, a reduce under
an add): behind a DETACH they don't see it, and a graph built under no_grad is fused otherwise than the same graph
built with gradients (a lazy no_grad stencil loop's padded state was read through a bounds check per window tap in
its convolution's kernel). So the choices are made on the graph with its DETACHes left out (`without_detaches`), where
x and DETACH(x) are one node, and mapped back to nodes of the graph (`stored_originals`)."""

from __future__ import annotations

from uopkit.uop.ops import Ops, UOp


def without_detaches(topo: list[UOp]) -> dict[UOp, UOp] | None:
    """Each node of `topo` (sources first) -> the same value built without the DETACHes under it, or None when the
    graph has none. (What `topo` doesn't walk into, a kernel's inputs, is left as it is.)"""
    if not any(u.op is Ops.DETACH for u in topo):
        return None
    plain: dict[UOp, UOp] = {}
    for u in topo:
        if u.op is Ops.DETACH:
            plain[u] = plain.get(u.src[0], u.src[0])
            continue
        src = tuple([plain.get(s, s) for s in u.src])
        plain[u] = u if src == u.src else UOp(u.op, u.dtype, src, u.arg)
    return plain


def stored_originals(
    realize: dict[UOp, None], topo: list[UOp], plain: dict[UOp, UOp], required: dict[UOp, None]
) -> dict[UOp, None]:
    """The nodes of `topo` to store so that each value `realize` stores in the plain graph is computed once.

    Several nodes are one plain value: x, DETACHes of it, and nodes that differ only by DETACHes of their sources.
    Stored are the ones `required` holds (what the graph itself must store whatever the plain graph says: an output,
    a COPY and its source, a STORE: such a node is never left to be computed inside another kernel), and the bottom
    of each DETACH chain whose readers would otherwise compute it: x is stored unless every reader of x or of a
    DETACH over it reads it through a node stored already (a no_grad result asked for is DETACH(x): stored alone, its
    kernel computes x; a later step of a loop reads DETACH(x): x is stored, the DETACH reads its buffer)."""
    groups: dict[UOp, list[UOp]] = {}
    for u in topo:
        if plain[u] in realize:
            groups.setdefault(plain[u], []).append(u)
    readers: dict[UOp, list[UOp]] = {}
    for u in topo:
        for s in u.src:
            if plain.get(s) in groups:
                readers.setdefault(s, []).append(u)
    out: dict[UOp, None] = dict.fromkeys(m for members in groups.values() for m in members if m in required)
    for members in groups.values():
        group = set(members)
        for m in members:
            if not any(r not in group for r in readers.get(m, ())):
                continue
            # down the DETACH chain to a stored node, else to the node that computes the value
            node = m
            while node not in out and node.op is Ops.DETACH and node.src[0] in group:
                node = node.src[0]
            out[node] = None
    out.update(required)
    return out
