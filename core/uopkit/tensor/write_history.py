"""What backward() follows through an in-place write into a value it computes a gradient through (used by
tensor/indexing.py's setitem and in-place ops).

A realized value is followed back to the graph that computed it (`computed_from`). A write autograd records (gradients
on) makes that graph the old one with the written positions replaced by the value written, so the gradient goes
through the write. A write it doesn't record (under `no_grad()`, `set_grad_enabled(False)`, `inference_mode()`, or
through `detach()` / `.data`) changes the values and not how they were computed, as PyTorch's: the gradient through
the tensor is still that of the graph before the write, taken at the values the write left (`unrecorded`).
`y = x * 1; with no_grad(): y[1:].mul_(2); (y * y).sum().backward()` gives x.grad = 2 * y (the written y), as torch."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from uopkit.dtype import dtypes
from uopkit.gradient import carry_gradient_rule, given_gradient, set_gradient
from uopkit.schedule import computed_from, forget_source
from uopkit.schedule.history import buffers_in, remember_rewritten
from uopkit.schedule.written_views import past_writes
from uopkit.tensor.grad_mode import is_grad_enabled, no_grad
from uopkit.tensor.support import _contiguous_ids, _storage_uop, tensors_with_grad
from uopkit.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from uopkit.tensor.tensor import Tensor

_MOVEMENT = GroupOp.Movement


@contextlib.contextmanager
def unseen_by_autograd(source: Tensor) -> Iterator[None]:
    """Around a write through `source.detach()`: it changes the values but not how they were computed, as PyTorch's
    (its autograd doesn't record it), so the write runs as one under no_grad (`unrecorded`). An assign keeps no graph
    for what it wrote: the contents it left are copied for the gradient's forward values."""
    source.realize()
    history = gradient_history(source.uop)
    stamp = 0 if history is None else computed_from.stamp(history[0])
    with no_grad():
        yield
    if history is not None and computed_from.get(history[0]) is None:
        node, graph = history
        _remember(node, unrecorded(graph, _contents_now(node), source.device), graph, stamp)


def gradient_history(u: UOp) -> tuple[UOp, UOp] | None:
    """(node, the graph that computed it) for the realized value `u` is a view of, if a backward() still follows it:
    the storage itself where it has one (a view realized with its base has its own entry too, `x[0:2]` of `x * 2`,
    which a write through it makes stale: forgotten here)."""
    found = None
    while True:
        source = computed_from.get(u)
        if source is not None:
            if found is not None:
                _forget(found[0])
            found = (u, source)
        if u.op is Ops.BITCAST and u.dtype == dtypes.bfloat16 and u.src[0].op in _MOVEMENT:
            # (a view of a realized bfloat16 value is the BITCAST of a view of its bits: the value it views is the
            # BITCAST of the bits under that view)
            u = UOp(Ops.BITCAST, dtypes.bfloat16, (u.src[0].src[0],))
            continue
        if u.op not in _MOVEMENT:
            return found
        u = u.src[0]


def history_of_plain_storage(t: Tensor, value: Tensor) -> tuple[UOp, UOp] | None:
    """For a value that carries a gradient written into realized storage no gradient follows back to (`z =
    Tensor.randn(3, 2); z[:, 0] = w`, `z.add_(w)`, `z.expand(2, 3, 2)[0].copy_(w)`): (the storage, a copy of its old
    contents), the graph the positions not written come from; None where the write carries no gradient."""
    if not carries_gradient(value.uop):
        return None
    # (the storage itself: a view of a lazy value is computed into its base first)
    t.realize()
    node = t.uop
    while node.op in _MOVEMENT:
        node = node.src[0]
    return node, _contents_now(node)


def _contents_now(node: UOp) -> UOp:
    # a copy of what the storage `node` holds now, standing for those values: not followed back to the storage (which
    # later writes change)
    copy = Tensor(node).contiguous().realize().uop
    _forget(copy)
    return copy


def _bits_of(node: UOp) -> UOp | None:
    # the uint16 bits under a realized bfloat16 value `node` (its BITCAST of them), which is what a gradient walk meets
    # (every reader reads the bits: `bits_gradients`); None for other values
    return node.src[0] if node.op is Ops.BITCAST and node.dtype == dtypes.bfloat16 else None


def _forget(node: UOp) -> None:
    # the graph remembered for the realized `node` dropped, and for its bits where it is a bfloat16 value
    forget_source(node)
    if (bits := _bits_of(node)) is not None:
        forget_source(bits)


def _remember(node: UOp, graph: UOp, before: UOp, stamp: int) -> None:
    # `remember_rewritten`, for a bfloat16 value's bits as well: the graph of the bits of `graph`, in place of those of
    # `before` (as a realize remembers both)
    remember_rewritten(node, graph, before, stamp)
    if (bits := _bits_of(node)) is not None:
        remember_rewritten(bits, _storage_uop(graph), _storage_uop(before), stamp)


def remember_write(
    node: UOp,
    source: UOp,
    value_graph: UOp,
    written: Callable[[Tensor, Tensor], Tensor] | None,
    recorded: bool,
    device: str,
) -> None:
    """The storage `node` stands for, which backward() followed to the graph `source`, now holds a write of
    `value_graph`: a gradient through it must see the write, so it follows `source` with the written positions
    replaced (`written(old, value)`; None: all of them), built lazily. Kept only where a gradient can flow (a buffer
    written every step, as a cache, would otherwise hold a chain of every write's graph). `recorded`: whether autograd
    records the write (gradients on); one it doesn't keeps `source`'s gradient at the values written (`unrecorded`)."""
    # (the clock `source` was remembered at: the write's assign dropped the memory, not its clock)
    stamp = computed_from.stamp(node)
    _forget(node)
    bits = _bits_of(node)
    # (a bfloat16 value is read through its bits: those reads read the bits of `source`)
    replaced = {node: source} if bits is None else {node: source, bits: _storage_uop(source)}
    value_graph = _rebuilt_over(value_graph, replaced, past=True)
    if not carries_gradient(source, value_graph):
        return
    base = (node if bits is None else bits).base
    # (a BUFFER: found among the buffers `value_graph` reads, kept for the graphs asked about, as the chain of writes
    # into a table grows one graph a write)
    if base in (buffers_in(value_graph) if base.op is Ops.BUFFER else value_graph.toposort()):
        if not recorded:
            # (the values written can't be computed again from `source`: they are copied)
            _remember(node, unrecorded(source, _contents_now(node), device), source, stamp)
        return
    if written is not None:
        graph = written(Tensor(source), Tensor(_stored_value(value_graph))).uop
    else:
        # (every position written: a value that doesn't read the old one, `y.zero_()`, still passes it a gradient,
        # zero, as PyTorch's ZeroBackward)
        graph = value_graph if _reads(value_graph, source) else _tied(source, value_graph, device)
    _remember(node, graph if recorded else unrecorded(source, graph, device), source, stamp)


def _stored(u: UOp) -> bool:
    """Whether `u` is a view of storage or of a constant (nothing a kernel computes)."""
    return u.base.op in (Ops.BUFFER, Ops.CONST, Ops.CONTIGUOUS, Ops.STORE)


def _stored_value(value: UOp) -> UOp:
    """The value a write stored, stored in the graph that remembers it, its gradient stored too: the forward pass
    computed it in a kernel of its own, and a gradient through the write recomputes it (and its gradient) so, not
    fused into every later value read from it. A recurrence written row by row (`D[i, 1:] = f(D[i - 1])`) then
    recomputes a row a kernel, and takes its gradient a row a kernel, the same kernels for every row; fused, each row
    recomputed the rows before it a few deep, in kernels that differed with the depth."""
    if _stored(value):
        return value
    node = UOp(Ops.CONTIGUOUS, value.dtype, (value,), ("written value", next(_contiguous_ids)))
    set_gradient(node, (value,), _gradient_stored)
    return node


def _gradient_stored(grad: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
    # a stored written value's gradient rule: the gradient, stored
    if _stored(grad):
        return (grad,)
    return (UOp(Ops.CONTIGUOUS, grad.dtype, (grad,), ("written value's gradient", next(_contiguous_ids))),)


def _rebuilt_over(graph: UOp, replaced: dict[UOp, UOp], past: bool = False) -> UOp:
    """`graph` with the nodes in `replaced` replaced by their new forms, in one pass over its nodes (sources first), for
    every dtype. A node rebuilt keeps the gradient given to it (`carry_gradient_rule`) only where the chain of rules
    has none: between a bfloat16 value's uint16 bits and what they are read as (every op on bfloat16 values gives its
    rule to the bits, the casts from them to the float they are read as). Between float nodes the chain of rules
    through the rebuilt graph is taken instead, as `UOp.substitute` leaves it: a rule given there may have read the
    nodes replaced (clamp's reads its input's values, which the write changed). `past`: a slice rebuilt over an
    earlier write's graph reads past the writes that don't reach it (`past_writes`: a row-by-row recurrence's value
    reads the row before it, not a chain of every write into the table)."""
    new_of = dict(replaced)
    get = new_of.get
    for u in graph.toposort():
        if u in new_of:
            continue
        src = u.src
        new_src = tuple([get(s, s) for s in src])
        if new_src != src:
            new_of[u] = new = UOp(u.op, u.dtype, new_src, u.arg)
            given = given_gradient(u)
            if past and u.op is Ops.SHRINK and given is None and (read := past_writes(new)) is not None:
                new_of[u] = read
                continue
            if given is not None and not all([dtypes.is_float(n.dtype) for n in (u, *given[0])]):
                carry_gradient_rule(u, new, new_of)
    return new_of.get(graph, graph)


def carries_gradient(*roots: UOp) -> bool:
    """Whether a tensor that wants a gradient is computed into one of the graphs (not behind a DETACH), following
    realized values back to the graphs that computed them, as backward() does."""
    # (a lazy leaf realized along with a value computed from it is the node it was in that value's graph, too)
    wanting = {_storage_uop(t.uop) for t in tensors_with_grad.live()}
    wanting |= {before for u in list(wanting) if (before := computed_from.get(u)) is not None}
    seen: set[UOp] = set()
    stack = list(roots) if wanting else []
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        if u in wanting:
            # (before the cut below: a leaf made as `x.detach().requires_grad_()` is a DETACH)
            return True
        seen.add(u)
        if u.op is Ops.DETACH:
            continue
        stack.extend(u.src)
        origin = computed_from.get(u)
        if origin is not None:
            stack.append(origin)
    return False


def unrecorded_write(old: UOp, written: UOp, device: str) -> UOp:
    """The value of a lazy tensor computed as `old` after a write `written` (its new graph): where autograd doesn't
    record the write and `old` carries a gradient, `unrecorded(old, written)`. A recorded write of a value that doesn't
    read `old` (`y.zero_()`, `y.copy_(v)`, `y.normal_()`) keeps `old` in the graph with a zero gradient, as PyTorch's
    (y still requires grad, and x.grad of `y = x * 1` is zeros, not None); else `written`, as it is."""
    if is_grad_enabled():
        # (most in-place ops read the old value, `out += residual`: found among the first nodes looked at)
        if _reads(written, old) or not carries_gradient(old):
            return written
        return _tied(old, written, device)
    if not carries_gradient(old):
        return written
    return unrecorded(old, written, device)


def _reads(graph: UOp, node: UOp) -> bool:
    # whether `graph` is computed from `node` where a gradient flows (not behind a DETACH, `y.copy_(y.detach() + 1)`):
    # breadth first, so a write that reads the old value at its top finds it at once
    seen = {graph}
    queue = collections.deque([graph])
    while queue:
        u = queue.popleft()
        if u is node:
            return True
        if u.op is Ops.DETACH:
            continue
        for s in u.src:
            if s not in seen:
                seen.add(s)
                queue.append(s)
    return False


def _tied(before: UOp, after: UOp, device: str) -> UOp:
    # the values `after`, with `before` tied in for the gradient walk to find it (a select that always takes `after`:
    # `before` gets a zero gradient)
    always = UOp(Ops.CONST, dtypes.bool, (UOp(Ops.DEVICE, arg=device),), True)
    if before.shape:
        always = UOp(Ops.RESHAPE, dtypes.bool, (always,), (1,) * len(before.shape))
        always = UOp(Ops.EXPAND, dtypes.bool, (always,), tuple(before.shape))
    return UOp(Ops.WHERE, after.dtype, (always, after, before))


def unrecorded(before: UOp, after: UOp, device: str) -> UOp:
    """The values `after` with the gradient of `before`: what a write autograd doesn't record leaves in a value that
    `before` computed (PyTorch's history stays the one before the write). A node of its own (nodes are shared: a rule
    given to an equal node would be given to every use of it) that reads `after`, detached, and passes the gradient it
    gets to `before` as it is; `before` is tied in (a select that always takes `after`) for the walk to find it."""
    if after.op is not Ops.DETACH:
        after = UOp(Ops.DETACH, after.dtype, (after,))
    node = UOp(
        Ops.CONTIGUOUS, after.dtype, (_tied(before, after, device),), ("unrecorded write", next(_contiguous_ids))
    )
    set_gradient(node, (before,), _passed_on)
    return node


def _passed_on(grad: UOp, wanted: tuple[bool, ...]) -> tuple[UOp | None, ...]:
    # an unrecorded write's gradient rule: its value's gradient is the one before it had
    return (grad,)
