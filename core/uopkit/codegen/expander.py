"""Expand lane ranges (UPCAST/UNROLL): one copy of each op per value of the lanes it depends on.

A lane range of size n becomes the constants 0..n-1. An op whose sources depend on lanes L is copied once per
assignment of L. Ordering-only sources (a loop's init, a load's "after" dependency) are never copied: all their
lane copies are grouped under one NOOP. A program-level REDUCE_AXIS(value, *lanes) combines the copies of
`value` over those lanes (an unrolled reduce, or the accumulators of an upcast reduce axis).

One lane range may be a "vector" lane: its copies become one vector value instead, when the renderer can compute
with vectors. Loads and stores whose lanes hit consecutive addresses become vector loads and stores; the ops the
renderer declares in `vector_ops` run on whole vectors; anything else works lane by lane (GEP / VECTORIZE), except a
select of vectors by a condition on the lanes' own index (a causal mask), whose condition is rebuilt as vector
arithmetic and compares of the lane's constants (`Expander.vector_form`). On a
renderer whose vector accesses need aligned addresses (`RendererCaps.vector_align`), a load or store is a vector
only where its offset without the lane is provably a multiple of the alignment (`known_multiple`); elsewhere its
lanes load and store one by one.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from uopkit.dtype import DType, PtrDType, dtypes
from uopkit.renderer import mask_bytes, vector_alignment
from uopkit.uop.ops import GroupOp, Ops, UOp
from uopkit.uop.symbolic import decompose, simplify

LANE_KINDS = ("upcast", "unroll", "vector")


# which sources of these ops carry values; module constants, as every node asks (and on Python 3.11 every `Ops.X` is
# a lookup through EnumType.__getattr__'s slow hook)
_VALUE_POSITIONS = {
    Ops.RANGE: range(1), Ops.LOAD: range(1), Ops.STORE: range(2), Ops.END: range(1, 2),
    Ops.SINK: range(0), Ops.NOOP: range(0), Ops.BARRIER: range(0),
}  # fmt: skip


def _value_positions(u: UOp) -> range:
    """Which sources carry values (copied per lane); the rest only order the program."""
    ret = _VALUE_POSITIONS.get(u.op)
    return ret if ret is not None else range(len(u.src))


def _sizes(lanes: tuple[UOp, ...]) -> list[int]:
    return [r.src[0].arg for r in lanes]


def _pick(vals: list[Any], lanes: tuple[UOp, ...], assignment: dict[UOp, int]) -> Any:
    # (each lane's size read in the loop: no list of sizes per pick, one pick per source of every copy of every op)
    i = 0
    for r in lanes:
        i = i * r.src[0].arg + assignment[r]
    return vals[i]


def _assignments(lanes: tuple[UOp, ...]) -> list[dict[UOp, int]]:
    return [dict(zip(lanes, combo, strict=True)) for combo in itertools.product(*(range(s) for s in _sizes(lanes)))]


def _moves_with(u: UOp, lane: UOp) -> bool:
    """Whether u's value changes along `lane` (another RANGE's sources only order the program: not its value)."""
    return lane in u.toposort(gate=lambda n: n.op is not Ops.RANGE or n is lane)


def _mask_lanes(dt: Any, widths: frozenset[int]) -> bool:
    # a renderer with comparisons in `vector_ops` gives masks as wide as the lanes compared (-1 true, 0 false: C's
    # vector extensions, OpenCL), for the lane widths it names (see `RendererCaps.vector_mask_bytes`)
    return not isinstance(dt, PtrDType) and dt.scalar != dtypes.bool and dt.scalar.itemsize in widths


# the ops that combine two comparisons' masks into another (with a bool, not NOT's XOR with true: that flips one bit)
_MASK_COMBINES = frozenset({Ops.OR, Ops.AND})
# the ops of a lane's index and the conditions on it that `Expander.vector_form` rebuilds as vectors
_VECTOR_FORM_OPS = frozenset({Ops.ADD, Ops.MUL, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR})
# the vector ops a MAX of vectors is built from where the renderer has no vector MAX (`Expander.build_max`)
_MAX_BY_SELECT = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.OR, Ops.WHERE})


def _term_dict(terms: list[tuple[int, UOp]]) -> dict[UOp, int]:
    merged: dict[UOp, int] = {}
    for coef, t in terms:
        merged[t] = merged.get(t, 0) + coef
    return {t: c for t, c in merged.items() if c}


class Expander:
    """Per node: (scalar lanes it depends on, one value per assignment of them). With a vector lane, a value is a
    UOp (the same in every vector lane, or a vector) or a tuple with one scalar UOp per vector lane."""

    def __init__(
        self,
        vector_ops: frozenset[Ops],
        vector_align: int = 0,
        vector_casts: frozenset[tuple[DType, DType]] = frozenset(),
        mask_widths: frozenset[int] = frozenset({4}),
    ) -> None:
        self.vector_ops = vector_ops
        self.mask_widths = mask_widths
        self.vector_casts = vector_casts
        self.vector_align = vector_align
        self.vector: UOp | None = None
        self.memo: dict[UOp, tuple[tuple[UOp, ...], list[Any]]] = {}
        # symbolic simplification results, shared by every offset this kernel compares
        self.simplified: dict[UOp, UOp] = {}
        self.consecutive: dict[UOp, bool] = {}
        self.aligned: dict[UOp, bool] = {}
        # the assignment of the scalar lanes that `build` builds a copy for, and `vector_form`'s results by node and
        # assignment of the node's lanes
        self.assignment: dict[UOp, int] = {}
        self.vector_forms: dict[tuple[UOp, tuple[int, ...]], Any] = {}

    @property
    def width(self) -> int:
        assert self.vector is not None
        return self.vector.src[0].arg

    # --- the three forms of a value

    def is_vec(self, v: Any) -> bool:
        # a vector of the vector lane (other vector values, say a WMMA's fragments, are ordinary values here)
        return (
            self.vector is not None
            and isinstance(v, UOp)
            and v.dtype.count == self.width
            and not isinstance(v.dtype, PtrDType)
        )

    def varies(self, v: Any) -> bool:
        return isinstance(v, tuple) or self.is_vec(v)

    def spread(self, v: Any) -> tuple[UOp, ...]:
        if isinstance(v, tuple):
            return v
        if self.is_vec(v):
            return tuple(UOp(Ops.GEP, v.dtype.scalar, (v,), (i,)) for i in range(self.width))
        return (v,) * self.width

    def as_vec(self, v: Any) -> UOp:
        if self.is_vec(v):
            return v
        items = self.spread(v)
        first = items[0]
        if first.op is Ops.GEP and all(
            x.op is Ops.GEP and x.src[0] is first.src[0] and x.arg == (i,) for i, x in enumerate(items)
        ):
            return first.src[0]
        return UOp(Ops.VECTORIZE, first.dtype.vec(self.width), items)

    def group(self, vals: list[Any]) -> UOp:
        flat: list[UOp] = []
        for v in vals:
            flat.extend(v if isinstance(v, tuple) else (v,))
        flat = list(dict.fromkeys(flat))
        return flat[0] if len(flat) == 1 else UOp(Ops.NOOP, dtypes.void, tuple(flat))

    # --- walking the graph

    def expand(self, sink: UOp) -> UOp:
        # (one walk of the graph for both loops)
        topo = sink.toposort()
        for u in topo:
            if u.op is Ops.RANGE and u.arg[1] == "vector" and self.vector_ops:
                if self.vector is not None and self.vector is not u:
                    raise AssertionError("one vector lane per kernel")
                self.vector = u
        for u in topo:
            self.memo[u] = self.expand_one(u)
        return self.memo[sink][1][0]

    def expand_one(self, u: UOp) -> tuple[tuple[UOp, ...], list[Any]]:
        if u.op is Ops.RANGE and u.arg[1] in LANE_KINDS:
            consts = [UOp.const(u.dtype, i) for i in range(u.src[0].arg)]
            if u is self.vector:
                return (), [tuple(consts)]
            return (u,), consts
        if u.op is Ops.REDUCE_AXIS:
            return self.expand_reduce(u)
        value_pos = _value_positions(u)
        lanes = tuple(sorted({r for i in value_pos for r in self.memo[u.src[i]][0]}, key=lambda r: r.arg[0]))
        # ordering sources collapse to one node whatever their lanes
        deps = {i: self.group(self.memo[s][1]) for i, s in enumerate(u.src) if i not in value_pos}
        if not lanes:
            # (most ops depend on no lane: one copy, each value source's only value; what the loop below does for the
            # one empty assignment, without building the assignments and picking by them)
            self.assignment = {}
            src = [self.memo[s][1][0] if i in value_pos else deps[i] for i, s in enumerate(u.src)]
            return lanes, [self.build(u, src)]
        out = []
        for assignment in _assignments(lanes):
            self.assignment = assignment
            src = [
                _pick(self.memo[s][1], self.memo[s][0], assignment) if i in value_pos else deps[i]
                for i, s in enumerate(u.src)
            ]
            out.append(self.build(u, src))
        return lanes, out

    def build(self, u: UOp, src: list[Any]) -> Any:
        if not any(self.varies(s) for s in src):
            return u if tuple(src) == u.src else u.replace(src=tuple(src))
        # comparisons of vectors the renderer runs whole give a mask vector, which WHERE selects lanes by (when a
        # source is a vector already: lanes computed one by one stay so)
        widths = self.mask_widths
        if u.op in GroupOp.Comparison and u.op in self.vector_ops and _mask_lanes(u.src[0].dtype, widths):
            if any(self.is_vec(s) for s in src):
                return UOp(u.op, u.dtype.vec(self.width), tuple(self.as_vec(s) for s in src), u.arg)
        if u.op is Ops.WHERE and u.op in self.vector_ops and _mask_lanes(u.dtype, widths):
            cond = src[0]
            # a mask from a vector comparison of lanes as wide as the values, or one condition for every lane (C's ?:
            # takes a scalar one)
            mask = self.is_vec(cond) and mask_bytes(cond) == u.dtype.scalar.itemsize
            if isinstance(cond, tuple) and any(self.is_vec(s) for s in src[1:]):
                # a condition on the lane's index (attention's causal mask, col <= row), which expanding left lane by
                # lane: rebuilt as one vector compare, not a scalar compare and select per lane (the attention scores'
                # 16x4x4 tile of a small transformer's training step: 51 -> 19 KB of C, gcc 0.5 -> 0.12 s of CPU)
                rebuilt = self.vector_form(u.src[0])
                if self.is_vec(rebuilt) and mask_bytes(rebuilt) == u.dtype.scalar.itemsize:
                    cond, mask = rebuilt, True
            if any(self.is_vec(s) for s in src) and (mask or (isinstance(cond, UOp) and cond.dtype.count == 1)):
                return UOp(Ops.WHERE, u.dtype.vec(self.width), (cond, self.as_vec(src[1]), self.as_vec(src[2])))
        if u.op is Ops.MAX and self._max_by_select(u) and self._vector_sources(src):
            return self.build_max(u, src)
        if u.op in _MASK_COMBINES and u.op in self.vector_ops and all(self.is_vec(s) for s in src):
            # two masks of one width combined bit by bit are a mask (-1 and 0 lanes stay so): x <= 0 is
            # (x < 0) | (x == 0)
            if all(s.dtype.scalar == dtypes.bool for s in src) and len({mask_bytes(s) for s in src}) == 1:
                return UOp(u.op, u.dtype.vec(self.width), tuple(src))
        # other bool vectors have no common layout (C vector extensions have none at all): bools stay lane by lane
        stored = (src[1][0] if isinstance(src[1], tuple) else src[1]) if u.op is Ops.STORE else None
        vector_ok = u.dtype.scalar != dtypes.bool and not (stored is not None and stored.dtype.scalar == dtypes.bool)
        if not vector_ok:
            return self.lane_by_lane(u, src)
        if u.op is Ops.LOAD:
            return self.build_load(u, src)
        if u.op is Ops.STORE:
            return self.build_store(u, src)
        if u.op is Ops.CAST and (u.src[0].dtype, u.dtype) in self.vector_casts and self.is_vec(src[0]):
            return UOp(Ops.CAST, u.dtype.vec(self.width), (src[0],))
        if u.op in self.vector_ops and u.op is not Ops.WHERE and self._vector_sources(src):
            return UOp(u.op, u.dtype.vec(self.width), tuple(self.as_vec(s) for s in src), u.arg)
        return self.lane_by_lane(u, src)

    def vector_form(self, node: UOp) -> Any:
        """`node`'s value for the current assignment of the scalar lanes as one vector of the vector lane (or a scalar,
        the same in every lane), built from the vector lane's constants up through integer adds and multiplies,
        comparisons, their AND/OR, selects by them and casts to bool; None where something on the way has no vector
        form (a load, an op the renderer has no vector of, lanes wider than its masks)."""
        lanes, vals = self.memo[node]
        key = (node, tuple(self.assignment[r] for r in lanes))
        if key in self.vector_forms:
            return self.vector_forms[key]
        v = _pick(vals, lanes, self.assignment)
        ret: Any = None
        if not self.varies(v) or self.is_vec(v):
            ret = v
        elif node is self.vector:
            ret = UOp(Ops.VECTORIZE, node.dtype.vec(self.width), v)
        elif node.op in _VECTOR_FORM_OPS and node.op in self.vector_ops and node.dtype.scalar != dtypes.bool:
            ret = self._vector_alu(node)
        elif node.op in _VECTOR_FORM_OPS and node.op in self.vector_ops:
            ret = self._vector_mask(node)
        elif node.op is Ops.WHERE and node.op in self.vector_ops and _mask_lanes(node.dtype, self.mask_widths):
            ret = self._vector_where(node)
        elif node.op is Ops.CAST and node.dtype == dtypes.bool and Ops.CMPNE in self.vector_ops:
            # x != 0, as a mask of x's lanes
            x = self.vector_form(node.src[0])
            if self.is_vec(x) and _mask_lanes(x.dtype, self.mask_widths):
                ret = UOp(Ops.CMPNE, dtypes.bool.vec(self.width), (x, self.as_vec(UOp.const(x.dtype.scalar, 0))))
        self.vector_forms[key] = ret
        return ret

    def _vector_alu(self, node: UOp) -> UOp | None:
        # integer arithmetic of a lane's index, lanes as wide as a mask can be
        if not dtypes.is_int(node.dtype.scalar) or node.dtype.scalar.itemsize not in self.mask_widths:
            return None
        srcs = [self.vector_form(s) for s in node.src]
        if any(s is None for s in srcs):
            return None
        return UOp(node.op, node.dtype.vec(self.width), tuple(self.as_vec(s) for s in srcs), node.arg)

    def _vector_where(self, node: UOp) -> UOp | None:
        # a select of two values by a mask of their width (a bool mask turned into 1.0 and 0.0)
        cond, a, b = (self.vector_form(s) for s in node.src)
        if not self.is_vec(cond) or mask_bytes(cond) != node.dtype.scalar.itemsize or a is None or b is None:
            return None
        return UOp(Ops.WHERE, node.dtype.vec(self.width), (cond, self.as_vec(a), self.as_vec(b)))

    def _vector_mask(self, node: UOp) -> UOp | None:
        srcs = [self.vector_form(s) for s in node.src]
        if any(s is None for s in srcs):
            return None
        if node.op in GroupOp.Comparison:
            if not _mask_lanes(node.src[0].dtype, self.mask_widths):
                return None
            return UOp(node.op, node.dtype.vec(self.width), tuple(self.as_vec(s) for s in srcs), node.arg)
        # AND/OR of two masks of one width
        if not all(self.is_vec(s) for s in srcs) or len({mask_bytes(s) for s in srcs}) != 1:
            return None
        return UOp(node.op, node.dtype.vec(self.width), tuple(srcs), node.arg)

    def _vector_sources(self, src: list[Any]) -> bool:
        # whether an op over `src` can run on vectors of the vector lane: one source is one, the others are too or are
        # scalars (a source with lanes of another count, a WMMA's fragment, is not)
        if not all(not isinstance(s, UOp) or s.dtype.count == 1 or self.is_vec(s) for s in src):
            return False
        return any(self.is_vec(s) for s in src)

    def _max_by_select(self, u: UOp) -> bool:
        # a renderer without a vector MAX but with vector compares and selects: MAX of vectors is a compare and a
        # select (lane by lane, a max over a reduce's upcast columns, `x.amax(0)`, was a scalar compare per lane: 1,300
        # lines of C for one kernel, 8 s in gcc and 20x slower than sum(0))
        has_select = _MAX_BY_SELECT <= self.vector_ops
        return Ops.MAX not in self.vector_ops and has_select and _mask_lanes(u.dtype, self.mask_widths)

    def build_max(self, u: UOp, src: list[Any]) -> UOp:
        """MAX of vectors as `where(b < a or a != a, a, b)`: a NaN in either operand gives NaN, as the scalar MAX."""
        a, b = self.as_vec(src[0]), self.as_vec(src[1])
        mask = dtypes.bool.vec(self.width)
        take_a = UOp(Ops.CMPLT, mask, (b, a))
        if dtypes.is_float(u.dtype):
            take_a = UOp(Ops.OR, mask, (take_a, UOp(Ops.CMPNE, mask, (a, a))))
        return UOp(Ops.WHERE, u.dtype.vec(self.width), (take_a, a, b))

    def lane_by_lane(self, u: UOp, src: list[Any]) -> tuple[UOp, ...]:
        spreads = [self.spread(s) if self.varies(s) else None for s in src]
        op, dtype, arg = u.op, u.dtype, u.arg
        return tuple(
            [
                UOp(op, dtype, tuple([sp[i] if sp is not None else s for s, sp in zip(src, spreads, strict=True)]), arg)
                for i in range(self.width)
            ]
        )

    def _consecutive(self, index: UOp) -> bool:
        """Whether the vector lane's copies of `index` (an INDEX before expansion) address consecutive elements:
        its offset simplifies to `lane + (terms without the lane)`, and its gate doesn't depend on the lane."""
        if index.op is not Ops.INDEX:
            return False
        if index in self.consecutive:
            return self.consecutive[index]
        vector = self.vector
        gate_ok = all(self._uniform_gate(g) for g in index.src[2:])
        ok = False
        if gate_ok:
            terms, _ = decompose(simplify(index.src[1], self.simplified))
            merged = _term_dict(terms)
            ok = merged.get(vector) == 1 and all(t is vector or not _moves_with(t, vector) for t in merged)
        self.consecutive[index] = ok
        return ok

    def _uniform_gate(self, gate: UOp) -> bool:
        """Whether a gate has the same value in every lane of the vector: it doesn't depend on the lane, or it is
        `rest + lane < n` (an axis padded to whole work-groups) with `rest` and `n` multiples of the width, which
        holds exactly when `rest < n`, lane 0's gate. (ANDs of such gates too.)"""
        vector = self.vector
        if not _moves_with(gate, vector):
            return True
        if gate.op is Ops.AND:
            return all(self._uniform_gate(g) for g in gate.src)
        if not (gate.op is Ops.CMPLT and gate.src[1].op is Ops.CONST and dtypes.is_int(gate.src[0].dtype)):
            return False
        terms, const = decompose(simplify(gate.src[0], self.simplified))
        merged = _term_dict(terms)
        if merged.get(vector) != 1 or any(t is not vector and _moves_with(t, vector) for t in merged):
            return False
        multiple = math.gcd(const, *(c * known_multiple(t) for t, c in merged.items() if t is not vector))
        return multiple % self.width == 0 and gate.src[1].arg % self.width == 0

    def _aligned(self, index: UOp) -> bool:
        """Whether a vector access through `index` (consecutive along the lane) is aligned as the renderer needs, for
        every value of every other term: the offset without the lane is a multiple of the alignment in elements."""
        if index in self.aligned:
            return self.aligned[index]
        itemsize = index.src[0].dtype.base.itemsize
        need = vector_alignment(self.vector_align, self.width * itemsize)
        ok = True
        if need > itemsize:
            if need % itemsize:
                ok = False
            else:
                terms, const = decompose(simplify(index.src[1], self.simplified))
                rest = [(t, c) for t, c in _term_dict(terms).items() if t is not self.vector]
                multiple = math.gcd(const, *(c * known_multiple(t) for t, c in rest))
                ok = multiple % (need // itemsize) == 0
        self.aligned[index] = ok
        return ok

    def _vector_access(self, index: UOp) -> bool:
        return self._consecutive(index) and (self.vector_align <= 0 or self._aligned(index))

    def build_load(self, u: UOp, src: list[Any]) -> Any:
        index = src[0]
        if isinstance(index, tuple) and self._vector_access(u.src[0]) and not isinstance(u.dtype, PtrDType):
            return UOp(Ops.LOAD, u.dtype.vec(self.width), (index[0], *src[1:]))
        indexes = self.spread(index)
        return tuple(u.replace(src=(indexes[i], *src[1:])) for i in range(self.width))

    def build_store(self, u: UOp, src: list[Any]) -> Any:
        index, value = src[0], src[1]
        rest = tuple(s for s in src[2:])
        if isinstance(index, tuple) and self._vector_access(u.src[0]):
            return u.replace(src=(index[0], self.as_vec(value), *rest))
        indexes, values = self.spread(index), self.spread(value)
        return tuple(u.replace(src=(indexes[i], values[i], *rest)) for i in range(self.width))

    def expand_reduce(self, u: UOp) -> tuple[tuple[UOp, ...], list[Any]]:
        value_lanes, values = self.memo[u.src[0]]
        reduce_lanes = set(u.src[1:])
        keep = tuple(r for r in value_lanes if r not in reduce_lanes)
        gone = tuple(r for r in value_lanes if r in reduce_lanes)
        over_vector = self.vector is not None and self.vector in reduce_lanes
        out = []
        for kept in _assignments(keep):
            acc: Any = None
            for dropped in _assignments(gone):
                v = _pick(values, value_lanes, {**kept, **dropped})
                acc = v if acc is None else self.build(UOp(u.arg, u.dtype, (u.src[0], u.src[0])), [acc, v])
            assert acc is not None
            if over_vector and self.varies(acc):
                # a horizontal reduce of the vector's lanes
                items = self.spread(acc)
                total = items[0]
                for x in items[1:]:
                    total = total.alu(u.arg, x)
                acc = total
            out.append(acc)
        if math.prod(_sizes(keep)) != len(out):
            raise AssertionError("lane bookkeeping went wrong")
        return keep, out


def expand(
    sink: UOp,
    vector_ops: frozenset[Ops] = frozenset(),
    vector_align: int = 0,
    simplified: dict[UOp, UOp] | None = None,
    vector_casts: frozenset[tuple[DType, DType]] = frozenset(),
    mask_widths: frozenset[int] = frozenset({4}),
) -> UOp:
    """Replace lane ranges by copies (and vectors, for the ops in `vector_ops` and the casts in `vector_casts`;
    comparisons and WHERE on lanes of the `mask_widths` sizes, see `RendererCaps.vector_mask_bytes`; vector accesses
    only where aligned to `vector_align`, see `RendererCaps.vector_align`). `simplified`: a `simplify` cache to share
    (the caller's symbolic rewrites of the same graph)."""
    expander = Expander(vector_ops, vector_align, vector_casts, mask_widths)
    if simplified is not None:
        expander.simplified = simplified
    return expander.expand(sink)


def known_multiple(x: UOp) -> int:
    """A positive integer that provably divides every value of the integer expression `x` (0: x is always 0); 1 when
    nothing better is known. Sums take the gcd, products multiply, x % c keeps gcd(multiple of x, c)."""
    if x.op is Ops.CONST and isinstance(x.arg, int):
        return abs(x.arg)
    if x.op in (Ops.ADD, Ops.SUB):
        return math.gcd(known_multiple(x.src[0]), known_multiple(x.src[1]))
    if x.op is Ops.MUL:
        return known_multiple(x.src[0]) * known_multiple(x.src[1])
    if x.op is Ops.NEG:
        return known_multiple(x.src[0])
    if x.op is Ops.SHL and x.src[1].op is Ops.CONST and isinstance(x.src[1].arg, int) and 0 <= x.src[1].arg < 63:
        return known_multiple(x.src[0]) << x.src[1].arg
    if x.op is Ops.CAST and dtypes.is_int(x.dtype) and dtypes.is_int(x.src[0].dtype):
        # an integer cast wraps modulo 2**bits at most: powers of two up to that survive it
        return math.gcd(known_multiple(x.src[0]), 1 << (8 * x.dtype.itemsize))
    if x.op is Ops.MOD and x.src[1].op is Ops.CONST and isinstance(x.src[1].arg, int):
        # x % c = x - c * (x / c): both terms are multiples of gcd(multiple of x, c)
        return math.gcd(known_multiple(x.src[0]), x.src[1].arg)
    return 1


__all__ = ["expand", "Expander", "GroupOp", "known_multiple"]
