"""A bfloat16 value realized: no renderer computes in bfloat16, so `Tensor.realize` computes the value's uint16 bits
(`support._storage_uop`) and puts the tensor back as the BITCAST of the storage they are in (`rewrap_bf16`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from uopkit.dtype import dtypes
from uopkit.schedule import computed_from, live_tensors
from uopkit.tensor.support import _VIEW_NODES, _storage_uop
from uopkit.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor


def rewrap_bf16(tensors: list[Tensor], bits: list[Tensor]) -> None:
    """Each bfloat16 tensor of `tensors` made the BITCAST of its bits realized (`bits`, the same list where a tensor
    is no bfloat16 one). A value computed "in bfloat16" (a CONTIGUOUS, a WHERE of bfloat16 values: no BITCAST of
    computed bits) is no node of the graph the realize computed, so what a realize does for any other value is done
    here: its views are moved onto the storage, and the graph that computed it is remembered for it."""
    for t, b in zip(tensors, bits, strict=True):
        if t is b:
            continue
        old, new = t.uop, UOp(Ops.BITCAST, dtypes.bfloat16, (b.uop,))
        live_tensors.set_uop(t, new)
        if old is new or old.op is Ops.BITCAST or old.op in _VIEW_NODES:
            continue
        _move_views(old, new)
        source = computed_from.get(b.uop)
        if source is not None and new not in computed_from and _storage_uop(old) is source:
            # (the bits are followed back to the graph of old's bits; the value to old, where a write into it looks
            # its history up: `write_history.gradient_history`)
            computed_from.remember_at(new, old, computed_from.stamp(b.uop))


def _move_views(old: UOp, new: UOp) -> None:
    # the live tensors whose graphs are views of `old`, made the same views of `new`: left on `old`, PyTorch's views
    # of the storage would be lazy copies a write through them never reaches (`y = (x.bfloat16() * 1).contiguous();
    # v = y[1:]; y.realize(); v.add_(1)` left y as it was)
    for v in live_tensors.changed_since(old.seq):
        chain, u = [], v.uop
        while u is not old and u.op in _VIEW_NODES:
            chain.append(u)
            u = u.src[0]
        if u is not old or not chain:
            continue
        u = new
        for n in reversed(chain):
            u = n.replace(src=(u,))
        live_tensors.set_uop(v, u)
