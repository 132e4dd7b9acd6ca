"""Symbolic simplification as rewrite rules: constant folding, identities, like terms, div/mod over known ranges."""

from __future__ import annotations

import math
from typing import Any

from uopkit.dtype import dtypes
from uopkit.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, exec_alu

INT_DTYPES = (*dtypes.ints, dtypes.bool)


def _is_int(x: UOp) -> bool:
    return dtypes.is_int(x.dtype) and x.dtype.count == 1


# ---------------------------------------------------------------------------------------------------------------------
# constant folding


def do_fold_constants(x: UOp) -> UOp | None:
    if x.dtype.count != 1 or not all(s.op is Ops.CONST and not isinstance(s.arg, tuple) for s in x.src):
        return None
    if x.op is Ops.CAST:
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
    if x.op is Ops.CONST:
        ret = (), x.arg
    elif x.op is Ops.ADD:
        ta, ca = _decompose(x.src[0])
        tb, cb = _decompose(x.src[1])
        ret = ta + tb, ca + cb
    elif x.op is Ops.MUL and x.src[1].op is Ops.CONST:
        terms, c = _decompose(x.src[0])
        k = x.src[1].arg
        ret = tuple([(coef * k, t) for coef, t in terms]), c * k
    else:
        ret = ((1, x),), 0
    x.__dict__["_decomposed"] = ret
    return ret


def build_sum(terms: list[tuple[int, UOp]], const: int, like: UOp) -> UOp:
    """The canonical expression for sum(coef*term) + const: like terms merged, constant last."""
    merged: dict[UOp, int] = {}
    for coef, t in terms:
        merged[t] = merged.get(t, 0) + coef
    ret: UOp | None = None
    for t, coef in sorted(merged.items(), key=lambda kv: kv[0].tuplize):
        if coef == 0:
            continue
        part = t if coef == 1 else UOp(Ops.MUL, like.dtype, (t, like.const_like(coef)))
        ret = part if ret is None else UOp(Ops.ADD, like.dtype, (ret, part))
    if ret is None:
        return like.const_like(const)
    return ret if const == 0 else UOp(Ops.ADD, like.dtype, (ret, like.const_like(const)))


def do_combine_terms(x: UOp) -> UOp | None:
    # only rebuild when it simplifies: repeated terms or several constants
    if not _is_int(x):
        return None
    terms, const = decompose(x)
    n_consts = _count_consts(x)
    if len({t for _, t in terms}) == len(terms) and n_consts <= 1 and not (n_consts == 1 and const == 0):
        return None
    ret = build_sum(terms, const, x)
    return None if ret is x else ret


def _count_consts(x: UOp) -> int:
    if x.op is Ops.CONST:
        return 1
    if x.op is Ops.ADD:
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
    if x.vmin < 0:
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
    # carry into the quotient ((n*2048 + r) // 65536 == n // 32 for 0 <= r < 2048)
    for g in sorted({math.gcd(div, c) for c, _ in terms}, reverse=True):
        big = [(c // g, t) for c, t in terms if c % g == 0]
        if g == 1 or g == div or not big or len(big) == len(terms):
            continue
        small = build_sum([(c, t) for c, t in terms if c % g], const, x)
        if not 0 <= small.vmin <= small.vmax < g:
            continue
        inner = build_sum(big, 0, x)
        if inner.vmin < 0:
            continue
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
    if not _is_int(x):
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


def do_canonical_const_right(x: UOp) -> UOp | None:
    if x.src[0].op is Ops.CONST and x.src[1].op is not Ops.CONST:
        return x.replace(src=(x.src[1], x.src[0]))
    return None


def _as_bool_const(x: Any) -> bool | None:
    return bool(x) if isinstance(x, (bool, int)) else None


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
        (UPat.var("x") + 0, lambda x: x),
        (UPat.var("x") * 1, lambda x: x),
        (UPat.var("x", INT_DTYPES) * 0, lambda x: x.const_like(0)),
        (UPat.var("x") // 1, lambda x: x),
        (UPat(Ops.FDIV, src=(UPat.var("x"), UPat.const(None, 1.0))), lambda x: x),
        (UPat(Ops.CAST, name="c", src=(UPat.var("x"),)), lambda c, x: x if c.dtype == x.dtype else None),
        (UPat(Ops.WHERE, src=(UPat.var(), UPat.var("a"), UPat.var("a"))), lambda a: a),
        (UPat(Ops.AND, src=[UPat.var("x"), UPat.const(dtypes.bool, True)]), lambda x: x),
        (UPat(Ops.AND, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
        (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
        # integer sums: merge like terms and constants; distribute constant factors
        (UPat(Ops.ADD, name="x"), do_combine_terms),
        # (integers only: for floats these would change the rounding, and exact tricks like Cody-Waite rely on it)
        ((UPat.var("x", INT_DTYPES) + UPat.cvar("c1")) * UPat.cvar("c2"), lambda x, c1, c2: x * c2 + c1.arg * c2.arg),
        ((UPat.var("x", INT_DTYPES) * UPat.cvar("c1")) * UPat.cvar("c2"), lambda x, c1, c2: x * (c1.arg * c2.arg)),
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
