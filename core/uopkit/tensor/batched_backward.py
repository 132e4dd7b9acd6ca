"""Many vector-Jacobian products in one pass: a backward graph built once, for a placeholder cotangent, then given a
batch axis (`batch_graph`), so a stack of cotangents (the one-hot rows of a Jacobian, `grad(is_grads_batched=True)`'s
batch) runs through one graph, one schedule and one set of kernels instead of one backward pass per row.

A backward pass is linear in its cotangent, and its graph is made of elementwise ops, movement ops and reductions:
each node that depends on the cotangent gets a leading batch dimension (a movement op's argument and a reduction's
axes shift by one; an elementwise op's other operands, computed from the forward pass only, are broadcast along it),
and the rest of the graph (the forward values) is shared by every row. A node of another kind on the cotangent's path
(a custom kernel, an assign, a symbolic shape) raises `NotBatchable`, and the callers take one pass per row; so do
while any tensor hook is registered, or `.grad` is retained (they see each row's gradient, as torch's).

The rows are evaluated in chunks, at most `ROW_BUDGET` elements of the widest node per chunk (the last chunk padded with
zero rows to the same size, so every chunk runs the same kernels).

>>> from uopkit import Tensor
>>> from uopkit.tensor.autograd import grad
>>> x = Tensor([1.0, 2.0], requires_grad=True)
>>> rows = vjp_rows(grad, (x * x,), (x,), lambda s, e: [Tensor.eye(2)[s:e]], 2, create_graph=False)
>>> rows[0].tolist()
[[2.0, 0.0], [0.0, 4.0]]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from uopkit.dtype import DType
from uopkit.engine.realize import buffers
from uopkit.tensor.support import retaining_grad
from uopkit.tensor.tensor import Tensor
from uopkit.tensor.tensor_hooks import any_hooks
from uopkit.uop.ops import GroupOp, Ops, UOp

__all__ = ["NotBatchable", "batch_graph", "one_hot_rows", "vjp_rows", "ROW_BUDGET"]

# elements of the widest cotangent-dependent node, summed over a chunk's rows: 2**24 float32s are 64 MiB
ROW_BUDGET = 1 << 24

_ELEMENTWISE = GroupOp.Elementwise | {Ops.CONTIGUOUS, Ops.DETACH}
_RESHAPE, _EXPAND, _PERMUTE, _PAD, _SHRINK, _FLIP = (
    Ops.RESHAPE,
    Ops.EXPAND,
    Ops.PERMUTE,
    Ops.PAD,
    Ops.SHRINK,
    Ops.FLIP,
)
_REDUCE_AXIS, _COPY, _SINK = Ops.REDUCE_AXIS, Ops.COPY, Ops.SINK


class NotBatchable(Exception):
    """A node on the cotangent's path that `batch_graph` has no batched form of: take one backward pass per row."""


def _broadcast(u: UOp, batch: int) -> UOp:
    # an operand computed without the cotangent: the same for every row
    shape = u.shape
    if shape is None:
        raise NotBatchable(f"{u.op.name} has no shape")
    ret = UOp(_RESHAPE, u.dtype, (u,), (1, *shape))
    return ret if batch == 1 else UOp(_EXPAND, u.dtype, (ret,), (batch, *shape))


def _batched_arg(u: UOp, batch: int) -> Any:
    op, arg = u.op, u.arg
    if op is _RESHAPE or op is _EXPAND:
        return (batch, *arg)
    if op is _PERMUTE:
        return (0, *(i + 1 for i in arg))
    if op is _PAD:
        return ((0, 0), *arg)
    if op is _SHRINK:
        return ((0, batch), *arg)
    if op is _FLIP:
        return (False, *arg)
    if op is _REDUCE_AXIS:
        return (arg[0], tuple(a + 1 for a in arg[1]))
    return arg


def _order(roots: Sequence[UOp]) -> list[UOp]:
    # every node of the roots' graphs, sources first
    return list(UOp(_SINK, src=tuple(roots)).toposort())[:-1]


def _widest(order: list[UOp], seeds: Sequence[UOp]) -> int:
    # the most elements of a node that depends on `seeds`
    dependent = set(seeds)
    widest = max((math.prod(u.shape or ()) for u in seeds), default=1)
    for u in order:
        for s in u.src:
            if s in dependent:
                dependent.add(u)
                widest = max(widest, math.prod(u.shape or ()))
                break
    return widest


def batch_graph(roots: Sequence[UOp], given: dict[UOp, UOp], batch: int) -> list[UOp]:
    """`roots` rebuilt with each node of `given` replaced by its value (the node's shape with a leading dimension of
    size `batch`) and every node that depends on one given a leading batch dimension too. Raises NotBatchable for a
    node it can't batch, or when a root doesn't depend on `given`, or one of `given`'s buffers is read other than
    through its given node."""
    return _batched(_order(roots), roots, given, batch)


def _batched(order: list[UOp], roots: Sequence[UOp], given: dict[UOp, UOp], batch: int) -> list[UOp]:
    new = dict(given)
    hidden = {u.base for u in given if u.base is not u}
    shared: dict[UOp, UOp] = {}
    for u in order:
        if u in new:
            continue
        for s in u.src:
            if s in new:
                break
        else:
            if hidden and any(s in hidden for s in u.src):
                raise NotBatchable("the cotangent's buffer is read directly")
            continue
        op = u.op
        if op in _ELEMENTWISE:
            src = []
            for s in u.src:
                b = new.get(s)
                if b is None:
                    b = shared.get(s)
                    if b is None:
                        b = shared[s] = _broadcast(s, batch)
                src.append(b)
        elif op is _COPY and u.src[0] in new:
            src = [new[u.src[0]], *u.src[1:]]
        elif (op in GroupOp.Movement or op is _REDUCE_AXIS) and len(u.src) == 1:
            src = [new[u.src[0]]]
        else:
            raise NotBatchable(f"no batched form of {op.name}")
        new[u] = UOp(op, u.dtype, tuple(src), _batched_arg(u, batch))
    for r in roots:
        if r not in new:
            raise NotBatchable("a result doesn't depend on the cotangent")
    return [new[r] for r in roots]


def _placeholder(like: Tensor) -> Tensor:
    # a cotangent that is never read: a buffer of its own (never allocated), so the graph's nodes that depend on it
    # are told apart from the forward pass's
    buf = UOp.new_buffer(like.device, max(like.numel(), 1), like.dtype)
    shape = tuple(like.shape)
    return Tensor(buf if shape == (buf.arg[2],) else UOp(_RESHAPE, like.dtype, (buf,), shape))


def one_hot_rows(n: int, shape: tuple[int, ...], dtype: DType, device: str) -> Callable[[int, int], list[Tensor]]:
    """The cotangents of rows start..stop of a Jacobian of an output of `shape` (n elements): one-hot tensors of
    shape (stop - start, *shape), a buffer of their own per chunk (rows past n are zeros)."""

    def rows(start: int, stop: int) -> list[Tensor]:
        eye = np.zeros((stop - start, n), dtype=np.float32)
        k = np.arange(start, min(stop, n))
        eye[k - start, k] = 1.0
        return [Tensor(eye.reshape(stop - start, *shape), device=device).cast(dtype)]

    return rows


def vjp_rows(
    grad_fn: Callable[..., tuple[Tensor | None, ...]],
    outs: Sequence[Tensor],
    ins: Sequence[Tensor],
    cotangents: Callable[[int, int], list[Tensor]],
    n: int,
    create_graph: bool,
    chunk_size: int | None = None,
    pad: bool = True,
) -> list[Tensor | None] | None:
    """For each of `ins`, the n vector-Jacobian products of `outs` stacked (shape (n, *input.shape)), None for an
    input the outputs don't reach; `cotangents(start, stop)` gives rows start..stop of each output's cotangent (shape
    (stop - start, *output.shape); with `pad` a chunk may ask for rows past n, which it must give as zeros). Returns
    None where the backward graph can't be batched (the caller takes one pass per row). `grad_fn` is
    uopkit.autograd.grad; `outs` all require grad."""
    if n <= 1 or retaining_grad:
        # (one row is one pass already; a retained tensor's `.grad` would be given the placeholder's graph)
        return None
    if any_hooks():
        # (a hook sees each row's gradient, as torch's, not the placeholder's; any hook at all, since one on the way
        # may be behind an output already realized, where a walk of the outputs' graphs doesn't see it)
        return None
    seeds = [_placeholder(o) for o in outs]
    grads = grad_fn(tuple(outs), tuple(ins), tuple(seeds), create_graph=create_graph, allow_unused=True)
    if any(s.uop.base in buffers for s in seeds):
        # (a backward read the cotangent's value, say a custom Function's on the host: what it made of the
        # placeholder's unset memory is in the graph, so each row takes a pass of its own)
        return None
    present = [g for g in grads if g is not None]
    if not present:
        return [None] * len(grads)
    roots = [g.uop for g in present]
    order = _order(roots)
    step = min(n, chunk_size or max(1, ROW_BUDGET // max(_widest(order, [s.uop for s in seeds]), 1)))
    chunks: list[list[Tensor]] = [[] for _ in present]
    for start in range(0, n, step):
        stop = start + step if pad else min(start + step, n)
        given = {s.uop: c.cast(s.dtype).uop for s, c in zip(seeds, cotangents(start, stop), strict=True)}
        try:
            batched = _batched(order, roots, given, stop - start)
        except NotBatchable:
            return None
        part = [Tensor(u) for u in batched]
        if not create_graph:
            part = [t.detach() for t in part]
            if step < n:
                # (bounded memory: each chunk is stored before the next one's graph is built)
                Tensor.realize(*part)
        for c, t in zip(chunks, part, strict=True):
            c.append(t)
    stacked = iter([(c[0] if len(c) == 1 else Tensor.cat(*c, dim=0))[:n] if c else None for c in chunks])
    return [next(stacked) if g is not None else None for g in grads]
