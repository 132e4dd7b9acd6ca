"""What a realized value was computed from, and what has been overwritten since.

A realize remembers, for a value it stores that a gradient can flow through, the graph that computed it
(`computed_from`): backward() rebuilds that graph where an earlier realize replaced it by storage (a `.item()` on the
loss, the readers an assign realizes first). A graph remembered before a write into a buffer it reads no longer
computes the value it stood for: one clock orders the writes (`written_at`, per BUFFER) and the memories
(`computed_from.stamp`). A realize stamps what it remembers with the clock when it began (`begin_reads`): the values it
stores read storage as it was then, before any write it makes (the schedule runs a buffer's readers before the kernel
that overwrites it). A gradient that needs such a value as it was reads the storage of a value realized from the same
contents instead (`StaleReads`); where none is left, backward() raises rather than read the new contents.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass
from sys import getrefcount
from typing import Any

from uopkit.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite
from uopkit.uop.weak_map import WeakKeyMap

_STORE, _BUFFER, _BITCAST, _KERNEL, _DETACH = Ops.STORE, Ops.BUFFER, Ops.BITCAST, Ops.KERNEL, Ops.DETACH
_MOVEMENT = GroupOp.Movement
# what a view of storage is made of, a detached one included (`_views_storage`)
_VIEWS_OR_DETACHED = frozenset({*_MOVEMENT, _DETACH, _BITCAST})

# a clock of writes and memories: a realized assign stamps its BUFFER (`written_at`), each graph remembered in
# `computed_from` its node; a remembered graph reading a buffer stamped later no longer computes what was realized
_clock = itertools.count(1)
# BUFFER -> (the clock of the write before the last, the clock of the last write): two, so that a value stored between
# a graph's memory and the first write since is known to hold what that graph computed (`_no_write_between`)
written_at = WeakKeyMap()
_NEVER = (0, 0)
# the clock of the latest realized assign (a remembered graph older than it is checked for overwritten buffers)
_last_write = [0]
# while a realize runs, the clock when it began; 0 outside one
_reading = [0]
# a list per TinyJit capture in progress, of the buffers its realizes overwrite: a replay, which runs their kernels
# without a realize, stamps them (`overwriting`)
recording_writes: list[list[UOp]] = []


def begin_reads() -> int:
    """A realize begins: what it remembers until `end_reads` is stamped with the clock now, before its writes. Returns
    what to give `end_reads` (a realize started inside another one restores the outer one's stamp)."""
    outer = _reading[0]
    _reading[0] = next(_clock)
    return outer


def end_reads(outer: int) -> None:
    _reading[0] = outer


class _History(WeakKeyMap):
    """realized node -> the graph that computed it, with the clock when it was remembered (`stamp`)."""

    __slots__ = ("_stamps",)

    def __init__(self) -> None:
        super().__init__()
        self._stamps = WeakKeyMap()

    def __setitem__(self, key: UOp, value: Any) -> None:
        super().__setitem__(key, value)
        self._stamps[key] = _reading[0] or next(_clock)

    def stamp(self, key: UOp) -> int:
        return self._stamps.get(key, 0)

    def remember_at(self, key: UOp, value: Any, stamp: int) -> None:
        """`value` remembered for `key` as at clock `stamp` (a graph remembered then for what `key` holds)."""
        super().__setitem__(key, value)
        self._stamps[key] = stamp


# what a realized tensor was computed from, so backward() can still follow a graph that an earlier realize (a
# .item() on the loss, a printed intermediate) replaced by storage; weak: it lives as long as the new node does
computed_from = _History()
# a graph remembered for a value in place of another after an in-place write into it -> (the graph remembered before,
# its clock): a value realized before the write, whose graph reads that storage, is followed back through the graph
# as it was then (`remembered_at`). Weak, and it holds nothing more: the later graph holds the earlier one (a write's
# graph is the earlier one with the written positions replaced; an unrecorded write's passes its gradient to it)
earlier_memory = WeakKeyMap()
# realized node -> what backward() says about it, for a value whose remembered graph read a buffer overwritten since:
# the graph is let go (`forget_if_stale`) and the error kept. Held, the graph held the value's inputs, and the state of
# a loop realized every step (`ema = ema * 0.99 + w * 0.01` between optimizer steps, a hidden state carried over) held
# every earlier value through them
stale_sources = WeakKeyMap()
# a computed value a realize stored -> (a weak reference to the view of its storage, the clock when that realize
# began): a gradient that needs the value as it was before a write since reads it there (`StaleReads`). Weak both
# ways: an entry keeps no storage alive, and goes with the graph node
stored_as = WeakKeyMap()
# a value a realize stored -> the views of storage of values its graph holds, stored by the same realize before it
# overwrote what they read: held while the value lives, for the gradient through it (`PendingReads.keep_old_values`)
kept_with = WeakKeyMap()
# BUFFER -> [(a weak reference to a copy of it taken before a write, the clock when that realize began), ...]: the copy
# on write that readers too large to compute first were moved onto; a gradient computes their values from it
copies_taken = WeakKeyMap()


def _under_views(u: UOp, views: Container[Ops] = _MOVEMENT) -> UOp:
    # the node under `u`'s chain of views (ops of `views`), past a bfloat16 BITCAST on top
    if u.op is _BITCAST:
        u = u.src[0]
    while u.op in views:
        u = u.src[0]
    return u


def _storage_base(u: UOp) -> UOp | None:
    # the BUFFER a view of storage shows (through a bfloat16 BITCAST), or None
    base = _under_views(u)
    return base if base.op is _BUFFER else None


def remember_rewritten(node: UOp, graph: UOp, before: UOp, stamp: int) -> None:
    """`graph` computes what the storage `node` holds after an in-place write into it, where `before` (remembered at
    clock `stamp`) computed what it held: remembered in its place, `before` kept for the values realized before the
    write (`remembered_at`)."""
    if before is not graph:
        earlier_memory[graph] = (before, stamp)
        computed_from[node] = graph
    else:
        # (a write that left the graph as it was, one through an empty mask: it still computes the contents as of
        # `stamp`, and a value realized since from them is followed back through it, not through what came before)
        computed_from.remember_at(node, graph, stamp)
    base = _storage_base(node)
    taken = None if base is None else copies_taken.get(base)
    if taken:
        # the copy of the old contents this write moved readers onto (copy on write) holds what `before` computed;
        # the readers read it through the views `node` shows the buffer with (a (2, 2) tensor's RESHAPE of its flat
        # buffer), so the same views of the copy are what is remembered
        copy, at = taken[-1][0](), taken[-1][1]
        if copy is not None and at >= stamp:
            seen = _same_views_over(node, base, copy)
            if seen not in computed_from:
                computed_from.remember_at(seen, before, stamp)


def _same_views_over(node: UOp, base: UOp, other: UOp) -> UOp:
    # `node`'s chain of views of `base` (movement ops, a bfloat16 BITCAST on top) applied to `other` instead
    if node is base:
        return other
    return node.replace(src=(_same_views_over(node.src[0], base, other), *node.src[1:]))


def remembered_at(node: UOp, stamp: int) -> tuple[UOp | None, int]:
    """The graph remembered for realized `node` as a graph remembered at clock `stamp` read it (0: now), with the clock
    it was remembered at: where in-place writes since replaced it, the one before them (None where none is, or where
    `node` is a computed graph over storage written since: `outdated_memory`)."""
    source = computed_from.get(node)
    if source is None:
        return None, 0
    at = computed_from.stamp(node)
    while stamp and at > stamp:
        earlier = earlier_memory.get(source)
        if earlier is None:
            break
        source, at = earlier
    if outdated_memory(node, at, stamp):
        return None, 0
    return source, at


def outdated_memory(node: UOp, at: int, by: int) -> bool:
    """Whether `node`, a computed graph over storage remembered at clock `at` as computed by another graph (a live
    tensor's graph rewritten when a value it reads was realized: `relu(w)` over `w`'s new BUFFER, remembered as `relu`
    of the graph that computed `w`), reads a buffer written after `at` and by clock `by` (0: now): nodes are shared,
    and the same node built again after the write (the next step's `relu(w)`, over the stepped weight) computes from
    the new contents, where the old graph would give its gradient the values `w` held before. (A view of storage is
    forgotten by the write itself, `forget_overwritten`; a reader that read the node before the write, `by` before
    it, still follows it back.)"""
    if _last_write[0] <= at or (by and by <= at) or _storage_base(node) is not None:
        return False
    bufs = _buffers_of(node)
    hi = by or _last_write[0]
    return bufs is not None and any(not _no_write_between(b, at, hi) for b in bufs)


def forget_source(u: UOp) -> None:
    """Drop what `u` was computed from: a write into its storage (setitem) made the remembered graph stale."""
    computed_from.pop(u)


def forget_overwritten(stored: UOp) -> None:
    """Drop what the storage `stored` views (and each view on the way to it) was computed from: an assign has just
    overwritten it, so a graph remembered for it (a weight made as `randn(...) * 0.5`, then loaded or stepped) no
    longer is what it holds, and a gradient followed back through it would see the old values."""
    while True:
        computed_from.pop(stored)
        if stored.op not in _MOVEMENT:
            break
        stored = stored.src[0]


def overwriting(targets: Iterable[UOp]) -> None:
    """The realize running (`begin_reads`) writes into the BUFFERs `targets`, which hold values already: stamped now,
    after what the realize reads. (A buffer a realize fills for the first time is no overwrite: a value stored then
    still holds what it was computed as.)"""
    stamp = _last_write[0] = next(_clock)
    for b in targets:
        written_at[b] = (written_at.get(b, _NEVER)[1], stamp)
    for recorded in recording_writes:
        recorded.extend(targets)


def remember_stored(replaced: Iterable[tuple[weakref.ref[Any], UOp]]) -> None:
    """A realize (still running: `begin_reads`) replaced the graphs of live tensors (`replaced`: a tensor's reference
    and a graph it had): each computed value among those graphs whose tensor now holds a view of storage is remembered
    as stored there (`stored_as`)."""
    stamp = _reading[0]
    if not stamp:
        return
    for ref, old in replaced:
        # (an entry is weakly keyed by the old graph: one that nothing but `replaced` holds goes with it at once, and
        # most do: the graph of `(a + 1).realize()` where no gradient is wanted. One that stays is held by a graph
        # remembered for backward() (`computed_from`) or by a graph that reads it)
        if getrefcount(old) <= _ONLY_HERE:
            continue
        base = _under_views(old)
        # (a view of storage, an assign's graph, or a view of a kernel's STORE on the way to storage: no computed value)
        if base.op is _BUFFER or base.op is _STORE:
            continue
        t = ref()
        if t is None or _storage_base(t.uop) is None:
            continue
        new = t.uop
        known = stored_as.get(old)
        if known is None or known[0]() is not new:
            stored_as[old] = (weakref.ref(new), stamp)


def _references_in_loop() -> int:
    # what `remember_stored`'s loop counts of a graph that only its `replaced` holds: the tuple, the loop's name and
    # getrefcount's argument (measured, not assumed: how an interpreter counts its own references can change)
    for _, probe in [(None, object())]:
        return getrefcount(probe)
    raise AssertionError("unreachable")


_ONLY_HERE = _references_in_loop()


def remember_copies(copy_of: dict[UOp, UOp]) -> None:
    """A realize (still running) took copies of buffers before writing them (`copy_of`: BUFFER -> view of the copy's
    storage): remembered as what the buffer held when it began (`copies_taken`)."""
    stamp = _reading[0]
    for b, view in copy_of.items():
        base = _storage_base(view)
        if base is not None and stamp:
            alive = [entry for entry in copies_taken.get(b, ()) if entry[0]() is not None]
            copies_taken[b] = [*alive, (weakref.ref(base), stamp)]


def hold_copies(u: UOp, copy_of: dict[UOp, UOp]) -> None:
    """A reader of buffers that a realize overwrote, which that realize moved off them on its own (it stored the
    values of the reader's graph that read them, on the way), so it reads none of the copies taken for it (`copy_of`:
    BUFFER -> view of its copy): where the graph remembered for it still reads one of those buffers, the copy is held
    with it while it lives (`kept_with`), for a gradient that computes that graph's values again (`StaleReads`: the
    input of a layer whose output was stored, an adversarial input that nothing else holds)."""
    node = u
    while (source := computed_from.get(node)) is None:
        if node.op not in _MOVEMENT:
            return
        node = node.src[0]
    stamp, at = computed_from.stamp(node), _reading[0]
    read = source.toposort(gate=_not_kernel)
    held = [view for b, view in copy_of.items() if b in read and _no_write_between(b, min(stamp, at), max(stamp, at))]
    if held:
        kept_with[node] = [*kept_with.get(node, ()), *held]


def moved_off_assigns(
    old: UOp,
    new: UOp,
    replaced: dict[UOp, None],
    memo: dict[UOp, bool],
    given: Callable[[UOp], tuple[tuple[UOp, ...], Any] | None] | None = None,
) -> bool:
    """Whether `new`, lazy graph `old` rewritten by a realize that ran assigns other graphs read (`replaced`: the nodes
    it replaced; `memo`: its walks' answers), differs from `old` only where no gradient flows: assigns replaced by their
    storage (no gradient flows through a STORE) and values behind a DETACH. Then nothing is remembered for it: its
    gradient is `new`'s (an eval pass that read a BatchNorm's running-stat update still to run, in an adversarial
    input, then the next forward's realize ran the update). Remembered, `old` held the assign's STORE, which reads its
    target as the write left it, and was stamped before the write: stale at once, and backward() raised where PyTorch
    reads the updated tensor. `given(node)`: the inputs (and rule) of a gradient given to a node directly
    (`uopkit.gradient.given_gradient`), whose gradient flows to those inputs though its graph reads them behind a
    DETACH (an autograd.Function's output: a surrogate spike's forward ran on detached inputs)."""
    if old.op is _DETACH or _under_views(new).op in (_BUFFER, _STORE):
        # (a detached leaf, found by its node; the tensor realized itself: a value to follow back)
        return False
    stack = [old]
    while stack:
        u = stack.pop()
        if u in memo:
            continue
        if u.op is _BUFFER or u.op is _STORE or u.op is _DETACH:
            memo[u] = False
        elif u in replaced:
            memo[u] = True
        else:
            src = u.src
            rule = given(u) if given is not None else None
            if rule is not None:
                src = (*src, *rule[0])
            if all(s in memo for s in src):
                memo[u] = any(memo[s] for s in src)
            else:
                stack.append(u)
                stack.extend(s for s in src if s not in memo)
    return not memo[old]


# graph -> the BUFFER nodes in it (a dict used as an ordered set), kept for the graphs `buffers_in` was asked about
# while they live: the graph remembered for a buffer written a row at a time (`alpha[t] = f(alpha[t - 1])`, a dynamic
# program's table) holds the one remembered at the write before, so a walk of the whole graph at every write and
# realize was quadratic in the number of writes (400 rows of an HMM's forward table: 13 s)
_buffers_under = WeakKeyMap()


def buffers_in(graph: UOp) -> dict[UOp, None]:
    """The BUFFER nodes in `graph` (don't change the dict returned). The walk takes the answer kept for a subgraph
    asked about before instead of walking it again."""
    if graph.op is _BUFFER:
        # (not kept: the answer would hold its key alive)
        return {graph: None}
    known = _buffers_under.get(graph)
    if known is not None:
        return known
    found: dict[UOp, None] = {}
    seen: set[UOp] = set()
    stack = [graph]
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        sub = _buffers_under.get(u)
        if sub is not None:
            found.update(sub)
        elif u.op is _BUFFER:
            found[u] = None
        else:
            stack.extend(u.src)
    _buffers_under[graph] = found
    return found


def overwritten_since(source: UOp, stamp: int) -> list[UOp]:
    """The BUFFERs the graph `source` reads that were overwritten after clock `stamp`."""
    if _last_write[0] <= stamp:
        return []
    return [b for b in buffers_in(source) if written_at.get(b, _NEVER)[1] > stamp]


def _dropped_message(node: UOp, b: UOp) -> str:
    return (
        f"backward: a value of shape {node.shape} was computed from a buffer ({b.dtype}, {b.arg[2]} elements) that was "
        "overwritten in place after the value was realized (an assign, an optimizer step, a setitem or an in-place op "
        "since), and a later realize let go of the graph that computed it, so its gradient can't be followed back. "
        "Run backward() or autograd.grad before the in-place update, or compute the value again after it"
    )


def _check_not_overwritten(node: UOp, source: UOp, stamp: int) -> None:
    # a gradient followed back through realized `node` rebuilds it from `source`, remembered at clock `stamp`: raise
    # where `source` reads a buffer overwritten since (a caller without a `StaleReads`, which would find out whether
    # the gradient reads it)
    stale = overwritten_since(source, stamp)
    if stale:
        raise RuntimeError(_needs_old_message(node, stale[0]))


def forget_if_stale(node: UOp) -> bool:
    """Whether realized `node`'s remembered graph reads a buffer overwritten since it was remembered; if so the graph
    is dropped, and a backward() through `node` raises (`stale_sources`)."""
    source = computed_from.get(node)
    if source is None:
        return node in stale_sources
    stamp = computed_from.stamp(node)
    # (a buffer that a copy taken before the write still holds as the graph read it is no loss: the realize that
    # wrote it moved the graph's readers onto that copy, and a gradient reads it there, `StaleReads`; nor is one read
    # only through a history that reaches back to then, `remembered_at`: a write that records one (`c[-1] += 1` into
    # `c = w.clone()` after `d = c[1:] - c[:-1]` read it) keeps the graph it replaced, which backward() follows)
    stale = _read_other_than_through_history(
        source, [b for b in overwritten_since(source, stamp) if _copy_holding(b, (stamp,)) is None], stamp
    )
    if stale:
        # (nor one read only by values of the graph that a realize stored before the write, `stored_as`: a gradient
        # reads them there. An adversarial input computed from a BatchNorm's running stats, realized with the readers
        # of the next running-stats write and held by the loss's graph, while the copy of the stats is let go)
        stale = _read_past_stored(node, source, stamp, stale)
    if not stale:
        return False
    computed_from.pop(node)
    stale_sources[node] = _dropped_message(node, stale[0])
    return True


def _read_other_than_through_history(source: UOp, bufs: list[UOp], stamp: int) -> list[UOp]:
    # the overwritten BUFFERs of `bufs` that the graph `source` (remembered at clock `stamp`) reads other than through
    # realized values (views of them) whose remembered graphs, as of then, were remembered by then: a chain of recorded
    # writes since leads back to what they held, and backward() rebuilds them from it (`remembered_at`). One walk for
    # all of them: below a view of one buffer is that buffer alone (a walk per buffer was ~0.3 s of an LSTM's step
    # whose remembered loss graph read 11 overwritten weights)
    if not bufs:
        return []
    wanted = set(bufs)
    covered: set[UOp] = set()

    def gate(u: UOp) -> bool:
        if u in covered:
            return False
        if u in computed_from and _under_views(u) in wanted:
            before, at = remembered_at(u, stamp)
            if before is not None and at <= stamp:
                covered.add(u)
                return False
        return True

    reached = source.toposort(gate=gate)
    return [b for b in bufs if b in reached]


def _read_past_stored(node: UOp, source: UOp, stamp: int, bufs: list[UOp]) -> list[UOp]:
    # the buffers of `bufs` that graph `source` (remembered at clock `stamp` for realized `node`) reads other than
    # through a value below its root that storage still holds as the graph computed it (`_held_in_storage`: a gradient
    # reads it there, `StaleReads._stand_ins`)
    bad = set(bufs)
    held = _held_in_storage(node, source, stamp)

    def unstored(u: UOp) -> bool:
        if u.op is _KERNEL:
            return False
        if u is source:
            # (the root's own stored value is no stand-in for the values its gradient reads)
            return True
        if u in held:
            return False
        entry = stored_as.get(u)
        if entry is None:
            return True
        stored = entry[0]()
        return stored is None or not _same_kind(stored, u) or not _holds_value(u, stamp, stored, entry[1], bad)

    reached = source.toposort(gate=unstored)
    return [b for b in bufs if b in reached]


def _held_in_storage(node: UOp, source: UOp, stamp: int) -> dict[UOp, UOp]:
    # the computed values below the root of graph `source` (remembered at clock `stamp` for `node`) that `node`'s own
    # graph holds as storage in their place -> those views of storage, where nothing has written that storage since:
    # `node` is `source` with values a realize stored replaced by their storage (a loss's layer output, stored on the
    # way by the realize that moved the loss onto copies of what a write overwrote), and the copies may be gone
    found: dict[UOp, UOp] = {}
    seen: set[UOp] = set()
    stack = [(node, source)]
    while stack:
        n, s = stack.pop()
        if n is s or s in seen:
            continue
        seen.add(s)
        base = _storage_base(n) if s is not source else None
        if base is not None:
            # (not a buffer moved onto a copy, nor an assign's result: what those hold is no computed value of `source`)
            computed = _storage_base(s) is None and _under_views(s, _VIEWS_OR_DETACHED).op is not _STORE
            if computed and _same_kind(n, s) and written_at.get(base, _NEVER)[1] <= stamp:
                found[s] = n
            continue
        if n.op is not s.op or n.arg != s.arg or len(n.src) != len(s.src):
            continue
        stack.extend(zip(n.src, s.src, strict=True))
    return found


def _needs_old_message(node: UOp, b: UOp) -> str:
    return (
        f"backward: the gradient needs values computed from a buffer ({b.dtype}, {b.arg[2]} elements) as it was before "
        f"it was overwritten in place (an assign, an optimizer step, a setitem or an in-place op since a value of "
        f"shape {node.shape} was computed from it), and no tensor stored before the write holds them. PyTorch keeps "
        "what its backward needs (and raises only where one of those tensors was overwritten); here those values are "
        "computed again from the graph, which would read the new contents. Keep the values it needs alive as tensors "
        "(the rows looked up in a table that is then updated in place), run backward() or autograd.grad before the "
        "in-place update, or compute the value again after it"
    )


@dataclass
class _Followed:
    # a realized value backward() followed back to the graph that computed it
    node: UOp
    source: UOp
    # the rebuilt form of each node of `source` (None: it is rebuilt as it is)
    forms: dict[UOp, UOp] | None
    stamp: int
    # the buffers `source` reads that were overwritten since `stamp`
    overwritten: list[UOp]

    def form(self, u: UOp) -> UOp:
        return u if self.forms is None else self.forms.get(u, u)


def _not_kernel(u: UOp) -> bool:
    return u.op is not _KERNEL


class StaleReads:
    """What `unrealized_graph` followed back for one gradient, and whether the gradient reads what was overwritten
    since: a remembered graph reads a buffer as it was when the graph was remembered, and rebuilt for backward() it
    reads it as it is. `checked` makes the gradient read the old values where a tensor stored before the write holds
    them (PyTorch's saved tensors), and raises where one it needs is left to the new contents."""

    def __init__(self) -> None:
        self.followed: list[_Followed] = []
        # the root of the graph the gradient is taken of, and its nodes' rebuilt forms (None: unchanged)
        self.top: tuple[UOp, dict[UOp, UOp] | None] | None = None
        # what the gradient reads instead, found at the first `checked` that needs it (hooks ask before the end)
        self._found: _StandIns | None = None

    def follow(self, node: UOp, source: UOp, forms: dict[UOp, UOp] | None, stamp: int) -> None:
        self.followed.append(_Followed(node, source, forms, stamp, overwritten_since(source, stamp)))

    def checked(self, grads: dict[UOp, UOp]) -> dict[UOp, UOp]:
        """`grads` (target -> gradient) reading, where they read a value of a stale remembered graph, that value as
        the graph computed it; raises where a gradient still reads a buffer such a graph read before it was
        overwritten (the overwritten tensor itself, a view of it, is what PyTorch raises for when it saved it)."""
        stale = [f for f in self.followed if f.overwritten]
        if not stale:
            return grads
        bad = {b for f in stale for b in f.overwritten}
        if _first_read(grads.values(), bad) is None:
            # (the gradient needs none of the old contents: `(z * w).sum()`'s gradient for w after w was stepped)
            return grads
        if self._found is None:
            self._found = self._stand_ins(stale, bad)
        ctx = self._found
        if ctx.stored or ctx.recomputed:
            cache: dict[UOp, UOp] = {}
            grads = {k: graph_rewrite(g, pm_stand_in, ctx, "stand-ins", True, cache=cache) for k, g in grads.items()}
        read = _read_stale(grads.values(), bad, ctx.current)
        if read is not None:
            node = next(f.node for f in stale if read in f.overwritten)
            raise RuntimeError(_needs_old_message(node, read))
        return grads

    def guard(self, hooks: dict[UOp, Callable[[UOp], UOp]]) -> dict[UOp, Callable[[UOp], UOp]]:
        """`hooks` (node -> a function of its gradient, `compute_gradient`'s), each given its gradient as `checked`
        leaves it: a hook reads the gradient (logs it, clips it), so it must not see one computed from the new
        contents either."""
        return {node: functools.partial(_checked_into, self, run) for node, run in hooks.items()}

    def _fresh(self) -> set[UOp]:
        # the (rebuilt) nodes that read storage as it is now: the graph's own, and those of remembered graphs nothing
        # has overwritten since. Hash-consed, such a node can be the very node a stale graph holds (the same lookup
        # built again after the write), and it must not take the old value
        # (a value followed back is no node of the graph that reads it: its form is its own graph's, stale or not)
        followed = {f.node for f in self.followed}
        fresh: set[UOp] = set()
        if self.top is not None:
            root, forms = self.top
            fresh.update(_forms_of(root, forms, followed))
        for f in self.followed:
            if not f.overwritten:
                fresh.update(_forms_of(f.source, f.forms, followed))
        return fresh

    def _current(self, fresh: set[UOp], stale: list[_Followed]) -> set[UOp]:
        # the nodes whose reads of storage are reads of what it holds now, as they were built to read: the `fresh`
        # ones, and the nodes of the graphs they were rebuilt from (a gradient rule holds the nodes it was given: the
        # input of `v.clamp_()` over v's storage, rebuilt over the graph that computed v), but for the nodes of a stale
        # graph, as built or rebuilt (hash-consed, the same node: what it read may have been overwritten since)
        followed = {f.node for f in self.followed}
        current = set(fresh)
        if self.top is not None:
            current.update(_forms_of(self.top[0], None, followed))
        for f in self.followed:
            if not f.overwritten:
                current.update(_forms_of(f.source, None, followed))
        for f in stale:
            current.difference_update(_forms_of(f.source, f.forms, followed))
            current.difference_update(_forms_of(f.source, None, followed))
        return current

    def _stand_ins(self, stale: list[_Followed], bad: set[UOp]) -> _StandIns:
        # for the rebuilt nodes of the stale graphs: storage holding the value as that graph computed it (the realized
        # value itself, for the whole graph; values realized from the same contents, `stored_as`, for its nodes), and
        # where copies of what was overwritten were taken then, the nodes computed again from them: from the one copy
        # of a buffer that holds what every graph reading it read, else from each graph's own (two adversarial inputs,
        # each read a BatchNorm's running stats between two of its updates). A node two graphs read at different
        # contents (hash-consed: the same eval pass of the clean input in both) is computed again only inside a larger
        # node of one of them
        fresh = self._fresh()
        common = _copies_for(stale)
        ctx = _StandIns({}, {}, self._current(fresh, stale))
        nested: dict[UOp, list[_Followed]] = {}
        for f in self.followed:
            nested.setdefault(f.node, []).append(f)
        plain: set[UOp] = set()
        # rebuilt node -> BUFFER -> what it reads in its place, for the buffers no common copy holds: its graph's own
        # copy, or the buffer itself (no copy holds what the graph read, or nothing overwrote it since); the same for
        # every graph holding the node, else None
        wants: dict[UOp, dict[UOp, UOp] | None] = {}
        for f in stale:
            whole = f.form(f.source)
            if whole not in fresh and _same_kind(f.node, whole) and _unchanged_since(f.node, f.stamp):
                ctx.stored[whole] = f.node
            reads_copied = _reading_any(f.source, set(common))
            own = {b: c for b in f.overwritten if b not in common and (c := _copy_holding(b, (f.stamp,))) is not None}
            reads_own = _buffers_read(f.source, bad - common.keys()) if any(b not in common for b in bad) else {}
            mixed = _read_elsewhen(f, own, nested)
            for u, view in _held_in_storage(f.node, f.source, f.stamp).items():
                form = f.form(u)
                if form not in fresh and form not in ctx.stored:
                    ctx.stored[form] = view
            for u in f.source.toposort(gate=_not_kernel):
                form = f.form(u)
                if form in fresh or form in ctx.stored:
                    continue
                if u in reads_copied and not _views_storage(u):
                    plain.add(form)
                read = reads_own.get(u)
                if read and not _views_storage(u):
                    want = None if u in mixed else {b: own.get(b, b) for b in read}
                    known = wants.get(form, want)
                    wants[form] = want if known == want else None
                entry = stored_as.get(u)
                if entry is None:
                    continue
                stored, at = entry[0](), entry[1]
                if stored is not None and _same_kind(stored, u) and _holds_value(u, f.stamp, stored, at, bad):
                    ctx.stored[form] = stored
        for form in plain:
            ctx.recomputed[form] = common
        for form, want in wants.items():
            copied = {b: c for b, c in want.items() if c is not b} if want else None
            if copied:
                ctx.recomputed[form] = {**ctx.recomputed.get(form, {}), **copied}
        return ctx


def _checked_into(stale: StaleReads, run: Callable[[UOp], UOp], g: UOp) -> UOp:
    return run(stale.checked({g: g})[g])


@dataclass
class _StandIns:
    # what `pm_stand_in` replaces in a gradient: a node by storage holding its value as computed before a write, a
    # node computed from buffers overwritten since by the same node over copies of them taken before (node -> BUFFER ->
    # copy)
    stored: dict[UOp, UOp]
    recomputed: dict[UOp, dict[UOp, UOp]]
    # the nodes that read storage as it is now and are no node of a stale graph: what they read of a buffer overwritten
    # since a stale graph read it is the new contents, which is what they computed (`_read_stale`)
    current: set[UOp]


def _do_stand_in(ctx: _StandIns, x: UOp) -> UOp | None:
    stored = ctx.stored.get(x)
    if stored is not None:
        return stored
    copies = ctx.recomputed.get(x)
    if copies is not None:
        # (the topmost such node: rewritten before its sources, whole)
        new = x.substitute(copies, name="read copies")
        return None if new is x else new
    return None


pm_stand_in = PatternMatcher([(UPat(name="x"), _do_stand_in)])


def _copies_for(stale: list[_Followed]) -> dict[UOp, UOp]:
    # overwritten BUFFER -> a live copy of it that holds what every stale graph reading it read
    out = {}
    for b in {b for f in stale for b in f.overwritten}:
        copy = _copy_holding(b, [f.stamp for f in stale if b in f.overwritten])
        if copy is not None:
            out[b] = copy
    return out


def _copy_holding(b: UOp, stamps: Iterable[int]) -> UOp | None:
    # a live copy of BUFFER `b` (`copies_taken`), not written since it was taken, that holds what `b` held at each
    # clock of `stamps` (no write into `b` between the two), or None
    for ref, at in copies_taken.get(b, ()):
        copy = ref()
        if copy is None or written_at.get(copy, _NEVER)[1] > at:
            continue
        if all(_no_write_between(b, min(s, at), max(s, at)) for s in stamps):
            return copy
    return None


def _reading_any(root: UOp, targets: set[UOp]) -> set[UOp]:
    # the nodes of `root`'s graph that read one of `targets` and hold no STORE (the value of one that does is what a
    # write made of them)
    reads: set[UOp] = set()
    if not targets:
        return reads
    written: set[UOp] = set()
    for u in root.toposort(gate=_not_kernel):
        if u.op is _STORE or u.op is _KERNEL or any(s in written for s in u.src):
            written.add(u)
        elif u in targets or any(s in reads for s in u.src):
            reads.add(u)
    return reads


def _buffers_read(root: UOp, targets: set[UOp]) -> dict[UOp, frozenset[UOp]]:
    # the nodes of `root`'s graph that read some of `targets` and hold no STORE (the value of one that does is what a
    # write made of them) -> those they read
    reads: dict[UOp, frozenset[UOp]] = {}
    written: set[UOp] = set()
    for u in root.toposort(gate=_not_kernel):
        if u.op is _STORE or u.op is _KERNEL or any(s in written for s in u.src):
            written.add(u)
        elif u in targets:
            reads[u] = frozenset((u,))
        else:
            found = [reads[s] for s in u.src if s in reads]
            if found:
                reads[u] = found[0].union(*found[1:])
    return reads


def _read_elsewhen(f: _Followed, copies: dict[UOp, UOp], nested: dict[UOp, list[_Followed]]) -> set[UOp]:
    # the nodes of `f.source` whose rebuilt forms hold a value followed back (`nested`: realized node -> how it was
    # followed) to a graph that read a buffer of `copies` at other contents than `f` did, directly or through the
    # values it holds in turn
    differs: dict[tuple[UOp, int], bool] = {}

    def elsewhen(g: _Followed) -> bool:
        key = (g.source, g.stamp)
        if key not in differs:
            differs[key] = False
            nodes = g.source.toposort(gate=_not_kernel)
            differs[key] = any(
                b in nodes and not _no_write_between(b, min(f.stamp, g.stamp), max(f.stamp, g.stamp)) for b in copies
            ) or any(elsewhen(h) for n in nodes for h in nested.get(n, ()))
        return differs[key]

    out: set[UOp] = set()
    if not copies:
        return out
    for u in f.source.toposort(gate=_not_kernel):
        if any(s in out for s in u.src) or any(elsewhen(g) for g in nested.get(u, ())):
            out.add(u)
    return out


def _views_storage(u: UOp) -> bool:
    # a view of a BUFFER (through movement ops, a DETACH, a bfloat16 BITCAST): the tensor itself, which PyTorch saves
    # as it is, not a value computed from it
    return _under_views(u, _VIEWS_OR_DETACHED).op is _BUFFER


def _forms_of(root: UOp, forms: dict[UOp, UOp] | None, followed: set[UOp]) -> Iterator[UOp]:
    # the rebuilt forms of the nodes of `root`'s graph, but those of the values followed back to their own graphs
    for u in root.toposort(gate=_not_kernel):
        if u not in followed:
            yield u if forms is None else forms.get(u, u)


def _same_kind(a: UOp, b: UOp) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype


def _buffers_of(u: UOp) -> list[UOp] | None:
    # the BUFFERs graph `u` reads, or None where it holds a STORE (its value is what a write made of them)
    found = []
    for n in u.toposort(gate=_not_kernel):
        if n.op is _STORE or n.op is _KERNEL:
            return None
        if n.op is _BUFFER:
            found.append(n)
    return found


def _unchanged_since(u: UOp, stamp: int) -> bool:
    # whether graph `u` (a realized value, or a reader rewired to a copy) reads nothing overwritten since `stamp`
    bufs = _buffers_of(u)
    return bufs is not None and all(written_at.get(b, _NEVER)[1] <= stamp for b in bufs)


def _no_write_between(b: UOp, lo: int, hi: int) -> bool:
    # whether no write into `b` is stamped in (lo, hi]: only the last two are known, and an earlier one is taken to be
    # anywhere before the one before the last
    # (an empty span holds no write: a copy taken by the realize that remembered a graph, before its write, holds
    # what that graph read however often `b` was written since)
    if lo >= hi:
        return True
    before_last, last = written_at.get(b, _NEVER)
    return last <= lo or (last > hi and before_last <= lo)


def _holds_value(u: UOp, stamp: int, stored: UOp, at: int, bad: set[UOp]) -> bool:
    # whether `stored` (realized from `u` by a realize that began at `at`) holds what `u` computed in a graph
    # remembered at `stamp`: every buffer `u` reads is the same at both clocks, and `stored` hasn't been written since
    bufs = _buffers_of(u)
    if bufs is None or not any(b in bad for b in bufs):
        return False
    base = _storage_base(stored)
    if base is None or written_at.get(base, _NEVER)[1] > at:
        return False
    lo, hi = min(stamp, at), max(stamp, at)
    return all(_no_write_between(b, lo, hi) for b in bufs)


def _read_stale(roots: Iterable[UOp], bad: set[UOp], current: set[UOp]) -> UOp | None:
    # the first buffer of `bad` that the graphs of `roots` read (through views of it) from a node other than those of
    # `current`, or None. A buffer both a stale graph and the graph of the loss read (`v` bounced in place after `p =
    # p + 0.1 * v` was stored, then `v.clamp_()`, whose gradient reads v as it is now) is read as it is by the latter
    sink = UOp(Ops.SINK, src=tuple(roots))
    for n in sink.toposort(gate=_not_kernel):
        if n is not sink and (n in current or _views_storage(n)):
            continue
        for s in n.src:
            base = _under_views(s, _VIEWS_OR_DETACHED)
            if base.op is _BUFFER and base in bad:
                return base
    return None


def _first_read(roots: Iterable[UOp], bad: set[UOp]) -> UOp | None:
    # the first buffer of `bad` that the graphs of `roots` read, or None
    sink = UOp(Ops.SINK, src=tuple(roots))
    for n in sink.toposort(gate=_not_kernel):
        if n.op is _BUFFER and n in bad:
            return n
    return None
