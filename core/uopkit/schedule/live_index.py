"""The index of the live tensors that are computed values (`IndexedTensors`, a base of `LiveTensors`): which of them
are which graph, which are assigns still to run, and which read which buffer, so that a realize or a write looks at
the tensors that matter to it rather than at every live tensor (a program's 1000 lazy results cost a write nothing)."""

from __future__ import annotations

import operator
import weakref
from collections.abc import Container, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from uopkit.schedule.grouper import is_kernel_store
from uopkit.schedule.read_masks import read_masks
from uopkit.uop.ops import Ops, UOp, uop_seq
from uopkit.uop.weak_map import WeakKeyMap

if TYPE_CHECKING:
    from uopkit.tensor import Tensor

_STORE, _BUFFER, _BITCAST = Ops.STORE, Ops.BUFFER, Ops.BITCAST


class IndexedTensors:
    """The index kept by `LiveTensors` (its stamps: `_refs`, `_stamped_after`), brought up to date when asked
    (`_catch_up`, from the tensors stamped since the last time), never on the path that makes a tensor. An entry is
    (reference -> the stamp it was made at); one whose stamp is no longer the tensor's (its graph changed, or it
    died) is stale: skipped and dropped where met, and all of them now and then (`_sweep`, amortized)."""

    __slots__ = ("_indexed", "_by_root", "_assigns", "_unread", "_readers", "_entries")
    _refs: dict[weakref.ref[Tensor], int]

    def _init_index(self) -> None:
        # `_indexed`: the stamp drawn at the last catch-up; `_by_root`: graph -> the tensors that are it; `_assigns`:
        # the assigns still to run; `_unread`: the tensors whose reads are not indexed yet (walked at the next
        # `readers_of`); `_readers`: a buffer's node number -> the tensors reading its contents as they are now (the
        # value: (stamp, whether the tensor also reads a STORE)); `_entries`: how many entries, stale ones included
        self._indexed = -1
        self._by_root = WeakKeyMap()
        self._assigns: dict[weakref.ref[Tensor], int] = {}
        self._unread: dict[weakref.ref[Tensor], int] = {}
        self._readers: dict[int, dict[weakref.ref[Tensor], tuple[int, bool]]] = {}
        self._entries = 0

    def _stamped_after(self, seq: int) -> list[weakref.ref[Tensor]]:
        raise NotImplementedError  # (LiveTensors')

    def _computed_one(self, t: Tensor) -> bool:
        raise NotImplementedError  # (LiveTensors')

    def _catch_up(self) -> None:
        """Index the computed tensors (as `computed` finds them) stamped since the last catch-up: by graph, the
        assigns still to run apart, and as not yet walked for the buffers they read (`readers_of` walks them)."""
        refs = self._refs
        walked = next(uop_seq)
        newer = self._stamped_after(self._indexed)
        self._indexed = walked
        if not newer:
            return
        by_root, assigns, unread = self._by_root, self._assigns, self._unread
        added = 0
        for i in range(len(newer) - 1, -1, -1):
            ref = newer[i]
            t = ref()
            if t is None:
                continue
            if not self._computed_one(t):
                continue
            u = t.uop
            stamp = refs.get(ref, -1)
            same = by_root.get(u)
            if same is None:
                by_root[u] = same = {}
            same[ref] = stamp
            if _pending_store(u) is not None:
                assigns[ref] = stamp
            unread[ref] = stamp
            added += 1
        self._entries += added
        if self._entries > 2 * len(refs) + 4096:
            self._sweep()

    def _sweep(self) -> None:
        # drop the stale entries of the index (amortized: run once it holds twice as many entries as live tensors)
        refs = self._refs
        total = 0
        for table in (self._assigns, self._unread, *self._readers.values(), *self._by_root._data.values()):
            for ref in [r for r, v in table.items() if refs.get(r) != (v if type(v) is int else v[0])]:
                del table[ref]
            total += len(table)
        self._readers = {k: v for k, v in self._readers.items() if v}
        for k in [k for k, v in self._by_root._data.items() if not v]:
            self._by_root._data.pop(k, None)
        self._entries = total

    def _valid(self, table: dict[weakref.ref[Tensor], Any]) -> list[tuple[int, Tensor, Any]]:
        # the live entries of one table of the index, as (stamp, tensor, value); the stale ones are dropped
        refs = self._refs
        out, stale = [], []
        for ref, v in table.items():
            stamp = v if type(v) is int else v[0]
            t = ref()
            if t is None or refs.get(ref) != stamp:
                stale.append(ref)
            else:
                out.append((stamp, t, v))
        for ref in stale:
            table.pop(ref, None)
        return out

    def holding(self, nodes: Container[UOp], count: int) -> list[Tensor]:
        """The computed live tensors whose graph is one of `nodes` (`count` of them), oldest stamp first: the index
        walked by graph, or `nodes` looked up in it, whichever is shorter."""
        self._catch_up()
        by_root = self._by_root
        found: list[tuple[int, Tensor, Any]] = []
        if count < len(by_root) and isinstance(nodes, Iterable):
            for n in nodes:
                same = by_root.get(n)
                if same:
                    found += self._valid(same)
        else:
            for key, same in list(by_root._data.items()):
                u = key()
                if u is not None and same and u in nodes:
                    found += self._valid(same)
        found.sort(key=operator.itemgetter(0))
        return [t for _, t, _ in found]

    def pending_assigns(self) -> list[Tensor]:
        """The live tensors that are assigns still to run, oldest stamp first."""
        self._catch_up()
        return [t for _, t, _ in self._valid(self._assigns)]

    def readers_of(self, targets: Sequence[UOp], realizing: Container[int] = ()) -> list[tuple[Tensor, int, bool]]:
        """The computed live tensors whose values read the BUFFERs `targets` as they are now, oldest stamp first: each
        with the bit mask of the targets it reads and whether it also reads a STORE (an assign still to run reads what
        its value reads, and counts as reading a STORE). `realizing`: the ids of the tensors the realize asking
        computes, which are not walked for their reads (the caller looks at them itself): the realize gives each a
        new graph, so a new stamp, or puts back its old graph stamped anew if it fails (`LiveTensors.end`)."""
        self._catch_up()
        unread = self._unread
        if unread and realizing:
            for ref in [r for r in unread if id(r()) in realizing]:
                del unread[ref]
        if unread:
            self._index_reads()
        readers = self._readers
        found: dict[weakref.ref[Tensor], list[Any]] = {}
        for i, b in enumerate(targets):
            table = readers.get(b.seq)
            if not table:
                continue
            for stamp, t, (_, st) in self._valid(table):
                hit = found.get(t._live_ref)
                if hit is None:
                    found[t._live_ref] = [stamp, t, 1 << i, st]
                else:
                    hit[2] |= 1 << i
        return [(t, m, st) for _, t, m, st in sorted(found.values(), key=operator.itemgetter(0))]

    def _index_reads(self) -> None:
        # the buffers each tensor of `_unread` reads, found in one walk of all their graphs (they overlap: the
        # gradients share the forward pass), entered in `_readers`
        pending = self._valid(self._unread)
        self._unread = {}
        roots = []
        for _, t, _ in pending:
            value = _pending_value(t.uop)
            roots.append(t.uop if value is None else value)
        bit: dict[UOp, int] = {}

        def bit_of(u: UOp) -> int:
            # (each buffer read gets the next bit)
            if u.op is not _BUFFER:
                return 0
            b = bit[u] = 1 << len(bit)
            return b

        mask, after_store = read_masks(roots, bit_of)
        seqs = [b.seq for b in bit]
        readers = self._readers
        added = 0
        for (stamp, t, _), r in zip(pending, roots, strict=True):
            m = mask.get(r, 0)
            if not m:
                continue
            st = after_store.get(r, True) or r is not t.uop
            ref = t._live_ref
            i = 0
            while m:
                if m & 1:
                    table = readers.get(seqs[i])
                    if table is None:
                        readers[seqs[i]] = table = {}
                    table[ref] = (stamp, st)
                    added += 1
                m >>= 1
                i += 1
        self._entries += added


def _pending_store(u: UOp) -> UOp | None:
    # the STORE of an assign not yet kernelized that the graph `u` is (a bfloat16 one under its BITCAST)
    if u.op is _BITCAST:
        u = u.src[0]
    return u if u.op is _STORE and not is_kernel_store(u) else None


def _pending_value(u: UOp) -> UOp | None:
    store = _pending_store(u)
    return None if store is None else store.src[1]
