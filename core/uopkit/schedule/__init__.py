"""The scheduler: kernelize tensor graphs and order their kernels by the STOREs they read and write."""

from __future__ import annotations

import itertools
import operator
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from uopkit.dtype import dtypes
from uopkit.helpers import SPEC
from uopkit.schedule.grouper import (
    ScheduleError,
    is_kernel_store,
    kernelize_graph,
    pending_writes,
    replace_reads,
    stored_reads,
)
from uopkit.schedule.history import (
    StaleReads,
    _last_write,
    _reading,
    _storage_base,
    begin_reads,
    computed_from,
    end_reads,
    forget_if_stale,
    forget_overwritten,
    forget_source,
    hold_copies,
    kept_with,
    moved_off_assigns,
    outdated_memory,
    overwriting,
    remember_copies,
    remember_stored,
    stale_sources,
)
from uopkit.schedule.launch_consts import launch_values
from uopkit.schedule.live_index import IndexedTensors, _pending_store
from uopkit.schedule.packing import pack_panels
from uopkit.schedule.read_masks import _not_store
from uopkit.schedule.splitting import split_reduces
from uopkit.schedule.unrealized import _carries_gradient, realized_views, unrealized_graph
from uopkit.schedule.windows import window_inputs
from uopkit.uop.ops import (
    GroupOp,
    Ops,
    PatternMatcher,
    UOp,
    UPat,
    _pm_substitute,
    graph_rewrite,
    uop_seq,
)
from uopkit.uop.weak_map import WeakKeyMap

if TYPE_CHECKING:
    # (bound at run time by uopkit.tensor.tensor once the class exists: the copies `protect_pending_reads` makes)
    from uopkit.tensor import Tensor

# what each kernel STORE became once it ran (its storage), so a graph that still holds it never runs it twice.
# Only kernel STOREs are remembered: a computed value (say ADD(BUFFER, 1)) is not, because the BUFFER it reads can be
# overwritten by a later assign and the same hash-consed node must then be computed again.
becomes_map = WeakKeyMap()


class LiveTensors(IndexedTensors):
    """The live tensors, weakly held, in the order their graphs last changed.

    Realizing a graph updates the other live tensors that hold its nodes, and an assign protects the ones that read
    what it overwrites; a model's weights and optimizer state (or a list of results a program keeps) are many live
    tensors that are neither, so neither walk may cost a step per live tensor:

    - each tensor is stamped with a number from the UOp clock (`uop_seq`) when it is added and whenever its graph is
      replaced (`set_uop`, which also moves it to the end): its node existed then, so it is older than the stamp, and
      a tensor stamped before the oldest node a realize replaced can't hold one (`changed_since`);
    - an assign's walk (`computed`) looks for the tensors whose graph is a computed value rather than a view of
      storage among the ones stamped since the last walk, and keeps what it found: a realized tensor is looked at
      once, and again only once its graph changes.

    So every change of a tensor's graph goes through `set_uop` (under SPEC, `check` finds one that didn't). Dicts whose
    keys are weak references that remove themselves: adding and dropping a tensor are C calls, where a
    `weakref.WeakSet` runs Python code for both (and every Tensor op makes a tensor)."""

    __slots__ = (
        "_refs",
        "_remove",
        "_computed",
        "_walked",
        "_journal",
        "_open",
        "_outer_reads",
    )

    def __init__(self) -> None:
        # reference -> stamp, oldest stamp first
        self._refs: dict[weakref.ref[Tensor], int] = {}
        # the callback gets the dead reference, the key to drop (its hash was taken while the tensor lived)
        self._remove = self._refs.pop
        # what the last `computed` walk found (reference -> stamp), and the stamp it drew: tensors stamped later are
        # looked at by the next walk; the ones it found stay computed until their stamp changes
        self._computed: dict[weakref.ref[Tensor], int] = {}
        self._walked = -1
        # while a transaction is open (`begin`): each graph replaced, as (reference, the graph before), oldest first,
        # and how many transactions are open (nested: a realize inside an in-place op)
        self._journal: list[tuple[weakref.ref[Tensor], UOp]] | None = None
        self._open = 0
        # what `begin_reads` returned for each open transaction
        self._outer_reads: list[int] = []
        self._init_index()

    def add(self, t: Tensor) -> weakref.ref[Tensor]:
        """Register `t`; returns its reference, which `set_uop` expects as `t._live_ref`."""
        ref = weakref.ref(t, self._remove)
        self._refs[ref] = next(uop_seq)
        return ref

    def set_uop(self, t: Tensor, uop: UOp) -> None:
        """Give `t` the graph `uop` (every change of a live tensor's graph comes here)."""
        journal = self._journal
        if journal is not None:
            journal.append((t._live_ref, t.uop))
        t.uop = uop
        ref = t._live_ref
        refs = self._refs
        if refs.pop(ref, -1) >= 0:
            refs[ref] = next(uop_seq)

    def begin(self) -> int:
        """Open a transaction: the graphs replaced from now on can be put back (`end(mark, undo=True)`); returns the
        mark to give `end`. A realize that raises leaves every tensor's graph as it found it this way: left rewired
        onto its kernels, a tensor would run them (and the writes the realize failed to make) at its next realize.
        What the realize remembers of the graphs it computes is stamped as read before its writes (`begin_reads`)."""
        if self._journal is None:
            self._journal = []
        self._open += 1
        self._outer_reads.append(begin_reads())
        return len(self._journal)

    def end(self, mark: int, undo: bool = False) -> None:
        """Close the transaction `begin` returned `mark` for; `undo`: first give every tensor whose graph was replaced
        since then the graph it had at `begin` (newest change first, so the oldest graph wins). A tensor put back is
        stamped anew, as by `set_uop`: the walks that skip tensors by stamp look at it again. Without `undo`, each
        computed value a tensor now holds the storage of is remembered there (`remember_stored`)."""
        journal = self._journal
        assert journal is not None and self._open > 0, "LiveTensors.end without begin"
        if not undo:
            remember_stored(journal[mark:])
        end_reads(self._outer_reads.pop())
        if undo:
            refs = self._refs
            for ref, uop in reversed(journal[mark:]):
                t = ref()
                if t is None:
                    continue
                t.uop = uop
                if refs.pop(ref, -1) >= 0:
                    refs[ref] = next(uop_seq)
            del journal[mark:]
        self._open -= 1
        if not self._open:
            # (the outermost transaction: nothing can be undone any more, the old graphs are let go)
            self._journal = None

    def __iter__(self) -> Iterator[Tensor]:
        for ref in list(self._refs):
            t = ref()
            if t is not None:
                yield t

    def __len__(self) -> int:
        return len(self._refs)

    def snapshot(self) -> list[Tensor]:
        """The live tensors as a list (what `list(self)` gives, without a generator step per tensor)."""
        return [t for t in map(operator.call, list(self._refs)) if t is not None]

    def changed_since(self, seq: int) -> list[Tensor]:
        """The live tensors stamped after node number `seq` was built: every one whose graph may hold that node or a
        newer one (oldest stamp first)."""
        newer = self._stamped_after(seq)
        newer.reverse()
        return [t for t in map(operator.call, newer) if t is not None]

    def computed(self) -> list[Tensor]:
        """The live tensors whose graph is not a view of storage (`_is_view`): all that can read storage's current
        contents (oldest stamp first). A walk looks at the tensors stamped since the last one, and at the ones the
        last one found whose stamp is the same."""
        refs = self._refs
        # (the next walk starts from a number drawn before this one: a tensor another thread stamps while this one
        # walks is newer than it, and found then)
        walked = next(uop_seq)
        found: dict[weakref.ref[Tensor], int] = {}
        out = []
        for ref, stamp in self._computed.items():
            t = ref()
            if t is not None and refs.get(ref) == stamp:
                found[ref] = stamp
                out.append(t)
        newer = self._stamped_after(self._walked)
        shows = view_shows_writes
        for i in range(len(newer) - 1, -1, -1):
            ref = newer[i]
            t = ref()
            if t is not None and (not _is_view(t.uop) or (shows is not None and not shows(t))):
                found[ref] = refs.get(ref, -1)
                out.append(t)
        self._computed = found
        self._walked = walked
        return out

    def _computed_one(self, t: Tensor) -> bool:
        """Whether `t`, stamped since the last look, is a computed value (what `computed` keeps)."""
        shows = view_shows_writes
        return not _is_view(t.uop) or (shows is not None and not shows(t))

    def _stamped_after(self, seq: int) -> list[weakref.ref[Tensor]]:
        """The references stamped after `seq`, newest first: the dict walked back from its end, and only that far."""
        refs = self._refs
        try:
            return _walk_back(refs, seq)
        except RuntimeError:
            # the dict changed under the walk (another thread made a tensor, or a garbage collection dropped one):
            # walk a copy of it (dict() is one C call)
            return _walk_back(dict(refs), seq)

    def check(self) -> None:
        """Under SPEC: the stamps and what `computed` keeps are what they claim (a tensor's graph changed elsewhere
        than in `set_uop` breaks them, and a realize or an assign could then miss the tensor). Another thread inside
        `set_uop`, between its two stores (the graph, then the stamp), looks like such a breach for a moment: while
        other threads run, a suspect counts only once it outlasts a few pauses with its stamp and graph unchanged."""
        found = self._breaches(list(self._refs.items()))
        for pause in (0.001, 0.002, 0.005, 0.01, 0.02):
            if not found or (len(_running_threads) if _running_threads is not None else threading.active_count()) <= 1:
                break
            time.sleep(pause)
            again = self._breaches([(ref, stamp) for ref, (stamp, _, _) in found.items()])
            found = {ref: f for ref, f in again.items() if f[1] is found[ref][1]}
        if found:
            raise AssertionError(next(iter(found.values()))[2])

    def _breaches(self, stamps: list[tuple[weakref.ref[Tensor], int]]) -> dict[weakref.ref[Tensor], tuple]:
        """Of these (reference, stamp) pairs, the ones whose stamp is still theirs and breached: reference -> (the
        stamp, the graph, what is wrong)."""
        found = {}
        for ref, stamp in stamps:
            t = ref()
            if t is None or self._refs.get(ref) != stamp:
                continue
            why = self._breach(t, ref, stamp)
            if why is not None:
                found[ref] = (stamp, t.uop, why)
        return found

    def _breach(self, t: Tensor, ref: weakref.ref[Tensor], stamp: int) -> str | None:
        if t.uop.seq >= stamp:
            return f"a live tensor's graph ({t.uop.op}) was replaced without LiveTensors.set_uop: realizes may skip it"
        if stamp <= self._walked and self._computed.get(ref) != stamp and not _is_view(t.uop):
            return f"a live tensor's graph ({t.uop.op}) left storage without LiveTensors.set_uop: assigns may miss it"
        return None


_running_threads: dict | None = getattr(threading, "_active", None)


def _walk_back(stamps: dict[weakref.ref[Tensor], int], seq: int) -> list[weakref.ref[Tensor]]:
    # (over the keys, making nothing in the loop but list entries: no object is built, so no garbage collection starts
    # inside it, whose weak reference callbacks would change the dict; a tuple per item would)
    # A stamp is taken, then stored: a thread switched out in between stores an older stamp after newer ones. Each
    # thread has at most one such stamp pending, so past the first old stamp the walk looks at as many more as there
    # are other threads before it stops (one thread: it stops there)
    out = []
    # (the running threads, without threading.active_count()'s lock: a thread still starting has run no code of ours)
    late = len(_running_threads) - 1 if _running_threads is not None else threading.active_count() - 1
    for ref in reversed(stamps):
        stamp = stamps.get(ref)
        if stamp is None:
            continue
        if stamp <= seq:
            if late <= 0:
                break
            late -= 1
            continue
        out.append(ref)
    return out


# every live tensor (each Tensor adds itself), so that realizing one updates the graphs the others hold; here, not in
# uopkit.tensor, so the scheduler needs nothing from the front end
live_tensors = LiveTensors()
_copy_ids = itertools.count()


def do_replace_known(ctx: WeakKeyMap | dict[UOp, UOp], x: UOp) -> UOp | None:
    return ctx.get(x)


pm_replace_known = PatternMatcher([(UPat(name="x"), do_replace_known)])


def apply_becomes(sink: UOp) -> UOp:
    """Replace kernel STOREs that already ran by their storage."""
    return graph_rewrite(sink, pm_replace_known, ctx=becomes_map, name="apply becomes", bottom_up=True)


# module constants for the per-node and per-tensor loops below: on Python 3.11 every `Ops.X` is a lookup through
# EnumType.__getattr__'s slow hook (~0.2 us), and these run for every live tensor on every realize
_STORE, _BUFFER, _BITCAST, _DETACH = Ops.STORE, Ops.BUFFER, Ops.BITCAST, Ops.DETACH
_BF16 = dtypes.bfloat16
_MOVEMENT = GroupOp.Movement


# node -> the UOp clock when `update_tensors` last moved every live tensor off it: a tensor stamped earlier can't
# hold it
replaced_everywhere = WeakKeyMap()
# whether a gradient can flow through a graph: `gradient_reaches(graph, memo)` is true where it reads a tensor that
# wants one (not behind a DETACH), `memo` being shared by the questions of one realize. Set by the front end, which
# knows which tensors want gradients (the schedule layer doesn't import it); None: every graph is remembered
gradient_reaches: Callable[[UOp, dict[Any, Any]], bool] | None = None
# the inputs and rule of a gradient given to a node directly (`uopkit.gradient.given_gradient`, set by the front end):
# an autograd.Function's output reads its inputs behind a DETACH, yet its gradient flows to them
given_gradient: Callable[[UOp], tuple[tuple[UOp, ...], Any] | None] | None = None


# buffers that one realize made several live tensors views of (two tensors whose graphs were the same hash-consed
# node: `Tensor.zeros(3)` twice, `x + 1` twice) -> those tensors' references: a write through one of them must leave
# the others that aren't its PyTorch views with the old contents (`Tensor.assign` gives them a copy first)
shared_storage = WeakKeyMap()


def _source_of(u: UOp) -> tuple[UOp, int]:
    # the graph that computed `u` where an earlier realize replaced it (or what it views), with the clock it was
    # remembered at; else `u`, and 0 (it reads storage as it is now). A reader moved onto a copy before a write is
    # remembered as its graph over the buffer as it was then: realized later, its value is still that graph's as of
    # then, not of the realize that stores it (which would read the overwritten buffer's new contents)
    chain = []
    node = u
    # (as of the running realize's reads: a reader it moves onto a copy of a buffer it writes read the old contents)
    while (source := computed_from.get(node)) is None or outdated_memory(node, computed_from.stamp(node), _reading[0]):
        if node.op not in _MOVEMENT:
            return u, 0
        chain.append(node)
        node = node.src[0]
    stamp = computed_from.stamp(node)
    for view in reversed(chain):
        source = view.replace(src=(source,))
    return source, stamp


class _OneRealize:
    """What the `_remember_source` calls of one realize share: `reaches`, the memo of `gradient_reaches`; `walked`,
    the graphs `_forget_stale_inputs` has walked; `overwritten`, the stored values whose overwritten histories are
    forgotten once the realize's other values are remembered (`forget_all_overwritten`); `replaced`, where the realize
    ran assigns that other graphs read, what it replaced and a memo (`moved_off_assigns`)."""

    __slots__ = ("reaches", "walked", "overwritten", "replaced")

    def __init__(self) -> None:
        self.reaches: dict[Any, Any] = {}
        self.walked: set[UOp] = set()
        self.overwritten: list[UOp] = []
        self.replaced: tuple[dict[UOp, None], dict[UOp, bool]] | None = None

    def forget_all_overwritten(self) -> None:
        for stored in self.overwritten:
            forget_overwritten(stored)


def _remember_source(
    source: tuple[UOp, int], new: UOp, wants_gradient: bool | None = True, shared: _OneRealize | None = None
) -> None:
    # `source`: the graph that computed `new` and the clock it read storage at (0: the realize's own, `_source_of`).
    # Assigns are not differentiable (no gradient flows through STORE): keep nothing for them; nor for a detached
    # value that wants no gradient itself (a `.grad`, a result computed under no_grad): kept, a gradient's graph
    # would hold what computed it alive (an autograd.Function's rule, and through it the input whose `.grad` it is)
    # for as long as the gradient lives. (A detached leaf that does want one, a weight made under no_grad and then
    # given requires_grad, is kept: backward() finds it in graphs realized since by the node it was.) `shared`: what
    # the calls of one realize share
    old, stamp = source
    if old is new:
        return
    base = old
    while base.op in _MOVEMENT or (base.op is _BITCAST and base.dtype is _BF16):
        # (a bfloat16 assign is the BITCAST of the STORE of its bits: remembered, its bits' memory would be an
        # assign's graph, stale at once)
        base = base.src[0]
    if base.op is _STORE:
        if shared is None:
            forget_overwritten(new)
        else:
            # (after the realize's other values are remembered: one computed before the write, reading what it
            # overwrote, is followed back through what that held, `remembered_at`)
            shared.overwritten.append(new)
        return
    if base.op is _DETACH and not wants_gradient:
        return
    if (
        not stamp
        and shared is not None
        and shared.replaced
        and moved_off_assigns(old, new, *shared.replaced, given_gradient)
    ):
        return
    # a view realized with what it views (`x[0:2]` of `x * 2`: the same views over the old graph and over the new
    # storage) is followed back at the storage, the one place a later write through any view of it updates
    top_old, top_new = old, new
    while old.op in _MOVEMENT and new.op is old.op and new.arg == old.arg:
        old, new = old.src[0], new.src[0]
    if old is new:
        return
    # (asked of the views too: one of them may carry a gradient rule, `norm(p=0)`'s count, whose graph below reaches
    # its input only through a mask)
    if not wants_gradient and not _gradient_may_flow(top_old, new, shared):
        return
    _forget_stale_inputs(old, shared)
    _remember_at(new, old, stamp)
    if top_old is not old:
        # the old views stay alive with the new ones: backward() rebuilds the new views as them (`_old_view_rebuilt`),
        # with the gradient rules given to them (`max_pool2d`'s first-maximum rule is on its reshape)
        realized_views[top_new] = top_old
    if new.op is _BITCAST and old.op is _BITCAST and new.dtype is _BF16 and old.dtype is _BF16:
        # a bfloat16 value is its uint16 bits under a BITCAST, and what reads it reads the bits: they are followed
        # back too (to the old bits, whose casts carry the gradient)
        _remember_at(new.src[0], old.src[0], stamp)


def _remember_at(new: UOp, old: UOp, stamp: int) -> None:
    # `old` remembered as what computed `new`, at clock `stamp` (0: the realize running now)
    if stamp:
        computed_from.remember_at(new, old, stamp)
    else:
        computed_from[new] = old


def _gradient_may_flow(old: UOp, new: UOp, shared: _OneRealize | None) -> bool:
    # whether a gradient can ever flow through `old`, the graph that computed the value `new` now stores: not for an
    # int or a bool, nor (PyTorch's rule) for a value computed from tensors none of which wants a gradient now (one
    # given requires_grad later sees it as a constant, as a value computed before requires_grad was set on its
    # inputs is one to PyTorch). Remembered, such a graph held the storage it read for as long as the value lived, and
    # `a = (a * 1.01).realize()` in a loop every earlier value through the chain of them
    if not _carries_gradient(new):
        return False
    if gradient_reaches is None:
        return True
    return gradient_reaches(old, {} if shared is None else shared.reaches)


def _forget_stale_inputs(graph: UOp, shared: _OneRealize | None) -> None:
    # the realized values `graph` reads whose own remembered graphs read a buffer overwritten since let them go
    # (`forget_if_stale`): a loop's state remembered at every step then holds the value of the step before, not
    # every earlier one through a chain of graphs. `shared`: one realize's, so that graphs the values share are
    # walked once
    if _last_write[0] == 0 or not len(computed_from):
        return
    walked: set[UOp] = set() if shared is None else shared.walked
    topo = graph.toposort(gate=lambda n: n not in walked)
    walked.update(topo)
    for u in topo:
        if u in computed_from:
            forget_if_stale(u)


def update_tensors(mapping: dict[UOp, UOp], from_replay: bool = False, pending: PendingReads | None = None) -> None:
    """Point every live tensor at the new form of its graph (nodes in `mapping` replaced).

    `from_replay`: a schedule-cache replay's mapping, from computed values and assigns to views of their storage. No
    key is a view of a BUFFER, so tensors that are such views (realized weights, most live tensors of a model) are
    skipped without walking their graphs, and no value holds a key, so one pass replaces them. `pending`: readers
    still to be rewired to copies are left to `pending.rewire_to_copies`, which replaces `mapping`'s nodes in the same
    walk."""
    skip: set[int] = set()
    if pending is not None and pending.rewire_after:
        skip = {id(t) for t in pending.rewire_after}
        pending.replaced = mapping
    if not from_replay:
        # (a replay's keys are never kernel STOREs: graphs holding KERNELs aren't cached)
        for k, v in mapping.items():
            if k is not v and is_kernel_store(k):
                becomes_map[k] = v
    if not mapping:
        return
    # shared by all the tensors, whose graphs overlap (the gradients share the forward pass): each node is looked at
    # once per call, not once per tensor holding it
    reaches: dict[UOp, bool] = {}
    done: dict[UOp, UOp] = {}
    # a graph whose root was built before every node that changes can't hold one (nodes are newer than their
    # sources): the live tensors of earlier steps are skipped without a walk
    changed = [k for k, v in mapping.items() if k is not v]
    if not changed:
        return
    oldest = min(k.seq for k in changed)
    # and a tensor that held a node when an earlier call replaced it everywhere was moved off it then: only tensors
    # stamped since can hold it again (an expression realized over and over is one hash-consed node, kept alive by
    # `computed_from`; without this every result kept since its first realize would be looked at again)
    since = min(max(k.seq, replaced_everywhere.get(k, -1)) for k in changed)
    # (no node of `changed` is a source of another: only tensors whose node it is can hold one, no graph is walked)
    used = any(k.has_users for k in changed)
    if SPEC:
        live_tensors.check()
    landed: dict[UOp, list[Tensor]] = {}
    shared = _OneRealize()
    if any(k.op is _STORE and k.has_users for k in changed):
        shared.replaced = (dict.fromkeys(changed), {})
    for t in live_tensors.changed_since(since):
        u = t.uop
        if u.seq < oldest or id(t) in skip:
            continue
        new = mapping.get(u)
        if new is None and from_replay:
            while u.op in _MOVEMENT:
                u = u.src[0]
            if u.op is _BUFFER:
                continue
            u = t.uop
        if new is None and used and _reaches(u, mapping, reaches, oldest):
            if from_replay:
                new = _replace_once(u, mapping, reaches, done)
            else:
                new = graph_rewrite(u, pm_replace_known, mapping, "update tensor graph", bottom_up=True, cache=done)
        if new is not None:
            _remember_source(_source_of(t.uop), new, t._requires_grad, shared)
            live_tensors.set_uop(t, new)
            base = _storage_base(new)
            if base is not None:
                landed.setdefault(base, []).append(t)
    shared.forget_all_overwritten()
    for base, sharing in landed.items():
        if len(sharing) > 1:
            shared_storage[base] = (shared_storage.get(base) or []) + [t._live_ref for t in sharing]
    if not skip:
        # (skipped tensors still hold their nodes until `rewire_to_copies`)
        stamp = next(uop_seq)
        for k in changed:
            replaced_everywhere[k] = stamp


def _replace_once(root: UOp, mapping: dict[UOp, UOp], reaches: dict[UOp, bool], memo: dict[UOp, UOp]) -> UOp:
    """`root` with the nodes of `mapping` replaced (not looking into the replacements); `reaches` is filled by
    `_reaches` for `root`, and `memo` is shared between calls with the same mapping."""
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if node in memo:
            continue
        if node in mapping:
            memo[node] = mapping[node]
            continue
        if not reaches[node]:
            memo[node] = node
            continue
        if not expanded:
            stack.append((node, True))
            stack.extend((s, False) for s in node.src if s not in memo)
            continue
        src = tuple([memo[s] for s in node.src])
        memo[node] = node if src == node.src else UOp(node.op, node.dtype, src, node.arg)
    return memo[root]


def _reaches(root: UOp, mapping: dict[UOp, UOp], memo: dict[UOp, bool], oldest: int = -1) -> bool:
    """Whether the graph of `root` (not looking below BUFFERs) holds a node of `mapping`. `oldest`: no key of `mapping`
    was built before node number `oldest`, so a node built before it holds none (nodes are newer than their sources):
    the walk stops there, at the weights and their views a training step's graphs share with earlier steps."""
    if root in memo:
        return memo[root]
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if node in memo:
            continue
        if node.op is _BUFFER or node.seq < oldest:
            memo[node] = False
            continue
        if node in mapping:
            memo[node] = True
            continue
        if expanded:
            memo[node] = any(memo[s] for s in node.src)
            continue
        stack.append((node, True))
        stack.extend((s, False) for s in node.src if s not in memo)
    return memo[root]


# whether a live tensor whose graph is a view of storage (`_is_view`) is one in PyTorch's sense too, showing later
# writes: not a flip, a pad, a repeat or a reshape PyTorch copies, which read the storage as it was (set by the front
# end, which knows which of its tensors are copies; the schedule layer doesn't import it)
view_shows_writes: Callable[[Any], bool] | None = None


def _is_view(u: UOp) -> bool:
    # a view of storage (what torch calls a view: it shows later writes) rather than a value computed from it
    if u.op is Ops.BITCAST:
        u = u.src[0]
    base = u.base
    while base.op is _DETACH:
        # (a detached view of storage shows its writes too, as PyTorch's detach)
        base = base.src[0].base
    return base.op is Ops.BUFFER or is_kernel_store(base)


@dataclass
class PendingReads:
    """What `protect_pending_reads` found: tensors to realize with the STOREs, and readers rewired to copies."""

    # realized with the STOREs: readers that run before them, and copies of the buffers they overwrite
    readers: list[Tensor]
    copies: list[Tensor]
    # the copy of each buffer, and the readers still to be pointed at the copies once those are computed
    copy_of: dict[UOp, Tensor]
    rewire_after: list[Tensor]
    # what the realize replaced that `update_tensors` left to the rewiring (values computed before the writes)
    replaced: dict[UOp, UOp] = field(default_factory=dict)
    # the graph of each reader, before the realize stores it
    read_graphs: list[UOp] = field(default_factory=list)
    # what the tensors being realized read of the buffers written (`stored_reads`' answer for each, in order; None:
    # not asked), for the caller to give back as `known_reads` when it realizes a graph of the same structure
    graph_reads: list[tuple[int, bool]] | None = None

    def keep_old_values(self) -> None:
        """After the realize, what holds values as they were before its writes, for a gradient that needs them
        (`StaleReads`): the copies taken (`remember_copies`); and a reader that backward() follows back to its graph
        (a loss) keeps, while it lives, the storage of the other readers whose values that graph holds (the rows a
        VQ-VAE's loss looked up in a codebook the write updates), which nothing else may hold (a module's local
        variable). A training step's only reader, its loss, keeps nothing."""
        if self.copy_of:
            remember_copies({b: c.uop for b, c in self.copy_of.items()})
        stored = {
            old: t.uop
            for t, old in zip(self.readers, self.read_graphs, strict=True)
            if dtypes.is_float(old.dtype) and old is not t.uop and _storage_base(t.uop) is not None
        }
        if len(stored) < 2:
            return
        for t, old in zip(self.readers, self.read_graphs, strict=True):
            if old in stored and _followed_back(t.uop):
                held = [stored[u] for u in old.toposort(gate=_not_store) if u in stored and u is not old]
                if held:
                    kept_with[t.uop] = held

    def rewire_to_copies(self) -> None:
        """Point the readers left for after the realize at the computed copies (call once the copies are realized).

        Done after, not before, because the copies are then their buffers: the readers' graphs are rebuilt once,
        where rewiring them to the copies' lazy nodes first rebuilt them again when those nodes were realized."""
        if not self.rewire_after:
            return
        mapping, copies = dict(self.replaced), {}
        for b, c in self.copy_of.items():
            if c.uop.base.op is not Ops.BUFFER:
                raise RuntimeError("a copy on write was not computed by the realize that needed it")
            mapping[b] = copies[b] = c.uop
        roots = [t.uop for t in self.rewire_after]
        shared = _OneRealize()
        for t, new in zip(self.rewire_after, replace_reads(roots, mapping), strict=True):
            if new is not t.uop:
                _remember_source(_source_of(t.uop), new, t._requires_grad, shared)
                live_tensors.set_uop(t, new)
            hold_copies(new, copies)
        shared.forget_all_overwritten()


def protect_pending_reads(
    tensors: Sequence[Tensor],
    sink: UOp,
    targets: list[UOp] | None = None,
    stores: Sequence[UOp] | None = None,
    known_reads: list[tuple[int, bool]] | None = None,
) -> PendingReads:
    """Value semantics: before the STOREs under `sink` overwrite a buffer, every other live tensor computed from that
    buffer's current contents must keep them. Returns what to realize with `tensors` (in the same schedule), as
    readers and copies:

    - the readers themselves, when their values are smaller than the buffer (a loss read after an optimizer step:
      the schedule runs each kernel that reads a buffer before the one that overwrites it);
    - else a copy of the buffer, taken before the write, that the readers are rewired to read (copy on write).

    A reader that also reads the STORE (it needs the old and the new contents) always gets the copy, and is rewired
    now. The others (the gradients of a training step, which read every weight the optimizer overwrites) are rewired
    by `PendingReads.rewire_to_copies` after the realize: their graphs hold no STORE, so what the realize replaces in
    them (values it computed, before the writes) can't bring the new contents in. Tensors that are views of the buffer
    (a reshape or slice of it) are not readers: they show the new contents, as in PyTorch.
    `targets`: the buffers the STOREs under `sink` write, and `stores`: those STOREs, when the caller knows them
    (else they are looked up). `known_reads`: what `tensors` read of `targets`, as the result's `graph_reads` said for
    a graph of the same structure with its buffers numbered, which `targets` are a function of (the schedule cache
    keeps it with its key): the graph is then not walked.
    """
    none = PendingReads([], [], {}, [])
    if targets is None:
        targets = pending_writes(sink)
    if not targets:
        return none
    overwriting(targets)
    if stores is None:
        stores = [u for u in sink.toposort(gate=lambda x: x.op is not Ops.BUFFER) if _pending_store(u) is u]
    # a tensor whose assign runs in this realize (a BatchNorm's running mean, read by an eval pass) is no reader of
    # its own buffer: the realize moves it onto the stored value (rewired to a copy, its assign would run again)
    chosen = {id(t) for t in tensors}
    running = set(stores)
    if SPEC:
        live_tensors.check()
    # a value being realized that reads a buffer as it is now and also a STORE (`s + a` after `s = a * 3;
    # a.assign(a + 10)`) can't run before the write nor after it: it reads a copy of the old contents
    computed_here = [t for t in tensors if _pending_store(t.uop) is None]
    # the other readers, from the index of what each live tensor reads (`LiveTensors.readers_of`): a lazy value that
    # reads none of the targets (a list of prepared batches) costs nothing here. An assign still to run (`b.assign(a *
    # 2)` before `a.assign(...)` runs) reads what its value reads, and it writes: run before the STORE it could undo
    # the write's inputs, so it gets the copy, as a reader of the STORE does
    others = [
        (t, m, st)
        for t, m, st in live_tensors.readers_of(targets, chosen)
        if id(t) not in chosen and (not running or _pending_store(t.uop) not in running)
    ]
    # what the tensors being realized read depends on their graph's structure alone: a training step's graph (every
    # node of the forward and backward passes) is walked at its first step, not at every one
    here_reads = known_reads
    if here_reads is None:
        here_reads = stored_reads([t.uop for t in computed_here], targets) if computed_here else []
    found = [(t, m, True) for t, (m, st) in zip(computed_here, here_reads, strict=True) if m and st]
    found += others
    if not found:
        return PendingReads([], [], {}, [], graph_reads=here_reads)
    to_realize: dict[int, Tensor] = {}
    copy_bits = 0
    for i, buf in enumerate(targets):
        readers = [(t, st) for t, m, st in found if m >> i & 1]
        if not readers:
            continue
        # (a reader that is a movement of the storage, a flip PyTorch copies, computes nothing when realized: it reads
        # the copy)
        if (
            any(st for _, st in readers)
            or sum(t.numel() for t, _ in readers) > buf.arg[2]
            or any(_is_view(t.uop) for t, _ in readers)
        ):
            copy_bits |= 1 << i
        else:
            to_realize.update((id(t), t) for t, _ in readers)
    # readers that need a copy: those not realized now (or that can't run before the STORE)
    rewire = [(t, m, st) for t, m, st in found if m & copy_bits and (st or id(t) not in to_realize)]
    for t, _, _ in rewire:
        to_realize.pop(id(t), None)
    needed = 0
    for _, m, _ in rewire:
        needed |= m & copy_bits
    # a fresh arg per copy (as Tensor.contiguous, in a namespace of its own): two copies of one buffer are never the
    # same hash-consed node
    copies = {
        b: UOp(Ops.CONTIGUOUS, b.dtype, (b,), ("copy_on_write", next(_copy_ids)))
        for i, b in enumerate(targets)
        if needed >> i & 1
    }
    now = [t for t, _, st in rewire if st]
    if copies and now:
        computed = [t for t in now if _pending_store(t.uop) is None]
        for t, new in zip(computed, replace_reads([t.uop for t in computed], copies), strict=True):
            live_tensors.set_uop(t, new)
        rewired = {}
        for t in now:
            if (store := _pending_store(t.uop)) is not None:
                rewired[store] = _with_value_rewired(store, copies)
        if rewired:
            _move_to_rewired(rewired)
    # the copies are plain tensors (`Tensor` is bound here by the front end, which imports this module): the caller's
    # class could be a subclass that takes no graph (nn.Parameter: a lazy read of a weight, then load_state_dict,
    # raised TypeError)
    copy_of = {b: Tensor(c) for b, c in copies.items()}
    later = [t for t, _, st in rewire if not st] if copies else []
    readers = list(to_realize.values())
    graphs = [t.uop for t in readers]
    return PendingReads(readers, list(copy_of.values()), copy_of, later, read_graphs=graphs, graph_reads=here_reads)


def _followed_back(u: UOp) -> bool:
    # whether backward() follows the view of storage `u` back to the graph that computed it
    while u not in computed_from:
        if u.op not in _MOVEMENT:
            return False
        u = u.src[0]
    return True


def drop_pending_writes(tensors: Sequence[Tensor]) -> None:
    """Forget the assigns not yet run that `tensors` are (a realize asked to run them failed): each of them, and every
    live tensor whose graph holds one, reads the storage as it is instead, as if the assign had never been made. Left
    pending, the write would land at the next realize, after the caller was told it failed (and a retried optimizer
    step would then step twice)."""
    dropped = {}
    for t in tensors:
        u = t.uop.src[0] if t.uop.op is _BITCAST else t.uop
        while u.op in _MOVEMENT:
            u = u.src[0]
        store = _pending_store(u)
        if store is not None:
            dropped[store] = store.src[0]
    if dropped:
        _move_to_rewired(dropped, "dropped assigns")


def _move_to_rewired(rewired: dict[UOp, UOp], name: str = "rewired assigns") -> None:
    # every live tensor holding one of the pending assigns `rewired` (old STORE -> the STORE whose value reads the
    # copies) moves onto the new one: the assign's own tensor, and the graphs that read its result (Adam's parameter
    # update reads the moment's STORE, and its value reads the gradient only through it, so `stored_reads` finds no
    # read of the buffer in it). Left on the old STORE, such a graph would run the assign a second time, into the same
    # buffer, from the overwritten contents. (A bottom-up rewrite: an assign rewired that holds another one rewired
    # is moved onto that one too.)
    reaches: dict[UOp, bool] = {}
    done: dict[UOp, UOp] = {}
    for t in live_tensors.changed_since(min(s.seq for s in rewired)):
        if _reaches(t.uop, rewired, reaches):
            new = graph_rewrite(t.uop, pm_replace_known, rewired, name, bottom_up=True, cache=done)
            live_tensors.set_uop(t, new)


def _with_value_rewired(u: UOp, copies: dict[UOp, UOp]) -> UOp:
    # the pending assign `u` with its value reading the copies instead of the buffers they copy
    store = _pending_store(u)
    assert store is not None
    new = store.replace(src=(store.src[0], replace_reads([store.src[1]], copies)[0]))
    return new if u is store else u.replace(src=(new,))


def kernelize_tensors(tensors: Sequence[Tensor], kernelized: dict[UOp, UOp] | None = None) -> UOp:
    """Kernelize the graphs of `tensors`; returns the SINK of their new uops. `kernelized`: filled with each node of
    the graph that gets a kernel of its own (not a view), as it is, and its kernelized form (a view of its STORE)."""
    sink = apply_becomes(UOp(Ops.SINK, src=tuple(t.uop for t in tensors)))
    for t, new in zip(tensors, sink.src, strict=True):
        live_tensors.set_uop(t, new)
    # large matmuls may read their right operand from panels (the device's renderer says): decided here, on the whole
    # graph with its gradients, and applied to every live tensor so that all share the one packed matmul
    # (each substitution's node -> new node, to tell `kernelized` the graph's own nodes)
    renamed: list[dict[UOp, UOp]] = []
    # (one walk of the graph for both passes when the first changes nothing, as it mostly doesn't)
    topo = sink.toposort()
    packed = pack_panels(sink, topo)
    if packed:
        update_tensors(packed)
        renamed.append({})
        sink = graph_rewrite(sink, _pm_substitute, packed, "pack panels", bottom_up=True, cache=renamed[-1])
    # a long reduce into few outputs becomes partial reduces and a reduce of those, so that threads can share it
    split = split_reduces(sink, None if packed else topo)
    if split:
        update_tensors(split)
        renamed.append({})
        sink = graph_rewrite(sink, _pm_substitute, split, "split reduces", bottom_up=True, cache=renamed[-1])
    if SPEC:
        from uopkit.uop.spec import verify_tensor_graph

        verify_tensor_graph(sink)
    mapping = kernelize_graph(sink)
    if kernelized is not None:
        _kernelized_nodes(mapping, renamed, kernelized)
    update_tensors(mapping)
    new_sink = sink.replace(src=tuple(mapping.get(s, s) for s in sink.src))
    if SPEC:
        from uopkit.uop.spec import verify_kernel_graph

        verify_kernel_graph(new_sink)
    return new_sink


def _kernelized_nodes(mapping: dict[UOp, UOp], renamed: list[dict[UOp, UOp]], out: dict[UOp, UOp]) -> None:
    # the nodes (as they were before `renamed`'s substitutions) that `mapping` gives a kernel of their own, not a view
    # of another's: node -> the view of its STORE
    nodes: Iterable[UOp] = renamed[0] if renamed else mapping
    for k in nodes:
        cur = k
        for r in renamed:
            cur = r.get(cur, cur)
        v = mapping.get(cur)
        if v is not None and k.op not in _MOVEMENT and k.op is not _STORE and v is not cur and is_kernel_store(v.base):
            out[k] = v


@dataclass(frozen=True)
class ScheduleItem:
    """One kernel to run: its AST and the BUFFERs it uses (output first, then inputs in DEFINE_GLOBAL order), and the
    launch values of the AST's variables by name (where its windows of the inputs start, `windows.window_inputs`)."""

    ast: UOp
    bufs: tuple[UOp, ...]
    store: UOp
    var_vals: tuple[tuple[str, int], ...] = ()


def _store_buffer(store: UOp) -> UOp:
    return store.src[0].base if store.src[0].base.op is Ops.BUFFER else store.src[0].buf_uop


def create_schedule(sink: UOp) -> list[ScheduleItem]:
    """Order every kernel STORE under `sink`: after the STOREs it reads, and after raw reads of what it overwrites."""
    stores = [u for u in sink.toposort() if is_kernel_store(u)]
    deps: dict[UOp, set[UOp]] = {s: {d for d in s.src[1].src if is_kernel_store(d)} for s in stores}
    if s_missing := [d for s in stores for d in deps[s] if d not in deps]:
        raise ScheduleError(f"kernel depends on a STORE outside the schedule: {s_missing[0].op}")
    # write-after-read: a kernel that overwrites buffer B runs after every other kernel reading B as it was
    raw_readers: dict[UOp, list[UOp]] = {}
    for s in stores:
        for d in s.src[1].src:
            if d.op is Ops.BUFFER:
                raw_readers.setdefault(d, []).append(s)
    # a reader that must run after the writer already (it reads what the writer computes, or an earlier such order
    # put it there: `a` and `p` each reading what the other overwrites) reads a copy of B taken before the write
    copies: dict[UOp, UOp] = {}
    read_copy: dict[UOp, dict[UOp, UOp]] = {}
    for s in stores:
        buf = _store_buffer(s)
        for reader in raw_readers.get(buf, []):
            if reader is s:
                continue
            if s not in _ancestors(reader, deps):
                deps[s].add(reader)
                continue
            if buf not in copies:
                copies[buf] = _copy_of(buf)
                deps[copies[buf]] = set()
                deps[s].add(copies[buf])
            read_copy.setdefault(reader, {})[buf] = copies[buf]
            deps[reader].add(copies[buf])
    order: list[UOp] = []
    state: dict[UOp, int] = {}
    for s in [*copies.values(), *stores]:
        _visit(s, deps, state, order)
    items = []
    for s in order:
        kernel = s.src[1]
        out = _store_buffer(s)
        moved = read_copy.get(s, {})
        ins = tuple(
            _store_buffer(moved[d]) if d in moved else d if d.op is Ops.BUFFER else _store_buffer(d) for d in kernel.src
        )
        if kernel.arg.op is Ops.COPY:
            items.append(ScheduleItem(kernel.arg, (out, *ins), s))
            continue
        n_globals = len({u.arg for u in kernel.arg.toposort() if u.op is Ops.DEFINE_GLOBAL})
        existing = frozenset(i + 1 for i, d in enumerate(kernel.src) if d.op is Ops.BUFFER and d not in moved)
        ast, starts = window_inputs(kernel.arg, vector_align(out.arg[1]), existing)
        named = {v.arg[0]: value for v, value in starts.items()} | launch_values(ast)
        var_vals = tuple(sorted(named.items()))
        items.append(ScheduleItem(ast, (out, *ins[: n_globals - 1]), s, var_vals))
    return items


def _copy_of(buf: UOp) -> UOp:
    """A kernel STORE copying `buf` into a new buffer of its own (on its device)."""
    device = buf.arg[1]
    kernel = UOp(Ops.KERNEL, dtypes.void, (buf,), UOp(Ops.COPY, buf.dtype, (), (device, device)))
    return UOp(Ops.STORE, buf.dtype, (UOp.new_buffer(device, buf.arg[2], buf.dtype), kernel))


def vector_align(device: str) -> int:
    """The device renderer's `RendererCaps.vector_align` (the byte alignment its vector accesses need; 0: none)."""
    from uopkit.device import Device

    try:
        return Device[device].renderer.caps.vector_align
    except Exception:  # noqa: BLE001 - a device that can't open here runs nothing: assume aligned vectors
        return 16


def _ancestors(s: UOp, deps: dict[UOp, set[UOp]]) -> set[UOp]:
    seen: set[UOp] = set()
    stack = list(deps[s])
    while stack:
        d = stack.pop()
        if d not in seen:
            seen.add(d)
            stack.extend(deps.get(d, ()))
    return seen


def _visit(s: UOp, deps: dict[UOp, set[UOp]], state: dict[UOp, int], order: list[UOp]) -> None:
    stack = [(s, False)]
    while stack:
        node, done = stack.pop()
        if done:
            state[node] = 2
            order.append(node)
            continue
        if state.get(node) == 2:
            continue
        if state.get(node) == 1:
            raise ScheduleError("cycle in the schedule: a kernel both reads and overwrites a buffer another needs")
        state[node] = 1
        stack.append((node, True))
        stack.extend((d, False) for d in deps[node] if state.get(d) != 2)


__all__ = [
    "ScheduleItem",
    "ScheduleError",
    "create_schedule",
    "kernelize_tensors",
    "becomes_map",
    "apply_becomes",
    "protect_pending_reads",
    "PendingReads",
    "drop_pending_writes",
    "unrealized_graph",
    "StaleReads",
    "computed_from",
    "forget_source",
    "stale_sources",
]
