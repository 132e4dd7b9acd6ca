"""Which tensors are leaves of autograd's graph, and what their `requires_grad` flags say: torch's table.

A leaf is a tensor no gradient flows back from: one given requires_grad, or one that doesn't require a gradient (a
constant, a value computed under no_grad, from a detach or from tensors that want none). A value computed from a
tensor that requires grad is no leaf: its flag can't be changed (`requires_grad_()` leaves it as it is), `retain_grad()`
fills its `.grad`, and `detach_()` makes it a leaf. A leaf frozen with `requires_grad_(False)` no longer counts for the
values computed from it: they are leaves that don't require grad, as torch's.

Nodes are hash-consed, so a flag can't live on a node: a tensor given requires_grad gets a node of its own
(`own_leaf`), the tensors that want a gradient are kept in `tensors_with_grad`, and the rest is found by walking a
value's graph back to them (`computed_with_grad`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from uopkit.dtype import dtypes
from uopkit.schedule import computed_from, realized_views, unrealized_graph
from uopkit.schedule import live_tensors as _all_tensors
from uopkit.tensor import gradient_reach as _gradient_reach
from uopkit.tensor.support import (
    _A_COPY,
    _A_RESHAPED_COPY,
    _contiguous_ids,
    _storage_uop,
    retaining_grad,
    tensors_with_grad,
)
from uopkit.uop.ops import GroupOp, Ops, UOp

_LEAF_ONLY = "requires_grad: this tensor is computed from others (not a leaf); only a leaf's flag can be set."
_USE_DETACH = " detach() gives a copy of it outside the graph."


def set_requires_grad(t: Any, value: Any, method: bool = False) -> None:
    """torch's `t.requires_grad = value` (`method`: its `t.requires_grad_(value)`). Only a leaf's flag changes: on a
    value computed from a tensor that requires grad the setter raises, and the method raises for False and leaves it
    as it is for True. A leaf given True gets a node of its own and its gradient in `.grad`; given False it is frozen:
    what is computed from it no longer requires grad."""
    if type(value) is not bool:
        if method:
            raise TypeError(f"requires_grad_(): argument 'requires_grad' must be bool, not {type(value).__name__}")
        raise RuntimeError("requires_grad must be a bool")
    if value and not dtypes.is_float(t.uop.dtype):
        raise RuntimeError(
            f"requires_grad: only float tensors can require gradients, this one is {t.uop.dtype} (as PyTorch); cast "
            "it to a float dtype first"
        )
    flag = t._requires_grad
    if value and flag is None and tensors_with_grad.was_given_requires_grad((t.uop,)):
        # the very view of storage another leaf was made of (`w[3]` built twice is one node): a leaf too, of its own
        _all_tensors.set_uop(t, own_leaf(t.uop, shared_view=True))
    # (asked before anything changes; the walk is the one a leaf given True needs anyway)
    computed = computed_with_grad(t) if flag is None or (flag and _retained(t)) else False
    if computed:
        if method and value:
            return
        raise RuntimeError(_LEAF_ONLY + ("" if value else _USE_DETACH))
    if not value:
        if flag:
            freeze(t)
        else:
            t._requires_grad = False
        return
    # a leaf gets a node of its own (`own_leaf`); a detached value is always a leaf
    own = own_leaf(t.uop)
    if own is not t.uop and (flag is None or t.uop.base.op is Ops.DETACH or not requires_grad_of(t)):
        _all_tensors.set_uop(t, own)
    want_gradient(t)


def checked_grad(t: Any, grad: Any, tensor: type) -> Any:
    """`grad` if it may be assigned to `t.grad`, as torch's setter: None, or a `tensor` of t's shape, dtype and
    device."""
    if grad is None:
        return None
    if not isinstance(grad, tensor):
        raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type {type(grad).__name__}")
    for what, theirs, mine in (("size", grad.shape, t.shape), ("dtype", grad.dtype, t.dtype)):
        if theirs != mine:
            raise RuntimeError(
                f"grad: attempting to assign a gradient of {what} {theirs} to a tensor of {what} {mine} (the gradient "
                f"must have the tensor's shape, dtype and device: reshape or cast it)"
            )
    if grad.device != t.device:
        raise RuntimeError(
            f"grad: attempting to assign a gradient on device {grad.device} to a tensor on device {t.device}; "
            f"move it with .to({t.device!r})"
        )
    return grad


def want_gradient(t: Any) -> None:
    # `t` is one whose gradient backward() writes into `.grad` (a leaf, or a non-leaf given retain_grad())
    t._requires_grad = True
    t._wanted_grad = True
    tensors_with_grad.add(t)


def freeze(t: Any) -> None:
    # `t` no longer wants a gradient, and the node it had as a leaf no longer counts as one (a value computed from it
    # is no value computed from a leaf that requires grad: `tensors_with_grad.was_given_requires_grad`)
    t._requires_grad = False
    tensors_with_grad.forget_leaf(t, gradient_keys(t))


def _retained(t: Any) -> bool:
    # (by identity: a WeakSet compares its members with ==, elementwise for tensors)
    return any(r is t for r in retaining_grad)


def retain_grad(t: Any, own_node: Callable[[Any], None]) -> None:
    """torch's `t.retain_grad()`: a value computed from a tensor that requires grad gets its `.grad` on the next
    backward(); a leaf has it already; a tensor that doesn't require grad raises. `own_node` is called on `t` first
    (`tensor_hooks.own_node`: a node of its own where another tensor's hooks or retain_grad() are on its value)."""
    if t._requires_grad:
        return
    if not dtypes.is_float(t.dtype) or not requires_grad_of(t):
        raise RuntimeError(
            f"retain_grad: the {t.dtype} tensor of shape {t.shape} does not require grad, so it gets no gradient to "
            "keep"
        )
    own_node(t)
    want_gradient(t)
    retaining_grad.add(t)


def detach_in_place(t: Any) -> None:
    """torch's `t.detach_()`: `t` is cut from the graph that computed it and no longer requires grad; a view (of a
    reshape, a slice, a permute, ...) raises, as torch's."""
    ref = t._view_of
    if ref is not None and ref is not _A_COPY and ref is not _A_RESHAPED_COPY and t.uop.op in GroupOp.Movement:
        raise RuntimeError("detach_: this tensor is a view of another; detach it out of place with detach()")
    _all_tensors.set_uop(t, UOp(Ops.DETACH, t.dtype, (t.uop,)))
    if t._requires_grad:
        freeze(t)
    else:
        t._requires_grad = False


def computed_with_grad(t: Any) -> bool:
    # torch's non-leaf: computed (not under no_grad, not through a detach) from a tensor that requires grad. A
    # non-leaf given retain_grad() has its flag set; it stays one
    if not t._requires_grad:
        return requires_grad_of(t)
    return not is_leaf(t)


def is_leaf(t: Any) -> bool:
    """torch's `t.is_leaf`: `t` was not computed from another tensor that needs a gradient (a detached value is a
    leaf), so backward() stops at it."""
    own = set(gradient_keys(t))
    others = {k for w in tensors_with_grad.live() if w is not t for k in gradient_keys(w)}
    others = others.union(tensors_with_grad.dropped()) - own
    if not others:
        return True
    # (values realized since are followed back to what computed them, as backward() does)
    root = unrealized_graph(t.uop, others, check_writes=False)
    # (a wanted node is reached even where it is a DETACH: a leaf made as `x.detach().requires_grad_()`)
    return not any(k in others for k in root.toposort(gate=functools.partial(reaches_past, others)))


def requires_grad_of(t: Any, wanted: set[UOp] | None = None) -> bool:
    """torch's `t.requires_grad` for any tensor: a leaf given it, or a value computed (not under no_grad, not through
    a detach) from one. `wanted`: the gradient keys of the live tensors with requires_grad, when the caller has them."""
    if t._requires_grad:
        return True
    if not dtypes.is_float(t.dtype):
        return False
    if wanted is None:
        wanted = wanted_keys()
    seen: set[UOp] = set()
    if _gradient_reach.walk_back(t.uop, wanted.__contains__, seen):
        return True
    # (a leaf given requires_grad that nobody holds any more still counts, as in torch)
    return tensors_with_grad.was_given_requires_grad(seen)


def wanted_keys() -> set[UOp]:
    return {k for w in tensors_with_grad.live() for k in gradient_keys(w)}


def gradient_key(t: Any) -> UOp:
    # a bfloat16 tensor is read through the graph of its bits (support._storage_uop): its gradient arrives there, in
    # float32 (`.grad` is cast back to bfloat16)
    return _storage_uop(t.uop) if t.dtype == dtypes.bfloat16 else t.uop


def not_detached(u: UOp) -> bool:
    # no gradient flows into a DETACH, nor into what a KERNEL computed (already storage)
    return u.op is not Ops.DETACH and u.op is not Ops.KERNEL


def reads_realized(u: UOp) -> bool:
    """Whether a gradient through `u` goes through a realized value that backward() follows back to its graph (a
    custom Function's or a host computation's input, tied in where that walk looks: autograd._tied, lapack._node)."""
    return any(n in computed_from for n in u.toposort(gate=not_detached))


def reaches_past(wanted: set[UOp], u: UOp) -> bool:
    # a toposort gate: through what a gradient flows through, and onto the wanted nodes themselves
    return u in wanted or not_detached(u)


def gradient_keys(t: Any) -> tuple[UOp, ...]:
    # the nodes a tensor's gradient arrives at: its own, and for a lazy leaf realized along with a value computed from
    # it (`b = Tensor.zeros(3, requires_grad=True); out = x + b; out.numpy()`), the node it was before, which the
    # graphs of such values still hold. A realized view (a reshape, a transpose, a matmul's output: a view of the
    # new storage, which alone remembers what computed it) was the view it is over the old graph (`realized_views`)
    key = gradient_key(t)
    before = computed_from.get(key)
    if before is None:
        before = realized_views.get(key)
    return (key,) if before is None else (key, before)


def own_leaf(u: UOp, shared_view: bool = False) -> UOp:
    # the node of a leaf just given requires_grad: a DETACH of its own (a fresh arg) under its views, as a Tensor(...)
    # leaf has a BUFFER of its own. Nodes are hash-consed: a constant (`Tensor.ones(2)`), a detached value
    # (`base.detach()` twice) or a value computed from tensors wanting no gradient is the same node wherever it is
    # built again, and would share the leaf's gradient, or pass for the leaf once it is dropped (`is_leaf`). A detach
    # stays a DETACH over the same value, a view of that storage, as PyTorch's detach. A view of storage keeps its
    # node (a parameter is a reshape of its buffer) unless another leaf was made of that view (`shared_view`)
    chain = u.movement_chain()
    base = chain[-1].src[0] if chain else u
    if _is_own_node(base) and not (shared_view and chain):
        return u
    out = UOp(Ops.DETACH, base.dtype, base.src if base.op is Ops.DETACH else (base,), ("leaf", next(_contiguous_ids)))
    for m in reversed(chain):
        out = UOp(m.op, m.dtype, (out, *m.src[1:]), m.arg)
    return out


def _is_own_node(base: UOp) -> bool:
    # storage (a buffer, a write into one; a bfloat16 one read as its bits) or a node made with a fresh arg
    # (`contiguous()`, a leaf's own DETACH): no other tensor is built as it
    if base.op is Ops.BITCAST:
        base = base.src[0].base
    if base.op is Ops.CONTIGUOUS or base.op is Ops.DETACH:
        return base.arg is not None
    return base.op is Ops.BUFFER or base.op is Ops.STORE
