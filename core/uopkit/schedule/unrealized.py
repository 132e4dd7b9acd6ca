"""Graphs with their realized values put back: backward() follows a value realized since the forward pass (a loss
read with `.item()`, a state stored every step) back to the graph that computed it, as it was then."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable

from uopkit.dtype import dtypes
from uopkit.schedule.history import (
    StaleReads,
    _check_not_overwritten,
    computed_from,
    remembered_at,
    stale_sources,
)
from uopkit.schedule.read_masks import _not_store
from uopkit.schedule.written_views import past_writes
from uopkit.uop.ops import GroupOp, Ops, UOp
from uopkit.uop.weak_map import WeakKeyMap

# (module constants: on Python 3.11 every `Ops.X` is a slow lookup)
_STORE, _DETACH, _SHRINK = Ops.STORE, Ops.DETACH, Ops.SHRINK
_MOVEMENT = GroupOp.Movement

# realized view -> the view it was over the old graph (`uopkit.schedule._remember_source`)
realized_views = WeakKeyMap()


def unrealized_graph(
    root: UOp,
    keep: set[UOp],
    nodes: dict[UOp, None] | None = None,
    rebuilt: Callable[[UOp, UOp, dict[UOp, UOp]], None] | None = None,
    check_writes: bool | StaleReads = True,
    given: Callable[[UOp], object] | None = None,
    forms: dict[UOp, UOp] | None = None,
) -> UOp:
    """`root` with realized values replaced by the graphs that computed them (except the nodes in `keep`).

    STOREs are left as they are: no gradient flows through them, and their targets must stay storage. `nodes`: the
    nodes of `root`'s graph when the caller has them, or more (the gradient's walk, which goes through STOREs and
    stops only at the KERNELs under them). `rebuilt(old, new, replaced)` is told of each node rebuilt over new
    sources (`replaced`: every node so far -> its new form), for what the caller keeps per node (given gradients).
    `check_writes`: raise where a graph to follow reads a buffer overwritten since; a `StaleReads` instead collects
    every graph followed, for its `checked` to find out, once the gradient is built, whether it reads such a buffer.
    `given(node)`: the gradient given to a node directly (`uopkit.gradient.given_gradient`), if the caller wants a
    realized value that no gradient flows through kept stored (a value computed under no_grad: its stored value is
    what the gradient reads, whatever has been overwritten since). `forms`: filled with each node that was replaced
    -> its new form, for a caller that looks for nodes of the old graph in the new one (a hooked tensor's node).
    """
    memo = _unrealized_forms(root, keep, nodes, rebuilt, check_writes, given, forms, {})
    if isinstance(check_writes, StaleReads):
        check_writes.top = (root, memo)
    return root if memo is None else memo[root]


def _unrealized_forms(
    root: UOp,
    keep: set[UOp],
    nodes: dict[UOp, None] | None,
    rebuilt: Callable[[UOp, UOp, dict[UOp, UOp]], None] | None,
    check_writes: bool | StaleReads,
    given: Callable[[UOp], object] | None,
    forms: dict[UOp, UOp] | None,
    done: dict[UOp, dict[UOp, UOp] | None],
) -> dict[UOp, UOp] | None:
    # `_forms_walk` of root, and of the graph of each realized value it reads, innermost first: a walk that meets a
    # realized value whose graph isn't walked yet hands it here and waits for its forms. A stack of walks, not
    # recursion: a time loop that reads its state back every step (`loss.item()`, a logged norm) realizes a chain of
    # values as long as the loop, each computed from the one before (a thousand steps passed Python's recursion limit)
    walks = [_forms_walk(root, keep, nodes, rebuilt, check_writes, given, forms, done, 0)]
    inner: dict[UOp, UOp] | None = None
    while True:
        try:
            source, stamp = walks[-1].send(inner)
        except StopIteration as finished:
            walks.pop()
            if not walks:
                return finished.value
            inner = finished.value
            continue
        walks.append(_forms_walk(source, keep, None, rebuilt, check_writes, given, forms, done, stamp))
        inner = None


def _forms_walk(
    root: UOp,
    keep: set[UOp],
    nodes: dict[UOp, None] | None,
    rebuilt: Callable[[UOp, UOp, dict[UOp, UOp]], None] | None,
    check_writes: bool | StaleReads,
    given: Callable[[UOp], object] | None,
    forms: dict[UOp, UOp] | None,
    done: dict[UOp, dict[UOp, UOp] | None],
    since: int,
) -> Generator[tuple[UOp, int], dict[UOp, UOp] | None, dict[UOp, UOp] | None]:
    # `unrealized_graph`'s walk: every node of root's graph -> its new form (None where nothing was realized); it
    # yields (source, stamp) for the graph of a realized value it needs walked first and is sent that walk's forms
    # (`_unrealized_forms` runs the walks). `done`:
    # the walks made so far of realized values' graphs, source -> its forms: a graph read by several later realized
    # values (each of a chain of layers whose sort or gather realized, reading two values of the layer before) is
    # walked once, not once per path to it (2**layers walks). `since`: the clock root was remembered at (0: it reads
    # storage as it is now), for the graphs of the values it reads as they were then (`remembered_at`)
    topo = root.toposort(gate=_not_store) if nodes is None else nodes
    if check_writes and len(stale_sources):
        _check_not_stale(root, topo, keep)
    # (the usual case, a backward() right after the forward pass: no node of the graph was realized. Looked up from
    # the smaller side: each lookup in `computed_from` makes a weak reference.) Realized ints and bools stay stored
    # (`_carries_gradient`): no gradient flows through them, and read back from their graph (a batch of token ids
    # padded and stacked from sequences) the gradient's kernels would hold that graph's shapes, new every batch
    if len(computed_from) < len(topo):
        realized = [u for u in computed_from.keys() if u in topo and u not in keep and _carries_gradient(u)]
    else:
        realized = [u for u in topo if u not in keep and u in computed_from and _carries_gradient(u)]
    if not realized or root.op is _DETACH:
        return None
    # no gradient flows into a DETACH: what lies behind one is read as it is stored, not rebuilt (a lazy clone of a
    # weight, `w.detach().clone()`, that a step of `w` moved onto a copy-on-write snapshot of it: the snapshot's
    # source is `w`'s buffer, overwritten since)
    topo = root.toposort(gate=_not_store_nor_detach)
    memo: dict[UOp, UOp] = {}
    # realized node -> (the graph that computed it, the forms of that graph's nodes or None where it is unchanged)
    followed: dict[UOp, tuple[UOp, dict[UOp, UOp] | None]] = {}
    for u in topo:
        if u.op is _STORE or u in keep:
            # (a kept node stays the very node even where what lies under it was realized: it is where a gradient is
            # wanted, and the caller looks for it by identity)
            memo[u] = u
            continue
        source, stamp = remembered_at(u, since) if _carries_gradient(u) else (None, 0)
        if source is not None and given is not None and _constant_for(source, keep, given):
            # computed under no_grad or from detached values: no gradient flows through it, and what a gradient reads
            # of it is its stored value (PPO's old log-probabilities, from weights an optimizer step has overwritten)
            source = None
        if source is not None:
            if check_writes is True:
                _check_not_overwritten(u, source, stamp)
            if source not in done:
                done[source] = yield source, stamp
            inner = done[source]
            followed[u] = (source, inner)
            if isinstance(check_writes, StaleReads):
                check_writes.follow(u, source, inner, stamp)
            memo[u] = source if inner is None else inner[source]
            if forms is not None:
                forms[u] = memo[u]
            continue
        src = u.src
        new_src = tuple([memo.get(s, s) for s in src])
        if new_src == src:
            memo[u] = u
            continue
        before = _old_view_rebuilt(u, memo, followed, rebuilt) if u.op in _MOVEMENT else None
        memo[u] = UOp(u.op, u.dtype, new_src, u.arg) if before is None else before
        if (
            u.op is _SHRINK
            and before is None
            and (given is None or given(u) is None)
            and (past := past_writes(memo[u])) is not None
        ):
            # (a slice of a table written row by row reads the write that reached it, not every write's where)
            memo[u] = past
        if forms is not None:
            forms[u] = memo[u]
        if rebuilt is not None and before is None:
            rebuilt(u, memo[u], memo)
    return memo


def _old_view_rebuilt(
    u: UOp,
    memo: dict[UOp, UOp],
    followed: dict[UOp, tuple[UOp, dict[UOp, UOp] | None]],
    rebuilt: Callable[[UOp, UOp, dict[UOp, UOp]], None] | None,
) -> UOp | None:
    """Realized view `u` rebuilt as the view it was over the old graph (`realized_views`), over that graph's new form,
    each old view told to `rebuilt` (None where `u` is no such view). The node a gradient rule was given to may be one
    of those views (a triangular solve's or Cholesky's own reshape, a cat piece's pad); `u` rebuilt over the new form
    is the very node only while nothing under it was realized too (cholesky() reads its factor back), else a new node
    without the rule, and the gradient took the chain of the solve's blocked steps (NaN: reciprocals of masked zeros).
    """
    before = realized_views.get(u)
    if before is None:
        return None
    stored, depth = u, 0
    while stored not in followed:
        if stored.op not in _MOVEMENT:
            return None
        stored, depth = stored.src[0], depth + 1
    source, inner = followed[stored]
    views = []
    old = before
    for _ in range(depth):
        if old.op not in _MOVEMENT:
            return None
        views.append(old)
        old = old.src[0]
    if old is not source:
        return None
    if inner is None:
        # (nothing under it was realized: the old views are the graph as it is)
        return before
    new = memo[stored]
    for view in reversed(views):
        form = UOp(view.op, view.dtype, (new, *view.src[1:]), view.arg)
        inner[view] = form
        if rebuilt is not None:
            rebuilt(view, form, inner)
        new = form
    return new


def _not_store_nor_detach(u: UOp) -> bool:
    return u.op is not _STORE and u.op is not _DETACH


def _check_not_stale(root: UOp, topo: Iterable[UOp], keep: set[UOp]) -> None:
    # a realized value in the graph whose remembered graph was dropped as stale (`forget_if_stale`): backward() raises
    # what it raised when it still had that graph
    nodes = topo if isinstance(topo, (dict, set)) else set(topo)
    hits = [u for u in stale_sources.keys() if u in nodes and u not in keep and _carries_gradient(u)]
    if not hits:
        return
    # only where a gradient flows to it: one behind a DETACH is read as stored (SAC's temperature loss reads
    # `logp.detach()` after the actor's step overwrote the weights logp was computed from)
    reached = root.toposort(gate=_not_store_nor_detach)
    for u in hits:
        if u in reached:
            raise RuntimeError(stale_sources[u])


def _constant_for(source: UOp, keep: set[UOp], given: Callable[[UOp], object]) -> bool:
    # whether a gradient to `keep` can't flow through the graph `source`: every path to a wanted node, to a realized
    # value or to a node with a given gradient (a custom Function's output: its inputs are detached) is cut by a DETACH
    # (a walk that stops at the first such node: backward follows every realized value back through this, and its
    # graph, a whole forward pass, usually reaches a weight within a few nodes; a full toposort looked at all of it).
    # A wanted node is looked for before the cut: a leaf made as `x.detach().requires_grad_()` is itself a DETACH
    seen: set[UOp] = set()
    stack = [source]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in keep:
            return False
        if n.op is _DETACH:
            continue
        if given(n) is not None or n in computed_from:
            return False
        stack.extend(n.src)
    return True


def _carries_gradient(u: UOp) -> bool:
    # a realized float value, or uint16 bits (how a bfloat16 value is stored)
    return dtypes.is_float(u.dtype) or u.dtype == dtypes.uint16
