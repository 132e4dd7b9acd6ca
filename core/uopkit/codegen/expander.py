"""Expand lane ranges (UPCAST/UNROLL): one copy of each op per value of the lanes it depends on.

A lane range of size n becomes the constants 0..n-1. An op whose sources depend on lanes L is copied once per
assignment of L. Ordering-only sources (a loop's init, a load's "after" dependency) are never copied: all their
lane copies are grouped under one NOOP. A program-level REDUCE_AXIS(value, *lanes) combines the copies of
`value` over those lanes (an unrolled reduce, or the accumulators of an upcast reduce axis).
"""

from __future__ import annotations

import itertools
import math

from uopkit.dtype import dtypes
from uopkit.uop.ops import Ops, UOp

LANE_KINDS = ("upcast", "unroll")
Expanded = tuple[tuple[UOp, ...], list[UOp]]


def _value_positions(u: UOp) -> range:
    """Which sources carry values (copied per lane); the rest only order the program."""
    if u.op in (Ops.RANGE, Ops.LOAD):
        return range(1)
    if u.op is Ops.STORE:
        return range(2)
    if u.op is Ops.END:
        return range(1, 2)
    if u.op in (Ops.SINK, Ops.NOOP, Ops.BARRIER):
        return range(0)
    return range(len(u.src))


def _sizes(lanes: tuple[UOp, ...]) -> list[int]:
    return [r.src[0].arg for r in lanes]


def _pick(vals: list[UOp], lanes: tuple[UOp, ...], assignment: dict[UOp, int]) -> UOp:
    i = 0
    for r, size in zip(lanes, _sizes(lanes), strict=True):
        i = i * size + assignment[r]
    return vals[i]


def _assignments(lanes: tuple[UOp, ...]) -> list[dict[UOp, int]]:
    return [dict(zip(lanes, combo, strict=True)) for combo in itertools.product(*(range(s) for s in _sizes(lanes)))]


def _group(vals: list[UOp]) -> UOp:
    return vals[0] if len(vals) == 1 else UOp(Ops.NOOP, dtypes.void, tuple(vals))


def expand(sink: UOp) -> UOp:
    memo: dict[UOp, Expanded] = {}
    for u in sink.toposort():
        memo[u] = _expand_one(u, memo)
    return memo[sink][1][0]


def _expand_one(u: UOp, memo: dict[UOp, Expanded]) -> Expanded:
    if u.op is Ops.RANGE and u.arg[1] in LANE_KINDS:
        return (u,), [UOp.const(dtypes.index, i) for i in range(u.src[0].arg)]
    if u.op is Ops.REDUCE_AXIS:
        return _expand_reduce(u, memo)
    value_pos = _value_positions(u)
    lanes = tuple(sorted({r for i in value_pos for r in memo[u.src[i]][0]}, key=lambda r: r.arg[0]))
    # ordering sources collapse to one node whatever their lanes
    deps = {i: _group(memo[s][1]) for i, s in enumerate(u.src) if i not in value_pos}
    out = []
    for assignment in _assignments(lanes):
        src = tuple(
            _pick(memo[s][1], memo[s][0], assignment) if i in value_pos else deps[i] for i, s in enumerate(u.src)
        )
        out.append(u if src == u.src else u.replace(src=src))
    return lanes, out


def _expand_reduce(u: UOp, memo: dict[UOp, Expanded]) -> Expanded:
    value_lanes, values = memo[u.src[0]]
    reduce_lanes = set(u.src[1:])
    keep = tuple(r for r in value_lanes if r not in reduce_lanes)
    gone = tuple(r for r in value_lanes if r in reduce_lanes)
    out = []
    for kept in _assignments(keep):
        acc: UOp | None = None
        for dropped in _assignments(gone):
            v = _pick(values, value_lanes, {**kept, **dropped})
            acc = v if acc is None else acc.alu(u.arg, v)
        assert acc is not None
        out.append(acc)
    if math.prod(_sizes(keep)) != len(out):
        raise AssertionError("lane bookkeeping went wrong")
    return keep, out
