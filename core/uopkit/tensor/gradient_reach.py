"""Whether a gradient can flow through a graph: the walk back over it as backward() follows it (`walk_back`, also
behind `Tensor.requires_grad`), and the question a realize asks of each graph it stores
(`uopkit.schedule.gradient_reaches`): only such graphs are remembered as what computed a value (`computed_from`), so
a value recomputed in a loop from tensors that want no gradient doesn't hold every earlier value alive."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Container
from typing import Any

from uopkit.dtype import dtypes
from uopkit.gradient import given_gradient
from uopkit.schedule import computed_from, realized_views, stale_sources
from uopkit.tensor.support import tensors_with_grad
from uopkit.uop.ops import GroupOp, Ops, UOp

# (a module constant: EnumType's attribute lookup is slow, and this runs for every node of every walk)
_MOVEMENT = GroupOp.Movement


class _Wanting:
    """What `reaches` looks for, found once per realize: the gradient keys of the tensors that want a
    gradient, those of the ones given requires_grad and then frozen (their leaf nodes no longer count), and the nodes
    a walk has found reaching neither."""

    __slots__ = ("wanted", "frozen", "reach_none")

    def __init__(self, keys_of: Callable[[Any], tuple[UOp, ...]]) -> None:
        self.wanted = {k for w in tensors_with_grad.live() for k in keys_of(w)}
        self.frozen = {k for t in tensors_with_grad.frozen() for k in keys_of(t)}
        self.reach_none: set[UOp] = set()

    def found(self, u: UOp) -> bool:
        if u in self.wanted or (u not in self.frozen and tensors_with_grad.was_given_requires_grad((u,))):
            return True
        # (a realized value whose graph was dropped as stale: it read one, and a backward() through it raises)
        return bool(len(stale_sources)) and u in stale_sources


def walk_back(root: UOp, found: Callable[[UOp], bool], seen: set[UOp], skip: Container[UOp] = ()) -> bool:
    """Whether `found` is true of a node a gradient would flow back through from `root`, as backward() follows the
    graph: a node's sources (not into a DETACH's, nor into what a KERNEL computed, nor behind a bool mask), the graph
    a realized value was computed from (`computed_from`), the inputs of a node with a given gradient (a Function's
    output). `seen` gets every node walked; `skip`: nodes known to lead to none, not walked. (`Tensor.requires_grad`
    and `reaches`.)"""
    # breadth first: a layer's weights sit a few nodes below its output, its input a whole network below
    queue = deque([root])
    while queue:
        u = queue.popleft()
        if u in seen or u in skip:
            continue
        seen.add(u)
        if found(u):
            return True
        if u.dtype == dtypes.bool:
            # a mask (a comparison, isnan, a bool cast) carries no gradient, so nothing behind it makes a value require
            # one, as torch's: `where(x > 0, 1.0, 0.0)` and `zeros(n).masked_fill(x > 0, 1.0)` don't
            continue
        before = computed_from.get(u)
        if before is None and u.op in _MOVEMENT:
            # (a realized view: the view it was over the old graph, which may carry a gradient rule of its own)
            before = realized_views.get(u)
        if before is not None:
            queue.append(before)
        if u.op is Ops.DETACH or u.op is Ops.KERNEL or _cast_from_integer(u):
            continue
        queue.extend(u.src)
        given = given_gradient(u)
        if given is not None:
            queue.extend(given[0])
    return False


def _cast_from_integer(u: UOp) -> bool:
    # a float made from an integer or bool (`x.long().float()`, `(x > 0).float()`): backward's CAST rule gives such a
    # source no gradient, so nothing behind it makes the value require one, as torch's. (Only casts to a float: a
    # bfloat16 value's gradient is followed through the integer graph of its bits, which this must not cut)
    return u.op is Ops.CAST and dtypes.is_float(u.dtype) and not dtypes.is_float(u.src[0].dtype)


def reaches(root: UOp, memo: dict[Any, Any], keys_of: Callable[[Any], tuple[UOp, ...]]) -> bool:
    """Whether a gradient can flow through the graph `root` (`uopkit.schedule.gradient_reaches`: asked for the graph
    of each value a realize stores): it reads, not behind a DETACH, a tensor that wants one, a leaf given
    requires_grad that nobody holds any more, or a realized value whose graph does (followed back, as backward()
    does). `memo`: shared by the questions of one realize; `keys_of`: the nodes a tensor's gradient arrives at."""
    if not tensors_with_grad.any_given():
        return False
    wanting = memo.get(_Wanting)
    if wanting is None:
        wanting = memo[_Wanting] = _Wanting(keys_of)
    seen: set[UOp] = set()
    if walk_back(root, wanting.found, seen, wanting.reach_none):
        return True
    # (every node seen reaches none: a later question of the same realize stops at them)
    wanting.reach_none |= seen
    return False
