"""Which buffers (or other marked nodes) a graph's values are computed from: the walk that both the scheduler's
`stored_reads` and the index of live readers (`live_index`) make."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from uopkit.uop.ops import Ops, UOp

_STORE = Ops.STORE


def _not_store(u: UOp) -> bool:
    return u.op is not _STORE


def read_masks(roots: Sequence[UOp], bit_of: Callable[[UOp], int]) -> tuple[dict[UOp, int], dict[UOp, bool]]:
    """For every node under `roots` (not through a STORE): the union of `bit_of` over the nodes it reads, itself
    included, and whether it reads a STORE."""
    mask: dict[UOp, int] = {}
    after_store: dict[UOp, bool] = {}
    for u in UOp(Ops.SINK, src=tuple(roots)).toposort(gate=_not_store):
        m = bit_of(u)
        st = False
        for s in u.src:
            if s.op is _STORE:
                st = True
            else:
                m |= mask[s]
                st = st or after_store[s]
        mask[u], after_store[u] = m, st
    return mask, after_store
