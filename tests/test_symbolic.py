"""Symbolic simplification of index arithmetic, checked by evaluating before and after."""

import itertools

import pytest

from uopkit import dtypes
from uopkit.uop.ops import Ops, UOp, exec_alu
from uopkit.uop.symbolic import simplify


def rng(n, i):
    return UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), (i, "loop"))


def evaluate(u, env):
    if u.op is Ops.CONST:
        return u.arg
    if u.op is Ops.RANGE:
        return env[u.arg[0]]
    return exec_alu(u.op, u.dtype, [evaluate(s, env) for s in u.src])


def count_nodes(u):
    return len(u.toposort())


R0, R1, R2 = rng(3, 0), rng(4, 1), rng(5, 2)
CASES = {
    "reshape_div": (R0 * 4 + R1) // 4,
    "reshape_mod": (R0 * 4 + R1) % 4,
    "const_fold_in_div": (R0 * 4 + R1 + 8) // 4,
    "gcd": (R1 * 2 + 2) // 2,
    "like_terms": (R0 * 4 + R1) * 2 + (R0 * 4 + R1),
    "mod_of_multiple": (R0 * 12 + R1 * 3) % 6,
    "nested_div": ((R0 * 4 + R1) // 2) // 2,
    "nested_mod": ((R0 * 20 + R1 * 5 + R2) % 10) % 5,
    "mod_then_div": ((R0 * 20 + R1 * 5 + R2) % 20) // 5,
    "cmp_shift": (R0 * 4 + R1 + 1).lt(5),
    "always_true": R1.lt(10),
    "identities": (R0 + 0) * 1 + R1 * 0,
}


@pytest.mark.parametrize("name", list(CASES))
def test_simplify_preserves_values(name):
    expr = CASES[name]
    simple = simplify(expr)
    for env in itertools.product(range(3), range(4), range(5)):
        assert evaluate(simple, dict(enumerate(env))) == evaluate(expr, dict(enumerate(env))), name


def test_simplify_shrinks():
    assert simplify((R0 * 4 + R1) // 4) is R0
    assert simplify((R0 * 4 + R1) % 4) is R1
    assert simplify(R1.lt(10)).arg is True
    assert simplify((R0 + 0) * 1 + R1 * 0) is R0
    assert count_nodes(simplify(CASES["like_terms"])) < count_nodes(CASES["like_terms"])
    assert simplify(((R0 * 4 + R1) // 2) // 2) is R0


def test_constant_folding_respects_dtype():
    big = UOp.const(dtypes.int8, 100) + UOp.const(dtypes.int8, 100)
    assert simplify(big).arg == -56
    f = UOp.const(dtypes.float32, 0.1) * 3.0
    assert simplify(f).op is Ops.CONST


def test_c_division_semantics():
    x = UOp.const(dtypes.int32, -7)
    assert simplify(x // 2).arg == -3
    assert simplify(x % 2).arg == -1


def test_div_mod_with_a_remainder_below_a_common_factor():
    # (n*2048 + r) // 65536 == n // 32 when 0 <= r < 2048: the panel layout's index (schedule/packing.py)
    from uopkit.uop.symbolic import simplify

    n, r = UOp.variable("n", 0, 2047), UOp.variable("r", 0, 2047)
    assert simplify((n * 2048 + r) // 65536) is simplify(n // 32)
    assert simplify((n * 2048 + r) % 65536) is simplify((n % 32) * 2048 + r)
    # checked against Python's arithmetic on the corners and a few values in between
    for nv in (0, 1, 31, 32, 33, 1000, 2047):
        for rv in (0, 1, 2047):
            for expr, want in (
                ((n * 2048 + r) // 65536, (nv * 2048 + rv) // 65536),
                ((n * 2048 + r) % 65536, (nv * 2048 + rv) % 65536),
            ):
                got = simplify(expr.substitute({n: n.const_like(nv), r: r.const_like(rv)}))
                assert got.arg == want
    # a remainder that can reach the factor is left alone: (n*2048 + r) // 65536 with r up to 2048 is not n // 32
    r2 = UOp.variable("r2", 0, 2048)
    assert simplify((n * 2048 + r2) // 65536) is not simplify(n // 32)
