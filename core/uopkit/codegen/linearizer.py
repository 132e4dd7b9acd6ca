"""Linearize a lowered kernel graph into the ordered list of UOps a renderer consumes.

Each op lives inside the loops of the RANGEs it depends on (minus those an END it depends on has closed).
Side effects (STOREs, register reads, loops that must start fresh) are placed in exactly those loops; pure ops
may sit deeper, and are emitted as early as possible so loop-invariant work stays outside inner loops.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

from uopkit.dtype import dtypes
from uopkit.renderer.loops import mark_reduce_loops
from uopkit.uop.ops import GroupOp, Ops, UOp

# module constants: on Python 3.11 every `Ops.X` is a lookup through EnumType.__getattr__'s slow hook (~0.17 us), and
# linearizing and sinking look at every node of every kernel several times
_BARRIER, _BITCAST, _CAST, _DEFINE_GLOBAL = Ops.BARRIER, Ops.BITCAST, Ops.CAST, Ops.DEFINE_GLOBAL
_DEFINE_REG, _END, _GEP, _INDEX, _LOAD = Ops.DEFINE_REG, Ops.END, Ops.GEP, Ops.INDEX, Ops.LOAD
_IF, _RANGE, _SINK, _STORE, _VECTORIZE = Ops.IF, Ops.RANGE, Ops.SINK, Ops.STORE, Ops.VECTORIZE


class LinearizeError(RuntimeError):
    pass


_NO_RANGES: frozenset[UOp] = frozenset()


def _union(sets: Iterable[frozenset[UOp]]) -> frozenset[UOp]:
    # most ops' sources carry the same set (or none): it is shared, not copied, so this stays linear in the graph
    out = _NO_RANGES
    for s in sets:
        if s is out or not s or s <= out:
            continue
        out = s if out <= s else out | s
    return out


def _open_ranges(topo: list[UOp]) -> dict[UOp, frozenset[UOp]]:
    ctx: dict[UOp, frozenset[UOp]] = {}
    for u in topo:
        inner = _union([ctx[s] for s in u.src])
        if u.op is _RANGE:
            inner = inner | {u}
        elif u.op is _END:
            inner = ctx[u.src[0]] - {u.src[1]}
        ctx[u] = inner
    return ctx


def _closed_ranges(topo: list[UOp]) -> dict[UOp, frozenset[UOp]]:
    """For each op, the loops that must have finished before it (their END is among its sources)."""
    closed: dict[UOp, frozenset[UOp]] = {}
    for u in topo:
        done = _union([closed[s] for s in u.src])
        closed[u] = done | {u.src[1]} if u.op is _END else done
    return closed


def _is_exact(u: UOp) -> bool:
    # ops whose position is part of their meaning
    if u.op in (_STORE, _END, _BARRIER):
        return True
    if u.op is _LOAD and u.src[0].op is _INDEX and u.src[0].src[0].op is _DEFINE_REG:
        return True
    return u.op is _RANGE and len(u.src) > 1


def linearize(sink: UOp, branch_selected_updates: bool = False) -> list[UOp]:
    """`sink`'s ops in order. `branch_selected_updates`: put one-hot sums' updates under an IF
    (`branch_one_hot_updates`), for renderers whose loops run one element at a time (a CPU's)."""
    topo = [u for u in sink.toposort() if u.op is not _SINK]
    uops = sink_pure_ops(_Placement(topo).run())
    return mark_reduce_loops(branch_one_hot_updates(uops) if branch_selected_updates else uops)


class _Placement:
    """Places ops into loops: repeatedly emits everything that can go at the current loop nest (its sources emitted,
    its loops open), then closes the innermost loop once nothing left needs it, or opens the loop that lets the most
    pending work proceed.

    Each step looks only at what it changes, not at every pending op (a kernel of many reduce loops rescanned all of
    its ops at every loop it opened and closed: time in loops x ops). An op waits, once its sources are emitted, on
    one of its loops that is not open; per level of the loop nest, `users_at` counts for each loop the pending ops
    inside it and every open loop (the ops that opening it lets proceed), and `choices` holds the loops that could open
    there, best first."""

    def __init__(self, topo: list[UOp]):
        self.topo = topo
        self.index = {u: i for i, u in enumerate(topo)}
        self.ctx = _open_ranges(topo)
        self.closed = _closed_ranges(topo)
        self.end_of = {u.src[1]: u for u in topo if u.op is _END}
        self.exact = {u for u in topo if _is_exact(u)}
        # the loops each loop must be inside
        self.outside = {u: self.ctx[u] - {u} for u in topo if u.op is _RANGE}
        self.emitted: dict[UOp, None] = {}
        self.open_stack: list[UOp] = []
        # sources not emitted yet, and the users each op releases
        self.missing: dict[UOp, int] = {}
        self.users: dict[UOp, list[UOp]] = {}
        for u in topo:
            srcs = [s for s in dict.fromkeys(u.src) if s.op is not _SINK]
            self.missing[u] = len(srcs)
            for s in srcs:
                self.users.setdefault(s, []).append(u)
        # the ops inside each loop, and how many pending ones are not ENDs (the loop can't close before those)
        self.inside: dict[UOp, list[UOp]] = {}
        self.needs: dict[UOp, int] = {}
        for u in topo:
            for r in self.ctx[u]:
                self.inside.setdefault(r, []).append(u)
                if u.op is not _END:
                    self.needs[r] = self.needs.get(r, 0) + 1
        # ops ready to go at the current nest, by place in toposort order (a pass emits them in that order)
        self.heap: list[int] = []
        # ready ops whose loops are not all open: by one loop they wait on (exact ops: by the nest they go in)
        self.waiting: dict[UOp, list[UOp]] = {}
        self.waiting_exact: dict[frozenset[UOp], list[UOp]] = {}
        self.ready_ranges: dict[UOp, None] = {}
        self.ready_ends: dict[UOp, list[int]] = {}
        # per level L of the nest (L loops open): those loops, the pending ops' counts, the loops that may open there
        self.nests: list[frozenset[UOp]] = [frozenset()]
        self.users_at: list[dict[UOp, int]] = [self._count_users(topo)]
        self.choices: list[list[tuple[bool, int, int]]] = [[]]

    def _count_users(self, ops: list[UOp]) -> dict[UOp, int]:
        counts: dict[UOp, int] = {}
        for u in ops:
            for r in self.ctx[u]:
                if r is not u:
                    counts[r] = counts.get(r, 0) + 1
        return counts

    def _levels_holding(self, u: UOp) -> int:
        # how many levels count u: the first k open loops are all among its loops (levels 0..k)
        ranges, k = self.ctx[u], 0
        while k < len(self.open_stack) and self.open_stack[k] in ranges:
            k += 1
        return k + 1

    def _offer(self, r: UOp, level: int) -> None:
        # ready loop r as a choice at `level`, if it fits inside that level's loops and a pending op there needs it
        nest, exact = self.nests[level], r in self.exact
        if (self.outside[r] == nest if exact else self.outside[r] <= nest) and self.users_at[level].get(r, 0) > 0:
            heapq.heappush(self.choices[level], (not exact, r.arg[0], self.index[r]))

    def _make_ready(self, u: UOp, open_set: frozenset[UOp]) -> None:
        if u.op is _RANGE:
            self.ready_ranges[u] = None
            for level in range(len(self.nests)):
                self._offer(u, level)
        elif u.op is _END:
            heapq.heappush(self.ready_ends.setdefault(u.src[1], []), self.index[u])
        elif u in self.exact:
            if self.ctx[u] == open_set:
                heapq.heappush(self.heap, self.index[u])
            else:
                self.waiting_exact.setdefault(self.ctx[u], []).append(u)
        else:
            self._wait_or_push(u, open_set)

    def _wait_or_push(self, u: UOp, open_set: frozenset[UOp]) -> None:
        for r in self.ctx[u]:
            if r not in open_set:
                self.waiting.setdefault(r, []).append(u)
                return
        heapq.heappush(self.heap, self.index[u])

    def _take(self, u: UOp, open_set: frozenset[UOp]) -> None:
        # emit u: it leaves the pending counts and releases its users
        self.emitted[u] = None
        self.ready_ranges.pop(u, None)
        # (an op outside every loop, many of a kernel's, is in no count; called once per op, so the lookups are local)
        ranges = self.ctx[u]
        if ranges:
            users_at = self.users_at
            for level in range(self._levels_holding(u)):
                counts = users_at[level]
                for r in ranges:
                    if r is not u:
                        counts[r] -= 1
            if u.op is not _END:
                needs = self.needs
                for r in ranges:
                    needs[r] -= 1
        missing = self.missing
        for v in self.users.get(u, ()):
            missing[v] -= 1
            if missing[v] == 0:
                self._make_ready(v, open_set)

    def run(self) -> list[UOp]:
        open_set: frozenset[UOp] = frozenset()
        for u in self.topo:
            if self.missing[u] == 0:
                self._make_ready(u, open_set)
        while True:
            # everything that can go here now, in toposort order (an op's users come after it)
            while self.heap:
                self._take(self.topo[heapq.heappop(self.heap)], open_set)
            if len(self.emitted) == len(self.topo):
                return list(self.emitted)
            # close the innermost loop once nothing left needs it
            inner = self.open_stack[-1] if self.open_stack else None
            if inner is not None and self.ready_ends.get(inner) and self.needs[inner] == 0:
                self._take(self.topo[heapq.heappop(self.ready_ends[inner])], open_set)
                self.open_stack.pop()
                self.nests.pop()
                self.users_at.pop()
                self.choices.pop()
                open_set = self.nests[-1]
                # (no op waiting on a loop fits once one closes, except one that goes exactly here)
                for u in self.waiting_exact.pop(open_set, []):
                    heapq.heappush(self.heap, self.index[u])
                continue
            best = self._loop_to_open(open_set)
            self._take(best, open_set)
            self.open_stack.append(best)
            open_set = open_set | {best}
            # the next level: the pending ops inside every open loop, and the ready loops they need
            depth = len(self.open_stack)
            inner_ops = [u for u in self.inside[best] if u not in self.emitted and self._levels_holding(u) > depth]
            self.nests.append(open_set)
            self.users_at.append(self._count_users(inner_ops))
            self.choices.append([])
            for r in self.users_at[-1]:
                if r in self.ready_ranges:
                    self._offer(r, depth)
            for u in self.waiting.pop(best, []):
                self._wait_or_push(u, open_set)
            for u in self.waiting_exact.pop(open_set, []):
                heapq.heappush(self.heap, self.index[u])

    def _loop_to_open(self, open_set: frozenset[UOp]) -> UOp:
        # the loops that fit here and that some pending op needs, with every loop open now; the best first: exact
        # ones (they can only run at this depth), then by axis, then in toposort order
        choices, counts = self.choices[-1], self.users_at[-1]

        def stale(entry: tuple[bool, int, int]) -> bool:
            r = self.topo[entry[2]]
            return r in self.emitted or counts.get(r, 0) == 0

        while choices and stale(choices[0]):
            heapq.heappop(choices)
        if not choices:
            pending = [u for u in self.topo if u not in self.emitted]
            left = ", ".join(f"{u.op.name}{u.arg if u.op is _RANGE else ''}" for u in pending[:8])
            opened = [r.arg for r in self.open_stack]
            raise LinearizeError(f"can't place {len(pending)} ops (open loops {opened}): {left}")
        if choices[0][0]:
            # no exact loop among them: nothing is blocked
            return self.topo[heapq.heappop(choices)[2]]
        # a loop whose body needs another candidate loop's result (a reduce fused into a row) waits for it
        # (an exact candidate can only run here, at this depth: it can't be nested inside the other)
        candidates = [self.topo[e[2]] for e in sorted(set(choices)) if not stale(e)]
        exact = {r for r in candidates if r in self.exact}
        unblocked = [r for r in candidates if r not in self.end_of or not self.closed[self.end_of[r]] & (exact - {r})]
        return (unblocked or candidates)[0]


def branch_one_hot_updates(uops: list[UOp]) -> list[UOp]:
    """In an innermost loop, the register updates ``acc = acc + where(a == b, x, 0)`` that test one scalar condition
    go under ``if (a == b)``, with the ops only they use (x's loads): a sum over a one-hot that doesn't fold into a
    load, an embedding's gradient (over every lookup: where(the lookup's row is this row, its gradient, 0)), adds for
    one iteration in a table's rows and computed every select, blend and add for the others.

    Exact: skipping acc + 0.0 changes nothing (a sum's register starts at +0.0, so it never holds -0.0, the one value
    that + 0.0 changes)."""
    ends = {u.src[1]: i for i, u in enumerate(uops) if u.op is _END}
    out: list[UOp] = []
    i = 0
    while i < len(uops):
        u = uops[i]
        out.append(u)
        i += 1
        if u.op is not _RANGE or u.arg[1] != "loop" or u not in ends:
            continue
        body = uops[i : ends[u]]
        if any(b.op in (_RANGE, _IF, _BARRIER) for b in body):
            continue
        out.extend(_branch_updates(body, uops, u))
        i = ends[u]
    return out


def _one_hot_update(b: UOp) -> UOp | None:
    # STORE(reg, acc + where(cond, x, 0)) with a scalar equality as cond: the cond
    if b.op is not _STORE or b.src[0].op is not _INDEX or b.src[0].src[0].op is not _DEFINE_REG:
        return None
    value = b.src[1]
    if value.op is not Ops.ADD:
        return None
    acc = [s for s in value.src if s.op is _LOAD and s.src[0] is b.src[0]]
    sel = [s for s in value.src if s.op is Ops.WHERE]
    if len(acc) != 1 or len(sel) != 1 or not _is_zero(sel[0].src[2]):
        return None
    cond = sel[0].src[0]
    return cond if cond.op is Ops.CMPEQ and cond.dtype.count == 1 else None


def _is_zero(u: UOp) -> bool:
    # +0 (or a vector of them): -0.0 is the sum's identity too, but no update adds it under a select
    if u.op is Ops.VECTORIZE:
        return all(_is_zero(s) for s in u.src)
    return u.op is Ops.CONST and u.arg == 0 and math.copysign(1.0, u.arg) > 0


def _branch_updates(body: list[UOp], uops: list[UOp], loop: UOp) -> list[UOp]:
    # (only a condition that tests an outer loop's counter, the output's row, is true for few iterations: an
    # accuracy count, sum of where(pred == label, 1, 0), is true for most, and stays a vectorized sum)
    gates = {
        b: c
        for b in body
        if (c := _one_hot_update(b)) is not None and any(r.op is _RANGE and r is not loop for r in c.toposort())
    }
    if not gates:
        return body
    inside = set(body)
    users: dict[UOp, list[UOp]] = {}
    for u in uops:
        for s in u.src:
            users.setdefault(s, []).append(u)
    # the gate each op serves alone (every user in the loop, all under that gate): it moves under the gate's IF
    owner: dict[UOp, UOp] = {}
    for u in reversed(body):
        if u in gates:
            owner[u] = gates[u]
            continue
        if u.op in (_STORE, _RANGE, _END) or not users.get(u):
            continue
        served = {owner.get(x) if x in inside else None for x in users[u]}
        if len(served) == 1 and None not in served:
            owner[u] = served.pop()
    # a condition, and what it is computed from, stays before its IF
    stack = list(dict.fromkeys(gates.values()))
    while stack:
        u = stack.pop()
        if owner.pop(u, None) is not None or u in inside:
            stack.extend(s for s in u.src if s in inside)
    new = [u for u in body if u not in owner]
    for cond in dict.fromkeys(gates.values()):
        gate = UOp(_IF, dtypes.void, (cond,))
        new += [gate, *(u for u in body if owner.get(u) is cond), UOp(Ops.ENDIF, dtypes.void, (gate,))]
    return new


# ---------------------------------------------------------------------------------------------------------------------
# placing pure ops just before they are needed


def _is_movable(u: UOp) -> bool:
    # values with no effect and no ordering of their own (a register or local read has an ordering)
    if u.op is _LOAD:
        index = u.src[0]
        return index.op is _INDEX and index.src[0].op is _DEFINE_GLOBAL and len(u.src) == 1
    return u.op in GroupOp.ALU or u.op in (_CAST, _BITCAST, _INDEX, _VECTORIZE, _GEP)


def sink_pure_ops(uops: list[UOp]) -> list[UOp]:
    """Move each pure op down to just before the first statement of its loop body that needs it.

    The linearizer emits values as soon as they can be computed; a value used only after an inner loop then stays
    live (in a register) across the whole loop. Sinking keeps loop-invariant values hoisted (they still come before
    the inner loop when the loop uses them) but shortens every other value's life.
    """
    # blocks: the program body and each loop body; an item is an op, or a nested loop (RANGE ... END)
    root: list = []
    stack: list[list] = [root]
    # for each open block, the path to it: (block, index of the item leading here) for each enclosing block, shared
    # by every op in the block (an op's path is its block's plus its own place)
    prefixes: list[tuple[tuple[list, int], ...]] = [()]
    where: dict[UOp, _Place] = {}
    for u in uops:
        block = stack[-1]
        if u.op is _RANGE:
            body: list = []
            block.append(("loop", u, body))
            where[u] = (prefixes[-1], block, len(block) - 1)
            prefixes.append((*prefixes[-1], (block, len(block) - 1)))
            stack.append(body)
            continue
        if u.op is _END:
            stack.pop()
            prefixes.pop()
            stack[-1][-1] = (*stack[-1][-1], u)
            where[u] = (prefixes[-1], stack[-1], len(stack[-1]) - 1)
            continue
        block.append(("op", u))
        where[u] = (prefixes[-1], block, len(block) - 1)
    users: dict[UOp, list[UOp]] = {}
    for u in uops:
        for s in u.src:
            users.setdefault(s, []).append(u)
    _sink_block(root, users, where)
    out: list[UOp] = []
    _flatten(root, out)
    return out


# where an op sits: the (block, index) of each enclosing block's item leading to it, its block, its index there
_Place = tuple[tuple[tuple[list, int], ...], list, int]


def _at_depth(place: _Place, depth: int) -> tuple[list, int] | None:
    # the (block, index) of `place` at nesting depth `depth` (None: not that deep)
    prefix, block, i = place
    if depth < len(prefix):
        return prefix[depth]
    return (block, i) if depth == len(prefix) else None


def _sink_block(block: list, users: dict[UOp, list[UOp]], where: dict[UOp, _Place]) -> None:
    depth = None
    for item in block:
        if item[0] == "loop":
            _sink_block(item[2], users, where)
    # the item of this block that contains each op (by the op's path)
    anchor: dict[UOp, int] = {}
    for i in range(len(block) - 1, -1, -1):
        item = block[i]
        if item[0] != "op" or not _is_movable(item[1]):
            continue
        u = item[1]
        if depth is None:
            depth = len(where[u][0])
        best = None
        for user in users.get(u, []):
            place = where.get(user)
            at = _at_depth(place, depth) if place is not None else None
            if at is None or at[0] is not block:
                best = None
                break
            pos = at[1]
            if pos < i:
                best = None
                break
            pos = anchor.get(user, pos)
            best = pos if best is None else min(best, pos)
        if best is not None and best > i:
            anchor[u] = best
    if not anchor:
        return
    moved: dict[int, list] = {}
    for item in block:
        if item[0] == "op" and item[1] in anchor:
            moved.setdefault(anchor[item[1]], []).append(item)
    new: list = []
    for i, item in enumerate(block):
        new.extend(moved.get(i, []))
        if not (item[0] == "op" and item[1] in anchor):
            new.append(item)
    block[:] = new


def _flatten(block: list, out: list[UOp]) -> None:
    for item in block:
        if item[0] == "op":
            out.append(item[1])
        else:
            out.append(item[1])
            _flatten(item[2], out)
            out.append(item[3])
