"""The hooks `Tensor.register_hook` adds, and how backward() finds the ones on its graph.

A hook belongs to the value: it runs where the gradient of its tensor's node arrives. In torch a hook is kept by the
graph node it is on, so it runs as long as a graph built from the value lives, also once the tensor object is gone (a
hook registered on an intermediate inside a module's forward: a DEQ's fixed point, Grad-CAM's activations). Here a
tensor's hooks are kept by the tensor while it lives, then by the nodes its gradient arrived at when the hook was
registered, for as long as a graph holds them.

Nodes are hash-consed: two tensors computed the same way (`a = x * 2; b = x * 2`, a sub-module called twice on one
input, a forward run again on the same input with the weights updated in place while an earlier run's graph is kept)
are one node. The first tensor that gets hooks or `retain_grad()` on a value keeps its node; each later one gets a
node of its own over the value (`own_node`: a CONTIGUOUS with an `OwnNode` arg), so that what is computed from it
afterwards is told apart, and backward() gives each tensor's hooks and `.grad` only the gradient through that tensor
(`compute_gradient` adds what arrives through the own nodes after the value's hooks ran), as torch's. A bfloat16
value's own node is one over its bits; a value in storage gets one over the graph remembered for its storage, or
(where a realize moved both tensors onto one storage) none: a node over the storage would no longer show what is
written into it to the views taken before. Where no own node can be made (a view, one storage), of
the gone tensors' hooks on one node only the latest registered run, and none where a live tensor's hooks are on it.

A backward pass asked for some inputs only (autograd.grad, backward(inputs=...)) runs hooks and fills retained
`.grad` only on the way to those inputs (`reaching`), as torch runs only the nodes on that way.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from uopkit.dtype import dtypes
from uopkit.gradient import OwnNode
from uopkit.schedule import computed_from
from uopkit.schedule import live_tensors as _all_tensors
from uopkit.tensor.leaves import gradient_keys as _gradient_keys
from uopkit.tensor.support import _contiguous_ids
from uopkit.uop.ops import GroupOp, Ops, UOp
from uopkit.uop.weak_map import WeakKeyMap

if TYPE_CHECKING:
    from uopkit.dtype import DType

    # (set at run time by tensor.py, which imports this module)
    from uopkit.tensor.tensor import Tensor

Hook = Callable[[Any], Any]


class RemovableHook:
    """What `Tensor.register_hook` returns: `remove()` takes the hook away."""

    _ids = itertools.count()

    def __init__(self, hooks: dict[int, Hook]) -> None:
        self.hooks, self.id = hooks, next(RemovableHook._ids)

    def remove(self) -> None:
        self.hooks.pop(self.id, None)


# id(tensor) -> (a weak reference to it, its hooks by handle id); an entry goes when its tensor does (to `_outliving`
# while its nodes live)
_hooked: dict[int, tuple[weakref.ref, dict[int, Hook]]] = {}

# the hooks of tensors that are gone, by the number their tensor's first hook drew (registration order) -> (the nodes
# the tensor's gradient arrived at then, weakly held; its dtype and shape; whether it was a leaf; its hooks by handle
# id). An entry goes when its last node does
_outliving: dict[int, tuple[tuple[weakref.ref, ...], DType, tuple, bool, dict[int, Hook]]] = {}
_registrations = itertools.count()


# the nodes hooks or retain_grad() were put on, held weakly, each -> a weak reference to the tensor that put them there
# first: a later tensor on one of them gets a node of its own (`own_node`)
_claimed = WeakKeyMap()
# what an own node is not put over directly: storage (a stored value's is over the graph remembered for it), a value cut
# from the graph, one made of bits (a bfloat16 value's is over its bits)
_NOT_OWNABLE = frozenset({*GroupOp.Movement, Ops.BUFFER, Ops.STORE, Ops.DETACH, Ops.BITCAST, Ops.CONST})


def _bfloat16_value(u: UOp) -> bool:
    # a computed bfloat16 value, read as its bits (`support._storage_uop`): an own node over it is one over its bits
    return u.op is Ops.BITCAST and u.dtype == dtypes.bfloat16 and u.src[0].base.op not in (Ops.BUFFER, Ops.STORE)


def own_node(t: Any) -> None:
    """Before hooks or `retain_grad()` go on the non-leaf `t`: where another tensor's hooks or `retain_grad()` are on
    its value already (the same node), `t` gets a node of its own over the value, and what is computed from `t` from
    now on reads that node, so its gradient is told apart from the other tensor's. Then `t`'s nodes are claimed."""
    keys = _gradient_keys(t)
    shared = [(ref := _claimed.get(k)) is not None and ref() is not t for k in keys]
    u = t.uop
    if not any(shared) or t._view_of is not None:
        pass
    elif u.op not in _NOT_OWNABLE or _bfloat16_value(u):
        _all_tensors.set_uop(t, UOp(Ops.CONTIGUOUS, u.dtype, (u,), OwnNode(next(_contiguous_ids))))
        keys = _gradient_keys(t)
    elif len(keys) == 2 and not shared[0] and computed_from.get(keys[0]) is keys[1]:
        # a value in storage (`(x * 2).realize()` twice: two buffers, one graph remembered for both): the graph
        # remembered for its storage gets the node of its own, where backward() follows what reads it back to; the
        # tensor stays its storage (its views see what is written into it)
        graph = keys[1]
        own = UOp(Ops.CONTIGUOUS, graph.dtype, (graph,), OwnNode(next(_contiguous_ids)))
        computed_from.remember_at(keys[0], own, computed_from.stamp(keys[0]))
        keys = _gradient_keys(t)
    ref = weakref.ref(t)
    for k in keys:
        if k not in _claimed:
            _claimed[k] = ref


def hooks_of(t: Any) -> dict[int, Hook]:
    """The hooks of the live tensor `t` by handle id (a dict `register_hook` adds to)."""
    entry = _hooked.get(id(t))
    if entry is None or entry[0]() is not t:
        if not t.is_leaf:
            own_node(t)
        hooks: dict[int, Hook] = {}
        # (taken now: a dead tensor's graph can't be read in the callback)
        kept = (next(_registrations), _gradient_keys(t), t.dtype, t.shape, t.is_leaf, hooks)
        entry = _hooked[id(t)] = (weakref.ref(t, functools.partial(_outlive, id(t), kept)), hooks)
    return entry[1]


def _outlive(key: int, kept: tuple, ref: weakref.ref) -> None:
    # (the id may belong to a newer tensor by now: only this reference's entry goes)
    entry = _hooked.get(key)
    if entry is not None and entry[0] is ref:
        del _hooked[key]
    number, nodes, dtype, shape, leaf, hooks = kept
    if not hooks:
        return
    forget = functools.partial(_forget_node, number)
    _outliving[number] = (tuple(weakref.ref(u, forget) for u in nodes), dtype, shape, leaf, hooks)


def _forget_node(number: int, _: weakref.ref) -> None:
    entry = _outliving.get(number)
    if entry is not None and all(ref() is None for ref in entry[0]):
        del _outliving[number]


def _hooked_values() -> list[tuple[tuple[UOp, ...], DType, tuple, bool, dict[int, Hook]]]:
    # every value whose hooks run: (its gradient keys, dtype, shape, whether a leaf, hooks), live tensors' with their
    # keys as they are now, then on each node the latest registered of the gone tensors' (none on a node a live
    # tensor's hooks are on) with their keys as they were
    out = []
    for ref, hooks in list(_hooked.values()):
        t = ref()
        if t is not None and hooks:
            out.append((_gradient_keys(t), t.dtype, t.shape, t.is_leaf, hooks))
    taken = {k for keys, *_ in out for k in keys}
    for number in sorted(_outliving, reverse=True):
        entry = _outliving.get(number)
        if entry is None:
            continue
        refs, dtype, shape, leaf, hooks = entry
        nodes = tuple(u for r in refs if (u := r()) is not None and u not in taken)
        if nodes and hooks:
            out.append((nodes, dtype, shape, leaf, hooks))
            taken.update(nodes)
    return out


def in_rebuilt_graph(keys: tuple[UOp, ...], forms: dict[UOp, UOp]) -> tuple[UOp, ...]:
    """A tensor's gradient keys and the forms they took where backward() rebuilt the graph over what computed the
    values realized since (`unrealized_graph`'s `forms`): a hooked or retained non-leaf computed from a value read
    before it (`c.numpy(); h = c * 3`), whose node reads c's storage, is there a node over c's graph, where its
    gradient arrives."""
    new = tuple(f for k in keys if (f := forms.get(k)) is not None and f not in keys)
    return keys + new if new else keys


def gradient_hooks(in_graph: dict[UOp, None], forms: dict[UOp, UOp]) -> dict[UOp, Callable[[UOp], UOp]]:
    """For each hooked value in the graph, the node its gradient arrives at and a function running its hooks (each
    tensor's in turn where several are the same node: hooks belong to the value)."""
    found: dict[UOp, Callable[[UOp], UOp]] = {}
    for keys, dtype, shape, _, hooks in _hooked_values():
        for key in in_rebuilt_graph(keys, forms):
            if key in in_graph:
                run = functools.partial(_run_hooks, dtype, shape, list(hooks.values()))
                earlier = found.get(key)
                found[key] = run if earlier is None else functools.partial(_run_in_turn, earlier, run)
    return found


def reaching(graph: dict[UOp, None], keys: set[UOp]) -> set[UOp]:
    """The nodes of `graph` (sources first) from which a gradient flows on to one of `keys`, and `keys` themselves. A
    backward pass asked for some inputs only (autograd.grad, backward(inputs=...)) runs the hooks and fills the
    retained `.grad` of these alone, as torch's, which runs only the nodes on the way to its inputs."""
    out: set[UOp] = set()
    for u in graph:
        if u in keys or (u.op is not Ops.DETACH and any(s in out for s in u.src)):
            out.add(u)
    return out


def flows_on(key: UOp, reach: set[UOp]) -> bool:
    """Whether the gradient arriving at `key` flows on to another of the keys `reach` was made for (torch's node for
    it runs then, and its hooks with it: autograd.grad takes such an input's gradient before them)."""
    return key.op is not Ops.DETACH and any(s in reach for s in key.src)


def _run_in_turn(first: Callable[[UOp], UOp], then: Callable[[UOp], UOp], g: UOp) -> UOp:
    return then(first(g))


def any_hooks() -> bool:
    """Whether any value's hooks may still run: a live tensor's, or a gone tensor's on a node that lives."""
    if any(hooks and ref() is not None for ref, hooks in list(_hooked.values())):
        return True
    return any(r() is not None for refs, *_ in list(_outliving.values()) for r in refs)


def hooked_non_leaf_keys() -> set[UOp]:
    """The gradient keys of the hooked values that are not leaves."""
    return {k for keys, _, _, leaf, _ in _hooked_values() if not leaf for k in keys}


def _run_hooks(dtype: DType, shape: tuple, hooks: list[Hook], g: UOp) -> UOp:
    grad = Tensor(g).cast(dtype) if dtype != g.dtype else Tensor(g)
    for hook in hooks:
        out = hook(grad)
        if out is None:
            continue
        if not isinstance(out, Tensor) or out.shape != grad.shape:
            raise RuntimeError(
                f"register_hook: a hook on a tensor of shape {shape} must return None or a Tensor of that shape, "
                f"got {out.shape if isinstance(out, Tensor) else type(out).__name__}"
            )
        grad = out
    return grad.cast(g.dtype).uop
