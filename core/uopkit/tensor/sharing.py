"""Tensors in memory that other processes map (torch's `share_memory_`, for Hogwild training with multiprocessing).

`share_memory_` swaps the Buffer behind a tensor's BUFFER node for one in a `SharedSegment` with the same contents:
every tensor over that node (views, `.data`, a parameter) now reads and writes the segment, and the writes into it stay
in place (an assign, an optimizer step, `add_`, `copy_`, setitem STORE into the node's buffer, never into a new one).
A process forked later maps the segment as it is. multiprocessing's pickler (`ForkingPickler`: a spawned child's
arguments, a Queue's items) sends a tensor over shared storage as the segment and the movement ops over it, and the
receiver rebuilds the view over the same memory; a tensor in private memory goes as a copy of its values, as plain
pickle sends every tensor."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from uopkit.device import Buffer, Device, SharedSegment
from uopkit.dtype import DType, dtypes
from uopkit.engine.realize import buffers, realize_lock
from uopkit.tensor.indexing import _give_storage
from uopkit.tensor.support import _bf16_alias, _storage_uop
from uopkit.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

# the BUFFER node over each segment mapped in this process, by the segment's identity: a tensor received over a segment
# this process already maps (sent back through a Queue) is a view of the same node, as torch's received storage is
_nodes_of_segments: weakref.WeakValueDictionary[tuple[int, int], UOp] = weakref.WeakValueDictionary()
# the Tensor classes registered with multiprocessing's pickler (it looks reducers up by exact class)
_registered: set[type] = set()


def _storage_node(u: UOp) -> UOp | None:
    # the BUFFER a tensor's graph shows as storage (through views, detaches and an assign still to run), or None
    u = _storage_uop(u)
    while u.op is not Ops.BUFFER:
        if u.op in GroupOp.Movement or u.op is Ops.DETACH or u.op is Ops.STORE:
            u = u.src[0]
        else:
            return None
    return u


def shared_segment(t: Tensor) -> SharedSegment | None:
    """The shared memory t's storage lies in, or None."""
    node = _storage_node(t.uop)
    buffer = buffers.get(node) if node is not None else None
    return None if buffer is None else buffer.segment


def share_memory(t: Tensor) -> Tensor:
    """`t.share_memory_()`: t's storage (computed first if t is lazy) moved to shared memory; nothing to do if it is."""
    allocator = Device[t.device].allocator
    if not allocator.supports_shared_memory:
        raise RuntimeError(
            f"share_memory_: a tensor on {t.device} can't be shared with other processes: only host (CPU) memory can "
            f"be mapped by them. Share a CPU copy (t.to('CPU').share_memory_()) and, in each process, copy it to "
            f"{t.device} when it is read and back when it is written"
        )
    # (no other thread's realize writes the old buffer between the copy and the swap)
    with realize_lock:
        if shared_segment(t) is not None:
            return t
        # (a lazy value, or one PyTorch would hold in storage of its own, gets that storage first)
        _give_storage(t)
        node = _storage_node(t.uop)
        assert node is not None and node in buffers, f"share_memory_: no storage for {t}"
        old = buffers[node]
        shared = old.to_shared_memory()
        buffers[node] = shared
        # a bfloat16 buffer's memory is also held under its uint16 alias (support._bf16_alias)
        for bf16, alias in list(_bf16_alias.items()):
            if bf16 is node or alias is node:
                for u in (bf16, alias):
                    if buffers.get(u) is old:
                        buffers[u] = shared
    assert shared.segment is not None
    _nodes_of_segments[shared.segment.key] = node
    register_reductions()
    return t


def register_reductions() -> None:
    """Teach multiprocessing's pickler (`ForkingPickler`, which sends a spawned child's arguments and a Queue's items)
    to send Tensors (and the subclasses defined so far) over shared memory as views of it."""
    from multiprocessing.reduction import ForkingPickler

    classes: list[type] = [Tensor]
    while classes:
        cls = classes.pop()
        if cls not in _registered:
            ForkingPickler.register(cls, _reduce_for_process)
            _registered.add(cls)
        classes.extend(cls.__subclasses__())


def _reduce_for_process(t: Tensor) -> tuple[Any, tuple[Any, ...]]:
    # how multiprocessing sends t: over shared memory, the segment and the view of it; else its values (a copy)
    if shared_segment(t) is None:
        return t.__reduce__()
    # (an assign still to run lands before the receiver reads the memory)
    t.realize()
    moves: list[tuple[Ops, Any]] = []
    node = _storage_uop(t.uop)
    while node.op is not Ops.BUFFER:
        if node.op is Ops.DETACH:
            node = node.src[0]
            continue
        if node.op not in GroupOp.Movement or len(node.src) != 1:
            raise RuntimeError(
                f"can't send this view of shared memory ({node.op.name}) to another process; send the tensor it views"
            )
        moves.append((node.op, node.arg))
        node = node.src[0]
    buffer = buffers[node]
    requires_grad = t._requires_grad
    if requires_grad is None and t.requires_grad:
        requires_grad = True
    args = (type(t), buffer.segment, buffer.device, buffer.size, node.dtype, tuple(reversed(moves)), t.dtype)
    return _received_tensor, (*args, requires_grad)


def _received_tensor(
    cls: type,
    segment: SharedSegment,
    device: str,
    size: int,
    storage_dtype: DType,
    moves: tuple[tuple[Ops, Any], ...],
    dtype: DType,
    requires_grad: bool | None,
) -> Tensor:
    # a tensor sent by `_reduce_for_process`: the same view of the same memory, mapped in this process
    node = _nodes_of_segments.get(segment.key)
    known = buffers.get(node) if node is not None else None
    if node is None or known is None or known.segment is None or known.segment.key != segment.key:
        node = UOp.new_buffer(device, size, storage_dtype)
        buffers[node] = Buffer.in_shared_memory(device, size, storage_dtype, segment)
        _nodes_of_segments[segment.key] = node
    u = node
    for op, arg in moves:
        u = UOp(op, storage_dtype, (u,), arg)
    if dtype == dtypes.bfloat16 and storage_dtype != dtype:
        u = UOp(Ops.BITCAST, dtype, (u,))
    out = Tensor(u) if cls is Tensor else cls.__new__(cls)
    if cls is not Tensor:
        Tensor.__init__(out, u)
    if requires_grad is not None:
        out.requires_grad = requires_grad
    register_reductions()
    return out
