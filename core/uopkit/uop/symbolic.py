"""Symbolic simplification as rewrite rules: constant folding, identities, like terms, div/mod over known ranges."""

from __future__ import annotations

import math
from typing import Any

from uopkit.dtype import PtrDType, dtypes
from uopkit.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, exec_alu

INT_DTYPES = (*dtypes.ints, dtypes.bool)
# the ops the sum and folding rules test for, as module constants: on Python 3.11 every `Ops.X` is a lookup through
# EnumType.__getattr__'s slow hook (~0.17 us), and these rules look at every integer node of every kernel
_CONST, _CAST, _ADD, _MUL, _IDIV, _MOD = Ops.CONST, Ops.CAST, Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD


def _is_int(x: UOp) -> bool:
    return dtypes.is_int(x.dtype) and x.dtype.count == 1


# ---------------------------------------------------------------------------------------------------------------------
# constant folding


def do_fold_constants(x: UOp) -> UOp | None:
    # (a loop, not all() over a generator: tried on every ALU node of every kernel, and most have a source that is no
    # constant, the first one often)
    if x.dtype.count != 1:
        return None
    for s in x.src:
        if s.op is not _CONST or isinstance(s.arg, tuple):
            return None
    if x.op is _CAST:
        return UOp.const(x.dtype, x.src[0].arg)
    if x.op not in GroupOp.ALU:
        return None
    return UOp.const(x.dtype, exec_alu(x.op, x.dtype, [s.arg for s in x.src]))


def do_fold_known_range(x: UOp) -> UOp | None:
    # an integer or bool value whose range analysis says it can take one value only
    if x.dtype.count != 1 or x.dtype.scalar not in INT_DTYPES:
        return None
    if x.vmin == x.vmax:
        return UOp.const(x.dtype, x.vmin)
    return None


# ---------------------------------------------------------------------------------------------------------------------
# sums of terms: decompose an integer expression into coefficient * term + constant


def decompose(x: UOp) -> tuple[list[tuple[int, UOp]], int]:
    """Split `x` into [(coefficient, term)] and a constant, through ADD and multiplication by constants."""
    terms, const = _decompose(x)
    return list(terms), const


def _decompose(x: UOp) -> tuple[tuple[tuple[int, UOp], ...], int]:
    # remembered on the node (it depends on the node alone, and the rules ask for the same sums again and again)
    ret = x.__dict__.get("_decomposed")
    if ret is not None:
        return ret  # type: ignore[no-any-return]
    if x.op is _CONST:
        ret = (), x.arg
    elif x.op is _ADD:
        ta, ca = _decompose(x.src[0])
        tb, cb = _decompose(x.src[1])
        ret = ta + tb, ca + cb
    elif x.op is _MUL and x.src[1].op is _CONST:
        terms, c = _decompose(x.src[0])
        k = x.src[1].arg
        ret = tuple([(coef * k, t) for coef, t in terms]), c * k
    else:
        ret = ((1, x),), 0
    x.__dict__["_decomposed"] = ret
    return ret


def exact_sum(x: UOp) -> bool:
    """Whether `x`'s sum of terms holds its true value in x's dtype for every value of its terms: the exact sum of
    coef * term + const stays in the dtype's range. The rules below reason about sums as about integers; a sum that
    can wrap around (uint8 `img + 100`, an int32 hash `c * 805459861`) is only equal to its wrapped value, and
    `(img + 100) < 50` or `(img * 2) // 2` must see the wrapped one. (Partial sums may wrap: two's complement + and *
    are exact modulo 2**bits, so a sum whose exact value fits comes out right.)"""
    terms, const = _decompose(x)
    lo = hi = const
    for coef, t in terms:
        a, b = coef * t.vmin, coef * t.vmax
        lo, hi = lo + min(a, b), hi + max(a, b)
    return dtypes.min(x.dtype) <= lo and hi <= dtypes.max(x.dtype)


def build_sum(terms: list[tuple[int, UOp]], const: int, like: UOp) -> UOp:
    """The canonical expression for sum(coef*term) + const: like terms merged, constant last."""
    merged: dict[UOp, int] = {}
    for coef, t in terms:
        merged[t] = merged.get(t, 0) + coef
    ret: UOp | None = None
    for t, coef in sorted(merged.items(), key=lambda kv: kv[0].tuplize):
        if coef == 0:
            continue
        part = t if coef == 1 else UOp(_MUL, like.dtype, (t, like.const_like(coef)))
        ret = part if ret is None else UOp(_ADD, like.dtype, (ret, part))
    if ret is None:
        return like.const_like(const)
    return ret if const == 0 else UOp(_ADD, like.dtype, (ret, like.const_like(const)))


def _join_div_mod(merged: dict[UOp, int]) -> bool:
    """Join the quotient and remainder terms of one division in a sum (`merged`: term -> coefficient, changed in
    place): (x // c) * c*k + (x % c) * k is x * k, and ((x // c) % d) * c*k + (x % c) * k is (x % (c*d)) * k: a
    view's index flattened again after a reshape split it. (Both hold for every sign of x: C's division and
    remainder truncate toward 0, so each side of x < 0 is minus its side of -x.) Whether anything was joined."""
    joined = False
    while True:
        # (x, c) -> a term that is x // c, or (x // c) % d
        quotients: dict[tuple[UOp, int], UOp] = {}
        for t in merged:
            if t.op is _IDIV and t.src[1].op is _CONST:
                quotients[(t.src[0], t.src[1].arg)] = t
            elif t.op is _MOD and t.src[1].op is _CONST and t.src[1].arg > 0 and t.src[0].op is _IDIV:
                if t.src[0].src[1].op is _CONST:
                    quotients[(t.src[0].src[0], t.src[0].src[1].arg)] = t
        pair = None
        for rem, k in merged.items():
            if rem.op is _MOD and rem.src[1].op is _CONST and rem.src[1].arg > 0:
                quotient = quotients.get((rem.src[0], rem.src[1].arg))
                if quotient is not None and quotient is not rem and merged[quotient] == k * rem.src[1].arg:
                    pair = rem, quotient
                    break
        if pair is None:
            return joined
        rem, quotient = pair
        x, k = rem.src[0], merged[rem]
        whole = x if quotient.op is _IDIV else x % (rem.src[1].arg * quotient.src[1].arg)
        del merged[rem], merged[quotient]
        merged[whole] = merged.get(whole, 0) + k
        joined = True


def do_combine_terms(x: UOp) -> UOp | None:
    # only rebuild when it simplifies: repeated terms, several constants, or a division's quotient and remainder
    if not _is_int(x):
        return None
    terms, const = decompose(x)
    if any(t.op is _MOD for _, t in terms):
        merged: dict[UOp, int] = {}
        for coef, t in terms:
            merged[t] = merged.get(t, 0) + coef
        if _join_div_mod(merged):
            return build_sum([(c, t) for t, c in merged.items()], const, x)
    n_consts = _count_consts(x)
    if len({t for _, t in terms}) == len(terms) and n_consts <= 1 and not (n_consts == 1 and const == 0):
        return None
    ret = build_sum(terms, const, x)
    return None if ret is x else ret


def _count_consts(x: UOp) -> int:
    if x.op is _CONST:
        return 1
    if x.op is _ADD:
        return _count_consts(x.src[0]) + _count_consts(x.src[1])
    return 0


# ---------------------------------------------------------------------------------------------------------------------
# division and modulo by a positive constant, using the ranges of the terms


def do_fold_divmod(x: UOp, d: UOp, op: UOp) -> UOp | None:
    if not _is_int(x) or d.arg <= 0:
        return None
    div = d.arg
    # C semantics (truncation): |x| < d leaves x % d == x and x // d == 0, whatever the sign
    if -div < x.vmin and x.vmax < div:
        return x if op.op is Ops.MOD else x.const_like(0)
    if x.vmin < 0 or not exact_sum(x):
        return None
    terms, const = decompose(x)
    # a common factor of every coefficient, the constant and the divisor cancels
    g = math.gcd(div, const, *(c for c, _ in terms))
    if g > 1 and all(c % g == 0 for c, _ in terms):
        inner = build_sum([(c // g, t) for c, t in terms], const // g, x)
        if inner.vmin >= 0:
            if op.op is Ops.IDIV:
                return inner // (div // g)
            return (inner % (div // g)) * g
    # the terms whose coefficients share a factor g with the divisor, plus a remainder in [0, g): the remainder can't
    # carry into the quotient ((n*2048 + r) // 65536 == n // 32 for 0 <= r < 2048). The remainder's terms may have
    # negative coefficients: a flipped axis reads (k-1-j), (9*c + 8 - 3*kh - kw) % 9 is 8 - 3*kh - kw
    for g in sorted({math.gcd(div, c) for c, _ in terms}, reverse=True):
        big = [(c // g, t) for c, t in terms if c % g == 0]
        if g == 1 or not big or (len(big) == len(terms) and g != div):
            continue
        small = build_sum([(c, t) for c, t in terms if c % g], const, x)
        if not 0 <= small.vmin <= small.vmax < g:
            continue
        inner = build_sum(big, 0, x)
        if inner.vmin < 0 or not exact_sum(inner):
            continue
        if g == div:
            return inner if op.op is Ops.IDIV else small
        return inner // (div // g) if op.op is Ops.IDIV else (inner % (div // g)) * g + small
    if any(c < 0 or t.vmin < 0 for c, t in terms):
        return None
    # every term is non-negative: split each coefficient c = q*d + r; the q parts leave the division exactly
    quotient: list[tuple[int, UOp]] = []
    rest: list[tuple[int, UOp]] = []
    for coef, t in terms:
        q, r = divmod(coef, div)
        if q:
            quotient.append((q, t))
        if r:
            rest.append((r, t))
    q0, r0 = divmod(const, div)
    remaining = build_sum(rest, r0, x)
    # nothing changed and the remainder is not known to be small: no progress
    if remaining is x or (not quotient and q0 == 0 and remaining.vmax >= div and remaining is x):
        return None
    if op.op is Ops.MOD:
        return remaining if remaining.vmax < div else remaining % div
    out = build_sum(quotient, q0, x)
    return out if remaining.vmax < div else out + remaining // div


def do_nested_div(x: UOp, a: UOp, b: UOp) -> UOp | None:
    # (x//a)//b == x//(a*b) for x >= 0, a, b > 0
    if x.vmin < 0 or a.arg <= 0 or b.arg <= 0:
        return None
    return x // (a.arg * b.arg)


def do_nested_mod(x: UOp, m: UOp, n: UOp) -> UOp | None:
    # (x % m) % n == x % n when n divides m (x >= 0)
    if x.vmin < 0 or n.arg <= 0 or m.arg % n.arg != 0:
        return None
    return x % n.arg


def do_mod_then_div(x: UOp, m: UOp, a: UOp) -> UOp | None:
    # (x % (a*k)) // a == (x // a) % k for x >= 0
    if x.vmin < 0 or a.arg <= 0 or m.arg % a.arg != 0:
        return None
    return (x // a.arg) % (m.arg // a.arg)


def do_lt_const(x: UOp, c: UOp) -> UOp | None:
    # move constants out of the left side: (x + k) < c  ->  x < c - k
    if not _is_int(x) or not exact_sum(x):
        return None
    terms, const = decompose(x)
    if const == 0 and x.op is not Ops.MUL:
        return None
    if len(terms) == 1 and terms[0][0] > 0:
        coef, t = terms[0]
        # coef*t + const < c  <=>  t < ceil((c - const) / coef)
        bound = -((const - c.arg) // coef)
        if const == 0 and coef == 1:
            return None
        return t.lt(bound)
    if const == 0:
        return None
    return build_sum(terms, 0, x).lt(c.arg - const)


def _times(c1: UOp, c2: UOp) -> Any:
    return exec_alu(Ops.MUL, c1.dtype, [c1.arg, c2.arg])


def do_canonical_const_right(x: UOp) -> UOp | None:
    if x.src[0].op is Ops.CONST and x.src[1].op is not Ops.CONST:
        return x.replace(src=(x.src[1], x.src[0]))
    return None


def _as_bool_const(x: Any) -> bool | None:
    return bool(x) if isinstance(x, (bool, int)) else None


# ---------------------------------------------------------------------------------------------------------------------
# conditions and selects: a padded view's reads come out as a load gated by every padding condition, inside a
# where(c, ., 0) per padding level; the load already gives 0 where its gate is false


def conjuncts(x: UOp) -> list[UOp]:
    """The conditions a bool AND chain requires (x itself when it is no AND)."""
    if x.op is Ops.AND and x.dtype == dtypes.bool:
        return [c for s in x.src for c in conjuncts(s)]
    return [x]


def put_in_place(u: UOp, old: UOp, new: UOp) -> UOp:
    """`u` with node `old` replaced by `new`, which is not walked (`substitute`'s rewrite walks what it puts in: a
    gather's index, a binary search's chain of the loads before it, was walked again for each of its gathers)."""
    done: dict[UOp, UOp] = {old: new}
    # (sources first: no recursion, whatever the depth)
    for n in u.toposort():
        if n is not old:
            src = tuple([done.get(s, s) for s in n.src])
            if any(a is not b for a, b in zip(src, n.src, strict=True)):
                done[n] = n.replace(src=src)
    return done.get(u, u)


def _is_plus_zero(x: UOp) -> bool:
    # +0 only: a gated load gives +0, and where(c, x, -0.0) differs from it where c is false (1/x, say)
    return x.op is Ops.CONST and not isinstance(x.arg, tuple) and x.arg == 0 and math.copysign(1.0, x.arg) > 0


def do_where_const_cond(c: UOp, a: UOp, b: UOp) -> UOp | None:
    if isinstance(c.arg, tuple):
        return None
    return a if c.arg else b


def do_where_of_zero_outside(c: UOp, x: UOp, zero: UOp) -> UOp | None:
    # where(c, x, 0) is x when x is already +0 wherever c is false: a load gated by c (and maybe more), or an inner
    # where(c2, ., +0) whose condition requires c; two nested where(., ., 0) merge into one over both conditions
    if not _is_plus_zero(zero) or x.dtype != zero.dtype:
        return None
    if x.op is Ops.LOAD and x.src[0].op is Ops.INDEX and len(x.src[0].src) > 2:
        return x if set(conjuncts(c)) <= set(conjuncts(x.src[0].src[2])) else None
    if x.op is Ops.WHERE and _is_plus_zero(x.src[2]) and x.src[2].dtype == x.dtype:
        inner = conjuncts(x.src[0])
        if set(conjuncts(c)) <= set(inner):
            return x
        # the outer conditions first, as the lowerer ANDs a load's gate (so the merged condition is often that node)
        outer = conjuncts(c)
        both = outer + [k for k in inner if k not in outer]
        cond = both[0]
        for k in both[1:]:
            cond = cond.alu(Ops.AND, k)
        return cond.where(x.src[1], zero)
    return None


def do_where_of_where(c: UOp, x: UOp, b: UOp) -> UOp | None:
    # where(c, where(c2, a, .), b) is where(c, a, b) when c requires c2 (a piece of a cat padded with -0.0: its mask's
    # where around the pad's own)
    if x.op is not Ops.WHERE or not set(conjuncts(x.src[0])) <= set(conjuncts(c)):
        return None
    return c.where(x.src[1], b)


def do_load_never_read(x: UOp) -> UOp | None:
    # a load whose gate is constant false never reads memory: it is 0, and its address math goes with it
    if isinstance(x.dtype, PtrDType):
        return None
    zero = UOp.const(x.dtype.scalar, 0)
    return zero if x.dtype.count == 1 else UOp(Ops.VECTORIZE, x.dtype, (zero,) * x.dtype.count)


def gate_bounds(gate: UOp) -> dict[UOp, tuple[int, int]]:
    """The ranges a gate's conditions keep integer expressions in, where narrower than their own: x < c keeps x
    below c, !(x < c) keeps it at c or above."""
    bounds: dict[UOp, tuple[int, int]] = {}
    for cond in conjuncts(gate):
        negated = cond.op is Ops.CMPNE and cond.src[1].op is Ops.CONST and cond.src[1].arg is True
        cmp = cond.src[0] if negated else cond
        if cmp.op is not Ops.CMPLT or cmp.src[1].op is not Ops.CONST or not _is_int(cmp.src[0]):
            continue
        x, c = cmp.src[0], cmp.src[1].arg
        lo, hi = bounds.get(x, (x.vmin, x.vmax))
        bounds[x] = (max(lo, c), hi) if negated else (lo, min(hi, c - 1))
    return {x: (lo, hi) for x, (lo, hi) in bounds.items() if (lo, hi) != (x.vmin, x.vmax) and lo <= hi}


def _swap(x: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """x with the nodes in `mapping` replaced (not looked into), everything else rebuilt only where it changed."""
    new: dict[UOp, UOp] = dict(mapping)
    for n in x.toposort(gate=lambda n: n not in mapping):
        src = tuple([new[s] for s in n.src])
        new[n] = n if src == n.src else UOp(n.op, n.dtype, src, n.arg)
    return new[x]


def _inside_loops(n: UOp) -> bool:
    # an address's own arithmetic: not a loop counter, nor a loop that has finished
    return n.op is not Ops.RANGE and n.op is not Ops.END


def do_index_given_gate(x: UOp) -> UOp | None:
    # where the gate is false the address is never used: simplify it knowing the gate holds (a padded view's offset
    # can go negative only in the padding, and its div/mod chains fold once it can't); the conditions' expressions are
    # swapped for variables of the narrower ranges, the index simplified, and the expressions put back
    bounds = gate_bounds(x.src[2])
    if not bounds:
        return None
    idx = x.src[1]
    # a loop counter is a value here: what its RANGE is ordered after (an accumulator's reset, indexed by the lanes the
    # gate bounds) is not part of the address, and rebuilt under the gate it would be a second loop. So is a finished
    # loop: an index read from an accumulator after its END (a gather at an argmax) rebuilt under the gate would be a
    # second END of the same loop, which no order of the code can place
    inner = idx.toposort(gate=_inside_loops)
    loops = {r: r for n in (idx, *inner) for r in (n, *n.src) if r.op is Ops.RANGE or r.op is Ops.END}
    nodes = {**inner, **loops}
    # narrower ranges simplify divisions and remainders; a sum of products stays what it is
    if not any(n.op in (Ops.IDIV, Ops.MOD) for n in nodes):
        return None
    stand_ins = {
        e: UOp.variable(f"gate bound {i}", lo, hi, e.dtype)
        for i, (e, (lo, hi)) in enumerate(bounds.items())
        if e in nodes
    }
    if not stand_ins:
        return None
    # the index's nodes are simplified already (a rewrite reaches the INDEX after its sources): only what the stand-ins
    # change is simplified again
    simplified = simplify(_swap(idx, {**loops, **stand_ins}), {n: n for n in nodes})
    new_idx = _swap(simplified, {**loops, **{v: e for e, v in stand_ins.items()}})
    # only a smaller index: the rule can't undo what another rule did, so rewriting ends
    if len(new_idx.toposort(gate=_inside_loops)) >= len(inner):
        return None
    return x.replace(src=(x.src[0], new_idx, *x.src[2:]))


def do_add_zero(x: UOp, z: UOp) -> UOp | None:
    return x if not dtypes.is_float(x.dtype) or math.copysign(1.0, z.arg) < 0 else None


def do_and_left_assoc(x: UOp, y: UOp, z: UOp) -> UOp:
    # one shape for an AND chain, ((a & b) & c): the same conditions ANDed in the same order are the same node, so a
    # where's merged condition finds the load's gate
    return x.alu(Ops.AND, y).alu(Ops.AND, z)


# ---------------------------------------------------------------------------------------------------------------------
# the matcher

pm_symbolic = PatternMatcher(
    [
        # fold ops on constants, and integers whose range leaves one value
        (UPat(GroupOp.ALU | {Ops.CAST}, name="x"), do_fold_constants),
        (UPat(GroupOp.ALU, dtype=INT_DTYPES, name="x"), do_fold_known_range),
        # constants on the right of commutative ops, so the rules below see one form
        (UPat(GroupOp.Commutative, src=(UPat.cvar(), UPat()), name="x"), do_canonical_const_right),
        # identities
        # (a float x + 0.0 is not x when x is -0.0: only + -0.0 leaves every float as it is)
        (UPat.var("x") + UPat.const(None, 0).named("z"), do_add_zero),
        (UPat.var("x") * 1, lambda x: x),
        (UPat.var("x", INT_DTYPES) * 0, lambda x: x.const_like(0)),
        (UPat.var("x") // 1, lambda x: x),
        (UPat(Ops.FDIV, src=(UPat.var("x"), UPat.const(None, 1.0))), lambda x: x),
        (UPat(Ops.CAST, name="c", src=(UPat.var("x"),)), lambda c, x: x if c.dtype == x.dtype else None),
        (UPat(Ops.WHERE, src=(UPat.var(), UPat.var("a"), UPat.var("a"))), lambda a: a),
        (UPat(Ops.AND, src=[UPat.var("x"), UPat.const(dtypes.bool, True)]), lambda x: x),
        (UPat(Ops.AND, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
        (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
        # selects and gates: a constant condition picks a side; a load never read is 0, a gate always true goes;
        # where(c, ., 0) around a value already 0 where c is false goes (padding levels around a gated load)
        (UPat(Ops.WHERE, src=(UPat.cvar("c"), UPat.var("a"), UPat.var("b"))), do_where_const_cond),
        (UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var("x"), UPat.cvar("zero"))), do_where_of_zero_outside),
        (UPat(Ops.WHERE, src=(UPat.var("c"), UPat(Ops.WHERE, name="x"), UPat.var("b"))), do_where_of_where),
        (
            UPat(Ops.WHERE, src=(UPat.var("c"), UPat.const(dtypes.bool, True), UPat.const(dtypes.bool, False))),
            lambda c: c,
        ),
        (
            UPat(
                Ops.LOAD,
                src=(UPat(Ops.INDEX, src=(UPat(), UPat(), UPat.const(dtypes.bool, False))),),
                name="x",
                allow_any_len=True,
            ),
            do_load_never_read,
        ),
        (
            UPat(Ops.INDEX, src=(UPat(), UPat(), UPat.const(dtypes.bool, True)), name="x"),
            lambda x: x.replace(src=x.src[:2]),
        ),
        (UPat(Ops.INDEX, src=(UPat(), UPat(), UPat()), name="x"), do_index_given_gate),
        (UPat(Ops.AND, src=[UPat.var("x"), UPat.const(dtypes.bool, False)]), lambda x: x.const_like(False)),
        (
            UPat(Ops.AND, dtype=dtypes.bool, src=(UPat.var("x"), UPat(Ops.AND, src=(UPat.var("y"), UPat.var("z"))))),
            do_and_left_assoc,
        ),
        # integer sums: merge like terms and constants; distribute constant factors
        (UPat(Ops.ADD, name="x"), do_combine_terms),
        # (integers only: for floats these would change the rounding, and exact tricks like Cody-Waite rely on it)
        # (the product of the constants wrapped as the dtype wraps it: exact modulo 2**bits, as the product it replaces)
        ((UPat.var("x", INT_DTYPES) + UPat.cvar("c1")) * UPat.cvar("c2"), lambda x, c1, c2: x * c2 + _times(c1, c2)),
        ((UPat.var("x", INT_DTYPES) * UPat.cvar("c1")) * UPat.cvar("c2"), lambda x, c1, c2: x * _times(c1, c2)),
        # division and modulo by constants
        (UPat((Ops.IDIV, Ops.MOD), name="op", src=(UPat.var("x"), UPat.cvar("d"))), do_fold_divmod),
        ((UPat.var("x") // UPat.cvar("a")) // UPat.cvar("b"), do_nested_div),
        ((UPat.var("x") % UPat.cvar("m")) % UPat.cvar("n"), do_nested_mod),
        ((UPat.var("x") % UPat.cvar("m")) // UPat.cvar("a"), do_mod_then_div),
        # comparisons against constants
        (UPat(Ops.CMPLT, src=(UPat.var("x"), UPat.cvar("c"))), do_lt_const),
    ]
)


def simplify(x: UOp, cache: dict[UOp, UOp] | None = None) -> UOp:
    """`x` simplified; pass the same `cache` to many calls over shared subexpressions."""
    from uopkit.uop.ops import graph_rewrite

    return graph_rewrite(x, pm_symbolic, name="simplify", cache=cache)
