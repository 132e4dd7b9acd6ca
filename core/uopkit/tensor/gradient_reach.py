"""Whether a gradient can flow through a graph a realize stores (`uopkit.schedule.gradient_reaches`): only such
graphs are remembered as what computed a value (`computed_from`), so a value recomputed in a loop from tensors that
want no gradient doesn't hold every earlier value alive."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from uopkit.gradient import given_gradient
from uopkit.schedule import computed_from, stale_sources
from uopkit.tensor.support import tensors_with_grad
from uopkit.uop.ops import Ops, UOp


class _Wanting:
    """What `reaches` looks for, found once per realize: the gradient keys of the tensors that want a
    gradient, those of the ones given requires_grad and then frozen (their leaf nodes no longer count), and the nodes
    a walk has found reaching neither."""

    __slots__ = ("wanted", "frozen", "reach_none")

    def __init__(self, keys_of: Callable[[Any], tuple[UOp, ...]]) -> None:
        self.wanted = {k for w in tensors_with_grad.live() for k in keys_of(w)}
        self.frozen = {k for t in tensors_with_grad.frozen() for k in keys_of(t)}
        self.reach_none: set[UOp] = set()


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
    wanted, frozen, none = wanting.wanted, wanting.frozen, wanting.reach_none
    stale = stale_sources
    # breadth first, as `_requires_grad`: a value's weights sit a few nodes below it
    seen: set[UOp] = set()
    queue = deque([root])
    while queue:
        u = queue.popleft()
        if u in seen or u in none:
            continue
        seen.add(u)
        if u in wanted or (u not in frozen and tensors_with_grad.was_given_requires_grad((u,))):
            return True
        if len(stale) and u in stale:
            # (a realized value whose graph was dropped as stale: it read one, and a backward() through it raises)
            return True
        before = computed_from.get(u)
        if before is not None:
            queue.append(before)
        if u.op is Ops.DETACH or u.op is Ops.KERNEL:
            continue
        queue.extend(u.src)
        given = given_gradient(u)
        if given is not None:
            queue.extend(given[0])
    # (every node seen reaches none: a later question of the same realize stops at them)
    none |= seen
    return False
